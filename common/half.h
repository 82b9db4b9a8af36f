/*
 * common/half.h - IEEE 754 binary16 ("half", fp16) conversions for gradient
 * compression (dist.compress = fp16), and rounding of floats to fp16 and to
 * bfloat16 for reduced-precision math (train.precision = fp16 | bf16) on the
 * CPU backend.
 *
 * Provides float <-> half conversion of one value and of arrays. Float to half
 * rounds to nearest, ties to even, the IEEE default and what F16C's VCVTPS2PH
 * does with rounding mode 0: values whose magnitude rounds above 65504 (the
 * largest half, i.e. |x| >= 65520) become +-inf, as in Horovod's fp16
 * compression; magnitudes below 2^-14 become half subnormals (steps of 2^-24)
 * and those at or below 2^-25 become +-0 (the tie at 2^-25 goes to the even
 * 0). inf stays inf; NaN stays NaN (quiet, sign and the top 9 payload bits
 * kept). Half to float is exact (a signalling NaN comes out quiet).
 *
 * The array versions use the CPU's F16C instructions when the compiler knows
 * them (x86-64 GCC or Clang, through a target attribute, so the build needs no
 * -mf16c) and the CPU has them (checked at run time); otherwise, and for the
 * tails, the portable software conversion. Both give the same bits, which
 * tests/test_half.c checks over every half and a sweep of floats.
 *
 * No function fails. Pure functions of their arguments; thread-safe.
 */
#ifndef CNT_FP16_H
#define CNT_FP16_H

#include <stddef.h>
#include <stdint.h>

/* One float to half, rounding to nearest even (software, portable). */
uint16_t fp16_from_float(float f);
/* One half to float (exact; software, portable). */
float fp16_to_float(uint16_t h);

/* dst[i] = fp16_from_float(src[i]) for i < n. */
void fp16_from_float_array(uint16_t *dst, const float *src, size_t n);
/* dst[i] = fp16_to_float(src[i]) for i < n. */
void fp16_to_float_array(float *dst, const uint16_t *src, size_t n);
/* inout[i] = fp16_from_float(fp16_to_float(in[i]) + fp16_to_float(inout[i])):
 * one reduction step of the fp16 sum, added in fp32 and rounded once. */
void fp16_add_array(uint16_t *inout, const uint16_t *in, size_t n);

/* ---- rounding floats to a narrower type, kept as floats ----
 * fp16_round(x) = fp16_to_float(fp16_from_float(x)): the value a half tensor
 * would hold (beyond +-65504 after rounding: +-inf).
 * bf16_round(x): bfloat16 (sign, the float's 8-bit exponent, 7 mantissa bits),
 * round to nearest even on the dropped 16 bits, as CUDA's __float2bfloat16_rn:
 * magnitudes that round above 0x1.fep127 become inf, float subnormals round
 * like any other value, inf stays inf, NaN stays a quiet NaN. */
float fp16_round(float x);
float bf16_round(float x);
/* The float a bfloat16 holds (exact: its bits are the float's top 16). */
float bf16_to_float(uint16_t b);
/* One float to bfloat16 bits, rounded as bf16_round (the top 16 bits of
 * bf16_round(f)); and the array versions of both directions (16-bit
 * activation storage, model/backend_cpu16.c). */
uint16_t bf16_from_float(float f);
void bf16_from_float_array(uint16_t *dst, const float *src, size_t n);
void bf16_to_float_array(float *dst, const uint16_t *src, size_t n);
/* dst[i] = fp16_round(src[i]) / bf16_round(src[i]); dst may equal src. The
 * fp16 version uses F16C like the arrays above. */
void fp16_round_array(float *dst, const float *src, size_t n);
void bf16_round_array(float *dst, const float *src, size_t n);

/* 1 when the array versions use F16C on this CPU, 0 when they use the
 * software conversion (for tests and the start-up log). */
int fp16_have_f16c(void);
/* Tests only: 1 forces the software conversion in the array versions, 0 lets
 * them use F16C again when available. Not thread-safe; call before use. */
void fp16_force_software(int on);

#endif
