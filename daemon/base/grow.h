/*
 * Growing a malloc'd array: the one helper behind the growable arrays of
 * the indexes (capacity doubling, new entries zeroed).
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

#endif
