/*
 * vmem: the command-line client of vmemd, built on the public libvmem API
 * only (jansson just reads and prints results). Human output by default,
 * --json for scripts. Exit status: 0 ok, 1 a domain error or an absent
 * decision, 2 a usage, connection or other local error. Arguments are
 * checked before connecting, so a usage error never starts a daemon; the
 * daemon alone judges values (a range 7-3, a limit 0, an unknown layer).
 */
#include "vmem.h"

#include "cli.h"
#include "mcp.h"
#include "merge.h"
#include "service.h"

#include "protocol/decision.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define VMEM_CLI_VERSION "0.1.0"
#define STDIN_MAX	 ((size_t)64 * 1024 * 1024)
#define STOP_WAIT_MS	 10000
#define TERM_COLS	 100 /* output width when stdout is not a terminal */
#define AGENT_COLS	 24  /* the agent column is cut beyond this */
#define CONTENT_MIN_COLS 16
#define HL_ON		 "\033[1;31m"
#define HL_ON_NO_COLOR	 "\033[1m"
#define HL_OFF		 "\033[0m"

static const char *const layer_names[] = {"Architecture", "Interfaces",
					  "Implementation", "Ephemeral"};
static const char *const stage_names[] = {"architect", "test", "implement",
					  "review", "merge"};

static void usage(FILE *f)
{
	fputs("usage: vmem [OPTIONS] COMMAND [ARGS]\n"
	      "\n"
	      "commands:\n"
	      "  store X Y Z [TEXT|-] [--overwrite] [--if-version N]\n"
	      "                       [--context KEY=VALUE ...]\n"
	      "                       store a decision (no TEXT or -: stdin)\n"
	      "  get X Y Z            print the decision at (X, Y, Z)\n"
	      "  exists X Y Z         print true or false (exit 1 if absent)\n"
	      "  rm X Y Z [--if-version N]\n"
	      "                       delete the decision at (X, Y, Z)\n"
	      "  ls [--x A-B] [--y A-B] [--z A-B] [--limit N] [--after "
	      "X,Y,Z]\n"
	      "                       decisions in a box of coordinates, by\n"
	      "                       (x, y, z); A-B inclusive, or one number "
	      "A;\n"
	      "                       --after: only those past X,Y,Z (paging)\n"
	      "  before X Y [--z Z]   decisions before issue X, stage Y: x < "
	      "X,\n"
	      "                       or x = X and y < Y (--z: one layer)\n"
	      "  search TERM... [--all] [--limit N]\n"
	      "                       decisions mentioning the terms, best "
	      "first;\n"
	      "                       a term of several words is a phrase, a\n"
	      "                       trailing * a prefix; --all: each term "
	      "must\n"
	      "                       match\n"
	      "  watch [--x A-B] [--y A-B] [--z A-B]\n"
	      "                       print changes in the box as they "
	      "happen\n"
	      "                       (--json: one JSON object per line)\n"
	      "  log [--limit N]      the latest commits of the memory (20)\n"
	      "  reload               make the memory what the files say "
	      "(after\n"
	      "                       a checkout, a pull, a hand edit)\n"
	      "  history X Y Z [--limit N]\n"
	      "                       the versions of (X, Y, Z) committed to "
	      "git,\n"
	      "                       newest first, after the current state "
	      "when\n"
	      "                       it is not committed yet; versions "
	      "replaced\n"
	      "                       before their commit (within the batch\n"
	      "                       window, commit_delay_ms) are not "
	      "listed\n"
	      "  rollback-point X Y   the newest commit holding only "
	      "decisions\n"
	      "                       before issue X, stage Y\n"
	      "  sync [-m MESSAGE]    commit every pending decision to git "
	      "now\n"
	      "                       (MESSAGE replaces the generated one)\n"
	      "  status               the daemon's health\n"
	      "  conflicts [--limit N]\n"
	      "                       decisions in a git conflict, and the\n"
	      "                       conflict records (versions a merge or a\n"
	      "                       resolution did not keep)\n"
	      "  resolve X Y Z --ours|--theirs|--keep-acknowledged\n"
	      "                       end the conflict at (X, Y, Z): keep "
	      "git's\n"
	      "                       ours or theirs side, or the version the\n"
	      "                       daemon acknowledged (written and "
	      "staged)\n"
	      "  init                 register the layer-aware merge driver "
	      "in\n"
	      "                       this tree (.gitattributes, git config)\n"
	      "  merge-driver O A B P\n"
	      "                       the merge driver git runs (%O %A %B %P)\n"
	      "  daemon start|stop|run\n"
	      "                       start it in the background, stop it, or\n"
	      "                       run it in the foreground\n"
	      "  service install|uninstall|status\n"
	      "                       run this tree's daemon under the "
	      "systemd\n"
	      "                       user manager (socket-activated)\n",
	      f);
	fputs("  exp add|ls|similar|stats|get|rm\n"
	      "                       experiences: what agents met, did and "
	      "got\n"
	      "                       add --context TEXT --action TEXT "
	      "--outcome TEXT\n"
	      "                         [--tag T]... [--importance N] "
	      "[--metadata JSON]:\n"
	      "                         record one (as --agent)\n"
	      "                       ls [--tag T]... [--since 7d|TIME] "
	      "[--until TIME]\n"
	      "                         [--min-importance N] [--limit N]: "
	      "an agent's\n"
	      "                         (--agent; default the agent of "
	      "writes), newest\n"
	      "                         first; --since takes 30m, 12h, 7d, "
	      "2w or a time\n"
	      "                       similar TEXT... [--min-importance N] "
	      "[--limit N]:\n"
	      "                         experiences like the situation TEXT, "
	      "best first\n"
	      "                         (--agent: one agent's)\n"
	      "                       stats: counts, importance, time span "
	      "and a tag\n"
	      "                         histogram (--agent: one agent's)\n"
	      "                       get ID, rm ID: print, delete one\n"
	      "  chat ls|show [SESSION] [--user U] [--limit N]\n"
	      "                       conversations: ls lists the sessions, "
	      "newest\n"
	      "                       activity first (--user: one user's); "
	      "show\n"
	      "                       SESSION prints its last messages (100),\n"
	      "                       oldest first\n"
	      "  doc add|search|between [ARGS] [--meta KEY=VALUE ...]\n"
	      "                       documents: add FILE|- "
	      "[--embedding-file F]\n"
	      "                       stores one (--meta: its metadata); "
	      "search\n"
	      "                       --embedding-file F [--top K] lists the "
	      "most\n"
	      "                       similar (cosine), --meta filtering; "
	      "between\n"
	      "                       START END [--limit N] those created in "
	      "the\n"
	      "                       window (RFC 3339), newest first. F: a "
	      "JSON\n"
	      "                       array or whitespace-separated numbers\n"
	      "  mcp                  serve MCP on stdin/stdout for an MCP "
	      "client\n"
	      "                       (--agent: the agent id of its writes)\n"
	      "  help [COMMAND]       this help, or a command's\n"
	      "\n"
	      "X: issue number; Y: stage 1 architect, 2 test, 3 implement,\n"
	      "4 review, 5 merge; Z: layer 1 Architecture (write-once),\n"
	      "2 Interfaces, 3 Implementation, 4 Ephemeral.\n"
	      "\n"
	      "options:\n"
	      "  --repo PATH      working tree (default: $VMEM_REPO, else the\n"
	      "                   git working tree of the current directory)\n"
	      "  --socket PATH    daemon socket (default: $VMEM_SOCKET, else\n"
	      "                   derived from the working tree)\n"
	      "  --json           machine-readable output\n"
	      "  --no-autostart   do not start the daemon when it is not "
	      "running\n"
	      "  --agent ID       agent id for writes (default: "
	      "$VMEM_AGENT_ID,\n"
	      "                   else vmem-cli)\n"
	      "  --timeout MS     per-call timeout (default 30000)\n"
	      "  -h, --help       this help\n"
	      "  --version        print the version\n"
	      "\n"
	      "exit status: 0 ok, 1 domain error or absent decision, 2 usage "
	      "or\n"
	      "connection error\n",
	      f);
}

/* The command being run, once known: usage errors point at its help. */
static const char *usage_cmd;

/*
 * vmem help COMMAND: the lines of usage() about COMMAND (its entry, up to
 * the next command's), then where the rest is, to f (NULL: only look).
 * Returns false when usage() has no such command.
 */
static bool usage_of(const char *cmd, FILE *f)
{
	char *text = NULL, *line, *save = NULL;
	size_t size = 0, n = strlen(cmd);
	FILE *m = open_memstream(&text, &size);
	bool found = false, in = false;

	if (!m)
		return false;
	usage(m);
	fclose(m);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		/* A command's entry starts "  NAME" at column 2. */
		bool entry = line[0] == ' ' && line[1] == ' ' &&
			     line[2] >= 'a' && line[2] <= 'z';

		if (entry)
			in = strncmp(line + 2, cmd, n) == 0 &&
			     (line[2 + n] == ' ' || line[2 + n] == '\0');
		else if (line[0] != ' ')
			in = false;
		if (in && f) {
			if (!found)
				fputs("usage: vmem [OPTIONS] COMMAND "
				      "[ARGS]\n\n",
				      f);
			fprintf(f, "%s\n", line);
		}
		found = found || in;
	}
	free(text);
	if (found && f)
		fputs("\noptions and the rest: vmem help\n", f);
	return found;
}

/* What a usage error frees before it exits, so that a sanitizer's leak
 * check passes on a failed command too: the parsed command line, and
 * the chat or doc call being built. */
static struct cli *held_cli;
static json_t *held_json[2];

static void release_held(void)
{
	if (held_cli) {
		json_decref(held_cli->context);
		json_decref(held_cli->meta);
		free(held_cli->pos);
		held_cli->context = held_cli->meta = NULL;
		held_cli->pos = NULL;
		held_cli = NULL;
	}
	for (size_t i = 0; i < sizeof(held_json) / sizeof(held_json[0]); i++) {
		json_decref(held_json[i]);
		held_json[i] = NULL;
	}
}

void die_usage(const char *fmt, ...)
{
	va_list ap;

	release_held();
	fputs("vmem: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (usage_cmd)
		fprintf(stderr, "\nsee 'vmem help %s'\n", usage_cmd);
	else
		fputs("\nsee 'vmem help'\n", stderr);
	exit(EXIT_USAGE);
}

void die_oom(void)
{
	release_held();
	fputs("vmem: out of memory\n", stderr);
	exit(EXIT_USAGE);
}

/* A coordinate came from the command line (parse_coord). */
static bool coord_given;
/* Its x when beyond the default max_x (else 0): only a running daemon
 * started with a larger one accepts it, and none is started to ask. */
static int x_beyond_default;

/* Report a failed library call; returns the exit status. */
int report(int rc, const struct vmem_error *err)
{
	if (rc == -EREMOTEIO && coord_given &&
	    strcmp(err->type, "CoordinateValidationError") == 0) {
		/* x beyond the daemon's max_x, given on the command line: a
		 * usage error, as every other coordinate out of range. */
		fprintf(stderr, "vmem: %s\nsee 'vmem help %s'\n", err->message,
			usage_cmd ? usage_cmd : "");
		return EXIT_USAGE;
	}
	if (rc == -EREMOTEIO &&
	    strcmp(err->type, "CoordinateOccupiedError") == 0) {
		/* The daemon names its params; here the flags do that. */
		const char *cut = strstr(err->message, "; pass ");

		fprintf(stderr,
			"vmem: %s: %.*s; use --overwrite to replace it, or "
			"--if-version N to replace only version N\n",
			err->type,
			(int)(cut ? (size_t)(cut - err->message)
				  : strlen(err->message)),
			err->message);
		return EXIT_DOMAIN;
	}
	if (rc == -EREMOTEIO) {
		if (err->type[0])
			fprintf(stderr, "vmem: %s: %s\n", err->type,
				err->message);
		else
			fprintf(stderr, "vmem: error %d: %s\n", err->code,
				err->message);
		return EXIT_DOMAIN;
	}
	fprintf(stderr, "vmem: %s\n",
		err->message[0] ? err->message : vmem_strerror(rc));
	return EXIT_USAGE;
}

/* A strict decimal integer: the whole string, no blanks, no sign '+'. */
bool parse_i64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (!*s || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
		return false;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/*
 * The largest x any daemon accepts (max_x is at most this); x up to
 * there is judged by the daemon, against its own max_x.
 */
#define X_LIMIT 1000000

static void parse_coord(const struct cli *cli, struct vmem_coord *c)
{
	static const char axis[3] = {'X', 'Y', 'Z'};
	static const int top[3] = {X_LIMIT, 5, 4};
	int *dst[3] = {&c->x, &c->y, &c->z};
	int64_t v;
	int i;

	if (cli->npos < 3)
		die_usage("expected a coordinate X Y Z");
	for (i = 0; i < 3; i++) {
		if (!parse_i64(cli->pos[i], &v))
			die_usage("coordinate '%s' is not an integer",
				  cli->pos[i]);
		if ((v < 1 || v > top[i]) && i == 0)
			die_usage("X must be in 1..max_x (1000 unless the "
				  "daemon runs with --max-x), not %s",
				  cli->pos[i]);
		if (v < 1 || v > top[i])
			die_usage("%c must be in 1..%d, not %s", axis[i],
				  top[i], cli->pos[i]);
		*dst[i] = (int)v;
	}
	coord_given = true;
	x_beyond_default = c->x > VMEM_MAX_X_DEFAULT ? c->x : 0;
}

/* The value of an option: "--opt=value" or the next argument. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
	size_t n = strlen(name);
	const char *a = argv[*i];

	if (a[n] == '=')
		return a + n + 1;
	if (*i + 1 >= argc)
		die_usage("%s needs a value", name);
	return argv[++*i];
}

static bool opt_is(const char *a, const char *name, bool takes_value)
{
	size_t n = strlen(name);

	return strncmp(a, name, n) == 0 &&
	       (a[n] == '\0' || (takes_value && a[n] == '='));
}

static void add_context(struct cli *cli, const char *kv)
{
	const char *eq = strchr(kv, '=');
	char *key;

	if (!eq || eq == kv)
		die_usage("--context takes KEY=VALUE, not '%s'", kv);
	if (!cli->context) {
		cli->context = json_object();
		if (!cli->context) {
			fputs("vmem: out of memory\n", stderr);
			exit(EXIT_USAGE);
		}
	}
	key = strndup(kv, (size_t)(eq - kv));
	if (!key) {
		fputs("vmem: out of memory\n", stderr);
		exit(EXIT_USAGE);
	}
	if (json_object_set_new(cli->context, key, json_string(eq + 1))) {
		free(key);
		die_usage("--context '%s' is not valid UTF-8", kv);
	}
	free(key);
}

/* --meta KEY=VALUE: a string member of the metadata. */
static void add_meta(struct cli *cli, const char *kv)
{
	const char *eq = strchr(kv, '=');
	char *key;

	if (!eq || eq == kv)
		die_usage("--meta takes KEY=VALUE, not '%s'", kv);
	if (!cli->meta && !(cli->meta = json_object()))
		die_oom();
	key = strndup(kv, (size_t)(eq - kv));
	if (!key)
		die_oom();
	if (json_object_set_new(cli->meta, key, json_string(eq + 1))) {
		free(key);
		die_usage("--meta '%s' is not valid UTF-8", kv);
	}
	free(key);
}

static void parse_args(struct cli *cli, int argc, char **argv)
{
	bool rest = false, exp;
	const char *v;
	int64_t n;
	int i;

	cli->pos = calloc((size_t)argc, sizeof(*cli->pos));
	if (!cli->pos)
		die_oom();
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		/* vmem exp: --context is the experience's text. */
		exp = cli->npos > 0 && strcmp(cli->pos[0], "exp") == 0;
		if (rest || a[0] != '-' || a[1] == '\0' ||
		    (a[1] >= '0' && a[1] <= '9')) {
			cli->pos[cli->npos++] = a;
		} else if (strcmp(a, "--") == 0) {
			rest = true;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(EXIT_OK);
		} else if (strcmp(a, "--version") == 0) {
			printf("vmem %s\n", VMEM_CLI_VERSION);
			exit(EXIT_OK);
		} else if (opt_is(a, "--repo", true)) {
			cli->repo = opt_value(argc, argv, &i, "--repo");
		} else if (opt_is(a, "--socket", true)) {
			cli->socket = opt_value(argc, argv, &i, "--socket");
		} else if (opt_is(a, "--agent", true)) {
			cli->agent = opt_value(argc, argv, &i, "--agent");
			cli->agent_given = true;
		} else if (strcmp(a, "--json") == 0) {
			cli->json = true;
		} else if (strcmp(a, "--no-autostart") == 0) {
			cli->no_autostart = true;
		} else if (opt_is(a, "--timeout", true)) {
			v = opt_value(argc, argv, &i, "--timeout");
			if (!parse_i64(v, &n) || n <= 0 || n > INT_MAX)
				die_usage("--timeout takes milliseconds > 0");
			cli->timeout_ms = (int)n;
		} else if (strcmp(a, "--overwrite") == 0) {
			cli->overwrite = true;
		} else if (opt_is(a, "--if-version", true)) {
			v = opt_value(argc, argv, &i, "--if-version");
			if (!parse_i64(v, &n) || n <= 0)
				die_usage("--if-version takes a version > 0");
			cli->if_version = n;
		} else if (exp && opt_is(a, "--context", true)) {
			cli->text[0] = opt_value(argc, argv, &i, "--context");
		} else if (opt_is(a, "--context", true)) {
			add_context(cli,
				    opt_value(argc, argv, &i, "--context"));
		} else if (opt_is(a, "--action", true)) {
			cli->text[1] = opt_value(argc, argv, &i, "--action");
		} else if (opt_is(a, "--outcome", true)) {
			cli->text[2] = opt_value(argc, argv, &i, "--outcome");
		} else if (opt_is(a, "--tag", true)) {
			v = opt_value(argc, argv, &i, "--tag");
			if (cli->ntags == CLI_TAGS_MAX)
				die_usage("at most %d --tag", CLI_TAGS_MAX);
			cli->tags[cli->ntags++] = v;
		} else if (opt_is(a, "--importance", true)) {
			cli->importance =
				opt_value(argc, argv, &i, "--importance");
		} else if (opt_is(a, "--min-importance", true)) {
			cli->min_importance =
				opt_value(argc, argv, &i, "--min-importance");
		} else if (opt_is(a, "--metadata", true)) {
			cli->metadata = opt_value(argc, argv, &i, "--metadata");
		} else if (opt_is(a, "--since", true)) {
			cli->since = opt_value(argc, argv, &i, "--since");
		} else if (opt_is(a, "--until", true)) {
			cli->until = opt_value(argc, argv, &i, "--until");
		} else if (opt_is(a, "--x", true)) {
			cli->range[0] = opt_value(argc, argv, &i, "--x");
		} else if (opt_is(a, "--y", true)) {
			cli->range[1] = opt_value(argc, argv, &i, "--y");
		} else if (opt_is(a, "--z", true)) {
			cli->range[2] = opt_value(argc, argv, &i, "--z");
		} else if (opt_is(a, "--limit", true)) {
			cli->limit = opt_value(argc, argv, &i, "--limit");
		} else if (opt_is(a, "--after", true)) {
			cli->after = opt_value(argc, argv, &i, "--after");
		} else if (strcmp(a, "--all") == 0) {
			cli->all = true;
		} else if (strcmp(a, "--ours") == 0 ||
			   strcmp(a, "--theirs") == 0 ||
			   strcmp(a, "--keep-acknowledged") == 0) {
			if (cli->keep)
				die_usage("give one of --ours, --theirs and "
					  "--keep-acknowledged");
			cli->keep = a[2] == 'o'	  ? "ours"
				    : a[2] == 't' ? "theirs"
						  : "acknowledged";
		} else if (opt_is(a, "--meta", true)) {
			add_meta(cli, opt_value(argc, argv, &i, "--meta"));
		} else if (opt_is(a, "--embedding-file", true)) {
			cli->embedding_file =
				opt_value(argc, argv, &i, "--embedding-file");
		} else if (opt_is(a, "--top", true)) {
			cli->top = opt_value(argc, argv, &i, "--top");
		} else if (opt_is(a, "--user", true)) {
			cli->user = opt_value(argc, argv, &i, "--user");
		} else if (strcmp(a, "-m") == 0 ||
			   opt_is(a, "--message", true)) {
			cli->message =
				opt_value(argc, argv, &i,
					  a[1] == 'm' ? "-m" : "--message");
		} else {
			die_usage("unknown option '%s'", a);
		}
	}
}

/* Would the library start the daemon (autostart as in vmem_options)? */
static bool autostart_on(int autostart)
{
	const char *e = getenv("VMEM_NO_AUTOSTART");

	if (autostart >= 0)
		return autostart != 0;
	return !(e && strcmp(e, "1") == 0);
}

int open_client(const struct cli *cli, int autostart, const char *agent,
		vmem_client **c)
{
	struct vmem_options o = {0};
	struct vmem_error err;
	int rc;

	o.repo = cli->repo;
	o.socket = cli->socket;
	o.agent_id = agent;
	o.autostart = cli->no_autostart ? 0 : autostart;
	o.timeout_ms = cli->timeout_ms;
	if (x_beyond_default && autostart_on(o.autostart)) {
		/* A usage error unless a daemon with a larger max_x runs. */
		o.autostart = 0;
		rc = vmem_client_open(c, &o, &err);
		if (rc == -ENOENT || rc == -ECONNREFUSED)
			die_usage("X must be in 1..%d unless the daemon runs "
				  "with a larger max_x (none runs for this "
				  "tree, and none is started to ask), not %d",
				  VMEM_MAX_X_DEFAULT, x_beyond_default);
		return rc < 0 ? report(rc, &err) : EXIT_OK;
	}
	rc = vmem_client_open(c, &o, &err);
	if ((rc == -ENOENT || rc == -ECONNREFUSED) &&
	    !autostart_on(o.autostart)) {
		/* Nothing answers and we may not start it: say so plainly. */
		fprintf(stderr,
			"vmem: vmemd is not running (%s); start it with 'vmem "
			"daemon start', or leave out --no-autostart / "
			"VMEM_NO_AUTOSTART=1\n",
			err.message);
		return EXIT_USAGE;
	}
	if (rc < 0)
		return report(rc, &err);
	return EXIT_OK;
}

/* Read all of stdin into a NUL-terminated string. */
static char *read_stdin(size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap), *t;
	size_t got;

	if (!buf)
		return NULL;
	for (;;) {
		if (cap - n < 2) {
			if (cap >= STDIN_MAX) {
				free(buf);
				errno = EFBIG;
				return NULL;
			}
			t = realloc(buf, cap * 2);
			if (!t) {
				free(buf);
				return NULL;
			}
			buf = t;
			cap *= 2;
		}
		got = fread(buf + n, 1, cap - n - 1, stdin);
		n += got;
		if (ferror(stdin)) {
			free(buf);
			return NULL;
		}
		/* A short count is the end: on a terminal, another read
		 * after Ctrl-D would wait for more. */
		if (got == 0 || feof(stdin))
			break;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

static const char *name_of(const char *const *names, size_t count, json_int_t i)
{
	if (i < 1 || (size_t)i > count)
		return "?";
	return names[i - 1];
}

json_int_t int_member(json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

const char *str_member(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

static json_t *load(const char *text)
{
	json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);

	if (!j)
		fputs("vmem: cannot parse the daemon's answer\n", stderr);
	return j;
}

/*
 * A result as text from the library (freed here): printed as is with
 * --json (NULL returned, *status EXIT_OK), else parsed (NULL and
 * EXIT_USAGE when it is not JSON).
 */
static json_t *result_of(const struct cli *cli, char *out, int *status)
{
	json_t *r = NULL;

	*status = EXIT_OK;
	if (cli->json)
		puts(out);
	else if (!(r = load(out)))
		*status = EXIT_USAGE;
	vmem_free(out);
	return r;
}

static void print_decision(json_t *d)
{
	json_t *coord = json_object_get(d, "coordinate");
	json_t *ctx = json_object_get(d, "issue_context");
	json_int_t z = int_member(coord, "z"), y = int_member(coord, "y");
	const char *content = str_member(d, "content");
	const char *key;
	json_t *val;
	bool first = true;

	printf("(%lld, %lld, %lld)  %s \u00b7 %s \u00b7 v%lld \u00b7 %s "
	       "\u00b7 %s\n",
	       (long long)int_member(coord, "x"), (long long)y, (long long)z,
	       name_of(layer_names, 4, z), name_of(stage_names, 5, y),
	       (long long)int_member(d, "version"), str_member(d, "agent_id"),
	       str_member(d, "timestamp"));
	if (json_is_object(ctx) && json_object_size(ctx) > 0) {
		fputs("issue_context:", stdout);
		json_object_foreach(ctx, key, val)
		{
			printf("%s %s=%s", first ? "" : ",", key,
			       json_is_string(val) ? json_string_value(val)
						   : "?");
			first = false;
		}
		putchar('\n');
	}
	putchar('\n');
	fputs(content, stdout);
	if (!*content || content[strlen(content) - 1] != '\n')
		putchar('\n');
}

/* Empty, or only ASCII whitespace (the daemon also refuses Unicode
 * whitespace). */
static bool blank(const char *s)
{
	return s[strspn(s, " \t\n\v\f\r")] == '\0';
}

static int cmd_store(struct cli *cli, vmem_client *c)
{
	struct vmem_store_options so = {0};
	struct vmem_coord co;
	struct vmem_error err;
	char *content = NULL, *ctx = NULL, *out = NULL;
	const char *text;
	json_t *d = NULL;
	size_t len;
	int rc, status = EXIT_OK;

	parse_coord(cli, &co);
	if (cli->npos > 4)
		die_usage("store takes X Y Z [TEXT|-]");
	if (cli->npos == 4 && strcmp(cli->pos[3], "-") != 0) {
		text = cli->pos[3];
	} else {
		if (isatty(STDIN_FILENO))
			fputs("vmem: reading the decision from standard input; "
			      "end it with Ctrl-D (or give TEXT after X Y Z)\n",
			      stderr);
		content = read_stdin(&len);
		if (!content) {
			fprintf(stderr, "vmem: cannot read stdin: %s\n",
				strerror(errno));
			return EXIT_USAGE;
		}
		if (strlen(content) != len) {
			free(content);
			die_usage("content contains a NUL byte");
		}
		text = content;
	}
	if (blank(text)) {
		free(content);
		die_usage("content is empty or only whitespace");
	}
	if (cli->context) {
		ctx = json_dumps(cli->context, JSON_COMPACT);
		if (!ctx) {
			fputs("vmem: out of memory\n", stderr);
			status = EXIT_USAGE;
			goto out;
		}
	}
	so.issue_context_json = ctx;
	so.overwrite = cli->overwrite;
	so.if_version = cli->if_version;
	rc = vmem_decision_store(c, &co, text, &so, &out, &err);
	if (rc < 0) {
		status = report(rc, &err);
		goto out;
	}
	if (cli->json) {
		puts(out);
		goto out;
	}
	d = load(out);
	if (!d) {
		status = EXIT_USAGE;
		goto out;
	}
	printf("stored (%d, %d, %d) v%lld at %s\n", co.x, co.y, co.z,
	       (long long)int_member(d, "version"), str_member(d, "timestamp"));
out:
	json_decref(d);
	vmem_free(out);
	free(ctx);
	free(content);
	return status;
}

static int cmd_get(struct cli *cli, vmem_client *c)
{
	struct vmem_coord co;
	struct vmem_error err;
	char *out = NULL;
	json_t *d;
	int rc, status;

	parse_coord(cli, &co);
	if (cli->npos != 3)
		die_usage("get takes X Y Z");
	rc = vmem_decision_get(c, &co, &out, &err);
	if (rc < 0)
		return report(rc, &err);
	if (rc == 0) {
		if (cli->json)
			puts("null");
		fprintf(stderr, "vmem: no decision at (%d, %d, %d)\n", co.x,
			co.y, co.z);
		return EXIT_DOMAIN;
	}
	d = result_of(cli, out, &status);
	if (!d)
		return status;
	print_decision(d);
	json_decref(d);
	return EXIT_OK;
}

static int cmd_exists(struct cli *cli, vmem_client *c)
{
	struct vmem_coord co;
	struct vmem_error err;
	int rc;

	parse_coord(cli, &co);
	if (cli->npos != 3)
		die_usage("exists takes X Y Z");
	rc = vmem_decision_exists(c, &co, &err);
	if (rc < 0)
		return report(rc, &err);
	puts(rc ? "true" : "false");
	return rc ? EXIT_OK : EXIT_DOMAIN;
}

static int cmd_rm(struct cli *cli, vmem_client *c)
{
	struct vmem_coord co;
	struct vmem_error err;
	int rc;

	parse_coord(cli, &co);
	if (cli->npos != 3)
		die_usage("rm takes X Y Z");
	rc = vmem_decision_delete(c, &co, cli->if_version, &err);
	if (rc < 0)
		return report(rc, &err);
	if (cli->json)
		puts(rc ? "true" : "false");
	if (!rc) {
		fprintf(stderr, "vmem: no decision at (%d, %d, %d)\n", co.x,
			co.y, co.z);
		return EXIT_DOMAIN;
	}
	if (!cli->json)
		printf("deleted (%d, %d, %d)\n", co.x, co.y, co.z);
	return EXIT_OK;
}

static void print_opt_line(const char *label, json_t *v)
{
	char *s;

	if (!v || json_is_null(v))
		return;
	if (json_is_string(v)) {
		printf("%-13s%s\n", label, json_string_value(v));
		return;
	}
	s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	printf("%-13s%s\n", label, s ? s : "?");
	free(s);
}

/* Call method with params (stolen); the parsed result, or NULL after
 * printing it (--json) or reporting an error (*status says which). */
json_t *call_json(struct cli *cli, vmem_client *c, const char *method,
		  json_t *params, int *status)
{
	struct vmem_error err;
	char *text, *out = NULL;
	int rc;

	if (!params)
		die_oom();
	text = json_dumps(params, JSON_COMPACT);
	json_decref(params);
	if (!text)
		die_oom();
	rc = vmem_call(c, method, text, &out, &err);
	free(text);
	if (rc < 0) {
		*status = report(rc, &err);
		return NULL;
	}
	return result_of(cli, out, status);
}

static int cmd_history(struct cli *cli, vmem_client *c)
{
	struct vmem_coord co;
	json_t *params, *r, *v;
	int64_t limit = 0;
	size_t i;
	int status;

	if (cli->npos != 3)
		die_usage("history takes X Y Z");
	parse_coord(cli, &co);
	if (cli->limit && !parse_i64(cli->limit, &limit))
		die_usage("--limit must be an integer");
	params = json_pack("{s:{s:i,s:i,s:i}}", "coordinate", "x", co.x, "y",
			   co.y, "z", co.z);
	if (params && cli->limit)
		json_object_set_new(params, "limit", json_integer(limit));
	r = call_json(cli, c, "decision.history", params, &status);
	if (!r)
		return status;
	if (json_array_size(r) == 0)
		printf("no versions of (%d, %d, %d)\n", co.x, co.y, co.z);
	json_array_foreach(r, i, v)
	{
		json_t *commit = json_object_get(v, "commit");
		json_t *version = json_object_get(v, "version");
		const char *content = str_member(v, "content");
		char ver[32] = "";

		if (json_is_integer(version))
			snprintf(ver, sizeof(ver), "v%lld",
				 (long long)json_integer_value(version));
		printf("%-13.*s  %-27s  %-5s  %-20s  ",
		       json_is_string(commit) ? 12 : 13,
		       json_is_string(commit) ? json_string_value(commit)
					      : "(uncommitted)",
		       str_member(v, "committed_at"), ver,
		       str_member(v, "agent_id"));
		if (json_is_true(json_object_get(v, "deleted")))
			printf("deleted\n");
		else
			printf("%.*s\n", (int)strcspn(content, "\n"), content);
	}
	json_decref(r);
	return EXIT_OK;
}

static int cmd_rollback_point(struct cli *cli, vmem_client *c)
{
	int64_t xt, yt;
	json_t *r;
	int status;

	if (cli->npos != 2 || !parse_i64(cli->pos[0], &xt) ||
	    !parse_i64(cli->pos[1], &yt))
		die_usage("rollback-point takes X Y (integers)");
	r = call_json(cli, c, "git.rollback_point",
		      json_pack("{s:I,s:I}", "x_threshold", (json_int_t)xt,
				"y_threshold", (json_int_t)yt),
		      &status);
	if (!r)
		return status;
	if (json_is_string(json_object_get(r, "commit")))
		printf("%s  %s\n", str_member(r, "commit"),
		       str_member(r, "subject"));
	else
		printf("none\n");
	json_decref(r);
	return EXIT_OK;
}

static int cmd_log(struct cli *cli, vmem_client *c)
{
	json_t *params = json_object(), *r, *v;
	int64_t limit;
	size_t i;
	int status;

	if (cli->npos != 0)
		die_usage("log takes no arguments");
	if (cli->limit) {
		if (!parse_i64(cli->limit, &limit))
			die_usage("--limit must be an integer");
		if (params)
			json_object_set_new(params, "limit",
					    json_integer(limit));
	}
	r = call_json(cli, c, "git.log", params, &status);
	if (!r)
		return status;
	if (json_array_size(r) == 0)
		puts("no commits of the memory");
	json_array_foreach(r, i, v)
		printf("%.12s  %s  %s\n", str_member(v, "commit"),
		       str_member(v, "committed_at"), str_member(v, "subject"));
	json_decref(r);
	return EXIT_OK;
}

static int cmd_reload(struct cli *cli, vmem_client *c)
{
	json_t *r, *q;
	size_t i;
	int status;

	r = call_json(cli, c, "git.reload", json_object(), &status);
	if (!r)
		return status;
	printf("%lld decisions loaded\n", (long long)int_member(r, "count"));
	json_array_foreach(json_object_get(r, "quarantined"), i, q)
		printf("quarantined %s: %s\n", str_member(q, "path"),
		       str_member(q, "reason"));
	json_decref(r);
	return EXIT_OK;
}

static int cmd_sync(struct cli *cli, vmem_client *c)
{
	json_t *params = json_object(), *r;
	int status;

	if (params && cli->message &&
	    json_object_set_new(params, "message", json_string(cli->message)))
		die_oom();
	r = call_json(cli, c, "git.sync", params, &status);
	if (!r)
		return status;
	if (json_is_string(json_object_get(r, "commit")))
		printf("committed %s (%lld decisions)\n",
		       str_member(r, "commit"),
		       (long long)int_member(r, "decisions"));
	else
		printf("nothing to commit\n");
	json_decref(r);
	return EXIT_OK;
}

static int cmd_status(struct cli *cli, vmem_client *c)
{
	struct vmem_error err;
	char *out = NULL;
	json_t *h, *q, *item;
	size_t i;
	int rc, status;

	if (cli->npos != 0)
		die_usage("status takes no arguments");
	rc = vmem_health(c, &out, &err);
	if (rc < 0)
		return report(rc, &err);
	h = result_of(cli, out, &status);
	if (!h)
		return status;
	printf("vmemd %s: %s\n", str_member(h, "version"),
	       str_member(h, "status"));
	printf("%-13s%s\n", "repo:", str_member(h, "repo"));
	printf("%-13s%s\n", "socket:", vmem_client_socket(c));
	printf("%-13s%lld (%lld pending)\n",
	       "decisions:", (long long)int_member(h, "decisions"),
	       (long long)int_member(h, "pending"));
	printf("%-13s%.0f s\n",
	       "uptime:", json_number_value(json_object_get(h, "uptime_s")));
	q = json_object_get(h, "last_commit");
	if (json_is_object(q))
		printf("%-13s%.12s at %s\n",
		       "last commit:", str_member(q, "commit"),
		       str_member(q, "committed_at"));
	else
		printf("%-13s%s\n", "last commit:", "none yet");
	print_opt_line("deferred:", json_object_get(h, "commit_deferred"));
	print_opt_line("stopped:", json_object_get(h, "commits_stopped"));
	q = json_object_get(h, "git_locks");
	json_array_foreach(q, i, item)
	{
		printf("%-13s%s (left alone: not ours)\n",
		       "git lock:", json_string_value(item));
	}
	print_opt_line("last error:", json_object_get(h, "last_error"));
	print_opt_line("files wait:", json_object_get(h, "files_wait_for_git"));
	q = json_object_get(h, "conflicts");
	if (json_array_size(q) > 0) {
		printf("%-13s%zu decision(s) in a git conflict (writes "
		       "refused)\n",
		       "conflicts:", json_array_size(q));
		json_array_foreach(q, i, item)
		{
			printf("  %s (%s)\n", str_member(item, "path"),
			       str_member(item, "reason"));
		}
	}
	q = json_object_get(h, "dropped");
	if (json_array_size(q) > 0) {
		printf("%-13s%zu acknowledged version(s) a resolution did not "
		       "keep\n",
		       "dropped:", json_array_size(q));
		json_array_foreach(q, i, item)
		{
			printf("  %s v%lld by %s -> %s\n",
			       str_member(item, "path"),
			       (long long)int_member(item, "version"),
			       str_member(item, "agent_id"),
			       str_member(item, "record"));
		}
	}
	q = json_object_get(h, "quarantined");
	if (json_array_size(q) > 0) {
		printf("%-13s%zu file(s)\n",
		       "quarantined:", json_array_size(q));
		json_array_foreach(q, i, item)
		{
			printf("  %s -> %s (%s)\n", str_member(item, "path"),
			       str_member(item, "moved_to"),
			       str_member(item, "reason"));
		}
	}
	json_decref(h);
	return EXIT_OK;
}

/* One version of a conflict record or a conflict, summarised. */
static void print_summary(const char *label, json_t *v)
{
	if (!json_is_object(v)) {
		printf("    %-6s (none)\n", label);
		return;
	}
	printf("    %-6s v%lld %s by %s: %s\n", label,
	       (long long)int_member(v, "version"), str_member(v, "timestamp"),
	       str_member(v, "agent_id"), str_member(v, "preview"));
}

static int cmd_conflicts(struct cli *cli, vmem_client *c)
{
	json_t *params = json_object(), *r, *v;
	int64_t limit;
	size_t i;
	int status;

	if (cli->npos != 0)
		die_usage("conflicts takes no arguments");
	if (cli->limit) {
		if (!parse_i64(cli->limit, &limit))
			die_usage("--limit must be an integer");
		if (!params ||
		    json_object_set_new(params, "limit", json_integer(limit)))
			die_oom();
	}
	r = call_json(cli, c, "conflict.list", params, &status);
	if (!r)
		return status;
	if (json_array_size(json_object_get(r, "conflicts")) == 0)
		printf("no decision is in a git conflict\n");
	json_array_foreach(json_object_get(r, "conflicts"), i, v)
	{
		printf("%s  %s%s\n", str_member(v, "path"),
		       str_member(v, "reason"),
		       json_is_true(json_object_get(v, "resolved_in_git"))
			       ? " (resolved in git, not yet taken)"
			       : "");
		print_summary("served", json_object_get(v, "acknowledged"));
	}
	if (json_array_size(json_object_get(r, "records")))
		printf("\nconflict records, newest first (%lld):\n",
		       (long long)int_member(r, "records_total"));
	json_array_foreach(json_object_get(r, "records"), i, v)
	{
		if (json_object_get(v, "error")) {
			printf("%s  not a record: %s\n", str_member(v, "file"),
			       str_member(v, "error"));
			continue;
		}
		printf("%s  %s  %s\n  %s\n", str_member(v, "recorded_at"),
		       str_member(v, "kind"), str_member(v, "path"),
		       str_member(v, "reason"));
		print_summary("kept", json_object_get(v, "kept"));
		print_summary("lost", json_object_get(v, "lost"));
		printf("    file   %s\n", str_member(v, "file"));
	}
	json_decref(r);
	return EXIT_OK;
}

static int cmd_resolve(struct cli *cli, vmem_client *c)
{
	struct vmem_coord co;
	json_t *r, *kept, *dropped;
	int status;

	parse_coord(cli, &co);
	r = call_json(cli, c, "conflict.resolve",
		      json_pack("{s:{s:i,s:i,s:i},s:s}", "coordinate", "x",
				co.x, "y", co.y, "z", co.z, "keep", cli->keep),
		      &status);
	if (!r)
		return status;
	kept = json_object_get(r, "kept");
	dropped = json_object_get(r, "dropped");
	if (json_is_object(kept))
		printf("(%d, %d, %d) resolved: kept v%lld by %s (%s)\n", co.x,
		       co.y, co.z, (long long)int_member(kept, "version"),
		       str_member(kept, "agent_id"),
		       str_member(kept, "timestamp"));
	else
		printf("(%d, %d, %d) resolved: no decision kept (the file is "
		       "removed)\n",
		       co.x, co.y, co.z);
	if (json_is_object(dropped))
		printf("the acknowledged v%lld by %s (%s) is not kept: vmemd "
		       "keeps it in a conflict record (vmem conflicts)\n",
		       (long long)int_member(dropped, "version"),
		       str_member(dropped, "agent_id"),
		       str_member(dropped, "timestamp"));
	json_decref(r);
	return EXIT_OK;
}

static int daemon_stop(struct cli *cli)
{
	struct vmem_options o = {0};
	struct vmem_error err;
	vmem_client *c = NULL;
	char *sock = NULL, *repo = NULL;
	int rc, status = EXIT_OK;

	o.repo = cli->repo;
	o.socket = cli->socket;
	o.autostart = 0;
	o.timeout_ms = cli->timeout_ms;
	rc = vmem_client_open(&c, &o, &err);
	if (rc == -ENOENT || rc == -ECONNREFUSED) {
		puts("vmemd is not running");
		return EXIT_OK;
	}
	if (rc < 0)
		return report(rc, &err);
	sock = strdup(vmem_client_socket(c));
	if (vmem_client_repo(c))
		repo = strdup(vmem_client_repo(c));
	if (!sock || (vmem_client_repo(c) && !repo)) {
		fputs("vmem: out of memory\n", stderr);
		status = EXIT_USAGE;
		goto out;
	}
	rc = vmem_shutdown(c, &err);
	vmem_client_free(c);
	c = NULL;
	if (rc < 0) {
		status = report(rc, &err);
		goto out;
	}
	/* Stopped once the socket refuses and the tree lock is free. */
	rc = vmem_daemon_wait_stopped(repo, sock, STOP_WAIT_MS, &err);
	if (rc < 0) {
		status = report(rc, &err);
		goto out;
	}
	puts("vmemd stopped");
out:
	vmem_client_free(c);
	free(repo);
	free(sock);
	return status;
}

static int daemon_run(struct cli *cli)
{
	struct vmem_error err;
	const char *prog = vmem_daemon_program();
	const char *argv[8];
	char *root = NULL;
	int rc, n = 0;

	rc = vmem_repo_find(cli->repo, &root, &err);
	if (rc < 0)
		return report(rc, &err);
	argv[n++] = prog;
	argv[n++] = "--repo";
	argv[n++] = root;
	argv[n++] = "--foreground";
	if (cli->socket) {
		argv[n++] = "--socket";
		argv[n++] = cli->socket;
	}
	argv[n] = NULL;
	fflush(NULL);
	execvp(prog, (char *const *)argv);
	fprintf(stderr, "vmem: cannot run %s: %s\n", prog, strerror(errno));
	vmem_free(root);
	return EXIT_USAGE;
}

static int cmd_daemon(struct cli *cli)
{
	vmem_client *c = NULL;
	const char *sub;
	int status;

	if (cli->npos != 1)
		die_usage("daemon takes one of start, stop, run");
	sub = cli->pos[0];
	if (strcmp(sub, "stop") == 0)
		return daemon_stop(cli);
	if (strcmp(sub, "run") == 0)
		return daemon_run(cli);
	if (strcmp(sub, "start") != 0)
		die_usage("unknown daemon command '%s'", sub);
	cli->no_autostart = false;
	status = open_client(cli, 1, NULL, &c);
	if (status != EXIT_OK)
		return status;
	if (cli->json) {
		json_t *j = json_pack("{s:s, s:s?}", "socket",
				      vmem_client_socket(c), "repo",
				      vmem_client_repo(c));
		char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

		if (s)
			puts(s);
		free(s);
		json_decref(j);
	} else {
		puts(vmem_client_socket(c));
	}
	vmem_client_free(c);
	return EXIT_OK;
}

/* Is a daemon serving the tree now (without starting one)? */
static bool daemon_running(const struct cli *cli)
{
	struct vmem_options o = {0};
	struct vmem_error err;
	vmem_client *c = NULL;

	o.repo = cli->repo;
	o.socket = cli->socket;
	o.autostart = 0;
	o.timeout_ms = cli->timeout_ms;
	if (vmem_client_open(&c, &o, &err) < 0)
		return false;
	vmem_client_free(c);
	return true;
}

static int cmd_service(struct cli *cli)
{
	struct vmem_error err;
	char *root = NULL;
	const char *sub = cli->npos == 1 ? cli->pos[0] : "";
	int rc, status;

	if (strcmp(sub, "install") != 0 && strcmp(sub, "uninstall") != 0 &&
	    strcmp(sub, "status") != 0)
		die_usage("service takes one of install, uninstall, status");
	if (cli->json)
		die_usage("--json does not apply to service");
	rc = vmem_repo_find(cli->repo, &root, &err);
	if (rc < 0)
		return report(rc, &err);
	if (strcmp(sub, "install") == 0 &&
	    (rc = service_manager_reachable()) < 0) {
		/* Checked first: without a user manager nothing can take
		 * over, so the running daemon must stay. */
		fprintf(stderr, "vmem: %s; nothing was changed\n",
			rc == -ENOTCONN
				? "systemctl --user reaches no user manager "
				  "(no "
				  "user bus: log in, or run 'loginctl "
				  "enable-linger', and check XDG_RUNTIME_DIR)"
				: "cannot run systemctl");
		status = EXIT_USAGE;
		goto out;
	}
	if (strcmp(sub, "install") == 0 && daemon_running(cli)) {
		puts("stopping the vmemd serving this tree, so that systemd "
		     "takes over its socket");
		status = daemon_stop(cli);
		if (status != EXIT_OK)
			goto out;
	}
	status = service_command(sub, root, vmem_daemon_program());
out:
	vmem_free(root);
	return status;
}

/* ---- queries: ls, before, search ------------------------------------ */

void set_or_die(json_t *o, const char *key, json_t *v)
{
	if (!v || json_object_set_new(o, key, v))
		die_oom();
}

/*
 * "A-B" or "A" (meaning A-A), each bound a decimal integer that may be
 * negative: "-5-3" is [-5, 3]. Only the syntax is checked here.
 */
static bool parse_range(const char *s, int64_t r[2])
{
	char *end;
	long long v;

	if (!(s[0] >= '0' && s[0] <= '9') &&
	    !(s[0] == '-' && s[1] >= '0' && s[1] <= '9'))
		return false;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno)
		return false;
	r[0] = v;
	if (*end == '\0') {
		r[1] = v;
		return true;
	}
	return *end == '-' && parse_i64(end + 1, &r[1]);
}

/* "X,Y,Z", optionally as printed in tables: "(X, Y, Z)". */
static bool parse_after(const char *s, int64_t v[3])
{
	char buf[96], *p, *comma, *e;
	size_t n = strlen(s);
	int i;

	if (n >= sizeof(buf))
		return false;
	memcpy(buf, s, n + 1);
	p = buf;
	if (*p == '(' && n >= 2 && buf[n - 1] == ')') {
		buf[n - 1] = '\0';
		p++;
	}
	for (i = 0; i < 3; i++) {
		comma = strchr(p, ',');
		if ((comma != NULL) != (i < 2))
			return false;
		if (comma)
			*comma = '\0';
		while (*p == ' ')
			p++;
		e = p + strlen(p);
		while (e > p && e[-1] == ' ')
			*--e = '\0';
		if (!parse_i64(p, &v[i]))
			return false;
		if (comma)
			p = comma + 1;
	}
	return true;
}

static const char *const axis_opt[3] = {"--x", "--y", "--z"};
static const char *const axis_key[3] = {"x_range", "y_range", "z_range"};

/* --x, --y, --z as x_range, y_range, z_range params (ls, watch). */
static void add_ranges(json_t *p, const struct cli *cli)
{
	int64_t r[2];

	for (int i = 0; i < 3; i++) {
		if (!cli->range[i])
			continue;
		if (!parse_range(cli->range[i], r))
			die_usage("%s takes A-B or A (integers), not '%s'",
				  axis_opt[i], cli->range[i]);
		set_or_die(p, axis_key[i], json_pack("[II]", r[0], r[1]));
	}
}

/* The params of a query command; a bad argument is a usage error. */
static json_t *query_params(const char *cmd, const struct cli *cli)
{
	json_t *p = json_object(), *terms;
	int64_t r[3];
	int i;

	if (!p)
		die_oom();
	if (strcmp(cmd, "ls") == 0) {
		if (cli->npos != 0)
			die_usage("ls takes options only, not '%s'",
				  cli->pos[0]);
		add_ranges(p, cli);
		if (cli->after) {
			if (!parse_after(cli->after, r))
				die_usage("--after takes X,Y,Z, not '%s'",
					  cli->after);
			set_or_die(p, "after",
				   json_pack("{sI,sI,sI}", "x", r[0], "y", r[1],
					     "z", r[2]));
		}
	} else if (strcmp(cmd, "before") == 0) {
		if (cli->npos != 2)
			die_usage("before takes X Y");
		for (i = 0; i < 2; i++)
			if (!parse_i64(cli->pos[i], &r[i]))
				die_usage("'%s' is not an integer",
					  cli->pos[i]);
		set_or_die(p, "x_threshold", json_integer(r[0]));
		set_or_die(p, "y_threshold", json_integer(r[1]));
		if (cli->range[2]) {
			if (!parse_i64(cli->range[2], &r[2]))
				die_usage("--z takes a layer number, not '%s'",
					  cli->range[2]);
			set_or_die(p, "z_filter", json_integer(r[2]));
		}
	} else {
		if (cli->npos == 0)
			die_usage("search takes one or more terms");
		terms = json_array();
		if (!terms)
			die_oom();
		set_or_die(p, "terms", terms);
		for (i = 0; i < cli->npos; i++) {
			json_t *t = json_string(cli->pos[i]);

			if (!t)
				die_usage("term '%s' is not valid UTF-8",
					  cli->pos[i]);
			if (json_array_append_new(terms, t))
				die_oom();
		}
		set_or_die(p, "match_all", json_boolean(cli->all));
	}
	if (cli->limit) {
		if (!parse_i64(cli->limit, &r[0]))
			die_usage("--limit takes an integer, not '%s'",
				  cli->limit);
		set_or_die(p, "limit", json_integer(r[0]));
	}
	return p;
}

/* Decode one UTF-8 sequence of s[0..len); returns its length (>= 1). */
static size_t u8_next(const char *s, size_t len, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n, i;

	if (u[0] < 0x80) {
		*cp = u[0];
		return 1;
	}
	n = u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 0;
	if (n == 0 || n > len)
		goto bad;
	*cp = u[0] & (0x7f >> n);
	for (i = 1; i < n; i++) {
		if ((u[i] & 0xc0) != 0x80)
			goto bad;
		*cp = *cp << 6 | (u[i] & 0x3f);
	}
	return n;
bad:
	*cp = 0xfffd;
	return 1;
}

/* Terminal columns of a code point, roughly wcwidth() in any locale. */
static int cp_cols(uint32_t cp)
{
	if ((cp >= 0x300 && cp <= 0x36f) || (cp >= 0x1ab0 && cp <= 0x1aff) ||
	    (cp >= 0x1dc0 && cp <= 0x1dff) || (cp >= 0x200b && cp <= 0x200f) ||
	    (cp >= 0x20d0 && cp <= 0x20ff) || (cp >= 0xfe00 && cp <= 0xfe0f) ||
	    (cp >= 0xfe20 && cp <= 0xfe2f))
		return 0;
	if ((cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0xa4cf) ||
	    (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) ||
	    (cp >= 0xfe30 && cp <= 0xfe4f) || (cp >= 0xff00 && cp <= 0xff60) ||
	    (cp >= 0xffe0 && cp <= 0xffe6) ||
	    (cp >= 0x1f300 && cp <= 0x1f64f) ||
	    (cp >= 0x1f900 && cp <= 0x1f9ff) ||
	    (cp >= 0x20000 && cp <= 0x3fffd))
		return 2;
	return 1;
}

int text_cols(const char *s, size_t len)
{
	size_t i = 0;
	uint32_t cp;
	int cols = 0;

	while (i < len) {
		i += u8_next(s + i, len - i, &cp);
		cols += cp_cols(cp);
	}
	return cols;
}

/*
 * Print s[0..len) in at most maxcols columns, cut with an ellipsis when
 * longer. Control characters print as blanks. Bytes whose mark is set are
 * highlighted with hl (an escape sequence) when hl is not NULL. Returns
 * the columns printed.
 */
int put_text(const char *s, size_t len, int maxcols, const unsigned char *mark,
	     const char *hl)
{
	int cols = 0, w, room = maxcols;
	bool lit = false;
	size_t i = 0, n;
	uint32_t cp;

	if (text_cols(s, len) > maxcols)
		room = maxcols - 1;
	while (i < len) {
		n = u8_next(s + i, len - i, &cp);
		w = cp_cols(cp);
		if (cols + w > room)
			break;
		if (hl && mark && mark[i] != lit) {
			fputs(mark[i] ? hl : HL_OFF, stdout);
			lit = mark[i];
		}
		if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0))
			putchar(' ');
		else
			fwrite(s + i, 1, n, stdout);
		cols += w;
		i += n;
	}
	if (lit)
		fputs(HL_OFF, stdout);
	if (i < len && maxcols > 0) {
		fputs("\u2026", stdout);
		cols++;
	}
	return cols;
}

/* A cell padded to width columns (right-aligned when right). */
void put_cell(const char *s, int width, bool right)
{
	int cols = text_cols(s, strlen(s));

	if (right)
		printf("%*s", cols < width ? width - cols : 0, "");
	cols = put_text(s, strlen(s), width, NULL, NULL);
	if (!right)
		printf("%*s", cols < width ? width - cols : 0, "");
	fputs("  ", stdout);
}

/* "12s", "5m", "3h", "2d" since an RFC 3339 UTC timestamp. */
void format_age(const char *ts, time_t now, char *buf, size_t size)
{
	struct tm tm = {0};
	long long d;
	time_t t;

	if (sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon,
		   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
		snprintf(buf, size, "?");
		return;
	}
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	t = timegm(&tm);
	d = t == (time_t)-1 || now < t ? 0 : (long long)(now - t);
	if (d < 60)
		snprintf(buf, size, "%llds", d);
	else if (d < 3600)
		snprintf(buf, size, "%lldm", d / 60);
	else if (d < 86400)
		snprintf(buf, size, "%lldh", d / 3600);
	else
		snprintf(buf, size, "%lldd", d / 86400);
}

/*
 * Highlighting approximates the daemon's tokenizer: a token is a run of
 * ASCII letters, digits, '_' and non-ASCII letters (most non-ASCII
 * punctuation and symbols excluded); case folding covers ASCII, Latin-1,
 * Greek and Cyrillic capitals. Matching itself is the daemon's.
 */
static bool is_tok(uint32_t cp)
{
	if (cp < 0x80)
		return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') ||
		       (cp >= 'A' && cp <= 'Z') || cp == '_';
	return !((cp < 0xc0 && cp != 0xaa && cp != 0xb5 && cp != 0xba) ||
		 cp == 0xd7 || cp == 0xf7 || (cp >= 0x2000 && cp <= 0x2bff) ||
		 (cp >= 0x3000 && cp <= 0x303f) ||
		 (cp >= 0xfe30 && cp <= 0xfe4f) ||
		 (cp >= 0xff01 && cp <= 0xff0f) ||
		 (cp >= 0xff1a && cp <= 0xff20) ||
		 (cp >= 0x1f000 && cp <= 0x1faff) || cp == 0xfffd);
}

static uint32_t fold(uint32_t cp)
{
	if ((cp >= 'A' && cp <= 'Z') ||
	    (cp >= 0xc0 && cp <= 0xde && cp != 0xd7))
		return cp + 0x20;
	if ((cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) ||
	    (cp >= 0x410 && cp <= 0x42f))
		return cp + 0x20;
	if (cp >= 0x400 && cp <= 0x40f)
		return cp + 0x50;
	return cp;
}

struct tok {
	size_t start, end; /* byte offsets */
};

/* Tokens of s[0..len) into a new array; returns their count or -ENOMEM. */
static long tokenize(const char *s, size_t len, struct tok **out)
{
	struct tok *v = NULL, *t;
	size_t i = 0, n, cap = 0, count = 0;
	bool in = false;
	uint32_t cp;

	while (i < len) {
		n = u8_next(s + i, len - i, &cp);
		if (is_tok(cp) && !in) {
			if (count == cap) {
				cap = cap ? cap * 2 : 16;
				t = realloc(v, cap * sizeof(*v));
				if (!t) {
					free(v);
					return -ENOMEM;
				}
				v = t;
			}
			v[count].start = i;
			in = true;
		} else if (!is_tok(cp) && in) {
			v[count++].end = i;
			in = false;
		}
		i += n;
	}
	if (in)
		v[count++].end = len;
	*out = v;
	return (long)count;
}

/* Does token a (of s) equal token b (of t), or start with it (prefix)? */
static bool tok_eq(const char *s, struct tok a, const char *t, struct tok b,
		   bool prefix)
{
	size_t i = a.start, j = b.start;
	uint32_t c1, c2;

	while (i < a.end && j < b.end) {
		i += u8_next(s + i, a.end - i, &c1);
		j += u8_next(t + j, b.end - j, &c2);
		if (fold(c1) != fold(c2))
			return false;
	}
	return j == b.end && (prefix || i == a.end);
}

/* Set mark[] over every occurrence of term in the content's tokens. */
static int mark_term(const char *content, const struct tok *ct, long nct,
		     const char *term, unsigned char *mark)
{
	size_t len = strlen(term);
	bool prefix = len > 0 && term[len - 1] == '*';
	struct tok *tt = NULL;
	long ntt, i, k;

	ntt = tokenize(term, len, &tt);
	if (ntt < 0)
		return (int)ntt;
	for (i = 0; ntt > 0 && i + ntt <= nct; i++) {
		for (k = 0; k < ntt; k++)
			if (!tok_eq(content, ct[i + k], term, tt[k],
				    prefix && k == ntt - 1))
				break;
		if (k == ntt)
			memset(mark + ct[i].start, 1,
			       ct[i + ntt - 1].end - ct[i].start);
	}
	free(tt);
	return 0;
}

static bool blank_line(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

/*
 * Print the content cell in cols columns: the first non-blank line, or
 * for a search the first line with a highlighted match, starting a little
 * before the match when it would fall beyond the cut.
 */
static int put_content(const char *s, json_t *terms, int cols, const char *hl)
{
	size_t len = strlen(s), ls = 0, le, m, me, p, q, n;
	unsigned char *mark = NULL;
	struct tok *ct = NULL;
	long nct = 0;
	uint32_t cp;
	json_t *t;
	size_t i;
	int rc = 0, w;

	if (terms) {
		mark = calloc(len + 1, 1);
		nct = mark ? tokenize(s, len, &ct) : -ENOMEM;
		if (nct < 0) {
			rc = (int)nct;
			goto out;
		}
		json_array_foreach(terms, i, t)
		{
			if (!json_is_string(t))
				continue;
			rc = mark_term(s, ct, nct, json_string_value(t), mark);
			if (rc < 0)
				goto out;
		}
	}
	/* The line to show: [ls, le). */
	for (m = 0; mark && m < len && !mark[m]; m++)
		;
	if (mark && m < len) {
		while (m > 0 && s[m - 1] != '\n')
			m--;
		ls = m;
	} else {
		for (;;) {
			le = strcspn(s + ls, "\n") + ls;
			if (le == len || !blank_line(s + ls, le - ls))
				break;
			ls = le + 1;
		}
	}
	le = strcspn(s + ls, "\n") + ls;
	while (le > ls && (s[le - 1] == '\r' || s[le - 1] == ' '))
		le--;
	while (ls < le && (s[ls] == ' ' || s[ls] == '\t') &&
	       (!mark || !mark[ls]))
		ls++;
	for (m = ls; mark && m < le && !mark[m]; m++)
		;
	if (!mark || m == le || text_cols(s + ls, le - ls) <= cols) {
		put_text(s + ls, le - ls, cols, mark ? mark + ls : NULL, hl);
		goto out;
	}
	for (me = m; me < le && mark[me]; me++)
		;
	w = text_cols(s + ls, m - ls);
	if (w + text_cols(s + m, me - m) <= cols - 1) {
		put_text(s + ls, le - ls, cols, mark + ls, hl);
		goto out;
	}
	/* Start about a quarter of the width before the match, on a word. */
	w = 0;
	for (p = m; p > ls && w < cols / 4;) {
		do
			p--;
		while (p > ls && (s[p] & 0xc0) == 0x80);
		u8_next(s + p, le - p, &cp);
		w += cp_cols(cp);
	}
	q = p;
	if (q > ls) {
		/* Skip the rest of a word cut in its middle. */
		n = q - 1;
		while (n > ls && (s[n] & 0xc0) == 0x80)
			n--;
		u8_next(s + n, le - n, &cp);
		while (is_tok(cp) && q < m) {
			n = u8_next(s + q, le - q, &cp);
			if (!is_tok(cp))
				break;
			q += n;
		}
	}
	while (q < m && (s[q] == ' ' || s[q] == '\t'))
		q++;
	if (q == ls) {
		put_text(s + ls, le - ls, cols, mark + ls, hl);
		goto out;
	}
	fputs("\u2026", stdout);
	put_text(s + q, le - q, cols - 1, mark + q, hl);
out:
	free(ct);
	free(mark);
	return rc;
}

enum {
	COL_COORD,
	COL_LAYER,
	COL_STAGE,
	COL_AGENT,
	COL_AGE,
	COL_VER,
	COL_SCORE,
	NCOLS
};

struct row {
	char cell[NCOLS][80];
	json_t *d;
};

int term_cols(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return TERM_COLS;
}

static int print_table(json_t *arr, json_t *query_terms)
{
	static const char *const head[NCOLS] = {
		"COORD", "LAYER", "STAGE", "AGENT", "AGE", "VER", "SCORE"};
	static const bool right[NCOLS] = {false, false, false, false,
					  true,	 true,	true};
	bool tty = isatty(STDOUT_FILENO), search = query_terms != NULL;
	const char *env = getenv("NO_COLOR");
	const char *hl = !tty ? NULL : env && *env ? HL_ON_NO_COLOR : HL_ON;
	int width[NCOLS] = {0}, ncols = search ? NCOLS : COL_SCORE;
	int used = 0, rc = 0, k, w;
	size_t n = json_array_size(arr), i;
	time_t now = time(NULL);
	struct row *rows;
	json_t *terms;

	if (n == 0) {
		puts("no decisions");
		return EXIT_OK;
	}
	rows = calloc(n, sizeof(*rows));
	if (!rows)
		die_oom();
	for (k = 0; k < ncols; k++)
		width[k] = (int)strlen(head[k]);
	for (i = 0; i < n; i++) {
		struct row *r = &rows[i];
		json_t *d = json_array_get(arr, i);
		json_t *co = json_object_get(d, "coordinate");
		json_int_t y = int_member(co, "y"), z = int_member(co, "z");

		r->d = d;
		snprintf(r->cell[COL_COORD], sizeof(r->cell[0]),
			 "(%lld, %lld, %lld)", (long long)int_member(co, "x"),
			 (long long)y, (long long)z);
		snprintf(r->cell[COL_LAYER], sizeof(r->cell[0]), "%s",
			 name_of(layer_names, 4, z));
		snprintf(r->cell[COL_STAGE], sizeof(r->cell[0]), "%s",
			 name_of(stage_names, 5, y));
		format_age(str_member(d, "timestamp"), now, r->cell[COL_AGE],
			   sizeof(r->cell[0]));
		snprintf(r->cell[COL_VER], sizeof(r->cell[0]), "%lld",
			 (long long)int_member(d, "version"));
		snprintf(r->cell[COL_SCORE], sizeof(r->cell[0]), "%lld",
			 (long long)int_member(d, "score"));
		for (k = 0; k < ncols; k++) {
			const char *s = k == COL_AGENT
						? str_member(d, "agent_id")
						: r->cell[k];

			w = text_cols(s, strlen(s));
			if (k == COL_AGENT && w > AGENT_COLS)
				w = AGENT_COLS;
			if (w > width[k])
				width[k] = w;
		}
	}
	for (k = 0; k < ncols; k++)
		used += width[k] + 2;
	w = term_cols() - used;
	if (w < CONTENT_MIN_COLS)
		w = CONTENT_MIN_COLS;
	for (k = 0; k < ncols; k++)
		put_cell(head[k], width[k], right[k]);
	puts("CONTENT");
	for (i = 0; i < n && rc == 0; i++) {
		for (k = 0; k < ncols; k++)
			put_cell(k == COL_AGENT
					 ? str_member(rows[i].d, "agent_id")
					 : rows[i].cell[k],
				 width[k], right[k]);
		terms = json_object_get(rows[i].d, "matched_terms");
		if (!json_is_array(terms))
			terms = query_terms;
		rc = put_content(str_member(rows[i].d, "content"),
				 search ? terms : NULL, w, hl);
		putchar('\n');
	}
	free(rows);
	if (rc < 0)
		die_oom();
	return EXIT_OK;
}

static int cmd_query(const char *cmd, struct cli *cli, vmem_client *c,
		     json_t *params)
{
	const char *method = strcmp(cmd, "ls") == 0 ? "decision.query_range"
			     : strcmp(cmd, "before") == 0
				     ? "decision."
				       "query_partial_order"
				     : "decision.search";
	json_t *arr;
	int status;

	arr = call_json(cli, c, method, json_incref(params), &status);
	if (!arr)
		return status;
	if (!json_is_array(arr)) {
		fputs("vmem: the daemon's answer is not a list\n", stderr);
		status = EXIT_USAGE;
	} else {
		status = print_table(arr,
				     strcmp(cmd, "search") == 0
					     ? json_object_get(params, "terms")
					     : NULL);
	}
	json_decref(arr);
	return status;
}

static volatile sig_atomic_t watch_stopped;

static void stop_watching(int sig)
{
	(void)sig;
	watch_stopped = 1;
}

/* One change as a line: what happened where, and the decision now. */
static void print_change(json_t *params)
{
	json_t *coord = json_object_get(params, "coordinate");
	json_t *d = json_object_get(params, "decision");
	const char *content = str_member(d, "content");
	size_t first_line = strcspn(content, "\n");

	printf("%s (%lld, %lld, %lld)", str_member(params, "event"),
	       (long long)int_member(coord, "x"),
	       (long long)int_member(coord, "y"),
	       (long long)int_member(coord, "z"));
	if (json_is_object(d))
		printf(" v%lld %s: %.*s", (long long)int_member(d, "version"),
		       str_member(d, "agent_id"), (int)first_line, content);
	else if (strcmp(str_member(params, "event"), "reloaded") == 0)
		fputs(": gone", stdout);
	putchar('\n');
}

/* Subscribe, then print every change until a signal or the daemon's
 * end. A 200 ms tick lets a signal end the wait. */
static int cmd_watch(struct cli *cli, vmem_client *c)
{
	struct sigaction sa = {.sa_handler = stop_watching};
	struct vmem_error err;
	json_t *p = json_object(), *n;
	char *text, *line;
	int rc;

	if (!p)
		die_oom();
	add_ranges(p, cli);
	text = json_dumps(p, JSON_COMPACT);
	json_decref(p);
	if (!text)
		die_oom();
	rc = vmem_call(c, "watch.subscribe", text, NULL, &err);
	free(text);
	if (rc < 0)
		return report(rc, &err);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while (!watch_stopped) {
		rc = vmem_next_notification(c, 200, &line, &err);
		if (rc == -ETIMEDOUT)
			continue;
		if (rc < 0) {
			if (watch_stopped)
				break;
			fprintf(stderr, "vmem: %s\n", err.message);
			return EXIT_DOMAIN;
		}
		n = load(line);
		vmem_free(line);
		if (!n)
			return EXIT_USAGE;
		if (cli->json) {
			text = json_dumps(json_object_get(n, "params"),
					  JSON_COMPACT);
			if (!text)
				die_oom();
			puts(text);
			free(text);
		} else {
			print_change(json_object_get(n, "params"));
		}
		json_decref(n);
		fflush(stdout);
	}
	return EXIT_OK;
}

/* ---- chat and doc: conversations and documents ---- */

/* A --limit or --top value: 1..max, else a usage error. */
static json_int_t count_opt(const char *name, const char *v, int64_t max)
{
	int64_t n;

	if (!parse_i64(v, &n) || n < 1 || n > max)
		die_usage("%s takes an integer in 1..%lld", name,
			  (long long)max);
	return (json_int_t)n;
}

/* The numbers of an embedding file: a JSON array, or numbers separated
 * by white space or commas. */
static json_t *read_embedding(const char *path)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
	json_t *arr, *v;
	char *text = NULL, *p, *end;
	size_t len = 0, cap = 0, n;

	if (!f)
		die_usage("cannot read %s: %s", path, strerror(errno));
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 65536;
			if (cap > STDIN_MAX || !(p = realloc(text, cap + 1))) {
				free(text);
				if (f != stdin)
					fclose(f);
				die_usage("%s is too large", path);
			}
			text = p;
		}
		n = fread(text + len, 1, cap - len, f);
		len += n;
		if (n == 0)
			break;
	}
	if (f != stdin)
		fclose(f);
	if (!text)
		die_usage("%s is empty", path);
	text[len] = '\0';
	p = text + strspn(text, " \t\r\n");
	if (*p == '[') {
		arr = json_loads(p, 0, NULL);
		free(text);
		if (!json_is_array(arr)) {
			json_decref(arr);
			die_usage("%s: not a JSON array of numbers", path);
		}
		return arr;
	}
	if (!(arr = json_array()))
		die_oom();
	while (*(p += strspn(p, " \t\r\n,"))) {
		double d = strtod(p, &end);

		if (end == p) {
			char bad[21];

			snprintf(bad, sizeof(bad), "%s", p);
			free(text);
			json_decref(arr);
			die_usage("%s: '%s' is not a number", path, bad);
		}
		if (!(v = json_real(d)) || json_array_append_new(arr, v))
			die_oom();
		p = end;
	}
	free(text);
	return arr;
}

/* A file's text (FILE, or - for stdin), as a JSON string. */
static json_t *read_text(const char *path)
{
	char *text;
	size_t len;
	json_t *s;
	FILE *f;

	if (strcmp(path, "-") == 0) {
		text = read_stdin(&len);
	} else {
		f = fopen(path, "re");
		if (!f)
			die_usage("cannot read %s: %s", path, strerror(errno));
		text = NULL;
		len = 0;
		if (fseek(f, 0, SEEK_END) == 0) {
			long size = ftell(f);

			if (size < 0 || (size_t)size > STDIN_MAX) {
				fclose(f);
				die_usage("%s is too large", path);
			}
			rewind(f);
			text = malloc((size_t)size + 1);
			if (!text)
				die_oom();
			len = fread(text, 1, (size_t)size, f);
			text[len] = '\0';
		}
		fclose(f);
		if (!text)
			die_usage("cannot read %s", path);
	}
	if (!text)
		die_oom();
	if (len == 0) {
		free(text);
		die_usage("%s is empty", path);
	}
	s = json_stringn(text, len);
	free(text);
	if (!s)
		die_usage("%s is not UTF-8 text", path);
	return s;
}

static void set_new(json_t *o, const char *key, json_t *v)
{
	if (!v || json_object_set_new(o, key, v))
		die_oom();
}

/* chat ls [--user U] [--limit N] | chat show SESSION [--limit N]: the
 * method in "method", its params in "params". */
static json_t *chat_params(const struct cli *cli)
{
	json_t *p = json_object(), *call = json_object();

	held_json[0] = p;
	held_json[1] = call;
	if (!p || !call)
		die_oom();
	if (cli->npos >= 1 && strcmp(cli->pos[0], "ls") == 0) {
		if (cli->npos != 1)
			die_usage("chat ls takes options only");
		if (cli->user)
			set_new(p, "user_id", json_string(cli->user));
		set_new(call, "method", json_string("session.list"));
	} else if (cli->npos >= 1 && strcmp(cli->pos[0], "show") == 0) {
		if (cli->npos != 2)
			die_usage("chat show takes SESSION");
		if (cli->user)
			die_usage("--user applies to chat ls only");
		set_new(p, "session_id", json_string(cli->pos[1]));
		set_new(call, "method", json_string("message.history"));
	} else {
		die_usage("chat takes ls or show");
	}
	if (cli->limit)
		set_new(p, "limit",
			json_integer(count_opt("--limit", cli->limit, 10000)));
	held_json[0] = held_json[1] = NULL;
	set_new(call, "params", p);
	return call;
}

static json_t *doc_params(const struct cli *cli)
{
	const char *sub = cli->npos >= 1 ? cli->pos[0] : "";
	json_t *p = json_object(), *call = json_object();
	const char *method;

	held_json[0] = p;
	held_json[1] = call;
	if (!p || !call)
		die_oom();
	if (strcmp(sub, "add") == 0) {
		if (cli->npos != 2)
			die_usage("doc add takes FILE (or - for stdin)");
		if (cli->top || cli->limit)
			die_usage("--top and --limit do not apply to doc add");
		set_new(p, "content", read_text(cli->pos[1]));
		if (cli->meta)
			set_new(p, "metadata", json_incref(cli->meta));
		if (cli->embedding_file)
			set_new(p, "embedding",
				read_embedding(cli->embedding_file));
		method = "document.store";
	} else if (strcmp(sub, "search") == 0) {
		if (cli->npos != 1)
			die_usage("doc search takes options only");
		if (!cli->embedding_file)
			die_usage("doc search needs --embedding-file F");
		if (cli->limit)
			die_usage("doc search takes --top, not --limit");
		set_new(p, "query_embedding",
			read_embedding(cli->embedding_file));
		if (cli->top)
			set_new(p, "top_k",
				json_integer(
					count_opt("--top", cli->top, 1000)));
		if (cli->meta)
			set_new(p, "metadata_filters", json_incref(cli->meta));
		method = "document.semantic_search";
	} else if (strcmp(sub, "between") == 0) {
		if (cli->npos != 3)
			die_usage("doc between takes START END");
		if (cli->top || cli->embedding_file)
			die_usage("--top and --embedding-file do not apply to "
				  "doc between");
		set_new(p, "start", json_string(cli->pos[1]));
		set_new(p, "end", json_string(cli->pos[2]));
		if (cli->limit)
			set_new(p, "limit",
				json_integer(count_opt("--limit", cli->limit,
						       10000)));
		if (cli->meta)
			set_new(p, "metadata_filters", json_incref(cli->meta));
		method = "document.temporal_query";
	} else {
		die_usage("doc takes add, search or between");
	}
	set_new(call, "method", json_string(method));
	held_json[0] = held_json[1] = NULL;
	set_new(call, "params", p);
	return call;
}

/* The first line of s, cut to fit width columns. */
static void put_line(const char *s, int width)
{
	put_text(s, strcspn(s, "\n"), width, NULL, NULL);
}

static void print_sessions(json_t *arr)
{
	size_t i;
	json_t *s;

	if (json_array_size(arr) == 0) {
		puts("no sessions");
		return;
	}
	printf("%-36s  %-27s  %8s  %s\n", "SESSION", "UPDATED", "MESSAGES",
	       "USER");
	json_array_foreach(arr, i, s)
	{
		printf("%-36s  %-27s  %8lld  ", str_member(s, "id"),
		       str_member(s, "updated_at"),
		       (long long)int_member(s, "message_count"));
		put_line(str_member(s, "user_id"), 40);
		putchar('\n');
	}
}

static void print_messages(json_t *arr)
{
	size_t i;
	json_t *m;

	if (json_array_size(arr) == 0) {
		puts("no messages");
		return;
	}
	json_array_foreach(arr, i, m)
	{
		const char *content = str_member(m, "content");

		printf("[%s] %s:\n", str_member(m, "created_at"),
		       str_member(m, "role"));
		fputs(content, stdout);
		if (!*content || content[strlen(content) - 1] != '\n')
			putchar('\n');
	}
}

static void print_documents(json_t *arr, bool scores)
{
	int width = term_cols() - (scores ? 36 + 2 + 10 + 2 : 36 + 2 + 27 + 2);
	size_t i;
	json_t *d;

	if (json_array_size(arr) == 0) {
		puts("no documents");
		return;
	}
	if (width < CONTENT_MIN_COLS)
		width = CONTENT_MIN_COLS;
	if (scores)
		printf("%-36s  %10s  %s\n", "DOCUMENT", "SCORE", "CONTENT");
	else
		printf("%-36s  %-27s  %s\n", "DOCUMENT", "CREATED", "CONTENT");
	json_array_foreach(arr, i, d)
	{
		if (scores)
			printf("%-36s  %10.6f  ", str_member(d, "id"),
			       json_number_value(json_object_get(d, "score")));
		else
			printf("%-36s  %-27s  ", str_member(d, "id"),
			       str_member(d, "created_at"));
		put_line(str_member(d, "content"), width);
		putchar('\n');
	}
}

/* chat and doc: one call (built by chat_params or doc_params), printed. */
static int cmd_memory(struct cli *cli, vmem_client *c, json_t *call)
{
	const char *method = str_member(call, "method");
	json_t *r;
	int status;

	r = call_json(cli, c, method,
		      json_incref(json_object_get(call, "params")), &status);
	if (!r)
		return status;
	if (strcmp(method, "session.list") == 0)
		print_sessions(r);
	else if (strcmp(method, "message.history") == 0)
		print_messages(r);
	else if (strcmp(method, "document.store") == 0)
		printf("stored document %s\n", str_member(r, "id"));
	else
		print_documents(r, strcmp(method, "document.semantic_search") ==
					   0);
	json_decref(r);
	return EXIT_OK;
}

/* Refuse bad arguments before connecting (or starting a daemon). */
static void check_args(const char *cmd, const struct cli *cli)
{
	struct vmem_coord co;

	if (strcmp(cmd, "status") == 0) {
		if (cli->npos != 0)
			die_usage("status takes no arguments");
		return;
	}
	parse_coord(cli, &co);
	if (strcmp(cmd, "store") == 0) {
		if (cli->npos > 4)
			die_usage("store takes X Y Z [TEXT|-]");
		if (cli->npos == 4 && blank(cli->pos[3]))
			die_usage("content is empty or only whitespace");
	} else if (cli->npos != 3) {
		die_usage("%s takes X Y Z", cmd);
	}
}

/* vmem mcp: an agent id only when given (--agent, $VMEM_AGENT_ID). */
static int cmd_mcp(const struct cli *cli)
{
	struct mcp_options o = {0};

	if (cli->npos != 1)
		die_usage("mcp takes options only, not '%s'", cli->pos[1]);
	if (cli->json || cli->overwrite || cli->if_version || cli->context ||
	    cli->range[0] || cli->range[1] || cli->range[2] || cli->limit ||
	    cli->after || cli->all || cli->message || cli->text[1] ||
	    cli->text[2] || cli->ntags || cli->importance ||
	    cli->min_importance || cli->metadata || cli->since || cli->until)
		die_usage("mcp takes --repo, --socket, --agent, --timeout and "
			  "--no-autostart only");
	o.repo = cli->repo;
	o.socket = cli->socket;
	o.agent_id = cli->agent;
	o.autostart = cli->no_autostart ? 0 : -1;
	o.timeout_ms = cli->timeout_ms;
	return mcp_run(&o);
}

int main(int argc, char **argv)
{
	struct cli cli = {0};
	vmem_client *c = NULL;
	json_t *params = NULL;
	const char *cmd, *env;
	bool ls, before, search, watch;
	int status;

	held_cli = &cli;
	parse_args(&cli, argc, argv);
	env = getenv("VMEM_AGENT_ID");
	if (!cli.agent && env && *env)
		cli.agent = env;
	if (cli.npos > 0 && strcmp(cli.pos[0], "mcp") == 0) {
		status = cmd_mcp(&cli);
		goto out;
	}
	if (!cli.agent)
		cli.agent = "vmem-cli";
	if (cli.npos <= 0)
		die_usage("no command given");
	cmd = cli.pos[0];
	/* The remaining positionals are the command's arguments. */
	memmove(cli.pos, cli.pos + 1, sizeof(cli.pos[0]) * (size_t)cli.npos);
	cli.npos--;
	if (strcmp(cmd, "help") == 0) {
		if (cli.npos > 1)
			die_usage("help takes at most one COMMAND");
		if (cli.npos == 1 && !usage_of(cli.pos[0], stdout))
			die_usage("no command '%s'", cli.pos[0]);
		if (cli.npos == 0)
			usage(stdout);
		status = EXIT_OK;
		goto out;
	}
	if (usage_of(cmd, NULL))
		usage_cmd = cmd;
	if (strcmp(cmd, "exp") == 0) {
		status = cmd_exp(&cli);
		goto out;
	}
	if (cli.text[1] || cli.text[2] || cli.ntags || cli.importance ||
	    cli.min_importance || cli.metadata || cli.since || cli.until)
		die_usage("--action, --outcome, --tag, --importance, "
			  "--min-importance, --metadata, --since and --until "
			  "apply to exp only");
	ls = strcmp(cmd, "ls") == 0;
	before = strcmp(cmd, "before") == 0;
	search = strcmp(cmd, "search") == 0;
	if ((cli.overwrite || cli.context) && strcmp(cmd, "store") != 0)
		die_usage("--overwrite and --context apply to store only");
	if (cli.if_version && strcmp(cmd, "store") != 0 &&
	    strcmp(cmd, "rm") != 0)
		die_usage("--if-version applies to store and rm only");
	watch = strcmp(cmd, "watch") == 0;
	if ((cli.range[0] || cli.range[1]) && !ls && !watch)
		die_usage("--x and --y apply to ls and watch only");
	if (cli.after && !ls)
		die_usage("--after applies to ls only");
	if (cli.range[2] && !ls && !before && !watch)
		die_usage("--z applies to ls, before and watch only");
	if (cli.limit && !ls && !search && strcmp(cmd, "history") != 0 &&
	    strcmp(cmd, "log") != 0 && strcmp(cmd, "chat") != 0 &&
	    strcmp(cmd, "doc") != 0 && strcmp(cmd, "conflicts") != 0)
		die_usage("--limit applies to ls, search, history, log, chat, "
			  "doc and conflicts only");
	if (cli.meta && strcmp(cmd, "doc") != 0)
		die_usage("--meta applies to doc only");
	if ((cli.embedding_file || cli.top) && strcmp(cmd, "doc") != 0)
		die_usage("--embedding-file and --top apply to doc only");
	if (cli.user && strcmp(cmd, "chat") != 0)
		die_usage("--user applies to chat only");
	if (cli.all && !search)
		die_usage("--all applies to search only");
	if (cli.message && strcmp(cmd, "sync") != 0)
		die_usage("-m applies to sync only");
	if (cli.keep && strcmp(cmd, "resolve") != 0)
		die_usage("--ours, --theirs and --keep-acknowledged apply to "
			  "resolve only");

	if (strcmp(cmd, "merge-driver") == 0) {
		/* git runs it: no daemon, no option of ours */
		if (cli.npos != 4)
			die_usage("merge-driver takes O A B P (git's %%O %%A "
				  "%%B %%P)");
		status = merge_driver(cli.pos[0], cli.pos[1], cli.pos[2],
				      cli.pos[3]);
		goto out;
	}
	if (strcmp(cmd, "init") == 0) {
		struct vmem_error err;
		char *root = NULL;
		int rc;

		if (cli.npos != 0)
			die_usage("init takes no arguments");
		rc = vmem_repo_find(cli.repo, &root, &err);
		status = rc < 0 ? report(rc, &err) : merge_init(root, cli.json);
		vmem_free(root);
		goto out;
	}
	if (strcmp(cmd, "resolve") == 0) {
		struct vmem_coord co;

		if (cli.npos != 3)
			die_usage("resolve takes X Y Z and one of --ours, "
				  "--theirs, --keep-acknowledged");
		parse_coord(&cli, &co);
		if (!cli.keep)
			die_usage("resolve needs --ours, --theirs or "
				  "--keep-acknowledged");
		status = open_client(&cli, -1, cli.agent, &c);
		if (status == EXIT_OK)
			status = cmd_resolve(&cli, c);
		goto out;
	}
	if (strcmp(cmd, "conflicts") == 0) {
		status = open_client(&cli, -1, cli.agent, &c);
		if (status == EXIT_OK)
			status = cmd_conflicts(&cli, c);
		goto out;
	}
	if (strcmp(cmd, "daemon") == 0) {
		status = cmd_daemon(&cli);
		goto out;
	}
	if (strcmp(cmd, "service") == 0) {
		status = cmd_service(&cli);
		goto out;
	}
	if (ls || before || search) {
		params = query_params(cmd, &cli);
		status = open_client(&cli, -1, cli.agent, &c);
		if (status == EXIT_OK)
			status = cmd_query(cmd, &cli, c, params);
		goto out;
	}
	if (watch) {
		if (cli.npos != 0)
			die_usage("watch takes options only, not '%s'",
				  cli.pos[0]);
		status = open_client(&cli, -1, cli.agent, &c);
		if (status == EXIT_OK)
			status = cmd_watch(&cli, c);
		goto out;
	}
	if (strcmp(cmd, "chat") == 0 || strcmp(cmd, "doc") == 0) {
		params = cmd[0] == 'c' ? chat_params(&cli) : doc_params(&cli);
		status = open_client(&cli, -1, cli.agent, &c);
		if (status == EXIT_OK)
			status = cmd_memory(&cli, c, params);
		goto out;
	}
	if (strcmp(cmd, "log") == 0) {
		status = open_client(&cli, -1, cli.agent, &c);
		if (status == EXIT_OK)
			status = cmd_log(&cli, c);
		goto out;
	}
	if (strcmp(cmd, "history") == 0 || strcmp(cmd, "rollback-point") == 0) {
		status = open_client(&cli, -1, cli.agent, &c);
		if (status == EXIT_OK)
			status = cmd[0] == 'h' ? cmd_history(&cli, c)
					       : cmd_rollback_point(&cli, c);
		goto out;
	}
	if (strcmp(cmd, "sync") == 0 || strcmp(cmd, "reload") == 0) {
		if (cli.npos != 0)
			die_usage("%s takes no arguments", cmd);
		status = open_client(&cli, -1, cli.agent, &c);
		if (status == EXIT_OK)
			status = cmd[0] == 's' ? cmd_sync(&cli, c)
					       : cmd_reload(&cli, c);
		goto out;
	}
	if (strcmp(cmd, "store") != 0 && strcmp(cmd, "get") != 0 &&
	    strcmp(cmd, "exists") != 0 && strcmp(cmd, "rm") != 0 &&
	    strcmp(cmd, "status") != 0)
		die_usage("unknown command '%s'", cmd);
	check_args(cmd, &cli);
	status = open_client(&cli, -1, cli.agent, &c);
	if (status != EXIT_OK)
		goto out;
	if (strcmp(cmd, "store") == 0)
		status = cmd_store(&cli, c);
	else if (strcmp(cmd, "get") == 0)
		status = cmd_get(&cli, c);
	else if (strcmp(cmd, "exists") == 0)
		status = cmd_exists(&cli, c);
	else if (strcmp(cmd, "rm") == 0)
		status = cmd_rm(&cli, c);
	else
		status = cmd_status(&cli, c);
out:
	vmem_client_free(c);
	json_decref(params);
	json_decref(cli.context);
	json_decref(cli.meta);
	free(cli.pos);
	if (fflush(stdout) != 0 && status == EXIT_OK)
		status = EXIT_USAGE;
	return status;
}
