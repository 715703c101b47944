/*
 * Query methods: axis ranges, the partial order and keyword search. Results
 * are spliced from the records' cached JSON, never re-serialised.
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

/* Answer with a JSON array of records, spliced without re-parsing. */
static void reply_records(struct call *call, const struct record *const *recs,
			  size_t n)
{
	struct buf b = {0};
	bool ok = buf_append(&b, "[", 1);

	for (size_t i = 0; ok && i < n; i++)
		ok = (i == 0 || buf_append(&b, ",", 1)) &&
		     buf_append(&b, recs[i]->json, recs[i]->json_len);
	if (ok && buf_append(&b, "]", 1))
		call_reply_raw(call, b.data, b.len);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	buf_done(&b);
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

int decision_query_range(struct call *call)
{
	static const char *const allowed[] = {"x_range", "y_range", "z_range",
					      "limit",	 "after",   NULL};
	struct axis_range x, y, z;
	struct coord after;
	json_t *after_v = json_object_get(call->params, "after");
	int64_t limit = 0;
	const struct record **recs;
	size_t n;
	char msg[VMEM_ERRMSG_LEN];

	if (!param_only(call, allowed) || !param_range(call, "x_range", &x) ||
	    !param_range(call, "y_range", &y) ||
	    !param_range(call, "z_range", &z) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit))
		return CALL_DONE;
	if (after_v && !json_is_null(after_v) &&
	    coord_from_json(after_v, call->d->limits.max_x, &after, msg) != 0) {
		call_error(call, RPC_COORDINATE_VALIDATION, NULL, "after: %s",
			   msg);
		return CALL_DONE;
	}
	if (query_range(&call->d->decisions.index, &x, &y, &z,
			after_v && !json_is_null(after_v) ? &after : NULL,
			(size_t)limit, &recs, &n) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	reply_records(call, recs, n);
	free(recs);
	return CALL_DONE;
}

int decision_query_partial_order(struct call *call)
{
	static const char *const allowed[] = {"x_threshold", "y_threshold",
					      "z_filter",    "limit",
					      "after",	     NULL};
	int max_x = call->d->limits.max_x;
	int xt, yt, zf;
	const struct record **recs;
	struct coord after;
	bool has_after;
	int64_t limit = 0;
	size_t n;

	if (!param_only(call, allowed) ||
	    !param_threshold(call, "x_threshold", max_x + 1, 0, &xt) ||
	    !param_threshold(call, "y_threshold", VMEM_MAX_Y + 1, 0, &yt) ||
	    !param_threshold(call, "z_filter", VMEM_MAX_Z, INT32_MAX, &zf) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit) ||
	    !param_after(call, &after, &has_after))
		return CALL_DONE;
	if (query_before_page(&call->d->decisions.index, xt, yt, zf,
			      has_after ? &after : NULL, (size_t)limit, &recs,
			      &n) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	reply_records(call, recs, n);
	free(recs);
	return CALL_DONE;
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

int decision_search(struct call *call)
{
	static const char *const allowed[] = {"terms", "match_all",   "limit",
					      "after", "after_score", NULL};
	struct index *ix = &call->d->decisions.index;
	json_t *terms = json_object_get(call->params, "terms");
	const char *texts[SEARCH_TERMS_MAX];
	size_t lens[SEARCH_TERMS_MAX];
	char *term_json[SEARCH_TERMS_MAX] = {0};
	struct search_query *q = NULL;
	struct search_hit *hits = NULL;
	size_t n_terms, n_hits = 0;
	bool match_all = false, ok = true, has_after;
	int64_t limit = 0, after_score = 0;
	struct coord after;
	size_t skip = 0;
	struct buf b = {0};
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
	rc = search_query_parse(texts, lens, n_terms, &q, msg, sizeof(msg));
	if (rc < 0) {
		call_error(call, rc == -EINVAL ? RPC_QUERY : RPC_INTERNAL_ERROR,
			   NULL, "%s", rc == -EINVAL ? msg : "out of memory");
		return CALL_DONE;
	}
	/* Paging needs every hit's rank (slot numbers and scores only); the
	 * page alone is built. */
	if (search_run(ix->search, q, match_all, has_after ? 0 : (size_t)limit,
		       index_text, ix, &hits, &n_hits) < 0)
		ok = false;
	if (ok && has_after) {
		size_t slot = index_slot(ix, &after);

		/* Ranked by score descending, then slot ascending. */
		while (skip < n_hits && (hits[skip].score > after_score ||
					 (hits[skip].score == after_score &&
					  hits[skip].slot <= slot)))
			skip++;
		if (limit && n_hits - skip > (size_t)limit)
			n_hits = skip + (size_t)limit;
	}
	for (size_t i = 0; ok && i < n_terms; i++) {
		term_json[i] = json_dumps(json_array_get(terms, i),
					  JSON_ENCODE_ANY | JSON_COMPACT);
		ok = term_json[i] != NULL;
	}
	ok = ok && buf_append(&b, "[", 1);
	for (size_t i = skip; ok && i < n_hits; i++)
		ok = (i == skip || buf_append(&b, ",", 1)) &&
		     append_hit(&b, ix->slots[hits[i].slot], &hits[i],
				search_query_unique(q), term_json, n_terms);
	if (ok && buf_append(&b, "]", 1))
		call_reply_raw(call, b.data, b.len);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "out of memory searching");
	for (size_t i = 0; i < n_terms; i++)
		free(term_json[i]);
	buf_done(&b);
	free(hits);
	search_query_free(q);
	return CALL_DONE;
}
