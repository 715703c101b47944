/*
 * Per-coordinate locks and leases (see locks.h). One timer serves all
 * waiters: it is armed for the earliest deadline of the time-ordered list,
 * so a waiting set needs no handle of its own (nothing to close before
 * its owner is freed).
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

/* Take a waiting set out of its slot's queue and of the time list. */
static void unqueue(struct locks *l, struct lock_set *set)
{
	struct lock_slot *s = &l->slots[set->slots[set->taken]];
	struct lock_set **p = &s->head;
	struct lock_set *prev = NULL;

	while (*p && *p != set) {
		prev = *p;
		p = &(*p)->next_in_slot;
	}
	if (*p) {
		*p = set->next_in_slot;
		if (s->tail == set)
			s->tail = prev;
	}
	set->next_in_slot = NULL;

	if (set->prev_by_time)
		set->prev_by_time->next_by_time = set->next_by_time;
	else
		l->waiting = set->next_by_time;
	if (set->next_by_time)
		set->next_by_time->prev_by_time = set->prev_by_time;
	set->prev_by_time = set->next_by_time = NULL;
	set->waiting = false;
}

static void enqueue(struct locks *l, struct lock_set *set)
{
	struct lock_slot *s = &l->slots[set->slots[set->taken]];
	struct lock_set **p = &l->waiting;
	struct lock_set *prev = NULL;

	set->waiting = true;
	set->next_in_slot = NULL;
	if (s->tail)
		s->tail->next_in_slot = set;
	else
		s->head = set;
	s->tail = set;

	while (*p && (*p)->deadline_ms <= set->deadline_ms) {
		prev = *p;
		p = &(*p)->next_by_time;
	}
	set->prev_by_time = prev;
	set->next_by_time = *p;
	if (*p)
		(*p)->prev_by_time = set;
	*p = set;
	if (l->waiting == set)
		arm_timer(l);
}

static bool free_for(const struct lock_slot *s, const struct lock_set *set)
{
	if (s->held)
		return false;
	return !s->lease_owner ||
	       (set->kind == LOCKS_WRITE && s->lease_owner == set->owner);
}

static void take(struct lock_slot *s, struct lock_set *set)
{
	if (set->kind == LOCKS_WRITE)
		s->held = true;
	else
		s->lease_owner = set->owner;
	set->taken++;
}

/* Take the set's slots from slots[taken] on while they are free; queue
 * for the first that is not, or report success. */
static void advance(struct locks *l, struct lock_set *set)
{
	while (set->taken < set->n) {
		struct lock_slot *s = &l->slots[set->slots[set->taken]];
		/* The leaseholder's write passes the queue: everyone in it
		 * waits for the lease to end, which may need this write. */
		bool passes = set->kind == LOCKS_WRITE &&
			      s->lease_owner == set->owner;

		if (!free_for(s, set) || (s->head && !passes)) {
			enqueue(l, set);
			return;
		}
		take(s, set);
	}
	set->cb(set, 0);
}

static void give_back(struct locks *l, struct lock_set *set);

/* The waiter to serve next: the head of the queue, or the first write of
 * the leaseholder (which passes the others, see advance); NULL if none
 * can take the slot now. */
static struct lock_set *next_to_serve(const struct lock_slot *s)
{
	if (s->head && free_for(s, s->head))
		return s->head;
	if (!s->lease_owner || s->held)
		return NULL;
	for (struct lock_set *set = s->head; set; set = set->next_in_slot)
		if (set->kind == LOCKS_WRITE && set->owner == s->lease_owner)
			return set;
	return NULL;
}

/* A slot became freer: hand it on for as long as a waiter can take it. */
static void grant(struct locks *l, size_t slot)
{
	struct lock_slot *s = &l->slots[slot];
	struct lock_set *set;

	while ((set = next_to_serve(s))) {
		unqueue(l, set);
		arm_timer(l);
		take(s, set);
		advance(l, set);
	}
}

static void give_back(struct locks *l, struct lock_set *set)
{
	size_t n = set->taken;

	set->taken = 0;
	for (size_t i = 0; i < n; i++) {
		struct lock_slot *s = &l->slots[set->slots[i]];

		if (set->kind == LOCKS_WRITE)
			s->held = false;
		else
			s->lease_owner = NULL;
		grant(l, set->slots[i]);
	}
}

static void timer_cb(uv_timer_t *t)
{
	struct locks *l = t->data;
	uint64_t now = uv_now(l->loop);

	while (l->waiting && l->waiting->deadline_ms <= now) {
		struct lock_set *set = l->waiting;
		size_t at = set->taken;

		unqueue(l, set);
		give_back(l, set);
		set->taken = at; /* tells cb which slot it waited for */
		set->cb(set, -ETIMEDOUT);
	}
	arm_timer(l);
}

void locks_done(struct locks *l)
{
	if (!l->slots)
		return;
	while (l->waiting) {
		struct lock_set *set = l->waiting;

		unqueue(l, set);
		set->taken = 0;
		set->cb(set, -ECANCELED);
	}
	uv_close((uv_handle_t *)&l->timer, NULL);
	free(l->slots);
	l->slots = NULL;
}

static int cmp_slot(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

size_t locks_sort(size_t *slots, size_t n)
{
	size_t m = 0;

	qsort(slots, n, sizeof(*slots), cmp_slot);
	for (size_t i = 0; i < n; i++)
		if (m == 0 || slots[m - 1] != slots[i])
			slots[m++] = slots[i];
	return m;
}

void locks_acquire(struct locks *l, struct lock_set *set)
{
	set->taken = 0;
	set->waiting = false;
	set->next_in_slot = set->prev_by_time = set->next_by_time = NULL;
	set->deadline_ms = uv_now(l->loop) + set->timeout_ms;
	advance(l, set);
}

void locks_release(struct locks *l, struct lock_set *set)
{
	give_back(l, set);
}

void locks_cancel(struct locks *l, struct lock_set *set)
{
	if (set->waiting) {
		unqueue(l, set);
		arm_timer(l);
	}
	give_back(l, set);
}

const void *locks_leaseholder(const struct locks *l, size_t slot)
{
	return l->slots[slot].lease_owner;
}
