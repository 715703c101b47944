/*
 * Giving freed memory back to the system while the daemon rests. glibc
 * keeps what the daemon frees inside its heap: a load, a big answer or a
 * commit leaves megabytes of free chunks there, resident for good. When a
 * tick of a 2-second timer finds the process has worked since the last
 * trim (50 ms of CPU or more) but rested during the tick (under 10 ms),
 * malloc_trim returns those pages, on the thread pool. Loop thread only.
 */
#ifndef VMEM_DAEMON_TRIM_H
#define VMEM_DAEMON_TRIM_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct trim {
	uv_timer_t timer;
	uv_work_t work;
	uint64_t cpu_tick; /* process CPU ns at the last tick */
	uint64_t cpu_trim; /* ... when the last trim ended */
	bool running;	   /* a trim is on the pool */
	bool started;
};

/* Start the timer; 0 or a libuv error. It never keeps the loop running. */
int trim_start(struct trim *t, uv_loop_t *loop);

/* Stop the timer (a trim on the pool finishes). Idempotent. */
void trim_stop(struct trim *t);

#endif
