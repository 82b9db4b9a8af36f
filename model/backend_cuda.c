/*
 * model/backend_cuda.c - the CUDA backend: cuDNN for convolutions and batch
 * norm, cuBLAS for GEMMs, our kernels (model/cuda_kernels.cu) for the rest.
 *
 * One process drives one GPU (device local_rank % devices on the node) from
 * one thread, the training thread, which queues every op on one compute
 * stream; the host waits only in download() and sync(). The reducer's
 * communication thread orders itself against that stream with fences (CUDA
 * events) and copies on its own per-thread stream (download_fenced,
 * upload_sync); NCCL gets the stream itself (native_stream).
 *
 * Convolution algorithms are chosen once per layer shape (and batch size) by
 * cudnnFind*Ex, cuDNN timing every algorithm on the layer's buffers; the
 * fastest whose workspace fits the limit and whose math mode is allowed wins:
 * the equivalent of PyTorch's torch.backends.cudnn.benchmark = True. The
 * workspace is one buffer, grown for the search and kept for the choices.
 *
 * Every op reads the layout, math mode and weights epoch it runs in from the
 * backend_ctx it is given (model/backend.h) and keeps none of them: what this
 * file keeps between calls (plans, the kept filters, the 16-bit copies) is
 * keyed by them, so nets in different contexts may alternate.
 *
 * Math modes (backend_ctx.math): FP32 restricts cuDNN to FMA kernels and cuBLAS to
 * its default (fp32) math; TF32 lets both use tensor cores with TF32 inputs.
 * BF16 and FP16 (mixed precision) run convolutions and GEMMs on tensor cores
 * with 16-bit operands and fp32 accumulation. Tensors stay float between
 * ops, so every such op first converts its two operands into 16-bit copies
 * (our kernels, into scratch buffers the backend keeps and grows). cuDNN runs
 * on the copies with 16-bit descriptors and float compute type (its
 * PSEUDO_HALF / PSEUDO_BFLOAT16 configurations) into a 16-bit result, which a
 * kernel widens into the float output (adding the old contents and rounding
 * again when accumulating). cuBLAS reads the 16-bit copies and writes the
 * float C itself, beta applied in fp32, which a kernel then rounds to the
 * type in place. The conversions are memory traffic an fp16 network would
 * not have (each operand read as float and written as 16-bit, the result
 * written twice): the gain is the tensor cores' throughput, not bandwidth or
 * memory. Each mode has its own convolution plans: descriptors (their data
 * type) and algorithms are per shape and mode.
 *
 * Layouts (backend_ctx.layout): in NHWC the activations of convolutions, bias,
 * batch norm, pooling and channel slices are [N, H, W, C]. cuDNN gets NHWC
 * tensor descriptors for them, which is the layout its tensor-core
 * convolutions run natively (in NCHW it transposes around them). Its NHWC
 * convolutions want the filter as [K, R, S, C] (a filter descriptor in
 * CUDNN_TENSOR_NHWC format; dimensions still given as K, C, R, S), while
 * ours stay [K, C, R, S] in every layout: the forward and data-gradient
 * convolutions transpose w into a KRSC scratch copy first, and the weight
 * gradient is computed as KRSC into scratch and transposed back. Convolution
 * plans are keyed by shape, math mode and layout. Batch norm passes NHWC
 * descriptors to the same cuDNN calls (SPATIAL mode, per-channel statistics
 * over N*H*W, takes any fully packed layout); our kernels have NHWC variants
 * (channels innermost, so a warp touches neighbouring channels). Tensors with
 * HW == 1 are the same bytes in both layouts and take the NCHW path whatever
 * the layout, so a linear layer's bias and batch norm give the same bits in
 * both.
 *
 * Every CUDA, cuDNN and cuBLAS call is checked (common/cuda_check.h): a
 * failure ends the process with file:line and the library's error string.
 */
#include "model/backend.h"
#include "model/backend_impl.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/cuda_check.h"
#include "common/fileio.h"
#include "model/cuda_kernels.h"
#include "model/cudnn_graph.h"
#include "model/plan_line.h"

/* A convolution shape and what cuDNN chose for it in one math mode. */
typedef struct conv_plan {
    conv_params key;
    int math;            /* BACKEND_MATH_* the plan was made for; part of the key */
    int layout;          /* BACKEND_LAYOUT_* of its tensor descriptors; part of the key */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int have_fwd, have_bwd_data, have_bwd_filter;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
    size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
    /* train.conv_api = graph: per pass (cg_pass) and output blend (beta 0, 1)
     * the graph API's plan, NULL until made or where none qualifies */
    cg_plan *graph[3][2];
    unsigned char graph_tried[3][2];
    /* a graph plan chosen elsewhere (plans_import: an earlier run's file or
     * rank 0), taken without a search at that pass's first call */
    unsigned char graph_picked[3][2];
    int graph_index[3][2];
    int64_t graph_engine[3][2];
    struct conv_plan *next;
} conv_plan;

#define PLAN_BUCKETS 256

/* BF16/FP16 math: the 16-bit copies of an op's first and second operand and
 * of its result (convolutions only; cuBLAS writes the float C). */
enum { H16_OP0, H16_OP1, H16_OUT, H16_SLOTS };
/* Where a 16-bit op's operands go widened when it runs on fp32 kernels
 * (batch norm, pooling): x, dy, and the result (y or dx). */
enum { A32_X, A32_DY, A32_OUT, A32_SLOTS };

static struct {
    int ready;
    int device;
    int capturing;             /* between capture_begin and capture_end */
    void *cublas_ws;           /* cuBLAS's workspace (32 MiB), set at the backend's start */
    uint64_t mem_epoch;        /* memory_epoch: bumped by every free and every buffer grown */
    int cc_major, cc_minor;    /* compute capability */
    char dev_name[256];        /* cudaDeviceProp.name */
    cudaStream_t stream;       /* the compute stream */
    cudaStream_t copy_stream;  /* input uploads (upload_async) */
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    int cublas_tf32;           /* the cuBLAS handle's math mode is TF32 tensor ops (cublas_math); -1: unset */
    void *ws;                  /* cuDNN workspace */
    size_t ws_bytes;
    size_t ws_limit;           /* largest workspace an algorithm may ask for */
    double *scratch;           /* our kernels' reductions */
    double *sumsq_partial;     /* sumsq2's partial sums (2 * CUK_SUMSQ2_BLOCKS), set at the start: a recorded
                                * step may call it before any eager step has (its first steps skipped) */
    size_t scratch_n;
    float *fscratch;           /* NHWC convolutions: the filter (or its gradient) as [K, R, S, C] */
    size_t fscratch_n;
    void *h16[H16_SLOTS];      /* BF16/FP16 math: 16-bit copies (h16_get) */
    size_t h16_bytes[H16_SLOTS];
    float *a32[A32_SLOTS];     /* 16-bit activations: fp32 copies around the fp32-only ops (a32_*) */
    size_t a32_n[A32_SLOTS];
    conv_plan *plans[PLAN_BUCKETS];
    cudnnTensorDescriptor_t bn_x, bn_param; /* reset by every batch-norm call */
    float *bn_stage;           /* aligned stand-ins for their misaligned per-channel vectors (bn_vec) */
    size_t bn_stage_n;
    int bn16_refused[3];       /* by backend_dtype: cuDNN refused batch norm on it: widened since (bn_widened) */
    cudnnActivationDescriptor_t relu; /* the ReLU of batch norm's fused forward */
    void *bn_reserve;          /* that forward's reserve space where no fwd_keep takes it (then unread) */
    size_t bn_reserve_n;
    int bn_fused_refused[3];   /* by backend_dtype: cuDNN refused the fused ops on it: composed since */
    int bn_ex_refused;         /* cuDNN refused the SPATIAL_PERSISTENT Ex calls: plain SPATIAL since */
    void *cg_scratch;          /* where the graph API's candidate plans write while timed */
    size_t cg_scratch_n;
    /* conv_bwd_data's `paired`: whether H16_OP1 holds the 16-bit copy of
     * pair_dy (pair_n values in mode pair_math), left by conv_bwd_filter */
    const float *pair_dy;
    size_t pair_n;
    int pair_math, pair_ready;
    /* backend_ctx.weights_epoch: the filters kept, one per weight pointer
     * (fcache_*) */
    struct fcache_entry *fc;
    int fc_n, fc_cap;
} g;

/* The current device is per thread, and a thread that never selected this
 * rank's GPU runs on device 0: another rank's GPU on a node of several,
 * which one GPU cannot show (device 0 is everyone's there). So every entry
 * point of this backend calls on_device() first: a thread's first call
 * selects the rank's GPU, and every later one checks that nothing selected
 * another since (a library call, a thread of ours that set one itself). */
static _Thread_local int tls_device_set;

static void on_device(void) {
    if (!tls_device_set) {
        CUDA_CHECK(cudaSetDevice(g.device));
        tls_device_set = 1;
        return;
    }
    int d = -1;
    CUDA_CHECK(cudaGetDevice(&d));
    if (d != g.device)
        cnt_fatal("CUDA backend: called on a thread whose current device is cuda:%d, not this rank's cuda:%d "
                  "(something selected another GPU on this thread)",
                  d, g.device);
}

/* ------------------------------------------------------------------ memory */

static void *cuda_alloc(size_t bytes) {
    on_device();
    if (g.capturing)
        cnt_fatal("cuda: %zu bytes allocated while train.cuda_graph records the step: set train.cuda_graph = false",
                  bytes);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        cnt_fatal_at(__FILE__, __LINE__, 1, "lower train.batch_size, or use a smaller model",
                     "cudaMalloc(%zu bytes) on cuda:%d: %s (%.2f of %.2f GiB free)", bytes, g.device,
                     cudaGetErrorString(e), free_b / 1073741824.0, total_b / 1073741824.0);
    }
    /* Zeroed before alloc returns: the copy stream and other threads' streams
     * are not ordered after the compute stream (allocations are rare). */
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, g.stream));
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    return p;
}

static void cuda_free(void *ptr) {
    on_device();
    if (!ptr) return;
    if (g.capturing)
        cnt_fatal("cuda: a buffer freed while train.cuda_graph records the step: set train.cuda_graph = false");
    g.mem_epoch++;
    /* queued ops may still use it */
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    CUDA_CHECK(cudaFree(ptr));
}

/* The host buffers passed to upload are pageable: cudaMemcpyAsync stages them
 * before it returns, so the caller may reuse the buffer at once. */
static void cuda_upload(void *dst, const void *host_src, size_t bytes) {
    on_device();
    if (!bytes) return;
    /* a few bytes (a step's rate and dropout seed, written before each
     * step): a kernel's argument, nothing staged and no wait for the stream */
    if (bytes <= CUK_SMALL_UPLOAD) CUDA_CHECK(cuk_upload_small(g.stream, dst, host_src, bytes));
    else CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, g.stream));
}

static void cuda_download(void *host_dst, const void *src, size_t bytes) {
    on_device();
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, g.stream));
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
}

static void cuda_copy(void *dst, const void *src, size_t bytes) {
    on_device();
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g.stream));
}

static void cuda_zero(void *dst, size_t bytes) {
    on_device();
    if (bytes) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, g.stream));
}

static void cuda_sync(void) {
    on_device();
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    /* a kernel fault shows up here if no later call reported it */
    CUDA_CHECK(cudaGetLastError());
}

/* *buf holds at least n elements of `size` bytes afterwards (at least
 * 4096): grown, never shrunk, after the stream has finished with the old
 * buffer (queued ops may still use it). */
static void *grow(void **buf, size_t *cap, size_t n, size_t size) {
    if (n > *cap) {
        if (g.capturing)
            cnt_fatal("cuda: the step recorded for train.cuda_graph needed a scratch buffer of %zu bytes, more "
                      "than the eager steps before it (%zu): set train.cuda_graph = false", n * size, *cap * size);
        g.mem_epoch++;
        CUDA_CHECK(cudaStreamSynchronize(g.stream));
        CUDA_CHECK(cudaFree(*buf));
        *buf = NULL;
        size_t want = n < 4096 ? 4096 : n;
        CUDA_CHECK(cudaMalloc(buf, want * size));
        *cap = want;
    }
    return *buf;
}

/* cuDNN's workspace, grown to the largest algorithm chosen. */
static void ws_reserve(size_t bytes) { grow(&g.ws, &g.ws_bytes, bytes, 1); }

/* Our kernels' reductions. */
static double *scratch_get(size_t n) { return grow((void **)&g.scratch, &g.scratch_n, n, sizeof(double)); }

/* NHWC convolutions' filter copies. One op uses it at a time: its later
 * kernels may read it, the next op's may overwrite it (one stream, so in
 * order). */
static float *fscratch_get(size_t n) { return grow((void **)&g.fscratch, &g.fscratch_n, n, sizeof(float)); }

static int layout_nhwc(const backend_ctx *ctx) {
    CNT_ASSERT(ctx->layout == BACKEND_LAYOUT_NCHW || ctx->layout == BACKEND_LAYOUT_NHWC);
    return ctx->layout == BACKEND_LAYOUT_NHWC;
}

/* ---------------------------------------------------- reduced precision */

static int math_reduced(int math) { return math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16; }

static const char *math_name(int math) {
    switch (math) {
    case BACKEND_MATH_TF32: return "TF32";
    case BACKEND_MATH_BF16: return "BF16";
    case BACKEND_MATH_FP16: return "FP16";
    default: return "FMA (fp32)";
    }
}

/* Buffer `slot` with room for n 16-bit values. Each buffer grows to its
 * largest use (the first training step's) and stays. */
static void *h16_get(int slot, size_t n) {
    size_t bytes = (n ? n : 1) * 2; /* both types are 2 bytes */
    if (bytes > g.h16_bytes[slot]) {
        cuda_free(g.h16[slot]); /* waits for queued ops that may still use it */
        g.h16[slot] = cuda_alloc(bytes);
        g.h16_bytes[slot] = bytes;
    }
    return g.h16[slot];
}

/* x[0, n) rounded to the type of math mode `math`, in buffer `slot`. */
static const void *h16_from(int math, int slot, size_t n, const float *x) {
    void *h = h16_get(slot, n);
    CUDA_CHECK(cuk_narrow(g.stream, math, n, x, h));
    return h;
}

/* ------------------------------------------------------------- convolution */

/* ---- 16-bit activations (backend_ctx.act) ----
 * Convolutions, GEMMs, bias, the elementwise ops, channel slices and layout
 * conversions read and write them natively (cuDNN and cuBLAS with 16-bit
 * tensors, our kernels templated on the type). Batch norm and pooling run
 * pooling's kernels too; batch norm is cuDNN's on 16-bit tensors with fp32
 * parameters and statistics (as PyTorch's autocast runs it), except where it
 * runs fp32 code on widened copies (a32_*, rounding what it writes once: the
 * contract's numbers, at the cost of a conversion each way; bn_widened). They
 * go with the same type's math mode (train.activations is validated so). */
static int act16(const backend_ctx *ctx) {
    if (ctx->act == BACKEND_DTYPE_FP32) return 0;
    CNT_ASSERT((ctx->act == BACKEND_DTYPE_BF16 && ctx->math == BACKEND_MATH_BF16) ||
               (ctx->act == BACKEND_DTYPE_FP16 && ctx->math == BACKEND_MATH_FP16));
    return 1;
}

static float *a32_get(int slot, size_t n) { return grow((void **)&g.a32[slot], &g.a32_n[slot], n, sizeof(float)); }

/* dst[0, n) = src converted from type st to dt, on the compute stream. */
static void act_convert(size_t n, const void *src, int st, void *dst, int dt, int accumulate) {
    CNT_ASSERT(n <= (size_t)INT_MAX);
    if (n) CUDA_CHECK(cuk_convert_layout(g.stream, 1, 1, (int)n, src, st, dst, dt, 0, 0, accumulate));
}

/* The n activations at src as fp32: src itself in an fp32 context, else a
 * widened copy in slot `slot` (NULL for NULL). */
static const float *a32_in(const backend_ctx *ctx, int slot, size_t n, const void *src) {
    if (!act16(ctx) || !src) return src;
    float *t = a32_get(slot, n);
    act_convert(n, src, ctx->act, t, BACKEND_DTYPE_FP32, 0);
    return t;
}

/* Where an fp32 op writes the result for dst: dst itself in an fp32
 * context, else slot `slot`, holding dst's values widened when the op adds
 * to them; a32_back then rounds it into dst. */
static float *a32_out(const backend_ctx *ctx, int slot, size_t n, void *dst, int accumulate) {
    if (!act16(ctx)) return dst;
    float *t = a32_get(slot, n);
    if (accumulate) act_convert(n, dst, ctx->act, t, BACKEND_DTYPE_FP32, 0);
    return t;
}

static void a32_back(const backend_ctx *ctx, const float *t, void *dst, size_t n) {
    if (act16(ctx)) act_convert(n, t, BACKEND_DTYPE_FP32, dst, ctx->act, 0);
}

/* ctx with fp32 activations: what the fp32 kernels under a32_* run in. */
static backend_ctx ctx_f32(const backend_ctx *ctx) {
    backend_ctx c = *ctx;
    c.act = BACKEND_DTYPE_FP32;
    return c;
}

static unsigned plan_hash(const conv_params *p, int math, int layout) {
    const int *v = (const int *)p;
    unsigned h = 2166136261u;
    for (size_t i = 0; i < sizeof *p / sizeof(int); i++) h = (h ^ (unsigned)v[i]) * 16777619u;
    h = (h ^ (unsigned)math) * 16777619u;
    h = (h ^ (unsigned)layout) * 16777619u;
    return h % PLAN_BUCKETS;
}

/* The data type of the tensors cuDNN sees in math mode `math` (the compute
 * type is float in every mode). */
static cudnnDataType_t conv_data_type(int math) {
    if (math == BACKEND_MATH_FP16) return CUDNN_DATA_HALF;
    if (math == BACKEND_MATH_BF16) return CUDNN_DATA_BFLOAT16;
    return CUDNN_DATA_FLOAT;
}

/* The plan of shape p in ctx's math mode and layout. Plans are keyed by
 * both, so another mode never reuses descriptors of another data type or an
 * algorithm chosen under other rules (or for another layout), and going back
 * to a mode finds its plans. */
static conv_plan *plan_get(const backend_ctx *ctx, const conv_params *p) {
    conv_params key;
    memset(&key, 0, sizeof key);
    key = *p;
    const int math = ctx->math, layout = ctx->layout;
    unsigned h = plan_hash(&key, math, layout);
    for (conv_plan *pl = g.plans[h]; pl; pl = pl->next)
        if (pl->math == math && pl->layout == layout && memcmp(&pl->key, &key, sizeof key) == 0) return pl;
    conv_plan *pl = cnt_calloc(1, sizeof *pl);
    pl->key = key;
    pl->math = math;
    pl->layout = layout;
    const cudnnDataType_t dt = conv_data_type(math);
    /* Dimensions are given as (N, C, H, W) and (K, C, R, S) in both formats;
     * the format sets the strides: NHWC tensors are [N, H, W, C] and an NHWC
     * filter is [K, R, S, C] in memory. */
    const cudnnTensorFormat_t fmt = layout_nhwc(ctx) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&pl->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&pl->y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&pl->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&pl->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->x, fmt, dt, p->N, p->C, p->H, p->W));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->y, fmt, dt, p->N, p->K, p->P, p->Q));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(pl->w, dt, fmt, p->K, p->C, p->R, p->S));
    /* compute type float in every mode: with 16-bit data that is cuDNN's
     * PSEUDO_HALF / PSEUDO_BFLOAT16 configuration (fp32 accumulation) */
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(pl->conv, p->pad_h, p->pad_w, p->stride_h, p->stride_w, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    int n, c, hh, ww;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(pl->conv, pl->x, pl->w, &n, &c, &hh, &ww));
    CNT_ASSERT(n == p->N && c == p->K && hh == p->P && ww == p->Q);
    pl->next = g.plans[h];
    g.plans[h] = pl;
    return pl;
}

/* Whether an algorithm's math mode is allowed in our math mode `math`. FP32
 * admits FMA kernels only (cuDNN's DEFAULT math may use TF32 tensor cores on
 * Ampere and later); TF32 admits tensor cores but never down-conversion of the
 * fp32 data to fp16 (ALLOW_CONVERSION). BF16 and FP16 admit tensor cores and
 * FMA kernels on their 16-bit data, never a conversion to another type. */
static int math_allowed(int math, cudnnMathType_t m) {
    if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return 0;
    if (math != BACKEND_MATH_FP32) return 1;
    return m == CUDNN_FMA_MATH || (m == CUDNN_DEFAULT_MATH && g.cc_major < 8);
}

static void conv_set_math(conv_plan *pl, cudnnMathType_t m) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(pl->conv, m));
}

/* Each direction's choice: cudnnFind*Ex times the algorithms on the layer's
 * own buffers (so the search allocates nothing beyond the workspace), and
 * the first (fastest) that succeeded, fits the workspace limit and has an
 * allowed math mode wins. If none does, cuDNN's heuristic
 * (cudnnGet*Algorithm_v7, which knows what exists for the data type and
 * layout) picks the first supported algorithm with an allowed math mode,
 * with the workspace it asks for; only when it has none either, a fixed
 * algorithm with FMA math (said once: slow, and it may not exist for
 * 16-bit data or NHWC). */
#define FIND_MAX 16

/* A recorded step (train.cuda_graph) is the eager steps' work, whose
 * algorithms were chosen then: a search (it waits for the stream, reads the
 * free memory, allocates and times) reached while recording means a pass the
 * eager steps did not run, which a recording cannot hold. */
static void no_search_while_recording(const char *what) {
    if (g.capturing)
        cnt_fatal("cuda: %s while train.cuda_graph records the step (a convolution the eager steps before it did "
                  "not run): set train.cuda_graph = false", what);
}

/* The most workspace a search may take: the limit, or half the free memory
 * if that is less, and never less than what the workspace already holds. */
static size_t ws_search_limit(void) {
    if (g.ws_bytes >= g.ws_limit) return g.ws_bytes;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t want = g.ws_limit < free_b / 2 ? g.ws_limit : free_b / 2;
    return want > g.ws_bytes ? want : g.ws_bytes;
}

/* The workspace the legacy search uses (ws_search_limit), grown once, kept
 * for the chosen algorithms. */
static size_t ws_for_find(void) {
    no_search_while_recording("a cuDNN algorithm search");
    /* the search reads the layer's inputs: the ops that write them first */
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    ws_reserve(ws_search_limit());
    return g.ws_bytes;
}

static void say_fallback(const conv_plan *pl, const char *dir, int heuristic) {
    static int said;
    if (said++) return;
    const conv_params *p = &pl->key;
    log_warn("cuDNN offered no %s algorithm for the %s of conv %dx%dx%dx%d * %dx%dx%dx%d (stride %d, pad %d) within "
             "%.0f MiB of workspace; using %s (said once)",
             math_name(pl->math), dir, p->N, p->C, p->H, p->W, p->K, p->C, p->R,
             p->S, p->stride_h, p->pad_h, g.ws_limit / 1048576.0,
             heuristic ? "cuDNN's heuristic choice, untimed, with the workspace it needs"
                       : "a slow fixed fallback (the heuristic had none either)");
}

/* One row of a cudnnFind* result, whatever the direction. */
typedef struct found_algo {
    cudnnStatus_t status;
    int algo;
    size_t memory;
    cudnnMathType_t math;
} found_algo;

#define FOUND_ROWS(perf, got, rows)                                                                      \
    for (int i_ = 0; i_ < (got); i_++)                                                                  \
    (rows)[i_] = (found_algo){(perf)[i_].status, (int)(perf)[i_].algo, (perf)[i_].memory, (perf)[i_].mathType}

/* The first (fastest) row that succeeded, fits the workspace limit and has a
 * math mode allowed in the plan's mode, into *algo, *math, *ws; 0 when
 * there is none (the caller's fallback, with FMA math, stays). */
static int choose_algo(const conv_plan *pl, const found_algo *rows, int got, int *algo, cudnnMathType_t *math,
                       size_t *ws) {
    for (int i = 0; i < got; i++) {
        if (rows[i].status != CUDNN_STATUS_SUCCESS || rows[i].memory > g.ws_limit ||
            !math_allowed(pl->math, rows[i].math))
            continue;
        *algo = rows[i].algo;
        *math = rows[i].math;
        *ws = rows[i].memory;
        return 1;
    }
    *math = CUDNN_FMA_MATH;
    *ws = 0;
    return 0;
}

/* Among a heuristic's rows (best first): the first supported one with a
 * math mode allowed in the plan's mode, whatever its workspace; 0 when there
 * is none. */
static int choose_heuristic(const conv_plan *pl, const found_algo *rows, int got, int *algo, cudnnMathType_t *math) {
    for (int i = 0; i < got; i++) {
        if (rows[i].status != CUDNN_STATUS_SUCCESS || !math_allowed(pl->math, rows[i].math)) continue;
        *algo = rows[i].algo;
        *math = rows[i].math;
        return 1;
    }
    return 0;
}

/* The math mode the search for a plan may consider. */
static cudnnMathType_t search_math(const conv_plan *pl) {
    return pl->math == BACKEND_MATH_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

/* The plan_* functions get the buffers the op hands cuDNN: the caller's
 * float tensors, or in BF16/FP16 the 16-bit copies (so the search times the
 * algorithms on the data type they will run on). */
static void plan_fwd(conv_plan *pl, const void *x, const void *w, void *y) {
    cudnnConvolutionFwdAlgoPerf_t perf[FIND_MAX];
    found_algo rows[FIND_MAX];
    int got = 0, algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    size_t ws = ws_for_find();
    conv_set_math(pl, search_math(pl));
    /* y is about to be overwritten anyway */
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(g.cudnn, pl->x, x, pl->w, w, pl->conv, pl->y, y, FIND_MAX,
                                                       &got, perf, g.ws, ws));
    FOUND_ROWS(perf, got, rows);
    int found = choose_algo(pl, rows, got, &algo, &pl->fwd_math, &pl->fwd_ws);
    pl->fwd = (cudnnConvolutionFwdAlgo_t)algo;
    if (!found) {
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(g.cudnn, pl->x, pl->w, pl->conv, pl->y, FIND_MAX, &got,
                                                           perf));
        FOUND_ROWS(perf, got, rows);
        int h = choose_heuristic(pl, rows, got, &algo, &pl->fwd_math);
        pl->fwd = (cudnnConvolutionFwdAlgo_t)algo;
        say_fallback(pl, "forward pass", h);
        conv_set_math(pl, pl->fwd_math);
        CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(g.cudnn, pl->x, pl->w, pl->conv, pl->y, pl->fwd,
                                                            &pl->fwd_ws));
    }
    pl->have_fwd = 1;
}

static void plan_bwd_data(conv_plan *pl, const void *dy, const void *w, void *dx, int accumulate) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[FIND_MAX];
    found_algo rows[FIND_MAX];
    int got = 0, algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    /* The search writes its output: when dx holds a gradient to add to, it
     * writes a scratch copy instead, of dx's type, made before the search's
     * workspace takes half of what is free; where it cannot be had, no
     * search (the heuristic below chooses). */
    void *out = dx;
    int can_find = 1;
    no_search_while_recording("a cuDNN algorithm search");
    if (accumulate) {
        size_t es = conv_data_type(pl->math) == CUDNN_DATA_FLOAT ? sizeof(float) : 2;
        if (cudaMalloc(&out, conv_in_count(&pl->key) * es) != cudaSuccess) {
            (void)cudaGetLastError();
            out = NULL;
            can_find = 0;
        }
    }
    size_t ws = ws_for_find();
    conv_set_math(pl, search_math(pl));
    if (can_find)
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(g.cudnn, pl->w, w, pl->y, dy, pl->conv, pl->x, out,
                                                                FIND_MAX, &got, perf, g.ws, ws));
    if (accumulate && out) {
        CUDA_CHECK(cudaStreamSynchronize(g.stream));
        CUDA_CHECK(cudaFree(out));
    }
    FOUND_ROWS(perf, got, rows);
    int found = choose_algo(pl, rows, got, &algo, &pl->bwd_data_math, &pl->bwd_data_ws);
    pl->bwd_data = (cudnnConvolutionBwdDataAlgo_t)algo;
    if (!found) {
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(g.cudnn, pl->w, pl->y, pl->conv, pl->x, FIND_MAX,
                                                                &got, perf));
        FOUND_ROWS(perf, got, rows);
        int h = choose_heuristic(pl, rows, got, &algo, &pl->bwd_data_math);
        pl->bwd_data = (cudnnConvolutionBwdDataAlgo_t)algo;
        say_fallback(pl, "data gradient", h);
        conv_set_math(pl, pl->bwd_data_math);
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(g.cudnn, pl->w, pl->y, pl->conv, pl->x,
                                                                 pl->bwd_data, &pl->bwd_data_ws));
    }
    pl->have_bwd_data = 1;
}

static void plan_bwd_filter(conv_plan *pl, const void *x, const void *dy, void *dw) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[FIND_MAX];
    found_algo rows[FIND_MAX];
    int got = 0, algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    size_t ws = ws_for_find();
    conv_set_math(pl, search_math(pl));
    /* dw is about to be overwritten anyway */
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(g.cudnn, pl->x, x, pl->y, dy, pl->conv, pl->w, dw,
                                                              FIND_MAX, &got, perf, g.ws, ws));
    FOUND_ROWS(perf, got, rows);
    int found = choose_algo(pl, rows, got, &algo, &pl->bwd_filter_math, &pl->bwd_filter_ws);
    pl->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)algo;
    if (!found) {
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(g.cudnn, pl->x, pl->y, pl->conv, pl->w, FIND_MAX,
                                                                  &got, perf));
        FOUND_ROWS(perf, got, rows);
        int h = choose_heuristic(pl, rows, got, &algo, &pl->bwd_filter_math);
        pl->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)algo;
        say_fallback(pl, "weight gradient", h);
        conv_set_math(pl, pl->bwd_filter_math);
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(g.cudnn, pl->x, pl->y, pl->conv, pl->w,
                                                                   pl->bwd_filter, &pl->bwd_filter_ws));
    }
    pl->have_bwd_filter = 1;
}

static const float k_one = 1.0f, k_zero = 0.0f;

/* ---- plans_export / plans_import (backend.h): what was chosen, as text.
 * The first line names what it was chosen on; a line per plan
 * (model/plan_line.h): the legacy calls' choices per pass and the graph
 * API's configuration per pass and blend. ---- */
static void plans_header(char *buf, size_t len) {
    snprintf(buf, len, "cnntrain conv plans v2; device %s; compute %d.%d; cuDNN %zu\n", g.dev_name, g.cc_major,
             g.cc_minor, cudnnGetVersion());
}

/* pl's graph choice for pass k and blend b into *index and *engine (-1 -1:
 * none): the plan made, else one imported and not yet taken. */
static void graph_choice(const conv_plan *pl, int k, int b, int *index, int64_t *engine) {
    *index = -1;
    *engine = -1;
    if (pl->graph[k][b]) {
        cg_plan_choice(pl->graph[k][b], index, engine);
    } else if (pl->graph_picked[k][b] && !pl->graph_tried[k][b]) {
        *index = pl->graph_index[k][b];
        *engine = pl->graph_engine[k][b];
    }
}

static size_t cuda_plans_export(char *buf, size_t len) {
    on_device();
    char line[512];
    size_t o = 0;
    plans_header(line, sizeof line);
#define PLANS_PUT(text)                                                          \
    do {                                                                         \
        size_t n_ = strlen(text);                                                \
        if (o < len) snprintf(buf + o, len - o, "%s", text);                     \
        o += n_;                                                                 \
    } while (0)
    PLANS_PUT(line);
    for (int b = 0; b < PLAN_BUCKETS; b++)
        for (const conv_plan *pl = g.plans[b]; pl; pl = pl->next) {
            plan_line l = {.p = pl->key, .math = pl->math, .layout = pl->layout,
                           .have = {pl->have_fwd, pl->have_bwd_data, pl->have_bwd_filter},
                           .algo = {(int)pl->fwd, (int)pl->bwd_data, (int)pl->bwd_filter},
                           .math_type = {(int)pl->fwd_math, (int)pl->bwd_data_math, (int)pl->bwd_filter_math},
                           .ws = {pl->fwd_ws, pl->bwd_data_ws, pl->bwd_filter_ws}};
            int any = l.have[0] || l.have[1] || l.have[2];
            for (int k = 0; k < 3; k++)
                for (int bl = 0; bl < 2; bl++) {
                    graph_choice(pl, k, bl, &l.graph_index[k][bl], &l.graph_engine[k][bl]);
                    any |= l.graph_index[k][bl] >= 0;
                }
            if (!any) continue;
            plan_line_format(&l, line, sizeof line);
            PLANS_PUT(line);
        }
#undef PLANS_PUT
    return o;
}

/* One pass of an imported line, checked: an algorithm below `count`, a math
 * type cuDNN has, a workspace within the limit. */
static int plan_pass_ok(int algo, int count, int math, size_t ws) {
    return algo >= 0 && algo < count && math >= 0 && math <= 3 && ws <= g.ws_limit;
}

/* An imported graph choice for pass k and blend b of pl: a plan made here
 * that differs from it goes, and the choice is taken at that pass's next
 * call (so every rank runs rank 0's plans). */
static void graph_pick(conv_plan *pl, int k, int b, int index, int64_t engine) {
    int have_index;
    int64_t have_engine;
    graph_choice(pl, k, b, &have_index, &have_engine);
    if (have_index == index && have_engine == engine) return;
    if (pl->graph[k][b]) CUDA_CHECK(cudaStreamSynchronize(g.stream)); /* its kernels may still be queued */
    cg_plan_free(pl->graph[k][b]);
    pl->graph[k][b] = NULL;
    pl->graph_tried[k][b] = 0;
    pl->graph_picked[k][b] = 1;
    pl->graph_index[k][b] = index;
    pl->graph_engine[k][b] = engine;
}

static int cuda_plans_import(const char *text, char *why, size_t len) {
    on_device();
    char head[512];
    plans_header(head, sizeof head);
    size_t hl = strlen(head);
    if (strncmp(text, head, hl) != 0) {
        const char *nl = strchr(text, '\n');
        if (why)
            snprintf(why, len, "they were chosen on '%.*s', this is '%.*s'", nl ? (int)(nl - text) : 80, text,
                     (int)hl - 1, head);
        return -1;
    }
    /* every line checked before any is taken: a bad file changes nothing */
    for (int take = 0; take < 2; take++) {
        int n = 0, lineno = 1;
        for (const char *t = text + hl; *t; lineno++) {
            const char *nl = strchr(t, '\n');
            plan_line l;
            int ok = plan_line_parse(t, &l);
            for (int k = 0; k < 3 && ok; k++) /* the rules a search here would follow */
                ok = !l.have[k] || math_allowed(l.math, (cudnnMathType_t)l.math_type[k]);
            ok = ok && plan_pass_ok(l.algo[0], CUDNN_CONVOLUTION_FWD_ALGO_COUNT, l.math_type[0], l.ws[0]) &&
                 plan_pass_ok(l.algo[1], CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, l.math_type[1], l.ws[1]) &&
                 plan_pass_ok(l.algo[2], CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, l.math_type[2], l.ws[2]);
            if (!ok) {
                if (why) snprintf(why, len, "line %d does not parse as a plan of this version", lineno + 1);
                return -1;
            }
            if (take) {
                backend_ctx c = {.layout = (backend_layout)l.layout, .math = (backend_math)l.math};
                conv_plan *pl = plan_get(&c, &l.p);
                if (l.have[0]) {
                    pl->fwd = (cudnnConvolutionFwdAlgo_t)l.algo[0];
                    pl->fwd_math = (cudnnMathType_t)l.math_type[0];
                    pl->fwd_ws = l.ws[0];
                    pl->have_fwd = 1;
                }
                if (l.have[1]) {
                    pl->bwd_data = (cudnnConvolutionBwdDataAlgo_t)l.algo[1];
                    pl->bwd_data_math = (cudnnMathType_t)l.math_type[1];
                    pl->bwd_data_ws = l.ws[1];
                    pl->have_bwd_data = 1;
                }
                if (l.have[2]) {
                    pl->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)l.algo[2];
                    pl->bwd_filter_math = (cudnnMathType_t)l.math_type[2];
                    pl->bwd_filter_ws = l.ws[2];
                    pl->have_bwd_filter = 1;
                }
                for (int k = 0; k < 3; k++)
                    for (int b = 0; b < 2; b++)
                        if (l.graph_index[k][b] >= 0) graph_pick(pl, k, b, l.graph_index[k][b], l.graph_engine[k][b]);
            }
            n++;
            if (!nl) break;
            t = nl + 1;
        }
        if (take) return n;
    }
    return 0;
}

/* The plan of shape p in ctx's mode and layout if one was made, else NULL
 * (plan_get without making one). */
static const conv_plan *plan_find(const backend_ctx *ctx, const conv_params *p) {
    conv_params key;
    memset(&key, 0, sizeof key);
    key = *p;
    unsigned h = plan_hash(&key, ctx->math, ctx->layout);
    for (const conv_plan *pl = g.plans[h]; pl; pl = pl->next)
        if (pl->math == (int)ctx->math && pl->layout == (int)ctx->layout && memcmp(&pl->key, &key, sizeof key) == 0)
            return pl;
    return NULL;
}

/* cuDNN's names without the CUDNN_CONVOLUTION_*_ALGO_ prefix, by value (its
 * headers give no names; values past the table print as numbers). */
static const char *const fwd_algo_names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT",
                                             "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *const bwd_data_algo_names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
                                                  "WINOGRAD_NONFUSED"};
static const char *const bwd_filter_algo_names[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
                                                    "WINOGRAD_NONFUSED", "FFT_TILING"};
_Static_assert(sizeof fwd_algo_names / sizeof *fwd_algo_names == CUDNN_CONVOLUTION_FWD_ALGO_COUNT, "fwd names");
_Static_assert(sizeof bwd_data_algo_names / sizeof *bwd_data_algo_names == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
               "data names");
_Static_assert(sizeof bwd_filter_algo_names / sizeof *bwd_filter_algo_names ==
                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
               "filter names");
static const char *const math_type_names[] = {"default math", "tensor ops", "tensor ops with conversion",
                                              "FMA"};

/* One pass's choice into buf at *o: "fwd IMPLICIT_GEMM, tensor ops, 1.50 MiB". */
static void describe_pass(char *buf, size_t len, size_t *o, const char *pass, int have, int algo,
                          const char *const *names, int n_names, cudnnMathType_t m, size_t ws) {
    if (*o >= len) return;
    char a[24];
    if (algo >= 0 && algo < n_names) snprintf(a, sizeof a, "%s", names[algo]);
    else snprintf(a, sizeof a, "#%d", algo);
    int w = !have ? snprintf(buf + *o, len - *o, "%s%s not run", *o ? "; " : "", pass)
                  : snprintf(buf + *o, len - *o, "%s%s %s, %s, %.2f MiB", *o ? "; " : "", pass, a,
                             (unsigned)m < 4 ? math_type_names[m] : "math ?", ws / 1048576.0);
    *o = w < 0 ? len : *o + (size_t)w;
}

/* ---- train.conv_api = graph: the graph API's plans (model/cudnn_graph.h) ---- */

static void *ws_grown(size_t bytes) {
    ws_reserve(bytes);
    return g.ws;
}

/* One warning about the graph plan of pl's pass: "train.conv_api = graph:
 * <what> the <pass> of conv <shape> <...>: <why>; <then>". */
static void say_graph(const conv_plan *pl, cg_pass pass, const char *what, const char *why, const char *then) {
    static const char *names[] = {"forward", "data gradient", "weight gradient"};
    const conv_params *p = &pl->key;
    log_warn("train.conv_api = graph: %s the %s of conv %dx%dx%dx%d * %dx%dx%dx%d (stride %d, pad %d, %s): %s; %s",
             what, names[pass], p->N, p->C, p->H, p->W, p->K, p->C, p->R, p->S, p->stride_h, p->pad_h,
             math_name(pl->math), why, then);
}

/* Pass `pass` of pl, output blend beta (0 or 1), on x, w, y in cg_pass's
 * roles, through the graph API when ctx asks for it (backend_ctx.conv_api):
 * at the first call of that pass and blend its plan is taken from the
 * choice plans_import kept, or else (or where that choice no longer holds)
 * made (timed on these buffers, the output slot in scratch); then run; 1 when it ran, 0 where the
 * caller's legacy call is to run instead (not asked for, a pointer not
 * 16-byte aligned, or no plan qualified: said once per pass and plan). */
static int graph_conv(const backend_ctx *ctx, conv_plan *pl, cg_pass pass, int beta, const void *x, const void *w,
                      const void *y) {
    if (ctx->conv_api != BACKEND_CONV_API_GRAPH || !cg_aligned(x, w, y)) return 0;
    const conv_params *p = &pl->key;
    if (!pl->graph_tried[pass][beta]) {
        no_search_while_recording("a graph-API plan search");
        pl->graph_tried[pass][beta] = 1;
        cg_conv cv = {.n = p->N, .c = p->C, .h = p->H, .w = p->W, .k = p->K, .r = p->R, .s = p->S, .p = p->P,
                      .q = p->Q, .pad_h = p->pad_h, .pad_w = p->pad_w, .stride_h = p->stride_h,
                      .stride_w = p->stride_w, .nhwc = pl->layout == BACKEND_LAYOUT_NHWC,
                      .type = conv_data_type(pl->math), .math = pl->math};
        size_t out = pass == CG_FWD ? conv_out_count(p) : pass == CG_BWD_DATA ? conv_in_count(p) : conv_w_count(p);
        size_t esize = cv.type == CUDNN_DATA_FLOAT ? 4 : 2;
        cg_env env = {.handle = g.cudnn, .stream = g.stream, .ws_limit = g.ws_limit, .workspace = ws_grown,
                      .scratch_out = grow(&g.cg_scratch, &g.cg_scratch_n, out * esize, 1)};
        char why[256];
        if (pl->graph_picked[pass][beta]) {
            pl->graph[pass][beta] = cg_plan_take(&env, &cv, pass, (float)beta, pl->graph_index[pass][beta],
                                                 pl->graph_engine[pass][beta], x, w, y, why, sizeof why);
            if (!pl->graph[pass][beta])
                say_graph(pl, pass, "cannot take the kept plan for", why, "searching again");
        }
        if (!pl->graph[pass][beta]) {
            /* a candidate's workspace must not take what training needs: the legacy search's rule */
            size_t lim = ws_search_limit();
            if (lim < env.ws_limit) env.ws_limit = lim;
            pl->graph[pass][beta] = cg_plan_make(&env, &cv, pass, (float)beta, x, w, y, why, sizeof why);
        }
        if (!pl->graph[pass][beta])
            say_graph(pl, pass, "no graph-API plan for", why, "that pass takes the legacy call");
    }
    const cg_plan *gp = pl->graph[pass][beta];
    if (!gp) return 0;
    ws_reserve(cg_plan_workspace(gp));
    cg_execute(g.cudnn, gp, x, w, y, g.ws);
    return 1;
}

/* What conv_* chose for this shape (the plan's cudnnFind results, and the
 * graph API's plans where train.conv_api = graph made them). */
static void cuda_conv_describe(const backend_ctx *ctx, const conv_params *p, char *buf, size_t len) {
    on_device();
    const conv_plan *pl = plan_find(ctx, p);
    if (!pl) {
        snprintf(buf, len, "cuDNN: not run in this mode and layout");
        return;
    }
    size_t o = 0;
    buf[0] = '\0';
    describe_pass(buf, len, &o, "fwd", pl->have_fwd, (int)pl->fwd, fwd_algo_names, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                  pl->fwd_math, pl->fwd_ws);
    describe_pass(buf, len, &o, "data", pl->have_bwd_data, (int)pl->bwd_data, bwd_data_algo_names,
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, pl->bwd_data_math, pl->bwd_data_ws);
    describe_pass(buf, len, &o, "filter", pl->have_bwd_filter, (int)pl->bwd_filter, bwd_filter_algo_names,
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, pl->bwd_filter_math, pl->bwd_filter_ws);
    static const char *passes[] = {"fwd", "data", "filter"};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 2; b++) {
            if (!pl->graph[k][b] || o + 1 >= len) continue;
            char d[160];
            cg_describe(pl->graph[k][b], d, sizeof d);
            int n = snprintf(buf + o, len - o, "%s%s%s: %s", o ? "; " : "", passes[k], b ? " (adding)" : "", d);
            if (n > 0) o += (size_t)n < len - o ? (size_t)n : len - o - 1;
        }
}


/* The filter as cuDNN reads it in ctx's layout: w itself in NCHW; in NHWC a
 * [K, R, S, C] copy in fscratch (the transpose of K images of C x R*S
 * values), which the caller may then narrow. */
static const float *conv_filter(const backend_ctx *ctx, const conv_params *p, const float *w) {
    if (!layout_nhwc(ctx)) return w;
    float *wk = fscratch_get(conv_w_count(p));
    CUDA_CHECK(cuk_transpose_layout(g.stream, p->K, p->C, p->R * p->S, w, wk, 1, 0));
    return wk;
}

/* backend_ctx.weights_epoch (backend.h): the filter of weights w as cuDNN
 * read it in a forward under a nonzero epoch (its [K, R, S, C] transpose in
 * NHWC, narrowed in BF16/FP16), in its own device buffer, for the data
 * passes of the same w under the same epoch. One entry per weight pointer,
 * remade by each forward; an entry of another epoch is stale (epochs are
 * never reused, so nothing needs forgetting). */
typedef struct fcache_entry {
    const float *w;
    size_t n;          /* filter values */
    backend_math math; /* of the form kept */
    backend_layout layout;
    uint64_t epoch;    /* the weights epoch it was made in */
    void *copy;
    size_t cap;        /* bytes of copy */
} fcache_entry;

/* Whether convolutions in ctx read another form of the filter than w. */
static int filter_reshaped(const backend_ctx *ctx) { return layout_nhwc(ctx) || math_reduced(ctx->math); }

/* conv_filter_kept (backend.h): what fcache_make keeps for a filter of p. */
static size_t cuda_conv_filter_kept(const backend_ctx *ctx, const conv_params *p) {
    on_device();
    if (!filter_reshaped(ctx)) return 0;
    return conv_w_count(p) * (math_reduced(ctx->math) ? 2 : 4);
}

/* The filter cuDNN reads for p and w, kept: under a nonzero epoch and where
 * the form differs from w, made into w's entry (created or regrown) and
 * returned; NULL otherwise (the caller makes it as usual). */
static const void *fcache_make(const backend_ctx *ctx, const conv_params *p, const float *w) {
    if (!ctx->weights_epoch || !filter_reshaped(ctx)) return NULL;
    fcache_entry *e = NULL;
    for (int i = 0; i < g.fc_n && !e; i++)
        if (g.fc[i].w == w) e = &g.fc[i];
    if (!e) {
        if (g.fc_n == g.fc_cap) {
            g.fc_cap = g.fc_cap ? 2 * g.fc_cap : 64;
            g.fc = cnt_realloc(g.fc, (size_t)g.fc_cap * sizeof *g.fc);
        }
        e = &g.fc[g.fc_n++];
        memset(e, 0, sizeof *e);
        e->w = w;
    }
    size_t n = conv_w_count(p), bytes = cuda_conv_filter_kept(ctx, p);
    if (bytes > e->cap) {
        cuda_free(e->copy); /* waits for queued ops that may still use it */
        e->copy = cuda_alloc(bytes);
        e->cap = bytes;
    }
    if (math_reduced(ctx->math)) CUDA_CHECK(cuk_narrow(g.stream, ctx->math, n, conv_filter(ctx, p, w), e->copy));
    else CUDA_CHECK(cuk_transpose_layout(g.stream, p->K, p->C, p->R * p->S, w, (float *)e->copy, 1, 0));
    e->n = n;
    e->math = ctx->math;
    e->layout = ctx->layout;
    e->epoch = ctx->weights_epoch;
    return e->copy;
}

/* The kept filter of w for p in ctx (its epoch, math mode and layout), or NULL. */
static const void *fcache_find(const backend_ctx *ctx, const conv_params *p, const float *w) {
    if (!ctx->weights_epoch) return NULL;
    for (int i = 0; i < g.fc_n; i++) {
        const fcache_entry *e = &g.fc[i];
        if (e->w != w) continue;
        int same = e->n == conv_w_count(p) && e->math == ctx->math && e->layout == ctx->layout;
        same = same && e->epoch == ctx->weights_epoch;
        return same ? e->copy : NULL;
    }
    return NULL;
}

/* In BF16/FP16 each op below hands cuDNN 16-bit copies of its operands and a
 * 16-bit output (beta 0), then widens that into the float output, adding
 * the old contents when accumulating; in FP32/TF32 cuDNN works on the float
 * tensors themselves. In NHWC the filter goes through conv_filter first (the
 * 16-bit copy is made from the KRSC float copy: a permutation, so the same
 * rounded values). */
static void pair_clear(void) {
    g.pair_dy = NULL;
    g.pair_ready = 0;
}

/* With 16-bit activations (act16) the 16-bit tensors are cuDNN's operands and
 * output themselves: only the filter is narrowed, and an accumulating data
 * pass lets cuDNN add (beta 1), rounding once. */
static void cuda_conv_fwd(const backend_ctx *ctx, const conv_params *p, const void *x, const float *w, void *y) {
    on_device();
    pair_clear();
    if (p->N == 0) return;
    const int math = ctx->math, a16 = act16(ctx);
    conv_plan *pl = plan_get(ctx, p);
    const void *kept = fcache_make(ctx, p, w);
    const float *wl = kept ? NULL : conv_filter(ctx, p, w);
    const void *xs = x, *wv = kept ? kept : wl;
    void *ys = y;
    if (math_reduced(math)) {
        if (!a16) xs = h16_from(math, H16_OP0, conv_in_count(p), x);
        if (!kept) wv = h16_from(math, H16_OP1, conv_w_count(p), wl);
        if (!a16) ys = h16_get(H16_OUT, conv_out_count(p));
    }
    if (!graph_conv(ctx, pl, CG_FWD, 0, xs, wv, ys)) {
        if (!pl->have_fwd) plan_fwd(pl, xs, wv, ys);
        ws_reserve(pl->fwd_ws);
        conv_set_math(pl, pl->fwd_math);
        CUDNN_CHECK(cudnnConvolutionForward(g.cudnn, &k_one, pl->x, xs, pl->w, wv, pl->conv, pl->fwd, g.ws,
                                            pl->fwd_ws, &k_zero, pl->y, ys));
    }
    if (math_reduced(math) && !a16) CUDA_CHECK(cuk_widen(g.stream, math, conv_out_count(p), ys, y, 0));
}

/* `paired` (backend.h): the filter pass on this dy left its 16-bit copy in
 * H16_OP1 (pair_*); the data pass takes it from there, and the filter into
 * H16_OP0, instead of rounding dy again. Any other use of the 16-bit slots
 * in between (a forward convolution, a GEMM) has cleared the pair. */
static void cuda_conv_bwd_data(const backend_ctx *ctx, const conv_params *p, const void *dy, const float *w,
                               void *dx, int accumulate, int paired) {
    on_device();
    const int math = ctx->math, a16 = act16(ctx);
    paired = paired && g.pair_ready && g.pair_dy == dy && g.pair_n == conv_out_count(p) && g.pair_math == math;
    pair_clear();
    if (p->N == 0) return;
    conv_plan *pl = plan_get(ctx, p);
    const void *kept = fcache_find(ctx, p, w); /* the forward's filter, under the same epoch */
    const float *wl = kept ? NULL : conv_filter(ctx, p, w);
    const void *dys = dy, *wv = kept ? kept : wl;
    void *dxs = dx;
    int beta_one = accumulate; /* cuDNN adds to its output */
    if (math_reduced(math) && a16) {
        if (!kept) wv = h16_from(math, H16_OP1, conv_w_count(p), wl);
    } else if (math_reduced(math)) {
        if (paired) {
            dys = g.h16[H16_OP1]; /* the filter pass's copy of this dy */
            if (!kept) wv = h16_from(math, H16_OP0, conv_w_count(p), wl);
        } else {
            dys = h16_from(math, H16_OP0, conv_out_count(p), dy);
            if (!kept) wv = h16_from(math, H16_OP1, conv_w_count(p), wl);
        }
        dxs = h16_get(H16_OUT, conv_in_count(p));
        beta_one = 0; /* the widening adds instead */
    }
    if (!graph_conv(ctx, pl, CG_BWD_DATA, beta_one, dxs, wv, dys)) {
        if (!pl->have_bwd_data) plan_bwd_data(pl, dys, wv, dxs, beta_one);
        ws_reserve(pl->bwd_data_ws);
        conv_set_math(pl, pl->bwd_data_math);
        CUDNN_CHECK(cudnnConvolutionBackwardData(g.cudnn, &k_one, pl->w, wv, pl->y, dys, pl->conv, pl->bwd_data,
                                                 g.ws, pl->bwd_data_ws, beta_one ? &k_one : &k_zero, pl->x, dxs));
    }
    if (math_reduced(math) && !a16) CUDA_CHECK(cuk_widen(g.stream, math, conv_in_count(p), dxs, dx, accumulate));
}

/* In NHWC cuDNN writes the gradient as [K, R, S, C]: into fscratch (FP32,
 * TF32), or as 16-bit values widened (exactly) into fscratch (BF16, FP16);
 * then transposed into the caller's [K, C, R, S] dw. The values are the ones
 * the NCHW path gives, up to cuDNN's summation order: one rounding to the
 * type in the reduced modes. In BF16/FP16 H16_OP1 keeps dy's 16-bit copy for
 * a paired data pass. */
static void cuda_conv_bwd_filter(const backend_ctx *ctx, const conv_params *p, const void *x, const void *dy,
                                 float *dw) {
    on_device();
    pair_clear();
    if (p->N == 0) {
        cuda_zero(dw, conv_w_count(p) * sizeof(float));
        return;
    }
    const int math = ctx->math, a16 = act16(ctx);
    conv_plan *pl = plan_get(ctx, p);
    const int nhwc = layout_nhwc(ctx);
    float *dwl = nhwc ? fscratch_get(conv_w_count(p)) : dw; /* the float gradient in cuDNN's filter layout */
    const void *xs = x, *dys = dy;
    void *dws = dwl;
    if (math_reduced(math)) {
        if (!a16) xs = h16_from(math, H16_OP0, conv_in_count(p), x);
        if (!a16) dys = h16_from(math, H16_OP1, conv_out_count(p), dy);
        dws = h16_get(H16_OUT, conv_w_count(p));
    }
    if (!graph_conv(ctx, pl, CG_BWD_FILTER, 0, xs, dws, dys)) {
        if (!pl->have_bwd_filter) plan_bwd_filter(pl, xs, dys, dws);
        ws_reserve(pl->bwd_filter_ws);
        conv_set_math(pl, pl->bwd_filter_math);
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(g.cudnn, &k_one, pl->x, xs, pl->y, dys, pl->conv, pl->bwd_filter,
                                                   g.ws, pl->bwd_filter_ws, &k_zero, pl->w, dws));
    }
    if (math_reduced(math)) CUDA_CHECK(cuk_widen(g.stream, math, conv_w_count(p), dws, dwl, 0));
    if (nhwc) CUDA_CHECK(cuk_transpose_layout(g.stream, p->K, p->C, p->R * p->S, dwl, dw, 0, 0));
    if (math_reduced(math) && !a16) { /* H16_OP1 keeps this dy's 16-bit copy for a paired data pass */
        g.pair_dy = dy;
        g.pair_n = conv_out_count(p);
        g.pair_math = math;
        g.pair_ready = 1;
    }
}

/* -------------------------------------------------------------------- bias */

/* With HW == 1 (a linear layer) both layouts are the same bytes: the NCHW
 * kernels, so the two layouts give the same bits. */
static int nhwc_spatial(const backend_ctx *ctx, int HW) { return layout_nhwc(ctx) && HW > 1; }

static void cuda_bias_fwd(const backend_ctx *ctx, int N, int C, int HW, const float *b, void *y) {
    on_device();
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 1);
    CUDA_CHECK(cuk_bias_fwd(g.stream, ctx->act, N, C, HW, b, y, nhwc_spatial(ctx, HW)));
}

static void cuda_bias_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *dy, float *db) {
    on_device();
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 1);
    double *partial = scratch_get(cuk_bias_bwd_scratch(N, C, HW));
    CUDA_CHECK(cuk_bias_bwd(g.stream, ctx->act, N, C, HW, dy, db, partial, nhwc_spatial(ctx, HW)));
}

/* -------------------------------------------------------------- batch norm */

/* [N, C, HW] as cuDNN's NCHW with W = 1, or in NHWC [N, HW, C] as its NHWC
 * with W = 1 (strides: c 1, h C, n HW*C); statistics per channel
 * (SPATIAL: over N x H x W for each c, whatever the strides). HW == 1 takes
 * the NCHW descriptor in both layouts (the same bytes; the same kernels). */
static void bn_desc(const backend_ctx *ctx, int N, int C, int HW) {
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(g.bn_x, nhwc_spatial(ctx, HW) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                           act16(ctx) ? conv_data_type(ctx->math) : CUDNN_DATA_FLOAT, N, C, HW, 1));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(g.bn_param, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, C, 1, 1));
}

/* NHWC training batch norm takes cuDNN's Ex calls in SPATIAL_PERSISTENT
 * mode, as PyTorch does for channels-last: the plain SPATIAL kernels read
 * NHWC with strided loads: a ResNet-50 step trained 6.4-6.6 times slower (measured:
 * docs/benchmarks.md). Their kernels load vectors: on an H200 a ResNet-20
 * whose parameters sat at 8-byte offsets in the flat parameter buffer (after
 * a 650-value linear layer) stopped with "misaligned address". So:
 * - the activations (x, y, dy, dx) must be 32-byte aligned (the net's are:
 *   64 bytes) and C a multiple of 8;
 * - a per-channel vector (gamma, beta, the running and saved statistics, the
 *   parameter gradients) that is not 32-byte aligned goes through an aligned
 *   stand-in (bn_vec): copied in where the call reads it, copied back where
 *   it writes it, on the same stream (C floats each);
 * - the plain operation (OPS_BN) needs no reserve space (the buffer the Ex
 *   forward hands its backward; cuDNN asks for none without a fused
 *   activation, and the fused ones below keep theirs in the layer's fwd_keep);
 * - the data gradient is not added to (beta = 0, PyTorch's only use).
 * Elsewhere the plain calls, and a warning, once, naming the reason. The
 * workspace is cuDNN's convolution workspace, grown to fit (ops on one stream
 * run one at a time); the plain calls measured 6.4x slower on ResNet-50
 * in NHWC (docs/benchmarks.md). bn_desc() first. */
static int aligned32(const void *p) { return ((uintptr_t)p & 31) == 0; }

/* Batch norm on 16-bit activations runs as fp32 on widened copies (a32_*)
 * where there is no cuDNN call for it: one value per channel (N*HW == 1, our
 * own kernels, fp32 only), or after this cuDNN refused a 16-bit call. */
static int bn_widened(const backend_ctx *ctx, int N, int HW) {
    return act16(ctx) && ((size_t)N * HW == 1 || g.bn16_refused[ctx->act]);
}

/* Status st of the batch-norm call `what` (file:line): 0 on success; 1 when
 * the call may be refused (may_refuse) and this cuDNN does not support it:
 * *flag is set, and the first refusal says what was refused and what runs
 * instead from then on (the caller then does the call's work that way); any
 * other failure ends the process as CUDNN_CHECK does. */
static int bn_refused(cudnnStatus_t st, int may_refuse, int *flag, const char *refused, const char *instead,
                      const char *what, const char *file, int line) {
    if (st == CUDNN_STATUS_SUCCESS) return 0;
    /* cuDNN 9 refines statuses within categories (NOT_SUPPORTED_SHAPE = 3002, ...) */
    const int cat = CUDNN_STATUS_CATEGORY((int)st);
    if (may_refuse && (cat == CUDNN_STATUS_NOT_SUPPORTED || cat == CUDNN_STATUS_BAD_PARAM)) {
        if (!*flag)
            log_warn("cuDNN %zu refused %s (%s: %s): %s from now on (said once)", cudnnGetVersion(), refused, what,
                     cudnnGetErrorString(st), instead);
        *flag = 1;
        return 1;
    }
    cnt_fatal_at(file, line, 1, NULL, "%s: cuDNN error %d: %s", what, (int)st, cudnnGetErrorString(st));
    return 1;
}
/* On 16-bit activations (the calls cuDNN may not take in 16 bits): batch
 * norm then takes the widened copies, bn_widened. */
#define BN16_REFUSED(ctx, call)                                                                                 \
    bn_refused((call), act16(ctx), &g.bn16_refused[(ctx)->act],                                                \
               (ctx)->act == BACKEND_DTYPE_BF16 ? "batch norm on bf16 activations"                              \
                                                : "batch norm on fp16 activations",                             \
               "batch norm widens them to fp32 and back, which costs a conversion each way", #call, __FILE__, \
               __LINE__)

/* The SPATIAL_PERSISTENT Ex calls, in any activation type: a refusal (a
 * shape or type its persistent kernels do not take) sends batch norm to the
 * plain SPATIAL calls from then on. */
#define BN_EX_REFUSED(call)                                                                                     \
    bn_refused((call), 1, &g.bn_ex_refused, "batch norm's NHWC kernels (SPATIAL_PERSISTENT, the Ex calls)",     \
               "batch norm takes the plain SPATIAL calls", #call, __FILE__, __LINE__)

/* The most per-channel vectors one Ex call takes (the forward's six), each
 * stand-in 256-byte aligned in g.bn_stage. */
#define BN_VECS 6
static size_t bn_vec_stride(int C) { return ((size_t)C + 63) & ~(size_t)63; }

static void bn_plain_said(int C, const char *why) {
    static int said;
    if (!said++)
        log_warn("NHWC batch norm (C = %d) takes cuDNN's plain SPATIAL kernels, which read NHWC with strided "
                 "loads (a ResNet-50 step trains several times slower): %s (said once)", C, why);
}

/* Whether the pass (the forward, or with backward the backward) on the
 * activations acts[0, n) takes the Ex calls, by the rules above; if so, *ws
 * is the workspace it needs, reserved, and bn_vec's stand-ins for C channels
 * are allocated. */
static int bn_ex(const backend_ctx *ctx, int C, int HW, const void *const *acts, int n, int backward, size_t *ws) {
    if (!nhwc_spatial(ctx, HW) || g.bn_ex_refused) return 0;
    if (C % 8 != 0) {
        bn_plain_said(C, "C is not a multiple of 8");
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (!aligned32(acts[i])) {
            bn_plain_said(C, "an activation is not 32-byte aligned");
            return 0;
        }
    const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
    size_t reserve = 0;
    if (BN_EX_REFUSED(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(g.cudnn, mode, ops, NULL, g.bn_x,
                                                                           &reserve)))
        return 0;
    if (reserve) {
        bn_plain_said(C, "cuDNN asks for reserve space in SPATIAL_PERSISTENT mode");
        return 0;
    }
    /* yDesc given even without an activation, as PyTorch's query does */
    if (backward ? BN_EX_REFUSED(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                                     g.cudnn, mode, ops, g.bn_x, g.bn_x, g.bn_x, NULL, g.bn_x, g.bn_param, NULL, ws))
                 : BN_EX_REFUSED(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                                     g.cudnn, mode, ops, g.bn_x, NULL, g.bn_x, g.bn_param, NULL, ws)))
        return 0;
    /* never a NULL workspace: cuDNN then runs the non-extended function
     * (without the fused add and ReLU) */
    ws_reserve(*ws ? *ws : 1);
    /* before any stand-in is handed out: growing frees the old buffer */
    grow((void **)&g.bn_stage, &g.bn_stage_n, BN_VECS * bn_vec_stride(C), sizeof(float));
    return 1;
}

/* Per-channel vector `slot` (below BN_VECS) of an Ex call: v itself where it
 * is 32-byte aligned (or NULL), else its stand-in in g.bn_stage, filled from
 * v when `read`. bn_vec_back() after the call copies a stand-in the call wrote
 * back to v. */
static float *bn_vec(int slot, int C, const float *v, int read) {
    if (!v || aligned32(v)) return (float *)v;
    float *s = g.bn_stage + (size_t)slot * bn_vec_stride(C);
    if (read) CUDA_CHECK(cudaMemcpyAsync(s, v, (size_t)C * sizeof(float), cudaMemcpyDeviceToDevice, g.stream));
    return s;
}

static void bn_vec_back(int C, float *v, const float *s) {
    if (s != v) CUDA_CHECK(cudaMemcpyAsync(v, s, (size_t)C * sizeof(float), cudaMemcpyDeviceToDevice, g.stream));
}

/* cudnnBatchNormalizationForwardTrainingEx in SPATIAL_PERSISTENT mode with
 * ops (with z, the ReLU and the reserve space where ops fuse them), the
 * per-channel vectors through bn_vec's stand-ins, those it writes copied
 * back once it succeeded; its status, which the caller judges (a refusal
 * changed nothing). bn_desc(), then bn_ex() or bn_fused(), first. */
static cudnnStatus_t bn_fwd_ex(cudnnBatchNormOps_t ops, int C, const void *x, const void *z, void *y,
                               const float *gamma, const float *beta, float *running_mean, float *running_var,
                               float momentum, float eps, float *save_mean, float *save_invstd, size_t ws,
                               void *reserve_p, size_t reserve) {
    const float *gm = bn_vec(0, C, gamma, 1), *bt = bn_vec(1, C, beta, 1);
    float *rm = bn_vec(2, C, running_mean, 1), *rv = bn_vec(3, C, running_var, 1);
    float *sm = bn_vec(4, C, save_mean, 0), *si = bn_vec(5, C, save_invstd, 0);
    const int fused = ops != CUDNN_BATCHNORM_OPS_BN;
    cudnnStatus_t st = cudnnBatchNormalizationForwardTrainingEx(
        g.cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &k_one, &k_zero, g.bn_x, x, z ? g.bn_x : NULL, z, g.bn_x,
        y, g.bn_param, gm, bt, (double)momentum, rm, rv, (double)eps, sm, si, fused ? g.relu : NULL,
        g.ws, ws, reserve ? reserve_p : NULL, reserve);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    bn_vec_back(C, running_mean, rm);
    bn_vec_back(C, running_var, rv);
    bn_vec_back(C, save_mean, sm);
    bn_vec_back(C, save_invstd, si);
    return st;
}

static void cuda_bn_fwd_train(const backend_ctx *ctx, int N, int C, int HW, const void *x, const float *gamma,
                              const float *beta, void *y, float *running_mean, float *running_var, float momentum,
                              float eps, float *save_mean, float *save_invstd) {
    on_device();
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1);
    CNT_ASSERT(eps >= CUDNN_BN_MIN_EPSILON);
    if (bn_widened(ctx, N, HW)) {
        backend_ctx c = ctx_f32(ctx);
        size_t n = (size_t)N * C * HW;
        float *yt = a32_out(ctx, A32_OUT, n, y, 0);
        cuda_bn_fwd_train(&c, N, C, HW, a32_in(ctx, A32_X, n, x), gamma, beta, yt, running_mean, running_var,
                          momentum, eps, save_mean, save_invstd);
        a32_back(ctx, yt, y, n);
        return;
    }
    if ((size_t)N * HW == 1) {
        CUDA_CHECK(cuk_bn_single_fwd(g.stream, C, x, gamma, beta, y, running_mean, running_var, momentum, eps, save_mean,
                                     save_invstd));
        return;
    }
    bn_desc(ctx, N, C, HW);
    /* cuDNN's rule is PyTorch's: running = (1-factor)*running + factor*batch,
     * the variance unbiased; save_invstd = 1/sqrt(var + eps), var biased. */
    size_t ws = 0;
    const void *acts[] = {x, y};
    if (bn_ex(ctx, C, HW, acts, 2, 0, &ws) &&
        !BN_EX_REFUSED(bn_fwd_ex(CUDNN_BATCHNORM_OPS_BN, C, x, NULL, y, gamma, beta, running_mean, running_var,
                                 momentum, eps, save_mean, save_invstd, ws, NULL, 0)))
        return;
    if (bn_widened(ctx, N, HW) ||
        BN16_REFUSED(ctx, cudnnBatchNormalizationForwardTraining(
                              g.cudnn, CUDNN_BATCHNORM_SPATIAL, &k_one, &k_zero, g.bn_x, x, g.bn_x, y, g.bn_param,
                              gamma, beta, (double)momentum, running_mean, running_var, (double)eps, save_mean,
                              save_invstd)))
        cuda_bn_fwd_train(ctx, N, C, HW, x, gamma, beta, y, running_mean, running_var, momentum, eps, save_mean,
                          save_invstd); /* refused in 16 bits: widened now */
}

static void cuda_bn_fwd_infer(const backend_ctx *ctx, int N, int C, int HW, const void *x, const float *gamma,
                              const float *beta, void *y, const float *running_mean, const float *running_var,
                              float eps) {
    on_device();
    CNT_ASSERT(N >= 0 && C >= 1 && HW >= 1);
    CNT_ASSERT(eps >= CUDNN_BN_MIN_EPSILON);
    if (N == 0) return;
    if (act16(ctx) && g.bn16_refused[ctx->act]) { /* cuDNN's inference call has no N*HW == 1 limit */
        backend_ctx c = ctx_f32(ctx);
        size_t n = (size_t)N * C * HW;
        float *yt = a32_out(ctx, A32_OUT, n, y, 0);
        cuda_bn_fwd_infer(&c, N, C, HW, a32_in(ctx, A32_X, n, x), gamma, beta, yt, running_mean, running_var, eps);
        a32_back(ctx, yt, y, n);
        return;
    }
    bn_desc(ctx, N, C, HW);
    if (BN16_REFUSED(ctx, cudnnBatchNormalizationForwardInference(g.cudnn, CUDNN_BATCHNORM_SPATIAL, &k_one, &k_zero,
                                                                  g.bn_x, x, g.bn_x, y, g.bn_param, gamma, beta,
                                                                  running_mean, running_var, (double)eps)))
        cuda_bn_fwd_infer(ctx, N, C, HW, x, gamma, beta, y, running_mean, running_var, eps); /* widened now */
}

static void cuda_bn_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *dy,
                        const float *gamma, const float *save_mean, const float *save_invstd, float eps, void *dx,
                        float *dgamma, float *dbeta, int accumulate_dx) {
    on_device();
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1);
    CNT_ASSERT(eps >= CUDNN_BN_MIN_EPSILON);
    if (bn_widened(ctx, N, HW)) {
        backend_ctx c = ctx_f32(ctx);
        size_t n = (size_t)N * C * HW;
        float *dxt = a32_out(ctx, A32_OUT, n, dx, accumulate_dx);
        cuda_bn_bwd(&c, N, C, HW, a32_in(ctx, A32_X, n, x), a32_in(ctx, A32_DY, n, dy), gamma, save_mean, save_invstd,
                    eps, dxt, dgamma, dbeta, accumulate_dx);
        a32_back(ctx, dxt, dx, n);
        return;
    }
    if ((size_t)N * HW == 1) {
        CUDA_CHECK(cuk_bn_single_bwd(g.stream, C, dy, dx, dgamma, dbeta, accumulate_dx));
        return;
    }
    bn_desc(ctx, N, C, HW);
    /* With the saved statistics given, the forward's epsilon is already in
     * save_invstd; cuDNN's documentation asks for the same value anyway. */
    size_t ws = 0;
    const void *acts[] = {x, dy, dx};
    if (accumulate_dx && nhwc_spatial(ctx, HW)) bn_plain_said(C, "the data gradient is added to");
    if (!accumulate_dx && bn_ex(ctx, C, HW, acts, 3, 1, &ws)) {
        const float *gm = bn_vec(0, C, gamma, 1), *sm = bn_vec(1, C, save_mean, 1), *si = bn_vec(2, C, save_invstd, 1);
        float *dg = bn_vec(3, C, dgamma, 0), *db = bn_vec(4, C, dbeta, 0);
        if (!BN_EX_REFUSED(cudnnBatchNormalizationBackwardEx(
                g.cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, &k_one, &k_zero, &k_one, &k_zero,
                g.bn_x, x, NULL, NULL, g.bn_x, dy, NULL, NULL, g.bn_x, dx, g.bn_param, gm, NULL, dg, db, (double)eps,
                sm, si, NULL, g.ws, ws, NULL, 0))) {
            bn_vec_back(C, dgamma, dg);
            bn_vec_back(C, dbeta, db);
            return;
        }
    }
    /* the old dx blended in fp32 and the sum rounded once (beta = 1), as the contract asks */
    if (bn_widened(ctx, N, HW) ||
        BN16_REFUSED(ctx, cudnnBatchNormalizationBackward(g.cudnn, CUDNN_BATCHNORM_SPATIAL, &k_one,
                                                          accumulate_dx ? &k_one : &k_zero, &k_one, &k_zero, g.bn_x,
                                                          x, g.bn_x, dy, g.bn_x, dx, g.bn_param, gamma, dgamma,
                                                          dbeta, (double)eps, save_mean, save_invstd)))
        cuda_bn_bwd(ctx, N, C, HW, x, dy, gamma, save_mean, save_invstd, eps, dx, dgamma, dbeta,
                    accumulate_dx); /* widened now */
}

/* Batch norm with the add and ReLU after it in one cuDNN call each way
 * (bn_act_fwd_train, bn_act_bwd): CUDNN_BATCHNORM_OPS_BN_ACTIVATION, or with
 * z BN_ADD_ACTIVATION, in the SPATIAL_PERSISTENT mode of bn_ex and under its
 * rules (NHWC, C a multiple of 8, 32-byte aligned activations). One pass over
 * memory instead of two or three, each value computed in fp32 and rounded
 * once (the contract's fused numbers). The forward writes a reserve space
 * (the ReLU's mask) that the fused backward reads: into the group's fwd_keep
 * where the layer gave one large enough (cuda_bn_act_keep_bytes), which marks
 * it written; else into scratch, and the backward is composed (relu_bwd,
 * the add's gradient, bn_bwd: backend_bn_act_bwd_composed), recomputing the
 * mask from y. A cuDNN that refuses the fused operations is said once and
 * composed from then on. */
#define BN_FUSED_REFUSED(ctx, call)                                                                             \
    bn_refused((call), 1, &g.bn_fused_refused[(ctx)->act],                                                      \
               (ctx)->act == BACKEND_DTYPE_BF16   ? "batch norm fused with ReLU on bf16 activations"            \
               : (ctx)->act == BACKEND_DTYPE_FP16 ? "batch norm fused with ReLU on fp16 activations"            \
                                                  : "batch norm fused with ReLU on fp32 activations",           \
               "batch norm, the residual add and ReLU run one after another in that type", #call, __FILE__,     \
               __LINE__)

static cudnnBatchNormOps_t bn_fused_ops(int add) {
    return add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}

/* Whether the fused operations can run on [N, C, HW] in ctx, pointers aside
 * (bn_fused checks those). */
static int bn_fusable(const backend_ctx *ctx, int N, int C, int HW) {
    return !g.bn_fused_refused[ctx->act] && !bn_widened(ctx, N, HW) && (size_t)N * HW > 1 && nhwc_spatial(ctx, HW) &&
           C % 8 == 0;
}

/* Whether the fused pass (the forward, or with backward the backward) `ops`
 * runs on the activations acts[0, n): if so *ws (reserved) is the workspace
 * and *reserve the reserve space's bytes it needs, and bn_vec's stand-ins for
 * C channels are allocated. bn_desc() first. */
static int bn_fused(const backend_ctx *ctx, int N, int C, int HW, const void *const *acts, int n,
                    cudnnBatchNormOps_t ops, int backward, size_t *ws, size_t *reserve) {
    if (!bn_fusable(ctx, N, C, HW)) return 0;
    for (int i = 0; i < n; i++)
        if (!aligned32(acts[i])) return 0;
    const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    const cudnnTensorDescriptor_t zd = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? g.bn_x : NULL;
    if (BN_FUSED_REFUSED(ctx, cudnnGetBatchNormalizationTrainingExReserveSpaceSize(g.cudnn, mode, ops, g.relu, g.bn_x,
                                                                                   reserve)))
        return 0;
    if (backward ? BN_FUSED_REFUSED(ctx, cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                       g.cudnn, mode, ops, g.bn_x, g.bn_x, g.bn_x, zd, g.bn_x, g.bn_param, g.relu, ws))
                 : BN_FUSED_REFUSED(ctx, cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                       g.cudnn, mode, ops, g.bn_x, zd, g.bn_x, g.bn_param, g.relu, ws)))
        return 0;
    ws_reserve(*ws ? *ws : 1); /* never NULL: see bn_ex */
    grow((void **)&g.bn_stage, &g.bn_stage_n, BN_VECS * bn_vec_stride(C), sizeof(float));
    return 1;
}

static size_t cuda_bn_act_keep_bytes(const backend_ctx *ctx, int N, int C, int HW, int add, int relu) {
    on_device();
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1);
    if (!relu || !bn_fusable(ctx, N, C, HW)) return 0; /* cuDNN fuses the add only with an activation */
    bn_desc(ctx, N, C, HW);
    size_t reserve = 0;
    if (BN_FUSED_REFUSED(ctx, cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
            g.cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, bn_fused_ops(add), g.relu, g.bn_x, &reserve)))
        return 0;
    return reserve;
}

static const backend cuda_backend;
static void cuda_relu_fwd(const backend_ctx *ctx, size_t n, const void *x, void *y);
static void cuda_add(const backend_ctx *ctx, size_t n, const void *a, const void *b, void *y);

static void cuda_bn_act_fwd_train(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *z,
                                  int relu, const float *gamma, const float *beta, void *y, float *running_mean,
                                  float *running_var, float momentum, float eps, float *save_mean,
                                  float *save_invstd, fwd_keep *keep) {
    on_device();
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1);
    CNT_ASSERT(eps >= CUDNN_BN_MIN_EPSILON);
    if (relu) {
        const cudnnBatchNormOps_t ops = bn_fused_ops(z != NULL);
        const void *acts[] = {x, y, z};
        size_t ws = 0, reserve = 0;
        bn_desc(ctx, N, C, HW);
        if (bn_fused(ctx, N, C, HW, acts, z ? 3 : 2, ops, 0, &ws, &reserve)) {
            /* kept: the fused backward may follow (with no reserve asked for, it needs none) */
            const int kept = keep && (reserve == 0 || (keep->p && reserve <= keep->bytes));
            if (reserve && !kept) grow(&g.bn_reserve, &g.bn_reserve_n, reserve, 1);
            if (!BN_FUSED_REFUSED(ctx, bn_fwd_ex(ops, C, x, z, y, gamma, beta, running_mean, running_var, momentum,
                                                 eps, save_mean, save_invstd, ws, kept ? keep->p : g.bn_reserve,
                                                 reserve))) {
                if (kept) keep->written = 1;
                return;
            }
        }
    }
    /* the composition, as backend_bn_act_fwd_train runs it */
    cuda_bn_fwd_train(ctx, N, C, HW, x, gamma, beta, y, running_mean, running_var, momentum, eps, save_mean,
                      save_invstd);
    size_t n = (size_t)N * C * HW;
    if (z) cuda_add(ctx, n, y, z, y);
    if (relu) cuda_relu_fwd(ctx, n, y, y);
}

/* dz = g (not added to) and dx = bn_bwd(g) in one cuDNN call, reading the
 * mask the forward kept; dz may be dy itself (the add's gradient in place):
 * each value of dz is then written with the g computed from the same value
 * of dy, and g's mask applied to g again is g, so whichever of the two a read
 * sees, the call computes the same sums. */
static void cuda_bn_act_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *y, void *dy,
                            int relu, const float *gamma, const float *beta, const float *save_mean,
                            const float *save_invstd, float eps, void *dx, float *dgamma, float *dbeta,
                            int accumulate_dx, void *dz, int accumulate_dz, const fwd_keep *keep) {
    on_device();
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1);
    CNT_ASSERT(eps >= CUDNN_BN_MIN_EPSILON);
    if (relu && keep && keep->written && !accumulate_dx && !(dz && accumulate_dz)) {
        const cudnnBatchNormOps_t ops = bn_fused_ops(dz != NULL);
        const void *acts[] = {x, y, dy, dx, dz};
        size_t ws = 0, reserve = 0;
        bn_desc(ctx, N, C, HW);
        if (bn_fused(ctx, N, C, HW, acts, dz ? 5 : 4, ops, 1, &ws, &reserve) && reserve <= keep->bytes) {
            const float *gm = bn_vec(0, C, gamma, 1), *bt = bn_vec(1, C, beta, 1);
            const float *sm = bn_vec(2, C, save_mean, 1), *si = bn_vec(3, C, save_invstd, 1);
            float *dg = bn_vec(4, C, dgamma, 0), *db = bn_vec(5, C, dbeta, 0);
            if (!BN_FUSED_REFUSED(ctx, cudnnBatchNormalizationBackwardEx(
                    g.cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &k_one, &k_zero, &k_one, &k_zero, g.bn_x, x,
                    g.bn_x, y, g.bn_x, dy, dz ? g.bn_x : NULL, dz, g.bn_x, dx, g.bn_param, gm, bt, dg, db,
                    (double)eps, sm, si, g.relu, g.ws, ws, reserve ? keep->p : NULL, reserve))) {
                bn_vec_back(C, dgamma, dg);
                bn_vec_back(C, dbeta, db);
                return;
            }
        }
    }
    backend_bn_act_bwd_composed(&cuda_backend, ctx, N, C, HW, x, y, dy, relu, gamma, save_mean, save_invstd, eps, dx,
                                dgamma, dbeta, accumulate_dx, dz, accumulate_dz);
}

/* ----------------------------------------------------------------- pooling */

static void pool_check(const pool_params *p) {
    CNT_ASSERT(p->N >= 0 && p->C >= 1 && p->H >= 1 && p->W >= 1 && p->P >= 1 && p->Q >= 1);
    if (p->mode != POOL_MODE_ADAPTIVE_AVG)
        CNT_ASSERT(p->R >= 1 && p->S >= 1 && p->stride_h >= 1 && p->stride_w >= 1 && p->pad_h >= 0 &&
                   p->pad_w >= 0);
}


/* keep: max pooling's training forward writes each maximum's position
 * (cuk_pool_fwd's arg) where the fwd_keep holds them, so that its backward
 * does not search the windows again. */
static void cuda_pool_fwd(const backend_ctx *ctx, const pool_params *p, const void *x, void *y, fwd_keep *keep) {
    on_device();
    pool_check(p);
    size_t need = cuk_pool_arg_bytes(p);
    void *arg = keep && keep->p && need && need <= keep->bytes ? keep->p : NULL;
    CUDA_CHECK(cuk_pool_fwd(g.stream, ctx->act, p, x, y, layout_nhwc(ctx), arg));
    if (arg) keep->written = 1;
}

static void cuda_pool_bwd(const backend_ctx *ctx, const pool_params *p, const void *x, const void *y,
                          const void *dy, void *dx, int accumulate, const fwd_keep *keep) {
    on_device();
    (void)y; /* as on the CPU: the maximum's position is found from x, or kept by the forward */
    pool_check(p);
    size_t need = cuk_pool_arg_bytes(p);
    const void *kept = keep && keep->written && need <= keep->bytes ? keep->p : NULL;
    void *scratch = need && !kept ? scratch_get((need + sizeof(double) - 1) / sizeof(double)) : NULL;
    CUDA_CHECK(cuk_pool_bwd(g.stream, ctx->act, p, x, dy, dx, accumulate, layout_nhwc(ctx), kept, scratch));
}

static size_t cuda_pool_keep_bytes(const backend_ctx *ctx, const pool_params *p) {
    (void)ctx;
    return cuk_pool_arg_bytes(p);
}

/* -------------------------------------------------------------------- gemm */

/* BF16/FP16: A and B rounded into 16-bit copies with the same leading
 * dimensions (an operand that is a 16-bit activation, named in act16ops,
 * as it is), cublasGemmEx on them with fp32 accumulation writing the float
 * C directly (so beta works on the old fp32 contents), then C's M x N values
 * rounded to the type in place; a 16-bit C (GEMM_ACT_C in act16ops) is
 * cuBLAS's output itself, beta applied in fp32 and the sum rounded once. */
static void gemm_reduced(int math, int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                         int lda, const void *B, int ldb, float beta, void *C, int ldc, unsigned act16ops) {
    /* stored shapes: A is [M, K] or, transposed, [K, M]; B is [K, N] or [N, K] */
    size_t na = trans_a ? matrix_span(K, M, lda) : matrix_span(M, K, lda);
    size_t nb = trans_b ? matrix_span(N, K, ldb) : matrix_span(K, N, ldb);
    const void *Ah = act16ops & GEMM_ACT_A ? A : h16_from(math, H16_OP0, na, A);
    const void *Bh = act16ops & GEMM_ACT_B ? B : h16_from(math, H16_OP1, nb, B);
    cudaDataType_t t = math == BACKEND_MATH_FP16 ? CUDA_R_16F : CUDA_R_16BF;
    int c16 = (act16ops & GEMM_ACT_C) != 0;
    CUBLAS_CHECK(cublasGemmEx(g.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                              M, K, &alpha, Bh, t, ldb, Ah, t, lda, &beta, C, c16 ? t : CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (!c16) CUDA_CHECK(cuk_round_narrow(g.stream, math, (size_t)M, (size_t)N, (size_t)ldc, C));
}

/* The cuBLAS handle's math mode for our math mode `math`, set when it
 * changes (g.cublas_tf32 -1: not set yet): TF32 tensor ops in TF32; cuBLAS's
 * DEFAULT math otherwise, which is fp32 for cublasSgemm and uses tensor
 * cores for the 16-bit operands of cublasGemmEx (fp32 accumulation,
 * CUBLAS_COMPUTE_32F). Either way with
 * CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: a 16-bit C (16-bit
 * activations) is summed in fp32 and rounded once, as model/backend.h's
 * contract asks, not split-K reduced in 16 bits. */
static void cublas_math(int math) {
    int tf32 = math == BACKEND_MATH_TF32;
    if (tf32 == g.cublas_tf32) return;
    cublasMath_t mode = tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    CUBLAS_CHECK(cublasSetMathMode(g.cublas, (cublasMath_t)(mode | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    g.cublas_tf32 = tf32;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same
 * call with the operands swapped, no transposes in memory. */
static void cuda_gemm(const backend_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc, unsigned act) {
    on_device();
    CNT_ASSERT(M >= 0 && N >= 0 && K >= 0);
    pair_clear(); /* gemm_reduced rounds into H16_OP0 and H16_OP1 */
    if (M == 0 || N == 0) return;
    cublas_math(ctx->math);
    if (math_reduced(ctx->math)) {
        gemm_reduced(ctx->math, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, act16(ctx) ? act : 0);
        return;
    }
    CUBLAS_CHECK(cublasSgemm(g.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                             M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
}

/* ------------------------------------------------------------- elementwise */

static void cuda_relu_fwd(const backend_ctx *ctx, size_t n, const void *x, void *y) {
    on_device();
    CUDA_CHECK(cuk_relu_fwd(g.stream, ctx->act, n, x, y));
}

static void cuda_relu_bwd(const backend_ctx *ctx, size_t n, const void *y, const void *dy, void *dx, int accumulate) {
    on_device();
    CUDA_CHECK(cuk_relu_bwd(g.stream, ctx->act, n, y, dy, dx, accumulate));
}

static void cuda_add(const backend_ctx *ctx, size_t n, const void *a, const void *b, void *y) {
    on_device();
    CUDA_CHECK(cuk_add(g.stream, ctx->act, n, a, b, y));
}

static void cuda_axpy(size_t n, float alpha, const float *x, float *y, int accumulate) {
    on_device();
    CUDA_CHECK(cuk_axpy(g.stream, n, alpha, x, y, accumulate));
}

static void cuda_mul(const backend_ctx *ctx, size_t n, const void *a, const float *b, void *y, int accumulate) {
    on_device();
    CUDA_CHECK(cuk_mul(g.stream, ctx->act, n, a, b, y, accumulate));
}

static void cuda_dropout_mask(size_t n, float p, uint64_t seed, float *mask) {
    on_device();
    CNT_ASSERT(p >= 0.0f && p < 1.0f);
    CUDA_CHECK(cuk_dropout_mask(g.stream, n, p, seed, mask));
}

static void cuda_dropout_mask_at(size_t n, float p, const uint64_t *step_at, uint64_t node_index, float *mask) {
    on_device();
    CNT_ASSERT(p >= 0.0f && p < 1.0f && step_at);
    CUDA_CHECK(cuk_dropout_mask_at(g.stream, n, p, step_at, node_index, mask));
}

static void cuda_channel_copy(const backend_ctx *ctx, int N, int C, int HW, const void *src, int src_C,
                              int src_off, void *dst, int dst_C, int dst_off, int accumulate) {
    on_device();
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 0);
    CNT_ASSERT(src_off >= 0 && src_off + C <= src_C && dst_off >= 0 && dst_off + C <= dst_C);
    CUDA_CHECK(cuk_channel_copy(g.stream, ctx->act, N, C, HW, src, src_C, src_off, dst, dst_C, dst_off, accumulate,
                                nhwc_spatial(ctx, HW)));
}

static void cuda_normalize_u8(int N, int C, int HW, const uint8_t *x, const float *lut, float *y) {
    on_device();
    CUDA_CHECK(cuk_normalize_u8(g.stream, N, C, HW, x, lut, y));
}

static void cuda_softmax_xent(int N, int K, const float *logits, const int *labels, float smoothing, float *loss,
                              float *dlogits) {
    on_device();
    CNT_ASSERT(N >= 1 && K >= 1);
    double *row_loss = scratch_get((size_t)N);
    CUDA_CHECK(cuk_softmax_xent(g.stream, N, K, logits, labels, smoothing, loss, dlogits, row_loss));
}

static void cuda_sgd_update(size_t n, float *param, const float *grad, float *momentum_buf, float lr, float momentum,
                            float weight_decay, int nesterov, float grad_scale, const float *lr_at,
                            const float *scale_at) {
    on_device();
    CNT_ASSERT(momentum == 0.0f || momentum_buf != NULL);
    CUDA_CHECK(cuk_sgd_update(g.stream, n, param, grad, momentum_buf, lr, momentum, weight_decay, nesterov,
                              grad_scale, lr_at, scale_at));
}

static void cuda_sumsq2(size_t n, const float *a, const float *b, float *out) {
    on_device();
    CUDA_CHECK(cuk_sumsq2(g.stream, n, a, b, out, g.sumsq_partial));
}

static void cuda_lars_trust(int k, const float *sums, float eta, float weight_decay, float grad_scale,
                            float *trust) {
    on_device();
    CUDA_CHECK(cuk_lars_trust(g.stream, k, sums, eta, weight_decay, grad_scale, trust));
}

static void cuda_lowrank_orthonormalise(int rows, int r, float *P) {
    on_device();
    CUDA_CHECK(cuk_lowrank_orthonormalise(g.stream, rows, r, P));
}

static void cuda_lowrank_redraw(int r, int cols, float *Qt, uint64_t seed) {
    on_device();
    CUDA_CHECK(cuk_lowrank_redraw(g.stream, r, cols, Qt, seed));
}

/* ---- recorded steps (train.cuda_graph): stream capture of g.stream ---- */

static void cuda_capture_begin(void) {
    on_device();
    CNT_ASSERT(!g.capturing && g.cublas_ws); /* cuBLAS allocates nothing while recording (backend start) */
    /* thread-local: another thread's CUDA calls (a loader's upload on the
     * copy stream) neither break the recording nor are recorded */
    CUDA_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
    g.capturing = 1;
}

static void *cuda_capture_end(char *why, size_t len) {
    on_device();
    CNT_ASSERT(g.capturing);
    g.capturing = 0;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g.stream, &graph);
    if (e != cudaSuccess) {
        snprintf(why, len, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        if (graph) (void)cudaGraphDestroy(graph);
        return NULL;
    }
    cudaGraphExec_t exec = NULL;
    /* the nodes keep their streams' priorities (the NCCL stream's is the
     * device's highest), which a launch otherwise replaces by its stream's */
    e = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
    CUDA_CHECK(cudaGraphDestroy(graph)); /* the instance keeps what it needs */
    if (e != cudaSuccess) {
        snprintf(why, len, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return NULL;
    }
    return exec;
}

static void cuda_graph_launch(void *graph) {
    on_device();
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, g.stream));
}

static void cuda_graph_free(void *graph) {
    on_device();
    if (!graph) return;
    /* no wait: an instance still running is freed when it completes (CUDA's
     * rule), and a wait here could be unbounded (a replay's NCCL collective
     * whose peer died, which only the communicator's abort ends) */
    CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

static uint64_t cuda_memory_epoch(void) { return g.mem_epoch; }

static void cuda_find_nonfinite(size_t n, const float *x, float *found) {
    on_device();
    CUDA_CHECK(cuk_find_nonfinite(g.stream, n, x, found));
}

static void cuda_set_threads(int n) { (void)n; }

/* math_check (backend.h): cuDNN has bf16 convolutions from compute 8.0 on. */
static int cuda_math_check(int math) {
    on_device();
    if (math == BACKEND_MATH_BF16 && g.cc_major < 8)
        return cnt_err_set("cuda:%d (compute %d.x) has no bf16 convolutions in cuDNN: bf16 needs compute 8.0 "
                           "(Ampere) or later; use train.precision = fp16 (or fp32) on this GPU",
                           g.device, g.cc_major);
    return CNT_OK;
}

static void cuda_convert_layout(int N, int C, int HW, const void *src, int src_type, void *dst, int dst_type,
                                int layout, int to_layout, int accumulate) {
    on_device();
    CNT_ASSERT(layout == BACKEND_LAYOUT_NCHW || layout == BACKEND_LAYOUT_NHWC);
    if (src_type != BACKEND_DTYPE_FP32 || dst_type != BACKEND_DTYPE_FP32) { /* with a type conversion */
        CNT_ASSERT(N >= 0 && C >= 0 && HW >= 0);
        CUDA_CHECK(cuk_convert_layout(g.stream, N, C, HW, src, src_type, dst, dst_type,
                                      layout == BACKEND_LAYOUT_NHWC, to_layout, accumulate));
        return;
    }
    if (layout == BACKEND_LAYOUT_NCHW) {
        size_t n = (size_t)N * C * HW;
        if (accumulate)
            cuda_axpy(n, 1.0f, src, dst, 1);
        else
            cuda_copy(dst, src, n * sizeof(float));
        return;
    }
    int to_nhwc = to_layout;
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 0);
    CUDA_CHECK(cuk_transpose_layout(g.stream, N, C, HW, src, dst, to_nhwc, accumulate));
}

/* ---------------------------------------------------------------- ordering */

static void *cuda_native_stream(void) { return (void *)g.stream; }

static void *cuda_fence_create(void) {
    on_device();
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return (void *)ev;
}

/* Timing marks: events with timing on (fences have it off, which is cheaper). */
static void *cuda_mark_create(void) {
    on_device();
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreate(&ev));
    return ev;
}

static void cuda_mark_destroy(void *mark) {
    on_device();
    if (mark) CUDA_CHECK(cudaEventDestroy((cudaEvent_t)mark));
}

static void cuda_mark_record(void *mark) { on_device(); CUDA_CHECK(cudaEventRecord((cudaEvent_t)mark, g.stream)); }

static double cuda_mark_elapsed_ms(void *a, void *b) {
    on_device();
    float ms = 0.0f;
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)b));
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b));
    return ms;
}

static void cuda_fence_destroy(void *fence) {
    on_device();
    if (fence) CUDA_CHECK(cudaEventDestroy((cudaEvent_t)fence));
}

static void cuda_fence_record(void *fence) { on_device(); CUDA_CHECK(cudaEventRecord((cudaEvent_t)fence, g.stream)); }

/* On the calling thread's own stream (cudaStreamPerThread), which waits for the
 * fence on the device: the copy neither waits for compute ops queued after the
 * fence nor makes them wait. */
static void cuda_download_fenced(void *host_dst, const void *src, size_t bytes, void *fence) {
    on_device();
    if (!bytes) return;
    CUDA_CHECK(cudaStreamWaitEvent(cudaStreamPerThread, (cudaEvent_t)fence, 0));
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

static void cuda_fence_wait(void *fence) { on_device(); CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)fence)); }

static void *cuda_host_alloc(size_t bytes) {
    on_device();
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess)
        cnt_fatal_at(__FILE__, __LINE__, 1, "lower train.batch_size", "cudaHostAlloc(%zu bytes) (page-locked): %s",
                     bytes, cudaGetErrorString(e));
    memset(p, 0, bytes);
    return p;
}

static void cuda_host_free(void *ptr) {
    on_device();
    if (!ptr) return;
    /* a queued copy may still read it */
    CUDA_CHECK(cudaStreamSynchronize(g.copy_stream));
    CUDA_CHECK(cudaFreeHost(ptr));
}

/* The copy stream waits for `after` (the compute ops that last used dst), the
 * DMA runs beside compute, and the compute stream waits for `done` before its
 * next op: the input of step t+1 arrives while step t computes. */
static void cuda_upload_async(void *dst, const void *host_src, size_t bytes, void *after, void *done) {
    on_device();
    if (after) CUDA_CHECK(cudaStreamWaitEvent(g.copy_stream, (cudaEvent_t)after, 0));
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, g.copy_stream));
    if (done) {
        CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, g.copy_stream));
        CUDA_CHECK(cudaStreamWaitEvent(g.stream, (cudaEvent_t)done, 0));
    }
}

static void cuda_upload_sync(void *dst, const void *host_src, size_t bytes) {
    on_device();
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

static int cuda_pci_bus_id(char *buf, size_t len) {
    if (len > (size_t)INT_MAX) len = INT_MAX;
    if (cudaDeviceGetPCIBusId(buf, (int)len, g.device) != cudaSuccess) {
        (void)cudaGetLastError(); /* not the next launch's error */
        return 0;
    }
    return buf[0] != 0;
}

static void cuda_describe(char *buf, size_t len) {
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, g.device));
    snprintf(buf, len, "cuda:%d %s (%.1f GiB, compute %d.%d)", g.device, prop.name,
             prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor);
}

/* ------------------------------------------------------- memory planning */

static void cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    on_device();
    *free_bytes = *total_bytes = 0;
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the caller only learns nothing */
        *free_bytes = *total_bytes = 0;
    }
}

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* The 16-bit copies (bf16/fp16: the two operands and the result of each
 * pass, h16_get's slots) and the NHWC filter copy (fscratch). cuDNN's
 * workspace is left out: ws_for_find takes the limit or half of what is
 * free, whichever is less, so it adapts to what the net left. */
static size_t cuda_conv_workspace(const backend_ctx *ctx, const conv_params *p) {
    on_device();
    size_t w = conv_w_count(p), in = conv_in_count(p), out = conv_out_count(p);
    size_t bytes = layout_nhwc(ctx) ? w * sizeof(float) : 0;
    if (act16(ctx)) {
        /* H16_OP1: the filter; H16_OUT: dw; the a32 slots: x, dy and a
         * result of the batch norms and pools around convolutions of this
         * size (every activation of the zoo's nets is some convolution's
         * input or output or a linear layer's operand) */
        bytes += 2 * (w + w) + A32_SLOTS * max2(in, out) * sizeof(float);
    } else if (math_reduced(ctx->math)) {
        /* H16_OP0: x, dy, or the filter (a paired data pass); H16_OP1: the
         * filter or dy; H16_OUT: y, dx or dw */
        bytes += 2 * (max2(max2(in, out), w) + max2(w, out) + max2(max2(in, out), w));
    }
    /* the graph API's search: each candidate writes the pass's output (y, dx or dw) into cg_scratch */
    if (ctx->conv_api == BACKEND_CONV_API_GRAPH)
        bytes += max2(max2(in, out), w) * (math_reduced(ctx->math) ? 2 : sizeof(float));
    return bytes;
}

static size_t cuda_gemm_workspace(const backend_ctx *ctx, int M, int N, int K, unsigned act) {
    on_device();
    if (!math_reduced(ctx->math)) return 0;
    if (!act16(ctx)) act = 0; /* fp32 activations get a 16-bit copy like the weights */
    /* H16_OP0, H16_OP1: the operands that are not 16-bit activations */
    return 2 * ((act & GEMM_ACT_A ? 0 : (size_t)M * K) + (act & GEMM_ACT_B ? 0 : (size_t)K * N));
}

static const backend cuda_backend = {
    .name = "cuda",
    /* 16-bit activations (act16): stored and read natively by convolutions,
     * GEMMs and our kernels; what auto picks since an H200 measured them
     * faster: ResNet-50 bf16 NHWC batch 256, 4,720 img/s against 2,772
     * with fp32 activations, 6,057 with the graph API (docs/benchmarks.md) */
    .act_types = (1u << BACKEND_DTYPE_FP32) | (1u << BACKEND_DTYPE_BF16) | (1u << BACKEND_DTYPE_FP16),
    .act_auto = (1u << BACKEND_DTYPE_BF16) | (1u << BACKEND_DTYPE_FP16),
    /* cuDNN's graph API: the same H200 ran ResNet-50 bf16 at 4,829 img/s
     * against 1,535 with the legacy calls (batch 64), tf32 at 3,121 against
     * 2,948 */
    .conv_api_auto = BACKEND_CONV_API_GRAPH,
    .describe = cuda_describe,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .sync = cuda_sync,
    .conv_fwd = cuda_conv_fwd,
    .conv_filter_kept = cuda_conv_filter_kept,
    .conv_describe = cuda_conv_describe,
    .pci_bus_id = cuda_pci_bus_id,
    .plans_export = cuda_plans_export,
    .plans_import = cuda_plans_import,
    .mark_create = cuda_mark_create,
    .mark_destroy = cuda_mark_destroy,
    .mark_record = cuda_mark_record,
    .mark_elapsed_ms = cuda_mark_elapsed_ms,
    .conv_bwd_data = cuda_conv_bwd_data,
    .conv_bwd_filter = cuda_conv_bwd_filter,
    .bias_fwd = cuda_bias_fwd,
    .bias_bwd = cuda_bias_bwd,
    .bn_fwd_train = cuda_bn_fwd_train,
    .bn_fwd_infer = cuda_bn_fwd_infer,
    .bn_bwd = cuda_bn_bwd,
    .bn_act_fwd_train = cuda_bn_act_fwd_train,
    .bn_act_bwd = cuda_bn_act_bwd,
    .bn_act_keep_bytes = cuda_bn_act_keep_bytes,
    .pool_fwd = cuda_pool_fwd,
    .pool_bwd = cuda_pool_bwd,
    .pool_keep_bytes = cuda_pool_keep_bytes,
    .gemm = cuda_gemm,
    .relu_fwd = cuda_relu_fwd,
    .relu_bwd = cuda_relu_bwd,
    .add = cuda_add,
    .axpy = cuda_axpy,
    .mul = cuda_mul,
    .dropout_mask = cuda_dropout_mask,
    .dropout_mask_at = cuda_dropout_mask_at,
    .channel_copy = cuda_channel_copy,
    .normalize_u8 = cuda_normalize_u8,
    .softmax_xent = cuda_softmax_xent,
    .sgd_update = cuda_sgd_update,
    .sumsq2 = cuda_sumsq2,
    .lars_trust = cuda_lars_trust,
    .lowrank_orthonormalise = cuda_lowrank_orthonormalise,
    .lowrank_redraw = cuda_lowrank_redraw,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
    .memory_epoch = cuda_memory_epoch,
    .set_threads = cuda_set_threads,
    .find_nonfinite = cuda_find_nonfinite,
    .math_check = cuda_math_check,
    .convert_layout = cuda_convert_layout,
    .block_c = 0,
    .max_tensor_values = 2147483647, /* cuDNN's 32-bit descriptors */
    .native_stream = cuda_native_stream,
    .fence_create = cuda_fence_create,
    .fence_destroy = cuda_fence_destroy,
    .fence_record = cuda_fence_record,
    .download_fenced = cuda_download_fenced,
    .upload_sync = cuda_upload_sync,
    .fence_wait = cuda_fence_wait,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .upload_async = cuda_upload_async,
    .mem_info = cuda_mem_info,
    .conv_workspace = cuda_conv_workspace,
    .gemm_workspace = cuda_gemm_workspace,
};

/* ------------------------------------------------------------------- setup */

/* The number of usable devices, or -1 with the reason in cnt_err_msg(). */
static int device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it */
        cnt_err_set("no usable CUDA device: %s", cudaGetErrorString(e));
        return -1;
    }
    if (n == 0) {
        cnt_err_set("no usable CUDA device: the driver reports none");
        return -1;
    }
    return n;
}

int backend_cuda_describe(char *buf, size_t len) {
    int n = device_count();
    if (n < 0) {
        snprintf(buf, len, "cuda: %s\n", cnt_err_msg());
        return 0;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < n && used < len; d++) {
        struct cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
        /* cuDNN 9 numbers its versions major*10000 + minor*100 + patch: the
         * library loaded, which may be newer than the headers built against */
        size_t v = cudnnGetVersion();
        int w = snprintf(buf + used, len - used, "cuda:%d %s, %.1f GiB, compute %d.%d, cuDNN %zu.%zu.%zu\n", d,
                         prop.name, prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor, v / 10000,
                         v / 100 % 100, v % 100);
        if (w < 0) break;
        used += (size_t)w;
    }
    return n;
}

void backend_cuda_libraries(char *buf, size_t len) {
    char ver[96];
    int rt = 0; /* the runtime's own version (major*1000 + minor*10): no driver or GPU needed */
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    snprintf(ver, sizeof ver, "%d.%d (built with %d.%d)", rt / 1000, rt % 1000 / 10, CUDART_VERSION / 1000,
             CUDART_VERSION % 1000 / 10);
    file_library_line(buf, len, "CUDA runtime", ver, (const void *)cudaRuntimeGetVersion);
    file_version_text(ver, sizeof ver, (long)cudnnGetVersion(), CUDNN_VERSION);
    file_library_line(buf, len, "cuDNN", ver, (const void *)cudnnGetVersion);
    int major = 0, minor = 0, patch = 0;
    if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
        major = minor = patch = 0;
    file_version_text(ver, sizeof ver, major * 10000L + minor * 100 + patch, CUBLAS_VERSION);
    file_library_line(buf, len, "cuBLAS", ver, (const void *)cublasGetProperty);
}

/* The backend on device local_rank % devices, created on the first call; NULL
 * (with the reason in cnt_err_msg()) when no device is usable. */
const backend *backend_cuda(int local_rank) {
    if (g.ready) return &cuda_backend;
    int n = device_count();
    if (n < 0) return NULL;
    g.device = (local_rank < 0 ? 0 : local_rank) % n;
    CUDA_CHECK(cudaSetDevice(g.device));
    tls_device_set = 1;
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, g.device));
    /* A GPU this build has no kernels for (NVCC_ARCH) is not usable: say so
     * here, so device=auto falls back to the CPU instead of failing at the
     * first kernel. */
    cudaError_t pe = cuk_probe();
    if (pe != cudaSuccess) {
        cudaGetLastError();
        cnt_err_set("cuda:%d %s (compute %d.%d): this build has no kernels for it (%s); rebuild with "
                    "NVCC_ARCH=\"-gencode arch=compute_%d%d,code=sm_%d%d\"",
                    g.device, prop.name, prop.major, prop.minor, cudaGetErrorString(pe), prop.major, prop.minor,
                    prop.major, prop.minor);
        return NULL;
    }
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    snprintf(g.dev_name, sizeof g.dev_name, "%s", prop.name);
    CUDA_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&g.copy_stream, cudaStreamNonBlocking));
    CUDNN_CHECK(cudnnCreate(&g.cudnn));
    CUDNN_CHECK(cudnnSetStream(g.cudnn, g.stream));
    CUBLAS_CHECK(cublasCreate(&g.cublas));
    CUBLAS_CHECK(cublasSetStream(g.cublas, g.stream));
    /* cuBLAS's workspace, ours from the start (32 MiB, NVIDIA's figure for
     * Hopper; the process keeps it): cuBLAS would otherwise allocate one when
     * a call needs it, which a recorded step (train.cuda_graph) must not, and
     * its kernels depend on the workspace's size, so every step, eager or
     * recorded, sees the same one. After cublasSetStream, which resets it. */
    {
        const size_t bytes = (size_t)32 << 20;
        CUDA_CHECK(cudaMalloc(&g.cublas_ws, bytes));
        CUBLAS_CHECK(cublasSetWorkspace(g.cublas, g.cublas_ws, bytes));
    }
    CUDA_CHECK(cudaMalloc((void **)&g.sumsq_partial, 2 * CUK_SUMSQ2_BLOCKS * sizeof(double)));
    g.cublas_tf32 = -1;
    cublas_math(BACKEND_MATH_FP32);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&g.bn_x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&g.bn_param));
    CUDNN_CHECK(cudnnCreateActivationDescriptor(&g.relu));
    /* NaN passes through, as relu_fwd's `x < 0 ? 0 : x` */
    CUDNN_CHECK(cudnnSetActivationDescriptor(g.relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    /* cuDNN's fastest algorithms may want large workspaces: allow a tenth of
     * the card, at most 4 GiB (PyTorch lets them take what is free). */
    g.ws_limit = prop.totalGlobalMem / 10;
    if (g.ws_limit > ((size_t)4 << 30)) g.ws_limit = (size_t)4 << 30;
    g.ready = 1;
    return &cuda_backend;
}
