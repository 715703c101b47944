/*
 * Experiences: validation, the line forms, the shard line parser and the
 * shard names (see experience.h).
 */
#include "experience.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base64url.h"
#include "errors.h"
#include "jsonstr.h"

const char *const exp_field_names[EXP_NFIELDS] = {"context", "action",
						  "outcome"};

static const char *const record_members[] = {
	"id",	     "agent_id",   "context", "action",	  "outcome",
	"timestamp", "importance", "tags",    "metadata",
};
static const char *const tombstone_members[] = {"deleted", "agent_id",
						"timestamp", "deleted_by"};

#define NMEMBERS(a) (sizeof(a) / sizeof((a)[0]))

static void set_msg(char *msg, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void set_msg(char *msg, const char *fmt, ...)
{
	va_list ap;

	if (!msg)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, VMEM_ERRMSG_LEN, fmt, ap);
	va_end(ap);
}

void experience_done(struct experience *e)
{
	if (!e)
		return;
	free(e->agent_id);
	for (int f = 0; f < EXP_NFIELDS; f++)
		free(e->text[f]);
	for (size_t i = 0; i < e->n_tags; i++)
		free(e->tags[i]);
	free(e->tags);
	json_decref(e->metadata);
	memset(e, 0, sizeof(*e));
}

void exp_tombstone_done(struct exp_tombstone *t)
{
	if (!t)
		return;
	free(t->agent_id);
	free(t->deleted_by);
	memset(t, 0, sizeof(*t));
}

void exp_line_done(struct exp_line *l)
{
	if (!l)
		return;
	experience_done(&l->rec);
	exp_tombstone_done(&l->tomb);
}

/* ---- fields ---- */

int exp_text_check(enum exp_field f, const char *s, size_t len, bool is_new,
		   char msg[VMEM_ERRMSG_LEN])
{
	const char *name = exp_field_names[f];

	if (!s || len == 0) {
		set_msg(msg, "%s must not be empty", name);
		return RPC_INVALID_PARAMS;
	}
	if (len > EXP_TEXT_MAX) {
		set_msg(msg, "%s too large: %zu bytes, more than %d", name, len,
			EXP_TEXT_MAX);
		return RPC_INVALID_PARAMS;
	}
	if (!utf8_valid(s, len)) {
		set_msg(msg, "%s must be UTF-8 without NUL", name);
		return RPC_INVALID_PARAMS;
	}
	if (is_new && utf8_blank(s, len)) {
		set_msg(msg, "%s must not be empty or only whitespace", name);
		return RPC_INVALID_PARAMS;
	}
	return 0;
}

int exp_importance_from_json(const json_t *v, int *out,
			     char msg[VMEM_ERRMSG_LEN])
{
	json_int_t i;

	if (!json_is_integer(v) ||
	    (i = json_integer_value(v)) < EXP_IMPORTANCE_MIN ||
	    i > EXP_IMPORTANCE_MAX) {
		set_msg(msg, "importance must be an integer in %d..%d",
			EXP_IMPORTANCE_MIN, EXP_IMPORTANCE_MAX);
		return RPC_INVALID_PARAMS;
	}
	*out = (int)i;
	return 0;
}

/* C0, DEL or C1 (U+0080..U+009F, encoded C2 80..C2 9F) in s? */
static bool has_control(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0; i < len; i++)
		if (u[i] < 0x20 || u[i] == 0x7f ||
		    (u[i] == 0xc2 && i + 1 < len && u[i + 1] <= 0x9f))
			return true;
	return false;
}

static void free_tags(char **tags, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(tags[i]);
	free(tags);
}

int exp_tags_from_json(const json_t *v, char ***tags, size_t *n,
		       char msg[VMEM_ERRMSG_LEN])
{
	size_t count, i, j;
	char **out = NULL;

	*tags = NULL;
	*n = 0;
	if (!json_is_array(v)) {
		set_msg(msg, "tags must be an array of strings");
		return RPC_INVALID_PARAMS;
	}
	count = json_array_size(v);
	if (count > EXP_TAGS_MAX) {
		set_msg(msg, "tags has %zu entries, more than %d", count,
			EXP_TAGS_MAX);
		return RPC_INVALID_PARAMS;
	}
	for (i = 0; i < count; i++) {
		const json_t *t = json_array_get(v, i);
		size_t len = json_string_length(t);

		if (!json_is_string(t)) {
			set_msg(msg, "tags[%zu] must be a string", i);
			return RPC_INVALID_PARAMS;
		}
		if (len == 0 || len > EXP_TAG_MAX) {
			set_msg(msg, "tags[%zu] must be 1..%d bytes, not %zu",
				i, EXP_TAG_MAX, len);
			return RPC_INVALID_PARAMS;
		}
		if (!utf8_valid(json_string_value(t), len) ||
		    has_control(json_string_value(t), len)) {
			set_msg(msg,
				"tags[%zu] must be UTF-8 without control "
				"characters",
				i);
			return RPC_INVALID_PARAMS;
		}
		for (j = 0; j < i; j++)
			if (json_equal(t, json_array_get(v, j))) {
				set_msg(msg,
					"tags[%zu] repeats tags[%zu]: tags "
					"must be distinct",
					i, j);
				return RPC_INVALID_PARAMS;
			}
	}
	if (count == 0)
		return 0;
	out = calloc(count, sizeof(*out));
	if (!out)
		goto oom;
	for (i = 0; i < count; i++) {
		out[i] = strdup(json_string_value(json_array_get(v, i)));
		if (!out[i]) {
			free_tags(out, i);
			goto oom;
		}
	}
	*tags = out;
	*n = count;
	return 0;
oom:
	set_msg(msg, "out of memory");
	return RPC_INTERNAL_ERROR;
}

int exp_metadata_check(const json_t *v, char msg[VMEM_ERRMSG_LEN])
{
	size_t len;

	if (!json_is_object(v)) {
		set_msg(msg, "metadata must be an object");
		return RPC_INVALID_PARAMS;
	}
	len = json_dumpb(v, NULL, 0, JSON_COMPACT);
	if (len > EXP_METADATA_MAX) {
		set_msg(msg, "metadata is %zu bytes of JSON, more than %d", len,
			EXP_METADATA_MAX);
		return RPC_INVALID_PARAMS;
	}
	return 0;
}

/* ---- the line forms ---- */

/* obj (stolen) as compact JSON after prefix bytes. */
static char *dump_prefixed(json_t *obj, size_t prefix, size_t *len)
{
	size_t n;
	char *out;

	if (!obj)
		return NULL;
	n = json_dumpb(obj, NULL, 0, JSON_COMPACT);
	out = n ? malloc(prefix + n + 1) : NULL;
	if (out && json_dumpb(obj, out + prefix, n, JSON_COMPACT) != n) {
		free(out);
		out = NULL;
	}
	json_decref(obj);
	if (!out)
		return NULL;
	out[prefix + n] = '\0';
	*len = n;
	return out;
}

/* The record's members after "tags": its metadata's compact JSON
 * (malloc'd, its length in *n), or NULL. */
static char *metadata_text(const json_t *metadata, size_t *n)
{
	size_t len = json_dumpb(metadata, NULL, 0, JSON_COMPACT);
	char *out = len ? malloc(len) : NULL;

	if (out && json_dumpb(metadata, out, len, JSON_COMPACT) != len) {
		free(out);
		out = NULL;
	}
	*n = len;
	return out;
}

/* Written by hand, members in their order: the same bytes as jansson's
 * compact dump of the record (jsonstr.h), for a fraction of its cost. */
char *exp_dump(const struct experience *e, size_t prefix, size_t *len)
{
	static const char *const keys[] = {
		"{\"id\":",	    ",\"agent_id\":", ",\"context\":",
		",\"action\":",	    ",\"outcome\":",  ",\"timestamp\":",
		",\"importance\":", ",\"tags\":[",    "],\"metadata\":"};
	char id[EXPID_LEN + 1], ts[VMEM_TIMESTAMP_LEN + 1], imp[16];
	size_t meta_len, n = prefix + 1, alen = strlen(e->agent_id);
	char *meta = metadata_text(e->metadata, &meta_len), *out, *o;
	int imp_len = snprintf(imp, sizeof(imp), "%d", e->importance);

	if (!meta)
		return NULL;
	expid_format(&e->id, id);
	timestamp_format(e->timestamp, ts);
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		n += strlen(keys[k]);
	n += EXPID_LEN + 2 + json_str_len(e->agent_id, alen) +
	     VMEM_TIMESTAMP_LEN + 2 + (size_t)imp_len + meta_len;
	for (int f = 0; f < EXP_NFIELDS; f++)
		n += json_str_len(e->text[f], e->text_len[f]);
	for (size_t i = 0; i < e->n_tags; i++)
		n += (i > 0) + json_str_len(e->tags[i], strlen(e->tags[i]));
	out = malloc(n + 1);
	if (!out) {
		free(meta);
		return NULL;
	}
	o = out + prefix;
#define PUT(s, l) (memcpy(o, (s), (l)), o += (l))
#define KEY(k)	  PUT(keys[k], strlen(keys[k]))
	KEY(0);
	o = json_str_put(o, id, EXPID_LEN);
	KEY(1);
	o = json_str_put(o, e->agent_id, alen);
	for (int f = 0; f < EXP_NFIELDS; f++) {
		KEY(2 + f);
		o = json_str_put(o, e->text[f], e->text_len[f]);
	}
	KEY(5);
	o = json_str_put(o, ts, VMEM_TIMESTAMP_LEN);
	KEY(6);
	PUT(imp, (size_t)imp_len);
	KEY(7);
	for (size_t i = 0; i < e->n_tags; i++) {
		if (i > 0)
			*o++ = ',';
		o = json_str_put(o, e->tags[i], strlen(e->tags[i]));
	}
	KEY(8);
	PUT(meta, meta_len);
	*o++ = '}';
#undef KEY
#undef PUT
	free(meta);
	*o = '\0';
	*len = (size_t)(o - out) - prefix;
	return out;
}

char *exp_dump_tombstone(const struct exp_tombstone *t, size_t prefix,
			 size_t *len)
{
	char id[EXPID_LEN + 1], ts[VMEM_TIMESTAMP_LEN + 1];

	expid_format(&t->id, id);
	timestamp_format(t->timestamp, ts);
	return dump_prefixed(json_pack("{s:s,s:s,s:s,s:s}", "deleted", id,
				       "agent_id", t->agent_id, "timestamp", ts,
				       "deleted_by", t->deleted_by),
			     prefix, len);
}

/* ---- the parser ---- */

/* Exactly the members names[0..n) in obj (any order). */
static int members_exact(const json_t *obj, const char *const *names, size_t n,
			 const char *what, char *msg)
{
	const char *key;
	json_t *val;

	json_object_foreach((json_t *)obj, key, val)
	{
		size_t i;

		for (i = 0; i < n; i++)
			if (strcmp(key, names[i]) == 0)
				break;
		if (i == n) {
			set_msg(msg, "%s has unknown member %.40s", what, key);
			return RPC_INVALID_PARAMS;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (!json_object_get(obj, names[i])) {
			set_msg(msg, "%s is missing member %s", what, names[i]);
			return RPC_INVALID_PARAMS;
		}
	return 0;
}

static int id_from(const json_t *v, const char *name, struct expid *out,
		   char *msg)
{
	if (!json_is_string(v) ||
	    expid_parse(json_string_value(v), json_string_length(v), out) < 0) {
		set_msg(msg, "%s must be a UUIDv7 (8-4-4-4-12 hex digits)",
			name);
		return RPC_INVALID_PARAMS;
	}
	return 0;
}

static int time_from(const json_t *v, int64_t *out, char *msg)
{
	if (!json_is_string(v) ||
	    timestamp_parse(json_string_value(v), out) < 0) {
		set_msg(msg, "timestamp must be YYYY-MM-DDTHH:MM:SS.ffffffZ");
		return RPC_INVALID_PARAMS;
	}
	return 0;
}

/* A checked agent id string, copied into *out. */
static int agent_from(const json_t *v, const char *name, char **out, char *msg)
{
	int rc;

	if (!json_is_string(v)) {
		set_msg(msg, "%s must be a string", name);
		return RPC_INVALID_PARAMS;
	}
	rc = agent_id_check(json_string_value(v), json_string_length(v), msg);
	if (rc)
		return rc;
	*out = strdup(json_string_value(v));
	if (!*out) {
		set_msg(msg, "out of memory");
		return RPC_INTERNAL_ERROR;
	}
	return 0;
}

static int parse_tombstone(const json_t *obj, struct exp_tombstone *t,
			   char *msg)
{
	int rc = members_exact(obj, tombstone_members,
			       NMEMBERS(tombstone_members), "tombstone", msg);

	if (!rc)
		rc = id_from(json_object_get(obj, "deleted"), "deleted", &t->id,
			     msg);
	if (!rc)
		rc = time_from(json_object_get(obj, "timestamp"), &t->timestamp,
			       msg);
	if (!rc)
		rc = agent_from(json_object_get(obj, "agent_id"), "agent_id",
				&t->agent_id, msg);
	if (!rc)
		rc = agent_from(json_object_get(obj, "deleted_by"),
				"deleted_by", &t->deleted_by, msg);
	return rc;
}

static int parse_record(json_t *obj, struct experience *e, char *msg)
{
	int rc = members_exact(obj, record_members, NMEMBERS(record_members),
			       "experience", msg);
	json_t *v;

	if (!rc)
		rc = id_from(json_object_get(obj, "id"), "id", &e->id, msg);
	if (!rc)
		rc = time_from(json_object_get(obj, "timestamp"), &e->timestamp,
			       msg);
	if (!rc)
		rc = agent_from(json_object_get(obj, "agent_id"), "agent_id",
				&e->agent_id, msg);
	for (int f = 0; !rc && f < EXP_NFIELDS; f++) {
		v = json_object_get(obj, exp_field_names[f]);
		if (!json_is_string(v)) {
			set_msg(msg, "%s must be a string", exp_field_names[f]);
			return RPC_INVALID_PARAMS;
		}
		rc = exp_text_check((enum exp_field)f, json_string_value(v),
				    json_string_length(v), false, msg);
		if (rc)
			break;
		e->text_len[f] = json_string_length(v);
		e->text[f] = malloc(e->text_len[f] + 1);
		if (!e->text[f]) {
			set_msg(msg, "out of memory");
			return RPC_INTERNAL_ERROR;
		}
		memcpy(e->text[f], json_string_value(v), e->text_len[f] + 1);
	}
	if (!rc)
		rc = exp_importance_from_json(
			json_object_get(obj, "importance"), &e->importance,
			msg);
	if (!rc)
		rc = exp_tags_from_json(json_object_get(obj, "tags"), &e->tags,
					&e->n_tags, msg);
	if (!rc) {
		v = json_object_get(obj, "metadata");
		rc = exp_metadata_check(v, msg);
		if (!rc)
			e->metadata = json_incref(v);
	}
	return rc;
}

/* ---- the fast path: our own lines ---- */

/* A cursor over a line. */
struct scan {
	const char *p, *end;
};

static bool lit(struct scan *sc, const char *text)
{
	size_t n = strlen(text);

	if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, text, n) != 0)
		return false;
	sc->p += n;
	return true;
}

static int hex4(const char *p)
{
	int v = 0;

	for (int i = 0; i < 4; i++) {
		int c = p[i], d = c >= '0' && c <= '9'	 ? c - '0'
				  : c >= 'a' && c <= 'f' ? c - 'a' + 10
				  : c >= 'A' && c <= 'F' ? c - 'A' + 10
							 : -1;

		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/*
 * A JSON string at the cursor (its opening quote already read), decoded
 * into a malloc'd NUL-terminated copy. false for anything JSON would
 * refuse or we would refuse after (a raw control character, a bad
 * escape, a lone surrogate, NUL): the general parser then judges it.
 */
static bool fast_string(struct scan *sc, char **out, size_t *len)
{
	const char *q = sc->p;
	char *buf, *o;

	while (q < sc->end && *q != '"') /* an upper bound of the length */
		q += *q == '\\' ? 2 : 1;
	if (q >= sc->end)
		return false;
	buf = malloc((size_t)(q - sc->p) + 1);
	if (!buf)
		return false;
	o = buf;
	while (*sc->p != '"') {
		unsigned char c = (unsigned char)*sc->p++;
		int cp, lo;

		if (c < 0x20)
			goto bad;
		if (c != '\\') {
			*o++ = (char)c;
			continue;
		}
		switch (*sc->p++) {
		case '"':
			*o++ = '"';
			break;
		case '\\':
			*o++ = '\\';
			break;
		case '/':
			*o++ = '/';
			break;
		case 'b':
			*o++ = '\b';
			break;
		case 'f':
			*o++ = '\f';
			break;
		case 'n':
			*o++ = '\n';
			break;
		case 'r':
			*o++ = '\r';
			break;
		case 't':
			*o++ = '\t';
			break;
		case 'u':
			if (sc->end - sc->p < 4 || (cp = hex4(sc->p)) <= 0)
				goto bad; /* \u0000 included */
			sc->p += 4;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				goto bad;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (sc->end - sc->p < 6 || sc->p[0] != '\\' ||
				    sc->p[1] != 'u' ||
				    (lo = hex4(sc->p + 2)) < 0xdc00 ||
				    lo > 0xdfff)
					goto bad;
				sc->p += 6;
				cp = 0x10000 + ((cp - 0xd800) << 10) +
				     (lo - 0xdc00);
			}
			o += put_utf8(o, (uint32_t)cp);
			break;
		default:
			goto bad;
		}
	}
	sc->p++;
	*o = '\0';
	*len = (size_t)(o - buf);
	if (!utf8_valid(buf, *len))
		goto bad;
	*out = buf;
	return true;
bad:
	free(buf);
	return false;
}

/*
 * A record line exactly as exp_dump writes it (members in order, compact),
 * read without building a JSON tree: 0 with *e filled, or 1 when the line
 * is anything else (or breaks a rule), for the general parser to judge:
 * its answer is the same for every line this one accepts.
 */
static int fast_record(const char *s, size_t len, struct experience *e)
{
	static const char *const keys[EXP_NFIELDS] = {
		",\"context\":\"", ",\"action\":\"", ",\"outcome\":\""};
	struct scan sc = {s, s + len};
	const char *digits;
	char *tmp = NULL, *ts = NULL;
	size_t n;
	json_t *tags = NULL;
	int imp = 0;

	if (!lit(&sc, "{\"id\":\"") || sc.end - sc.p < EXPID_LEN + 2 ||
	    expid_parse(sc.p, EXPID_LEN, &e->id) < 0)
		return 1;
	sc.p += EXPID_LEN;
	if (!lit(&sc, "\",\"agent_id\":\"") ||
	    !fast_string(&sc, &e->agent_id, &n) ||
	    agent_id_check(e->agent_id, n, NULL) != 0)
		goto other;
	for (int f = 0; f < EXP_NFIELDS; f++)
		if (!lit(&sc, keys[f]) ||
		    !fast_string(&sc, &e->text[f], &e->text_len[f]) ||
		    exp_text_check((enum exp_field)f, e->text[f],
				   e->text_len[f], false, NULL) != 0)
			goto other;
	if (!lit(&sc, ",\"timestamp\":\"") || !fast_string(&sc, &ts, &n) ||
	    n != VMEM_TIMESTAMP_LEN || timestamp_parse(ts, &e->timestamp) < 0 ||
	    !lit(&sc, ",\"importance\":"))
		goto other;
	digits = sc.p;
	while (sc.p < sc.end && *sc.p >= '0' && *sc.p <= '9' && imp <= 10)
		imp = imp * 10 + (*sc.p++ - '0');
	if (imp < EXP_IMPORTANCE_MIN || imp > EXP_IMPORTANCE_MAX ||
	    *digits == '0' || !lit(&sc, ",\"tags\":["))
		goto other;
	e->importance = imp;
	tags = json_array();
	while (tags && sc.p < sc.end && *sc.p != ']') {
		if ((json_array_size(tags) && !lit(&sc, ",")) ||
		    !lit(&sc, "\"") || !fast_string(&sc, &tmp, &n) ||
		    json_array_append_new(tags, json_stringn(tmp, n)) < 0)
			goto other;
		free(tmp);
		tmp = NULL;
	}
	if (!tags || !lit(&sc, "],\"metadata\":") ||
	    exp_tags_from_json(tags, &e->tags, &e->n_tags, NULL) != 0)
		goto other;
	if (sc.end - sc.p == 3 && memcmp(sc.p, "{}}", 3) == 0) {
		e->metadata = json_object();
	} else if (sc.end - sc.p > 1 && sc.end[-1] == '}') {
		e->metadata = json_loadb(sc.p, (size_t)(sc.end - sc.p - 1),
					 JSON_REJECT_DUPLICATES, NULL);
		if (exp_metadata_check(e->metadata, NULL) != 0)
			goto other;
	}
	if (!e->metadata)
		goto other;
	json_decref(tags);
	free(ts);
	return 0;
other:
	json_decref(tags);
	free(tmp);
	free(ts);
	experience_done(e);
	return 1;
}

int exp_parse_line_general(const char *s, size_t len, struct exp_line *out,
			   char msg[VMEM_ERRMSG_LEN])
{
	json_error_t jerr;
	json_t *obj;
	int rc;

	memset(out, 0, sizeof(*out));
	if (len > 0 && s[len - 1] == '\r')
		len--;
	if (len > EXP_LINE_MAX) {
		set_msg(msg, "line of %zu bytes, more than %u", len,
			EXP_LINE_MAX);
		return RPC_INVALID_PARAMS;
	}
	obj = json_loadb(s, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!obj) {
		set_msg(msg, "not JSON: %.100s", jerr.text);
		return RPC_INVALID_PARAMS;
	}
	if (!json_is_object(obj)) {
		set_msg(msg, "not a JSON object");
		rc = RPC_INVALID_PARAMS;
	} else if (json_object_get(obj, "deleted")) {
		out->is_tombstone = true;
		rc = parse_tombstone(obj, &out->tomb, msg);
	} else {
		rc = parse_record(obj, &out->rec, msg);
	}
	json_decref(obj);
	return rc;
}

int exp_parse_line(const char *s, size_t len, struct exp_line *out,
		   char msg[VMEM_ERRMSG_LEN])
{
	size_t n = len > 0 && s[len - 1] == '\r' ? len - 1 : len;

	memset(out, 0, sizeof(*out));
	if (n <= EXP_LINE_MAX && fast_record(s, n, &out->rec) == 0)
		return 0;
	return exp_parse_line_general(s, len, out, msg);
}

/* ---- shard names ---- */

static bool plain_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

/* Would the agent id be its own segment? */
static bool plain(const char *s, size_t len)
{
	if (len == 0 || s[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++)
		if (!plain_char((unsigned char)s[i]))
			return false;
	return true;
}

int exp_segment(const char *agent, size_t len, char *out, size_t n)
{
	if (agent_id_check(agent, len, NULL) != 0)
		return -1;
	if (plain(agent, len)) {
		if (len + 1 > n)
			return -1;
		memcpy(out, agent, len);
		out[len] = '\0';
		return (int)len;
	}
	if (1 + base64url_len(len) + 1 > n)
		return -1;
	out[0] = '~';
	return (int)(1 + base64url_encode(agent, len, out + 1));
}

int exp_segment_decode(const char *seg, char *out, size_t n, size_t *len)
{
	char check[EXP_SEGMENT_MAX + 1];
	size_t slen = strnlen(seg, EXP_SEGMENT_MAX + 1), o;
	long dlen;

	if (slen == 0 || slen > EXP_SEGMENT_MAX)
		return -1;
	if (seg[0] != '~') {
		if (!plain(seg, slen) || slen > VMEM_AGENT_ID_MAX ||
		    slen + 1 > n)
			return -1;
		memcpy(out, seg, slen + 1);
		*len = slen;
		return 0;
	}
	dlen = base64url_decoded_len(seg + 1, slen - 1);
	if (dlen < 0 || (size_t)dlen + 1 > n ||
	    !base64url_decode(seg + 1, slen - 1, out))
		return -1;
	o = (size_t)dlen;
	out[o] = '\0';
	/* Canonical only: the segment this agent id encodes to. */
	if (exp_segment(out, o, check, sizeof(check)) < 0 ||
	    strcmp(check, seg) != 0)
		return -1;
	*len = o;
	return 0;
}

int exp_shard_path(const char *agent, size_t len, int64_t usec, unsigned seq,
		   char *out, size_t n)
{
	char seg[EXP_SEGMENT_MAX + 1], nth[16] = "";
	time_t t = (time_t)(usec / 1000000);
	struct tm tm;
	int r;

	/* A shard is named by a day of years 1970..9999 (exp_shard_name_seq):
	 * a time outside them (an id's from far ahead) has none. */
	if (usec < 0 || seq < 1 || seq > EXP_SHARD_SEQ_MAX ||
	    exp_segment(agent, len, seg, sizeof(seg)) < 0 ||
	    !gmtime_r(&t, &tm) || tm.tm_year + 1900 > 9999)
		return -1;
	if (seq > 1)
		snprintf(nth, sizeof(nth), ".%u", seq);
	r = snprintf(out, n, "%s/%04d-%02d-%02d%s" EXP_SHARD_SUFFIX, seg,
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, nth);
	return r < 0 || (size_t)r >= n ? -1 : r;
}

static int num(const char *s, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* The N of ".N" + EXP_SHARD_SUFFIX at s (len bytes in all), or 0. */
static unsigned nth_seq(const char *s, size_t len)
{
	size_t digits = len - 1 - strlen(EXP_SHARD_SUFFIX);
	unsigned seq = 0;

	if (len <= 1 + strlen(EXP_SHARD_SUFFIX) || s[0] != '.' || digits > 8 ||
	    s[1] == '0' || strcmp(s + 1 + digits, EXP_SHARD_SUFFIX) != 0)
		return 0;
	for (size_t i = 1; i <= digits; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		seq = seq * 10 + (unsigned)(s[i] - '0');
	}
	return seq >= 2 ? seq : 0;
}

unsigned exp_shard_name_seq(const char *name)
{
	static const int days[] = {31, 29, 31, 30, 31, 30,
				   31, 31, 30, 31, 30, 31};
	size_t len = strlen(name);
	unsigned seq;
	int y, m, d;

	if (len < 10 + strlen(EXP_SHARD_SUFFIX) || name[4] != '-' ||
	    name[7] != '-')
		return 0;
	seq = strcmp(name + 10, EXP_SHARD_SUFFIX) == 0
		      ? 1
		      : nth_seq(name + 10, len - 10);
	y = num(name, 4);
	m = num(name + 5, 2);
	d = num(name + 8, 2);
	if (!seq || y < 1970 || m < 1 || m > 12 || d < 1 || d > days[m - 1])
		return 0;
	return m == 2 && d == 29 &&
			       !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)
		       ? 0
		       : seq;
}

bool exp_shard_name_valid(const char *name)
{
	return exp_shard_name_seq(name) != 0;
}
