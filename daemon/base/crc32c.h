/*
 * CRC-32C (Castagnoli), the checksum of every record the daemon writes
 * (the write-ahead log, segment files, the vector index file). The SSE 4.2
 * crc32 instruction when the processor has it (chosen once, at run time),
 * a table otherwise; both give the same value. Thread-safe.
 */
#ifndef VMEM_DAEMON_CRC32C_H
#define VMEM_DAEMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of buf continued from crc (0 to start). */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
