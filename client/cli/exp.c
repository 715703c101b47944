/*
 * vmem exp: the experience commands (add, ls, similar, stats, get, rm)
 * on the public libvmem API. A readable table by default (a tag histogram
 * for stats), the daemon's JSON with --json. Arguments are checked before
 * connecting, as for every command: a usage error never starts a daemon.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ID_COLS	       36
#define EXP_AGENT_COLS 20
#define TAGS_COLS      24
#define TEXT_MIN_COLS  20
#define BAR_COLS       40
#define ARROW	       " \u2192 "

static const char *const subcommands[] = {"add",   "ls",  "similar",
					  "stats", "get", "rm"};

/* Which options a subcommand takes (besides the global ones). */
enum {
	O_TEXTS = 1 << 0, /* --context --action --outcome */
	O_TAG = 1 << 1,
	O_IMPORTANCE = 1 << 2,
	O_METADATA = 1 << 3,
	O_WINDOW = 1 << 4, /* --since --until */
	O_MIN = 1 << 5,
	O_LIMIT = 1 << 6,
};

static const unsigned takes[] = {
	O_TEXTS | O_TAG | O_IMPORTANCE | O_METADATA,
	O_TAG | O_WINDOW | O_MIN | O_LIMIT,
	O_MIN | O_LIMIT,
	0,
	0,
	0,
};

static void check_options(const struct cli *cli, size_t sub)
{
	unsigned t = takes[sub];

	if (cli->overwrite || cli->if_version || cli->context ||
	    cli->range[0] || cli->range[1] || cli->range[2] || cli->after ||
	    cli->all || cli->message)
		die_usage("exp takes none of --overwrite, --if-version, --x, "
			  "--y, --z, --after, --all, -m");
	if (!(t & O_TEXTS) && (cli->text[0] || cli->text[1] || cli->text[2]))
		die_usage("--context, --action and --outcome apply to exp add "
			  "only");
	if (!(t & O_TAG) && cli->ntags)
		die_usage("--tag applies to exp add and exp ls only");
	if (!(t & O_IMPORTANCE) && cli->importance)
		die_usage("--importance applies to exp add only");
	if (!(t & O_METADATA) && cli->metadata)
		die_usage("--metadata applies to exp add only");
	if (!(t & O_WINDOW) && (cli->since || cli->until))
		die_usage("--since and --until apply to exp ls only");
	if (!(t & O_MIN) && cli->min_importance)
		die_usage("--min-importance applies to exp ls and exp similar "
			  "only");
	if (!(t & O_LIMIT) && cli->limit)
		die_usage("--limit applies to exp ls and exp similar only");
}

/* An integer option in [lo, hi], or a usage error. */
static json_t *int_opt(const char *name, const char *v, int64_t lo, int64_t hi)
{
	int64_t n;

	if (!parse_i64(v, &n) || n < lo || n > hi)
		die_usage("%s takes an integer in %lld..%lld, not '%s'", name,
			  (long long)lo, (long long)hi, v);
	return json_integer(n);
}

/*
 * A time option: an RFC 3339 time as is, a date (its midnight UTC), or
 * an age (30s, 30m, 12h, 7d, 2w) counted back from now.
 */
static json_t *time_opt(const char *name, const char *v)
{
	static const struct {
		char unit;
		long long secs;
	} units[] = {
		{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}, {'w', 604800}};
	size_t len = strlen(v);
	char buf[64];
	int y, mo, d;

	if (len >= 2 && v[0] >= '0' && v[0] <= '9') {
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			char *end;
			long long n;
			time_t t;
			struct tm tm;

			if (v[len - 1] != units[i].unit)
				continue;
			n = strtoll(v, &end, 10);
			if (end != v + len - 1 || n < 0 ||
			    n > 100LL * 365 * 86400 / units[i].secs)
				break;
			t = time(NULL) - (time_t)(n * units[i].secs);
			gmtime_r(&t, &tm);
			strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
			return json_string(buf);
		}
	}
	if (len == 10 && sscanf(v, "%4d-%2d-%2d", &y, &mo, &d) == 3) {
		snprintf(buf, sizeof(buf), "%sT00:00:00Z", v);
		return json_string(buf);
	}
	if (len >= 19 && v[4] == '-' && (v[10] == 'T' || v[10] == ' '))
		return json_string(v); /* the daemon judges the rest */
	die_usage("%s takes an age (30m, 12h, 7d, 2w), a date (2025-01-06) or "
		  "an RFC 3339 time, not '%s'",
		  name, v);
}

static json_t *tags_json(const struct cli *cli)
{
	json_t *a = json_array();

	if (!a)
		die_oom();
	for (int i = 0; i < cli->ntags; i++)
		if (json_array_append_new(a, json_string(cli->tags[i])) < 0)
			die_usage("--tag '%s' is not valid UTF-8",
				  cli->tags[i]);
	return a;
}

/* The params of the subcommand, checked here (before connecting). */
static json_t *params_of(struct cli *cli, size_t sub)
{
	json_t *p = json_object();

	if (!p)
		die_oom();
	switch (sub) {
	case 0: { /* add */
		static const char *const names[] = {"context", "action",
						    "outcome"};

		if (cli->npos != 1)
			die_usage("exp add takes options only, not '%s'",
				  cli->pos[1]);
		for (int i = 0; i < 3; i++) {
			if (!cli->text[i] || !cli->text[i][0])
				die_usage("exp add needs --%s TEXT", names[i]);
			if (json_object_set_new(p, names[i],
						json_string(cli->text[i])) < 0)
				die_usage("--%s is not valid UTF-8", names[i]);
		}
		if (cli->ntags)
			set_or_die(p, "tags", tags_json(cli));
		if (cli->importance)
			set_or_die(p, "importance",
				   int_opt("--importance", cli->importance, 1,
					   10));
		if (cli->metadata) {
			json_t *m = json_loads(cli->metadata, 0, NULL);

			if (!json_is_object(m)) {
				json_decref(m); /* LeakSanitizer runs at exit */
				die_usage("--metadata takes a JSON object, not "
					  "'%s'",
					  cli->metadata);
			}
			set_or_die(p, "metadata", m);
		}
		set_or_die(p, "agent_id", json_string(cli->agent));
		break;
	}
	case 1: /* ls */
		if (cli->npos != 1)
			die_usage("exp ls takes options only, not '%s'",
				  cli->pos[1]);
		set_or_die(p, "agent_id", json_string(cli->agent));
		if (cli->ntags)
			set_or_die(p, "tags", tags_json(cli));
		if (cli->since)
			set_or_die(p, "since", time_opt("--since", cli->since));
		if (cli->until)
			set_or_die(p, "until", time_opt("--until", cli->until));
		break;
	case 2: { /* similar */
		size_t len = 0, o = 0;
		char *text;

		if (cli->npos < 2)
			die_usage("exp similar takes the situation: TEXT...");
		for (int i = 1; i < cli->npos; i++)
			len += strlen(cli->pos[i]) + 1;
		text = malloc(len);
		if (!text)
			die_oom();
		for (int i = 1; i < cli->npos; i++)
			o += (size_t)sprintf(text + o, "%s%s", i > 1 ? " " : "",
					     cli->pos[i]);
		if (json_object_set_new(p, "context", json_string(text)) < 0)
			die_usage("the text is not valid UTF-8");
		free(text);
		if (cli->agent_given)
			set_or_die(p, "agent_id", json_string(cli->agent));
		break;
	}
	case 3: /* stats */
		if (cli->npos != 1)
			die_usage("exp stats takes options only, not '%s'",
				  cli->pos[1]);
		if (cli->agent_given)
			set_or_die(p, "agent_id", json_string(cli->agent));
		break;
	default: /* get, rm */
		if (cli->npos != 2)
			die_usage("exp %s takes one experience ID",
				  subcommands[sub]);
		set_or_die(p, "id", json_string(cli->pos[1]));
		if (sub == 5)
			set_or_die(p, "agent_id", json_string(cli->agent));
		break;
	}
	if (cli->min_importance)
		set_or_die(p, "min_importance",
			   int_opt("--min-importance", cli->min_importance, 1,
				   10));
	if (cli->limit)
		set_or_die(p, "limit",
			   int_opt("--limit", cli->limit, 1, 10000));
	return p;
}

/* "a, b" of a record's tags into buf. */
static void tags_text(json_t *rec, char *buf, size_t n)
{
	json_t *tags = json_object_get(rec, "tags"), *t;
	size_t i, o = 0;

	buf[0] = '\0';
	json_array_foreach(tags, i, t)
	{
		int w = snprintf(buf + o, n - o, "%s%s", i ? "," : "",
				 json_string_value(t));

		if (w < 0 || (size_t)w >= n - o)
			break;
		o += (size_t)w;
	}
}

/* One line per experience: id, age, importance, agent, tags (and score),
 * then context -> action -> outcome cut to the terminal. */
static void print_records(json_t *arr, bool scored)
{
	time_t now = time(NULL);
	int cols = term_cols(), rest;
	size_t i;
	json_t *r;

	if (json_array_size(arr) == 0) {
		puts("no experiences");
		return;
	}
	put_cell("ID", ID_COLS, false);
	put_cell("AGE", 4, true);
	put_cell("IMP", 3, true);
	if (scored)
		put_cell("SCORE", 6, true);
	put_cell("AGENT", EXP_AGENT_COLS, false);
	put_cell("TAGS", TAGS_COLS, false);
	puts("CONTEXT" ARROW "ACTION" ARROW "OUTCOME");
	rest = cols - (ID_COLS + 6 + 5 + (scored ? 8 : 0) + EXP_AGENT_COLS + 2 +
		       TAGS_COLS + 2);
	if (rest < TEXT_MIN_COLS)
		rest = TEXT_MIN_COLS;
	json_array_foreach(arr, i, r)
	{
		char age[16], imp[8], score[16], tags[256], *line;
		size_t len;

		format_age(str_member(r, "timestamp"), now, age, sizeof(age));
		snprintf(imp, sizeof(imp), "%lld",
			 (long long)int_member(r, "importance"));
		snprintf(score, sizeof(score), "%.2f",
			 json_number_value(json_object_get(r, "score")));
		tags_text(r, tags, sizeof(tags));
		put_cell(str_member(r, "id"), ID_COLS, false);
		put_cell(age, 4, true);
		put_cell(imp, 3, true);
		if (scored)
			put_cell(score, 6, true);
		put_cell(str_member(r, "agent_id"), EXP_AGENT_COLS, false);
		put_cell(tags, TAGS_COLS, false);
		len = strlen(str_member(r, "context")) +
		      strlen(str_member(r, "action")) +
		      strlen(str_member(r, "outcome")) + 2 * strlen(ARROW) + 1;
		line = malloc(len);
		if (!line)
			die_oom();
		snprintf(line, len, "%s" ARROW "%s" ARROW "%s",
			 str_member(r, "context"), str_member(r, "action"),
			 str_member(r, "outcome"));
		put_text(line, strlen(line), rest, NULL, NULL);
		free(line);
		putchar('\n');
	}
}

/* One experience whole. */
static void print_record(json_t *r)
{
	char tags[1024], *meta;
	static const char *const fields[] = {"context", "action", "outcome"};

	tags_text(r, tags, sizeof(tags));
	printf("id          %s\n", str_member(r, "id"));
	printf("agent       %s\n", str_member(r, "agent_id"));
	printf("timestamp   %s\n", str_member(r, "timestamp"));
	printf("importance  %lld\n", (long long)int_member(r, "importance"));
	printf("tags        %s\n", tags[0] ? tags : "-");
	meta = json_dumps(json_object_get(r, "metadata"), JSON_COMPACT);
	printf("metadata    %s\n", meta ? meta : "?");
	free(meta);
	for (size_t i = 0; i < 3; i++)
		printf("\n%s:\n%s\n", fields[i], str_member(r, fields[i]));
}

/* "name  count  #####" lines, bars scaled to the largest count. */
static void histogram(json_t *counts, const char *what)
{
	const char *key;
	json_t *v;
	json_int_t max = 1;
	int width = 0;

	json_object_foreach(counts, key, v)
	{
		int w = text_cols(key, strlen(key));

		if (json_integer_value(v) > max)
			max = json_integer_value(v);
		if (w > width)
			width = w;
	}
	if (width > 32)
		width = 32;
	if (json_object_size(counts) == 0) {
		printf("  (no %s)\n", what);
		return;
	}
	json_object_foreach(counts, key, v)
	{
		json_int_t n = json_integer_value(v);
		int bar = (int)((n * BAR_COLS + max - 1) / max);

		fputs("  ", stdout);
		put_cell(key, width, false);
		printf("%6lld  ", (long long)n);
		for (int i = 0; i < bar; i++)
			fputs("\u2588", stdout);
		putchar('\n');
	}
}

static void print_stats(json_t *s)
{
	json_t *agents = json_object_get(s, "agents");
	time_t now = time(NULL);
	char age[16];

	if (json_is_string(json_object_get(s, "agent_id")))
		printf("agent           %s\n", str_member(s, "agent_id"));
	printf("experiences     %lld\n",
	       (long long)int_member(s, "total_count"));
	printf("importance      %.2f on average\n",
	       json_number_value(json_object_get(s, "avg_importance")));
	if (json_is_string(json_object_get(s, "oldest"))) {
		format_age(str_member(s, "oldest"), now, age, sizeof(age));
		printf("oldest          %s (%s ago)\n", str_member(s, "oldest"),
		       age);
		format_age(str_member(s, "newest"), now, age, sizeof(age));
		printf("newest          %s (%s ago)\n", str_member(s, "newest"),
		       age);
	}
	printf("tags            %lld distinct\n",
	       (long long)int_member(s, "tags_total"));
	histogram(json_object_get(s, "tag_distribution"), "tags");
	if (json_is_object(agents)) {
		printf("agents          %lld\n",
		       (long long)int_member(s, "agents_total"));
		histogram(agents, "agents");
	}
}

static const char *const methods[] = {
	"experience.store", "experience.retrieve", "experience.find_similar",
	"experience.stats", "experience.get",	   "experience.delete"};

int cmd_exp(struct cli *cli)
{
	vmem_client *c = NULL;
	json_t *params, *r;
	size_t sub;
	bool json;
	int status;

	if (cli->npos < 1)
		die_usage(
			"exp needs a subcommand: add, ls, similar, stats, get "
			"or rm");
	for (sub = 0; sub < sizeof(subcommands) / sizeof(subcommands[0]); sub++)
		if (strcmp(cli->pos[0], subcommands[sub]) == 0)
			break;
	if (sub == sizeof(subcommands) / sizeof(subcommands[0]))
		die_usage("no exp subcommand '%s' (add, ls, similar, stats, "
			  "get, rm)",
			  cli->pos[0]);
	check_options(cli, sub);
	params = params_of(cli, sub);
	status = open_client(cli, -1, cli->agent, &c);
	if (status != EXIT_OK) {
		json_decref(params);
		return status;
	}
	/* get and rm say "no experience" (exit 1) with --json too. */
	json = cli->json;
	cli->json = json && sub < 4;
	r = call_json(cli, c, methods[sub], params, &status);
	cli->json = json;
	vmem_client_free(c);
	if (!r)
		return status;
	if (json) {
		char *text = json_dumps(r, JSON_COMPACT | JSON_ENCODE_ANY);

		if (!text)
			die_oom();
		puts(text);
		free(text);
	}
	switch (sub) {
	case 0:
		printf("stored %s\n", str_member(r, "id"));
		break;
	case 1:
	case 2:
		print_records(r, sub == 2);
		break;
	case 3:
		print_stats(r);
		break;
	case 4:
		if (json_is_null(r)) {
			fprintf(stderr, "vmem: no experience %s\n",
				cli->pos[1]);
			status = EXIT_DOMAIN;
		} else if (!json) {
			print_record(r);
		}
		break;
	default:
		if (json_is_true(r)) {
			if (!json)
				printf("deleted %s\n", cli->pos[1]);
		} else {
			fprintf(stderr, "vmem: no experience %s\n",
				cli->pos[1]);
			status = EXIT_DOMAIN;
		}
	}
	json_decref(r);
	return status;
}
