/*
 * tests/test_backend_cpu.c - the CPU backend against the double reference.
 *
 * Every op of model/backend.h runs through backend_cpu() on random data (fixed
 * seeds) and is compared in double with tests/support/ref.c. Inputs are drawn
 * as float-representable doubles, so backend and reference see the same
 * numbers; what differs is float32 arithmetic, allowed for by rtol 1e-4 and
 * an absolute tolerance that grows with the reduction length (tu_atol_f32).
 * Shapes cover odd sizes, stride 2, padding, batch 1, 1x7 / 7x1 / 1x1 kernels,
 * the CPU backend's code paths (tiled im2col, grouped images, the 1x1 shortcut,
 * inner and outer threading), every pooling mode with ceil_mode, accumulate 0
 * and 1 on every op that takes it, and a determinism check (bitwise equal
 * results from two identical calls). The NHWC activation layout, and the
 * BLOCKED one where the backend has it (oneDNN built in), are checked against
 * NCHW: convert_layout against a host loop, NCHW as the default, and every
 * layout-sensitive op run in every layout on the same logical data.
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
#include "common/half.h"
#include "common/rng.h"
#include "common/rng_hash.h"
#include "model/backend.h"
#include "tests/support/ref.h"
#include "tests/support/testutil.h"

#define RTOL 1e-4

static const backend *be;
/* The context every op below runs in (model/backend.h): NCHW and fp32 unless
 * a test sets its layout or math mode (all_threads resets it). */
static backend_ctx ctx;

/* ---------------------------------------------------------------- helpers */

/* A tensor held twice: host doubles for the reference, device floats for the backend. */
typedef struct pair {
    double *h;
    float *d;
    size_t n;
} pair;

static pair pair_zero(size_t n) {
    pair t = {tu_alloc(n), be->alloc((n > 0 ? n : 1) * sizeof(float)), n};
    return t;
}

static pair pair_of(const double *host, size_t n) {
    pair t = {tu_alloc(n), tu_dev_from_double(be, host, n), n};
    memcpy(t.h, host, n * sizeof(double));
    return t;
}

static pair pair_uniform(rng *r, size_t n, double lo, double hi) {
    double *h = tu_alloc(n);
    tu_fill_uniform(r, h, n, lo, hi);
    pair t = pair_of(h, n);
    free(h);
    return t;
}

static pair pair_normal(rng *r, size_t n, double mean, double std) {
    double *h = tu_alloc(n);
    tu_fill_normal(r, h, n, mean, std);
    pair t = pair_of(h, n);
    free(h);
    return t;
}

static void pair_free(pair *t) {
    free(t->h);
    be->free(t->d);
    t->h = NULL;
    t->d = NULL;
}

/* Compares the device side of t with its host side (the reference result). */
static void expect(const char *what, const pair *t, double rtol, double atol) {
    float *got = tu_alloc_f(t->n);
    be->download(got, t->d, t->n * sizeof(float));
    tu_assert_close_f(what, t->h, got, t->n, rtol, atol);
    free(got);
}

static double max_abs(const double *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* ---------------------------------------------------------------- memory */

static void test_memory(void **state) {
    (void)state;
    const size_t n = 1001;
    float *d = be->alloc(n * sizeof(float));
    float *host = tu_alloc_f(n), *back = tu_alloc_f(n);
    be->download(back, d, n * sizeof(float));
    for (size_t i = 0; i < n; i++) assert_true(back[i] == 0.0f); /* alloc is zero-filled */
    for (size_t i = 0; i < n; i++) host[i] = (float)i * 0.5f - 3.0f;
    be->upload(d, host, n * sizeof(float));
    float *d2 = be->alloc(n * sizeof(float));
    be->copy(d2, d, n * sizeof(float));
    be->download(back, d2, n * sizeof(float));
    tu_assert_bitwise_equal_f("upload, copy, download", host, back, n);
    be->zero(d2 + 10, 20 * sizeof(float));
    be->sync();
    be->download(back, d2, n * sizeof(float));
    for (size_t i = 0; i < n; i++) assert_true(back[i] == (i >= 10 && i < 30 ? 0.0f : host[i]));
    be->free(d);
    be->free(d2);
    be->free(NULL);
    free(host);
    free(back);
}

/* ---------------------------------------------------------------- convolution */

typedef struct conv_case {
    int N, C, H, W, K, R, S, sh, sw, ph, pw;
} conv_case;

/* Paths of the CPU backend these reach (as of writing): 1x1 stride-1 unpadded
 * convolutions use the input as its own matrix; stride 1 with at least 8
 * channels shifts a padded copy per filter tap; everything else is im2col,
 * tiled by output rows when the matrix is large, with small images grouped. */
static const conv_case conv_fixed[] = {
    {2, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1},       /* 3x3 same, few channels */
    {2, 8, 7, 7, 4, 3, 3, 1, 1, 1, 1},       /* 3x3 same, 8 channels */
    {3, 5, 9, 8, 6, 3, 3, 2, 2, 1, 1},       /* stride 2, odd/even sizes */
    {1, 4, 11, 13, 5, 3, 3, 1, 1, 0, 0},     /* batch 1, no padding */
    {2, 9, 11, 13, 5, 3, 3, 1, 1, 0, 0},     /* no padding, 9 channels */
    {2, 6, 9, 9, 4, 1, 7, 1, 1, 0, 3},       /* Inception 1x7 */
    {2, 6, 9, 9, 4, 7, 1, 1, 1, 3, 0},       /* Inception 7x1 */
    {2, 12, 9, 9, 4, 1, 7, 1, 1, 0, 3},      /* Inception 1x7, 12 channels */
    {2, 12, 9, 9, 4, 7, 1, 1, 1, 3, 0},      /* Inception 7x1, 12 channels */
    {4, 16, 8, 8, 12, 1, 1, 1, 1, 0, 0},     /* 1x1 stride 1 */
    {3, 16, 10, 10, 8, 1, 1, 1, 1, 0, 0},    /* 1x1 stride 1, uneven batch */
    {3, 8, 9, 9, 16, 1, 1, 2, 2, 0, 0},      /* 1x1 stride 2 (ResNet downsample) */
    {2, 8, 6, 6, 4, 1, 1, 1, 1, 1, 1},       /* 1x1 with padding */
    {1, 3, 23, 23, 8, 7, 7, 2, 2, 3, 3},     /* 7x7/2 stem, batch 1 */
    {2, 3, 10, 10, 2, 5, 5, 1, 1, 2, 2},     /* 5x5 pad 2 */
    {2, 10, 10, 10, 2, 5, 5, 1, 1, 2, 2},    /* 5x5 pad 2, 10 channels */
    {2, 32, 34, 34, 16, 3, 3, 1, 1, 1, 1},   /* larger, stride 1 */
    {1, 32, 30, 30, 8, 3, 3, 1, 1, 1, 1},    /* larger, batch 1: threads inside the image */
    {1, 7, 48, 48, 4, 5, 5, 1, 1, 2, 2},     /* large im2col, batch 1: tiled */
    {3, 16, 64, 64, 4, 7, 7, 2, 2, 3, 3},    /* large im2col, stride 2, uneven batch: tiled */
    {2, 16, 64, 64, 4, 7, 7, 2, 2, 3, 3},    /* the same, even batch: threads over images */
    {12, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1},      /* small outputs, many images */
    {12, 4, 7, 7, 8, 3, 3, 2, 2, 1, 1},      /* small outputs, im2col: images grouped in one GEMM */
    {5, 2, 3, 3, 3, 3, 3, 1, 1, 0, 0},       /* 1x1 output */
    {2, 3, 8, 6, 5, 3, 2, 2, 1, 2, 1},       /* rectangular kernel, mixed stride, pad > R/2 */
    {2, 9, 8, 6, 5, 3, 2, 1, 1, 2, 1},       /* rectangular kernel, pad > R/2, stride 1 */
};

#define N_RANDOM_CONV 32

/* Case i: the fixed cases, then random shapes from a fixed seed. Returns 0 when past the end. */
/* The row's conv_params, P and Q derived. */
static void conv_case_params(const conv_case *c, conv_params *p) {
    *p = (conv_params){.N = c->N, .C = c->C, .H = c->H, .W = c->W, .K = c->K, .R = c->R, .S = c->S,
                       .stride_h = c->sh, .stride_w = c->sw, .pad_h = c->ph, .pad_w = c->pw};
    assert_int_equal(conv_params_init(p), CNT_OK);
}

static int conv_case_get(int i, conv_params *p) {
    int n_fixed = (int)(sizeof conv_fixed / sizeof conv_fixed[0]);
    if (i >= n_fixed + N_RANDOM_CONV) return 0;
    conv_case c;
    if (i < n_fixed) {
        c = conv_fixed[i];
    } else {
        static const int ks[] = {1, 2, 3, 5, 7};
        rng r;
        rng_seed(&r, 0xC0417u, (uint64_t)i);
        c.N = 1 + (int)rng_below(&r, 3);
        c.C = 1 + (int)rng_below(&r, 12);
        c.K = 1 + (int)rng_below(&r, 7);
        c.R = ks[rng_below(&r, 5)];
        c.S = rng_below(&r, 2) ? c.R : ks[rng_below(&r, 5)];
        /* stride 1 half the time: it has its own code path */
        c.sh = rng_below(&r, 2) ? 1 : 2 + (int)rng_below(&r, 2);
        c.sw = rng_below(&r, 2) ? c.sh : 1 + (int)rng_below(&r, 3);
        c.ph = (int)rng_below(&r, (uint32_t)(c.R / 2 + 2));
        c.pw = (int)rng_below(&r, (uint32_t)(c.S / 2 + 2));
        int min_h = c.R - 2 * c.ph > 1 ? c.R - 2 * c.ph : 1;
        int min_w = c.S - 2 * c.pw > 1 ? c.S - 2 * c.pw : 1;
        c.H = min_h + (int)rng_below(&r, 12);
        c.W = min_w + (int)rng_below(&r, 12);
    }
    conv_case_params(&c, p);
    return 1;
}

/* The convolution tests run every case on all cores and on one thread: the CPU
 * backend takes different paths (threads over images or inside one image). */
static const int conv_threads[] = {0, 1};

static void conv_label(char *buf, size_t len, const char *op, const conv_params *p, int accumulate, int threads) {
    snprintf(buf, len, "%s N%d C%d %dx%d K%d %dx%d/%dx%d pad %dx%d -> %dx%d acc %d threads %s", op, p->N, p->C,
             p->H, p->W, p->K, p->R, p->S, p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->P, p->Q, accumulate,
             threads ? "1" : "all");
}

static void conv_fwd_case(const conv_params *p, int i, int threads) {
    rng r;
    rng_seed(&r, 1000 + (uint64_t)i, 1);
    pair x = pair_uniform(&r, (size_t)p->N * p->C * p->H * p->W, -1.0, 1.0);
    pair w = pair_uniform(&r, (size_t)p->K * p->C * p->R * p->S, -1.0, 1.0);
    pair y = pair_uniform(&r, (size_t)p->N * p->K * p->P * p->Q, -1.0, 1.0); /* overwritten */
    ref_conv_fwd(p, x.h, w.h, y.h);
    be->conv_fwd(&ctx, p, x.d, w.d, y.d);
    char what[160];
    conv_label(what, sizeof what, "conv_fwd", p, 0, threads);
    expect(what, &y, RTOL, tu_atol_f32((size_t)p->C * p->R * p->S, 1.0));
    pair_free(&x);
    pair_free(&w);
    pair_free(&y);
}

static void conv_bwd_data_case(const conv_params *p, int i, int threads) {
    for (int acc = 0; acc <= 1; acc++) {
        rng r;
        rng_seed(&r, 2000 + (uint64_t)i, (uint64_t)acc);
        pair dy = pair_uniform(&r, (size_t)p->N * p->K * p->P * p->Q, -1.0, 1.0);
        pair w = pair_uniform(&r, (size_t)p->K * p->C * p->R * p->S, -1.0, 1.0);
        pair dx = pair_uniform(&r, (size_t)p->N * p->C * p->H * p->W, -1.0, 1.0);
        ref_conv_bwd_data(p, dy.h, w.h, dx.h, acc);
        be->conv_bwd_data(&ctx, p, dy.d, w.d, dx.d, acc, 0);
        char what[160];
        conv_label(what, sizeof what, "conv_bwd_data", p, acc, threads);
        expect(what, &dx, RTOL, tu_atol_f32((size_t)p->K * p->R * p->S, 1.0));
        pair_free(&dy);
        pair_free(&w);
        pair_free(&dx);
    }
}

static void conv_bwd_filter_case(const conv_params *p, int i, int threads) {
    rng r;
    rng_seed(&r, 3000 + (uint64_t)i, 1);
    pair x = pair_uniform(&r, (size_t)p->N * p->C * p->H * p->W, -1.0, 1.0);
    pair dy = pair_uniform(&r, (size_t)p->N * p->K * p->P * p->Q, -1.0, 1.0);
    pair dw = pair_uniform(&r, (size_t)p->K * p->C * p->R * p->S, -1.0, 1.0); /* overwritten */
    ref_conv_bwd_filter(p, x.h, dy.h, dw.h);
    be->conv_bwd_filter(&ctx, p, x.d, dy.d, dw.d);
    char what[160];
    conv_label(what, sizeof what, "conv_bwd_filter", p, 0, threads);
    expect(what, &dw, RTOL, tu_atol_f32((size_t)p->N * p->P * p->Q, 1.0));
    pair_free(&x);
    pair_free(&dy);
    pair_free(&dw);
}

/* Runs one of the case functions over every case and both thread settings. */
static void conv_run_all(void (*run_case)(const conv_params *, int, int)) {
    for (size_t t = 0; t < sizeof conv_threads / sizeof conv_threads[0]; t++) {
        be->set_threads(conv_threads[t]);
        conv_params p;
        for (int i = 0; conv_case_get(i, &p); i++) run_case(&p, i, conv_threads[t]);
    }
    be->set_threads(0);
}

static void test_conv_fwd(void **state) {
    (void)state;
    conv_run_all(conv_fwd_case);
}

static void test_conv_bwd_data(void **state) {
    (void)state;
    conv_run_all(conv_bwd_data_case);
}

static void test_conv_bwd_filter(void **state) {
    (void)state;
    conv_run_all(conv_bwd_filter_case);
}

/* ---------------------------------------------------------------- bias */

static void test_bias(void **state) {
    (void)state;
    static const int shapes[][3] = {{2, 3, 17}, {1, 5, 49}, {7, 10, 1}, {3, 64, 196}, {1, 1, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int N = shapes[i][0], C = shapes[i][1], HW = shapes[i][2];
        size_t n = (size_t)N * C * HW;
        rng r;
        rng_seed(&r, 4000 + i, 1);
        pair b = pair_uniform(&r, (size_t)C, -1.0, 1.0);
        pair y = pair_uniform(&r, n, -1.0, 1.0);
        pair db = pair_uniform(&r, (size_t)C, -1.0, 1.0);
        char what[96];
        ref_bias_fwd(N, C, HW, b.h, y.h);
        be->bias_fwd(&ctx, N, C, HW, b.d, y.d);
        snprintf(what, sizeof what, "bias_fwd N%d C%d HW%d", N, C, HW);
        expect(what, &y, RTOL, tu_atol_f32(1, 1.0));
        ref_bias_bwd(N, C, HW, y.h, db.h);
        be->bias_bwd(&ctx, N, C, HW, y.d, db.d); /* y as dy: same values on both sides */
        snprintf(what, sizeof what, "bias_bwd N%d C%d HW%d", N, C, HW);
        expect(what, &db, RTOL, tu_atol_f32((size_t)N * HW, 2.0));
        pair_free(&b);
        pair_free(&y);
        pair_free(&db);
    }
}

/* ---------------------------------------------------------------- batch norm */

typedef struct bn_case {
    int N, C, HW;
    double mean, std, momentum, eps;
} bn_case;

static const bn_case bn_cases[] = {
    {4, 3, 25, 0.0, 1.0, 0.1, 1e-5},
    {2, 3, 2, 1.0, 2.0, 0.1, 1e-5},     /* M = 4: unbiased variance differs by a third */
    {1, 4, 49, -2.0, 0.5, 0.1, 1e-3},   /* batch 1 */
    {16, 8, 1, 0.5, 1.0, 0.25, 1e-5},   /* after a linear layer */
    {8, 5, 784, 3.0, 2.0, 0.1, 1e-5},   /* long reductions, mean far from 0 */
    {3, 2, 9, 0.0, 0.3, 0.9, 0.5},      /* large eps: where eps goes matters */
};

static void test_bn_fwd_train(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++) {
        const bn_case *bc = &bn_cases[i];
        int N = bc->N, C = bc->C, HW = bc->HW;
        size_t n = (size_t)N * C * HW, M = (size_t)N * HW;
        rng r;
        rng_seed(&r, 5000 + i, 1);
        pair x = pair_normal(&r, n, bc->mean, bc->std);
        pair gamma = pair_uniform(&r, (size_t)C, 0.5, 1.5);
        pair beta = pair_uniform(&r, (size_t)C, -0.5, 0.5);
        pair y = pair_uniform(&r, n, -1.0, 1.0);
        pair rmean = pair_uniform(&r, (size_t)C, -1.0, 1.0);
        pair rvar = pair_uniform(&r, (size_t)C, 0.5, 2.0);
        pair smean = pair_zero((size_t)C), sinv = pair_zero((size_t)C);
        ref_bn_fwd_train(N, C, HW, x.h, gamma.h, beta.h, y.h, rmean.h, rvar.h, bc->momentum, bc->eps, smean.h,
                         sinv.h);
        be->bn_fwd_train(&ctx, N, C, HW, x.d, gamma.d, beta.d, y.d, rmean.d, rvar.d, (float)bc->momentum,
                         (float)bc->eps, smean.d, sinv.d);
        char what[128];
        snprintf(what, sizeof what, "bn_fwd_train y N%d C%d HW%d", N, C, HW);
        expect(what, &y, RTOL, tu_atol_f32(M, 1.0));
        snprintf(what, sizeof what, "bn_fwd_train save_mean N%d C%d HW%d", N, C, HW);
        expect(what, &smean, RTOL, tu_atol_f32(M, bc->std));
        snprintf(what, sizeof what, "bn_fwd_train save_invstd N%d C%d HW%d", N, C, HW);
        expect(what, &sinv, RTOL, tu_atol_f32(M, 1.0 / bc->std));
        snprintf(what, sizeof what, "bn_fwd_train running_mean N%d C%d HW%d", N, C, HW);
        expect(what, &rmean, RTOL, tu_atol_f32(M, bc->std));
        snprintf(what, sizeof what, "bn_fwd_train running_var N%d C%d HW%d", N, C, HW);
        expect(what, &rvar, RTOL, tu_atol_f32(M, bc->std * bc->std));
        pair_free(&x);
        pair_free(&gamma);
        pair_free(&beta);
        pair_free(&y);
        pair_free(&rmean);
        pair_free(&rvar);
        pair_free(&smean);
        pair_free(&sinv);
    }
}

static void test_bn_fwd_infer(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++) {
        const bn_case *bc = &bn_cases[i];
        int N = bc->N, C = bc->C, HW = bc->HW;
        size_t n = (size_t)N * C * HW;
        rng r;
        rng_seed(&r, 5500 + i, 1);
        pair x = pair_normal(&r, n, bc->mean, bc->std);
        pair gamma = pair_uniform(&r, (size_t)C, 0.5, 1.5);
        pair beta = pair_uniform(&r, (size_t)C, -0.5, 0.5);
        pair rmean = pair_uniform(&r, (size_t)C, bc->mean - 0.5, bc->mean + 0.5);
        pair rvar = pair_uniform(&r, (size_t)C, 0.2, 2.0);
        pair y = pair_uniform(&r, n, -1.0, 1.0);
        ref_bn_fwd_infer(N, C, HW, x.h, gamma.h, beta.h, y.h, rmean.h, rvar.h, bc->eps);
        be->bn_fwd_infer(&ctx, N, C, HW, x.d, gamma.d, beta.d, y.d, rmean.d, rvar.d, (float)bc->eps);
        char what[96];
        snprintf(what, sizeof what, "bn_fwd_infer N%d C%d HW%d", N, C, HW);
        expect(what, &y, RTOL, tu_atol_f32(1, 1.0));
        pair_free(&x);
        pair_free(&gamma);
        pair_free(&beta);
        pair_free(&rmean);
        pair_free(&rvar);
        pair_free(&y);
    }
}

static void test_bn_bwd(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++)
        for (int acc = 0; acc <= 1; acc++) {
            const bn_case *bc = &bn_cases[i];
            int N = bc->N, C = bc->C, HW = bc->HW;
            size_t n = (size_t)N * C * HW, M = (size_t)N * HW;
            rng r;
            rng_seed(&r, 6000 + i, (uint64_t)acc);
            pair x = pair_normal(&r, n, bc->mean, bc->std);
            pair dy = pair_normal(&r, n, 0.0, 1.0);
            pair gamma = pair_uniform(&r, (size_t)C, 0.5, 1.5);
            pair dx = pair_uniform(&r, n, -1.0, 1.0);
            pair dgamma = pair_uniform(&r, (size_t)C, -1.0, 1.0), dbeta = pair_uniform(&r, (size_t)C, -1.0, 1.0);
            /* saved statistics from the reference forward, rounded to float for both sides */
            double *beta = tu_alloc((size_t)C), *y = tu_alloc(n), *rm = tu_alloc((size_t)C), *rv = tu_alloc((size_t)C);
            double *sm = tu_alloc((size_t)C), *si = tu_alloc((size_t)C);
            ref_bn_fwd_train(N, C, HW, x.h, gamma.h, beta, y, rm, rv, 0.1, bc->eps, sm, si);
            for (int c = 0; c < C; c++) {
                sm[c] = (double)(float)sm[c];
                si[c] = (double)(float)si[c];
            }
            pair smean = pair_of(sm, (size_t)C), sinv = pair_of(si, (size_t)C);
            ref_bn_bwd(N, C, HW, x.h, dy.h, gamma.h, smean.h, sinv.h, dx.h, dgamma.h, dbeta.h, acc);
            be->bn_bwd(&ctx, N, C, HW, x.d, dy.d, gamma.d, smean.d, sinv.d, 1e-5f, dx.d, dgamma.d, dbeta.d, acc);
            char what[128];
            /* dx subtracts two sums of M terms, scaled by invstd / M */
            snprintf(what, sizeof what, "bn_bwd dx N%d C%d HW%d acc %d", N, C, HW, acc);
            expect(what, &dx, RTOL, tu_atol_f32(M, max_abs(si, (size_t)C)));
            snprintf(what, sizeof what, "bn_bwd dgamma N%d C%d HW%d", N, C, HW);
            expect(what, &dgamma, RTOL, tu_atol_f32(M, 2.0));
            snprintf(what, sizeof what, "bn_bwd dbeta N%d C%d HW%d", N, C, HW);
            expect(what, &dbeta, RTOL, tu_atol_f32(M, 1.0));
            free(beta);
            free(y);
            free(rm);
            free(rv);
            free(sm);
            free(si);
            pair_free(&x);
            pair_free(&dy);
            pair_free(&gamma);
            pair_free(&dx);
            pair_free(&dgamma);
            pair_free(&dbeta);
            pair_free(&smean);
            pair_free(&sinv);
        }
}

/* ---------------------------------------------------------------- pooling */

typedef struct pool_case {
    pool_mode mode;
    int N, C, H, W, R, S, sh, sw, ph, pw, ceil_mode, P, Q;
} pool_case;

static const pool_case pool_fixed[] = {
    {POOL_MODE_MAX, 2, 3, 16, 16, 3, 3, 2, 2, 1, 1, 0, 0, 0},          /* ResNet stem */
    {POOL_MODE_MAX, 2, 4, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0, 0},            /* VGG 2x2 on odd sizes */
    {POOL_MODE_MAX, 1, 3, 15, 15, 3, 3, 2, 2, 0, 0, 0, 0, 0},          /* Inception 3x3/2, batch 1 */
    {POOL_MODE_MAX, 2, 3, 8, 9, 3, 3, 2, 2, 0, 0, 1, 0, 0},            /* ceil_mode */
    {POOL_MODE_MAX, 2, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 0, 0},            /* ceil_mode + pad */
    {POOL_MODE_MAX, 2, 2, 6, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0},            /* 3x3/1 pad 1 */
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 3, 8, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0}, /* Inception branch pool */
    {POOL_MODE_AVG_EXCLUDE_PAD, 2, 3, 8, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0},
    {POOL_MODE_AVG_INCLUDE_PAD, 1, 2, 9, 8, 3, 3, 2, 2, 1, 1, 1, 0, 0}, /* ceil_mode + pad */
    {POOL_MODE_AVG_EXCLUDE_PAD, 1, 2, 9, 8, 3, 3, 2, 2, 1, 1, 1, 0, 0},
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 2, 8, 9, 3, 3, 2, 2, 0, 0, 1, 0, 0}, /* ceil_mode, window past the edge */
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 3, 17, 17, 5, 5, 3, 3, 0, 0, 0, 0, 0}, /* Inception aux 5x5/3 */
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 4, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 0},   /* DenseNet transition */
    {POOL_MODE_ADAPTIVE_AVG, 2, 3, 5, 5, 0, 0, 0, 0, 0, 0, 0, 3, 3},     /* overlapping windows */
    {POOL_MODE_ADAPTIVE_AVG, 3, 8, 7, 7, 0, 0, 0, 0, 0, 0, 0, 1, 1},     /* global average */
    {POOL_MODE_ADAPTIVE_AVG, 1, 2, 13, 10, 0, 0, 0, 0, 0, 0, 0, 6, 4},   /* uneven */
    {POOL_MODE_ADAPTIVE_AVG, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 5, 7},     /* output larger than input */
    {POOL_MODE_ADAPTIVE_AVG, 2, 2, 14, 14, 0, 0, 0, 0, 0, 0, 0, 7, 7},   /* VGG's 7x7, divisible */
};

#define N_RANDOM_POOL 32

static int pool_case_get(int i, pool_params *p) {
    int n_fixed = (int)(sizeof pool_fixed / sizeof pool_fixed[0]);
    if (i >= n_fixed + N_RANDOM_POOL) return 0;
    pool_case c;
    if (i < n_fixed) {
        c = pool_fixed[i];
    } else {
        rng r;
        rng_seed(&r, 0x9001u, (uint64_t)i);
        memset(&c, 0, sizeof c);
        c.mode = (pool_mode)rng_below(&r, 4);
        c.N = 1 + (int)rng_below(&r, 3);
        c.C = 1 + (int)rng_below(&r, 4);
        c.H = 1 + (int)rng_below(&r, 14);
        c.W = 1 + (int)rng_below(&r, 14);
        if (c.mode == POOL_MODE_ADAPTIVE_AVG) {
            c.P = 1 + (int)rng_below(&r, (uint32_t)c.H + 2);
            c.Q = 1 + (int)rng_below(&r, (uint32_t)c.W + 2);
        } else {
            c.R = 1 + (int)rng_below(&r, 5);
            c.S = 1 + (int)rng_below(&r, 5);
            if (c.H < c.R) c.H = c.R;
            if (c.W < c.S) c.W = c.S;
            c.sh = 1 + (int)rng_below(&r, 3);
            c.sw = 1 + (int)rng_below(&r, 3);
            c.ph = (int)rng_below(&r, (uint32_t)(c.R / 2 + 1));
            c.pw = (int)rng_below(&r, (uint32_t)(c.S / 2 + 1));
            c.ceil_mode = (int)rng_below(&r, 2);
        }
    }
    *p = (pool_params){.mode = c.mode, .N = c.N, .C = c.C, .H = c.H, .W = c.W, .R = c.R, .S = c.S,
                       .stride_h = c.sh, .stride_w = c.sw, .pad_h = c.ph, .pad_w = c.pw,
                       .ceil_mode = c.ceil_mode, .P = c.P, .Q = c.Q};
    assert_int_equal(pool_params_init(p), CNT_OK);
    return 1;
}

static void pool_label(char *buf, size_t len, const char *op, const pool_params *p, int accumulate) {
    static const char *names[] = {"max", "avg incl pad", "avg excl pad", "adaptive avg"};
    snprintf(buf, len, "%s %s N%d C%d %dx%d win %dx%d/%dx%d pad %dx%d ceil %d -> %dx%d acc %d", op, names[p->mode],
             p->N, p->C, p->H, p->W, p->R, p->S, p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->ceil_mode, p->P,
             p->Q, accumulate);
}

/* Odd cases get values on a coarse grid so max windows hold ties (the first
 * maximum must win), even cases continuous values. */
static pair pool_input(rng *r, size_t n, int ties) {
    double *h = tu_alloc(n);
    tu_fill_uniform(r, h, n, -1.0, 1.0);
    if (ties)
        for (size_t i = 0; i < n; i++) h[i] = floor(h[i] * 2.0) / 2.0;
    pair t = pair_of(h, n);
    free(h);
    return t;
}

static void test_pool_fwd(void **state) {
    (void)state;
    pool_params p;
    for (int i = 0; pool_case_get(i, &p); i++) {
        rng r;
        rng_seed(&r, 7000 + (uint64_t)i, 1);
        pair x = pool_input(&r, (size_t)p.N * p.C * p.H * p.W, i % 2);
        pair y = pair_uniform(&r, (size_t)p.N * p.C * p.P * p.Q, -1.0, 1.0);
        ref_pool_fwd(&p, x.h, y.h);
        be->pool_fwd(&ctx, &p, x.d, y.d, NULL);
        char what[192];
        pool_label(what, sizeof what, "pool_fwd", &p, 0);
        expect(what, &y, RTOL, tu_atol_f32((size_t)(p.R * p.S > 0 ? p.R * p.S : p.H * p.W), 1.0));
        pair_free(&x);
        pair_free(&y);
    }
}

static void test_pool_bwd(void **state) {
    (void)state;
    pool_params p;
    for (int i = 0; pool_case_get(i, &p); i++)
        for (int acc = 0; acc <= 1; acc++) {
            rng r;
            rng_seed(&r, 8000 + (uint64_t)i, (uint64_t)acc);
            size_t nx = (size_t)p.N * p.C * p.H * p.W, ny = (size_t)p.N * p.C * p.P * p.Q;
            pair x = pool_input(&r, nx, i % 2);
            pair y = pair_zero(ny);
            pair dy = pair_uniform(&r, ny, -1.0, 1.0);
            pair dx = pair_uniform(&r, nx, -1.0, 1.0);
            ref_pool_fwd(&p, x.h, y.h);
            be->pool_fwd(&ctx, &p, x.d, y.d, NULL); /* the backend's own forward output, as a layer would pass it */
            ref_pool_bwd(&p, x.h, y.h, dy.h, dx.h, acc);
            be->pool_bwd(&ctx, &p, x.d, y.d, dy.d, dx.d, acc, NULL);
            char what[192];
            pool_label(what, sizeof what, "pool_bwd", &p, acc);
            /* each dx sums at most one contribution per overlapping window */
            size_t overlap = (size_t)(p.R * p.S > 0 ? p.R * p.S : p.P * p.Q);
            expect(what, &dx, RTOL, tu_atol_f32(overlap, 1.0));
            pair_free(&x);
            pair_free(&y);
            pair_free(&dy);
            pair_free(&dx);
        }
}

/* ---------------------------------------------------------------- GEMM */

static void test_gemm(void **state) {
    (void)state;
    /* M, N, K, extra stride padding, alpha, beta */
    static const struct {
        int M, N, K, pad;
        double alpha, beta;
    } cases[] = {
        {7, 13, 29, 0, 1.0, 0.0}, {1, 10, 64, 3, 1.0, 1.0}, {32, 1, 17, 1, 0.5, 0.0},
        {64, 100, 300, 5, 1.0, 0.5}, {5, 5, 1, 2, -2.0, 1.0}, {33, 47, 65, 0, 0.25, -1.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int ta = 0; ta <= 1; ta++)
            for (int tb = 0; tb <= 1; tb++) {
                int M = cases[i].M, N = cases[i].N, K = cases[i].K, pad = cases[i].pad;
                /* stored shapes: A is [M, K] or [K, M]; B is [K, N] or [N, K]; rows padded by `pad` */
                int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
                int lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
                rng r;
                rng_seed(&r, 9000 + i, (uint64_t)(2 * ta + tb));
                pair A = pair_uniform(&r, (size_t)a_rows * lda, -1.0, 1.0);
                pair B = pair_uniform(&r, (size_t)b_rows * ldb, -1.0, 1.0);
                pair C = pair_uniform(&r, (size_t)M * ldc, -1.0, 1.0);
                ref_gemm(ta, tb, M, N, K, cases[i].alpha, A.h, lda, B.h, ldb, cases[i].beta, C.h, ldc);
                be->gemm(&ctx, ta, tb, M, N, K, (float)cases[i].alpha, A.d, lda, B.d, ldb, (float)cases[i].beta, C.d,
                         ldc, 0);
                char what[128];
                snprintf(what, sizeof what, "gemm %c%c M%d N%d K%d ld+%d alpha %g beta %g", ta ? 'T' : 'N',
                         tb ? 'T' : 'N', M, N, K, pad, cases[i].alpha, cases[i].beta);
                /* includes the padding columns of C, which must be left alone */
                expect(what, &C, RTOL, tu_atol_f32((size_t)K, fabs(cases[i].alpha) + fabs(cases[i].beta)));
                pair_free(&A);
                pair_free(&B);
                pair_free(&C);
            }
}

/* ---------------------------------------------------------------- elementwise */

static const size_t elem_sizes[] = {1, 3, 100, 10007, 100003};

static void test_relu(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof elem_sizes / sizeof elem_sizes[0]; i++)
        for (int acc = 0; acc <= 1; acc++) {
            size_t n = elem_sizes[i];
            rng r;
            rng_seed(&r, 10000 + i, (uint64_t)acc);
            double *h = tu_alloc(n);
            tu_fill_uniform(&r, h, n, -1.0, 1.0);
            for (size_t j = 0; j < n; j += 7) h[j] = 0.0; /* exact zeros: y > 0 is false there */
            pair x = pair_of(h, n);
            free(h);
            pair y = pair_uniform(&r, n, -1.0, 1.0);
            pair dy = pair_uniform(&r, n, -1.0, 1.0);
            pair dx = pair_uniform(&r, n, -1.0, 1.0);
            ref_relu_fwd(n, x.h, y.h);
            be->relu_fwd(&tu_fp32, n, x.d, y.d);
            char what[64];
            snprintf(what, sizeof what, "relu_fwd n %zu", n);
            expect(what, &y, 0.0, 0.0);
            ref_relu_bwd(n, y.h, dy.h, dx.h, acc);
            be->relu_bwd(&tu_fp32, n, y.d, dy.d, dx.d, acc);
            snprintf(what, sizeof what, "relu_bwd n %zu acc %d", n, acc);
            expect(what, &dx, RTOL, tu_atol_f32(1, 1.0));
            pair_free(&x);
            pair_free(&y);
            pair_free(&dy);
            pair_free(&dx);
        }
}

static void test_add_axpy_mul(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof elem_sizes / sizeof elem_sizes[0]; i++)
        for (int acc = 0; acc <= 1; acc++) {
            size_t n = elem_sizes[i];
            rng r;
            rng_seed(&r, 11000 + i, (uint64_t)acc);
            pair a = pair_uniform(&r, n, -2.0, 2.0), b = pair_uniform(&r, n, -2.0, 2.0);
            pair y = pair_uniform(&r, n, -2.0, 2.0);
            char what[64];
            if (acc == 0) { /* add has no accumulate flag */
                ref_add(n, a.h, b.h, y.h);
                be->add(&tu_fp32, n, a.d, b.d, y.d);
                snprintf(what, sizeof what, "add n %zu", n);
                expect(what, &y, RTOL, tu_atol_f32(1, 2.0));
            }
            ref_axpy(n, -0.75, a.h, y.h, acc);
            be->axpy(n, -0.75f, a.d, y.d, acc);
            snprintf(what, sizeof what, "axpy n %zu acc %d", n, acc);
            expect(what, &y, RTOL, tu_atol_f32(1, 4.0));
            ref_mul(n, a.h, b.h, y.h, acc);
            be->mul(&tu_fp32, n, a.d, b.d, y.d, acc);
            snprintf(what, sizeof what, "mul n %zu acc %d", n, acc);
            expect(what, &y, RTOL, tu_atol_f32(1, 8.0));
            pair_free(&a);
            pair_free(&b);
            pair_free(&y);
        }
}

static void test_dropout_mask(void **state) {
    (void)state;
    static const float ps[] = {0.0f, 0.1f, 0.3f, 0.5f, 0.9f};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        for (uint64_t seed = 0; seed < 3; seed++) {
            const size_t n = 10007;
            rng r;
            rng_seed(&r, 17000 + i, seed);
            pair mask = pair_uniform(&r, n, 2.0, 3.0); /* overwritten */
            ref_dropout_mask(n, ps[i], seed * 0x9E37u + 1, mask.h);
            be->dropout_mask(n, ps[i], seed * 0x9E37u + 1, mask.d);
            char what[64];
            snprintf(what, sizeof what, "dropout_mask p %.1f seed %llu", (double)ps[i], (unsigned long long)seed);
            /* the same elements dropped (atol 0: a zero must be exactly zero), kept
             * values equal to 1/(1-p) up to float rounding of the division */
            expect(what, &mask, 3e-7, 0.0);
            pair_free(&mask);
        }
}

/* dropout_mask_at (a recorded step's masks): the mask of the seed
 * rng_hash_dropout_seed(*step_at, node), bit for bit, with the word read when
 * the op runs; the seed's formula is the one every dropout mask since the
 * first has used (a change would change every run's masks). */
static void test_dropout_mask_at(void **state) {
    (void)state;
    assert_true(rng_hash_dropout_seed(5, 3) == 5 * 0x100000001B3ULL + 3);
    assert_true(rng_hash_dropout_seed(0xFFFFFFFF00000001ULL, 7) == 0xFFFFFFFF00000001ULL * 0x100000001B3ULL + 7);
    static const uint64_t steps[] = {1, 2, 0x9E3779B97F4A7C15ULL};
    const size_t n = 4099;
    uint64_t *word = be->alloc(sizeof *word);
    float *at = be->alloc(n * sizeof(float)), *by_value = be->alloc(n * sizeof(float));
    float *h_at = malloc(n * sizeof(float)), *h_value = malloc(n * sizeof(float)), *h_first = malloc(n * sizeof(float));
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
        for (uint64_t node = 0; node < 3; node++) {
            be->upload(word, &steps[k], sizeof steps[k]);
            be->dropout_mask_at(n, 0.4f, word, node, at);
            be->dropout_mask(n, 0.4f, rng_hash_dropout_seed(steps[k], node), by_value);
            be->download(h_at, at, n * sizeof(float));
            be->download(h_value, by_value, n * sizeof(float));
            char what[96];
            snprintf(what, sizeof what, "dropout_mask_at step 0x%llx node %llu", (unsigned long long)steps[k],
                     (unsigned long long)node);
            tu_assert_bitwise_equal_f(what, h_value, h_at, n);
            if (k == 0 && node == 0) memcpy(h_first, h_at, n * sizeof(float));
        }
    /* and the masks of other seeds differ (a constant mask would pass the above only by luck) */
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += (h_first[i] == 0.0f) != (h_at[i] == 0.0f);
    assert_true(differ > n / 4);
    free(h_at);
    free(h_value);
    free(h_first);
    be->free(word);
    be->free(at);
    be->free(by_value);
}

static void test_channel_copy(void **state) {
    (void)state;
    for (size_t i = 0; i < tu_n_channel_copy_cases; i++)
        for (int acc = 0; acc <= 1; acc++) {
            const int *c = tu_channel_copy_cases[i];
            int N = c[0], C = c[1], HW = c[2], src_C = c[3], src_off = c[4], dst_C = c[5], dst_off = c[6];
            rng r;
            rng_seed(&r, 12000 + i, (uint64_t)acc);
            pair src = pair_uniform(&r, (size_t)N * src_C * HW, -1.0, 1.0);
            pair dst = pair_uniform(&r, (size_t)N * dst_C * HW, -1.0, 1.0); /* outside the slice: kept */
            ref_channel_copy(N, C, HW, src.h, src_C, src_off, dst.h, dst_C, dst_off, acc);
            be->channel_copy(&ctx, N, C, HW, src.d, src_C, src_off, dst.d, dst_C, dst_off, acc);
            char what[128];
            snprintf(what, sizeof what, "channel_copy N%d C%d HW%d src %d+%d dst %d+%d acc %d", N, C, HW, src_C,
                     src_off, dst_C, dst_off, acc);
            /* a copy is exact; a sum of two floats is off by at most one rounding */
            expect(what, &dst, acc ? 1.2e-7 : 0.0, 0.0);
            pair_free(&src);
            pair_free(&dst);
        }
}

/* ---------------------------------------------------------------- loss */

static void test_softmax_xent(void **state) {
    (void)state;
    static const struct {
        int N, K;
        double std, smoothing;
    } cases[] = {
        {1, 10, 1.0, 0.0}, {7, 1000, 3.0, 0.1}, {32, 3, 2.0, 0.0}, {32, 3, 2.0, 0.1}, {5, 17, 30.0, 0.1},
        {9, 2, 1.0, 0.5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int N = cases[i].N, K = cases[i].K;
        rng r;
        rng_seed(&r, 13000 + i, 1);
        pair logits = pair_normal(&r, (size_t)N * K, 0.0, cases[i].std); /* std 30: exp overflows without a max shift */
        pair dlogits = pair_uniform(&r, (size_t)N * K, -1.0, 1.0);
        pair loss = pair_uniform(&r, 1, 5.0, 6.0);
        int *labels = cnt_malloc((size_t)N * sizeof(int));
        tu_fill_labels(&r, labels, (size_t)N, K);
        int *dlabels = be->alloc((size_t)N * sizeof(int));
        be->upload(dlabels, labels, (size_t)N * sizeof(int));
        ref_softmax_xent(N, K, logits.h, labels, cases[i].smoothing, loss.h, dlogits.h);
        be->softmax_xent(N, K, logits.d, dlabels, (float)cases[i].smoothing, loss.d, dlogits.d);
        char what[96];
        snprintf(what, sizeof what, "softmax_xent loss N%d K%d std %g smoothing %.1f", N, K, cases[i].std,
                 cases[i].smoothing);
        expect(what, &loss, RTOL, tu_atol_f32((size_t)K, 1.0));
        snprintf(what, sizeof what, "softmax_xent dlogits N%d K%d std %g smoothing %.1f", N, K, cases[i].std,
                 cases[i].smoothing);
        expect(what, &dlogits, RTOL, tu_atol_f32((size_t)K, 1.0 / N));
        free(labels);
        be->free(dlabels);
        pair_free(&logits);
        pair_free(&dlogits);
        pair_free(&loss);
    }
}

/* ---------------------------------------------------------------- optimizer */

/* Odd steps take the rate from a device float (lr_at), the lr argument
 * then a NaN that must not be read; step 2 scales the step by a trust ratio
 * (scale_at: LARS), which the reference folds into grad_scale and wd. */
static void test_sgd_update(void **state) {
    (void)state;
    float *lr_at = be->alloc(sizeof(float)), *scale_at = be->alloc(sizeof(float));
    const float trust = 0.37f;
    be->upload(scale_at, &trust, sizeof trust);
    static const struct {
        double lr, momentum, wd;
        int nesterov;
        double grad_scale;
    } cases[] = {
        {0.1, 0.9, 1e-4, 0, 1.0},  {0.1, 0.9, 1e-4, 1, 1.0},    {0.05, 0.0, 5e-4, 0, 1.0}, {0.1, 0.0, 0.1, 1, 1.0},
        {0.2, 0.9, 0.0, 1, 0.25}, {0.01, 0.5, 0.1, 0, 0.125}, {0.1, 0.0, 0.0, 0, 0.5},
    };
    const size_t n = 10007;
    double *old = tu_alloc(n), *want = tu_alloc(n), *got = tu_alloc(n);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rng r;
        rng_seed(&r, 14000 + i, 1);
        pair param = pair_uniform(&r, n, -1.0, 1.0);
        pair buf = pair_uniform(&r, n, -0.5, 0.5); /* as left by earlier steps */
        for (int step = 0; step < 3; step++) {
            pair grad = pair_normal(&r, n, 0.0, 1.0);
            /* each step starts the reference from the backend's state, so errors do not compound */
            tu_dev_to_double(be, param.d, param.h, n);
            tu_dev_to_double(be, buf.d, buf.h, n);
            memcpy(old, param.h, n * sizeof(double));
            double sc = step == 2 ? trust : 1.0;
            ref_sgd_update(n, param.h, grad.h, buf.h, cases[i].lr, cases[i].momentum, sc * cases[i].wd,
                           cases[i].nesterov, sc * cases[i].grad_scale);
            float lr = (float)cases[i].lr;
            if (step % 2) be->upload(lr_at, &lr, sizeof lr);
            be->sgd_update(n, param.d, grad.d, buf.d, step % 2 ? NAN : lr, (float)cases[i].momentum,
                           (float)cases[i].wd, cases[i].nesterov, (float)cases[i].grad_scale,
                           step % 2 ? lr_at : NULL, step == 2 ? scale_at : NULL);
            /* the change of each parameter (small next to the parameter, so compared on its own;
             * atol: the final rounding of a parameter near 1 to float) */
            tu_dev_to_double(be, param.d, got, n);
            for (size_t j = 0; j < n; j++) {
                want[j] = param.h[j] - old[j];
                got[j] -= old[j];
            }
            char what[128];
            snprintf(what, sizeof what, "sgd param change lr %g momentum %g wd %g nesterov %d scale %g step %d",
                     cases[i].lr, cases[i].momentum, cases[i].wd, cases[i].nesterov, cases[i].grad_scale, step);
            tu_assert_close(what, want, got, n, RTOL, 3e-7);
            snprintf(what, sizeof what, "sgd momentum_buf momentum %g nesterov %d step %d", cases[i].momentum,
                     cases[i].nesterov, step);
            expect(what, &buf, RTOL, tu_atol_f32(1, 1.0));
            pair_free(&grad);
        }
        pair_free(&param);
        pair_free(&buf);
    }
    free(old);
    free(want);
    free(got);
    be->free(lr_at);
    be->free(scale_at);
}

/* sumsq2 against a sum in long double, for sizes around its chunking
 * (16384 values, at most 1024 chunks), and the same bits with 1 thread as
 * with all: every rank must compute the same trust ratios. */
static void test_sumsq2(void **state) {
    (void)state;
    static const size_t sizes[] = {0, 1, 7, 16383, 16384, 16385, 100003, (size_t)1 << 20, 17000000};
    float *out = be->alloc(2 * sizeof(float));
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t n = sizes[t];
        rng r;
        rng_seed(&r, 15000 + t, 1);
        pair a = pair_normal(&r, n ? n : 1, 0.0, 1.0), b = pair_uniform(&r, n ? n : 1, -3.0, 3.0);
        long double wa = 0, wb = 0; /* a.h and b.h: the device's values, exactly */
        for (size_t i = 0; i < n; i++) {
            wa += (long double)a.h[i] * a.h[i];
            wb += (long double)b.h[i] * b.h[i];
        }
        float got[2], one[2];
        be->sumsq2(n, a.d, b.d, out);
        be->download(got, out, sizeof got);
        char what[96];
        snprintf(what, sizeof what, "sumsq2 n %zu", n);
        double want2[2] = {(double)wa, (double)wb}, got2[2] = {got[0], got[1]};
        tu_assert_close(what, want2, got2, 2, 2e-7, 0.0); /* one rounding to float, and double's sums */
        be->set_threads(1);
        be->sumsq2(n, a.d, b.d, out);
        be->download(one, out, sizeof one);
        be->set_threads(0);
        snprintf(what, sizeof what, "sumsq2 n %zu: 1 thread against all", n);
        if (memcmp(one, got, sizeof got) != 0)
            fail_msg("%s: %a %a against %a %a", what, (double)one[0], (double)one[1], (double)got[0], (double)got[1]);
        pair_free(&a);
        pair_free(&b);
    }
    be->free(out);
}

/* lars_trust against the formula in double, with the cases that give 1: a
 * zero weight norm (a tensor initialised to zero) or a zero gradient. */
static void test_lars_trust(void **state) {
    (void)state;
    const float eta = 0.001f, wd = 5e-4f, gs = 0.125f;
    const float sums[] = {4.0f, 9.0f, 0.0f, 1.0f, 2.5f, 0.0f, 1e-6f, 1e4f, 3e3f, 1e-8f, 0.0f, 0.0f};
    const int k = (int)(sizeof sums / sizeof sums[0] / 2);
    float *sd = be->alloc(sizeof sums), *td = be->alloc((size_t)k * sizeof(float));
    be->upload(sd, sums, sizeof sums);
    be->lars_trust(k, sd, eta, wd, gs, td);
    float got[6];
    be->download(got, td, (size_t)k * sizeof(float));
    for (int r = 0; r < k; r++) {
        double w = sqrt((double)sums[2 * r]), g = gs * sqrt((double)sums[2 * r + 1]);
        double want = w > 0 && g > 0 ? eta * w / (g + wd * w) : 1.0;
        char what[64];
        snprintf(what, sizeof what, "lars_trust tensor %d", r);
        double gd = got[r];
        tu_assert_close(what, &want, &gd, 1, 1e-7, 0.0);
    }
    assert_true(got[1] == 1.0f && got[2] == 1.0f && got[5] == 1.0f);
    be->free(sd);
    be->free(td);
}

/* ---------------------------------------------------------------- optional ops */

/* The wrappers through which callers reach the optional ops (model/backend.c):
 * the op where the backend has one, else a fallback with the same result;
 * and the weights epochs of backend_ctx. */
static int math_check_calls;

static int refuse_bf16(int math) {
    math_check_calls++;
    return math == BACKEND_MATH_BF16 ? cnt_err_set("stand-in: no bf16 here") : CNT_OK;
}

static size_t kept_4(const backend_ctx *c, const conv_params *p) {
    (void)c;
    return conv_w_count(p) * 4;
}

static void test_optional_ops(void **state) {
    (void)state;
    backend own = *be;
    /* conv_filter_kept: 0 where the backend keeps nothing */
    conv_params cp = {.N = 2, .C = 3, .H = 8, .W = 8, .K = 4, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1};
    assert_int_equal(conv_params_init(&cp), CNT_OK);
    assert_null(be->conv_filter_kept);
    assert_int_equal(backend_conv_filter_kept(be, &ctx, &cp), 0);
    own.conv_filter_kept = kept_4;
    assert_int_equal(backend_conv_filter_kept(&own, &ctx, &cp), 4 * 4 * 3 * 3 * 3);

    /* math_check: every mode runs where a backend has no check; a check that refuses says why */
    for (int m = BACKEND_MATH_FP32; m <= BACKEND_MATH_FP16; m++) assert_int_equal(backend_math_check(be, m), CNT_OK);
    own.math_check = refuse_bf16;
    assert_int_equal(backend_math_check(&own, BACKEND_MATH_FP16), CNT_OK);
    assert_int_equal(backend_math_check(&own, BACKEND_MATH_BF16), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "no bf16 here"));
    assert_int_equal(math_check_calls, 2);

    /* weights epochs: never 0, never the same twice */
    uint64_t e1 = backend_epoch_new(), e2 = backend_epoch_new();
    assert_true(e1 != 0 && e2 != 0 && e1 != e2);
}

/* What runs a convolution (backend_conv_describe, the profile's "runs"):
 * OpenBLAS's formulation by shape in NCHW; per pass in the blocked layout,
 * "not run" until the pass has run, then oneDNN's implementation. */
static void test_conv_describe(void **state) {
    (void)state;
    backend_ctx nc = {.layout = BACKEND_LAYOUT_NCHW, .math = BACKEND_MATH_FP32};
    char buf[512];
    conv_params one = {.N = 2, .C = 16, .H = 6, .W = 6, .K = 8, .R = 1, .S = 1, .stride_h = 1, .stride_w = 1};
    conv_params three = {.N = 2, .C = 16, .H = 6, .W = 6, .K = 8, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                         .pad_h = 1, .pad_w = 1};
    conv_params strided = three;
    strided.stride_h = strided.stride_w = 2;
    assert_int_equal(conv_params_init(&one), CNT_OK);
    assert_int_equal(conv_params_init(&three), CNT_OK);
    assert_int_equal(conv_params_init(&strided), CNT_OK);
    backend_conv_describe(be, &nc, &one, buf, sizeof buf);
    assert_non_null(strstr(buf, "OpenBLAS direct GEMM"));
    backend_conv_describe(be, &nc, &three, buf, sizeof buf);
    assert_non_null(strstr(buf, "OpenBLAS shifted GEMMs"));
    backend_conv_describe(be, &nc, &strided, buf, sizeof buf);
    assert_non_null(strstr(buf, "OpenBLAS im2col + GEMM"));
    /* a backend without the op says its name; a buffer too short is cut, terminated */
    backend own = *be;
    own.conv_describe = NULL;
    backend_conv_describe(&own, &nc, &one, buf, sizeof buf);
    assert_string_equal(buf, be->name);
    backend_conv_describe(be, &nc, &one, buf, 9);
    assert_int_equal(strlen(buf), 8);
    if (be->block_c == 0) return; /* built without oneDNN */
    backend_ctx bc = {.layout = BACKEND_LAYOUT_BLOCKED, .math = BACKEND_MATH_FP32};
    /* a shape no other test runs */
    conv_params p = {.N = 3, .C = 2 * be->block_c, .H = 7, .W = 5, .K = be->block_c, .R = 3, .S = 3,
                     .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
    assert_int_equal(conv_params_init(&p), CNT_OK);
    backend_conv_describe(be, &bc, &p, buf, sizeof buf);
    assert_string_equal(buf, "fwd not run; data not run; filter not run");
    float *x = be->alloc(conv_in_count(&p) * sizeof(float)), *w = be->alloc(conv_w_count(&p) * sizeof(float));
    float *y = be->alloc(conv_out_count(&p) * sizeof(float));
    be->conv_fwd(&bc, &p, x, w, y);
    backend_conv_describe(be, &bc, &p, buf, sizeof buf);
    assert_true(strncmp(buf, "fwd oneDNN ", 11) == 0 || strncmp(buf, "fwd ours ", 9) == 0);
    assert_non_null(strstr(buf, "; data not run; filter not run"));
    be->conv_bwd_filter(&bc, &p, x, y, w);
    backend_conv_describe(be, &bc, &p, buf, sizeof buf);
    assert_non_null(strstr(buf, "; data not run; filter "));
    assert_null(strstr(buf, "filter not run"));
    be->free(x);
    be->free(w);
    be->free(y);
}

/* ---------------------------------------------------------------- threads and determinism */

/* Two identical calls give bitwise identical results (no float atomics, no
 * scheduling-dependent reduction order), for the ops with cross-thread sums. */
/* The checks below in one layout (the values are random, so any layout's
 * order of them is as good as NCHW's). */
static void determinism_in(int layout) {
    ctx.layout = (backend_layout)layout;
    /* threads over images (partial sums per thread), and threads inside one image */
    conv_params shapes[] = {
        {.N = 8, .C = 16, .H = 16, .W = 16, .K = 32, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1,
         .pad_w = 1},
        {.N = 1, .C = 16, .H = 40, .W = 40, .K = 8, .R = 5, .S = 5, .stride_h = 2, .stride_w = 2, .pad_h = 2,
         .pad_w = 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        conv_params *cp = &shapes[i];
        assert_int_equal(conv_params_init(cp), CNT_OK);
        rng rc;
        rng_seed(&rc, 15100 + i, 1);
        size_t cx = (size_t)cp->N * cp->C * cp->H * cp->W, cw = (size_t)cp->K * cp->C * cp->R * cp->S;
        pair in = pair_uniform(&rc, cx, -1.0, 1.0);
        pair grad = pair_uniform(&rc, (size_t)cp->N * cp->K * cp->P * cp->Q, -1.0, 1.0);
        float *d1 = be->alloc(cw * sizeof(float)), *d2 = be->alloc(cw * sizeof(float));
        be->conv_bwd_filter(&ctx, cp, in.d, grad.d, d1);
        be->conv_bwd_filter(&ctx, cp, in.d, grad.d, d2);
        float *a = tu_alloc_f(cw), *b = tu_alloc_f(cw);
        be->download(a, d1, cw * sizeof(float));
        be->download(b, d2, cw * sizeof(float));
        char what[64];
        snprintf(what, sizeof what, "conv_bwd_filter twice, N%d, layout %d", cp->N, layout);
        tu_assert_bitwise_equal_f(what, a, b, cw);
        free(a);
        free(b);
        be->free(d1);
        be->free(d2);
        pair_free(&in);
        pair_free(&grad);
    }

    rng r;
    rng_seed(&r, 15000, 1);
    pair x = pair_normal(&r, (size_t)8 * 16 * 256, 1.0, 2.0), gb = pair_uniform(&r, 32, 0.5, 1.5);
    /* batch norm over [N, C, HW] = [8, 16, 256]: the same x, fresh running stats each time */
    int N = 8, C = 16, HW = 256;
    size_t n = (size_t)N * C * HW;
    float *gamma = gb.d, *beta = gb.d + C;
    float *out[2][5];
    for (int t = 0; t < 2; t++) {
        out[t][0] = be->alloc(n * sizeof(float));
        for (int k = 1; k < 5; k++) out[t][k] = be->alloc((size_t)C * sizeof(float));
        be->bn_fwd_train(&ctx, N, C, HW, x.d, gamma, beta, out[t][0], out[t][1], out[t][2], 0.1f, 1e-5f, out[t][3],
                         out[t][4]);
    }
    static const char *names[] = {"bn_fwd_train y twice", "bn running_mean twice", "bn running_var twice",
                                  "bn save_mean twice", "bn save_invstd twice"};
    for (int k = 0; k < 5; k++) {
        size_t m = k == 0 ? n : (size_t)C;
        float *a = tu_alloc_f(m), *b = tu_alloc_f(m);
        be->download(a, out[0][k], m * sizeof(float));
        be->download(b, out[1][k], m * sizeof(float));
        tu_assert_bitwise_equal_f(names[k], a, b, m);
        free(a);
        free(b);
        be->free(out[0][k]);
        be->free(out[1][k]);
    }
    pair_free(&x);
    pair_free(&gb);
    ctx.layout = BACKEND_LAYOUT_NCHW;
}

static void test_determinism(void **state) {
    (void)state;
    for (int L = BACKEND_LAYOUT_NCHW; L <= (be->block_c > 0 ? BACKEND_LAYOUT_BLOCKED : BACKEND_LAYOUT_NCHW); L++)
        determinism_in(L);
}

/* One thread gives the same answers as all of them (within float tolerance). */
static void test_set_threads(void **state) {
    (void)state;
    conv_params p = {.N = 4, .C = 8, .H = 12, .W = 12, .K = 8, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                     .pad_h = 1, .pad_w = 1};
    assert_int_equal(conv_params_init(&p), CNT_OK);
    rng r;
    rng_seed(&r, 16000, 1);
    pair x = pair_uniform(&r, (size_t)p.N * p.C * p.H * p.W, -1.0, 1.0);
    pair w = pair_uniform(&r, (size_t)p.K * p.C * p.R * p.S, -1.0, 1.0);
    pair y = pair_zero((size_t)p.N * p.K * p.P * p.Q);
    ref_conv_fwd(&p, x.h, w.h, y.h);
    be->set_threads(1);
    be->conv_fwd(&ctx, &p, x.d, w.d, y.d);
    expect("conv_fwd on 1 thread", &y, RTOL, tu_atol_f32((size_t)p.C * 9, 1.0));
    be->set_threads(0);
    be->zero(y.d, y.n * sizeof(float));
    be->conv_fwd(&ctx, &p, x.d, w.d, y.d);
    expect("conv_fwd on all threads", &y, RTOL, tu_atol_f32((size_t)p.C * 9, 1.0));
    pair_free(&x);
    pair_free(&w);
    pair_free(&y);
}

/* ------------------------------------------------- reduced-precision math
 * BACKEND_MATH_BF16 / FP16: the reference rounds the operands to the type,
 * computes in double and rounds the result; the backend's fp32 sums may land
 * on the other side of a rounding boundary, so results agree to one unit in
 * the type's last place (2^-7 relative for bf16's 8 significant bits, 2^-10
 * for fp16's 11), plus fp32's own error where sums cancel. */

typedef struct reduced_mode {
    int math;
    const char *name;
    double ulp; /* relative */
} reduced_mode;

static const reduced_mode reduced_modes[] = {{BACKEND_MATH_BF16, "bf16", 0x1p-7}, {BACKEND_MATH_FP16, "fp16", 0x1p-10}};

static double round_to(int math, double v) {
    return math == BACKEND_MATH_FP16 ? (double)fp16_round((float)v) : (double)bf16_round((float)v);
}

/* A copy of t's host values as the op sees them: rounded to the type. */
static double *rounded_host(int math, const pair *t) {
    double *r = tu_alloc(t->n);
    for (size_t i = 0; i < t->n; i++) r[i] = round_to(math, t->h[i]);
    return r;
}

static void round_host(int math, pair *t) {
    for (size_t i = 0; i < t->n; i++) t->h[i] = round_to(math, t->h[i]);
}

/* The device copy of an operand must be untouched (master weights stay fp32). */
static void expect_unchanged(const char *what, const pair *t) {
    float *got = tu_alloc_f(t->n), *want = tu_alloc_f(t->n);
    be->download(got, t->d, t->n * sizeof(float));
    for (size_t i = 0; i < t->n; i++) want[i] = (float)t->h[i];
    tu_assert_bitwise_equal_f(what, want, got, t->n);
    free(got);
    free(want);
}

static void reduced_conv_cases(const reduced_mode *md) {
    conv_params p;
    for (int i = 0; conv_case_get(i, &p); i++) {
        size_t nx = (size_t)p.N * p.C * p.H * p.W, nw = (size_t)p.K * p.C * p.R * p.S,
               ny = (size_t)p.N * p.K * p.P * p.Q;
        char what[200];
        rng r;
        rng_seed(&r, 7000 + (uint64_t)i, (uint64_t)md->math);
        pair x = pair_uniform(&r, nx, -1.0, 1.0), w = pair_uniform(&r, nw, -1.0, 1.0);
        pair y = pair_uniform(&r, ny, -1.0, 1.0), dy = pair_uniform(&r, ny, -1.0, 1.0);
        double *xr = rounded_host(md->math, &x), *wr = rounded_host(md->math, &w), *dyr = rounded_host(md->math, &dy);
        /* forward */
        ref_conv_fwd(&p, xr, wr, y.h);
        round_host(md->math, &y);
        be->conv_fwd(&ctx, &p, x.d, w.d, y.d);
        conv_label(what, sizeof what, md->name, &p, 0, 0);
        strncat(what, " conv_fwd", sizeof what - strlen(what) - 1);
        expect(what, &y, md->ulp, tu_atol_f32((size_t)p.C * p.R * p.S, 1.0));
        expect_unchanged("conv_fwd leaves x alone", &x);
        expect_unchanged("conv_fwd leaves w alone", &w);
        /* backward data, overwriting and accumulating onto rounded old values */
        for (int acc = 0; acc <= 1; acc++) {
            pair dx = pair_uniform(&r, nx, -1.0, 1.0);
            ref_conv_bwd_data(&p, dyr, wr, dx.h, acc);
            round_host(md->math, &dx);
            be->conv_bwd_data(&ctx, &p, dy.d, w.d, dx.d, acc, 0);
            conv_label(what, sizeof what, md->name, &p, acc, 0);
            strncat(what, " conv_bwd_data", sizeof what - strlen(what) - 1);
            expect(what, &dx, md->ulp, tu_atol_f32((size_t)p.K * p.R * p.S, 2.0));
            pair_free(&dx);
        }
        expect_unchanged("conv_bwd_data leaves dy alone", &dy);
        /* backward filter */
        pair dw = pair_uniform(&r, nw, -1.0, 1.0);
        ref_conv_bwd_filter(&p, xr, dyr, dw.h);
        round_host(md->math, &dw);
        be->conv_bwd_filter(&ctx, &p, x.d, dy.d, dw.d);
        conv_label(what, sizeof what, md->name, &p, 0, 0);
        strncat(what, " conv_bwd_filter", sizeof what - strlen(what) - 1);
        expect(what, &dw, md->ulp, tu_atol_f32((size_t)p.N * p.P * p.Q, 1.0));
        pair_free(&dw);
        free(xr);
        free(wr);
        free(dyr);
        pair_free(&x);
        pair_free(&w);
        pair_free(&y);
        pair_free(&dy);
    }
}

static void reduced_gemm_cases(const reduced_mode *md) {
    static const struct {
        int M, N, K, pad;
        double alpha, beta;
    } cases[] = {{7, 13, 29, 0, 1.0, 0.0}, {1, 10, 64, 3, 1.0, 1.0}, {64, 100, 300, 5, 1.0, 0.5}, {33, 47, 65, 2, 0.25, -1.0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int ta = 0; ta <= 1; ta++)
            for (int tb = 0; tb <= 1; tb++) {
                int M = cases[i].M, N = cases[i].N, K = cases[i].K, pad = cases[i].pad;
                int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
                int lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
                rng r;
                rng_seed(&r, 9500 + i, (uint64_t)(4 * md->math + 2 * ta + tb));
                pair A = pair_uniform(&r, (size_t)a_rows * lda, -1.0, 1.0);
                pair B = pair_uniform(&r, (size_t)b_rows * ldb, -1.0, 1.0);
                pair C = pair_uniform(&r, (size_t)M * ldc, -1.0, 1.0);
                double *Ar = rounded_host(md->math, &A), *Br = rounded_host(md->math, &B);
                float *c0 = tu_alloc_f(C.n);
                for (size_t k = 0; k < C.n; k++) c0[k] = (float)C.h[k];
                ref_gemm(ta, tb, M, N, K, cases[i].alpha, Ar, lda, Br, ldb, cases[i].beta, C.h, ldc);
                /* only C's M x N values are results; its padding columns stay as they were */
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) C.h[(size_t)m * ldc + n] = round_to(md->math, C.h[(size_t)m * ldc + n]);
                be->gemm(&ctx, ta, tb, M, N, K, (float)cases[i].alpha, A.d, lda, B.d, ldb, (float)cases[i].beta, C.d,
                         ldc, 0);
                char what[128];
                snprintf(what, sizeof what, "%s gemm %c%c M%d N%d K%d ld+%d alpha %g beta %g", md->name,
                         ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, pad, cases[i].alpha, cases[i].beta);
                expect(what, &C, md->ulp, tu_atol_f32((size_t)K, fabs(cases[i].alpha) + fabs(cases[i].beta)));
                expect_unchanged("gemm leaves A alone", &A);
                expect_unchanged("gemm leaves B alone", &B);
                float *cg = tu_alloc_f(C.n);
                be->download(cg, C.d, C.n * sizeof(float));
                for (int m = 0; m < M; m++)
                    for (int k = N; k < ldc; k++)
                        if (memcmp(&cg[(size_t)m * ldc + k], &c0[(size_t)m * ldc + k], sizeof(float)) != 0)
                            fail_msg("%s: C's padding [%d][%d] changed (%a -> %a)", what, m, k,
                                     (double)c0[(size_t)m * ldc + k], (double)cg[(size_t)m * ldc + k]);
                free(cg);
                free(c0);
                free(Ar);
                free(Br);
                pair_free(&A);
                pair_free(&B);
                pair_free(&C);
            }
}

/* Values chosen so that each rounding shows on its own: an operand the type
 * cannot hold, a sum the type cannot hold, and a product beyond fp16. */
static void reduced_exact_values(const reduced_mode *md) {
    int fp16 = md->math == BACKEND_MATH_FP16;
    double fine = fp16 ? 0x1p-12 : 0x1p-9; /* 1 + fine fits fp32, not the type; fine alone fits */
    /* 1x1 convolution over two channels: y = x0*w0 + x1*w1 */
    conv_params p = {.N = 1, .C = 2, .H = 1, .W = 1, .K = 1, .R = 1, .S = 1, .stride_h = 1, .stride_w = 1};
    assert_int_equal(conv_params_init(&p), CNT_OK);
    double xv[2] = {1.0 + fine, -1.0}, wv[2] = {1.0, 1.0}, y0[1] = {0};
    pair x = pair_of(xv, 2), w = pair_of(wv, 2), y = pair_of(y0, 1);
    float got;
    be->conv_fwd(&ctx, &p, x.d, w.d, y.d);
    be->download(&got, y.d, sizeof got);
    assert_true(got == 0.0f); /* the operand was rounded to 1 (fp32 operands would give `fine`, which the type holds) */
    pair_free(&x);
    double xs[2] = {1.0, fine};
    x = pair_of(xs, 2);
    be->conv_fwd(&ctx, &p, x.d, w.d, y.d);
    be->download(&got, y.d, sizeof got);
    assert_true(got == 1.0f); /* the sum was rounded */
    ctx.math = BACKEND_MATH_FP32;
    be->conv_fwd(&ctx, &p, x.d, w.d, y.d);
    be->download(&got, y.d, sizeof got);
    assert_true(got == (float)(1.0 + fine)); /* and fp32 keeps both */
    ctx.math = (backend_math)md->math;
    pair_free(&x);
    /* 300 * 300 = 90000: inf in fp16 (max 65504), 90112 in bf16 */
    double big[2] = {300.0, 0.0}, wbig[2] = {300.0, 0.0};
    x = pair_of(big, 2);
    pair_free(&w);
    w = pair_of(wbig, 2);
    be->conv_fwd(&ctx, &p, x.d, w.d, y.d);
    be->download(&got, y.d, sizeof got);
    if (fp16) assert_true(isinf(got) && got > 0);
    else assert_true(got == 90112.0f);
    /* the same through gemm: C[1x1] = A[1x2] B[2x1] */
    float c = 0;
    float *cd = be->alloc(sizeof(float));
    be->gemm(&ctx, 0, 0, 1, 1, 2, 1.0f, x.d, 2, w.d, 1, 0.0f, cd, 1, 0);
    be->download(&c, cd, sizeof c);
    if (fp16) assert_true(isinf(c) && c > 0);
    else assert_true(c == 90112.0f);
    be->free(cd);
    pair_free(&x);
    pair_free(&w);
    pair_free(&y);
}

static void test_reduced_precision(void **state) {
    (void)state;
    for (size_t m = 0; m < sizeof reduced_modes / sizeof reduced_modes[0]; m++) {
        ctx.math = (backend_math)reduced_modes[m].math;
        reduced_exact_values(&reduced_modes[m]);
        reduced_conv_cases(&reduced_modes[m]);
        reduced_gemm_cases(&reduced_modes[m]);
        ctx.math = BACKEND_MATH_FP32;
    }
}

static void test_find_nonfinite(void **state) {
    (void)state;
    static const size_t sizes[] = {0, 1, 100, 100003};
    float *found = be->alloc(sizeof(float));
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *h = tu_alloc_f(n ? n : 1);
        for (size_t i = 0; i < n; i++) h[i] = (float)(i % 17) * 1e30f - 3e30f; /* large but finite */
        float *d = be->alloc((n ? n : 1) * sizeof(float));
        for (int kind = 0; kind < 4; kind++) { /* none, +inf at the end, -inf in the middle, NaN first */
            if (n == 0 && kind > 0) break;
            be->upload(d, h, n * sizeof(float));
            float bad = kind == 1 ? INFINITY : kind == 2 ? -INFINITY : NAN;
            size_t at = kind == 1 ? n - 1 : kind == 2 ? n / 2 : 0;
            if (kind > 0) be->upload(d + at, &bad, sizeof bad);
            float f = 0;
            be->upload(found, &f, sizeof f);
            be->find_nonfinite(n, d, found);
            be->download(&f, found, sizeof f);
            if (f != (kind > 0 ? 1.0f : 0.0f)) fail_msg("find_nonfinite n=%zu kind %d: flag %g", n, kind, (double)f);
        }
        /* a set flag stays set: several arrays share one */
        float one = 1.0f, f;
        be->upload(d, h, n * sizeof(float));
        be->upload(found, &one, sizeof one);
        be->find_nonfinite(n, d, found);
        be->download(&f, found, sizeof f);
        assert_true(f == 1.0f);
        be->free(d);
        free(h);
    }
    be->free(found);
}

/* --------------------------------------------- activation layouts (NHWC, BLOCKED)
 * convert_layout against a host loop, and every layout-sensitive op run in
 * every layout on the same logical data: once in NCHW, once in each other
 * layout with the operands converted by the test's own loop (host_permute, not
 * the backend's convert_layout); the results, converted back, are compared
 * with the NCHW ones. Other layouts may sum in another order, so the
 * comparison allows what the reference comparisons above allow (RTOL and
 * tu_atol_f32); bitwise-equal results pass as well. BLOCKED runs where the
 * backend has it (block_c > 0: the CPU backend built with oneDNN). */

static const char *const layout_names[] = {"NCHW", "NHWC", "BLOCKED"};

/* The last layout this backend has: BLOCKED or NHWC. */
static int last_layout(void) { return be->block_c > 0 ? BACKEND_LAYOUT_BLOCKED : BACKEND_LAYOUT_NHWC; }

/* Where element (n, c, i) of a [N, C, HW] activation lives in a layout
 * (model/backend.h, backend_ctx). */
static size_t act_index(int layout, int C, int HW, int n, int c, int i) {
    int B = be->block_c;
    if (layout == BACKEND_LAYOUT_NHWC) return ((size_t)n * HW + i) * C + c;
    if (layout == BACKEND_LAYOUT_BLOCKED && C % B == 0)
        return (((size_t)n * (C / B) + c / B) * HW + i) * B + c % B;
    return ((size_t)n * C + c) * HW + i;
}

/* dst in `layout` = src [N, C, HW] in NCHW permuted when to_layout, else the inverse. */
static void host_permute(int N, int C, int HW, const double *src, double *dst, int layout, int to_layout) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) {
                size_t nchw = act_index(BACKEND_LAYOUT_NCHW, C, HW, n, c, i);
                size_t other = act_index(layout, C, HW, n, c, i);
                if (to_layout) dst[other] = src[nchw];
                else dst[nchw] = src[other];
            }
}

static void test_convert_layout(void **state) {
    (void)state;
    /* N, C, HW; channel counts that are multiples of 8 and 16 are stored in blocks in BLOCKED */
    static const int sizes[][3] = {{2, 3, 49}, {3, 67, 33}, {4, 6, 1},  {2, 1, 20},  {1, 5, 7},
                                   {5, 8, 9},  {1, 1, 1},   {2, 16, 9}, {3, 32, 1}, {2, 48, 25}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int layout = BACKEND_LAYOUT_NCHW; layout <= last_layout(); layout++)
            for (int to = 0; to <= 1; to++)
                for (int acc = 0; acc <= 1; acc++) {
                    int N = sizes[i][0], C = sizes[i][1], HW = sizes[i][2];
                    size_t n = (size_t)N * C * HW;
                    rng r;
                    rng_seed(&r, 20000 + i, (uint64_t)(16 * layout + 2 * to + acc));
                    pair src = pair_uniform(&r, n, -1.0, 1.0);
                    pair dst = pair_uniform(&r, n, -1.0, 1.0); /* kept and added to when accumulating */
                    double *perm = tu_alloc(n);
                    host_permute(N, C, HW, src.h, perm, layout, to);
                    for (size_t k = 0; k < n; k++) dst.h[k] = (acc ? dst.h[k] : 0.0) + perm[k];
                    be->convert_layout(N, C, HW, src.d, BACKEND_DTYPE_FP32, dst.d, BACKEND_DTYPE_FP32, layout, to, acc);
                    char what[160];
                    snprintf(what, sizeof what, "convert_layout N%d C%d HW%d %s %s acc %d", N, C, HW,
                             to ? "NCHW to" : "to NCHW from", layout_names[layout], acc);
                    /* a permutation is exact; a sum of two floats is off by at most one rounding */
                    expect(what, &dst, acc ? 1.2e-7 : 0.0, 0.0);
                    expect_unchanged("convert_layout leaves src alone", &src);
                    free(perm);
                    pair_free(&src);
                    pair_free(&dst);
                }
}

/* channel_copy and bias_fwd on known values in context in must give
 * `layout`'s results. */
static void layout_known_values(const backend_ctx *in, int layout, const char *when) {
    enum { N = 2, C = 2, HW = 3, SC = 3, SO = 1, DC = 4, DO = 2, BC = 3 };
    float src[N * SC * HW], dst[N * DC * HW], want[2][N * DC * HW], b[BC] = {1.0f, 2.0f, 3.0f};
    float y[N * BC * HW], ywant[2][N * BC * HW];
    for (int k = 0; k < N * SC * HW; k++) src[k] = (float)k;
    for (int l = 0; l <= 1; l++) {
        for (int k = 0; k < N * DC * HW; k++) want[l][k] = -1.0f;
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++)
                for (int i = 0; i < HW; i++)
                    want[l][act_index(l, DC, HW, n, DO + c, i)] = src[act_index(l, SC, HW, n, SO + c, i)];
        for (int n = 0; n < N; n++)
            for (int c = 0; c < BC; c++)
                for (int i = 0; i < HW; i++) ywant[l][act_index(l, BC, HW, n, c, i)] = b[c];
    }
    /* the two layouts' answers differ, so the check tells them apart */
    assert_true(memcmp(want[0], want[1], sizeof want[0]) != 0 && memcmp(ywant[0], ywant[1], sizeof ywant[0]) != 0);
    float *ds = be->alloc(sizeof src), *dd = be->alloc(sizeof dst);
    float *db = be->alloc(sizeof b), *dyv = be->alloc(sizeof y);
    for (int k = 0; k < N * DC * HW; k++) dst[k] = -1.0f;
    be->upload(ds, src, sizeof src);
    be->upload(dd, dst, sizeof dst);
    be->upload(db, b, sizeof b);
    be->channel_copy(in, N, C, HW, ds, SC, SO, dd, DC, DO, 0);
    be->bias_fwd(in, N, BC, HW, db, dyv); /* y is zero-filled by alloc */
    be->download(dst, dd, sizeof dst);
    be->download(y, dyv, sizeof y);
    char what[96];
    snprintf(what, sizeof what, "channel_copy %s", when);
    tu_assert_bitwise_equal_f(what, want[layout], dst, (size_t)N * DC * HW);
    snprintf(what, sizeof what, "bias_fwd %s", when);
    tu_assert_bitwise_equal_f(what, ywant[layout], y, (size_t)N * BC * HW);
    be->free(ds);
    be->free(dd);
    be->free(db);
    be->free(dyv);
}

/* NCHW is the default: a zeroed context's layout. Each op takes the layout
 * of the context it is given, whatever the contexts of the ops before it
 * (the backend keeps none: model/backend.h). */
static void test_layout_default(void **state) {
    (void)state;
    const backend_ctx zero = {0}, nhwc = {.layout = BACKEND_LAYOUT_NHWC};
    layout_known_values(&zero, BACKEND_LAYOUT_NCHW, "in a zeroed context");
    layout_known_values(&nhwc, BACKEND_LAYOUT_NHWC, "in an NHWC context");
    layout_known_values(&zero, BACKEND_LAYOUT_NCHW, "in a zeroed context after an NHWC one");
    layout_known_values(&nhwc, BACKEND_LAYOUT_NHWC, "in an NHWC context after an NCHW one");
}

/* train.layout = auto (backend_layout_choose): the CPU takes its blocked
 * layout when it has one, else NCHW, whatever the precision or image size; a
 * GPU takes NHWC where its convolutions run on tensor cores (bf16, fp16;
 * tf32 from 64 pixels a side, NCHW below) and NCHW in plain fp32; a layout
 * asked for by name is kept. */
static void test_layout_auto_rule(void **state) {
    (void)state;
    backend gpu = {.name = "cuda"}, cpu_plain = {.name = "cpu", .is_cpu = 1};
    backend cpu_blocked = {.name = "cpu", .is_cpu = 1, .block_c = 16};
    const backend_math maths[] = {BACKEND_MATH_FP32, BACKEND_MATH_TF32, BACKEND_MATH_BF16, BACKEND_MATH_FP16};
    const int sizes[][2] = {{224, 224}, {299, 299}, {64, 64}, {64, 200}, {28, 28}, {32, 32}, {63, 224}, {224, 63}};
    for (int m = 0; m < 4; m++)
        for (int k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
            int h = sizes[k][0], w = sizes[k][1], small = (h < w ? h : w) < 64;
            backend_layout want = maths[m] == BACKEND_MATH_FP32                 ? BACKEND_LAYOUT_NCHW
                                  : maths[m] == BACKEND_MATH_TF32 && small ? BACKEND_LAYOUT_NCHW
                                                                            : BACKEND_LAYOUT_NHWC;
            assert_int_equal(backend_layout_choose(BACKEND_LAYOUT_AUTO, &gpu, maths[m], h, w), want);
            assert_int_equal(backend_layout_choose(BACKEND_LAYOUT_AUTO, &cpu_plain, maths[m], h, w),
                             BACKEND_LAYOUT_NCHW);
            assert_int_equal(backend_layout_choose(BACKEND_LAYOUT_AUTO, &cpu_blocked, maths[m], h, w),
                             BACKEND_LAYOUT_BLOCKED);
            assert_int_equal(backend_layout_choose(BACKEND_LAYOUT_NCHW, &gpu, maths[m], h, w), BACKEND_LAYOUT_NCHW);
            assert_int_equal(backend_layout_choose(BACKEND_LAYOUT_NHWC, &gpu, maths[m], h, w), BACKEND_LAYOUT_NHWC);
            assert_int_equal(backend_layout_choose(BACKEND_LAYOUT_NHWC, &cpu_blocked, maths[m], h, w),
                             BACKEND_LAYOUT_NHWC);
        }
}

/* A logical [N, C, HW] tensor on the device in every layout, d[L] for L up
 * to last_layout(). Filters and per-channel vectors, stored alike in every
 * layout, are twins of shape [1, n, 1] (the same bytes in each). */
typedef struct twin {
    int N, C, HW;
    size_t n;
    float *d[3];
} twin;

static twin twin_of(const double *nchw, int N, int C, int HW) {
    twin t = {N, C, HW, (size_t)N * C * HW, {NULL, NULL, NULL}};
    double *other = tu_alloc(t.n);
    t.d[BACKEND_LAYOUT_NCHW] = tu_dev_from_double(be, nchw, t.n);
    for (int L = BACKEND_LAYOUT_NHWC; L <= last_layout(); L++) {
        host_permute(N, C, HW, nchw, other, L, 1);
        t.d[L] = tu_dev_from_double(be, other, t.n);
    }
    free(other);
    return t;
}

/* Uniform in [a, b), or normal with mean a and deviation b. */
static twin twin_random(rng *r, int N, int C, int HW, double a, double b, int normal) {
    size_t n = (size_t)N * C * HW;
    double *h = tu_alloc(n);
    if (normal) tu_fill_normal(r, h, n, a, b);
    else tu_fill_uniform(r, h, n, a, b);
    twin t = twin_of(h, N, C, HW);
    free(h);
    return t;
}

static twin twin_uniform(rng *r, int N, int C, int HW, double lo, double hi) {
    return twin_random(r, N, C, HW, lo, hi, 0);
}

static twin twin_vec(rng *r, int n, double lo, double hi) { return twin_random(r, 1, n, 1, lo, hi, 0); }

static void twin_free(twin *t) {
    for (int L = 0; L < 3; L++) {
        be->free(t->d[L]);
        t->d[L] = NULL;
    }
}

/* Each other layout's result, converted to NCHW, against the NCHW one. With a
 * reduced math mode its values must also be values of that type (the op
 * rounds its final result, after accumulate has added the old contents). */
static void twin_expect(const char *what, const twin *t, double rtol, double atol, int math) {
    double *want = tu_alloc(t->n), *other = tu_alloc(t->n), *got = tu_alloc(t->n);
    tu_dev_to_double(be, t->d[BACKEND_LAYOUT_NCHW], want, t->n);
    for (int L = BACKEND_LAYOUT_NHWC; L <= last_layout(); L++) {
        tu_dev_to_double(be, t->d[L], other, t->n);
        host_permute(t->N, t->C, t->HW, other, got, L, 0);
        char label[256];
        snprintf(label, sizeof label, "%s: %s (expected: NCHW)", what, layout_names[L]);
        tu_assert_close(label, want, got, t->n, rtol, atol);
        if (math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16)
            for (size_t i = 0; i < t->n; i++)
                if (round_to(math, got[i]) != got[i])
                    fail_msg("%s: %s result [%zu] (NCHW index) = %a is not rounded to the math mode's type", what,
                             layout_names[L], i, got[i]);
    }
    free(want);
    free(other);
    free(got);
}

/* Runs the statement once per layout, L naming it (index the twins' d[] with
 * it) and ctx in it, and leaves ctx in NCHW. */
#define IN_EVERY_LAYOUT(...)                                                    \
    do {                                                                        \
        for (int L = BACKEND_LAYOUT_NCHW; L <= last_layout(); L++) {            \
            ctx.layout = (backend_layout)L;                                     \
            __VA_ARGS__;                                                        \
        }                                                                       \
        ctx.layout = BACKEND_LAYOUT_NCHW;                                       \
    } while (0)

/* Each of the CPU backend's convolution algorithms (see conv_fixed), batch 1 and more. */
static const conv_case layout_conv_cases[] = {
    {3, 16, 8, 8, 12, 1, 1, 1, 1, 0, 0},   /* direct: 1x1 stride 1 unpadded */
    {1, 16, 10, 10, 8, 1, 1, 1, 1, 0, 0},  /* direct, batch 1 */
    {2, 8, 7, 7, 4, 3, 3, 1, 1, 1, 1},     /* shift: 3x3 stride 1 pad 1, 8 channels */
    {1, 32, 12, 12, 16, 3, 3, 1, 1, 1, 1}, /* shift, batch 1 */
    {2, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1},     /* im2col: 3x3 stride 1, 3 channels */
    {3, 5, 9, 8, 6, 3, 3, 2, 2, 1, 1},     /* im2col: 3x3 stride 2 */
    {1, 8, 10, 11, 9, 3, 3, 2, 2, 1, 1},   /* 3x3 stride 2, batch 1 */
    {1, 3, 23, 23, 8, 7, 7, 2, 2, 3, 3},   /* 7x7/2 stem, batch 1 */
    {2, 3, 32, 32, 8, 7, 7, 2, 2, 3, 3},   /* 7x7/2 stem, batch 2 */
    {2, 6, 9, 9, 4, 1, 7, 1, 1, 0, 3},     /* 1x7 pad (0, 3), 6 channels */
    {2, 12, 9, 9, 5, 1, 7, 1, 1, 0, 3},    /* 1x7 pad (0, 3), 12 channels */
    {1, 12, 9, 9, 5, 7, 1, 1, 1, 3, 0},    /* 7x1 pad (3, 0), batch 1 */
    {12, 4, 7, 7, 8, 3, 3, 2, 2, 1, 1},    /* small images grouped in one GEMM */
    {1, 7, 48, 48, 4, 5, 5, 1, 1, 2, 2},   /* large im2col: tiled */
    /* channel counts in whole blocks of 8 and 16 (BLOCKED keeps them blocked) */
    {2, 3, 16, 16, 16, 3, 3, 1, 1, 1, 1},  /* stem: NCHW image into a blocked output */
    {2, 1, 12, 12, 16, 3, 3, 1, 1, 1, 1},  /* 1-channel stem (oneDNN's backward_weights: reference only) */
    {2, 16, 9, 9, 32, 3, 3, 2, 2, 1, 1},   /* stride 2, 16 -> 32 */
    {3, 32, 6, 6, 16, 1, 1, 1, 1, 0, 0},   /* 1x1 */
    {2, 48, 8, 8, 32, 1, 7, 1, 1, 0, 3},   /* 1x7 */
    {2, 16, 7, 7, 12, 3, 3, 1, 1, 1, 1},   /* blocked input, output of 12 channels (NCHW in BLOCKED) */
};

/* conv_fwd, conv_bwd_data (accumulate 0 and 1) and conv_bwd_filter of one case,
 * in `math` (fp32 or bf16, whose results may differ by one unit of bf16). */
static void layout_conv_case(const conv_params *p, int i, int math) {
    int bf16 = math == BACKEND_MATH_BF16, HW = p->H * p->W, PQ = p->P * p->Q, nw = (int)conv_w_count(p);
    double rtol = bf16 ? 0x1p-7 : RTOL;
    rng r;
    rng_seed(&r, 21000 + (uint64_t)i, (uint64_t)math);
    twin x = twin_uniform(&r, p->N, p->C, HW, -1.0, 1.0), w = twin_vec(&r, nw, -1.0, 1.0);
    twin y = twin_uniform(&r, p->N, p->K, PQ, -1.0, 1.0); /* overwritten */
    twin dy = twin_uniform(&r, p->N, p->K, PQ, -1.0, 1.0);
    twin dw = twin_vec(&r, nw, -1.0, 1.0); /* overwritten */
    char what[200];
    ctx.math = (backend_math)math;
    IN_EVERY_LAYOUT(be->conv_fwd(&ctx, p, x.d[L], w.d[L], y.d[L]));
    conv_label(what, sizeof what, bf16 ? "bf16 conv_fwd" : "conv_fwd", p, 0, 0);
    twin_expect(what, &y, rtol, tu_atol_f32((size_t)p->C * p->R * p->S, 1.0), math);
    for (int acc = 0; acc <= 1; acc++) {
        twin dx = twin_uniform(&r, p->N, p->C, HW, -1.0, 1.0);
        IN_EVERY_LAYOUT(be->conv_bwd_data(&ctx, p, dy.d[L], w.d[L], dx.d[L], acc, 0));
        conv_label(what, sizeof what, bf16 ? "bf16 conv_bwd_data" : "conv_bwd_data", p, acc, 0);
        twin_expect(what, &dx, rtol, tu_atol_f32((size_t)p->K * p->R * p->S, 2.0), math);
        twin_free(&dx);
    }
    IN_EVERY_LAYOUT(be->conv_bwd_filter(&ctx, p, x.d[L], dy.d[L], dw.d[L]));
    conv_label(what, sizeof what, bf16 ? "bf16 conv_bwd_filter" : "conv_bwd_filter", p, 0, 0);
    twin_expect(what, &dw, rtol, tu_atol_f32((size_t)p->N * PQ, 1.0), math);
    ctx.math = BACKEND_MATH_FP32;
    twin_free(&x);
    twin_free(&w);
    twin_free(&y);
    twin_free(&dy);
    twin_free(&dw);
}

static void layout_conv_all(int math) {
    for (size_t i = 0; i < sizeof layout_conv_cases / sizeof layout_conv_cases[0]; i++) {
        conv_params p;
        conv_case_params(&layout_conv_cases[i], &p);
        layout_conv_case(&p, (int)i, math);
    }
    ctx = (backend_ctx){0};
}

static void test_layout_conv(void **state) {
    (void)state;
    layout_conv_all(BACKEND_MATH_FP32);
}

static void test_layout_conv_bf16(void **state) {
    (void)state;
    layout_conv_all(BACKEND_MATH_BF16);
}

static void test_layout_bias(void **state) {
    (void)state;
    static const int shapes[][3] = {{2, 3, 17}, {1, 5, 49}, {3, 64, 196}, {2, 67, 33},
                                    {7, 10, 1}, {1, 1, 1},  {2, 16, 9},   {3, 48, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int N = shapes[i][0], C = shapes[i][1], HW = shapes[i][2];
        rng r;
        rng_seed(&r, 22000 + i, 1);
        twin b = twin_vec(&r, C, -1.0, 1.0), db = twin_vec(&r, C, -1.0, 1.0); /* db overwritten */
        twin y = twin_uniform(&r, N, C, HW, -1.0, 1.0), dy = twin_uniform(&r, N, C, HW, -1.0, 1.0);
        char what[96];
        IN_EVERY_LAYOUT(be->bias_fwd(&ctx, N, C, HW, b.d[L], y.d[L]));
        snprintf(what, sizeof what, "bias_fwd N%d C%d HW%d", N, C, HW);
        twin_expect(what, &y, RTOL, tu_atol_f32(1, 1.0), BACKEND_MATH_FP32);
        IN_EVERY_LAYOUT(be->bias_bwd(&ctx, N, C, HW, dy.d[L], db.d[L]));
        snprintf(what, sizeof what, "bias_bwd N%d C%d HW%d", N, C, HW);
        twin_expect(what, &db, RTOL, tu_atol_f32((size_t)N * HW, 1.0), BACKEND_MATH_FP32);
        twin_free(&b);
        twin_free(&db);
        twin_free(&y);
        twin_free(&dy);
    }
}

/* bn_cases, then channel counts that are no multiple of a vector width */
static const bn_case layout_bn_extra[] = {
    {2, 67, 33, 0.5, 1.5, 0.1, 1e-5},
    {5, 19, 1, -1.0, 1.0, 0.1, 1e-5}, /* HW = 1 */
    {3, 32, 25, 0.5, 1.5, 0.1, 1e-5}, /* whole blocks of 8 and 16 */
    {2, 16, 49, 3.0, 2.0, 0.1, 1e-3},
    {4, 48, 1, 0.0, 1.0, 0.1, 1e-5},  /* blocks, HW = 1 */
};

static void test_layout_bn(void **state) {
    (void)state;
    size_t n_base = sizeof bn_cases / sizeof bn_cases[0], n_extra = sizeof layout_bn_extra / sizeof layout_bn_extra[0];
    for (size_t i = 0; i < n_base + n_extra; i++) {
        const bn_case *bc = i < n_base ? &bn_cases[i] : &layout_bn_extra[i - n_base];
        int N = bc->N, C = bc->C, HW = bc->HW, F = BACKEND_MATH_FP32;
        size_t M = (size_t)N * HW;
        rng r;
        rng_seed(&r, 23000 + i, 1);
        twin x = twin_random(&r, N, C, HW, bc->mean, bc->std, 1);
        twin gamma = twin_vec(&r, C, 0.5, 1.5), beta = twin_vec(&r, C, -0.5, 0.5);
        twin y = twin_uniform(&r, N, C, HW, -1.0, 1.0);
        twin rmean = twin_vec(&r, C, -1.0, 1.0), rvar = twin_vec(&r, C, 0.5, 2.0);
        twin smean = twin_vec(&r, C, -1.0, 1.0), sinv = twin_vec(&r, C, -1.0, 1.0); /* overwritten */
        char what[128];
        IN_EVERY_LAYOUT(be->bn_fwd_train(&ctx, N, C, HW, x.d[L], gamma.d[L], beta.d[L], y.d[L], rmean.d[L], rvar.d[L],
                                         (float)bc->momentum, (float)bc->eps, smean.d[L], sinv.d[L]));
        snprintf(what, sizeof what, "bn_fwd_train y N%d C%d HW%d", N, C, HW);
        twin_expect(what, &y, RTOL, tu_atol_f32(M, 1.0), F);
        snprintf(what, sizeof what, "bn_fwd_train save_mean N%d C%d HW%d", N, C, HW);
        twin_expect(what, &smean, RTOL, tu_atol_f32(M, bc->std), F);
        snprintf(what, sizeof what, "bn_fwd_train save_invstd N%d C%d HW%d", N, C, HW);
        twin_expect(what, &sinv, RTOL, tu_atol_f32(M, 1.0 / bc->std), F);
        snprintf(what, sizeof what, "bn_fwd_train running_mean N%d C%d HW%d", N, C, HW);
        twin_expect(what, &rmean, RTOL, tu_atol_f32(M, bc->std), F);
        snprintf(what, sizeof what, "bn_fwd_train running_var N%d C%d HW%d", N, C, HW);
        twin_expect(what, &rvar, RTOL, tu_atol_f32(M, bc->std * bc->std), F);

        /* inference, with running statistics of its own */
        twin im = twin_vec(&r, C, bc->mean - 0.5, bc->mean + 0.5), iv = twin_vec(&r, C, 0.2, 2.0);
        twin yi = twin_uniform(&r, N, C, HW, -1.0, 1.0);
        IN_EVERY_LAYOUT(be->bn_fwd_infer(&ctx, N, C, HW, x.d[L], gamma.d[L], beta.d[L], yi.d[L], im.d[L], iv.d[L],
                                         (float)bc->eps));
        snprintf(what, sizeof what, "bn_fwd_infer N%d C%d HW%d", N, C, HW);
        twin_expect(what, &yi, RTOL, tu_atol_f32(1, 1.0), F);

        /* backward, both layouts with the NCHW forward's saved statistics */
        const float *sm = smean.d[BACKEND_LAYOUT_NCHW], *si = sinv.d[BACKEND_LAYOUT_NCHW];
        double *si_h = tu_alloc((size_t)C);
        tu_dev_to_double(be, si, si_h, (size_t)C);
        for (int acc = 0; acc <= 1; acc++) {
            twin dy = twin_random(&r, N, C, HW, 0.0, 1.0, 1), dx = twin_uniform(&r, N, C, HW, -1.0, 1.0);
            twin dgamma = twin_vec(&r, C, -1.0, 1.0), dbeta = twin_vec(&r, C, -1.0, 1.0); /* overwritten */
            IN_EVERY_LAYOUT(be->bn_bwd(&ctx, N, C, HW, x.d[L], dy.d[L], gamma.d[L], sm, si, (float)bc->eps, dx.d[L],
                                       dgamma.d[L], dbeta.d[L], acc));
            snprintf(what, sizeof what, "bn_bwd dx N%d C%d HW%d acc %d", N, C, HW, acc);
            twin_expect(what, &dx, RTOL, tu_atol_f32(M, max_abs(si_h, (size_t)C)), F);
            snprintf(what, sizeof what, "bn_bwd dgamma N%d C%d HW%d acc %d", N, C, HW, acc);
            twin_expect(what, &dgamma, RTOL, tu_atol_f32(M, 2.0), F);
            snprintf(what, sizeof what, "bn_bwd dbeta N%d C%d HW%d acc %d", N, C, HW, acc);
            twin_expect(what, &dbeta, RTOL, tu_atol_f32(M, 1.0), F);
            twin_free(&dy);
            twin_free(&dx);
            twin_free(&dgamma);
            twin_free(&dbeta);
        }
        free(si_h);
        twin *all[] = {&x, &gamma, &beta, &y, &rmean, &rvar, &smean, &sinv, &im, &iv, &yi};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) twin_free(all[k]);
    }
}

/* pool_fwd, then pool_bwd (accumulate 0 and 1) on each layout's own forward output. */
static void layout_pool_case(const pool_params *p, int i) {
    int HW = p->H * p->W, PQ = p->P * p->Q;
    size_t nx = (size_t)p->N * p->C * HW;
    rng r;
    rng_seed(&r, 24000 + (uint64_t)i, 1);
    double *h = tu_alloc(nx);
    tu_fill_uniform(&r, h, nx, -1.0, 1.0);
    if (i % 2) /* ties in max windows: both layouts must pick the same first maximum */
        for (size_t k = 0; k < nx; k++) h[k] = floor(h[k] * 2.0) / 2.0;
    twin x = twin_of(h, p->N, p->C, HW);
    free(h);
    twin y = twin_uniform(&r, p->N, p->C, PQ, -1.0, 1.0); /* overwritten */
    char what[192];
    IN_EVERY_LAYOUT(be->pool_fwd(&ctx, p, x.d[L], y.d[L], NULL));
    pool_label(what, sizeof what, "pool_fwd", p, 0);
    twin_expect(what, &y, RTOL, tu_atol_f32((size_t)(p->R * p->S > 0 ? p->R * p->S : HW), 1.0), BACKEND_MATH_FP32);
    for (int acc = 0; acc <= 1; acc++) {
        twin dy = twin_uniform(&r, p->N, p->C, PQ, -1.0, 1.0), dx = twin_uniform(&r, p->N, p->C, HW, -1.0, 1.0);
        IN_EVERY_LAYOUT(be->pool_bwd(&ctx, p, x.d[L], y.d[L], dy.d[L], dx.d[L], acc, NULL));
        pool_label(what, sizeof what, "pool_bwd", p, acc);
        twin_expect(what, &dx, RTOL, tu_atol_f32((size_t)(p->R * p->S > 0 ? p->R * p->S : PQ), 1.0),
                    BACKEND_MATH_FP32);
        twin_free(&dy);
        twin_free(&dx);
    }
    twin_free(&x);
    twin_free(&y);
}

/* pool_fixed and the random pool cases, then more channels per pixel */
static const tu_pool_case layout_pool_extra[] = {
    {POOL_MODE_MAX, 2, 67, 9, 9, 3, 3, 2, 2, 1, 1, 0, 0, 0},
    {POOL_MODE_MAX, 1, 16, 8, 9, 3, 3, 2, 2, 0, 0, 1, 0, 0},             /* ceil_mode */
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 12, 9, 8, 3, 3, 2, 2, 1, 1, 1, 0, 0}, /* ceil_mode + pad */
    {POOL_MODE_AVG_EXCLUDE_PAD, 3, 12, 9, 8, 3, 3, 2, 2, 1, 1, 1, 0, 0}, /* ceil_mode + pad */
    {POOL_MODE_ADAPTIVE_AVG, 2, 16, 7, 7, 0, 0, 0, 0, 0, 0, 0, 3, 3},
    {POOL_MODE_ADAPTIVE_AVG, 3, 33, 5, 5, 0, 0, 0, 0, 0, 0, 0, 1, 1},    /* global average */
    /* whole channel blocks */
    {POOL_MODE_MAX, 2, 32, 9, 9, 3, 3, 2, 2, 1, 1, 0, 0, 0},
    {POOL_MODE_AVG_EXCLUDE_PAD, 2, 16, 7, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0}, /* Inception's 3x3/1 pad 1 */
    {POOL_MODE_ADAPTIVE_AVG, 2, 48, 5, 5, 0, 0, 0, 0, 0, 0, 0, 1, 1},
};

static void test_layout_pool(void **state) {
    (void)state;
    pool_params p;
    int i = 0;
    for (; pool_case_get(i, &p); i++) layout_pool_case(&p, i);
    for (size_t k = 0; k < sizeof layout_pool_extra / sizeof layout_pool_extra[0]; k++) {
        p = tu_pool_params(&layout_pool_extra[k]);
        layout_pool_case(&p, i + (int)k);
    }
}

static void test_layout_channel_copy(void **state) {
    (void)state;
    /* tu_channel_copy_cases, then odd channel counts with offsets */
    static const int extra[][7] = {{3, 67, 33, 70, 2, 100, 30}, {2, 5, 1, 8, 3, 6, 0}, {1, 3, 49, 7, 4, 5, 1},
                                   /* BLOCKED: whole blocks, half blocks, blocked into unblocked and back */
                                   {2, 16, 9, 32, 16, 48, 16}, {2, 8, 5, 32, 8, 32, 16}, {2, 5, 4, 16, 3, 24, 7},
                                   {2, 4, 6, 12, 4, 16, 12}};
    size_t n_base = tu_n_channel_copy_cases;
    for (size_t i = 0; i < n_base + sizeof extra / sizeof extra[0]; i++)
        for (int acc = 0; acc <= 1; acc++) {
            const int *c = i < n_base ? tu_channel_copy_cases[i] : extra[i - n_base];
            int N = c[0], C = c[1], HW = c[2], src_C = c[3], src_off = c[4], dst_C = c[5], dst_off = c[6];
            rng r;
            rng_seed(&r, 25000 + i, (uint64_t)acc);
            twin src = twin_uniform(&r, N, src_C, HW, -1.0, 1.0);
            twin dst = twin_uniform(&r, N, dst_C, HW, -1.0, 1.0); /* outside the slice: kept */
            IN_EVERY_LAYOUT(be->channel_copy(&ctx, N, C, HW, src.d[L], src_C, src_off, dst.d[L], dst_C, dst_off, acc));
            char what[128];
            snprintf(what, sizeof what, "channel_copy N%d C%d HW%d src %d+%d dst %d+%d acc %d", N, C, HW, src_C,
                     src_off, dst_C, dst_off, acc);
            twin_expect(what, &dst, acc ? 1.2e-7 : 0.0, 0.0, BACKEND_MATH_FP32);
            twin_free(&src);
            twin_free(&dst);
        }
}

static int setup(void **state) {
    (void)state;
    be = backend_cpu();
    return be ? 0 : -1;
}

/* Every test starts on all cores, whatever the one before it left behind. */
static int all_threads(void **state) {
    (void)state;
    be->set_threads(0);
    ctx = (backend_ctx){0}; /* a failed reduced-precision or layout test may have left its mode or layout */
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_default),
        cmocka_unit_test(test_layout_auto_rule),
        cmocka_unit_test_setup(test_memory, all_threads),
        cmocka_unit_test_setup(test_conv_fwd, all_threads),
        cmocka_unit_test_setup(test_conv_bwd_data, all_threads),
        cmocka_unit_test_setup(test_conv_bwd_filter, all_threads),
        cmocka_unit_test_setup(test_bias, all_threads),
        cmocka_unit_test_setup(test_bn_fwd_train, all_threads),
        cmocka_unit_test_setup(test_bn_fwd_infer, all_threads),
        cmocka_unit_test_setup(test_bn_bwd, all_threads),
        cmocka_unit_test_setup(test_pool_fwd, all_threads),
        cmocka_unit_test_setup(test_pool_bwd, all_threads),
        cmocka_unit_test_setup(test_gemm, all_threads),
        cmocka_unit_test_setup(test_reduced_precision, all_threads),
        cmocka_unit_test_setup(test_find_nonfinite, all_threads),
        cmocka_unit_test_setup(test_relu, all_threads),
        cmocka_unit_test_setup(test_add_axpy_mul, all_threads),
        cmocka_unit_test_setup(test_dropout_mask, all_threads),
        cmocka_unit_test_setup(test_dropout_mask_at, all_threads),
        cmocka_unit_test_setup(test_channel_copy, all_threads),
        cmocka_unit_test_setup(test_softmax_xent, all_threads),
        cmocka_unit_test_setup(test_sgd_update, all_threads),
        cmocka_unit_test_setup(test_sumsq2, all_threads),
        cmocka_unit_test_setup(test_lars_trust, all_threads),
        cmocka_unit_test_setup(test_optional_ops, all_threads),
        cmocka_unit_test_setup(test_conv_describe, all_threads),
        cmocka_unit_test_setup(test_determinism, all_threads),
        cmocka_unit_test_setup(test_set_threads, all_threads),
        cmocka_unit_test_setup(test_convert_layout, all_threads),
        cmocka_unit_test_setup(test_layout_conv, all_threads),
        cmocka_unit_test_setup(test_layout_conv_bf16, all_threads),
        cmocka_unit_test_setup(test_layout_bias, all_threads),
        cmocka_unit_test_setup(test_layout_bn, all_threads),
        cmocka_unit_test_setup(test_layout_pool, all_threads),
        cmocka_unit_test_setup(test_layout_channel_copy, all_threads),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
