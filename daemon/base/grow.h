/*
 * Growing a malloc'd array: the one helper behind the growable arrays of
 * the indexes (capacity doubling, new entries zeroed); and the allocation
 * of the big hash tables.
 */
#ifndef VMEM_DAEMON_GROW_H
#define VMEM_DAEMON_GROW_H

#include <stddef.h>

/*
 * Make *p (an array of *cap entries of size bytes) hold at least need
 * entries: the capacity doubles from 16 until it does, and the new
 * entries are zero. 0, or -ENOMEM with *p and *cap unchanged.
 */
int grow_array(void **p, size_t *cap, size_t need, size_t size);

/*
 * n zeroed entries of size bytes, as calloc gives, but written at once.
 * Why: a big calloc'd table is fresh mapped memory; a probe reads a slot
 * before writing it, which maps the shared zero page first, and the
 * write then faults again to replace it, flushing the TLB of every CPU
 * the process runs on (an interrupt to each, costly in a VM). With the
 * start-up reading on two threads that was a tenth of its CPU. NULL on
 * overflow or out of memory; free() frees it.
 */
void *table_alloc(size_t n, size_t size);

#endif
