/*
 * Is a git operation running in the working tree? git keeps state files
 * in the tree's own git directory while a merge, rebase (autostash
 * included: the state directory exists before the stash is made), am,
 * cherry-pick, revert, sequencer or bisect is in progress, and holds
 * index.lock while it writes the index and the working tree (checkout,
 * reset, stash, add, commit); `git stash` reads the working tree into a
 * temporary index.stash.<pid>. While any of those is there the file writer
 * keeps away from the working tree (it yields): the acknowledged writes
 * stay in the log and the index and are written once the operation ends.
 *
 * What cannot be seen: a git command that has read the index or the
 * working tree but not yet created its lock or state files (see
 * docs/operations.md, "Working beside git").
 *
 * Blocking only in the sense of a directory listing and a few lstat
 * calls: safe on any thread.
 */
#ifndef VMEM_DAEMON_GITOP_H
#define VMEM_DAEMON_GITOP_H

#include <stdbool.h>
#include <stddef.h>

/*
 * True when an operation is in progress in the tree whose git directory
 * is gitdir (no trailing slash needed), with why ("merge in progress",
 * "index.lock is held by another process", ...) in why (n bytes). A
 * git directory that cannot be listed, or a state file that cannot be
 * looked at, counts as in progress (we cannot tell), with the error in
 * why. Our own commit's index.lock (gitlock_ours) is no git operation.
 */
bool gitop_busy(const char *gitdir, char *why, size_t n);

/*
 * True when a git process of ours (same user), other than ourselves and
 * our own children, runs in the working tree root (its current directory
 * is root or below it): one started at most max_age_s ago (0: of any
 * age), running one of subcommands (a NULL-terminated list of arguments,
 * e.g. "commit") unless that is NULL; its pid in *pid (may be NULL). A git
 * command may have read HEAD and the index before it creates any lock or state
 * file, and a commit of ours meanwhile would make it fail (on our index.lock,
 * or when it moves the branch). Scans /proc: every process's name (about
 * 7 us a process), then only git's start time, arguments and directory.
 */
bool gitop_git_in_tree(const char *root, double max_age_s,
		       const char *const *subcommands, long *pid);

/*
 * The git subcommands that change the working tree or the index (rebase,
 * stash, merge, pull, checkout, reset...): while one runs in the tree the
 * file writer yields, even before the command has made a state file or
 * taken index.lock (a rebase with autostash checks the tree is clean
 * after its stash: a file written between would make it refuse).
 */
extern const char *const gitop_tree_changers[];

#endif
