/*
 * The materialisation of a local record kind (sessions and messages,
 * documents): what the kind table's writer functions (kind.h: pending,
 * snapshot, write, written, sync) do for a kind whose records stay under
 * <gitdir>/vmem, in one or more segment stores (write/segment) of one
 * directory of the state directory.
 *
 * The kind hands over each applied write's log payload (localrec.h: a
 * list of absolute operations, each naming its store); a writer pass
 * appends every operation to its store, unsynced; the checkpoint's sync
 * fdatasyncs every store, after which the log may forget them. On a
 * failed pass the payloads are handed back and written again by the next
 * one (puts and deletes are absolute, so writing twice is harmless).
 *
 * Compaction, in the background: after a pass, a store whose sealed
 * segment is over half dead (or whose files hold over 1.3 times the live
 * records) gets a compaction plan (segment.h); the plan runs on the
 * thread pool beside the appends, and the next pass (one is asked for)
 * takes its result. Plans and results are made and taken inside writer
 * passes, which the store runs one at a time, so a segment store only
 * ever has one owner thread at a time.
 *
 * Threads: localseg_open and localseg_close at start-up and exit; write
 * and sync on the pool (inside the store's writer jobs); the rest on the
 * loop.
 */
#ifndef VMEM_DAEMON_LOCALSEG_H
#define VMEM_DAEMON_LOCALSEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "segment.h"
#include "statedir.h"

#define LOCALSEG_STORES 2

/* A log payload waiting for a writer pass (owned). */
struct localseg_item {
	uint8_t *payload;
	size_t len;
};

struct localseg {
	uv_loop_t *loop;
	uint8_t tag; /* of the kind's log payloads */
	unsigned n_stores;
	struct statedir dir; /* <gitdir>/vmem/<name> */
	struct statedir sub[LOCALSEG_STORES];
	struct segstore *st[LOCALSEG_STORES];
	struct seg_opts opts;

	/* Payloads applied, not yet handed to a pass (the loop's). */
	struct localseg_item *items;
	size_t n_items, cap_items;

	/* Compaction: a plan made by a pass (in the snapshot it came back
	 * with), running on the pool, then done and waiting for a pass. */
	struct seg_compact *plan;
	unsigned plan_store;
	bool compacting; /* planned or running, not yet taken back */
	bool compact_done;
	int compact_rc;
	char compact_msg[160];
	uv_work_t compact_req;
	uint64_t compactions;

	/* As of the last pass (the loop's copy). */
	struct seg_stats stats[LOCALSEG_STORES];
	struct seg_report report[LOCALSEG_STORES]; /* what opening found */
	char last_error[256];
};

/*
 * Open (creating them) the directory name of state and in it the stores
 * named stores[0..n-1] (with options o; NULL: the defaults), each read
 * through load[i] (segment.h: a key's current payload) with ctx. Blocking, at
 * start-up. 0 or -errno with msg; localseg_close cleans up either way.
 */
int localseg_open(struct localseg *ls, uv_loop_t *loop,
		  const struct statedir *state, const char *name,
		  const char *const *stores, unsigned n, uint8_t tag,
		  const struct seg_opts *o, const seg_load_fn *load, void *ctx,
		  char *msg, size_t msglen);

/* Release everything (after the loop's last run). */
void localseg_close(struct localseg *ls);

/* An applied write's log payload, taken (freed by localseg). false:
 * out of memory, the payload is freed and the write is lost to the
 * segments until the log replays it (the kind then says so). */
bool localseg_take(struct localseg *ls, uint8_t *payload, size_t len);

/* A payload to copy (a replay: the log keeps its own). */
bool localseg_copy(struct localseg *ls, const void *payload, size_t len);

/* ---- the kind table's writer functions (kind.h) ---- */

size_t localseg_pending(const struct localseg *ls);
int localseg_snapshot(struct localseg *ls, void **snap);
int localseg_write(struct localseg *ls, void *snap, bool sync, char *msg,
		   size_t msglen);
void localseg_written(struct localseg *ls, void *snap, int rc);
int localseg_sync(struct localseg *ls, char *msg, size_t msglen);

/* Totals of the stores as of the last pass. */
void localseg_stats(const struct localseg *ls, struct seg_stats *sum);

#endif
