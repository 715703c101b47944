/*
 * What the commands of the vmem CLI share (vmem.c holds them): the parsed
 * command line, usage errors, talking to the daemon through libvmem, and
 * printing cells of a table on a terminal.
 */
#ifndef VMEM_CLI_H
#define VMEM_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "vmem.h"

enum { EXIT_OK = 0, EXIT_DOMAIN = 1, EXIT_USAGE = 2 };

/* The experiences' options (vmem exp); the texts as given. */
#define CLI_TAGS_MAX 32

struct cli {
	const char *repo;
	const char *socket;
	const char *agent;
	bool agent_given; /* --agent on the command line */
	bool json;
	bool no_autostart;
	int timeout_ms;
	bool overwrite;
	int64_t if_version;
	json_t *context;  /* --context k=v pairs, or NULL */
	const char **pos; /* positional arguments (argv's), argc slots */
	int npos;
	const char *range[3]; /* ls --x, --y, --z (before: --z) as given */
	const char *limit;    /* --limit as given */
	const char *after;    /* --after as given */
	bool all;	      /* search --all */
	const char *message;  /* sync -m */
	const char *keep;     /* resolve: --ours, --theirs or
				 --keep-acknowledged, as the daemon names it */
	/* vmem exp */
	const char *text[3]; /* --context, --action, --outcome */
	const char *tags[CLI_TAGS_MAX];
	int ntags;
	const char *importance, *min_importance, *metadata, *since, *until;
	/* vmem chat and vmem doc (conversations and documents) */
	json_t *meta;		    /* --meta k=v pairs, or NULL */
	const char *embedding_file; /* --embedding-file as given */
	const char *top;	    /* --top as given */
	const char *user;	    /* --user as given */
};

/* A usage error: the message, where to read more, exit 2. */
void die_usage(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
void die_oom(void) __attribute__((noreturn));

/* Report a failed library call; returns the exit status. */
int report(int rc, const struct vmem_error *err);

/* A strict decimal integer: the whole string, no blanks, no '+'. */
bool parse_i64(const char *s, int64_t *out);

/* Connect (starting the daemon unless autostart is 0 or forbidden);
 * EXIT_OK with *c, else the exit status after saying why. */
int open_client(const struct cli *cli, int autostart, const char *agent,
		vmem_client **c);

/* Call method with params (stolen); the parsed result, or NULL after
 * printing it (--json) or reporting an error (*status says which). */
json_t *call_json(struct cli *cli, vmem_client *c, const char *method,
		  json_t *params, int *status);

/* Set o's key to v (stolen), or die of a lack of memory. */
void set_or_die(json_t *o, const char *key, json_t *v);

/* Members of a parsed answer: 0 / "" when absent. */
json_int_t int_member(json_t *o, const char *key);
const char *str_member(json_t *o, const char *key);

/* Terminal output: the columns of a UTF-8 text, a text cut to maxcols
 * (with marked bytes highlighted by hl), a padded cell, "5m" since a
 * timestamp, the terminal's width. */
int text_cols(const char *s, size_t len);
int put_text(const char *s, size_t len, int maxcols, const unsigned char *mark,
	     const char *hl);
void put_cell(const char *s, int width, bool right);
void format_age(const char *ts, time_t now, char *buf, size_t size);
int term_cols(void);

/* vmem exp (exp.c): the experience commands. */
int cmd_exp(struct cli *cli);

#endif
