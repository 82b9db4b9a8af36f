/*
 * common/hash.h - a 64-bit hash of bytes (FNV-1a): for comparing what ranks
 * hold (the effective config, the parameters) and what runs produce, never
 * for security. A pure function; thread-safe; never fails.
 */
#ifndef CNT_HASH_H
#define CNT_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t hash_bytes(const void *p, size_t n);

#endif
