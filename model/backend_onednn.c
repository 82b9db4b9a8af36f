/*
 * model/backend_onednn.c - the CPU backend's blocked layout, on oneDNN.
 *
 * backend_cpu_onednn() is the OpenBLAS backend's table (model/backend_cpu.c)
 * with BACKEND_LAYOUT_BLOCKED added: in NCHW and NHWC every op still runs the
 * OpenBLAS code; in BLOCKED the layout-sensitive ops run here. oneDNN's
 * convolutions are about twice as fast as ours in its channel-blocked layout
 * (nChw8c with AVX2, nChw16c with AVX-512) and slower than ours on plain NCHW
 * (docs/benchmarks.md), so the speed only comes when activations stay blocked
 * from the first convolution to the classifier: that is the layout's contract
 * (model/backend.h), and the net converts only at its input, at a flatten
 * with more than one pixel, and for a dropout mask.
 *
 * In BLOCKED:
 *   - convolutions: oneDNN primitives (forward_training, backward_data,
 *     backward_weights) on the activations in place. Filters stay [K, C, R, S]
 *     in the net (parameters, gradients, checkpoints do not change); each call
 *     reorders them into the primitive's blocked weights format and, for
 *     backward_weights, the gradient back (K*C*R*S values, small beside the
 *     convolution: measured in docs/benchmarks.md). A pass for which oneDNN
 *     has only its reference kernel (backward_weights of a 1-channel stem)
 *     runs the OpenBLAS code on NCHW copies instead.
 *   - batch norm and bias: loops here over one channel block at a time, the
 *     block's B channels in the vector lanes, statistics in double as the
 *     NCHW code does it.
 *   - channel_copy: whole blocks when the slice is block-aligned (every
 *     concat of the zoo's models), else element by element.
 *   - pooling: loops here, the NCHW code's windows (model/pool_rules.h) and
 *     order of sums per lane, so bitwise its results.
 *   - a tensor whose C is not a multiple of B is stored NCHW and its ops go
 *     straight to the NCHW code.
 * Reduced math modes (bf16, fp16) round the convolutions' operands and results
 * as the OpenBLAS backend does (model/backend.h, backend_ctx), around fp32
 * oneDNN convolutions. In BLOCKED the OpenBLAS ops this file calls get the
 * caller's context with the layout NCHW (plain_ctx): the tensors they see
 * there are NCHW ones.
 *
 * Primitives are created once per (pass, shape, thread count) and kept in a
 * cache with their memory objects; each call only sets the data pointers.
 * Scratch (the blocked weights, oneDNN's scratchpad, rounded copies) is grown to the largest use and reused, so after the
 * first step of each shape nothing is allocated. The cache assumes one
 * calling thread, the training thread, as every CPU compute op does.
 *
 * Determinism: oneDNN's CPU convolutions give the same bits for the same
 * inputs, shapes and thread count (their reductions run in a fixed order);
 * the loops here sum in a fixed order, one thread per channel block.
 *
 * Every oneDNN call is checked: a failure ends the process with file:line and
 * oneDNN's status string.
 */
#include "model/backend.h"
#include "model/backend_impl.h"
#include "common/check.h"
#include "common/fileio.h"
#include "model/pool_rules.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DN_CHECK(call)                                                                                        \
    do {                                                                                                      \
        dnnl_status_t st_ = (call);                                                                           \
        if (st_ != dnnl_success)                                                                              \
            cnt_fatal("%s:%d: oneDNN: %s failed: %s", __FILE__, __LINE__, #call, dnnl_status2str(st_));     \
    } while (0)

/* Loops over fewer values than this stay on one thread (as model/backend_cpu.c). */
#define DN_PAR_MIN 32768

static const backend *plain;        /* the OpenBLAS backend: NCHW / NHWC ops, elementwise, gemm */
static int B;                       /* channel block: 8 (AVX2) or 16 (AVX-512) */
static dnnl_engine_t eng;
static dnnl_stream_t strm;

static int blocked(const backend_ctx *ctx) { return ctx->layout == BACKEND_LAYOUT_BLOCKED; }

/* ctx as the OpenBLAS ops called here take it: ctx itself outside
 * BLOCKED; in BLOCKED its NCHW twin (the tensors they get there are NCHW
 * ones). */
static backend_ctx plain_ctx(const backend_ctx *ctx) {
    backend_ctx c = *ctx;
    if (blocked(ctx)) c.layout = BACKEND_LAYOUT_NCHW;
    return c;
}
/* Whether a tensor of C channels is stored in blocks (else NCHW) in BLOCKED. */
static int is_blk(int C) { return C % B == 0; }

/* ------------------------------------------------------------ scratch */

/* Grown to the largest use and kept (cpu_buf, model/backend_impl.h); never
 * empty, so a zero-size scratchpad still gets a valid pointer. */
static float *buf_get(cpu_buf *b, size_t floats) { return cpu_buf_get(b, floats ? floats : 1); }

static struct {
    cpu_buf wei;      /* the filter (or its gradient) in the primitive's blocked format */
    cpu_buf pad;      /* oneDNN's scratchpad */
    cpu_buf tmp;      /* conv_bwd_data with accumulate: the convolution's own result */
    cpu_buf op[2];    /* bf16/fp16: rounded copies of a convolution's two operands */
    cpu_buf lay[2];   /* passes oneDNN runs only by reference: NCHW copies of their operands */
} scr;

/* ------------------------------------------------------------ layout conversion */

/* NCHW <-> BLOCKED: an NCHW tensor [N, C, HW] with C = (C/B)*B is the NCHW
 * tensor [N*C/B, B, HW], and the blocked one is that tensor in NHWC
 * ([N*C/B, HW, B]): the OpenBLAS backend's transpose does it. */
static void dn_convert_layout(int N, int C, int HW, const void *src, int src_type, void *dst, int dst_type,
                              int layout, int to_layout, int accumulate) {
    if (layout != BACKEND_LAYOUT_BLOCKED) {
        plain->convert_layout(N, C, HW, src, src_type, dst, dst_type, layout, to_layout, accumulate);
        return;
    }
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 0);
    if (!is_blk(C) || HW == 1)
        plain->convert_layout(N, C, HW, src, src_type, dst, dst_type, BACKEND_LAYOUT_NCHW, to_layout, accumulate);
    else
        plain->convert_layout(N * (C / B), B, HW, src, src_type, dst, dst_type, BACKEND_LAYOUT_NHWC, to_layout,
                              accumulate);
}

/* ------------------------------------------------------------ convolution primitives */

enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_FILTER };

typedef struct dn_conv {
    int pass, threads;
    conv_params p;
    dnnl_primitive_t prim;
    dnnl_memory_t act_in, act_out; /* fwd: src, dst; bwd_data: diff_dst, diff_src; bwd_filter: src, diff_dst */
    dnnl_memory_t wei;             /* weights (or diff weights) in the primitive's format */
    dnnl_memory_t wei_user;        /* [K, C, R, S] */
    dnnl_primitive_t wei_reorder;  /* user -> primitive (fwd, bwd_data) or back (bwd_filter); NULL: same format */
    dnnl_memory_t pad;
    size_t wei_floats, pad_floats;
    int ref; /* oneDNN has only its reference kernel for this pass: ours runs it (conv_nchw) */
    char impl[48]; /* oneDNN's name for the implementation it chose (dnnl_query_impl_info_str) */
} dn_conv;

static dn_conv *cache;
static int cache_n, cache_cap;

static int same_params(const conv_params *a, const conv_params *b) {
    return a->N == b->N && a->C == b->C && a->H == b->H && a->W == b->W && a->K == b->K && a->R == b->R &&
           a->S == b->S && a->stride_h == b->stride_h && a->stride_w == b->stride_w && a->pad_h == b->pad_h &&
           a->pad_w == b->pad_w;
}

static dnnl_format_tag_t act_tag(int C) {
    if (!is_blk(C)) return dnnl_abcd;
    return B == 16 ? dnnl_aBcd16b : dnnl_aBcd8b;
}

static void mem_from_md(dnnl_memory_t *m, const dnnl_memory_desc_t *md) {
    DN_CHECK(dnnl_memory_create(m, md, eng, DNNL_MEMORY_NONE));
}

static size_t md_floats(const dnnl_memory_desc_t *md) { return dnnl_memory_desc_get_size(md) / sizeof(float); }

static dn_conv *conv_get(int pass, const conv_params *p) {
    int threads = omp_get_max_threads();
    for (int i = 0; i < cache_n; i++)
        if (cache[i].pass == pass && cache[i].threads == threads && same_params(&cache[i].p, p)) return &cache[i];
    if (cache_n == cache_cap) {
        cache_cap = cache_cap ? 2 * cache_cap : 64;
        cache = cnt_realloc(cache, (size_t)cache_cap * sizeof *cache);
    }
    dn_conv *c = &cache[cache_n++];
    memset(c, 0, sizeof *c);
    c->pass = pass;
    c->threads = threads;
    c->p = *p;

    dnnl_dims_t sd = {p->N, p->C, p->H, p->W}, wd = {p->K, p->C, p->R, p->S}, dd = {p->N, p->K, p->P, p->Q};
    dnnl_dims_t strides = {p->stride_h, p->stride_w}, pad_l = {p->pad_h, p->pad_w};
    /* the high-side padding that gives oneDNN our P x Q */
    dnnl_dims_t pad_r = {(p->P - 1) * p->stride_h + p->R - p->H - p->pad_h,
                         (p->Q - 1) * p->stride_w + p->S - p->W - p->pad_w};
    dnnl_memory_desc_t smd, wmd_any, wmd_user, dmd;
    DN_CHECK(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, act_tag(p->C)));
    DN_CHECK(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, act_tag(p->K)));
    DN_CHECK(dnnl_memory_desc_init_by_tag(&wmd_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DN_CHECK(dnnl_memory_desc_init_by_tag(&wmd_user, 4, wd, dnnl_f32, dnnl_oihw));
    dnnl_primitive_attr_t attr;
    DN_CHECK(dnnl_primitive_attr_create(&attr));
    DN_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));

    dnnl_convolution_desc_t fd, bd;
    DN_CHECK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &smd, &wmd_any,
                                                NULL, &dmd, strides, pad_l, pad_r));
    dnnl_primitive_desc_t fpd, pd;
    DN_CHECK(dnnl_primitive_desc_create(&fpd, &fd, pass == PASS_FWD ? attr : NULL, eng, NULL));
    dnnl_query_t wq = dnnl_query_weights_md;
    if (pass == PASS_FWD) {
        pd = fpd;
    } else {
        if (pass == PASS_BWD_DATA) {
            DN_CHECK(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &smd, &wmd_any, &dmd,
                                                              strides, pad_l, pad_r));
        } else {
            DN_CHECK(dnnl_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &smd, &wmd_any, NULL,
                                                                 &dmd, strides, pad_l, pad_r));
            wq = dnnl_query_diff_weights_md;
        }
        DN_CHECK(dnnl_primitive_desc_create(&pd, &bd, attr, eng, fpd));
        DN_CHECK(dnnl_primitive_desc_destroy(fpd));
    }
    DN_CHECK(dnnl_primitive_attr_destroy(attr));
    const char *impl = NULL;
    DN_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    c->ref = impl && strncmp(impl, "ref", 3) == 0;
    snprintf(c->impl, sizeof c->impl, "%s", impl ? impl : "?");
    DN_CHECK(dnnl_primitive_create(&c->prim, pd));

    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, wq, 0);
    const dnnl_memory_desc_t *padmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (!wmd || !padmd) cnt_fatal("%s:%d: oneDNN: convolution primitive has no weights or scratchpad", __FILE__, __LINE__);
    mem_from_md(&c->act_in, pass == PASS_BWD_DATA ? &dmd : &smd);
    mem_from_md(&c->act_out, pass == PASS_FWD ? &dmd : pass == PASS_BWD_DATA ? &smd : &dmd);
    mem_from_md(&c->wei_user, &wmd_user);
    mem_from_md(&c->pad, padmd);
    c->pad_floats = md_floats(padmd);
    if (!dnnl_memory_desc_equal(wmd, &wmd_user)) {
        mem_from_md(&c->wei, wmd);
        c->wei_floats = md_floats(wmd);
        dnnl_primitive_desc_t rpd;
        if (pass == PASS_BWD_FILTER)
            DN_CHECK(dnnl_reorder_primitive_desc_create(&rpd, wmd, eng, &wmd_user, eng, NULL));
        else
            DN_CHECK(dnnl_reorder_primitive_desc_create(&rpd, &wmd_user, eng, wmd, eng, NULL));
        DN_CHECK(dnnl_primitive_create(&c->wei_reorder, rpd));
        DN_CHECK(dnnl_primitive_desc_destroy(rpd));
    }
    DN_CHECK(dnnl_primitive_desc_destroy(pd));
    return c;
}

static void reorder_weights(dn_conv *c) {
    dnnl_exec_arg_t a[2];
    if (c->pass == PASS_BWD_FILTER) {
        a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, c->wei};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, c->wei_user};
    } else {
        a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, c->wei_user};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, c->wei};
    }
    DN_CHECK(dnnl_primitive_execute(c->wei_reorder, strm, 2, a));
}

/* Runs pass `pass` of p: in = src / diff_dst / src, w = weights (NULL for
 * bwd_filter), other = diff_dst for bwd_filter, out = dst / diff_src /
 * [K, C, R, S] diff weights. */
static void conv_run(int pass, const conv_params *p, const float *in, const float *w, const float *other, float *out) {
    dn_conv *c = conv_get(pass, p);
    float *wbuf = c->wei_reorder ? buf_get(&scr.wei, c->wei_floats) : NULL;
    DN_CHECK(dnnl_memory_set_data_handle(c->pad, buf_get(&scr.pad, c->pad_floats)));
    DN_CHECK(dnnl_memory_set_data_handle(c->act_in, (void *)in));
    dnnl_memory_t wmem = c->wei_reorder ? c->wei : c->wei_user;
    if (c->wei_reorder) DN_CHECK(dnnl_memory_set_data_handle(c->wei, wbuf));
    dnnl_exec_arg_t a[4];
    if (pass == PASS_BWD_FILTER) {
        DN_CHECK(dnnl_memory_set_data_handle(c->act_out, (void *)other));
        DN_CHECK(dnnl_memory_set_data_handle(c->wei_user, out));
        a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, c->act_in};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, c->act_out};
        a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, wmem};
    } else {
        DN_CHECK(dnnl_memory_set_data_handle(c->wei_user, (void *)w));
        if (c->wei_reorder) reorder_weights(c);
        DN_CHECK(dnnl_memory_set_data_handle(c->act_out, out));
        a[0] = (dnnl_exec_arg_t){pass == PASS_FWD ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST, c->act_in};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wmem};
        a[2] = (dnnl_exec_arg_t){pass == PASS_FWD ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC, c->act_out};
    }
    a[3] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, c->pad};
    DN_CHECK(dnnl_primitive_execute(c->prim, strm, 4, a));
    if (pass == PASS_BWD_FILTER && c->wei_reorder) reorder_weights(c);
    DN_CHECK(dnnl_stream_wait(strm));
}

/* bf16/fp16 (the context's math mode): a rounded copy of src in slot k;
 * src itself in fp32. */
static const float *rounded(int math, int k, const float *src, size_t n) {
    return cpu_math_reduced(math) ? cpu_rounded_copy(math, &scr.op[k], src, n) : src;
}

/* ---- where oneDNN has only its reference kernel ----
 * oneDNN's reference convolutions are scalar loops: backward_weights of a
 * 1-channel stem (Fashion-MNIST's first layer) took 444 ms of a 630 ms step.
 * Such passes run the OpenBLAS code on NCHW copies of the blocked operands
 * (it rounds for reduced math itself). */

/* x [N, C, HW] in BLOCKED as NCHW: x itself when stored NCHW, else a copy in slot k. */
static const float *as_nchw(int k, int N, int C, int HW, const float *x) {
    if (!is_blk(C) || HW == 1) return x;
    float *t = buf_get(&scr.lay[k], (size_t)N * C * HW);
    dn_convert_layout(N, C, HW, x, BACKEND_DTYPE_FP32, t, BACKEND_DTYPE_FP32, BACKEND_LAYOUT_BLOCKED, 0, 0);
    return t;
}

/* Where an NCHW result for y goes: y itself when stored NCHW, else slot k. */
static float *nchw_out(int k, int N, int C, int HW, float *y) {
    if (!is_blk(C) || HW == 1) return y;
    return buf_get(&scr.lay[k], (size_t)N * C * HW);
}

static void from_nchw(int N, int C, int HW, const float *t, float *y) {
    if (t != y) dn_convert_layout(N, C, HW, t, BACKEND_DTYPE_FP32, y, BACKEND_DTYPE_FP32, BACKEND_LAYOUT_BLOCKED, 1, 0);
}

static int ref_only(int pass, const conv_params *p) { return conv_get(pass, p)->ref; }

static void dn_conv_fwd(const backend_ctx *ctx, const conv_params *p, const void *xv, const float *w, void *yv) {
    const float *x = xv;
    float *y = yv;
    if (!blocked(ctx)) {
        plain->conv_fwd(ctx, p, x, w, y);
        return;
    }
    int HW = p->H * p->W, PQ = p->P * p->Q, math = ctx->math;
    if (ref_only(PASS_FWD, p)) {
        backend_ctx nc = plain_ctx(ctx);
        float *yt = nchw_out(1, p->N, p->K, PQ, y);
        plain->conv_fwd(&nc, p, as_nchw(0, p->N, p->C, HW, x), w, yt);
        from_nchw(p->N, p->K, PQ, yt, y);
        return;
    }
    conv_run(PASS_FWD, p, rounded(math, 0, x, conv_in_count(p)), rounded(math, 1, w, conv_w_count(p)), NULL, y);
    if (cpu_math_reduced(math)) cpu_round_to_math(math, y, y, conv_out_count(p));
}

static void dn_conv_bwd_data(const backend_ctx *ctx, const conv_params *p, const void *dyv, const float *w,
                             void *dxv, int accumulate, int paired) {
    const float *dy = dyv;
    float *dx = dxv;
    if (!blocked(ctx)) {
        plain->conv_bwd_data(ctx, p, dy, w, dx, accumulate, paired);
        return;
    }
    size_t n = conv_in_count(p);
    int HW = p->H * p->W, PQ = p->P * p->Q, math = ctx->math;
    if (ref_only(PASS_BWD_DATA, p)) {
        backend_ctx nc = plain_ctx(ctx);
        float *dxt = accumulate ? (float *)as_nchw(1, p->N, p->C, HW, dx) : nchw_out(1, p->N, p->C, HW, dx);
        plain->conv_bwd_data(&nc, p, as_nchw(0, p->N, p->K, PQ, dy), w, dxt, accumulate, 0);
        from_nchw(p->N, p->C, HW, dxt, dx);
        return;
    }
    /* oneDNN's backward_data overwrites: accumulate through a copy */
    float *o = accumulate ? buf_get(&scr.tmp, n) : dx;
    conv_run(PASS_BWD_DATA, p, rounded(math, 0, dy, conv_out_count(p)), rounded(math, 1, w, conv_w_count(p)), NULL,
             o);
    if (accumulate) plain->axpy(n, 1.0f, o, dx, 1);
    if (cpu_math_reduced(math)) cpu_round_to_math(math, dx, dx, n);
}

static void dn_conv_bwd_filter(const backend_ctx *ctx, const conv_params *p, const void *xv, const void *dyv,
                               float *dw) {
    const float *x = xv;
    const float *dy = dyv;
    if (!blocked(ctx)) {
        plain->conv_bwd_filter(ctx, p, x, dy, dw);
        return;
    }
    int math = ctx->math;
    if (ref_only(PASS_BWD_FILTER, p)) {
        backend_ctx nc = plain_ctx(ctx);
        plain->conv_bwd_filter(&nc, p, as_nchw(0, p->N, p->C, p->H * p->W, x),
                               as_nchw(1, p->N, p->K, p->P * p->Q, dy), dw);
        return;
    }
    conv_run(PASS_BWD_FILTER, p, rounded(math, 0, x, conv_in_count(p)), NULL, rounded(math, 1, dy, conv_out_count(p)),
             dw);
    if (cpu_math_reduced(math)) cpu_round_to_math(math, dw, dw, conv_w_count(p));
}

/* ------------------------------------------------------------ bias and batch norm, one block at a time */

/* Tensor [N, C, HW] in BLOCKED with C % B == 0: block cb of image n starts at
 * ((n*(C/B) + cb)*HW)*B, pixel i of it at +i*B, channel cb*B + j at +j. */
static inline size_t blk_base(int C, int HW, int n, int cb) { return ((size_t)n * (C / B) + cb) * HW * B; }

/* Whether a per-channel op on [N, C, HW] runs the NCHW code (same bytes). */
static int chan_plain(const backend_ctx *ctx, int C, int HW) { return !blocked(ctx) || !is_blk(C) || HW == 1; }

static void dn_bias_fwd(const backend_ctx *ctx, int N, int C, int HW, const float *b, void *yv) {
    float *y = yv;
    if (chan_plain(ctx, C, HW)) {
        backend_ctx pc = plain_ctx(ctx);
        plain->bias_fwd(&pc, N, C, HW, b, y);
        return;
    }
    int nb = C / B;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)N * C * HW >= DN_PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < nb; cb++) {
            float *yp = y + blk_base(C, HW, n, cb);
            const float *bp = b + cb * B;
            for (int i = 0; i < HW; i++)
#pragma omp simd
                for (int j = 0; j < B; j++) yp[(size_t)i * B + j] += bp[j];
        }
}

static void dn_bias_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *dyv, float *db) {
    const float *dy = dyv;
    if (chan_plain(ctx, C, HW)) {
        backend_ctx pc = plain_ctx(ctx);
        plain->bias_bwd(&pc, N, C, HW, dy, db);
        return;
    }
    int nb = C / B;
#pragma omp parallel for schedule(static) if ((size_t)N * C * HW >= DN_PAR_MIN)
    for (int cb = 0; cb < nb; cb++) {
        double s[16] = {0};
        for (int n = 0; n < N; n++) {
            const float *dp = dy + blk_base(C, HW, n, cb);
            for (int i = 0; i < HW; i++)
#pragma omp simd
                for (int j = 0; j < B; j++) s[j] += dp[(size_t)i * B + j];
        }
        for (int j = 0; j < B; j++) db[cb * B + j] = (float)s[j];
    }
}

/* The NCHW code's formulas (model/backend_cpu.c), with the B channels of a
 * block in the vector lanes. */
/* One block of B channels over HW positions: y = act((x - m) * scale + sh
 * + z), z where zp is not NULL, ReLU where relu (the NCHW code's steps). */
static void dn_bn_apply_block(int HW, const float *xp, const float *zp, int relu, const float *m,
                              const float *scale, const float *sh, float *yp) {
    for (int i = 0; i < HW; i++) {
        size_t o = (size_t)i * B;
        if (zp && relu) {
#pragma omp simd
            for (int j = 0; j < B; j++) {
                float v = (xp[o + j] - m[j]) * scale[j] + sh[j] + zp[o + j];
                yp[o + j] = v < 0.0f ? 0.0f : v;
            }
        } else if (zp) {
#pragma omp simd
            for (int j = 0; j < B; j++) yp[o + j] = (xp[o + j] - m[j]) * scale[j] + sh[j] + zp[o + j];
        } else if (relu) {
#pragma omp simd
            for (int j = 0; j < B; j++) {
                float v = (xp[o + j] - m[j]) * scale[j] + sh[j];
                yp[o + j] = v < 0.0f ? 0.0f : v;
            }
        } else {
#pragma omp simd
            for (int j = 0; j < B; j++) yp[o + j] = (xp[o + j] - m[j]) * scale[j] + sh[j];
        }
    }
}

/* The fused batch norm (bn_act_*) and, with z NULL and relu 0, the plain
 * one. */
static void dn_bn_act_fwd_train(const backend_ctx *ctx, int N, int C, int HW, const void *xv, const void *zv,
                                int relu, const float *gamma, const float *beta, void *yv, float *running_mean,
                                float *running_var, float momentum, float eps, float *save_mean,
                                float *save_invstd, fwd_keep *keep) {
    const float *x = xv;
    const float *z = zv;
    float *y = yv;
    if (chan_plain(ctx, C, HW)) {
        backend_ctx pc = plain_ctx(ctx);
        plain->bn_act_fwd_train(&pc, N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, momentum, eps,
                                save_mean, save_invstd, keep);
        return;
    }
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1);
    size_t M = (size_t)N * HW;
    int nb = C / B;
#pragma omp parallel for schedule(static) if (M * C >= DN_PAR_MIN)
    for (int cb = 0; cb < nb; cb++) {
        /* one pass in double over values shifted by each channel's first value */
        double x0[16], s1[16] = {0}, s2[16] = {0};
        const float *first = x + blk_base(C, HW, 0, cb);
        for (int j = 0; j < B; j++) x0[j] = first[j];
        for (int n = 0; n < N; n++) {
            const float *xp = x + blk_base(C, HW, n, cb);
            for (int i = 0; i < HW; i++)
#pragma omp simd
                for (int j = 0; j < B; j++) {
                    double d = (double)xp[(size_t)i * B + j] - x0[j];
                    s1[j] += d;
                    s2[j] += d * d;
                }
        }
        float m[16], scale[16], sh[16];
        for (int j = 0; j < B; j++) {
            int c = cb * B + j;
            double dmean = s1[j] / (double)M, mean = x0[j] + dmean;
            double ss = s2[j] - s1[j] * dmean;
            if (ss < 0.0) ss = 0.0;
            double invstd = 1.0 / sqrt(ss / (double)M + (double)eps);
            m[j] = (float)mean;
            scale[j] = (float)((double)gamma[c] * invstd);
            sh[j] = beta[c];
            save_mean[c] = (float)mean;
            save_invstd[c] = (float)invstd;
            double unbiased = M > 1 ? ss / (double)(M - 1) : 0.0;
            running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * (float)mean;
            running_var[c] = (1.0f - momentum) * running_var[c] + momentum * (float)unbiased;
        }
        for (int n = 0; n < N; n++) {
            size_t o = blk_base(C, HW, n, cb);
            dn_bn_apply_block(HW, x + o, z ? z + o : NULL, relu, m, scale, sh, y + o);
        }
    }
}

static void dn_bn_fwd_train(const backend_ctx *ctx, int N, int C, int HW, const void *xv, const float *gamma,
                            const float *beta, void *yv, float *running_mean, float *running_var, float momentum,
                            float eps, float *save_mean, float *save_invstd) {
    const float *x = xv;
    float *y = yv;
    dn_bn_act_fwd_train(ctx, N, C, HW, x, NULL, 0, gamma, beta, y, running_mean, running_var, momentum, eps,
                        save_mean, save_invstd, NULL);
}

static void dn_bn_act_fwd_infer(const backend_ctx *ctx, int N, int C, int HW, const void *xv, const void *zv,
                                int relu, const float *gamma, const float *beta, void *yv,
                                const float *running_mean, const float *running_var, float eps) {
    const float *x = xv;
    const float *z = zv;
    float *y = yv;
    if (chan_plain(ctx, C, HW)) {
        backend_ctx pc = plain_ctx(ctx);
        plain->bn_act_fwd_infer(&pc, N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, eps);
        return;
    }
    CNT_ASSERT(N >= 0 && C >= 1 && HW >= 1);
    int nb = C / B;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)N * C * HW >= DN_PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < nb; cb++) {
            float m[16], scale[16], sh[16];
            for (int j = 0; j < B; j++) {
                int c = cb * B + j;
                m[j] = running_mean[c];
                scale[j] = (float)((double)gamma[c] / sqrt((double)running_var[c] + (double)eps));
                sh[j] = beta[c];
            }
            size_t o = blk_base(C, HW, n, cb);
            dn_bn_apply_block(HW, x + o, z ? z + o : NULL, relu, m, scale, sh, y + o);
        }
}

static void dn_bn_fwd_infer(const backend_ctx *ctx, int N, int C, int HW, const void *xv, const float *gamma,
                            const float *beta, void *yv, const float *running_mean, const float *running_var,
                            float eps) {
    const float *x = xv;
    float *y = yv;
    dn_bn_act_fwd_infer(ctx, N, C, HW, x, NULL, 0, gamma, beta, y, running_mean, running_var, eps);
}

/* bn_act_bwd, leaving dy as it was (bn_bwd: y NULL, relu 0, dz NULL). The
 * gradient g = relu ? dy * (y > 0) : dy is recomputed in each pass. */
static void dn_bn_bwd_any(const backend_ctx *ctx, int N, int C, int HW, const float *x, const float *y,
                          const float *dy, int relu, const float *gamma, const float *save_mean,
                          const float *save_invstd, float eps, float *dx, float *dgamma, float *dbeta,
                          int accumulate_dx, float *dz, int accumulate_dz) {
    if (chan_plain(ctx, C, HW)) {
        backend_ctx pc = plain_ctx(ctx);
        if (relu || dz) /* the OpenBLAS table's leaves dy as it was */
            plain->bn_act_bwd(&pc, N, C, HW, x, y, (float *)dy, relu, gamma, NULL, save_mean, save_invstd, eps, dx,
                              dgamma, dbeta, accumulate_dx, dz, accumulate_dz, NULL);
        else
            plain->bn_bwd(&pc, N, C, HW, x, dy, gamma, save_mean, save_invstd, eps, dx, dgamma, dbeta,
                          accumulate_dx);
        return;
    }
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1);
    size_t M = (size_t)N * HW;
    int nb = C / B;
#pragma omp parallel for schedule(static) if (M * C >= DN_PAR_MIN)
    for (int cb = 0; cb < nb; cb++) {
        float mean[16];
        double sdy[16] = {0}, sdyx[16] = {0};
        for (int j = 0; j < B; j++) mean[j] = save_mean[cb * B + j];
        for (int n = 0; n < N; n++) {
            const float *xp = x + blk_base(C, HW, n, cb);
            const float *dp = dy + blk_base(C, HW, n, cb);
            const float *yp = relu ? y + blk_base(C, HW, n, cb) : NULL;
            for (int i = 0; i < HW; i++)
#pragma omp simd
                for (int j = 0; j < B; j++) {
                    size_t k = (size_t)i * B + j;
                    float g = relu ? cpu_relu_grad(yp[k], dp[k]) : dp[k];
                    sdy[j] += g;
                    sdyx[j] += (double)g * (double)(xp[k] - mean[j]);
                }
        }
        float a[16], mdy[16], b[16];
        for (int j = 0; j < B; j++) {
            int c = cb * B + j;
            double invstd = save_invstd[c];
            dgamma[c] = (float)(sdyx[j] * invstd);
            dbeta[c] = (float)sdy[j];
            a[j] = (float)((double)gamma[c] * invstd);
            mdy[j] = (float)(sdy[j] / (double)M);
            b[j] = (float)(invstd * invstd * sdyx[j] / (double)M);
        }
        for (int n = 0; n < N; n++) {
            const float *xp = x + blk_base(C, HW, n, cb);
            const float *dp = dy + blk_base(C, HW, n, cb);
            float *gp = dx + blk_base(C, HW, n, cb);
            const float *yp = relu ? y + blk_base(C, HW, n, cb) : NULL;
            float *zp = dz ? dz + blk_base(C, HW, n, cb) : NULL;
            for (int i = 0; i < HW; i++) {
                size_t o = (size_t)i * B;
                float g[16];
                if (relu) {
#pragma omp simd
                    for (int j = 0; j < B; j++) g[j] = cpu_relu_grad(yp[o + j], dp[o + j]);
                } else {
#pragma omp simd
                    for (int j = 0; j < B; j++) g[j] = dp[o + j];
                }
                if (zp && accumulate_dz) {
#pragma omp simd
                    for (int j = 0; j < B; j++) zp[o + j] += 1.0f * g[j];
                } else if (zp) {
#pragma omp simd
                    for (int j = 0; j < B; j++) zp[o + j] = 1.0f * g[j];
                }
                if (accumulate_dx) {
#pragma omp simd
                    for (int j = 0; j < B; j++) gp[o + j] += a[j] * (g[j] - mdy[j] - (xp[o + j] - mean[j]) * b[j]);
                } else {
#pragma omp simd
                    for (int j = 0; j < B; j++) gp[o + j] = a[j] * (g[j] - mdy[j] - (xp[o + j] - mean[j]) * b[j]);
                }
            }
        }
    }
}

static void dn_bn_act_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *xv, const void *yv, void *dyv,
                          int relu, const float *gamma, const float *beta, const float *save_mean,
                          const float *save_invstd, float eps, void *dxv, float *dgamma, float *dbeta,
                          int accumulate_dx, void *dzv, int accumulate_dz, const fwd_keep *keep) {
    (void)beta; /* the mask is recomputed from y: nothing kept */
    (void)keep;
    const float *x = xv;
    const float *y = yv;
    float *dy = dyv;
    float *dx = dxv;
    float *dz = dzv;
    dn_bn_bwd_any(ctx, N, C, HW, x, y, dy, relu, gamma, save_mean, save_invstd, eps, dx, dgamma, dbeta, accumulate_dx,
                  dz, accumulate_dz);
}

static void dn_bn_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *xv, const void *dyv,
                      const float *gamma, const float *save_mean, const float *save_invstd, float eps, void *dxv,
                      float *dgamma, float *dbeta, int accumulate_dx) {
    const float *x = xv;
    const float *dy = dyv;
    float *dx = dxv;
    dn_bn_bwd_any(ctx, N, C, HW, x, NULL, dy, 0, gamma, save_mean, save_invstd, eps, dx, dgamma, dbeta, accumulate_dx,
                  NULL, 0);
}

/* ------------------------------------------------------------ pooling, one block at a time */

/* The NCHW code's windows (model/pool_rules.h: torch's rules) and its order
 * of sums, per lane: a blocked pool gives bitwise the NCHW results. Max
 * pooling's backward recomputes each window's first maximum from x. */

/* Window [h0, h1) x [w0, w1) of a block's planes xp (W columns): each lane's
 * first maximum, scanning rows then columns (pr_take: a NaN wins and the
 * first NaN stays), in best[], and the pixel it is at in at[]. */
static void blk_window_max(const float *xp, int W, int h0, int h1, int w0, int w1, float *best, int *at) {
    for (int l = 0; l < B; l++) {
        best[l] = -INFINITY;
        at[l] = h0 * W + w0;
    }
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) {
            int k = h * W + w;
            const float *v = xp + (size_t)k * B;
#pragma omp simd
            for (int l = 0; l < B; l++) {
                int take = pr_take(v[l], best[l]);
                best[l] = take ? v[l] : best[l];
                at[l] = take ? k : at[l];
            }
        }
}

static void dn_pool_fwd(const backend_ctx *ctx, const pool_params *p, const void *xv, void *yv, fwd_keep *keep) {
    const float *x = xv;
    float *y = yv;
    if (!blocked(ctx) || !is_blk(p->C)) {
        backend_ctx pc = plain_ctx(ctx);
        plain->pool_fwd(&pc, p, x, y, keep);
        return;
    }
    CNT_ASSERT(p->N >= 0 && p->C >= 1 && p->H >= 1 && p->W >= 1 && p->P >= 1 && p->Q >= 1);
    pr_axis ra = pr_rows(p), ca = pr_cols(p);
    int nb = p->C / B, HW = p->H * p->W, PQ = p->P * p->Q;
    int is_max = p->mode == POOL_MODE_MAX;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)p->N * p->C * HW >= DN_PAR_MIN)
    for (int n = 0; n < p->N; n++)
        for (int cb = 0; cb < nb; cb++) {
            const float *xp = x + blk_base(p->C, HW, n, cb);
            float *yp = y + blk_base(p->C, PQ, n, cb);
            for (int i = 0; i < p->P; i++) {
                int h0, h1, rc;
                pr_window(p->mode, ra, i, &h0, &h1, &rc);
                for (int j = 0; j < p->Q; j++) {
                    int w0, w1, cc;
                    pr_window(p->mode, ca, j, &w0, &w1, &cc);
                    float *o = yp + ((size_t)i * p->Q + j) * B;
                    if (is_max) {
                        int at[16];
                        blk_window_max(xp, p->W, h0, h1, w0, w1, o, at);
                        continue;
                    }
                    float acc[16] = {0};
                    for (int h = h0; h < h1; h++)
                        for (int w = w0; w < w1; w++) {
                            const float *v = xp + ((size_t)h * p->W + w) * B;
#pragma omp simd
                            for (int l = 0; l < B; l++) acc[l] += v[l];
                        }
                    float div = (float)(rc * cc);
                    for (int l = 0; l < B; l++) o[l] = acc[l] / div;
                }
            }
        }
}

static void dn_pool_bwd(const backend_ctx *ctx, const pool_params *p, const void *xv, const void *yv,
                        const void *dyv, void *dxv, int accumulate, const fwd_keep *keep) {
    const float *x = xv;
    const float *y = yv;
    const float *dy = dyv;
    float *dx = dxv;
    if (!blocked(ctx) || !is_blk(p->C)) {
        backend_ctx pc = plain_ctx(ctx);
        plain->pool_bwd(&pc, p, x, y, dy, dx, accumulate, keep);
        return;
    }
    CNT_ASSERT(p->N >= 0 && p->C >= 1 && p->H >= 1 && p->W >= 1 && p->P >= 1 && p->Q >= 1);
    pr_axis ra = pr_rows(p), ca = pr_cols(p);
    int nb = p->C / B, HW = p->H * p->W, PQ = p->P * p->Q;
    int is_max = p->mode == POOL_MODE_MAX;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)p->N * p->C * HW >= DN_PAR_MIN)
    for (int n = 0; n < p->N; n++)
        for (int cb = 0; cb < nb; cb++) {
            const float *xp = x + blk_base(p->C, HW, n, cb);
            const float *gp = dy + blk_base(p->C, PQ, n, cb);
            float *dp = dx + blk_base(p->C, HW, n, cb);
            if (!accumulate) memset(dp, 0, (size_t)HW * B * sizeof(float));
            for (int i = 0; i < p->P; i++) {
                int h0, h1, rc;
                pr_window(p->mode, ra, i, &h0, &h1, &rc);
                for (int j = 0; j < p->Q; j++) {
                    int w0, w1, cc;
                    pr_window(p->mode, ca, j, &w0, &w1, &cc);
                    const float *g = gp + ((size_t)i * p->Q + j) * B;
                    if (is_max) {
                        /* each lane's first maximum, then its gradient there */
                        float best[16];
                        int at[16];
                        blk_window_max(xp, p->W, h0, h1, w0, w1, best, at);
                        for (int l = 0; l < B; l++) dp[(size_t)at[l] * B + l] += g[l];
                    } else {
                        float v[16];
                        float div = (float)(rc * cc);
                        for (int l = 0; l < B; l++) v[l] = g[l] / div;
                        for (int h = h0; h < h1; h++)
                            for (int w = w0; w < w1; w++) {
                                float *d = dp + ((size_t)h * p->W + w) * B;
#pragma omp simd
                                for (int l = 0; l < B; l++) d[l] += v[l];
                            }
                    }
                }
            }
        }
    (void)y;
}

/* ------------------------------------------------------------ channel slices */

/* Where value (n, c, i) of an [N, C, HW] tensor lives in BLOCKED. */
static inline size_t blk_index(int C, int HW, int n, int c, int i) {
    if (!is_blk(C) || HW == 1) return ((size_t)n * C + c) * HW + i;
    return blk_base(C, HW, n, c / B) + (size_t)i * B + c % B;
}

static void dn_channel_copy(const backend_ctx *ctx, int N, int C, int HW, const void *srcv, int src_C, int src_off,
                            void *dstv, int dst_C, int dst_off, int accumulate) {
    const float *src = srcv;
    float *dst = dstv;
    if (!blocked(ctx) || (!is_blk(src_C) && !is_blk(dst_C)) || HW == 1) {
        backend_ctx pc = plain_ctx(ctx);
        plain->channel_copy(&pc, N, C, HW, src, src_C, src_off, dst, dst_C, dst_off, accumulate);
        return;
    }
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 0);
    CNT_ASSERT(src_off >= 0 && src_off + C <= src_C && dst_off >= 0 && dst_off + C <= dst_C);
    size_t total = (size_t)N * C * HW;
    if (is_blk(src_C) && is_blk(dst_C) && C % B == 0 && src_off % B == 0 && dst_off % B == 0) {
        /* whole blocks: HW*B contiguous values each */
        int nb = C / B;
        size_t len = (size_t)HW * B;
#pragma omp parallel for collapse(2) schedule(static) if (total >= DN_PAR_MIN)
        for (int n = 0; n < N; n++)
            for (int cb = 0; cb < nb; cb++) {
                const float *s = src + blk_base(src_C, HW, n, src_off / B + cb);
                float *d = dst + blk_base(dst_C, HW, n, dst_off / B + cb);
                if (accumulate) {
#pragma omp simd
                    for (size_t k = 0; k < len; k++) d[k] += s[k];
                } else {
                    memcpy(d, s, len * sizeof(float));
                }
            }
        return;
    }
#pragma omp parallel for collapse(2) schedule(static) if (total >= DN_PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) {
                float v = src[blk_index(src_C, HW, n, src_off + c, i)];
                float *d = &dst[blk_index(dst_C, HW, n, dst_off + c, i)];
                *d = accumulate ? *d + v : v;
            }
}

/* ------------------------------------------------------------ planning and description */

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* The OpenBLAS backend's scratch (it has run nothing in BLOCKED, so that is
 * 0 there beyond its reduced-math copies) plus this file's buffers: the
 * blocked weights, the scratchpads of the three primitives, the accumulate
 * copy, the rounded operand copies. Creates the primitives (cached for the
 * run) to learn their sizes; allocates no scratch. */
static size_t dn_conv_workspace(const backend_ctx *ctx, const conv_params *p) {
    if (!blocked(ctx)) return plain->conv_workspace(ctx, p);
    size_t wei = 0, pad = 0;
    for (int pass = PASS_FWD; pass <= PASS_BWD_FILTER; pass++) {
        dn_conv *c = conv_get(pass, p);
        wei = max2(wei, c->wei_floats);
        pad = max2(pad, c->pad_floats);
    }
    size_t in = conv_in_count(p), out = conv_out_count(p), w = conv_w_count(p);
    size_t floats = wei + pad + in;
    if (cpu_math_reduced(ctx->math)) floats += max2(in, out) + max2(w, out);
    int ref = 0;
    for (int pass = PASS_FWD; pass <= PASS_BWD_FILTER; pass++) ref |= conv_get(pass, p)->ref;
    backend_ctx pc = plain_ctx(ctx);
    if (ref) floats += in + out + plain->conv_workspace(&pc, p) / sizeof(float); /* lay[0], lay[1], OpenBLAS's */
    return floats * sizeof(float);
}

static void dn_describe(char *buf, size_t len) {
    const dnnl_version_t *v = dnnl_version();
    char base[160];
    plain->describe(base, sizeof base);
    size_t n = strlen(base);
    if (n && base[n - 1] == ')') base[n - 1] = '\0';
    snprintf(buf, len, "%s; oneDNN %d.%d.%d, blocked layout nChw%dc)", base, v->major, v->minor, v->patch, B);
}

/* Per pass run so far at this thread count: oneDNN's implementation (or ours
 * where it has only its reference one) and its scratchpad. */
static void dn_conv_describe(const backend_ctx *ctx, const conv_params *p, char *buf, size_t len) {
    if (!blocked(ctx)) {
        plain->conv_describe(ctx, p, buf, len);
        return;
    }
    static const char *const passes[] = {"fwd", "data", "filter"};
    int threads = omp_get_max_threads();
    size_t o = 0;
    buf[0] = '\0';
    for (int pass = PASS_FWD; pass <= PASS_BWD_FILTER; pass++) {
        const dn_conv *c = NULL;
        for (int i = 0; i < cache_n && !c; i++)
            if (cache[i].pass == pass && cache[i].threads == threads && same_params(&cache[i].p, p)) c = &cache[i];
        int w = !c ? snprintf(buf + o, len - o, "%s%s not run", o ? "; " : "", passes[pass])
                : c->ref ? snprintf(buf + o, len - o, "%s%s ours (oneDNN has only %s)", o ? "; " : "", passes[pass],
                                    c->impl)
                         : snprintf(buf + o, len - o, "%s%s oneDNN %s, scratch %.2f MiB", o ? "; " : "",
                                    passes[pass], c->impl, c->pad_floats * sizeof(float) / 1048576.0);
        if (w < 0 || (size_t)w >= len - o) return; /* cut: what fits */
        o += (size_t)w;
    }
}

/* ------------------------------------------------------------ the table */

static backend dn_backend;

const backend *backend_cpu_onednn(void) {
    if (plain) return &dn_backend;
    DN_CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN_CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    /* the vector width oneDNN's kernels use: 16 floats with AVX-512, else 8 */
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    B = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core ? 16 : 8;
    const backend *base = backend_cpu_openblas();
    dn_backend = *base;
    dn_backend.describe = dn_describe;
    dn_backend.conv_fwd = dn_conv_fwd;
    dn_backend.conv_bwd_data = dn_conv_bwd_data;
    dn_backend.conv_bwd_filter = dn_conv_bwd_filter;
    dn_backend.bias_fwd = dn_bias_fwd;
    dn_backend.bias_bwd = dn_bias_bwd;
    dn_backend.bn_fwd_train = dn_bn_fwd_train;
    dn_backend.bn_fwd_infer = dn_bn_fwd_infer;
    dn_backend.bn_bwd = dn_bn_bwd;
    dn_backend.bn_act_fwd_train = dn_bn_act_fwd_train;
    dn_backend.bn_act_fwd_infer = dn_bn_act_fwd_infer;
    dn_backend.bn_act_bwd = dn_bn_act_bwd;
    dn_backend.pool_fwd = dn_pool_fwd;
    dn_backend.pool_bwd = dn_pool_bwd;
    dn_backend.channel_copy = dn_channel_copy;
    dn_backend.convert_layout = dn_convert_layout;
    dn_backend.block_c = B;
    dn_backend.conv_workspace = dn_conv_workspace;
    dn_backend.conv_describe = dn_conv_describe;
    plain = base;
    return &dn_backend;
}

void backend_onednn_libraries(char *buf, size_t len) {
    const dnnl_version_t *v = dnnl_version();
    char ver[96];
    file_version_text(ver, sizeof ver, v->major * 10000L + v->minor * 100 + v->patch,
                      DNNL_VERSION_MAJOR * 10000L + DNNL_VERSION_MINOR * 100 + DNNL_VERSION_PATCH);
    file_library_line(buf, len, "oneDNN", ver, (const void *)dnnl_version);
}
