/*
 * Connection I/O: read into the framer's free tail, dispatch complete
 * lines in order, batch responses into one write per pass, apply
 * back-pressure, and close only from a state where no callback can still
 * touch the handle.
 */
#include "conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dispatch.h"
#include "log.h"
#include "protocol/errors.h"
#include "protocol/jsonrpc.h"
#include "server.h"

#define READ_CHUNK (64 * 1024)
/* Input read ahead while a request waits: reading goes on (no epoll
 * change per durable write) until this much is buffered. */
#define READ_AHEAD_MAX (64 * 1024)
/* Input a refused connection may still send before we hang up on it, and
 * how long we wait for it to close. */
#define LINGER_MAX    (1024 * 1024)
#define LINGER_MAX_MS 2000

struct write_req {
	uv_write_t req;
	struct conn *conn;
	char *base; /* owned buffer */
	size_t len; /* bytes queued from it */
};

static void conn_process(struct conn *c);

void conn_ref(struct conn *c)
{
	c->refs++;
}

void conn_unref(struct conn *c)
{
	if (--c->refs > 0)
		return;
	framer_done(&c->in);
	buf_done(&c->out);
	free(c->agent_id);
	free(c);
}

static bool backlog_ok(const struct conn *c)
{
	return c->out.len + c->out_queued < c->srv->d->limits.output_backlog;
}

static void close_cb(uv_handle_t *h)
{
	struct conn *c = h->data;
	struct server *srv = c->srv;

	/* Here rather than in conn_close, so a subscription being notified
	 * is never freed under its notifier. An answer in slices is
	 * abandoned. */
	dispatch_run_slice(c);
	subs_drop_conn(&srv->d->subs, c);
	leases_drop_owner(&srv->d->leases, c);

	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->counted) {
		srv->n_served--;
		log_info("connection of pid %d closed after %llu request "
			 "lines in %.1f s",
			 c->peer_pid, (unsigned long long)c->lines,
			 (double)(uv_now(srv->d->loop) - c->opened_ms) / 1000);
	}
	conn_unref(c);
}

void conn_close(struct conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	c->reading = false;
	uv_close((uv_handle_t *)&c->pipe, close_cb);
}

static void write_cb(uv_write_t *req, int status)
{
	struct write_req *w = (struct write_req *)req;
	struct conn *c = w->conn;

	c->out_queued -= w->len;
	if (c->out_queued == 0 && c->out.len == 0)
		c->notified = 0;
	free(w->base);
	free(w);
	if (status < 0) {
		if (status != UV_ECANCELED)
			log_debug("connection write failed: %s",
				  uv_strerror(status));
		conn_close(c);
		return;
	}
	conn_process(c);
}

/* Hand buffered responses to the socket: directly if it takes them,
 * else as one queued write that owns the buffer. */
static void conn_flush(struct conn *c)
{
	struct write_req *w;
	uv_buf_t buf;
	size_t off = 0;
	int rc;

	if (c->out.len == 0 || c->closing)
		return;
	if (c->out_queued == 0) {
		buf = uv_buf_init(c->out.data, (unsigned)c->out.len);
		rc = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
		if (rc == (int)c->out.len) {
			c->out.len = 0;
			c->notified = 0;
			return;
		}
		if (rc > 0)
			off = (size_t)rc;
		else if (rc != UV_EAGAIN) {
			conn_close(c);
			return;
		}
	}
	w = malloc(sizeof(*w));
	if (!w) {
		conn_close(c);
		return;
	}
	w->conn = c;
	w->base = buf_take(&c->out, &w->len);
	w->len -= off;
	buf = uv_buf_init(w->base + off, (unsigned)w->len);
	rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, write_cb);
	if (rc < 0) {
		free(w->base);
		free(w);
		conn_close(c);
		return;
	}
	c->out_queued += w->len;
}

void conn_send(struct conn *c, const char *line, size_t len)
{
	if (c->closing)
		return;
	if (!buf_append(&c->out, line, len)) {
		log_err("out of memory buffering a response");
		conn_close(c);
	}
}

/*
 * Checked as each line is queued, so a burst (a big store_many seen
 * through many subscriptions) never builds more than output_backlog of
 * notifications for a connection that is not reading: what the socket
 * takes at once does not count.
 */
void conn_notify(struct conn *c, const char *line, size_t len)
{
	size_t limit = c->srv->d->limits.output_backlog;

	if (c->closing || c->lingering)
		return;
	if (c->notified + len > limit) {
		conn_flush(c);
		if (c->closing)
			return;
		if (c->notified + len > limit) {
			log_warn("disconnected a subscriber that stopped "
				 "reading: %zu bytes of notifications unsent "
				 "(limit %zu)",
				 c->notified + len, limit);
			conn_close(c);
			return;
		}
	}
	c->notified += len;
	conn_send(c, line, len);
	server_flush_soon(c->srv, c);
}

void conn_flush_notified(struct conn *c)
{
	c->mcp_list_queued = false;
	conn_process(c);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char discard[READ_CHUNK];
	struct conn *c = h->data;
	char *ptr = NULL;
	size_t avail = 0;

	(void)suggested;
	if (c->lingering) {
		*buf = uv_buf_init(discard, sizeof(discard));
		return;
	}
	if (framer_reserve(&c->in, READ_CHUNK, &ptr, &avail) < 0)
		avail = 0;
	*buf = uv_buf_init(ptr, (unsigned)avail);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct conn *c = s->data;

	(void)buf;
	if (c->lingering) {
		if (nread < 0 || (c->discarded += (size_t)nread) > LINGER_MAX)
			conn_close(c);
		return;
	}
	if (nread > 0) {
		framer_commit(&c->in, (size_t)nread);
		c->input_exhausted = false;
	} else if (nread == UV_EOF) {
		c->eof = true;
	} else if (nread < 0) {
		if (nread != UV_ENOBUFS)
			log_debug("connection read failed: %s",
				  uv_strerror((int)nread));
		conn_close(c);
		return;
	}
	conn_process(c);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
	(void)req;
	(void)status;
}

/*
 * Hang up on a refused client without losing our last words: closing a
 * socket with unread input can reset the connection before the client
 * reads the error we sent. So shut our side down (the client sees the
 * error, then EOF) and drop its input until it closes, or until it has
 * sent LINGER_MAX more bytes.
 */
static void linger(struct conn *c)
{
	c->lingering = true;
	c->linger_since_ms = uv_now(c->srv->d->loop);
	if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->pipe,
			shutdown_cb) < 0 ||
	    (!c->reading &&
	     uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb) < 0)) {
		conn_close(c);
		return;
	}
	c->reading = true;
}

/* Start or stop reading, or close, as the state now requires. */
static void conn_update(struct conn *c)
{
	bool want_read, finished;

	if (c->closing || c->lingering)
		return;
	want_read = (!c->busy || framer_pending(&c->in) < READ_AHEAD_MAX) &&
		    !c->eof && !c->draining && !c->close_when_flushed &&
		    backlog_ok(c);
	if (want_read && !c->reading) {
		if (uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb) <
		    0) {
			conn_close(c);
			return;
		}
		c->reading = true;
	} else if (!want_read && c->reading) {
		uv_read_stop((uv_stream_t *)&c->pipe);
		c->reading = false;
	}
	finished = c->close_when_flushed ||
		   ((c->eof || c->draining) && c->inflight == 0 &&
		    c->input_exhausted);
	if (!finished || c->out.len > 0 || c->out_queued > 0)
		return;
	if (c->close_when_flushed && !c->eof)
		linger(c);
	else
		conn_close(c);
}

void conn_send_error(struct conn *c, int code, const char *msg)
{
	json_t *err = rpc_error_new(NULL, code, msg, NULL);
	size_t len;
	char *line = err ? rpc_dump_line(err, &len) : NULL;

	if (line)
		conn_send(c, line, len);
	free(line);
	json_decref(err);
}

static void send_line_too_long(struct conn *c)
{
	char msg[96];

	snprintf(msg, sizeof(msg), "line exceeds the limit of %zu bytes",
		 c->in.max_line);
	conn_send_error(c, RPC_INVALID_REQUEST, msg);
	c->close_when_flushed = true;
}

/* Dispatch buffered lines until one waits, the backlog is full or the
 * input runs out; then flush once. */
static void conn_process(struct conn *c)
{
	if (c->processing || c->closing || c->lingering)
		return;
	c->processing = true;
	for (;;) {
		while (!c->busy && !c->close_when_flushed && !c->closing &&
		       backlog_ok(c)) {
			const char *line;
			size_t len;
			int rc = framer_next(&c->in, &line, &len);

			if (rc == 0) {
				c->input_exhausted = true;
				break;
			}
			if (rc < 0) {
				send_line_too_long(c);
				break;
			}
			c->lines++;
			dispatch_line(c, line, len);
		}
		conn_flush(c);
		/* The flush may have emptied a full backlog at once: carry on
		 * with buffered lines, as no read may ever come for them. */
		if (c->busy || c->close_when_flushed || c->closing ||
		    c->input_exhausted || !backlog_ok(c))
			break;
	}
	c->processing = false;
	if (c->slices && !c->closing && backlog_ok(c))
		server_slices_soon(c->srv, c);
	/* A partial line starts the clock of the line deadline. */
	if (!c->input_exhausted || framer_pending(&c->in) == 0)
		c->partial_since_ms = 0;
	else if (!c->partial_since_ms)
		c->partial_since_ms = uv_now(c->srv->d->loop);
	conn_update(c);
}

void conn_run_slice(struct conn *c)
{
	if (!c->slices || c->closing || !backlog_ok(c))
		return;
	dispatch_run_slice(c);
	conn_process(c);
}

void conn_check_deadline(struct conn *c, uint64_t now_ms)
{
	unsigned deadline = c->srv->d->limits.line_deadline_ms;
	char msg[96];

	if (c->lingering && !c->closing &&
	    now_ms - c->linger_since_ms >= LINGER_MAX_MS) {
		conn_close(c);
		return;
	}
	if (!c->partial_since_ms || c->closing || c->lingering ||
	    c->close_when_flushed || now_ms - c->partial_since_ms < deadline)
		return;
	snprintf(msg, sizeof(msg), "line not completed within %u ms", deadline);
	log_info("closing a connection that left a line unfinished for %u "
		 "ms",
		 deadline);
	conn_send_error(c, RPC_INVALID_REQUEST, msg);
	c->close_when_flushed = true;
	c->partial_since_ms = 0;
	conn_process(c);
}

void conn_resume(struct conn *c)
{
	c->busy = c->inflight >= c->max_inflight;
	conn_process(c);
}

void conn_set_unordered(struct conn *c)
{
	c->max_inflight = CONN_MCP_INFLIGHT;
	c->busy = c->inflight >= c->max_inflight;
}

void conn_drain(struct conn *c)
{
	c->draining = true;
	conn_process(c);
}

/* Peer credentials: only our own user (or root) may talk to us. */
static bool peer_allowed(struct conn *c)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	uv_os_fd_t fd;

	if (uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return false;
	c->peer_pid = (int)cred.pid;
	if (cred.uid == geteuid() || cred.uid == 0) {
		log_debug("connection of pid %d (uid %u)", (int)cred.pid,
			  (unsigned)cred.uid);
		return true;
	}
	log_warn("refused a connection from uid %u (pid %d)",
		 (unsigned)cred.uid, (int)cred.pid);
	return false;
}

static void refuse_too_many(struct conn *c)
{
	conn_send_error(c, RPC_UNAVAILABLE, "too many connections");
	c->close_when_flushed = true;
	log_warn("refused a connection: limit of %zu reached",
		 c->srv->d->limits.max_connections);
}

void conn_accept(struct server *srv)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c) {
		log_err("out of memory accepting a connection");
		return;
	}
	c->srv = srv;
	c->refs = 1;
	c->opened_ms = uv_now(srv->d->loop);
	c->input_exhausted = true;
	c->max_inflight = 1;
	c->mcp_log_level = -1;
	framer_init(&c->in, srv->d->limits.max_line);
	if (uv_pipe_init(srv->d->loop, &c->pipe, 0) < 0) {
		free(c);
		return;
	}
	c->pipe.data = c;
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&c->pipe) <
	    0) {
		conn_close(c);
		return;
	}
	if (!peer_allowed(c)) {
		conn_close(c);
		return;
	}
	if (srv->n_served >= srv->d->limits.max_connections) {
		refuse_too_many(c);
		conn_flush(c);
		conn_update(c);
		return;
	}
	c->counted = true;
	srv->n_served++;
	if (srv->d->stopping)
		c->draining = true;
	conn_update(c);
}
