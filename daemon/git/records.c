/*
 * Conflict records on disk (see records.h).
 */
#include "records.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errmsg.h"
#include "fdio.h"
#include "protocol/conflict.h"

static atomic_ulong tmp_counter;

/*
 * The records directory below the state directory, opened (and created
 * 0700 when create) and checked as statedir_sub checks: a directory of
 * ours, not a symlink, not writable by others. 0 with *dir, -ENOENT when
 * it does not exist and create is false, or -errno with errmsg.
 */
static int open_dir(const struct statedir *sd, bool create,
		    struct statedir *dir, char *errmsg, size_t errn)
{
	struct stat st;

	if (!create && statedir_stat(sd, CONFLICT_DIRNAME, &st) == -ENOENT) {
		dir->fd = -1;
		dir->path = NULL;
		return -ENOENT;
	}
	return statedir_sub(sd, CONFLICT_DIRNAME, create, dir, errmsg, errn);
}

int records_write(const struct statedir *sd, const char *name, const char *text,
		  size_t len, char *errmsg, size_t errn)
{
	char tmp[CONFLICT_NAME_MAX + 64];
	struct statedir dir;
	int dfd, fd = -1, rc;

	rc = open_dir(sd, true, &dir, errmsg, errn);
	if (rc < 0)
		return rc;
	dfd = dir.fd;
	snprintf(tmp, sizeof(tmp), ".tmp-%ld-%lu-%s", (long)getpid(),
		 atomic_fetch_add(&tmp_counter, 1) + 1, name);
	fd = openat(dfd, tmp,
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = fdio_write(fd, text, len);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	fd = -1;
	if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0)
		rc = -errno;
	if (rc == 0 && fsync(dfd) < 0)
		rc = -errno;
	if (rc == 0) {
		statedir_done(&dir);
		return 0;
	}
	unlinkat(dfd, tmp, 0);
fail:
	errmsg_set(errmsg, errn, "cannot write %s/%s: %s", dir.path, name,
		   strerror(-rc));
	statedir_done(&dir);
	return rc;
}

/* Read name in dfd (a regular file of at most CONFLICT_FILE_MAX bytes). */
static int read_at(int dfd, const char *name, char **text, size_t *len)
{
	struct stat st;
	size_t got = 0;
	char *buf = NULL;
	int fd, rc = 0;
	ssize_t r;

	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > CONFLICT_FILE_MAX) {
		rc = S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			goto out;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	buf[got] = '\0';
	*text = buf;
	*len = got;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

int records_read(const struct statedir *sd, const char *name, char **text,
		 size_t *len, char *errmsg, size_t errn)
{
	struct statedir dir;
	int rc;

	*text = NULL;
	rc = open_dir(sd, false, &dir, errmsg, errn);
	if (rc < 0)
		return rc;
	rc = read_at(dir.fd, name, text, len);
	if (rc < 0 && rc != -ENOENT)
		errmsg_set(errmsg, errn, "cannot read %s/%s: %s", dir.path,
			   name, strerror(-rc));
	statedir_done(&dir);
	return rc;
}

int records_remove(const struct statedir *sd, const char *name, char *errmsg,
		   size_t errn)
{
	struct statedir dir;
	int rc;

	rc = open_dir(sd, false, &dir, errmsg, errn);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	if (unlinkat(dir.fd, name, 0) < 0 && errno != ENOENT)
		rc = -errno;
	else if (fsync(dir.fd) < 0)
		rc = -errno;
	if (rc < 0)
		errmsg_set(errmsg, errn, "cannot remove %s/%s: %s", dir.path,
			   name, strerror(-rc));
	statedir_done(&dir);
	return rc;
}

int records_scan(const struct statedir *sd, const char *prefix,
		 int (*cb)(void *ctx, const char *name), void *ctx,
		 char *errmsg, size_t errn)
{
	struct dirent **names = NULL;
	struct statedir dir;
	int n, rc;

	rc = open_dir(sd, false, &dir, errmsg, errn);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	n = scandirat(dir.fd, ".", &names, NULL, alphasort);
	if (n < 0) {
		rc = -errno;
		errmsg_set(errmsg, errn, "cannot list %s: %s", dir.path,
			   strerror(-rc));
		statedir_done(&dir);
		return rc;
	}
	statedir_done(&dir);
	for (int i = 0; i < n; i++) {
		if (rc == 0 &&
		    strncmp(names[i]->d_name, prefix, strlen(prefix)) == 0)
			rc = cb(ctx, names[i]->d_name);
		free(names[i]);
	}
	free(names);
	return rc;
}

static int is_record_name(const struct dirent *de)
{
	size_t n = strlen(de->d_name);

	return de->d_name[0] != '.' && n > 5 &&
	       strcmp(de->d_name + n - 5, ".json") == 0;
}

/* Newest first: timestamped names sort by time, held ones after them. */
static int newest_first(const struct dirent **a, const struct dirent **b)
{
	return -strcmp((*a)->d_name, (*b)->d_name);
}

int records_list(const struct statedir *sd, int max_x, size_t limit,
		 json_t **out, size_t *total, char *errmsg, size_t errn)
{
	struct dirent **names = NULL;
	json_t *list = json_array();
	struct statedir dir;
	int n = 0, rc;

	*out = NULL;
	*total = 0;
	if (!list) {
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	rc = open_dir(sd, false, &dir, errmsg, errn);
	if (rc == -ENOENT) {
		*out = list;
		return 0;
	}
	if (rc < 0) {
		json_decref(list);
		return rc;
	}
	n = scandirat(dir.fd, ".", &names, is_record_name, newest_first);
	if (n < 0) {
		rc = -errno;
		n = 0;
		errmsg_set(errmsg, errn, "cannot list %s: %s", dir.path,
			   strerror(-rc));
		goto out;
	}
	*total = (size_t)n;
	for (int i = 0; i < n && (size_t)i < limit; i++) {
		char msg[VMEM_ERRMSG_LEN], *text = NULL;
		const char *name = names[i]->d_name;
		json_t *rec = NULL;
		size_t len = 0;
		int r = read_at(dir.fd, name, &text, &len);

		if (r == 0)
			rec = conflict_record_parse(text, len, max_x, msg);
		else
			snprintf(msg, sizeof(msg), "%s", strerror(-r));
		free(text);
		if (!rec)
			rec = json_pack("{s:s}", "error", msg);
		if (rec &&
		    json_object_set_new(rec, "file", json_string(name))) {
			json_decref(rec);
			rec = NULL;
		}
		if (!rec || json_array_append_new(list, rec)) {
			rc = -ENOMEM;
			errmsg_set(errmsg, errn, "out of memory");
			goto out;
		}
	}
out:
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	statedir_done(&dir);
	if (rc < 0)
		json_decref(list);
	else
		*out = list;
	return rc;
}
