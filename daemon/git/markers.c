/*
 * Conflict markers (see markers.h). A marker is seven equal characters at
 * the start of a line, followed by a space and a label or by the end of
 * the line; "=======" stands alone on its line.
 */
#include "markers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum mark { M_NONE, M_BEGIN, M_BASE, M_SEP, M_END };

/* The marker the line at p (len bytes to the end of the text) starts
 * with, if any. */
static enum mark mark_at(const char *p, size_t len)
{
	static const struct {
		char c;
		enum mark m;
	} marks[] = {{'<', M_BEGIN}, {'|', M_BASE}, {'=', M_SEP}, {'>', M_END}};
	char after;

	if (len < 7)
		return M_NONE;
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++) {
		if (p[0] != marks[i].c)
			continue;
		for (size_t k = 1; k < 7; k++)
			if (p[k] != marks[i].c)
				return M_NONE;
		after = len > 7 ? p[7] : '\n';
		if (after == '\n' || after == '\r' ||
		    (after == ' ' && marks[i].m != M_SEP))
			return marks[i].m;
		return M_NONE;
	}
	return M_NONE;
}

/* The length of the line at p, its newline included. */
static size_t line_len(const char *p, size_t len)
{
	const char *nl = memchr(p, '\n', len);

	return nl ? (size_t)(nl - p) + 1 : len;
}

bool markers_found(const char *text, size_t len)
{
	size_t off = 0, n;

	while (off < len) {
		n = line_len(text + off, len - off);
		if (mark_at(text + off, len - off) != M_NONE)
			return true;
		off += n;
	}
	return false;
}

char *markers_side(const char *text, size_t len, enum markers_side side,
		   size_t *out_len)
{
	/* where: 0 outside a block, then the part of the block we are in */
	enum { OUT, OURS, BASE, THEIRS } where = OUT;
	char *out = malloc(len + 1);
	size_t off = 0, o = 0, n;
	bool keep;

	if (!out) {
		errno = ENOMEM;
		return NULL;
	}
	while (off < len) {
		enum mark m = mark_at(text + off, len - off);

		n = line_len(text + off, len - off);
		switch (m) {
		case M_BEGIN:
			if (where != OUT)
				goto bad;
			where = OURS;
			break;
		case M_BASE:
			if (where != OURS)
				goto bad;
			where = BASE;
			break;
		case M_SEP:
			if (where != OURS && where != BASE)
				goto bad;
			where = THEIRS;
			break;
		case M_END:
			if (where != THEIRS)
				goto bad;
			where = OUT;
			break;
		case M_NONE:
			keep = where == OUT ||
			       (where == OURS && side == MARKERS_OURS) ||
			       (where == THEIRS && side == MARKERS_THEIRS);
			if (keep) {
				memcpy(out + o, text + off, n);
				o += n;
			}
			break;
		}
		off += n;
	}
	if (where != OUT)
		goto bad;
	out[o] = '\0';
	*out_len = o;
	return out;
bad:
	free(out);
	errno = EINVAL;
	return NULL;
}
