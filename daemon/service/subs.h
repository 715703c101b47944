/*
 * Subscriptions (watch.subscribe): a connection asks to be told of the
 * changes inside a box of coordinates (decisions) and, or only, of the
 * experiences (of one agent, or of all), and gets a watch.changed
 * notification for every store, delete and reload change there, in the
 * order the daemon applied them. Delivery is the connection's business
 * (conn_notify: a subscriber that stops reading is disconnected). Loop
 * thread only.
 */
#ifndef VMEM_DAEMON_SUBS_H
#define VMEM_DAEMON_SUBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "convindex.h"
#include "docindex.h"
#include "index.h"
#include "query.h"

struct conn;

enum subs_event {
	SUBS_STORED,
	SUBS_DELETED,
	SUBS_RELOADED,
	SUBS_UPDATED, /* a document changed in place */
};

/* What a subscriber is sent: watch.changed (the native protocol), or the
 * MCP notifications of a resource subscription (resources/updated with
 * the decision's URI) or of a resource list (resources/list_changed,
 * once per loop iteration whatever the number of changes). */
enum subs_format {
	SUBS_WATCH,
	SUBS_MCP_RESOURCE,
	SUBS_MCP_LIST,
};

/* The kinds of record a subscription is told about (a mask; 1 << 1 and
 * 1 << 2 are left to the conversation kinds, messages and documents). */
enum {
	SUBS_KIND_DECISION = 1 << 0,
	SUBS_KIND_MESSAGE = 1 << 1,  /* conversations (issue 15) */
	SUBS_KIND_DOCUMENT = 1 << 2, /* documents (issue 15) */
	SUBS_KIND_EXPERIENCE = 1 << 3,
};

struct subscription {
	uint64_t id;
	enum subs_format format;
	struct conn *conn;
	unsigned kinds; /* SUBS_KIND_DECISION, SUBS_KIND_EXPERIENCE */
	struct axis_range x, y, z; /* decisions: the box */
	char *agent_id;		   /* experiences: only this agent's (owned;
				      NULL: every agent's) */
	bool one_session;	   /* messages: of session only */
	uint8_t session[REC_KEY];
	struct subscription *next;
};

struct subs {
	struct subscription *head;
	uint64_t last_id;
	size_t n;
};

void subs_init(struct subs *s);

/* Release every subscription. */
void subs_done(struct subs *s);

/* Subscribe conn to the box; its new id goes to *id. 0 or -ENOMEM. */
int subs_add(struct subs *s, struct conn *conn, const struct axis_range *x,
	     const struct axis_range *y, const struct axis_range *z,
	     uint64_t *id);

/* A watch.changed subscription to kinds (SUBS_*): decisions in the box,
 * experiences of agent (copied; NULL: all), messages (of session only,
 * when not NULL), documents. 0 or -ENOMEM. */
int subs_add_kinds(struct subs *s, struct conn *conn, unsigned kinds,
		   const struct axis_range *x, const struct axis_range *y,
		   const struct axis_range *z, const char *agent,
		   const uint8_t *session, uint64_t *id);

/* subs_add with a format other than watch.changed's. */
int subs_add_format(struct subs *s, struct conn *conn,
		    const struct axis_range *x, const struct axis_range *y,
		    const struct axis_range *z, enum subs_format format,
		    uint64_t *id);

/* conn's subscription of that format and box, or NULL (borrowed). */
struct subscription *subs_find(struct subs *s, const struct conn *conn,
			       enum subs_format format,
			       const struct axis_range *x,
			       const struct axis_range *y,
			       const struct axis_range *z);

/* End conn's subscription id; false when conn has no such one. */
bool subs_remove(struct subs *s, const struct conn *conn, uint64_t id);

/* End every subscription of a closing connection. */
void subs_drop_conn(struct subs *s, const struct conn *conn);

/* Tell the subscribers whose box holds c; rec is the decision there now
 * (NULL when there is none). */
void subs_notify(struct subs *s, const struct coord *c, enum subs_event ev,
		 const struct record *rec);

/* Tell the experience subscribers of agent's experience id (the text
 * form); json is the record now (NULL when there is none). */
void subs_notify_experience(struct subs *s, enum subs_event ev, const char *id,
			    const char *agent, size_t agent_len,
			    const char *json, size_t json_len);

/* Tell the subscribers of messages of session: m stored, or (m NULL) the
 * session deleted with its messages. */
void subs_notify_message(struct subs *s, const uint8_t *session,
			 const struct conv_msg *m);

/* Tell the subscribers of documents: d (NULL when deleted) under id, its
 * form without the embedding. */
void subs_notify_document(struct subs *s, const struct docindex *ix,
			  enum subs_event ev, const uint8_t *id,
			  const struct doc *d);

#endif
