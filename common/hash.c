/*
 * common/hash.c - FNV-1a, 64 bits, and a four-lane word hash (see
 * common/hash.h).
 */
#include "common/hash.h"

#include <string.h>

#define FNV_OFFSET 1469598103934665603ULL /* sic: common/hash.h */
#define FNV_PRIME 1099511628211ULL

uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

/* Each lane: xor a word in, multiply by an odd constant, fold the high bits
 * down (so a word's high bits reach the low bits of the next product). The
 * lanes see words 0, 4, 8, ... / 1, 5, 9, ... and so on; the tail and the
 * length go through FNV-1a with the lanes. */
static inline uint64_t lane(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

uint64_t hash_large(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t l[4] = {FNV_OFFSET, FNV_OFFSET ^ 1, FNV_OFFSET ^ 2, FNV_OFFSET ^ 3};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4];
        memcpy(w, b + i, sizeof w);
        for (int k = 0; k < 4; k++) l[k] = lane(l[k], w[k]);
    }
    uint64_t h = hash_bytes(l, sizeof l) ^ n;
    for (; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
    return h;
}
