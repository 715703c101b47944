/*
 * Per-method request counters and latency distributions since start, for
 * server.stats. Latencies go into log-linear buckets (4 per power of two),
 * so a percentile is exact to within a quarter of its value and recording
 * costs a few instructions. Loop thread only.
 */
#ifndef VMEM_DAEMON_STATS_H
#define VMEM_DAEMON_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STATS_BUCKETS 256

struct method_stats {
	uint64_t count;
	uint64_t errors;
	uint64_t max_ns;
	uint32_t buckets[STATS_BUCKETS];
};

struct stats {
	struct method_stats *methods;
	size_t n;
};

/* 0 or -ENOMEM. */
int stats_init(struct stats *st, size_t n_methods);
void stats_done(struct stats *st);

/* One request of method i took ns nanoseconds; error: it failed. */
void stats_record(struct stats *st, size_t i, uint64_t ns, bool error);

/* The latency below which a fraction p (0..1) of the requests fell, in
 * nanoseconds (the upper bound of its bucket); 0 with no requests. */
uint64_t stats_percentile(const struct method_stats *ms, double p);

#endif
