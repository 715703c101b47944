/*
 * vmem: the command-line client of vmemd, built on the public libvmem API
 * only (jansson just reads and prints results). Human output by default,
 * --json for scripts. Exit status: 0 ok, 1 a domain error or an absent
 * decision, 2 a usage, connection or other local error.
 */
#include "vmem.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VMEM_CLI_VERSION "0.1.0"
#define STDIN_MAX	 ((size_t)64 * 1024 * 1024)
#define STOP_WAIT_MS	 10000
#define MAX_POS		 8

enum { EXIT_OK = 0, EXIT_DOMAIN = 1, EXIT_USAGE = 2 };

struct cli {
	const char *repo;
	const char *socket;
	const char *agent;
	bool json;
	bool no_autostart;
	int timeout_ms;
	bool overwrite;
	int64_t if_version;
	json_t *context; /* --context k=v pairs, or NULL */
	const char *pos[MAX_POS];
	int npos;
};

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
	      "  status               the daemon's health\n"
	      "  daemon start|stop|run\n"
	      "                       start it in the background, stop it, or\n"
	      "                       run it in the foreground\n"
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

__attribute__((format(printf, 1, 2), noreturn)) static void
die_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("vmem: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n\n", stderr);
	usage(stderr);
	exit(EXIT_USAGE);
}

/* Report a failed library call; returns the exit status. */
static int report(int rc, const struct vmem_error *err)
{
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
static bool parse_i64(const char *s, int64_t *out)
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

static void parse_coord(const struct cli *cli, struct vmem_coord *c)
{
	int *dst[3] = {&c->x, &c->y, &c->z};
	int64_t v;
	int i;

	if (cli->npos < 3)
		die_usage("expected a coordinate X Y Z");
	for (i = 0; i < 3; i++) {
		if (!parse_i64(cli->pos[i], &v))
			die_usage("coordinate '%s' is not an integer",
				  cli->pos[i]);
		if (v < INT_MIN || v > INT_MAX)
			die_usage("coordinate '%s' is out of range",
				  cli->pos[i]);
		*dst[i] = (int)v;
	}
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

static void parse_args(struct cli *cli, int argc, char **argv)
{
	bool rest = false;
	const char *v;
	int64_t n;
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (rest || a[0] != '-' || a[1] == '\0' ||
		    (a[1] >= '0' && a[1] <= '9')) {
			if (cli->npos >= MAX_POS)
				die_usage("too many arguments");
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
		} else if (opt_is(a, "--context", true)) {
			add_context(cli,
				    opt_value(argc, argv, &i, "--context"));
		} else {
			die_usage("unknown option '%s'", a);
		}
	}
}

static int open_client(const struct cli *cli, int autostart, const char *agent,
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
	rc = vmem_client_open(c, &o, &err);
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
		if (got == 0) {
			if (ferror(stdin)) {
				free(buf);
				return NULL;
			}
			break;
		}
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

static json_int_t int_member(json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *str_member(json_t *o, const char *key)
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
	if (!*text) {
		free(content);
		die_usage("content is empty");
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
	int rc;

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
	if (cli->json) {
		puts(out);
		vmem_free(out);
		return EXIT_OK;
	}
	d = load(out);
	vmem_free(out);
	if (!d)
		return EXIT_USAGE;
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

static int cmd_status(struct cli *cli, vmem_client *c)
{
	struct vmem_error err;
	char *out = NULL;
	json_t *h, *q, *item;
	size_t i;
	int rc;

	if (cli->npos != 0)
		die_usage("status takes no arguments");
	rc = vmem_health(c, &out, &err);
	if (rc < 0)
		return report(rc, &err);
	if (cli->json) {
		puts(out);
		vmem_free(out);
		return EXIT_OK;
	}
	h = load(out);
	vmem_free(out);
	if (!h)
		return EXIT_USAGE;
	printf("vmemd %s: %s\n", str_member(h, "version"),
	       str_member(h, "status"));
	printf("%-13s%s\n", "repo:", str_member(h, "repo"));
	printf("%-13s%s\n", "socket:", vmem_client_socket(c));
	printf("%-13s%lld (%lld pending)\n",
	       "decisions:", (long long)int_member(h, "decisions"),
	       (long long)int_member(h, "pending"));
	printf("%-13s%.0f s\n",
	       "uptime:", json_number_value(json_object_get(h, "uptime_s")));
	print_opt_line("last commit:", json_object_get(h, "last_commit"));
	print_opt_line("deferred:", json_object_get(h, "commit_deferred"));
	print_opt_line("last error:", json_object_get(h, "last_error"));
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
		if (cli->npos == 4 && !*cli->pos[3])
			die_usage("content is empty");
	} else if (cli->npos != 3) {
		die_usage("%s takes X Y Z", cmd);
	}
}

int main(int argc, char **argv)
{
	struct cli cli = {0};
	vmem_client *c = NULL;
	const char *cmd, *env;
	int status;

	parse_args(&cli, argc, argv);
	env = getenv("VMEM_AGENT_ID");
	if (!cli.agent)
		cli.agent = env && *env ? env : "vmem-cli";
	if (cli.npos == 0)
		die_usage("no command given");
	cmd = cli.pos[0];
	/* The remaining positionals are the command's arguments. */
	memmove(cli.pos, cli.pos + 1, sizeof(cli.pos[0]) * (MAX_POS - 1));
	cli.npos--;
	if ((cli.overwrite || cli.context) && strcmp(cmd, "store") != 0)
		die_usage("--overwrite and --context apply to store only");
	if (cli.if_version && strcmp(cmd, "store") != 0 &&
	    strcmp(cmd, "rm") != 0)
		die_usage("--if-version applies to store and rm only");

	if (strcmp(cmd, "daemon") == 0) {
		status = cmd_daemon(&cli);
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
	json_decref(cli.context);
	if (fflush(stdout) != 0 && status == EXIT_OK)
		status = EXIT_USAGE;
	return status;
}
