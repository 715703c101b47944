/*
 * Conflict records (see conflict.h): the one format the merge driver and
 * the daemon write and the daemon reads.
 */
#include "protocol/conflict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kinds[] = {CONFLICT_KIND_DRIVER, CONFLICT_KIND_RESOLVE,
				    CONFLICT_KIND_HELD, CONFLICT_KIND_REPLACED};

static bool kind_known(const char *kind)
{
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (kind && strcmp(kind, kinds[i]) == 0)
			return true;
	return false;
}

/* A compact decision as a JSON value (json null for NULL), or NULL when
 * it is not an object. */
static json_t *side_json(const char *compact)
{
	json_t *v;

	if (!compact)
		return json_null();
	v = json_loads(compact, JSON_REJECT_DUPLICATES, NULL);
	if (v && !json_is_object(v)) {
		json_decref(v);
		v = NULL;
	}
	return v;
}

char *conflict_record_text(const char *kind, const struct coord *c,
			   int64_t recorded_usec, const char *reason,
			   const char *kept, const char *lost, size_t *len)
{
	char when[VMEM_TIMESTAMP_LEN + 1], rel[64], path[80];
	json_t *obj = NULL, *k = side_json(kept), *l = side_json(lost);
	char *text = NULL, *out = NULL;
	size_t n;

	if (!k || !l || coord_path(c, rel, sizeof(rel)) < 0)
		goto out;
	snprintf(path, sizeof(path), ".vector-memory/%s", rel);
	timestamp_format(recorded_usec, when);
	obj = json_pack("{s:s,s:o,s:s,s:s,s:s,s:O,s:O}", "kind", kind,
			"coordinate", coord_to_json(c), "path", path,
			"recorded_at", when, "reason", reason ? reason : "",
			"kept", k, "lost", l);
	if (!obj)
		goto out;
	text = json_dumps(obj, JSON_INDENT(2));
	if (!text)
		goto out;
	n = strlen(text);
	out = malloc(n + 2);
	if (!out)
		goto out;
	memcpy(out, text, n);
	out[n++] = '\n';
	out[n] = '\0';
	if (len)
		*len = n;
out:
	free(text);
	json_decref(obj);
	json_decref(k);
	json_decref(l);
	return out;
}

int conflict_record_name(const char *kind, const struct coord *c,
			 int64_t recorded_usec, char *buf, size_t n)
{
	int len;

	if (strcmp(kind, CONFLICT_KIND_HELD) == 0)
		len = snprintf(buf, n, "held-x-%03d-y-%d-z-%d.json", c->x, c->y,
			       c->z);
	else
		len = snprintf(buf, n, "%016lld-%s-x-%03d-y-%d-z-%d.json",
			       (long long)recorded_usec, kind, c->x, c->y,
			       c->z);
	return len < 0 || (size_t)len >= n ? -1 : len;
}

/* A side member: null, or a decision at coordinate c. */
static bool side_ok(const json_t *v, const struct coord *c, int max_x,
		    char *msg)
{
	struct decision d;
	bool ok;

	if (json_is_null(v))
		return true;
	if (!json_is_object(v) || decision_from_json(v, max_x, &d, msg) != 0)
		return false;
	ok = coord_cmp(&d.coord, c) == 0;
	decision_done(&d);
	if (!ok)
		snprintf(msg, VMEM_ERRMSG_LEN,
			 "a side's coordinate is not the record's");
	return ok;
}

json_t *conflict_record_parse(const char *text, size_t len, int max_x,
			      char msg[VMEM_ERRMSG_LEN])
{
	json_t *obj = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	const char *kind, *path, *when, *reason;
	char rel[64], want[80];
	struct coord c;
	int64_t usec;

	if (!json_is_object(obj)) {
		snprintf(msg, VMEM_ERRMSG_LEN, "not a JSON object");
		goto bad;
	}
	kind = json_string_value(json_object_get(obj, "kind"));
	path = json_string_value(json_object_get(obj, "path"));
	when = json_string_value(json_object_get(obj, "recorded_at"));
	reason = json_string_value(json_object_get(obj, "reason"));
	if (!kind_known(kind) || !path || !when || !reason ||
	    json_object_size(obj) != 7) {
		snprintf(msg, VMEM_ERRMSG_LEN,
			 "not a conflict record (kind, coordinate, path, "
			 "recorded_at, reason, kept, lost)");
		goto bad;
	}
	if (coord_from_json(json_object_get(obj, "coordinate"), max_x, &c,
			    msg) != 0)
		goto bad;
	if (coord_path(&c, rel, sizeof(rel)) < 0)
		goto bad;
	snprintf(want, sizeof(want), ".vector-memory/%s", rel);
	if (strcmp(want, path) != 0 || timestamp_parse(when, &usec) != 0) {
		snprintf(msg, VMEM_ERRMSG_LEN,
			 "path or recorded_at does not match");
		goto bad;
	}
	if (!json_object_get(obj, "kept") || !json_object_get(obj, "lost") ||
	    !side_ok(json_object_get(obj, "kept"), &c, max_x, msg) ||
	    !side_ok(json_object_get(obj, "lost"), &c, max_x, msg))
		goto bad;
	return obj;
bad:
	json_decref(obj);
	return NULL;
}
