/*
 * Fuzz harness of protocol/decision.c: coordinates, field checks and the
 * record's serialisations. The input is a record text, as in a decision
 * file or a log payload. Oracles:
 * - utf8_valid() agrees with jansson's own UTF-8 check (plus no NUL);
 * - the field checks accept what the record parser accepts;
 * - an accepted record round-trips: compact and file forms parse back to
 *   the same record, the file form made from the compact text is byte for
 *   byte decision_dump_file(), the timestamp formats back to its text and
 *   the file path parses back to the coordinate;
 * - a path coord_from_path() accepts is exactly what coord_path() writes.
 */
#include "fuzz.h"

#include "protocol/decision.h"
#include "protocol/errors.h"

#include <string.h>

/* Two records are the same decision. */
static void check_same(const struct decision *a, const struct decision *b)
{
	FUZZ_CHECK(coord_cmp(&a->coord, &b->coord) == 0);
	FUZZ_CHECK(a->content_len == b->content_len);
	FUZZ_CHECK(memcmp(a->content, b->content, a->content_len) == 0);
	FUZZ_CHECK(strcmp(a->timestamp, b->timestamp) == 0);
	FUZZ_CHECK(strcmp(a->agent_id, b->agent_id) == 0);
	FUZZ_CHECK(a->version == b->version);
	FUZZ_CHECK((a->issue_context == NULL) == (b->issue_context == NULL));
	if (a->issue_context)
		FUZZ_CHECK(json_equal(a->issue_context, b->issue_context));
}

/* An accepted record survives every serialisation. */
static void round_trip(const struct decision *d)
{
	char msg[VMEM_ERRMSG_LEN], path[64], ts[VMEM_TIMESTAMP_LEN + 1];
	struct decision back;
	struct coord c;
	char *compact, *file, *file2, *slash;
	size_t clen, flen, flen2;
	int64_t usec;

	FUZZ_CHECK(coord_valid(&d->coord, 0));
	FUZZ_CHECK(content_check(d->content, d->content_len, msg) == 0);
	FUZZ_CHECK(agent_id_check(d->agent_id, strlen(d->agent_id), msg) == 0);
	FUZZ_CHECK(issue_context_check(d->issue_context, msg) == 0);
	FUZZ_CHECK(d->version >= 1);

	compact = decision_dump_compact(d, &clen);
	FUZZ_CHECK(compact != NULL && strlen(compact) == clen);
	FUZZ_CHECK(memchr(compact, '\n', clen) == NULL);
	FUZZ_CHECK(decision_parse(compact, clen, 0, &back, msg) == 0);
	check_same(d, &back);
	decision_done(&back);

	file = decision_dump_file(d, &flen);
	FUZZ_CHECK(file != NULL && flen > 0 && file[flen - 1] == '\n');
	FUZZ_CHECK(decision_parse(file, flen, 0, &back, msg) == 0);
	check_same(d, &back);
	decision_done(&back);

	file2 = decision_file_from_compact(compact, clen, &flen2);
	FUZZ_CHECK(file2 != NULL);
	FUZZ_CHECK(flen2 == flen && memcmp(file, file2, flen) == 0);

	FUZZ_CHECK(timestamp_parse(d->timestamp, &usec) == 0);
	timestamp_format(usec, ts);
	FUZZ_CHECK(strcmp(ts, d->timestamp) == 0);

	FUZZ_CHECK(coord_path(&d->coord, path, sizeof(path)) > 0);
	slash = strchr(path, '/');
	FUZZ_CHECK(slash != NULL);
	*slash = '\0';
	FUZZ_CHECK(coord_from_path(path, slash + 1, 0, &c) == 0);
	FUZZ_CHECK(coord_cmp(&c, &d->coord) == 0);

	free(compact);
	free(file);
	free(file2);
}

/* utf8_valid() against jansson's validator, on the raw bytes. */
static void check_utf8(const char *s, size_t len)
{
	json_t *str = json_stringn(s, len);
	bool want = str != NULL && memchr(s, '\0', len) == NULL;

	FUZZ_CHECK(utf8_valid(s, len) == want);
	json_decref(str);
}

/* The input as a file path "x-NNN/y-N-z-N.json". */
static void check_path(const char *s, size_t len)
{
	char buf[128], again[128];
	char *slash;
	struct coord c;

	if (len >= sizeof(buf) || memchr(s, '\0', len))
		return;
	memcpy(buf, s, len);
	buf[len] = '\0';
	slash = strchr(buf, '/');
	if (!slash)
		return;
	*slash = '\0';
	if (coord_from_path(buf, slash + 1, 0, &c) != 0)
		return;
	FUZZ_CHECK(coord_valid(&c, 0));
	*slash = '/';
	FUZZ_CHECK(coord_path(&c, again, sizeof(again)) > 0);
	FUZZ_CHECK(strcmp(again, buf) == 0);
}

/* The single-field checks on the members of a parsed object. */
static void check_fields(const json_t *obj)
{
	char msg[VMEM_ERRMSG_LEN];
	const json_t *v;
	struct coord c;
	int rc;

	rc = coord_from_json(obj, 0, &c, msg);
	FUZZ_CHECK(rc == 0 || rc == RPC_COORDINATE_VALIDATION);
	if (rc == 0)
		FUZZ_CHECK(coord_valid(&c, 0));
	v = json_object_get(obj, "coordinate");
	if (v) {
		rc = coord_from_json(v, 0, &c, msg);
		FUZZ_CHECK(rc == 0 || rc == RPC_COORDINATE_VALIDATION);
		if (rc == 0) {
			json_t *again = coord_to_json(&c);

			FUZZ_CHECK(again != NULL && json_equal(again, v));
			json_decref(again);
		}
	}
	v = json_object_get(obj, "content");
	if (json_is_string(v)) {
		rc = content_check(json_string_value(v), json_string_length(v),
				   msg);
		FUZZ_CHECK(rc == 0 || rc == RPC_INVALID_PARAMS);
	}
	v = json_object_get(obj, "agent_id");
	if (json_is_string(v)) {
		rc = agent_id_check(json_string_value(v), json_string_length(v),
				    msg);
		FUZZ_CHECK(rc == 0 || rc == RPC_INVALID_PARAMS);
	}
	rc = issue_context_check(json_object_get(obj, "issue_context"), msg);
	FUZZ_CHECK(rc == 0 || rc == RPC_INVALID_PARAMS);
	rc = issue_context_check(obj, msg);
	FUZZ_CHECK(rc == 0 || rc == RPC_INVALID_PARAMS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int seeded;
	const char *text = (const char *)data;
	char msg[VMEM_ERRMSG_LEN];
	struct decision d;
	json_error_t err;
	json_t *obj;
	char *file;
	size_t flen;
	int rc;

	if (!seeded) {
		json_object_seed(1);
		seeded = 1;
	}
	check_utf8(text, size);
	check_path(text, size);
	rc = content_check(text, size, msg);
	FUZZ_CHECK(rc == 0 || rc == RPC_INVALID_PARAMS);
	rc = agent_id_check(text, size, msg);
	FUZZ_CHECK(rc == 0 || rc == RPC_INVALID_PARAMS);

	obj = json_loadb(text, size, JSON_REJECT_DUPLICATES, &err);
	if (obj) {
		if (json_is_object(obj))
			check_fields(obj);
		json_decref(obj);
	}

	msg[0] = '\0';
	rc = decision_parse(text, size, 0, &d, msg);
	if (rc == 0) {
		round_trip(&d);
		decision_done(&d);
	} else {
		FUZZ_CHECK(rc == RPC_INVALID_PARAMS ||
			   rc == RPC_COORDINATE_VALIDATION);
		FUZZ_CHECK(msg[0] != '\0');
		FUZZ_CHECK(d.content == NULL && d.agent_id == NULL &&
			   d.issue_context == NULL);
	}

	/* Re-indenting arbitrary text must not go wrong either. */
	file = decision_file_from_compact(text, size, &flen);
	if (file)
		FUZZ_CHECK(strlen(file) <= flen);
	free(file);
	return 0;
}
