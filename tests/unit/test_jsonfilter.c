/*
 * Unit tests of daemon/find/jsonfilter.c: PostgreSQL's documented jsonb
 * containment examples (section 8.14.3 and the operator table), type
 * distinctions, and the postings index against jsonb_contains over random
 * records and filters, through additions and removals. A timing case
 * (a 1 % filter over 100,000 records) prints figures as TAP diagnostics
 * and never asserts time.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonfilter.h"
#define TEST_RNG_SEED 99
#include "test_rng.h"

/* Sanitizers slow the timing case down tenfold: a smaller size there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TIMING_RECORDS 10000u
#else
#define TIMING_RECORDS 100000u
#endif

static json_t *J(const char *text)
{
	json_error_t err;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &err);

	ck_assert_msg(v != NULL, "%s: %s", text, err.text);
	return v;
}

static const json_t *one_value(void *ctx, uint32_t slot)
{
	ck_assert_uint_eq(slot, 7);
	return ctx;
}

/* doc @> filter, through jsonb_contains and through the index. */
static bool both(const char *doc, const char *filter)
{
	json_t *d = J(doc), *f = J(filter);
	struct jfindex *ix = jfindex_new();
	bool direct = jsonb_contains(d, f), exact;
	uint32_t *ids = NULL, *c = NULL;
	size_t n = 0, nc = 0;

	ck_assert_int_eq(jfindex_add(ix, 7, d), 0);
	ck_assert_int_eq(jfindex_match(ix, f, one_value, d, &ids, &n), 0);
	ck_assert_uint_eq(n, direct ? 1 : 0);
	ck_assert(n == 0 || ids[0] == 7);
	/* Candidates are a superset, and exactly the matches when exact. */
	ck_assert_int_eq(jfindex_candidates(ix, f, &c, &nc, &exact), 0);
	ck_assert(!direct || nc == 1);
	if (exact)
		ck_assert_uint_eq(nc, n);
	free(ids);
	free(c);
	jfindex_remove(ix, 7, d);
	ck_assert_uint_eq(jfindex_postings(ix), 0);
	jfindex_free(ix);
	json_decref(d);
	json_decref(f);
	return direct;
}

START_TEST(postgres_documentation)
{
	/* Section 8.14.3, "jsonb Containment and Existence". */
	ck_assert(both("\"foo\"", "\"foo\""));
	ck_assert(both("[1, 2, 3]", "[1, 3]"));
	ck_assert(both("[1, 2, 3]", "[3, 1]"));
	ck_assert(both("[1, 2, 3]", "[1, 2, 2]"));
	ck_assert(both("{\"product\": \"PostgreSQL\", \"version\": 9.4, "
		       "\"jsonb\": true}",
		       "{\"version\": 9.4}"));
	ck_assert(!both("[1, 2, [1, 3]]", "[1, 3]"));
	ck_assert(both("[1, 2, [1, 3]]", "[[1, 3]]"));
	ck_assert(!both("{\"foo\": {\"bar\": \"baz\"}}", "{\"bar\": \"baz\"}"));
	ck_assert(both("{\"foo\": {\"bar\": \"baz\"}}", "{\"foo\": {}}"));
	ck_assert(both("[\"foo\", \"bar\"]", "\"foo\""));
	ck_assert(!both("\"foo\"", "[\"foo\"]"));
	/* The operator table. */
	ck_assert(both("{\"a\":1, \"b\":2}", "{\"b\":2}"));
	/* Section 8.14.4, the GIN example document. */
	const char *jdoc =
		"{\"guid\": \"9c36adc1-7fb5-4d5b-83b4-90356a46061a\","
		" \"name\": \"Angela Barton\", \"is_active\": true,"
		" \"company\": \"Magnafone\","
		" \"address\": \"178 Howard Place, Gulf, Washington, 702\","
		" \"registered\": \"2009-11-07T08:53:22 +08:00\","
		" \"latitude\": 19.793713, \"longitude\": 86.513373,"
		" \"tags\": [\"enim\", \"aliquip\", \"qui\"]}";
	ck_assert(both(jdoc, "{\"company\": \"Magnafone\"}"));
	ck_assert(both(jdoc, "{\"tags\": [\"qui\"]}"));
	ck_assert(both(jdoc, "{\"tags\": [\"qui\", \"enim\"]}"));
	ck_assert(!both(jdoc, "{\"tags\": [\"qui\", \"nope\"]}"));
	ck_assert(!both(jdoc, "{\"tags\": \"qui\"}"));
	ck_assert(both("[\"enim\", \"aliquip\", \"qui\"]", "[\"qui\"]"));
}
END_TEST

START_TEST(types_and_structure)
{
	/* Types are distinct; numbers compare by value. */
	ck_assert(!both("{\"a\": 1}", "{\"a\": \"1\"}"));
	ck_assert(!both("{\"a\": 1}", "{\"a\": true}"));
	ck_assert(!both("{\"a\": \"true\"}", "{\"a\": true}"));
	ck_assert(both("{\"a\": 1}", "{\"a\": 1.0}"));
	ck_assert(both("{\"a\": 1.0}", "{\"a\": 1}"));
	ck_assert(both("{\"a\": 0}", "{\"a\": -0.0}"));
	ck_assert(both("{\"a\": 2.5}", "{\"a\": 2.50}"));
	ck_assert(!both("{\"a\": 2.5}", "{\"a\": 2}"));
	ck_assert(
		both("{\"a\": 9007199254740993}", "{\"a\": 9007199254740993}"));
	ck_assert(!both("{\"a\": 9007199254740993}",
			"{\"a\": 9007199254740992}"));
	ck_assert(both("{\"a\": null}", "{\"a\": null}"));
	ck_assert(!both("{\"a\": null}", "{\"a\": false}"));
	ck_assert(!both("{\"b\": null}", "{\"a\": null}"));
	ck_assert(both("{\"a\": false}", "{\"a\": false}"));
	/* A nested scalar does not match an array (top level only). */
	ck_assert(!both("{\"a\": [\"x\"]}", "{\"a\": \"x\"}"));
	ck_assert(!both("{\"a\": \"x\"}", "{\"a\": [\"x\"]}"));
	ck_assert(!both("[[\"x\"]]", "[\"x\"]"));
	/* Empty containers, and object versus array. */
	ck_assert(both("{\"a\": 1}", "{}"));
	ck_assert(both("{}", "{}"));
	ck_assert(both("[1]", "[]"));
	ck_assert(!both("{}", "[]"));
	ck_assert(!both("[]", "{}"));
	ck_assert(!both("{\"a\": {}}", "{\"a\": []}"));
	ck_assert(both("{\"a\": []}", "{\"a\": []}"));
	ck_assert(!both("1", "[]"));
	ck_assert(!both("{\"a\":1}", "1"));
	ck_assert(both("1", "1.0"));
	/* Arrays of objects: one element must hold the whole object. */
	ck_assert(both("{\"items\": [{\"a\": 1, \"b\": 2}, {\"c\": 3}]}",
		       "{\"items\": [{\"a\": 1}]}"));
	ck_assert(both("{\"items\": [{\"a\": 1, \"b\": 2}, {\"c\": 3}]}",
		       "{\"items\": [{\"a\": 1, \"b\": 2}, {\"c\": 3}]}"));
	ck_assert(!both("{\"items\": [{\"a\": 1}, {\"b\": 2}]}",
			"{\"items\": [{\"a\": 1, \"b\": 2}]}"));
	ck_assert(!both("{\"x\": [[1], [2]]}", "{\"x\": [[1, 2]]}"));
	ck_assert(both("{\"x\": [[2], [1, 3]]}", "{\"x\": [[1]]}"));
	/* Keys with NUL-free bytes of every kind, and deep nesting. */
	ck_assert(both("{\"k\\u00e9y\": {\"\": {\"x y\": [true]}}}",
		       "{\"k\\u00e9y\": {\"\": {\"x y\": [true]}}}"));
	ck_assert(!both("{\"k\": 1}", "{\"K\": 1}"));
}
END_TEST

START_TEST(limits)
{
	char deep[200], msg[128];
	struct jfindex *ix = jfindex_new();
	json_t *v, *big = json_array();
	uint32_t *ids;
	size_t n;
	int i;

	/* 40 levels: beyond the depth limit. */
	for (i = 0; i < 40; i++)
		deep[i] = '[';
	for (i = 40; i < 80; i++)
		deep[i] = ']';
	deep[80] = '\0';
	v = J(deep);
	ck_assert_int_eq(jsonfilter_check(v, msg, sizeof(msg)), -EINVAL);
	ck_assert_int_eq(jfindex_add(ix, 1, v), -E2BIG);
	ck_assert_int_eq(jfindex_match(ix, v, NULL, NULL, &ids, &n), -EINVAL);
	ck_assert_uint_eq(jfindex_postings(ix), 0);
	json_decref(v);
	for (i = 0; i < JSONFILTER_RECORD_POSTINGS + 1; i++)
		json_array_append_new(big, json_integer(i));
	ck_assert_int_eq(jfindex_add(ix, 1, big), -E2BIG);
	ck_assert_uint_eq(jfindex_postings(ix), 0);
	ck_assert_int_eq(jsonfilter_check(big, msg, sizeof(msg)), -EINVAL);
	json_decref(big);
	v = J("{\"a\": [1, 2, {\"b\": null}]}");
	ck_assert_int_eq(jsonfilter_check(v, msg, sizeof(msg)), 0);
	json_decref(v);
	jfindex_free(ix);
}
END_TEST

/* ---- random records and filters ---- */

static json_t *rnd_value(int depth)
{
	static const char *keys[] = {"a", "b", "c", "tags"};
	static const char *strs[] = {"x", "y", "1", "true"};
	json_t *v;
	int n, i;

	switch (rnd() % (depth > 2 ? 6 : 8)) {
	case 0:
		return json_integer((json_int_t)(rnd() % 3));
	case 1:
		return json_real((double)(rnd() % 3));
	case 2:
		return json_string(strs[rnd() % 4]);
	case 3:
		return json_boolean(rnd() % 2);
	case 4:
		return json_null();
	case 5:
		return json_real(0.5);
	case 6:
		v = json_object();
		n = (int)(rnd() % 4);
		for (i = 0; i < n; i++)
			json_object_set_new(v, keys[rnd() % 4],
					    rnd_value(depth + 1));
		return v;
	default:
		v = json_array();
		n = (int)(rnd() % 4);
		for (i = 0; i < n; i++)
			json_array_append_new(v, rnd_value(depth + 1));
		return v;
	}
}

/* A filter made from a record: some of its parts, to make matches. */
static json_t *sub_of(const json_t *v)
{
	const char *key;
	json_t *out, *c;
	size_t i;

	if (json_is_object(v)) {
		out = json_object();
		json_object_foreach((json_t *)v, key, c) if (rnd() % 3)
			json_object_set_new(out, key, sub_of(c));
		return out;
	}
	if (json_is_array(v)) {
		out = json_array();
		for (i = 0; i < json_array_size(v); i++)
			if (rnd() % 2)
				json_array_append_new(
					out, sub_of(json_array_get(v, i)));
		return out;
	}
	return json_deep_copy(v);
}

#define NREC 300

static json_t *records[NREC];

static const json_t *value_of(void *ctx, uint32_t slot)
{
	(void)ctx;
	return records[slot];
}

static void check_filter(struct jfindex *ix, const json_t *f)
{
	uint32_t *ids = NULL;
	size_t n = 0, k = 0, i;

	ck_assert_int_eq(jfindex_match(ix, f, value_of, NULL, &ids, &n), 0);
	for (i = 0; i < NREC; i++) {
		if (!records[i] || !jsonb_contains(records[i], f))
			continue;
		ck_assert_msg(k < n && ids[k] == i, "slot %zu missing", i);
		k++;
	}
	ck_assert_uint_eq(k, n);
	free(ids);
}

START_TEST(index_against_model)
{
	struct jfindex *ix = jfindex_new();
	json_t *f;
	int rep, matched = 0;
	size_t i;

	for (i = 0; i < NREC; i++) {
		records[i] = json_object();
		json_object_set_new(records[i], "a", rnd_value(1));
		json_object_set_new(records[i], "tags", rnd_value(1));
		if (rnd() % 2)
			json_object_set_new(records[i], "b", rnd_value(0));
		ck_assert_int_eq(jfindex_add(ix, (uint32_t)i, records[i]), 0);
	}
	for (rep = 0; rep < 3000; rep++) {
		i = rnd() % NREC;
		f = rnd() % 3 && records[i] ? sub_of(records[i]) : rnd_value(0);
		check_filter(ix, f);
		matched += json_is_object(f);
		json_decref(f);
		/* Replace a record now and then. */
		if (rep % 10 == 0) {
			i = rnd() % NREC;
			if (records[i]) {
				jfindex_remove(ix, (uint32_t)i, records[i]);
				json_decref(records[i]);
				records[i] = NULL;
			}
			if (rnd() % 2) {
				records[i] = rnd_value(0);
				ck_assert_int_eq(jfindex_add(ix, (uint32_t)i,
							     records[i]),
						 0);
			}
		}
	}
	ck_assert_int_gt(matched, 100);
	for (i = 0; i < NREC; i++) {
		if (records[i])
			jfindex_remove(ix, (uint32_t)i, records[i]);
		json_decref(records[i]);
		records[i] = NULL;
	}
	ck_assert_uint_eq(jfindex_postings(ix), 0);
	jfindex_free(ix);
}
END_TEST

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* 100,000 records; a filter matching 1 %: figures, no assertion on time. */
START_TEST(timing_one_percent)
{
	const uint32_t n = TIMING_RECORDS;
	struct jfindex *ix = jfindex_new();
	json_t **recs = calloc(n, sizeof(*recs)), *f;
	double t0, t1, best = 1e18, sum = 0;
	uint32_t *ids;
	size_t got;
	char text[200];

	for (uint32_t i = 0; i < n; i++) {
		snprintf(text, sizeof(text),
			 "{\"category\": \"c%u\", \"source\": \"s%u\","
			 " \"year\": %u, \"tags\": [\"t%u\", \"t%u\"]}",
			 i % 100, i % 7, 2000 + i % 25, i % 13, i % 17);
		recs[i] = J(text);
		ck_assert_int_eq(jfindex_add(ix, i, recs[i]), 0);
	}
	f = J("{\"category\": \"c42\"}");
	for (int rep = 0; rep < 50; rep++) {
		t0 = now_us();
		ck_assert_int_eq(jfindex_match(ix, f, NULL, NULL, &ids, &got),
				 0);
		t1 = now_us();
		ck_assert_uint_eq(got, n / 100);
		free(ids);
		sum += t1 - t0;
		best = t1 - t0 < best ? t1 - t0 : best;
	}
	printf("# jsonfilter: 1%% of %u records: best %.1f us, mean %.1f us;"
	       " %zu postings, %zu bytes\n",
	       n, best, sum / 50, jfindex_postings(ix), jfindex_memory(ix));
	json_decref(f);
	/* Two leaves: 1 % and ~7 % intersected. */
	f = J("{\"category\": \"c42\", \"tags\": [\"t3\"]}");
	ck_assert_int_eq(jfindex_match(ix, f, NULL, NULL, &ids, &got), 0);
	for (size_t i = 0; i < got; i++)
		ck_assert(jsonb_contains(recs[ids[i]], f));
	free(ids);
	json_decref(f);
	for (uint32_t i = 0; i < n; i++) {
		jfindex_remove(ix, i, recs[i]);
		json_decref(recs[i]);
	}
	ck_assert_uint_eq(jfindex_postings(ix), 0);
	free(recs);
	jfindex_free(ix);
}
END_TEST

static Suite *jsonfilter_suite(void)
{
	Suite *s = suite_create("jsonfilter");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, postgres_documentation);
	tcase_add_test(tc, types_and_structure);
	tcase_add_test(tc, limits);
	tcase_add_test(tc, index_against_model);
	tcase_add_test(tc, timing_one_percent);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(jsonfilter_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
