/*
 * The records of the local kinds (sessions, messages, documents and their
 * embeddings): their limits, the checks of what a client sends, and their
 * binary forms, which are both the payloads of segment records
 * (write/segment) and, wrapped in a list of operations, the payloads of
 * the write-ahead log.
 *
 * Record payloads, little-endian, every length counted:
 *
 *   session   'S' 1 user_len 0 | created_at i64 | meta_len u32 |
 *             user_id | metadata
 *   message   'M' 1 role 0 | session id [16] | created_at i64 |
 *             content_len u32 | meta_len u32 | content | metadata
 *   document  'D' 1 0 0 | created_at i64 | updated_at i64 |
 *             content_len u32 | meta_len u32 | content | metadata
 *   embedding 'E' 1 0 0 | dim u32 | dim float32
 *
 * Times are microseconds since the epoch; content and user ids are UTF-8;
 * metadata is the compact JSON text of an object. A session's updated_at
 * is not stored: it is its last message's created_at (or its own).
 *
 * A log payload: the kind's tag byte (a byte that cannot begin JSON, see
 * kind.h), a version byte 1, the number of operations (u32), then each
 * operation: 1 put or 2 delete (u8), the segment store it goes to (u8),
 * the key [16], the payload length (u32, 0 for a delete) and payload. An
 * operation is absolute (the whole record, or its removal), so replaying
 * a payload over a state that is already ahead of it converges.
 *
 * Decoders check every length and field against the limits and never
 * read outside what they are given (they are fuzzed); what they return
 * points into the payload. Pure: no I/O, no state.
 */
#ifndef VMEM_DAEMON_LOCALREC_H
#define VMEM_DAEMON_LOCALREC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define REC_KEY 16

/* Limits (docs/protocol.md, "Conversations and documents"). */
#define REC_USER_ID_MAX	  255
#define REC_CONTENT_MAX	  (1u << 20) /* bytes of a message or a document */
#define REC_META_MAX	  65536	     /* bytes of metadata, compact JSON */
#define REC_META_NODES	  4096	     /* values in metadata (all levels) */
#define REC_META_DEPTH	  16	     /* nesting of metadata */
#define REC_EMBEDDING_DIM 1536	     /* embedding_dim's default */

enum rec_type {
	REC_SESSION = 'S',
	REC_MESSAGE = 'M',
	REC_DOCUMENT = 'D',
	REC_EMBEDDING = 'E',
};

enum rec_role {
	ROLE_USER,
	ROLE_ASSISTANT,
	ROLE_SYSTEM,
	ROLE_COUNT,
};

struct rec_session {
	const char *user_id;
	size_t user_len;
	int64_t created_at;
	const char *meta; /* compact JSON object text */
	size_t meta_len;
};

struct rec_message {
	uint8_t session[REC_KEY];
	int role; /* enum rec_role */
	int64_t created_at;
	const char *content;
	size_t content_len;
	const char *meta;
	size_t meta_len;
};

struct rec_document {
	int64_t created_at, updated_at;
	const char *content;
	size_t content_len;
	const char *meta;
	size_t meta_len;
};

struct rec_embedding {
	uint32_t dim;
	const uint8_t *raw; /* dim little-endian float32, unaligned */
};

/* ---- checks of what a client sends (msg: a ValueError's text) ---- */

/* 1..REC_USER_ID_MAX bytes of UTF-8 without control characters. */
int rec_user_id_check(const char *s, size_t len, char *msg, size_t n);

/* "user", "assistant", "system" -> enum rec_role, else -1. */
int rec_role_parse(const char *s, size_t len);
const char *rec_role_name(int role);

/* Message or document content: 1..REC_CONTENT_MAX bytes (UTF-8 is the
 * JSON parser's). */
int rec_content_check(const char *what, size_t len, char *msg, size_t n);

/*
 * Metadata: absent or null (no metadata, "{}"), else an object within
 * REC_META_DEPTH levels, REC_META_NODES values and REC_META_MAX bytes of
 * compact JSON, whose text goes to *text (malloc'd, caller frees). 0, or
 * -EINVAL with msg, or -ENOMEM.
 */
int rec_meta_text(const json_t *v, char **text, size_t *len, char *msg,
		  size_t n);

/*
 * An embedding (called what in messages) into out (dim floats): a JSON
 * array of exactly dim numbers (as float32), or a string, the packed
 * form: base64url (padding optional) of dim little-endian float32 values,
 * a quarter of the text and no number to parse. Either way every value
 * finite and not all zero. 0 or -EINVAL with msg (naming both numbers
 * when the count is wrong).
 */
int rec_embedding_from_json(const json_t *v, uint32_t dim, const char *what,
			    float *out, char *msg, size_t n);

/* ---- record payloads ---- */

size_t rec_session_size(const struct rec_session *r);
void rec_session_encode(const struct rec_session *r, uint8_t *out);
int rec_session_decode(const uint8_t *p, size_t len, struct rec_session *out,
		       char *msg, size_t n);

size_t rec_message_size(const struct rec_message *r);
void rec_message_encode(const struct rec_message *r, uint8_t *out);
int rec_message_decode(const uint8_t *p, size_t len, struct rec_message *out,
		       char *msg, size_t n);

size_t rec_document_size(const struct rec_document *r);
void rec_document_encode(const struct rec_document *r, uint8_t *out);
int rec_document_decode(const uint8_t *p, size_t len, struct rec_document *out,
			char *msg, size_t n);

size_t rec_embedding_size(uint32_t dim);
void rec_embedding_encode(uint32_t dim, const float *v, uint8_t *out);
int rec_embedding_decode(const uint8_t *p, size_t len,
			 struct rec_embedding *out, char *msg, size_t n);
/* The numbers of a decoded embedding into v (dim floats). */
void rec_embedding_values(const struct rec_embedding *e, float *v);

/* ---- log payloads ---- */

enum { LOGOP_PUT = 1, LOGOP_DEL = 2 };

struct logop {
	int op; /* LOGOP_PUT or LOGOP_DEL */
	unsigned store;
	const uint8_t *key;
	const uint8_t *payload; /* NULL for a delete */
	size_t len;
};

/* A log payload being built in a buf: begin, then puts and deletes. */
bool logpay_begin(struct buf *b, uint8_t tag);
/* Room for a put of len bytes; the payload is written at the pointer
 * returned (NULL on allocation failure). */
uint8_t *logpay_put(struct buf *b, unsigned store, const uint8_t *key,
		    size_t len);
bool logpay_del(struct buf *b, unsigned store, const uint8_t *key);
/* The number of operations so far. */
uint32_t logpay_count(const struct buf *b);

/*
 * Walk a log payload of the kind tagged tag with stores below n_stores:
 * cb for each operation in order (stopping at its first non-zero
 * answer, which is returned). 0, or -EBADMSG with msg for a payload
 * that is not one.
 */
int logpay_parse(const uint8_t *p, size_t len, uint8_t tag, unsigned n_stores,
		 int (*cb)(void *ctx, const struct logop *op), void *ctx,
		 char *msg, size_t n);

#endif
