/*
 * Unit tests of daemon/service/trace.c: traceparent as the W3C Trace
 * Context specification has it (its examples, and what it refuses),
 * spans as OTLP/JSON lines checked field by field with jansson, and the
 * sink on a real libuv loop and file: every span written whole, the
 * bound on its buffer (drops counted), unsampled parents, and files it
 * must refuse (a symlink, a FIFO) without blocking.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace.h"

static const char *W3C = "00-4bf92f3577b34da6a3ce929d0e0e4736-"
			 "00f067aa0ba902b7-01";

static int parse(const char *s)
{
	struct trace_ctx c;

	return traceparent_parse(s, strlen(s), &c);
}

START_TEST(traceparent_valid)
{
	struct trace_ctx c;
	char out[56];

	ck_assert_int_eq(traceparent_parse(W3C, strlen(W3C), &c), 0);
	ck_assert_uint_eq(c.trace_id[0], 0x4b);
	ck_assert_uint_eq(c.trace_id[15], 0x36);
	ck_assert_uint_eq(c.span_id[0], 0x00);
	ck_assert_uint_eq(c.span_id[7], 0xb7);
	ck_assert_uint_eq(c.flags, 1);
	traceparent_format(&c, out);
	ck_assert_str_eq(out, W3C);
	/* Not sampled; other flag bits kept. */
	ck_assert_int_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-00"),
			 0);
	ck_assert_int_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-ff"),
			 0);
	/* A later version: the same prefix, then nothing or "-...". */
	ck_assert_int_eq(parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-01-what-the-future-will-be"),
			 0);
	ck_assert_int_eq(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-01"),
			 0);
}
END_TEST

START_TEST(traceparent_refused)
{
	char longer[TRACEPARENT_MAX + 10];

	/* Uppercase, zeros, version ff, suffixes on 00, lengths. */
	ck_assert_int_eq(parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-"
			       "00F067AA0BA902B7-01"),
			 -EINVAL);
	ck_assert_int_eq(parse("00-00000000000000000000000000000000-"
			       "00f067aa0ba902b7-01"),
			 -EINVAL);
	ck_assert_int_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "0000000000000000-01"),
			 -EINVAL);
	ck_assert_int_eq(parse("ff-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-01"),
			 -EINVAL);
	ck_assert_int_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-01-extra"),
			 -EINVAL);
	ck_assert_int_eq(parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-01extra"),
			 -EINVAL);
	ck_assert_int_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-1"),
			 -EINVAL);
	ck_assert_int_eq(parse("00_4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-01"),
			 -EINVAL);
	ck_assert_int_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e473g-"
			       "00f067aa0ba902b7-01"),
			 -EINVAL);
	ck_assert_int_eq(parse("0g-4bf92f3577b34da6a3ce929d0e0e4736-"
			       "00f067aa0ba902b7-01"),
			 -EINVAL);
	ck_assert_int_eq(parse(""), -EINVAL);
	memset(longer, 'a', sizeof(longer));
	memcpy(longer,
	       "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", 56);
	longer[sizeof(longer) - 1] = '\0';
	ck_assert_int_eq(parse(longer), -EINVAL);
	longer[TRACEPARENT_MAX] = '\0';
	ck_assert_int_eq(parse(longer), 0);
}
END_TEST

static bool hexstr(const char *s, size_t n)
{
	if (!s || strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("0123456789abcdef", s[i]))
			return false;
	return true;
}

static bool digits(const char *s)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

/* The one span of an OTLP/JSON line, checked on the way. */
static json_t *the_span(json_t *line)
{
	json_t *rs, *ss, *spans, *res;

	rs = json_object_get(line, "resourceSpans");
	ck_assert(json_is_array(rs) && json_array_size(rs) == 1);
	res = json_object_get(json_array_get(rs, 0), "resource");
	ck_assert_str_eq(
		json_string_value(json_object_get(
			json_object_get(
				json_array_get(
					json_object_get(res, "attributes"), 0),
				"value"),
			"stringValue")),
		"vmemd");
	ss = json_object_get(json_array_get(rs, 0), "scopeSpans");
	ck_assert(json_is_array(ss) && json_array_size(ss) == 1);
	spans = json_object_get(json_array_get(ss, 0), "spans");
	ck_assert(json_is_array(spans) && json_array_size(spans) == 1);
	return json_array_get(spans, 0);
}

static json_t *attr(json_t *span, const char *key)
{
	json_t *a = json_object_get(span, "attributes"), *v;
	size_t i;

	json_array_foreach(
		a, i,
		v) if (!strcmp(json_string_value(json_object_get(v, "key")),
			       key)) return json_object_get(v, "value");
	return NULL;
}

START_TEST(span_lines)
{
	struct trace_ctx parent;
	struct span sp;
	struct buf out = {0};
	json_error_t err;
	json_t *line, *span, *v;
	char big[600], bad[] = "a\xff\xfe"
			       "b\"c\\d\n\x01";
	const char *keys[] = {"source", "tags"};
	size_t lens[] = {6, 4};

	ck_assert_int_eq(traceparent_parse(W3C, strlen(W3C), &parent), 0);
	span_start(&sp, trace_span_name("message.store"), &parent,
		   1700000000123456789ull);
	ck_assert(sp.recording);
	span_attr_str(&sp, "session_id", "abc", 3);
	span_attr_str(&sp, "role", "user", 4);
	span_attr_int(&sp, "content_length", 9007199254740993ll);
	span_attr_strs(&sp, "metadata_keys", keys, lens, 2);
	span_attr_double(&sp, "query_time_ms", 0.25);
	span_attr_bool(&sp, "operation.success", true);
	memset(big, 'x', sizeof(big));
	memcpy(big + 255, "\xc3\xa9", 2); /* é across the cut */
	span_attr_str(&sp, "big", big, sizeof(big));
	span_attr_str(&sp, "bad", bad, strlen(bad));
	span_attr_double(&sp, "nan", 0.0 / 0.0);
	ck_assert(span_format(&sp, 1700000000223456789ull, NULL, &out));
	ck_assert_int_eq(out.data[out.len - 1], '\n');
	ck_assert_ptr_null(memchr(out.data, '\n', out.len - 1));
	line = json_loadb(out.data, out.len, 0, &err);
	ck_assert_msg(line != NULL, "%s: %s", err.text, out.data);
	span = the_span(line);
	ck_assert_str_eq(json_string_value(json_object_get(span, "name")),
			 "memory.store_message");
	ck_assert_str_eq(json_string_value(json_object_get(span, "traceId")),
			 "4bf92f3577b34da6a3ce929d0e0e4736");
	ck_assert_str_eq(
		json_string_value(json_object_get(span, "parentSpanId")),
		"00f067aa0ba902b7");
	ck_assert(
		hexstr(json_string_value(json_object_get(span, "spanId")), 16));
	ck_assert_str_ne(json_string_value(json_object_get(span, "spanId")),
			 "00f067aa0ba902b7");
	ck_assert_str_eq(
		json_string_value(json_object_get(span, "startTimeUnixNano")),
		"1700000000123456789");
	ck_assert_str_eq(
		json_string_value(json_object_get(span, "endTimeUnixNano")),
		"1700000000223456789");
	ck_assert_int_eq(json_integer_value(json_object_get(span, "kind")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(
				 json_object_get(span, "status"), "code")),
			 1);
	ck_assert_str_eq(json_string_value(json_object_get(attr(span, "role"),
							   "stringValue")),
			 "user");
	ck_assert_str_eq(json_string_value(json_object_get(
				 attr(span, "content_length"), "intValue")),
			 "9007199254740993");
	v = json_object_get(
		json_object_get(attr(span, "metadata_keys"), "arrayValue"),
		"values");
	ck_assert_uint_eq(json_array_size(v), 2);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(v, 1),
							   "stringValue")),
			 "tags");
	ck_assert(json_real_value(json_object_get(attr(span, "query_time_ms"),
						  "doubleValue")) == 0.25);
	ck_assert(json_is_true(
		json_object_get(attr(span, "operation.success"), "boolValue")));
	/* Cut at 256 bytes, never inside a character. */
	v = json_object_get(attr(span, "big"), "stringValue");
	ck_assert_uint_eq(json_string_length(v), 255);
	ck_assert_str_eq(json_string_value(json_object_get(attr(span, "bad"),
							   "stringValue")),
			 "a\xef\xbf\xbd\xef\xbf\xbd"
			 "b\"c\\d\n\x01");
	ck_assert_str_eq(json_string_value(json_object_get(attr(span, "nan"),
							   "doubleValue")),
			 "NaN");
	json_decref(line);
	span_done(&sp);

	/* No parent: a new trace, no parentSpanId; an error status. */
	out.len = 0;
	span_start(&sp, trace_span_name("decision.get"), NULL, 5);
	for (int i = 0; i < TRACE_ATTRS + 5; i++)
		span_attr_int(&sp, "n", i);
	ck_assert(span_format(&sp, 3, "it \"failed\"", &out));
	line = json_loadb(out.data, out.len, 0, &err);
	ck_assert_ptr_nonnull(line);
	span = the_span(line);
	ck_assert_str_eq(json_string_value(json_object_get(span, "name")),
			 "decision.get");
	ck_assert_ptr_null(json_object_get(span, "parentSpanId"));
	ck_assert(hexstr(json_string_value(json_object_get(span, "traceId")),
			 32));
	ck_assert(digits(
		json_string_value(json_object_get(span, "endTimeUnixNano"))));
	/* The end is never before the start. */
	ck_assert_str_eq(
		json_string_value(json_object_get(span, "endTimeUnixNano")),
		"5");
	ck_assert_uint_eq(json_array_size(json_object_get(span, "attributes")),
			  TRACE_ATTRS);
	v = json_object_get(span, "status");
	ck_assert_int_eq(json_integer_value(json_object_get(v, "code")), 2);
	ck_assert_str_eq(json_string_value(json_object_get(v, "message")),
			 "it \"failed\"");
	json_decref(line);
	span_done(&sp);
	buf_done(&out);
}
END_TEST

static int stopped;

static void stop_cb(void *arg)
{
	(void)arg;
	stopped++;
}

/* Emit n spans, the loop running every `every` spans (0: never). */
static void run_sink(const char *path, size_t buf_max, int n, int every,
		     struct trace_sink_stats *st)
{
	struct trace_sink *ts;
	struct trace_ctx parent;
	uv_loop_t loop;
	struct span sp;

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(trace_sink_new(&loop, path, buf_max, &ts), 0);
	ck_assert_int_eq(traceparent_parse(W3C, strlen(W3C), &parent), 0);
	for (int i = 0; i < n; i++) {
		span_start(&sp, "memory.semantic_search", &parent,
			   trace_now_ns());
		span_attr_int(&sp, "top_k", i);
		trace_sink_emit(ts, &sp, trace_now_ns(), NULL);
		span_done(&sp);
		if (every && i % every == 0)
			uv_run(&loop, UV_RUN_NOWAIT);
	}
	/* A caller that did not sample: not recorded. */
	parent.flags = 0;
	span_start(&sp, "memory.health_check", &parent, trace_now_ns());
	ck_assert(!sp.recording);
	trace_sink_emit(ts, &sp, trace_now_ns(), NULL);
	span_done(&sp);
	stopped = 0;
	trace_sink_stop(ts, stop_cb, NULL);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(stopped, 1);
	trace_sink_stats(ts, st);
	ck_assert_uint_eq(st->unsampled, 1);
	trace_sink_free(ts);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* Lines of the file, each a valid span; their count. */
static int check_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[8192];
	json_error_t err;
	json_t *j;
	int n = 0;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		j = json_loads(line, 0, &err);
		ck_assert_msg(j != NULL, "line %d: %s", n + 1, err.text);
		the_span(j);
		json_decref(j);
		n++;
	}
	fclose(f);
	return n;
}

START_TEST(sink_writes_and_bounds)
{
	char dir[] = "/tmp/vmem-trace-XXXXXX", path[128];
	struct trace_sink_stats st;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/spans.jsonl", dir);
	run_sink(path, 0, 500, 7, &st);
	ck_assert_uint_eq(st.spans, 500);
	ck_assert_uint_eq(st.dropped, 0);
	ck_assert_int_eq(check_file(path), 500);
	/* A small buffer and a loop that never runs meanwhile: drops. */
	run_sink(path, 8192, 400, 0, &st);
	ck_assert_uint_gt(st.dropped, 0);
	ck_assert_uint_gt(st.spans, 0);
	ck_assert_uint_eq(st.spans + st.dropped, 400);
	ck_assert_int_eq(check_file(path), 500 + (int)st.spans);
	{
		struct stat sb;

		ck_assert_int_eq(stat(path, &sb), 0);
		ck_assert_uint_eq(sb.st_mode & 0777, 0600);
	}
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(sink_refuses_files)
{
	char dir[] = "/tmp/vmem-trace-XXXXXX", path[128], target[128];
	struct trace_sink_stats st;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/link", dir);
	snprintf(target, sizeof(target), "%s/target", dir);
	ck_assert_int_eq(symlink(target, path), 0);
	run_sink(path, 0, 20, 1, &st);
	ck_assert_uint_eq(st.spans, 0);
	ck_assert_uint_eq(st.failed, 20);
	ck_assert_ptr_nonnull(strstr(st.last_error, "link"));
	ck_assert_int_ne(access(target, F_OK), 0);
	unlink(path);
	/* A FIFO with no reader: refused at once, never waited on. */
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	run_sink(path, 0, 5, 1, &st);
	ck_assert_uint_eq(st.failed, 5);
	unlink(path);
	rmdir(dir);
}
END_TEST

static Suite *trace_suite(void)
{
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, traceparent_valid);
	tcase_add_test(tc, traceparent_refused);
	tcase_add_test(tc, span_lines);
	tcase_add_test(tc, sink_writes_and_bounds);
	tcase_add_test(tc, sink_refuses_files);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(trace_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
