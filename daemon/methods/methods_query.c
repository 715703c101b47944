/*
 * Query methods: axis ranges, the partial order and keyword search.
 * Results are spliced from the records' cached JSON, never re-serialised.
 * A read is answered in slices (call_reply_slices) through an index scan,
 * so however big it is it never holds the loop, its answer is never held
 * whole, and it is the index as it was when the read began, whatever is
 * written while it goes out.
 */
#include "methods.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/errors.h"
#include "query.h"
#include "search.h"

/* Slots looked at between two looks at the clock. */
#define WALK_STRIDE 4096
/* Units of search work between two looks at the clock. */
#define SEARCH_STRIDE 20000

/* Whether a slice begun at t0 (uv_hrtime) has had its time. */
static bool slice_over(uint64_t t0, const struct buf *out)
{
	return out->len >= SLICE_BYTES || uv_hrtime() - t0 >= SLICE_NS;
}

/* The optional "after" coordinate of a listing: true when acceptable
 * (*has says whether given), else answered with an error. */
static bool param_after(struct call *call, struct coord *after, bool *has)
{
	json_t *v = json_object_get(call->params, "after");
	char msg[VMEM_ERRMSG_LEN];

	*has = v && !json_is_null(v);
	if (*has &&
	    coord_from_json(v, call->d->limits.max_x, after, msg) != 0) {
		call_error(call, RPC_COORDINATE_VALIDATION, NULL, "after: %s",
			   msg);
		return false;
	}
	return true;
}

/* ---- ranges and the partial order ---- */

struct walk_read {
	struct index *ix;
	struct index_scan sc;
	struct query_walk w;
	bool opened; /* "[" written */
	bool any;    /* a record written */
};

static void walk_release(void *ctx)
{
	struct walk_read *r = ctx;

	index_scan_end(&r->sc);
	free(r);
}

/* The next records of the walk as a piece of a JSON array. */
static int walk_produce(struct call *call, void *ctx, struct buf *out)
{
	struct walk_read *r = ctx;
	uint64_t t0 = uv_hrtime();

	(void)call;
	if (!r->opened) {
		if (!buf_append(out, "[", 1))
			return -ENOMEM;
		r->opened = true;
	}
	while (!query_walk_done(&r->w)) {
		size_t budget = WALK_STRIDE;
		const struct record *rec;

		while ((rec = query_walk_next(&r->w, r->ix, &r->sc, &budget))) {
			if ((r->any && !buf_append(out, ",", 1)) ||
			    !buf_append(out, rec->json, rec->json_len))
				return -ENOMEM;
			r->any = true;
			if (out->len >= SLICE_BYTES)
				break;
		}
		/* Nothing before the walk's slot is read again. */
		index_scan_pass(&r->sc, r->w.slot);
		if (slice_over(t0, out))
			break;
	}
	if (r->sc.failed)
		return -ENOMEM;
	if (!query_walk_done(&r->w))
		return 0;
	return buf_append(out, "]", 1) ? 1 : -ENOMEM;
}

/* Answer the records of a walk, in slices if it is big. */
static int reply_walk(struct call *call, const struct query_walk *w)
{
	struct walk_read *r = calloc(1, sizeof(*r));

	if (!r) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	r->ix = &call->d->decisions.index;
	r->w = *w;
	index_scan_begin(r->ix, &r->sc);
	index_scan_pass(&r->sc, w->slot);
	return call_reply_slices(call, walk_produce, walk_release, r);
}

int decision_query_range(struct call *call)
{
	static const char *const allowed[] = {"x_range", "y_range", "z_range",
					      "limit",	 "after",   NULL};
	struct axis_range x, y, z;
	struct coord after;
	bool has_after;
	int64_t limit = 0;
	struct query_walk w;

	if (!param_only(call, allowed) || !param_range(call, "x_range", &x) ||
	    !param_range(call, "y_range", &y) ||
	    !param_range(call, "z_range", &z) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit) ||
	    !param_after(call, &after, &has_after))
		return CALL_DONE;
	query_walk_range(&w, &call->d->decisions.index, &x, &y, &z,
			 has_after ? &after : NULL, (size_t)limit);
	return reply_walk(call, &w);
}

int decision_query_partial_order(struct call *call)
{
	static const char *const allowed[] = {"x_threshold", "y_threshold",
					      "z_filter",    "limit",
					      "after",	     NULL};
	int max_x = call->d->limits.max_x;
	int xt, yt, zf;
	struct coord after;
	bool has_after;
	int64_t limit = 0;
	struct query_walk w;

	if (!param_only(call, allowed) ||
	    !param_threshold(call, "x_threshold", max_x + 1, 0, &xt) ||
	    !param_threshold(call, "y_threshold", VMEM_MAX_Y + 1, 0, &yt) ||
	    !param_threshold(call, "z_filter", VMEM_MAX_Z, INT32_MAX, &zf) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit) ||
	    !param_after(call, &after, &has_after))
		return CALL_DONE;
	query_walk_before(&w, &call->d->decisions.index, xt, yt, zf,
			  has_after ? &after : NULL, (size_t)limit);
	return reply_walk(call, &w);
}

/* ---- search ---- */

struct search_read {
	struct index *ix;
	struct index_scan sc;
	struct search_query *q;
	struct search_exec *e;
	char *term_json[SEARCH_TERMS_MAX]; /* each term as given, JSON */
	size_t n_terms;
	struct search_hit *hits; /* once evaluated */
	size_t n_hits, next;
	bool evaluated;
};

static void search_release(void *ctx)
{
	struct search_read *r = ctx;

	search_exec_free(r->e);
	search_query_free(r->q);
	for (size_t i = 0; i < r->n_terms; i++)
		free(r->term_json[i]);
	free(r->hits);
	index_scan_end(&r->sc);
	free(r);
}

/* One search hit: the decision with "score" and "matched_terms" added;
 * a term repeated (after folding) is listed once, as first given. */
static bool append_hit(struct buf *b, const struct record *r,
		       const struct search_hit *h, uint64_t unique,
		       char *const *term_json, size_t n_terms)
{
	char score[48];
	bool ok, first = true;

	snprintf(score, sizeof(score), ",\"score\":%u,\"matched_terms\":[",
		 h->score);
	ok = buf_append(b, r->json, r->json_len - 1) && buf_puts(b, score);
	for (size_t i = 0; ok && i < n_terms; i++) {
		if (!(h->matched & unique & ((uint64_t)1 << i)))
			continue;
		ok = (first || buf_append(b, ",", 1)) &&
		     buf_puts(b, term_json[i]);
		first = false;
	}
	return ok && buf_append(b, "]}", 2);
}

/* Evaluate the query a step at a time, then write its hits. */
static int search_produce(struct call *call, void *ctx, struct buf *out)
{
	struct search_read *r = ctx;
	/* Slots changed since the search began, or whose postings are not
	 * up to date, are judged on their text. */
	struct search_changes ch = {&r->sc, index_scan_changes_next,
				    index_scan_changes_text};
	uint64_t t0 = uv_hrtime();
	int rc;

	(void)call;
	while (!r->evaluated) {
		rc = search_exec_step(r->e, &ch, SEARCH_STRIDE);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			rc = search_exec_take(r->e, &r->hits, &r->n_hits);
			if (rc < 0)
				return rc;
			search_exec_free(r->e);
			r->e = NULL;
			r->evaluated = true;
			if (!buf_append(out, "[", 1))
				return -ENOMEM;
		} else if (slice_over(t0, out)) {
			return 0;
		}
	}
	for (; r->next < r->n_hits; r->next++) {
		const struct search_hit *h = &r->hits[r->next];
		const struct record *rec = index_scan_get(&r->sc, h->slot);

		if (!rec)
			return -EIO; /* not reached: a hit held a record */
		if ((r->next && !buf_append(out, ",", 1)) ||
		    !append_hit(out, rec, h, search_query_unique(r->q),
				r->term_json, r->n_terms))
			return -ENOMEM;
		if ((r->next & 63) == 63 && slice_over(t0, out)) {
			r->next++;
			return 0;
		}
	}
	if (r->sc.failed)
		return -ENOMEM;
	return buf_append(out, "]", 1) ? 1 : -ENOMEM;
}

int decision_search(struct call *call)
{
	static const char *const allowed[] = {"terms", "match_all",   "limit",
					      "after", "after_score", NULL};
	struct index *ix = &call->d->decisions.index;
	json_t *terms = json_object_get(call->params, "terms");
	const char *texts[SEARCH_TERMS_MAX];
	size_t lens[SEARCH_TERMS_MAX];
	struct search_read *r = NULL;
	size_t n_terms;
	bool match_all = false, has_after;
	int64_t limit = 0, after_score = 0;
	struct coord after;
	char msg[160];
	int rc;

	if (!param_only(call, allowed) ||
	    !param_bool(call, "match_all", &match_all) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit) ||
	    !param_after(call, &after, &has_after) ||
	    !param_int(call, "after_score", 1, SEARCH_TERMS_MAX, &after_score))
		return CALL_DONE;
	if (has_after != (after_score > 0)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "after and after_score go together (the coordinate "
			   "and score of the last result seen)");
		return CALL_DONE;
	}
	if (!terms || !json_is_array(terms)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "terms must be an array of strings");
		return CALL_DONE;
	}
	n_terms = json_array_size(terms);
	if (n_terms > SEARCH_TERMS_MAX) {
		call_error(call, RPC_QUERY, NULL,
			   "at most %d search terms are allowed",
			   SEARCH_TERMS_MAX);
		return CALL_DONE;
	}
	for (size_t i = 0; i < n_terms; i++) {
		json_t *t = json_array_get(terms, i);

		if (!json_is_string(t)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "terms[%zu] must be a string", i);
			return CALL_DONE;
		}
		texts[i] = json_string_value(t);
		lens[i] = json_string_length(t);
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		goto oom;
	r->ix = ix;
	index_scan_begin(ix, &r->sc);
	rc = search_query_parse(texts, lens, n_terms, &r->q, msg, sizeof(msg));
	if (rc == -EINVAL) {
		call_error(call, RPC_QUERY, NULL, "%s", msg);
		search_release(r);
		return CALL_DONE;
	}
	if (rc < 0)
		goto oom;
	for (size_t i = 0; i < n_terms; i++) {
		r->term_json[i] = json_dumps(json_array_get(terms, i),
					     JSON_ENCODE_ANY | JSON_COMPACT);
		if (!r->term_json[i])
			goto oom;
		r->n_terms++;
	}
	if (search_exec_new(ix->search, r->q, match_all, (size_t)limit,
			    index_text, ix, &r->e) < 0)
		goto oom;
	/* A page: only the hits ranked after the last one seen. */
	if (has_after)
		search_exec_after(r->e, (unsigned)after_score,
				  index_slot(ix, &after));
	return call_reply_slices(call, search_produce, search_release, r);
oom:
	if (r)
		search_release(r);
	call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory searching");
	return CALL_DONE;
}
