/*
 * Fuzz harness of the experiences' shard line parser (protocol/
 * experience.c). The input is one line of a shard (or a log payload after
 * its tag). Oracles:
 * - the parser accepts or refuses with a reason, leaving nothing held on
 *   refusal, and exactly as the general parser (a JSON tree) does: the
 *   fast path for our own lines accepts nothing else, and reads the same
 *   record;
 * - an accepted record passes the field checks, and its line form
 *   (exp_dump) parses back to the same record; an accepted tombstone
 *   likewise through exp_dump_tombstone;
 * - the record's shard path is a segment that decodes back to its agent
 *   and a valid shard name;
 * - a segment the decoder accepts encodes back to itself.
 */
#include "fuzz.h"

#include "protocol/errors.h"
#include "protocol/experience.h"

#include <string.h>

static void same_record(const struct experience *a, const struct experience *b)
{
	FUZZ_CHECK(expid_cmp(&a->id, &b->id) == 0);
	FUZZ_CHECK(strcmp(a->agent_id, b->agent_id) == 0);
	for (int f = 0; f < EXP_NFIELDS; f++) {
		FUZZ_CHECK(a->text_len[f] == b->text_len[f]);
		FUZZ_CHECK(memcmp(a->text[f], b->text[f], a->text_len[f]) == 0);
	}
	FUZZ_CHECK(a->timestamp == b->timestamp);
	FUZZ_CHECK(a->importance == b->importance);
	FUZZ_CHECK(a->n_tags == b->n_tags);
	for (size_t i = 0; i < a->n_tags; i++)
		FUZZ_CHECK(strcmp(a->tags[i], b->tags[i]) == 0);
	FUZZ_CHECK(json_equal(a->metadata, b->metadata));
}

/* A shard number of the whole range, from bits of the input. */
static unsigned any_seq(int64_t usec)
{
	return 1 + (unsigned)((uint64_t)usec % EXP_SHARD_SEQ_MAX);
}

static void check_shard(const char *agent, int64_t usec, unsigned seq)
{
	char path[EXP_SHARD_PATH_MAX], seg[EXP_SEGMENT_MAX + 1];
	char back[VMEM_AGENT_ID_MAX + 1];
	const char *slash;
	size_t len;

	if (exp_shard_path(agent, strlen(agent), usec, seq, path,
			   sizeof(path)) < 0)
		return; /* a time before 1970: no shard */
	slash = strchr(path, '/');
	FUZZ_CHECK(slash != NULL);
	FUZZ_CHECK(exp_shard_name_seq(slash + 1) == seq);
	memcpy(seg, path, (size_t)(slash - path));
	seg[slash - path] = '\0';
	FUZZ_CHECK(exp_segment_decode(seg, back, sizeof(back), &len) == 0);
	FUZZ_CHECK(len == strlen(agent) && strcmp(back, agent) == 0);
}

static void round_trip(const struct exp_line *l)
{
	char msg[VMEM_ERRMSG_LEN];
	struct exp_line back;
	size_t len;
	char *text;

	if (l->is_tombstone) {
		text = exp_dump_tombstone(&l->tomb, 0, &len);
		FUZZ_CHECK(text && memchr(text, '\n', len) == NULL);
		FUZZ_CHECK(exp_parse_line(text, len, &back, msg) == 0);
		FUZZ_CHECK(back.is_tombstone);
		FUZZ_CHECK(expid_cmp(&back.tomb.id, &l->tomb.id) == 0);
		FUZZ_CHECK(!strcmp(back.tomb.agent_id, l->tomb.agent_id));
		FUZZ_CHECK(!strcmp(back.tomb.deleted_by, l->tomb.deleted_by));
		FUZZ_CHECK(back.tomb.timestamp == l->tomb.timestamp);
		check_shard(l->tomb.agent_id, expid_usec(&l->tomb.id),
			    any_seq(expid_usec(&l->tomb.id)));
	} else {
		for (int f = 0; f < EXP_NFIELDS; f++)
			FUZZ_CHECK(exp_text_check((enum exp_field)f,
						  l->rec.text[f],
						  l->rec.text_len[f], false,
						  msg) == 0);
		FUZZ_CHECK(exp_metadata_check(l->rec.metadata, msg) == 0);
		text = exp_dump(&l->rec, 0, &len);
		FUZZ_CHECK(text && memchr(text, '\n', len) == NULL);
		FUZZ_CHECK(exp_parse_line(text, len, &back, msg) == 0);
		FUZZ_CHECK(!back.is_tombstone);
		same_record(&l->rec, &back.rec);
		check_shard(l->rec.agent_id, l->rec.timestamp,
			    any_seq(l->rec.timestamp));
	}
	exp_line_done(&back);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int seeded;
	char msg[VMEM_ERRMSG_LEN], seg[EXP_SEGMENT_MAX + 2];
	char agent[VMEM_AGENT_ID_MAX + 1], again[EXP_SEGMENT_MAX + 1];
	struct exp_line l;
	size_t len;
	int rc;

	if (!seeded) {
		json_object_seed(1);
		seeded = 1;
	}
	msg[0] = '\0';
	rc = exp_parse_line((const char *)data, size, &l, msg);
	{
		struct exp_line g;
		int grc = exp_parse_line_general((const char *)data, size, &g,
						 msg);

		FUZZ_CHECK((rc == 0) == (grc == 0));
		if (rc == 0) {
			FUZZ_CHECK(l.is_tombstone == g.is_tombstone);
			if (!l.is_tombstone)
				same_record(&l.rec, &g.rec);
		}
		exp_line_done(&g);
	}
	if (rc == 0) {
		round_trip(&l);
	} else {
		FUZZ_CHECK(rc == RPC_INVALID_PARAMS ||
			   rc == RPC_INTERNAL_ERROR);
		FUZZ_CHECK(msg[0] != '\0');
	}
	exp_line_done(&l);

	/* The input as a directory name. */
	len = size < sizeof(seg) - 1 ? size : sizeof(seg) - 1;
	memcpy(seg, data, len);
	seg[len] = '\0';
	if (exp_segment_decode(seg, agent, sizeof(agent), &len) == 0) {
		FUZZ_CHECK(exp_segment(agent, len, again, sizeof(again)) > 0);
		FUZZ_CHECK(strcmp(again, seg) == 0);
	}
	return 0;
}
