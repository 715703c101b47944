/*
 * Fuzz harness of the local records' payload parsers (daemon/kinds/
 * localrec.c): the first byte picks the parser (0 session, 1 message,
 * 2 document, 3 embedding, 4 a conversation log payload, 5 a document log
 * payload, 6 a packed embedding as a request carries it), the rest is
 * its input. Invariants: nothing is read past the
 * input (ASan); a payload accepted re-encodes to the very same bytes (the
 * parsers are the exact inverses of the encoders), with every field
 * within its limits; a log payload accepted hands over operations that
 * rebuild it byte for byte, and one refused hands over none; a packed
 * embedding accepted is canonical base64url of as many finite float32
 * values, not all zero, as the tree's dimension, and one refused says why.
 */
#include "fuzz.h"

#include "localrec.h"
#include "protocol/base64url.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static char msg[256];

static void same(const uint8_t *a, const uint8_t *b, size_t n)
{
	FUZZ_CHECK(memcmp(a, b, n) == 0);
}

static void session(const uint8_t *p, size_t len)
{
	struct rec_session r;
	uint8_t *back;

	if (rec_session_decode(p, len, &r, msg, sizeof(msg)) != 0)
		return;
	FUZZ_CHECK(r.user_len >= 1 && r.user_len <= REC_USER_ID_MAX);
	FUZZ_CHECK(r.meta_len >= 2 && r.meta_len <= REC_META_MAX);
	FUZZ_CHECK(rec_session_size(&r) == len);
	back = malloc(len);
	rec_session_encode(&r, back);
	same(back, p, len);
	free(back);
}

static void message(const uint8_t *p, size_t len)
{
	struct rec_message r;
	uint8_t *back;

	if (rec_message_decode(p, len, &r, msg, sizeof(msg)) != 0)
		return;
	FUZZ_CHECK(r.role >= 0 && r.role < ROLE_COUNT);
	FUZZ_CHECK(r.content_len >= 1 && r.content_len <= REC_CONTENT_MAX);
	FUZZ_CHECK(rec_message_size(&r) == len);
	back = malloc(len);
	rec_message_encode(&r, back);
	same(back, p, len);
	free(back);
}

static void document(const uint8_t *p, size_t len)
{
	struct rec_document r;
	uint8_t *back;

	if (rec_document_decode(p, len, &r, msg, sizeof(msg)) != 0)
		return;
	FUZZ_CHECK(r.updated_at >= r.created_at);
	FUZZ_CHECK(rec_document_size(&r) == len);
	back = malloc(len);
	rec_document_encode(&r, back);
	same(back, p, len);
	free(back);
}

static void embedding(const uint8_t *p, size_t len)
{
	struct rec_embedding e;
	uint8_t *back;
	float *v;

	if (rec_embedding_decode(p, len, &e, msg, sizeof(msg)) != 0)
		return;
	FUZZ_CHECK(rec_embedding_size(e.dim) == len);
	v = malloc(e.dim * sizeof(*v));
	rec_embedding_values(&e, v);
	back = malloc(len);
	rec_embedding_encode(e.dim, v, back);
	same(back, p, len);
	free(back);
	free(v);
}

/* The operations handed over, rebuilt into a payload. */
struct rebuild {
	struct buf b;
	unsigned n_stores;
	int ops;
};

static int rebuild_cb(void *ctx, const struct logop *op)
{
	struct rebuild *r = ctx;
	uint8_t *p;

	FUZZ_CHECK(op->store < r->n_stores);
	FUZZ_CHECK(op->op == LOGOP_PUT || op->op == LOGOP_DEL);
	if (op->op == LOGOP_DEL) {
		FUZZ_CHECK(op->payload == NULL && op->len == 0);
		FUZZ_CHECK(logpay_del(&r->b, op->store, op->key));
	} else {
		p = logpay_put(&r->b, op->store, op->key, op->len);
		FUZZ_CHECK(p != NULL);
		memcpy(p, op->payload, op->len);
	}
	r->ops++;
	return 0;
}

static void log_payload(const uint8_t *p, size_t len, uint8_t tag,
			unsigned n_stores)
{
	struct rebuild r = {{0}, n_stores, 0};
	int ret;

	FUZZ_CHECK(logpay_begin(&r.b, tag));
	ret = logpay_parse(p, len, tag, n_stores, rebuild_cb, &r, msg,
			   sizeof(msg));
	if (ret != 0) {
		FUZZ_CHECK(ret == -EBADMSG);
		FUZZ_CHECK(r.ops == 0); /* refused whole */
	} else {
		FUZZ_CHECK(r.b.len == len);
		FUZZ_CHECK(logpay_count(&r.b) == (uint32_t)r.ops);
		same((const uint8_t *)r.b.data, p, len);
	}
	buf_done(&r.b);
}

/* The dimension: the input's second byte, so that both the right and
 * wrong counts are reached; the rest is the string. */
static void packed(const uint8_t *p, size_t len)
{
	uint32_t dim;
	float *out;
	json_t *v;
	char *back;
	size_t text_len;
	bool nonzero = false;

	if (len < 1)
		return;
	dim = 1 + p[0] % 32;
	text_len = len - 1;
	v = json_stringn_nocheck((const char *)p + 1, text_len);
	out = malloc(dim * sizeof(*out));
	back = malloc(base64url_len(dim * sizeof(*out)) + 1);
	FUZZ_CHECK(v && out && back);
	msg[0] = '\0';
	if (rec_embedding_from_json(v, dim, "e", out, msg, sizeof(msg)) == 0) {
		uint8_t le[4 * 32];

		for (uint32_t i = 0; i < dim; i++) {
			uint32_t u;

			FUZZ_CHECK(isfinite(out[i]));
			nonzero |= out[i] != 0;
			memcpy(&u, &out[i], sizeof(u));
			for (int b = 0; b < 4; b++)
				le[4 * i + (uint32_t)b] =
					(uint8_t)(u >> (8 * b));
		}
		FUZZ_CHECK(nonzero);
		base64url_encode(le, 4 * dim, back);
		while (text_len > 0 && p[text_len] == '=')
			text_len--;
		FUZZ_CHECK(strlen(back) == text_len &&
			   memcmp(back, p + 1, text_len) == 0);
	} else {
		FUZZ_CHECK(msg[0] != '\0');
	}
	free(back);
	free(out);
	json_decref(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *p;

	if (size < 1)
		return 0;
	/* A copy of exactly the input, so ASan sees any read past it. */
	p = malloc(size - 1 ? size - 1 : 1);
	memcpy(p, data + 1, size - 1);
	switch (data[0] % 7) {
	case 0:
		session(p, size - 1);
		break;
	case 1:
		message(p, size - 1);
		break;
	case 2:
		document(p, size - 1);
		break;
	case 3:
		embedding(p, size - 1);
		break;
	case 4:
		log_payload(p, size - 1, 'C', 1);
		break;
	case 6:
		packed(p, size - 1);
		break;
	default:
		log_payload(p, size - 1, 'D', 2);
	}
	free(p);
	return 0;
}
