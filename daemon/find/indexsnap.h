/*
 * The snapshot of the decisions' index, a file of the state directory
 * (<gitdir>/vmem/snapshot): every record with the stamp of the file it
 * came from, so a start can take a decision from the snapshot instead of
 * opening, reading and parsing its file, once an lstat shows the file is
 * still the one the record was made from.
 *
 * It is only a cache: a start that finds it missing, damaged, of another
 * format or written for other files falls back to reading the files, and
 * an entry is used only for a file whose stamp (inode, size, mtime and
 * ctime to the nanosecond) is the one saved with it. A checkout, pull,
 * edit, removal or replacement while the daemon is down changes the
 * stamp (ctime cannot be set from user space), so such a file is read
 * again. Entries whose file changed less than INDEXSNAP_RACY_NS before
 * the snapshot was made are not saved, and those not older than the
 * snapshot file's own mtime are not used: a second change within the
 * same clock tick could leave the stamp as it was (git's "racily clean"
 * entries), so those files are always read.
 *
 * Format (host byte order, the magic tells): "VMSNAP1\n", u64 count,
 * i64 made_ns; count entries of {i32 x, y, z; u32 json length; i64
 * version; u64 inode, size; i64 mtime_ns, ctime_ns; the compact JSON};
 * then u64 count again and the CRC-32C of everything before it. Written
 * to snapshot.tmp and renamed over snapshot, unsynced: after a crash a
 * torn file fails its check and is ignored.
 *
 * Blocking (file I/O): at start-up and after the loop has stopped.
 */
#ifndef VMEM_DAEMON_INDEXSNAP_H
#define VMEM_DAEMON_INDEXSNAP_H

#include <stddef.h>
#include <stdint.h>

#include "index.h"
#include "statedir.h"
#include "vmdir.h"

#define INDEXSNAP_NAME	   "snapshot"
#define INDEXSNAP_TMP_NAME "snapshot.tmp"
#define INDEXSNAP_RACY_NS  1000000000LL

/* A snapshot read back: per slot of an index, the record and its file's
 * stamp (rec NULL: none). */
struct indexsnap {
	struct indexsnap_entry {
		struct record *rec; /* owned until taken */
		struct vmdir_stamp stamp;
	} * slots;
	size_t n_slots;
	size_t count; /* entries read */
	size_t taken; /* handed out by indexsnap_take */
};

/*
 * Save every record of ix whose slot is not dirty (dirty may be NULL)
 * and whose stamp is known (stamps[slot], inode non-zero) and older than
 * now - INDEXSNAP_RACY_NS by its ctime and mtime. Returns the number of
 * entries written, or -errno (errmsg): then whatever snapshot was there
 * is removed, so none outlives a failed save.
 */
long indexsnap_save(const struct statedir *sd, const struct index *ix,
		    const struct vmdir_stamp *stamps, const uint8_t *dirty,
		    char *errmsg, size_t errn);

/*
 * Read the snapshot for an index of ix's shape into s (zeroed by the
 * caller). Entries beyond ix's coordinates are dropped. Returns 0,
 * -ENOENT when there is none, -EBADMSG when it is damaged or of another
 * format (errmsg says how; s is left empty), another -errno.
 */
int indexsnap_load(struct indexsnap *s, const struct statedir *sd,
		   const struct index *ix, char *errmsg, size_t errn);

/* The record of slot when its saved stamp is stamp, handed to the caller
 * (one take per slot); NULL otherwise. */
struct record *indexsnap_take(struct indexsnap *s, size_t slot,
			      const struct vmdir_stamp *stamp);

/* Free what was not taken. Safe on a zeroed s, and twice. */
void indexsnap_done(struct indexsnap *s);

/* Remove the snapshot (and a leftover snapshot.tmp). 0 or -errno. */
int indexsnap_remove(const struct statedir *sd);

#endif
