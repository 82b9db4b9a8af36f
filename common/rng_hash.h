/*
 * common/rng_hash.h - the stateless uniform draw behind dropout masks, in C
 * that gcc and nvcc both compile: the CPU backend (through rng_hash_uniform)
 * and the CUDA kernels run this one definition, so the same (seed, counter)
 * gives the same float on either device.
 */
#ifndef CNT_RNG_HASH_H
#define CNT_RNG_HASH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define RNG_HASH_FN static inline __host__ __device__
#else
#define RNG_HASH_FN static inline
#endif

/* Uniform in [0, 1) from (seed, counter): the splitmix64 finaliser, top 24 bits. */
RNG_HASH_FN float rng_hash_uniform_inline(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* A standard normal from (seed, counter): Box-Muller on two of the draws
 * above (counters 2c and 2c + 1). In float: the host's and the device's
 * logf and cosf may differ in the last bit, so the same (seed, counter)
 * gives the same value on every rank of one kind of device. */
RNG_HASH_FN float rng_hash_normal_inline(uint64_t seed, uint64_t counter) {
    float u1 = rng_hash_uniform_inline(seed, 2 * counter), u2 = rng_hash_uniform_inline(seed, 2 * counter + 1);
    return sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.28318530718f * u2);
}

/* The seed of one dropout node's mask in one training step: the net's step
 * seed (net->dropout_seed, advanced by every training forward) mixed with
 * the node's index, so that every node and every step draws its own mask.
 * Host and device compute it alike: a recorded step (train.cuda_graph)
 * reads the step seed from device memory at each replay. */
RNG_HASH_FN uint64_t rng_hash_dropout_seed(uint64_t step_seed, uint64_t node_index) {
    return step_seed * 0x100000001B3ULL + node_index;
}

#endif
