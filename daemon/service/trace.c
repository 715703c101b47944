/* See trace.h. */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "errmsg.h"

/* ---- traceparent ---- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1; /* uppercase is not allowed either */
}

/* n bytes from 2n lowercase hex digits; false if any is not one. */
static bool unhex(const char *s, uint8_t *out, size_t n)
{
	int hi, lo;

	for (size_t i = 0; i < n; i++) {
		hi = hexval(s[2 * i]);
		lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	while (n--)
		if (*p++)
			return false;
	return true;
}

int traceparent_parse(const char *s, size_t len, struct trace_ctx *out)
{
	uint8_t version;

	if (len < 55 || len > TRACEPARENT_MAX)
		return -EINVAL;
	if (!unhex(s, &version, 1) || version == 0xff)
		return -EINVAL;
	if (version == 0 ? len != 55 : len > 55 && s[55] != '-')
		return -EINVAL;
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		return -EINVAL;
	if (!unhex(s + 3, out->trace_id, 16) ||
	    !unhex(s + 36, out->span_id, 8) || !unhex(s + 53, &out->flags, 1))
		return -EINVAL;
	if (all_zero(out->trace_id, 16) || all_zero(out->span_id, 8))
		return -EINVAL;
	return 0;
}

static void tohex(const uint8_t *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
}

void traceparent_format(const struct trace_ctx *c, char out[56])
{
	memcpy(out, "00-", 3);
	tohex(c->trace_id, 16, out + 3);
	out[35] = '-';
	tohex(c->span_id, 8, out + 36);
	out[52] = '-';
	tohex(&c->flags, 1, out + 53);
	out[55] = '\0';
}

const char *trace_span_name(const char *method)
{
	static const struct {
		const char *method, *span;
	} names[] = {
		{"session.create", "memory.create_session"},
		{"message.store", "memory.store_message"},
		{"message.history", "memory.get_conversation_history"},
		{"document.store", "memory.store_document"},
		{"document.semantic_search", "memory.semantic_search"},
		{"document.temporal_query", "memory.temporal_query"},
		{"server.health", "memory.health_check"},
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(method, names[i].method) == 0)
			return names[i].span;
	return method;
}

uint64_t trace_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- ids: splitmix64 seeded once from the kernel (loop thread only) ---- */

static uint64_t id_state;

static uint64_t next_id(void)
{
	uint64_t z;

	if (!id_state &&
	    getrandom(&id_state, sizeof(id_state), 0) != sizeof(id_state))
		id_state = trace_now_ns() ^ (uint64_t)getpid() << 32;
	z = (id_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void random_id(uint8_t *p, size_t n)
{
	uint64_t v;

	do {
		for (size_t i = 0; i < n; i += 8) {
			v = next_id();
			memcpy(p + i, &v, n - i < 8 ? n - i : 8);
		}
	} while (all_zero(p, n));
}

/* ---- spans ---- */

void span_start(struct span *sp, const char *name,
		const struct trace_ctx *parent, uint64_t start_ns)
{
	memset(sp, 0, sizeof(*sp));
	sp->name = name;
	sp->start_ns = start_ns;
	sp->recording = true;
	if (parent) {
		memcpy(sp->ctx.trace_id, parent->trace_id, 16);
		memcpy(sp->parent, parent->span_id, 8);
		sp->ctx.flags = parent->flags;
		sp->has_parent = true;
		sp->recording = parent->flags & 1;
	} else {
		random_id(sp->ctx.trace_id, 16);
		sp->ctx.flags = 1;
	}
	random_id(sp->ctx.span_id, 8);
}

/*
 * A JSON string of at most max bytes of s: escaped, cut on a character
 * boundary, bytes that are not UTF-8 replaced by U+FFFD.
 */
static bool put_string(struct buf *b, const char *s, size_t len, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, n, used = 0;
	char esc[8];
	bool ok = buf_append(b, "\"", 1);

	while (ok && i < len) {
		unsigned c = p[i];

		n = c < 0x80	     ? 1
		    : (c >> 5) == 6  ? 2
		    : (c >> 4) == 14 ? 3
		    : (c >> 3) == 30 ? 4
				     : 0;
		if (n > 1) {
			if (i + n > len)
				n = 0;
			for (size_t k = 1; n && k < n; k++)
				if ((p[i + k] & 0xc0) != 0x80)
					n = 0;
		}
		if (used + (n ? n : 3) > max)
			break;
		if (n == 0) {
			ok = buf_append(b, "\xef\xbf\xbd", 3);
			used += 3;
			i++;
			continue;
		}
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			ok = buf_append(b, esc, 2);
		} else if (c < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			ok = buf_append(b, esc, 6);
		} else {
			ok = buf_append(b, s + i, n);
		}
		used += n;
		i += n;
	}
	return ok && buf_append(b, "\"", 1);
}

/* ,{"key":"K","value":{ — the opening of one attribute. */
static bool attr_open(struct span *sp, const char *key)
{
	struct buf *b = &sp->attrs;

	if (sp->failed || sp->nattrs >= TRACE_ATTRS)
		return false;
	sp->nattrs++;
	if (!((b->len == 0 || buf_append(b, ",", 1)) &&
	      buf_puts(b, "{\"key\":") &&
	      put_string(b, key, strlen(key), TRACE_VALUE_MAX) &&
	      buf_puts(b, ",\"value\":{"))) {
		sp->failed = true;
		return false;
	}
	return true;
}

static void attr_close(struct span *sp, bool ok)
{
	if (!ok || !buf_puts(&sp->attrs, "}}"))
		sp->failed = true;
}

void span_attr_str(struct span *sp, const char *key, const char *v, size_t len)
{
	if (attr_open(sp, key))
		attr_close(sp, buf_puts(&sp->attrs, "\"stringValue\":") &&
				       put_string(&sp->attrs, v, len,
						  TRACE_VALUE_MAX));
}

void span_attr_int(struct span *sp, const char *key, int64_t v)
{
	char num[32];

	snprintf(num, sizeof(num), "\"intValue\":\"%" PRId64 "\"", v);
	if (attr_open(sp, key))
		attr_close(sp, buf_puts(&sp->attrs, num));
}

void span_attr_double(struct span *sp, const char *key, double v)
{
	char num[48];

	/* JSON has no NaN or infinity; protobuf's mapping spells them. */
	if (isnan(v))
		snprintf(num, sizeof(num), "\"doubleValue\":\"NaN\"");
	else if (isinf(v))
		snprintf(num, sizeof(num), "\"doubleValue\":\"%sInfinity\"",
			 v < 0 ? "-" : "");
	else
		snprintf(num, sizeof(num), "\"doubleValue\":%.17g", v);
	if (attr_open(sp, key))
		attr_close(sp, buf_puts(&sp->attrs, num));
}

void span_attr_bool(struct span *sp, const char *key, bool v)
{
	if (attr_open(sp, key))
		attr_close(sp, buf_puts(&sp->attrs, v ? "\"boolValue\":true"
						      : "\"boolValue\":false"));
}

void span_attr_strs(struct span *sp, const char *key, const char *const *v,
		    const size_t *lens, size_t n)
{
	struct buf *b = &sp->attrs;
	bool ok;
	size_t i;

	if (!attr_open(sp, key))
		return;
	ok = buf_puts(b, "\"arrayValue\":{\"values\":[");
	for (i = 0; ok && i < n && i < TRACE_ATTRS; i++)
		ok = (i == 0 || buf_append(b, ",", 1)) &&
		     buf_puts(b, "{\"stringValue\":") &&
		     put_string(b, v[i], lens[i], TRACE_VALUE_MAX) &&
		     buf_puts(b, "}");
	attr_close(sp, ok && buf_puts(b, "]}"));
}

bool span_format(const struct span *sp, uint64_t end_ns, const char *err,
		 struct buf *out)
{
	char hex[33], num[128];
	bool ok;

	ok = buf_puts(
		out,
		"{\"resourceSpans\":[{\"resource\":{\"attributes\":"
		"[{\"key\":\"service.name\",\"value\":{"
		"\"stringValue\":\"vmemd\"}},{\"key\":"
		"\"service.version\",\"value\":{\"stringValue\":"
		"\"" VMEMD_VERSION "\"}}]},\"scopeSpans\":[{"
		"\"scope\":{\"name\":\"vmemd\",\"version\":\"" VMEMD_VERSION
		"\"},\"spans\":[{\"traceId\":\"");
	tohex(sp->ctx.trace_id, 16, hex);
	ok = ok && buf_append(out, hex, 32) &&
	     buf_puts(out, "\",\"spanId\":\"");
	tohex(sp->ctx.span_id, 8, hex);
	ok = ok && buf_append(out, hex, 16) && buf_puts(out, "\"");
	if (sp->has_parent) {
		tohex(sp->parent, 8, hex);
		ok = ok && buf_puts(out, ",\"parentSpanId\":\"") &&
		     buf_append(out, hex, 16) && buf_puts(out, "\"");
	}
	snprintf(num, sizeof(num),
		 ",\"startTimeUnixNano\":\"%" PRIu64
		 "\",\"endTimeUnixNano\":\"%" PRIu64 "\"",
		 sp->start_ns, end_ns < sp->start_ns ? sp->start_ns : end_ns);
	/* kind 2: SPAN_KIND_SERVER; status 1 OK, 2 ERROR. */
	ok = ok && buf_puts(out, ",\"name\":") &&
	     put_string(out, sp->name, strlen(sp->name), TRACE_VALUE_MAX) &&
	     buf_puts(out, ",\"kind\":2") && buf_puts(out, num) &&
	     buf_puts(out, ",\"attributes\":[") &&
	     (sp->attrs.len == 0 ||
	      buf_append(out, sp->attrs.data, sp->attrs.len)) &&
	     buf_puts(out, "],\"status\":{");
	if (err)
		ok = ok && buf_puts(out, "\"code\":2,\"message\":") &&
		     put_string(out, err, strlen(err), TRACE_VALUE_MAX);
	else
		ok = ok && buf_puts(out, "\"code\":1");
	return ok && buf_puts(out, "}}]}]}]}\n");
}

void span_done(struct span *sp)
{
	buf_done(&sp->attrs);
}

/* ---- the sink ---- */

struct trace_sink {
	uv_loop_t *loop;
	char *path;
	size_t buf_max;
	struct buf fill;    /* lines waiting (the loop's) */
	struct buf writing; /* lines being written (the job's) */
	uint64_t writing_spans, fill_spans;
	uv_work_t req;
	bool busy, stopping;
	void (*stop_cb)(void *);
	void *stop_arg;
	int fd;		   /* the job's */
	int job_err;	   /* the job's result */
	char job_msg[160]; /* the job's */
	struct trace_sink_stats st;
};

int trace_sink_new(uv_loop_t *loop, const char *path, size_t buf_max,
		   struct trace_sink **out)
{
	struct trace_sink *ts = calloc(1, sizeof(*ts));

	*out = NULL;
	if (!ts)
		return -ENOMEM;
	ts->path = strdup(path);
	if (!ts->path) {
		free(ts);
		return -ENOMEM;
	}
	ts->loop = loop;
	ts->buf_max = buf_max ? buf_max : TRACE_BUFFER_DEFAULT;
	ts->fd = -1;
	ts->req.data = ts;
	*out = ts;
	return 0;
}

/* On the pool: open if needed (never blocking on a FIFO), append. */
static void write_cb(uv_work_t *req)
{
	struct trace_sink *ts = req->data;
	const char *p = ts->writing.data;
	size_t left = ts->writing.len;
	struct stat st;
	ssize_t w;
	int flags;

	ts->job_err = 0;
	if (ts->fd < 0) {
		ts->fd = open(ts->path,
			      O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW |
				      O_NONBLOCK | O_CLOEXEC,
			      0600);
		if (ts->fd < 0) {
			ts->job_err = -errno;
			errmsg_set(ts->job_msg, sizeof(ts->job_msg),
				   "trace file %s: %s", ts->path,
				   strerror(errno));
			return;
		}
		if (fstat(ts->fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != geteuid() || (st.st_mode & 022)) {
			ts->job_err = -EPERM;
			errmsg_set(ts->job_msg, sizeof(ts->job_msg),
				   "trace file %s: not a regular file of ours "
				   "writable by us only",
				   ts->path);
			close(ts->fd);
			ts->fd = -1;
			return;
		}
		flags = fcntl(ts->fd, F_GETFL);
		if (flags >= 0)
			fcntl(ts->fd, F_SETFL, flags & ~O_NONBLOCK);
	}
	while (left) {
		w = write(ts->fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			ts->job_err = -errno;
			errmsg_set(ts->job_msg, sizeof(ts->job_msg),
				   "trace file %s: %s", ts->path,
				   strerror(errno));
			/* Reopen next time (the file may have been fixed). */
			close(ts->fd);
			ts->fd = -1;
			return;
		}
		p += w;
		left -= (size_t)w;
	}
}

static void start_job(struct trace_sink *ts);

static void after_write_cb(uv_work_t *req, int status)
{
	struct trace_sink *ts = req->data;

	ts->busy = false;
	if (status < 0 || ts->job_err < 0) {
		ts->st.failed += ts->writing_spans;
		if (status < 0)
			snprintf(ts->st.last_error, sizeof(ts->st.last_error),
				 "trace write job: %s", uv_strerror(status));
		else
			snprintf(ts->st.last_error, sizeof(ts->st.last_error),
				 "%s", ts->job_msg);
	} else {
		ts->st.spans += ts->writing_spans;
	}
	ts->writing.len = 0;
	ts->writing_spans = 0;
	start_job(ts);
}

static void start_job(struct trace_sink *ts)
{
	struct buf t;
	int rc;

	if (ts->busy)
		return;
	if (ts->fill.len == 0) {
		if (ts->stopping && ts->stop_cb) {
			void (*cb)(void *) = ts->stop_cb;

			ts->stop_cb = NULL;
			cb(ts->stop_arg);
		}
		return;
	}
	/* Swap: the job gets the lines, the loop an empty buffer. */
	t = ts->writing;
	ts->writing = ts->fill;
	ts->fill = t;
	ts->fill.len = 0;
	ts->writing_spans = ts->fill_spans;
	ts->fill_spans = 0;
	ts->busy = true;
	rc = uv_queue_work(ts->loop, &ts->req, write_cb, after_write_cb);
	if (rc < 0) {
		ts->busy = false;
		ts->st.failed += ts->writing_spans;
		ts->writing.len = 0;
		ts->writing_spans = 0;
		snprintf(ts->st.last_error, sizeof(ts->st.last_error),
			 "trace write job: %s", uv_strerror(rc));
	}
}

void trace_sink_emit(struct trace_sink *ts, struct span *sp, uint64_t end_ns,
		     const char *err)
{
	size_t mark = ts->fill.len, bound;

	if (ts->stopping)
		return;
	if (!sp->recording) {
		ts->st.unsampled++;
		return;
	}
	/* The line's size is known before it is built: bound it first. */
	bound = 1024 + sp->attrs.len + 12 * TRACE_VALUE_MAX;
	if (sp->failed || ts->fill.len + bound > ts->buf_max ||
	    !span_format(sp, end_ns, err, &ts->fill)) {
		/* Never past the bound: the line is taken back. */
		ts->fill.len = mark;
		if (ts->fill.data)
			ts->fill.data[mark] = '\0';
		ts->st.dropped++;
		return;
	}
	ts->fill_spans++;
	start_job(ts);
}

void trace_sink_stats(const struct trace_sink *ts, struct trace_sink_stats *st)
{
	*st = ts->st;
}

void trace_sink_stop(struct trace_sink *ts, void (*cb)(void *), void *arg)
{
	ts->stopping = true;
	ts->stop_cb = cb;
	ts->stop_arg = arg;
	start_job(ts);
}

void trace_sink_free(struct trace_sink *ts)
{
	if (!ts)
		return;
	if (ts->fd >= 0)
		close(ts->fd);
	buf_done(&ts->fill);
	buf_done(&ts->writing);
	free(ts->path);
	free(ts);
}
