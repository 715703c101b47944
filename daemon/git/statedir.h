/*
 * The daemon's private state directory, <gitdir>/vmem, and every file and
 * directory below it: the tree's lock, the write-ahead log and its cut
 * copy, the commit marker, quarantine/, vmemd.log, and whatever local
 * record kinds keep there.
 *
 * Invariant: once statedir_init succeeded, the directory is held open as
 * a descriptor that was checked (a real directory, owned by the daemon's
 * effective uid, no access for group or other), and every name below it
 * is reached relative to that descriptor with O_NOFOLLOW: a symbolic link
 * planted there is refused, never followed, and a rename of the path
 * after start-up cannot redirect us. What is opened is checked again
 * (owner, type, mode) before it is used.
 *
 * What is refused, what is repaired: an entry that is not ours, that
 * group or other may write, or that is a symbolic link is refused (with
 * a message naming the path, its owner and its mode): somebody else may
 * have put or changed it. An entry of ours that group or other may only
 * read or search is tightened (0700 for directories, 0600 for files):
 * nobody else can have changed it, and our data stops being readable.
 *
 * Blocking (file system calls): at start-up, and on the worker threads
 * that use the files. A struct statedir is read-only after statedir_init
 * and statedir_sub, so several threads may use one at once.
 */
#ifndef VMEM_DAEMON_STATEDIR_H
#define VMEM_DAEMON_STATEDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#define STATEDIR_NAME "vmem"

struct statedir {
	int fd;	    /* the checked directory; -1 when closed */
	char *path; /* for messages only (owned) */
};

/*
 * Open <gitdir>/vmem, creating it (mode 0700 whatever the umask and the
 * repository's sharing) when it is absent, check it and every entry in
 * it (see above). What was tightened is described in note ("" when
 * nothing was; may be NULL). Returns 0, -EPERM (not ours, open to
 * others), -ELOOP (a symbolic link), -ENOTDIR, or another -errno; errmsg
 * says why with the path, the owner (name and uid) and the mode.
 */
int statedir_init(struct statedir *sd, const char *gitdir, char *note,
		  size_t noten, char *errmsg, size_t errn);

/*
 * The directory name below sd (quarantine, a segment directory), made
 * 0700 when create is set and it is absent, opened and checked as
 * statedir_init checks its directory, in *out (to be released with
 * statedir_done). 0 or -errno as for statedir_init.
 */
int statedir_sub(const struct statedir *sd, const char *name, bool create,
		 struct statedir *out, char *errmsg, size_t errn);

/*
 * Open the regular file name below sd with open(2)'s flags and mode
 * (O_NOFOLLOW, O_CLOEXEC and, while opening, O_NONBLOCK are added, so a
 * fifo planted there cannot block us; O_TRUNC is applied only after the
 * checks). Returns the descriptor, or -ELOOP (a symbolic link), -EINVAL
 * (not a regular file), -EPERM (not ours, or writable by others), another
 * -errno; errmsg says why. name is one path component.
 */
int statedir_open(const struct statedir *sd, const char *name, int flags,
		  mode_t mode, char *errmsg, size_t errn);

/* renameat(2) of from to to, both in sd. 0 or -errno. */
int statedir_rename(const struct statedir *sd, const char *from,
		    const char *to);

/* unlinkat(2) of the file name in sd. 0 or -errno (-ENOENT included). */
int statedir_unlink(const struct statedir *sd, const char *name);

/* fstatat(2) of name in sd without following a symlink. 0 or -errno. */
int statedir_stat(const struct statedir *sd, const char *name, struct stat *st);

/* fsync(2) the directory, so names created or renamed in it stay. */
int statedir_sync(const struct statedir *sd);

/* True once the directory was removed (its link count dropped to 0). */
bool statedir_removed(const struct statedir *sd);

/* Close and free; safe on a closed or zeroed statedir, and twice. */
void statedir_done(struct statedir *sd);

#endif
