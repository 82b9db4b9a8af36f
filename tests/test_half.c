/*
 * tests/test_half.c - the float <-> IEEE binary16 conversions of common/half.h
 * (dist.compress = fp16): exact values, ties to even, subnormals, overflow to
 * inf, inf and NaN; every half back and forth; a sweep of a million floats
 * against an independent reference in double arithmetic; and, when the CPU has
 * F16C, the F16C array versions bit for bit against the software ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"

static float f_of_bits(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static int half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

static void test_exact_values(void **state) {
    (void)state;
    struct { float f; uint16_t h; } cases[] = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.5f, 0x3800},
        {65504.0f, 0x7bff}, {-65504.0f, 0xfbff}, {0x1p-14f, 0x0400}, {0x1p-24f, 0x0001},
        {1023 * 0x1p-24f, 0x03ff}, {1.0f + 0x1p-10f, 0x3c01}, {2048.0f, 0x6800}, {3.140625f, 0x4248},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(fp16_from_float(cases[i].f), cases[i].h);
        float back = fp16_to_float(cases[i].h);
        assert_memory_equal(&back, &cases[i].f, sizeof back); /* -0 keeps its sign */
    }
    /* Inexact ones round to the nearest half. */
    assert_int_equal(fp16_from_float(1.0f / 3.0f), 0x3555);
    assert_int_equal(fp16_from_float(0.1f), 0x2e66);
    assert_int_equal(fp16_from_float(-0.1f), 0xae66);
}

static void test_ties_to_even(void **state) {
    (void)state;
    assert_int_equal(fp16_from_float(1.0f + 0x1p-11f), 0x3c00);               /* tie, 0x3c00 even */
    assert_int_equal(fp16_from_float(1.0f + 3 * 0x1p-11f), 0x3c02);           /* tie, 0x3c01 odd: up */
    assert_int_equal(fp16_from_float(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);    /* just above the tie */
    assert_int_equal(fp16_from_float(1.0f + 0x1p-11f - 0x1p-23f), 0x3c00);    /* just below */
    assert_int_equal(fp16_from_float(2049.0f), 0x6800);                       /* -> 2048 */
    assert_int_equal(fp16_from_float(2051.0f), 0x6802);                       /* -> 2052 */
    assert_int_equal(fp16_from_float(-2051.0f), 0xe802);
    assert_int_equal(fp16_from_float(65519.0f), 0x7bff);                      /* below the tie: max */
    assert_int_equal(fp16_from_float(65520.0f), 0x7c00);                      /* the tie: inf (even) */
    assert_int_equal(fp16_from_float(2.0f - 0x1p-12f), 0x4000);               /* carry into the exponent */
}

static void test_subnormals(void **state) {
    (void)state;
    assert_int_equal(fp16_from_float(0x1p-25f), 0x0000);           /* tie between 0 and 2^-24: even 0 */
    assert_int_equal(fp16_from_float(-0x1p-25f), 0x8000);
    assert_int_equal(fp16_from_float(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(fp16_from_float(0x1p-26f), 0x0000);
    assert_int_equal(fp16_from_float(3 * 0x1p-25f), 0x0002);       /* tie between 1 and 2 units: 2 */
    assert_int_equal(fp16_from_float(5 * 0x1p-25f), 0x0002);       /* tie between 2 and 3 units: 2 */
    assert_int_equal(fp16_from_float(0x1p-14f - 0x1p-25f), 0x0400); /* tie 0x3ff / 0x400: min normal */
    assert_int_equal(fp16_from_float(0x1p-14f - 0x1p-24f), 0x03ff);
    assert_int_equal(fp16_from_float(1e-45f), 0x0000);              /* float subnormal */
    assert_int_equal(fp16_from_float(-1e-45f), 0x8000);
    assert_true(fp16_to_float(0x0001) == 0x1p-24f);
    assert_true(fp16_to_float(0x8001) == -0x1p-24f);
    assert_true(fp16_to_float(0x0200) == 0x1p-15f);
    assert_true(fp16_to_float(0x03ff) == 1023 * 0x1p-24f);
}

static void test_inf_nan(void **state) {
    (void)state;
    assert_int_equal(fp16_from_float(INFINITY), 0x7c00);
    assert_int_equal(fp16_from_float(-INFINITY), 0xfc00);
    assert_int_equal(fp16_from_float(1e30f), 0x7c00);
    assert_int_equal(fp16_from_float(-70000.0f), 0xfc00);
    assert_true(isinf(fp16_to_float(0x7c00)) && fp16_to_float(0x7c00) > 0);
    assert_true(isinf(fp16_to_float(0xfc00)) && fp16_to_float(0xfc00) < 0);
    uint16_t qn = fp16_from_float(NAN);
    assert_true(half_is_nan(qn) && (qn & 0x200u));
    uint16_t sn = fp16_from_float(f_of_bits(0xff800001u)); /* signalling NaN, payload in low bits only */
    assert_true(half_is_nan(sn) && (sn & 0x8000u) && (sn & 0x200u)); /* still NaN (quiet), sign kept */
    assert_true(isnan(fp16_to_float(0x7e00)) && isnan(fp16_to_float(0x7c01)) && isnan(fp16_to_float(0xfd00)));
}

/* Every half to float and back: the same bits (NaNs: a quiet NaN of the same sign). */
static void test_all_halves_round_trip(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_float((uint16_t)h);
        uint16_t back = fp16_from_float(f);
        if (half_is_nan((uint16_t)h)) {
            assert_true(isnan(f));
            assert_true(half_is_nan(back) && (back & 0x8000u) == (h & 0x8000u));
            assert_int_equal(back & 0x1ffu, h & 0x1ffu);
        } else {
            assert_int_equal(back, h);
        }
    }
}

/* The reference: the nearest multiple of the half ulp at x's binade, in double
 * (exact at these sizes) with rint (ties to even in the default mode). */
static double ref_round(float x) {
    double a = fabs((double)x);
    if (a >= 65520.0) return copysign(INFINITY, x);
    if (a == 0) return x;
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int ulp_exp = (e - 1 < -14 ? -14 : e - 1) - 10;
    double q = rint(ldexp(a, -ulp_exp));
    return copysign(ldexp(q, ulp_exp), x);
}

static void test_sweep_against_reference(void **state) {
    (void)state;
    long checked = 0;
    for (uint64_t b = 0; b < ((uint64_t)1 << 32); b += 4093) { /* ~1M patterns, all exponents */
        float x = f_of_bits((uint32_t)b);
        if (isnan(x)) continue;
        float got = fp16_to_float(fp16_from_float(x));
        double want = ref_round(x);
        if ((double)got != want || !signbit(got) != !signbit(want)) {
            fprintf(stderr, "float 0x%08x (%g): got %g, want %g\n", (uint32_t)b, (double)x, (double)got, want);
            fail();
        }
        checked++;
    }
    assert_true(checked > 1000000);
}

/* The array versions (F16C where the CPU has it) against the scalar software
 * conversion, bit for bit, NaN payloads included. */
static void test_arrays_match_software(void **state) {
    (void)state;
    printf("fp16: array conversions use %s\n", fp16_have_f16c() ? "F16C" : "the software conversion");
    enum { NH = 65536, NF = 1 << 20 };
    uint16_t *h = malloc(NH * sizeof *h), *h2 = malloc(NF * sizeof *h2), *acc = malloc(NH * sizeof *acc);
    float *f = malloc(NF * sizeof *f);
    assert_non_null(h && h2 && acc && f);
    for (uint32_t i = 0; i < NH; i++) h[i] = (uint16_t)i;
    fp16_to_float_array(f, h, NH);
    for (uint32_t i = 0; i < NH; i++) {
        float want = fp16_to_float((uint16_t)i);
        assert_memory_equal(&f[i], &want, sizeof want);
    }
    uint32_t s = 12345;
    for (uint32_t i = 0; i < NF; i++) {
        s = s * 1664525u + 1013904223u;
        f[i] = f_of_bits(s); /* any pattern: NaNs, infs, subnormals, huge */
        if (i % 3 == 0) f[i] = (float)(int32_t)s * 0x1p-40f; /* many in the half range */
    }
    fp16_from_float_array(h2, f, NF - 3); /* odd length: the scalar tail too */
    for (uint32_t i = 0; i < NF - 3; i++)
        if (h2[i] != fp16_from_float(f[i])) {
            uint32_t bits;
            memcpy(&bits, &f[i], sizeof bits);
            fprintf(stderr, "float 0x%08x: array 0x%04x, scalar 0x%04x\n", bits, h2[i], fp16_from_float(f[i]));
            fail();
        }
    /* The reduction step: a + b through float, once rounded, both ways. */
    for (uint32_t i = 0; i < NH; i++) acc[i] = h2[i];
    fp16_add_array(acc, h, NH - 1);
    for (uint32_t i = 0; i < NH - 1; i++) {
        uint16_t want = fp16_from_float(fp16_to_float(h[i]) + fp16_to_float(h2[i]));
        if (half_is_nan(want))
            assert_true(half_is_nan(acc[i]));
        else
            assert_int_equal(acc[i], want);
    }
    fp16_force_software(1);
    assert_int_equal(fp16_have_f16c(), 0);
    uint16_t one;
    fp16_from_float_array(&one, &(float){0.1f}, 1);
    assert_int_equal(one, 0x2e66);
    fp16_force_software(0);
    free(h);
    free(h2);
    free(acc);
    free(f);
}

/* bfloat16 rounding against an independent reference: the nearest of the two
 * bf16 neighbours in double arithmetic, ties to the even one. */
static float ref_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) >= 0x7f800000u) return x; /* inf, NaN: checked apart */
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u; /* same sign: toward and away from zero */
    double dx = fabs((double)x), dlo = fabs((double)f_of_bits(lo)), dhi = fabs((double)f_of_bits(hi));
    if ((hi & 0x7fffffffu) > 0x7f800000u) dhi = INFINITY; /* never past inf */
    uint32_t pick;
    if (dx - dlo < dhi - dx) pick = lo;
    else if (dx - dlo > dhi - dx) pick = hi;
    else pick = (lo >> 16) & 1u ? hi : lo;
    /* the step past the largest bf16 (0x7f7f...) is inf, which IEEE rounding reaches at the tie */
    if ((lo & 0x7fffffffu) == 0x7f7f0000u && dx - dlo >= 0x1p119) pick = (u & 0x80000000u) | 0x7f800000u;
    return f_of_bits(pick);
}

static void test_bf16_round(void **state) {
    (void)state;
    struct { float in, out; } cases[] = {
        {1.0f, 1.0f}, {-2.5f, -2.5f}, {0.0f, 0.0f},
        {1.0f + 0x1p-8f, 1.0f},                    /* tie, 1.0 even: down */
        {1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},      /* tie, odd: up */
        {1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-7f}, /* just above the tie */
        {2.0f - 0x1p-9f, 2.0f},                    /* carry into the exponent */
        {0x1.fefffep127f, 0x1.fep127f},            /* below the last tie: the largest bf16 */
        {0x1.ffp127f, INFINITY},                   /* the tie above it: inf */
        {-0x1.ffp127f, -INFINITY},
        {0x1p-130f, 0x1p-130f},                    /* float subnormals keep 7 bits like any value */
        {0.1f, 0x1.9ap-4f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float r = bf16_round(cases[i].in);
        assert_memory_equal(&r, &cases[i].out, sizeof r);
    }
    float z = bf16_round(-0.0f);
    assert_true(z == 0.0f && signbit(z));
    assert_true(isinf(bf16_round(INFINITY)) && bf16_round(-INFINITY) < 0);
    /* NaN stays NaN, even one whose payload is all in the low 16 bits */
    assert_true(isnan(bf16_round(f_of_bits(0x7f800001u))));
    assert_true(isnan(bf16_round(f_of_bits(0xffffffffu))));
    assert_true(isnan(bf16_round(NAN)));
    /* a sweep against the reference, and the array version equal to the scalar */
    enum { N = 1 << 20 };
    float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    assert_non_null(in);
    assert_non_null(out);
    uint32_t u = 0x2545f491u;
    for (int i = 0; i < N; i++) {
        u = u * 1664525u + 1013904223u;
        uint32_t b = u;
        if ((b & 0x7f800000u) == 0x7f800000u) b &= 0xbfffffffu; /* finite inputs; inf/NaN tested above */
        if (i % 7 == 0) b = (b & 0xffff0000u) | 0x8000u;        /* plenty of exact ties */
        in[i] = f_of_bits(b);
    }
    bf16_round_array(out, in, N);
    for (int i = 0; i < N; i++) {
        float want = ref_bf16(in[i]), one = bf16_round(in[i]);
        if (memcmp(&out[i], &want, sizeof want) != 0 || memcmp(&one, &want, sizeof want) != 0)
            fail_msg("bf16_round(%a) = %a (array %a), want %a", (double)in[i], (double)one, (double)out[i],
                     (double)want);
    }
    free(in);
    free(out);
}

static void test_fp16_round(void **state) {
    (void)state;
    /* fp16_round is the round trip through a half ... */
    assert_true(fp16_round(1.0f + 0x1p-11f) == 1.0f);
    assert_true(fp16_round(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
    assert_true(fp16_round(65519.0f) == 65504.0f);
    assert_true(isinf(fp16_round(65520.0f)) && fp16_round(-70000.0f) < 0 && isinf(fp16_round(-70000.0f)));
    assert_true(fp16_round(0x1p-25f) == 0.0f && fp16_round(0x1.8p-25f) == 0x1p-24f);
    assert_true(isnan(fp16_round(NAN)));
    /* ... and the array version (F16C or not) equals it, in place too */
    enum { N = 100003 };
    float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    assert_non_null(in);
    assert_non_null(out);
    uint32_t u = 12345u;
    for (int i = 0; i < N; i++) {
        u = u * 1664525u + 1013904223u;
        in[i] = f_of_bits((u & 0x8fffffffu) | 0x30000000u); /* magnitudes around 2^-31 .. 2^97 */
    }
    for (int sw = 0; sw < 2; sw++) {
        fp16_force_software(sw);
        fp16_round_array(out, in, N);
        for (int i = 0; i < N; i++) {
            float want = fp16_to_float(fp16_from_float(in[i]));
            if (memcmp(&out[i], &want, sizeof want) != 0)
                fail_msg("fp16_round_array (%s) [%d] %a -> %a, want %a", sw ? "software" : "F16C", i,
                         (double)in[i], (double)out[i], (double)want);
        }
    }
    fp16_force_software(0);
    memcpy(out, in, N * sizeof(float));
    fp16_round_array(out, out, N);
    for (int i = 0; i < N; i++) assert_true(memcmp(&out[i], &(float){fp16_round(in[i])}, sizeof(float)) == 0);
    free(in);
    free(out);
}

/* bf16_to_float widens exactly: every bfloat16's bits are the float's top
 * 16, and rounding a widened value to bf16 gives it back (NaN stays NaN). */
static void test_bf16_to_float(void **state) {
    (void)state;
    for (uint32_t b = 0; b <= 0xffff; b++) {
        float f = bf16_to_float((uint16_t)b), want = f_of_bits(b << 16);
        assert_memory_equal(&f, &want, sizeof f);
        if (isnan(f)) assert_true(isnan(bf16_round(f)));
        else assert_true(bf16_round(f) == f || (f != f));
    }
    assert_true(bf16_to_float(0x3f80) == 1.0f);
    assert_true(bf16_to_float(0xc000) == -2.0f);
}

/* bfloat16 bits from a float: bf16_round's top 16 bits, scalar and array,
 * and back (16-bit activation storage). Every bf16 round-trips; a sweep
 * of floats, ties included, matches bf16_round. */
static void test_bf16_bits(void **state) {
    (void)state;
    enum { N = 1 << 18 };
    float *in = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * sizeof(uint16_t));
    assert_non_null(in);
    assert_non_null(back);
    assert_non_null(h);
    for (uint32_t b = 0; b <= 0xffff; b++) {
        float f = bf16_to_float((uint16_t)b);
        if (!isnan(f)) assert_int_equal(bf16_from_float(f), b);
    }
    uint32_t u = 0x9e3779b9u;
    for (int i = 0; i < N; i++) {
        u = u * 1664525u + 1013904223u;
        uint32_t b = i % 5 == 0 ? (u & 0xffff0000u) | 0x8000u : u; /* ties */
        in[i] = f_of_bits(b);
    }
    bf16_from_float_array(h, in, N);
    bf16_to_float_array(back, h, N);
    for (int i = 0; i < N; i++) {
        float want = bf16_round(in[i]);
        assert_int_equal(h[i], bf16_from_float(in[i]));
        if (isnan(want)) assert_true(isnan(back[i]));
        else assert_memory_equal(&back[i], &want, sizeof want);
    }
    free(in);
    free(back);
    free(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_bits),
        cmocka_unit_test(test_exact_values),
        cmocka_unit_test(test_ties_to_even),
        cmocka_unit_test(test_subnormals),
        cmocka_unit_test(test_inf_nan),
        cmocka_unit_test(test_all_halves_round_trip),
        cmocka_unit_test(test_sweep_against_reference),
        cmocka_unit_test(test_arrays_match_software),
        cmocka_unit_test(test_bf16_round),
        cmocka_unit_test(test_fp16_round),
        cmocka_unit_test(test_bf16_to_float),
    };
    return cmocka_run_group_tests_name("fp16", tests, NULL, NULL);
}
