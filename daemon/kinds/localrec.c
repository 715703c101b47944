/* See localrec.h. */
#include "localrec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "protocol/base64url.h"
#include "protocol/decision.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the record formats assume a little-endian host"
#endif

/* ---- little-endian fields ---- */

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, int64_t v)
{
	memcpy(p, &v, 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static int64_t get64(const uint8_t *p)
{
	int64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* ---- checks ---- */

/* C0, DEL, or C1 (U+0080..U+009F, encoded C2 80..C2 9F) at s[i]. */
static bool control_at(const unsigned char *s, size_t len, size_t i)
{
	return s[i] < 0x20 || s[i] == 0x7f ||
	       (s[i] == 0xc2 && i + 1 < len && s[i + 1] <= 0x9f);
}

int rec_user_id_check(const char *s, size_t len, char *msg, size_t n)
{
	if (len == 0 || len > REC_USER_ID_MAX) {
		errmsg_set(msg, n, "user_id must be 1..%d bytes (got %zu)",
			   REC_USER_ID_MAX, len);
		return -EINVAL;
	}
	if (!utf8_valid(s, len)) {
		errmsg_set(msg, n, "user_id must be UTF-8 without NUL");
		return -EINVAL;
	}
	for (size_t i = 0; i < len; i++)
		if (control_at((const unsigned char *)s, len, i)) {
			errmsg_set(msg, n,
				   "user_id must not contain control "
				   "characters");
			return -EINVAL;
		}
	return 0;
}

static const char *const role_names[ROLE_COUNT] = {
	[ROLE_USER] = "user",
	[ROLE_ASSISTANT] = "assistant",
	[ROLE_SYSTEM] = "system",
};

int rec_role_parse(const char *s, size_t len)
{
	for (int r = 0; r < ROLE_COUNT; r++)
		if (strlen(role_names[r]) == len &&
		    memcmp(role_names[r], s, len) == 0)
			return r;
	return -1;
}

const char *rec_role_name(int role)
{
	return role >= 0 && role < ROLE_COUNT ? role_names[role] : "?";
}

int rec_content_check(const char *what, size_t len, char *msg, size_t n)
{
	if (len == 0) {
		errmsg_set(msg, n, "%s must not be empty", what);
		return -EINVAL;
	}
	if (len > REC_CONTENT_MAX) {
		errmsg_set(msg, n, "%s is %zu bytes, more than %u", what, len,
			   REC_CONTENT_MAX);
		return -EINVAL;
	}
	return 0;
}

/* Count the values of v (itself included) within depth levels; false
 * when it goes deeper or past the limit of values. */
static bool meta_walk(const json_t *v, int depth, size_t *nodes)
{
	const char *key;
	json_t *item;
	size_t i;

	if (++*nodes > REC_META_NODES || depth > REC_META_DEPTH)
		return false;
	if (json_is_object(v)) {
		json_object_foreach((json_t *)v, key, item)
		{
			if (!meta_walk(item, depth + 1, nodes))
				return false;
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, item)
		{
			if (!meta_walk(item, depth + 1, nodes))
				return false;
		}
	}
	return true;
}

int rec_meta_text(const json_t *v, char **text, size_t *len, char *msg,
		  size_t n)
{
	size_t nodes = 0, size;
	char *t;

	*text = NULL;
	*len = 0;
	if (!v || json_is_null(v)) {
		t = strdup("{}");
		if (!t)
			return -ENOMEM;
		*text = t;
		*len = 2;
		return 0;
	}
	if (!json_is_object(v)) {
		errmsg_set(msg, n, "metadata must be an object");
		return -EINVAL;
	}
	if (!meta_walk(v, 1, &nodes)) {
		errmsg_set(msg, n,
			   "metadata is too large: at most %d values nested "
			   "%d deep",
			   REC_META_NODES, REC_META_DEPTH);
		return -EINVAL;
	}
	size = json_dumpb(v, NULL, 0, JSON_COMPACT);
	if (size == 0 || size > REC_META_MAX) {
		errmsg_set(msg, n,
			   "metadata is %zu bytes as JSON, more than %d", size,
			   REC_META_MAX);
		return -EINVAL;
	}
	t = malloc(size + 1);
	if (!t)
		return -ENOMEM;
	if (json_dumpb(v, t, size, JSON_COMPACT) != size) {
		free(t);
		return -ENOMEM;
	}
	t[size] = '\0';
	*text = t;
	*len = size;
	return 0;
}

/* Every value finite and not all zero. */
static int embedding_check(const float *v, uint32_t dim, const char *what,
			   char *msg, size_t n)
{
	bool nonzero = false;

	for (uint32_t i = 0; i < dim; i++) {
		if (!isfinite(v[i])) {
			errmsg_set(msg, n,
				   "%s[%u] is not a finite float32 number",
				   what, i);
			return -EINVAL;
		}
		nonzero |= v[i] != 0;
	}
	if (!nonzero) {
		errmsg_set(msg, n,
			   "%s is all zeros (no direction to compare by "
			   "cosine)",
			   what);
		return -EINVAL;
	}
	return 0;
}

static int not_packed(const char *what, char *msg, size_t n)
{
	errmsg_set(msg, n,
		   "%s is a string but not base64url (RFC 4648 section 5) of "
		   "little-endian float32 values",
		   what);
	return -EINVAL;
}

/* The packed form: base64url of dim little-endian float32 values. The
 * length is checked before a byte is decoded into out. */
static int embedding_from_packed(const json_t *v, uint32_t dim,
				 const char *what, float *out, char *msg,
				 size_t n)
{
	const char *text = json_string_value(v);
	size_t len = json_string_length(v);
	long bytes = base64url_decoded_len(text, len);

	if (bytes < 0)
		return not_packed(what, msg, n);
	if (bytes % 4 != 0) {
		errmsg_set(msg, n,
			   "%s decodes to %ld bytes, not a whole number of "
			   "float32 values",
			   what, bytes);
		return -EINVAL;
	}
	if ((uint64_t)bytes / 4 != dim) {
		errmsg_set(msg, n,
			   "%s has %ld numbers; this tree's embedding_dim is "
			   "%u",
			   what, bytes / 4, dim);
		return -EINVAL;
	}
	/* Straight into out: the host is little-endian (above). */
	if (!base64url_decode(text, len, out))
		return not_packed(what, msg, n);
	return 0;
}

int rec_embedding_from_json(const json_t *v, uint32_t dim, const char *what,
			    float *out, char *msg, size_t n)
{
	size_t count;
	int rc;

	if (json_is_string(v)) {
		rc = embedding_from_packed(v, dim, what, out, msg, n);
		return rc < 0 ? rc : embedding_check(out, dim, what, msg, n);
	}
	if (!json_is_array(v)) {
		errmsg_set(msg, n,
			   "%s must be an array of %u numbers (or a string: "
			   "base64url of as many little-endian float32)",
			   what, dim);
		return -EINVAL;
	}
	count = json_array_size(v);
	if (count != dim) {
		errmsg_set(msg, n,
			   "%s has %zu numbers; this tree's embedding_dim is "
			   "%u",
			   what, count, dim);
		return -EINVAL;
	}
	for (size_t i = 0; i < count; i++) {
		const json_t *x = json_array_get(v, i);

		if (!json_is_number(x)) {
			errmsg_set(msg, n, "%s[%zu] is not a number", what, i);
			return -EINVAL;
		}
		out[i] = (float)json_number_value(x);
	}
	return embedding_check(out, dim, what, msg, n);
}

/* ---- record payloads ---- */

#define SESSION_HDR   16u
#define MESSAGE_HDR   36u
#define DOCUMENT_HDR  28u
#define EMBEDDING_HDR 8u

static int bad(char *msg, size_t n, const char *what)
{
	errmsg_set(msg, n, "%s", what);
	return -EBADMSG;
}

/* Metadata as stored: UTF-8 text of an object ("{...}"). */
static bool meta_ok(const uint8_t *p, size_t len)
{
	return len >= 2 && len <= REC_META_MAX && p[0] == '{' &&
	       p[len - 1] == '}' && utf8_valid((const char *)p, len);
}

static bool head_ok(const uint8_t *p, size_t len, size_t hdr, uint8_t type)
{
	return len >= hdr && p[0] == type && p[1] == 1;
}

size_t rec_session_size(const struct rec_session *r)
{
	return SESSION_HDR + r->user_len + r->meta_len;
}

void rec_session_encode(const struct rec_session *r, uint8_t *out)
{
	out[0] = REC_SESSION;
	out[1] = 1;
	out[2] = (uint8_t)r->user_len;
	out[3] = 0;
	put64(out + 4, r->created_at);
	put32(out + 12, (uint32_t)r->meta_len);
	memcpy(out + SESSION_HDR, r->user_id, r->user_len);
	memcpy(out + SESSION_HDR + r->user_len, r->meta, r->meta_len);
}

int rec_session_decode(const uint8_t *p, size_t len, struct rec_session *out,
		       char *msg, size_t n)
{
	size_t ul, ml;

	if (!head_ok(p, len, SESSION_HDR, REC_SESSION) || p[3])
		return bad(msg, n, "not a session record");
	ul = p[2];
	ml = get32(p + 12);
	if (ml > REC_META_MAX || SESSION_HDR + ul + ml != len)
		return bad(msg, n, "session record of the wrong length");
	out->user_id = (const char *)p + SESSION_HDR;
	out->user_len = ul;
	out->created_at = get64(p + 4);
	out->meta = (const char *)p + SESSION_HDR + ul;
	out->meta_len = ml;
	if (rec_user_id_check(out->user_id, ul, NULL, 0) < 0)
		return bad(msg, n, "session record with a bad user_id");
	if (!meta_ok((const uint8_t *)out->meta, ml))
		return bad(msg, n, "session record with bad metadata");
	return 0;
}

size_t rec_message_size(const struct rec_message *r)
{
	return MESSAGE_HDR + r->content_len + r->meta_len;
}

void rec_message_encode(const struct rec_message *r, uint8_t *out)
{
	out[0] = REC_MESSAGE;
	out[1] = 1;
	out[2] = (uint8_t)r->role;
	out[3] = 0;
	memcpy(out + 4, r->session, REC_KEY);
	put64(out + 20, r->created_at);
	put32(out + 28, (uint32_t)r->content_len);
	put32(out + 32, (uint32_t)r->meta_len);
	memcpy(out + MESSAGE_HDR, r->content, r->content_len);
	memcpy(out + MESSAGE_HDR + r->content_len, r->meta, r->meta_len);
}

int rec_message_decode(const uint8_t *p, size_t len, struct rec_message *out,
		       char *msg, size_t n)
{
	size_t cl, ml;

	if (!head_ok(p, len, MESSAGE_HDR, REC_MESSAGE) || p[3] ||
	    p[2] >= ROLE_COUNT)
		return bad(msg, n, "not a message record");
	cl = get32(p + 28);
	ml = get32(p + 32);
	if (cl == 0 || cl > REC_CONTENT_MAX || ml > REC_META_MAX ||
	    MESSAGE_HDR + cl + ml != len)
		return bad(msg, n, "message record of the wrong length");
	out->role = p[2];
	memcpy(out->session, p + 4, REC_KEY);
	out->created_at = get64(p + 20);
	out->content = (const char *)p + MESSAGE_HDR;
	out->content_len = cl;
	out->meta = (const char *)p + MESSAGE_HDR + cl;
	out->meta_len = ml;
	if (!utf8_valid(out->content, cl))
		return bad(msg, n, "message record with bad content");
	if (!meta_ok((const uint8_t *)out->meta, ml))
		return bad(msg, n, "message record with bad metadata");
	return 0;
}

size_t rec_document_size(const struct rec_document *r)
{
	return DOCUMENT_HDR + r->content_len + r->meta_len;
}

void rec_document_encode(const struct rec_document *r, uint8_t *out)
{
	out[0] = REC_DOCUMENT;
	out[1] = 1;
	out[2] = 0;
	out[3] = 0;
	put64(out + 4, r->created_at);
	put64(out + 12, r->updated_at);
	put32(out + 20, (uint32_t)r->content_len);
	put32(out + 24, (uint32_t)r->meta_len);
	memcpy(out + DOCUMENT_HDR, r->content, r->content_len);
	memcpy(out + DOCUMENT_HDR + r->content_len, r->meta, r->meta_len);
}

int rec_document_decode(const uint8_t *p, size_t len, struct rec_document *out,
			char *msg, size_t n)
{
	size_t cl, ml;

	if (!head_ok(p, len, DOCUMENT_HDR, REC_DOCUMENT) || p[2] || p[3])
		return bad(msg, n, "not a document record");
	cl = get32(p + 20);
	ml = get32(p + 24);
	if (cl == 0 || cl > REC_CONTENT_MAX || ml > REC_META_MAX ||
	    DOCUMENT_HDR + cl + ml != len)
		return bad(msg, n, "document record of the wrong length");
	out->created_at = get64(p + 4);
	out->updated_at = get64(p + 12);
	out->content = (const char *)p + DOCUMENT_HDR;
	out->content_len = cl;
	out->meta = (const char *)p + DOCUMENT_HDR + cl;
	out->meta_len = ml;
	if (out->updated_at < out->created_at)
		return bad(msg, n, "document record updated before created");
	if (!utf8_valid(out->content, cl))
		return bad(msg, n, "document record with bad content");
	if (!meta_ok((const uint8_t *)out->meta, ml))
		return bad(msg, n, "document record with bad metadata");
	return 0;
}

size_t rec_embedding_size(uint32_t dim)
{
	return EMBEDDING_HDR + (size_t)dim * sizeof(float);
}

void rec_embedding_encode(uint32_t dim, const float *v, uint8_t *out)
{
	out[0] = REC_EMBEDDING;
	out[1] = 1;
	out[2] = 0;
	out[3] = 0;
	put32(out + 4, dim);
	memcpy(out + EMBEDDING_HDR, v, (size_t)dim * sizeof(float));
}

int rec_embedding_decode(const uint8_t *p, size_t len,
			 struct rec_embedding *out, char *msg, size_t n)
{
	uint32_t dim;

	if (!head_ok(p, len, EMBEDDING_HDR, REC_EMBEDDING) || p[2] || p[3])
		return bad(msg, n, "not an embedding record");
	dim = get32(p + 4);
	if (dim == 0 || dim > 65536 || rec_embedding_size(dim) != len)
		return bad(msg, n, "embedding record of the wrong length");
	out->dim = dim;
	out->raw = p + EMBEDDING_HDR;
	return 0;
}

void rec_embedding_values(const struct rec_embedding *e, float *v)
{
	memcpy(v, e->raw, (size_t)e->dim * sizeof(float));
}

/* ---- log payloads ---- */

#define LOGPAY_HDR 6u
#define LOGOP_HDR  22u

bool logpay_begin(struct buf *b, uint8_t tag)
{
	uint8_t h[LOGPAY_HDR] = {tag, 1, 0, 0, 0, 0};

	b->len = 0;
	return buf_append(b, h, sizeof(h));
}

uint32_t logpay_count(const struct buf *b)
{
	return b->len >= LOGPAY_HDR ? get32((const uint8_t *)b->data + 2) : 0;
}

static uint8_t *op_add(struct buf *b, int op, unsigned store,
		       const uint8_t *key, size_t len)
{
	uint8_t h[LOGOP_HDR];
	size_t at;

	if (len > UINT32_MAX || !buf_reserve(b, LOGOP_HDR + len))
		return NULL;
	h[0] = (uint8_t)op;
	h[1] = (uint8_t)store;
	memcpy(h + 2, key, REC_KEY);
	put32(h + 18, (uint32_t)len);
	buf_append(b, h, sizeof(h)); /* reserved: cannot fail */
	at = b->len;
	b->len += len;
	b->data[b->len] = '\0';
	put32((uint8_t *)b->data + 2, logpay_count(b) + 1);
	return (uint8_t *)b->data + at;
}

uint8_t *logpay_put(struct buf *b, unsigned store, const uint8_t *key,
		    size_t len)
{
	return op_add(b, LOGOP_PUT, store, key, len);
}

bool logpay_del(struct buf *b, unsigned store, const uint8_t *key)
{
	return op_add(b, LOGOP_DEL, store, key, 0) != NULL;
}

/* One pass over the operations: checked only (cb NULL), or handed to
 * cb. */
static int walk(const uint8_t *p, size_t len, unsigned n_stores,
		int (*cb)(void *ctx, const struct logop *op), void *ctx,
		char *msg, size_t n)
{
	size_t off = LOGPAY_HDR;
	uint32_t count = get32(p + 2), i;
	struct logop op;
	int ret;

	for (i = 0; i < count; i++) {
		if (len - off < LOGOP_HDR)
			return bad(msg, n, "log record cut short");
		op.op = p[off];
		op.store = p[off + 1];
		op.key = p + off + 2;
		op.len = get32(p + off + 18);
		off += LOGOP_HDR;
		if ((op.op != LOGOP_PUT && op.op != LOGOP_DEL) ||
		    op.store >= n_stores || (op.op == LOGOP_DEL && op.len) ||
		    op.len > len - off)
			return bad(msg, n, "log record with a bad operation");
		op.payload = op.op == LOGOP_PUT ? p + off : NULL;
		off += op.len;
		if (cb && (ret = cb(ctx, &op)) != 0)
			return ret;
	}
	if (off != len)
		return bad(msg, n, "log record with trailing bytes");
	return 0;
}

int logpay_parse(const uint8_t *p, size_t len, uint8_t tag, unsigned n_stores,
		 int (*cb)(void *ctx, const struct logop *op), void *ctx,
		 char *msg, size_t n)
{
	int ret;

	if (len < LOGPAY_HDR || p[0] != tag || p[1] != 1)
		return bad(msg, n, "not a log record of this kind");
	/* Whole before any of it is handed over. */
	ret = walk(p, len, n_stores, NULL, NULL, msg, n);
	return ret ? ret : walk(p, len, n_stores, cb, ctx, msg, n);
}
