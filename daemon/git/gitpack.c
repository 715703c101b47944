/*
 * A pack written as a stream into libgit2's indexer (see gitpack.h): the
 * header "PACK", version 2 and the object count, each object as its type
 * and size header followed by its zlib stream, then the SHA-1 of all of
 * it. The indexer hashes each object again, writes pack-<id>.pack and
 * .idx into the pack directory and renames them into place.
 */
#include "gitpack.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "errmsg.h"

#define CHUNK (1 << 20) /* bytes handed to the indexer at a time */

struct gitpack {
	git_indexer *ix;
	git_indexer_progress stats;
	EVP_MD_CTX *sha;
	unsigned char *buf;
	size_t n;
	size_t left;	  /* objects still to add */
	unsigned char *z; /* deflate output (grown as needed) */
	size_t zcap;
};

static int fail(const char *what, char *errmsg, size_t errn)
{
	const git_error *e = git_error_last();

	errmsg_set(errmsg, errn, "%s: %s", what,
		   e && e->message ? e->message : "libgit2 error");
	return -EIO;
}

static int flush(struct gitpack *p, char *errmsg, size_t errn)
{
	if (!p->n)
		return 0;
	if (EVP_DigestUpdate(p->sha, p->buf, p->n) != 1) {
		errmsg_set(errmsg, errn, "hashing the pack");
		return -EIO;
	}
	if (git_indexer_append(p->ix, p->buf, p->n, &p->stats) < 0)
		return fail("writing the pack", errmsg, errn);
	p->n = 0;
	return 0;
}

static int put(struct gitpack *p, const void *data, size_t len, char *errmsg,
	       size_t errn)
{
	const unsigned char *d = data;

	while (len) {
		size_t k = CHUNK - p->n < len ? CHUNK - p->n : len;
		int rc;

		memcpy(p->buf + p->n, d, k);
		p->n += k;
		d += k;
		len -= k;
		if (p->n == CHUNK && (rc = flush(p, errmsg, errn)) < 0)
			return rc;
	}
	return 0;
}

int gitpack_begin(struct gitpack **out, git_odb *odb, const char *packdir,
		  size_t count, char *errmsg, size_t errn)
{
	git_indexer_options opts;
	struct gitpack *p = calloc(1, sizeof(*p));
	unsigned char hdr[12] = {'P', 'A', 'C', 'K', 0, 0, 0, 2};

	*out = NULL;
	if (!p || count > UINT32_MAX)
		goto oom;
	p->buf = malloc(CHUNK);
	p->sha = EVP_MD_CTX_new();
	if (!p->buf || !p->sha ||
	    EVP_DigestInit_ex(p->sha, EVP_sha1(), NULL) != 1)
		goto oom;
	git_indexer_options_init(&opts, GIT_INDEXER_OPTIONS_VERSION);
	if (git_indexer_new(&p->ix, packdir, 0, odb, &opts) < 0) {
		int rc = fail("starting a pack", errmsg, errn);

		gitpack_free(p);
		return rc;
	}
	p->left = count;
	hdr[8] = (unsigned char)(count >> 24);
	hdr[9] = (unsigned char)(count >> 16);
	hdr[10] = (unsigned char)(count >> 8);
	hdr[11] = (unsigned char)count;
	memcpy(p->buf, hdr, sizeof(hdr));
	p->n = sizeof(hdr);
	*out = p;
	return 0;
oom:
	gitpack_free(p);
	errmsg_set(errmsg, errn, "out of memory");
	return -ENOMEM;
}

int gitpack_add(struct gitpack *p, git_object_t type, const void *data,
		size_t len, char *errmsg, size_t errn)
{
	unsigned char hdr[16];
	size_t h = 0, size = len;
	uLongf zlen;
	int rc;

	if (!p->left) {
		errmsg_set(errmsg, errn, "more objects than the pack holds");
		return -EINVAL;
	}
	/* type and size: 3 bits of type, the size 4 + 7k bits */
	hdr[h] = (unsigned char)((type & 7) << 4 | (size & 15));
	size >>= 4;
	while (size) {
		hdr[h++] |= 0x80;
		hdr[h] = (unsigned char)(size & 0x7f);
		size >>= 7;
	}
	h++;
	zlen = compressBound((uLong)len);
	if (zlen > p->zcap) {
		unsigned char *z = realloc(p->z, zlen);

		if (!z) {
			errmsg_set(errmsg, errn, "out of memory");
			return -ENOMEM;
		}
		p->z = z;
		p->zcap = zlen;
	}
	if (compress2(p->z, &zlen, data, (uLong)len, Z_BEST_SPEED) != Z_OK) {
		errmsg_set(errmsg, errn, "compressing an object");
		return -EIO;
	}
	rc = put(p, hdr, h, errmsg, errn);
	if (rc == 0)
		rc = put(p, p->z, zlen, errmsg, errn);
	if (rc == 0)
		p->left--;
	return rc;
}

int gitpack_commit(struct gitpack *p, char *errmsg, size_t errn)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int rc;

	if (p->left) {
		errmsg_set(errmsg, errn, "the pack lacks %zu objects", p->left);
		return -EINVAL;
	}
	rc = flush(p, errmsg, errn);
	if (rc < 0)
		return rc;
	if (EVP_DigestFinal_ex(p->sha, md, &mdlen) != 1 || mdlen != 20) {
		errmsg_set(errmsg, errn, "hashing the pack");
		return -EIO;
	}
	if (git_indexer_append(p->ix, md, 20, &p->stats) < 0)
		return fail("writing the pack", errmsg, errn);
	/* The indexer fsyncs the pack, its index and their directory when
	 * libgit2's gitdir fsync is on. */
	git_libgit2_opts(GIT_OPT_ENABLE_FSYNC_GITDIR, 1);
	rc = git_indexer_commit(p->ix, &p->stats);
	git_libgit2_opts(GIT_OPT_ENABLE_FSYNC_GITDIR, 0);
	if (rc < 0)
		return fail("indexing the pack", errmsg, errn);
	return 0;
}

void gitpack_free(struct gitpack *p)
{
	if (!p)
		return;
	git_indexer_free(p->ix);
	EVP_MD_CTX_free(p->sha);
	free(p->buf);
	free(p->z);
	free(p);
}
