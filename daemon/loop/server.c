/*
 * The listener. The socket directory must be a real directory owned by us
 * with no access for group or others (tmux's rule); a leftover socket is
 * replaced only after a connect to it fails; the socket is created with
 * umask 0177 so it is 0600 from its first instant. Under socket activation
 * the listening socket is systemd's: adopted after checking what it is,
 * and never unlinked by us.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "log.h"
#include "protocol/sockpath.h"
#include "sdnotify.h"

/* Create the socket directory if needed and check it is safe to use. */
static int check_socket_dir(const char *path, char *errmsg, size_t errn)
{
	char *copy = strdup(path);
	const char *dir;
	struct stat st;
	int rc = 0;

	if (!copy) {
		snprintf(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	dir = dirname(copy);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(errmsg, errn, "cannot create socket directory %s: %s",
			 dir, strerror(errno));
		goto out;
	}
	if (lstat(dir, &st) < 0) {
		rc = -errno;
		snprintf(errmsg, errn, "socket directory %s: %s", dir,
			 strerror(errno));
		goto out;
	}
	if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
		rc = -ENOTDIR;
		snprintf(errmsg, errn,
			 "socket directory %s is not a directory (or is a "
			 "symlink)",
			 dir);
	} else if (st.st_uid != geteuid()) {
		rc = -EPERM;
		snprintf(errmsg, errn,
			 "socket directory %s is owned by uid %u, not by us",
			 dir, (unsigned)st.st_uid);
	} else if (st.st_mode & 077) {
		rc = -EPERM;
		snprintf(errmsg, errn,
			 "socket directory %s has mode %04o; it must be 0700",
			 dir, (unsigned)(st.st_mode & 07777));
	}
out:
	free(copy);
	return rc;
}

/* A socket file already at path: live (someone answers) or stale. */
static int clear_stale_socket(const char *path, char *errmsg, size_t errn)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(errmsg, errn, "%s exists and is not a socket", path);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (rc == 0) {
		snprintf(errmsg, errn,
			 "%s is in use by another process (a daemon of "
			 "another tree?)",
			 path);
		return -EADDRINUSE;
	}
	log_notice("removing stale socket %s", sa.sun_path);
	if (unlink(path) < 0 && errno != ENOENT) {
		rc = -errno;
		snprintf(errmsg, errn, "cannot remove stale socket %s: %s",
			 path, strerror(errno));
		return rc;
	}
	return 0;
}

static void connection_cb(uv_stream_t *listener, int status)
{
	struct server *srv = listener->data;

	if (status < 0) {
		log_warn("accept failed: %s", uv_strerror(status));
		return;
	}
	conn_accept(srv);
}

static void flush_check_cb(uv_check_t *h)
{
	struct server *srv = h->data;
	struct conn *list = srv->flush_list;

	srv->flush_list = NULL;
	uv_check_stop(h);
	while (list) {
		struct conn *c = list;

		list = c->next_flush;
		c->next_flush = NULL;
		c->flush_soon = false;
		conn_flush_notified(c);
		conn_unref(c);
	}
}

void server_flush_soon(struct server *srv, struct conn *c)
{
	if (c->flush_soon)
		return;
	c->flush_soon = true;
	conn_ref(c);
	c->next_flush = srv->flush_list;
	srv->flush_list = c;
	uv_check_start(&srv->flush_check, flush_check_cb);
}

/* One slice per connection, and half a millisecond per pass at most:
 * the connections left wait for the next iteration (after a poll). */
static void slice_idle_cb(uv_idle_t *h)
{
	struct server *srv = h->data;
	struct conn *list = srv->slice_list;
	uint64_t t0 = uv_hrtime();

	srv->slice_list = NULL;
	uv_idle_stop(h);
	while (list) {
		struct conn *c = list;

		if (uv_hrtime() - t0 >= 2 * SLICE_NS) {
			/* Back on the list, their references kept. */
			while (list) {
				c = list;
				list = c->next_slice;
				c->next_slice = srv->slice_list;
				srv->slice_list = c;
			}
			uv_idle_start(h, slice_idle_cb);
			return;
		}
		list = c->next_slice;
		c->next_slice = NULL;
		c->slice_soon = false;
		conn_run_slice(c);
		conn_unref(c);
	}
}

void server_slices_soon(struct server *srv, struct conn *c)
{
	if (c->slice_soon)
		return;
	c->slice_soon = true;
	conn_ref(c);
	c->next_slice = srv->slice_list;
	srv->slice_list = c;
	uv_idle_start(&srv->slice_idle, slice_idle_cb);
}

static void sweep_cb(uv_timer_t *t)
{
	struct server *srv = t->data;
	uint64_t now = uv_now(t->loop);
	struct conn *c, *next;

	for (c = srv->conns; c; c = next) {
		next = c->next;
		conn_check_deadline(c, now);
	}
}

/*
 * Take over the listening socket of socket activation: it must be a
 * listening Unix stream socket; a path other than the one clients compute
 * is served but warned about (clients would not find it).
 */
static int adopt(struct server *srv, int fd, const char *path, char *errmsg,
		 size_t errn)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	int type = 0, listening = 0, rc;
	socklen_t ilen = sizeof(int);

	memset(&sa, 0, sizeof(sa));
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ilen) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ilen) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0 ||
	    sa.sun_family != AF_UNIX || type != SOCK_STREAM || !listening) {
		snprintf(errmsg, errn,
			 "the socket passed by systemd (fd %d) is not a "
			 "listening Unix stream socket",
			 fd);
		return -ENOTSOCK;
	}
	if (strcmp(sa.sun_path, path) != 0) {
		char *actual = strdup(sa.sun_path);

		log_warn("serving on the socket systemd passed, %s; clients of "
			 "this tree look for %s",
			 sa.sun_path, path);
		if (actual) {
			free(srv->path);
			srv->path = actual;
		}
	}
	srv->activated = true;
	rc = uv_pipe_open(&srv->listener, fd);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&srv->listener, 128,
			       connection_cb);
	if (rc < 0)
		snprintf(errmsg, errn,
			 "cannot serve on the socket from "
			 "systemd: %s",
			 uv_strerror(rc));
	return rc;
}

/*
 * Record the socket's path in <gitdir>/vmem/socket for clients whose
 * environment gives another path (sockpath.h): a temporary file of ours
 * (O_EXCL, 0600) renamed over it, both through the checked state
 * directory (statedir.h). A failure is logged, not fatal: clients with
 * the daemon's environment still find it.
 */
static void record_path(struct server *srv)
{
	const struct statedir *sd = &srv->d->repo.state;
	char tmp[64], line[SOCKPATH_RECORD_MAX + 1], why[512] = "";
	int n = snprintf(line, sizeof(line), "%s\n", srv->path);
	int fd = -1, rc = 0;

	if (!sd->path || n < 0 || (size_t)n >= sizeof(line))
		return;
	snprintf(tmp, sizeof(tmp), ".%s-%d", SOCKPATH_RECORD, (int)getpid());
	(void)statedir_unlink(sd, tmp);
	fd = statedir_open(sd, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600, why,
			   sizeof(why));
	if (fd < 0)
		rc = fd;
	else if ((errno = 0, write(fd, line, (size_t)n)) != n)
		rc = -(errno ? errno : EIO);
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0)
		rc = statedir_rename(sd, tmp, SOCKPATH_RECORD);
	if (rc < 0) {
		log_warn("cannot record the socket path in %s/%s: %s (clients "
			 "with another environment will not find %s)",
			 sd->path, SOCKPATH_RECORD,
			 why[0] ? why : strerror(-rc), srv->path);
		if (fd >= 0)
			(void)statedir_unlink(sd, tmp);
	}
}

/* Remove the record if it still names our socket (a daemon started
 * after us may have written its own). */
static void unrecord_path(struct server *srv)
{
	const struct statedir *sd;
	char line[SOCKPATH_RECORD_MAX + 2];
	size_t len = strlen(srv->path);
	ssize_t n;
	int fd;

	if (!srv->d || !srv->d->repo.state.path)
		return;
	sd = &srv->d->repo.state;
	fd = statedir_open(sd, SOCKPATH_RECORD, O_RDONLY, 0, NULL, 0);
	if (fd < 0)
		return;
	n = read(fd, line, sizeof(line));
	close(fd);
	if (n == (ssize_t)len + 1 && memcmp(line, srv->path, len) == 0 &&
	    line[len] == '\n')
		(void)statedir_unlink(sd, SOCKPATH_RECORD);
}

int server_listen(struct server *srv, struct daemon *d, const char *path,
		  char *errmsg, size_t errn)
{
	struct stat st;
	mode_t old_mask;
	int rc, fd = sdnotify_listen_fd();

	memset(srv, 0, sizeof(*srv));
	srv->d = d;
	if (strlen(path) > sizeof(((struct sockaddr_un *)0)->sun_path) - 1) {
		snprintf(errmsg, errn, "socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	srv->path = strdup(path);
	if (!srv->path) {
		snprintf(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	if (fd == -EINVAL) {
		snprintf(errmsg, errn,
			 "systemd passed several sockets; vmemd serves one");
		return fd;
	}
	if (fd < 0) {
		rc = check_socket_dir(path, errmsg, errn);
		if (rc == 0)
			rc = clear_stale_socket(path, errmsg, errn);
		if (rc < 0)
			return rc;
	}
	rc = uv_check_init(d->loop, &srv->flush_check);
	if (rc < 0)
		goto fail;
	srv->flush_check.data = srv;
	rc = uv_idle_init(d->loop, &srv->slice_idle);
	if (rc < 0)
		goto fail;
	srv->slice_idle.data = srv;
	rc = uv_timer_init(d->loop, &srv->sweep);
	if (rc < 0)
		goto fail;
	srv->sweep.data = srv;
	uv_timer_start(&srv->sweep, sweep_cb, 1000, 1000);
	uv_unref((uv_handle_t *)&srv->sweep); /* never keeps the loop up */
	rc = uv_pipe_init(d->loop, &srv->listener, 0);
	if (rc < 0)
		goto fail;
	srv->listener.data = srv;
	srv->listening = true;
	if (fd >= 0) {
		rc = adopt(srv, fd, path, errmsg, errn);
		if (rc == 0)
			record_path(srv);
		return rc;
	}
	old_mask = umask(0177);
	rc = uv_pipe_bind(&srv->listener, path);
	umask(old_mask);
	if (rc < 0)
		goto fail;
	if (lstat(path, &st) == 0)
		srv->inode = st.st_ino;
	rc = uv_listen((uv_stream_t *)&srv->listener, 128, connection_cb);
	if (rc < 0)
		goto fail;
	record_path(srv);
	return 0;
fail:
	snprintf(errmsg, errn, "cannot listen on %s: %s", path,
		 uv_strerror(rc));
	return -EADDRNOTAVAIL;
}

void server_stop(struct server *srv)
{
	struct conn *c, *next;

	if (srv->listening) {
		srv->listening = false;
		uv_close((uv_handle_t *)&srv->listener, NULL);
	}
	for (c = srv->conns; c; c = next) {
		next = c->next;
		if (c->lingering)
			conn_close(c); /* refused: nothing more to answer */
		else
			conn_drain(c);
	}
}

void server_done(struct server *srv)
{
	struct stat st;

	if (srv->path)
		unrecord_path(srv);
	if (srv->path && !srv->activated && lstat(srv->path, &st) == 0 &&
	    st.st_ino == srv->inode)
		unlink(srv->path);
	free(srv->path);
	srv->path = NULL;
}

size_t server_connections(const struct server *srv)
{
	size_t n = 0;

	for (const struct conn *c = srv->conns; c; c = c->next)
		n++;
	return n;
}
