/*
 * Conflict records on disk: the files of protocol/conflict.h in
 * <statedir>/conflicts (statedir is <gitdir>/vmem, statedir.h). The
 * directory is created 0700 and checked as statedir_sub checks (ours,
 * not writable by others, not a symlink); every file is opened
 * O_NOFOLLOW relative to it and written durably (temporary file, fsync,
 * rename, fsync of the directory), so a record that was written survives
 * a crash.
 *
 * Blocking: the thread pool, or start-up.
 */
#ifndef VMEM_DAEMON_RECORDS_H
#define VMEM_DAEMON_RECORDS_H

#include <jansson.h>
#include <stddef.h>

#include "statedir.h"

#define RECORDS_LIST_MAX 1000 /* records a listing returns at most */

/* Write (or replace) record name with text. 0 or -errno with errmsg. */
int records_write(const struct statedir *sd, const char *name, const char *text,
		  size_t len, char *errmsg, size_t errn);

/*
 * Read record name (at most CONFLICT_FILE_MAX bytes) into *text
 * (malloc'd, NUL-terminated, caller frees). 0, -ENOENT when absent, or
 * -errno with errmsg.
 */
int records_read(const struct statedir *sd, const char *name, char **text,
		 size_t *len, char *errmsg, size_t errn);

/* Remove record name (absent is fine). 0 or -errno with errmsg. */
int records_remove(const struct statedir *sd, const char *name, char *errmsg,
		   size_t errn);

/*
 * Call cb(ctx, name) for each record whose name starts with prefix, in
 * name order; a non-zero return stops and is returned. A missing
 * directory has none. 0 or -errno with errmsg.
 */
int records_scan(const struct statedir *sd, const char *prefix,
		 int (*cb)(void *ctx, const char *name), void *ctx,
		 char *errmsg, size_t errn);

/*
 * The records, newest first (by name: held ones last), each its JSON
 * object with a member "file" (its name) added; at most limit of them in
 * *out (new array reference), how many there are in *total. A file that
 * is not a record is listed as {"file", "error"}. A missing directory is
 * an empty list. 0 or -errno with errmsg.
 */
int records_list(const struct statedir *sd, int max_x, size_t limit,
		 json_t **out, size_t *total, char *errmsg, size_t errn);

#endif
