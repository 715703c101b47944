/*
 * libvmem: client side of the vmemd protocol. Finds the working tree and
 * its socket, starts the daemon when nothing answers, and runs one
 * JSON-RPC call at a time on a non-blocking Unix socket with a deadline.
 * Invariants: a client has at most one request in flight; responses whose
 * id is not the one awaited (late answers to timed-out calls) and server
 * notifications are skipped; after a transport failure the connection is
 * closed and every later call fails with -ENOTCONN. No signal handling is
 * changed and no jansson type crosses the public API.
 */
#include "vmem.h"

#include "protocol/errors.h"
#include "protocol/framer.h"
#include "protocol/sockpath.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef VMEMD_PATH
#define VMEMD_PATH "/usr/local/bin/vmemd"
#endif
/* The build tree: where vmem is built, and the vmemd built beside it. */
#ifndef VMEM_BUILD_CLIENT_DIR
#define VMEM_BUILD_CLIENT_DIR ""
#endif
#ifndef VMEMD_BUILD_PATH
#define VMEMD_BUILD_PATH ""
#endif

#define DEFAULT_TIMEOUT_MS 30000
#define MAX_RESPONSE_LINE  ((size_t)64 * 1024 * 1024)
#define READ_CHUNK	   ((size_t)64 * 1024)
#define START_WAIT_MS	   10000
#define BACKOFF_FIRST_MS   5
#define BACKOFF_MAX_MS	   200
#define RESPAWN_MS	   1000
#define CONNECT_BUSY_MS	   2000

extern char **environ;

/* A notification kept for vmem_next_notification(). */
struct notice {
	char *text;
	struct notice *next;
};

struct vmem_client {
	int fd;
	char *socket;
	char *repo;
	int timeout_ms; /* < 0: wait forever */
	json_int_t next_id;
	struct framer fr;
	bool subscribed; /* keep notifications */
	struct notice *notices, *notices_tail;
};

static void err_clear(struct vmem_error *err)
{
	if (!err)
		return;
	err->code = 0;
	err->type[0] = '\0';
	err->message[0] = '\0';
}

/* Fill a local error (code 0) and return rc, which is a negative errno. */
__attribute__((format(printf, 3, 4))) static int
err_local(struct vmem_error *err, int rc, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return rc;
	err->code = 0;
	err->type[0] = '\0';
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return rc;
}

static void copy_str(char *dst, size_t sz, const char *src)
{
	size_t n = strlen(src);

	if (n >= sz)
		n = sz - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Messages are one line: control characters become spaces. */
static void one_line(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = ' ';
}

VMEM_EXPORT const char *vmem_strerror(int err)
{
	const char *s;

	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return "Success";
	case EREMOTEIO:
		return "Error reported by the daemon";
	case ETIMEDOUT:
		return "No answer from the daemon in time";
	case ENOTCONN:
		return "Not connected to the daemon";
	case EBADMSG:
		return "Malformed message from the daemon";
	default:
		break;
	}
	s = strerrordesc_np(err);
	return s ? s : "Unknown error";
}

VMEM_EXPORT void vmem_free(void *p)
{
	free(p);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- discovery ---------------------------------------------------- */

static bool has_dot_git(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;
	int n;

	n = snprintf(path, sizeof(path), "%s%s.git", dir,
		     strcmp(dir, "/") == 0 ? "" : "/");
	if (n < 0 || (size_t)n >= sizeof(path))
		return false;
	return stat(path, &st) == 0 &&
	       (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode));
}

VMEM_EXPORT int vmem_repo_find(const char *repo, char **root,
			       struct vmem_error *err)
{
	char *cwd = NULL, *p = NULL;
	const char *start;
	int rc = 0;

	err_clear(err);
	*root = NULL;
	if (!repo || !*repo)
		repo = getenv("VMEM_REPO");
	if (repo && *repo) {
		start = repo;
	} else {
		cwd = getcwd(NULL, 0);
		if (!cwd) {
			rc = -errno;
			return err_local(err, rc,
					 "cannot get the current directory: %s",
					 vmem_strerror(rc));
		}
		start = cwd;
	}
	p = realpath(start, NULL);
	if (!p) {
		rc = -errno;
		err_local(err, rc,
			  "Not a Git repository: cannot resolve %s: %s", start,
			  vmem_strerror(rc));
		goto out;
	}
	/* The tree root is the first directory up from start with .git, as
	 * the daemon finds it, so both derive the same socket key. */
	for (;;) {
		char *slash;

		if (has_dot_git(p)) {
			*root = p;
			p = NULL;
			goto out;
		}
		slash = strrchr(p, '/');
		if (!slash || strcmp(p, "/") == 0)
			break;
		if (slash == p)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	/* Suggest --repo only to who did not give one. */
	if (start == cwd)
		rc = err_local(err, -ENOENT,
			       "Not a Git repository: no .git in %s or above "
			       "it; use --repo or VMEM_REPO",
			       start);
	else
		rc = err_local(err, -ENOENT,
			       "Not a Git repository: no .git in %s or above "
			       "it",
			       start);
out:
	free(p);
	free(cwd);
	return rc;
}

/* An executable regular file at path. */
static bool executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	       access(path, X_OK) == 0;
}

/* "vmemd" found on PATH (as posix_spawnp will look), into buf. */
static bool on_path(char *buf, size_t n)
{
	const char *p = getenv("PATH"), *end;

	for (; p && *p; p = *end ? end + 1 : end) {
		int len;

		end = strchrnul(p, ':');
		len = snprintf(buf, n, "%.*s/vmemd", (int)(end - p), p);
		if (end > p && len > 0 && (size_t)len < n && executable(buf))
			return true;
	}
	return false;
}

VMEM_EXPORT const char *vmem_daemon_program(void)
{
	/* Per thread: clients may be opened from several threads. */
	static _Thread_local char buf[PATH_MAX];
	const char *env = getenv("VMEMD");
	char exe[PATH_MAX];
	ssize_t n;

	if (env && *env)
		return env;
	/* Next to the running program: an installed pair (bin/vmem,
	 * bin/vmemd), or the build tree it was built in (client/vmem,
	 * daemon/vmemd). */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		char *slash;

		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			if (snprintf(buf, sizeof(buf), "%s/vmemd", exe) <
				    (int)sizeof(buf) &&
			    executable(buf))
				return buf;
			if (strcmp(exe, VMEM_BUILD_CLIENT_DIR) == 0 &&
			    executable(VMEMD_BUILD_PATH))
				return VMEMD_BUILD_PATH;
		}
	}
	if (executable(VMEMD_PATH))
		return VMEMD_PATH;
	if (on_path(buf, sizeof(buf)))
		return buf;
	return "vmemd";
}

/* ---- connecting and starting the daemon --------------------------- */

/* Connect to path; returns the fd or a negative errno. */
static int try_connect(const char *path)
{
	struct sockaddr_un sa;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	size_t n = strlen(path);
	int fd, rc, tries;

	if (n >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, n + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* Non-blocking: a full backlog (EAGAIN) must not hang us forever. */
	for (tries = 0;; tries++) {
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		if (rc == 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN || tries * 5 >= CONNECT_BUSY_MS)
			break;
		sleep_ms(5);
	}
	if (rc < 0) {
		rc = -errno;
		goto fail;
	}
	/* Talk only to a daemon run by ourselves (or root). */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		rc = -errno;
		goto fail;
	}
	if (cred.uid != geteuid() && cred.uid != 0) {
		rc = -EPERM;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return rc;
}

static bool autostart_allowed(int autostart)
{
	const char *e;

	if (autostart >= 0)
		return autostart != 0;
	e = getenv("VMEM_NO_AUTOSTART");
	return !(e && strcmp(e, "1") == 0);
}

/*
 * Run `vmemd --repo ROOT --socket SOCK` and wait for its parent process,
 * which exits once the daemon listens (0) or when another instance holds
 * the tree (3). Returns 0 or 3 when connecting is worth retrying.
 */
static int spawn_daemon(const char *root, const char *sock,
			struct vmem_error *err)
{
	const char *prog = vmem_daemon_program();
	char *argv[] = {(char *)prog, "--repo",	    (char *)root,
			"--socket",   (char *)sock, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	pid_t pid, w;
	int rc, status;

	rc = posix_spawn_file_actions_init(&fa);
	if (rc)
		return err_local(err, -rc, "cannot start %s: %s", prog,
				 vmem_strerror(rc));
	rc = posix_spawnattr_init(&attr);
	if (rc) {
		posix_spawn_file_actions_destroy(&fa);
		return err_local(err, -rc, "cannot start %s: %s", prog,
				 vmem_strerror(rc));
	}
	sigemptyset(&none);
	sigfillset(&all);
	sigdelset(&all, SIGKILL);
	sigdelset(&all, SIGSTOP);
	/* The child starts with default signal handling whatever ours is. */
	rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK |
						     POSIX_SPAWN_SETSIGDEF);
	if (!rc)
		rc = posix_spawnattr_setsigmask(&attr, &none);
	if (!rc)
		rc = posix_spawnattr_setsigdefault(&attr, &all);
	if (!rc)
		rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null",
						      O_RDONLY, 0);
	if (!rc)
		rc = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null",
						      O_WRONLY, 0);
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
	/* The daemon outlives us: do not leak our descriptors into it. */
	if (!rc)
		rc = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
#endif
	if (!rc)
		rc = posix_spawnp(&pid, prog, &fa, &attr, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc == ENOENT && !strchr(prog, '/'))
		return err_local(
			err, -rc,
			"cannot start the daemon: vmemd is not next to "
			"this program, not at %s and not on PATH; "
			"install vmem (meson install), or set "
			"VMEMD=/path/to/vmemd (or use --no-autostart "
			"with a daemon started otherwise)",
			VMEMD_PATH);
	if (rc)
		return err_local(err, -rc, "cannot start %s: %s", prog,
				 vmem_strerror(rc));
	do {
		w = waitpid(pid, &status, 0);
	} while (w < 0 && errno == EINTR);
	if (w < 0)
		return 0; /* SIGCHLD ignored by the caller: just retry */
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
		return 3;
	if (WIFEXITED(status))
		return err_local(err, -ECHILD,
				 "%s --repo %s --socket %s exited with status "
				 "%d",
				 prog, root, sock, WEXITSTATUS(status));
	return err_local(err, -ECHILD,
			 "%s --repo %s --socket %s killed by "
			 "signal %d",
			 prog, root, sock,
			 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/*
 * Connect, starting the daemon when allowed; returns the fd. When another
 * instance held the tree (status 3) but never answers, it may have been
 * on its way out: start again, RESPAWN_MS later and then twice as late
 * each time, until the deadline.
 */
static int connect_or_start(const char *root, const char *sock, int autostart,
			    struct vmem_error *err)
{
	int64_t deadline, spawned;
	int fd, rc, delay = BACKOFF_FIRST_MS, respawn_ms = RESPAWN_MS;

	fd = try_connect(sock);
	if (fd >= 0)
		return fd;
	if ((fd != -ENOENT && fd != -ECONNREFUSED) || !root ||
	    !autostart_allowed(autostart))
		return err_local(err, fd, "cannot connect to %s: %s", sock,
				 vmem_strerror(fd));
	rc = spawn_daemon(root, sock, err);
	if (rc < 0)
		return rc;
	spawned = now_ms();
	deadline = spawned + START_WAIT_MS;
	for (;;) {
		fd = try_connect(sock);
		if (fd >= 0)
			return fd;
		if (fd != -ENOENT && fd != -ECONNREFUSED)
			break;
		if (now_ms() >= deadline)
			break;
		if (rc == 3 && now_ms() - spawned >= respawn_ms) {
			respawn_ms *= 2;
			rc = spawn_daemon(root, sock, err);
			if (rc < 0)
				return rc;
			spawned = now_ms();
			continue;
		}
		sleep_ms(delay);
		delay = delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2;
	}
	if (rc == 3)
		return err_local(
			err, fd,
			"a vmemd already serves %s but nothing answers "
			"on %s (another socket?): %s",
			root, sock, vmem_strerror(fd));
	return err_local(err, fd, "cannot connect to %s after starting %s: %s",
			 sock, vmem_daemon_program(), vmem_strerror(fd));
}

/* ---- one call ------------------------------------------------------ */

static void client_disconnect(vmem_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	framer_done(&c->fr);
	framer_init(&c->fr, MAX_RESPONSE_LINE);
}

/* Milliseconds left before deadline for poll(); -1 forever. */
static int remaining(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - now_ms();
	if (left < 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}

static int wait_fd(vmem_client *c, short events, int64_t deadline)
{
	struct pollfd pfd = {.fd = c->fd, .events = events};
	int n;

	for (;;) {
		n = poll(&pfd, 1, remaining(deadline));
		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

static int send_all(vmem_client *c, const char *buf, size_t len,
		    int64_t deadline)
{
	size_t off = 0;
	ssize_t n;
	int rc;

	while (off < len) {
		n = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);
		if (n >= 0) {
			off += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		rc = wait_fd(c, POLLOUT, deadline);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Fill err from a JSON-RPC error object. */
static void err_remote(struct vmem_error *err, json_t *e)
{
	json_t *code, *msg, *data, *type;

	if (!err)
		return;
	err_clear(err);
	code = json_object_get(e, "code");
	msg = json_object_get(e, "message");
	data = json_object_get(e, "data");
	type = json_object_get(data, "type");
	if (json_is_integer(code) && json_integer_value(code) >= INT_MIN &&
	    json_integer_value(code) <= INT_MAX)
		err->code = (int)json_integer_value(code);
	else
		err->code = RPC_INTERNAL_ERROR;
	if (json_is_string(type))
		copy_str(err->type, sizeof(err->type), json_string_value(type));
	copy_str(err->message, sizeof(err->message),
		 json_is_string(msg) ? json_string_value(msg)
				     : "error without a message");
	one_line(err->message);
}

static int keep_notice(vmem_client *c, const char *line, size_t len,
		       struct vmem_error *err)
{
	struct notice *n = malloc(sizeof(*n));

	if (!n || !(n->text = strndup(line, len))) {
		free(n);
		return err_local(err, -ENOMEM, "out of memory");
	}
	n->next = NULL;
	if (c->notices_tail)
		c->notices_tail->next = n;
	else
		c->notices = n;
	c->notices_tail = n;
	return 0;
}

/*
 * Examine one response line. Returns 1 when it answered our request
 * (*result set, or -EREMOTEIO via *rrc), 0 to keep reading, or a negative
 * errno for a malformed line.
 */
static int take_line(vmem_client *c, const char *line, size_t len,
		     json_int_t id, json_t **result, int *rrc,
		     struct vmem_error *err)
{
	json_error_t jerr;
	json_t *msg, *rid, *e;
	int rc = 0;

	msg = json_loadb(line, len, 0, &jerr);
	if (!msg)
		return err_local(err, -EBADMSG,
				 "malformed response from %s: %s", c->socket,
				 jerr.text);
	if (!json_is_object(msg))
		goto out; /* a batch answer: we never send batches */
	rid = json_object_get(msg, "id");
	if (!rid) {
		/* A server notification: kept for a subscriber. */
		if (c->subscribed)
			rc = keep_notice(c, line, len, err);
		goto out;
	}
	e = json_object_get(msg, "error");
	/* An error with id null is about the connection (too many
	 * connections, line too long): it answers whatever is pending. */
	if (json_is_null(rid) && json_is_object(e)) {
		err_remote(err, e);
		*rrc = -EREMOTEIO;
		rc = 1;
		goto out;
	}
	if (!json_is_integer(rid) || json_integer_value(rid) != id)
		goto out;
	rc = 1;
	if (json_is_object(e)) {
		err_remote(err, e);
		*rrc = -EREMOTEIO;
		goto out;
	}
	*result = json_object_get(msg, "result");
	if (!*result) {
		rc = err_local(err, -EBADMSG,
			       "response from %s has neither result nor error",
			       c->socket);
		goto out;
	}
	json_incref(*result);
	*rrc = 0;
out:
	json_decref(msg);
	return rc;
}

/*
 * Read what the daemon sent into the framer, waiting for it until
 * deadline. 0, or a negative errno with err set (what: the call waited
 * for, for the message).
 */
static int read_some(vmem_client *c, int64_t deadline, const char *what,
		     struct vmem_error *err)
{
	size_t avail;
	char *p;
	ssize_t n;
	int rc;

	rc = framer_reserve(&c->fr, READ_CHUNK, &p, &avail);
	if (rc < 0)
		return err_local(err, rc, "out of memory");
	for (;;) {
		n = recv(c->fd, p, avail, 0);
		if (n > 0) {
			framer_commit(&c->fr, (size_t)n);
			return 0;
		}
		if (n == 0)
			return err_local(err, -ECONNRESET,
					 "%s: the daemon closed the connection",
					 c->socket);
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return err_local(err, -errno, "%s: %s", c->socket,
					 vmem_strerror(errno));
		rc = wait_fd(c, POLLIN, deadline);
		if (rc == -ETIMEDOUT)
			return err_local(err, rc, "no %s from %s within %d ms",
					 what, c->socket, c->timeout_ms);
		if (rc < 0)
			return err_local(err, rc, "%s: %s", c->socket,
					 vmem_strerror(rc));
	}
}

/*
 * Examine the complete lines buffered, for the response with id (-1:
 * none). 1 with *result or *rrc when it came, 0 when more must be read,
 * or a negative errno.
 */
static int take_lines(vmem_client *c, json_int_t id, json_t **result, int *rrc,
		      struct vmem_error *err)
{
	const char *line;
	size_t len;
	int rc;

	while ((rc = framer_next(&c->fr, &line, &len)) == 1) {
		rc = take_line(c, line, len, id, result, rrc, err);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return err_local(err, -EMSGSIZE,
				 "response from %s exceeds %zu bytes",
				 c->socket, (size_t)MAX_RESPONSE_LINE);
	return 0;
}

/* Wait for the response with id; *result is a new reference. */
static int recv_response(vmem_client *c, json_int_t id, int64_t deadline,
			 const char *method, json_t **result,
			 struct vmem_error *err)
{
	char what[160];
	int rc, rrc = 0;

	snprintf(what, sizeof(what), "answer to %s", method);
	for (;;) {
		rc = take_lines(c, id, result, &rrc, err);
		if (rc < 0)
			return rc;
		if (rc == 1)
			return rrc;
		rc = read_some(c, deadline, what, err);
		if (rc < 0)
			return rc;
	}
}

VMEM_EXPORT int vmem_next_notification(vmem_client *c, int timeout_ms,
				       char **json, struct vmem_error *err)
{
	int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	struct notice *n;
	json_t *unused = NULL;
	int rc, rrc = 0;

	err_clear(err);
	*json = NULL;
	if (!c || c->fd < 0)
		return err_local(err, -ENOTCONN, "not connected");
	c->subscribed = true;
	while (!c->notices) {
		rc = take_lines(c, -1, &unused, &rrc, err);
		if (rc < 0)
			return rc;
		if (rc == 1 && rrc < 0)
			return rrc; /* an error about the connection */
		if (c->notices)
			break;
		rc = read_some(c, deadline, "notification", err);
		if (rc < 0)
			return rc;
	}
	n = c->notices;
	c->notices = n->next;
	if (!c->notices)
		c->notices_tail = NULL;
	*json = n->text;
	free(n);
	return 0;
}

/*
 * Send method(params) and wait for its result. Steals params (may be
 * NULL). On success *result is a new reference.
 */
static int call_json(vmem_client *c, const char *method, json_t *params,
		     json_t **result, struct vmem_error *err)
{
	json_t *req = NULL;
	char *text = NULL;
	size_t len;
	int64_t deadline;
	json_int_t id;
	int rc;

	*result = NULL;
	if (!c || !method || !*method) {
		json_decref(params);
		return err_local(err, -EINVAL, "no client or no method");
	}
	if (c->fd < 0) {
		json_decref(params);
		return err_local(err, -ENOTCONN, "not connected to %s",
				 c->socket);
	}
	id = c->next_id++;
	req = json_object();
	if (!req || json_object_set_new(req, "jsonrpc", json_string("2.0")) ||
	    json_object_set_new(req, "id", json_integer(id)) ||
	    json_object_set_new(req, "method", json_string(method))) {
		json_decref(params);
		rc = err_local(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (params && json_object_set_new(req, "params", params)) {
		rc = err_local(err, -EINVAL, "bad method name or params");
		goto out;
	}
	text = json_dumps(req, JSON_COMPACT);
	if (!text) {
		rc = err_local(err, -ENOMEM, "out of memory");
		goto out;
	}
	len = strlen(text);
	/* json_dumps never emits a raw LF: the line ends here. */
	{
		char *t = realloc(text, len + 2);

		if (!t) {
			rc = err_local(err, -ENOMEM, "out of memory");
			goto out;
		}
		text = t;
		text[len++] = '\n';
		text[len] = '\0';
	}
	deadline = c->timeout_ms < 0 ? -1 : now_ms() + c->timeout_ms;
	rc = send_all(c, text, len, deadline);
	if (rc == -ETIMEDOUT) {
		/* A partial request would corrupt the stream: give up on it. */
		client_disconnect(c);
		rc = err_local(err, rc, "cannot send %s to %s within %d ms",
			       method, c->socket, c->timeout_ms);
		goto out;
	}
	if (rc < 0) {
		client_disconnect(c);
		rc = err_local(err, rc, "cannot send to %s: %s", c->socket,
			       vmem_strerror(rc));
		goto out;
	}
	rc = recv_response(c, id, deadline, method, result, err);
	if (rc < 0 && rc != -EREMOTEIO && rc != -ETIMEDOUT)
		client_disconnect(c);
	if (rc == 0 && strcmp(method, "watch.subscribe") == 0)
		c->subscribed = true;
out:
	free(text);
	json_decref(req);
	return rc;
}

/* ---- public calls -------------------------------------------------- */

static int parse_object(const char *text, const char *what, json_t **out,
			struct vmem_error *err)
{
	json_error_t jerr;

	*out = json_loads(text, JSON_DECODE_ANY, &jerr);
	if (!*out)
		return err_local(err, -EINVAL, "%s is not valid JSON: %s", what,
				 jerr.text);
	return 0;
}

static int dump_result(json_t *result, char **out, struct vmem_error *err)
{
	if (!out)
		return 0;
	*out = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!*out)
		return err_local(err, -ENOMEM, "out of memory");
	return 0;
}

VMEM_EXPORT int vmem_call(vmem_client *c, const char *method,
			  const char *params_json, char **result_json,
			  struct vmem_error *err)
{
	json_t *params = NULL, *result = NULL;
	int rc;

	err_clear(err);
	if (result_json)
		*result_json = NULL;
	if (params_json) {
		rc = parse_object(params_json, "params", &params, err);
		if (rc < 0)
			return rc;
		if (!json_is_object(params)) {
			json_decref(params);
			return err_local(err, -EINVAL,
					 "params must be a JSON object");
		}
	}
	rc = call_json(c, method, params, &result, err);
	if (rc < 0)
		return rc;
	rc = dump_result(result, result_json, err);
	json_decref(result);
	return rc;
}

static int hello(vmem_client *c, const char *agent_id, json_t **result,
		 struct vmem_error *err)
{
	json_t *p;

	p = json_pack("{s:s, s:i}", "client", "libvmem/0.1.0", "protocol",
		      VMEM_PROTOCOL_VERSION);
	if (!p)
		return err_local(err, -ENOMEM, "out of memory");
	if (agent_id &&
	    json_object_set_new(p, "agent_id", json_string(agent_id))) {
		json_decref(p);
		return err_local(err, -EINVAL, "agent_id is not valid UTF-8");
	}
	return call_json(c, "server.hello", p, result, err);
}

VMEM_EXPORT int vmem_hello(vmem_client *c, const char *agent_id,
			   char **result_json, struct vmem_error *err)
{
	json_t *result = NULL;
	int rc;

	err_clear(err);
	if (result_json)
		*result_json = NULL;
	rc = hello(c, agent_id, &result, err);
	if (rc < 0)
		return rc;
	rc = dump_result(result, result_json, err);
	json_decref(result);
	return rc;
}

VMEM_EXPORT int vmem_health(vmem_client *c, char **result_json,
			    struct vmem_error *err)
{
	return vmem_call(c, "server.health", NULL, result_json, err);
}

VMEM_EXPORT int vmem_shutdown(vmem_client *c, struct vmem_error *err)
{
	return vmem_call(c, "server.shutdown", NULL, NULL, err);
}

static json_t *coord_params(const struct vmem_coord *coord)
{
	if (!coord)
		return NULL;
	return json_pack("{s:{s:i, s:i, s:i}}", "coordinate", "x", coord->x,
			 "y", coord->y, "z", coord->z);
}

VMEM_EXPORT int
vmem_decision_store(vmem_client *c, const struct vmem_coord *coord,
		    const char *content, const struct vmem_store_options *opts,
		    char **decision_json, struct vmem_error *err)
{
	json_t *p = NULL, *ctx = NULL, *result = NULL;
	int rc;

	err_clear(err);
	if (decision_json)
		*decision_json = NULL;
	if (!coord || !content)
		return err_local(err, -EINVAL, "no coordinate or no content");
	p = coord_params(coord);
	if (!p)
		return err_local(err, -ENOMEM, "out of memory");
	if (json_object_set_new(p, "content", json_string(content))) {
		rc = err_local(err, -EINVAL, "content is not valid UTF-8");
		goto out;
	}
	if (opts && opts->issue_context_json) {
		rc = parse_object(opts->issue_context_json, "issue_context",
				  &ctx, err);
		if (rc < 0)
			goto out;
		rc = json_object_set_new(p, "issue_context", ctx);
		if (rc) {
			rc = err_local(err, -ENOMEM, "out of memory");
			goto out;
		}
	}
	if (opts && opts->agent_id &&
	    json_object_set_new(p, "agent_id", json_string(opts->agent_id))) {
		rc = err_local(err, -EINVAL, "agent_id is not valid UTF-8");
		goto out;
	}
	if (opts && opts->overwrite &&
	    json_object_set_new(p, "overwrite", json_true())) {
		rc = err_local(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (opts && opts->if_version > 0 &&
	    json_object_set_new(p, "if_version",
				json_integer(opts->if_version))) {
		rc = err_local(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (opts && opts->timeout_ms > 0 &&
	    json_object_set_new(p, "timeout_ms",
				json_integer(opts->timeout_ms))) {
		rc = err_local(err, -ENOMEM, "out of memory");
		goto out;
	}
	rc = call_json(c, "decision.store", p, &result, err);
	p = NULL;
	if (rc < 0)
		goto out;
	if (!json_is_object(result)) {
		rc = err_local(err, -EBADMSG,
			       "decision.store returned no decision");
		goto out;
	}
	rc = dump_result(result, decision_json, err);
out:
	json_decref(p);
	json_decref(result);
	return rc;
}

VMEM_EXPORT int vmem_decision_get(vmem_client *c,
				  const struct vmem_coord *coord,
				  char **decision_json, struct vmem_error *err)
{
	json_t *p, *result = NULL;
	int rc;

	err_clear(err);
	if (decision_json)
		*decision_json = NULL;
	if (!coord)
		return err_local(err, -EINVAL, "no coordinate");
	p = coord_params(coord);
	if (!p)
		return err_local(err, -ENOMEM, "out of memory");
	rc = call_json(c, "decision.get", p, &result, err);
	if (rc < 0)
		return rc;
	if (json_is_null(result)) {
		rc = 0;
	} else if (json_is_object(result)) {
		rc = dump_result(result, decision_json, err);
		if (rc == 0)
			rc = 1;
	} else {
		rc = err_local(err, -EBADMSG,
			       "decision.get returned neither object nor null");
	}
	json_decref(result);
	return rc;
}

/* A method whose result is true or false: 1 or 0. Steals p. */
static int call_bool(vmem_client *c, const char *method, json_t *p,
		     struct vmem_error *err)
{
	json_t *result = NULL;
	int rc;

	if (!p)
		return err_local(err, -ENOMEM, "out of memory");
	rc = call_json(c, method, p, &result, err);
	if (rc < 0)
		return rc;
	if (json_is_boolean(result))
		rc = json_is_true(result) ? 1 : 0;
	else
		rc = err_local(err, -EBADMSG, "%s returned no boolean", method);
	json_decref(result);
	return rc;
}

VMEM_EXPORT int vmem_decision_exists(vmem_client *c,
				     const struct vmem_coord *coord,
				     struct vmem_error *err)
{
	err_clear(err);
	if (!coord)
		return err_local(err, -EINVAL, "no coordinate");
	return call_bool(c, "decision.exists", coord_params(coord), err);
}

VMEM_EXPORT int vmem_decision_delete(vmem_client *c,
				     const struct vmem_coord *coord,
				     int64_t if_version, struct vmem_error *err)
{
	json_t *p;

	err_clear(err);
	if (!coord)
		return err_local(err, -EINVAL, "no coordinate");
	p = coord_params(coord);
	if (p && if_version > 0 &&
	    json_object_set_new(p, "if_version", json_integer(if_version))) {
		json_decref(p);
		p = NULL;
	}
	return call_bool(c, "decision.delete", p, err);
}

/* ---- waiting for a daemon to stop ---------------------------------- */

/*
 * A file of the daemon's state directory, <gitdir>/vmem/NAME, where gitdir
 * is root/.git or what a worktree's .git file names. NULL when unknown.
 */
static char *state_path(const char *root, const char *name)
{
	char path[PATH_MAX], line[PATH_MAX], *out = NULL, *dir, *nl;
	struct stat st;
	FILE *f;
	int n;

	n = snprintf(path, sizeof(path), "%s/.git", root);
	if (n < 0 || (size_t)n >= sizeof(path) || stat(path, &st) < 0)
		return NULL;
	if (S_ISDIR(st.st_mode)) {
		if (asprintf(&out, "%s/vmem/%s", path, name) < 0)
			out = NULL;
		return out;
	}
	f = fopen(path, "re");
	if (!f)
		return NULL;
	dir = fgets(line, sizeof(line), f);
	fclose(f);
	if (!dir || strncmp(line, "gitdir: ", 8) != 0)
		return NULL;
	dir = line + 8;
	nl = strchr(dir, '\n');
	if (nl)
		*nl = '\0';
	if (asprintf(&out, "%s%s%s/vmem/%s", dir[0] == '/' ? "" : root,
		     dir[0] == '/' ? "" : "/", dir, name) < 0)
		out = NULL;
	return out;
}

/*
 * The socket path the running daemon of root recorded (sockpath.h), into
 * out; false when there is none or it is not to be trusted: the state
 * directory and the file must be ours, not symlinks, not writable by
 * others, the file regular and small (opened O_NOFOLLOW | O_NONBLOCK, so
 * neither a link nor a FIFO is followed or waited on).
 */
static bool recorded_socket(const char *root, char out[SOCKPATH_MAX + 1])
{
	char *path = state_path(root, SOCKPATH_RECORD), *slash;
	char buf[SOCKPATH_RECORD_MAX + 1];
	struct stat st;
	bool ok = false;
	ssize_t n;
	int fd = -1;

	if (!path)
		return false;
	slash = strrchr(path, '/');
	*slash = '\0';
	if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 022))
		goto out;
	*slash = '/';
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 022))
		goto out;
	n = read(fd, buf, sizeof(buf));
	if (n < 3 || (size_t)n > SOCKPATH_RECORD_MAX || buf[n - 1] != '\n' ||
	    buf[0] != '/' || memchr(buf, '\0', (size_t)n))
		goto out;
	buf[n - 1] = '\0';
	memcpy(out, buf, (size_t)n);
	ok = true;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	return ok;
}

/* True when nobody holds the lock (or there is none). */
static bool lock_free(const char *path)
{
	bool ok;
	int fd;

	if (!path)
		return true;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	ok = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return ok;
}

VMEM_EXPORT int vmem_daemon_wait_stopped(const char *repo, const char *socket,
					 int timeout_ms, struct vmem_error *err)
{
	int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	char *lock = NULL;
	int fd, rc = 0;

	err_clear(err);
	if (!socket)
		return err_local(err, -EINVAL, "no socket");
	if (repo)
		lock = state_path(repo, "lock");
	for (;;) {
		fd = try_connect(socket);
		if (fd >= 0)
			close(fd);
		else if (lock_free(lock))
			goto out;
		if (now_ms() >= deadline)
			break;
		sleep_ms(10);
	}
	rc = err_local(err, -ETIMEDOUT,
		       "the daemon on %s did not stop within "
		       "%d ms",
		       socket, timeout_ms);
out:
	free(lock);
	return rc;
}

/* ---- open and close ------------------------------------------------ */

VMEM_EXPORT int vmem_client_open(vmem_client **out,
				 const struct vmem_options *opts,
				 struct vmem_error *err)
{
	static const struct vmem_options defaults = {.autostart = -1};
	vmem_client *c = NULL;
	struct vmem_error lerr;
	char path[SOCKPATH_MAX + 1];
	const char *sock;
	json_t *result = NULL;
	int rc;

	err_clear(err);
	*out = NULL;
	if (!opts)
		opts = &defaults;
	c = calloc(1, sizeof(*c));
	if (!c)
		return err_local(err, -ENOMEM, "out of memory");
	c->fd = -1;
	c->next_id = 1;
	c->timeout_ms =
		opts->timeout_ms ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
	framer_init(&c->fr, MAX_RESPONSE_LINE);

	sock = opts->socket && *opts->socket ? opts->socket : NULL;
	if (!sock) {
		const char *env = getenv("VMEM_SOCKET");

		if (env && *env)
			sock = env;
	}
	rc = vmem_repo_find(opts->repo, &c->repo, &lerr);
	/* Opened by socket alone, a failed walk-up is no error; a repo
	 * named explicitly must exist. */
	if (rc < 0 && (!sock || (opts->repo && *opts->repo) ||
		       (getenv("VMEM_REPO") && *getenv("VMEM_REPO")))) {
		if (err)
			*err = lerr;
		goto out;
	}
	rc = 0;
	/* The socket the tree's daemon recorded, whatever our environment
	 * says: it answers there or it is stale. */
	if (!sock && recorded_socket(c->repo, path)) {
		rc = try_connect(path);
		if (rc >= 0) {
			c->fd = rc;
			c->socket = strdup(path);
			if (!c->socket) {
				rc = err_local(err, -ENOMEM, "out of memory");
				goto out;
			}
			goto connected;
		}
		rc = 0;
	}
	if (!sock) {
		rc = sockpath_resolve(c->repo, NULL, getenv("XDG_RUNTIME_DIR"),
				      getuid(), path, sizeof(path));
		if (rc < 0) {
			rc = err_local(err, rc,
				       "no usable socket path for %s: %s",
				       c->repo, vmem_strerror(rc));
			goto out;
		}
		sock = path;
	}
	c->socket = strdup(sock);
	if (!c->socket) {
		rc = err_local(err, -ENOMEM, "out of memory");
		goto out;
	}
	rc = connect_or_start(c->repo, c->socket, opts->autostart, err);
	if (rc < 0)
		goto out;
	c->fd = rc;
connected:
	rc = 0;
	if (opts->agent_id) {
		rc = hello(c, opts->agent_id, &result, err);
		json_decref(result);
		if (rc < 0)
			goto out;
	}
	*out = c;
	c = NULL;
out:
	vmem_client_free(c);
	return rc;
}

VMEM_EXPORT void vmem_client_free(vmem_client *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	framer_done(&c->fr);
	while (c->notices) {
		struct notice *n = c->notices;

		c->notices = n->next;
		free(n->text);
		free(n);
	}
	free(c->socket);
	free(c->repo);
	free(c);
}

VMEM_EXPORT const char *vmem_client_socket(const vmem_client *c)
{
	return c ? c->socket : NULL;
}

VMEM_EXPORT const char *vmem_client_repo(const vmem_client *c)
{
	return c ? c->repo : NULL;
}

VMEM_EXPORT int vmem_client_fd(const vmem_client *c)
{
	if (!c || c->fd < 0)
		return -ENOTCONN;
	if (framer_pending(&c->fr) > 0 || c->notices)
		return -EBUSY;
	return c->fd;
}
