/*
 * The daemon as a whole: one per working tree, owned by main() and shared
 * by the server, the connections and the method handlers through a
 * pointer. Loop thread only.
 */
#ifndef VMEM_DAEMON_DAEMON_H
#define VMEM_DAEMON_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "catchup.h"
#include "conflicts.h"
#include "conversation.h"
#include "decision.h"
#include "document.h"
#include "experience.h"
#include "gitq.h"
#include "leases.h"
#include "life.h"
#include "repo.h"
#include "server.h"
#include "stats.h"
#include "store.h"
#include "subs.h"
#include "trace.h"
#include "trim.h"
#include "watch.h"
#include "vmdir.h"

#define VMEMD_VERSION "0.1.0"

struct limits {
	size_t max_line;
	size_t max_batch;
	size_t max_connections;
	size_t output_backlog;
	size_t max_depth;
	unsigned line_deadline_ms; /* to finish a line once begun */
	int max_x;
	unsigned commit_delay_ms;
	unsigned commit_max_batch;
	unsigned idle_exit_s;		 /* in force: 0 never */
	uint32_t embedding_dim;		 /* numbers per document embedding */
	uint64_t experience_shard_bytes; /* an agent's day's shard, at most */
};

struct daemon {
	uv_loop_t *loop;
	struct limits limits;
	struct repo repo;
	struct store store;
	struct decisions decisions;	/* the decision kind, in the store */
	struct conflicts conflicts;	/* git conflicts, git having the tree */
	struct experiences experiences; /* the experience kind, likewise */
	/* The local kinds (issue 15), in the store. */
	struct conversations conversations;
	struct documents documents;
	struct trace_sink *trace; /* --trace-file; NULL: no tracing */
	struct gitq gitq;
	struct leases leases;
	struct subs subs;
	struct watch watch;
	struct life life;   /* idle exit, removed tree */
	struct stats stats; /* per method of the method table */
	struct server server;
	struct trim trim;	/* freed memory back to the system at rest */
	struct catchup catchup; /* the search index after the records */
	struct vmdir_load_report loaded; /* what start-up and every scan
					    since quarantined */
	uint64_t started_ms;		 /* uv_now at start */
	uint64_t stop_started_ms;
	uint64_t flush_started_ms; /* of the store, during a stop; 0: not yet */
	uint64_t flush_errors;	   /* the store's n_errors when it began */
	bool stopping;
	bool leaving; /* the tree is gone: no flush (daemon_leave) */
	int exit_code;
};

/* Begin a graceful stop: stop accepting, answer what is buffered, flush
 * the store, then leave the loop. Safe to call more than once. When the
 * tree turns out to be gone, it becomes daemon_leave. */
void daemon_stop(struct daemon *d);

/*
 * Leave now, the tree being gone: stop accepting, close every connection,
 * wait only for the jobs already running, then leave the loop (exit 0).
 * Nothing is written to files or committed; the write-ahead log keeps
 * every acknowledged write. Safe to call more than once, and during a
 * stop.
 */
void daemon_leave(struct daemon *d);

#endif
