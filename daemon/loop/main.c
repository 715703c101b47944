/*
 * vmemd: serves the decisions of one git working tree over a Unix socket.
 *
 * Start-up: read the configuration (config.h), find the tree,
 * (daemonise), take the tree's lock, load and replay the store, listen,
 * report readiness. SIGHUP reloads the configuration file (all of it or
 * nothing; the command line still wins) and reconciles with the files.
 * Stop: on SIGTERM, SIGINT or server.shutdown, stop accepting, answer
 * what is buffered, write every acknowledged decision to its file and
 * empty the log, then exit 0. A second signal exits at once: the log
 * still holds every acknowledged write and the next start replays it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <git2.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "conn.h"
#include "daemon.h"
#include "gitproc.h"
#include "log.h"
#include "mcp.h"
#include "methods.h"
#include "progress.h"
#include "protocol/decision.h"
#include "sdnotify.h"
#include "protocol/sockpath.h"

#define EXIT_USAGE	  2
#define EXIT_RUNNING	  3
#define DRAIN_DEADLINE_MS 10000
#define FLUSH_GIVE_UP_MS  10000
/* In the state directory: the merge driver was registered once. */
#define MERGE_DRIVER_MARKER "merge-driver"

struct options {
	const char *repo;
	const char *socket;
	const char *config; /* --config FILE, or NULL */
	bool foreground;
	struct config cli; /* what the command line set */
};

/* Where start-up failures go: stderr, or the daemonising parent. */
static int ready_fd = -1;

static void __attribute__((format(printf, 2, 3), noreturn))
fail_startup(int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg + 1, sizeof(msg) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n > sizeof(msg) - 2)
		n = (int)sizeof(msg) - 2;
	if (ready_fd >= 0) {
		msg[0] = (char)('0' + code);
		if (write(ready_fd, msg, (size_t)n + 1) < 0) {
			/* The parent is gone; nobody to tell. */
		}
	} else {
		fprintf(stderr, "vmemd: %s\n", msg + 1);
	}
	exit(code);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: vmemd --repo PATH [--socket PATH] [--foreground]\n"
		"             [--config FILE] [--log-level LEVEL]\n"
		"             [--max-x N] [--max-line BYTES] [--max-batch N]\n"
		"             [--max-connections N] [--output-backlog BYTES]\n"
		"             [--commit-delay-ms MS] [--commit-max-batch N]\n"
		"             [--line-deadline-ms MS] [--idle-exit-s S]\n"
		"             [--register-merge-driver true|false]\n"
		"             [--embedding-dim N] [--trace-file PATH]\n"
		"             [--experience-shard-bytes BYTES]\n"
		"Serves the vmem decisions of the git working tree at PATH.\n"
		"Settings come from the built-in defaults, then the file\n"
		"(--config FILE, else $XDG_CONFIG_HOME/vmem/config or\n"
		"~/.config/vmem/config if it exists), then the options;\n"
		"SIGHUP reloads the file. LEVEL: err, warning, notice, info,\n"
		"debug.\n");
}

static void parse_args(int argc, char **argv, struct options *o)
{
	/* An option for a configuration key is O_KEY + the key. */
	enum { O_CONFIG = 256, O_KEY };
	static const struct option longopts[] = {
		{"repo", required_argument, NULL, 'r'},
		{"socket", required_argument, NULL, 's'},
		{"foreground", no_argument, NULL, 'f'},
		{"config", required_argument, NULL, O_CONFIG},
		{"max-x", required_argument, NULL, O_KEY + CONFIG_MAX_X},
		{"max-line", required_argument, NULL, O_KEY + CONFIG_MAX_LINE},
		{"max-batch", required_argument, NULL,
		 O_KEY + CONFIG_MAX_BATCH},
		{"max-connections", required_argument, NULL,
		 O_KEY + CONFIG_MAX_CONNECTIONS},
		{"output-backlog", required_argument, NULL,
		 O_KEY + CONFIG_OUTPUT_BACKLOG},
		{"commit-delay-ms", required_argument, NULL,
		 O_KEY + CONFIG_COMMIT_DELAY_MS},
		{"commit-max-batch", required_argument, NULL,
		 O_KEY + CONFIG_COMMIT_MAX_BATCH},
		{"line-deadline-ms", required_argument, NULL,
		 O_KEY + CONFIG_LINE_DEADLINE_MS},
		{"idle-exit-s", required_argument, NULL,
		 O_KEY + CONFIG_IDLE_EXIT_S},
		{"log-level", required_argument, NULL,
		 O_KEY + CONFIG_LOG_LEVEL},
		{"register-merge-driver", required_argument, NULL,
		 O_KEY + CONFIG_REGISTER_MERGE_DRIVER},
		{"experience-shard-bytes", required_argument, NULL,
		 O_KEY + CONFIG_EXPERIENCE_SHARD_BYTES},
		{"embedding-dim", required_argument, NULL,
		 O_KEY + CONFIG_EMBEDDING_DIM},
		{"trace-file", required_argument, NULL,
		 O_KEY + CONFIG_TRACE_FILE},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	char why[160];
	int ch, idx = 0;

	config_init(&o->cli);
	while ((ch = getopt_long(argc, argv, "r:s:fhV", longopts, &idx)) !=
	       -1) {
		switch (ch) {
		case 'r':
			o->repo = optarg;
			break;
		case 's':
			o->socket = optarg;
			break;
		case 'f':
			o->foreground = true;
			break;
		case O_CONFIG:
			o->config = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("vmemd %s\n", VMEMD_VERSION);
			exit(0);
		default:
			if (ch >= O_KEY && ch < O_KEY + CONFIG_NKEYS) {
				if (config_set(&o->cli,
					       (enum config_key)(ch - O_KEY),
					       optarg, why, sizeof(why)) < 0) {
					fprintf(stderr, "vmemd: --%s %s\n",
						longopts[idx].name, why);
					exit(EXIT_USAGE);
				}
				break;
			}
			usage(stderr);
			exit(EXIT_USAGE);
		}
	}
	if (optind < argc) {
		usage(stderr);
		exit(EXIT_USAGE);
	}
	if (!o->repo)
		o->repo = getenv("VMEM_REPO");
	if (!o->repo || !*o->repo)
		o->repo = ".";
}

/*
 * Fork into the background. The parent waits for the child's report: an
 * empty close (or "0") is ready, else an exit code and a message.
 */
static void daemonize(void)
{
	int pfd[2];
	pid_t pid;
	char buf[1024];
	ssize_t n;
	size_t got = 0;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		fail_startup(1, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		fail_startup(1, "fork: %s", strerror(errno));
	if (pid > 0) {
		close(pfd[1]);
		while ((n = read(pfd[0], buf + got, sizeof(buf) - 1 - got)) >
			       0 ||
		       (n < 0 && errno == EINTR))
			if (n > 0)
				got += (size_t)n;
		if (got == 0) {
			fprintf(stderr,
				"vmemd: the daemon exited during start-up\n");
			_exit(1);
		}
		buf[got] = '\0';
		if (buf[0] == '0')
			_exit(0);
		fprintf(stderr, "vmemd: %s\n", buf + 1);
		_exit(buf[0] - '0');
	}
	close(pfd[0]);
	ready_fd = pfd[1];
	if (setsid() < 0)
		fail_startup(1, "setsid: %s", strerror(errno));
}

/* Point stdin/stdout at /dev/null and stderr at vmemd.log in the state
 * directory (daemon mode). */
static void redirect_stdio(const struct statedir *state)
{
	char errmsg[1024];
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	int log =
		statedir_open(state, "vmemd.log", O_WRONLY | O_CREAT | O_APPEND,
			      0600, errmsg, sizeof(errmsg));

	if (null < 0)
		fail_startup(1, "cannot open /dev/null: %s", strerror(errno));
	if (log < 0)
		fail_startup(1, "%s", errmsg);
	dup2(null, STDIN_FILENO);
	dup2(null, STDOUT_FILENO);
	dup2(log, STDERR_FILENO);
	close(null);
	close(log);
}

/* Ready: tell whoever waits (the starting parent, systemd) and start the
 * systemd watchdog if one was asked for. */
static void report_ready(struct daemon *d)
{
	sdnotify("READY=1\nSTATUS=serving %s (%zu decisions)", d->repo.root,
		 d->decisions.index.count);
	if (sdnotify_watchdog_start(d->loop) < 0)
		log_warn("cannot start the systemd watchdog timer");
	if (ready_fd < 0)
		return;
	if (write(ready_fd, "0", 1) < 0) {
		/* The parent is gone; keep serving. */
	}
	close(ready_fd);
	ready_fd = -1;
}

/*
 * File descriptors 0-2 closed by whoever started us would go to our own
 * files (the tree's lock, libuv's internals), where anything written to
 * "stderr" would land, and libuv refuses to close them: keep them taken by
 * /dev/null.
 */
static void keep_std_fds(void)
{
	int fd;

	do
		fd = open("/dev/null", O_RDWR);
	while (fd >= 0 && fd <= 2);
	if (fd > 2)
		close(fd);
}

/* ---- configuration ---- */

static struct {
	struct config cli;   /* the command line's keys: they always win */
	struct config cur;   /* in force */
	char path[PATH_MAX]; /* the file read, or looked for ("": none) */
	bool explicit;	     /* path came from --config */
	bool found;	     /* path was read */
	bool autostarted;    /* in the background, not by systemd */
} cfg;

/*
 * Built-in defaults < the file < the command line. idle_exit_s defaults
 * to 900 only for a daemon a client started in the background: one that
 * systemd runs, or someone with --foreground, stays unless told.
 */
static void effective(struct config *out, const struct config *file)
{
	config_init(out);
	config_merge(out, file);
	config_merge(out, &cfg.cli);
	if (!cfg.autostarted && !(out->set & (1u << CONFIG_IDLE_EXIT_S)))
		out->num[CONFIG_IDLE_EXIT_S] = 0;
}

static void __attribute__((noreturn))
fail_config(const char *path, const struct config_error *err)
{
	if (err->line)
		fail_startup(EXIT_USAGE, "%s:%u: %s", path, err->line,
			     err->msg);
	fail_startup(EXIT_USAGE, "%s: %s", path, err->msg);
}

static bool missing(int rc)
{
	return rc == -ENOENT || rc == -ENOTDIR;
}

/* Start-up, before daemonising: any problem with the file stops us. */
static void load_config(const char *given)
{
	struct config file;
	struct config_error err;
	int rc;

	config_init(&file);
	if (given) {
		cfg.explicit = true;
		rc = config_load(&file, given, &err);
		if (rc < 0)
			fail_config(given, &err);
		/* SIGHUP reads it again, whatever the directory then. */
		if (!realpath(given, cfg.path))
			snprintf(cfg.path, sizeof(cfg.path), "%s", given);
		cfg.found = true;
	} else if (config_default_path(cfg.path, sizeof(cfg.path),
				       getenv("XDG_CONFIG_HOME"),
				       getenv("HOME")) == 0) {
		rc = config_load(&file, cfg.path, &err);
		if (rc < 0 && !missing(rc))
			fail_config(cfg.path, &err);
		cfg.found = rc == 0;
		if (!cfg.found)
			config_init(&file);
	} else {
		cfg.path[0] = '\0';
	}
	effective(&cfg.cur, &file);
}

static void log_config(const struct config *c)
{
	char v[CONFIG_PATH_MAX + 16];

	for (int k = 0; k < CONFIG_NKEYS; k++) {
		config_format(c, (enum config_key)k, v, sizeof(v));
		log_debug("config: %s = %s%s", config_key_name(k), v,
			  c->set & (1u << k) ? "" : " (default)");
	}
}

/* Put c in force; max_x, the commit timing and identity only at start-up
 * or later through the commit queue. */
static void apply_config(struct daemon *d, const struct config *c,
			 bool at_start)
{
	struct limits *l = &d->limits;

	log_set_level((enum log_level)c->num[CONFIG_LOG_LEVEL]);
	l->max_line = (size_t)c->num[CONFIG_MAX_LINE];
	l->max_batch = (size_t)c->num[CONFIG_MAX_BATCH];
	l->max_connections = (size_t)c->num[CONFIG_MAX_CONNECTIONS];
	l->output_backlog = (size_t)c->num[CONFIG_OUTPUT_BACKLOG];
	l->line_deadline_ms = (unsigned)c->num[CONFIG_LINE_DEADLINE_MS];
	l->commit_delay_ms = (unsigned)c->num[CONFIG_COMMIT_DELAY_MS];
	l->commit_max_batch = (unsigned)c->num[CONFIG_COMMIT_MAX_BATCH];
	l->idle_exit_s = (unsigned)c->num[CONFIG_IDLE_EXIT_S];
	l->experience_shard_bytes = c->num[CONFIG_EXPERIENCE_SHARD_BYTES];
	if (at_start) {
		l->max_depth = 64;
		l->max_x = (int)c->num[CONFIG_MAX_X];
		l->embedding_dim = (uint32_t)c->num[CONFIG_EMBEDDING_DIM];
		return;
	}
	d->experiences.shard_max = l->experience_shard_bytes;
	gitq_set_timing(&d->gitq, l->commit_delay_ms, l->commit_max_batch);
	gitq_set_ident(&d->gitq, c->commit_name, c->commit_email);
	life_set_idle_exit(&d->life, l->idle_exit_s);
}

/* SIGHUP: read the file again; put it in force only if all of it is
 * valid. */
static void reload_config(struct daemon *d)
{
	struct config file, next;
	struct config_error err;
	char changes[2048];
	size_t n;
	int rc;

	if (!cfg.found && !cfg.explicit &&
	    config_default_path(cfg.path, sizeof(cfg.path),
				getenv("XDG_CONFIG_HOME"),
				getenv("HOME")) < 0) {
		log_info("SIGHUP: no configuration file (neither "
			 "XDG_CONFIG_HOME nor HOME is set)");
		return;
	}
	rc = config_load(&file, cfg.path, &err);
	if (rc < 0 && missing(rc) && !cfg.found) {
		log_info("SIGHUP: no configuration file at %s", cfg.path);
		return;
	}
	if (rc < 0) {
		if (err.line)
			log_err("%s:%u: %s; keeping the current configuration",
				cfg.path, err.line, err.msg);
		else
			log_err("%s: %s; keeping the current configuration",
				cfg.path, err.msg);
		return;
	}
	cfg.found = true;
	effective(&next, &file);
	if (!config_same(&next, &cfg.cur, CONFIG_MAX_X)) {
		log_warn("%s: max_x cannot change at run time: keeping %llu "
			 "(restart vmemd to use %llu)",
			 cfg.path, cfg.cur.num[CONFIG_MAX_X],
			 next.num[CONFIG_MAX_X]);
		next.num[CONFIG_MAX_X] = cfg.cur.num[CONFIG_MAX_X];
	}
	/* Read at start-up only, like max_x. */
	if (!config_same(&next, &cfg.cur, CONFIG_EMBEDDING_DIM)) {
		log_warn("%s: embedding_dim cannot change at run time: "
			 "keeping %llu",
			 cfg.path, cfg.cur.num[CONFIG_EMBEDDING_DIM]);
		next.num[CONFIG_EMBEDDING_DIM] =
			cfg.cur.num[CONFIG_EMBEDDING_DIM];
	}
	if (!config_same(&next, &cfg.cur, CONFIG_TRACE_FILE)) {
		log_warn("%s: trace_file cannot change at run time: keeping "
			 "\"%s\"",
			 cfg.path, cfg.cur.trace_file);
		memcpy(next.trace_file, cfg.cur.trace_file,
		       sizeof(next.trace_file));
	}
	n = config_describe_changes(&cfg.cur, &next, ~0u, changes,
				    sizeof(changes));
	log_info("reloaded %s: %s", cfg.path, n ? changes : "no change");
	cfg.cur = next;
	apply_config(d, &cfg.cur, false);
	log_config(&cfg.cur);
}

/* ---- stopping ---- */

static struct daemon the_daemon;
static uv_signal_t sig_term, sig_int, sig_hup;
static uv_timer_t stop_timer;

static void git_idle_cb(void *arg)
{
	struct daemon *d = arg;

	log_info("all decisions written and committed; stopping");
	uv_timer_stop(&stop_timer);
	uv_stop(d->loop);
}

static void store_idle_cb(struct store *s, void *arg)
{
	struct daemon *d = arg;

	(void)s;
	gitq_flush(&d->gitq, git_idle_cb, d);
}

/* HEAD, the branch or the index changed under us: look at the files. */
static void repo_changed_cb(void *ctx)
{
	struct daemon *d = ctx;

	if (life_check(&d->life))
		return;
	log_debug("the repository changed; checking the decision files");
	store_check_files(&d->store);
}

/* Any event in the git directory: has git taken or given back the
 * working tree? */
static void touched_cb(void *ctx)
{
	struct daemon *d = ctx;

	conflicts_check_yield(&d->conflicts);
}

/* A lock came or went in the git directory. While the tree is left to
 * git, look at once whether git gave it back: the look after the watch's
 * debounce comes 100 ms after git's last event, and a write or a sync
 * right after a git command (a user's git status) would wait for it and
 * for the look at the files that follows. */
static void lock_event_cb(void *ctx)
{
	struct daemon *d = ctx;

	if (d->conflicts.yield[0])
		conflicts_check_yield(&d->conflicts);
}

/* Git gave the working tree back: write what waited, look at the files
 * git may have written (created, removed or renamed: how git writes
 * them; a change of the index or HEAD brings a look at every file,
 * repo_changed_cb), commit. */
static void resumed_cb(void *ctx)
{
	struct daemon *d = ctx;

	store_resume(&d->store);
	store_check_moved(&d->store);
	gitq_commit_soon(&d->gitq);
}

/* The store asks whether git has the working tree. */
static const char *tree_yielded_cb(void *ctx)
{
	const struct conflicts *cf = ctx;

	return cf->yield[0] ? cf->yield : NULL;
}

/* A reload replaces a version: one not yet committed is kept. */
static void replacing_cb(void *ctx, const struct record *old,
			 const struct record *rec)
{
	struct daemon *d = ctx;

	if (gitq_uncommitted_coord(&d->gitq, &old->coord))
		conflicts_replaced(&d->conflicts, &old->coord, old->json, rec);
}

/* A resolution changed files: look at them. */
static void files_touched_cb(void *ctx)
{
	struct daemon *d = ctx;

	store_check_files(&d->store);
}

/* Commits wait while the memory is in conflict or git has the tree. */
static bool defer_cb(void *ctx, char *why, size_t n)
{
	return conflicts_defer(ctx, why, n);
}

static void log_quarantine(const struct vmdir_load_report *rep);

/* What a probe or a reload of the files found: quarantined files are
 * logged and kept in health's list (conflicts log themselves). */
static void report_cb(void *ctx, const struct vmdir_load_report *rep)
{
	struct daemon *d = ctx;
	const struct vmdir_load_report q = {
		.quarantined = rep->quarantined,
		.n_quarantined = rep->n_quarantined,
	};

	if (!rep->n_quarantined)
		return;
	log_quarantine(rep);
	if (vmdir_load_report_merge(&d->loaded, &q) < 0)
		log_err("out of memory: health lists fewer quarantined files "
			"than the log");
}

/* Our own commit moved the branch and the index: not a change to react
 * to. */
/* Commits deferred, or going again: every MCP session is told (their
 * decisions are durable but not in git meanwhile). */
static void deferral_cb(void *ctx, const char *reason)
{
	struct daemon *d = ctx;

	if (reason[0])
		mcp_log_all(&d->server, MCP_WARNING,
			    json_pack("{s:s,s:s}", "message",
				      "commits to git are deferred; decisions "
				      "stay durable and are committed once "
				      "this ends",
				      "reason", reason));
	else
		mcp_log_all(&d->server, MCP_NOTICE,
			    json_pack("{s:s}", "message",
				      "commits to git go on again"));
}

/* A new conflict: every MCP session is told (writes there are refused
 * until it is resolved). */
static void conflict_cb(void *ctx, const char *path, const char *reason)
{
	struct daemon *d = ctx;

	mcp_log_all(&d->server, MCP_WARNING,
		    json_pack("{s:s,s:s,s:s}", "message",
			      "a decision file is in conflict: writes there "
			      "are refused and its acknowledged version is "
			      "served until it is resolved (vmem conflicts, "
			      "vmem resolve)",
			      "path", path, "reason", reason));
}

static void committed_cb(void *ctx)
{
	watch_settle(ctx);
}

/*
 * A decision changed (a write, or a reload): into the next commit, and to
 * the subscribers (the commit queue takes the decision's file path).
 */
static void decision_changed(struct daemon *d, enum kind_change_type type,
			     const struct decision_change *ch)
{
	if (ch->rec && type != KIND_RELOADED)
		conflicts_acknowledged(&d->conflicts, ch->slot);
	gitq_mark_coord(&d->gitq, &ch->coord);
	subs_notify(&d->subs, &ch->coord,
		    type == KIND_RELOADED ? SUBS_RELOADED
		    : ch->rec		  ? SUBS_STORED
					  : SUBS_DELETED,
		    ch->rec);
}

/* A message stored, a session deleted: to the subscribers of messages
 * (local records: nothing to commit). */
static void conversation_changed(struct daemon *d, const struct conv_change *ch)
{
	if (ch->what == CONV_MESSAGE_STORED)
		subs_notify_message(&d->subs, ch->session, ch->m);
	else if (ch->what == CONV_SESSION_DELETED)
		subs_notify_message(&d->subs, ch->session, NULL);
}

static void document_changed(struct daemon *d, const struct doc_change *ch)
{
	static const enum subs_event ev[] = {
		[DOC_STORED] = SUBS_STORED,
		[DOC_UPDATED] = SUBS_UPDATED,
		[DOC_DELETED] = SUBS_DELETED,
	};

	subs_notify_document(&d->subs, &d->documents.ix, ev[ch->what], ch->id,
			     ch->d);
}

/*
 * An experience changed (a write, a reload): to the subscribers; and its
 * shard's file, when it changes (a write's line, bad lines taken out),
 * into the next commit.
 */
static void experience_changed(struct daemon *d, enum kind_change_type type,
			       const struct experience_change *ch)
{
	char id[EXPID_LEN + 1], path[sizeof(VMDIR_EXPERIENCES) + 256];

	if (ch->path) {
		snprintf(path, sizeof(path), VMDIR_EXPERIENCES "/%s", ch->path);
		gitq_mark(&d->gitq, path);
	}
	if (!ch->id)
		return;
	expid_format(ch->id, id);
	subs_notify_experience(&d->subs,
			       type == KIND_RELOADED ? SUBS_RELOADED
			       : ch->json	     ? SUBS_STORED
						     : SUBS_DELETED,
			       id, ch->agent, ch->agent_len, ch->json,
			       ch->json_len);
}

/* A kind changed its state: each kind's changes go where they belong. */
static void changed_cb(void *ctx, const struct kind_change *ch)
{
	if (ch->kind == &decision_kind)
		decision_changed(ctx, ch->type, ch->detail);
	else if (ch->kind == &experience_kind)
		experience_changed(ctx, ch->type, ch->detail);
	else if (ch->kind == &conversation_kind)
		conversation_changed(ctx, ch->detail);
	else if (ch->kind == &document_kind)
		document_changed(ctx, ch->detail);
}

/* Hand the store's writes to the commit queue: what the log replay
 * changed, and whatever git finds different from HEAD (the queue's
 * start-up scan, by the index's stat data, off the loop). */
static void start_commits(struct daemon *d)
{
	struct decisions *ds = &d->decisions;

	if (progress_due())
		progress_say("asking git what differs from HEAD");
	for (size_t i = 0; i < ds->n_replayed; i++) {
		struct coord c = index_coord(&ds->index, ds->replayed[i]);

		gitq_mark_coord(&d->gitq, &c);
	}
	gitq_start(&d->gitq);
	d->store.on_change = changed_cb;
	d->store.on_change_ctx = d;
}

/*
 * Wait for the connections to drain, then for the store to go idle. A
 * store that cannot write its files (a failing disk) would never go idle:
 * past a deadline the stop gives up, which loses nothing (the log keeps
 * every acknowledged write for the next start) but exits 1.
 */
static void stop_timer_cb(uv_timer_t *t)
{
	struct daemon *d = t->data;
	uint64_t now = uv_now(d->loop);
	bool late = now - d->stop_started_ms > DRAIN_DEADLINE_MS;

	if (d->leaving) {
		if (store_jobs_running(&d->store) || d->gitq.busy)
			return;
		uv_timer_stop(t);
		uv_stop(d->loop);
		return;
	}
	/* A flush into a tree that went away would only fail until it gives
	 * up: leave instead (life_check turns the stop into daemon_leave). */
	if (life_check(&d->life))
		return;
	if (d->flush_started_ms) {
		if (d->conflicts.yield[0] && !store_jobs_running(&d->store) &&
		    !d->gitq.busy && !conflicts_busy(&d->conflicts)) {
			/* Files wait for git, which may take hours (a merge
			 * left to the user): nothing is lost by going. */
			log_notice("stopping while git has the working tree "
				   "(%s): the write-ahead log keeps the %zu "
				   "acknowledged writes whose files wait, and "
				   "the next start writes them",
				   d->conflicts.yield,
				   store_pending(&d->store));
			uv_timer_stop(t);
			uv_stop(d->loop);
			return;
		}
		if (now - d->flush_started_ms < FLUSH_GIVE_UP_MS ||
		    d->store.n_errors == d->flush_errors ||
		    store_jobs_running(&d->store) || d->gitq.busy)
			return;
		log_err("stopping with decision files not written (%s); the "
			"write-ahead log keeps every acknowledged write and "
			"the next start replays it",
			d->store.last_error);
		d->exit_code = 1;
		uv_timer_stop(t);
		uv_stop(d->loop);
		return;
	}
	if (server_connections(&d->server) > 0 && !late)
		return;
	if (late) {
		log_warn("closing %zu connections that did not drain in %d ms",
			 server_connections(&d->server), DRAIN_DEADLINE_MS);
		for (struct conn *c = d->server.conns; c; c = c->next)
			conn_close(c);
	}
	d->flush_started_ms = now;
	d->flush_errors = d->store.n_errors;
	/* The vector index is saved by the flush's writer pass. */
	documents_stop(&d->documents);
	uv_timer_set_repeat(t, 100);
	store_flush(&d->store, store_idle_cb, d);
}

void daemon_stop(struct daemon *d)
{
	if (d->stopping || life_check(&d->life))
		return;
	d->stopping = true;
	d->stop_started_ms = uv_now(d->loop);
	log_info("stopping: answering buffered requests");
	/* What it would find, the next start finds again. */
	gitq_cancel_scan(&d->gitq);
	sdnotify("STOPPING=1\nSTATUS=stopping: answering buffered requests, "
		 "then writing and committing");
	server_stop(&d->server);
	uv_timer_start(&stop_timer, stop_timer_cb, 0, 10);
}

void daemon_leave(struct daemon *d)
{
	if (d->leaving)
		return;
	d->leaving = true;
	if (!d->stopping) {
		d->stopping = true;
		d->stop_started_ms = uv_now(d->loop);
		sdnotify("STOPPING=1\nSTATUS=stopping: the working tree is "
			 "gone");
		server_stop(&d->server);
	}
	gitq_cancel_scan(&d->gitq);
	for (struct conn *c = d->server.conns; c; c = c->next)
		conn_close(c);
	documents_stop(&d->documents);
	uv_timer_start(&stop_timer, stop_timer_cb, 0, 100);
}

static void signal_cb(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;

	if (signum == SIGHUP) {
		if (d->stopping)
			return;
		reload_config(d);
		/* and reconcile with the files, as after a checkout */
		store_check_files(&d->store);
		return;
	}
	if (d->stopping) {
		log_warn("second signal: exiting now; the write-ahead log "
			 "keeps every acknowledged write");
		_exit(1);
	}
	log_info("received %s", strsignal(signum));
	daemon_stop(d);
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/*
 * A graceful stop leaves the index's snapshot, so the next start reads
 * only the files that changed meanwhile. The files are written and
 * synced by now; a failure costs only the next start's speed.
 */
static void save_snapshot(struct daemon *d)
{
	char errmsg[1024];
	uint64_t t0 = uv_hrtime();
	bool saved;
	size_t stale;
	long n = decisions_save_snapshot(&d->decisions, &saved, &stale, errmsg,
					 sizeof(errmsg));

	if (n < 0)
		log_warn("no index snapshot saved (%s): the next start reads "
			 "every decision file",
			 errmsg);
	else if (!saved)
		log_info("index snapshot: kept (%ld decisions; the next start "
			 "reads at most %zu files)",
			 n, stale);
	else
		log_info("index snapshot: %ld decisions saved in %.0f ms", n,
			 (double)(uv_hrtime() - t0) / 1e6);
}

/* The vmem program to register as the merge driver: $VMEM, else the vmem
 * next to this vmemd, else vmem in PATH. 0 with its absolute path, or
 * -ENOENT. */
static int find_vmem(char *out, size_t n)
{
	char exe[PATH_MAX], *slash, *path, *dir, *save = NULL;
	const char *env = getenv("VMEM");

	if (env && *env && realpath(env, out) && access(out, X_OK) == 0)
		return 0;
	if (realpath("/proc/self/exe", exe) && (slash = strrchr(exe, '/'))) {
		*slash = '\0';
		if ((size_t)snprintf(out, n, "%s/vmem", exe) < n &&
		    access(out, X_OK) == 0)
			return 0;
	}
	path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
	for (dir = path ? strtok_r(path, ":", &save) : NULL; dir;
	     dir = strtok_r(NULL, ":", &save)) {
		if (*dir == '/' &&
		    (size_t)snprintf(out, n, "%s/vmem", dir) < n &&
		    access(out, X_OK) == 0) {
			free(path);
			return 0;
		}
	}
	free(path);
	return -ENOENT;
}

/*
 * Is the repository a clone (does its configuration name a remote's
 * url)? The entries are walked without a pattern: libgit2's
 * git_remote_list matches them with a regex whose match data it leaks.
 */
static bool has_remote(const char *root)
{
	git_repository *repo = NULL;
	git_config *conf = NULL;
	git_config_iterator *it = NULL;
	git_config_entry *e;
	bool yes = false;

	if (git_repository_open_ext(&repo, root, GIT_REPOSITORY_OPEN_NO_SEARCH,
				    NULL) == 0 &&
	    git_repository_config_snapshot(&conf, repo) == 0 &&
	    git_config_iterator_new(&it, conf) == 0) {
		while (!yes && git_config_next(&e, it) == 0) {
			size_t n = strlen(e->name);

			/* remote.<name>.url (names are lowercase here) */
			yes = strncmp(e->name, "remote.", 7) == 0 && n > 11 &&
			      strcmp(e->name + n - 4, ".url") == 0;
		}
	}
	git_config_iterator_free(it);
	git_config_free(conf);
	git_repository_free(repo);
	return yes;
}

/*
 * The first start in a clone registers the layer-aware merge driver
 * (vmem init) unless register_merge_driver is false; a marker in the
 * state directory makes it once only. Blocking (start-up).
 */
static void register_merge_driver(struct daemon *d)
{
	char vmem[PATH_MAX], err[300];
	const char *args[] = {"--repo", d->repo.root, "init", NULL};
	char *out = NULL, *line, *save = NULL;
	size_t len = 0;
	struct stat st;
	int fd;

	if (!cfg.cur.num[CONFIG_REGISTER_MERGE_DRIVER] ||
	    statedir_stat(&d->repo.state, MERGE_DRIVER_MARKER, &st) == 0 ||
	    !has_remote(d->repo.root))
		return;
	if (find_vmem(vmem, sizeof(vmem)) < 0) {
		log_warn("cannot register the layer-aware merge driver: no "
			 "vmem program found ($VMEM, next to vmemd, PATH); run "
			 "`vmem init` in %s",
			 d->repo.root);
		return;
	}
	if (gitproc_run_program(vmem, args, d->repo.root, &out, &len, err,
				sizeof(err)) < 0) {
		log_warn("registering the merge driver failed: %s", err);
		return;
	}
	for (line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		log_notice("first start in this clone: %s", line);
	log_notice("vmemd never commits .gitattributes: it is a file of "
		   "yours (register_merge_driver = false turns this off)");
	free(out);
	fd = statedir_open(&d->repo.state, MERGE_DRIVER_MARKER,
			   O_WRONLY | O_CREAT | O_EXCL, 0600, err, sizeof(err));
	if (fd >= 0)
		close(fd);
	else if (fd != -EEXIST)
		log_warn("%s: the merge driver will be registered again at "
			 "the next start",
			 err);
}

/* The trace sink wrote what it held. */
static void trace_stopped_cb(void *arg)
{
	(void)arg;
}

/* documents_open on a thread of its own (open_local_kinds). */
struct documents_opening {
	struct daemon *d;
	int rc;
	char errmsg[1024];
};

static void *open_documents(void *arg)
{
	struct documents_opening *o = arg;
	struct daemon *d = o->d;

	o->rc = documents_open(&d->documents, d->loop, &d->repo.state,
			       d->limits.embedding_dim, o->errmsg,
			       sizeof(o->errmsg));
	return NULL;
}

/*
 * The local kinds (conversations, documents) read their segments before
 * the store replays the log over them; a failure stops the start. The
 * two share nothing, and at their full size each takes seconds of CPU:
 * they are read side by side (the loop does not run yet; the documents'
 * thread is the only one to touch it, for its timer, until the join).
 */
static void open_local_kinds(struct daemon *d)
{
	struct documents_opening docs = {.d = d};
	char errmsg[1024];
	pthread_t t;
	bool threaded;
	int rc;

	threaded = pthread_create(&t, NULL, open_documents, &docs) == 0;
	if (!threaded)
		open_documents(&docs);
	rc = conversations_open(&d->conversations, d->loop, &d->repo.state,
				errmsg, sizeof(errmsg));
	if (threaded)
		pthread_join(t, NULL);
	if (rc < 0)
		fail_startup(1, "cannot load the conversations: %s", errmsg);
	if (docs.rc < 0)
		fail_startup(1, "cannot load the documents: %s", docs.errmsg);
}

/* --trace-file: a relative path is the starting directory's. */
static void open_trace(struct daemon *d)
{
	char path[PATH_MAX * 2];
	const char *p = cfg.cur.trace_file;

	if (!p[0])
		return;
	if (p[0] != '/') {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd)))
			fail_startup(1, "trace_file %s: %s", p,
				     strerror(errno));
		snprintf(path, sizeof(path), "%s/%s", cwd, p);
		p = path;
	}
	if (trace_sink_new(d->loop, p, 0, &d->trace) < 0)
		fail_startup(1, "out of memory");
	log_info("tracing every request to %s", p);
}

static void log_quarantine(const struct vmdir_load_report *rep)
{
	for (size_t i = 0; i < rep->n_quarantined; i++)
		log_warn("quarantined %s -> %s: %s", rep->quarantined[i].path,
			 rep->quarantined[i].moved_to,
			 rep->quarantined[i].reason);
}

int main(int argc, char **argv)
{
	struct options o = {0};
	struct daemon *d = &the_daemon;
	struct unmerged_set unmerged = {0};
	char errmsg[1024], note[1024];
	char sock[SOCKPATH_MAX + 1];
	int rc;

	keep_std_fds();
	progress_init();
	parse_args(argc, argv, &o);
	cfg.cli = o.cli;
	/* Before sdnotify_init unsets them. */
	cfg.autostarted = !o.foreground && !getenv("LISTEN_FDS") &&
			  !getenv("NOTIFY_SOCKET");
	load_config(o.config);
	signal(SIGPIPE, SIG_IGN);
	git_libgit2_init();
	json_object_seed(0);
	log_init(LOGL_INFO);
	apply_config(d, &cfg.cur, true);
	rc = repo_open(&d->repo, o.repo, errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(1, "%s", errmsg);
	if (o.socket) {
		if (strlen(o.socket) > SOCKPATH_MAX)
			fail_startup(1, "socket path too long: %s", o.socket);
		snprintf(sock, sizeof(sock), "%s", o.socket);
	} else {
		rc = sockpath_resolve(d->repo.root, getenv("VMEM_SOCKET"),
				      getenv("XDG_RUNTIME_DIR"), getuid(), sock,
				      sizeof(sock));
		if (rc < 0)
			fail_startup(1, "socket path for %s: %s", d->repo.root,
				     strerror(-rc));
	}
	if (!o.foreground)
		daemonize();
	sdnotify_init();
	rc = repo_lock(&d->repo, note, sizeof(note), errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(rc == -EBUSY ? EXIT_RUNNING : 1, "%s", errmsg);
	if (!o.foreground)
		redirect_stdio(&d->repo.state);
	if (note[0])
		log_notice("made private what others could read in the state "
			   "directory: %s",
			   note);

	d->loop = uv_default_loop();
	open_trace(d);
	if (stats_init(&d->stats, method_count()) < 0)
		fail_startup(1, "out of memory");
	d->started_ms = uv_now(d->loop);
	rc = conflicts_init(&d->conflicts, d->loop,
			    (size_t)d->limits.max_x * VMEM_MAX_Y * VMEM_MAX_Z,
			    d->limits.max_x, &d->repo);
	if (rc < 0 || decisions_init(&d->decisions, d->repo.root,
				     &d->repo.state, d->limits.max_x) < 0)
		fail_startup(1, "out of memory");
	d->decisions.dir.file_mode = d->repo.file_mode;
	d->decisions.dir.dir_mode = d->repo.dir_mode;
	if (experiences_init(&d->experiences, d->repo.root, &d->repo.state) < 0)
		fail_startup(1, "out of memory");
	d->experiences.files.file_mode = d->repo.file_mode;
	d->experiences.files.dir_mode = d->repo.dir_mode;
	d->experiences.shard_max = d->limits.experience_shard_bytes;
	rc = unmerged_list(d->repo.root, d->repo.gitdir, d->limits.max_x,
			   &unmerged, errmsg, sizeof(errmsg));
	if (rc < 0)
		log_err("cannot list git's unmerged files (%s): until it "
			"works, only conflict markers show conflicts",
			errmsg);
	decisions_use_conflicts(&d->decisions, &d->conflicts, &unmerged);
	d->experiences.conflicts = &d->conflicts;
	open_local_kinds(d);
	/* Before the log's replay and the first look at git's state: the
	 * git locks a commit of a killed run of ours left are removed here,
	 * so that neither takes them for a git command at work. */
	rc = gitq_init(&d->gitq, d->loop, &d->store, &d->decisions.index,
		       d->repo.root, &d->repo.state, d->limits.commit_delay_ms,
		       d->limits.commit_max_batch, errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(1, "cannot open the repository for commits: %s",
			     errmsg);
	rc = store_open(&d->store, d->loop, &d->repo.state,
			(struct store_kind *const[]){
				&d->decisions.sk, &d->experiences.sk,
				&d->conversations.sk, &d->documents.sk},
			4, &d->loaded, errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(1, "cannot load the store: %s", errmsg);
	log_quarantine(&d->loaded);
	d->conflicts.resumed = resumed_cb;
	d->conflicts.resumed_ctx = d;
	d->conflicts.touched = files_touched_cb;
	d->conflicts.touched_ctx = d;
	d->conflicts.appeared = conflict_cb;
	d->conflicts.appeared_ctx = d;
	rc = conflicts_start(&d->conflicts, &d->decisions.index, &unmerged,
			     &d->loaded, errmsg, sizeof(errmsg));
	unmerged_set_done(&unmerged);
	if (rc < 0)
		fail_startup(1, "cannot settle the conflicts: %s", errmsg);
	conflicts_check_yield(&d->conflicts);
	d->store.on_report = report_cb;
	d->store.on_report_ctx = d;
	d->store.tree_yielded = tree_yielded_cb;
	d->store.tree_yielded_ctx = &d->conflicts;
	d->decisions.on_replacing = replacing_cb;
	d->decisions.on_replacing_ctx = d;
	register_merge_driver(d);
	if (trim_start(&d->trim, d->loop) < 0)
		log_warn("cannot start the rest-time trim of freed memory");
	if (catchup_start(&d->catchup, d->loop, &d->decisions.index) < 0)
		fail_startup(1, "cannot start the search index's catch-up");
	subs_init(&d->subs);
	if (leases_init(&d->leases, d->loop, &d->store.locks) < 0)
		fail_startup(1, "cannot set up leases");
	gitq_set_ident(&d->gitq, cfg.cur.commit_name, cfg.cur.commit_email);
	start_commits(d);
	rc = watch_start(&d->watch, d->loop, d->repo.gitdir, d->repo.commondir,
			 repo_changed_cb, d);
	if (rc < 0)
		log_warn("cannot watch %s for changes (%s): use git.reload "
			 "after a checkout or a pull",
			 d->repo.gitdir, uv_strerror(rc));
	d->watch.touched = touched_cb;
	d->watch.lock_event = lock_event_cb;
	d->gitq.committed = committed_cb;
	d->gitq.committed_ctx = &d->watch;
	d->gitq.deferral = deferral_cb;
	d->gitq.deferral_ctx = d;
	d->gitq.defer = defer_cb;
	d->gitq.defer_ctx = &d->conflicts;
	rc = life_start(&d->life, d, d->limits.idle_exit_s);
	if (rc < 0)
		fail_startup(1, "cannot look at %s: %s", d->repo.root,
			     strerror(-rc));
	/* Signals are caught before the socket exists: a client that sees
	 * the socket may stop us at once, and that must be a graceful stop
	 * (the handlers run only once the loop does). */
	uv_signal_init(d->loop, &sig_term);
	uv_signal_init(d->loop, &sig_int);
	uv_signal_init(d->loop, &sig_hup);
	sig_term.data = sig_int.data = sig_hup.data = d;
	uv_signal_start(&sig_term, signal_cb, SIGTERM);
	uv_signal_start(&sig_int, signal_cb, SIGINT);
	uv_signal_start(&sig_hup, signal_cb, SIGHUP);
	uv_timer_init(d->loop, &stop_timer);
	stop_timer.data = d;
	rc = server_listen(&d->server, d, sock, errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(1, "%s", errmsg);

	if (cfg.found)
		log_info("configuration from %s", cfg.path);
	log_config(&cfg.cur);
	log_info("serving %s on %s (%zu decisions)", d->repo.root,
		 d->server.path, d->decisions.index.count);
	if (d->limits.idle_exit_s)
		log_info("exiting after %u s without a connection or anything "
			 "to write or commit (idle_exit_s)",
			 d->limits.idle_exit_s);
	report_ready(d);
	uv_run(d->loop, UV_RUN_DEFAULT);

	trim_stop(&d->trim);
	catchup_stop(&d->catchup);
	watch_stop(&d->watch);
	conflicts_close(&d->conflicts);
	life_stop(&d->life);
	gitq_close(&d->gitq);
	leases_close(&d->leases);
	store_close(&d->store);
	server_done(&d->server);
	if (d->trace)
		trace_sink_stop(d->trace, trace_stopped_cb, NULL);
	uv_walk(d->loop, close_walk_cb, NULL);
	uv_run(d->loop, UV_RUN_DEFAULT);
	/* After the loop's last run: a job's end may still touch it. */
	trace_sink_free(d->trace);
	if (d->stopping && !d->leaving && d->exit_code == 0)
		save_snapshot(d);
	decisions_done(&d->decisions);
	experiences_done(&d->experiences);
	conversations_done(&d->conversations);
	documents_done(&d->documents);
	uv_loop_close(d->loop);
	subs_done(&d->subs);
	conflicts_done(&d->conflicts);
	vmdir_load_report_done(&d->loaded);
	repo_done(&d->repo);
	stats_done(&d->stats);
	git_libgit2_shutdown();
	log_info("stopped");
	return d->exit_code;
}
