/*
 * Subscriptions: a list scanned on every change (subscribers are few; a
 * change costs one box test per subscription and one line per match).
 */
#include "subs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "conn.h"
#include "log.h"
#include "uuid.h"

void subs_init(struct subs *s)
{
	s->head = NULL;
	s->last_id = 0;
	s->n = 0;
}

void subs_done(struct subs *s)
{
	while (s->head) {
		struct subscription *sub = s->head;

		s->head = sub->next;
		free(sub->agent_id);
		free(sub);
	}
	s->n = 0;
}

int subs_add(struct subs *s, struct conn *conn, const struct axis_range *x,
	     const struct axis_range *y, const struct axis_range *z,
	     uint64_t *id)
{
	return subs_add_format(s, conn, x, y, z, SUBS_WATCH, id);
}

int subs_add_kinds(struct subs *s, struct conn *conn, unsigned kinds,
		   const struct axis_range *x, const struct axis_range *y,
		   const struct axis_range *z, const char *agent,
		   const uint8_t *session, uint64_t *id)
{
	char *copy = agent ? strdup(agent) : NULL;
	int rc;

	if (agent && !copy)
		return -ENOMEM;
	rc = subs_add_format(s, conn, x, y, z, SUBS_WATCH, id);
	if (rc < 0) {
		free(copy);
		return rc;
	}
	s->head->kinds = kinds; /* the newest is the head */
	s->head->agent_id = copy;
	if (session) {
		s->head->one_session = true;
		memcpy(s->head->session, session, REC_KEY);
	}
	return 0;
}

static bool same_range(const struct axis_range *a, const struct axis_range *b)
{
	return a->min == b->min && a->max == b->max;
}

struct subscription *subs_find(struct subs *s, const struct conn *conn,
			       enum subs_format format,
			       const struct axis_range *x,
			       const struct axis_range *y,
			       const struct axis_range *z)
{
	for (struct subscription *sub = s->head; sub; sub = sub->next)
		if (sub->conn == conn && sub->format == format &&
		    same_range(&sub->x, x) && same_range(&sub->y, y) &&
		    same_range(&sub->z, z))
			return sub;
	return NULL;
}

int subs_add_format(struct subs *s, struct conn *conn,
		    const struct axis_range *x, const struct axis_range *y,
		    const struct axis_range *z, enum subs_format format,
		    uint64_t *id)
{
	struct subscription *sub = calloc(1, sizeof(*sub));

	if (!sub)
		return -ENOMEM;
	sub->id = ++s->last_id;
	sub->format = format;
	sub->conn = conn;
	sub->kinds = SUBS_KIND_DECISION;
	sub->x = *x;
	sub->y = *y;
	sub->z = *z;
	sub->kinds = SUBS_KIND_DECISION;
	sub->next = s->head;
	s->head = sub;
	s->n++;
	*id = sub->id;
	return 0;
}

/* Remove the subscriptions of conn matching id (any id when all). */
static size_t remove_matching(struct subs *s, const struct conn *conn,
			      uint64_t id, bool all)
{
	struct subscription **p = &s->head;
	size_t removed = 0;

	while (*p) {
		struct subscription *sub = *p;

		if (sub->conn == conn && (all || sub->id == id)) {
			*p = sub->next;
			free(sub->agent_id);
			free(sub);
			s->n--;
			removed++;
		} else {
			p = &sub->next;
		}
	}
	return removed;
}

bool subs_remove(struct subs *s, const struct conn *conn, uint64_t id)
{
	return remove_matching(s, conn, id, false) > 0;
}

void subs_drop_conn(struct subs *s, const struct conn *conn)
{
	remove_matching(s, conn, 0, true);
}

static bool in_range(const struct axis_range *r, int v)
{
	return v >= r->min && v <= r->max;
}

static const char *const event_names[] = {
	[SUBS_STORED] = "stored",
	[SUBS_DELETED] = "deleted",
	[SUBS_RELOADED] = "reloaded",
	[SUBS_UPDATED] = "updated",
};

void subs_notify(struct subs *s, const struct coord *c, enum subs_event ev,
		 const struct record *rec)
{
	struct subscription *sub, *next;
	struct buf line = {0};

	for (sub = s->head; sub; sub = next) {
		char head[256];
		int n;

		/* Notifying may close a slow subscriber, which drops its
		 * subscriptions: step first. */
		next = sub->next;
		/* A subscriber cut off in this burst keeps its
		 * subscriptions until its close callback: skip them. */
		if (sub->conn->closing || !(sub->kinds & SUBS_KIND_DECISION) ||
		    !in_range(&sub->x, c->x) || !in_range(&sub->y, c->y) ||
		    !in_range(&sub->z, c->z))
			continue;
		if (sub->format == SUBS_MCP_LIST) {
			/* One per loop iteration (conn_flush_notified). */
			if (sub->conn->mcp_list_queued)
				continue;
			sub->conn->mcp_list_queued = true;
			n = snprintf(head, sizeof(head),
				     "{\"jsonrpc\":\"2.0\",\"method\":"
				     "\"notifications/resources/list_changed"
				     "\"}\n");
			conn_notify(sub->conn, head, (size_t)n);
			continue;
		}
		if (sub->format == SUBS_MCP_RESOURCE) {
			n = snprintf(head, sizeof(head),
				     "{\"jsonrpc\":\"2.0\",\"method\":"
				     "\"notifications/resources/updated\","
				     "\"params\":{\"uri\":\"vmem://decision/"
				     "%d/%d/%d\"}}\n",
				     c->x, c->y, c->z);
			conn_notify(sub->conn, head, (size_t)n);
			continue;
		}
		n = snprintf(
			head, sizeof(head),
			"{\"jsonrpc\":\"2.0\",\"method\":\"watch.changed\","
			"\"params\":{\"subscription\":%" PRIu64
			",\"event\":\"%s\",\"coordinate\":{\"x\":%d,"
			"\"y\":%d,\"z\":%d},\"decision\":",
			sub->id, event_names[ev], c->x, c->y, c->z);
		line.len = 0;
		if (!buf_append(&line, head, (size_t)n) ||
		    !(rec ? buf_append(&line, rec->json, rec->json_len)
			  : buf_puts(&line, "null")) ||
		    !buf_puts(&line, "}}\n")) {
			log_err("out of memory notifying subscriber %" PRIu64,
				sub->id);
			conn_close(sub->conn);
			continue;
		}
		conn_notify(sub->conn, line.data, line.len);
	}
	buf_done(&line);
}

/* Send line to sub's connection, or close it when the line could not be
 * built. */
static void deliver(struct subscription *sub, const struct buf *line, bool ok)
{
	if (!ok) {
		log_err("out of memory notifying subscriber %" PRIu64, sub->id);
		conn_close(sub->conn);
		return;
	}
	conn_notify(sub->conn, line->data, line->len);
}

void subs_notify_message(struct subs *s, const uint8_t *session,
			 const struct conv_msg *m)
{
	struct subscription *sub, *next;
	char head[256], sid[UUID_TEXT_LEN + 1];
	struct buf line = {0};

	uuid_format(session, sid);
	for (sub = s->head; sub; sub = next) {
		int n;

		next = sub->next;
		if (sub->conn->closing || !(sub->kinds & SUBS_KIND_MESSAGE) ||
		    sub->format != SUBS_WATCH ||
		    (sub->one_session &&
		     memcmp(sub->session, session, REC_KEY) != 0))
			continue;
		n = snprintf(
			head, sizeof(head),
			"{\"jsonrpc\":\"2.0\",\"method\":\"watch.changed\","
			"\"params\":{\"subscription\":%" PRIu64
			",\"kind\":\"message\",\"event\":\"%s\","
			"\"session_id\":\"%s\",\"message\":",
			sub->id, m ? "stored" : "deleted", sid);
		line.len = 0;
		deliver(sub, &line,
			buf_append(&line, head, (size_t)n) &&
				(m ? conv_message_json(&line, m)
				   : buf_puts(&line, "null")) &&
				buf_puts(&line, "}}\n"));
	}
	buf_done(&line);
}

void subs_notify_document(struct subs *s, const struct docindex *ix,
			  enum subs_event ev, const uint8_t *id,
			  const struct doc *d)
{
	struct subscription *sub, *next;
	char head[256], text[UUID_TEXT_LEN + 1];
	struct buf line = {0};

	uuid_format(id, text);
	for (sub = s->head; sub; sub = next) {
		int n;

		next = sub->next;
		if (sub->conn->closing || !(sub->kinds & SUBS_KIND_DOCUMENT) ||
		    sub->format != SUBS_WATCH)
			continue;
		n = snprintf(
			head, sizeof(head),
			"{\"jsonrpc\":\"2.0\",\"method\":\"watch.changed\","
			"\"params\":{\"subscription\":%" PRIu64
			",\"kind\":\"document\",\"event\":\"%s\","
			"\"id\":\"%s\",\"document\":",
			sub->id, event_names[ev], text);
		line.len = 0;
		deliver(sub, &line,
			buf_append(&line, head, (size_t)n) &&
				(d ? doc_json(&line, ix, d, false, 0, false)
				   : buf_puts(&line, "null")) &&
				buf_puts(&line, "}}\n"));
	}
	buf_done(&line);
}

void subs_notify_experience(struct subs *s, enum subs_event ev, const char *id,
			    const char *agent, size_t agent_len,
			    const char *json, size_t json_len)
{
	struct subscription *sub, *next;
	struct buf line = {0};

	for (sub = s->head; sub; sub = next) {
		char head[256];
		int n;

		next = sub->next; /* notifying may close a slow subscriber */
		/* one cut off in this burst: see subs_notify */
		if (sub->conn->closing ||
		    !(sub->kinds & SUBS_KIND_EXPERIENCE) ||
		    (sub->agent_id &&
		     (!agent || strlen(sub->agent_id) != agent_len ||
		      memcmp(sub->agent_id, agent, agent_len) != 0)))
			continue;
		n = snprintf(head, sizeof(head),
			     "{\"jsonrpc\":\"2.0\",\"method\":"
			     "\"watch.changed\",\"params\":{\"subscription\":"
			     "%" PRIu64 ",\"kind\":\"experience\",\"event\":"
			     "\"%s\",\"id\":\"%s\",\"experience\":",
			     sub->id, event_names[ev], id);
		line.len = 0;
		if (!buf_append(&line, head, (size_t)n) ||
		    !(json ? buf_append(&line, json, json_len)
			   : buf_puts(&line, "null")) ||
		    !buf_puts(&line, "}}\n")) {
			log_err("out of memory notifying subscriber %" PRIu64,
				sub->id);
			conn_close(sub->conn);
			continue;
		}
		conn_notify(sub->conn, line.data, line.len);
	}
	buf_done(&line);
}
