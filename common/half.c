/*
 * common/half.c - float <-> IEEE binary16 conversions (see common/half.h).
 *
 * The software conversion works on the bit patterns. A float is
 * sign | 8-bit exponent (bias 127) | 23-bit mantissa; a half is
 * sign | 5-bit exponent (bias 15) | 10-bit mantissa. Normal halves cover
 * exponents -14..15; below that, halves are subnormal multiples of 2^-24.
 * Rounding drops the low mantissa bits and adds one when the dropped part is
 * above half a unit, or exactly half and the kept part is odd (ties to even);
 * a carry out of the mantissa correctly bumps the exponent (up to inf).
 *
 * F16C: on x86-64 with GCC or Clang the array loops have a second version
 * compiled for F16C+AVX through __attribute__((target)), chosen at run time
 * by a CPUID check, so the binary runs on any x86-64.
 */
#include "common/half.h"

#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define FP16_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define FP16_X86 0
#endif

uint16_t fp16_from_float(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    int exp = (int)(ax >> 23) - 127; /* unbiased float exponent */
    if (exp == 128) {                 /* inf or NaN */
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        /* Quiet NaN with the top payload bits (what VCVTPS2PH does). */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x1ffu));
    }
    if (exp > 15) return sign | 0x7c00u; /* beyond the half range even before rounding */
    uint32_t h, rem, halfway;
    if (exp >= -14) { /* normal half: rebias the exponent, keep 10 mantissa bits */
        h = ((uint32_t)(exp + 15) << 10) | ((ax >> 13) & 0x3ffu);
        rem = ax & 0x1fffu;
        halfway = 0x1000u;
    } else { /* subnormal half (or zero): units of 2^-24 */
        if (exp < -25) return sign; /* below 2^-25: rounds to zero (float subnormals too) */
        uint32_t m = (ax & 0x7fffffu) | 0x800000u; /* value = m * 2^(exp-23) */
        int shift = -exp - 1;                      /* 14..24: value / 2^-24 = m >> shift */
        h = m >> shift;
        rem = m & ((1u << shift) - 1u);
        halfway = 1u << (shift - 1);
    }
    if (rem > halfway || (rem == halfway && (h & 1u))) h++; /* may carry into the exponent: fine */
    return (uint16_t)(sign | h);
}

float fp16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    if (exp == 0x1f) {
        /* inf, or a quiet NaN with its payload (as VCVTPH2PS) */
        x = sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0);
    } else if (exp != 0) {
        x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    } else if (mant == 0) {
        x = sign;
    } else { /* subnormal: normalise; value = mant * 2^-24 */
        int e = -14;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        x = sign | ((uint32_t)(e + 127) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static int force_software = 0;

#if FP16_X86
/* Why a target attribute and not -mf16c: the build must run on CPUs without
 * F16C; only these functions use the instructions, after the CPUID check. */
__attribute__((target("avx,f16c"))) static void from_float_f16c(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
    for (; i < n; i++) dst[i] = fp16_from_float(src[i]);
}

__attribute__((target("avx,f16c"))) static void to_float_f16c(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    for (; i < n; i++) dst[i] = fp16_to_float(src[i]);
}

__attribute__((target("avx,f16c"))) static void add_f16c(uint16_t *inout, const uint16_t *in, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(in + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(inout + i)));
        _mm_storeu_si128((__m128i *)(void *)(inout + i),
                         _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) inout[i] = fp16_from_float(fp16_to_float(in[i]) + fp16_to_float(inout[i]));
}

__attribute__((target("avx,f16c"))) static void round_f16c(float *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i,
                         _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) dst[i] = fp16_to_float(fp16_from_float(src[i]));
}

static int cpu_f16c(void) {
    static int known = -1; /* benign race: every thread computes the same value */
    if (known < 0) {
        __builtin_cpu_init();
        /* F16C from cpuid itself: clang's __builtin_cpu_supports has no "f16c" */
        unsigned a, b, c, d;
        int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
        known = __builtin_cpu_supports("avx") && f16c;
    }
    return known;
}
#endif

int fp16_have_f16c(void) {
#if FP16_X86
    return !force_software && cpu_f16c();
#else
    return 0;
#endif
}

void fp16_force_software(int on) { force_software = on; }

void fp16_from_float_array(uint16_t *dst, const float *src, size_t n) {
#if FP16_X86
    if (fp16_have_f16c()) {
        from_float_f16c(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = fp16_from_float(src[i]);
}

void fp16_to_float_array(float *dst, const uint16_t *src, size_t n) {
#if FP16_X86
    if (fp16_have_f16c()) {
        to_float_f16c(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = fp16_to_float(src[i]);
}

void fp16_add_array(uint16_t *inout, const uint16_t *in, size_t n) {
#if FP16_X86
    if (fp16_have_f16c()) {
        add_f16c(inout, in, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) inout[i] = fp16_from_float(fp16_to_float(in[i]) + fp16_to_float(inout[i]));
}

float fp16_round(float x) { return fp16_to_float(fp16_from_float(x)); }

/* Branch-free on the bits, so the array loop vectorises. Adding 0x7fff plus
 * the lowest kept bit and truncating is round to nearest, ties to even; a
 * carry runs into the exponent (and up to inf, 0x7f800000, exactly). NaNs are
 * kept apart: the same addition could carry a NaN's payload into the sign. */
static inline uint32_t bf16_round_bits(uint32_t u) {
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
    return is_nan ? ((u | 0x00400000u) & 0xffff0000u) : r;
}

float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = bf16_round_bits(u);
    memcpy(&x, &u, sizeof x);
    return x;
}

void fp16_round_array(float *dst, const float *src, size_t n) {
#if FP16_X86
    if (fp16_have_f16c()) {
        round_f16c(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = fp16_to_float(fp16_from_float(src[i]));
}

void bf16_round_array(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        u = bf16_round_bits(u);
        memcpy(dst + i, &u, sizeof u);
    }
}

uint16_t bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(bf16_round_bits(u) >> 16);
}

void bf16_from_float_array(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        dst[i] = (uint16_t)(bf16_round_bits(u) >> 16);
    }
}

void bf16_to_float_array(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, sizeof u);
    }
}

float bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
