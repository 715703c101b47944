/*
 * The configuration file parser and the precedence of its sources. A
 * struct config is a plain value: copied, compared and merged whole, so
 * a reload builds a new one and swaps it in only when it is valid.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "protocol/decision.h"

enum kind { K_NUM, K_LEVEL, K_STR, K_BOOL, K_PATH };

struct keydef {
	const char *name;
	enum kind kind;
	unsigned long long min, max, def;
};

static const struct keydef keys[CONFIG_NKEYS] = {
	[CONFIG_MAX_X] = {"max_x", K_NUM, 1, 1000000, VMEM_MAX_X_DEFAULT},
	[CONFIG_MAX_LINE] = {"max_line", K_NUM, 1024, 1ull << 30, 1 << 20},
	[CONFIG_MAX_BATCH] = {"max_batch", K_NUM, 1, 100000, 1000},
	[CONFIG_MAX_CONNECTIONS] = {"max_connections", K_NUM, 1, 65536, 256},
	[CONFIG_OUTPUT_BACKLOG] = {"output_backlog", K_NUM, 4096, 1ull << 30,
				   4 << 20},
	[CONFIG_LINE_DEADLINE_MS] = {"line_deadline_ms", K_NUM, 100, 3600000,
				     30000},
	[CONFIG_COMMIT_DELAY_MS] = {"commit_delay_ms", K_NUM, 0, 3600000, 1000},
	[CONFIG_COMMIT_MAX_BATCH] = {"commit_max_batch", K_NUM, 1, 1000000,
				     512},
	[CONFIG_IDLE_EXIT_S] = {"idle_exit_s", K_NUM, 0, 31536000, 900},
	[CONFIG_LOG_LEVEL] = {"log_level", K_LEVEL, LOGL_ERR, LOGL_DEBUG,
			      LOGL_INFO},
	[CONFIG_COMMIT_NAME] = {"commit_name", K_STR, 1, CONFIG_STR_MAX, 0},
	[CONFIG_COMMIT_EMAIL] = {"commit_email", K_STR, 1, CONFIG_STR_MAX, 0},
	[CONFIG_REGISTER_MERGE_DRIVER] = {"register_merge_driver", K_BOOL, 0, 1,
					  1},
	[CONFIG_EMBEDDING_DIM] = {"embedding_dim", K_NUM, 1, 16384, 1536},
	[CONFIG_TRACE_FILE] = {"trace_file", K_PATH, 1, CONFIG_PATH_MAX, 0},
	[CONFIG_EXPERIENCE_SHARD_BYTES] = {"experience_shard_bytes", K_NUM,
					   4096, 1ull << 30, 256 << 10},
};

static const char *const level_names[] = {
	[LOGL_ERR] = "err",	  [LOGL_WARNING] = "warning",
	[LOGL_NOTICE] = "notice", [LOGL_INFO] = "info",
	[LOGL_DEBUG] = "debug",
};

void config_init(struct config *c)
{
	memset(c, 0, sizeof(*c));
	for (int k = 0; k < CONFIG_NKEYS; k++)
		c->num[k] = keys[k].def;
}

const char *config_key_name(enum config_key k)
{
	return (unsigned)k < CONFIG_NKEYS ? keys[k].name : "?";
}

int config_key_find(const char *name, size_t len)
{
	for (int k = 0; k < CONFIG_NKEYS; k++)
		if (strlen(keys[k].name) == len &&
		    memcmp(keys[k].name, name, len) == 0)
			return k;
	return -ENOENT;
}

static char *str_of(struct config *c, enum config_key k)
{
	if (k == CONFIG_TRACE_FILE)
		return c->trace_file;
	return k == CONFIG_COMMIT_NAME ? c->commit_name : c->commit_email;
}

static const char *cstr_of(const struct config *c, enum config_key k)
{
	return str_of((struct config *)c, k);
}

static size_t str_size(enum config_key k)
{
	return k == CONFIG_TRACE_FILE ? CONFIG_PATH_MAX + 1
				      : CONFIG_STR_MAX + 1;
}

/* A C0 or C1 control character, or DEL, at s[i]? */
static bool control_at(const unsigned char *s, size_t i)
{
	if (s[i] < 0x20 || s[i] == 0x7f)
		return true;
	/* U+0080..U+009F are encoded as C2 80..C2 9F */
	return s[i] == 0xc2 && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f;
}

/* A commit name or e-mail git can use: 1..200 bytes of UTF-8, no
 * control characters, no angle brackets (libgit2 refuses them). */
static bool ident_ok(enum config_key k, const char *v)
{
	size_t len = strlen(v);

	if (len == 0 || len > CONFIG_STR_MAX || !utf8_valid(v, len) ||
	    strpbrk(v, "<>") || (k == CONFIG_COMMIT_EMAIL && !strchr(v, '@')))
		return false;
	for (size_t i = 0; i < len; i++)
		if (control_at((const unsigned char *)v, i))
			return false;
	return true;
}

static int set_str(struct config *c, enum config_key k, const char *v,
		   char *msg, size_t msgn)
{
	if (!ident_ok(k, v)) {
		snprintf(msg, msgn, "%s",
			 k == CONFIG_COMMIT_EMAIL
				 ? "must be an e-mail address (with '@') of "
				   "1..200 bytes without control characters, "
				   "'<' or '>'"
				 : "must be a name of 1..200 bytes without "
				   "control characters, '<' or '>'");
		return -EINVAL;
	}
	memcpy(str_of(c, k), v, strlen(v) + 1);
	return 0;
}

int config_set(struct config *c, enum config_key k, const char *value,
	       char *msg, size_t msgn)
{
	const struct keydef *kd;
	unsigned long long v;
	char *end;
	int rc;

	if ((unsigned)k >= CONFIG_NKEYS) {
		snprintf(msg, msgn, "is not a configuration key");
		return -EINVAL;
	}
	kd = &keys[k];
	switch (kd->kind) {
	case K_STR:
		rc = set_str(c, k, value, msg, msgn);
		if (rc < 0)
			return rc;
		break;
	case K_BOOL:
		if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0) {
			snprintf(msg, msgn, "must be true or false");
			return -EINVAL;
		}
		c->num[k] = value[0] == 't';
		break;
	case K_PATH:
		if (!*value || strlen(value) > CONFIG_PATH_MAX) {
			snprintf(msg, msgn, "must be a path of 1..%d bytes",
				 CONFIG_PATH_MAX);
			return -EINVAL;
		}
		memcpy(str_of(c, k), value, strlen(value) + 1);
		break;
	case K_LEVEL:
		for (v = LOGL_ERR; v <= LOGL_DEBUG; v++)
			if (strcmp(value, level_names[v]) == 0)
				break;
		if (v > LOGL_DEBUG) {
			snprintf(msg, msgn,
				 "must be one of err, warning, "
				 "notice, info, debug");
			return -EINVAL;
		}
		c->num[k] = v;
		break;
	case K_NUM:
		/* Digits only: no sign, no blanks, no base prefix. */
		errno = 0;
		v = value[0] >= '0' && value[0] <= '9'
			    ? strtoull(value, &end, 10)
			    : (end = (char *)value, 0);
		if (errno || end == value || *end || v < kd->min ||
		    v > kd->max) {
			snprintf(msg, msgn, "must be an integer in %llu..%llu",
				 kd->min, kd->max);
			return -EINVAL;
		}
		c->num[k] = v;
		break;
	}
	c->set |= 1u << k;
	return 0;
}

static bool blank(char ch)
{
	return ch == ' ' || ch == '\t';
}

static int fail(struct config_error *err, unsigned line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct config_error *err, unsigned line, const char *fmt, ...)
{
	va_list ap;

	err->line = line;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Parse one line (without its end of line) of the file. */
static int parse_line(struct config *c, const char *s, size_t len,
		      unsigned lineno, unsigned *line_of,
		      struct config_error *err)
{
	const char *eq, *kend, *v, *vend;
	char value[CONFIG_PATH_MAX + 1], why[160];
	int k;

	if (memchr(s, '\0', len))
		return fail(err, lineno, "NUL byte in the file");
	if (!utf8_valid(s, len))
		return fail(err, lineno, "not valid UTF-8");
	while (len && blank(*s)) {
		s++;
		len--;
	}
	while (len && blank(s[len - 1]))
		len--;
	if (len == 0 || s[0] == '#')
		return 0;
	eq = memchr(s, '=', len);
	if (!eq)
		return fail(err, lineno,
			    "expected \"key = value\", found no '='");
	for (kend = eq; kend > s && blank(kend[-1]); kend--)
		;
	if (kend == s)
		return fail(err, lineno, "no key before '='");
	k = config_key_find(s, (size_t)(kend - s));
	if (k < 0)
		return fail(err, lineno, "unknown key \"%.*s\"",
			    (int)(kend - s > 64 ? 64 : kend - s), s);
	if (line_of[k])
		return fail(err, lineno, "%s repeated (first set on line %u)",
			    keys[k].name, line_of[k]);
	for (v = eq + 1, vend = s + len; v < vend && blank(*v); v++)
		;
	if (v == vend)
		return fail(err, lineno, "%s has an empty value", keys[k].name);
	if ((size_t)(vend - v) >= sizeof(value)) {
		config_set(c, (enum config_key)k, "", why, sizeof(why));
		return fail(err, lineno, "%s %s (the value is too long)",
			    keys[k].name, why);
	}
	memcpy(value, v, (size_t)(vend - v));
	value[vend - v] = '\0';
	if (config_set(c, (enum config_key)k, value, why, sizeof(why)) < 0)
		return fail(err, lineno, "%s %s (got \"%.64s\")", keys[k].name,
			    why, value);
	line_of[k] = lineno;
	return 0;
}

int config_parse(struct config *c, const char *text, size_t len,
		 struct config_error *err)
{
	unsigned line_of[CONFIG_NKEYS] = {0};
	unsigned lineno = 0, ln, le;
	size_t pos = 0;
	int rc;

	err->line = 0;
	err->msg[0] = '\0';
	while (pos < len) {
		const char *s = text + pos;
		const char *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;

		pos += n + (nl ? 1 : 0);
		lineno++;
		if (n && s[n - 1] == '\r')
			n--;
		rc = parse_line(c, s, n, lineno, line_of, err);
		if (rc < 0)
			return rc;
	}
	ln = line_of[CONFIG_COMMIT_NAME];
	le = line_of[CONFIG_COMMIT_EMAIL];
	if (!ln != !le)
		return fail(err, ln ? ln : le,
			    "%s is set without %s (set both or neither)",
			    ln ? "commit_name" : "commit_email",
			    ln ? "commit_email" : "commit_name");
	return 0;
}

int config_load(struct config *c, const char *path, struct config_error *err)
{
	struct stat st;
	char *text = NULL;
	size_t got = 0;
	ssize_t n;
	int fd = -1, rc;

	config_init(c);
	err->line = 0;
	err->msg[0] = '\0';
	/*
	 * Only a regular file is read. A fifo, a device or a directory is
	 * refused before it is opened (opening a fifo would wait for a
	 * writer, a device may act on open); O_NONBLOCK covers a swap in
	 * between. Symlinks are followed: dotfiles often are.
	 */
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		snprintf(err->msg, sizeof(err->msg), "not a regular file");
		goto out;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(err->msg, sizeof(err->msg), "cannot open: %s",
			 strerror(-rc));
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err->msg, sizeof(err->msg), "cannot stat: %s",
			 strerror(-rc));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		snprintf(err->msg, sizeof(err->msg), "not a regular file");
		goto out;
	}
	if (st.st_size > CONFIG_FILE_MAX) {
		rc = -EFBIG;
		snprintf(err->msg, sizeof(err->msg),
			 "larger than %d bytes: not a configuration file",
			 CONFIG_FILE_MAX);
		goto out;
	}
	/* One byte more than allowed, to notice a file that grew. */
	text = malloc(CONFIG_FILE_MAX + 1);
	if (!text) {
		rc = -ENOMEM;
		snprintf(err->msg, sizeof(err->msg), "out of memory");
		goto out;
	}
	while (got <= CONFIG_FILE_MAX) {
		n = read(fd, text + got, CONFIG_FILE_MAX + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(err->msg, sizeof(err->msg), "cannot read: %s",
				 strerror(-rc));
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got > CONFIG_FILE_MAX) {
		rc = -EFBIG;
		snprintf(err->msg, sizeof(err->msg),
			 "larger than %d bytes: not a configuration file",
			 CONFIG_FILE_MAX);
		goto out;
	}
	rc = config_parse(c, text, got, err);
out:
	if (fd >= 0)
		close(fd);
	free(text);
	return rc;
}

void config_merge(struct config *dst, const struct config *src)
{
	for (int k = 0; k < CONFIG_NKEYS; k++) {
		if (!(src->set & (1u << k)))
			continue;
		if (keys[k].kind == K_STR || keys[k].kind == K_PATH)
			memcpy(str_of(dst, (enum config_key)k),
			       cstr_of(src, (enum config_key)k),
			       str_size((enum config_key)k));
		else
			dst->num[k] = src->num[k];
		dst->set |= 1u << k;
	}
}

int config_default_path(char *buf, size_t n, const char *xdg, const char *home)
{
	int len;

	if (xdg && *xdg)
		len = snprintf(buf, n, "%s/vmem/config", xdg);
	else if (home && *home)
		len = snprintf(buf, n, "%s/.config/vmem/config", home);
	else
		return -ENOENT;
	if (len < 0 || (size_t)len >= n)
		return -ENAMETOOLONG;
	return 0;
}

void config_format(const struct config *c, enum config_key k, char *buf,
		   size_t n)
{
	if ((unsigned)k >= CONFIG_NKEYS) {
		snprintf(buf, n, "?");
		return;
	}
	switch (keys[k].kind) {
	case K_STR:
	case K_PATH:
		snprintf(buf, n, "%s",
			 *cstr_of(c, k) ? cstr_of(c, k) : "(unset)");
		break;
	case K_LEVEL:
		snprintf(buf, n, "%s",
			 c->num[k] >= LOGL_ERR && c->num[k] <= LOGL_DEBUG
				 ? level_names[c->num[k]]
				 : "?");
		break;
	case K_NUM:
		snprintf(buf, n, "%llu", c->num[k]);
		break;
	case K_BOOL:
		snprintf(buf, n, "%s", c->num[k] ? "true" : "false");
		break;
	}
}

bool config_same(const struct config *a, const struct config *b,
		 enum config_key k)
{
	if (keys[k].kind == K_STR || keys[k].kind == K_PATH)
		return strcmp(cstr_of(a, k), cstr_of(b, k)) == 0;
	return a->num[k] == b->num[k];
}

size_t config_describe_changes(const struct config *a, const struct config *b,
			       unsigned mask, char *buf, size_t n)
{
	char va[CONFIG_PATH_MAX + 16], vb[CONFIG_PATH_MAX + 16];
	size_t count = 0, used = 0;
	int w;

	if (n)
		buf[0] = '\0';
	for (int k = 0; k < CONFIG_NKEYS; k++) {
		if (!(mask & (1u << k)) ||
		    config_same(a, b, (enum config_key)k))
			continue;
		config_format(a, (enum config_key)k, va, sizeof(va));
		config_format(b, (enum config_key)k, vb, sizeof(vb));
		if (used < n) {
			w = snprintf(buf + used, n - used, "%s%s %s -> %s",
				     count ? ", " : "", keys[k].name, va, vb);
			if (w > 0)
				used += (size_t)w;
		}
		count++;
	}
	return count;
}
