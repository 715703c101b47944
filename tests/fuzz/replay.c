/*
 * Replay driver: the main() that stands in for libFuzzer in the normal
 * build, so a harness's corpus (seeds and the inputs of past crashes) is a
 * regression test of `meson test`. Every argument is a file or a
 * directory whose regular files are fed, in name order, to
 * LLVMFuzzerTestOneInput. Prints TAP: one "ok" per input; a broken
 * invariant aborts the process, which fails the test. An empty corpus is
 * a failure too, so a wrong path cannot pass silently.
 */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

static int count;

/* Read a whole file into a malloc'd buffer. 0 or negative errno. */
static int read_file(const char *path, uint8_t **out, size_t *len)
{
	FILE *f = NULL;
	uint8_t *buf = NULL, *nbuf;
	size_t cap = 0, n = 0, got;
	int ret = 0;

	f = fopen(path, "rb");
	if (!f) {
		ret = -errno;
		goto out;
	}
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4096;
			nbuf = realloc(buf, cap);
			if (!nbuf) {
				ret = -ENOMEM;
				goto out;
			}
			buf = nbuf;
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		ret = -EIO;
		goto out;
	}
	*out = buf;
	*len = n;
	buf = NULL;
out:
	free(buf);
	if (f)
		fclose(f);
	return ret;
}

static int run_file(const char *path)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int ret;

	ret = read_file(path, &buf, &len);
	if (ret < 0) {
		printf("not ok %d - %s: %s\n", ++count, path, strerror(-ret));
		return ret;
	}
	/* Announce first: if the input crashes, the log names it. */
	fprintf(stderr, "replaying %s (%zu bytes)\n", path, len);
	LLVMFuzzerTestOneInput(buf, len);
	printf("ok %d - %s\n", ++count, path);
	fflush(stdout);
	free(buf);
	return 0;
}

static int run_dir(const char *dir)
{
	struct dirent **names = NULL;
	struct stat st;
	char path[4096];
	int n, i, ret = 0;

	n = scandir(dir, &names, NULL, alphasort);
	if (n < 0) {
		printf("not ok %d - %s: %s\n", ++count, dir, strerror(errno));
		return -errno;
	}
	for (i = 0; i < n; i++) {
		if (names[i]->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (run_file(path) < 0)
			ret = -1;
	}
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return ret;
}

int main(int argc, char **argv)
{
	struct stat st;
	int i, failed = 0;

	for (i = 1; i < argc; i++) {
		if (stat(argv[i], &st) < 0) {
			printf("not ok %d - %s: %s\n", ++count, argv[i],
			       strerror(errno));
			failed = 1;
		} else if (S_ISDIR(st.st_mode)) {
			failed |= run_dir(argv[i]) < 0;
		} else {
			failed |= run_file(argv[i]) < 0;
		}
	}
	if (count == 0) {
		printf("not ok 1 - no inputs to replay\n");
		count = 1;
		failed = 1;
	}
	printf("1..%d\n# replayed %d inputs\n", count, count);
	return failed;
}
