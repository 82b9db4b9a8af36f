/*
 * tests/test_pool_rules.c - the CUDA pooling kernels' per-value formulation
 * (model/pool_rules.h: one output per thread forward, one input gradient per
 * thread backward, gathering instead of scattering) run on the host against
 * the CPU backend: bit-identical outputs and gradients for every mode,
 * ceil_mode, padding, uneven strides, adaptive sizes up and down, and ties,
 * in both layouts (NCHW and NHWC, through the same strided code).
 * This checks the window and candidate-range arithmetic the GPU runs, on a
 * machine without a GPU.
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

#include "common/half.h"
#include "common/rng.h"
#include "model/backend.h"
#include "model/pool_rules.h"
#include "tests/support/testutil.h"


static const tu_pool_case geoms[] = {
    {POOL_MODE_MAX, 2, 3, 7, 7, 3, 3, 2, 2, 1, 1, 0, 0, 0},   /* ResNet stem */
    {POOL_MODE_MAX, 2, 3, 7, 7, 3, 3, 2, 2, 1, 1, 1, 0, 0},   /* ceil_mode */
    {POOL_MODE_MAX, 1, 2, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 0},   /* VGG */
    {POOL_MODE_MAX, 1, 2, 9, 9, 2, 2, 2, 2, 0, 0, 1, 0, 0},   /* ceil, last window partial */
    {POOL_MODE_MAX, 2, 3, 9, 6, 3, 2, 3, 2, 0, 0, 0, 0, 0},   /* tiling windows, rectangular */
    {POOL_MODE_MAX, 2, 2, 35, 35, 3, 3, 2, 2, 0, 0, 0, 0, 0}, /* Inception 35 -> 17 */
    {POOL_MODE_MAX, 1, 3, 6, 11, 3, 2, 1, 3, 1, 1, 1, 0, 0},  /* uneven */
    {POOL_MODE_MAX, 1, 1, 5, 5, 5, 5, 1, 1, 2, 2, 0, 0, 0},   /* windows much larger than stride */
    {POOL_MODE_MAX, 1, 2, 21, 20, 16, 16, 3, 2, 1, 0, 1, 0, 0}, /* 256 positions: the most a byte holds */
    {POOL_MODE_MAX, 1, 2, 20, 19, 17, 16, 1, 2, 0, 1, 0, 0, 0}, /* 272 positions: an int each */
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 3, 8, 8, 3, 3, 1, 1, 1, 1, 0, 0, 0}, /* Inception branch pool */
    {POOL_MODE_AVG_INCLUDE_PAD, 1, 2, 7, 9, 3, 3, 2, 2, 1, 1, 1, 0, 0}, /* ceil clips to the padded input */
    {POOL_MODE_AVG_EXCLUDE_PAD, 2, 3, 8, 8, 3, 3, 1, 1, 1, 1, 0, 0, 0},
    {POOL_MODE_AVG_EXCLUDE_PAD, 1, 2, 10, 6, 4, 2, 3, 1, 2, 1, 1, 0, 0},
    {POOL_MODE_AVG_INCLUDE_PAD, 1, 2, 17, 17, 5, 5, 3, 3, 0, 0, 0, 0, 0}, /* Inception aux head */
    {POOL_MODE_ADAPTIVE_AVG, 2, 3, 7, 7, 0, 0, 0, 0, 0, 0, 0, 1, 1},  /* global */
    {POOL_MODE_ADAPTIVE_AVG, 1, 2, 5, 5, 0, 0, 0, 0, 0, 0, 0, 3, 3},  /* overlapping windows */
    {POOL_MODE_ADAPTIVE_AVG, 1, 2, 14, 14, 0, 0, 0, 0, 0, 0, 0, 7, 7}, /* VGG 14 -> 7 */
    {POOL_MODE_ADAPTIVE_AVG, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 7, 7},  /* upsampling: out > in */
    {POOL_MODE_ADAPTIVE_AVG, 1, 1, 13, 11, 0, 0, 0, 0, 0, 0, 0, 5, 3},
};


/* values: 0 = continuous, 1 = integers in [-2, 2] (many ties), 2 = all -1
 * (padding must never win a max window) */
static void fill(float *v, size_t n, rng *r, int values) {
    for (size_t i = 0; i < n; i++) {
        if (values == 0) v[i] = rng_normal(r);
        else if (values == 1) v[i] = (float)((int)rng_below(r, 5) - 2);
        else v[i] = -1.0f;
    }
}

/* Activations of backend_dtype `type`: n values stored (rounded once), the
 * stored bits of value v or of element i, and a type's name. */
static void *stored(const float *v, size_t n, int type) {
    if (type == BACKEND_DTYPE_FP32) {
        float *a = malloc((n ? n : 1) * sizeof *a);
        memcpy(a, v, n * sizeof *a);
        return a;
    }
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = type == BACKEND_DTYPE_BF16 ? bf16_from_float(v[i]) : fp16_from_float(v[i]);
    return h;
}

static uint32_t bits_of(float v, int type) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if (type == BACKEND_DTYPE_BF16) return bf16_from_float(v);
    if (type == BACKEND_DTYPE_FP16) return fp16_from_float(v);
    return u;
}

static uint32_t bits_at(const void *a, size_t i, int type) {
    if (type != BACKEND_DTYPE_FP32) return ((const uint16_t *)a)[i];
    uint32_t u;
    memcpy(&u, (const float *)a + i, sizeof u);
    return u;
}

static const char *type_name(int type) {
    return type == BACKEND_DTYPE_BF16 ? "bf16" : type == BACKEND_DTYPE_FP16 ? "fp16" : "fp32";
}

/* pool_rules.h against the CPU backend, both in layout `layout` (the CPU's
 * NHWC is its NCHW kernels between transposes, so bitwise the same values)
 * and with activations of `type`: with 16-bit ones the CPU computes in fp32
 * from the widened values and rounds once, which pr_* (reading through
 * pr_ld) then rounded once must equal bit for bit. */
static void check_geom_layout(const tu_pool_case *g, int values, int accumulate, int layout, int type) {
    const backend *cpu = backend_cpu();
    int nhwc = layout == BACKEND_LAYOUT_NHWC;
    backend_ctx ctx = {.layout = (backend_layout)layout, .act = (backend_dtype)type};
    if (type == BACKEND_DTYPE_BF16) ctx.math = BACKEND_MATH_BF16;
    if (type == BACKEND_DTYPE_FP16) ctx.math = BACKEND_MATH_FP16;
    pool_params p = tu_pool_params(g);
    size_t nx = (size_t)p.N * p.C * p.H * p.W, ny = (size_t)p.N * p.C * p.P * p.Q;
    float *xf = malloc((nx ? nx : 1) * sizeof *xf), *dyf = malloc((ny ? ny : 1) * sizeof *dyf);
    float *dx0f = malloc((nx ? nx : 1) * sizeof *dx0f);
    rng r;
    rng_seed(&r, 11, (uint64_t)(values * 2 + accumulate));
    fill(xf, nx, &r, values);
    for (size_t i = 0; i < ny; i++) dyf[i] = values == 0 ? rng_normal(&r) : (float)((int)rng_below(&r, 7) - 3);
    for (size_t i = 0; i < nx; i++) dx0f[i] = accumulate ? rng_normal(&r) : 0.0f;
    void *x = stored(xf, nx, type), *dy = stored(dyf, ny, type), *dx0 = stored(dx0f, nx, type);
    void *y_cpu = stored(dyf, ny, type), *dx_cpu = stored(dx0f, nx, type); /* overwritten; dx from dx0 */
    cpu->pool_fwd(&ctx, &p, x, y_cpu, NULL);
    cpu->pool_bwd(&ctx, &p, x, y_cpu, dy, dx_cpu, accumulate, NULL);
    pr_axis ra = pr_rows(&p), ca = pr_cols(&p);
    /* max pooling: the positions of the maxima, as the training forward keeps
     * them (pr_fwd_one's at, stored as the CUDA kernel stores them) and as
     * the backward finds them without (pr_argmax_one) */
    int ab = pr_arg_bytes(&p);
    void *kept = calloc(ny ? ny : 1, (size_t)ab), *found = calloc(ny ? ny : 1, (size_t)ab);
    for (size_t t = 0; t < ny; t++) {
        int at = -1;
        float v = pr_fwd_one(&p, ra, ca, x, type, t, nhwc, p.mode == POOL_MODE_MAX ? &at : NULL);
        if (p.mode == POOL_MODE_MAX) {
            if (at < 0 || at >= p.R * p.S) fail_msg("output %zu: its maximum's position %d is not below R*S", t, at);
            pr_arg_put(kept, ab, t, at);
            pr_arg_put(found, ab, t, pr_argmax_one(&p, ra, ca, x, type, t, nhwc));
            if (pr_arg_at(kept, ab, t) != at) fail_msg("output %zu: position %d stored in %d bytes", t, at, ab);
            if (pr_arg_at(found, ab, t) != at)
                fail_msg("output %zu: the forward keeps position %d, pr_argmax_one finds %d", t, at,
                         pr_arg_at(found, ab, t));
        }
        if (bits_of(v, type) != bits_at(y_cpu, t, type))
            fail_msg("%s %s mode %d %dx%d R%dxS%d stride %d,%d pad %d,%d ceil %d -> %dx%d: output %zu is %.9g "
                     "(bits 0x%x), CPU's bits 0x%x",
                     nhwc ? "nhwc" : "nchw", type_name(type), g->mode, p.H, p.W, p.R, p.S, p.stride_h, p.stride_w,
                     p.pad_h, p.pad_w, p.ceil_mode, p.P, p.Q, t, (double)v, bits_of(v, type), bits_at(y_cpu, t, type));
    }
    /* the gather from the positions kept (both are the same bytes: checked above) */
    const void *arg = p.mode == POOL_MODE_MAX ? kept : NULL;
    for (size_t t = 0; t < nx; t++) {
        float v = pr_bwd_one(&p, ra, ca, arg, dy, type, t, pr_ld(dx0, t, type), nhwc);
        if (bits_of(v, type) != bits_at(dx_cpu, t, type))
            fail_msg("%s %s mode %d %dx%d R%dxS%d stride %d,%d pad %d,%d ceil %d -> %dx%d, values %d, accumulate "
                     "%d: input gradient %zu is %.9g (bits 0x%x), CPU's bits 0x%x",
                     nhwc ? "nhwc" : "nchw", type_name(type), g->mode, p.H, p.W, p.R, p.S, p.stride_h, p.stride_w,
                     p.pad_h, p.pad_w, p.ceil_mode, p.P, p.Q, values, accumulate, t, (double)v, bits_of(v, type),
                     bits_at(dx_cpu, t, type));
    }
    free(kept);
    free(found);
    free(xf);
    free(dyf);
    free(dx0f);
    free(x);
    free(dy);
    free(dx0);
    free(y_cpu);
    free(dx_cpu);
}

static void check_geom(const tu_pool_case *g, int values, int accumulate) {
    check_geom_layout(g, values, accumulate, BACKEND_LAYOUT_NCHW, BACKEND_DTYPE_FP32);
}

static void test_every_geometry_bitwise(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++)
        for (int values = 0; values < 3; values++)
            for (int acc = 0; acc < 2; acc++)
                for (int layout = BACKEND_LAYOUT_NCHW; layout <= BACKEND_LAYOUT_NHWC; layout++)
                    check_geom_layout(&geoms[i], values, acc, layout, BACKEND_DTYPE_FP32);
}

/* 16-bit activations (the CUDA backend's pooling reads and writes them
 * natively): every geometry, value set, accumulation and layout in bf16 and
 * fp16, against the CPU backend's 16-bit ops, bit for bit. */
static void test_every_geometry_16bit(void **state) {
    (void)state;
    for (int type = BACKEND_DTYPE_BF16; type <= BACKEND_DTYPE_FP16; type++)
        for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++)
            for (int values = 0; values < 3; values++)
                for (int acc = 0; acc < 2; acc++)
                    for (int layout = BACKEND_LAYOUT_NCHW; layout <= BACKEND_LAYOUT_NHWC; layout++)
                        check_geom_layout(&geoms[i], values, acc, layout, type);
}

/* pr_ld widens exactly: every bf16 and every fp16 value gives common/half.h's
 * float (NaNs: a NaN, sign kept). */
static void test_widen_every_16bit_value(void **state) {
    (void)state;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        uint16_t v = (uint16_t)h;
        float want[2] = {bf16_to_float(v), fp16_to_float(v)}, got[2];
        got[0] = pr_ld(&v, 0, BACKEND_DTYPE_BF16);
        got[1] = pr_ld(&v, 0, BACKEND_DTYPE_FP16);
        for (int k = 0; k < 2; k++) {
            int nan = want[k] != want[k];
            if (nan ? !(got[k] != got[k]) || signbit(got[k]) != signbit(want[k])
                    : memcmp(&got[k], &want[k], sizeof(float)) != 0)
                fail_msg("%s 0x%04x widened to %.9g, common/half.h says %.9g", k ? "fp16" : "bf16", h,
                         (double)got[k], (double)want[k]);
        }
    }
}

/* Every (H, k, stride, pad, ceil) that torch accepts up to small sizes: the
 * candidate range must hold every window containing each input index. */
static void test_exhaustive_small(void **state) {
    (void)state;
    int checked = 0;
    for (int mode = POOL_MODE_MAX; mode <= POOL_MODE_AVG_EXCLUDE_PAD; mode++)
        for (int H = 1; H <= 9; H++)
            for (int k = 1; k <= 5; k++)
                for (int s = 1; s <= 4; s++)
                    for (int pad = 0; pad <= k / 2; pad++)
                        for (int ceil = 0; ceil <= 1; ceil++) {
                            tu_pool_case g = {(pool_mode)mode, 1, 1, H, 3, k, 1, s, 1, pad, 0, ceil, 0, 0};
                            pool_params p;
                            memset(&p, 0, sizeof p);
                            p.mode = g.mode;
                            p.N = 1, p.C = 1, p.H = H, p.W = 3, p.R = k, p.S = 1, p.stride_h = s, p.stride_w = 1;
                            p.pad_h = pad, p.ceil_mode = ceil;
                            if (pool_params_init(&p) != 0) continue; /* torch refuses it too */
                            check_geom(&g, 0, 1);
                            checked++;
                        }
    for (int in = 1; in <= 12; in++)
        for (int out = 1; out <= 12; out++) {
            tu_pool_case g = {POOL_MODE_ADAPTIVE_AVG, 1, 1, in, 2, 0, 0, 0, 0, 0, 0, 0, out, 1};
            check_geom(&g, 0, 1);
            checked++;
        }
    assert_true(checked > 500);
}

/* One tiling geometry (pr_tiles) in one layout, type, input kind and blend:
 * the backward by output (pr_tile_of, pr_tile_grad: what pool_bwd_tile_k
 * runs) writes every input gradient exactly once, bit for bit the gather's
 * (pr_bwd_one, itself checked against the CPU above). */
static void check_tiled(const pool_params *p, int nhwc, int type, int values, int acc) {
    size_t nx = (size_t)p->N * p->C * p->H * p->W, ny = (size_t)p->N * p->C * p->P * p->Q;
    float *xf = malloc(nx * sizeof *xf), *dyf = malloc(ny * sizeof *dyf), *dx0f = malloc(nx * sizeof *dx0f);
    rng r;
    rng_seed(&r, 21, (uint64_t)(values * 2 + acc));
    fill(xf, nx, &r, values);
    for (size_t i = 0; i < ny; i++) dyf[i] = rng_normal(&r);
    dyf[0] = -0.0f; /* a gather adds it to 0: +0, not -0 */
    for (size_t i = 0; i < nx; i++) dx0f[i] = acc ? rng_normal(&r) : 0.0f;
    void *x = stored(xf, nx, type), *dy = stored(dyf, ny, type), *dx0 = stored(dx0f, nx, type);
    pr_axis ra = pr_rows(p), ca = pr_cols(p);
    int ab = pr_arg_bytes(p);
    unsigned char *arg = calloc(ny, (size_t)ab);
    for (size_t t = 0; t < ny; t++) {
        int at = -1;
        pr_fwd_one(p, ra, ca, x, type, t, nhwc, &at);
        pr_arg_put(arg, ab, t, at);
    }
    uint32_t *got = calloc(nx, sizeof *got);
    int *writes = calloc(nx, sizeof *writes);
    for (size_t t = 0; t < ny; t++) {
        pr_tile w = pr_tile_of(p, ra, ca, t, nhwc);
        int at = pr_arg_at(arg, ab, t);
        float d = pr_ld(dy, t, type);
        for (int a = 0; a < p->R; a++)
            for (int b = 0; b < p->S; b++) {
                size_t i = w.x0 + (size_t)a * w.sh + (size_t)b * w.sw;
                if (i >= nx) fail_msg("output %zu: window element (%d, %d) at input %zu of %zu", t, a, b, i, nx);
                writes[i]++;
                got[i] = bits_of(pr_tile_grad(a * p->S + b, at, d, acc ? pr_ld(dx0, i, type) : 0.0f), type);
            }
    }
    for (size_t i = 0; i < nx; i++) {
        uint32_t want = bits_of(pr_bwd_one(p, ra, ca, arg, dy, type, i, acc ? pr_ld(dx0, i, type) : 0.0f, nhwc), type);
        if (writes[i] != 1 || got[i] != want)
            fail_msg("%s %s %dx%d window %dx%d, values %d, accumulate %d: input %zu written %d times, bits 0x%x, "
                     "the gather's 0x%x",
                     nhwc ? "nhwc" : "nchw", type_name(type), p->H, p->W, p->R, p->S, values, acc, i, writes[i],
                     got[i], want);
    }
    free(got);
    free(writes);
    free(arg);
    free(xf);
    free(dyf);
    free(dx0f);
    free(x);
    free(dy);
    free(dx0);
}

/* pr_tiles: true exactly for max pooling with windows as large as their
 * strides, unpadded, whose windows cover the input (sizes multiples of the
 * window, ceil_mode then changing nothing); for every such geometry up to
 * small sizes, the backward by output equals the gather (check_tiled); and
 * false for the others, which keep the gather. */
static void test_tiled_backward(void **state) {
    (void)state;
    int tiled = 0, refused = 0;
    for (int H = 1; H <= 9; H++)
        for (int W = 1; W <= 6; W++)
            for (int kh = 1; kh <= 4; kh++)
                for (int kw = 1; kw <= 3; kw++)
                    for (int ceil = 0; ceil <= 1; ceil++) {
                        pool_params p;
                        memset(&p, 0, sizeof p);
                        p.mode = POOL_MODE_MAX;
                        p.N = 2, p.C = 3, p.H = H, p.W = W, p.R = kh, p.S = kw, p.stride_h = kh, p.stride_w = kw;
                        p.ceil_mode = ceil;
                        if (pool_params_init(&p) != 0) continue;
                        int want = H % kh == 0 && W % kw == 0;
                        if (pr_tiles(&p) != want)
                            fail_msg("%dx%d window %dx%d ceil %d -> %dx%d: pr_tiles says %d", H, W, kh, kw, ceil, p.P,
                                     p.Q, pr_tiles(&p));
                        if (!want) {
                            refused++;
                            continue;
                        }
                        for (int nhwc = 0; nhwc <= 1; nhwc++)
                            for (int type = BACKEND_DTYPE_FP32; type <= BACKEND_DTYPE_FP16; type++)
                                for (int values = 0; values <= 2; values++)
                                    for (int acc = 0; acc <= 1; acc++) check_tiled(&p, nhwc, type, values, acc);
                        tiled++;
                    }
    /* windows of more than 256 positions keep an int each, not a byte: 17x16 tiling 34x32 and 17x32 */
    for (int rows = 1; rows <= 2; rows++) {
        pool_params p;
        memset(&p, 0, sizeof p);
        p.mode = POOL_MODE_MAX;
        p.N = 1, p.C = 2, p.H = 17 * rows, p.W = 32, p.R = 17, p.S = 16, p.stride_h = 17, p.stride_w = 16;
        assert_int_equal(pool_params_init(&p), 0);
        assert_true(pr_tiles(&p));
        for (int nhwc = 0; nhwc <= 1; nhwc++)
            for (int type = BACKEND_DTYPE_FP32; type <= BACKEND_DTYPE_FP16; type++)
                for (int values = 0; values <= 2; values++)
                    for (int acc = 0; acc <= 1; acc++) check_tiled(&p, nhwc, type, values, acc);
        tiled++;
    }
    /* the others: padding, windows wider than their strides, averages */
    const tu_pool_case others[] = {
        {POOL_MODE_MAX, 1, 1, 8, 8, 2, 2, 2, 2, 1, 1, 0, 0, 0},
        {POOL_MODE_MAX, 1, 1, 6, 6, 3, 3, 3, 3, 1, 1, 0, 0, 0}, /* 2 x 3 = 6 outputs' rows, but shifted by the pad */
        {POOL_MODE_MAX, 1, 1, 6, 6, 3, 3, 3, 3, 0, 1, 0, 0, 0},
        {POOL_MODE_MAX, 1, 1, 6, 6, 3, 3, 3, 3, 1, 0, 0, 0, 0},
        {POOL_MODE_MAX, 1, 1, 9, 9, 3, 3, 2, 2, 0, 0, 0, 0, 0},
        {POOL_MODE_MAX, 1, 1, 8, 8, 2, 2, 1, 1, 0, 0, 0, 0, 0},
        {POOL_MODE_AVG_INCLUDE_PAD, 1, 1, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 0},
        {POOL_MODE_AVG_EXCLUDE_PAD, 1, 1, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 0},
        {POOL_MODE_ADAPTIVE_AVG, 1, 1, 8, 8, 0, 0, 0, 0, 0, 0, 0, 4, 4},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        pool_params p = tu_pool_params(&others[i]);
        if (pr_tiles(&p)) fail_msg("geometry %zu of the others: pr_tiles says it tiles", i);
        refused++;
    }
    print_message("%d tiling geometries backward by output as by input; %d others left to the gather\n", tiled,
                  refused);
    assert_true(tiled >= 50 && refused >= 100);
}

/* pr_split's two paths (32-bit arithmetic up to UINT32_MAX, 64-bit beyond):
 * the coordinates of flat indices on both sides of 2^32, in both layouts,
 * each in range and composing back into its index. */
static void test_split_beyond_32_bits(void **state) {
    (void)state;
    const int C = 2048, A = 112, B = 112; /* a ResNet stem's [N, 2048, 112, 112] would pass 2^32 at N = 167 */
    const size_t around[] = {0, 1, (size_t)UINT32_MAX - 1, UINT32_MAX, (size_t)UINT32_MAX + 1,
                             (size_t)UINT32_MAX + 12345, (size_t)3 << 33};
    for (int nhwc = 0; nhwc <= 1; nhwc++)
        for (size_t k = 0; k < sizeof around / sizeof around[0]; k++)
            for (size_t d = 0; d < 3; d++) {
                size_t t = around[k] + d * 977, n, c;
                int a, b;
                pr_split(t, C, A, B, nhwc, &n, &c, &a, &b);
                assert_true(c < (size_t)C && a >= 0 && a < A && b >= 0 && b < B);
                size_t back = nhwc ? ((n * A + (size_t)a) * B + (size_t)b) * C + c
                                   : ((n * C + c) * A + (size_t)a) * B + (size_t)b;
                if (back != t)
                    fail_msg("%s: %zu split into n %zu c %zu a %d b %d, which is %zu", nhwc ? "nhwc" : "nchw", t, n, c,
                             a, b, back);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_geometry_bitwise),
        cmocka_unit_test(test_every_geometry_16bit),
        cmocka_unit_test(test_widen_every_16bit_value),
        cmocka_unit_test(test_exhaustive_small),
        cmocka_unit_test(test_split_beyond_32_bits),
        cmocka_unit_test(test_tiled_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
