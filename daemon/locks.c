/*
 * Per-coordinate FIFO locks with deadlines. One timer serves all waiters:
 * it is armed for the earliest deadline of the time-ordered list, so a
 * waiter needs no handle of its own (nothing to close before its owner is
 * freed).
 */
#include "locks.h"

#include <errno.h>
#include <stdlib.h>

int locks_init(struct locks *l, uv_loop_t *loop, size_t n_slots)
{
	int rc;

	l->loop = loop;
	l->n_slots = n_slots;
	l->waiting = NULL;
	l->slots = calloc(n_slots, sizeof(*l->slots));
	if (!l->slots)
		return -ENOMEM;
	rc = uv_timer_init(loop, &l->timer);
	l->timer.data = l;
	if (rc < 0) {
		free(l->slots);
		l->slots = NULL;
	}
	return rc;
}

static void unlink_by_time(struct locks *l, struct lock_waiter *w)
{
	if (w->prev_by_time)
		w->prev_by_time->next_by_time = w->next_by_time;
	else
		l->waiting = w->next_by_time;
	if (w->next_by_time)
		w->next_by_time->prev_by_time = w->prev_by_time;
	w->prev_by_time = w->next_by_time = NULL;
}

static void unlink_from_slot(struct lock_slot *s, struct lock_waiter *w)
{
	struct lock_waiter **p = &s->head;
	struct lock_waiter *prev = NULL;

	while (*p && *p != w) {
		prev = *p;
		p = &(*p)->next_in_slot;
	}
	if (!*p)
		return;
	*p = w->next_in_slot;
	if (s->tail == w)
		s->tail = prev;
	w->next_in_slot = NULL;
}

static void timer_cb(uv_timer_t *t);

static void arm_timer(struct locks *l)
{
	uint64_t now = uv_now(l->loop);

	if (!l->waiting) {
		uv_timer_stop(&l->timer);
		return;
	}
	uv_timer_start(&l->timer, timer_cb,
		       l->waiting->deadline_ms > now
			       ? l->waiting->deadline_ms - now
			       : 0,
		       0);
}

static void timer_cb(uv_timer_t *t)
{
	struct locks *l = t->data;
	uint64_t now = uv_now(l->loop);

	while (l->waiting && l->waiting->deadline_ms <= now) {
		struct lock_waiter *w = l->waiting;

		unlink_by_time(l, w);
		unlink_from_slot(&l->slots[w->slot], w);
		w->cb(w, -ETIMEDOUT);
	}
	arm_timer(l);
}

void locks_done(struct locks *l)
{
	if (!l->slots)
		return;
	while (l->waiting) {
		struct lock_waiter *w = l->waiting;

		unlink_by_time(l, w);
		unlink_from_slot(&l->slots[w->slot], w);
		w->cb(w, -ECANCELED);
	}
	uv_close((uv_handle_t *)&l->timer, NULL);
	free(l->slots);
	l->slots = NULL;
}

bool locks_try(struct locks *l, size_t slot)
{
	if (l->slots[slot].held)
		return false;
	l->slots[slot].held = true;
	return true;
}

void locks_wait(struct locks *l, size_t slot, uint64_t timeout_ms,
		struct lock_waiter *w, lock_granted_fn cb)
{
	struct lock_slot *s = &l->slots[slot];
	struct lock_waiter **p = &l->waiting;
	struct lock_waiter *prev = NULL;

	w->slot = slot;
	w->cb = cb;
	w->deadline_ms = uv_now(l->loop) + timeout_ms;
	w->next_in_slot = NULL;
	if (s->tail)
		s->tail->next_in_slot = w;
	else
		s->head = w;
	s->tail = w;

	while (*p && (*p)->deadline_ms <= w->deadline_ms) {
		prev = *p;
		p = &(*p)->next_by_time;
	}
	w->prev_by_time = prev;
	w->next_by_time = *p;
	if (*p)
		(*p)->prev_by_time = w;
	*p = w;
	if (l->waiting == w)
		arm_timer(l);
}

void locks_release(struct locks *l, size_t slot)
{
	struct lock_slot *s = &l->slots[slot];
	struct lock_waiter *w = s->head;

	if (!w) {
		s->held = false;
		return;
	}
	/* Ownership passes straight to the first waiter. */
	s->head = w->next_in_slot;
	if (!s->head)
		s->tail = NULL;
	w->next_in_slot = NULL;
	unlink_by_time(l, w);
	arm_timer(l);
	w->cb(w, 0);
}
