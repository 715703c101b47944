/*
 * vmemd's configuration: built-in defaults, a configuration file and the
 * command line, in that order of precedence (a later source wins for
 * every key it gives).
 *
 * The file: UTF-8 text (no NUL byte), one "key = value" per line, LF or
 * CRLF line endings. Blank lines and lines whose first non-blank character
 * is '#' are ignored; blanks (spaces, tabs) around the key and the value
 * are trimmed. No quotes, no sections, no includes. A key may appear once.
 * Keys:
 *
 *   max_x             1..1000000             (start-up only)
 *   max_line          1024..1073741824 bytes (new connections)
 *   max_batch         1..100000
 *   max_connections   1..65536
 *   output_backlog    4096..1073741824 bytes
 *   line_deadline_ms  100..3600000
 *   commit_delay_ms   0..3600000
 *   commit_max_batch  1..1000000
 *   idle_exit_s       0..31536000 (0: never; see life.h and main.c for
 *                     the default, which depends on how vmemd started)
 *   log_level         err | warning | notice | info | debug
 *   commit_name       1..200 bytes, no control characters, no '<' '>'
 *   commit_email      the same, and it contains '@'
 *   register_merge_driver  true | false (start-up only; default true:
 *                     the first start in a clone runs `vmem init`)
 *   embedding_dim     1..16384 numbers per document embedding, default
 *                     1536 (start-up only; a tree's documents keep the
 *                     dimension they were stored with)
 *   trace_file        a path: one OTLP/JSON span per request appended
 *                     there (start-up only; unset: no tracing)
 *   experience_shard_bytes  4096..1073741824, default 262144: an agent's
 *                     day of experiences begins its next shard file
 *                     once one holds this many bytes
 *
 * commit_name and commit_email go together: both or neither. Without them
 * commits use the repository's user.name/user.email.
 *
 * Which file: --config FILE, else $XDG_CONFIG_HOME/vmem/config, else
 * $HOME/.config/vmem/config (the default file is optional).
 *
 * Pure apart from config_load's read: no logging, no global state.
 */
#ifndef VMEM_DAEMON_CONFIG_H
#define VMEM_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

enum config_key {
	CONFIG_MAX_X,
	CONFIG_MAX_LINE,
	CONFIG_MAX_BATCH,
	CONFIG_MAX_CONNECTIONS,
	CONFIG_OUTPUT_BACKLOG,
	CONFIG_LINE_DEADLINE_MS,
	CONFIG_COMMIT_DELAY_MS,
	CONFIG_COMMIT_MAX_BATCH,
	CONFIG_IDLE_EXIT_S,
	CONFIG_LOG_LEVEL, /* the value is an enum log_level (log.h) */
	CONFIG_COMMIT_NAME,
	CONFIG_COMMIT_EMAIL,
	CONFIG_REGISTER_MERGE_DRIVER, /* the value is 0 or 1 */
	/* Conversations and documents (issue 15). */
	CONFIG_EMBEDDING_DIM,
	CONFIG_TRACE_FILE, /* a path */
	CONFIG_EXPERIENCE_SHARD_BYTES,
	CONFIG_NKEYS,
};

#define CONFIG_STR_MAX	200	  /* bytes of commit_name, commit_email */
#define CONFIG_PATH_MAX 4095	  /* bytes of trace_file */
#define CONFIG_FILE_MAX (1 << 20) /* a larger file is refused */

struct config {
	unsigned set; /* (1u << key) for each key this source gave */
	unsigned long long num[CONFIG_NKEYS]; /* the numeric keys' values */
	char commit_name[CONFIG_STR_MAX + 1]; /* "" when not set */
	char commit_email[CONFIG_STR_MAX + 1];
	char trace_file[CONFIG_PATH_MAX + 1]; /* "" when not set */
};

/* Why a file was refused: line is 1-based, 0 when no line is to blame. */
struct config_error {
	unsigned line;
	char msg[320];
};

/* The built-in defaults, nothing marked as set. */
void config_init(struct config *c);

/* The key's name as written in the file ("max_x"). */
const char *config_key_name(enum config_key k);

/* The key called name (len bytes), or -ENOENT. */
int config_key_find(const char *name, size_t len);

/*
 * Parse value (NUL-terminated, already trimmed) for key k into c and mark
 * it set. 0, or -EINVAL with msg saying what is allowed, without the
 * key's name ("must be an integer in 1..1000000").
 */
int config_set(struct config *c, enum config_key k, const char *value,
	       char *msg, size_t msgn);

/*
 * Parse a file's text (len bytes, need not be NUL-terminated) into c,
 * which the caller has initialised (config_init). 0, or -EINVAL with
 * err->line and err->msg ("max_x must be an integer in 1..1000000 (got
 * \"0\")"); c is then partly updated.
 */
int config_parse(struct config *c, const char *text, size_t len,
		 struct config_error *err);

/*
 * config_init then config_parse of the file at path (a symlink to a
 * regular file is followed). 0; -ENOENT when it does not exist; -EISDIR
 * or -EINVAL ("not a regular file") for a directory, a fifo, a device or
 * a socket, refused without blocking; another -errno when it cannot be
 * read; -EINVAL when it does not parse. err->msg says why in every case
 * (without the path).
 */
int config_load(struct config *c, const char *path, struct config_error *err);

/* Copy into dst every key src has set (and mark them set in dst). */
void config_merge(struct config *dst, const struct config *src);

/*
 * The default file: xdg/vmem/config when xdg is non-empty, else
 * home/.config/vmem/config. 0; -ENOENT when both are NULL or empty;
 * -ENAMETOOLONG when it does not fit in n bytes.
 */
int config_default_path(char *buf, size_t n, const char *xdg, const char *home);

/* The value of k as text ("1000", "debug", "Una User"), in buf. */
void config_format(const struct config *c, enum config_key k, char *buf,
		   size_t n);

/* Whether a and b hold the same value for k. */
bool config_same(const struct config *a, const struct config *b,
		 enum config_key k);

/*
 * Describe what differs from a to b among the keys in mask, as
 * "commit_delay_ms 1000 -> 200, log_level info -> debug" (truncated to
 * fit n bytes). Returns how many keys differ.
 */
size_t config_describe_changes(const struct config *a, const struct config *b,
			       unsigned mask, char *buf, size_t n);

#endif
