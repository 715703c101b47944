/* The rest-time trim (see trim.h). */
#include "trim.h"

#include <malloc.h>
#include <time.h>

#define TICK_MS	  2000
#define WORKED_NS (50 * 1000 * 1000)
#define RESTED_NS (10 * 1000 * 1000)

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void trim_work_cb(uv_work_t *req)
{
	(void)req;
	malloc_trim(0);
}

static void trim_after_cb(uv_work_t *req, int status)
{
	struct trim *t = req->data;

	(void)status;
	t->running = false;
	t->cpu_trim = t->cpu_tick = cpu_ns();
}

static void tick_cb(uv_timer_t *h)
{
	struct trim *t = h->data;
	uint64_t now = cpu_ns();

	if (!t->running && now - t->cpu_tick < RESTED_NS &&
	    now - t->cpu_trim >= WORKED_NS &&
	    uv_queue_work(h->loop, &t->work, trim_work_cb, trim_after_cb) == 0)
		t->running = true;
	t->cpu_tick = now;
}

int trim_start(struct trim *t, uv_loop_t *loop)
{
	int rc = uv_timer_init(loop, &t->timer);

	if (rc < 0)
		return rc;
	t->timer.data = t;
	t->work.data = t;
	t->cpu_tick = cpu_ns();
	t->cpu_trim = 0;
	t->running = false;
	t->started = true;
	uv_unref((uv_handle_t *)&t->timer);
	return uv_timer_start(&t->timer, tick_cb, TICK_MS, TICK_MS);
}

void trim_stop(struct trim *t)
{
	if (t->started)
		uv_timer_stop(&t->timer);
	t->started = false;
}
