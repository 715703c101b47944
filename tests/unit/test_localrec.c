/*
 * Unit tests of daemon/kinds/localrec.c: the checks of what clients send
 * (user ids, roles, content, metadata limits, embeddings naming both
 * numbers), the record payloads (round trips, and every malformed form
 * refused without reading past the bytes given), and the log payloads
 * (built, walked, and refused whole when any operation is bad).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "localrec.h"
#include "protocol/base64url.h"
#include "run_suite.h"

static char msg[256];

START_TEST(user_ids)
{
	char long_id[300];

	ck_assert_int_eq(rec_user_id_check("ada", 3, msg, sizeof(msg)), 0);
	ck_assert_int_eq(
		rec_user_id_check("\xc3\xa9t\xc3\xa9", 5, msg, sizeof(msg)), 0);
	ck_assert_int_eq(rec_user_id_check("", 0, msg, sizeof(msg)), -EINVAL);
	memset(long_id, 'u', sizeof(long_id));
	ck_assert_int_eq(rec_user_id_check(long_id, 255, msg, sizeof(msg)), 0);
	ck_assert_int_eq(rec_user_id_check(long_id, 256, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "256"));
	ck_assert_int_eq(rec_user_id_check("a\nb", 3, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_int_eq(rec_user_id_check("a\x7f", 2, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_int_eq(rec_user_id_check("a\xc2\x85", 3, msg, sizeof(msg)),
			 -EINVAL); /* C1 */
	ck_assert_int_eq(rec_user_id_check("a\xff", 2, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_int_eq(rec_user_id_check("a\0b", 3, msg, sizeof(msg)),
			 -EINVAL);
}
END_TEST

START_TEST(roles_and_content)
{
	ck_assert_int_eq(rec_role_parse("user", 4), ROLE_USER);
	ck_assert_int_eq(rec_role_parse("assistant", 9), ROLE_ASSISTANT);
	ck_assert_int_eq(rec_role_parse("system", 6), ROLE_SYSTEM);
	ck_assert_int_eq(rec_role_parse("User", 4), -1);
	ck_assert_int_eq(rec_role_parse("use", 3), -1);
	ck_assert_int_eq(rec_role_parse("users", 5), -1);
	ck_assert_str_eq(rec_role_name(ROLE_SYSTEM), "system");
	ck_assert_str_eq(rec_role_name(7), "?");
	ck_assert_int_eq(rec_content_check("content", 1, msg, sizeof(msg)), 0);
	ck_assert_int_eq(rec_content_check("content", 0, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_int_eq(
		rec_content_check("content", REC_CONTENT_MAX, msg, sizeof(msg)),
		0);
	ck_assert_int_eq(rec_content_check("content", REC_CONTENT_MAX + 1, msg,
					   sizeof(msg)),
			 -EINVAL);
}
END_TEST

static json_t *nested(int depth)
{
	json_t *v = json_integer(1);

	while (depth-- > 0)
		v = json_pack("{s:o}", "k", v);
	return v;
}

START_TEST(metadata)
{
	json_t *v;
	char *t;
	size_t len;

	ck_assert_int_eq(rec_meta_text(NULL, &t, &len, msg, sizeof(msg)), 0);
	ck_assert_str_eq(t, "{}");
	ck_assert_uint_eq(len, 2);
	free(t);
	v = json_null();
	ck_assert_int_eq(rec_meta_text(v, &t, &len, msg, sizeof(msg)), 0);
	ck_assert_str_eq(t, "{}");
	free(t);
	v = json_pack("{s:s,s:[i,i],s:{s:b}}", "b", "x\"y", "a", 1, 2, "c", "d",
		      1);
	ck_assert_int_eq(rec_meta_text(v, &t, &len, msg, sizeof(msg)), 0);
	/* Compact, the caller's key order. */
	ck_assert_str_eq(t,
			 "{\"b\":\"x\\\"y\",\"a\":[1,2],\"c\":{\"d\":true}}");
	ck_assert_uint_eq(len, strlen(t));
	free(t);
	json_decref(v);
	v = json_pack("[i]", 1);
	ck_assert_int_eq(rec_meta_text(v, &t, &len, msg, sizeof(msg)), -EINVAL);
	ck_assert_ptr_null(t);
	json_decref(v);
	v = nested(REC_META_DEPTH - 1);
	ck_assert_int_eq(rec_meta_text(v, &t, &len, msg, sizeof(msg)), 0);
	free(t);
	json_decref(v);
	v = nested(REC_META_DEPTH);
	ck_assert_int_eq(rec_meta_text(v, &t, &len, msg, sizeof(msg)), -EINVAL);
	json_decref(v);
	v = json_object();
	for (int i = 0; i < REC_META_NODES; i++) {
		char k[16];

		snprintf(k, sizeof(k), "k%d", i);
		json_object_set_new(v, k, json_integer(i));
	}
	/* The object itself counts: one value over. */
	ck_assert_int_eq(rec_meta_text(v, &t, &len, msg, sizeof(msg)), -EINVAL);
	json_object_del(v, "k0");
	ck_assert_int_eq(rec_meta_text(v, &t, &len, msg, sizeof(msg)), 0);
	free(t);
	json_decref(v);
	v = json_object();
	{
		char *big = malloc(REC_META_MAX);

		memset(big, 'x', REC_META_MAX);
		json_object_set_new(v, "big", json_stringn(big, REC_META_MAX));
		free(big);
	}
	ck_assert_int_eq(rec_meta_text(v, &t, &len, msg, sizeof(msg)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "bytes"));
	json_decref(v);
}
END_TEST

/* v (consumed) is the embedding 0.5, -1.25, 3, 0; as one of dimension 5
 * it is refused with both numbers named. */
static void takes_four(json_t *v)
{
	float out[4];

	ck_assert_int_eq(rec_embedding_from_json(v, 4, "embedding", out, msg,
						 sizeof(msg)),
			 0);
	ck_assert(out[0] == 0.5f && out[1] == -1.25f && out[2] == 3.0f &&
		  out[3] == 0.0f);
	ck_assert_int_eq(rec_embedding_from_json(v, 5, "embedding", out, msg,
						 sizeof(msg)),
			 -EINVAL);
	ck_assert_str_eq(msg, "embedding has 4 numbers; this tree's "
			      "embedding_dim is 5");
	json_decref(v);
}

START_TEST(embeddings)
{
	float out[4];
	json_t *v;

	takes_four(json_pack("[f,f,i,f]", 0.5, -1.25, 3, 0.0));
	v = json_pack("[f,f]", 1e39, 1.0);
	ck_assert_int_eq(
		rec_embedding_from_json(v, 2, "q", out, msg, sizeof(msg)),
		-EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "q[0]"));
	json_decref(v);
	v = json_pack("[f,f]", 0.0, -0.0);
	ck_assert_int_eq(
		rec_embedding_from_json(v, 2, "q", out, msg, sizeof(msg)),
		-EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "zeros"));
	json_decref(v);
	v = json_pack("[f,s]", 1.0, "2");
	ck_assert_int_eq(
		rec_embedding_from_json(v, 2, "q", out, msg, sizeof(msg)),
		-EINVAL);
	json_decref(v);
	v = json_pack("{}");
	ck_assert_int_eq(
		rec_embedding_from_json(v, 2, "q", out, msg, sizeof(msg)),
		-EINVAL);
	json_decref(v);
}
END_TEST

/* A packed embedding of dim 2 (the encoding of raw[0..n), or text) is
 * refused with a message that holds why. */
static void packed_refused(const unsigned char *raw, size_t n, const char *text,
			   const char *why)
{
	char enc[64];
	float out[2];
	json_t *v;

	if (raw)
		base64url_encode(raw, n, enc);
	v = json_string(raw ? enc : text);
	ck_assert_int_eq(
		rec_embedding_from_json(v, 2, "q", out, msg, sizeof(msg)),
		-EINVAL);
	ck_assert_msg(strstr(msg, why), "%s: %s", why, msg);
	json_decref(v);
}

/* The packed form: base64url of the float32 values, little-endian, as
 * the Python client sends them. */
START_TEST(embeddings_packed)
{
	/* 0.5, -1.25, 3, 0 as little-endian float32. */
	static const unsigned char le[] = {0, 0, 0,    0x3f, 0, 0, 0xa0, 0xbf,
					   0, 0, 0x40, 0x40, 0, 0, 0,	 0};
	static const unsigned char nan_le[] = {0, 0, 0xc0, 0x7f,
					       0, 0, 0x80, 0x3f};
	static const unsigned char zeros[8] = {0, 0, 0, 0, 0, 0, 0, 0x80};
	char text[64];
	float out[4];
	json_t *v;

	base64url_encode(le, sizeof(le), text);
	takes_four(json_string(text));
	/* Padding is taken. */
	v = json_string("AAAAPwAAoL8AAEBAAAAAAA==");
	ck_assert_int_eq(rec_embedding_from_json(v, 4, "embedding", out, msg,
						 sizeof(msg)),
			 0);
	ck_assert(out[1] == -1.25f);
	json_decref(v);
	/* Not a whole number of float32 values; not base64url (the standard
	 * alphabet's '+' refused); a NaN; all zeros (-0 included). */
	packed_refused(le, 6, NULL, "6 bytes");
	packed_refused(NULL, 0, "AAAAP+AAoL8", "base64url");
	packed_refused(nan_le, sizeof(nan_le), NULL, "q[0]");
	packed_refused(zeros, sizeof(zeros), NULL, "zeros");
}
END_TEST

/* Every proper prefix and every one-byte change of a payload that makes
 * it invalid is refused; none is read past (ASan watches). */
static void prefixes_refused(const uint8_t *p, size_t len,
			     int (*decode)(const uint8_t *, size_t))
{
	for (size_t n = 0; n < len; n++) {
		uint8_t *copy = malloc(n ? n : 1);

		memcpy(copy, p, n);
		ck_assert_int_eq(decode(copy, n), -EBADMSG);
		free(copy);
	}
}

static int dec_session(const uint8_t *p, size_t len)
{
	struct rec_session r;

	return rec_session_decode(p, len, &r, msg, sizeof(msg));
}

static int dec_message(const uint8_t *p, size_t len)
{
	struct rec_message r;

	return rec_message_decode(p, len, &r, msg, sizeof(msg));
}

static int dec_document(const uint8_t *p, size_t len)
{
	struct rec_document r;

	return rec_document_decode(p, len, &r, msg, sizeof(msg));
}

static int dec_embedding(const uint8_t *p, size_t len)
{
	struct rec_embedding r;

	return rec_embedding_decode(p, len, &r, msg, sizeof(msg));
}

START_TEST(session_payload)
{
	struct rec_session in = {"ada", 3, 1767225600123456, "{\"a\":1}", 7};
	struct rec_session out;
	size_t n = rec_session_size(&in);
	uint8_t *p = malloc(n);

	rec_session_encode(&in, p);
	ck_assert_int_eq(rec_session_decode(p, n, &out, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(out.user_len, 3);
	ck_assert(memcmp(out.user_id, "ada", 3) == 0);
	ck_assert(out.created_at == in.created_at);
	ck_assert_uint_eq(out.meta_len, 7);
	ck_assert(memcmp(out.meta, "{\"a\":1}", 7) == 0);
	prefixes_refused(p, n, dec_session);
	p[0] = 'M';
	ck_assert_int_eq(dec_session(p, n), -EBADMSG);
	p[0] = 'S';
	p[1] = 2; /* another format version */
	ck_assert_int_eq(dec_session(p, n), -EBADMSG);
	p[1] = 1;
	p[16] = '\n'; /* a control character in the user id */
	ck_assert_int_eq(dec_session(p, n), -EBADMSG);
	p[16] = 'a';
	p[n - 1] = ']'; /* metadata not an object */
	ck_assert_int_eq(dec_session(p, n), -EBADMSG);
	free(p);
}
END_TEST

START_TEST(message_payload)
{
	struct rec_message in = {.role = ROLE_ASSISTANT,
				 .created_at = 42,
				 .content = "h\xc3\xa9llo",
				 .content_len = 6,
				 .meta = "{}",
				 .meta_len = 2};
	struct rec_message out;
	size_t n;
	uint8_t *p;

	memset(in.session, 0xab, REC_KEY);
	n = rec_message_size(&in);
	p = malloc(n);
	rec_message_encode(&in, p);
	ck_assert_int_eq(rec_message_decode(p, n, &out, msg, sizeof(msg)), 0);
	ck_assert_int_eq(out.role, ROLE_ASSISTANT);
	ck_assert(memcmp(out.session, in.session, REC_KEY) == 0);
	ck_assert(out.created_at == 42);
	ck_assert_uint_eq(out.content_len, 6);
	ck_assert(memcmp(out.content, in.content, 6) == 0);
	prefixes_refused(p, n, dec_message);
	p[2] = ROLE_COUNT;
	ck_assert_int_eq(dec_message(p, n), -EBADMSG);
	p[2] = ROLE_USER;
	p[36] = 0xff; /* content not UTF-8 */
	ck_assert_int_eq(dec_message(p, n), -EBADMSG);
	free(p);
	/* Empty content is no message. */
	in.content_len = 0;
	n = rec_message_size(&in);
	p = malloc(n);
	rec_message_encode(&in, p);
	ck_assert_int_eq(dec_message(p, n), -EBADMSG);
	free(p);
}
END_TEST

START_TEST(document_and_embedding_payloads)
{
	struct rec_document in = {10, 20, "text", 4, "{\"k\":[1]}", 9}, out;
	struct rec_embedding e;
	float v[3] = {1.5f, -2.0f, 0.25f}, back[3];
	size_t n = rec_document_size(&in);
	uint8_t *p = malloc(n);

	rec_document_encode(&in, p);
	ck_assert_int_eq(rec_document_decode(p, n, &out, msg, sizeof(msg)), 0);
	ck_assert(out.created_at == 10 && out.updated_at == 20);
	ck_assert(memcmp(out.content, "text", 4) == 0);
	prefixes_refused(p, n, dec_document);
	free(p);
	in.updated_at = 5; /* updated before created */
	p = malloc(n);
	rec_document_encode(&in, p);
	ck_assert_int_eq(dec_document(p, n), -EBADMSG);
	free(p);
	n = rec_embedding_size(3);
	p = malloc(n);
	rec_embedding_encode(3, v, p);
	ck_assert_int_eq(rec_embedding_decode(p, n, &e, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(e.dim, 3);
	rec_embedding_values(&e, back);
	ck_assert(memcmp(v, back, sizeof(v)) == 0);
	prefixes_refused(p, n, dec_embedding);
	p[4] = 4; /* a dimension the bytes do not hold */
	ck_assert_int_eq(dec_embedding(p, n), -EBADMSG);
	free(p);
}
END_TEST

/* ---- log payloads ---- */

struct seen {
	int n;
	struct logop ops[8];
	int stop_at;
};

static int seen_cb(void *ctx, const struct logop *op)
{
	struct seen *s = ctx;

	if (s->n == s->stop_at)
		return -EINTR;
	s->ops[s->n++] = *op;
	return 0;
}

START_TEST(log_payloads)
{
	struct buf b = {0};
	uint8_t k1[REC_KEY], k2[REC_KEY];
	struct seen s = {.stop_at = -1};
	uint8_t *p;

	memset(k1, 1, REC_KEY);
	memset(k2, 2, REC_KEY);
	ck_assert(logpay_begin(&b, 'C'));
	p = logpay_put(&b, 0, k1, 3);
	ck_assert_ptr_nonnull(p);
	memcpy(p, "abc", 3);
	ck_assert(logpay_del(&b, 1, k2));
	ck_assert_uint_eq(logpay_count(&b), 2);
	ck_assert_int_eq(logpay_parse((uint8_t *)b.data, b.len, 'C', 2, seen_cb,
				      &s, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(s.n, 2);
	ck_assert_int_eq(s.ops[0].op, LOGOP_PUT);
	ck_assert_uint_eq(s.ops[0].store, 0);
	ck_assert(memcmp(s.ops[0].key, k1, REC_KEY) == 0);
	ck_assert_uint_eq(s.ops[0].len, 3);
	ck_assert(memcmp(s.ops[0].payload, "abc", 3) == 0);
	ck_assert_int_eq(s.ops[1].op, LOGOP_DEL);
	ck_assert_uint_eq(s.ops[1].store, 1);
	ck_assert_ptr_null(s.ops[1].payload);
	/* Another kind's tag, a store out of range. */
	s.n = 0;
	ck_assert_int_eq(logpay_parse((uint8_t *)b.data, b.len, 'D', 2, seen_cb,
				      &s, msg, sizeof(msg)),
			 -EBADMSG);
	ck_assert_int_eq(logpay_parse((uint8_t *)b.data, b.len, 'C', 1, seen_cb,
				      &s, msg, sizeof(msg)),
			 -EBADMSG);
	ck_assert_int_eq(s.n, 0); /* refused whole: nothing handed over */
	/* The callback's answer stops the walk and is returned. */
	s.stop_at = 1;
	ck_assert_int_eq(logpay_parse((uint8_t *)b.data, b.len, 'C', 2, seen_cb,
				      &s, msg, sizeof(msg)),
			 -EINTR);
	ck_assert_int_eq(s.n, 1);
	/* Every prefix is refused, and trailing bytes too. */
	for (size_t n = 0; n < b.len; n++) {
		s.n = 0;
		s.stop_at = -1;
		ck_assert_int_eq(logpay_parse((uint8_t *)b.data, n, 'C', 2,
					      seen_cb, &s, msg, sizeof(msg)),
				 -EBADMSG);
		ck_assert_int_eq(s.n, 0);
	}
	ck_assert(buf_append(&b, "x", 1));
	ck_assert_int_eq(logpay_parse((uint8_t *)b.data, b.len, 'C', 2, seen_cb,
				      &s, msg, sizeof(msg)),
			 -EBADMSG);
	b.len--;
	/* A bad operation code in the second operation: none taken. */
	b.data[6 + 22 + 3] = 9;
	s.n = 0;
	ck_assert_int_eq(logpay_parse((uint8_t *)b.data, b.len, 'C', 2, seen_cb,
				      &s, msg, sizeof(msg)),
			 -EBADMSG);
	ck_assert_int_eq(s.n, 0);
	buf_done(&b);
	/* A delete with a length is no delete. */
	ck_assert(logpay_begin(&b, 'C'));
	ck_assert(logpay_del(&b, 0, k1));
	b.data[6 + 18] = 1;
	ck_assert(buf_append(&b, "z", 1));
	ck_assert_int_eq(logpay_parse((uint8_t *)b.data, b.len, 'C', 1, seen_cb,
				      &s, msg, sizeof(msg)),
			 -EBADMSG);
	buf_done(&b);
}
END_TEST

START_TEST(json_strings)
{
	struct buf b = {0};
	const char in[] = "a\"b\\c\n\t\x01\x1f\xc3\xa9\x7f";

	ck_assert(buf_json_str(&b, in, sizeof(in) - 1));
	ck_assert_str_eq(b.data,
			 "\"a\\\"b\\\\c\\n\\t\\u0001\\u001F\xc3\xa9\x7f\"");
	ck_assert_uint_eq(b.len, json_str_len(in, sizeof(in) - 1));
	ck_assert_uint_eq(json_str_len("", 0), 2);
	buf_done(&b);
}
END_TEST

static Suite *localrec_suite(void)
{
	Suite *s = suite_create("localrec");
	TCase *tc = tcase_create("records");

	tcase_add_test(tc, user_ids);
	tcase_add_test(tc, roles_and_content);
	tcase_add_test(tc, metadata);
	tcase_add_test(tc, embeddings);
	tcase_add_test(tc, embeddings_packed);
	tcase_add_test(tc, session_payload);
	tcase_add_test(tc, message_payload);
	tcase_add_test(tc, document_and_embedding_payloads);
	tcase_add_test(tc, log_payloads);
	tcase_add_test(tc, json_strings);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(localrec_suite());
}
