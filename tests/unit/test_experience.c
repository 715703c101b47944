/*
 * Unit tests of protocol/experience.c: the record's rules, its line and
 * tombstone forms, the shard line parser, and the shard names (agent
 * segments, dates).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/errors.h"
#include "protocol/experience.h"
#include "run_suite.h"

static const uint8_t rnd[EXPID_RANDOM_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8};

/* A record made of the given texts, agent and tags (copies). */
static void make(struct experience *e, const char *agent, const char *ctx,
		 const char *const *tags, size_t n_tags)
{
	memset(e, 0, sizeof(*e));
	e->timestamp = 1736177400123456;
	e->id = expid_make(e->timestamp, rnd);
	e->agent_id = strdup(agent);
	e->text[EXP_CONTEXT] = strdup(ctx);
	e->text[EXP_ACTION] = strdup("ran the tests");
	e->text[EXP_OUTCOME] = strdup("two failed");
	for (int f = 0; f < EXP_NFIELDS; f++)
		e->text_len[f] = strlen(e->text[f]);
	e->importance = 7;
	e->tags = n_tags ? calloc(n_tags, sizeof(char *)) : NULL;
	for (size_t i = 0; i < n_tags; i++)
		e->tags[i] = strdup(tags[i]);
	e->n_tags = n_tags;
	e->metadata = json_pack("{s:i}", "files", 142);
}

/* The line form: compact, members in record order, UTF-8 as is. */
START_TEST(test_dump_line)
{
	static const char *const tags[] = {"analysis", "ünïcode"};
	struct experience e;
	size_t len;
	char *line;

	make(&e, "goal_seeker_1", "User asked \"why\"\n", tags, 2);
	line = exp_dump(&e, 1, &len);
	ck_assert_ptr_nonnull(line);
	ck_assert_str_eq(
		line + 1,
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\","
		"\"agent_id\":\"goal_seeker_1\",\"context\":\"User asked "
		"\\\"why\\\"\\n\",\"action\":\"ran the tests\",\"outcome\":"
		"\"two failed\",\"timestamp\":\"2025-01-06T15:30:00.123456Z\","
		"\"importance\":7,\"tags\":[\"analysis\",\"ünïcode\"],"
		"\"metadata\":{\"files\":142}}");
	ck_assert_uint_eq(len, strlen(line + 1));
	ck_assert_ptr_null(memchr(line + 1, '\n', len));
	free(line);
	experience_done(&e);
}
END_TEST

/* The line is byte for byte what jansson's compact dump of the record
 * gives (lines written before exp_dump was written by hand, and other
 * clones' lines, stay equal to ours): every escape, a control character
 * in each text, no tags, metadata with nesting. */
START_TEST(test_dump_as_jansson)
{
	static const char *const texts[] = {
		"q\"b\\s/\b\f\n\r\t\x01\x1f\x7f \xc3\xa9 \xe2\x80\xa8 "
		"\xf0\x9f\x98\x80",
		"\x0b\x0e"};
	static const char *const tags[] = {"a\"b", "\xc3\xa9"};
	char id[EXPID_LEN + 1], ts[VMEM_TIMESTAMP_LEN + 1];

	for (size_t t = 0; t < 2; t++) {
		struct experience e;
		json_t *tagv = json_array(), *want;
		char *line, *dumped;
		size_t len;

		make(&e, "a b/é", texts[t], tags, t ? 0 : 2);
		json_decref(e.metadata);
		e.metadata = json_pack("{s:[i,f,n,b],s:{s:s}}", "k", -3, 0.5, 1,
				       "n\x01", "x", "\x02");
		for (size_t i = 0; i < e.n_tags; i++)
			json_array_append_new(tagv, json_string(e.tags[i]));
		expid_format(&e.id, id);
		timestamp_format(e.timestamp, ts);
		want = json_pack(
			"{s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:o,s:O}", "id", id,
			"agent_id", e.agent_id, "context", e.text[EXP_CONTEXT],
			"action", e.text[EXP_ACTION], "outcome",
			e.text[EXP_OUTCOME], "timestamp", ts, "importance",
			e.importance, "tags", tagv, "metadata", e.metadata);
		ck_assert_ptr_nonnull(want);
		dumped = json_dumps(want, JSON_COMPACT);
		line = exp_dump(&e, 3, &len);
		ck_assert_ptr_nonnull(line);
		ck_assert_uint_eq(len, strlen(dumped));
		ck_assert_str_eq(line + 3, dumped);
		free(line);
		free(dumped);
		json_decref(want);
		experience_done(&e);
	}
}
END_TEST

/* A dumped line parses back to the same record. */
START_TEST(test_parse_round_trip)
{
	static const char *const tags[] = {"x", "y", "z"};
	struct experience e;
	struct exp_line l;
	char msg[VMEM_ERRMSG_LEN], *line;
	size_t len;

	make(&e, "agent with spaces/and slash", "ctx", tags, 3);
	line = exp_dump(&e, 0, &len);
	ck_assert_int_eq(exp_parse_line(line, len, &l, msg), 0);
	ck_assert(!l.is_tombstone);
	ck_assert_int_eq(expid_cmp(&l.rec.id, &e.id), 0);
	ck_assert_str_eq(l.rec.agent_id, e.agent_id);
	for (int f = 0; f < EXP_NFIELDS; f++)
		ck_assert_str_eq(l.rec.text[f], e.text[f]);
	ck_assert_int_eq(l.rec.timestamp, e.timestamp);
	ck_assert_int_eq(l.rec.importance, 7);
	ck_assert_uint_eq(l.rec.n_tags, 3);
	ck_assert_str_eq(l.rec.tags[2], "z");
	ck_assert(json_equal(l.rec.metadata, e.metadata));
	exp_line_done(&l);
	/* A CRLF checkout's line too. */
	line = realloc(line, len + 2);
	line[len] = '\r';
	ck_assert_int_eq(exp_parse_line(line, len + 1, &l, msg), 0);
	exp_line_done(&l);
	free(line);
	experience_done(&e);
}
END_TEST

START_TEST(test_tombstone)
{
	struct exp_tombstone t = {0}, *p;
	struct exp_line l;
	char msg[VMEM_ERRMSG_LEN], *line;
	size_t len;

	t.id = expid_make(1736177400123456, rnd);
	t.agent_id = "owner";
	t.deleted_by = "cleaner";
	t.timestamp = 1736177500000000;
	line = exp_dump_tombstone(&t, 0, &len);
	ck_assert_str_eq(line, "{\"deleted\":\"01943c3c-b93b-774b-8102-"
			       "030405060708\",\"agent_id\":\"owner\","
			       "\"timestamp\":\"2025-01-06T15:31:40.000000Z\","
			       "\"deleted_by\":\"cleaner\"}");
	ck_assert_int_eq(exp_parse_line(line, len, &l, msg), 0);
	ck_assert(l.is_tombstone);
	p = &l.tomb;
	ck_assert_int_eq(expid_cmp(&p->id, &t.id), 0);
	ck_assert_str_eq(p->agent_id, "owner");
	ck_assert_str_eq(p->deleted_by, "cleaner");
	ck_assert_int_eq(p->timestamp, t.timestamp);
	exp_line_done(&l);
	free(line);
}
END_TEST

/* What a line must not be: each refused with a reason. */
START_TEST(test_parse_refusals)
{
	static const char *const bad[] = {
		"",
		"not json",
		"[1,2]",
		"{\"id\":\"x\"}",
		/* unknown member */
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"a\",\"context\":\"c\",\"action\":\"a\",\"outcome\":\"o\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"5,\"tags\":[],\"metadata\":{},\"extra\":1}",
		/* importance 11 */
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"a\",\"context\":\"c\",\"action\":\"a\",\"outcome\":\"o\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"11,\"tags\":[],\"metadata\":{}}",
		/* importance 5.0 */
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"a\",\"context\":\"c\",\"action\":\"a\",\"outcome\":\"o\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"5.0,\"tags\":[],\"metadata\":{}}",
		/* empty outcome */
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"a\",\"context\":\"c\",\"action\":\"a\",\"outcome\":\"\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"5,\"tags\":[],\"metadata\":{}}",
		/* repeated tag */
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"a\",\"context\":\"c\",\"action\":\"a\",\"outcome\":\"o\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"5,\"tags\":[\"t\",\"t\"],\"metadata\":{}}",
		/* metadata not an object */
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"a\",\"context\":\"c\",\"action\":\"a\",\"outcome\":\"o\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"5,\"tags\":[],\"metadata\":[]}",
		/* a version 4 id */
		"{\"id\":\"01943c3c-b93b-474b-8102-030405060708\",\"agent_id\":"
		"\"a\",\"context\":\"c\",\"action\":\"a\",\"outcome\":\"o\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"5,\"tags\":[],\"metadata\":{}}",
		/* a timestamp not ours */
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"a\",\"context\":\"c\",\"action\":\"a\",\"outcome\":\"o\","
		"\"timestamp\":\"yesterday\",\"importance\":5,\"tags\":[],"
		"\"metadata\":{}}",
		/* duplicate key */
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"id\":"
		"\"x\"}",
		/* tombstone without deleted_by */
		"{\"deleted\":\"01943c3c-b93b-774b-8102-030405060708\","
		"\"agent_id\":\"a\",\"timestamp\":\"2025-01-06T15:30:00.123456Z"
		"\"}",
		/* a conflict marker git left */
		"<<<<<<< HEAD",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct exp_line l;
		char msg[VMEM_ERRMSG_LEN] = "";

		ck_assert_msg(exp_parse_line(bad[i], strlen(bad[i]), &l, msg) ==
				      RPC_INVALID_PARAMS,
			      "accepted line %zu", i);
		ck_assert_msg(msg[0] != '\0', "no reason for line %zu", i);
		exp_line_done(&l);
	}
}
END_TEST

START_TEST(test_field_rules)
{
	char msg[VMEM_ERRMSG_LEN], **tags;
	char big[EXP_TEXT_MAX + 2];
	size_t n;
	int imp;
	json_t *v;

	ck_assert_int_eq(exp_text_check(EXP_CONTEXT, "", 0, true, msg),
			 RPC_INVALID_PARAMS);
	ck_assert_ptr_nonnull(strstr(msg, "context"));
	ck_assert_int_eq(exp_text_check(EXP_ACTION, " \t\n", 3, true, msg),
			 RPC_INVALID_PARAMS);
	ck_assert_ptr_nonnull(strstr(msg, "action"));
	ck_assert_int_eq(exp_text_check(EXP_ACTION, " \t\n", 3, false, msg), 0);
	memset(big, 'a', sizeof(big));
	ck_assert_int_eq(
		exp_text_check(EXP_OUTCOME, big, EXP_TEXT_MAX, true, msg), 0);
	ck_assert_int_eq(
		exp_text_check(EXP_OUTCOME, big, EXP_TEXT_MAX + 1, true, msg),
		RPC_INVALID_PARAMS);
	ck_assert_int_eq(exp_text_check(EXP_OUTCOME, "\xff", 1, true, msg),
			 RPC_INVALID_PARAMS);

	for (int i = -1; i <= 12; i++) {
		v = json_integer(i);
		ck_assert_int_eq(exp_importance_from_json(v, &imp, msg),
				 i >= 1 && i <= 10 ? 0 : RPC_INVALID_PARAMS);
		json_decref(v);
	}
	v = json_real(5.0);
	ck_assert_int_eq(exp_importance_from_json(v, &imp, msg),
			 RPC_INVALID_PARAMS);
	json_decref(v);
	v = json_true();
	ck_assert_int_eq(exp_importance_from_json(v, &imp, msg),
			 RPC_INVALID_PARAMS);
	json_decref(v);

	/* Tags keep their order; 32 at most, distinct, 1..64 bytes, no
	 * control characters. */
	v = json_pack("[s,s,s]", "b", "a", "c");
	ck_assert_int_eq(exp_tags_from_json(v, &tags, &n, msg), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_str_eq(tags[0], "b");
	ck_assert_str_eq(tags[1], "a");
	for (size_t i = 0; i < n; i++)
		free(tags[i]);
	free(tags);
	json_decref(v);
	v = json_array();
	for (int i = 0; i < 33; i++) {
		char t[8];

		snprintf(t, sizeof(t), "t%d", i);
		json_array_append_new(v, json_string(t));
	}
	ck_assert_int_eq(exp_tags_from_json(v, &tags, &n, msg),
			 RPC_INVALID_PARAMS);
	json_array_remove(v, 32);
	ck_assert_int_eq(exp_tags_from_json(v, &tags, &n, msg), 0);
	for (size_t i = 0; i < n; i++)
		free(tags[i]);
	free(tags);
	json_decref(v);
	{
		static const char *const refused[] = {
			"[\"\"]",
			"[1]",
			"[\"a\\u0007\"]",
			"[\"a\\u0085\"]",
			"[\"dup\",\"dup\"]",
			"{}",
			"\"t\"",
			"[\"01234567890123456789012345678901234567890123456789"
			"0123456789012345\"]"};

		for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]);
		     i++) {
			v = json_loads(refused[i], JSON_DECODE_ANY, NULL);
			ck_assert_ptr_nonnull(v);
			ck_assert_msg(exp_tags_from_json(v, &tags, &n, msg) ==
					      RPC_INVALID_PARAMS,
				      "accepted tags %s", refused[i]);
			json_decref(v);
		}
	}

	v = json_object();
	ck_assert_int_eq(exp_metadata_check(v, msg), 0);
	big[EXP_TEXT_MAX + 1] = '\0'; /* a string of 16,401 bytes below */
	json_object_set_new(v, "k", json_string(big + EXP_TEXT_MAX - 16400));
	ck_assert_int_eq(exp_metadata_check(v, msg), RPC_INVALID_PARAMS);
	json_decref(v);
}
END_TEST

/* Segments: plain ids stay, others are '~' + base64url; every one
 * decodes back, and only the canonical segment decodes. */
START_TEST(test_segments)
{
	static const char *const ids[] = {"goal_seeker_1",
					  "claude-code-01",
					  "a.b",
					  ".hidden",
					  "..",
					  "with space",
					  "a/b",
					  "~tilde",
					  "é",
					  "x",
					  "Upper",
					  "a%20b",
					  "-dash"};
	static const bool plain[] = {true,  true,  true,  false, false,
				     false, false, false, false, true,
				     true,  false, true};
	char seg[EXP_SEGMENT_MAX + 1], back[VMEM_AGENT_ID_MAX + 1];
	size_t len;

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		int n = exp_segment(ids[i], strlen(ids[i]), seg, sizeof(seg));

		ck_assert_int_gt(n, 0);
		ck_assert_msg((strcmp(seg, ids[i]) == 0) == plain[i],
			      "%s -> %s", ids[i], seg);
		ck_assert(plain[i] || seg[0] == '~');
		ck_assert_ptr_null(strchr(seg, '/'));
		ck_assert_int_eq(
			exp_segment_decode(seg, back, sizeof(back), &len), 0);
		ck_assert_uint_eq(len, strlen(ids[i]));
		ck_assert_str_eq(back, ids[i]);
	}
	ck_assert_int_eq(exp_segment("a/b", 3, seg, sizeof(seg)), 5);
	ck_assert_str_eq(seg, "~YS9i");
	/* The longest id fits a file name. */
	{
		char longest[VMEM_AGENT_ID_MAX + 1];

		memset(longest, '/', VMEM_AGENT_ID_MAX);
		longest[VMEM_AGENT_ID_MAX] = '\0';
		ck_assert_int_le(exp_segment(longest, VMEM_AGENT_ID_MAX, seg,
					     sizeof(seg)),
				 EXP_SEGMENT_MAX);
		ck_assert_int_eq(
			exp_segment_decode(seg, back, sizeof(back), &len), 0);
		ck_assert_str_eq(back, longest);
	}
	/* Not segments: a plain id written as base64, bad characters,
	 * trailing bits, control characters inside. */
	ck_assert_int_eq(exp_segment_decode("~eA", back, sizeof(back), &len),
			 -1); /* "x" is plain */
	ck_assert_int_eq(exp_segment_decode("~w6l", back, sizeof(back), &len),
			 -1);
	ck_assert_int_eq(exp_segment_decode("~YS+i", back, sizeof(back), &len),
			 -1);
	ck_assert_int_eq(exp_segment_decode("~Bw", back, sizeof(back), &len),
			 -1); /* "\a" */
	ck_assert_int_eq(exp_segment_decode("~", back, sizeof(back), &len), -1);
	ck_assert_int_eq(exp_segment_decode("", back, sizeof(back), &len), -1);
	ck_assert_int_eq(exp_segment_decode(".x", back, sizeof(back), &len),
			 -1);
	ck_assert_int_eq(exp_segment_decode("a b", back, sizeof(back), &len),
			 -1);
	ck_assert_int_eq(exp_segment("", 0, seg, sizeof(seg)), -1);
	ck_assert_int_eq(exp_segment("a\nb", 3, seg, sizeof(seg)), -1);
}
END_TEST

START_TEST(test_shard_names)
{
	char path[EXP_SHARD_PATH_MAX];

	ck_assert_int_gt(exp_shard_path("goal_seeker_1", 13, 1736177400123456,
					1, path, sizeof(path)),
			 0);
	ck_assert_str_eq(path, "goal_seeker_1/2025-01-06.jsonl");
	/* The UTC day: a microsecond before midnight, and at it. */
	exp_shard_path("a b", 3, 1735689599999999, 1, path, sizeof(path));
	ck_assert_str_eq(path, "~YSBi/2024-12-31.jsonl");
	exp_shard_path("a b", 3, 1735689600000000, 1, path, sizeof(path));
	ck_assert_str_eq(path, "~YSBi/2025-01-01.jsonl");
	ck_assert_int_eq(exp_shard_path("a", 1, 0, 1, path, 8), -1);
	/* The next shards of a day. */
	exp_shard_path("a", 1, 1735689600000000, 2, path, sizeof(path));
	ck_assert_str_eq(path, "a/2025-01-01.2.jsonl");
	exp_shard_path("a", 1, 1735689600000000, EXP_SHARD_SEQ_MAX, path,
		       sizeof(path));
	ck_assert_str_eq(path, "a/2025-01-01.99999999.jsonl");
	ck_assert_int_eq(exp_shard_path("a", 1, 0, 0, path, sizeof(path)), -1);
	ck_assert_int_eq(exp_shard_path("a", 1, 0, EXP_SHARD_SEQ_MAX + 1u, path,
					sizeof(path)),
			 -1);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.jsonl"), 1);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.2.jsonl"), 2);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.99999999.jsonl"),
			  EXP_SHARD_SEQ_MAX);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.1.jsonl"), 0);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.02.jsonl"), 0);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.0.jsonl"), 0);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06..jsonl"), 0);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.123456789.jsonl"), 0);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.2x.jsonl"), 0);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.-2.jsonl"), 0);
	ck_assert_uint_eq(exp_shard_name_seq("2025-02-29.2.jsonl"), 0);
	ck_assert_uint_eq(exp_shard_name_seq("2025-01-06.2.json"), 0);

	ck_assert(exp_shard_name_valid("2025-01-06.jsonl"));
	ck_assert(exp_shard_name_valid("2024-02-29.jsonl"));
	ck_assert(!exp_shard_name_valid("2025-02-29.jsonl"));
	ck_assert(!exp_shard_name_valid("2025-13-01.jsonl"));
	ck_assert(!exp_shard_name_valid("2025-01-32.jsonl"));
	ck_assert(!exp_shard_name_valid("2025-01-06.json"));
	ck_assert(!exp_shard_name_valid("2025-1-06.jsonl"));
	ck_assert(!exp_shard_name_valid(".tmp-1-2025-01-06.jsonl"));
	ck_assert(!exp_shard_name_valid("2025-01-06.jsonl~"));
}
END_TEST

static Suite *experience_suite(void)
{
	Suite *s = suite_create("experience");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_dump_line);
	tcase_add_test(tc, test_dump_as_jansson);
	tcase_add_test(tc, test_parse_round_trip);
	tcase_add_test(tc, test_tombstone);
	tcase_add_test(tc, test_parse_refusals);
	tcase_add_test(tc, test_field_rules);
	tcase_add_test(tc, test_segments);
	tcase_add_test(tc, test_shard_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(experience_suite());
}
