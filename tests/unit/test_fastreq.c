/*
 * Unit tests of protocol/fastreq.c: the shapes it takes, and that it
 * leaves everything else to the full parser, in particular every line
 * where it could not give the same answer (escapes, reals, big integers,
 * duplicates, extra members, batches, notifications).
 */
#include <check.h>
#include <string.h>

#include "protocol/fastreq.h"
#include "run_suite.h"

static bool parse(const char *line, struct fastreq *q)
{
	return fastreq_parse(line, strlen(line), q);
}

START_TEST(plain_get)
{
	struct fastreq q;

	ck_assert(parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"decision."
			"get\",\"params\":{\"coordinate\":{\"x\":1,\"y\":2,"
			"\"z\":3}}}",
			&q));
	ck_assert_int_eq(q.id, 7);
	ck_assert_uint_eq(q.method_len, 12);
	ck_assert(memcmp(q.method, "decision.get", 12) == 0);
	ck_assert_int_eq(q.x, 1);
	ck_assert_int_eq(q.y, 2);
	ck_assert_int_eq(q.z, 3);
}
END_TEST

START_TEST(any_order_and_whitespace)
{
	struct fastreq q;

	ck_assert(parse(" { \"params\" : { \"coordinate\" :\t{ \"z\" : 4 , "
			"\"x\":1000,\"y\":-5 } } ,\r\n\"method\":\"decision."
			"exists\", \"id\" : -0 , \"jsonrpc\" : \"2.0\" }\r",
			&q));
	ck_assert_int_eq(q.id, 0);
	ck_assert_uint_eq(q.method_len, 15);
	ck_assert_int_eq(q.x, 1000);
	ck_assert_int_eq(q.y, -5);
	ck_assert_int_eq(q.z, 4);
	/* The largest id it takes: 18 digits. */
	ck_assert(parse("{\"jsonrpc\":\"2.0\",\"id\":-999999999999999999,"
			"\"method\":\"m\",\"params\":{\"coordinate\":{\"x\":1,"
			"\"y\":1,\"z\":1}}}",
			&q));
	ck_assert_int_eq(q.id, -999999999999999999LL);
}
END_TEST

/* Lines it must leave to the full parser. */
static const char *const declined[] = {
	/* not a single object */
	"",
	"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}]",
	/* a notification: no id */
	"{\"jsonrpc\":\"2.0\",\"method\":\"decision.get\",\"params\":"
	"{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	/* ids it does not echo itself */
	"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1.0,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1e2,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1234567890123456789,\"method\":\"d\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":01,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":-,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	/* wrong or escaped version, escaped method */
	"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2\\u002e0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision\\u002eget\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	/* a byte that is not ASCII: the full parser judges its UTF-8 */
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"de\x98ision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	/* duplicates */
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"x\":1,\"y\":1,\"z\":1}}}",
	/* extra or missing members at every level */
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}},\"more\":1}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1},\"more\":1}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1,\"w\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\"}",
	"{\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	/* values of the wrong kind */
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1.5,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":\"1\",\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":[1,1,1]}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":[{\"x\":1,\"y\":1,\"z\":1}]}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7,"
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	/* broken syntax and trailing bytes */
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}} x",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1,}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\""
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\t\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":1}}}",
};

START_TEST(declines)
{
	struct fastreq q;

	ck_assert_msg(!parse(declined[_i], &q), "took: %s", declined[_i]);
}
END_TEST

/* Every proper prefix of a good line is declined (no read past len). */
START_TEST(prefixes_declined)
{
	static const char line[] =
		"{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"decision.get\","
		"\"params\":{\"coordinate\":{\"x\":10,\"y\":2,\"z\":3}}}";
	struct fastreq q;

	for (size_t n = 0; n < sizeof(line) - 1; n++)
		ck_assert_msg(!fastreq_parse(line, n, &q), "took %zu bytes", n);
	ck_assert(fastreq_parse(line, sizeof(line) - 1, &q));
	ck_assert_int_eq(q.x, 10);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fastreq");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, plain_get);
	tcase_add_test(tc, any_order_and_whitespace);
	tcase_add_loop_test(tc, declines, 0,
			    (int)(sizeof(declined) / sizeof(declined[0])));
	tcase_add_test(tc, prefixes_declined);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
