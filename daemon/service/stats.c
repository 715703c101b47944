/* Log-linear latency buckets: index = 4 * msb + the next two bits. */
#include "stats.h"

#include <errno.h>
#include <stdlib.h>

int stats_init(struct stats *st, size_t n_methods)
{
	st->n = n_methods;
	st->methods = calloc(n_methods ? n_methods : 1, sizeof(*st->methods));
	return st->methods ? 0 : -ENOMEM;
}

void stats_done(struct stats *st)
{
	free(st->methods);
	st->methods = NULL;
	st->n = 0;
}

static unsigned bucket_of(uint64_t ns)
{
	unsigned msb;

	if (ns < 4)
		return (unsigned)ns;
	msb = 63u - (unsigned)__builtin_clzll(ns);
	return msb * 4 + (unsigned)((ns >> (msb - 2)) & 3);
}

/* The largest value that falls into bucket b. */
static uint64_t bucket_top(unsigned b)
{
	unsigned msb = b / 4, sub = b % 4;

	if (b < 4)
		return b;
	return (((uint64_t)(4 + sub + 1)) << (msb - 2)) - 1;
}

void stats_record(struct stats *st, size_t i, uint64_t ns, bool error)
{
	struct method_stats *ms;

	if (i >= st->n)
		return;
	ms = &st->methods[i];
	ms->count++;
	ms->errors += error;
	if (ns > ms->max_ns)
		ms->max_ns = ns;
	ms->buckets[bucket_of(ns)]++;
}

uint64_t stats_percentile(const struct method_stats *ms, double p)
{
	uint64_t want, seen = 0;

	if (!ms->count)
		return 0;
	want = (uint64_t)(p * (double)ms->count);
	if (want >= ms->count)
		want = ms->count - 1;
	for (unsigned b = 0; b < STATS_BUCKETS; b++) {
		seen += ms->buckets[b];
		if (seen > want) {
			uint64_t top = bucket_top(b);

			return top < ms->max_ns ? top : ms->max_ns;
		}
	}
	return ms->max_ns;
}
