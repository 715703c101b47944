/*
 * Sessions and messages as a record kind (see conversation.h; the table's
 * contract is in kind.h).
 *
 * Invariants: the index holds only what the log made durable; every
 * applied payload is in the segments or queued for them (localseg); a
 * payload's operations are absolute, so the replay of a log over segments
 * that are already ahead of it converges on the same state.
 */
#include "conversation.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "log.h"
#include "progress.h"
#include "protocol/errors.h"
#include "uuid.h"

#define STORE_MAIN   0
#define ADOPTED_USER "unknown"

static struct conversations *of(struct store_kind *k)
{
	return KIND_CONTAINER(k, struct conversations, sk);
}

static struct conv_write *cw_of(struct store_write *w)
{
	return KIND_CONTAINER(w, struct conv_write, w);
}

/* ---- operations on the index (apply and replay) ---- */

struct apply_ctx {
	struct conversations *cv;
	char *msg;
	size_t n;
};

static int apply_op(void *arg, const struct logop *op)
{
	struct apply_ctx *a = arg;
	struct convindex *ix = &a->cv->ix;
	struct rec_session s;
	struct rec_message m;
	int ret;

	if (op->op == LOGOP_DEL) {
		if (!convindex_del_session(ix, op->key))
			convindex_del_message(ix, op->key);
		return 0;
	}
	if (op->len && op->payload[0] == REC_SESSION) {
		ret = rec_session_decode(op->payload, op->len, &s, a->msg,
					 a->n);
		if (ret == 0 && convindex_message(ix, op->key))
			convindex_del_message(ix, op->key);
		if (ret == 0)
			ret = convindex_put_session(ix, op->key, &s);
	} else {
		ret = rec_message_decode(op->payload, op->len, &m, a->msg,
					 a->n);
		if (ret == 0 && convindex_session(ix, op->key))
			convindex_del_session(ix, op->key);
		if (ret == 0)
			ret = convindex_put_message(ix, op->key, &m);
	}
	if (ret == -ENOMEM)
		errmsg_set(a->msg, a->n, "out of memory");
	return ret;
}

/* ---- a write ---- */

static int lock(struct store_kind *k, const struct store_write *w,
		struct kind_lock *out)
{
	const struct conv_write *cw = KIND_CONTAINER(w, struct conv_write, w);

	(void)k;
	if (cw->op == CONV_CREATE_SESSION)
		return 0; /* a new random id: nobody else can name it */
	out->slot = 0;
	out->key = cw->key;
	out->key_len = UUID_TEXT_LEN;
	return 1;
}

/* A new id that names no session and no message. */
static void fresh_id(const struct convindex *ix, uint8_t *id)
{
	do
		uuid_new(id);
	while (convindex_session(ix, id) || convindex_message(ix, id));
}

static bool put_session(struct store_kind *k, struct conv_write *cw,
			const uint8_t *id)
{
	struct rec_session r = {
		.user_id = cw->user_id,
		.user_len = cw->user_len,
		.created_at = store_timestamp(k),
		.meta = cw->op == CONV_CREATE_SESSION ? cw->meta : "{}",
		.meta_len = cw->op == CONV_CREATE_SESSION ? cw->meta_len : 2,
	};
	uint8_t *p =
		logpay_put(&cw->payload, STORE_MAIN, id, rec_session_size(&r));

	if (p)
		rec_session_encode(&r, p);
	return p != NULL;
}

static bool put_message(struct store_kind *k, struct conv_write *cw)
{
	struct rec_message r = {
		.role = cw->role,
		.created_at = store_timestamp(k),
		.content = cw->content,
		.content_len = cw->content_len,
		.meta = cw->meta,
		.meta_len = cw->meta_len,
	};
	uint8_t *p;

	memcpy(r.session, cw->session, REC_KEY);
	p = logpay_put(&cw->payload, STORE_MAIN, cw->id, rec_message_size(&r));
	if (p)
		rec_message_encode(&r, p);
	return p != NULL;
}

static int prepare(struct store_kind *k, struct store_write *w, char *msg,
		   size_t n)
{
	struct conversations *cv = of(k);
	struct conv_write *cw = cw_of(w);
	const struct conv_session *s;
	char text[UUID_TEXT_LEN + 1];
	bool ok = logpay_begin(&cw->payload, CONVERSATION_LOG_TAG);

	cw->created = cw->existed = false;
	cw->s = NULL;
	cw->m = NULL;
	switch (cw->op) {
	case CONV_CREATE_SESSION:
		fresh_id(&cv->ix, cw->session);
		memcpy(cw->id, cw->session, REC_KEY);
		ok = ok && put_session(k, cw, cw->session);
		break;
	case CONV_STORE_MESSAGE:
		s = convindex_session(&cv->ix, cw->session);
		if (!s && convindex_message(&cv->ix, cw->session)) {
			uuid_format(cw->session, text);
			snprintf(msg, n,
				 "session_id %s is the id of a message, not "
				 "of a session",
				 text);
			buf_done(&cw->payload);
			return RPC_INVALID_PARAMS;
		}
		if (!s && !cw->user_id) {
			snprintf(msg, n,
				 "session %s does not exist and no user_id "
				 "was given to create it (pass user_id or "
				 "call server.hello with an agent_id)",
				 cw->key);
			buf_done(&cw->payload);
			return RPC_INVALID_PARAMS;
		}
		if (!s) {
			cw->created = true;
			ok = ok && put_session(k, cw, cw->session);
		}
		fresh_id(&cv->ix, cw->id);
		ok = ok && put_message(k, cw);
		break;
	case CONV_DELETE_SESSION:
		s = convindex_session(&cv->ix, cw->session);
		if (!s) {
			buf_done(&cw->payload);
			return KIND_NOOP;
		}
		cw->existed = true;
		ok = ok && logpay_del(&cw->payload, STORE_MAIN, s->id);
		for (uint32_t i = 0; ok && i < s->n_msgs; i++)
			ok = logpay_del(&cw->payload, STORE_MAIN,
					s->msgs[i]->id);
		break;
	}
	if (!ok) {
		buf_done(&cw->payload);
		snprintf(msg, n, "out of memory");
		return RPC_INTERNAL_ERROR;
	}
	w->payload = cw->payload.data;
	w->payload_len = cw->payload.len;
	return KIND_LOG;
}

static void unprepare(struct store_kind *k, struct store_write *w)
{
	(void)k;
	buf_done(&cw_of(w)->payload);
}

static void report(struct conversations *cv, enum conv_change_what what,
		   const uint8_t *session, const struct conv_msg *m)
{
	struct conv_change ch = {what, session, m};

	store_changed(&cv->sk,
		      what == CONV_SESSION_DELETED ? KIND_DELETED : KIND_STORED,
		      &ch);
}

static void apply(struct store_kind *k, struct store_write *w)
{
	struct conversations *cv = of(k);
	struct conv_write *cw = cw_of(w);
	char msg[160];
	struct apply_ctx a = {cv, msg, sizeof(msg)};
	uint8_t *payload;
	size_t len;

	if (logpay_parse(w->payload, w->payload_len, CONVERSATION_LOG_TAG, 1,
			 apply_op, &a, msg, sizeof(msg)) < 0)
		/* Only memory can fail here; the log keeps the write, and
		 * the next start replays it. */
		log_err("conversations: applying a write: %s (restart "
			"vmemd to get it back from the log)",
			msg);
	switch (cw->op) {
	case CONV_CREATE_SESSION:
		cw->s = convindex_session(&cv->ix, cw->id);
		report(cv, CONV_SESSION_CREATED, cw->id, NULL);
		break;
	case CONV_STORE_MESSAGE:
		cw->s = convindex_session(&cv->ix, cw->session);
		cw->m = convindex_message(&cv->ix, cw->id);
		if (cw->created)
			report(cv, CONV_SESSION_CREATED, cw->session, NULL);
		if (cw->m)
			report(cv, CONV_MESSAGE_STORED, cw->session, cw->m);
		break;
	case CONV_DELETE_SESSION:
		report(cv, CONV_SESSION_DELETED, cw->session, NULL);
		break;
	}
	payload = (uint8_t *)buf_take(&cw->payload, &len);
	if (!localseg_take(&cv->seg, payload, len))
		log_err("conversations: out of memory queueing a write for "
			"the segments (the log keeps it until a restart)");
}

/* ---- start-up ---- */

static int replay(struct store_kind *k, const char *payload, size_t len,
		  char *msg, size_t n)
{
	struct conversations *cv = of(k);
	struct apply_ctx a = {cv, msg, n};
	int ret;

	ret = logpay_parse((const uint8_t *)payload, len, CONVERSATION_LOG_TAG,
			   1, apply_op, &a, msg, n);
	if (ret < 0)
		return ret;
	if (!localseg_copy(&cv->seg, payload, len)) {
		errmsg_set(msg, n, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* A record of the segments (in no particular order). */
static int load_cb(void *ctx, const uint8_t key[SEG_KEY], const void *payload,
		   size_t len)
{
	struct conversations *cv = ctx;
	struct logop op = {LOGOP_PUT, STORE_MAIN, key, payload, len};
	char msg[160];
	struct apply_ctx a = {cv, msg, sizeof(msg)};
	int ret = apply_op(&a, &op);

	if (ret < 0) {
		log_err("conversations: a segment record: %s", msg);
		return ret;
	}
	if (++cv->load_records % 65536 == 0 && progress_due())
		progress_say("reading conversations: %llu records",
			     (unsigned long long)cv->load_records);
	return 0;
}

int conversations_open(struct conversations *cv, uv_loop_t *loop,
		       const struct statedir *state, char *msg, size_t msglen)
{
	static const char *const stores[] = {"main"};
	static const seg_load_fn loads[] = {load_cb};

	int ret;

	memset(cv, 0, sizeof(*cv));
	cv->sk.kind = &conversation_kind;
	convindex_init(&cv->ix);
	ret = localseg_open(&cv->seg, loop, state, CONVERSATION_DIR, stores, 1,
			    CONVERSATION_LOG_TAG, NULL, loads, cv, msg, msglen);
	if (ret == 0 && cv->seg.last_error[0])
		log_warn("conversations: %s", cv->seg.last_error);
	return ret;
}

void conversations_done(struct conversations *cv)
{
	localseg_close(&cv->seg);
	convindex_done(&cv->ix);
}

/* The newest time of a session or a message, for the store's clock. */
static int64_t newest(const struct convindex *ix)
{
	return ix->head ? ix->head->updated_at : 0;
}

/*
 * After the replay: messages whose session record is missing (only a
 * damaged store leaves them) get a session of user "unknown", written to
 * the segments, logged and counted in health.
 */
static int load(struct store_kind *k, struct vmdir_load_report *rep,
		char *errmsg, size_t n)
{
	struct conversations *cv = of(k);
	const struct conv_session *s;
	struct buf b = {0};
	size_t len;
	uint8_t *p;

	(void)rep;
	store_timestamp_seen(k, newest(&cv->ix));
	if (cv->ix.n_recovered == 0)
		return 0;
	cv->n_adopted = convindex_adopt_recovered(&cv->ix, ADOPTED_USER,
						  strlen(ADOPTED_USER));
	log_warn("conversations: %zu sessions had messages but no session "
		 "record; they now belong to user_id \"%s\"",
		 cv->n_adopted, ADOPTED_USER);
	if (!logpay_begin(&b, CONVERSATION_LOG_TAG))
		goto oom;
	for (s = cv->ix.head; s; s = s->next) {
		struct rec_session r;

		if (!s->user || s->user->len != strlen(ADOPTED_USER) ||
		    memcmp(s->user->name, ADOPTED_USER, s->user->len) != 0)
			continue;
		r = (struct rec_session){s->user->name, s->user->len,
					 s->created_at, s->meta, s->meta_len};
		p = logpay_put(&b, STORE_MAIN, s->id, rec_session_size(&r));
		if (!p)
			goto oom;
		rec_session_encode(&r, p);
	}
	p = (uint8_t *)buf_take(&b, &len);
	if (!localseg_take(&cv->seg, p, len))
		goto oom;
	return 0;
oom:
	buf_done(&b);
	errmsg_set(errmsg, n, "out of memory");
	return -ENOMEM;
}

/* ---- materialisation ---- */

static size_t pending(const struct store_kind *k)
{
	return localseg_pending(
		&KIND_CONTAINER(k, struct conversations, sk)->seg);
}

static int snapshot(struct store_kind *k, void **snap)
{
	return localseg_snapshot(&of(k)->seg, snap);
}

static int write_segs(struct store_kind *k, void *snap, bool sync, char *errmsg,
		      size_t n)
{
	return localseg_write(&of(k)->seg, snap, sync, errmsg, n);
}

static void written(struct store_kind *k, void *snap, int rc)
{
	localseg_written(&of(k)->seg, snap, rc);
}

static int sync_segs(struct store_kind *k, char *errmsg, size_t n)
{
	return localseg_sync(&of(k)->seg, errmsg, n);
}

const struct kind conversation_kind = {
	.name = "conversation",
	.committed = false,
	.log_tag = CONVERSATION_LOG_TAG,
	.lock = lock,
	.prepare = prepare,
	.unprepare = unprepare,
	.apply = apply,
	.replay = replay,
	.load = load,
	.pending = pending,
	.snapshot = snapshot,
	.write = write_segs,
	.written = written,
	.sync = sync_segs,
};
