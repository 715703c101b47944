/*
 * Unit tests of daemon/service/config.c: the file format (every key, every kind
 * of error with its line), loading, precedence and change descriptions.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "run_suite.h"

/* Parse text (strlen) into a fresh config; returns config_parse's value. */
static int parse(struct config *c, const char *text, struct config_error *e)
{
	config_init(c);
	return config_parse(c, text, strlen(text), e);
}

/* text must be refused at line with a message containing want. */
static void refused(const char *text, unsigned line, const char *want)
{
	struct config c;
	struct config_error e;

	ck_assert_msg(parse(&c, text, &e) == -EINVAL, "accepted: %s", text);
	ck_assert_msg(e.line == line, "line %u, want %u (%s) for %s", e.line,
		      line, e.msg, text);
	ck_assert_msg(strstr(e.msg, want), "\"%s\" lacks \"%s\"", e.msg, want);
}

START_TEST(defaults)
{
	struct config c;

	config_init(&c);
	ck_assert_uint_eq(c.set, 0);
	ck_assert_uint_eq(c.num[CONFIG_MAX_X], 1000);
	ck_assert_uint_eq(c.num[CONFIG_MAX_LINE], 1 << 20);
	ck_assert_uint_eq(c.num[CONFIG_MAX_BATCH], 1000);
	ck_assert_uint_eq(c.num[CONFIG_MAX_CONNECTIONS], 256);
	ck_assert_uint_eq(c.num[CONFIG_OUTPUT_BACKLOG], 4 << 20);
	ck_assert_uint_eq(c.num[CONFIG_LINE_DEADLINE_MS], 30000);
	ck_assert_uint_eq(c.num[CONFIG_COMMIT_DELAY_MS], 1000);
	ck_assert_uint_eq(c.num[CONFIG_COMMIT_MAX_BATCH], 512);
	ck_assert_uint_eq(c.num[CONFIG_IDLE_EXIT_S], 900);
	ck_assert_uint_eq(c.num[CONFIG_LOG_LEVEL], LOGL_INFO);
	ck_assert_str_eq(c.commit_name, "");
	ck_assert_str_eq(c.commit_email, "");
	ck_assert_uint_eq(c.num[CONFIG_EMBEDDING_DIM], 1536);
	ck_assert_str_eq(c.trace_file, "");
}
END_TEST

/* trace_file: any non-empty path (spaces kept inside), merged and
 * compared like the other keys. */
START_TEST(trace_file_key)
{
	struct config c, d;
	struct config_error e;
	char v[64];

	ck_assert_int_eq(parse(&c, "trace_file =  /x/y z.json  \n", &e), 0);
	ck_assert_str_eq(c.trace_file, "/x/y z.json");
	config_format(&c, CONFIG_TRACE_FILE, v, sizeof(v));
	ck_assert_str_eq(v, "/x/y z.json");
	refused("trace_file =\n", 1, "trace_file has an empty value");
	config_init(&d);
	ck_assert(!config_same(&c, &d, CONFIG_TRACE_FILE));
	config_merge(&d, &c);
	ck_assert(config_same(&c, &d, CONFIG_TRACE_FILE));
	ck_assert_str_eq(d.trace_file, "/x/y z.json");
}
END_TEST

START_TEST(every_key)
{
	static const char text[] = "max_x = 42\n"
				   "max_line = 2048\n"
				   "max_batch = 7\n"
				   "max_connections = 9\n"
				   "output_backlog = 8192\n"
				   "line_deadline_ms = 150\n"
				   "commit_delay_ms = 0\n"
				   "commit_max_batch = 3\n"
				   "idle_exit_s = 0\n"
				   "log_level = debug\n"
				   "commit_name = Ada Lovelace\n"
				   "commit_email = ada@example.com\n"
				   "register_merge_driver = false\n"
				   "embedding_dim = 768\n"
				   "trace_file = /tmp/a b/spans.jsonl\n"
				   "experience_shard_bytes = 4096\n";
	struct config c;
	struct config_error e;

	ck_assert_int_eq(parse(&c, text, &e), 0);
	ck_assert_uint_eq(c.num[CONFIG_REGISTER_MERGE_DRIVER], 0);
	ck_assert_uint_eq(c.set, (1u << CONFIG_NKEYS) - 1);
	ck_assert_uint_eq(c.num[CONFIG_EMBEDDING_DIM], 768);
	ck_assert_uint_eq(c.num[CONFIG_EXPERIENCE_SHARD_BYTES], 4096);
	ck_assert_str_eq(c.trace_file, "/tmp/a b/spans.jsonl");
	ck_assert_uint_eq(c.num[CONFIG_MAX_X], 42);
	ck_assert_uint_eq(c.num[CONFIG_MAX_LINE], 2048);
	ck_assert_uint_eq(c.num[CONFIG_MAX_BATCH], 7);
	ck_assert_uint_eq(c.num[CONFIG_MAX_CONNECTIONS], 9);
	ck_assert_uint_eq(c.num[CONFIG_OUTPUT_BACKLOG], 8192);
	ck_assert_uint_eq(c.num[CONFIG_LINE_DEADLINE_MS], 150);
	ck_assert_uint_eq(c.num[CONFIG_COMMIT_DELAY_MS], 0);
	ck_assert_uint_eq(c.num[CONFIG_COMMIT_MAX_BATCH], 3);
	ck_assert_uint_eq(c.num[CONFIG_IDLE_EXIT_S], 0);
	ck_assert_uint_eq(c.num[CONFIG_LOG_LEVEL], LOGL_DEBUG);
	ck_assert_str_eq(c.commit_name, "Ada Lovelace");
	ck_assert_str_eq(c.commit_email, "ada@example.com");
}
END_TEST

/* Each numeric key at both ends of its range, and one past each. */
START_TEST(numeric_ranges)
{
	static const struct {
		const char *key;
		const char *min, *max, *below, *above;
	} t[] = {
		{"max_x", "1", "1000000", "0", "1000001"},
		{"max_line", "1024", "1073741824", "1023", "1073741825"},
		{"max_batch", "1", "100000", "0", "100001"},
		{"max_connections", "1", "65536", "0", "65537"},
		{"output_backlog", "4096", "1073741824", "4095", "1073741825"},
		{"line_deadline_ms", "100", "3600000", "99", "3600001"},
		{"commit_delay_ms", "0", "3600000", NULL, "3600001"},
		{"commit_max_batch", "1", "1000000", "0", "1000001"},
		{"idle_exit_s", "0", "31536000", NULL, "31536001"},
		{"embedding_dim", "1", "16384", "0", "16385"},
	};
	char text[256], range[64];
	struct config c;
	struct config_error e;
	int k;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		k = config_key_find(t[i].key, strlen(t[i].key));
		ck_assert_int_ge(k, 0);
		snprintf(text, sizeof(text), "%s = %s\n", t[i].key, t[i].min);
		ck_assert_int_eq(parse(&c, text, &e), 0);
		ck_assert_uint_eq(c.num[k], strtoull(t[i].min, NULL, 10));
		snprintf(text, sizeof(text), "# x\n%s=%s", t[i].key, t[i].max);
		ck_assert_int_eq(parse(&c, text, &e), 0);
		ck_assert_uint_eq(c.num[k], strtoull(t[i].max, NULL, 10));
		snprintf(range, sizeof(range),
			 "%s must be an integer in %s..%s", t[i].key, t[i].min,
			 t[i].max);
		snprintf(text, sizeof(text), "\n\n%s = %s\n", t[i].key,
			 t[i].above);
		refused(text, 3, range);
		if (t[i].below) {
			snprintf(text, sizeof(text), "%s = %s\n", t[i].key,
				 t[i].below);
			refused(text, 1, range);
		}
	}
}
END_TEST

START_TEST(bad_numbers)
{
	static const char *const bad[] = {
		"-1",	"+5",	 "5x",
		"0x10", "1e3",	 "5 5",
		"abc",	"\"5\"", "99999999999999999999999999",
		"5.0",
	};
	char text[128];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "max_batch = %s\n", bad[i]);
		refused(text, 1, "max_batch must be an integer in 1..100000");
	}
}
END_TEST

START_TEST(log_levels)
{
	static const struct {
		const char *name;
		int level;
	} t[] = {
		{"err", LOGL_ERR},	 {"warning", LOGL_WARNING},
		{"notice", LOGL_NOTICE}, {"info", LOGL_INFO},
		{"debug", LOGL_DEBUG},
	};
	char text[64], back[32];
	struct config c;
	struct config_error e;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(text, sizeof(text), "log_level=%s", t[i].name);
		ck_assert_int_eq(parse(&c, text, &e), 0);
		ck_assert_uint_eq(c.num[CONFIG_LOG_LEVEL], t[i].level);
		config_format(&c, CONFIG_LOG_LEVEL, back, sizeof(back));
		ck_assert_str_eq(back, t[i].name);
	}
	refused("log_level = verbose\n", 1,
		"log_level must be one of err, warning, notice, info, debug");
	refused("log_level = DEBUG\n", 1, "log_level must be one of");
	refused("log_level = error\n", 1, "log_level must be one of");
}
END_TEST

START_TEST(booleans)
{
	char back[32];
	struct config c;
	struct config_error e;

	config_init(&c);
	ck_assert_uint_eq(c.num[CONFIG_REGISTER_MERGE_DRIVER], 1);
	ck_assert_int_eq(parse(&c, "register_merge_driver = false", &e), 0);
	ck_assert_uint_eq(c.num[CONFIG_REGISTER_MERGE_DRIVER], 0);
	config_format(&c, CONFIG_REGISTER_MERGE_DRIVER, back, sizeof(back));
	ck_assert_str_eq(back, "false");
	ck_assert_int_eq(parse(&c, "register_merge_driver = true", &e), 0);
	ck_assert_uint_eq(c.num[CONFIG_REGISTER_MERGE_DRIVER], 1);
	config_format(&c, CONFIG_REGISTER_MERGE_DRIVER, back, sizeof(back));
	ck_assert_str_eq(back, "true");
	refused("register_merge_driver = yes\n", 1,
		"register_merge_driver must be true or false");
	refused("register_merge_driver = 0\n", 1,
		"register_merge_driver must be true or false");
}
END_TEST

START_TEST(comments_blanks_whitespace)
{
	static const char text[] = "# vmemd configuration\n"
				   "\n"
				   "   \t\n"
				   "   # an indented comment = with equals\n"
				   "\t max_x\t=\t 42 \t\n"
				   "commit_name =  Una   User  \n"
				   "commit_email=una@example.com\n"
				   "#max_batch = 0\n";
	struct config c;
	struct config_error e;

	ck_assert_int_eq(parse(&c, text, &e), 0);
	ck_assert_uint_eq(c.num[CONFIG_MAX_X], 42);
	/* inner blanks are kept, outer ones trimmed */
	ck_assert_str_eq(c.commit_name, "Una   User");
	ck_assert_str_eq(c.commit_email, "una@example.com");
	ck_assert_uint_eq(c.num[CONFIG_MAX_BATCH], 1000);
	ck_assert_uint_eq(c.set, (1u << CONFIG_MAX_X) |
					 (1u << CONFIG_COMMIT_NAME) |
					 (1u << CONFIG_COMMIT_EMAIL));
	/* an empty file, and one of comments only */
	ck_assert_int_eq(parse(&c, "", &e), 0);
	ck_assert_uint_eq(c.set, 0);
	ck_assert_int_eq(parse(&c, "#\n#\n", &e), 0);
	ck_assert_uint_eq(c.set, 0);
	/* '#' after a value is part of the value */
	refused("max_x = 5 # five\n", 1, "max_x must be an integer");
}
END_TEST

START_TEST(repeated_key)
{
	refused("max_x = 5\nmax_batch = 3\n max_x = 5\n", 3,
		"max_x repeated (first set on line 1)");
	refused("log_level = info\n\nlog_level = debug", 3,
		"log_level repeated");
}
END_TEST

START_TEST(structural_errors)
{
	refused("max_x = 5\nmax_batch 3\n", 2, "no '='");
	refused("max_x\n", 1, "no '='");
	refused("= 5\n", 1, "no key before '='");
	refused("  =\n", 1, "no key before '='");
	refused("max_x = 5\nmax_y = 7\n", 2, "unknown key \"max_y\"");
	refused("MAX_X = 7\n", 1, "unknown key \"MAX_X\"");
	refused("max x = 7\n", 1, "unknown key \"max x\"");
	refused("[vmemd]\n", 1, "no '='");
	refused("max_batch =\n", 1, "max_batch has an empty value");
	refused("max_x = 5\ncommit_delay_ms = \t \n", 2,
		"commit_delay_ms has an empty value");
	refused("commit_name=\n", 1, "commit_name has an empty value");
}
END_TEST

START_TEST(crlf_line_endings)
{
	static const char text[] = "# comment\r\n"
				   "max_x = 77\r\n"
				   "\r\n"
				   "log_level = notice\r\n"
				   "commit_name = Una User\r\n"
				   "commit_email = una@example.com\r\n";
	struct config c;
	struct config_error e;

	ck_assert_int_eq(parse(&c, text, &e), 0);
	ck_assert_uint_eq(c.num[CONFIG_MAX_X], 77);
	ck_assert_uint_eq(c.num[CONFIG_LOG_LEVEL], LOGL_NOTICE);
	ck_assert_str_eq(c.commit_name, "Una User");
	ck_assert_str_eq(c.commit_email, "una@example.com");
	/* a CR anywhere else is a control character */
	refused("commit_name = Una\rUser\ncommit_email = u@x\n", 1,
		"commit_name must be a name");
}
END_TEST

START_TEST(not_utf8_or_nul)
{
	static const char nul[] = "max_x = 5\nmax_batch = 3\0\nmax_line=2048\n";
	struct config c;
	struct config_error e;

	refused("max_x = 5\n# caf\xe9\n", 2, "not valid UTF-8");
	refused("commit_name = \xc3\x28\n", 1, "not valid UTF-8");
	refused("max_x = 5\n\n\xff\xfe\n", 3, "not valid UTF-8");
	config_init(&c);
	ck_assert_int_eq(config_parse(&c, nul, sizeof(nul) - 1, &e), -EINVAL);
	ck_assert_uint_eq(e.line, 2);
	ck_assert_ptr_nonnull(strstr(e.msg, "NUL byte"));
	/* a NUL in a comment counts too */
	config_init(&c);
	ck_assert_int_eq(config_parse(&c, "#a\0b\n", 5, &e), -EINVAL);
	ck_assert_uint_eq(e.line, 1);
	/* valid UTF-8 beyond ASCII is fine */
	ck_assert_int_eq(parse(&c,
			       "commit_name = Zoë Ñandú 日本\n"
			       "commit_email = zoe@exämple.org\n",
			       &e),
			 0);
	ck_assert_str_eq(c.commit_name, "Zoë Ñandú 日本");
}
END_TEST

START_TEST(commit_identity)
{
	char name[256], text[600];
	struct config c;
	struct config_error e;

	refused("commit_name = Una\n", 1,
		"commit_name is set without commit_email");
	refused("max_x = 3\ncommit_email = u@example.com\n", 2,
		"commit_email is set without commit_name");
	refused("commit_name = Una\ncommit_email = una.example.com\n", 2,
		"commit_email must be an e-mail address");
	refused("commit_name = Una <u@x>\ncommit_email = u@x\n", 1,
		"commit_name must be a name");
	refused("commit_name = Una\ncommit_email = <u@x>\n", 2,
		"commit_email must be");
	refused("commit_name = Una\tUser\ncommit_email = u@x\n", 1,
		"commit_name must be a name");
	refused("commit_name = Una\x7fUser\ncommit_email = u@x\n", 1,
		"commit_name must be a name");
	refused("commit_name = Una\xc2\x85User\ncommit_email = u@x\n", 1,
		"commit_name must be a name");
	/* 200 bytes are fine, 201 are not */
	memset(name, 'n', 200);
	name[200] = '\0';
	snprintf(text, sizeof(text), "commit_name = %s\ncommit_email = u@x\n",
		 name);
	ck_assert_int_eq(parse(&c, text, &e), 0);
	ck_assert_uint_eq(strlen(c.commit_name), 200);
	snprintf(text, sizeof(text), "commit_name = %sn\ncommit_email = u@x\n",
		 name);
	refused(text, 1, "commit_name must be a name of 1..200 bytes");
}
END_TEST

START_TEST(set_for_the_command_line)
{
	struct config c;
	char msg[160];

	config_init(&c);
	ck_assert_int_eq(
		config_set(&c, CONFIG_MAX_LINE, "4096", msg, sizeof(msg)), 0);
	ck_assert_uint_eq(c.num[CONFIG_MAX_LINE], 4096);
	ck_assert_uint_eq(c.set, 1u << CONFIG_MAX_LINE);
	ck_assert_int_eq(config_set(&c, CONFIG_MAX_X, "0", msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_str_eq(msg, "must be an integer in 1..1000000");
	ck_assert_uint_eq(c.set, 1u << CONFIG_MAX_LINE);
	ck_assert_uint_eq(c.num[CONFIG_MAX_X], 1000);
	ck_assert_int_eq(
		config_set(&c, CONFIG_LOG_LEVEL, "warning", msg, sizeof(msg)),
		0);
	ck_assert_uint_eq(c.num[CONFIG_LOG_LEVEL], LOGL_WARNING);
	ck_assert_int_eq(config_set(&c, CONFIG_NKEYS, "1", msg, sizeof(msg)),
			 -EINVAL);
}
END_TEST

START_TEST(keys_by_name)
{
	for (int k = 0; k < CONFIG_NKEYS; k++) {
		const char *name = config_key_name((enum config_key)k);

		ck_assert_int_eq(config_key_find(name, strlen(name)), k);
	}
	ck_assert_int_eq(config_key_find("max_", 4), -ENOENT);
	ck_assert_int_eq(config_key_find("max_xx", 6), -ENOENT);
	ck_assert_int_eq(config_key_find("max_x = 1", 5), CONFIG_MAX_X);
}
END_TEST

START_TEST(merge_precedence)
{
	struct config file, cli, out;
	struct config_error e;
	char msg[160];

	ck_assert_int_eq(parse(&file,
			       "max_x = 10\ncommit_delay_ms = 200\n"
			       "log_level = debug\n",
			       &e),
			 0);
	config_init(&cli);
	ck_assert_int_eq(config_set(&cli, CONFIG_COMMIT_DELAY_MS, "50", msg,
				    sizeof(msg)),
			 0);
	config_init(&out);
	config_merge(&out, &file);
	config_merge(&out, &cli);
	ck_assert_uint_eq(out.num[CONFIG_MAX_X], 10);
	ck_assert_uint_eq(out.num[CONFIG_COMMIT_DELAY_MS], 50);
	ck_assert_uint_eq(out.num[CONFIG_LOG_LEVEL], LOGL_DEBUG);
	ck_assert_uint_eq(out.num[CONFIG_MAX_BATCH], 1000);
	ck_assert_uint_eq(out.set, (1u << CONFIG_MAX_X) |
					   (1u << CONFIG_COMMIT_DELAY_MS) |
					   (1u << CONFIG_LOG_LEVEL));
	/* strings merge too */
	ck_assert_int_eq(parse(&file, "commit_name=A\ncommit_email=a@b\n", &e),
			 0);
	config_merge(&out, &file);
	ck_assert_str_eq(out.commit_name, "A");
	ck_assert_str_eq(out.commit_email, "a@b");
}
END_TEST

START_TEST(describe_changes)
{
	struct config a, b;
	struct config_error e;
	char buf[256];

	config_init(&a);
	ck_assert_int_eq(
		parse(&b, "commit_delay_ms = 200\nlog_level = debug\n", &e), 0);
	ck_assert_uint_eq(
		config_describe_changes(&a, &b, ~0u, buf, sizeof(buf)), 2);
	ck_assert_str_eq(
		buf, "commit_delay_ms 1000 -> 200, log_level info -> debug");
	ck_assert_uint_eq(
		config_describe_changes(&a, &a, ~0u, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "");
	/* the mask limits the keys compared */
	ck_assert_uint_eq(config_describe_changes(&a, &b,
						  1u << CONFIG_LOG_LEVEL, buf,
						  sizeof(buf)),
			  1);
	ck_assert_str_eq(buf, "log_level info -> debug");
	ck_assert_int_eq(parse(&b, "commit_name=A B\ncommit_email=a@b\n", &e),
			 0);
	ck_assert_uint_eq(
		config_describe_changes(&a, &b, ~0u, buf, sizeof(buf)), 2);
	ck_assert_str_eq(buf, "commit_name (unset) -> A B, "
			      "commit_email (unset) -> a@b");
	/* a small buffer is truncated, still terminated */
	ck_assert_uint_eq(config_describe_changes(&a, &b, ~0u, buf, 8), 2);
	ck_assert_uint_eq(strlen(buf), 7);
	ck_assert(config_same(&a, &b, CONFIG_MAX_X));
	ck_assert(!config_same(&a, &b, CONFIG_COMMIT_NAME));
}
END_TEST

START_TEST(default_path)
{
	char buf[64];

	ck_assert_int_eq(config_default_path(buf, sizeof(buf), "/x/cfg", "/h"),
			 0);
	ck_assert_str_eq(buf, "/x/cfg/vmem/config");
	ck_assert_int_eq(config_default_path(buf, sizeof(buf), "", "/h"), 0);
	ck_assert_str_eq(buf, "/h/.config/vmem/config");
	ck_assert_int_eq(config_default_path(buf, sizeof(buf), NULL, "/h"), 0);
	ck_assert_str_eq(buf, "/h/.config/vmem/config");
	ck_assert_int_eq(config_default_path(buf, sizeof(buf), NULL, ""),
			 -ENOENT);
	ck_assert_int_eq(config_default_path(buf, sizeof(buf), "", NULL),
			 -ENOENT);
	ck_assert_int_eq(config_default_path(buf, 10, "/x/cfg", "/h"),
			 -ENAMETOOLONG);
}
END_TEST

/* A temporary directory for the load tests. */
static char tmpdir[64];

static void tmp_setup(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/vmem-config-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void tmp_teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

static void write_file(const char *path, const char *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(load_files)
{
	char path[128];
	struct config c;
	struct config_error e;

	snprintf(path, sizeof(path), "%s/config", tmpdir);
	ck_assert_int_eq(config_load(&c, path, &e), -ENOENT);
	ck_assert_uint_eq(e.line, 0);
	ck_assert_ptr_nonnull(strstr(e.msg, "cannot open"));

	write_file(path, "max_x = 12\r\nmax_batch = 5", 25);
	ck_assert_int_eq(config_load(&c, path, &e), 0);
	ck_assert_uint_eq(c.num[CONFIG_MAX_X], 12);
	ck_assert_uint_eq(c.num[CONFIG_MAX_BATCH], 5);

	write_file(path, "max_x = 12\nmax_x = 13\n", 22);
	ck_assert_int_eq(config_load(&c, path, &e), -EINVAL);
	ck_assert_uint_eq(e.line, 2);

	write_file(path, "max_x = 1\0\n", 11);
	ck_assert_int_eq(config_load(&c, path, &e), -EINVAL);
	ck_assert_uint_eq(e.line, 1);

	/* a directory is not a configuration file */
	ck_assert_int_lt(config_load(&c, tmpdir, &e), 0);
	ck_assert_ptr_nonnull(strstr(e.msg, "not a regular file"));

	/* unreadable (unless we are root) */
	write_file(path, "max_x = 12\n", 11);
	ck_assert_int_eq(chmod(path, 0), 0);
	if (geteuid() != 0) {
		ck_assert_int_eq(config_load(&c, path, &e), -EACCES);
		ck_assert_ptr_nonnull(strstr(e.msg, "cannot open"));
	}
	ck_assert_int_eq(chmod(path, 0600), 0);
}
END_TEST

/* What is not a regular file is refused at once: a fifo nobody writes
 * (opening it for reading would wait for a writer), a device, a socket;
 * a symlink to a regular file is followed, one to a fifo refused. */
START_TEST(load_not_regular)
{
	char fifo[128], link[128], link2[128], path[128];
	struct config c;
	struct config_error e;

	snprintf(fifo, sizeof(fifo), "%s/fifo", tmpdir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	ck_assert_int_eq(config_load(&c, fifo, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "not a regular file");
	ck_assert_int_eq(config_load(&c, "/dev/null", &e), -EINVAL);
	ck_assert_str_eq(e.msg, "not a regular file");
	ck_assert_int_eq(config_load(&c, tmpdir, &e), -EISDIR);

	snprintf(path, sizeof(path), "%s/real", tmpdir);
	write_file(path, "max_x = 9\n", 10);
	snprintf(link, sizeof(link), "%s/dotfile", tmpdir);
	ck_assert_int_eq(symlink(path, link), 0);
	ck_assert_int_eq(config_load(&c, link, &e), 0);
	ck_assert_uint_eq(c.num[CONFIG_MAX_X], 9);
	snprintf(link2, sizeof(link2), "%s/to-fifo", tmpdir);
	ck_assert_int_eq(symlink(fifo, link2), 0);
	ck_assert_int_eq(config_load(&c, link2, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "not a regular file");
	unlink(link2);
	unlink(link);
	unlink(path);
	unlink(fifo);
}
END_TEST

START_TEST(load_too_large)
{
	char path[128];
	struct config c;
	struct config_error e;
	size_t n = CONFIG_FILE_MAX + 1;
	char *big = malloc(n);

	ck_assert_ptr_nonnull(big);
	memset(big, '#', n);
	snprintf(path, sizeof(path), "%s/big", tmpdir);
	write_file(path, big, n);
	free(big);
	ck_assert_int_eq(config_load(&c, path, &e), -EFBIG);
	ck_assert_ptr_nonnull(strstr(e.msg, "larger than"));
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("parse");
	TCase *tl = tcase_create("load");

	tcase_add_test(tc, defaults);
	tcase_add_test(tc, every_key);
	tcase_add_test(tc, trace_file_key);
	tcase_add_test(tc, numeric_ranges);
	tcase_add_test(tc, bad_numbers);
	tcase_add_test(tc, log_levels);
	tcase_add_test(tc, booleans);
	tcase_add_test(tc, comments_blanks_whitespace);
	tcase_add_test(tc, repeated_key);
	tcase_add_test(tc, structural_errors);
	tcase_add_test(tc, crlf_line_endings);
	tcase_add_test(tc, not_utf8_or_nul);
	tcase_add_test(tc, commit_identity);
	tcase_add_test(tc, set_for_the_command_line);
	tcase_add_test(tc, keys_by_name);
	tcase_add_test(tc, merge_precedence);
	tcase_add_test(tc, describe_changes);
	tcase_add_test(tc, default_path);
	suite_add_tcase(s, tc);
	tcase_add_checked_fixture(tl, tmp_setup, tmp_teardown);
	tcase_add_test(tl, load_files);
	tcase_add_test(tl, load_too_large);
	tcase_add_test(tl, load_not_regular);
	suite_add_tcase(s, tl);
	return s;
}

int main(void)
{
	return run_suite(config_suite());
}
