/*
 * tests/test_gradcheck.c - the reference's backward ops against finite differences.
 *
 * For every differentiable op of tests/support/ref.h, the loss is a random
 * linear functional of the forward output, L = sum(g * y) with random g, so the
 * analytic gradient of L with respect to an input is that op's backward applied
 * to g. tu_gradcheck() compares it with central differences of L in double.
 * Also checked here: that accumulate = 1 adds to what an output held and 0
 * overwrites it, a few forward values computed by hand (the semantics the
 * gradients cannot see: pooling divisors, running statistics, the loss value,
 * the SGD step), and that the comparison helpers really fail on wrong data.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/check.h"
#include "common/rng.h"
#include "model/backend.h"
#include "tests/support/ref.h"
#include "tests/support/testutil.h"

/* Finite differences in double: the rounding noise of L (about 1e-16 * |L|
 * relative, divided by a 2e-6 step) stays below these. */
#define GC_RTOL 1e-5
#define GC_ATOL 1e-6
#define GC_POINTS 80

/* One op under test: fwd() computes y from in[]; L = sum(g * y). */
typedef struct gc_ctx {
    void (*fwd)(struct gc_ctx *c);
    double *in[4];
    double *y, *g;
    size_t ny;
    const conv_params *cp;
    const pool_params *pp;
    int N, C, HW, K;   /* shapes of the elementwise, bias, bn, gemm and concat cases */
    int C2;            /* second concat input's channels */
    double *scratch[4];
} gc_ctx;

static double gc_loss(void *vctx) {
    gc_ctx *c = vctx;
    c->fwd(c);
    return tu_dot(c->g, c->y, c->ny);
}

/* A fresh ctx with y and a random g of ny values. */
static void gc_init(gc_ctx *c, void (*fwd)(gc_ctx *), size_t ny, rng *r) {
    memset(c, 0, sizeof *c);
    c->fwd = fwd;
    c->ny = ny;
    c->y = tu_alloc(ny);
    c->g = tu_alloc(ny);
    tu_fill_uniform(r, c->g, ny, -1.0, 1.0);
}

static void gc_free(gc_ctx *c) {
    free(c->y);
    free(c->g);
    for (int i = 0; i < 4; i++) {
        free(c->in[i]);
        free(c->scratch[i]);
    }
}

/* ---------------------------------------------------------------- convolution */

static void fwd_conv(gc_ctx *c) { ref_conv_fwd(c->cp, c->in[0], c->in[1], c->y); }

typedef struct conv_case {
    int N, C, H, W, K, R, S, sh, sw, ph, pw;
} conv_case;

static void check_conv_case(const conv_case *cc, uint64_t seed) {
    conv_params p = {.N = cc->N, .C = cc->C, .H = cc->H, .W = cc->W, .K = cc->K, .R = cc->R, .S = cc->S,
                     .stride_h = cc->sh, .stride_w = cc->sw, .pad_h = cc->ph, .pad_w = cc->pw};
    assert_int_equal(conv_params_init(&p), CNT_OK);
    size_t nx = (size_t)p.N * p.C * p.H * p.W, nw = (size_t)p.K * p.C * p.R * p.S;
    size_t ny = (size_t)p.N * p.K * p.P * p.Q;
    rng r;
    rng_seed(&r, seed, 1);
    gc_ctx c;
    gc_init(&c, fwd_conv, ny, &r);
    c.cp = &p;
    c.in[0] = tu_alloc(nx);
    c.in[1] = tu_alloc(nw);
    tu_fill_uniform(&r, c.in[0], nx, -1.0, 1.0);
    tu_fill_uniform(&r, c.in[1], nw, -1.0, 1.0);
    double *dx = tu_alloc(nx), *dw = tu_alloc(nw);
    ref_conv_bwd_data(&p, c.g, c.in[1], dx, 0);
    ref_conv_bwd_filter(&p, c.in[0], c.g, dw);
    char what[160];
    snprintf(what, sizeof what, "conv dx N%d C%d %dx%d K%d %dx%d/%dx%d pad %dx%d", p.N, p.C, p.H, p.W, p.K, p.R,
             p.S, p.stride_h, p.stride_w, p.pad_h, p.pad_w);
    tu_gradcheck(what, gc_loss, &c, c.in[0], nx, dx, GC_POINTS, GC_RTOL, GC_ATOL);
    what[5] = 'w';
    tu_gradcheck(what, gc_loss, &c, c.in[1], nw, dw, GC_POINTS, GC_RTOL, GC_ATOL);
    free(dx);
    free(dw);
    gc_free(&c);
}

static void test_conv(void **state) {
    (void)state;
    static const conv_case cases[] = {
        {2, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1},  /* same-size 3x3 */
        {2, 3, 8, 9, 2, 3, 3, 2, 2, 1, 1},  /* stride 2, even and odd sizes */
        {1, 2, 9, 7, 3, 5, 5, 2, 2, 2, 2},  /* batch 1, 5x5 stride 2 */
        {2, 4, 5, 11, 3, 1, 7, 1, 1, 0, 3}, /* Inception 1x7, pad 0x3 */
        {2, 3, 9, 4, 2, 7, 1, 1, 1, 3, 0},  /* Inception 7x1, pad 3x0 */
        {2, 5, 7, 6, 3, 1, 1, 2, 2, 0, 0},  /* 1x1 stride 2 (ResNet downsample) */
        {3, 2, 6, 5, 2, 3, 2, 2, 1, 0, 1},  /* rectangular kernel, mixed strides */
        {1, 3, 11, 11, 2, 7, 7, 2, 2, 3, 3}, /* 7x7 stride 2 stem, odd input */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv_case(&cases[i], 100 + i);
}

/* ---------------------------------------------------------------- bias */

/* y = x + b[c] */
static void fwd_bias(gc_ctx *c) {
    memcpy(c->y, c->in[0], c->ny * sizeof(double));
    ref_bias_fwd(c->N, c->C, c->HW, c->in[1], c->y);
}

static void check_bias_case(int N, int C, int HW, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 2);
    size_t n = (size_t)N * C * HW;
    gc_ctx c;
    gc_init(&c, fwd_bias, n, &r);
    c.N = N, c.C = C, c.HW = HW;
    c.in[0] = tu_alloc(n);
    c.in[1] = tu_alloc((size_t)C);
    tu_fill_uniform(&r, c.in[0], n, -1.0, 1.0);
    tu_fill_uniform(&r, c.in[1], (size_t)C, -1.0, 1.0);
    double *db = tu_alloc((size_t)C);
    ref_bias_bwd(N, C, HW, c.g, db);
    tu_gradcheck("bias db", gc_loss, &c, c.in[1], (size_t)C, db, GC_POINTS, GC_RTOL, GC_ATOL);
    /* the input passes straight through: dx = dy */
    tu_gradcheck("bias dx", gc_loss, &c, c.in[0], n, c.g, GC_POINTS, GC_RTOL, GC_ATOL);
    free(db);
    gc_free(&c);
}

static void test_bias(void **state) {
    (void)state;
    check_bias_case(3, 4, 10, 1);
    check_bias_case(5, 7, 1, 2); /* a linear layer's bias */
}

/* ---------------------------------------------------------------- batch norm */

/* in[0] x, in[1] gamma, in[2] beta; running stats and saved stats are scratch. */
static void fwd_bn(gc_ctx *c) {
    ref_bn_fwd_train(c->N, c->C, c->HW, c->in[0], c->in[1], c->in[2], c->y, c->scratch[0], c->scratch[1], 0.1,
                     1e-5, c->scratch[2], c->scratch[3]);
}

static void check_bn_case(int N, int C, int HW, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 3);
    size_t n = (size_t)N * C * HW;
    gc_ctx c;
    gc_init(&c, fwd_bn, n, &r);
    c.N = N, c.C = C, c.HW = HW;
    c.in[0] = tu_alloc(n);
    c.in[1] = tu_alloc((size_t)C);
    c.in[2] = tu_alloc((size_t)C);
    for (int i = 0; i < 4; i++) c.scratch[i] = tu_alloc((size_t)C);
    tu_fill_normal(&r, c.in[0], n, 0.5, 2.0);
    tu_fill_uniform(&r, c.in[1], (size_t)C, 0.5, 1.5);
    tu_fill_uniform(&r, c.in[2], (size_t)C, -0.5, 0.5);
    fwd_bn(&c); /* saved statistics for backward */
    double *dx = tu_alloc(n), *dgamma = tu_alloc((size_t)C), *dbeta = tu_alloc((size_t)C);
    ref_bn_bwd(N, C, HW, c.in[0], c.g, c.in[1], c.scratch[2], c.scratch[3], dx, dgamma, dbeta, 0);
    char what[96];
    snprintf(what, sizeof what, "bn dx N%d C%d HW%d", N, C, HW);
    tu_gradcheck(what, gc_loss, &c, c.in[0], n, dx, GC_POINTS, GC_RTOL, GC_ATOL);
    snprintf(what, sizeof what, "bn dgamma N%d C%d HW%d", N, C, HW);
    tu_gradcheck(what, gc_loss, &c, c.in[1], (size_t)C, dgamma, GC_POINTS, GC_RTOL, GC_ATOL);
    snprintf(what, sizeof what, "bn dbeta N%d C%d HW%d", N, C, HW);
    tu_gradcheck(what, gc_loss, &c, c.in[2], (size_t)C, dbeta, GC_POINTS, GC_RTOL, GC_ATOL);
    free(dx);
    free(dgamma);
    free(dbeta);
    gc_free(&c);
}

static void test_bn_train(void **state) {
    (void)state;
    check_bn_case(4, 3, 5, 1);
    check_bn_case(1, 2, 9, 2);  /* batch 1: statistics over space only */
    check_bn_case(6, 4, 1, 3);  /* after a linear layer (HW = 1) */
    check_bn_case(2, 3, 2, 4);  /* M = 4: the batch terms dominate */
}

/* ---------------------------------------------------------------- pooling */

static void fwd_pool(gc_ctx *c) { ref_pool_fwd(c->pp, c->in[0], c->y); }

typedef struct pool_case {
    pool_mode mode;
    int N, C, H, W, R, S, sh, sw, ph, pw, ceil_mode, P, Q;
} pool_case;

static void check_pool_case(const pool_case *pc, uint64_t seed) {
    pool_params p = {.mode = pc->mode, .N = pc->N, .C = pc->C, .H = pc->H, .W = pc->W, .R = pc->R, .S = pc->S,
                     .stride_h = pc->sh, .stride_w = pc->sw, .pad_h = pc->ph, .pad_w = pc->pw,
                     .ceil_mode = pc->ceil_mode, .P = pc->P, .Q = pc->Q};
    assert_int_equal(pool_params_init(&p), CNT_OK);
    size_t nx = (size_t)p.N * p.C * p.H * p.W, ny = (size_t)p.N * p.C * p.P * p.Q;
    rng r;
    rng_seed(&r, seed, 4);
    gc_ctx c;
    gc_init(&c, fwd_pool, ny, &r);
    c.pp = &p;
    c.in[0] = tu_alloc(nx);
    /* distinct values: no two window elements within a finite-difference step */
    tu_fill_distinct(&r, c.in[0], nx, -2.0, 2.0);
    fwd_pool(&c);
    double *dx = tu_alloc(nx);
    ref_pool_bwd(&p, c.in[0], c.y, c.g, dx, 0);
    static const char *names[] = {"max", "avg incl pad", "avg excl pad", "adaptive avg"};
    char what[160];
    snprintf(what, sizeof what, "pool %s dx %dx%d win %dx%d/%dx%d pad %dx%d ceil %d -> %dx%d", names[p.mode], p.H,
             p.W, p.R, p.S, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.ceil_mode, p.P, p.Q);
    tu_gradcheck(what, gc_loss, &c, c.in[0], nx, dx, 2 * GC_POINTS, GC_RTOL, GC_ATOL);
    free(dx);
    gc_free(&c);
}

static void test_max_pool(void **state) {
    (void)state;
    static const pool_case cases[] = {
        {POOL_MODE_MAX, 2, 3, 8, 8, 3, 3, 2, 2, 1, 1, 0, 0, 0}, /* ResNet stem pool */
        {POOL_MODE_MAX, 2, 2, 6, 7, 2, 2, 2, 2, 0, 0, 0, 0, 0}, /* VGG 2x2, odd width floors */
        {POOL_MODE_MAX, 1, 3, 8, 9, 3, 3, 2, 2, 0, 0, 1, 0, 0}, /* ceil_mode, batch 1 */
        {POOL_MODE_MAX, 2, 2, 5, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0}, /* Inception 3x3/1 pad 1 */
        {POOL_MODE_MAX, 1, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 0, 0}, /* ceil_mode with padding */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_pool_case(&cases[i], 200 + i);
}

static void test_avg_pool(void **state) {
    (void)state;
    static const pool_case cases[] = {
        {POOL_MODE_AVG_INCLUDE_PAD, 2, 3, 5, 6, 3, 3, 1, 1, 1, 1, 0, 0, 0}, /* Inception branch pool */
        {POOL_MODE_AVG_EXCLUDE_PAD, 2, 3, 5, 6, 3, 3, 1, 1, 1, 1, 0, 0, 0},
        {POOL_MODE_AVG_INCLUDE_PAD, 1, 2, 8, 8, 3, 3, 2, 2, 1, 1, 1, 0, 0}, /* ceil_mode + pad */
        {POOL_MODE_AVG_EXCLUDE_PAD, 1, 2, 8, 8, 3, 3, 2, 2, 1, 1, 1, 0, 0},
        {POOL_MODE_AVG_INCLUDE_PAD, 2, 2, 7, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0},
        {POOL_MODE_AVG_INCLUDE_PAD, 1, 2, 17, 17, 5, 5, 3, 3, 0, 0, 0, 0, 0}, /* Inception aux 5x5/3 */
        {POOL_MODE_AVG_INCLUDE_PAD, 1, 2, 8, 9, 3, 3, 2, 2, 0, 0, 1, 0, 0},   /* ceil_mode, no pad */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_pool_case(&cases[i], 300 + i);
}

static void test_adaptive_avg_pool(void **state) {
    (void)state;
    static const pool_case cases[] = {
        {POOL_MODE_ADAPTIVE_AVG, 2, 3, 5, 5, 0, 0, 0, 0, 0, 0, 0, 3, 3}, /* overlapping windows */
        {POOL_MODE_ADAPTIVE_AVG, 2, 4, 7, 7, 0, 0, 0, 0, 0, 0, 0, 1, 1}, /* global average */
        {POOL_MODE_ADAPTIVE_AVG, 1, 2, 6, 9, 0, 0, 0, 0, 0, 0, 0, 4, 2}, /* rectangular, uneven */
        {POOL_MODE_ADAPTIVE_AVG, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 5, 6}, /* output larger than input */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_pool_case(&cases[i], 400 + i);
}

/* ---------------------------------------------------------------- linear via gemm */

/* y[N, K] = x[N, C] * W[K, C]^T; in[0] x, in[1] W */
static void fwd_linear(gc_ctx *c) {
    ref_gemm(0, 1, c->N, c->K, c->C, 1.0, c->in[0], c->C, c->in[1], c->C, 0.0, c->y, c->K);
}

static void test_linear(void **state) {
    (void)state;
    const int N = 5, C = 7, K = 4;
    rng r;
    rng_seed(&r, 5, 5);
    gc_ctx c;
    gc_init(&c, fwd_linear, (size_t)N * K, &r);
    c.N = N, c.C = C, c.K = K;
    c.in[0] = tu_alloc((size_t)N * C);
    c.in[1] = tu_alloc((size_t)K * C);
    tu_fill_uniform(&r, c.in[0], (size_t)N * C, -1.0, 1.0);
    tu_fill_uniform(&r, c.in[1], (size_t)K * C, -1.0, 1.0);
    double *dx = tu_alloc((size_t)N * C), *dW = tu_alloc((size_t)K * C);
    /* dx[N, C] = dy[N, K] * W[K, C]; dW[K, C] = dy^T[K, N] * x[N, C] */
    ref_gemm(0, 0, N, C, K, 1.0, c.g, K, c.in[1], C, 0.0, dx, C);
    ref_gemm(1, 0, K, C, N, 1.0, c.g, K, c.in[0], C, 0.0, dW, C);
    tu_gradcheck("linear dx", gc_loss, &c, c.in[0], (size_t)N * C, dx, GC_POINTS, GC_RTOL, GC_ATOL);
    tu_gradcheck("linear dW", gc_loss, &c, c.in[1], (size_t)K * C, dW, GC_POINTS, GC_RTOL, GC_ATOL);
    /* the same product through every transpose combination: x^T [C, N] and W^T [C, K] stored explicitly */
    double *xt = tu_alloc((size_t)C * N), *wt = tu_alloc((size_t)C * K), *y = tu_alloc((size_t)N * K);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++) xt[(size_t)j * N + i] = c.in[0][(size_t)i * C + j];
    for (int k = 0; k < K; k++)
        for (int j = 0; j < C; j++) wt[(size_t)j * K + k] = c.in[1][(size_t)k * C + j];
    fwd_linear(&c);
    ref_gemm(0, 0, N, K, C, 1.0, c.in[0], C, wt, K, 0.0, y, K);
    tu_assert_close("gemm NN", c.y, y, (size_t)N * K, 1e-14, 1e-14);
    ref_gemm(1, 0, N, K, C, 1.0, xt, N, wt, K, 0.0, y, K);
    tu_assert_close("gemm TN", c.y, y, (size_t)N * K, 1e-14, 1e-14);
    ref_gemm(1, 1, N, K, C, 1.0, xt, N, c.in[1], C, 0.0, y, K);
    tu_assert_close("gemm TT", c.y, y, (size_t)N * K, 1e-14, 1e-14);
    free(xt);
    free(wt);
    free(y);
    free(dx);
    free(dW);
    gc_free(&c);
}

/* ---------------------------------------------------------------- elementwise */

static void fwd_relu(gc_ctx *c) { ref_relu_fwd(c->ny, c->in[0], c->y); }

static void test_relu(void **state) {
    (void)state;
    const size_t n = 300;
    rng r;
    rng_seed(&r, 6, 6);
    gc_ctx c;
    gc_init(&c, fwd_relu, n, &r);
    c.in[0] = tu_alloc(n);
    /* |x| >= 0.05 keeps every point away from the kink at 0 */
    tu_fill_uniform(&r, c.in[0], n, 0.05, 1.0);
    for (size_t i = 0; i < n; i++)
        if (rng_uniform(&r) < 0.5f) c.in[0][i] = -c.in[0][i];
    fwd_relu(&c);
    double *dx = tu_alloc(n);
    ref_relu_bwd(n, c.y, c.g, dx, 0);
    tu_gradcheck("relu dx", gc_loss, &c, c.in[0], n, dx, n, GC_RTOL, GC_ATOL);
    free(dx);
    gc_free(&c);
}

/* residual: y = a + b; both inputs receive dy through axpy(1, dy) */
static void fwd_add(gc_ctx *c) { ref_add(c->ny, c->in[0], c->in[1], c->y); }

static void test_residual_add(void **state) {
    (void)state;
    const size_t n = 120;
    rng r;
    rng_seed(&r, 7, 7);
    gc_ctx c;
    gc_init(&c, fwd_add, n, &r);
    c.in[0] = tu_alloc(n);
    c.in[1] = tu_alloc(n);
    tu_fill_uniform(&r, c.in[0], n, -1.0, 1.0);
    tu_fill_uniform(&r, c.in[1], n, -1.0, 1.0);
    double *da = tu_alloc(n), *db = tu_alloc(n);
    ref_axpy(n, 1.0, c.g, da, 0);
    ref_axpy(n, 1.0, c.g, db, 0);
    tu_gradcheck("add da", gc_loss, &c, c.in[0], n, da, n, GC_RTOL, GC_ATOL);
    tu_gradcheck("add db", gc_loss, &c, c.in[1], n, db, n, GC_RTOL, GC_ATOL);
    free(da);
    free(db);
    gc_free(&c);
}

/* concat: y[N, C + C2, HW] = [a[N, C, HW], b[N, C2, HW]] */
static void fwd_concat(gc_ctx *c) {
    int total = c->C + c->C2;
    ref_channel_copy(c->N, c->C, c->HW, c->in[0], c->C, 0, c->y, total, 0, 0);
    ref_channel_copy(c->N, c->C2, c->HW, c->in[1], c->C2, 0, c->y, total, c->C, 0);
}

static void test_concat(void **state) {
    (void)state;
    const int N = 3, C = 2, C2 = 3, HW = 6;
    rng r;
    rng_seed(&r, 8, 8);
    gc_ctx c;
    gc_init(&c, fwd_concat, (size_t)N * (C + C2) * HW, &r);
    c.N = N, c.C = C, c.C2 = C2, c.HW = HW;
    c.in[0] = tu_alloc((size_t)N * C * HW);
    c.in[1] = tu_alloc((size_t)N * C2 * HW);
    tu_fill_uniform(&r, c.in[0], (size_t)N * C * HW, -1.0, 1.0);
    tu_fill_uniform(&r, c.in[1], (size_t)N * C2 * HW, -1.0, 1.0);
    double *da = tu_alloc((size_t)N * C * HW), *db = tu_alloc((size_t)N * C2 * HW);
    ref_channel_copy(N, C, HW, c.g, C + C2, 0, da, C, 0, 0);
    ref_channel_copy(N, C2, HW, c.g, C + C2, C, db, C2, 0, 0);
    tu_gradcheck("concat da", gc_loss, &c, c.in[0], (size_t)N * C * HW, da, GC_POINTS, GC_RTOL, GC_ATOL);
    tu_gradcheck("concat db", gc_loss, &c, c.in[1], (size_t)N * C2 * HW, db, GC_POINTS, GC_RTOL, GC_ATOL);
    free(da);
    free(db);
    gc_free(&c);
}

/* dropout: y = x * mask; in[1] is the mask */
static void fwd_dropout(gc_ctx *c) { ref_mul(c->ny, c->in[0], c->in[1], c->y, 0); }

static void test_dropout(void **state) {
    (void)state;
    const size_t n = 200;
    rng r;
    rng_seed(&r, 9, 9);
    gc_ctx c;
    gc_init(&c, fwd_dropout, n, &r);
    c.in[0] = tu_alloc(n);
    c.in[1] = tu_alloc(n);
    tu_fill_uniform(&r, c.in[0], n, -1.0, 1.0);
    ref_dropout_mask(n, 0.3f, 1234, c.in[1]);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) kept += c.in[1][i] != 0.0;
    assert_true(kept > n / 2 && kept < n - n / 10); /* about 70% kept */
    double *dx = tu_alloc(n);
    ref_mul(n, c.g, c.in[1], dx, 0);
    tu_gradcheck("dropout dx", gc_loss, &c, c.in[0], n, dx, n, GC_RTOL, GC_ATOL);
    free(dx);
    gc_free(&c);
}

/* ---------------------------------------------------------------- loss */

typedef struct xent_ctx {
    int N, K;
    double *logits, *dlogits;
    const int *labels;
    double smoothing;
} xent_ctx;

static double xent_loss(void *vctx) {
    xent_ctx *c = vctx;
    double loss;
    ref_softmax_xent(c->N, c->K, c->logits, c->labels, c->smoothing, &loss, c->dlogits);
    return loss;
}

static void test_softmax_xent(void **state) {
    (void)state;
    const int N = 6, K = 5;
    const double smoothings[] = {0.0, 0.1};
    for (int t = 0; t < 2; t++) {
        rng r;
        rng_seed(&r, 10 + t, 10);
        int labels[6];
        tu_fill_labels(&r, labels, (size_t)N, K);
        double *logits = tu_alloc((size_t)N * K), *scratch = tu_alloc((size_t)N * K);
        double *dlogits = tu_alloc((size_t)N * K);
        tu_fill_normal(&r, logits, (size_t)N * K, 0.0, 3.0);
        xent_ctx c = {N, K, logits, scratch, labels, smoothings[t]};
        double loss;
        ref_softmax_xent(N, K, logits, labels, smoothings[t], &loss, dlogits);
        assert_true(loss > 0.0);
        char what[64];
        snprintf(what, sizeof what, "softmax_xent dlogits smoothing %.1f", smoothings[t]);
        tu_gradcheck(what, xent_loss, &c, logits, (size_t)N * K, dlogits, (size_t)N * K, GC_RTOL, GC_ATOL);
        free(logits);
        free(scratch);
        free(dlogits);
    }
}

/* ---------------------------------------------------------------- accumulate */

/* out = fill, then op(accumulate): with 1 the result must be fill + op's
 * overwrite result, with 0 it must be the overwrite result whatever out held. */
typedef void (*acc_op)(void *ctx, double *out, int accumulate);

static void check_accumulate(const char *what, acc_op op, void *ctx, size_t n, rng *r) {
    double *fresh = tu_alloc(n), *out = tu_alloc(n), *fill = tu_alloc(n), *want = tu_alloc(n);
    op(ctx, fresh, 0);
    double norm = 0.0;
    for (size_t i = 0; i < n; i++) norm += fabs(fresh[i]);
    assert_true(norm > 0.0); /* an all-zero result could not tell the modes apart */
    tu_fill_uniform(r, fill, n, -3.0, 3.0);
    memcpy(out, fill, n * sizeof(double));
    op(ctx, out, 0);
    char label[96];
    snprintf(label, sizeof label, "%s accumulate=0 overwrites", what);
    tu_assert_close(label, fresh, out, n, 1e-12, 1e-12);
    memcpy(out, fill, n * sizeof(double));
    op(ctx, out, 1);
    for (size_t i = 0; i < n; i++) want[i] = fill[i] + fresh[i];
    snprintf(label, sizeof label, "%s accumulate=1 adds", what);
    tu_assert_close(label, want, out, n, 1e-12, 1e-12);
    free(fresh);
    free(out);
    free(fill);
    free(want);
}

typedef struct acc_ctx {
    conv_params cp;
    pool_params pp;
    double *a, *b, *c, *d, *e;
    int N, C, HW;
} acc_ctx;

static void acc_conv_bwd_data(void *v, double *out, int acc) {
    acc_ctx *c = v;
    ref_conv_bwd_data(&c->cp, c->a, c->b, out, acc);
}
static void acc_pool_bwd(void *v, double *out, int acc) {
    acc_ctx *c = v;
    ref_pool_bwd(&c->pp, c->a, c->b, c->c, out, acc);
}
static void acc_bn_bwd(void *v, double *out, int acc) {
    acc_ctx *c = v;
    double dg[3], db[3];
    ref_bn_bwd(c->N, c->C, c->HW, c->a, c->b, c->c, c->d, c->e, out, dg, db, acc);
}
static void acc_relu_bwd(void *v, double *out, int acc) {
    acc_ctx *c = v;
    ref_relu_bwd((size_t)c->N, c->a, c->b, out, acc);
}
static void acc_axpy(void *v, double *out, int acc) {
    acc_ctx *c = v;
    ref_axpy((size_t)c->N, -1.5, c->a, out, acc);
}
static void acc_mul(void *v, double *out, int acc) {
    acc_ctx *c = v;
    ref_mul((size_t)c->N, c->a, c->b, out, acc);
}
static void acc_gemm(void *v, double *out, int acc) {
    acc_ctx *c = v;
    ref_gemm(1, 0, 3, 4, 5, 0.5, c->a, 3, c->b, 4, acc ? 1.0 : 0.0, out, 4);
}

static void test_accumulate(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 11, 11);
    acc_ctx c;
    memset(&c, 0, sizeof c);
    double *buf[5];
    for (int i = 0; i < 5; i++) {
        buf[i] = tu_alloc(4096);
        tu_fill_uniform(&r, buf[i], 4096, 0.5, 1.5);
    }
    c.a = buf[0], c.b = buf[1], c.c = buf[2], c.d = buf[3], c.e = buf[4];

    c.cp = (conv_params){.N = 2, .C = 3, .H = 5, .W = 6, .K = 2, .R = 3, .S = 3, .stride_h = 2, .stride_w = 1,
                         .pad_h = 1, .pad_w = 1};
    assert_int_equal(conv_params_init(&c.cp), CNT_OK);
    check_accumulate("conv_bwd_data", acc_conv_bwd_data, &c, 2 * 3 * 5 * 6, &r);

    for (int mode = POOL_MODE_MAX; mode <= POOL_MODE_ADAPTIVE_AVG; mode++) {
        c.pp = (pool_params){.mode = (pool_mode)mode, .N = 2, .C = 2, .H = 6, .W = 5, .R = 3, .S = 3,
                             .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .P = 3, .Q = 2};
        assert_int_equal(pool_params_init(&c.pp), CNT_OK);
        check_accumulate("pool_bwd", acc_pool_bwd, &c, 2 * 2 * 6 * 5, &r);
    }

    c.N = 4, c.C = 3, c.HW = 5;
    double *save = tu_alloc(12), *rm = tu_alloc(3), *rv = tu_alloc(3), *y = tu_alloc(60);
    tu_fill_normal(&r, c.a, 60, 0.0, 1.0);
    tu_fill_normal(&r, c.b, 60, 0.0, 1.0); /* dy with both signs */
    ref_bn_fwd_train(4, 3, 5, c.a, c.c, c.d, y, rm, rv, 0.1, 1e-5, save, save + 3);
    c.d = save, c.e = save + 3;
    check_accumulate("bn_bwd dx", acc_bn_bwd, &c, 60, &r);
    c.d = buf[3], c.e = buf[4];

    c.N = 64;
    check_accumulate("relu_bwd", acc_relu_bwd, &c, 64, &r);
    check_accumulate("axpy", acc_axpy, &c, 64, &r);
    check_accumulate("mul", acc_mul, &c, 64, &r);

    /* channel_copy writes only its slice: channels 1..2 of a 4-channel source
     * into channels 2..3 of a 5-channel destination; the rest keeps its values. */
    const int N = 3, HW = 7;
    for (int acc = 0; acc <= 1; acc++) {
        double *dst = tu_alloc(N * 5 * HW), *want = tu_alloc(N * 5 * HW);
        tu_fill_uniform(&r, dst, N * 5 * HW, -3.0, 3.0);
        memcpy(want, dst, N * 5 * HW * sizeof(double));
        for (int n = 0; n < N; n++)
            for (int ch = 0; ch < 2; ch++)
                for (int i = 0; i < HW; i++) {
                    double v = c.a[(n * 4 + 1 + ch) * HW + i];
                    double *w = &want[(n * 5 + 2 + ch) * HW + i];
                    *w = acc ? *w + v : v;
                }
        ref_channel_copy(N, 2, HW, c.a, 4, 1, dst, 5, 2, acc);
        tu_assert_close(acc ? "channel_copy accumulate=1" : "channel_copy accumulate=0", want, dst, N * 5 * HW,
                        1e-15, 0.0);
        free(dst);
        free(want);
    }
    check_accumulate("gemm beta", acc_gemm, &c, 3 * 4, &r);

    free(save);
    free(rm);
    free(rv);
    free(y);
    for (int i = 0; i < 5; i++) free(buf[i]);
}

/* ---------------------------------------------------------------- forward values by hand */

/* Semantics a gradient check cannot see, against numbers worked out by hand
 * (and matching torch): pooling divisors and windows, running statistics, the
 * loss value, the SGD step, the dropout mask. */
static void test_forward_by_hand(void **state) {
    (void)state;
    /* x = 1..9 on a 3x3 grid; 3x3 windows, stride 1, pad 1 -> 3x3 */
    double x[9], y[9], dx[9];
    for (int i = 0; i < 9; i++) x[i] = i + 1;
    pool_params p = {.mode = POOL_MODE_AVG_INCLUDE_PAD, .N = 1, .C = 1, .H = 3, .W = 3, .R = 3, .S = 3,
                     .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
    assert_int_equal(pool_params_init(&p), CNT_OK);
    assert_int_equal(p.P, 3);
    ref_pool_fwd(&p, x, y);
    /* corner (0,0): (1+2+4+5)/9; centre: 45/9; edge (0,1): (1+2+3+4+5+6)/9 */
    const double incl[9] = {12.0 / 9, 21.0 / 9, 16.0 / 9, 27.0 / 9, 45.0 / 9, 33.0 / 9, 24.0 / 9, 39.0 / 9, 28.0 / 9};
    tu_assert_close("avg pool include pad", incl, y, 9, 1e-14, 0.0);
    p.mode = POOL_MODE_AVG_EXCLUDE_PAD;
    ref_pool_fwd(&p, x, y);
    const double excl[9] = {12.0 / 4, 21.0 / 6, 16.0 / 4, 27.0 / 6, 45.0 / 9, 33.0 / 6, 24.0 / 4, 39.0 / 6, 28.0 / 4};
    tu_assert_close("avg pool exclude pad", excl, y, 9, 1e-14, 0.0);

    /* ceil_mode: 3x3 input, 2x2 windows stride 2 -> 2x2 (floor would give 1x1);
     * the clipped last window of include-pad divides by its 1 or 2 real cells
     * (torch clips the window to the padded input, here padding 0). */
    p = (pool_params){.mode = POOL_MODE_AVG_INCLUDE_PAD, .N = 1, .C = 1, .H = 3, .W = 3, .R = 2, .S = 2,
                      .stride_h = 2, .stride_w = 2, .ceil_mode = 1};
    assert_int_equal(pool_params_init(&p), CNT_OK);
    assert_int_equal(p.P, 2);
    assert_int_equal(p.Q, 2);
    ref_pool_fwd(&p, x, y);
    const double ceil_avg[4] = {12.0 / 4, 9.0 / 2, 15.0 / 2, 9.0};
    tu_assert_close("avg pool ceil_mode", ceil_avg, y, 4, 1e-14, 0.0);
    p.mode = POOL_MODE_MAX;
    ref_pool_fwd(&p, x, y);
    const double ceil_max[4] = {5, 6, 8, 9};
    tu_assert_close("max pool ceil_mode", ceil_max, y, 4, 0.0, 0.0);

    /* max pool ties: the first maximum scanning r then s gets the gradient */
    const double tie[9] = {1, 7, 7, 7, 7, 0, 0, 0, 0};
    p = (pool_params){.mode = POOL_MODE_MAX, .N = 1, .C = 1, .H = 3, .W = 3, .R = 2, .S = 2, .stride_h = 1,
                      .stride_w = 1};
    assert_int_equal(pool_params_init(&p), CNT_OK);
    const double dy4[4] = {1, 10, 100, 1000};
    ref_pool_bwd(&p, tie, NULL, dy4, dx, 0);
    /* windows: (0,0) {1,7,7,7} -> index 1; (0,1) {7,7,7,0} -> 1; (1,0) {7,7,0,0} -> 3; (1,1) {7,0,0,0} -> 4 */
    const double tie_dx[9] = {0, 11, 0, 100, 1000, 0, 0, 0, 0};
    tu_assert_close("max pool first maximum", tie_dx, dx, 9, 0.0, 0.0);

    /* adaptive 5 -> 3 over one row: windows [0,2), [1,4), [3,5) */
    double row[5] = {1, 2, 3, 4, 5}, out[3];
    p = (pool_params){.mode = POOL_MODE_ADAPTIVE_AVG, .N = 1, .C = 1, .H = 1, .W = 5, .P = 1, .Q = 3};
    ref_pool_fwd(&p, row, out);
    const double adaptive[3] = {1.5, 3.0, 4.5};
    tu_assert_close("adaptive avg pool 5 -> 3", adaptive, out, 3, 1e-14, 0.0);

    /* batch norm: one channel, values 1, 2, 3, 6: mean 3, biased var 3.5, unbiased 14/3 */
    double bx[4] = {1, 2, 3, 6}, by[4], gamma = 2.0, beta = 1.0, rmean = 1.0, rvar = 2.0, smean, sinv;
    ref_bn_fwd_train(4, 1, 1, bx, &gamma, &beta, by, &rmean, &rvar, 0.25, 0.5, &smean, &sinv);
    double stats[4] = {smean, sinv, rmean, rvar};
    const double want_stats[4] = {3.0, 0.5, 0.75 * 1.0 + 0.25 * 3.0, 0.75 * 2.0 + 0.25 * 14.0 / 3.0};
    tu_assert_close("bn saved and running stats", want_stats, stats, 4, 1e-14, 0.0);
    const double want_by[4] = {-1.0, 0.0, 1.0, 4.0};
    tu_assert_close("bn train output", want_by, by, 4, 1e-14, 1e-15);
    ref_bn_fwd_infer(4, 1, 1, bx, &gamma, &beta, by, &rmean, &rvar, 0.5);
    double infer[4];
    for (int i = 0; i < 4; i++) infer[i] = 2.0 * (bx[i] - rmean) / sqrt(rvar + 0.5) + 1.0;
    tu_assert_close("bn inference output", infer, by, 4, 1e-14, 1e-15);

    /* softmax cross-entropy: logits (0, 0, ln 2), label 2: softmax (1/4, 1/4, 1/2);
     * smoothing 0.3: target (0.1, 0.1, 0.8); loss = -(0.2 ln(1/4) + 0.8 ln(1/2)) */
    double logits[3] = {0.0, 0.0, log(2.0)}, dl[3], loss;
    int label = 2;
    ref_softmax_xent(1, 3, logits, &label, 0.3, &loss, dl);
    double got[4] = {loss, dl[0], dl[1], dl[2]};
    const double want_xent[4] = {-(0.2 * log(0.25) + 0.8 * log(0.5)), 0.15, 0.15, -0.3};
    tu_assert_close("softmax_xent smoothing 0.3", want_xent, got, 4, 1e-14, 1e-15);

    /* SGD, two steps on one value: param 1, grad 2 (scale 0.5 -> 1), wd 0.1, lr 0.1, momentum 0.9 */
    double param = 1.0, grad = 2.0, buf = 0.0;
    ref_sgd_update(1, &param, &grad, &buf, 0.1, 0.9, 0.1, 1, 0.5);
    /* g = 1 + 0.1 = 1.1; buf = 1.1; step = 1.1 + 0.99 = 2.09; param = 0.791 */
    double s1[2] = {param, buf};
    const double want_s1[2] = {0.791, 1.1};
    tu_assert_close("sgd nesterov step 1", want_s1, s1, 2, 1e-14, 0.0);
    ref_sgd_update(1, &param, &grad, &buf, 0.1, 0.9, 0.1, 1, 0.5);
    /* g = 1.0791; buf = 0.99 + 1.0791 = 2.0691; step = 1.0791 + 1.86219 = 2.94129 */
    double s2[2] = {param, buf};
    const double want_s2[2] = {0.791 - 0.294129, 2.0691};
    tu_assert_close("sgd nesterov step 2", want_s2, s2, 2, 1e-13, 0.0);
    param = 1.0, buf = 5.0;
    ref_sgd_update(1, &param, &grad, &buf, 0.1, 0.0, 0.0, 0, 1.0);
    double s3[2] = {param, buf};
    const double want_s3[2] = {0.8, 5.0}; /* momentum 0: buffer untouched */
    tu_assert_close("sgd without momentum", want_s3, s3, 2, 1e-14, 0.0);

    /* dropout: the mask is 1/(1-p) exactly where rng_hash_uniform >= p */
    double mask[64];
    ref_dropout_mask(64, 0.25f, 99, mask);
    for (size_t i = 0; i < 64; i++) {
        double want = rng_hash_uniform(99, i) >= 0.25f ? 4.0 / 3.0 : 0.0;
        tu_assert_close("dropout mask", &want, &mask[i], 1, 1e-15, 0.0);
    }
}

/* ---------------------------------------------------------------- the checkers can fail */

static double quadratic(void *vctx) {
    const double *x = vctx;
    return x[0] * x[0] + 3.0 * x[1];
}

static void test_helpers_detect_errors(void **state) {
    (void)state;
    double a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 2, 3, 4, 5};
    assert_int_equal(tu_check_close("equal", a, b, 5, 0.0, 0.0, 1), CNT_OK);
    b[3] = 4.001;
    assert_int_equal(tu_check_close("perturbed (expected report)", a, b, 5, 1e-4, 1e-6, 1), CNT_ERR);
    assert_int_equal(tu_check_close("perturbed, loose", a, b, 5, 1e-3, 0.0, 0), CNT_OK);
    b[3] = NAN;
    assert_int_equal(tu_check_close("nan", a, b, 5, 1.0, 1.0, 0), CNT_ERR);
    b[3] = INFINITY;
    assert_int_equal(tu_check_close("inf", a, b, 5, 1.0, 1.0, 0), CNT_ERR);

    double x[2] = {1.5, -2.0};
    double good[2] = {3.0, 3.0}, bad[2] = {3.0, -3.0};
    assert_int_equal(tu_gradcheck_check("quadratic", quadratic, x, x, 2, good, 2, GC_RTOL, GC_ATOL, 1), CNT_OK);
    assert_int_equal(tu_gradcheck_check("wrong sign (expected report)", quadratic, x, x, 2, bad, 2, GC_RTOL,
                                        GC_ATOL, 1),
                     CNT_ERR);
    assert_true(x[0] == 1.5 && x[1] == -2.0); /* restored after perturbation */

    /* a conv filter gradient with one element wrong is caught even when subsampled */
    conv_params p = {.N = 2, .C = 3, .H = 6, .W = 6, .K = 4, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                     .pad_h = 1, .pad_w = 1};
    assert_int_equal(conv_params_init(&p), CNT_OK);
    rng r;
    rng_seed(&r, 12, 12);
    size_t nx = 2 * 3 * 36, nw = 4 * 3 * 9;
    gc_ctx c;
    gc_init(&c, fwd_conv, (size_t)2 * 4 * 36, &r);
    c.cp = &p;
    c.in[0] = tu_alloc(nx);
    c.in[1] = tu_alloc(nw);
    tu_fill_uniform(&r, c.in[0], nx, -1.0, 1.0);
    tu_fill_uniform(&r, c.in[1], nw, -1.0, 1.0);
    double *dw = tu_alloc(nw);
    ref_conv_bwd_filter(&p, c.in[0], c.g, dw);
    assert_int_equal(tu_gradcheck_check("conv dw", gc_loss, &c, c.in[1], nw, dw, 20, GC_RTOL, GC_ATOL, 1), CNT_OK);
    dw[nw - 1] += 1e-3; /* the last index is always among the checked ones */
    assert_int_equal(tu_gradcheck_check("conv dw, last element off (expected report)", gc_loss, &c, c.in[1], nw,
                                        dw, 20, GC_RTOL, GC_ATOL, 1),
                     CNT_ERR);
    free(dw);
    gc_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_bn_train),
        cmocka_unit_test(test_max_pool),
        cmocka_unit_test(test_avg_pool),
        cmocka_unit_test(test_adaptive_avg_pool),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_residual_add),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_accumulate),
        cmocka_unit_test(test_forward_by_hand),
        cmocka_unit_test(test_helpers_detect_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
