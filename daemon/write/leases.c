/*
 * Leases over the coordinate locks. Every lease, pending or granted, is on
 * one list; the expiry timer is armed for the earliest granted one (a
 * list scan: leases are few and short-lived).
 */
#include "leases.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int leases_init(struct leases *ls, uv_loop_t *loop, struct locks *locks)
{
	int rc;

	memset(ls, 0, sizeof(*ls));
	ls->loop = loop;
	ls->locks = locks;
	rc = uv_timer_init(loop, &ls->timer);
	if (rc < 0)
		return rc;
	ls->timer.data = ls;
	ls->open = true;
	return 0;
}

static void unlink_lease(struct leases *ls, struct lease *l)
{
	if (l->prev)
		l->prev->next = l->next;
	else
		ls->head = l->next;
	if (l->next)
		l->next->prev = l->prev;
}

static void lease_free(struct lease *l)
{
	free(l->slots);
	free(l);
}

static void expiry_cb(uv_timer_t *t);

static void arm_expiry(struct leases *ls)
{
	uint64_t now = uv_now(ls->loop), first = UINT64_MAX;

	for (struct lease *l = ls->head; l; l = l->next)
		if (l->granted && l->expires_ms < first)
			first = l->expires_ms;
	if (first == UINT64_MAX)
		uv_timer_stop(&ls->timer);
	else
		uv_timer_start(&ls->timer, expiry_cb,
			       first > now ? first - now : 0, 0);
}

/* End a lease: give its coordinates back (or stop waiting for them). */
static void end_lease(struct leases *ls, struct lease *l)
{
	unlink_lease(ls, l);
	locks_cancel(ls->locks, &l->lock);
	lease_free(l);
}

static void expiry_cb(uv_timer_t *t)
{
	struct leases *ls = t->data;
	uint64_t now = uv_now(ls->loop);
	struct lease *l = ls->head, *next;

	for (; l; l = next) {
		next = l->next;
		if (l->granted && l->expires_ms <= now) {
			end_lease(ls, l);
			next = ls->head; /* hand-overs may have changed it */
		}
	}
	arm_expiry(ls);
}

static void locked_cb(struct lock_set *set, int status)
{
	struct lease *l =
		(struct lease *)((char *)set - offsetof(struct lease, lock));
	struct leases *ls = l->leases;

	if (status == 0) {
		/* The loop's cached time may lag the wall clock read next:
		 * refresh it, so the lease never ends before expires_at. */
		uv_update_time(ls->loop);
		l->granted = true;
		l->expires_ms = uv_now(ls->loop) + l->ttl_ms;
		l->expires_at_us = wall_us() + (int64_t)l->ttl_ms * 1000;
		arm_expiry(ls);
		l->cb(l->arg, 0, l);
		return;
	}
	unlink_lease(ls, l);
	l->cb(l->arg, status, l);
	lease_free(l);
}

int leases_acquire(struct leases *ls, const void *owner, const size_t *slots,
		   size_t n, uint64_t timeout_ms, uint64_t ttl_ms, lease_fn cb,
		   void *arg)
{
	struct lease *l;

	if (!ls->open) {
		cb(arg, -ECANCELED, NULL);
		return 0;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->slots = malloc(n * sizeof(*slots));
	if (!l->slots) {
		free(l);
		return -ENOMEM;
	}
	memcpy(l->slots, slots, n * sizeof(*slots));
	snprintf(l->token, sizeof(l->token), "lease-%" PRIu64, ++ls->last_id);
	l->owner = owner;
	l->leases = ls;
	l->ttl_ms = ttl_ms;
	l->cb = cb;
	l->arg = arg;
	l->next = ls->head;
	if (ls->head)
		ls->head->prev = l;
	ls->head = l;
	l->lock.slots = l->slots;
	l->lock.n = n;
	l->lock.owner = owner;
	l->lock.kind = LOCKS_LEASE;
	l->lock.timeout_ms = timeout_ms;
	l->lock.cb = locked_cb;
	locks_acquire(ls->locks, &l->lock);
	return 0;
}

bool leases_release(struct leases *ls, const void *owner, const char *token)
{
	for (struct lease *l = ls->head; l; l = l->next) {
		if (l->granted && l->owner == owner &&
		    strcmp(l->token, token) == 0) {
			end_lease(ls, l);
			arm_expiry(ls);
			return true;
		}
	}
	return false;
}

/* End the leases of owner (of everyone when owner is NULL); pending ones
 * hear -ECANCELED. */
static void drop(struct leases *ls, const void *owner)
{
	struct lease *l = ls->head, *next;

	for (; l; l = next) {
		next = l->next;
		if (owner && l->owner != owner)
			continue;
		if (!l->granted) {
			unlink_lease(ls, l);
			locks_cancel(ls->locks, &l->lock);
			l->cb(l->arg, -ECANCELED, l);
			lease_free(l);
		} else {
			end_lease(ls, l);
		}
		next = ls->head; /* callbacks may have changed the list */
	}
	arm_expiry(ls);
}

void leases_drop_owner(struct leases *ls, const void *owner)
{
	if (ls->open)
		drop(ls, owner);
}

void leases_close(struct leases *ls)
{
	if (!ls->open)
		return;
	ls->open = false; /* acquisitions from the callbacks fail at once */
	drop(ls, NULL);
	uv_close((uv_handle_t *)&ls->timer, NULL);
}

size_t leases_count(const struct leases *ls)
{
	size_t n = 0;

	for (const struct lease *l = ls->head; l; l = l->next)
		n += l->granted;
	return n;
}
