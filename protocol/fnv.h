/*
 * The 64-bit FNV-1a hash: the socket path's key (sockpath.h) and the
 * daemon's in-memory hash tables of names, paths and lines. Not for
 * anything an adversary's collisions could hurt beyond a slower probe.
 */
#ifndef VMEM_PROTOCOL_FNV_H
#define VMEM_PROTOCOL_FNV_H

#include <stddef.h>
#include <stdint.h>

uint64_t fnv1a64(const char *s, size_t len);

#endif
