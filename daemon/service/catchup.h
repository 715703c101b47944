/*
 * Keeping the search index up with the records: when slots become pending
 * (index.h), an idle handle brings their postings up to date a slice
 * (about 0.25 ms) per loop iteration until none is left, so indexing a big
 * write, or every decision loaded at start-up, never holds the loop.
 * Loop thread only.
 */
#ifndef VMEM_DAEMON_CATCHUP_H
#define VMEM_DAEMON_CATCHUP_H

#include <stdbool.h>
#include <uv.h>

#include "index.h"

struct catchup {
	uv_idle_t idle;
	struct index *ix;
	bool started;
};

/* Watch ix (borrowed, outlives the catch-up) and catch up with what is
 * pending already. 0 or a libuv error. */
int catchup_start(struct catchup *cu, uv_loop_t *loop, struct index *ix);

/* Stop (what is pending stays so). Idempotent. */
void catchup_stop(struct catchup *cu);

#endif
