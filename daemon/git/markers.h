/*
 * Conflict markers in a file's text, as git's merge writes them: a block
 *
 *   <<<<<<< ours-label
 *   ...ours...
 *   ||||||| base-label      (diff3 and zdiff3 styles only)
 *   ...base...
 *   =======
 *   ...theirs...
 *   >>>>>>> theirs-label
 *
 * with every marker at the start of a line. A decision file is JSON,
 * whose own lines never start with these characters (a newline inside
 * content is escaped), so a marker found there is a conflict, never data.
 * Pure text functions: no I/O, any thread.
 */
#ifndef VMEM_DAEMON_MARKERS_H
#define VMEM_DAEMON_MARKERS_H

#include <stdbool.h>
#include <stddef.h>

enum markers_side { MARKERS_OURS, MARKERS_THEIRS };

/* True when text holds a conflict marker at the start of a line. */
bool markers_found(const char *text, size_t len);

/*
 * The text with every conflict block replaced by its side: the lines
 * outside the blocks, and inside each block the lines of that side. NULL
 * (errno EINVAL) when the blocks are not well formed, or ENOMEM.
 * malloc'd, NUL-terminated, length in *out_len; caller frees.
 */
char *markers_side(const char *text, size_t len, enum markers_side side,
		   size_t *out_len);

#endif
