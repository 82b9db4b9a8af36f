/*
 * common/rng.c - PCG32 (XSH RR variant) and helpers built on it.
 */
#include "common/rng.h"
#include "common/rng_hash.h"

#include <math.h>

void rng_seed(rng *r, uint64_t seed, uint64_t stream) {
    r->state = 0;
    r->inc = (stream << 1u) | 1u;
    rng_u32(r);
    r->state += seed;
    rng_u32(r);
}

uint32_t rng_u32(rng *r) {
    uint64_t old = r->state;
    r->state = old * 6364136223846793005ULL + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

void rng_advance(rng *r, uint64_t delta) {
    /* state_{k+d} = mult^d state_k + inc (mult^(d-1) + ... + 1), by squaring (O'Neill's pcg_advance) */
    uint64_t mult = 6364136223846793005ULL, plus = r->inc, acc_mult = 1, acc_plus = 0;
    for (; delta; delta >>= 1) {
        if (delta & 1) {
            acc_mult *= mult;
            acc_plus = acc_plus * mult + plus;
        }
        plus = (mult + 1) * plus;
        mult *= mult;
    }
    r->state = acc_mult * r->state + acc_plus;
}

uint32_t rng_below(rng *r, uint32_t n) {
    /* Lemire-free rejection: discard the low values that would bias the modulo. */
    uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint32_t x = rng_u32(r);
        if (x >= threshold) return x % n;
    }
}

float rng_uniform(rng *r) { return (float)(rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

float rng_range(rng *r, float lo, float hi) { return lo + (hi - lo) * rng_uniform(r); }

float rng_normal(rng *r) {
    /* Box-Muller with 1 - u so the logarithm never sees 0. */
    double u1 = 1.0 - (double)(rng_u32(r) >> 8) / 16777216.0;
    double u2 = (double)(rng_u32(r) >> 8) / 16777216.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void rng_permutation(rng *r, int *perm, int n) {
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(r, (uint32_t)i + 1);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

float rng_hash_uniform(uint64_t seed, uint64_t counter) { return rng_hash_uniform_inline(seed, counter); }
