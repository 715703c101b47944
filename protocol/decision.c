/*
 * Coordinates and decisions: validation of every field against the limits
 * of design.md section 1, and the two serialisations (compact for the wire
 * and the log, two-space indented for the files). Every parser here is the
 * exact inverse of its formatter, so a file we wrote round-trips byte for
 * byte. The record parser also reads the seed library's files (no
 * version, Python isoformat() timestamps); what it makes of them is our
 * form, and the daemon leaves such a file's bytes alone until the
 * decision is written again.
 */
#include "protocol/decision.h"
#include "protocol/errors.h"
#include "protocol/fastjson.h"
#include "protocol/jsonstr.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

int coord_cmp(const struct coord *a, const struct coord *b)
{
	if (a->x != b->x)
		return a->x < b->x ? -1 : 1;
	if (a->y != b->y)
		return a->y < b->y ? -1 : 1;
	if (a->z != b->z)
		return a->z < b->z ? -1 : 1;
	return 0;
}

static int effective_max_x(int max_x)
{
	return max_x > 0 ? max_x : VMEM_MAX_X_DEFAULT;
}

bool coord_valid(const struct coord *c, int max_x)
{
	return c->x >= 1 && c->x <= effective_max_x(max_x) && c->y >= 1 &&
	       c->y <= VMEM_MAX_Y && c->z >= 1 && c->z <= VMEM_MAX_Z;
}

/* One axis: a JSON integer within 1..max. */
static int axis_from_json(const json_t *obj, const char *name, int max,
			  int *out, char *msg)
{
	const json_t *v = json_object_get(obj, name);
	json_int_t i;
	char *got;

	if (!v) {
		set_msg(msg, "coordinate is missing member %s", name);
		return RPC_COORDINATE_VALIDATION;
	}
	if (json_is_integer(v)) {
		i = json_integer_value(v);
		if (i >= 1 && i <= max) {
			*out = (int)i;
			return 0;
		}
	}
	if (json_is_real(v) &&
	    (json_real_value(v) >= 9.2e18 || json_real_value(v) <= -9.2e18)) {
		/* An integer literal beyond int64 arrives as a real
		 * (jsonrpc.c): say what it was rather than its rounding. */
		set_msg(msg,
			"coordinate.%s must be an integer in 1..%d (got a "
			"number beyond 64 bits)",
			name, max);
		return RPC_COORDINATE_VALIDATION;
	}
	got = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (got)
		set_msg(msg,
			"coordinate.%s must be an integer in 1..%d (got %.40s)",
			name, max, got);
	else
		set_msg(msg, "coordinate.%s must be an integer in 1..%d", name,
			max);
	free(got);
	return RPC_COORDINATE_VALIDATION;
}

int coord_from_json(const json_t *obj, int max_x, struct coord *out,
		    char msg[VMEM_ERRMSG_LEN])
{
	const char *key;
	json_t *val;
	struct coord c;
	int ret;

	if (!json_is_object(obj)) {
		set_msg(msg, "coordinate must be an object {\"x\", \"y\", "
			     "\"z\"}");
		return RPC_COORDINATE_VALIDATION;
	}
	json_object_foreach((json_t *)obj, key, val)
	{
		if (strcmp(key, "x") != 0 && strcmp(key, "y") != 0 &&
		    strcmp(key, "z") != 0) {
			set_msg(msg, "coordinate has unknown member %.40s",
				key);
			return RPC_COORDINATE_VALIDATION;
		}
	}
	ret = axis_from_json(obj, "x", effective_max_x(max_x), &c.x, msg);
	if (ret)
		return ret;
	ret = axis_from_json(obj, "y", VMEM_MAX_Y, &c.y, msg);
	if (ret)
		return ret;
	ret = axis_from_json(obj, "z", VMEM_MAX_Z, &c.z, msg);
	if (ret)
		return ret;
	*out = c;
	return 0;
}

json_t *coord_to_json(const struct coord *c)
{
	return json_pack("{s:i,s:i,s:i}", "x", c->x, "y", c->y, "z", c->z);
}

int coord_path(const struct coord *c, char *buf, size_t n)
{
	int r = snprintf(buf, n, "x-%03d/y-%d-z-%d.json", c->x, c->y, c->z);

	if (r < 0 || (size_t)r >= n)
		return -1;
	return r;
}

/* Read up to 9 decimal digits at *p; -1 if none or too many. */
static int read_uint(const char **p)
{
	const char *s = *p;
	int v = 0, n = 0;

	while (*s >= '0' && *s <= '9') {
		if (++n > 9)
			return -1;
		v = v * 10 + (*s - '0');
		s++;
	}
	if (n == 0)
		return -1;
	*p = s;
	return v;
}

int coord_from_path(const char *dir, const char *file, int max_x,
		    struct coord *out)
{
	char expect[64], given[64];
	const char *p;
	struct coord c;
	int r;

	if (!dir || !file || strncmp(dir, "x-", 2) != 0 ||
	    strncmp(file, "y-", 2) != 0)
		return -1;
	p = dir + 2;
	c.x = read_uint(&p);
	if (c.x < 0 || *p)
		return -1;
	p = file + 2;
	c.y = read_uint(&p);
	if (c.y < 0 || strncmp(p, "-z-", 3) != 0)
		return -1;
	p += 3;
	c.z = read_uint(&p);
	if (c.z < 0 || strcmp(p, ".json") != 0)
		return -1;
	if (!coord_valid(&c, max_x))
		return -1;
	/* Only the exact spelling coord_path() writes is a decision file. */
	if (coord_path(&c, expect, sizeof(expect)) < 0)
		return -1;
	r = snprintf(given, sizeof(given), "%s/%s", dir, file);
	if (r < 0 || (size_t)r >= sizeof(given) || strcmp(given, expect) != 0)
		return -1;
	*out = c;
	return 0;
}

/* How many bytes from s on are ASCII and not NUL, counted in whole
 * 8-byte words (text is mostly ASCII: one test per word, not per byte). */
static size_t ascii_run(const unsigned char *s, size_t len)
{
	const uint64_t high = 0x8080808080808080ull,
		       low = 0x0101010101010101ull;
	size_t i = 0;
	uint64_t w;

	for (; len - i >= 8; i += 8) {
		memcpy(&w, s + i, 8);
		/* A set high bit, or a zero byte: with no high bit set,
		 * (w - low) & ~w & high is non-zero exactly then. */
		if ((w & high) || ((w - low) & ~w & high))
			break;
	}
	return i;
}

bool utf8_valid(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, n, k;
	unsigned char c, lo, hi;

	while (i < len) {
		c = s[i];
		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			i += ascii_run(s + i, len - i);
			continue;
		}
		lo = 0x80;
		hi = 0xBF;
		if (c >= 0xC2 && c <= 0xDF) {
			n = 1;
		} else if (c >= 0xE0 && c <= 0xEF) {
			n = 2;
			if (c == 0xE0)
				lo = 0xA0; /* overlong */
			else if (c == 0xED)
				hi = 0x9F; /* surrogates */
		} else if (c >= 0xF0 && c <= 0xF4) {
			n = 3;
			if (c == 0xF0)
				lo = 0x90; /* overlong */
			else if (c == 0xF4)
				hi = 0x8F; /* > U+10FFFF */
		} else {
			return false;
		}
		if (len - i - 1 < n)
			return false;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return false;
		for (k = 2; k <= n; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
		i += n + 1;
	}
	return true;
}

int content_check(const char *s, size_t len, char msg[VMEM_ERRMSG_LEN])
{
	if (!s || len == 0) {
		set_msg(msg, "content must not be empty");
		return RPC_INVALID_PARAMS;
	}
	if (len > VMEM_CONTENT_MAX) {
		set_msg(msg, "content too large: %zu bytes, more than %d", len,
			VMEM_CONTENT_MAX);
		return RPC_INVALID_PARAMS;
	}
	if (!utf8_valid(s, len)) {
		set_msg(msg, "content must be UTF-8 without NUL");
		return RPC_INVALID_PARAMS;
	}
	return 0;
}

/* Is the code point whitespace for Python's str.strip()? */
static bool is_space(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) ||
	       cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

bool utf8_blank(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, n;
	uint32_t cp;

	while (i < len) {
		n = s[i] < 0x80 ? 1 : s[i] < 0xe0 ? 2 : s[i] < 0xf0 ? 3 : 4;
		cp = n == 1 ? s[i] : s[i] & (0x7f >> n);
		for (size_t k = 1; k < n; k++)
			cp = cp << 6 | (s[i + k] & 0x3f);
		if (!is_space(cp))
			return false;
		i += n;
	}
	return true;
}

int content_check_new(const char *s, size_t len, char msg[VMEM_ERRMSG_LEN])
{
	int rc = content_check(s, len, msg);

	if (rc == 0 && utf8_blank(s, len)) {
		set_msg(msg, "content must not be empty or only whitespace");
		rc = RPC_INVALID_PARAMS;
	}
	return rc;
}

int agent_id_check(const char *s, size_t len, char msg[VMEM_ERRMSG_LEN])
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i;

	if (!s || len == 0) {
		set_msg(msg, "agent_id must not be empty");
		return RPC_INVALID_PARAMS;
	}
	if (len > VMEM_AGENT_ID_MAX) {
		set_msg(msg, "agent_id is %zu bytes, more than %d", len,
			VMEM_AGENT_ID_MAX);
		return RPC_INVALID_PARAMS;
	}
	if (!utf8_valid(s, len)) {
		set_msg(msg, "agent_id must be UTF-8 without NUL");
		return RPC_INVALID_PARAMS;
	}
	for (i = 0; i < len; i++) {
		/* C0, DEL, and C1 (U+0080..U+009F is C2 80..C2 9F). */
		if (u[i] < 0x20 || u[i] == 0x7F ||
		    (u[i] == 0xC2 && i + 1 < len && u[i + 1] <= 0x9F)) {
			set_msg(msg, "agent_id must not contain control "
				     "characters");
			return RPC_INVALID_PARAMS;
		}
	}
	return 0;
}

int issue_context_check(const json_t *ctx, char msg[VMEM_ERRMSG_LEN])
{
	const char *key;
	json_t *val;
	size_t n;

	if (!ctx || json_is_null(ctx))
		return 0;
	if (!json_is_object(ctx)) {
		set_msg(msg, "issue_context must be an object or null");
		return RPC_INVALID_PARAMS;
	}
	n = json_object_size(ctx);
	if (n > VMEM_CONTEXT_KEYS_MAX) {
		set_msg(msg, "issue_context has %zu keys, more than %d", n,
			VMEM_CONTEXT_KEYS_MAX);
		return RPC_INVALID_PARAMS;
	}
	json_object_foreach((json_t *)ctx, key, val)
	{
		if (!json_is_string(val)) {
			set_msg(msg, "issue_context.%.40s must be a string",
				key);
			return RPC_INVALID_PARAMS;
		}
		n = json_string_length(val);
		if (n > VMEM_CONTEXT_VALUE_MAX) {
			set_msg(msg,
				"issue_context.%.40s is %zu bytes, more than "
				"%d",
				key, n, VMEM_CONTEXT_VALUE_MAX);
			return RPC_INVALID_PARAMS;
		}
		if (!utf8_valid(json_string_value(val), n)) {
			set_msg(msg,
				"issue_context.%.40s must be UTF-8 without NUL",
				key);
			return RPC_INVALID_PARAMS;
		}
	}
	return 0;
}

/* The last n decimal digits of v at s (a year outside 0..9999, which no
 * timestamp we accept has, still gives digits). */
static void put_digits(char *s, unsigned v, int n)
{
	for (int i = n - 1; i >= 0; i--) {
		s[i] = (char)('0' + v % 10);
		v /= 10;
	}
}

/*
 * Days since 1970-01-01 of a proleptic Gregorian date, and back: the
 * arithmetic of eras of 400 years (146,097 days), which starts each year
 * in March so that the leap day is the last of its year. By hand rather
 * than timegm/gmtime_r: those take the time zone lock and search, and an
 * answer of a hundred records or a start of a million read as many.
 */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;				       /* 0..399 */
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* 0..365 */
	return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097; /* 0..146096 */
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) /
	      365;				       /* 0..399 */
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100); /* 0..365 */
	mp = (5 * doy + 2) / 153;		       /* 0..11 */
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

void timestamp_format(int64_t usec, char out[VMEM_TIMESTAMP_LEN + 1])
{
	int64_t sec = usec / 1000000, frac = usec % 1000000, days, sod, year;
	int mon, mday;

	if (frac < 0) {
		frac += 1000000;
		sec--;
	}
	days = sec / 86400;
	sod = sec % 86400;
	if (sod < 0) {
		sod += 86400;
		days--;
	}
	civil_from_days(days, &year, &mon, &mday);
	/* By hand: snprintf took a microsecond a call. Years outside
	 * 0..9999 (no record has one: timestamp_parse refuses them) would
	 * show their last four digits. */
	put_digits(out, (unsigned)(year % 10000 + 10000) % 10000, 4);
	out[4] = '-';
	put_digits(out + 5, (unsigned)mon, 2);
	out[7] = '-';
	put_digits(out + 8, (unsigned)mday, 2);
	out[10] = 'T';
	put_digits(out + 11, (unsigned)(sod / 3600), 2);
	out[13] = ':';
	put_digits(out + 14, (unsigned)(sod / 60 % 60), 2);
	out[16] = ':';
	put_digits(out + 17, (unsigned)(sod % 60), 2);
	out[19] = '.';
	put_digits(out + 20, (unsigned)frac, 6);
	out[26] = 'Z';
	out[VMEM_TIMESTAMP_LEN] = '\0';
}

/* n decimal digits at s; -1 when any is not a digit. */
static int digits(const char *s, int n)
{
	int v = 0, i;

	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

static int days_in_month(int year, int mon)
{
	static const int days[] = {31, 28, 31, 30, 31, 30,
				   31, 31, 30, 31, 30, 31};
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

	return mon == 2 && leap ? 29 : days[mon - 1];
}

int timestamp_parse(const char *s, int64_t *usec)
{
	int year, mon, day, hour, min, sec, frac;

	if (!s || strlen(s) != VMEM_TIMESTAMP_LEN || s[4] != '-' ||
	    s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' ||
	    s[19] != '.' || s[26] != 'Z')
		return -1;
	year = digits(s, 4);
	mon = digits(s + 5, 2);
	day = digits(s + 8, 2);
	hour = digits(s + 11, 2);
	min = digits(s + 14, 2);
	sec = digits(s + 17, 2);
	frac = digits(s + 20, 6);
	if (year < 1 || mon < 1 || mon > 12 || day < 1 ||
	    day > days_in_month(year, mon) || hour < 0 || hour > 23 ||
	    min < 0 || min > 59 || sec < 0 || sec > 59 || frac < 0)
		return -1;
	*usec = ((days_from_civil(year, mon, day) * 24 + hour) * 60 + min) *
			60 * 1000000 +
		(int64_t)sec * 1000000 + frac;
	return 0;
}

/* A numeric offset "+HH:MM" or "-HH:MM" in minutes; -1 if malformed. */
static int offset_minutes(const char *s, size_t len, int *minutes)
{
	int hh, mm;

	if (len != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':')
		return -1;
	hh = digits(s + 1, 2);
	mm = digits(s + 4, 2);
	if (hh < 0 || hh > 23 || mm < 0 || mm > 59)
		return -1;
	*minutes = (s[0] == '-' ? -1 : 1) * (hh * 60 + mm);
	return 0;
}

int timestamp_parse_any(const char *s, size_t len, int64_t *usec)
{
	char norm[VMEM_TIMESTAMP_LEN + 1];
	int frac = 0, scale = 100000, minutes = 0;
	size_t i = 19;
	int64_t t;

	/* The date and time, rewritten in our form to reuse its checks. */
	if (!s || len < 19 || (s[10] != 'T' && s[10] != 't' && s[10] != ' '))
		return -1;
	memcpy(norm, s, 19);
	norm[10] = 'T';
	if (i < len && s[i] == '.') {
		size_t start = ++i;

		while (i < len && s[i] >= '0' && s[i] <= '9') {
			if (i - start < 6) {
				frac += (s[i] - '0') * scale;
				scale /= 10;
			}
			i++;
		}
		if (i == start || i - start > 9)
			return -1;
	}
	snprintf(norm + 19, sizeof(norm) - 19, ".%06dZ", frac);
	if (timestamp_parse(norm, &t) < 0)
		return -1;
	if (i < len && (s[i] == 'Z' || s[i] == 'z'))
		i++;
	else if (i < len && offset_minutes(s + i, len - i, &minutes) == 0)
		i = len;
	if (i != len)
		return -1;
	t -= (int64_t)minutes * 60 * 1000000;
	/* The instant must be one our own form can spell (years 1..9999). */
	timestamp_format(t, norm);
	if (timestamp_parse(norm, usec) < 0)
		return -1;
	return 0;
}

void decision_done(struct decision *d)
{
	if (!d)
		return;
	free(d->content);
	d->content = NULL;
	d->content_len = 0;
	free(d->agent_id);
	d->agent_id = NULL;
	json_decref(d->issue_context);
	d->issue_context = NULL;
}

json_t *decision_to_json(const struct decision *d)
{
	json_t *obj = json_object();

	if (!obj)
		return NULL;
	if (json_object_set_new(obj, "coordinate", coord_to_json(&d->coord)) <
		    0 ||
	    json_object_set_new(obj, "content",
				json_stringn(d->content, d->content_len)) < 0 ||
	    json_object_set_new(obj, "timestamp", json_string(d->timestamp)) <
		    0 ||
	    json_object_set_new(obj, "agent_id", json_string(d->agent_id)) <
		    0 ||
	    json_object_set_new(obj, "issue_context",
				d->issue_context ? json_incref(d->issue_context)
						 : json_null()) < 0 ||
	    json_object_set_new(obj, "version", json_integer(d->version)) < 0) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

static const char *const record_members[] = {
	"coordinate", "content",       "timestamp",
	"agent_id",   "issue_context", "version",
};

#define RECORD_MEMBERS (sizeof(record_members) / sizeof(record_members[0]))

int decision_from_json(const json_t *obj, int max_x, struct decision *out,
		       char msg[VMEM_ERRMSG_LEN])
{
	const char *key, *s;
	json_t *val, *v;
	size_t i, n;
	int64_t usec;
	int ret;

	memset(out, 0, sizeof(*out));
	if (!json_is_object(obj)) {
		set_msg(msg, "decision must be an object");
		return RPC_INVALID_PARAMS;
	}
	json_object_foreach((json_t *)obj, key, val)
	{
		for (i = 0; i < RECORD_MEMBERS; i++)
			if (strcmp(key, record_members[i]) == 0)
				break;
		if (i == RECORD_MEMBERS) {
			set_msg(msg, "decision has unknown member %.40s", key);
			return RPC_INVALID_PARAMS;
		}
	}
	for (i = 0; i < RECORD_MEMBERS; i++) {
		/* The seed library's files have no version, and its reader
		 * takes a missing issue_context as null. */
		if (!json_object_get(obj, record_members[i]) &&
		    strcmp(record_members[i], "version") != 0 &&
		    strcmp(record_members[i], "issue_context") != 0) {
			set_msg(msg, "decision is missing member %s",
				record_members[i]);
			return RPC_INVALID_PARAMS;
		}
	}

	ret = coord_from_json(json_object_get(obj, "coordinate"), max_x,
			      &out->coord, msg);
	if (ret)
		goto out;

	ret = RPC_INVALID_PARAMS;
	v = json_object_get(obj, "content");
	if (!json_is_string(v)) {
		set_msg(msg, "content must be a string");
		goto out;
	}
	n = json_string_length(v);
	ret = content_check(json_string_value(v), n, msg);
	if (ret)
		goto out;
	ret = RPC_INVALID_PARAMS;

	v = json_object_get(obj, "timestamp");
	s = json_string_value(v);
	if (!s || timestamp_parse_any(s, json_string_length(v), &usec) < 0) {
		set_msg(msg, "timestamp must be RFC 3339 "
			     "(YYYY-MM-DDTHH:MM:SS[.ffffff][Z|+HH:MM])");
		goto out;
	}
	timestamp_format(usec, out->timestamp);

	v = json_object_get(obj, "agent_id");
	if (!json_is_string(v)) {
		set_msg(msg, "agent_id must be a string");
		goto out;
	}
	ret = agent_id_check(json_string_value(v), json_string_length(v), msg);
	if (ret)
		goto out;
	ret = RPC_INVALID_PARAMS;
	out->agent_id = strdup(json_string_value(v));

	v = json_object_get(obj, "issue_context");
	ret = issue_context_check(v, msg);
	if (ret)
		goto out;
	ret = RPC_INVALID_PARAMS;
	if (json_is_object(v)) {
		out->issue_context = json_deep_copy(v);
		if (!out->issue_context)
			goto oom;
	}

	v = json_object_get(obj, "version");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 1)) {
		set_msg(msg, "version must be an integer >= 1");
		goto out;
	}
	out->version = v ? json_integer_value(v) : 1;

	v = json_object_get(obj, "content");
	out->content = malloc(n + 1);
	if (!out->content || !out->agent_id)
		goto oom;
	memcpy(out->content, json_string_value(v), n + 1);
	out->content_len = n;
	return 0;
oom:
	set_msg(msg, "out of memory");
	ret = RPC_INTERNAL_ERROR;
out:
	decision_done(out);
	return ret;
}

/* Serialise d with flags and append `tail` (may be ""). */
static char *dump(const struct decision *d, size_t flags, const char *tail,
		  size_t *len)
{
	json_t *obj = decision_to_json(d);
	char *s = NULL, *t;
	size_t n, tn = strlen(tail);

	if (!obj)
		goto out;
	s = json_dumps(obj, flags);
	if (!s)
		goto out;
	n = strlen(s);
	if (tn) {
		t = realloc(s, n + tn + 1);
		if (!t) {
			free(s);
			s = NULL;
			goto out;
		}
		s = t;
		memcpy(s + n, tail, tn + 1);
		n += tn;
	}
	if (len)
		*len = n;
out:
	json_decref(obj);
	return s;
}

/* A growing output string for the file form. */
struct out {
	char *s;
	size_t len, cap;
	bool failed;
};

static void out_put(struct out *o, const char *p, size_t n)
{
	if (o->failed)
		return;
	if (o->cap - o->len <= n) {
		size_t cap = o->cap ? o->cap : 256;
		char *s;

		while (cap - o->len <= n)
			cap *= 2;
		s = realloc(o->s, cap);
		if (!s) {
			o->failed = true;
			return;
		}
		o->s = s;
		o->cap = cap;
	}
	memcpy(o->s + o->len, p, n);
	o->len += n;
	o->s[o->len] = '\0';
}

/*
 * The compact form is written directly rather than through json_t
 * objects: it is made for every decision loaded at start-up and every
 * write, and building and dumping a jansson tree costs several times more.
 * Its length is counted first, so each record is one allocation of the
 * right size (a buffer grown by doubling left holes between records).
 */

/* The head of the compact form, up to the content: written to num. */
static int compact_head(const struct decision *d, char num[96])
{
	return snprintf(num, 96,
			"{\"coordinate\":{\"x\":%d,\"y\":%d,\"z\":%d},"
			"\"content\":",
			d->coord.x, d->coord.y, d->coord.z);
}

/* ... and its tail, from the version on. */
static int compact_tail(const struct decision *d, char num[96])
{
	return snprintf(num, 96, ",\"version\":%lld}", (long long)d->version);
}

size_t decision_compact_len(const struct decision *d)
{
	char num[96];
	size_t n = (size_t)compact_head(d, num) + (size_t)compact_tail(d, num);
	const char *key;
	json_t *val;

	n += json_str_len(d->content, d->content_len);
	n += 13 + json_str_len(d->timestamp, strlen(d->timestamp));
	n += 12 + json_str_len(d->agent_id, strlen(d->agent_id));
	n += 17;
	if (!d->issue_context)
		return n + 4;
	n += 2 + (json_object_size(d->issue_context)
			  ? json_object_size(d->issue_context) - 1
			  : 0);
	json_object_foreach(d->issue_context, key, val)
	{
		n += json_str_len(key, strlen(key)) + 1;
		n += json_str_len(json_string_value(val),
				  json_string_length(val));
	}
	return n;
}

char *decision_write_compact(const struct decision *d, char *o)
{
	char num[96];
	const char *key;
	json_t *val;
	bool first = true;
	int k;

	k = compact_head(d, num);
	o = (char *)memcpy(o, num, (size_t)k) + k;
	o = json_str_put(o, d->content, d->content_len);
	o = (char *)memcpy(o, ",\"timestamp\":", 13) + 13;
	o = json_str_put(o, d->timestamp, strlen(d->timestamp));
	o = (char *)memcpy(o, ",\"agent_id\":", 12) + 12;
	o = json_str_put(o, d->agent_id, strlen(d->agent_id));
	o = (char *)memcpy(o, ",\"issue_context\":", 17) + 17;
	if (!d->issue_context) {
		o = (char *)memcpy(o, "null", 4) + 4;
	} else {
		*o++ = '{';
		json_object_foreach(d->issue_context, key, val)
		{
			if (!first)
				*o++ = ',';
			first = false;
			o = json_str_put(o, key, strlen(key));
			*o++ = ':';
			o = json_str_put(o, json_string_value(val),
					 json_string_length(val));
		}
		*o++ = '}';
	}
	k = compact_tail(d, num);
	o = (char *)memcpy(o, num, (size_t)k) + k;
	*o = '\0';
	return o;
}

char *decision_dump_compact(const struct decision *d, size_t *len)
{
	size_t n = decision_compact_len(d);
	char *s = malloc(n + 1);

	if (!s)
		return NULL;
	decision_write_compact(d, s);
	if (len)
		*len = n;
	return s;
}

static void out_indent(struct out *o, int depth)
{
	static const char spaces[] = "                ";

	out_put(o, "\n", 1);
	for (int i = 0; i < depth; i++)
		out_put(o, spaces, 2);
}

char *decision_file_from_compact(const char *json, size_t len, size_t *out_len)
{
	struct out o = {0};
	bool in_string = false;
	int depth = 0;

	for (size_t i = 0; i < len; i++) {
		char c = json[i];

		if (in_string) {
			out_put(&o, &c, 1);
			if (c == '\\' && i + 1 < len)
				out_put(&o, &json[++i], 1);
			else if (c == '"')
				in_string = false;
			continue;
		}
		switch (c) {
		case '"':
			in_string = true;
			out_put(&o, &c, 1);
			break;
		case '{':
			if (i + 1 < len && json[i + 1] == '}') {
				out_put(&o, "{}", 2);
				i++;
				break;
			}
			out_put(&o, "{", 1);
			out_indent(&o, ++depth);
			break;
		case '}':
			out_indent(&o, --depth);
			out_put(&o, "}", 1);
			break;
		case ',':
			out_put(&o, ",", 1);
			out_indent(&o, depth);
			break;
		case ':':
			out_put(&o, ": ", 2);
			break;
		default:
			out_put(&o, &c, 1);
		}
	}
	out_put(&o, "\n", 1);
	if (o.failed || depth != 0 || in_string) {
		free(o.s);
		return NULL;
	}
	if (out_len)
		*out_len = o.len;
	return o.s;
}

char *decision_dump_file(const struct decision *d, size_t *len)
{
	return dump(d, JSON_INDENT(2), "\n", len);
}

int decision_parse(const char *text, size_t len, int max_x,
		   struct decision *out, char msg[VMEM_ERRMSG_LEN])
{
	json_error_t err;
	json_t *obj;
	int ret;

	memset(out, 0, sizeof(*out));
	obj = fastjson_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
	if (!obj) {
		set_msg(msg, "invalid JSON at line %d column %d: %.80s",
			err.line, err.column, err.text);
		return RPC_INVALID_PARAMS;
	}
	ret = decision_from_json(obj, max_x, out, msg);
	json_decref(obj);
	return ret;
}
