/*
 * Unit tests of daemon/find/expindex.c: retrieve (newest first, tags
 * AND, importance, time window, paging), stats (per agent and overall,
 * kept up by activation and deactivation), find_similar (agent filter,
 * ties by importance then recency), and records arriving out of time
 * order (another clone's, a reload).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expindex.h"
#include "protocol/decision.h"
#include "run_suite.h"

static struct expindex ix;
static const int64_t T0 = 1736177400000000; /* 2025-01-06T15:30:00Z */

static void setup(void)
{
	ck_assert_int_eq(expindex_init(&ix), 0);
}

static void teardown(void)
{
	expindex_done(&ix);
}

/* Add a live record; returns its doc. tags: comma-separated or NULL. */
static uint32_t put(const char *agent, int64_t ts, int importance,
		    const char *tags, const char *ctx)
{
	static unsigned counter;
	struct experience e = {0};
	uint8_t rnd[EXPID_RANDOM_BYTES] = {0};
	char *buf, *t, *save = NULL, list[256];
	size_t len;
	long doc;

	counter++;
	memcpy(rnd, &counter, sizeof(counter));
	e.timestamp = ts;
	e.id = expid_make(ts, rnd);
	e.agent_id = strdup(agent);
	e.text[EXP_CONTEXT] = strdup(ctx);
	e.text[EXP_ACTION] = strdup("act");
	e.text[EXP_OUTCOME] = strdup("out");
	for (int f = 0; f < EXP_NFIELDS; f++)
		e.text_len[f] = strlen(e.text[f]);
	e.importance = importance;
	e.metadata = json_object();
	e.tags = calloc(EXP_TAGS_MAX, sizeof(char *));
	if (tags) {
		snprintf(list, sizeof(list), "%s", tags);
		for (t = strtok_r(list, ",", &save); t;
		     t = strtok_r(NULL, ",", &save))
			e.tags[e.n_tags++] = strdup(t);
	}
	buf = exp_dump(&e, 0, &len);
	ck_assert_ptr_nonnull(buf);
	doc = expindex_intern(&ix, &e.id);
	ck_assert_int_ge(doc, 0);
	ck_assert_int_eq(expindex_set_record(&ix, (uint32_t)doc, buf, len, &e),
			 0);
	free(buf);
	ck_assert_int_eq(expindex_activate(&ix, (uint32_t)doc, &e), 0);
	experience_done(&e);
	return (uint32_t)doc;
}

/* The docs retrieve answers, as "d1 d2 ...". */
static const char *get(const char *agent, size_t limit, int min_imp,
		       const char *t1, const char *t2, int64_t since,
		       int64_t until, const struct expid *after)
{
	static char out[512];
	const char *tags[2] = {t1, t2};
	struct exp_filter f = {
		agent, strlen(agent), min_imp, tags, t2 ? 2 : t1 ? 1 : 0,
		since, until,	      after};
	uint32_t docs[64];
	size_t n = expindex_retrieve(&ix, &f, docs, limit), o = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(out + o, sizeof(out) - o, "%sd%u",
				      i ? " " : "", docs[i]);
	return out;
}

#define ALL INT64_MIN, INT64_MAX, NULL

START_TEST(test_retrieve)
{
	put("a", T0 + 1, 5, "x", "c0");	  /* d0 */
	put("a", T0 + 2, 8, "x,y", "c1"); /* d1 */
	put("b", T0 + 3, 5, "x", "c2");	  /* d2 */
	put("a", T0 + 4, 2, "y", "c3");	  /* d3 */
	put("a", T0 + 5, 9, NULL, "c4");  /* d4 */
	ck_assert_str_eq(get("a", 10, 1, NULL, NULL, ALL), "d4 d3 d1 d0");
	ck_assert_str_eq(get("a", 2, 1, NULL, NULL, ALL), "d4 d3");
	ck_assert_str_eq(get("a", 10, 1, "x", NULL, ALL), "d1 d0");
	ck_assert_str_eq(get("a", 10, 1, "y", "x", ALL), "d1");
	ck_assert_str_eq(get("a", 10, 6, NULL, NULL, ALL), "d4 d1");
	ck_assert_str_eq(get("a", 10, 1, NULL, NULL, T0 + 2, T0 + 4, NULL),
			 "d3 d1");
	ck_assert_str_eq(get("b", 10, 1, NULL, NULL, ALL), "d2");
	ck_assert_str_eq(get("nobody", 10, 1, NULL, NULL, ALL), "");
	ck_assert_str_eq(get("a", 10, 1, "nothere", NULL, ALL), "");
	ck_assert_str_eq(get("b", 10, 1, "y", NULL, ALL), "");
	/* Paging: after the last of a page. */
	ck_assert_str_eq(get("a", 10, 1, NULL, NULL, INT64_MIN, INT64_MAX,
			     &ix.docs[3].id),
			 "d1 d0");
	ck_assert_str_eq(get("a", 10, 1, "x", NULL, INT64_MIN, INT64_MAX,
			     &ix.docs[1].id),
			 "d0");
	/* Deleted: gone from every list. */
	expindex_deactivate(&ix, 1);
	ck_assert_str_eq(get("a", 10, 1, NULL, NULL, ALL), "d4 d3 d0");
	ck_assert_str_eq(get("a", 10, 1, "y", NULL, ALL), "d3");
	/* Back (a reload that lost the tombstone): in place again. */
	ck_assert_int_eq(expindex_activate(&ix, 1, NULL), 0);
	ck_assert_str_eq(get("a", 10, 1, "y", NULL, ALL), "d3 d1");
}
END_TEST

/* Another clone's records are older than ours: they sort into place. */
START_TEST(test_out_of_order)
{
	for (int i = 0; i < 50; i++)
		put("a", T0 + 1000 + i, 5, "t", "ours");
	put("a", T0 + 1020, 5, "t", "same time"); /* d50: ties by id */
	put("a", T0 + 500, 5, "t", "older");	  /* d51 */
	put("a", T0 + 5000, 5, "t", "newest");	  /* d52 */
	ck_assert_str_eq(get("a", 3, 1, "t", NULL, ALL), "d52 d49 d48");
	ck_assert_str_eq(
		get("a", 100, 1, NULL, NULL, INT64_MIN, T0 + 999, NULL), "d51");
	{
		const char *all = get("a", 100, 1, "t", NULL, ALL);
		const char *p20 = strstr(all, "d20 "),
			   *p50 = strstr(all, "d50");

		ck_assert_ptr_nonnull(p20);
		ck_assert_ptr_nonnull(p50);
		/* Same timestamp: the larger id (d50's random bits sort
		 * after d20's here) first. */
		ck_assert(expid_cmp(&ix.docs[50].id, &ix.docs[20].id) > 0);
		ck_assert(p50 < p20);
	}
}
END_TEST

START_TEST(test_stats)
{
	struct exp_stats s;

	ck_assert_int_eq(expindex_stats(&ix, NULL, 0, &s), 0);
	ck_assert_uint_eq(s.total, 0);
	exp_stats_done(&s);
	put("a", T0 + 1, 4, "x,y", "c");
	put("a", T0 + 9, 8, "x", "c");
	put("b", T0 + 5, 6, "z", "c");
	ck_assert_int_eq(expindex_stats(&ix, "a", 1, &s), 0);
	ck_assert_uint_eq(s.total, 2);
	ck_assert_uint_eq(s.imp_sum, 12);
	ck_assert_int_eq(s.oldest, T0 + 1);
	ck_assert_int_eq(s.newest, T0 + 9);
	ck_assert_uint_eq(s.n_tags, 2);
	ck_assert_str_eq(s.tags[0].name, "x");
	ck_assert_uint_eq(s.tags[0].count, 2);
	ck_assert_str_eq(s.tags[1].name, "y");
	ck_assert_ptr_null(s.agents);
	exp_stats_done(&s);
	ck_assert_int_eq(expindex_stats(&ix, NULL, 0, &s), 0);
	ck_assert_uint_eq(s.total, 3);
	ck_assert_uint_eq(s.imp_sum, 18);
	ck_assert_int_eq(s.oldest, T0 + 1);
	ck_assert_int_eq(s.newest, T0 + 9);
	ck_assert_uint_eq(s.n_tags, 3);
	ck_assert_uint_eq(s.n_agents, 2);
	ck_assert_str_eq(s.agents[0].name, "a");
	ck_assert_uint_eq(s.agents[0].count, 2);
	exp_stats_done(&s);
	/* Deactivation keeps them exact. */
	expindex_deactivate(&ix, 1);
	ck_assert_int_eq(expindex_stats(&ix, "a", 1, &s), 0);
	ck_assert_uint_eq(s.total, 1);
	ck_assert_uint_eq(s.imp_sum, 4);
	ck_assert_int_eq(s.newest, T0 + 1);
	ck_assert_uint_eq(s.tags[0].count, 1);
	exp_stats_done(&s);
	expindex_deactivate(&ix, 0);
	ck_assert_int_eq(expindex_stats(&ix, "a", 1, &s), 0);
	ck_assert_uint_eq(s.total, 0);
	exp_stats_done(&s);
	ck_assert_int_eq(expindex_stats(&ix, NULL, 0, &s), 0);
	ck_assert_uint_eq(s.n_agents, 1);
	ck_assert_uint_eq(s.n_tags, 1);
	ck_assert_str_eq(s.tags[0].name, "z");
	exp_stats_done(&s);
}
END_TEST

/* The similar records for a text, as "d1 d2 ...". */
static const char *similar(const char *text, const char *agent, int min_imp,
			   size_t limit)
{
	static char out[512];
	struct bm25_query *q;
	struct exp_similar *hits;
	const char *terms[BM25_TERMS_MAX];
	size_t n, n_terms, o = 0;
	char msg[128];

	ck_assert_int_eq(
		bm25_query_parse(text, strlen(text), &q, msg, sizeof(msg)), 0);
	ck_assert_int_eq(expindex_similar(&ix, q, agent,
					  agent ? strlen(agent) : 0, min_imp,
					  limit, &hits, &n, terms, &n_terms),
			 0);
	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(out + o, sizeof(out) - o, "%sd%u",
				      i ? " " : "", hits[i].doc);
	free(hits);
	bm25_query_free(q);
	return out;
}

START_TEST(test_similar)
{
	put("a", T0 + 1, 5, NULL, "deploy the service");  /* d0 */
	put("a", T0 + 2, 9, NULL, "deploy the service");  /* d1 */
	put("b", T0 + 3, 5, NULL, "deploy the service");  /* d2 */
	put("a", T0 + 4, 5, NULL, "rollback the deploy"); /* d3 */
	put("a", T0 + 5, 5, NULL, "unrelated words");	  /* d4 */
	/* Equal scores: importance first, then the newest. */
	ck_assert_str_eq(similar("service", NULL, 1, 10), "d1 d2 d0");
	ck_assert_str_eq(similar("service", "a", 1, 10), "d1 d0");
	ck_assert_str_eq(similar("service", NULL, 6, 10), "d1");
	ck_assert_str_eq(similar("service", "nobody", 1, 10), "");
	ck_assert_str_eq(similar("rollback service", NULL, 1, 1), "d3");
	expindex_deactivate(&ix, 1);
	ck_assert_str_eq(similar("service", NULL, 1, 10), "d2 d0");
}
END_TEST

/* A line kept and given back: the same bytes, and a record that
 * activates and deactivates from them; both_cut: its head and middle
 * are not kept. */
static void kept(const char *line, bool both_cut)
{
	struct exp_line l;
	char msg[VMEM_ERRMSG_LEN], back[4096];
	size_t len = strlen(line);
	const struct exp_doc *d;
	long doc;

	ck_assert_msg(exp_parse_line(line, len, &l, msg) == 0, "%s: %s", msg,
		      line);
	doc = expindex_intern(&ix, &l.rec.id);
	ck_assert_int_ge(doc, 0);
	ck_assert_int_eq(
		expindex_set_record(&ix, (uint32_t)doc, line, len, &l.rec), 0);
	exp_line_done(&l);
	d = &ix.docs[doc];
	ck_assert_uint_eq(expindex_json_len(&ix, (uint32_t)doc), len);
	memset(back, 0, sizeof(back));
	expindex_json(&ix, (uint32_t)doc, back);
	ck_assert_str_eq(back, line);
	if (both_cut)
		ck_assert(d->head_cut && d->mid_at > 0 && d->len + 100 < len);
	/* Activated from its kept bytes (parsed back), searched, dropped. */
	ck_assert_int_eq(expindex_activate(&ix, (uint32_t)doc, NULL), 0);
	ck_assert(d->live);
	expindex_deactivate(&ix, (uint32_t)doc);
	ck_assert(!d->live);
}

/*
 * A record's JSON is kept less its id, agent, timestamp and importance
 * when they read as its fields render them, and comes back byte for
 * byte however the line was written: canonical (both cut), members in
 * another order, spaces, the middle's very bytes inside the metadata,
 * an agent id beyond ASCII, importance 10.
 */
START_TEST(test_json_kept)
{
	char line[2048], id[EXPID_LEN + 1], ts[VMEM_TIMESTAMP_LEN + 1];
	uint8_t rnd[EXPID_RANDOM_BYTES] = {7};

	for (int i = 0; i < 6; i++) {
		struct expid x;

		rnd[1] = (uint8_t)i;
		x = expid_make(T0 + i, rnd);
		expid_format(&x, id);
		timestamp_format(T0 + i, ts);
		switch (i) {
		case 0:
			snprintf(line, sizeof(line),
				 "{\"id\":\"%s\",\"agent_id\":\"agent-07\","
				 "\"context\":\"deploy \\\"it\\\"\","
				 "\"action\":\"a\",\"outcome\":\"o\","
				 "\"timestamp\":\"%s\",\"importance\":10,"
				 "\"tags\":[\"x\",\"y\"],\"metadata\":{}}",
				 id, ts);
			break;
		case 1:
			snprintf(line, sizeof(line),
				 "{\"timestamp\":\"%s\",\"importance\":3,"
				 "\"id\":\"%s\",\"agent_id\":\"agent-07\","
				 "\"context\":\"c\",\"action\":\"a\","
				 "\"outcome\":\"o\",\"tags\":[],"
				 "\"metadata\":{}}",
				 ts, id);
			break;
		case 2:
			snprintf(line, sizeof(line),
				 "{ \"id\": \"%s\", \"agent_id\": \"agent-07\","
				 " \"context\": \"c\", \"action\": \"a\","
				 " \"outcome\": \"o\", \"timestamp\": \"%s\","
				 " \"importance\": 5, \"tags\": [],"
				 " \"metadata\": {} }",
				 id, ts);
			break;
		case 3:
			snprintf(line, sizeof(line),
				 "{\"id\":\"%s\",\"agent_id\":\"agent-07\","
				 "\"context\":\"c\",\"action\":\"a\","
				 "\"outcome\":\"o\",\"metadata\":{\"timestamp\""
				 ":\"%s\",\"importance\":4,\"k\":1},"
				 "\"timestamp\":\"%s\",\"importance\":4,"
				 "\"tags\":[]}",
				 id, ts, ts);
			break;
		case 4:
			snprintf(line, sizeof(line),
				 "{\"id\":\"%s\",\"agent_id\":\"ag\xc3\xa9nt\","
				 "\"context\":\"c\",\"action\":\"a\","
				 "\"outcome\":\"o\",\"timestamp\":\"%s\","
				 "\"importance\":1,\"tags\":[\"t\"],"
				 "\"metadata\":{\"why\":\"no reason at all, "
				 "just a longer line than the others\"}}",
				 id, ts);
			break;
		default: /* the middle at the very end */
			snprintf(line, sizeof(line),
				 "{\"id\":\"%s\",\"agent_id\":\"agent-07\","
				 "\"context\":\"c\",\"action\":\"a\","
				 "\"outcome\":\"o\",\"tags\":[],"
				 "\"metadata\":{},\"timestamp\":\"%s\","
				 "\"importance\":2}",
				 id, ts);
			break;
		}
		kept(line, i == 0 || i == 4);
	}
}
END_TEST

static Suite *expindex_suite(void)
{
	Suite *s = suite_create("expindex");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_retrieve);
	tcase_add_test(tc, test_out_of_order);
	tcase_add_test(tc, test_stats);
	tcase_add_test(tc, test_similar);
	tcase_add_test(tc, test_json_kept);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(expindex_suite());
}
