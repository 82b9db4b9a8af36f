/*
 * model/backend_cpu16.c - 16-bit activation storage (backend_ctx.act = bf16
 * or fp16) on the CPU: a table on top of the CPU's fp32 one (OpenBLAS, or
 * oneDNN's on top of it) whose ops, in a 16-bit context, widen the
 * activations they read into fp32 scratch, run the fp32 op, and round what
 * it wrote back to 16 bits once. In an fp32 context every op is the fp32
 * table's own.
 *
 * This is the definition of 16-bit storage (model/backend.h, backend_dtype)
 * in code: every op computes in fp32 and rounds its result once, so the
 * numbers are those of a GPU kernel that reads 16-bit operands and
 * accumulates in fp32, up to summation order, and the GPU's tests compare
 * with them. The CPU gains no speed from it (each op passes over its
 * operands twice more) and keeps the scratch below, so its memory is saved
 * in the tensors the net keeps, not in the ops' peak.
 *
 * Scratch: per thread, one grown buffer per operand slot (SLOTS), each at
 * most the largest activation tensor in fp32; the workspace the memory
 * estimate counts (conv_workspace, gemm_workspace) includes them.
 */
#include "model/backend_impl.h"
#include "common/check.h"
#include "common/half.h"

#include <string.h>

/* Elementwise ops convert in chunks of this many values, on the stack. */
#define CHUNK 1024
/* Conversions of fewer values than this stay on one thread. */
#define PAR_MIN 65536

/* Operand slots: an op's widened x, y, z, dy, dx, dz (SLOT_X ...) each have
 * a buffer, so an op never hands one buffer to two of its operands (where
 * the caller aliases two, the adapter aliases their copies). */
enum { SLOT_X, SLOT_Y, SLOT_Z, SLOT_DY, SLOT_DX, SLOT_DZ, SLOTS };

static const backend *base; /* the fp32 table */
static backend table;
static _Thread_local cpu_buf slot_buf[SLOTS];

/* ---------------------------------------------------------------- conversion */

static void to_f32(backend_dtype t, float *dst, const void *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += PAR_MIN / 4) {
        size_t m = n - i0 < PAR_MIN / 4 ? n - i0 : PAR_MIN / 4;
        const uint16_t *s = (const uint16_t *)src + i0;
        if (t == BACKEND_DTYPE_BF16) bf16_to_float_array(dst + i0, s, m);
        else fp16_to_float_array(dst + i0, s, m);
    }
}

static void from_f32(backend_dtype t, void *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += PAR_MIN / 4) {
        size_t m = n - i0 < PAR_MIN / 4 ? n - i0 : PAR_MIN / 4;
        uint16_t *d = (uint16_t *)dst + i0;
        if (t == BACKEND_DTYPE_BF16) bf16_from_float_array(d, src + i0, m);
        else fp16_from_float_array(d, src + i0, m);
    }
}

/* An fp32 copy of the n activations at src in slot k (NULL for NULL). */
static float *widen(const backend_ctx *ctx, int k, const void *src, size_t n) {
    if (!src) return NULL;
    float *t = cpu_buf_get(&slot_buf[k], n ? n : 1);
    to_f32(ctx->act, t, src, n);
    return t;
}

/* Slot k for an fp32 result of n values to be written back to dst: dst's
 * values when the op adds to them (accumulate), else uninitialised. */
static float *result(const backend_ctx *ctx, int k, const void *dst, size_t n, int accumulate) {
    if (!dst) return NULL;
    return accumulate ? widen(ctx, k, dst, n) : cpu_buf_get(&slot_buf[k], n ? n : 1);
}

/* dst = t rounded to ctx's type (nothing for NULL). */
static void narrow(const backend_ctx *ctx, const float *t, void *dst, size_t n) {
    if (dst) from_f32(ctx->act, dst, t, n);
}

static backend_ctx f32(const backend_ctx *ctx) {
    backend_ctx c = *ctx;
    c.act = BACKEND_DTYPE_FP32;
    return c;
}

static int is16(const backend_ctx *ctx) {
    CNT_ASSERT(ctx->act == BACKEND_DTYPE_FP32 || ctx->act == BACKEND_DTYPE_BF16 || ctx->act == BACKEND_DTYPE_FP16);
    return ctx->act != BACKEND_DTYPE_FP32;
}

/* ---------------------------------------------------------------- convolution */

static void a_conv_fwd(const backend_ctx *ctx, const conv_params *p, const void *x, const float *w, void *y) {
    if (!is16(ctx)) {
        base->conv_fwd(ctx, p, x, w, y);
        return;
    }
    backend_ctx c = f32(ctx);
    float *yt = result(ctx, SLOT_Y, y, conv_out_count(p), 0);
    base->conv_fwd(&c, p, widen(ctx, SLOT_X, x, conv_in_count(p)), w, yt);
    narrow(ctx, yt, y, conv_out_count(p));
}

static void a_conv_bwd_data(const backend_ctx *ctx, const conv_params *p, const void *dy, const float *w, void *dx,
                            int accumulate, int paired) {
    if (!is16(ctx)) {
        base->conv_bwd_data(ctx, p, dy, w, dx, accumulate, paired);
        return;
    }
    backend_ctx c = f32(ctx);
    float *dxt = result(ctx, SLOT_DX, dx, conv_in_count(p), accumulate);
    base->conv_bwd_data(&c, p, widen(ctx, SLOT_DY, dy, conv_out_count(p)), w, dxt, accumulate, 0);
    narrow(ctx, dxt, dx, conv_in_count(p));
}

static void a_conv_bwd_filter(const backend_ctx *ctx, const conv_params *p, const void *x, const void *dy,
                              float *dw) {
    if (!is16(ctx)) {
        base->conv_bwd_filter(ctx, p, x, dy, dw);
        return;
    }
    backend_ctx c = f32(ctx);
    base->conv_bwd_filter(&c, p, widen(ctx, SLOT_X, x, conv_in_count(p)), widen(ctx, SLOT_DY, dy, conv_out_count(p)),
                          dw);
}

static size_t a_conv_filter_kept(const backend_ctx *ctx, const conv_params *p) {
    backend_ctx c = f32(ctx);
    return base->conv_filter_kept ? base->conv_filter_kept(&c, p) : 0;
}

static void a_conv_describe(const backend_ctx *ctx, const conv_params *p, char *buf, size_t len) {
    backend_ctx c = f32(ctx);
    backend_conv_describe(base, &c, p, buf, len);
}

/* ---------------------------------------------------------------- bias */

static void a_bias_fwd(const backend_ctx *ctx, int N, int C, int HW, const float *b, void *y) {
    if (!is16(ctx)) {
        base->bias_fwd(ctx, N, C, HW, b, y);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t n = (size_t)N * C * HW;
    float *yt = widen(ctx, SLOT_Y, y, n);
    base->bias_fwd(&c, N, C, HW, b, yt);
    narrow(ctx, yt, y, n);
}

static void a_bias_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *dy, float *db) {
    if (!is16(ctx)) {
        base->bias_bwd(ctx, N, C, HW, dy, db);
        return;
    }
    backend_ctx c = f32(ctx);
    base->bias_bwd(&c, N, C, HW, widen(ctx, SLOT_DY, dy, (size_t)N * C * HW), db);
}

/* ---------------------------------------------------------------- batch norm */

static void a_bn_act_fwd_train(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *z, int relu,
                               const float *gamma, const float *beta, void *y, float *running_mean,
                               float *running_var, float momentum, float eps, float *save_mean, float *save_invstd,
                               fwd_keep *keep) {
    if (!is16(ctx)) {
        backend_bn_act_fwd_train(base, ctx, N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, momentum,
                                 eps, save_mean, save_invstd, keep);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t n = (size_t)N * C * HW;
    float *yt = result(ctx, SLOT_Y, y, n, 0);
    backend_bn_act_fwd_train(base, &c, N, C, HW, widen(ctx, SLOT_X, x, n), widen(ctx, SLOT_Z, z, n), relu, gamma,
                             beta, yt, running_mean, running_var, momentum, eps, save_mean, save_invstd, keep);
    narrow(ctx, yt, y, n);
}

static void a_bn_fwd_train(const backend_ctx *ctx, int N, int C, int HW, const void *x, const float *gamma,
                           const float *beta, void *y, float *running_mean, float *running_var, float momentum,
                           float eps, float *save_mean, float *save_invstd) {
    if (!is16(ctx)) {
        base->bn_fwd_train(ctx, N, C, HW, x, gamma, beta, y, running_mean, running_var, momentum, eps, save_mean,
                           save_invstd);
        return;
    }
    a_bn_act_fwd_train(ctx, N, C, HW, x, NULL, 0, gamma, beta, y, running_mean, running_var, momentum, eps, save_mean,
                       save_invstd, NULL);
}

static void a_bn_act_fwd_infer(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *z, int relu,
                               const float *gamma, const float *beta, void *y, const float *running_mean,
                               const float *running_var, float eps) {
    if (!is16(ctx)) {
        backend_bn_act_fwd_infer(base, ctx, N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, eps);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t n = (size_t)N * C * HW;
    float *yt = result(ctx, SLOT_Y, y, n, 0);
    backend_bn_act_fwd_infer(base, &c, N, C, HW, widen(ctx, SLOT_X, x, n), widen(ctx, SLOT_Z, z, n), relu, gamma,
                             beta, yt, running_mean, running_var, eps);
    narrow(ctx, yt, y, n);
}

static void a_bn_fwd_infer(const backend_ctx *ctx, int N, int C, int HW, const void *x, const float *gamma,
                           const float *beta, void *y, const float *running_mean, const float *running_var,
                           float eps) {
    if (!is16(ctx)) {
        base->bn_fwd_infer(ctx, N, C, HW, x, gamma, beta, y, running_mean, running_var, eps);
        return;
    }
    a_bn_act_fwd_infer(ctx, N, C, HW, x, NULL, 0, gamma, beta, y, running_mean, running_var, eps);
}

static void a_bn_act_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *y, void *dy,
                         int relu, const float *gamma, const float *beta, const float *save_mean,
                         const float *save_invstd, float eps, void *dx, float *dgamma, float *dbeta,
                         int accumulate_dx, void *dz, int accumulate_dz, const fwd_keep *keep) {
    if (!is16(ctx)) {
        backend_bn_act_bwd(base, ctx, N, C, HW, x, y, dy, relu, gamma, beta, save_mean, save_invstd, eps, dx, dgamma,
                           dbeta, accumulate_dx, dz, accumulate_dz, keep);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t n = (size_t)N * C * HW;
    float *dyt = widen(ctx, SLOT_DY, dy, n);
    /* dz may be dy itself (the add's gradient in place): then its copy is dy's */
    float *dzt = dz == dy ? dyt : result(ctx, SLOT_DZ, dz, n, accumulate_dz);
    float *dxt = result(ctx, SLOT_DX, dx, n, accumulate_dx);
    backend_bn_act_bwd(base, &c, N, C, HW, widen(ctx, SLOT_X, x, n), relu ? widen(ctx, SLOT_Y, y, n) : NULL, dyt,
                       relu, gamma, beta, save_mean, save_invstd, eps, dxt, dgamma, dbeta, accumulate_dx, dzt,
                       accumulate_dz, keep);
    narrow(ctx, dxt, dx, n);
    narrow(ctx, dzt, dz, n); /* dy's contents are undefined afterwards, so only dz's are written back */
}

static void a_bn_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *dy, const float *gamma,
                     const float *save_mean, const float *save_invstd, float eps, void *dx, float *dgamma,
                     float *dbeta, int accumulate_dx) {
    if (!is16(ctx)) {
        base->bn_bwd(ctx, N, C, HW, x, dy, gamma, save_mean, save_invstd, eps, dx, dgamma, dbeta, accumulate_dx);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t n = (size_t)N * C * HW;
    float *dxt = result(ctx, SLOT_DX, dx, n, accumulate_dx);
    base->bn_bwd(&c, N, C, HW, widen(ctx, SLOT_X, x, n), widen(ctx, SLOT_DY, dy, n), gamma, save_mean, save_invstd,
                 eps, dxt, dgamma, dbeta, accumulate_dx);
    narrow(ctx, dxt, dx, n);
}

/* ---------------------------------------------------------------- pooling */

static void a_pool_fwd(const backend_ctx *ctx, const pool_params *p, const void *x, void *y, fwd_keep *keep) {
    if (!is16(ctx)) {
        base->pool_fwd(ctx, p, x, y, keep);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t nx = (size_t)p->N * p->C * p->H * p->W, ny = (size_t)p->N * p->C * p->P * p->Q;
    float *yt = result(ctx, SLOT_Y, y, ny, 0);
    base->pool_fwd(&c, p, widen(ctx, SLOT_X, x, nx), yt, keep); /* what is kept of x is kept of it widened */
    narrow(ctx, yt, y, ny);
}

static void a_pool_bwd(const backend_ctx *ctx, const pool_params *p, const void *x, const void *y, const void *dy,
                       void *dx, int accumulate, const fwd_keep *keep) {
    if (!is16(ctx)) {
        base->pool_bwd(ctx, p, x, y, dy, dx, accumulate, keep);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t nx = (size_t)p->N * p->C * p->H * p->W, ny = (size_t)p->N * p->C * p->P * p->Q;
    float *dxt = result(ctx, SLOT_DX, dx, nx, accumulate);
    base->pool_bwd(&c, p, widen(ctx, SLOT_X, x, nx), widen(ctx, SLOT_Y, y, ny), widen(ctx, SLOT_DY, dy, ny), dxt,
                   accumulate, keep);
    narrow(ctx, dxt, dx, nx);
}

/* ---------------------------------------------------------------- gemm */

/* Each activation operand widened whole (its span, ld included); C, when
 * it is one, is written back row by row so values between rows stay. */
static void a_gemm(const backend_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                   int lda, const void *B, int ldb, float beta, void *C, int ldc, unsigned act) {
    if (!is16(ctx) || !act) {
        base->gemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 0);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t na = trans_a ? matrix_span(K, M, lda) : matrix_span(M, K, lda);
    size_t nb = trans_b ? matrix_span(N, K, ldb) : matrix_span(K, N, ldb);
    size_t nc = matrix_span(M, N, ldc);
    const void *a = act & GEMM_ACT_A ? widen(ctx, SLOT_X, A, na) : A;
    const void *b = act & GEMM_ACT_B ? widen(ctx, SLOT_Y, B, nb) : B;
    if (!(act & GEMM_ACT_C)) {
        base->gemm(&c, trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc, 0);
        return;
    }
    float *ct = beta != 0.0f ? widen(ctx, SLOT_Z, C, nc) : cpu_buf_get(&slot_buf[SLOT_Z], nc ? nc : 1);
    base->gemm(&c, trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, ct, ldc, 0);
    for (int i = 0; i < M; i++)
        from_f32(ctx->act, (uint16_t *)C + (size_t)i * ldc, ct + (size_t)i * ldc, (size_t)N);
}

/* ---------------------------------------------------------------- elementwise */

/* Each thread converts its chunks of CHUNK values on the stack and runs the
 * fp32 op on them (which stays on that thread at this size): no scratch, the
 * fp32 op's own bits, and in place (y may be an input) is safe, chunk by
 * chunk. */
static size_t chunk_len(size_t n, size_t i0) { return n - i0 < CHUNK ? n - i0 : CHUNK; }

static const void *at(const void *p, size_t i) { return (const uint16_t *)p + i; }
static void *at_w(void *p, size_t i) { return (uint16_t *)p + i; }

static void a_relu_fwd(const backend_ctx *ctx, size_t n, const void *x, void *y) {
    if (!is16(ctx)) {
        base->relu_fwd(ctx, n, x, y);
        return;
    }
    backend_ctx c = f32(ctx);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        float v[CHUNK];
        size_t m = chunk_len(n, i0);
        to_f32(ctx->act, v, at(x, i0), m);
        base->relu_fwd(&c, m, v, v);
        from_f32(ctx->act, at_w(y, i0), v, m);
    }
}

static void a_relu_bwd(const backend_ctx *ctx, size_t n, const void *y, const void *dy, void *dx, int accumulate) {
    if (!is16(ctx)) {
        base->relu_bwd(ctx, n, y, dy, dx, accumulate);
        return;
    }
    backend_ctx c = f32(ctx);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        float vy[CHUNK], vd[CHUNK], vx[CHUNK];
        size_t m = chunk_len(n, i0);
        to_f32(ctx->act, vy, at(y, i0), m);
        to_f32(ctx->act, vd, at(dy, i0), m);
        if (accumulate) to_f32(ctx->act, vx, at(dx, i0), m);
        base->relu_bwd(&c, m, vy, vd, vx, accumulate);
        from_f32(ctx->act, at_w(dx, i0), vx, m);
    }
}

static void a_add(const backend_ctx *ctx, size_t n, const void *a, const void *b, void *y) {
    if (!is16(ctx)) {
        base->add(ctx, n, a, b, y);
        return;
    }
    backend_ctx c = f32(ctx);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        float va[CHUNK], vb[CHUNK];
        size_t m = chunk_len(n, i0);
        to_f32(ctx->act, va, at(a, i0), m);
        to_f32(ctx->act, vb, at(b, i0), m);
        base->add(&c, m, va, vb, va);
        from_f32(ctx->act, at_w(y, i0), va, m);
    }
}

static void a_mul(const backend_ctx *ctx, size_t n, const void *a, const float *mask, void *y, int accumulate) {
    if (!is16(ctx)) {
        base->mul(ctx, n, a, mask, y, accumulate);
        return;
    }
    backend_ctx c = f32(ctx);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        float va[CHUNK], vy[CHUNK];
        size_t m = chunk_len(n, i0);
        to_f32(ctx->act, va, at(a, i0), m);
        if (accumulate) to_f32(ctx->act, vy, at(y, i0), m);
        base->mul(&c, m, va, mask + i0, vy, accumulate);
        from_f32(ctx->act, at_w(y, i0), vy, m);
    }
}

/* ---------------------------------------------------------------- channels and layouts */

/* dst's other channels must stay: it is widened whole and written back whole
 * (its values there unchanged: a 16-bit value widened and rounded is itself). */
static void a_channel_copy(const backend_ctx *ctx, int N, int C, int HW, const void *src, int src_C, int src_off,
                           void *dst, int dst_C, int dst_off, int accumulate) {
    if (!is16(ctx)) {
        base->channel_copy(ctx, N, C, HW, src, src_C, src_off, dst, dst_C, dst_off, accumulate);
        return;
    }
    backend_ctx c = f32(ctx);
    size_t ns = (size_t)N * src_C * HW, nd = (size_t)N * dst_C * HW;
    float *dt = widen(ctx, SLOT_Y, dst, nd);
    base->channel_copy(&c, N, C, HW, widen(ctx, SLOT_X, src, ns), src_C, src_off, dt, dst_C, dst_off, accumulate);
    narrow(ctx, dt, dst, nd);
}

static void a_convert_layout(int N, int C, int HW, const void *src, int src_type, void *dst, int dst_type,
                             int layout, int to_layout, int accumulate) {
    if (src_type == BACKEND_DTYPE_FP32 && dst_type == BACKEND_DTYPE_FP32) {
        base->convert_layout(N, C, HW, src, src_type, dst, dst_type, layout, to_layout, accumulate);
        return;
    }
    size_t n = (size_t)N * C * HW;
    backend_ctx cs = {.act = (backend_dtype)src_type}, cd = {.act = (backend_dtype)dst_type};
    const float *st = is16(&cs) ? widen(&cs, SLOT_X, src, n) : src;
    float *dt = is16(&cd) ? result(&cd, SLOT_Y, dst, n, accumulate) : dst;
    base->convert_layout(N, C, HW, st, BACKEND_DTYPE_FP32, dt, BACKEND_DTYPE_FP32, layout, to_layout, accumulate);
    if (is16(&cd)) narrow(&cd, dt, dst, n);
}

/* ---------------------------------------------------------------- workspace */

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* Besides the fp32 op's own: in a 16-bit context, the slots, each at most
 * the largest activation of the net in fp32. Every activation tensor of the
 * zoo's nets is some convolution's input or output or some linear layer's
 * operand (a pool's, a batch norm's, a concat's are), so SLOTS of the larger
 * of this convolution's input and output bound what an op of the net keeps. */
static size_t a_conv_workspace(const backend_ctx *ctx, const conv_params *p) {
    backend_ctx c = f32(ctx);
    size_t ws = base->conv_workspace(&c, p);
    if (is16(ctx)) ws += SLOTS * max2(conv_in_count(p), conv_out_count(p)) * sizeof(float);
    return ws;
}

/* The activation operands' fp32 copies (a weight operand has none). */
static size_t a_gemm_workspace(const backend_ctx *ctx, int M, int N, int K, unsigned act) {
    backend_ctx c = f32(ctx);
    size_t ws = base->gemm_workspace(&c, M, N, K, act), f = 0;
    if (!is16(ctx)) return ws;
    if (act & GEMM_ACT_A) f += (size_t)M * K;
    if (act & GEMM_ACT_B) f += (size_t)K * N;
    if (act & GEMM_ACT_C) f += (size_t)M * N;
    return ws + f * sizeof(float);
}

/* ---------------------------------------------------------------- the table */

const backend *backend_cpu16(const backend *fp32) {
    CNT_ASSERT(fp32 && fp32->is_cpu && (!base || base == fp32));
    if (base) return &table;
    table = *fp32;
    table.act_types = (1u << BACKEND_DTYPE_FP32) | (1u << BACKEND_DTYPE_BF16) | (1u << BACKEND_DTYPE_FP16);
    table.act_auto = (1u << BACKEND_DTYPE_BF16) | (1u << BACKEND_DTYPE_FP16);
    table.conv_fwd = a_conv_fwd;
    table.conv_bwd_data = a_conv_bwd_data;
    table.conv_bwd_filter = a_conv_bwd_filter;
    /* optional ops stay absent where the fp32 table has none */
    table.conv_filter_kept = fp32->conv_filter_kept ? a_conv_filter_kept : NULL;
    table.conv_describe = fp32->conv_describe ? a_conv_describe : NULL;
    table.bias_fwd = a_bias_fwd;
    table.bias_bwd = a_bias_bwd;
    table.bn_fwd_train = a_bn_fwd_train;
    table.bn_fwd_infer = a_bn_fwd_infer;
    table.bn_bwd = a_bn_bwd;
    table.bn_act_fwd_train = a_bn_act_fwd_train;
    table.bn_act_fwd_infer = a_bn_act_fwd_infer;
    table.bn_act_bwd = a_bn_act_bwd;
    table.pool_fwd = a_pool_fwd;
    table.pool_bwd = a_pool_bwd;
    table.gemm = a_gemm;
    table.relu_fwd = a_relu_fwd;
    table.relu_bwd = a_relu_bwd;
    table.add = a_add;
    table.mul = a_mul;
    table.channel_copy = a_channel_copy;
    table.convert_layout = a_convert_layout;
    table.conv_workspace = a_conv_workspace;
    table.gemm_workspace = a_gemm_workspace;
    base = fp32;
    return &table;
}
