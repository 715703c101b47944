/*
 * Unit tests of protocol/idscan.c: the id and method of a request found
 * first, last or between huge members, fed whole or a byte at a time;
 * ids of every JSON-RPC type; nothing taken from nested objects, from
 * strings that merely look like members, from batches or from garbage;
 * bounded values.
 */
#include "protocol/idscan.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_suite.h"

/* Scan text in pieces of step bytes (0: whole); the id as a string. */
static const char *scan(const char *text, size_t step, char *out,
			const char **method)
{
	static char m[IDSCAN_VALUE_MAX + 1];
	struct idscan s;
	size_t n = strlen(text), len;
	const char *id, *meth;

	idscan_init(&s);
	if (!step)
		step = n ? n : 1;
	for (size_t i = 0; i < n; i += step)
		idscan_feed(&s, text + i, n - i < step ? n - i : step);
	meth = idscan_method(&s, &len);
	if (method) {
		*method = NULL;
		if (meth) {
			memcpy(m, meth, len);
			m[len] = '\0';
			*method = m;
		}
	}
	id = idscan_id(&s, &len);
	if (!id)
		return NULL;
	memcpy(out, id, len);
	out[len] = '\0';
	return out;
}

static void check_both(const char *text, const char *want_id,
		       const char *want_method)
{
	char out[IDSCAN_VALUE_MAX + 1];
	const char *method;

	for (size_t step = 0; step <= 3; step++) {
		const char *id = scan(text, step, out, &method);

		if (want_id)
			ck_assert_msg(id && !strcmp(id, want_id),
				      "%s: id %s, want %s", text,
				      id ? id : "(none)", want_id);
		else
			ck_assert_msg(!id, "%s: id %s, want none", text, id);
		if (want_method)
			ck_assert_msg(method && !strcmp(method, want_method),
				      "%s: method %s", text,
				      method ? method : "(none)");
	}
}

START_TEST(test_id_anywhere)
{
	check_both("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", "7",
		   "\"ping\"");
	/* The TypeScript SDK puts the id last, after the params. */
	check_both("{\"method\":\"tools/call\",\"params\":{\"name\":\"x\","
		   "\"arguments\":{\"id\":99,\"content\":\"a\\\"b\"}},"
		   "\"jsonrpc\":\"2.0\",\"id\":12}",
		   "12", "\"tools/call\"");
	check_both(" { \"id\" : \"abc\\\"d\" , \"method\" : \"m\" } ",
		   "\"abc\\\"d\"", "\"m\"");
	check_both("{\"id\":null,\"method\":\"x\"}", "null", "\"x\"");
	check_both("{\"id\":-3.5e2}", "-3.5e2", NULL);
	/* A repeated member: the last one, as the parser keeps it. */
	check_both("{\"id\":1,\"id\":2}", "2", NULL);
	/* Keys are read as the parser reads them, escapes decoded. */
	check_both("{\"i\\u0064\":5,\"m\\u0065thod\":\"x\"}", "5", "\"x\"");
	check_both("{\"\\u0069\\u0044\":5}", NULL, NULL);
	check_both("{\"i\\\"d\":5}", NULL, NULL);
}
END_TEST

/* A key's escapes decode to what the parser sees: "me\thod" holds a tab,
 * not a t, and "id\u0000" is no "id" (found by the fuzzer). */
START_TEST(test_key_escapes)
{
	static const char *const not_method[] = {
		"{\"me\\thod\":\"x\"}",	 "{\"\\method\":\"x\"}",
		"{\"metho\\d\":\"x\"}",	 "{\"method\\u0000\":\"x\"}",
		"{\"method\\b\":\"x\"}", "{\"\\nmethod\":\"x\"}",
	};
	const char *method;
	char out[IDSCAN_VALUE_MAX + 1];

	for (size_t i = 0; i < sizeof(not_method) / sizeof(*not_method); i++) {
		for (size_t step = 0; step <= 3; step++) {
			scan(not_method[i], step, out, &method);
			ck_assert_msg(!method, "%s: method %s", not_method[i],
				      method);
		}
	}
	check_both("{\"id\\u0000\":5}", NULL, NULL);
	check_both("{\"\\u0069d\":5,\"me\\u0074hod\":\"x\"}", "5", "\"x\"");
	check_both("{\"\\/\":1,\"i\\u0064\":\"\\t\"}", "\"\\t\"", NULL);
}
END_TEST

START_TEST(test_not_taken)
{
	/* Members of nested objects, strings that look like members. */
	check_both("{\"params\":{\"id\":5},\"method\":\"n\"}", NULL, "\"n\"");
	check_both("{\"x\":\"\\\"id\\\":5\",\"method\":\"n\"}", NULL, NULL);
	check_both("[{\"id\":1}]", NULL, NULL);
	check_both("\"id\"", NULL, NULL);
	check_both("{\"id\":{\"a\":1}}", NULL, NULL);
	check_both("{\"id\":[1]}", NULL, NULL);
	/* Booleans are no JSON-RPC id (found by the fuzzer). */
	check_both("{\"id\":true,\"method\":\"m\"}", NULL, "\"m\"");
	check_both("{\"id\":false}", NULL, NULL);
	check_both("", NULL, NULL);
	/* Unterminated: an id string never closed is not one. */
	check_both("{\"id\":\"abc", NULL, NULL);
}
END_TEST

START_TEST(test_huge_member_between)
{
	size_t big = 3 * 1024 * 1024;
	char *text = malloc(big + 128), out[IDSCAN_VALUE_MAX + 1];
	char *p = text;

	ck_assert_ptr_nonnull(text);
	p += sprintf(p, "{\"method\":\"tools/call\",\"params\":{\"c\":\"");
	memset(p, 'a', big);
	p += big;
	sprintf(p, "\"},\"id\":\"req-1\"}");
	ck_assert_str_eq(scan(text, 0, out, NULL), "\"req-1\"");
	ck_assert_str_eq(scan(text, 65536, out, NULL), "\"req-1\"");
	free(text);
}
END_TEST

START_TEST(test_bounded)
{
	char text[IDSCAN_VALUE_MAX * 2 + 32], out[IDSCAN_VALUE_MAX + 1];
	size_t n;

	n = (size_t)sprintf(text, "{\"id\":\"");
	memset(text + n, 'x', IDSCAN_VALUE_MAX * 2);
	strcpy(text + n + IDSCAN_VALUE_MAX * 2, "\"}");
	ck_assert_ptr_null(scan(text, 0, out, NULL));
	ck_assert_ptr_null(scan(text, 1, out, NULL));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("idscan");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_id_anywhere);
	tcase_add_test(tc, test_key_escapes);
	tcase_add_test(tc, test_not_taken);
	tcase_add_test(tc, test_huge_member_between);
	tcase_add_test(tc, test_bounded);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
