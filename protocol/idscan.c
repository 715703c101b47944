/*
 * A byte-by-byte scan of a JSON text for its top-level "id" and "method"
 * (idscan.h). It trusts nothing: malformed input only yields no id.
 */
#include "protocol/idscan.h"

#include <string.h>

#include "protocol/hex.h"

void idscan_init(struct idscan *s)
{
	memset(s, 0, sizeof(*s));
}

static void keep(struct idscan_value *v, char c)
{
	if (v->len < IDSCAN_VALUE_MAX)
		v->text[v->len++] = c;
	else
		v->overflow = true;
}

static struct idscan_value *target(struct idscan *s, int which)
{
	return which == 1 ? &s->id : &s->method;
}

/* The end of a value being kept. */
static void end_capture(struct idscan *s)
{
	struct idscan_value *v;

	if (!s->capturing)
		return;
	v = target(s, s->capturing);
	v->text[v->len] = '\0';
	v->seen = !v->overflow;
	s->capturing = 0;
}

static void start_value(struct idscan *s, char c, bool string)
{
	if (s->pending > 0 && s->depth == 1) {
		struct idscan_value *v = target(s, s->pending);

		/* A repeated member: the last one counts, as in jansson. */
		v->len = 0;
		v->seen = false;
		v->overflow = false;
		s->capturing = s->pending;
		s->capture_string = string;
		keep(v, c);
	}
	s->pending = 0;
}

/* A decoded character of a key. Only printable ASCII can be part of "id"
 * or "method": anything else (NUL, a control character, a bad escape,
 * non-ASCII) is kept as DEL, which spoils a match without ending the key
 * as a NUL would. */
static void key_char(struct idscan *s, unsigned c)
{
	if (s->key_len < sizeof(s->key) - 1)
		s->key[s->key_len] = c >= 0x20 && c < 0x7f ? (char)c : '\x7f';
	s->key_len++;
}

/* What a one-letter escape of a key decodes to. */
static unsigned escaped(char c)
{
	switch (c) {
	case '"':
	case '\\':
	case '/':
		return (unsigned char)c;
	case 'b':
		return '\b';
	case 'f':
		return '\f';
	case 'n':
		return '\n';
	case 'r':
		return '\r';
	case 't':
		return '\t';
	default:
		return 0x7f; /* no escape: the parser refuses the text */
	}
}

/* A byte of a key: escapes are decoded ("i\u0064" is "id" and "me\thod"
 * holds a tab, as the JSON parser reads them). */
static void feed_key(struct idscan *s, char c)
{
	if (s->hex_left) {
		int v = hex_value(c);

		s->hex = s->hex * 16 + (unsigned)(v < 0 ? 0xFFFF : v);
		if (--s->hex_left == 0)
			key_char(s, s->hex);
		return;
	}
	if (s->escape) {
		s->escape = false;
		if (c == 'u') {
			s->hex_left = 4;
			s->hex = 0;
		} else {
			key_char(s, escaped(c));
		}
		return;
	}
	if (c == '\\') {
		s->escape = true;
		return;
	}
	if (c != '"') {
		key_char(s, (unsigned char)c);
		return;
	}
	s->in_string = false;
	s->reading_key = false;
	s->key[s->key_len < sizeof(s->key) ? s->key_len : 0] = '\0';
	s->pending = !strcmp(s->key, "id")	 ? 1
		     : !strcmp(s->key, "method") ? 2
						 : 0;
	s->pending = -s->pending; /* armed once the ':' comes */
}

static void feed_string(struct idscan *s, char c)
{
	if (s->reading_key) {
		feed_key(s, c);
		return;
	}
	if (s->capturing)
		keep(target(s, s->capturing), c);
	if (s->escape) {
		s->escape = false;
		return;
	}
	if (c == '\\') {
		s->escape = true;
		return;
	}
	if (c != '"')
		return;
	s->in_string = false;
	if (s->capturing)
		end_capture(s);
}

void idscan_feed(struct idscan *s, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = p[i];

		if (s->in_string) {
			feed_string(s, c);
			continue;
		}
		if (!s->started) {
			if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
				continue;
			s->started = true;
			if (c != '{')
				s->not_object = true;
		}
		if (s->not_object)
			return;
		switch (c) {
		case '"':
			s->in_string = true;
			if (s->depth == 1 && s->expect_key) {
				s->expect_key = false;
				s->reading_key = true;
				s->key_len = 0;
				s->hex_left = 0;
			} else {
				start_value(s, c, true);
			}
			break;
		case '{':
		case '[':
			end_capture(s);
			s->pending = 0;
			s->depth++;
			if (s->depth == 1)
				s->expect_key = true;
			break;
		case '}':
		case ']':
			end_capture(s);
			if (s->depth > 0)
				s->depth--;
			break;
		case ':':
			if (s->depth == 1 && s->pending < 0)
				s->pending = -s->pending;
			break;
		case ',':
			end_capture(s);
			if (s->depth == 1) {
				s->expect_key = true;
				s->pending = 0;
			}
			break;
		case ' ':
		case '\t':
		case '\r':
		case '\n':
			if (s->capturing && !s->capture_string)
				end_capture(s);
			break;
		default:
			if (s->capturing)
				keep(target(s, s->capturing), c);
			else
				start_value(s, c, false);
			break;
		}
	}
}

/* JSON-RPC ids are strings, numbers or null: a kept true or false (or
 * anything else a malformed text left) is no id the answer may carry. */
static bool rpc_id_kind(const char *text)
{
	return text[0] == '"' || text[0] == '-' ||
	       (text[0] >= '0' && text[0] <= '9') || !strcmp(text, "null");
}

const char *idscan_id(struct idscan *s, size_t *len)
{
	if (s->capturing == 1 && !s->capture_string)
		end_capture(s);
	if (s->not_object || !s->id.seen || !rpc_id_kind(s->id.text))
		return NULL;
	*len = s->id.len;
	return s->id.text;
}

const char *idscan_method(struct idscan *s, size_t *len)
{
	if (s->not_object || !s->method.seen || s->method.text[0] != '"')
		return NULL;
	*len = s->method.len;
	return s->method.text;
}
