/*
 * common/hash.c - FNV-1a, 64 bits (see common/hash.h).
 */
#include "common/hash.h"

uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}
