/*
 * Fuzz harness of jsonb containment and its postings index
 * (daemon/find/jsonfilter.c). Input: lines of JSON texts; the last one is
 * the filter, the others records (slot = line number). Oracle: the index's
 * matches are exactly the records that jsonb_contains says contain the
 * filter, before and after half the records are removed; every record
 * contains itself; removing everything leaves no posting.
 */
#include "fuzz.h"

#include "jsonfilter.h"

#include <errno.h>
#include <string.h>

#define RECS_MAX 32

static json_t *recs[RECS_MAX];

static const json_t *value_of(void *ctx, uint32_t slot)
{
	(void)ctx;
	FUZZ_CHECK(slot < RECS_MAX && recs[slot]);
	return recs[slot];
}

static void check(struct jfindex *ix, const json_t *f, size_t n)
{
	uint32_t *ids = NULL;
	size_t got = 0, k = 0;
	int rc;

	rc = jfindex_match(ix, f, value_of, NULL, &ids, &got);
	if (rc == -EINVAL) {
		FUZZ_CHECK(jsonfilter_check(f, NULL, 0) == -EINVAL);
		return;
	}
	FUZZ_CHECK(rc == 0);
	for (size_t i = 0; i < n; i++) {
		if (!recs[i] || !jsonb_contains(recs[i], f))
			continue;
		FUZZ_CHECK(k < got && ids[k] == i);
		k++;
	}
	FUZZ_CHECK(k == got);
	free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size, *nl;
	json_t *texts[RECS_MAX + 1];
	struct jfindex *ix;
	size_t n = 0, i;
	json_t *f;

	while (p < end && n < RECS_MAX + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		texts[n] = json_loadb(p, (size_t)(nl - p),
				      JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
				      NULL);
		if (texts[n])
			n++;
		p = nl + 1;
	}
	if (n == 0)
		return 0;
	f = texts[--n];
	ix = jfindex_new();
	FUZZ_CHECK(ix != NULL);
	memset(recs, 0, sizeof(recs));
	for (i = 0; i < n; i++) {
		if (jfindex_add(ix, (uint32_t)i, texts[i]) == 0) {
			recs[i] = texts[i];
			FUZZ_CHECK(jsonb_contains(recs[i], recs[i]));
		}
	}
	check(ix, f, n);
	for (i = 0; i < n; i += 2) {
		if (recs[i])
			jfindex_remove(ix, (uint32_t)i, recs[i]);
		recs[i] = NULL;
	}
	check(ix, f, n);
	for (i = 1; i < n; i += 2)
		if (recs[i])
			jfindex_remove(ix, (uint32_t)i, recs[i]);
	FUZZ_CHECK(jfindex_postings(ix) == 0);
	jfindex_free(ix);
	for (i = 0; i < n; i++)
		json_decref(texts[i]);
	json_decref(f);
	return 0;
}
