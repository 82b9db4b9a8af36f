/*
 * model/pool_rules.h - pooling as one output value (forward) or one input
 * gradient (backward) at a time: the formulation the CUDA kernels run (one
 * thread per value), written once in C that both gcc and nvcc compile, so
 * tests/test_pool_rules.c checks it on the host against the CPU backend.
 *
 * The window rules are torch's, as in pool_axis_init (model/backend_cpu.c):
 * along one axis output i covers [i*stride - pad, i*stride - pad + k) clipped
 * to the padded input, then to the input; adaptive pooling covers
 * [floor(i*in/out), ceil((i+1)*in/out)). Backward gathers: the thread of
 * input value (h, w) adds, in (i, j) order, the gradient of every output whose
 * window holds it, which is the order in which the CPU backend scatters, so
 * the sums agree bit for bit and no atomics are needed. Max pooling sends each
 * output's gradient to its window's first maximum (rows, then columns; a NaN
 * wins and the first NaN stays), found once per output (rescanning every
 * window that holds an input made ResNet-50's stem max-pool backward 11
 * times its forward): by the training forward, which keeps it (pr_fwd_one's
 * *at, model/backend.h's fwd_keep), or by pr_argmax_one in a pass before the
 * gather. A maximum's position is its offset in the unclipped window,
 * (h - i*stride_h + pad_h) * S + (w - j*stride_w + pad_w), below R*S, so a
 * byte holds it for windows of up to 256 values (pr_arg_bytes). Where the
 * windows tile the input (pr_tiles: VGG's 2x2 stride 2), each input is in
 * one window and the backward goes by output instead, one thread writing its
 * window's gradients (pr_tile_of, pr_tile_grad), the same values as the
 * gather with a tenth of its index arithmetic. Both layouts of
 * model/backend.h (set_layout) go through the same code: a plane's elements
 * are read through its row and column strides (pr_plane). Activations of
 * every type of backend_dtype are read widened (pr_ld, exactly), each value
 * computed in fp32 as in fp32 storage; the caller rounds it once into its
 * type, as the CPU backend's 16-bit ops do (model/backend.h's contract).
 */
#ifndef CNT_POOL_RULES_H
#define CNT_POOL_RULES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/backend.h"

#ifdef __CUDACC__
#define PR_FN static inline __host__ __device__
#else
#define PR_FN static inline
#endif

typedef struct pr_axis {
    int in, out, k, stride, pad;
} pr_axis;

PR_FN pr_axis pr_rows(const pool_params *p) {
    pr_axis a = {p->H, p->P, p->R, p->stride_h, p->pad_h};
    return a;
}

PR_FN pr_axis pr_cols(const pool_params *p) {
    pr_axis a = {p->W, p->Q, p->S, p->stride_w, p->pad_w};
    return a;
}

/* Output i's window along axis a, clipped to the input: [*lo, *hi); *count is
 * this axis' factor of the average's divisor. */
PR_FN void pr_window(pool_mode mode, pr_axis a, int i, int *lo, int *hi, int *count) {
    if (mode == POOL_MODE_ADAPTIVE_AVG) {
        *lo = (int)((long long)i * a.in / a.out);
        *hi = (int)(((long long)(i + 1) * a.in + a.out - 1) / a.out);
        *count = *hi - *lo;
        return;
    }
    int s = i * a.stride - a.pad;
    int e = s + a.k < a.in + a.pad ? s + a.k : a.in + a.pad;
    *lo = s > 0 ? s : 0;
    *hi = e < a.in ? e : a.in;
    *count = mode == POOL_MODE_AVG_INCLUDE_PAD ? e - s : *hi - *lo;
}

/* A range [*first, *last] of outputs along axis a that holds every output
 * whose window contains input index h (possibly a few more, which callers
 * drop by testing the window). Empty when *first > *last. */
PR_FN void pr_candidates(pool_mode mode, pr_axis a, int h, int *first, int *last) {
    if (mode == POOL_MODE_ADAPTIVE_AVG) {
        long long f = (long long)h * a.out / a.in - 1, l = (long long)(h + 1) * a.out / a.in + 1;
        *first = f < 0 ? 0 : (int)f;
        *last = l > a.out - 1 ? a.out - 1 : (int)l;
        return;
    }
    /* i*stride - pad <= h < i*stride - pad + k */
    int num = h + a.pad - a.k + 1;
    if (a.stride == 1) { /* the same without the divisions (Inception's 3x3 average pools) */
        *first = num <= 0 ? 0 : num;
        *last = h + a.pad > a.out - 1 ? a.out - 1 : h + a.pad;
        return;
    }
    *first = num <= 0 ? 0 : (num + a.stride - 1) / a.stride;
    int l = (h + a.pad) / a.stride;
    *last = l > a.out - 1 ? a.out - 1 : l;
}

/* Whether v replaces best as the window's maximum. */
/* The float with bits u. */
PR_FN float pr_bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* An IEEE half widened, exactly (common/half.h's fp16_to_float, which the
 * device cannot call): a NaN comes out quiet. */
PR_FN float pr_half_float(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return pr_bits_float(s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in a float */
        float v = (float)m * 0x1p-24f;
        return s ? -v : v;
    }
    return pr_bits_float(s | ((e + 112u) << 23) | (m << 13));
}

/* Activation i of a tensor of `type` (backend_dtype) as a float, exactly. */
PR_FN float pr_ld(const void *a, size_t i, int type) {
    if (type == BACKEND_DTYPE_FP32) return ((const float *)a)[i];
    uint16_t h = ((const uint16_t *)a)[i];
    return type == BACKEND_DTYPE_BF16 ? pr_bits_float((uint32_t)h << 16) : pr_half_float(h);
}

PR_FN int pr_take(float v, float best) { return (v > best) | ((v != v) & (best == best)); }

/* Where one (n, c) plane of pooling's input (H x W) and output (P x Q) lie
 * in a layout: the first element's offset and the strides of a row and a
 * column (NCHW: W and 1 within a contiguous plane; NHWC: W*C and C). */
typedef struct pr_plane {
    size_t x0, g0;   /* offsets of (n, c, 0, 0) in the input and in the output */
    size_t xsh, xsw; /* input row and column strides */
    size_t gsh, gsw; /* output row and column strides */
} pr_plane;

PR_FN pr_plane pr_plane_of(const pool_params *p, size_t n, size_t c, int nhwc) {
    const size_t C = (size_t)p->C, HW = (size_t)p->H * p->W, PQ = (size_t)p->P * p->Q;
    pr_plane pl;
    if (nhwc) {
        pl.x0 = n * HW * C + c;
        pl.g0 = n * PQ * C + c;
        pl.xsh = (size_t)p->W * C;
        pl.gsh = (size_t)p->Q * C;
        pl.xsw = pl.gsw = C;
    } else {
        pl.x0 = (n * C + c) * HW;
        pl.g0 = (n * C + c) * PQ;
        pl.xsh = (size_t)p->W;
        pl.gsh = (size_t)p->Q;
        pl.xsw = pl.gsw = 1;
    }
    return pl;
}

/* Splits t, a flat index into [N, C, A, B] (or, with nhwc, [N, A, B, C]),
 * into its coordinates (n, c, a, b): in 32-bit arithmetic where t fits (then
 * every quotient and remainder does; division several times faster on a
 * GPU), else in size_t, by the one body below. */
#define PR_SPLIT_IN(T)                  \
    do {                                \
        T r = (T)t;                     \
        if (nhwc) {                     \
            *c = r % (T)C;              \
            r /= (T)C;                  \
        }                               \
        *b = (int)(r % (T)B);           \
        r /= (T)B;                      \
        *a = (int)(r % (T)A);           \
        r /= (T)A;                      \
        if (nhwc) {                     \
            *n = r;                     \
        } else {                        \
            *c = r % (T)C;              \
            *n = r / (T)C;              \
        }                               \
    } while (0)
PR_FN void pr_split(size_t t, int C, int A, int B, int nhwc, size_t *n, size_t *c, int *a, int *b) {
    if (t <= UINT32_MAX)
        PR_SPLIT_IN(uint32_t);
    else
        PR_SPLIT_IN(size_t);
}
#undef PR_SPLIT_IN

/* The window's maximum; *bi = the position of its first maximum in the
 * unclipped window that starts at row hs, column ws, S wide. x (of `type`)
 * holds the plane from offset x0, sh and sw its row and column strides. */
PR_FN float pr_window_max(const void *x, int type, size_t x0, size_t sh, size_t sw, int h0, int h1, int w0, int w1,
                          int hs, int ws, int S, int *bi) {
    float b = -INFINITY;
    int hb = h0, wb = w0;
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) {
            float v = pr_ld(x, x0 + (size_t)h * sh + (size_t)w * sw, type);
            if (pr_take(v, b)) {
                b = v;
                hb = h;
                wb = w;
            }
        }
    *bi = (hb - hs) * S + (wb - ws);
    return b;
}

/* Where output i's window starts along axis a, before clipping (max and
 * average pooling). */
PR_FN int pr_start(pr_axis a, int i) { return i * a.stride - a.pad; }

/* The bytes that hold one maximum's position for windows of p: 1 up to 256
 * values, else 4 (an int). */
PR_FN int pr_arg_bytes(const pool_params *p) { return p->R * p->S <= 256 ? 1 : 4; }

/* The position of output o's maximum in arg, held in `bytes` (pr_arg_bytes) each. */
PR_FN int pr_arg_at(const void *arg, int bytes, size_t o) {
    return bytes == 1 ? (int)((const uint8_t *)arg)[o] : ((const int *)arg)[o];
}

PR_FN void pr_arg_put(void *arg, int bytes, size_t o, int v) {
    if (bytes == 1)
        ((uint8_t *)arg)[o] = (uint8_t)v;
    else
        ((int *)arg)[o] = v;
}

/* Output t's plane and window: rows [h0, h1) and columns [w0, w1) of the
 * input, cr x cc the averaging divisor (pr_window); (i, j) the output's
 * row and column. */
typedef struct pr_out {
    pr_plane pl;
    int h0, h1, cr, w0, w1, cc;
    int i, j;
} pr_out;

PR_FN void pr_out_of(const pool_params *p, pr_axis ra, pr_axis ca, size_t t, int nhwc, pr_out *o) {
    size_t n, c;
    int i, j;
    pr_split(t, p->C, p->P, p->Q, nhwc, &n, &c, &i, &j);
    o->i = i;
    o->j = j;
    o->pl = pr_plane_of(p, n, c, nhwc);
    pr_window(p->mode, ra, i, &o->h0, &o->h1, &o->cr);
    pr_window(p->mode, ca, j, &o->w0, &o->w1, &o->cc);
}

/* Output value t: a flat index into [N, C, P, Q], or with nhwc into
 * [N, P, Q, C] (channels innermost, so neighbouring threads take
 * neighbouring channels); x of `type`. Max pooling also sets *at (where at
 * is not NULL) to the position of the window's first maximum, as
 * pr_argmax_one finds it. */
PR_FN float pr_fwd_one(const pool_params *p, pr_axis ra, pr_axis ca, const void *x, int type, size_t t, int nhwc,
                       int *at) {
    pr_out w;
    pr_out_of(p, ra, ca, t, nhwc, &w);
    if (p->mode == POOL_MODE_MAX) {
        int bi;
        float m = pr_window_max(x, type, w.pl.x0, w.pl.xsh, w.pl.xsw, w.h0, w.h1, w.w0, w.w1, pr_start(ra, w.i),
                                pr_start(ca, w.j), p->S, &bi);
        if (at) *at = bi;
        return m;
    }
    float s = 0.0f;
    for (int h = w.h0; h < w.h1; h++)
        for (int c = w.w0; c < w.w1; c++) s += pr_ld(x, w.pl.x0 + (size_t)h * w.pl.xsh + (size_t)c * w.pl.xsw, type);
    return s / (float)(w.cr * w.cc);
}

/* Max pooling's output t (indexed as in pr_fwd_one): the position of its
 * window's first maximum in the unclipped window (the header's rule). */
PR_FN int pr_argmax_one(const pool_params *p, pr_axis ra, pr_axis ca, const void *x, int type, size_t t, int nhwc) {
    int bi = 0;
    pr_fwd_one(p, ra, ca, x, type, t, nhwc, &bi);
    return bi;
}

/* Input gradient t: a flat index into [N, C, H, W], or with nhwc into
 * [N, H, W, C]; starting from g0 (0, or the value there when accumulating);
 * dy of `type`.
 * Max pooling reads each output's first maximum from arg (pr_argmax_one of
 * every output, laid out as dy, pr_arg_bytes(p) each); the other modes take
 * arg NULL. */
PR_FN float pr_bwd_one(const pool_params *p, pr_axis ra, pr_axis ca, const void *arg, const void *dy, int type,
                       size_t t, float g0, int nhwc) {
    size_t n, c;
    int h, w;
    pr_split(t, p->C, p->H, p->W, nhwc, &n, &c, &h, &w);
    pr_plane pl = pr_plane_of(p, n, c, nhwc);
    float g = g0;
    int i0, i1, j0, j1, ab = pr_arg_bytes(p);
    pr_candidates(p->mode, ra, h, &i0, &i1);
    pr_candidates(p->mode, ca, w, &j0, &j1);
    for (int i = i0; i <= i1; i++) {
        int h0, h1, cr;
        pr_window(p->mode, ra, i, &h0, &h1, &cr);
        if (h < h0 || h >= h1) continue;
        for (int j = j0; j <= j1; j++) {
            int w0, w1, cc;
            pr_window(p->mode, ca, j, &w0, &w1, &cc);
            if (w < w0 || w >= w1) continue;
            size_t o = pl.g0 + (size_t)i * pl.gsh + (size_t)j * pl.gsw;
            if (p->mode == POOL_MODE_MAX) { /* dy read only where this input is the maximum */
                int at = (h - pr_start(ra, i)) * p->S + (w - pr_start(ca, j));
                if (pr_arg_at(arg, ab, o) == at) g += pr_ld(dy, o, type);
            } else {
                g += pr_ld(dy, o, type) / (float)(cr * cc);
            }
        }
    }
    return g;
}

/* Whether p's windows tile its input: max pooling with windows as large as
 * their strides, no padding, and the outputs' windows covering the input
 * exactly (VGG's 2x2 stride 2 on even sizes). Then every input lies in one
 * window, and the backward can go by output instead (pr_tile_of,
 * pr_tile_grad): one thread writes its window's R*S input gradients, with a
 * tenth of the index arithmetic of gathering each input's (the divisions of
 * pr_split and pr_candidates, which bound the gather on a GPU). */
PR_FN int pr_tiles(const pool_params *p) {
    return p->mode == POOL_MODE_MAX && p->R == p->stride_h && p->S == p->stride_w && p->pad_h == 0 &&
           p->pad_w == 0 && p->H == p->P * p->R && p->W == p->Q * p->S;
}

/* Where output t's window lies when p tiles (pr_tiles): input gradient
 * x0 + a*sh + b*sw is its window's element (a, b), position a*S + b. */
typedef struct pr_tile {
    size_t x0, sh, sw;
} pr_tile;

PR_FN pr_tile pr_tile_of(const pool_params *p, pr_axis ra, pr_axis ca, size_t t, int nhwc) {
    pr_out w;
    pr_out_of(p, ra, ca, t, nhwc, &w);
    pr_tile r;
    r.x0 = w.pl.x0 + (size_t)w.h0 * w.pl.xsh + (size_t)w.w0 * w.pl.xsw;
    r.sh = w.pl.xsh;
    r.sw = w.pl.xsw;
    return r;
}

/* The gradient of the input at position k of a tiling window whose kept
 * maximum is at `at` and whose output gradient is dy_t, starting from g0:
 * what pr_bwd_one computes for that input (g0, plus dy_t at the maximum:
 * added, not assigned, so that 0 + -0 is +0 there too). */
PR_FN float pr_tile_grad(int k, int at, float dy_t, float g0) {
    float g = g0;
    if (k == at) g += dy_t;
    return g;
}

#endif
