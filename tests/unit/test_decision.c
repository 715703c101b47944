/*
 * Unit tests of protocol/decision.c: coordinate and field validation, the
 * path rule, timestamps, and the exact bytes of both serialisations.
 */
#include "protocol/decision.h"
#include "protocol/errors.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_rng.h"

static const char example_file[] =
	"{\n"
	"  \"coordinate\": {\n"
	"    \"x\": 5,\n"
	"    \"y\": 2,\n"
	"    \"z\": 1\n"
	"  },\n"
	"  \"content\": \"Use PostgreSQL for persistence layer\",\n"
	"  \"timestamp\": \"2025-01-06T15:30:00.123456Z\",\n"
	"  \"agent_id\": \"claude-code-01\",\n"
	"  \"issue_context\": {\n"
	"    \"issue_id\": \"codeframe-aco-t49\",\n"
	"    \"issue_title\": \"Vector Memory Manager\"\n"
	"  },\n"
	"  \"version\": 1\n"
	"}\n";

/* coord_from_json on a text; returns its code, *out filled on success. */
static int coord_text(const char *text, int max_x, struct coord *out, char *msg)
{
	json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
	int r;

	ck_assert_msg(v != NULL, "bad test JSON %s", text);
	msg[0] = '\0';
	r = coord_from_json(v, max_x, out, msg);
	json_decref(v);
	if (r)
		ck_assert_msg(msg[0] != '\0', "no message for %s", text);
	return r;
}

START_TEST(test_coord_valid)
{
	char msg[VMEM_ERRMSG_LEN];
	struct coord c;

	ck_assert_int_eq(coord_text("{\"x\":5,\"y\":2,\"z\":1}", 1000, &c, msg),
			 0);
	ck_assert_int_eq(c.x, 5);
	ck_assert_int_eq(c.y, 2);
	ck_assert_int_eq(c.z, 1);
	ck_assert_int_eq(
		coord_text("{\"z\":4,\"y\":5,\"x\":1000}", 1000, &c, msg), 0);
	ck_assert_int_eq(c.x, 1000);
	ck_assert_int_eq(c.y, 5);
	ck_assert_int_eq(c.z, 4);
	ck_assert(coord_valid(&c, 1000));
	ck_assert(!coord_valid(&c, 999));
}
END_TEST

START_TEST(test_coord_bad_values)
{
	static const char *const bad[] = {"0",	  "-1",	  "2.5", "2.0", "\"2\"",
					  "true", "null", "[1]", "{}",	"1e0"};
	static const char *const axes[] = {"x", "y", "z"};
	static const char *const too_big[] = {"1001", "6", "5"};
	char text[128], msg[VMEM_ERRMSG_LEN];
	struct coord c;
	size_t a, i;

	for (a = 0; a < 3; a++) {
		for (i = 0; i <= sizeof(bad) / sizeof(bad[0]); i++) {
			const char *v = i < sizeof(bad) / sizeof(bad[0])
						? bad[i]
						: too_big[a];

			snprintf(text, sizeof(text),
				 "{\"x\":%s,\"y\":%s,\"z\":%s}",
				 a == 0 ? v : "1", a == 1 ? v : "1",
				 a == 2 ? v : "1");
			ck_assert_int_eq(coord_text(text, 1000, &c, msg),
					 RPC_COORDINATE_VALIDATION);
			ck_assert_msg(strncmp(msg, "coordinate.", 11) == 0 &&
					      msg[11] == axes[a][0],
				      "%s -> %s", text, msg);
		}
	}
	ck_assert_int_eq(
		coord_text("{\"x\":2.5,\"y\":1,\"z\":1}", 1000, &c, msg),
		RPC_COORDINATE_VALIDATION);
	ck_assert_str_eq(
		msg, "coordinate.x must be an integer in 1..1000 (got 2.5)");
	ck_assert_int_eq(
		coord_text("{\"x\":1,\"y\":1,\"z\":2.0}", 1000, &c, msg),
		RPC_COORDINATE_VALIDATION);
	ck_assert_str_eq(msg,
			 "coordinate.z must be an integer in 1..4 (got 2.0)");
}
END_TEST

START_TEST(test_coord_bad_shape)
{
	char msg[VMEM_ERRMSG_LEN];
	struct coord c;

	ck_assert_int_eq(coord_text("{\"x\":1,\"y\":1}", 1000, &c, msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_str_eq(msg, "coordinate is missing member z");
	ck_assert_int_eq(coord_text("{\"y\":1,\"z\":1}", 1000, &c, msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_str_eq(msg, "coordinate is missing member x");
	ck_assert_int_eq(coord_text("{\"x\":1,\"z\":1}", 1000, &c, msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_str_eq(msg, "coordinate is missing member y");
	ck_assert_int_eq(
		coord_text("{\"x\":1,\"y\":1,\"z\":1,\"w\":1}", 1000, &c, msg),
		RPC_COORDINATE_VALIDATION);
	ck_assert_str_eq(msg, "coordinate has unknown member w");
	ck_assert_int_eq(coord_text("[1,1,1]", 1000, &c, msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_int_eq(coord_text("\"1,1,1\"", 1000, &c, msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_int_eq(coord_text("null", 1000, &c, msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_int_eq(coord_text("{}", 1000, &c, msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_int_eq(coord_from_json(NULL, 1000, &c, msg),
			 RPC_COORDINATE_VALIDATION);
}
END_TEST

START_TEST(test_coord_max_x)
{
	char msg[VMEM_ERRMSG_LEN];
	struct coord c;

	ck_assert_int_eq(coord_text("{\"x\":50,\"y\":1,\"z\":1}", 50, &c, msg),
			 0);
	ck_assert_int_eq(coord_text("{\"x\":51,\"y\":1,\"z\":1}", 50, &c, msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_str_eq(msg,
			 "coordinate.x must be an integer in 1..50 (got 51)");
	ck_assert_int_eq(
		coord_text("{\"x\":5000,\"y\":1,\"z\":1}", 9999, &c, msg), 0);
	ck_assert_int_eq(c.x, 5000);
	ck_assert_int_eq(
		coord_text("{\"x\":5000,\"y\":1,\"z\":1}", 1000, &c, msg),
		RPC_COORDINATE_VALIDATION);
	ck_assert_int_eq(
		coord_text("{\"x\":4294967297,\"y\":1,\"z\":1}", 9999, &c, msg),
		RPC_COORDINATE_VALIDATION);
}
END_TEST

START_TEST(test_coord_cmp_json)
{
	struct coord a = {1, 2, 3}, b = {1, 3, 1}, c = {2, 1, 1};
	json_t *j;
	char *s;

	ck_assert_int_lt(coord_cmp(&a, &b), 0);
	ck_assert_int_lt(coord_cmp(&b, &c), 0);
	ck_assert_int_gt(coord_cmp(&c, &a), 0);
	ck_assert_int_eq(coord_cmp(&a, &a), 0);
	j = coord_to_json(&a);
	s = json_dumps(j, JSON_COMPACT);
	ck_assert_str_eq(s, "{\"x\":1,\"y\":2,\"z\":3}");
	free(s);
	json_decref(j);
}
END_TEST

START_TEST(test_content)
{
	char msg[VMEM_ERRMSG_LEN];
	char *big = malloc(VMEM_CONTENT_MAX + 1);

	ck_assert_ptr_nonnull(big);
	memset(big, 'a', VMEM_CONTENT_MAX + 1);
	ck_assert_int_eq(content_check(big, VMEM_CONTENT_MAX, msg), 0);
	ck_assert_int_eq(content_check(big, VMEM_CONTENT_MAX + 1, msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(content_check("", 0, msg), RPC_INVALID_PARAMS);
	ck_assert_int_eq(content_check("x", 1, msg), 0);
	/* Multi-byte characters count in bytes. */
	memcpy(big + VMEM_CONTENT_MAX - 3, "\xc3\xbc\xc3", 3);
	ck_assert_int_eq(content_check(big, VMEM_CONTENT_MAX, msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(content_check(big, VMEM_CONTENT_MAX - 1, msg), 0);
	ck_assert_int_eq(content_check(big, VMEM_CONTENT_MAX + 1, msg),
			 RPC_INVALID_PARAMS);
	ck_assert_ptr_nonnull(strstr(msg, "too large"));
	free(big);
}
END_TEST

/* New writes refuse content made only of whitespace (ASCII or Unicode,
 * as Python's str.strip() sees it); stored records are not judged so. */
START_TEST(test_content_blank)
{
	static const char *const blank[] = {
		" ",
		"\t\n\r\v\f  ",
		"\xc2\xa0",
		"\xe3\x80\x80 \n",
		"\xe2\x80\x80\xe2\x80\x8a\xe2\x80\xa8\xe2\x80\xa9",
		"\x1c\x1f\xc2\x85\xe1\x9a\x80\xe2\x80\xaf\xe2\x81\x9f",
	};
	static const char *const filled[] = {
		" a ", "\n.\n", "\xe2\x80\x8b", "\xc3\xa9", "\t_",
	};
	char msg[VMEM_ERRMSG_LEN];
	size_t i;

	for (i = 0; i < sizeof(blank) / sizeof(blank[0]); i++) {
		ck_assert_int_eq(content_check(blank[i], strlen(blank[i]), msg),
				 0);
		msg[0] = '\0';
		ck_assert_msg(content_check_new(blank[i], strlen(blank[i]),
						msg) == RPC_INVALID_PARAMS,
			      "blank %zu accepted", i);
		ck_assert_str_eq(
			msg, "content must not be empty or only whitespace");
	}
	for (i = 0; i < sizeof(filled) / sizeof(filled[0]); i++)
		ck_assert_msg(content_check_new(filled[i], strlen(filled[i]),
						msg) == 0,
			      "filled %zu refused: %s", i, msg);
	ck_assert_int_eq(content_check_new("", 0, msg), RPC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_utf8)
{
	static const struct {
		const char *s;
		size_t len;
		bool ok;
	} cases[] = {
		{"plain", 5, true},
		{"\xc3\x9c"
		 "ber",
		 5, true},
		{"\xe3\x83\x87\xe3\x83\xbc\xe3\x82\xbf", 9, true},
		{"\xf0\x9f\x98\x80", 4, true},	/* U+1F600 */
		{"\xf4\x8f\xbf\xbf", 4, true},	/* U+10FFFF */
		{"\xed\x9f\xbf", 3, true},	/* U+D7FF */
		{"\xee\x80\x80", 3, true},	/* U+E000 */
		{"a\0b", 3, false},		/* NUL */
		{"\xc0\xaf", 2, false},		/* overlong '/' */
		{"\xc1\xbf", 2, false},		/* overlong */
		{"\xe0\x80\xaf", 3, false},	/* overlong, 3 bytes */
		{"\xf0\x80\x80\xaf", 4, false}, /* overlong, 4 bytes */
		{"\xed\xa0\x80", 3, false},	/* surrogate U+D800 */
		{"\xed\xbf\xbf", 3, false},	/* surrogate U+DFFF */
		{"\xf4\x90\x80\x80", 4, false}, /* U+110000 */
		{"\xf5\x80\x80\x80", 4, false}, /* beyond */
		{"\x80", 1, false},		/* lone continuation */
		{"\xc3", 1, false},		/* truncated */
		{"\xe3\x83", 2, false},		/* truncated */
		{"\xc3\x28", 2, false},		/* bad continuation */
		{"\xe3\x83\x28", 3, false},	/* bad continuation */
		{"\xff", 1, false},
		{"\xfe", 1, false},
	};
	char msg[VMEM_ERRMSG_LEN];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_msg(utf8_valid(cases[i].s, cases[i].len) ==
				      cases[i].ok,
			      "case %zu", i);
		ck_assert_int_eq(content_check(cases[i].s, cases[i].len, msg),
				 cases[i].ok ? 0 : RPC_INVALID_PARAMS);
	}
	/* ASCII is checked a word at a time: each case again at every
	 * place within and after runs of ASCII of every length to 20. */
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		for (size_t pre = 0; pre <= 20; pre++)
			for (size_t post = 0; post <= 20; post += 5) {
				char s[64];
				size_t n = pre + cases[i].len + post;

				memset(s, 'x', sizeof(s));
				memcpy(s + pre, cases[i].s, cases[i].len);
				ck_assert_msg(utf8_valid(s, n) == cases[i].ok,
					      "case %zu after %zu, before %zu",
					      i, pre, post);
			}
	for (size_t at = 0; at < 40; at++) {
		char s[40];

		memset(s, 'y', sizeof(s));
		ck_assert(utf8_valid(s, sizeof(s)));
		s[at] = 0;
		ck_assert_msg(!utf8_valid(s, sizeof(s)), "NUL at %zu", at);
		s[at] = (char)0x80;
		ck_assert_msg(!utf8_valid(s, sizeof(s)), "0x80 at %zu", at);
		s[at] = (char)0xc3;
		ck_assert_msg(!utf8_valid(s, at + 1), "cut at %zu", at);
	}
}
END_TEST

START_TEST(test_agent_id)
{
	char msg[VMEM_ERRMSG_LEN], id[VMEM_AGENT_ID_MAX + 2];

	memset(id, 'a', sizeof(id));
	ck_assert_int_eq(agent_id_check("claude-code-01", 14, msg), 0);
	ck_assert_int_eq(agent_id_check(id, VMEM_AGENT_ID_MAX, msg), 0);
	ck_assert_int_eq(agent_id_check(id, VMEM_AGENT_ID_MAX + 1, msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(agent_id_check("", 0, msg), RPC_INVALID_PARAMS);
	ck_assert_int_eq(agent_id_check("a\tb", 3, msg), RPC_INVALID_PARAMS);
	ck_assert_int_eq(agent_id_check("a\nb", 3, msg), RPC_INVALID_PARAMS);
	ck_assert_int_eq(agent_id_check("a\x7f", 2, msg), RPC_INVALID_PARAMS);
	ck_assert_int_eq(agent_id_check("a\xc2\x85", 3, msg),
			 RPC_INVALID_PARAMS); /* NEL, C1 */
	ck_assert_int_eq(agent_id_check("a\xc2\x9f", 3, msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(agent_id_check("a\xc2\xa0", 3, msg), 0); /* NBSP */
	ck_assert_int_eq(agent_id_check("\xc3\xa9quipe", 7, msg), 0);
	ck_assert_int_eq(agent_id_check("a\xff", 2, msg), RPC_INVALID_PARAMS);
	ck_assert_int_eq(agent_id_check("a\0b", 3, msg), RPC_INVALID_PARAMS);
}
END_TEST

static int ctx_text(const char *text)
{
	char msg[VMEM_ERRMSG_LEN];
	json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
	int r;

	ck_assert_msg(v != NULL, "bad test JSON %s", text);
	r = issue_context_check(v, msg);
	json_decref(v);
	return r;
}

START_TEST(test_issue_context)
{
	char msg[VMEM_ERRMSG_LEN], key[16];
	json_t *ctx;
	char *val;
	int i;

	ck_assert_int_eq(issue_context_check(NULL, msg), 0);
	ck_assert_int_eq(ctx_text("null"), 0);
	ck_assert_int_eq(ctx_text("{}"), 0);
	ck_assert_int_eq(ctx_text("{\"a\":\"b\",\"c\":\"\"}"), 0);
	ck_assert_int_eq(ctx_text("[]"), RPC_INVALID_PARAMS);
	ck_assert_int_eq(ctx_text("\"issue\""), RPC_INVALID_PARAMS);
	ck_assert_int_eq(ctx_text("7"), RPC_INVALID_PARAMS);
	ck_assert_int_eq(ctx_text("{\"a\":1}"), RPC_INVALID_PARAMS);
	ck_assert_int_eq(ctx_text("{\"a\":null}"), RPC_INVALID_PARAMS);
	ck_assert_int_eq(ctx_text("{\"a\":{\"b\":\"c\"}}"), RPC_INVALID_PARAMS);
	ck_assert_int_eq(ctx_text("{\"a\":[\"b\"]}"), RPC_INVALID_PARAMS);

	ctx = json_object();
	for (i = 0; i < VMEM_CONTEXT_KEYS_MAX; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		json_object_set_new(ctx, key, json_string("v"));
	}
	ck_assert_int_eq(issue_context_check(ctx, msg), 0);
	json_object_set_new(ctx, "one-more", json_string("v"));
	ck_assert_int_eq(issue_context_check(ctx, msg), RPC_INVALID_PARAMS);
	json_decref(ctx);

	val = malloc(VMEM_CONTEXT_VALUE_MAX + 2);
	ck_assert_ptr_nonnull(val);
	memset(val, 'v', VMEM_CONTEXT_VALUE_MAX + 1);
	val[VMEM_CONTEXT_VALUE_MAX] = '\0';
	ctx = json_pack("{s:s}", "k", val);
	ck_assert_int_eq(issue_context_check(ctx, msg), 0);
	json_decref(ctx);
	val[VMEM_CONTEXT_VALUE_MAX] = 'v';
	val[VMEM_CONTEXT_VALUE_MAX + 1] = '\0';
	ctx = json_pack("{s:s}", "k", val);
	ck_assert_int_eq(issue_context_check(ctx, msg), RPC_INVALID_PARAMS);
	json_decref(ctx);
	free(val);
}
END_TEST

START_TEST(test_paths)
{
	static const struct {
		struct coord c;
		const char *path;
	} ok[] = {
		{{5, 2, 1}, "x-005/y-2-z-1.json"},
		{{42, 5, 4}, "x-042/y-5-z-4.json"},
		{{1000, 1, 3}, "x-1000/y-1-z-3.json"},
		{{1, 1, 1}, "x-001/y-1-z-1.json"},
	};
	char buf[64], dir[32];
	const char *slash;
	struct coord c;
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_int_eq(coord_path(&ok[i].c, buf, sizeof(buf)),
				 (int)strlen(ok[i].path));
		ck_assert_str_eq(buf, ok[i].path);
		slash = strchr(buf, '/');
		memcpy(dir, buf, (size_t)(slash - buf));
		dir[slash - buf] = '\0';
		ck_assert_int_eq(coord_from_path(dir, slash + 1, 1000, &c), 0);
		ck_assert_int_eq(coord_cmp(&c, &ok[i].c), 0);
	}
	ck_assert_int_eq(coord_path(&ok[0].c, buf, 18), -1);
	ck_assert_int_eq(coord_path(&ok[0].c, buf, 19), 18);

	ck_assert_int_eq(coord_from_path("x-5", "y-2-z-1.json", 1000, &c), -1);
	ck_assert_int_eq(coord_from_path("x-05", "y-2-z-1.json", 1000, &c), -1);
	ck_assert_int_eq(coord_from_path("x-0005", "y-2-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-01000", "y-2-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-+05", "y-2-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005", "y-02-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005", "y-2-z-01.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005", "y-2-z-1.json~", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005", "y-2-z-1.jsonx", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005 ", "y-2-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005", "y-+2-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(
		coord_from_path("x-005", ".y-2-z-1.json.tmp", 1000, &c), -1);
	ck_assert_int_eq(coord_from_path("x-000", "y-2-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005", "y-6-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005", "y-2-z-5.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-005", "y-0-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-1001", "y-2-z-1.json", 1000, &c),
			 -1);
	ck_assert_int_eq(coord_from_path("x-1001", "y-2-z-1.json", 2000, &c),
			 0);
	ck_assert_int_eq(coord_from_path("x-", "y-2-z-1.json", 1000, &c), -1);
	ck_assert_int_eq(coord_from_path("metadata.json", "", 1000, &c), -1);
}
END_TEST

START_TEST(test_timestamps)
{
	static const struct {
		int64_t usec;
		const char *text;
	} cases[] = {
		{1736177400123456LL, "2025-01-06T15:30:00.123456Z"},
		{0, "1970-01-01T00:00:00.000000Z"},
		{951782400000001LL, "2000-02-29T00:00:00.000001Z"},
		{-1, "1969-12-31T23:59:59.999999Z"},
		{253402300799999999LL, "9999-12-31T23:59:59.999999Z"},
	};
	static const char *const bad[] = {
		"2025-01-06T15:30:00.123456",	 "2025-01-06T15:30:00.12345Z",
		"2025-01-06 15:30:00.123456Z",	 "2025-13-06T15:30:00.123456Z",
		"2025-00-06T15:30:00.123456Z",	 "2025-02-29T15:30:00.123456Z",
		"2025-04-31T15:30:00.123456Z",	 "2025-01-06T24:00:00.000000Z",
		"2025-01-06T15:60:00.123456Z",	 "2025-01-06T15:30:60.123456Z",
		"2025-01-06T15:30:00.123456+00", "2025-01-06T15:30:00.12345aZ",
		"+025-01-06T15:30:00.123456Z",	 "2025-01-06T15:30:00.123456Zx",
		"2025-01-06t15:30:00.123456Z",	 "",
	};
	char out[VMEM_TIMESTAMP_LEN + 1];
	int64_t usec;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		timestamp_format(cases[i].usec, out);
		ck_assert_str_eq(out, cases[i].text);
		ck_assert_int_eq(timestamp_parse(cases[i].text, &usec), 0);
		ck_assert(usec == cases[i].usec);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(timestamp_parse(bad[i], &usec) == -1, "%s",
			      bad[i]);
}
END_TEST

/* The calendar arithmetic agrees with the C library's (gmtime_r, timegm)
 * over the whole range a timestamp can name, years 0001 to 9999: the
 * edges, the days around every kind of leap year and end of month, and
 * random instants. */
START_TEST(test_timestamps_calendar)
{
	/* 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z. */
	static const int64_t first = -62135596800000000LL,
			     last = 253402300799999999LL;
	static const int years[] = {1,	  4,	100,  400,  1582, 1600,
				    1900, 1969, 1970, 1972, 2000, 2024,
				    2025, 2100, 2400, 9999};
	char out[VMEM_TIMESTAMP_LEN + 1], want[64];
	int64_t usec, back;

	for (int i = 0; i < 20000 + 16 * 12 * 3; i++) {
		time_t t;
		struct tm tm;

		if (i < 16 * 12 * 3) {
			/* The first day of a month, the day before and
			 * the second before that. */
			memset(&tm, 0, sizeof(tm));
			tm.tm_year = years[i / 36] - 1900;
			tm.tm_mon = i / 3 % 12;
			tm.tm_mday = 1;
			usec = (int64_t)timegm(&tm) * 1000000 -
			       (i % 3 == 0   ? 0
				: i % 3 == 1 ? 86400000000LL
					     : 1);
			if (usec < first)
				continue;
		} else {
			usec = first +
			       (int64_t)(rnd() % (uint64_t)(last - first + 1));
		}
		t = (time_t)(usec >= 0 ? usec / 1000000
				       : -((-usec + 999999) / 1000000));
		ck_assert_ptr_nonnull(gmtime_r(&t, &tm));
		snprintf(want, sizeof(want),
			 "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			 tm.tm_hour, tm.tm_min, tm.tm_sec,
			 (int)(usec - (int64_t)t * 1000000));
		timestamp_format(usec, out);
		ck_assert_str_eq(out, want);
		ck_assert_int_eq(timestamp_parse(out, &back), 0);
		ck_assert(back == usec);
	}
	timestamp_format(first, out);
	ck_assert_str_eq(out, "0001-01-01T00:00:00.000000Z");
	timestamp_format(last, out);
	ck_assert_str_eq(out, "9999-12-31T23:59:59.999999Z");
	timestamp_format(-1, out);
	ck_assert_str_eq(out, "1969-12-31T23:59:59.999999Z");
}
END_TEST

/* Every form the seed library writes (Python isoformat(), RFC 3339) reads
 * as the instant it names. */
START_TEST(test_timestamps_any)
{
	static const struct {
		const char *text;
		const char *ours;
	} cases[] = {
		{"2025-01-06T15:30:00.123456Z", "2025-01-06T15:30:00.123456Z"},
		{"2025-01-06T15:30:00Z", "2025-01-06T15:30:00.000000Z"},
		{"2025-01-06T15:30:00z", "2025-01-06T15:30:00.000000Z"},
		{"2025-01-06T15:30:00.123456+00:00",
		 "2025-01-06T15:30:00.123456Z"},
		{"2025-01-06T15:30:00+00:00", "2025-01-06T15:30:00.000000Z"},
		{"2025-01-06T15:30:00.123456", "2025-01-06T15:30:00.123456Z"},
		{"2025-01-06T15:30:00", "2025-01-06T15:30:00.000000Z"},
		{"2025-01-06 15:30:00.5", "2025-01-06T15:30:00.500000Z"},
		{"2025-01-06t15:30:00.123Z", "2025-01-06T15:30:00.123000Z"},
		{"2025-01-06T15:30:00.123456789Z",
		 "2025-01-06T15:30:00.123456Z"},
		{"2025-01-06T17:00:00.000001+01:30",
		 "2025-01-06T15:30:00.000001Z"},
		{"2025-01-05T23:30:00-16:00", "2025-01-06T15:30:00.000000Z"},
		{"2024-12-31T23:59:59.999999-00:01",
		 "2025-01-01T00:00:59.999999Z"},
	};
	static const char *const bad[] = {
		"2025-01-06",
		"2025-01-06T15:30",
		"2025-01-06T15:30:00.",
		"2025-01-06T15:30:00.1234567890Z",
		"2025-01-06T15:30:00+00",
		"2025-01-06T15:30:00+0000",
		"2025-01-06T15:30:00+24:00",
		"2025-01-06T15:30:00+01:60",
		"2025-01-06T15:30:00ZZ",
		"2025-01-06T15:30:00 Z",
		"2025-01-06X15:30:00Z",
		"2025-02-30T15:30:00Z",
		"0001-01-01T00:00:00+00:01",
		"9999-12-31T23:59:59-00:01",
		"",
	};
	char out[VMEM_TIMESTAMP_LEN + 1];
	int64_t usec;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_msg(timestamp_parse_any(cases[i].text,
						  strlen(cases[i].text),
						  &usec) == 0,
			      "%s", cases[i].text);
		timestamp_format(usec, out);
		ck_assert_str_eq(out, cases[i].ours);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(timestamp_parse_any(bad[i], strlen(bad[i]),
						  &usec) == -1,
			      "%s", bad[i]);
}
END_TEST

/* A file as the seed library writes it: its to_json() through
 * json.dump(indent=2) (ASCII escapes, no version, a timestamp from
 * isoformat(), no final newline) is a version 1 decision. */
START_TEST(test_parse_seed_file)
{
	static const char seed[] =
		"{\n"
		"  \"coordinate\": {\n"
		"    \"x\": 5,\n"
		"    \"y\": 2,\n"
		"    \"z\": 1\n"
		"  },\n"
		"  \"content\": \"Use PostgreSQL \\u00e9\\ud83d\\ude00\",\n"
		"  \"timestamp\": \"2025-01-06T15:30:00.123456+00:00\",\n"
		"  \"agent_id\": \"claude-code-01\",\n"
		"  \"issue_context\": {\n"
		"    \"issue_id\": \"codeframe-aco-t49\",\n"
		"    \"cycle_stage_name\": \"architect\"\n"
		"  }\n"
		"}";
	static const char no_context[] =
		"{\"coordinate\": {\"x\": 1, \"y\": 1, \"z\": 2}, "
		"\"content\": \"c\", \"timestamp\": \"2025-01-06T15:30:00\", "
		"\"agent_id\": \"a\"}";
	char msg[VMEM_ERRMSG_LEN];
	struct decision d;
	char *compact;

	ck_assert_int_eq(decision_parse(seed, strlen(seed), 0, &d, msg), 0);
	ck_assert(d.version == 1);
	ck_assert_str_eq(d.timestamp, "2025-01-06T15:30:00.123456Z");
	ck_assert_str_eq(d.content, "Use PostgreSQL \xc3\xa9\xf0\x9f\x98\x80");
	compact = decision_dump_compact(&d, NULL);
	ck_assert_ptr_nonnull(compact);
	ck_assert_str_eq(
		compact,
		"{\"coordinate\":{\"x\":5,\"y\":2,\"z\":1},\"content\":\"Use "
		"PostgreSQL \xc3\xa9\xf0\x9f\x98\x80\",\"timestamp\":\"2025-01-"
		"06T15:30:00.123456Z\",\"agent_id\":\"claude-code-01\",\"issue_"
		"context\":{\"issue_id\":\"codeframe-aco-t49\",\"cycle_stage_"
		"name\":\"architect\"},\"version\":1}");
	free(compact);
	decision_done(&d);

	ck_assert_int_eq(
		decision_parse(no_context, strlen(no_context), 0, &d, msg), 0);
	ck_assert_ptr_null(d.issue_context);
	ck_assert(d.version == 1);
	ck_assert_str_eq(d.timestamp, "2025-01-06T15:30:00.000000Z");
	decision_done(&d);
}
END_TEST

START_TEST(test_dump_file_example)
{
	struct decision d;
	char msg[VMEM_ERRMSG_LEN];
	char *text, *compact;
	size_t len;

	memset(&d, 0, sizeof(d));
	d.coord = (struct coord){5, 2, 1};
	d.content = strdup("Use PostgreSQL for persistence layer");
	d.content_len = strlen(d.content);
	strcpy(d.timestamp, "2025-01-06T15:30:00.123456Z");
	d.agent_id = strdup("claude-code-01");
	d.issue_context =
		json_pack("{s:s,s:s}", "issue_id", "codeframe-aco-t49",
			  "issue_title", "Vector Memory Manager");
	d.version = 1;
	text = decision_dump_file(&d, &len);
	ck_assert_ptr_nonnull(text);
	ck_assert_str_eq(text, example_file);
	ck_assert_uint_eq(len, strlen(example_file));
	free(text);

	compact = decision_dump_compact(&d, &len);
	ck_assert_str_eq(
		compact,
		"{\"coordinate\":{\"x\":5,\"y\":2,\"z\":1},\"content\":\"Use "
		"PostgreSQL for persistence layer\",\"timestamp\":\"2025-01-"
		"06T15:30:00.123456Z\",\"agent_id\":\"claude-code-01\","
		"\"issue_context\":{\"issue_id\":\"codeframe-aco-t49\","
		"\"issue_title\":\"Vector Memory Manager\"},\"version\":1}");
	ck_assert_uint_eq(len, strlen(compact));
	decision_done(&d);

	/* The compact form parses back to the same file. */
	ck_assert_int_eq(decision_parse(compact, len, 1000, &d, msg), 0);
	text = decision_dump_file(&d, &len);
	ck_assert_str_eq(text, example_file);
	free(text);
	free(compact);
	decision_done(&d);
	decision_done(&d); /* idempotent */
}
END_TEST

START_TEST(test_file_round_trip)
{
	static const char file[] =
		"{\n"
		"  \"coordinate\": {\n"
		"    \"x\": 1000,\n"
		"    \"y\": 5,\n"
		"    \"z\": 4\n"
		"  },\n"
		"  \"content\": \"\xc3\x9c"
		"ber \xe3\x83\x87\xe3\x83\xbc\xe3\x82\xbf\xe3\x83\x99\xe3\x83"
		"\xbc\xe3\x82\xb9 \\\"quoted\\\" a/b \\\\ \\n\\t\",\n"
		"  \"timestamp\": \"2000-02-29T00:00:00.000001Z\",\n"
		"  \"agent_id\": \"\xc3\xa9quipe-7\",\n"
		"  \"issue_context\": null,\n"
		"  \"version\": 9007199254740993\n"
		"}\n";
	char msg[VMEM_ERRMSG_LEN];
	struct decision d;
	char *text;
	size_t len;

	ck_assert_int_eq(decision_parse(file, strlen(file), 1000, &d, msg), 0);
	ck_assert_int_eq(d.coord.x, 1000);
	ck_assert_ptr_null(d.issue_context);
	ck_assert(d.version == 9007199254740993LL);
	ck_assert_ptr_nonnull(strstr(d.content, "\xc3\x9c"
						"ber"));
	text = decision_dump_file(&d, &len);
	ck_assert_ptr_nonnull(text);
	ck_assert_str_eq(text, file);
	ck_assert_uint_eq(len, strlen(file));
	free(text);
	decision_done(&d);
}
END_TEST

/* Replace the first occurrence of from by to in the example file. */
static int parse_edited(const char *from, const char *to, char *msg)
{
	char buf[2048];
	const char *at = strstr(example_file, from);
	struct decision d;
	int r;

	ck_assert_msg(at != NULL, "%s not in example", from);
	snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - example_file),
		 example_file, to, at + strlen(from));
	msg[0] = '\0';
	r = decision_parse(buf, strlen(buf), 1000, &d, msg);
	if (r == 0)
		decision_done(&d);
	else
		ck_assert_msg(msg[0] != '\0', "no message");
	return r;
}

/* decision_parse as it was: jansson alone (the quick loader's oracle). */
static int parse_by_jansson(const char *text, struct decision *d, char *msg)
{
	json_error_t err;
	json_t *obj =
		json_loadb(text, strlen(text), JSON_REJECT_DUPLICATES, &err);
	int r;

	memset(d, 0, sizeof(*d));
	if (!obj) {
		snprintf(msg, VMEM_ERRMSG_LEN,
			 "invalid JSON at line %d column %d: %.80s", err.line,
			 err.column, err.text);
		return RPC_INVALID_PARAMS;
	}
	r = decision_from_json(obj, 1000, d, msg);
	json_decref(obj);
	return r;
}

/* decision_parse takes the quick loader's tree when it gives one and
 * jansson's otherwise: the same decision or the same message either way
 * (an escape the quick loader leaves, duplicate keys, a top level that
 * is not an object, a cut text). */
START_TEST(test_parse_quick_or_jansson_same)
{
	static const char *const texts[] = {
		example_file,
		"{\"coordinate\":{\"x\":1,\"y\":1,\"z\":2},\"content\":"
		"\"caf\\u00e9\",\"timestamp\":\"2025-01-06T15:30:00.123456Z\","
		"\"agent_id\":\"a\"}",
		"{\"coordinate\":{\"x\":1,\"y\":1,\"z\":2},\"content\":\"x\","
		"\"content\":\"y\",\"timestamp\":"
		"\"2025-01-06T15:30:00.123456Z\",\"agent_id\":\"a\"}",
		"[1]",
		"3",
		"\"text\"",
		"{\"coordinate\": {\"x\": 1",
	};

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		char m1[VMEM_ERRMSG_LEN] = "", m2[VMEM_ERRMSG_LEN] = "";
		struct decision a, b;
		int r1 = decision_parse(texts[i], strlen(texts[i]), 1000, &a,
					m1);
		int r2 = parse_by_jansson(texts[i], &b, m2);

		ck_assert_int_eq(r1, r2);
		ck_assert_str_eq(m1, m2);
		if (r1 != 0)
			continue;
		ck_assert_int_eq(coord_cmp(&a.coord, &b.coord), 0);
		ck_assert_uint_eq(a.content_len, b.content_len);
		ck_assert_mem_eq(a.content, b.content, a.content_len);
		ck_assert_str_eq(a.agent_id, b.agent_id);
		ck_assert_str_eq(a.timestamp, b.timestamp);
		decision_done(&a);
		decision_done(&b);
	}
}
END_TEST

START_TEST(test_parse_rejects)
{
	char msg[VMEM_ERRMSG_LEN];

	ck_assert_int_eq(parse_edited("", "", msg), 0);
	ck_assert_int_eq(parse_edited("\"version\": 1",
				      "\"version\": 1, \"extra\": true", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_str_eq(msg, "decision has unknown member extra");
	/* Only version and issue_context may be missing (seed files). */
	ck_assert_int_eq(parse_edited(",\n  \"version\": 1", "", msg), 0);
	ck_assert_int_eq(
		parse_edited("\"agent_id\": \"claude-code-01\",\n", "", msg),
		RPC_INVALID_PARAMS);
	ck_assert_str_eq(msg, "decision is missing member agent_id");
	ck_assert_int_eq(parse_edited("\"timestamp\"", "\"time\"", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("\"version\": 1", "\"version\": 0", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("\"version\": 1", "\"version\": -3", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(
		parse_edited("\"version\": 1", "\"version\": 1.0", msg),
		RPC_INVALID_PARAMS);
	ck_assert_int_eq(
		parse_edited("\"version\": 1", "\"version\": \"1\"", msg),
		RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("15:30:00.123456Z", "15:30:00Z", msg), 0);
	ck_assert_int_eq(parse_edited("15:30:00.123456Z", "15:30Z", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(
		parse_edited("15:30:00.123456Z", "25:30:00.123456Z", msg),
		RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("\"x\": 5", "\"x\": 0", msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_int_eq(parse_edited("\"x\": 5", "\"x\": 5.0", msg),
			 RPC_COORDINATE_VALIDATION);
	ck_assert_int_eq(parse_edited("\"Use PostgreSQL for persistence "
				      "layer\"",
				      "\"\"", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("\"Use PostgreSQL", "\"\\u0000Use", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(
		parse_edited("\"claude-code-01\"", "\"a\\u0001\"", msg),
		RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("\"claude-code-01\"", "7", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("\"issue_id\": \"codeframe-aco-t49\"",
				      "\"issue_id\": 49", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("\"version\": 1",
				      "\"version\": 1, \"version\": 2", msg),
			 RPC_INVALID_PARAMS);
	ck_assert_int_eq(parse_edited("}\n", "}\n}", msg), RPC_INVALID_PARAMS);
}
END_TEST

/* The hand-written compact writer gives exactly jansson's bytes, and
 * re-indenting it gives exactly the file form. */
START_TEST(test_compact_matches_jansson)
{
	static const char *const contents[] = {
		"plain",
		"quote \" and backslash \\ and slash /",
		"tabs\tnew\nlines\rform\ffeed\bback",
		"\x01\x02\x1f\x7f controls and DEL",
		"\xc3\x9c"
		"ber \xe3\x83\x87\xe3\x83\xbc\xe3\x82\xbf \xf0\x9f\x98\x80",
		"\xe2\x80\xa8 line separator",
	};
	char buf[64];

	for (size_t i = 0; i < sizeof(contents) / sizeof(contents[0]); i++) {
		struct decision d = {.coord = {7, 3, 2}, .version = 42};
		json_t *obj;
		char *mine, *theirs, *file;
		size_t len, flen;

		d.content = strdup(contents[i]);
		d.content_len = strlen(contents[i]);
		snprintf(buf, sizeof(buf), "agent \"%zu\"\t", i);
		d.agent_id = strdup(buf);
		timestamp_format(1736177400123456LL, d.timestamp);
		if (i % 3 == 1)
			d.issue_context =
				json_pack("{s:s,s:s}", "issue_id", contents[i],
					  "k\"\n", "v{,:}");
		else if (i % 3 == 2)
			d.issue_context = json_object();
		obj = decision_to_json(&d);
		theirs = json_dumps(obj, JSON_COMPACT);
		mine = decision_dump_compact(&d, &len);
		ck_assert_str_eq(mine, theirs);
		ck_assert_uint_eq(len, strlen(theirs));
		free(theirs);
		/* and its re-indented file form is decision_dump_file's */
		theirs = decision_dump_file(&d, NULL);
		file = decision_file_from_compact(mine, len, &flen);
		ck_assert_ptr_nonnull(file);
		ck_assert_str_eq(file, theirs);
		ck_assert_uint_eq(flen, strlen(theirs));
		free(file);
		free(mine);
		free(theirs);
		json_decref(obj);
		decision_done(&d);
	}
}
END_TEST

static Suite *decision_suite(void)
{
	Suite *s = suite_create("decision");
	TCase *tc = tcase_create("validate");
	TCase *tc2 = tcase_create("serialise");

	tcase_add_test(tc, test_coord_valid);
	tcase_add_test(tc, test_coord_bad_values);
	tcase_add_test(tc, test_coord_bad_shape);
	tcase_add_test(tc, test_coord_max_x);
	tcase_add_test(tc, test_coord_cmp_json);
	tcase_add_test(tc, test_content);
	tcase_add_test(tc, test_content_blank);
	tcase_add_test(tc, test_utf8);
	tcase_add_test(tc, test_agent_id);
	tcase_add_test(tc, test_issue_context);
	suite_add_tcase(s, tc);
	tcase_add_test(tc2, test_paths);
	tcase_add_test(tc2, test_timestamps);
	tcase_add_test(tc2, test_timestamps_calendar);
	tcase_add_test(tc2, test_timestamps_any);
	tcase_add_test(tc2, test_parse_seed_file);
	tcase_add_test(tc2, test_dump_file_example);
	tcase_add_test(tc2, test_file_round_trip);
	tcase_add_test(tc2, test_parse_rejects);
	tcase_add_test(tc2, test_parse_quick_or_jansson_same);
	tcase_add_test(tc2, test_compact_matches_jansson);
	suite_add_tcase(s, tc2);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(decision_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
