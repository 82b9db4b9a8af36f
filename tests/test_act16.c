/*
 * tests/test_act16.c - 16-bit activation storage (backend_ctx.act = bf16 or
 * fp16, net_set_activations, train.activations) on the CPU backend, the
 * reference the GPU's 16-bit kernels are compared with.
 *
 * The definition (model/backend.h, backend_dtype): an op reads 16-bit
 * activations, computes in fp32 and rounds what it stores once. So each op
 * here runs twice on the same values (inputs drawn as values of the type):
 * in an fp32 context on fp32 copies, and in a 16-bit context on 16-bit
 * ones; the 16-bit result must be the fp32 result rounded to the type, bit
 * for bit, and the fp32 outputs (weight gradients, batch-norm statistics)
 * must be the same bits. Every op, every layout, overwriting and
 * accumulating, aliased operands, and what an op must leave alone (other
 * channels, the gaps between a GEMM's rows). Then whole nets: a ResNet-20
 * and an Inception V3 whose activations are bf16 or fp16 against the same
 * nets with fp32 activations (the same math mode), within the rounding the
 * test states; the memory estimate halves; and the trainer's key.
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

#include "common/check.h"
#include "common/half.h"
#include "common/rng.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/config.h"
#include "tests/support/testutil.h"

static const backend *be;
static backend_dtype T;     /* the 16-bit type under test */
static backend_ctx ctx[2];  /* [0]: fp32 activations, [1]: T; the same layout and math */

static const char *type_name(void) { return T == BACKEND_DTYPE_BF16 ? "bf16" : "fp16"; }

static float round_t(float v) { return T == BACKEND_DTYPE_BF16 ? bf16_round(v) : fp16_round(v); }
static uint16_t to16(float v) { return T == BACKEND_DTYPE_BF16 ? bf16_from_float(v) : fp16_from_float(v); }
static float from16(uint16_t h) { return T == BACKEND_DTYPE_BF16 ? bf16_to_float(h) : fp16_to_float(h); }

/* ---------------------------------------------------------------- tensor pairs */

/* The same n values on the device twice: as fp32 (side 0) and as T (side 1). */
typedef struct pair {
    size_t n;
    void *d[2];
} pair;

/* n values mean + N(0, 1), rounded to T (so both sides hold the same numbers). */
static pair pair_new(rng *r, size_t n, double mean) {
    pair p = {.n = n};
    double *h = tu_alloc(n);
    tu_fill_normal(r, h, n, mean, 1.0);
    float *f = tu_alloc_f(n);
    uint16_t *s = cnt_malloc((n ? n : 1) * sizeof *s);
    for (size_t i = 0; i < n; i++) {
        f[i] = round_t((float)h[i]);
        s[i] = to16(f[i]);
    }
    p.d[0] = be->alloc((n ? n : 1) * sizeof(float));
    p.d[1] = be->alloc((n ? n : 1) * sizeof(uint16_t));
    be->upload(p.d[0], f, n * sizeof(float));
    be->upload(p.d[1], s, n * sizeof(uint16_t));
    free(h);
    free(f);
    free(s);
    return p;
}

static void pair_free(pair *p) {
    be->free(p->d[0]);
    be->free(p->d[1]);
}

/* Side 1, widened, must be side 0 rounded to T, bit for bit; then side 0
 * takes the rounded values, so the pair holds the same numbers again for
 * the ops that read it next. */
static void expect_rounded(const char *what, const pair *p) {
    float *f = tu_alloc_f(p->n), *want = tu_alloc_f(p->n);
    uint16_t *s = cnt_malloc((p->n ? p->n : 1) * sizeof *s);
    be->download(f, p->d[0], p->n * sizeof(float));
    be->download(s, p->d[1], p->n * sizeof(uint16_t));
    for (size_t i = 0; i < p->n; i++) {
        want[i] = round_t(f[i]);
        f[i] = from16(s[i]);
    }
    char label[200];
    snprintf(label, sizeof label, "%s (%s, layout %d): the fp32 op's result rounded once", what, type_name(),
             (int)ctx[0].layout);
    tu_assert_bitwise_equal_f(label, want, f, p->n);
    be->upload(p->d[0], want, p->n * sizeof(float));
    free(f);
    free(want);
    free(s);
}

/* Two fp32 outputs (one per side) of n values must be the same bits. */
static void expect_same32(const char *what, float *const d[2], size_t n) {
    float *a = tu_alloc_f(n), *b = tu_alloc_f(n);
    be->download(a, d[0], n * sizeof(float));
    be->download(b, d[1], n * sizeof(float));
    char label[200];
    snprintf(label, sizeof label, "%s (%s, layout %d): fp32 output", what, type_name(), (int)ctx[0].layout);
    tu_assert_bitwise_equal_f(label, a, b, n);
    free(a);
    free(b);
}

static void f32_new(float *d[2], size_t n) {
    for (int w = 0; w < 2; w++) d[w] = be->alloc(n * sizeof(float));
}

static void f32_free(float *d[2]) {
    for (int w = 0; w < 2; w++) be->free(d[w]);
}

/* fp32 parameters shared by both sides */
static float *param(rng *r, size_t n, double mean) {
    double *h = tu_alloc(n);
    tu_fill_normal(r, h, n, mean, 0.5);
    float *d = tu_dev_from_double(be, h, n);
    free(h);
    return d;
}

static void set_context(int layout, backend_dtype t) {
    T = t;
    backend_math math = t == BACKEND_DTYPE_BF16 ? BACKEND_MATH_BF16 : BACKEND_MATH_FP16;
    ctx[0] = (backend_ctx){.layout = (backend_layout)layout, .math = math, .act = BACKEND_DTYPE_FP32};
    ctx[1] = ctx[0];
    ctx[1].act = t;
}

static int last_layout(void) { return be->block_c > 0 ? BACKEND_LAYOUT_BLOCKED : BACKEND_LAYOUT_NHWC; }

#define FOR_TYPES_AND_LAYOUTS                                                                  \
    for (int t_ = BACKEND_DTYPE_BF16; t_ <= BACKEND_DTYPE_FP16; t_++)                          \
        for (int l_ = BACKEND_LAYOUT_NCHW; l_ <= last_layout() && (set_context(l_, (backend_dtype)t_), 1); l_++)

/* ---------------------------------------------------------------- the ops */

static void test_conv(void **state) {
    (void)state;
    FOR_TYPES_AND_LAYOUTS {
        rng r;
        rng_seed(&r, 11, (uint64_t)l_);
        conv_params p = {.N = 2, .C = 16, .H = 7, .W = 6, .K = 16, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                         .pad_h = 1, .pad_w = 1};
        assert_int_equal(conv_params_init(&p), CNT_OK);
        pair x = pair_new(&r, conv_in_count(&p), 0.0), y = pair_new(&r, conv_out_count(&p), 0.0);
        float *wt = param(&r, conv_w_count(&p), 0.0), *dw[2];
        f32_new(dw, conv_w_count(&p));
        for (int w = 0; w < 2; w++) ctx[w].math = BACKEND_MATH_FP32; /* fp32 math: rounding by storage only */
        for (int w = 0; w < 2; w++) be->conv_fwd(&ctx[w], &p, x.d[w], wt, y.d[w]);
        expect_rounded("conv_fwd, fp32 math", &y);
        set_context(l_, (backend_dtype)t_);
        for (int w = 0; w < 2; w++) be->conv_fwd(&ctx[w], &p, x.d[w], wt, y.d[w]);
        expect_rounded("conv_fwd", &y);
        for (int acc = 0; acc < 2; acc++) {
            pair dx = pair_new(&r, conv_in_count(&p), 0.0);
            for (int w = 0; w < 2; w++) be->conv_bwd_data(&ctx[w], &p, y.d[w], wt, dx.d[w], acc, 0);
            expect_rounded(acc ? "conv_bwd_data accumulate" : "conv_bwd_data", &dx);
            pair_free(&dx);
        }
        for (int w = 0; w < 2; w++) be->conv_bwd_filter(&ctx[w], &p, x.d[w], y.d[w], dw[w]);
        expect_same32("conv_bwd_filter dw", dw, conv_w_count(&p));
        pair_free(&x);
        pair_free(&y);
        f32_free(dw);
        be->free(wt);
    }
}

static void test_bias_and_bn(void **state) {
    (void)state;
    FOR_TYPES_AND_LAYOUTS {
        rng r;
        rng_seed(&r, 12, (uint64_t)l_);
        int N = 3, C = 16, HW = 10;
        size_t n = (size_t)N * C * HW;
        float *b = param(&r, (size_t)C, 0.0), *db[2], *gamma = param(&r, (size_t)C, 1.0),
              *beta = param(&r, (size_t)C, 0.0), *mean[2], *var[2], *sm[2], *si[2], *dg[2], *dbeta[2];
        f32_new(db, (size_t)C);
        f32_new(mean, (size_t)C);
        f32_new(var, (size_t)C);
        f32_new(sm, (size_t)C);
        f32_new(si, (size_t)C);
        f32_new(dg, (size_t)C);
        f32_new(dbeta, (size_t)C);
        pair x = pair_new(&r, n, 0.5), y = pair_new(&r, n, 0.0), z = pair_new(&r, n, 0.0), dy = pair_new(&r, n, 0.0);
        for (int w = 0; w < 2; w++) be->bias_fwd(&ctx[w], N, C, HW, b, x.d[w]);
        expect_rounded("bias_fwd (in place)", &x);
        for (int w = 0; w < 2; w++) be->bias_bwd(&ctx[w], N, C, HW, dy.d[w], db[w]);
        expect_same32("bias_bwd db", db, (size_t)C);
        for (int w = 0; w < 2; w++) {
            be->upload(mean[w], (float[16]){0}, (size_t)C * sizeof(float));
            be->bn_fwd_train(&ctx[w], N, C, HW, x.d[w], gamma, beta, y.d[w], mean[w], var[w], 0.1f, 1e-5f, sm[w],
                             si[w]);
        }
        expect_rounded("bn_fwd_train", &y);
        expect_same32("bn_fwd_train save_mean", sm, (size_t)C);
        expect_same32("bn_fwd_train save_invstd", si, (size_t)C);
        expect_same32("bn_fwd_train running_var", var, (size_t)C);
        for (int w = 0; w < 2; w++) be->bn_fwd_infer(&ctx[w], N, C, HW, x.d[w], gamma, beta, y.d[w], mean[w], var[w], 1e-5f);
        expect_rounded("bn_fwd_infer", &y);
        for (int relu = 0; relu < 2; relu++) {
            for (int w = 0; w < 2; w++)
                be->bn_act_fwd_train(&ctx[w], N, C, HW, x.d[w], z.d[w], relu, gamma, beta, y.d[w], mean[w], var[w],
                                     0.1f, 1e-5f, sm[w], si[w], NULL);
            expect_rounded(relu ? "bn_act_fwd_train + z, relu" : "bn_act_fwd_train + z", &y);
            for (int w = 0; w < 2; w++)
                be->bn_act_fwd_infer(&ctx[w], N, C, HW, x.d[w], z.d[w], relu, gamma, beta, y.d[w], mean[w], var[w],
                                     1e-5f);
            expect_rounded(relu ? "bn_act_fwd_infer + z, relu" : "bn_act_fwd_infer + z", &y);
        }
        for (int acc = 0; acc < 2; acc++) {
            pair dx = pair_new(&r, n, 0.0);
            for (int w = 0; w < 2; w++)
                be->bn_bwd(&ctx[w], N, C, HW, x.d[w], dy.d[w], gamma, sm[w], si[w], 1e-5f, dx.d[w], dg[w], dbeta[w],
                           acc);
            expect_rounded(acc ? "bn_bwd dx accumulate" : "bn_bwd dx", &dx);
            expect_same32("bn_bwd dgamma", dg, (size_t)C);
            expect_same32("bn_bwd dbeta", dbeta, (size_t)C);
            /* the fused backward with the residual's gradient: apart, accumulating, and in dy itself */
            for (int mode = 0; mode < 3; mode++) {
                pair g = pair_new(&r, n, 0.0), dz = pair_new(&r, n, 0.0);
                for (int w = 0; w < 2; w++)
                    be->bn_act_bwd(&ctx[w], N, C, HW, x.d[w], y.d[w], g.d[w], 1, gamma, beta, sm[w], si[w], 1e-5f,
                                   dx.d[w], dg[w], dbeta[w], acc, mode == 2 ? g.d[w] : dz.d[w], mode == 1, NULL);
                char what[96];
                snprintf(what, sizeof what, "bn_act_bwd relu, dx acc %d, dz %s", acc,
                         mode == 0 ? "apart" : mode == 1 ? "accumulate" : "in dy");
                expect_rounded(what, &dx);
                expect_rounded(what, mode == 2 ? &g : &dz);
                expect_same32(what, dg, (size_t)C);
                pair_free(&g);
                pair_free(&dz);
            }
            pair_free(&dx);
        }
        pair_free(&x);
        pair_free(&y);
        pair_free(&z);
        pair_free(&dy);
        be->free(b);
        be->free(gamma);
        be->free(beta);
        float **all[] = {db, mean, var, sm, si, dg, dbeta};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) f32_free(all[k]);
    }
}

static void test_pool(void **state) {
    (void)state;
    static const tu_pool_case cases[] = {
        {POOL_MODE_MAX, 2, 16, 9, 9, 3, 3, 2, 2, 1, 1, 0, 0, 0},
        {POOL_MODE_AVG_INCLUDE_PAD, 2, 16, 8, 8, 3, 3, 1, 1, 1, 1, 0, 0, 0},
        {POOL_MODE_ADAPTIVE_AVG, 2, 16, 7, 7, 0, 0, 0, 0, 0, 0, 0, 1, 1},
    };
    FOR_TYPES_AND_LAYOUTS {
        rng r;
        rng_seed(&r, 13, (uint64_t)l_);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            pool_params p = tu_pool_params(&cases[k]);
            size_t nx = (size_t)p.N * p.C * p.H * p.W, ny = (size_t)p.N * p.C * p.P * p.Q;
            pair x = pair_new(&r, nx, 0.0), y = pair_new(&r, ny, 0.0), dy = pair_new(&r, ny, 0.0);
            for (int w = 0; w < 2; w++) be->pool_fwd(&ctx[w], &p, x.d[w], y.d[w], NULL);
            expect_rounded("pool_fwd", &y);
            for (int acc = 0; acc < 2; acc++) {
                pair dx = pair_new(&r, nx, 0.0);
                for (int w = 0; w < 2; w++) be->pool_bwd(&ctx[w], &p, x.d[w], y.d[w], dy.d[w], dx.d[w], acc, NULL);
                expect_rounded(acc ? "pool_bwd accumulate" : "pool_bwd", &dx);
                pair_free(&dx);
            }
            pair_free(&x);
            pair_free(&y);
            pair_free(&dy);
        }
    }
}

/* A linear layer's three GEMMs (activation operands as gemm's `act` names
 * them), with a row stride wider than the rows: the values between C's
 * rows are not C's and stay as they were. */
static void test_gemm(void **state) {
    (void)state;
    FOR_TYPES_AND_LAYOUTS {
        if (l_ != BACKEND_LAYOUT_NCHW) continue; /* gemm does not depend on the layout */
        rng r;
        rng_seed(&r, 14, 0);
        int Nb = 5, in = 12, out = 7, ld = out + 3;
        pair x = pair_new(&r, (size_t)Nb * in, 0.0), y = pair_new(&r, (size_t)Nb * ld, 0.0);
        float *wt = param(&r, (size_t)out * in, 0.0), *dw[2];
        f32_new(dw, (size_t)out * in);
        for (int beta = 0; beta < 2; beta++) {
            for (int w = 0; w < 2; w++)
                be->gemm(&ctx[w], 0, 1, Nb, out, in, 1.0f, x.d[w], in, wt, in, (float)beta, y.d[w], ld,
                         GEMM_ACT_A | GEMM_ACT_C);
            expect_rounded(beta ? "gemm y += x W^T (row gaps kept)" : "gemm y = x W^T (row gaps kept)", &y);
        }
        for (int w = 0; w < 2; w++)
            be->gemm(&ctx[w], 1, 0, out, in, Nb, 1.0f, y.d[w], ld, x.d[w], in, 0.0f, dw[w], in,
                     GEMM_ACT_A | GEMM_ACT_B);
        expect_same32("gemm dW = dy^T x", dw, (size_t)out * in);
        for (int w = 0; w < 2; w++)
            be->gemm(&ctx[w], 0, 0, Nb, in, out, 1.0f, y.d[w], ld, wt, in, 1.0f, x.d[w], in, GEMM_ACT_A | GEMM_ACT_C);
        expect_rounded("gemm dx += dy W", &x);
        pair_free(&x);
        pair_free(&y);
        f32_free(dw);
        be->free(wt);
    }
}

static void test_elementwise(void **state) {
    (void)state;
    FOR_TYPES_AND_LAYOUTS {
        if (l_ != BACKEND_LAYOUT_NCHW) continue; /* elementwise: no layout */
        rng r;
        rng_seed(&r, 15, 0);
        /* across the chunk size of the CPU's loops, and past the size that goes parallel */
        size_t sizes[] = {1, 1023, 1025, 70001};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            pair a = pair_new(&r, n, 0.0), b = pair_new(&r, n, 0.0), y = pair_new(&r, n, 0.0);
            for (int w = 0; w < 2; w++) be->relu_fwd(&ctx[w], n, a.d[w], y.d[w]);
            expect_rounded("relu_fwd", &y);
            for (int acc = 0; acc < 2; acc++) {
                for (int w = 0; w < 2; w++) be->relu_bwd(&ctx[w], n, y.d[w], b.d[w], a.d[w], acc);
                expect_rounded(acc ? "relu_bwd accumulate" : "relu_bwd", &a);
            }
            for (int w = 0; w < 2; w++) be->add(&ctx[w], n, a.d[w], b.d[w], y.d[w]);
            expect_rounded("add", &y);
            for (int w = 0; w < 2; w++) be->add(&ctx[w], n, a.d[w], y.d[w], y.d[w]);
            expect_rounded("add in place", &y);
            float *mask = be->alloc(n * sizeof(float));
            be->dropout_mask(n, 0.3f, 7, mask);
            for (int acc = 0; acc < 2; acc++) {
                for (int w = 0; w < 2; w++) be->mul(&ctx[w], n, a.d[w], mask, y.d[w], acc);
                expect_rounded(acc ? "mul by a dropout mask, accumulate" : "mul by a dropout mask", &y);
            }
            be->free(mask);
            pair_free(&a);
            pair_free(&b);
            pair_free(&y);
        }
    }
}

/* Slices of channels, the other channels of dst left as they were. */
static void test_channel_copy(void **state) {
    (void)state;
    FOR_TYPES_AND_LAYOUTS {
        rng r;
        rng_seed(&r, 16, (uint64_t)l_);
        for (size_t k = 0; k < tu_n_channel_copy_cases; k++) {
            const int *c = tu_channel_copy_cases[k];
            int N = c[0], C = c[1], HW = c[2], sC = c[3], so = c[4], dC = c[5], doff = c[6];
            pair src = pair_new(&r, (size_t)N * sC * HW, 0.0), dst = pair_new(&r, (size_t)N * dC * HW, 0.0);
            for (int acc = 0; acc < 2; acc++) {
                for (int w = 0; w < 2; w++) be->channel_copy(&ctx[w], N, C, HW, src.d[w], sC, so, dst.d[w], dC, doff, acc);
                char what[96];
                snprintf(what, sizeof what, "channel_copy case %zu acc %d", k, acc);
                expect_rounded(what, &dst);
            }
            pair_free(&src);
            pair_free(&dst);
        }
    }
}

/* The net's input (fp32 NCHW) into its layout and type, its logits back. */
static void test_convert_types(void **state) {
    (void)state;
    FOR_TYPES_AND_LAYOUTS {
        rng r;
        rng_seed(&r, 17, (uint64_t)l_);
        int N = 2, C = 16, HW = 9;
        size_t n = (size_t)N * C * HW;
        pair src = pair_new(&r, n, 0.0), dst = pair_new(&r, n, 0.0);
        float *in32 = src.d[0];
        for (int acc = 0; acc < 2; acc++) {
            /* side 0: fp32 to fp32; side 1: the same fp32 source into T */
            be->convert_layout(N, C, HW, in32, BACKEND_DTYPE_FP32, dst.d[0], BACKEND_DTYPE_FP32, l_, 1, acc);
            be->convert_layout(N, C, HW, in32, BACKEND_DTYPE_FP32, dst.d[1], T, l_, 1, acc);
            expect_rounded(acc ? "convert_layout fp32 -> 16 bits, accumulate" : "convert_layout fp32 -> 16 bits",
                           &dst);
        }
        /* back to fp32 NCHW: exact */
        float *back[2];
        f32_new(back, n);
        be->convert_layout(N, C, HW, dst.d[0], BACKEND_DTYPE_FP32, back[0], BACKEND_DTYPE_FP32, l_, 0, 0);
        be->convert_layout(N, C, HW, dst.d[1], T, back[1], BACKEND_DTYPE_FP32, l_, 0, 0);
        float *h0 = tu_alloc_f(n), *h1 = tu_alloc_f(n);
        be->download(h0, back[0], n * sizeof(float));
        be->download(h1, back[1], n * sizeof(float));
        for (size_t i = 0; i < n; i++) h0[i] = round_t(h0[i]);
        tu_assert_bitwise_equal_f("convert_layout 16 bits -> fp32", h0, h1, n);
        free(h0);
        free(h1);
        f32_free(back);
        pair_free(&src);
        pair_free(&dst);
    }
}

/* What stores which types, and what the trainer's key asks for. */
static void test_types_and_config(void **state) {
    (void)state;
    assert_true(be->act_types & (1u << BACKEND_DTYPE_BF16));
    assert_true(be->act_types & (1u << BACKEND_DTYPE_FP16));
    assert_int_equal(backend_act_choose(be, BACKEND_MATH_BF16), BACKEND_DTYPE_BF16);
    assert_int_equal(backend_act_choose(be, BACKEND_MATH_FP16), BACKEND_DTYPE_FP16);
    assert_int_equal(backend_act_choose(be, BACKEND_MATH_TF32), BACKEND_DTYPE_FP32);
    backend fp32_only = *be;
    fp32_only.act_types = 1u << BACKEND_DTYPE_FP32;
    fp32_only.act_auto = 0;
    assert_int_equal(backend_act_choose(&fp32_only, BACKEND_MATH_BF16), BACKEND_DTYPE_FP32);
    assert_int_equal(backend_act_check(&fp32_only, BACKEND_DTYPE_BF16), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "train.activations = fp32"));
    assert_int_equal(backend_act_check(&fp32_only, BACKEND_DTYPE_FP32), CNT_OK);
    /* a backend that stores them but is not measured faster (the CUDA one): auto keeps fp32, asking works */
    backend not_auto = *be;
    not_auto.act_auto = 0;
    assert_int_equal(backend_act_choose(&not_auto, BACKEND_MATH_BF16), BACKEND_DTYPE_FP32);
    assert_int_equal(backend_act_check(&not_auto, BACKEND_DTYPE_BF16), CNT_OK);

    config c;
    config_defaults(&c);
    assert_int_equal(config_activations(&c, be), BACKEND_DTYPE_FP32); /* fp32 precision */
    assert_int_equal(config_override(&c, "train.precision=bf16"), CNT_OK);
    assert_int_equal(config_activations(&c, be), BACKEND_DTYPE_BF16);
    assert_int_equal(config_activations(&c, &fp32_only), BACKEND_DTYPE_FP32);
    assert_int_equal(config_activations(&c, &not_auto), BACKEND_DTYPE_FP32);
    assert_int_equal(config_override(&c, "train.activations=fp32"), CNT_OK);
    assert_int_equal(config_activations(&c, be), BACKEND_DTYPE_FP32);
    assert_int_equal(config_override(&c, "train.activations=bf16"), CNT_OK);
    assert_int_equal(config_validate(&c), CNT_OK);
    assert_int_equal(config_override(&c, "train.precision=fp16"), CNT_OK);
    assert_int_equal(config_validate(&c), CNT_ERR); /* bf16 activations with fp16 math */
    assert_non_null(strstr(cnt_err_msg(), "train.activations = bf16"));
    assert_int_equal(config_override(&c, "train.activations=half"), CNT_ERR);
}

/* ---------------------------------------------------------------- whole nets */

typedef struct run16 {
    net *nt;
    float *x, *dlogits;
    size_t n_in, n_out;
} run16;

static run16 run16_new(const char *model, int c, int h, int w, int layout, backend_math math, backend_dtype act,
                       int nb) {
    run16 r = {0};
    zoo_options zo = {.dropout = 0.0f, .math = math, .activations = act};
    r.nt = zoo_create(be, model, &zo, c, h, w, 10, layout, nb);
    assert_non_null(r.nt);
    net_init_params(r.nt, 5);
    rng g;
    rng_seed(&g, 99, 0);
    r.n_in = (size_t)nb * c * h * w;
    r.n_out = (size_t)nb * 10;
    double *hx = tu_alloc(r.n_in), *hd = tu_alloc(r.n_out);
    tu_fill_normal(&g, hx, r.n_in, 0.0, 1.0);
    tu_fill_normal(&g, hd, r.n_out, 0.0, 0.1);
    r.x = tu_dev_from_double(be, hx, r.n_in);
    r.dlogits = tu_dev_from_double(be, hd, r.n_out);
    free(hx);
    free(hd);
    return r;
}

static void run16_free(run16 *r) {
    be->free(r->x);
    be->free(r->dlogits);
    net_free(r->nt);
}

/* Three nets from the same weights on the same batch: R in fp32, A in T's
 * math with fp32 activations (the rounding of convolution operands alone),
 * B in T's math with T activations. B's logits and (training) parameter
 * gradients must be as far from R's as A's are, within `factor` (plus a
 * floor), and not A's bits: 16-bit storage adds its share of rounding and
 * no more. Both distances come from rounding only: at initialisation,
 * with a small batch, batch norm's backward subtracts nearly equal terms
 * and magnifies them (ResNet-20's first gradients are some 25% from fp32's
 * in A already); a wiring error (a tensor read as the wrong type, a
 * conversion missed) makes B's order 1 or NaN. */
static void net16_close(const char *model, int c, int h, int w, int nb, int training, int last_type,
                        double factor) {
    for (int t = BACKEND_DTYPE_BF16; t <= last_type; t++)
        for (int layout = BACKEND_LAYOUT_NCHW; layout <= last_layout(); layout += last_layout()) {
            backend_math math = t == BACKEND_DTYPE_BF16 ? BACKEND_MATH_BF16 : BACKEND_MATH_FP16;
            run16 rs[3] = {run16_new(model, c, h, w, layout, BACKEND_MATH_FP32, BACKEND_DTYPE_FP32, nb),
                           run16_new(model, c, h, w, layout, math, BACKEND_DTYPE_FP32, nb),
                           run16_new(model, c, h, w, layout, math, (backend_dtype)t, nb)};
            size_t no = rs[0].n_out, np = rs[0].nt->n_params;
            float *l[3], *g[3];
            for (int k = 0; k < 3; k++) {
                l[k] = tu_alloc_f(no);
                g[k] = tu_alloc_f(np);
                net_forward(rs[k].nt, rs[k].x, nb, training);
                be->download(l[k], net_logits(rs[k].nt), no * sizeof(float));
                if (!training) continue;
                net_backward(rs[k].nt, rs[k].dlogits, NULL);
                be->download(g[k], rs[k].nt->grads, np * sizeof(float));
            }
            double la = tu_rel_l2_f(l[0], l[1], no), lb = tu_rel_l2_f(l[0], l[2], no);
            double ga = tu_rel_l2_f(g[0], g[1], np), gb = tu_rel_l2_f(g[0], g[2], np);
            print_message("%s %s layout %d %s: from fp32, logits %.2e (16-bit math alone %.2e), gradients %.2e "
                          "(%.2e)\n", model, t == BACKEND_DTYPE_BF16 ? "bf16" : "fp16", layout,
                          training ? "training" : "evaluation", lb, la, gb, ga);
            assert_true(lb < factor * la + 1e-3);
            assert_true(tu_rel_l2_f(l[1], l[2], no) > 0); /* B's activations were rounded */
            if (training) assert_true(gb < factor * ga + 1e-3);
            for (int k = 0; k < 3; k++) {
                free(l[k]);
                free(g[k]);
                run16_free(&rs[k]);
            }
        }
}

static void test_resnet20_16bit(void **state) {
    (void)state;
    net16_close("resnet20", 3, 32, 32, 8, 1, BACKEND_DTYPE_FP16, 1.5);
}

/* Concats, average pools, dropout: Inception V3 at its smallest input,
 * evaluated (its last batch norms see 1x1 images: in training, with a
 * batch this small, they normalise two values and the comparison means
 * nothing), in bf16 (evaluated untrained, with the running statistics at
 * their start, its activations grow past fp16's 65504: inf in A too). */
static void test_inception_16bit(void **state) {
    (void)state;
    net16_close("inception_v3", 3, 75, 75, 2, 0, BACKEND_DTYPE_BF16, 1.5);
}

/* The activations' memory halves (the input's copy and the fp32 logits
 * added); parameters, gradients and statistics do not change; the CPU's
 * workspace counts its conversion scratch. */
static void test_memory_estimate(void **state) {
    (void)state;
    net_memory m[2];
    for (int k = 0; k < 2; k++) {
        net *nt = net_create(be, 3, 32, 32, 10);
        net_set_math(nt, BACKEND_MATH_BF16);
        net_set_activations(nt, k ? BACKEND_DTYPE_BF16 : BACKEND_DTYPE_FP32);
        zoo_options zo = {.dropout = -1.0f, .math = BACKEND_MATH_BF16, .activations = k ? BACKEND_DTYPE_BF16 : 0};
        int out, aux;
        assert_int_equal(zoo_build(nt, "resnet20", &zo, &out, &aux), CNT_OK);
        net_memory_estimate(nt, 64, &m[k]);
        net_memory fin;
        assert_int_equal(net_finalize(nt, out, aux, 64), CNT_OK);
        net_memory_estimate(nt, 64, &fin);
        assert_int_equal(fin.activations, m[k].activations); /* the estimate is what finalize allocates */
        net_free(nt);
    }
    print_message("resnet20 batch 64: activations %zu bytes in fp32, %zu in bf16\n", m[0].activations,
                  m[1].activations);
    assert_int_equal(m[0].params, m[1].params);
    assert_int_equal(m[0].grads, m[1].grads);
    assert_true(m[1].activations < 0.52 * m[0].activations && m[1].activations > 0.48 * m[0].activations);
    /* the CPU's conversion scratch: six fp32 copies of the largest activation (64 x 16 x 32 x 32) */
    assert_true(m[1].workspace >= m[0].workspace + 6 * (size_t)64 * 16 * 32 * 32 * sizeof(float));
}

int main(void) {
    be = backend_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_bias_and_bn),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_channel_copy),
        cmocka_unit_test(test_convert_types),
        cmocka_unit_test(test_types_and_config),
        cmocka_unit_test(test_resnet20_16bit),
        cmocka_unit_test(test_inception_16bit),
        cmocka_unit_test(test_memory_estimate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
