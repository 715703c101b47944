/*
 * See convindex.h. Invariants: every session is on the global activity
 * list and, unless it is a placeholder, on its user's; both lists are
 * sorted by (updated_at, id) descending; a session's msgs are sorted by
 * created_at; updated_at is max(created_at, the last message's
 * created_at); a user exists while it has sessions.
 */
#include "convindex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/decision.h"
#include "protocol/fnv.h"
#include "uuid.h"

void convindex_init(struct convindex *ix)
{
	memset(ix, 0, sizeof(*ix));
	idmap_init(&ix->sessions);
	idmap_init(&ix->messages);
}

static void session_free(struct convindex *ix, struct conv_session *s)
{
	for (uint32_t i = 0; i < s->n_msgs; i++) {
		ix->bytes -= sizeof(*s->msgs[i]) + s->msgs[i]->content_len +
			     s->msgs[i]->meta_len;
		free(s->msgs[i]);
	}
	ix->bytes -= s->cap_msgs * sizeof(*s->msgs) + s->meta_len;
	free(s->msgs);
	free(s->meta);
	free(s);
}

void convindex_done(struct convindex *ix)
{
	struct conv_session *s = ix->head, *next;

	for (; s; s = next) {
		next = s->next;
		session_free(ix, s);
	}
	for (size_t i = 0; i < ix->cap_users; i++)
		free(ix->users[i]);
	free(ix->users);
	idmap_done(&ix->sessions);
	idmap_done(&ix->messages);
	memset(ix, 0, sizeof(*ix));
}

struct conv_session *convindex_session(const struct convindex *ix,
				       const uint8_t *id)
{
	return idmap_get(&ix->sessions, id);
}

struct conv_msg *convindex_message(const struct convindex *ix,
				   const uint8_t *id)
{
	return idmap_get(&ix->messages, id);
}

/* ---- users ---- */

static size_t user_slot(const struct convindex *ix, const char *name,
			size_t len)
{
	size_t i = (size_t)fnv1a64(name, len) & (ix->cap_users - 1);

	while (ix->users[i] && (ix->users[i]->len != len ||
				memcmp(ix->users[i]->name, name, len) != 0))
		i = (i + 1) & (ix->cap_users - 1);
	return i;
}

static struct conv_user *user_find(const struct convindex *ix, const char *name,
				   size_t len)
{
	return ix->cap_users ? ix->users[user_slot(ix, name, len)] : NULL;
}

static int users_grow(struct convindex *ix)
{
	size_t cap = ix->cap_users ? ix->cap_users * 2 : 64;
	struct conv_user **old = ix->users, **tab = calloc(cap, sizeof(*tab));
	size_t oldcap = ix->cap_users;

	if (!tab)
		return -ENOMEM;
	ix->users = tab;
	ix->cap_users = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i])
			tab[user_slot(ix, old[i]->name, old[i]->len)] = old[i];
	free(old);
	return 0;
}

static struct conv_user *user_get(struct convindex *ix, const char *name,
				  size_t len)
{
	struct conv_user *u = user_find(ix, name, len);

	if (u)
		return u;
	if ((ix->n_users + 1) * 2 > ix->cap_users && users_grow(ix) < 0)
		return NULL;
	u = calloc(1, sizeof(*u) + len + 1);
	if (!u)
		return NULL;
	u->len = (uint8_t)len;
	memcpy(u->name, name, len);
	ix->users[user_slot(ix, name, len)] = u;
	ix->n_users++;
	return u;
}

/* Forget a user left without sessions (backward-shift deletion). */
static void user_drop(struct convindex *ix, struct conv_user *u)
{
	size_t i = user_slot(ix, u->name, u->len), j = i, home;

	for (;;) {
		j = (j + 1) & (ix->cap_users - 1);
		if (!ix->users[j])
			break;
		home = (size_t)fnv1a64(ix->users[j]->name, ix->users[j]->len) &
		       (ix->cap_users - 1);
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && home <= i && home > j)) {
			ix->users[i] = ix->users[j];
			i = j;
		}
	}
	ix->users[i] = NULL;
	ix->n_users--;
	free(u);
}

/* ---- the activity lists ---- */

/* a comes before b: newer activity, then the higher id. */
static bool newer(const struct conv_session *a, const struct conv_session *b)
{
	if (a->updated_at != b->updated_at)
		return a->updated_at > b->updated_at;
	return memcmp(a->id, b->id, REC_KEY) > 0;
}

static void link_all(struct convindex *ix, struct conv_session *s)
{
	struct conv_session *p = NULL, *q = ix->head;

	while (q && newer(q, s)) {
		p = q;
		q = q->next;
	}
	s->prev = p;
	s->next = q;
	if (q)
		q->prev = s;
	if (p)
		p->next = s;
	else
		ix->head = s;
}

static void unlink_all(struct convindex *ix, struct conv_session *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		ix->head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
}

static void link_user(struct conv_session *s)
{
	struct conv_session *p = NULL, *q = s->user->head;

	while (q && newer(q, s)) {
		p = q;
		q = q->unext;
	}
	s->uprev = p;
	s->unext = q;
	if (q)
		q->uprev = s;
	if (p)
		p->unext = s;
	else
		s->user->head = s;
	s->user->n++;
}

/* Off its user's list; the user goes with its last session unless
 * keep (the session is relinked at once). */
static void unlink_user(struct convindex *ix, struct conv_session *s, bool keep)
{
	struct conv_user *u = s->user;

	if (!u)
		return;
	if (s->uprev)
		s->uprev->unext = s->unext;
	else
		u->head = s->unext;
	if (s->unext)
		s->unext->uprev = s->uprev;
	s->uprev = s->unext = NULL;
	s->user = NULL;
	if (--u->n == 0 && !keep)
		user_drop(ix, u);
}

/* updated_at from the messages; moved in the lists when it changed. */
static void touch(struct convindex *ix, struct conv_session *s)
{
	int64_t at = s->created_at;
	struct conv_user *u = s->user;

	if (s->n_msgs && s->msgs[s->n_msgs - 1]->created_at > at)
		at = s->msgs[s->n_msgs - 1]->created_at;
	if (at == s->updated_at)
		return;
	unlink_all(ix, s);
	unlink_user(ix, s, true);
	s->user = u;
	s->updated_at = at;
	link_all(ix, s);
	if (u)
		link_user(s);
}

/* ---- sessions ---- */

static struct conv_session *placeholder(struct convindex *ix, const uint8_t *id,
					int64_t at)
{
	struct conv_session *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	memcpy(s->id, id, REC_KEY);
	s->meta = strdup("{}");
	if (!s->meta || idmap_put(&ix->sessions, s, NULL) < 0) {
		free(s->meta);
		free(s);
		return NULL;
	}
	s->meta_len = 2;
	s->recovered = true;
	s->created_at = s->updated_at = at;
	link_all(ix, s);
	ix->n_sessions++;
	ix->n_recovered++;
	ix->bytes += 2;
	return s;
}

int convindex_put_session(struct convindex *ix, const uint8_t *id,
			  const struct rec_session *r)
{
	struct conv_session *s = idmap_get(&ix->sessions, id);
	struct conv_user *u = user_get(ix, r->user_id, r->user_len);
	char *meta = malloc(r->meta_len + 1);

	if (!u || !meta)
		goto oom;
	memcpy(meta, r->meta, r->meta_len);
	meta[r->meta_len] = '\0';
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			goto oom;
		memcpy(s->id, id, REC_KEY);
		if (idmap_put(&ix->sessions, s, NULL) < 0) {
			free(s);
			goto oom;
		}
		ix->n_sessions++;
	} else {
		unlink_all(ix, s);
		unlink_user(ix, s, s->user == u);
		ix->bytes -= s->meta_len;
		free(s->meta);
		if (s->recovered)
			ix->n_recovered--;
	}
	s->recovered = false;
	s->meta = meta;
	s->meta_len = (uint32_t)r->meta_len;
	ix->bytes += r->meta_len;
	s->created_at = r->created_at;
	s->updated_at = r->created_at;
	if (s->n_msgs && s->msgs[s->n_msgs - 1]->created_at > s->updated_at)
		s->updated_at = s->msgs[s->n_msgs - 1]->created_at;
	/* The user may be new (user_get) and the session not yet in it. */
	s->user = u;
	link_all(ix, s);
	link_user(s);
	return 0;
oom:
	free(meta);
	if (u && u->n == 0)
		user_drop(ix, u);
	return -ENOMEM;
}

bool convindex_del_session(struct convindex *ix, const uint8_t *id)
{
	struct conv_session *s = idmap_del(&ix->sessions, id);

	if (!s)
		return false;
	for (uint32_t i = 0; i < s->n_msgs; i++)
		idmap_del(&ix->messages, s->msgs[i]->id);
	ix->n_messages -= s->n_msgs;
	unlink_all(ix, s);
	unlink_user(ix, s, false);
	if (s->recovered)
		ix->n_recovered--;
	ix->n_sessions--;
	session_free(ix, s);
	return true;
}

size_t convindex_adopt_recovered(struct convindex *ix, const char *user,
				 size_t len)
{
	struct conv_session *s;
	size_t n = 0;

	for (s = ix->head; s; s = s->next) {
		if (!s->recovered)
			continue;
		s->user = user_get(ix, user, len);
		if (!s->user)
			continue; /* out of memory: it stays a placeholder */
		s->recovered = false;
		ix->n_recovered--;
		link_user(s);
		n++;
	}
	return n;
}

/* ---- messages ---- */

/* Remove m from its session's array (not from the map). */
static void detach(struct convindex *ix, struct conv_msg *m)
{
	struct conv_session *s = m->session;
	uint32_t i = s->n_msgs;

	while (i-- > 0)
		if (s->msgs[i] == m)
			break;
	memmove(s->msgs + i, s->msgs + i + 1,
		(s->n_msgs - i - 1) * sizeof(*s->msgs));
	s->n_msgs--;
	ix->n_messages--;
	ix->bytes -= sizeof(*m) + m->content_len + m->meta_len;
}

int convindex_put_message(struct convindex *ix, const uint8_t *id,
			  const struct rec_message *r)
{
	struct conv_session *s = idmap_get(&ix->sessions, r->session);
	struct conv_msg *m, *old;
	uint32_t at;

	if (!s && !(s = placeholder(ix, r->session, r->created_at)))
		return -ENOMEM;
	if (s->n_msgs == s->cap_msgs) {
		uint32_t cap = s->cap_msgs ? s->cap_msgs * 2 : 4;
		struct conv_msg **p = realloc(s->msgs, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		ix->bytes += (cap - s->cap_msgs) * sizeof(*p);
		s->msgs = p;
		s->cap_msgs = cap;
	}
	m = malloc(sizeof(*m) + r->content_len + r->meta_len);
	if (!m)
		return -ENOMEM;
	memcpy(m->id, id, REC_KEY);
	m->session = s;
	m->created_at = r->created_at;
	m->content_len = (uint32_t)r->content_len;
	/* Content is at most REC_CONTENT_MAX bytes: escaped, far below 4 GB. */
	m->content_json = (uint32_t)json_str_len(r->content, r->content_len);
	m->meta_len = (uint32_t)r->meta_len;
	m->role = (uint8_t)r->role;
	memcpy(m->data, r->content, r->content_len);
	memcpy(m->data + r->content_len, r->meta, r->meta_len);
	if (idmap_put(&ix->messages, m, (void **)&old) < 0) {
		free(m);
		return -ENOMEM;
	}
	if (old) {
		struct conv_session *os = old->session;

		detach(ix, old);
		free(old);
		if (os != s)
			touch(ix, os);
	}
	/* By created_at: almost always at the end. */
	at = s->n_msgs;
	while (at > 0 && s->msgs[at - 1]->created_at > m->created_at)
		at--;
	memmove(s->msgs + at + 1, s->msgs + at,
		(s->n_msgs - at) * sizeof(*s->msgs));
	s->msgs[at] = m;
	s->n_msgs++;
	ix->n_messages++;
	ix->bytes += sizeof(*m) + r->content_len + r->meta_len;
	touch(ix, s);
	return 0;
}

bool convindex_del_message(struct convindex *ix, const uint8_t *id)
{
	struct conv_msg *m = idmap_del(&ix->messages, id);
	struct conv_session *s;

	if (!m)
		return false;
	s = m->session;
	detach(ix, m);
	free(m);
	touch(ix, s);
	return true;
}

/* ---- listing ---- */

/* (at, id) comes after s in activity order. */
static bool past(const struct conv_session *s, int64_t at, const uint8_t *id)
{
	if (s->updated_at != at)
		return s->updated_at < at;
	return memcmp(s->id, id, REC_KEY) < 0;
}

void convindex_list(const struct convindex *ix, const char *user,
		    size_t user_len, bool has_after, int64_t after_at,
		    const uint8_t *after_id,
		    bool (*fn)(void *ctx, const struct conv_session *s),
		    void *ctx)
{
	const struct conv_session *s;
	const struct conv_user *u = NULL;

	if (user) {
		u = user_find(ix, user, user_len);
		if (!u)
			return;
	}
	for (s = u ? u->head : ix->head; s; s = u ? s->unext : s->next) {
		if (has_after && !past(s, after_at, after_id))
			continue;
		if (!fn(ctx, s))
			return;
	}
}

/* ---- wire forms ---- */

static bool put_time(struct buf *b, const char *key, int64_t at)
{
	char t[VMEM_TIMESTAMP_LEN + 1];

	timestamp_format(at, t);
	return buf_puts(b, key) && buf_append(b, "\"", 1) &&
	       buf_append(b, t, VMEM_TIMESTAMP_LEN) && buf_append(b, "\"", 1);
}

static bool put_id(struct buf *b, const char *key, const uint8_t *id)
{
	char t[UUID_TEXT_LEN + 1];

	uuid_format(id, t);
	return buf_puts(b, key) && buf_append(b, "\"", 1) &&
	       buf_append(b, t, UUID_TEXT_LEN) && buf_append(b, "\"", 1);
}

bool conv_session_json(struct buf *b, const struct conv_session *s)
{
	char n[48];

	snprintf(n, sizeof(n), ",\"message_count\":%u}", s->n_msgs);
	return put_id(b, "{\"id\":", s->id) && buf_puts(b, ",\"user_id\":") &&
	       (s->user ? buf_json_str(b, s->user->name, s->user->len)
			: buf_puts(b, "null")) &&
	       put_time(b, ",\"created_at\":", s->created_at) &&
	       put_time(b, ",\"updated_at\":", s->updated_at) &&
	       buf_puts(b, ",\"metadata\":") &&
	       buf_append(b, s->meta, s->meta_len) && buf_puts(b, n);
}

/* n bytes of s at o; the end. */
static char *put(char *o, const char *s, size_t n)
{
	memcpy(o, s, n);
	return o + n;
}

#define PUT_LITERAL(o, lit) put(o, lit, sizeof(lit) - 1)

/*
 * m, its session's id given as text (session_text). Written straight into
 * room reserved for its bound (conv_message_json_max), not field by field
 * through buf_append: a history of a hundred messages is a few thousand
 * fields.
 */
static bool message_json(struct buf *b, const struct conv_msg *m,
			 const char *session_text)
{
	const char *role = rec_role_name(m->role);
	char *o;

	if (!buf_reserve(b, conv_message_json_max(m)))
		return false;
	o = PUT_LITERAL(b->data + b->len, "{\"id\":\"");
	uuid_format(m->id, o);
	o = PUT_LITERAL(o + UUID_TEXT_LEN, "\",\"session_id\":\"");
	o = put(o, session_text, UUID_TEXT_LEN);
	o = PUT_LITERAL(o, "\",\"role\":\"");
	o = put(o, role, strlen(role));
	o = PUT_LITERAL(o, "\",\"content\":");
	/* Content with nothing to escape (content_json tells) is copied as
	 * it is, without a pass over it. */
	if (m->content_json == m->content_len + 2u) {
		*o++ = '"';
		o = put(o, m->data, m->content_len);
		*o++ = '"';
	} else {
		o = json_str_put(o, m->data, m->content_len);
	}
	o = PUT_LITERAL(o, ",\"created_at\":\"");
	timestamp_format(m->created_at, o);
	o = PUT_LITERAL(o + VMEM_TIMESTAMP_LEN, "\",\"metadata\":");
	o = put(o, m->data + m->content_len, m->meta_len);
	*o++ = '}';
	*o = '\0';
	b->len = (size_t)(o - b->data);
	return true;
}

bool conv_message_json(struct buf *b, const struct conv_msg *m)
{
	char t[UUID_TEXT_LEN + 1];

	uuid_format(m->session->id, t);
	return message_json(b, m, t);
}

bool conv_messages_json(struct buf *b, const struct conv_session *s,
			size_t from, size_t to)
{
	char t[UUID_TEXT_LEN + 1];
	bool ok = true;

	uuid_format(s->id, t);
	for (size_t i = from; ok && i < to; i++)
		ok = (i == from || buf_append(b, ",", 1)) &&
		     message_json(b, s->msgs[i], t);
	return ok;
}

size_t conv_message_json_max(const struct conv_msg *m)
{
	/* The keys, two ids, a role and a time: under 200 bytes. */
	return 200 + (size_t)m->content_json + m->meta_len;
}
