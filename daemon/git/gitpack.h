/*
 * Many new objects as one pack: a batch that adds thousands of files
 * (a first commit of the whole memory) writes its blobs as one packfile
 * (no deltas, zlib's fastest level) indexed by libgit2's indexer, instead
 * of one loose object file each. The pack and its index are fsynced when
 * committed, so the objects are durable before any ref points to them.
 *
 * Blocking; one pack at a time per caller.
 */
#ifndef VMEM_DAEMON_GITPACK_H
#define VMEM_DAEMON_GITPACK_H

#include <git2.h>
#include <stddef.h>

struct gitpack;

/*
 * Start a pack of count objects in packdir (<objects>/pack) for odb.
 * 0 or -errno (errmsg).
 */
int gitpack_begin(struct gitpack **out, git_odb *odb, const char *packdir,
		  size_t count, char *errmsg, size_t errn);

/* Add one object (exactly count are added). 0 or -errno (errmsg). */
int gitpack_add(struct gitpack *p, git_object_t type, const void *data,
		size_t len, char *errmsg, size_t errn);

/* Finish: trailer, index, fsync, visible to odb. 0 or -errno (errmsg). */
int gitpack_commit(struct gitpack *p, char *errmsg, size_t errn);

/* Release (a pack not committed leaves nothing behind). NULL-safe. */
void gitpack_free(struct gitpack *p);

#endif
