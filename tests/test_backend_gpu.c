/*
 * tests/test_backend_gpu.c - the CUDA backend against the CPU backend.
 *
 * Every op of model/backend.h runs on both backends from the same random
 * inputs (fixed seeds); the GPU's result is downloaded and compared with the
 * CPU's. The CPU backend is itself held to the double reference by
 * tests/test_backend_cpu.c, so agreeing with it means agreeing with the
 * specification. Then a whole CIFAR ResNet-20 training step runs on both
 * backends from the same weights and batch: every activation, the loss, every
 * node's input gradient, every parameter gradient, the batch-norm running
 * statistics, the SGD update and the eval-mode logits are compared.
 *
 * The mixed-precision modes (BF16, FP16) are compared with the CPU backend in
 * the same mode, which emulates them (operands and results rounded to the
 * type, fp32 arithmetic); fp16 overflow to inf and the find_nonfinite check
 * of dynamic loss scaling are checked against exact expectations.
 *
 * The NHWC activation layout (backend_ctx.layout): every layout-sensitive op
 * (convolutions, bias, batch norm, pooling, channel_copy) runs again with
 * both backends in NHWC, on the same buffers read as [N, H, W, C] on both
 * sides, so the GPU's NHWC results are compared with the CPU's NHWC results
 * (which tests/test_backend_cpu.c holds to its NCHW ones) under the same
 * tolerances as in NCHW: the layout changes where values live and the
 * order of sums, nothing else. convert_layout is checked against a host
 * loop, and the ResNet-20 step runs a second time with both nets in NHWC.
 * Every test starts with both sides' contexts in NCHW and fp32 (the group's
 * per-test setup), so a failed NHWC test cannot leave its layout for the
 * next.
 *
 * Without a usable CUDA device (no CUDA backend in this binary, no driver, no
 * GPU) every test calls skip(), so cmocka reports them SKIPPED and the binary
 * exits 0; the reason is printed once by the group setup.
 *
 * Structure: each tensor is a `dual`, the same values held on both backends
 * (p[CPU] allocated by the CPU backend, p[GPU] by the GPU backend). Every op is
 * issued in a loop `for (s = CPU; s <= GPU; s++) be[s]->op(... x.p[s] ...)`, so
 * the backend and the pointers it gets come from one index and cannot be
 * mixed up; expect_close() downloads p[CPU] through the CPU backend and p[GPU]
 * through the GPU backend and compares them with tu_assert_close_f (which
 * prints the first mismatching index with both values and the largest errors).
 * Outputs start from the same random values on both sides, so an op that
 * skips elements, accumulates when told to overwrite or writes outside its
 * range shows up as a mismatch.
 *
 * Tolerances are defined, with the reasoning, next to the tests that use them.
 */
#include <math.h>
#include <pthread.h>
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
#include "model/backend.h"
#include "model/net.h"
#include "model/plan_line.h"
#include "model/zoo.h"
#include "tests/support/testutil.h"

enum { CPU = 0, GPU = 1 };

/* be[CPU] = backend_cpu(), be[GPU] = backend_get(BACKEND_DEVICE_CUDA) or NULL. */
static const backend *be[2];
/* The context each side's ops run in (model/backend.h): NCHW and fp32 unless
 * a test sets them (set_math_both, set_layout_both; fp32_math resets both). */
static backend_ctx ctx[2];

#define NEED_GPU()               \
    do {                         \
        if (!be[GPU]) skip();    \
    } while (0)

/* ---------------------------------------------------------------- tolerances */

/* How far a GPU result may be from the CPU's, by math mode, for outputs that
 * are sums of `len` products each of magnitude up to `scale`:
 *   |gpu - cpu| <= atol_per_sqrt * scale * sqrt(len) + rtol * |cpu|
 *
 * FP32. The CPU is within 1e-5 * scale * sqrt(len) of the exact sum (the bound
 * test_backend_cpu.c holds it to). The GPU sums in other orders and, through
 * cuDNN, with other algorithms: implicit GEMM, but also Winograd and FFT, whose
 * rounding error grows with the norm of the whole window or signal rather than
 * term by term, and split reductions combined with atomics for weight
 * gradients. So atol is ten times the CPU's bound. It stays far below one
 * term (a wrong index, a dropped or duplicated tap is an error of order
 * `scale`) for any len below 1e8. rtol 1e-4 for dot products (conv forward and
 * data gradient, GEMM); 1e-3 for the long batch reductions (weight gradients,
 * bias gradients, batch-norm statistics), where the GPU may accumulate
 * thousands of terms in float in an order of its own.
 *
 * TF32. Inputs are rounded to a 10-bit mantissa (relative error up to 2^-11
 * each, so about 1e-3 per product with fp32 accumulation); over len random
 * terms the error is a random walk of about 3e-4 * scale * sqrt(len) for terms
 * of mean square scale^2 / 9. atol 5e-3 * scale * sqrt(len) is over ten of
 * those standard deviations; rtol 1e-2 for the values far from zero.
 *
 * BF16, FP16. Both backends round the operands to the type, so every product
 * is exact in fp32 (8 + 8 or 11 + 11 significant bits) and the fp32 sums
 * differ only by order, around 1e-7 * scale * sqrt(len). Then both round the
 * result to the type: two fp32 values that close can round to neighbouring
 * values of the type, one unit in the last place (ulp) apart, which is at
 * most 2^-7 (bf16) or 2^-10 (fp16) of the value. With accumulate the GPU
 * rounds twice (cuDNN's 16-bit output, then old + that, rounded again),
 * the CPU once (old + fp32 sum): that adds up to half an ulp of the sum,
 * which is larger than the result when the sum cancels the old value; the
 * sum is at most about 1.3 * scale * sqrt(len) (four standard deviations
 * of sqrt(len)/3) and the old value at most 1, so half an ulp of it is below
 * 2^-8 * (|result| + 1) for bf16. Hence rtol 2e-2 (2.5 ulps, bf16) and 4e-3
 * (4 ulps, fp16), and atol 4e-3 (bf16) or 1e-3 (fp16) * scale * sqrt(len),
 * a few ulps of the typical output scale * sqrt(len) / 3. A dropped or
 * misplaced term (of order scale) is still far outside, and every output is
 * also checked to be a value of the type (expect_rounded). */
typedef struct precision {
    const char *name;
    double rtol;          /* dot products: conv forward, conv data gradient, GEMM */
    double rtol_sum;      /* batch reductions: conv weight gradient */
    double atol_per_sqrt; /* atol = atol_per_sqrt * scale * sqrt(len) */
    int math;             /* the BACKEND_MATH_* both backends are set to */
} precision;

static const precision PREC_FP32 = {"fp32", 1e-4, 1e-3, 1e-4, BACKEND_MATH_FP32};
static const precision PREC_TF32 = {"tf32", 1e-2, 1e-2, 5e-3, BACKEND_MATH_TF32};
static const precision PREC_BF16 = {"bf16", 2e-2, 2e-2, 4e-3, BACKEND_MATH_BF16};
static const precision PREC_FP16 = {"fp16", 4e-3, 4e-3, 1e-3, BACKEND_MATH_FP16};

static double atol_of(const precision *pr, size_t len, double scale) {
    return pr->atol_per_sqrt * scale * sqrt((double)(len > 0 ? len : 1));
}

/* Elementwise ops that update state (axpy and mul with accumulate, the SGD
 * update) round every product and sum on both sides: the kernels use
 * __fmul_rn/__fadd_rn, which nvcc never fuses into an FMA, and the CPU is
 * built with -ffp-contract=off. So they must agree bit for bit, which is what
 * keeps ranks on different devices in step. */

/* ---------------------------------------------------------------- dual tensors */

/* The same n floats on both backends. */
typedef struct dual {
    float *p[2];
    size_t n;
    float *base[2]; /* what alloc() returned, where p is inside it (dual_shift) */
} dual;

static dual dual_of(const float *host, size_t n) {
    dual d = {{NULL, NULL}, n, {NULL, NULL}};
    for (int s = CPU; s <= GPU; s++) {
        d.p[s] = be[s]->alloc((n > 0 ? n : 1) * sizeof(float));
        be[s]->upload(d.p[s], host, n * sizeof(float));
    }
    return d;
}

static void dual_free(dual *d) {
    for (int s = CPU; s <= GPU; s++) {
        be[s]->free(d->base[s] ? d->base[s] : d->p[s]);
        d->p[s] = d->base[s] = NULL;
    }
}

static void fill_uniform(rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = rng_range(r, lo, hi);
}

static void fill_normal(rng *r, float *x, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) x[i] = mean + std * rng_normal(r);
}

/* Integers in [lo, hi]: sums of them are exact in float whatever the order,
 * and a max window holds ties. */
static void fill_ints(rng *r, float *x, size_t n, int lo, int hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (int)rng_below(r, (uint32_t)(hi - lo + 1)));
}

static dual dual_uniform(rng *r, size_t n, float lo, float hi) {
    float *h = tu_alloc_f(n);
    fill_uniform(r, h, n, lo, hi);
    dual d = dual_of(h, n);
    free(h);
    return d;
}

static dual dual_normal(rng *r, size_t n, float mean, float std) {
    float *h = tu_alloc_f(n);
    fill_normal(r, h, n, mean, std);
    dual d = dual_of(h, n);
    free(h);
    return d;
}

static dual dual_ints(rng *r, size_t n, int lo, int hi) {
    float *h = tu_alloc_f(n);
    fill_ints(r, h, n, lo, hi);
    dual d = dual_of(h, n);
    free(h);
    return d;
}

/* n floats of backend `side`'s device array, in a new host array. */
static float *download(int side, const float *dev, size_t n) {
    float *h = tu_alloc_f(n);
    be[side]->download(h, dev, n * sizeof(float));
    return h;
}

/* d's GPU copy moved `floats` floats into a fresh allocation, same values:
 * with 2, a per-channel vector at the 8-byte offset a batch-norm parameter
 * has in the flat parameter buffer after a 10-class linear layer. */
static void dual_shift(dual *d, size_t floats) {
    if (floats == 0) return;
    float *h = download(GPU, d->p[GPU], d->n);
    float *base = be[GPU]->alloc((d->n + floats) * sizeof(float));
    be[GPU]->upload(base + floats, h, d->n * sizeof(float));
    be[GPU]->free(d->base[GPU] ? d->base[GPU] : d->p[GPU]);
    d->base[GPU] = base;
    d->p[GPU] = base + floats;
    free(h);
}

/* Makes the GPU copy of d equal to the CPU copy (to restart both sides from
 * the same state). */
static void dual_sync_from_cpu(dual *d) {
    float *h = download(CPU, d->p[CPU], d->n);
    be[GPU]->upload(d->p[GPU], h, d->n * sizeof(float));
    free(h);
}

/* Fails the running test unless, elementwise, |gpu - cpu| <= atol + rtol * |cpu|
 * (rtol = atol = 0: equal values). */
static void expect_close_at(const char *file, int line, const char *what, const dual *d, double rtol, double atol) {
    CNT_ASSERT(be[CPU] != be[GPU] && d->p[CPU] != d->p[GPU]);
    float *c = download(CPU, d->p[CPU], d->n);
    float *g = download(GPU, d->p[GPU], d->n);
    double *want = tu_alloc(d->n);
    tu_to_double(c, want, d->n);
    tu_assert_close_f_at(file, line, what, want, g, d->n, rtol, atol);
    free(c);
    free(g);
    free(want);
}

#define expect_close(what, d, rtol, atol) expect_close_at(__FILE__, __LINE__, (what), (d), (rtol), (atol))

/* ---------------------------------------------------------------- math modes */

static void set_math_both(int math) {
    for (int s = CPU; s <= GPU; s++) ctx[s].math = (backend_math)math;
}

static int math_is_reduced(int math) { return math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16; }

/* v rounded to the type of a reduced-precision mode (common/half.h). */
static float round_to(int math, float v) { return math == BACKEND_MATH_FP16 ? fp16_round(v) : bf16_round(v); }

/* ---------------------------------------------------------------- layouts */

/* The layout both contexts were last set to (for messages). */
static int cur_layout = BACKEND_LAYOUT_NCHW;

static void set_layout_both(int layout) {
    for (int s = CPU; s <= GPU; s++) ctx[s].layout = (backend_layout)layout;
    cur_layout = layout;
}

static const char *layout_name(int layout) { return layout == BACKEND_LAYOUT_NHWC ? "nhwc" : "nchw"; }
static const char *cur_layout_name(void) { return layout_name(cur_layout); }

/* In BF16/FP16 an op's result is a tensor of the type: on both sides each of
 * the rows x cols values (row stride ld) of d must be a value of the type
 * (rounding it again changes nothing). Nothing to check in other modes. */
static void expect_rounded_at(const char *file, int line, const char *what, const dual *d, size_t rows, size_t cols,
                              size_t ld, int math) {
    if (!math_is_reduced(math)) return;
    for (int s = CPU; s <= GPU; s++) {
        float *h = download(s, d->p[s], d->n);
        size_t bad = 0, first = 0;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) {
                float v = h[r * ld + c], rv = round_to(math, v);
                if (memcmp(&v, &rv, sizeof v) != 0 && bad++ == 0) first = r * ld + c;
            }
        if (bad) {
            print_error("%s: on the %s backend %zu of %zu values are not %s values; first at [%zu]: %.9e "
                        "(rounds to %.9e)\n",
                        what, s == CPU ? "cpu" : "gpu", bad, rows * cols, math == BACKEND_MATH_FP16 ? "fp16" : "bf16",
                        first, (double)h[first], (double)round_to(math, h[first]));
            free(h);
            _fail(file, line);
        }
        free(h);
    }
}

#define expect_rounded(what, d, rows, cols, ld, math) \
    expect_rounded_at(__FILE__, __LINE__, (what), (d), (rows), (cols), (ld), (math))

/* ---------------------------------------------------------------- memory */

static void test_memory_transfers(void **state) {
    (void)state;
    NEED_GPU();
    const backend *g = be[GPU];
    assert_string_equal(g->name, "cuda");

    /* alloc is zero-filled, also for an allocation larger than any cache */
    const size_t big = (size_t)1 << 24;
    float *d = g->alloc(big * sizeof(float));
    float *h = download(GPU, d, big);
    size_t nonzero = 0;
    for (size_t i = 0; i < big; i++) nonzero += h[i] != 0.0f;
    if (nonzero) fail_msg("alloc of %zu floats: %zu values are not zero", big, nonzero);
    g->free(d);
    free(h);
    g->free(NULL);

    /* upload and download move bytes, not values: random bit patterns
     * (NaNs, infinities and denormals among them) come back unchanged */
    const size_t n = 100003;
    uint32_t *bits = cnt_malloc(n * sizeof(uint32_t)), *back = cnt_malloc(n * sizeof(uint32_t));
    rng r;
    rng_seed(&r, 1, 1);
    for (size_t i = 0; i < n; i++) bits[i] = rng_u32(&r);
    uint32_t *a = g->alloc(n * sizeof(uint32_t)), *b = g->alloc(n * sizeof(uint32_t));
    g->upload(a, bits, n * sizeof(uint32_t));
    g->download(back, a, n * sizeof(uint32_t));
    assert_memory_equal(bits, back, n * sizeof(uint32_t));

    /* copy to and from odd offsets, zero of a sub-range, sync */
    g->copy(b + 3, a + 1, (n - 7) * sizeof(uint32_t));
    g->zero(b + 100, 37 * sizeof(uint32_t));
    g->sync();
    g->download(back, b, n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) {
        uint32_t want = 0; /* b was zero-filled at alloc */
        if (i >= 3 && i < n - 4) want = bits[i - 2];
        if (i >= 100 && i < 137) want = 0;
        if (back[i] != want) fail_msg("copy/zero: b[%zu] = 0x%08x, expected 0x%08x", i, back[i], want);
    }
    g->free(a);
    g->free(b);
    free(bits);
    free(back);
}

/* ---------------------------------------------------------------- convolution */

typedef struct conv_case {
    int N, C, H, W, K, R, S, sh, sw, ph, pw;
} conv_case;

static const conv_case conv_cases[] = {
    {4, 16, 16, 16, 32, 1, 1, 1, 1, 0, 0},  /* 1x1 stride 1 (bottleneck) */
    {3, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1},  /* 3x3 pad 1 stride 1, odd N */
    {4, 16, 15, 15, 32, 3, 3, 2, 2, 1, 1},  /* 3x3 pad 1 stride 2, odd spatial size */
    {2, 3, 32, 32, 16, 7, 7, 2, 2, 3, 3},   /* 7x7/2 pad 3 stem, 3 input channels */
    {2, 12, 9, 9, 8, 1, 7, 1, 1, 0, 3},     /* Inception 1x7 pad (0, 3) */
    {2, 12, 9, 9, 8, 7, 1, 1, 1, 3, 0},     /* Inception 7x1 pad (3, 0) */
    {3, 8, 9, 9, 16, 1, 1, 2, 2, 0, 0},     /* 1x1/2 downsample, odd N */
    {1, 5, 11, 13, 7, 3, 3, 1, 1, 0, 0},    /* batch 1, unpadded, odd channel counts, rectangular input */
    {5, 3, 8, 6, 5, 3, 2, 2, 1, 2, 1},      /* rectangular kernel, mixed strides, pad > R/2 */
    {2, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1},    /* ResNet-20 stage 3 */
    /* ImageNet sizes, where cuDNN picks other algorithms than on small
     * shapes (the tolerances grow with sqrt of each sum's length; at these
     * lengths they stay over 10 standard deviations of the rounding error,
     * so 800K outputs do not reach them by chance) */
    {2, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3}, /* ResNet-50 stem, 7x7/2 */
    {1, 256, 56, 56, 256, 3, 3, 1, 1, 1, 1}, /* 3x3 at 256 channels, 56x56 */
};
#define N_CONV_CASES ((int)(sizeof conv_cases / sizeof conv_cases[0]))

static conv_params conv_case_params(int i) {
    const conv_case *c = &conv_cases[i];
    conv_params p = {.N = c->N, .C = c->C, .H = c->H, .W = c->W, .K = c->K, .R = c->R, .S = c->S,
                     .stride_h = c->sh, .stride_w = c->sw, .pad_h = c->ph, .pad_w = c->pw};
    assert_int_equal(conv_params_init(&p), CNT_OK);
    return p;
}

static void conv_label(char *buf, size_t len, const char *op, const conv_params *p, int accumulate,
                       const precision *pr) {
    snprintf(buf, len, "%s %s %s N%d C%d %dx%d K%d %dx%d/%dx%d pad %dx%d -> %dx%d acc %d", op, pr->name,
             cur_layout_name(), p->N, p->C, p->H, p->W, p->K, p->R, p->S, p->stride_h, p->stride_w, p->pad_h, p->pad_w,
             p->P, p->Q, accumulate);
}

/* Inputs in [-1, 1): every product has magnitude below 1 (scale 1). */
static void conv_fwd_case(int i, const precision *pr) {
    conv_params p = conv_case_params(i);
    rng r;
    rng_seed(&r, 100 + (uint64_t)i, 1);
    dual x = dual_uniform(&r, conv_in_count(&p), -1.0f, 1.0f);
    dual w = dual_uniform(&r, conv_w_count(&p), -1.0f, 1.0f);
    dual y = dual_uniform(&r, conv_out_count(&p), -1.0f, 1.0f); /* overwritten */
    for (int s = CPU; s <= GPU; s++) be[s]->conv_fwd(&ctx[s], &p, x.p[s], w.p[s], y.p[s]);
    char what[192];
    conv_label(what, sizeof what, "conv_fwd", &p, 0, pr);
    expect_close(what, &y, pr->rtol, atol_of(pr, (size_t)p.C * p.R * p.S, 1.0));
    expect_rounded(what, &y, 1, y.n, y.n, pr->math);
    dual_free(&x);
    dual_free(&w);
    dual_free(&y);
}

static void conv_bwd_data_case(int i, const precision *pr) {
    conv_params p = conv_case_params(i);
    for (int acc = 0; acc <= 1; acc++) {
        rng r;
        rng_seed(&r, 200 + (uint64_t)i, (uint64_t)acc);
        dual dy = dual_uniform(&r, conv_out_count(&p), -1.0f, 1.0f);
        dual w = dual_uniform(&r, conv_w_count(&p), -1.0f, 1.0f);
        dual dx = dual_uniform(&r, conv_in_count(&p), -1.0f, 1.0f); /* added to when acc */
        for (int s = CPU; s <= GPU; s++) be[s]->conv_bwd_data(&ctx[s], &p, dy.p[s], w.p[s], dx.p[s], acc, 0);
        char what[192];
        conv_label(what, sizeof what, "conv_bwd_data", &p, acc, pr);
        /* each dx sums at most K*R*S products (plus the old value when acc) */
        expect_close(what, &dx, pr->rtol, atol_of(pr, (size_t)p.K * p.R * p.S + 1, 1.0));
        expect_rounded(what, &dx, 1, dx.n, dx.n, pr->math);
        dual_free(&dy);
        dual_free(&w);
        dual_free(&dx);
    }
}

static void conv_bwd_filter_case(int i, const precision *pr) {
    conv_params p = conv_case_params(i);
    rng r;
    rng_seed(&r, 300 + (uint64_t)i, 1);
    dual x = dual_uniform(&r, conv_in_count(&p), -1.0f, 1.0f);
    dual dy = dual_uniform(&r, conv_out_count(&p), -1.0f, 1.0f);
    dual dw = dual_uniform(&r, conv_w_count(&p), -1.0f, 1.0f); /* overwritten */
    for (int s = CPU; s <= GPU; s++) be[s]->conv_bwd_filter(&ctx[s], &p, x.p[s], dy.p[s], dw.p[s]);
    char what[192];
    conv_label(what, sizeof what, "conv_bwd_filter", &p, 0, pr);
    expect_close(what, &dw, pr->rtol_sum, atol_of(pr, (size_t)p.N * p.P * p.Q, 1.0));
    expect_rounded(what, &dw, 1, dw.n, dw.n, pr->math);
    dual_free(&x);
    dual_free(&dy);
    dual_free(&dw);
}

static void test_conv_fwd_fp32(void **state) {
    (void)state;
    NEED_GPU();
    for (int i = 0; i < N_CONV_CASES; i++) conv_fwd_case(i, &PREC_FP32);
}

static void test_conv_bwd_data_fp32(void **state) {
    (void)state;
    NEED_GPU();
    for (int i = 0; i < N_CONV_CASES; i++) conv_bwd_data_case(i, &PREC_FP32);
}

static void test_conv_bwd_filter_fp32(void **state) {
    (void)state;
    NEED_GPU();
    for (int i = 0; i < N_CONV_CASES; i++) conv_bwd_filter_case(i, &PREC_FP32);
}

/* ---------------------------------------------------------------- GEMM */

static const struct gemm_case {
    int M, N, K, pad; /* pad: extra row stride beyond the stored width, for lda, ldb and ldc */
    float alpha, beta;
} gemm_cases[] = {
    {7, 13, 29, 0, 1.0f, 0.0f},    {1, 10, 64, 3, 1.0f, 1.0f},     {32, 1, 17, 1, 0.5f, 0.0f},
    {64, 100, 300, 5, 1.0f, 0.5f}, {5, 5, 1, 2, -2.0f, 1.0f},      {33, 47, 65, 7, 0.25f, -1.0f},
    {8, 10, 64, 0, 1.0f, 0.0f}, /* ResNet-20's classifier: [N, 64] x [64, 10]^T */
};

static void gemm_case_run(size_t i, int ta, int tb, const precision *pr) {
    const struct gemm_case *c = &gemm_cases[i];
    int M = c->M, N = c->N, K = c->K;
    /* stored shapes: A is [M, K] or, transposed, [K, M]; B is [K, N] or [N, K] */
    int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    int lda = a_cols + c->pad, ldb = b_cols + c->pad, ldc = N + c->pad;
    rng r;
    rng_seed(&r, 400 + i, (uint64_t)(2 * ta + tb));
    dual A = dual_uniform(&r, (size_t)a_rows * lda, -1.0f, 1.0f);
    dual B = dual_uniform(&r, (size_t)b_rows * ldb, -1.0f, 1.0f);
    dual C = dual_uniform(&r, (size_t)M * ldc, -1.0f, 1.0f);
    for (int s = CPU; s <= GPU; s++)
        be[s]->gemm(&ctx[s], ta, tb, M, N, K, c->alpha, A.p[s], lda, B.p[s], ldb, c->beta, C.p[s], ldc, 0);
    char what[160];
    snprintf(what, sizeof what, "gemm %s %c%c M%d N%d K%d lda %d ldb %d ldc %d alpha %g beta %g", pr->name,
             ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, lda, ldb, ldc, (double)c->alpha, (double)c->beta);
    /* the whole of C, padding columns included: those must be left alone */
    expect_close(what, &C, pr->rtol, atol_of(pr, (size_t)K + 1, fabs(c->alpha) + fabs(c->beta)));
    /* the M x N values, not the padding between rows (left as it was) */
    expect_rounded(what, &C, (size_t)M, (size_t)N, (size_t)ldc, pr->math);
    dual_free(&A);
    dual_free(&B);
    dual_free(&C);
}

static void gemm_run_all(const precision *pr) {
    for (size_t i = 0; i < sizeof gemm_cases / sizeof gemm_cases[0]; i++)
        for (int ta = 0; ta <= 1; ta++)
            for (int tb = 0; tb <= 1; tb++) gemm_case_run(i, ta, tb, pr);
}

static void test_gemm_fp32(void **state) {
    (void)state;
    NEED_GPU();
    gemm_run_all(&PREC_FP32);
}

/* ---------------------------------------------------------------- TF32 */

/* Tensor-core math for convolutions and GEMMs, within TF32's precision; then
 * back to FP32, which must really be fp32 again: a backend that kept a
 * convolution algorithm or a cuBLAS math mode chosen under TF32 fails the
 * FP32 tolerance, since TF32's typical error is above FP32's atol. */
static void test_conv_gemm_tf32(void **state) {
    (void)state;
    NEED_GPU();
    ctx[GPU].math = BACKEND_MATH_TF32;
    for (int i = 0; i < N_CONV_CASES; i++) {
        conv_fwd_case(i, &PREC_TF32);
        conv_bwd_data_case(i, &PREC_TF32);
        conv_bwd_filter_case(i, &PREC_TF32);
    }
    gemm_run_all(&PREC_TF32);
    ctx[GPU].math = BACKEND_MATH_FP32;
    for (int i = 0; i < N_CONV_CASES; i++) {
        conv_fwd_case(i, &PREC_FP32);
        conv_bwd_data_case(i, &PREC_FP32);
        conv_bwd_filter_case(i, &PREC_FP32);
    }
    gemm_run_all(&PREC_FP32);
}

/* ---------------------------------------------------------------- BF16, FP16 */

/* Every convolution case (both directions of the data gradient with and
 * without accumulate) and every GEMM case in both transpose combinations,
 * with both backends in the mode; ops other than convolutions and GEMMs still
 * compute fp32, bit for bit. Then back to FP32, which must really be fp32
 * again (the reduced modes' errors are far above FP32's tolerance). */
static void conv_gemm_reduced(const precision *pr) {
    set_math_both(pr->math);
    for (int i = 0; i < N_CONV_CASES; i++) {
        conv_fwd_case(i, pr);
        conv_bwd_data_case(i, pr);
        conv_bwd_filter_case(i, pr);
    }
    gemm_run_all(pr);

    rng r;
    rng_seed(&r, 450, (uint64_t)pr->math);
    const size_t n = 10007;
    dual x = dual_uniform(&r, n, -1.0f, 1.0f), y = dual_uniform(&r, n, -1.0f, 1.0f);
    for (int s = CPU; s <= GPU; s++) be[s]->axpy(n, 0.3f, x.p[s], y.p[s], 1);
    char what[96];
    snprintf(what, sizeof what, "axpy in %s math (fp32 in every mode)", pr->name);
    expect_close(what, &y, 0.0, 0.0);
    for (int s = CPU; s <= GPU; s++) be[s]->relu_fwd(&tu_fp32, n, y.p[s], x.p[s]);
    snprintf(what, sizeof what, "relu_fwd in %s math (fp32 in every mode)", pr->name);
    expect_close(what, &x, 0.0, 0.0);
    dual_free(&x);
    dual_free(&y);

    set_math_both(BACKEND_MATH_FP32);
    for (int i = 0; i < N_CONV_CASES; i++) {
        conv_fwd_case(i, &PREC_FP32);
        conv_bwd_data_case(i, &PREC_FP32);
        conv_bwd_filter_case(i, &PREC_FP32);
    }
    gemm_run_all(&PREC_FP32);
}

static void test_conv_gemm_bf16(void **state) {
    (void)state;
    NEED_GPU();
    conv_gemm_reduced(&PREC_BF16);
    set_math_both(BACKEND_MATH_FP32);
}

/* Starts in BF16 so that FP16 follows another 16-bit mode directly: the
 * plans and 16-bit buffers of one must not leak into the other. */
static void test_conv_gemm_fp16(void **state) {
    (void)state;
    NEED_GPU();
    set_math_both(BACKEND_MATH_BF16);
    conv_fwd_case(1, &PREC_BF16);
    conv_bwd_data_case(1, &PREC_BF16);
    gemm_case_run(3, 1, 0, &PREC_BF16);
    conv_gemm_reduced(&PREC_FP16);
    set_math_both(BACKEND_MATH_FP32);
}

/* conv_bwd_data's `paired` in bf16: the data pass takes the 16-bit dy the
 * filter pass made, only when it is the same dy and nothing used the 16-bit
 * slots in between. Three runs of paired passes on the GPU against the CPU's
 * unpaired ones: as a convolution layer runs them; a data pass on another
 * dy that says it is paired (a copy taken regardless of the pointer would
 * give the first dy's gradient); a GEMM in between (it rounds its operands
 * into the same slots, so a pair that survived it would read the GEMM's
 * values as dy). */
static void test_conv_bwd_pair(void **state) {
    (void)state;
    NEED_GPU();
    set_math_both(BACKEND_MATH_BF16);
    const precision *pr = &PREC_BF16;
    conv_params p = conv_case_params(1);
    for (int run = 0; run < 3; run++) {
        rng r;
        rng_seed(&r, 470, (uint64_t)run);
        dual x = dual_uniform(&r, conv_in_count(&p), -1.0f, 1.0f);
        dual w = dual_uniform(&r, conv_w_count(&p), -1.0f, 1.0f);
        dual dy = dual_uniform(&r, conv_out_count(&p), -1.0f, 1.0f);
        dual dy2 = dual_uniform(&r, conv_out_count(&p), -1.0f, 1.0f);
        dual dw = dual_uniform(&r, conv_w_count(&p), -1.0f, 1.0f), dx = dual_uniform(&r, conv_in_count(&p), -1.0f, 1.0f);
        dual ga = dual_uniform(&r, 64 * 64, -1.0f, 1.0f), gc = dual_uniform(&r, 64 * 64, -1.0f, 1.0f);
        const dual *data_dy = run == 1 ? &dy2 : &dy;
        for (int s = CPU; s <= GPU; s++) {
            be[s]->conv_bwd_filter(&ctx[s], &p, x.p[s], dy.p[s], dw.p[s]);
            if (run == 2) be[s]->gemm(&ctx[s], 0, 0, 64, 64, 64, 1.0f, ga.p[s], 64, ga.p[s], 64, 0.0f, gc.p[s], 64, 0);
            be[s]->conv_bwd_data(&ctx[s], &p, data_dy->p[s], w.p[s], dx.p[s], 0, s == GPU);
        }
        static const char *what[] = {"paired passes", "a filter pass, then a paired data pass on another dy",
                                     "a filter pass, a GEMM, then the paired data pass"};
        char label[160];
        snprintf(label, sizeof label, "conv_bwd_data paired bf16, %s: weight gradient", what[run]);
        expect_close(label, &dw, pr->rtol_sum, atol_of(pr, (size_t)p.N * p.P * p.Q, 1.0));
        snprintf(label, sizeof label, "conv_bwd_data paired bf16, %s: data gradient", what[run]);
        expect_close(label, &dx, pr->rtol, atol_of(pr, (size_t)p.K * p.R * p.S, 1.0));
        expect_rounded(label, &dx, 1, dx.n, dx.n, pr->math);
        dual_free(&x);
        dual_free(&w);
        dual_free(&dy);
        dual_free(&dy2);
        dual_free(&dw);
        dual_free(&dx);
        dual_free(&ga);
        dual_free(&gc);
    }
    set_math_both(BACKEND_MATH_FP32);
}

/* ---------------------------------------------------------------- NHWC convolutions */

/* Every convolution case with both backends in NHWC: x, y, dx and dy are
 * [N, H, W, C] on both sides, filters and their gradients [K, C, R, S] as in
 * NCHW (the GPU hands cuDNN a [K, R, S, C] copy and transposes the weight
 * gradient back). The tolerances are NCHW's: cuDNN's NHWC algorithms sum the
 * same products in other orders, and in BF16/FP16 the products are of the
 * same rounded operands (rounding commutes with the filter's transpose), the
 * result rounded once to the type (expect_rounded in the case functions). */
static void conv_all_cases(const precision *pr) {
    for (int i = 0; i < N_CONV_CASES; i++) {
        conv_fwd_case(i, pr);
        conv_bwd_data_case(i, pr);
        conv_bwd_filter_case(i, pr);
    }
}

/* Two shapes in NCHW, then in NHWC, in the current mode. Plans are keyed by
 * layout: a backend that found the other layout's plan (its descriptors, so
 * its strides and filter format) for the same shape and mode reads every
 * tensor wrongly here, an error of order one. */
static void conv_layout_switch(const precision *pr) {
    static const int cases[] = {1, 9};
    for (int layout = BACKEND_LAYOUT_NCHW; layout <= BACKEND_LAYOUT_NHWC; layout++) {
        set_layout_both(layout);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            conv_fwd_case(cases[k], pr);
            conv_bwd_data_case(cases[k], pr);
            conv_bwd_filter_case(cases[k], pr);
        }
    }
}

/* FP32, then the GPU in TF32 (the CPU computes fp32; TF32's tolerance), then
 * FP32 again, which must be fp32 again in NHWC too; then the layout switch. */
static void test_conv_nhwc_fp32_tf32(void **state) {
    (void)state;
    NEED_GPU();
    set_layout_both(BACKEND_LAYOUT_NHWC);
    conv_all_cases(&PREC_FP32);
    ctx[GPU].math = BACKEND_MATH_TF32;
    conv_all_cases(&PREC_TF32);
    ctx[GPU].math = BACKEND_MATH_FP32;
    conv_all_cases(&PREC_FP32);
    conv_layout_switch(&PREC_FP32);
    set_layout_both(BACKEND_LAYOUT_NCHW);
}

static void conv_nhwc_reduced(const precision *pr) {
    set_math_both(pr->math);
    set_layout_both(BACKEND_LAYOUT_NHWC);
    conv_all_cases(pr);
    conv_layout_switch(pr);
    set_layout_both(BACKEND_LAYOUT_NCHW);
    set_math_both(BACKEND_MATH_FP32);
}

static void test_conv_nhwc_bf16(void **state) {
    (void)state;
    NEED_GPU();
    conv_nhwc_reduced(&PREC_BF16);
}

/* The cases the graph API runs: each search finalises and times tens of
 * engine configurations per pass, so a subset that still holds each kind
 * (1x1, 3x3, strided, the 7x7 stem, a rectangular kernel, 256 channels). */
static const int graph_cases[] = {0, 1, 2, 3, 8, 11};

static void conv_graph_cases(const precision *pr) {
    for (size_t k = 0; k < sizeof graph_cases / sizeof graph_cases[0]; k++) {
        conv_fwd_case(graph_cases[k], pr);
        conv_bwd_data_case(graph_cases[k], pr);
        conv_bwd_filter_case(graph_cases[k], pr);
    }
}

/* train.conv_api = graph (model/cudnn_graph.h): graph_cases through the
 * graph API's timed plans, held to the CPU as the legacy calls are: in NCHW
 * in fp32 (which must stay fp32: an engine with TF32 tensor cores fails its
 * tolerance) and bf16, in NHWC in tf32 and bf16. In NHWC bf16 (what the
 * graph API is for) each pass of one shape must say it ran a graph plan
 * (else the legacy calls answered and this test would prove nothing);
 * elsewhere a pass no engine qualifies for takes the legacy call, said. */
static void test_conv_graph_api(void **state) {
    (void)state;
    NEED_GPU();
    ctx[GPU].conv_api = BACKEND_CONV_API_GRAPH;
    for (int layout = BACKEND_LAYOUT_NCHW; layout <= BACKEND_LAYOUT_NHWC; layout++) {
        set_layout_both(layout);
        if (layout == BACKEND_LAYOUT_NCHW) {
            conv_graph_cases(&PREC_FP32);
        } else {
            ctx[GPU].math = BACKEND_MATH_TF32;
            conv_graph_cases(&PREC_TF32);
            ctx[GPU].math = BACKEND_MATH_FP32;
        }
        set_math_both(BACKEND_MATH_BF16);
        conv_graph_cases(&PREC_BF16);
        conv_params p = conv_case_params(1);
        char buf[1024];
        backend_conv_describe(be[GPU], &ctx[GPU], &p, buf, sizeof buf);
        print_message("conv case 1, bf16 %s, graph API: %s\n", cur_layout_name(), buf);
        const char *passes[] = {"fwd: graph engine", "data: graph engine", "filter: graph engine"};
        for (int k = 0; k < 3 && layout == BACKEND_LAYOUT_NHWC; k++)
            if (!strstr(buf, passes[k])) fail_msg("no '%s' in conv case 1's description: %s", passes[k], buf);
        set_math_both(BACKEND_MATH_FP32);
    }
    ctx[GPU].conv_api = BACKEND_CONV_API_LEGACY;
    set_layout_both(BACKEND_LAYOUT_NCHW);
}

/* plans_export / plans_import (train/plans.h keeps them in out_dir): what
 * one search chose comes back as the same text through an import, an
 * import of a text made elsewhere or with a broken line takes nothing, and
 * the cases still compute right with the imported choices. */
static void test_conv_plans_text(void **state) {
    (void)state;
    NEED_GPU();
    for (int i = 0; i < N_CONV_CASES; i++) conv_fwd_case(i, &PREC_FP32);
    size_t need = backend_plans_export(be[GPU], NULL, 0);
    char *text = cnt_malloc(need + 1), *again = cnt_malloc(need + 1);
    assert_int_equal(backend_plans_export(be[GPU], text, need + 1), need);
    assert_true(strncmp(text, "cnntrain conv plans v2; device ", 31) == 0);
    char why[256];
    int n = backend_plans_import(be[GPU], text, why, sizeof why);
    if (n < 1) fail_msg("its own plans not taken (%d): %s", n, why);
    assert_int_equal(backend_plans_export(be[GPU], again, need + 1), need);
    assert_string_equal(again, text); /* taken as they were */
    char *other = cnt_malloc(need + 16);
    snprintf(other, need + 16, "X%s", text);
    assert_int_equal(backend_plans_import(be[GPU], other, why, sizeof why), -1);
    snprintf(other, need + 16, "%s1 2 3\n", text); /* a broken last line */
    assert_int_equal(backend_plans_import(be[GPU], other, why, sizeof why), -1);
    print_message("a broken line: %s\n", why);
    for (int i = 0; i < N_CONV_CASES; i++) conv_fwd_case(i, &PREC_FP32);
    free(other);
    free(again);
    free(text);
}

/* The graph API's choices in the plans text (model/plan_line.h): a kept
 * choice is taken without a search (conv_describe says "as the plans file
 * says") and computes right; a kept choice that no longer holds (its engine
 * is not at its place in the heuristics' list) is searched again, with a
 * warning, and the text then holds the new choice. */
static void test_conv_graph_plans_kept(void **state) {
    (void)state;
    NEED_GPU();
    ctx[GPU].conv_api = BACKEND_CONV_API_GRAPH;
    conv_graph_cases(&PREC_FP32);
    size_t need = backend_plans_export(be[GPU], NULL, 0);
    char *text = cnt_malloc(need + 1);
    assert_int_equal(backend_plans_export(be[GPU], text, need + 1), need);
    /* the first line whose forward (beta 0) has a graph plan */
    const char *body = strchr(text, '\n');
    assert_non_null(body);
    plan_line l;
    int found = 0;
    for (const char *t = body + 1; *t && !found; t = strchr(t, '\n') ? strchr(t, '\n') + 1 : t + strlen(t))
        found = plan_line_parse(t, &l) && l.graph_index[0][0] >= 0 && l.math == BACKEND_MATH_FP32 &&
                l.layout == cur_layout; /* the layout the cases below run in */
    if (!found) fail_msg("no graph plan for a forward in the text:\n%s", text);
    int64_t engine = l.graph_engine[0][0];
    char bogus[1024], line[512], why[256], buf[1024];
    l.graph_engine[0][0] = 999999; /* no such engine at that place */
    plan_line_format(&l, line, sizeof line);
    snprintf(bogus, sizeof bogus, "%.*s%s", (int)(body + 1 - text), text, line);
    backend_ctx c = ctx[GPU];
    c.math = (backend_math)l.math;
    c.layout = (backend_layout)l.layout;
    /* a stale choice, then the good one: the good one is taken at the next call */
    assert_int_equal(backend_plans_import(be[GPU], bogus, why, sizeof why), 1);
    int n = backend_plans_import(be[GPU], text, why, sizeof why);
    if (n < 1) fail_msg("its own plans not taken (%d): %s", n, why);
    conv_graph_cases(&PREC_FP32);
    backend_conv_describe(be[GPU], &c, &l.p, buf, sizeof buf);
    print_message("taken: %s\n", buf);
    if (!strstr(buf, "as the plans file says")) fail_msg("the kept forward plan was not taken: %s", buf);
    /* the stale choice alone: searched again (a warning), correct, and replaced in the text */
    assert_int_equal(backend_plans_import(be[GPU], bogus, why, sizeof why), 1);
    conv_graph_cases(&PREC_FP32);
    backend_conv_describe(be[GPU], &c, &l.p, buf, sizeof buf);
    print_message("searched again: %s\n", buf);
    if (!strstr(buf, "fwd: graph engine") || strstr(buf, "fwd: graph engine 999999"))
        fail_msg("the stale forward plan was not searched again: %s", buf);
    char *after = cnt_malloc(need + 64);
    backend_plans_export(be[GPU], after, need + 64);
    if (strstr(after, " 999999 ")) fail_msg("the stale choice stayed in the text:\n%s", after);
    print_message("kept engine %lld\n", (long long)engine);
    free(after);
    free(text);
    ctx[GPU].conv_api = BACKEND_CONV_API_LEGACY;
}

static void test_conv_nhwc_fp16(void **state) {
    (void)state;
    NEED_GPU();
    conv_nhwc_reduced(&PREC_FP16);
}

/* The kept filters (backend_ctx.weights_epoch in model/backend.h; the
 * whole-step tests run them too, through net_forward and net_backward; the
 * other op tests run under epoch 0): on the same weight
 * pointer, with new values each round,
 * 0. a new epoch, forward, data pass: the data pass reuses the forward's
 *    filter;
 * 1. a new epoch, data pass with no forward first: nothing of round 0 may be
 *    used (another epoch's form is stale);
 * 2. a new epoch, forward, data pass: the kept filter is made again in place;
 * 3. epoch 0, data pass: nothing kept is used;
 * 4. two contexts interleaved on the same weights: a forward under a new
 *    epoch, then a forward in the other layout under its own epoch (which
 *    remakes the one entry of this weight pointer in its form), then the
 *    first context's data pass (which must not take the other's form), then
 *    the second's.
 * Each result must be the CPU's on that round's weights in that context. */
static void filter_cache_pass(int i, const precision *pr, int round, int fwd, const dual *x, const dual *w,
                              const dual *y, const dual *dy, const dual *dx) {
    conv_params p = conv_case_params(i);
    char what[224], label[96];
    if (fwd) {
        for (int s = CPU; s <= GPU; s++) be[s]->conv_fwd(&ctx[s], &p, x->p[s], w->p[s], y->p[s]);
        snprintf(label, sizeof label, "filter cache round %d (%s): conv_fwd", round, cur_layout_name());
        conv_label(what, sizeof what, label, &p, 0, pr);
        expect_close(what, y, pr->rtol, atol_of(pr, (size_t)p.C * p.R * p.S, 1.0));
        return;
    }
    for (int s = CPU; s <= GPU; s++) be[s]->conv_bwd_data(&ctx[s], &p, dy->p[s], w->p[s], dx->p[s], 0, 0);
    snprintf(label, sizeof label, "filter cache round %d (%s): conv_bwd_data", round, cur_layout_name());
    conv_label(what, sizeof what, label, &p, 0, pr);
    expect_close(what, dx, pr->rtol, atol_of(pr, (size_t)p.K * p.R * p.S, 1.0));
}

/* ctx of both sides in the other layout and under `epoch`, or back. */
static void filter_cache_switch(int layout, uint64_t epoch) {
    set_layout_both(layout);
    ctx[CPU].weights_epoch = ctx[GPU].weights_epoch = epoch;
}

static void filter_cache_case(int i, const precision *pr) {
    conv_params p = conv_case_params(i);
    rng r;
    rng_seed(&r, 400 + (uint64_t)i, 1);
    size_t nw = conv_w_count(&p);
    dual x = dual_uniform(&r, conv_in_count(&p), -1.0f, 1.0f);
    dual w = dual_uniform(&r, nw, -1.0f, 1.0f);
    dual y = dual_uniform(&r, conv_out_count(&p), -1.0f, 1.0f);
    dual dy = dual_uniform(&r, conv_out_count(&p), -1.0f, 1.0f);
    dual dx = dual_uniform(&r, conv_in_count(&p), -1.0f, 1.0f);
    float *hw = tu_alloc_f(nw);
    const int layout = cur_layout, other = layout == BACKEND_LAYOUT_NHWC ? BACKEND_LAYOUT_NCHW : BACKEND_LAYOUT_NHWC;
    for (int round = 0; round < 5; round++) {
        if (round > 0) {
            fill_uniform(&r, hw, nw, -1.0f, 1.0f);
            for (int s = CPU; s <= GPU; s++) be[s]->upload(w.p[s], hw, nw * sizeof(float));
        }
        uint64_t epoch = round < 3 || round == 4 ? backend_epoch_new() : 0;
        filter_cache_switch(layout, epoch);
        if (round == 0 || round == 2 || round == 4) filter_cache_pass(i, pr, round, 1, &x, &w, &y, &dy, &dx);
        if (round == 4) {
            uint64_t epoch2 = backend_epoch_new();
            filter_cache_switch(other, epoch2);
            filter_cache_pass(i, pr, round, 1, &x, &w, &y, &dy, &dx);
            filter_cache_switch(layout, epoch);
            filter_cache_pass(i, pr, round, 0, &x, &w, &y, &dy, &dx);
            filter_cache_switch(other, epoch2);
        }
        filter_cache_pass(i, pr, round, 0, &x, &w, &y, &dy, &dx);
    }
    filter_cache_switch(layout, 0);
    free(hw);
    dual_free(&x);
    dual_free(&w);
    dual_free(&y);
    dual_free(&dy);
    dual_free(&dx);
}

static void test_conv_filter_cache(void **state) {
    (void)state;
    NEED_GPU();
    assert_non_null(be[GPU]->conv_filter_kept);
    static const int cases[] = {1, 9, 3};
    const precision *prs[] = {&PREC_FP32, &PREC_BF16, &PREC_FP16};
    for (int layout = BACKEND_LAYOUT_NCHW; layout <= BACKEND_LAYOUT_NHWC; layout++)
        for (int k = 0; k < 3; k++) {
            if (layout == BACKEND_LAYOUT_NCHW && prs[k] == &PREC_FP32) continue; /* nothing to keep */
            set_layout_both(layout);
            set_math_both(prs[k]->math);
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) filter_cache_case(cases[c], prs[k]);
        }
    set_math_both(BACKEND_MATH_FP32);
    set_layout_both(BACKEND_LAYOUT_NCHW);
}

/* Fails unless backend side's n floats at dev equal want[] exactly (infinities
 * included). */
static void expect_exact(const char *what, int side, const float *dev, const float *want, size_t n) {
    float *h = download(side, dev, n);
    for (size_t i = 0; i < n; i++)
        if (!(h[i] == want[i]))
            fail_msg("%s on the %s backend: [%zu] = %.9g, expected %.9g", what, side == CPU ? "cpu" : "gpu", i,
                     (double)h[i], (double)want[i]);
    free(h);
}

/* fp16's largest finite value is 65504; a result that rounds beyond it
 * (|exact| >= 65520) is inf in a half tensor, which is what dynamic loss
 * scaling looks for. Operands are small integers and multiples of 1/8, so
 * every product and sum is exact in any summation order and the expected
 * values are exact: round(256 * 256) = inf, round(65504 + 15) = 65504,
 * round(65504 + 40) = inf, and with accumulate round(40000 + 30000) = inf.
 * In BF16 (fp32's exponent range) the same forward convolution and GEMMs
 * stay finite. */
static void test_reduced_overflow(void **state) {
    (void)state;
    NEED_GPU();
    for (int m = 0; m < 2; m++) {
        const int math = m == 0 ? BACKEND_MATH_FP16 : BACKEND_MATH_BF16;
        const char *mname = m == 0 ? "fp16" : "bf16";
        set_math_both(math);
        char what[128];

        /* conv_fwd 1x1: x has channel 0 = 256, channel 1 = 1; filter k is
         * (w0[k], w1[k]), so y[k] = 256 * w0[k] + w1[k] at every pixel */
        conv_params p = {.N = 1, .C = 2, .H = 2, .W = 3, .K = 5, .R = 1, .S = 1, .stride_h = 1, .stride_w = 1};
        assert_int_equal(conv_params_init(&p), CNT_OK);
        static const float w0[5] = {256.0f, -256.0f, 255.875f, 255.875f, 255.875f};
        static const float w1[5] = {0.0f, 0.0f, 0.0f, 15.0f, 40.0f};
        float xh[12], wh[10], want[30];
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < 6; i++) xh[c * 6 + i] = c == 0 ? 256.0f : 1.0f;
        for (int k = 0; k < 5; k++) {
            wh[2 * k] = w0[k];
            wh[2 * k + 1] = w1[k];
            /* the rounded operands' exact products and sum, rounded */
            float yk = round_to(math, 256.0f * round_to(math, w0[k]) + round_to(math, w1[k]));
            for (int i = 0; i < 6; i++) want[k * 6 + i] = yk;
        }
        if (math == BACKEND_MATH_FP16) {
            assert_true(isinf(want[0]) && want[0] > 0 && isinf(want[6]) && want[6] < 0);
            assert_true(want[12] == 65504.0f && want[18] == 65504.0f && isinf(want[24]) && want[24] > 0);
        } else {
            for (int i = 0; i < 30; i++) assert_true(isfinite(want[i]));
        }
        float junk[30]; /* the outputs' old contents: overwritten, never equal to a result */
        for (int i = 0; i < 30; i++) junk[i] = -1.0f;
        dual x = dual_of(xh, 12), w = dual_of(wh, 10), y = dual_of(junk, 30);
        for (int s = CPU; s <= GPU; s++) be[s]->conv_fwd(&ctx[s], &p, x.p[s], w.p[s], y.p[s]);
        snprintf(what, sizeof what, "%s conv_fwd overflow", mname);
        for (int s = CPU; s <= GPU; s++) expect_exact(what, s, y.p[s], want, 30);
        dual_free(&x);
        dual_free(&w);
        dual_free(&y);

        /* the same as a GEMM (A [2, 2] = rows (256, 1) and (128, 1), B [2, 5]
         * = rows w0 and w1), then C += A B with C's old values pushing
         * 30000-odd results over */
        float ah[4] = {256.0f, 1.0f, 128.0f, 1.0f}, bh[10], ch[10];
        for (int k = 0; k < 5; k++) {
            bh[k] = w0[k];
            bh[5 + k] = w1[k];
        }
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 5; k++)
                want[i * 5 + k] = round_to(math, ah[2 * i] * round_to(math, w0[k]) + round_to(math, w1[k]));
        dual A = dual_of(ah, 4), B = dual_of(bh, 10), C = dual_of(junk, 10);
        for (int s = CPU; s <= GPU; s++)
            be[s]->gemm(&ctx[s], 0, 0, 2, 5, 2, 1.0f, A.p[s], 2, B.p[s], 5, 0.0f, C.p[s], 5, 0);
        snprintf(what, sizeof what, "%s gemm overflow", mname);
        for (int s = CPU; s <= GPU; s++) expect_exact(what, s, C.p[s], want, 10);
        for (int k = 0; k < 10; k++) ch[k] = (k % 2 ? -1.0f : 1.0f) * 40000.0f; /* exact in fp16 and bf16 */
        for (int s = CPU; s <= GPU; s++) be[s]->upload(C.p[s], ch, sizeof ch);
        /* A' = (150), B' = (200, -200, ...): A'B' = +-30000, with beta 1 */
        float a1 = 150.0f, b1[10];
        for (int k = 0; k < 10; k++) b1[k] = (k % 2 ? -1.0f : 1.0f) * 200.0f;
        for (int k = 0; k < 10; k++) want[k] = round_to(math, ch[k] + 150.0f * b1[k]);
        if (math == BACKEND_MATH_FP16) assert_true(isinf(want[0]) && want[0] > 0 && isinf(want[1]) && want[1] < 0);
        dual A1 = dual_of(&a1, 1), B1 = dual_of(b1, 10);
        for (int s = CPU; s <= GPU; s++)
            be[s]->gemm(&ctx[s], 0, 0, 1, 10, 1, 1.0f, A1.p[s], 1, B1.p[s], 10, 1.0f, C.p[s], 10, 0);
        snprintf(what, sizeof what, "%s gemm overflow through beta", mname);
        for (int s = CPU; s <= GPU; s++) expect_exact(what, s, C.p[s], want, 10);
        dual_free(&A);
        dual_free(&B);
        dual_free(&C);
        dual_free(&A1);
        dual_free(&B1);

        /* conv_bwd_data 1x1, one channel: dx = round(dx_old + dy * w); fp16
         * only, where every intermediate is a half value, so the GPU's two
         * roundings and the CPU's one agree exactly */
        if (math == BACKEND_MATH_FP16) {
            conv_params q = {.N = 1, .C = 1, .H = 2, .W = 2, .K = 1, .R = 1, .S = 1, .stride_h = 1, .stride_w = 1};
            assert_int_equal(conv_params_init(&q), CNT_OK);
            float dyh[4] = {150.0f, 150.0f, -150.0f, 1.0f}, wv = 200.0f, dxh[4] = {40000.0f, 0.0f, -40000.0f, 0.0f};
            const float dx_want[4] = {INFINITY, 30000.0f, -INFINITY, 200.0f};
            dual dy = dual_of(dyh, 4), w1d = dual_of(&wv, 1), dx = dual_of(dxh, 4);
            for (int s = CPU; s <= GPU; s++) be[s]->conv_bwd_data(&ctx[s], &q, dy.p[s], w1d.p[s], dx.p[s], 1, 0);
            for (int s = CPU; s <= GPU; s++)
                expect_exact("fp16 conv_bwd_data overflow through accumulate", s, dx.p[s], dx_want, 4);
            dual_free(&dy);
            dual_free(&w1d);
            dual_free(&dx);
        }
    }
    set_math_both(BACKEND_MATH_FP32);
}

/* ---------------------------------------------------------------- find_nonfinite */

/* find_nonfinite(n, x) on both backends with found starting at `init`: both
 * must end at `want` (init when nothing is found: the flag is left alone). */
static void nonfinite_case(const char *what, const dual *x, size_t n, float init, float want) {
    for (int s = CPU; s <= GPU; s++) {
        float *found = be[s]->alloc(sizeof(float));
        be[s]->upload(found, &init, sizeof init);
        be[s]->find_nonfinite(n, x->p[s], found);
        float got = -1.0f;
        be[s]->download(&got, found, sizeof got);
        be[s]->free(found);
        if (!(got == want))
            fail_msg("find_nonfinite %s (n %zu, found starting at %g) on the %s backend: found = %g, expected %g",
                     what, n, (double)init, s == CPU ? "cpu" : "gpu", (double)got, (double)want);
    }
}

static void dual_set(dual *d, const float *host) {
    for (int s = CPU; s <= GPU; s++) be[s]->upload(d->p[s], host, d->n * sizeof(float));
}

static void test_find_nonfinite(void **state) {
    (void)state;
    NEED_GPU();
    /* finite values of every kind: the largest, denormals, signed zeros */
    const size_t n = 100003; /* not a multiple of any block size */
    rng r;
    rng_seed(&r, 2050, 1);
    float *h = tu_alloc_f(n);
    fill_normal(&r, h, n, 0.0f, 1e30f);
    h[0] = 3.4028235e38f;
    h[1] = -3.4028235e38f;
    h[2] = 1e-45f;
    h[3] = -0.0f;
    h[n - 1] = 1.17549435e-38f;
    dual x = dual_of(h, n);
    nonfinite_case("all finite", &x, n, 0.0f, 0.0f);
    nonfinite_case("all finite, flag already 0.5", &x, n, 0.5f, 0.5f);
    nonfinite_case("all finite, flag already set", &x, n, 1.0f, 1.0f);

    h[n - 1] = INFINITY;
    dual_set(&x, h);
    nonfinite_case("+inf at the last index", &x, n, 0.0f, 1.0f);
    nonfinite_case("+inf at the last index, not looked at", &x, n - 1, 0.0f, 0.0f);
    h[n - 1] = 1.0f;
    h[0] = -INFINITY;
    dual_set(&x, h);
    nonfinite_case("-inf at index 0", &x, n, 0.0f, 1.0f);
    nonfinite_case("n = 0", &x, 0, 0.0f, 0.0f);
    h[0] = 1.0f;
    h[n / 2] = NAN;
    dual_set(&x, h);
    nonfinite_case("NaN in the middle", &x, n, 0.0f, 1.0f);
    const dual mid = {{x.p[CPU] + n / 2, x.p[GPU] + n / 2}, 1, {NULL, NULL}}; /* a view of the NaN alone */
    nonfinite_case("the NaN alone (n = 1)", &mid, 1, 0.0f, 1.0f);
    h[n / 2] = -NAN;
    dual_set(&x, h);
    nonfinite_case("-NaN", &x, n, 0.0f, 1.0f);
    dual_free(&x);
    free(h);

    /* 10M values, one NaN in the middle, both backends */
    const size_t big = 10000000;
    h = tu_alloc_f(big);
    fill_uniform(&r, h, big, -65504.0f, 65504.0f);
    dual xb = dual_of(h, big);
    nonfinite_case("10M finite values", &xb, big, 0.0f, 0.0f);
    h[big / 2 + 1] = NAN;
    dual_set(&xb, h);
    nonfinite_case("10M values, one NaN in the middle", &xb, big, 0.0f, 1.0f);
    dual_free(&xb);
    free(h);

    /* GPU only: more values than the kernel's capped grid has threads
     * (about 268M), so the grid-stride loop's later rounds are the ones that
     * must see the last value; the array is alloc's zeros (1.2 GB on the
     * device, nothing on the host) */
    const backend *g = be[GPU];
    const size_t huge = (size_t)300 * 1000 * 1000;
    float *xd = g->alloc(huge * sizeof(float)), *found = g->alloc(sizeof(float));
    float got = -1.0f, one_nan = NAN;
    g->find_nonfinite(huge, xd, found);
    g->download(&got, found, sizeof got);
    if (got != 0.0f) fail_msg("find_nonfinite over %zu zeros: found = %g, expected 0", huge, (double)got);
    g->upload(xd + huge - 1, &one_nan, sizeof one_nan);
    g->find_nonfinite(huge, xd, found);
    g->download(&got, found, sizeof got);
    if (got != 1.0f) fail_msg("find_nonfinite over %zu values, NaN last: found = %g, expected 1", huge, (double)got);
    g->free(xd);
    g->free(found);
}

/* ---------------------------------------------------------------- bias */

/* In the current layout; with HW = 1 both layouts are the same bytes. */
static void bias_run(void) {
    /* N, C, HW: HW = 1 is a linear layer's bias; N*HW = 48000 splits each
     * channel's sum over two blocks (and 37 channels leave a partial group of
     * 32 in NHWC); C = 1 with HW > 1; the forward's NHWC kernel walking its
     * rows more than once (80,000 rows of 2 groups of 32 channels: past its
     * 8,192 x 8 threads), its NCHW kernel its planes (70,400 past 65,535);
     * the NHWC gradient's vector blocks across channels (160 = 40 vectors of
     * 4: a block of 32 and a partial one) */
    static const int shapes[][3] = {{8, 10, 1}, {7, 3, 1},     {3, 16, 49},     {2, 64, 196},  {5, 7, 33},
                                    {1, 1, 1},  {3, 1, 50},    {16, 37, 3000},  {4, 40, 20000}, {1100, 64, 2},
                                    {2, 160, 300}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int N = shapes[i][0], C = shapes[i][1], HW = shapes[i][2];
        rng r;
        rng_seed(&r, 500 + i, 1);
        dual b = dual_uniform(&r, (size_t)C, -1.0f, 1.0f);
        dual y = dual_uniform(&r, (size_t)N * C * HW, -1.0f, 1.0f);
        dual db = dual_uniform(&r, (size_t)C, -1.0f, 1.0f); /* overwritten */
        char what[96];
        for (int s = CPU; s <= GPU; s++) be[s]->bias_fwd(&ctx[s], N, C, HW, b.p[s], y.p[s]);
        snprintf(what, sizeof what, "bias_fwd %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
        /* one addition per value, the same rounding on both sides */
        expect_close(what, &y, 0.0, 0.0);
        for (int s = CPU; s <= GPU; s++) be[s]->bias_bwd(&ctx[s], N, C, HW, y.p[s], db.p[s]); /* y as dy */
        snprintf(what, sizeof what, "bias_bwd %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
        /* a reduction over N*HW values of magnitude below 2 */
        expect_close(what, &db, PREC_FP32.rtol_sum, atol_of(&PREC_FP32, (size_t)N * HW, 2.0));
        dual_free(&b);
        dual_free(&y);
        dual_free(&db);
    }
    /* dy one float past a 16-byte boundary (a tensor inside a larger buffer):
     * NHWC's gradient takes its scalar kernel, where a 16-byte load would fault */
    const int N = 3, C = 16, HW = 49;
    rng r;
    rng_seed(&r, 520, 1);
    dual y = dual_uniform(&r, (size_t)N * C * HW + 1, -1.0f, 1.0f);
    dual db = dual_uniform(&r, (size_t)C, -1.0f, 1.0f); /* overwritten */
    for (int s = CPU; s <= GPU; s++) be[s]->bias_bwd(&ctx[s], N, C, HW, y.p[s] + 1, db.p[s]);
    char what[96];
    snprintf(what, sizeof what, "bias_bwd %s N%d C%d HW%d, dy 4 bytes off 16", cur_layout_name(), N, C, HW);
    expect_close(what, &db, PREC_FP32.rtol_sum, atol_of(&PREC_FP32, (size_t)N * HW, 2.0));
    dual_free(&y);
    dual_free(&db);
}

static void test_bias_fwd_bwd(void **state) {
    (void)state;
    NEED_GPU();
    bias_run();
}

static void test_bias_fwd_bwd_nhwc(void **state) {
    (void)state;
    NEED_GPU();
    set_layout_both(BACKEND_LAYOUT_NHWC);
    bias_run();
    set_layout_both(BACKEND_LAYOUT_NCHW);
}

/* ---------------------------------------------------------------- batch norm */

typedef struct bn_case {
    int N, C, HW;
    float mean, std, momentum, eps;
} bn_case;

static const bn_case bn_cases[] = {
    {4, 3, 25, 0.0f, 1.0f, 0.1f, 1e-5f},
    {2, 3, 2, 1.0f, 2.0f, 0.1f, 1e-5f},    /* M = 4: biased and unbiased variance differ by a third */
    {1, 4, 49, -2.0f, 0.5f, 0.1f, 1e-3f},  /* batch 1 */
    {16, 8, 1, 0.5f, 1.0f, 0.25f, 1e-5f},  /* after a linear layer */
    {8, 5, 784, 3.0f, 2.0f, 0.1f, 1e-5f},  /* long reductions, mean far from 0 */
    {3, 2, 9, 0.0f, 0.3f, 0.9f, 0.5f},     /* large eps: where eps goes matters */
    {8, 64, 64, 0.0f, 1.0f, 0.1f, 1e-5f},  /* ResNet-20 stage 3 */
    {1, 6, 1, 0.5f, 1.0f, 0.1f, 1e-5f},    /* one value per channel: cuDNN refuses it, our kernel takes the CPU's rule */
    /* ImageNet sizes; in NHWC these (C a multiple of 8) take cuDNN's
     * SPATIAL_PERSISTENT Ex calls */
    {8, 64, 3136, 0.0f, 1.0f, 0.1f, 1e-5f},   /* ResNet-50 stage 1, 56x56 */
    {16, 256, 196, 1.0f, 2.0f, 0.1f, 1e-5f},  /* ResNet-50 stage 3, 14x14 */
};
#define N_BN_CASES (sizeof bn_cases / sizeof bn_cases[0])

/* Batch statistics are reductions over M = N*HW values that the GPU may
 * accumulate in float, in any order: for M in the thousands their relative
 * error can reach 1e-4. Hence rtol 1e-3 on the statistics (atol 1e-4 of the
 * data's magnitude for the means, which can be near zero), and 1e-3 on the
 * normalised output, which is of order 1. A formula error is far larger: at
 * M = 4 normalising by the unbiased variance moves y by 13%, and with
 * eps = 0.5 adding eps anywhere but under the square root moves it by 4%. */
#define BN_RTOL 1e-3

/* Floats by which the GPU's per-channel vectors (gamma, beta, the running and
 * saved statistics, the parameter gradients) sit past an aligned address: 0,
 * or 2 in test_bn_nhwc_unaligned. */
static size_t bn_vec_shift;

static void bn_shift_vecs(dual *const *v, size_t n) {
    for (size_t i = 0; i < n; i++) dual_shift(v[i], bn_vec_shift);
}

/* The batch-norm tests run in the current layout: in NHWC the same buffers
 * are [N, HW, C] on both sides (a channel's values strided by C); cases with
 * HW = 1 or N*HW = 1 are the same bytes in both layouts. */
static void bn_fwd_train_run(void) {
    for (size_t i = 0; i < N_BN_CASES; i++) {
        const bn_case *bc = &bn_cases[i];
        int N = bc->N, C = bc->C, HW = bc->HW;
        size_t n = (size_t)N * C * HW;
        double scale = fabs(bc->mean) + bc->std;
        rng r;
        rng_seed(&r, 600 + i, 1);
        dual x = dual_normal(&r, n, bc->mean, bc->std);
        dual gamma = dual_uniform(&r, (size_t)C, 0.5f, 1.5f);
        dual beta = dual_uniform(&r, (size_t)C, -0.5f, 0.5f);
        dual y = dual_uniform(&r, n, -1.0f, 1.0f); /* overwritten */
        dual rmean = dual_uniform(&r, (size_t)C, -1.0f, 1.0f);
        dual rvar = dual_uniform(&r, (size_t)C, 0.5f, 2.0f);
        dual smean = dual_uniform(&r, (size_t)C, -1.0f, 1.0f), sinv = dual_uniform(&r, (size_t)C, -1.0f, 1.0f);
        bn_shift_vecs((dual *const[]){&gamma, &beta, &rmean, &rvar, &smean, &sinv}, 6);
        for (int s = CPU; s <= GPU; s++)
            be[s]->bn_fwd_train(&ctx[s], N, C, HW, x.p[s], gamma.p[s], beta.p[s], y.p[s], rmean.p[s], rvar.p[s],
                                bc->momentum, bc->eps, smean.p[s], sinv.p[s]);
        char what[128];
        snprintf(what, sizeof what, "bn_fwd_train y %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
        expect_close(what, &y, BN_RTOL, BN_RTOL);
        snprintf(what, sizeof what, "bn_fwd_train save_mean %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
        expect_close(what, &smean, BN_RTOL, 1e-4 * scale);
        snprintf(what, sizeof what, "bn_fwd_train save_invstd %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
        expect_close(what, &sinv, BN_RTOL, 0.0);
        snprintf(what, sizeof what, "bn_fwd_train running_mean %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
        expect_close(what, &rmean, BN_RTOL, 1e-4 * (scale + 1.0));
        snprintf(what, sizeof what, "bn_fwd_train running_var %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
        expect_close(what, &rvar, BN_RTOL, 0.0);
        dual_free(&x);
        dual_free(&gamma);
        dual_free(&beta);
        dual_free(&y);
        dual_free(&rmean);
        dual_free(&rvar);
        dual_free(&smean);
        dual_free(&sinv);
    }
}

static void bn_fwd_infer_run(void) {
    for (size_t i = 0; i < N_BN_CASES; i++) {
        const bn_case *bc = &bn_cases[i];
        int N = bc->N, C = bc->C, HW = bc->HW;
        size_t n = (size_t)N * C * HW;
        rng r;
        rng_seed(&r, 700 + i, 1);
        dual x = dual_normal(&r, n, bc->mean, bc->std);
        dual gamma = dual_uniform(&r, (size_t)C, 0.5f, 1.5f);
        dual beta = dual_uniform(&r, (size_t)C, -0.5f, 0.5f);
        dual rmean = dual_uniform(&r, (size_t)C, bc->mean - 0.5f, bc->mean + 0.5f);
        dual rvar = dual_uniform(&r, (size_t)C, 0.2f, 2.0f);
        dual y = dual_uniform(&r, n, -1.0f, 1.0f); /* overwritten */
        for (int s = CPU; s <= GPU; s++)
            be[s]->bn_fwd_infer(&ctx[s], N, C, HW, x.p[s], gamma.p[s], beta.p[s], y.p[s], rmean.p[s], rvar.p[s],
                                bc->eps);
        char what[96];
        snprintf(what, sizeof what, "bn_fwd_infer %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
        /* no reduction: a few roundings (and rsqrtf's 2 ulps) on values below
         * about 20 in magnitude, so 1e-5 relative and 1e-4 absolute */
        expect_close(what, &y, 1e-5, 1e-4);
        dual_free(&x);
        dual_free(&gamma);
        dual_free(&beta);
        dual_free(&rmean);
        dual_free(&rvar);
        dual_free(&y);
    }
}

static void bn_bwd_run(void) {
    for (size_t i = 0; i < N_BN_CASES; i++)
        for (int acc = 0; acc <= 1; acc++) {
            const bn_case *bc = &bn_cases[i];
            int N = bc->N, C = bc->C, HW = bc->HW;
            size_t n = (size_t)N * C * HW, M = (size_t)N * HW;
            rng r;
            rng_seed(&r, 800 + i, (uint64_t)acc);
            dual x = dual_normal(&r, n, bc->mean, bc->std);
            dual dy = dual_normal(&r, n, 0.0f, 1.0f);
            dual gamma = dual_uniform(&r, (size_t)C, 0.5f, 1.5f);
            dual beta = dual_uniform(&r, (size_t)C, -0.5f, 0.5f);
            dual dx = dual_uniform(&r, n, -1.0f, 1.0f);
            dual dgamma = dual_uniform(&r, (size_t)C, -1.0f, 1.0f), dbeta = dual_uniform(&r, (size_t)C, -1.0f, 1.0f);
            /* the saved statistics: the CPU forward's, given to both sides */
            dual y = dual_uniform(&r, n, 0.0f, 1.0f), rm = dual_uniform(&r, (size_t)C, 0.0f, 1.0f);
            dual rv = dual_uniform(&r, (size_t)C, 0.0f, 1.0f);
            dual smean = dual_uniform(&r, (size_t)C, 0.0f, 1.0f), sinv = dual_uniform(&r, (size_t)C, 0.0f, 1.0f);
            bn_shift_vecs((dual *const[]){&gamma, &dgamma, &dbeta, &smean, &sinv}, 5);
            be[CPU]->bn_fwd_train(&ctx[CPU], N, C, HW, x.p[CPU], gamma.p[CPU], beta.p[CPU], y.p[CPU], rm.p[CPU],
                                  rv.p[CPU], 0.1f, bc->eps, smean.p[CPU], sinv.p[CPU]);
            dual_sync_from_cpu(&smean);
            dual_sync_from_cpu(&sinv);
            float *hinv = download(CPU, sinv.p[CPU], (size_t)C);
            double a_max = 0.0; /* the largest gamma * invstd: dx's scale */
            float *hg = download(CPU, gamma.p[CPU], (size_t)C);
            for (int c = 0; c < C; c++) a_max = fmax(a_max, (double)hg[c] * hinv[c]);
            free(hinv);
            free(hg);

            for (int s = CPU; s <= GPU; s++)
                be[s]->bn_bwd(&ctx[s], N, C, HW, x.p[s], dy.p[s], gamma.p[s], smean.p[s], sinv.p[s], bc->eps, dx.p[s],
                              dgamma.p[s], dbeta.p[s], acc);
            char what[128];
            /* dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)): values
             * of order a_max built from two reductions over M */
            snprintf(what, sizeof what, "bn_bwd dx %s N%d C%d HW%d acc %d", cur_layout_name(), N, C, HW, acc);
            expect_close(what, &dx, BN_RTOL, BN_RTOL * a_max);
            /* sums over M of dy * xhat (|xhat| up to about 4) and of dy */
            snprintf(what, sizeof what, "bn_bwd dgamma %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
            expect_close(what, &dgamma, BN_RTOL, atol_of(&PREC_FP32, M, 4.0));
            snprintf(what, sizeof what, "bn_bwd dbeta %s N%d C%d HW%d", cur_layout_name(), N, C, HW);
            expect_close(what, &dbeta, BN_RTOL, atol_of(&PREC_FP32, M, 1.0));
            dual_free(&x);
            dual_free(&dy);
            dual_free(&gamma);
            dual_free(&beta);
            dual_free(&dx);
            dual_free(&dgamma);
            dual_free(&dbeta);
            dual_free(&y);
            dual_free(&rm);
            dual_free(&rv);
            dual_free(&smean);
            dual_free(&sinv);
        }
}

static void test_bn_fwd_train(void **state) {
    (void)state;
    NEED_GPU();
    bn_fwd_train_run();
}

static void test_bn_fwd_infer(void **state) {
    (void)state;
    NEED_GPU();
    bn_fwd_infer_run();
}

static void test_bn_bwd(void **state) {
    (void)state;
    NEED_GPU();
    bn_bwd_run();
}

static void test_bn_nhwc(void **state) {
    (void)state;
    NEED_GPU();
    set_layout_both(BACKEND_LAYOUT_NHWC);
    bn_fwd_train_run();
    bn_fwd_infer_run();
    bn_bwd_run();
    set_layout_both(BACKEND_LAYOUT_NCHW);
}

/* NHWC training batch norm with every per-channel vector at an 8-byte
 * offset, as a 10-class model's batch-norm parameters and their gradients
 * sit in the flat buffers: cuDNN's persistent kernels need them 32-byte
 * aligned, so the backend hands them aligned stand-ins and copies back
 * what they write (model/backend_cuda.c, bn_vec): the values must still be
 * the CPU's (a stand-in not copied back leaves dgamma, the running
 * statistics or the saved ones unchanged). */
static void test_bn_nhwc_unaligned(void **state) {
    (void)state;
    NEED_GPU();
    set_layout_both(BACKEND_LAYOUT_NHWC);
    bn_vec_shift = 2;
    bn_fwd_train_run();
    bn_bwd_run();
    bn_vec_shift = 0;
    set_layout_both(BACKEND_LAYOUT_NCHW);
}

/* ---------------------------------------------------------------- pooling */


static const tu_pool_case pool_cases[] = {
    {POOL_MODE_MAX, 2, 3, 16, 16, 3, 3, 2, 2, 1, 1, 0, 0, 0},          /* ResNet stem */
    {POOL_MODE_MAX, 2, 4, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0, 0},            /* VGG 2x2 on odd sizes */
    {POOL_MODE_MAX, 2, 40, 8, 10, 2, 2, 2, 2, 0, 0, 0, 0, 0},          /* VGG 2x2, tiling: backward by output */
    {POOL_MODE_MAX, 2, 3, 9, 6, 3, 2, 3, 2, 0, 0, 1, 0, 0},            /* tiling, rectangular, ceil_mode */
    {POOL_MODE_MAX, 1, 3, 15, 15, 3, 3, 2, 2, 0, 0, 0, 0, 0},          /* Inception 3x3/2, batch 1 */
    {POOL_MODE_MAX, 2, 3, 8, 9, 3, 3, 2, 2, 0, 0, 1, 0, 0},            /* ceil_mode */
    {POOL_MODE_MAX, 2, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 0, 0},            /* ceil_mode + pad */
    {POOL_MODE_MAX, 2, 2, 6, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0},            /* 3x3/1 pad 1: heavy overlap */
    {POOL_MODE_MAX, 1, 2, 20, 19, 17, 16, 1, 2, 0, 1, 0, 0, 0},         /* 272 positions: an int each, not a byte */
    {POOL_MODE_MAX, 1, 2, 34, 32, 17, 16, 17, 16, 0, 0, 0, 0, 0},       /* 272 positions, tiling: by output, ints */
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 3, 8, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0}, /* Inception branch pool */
    {POOL_MODE_AVG_EXCLUDE_PAD, 2, 3, 8, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0},
    {POOL_MODE_AVG_INCLUDE_PAD, 1, 2, 9, 8, 3, 3, 2, 2, 1, 1, 1, 0, 0}, /* ceil_mode + pad */
    {POOL_MODE_AVG_EXCLUDE_PAD, 1, 2, 9, 8, 3, 3, 2, 2, 1, 1, 1, 0, 0},
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 2, 8, 9, 3, 3, 2, 2, 0, 0, 1, 0, 0}, /* ceil_mode, window past the edge */
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 3, 17, 17, 5, 5, 3, 3, 0, 0, 0, 0, 0}, /* Inception aux 5x5/3 */
    {POOL_MODE_AVG_INCLUDE_PAD, 2, 4, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 0},   /* DenseNet transition */
    {POOL_MODE_ADAPTIVE_AVG, 2, 3, 5, 5, 0, 0, 0, 0, 0, 0, 0, 3, 3},     /* not divisible: overlapping windows */
    {POOL_MODE_ADAPTIVE_AVG, 3, 8, 7, 7, 0, 0, 0, 0, 0, 0, 0, 1, 1},     /* global average */
    {POOL_MODE_ADAPTIVE_AVG, 8, 64, 8, 8, 0, 0, 0, 0, 0, 0, 0, 1, 1},    /* ResNet-20's global average */
    {POOL_MODE_ADAPTIVE_AVG, 1, 2, 13, 10, 0, 0, 0, 0, 0, 0, 0, 6, 4},   /* uneven */
    {POOL_MODE_ADAPTIVE_AVG, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 5, 7},     /* output larger than input */
    {POOL_MODE_ADAPTIVE_AVG, 2, 2, 14, 14, 0, 0, 0, 0, 0, 0, 0, 7, 7},   /* VGG's 7x7, divisible */
};


static void pool_label(char *buf, size_t len, const char *op, const pool_params *p, int accumulate,
                       const char *input) {
    static const char *names[] = {"max", "avg incl pad", "avg excl pad", "adaptive avg"};
    snprintf(buf, len, "%s %s %s N%d C%d %dx%d win %dx%d/%dx%d pad %dx%d ceil %d -> %dx%d acc %d, %s", op,
             names[p->mode], cur_layout_name(), p->N, p->C, p->H, p->W, p->R, p->S, p->stride_h, p->stride_w, p->pad_h,
             p->pad_w, p->ceil_mode, p->P, p->Q, accumulate, input);
}

/* Averages of at most 64 values in [-1, 1): float rounding is below 1e-6,
 * while a wrong divisor or window moves a value by a whole term over the
 * count (1e-2 or more). */
#define POOL_AVG_RTOL 1e-5
#define POOL_AVG_ATOL 1e-5

/* Forward and backward (accumulate 0 and 1) of one pooling geometry on input x
 * (given as host floats). Max pooling selects values and its backward adds
 * integer dy values, so both must be exactly equal: the GPU must pick the same
 * (first) maximum as the CPU, whatever the order it sums overlapping windows in.
 * The GPU's side runs twice: as a training forward handed a fwd_keep (max
 * pooling must keep its maxima's positions there, pool_keep_bytes, and mark
 * it written; the backward reads them), then with that keep marked unwritten
 * and filled with 0xff bytes, which its backward must not read. */
static void pool_case_run(const pool_params *p, const float *xh, const char *input, uint64_t seed) {
    size_t nx = (size_t)p->N * p->C * p->H * p->W, ny = (size_t)p->N * p->C * p->P * p->Q;
    int is_max = p->mode == POOL_MODE_MAX;
    double rtol = is_max ? 0.0 : POOL_AVG_RTOL, atol = is_max ? 0.0 : POOL_AVG_ATOL;
    fwd_keep keep = {NULL, backend_pool_keep_bytes(be[GPU], &ctx[GPU], p), 0};
    if (is_max) assert_true(keep.bytes >= ny); /* a byte or more a position */
    else assert_int_equal(keep.bytes, 0);
    unsigned char *junk = NULL;
    if (keep.bytes) {
        keep.p = be[GPU]->alloc(keep.bytes);
        junk = malloc(keep.bytes);
        memset(junk, 0xff, keep.bytes);
    }
    for (int kept = 1; kept >= 0; kept--)
        for (int acc = 0; acc <= 1; acc++) {
            rng r;
            rng_seed(&r, seed, (uint64_t)acc);
            dual x = dual_of(xh, nx);
            dual y = dual_uniform(&r, ny, -1.0f, 1.0f); /* overwritten */
            dual dy = is_max ? dual_ints(&r, ny, -4, 4) : dual_uniform(&r, ny, -1.0f, 1.0f);
            dual dx = is_max ? dual_ints(&r, nx, -4, 4) : dual_uniform(&r, nx, -1.0f, 1.0f);
            char what[224];
            be[CPU]->pool_fwd(&ctx[CPU], p, x.p[CPU], y.p[CPU], NULL);
            if (kept) {
                keep.written = 7; /* backend_pool_fwd_train clears it */
                backend_pool_fwd_train(be[GPU], &ctx[GPU], p, x.p[GPU], y.p[GPU], &keep);
                if (keep.written != is_max)
                    fail_msg("%s: pool_fwd %s its fwd_keep written", input, keep.written ? "marked" : "did not mark");
            } else {
                be[GPU]->pool_fwd(&ctx[GPU], p, x.p[GPU], y.p[GPU], NULL);
                if (keep.p) be[GPU]->upload(keep.p, junk, keep.bytes);
                keep.written = 0;
            }
            pool_label(what, sizeof what, kept ? "pool_fwd keeping" : "pool_fwd", p, 0, input);
            expect_close(what, &y, rtol, atol);
            /* each side's backward gets its own forward output, as a layer passes it */
            be[CPU]->pool_bwd(&ctx[CPU], p, x.p[CPU], y.p[CPU], dy.p[CPU], dx.p[CPU], acc, NULL);
            be[GPU]->pool_bwd(&ctx[GPU], p, x.p[GPU], y.p[GPU], dy.p[GPU], dx.p[GPU], acc, &keep);
            pool_label(what, sizeof what, kept ? "pool_bwd from what was kept" : "pool_bwd with nothing kept", p, acc,
                       input);
            expect_close(what, &dx, rtol, atol);
            dual_free(&x);
            dual_free(&y);
            dual_free(&dy);
            dual_free(&dx);
        }
    if (keep.p) be[GPU]->free(keep.p);
    free(junk);
}

/* In the current layout: in NHWC the GPU's kernels index the same windows
 * through channel-innermost strides, so the results are still exactly the
 * CPU's for max pooling (and the same sums in the same order for averages). */
static void pool_run_all(void) {
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
        pool_params p = tu_pool_params(&pool_cases[i]);
        size_t nx = (size_t)p.N * p.C * p.H * p.W;
        rng r;
        rng_seed(&r, 900 + i, 1);
        float *xh = tu_alloc_f(nx);
        fill_uniform(&r, xh, nx, -1.0f, 1.0f);
        pool_case_run(&p, xh, "uniform input", 950 + i);
        free(xh);
    }
}

static void test_pool_fwd_bwd(void **state) {
    (void)state;
    NEED_GPU();
    pool_run_all();
}

/* Max pooling with ties: the gradient goes to the first maximum of each
 * window, scanning rows then columns (backend.h), and padding is never
 * selected, so a plane of -1 must pool to -1 (not to a padded 0) with the
 * gradient on the first real element of each window. */
static void pool_ties_run(void) {
    static const tu_pool_case cases[] = {
        {POOL_MODE_MAX, 2, 3, 8, 8, 3, 3, 2, 2, 1, 1, 0, 0, 0},   /* ResNet stem geometry */
        {POOL_MODE_MAX, 2, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 0, 0},   /* ceil_mode + pad */
        {POOL_MODE_MAX, 1, 2, 6, 5, 2, 2, 2, 2, 0, 0, 1, 0, 0},   /* ceil_mode: clipped last windows */
        {POOL_MODE_MAX, 2, 2, 6, 6, 3, 3, 1, 1, 1, 1, 0, 0, 0},   /* stride 1: every value in 9 windows */
        {POOL_MODE_MAX, 1, 3, 15, 15, 3, 3, 2, 2, 0, 0, 0, 0, 0}, /* Inception 3x3/2 */
        {POOL_MODE_MAX, 3, 2, 9, 8, 3, 2, 2, 1, 1, 1, 1, 0, 0},   /* rectangular window, mixed strides */
        {POOL_MODE_MAX, 2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 0},   /* VGG 2x2, tiling: backward by output */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pool_params p = tu_pool_params(&cases[i]);
        size_t nx = (size_t)p.N * p.C * p.H * p.W;
        float *xh = tu_alloc_f(nx);
        rng r;
        rng_seed(&r, 1000 + i, 1);
        for (size_t k = 0; k < nx; k++) xh[k] = -1.0f;
        pool_case_run(&p, xh, "constant -1 input", 1100 + i);
        fill_ints(&r, xh, nx, -2, 2);
        pool_case_run(&p, xh, "integers in [-2, 2]", 1200 + i);
        fill_ints(&r, xh, nx, 0, 1);
        pool_case_run(&p, xh, "integers in [0, 1]", 1300 + i);
        free(xh);
    }
}

static void test_max_pool_ties_first_max(void **state) {
    (void)state;
    NEED_GPU();
    pool_ties_run();
}

static void test_pool_nhwc(void **state) {
    (void)state;
    NEED_GPU();
    set_layout_both(BACKEND_LAYOUT_NHWC);
    pool_run_all();
    pool_ties_run();
    set_layout_both(BACKEND_LAYOUT_NCHW);
}

/* ---------------------------------------------------------------- elementwise */

/* Sizes include 1 and odd counts (the tail of a vectorised kernel); each op
 * also runs at an offset of one float (a slice of a larger buffer, as the
 * optimizer's per-tensor slices are, not 16-byte aligned). Buffers have one
 * guard value on each side of the range the op is given; the comparison
 * covers them, so a write outside the range is caught. */
static const size_t elem_sizes[] = {1, 3, 1000, 100003};
#define N_ELEM_SIZES (sizeof elem_sizes / sizeof elem_sizes[0])

static void test_relu(void **state) {
    (void)state;
    NEED_GPU();
    for (size_t i = 0; i < N_ELEM_SIZES; i++)
        for (int off = 0; off <= 1; off++)
            for (int acc = 0; acc <= 1; acc++) {
                size_t n = elem_sizes[i], total = n + 2;
                rng r;
                rng_seed(&r, 1400 + i, (uint64_t)(2 * off + acc));
                float *xh = tu_alloc_f(total);
                fill_uniform(&r, xh, total, -1.0f, 1.0f);
                for (size_t k = 0; k < total; k += 7) xh[k] = 0.0f; /* y > 0 is false there */
                dual x = dual_of(xh, total);
                free(xh);
                dual y = dual_uniform(&r, total, -1.0f, 1.0f);
                dual dy = dual_uniform(&r, total, -1.0f, 1.0f);
                dual dx = dual_uniform(&r, total, -1.0f, 1.0f);
                char what[96];
                for (int s = CPU; s <= GPU; s++) be[s]->relu_fwd(&tu_fp32, n, x.p[s] + off, y.p[s] + off);
                snprintf(what, sizeof what, "relu_fwd n %zu offset %d", n, off);
                expect_close(what, &y, 0.0, 0.0); /* a selection: exact */
                for (int s = CPU; s <= GPU; s++) be[s]->relu_bwd(&tu_fp32, n, y.p[s] + off, dy.p[s] + off,
                                                                 dx.p[s] + off, acc);
                snprintf(what, sizeof what, "relu_bwd n %zu offset %d acc %d", n, off, acc);
                expect_close(what, &dx, 0.0, 0.0); /* a selection, plus one addition when acc: exact */
                dual_free(&x);
                dual_free(&y);
                dual_free(&dy);
                dual_free(&dx);
            }
}

static void test_add_axpy_mul(void **state) {
    (void)state;
    NEED_GPU();
    const float alpha = -0.75f;
    for (size_t i = 0; i < N_ELEM_SIZES; i++)
        for (int off = 0; off <= 1; off++)
            for (int acc = 0; acc <= 1; acc++) {
                size_t n = elem_sizes[i], total = n + 2;
                rng r;
                rng_seed(&r, 1500 + i, (uint64_t)(2 * off + acc));
                dual a = dual_uniform(&r, total, -2.0f, 2.0f), b = dual_uniform(&r, total, -2.0f, 2.0f);
                dual y = dual_uniform(&r, total, -2.0f, 2.0f);
                char what[96];
                if (acc == 0) { /* add has no accumulate flag */
                    for (int s = CPU; s <= GPU; s++) be[s]->add(&tu_fp32, n, a.p[s] + off, b.p[s] + off, y.p[s] + off);
                    snprintf(what, sizeof what, "add n %zu offset %d", n, off);
                    expect_close(what, &y, 0.0, 0.0); /* one rounding: exact */
                }
                for (int s = CPU; s <= GPU; s++) be[s]->axpy(n, alpha, a.p[s] + off, y.p[s] + off, acc);
                snprintf(what, sizeof what, "axpy n %zu offset %d acc %d", n, off, acc);
                /* a product, then a sum, each rounded alike on both sides: exact */
                expect_close(what, &y, 0.0, 0.0);
                for (int s = CPU; s <= GPU; s++) be[s]->mul(&tu_fp32, n, a.p[s] + off, b.p[s] + off, y.p[s] + off, acc);
                snprintf(what, sizeof what, "mul n %zu offset %d acc %d", n, off, acc);
                expect_close(what, &y, 0.0, 0.0);
                dual_free(&a);
                dual_free(&b);
                dual_free(&y);
            }
}

/* upload of a few bytes (a step's rate and dropout seed) goes as a kernel's
 * argument: every size up to that path's limit and just past it, at every
 * byte offset within a word, lands where it should and nowhere else; and it
 * is in stream order: a copy queued between two uploads to the same place
 * sees the first, and the host's buffer may change at once. */
static void test_upload_small(void **state) {
    (void)state;
    NEED_GPU();
    const backend *g = be[GPU];
    enum { CAP = 96 };
    unsigned char *dev = g->alloc(CAP), *snap = g->alloc(CAP);
    unsigned char src[CAP], got[CAP], want[CAP];
    for (size_t n = 1; n <= 65; n++)
        for (size_t off = 0; off < 4; off++) {
            memset(want, 0xA5, CAP);
            g->upload(dev, want, CAP); /* a large upload: the other path */
            for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(n * 7 + i * 13 + off);
            g->upload(dev + off, src, n);
            memcpy(want + off, src, n);
            memset(src, 0, sizeof src); /* the host's bytes may change once upload returns */
            g->download(got, dev, CAP);
            if (memcmp(got, want, CAP) != 0) {
                size_t i = 0;
                while (got[i] == want[i]) i++;
                fail_msg("upload of %zu bytes at offset %zu: byte %zu is 0x%02x, expected 0x%02x", n, off, i, got[i],
                         want[i]);
            }
        }
    float first = 0.25f, second = 0.5f, seen = 0, now = 0;
    g->upload(dev, &first, sizeof first);
    g->copy(snap, dev, sizeof first);
    g->upload(dev, &second, sizeof second);
    g->download(&seen, snap, sizeof seen);
    g->download(&now, dev, sizeof now);
    if (seen != first || now != second)
        fail_msg("upload, copy, upload: the copy saw %g (expected %g), the value is %g (expected %g)", (double)seen,
                 (double)first, (double)now, (double)second);
    g->free(dev);
    g->free(snap);
}

/* The mask comes from the stateless rng_hash_uniform(seed, i), so a GPU must
 * draw exactly the CPU's mask: the same elements dropped and the same kept
 * value 1/(1-p), bit for bit; and so must dropout_mask_at, whose step seed
 * a kernel reads from a device word (a recorded step's masks). Seeds with
 * high bits set catch a kernel that truncates the seed or the counter to 32
 * bits. */
static void test_dropout_mask_bitwise(void **state) {
    (void)state;
    NEED_GPU();
    static const float ps[] = {0.0f, 0.1f, 0.3f, 0.5f, 0.9f};
    static const uint64_t seeds[] = {1, 0x9E3779B97F4A7C15ULL, 0xFFFFFFFF00000001ULL};
    static const size_t sizes[] = {1, 1001, 300007};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++)
            for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
                size_t n = sizes[z];
                rng r;
                rng_seed(&r, 1600 + i, k);
                dual mask = dual_uniform(&r, n, 2.0f, 3.0f); /* overwritten */
                for (int s = CPU; s <= GPU; s++) be[s]->dropout_mask(n, ps[i], seeds[k], mask.p[s]);
                float *c = download(CPU, mask.p[CPU], n), *g = download(GPU, mask.p[GPU], n);
                size_t differ = 0, first = 0;
                for (size_t j = 0; j < n; j++) {
                    if ((c[j] == 0.0f) == (g[j] == 0.0f)) continue;
                    if (differ == 0) first = j;
                    differ++;
                }
                if (differ)
                    fail_msg("dropout_mask p %g seed 0x%llx n %zu: %zu elements dropped on one side only, first "
                             "[%zu]: cpu %g gpu %g (a different hash or counter)",
                             (double)ps[i], (unsigned long long)seeds[k], n, differ, first, (double)c[first],
                             (double)g[first]);
                char what[96];
                snprintf(what, sizeof what, "dropout_mask p %g seed 0x%llx n %zu (cpu vs gpu)", (double)ps[i],
                         (unsigned long long)seeds[k], n);
                tu_assert_bitwise_equal_f(what, c, g, n);
                free(c);
                free(g);
                /* dropout_mask_at: the step seed read from a device word (a recorded step's) */
                for (int s = CPU; s <= GPU; s++) {
                    uint64_t *word = be[s]->alloc(sizeof *word);
                    be[s]->upload(word, &seeds[k], sizeof seeds[k]);
                    be[s]->dropout_mask_at(n, ps[i], word, 3 + k, mask.p[s]);
                    be[s]->sync();
                    be[s]->free(word);
                }
                c = download(CPU, mask.p[CPU], n);
                g = download(GPU, mask.p[GPU], n);
                snprintf(what, sizeof what, "dropout_mask_at p %g step 0x%llx n %zu (cpu vs gpu)", (double)ps[i],
                         (unsigned long long)seeds[k], n);
                tu_assert_bitwise_equal_f(what, c, g, n);
                free(c);
                free(g);
                dual_free(&mask);
            }
}

/* In the current layout: in NHWC each pixel's channel slice is copied
 * (dst[(n*HW + i)*dst_C + dst_off + c] (+)= src[(n*HW + i)*src_C + src_off + c]). */
static void channel_copy_run(void) {
    for (size_t i = 0; i < tu_n_channel_copy_cases; i++)
        for (int acc = 0; acc <= 1; acc++) {
            const int *c = tu_channel_copy_cases[i];
            int N = c[0], C = c[1], HW = c[2], src_C = c[3], src_off = c[4], dst_C = c[5], dst_off = c[6];
            rng r;
            rng_seed(&r, 1700 + i, (uint64_t)acc);
            dual src = dual_uniform(&r, (size_t)N * src_C * HW, -1.0f, 1.0f);
            dual dst = dual_uniform(&r, (size_t)N * dst_C * HW, -1.0f, 1.0f); /* outside the slice: kept */
            for (int s = CPU; s <= GPU; s++)
                be[s]->channel_copy(&ctx[s], N, C, HW, src.p[s], src_C, src_off, dst.p[s], dst_C, dst_off, acc);
            char what[128];
            snprintf(what, sizeof what, "channel_copy %s N%d C%d HW%d src %d+%d dst %d+%d acc %d", cur_layout_name(),
                     N, C, HW, src_C, src_off, dst_C, dst_off, acc);
            expect_close(what, &dst, 0.0, 0.0); /* a copy, or one addition: exact */
            dual_free(&src);
            dual_free(&dst);
        }
}

static void test_channel_copy(void **state) {
    (void)state;
    NEED_GPU();
    channel_copy_run();
}

static void test_channel_copy_nhwc(void **state) {
    (void)state;
    NEED_GPU();
    set_layout_both(BACKEND_LAYOUT_NHWC);
    channel_copy_run();
    set_layout_both(BACKEND_LAYOUT_NCHW);
}

/* ---------------------------------------------------------------- layout transpose */

/* convert_layout (NCHW <-> NHWC) on the GPU against a host loop, both directions, with and
 * without accumulate: a permutation (and one float addition when
 * accumulating, rounded alike on both sides), so the result must be exact.
 * Sizes that are no multiple of the kernel's 32 x 32 tiles in either
 * dimension, a single pixel (HW = 1: a copy), a single channel, more images
 * than a grid's z dimension takes (65535), more channels than its y
 * dimension takes in tiles (65535 * 32), and more pixels than one tile row.
 * The destination has a guard value on each side, compared too, so a write
 * outside the N*C*HW values is caught. The op takes no context: its layout
 * is the one it is given. */
static void test_convert_layout(void **state) {
    (void)state;
    NEED_GPU();
    static const int shapes[][3] = {{2, 3, 49},  {3, 67, 33},    {4, 5, 1},      {1, 1, 7},   {5, 1, 1},
                                    {2, 64, 64}, {1, 33, 1057},  {70000, 2, 3},  {1, 2100000, 1}, {1, 3, 700001}};
    const backend *g = be[GPU];
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int to_nhwc = 0; to_nhwc <= 1; to_nhwc++)
            for (int acc = 0; acc <= 1; acc++) {
                const int N = shapes[k][0], C = shapes[k][1], HW = shapes[k][2];
                const size_t n = (size_t)N * C * HW;
                rng r;
                rng_seed(&r, 2200 + k, (uint64_t)(2 * to_nhwc + acc));
                float *src = tu_alloc_f(n), *dst = tu_alloc_f(n + 2), *want = tu_alloc_f(n + 2);
                fill_uniform(&r, src, n, -1.0f, 1.0f);
                fill_uniform(&r, dst, n + 2, -1.0f, 1.0f); /* old values (and the guards) */
                memcpy(want, dst, (n + 2) * sizeof(float));
                for (int b = 0; b < N; b++)
                    for (int c = 0; c < C; c++)
                        for (int i = 0; i < HW; i++) {
                            size_t nchw = ((size_t)b * C + c) * HW + i, nhwc = ((size_t)b * HW + i) * C + c;
                            size_t from = to_nhwc ? nchw : nhwc, to = 1 + (to_nhwc ? nhwc : nchw);
                            want[to] = acc ? want[to] + src[from] : src[from];
                        }
                float *src_d = g->alloc(n * sizeof(float)), *dst_d = g->alloc((n + 2) * sizeof(float));
                g->upload(src_d, src, n * sizeof(float));
                g->upload(dst_d, dst, (n + 2) * sizeof(float));
                g->convert_layout(N, C, HW, src_d, BACKEND_DTYPE_FP32, dst_d + 1, BACKEND_DTYPE_FP32,
                                  BACKEND_LAYOUT_NHWC,
                                  to_nhwc, acc);
                float *got = download(GPU, dst_d, n + 2), *src_back = download(GPU, src_d, n);
                char what[128];
                snprintf(what, sizeof what, "convert_layout N%d C%d HW%d to %s acc %d (guards at [0] and [%zu])", N,
                         C, HW, to_nhwc ? "nhwc" : "nchw", acc, n + 1);
                tu_assert_bitwise_equal_f(what, want, got, n + 2);
                snprintf(what, sizeof what, "convert_layout N%d C%d HW%d to %s acc %d: src unchanged", N, C, HW,
                         to_nhwc ? "nhwc" : "nchw", acc);
                tu_assert_bitwise_equal_f(what, src, src_back, n);
                g->free(src_d);
                g->free(dst_d);
                free(src);
                free(dst);
                free(want);
                free(got);
                free(src_back);
            }
}

/* ---------------------------------------------------------------- loss */

static void test_softmax_xent(void **state) {
    (void)state;
    NEED_GPU();
    static const struct {
        int N, K;
        float std, smoothing;
    } cases[] = {
        {1, 10, 1.0f, 0.0f},  {7, 1000, 3.0f, 0.1f}, {32, 3, 2.0f, 0.0f}, {32, 3, 2.0f, 0.1f},
        {5, 17, 30.0f, 0.1f}, {9, 2, 1.0f, 0.5f},    {8, 10, 1.0f, 0.1f}, {8, 10, 1.0f, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int N = cases[i].N, K = cases[i].K;
        rng r;
        rng_seed(&r, 1800 + i, 1);
        /* std 30: exp overflows without the max shift */
        dual logits = dual_normal(&r, (size_t)N * K, 0.0f, cases[i].std);
        dual dlogits = dual_uniform(&r, (size_t)N * K, -1.0f, 1.0f); /* overwritten */
        dual loss = dual_uniform(&r, 1, 5.0f, 6.0f);                  /* overwritten */
        int *labels = cnt_malloc((size_t)N * sizeof(int));
        tu_fill_labels(&r, labels, (size_t)N, K);
        int *dlabels[2];
        for (int s = CPU; s <= GPU; s++) {
            dlabels[s] = be[s]->alloc((size_t)N * sizeof(int));
            be[s]->upload(dlabels[s], labels, (size_t)N * sizeof(int));
        }
        for (int s = CPU; s <= GPU; s++)
            be[s]->softmax_xent(N, K, logits.p[s], dlabels[s], cases[i].smoothing, loss.p[s], dlogits.p[s]);
        char what[112];
        snprintf(what, sizeof what, "softmax_xent loss N%d K%d std %g smoothing %g", N, K, (double)cases[i].std,
                 (double)cases[i].smoothing);
        /* the mean of per-row losses (up to ~100 at std 30) built from logs
         * and sums of K exponentials: relative 1e-4 */
        expect_close(what, &loss, 1e-4, 1e-4);
        snprintf(what, sizeof what, "softmax_xent dlogits N%d K%d std %g smoothing %g", N, K,
                 (double)cases[i].std, (double)cases[i].smoothing);
        /* (softmax - target) / N: the softmax divides by a float sum of K
         * exponentials (relative error ~1e-6, up to K ulps); 2e-5 / N still
         * sees the smoothing term s/K / N even at K = 1000 */
        expect_close(what, &dlogits, 1e-4, 2e-5 / N);
        free(labels);
        for (int s = CPU; s <= GPU; s++) be[s]->free(dlabels[s]);
        dual_free(&logits);
        dual_free(&dlogits);
        dual_free(&loss);
    }
}

/* ---------------------------------------------------------------- optimizer */

static void test_sgd_update(void **state) {
    (void)state;
    NEED_GPU();
    static const struct {
        float lr, momentum, wd;
        int nesterov;
        float grad_scale;
        int null_buf; /* momentum 0 only: pass NULL as the buffer, as train/optim.c does */
    } cases[] = {
        {0.1f, 0.9f, 1e-4f, 0, 1.0f, 0},    {0.1f, 0.9f, 1e-4f, 1, 1.0f, 0},     {0.05f, 0.0f, 5e-4f, 0, 1.0f, 1},
        {0.1f, 0.0f, 0.1f, 1, 1.0f, 0},     {0.2f, 0.9f, 0.0f, 1, 0.25f, 0},     {0.01f, 0.5f, 0.1f, 0, 0.125f, 0},
        {0.1f, 0.0f, 0.0f, 0, 0.5f, 1},
    };
    const size_t n = 100003, total = n + 2;
    const int off = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rng r;
        rng_seed(&r, 1900 + i, 1);
        dual param = dual_uniform(&r, total, -1.0f, 1.0f);
        dual buf = dual_uniform(&r, total, -0.5f, 0.5f); /* as left by earlier steps */
        for (int step = 0; step < 3; step++) {
            dual grad = dual_normal(&r, total, 0.0f, 1.0f);
            /* both sides start each step from the CPU's state, so differences do not compound */
            dual_sync_from_cpu(&param);
            dual_sync_from_cpu(&buf);
            float *old = download(CPU, param.p[CPU], total);
            /* the GPU reads the rate from a device float (lr_at), its lr argument a NaN, in every other case;
             * step 1 scales the step by a trust ratio (scale_at: LARS) on both sides */
            float *lr_at = NULL, *scale_at[2] = {NULL, NULL};
            if (i % 2) {
                lr_at = be[GPU]->alloc(sizeof(float));
                be[GPU]->upload(lr_at, &cases[i].lr, sizeof(float));
            }
            if (step == 1) {
                const float trust = 0.37f;
                for (int s = CPU; s <= GPU; s++) {
                    scale_at[s] = be[s]->alloc(sizeof(float));
                    be[s]->upload(scale_at[s], &trust, sizeof trust);
                }
            }
            for (int s = CPU; s <= GPU; s++)
                be[s]->sgd_update(n, param.p[s] + off, grad.p[s] + off, cases[i].null_buf ? NULL : buf.p[s] + off,
                                  s == GPU && lr_at ? NAN : cases[i].lr, cases[i].momentum, cases[i].wd,
                                  cases[i].nesterov, cases[i].grad_scale, s == GPU ? lr_at : NULL, scale_at[s]);
            if (lr_at) be[GPU]->free(lr_at);
            for (int s = CPU; s <= GPU; s++) be[s]->free(scale_at[s]);
            /* The same operations rounded alike on both sides (see the top of
             * this file): the new parameters must be the CPU's bit for bit.
             * The change is compared first, for a readable message. */
            float *c = download(CPU, param.p[CPU], total), *g = download(GPU, param.p[GPU], total);
            double *want = tu_alloc(total), *got = tu_alloc(total);
            for (size_t j = 0; j < total; j++) {
                want[j] = (double)c[j] - old[j];
                got[j] = (double)g[j] - old[j];
            }
            char what[160];
            snprintf(what, sizeof what, "sgd param change lr %g momentum %g wd %g nesterov %d scale %g%s step %d",
                     (double)cases[i].lr, (double)cases[i].momentum, (double)cases[i].wd, cases[i].nesterov,
                     (double)cases[i].grad_scale, cases[i].null_buf ? " NULL buffer" : "", step);
            tu_assert_close(what, want, got, total, 0.0, 0.0);
            expect_close(what, &param, 0.0, 0.0);
            snprintf(what, sizeof what, "sgd momentum_buf momentum %g nesterov %d step %d",
                     (double)cases[i].momentum, cases[i].nesterov, step);
            expect_close(what, &buf, 0.0, 0.0);
            free(old);
            free(c);
            free(g);
            free(want);
            free(got);
            dual_free(&grad);
        }
        dual_free(&param);
        dual_free(&buf);
    }
}

/* LARS's two ops: sumsq2's sums (both sides accumulate in double, in
 * different orders, then round to float: within 1e-6), with sizes around
 * the GPU's blocks (64 K values each, at most 512) and an offset pointer;
 * the GPU's sums bit for bit the same on a second call (every rank must
 * compute the same trust ratios); lars_trust from the same sums, with the
 * zero cases that give 1. */
static void test_lars_ops(void **state) {
    (void)state;
    NEED_GPU();
    static const size_t sizes[] = {0, 1, 1000, 65536, 65537, 3000001, 40000003};
    float *out[2];
    for (int s = CPU; s <= GPU; s++) out[s] = be[s]->alloc(8 * sizeof(float));
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t n = sizes[t];
        rng r;
        rng_seed(&r, 2400 + t, 1);
        dual a = dual_normal(&r, n + 1, 0.0f, 1.0f), b = dual_uniform(&r, n + 1, -2.0f, 2.0f);
        for (int s = CPU; s <= GPU; s++) be[s]->sumsq2(n, a.p[s] + 1, b.p[s] + 1, out[s]);
        be[GPU]->sumsq2(n, a.p[GPU] + 1, b.p[GPU] + 1, out[GPU] + 2);
        float *c = download(CPU, out[CPU], 2), *g = download(GPU, out[GPU], 4);
        char what[64];
        snprintf(what, sizeof what, "sumsq2 n %zu", n);
        double want[2] = {c[0], c[1]};
        tu_assert_close_f(what, want, g, 2, 1e-6, 0.0);
        snprintf(what, sizeof what, "sumsq2 n %zu, called twice", n);
        tu_assert_bitwise_equal_f(what, g, g + 2, 2);
        free(c);
        free(g);
        dual_free(&a);
        dual_free(&b);
    }
    const float sums[8] = {4.0f, 9.0f, 0.0f, 1.0f, 2.5f, 0.0f, 3e3f, 1e-8f};
    float *trust[2];
    for (int s = CPU; s <= GPU; s++) {
        trust[s] = be[s]->alloc(4 * sizeof(float));
        be[s]->upload(out[s], sums, sizeof sums);
        be[s]->lars_trust(4, out[s], 0.001f, 5e-4f, 0.125f, trust[s]);
    }
    float *c = download(CPU, trust[CPU], 4), *g = download(GPU, trust[GPU], 4);
    tu_assert_bitwise_equal_f("lars_trust", c, g, 4);
    assert_true(g[1] == 1.0f && g[2] == 1.0f);
    free(c);
    free(g);
    for (int s = CPU; s <= GPU; s++) {
        be[s]->free(trust[s]);
        be[s]->free(out[s]);
    }
}

/* PowerSGD's two device ops against the CPU's: Gram-Schmidt on P (rows x r)
 * for sizes around a block's 256 threads, with a column of zeros (which
 * stays 0), within 1e-4 and orthonormal (P^T P = I on the other columns;
 * the sums' orders differ, so a column that depends on the ones before,
 * whose remainder is rounding noise, could not be compared); the redraw
 * refilling only Q's all-zero rows, with the CPU's normals (within 1e-5:
 * logf and cosf on either side) and nothing else changed. */
static void test_lowrank_ops(void **state) {
    (void)state;
    NEED_GPU();
    static const int shapes[][2] = {{1, 1}, {7, 3}, {256, 2}, {257, 4}, {4096, 8}, {100, 32}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int rows = shapes[t][0], r = shapes[t][1];
        rng g;
        rng_seed(&g, 2500 + t, 1);
        float *h = tu_alloc_f((size_t)rows * r);
        fill_normal(&g, h, (size_t)rows * r, 0.0f, 1.0f);
        if (r >= 3)
            for (int i = 0; i < rows; i++) h[(size_t)i * r + 2] = 0.0f; /* a column of zeros */
        dual P = dual_of(h, (size_t)rows * r);
        for (int s = CPU; s <= GPU; s++) be[s]->lowrank_orthonormalise(rows, r, P.p[s]);
        float *c = download(CPU, P.p[CPU], (size_t)rows * r), *gp = download(GPU, P.p[GPU], (size_t)rows * r);
        char what[80];
        snprintf(what, sizeof what, "lowrank_orthonormalise %d x %d", rows, r);
        double *want = malloc((size_t)rows * r * sizeof(double));
        for (size_t i = 0; i < (size_t)rows * r; i++) want[i] = c[i];
        tu_assert_close_f(what, want, gp, (size_t)rows * r, 1e-4, 1e-4);
        if (r >= 3)
            for (int i = 0; i < rows; i++) assert_true(gp[(size_t)i * r + 2] == 0.0f);
        for (int a = 0; a < r; a++) /* orthonormal where the column is not 0 */
            for (int b = 0; b <= a; b++) {
                double d = 0.0;
                for (int i = 0; i < rows; i++) d += (double)gp[(size_t)i * r + a] * gp[(size_t)i * r + b];
                if (r >= 3 && (a == 2 || b == 2)) continue;
                assert_true(fabs(d - (a == b ? 1.0 : 0.0)) < 1e-4);
            }
        free(want);
        free(c);
        free(gp);
        free(h);
        dual_free(&P);
    }
    enum { R = 4, COLS = 1000 };
    float q[R * COLS];
    rng g;
    rng_seed(&g, 2600, 1);
    fill_normal(&g, q, R * COLS, 0.0f, 1.0f);
    for (int j = 0; j < COLS; j++) q[1 * COLS + j] = q[3 * COLS + j] = 0.0f; /* rows 1 and 3 zero */
    q[3 * COLS + 999] = -0.0f; /* still zero */
    dual Q = dual_of(q, R * COLS);
    for (int s = CPU; s <= GPU; s++) be[s]->lowrank_redraw(R, COLS, Q.p[s], 12345);
    float *c = download(CPU, Q.p[CPU], R * COLS), *gq = download(GPU, Q.p[GPU], R * COLS);
    double *want = malloc(R * COLS * sizeof(double));
    for (int i = 0; i < R * COLS; i++) want[i] = c[i];
    tu_assert_close_f("lowrank_redraw", want, gq, R * COLS, 1e-5, 1e-5);
    tu_assert_bitwise_equal_f("lowrank_redraw: rows with values untouched", q, gq, COLS);
    tu_assert_bitwise_equal_f("lowrank_redraw: rows with values untouched", q + 2 * COLS, gq + 2 * COLS, COLS);
    int filled = 0;
    for (int j = 0; j < COLS; j++) filled += gq[COLS + j] != 0.0f && gq[3 * COLS + j] != 0.0f;
    assert_true(filled > COLS - 5);
    free(want);
    free(c);
    free(gq);
    dual_free(&Q);
}

/* ---------------------------------------------------------------- ordering */

typedef struct transfer_job {
    void *host;
    void *dev;
    size_t bytes;
    void *fence; /* NULL: upload_sync; else download_fenced */
} transfer_job;

static void *transfer_thread(void *arg) {
    transfer_job *j = arg;
    if (j->fence)
        be[GPU]->download_fenced(j->host, j->dev, j->bytes, j->fence);
    else
        be[GPU]->upload_sync(j->dev, j->host, j->bytes);
    return NULL;
}

/* Runs job on a new thread and waits for it (the reducer's communication
 * thread calls these while the training thread keeps issuing work). */
static void run_on_thread(transfer_job *job) {
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, transfer_thread, job), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

static void expect_multiple(const char *what, const float *got, const float *x, float k, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != k * x[i])
            fail_msg("%s: [%zu] = %g, expected %g * %g = %g", what, i, (double)got[i], (double)k, (double)x[i],
                     (double)(k * x[i]));
}

/* Small integers keep every sum below exact, so results compare with ==. */
static void test_fences_and_sync_transfers(void **state) {
    (void)state;
    NEED_GPU();
    const backend *g = be[GPU];
    assert_non_null(g->native_stream()); /* NCCL is given this stream: a GPU backend has its own */
    const size_t n = (size_t)1 << 22;
    const size_t bytes = n * sizeof(float);
    rng r;
    rng_seed(&r, 2000, 1);
    float *xh = tu_alloc_f(n), *out = tu_alloc_f(n), *yh = tu_alloc_f(n);
    fill_ints(&r, xh, n, -3, 3);
    fill_ints(&r, yh, n, -3, 3);
    float *x = g->alloc(bytes), *y = g->alloc(bytes), *z = g->alloc(bytes), *w = g->alloc(bytes);
    g->upload(x, xh, bytes);
    void *f = g->fence_create();
    assert_non_null(f);

    /* A long queue before the fence, more work on another buffer after it:
     * the fenced download from another thread must see all of the former. */
    g->axpy(n, 1.0f, x, y, 0);
    for (int i = 0; i < 63; i++) g->axpy(n, 1.0f, x, y, 1);
    g->fence_record(f);
    for (int i = 0; i < 64; i++) g->axpy(n, 2.0f, x, z, 1);
    transfer_job down = {out, y, bytes, f};
    run_on_thread(&down);
    expect_multiple("download_fenced on another thread after 64 queued axpy", out, xh, 64.0f, n);
    g->download(out, z, bytes);
    expect_multiple("work issued after the fence", out, xh, 128.0f, n);

    /* The fence can be recorded again; the training thread may use it too. */
    g->axpy(n, 1.0f, x, y, 1);
    g->fence_record(f);
    g->download_fenced(out, y, bytes, f);
    expect_multiple("download_fenced after a second record", out, xh, 65.0f, n);

    /* upload_sync from another thread, while the compute stream is busy with
     * other buffers: ops issued after it returns see the data. */
    for (int i = 0; i < 64; i++) g->axpy(n, 1.0f, x, z, 1);
    transfer_job up = {yh, w, bytes, NULL};
    run_on_thread(&up);
    g->axpy(n, 3.0f, w, y, 0);
    g->download(out, y, bytes);
    expect_multiple("an op issued after upload_sync on another thread", out, yh, 3.0f, n);

    /* on the training thread as well */
    g->upload_sync(w, xh, bytes);
    g->copy(y, w, bytes);
    g->download(out, y, bytes);
    expect_multiple("copy after upload_sync", out, xh, 1.0f, n);

    g->fence_destroy(f);
    g->free(x);
    g->free(y);
    g->free(z);
    g->free(w);
    free(xh);
    free(yh);
    free(out);
}

/* ---------------------------------------------------------------- ResNet-20 */

#define NET_BATCH 8
#define NET_CLASSES 10

/* Every whole-net tensor is compared within NET_REL of its largest magnitude
 * (elementwise |gpu - cpu| <= NET_REL * max|cpu|), which judges values near
 * zero by the tensor's scale instead of their own. Measured on the CPU by
 * perturbing the weights of one of two identical nets by a relative 1e-5 (far
 * more than the ~1e-6 relative rounding differences between two fp32
 * backends): activations moved by at most 1.3e-4 of their tensor's maximum,
 * gradients (with the activations shared, see below) by 6e-5. A wiring error
 * (a missing, doubled or misplaced contribution) is of order 1. */
#define NET_REL 1e-3
/* The new parameter is rounded to float: two ulps (relative 2.4e-7) of the
 * tensor's largest parameter on top of the difference in gradients. */
#define PARAM_ROUNDING 2.4e-7

static net *build_resnet20(const backend *b, int layout) {
    net *nt = net_create(b, 3, 32, 32, NET_CLASSES);
    const zoo_options opt = {0, 0, -1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    int out, aux;
    if (zoo_build(nt, "resnet20", &opt, &out, &aux) != CNT_OK)
        fail_msg("resnet20 on the %s backend: %s", b->name, cnt_err_msg());
    net_set_layout(nt, layout);
    if (net_finalize(nt, out, aux, NET_BATCH) != CNT_OK)
        fail_msg("resnet20 (%s) on the %s backend: %s", layout_name(layout), b->name, cnt_err_msg());
    net_init_params(nt, 20);
    return nt;
}

static double max_abs_f(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* cpu_dev (on the CPU backend) and gpu_dev (on the GPU's) agree within
 * NET_REL of cpu's largest magnitude. */
static void expect_net_close(const char *what, const float *cpu_dev, const float *gpu_dev, size_t n) {
    float *c = download(CPU, cpu_dev, n), *g = download(GPU, gpu_dev, n);
    double *want = tu_alloc(n);
    tu_to_double(c, want, n);
    double m = max_abs_f(c, n);
    tu_assert_close_f(what, want, g, n, 0.0, NET_REL * (m > 0.0 ? m : 1.0));
    free(c);
    free(g);
    free(want);
}

static size_t node_count(const net *nt, int i) {
    const node *nd = &nt->nodes[i];
    return (size_t)nt->batch * nd->C * nd->H * nd->W;
}

/* One training step of a CIFAR ResNet-20 (batch 8, 3x32x32, 10 classes) on
 * both backends from the same weights and batch, compared at every stage:
 *   forward activations of every node (in forward order, so the first
 *   failure names the first layer that diverged), the loss;
 *   every node's input gradient (dy) and every parameter gradient;
 *   the batch-norm running statistics the training forward updated;
 *   the change SGD (momentum 0.9, weight decay) makes to every parameter;
 *   eval-mode logits with the new weights and running statistics.
 *
 * The backward runs from the CPU's activations on both sides: after the
 * forwards are compared, every node's output is copied from the CPU net into
 * the GPU net. A ReLU input within rounding of zero (a few in 1.5 million per
 * step) passes its gradient on one backend and not on the other; measured on
 * the CPU, that one flip moves some weight gradients by up to 2% of their
 * tensor's maximum, so without the shared activations the test would fail at
 * random whatever the GPU's precision. The GPU's own forward is still checked
 * in full above, and its backward ops, wiring and batch-norm saved statistics
 * (kept from its own forward) are what the gradients check.
 *
 * In NHWC (both nets built with net_set_layout) the input is still given in
 * NCHW (the nets transpose it), node activations and their gradients are
 * [N, H, W, C] on both sides and compared as they are, and parameters,
 * gradients, running statistics and logits are layout-independent: the same
 * comparisons, the same tolerances. */
static void resnet20_train_step(int layout) {
    net *nt[2];
    for (int s = CPU; s <= GPU; s++) nt[s] = build_resnet20(be[s], layout);
    const char *ln = layout_name(layout);
    assert_true(nt[CPU]->be == be[CPU] && nt[GPU]->be == be[GPU]);
    assert_int_equal(nt[CPU]->n_nodes, nt[GPU]->n_nodes);
    assert_int_equal(nt[CPU]->n_params, nt[GPU]->n_params);
    assert_int_equal(nt[CPU]->n_buffers, nt[GPU]->n_buffers);
    const size_t np = nt[CPU]->n_params;

    /* the same starting weights (generated on the host, then uploaded) */
    float *p0 = download(CPU, nt[CPU]->params, np), *p0g = download(GPU, nt[GPU]->params, np);
    tu_assert_bitwise_equal_f("initial parameters (cpu vs gpu)", p0, p0g, np);
    free(p0g);

    rng r;
    rng_seed(&r, 2100, 1);
    size_t nx = (size_t)NET_BATCH * 3 * 32 * 32;
    float *xh = tu_alloc_f(nx);
    fill_normal(&r, xh, nx, 0.0f, 1.0f);
    dual x = dual_of(xh, nx);
    free(xh);
    int labels[NET_BATCH];
    tu_fill_labels(&r, labels, NET_BATCH, NET_CLASSES);
    int *dlabels[2];
    float *loss[2], *dlogits[2];
    for (int s = CPU; s <= GPU; s++) {
        dlabels[s] = be[s]->alloc(sizeof labels);
        be[s]->upload(dlabels[s], labels, sizeof labels);
        loss[s] = be[s]->alloc(sizeof(float));
        dlogits[s] = be[s]->alloc((size_t)NET_BATCH * NET_CLASSES * sizeof(float));
    }
    char what[192];

    /* forward (training mode) and loss; each node's output and gradient as its
     * pass ends (they share memory by lifetime) */
    tu_grads g[2];
    for (int s = CPU; s <= GPU; s++) {
        tu_grads_capture(nt[s], &g[s]);
        net_forward(nt[s], x.p[s], NET_BATCH, 1);
        be[s]->softmax_xent(NET_BATCH, NET_CLASSES, net_logits(nt[s]), dlabels[s], 0.1f, loss[s], dlogits[s]);
    }
    for (int i = 0; i < nt[CPU]->n_nodes; i++) {
        snprintf(what, sizeof what, "resnet20 %s forward: output of %s", ln, nt[CPU]->nodes[i].name);
        expect_net_close(what, g[CPU].y[i], g[GPU].y[i], node_count(nt[CPU], i));
    }
    snprintf(what, sizeof what, "resnet20 %s logits", ln);
    expect_net_close(what, net_logits(nt[CPU]), net_logits(nt[GPU]), NET_BATCH * NET_CLASSES);
    snprintf(what, sizeof what, "resnet20 %s loss", ln);
    expect_net_close(what, loss[CPU], loss[GPU], 1);

    /* shared activations (see above): the outputs a backward still reads, then
     * the loss gradient and backward */
    for (int i = 0; i < nt[CPU]->n_nodes; i++) {
        if (!net_output_kept(nt[CPU], i)) continue;
        size_t n = node_count(nt[CPU], i);
        float *h = download(CPU, nt[CPU]->nodes[i].y, n);
        be[GPU]->upload(nt[GPU]->nodes[i].y, h, n * sizeof(float));
        free(h);
    }
    be[GPU]->softmax_xent(NET_BATCH, NET_CLASSES, net_logits(nt[GPU]), dlabels[GPU], 0.1f, loss[GPU], dlogits[GPU]);
    for (int s = CPU; s <= GPU; s++) net_backward(nt[s], dlogits[s], NULL);
    /* in backward order, so the first failure names the first node whose backward diverged */
    for (int i = nt[CPU]->n_nodes - 1; i >= 0; i--) {
        snprintf(what, sizeof what, "resnet20 %s backward: gradient w.r.t. the output of %s", ln,
                 nt[CPU]->nodes[i].name);
        expect_net_close(what, g[CPU].dy[i], g[GPU].dy[i], node_count(nt[CPU], i));
    }
    for (int s = CPU; s <= GPU; s++) tu_grads_free(&g[s]);
    for (int t = nt[CPU]->n_param_tensors - 1; t >= 0; t--) {
        const param_info *pi = &nt[CPU]->param_info[t];
        snprintf(what, sizeof what, "resnet20 %s gradient of %s", ln, pi->name);
        expect_net_close(what, nt[CPU]->grads + pi->offset, nt[GPU]->grads + pi->offset, pi->count);
    }
    for (int t = 0; t < nt[CPU]->n_buffer_tensors; t++) {
        const buffer_info *bi = &nt[CPU]->buffer_info[t];
        snprintf(what, sizeof what, "resnet20 %s after the training forward: %s", ln, bi->name);
        expect_net_close(what, nt[CPU]->buffers + bi->offset, nt[GPU]->buffers + bi->offset, bi->count);
    }

    /* one SGD step over the flat buffers; compared as the change of each
     * parameter, within NET_REL of the tensor's largest change plus two ulps
     * of its largest parameter (each side rounds the new value to float) */
    float *mom[2];
    for (int s = CPU; s <= GPU; s++) {
        mom[s] = be[s]->alloc(np * sizeof(float));
        be[s]->sgd_update(np, nt[s]->params, nt[s]->grads, mom[s], 0.1f, 0.9f, 5e-4f, 0, 1.0f, NULL, NULL);
    }
    float *p1c = download(CPU, nt[CPU]->params, np), *p1g = download(GPU, nt[GPU]->params, np);
    for (int t = nt[CPU]->n_param_tensors - 1; t >= 0; t--) {
        const param_info *pi = &nt[CPU]->param_info[t];
        double *want = tu_alloc(pi->count), *got = tu_alloc(pi->count);
        double max_change = 0.0;
        for (size_t k = 0; k < pi->count; k++) {
            size_t j = pi->offset + k;
            want[k] = (double)p1c[j] - p0[j];
            got[k] = (double)p1g[j] - p0[j];
            max_change = fmax(max_change, fabs(want[k]));
        }
        snprintf(what, sizeof what, "resnet20 %s SGD change of %s", ln, pi->name);
        tu_assert_close(what, want, got, pi->count, 0.0,
                        NET_REL * max_change + PARAM_ROUNDING * max_abs_f(p0 + pi->offset, pi->count));
        free(want);
        free(got);
    }
    free(p1c);
    free(p1g);

    /* eval mode: running statistics and the updated weights */
    for (int s = CPU; s <= GPU; s++) net_forward(nt[s], x.p[s], NET_BATCH, 0);
    snprintf(what, sizeof what, "resnet20 %s eval-mode logits after one SGD step", ln);
    expect_net_close(what, net_logits(nt[CPU]), net_logits(nt[GPU]), NET_BATCH * NET_CLASSES);

    free(p0);
    for (int s = CPU; s <= GPU; s++) {
        be[s]->free(dlabels[s]);
        be[s]->free(loss[s]);
        be[s]->free(dlogits[s]);
        be[s]->free(mom[s]);
        net_free(nt[s]);
    }
    dual_free(&x);
}

static void test_resnet20_train_step(void **state) {
    (void)state;
    NEED_GPU();
    resnet20_train_step(BACKEND_LAYOUT_NCHW);
}

/* The nets carry their layout in their own contexts. */
static void test_resnet20_train_step_nhwc(void **state) {
    (void)state;
    NEED_GPU();
    resnet20_train_step(BACKEND_LAYOUT_NHWC);
}

/* ---------------------------------------------------------------- main */

/* ---------------------------------------------------------------- 16-bit activations
 * backend_ctx.act = bf16 or fp16 (model/backend.h, backend_dtype): each op
 * reads 16-bit activations, computes in fp32 and rounds what it stores
 * once. The CPU backend is the reference (tests/test_act16.c holds each of
 * its ops to its fp32 op rounded once); here the GPU's 16-bit ops against
 * the CPU's, from the same 16-bit values. Ops that compute the same fp32
 * value on both sides (elementwise, channel slices, bias, conversions) must
 * give the same bits; reductions (convolutions, GEMMs, batch norm, average
 * pools) sum in other orders, so their fp32 results differ by the fp32
 * tolerances above and may then round to neighbouring 16-bit values: 2 ulps
 * of the type at the value (rtol 2^-6 for bf16, 2^-9 for fp16) plus the
 * precision's atol. */

/* The same n 16-bit values on both backends. */
typedef struct dual16 {
    void *p[2];
    size_t n;
} dual16;

static backend_dtype act_type(int math) { return math == BACKEND_MATH_FP16 ? BACKEND_DTYPE_FP16 : BACKEND_DTYPE_BF16; }

static uint16_t to16(int math, float v) { return math == BACKEND_MATH_FP16 ? fp16_from_float(v) : bf16_from_float(v); }
static float from16(int math, uint16_t h) { return math == BACKEND_MATH_FP16 ? fp16_to_float(h) : bf16_to_float(h); }

static dual16 dual16_normal(rng *r, int math, size_t n, float mean, float std) {
    dual16 d = {{NULL, NULL}, n};
    uint16_t *h = cnt_malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = to16(math, mean + std * rng_normal(r));
    for (int s = CPU; s <= GPU; s++) {
        d.p[s] = be[s]->alloc((n ? n : 1) * sizeof(uint16_t));
        be[s]->upload(d.p[s], h, n * sizeof(uint16_t));
    }
    free(h);
    return d;
}

static void dual16_free(dual16 *d) {
    for (int s = CPU; s <= GPU; s++) be[s]->free(d->p[s]);
}

/* Both sides' values widened; the GPU's within rtol * |cpu| + atol of the
 * CPU's (0, 0: the same bits). Then the GPU side takes the CPU's values, so
 * the next op of a test starts both sides from the same numbers. */
static void expect16_at(const char *file, int line, const char *what, const dual16 *d, int math, double rtol,
                        double atol) {
    uint16_t *h[2];
    for (int s = CPU; s <= GPU; s++) {
        h[s] = cnt_malloc((d->n ? d->n : 1) * sizeof(uint16_t));
        be[s]->download(h[s], d->p[s], d->n * sizeof(uint16_t));
    }
    double *want = tu_alloc(d->n);
    float *got = tu_alloc_f(d->n);
    for (size_t i = 0; i < d->n; i++) {
        want[i] = from16(math, h[CPU][i]);
        got[i] = from16(math, h[GPU][i]);
    }
    char label[256];
    snprintf(label, sizeof label, "%s (%s activations, %s)", what, math == BACKEND_MATH_FP16 ? "fp16" : "bf16",
             cur_layout_name());
    if (rtol == 0 && atol == 0)
        for (size_t i = 0; i < d->n; i++)
            if (h[CPU][i] != h[GPU][i])
                fail_msg("%s: [%zu] is 0x%04x on the GPU, 0x%04x on the CPU (%g, %g): not the same bits", label, i,
                         h[GPU][i], h[CPU][i], (double)got[i], want[i]);
    tu_assert_close_f_at(file, line, label, want, got, d->n, rtol, atol);
    be[GPU]->upload(d->p[GPU], h[CPU], d->n * sizeof(uint16_t));
    free(h[CPU]);
    free(h[GPU]);
    free(want);
    free(got);
}

#define expect16(what, d, math, rtol, atol) expect16_at(__FILE__, __LINE__, (what), (d), (math), (rtol), (atol))

/* 2 ulps of the type, relative */
static double ulps2(int math) { return math == BACKEND_MATH_FP16 ? 0x1p-9 : 0x1p-6; }

static void set_act_both(int math) {
    set_math_both(math);
    for (int s = CPU; s <= GPU; s++) ctx[s].act = act_type(math);
}

/* The elementwise ops, channel slices, bias and the type conversions: the
 * same fp32 value rounded once on both sides, so the same bits. */
static void act16_exact_run(int math) {
    rng r;
    rng_seed(&r, 160, (uint64_t)math);
    const size_t n = 100003; /* odd, several blocks */
    dual16 a = dual16_normal(&r, math, n, 0, 1), b = dual16_normal(&r, math, n, 0, 1);
    dual16 y = dual16_normal(&r, math, n, 0, 1);
    for (int s = CPU; s <= GPU; s++) be[s]->relu_fwd(&ctx[s], n, a.p[s], y.p[s]);
    expect16("relu_fwd", &y, math, 0, 0);
    for (int acc = 0; acc < 2; acc++) {
        for (int s = CPU; s <= GPU; s++) be[s]->relu_bwd(&ctx[s], n, y.p[s], b.p[s], a.p[s], acc);
        expect16(acc ? "relu_bwd accumulate" : "relu_bwd", &a, math, 0, 0);
    }
    for (int s = CPU; s <= GPU; s++) be[s]->add(&ctx[s], n, a.p[s], b.p[s], y.p[s]);
    expect16("add", &y, math, 0, 0);
    for (int s = CPU; s <= GPU; s++) be[s]->add(&ctx[s], n, a.p[s], y.p[s], y.p[s]);
    expect16("add in place", &y, math, 0, 0);
    /* at a 2-byte offset: the kernels' one-value-at-a-time path (aligned
     * pointers go 16 bytes at a time) */
    for (int s = CPU; s <= GPU; s++) be[s]->relu_fwd(&ctx[s], n - 1, (uint16_t *)a.p[s] + 1, (uint16_t *)y.p[s] + 1);
    expect16("relu_fwd at a 2-byte offset", &y, math, 0, 0);
    for (int s = CPU; s <= GPU; s++)
        be[s]->relu_bwd(&ctx[s], n - 1, (uint16_t *)y.p[s] + 1, (uint16_t *)b.p[s] + 1, (uint16_t *)a.p[s] + 1, 1);
    expect16("relu_bwd accumulate at a 2-byte offset", &a, math, 0, 0);
    for (int s = CPU; s <= GPU; s++)
        be[s]->add(&ctx[s], n - 1, (uint16_t *)a.p[s] + 1, (uint16_t *)b.p[s] + 1, (uint16_t *)y.p[s] + 1);
    expect16("add at a 2-byte offset", &y, math, 0, 0);
    float *mask[2];
    for (int s = CPU; s <= GPU; s++) {
        mask[s] = be[s]->alloc(n * sizeof(float));
        be[s]->dropout_mask(n, 0.3f, 77, mask[s]);
    }
    for (int acc = 0; acc < 2; acc++) {
        for (int s = CPU; s <= GPU; s++) be[s]->mul(&ctx[s], n, a.p[s], mask[s], y.p[s], acc);
        expect16(acc ? "mul by a dropout mask, accumulate" : "mul by a dropout mask", &y, math, 0, 0);
    }
    for (int s = CPU; s <= GPU; s++) be[s]->free(mask[s]);
    /* bias on [N, C, HW] and channel slices, in the current layout */
    int N = 3, C = 24, HW = 49;
    dual16 t = dual16_normal(&r, math, (size_t)N * C * HW, 0, 1);
    dual16 u = dual16_normal(&r, math, (size_t)N * 40 * HW, 0, 1);
    dual bias = dual_normal(&r, (size_t)C, 0, 1);
    for (int s = CPU; s <= GPU; s++) be[s]->bias_fwd(&ctx[s], N, C, HW, bias.p[s], t.p[s]);
    expect16("bias_fwd", &t, math, 0, 0);
    /* the bias gradient from 16-bit dy: in NHWC 16 bytes (8 channels) a load; over 24,000 rows of 328
     * channels (41 vectors: a block of 32 and a partial one), split over 93 slices; 12 channels (not
     * whole vectors of 8: the scalar kernel, though 4-float vectors would divide them); and dy one value
     * past a 16-byte boundary (the scalar kernel: a vector load there faults) */
    static const int bcases[][4] = {{3, 24, 49, 0}, {8, 328, 3000, 0}, {3, 12, 49, 0}, {3, 24, 49, 1}};
    for (size_t k = 0; k < sizeof bcases / sizeof bcases[0]; k++) {
        int bn = bcases[k][0], bc = bcases[k][1], bhw = bcases[k][2], off = bcases[k][3];
        dual16 d = dual16_normal(&r, math, (size_t)bn * bc * bhw + (size_t)off, 0, 1);
        dual db = dual_normal(&r, (size_t)bc, 0, 1); /* overwritten */
        for (int s = CPU; s <= GPU; s++)
            be[s]->bias_bwd(&ctx[s], bn, bc, bhw, (uint16_t *)d.p[s] + off, db.p[s]);
        char what[80];
        snprintf(what, sizeof what, "bias_bwd N%d C%d HW%d from 16 bits%s", bn, bc, bhw,
                 off ? ", 2 bytes off 16" : "");
        expect_close(what, &db, PREC_FP32.rtol_sum, atol_of(&PREC_FP32, (size_t)bn * bhw, 4.0));
        dual16_free(&d);
        dual_free(&db);
    }
    for (int acc = 0; acc < 2; acc++) {
        for (int s = CPU; s <= GPU; s++) be[s]->channel_copy(&ctx[s], N, C, HW, t.p[s], C, 0, u.p[s], 40, 8, acc);
        expect16(acc ? "channel_copy into channels 8..31 of 40, accumulate" : "channel_copy into channels 8..31 of 40",
                 &u, math, 0, 0);
    }
    /* the net's input into the layout and type, and back */
    dual in = dual_normal(&r, (size_t)N * C * HW, 0, 1);
    for (int s = CPU; s <= GPU; s++)
        be[s]->convert_layout(N, C, HW, in.p[s], BACKEND_DTYPE_FP32, t.p[s], act_type(math), cur_layout, 1, 0);
    expect16("convert_layout fp32 -> 16 bits", &t, math, 0, 0);
    for (int s = CPU; s <= GPU; s++)
        be[s]->convert_layout(N, C, HW, t.p[s], act_type(math), in.p[s], BACKEND_DTYPE_FP32, cur_layout, 0, 0);
    expect_close("convert_layout 16 bits -> fp32", &in, 0, 0);
    dual_free(&in);
    dual_free(&bias);
    dual16_free(&t);
    dual16_free(&u);
    dual16_free(&a);
    dual16_free(&b);
    dual16_free(&y);
}

/* Convolutions (a linear layer's GEMMs too), batch norm and pooling: sums
 * in another order, so 2 ulps plus the precision's atol for sums of `len`
 * products of magnitude `scale`. */
static void act16_reduce_run(int math) {
    const precision *pr = math == BACKEND_MATH_FP16 ? &PREC_FP16 : &PREC_BF16;
    rng r;
    rng_seed(&r, 161, (uint64_t)math);
    for (int i = 0; i < N_CONV_CASES; i++) {
        conv_params p = conv_case_params(i);
        if (conv_in_count(&p) > 2000000) continue; /* the ImageNet-sized cases: the fp32 tests cover them */
        dual16 x = dual16_normal(&r, math, conv_in_count(&p), 0, 0.5f);
        dual16 y = dual16_normal(&r, math, conv_out_count(&p), 0, 0.5f);
        dual w = dual_uniform(&r, conv_w_count(&p), -1.0f, 1.0f), dw = dual_uniform(&r, conv_w_count(&p), -1, 1);
        size_t len = (size_t)p.C * p.R * p.S;
        char what[160];
        for (int s = CPU; s <= GPU; s++) be[s]->conv_fwd(&ctx[s], &p, x.p[s], w.p[s], y.p[s]);
        conv_label(what, sizeof what, "conv_fwd", &p, 0, pr);
        expect16(what, &y, math, ulps2(math), atol_of(pr, len, 0.5));
        for (int acc = 0; acc < 2; acc++) {
            for (int s = CPU; s <= GPU; s++) be[s]->conv_bwd_data(&ctx[s], &p, y.p[s], w.p[s], x.p[s], acc, 0);
            conv_label(what, sizeof what, "conv_bwd_data", &p, acc, pr);
            expect16(what, &x, math, ulps2(math), atol_of(pr, (size_t)p.K * p.R * p.S, 0.5) + (acc ? ulps2(math) : 0));
        }
        /* fresh operands: x and y now hold each other's sums (y = conv(x), x += conv^T(y)), so dW's
         * products are correlated and thousands of times atol's scale; cuDNN rounds partial sums of
         * them to 16 bits (seen on an H200: 2.58 against 1.63 in a value of 8448's tensor) */
        dual16_free(&x);
        dual16_free(&y);
        x = dual16_normal(&r, math, conv_in_count(&p), 0, 0.5f);
        y = dual16_normal(&r, math, conv_out_count(&p), 0, 0.5f);
        for (int s = CPU; s <= GPU; s++) be[s]->conv_bwd_filter(&ctx[s], &p, x.p[s], y.p[s], dw.p[s]);
        conv_label(what, sizeof what, "conv_bwd_filter", &p, 0, pr);
        expect_close(what, &dw, pr->rtol_sum, atol_of(pr, (size_t)p.N * p.P * p.Q, 0.25));
        dual16_free(&x);
        dual16_free(&y);
        dual_free(&w);
        dual_free(&dw);
    }
    /* a linear layer: y = x W^T, dW = dy^T x, dx += dy W */
    int B = 5, in = 300, out = 17;
    dual16 x = dual16_normal(&r, math, (size_t)B * in, 0, 0.5f), y = dual16_normal(&r, math, (size_t)B * out, 0, 0.5f);
    dual w = dual_uniform(&r, (size_t)out * in, -1, 1), dw = dual_uniform(&r, (size_t)out * in, -1, 1);
    for (int s = CPU; s <= GPU; s++)
        be[s]->gemm(&ctx[s], 0, 1, B, out, in, 1.0f, x.p[s], in, w.p[s], in, 0.0f, y.p[s], out,
                    GEMM_ACT_A | GEMM_ACT_C);
    expect16("gemm y = x W^T", &y, math, ulps2(math), atol_of(pr, (size_t)in, 0.5));
    for (int s = CPU; s <= GPU; s++)
        be[s]->gemm(&ctx[s], 1, 0, out, in, B, 1.0f, y.p[s], out, x.p[s], in, 0.0f, dw.p[s], in,
                    GEMM_ACT_A | GEMM_ACT_B);
    expect_close("gemm dW = dy^T x", &dw, pr->rtol_sum, atol_of(pr, (size_t)B, 0.25));
    for (int s = CPU; s <= GPU; s++)
        be[s]->gemm(&ctx[s], 0, 0, B, in, out, 1.0f, y.p[s], out, w.p[s], in, 1.0f, x.p[s], in,
                    GEMM_ACT_A | GEMM_ACT_C);
    expect16("gemm dx += dy W", &x, math, 2 * ulps2(math), atol_of(pr, (size_t)out, 0.5));
    dual16_free(&x);
    dual16_free(&y);
    dual_free(&w);
    dual_free(&dw);
    /* batch norm (training, its backward) and pooling */
    int N = 4, C = 16, HW = 81;
    size_t n = (size_t)N * C * HW;
    dual16 bx = dual16_normal(&r, math, n, 1, 2), by = dual16_normal(&r, math, n, 0, 1);
    dual16 bdy = dual16_normal(&r, math, n, 0, 1), bdx = dual16_normal(&r, math, n, 0, 1);
    dual gamma = dual_normal(&r, (size_t)C, 1, 0.5f), beta = dual_normal(&r, (size_t)C, 0, 0.5f);
    dual rm = dual_normal(&r, (size_t)C, 0, 1), rv = dual_uniform(&r, (size_t)C, 0.5f, 2);
    dual sm = dual_normal(&r, (size_t)C, 0, 1), si = dual_normal(&r, (size_t)C, 0, 1);
    dual dg = dual_normal(&r, (size_t)C, 0, 1), db = dual_normal(&r, (size_t)C, 0, 1);
    for (int s = CPU; s <= GPU; s++)
        be[s]->bn_fwd_train(&ctx[s], N, C, HW, bx.p[s], gamma.p[s], beta.p[s], by.p[s], rm.p[s], rv.p[s], 0.1f, 1e-5f,
                            sm.p[s], si.p[s]);
    expect16("bn_fwd_train", &by, math, ulps2(math), 1e-4);
    expect_close("bn_fwd_train save_mean", &sm, 1e-4, 1e-5);
    expect_close("bn_fwd_train save_invstd", &si, 1e-4, 1e-5);
    dual_sync_from_cpu(&sm);
    dual_sync_from_cpu(&si);
    for (int s = CPU; s <= GPU; s++)
        be[s]->bn_bwd(&ctx[s], N, C, HW, bx.p[s], bdy.p[s], gamma.p[s], sm.p[s], si.p[s], 1e-5f, bdx.p[s], dg.p[s],
                      db.p[s], 0);
    expect16("bn_bwd dx", &bdx, math, ulps2(math), 1e-3);
    expect_close("bn_bwd dgamma", &dg, 1e-3, 1e-3);
    pool_params pp = tu_pool_params(&(tu_pool_case){POOL_MODE_MAX, N, C, 9, 9, 3, 3, 2, 2, 1, 1, 0, 0, 0});
    size_t np = (size_t)N * C * pp.P * pp.Q;
    dual16 py = dual16_normal(&r, math, np, 0, 1);
    for (int s = CPU; s <= GPU; s++) be[s]->pool_fwd(&ctx[s], &pp, bx.p[s], py.p[s], NULL);
    expect16("max pool fwd", &py, math, 0, 0);
    for (int s = CPU; s <= GPU; s++) be[s]->pool_bwd(&ctx[s], &pp, bx.p[s], py.p[s], py.p[s], bdx.p[s], 1, NULL);
    expect16("max pool bwd accumulate", &bdx, math, 0, 0);
    /* windows that tile the 9x9 input (3x3 stride 3): the backward by output (pool_bwd_tile_k) */
    pool_params tp = tu_pool_params(&(tu_pool_case){POOL_MODE_MAX, N, C, 9, 9, 3, 3, 3, 3, 0, 0, 0, 0, 0});
    dual16 ty = dual16_normal(&r, math, (size_t)N * C * tp.P * tp.Q, 0, 1);
    for (int s = CPU; s <= GPU; s++) be[s]->pool_fwd(&ctx[s], &tp, bx.p[s], ty.p[s], NULL);
    expect16("max pool fwd, tiling windows", &ty, math, 0, 0);
    for (int acc = 0; acc < 2; acc++) {
        for (int s = CPU; s <= GPU; s++) be[s]->pool_bwd(&ctx[s], &tp, bx.p[s], ty.p[s], ty.p[s], bdx.p[s], acc, NULL);
        expect16(acc ? "max pool bwd, tiling windows, accumulate" : "max pool bwd, tiling windows", &bdx, math, 0, 0);
    }
    dual16_free(&ty);
    dual16 *d16[] = {&bx, &by, &bdy, &bdx, &py};
    for (size_t k = 0; k < sizeof d16 / sizeof d16[0]; k++) dual16_free(d16[k]);
    dual *d32[] = {&gamma, &beta, &rm, &rv, &sm, &si, &dg, &db};
    for (size_t k = 0; k < sizeof d32 / sizeof d32[0]; k++) dual_free(d32[k]);
}

/* ---------------------------------------------------------------- batch norm + add + ReLU
 * backend_bn_act_fwd_train: the CUDA backend's fused forward (one cuDNN call,
 * CUDNN_BATCHNORM_OPS_BN_ACTIVATION or BN_ADD_ACTIVATION, in NHWC with C a
 * multiple of 8; its composition elsewhere) against the CPU's fused op, for
 * every combination of the add and ReLU, in fp32 (BN_RTOL, as bn_fwd_train)
 * and with 16-bit activations (2 ulps of the type plus 1e-3: both sides
 * round once, from statistics that differ in their last bits). Then the
 * backward from the same y, three ways where there is an add: the residual's
 * gradient apart, added to, and in dy itself. Where the forward fused the
 * ReLU it must have kept its mask in the fwd_keep the test gives the GPU
 * side, and the backward then runs cuDNN's fused backward on it (dz apart
 * or in dy); elsewhere the composition. dz is dy with the ReLU's mask, the
 * same bits on both sides (the mask is the GPU forward's own: a value of
 * bn(x) + z that straddles 0 between the two sides' statistics would show
 * here as one element off by its dy). */

/* n bytes of each side's copy of a tensor (p[CPU] and p[GPU]): saved from the
 * CPU's, and put back into both. */
static void *bytes_save(void *const *p, size_t n) {
    void *h = cnt_malloc(n ? n : 1);
    be[CPU]->download(h, p[CPU], n);
    return h;
}

static void bytes_restore(void *const *p, const void *h, size_t n) {
    for (int s = CPU; s <= GPU; s++) be[s]->upload(p[s], h, n);
}

/* One geometry: N images of C channels of HW values, the fwd_keep sized
 * for keep_n >= N images (a layer's keep is sized at the net's largest
 * batch; an evaluation's last batch is smaller). */
static void bn_act_run(int math, int N, int C, int HW, int keep_n) {
    const int a16 = math != BACKEND_MATH_FP32;
    const size_t n = (size_t)N * C * HW, bytes = n * (a16 ? sizeof(uint16_t) : sizeof(float));
    rng r;
    rng_seed(&r, 170, (uint64_t)(math * 4 + cur_layout));
    for (int withz = 0; withz < 2; withz++)
        for (int relu = 0; relu < 2; relu++) {
            /* the activations: 16-bit values, or floats, on both sides */
            dual16 x16 = {{NULL, NULL}, 0}, z16 = x16, y16 = x16, dy16 = x16, dx16 = x16, dz16 = x16;
            dual x = {0}, z = {0}, y = {0}, dy = {0}, dx = {0}, dz = {0};
            void *xp[2], *zp[2], *yp[2], *dyp[2], *dxp[2], *dzp[2];
            if (a16) {
                x16 = dual16_normal(&r, math, n, 1, 2), z16 = dual16_normal(&r, math, n, 0, 1);
                y16 = dual16_normal(&r, math, n, 0, 1), dy16 = dual16_normal(&r, math, n, 0, 1);
                dx16 = dual16_normal(&r, math, n, 0, 1), dz16 = dual16_normal(&r, math, n, 0, 1);
            } else {
                x = dual_normal(&r, n, 1, 2), z = dual_normal(&r, n, 0, 1), y = dual_normal(&r, n, 0, 1);
                dy = dual_normal(&r, n, 0, 1), dx = dual_normal(&r, n, 0, 1), dz = dual_normal(&r, n, 0, 1);
            }
            for (int s = CPU; s <= GPU; s++) {
                xp[s] = a16 ? x16.p[s] : x.p[s], zp[s] = a16 ? z16.p[s] : z.p[s], yp[s] = a16 ? y16.p[s] : y.p[s];
                dyp[s] = a16 ? dy16.p[s] : dy.p[s], dxp[s] = a16 ? dx16.p[s] : dx.p[s];
                dzp[s] = a16 ? dz16.p[s] : dz.p[s];
            }
            void *hdy = bytes_save(dyp, bytes), *hdx = bytes_save(dxp, bytes), *hdz = bytes_save(dzp, bytes);
            dual gamma = dual_uniform(&r, (size_t)C, 0.5f, 1.5f), beta = dual_uniform(&r, (size_t)C, -0.5f, 0.5f);
            dual rm = dual_uniform(&r, (size_t)C, -1, 1), rv = dual_uniform(&r, (size_t)C, 0.5f, 2);
            dual sm = dual_uniform(&r, (size_t)C, -1, 1), si = dual_uniform(&r, (size_t)C, -1, 1);
            dual dg = dual_uniform(&r, (size_t)C, -1, 1), db = dual_uniform(&r, (size_t)C, -1, 1);
            const size_t kb = backend_bn_act_keep_bytes(be[GPU], &ctx[GPU], keep_n, C, HW, withz, relu);
            fwd_keep keep = {kb ? be[GPU]->alloc(kb) : NULL, kb, 1}; /* written: the forward must clear it */
            /* The GPU first: where it composed (no fusion here), the CPU's reference is the composition
             * too, which with 16-bit activations rounds after the batch norm and again after the add
             * (model/backend.h allows it); where it fused, the CPU's fused op, rounded once. */
            for (int s = GPU; s >= CPU; s--) {
                if (s == CPU && a16 && withz && !keep.written) {
                    be[CPU]->bn_fwd_train(&ctx[CPU], N, C, HW, xp[CPU], gamma.p[CPU], beta.p[CPU], yp[CPU], rm.p[CPU],
                                          rv.p[CPU], 0.1f, 1e-5f, sm.p[CPU], si.p[CPU]);
                    be[CPU]->add(&ctx[CPU], n, yp[CPU], zp[CPU], yp[CPU]);
                    if (relu) be[CPU]->relu_fwd(&ctx[CPU], n, yp[CPU], yp[CPU]);
                    continue;
                }
                backend_bn_act_fwd_train(be[s], &ctx[s], N, C, HW, xp[s], withz ? zp[s] : NULL, relu, gamma.p[s],
                                         beta.p[s], yp[s], rm.p[s], rv.p[s], 0.1f, 1e-5f, sm.p[s], si.p[s],
                                         s == GPU ? &keep : NULL);
            }
            char what[160];
            snprintf(what, sizeof what, "bn_act_fwd_train keeps the mask, add %d, relu %d, %s, %s, N %d C %d HW %d",
                     withz, relu, cur_layout_name(), math == BACKEND_MATH_FP32 ? "fp32" : a16 ? "16-bit" : "?", N,
                     C, HW);
            /* cuDNN fuses only NHWC with a ReLU (C a multiple of 8 here); fp16 there always (TensorFlow,
             * Apex and PyTorch rely on it), fp32 and bf16 where this cuDNN takes them (a refusal is said once) */
            const int may_fuse = relu && cur_layout == BACKEND_LAYOUT_NHWC;
            if (!may_fuse && (kb > 0 || keep.written))
                fail_msg("%s: %zu bytes to keep, written %d; want none", what, kb, keep.written);
            if (may_fuse && math == BACKEND_MATH_FP16 && !keep.written)
                fail_msg("%s: the fused fp16 forward did not run (%zu bytes to keep)", what, kb);
            if (may_fuse && !keep.written) print_message("%s: not fused in this type here\n", what);
            snprintf(what, sizeof what, "bn_act_fwd_train y, add %d, relu %d", withz, relu);
            if (a16) {
                expect16(what, &y16, math, 2 * ulps2(math), 1e-3);
            } else {
                snprintf(what, sizeof what, "bn_act_fwd_train y %s, add %d, relu %d", cur_layout_name(), withz,
                         relu);
                expect_close(what, &y, BN_RTOL, BN_RTOL);
                dual_sync_from_cpu(&y);
            }
            expect_close("bn_act_fwd_train save_mean", &sm, BN_RTOL, 1e-4 * 3);
            expect_close("bn_act_fwd_train save_invstd", &si, BN_RTOL, 0.0);
            expect_close("bn_act_fwd_train running_mean", &rm, BN_RTOL, 1e-4 * 4);
            expect_close("bn_act_fwd_train running_var", &rv, BN_RTOL, 0.0);
            dual_sync_from_cpu(&sm);
            dual_sync_from_cpu(&si);
            static const char *const modes[] = {"dz apart", "dz accumulate", "dz in dy"};
            for (int mode = 0; mode < (withz ? 3 : 1); mode++) {
                bytes_restore(dyp, hdy, bytes);
                bytes_restore(dxp, hdx, bytes);
                bytes_restore(dzp, hdz, bytes);
                for (int s = CPU; s <= GPU; s++)
                    backend_bn_act_bwd(be[s], &ctx[s], N, C, HW, xp[s], yp[s], dyp[s], relu, gamma.p[s], beta.p[s],
                                       sm.p[s], si.p[s], 1e-5f, dxp[s], dg.p[s], db.p[s], 0,
                                       !withz ? NULL : mode == 2 ? dyp[s] : dzp[s], mode == 1,
                                       s == GPU ? &keep : NULL);
                snprintf(what, sizeof what, "bn_act_bwd dx, add %d, relu %d, %s", withz, relu, modes[mode]);
                if (a16) {
                    expect16(what, &dx16, math, 2 * ulps2(math), 1e-2);
                    if (withz) expect16(modes[mode], mode == 2 ? &dy16 : &dz16, math, mode == 1 ? 2 * ulps2(math) : 0,
                                        0);
                } else {
                    expect_close(what, &dx, BN_RTOL, BN_RTOL * 2);
                    if (withz) expect_close(modes[mode], mode == 2 ? &dy : &dz, 0, 0);
                }
                expect_close("bn_act_bwd dgamma", &dg, BN_RTOL, atol_of(&PREC_FP32, (size_t)N * HW, 4.0) + 1e-3);
                expect_close("bn_act_bwd dbeta", &db, BN_RTOL, atol_of(&PREC_FP32, (size_t)N * HW, 1.0) + 1e-3);
            }
            if (keep.p) be[GPU]->free(keep.p);
            free(hdy);
            free(hdx);
            free(hdz);
            if (a16) {
                dual16 *d16[] = {&x16, &z16, &y16, &dy16, &dx16, &dz16};
                for (size_t k = 0; k < sizeof d16 / sizeof d16[0]; k++) dual16_free(d16[k]);
            } else {
                dual *d[] = {&x, &z, &y, &dy, &dx, &dz};
                for (size_t k = 0; k < sizeof d / sizeof d[0]; k++) dual_free(d[k]);
            }
            dual *d32[] = {&gamma, &beta, &rm, &rv, &sm, &si, &dg, &db};
            for (size_t k = 0; k < sizeof d32 / sizeof d32[0]; k++) dual_free(d32[k]);
        }
}

static void test_bn_act_fused(void **state) {
    (void)state;
    NEED_GPU();
    for (int layout = BACKEND_LAYOUT_NCHW; layout <= BACKEND_LAYOUT_NHWC; layout++) {
        set_layout_both(layout);
        set_math_both(BACKEND_MATH_FP32);
        for (int s = CPU; s <= GPU; s++) ctx[s].act = BACKEND_DTYPE_FP32;
        bn_act_run(BACKEND_MATH_FP32, 4, 16, 81, 4);
        for (int math = BACKEND_MATH_BF16; math <= BACKEND_MATH_FP16; math++) {
            set_act_both(math);
            bn_act_run(math, 4, 16, 81, 4);
            bn_act_run(math, 2, 2048, 49, 4); /* ResNet-50's last stage, a batch below the keep's */
        }
    }
}

static void test_act16_ops(void **state) {
    (void)state;
    NEED_GPU();
    for (int layout = BACKEND_LAYOUT_NCHW; layout <= BACKEND_LAYOUT_NHWC; layout++)
        for (int math = BACKEND_MATH_BF16; math <= BACKEND_MATH_FP16; math++) {
            set_layout_both(layout);
            set_act_both(math);
            act16_exact_run(math);
            act16_reduce_run(math);
        }
}

/* A whole ResNet-20 training step with bf16 activations on both backends
 * from the same weights and batch, against the CPU's step with fp32
 * activations (bf16 math): the GPU's logits and parameter gradients must be
 * as close to the CPU's 16-bit ones as storing the activations in fp32 moves
 * them (within 1.5 times, plus 1e-3). Batch norm's backward magnifies any
 * one-ulp difference at this batch (tests/test_act16.c: some 10% on the
 * first layers' gradients), and the GPU's fused batch norm rounds after
 * each of its three steps where the CPU's rounds once; a wrong type or a
 * missed conversion is off by order 1. */
static void test_act16_resnet20(void **state) {
    (void)state;
    NEED_GPU();
    /* [0]: CPU, bf16 activations; [1]: GPU, bf16 activations; [2]: CPU, fp32 activations */
    const int side[3] = {CPU, GPU, CPU};
    const backend_dtype act[3] = {BACKEND_DTYPE_BF16, BACKEND_DTYPE_BF16, BACKEND_DTYPE_FP32};
    net *nt[3];
    for (int k = 0; k < 3; k++) {
        nt[k] = net_create(be[side[k]], 3, 32, 32, NET_CLASSES);
        net_set_layout(nt[k], BACKEND_LAYOUT_NHWC);
        net_set_math(nt[k], BACKEND_MATH_BF16);
        net_set_activations(nt[k], act[k]);
        zoo_options opt = {.dropout = -1.0f, .math = BACKEND_MATH_BF16, .activations = act[k]};
        int out, aux;
        assert_int_equal(zoo_build(nt[k], "resnet20", &opt, &out, &aux), CNT_OK);
        assert_int_equal(net_finalize(nt[k], out, aux, NET_BATCH), CNT_OK);
        net_init_params(nt[k], 20);
    }
    rng r;
    rng_seed(&r, 162, 0);
    dual x = dual_normal(&r, (size_t)NET_BATCH * 3 * 32 * 32, 0, 1);
    dual dl = dual_normal(&r, (size_t)NET_BATCH * NET_CLASSES, 0, 0.1f);
    size_t np = nt[0]->n_params, no = (size_t)NET_BATCH * NET_CLASSES;
    float *l[3], *gr[3];
    for (int k = 0; k < 3; k++) {
        int s = side[k];
        net_forward(nt[k], x.p[s], NET_BATCH, 1);
        l[k] = download(s, net_logits(nt[k]), no);
        net_backward(nt[k], dl.p[s], NULL);
        gr[k] = download(s, nt[k]->grads, np);
    }
    double lg = tu_rel_l2_f(l[0], l[1], no), ls = tu_rel_l2_f(l[0], l[2], no);
    double gg = tu_rel_l2_f(gr[0], gr[1], np), gs = tu_rel_l2_f(gr[0], gr[2], np);
    print_message("resnet20, bf16 activations: GPU from CPU: logits %.2e, gradients %.2e; fp32 activations from "
                  "bf16 ones on the CPU: %.2e, %.2e (relative L2)\n", lg, gg, ls, gs);
    assert_true(lg <= 1.5 * ls + 1e-3);
    assert_true(gg <= 1.5 * gs + 1e-3);
    for (int k = 0; k < 3; k++) {
        free(l[k]);
        free(gr[k]);
        net_free(nt[k]);
    }
    dual_free(&x);
    dual_free(&dl);
}

static int group_setup(void **state) {
    (void)state;
    be[CPU] = backend_cpu();
    be[GPU] = backend_get(BACKEND_DEVICE_CUDA);
    if (!be[GPU]) {
        print_message("test_backend_gpu: every test is skipped: %s\n", cnt_err_msg());
        return 0;
    }
    if (be[GPU]->describe) {
        char desc[256];
        be[GPU]->describe(desc, sizeof desc);
        print_message("test_backend_gpu: comparing %s with the CPU backend\n", desc);
    }
    return 0;
}

/* Each test starts in FP32 math and the NCHW layout on both sides, under
 * weights epoch 0, whatever a failed TF32/BF16/FP16 or NHWC test left behind
 * (a failure leaves the test at once, before its own restoring calls). */
static int fp32_math(void **state) {
    (void)state;
    ctx[CPU] = ctx[GPU] = (backend_ctx){0};
    cur_layout = BACKEND_LAYOUT_NCHW;
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_memory_transfers, fp32_math),
        cmocka_unit_test_setup(test_conv_fwd_fp32, fp32_math),
        cmocka_unit_test_setup(test_conv_bwd_data_fp32, fp32_math),
        cmocka_unit_test_setup(test_conv_bwd_filter_fp32, fp32_math),
        cmocka_unit_test_setup(test_gemm_fp32, fp32_math),
        cmocka_unit_test_setup(test_conv_gemm_tf32, fp32_math),
        cmocka_unit_test_setup(test_conv_gemm_bf16, fp32_math),
        cmocka_unit_test_setup(test_conv_gemm_fp16, fp32_math),
        cmocka_unit_test_setup(test_conv_bwd_pair, fp32_math),
        cmocka_unit_test_setup(test_conv_nhwc_fp32_tf32, fp32_math),
        cmocka_unit_test_setup(test_conv_nhwc_bf16, fp32_math),
        cmocka_unit_test_setup(test_conv_nhwc_fp16, fp32_math),
        cmocka_unit_test_setup(test_conv_filter_cache, fp32_math),
        cmocka_unit_test_setup(test_conv_graph_api, fp32_math),
        cmocka_unit_test_setup(test_conv_plans_text, fp32_math),
        cmocka_unit_test_setup(test_conv_graph_plans_kept, fp32_math),
        cmocka_unit_test_setup(test_reduced_overflow, fp32_math),
        cmocka_unit_test_setup(test_find_nonfinite, fp32_math),
        cmocka_unit_test_setup(test_bias_fwd_bwd, fp32_math),
        cmocka_unit_test_setup(test_bias_fwd_bwd_nhwc, fp32_math),
        cmocka_unit_test_setup(test_bn_fwd_train, fp32_math),
        cmocka_unit_test_setup(test_bn_fwd_infer, fp32_math),
        cmocka_unit_test_setup(test_bn_bwd, fp32_math),
        cmocka_unit_test_setup(test_bn_nhwc, fp32_math),
        cmocka_unit_test_setup(test_bn_nhwc_unaligned, fp32_math),
        cmocka_unit_test_setup(test_pool_fwd_bwd, fp32_math),
        cmocka_unit_test_setup(test_max_pool_ties_first_max, fp32_math),
        cmocka_unit_test_setup(test_pool_nhwc, fp32_math),
        cmocka_unit_test_setup(test_relu, fp32_math),
        cmocka_unit_test_setup(test_add_axpy_mul, fp32_math),
        cmocka_unit_test_setup(test_dropout_mask_bitwise, fp32_math),
        cmocka_unit_test(test_upload_small),
        cmocka_unit_test_setup(test_channel_copy, fp32_math),
        cmocka_unit_test_setup(test_channel_copy_nhwc, fp32_math),
        cmocka_unit_test_setup(test_convert_layout, fp32_math),
        cmocka_unit_test_setup(test_softmax_xent, fp32_math),
        cmocka_unit_test_setup(test_sgd_update, fp32_math),
        cmocka_unit_test_setup(test_lars_ops, fp32_math),
        cmocka_unit_test_setup(test_lowrank_ops, fp32_math),
        cmocka_unit_test_setup(test_fences_and_sync_transfers, fp32_math),
        cmocka_unit_test_setup(test_resnet20_train_step, fp32_math),
        cmocka_unit_test_setup(test_resnet20_train_step_nhwc, fp32_math),
        cmocka_unit_test_setup(test_act16_ops, fp32_math),
        cmocka_unit_test_setup(test_bn_act_fused, fp32_math),
        cmocka_unit_test_setup(test_act16_resnet20, fp32_math),
    };
    /* CNT_TEST_FILTER=NAME runs only the tests NAME matches (cmocka's
     * pattern: * and ?), as tools/dev/gpu_check.sh runs a mutant's one test */
    const char *only = getenv("CNT_TEST_FILTER");
    if (only && *only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests_name("backend_gpu", tests, group_setup, NULL);
}
