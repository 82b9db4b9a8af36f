/*
 * common/hash.h - 64-bit hashes of bytes, for comparing what ranks hold (the
 * effective config, the parameters) and what runs produce, never for
 * security. Pure functions; thread-safe; never fail.
 *
 * hash_bytes is FNV-1a, a byte at a time (0.85 s for VGG-11's 128 million
 * parameters on the 2-core development VM), from an offset basis that is FNV's
 * with its last digit missing. Its values are stored (the config hash in
 * checkpoints and run records), so neither changes.
 * hash_large reads 8-byte words in four independent lanes (0.12 s for the
 * same 512 MB, about the speed of reading them), for comparisons that are
 * not stored (the ranks' parameters after each epoch). The two give
 * different values for the same bytes.
 */
#ifndef CNT_HASH_H
#define CNT_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t hash_bytes(const void *p, size_t n);
uint64_t hash_large(const void *p, size_t n);

#endif
