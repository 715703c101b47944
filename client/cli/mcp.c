/*
 * `vmem mcp`: the stdio MCP server. The daemon answers MCP itself; this is
 * a line relay between stdin/stdout and the daemon's socket that keeps the
 * session alive around the daemon:
 *
 * - It reads each request's id (and method) as it passes, so it knows
 *   what is in flight. When the daemon's connection is lost (a crash,
 *   `vmem daemon stop`, an upgrade), every request in flight is answered
 *   at once with an error saying its outcome is unknown (a write is never
 *   sent twice), the daemon is reached again (started, when allowed), the
 *   session's MCP state is replayed on the new connection (initialize,
 *   notifications/initialized, logging/setLevel, resources/subscribe;
 *   the agent id through server.hello) under ids of our own whose answers
 *   are dropped, and the requests not yet sent go on. stderr says so.
 * - A request line over the daemon's max_line is never sent (the daemon
 *   would close the connection): its id and method are read by a bounded
 *   scan (protocol/idscan.h) and it is answered with an error for that id.
 *
 * Lines pass unchanged, in both directions. Memory is bounded: a line
 * from stdin is held whole only up to max_line; the queue to the daemon
 * and the output to stdout are read into only while they are below their
 * limits (backpressure), and a line from the daemon is at most
 * DOWN_LINE_MAX. stdout carries only JSON-RPC messages.
 */
#include "mcp.h"

#include "protocol/framer.h"
#include "protocol/idscan.h"
#include "protocol/jsonrpc.h"
#include "vmem.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK	 ((size_t)64 * 1024)
#define QUEUE_MAX	 ((size_t)256 * 1024)  /* unsent: stop reading stdin */
#define OUT_MAX		 ((size_t)1024 * 1024) /* unwritten bytes likewise */
#define DOWN_LINE_MAX	 ((size_t)64 * 1024 * 1024)
#define MAX_LINE_DEFAULT ((size_t)1024 * 1024)
#define DRAIN_MS	 10000 /* wait for answers after stdin EOF (default) */
#define RETRY_FIRST_MS	 100
#define RETRY_MAX_MS	 5000
#define REPLAY_ID	 "vmem-mcp-replay-"

enum { MCP_OK = 0, MCP_FAILED = 1, MCP_NO_DAEMON = 2 };

/* A line queued for the daemon (LF included), sent from off on, and the
 * requests it carries ([[id, method, tool or null]...], owned): they are
 * in flight once the line is sent whole. */
struct chunk {
	struct chunk *next;
	size_t len, off;
	bool ours; /* a replay line */
	json_t *reqs;
	size_t nulls; /* answers with a null id the daemon owes it */
	char data[];
};

/* A request sent to the daemon and not answered yet. */
struct pending {
	struct pending *next;
	json_t *id;	 /* owned */
	char *tool;	 /* tools/call's tool name (owned), else NULL */
	bool ours;	 /* a replayed request: its answer is dropped */
	char method[40]; /* for messages */
};

struct bridge {
	const struct mcp_options *opts;
	int in, out;
	vmem_client *c;
	int sock; /* -1 while disconnected */
	size_t max_line;

	/* stdin: a partial line, or the scan of one too long to hold */
	char *ibuf;
	size_t ilen, icap;
	bool skipping;
	size_t skipped; /* bytes of the line being skipped */
	struct idscan scan;
	bool in_eof;

	/* to the daemon, and what it owes us */
	struct chunk *q_head, *q_tail;
	size_t q_bytes;
	struct pending *pend;
	size_t nulls_owed; /* answers with a null id sent lines are owed */

	/* from the daemon, and to stdout */
	struct framer fr;
	char *obuf;
	size_t ostart, olen, ocap;
	int out_sock; /* stdout is a socket: 1, not: 0, unknown: -1 */

	/* the session's state, replayed on a new connection */
	json_t *init_params;
	bool initialized;
	json_t *level_params;
	json_t *subscriptions; /* uri strings */
	unsigned replay_seq;

	int64_t retry_at; /* next connection attempt while disconnected */
	int retry_ms;
	int64_t deadline; /* end of the drain after stdin EOF; 0: none */
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- output to stdout ---------------------------------------------- */

/* Queue a line for stdout (LF added). False when memory ran out. */
static bool out_line(struct bridge *b, const char *line, size_t len)
{
	if (b->ostart > 0 && b->ostart == b->olen)
		b->ostart = b->olen = 0;
	if (b->olen + len + 1 > b->ocap) {
		size_t cap = b->ocap ? b->ocap : 65536;
		char *p;

		if (b->ostart > 0) {
			memmove(b->obuf, b->obuf + b->ostart,
				b->olen - b->ostart);
			b->olen -= b->ostart;
			b->ostart = 0;
		}
		while (cap < b->olen + len + 1)
			cap *= 2;
		if (cap != b->ocap) {
			p = realloc(b->obuf, cap);
			if (!p)
				return false;
			b->obuf = p;
			b->ocap = cap;
		}
	}
	memcpy(b->obuf + b->olen, line, len);
	b->obuf[b->olen + len] = '\n';
	b->olen += len + 1;
	return true;
}

static size_t out_pending(const struct bridge *b)
{
	return b->olen - b->ostart;
}

/* Queue a message (stolen) for stdout. */
static void out_json(struct bridge *b, json_t *msg)
{
	char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;

	if (!text || !out_line(b, text, strlen(text)))
		fputs("vmem mcp: out of memory answering a request\n", stderr);
	free(text);
	json_decref(msg);
}

/* Answer id with a JSON-RPC error carrying data.type. */
static void answer_error(struct bridge *b, json_t *id, int code,
			 const char *type, const char *msg)
{
	out_json(b, json_pack("{s:s,s:O,s:{s:i,s:s,s:{s:s}}}", "jsonrpc", "2.0",
			      "id", id, "error", "code", code, "message", msg,
			      "data", "type", type));
}

/* Answer id with a tool error (a CallToolResult the model sees). */
static void answer_tool_error(struct bridge *b, json_t *id, const char *text)
{
	out_json(b, json_pack("{s:s,s:O,s:{s:[{s:s,s:s}],s:b}}", "jsonrpc",
			      "2.0", "id", id, "result", "content", "type",
			      "text", "text", text, "isError", 1));
}

/*
 * Write buffered answers to stdout without blocking: send() with
 * MSG_DONTWAIT when stdout is a socket (as MCP clients built on libuv
 * give us), else at most PIPE_BUF bytes, which a pipe that polled
 * writable takes whole. 0, or a negative errno.
 */
static int write_out(struct bridge *b)
{
	size_t chunk = out_pending(b);
	const char *p = b->obuf + b->ostart;
	ssize_t n = -1;

	if (chunk == 0)
		return 0;
	for (;;) {
		if (b->out_sock != 0) {
			n = send(b->out, p, chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n < 0 && errno == ENOTSOCK) {
				b->out_sock = 0;
				continue;
			}
			if (n >= 0)
				b->out_sock = 1;
		} else {
			if (chunk > PIPE_BUF)
				chunk = PIPE_BUF;
			n = write(b->out, p, chunk);
		}
		if (n >= 0 || errno != EINTR)
			break;
	}
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	b->ostart += (size_t)n;
	if (b->ostart == b->olen)
		b->ostart = b->olen = 0;
	return 0;
}

/* ---- requests in flight --------------------------------------------- */

static void pending_free(struct pending *p)
{
	json_decref(p->id);
	free(p->tool);
	free(p);
}

/* A request of a line just sent whole: [id, method, tool or null]. */
static void pending_add(struct bridge *b, json_t *req, bool ours)
{
	struct pending *p = calloc(1, sizeof(*p));
	json_t *tool = json_array_get(req, 2);

	if (!p) {
		fputs("vmem mcp: out of memory\n", stderr);
		return;
	}
	p->id = json_incref(json_array_get(req, 0));
	p->ours = ours;
	snprintf(p->method, sizeof(p->method), "%s",
		 json_is_string(json_array_get(req, 1))
			 ? json_string_value(json_array_get(req, 1))
			 : "a request");
	if (json_is_string(tool))
		p->tool = strdup(json_string_value(tool));
	p->next = b->pend;
	b->pend = p;
}

/* The pending request answered by id, taken off the list, or NULL. */
static struct pending *pending_take(struct bridge *b, json_t *id)
{
	for (struct pending **pp = &b->pend; *pp; pp = &(*pp)->next)
		if (json_equal((*pp)->id, id)) {
			struct pending *p = *pp;

			*pp = p->next;
			return p;
		}
	return NULL;
}

static bool client_pending(const struct bridge *b)
{
	for (const struct pending *p = b->pend; p; p = p->next)
		if (!p->ours)
			return true;
	return false;
}

/* The connection was lost with p in flight: its outcome is unknown. */
static void answer_unknown(struct bridge *b, struct pending *p, const char *why)
{
	char text[512];

	if (p->tool) {
		snprintf(text, sizeof(text),
			 "UnavailableError: the connection to vmemd was lost "
			 "while %s ran (%s), so its outcome is unknown: it may "
			 "or may not have taken effect. vmem mcp has "
			 "reconnected; check the state (get_decision, "
			 "decision_history) before repeating a write.",
			 p->tool, why);
		answer_tool_error(b, p->id, text);
	} else {
		snprintf(text, sizeof(text),
			 "the connection to vmemd was lost while %s ran (%s); "
			 "its outcome is unknown",
			 p->method, why);
		answer_error(b, p->id, -32007, "UnavailableError", text);
	}
}

/* ---- the queue to the daemon ----------------------------------------- */

static void chunk_free(struct chunk *c)
{
	json_decref(c->reqs);
	free(c);
}

/* Queue a line with its requests (stolen) and the number of answers with
 * a null id it is owed; a replay line goes first. */
static bool queue_line(struct bridge *b, const char *line, size_t len,
		       json_t *reqs, size_t nulls, bool ours)
{
	struct chunk *c = malloc(sizeof(*c) + len + 1);
	bool front = ours;

	if (!c) {
		json_decref(reqs);
		return false;
	}
	c->reqs = reqs;
	c->nulls = nulls;
	c->ours = ours;
	memcpy(c->data, line, len);
	c->data[len] = '\n';
	c->len = len + 1;
	c->off = 0;
	c->next = NULL;
	if (front) {
		c->next = b->q_head;
		b->q_head = c;
		if (!b->q_tail)
			b->q_tail = c;
	} else {
		if (b->q_tail)
			b->q_tail->next = c;
		else
			b->q_head = c;
		b->q_tail = c;
	}
	b->q_bytes += c->len;
	return true;
}

/* Send queued lines; 0, or a negative errno. */
static int send_queue(struct bridge *b)
{
	while (b->q_head) {
		struct chunk *c = b->q_head;
		ssize_t n = send(b->sock, c->data + c->off, c->len - c->off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0
								       : -errno;
		c->off += (size_t)n;
		if (c->off < c->len)
			continue;
		b->q_head = c->next;
		if (!b->q_head)
			b->q_tail = NULL;
		b->q_bytes -= c->len;
		for (size_t i = 0; i < json_array_size(c->reqs); i++)
			pending_add(b, json_array_get(c->reqs, i), c->ours);
		b->nulls_owed += c->nulls;
		chunk_free(c);
	}
	return 0;
}

/* ---- the session's state ---------------------------------------------- */

/* The client cancelled a request: it will not look at an answer, so none
 * is owed, not even "outcome unknown" if the daemon goes away. */
static void forget(struct bridge *b, json_t *id)
{
	struct pending *p = pending_take(b, id);

	if (p)
		pending_free(p);
	for (struct chunk *c = b->q_head; c; c = c->next)
		for (size_t i = 0; i < json_array_size(c->reqs); i++)
			if (json_equal(json_array_get(
					       json_array_get(c->reqs, i), 0),
				       id))
				json_array_remove(c->reqs, i--);
}

/* Follow what a client message changes in the session, for a replay. */
static void track(struct bridge *b, const char *method, json_t *params)
{
	json_t *uri = json_object_get(params, "uri");

	if (!strcmp(method, "notifications/cancelled")) {
		json_t *id = json_object_get(params, "requestId");

		if (id)
			forget(b, id);
	} else if (!strcmp(method, "initialize") && json_is_object(params)) {
		json_decref(b->init_params);
		b->init_params = json_deep_copy(params);
	} else if (!strcmp(method, "notifications/initialized")) {
		b->initialized = true;
	} else if (!strcmp(method, "logging/setLevel")) {
		json_decref(b->level_params);
		b->level_params = json_deep_copy(params);
	} else if (json_is_string(uri) &&
		   (!strcmp(method, "resources/subscribe") ||
		    !strcmp(method, "resources/unsubscribe"))) {
		for (size_t i = 0; i < json_array_size(b->subscriptions); i++)
			if (json_equal(json_array_get(b->subscriptions, i),
				       uri)) {
				json_array_remove(b->subscriptions, i);
				break;
			}
		if (!strcmp(method, "resources/subscribe"))
			json_array_append(b->subscriptions, uri);
	}
}

/* One element of a client's line, before it is queued: a request with an
 * id goes on reqs; true when the daemon will answer it with a null id
 * (an invalid request without a usable id, or a request whose id is
 * null), which no id can match to it. */
static bool note_message(struct bridge *b, json_t *msg, json_t *reqs)
{
	json_t *method = json_object_get(msg, "method");
	json_t *params = json_object_get(msg, "params");
	json_t *name = json_object_get(params, "name");
	bool tool = json_is_string(method) &&
		    !strcmp(json_string_value(method), "tools/call") &&
		    json_is_string(name);
	struct rpc_request req;

	rpc_request_check(msg, &req);
	if (req.notification)
		req.id = NULL;
	if (json_is_string(method))
		track(b, json_string_value(method), params);
	if (req.notification)
		return false;
	if (!req.id || json_is_null(req.id))
		return true;
	json_array_append_new(reqs, json_pack("[O,O,O]", req.id,
					      method ? method : json_null(),
					      tool ? name : json_null()));
	return false;
}

/* A complete line from stdin: noted, then queued unchanged. */
static void take_line(struct bridge *b, const char *line, size_t len)
{
	json_t *msg, *reqs = json_array();
	size_t i, nulls = 0;

	while (len > 0 && (line[len - 1] == '\r'))
		len--;
	if (len == 0 || !reqs) {
		json_decref(reqs);
		return;
	}
	msg = json_loadb(line, len, 0, NULL);
	if (json_is_array(msg) && json_array_size(msg) > 0) {
		for (i = 0; i < json_array_size(msg); i++)
			nulls += note_message(b, json_array_get(msg, i), reqs);
	} else if (json_is_object(msg)) {
		nulls += note_message(b, msg, reqs);
	} else {
		/* Not JSON, not a request, or an empty batch: the daemon
		 * answers it with one error whose id is null. */
		nulls = 1;
	}
	json_decref(msg);
	if (!queue_line(b, line, len, reqs, nulls, false))
		fputs("vmem mcp: out of memory queueing a request\n", stderr);
}

/* The end of a line too long to send: answer its request, if it has an
 * id we could read. */
static void refuse_long_line(struct bridge *b)
{
	size_t id_len, m_len;
	const char *id_text = idscan_id(&b->scan, &id_len);
	const char *m_text = idscan_method(&b->scan, &m_len);
	json_t *id =
		id_text ? json_loadb(id_text, id_len, JSON_DECODE_ANY, NULL)
			: NULL;
	json_t *method =
		m_text ? json_loadb(m_text, m_len, JSON_DECODE_ANY, NULL)
		       : NULL;
	char text[512];

	if (!id || !(json_is_string(id) || json_is_number(id))) {
		fprintf(stderr,
			"vmem mcp: dropped a message of %zu bytes, over the "
			"daemon's limit of %zu bytes per line, without an id "
			"to answer\n",
			b->skipped, b->max_line);
	} else if (json_is_string(method) &&
		   !strcmp(json_string_value(method), "tools/call")) {
		snprintf(text, sizeof(text),
			 "ValueError: this tool call is %zu bytes, over the "
			 "limit of %zu bytes per request; nothing was done "
			 "(a decision's content is at most 102400 bytes)",
			 b->skipped, b->max_line);
		answer_tool_error(b, id, text);
		fprintf(stderr,
			"vmem mcp: refused a tool call of %zu bytes "
			"(over max_line)\n",
			b->skipped);
	} else {
		snprintf(text, sizeof(text),
			 "request of %zu bytes exceeds the limit of %zu bytes "
			 "per line; nothing was done",
			 b->skipped, b->max_line);
		answer_error(b, id, -32600, "ValueError", text);
		fprintf(stderr,
			"vmem mcp: refused a request of %zu bytes "
			"(over max_line)\n",
			b->skipped);
	}
	json_decref(id);
	json_decref(method);
}

/* Split what stdin gave into lines; a line past max_line is scanned and
 * dropped as it streams by. */
static void take_input(struct bridge *b)
{
	size_t start = 0;

	for (;;) {
		char *lf = memchr(b->ibuf + start, '\n', b->ilen - start);
		size_t end = lf ? (size_t)(lf - b->ibuf) : b->ilen;

		if (b->skipping) {
			idscan_feed(&b->scan, b->ibuf + start, end - start);
			b->skipped += end - start;
			if (!lf) {
				start = b->ilen;
				break;
			}
			refuse_long_line(b);
			b->skipping = false;
			start = end + 1;
			continue;
		}
		if (lf) {
			size_t len = end - start;

			if (len > 0 && b->ibuf[end - 1] == '\r')
				len--;
			if (len <= b->max_line) {
				take_line(b, b->ibuf + start, end - start);
			} else {
				/* Whole but too long for the daemon. */
				idscan_init(&b->scan);
				idscan_feed(&b->scan, b->ibuf + start, len);
				b->skipped = len;
				refuse_long_line(b);
			}
			start = end + 1;
			continue;
		}
		if (b->ilen - start > b->max_line + 1) {
			b->skipping = true;
			b->skipped = 0;
			idscan_init(&b->scan);
			continue;
		}
		break;
	}
	memmove(b->ibuf, b->ibuf + start, b->ilen - start);
	b->ilen -= start;
}

/* Read what stdin has; 0, or a negative errno. */
static int read_stdin(struct bridge *b)
{
	size_t room = b->icap - b->ilen;
	ssize_t n;

	do
		n = read(b->in, b->ibuf + b->ilen, room);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	if (n == 0) {
		b->in_eof = true;
		/* A last line without LF is still a line. */
		if (b->ilen > 0 && !b->skipping) {
			take_line(b, b->ibuf, b->ilen);
			b->ilen = 0;
		} else if (b->skipping) {
			refuse_long_line(b);
			b->skipping = false;
		}
		return 0;
	}
	b->ilen += (size_t)n;
	take_input(b);
	return 0;
}

/* ---- from the daemon -------------------------------------------------- */

/* An answer of the daemon settles its pending request, or one of the
 * answers with a null id it owes; true for a replayed request's answer,
 * which is ours. */
static bool settle(struct bridge *b, json_t *answer)
{
	json_t *id = json_object_get(answer, "id");
	json_t *e = json_object_get(answer, "error");
	struct pending *p;
	bool ours;

	if (json_is_null(id)) {
		if (b->nulls_owed > 0)
			b->nulls_owed--;
		return false;
	}
	p = pending_take(b, id);
	if (!p)
		return false;
	ours = p->ours;
	if (ours && e)
		fprintf(stderr, "vmem mcp: replaying %s: %s\n", p->method,
			json_string_value(json_object_get(e, "message")));
	pending_free(p);
	return ours;
}

/* One line from the daemon: answers settle what they answer; ours are
 * dropped; everything else goes to stdout unchanged. */
static void daemon_line(struct bridge *b, const char *line, size_t len)
{
	json_t *msg = json_loadb(line, len, 0, NULL);
	bool relay = true;

	if (json_is_object(msg) && json_object_get(msg, "id") &&
	    (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
		relay = !settle(b, msg);
	} else if (json_is_array(msg)) {
		size_t i;
		json_t *v;

		json_array_foreach(msg, i, v)
		{
			settle(b, v);
		}
	}
	json_decref(msg);
	if (relay && !out_line(b, line, len))
		fputs("vmem mcp: out of memory relaying an answer\n", stderr);
}

/* Read what the daemon sent; 0, -ECONNRESET at its end, or -errno. */
static int read_daemon(struct bridge *b)
{
	const char *line;
	size_t len, avail;
	char *p;
	ssize_t n;
	int rc;

	rc = framer_reserve(&b->fr, READ_CHUNK, &p, &avail);
	if (rc < 0)
		return rc;
	do
		n = recv(b->sock, p, avail, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	if (n == 0)
		return -ECONNRESET;
	framer_commit(&b->fr, (size_t)n);
	while ((rc = framer_next(&b->fr, &line, &len)) == 1)
		daemon_line(b, line, len);
	return rc < 0 ? rc : 0;
}

/* ---- connecting, losing, reconnecting --------------------------------- */

/* Queue our replay of the session's state at the front of the queue: the
 * daemon must see it before the client's next requests. */
static void replay(struct bridge *b)
{
	json_t *msgs = json_array();
	size_t i, n = 0;

	if (!msgs)
		return;
	if (b->init_params)
		json_array_append_new(msgs,
				      json_pack("{s:s,s:s,s:O}", "jsonrpc",
						"2.0", "method", "initialize",
						"params", b->init_params));
	if (b->initialized)
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "jsonrpc",
						      "2.0", "method",
						      "notifications/"
						      "initialized"));
	if (b->level_params)
		json_array_append_new(
			msgs, json_pack("{s:s,s:s,s:O}", "jsonrpc", "2.0",
					"method", "logging/setLevel", "params",
					b->level_params));
	for (i = 0; i < json_array_size(b->subscriptions); i++)
		json_array_append_new(
			msgs,
			json_pack("{s:s,s:s,s:{s:O}}", "jsonrpc", "2.0",
				  "method", "resources/subscribe", "params",
				  "uri", json_array_get(b->subscriptions, i)));
	/* Front of the queue, so in reverse. */
	for (i = json_array_size(msgs); i-- > 0;) {
		json_t *m = json_array_get(msgs, i);
		const char *method =
			json_string_value(json_object_get(m, "method"));
		char id[64], *text;

		json_t *reqs = json_array();

		if (strncmp(method, "notifications/", 14) != 0) {
			snprintf(id, sizeof(id), REPLAY_ID "%u",
				 ++b->replay_seq);
			json_object_set_new(m, "id", json_string(id));
			json_array_append_new(reqs,
					      json_pack("[s,s,n]", id, method));
		}
		text = json_dumps(m, JSON_COMPACT);
		if (text && queue_line(b, text, strlen(text), reqs, 0, true))
			n++;
		else if (!text)
			json_decref(reqs);
		free(text);
	}
	json_decref(msgs);
	if (n)
		fprintf(stderr,
			"vmem mcp: replayed the session (%zu messages: "
			"initialize, level, subscriptions)\n",
			n);
}

/* Connect (starting the daemon when allowed) and learn max_line.
 * 0, or a negative errno with err set. */
static int connect_daemon(struct bridge *b, int autostart,
			  struct vmem_error *err)
{
	struct vmem_options o = {0};
	char *hello = NULL;
	json_t *r;
	int rc;

	o.repo = b->opts->repo;
	o.socket = b->opts->socket;
	/* libvmem sends server.hello with it and takes the answer before
	 * the relay starts, so no client id can collide with it. */
	o.agent_id = b->opts->agent_id;
	o.autostart = autostart;
	o.timeout_ms = b->opts->timeout_ms;
	rc = vmem_client_open(&b->c, &o, err);
	if (rc < 0)
		return rc;
	rc = vmem_call(b->c, "server.hello", "{}", &hello, err);
	if (rc == 0) {
		r = json_loads(hello, 0, NULL);
		json_t *ml = json_object_get(json_object_get(r, "limits"),
					     "max_line");

		if (json_is_integer(ml) && json_integer_value(ml) > 0)
			b->max_line = (size_t)json_integer_value(ml);
		json_decref(r);
		vmem_free(hello);
		rc = vmem_client_fd(b->c);
	}
	if (rc < 0) {
		if (!err->message[0])
			snprintf(err->message, sizeof(err->message), "%s",
				 vmem_strerror(rc));
		vmem_client_free(b->c);
		b->c = NULL;
		return rc;
	}
	b->sock = rc;
	framer_done(&b->fr);
	framer_init(&b->fr, DOWN_LINE_MAX);
	return 0;
}

/* The daemon's connection is gone: answer what was in flight, keep what
 * was not sent, and try to reach it again at once. */
static void lose(struct bridge *b, const char *why)
{
	struct pending *p;

	fprintf(stderr,
		"vmem mcp: lost the connection to vmemd on %s (%s); "
		"reconnecting\n",
		vmem_client_socket(b->c), why);
	vmem_client_free(b->c);
	b->c = NULL;
	b->sock = -1;
	while ((p = b->pend)) {
		b->pend = p->next;
		if (!p->ours)
			answer_unknown(b, p, why);
		pending_free(p);
	}
	b->nulls_owed = 0; /* nothing to answer them by */
	/* A line half sent never reached the daemon whole: send it again,
	 * whole, on the next connection. */
	if (b->q_head)
		b->q_head->off = 0;
	/* Our own replay lines are rebuilt on the next connection. */
	while (b->q_head && b->q_head->ours) {
		struct chunk *c = b->q_head;

		b->q_head = c->next;
		if (!b->q_head)
			b->q_tail = NULL;
		b->q_bytes -= c->len;
		chunk_free(c);
	}
	b->retry_at = now_ms();
	b->retry_ms = RETRY_FIRST_MS;
}

/* Answer every request waiting in the queue (the daemon stays out of
 * reach) and drop them. */
static void fail_queue(struct bridge *b, const char *why)
{
	char text[512];

	while (b->q_head) {
		struct chunk *c = b->q_head;

		b->q_head = c->next;
		b->q_bytes -= c->len;
		for (size_t i = 0; !c->ours && i < json_array_size(c->reqs);
		     i++) {
			json_t *req = json_array_get(c->reqs, i);
			json_t *id = json_array_get(req, 0);

			snprintf(text, sizeof(text),
				 "vmemd cannot be reached (%.400s); nothing "
				 "was done",
				 why);
			if (json_is_string(json_array_get(req, 2))) {
				char tool[600];

				snprintf(tool, sizeof(tool),
					 "UnavailableError: %s", text);
				answer_tool_error(b, id, tool);
			} else {
				answer_error(b, id, -32007, "UnavailableError",
					     text);
			}
		}
		chunk_free(c);
	}
	b->q_tail = NULL;
}

/*
 * While disconnected: one attempt to reach the daemon again. With
 * requests waiting it may start the daemon (when allowed) and they fail
 * if it cannot be reached; idle, it only looks for a daemon started
 * otherwise (a restart by systemd, another client), so a stopped daemon
 * is started again by the next request, not behind the user's back.
 */
static void reconnect(struct bridge *b)
{
	struct vmem_error err = {0};
	bool needed = b->q_head != NULL;

	if (connect_daemon(b, needed ? b->opts->autostart : 0, &err) == 0) {
		fprintf(stderr, "vmem mcp: reconnected to vmemd on %s\n",
			vmem_client_socket(b->c));
		replay(b);
		return;
	}
	if (needed) {
		fprintf(stderr,
			"vmem mcp: cannot reach vmemd: %s%s%s; retrying in "
			"%d ms\n",
			err.type, err.type[0] ? ": " : "", err.message,
			b->retry_ms);
		/* Requests do not wait for a daemon that stays away. */
		fail_queue(b, err.message[0] ? err.message : "no daemon");
	}
	b->retry_at = now_ms() + b->retry_ms;
	b->retry_ms =
		b->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : b->retry_ms * 2;
}

/* ---- the loop --------------------------------------------------------- */

static int poll_timeout(const struct bridge *b)
{
	int64_t t = -1, now = now_ms();

	if (b->sock < 0 && (b->q_head || !b->in_eof))
		t = b->retry_at > now ? b->retry_at - now : 0;
	if (b->deadline) {
		int64_t d = b->deadline > now ? b->deadline - now : 0;

		if (t < 0 || d < t)
			t = d;
	}
	return t < 0 ? -1 : t > INT_MAX ? INT_MAX : (int)t;
}

static int run(struct bridge *b, int drain_ms)
{
	struct pollfd pfd[3];
	struct pollfd *pin, *psock, *pout;
	int n, rc;

	for (;;) {
		if (b->in_eof && !b->deadline)
			b->deadline = now_ms() + drain_ms;
		if (b->sock < 0 && (b->q_head || !b->in_eof) &&
		    now_ms() >= b->retry_at)
			reconnect(b);
		if (b->in_eof && !b->skipping && !b->q_head &&
		    !client_pending(b) && !b->nulls_owed && out_pending(b) == 0)
			return MCP_OK;
		if (b->deadline && now_ms() >= b->deadline) {
			fprintf(stderr,
				"vmem mcp: no end of answers from the daemon "
				"%d ms after end of input\n",
				drain_ms);
			return MCP_FAILED;
		}

		pin = psock = pout = NULL;
		n = 0;
		if (!b->in_eof && b->q_bytes < QUEUE_MAX &&
		    out_pending(b) < OUT_MAX) {
			pin = &pfd[n++];
			*pin = (struct pollfd){.fd = b->in, .events = POLLIN};
		}
		if (b->sock >= 0) {
			short ev = b->q_head ? POLLOUT : 0;

			if (out_pending(b) < OUT_MAX)
				ev |= POLLIN;
			psock = &pfd[n++];
			*psock = (struct pollfd){.fd = b->sock, .events = ev};
		}
		if (out_pending(b) > 0) {
			pout = &pfd[n++];
			*pout = (struct pollfd){.fd = b->out,
						.events = POLLOUT};
		}
		if (poll(pfd, (nfds_t)n, poll_timeout(b)) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "vmem mcp: poll: %s\n",
				strerror(errno));
			return MCP_FAILED;
		}
		if (pin && (pin->revents & POLLNVAL)) {
			b->in_eof = true;
		} else if (pin && pin->revents) {
			rc = read_stdin(b);
			if (rc < 0) {
				fprintf(stderr, "vmem mcp: stdin: %s\n",
					strerror(-rc));
				return MCP_FAILED;
			}
		}
		if (psock && psock->revents) {
			rc = 0;
			if (psock->revents & (POLLIN | POLLERR | POLLHUP))
				rc = read_daemon(b);
			if (rc == 0 && b->q_head &&
			    (psock->revents & (POLLOUT | POLLERR | POLLHUP)))
				rc = send_queue(b);
			if (rc == 0 && (psock->revents & POLLNVAL))
				rc = -EBADF;
			if (rc < 0)
				lose(b, rc == -ECONNRESET
						? "it closed the connection"
					: rc == -EMSGSIZE
						? "an answer over 64 MiB"
						: strerror(-rc));
		}
		if (pout && pout->revents) {
			rc = pout->revents & POLLNVAL ? -EBADF : write_out(b);
			if (rc < 0) {
				fprintf(stderr, "vmem mcp: stdout: %s\n",
					strerror(-rc));
				return MCP_FAILED;
			}
		}
	}
}

int mcp_run(const struct mcp_options *opts)
{
	struct vmem_error err = {0};
	struct bridge b = {.opts = opts,
			   .in = STDIN_FILENO,
			   .out = STDOUT_FILENO,
			   .sock = -1,
			   .max_line = MAX_LINE_DEFAULT,
			   .out_sock = -1};
	int status = MCP_NO_DAEMON, rc;

	/* A client gone away is seen as EPIPE, never a fatal signal. */
	signal(SIGPIPE, SIG_IGN);
	framer_init(&b.fr, DOWN_LINE_MAX);
	b.subscriptions = json_array();
	if (!b.subscriptions) {
		fputs("vmem mcp: out of memory\n", stderr);
		goto out;
	}
	rc = connect_daemon(&b, opts->autostart, &err);
	if (rc < 0) {
		/* The daemon refused the hello (a bad agent id): a domain
		 * error, status 1 as everywhere in the CLI. */
		if (err.code != 0)
			status = MCP_FAILED;
		fprintf(stderr, "vmem mcp: %s%s%s\n", err.type,
			err.type[0] ? ": " : "",
			err.message[0] ? err.message : vmem_strerror(rc));
		goto out;
	}
	/* A whole line of max_line bytes, its CR and LF, and a read. */
	b.icap = b.max_line + 2 + READ_CHUNK;
	b.ibuf = malloc(b.icap);
	if (!b.ibuf) {
		fputs("vmem mcp: out of memory\n", stderr);
		status = MCP_FAILED;
		goto out;
	}
	status = run(&b, opts->timeout_ms > 0 ? opts->timeout_ms : DRAIN_MS);
out:
	vmem_client_free(b.c);
	framer_done(&b.fr);
	while (b.pend) {
		struct pending *p = b.pend;

		b.pend = p->next;
		pending_free(p);
	}
	while (b.q_head) {
		struct chunk *c = b.q_head;

		b.q_head = c->next;
		chunk_free(c);
	}
	json_decref(b.init_params);
	json_decref(b.level_params);
	json_decref(b.subscriptions);
	free(b.ibuf);
	free(b.obuf);
	return status;
}
