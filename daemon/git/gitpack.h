/*
 * Many new objects as one pack: a batch that adds thousands of files
 * (a first commit of the whole memory) writes its blobs as one packfile
 * (no deltas, zlib's fastest level) and its version-2 index, instead of
 * one loose object file each, as it reads them (no object's bytes are
 * held after its call). The caller has hashed every object already, so
 * nothing is inflated or hashed again (libgit2's indexer did both). Both files
 * are written under temporary names in the pack directory, fsynced, and only
 * then linked to their final names, the pack before its index: a pack git can
 * see is always whole. Making the directory entries durable is the caller's
 * (the commit's syncfs before the branch moves).
 *
 * Blocking; one pack at a time per caller.
 */
#ifndef VMEM_DAEMON_GITPACK_H
#define VMEM_DAEMON_GITPACK_H

#include <git2.h>
#include <stddef.h>

struct gitpack;

/*
 * Start a pack in packdir (<objects>/pack). 0 or -errno (errmsg).
 */
int gitpack_begin(struct gitpack **out, const char *packdir, char *errmsg,
		  size_t errn);

/*
 * Add one object: its type, its id as git_odb_hash gives it for the same
 * type and bytes (trusted: a wrong id makes a corrupt pack), and its
 * bytes (borrowed for the call). 0, 1 when the pack holds that id
 * already (nothing added), or -errno (errmsg).
 */
int gitpack_add(struct gitpack *p, git_object_t type, const git_oid *id,
		const void *data, size_t len, char *errmsg, size_t errn);

/* The objects added so far. */
size_t gitpack_count(const struct gitpack *p);

/* Finish a pack of at least one object: its count and trailer, index,
 * fsync, both linked into place. The caller refreshes its odb to see
 * them. 0 or -errno (errmsg). */
int gitpack_commit(struct gitpack *p, char *errmsg, size_t errn);

/* Release (a pack not committed leaves nothing behind). NULL-safe. */
void gitpack_free(struct gitpack *p);

#endif
