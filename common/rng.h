/*
 * common/rng.h - the project's random numbers: explicit state, never rand().
 *
 * A PCG32 generator (O'Neill 2014): 64-bit state, a stream selector, 32-bit
 * output. Every consumer owns its state, seeded from (seed, stream), so a run is
 * reproducible from its config and a checkpoint can store the exact position.
 *
 * rng_hash_uniform() is stateless: a value for (seed, counter) alone. Backends
 * use it for dropout masks so CPU and GPU draw the same mask for the same step.
 */
#ifndef CNT_RNG_H
#define CNT_RNG_H

#include <stdint.h>

typedef struct rng {
    uint64_t state;
    uint64_t inc; /* stream selector, always odd */
} rng;

void rng_seed(rng *r, uint64_t seed, uint64_t stream);
uint32_t rng_u32(rng *r);
/* Moves r on by `delta` draws of rng_u32 in O(log delta) steps (PCG's
 * jump-ahead): a stream can be cut into pieces that threads draw at once,
 * each the values the one stream would give there. */
void rng_advance(rng *r, uint64_t delta);
/* Uniform integer in [0, n), without modulo bias. n > 0. */
uint32_t rng_below(rng *r, uint32_t n);
/* Uniform float in [0, 1). */
float rng_uniform(rng *r);
/* Uniform in [lo, hi). */
float rng_range(rng *r, float lo, float hi);
/* Standard normal (Box-Muller; one value per call, no cached state). */
float rng_normal(rng *r);
/* Fisher-Yates permutation of 0..n-1 into perm. */
void rng_permutation(rng *r, int *perm, int n);

/* Stateless uniform in [0, 1) from (seed, counter): splitmix64 finaliser. */
float rng_hash_uniform(uint64_t seed, uint64_t counter);

#endif
