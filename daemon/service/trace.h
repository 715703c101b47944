/*
 * Tracing: a W3C trace context (`traceparent`) taken from a request, one
 * span per request, written as OTLP/JSON lines, the format the
 * OpenTelemetry Collector's otlpjsonfile receiver reads: each line one
 * ExportTraceServiceRequest, resourceSpans -> scopeSpans -> spans, ids as
 * lowercase hex strings, times as unix nanoseconds in strings, 64-bit
 * integer attributes as strings (protobuf's JSON mapping).
 *
 * A span is built on the loop into its own bounded line (attribute values
 * cut at TRACE_VALUE_MAX bytes, at most TRACE_ATTRS attributes) and handed
 * to the sink, which appends it to a bounded buffer; one job at a time on
 * the thread pool writes what is buffered to the file (opened there, with
 * O_NOFOLLOW | O_NONBLOCK, refused unless a regular file of ours). A span
 * that does not fit the buffer is dropped and counted, never waited for.
 * Sampling follows the caller (parent-based): a parent whose sampled flag
 * is clear gives a span that is not recorded.
 *
 * The sink is the loop's: trace_sink_* are called on the loop thread.
 */
#ifndef VMEM_DAEMON_TRACE_H
#define VMEM_DAEMON_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"

/* A traceparent longer than this is refused unread. */
#define TRACEPARENT_MAX 256
#define TRACE_ATTRS	32
#define TRACE_VALUE_MAX 256
/* Default bound of the sink's buffer. */
#define TRACE_BUFFER_DEFAULT (1u << 20)

struct trace_ctx {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t flags; /* bit 0: sampled */
};

/*
 * Parse a W3C traceparent (Trace Context level 1): version 00 exactly
 * "00-<32 hex>-<16 hex>-<2 hex>", lowercase, ids not all zero; a later
 * version (not ff) parsed by the same prefix, followed by nothing or
 * "-...". 0, or -EINVAL.
 */
int traceparent_parse(const char *s, size_t len, struct trace_ctx *out);

/* "00-<trace>-<span>-<flags>" and a NUL into out. */
void traceparent_format(const struct trace_ctx *c, char out[56]);

/* The seed's span name for a method ("memory.store_message"), else the
 * method itself. Borrowed. */
const char *trace_span_name(const char *method);

/* Unix time in nanoseconds. */
uint64_t trace_now_ns(void);

struct span {
	struct trace_ctx ctx; /* this span: its trace, its id */
	uint8_t parent[8];
	bool has_parent, recording;
	const char *name;
	uint64_t start_ns;
	unsigned nattrs;
	struct buf attrs; /* the attributes' JSON, comma-separated */
	bool failed;	  /* an allocation failed: the span is dropped */
};

/*
 * Begin a span named name (borrowed, must outlive the span) at start_ns,
 * child of parent (NULL: a new trace). ids come from a generator seeded
 * from the kernel.
 */
void span_start(struct span *sp, const char *name,
		const struct trace_ctx *parent, uint64_t start_ns);

/* Attributes; keys are the caller's constants (plain ASCII). */
void span_attr_str(struct span *sp, const char *key, const char *v, size_t len);
void span_attr_int(struct span *sp, const char *key, int64_t v);
void span_attr_double(struct span *sp, const char *key, double v);
void span_attr_bool(struct span *sp, const char *key, bool v);
void span_attr_strs(struct span *sp, const char *key, const char *const *v,
		    const size_t *lens, size_t n);

/*
 * The OTLP/JSON line of a finished span (status OK, or ERROR with
 * message err), with a final newline, appended to out. false on
 * allocation failure.
 */
bool span_format(const struct span *sp, uint64_t end_ns, const char *err,
		 struct buf *out);

/* Free the span's attribute buffer. */
void span_done(struct span *sp);

struct trace_sink;

struct trace_sink_stats {
	uint64_t spans;	    /* written to the file */
	uint64_t dropped;   /* the buffer was full */
	uint64_t failed;    /* lost to a write error */
	uint64_t unsampled; /* not recorded: the caller did not sample */
	char last_error[160];
};

/*
 * A sink appending to path (copied), buffering at most buf_max bytes.
 * 0 or -ENOMEM.
 */
int trace_sink_new(uv_loop_t *loop, const char *path, size_t buf_max,
		   struct trace_sink **out);

/* End sp at end_ns (err NULL: success) and queue its line. */
void trace_sink_emit(struct trace_sink *ts, struct span *sp, uint64_t end_ns,
		     const char *err);

void trace_sink_stats(const struct trace_sink *ts, struct trace_sink_stats *st);

/*
 * Write out what is buffered, then call cb (on the loop). After this the
 * sink takes no spans; free it in or after cb.
 */
void trace_sink_stop(struct trace_sink *ts, void (*cb)(void *), void *arg);

/* Free a stopped (or never used) sink. */
void trace_sink_free(struct trace_sink *ts);

#endif
