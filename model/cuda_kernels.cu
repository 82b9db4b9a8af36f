/*
 * model/cuda_kernels.cu - our kernels for the CUDA backend (see
 * model/cuda_kernels.h). Only what cuDNN and cuBLAS lack lives here:
 * elementwise ops, the stateless dropout mask, channel slices, bias,
 * pooling (torch's exact window rules, ceil_mode included, which cuDNN's
 * pooling does not have), the NCHW <-> NHWC layout transpose (and the
 * NHWC variants of the layout-sensitive kernels), softmax cross-entropy,
 * the SGD update, the
 * conversions between float tensors and the fp16/bf16 copies that the
 * reduced-precision math modes hand to cuDNN and cuBLAS, and the overflow
 * check of dynamic loss scaling.
 *
 * Elementwise kernels are grid-stride loops over size_t indices, so any n
 * works with a bounded grid. Reductions never use atomics: every sum has a
 * fixed order, the same on every run.
 */
#include "model/cuda_kernels.h"
#include "model/pool_rules.h"
#include "common/rng_hash.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

namespace {

constexpr int kThreads = 256;

unsigned grid_for(size_t n) {
    size_t blocks = (n + kThreads - 1) / kThreads;
    const size_t cap = 65535u * 16u; /* enough blocks to fill any GPU; the loop covers the rest */
    if (blocks > cap) blocks = cap;
    return blocks ? (unsigned)blocks : 1u;
}

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* t / d, and t % d into *r: in 32 bits where both fit (a 64-bit division is
 * emulated, several times the cost), the same quotient and remainder. */
__device__ __forceinline__ size_t divmod(size_t t, size_t d, size_t *r) {
    if (t <= UINT32_MAX && d <= UINT32_MAX) {
        uint32_t q = (uint32_t)t / (uint32_t)d;
        *r = (size_t)((uint32_t)t - q * (uint32_t)d);
        return q;
    }
    size_t q = t / d;
    *r = t - q * d;
    return q;
}

/* ------------------------------------------- reduced-precision copies
 * The 16-bit types of BACKEND_MATH_FP16 (__half) and BACKEND_MATH_BF16
 * (__nv_bfloat16). narrow_to rounds to nearest even (fp16 beyond +-65504
 * becomes +-inf, bf16 beyond its largest finite value likewise; NaN stays
 * NaN), widen is exact: what common/half.h's fp16_round / bf16_round do on
 * the CPU. */
template <typename T> __device__ T narrow_to(float f);
template <> __device__ __forceinline__ float narrow_to<float>(float f) { return f; }
template <> __device__ __forceinline__ __half narrow_to<__half>(float f) { return __float2half_rn(f); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow_to<__nv_bfloat16>(float f) {
    return __float2bfloat16_rn(f);
}
__device__ __forceinline__ float widen(float f) { return f; }
__device__ __forceinline__ float widen(__half h) { return __half2float(h); }
__device__ __forceinline__ float widen(__nv_bfloat16 h) { return __bfloat162float(h); }


/* An activation (backend_ctx.act) of storage type T read as a float, and a
 * float stored as T (rounded once; a float stays as it is). */
template <typename T> __device__ __forceinline__ float ld(const T *p, size_t i) { return widen(p[i]); }
template <typename T> __device__ __forceinline__ void st(T *p, size_t i, float v) { p[i] = narrow_to<T>(v); }

/* Elementwise ops on activations of type T: computed in float, stored once.
 * Memory-bound, so where every pointer is 16-byte aligned (the net's
 * activations are) each thread moves 16 bytes at a time (4 floats or 8
 * 16-bit values: one load instruction instead of 4 or 8 narrow ones), and
 * the n % kVec<T> values past the last whole vector one at a time; vec 0
 * takes every value one at a time. The per-value arithmetic is the same
 * either way, so the bits are. */
template <typename T> constexpr int kVec = 16 / (int)sizeof(T);
template <typename T> struct alignas(16) vec16 {
    T e[kVec<T>];
};

/* Values handled as whole vectors: n rounded down to kVec<T>, or 0. */
template <typename T> __device__ __forceinline__ size_t vec_part(size_t n, int vec) {
    return vec ? n - n % (size_t)kVec<T> : 0;
}

__device__ __forceinline__ float relu_of(float v) { return v < 0.0f ? 0.0f : v; } /* a NaN passes, as on the CPU */

template <typename T> __global__ void relu_fwd_k(size_t n, const T *x, T *y, int vec) {
    size_t nv = vec_part<T>(n, vec);
    GRID_STRIDE(i, nv / kVec<T>) {
        vec16<T> a = ((const vec16<T> *)x)[i], r;
#pragma unroll
        for (int k = 0; k < kVec<T>; k++) r.e[k] = narrow_to<T>(relu_of(widen(a.e[k])));
        ((vec16<T> *)y)[i] = r;
    }
    GRID_STRIDE(t, n - nv) { size_t i = nv + t; st(y, i, relu_of(ld(x, i))); }
}

__device__ __forceinline__ float relu_grad(float y, float dy, float old, int acc) {
    float g = y > 0.0f ? dy : 0.0f;
    return acc ? __fadd_rn(old, g) : g;
}

template <typename T> __global__ void relu_bwd_k(size_t n, const T *y, const T *dy, T *dx, int acc, int vec) {
    size_t nv = vec_part<T>(n, vec);
    GRID_STRIDE(i, nv / kVec<T>) {
        vec16<T> a = ((const vec16<T> *)y)[i], d = ((const vec16<T> *)dy)[i], o, r;
        if (acc) o = ((const vec16<T> *)dx)[i];
#pragma unroll
        for (int k = 0; k < kVec<T>; k++)
            r.e[k] = narrow_to<T>(relu_grad(widen(a.e[k]), widen(d.e[k]), acc ? widen(o.e[k]) : 0.0f, acc));
        ((vec16<T> *)dx)[i] = r;
    }
    GRID_STRIDE(t, n - nv) {
        size_t i = nv + t;
        st(dx, i, relu_grad(ld(y, i), ld(dy, i), acc ? ld(dx, i) : 0.0f, acc));
    }
}

template <typename T> __global__ void add_k(size_t n, const T *a, const T *b, T *y, int vec) {
    size_t nv = vec_part<T>(n, vec);
    GRID_STRIDE(i, nv / kVec<T>) {
        vec16<T> u = ((const vec16<T> *)a)[i], v = ((const vec16<T> *)b)[i], r;
#pragma unroll
        for (int k = 0; k < kVec<T>; k++) r.e[k] = narrow_to<T>(__fadd_rn(widen(u.e[k]), widen(v.e[k])));
        ((vec16<T> *)y)[i] = r;
    }
    GRID_STRIDE(t, n - nv) { size_t i = nv + t; st(y, i, __fadd_rn(ld(a, i), ld(b, i))); }
}

/* 1 where every pointer given is 16-byte aligned (NULLs count as aligned). */
int aligned16(const void *a, const void *b, const void *c) {
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

/* Threads for n values of type T, kVec<T> to a thread where vec. */
template <typename T> unsigned grid_vec(size_t n, int vec) {
    return grid_for(vec ? n / (size_t)kVec<T> + n % (size_t)kVec<T> : n);
}

/* Products and sums that update state go through __fmul_rn/__fadd_rn, which
 * nvcc never fuses into an FMA: the CPU backend (gcc, -ffp-contract=off)
 * rounds each operation too, so the two devices compute the same bits and
 * ranks on different devices keep identical parameters. */
__global__ void axpy_k(size_t n, float alpha, const float *x, float *y, int acc) {
    GRID_STRIDE(i, n) {
        float v = __fmul_rn(alpha, x[i]);
        y[i] = acc ? __fadd_rn(y[i], v) : v;
    }
}

/* The uint8 batch (N images of HW pixels of C bytes) to fp32 NCHW through
 * the per-channel table: one thread per output value, so the writes are
 * coalesced (the bytes a warp reads are C apart, within a few cache lines). */
__global__ void normalize_u8_k(size_t total, int C, size_t HW, const uint8_t *x, const float *lut, float *y) {
    GRID_STRIDE(i, total) {
        size_t p, cc, nc = divmod(i, HW, &p), n = divmod(nc, (size_t)C, &cc);
        int c = (int)cc;
        y[i] = __ldg(lut + (size_t)c * 256 + x[(n * HW + p) * (size_t)C + (size_t)c]);
    }
}

/* y (+)= a * mask: a and y activations of type T, the mask fp32 */
template <typename T> __global__ void mul_k(size_t n, const T *a, const float *b, T *y, int acc) {
    GRID_STRIDE(i, n) {
        float v = __fmul_rn(ld(a, i), b[i]);
        st(y, i, acc ? __fadd_rn(ld(y, i), v) : v);
    }
}

struct small_bytes {
    unsigned char b[CUK_SMALL_UPLOAD];
};

__global__ void upload_small_k(unsigned char *dst, small_bytes v, unsigned n) {
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) dst[i] = v.b[i];
}

__global__ void dropout_mask_k(size_t n, float p, float keep, uint64_t seed, float *mask) {
    GRID_STRIDE(i, n) mask[i] = rng_hash_uniform_inline(seed, i) >= p ? keep : 0.0f;
}

/* The step's seed read here, not passed by value: a recorded step's replays
 * each read the value the host wrote before launching it. */
__global__ void dropout_mask_at_k(size_t n, float p, float keep, const uint64_t *step_at, uint64_t node_index,
                                  float *mask) {
    uint64_t seed = rng_hash_dropout_seed(*step_at, node_index);
    GRID_STRIDE(i, n) mask[i] = rng_hash_uniform_inline(seed, i) >= p ? keep : 0.0f;
}

template <typename T>
__global__ void channel_copy_k(int N, int C, int HW, const T *src, int src_C, int src_off, T *dst, int dst_C,
                               int dst_off, int acc) {
    size_t total = (size_t)N * C * HW;
    GRID_STRIDE(t, total) {
        size_t i, c, nc = divmod(t, (size_t)HW, &i), n = divmod(nc, (size_t)C, &c);
        float v = ld(src, (n * src_C + src_off + c) * HW + i);
        size_t d = (n * dst_C + dst_off + c) * HW + i;
        st(dst, d, acc ? __fadd_rn(ld(dst, d), v) : v);
    }
}

/* NHWC: row ni = n*HW + i holds the C channels of one pixel, so consecutive
 * threads copy consecutive channels of a row (coalesced on both sides). */
template <typename T>
__global__ void channel_copy_nhwc_k(int N, int C, int HW, const T *src, int src_C, int src_off, T *dst, int dst_C,
                                    int dst_off, int acc) {
    size_t total = (size_t)N * HW * C;
    GRID_STRIDE(t, total) {
        size_t c, ni = divmod(t, (size_t)C, &c);
        float v = ld(src, ni * (size_t)src_C + (size_t)src_off + c);
        size_t d = ni * (size_t)dst_C + (size_t)dst_off + c;
        st(dst, d, acc ? __fadd_rn(ld(dst, d), v) : v);
    }
}

/* Bias forward without a division per value (a 64-bit modulo each cost
 * more than the value's load and store): NCHW, a block row per plane (n, c)
 * at a time, its channel found once; NHWC (and any layout with HW = 1, the
 * same bytes), thread (x, y) of a 32 x kBiasFwdRows block keeps channel
 * blockIdx.x * 32 + x and walks the rows, so a warp adds to 32 neighbouring
 * channels of one row. */
constexpr int kBiasFwdRows = 8;

template <typename T> __global__ void bias_fwd_k(size_t planes, int C, int HW, const float *b, T *y) {
    for (size_t pl = blockIdx.y; pl < planes; pl += gridDim.y) {
        size_t c;
        (void)divmod(pl, (size_t)C, &c); /* once a plane, in 32 bits where it fits */
        const float bc = b[c];
        T *plane = y + pl * (size_t)HW;
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)HW;
             i += (size_t)gridDim.x * blockDim.x)
            st(plane, i, __fadd_rn(ld(plane, i), bc));
    }
}

template <typename T> __global__ void bias_fwd_nhwc_k(size_t rows, int C, const float *b, T *y) {
    const int c = blockIdx.x * 32 + threadIdx.x;
    if (c >= C) return;
    const float bc = b[c];
    for (size_t r = (size_t)blockIdx.y * kBiasFwdRows + threadIdx.y; r < rows; r += (size_t)gridDim.y * kBiasFwdRows) {
        size_t i = r * (size_t)C + (size_t)c;
        st(y, i, __fadd_rn(ld(y, i), bc));
    }
}

/* Sum of v over the block, in a fixed tree order; the result is valid in thread 0. */
__device__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_max(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

/* Bias gradient in two passes: block (c, g) sums the g-th of G equal slices of
 * channel c's N*HW values into partial[c*G + g]; then a block per channel
 * adds its G partials (bias_bwd_final_k: strided, then a fixed tree). A
 * channel of a large convolution thus spreads over G blocks instead of one,
 * and the sum order is fixed by the shape and, in NHWC, by whether dy allows
 * 16-byte loads (a net's activations always do: 64-byte aligned). */
int bias_splits(int N, int HW) {
    size_t m = (size_t)N * HW;
    size_t g = m / 16384;
    if (g < 1) g = 1;
    if (g > 64) g = 64;
    return (int)g;
}

template <typename T> __global__ void bias_bwd_partial_k(int N, int C, int HW, int G, const T *dy, double *partial) {
    __shared__ double sh[kThreads];
    int c = blockIdx.x, g = blockIdx.y;
    size_t m = (size_t)N * HW;
    size_t per = (m + G - 1) / G, j0 = (size_t)g * per, j1 = j0 + per < m ? j0 + per : m;
    double s = 0.0;
    for (size_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        size_t i, n = divmod(j, (size_t)HW, &i);
        s += ld(dy, (n * C + c) * HW + i);
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[(size_t)c * G + g] = s;
}

/* NHWC: the same slices as bias_bwd_partial_k (rows j = n*HW + i of
 * [N*HW, C], g-th of G equal ranges), but a block covers 32 neighbouring
 * channels: thread (x, y) sums channel c0 + x over rows j0 + y, j0 + y + BY,
 * ... (a warp reads 32 consecutive floats of one row), then thread (x, 0)
 * adds the BY row lanes in order into partial[c*G + g]. Fixed order, no
 * atomics. */
constexpr int kBiasNhwcRows = 16; /* BY: blockDim.y; blockDim.x is 32 */

template <typename T>
__global__ void bias_bwd_partial_nhwc_k(int N, int C, int HW, int G, const T *dy, double *partial) {
    __shared__ double sh[kBiasNhwcRows][32];
    int c = blockIdx.x * 32 + threadIdx.x, g = blockIdx.y;
    size_t m = (size_t)N * HW;
    size_t per = (m + G - 1) / G, j0 = (size_t)g * per, j1 = j0 + per < m ? j0 + per : m;
    double s = 0.0;
    if (c < C)
        for (size_t j = j0 + threadIdx.y; j < j1; j += kBiasNhwcRows) s += ld(dy, j * (size_t)C + (size_t)c);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t = 0.0;
        for (int k = 0; k < kBiasNhwcRows; k++) t += sh[k][threadIdx.x];
        partial[(size_t)c * G + g] = t;
    }
}

/* NHWC with 16-byte rows (C a multiple of kVec<T>, dy 16-byte aligned):
 * the rows [N*HW, C] in G equal slices (bias_nhwc_splits: up to 1024, so a
 * large layer's channels spread over the whole GPU), a block per slice and
 * group of up to 32 channel vectors. Thread (x, y) loads kVec<T> channels at
 * once (16 bytes) from rows j0 + y, j0 + y + BY, ... and keeps a double
 * each; the block adds its BY row lanes in order (shared memory) into
 * partial[c*G + g]. Many loads in flight per SM where the scalar kernel
 * above had 2-byte loads in a handful of blocks (VGG-16's first layers: 3.2
 * M rows of 64 channels, 128 blocks). Fixed order, no atomics. */
constexpr int kBiasVecThreads = 256;

int bias_nhwc_splits(int N, int HW) {
    size_t rows = (size_t)N * HW, g = rows / 256;
    if (g < 1) g = 1;
    if (g > 1024) g = 1024;
    return (int)g;
}

template <typename T>
__global__ void bias_bwd_partial_nhwc_vec_k(int N, int C, int HW, int G, const T *dy, double *partial) {
    constexpr int V = kVec<T>;
    __shared__ double sh[kBiasVecThreads * V];
    const int lanes = blockDim.x, BY = blockDim.y;
    const int cv = blockIdx.x * lanes + threadIdx.x, vecs = C / V; /* this thread's channel vector */
    const size_t m = (size_t)N * HW;
    const size_t per = (m + G - 1) / G, j0 = (size_t)blockIdx.y * per, j1 = j0 + per < m ? j0 + per : m;
    double s[V];
#pragma unroll
    for (int k = 0; k < V; k++) s[k] = 0.0;
    if (cv < vecs) {
        const vec16<T> *rows = (const vec16<T> *)dy;
#pragma unroll 4
        for (size_t j = j0 + threadIdx.y; j < j1; j += BY) {
            vec16<T> a = rows[j * (size_t)vecs + (size_t)cv];
#pragma unroll
            for (int k = 0; k < V; k++) s[k] += (double)widen(a.e[k]);
        }
    }
    const int me = threadIdx.y * lanes + threadIdx.x;
#pragma unroll
    for (int k = 0; k < V; k++) sh[me * V + k] = s[k];
    __syncthreads();
    if (threadIdx.y == 0 && cv < vecs) {
#pragma unroll
        for (int k = 0; k < V; k++) {
            double t = 0.0;
            for (int y = 0; y < BY; y++) t += sh[(y * lanes + threadIdx.x) * V + k];
            partial[((size_t)cv * V + k) * G + blockIdx.y] = t;
        }
    }
}

/* One block per channel: thread t adds partials t, t + blockDim.x, ... in
 * order, then block_sum's fixed tree. */
__global__ void bias_bwd_final_k(int C, int G, const double *partial, float *db) {
    __shared__ double sh[kThreads];
    const int c = blockIdx.x;
    double s = 0.0;
    for (int g = threadIdx.x; g < G; g += blockDim.x) s += partial[(size_t)c * G + g];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) db[c] = (float)s;
}

/* ----------------------------------------------------------------- pooling
 * One thread per value, by the rules in model/pool_rules.h (shared with the
 * host test tests/test_pool_rules.c), in either layout: t runs over the
 * tensor in memory order, so in NHWC a warp takes neighbouring channels. */
/* Activations of type T (`type`, its backend_dtype, for pr_ld), each value
 * computed in float and stored once. */
/* With arg (max pooling's training forward), each output's maximum's
 * position too, pr_arg_bytes(&p) each. */
template <typename T>
__global__ void pool_fwd_k(pool_params p, pr_axis ra, pr_axis ca, const T *x, int type, T *y, int nhwc, void *arg) {
    size_t total = (size_t)p.N * p.C * p.P * p.Q;
    int ab = pr_arg_bytes(&p);
    GRID_STRIDE(t, total) {
        int at = 0;
        st(y, t, pr_fwd_one(&p, ra, ca, x, type, t, nhwc, &at));
        if (arg) pr_arg_put(arg, ab, t, at);
    }
}

template <typename T>
__global__ void pool_argmax_k(pool_params p, pr_axis ra, pr_axis ca, const T *x, int type, void *arg, int nhwc) {
    size_t total = (size_t)p.N * p.C * p.P * p.Q;
    int ab = pr_arg_bytes(&p);
    GRID_STRIDE(t, total) pr_arg_put(arg, ab, t, pr_argmax_one(&p, ra, ca, x, type, t, nhwc));
}

template <typename T>
__global__ void pool_bwd_k(pool_params p, pr_axis ra, pr_axis ca, const void *arg, const T *dy, int type, T *dx,
                           int acc, int nhwc) {
    size_t total = (size_t)p.N * p.C * p.H * p.W;
    GRID_STRIDE(t, total) st(dx, t, pr_bwd_one(&p, ra, ca, arg, dy, type, t, acc ? ld(dx, t) : 0.0f, nhwc));
}

/* Max pooling whose windows tile the input (pr_tiles): one thread per
 * output writes its window's R*S input gradients from the kept maximum
 * (arg), each as pr_bwd_one would gather it. In NHWC a warp's threads take
 * neighbouring channels, so each of the window's stores is one contiguous
 * run. */
template <typename T>
__global__ void pool_bwd_tile_k(pool_params p, pr_axis ra, pr_axis ca, const void *arg, const T *dy, T *dx, int acc,
                                int nhwc) {
    size_t total = (size_t)p.N * p.C * p.P * p.Q;
    int ab = pr_arg_bytes(&p);
    GRID_STRIDE(t, total) {
        pr_tile w = pr_tile_of(&p, ra, ca, t, nhwc);
        int at = pr_arg_at(arg, ab, t);
        float d = ld(dy, t);
        for (int a = 0; a < p.R; a++)
            for (int b = 0; b < p.S; b++) {
                size_t i = w.x0 + (size_t)a * w.sh + (size_t)b * w.sw;
                st(dx, i, pr_tile_grad(a * p.S + b, at, d, acc ? ld(dx, i) : 0.0f));
            }
    }
}

/* ---------------------------------------------------------- layout transpose
 * N independent row-major [rows, cols] matrices, each transposed into
 * [cols, rows]: dst[(n*cols + j)*rows + i] (+)= src[(n*rows + i)*cols + j].
 * NCHW -> NHWC is rows = C, cols = HW; NHWC -> NCHW is rows = HW, cols = C.
 * A block of 32 x 8 threads moves 32 x 32 tiles through shared memory: it
 * reads a tile row by row (a warp reads 32 consecutive floats of a source
 * row) and writes it column by column of the tile (a warp writes 32
 * consecutive floats of a destination row). The tile has 33 columns, so the
 * column-wise reads of shared memory (tile[tx][k]: stride 33 words) hit 32
 * different banks. Tiles that overhang the matrix edge are masked. The
 * grid is capped (gridDim.y and .z at 65535) and each block loops over the
 * tiles and images left beyond it; the loop bounds depend on blockIdx only,
 * so every thread of a block reaches the same __syncthreads. */
constexpr int kTile = 32, kTileRows = 8;

template <typename S, typename D>
__global__ void transpose_k(int N, int rows, int cols, const S *src, D *dst, int acc) {
    __shared__ float tile[kTile][kTile + 1];
    const size_t plane = (size_t)rows * (size_t)cols;
    const int tiles_r = rows / kTile + (rows % kTile != 0), tiles_c = cols / kTile + (cols % kTile != 0);
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (size_t n = blockIdx.z; n < (size_t)N; n += gridDim.z) {
        const S *s = src + n * plane;
        D *d = dst + n * plane;
        for (int tr = blockIdx.y; tr < tiles_r; tr += gridDim.y)
            for (int tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
                const int r0 = tr * kTile, c0 = tc * kTile;
                for (int k = 0; k < kTile; k += kTileRows) {
                    int r = r0 + ty + k, c = c0 + tx;
                    if (r < rows && c < cols) tile[ty + k][tx] = ld(s, (size_t)r * cols + c);
                }
                __syncthreads();
                /* destination row c0 + ty + k (a source column), column r0 + tx */
                for (int k = 0; k < kTile; k += kTileRows) {
                    int c = c0 + ty + k, r = r0 + tx;
                    if (c < cols && r < rows) {
                        float v = tile[tx][ty + k];
                        size_t o = (size_t)c * rows + r;
                        st(d, o, acc ? __fadd_rn(ld(d, o), v) : v);
                    }
                }
                __syncthreads(); /* before the next tile overwrites this one */
            }
    }
}

/* dst[i] (+)= src[i], from type S to type D (NCHW convert_layout with types). */
template <typename S, typename D> __global__ void convert_k(size_t n, const S *src, D *dst, int acc) {
    GRID_STRIDE(i, n) {
        float v = ld(src, i);
        st(dst, i, acc ? __fadd_rn(ld(dst, i), v) : v);
    }
}

/* -------------------------------------------------------------------- loss */

/* One block per row: the row's loss (double) into row_loss[n], its gradient
 * into dlogits; the same formula as the CPU backend. */
__global__ void softmax_xent_rows_k(int N, int K, const float *logits, const int *labels, float smoothing,
                                    float *dlogits, double *row_loss) {
    __shared__ double shd[kThreads];
    __shared__ float shf[kThreads];
    int n = blockIdx.x;
    const float *z = logits + (size_t)n * K;
    float *dz = dlogits + (size_t)n * K;
    int label = labels[n];
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < K; k += blockDim.x) mx = fmaxf(mx, z[k]);
    mx = block_max(mx, shf);
    double se = 0.0, sz = 0.0;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        se += (double)expf(z[k] - mx);
        sz += z[k];
    }
    se = block_sum(se, shd);
    sz = block_sum(sz, shd);
    double off = (double)smoothing / K, on = 1.0 - smoothing + off;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        double target = k == label ? on : off;
        dz[k] = (float)(((double)expf(z[k] - mx) / se - target) / N);
    }
    if (threadIdx.x == 0) {
        /* a label outside [0, K) is a bug upstream (labels are checked when
         * read): make the loss NaN so the run reports it */
        row_loss[n] = (label < 0 || label >= K) ? (double)NAN
                                                : (double)mx + log(se) - (1.0 - smoothing) * z[label] - off * sz;
    }
}

__global__ void mean_k(int N, const double *row_loss, float *loss) {
    double s = 0.0;
    for (int n = 0; n < N; n++) s += row_loss[n];
    loss[0] = (float)(s / N);
}

/* One value per channel ([1, C, 1]): cuDNN has no statistics to take, the
 * CPU backend's rule is the batch's own mean, variance 0 (biased and
 * unbiased). */
__global__ void bn_single_fwd_k(int C, const float *x, const float *gamma, const float *beta, float *y, float *rm,
                                float *rv, float momentum, float eps, float *save_mean, float *save_invstd) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double invstd = 1.0 / sqrt((double)eps);
    float scale = (float)((double)gamma[c] * invstd);
    /* the CPU's expression: beta, or NaN for a NaN input */
    y[c] = __fadd_rn(__fmul_rn(x[c] - x[c], scale), beta[c]);
    save_mean[c] = x[c];
    save_invstd[c] = (float)invstd;
    rm[c] = __fadd_rn(__fmul_rn(1.0f - momentum, rm[c]), __fmul_rn(momentum, x[c]));
    rv[c] = __fadd_rn(__fmul_rn(1.0f - momentum, rv[c]), __fmul_rn(momentum, 0.0f));
}

__global__ void bn_single_bwd_k(int C, const float *dy, float *dx, float *dgamma, float *dbeta, int acc) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    dgamma[c] = 0.0f; /* sum of dy * (x - mean) * invstd, with x == mean */
    dbeta[c] = dy[c];
    dx[c] = acc ? dx[c] + 0.0f : 0.0f; /* dy - mean(dy) - 0 */
}

/* --------------------------------------------------------------- optimizer */

/* One value's update: the CPU backend's expressions, one rounding per
 * operation (see axpy_k); sc is LARS's trust ratio, 1 without it (a
 * product with 1 is exact: the same bits as no product). */
__device__ __forceinline__ void sgd_one(size_t i, float *param, const float *grad, float *buf, float lr,
                                        float momentum, float wd, int nesterov, float grad_scale, float sc) {
    float g = __fmul_rn(sc, __fadd_rn(__fmul_rn(grad_scale, grad[i]), __fmul_rn(wd, param[i])));
    if (momentum == 0.0f) {
        param[i] = __fsub_rn(param[i], __fmul_rn(lr, g));
        return;
    }
    float b = __fadd_rn(__fmul_rn(momentum, buf[i]), g);
    buf[i] = b;
    param[i] = __fsub_rn(param[i], __fmul_rn(lr, nesterov ? __fadd_rn(g, __fmul_rn(momentum, b)) : b));
}

__global__ void sgd_k(size_t n, float *param, const float *grad, float *buf, float lr, float momentum, float wd,
                      int nesterov, float grad_scale, const float *lr_at, const float *scale_at) {
    if (lr_at) lr = *lr_at;
    const float sc = scale_at ? *scale_at : 1.0f;
    GRID_STRIDE(i, n) sgd_one(i, param, grad, buf, lr, momentum, wd, nesterov, grad_scale, sc);
}

/* sumsq2: block b of G sums the squares of its equal slice of a and b in
 * double, in block_sum's fixed tree; sumsq2_final_k adds the G pairs in
 * order. G depends on n alone, so the bits do too. */
__global__ void sumsq2_partial_k(size_t n, int G, const float *a, const float *b, double *partial) {
    __shared__ double sh[kThreads];
    size_t per = (n + G - 1) / G, j0 = (size_t)blockIdx.x * per, j1 = j0 + per < n ? j0 + per : n;
    double sa = 0.0, sb = 0.0;
    for (size_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        double x = a[j], y = b[j];
        sa += x * x;
        sb += y * y;
    }
    sa = block_sum(sa, sh);
    sb = block_sum(sb, sh);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = sa;
        partial[2 * blockIdx.x + 1] = sb;
    }
}

__global__ void sumsq2_final_k(int G, const double *partial, float *out) {
    if (threadIdx.x != 0) return;
    double sa = 0.0, sb = 0.0;
    for (int k = 0; k < G; k++) {
        sa += partial[2 * k];
        sb += partial[2 * k + 1];
    }
    out[0] = (float)sa;
    out[1] = (float)sb;
}

__global__ void lars_trust_k(int k, const float *sums, float eta, float wd, float grad_scale, float *trust) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= k) return;
    double w = sqrt((double)sums[2 * r]), g = (double)grad_scale * sqrt((double)sums[2 * r + 1]);
    trust[r] = w > 0.0 && g > 0.0 ? (float)((double)eta * w / (g + (double)wd * w)) : 1.0f;
}

/* PowerSGD: the r columns of P (rows x r) orthonormal in order, one block;
 * the CPU's arithmetic without contractions (__fmul_rn, __fsub_rn), its
 * double sums in the block's tree order. */
__global__ void lowrank_orthonormalise_k(int rows, int r, float *P) {
    __shared__ double sh[kThreads];
    for (int k = 0; k < r; k++) {
        for (int c = 0; c < k; c++) {
            double d = 0.0;
            for (int i = threadIdx.x; i < rows; i += blockDim.x)
                d += (double)P[(size_t)i * r + c] * (double)P[(size_t)i * r + k];
            float f = (float)block_sum(d, sh);
            for (int i = threadIdx.x; i < rows; i += blockDim.x)
                P[(size_t)i * r + k] = __fsub_rn(P[(size_t)i * r + k], __fmul_rn(f, P[(size_t)i * r + c]));
            __syncthreads();
        }
        double s = 0.0;
        for (int i = threadIdx.x; i < rows; i += blockDim.x) {
            double x = P[(size_t)i * r + k];
            s += x * x;
        }
        s = block_sum(s, sh);
        float inv = s > 0.0 ? (float)(1.0 / sqrt(s)) : 0.0f;
        for (int i = threadIdx.x; i < rows; i += blockDim.x) P[(size_t)i * r + k] = __fmul_rn(P[(size_t)i * r + k], inv);
        __syncthreads();
    }
}

/* PowerSGD: row blockIdx.x of Qt (r x cols) refilled with normals when all 0. */
__global__ void lowrank_redraw_k(int cols, float *Qt, uint64_t seed) {
    __shared__ double sh[kThreads];
    float *row = Qt + (size_t)blockIdx.x * cols;
    double nonzero = 0.0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) nonzero += row[j] != 0.0f;
    if (block_sum(nonzero, sh) > 0.0) return;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        row[j] = rng_hash_normal_inline(seed, (uint64_t)blockIdx.x * cols + j);
}

template <typename T> __global__ void narrow_k(size_t n, const float *x, T *h) {
    GRID_STRIDE(i, n) h[i] = narrow_to<T>(x[i]);
}

/* The op's result comes back from cuDNN already rounded to T; with
 * accumulate, the old float contents are added in fp32 and the sum rounded
 * to T again, as a T tensor updated in place would be. */
template <typename T> __global__ void widen_k(size_t n, const T *h, float *y, int acc) {
    GRID_STRIDE(i, n) {
        float v = widen(h[i]);
        y[i] = acc ? widen(narrow_to<T>(__fadd_rn(y[i], v))) : v;
    }
}

/* rows x cols values with row stride ld (cuBLAS's fp32 output); the
 * padding between rows is left alone. */
template <typename T> __global__ void round_k(size_t rows, size_t cols, size_t ld, float *y) {
    size_t total = rows * cols;
    GRID_STRIDE(t, total) {
        float *p = y + (t / cols) * ld + t % cols;
        *p = widen(narrow_to<T>(*p));
    }
}

/* ------------------------------------------------------- overflow check
 * Each thread remembers whether it saw a non-finite value and stores the
 * flag once: several threads may store 1.0f, all the same value, so no
 * atomics; a clean array stores nothing. */
__global__ void find_nonfinite_k(size_t n, const float *x, float *found) {
    int bad = 0;
    GRID_STRIDE(i, n) bad |= !isfinite(x[i]);
    if (bad) *found = 1.0f;
}

/* Runs the statements given with T the C++ type of backend_dtype `type`
 * (float, __nv_bfloat16, __half); any other value returns
 * cudaErrorInvalidValue. */
#define WITH_TYPE(type, ...)                                                         \
    do {                                                                             \
        switch (type) {                                                              \
        case BACKEND_DTYPE_FP32: { typedef float T; __VA_ARGS__; } break;            \
        case BACKEND_DTYPE_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;    \
        case BACKEND_DTYPE_FP16: { typedef __half T; __VA_ARGS__; } break;           \
        default: return cudaErrorInvalidValue;                                       \
        }                                                                            \
    } while (0)

/* The same with two types: S of the source, D of the destination. */
#define WITH_TYPES(stype, dtype, ...)                                                \
    do {                                                                             \
        switch (stype) {                                                             \
        case BACKEND_DTYPE_FP32: { typedef float S; WITH_TYPE(dtype, typedef T D; __VA_ARGS__); } break;  \
        case BACKEND_DTYPE_BF16: {                                                   \
            typedef __nv_bfloat16 S;                                                 \
            WITH_TYPE(dtype, typedef T D; __VA_ARGS__);                              \
        } break;                                                                     \
        case BACKEND_DTYPE_FP16: { typedef __half S; WITH_TYPE(dtype, typedef T D; __VA_ARGS__); } break; \
        default: return cudaErrorInvalidValue;                                       \
        }                                                                            \
    } while (0)

} // namespace

extern "C" {

cudaError_t cuk_probe(void) {
    cudaFuncAttributes fa;
    return cudaFuncGetAttributes(&fa, relu_fwd_k<float>);
}

cudaError_t cuk_relu_fwd(cudaStream_t s, int type, size_t n, const void *x, void *y) {
    int v = aligned16(x, y, NULL);
    if (n) WITH_TYPE(type, relu_fwd_k<T><<<grid_vec<T>(n, v), kThreads, 0, s>>>(n, (const T *)x, (T *)y, v));
    return cudaGetLastError();
}

cudaError_t cuk_relu_bwd(cudaStream_t s, int type, size_t n, const void *y, const void *dy, void *dx,
                         int accumulate) {
    int v = aligned16(y, dy, dx);
    if (n)
        WITH_TYPE(type, relu_bwd_k<T><<<grid_vec<T>(n, v), kThreads, 0, s>>>(n, (const T *)y, (const T *)dy,
                                                                               (T *)dx, accumulate, v));
    return cudaGetLastError();
}

cudaError_t cuk_add(cudaStream_t s, int type, size_t n, const void *a, const void *b, void *y) {
    int v = aligned16(a, b, y);
    if (n)
        WITH_TYPE(type, add_k<T><<<grid_vec<T>(n, v), kThreads, 0, s>>>(n, (const T *)a, (const T *)b, (T *)y, v));
    return cudaGetLastError();
}

cudaError_t cuk_normalize_u8(cudaStream_t s, int N, int C, int HW, const uint8_t *x, const float *lut, float *y) {
    size_t total = (size_t)N * (size_t)C * (size_t)HW;
    if (total) normalize_u8_k<<<grid_for(total), kThreads, 0, s>>>(total, C, (size_t)HW, x, lut, y);
    return cudaGetLastError();
}

cudaError_t cuk_axpy(cudaStream_t s, size_t n, float alpha, const float *x, float *y, int accumulate) {
    if (n) axpy_k<<<grid_for(n), kThreads, 0, s>>>(n, alpha, x, y, accumulate);
    return cudaGetLastError();
}

cudaError_t cuk_mul(cudaStream_t s, int type, size_t n, const void *a, const float *b, void *y, int accumulate) {
    if (n) WITH_TYPE(type, mul_k<T><<<grid_for(n), kThreads, 0, s>>>(n, (const T *)a, b, (T *)y, accumulate));
    return cudaGetLastError();
}

cudaError_t cuk_upload_small(cudaStream_t s, void *dst, const void *src, size_t n) {
    if (n == 0 || n > CUK_SMALL_UPLOAD) return n ? cudaErrorInvalidValue : cudaGetLastError();
    small_bytes v;
    memcpy(v.b, src, n);
    upload_small_k<<<1, CUK_SMALL_UPLOAD, 0, s>>>((unsigned char *)dst, v, (unsigned)n);
    return cudaGetLastError();
}

cudaError_t cuk_dropout_mask(cudaStream_t s, size_t n, float p, uint64_t seed, float *mask) {
    if (n) dropout_mask_k<<<grid_for(n), kThreads, 0, s>>>(n, p, 1.0f / (1.0f - p), seed, mask);
    return cudaGetLastError();
}

cudaError_t cuk_dropout_mask_at(cudaStream_t s, size_t n, float p, const uint64_t *step_at, uint64_t node_index,
                                float *mask) {
    if (n) dropout_mask_at_k<<<grid_for(n), kThreads, 0, s>>>(n, p, 1.0f / (1.0f - p), step_at, node_index, mask);
    return cudaGetLastError();
}

cudaError_t cuk_channel_copy(cudaStream_t s, int type, int N, int C, int HW, const void *src, int src_C, int src_off,
                             void *dst, int dst_C, int dst_off, int accumulate, int nhwc) {
    size_t total = (size_t)N * C * HW;
    if (!total) return cudaGetLastError();
    if (nhwc)
        WITH_TYPE(type, channel_copy_nhwc_k<T><<<grid_for(total), kThreads, 0, s>>>(
                            N, C, HW, (const T *)src, src_C, src_off, (T *)dst, dst_C, dst_off, accumulate));
    else
        WITH_TYPE(type, channel_copy_k<T><<<grid_for(total), kThreads, 0, s>>>(
                            N, C, HW, (const T *)src, src_C, src_off, (T *)dst, dst_C, dst_off, accumulate));
    return cudaGetLastError();
}

cudaError_t cuk_bias_fwd(cudaStream_t s, int type, int N, int C, int HW, const float *b, void *y, int nhwc) {
    size_t total = (size_t)N * C * HW;
    if (!total) return cudaGetLastError();
    if (nhwc || HW == 1) {
        size_t rows = (size_t)N * HW, gx = ((size_t)C + 31) / 32; /* gridDim.x: up to 2^31 - 1 */
        size_t gy = (rows + kBiasFwdRows - 1) / kBiasFwdRows, cap = 16384 / gx; /* enough blocks to fill a GPU */
        if (cap < 1) cap = 1;
        if (gy > cap) gy = cap;
        dim3 grid((unsigned)gx, (unsigned)gy), block(32, kBiasFwdRows);
        WITH_TYPE(type, bias_fwd_nhwc_k<T><<<grid, block, 0, s>>>(rows, C, b, (T *)y));
    } else {
        size_t planes = (size_t)N * C;
        unsigned threads = HW >= kThreads ? kThreads : (unsigned)((HW + 31) / 32 * 32);
        size_t gx = ((size_t)HW + threads - 1) / threads;
        if (gx > 64) gx = 64;
        dim3 grid((unsigned)gx, (unsigned)(planes < 65535 ? planes : 65535));
        WITH_TYPE(type, bias_fwd_k<T><<<grid, threads, 0, s>>>(planes, C, HW, b, (T *)y));
    }
    return cudaGetLastError();
}

cudaError_t cuk_convert_layout(cudaStream_t s, int N, int C, int HW, const void *src, int src_type, void *dst,
                               int dst_type, int nhwc, int to_nhwc, int accumulate) {
    if (N <= 0 || C <= 0 || HW <= 0) return cudaGetLastError();
    if (!nhwc || HW == 1 || C == 1) { /* the same order on both sides: a type conversion */
        size_t n = (size_t)N * C * HW;
        WITH_TYPES(src_type, dst_type, convert_k<S, D><<<grid_for(n), kThreads, 0, s>>>(n, (const S *)src, (D *)dst,
                                                                                        accumulate));
        return cudaGetLastError();
    }
    const int rows = to_nhwc ? C : HW, cols = to_nhwc ? HW : C;
    const unsigned tiles_r = (unsigned)(rows / kTile + (rows % kTile != 0)),
                   tiles_c = (unsigned)(cols / kTile + (cols % kTile != 0));
    /* gridDim.x may reach 2^31 - 1, .y and .z 65535; the kernel loops over the rest */
    dim3 grid(tiles_c, tiles_r < 65535u ? tiles_r : 65535u, (unsigned)N < 65535u ? (unsigned)N : 65535u);
    WITH_TYPES(src_type, dst_type,
               transpose_k<S, D><<<grid, dim3(kTile, kTileRows), 0, s>>>(N, rows, cols, (const S *)src, (D *)dst,
                                                                          accumulate));
    return cudaGetLastError();
}

cudaError_t cuk_transpose_layout(cudaStream_t s, int N, int C, int HW, const float *src, float *dst, int to_nhwc,
                                 int accumulate) {
    return cuk_convert_layout(s, N, C, HW, src, BACKEND_DTYPE_FP32, dst, BACKEND_DTYPE_FP32, 1, to_nhwc, accumulate);
}

cudaError_t cuk_bn_single_fwd(cudaStream_t s, int C, const float *x, const float *gamma, const float *beta, float *y,
                              float *running_mean, float *running_var, float momentum, float eps, float *save_mean,
                              float *save_invstd) {
    bn_single_fwd_k<<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(C, x, gamma, beta, y, running_mean,
                                                                       running_var, momentum, eps, save_mean,
                                                                       save_invstd);
    return cudaGetLastError();
}

cudaError_t cuk_bn_single_bwd(cudaStream_t s, int C, const float *dy, float *dx, float *dgamma, float *dbeta,
                              int accumulate) {
    bn_single_bwd_k<<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(C, dy, dx, dgamma, dbeta, accumulate);
    return cudaGetLastError();
}

size_t cuk_bias_bwd_scratch(int N, int C, int HW) {
    int a = bias_splits(N, HW), b = bias_nhwc_splits(N, HW);
    return (size_t)C * (size_t)(a > b ? a : b);
}

cudaError_t cuk_bias_bwd(cudaStream_t s, int type, int N, int C, int HW, const void *dy, float *db, double *partial,
                         int nhwc) {
    if (C == 0) return cudaGetLastError();
    int G = bias_splits(N, HW);
    int V = 0; /* the kernel's vector of values */
    WITH_TYPE(type, V = kVec<T>);
    if (nhwc && C % V == 0 && aligned16(dy, NULL, NULL)) {
        G = bias_nhwc_splits(N, HW);
        int vecs = C / V, lanes = vecs < 32 ? vecs : 32;
        dim3 grid((unsigned)((vecs + lanes - 1) / lanes), (unsigned)G), block((unsigned)lanes, kBiasVecThreads / lanes);
        WITH_TYPE(type, bias_bwd_partial_nhwc_vec_k<T><<<grid, block, 0, s>>>(N, C, HW, G, (const T *)dy, partial));
    } else if (nhwc) {
        WITH_TYPE(type, bias_bwd_partial_nhwc_k<T><<<dim3((unsigned)((C + 31) / 32), (unsigned)G),
                                                       dim3(32, kBiasNhwcRows), 0, s>>>(N, C, HW, G, (const T *)dy,
                                                                                         partial));
    } else {
        WITH_TYPE(type, bias_bwd_partial_k<T><<<dim3((unsigned)C, (unsigned)G), kThreads, 0, s>>>(
                            N, C, HW, G, (const T *)dy, partial));
    }
    bias_bwd_final_k<<<(unsigned)C, kThreads, 0, s>>>(C, G, partial, db);
    return cudaGetLastError();
}

cudaError_t cuk_pool_fwd(cudaStream_t s, int type, const pool_params *p, const void *x, void *y, int nhwc,
                         void *arg) {
    size_t total = (size_t)p->N * p->C * p->P * p->Q;
    if (p->mode != POOL_MODE_MAX) arg = NULL;
    if (total)
        WITH_TYPE(type, pool_fwd_k<T><<<grid_for(total), kThreads, 0, s>>>(*p, pr_rows(p), pr_cols(p), (const T *)x,
                                                                          type, (T *)y, nhwc, arg));
    return cudaGetLastError();
}

size_t cuk_pool_arg_bytes(const pool_params *p) {
    return p->mode == POOL_MODE_MAX ? (size_t)p->N * p->C * p->P * p->Q * (size_t)pr_arg_bytes(p) : 0;
}

cudaError_t cuk_pool_bwd(cudaStream_t s, int type, const pool_params *p, const void *x, const void *dy, void *dx,
                         int accumulate, int nhwc, const void *kept, void *scratch) {
    size_t total = (size_t)p->N * p->C * p->H * p->W, outputs = (size_t)p->N * p->C * p->P * p->Q;
    if (!total) return cudaGetLastError();
    const void *arg = NULL;
    if (p->mode == POOL_MODE_MAX) {
        if (!outputs) return cudaGetLastError();
        arg = kept;
        if (!arg) {
            WITH_TYPE(type, pool_argmax_k<T><<<grid_for(outputs), kThreads, 0, s>>>(*p, pr_rows(p), pr_cols(p),
                                                                                   (const T *)x, type, scratch, nhwc));
            arg = scratch;
        }
        if (pr_tiles(p)) { /* each input in one window: by output, a tenth of the index arithmetic */
            WITH_TYPE(type, pool_bwd_tile_k<T><<<grid_for(outputs), kThreads, 0, s>>>(
                                *p, pr_rows(p), pr_cols(p), arg, (const T *)dy, (T *)dx, accumulate, nhwc));
            return cudaGetLastError();
        }
    }
    WITH_TYPE(type, pool_bwd_k<T><<<grid_for(total), kThreads, 0, s>>>(*p, pr_rows(p), pr_cols(p), arg, (const T *)dy,
                                                                      type, (T *)dx, accumulate, nhwc));
    return cudaGetLastError();
}

cudaError_t cuk_softmax_xent(cudaStream_t s, int N, int K, const float *logits, const int *labels,
                             float smoothing, float *loss, float *dlogits, double *row_loss) {
    softmax_xent_rows_k<<<N, kThreads, 0, s>>>(N, K, logits, labels, smoothing, dlogits, row_loss);
    mean_k<<<1, 1, 0, s>>>(N, row_loss, loss);
    return cudaGetLastError();
}

cudaError_t cuk_sgd_update(cudaStream_t s, size_t n, float *param, const float *grad, float *momentum_buf,
                           float lr, float momentum, float weight_decay, int nesterov, float grad_scale,
                           const float *lr_at, const float *scale_at) {
    if (n)
        sgd_k<<<grid_for(n), kThreads, 0, s>>>(n, param, grad, momentum_buf, lr, momentum, weight_decay, nesterov,
                                               grad_scale, lr_at, scale_at);
    return cudaGetLastError();
}

cudaError_t cuk_sumsq2(cudaStream_t s, size_t n, const float *a, const float *b, float *out, double *partial) {
    /* one block per 64 K values, at most CUK_SUMSQ2_BLOCKS */
    size_t G = (n + 65535) / 65536;
    if (G < 1) G = 1;
    if (G > CUK_SUMSQ2_BLOCKS) G = CUK_SUMSQ2_BLOCKS;
    sumsq2_partial_k<<<(unsigned)G, kThreads, 0, s>>>(n, (int)G, a, b, partial);
    sumsq2_final_k<<<1, 32, 0, s>>>((int)G, partial, out);
    return cudaGetLastError();
}

cudaError_t cuk_lars_trust(cudaStream_t s, int k, const float *sums, float eta, float weight_decay,
                           float grad_scale, float *trust) {
    if (k > 0)
        lars_trust_k<<<(unsigned)((k + kThreads - 1) / kThreads), kThreads, 0, s>>>(k, sums, eta, weight_decay,
                                                                                    grad_scale, trust);
    return cudaGetLastError();
}

cudaError_t cuk_lowrank_orthonormalise(cudaStream_t s, int rows, int r, float *P) {
    if (rows > 0 && r > 0) lowrank_orthonormalise_k<<<1, kThreads, 0, s>>>(rows, r, P);
    return cudaGetLastError();
}

cudaError_t cuk_lowrank_redraw(cudaStream_t s, int r, int cols, float *Qt, uint64_t seed) {
    if (r > 0 && cols > 0) lowrank_redraw_k<<<(unsigned)r, kThreads, 0, s>>>(cols, Qt, seed);
    return cudaGetLastError();
}

cudaError_t cuk_narrow(cudaStream_t s, int math, size_t n, const float *x, void *h) {
    if (!n) return cudaGetLastError();
    if (math == BACKEND_MATH_FP16) narrow_k<<<grid_for(n), kThreads, 0, s>>>(n, x, (__half *)h);
    else if (math == BACKEND_MATH_BF16) narrow_k<<<grid_for(n), kThreads, 0, s>>>(n, x, (__nv_bfloat16 *)h);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

cudaError_t cuk_widen(cudaStream_t s, int math, size_t n, const void *h, float *y, int accumulate) {
    if (!n) return cudaGetLastError();
    if (math == BACKEND_MATH_FP16)
        widen_k<<<grid_for(n), kThreads, 0, s>>>(n, (const __half *)h, y, accumulate);
    else if (math == BACKEND_MATH_BF16)
        widen_k<<<grid_for(n), kThreads, 0, s>>>(n, (const __nv_bfloat16 *)h, y, accumulate);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

cudaError_t cuk_round_narrow(cudaStream_t s, int math, size_t rows, size_t cols, size_t ld, float *y) {
    size_t total = rows * cols;
    if (!total) return cudaGetLastError();
    if (math == BACKEND_MATH_FP16) round_k<__half><<<grid_for(total), kThreads, 0, s>>>(rows, cols, ld, y);
    else if (math == BACKEND_MATH_BF16) round_k<__nv_bfloat16><<<grid_for(total), kThreads, 0, s>>>(rows, cols, ld, y);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

cudaError_t cuk_find_nonfinite(cudaStream_t s, size_t n, const float *x, float *found) {
    if (n) find_nonfinite_k<<<grid_for(n), kThreads, 0, s>>>(n, x, found);
    return cudaGetLastError();
}

} // extern "C"
