/* Growing a malloc'd array, allocating a table (see grow.h). */
#include "grow.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int grow_array(void **p, size_t *cap, size_t need, size_t size)
{
	size_t n = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need) {
		if (n > SIZE_MAX / 2 / size)
			return -ENOMEM;
		n *= 2;
	}
	q = realloc(*p, n * size);
	if (!q)
		return -ENOMEM;
	memset((char *)q + *cap * size, 0, (n - *cap) * size);
	*p = q;
	*cap = n;
	return 0;
}

void *table_alloc(size_t n, size_t size)
{
	size_t bytes;
	void *p;

	if (size && n > SIZE_MAX / size)
		return NULL;
	bytes = n * size;
	p = malloc(bytes > 0 ? bytes : 1);
	if (p)
		memset(p, 0, bytes);
	return p;
}
