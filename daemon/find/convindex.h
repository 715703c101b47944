/*
 * Conversations in memory: sessions and their messages, the authoritative
 * state of the conversation kind (kinds/conversation) and what its
 * queries read.
 *
 * Sessions are found by id, listed by activity (updated_at, newest
 * first; ties by id, higher first) over all users or one user's, and
 * hold their messages ordered by created_at (oldest first), so the last
 * n messages of a session are a slice of its array. A session's
 * updated_at is its newest message's created_at, or its own created_at
 * while it has none. Messages are also found by id (so an id is never
 * both a session's and a message's: the two share one segment store).
 *
 * Records are copied in (compactly: a message is one allocation holding
 * its content and metadata text) and owned by the index. Puts replace a
 * record of the same id; a message put before its session's record
 * (segments are read in no particular order, a log replay may run ahead
 * of them) hangs under a placeholder session marked "recovered" until the
 * session's record arrives.
 *
 * Loop thread only (and start-up, before the loop runs).
 */
#ifndef VMEM_DAEMON_CONVINDEX_H
#define VMEM_DAEMON_CONVINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "idmap.h"
#include "localrec.h"

struct conv_session;

struct conv_msg {
	uint8_t id[REC_KEY]; /* first: the idmap's key */
	struct conv_session *session;
	int64_t created_at;
	uint32_t content_len, meta_len;
	uint32_t content_json; /* the content as a JSON string: its bytes */
	uint8_t role;
	char data[]; /* content, then metadata */
};

struct conv_user {
	struct conv_session *head; /* the user's sessions, newest first */
	size_t n;
	uint8_t len;
	char name[]; /* len bytes and a NUL */
};

struct conv_session {
	uint8_t id[REC_KEY]; /* first: the idmap's key */
	int64_t created_at, updated_at;
	struct conv_user *user;
	struct conv_session *prev, *next;   /* every session, by activity */
	struct conv_session *uprev, *unext; /* its user's, by activity */
	struct conv_msg **msgs;		    /* by created_at, oldest first */
	uint32_t n_msgs, cap_msgs;
	uint32_t meta_len;
	bool recovered; /* a placeholder: its record is missing */
	char *meta;
};

struct convindex {
	struct idmap sessions, messages;
	struct conv_user **users; /* open addressing by name */
	size_t n_users, cap_users;
	struct conv_session *head; /* newest activity first */
	size_t n_sessions, n_messages, n_recovered;
	size_t bytes; /* held by records (content, metadata, arrays) */
};

void convindex_init(struct convindex *ix);
void convindex_done(struct convindex *ix);

struct conv_session *convindex_session(const struct convindex *ix,
				       const uint8_t *id);
struct conv_msg *convindex_message(const struct convindex *ix,
				   const uint8_t *id);

/*
 * Put a session (its record's fields copied): a new one, or new fields
 * for the session with that id (its messages stay, a placeholder stops
 * being one). 0 or -ENOMEM (nothing changed).
 */
int convindex_put_session(struct convindex *ix, const uint8_t *id,
			  const struct rec_session *r);

/* Remove a session and every message it holds. false if none. */
bool convindex_del_session(struct convindex *ix, const uint8_t *id);

/*
 * Put a message (copied) into its session, replacing a message with that
 * id; a session not known yet gets a placeholder. 0 or -ENOMEM (nothing
 * changed).
 */
int convindex_put_message(struct convindex *ix, const uint8_t *id,
			  const struct rec_message *r);

/* Remove one message. false if none. */
bool convindex_del_message(struct convindex *ix, const uint8_t *id);

/* Make placeholders real sessions of user (the caller logs and writes
 * them); returns how many there were. */
size_t convindex_adopt_recovered(struct convindex *ix, const char *user,
				 size_t len);

/* The sessions of user (NULL: all), by activity, after the position
 * (updated_at, id) when after_id is given; walk stops when fn returns
 * false. */
void convindex_list(const struct convindex *ix, const char *user,
		    size_t user_len, bool has_after, int64_t after_at,
		    const uint8_t *after_id,
		    bool (*fn)(void *ctx, const struct conv_session *s),
		    void *ctx);

/* The wire forms: a session object, a message object. false on
 * allocation failure. */
bool conv_session_json(struct buf *b, const struct conv_session *s);
bool conv_message_json(struct buf *b, const struct conv_msg *m);

/* Messages from..to-1 of s, as objects separated by commas (the session's
 * id written out once for all of them). false on allocation failure. */
bool conv_messages_json(struct buf *b, const struct conv_session *s,
			size_t from, size_t to);

/* An upper bound of the bytes conv_message_json appends for m. */
size_t conv_message_json_max(const struct conv_msg *m);

#endif
