/*
 * The layer-aware merge driver of decision files, and its registration.
 *
 * `vmem merge-driver %O %A %B %P` is run by git for a path whose
 * .gitattributes say merge=vmem, when both sides changed it (git does not
 * call a driver for a file deleted on one side: vmemd applies the rule
 * "keep the modification" to those). Both sides must be decisions of the
 * coordinate of the path, else the conflict is left to the user. z=1:
 * the earlier timestamp wins (the first writer); z=2..4: the higher
 * version wins, then the later timestamp. The losing version is kept in a
 * conflict record in <gitdir>/vmem/conflicts/ (protocol/conflict.h), and
 * `vmem conflicts` lists it.
 *
 * `vmem init` registers the driver in a working tree: it appends to the
 * root's .gitattributes the lines it lacks (merge=vmem for everything
 * under .vector-memory and, since experience shards are append-only JSON
 * lines, merge=union under .vector-memory/experiences), never rewriting a
 * line of the user's, and sets merge.vmem.name and merge.vmem.driver (this
 * program's absolute path) in the repository's configuration. Running it
 * again changes nothing; it says what it wrote.
 */
#ifndef VMEM_CLI_MERGE_H
#define VMEM_CLI_MERGE_H

#include <stdbool.h>

/* Exit status: 0 resolved (the result is in a), 1 conflict left, 2 usage
 * or a local error. Messages on stderr. */
int merge_driver(const char *o, const char *a, const char *b, const char *path);

/* Register the driver in the working tree at root (canonical). Exit
 * status: 0, or 2 with a message on stderr. With json the result is one
 * JSON object: {"gitattributes": [lines appended], "config": {key:
 * value set}}. */
int merge_init(const char *root, bool json);

#endif
