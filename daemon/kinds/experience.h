/*
 * Experiences as a record kind (kind.h): immutable records with a
 * daemon-assigned UUIDv7, kept in the experience index (find/expindex)
 * and materialised by appending one line per record, and one tombstone
 * line per deletion, to the append-only shards of git/shards, which git
 * commits (and merges line by line).
 *
 * The state is what the shards say, folded: a record is live when some
 * shard holds its line and no shard holds a tombstone for it; a record
 * line repeated (in one shard or several, after a merge) counts once.
 * The kind counts, per id, the shard lines that hold its record and its
 * deletion, and per shard which ids it holds, so a reload re-reads only
 * the shards whose stamp changed and applies what changed.
 *
 * Log payloads: EXPERIENCE_LOG_TAG, then a record's or a tombstone's
 * line. The replay at start-up only appends those lines to their shards
 * (with dedupe, see shards.h); the load then reads every shard.
 *
 * Locks: a store takes none (its id is new, nobody else can name it); a
 * delete locks its id's key. Loop thread only, but for the pool
 * functions of the table, which touch only their snapshot or job and
 * the read-only files.
 */
#ifndef VMEM_DAEMON_KIND_EXPERIENCE_H
#define VMEM_DAEMON_KIND_EXPERIENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "expindex.h"
#include "kind.h"
#include "protocol/experience.h"
#include "shards.h"
#include "store.h"

/* The log payload: the tag, the record or tombstone line, then '\n'
 * and the number of its shard in the agent's day (exp_shard_path; a
 * payload without it, of a log written before shards were numbered, is
 * of the first). */
#define EXPERIENCE_LOG_TAG 'E'

/* Bytes after which an agent's day begins its next shard (config key
 * experience_shard_bytes). */
#define EXPERIENCE_SHARD_MAX_DEFAULT (256u << 10)

extern const struct kind experience_kind;

struct exp_shard;
struct exp_pending;
struct exp_open;

/* The kind's state; owned by the daemon, registered with the store. */
struct experiences {
	struct store_kind sk;
	struct expindex ix;  /* read it freely (loop thread) */
	struct shards files; /* read-only paths and modes */

	/* The shards: what each holds, as last read or written. */
	struct exp_shard **shards;
	size_t n_shards, cap_shards;
	uint32_t *shard_table; /* shard + 1, by path; 0: empty */
	size_t shard_table_cap;

	/* Per agent's day, the shard that takes its new lines: a shard
	 * holding shard_max bytes or more takes none (the next one is
	 * begun), so a commit hashes small files however many records a
	 * day brings. Open addressing by the day's path. */
	struct exp_open **opens;
	size_t n_opens, opens_cap;
	uint64_t shard_max; /* EXPERIENCE_SHARD_MAX_DEFAULT unless set */

	/* Lines applied (or replayed) not yet handed to a writer pass,
	 * oldest first. */
	struct exp_pending *pending, *pending_tail;
	size_t n_pending;

	/* Random bits of the ids, from getrandom(2). */
	uint8_t rnd[4096];
	size_t rnd_left;

	/* When set (the daemon's, git/conflicts.h): while git runs an
	 * operation in the tree no shard is appended to; the lines wait. */
	struct conflicts *conflicts;
};

/*
 * An experience write (experience.store or experience.delete), owned by
 * the caller, zeroed, then filled: w.kind (the experiences' sk), w's
 * request fields and this request. A store's e (agent_id, the texts,
 * importance, tags, metadata: the caller's, released with
 * experience_done after done); the kind sets e.id and e.timestamp. A
 * delete's id and by (the deleting agent, borrowed until done).
 */
struct experience_write {
	struct store_write w;

	/* Request. */
	bool is_delete;
	struct experience e;
	struct expid id;
	const char *by;

	/* Result, valid during done(). */
	const char *json; /* a store's record */
	size_t json_len;
	bool existed; /* a delete found a live record */

	/* Private to the kind. */
	char *buf;    /* the log payload (EXPERIENCE_LOG_TAG) */
	size_t len;   /* of its line */
	unsigned seq; /* of its shard */
	char key[EXPID_LEN + 1];
};

/* Release a write's request and what its kind kept of it (after its
 * done(), or when it was never submitted). */
void experience_write_done(struct experience_write *ew);

/*
 * The detail of an experience's kind_change: the doc (UINT32_MAX when a
 * shard changed without a record: bad lines taken out of it), the record
 * (its JSON; NULL when the change left none, or for such a shard), its
 * id and agent (for a record), and the shard path that changed (below
 * experiences/; NULL when no file changes: a reload's change). Valid
 * during the call.
 */
struct experience_change {
	uint32_t doc;
	const char *json;
	size_t json_len;
	const struct expid *id;
	const char *agent;
	size_t agent_len;
	const char *path;
};

/*
 * Set up (no I/O): root is the working tree (copied), state the state
 * directory whose quarantine/ takes bad lines (borrowed). The modes of
 * the files written (files.file_mode, files.dir_mode) are the caller's
 * to set. 0 or -ENOMEM (then experiences_done cleans up).
 */
int experiences_init(struct experiences *xs, const char *root,
		     const struct statedir *state);

/* Release everything; after store_close. Safe after a failed init. */
void experiences_done(struct experiences *xs);

/* The live record of an id (its doc), or NULL. */
const struct exp_doc *experiences_get(const struct experiences *xs,
				      const struct expid *id);

#endif
