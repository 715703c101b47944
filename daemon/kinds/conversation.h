/*
 * Sessions and their messages as a record kind (kind.h): local, never
 * committed. Writes lock their session's id (a key: messages of one
 * session are appended one at a time, in order, while other sessions'
 * go on), are validated against the index (find/convindex), logged as a
 * list of absolute operations (localrec.h: the session record if the
 * write creates it, the message record; a deletion's tombstones for the
 * session and every message it held), applied to the index, and
 * materialised into one segment store under <gitdir>/vmem/conversations
 * (write/localseg).
 *
 * Start-up: conversations_open reads the segments into the index before
 * the store replays the log, whose operations (absolute) then bring the
 * index and the segments up to date; load adopts messages whose session
 * record is missing (a damaged store) into sessions of user "unknown",
 * logged, counted in health and written back.
 *
 * Loop thread only, but for the writer functions the store runs on its
 * pool (localseg.h).
 */
#ifndef VMEM_DAEMON_KIND_CONVERSATION_H
#define VMEM_DAEMON_KIND_CONVERSATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "convindex.h"
#include "kind.h"
#include "localseg.h"
#include "store.h"

/* The first byte of the kind's log payloads (cannot begin JSON). */
#define CONVERSATION_LOG_TAG 'C'
/* Its directory in the state directory. */
#define CONVERSATION_DIR "conversations"

extern const struct kind conversation_kind;

struct conversations {
	struct store_kind sk; /* its place in the store */
	struct convindex ix;  /* the authoritative state (read it freely) */
	struct localseg seg;
	size_t n_adopted; /* sessions made up at start-up for orphans */
	uint64_t load_records;
};

enum conv_op {
	CONV_CREATE_SESSION,
	CONV_STORE_MESSAGE,
	CONV_DELETE_SESSION,
};

/*
 * A conversation write, owned by the caller, zeroed, then filled: w.kind
 * (the conversations' sk), w's request fields, op, session (the id; a new
 * session's is assigned), and for a session or a message that may create
 * one user_id/user_len (checked, the caller's until done); for a message
 * role, content/content_len, for either meta/meta_len (compact JSON text
 * of an object, the caller's until done).
 */
struct conv_write {
	struct store_write w;

	/* Request. */
	enum conv_op op;
	uint8_t session[REC_KEY];
	const char *user_id;
	size_t user_len;
	int role;
	const char *content;
	size_t content_len;
	const char *meta;
	size_t meta_len;

	/* Result, valid during done(). */
	uint8_t id[REC_KEY]; /* the new session's or message's */
	bool created;	     /* message.store created its session */
	bool existed;	     /* a delete found the session */
	const struct conv_session *s;
	const struct conv_msg *m;

	/* Private to the kind. */
	char key[40]; /* the session id as text: the lock's key */
	struct buf payload;
};

/* What a change was (struct conv_change's what). */
enum conv_change_what {
	CONV_SESSION_CREATED,
	CONV_MESSAGE_STORED,
	CONV_SESSION_DELETED,
};

/* The detail of a conversation's kind_change, valid during the call:
 * the session's id, the message stored (NULL otherwise). */
struct conv_change {
	enum conv_change_what what;
	const uint8_t *session;
	const struct conv_msg *m;
};

/*
 * Read the segments under state's conversations/ into the index
 * (blocking, at start-up, before store_open registers the kind). 0 or
 * -errno with msg; conversations_done cleans up either way.
 */
int conversations_open(struct conversations *cv, uv_loop_t *loop,
		       const struct statedir *state, char *msg, size_t msglen);

/* Release everything, after store_close and the loop's last run. */
void conversations_done(struct conversations *cv);

#endif
