/*
 * The experiences' authoritative index (owned by kinds/experience): every
 * experience id the daemon knows, each with its record when one was
 * seen, and for the live ones the structures their queries read:
 *
 *   - per agent, its records sorted by (timestamp, id): retrieve walks
 *     them newest first from a binary-searched end, so a page costs its
 *     length, not the agent's history;
 *   - per (agent, tag), the same for the records holding that tag: a
 *     retrieve with tags walks the shortest of its lists;
 *   - running aggregates per agent and overall (count, importance sum,
 *     tag counts): stats reads them, never the records;
 *   - the BM25 index over context, action and outcome (find/bm25) for
 *     find_similar.
 *
 * A document number (doc) names an id for the daemon's life; a doc may
 * have no record (known only from a deletion) or a record that is not
 * live (deleted). Records are immutable: their compact JSON (the wire
 * answer and the shard line) comes back byte for byte as given
 * (expindex_json), kept less what the doc's fields say again. Loop
 * thread only.
 */
#ifndef VMEM_DAEMON_EXPINDEX_H
#define VMEM_DAEMON_EXPINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bm25.h"
#include "buf.h"
#include "protocol/experience.h"

/* The field weights of find_similar (bm25.h). */
#define EXP_WEIGHT_CONTEXT 3
#define EXP_WEIGHT_ACTION  1
#define EXP_WEIGHT_OUTCOME 1

/* At most this many entries in a stats answer's tag_distribution and
 * agents (the most frequent first; the totals say how many exist). */
#define EXP_STATS_LIST_MAX 1000

/*
 * A record's JSON is kept without what its fields say again, when it
 * reads exactly as they render it: the head {"id":"…","agent_id":"…",
 * (then buf starts with the '{' alone) and the members
 * "timestamp":"…","importance":N, (cut at mid_at). expindex_json gives
 * the bytes back as they were. Why: they were a seventh of the record,
 * and the kept records most of the daemon's memory.
 */
struct exp_doc {
	char *buf;    /* owned: the kept JSON, then the tag numbers */
	uint32_t len; /* of the kept JSON */
	uint8_t importance;
	uint8_t n_tags;
	bool live;
	bool head_cut;
	struct expid id;
	int64_t ts;	/* microseconds */
	uint32_t agent; /* agent number */
	uint32_t bm;	/* its BM25 document while live */
	uint32_t *tags; /* tag numbers, as the record lists them (in buf) */
	/* For the owner (the kind): how many shard lines hold the record,
	 * and how many its deletion. */
	uint16_t rec_refs, tomb_refs;
	uint32_t mid_at; /* where the middle was cut from buf; 0: not */
};

struct docvec {
	uint32_t *v;
	uint32_t n, cap;
};

struct exp_agent {
	char *id;
	size_t len;
	struct docvec list; /* live records by (timestamp, id) */
	uint64_t imp_sum;
	/* tag -> count of its live records: open addressing (tag + 1) */
	uint32_t *tc_key, *tc_val;
	uint32_t tc_cap, tc_used;
};

struct expindex {
	struct exp_doc *docs;
	size_t n_docs, cap_docs;
	uint32_t *by_id; /* doc + 1; 0: empty */
	size_t by_id_cap;

	struct exp_agent *agents;
	size_t n_agents, cap_agents;
	uint32_t *agent_table; /* agent + 1 */
	size_t agent_table_cap;

	char **tag_names;
	uint32_t *tag_count; /* live records holding it */
	size_t n_tags, cap_tags;
	uint32_t *tag_table; /* tag + 1 */
	size_t tag_table_cap;

	/* (agent << 32 | tag) -> index into at_lists */
	uint64_t *at_key;
	uint32_t *at_val;
	size_t at_cap, at_used;
	struct docvec *at_lists;
	size_t n_at, cap_at;

	struct bm25 *bm;
	uint32_t *bm_doc; /* BM25 document -> doc */
	size_t n_bm, cap_bm;

	size_t n_live;
	uint64_t imp_sum;
	size_t n_with_record;
};

/* A result of a search: the doc, its score and the query terms it
 * matched (bit i: terms[i] of the answer). */
struct exp_similar {
	uint32_t doc;
	double score;
	uint64_t matched;
};

/* One (name, count) of a stats answer; name borrowed from the index. */
struct exp_count {
	const char *name;
	size_t count;
};

/* A stats answer: lists malloc'd (caller frees both). */
struct exp_stats {
	size_t total;
	uint64_t imp_sum;
	int64_t oldest, newest; /* of the live records; total 0: unset */
	struct exp_count *tags;
	size_t n_tags, tags_total;
	struct exp_count *agents; /* only without an agent */
	size_t n_agents, agents_total;
};

/* A retrieve's filters. */
struct exp_filter {
	const char *agent;
	size_t agent_len;
	int min_importance;
	const char *const *tags; /* all must be held */
	size_t n_tags;
	int64_t since, until;	   /* inclusive */
	const struct expid *after; /* only records older than this one */
};

/* 0 or -ENOMEM. */
int expindex_init(struct expindex *ix);
void expindex_done(struct expindex *ix);

/* The doc of an id, or -1. */
long expindex_lookup(const struct expindex *ix, const struct expid *id);

/* The doc of an id, added (without a record) when unknown; -ENOMEM. */
long expindex_intern(struct expindex *ix, const struct expid *id);

/*
 * Give a doc without a record its record: json[0..len), its compact
 * JSON (copied, less what its fields say again); e is that record
 * parsed (borrowed: the agent, timestamp, importance and tags are
 * copied). Not live yet. 0 or -ENOMEM.
 */
int expindex_set_record(struct expindex *ix, uint32_t doc, const char *json,
			size_t len, const struct experience *e);

/* The JSON of a doc with a record, as it was given: its length, and
 * those bytes into out (no NUL), or appended to b (false: no memory). */
size_t expindex_json_len(const struct expindex *ix, uint32_t doc);
void expindex_json(const struct expindex *ix, uint32_t doc, char *out);
bool expindex_json_append(const struct expindex *ix, uint32_t doc,
			  struct buf *b);

/*
 * Make a doc with a record live (in every list, aggregate and the
 * search index) or not. e, when given, is its record parsed (for the
 * search index; NULL: parsed again from its JSON). 0 or -ENOMEM (then
 * nothing changed).
 */
int expindex_activate(struct expindex *ix, uint32_t doc,
		      const struct experience *e);
void expindex_deactivate(struct expindex *ix, uint32_t doc);

/* The agent id of a doc with a record (borrowed), its length in *len. */
const char *expindex_agent(const struct expindex *ix, uint32_t doc,
			   size_t *len);

/*
 * The live records that pass f, newest first (by timestamp, then id),
 * at most limit docs into out (the caller's, limit entries); returns
 * how many.
 */
size_t expindex_retrieve(const struct expindex *ix, const struct exp_filter *f,
			 uint32_t *out, size_t limit);

/*
 * find_similar: the best limit records for q (agent may be NULL: every
 * agent; min_importance 1: all), ties by importance, then recency. *out
 * is malloc'd, *n its length; terms[0..*n_terms) are the query terms
 * (borrowed from q) that the bits of matched stand for. 0 or -ENOMEM.
 */
int expindex_similar(struct expindex *ix, const struct bm25_query *q,
		     const char *agent, size_t agent_len, int min_importance,
		     size_t limit, struct exp_similar **out, size_t *n,
		     const char **terms, size_t *n_terms);

/* Aggregates of one agent's live records (agent NULL: of all, with the
 * per-agent counts). 0 or -ENOMEM. */
int expindex_stats(const struct expindex *ix, const char *agent,
		   size_t agent_len, struct exp_stats *out);
void exp_stats_done(struct exp_stats *s);

/* Give back the room that lists and postings grew into (after a load). */
void expindex_trim(struct expindex *ix);

/* Bytes held, records included. */
size_t expindex_memory(const struct expindex *ix);

#endif
