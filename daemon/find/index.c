/*
 * Flat coordinate-addressed index. Slot of (x, y, z) is
 * ((x - 1) * VMEM_MAX_Y + (y - 1)) * VMEM_MAX_Z + (z - 1). The search
 * index follows every put and remove, so it is never stale.
 */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char content_key[] = ",\"content\":\"";

/* Length of the escaped JSON string body starting at s (up to the
 * closing quote). */
static size_t escaped_len(const char *s)
{
	size_t i = 0;

	while (s[i] && s[i] != '"')
		i += s[i] == '\\' && s[i + 1] ? 2 : 1;
	return i;
}

struct record *record_new(const struct decision *d)
{
	struct record *r;
	size_t len;
	char *json = decision_dump_compact(d, &len);

	if (!json)
		return NULL;
	r = record_from_compact(&d->coord, d->version, json, len);
	free(json);
	return r;
}

struct record *record_from_compact(const struct coord *c, int64_t version,
				   const char *json, size_t len)
{
	struct record *r;
	const char *key;

	if (memchr(json, '\0', len))
		return NULL;
	r = malloc(sizeof(*r) + len + 1);
	if (!r)
		return NULL;
	memcpy(r->json, json, len);
	r->json[len] = '\0';
	/* The coordinate object holds only integers, so the first match is
	 * the content member. */
	key = strstr(r->json, content_key);
	if (!key) {
		free(r);
		return NULL;
	}
	r->coord = *c;
	r->version = version;
	r->json_len = len;
	r->content_off = (size_t)(key - r->json) + sizeof(content_key) - 1;
	r->content_esc_len = escaped_len(r->json + r->content_off);
	return r;
}

void record_free(struct record *r)
{
	free(r);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static long hex4(const char *s)
{
	long v = 0;

	for (int i = 0; i < 4; i++) {
		int h = hexval(s[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

static bool put_utf8(struct buf *b, long cp)
{
	char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	return buf_append(b, u, n);
}

int record_content(const struct record *r, struct buf *b)
{
	const char *s = r->json + r->content_off;
	const char *end = s + r->content_esc_len;

	b->len = 0;
	while (s < end) {
		const char *run = s;
		bool ok = true;

		while (s < end && *s != '\\')
			s++;
		if (s > run && !buf_append(b, run, (size_t)(s - run)))
			return -ENOMEM;
		if (s >= end)
			break;
		/* An escape written by jansson: \" \\ \/ \b \f \n \r \t \uXXXX
		 */
		switch (s[1]) {
		case 'u': {
			long cp = hex4(s + 2);

			s += 6;
			if (cp >= 0xD800 && cp < 0xDC00 && s + 6 <= end &&
			    s[0] == '\\' && s[1] == 'u') {
				long lo = hex4(s + 2);

				if (lo >= 0xDC00 && lo < 0xE000) {
					cp = 0x10000 + ((cp - 0xD800) << 10) +
					     (lo - 0xDC00);
					s += 6;
				}
			}
			ok = cp >= 0 && put_utf8(b, cp);
			break;
		}
		default: {
			static const char from[] = "\"\\/bfnrt";
			static const char to[] = "\"\\/\b\f\n\r\t";
			const char *p = strchr(from, s[1]);

			ok = p && s[1] && buf_append(b, &to[p - from], 1);
			s += 2;
		}
		}
		if (!ok)
			return -EINVAL;
	}
	if (!b->data && !buf_append(b, "", 0))
		return -ENOMEM;
	return 0;
}

int index_text(void *ctx, size_t slot, const char **text, size_t *len)
{
	struct index *ix = ctx;
	const struct record *r = slot < ix->n_slots ? ix->slots[slot] : NULL;
	int rc;

	if (!r)
		return -ENOENT;
	rc = record_content(r, &ix->text);
	if (rc == 0) {
		*text = ix->text.data;
		*len = ix->text.len;
	}
	return rc;
}

int index_init(struct index *ix, int max_x)
{
	memset(ix, 0, sizeof(*ix));
	ix->max_x = max_x;
	ix->n_slots = (size_t)max_x * VMEM_MAX_Y * VMEM_MAX_Z;
	ix->slots = calloc(ix->n_slots, sizeof(*ix->slots));
	ix->search = search_new(ix->n_slots);
	if (!ix->slots || !ix->search) {
		index_done(ix);
		return -ENOMEM;
	}
	return 0;
}

void index_done(struct index *ix)
{
	if (ix->slots)
		for (size_t i = 0; i < ix->n_slots; i++)
			record_free(ix->slots[i]);
	free(ix->slots);
	search_free(ix->search);
	buf_done(&ix->scratch);
	buf_done(&ix->text);
	ix->slots = NULL;
	ix->search = NULL;
	ix->count = 0;
}

size_t index_slot(const struct index *ix, const struct coord *c)
{
	(void)ix;
	return ((size_t)(c->x - 1) * VMEM_MAX_Y + (size_t)(c->y - 1)) *
		       VMEM_MAX_Z +
	       (size_t)(c->z - 1);
}

struct coord index_coord(const struct index *ix, size_t slot)
{
	struct coord c;

	(void)ix;
	c.z = (int)(slot % VMEM_MAX_Z) + 1;
	slot /= VMEM_MAX_Z;
	c.y = (int)(slot % VMEM_MAX_Y) + 1;
	c.x = (int)(slot / VMEM_MAX_Y) + 1;
	return c;
}

struct record *index_get(const struct index *ix, const struct coord *c)
{
	return ix->slots[index_slot(ix, c)];
}

/* Forget a record's search postings and content bytes. */
static void unindex(struct index *ix, size_t slot, const struct record *r)
{
	if (record_content(r, &ix->scratch) == 0) {
		search_remove(ix->search, slot, ix->scratch.data,
			      ix->scratch.len);
		ix->content_bytes -= ix->scratch.len;
	}
}

int index_put(struct index *ix, struct record *rec)
{
	size_t slot = index_slot(ix, &rec->coord);
	struct record **p = &ix->slots[slot];
	int rc;

	if (*p) {
		unindex(ix, slot, *p);
		record_free(*p);
	} else {
		ix->count++;
	}
	*p = rec;
	rc = record_content(rec, &ix->scratch);
	if (rc == 0) {
		ix->content_bytes += ix->scratch.len;
		rc = search_add(ix->search, slot, ix->scratch.data,
				ix->scratch.len);
	}
	return rc;
}

int index_remove(struct index *ix, const struct coord *c)
{
	size_t slot = index_slot(ix, c);
	struct record **p = &ix->slots[slot];

	if (!*p)
		return 0;
	unindex(ix, slot, *p);
	record_free(*p);
	*p = NULL;
	ix->count--;
	return 1;
}
