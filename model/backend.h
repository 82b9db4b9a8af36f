/*
 * model/backend.h - the one compute interface every layer calls.
 *
 * A backend is a table of function pointers (ggml's pattern). The CPU backend
 * (model/backend_cpu.c, OpenBLAS + OpenMP) is always built; a CUDA backend plugs
 * in through model/backend_registry.c, the only file that knows which backends
 * were compiled in. Layer code never sees a device type: pointers passed to ops
 * are device pointers obtained from alloc(), and host data moves only through
 * upload()/download().
 *
 * A table holds no mode of its own. What an op's numbers depend on besides
 * its arguments, the activation layout, the math mode and the per-step hints,
 * is a backend_ctx that the op takes as its first argument; each net owns one
 * (model/net.h: net_set_layout, net_set_math), so nets with different
 * contexts may call one backend in any order. Optional ops are called
 * through the wrappers at the end of this file (model/backend.c), which fall
 * back where a backend has none; callers never test an op's pointer.
 *
 * Conventions for every op:
 *   - Tensors are dense, [N, C, H, W] (NCHW) in the default layout; see
 *     backend_ctx.layout for the others. Filters are [K, C, R, S] in every
 *     layout. Row-major GEMM. Activations (the `void *` operands: x, y, z,
 *     dx, dy, dz) hold values of the type ctx->act (fp32 by default, bf16
 *     or fp16 where the net stores 16-bit activations); everything typed
 *     `float *` is fp32 in every context: parameters and their gradients,
 *     batch-norm statistics, the loss, masks.
 *   - `accumulate` (0 or 1) plays cuDNN's beta: 0 overwrites the output, 1 adds
 *     to it. Backward ops that write an input gradient take it, because a tensor
 *     consumed by two layers (a residual branch) receives the sum of both.
 *   - Weight-gradient outputs are always overwritten (each parameter is used by
 *     exactly one layer).
 *   - Ops are asynchronous with respect to the host on devices that allow it;
 *     download() and sync() are the only points where the host waits.
 *   - Ops do not fail at run time on valid arguments; argument errors are
 *     programming errors and end the process through CNT_ASSERT.
 */
#ifndef CNT_BACKEND_H
#define CNT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* Convolution geometry. P and Q (output height and width) are derived by
 * conv_params_init(); N may change between calls (the last batch of an
 * evaluation is smaller), everything else is fixed per layer. */
typedef struct conv_params {
    int N, C, H, W;      /* input  [N, C, H, W] */
    int K, R, S;         /* filter [K, C, R, S] */
    int stride_h, stride_w;
    int pad_h, pad_w;
    int P, Q;            /* output [N, K, P, Q] */
} conv_params;

/* Fills P and Q; returns CNT_ERR (with a message) if the output would be empty. */
int conv_params_init(conv_params *p);

/* Values in a convolution's input, filter and output. */
static inline size_t conv_in_count(const conv_params *p) { return (size_t)p->N * p->C * p->H * p->W; }
static inline size_t conv_w_count(const conv_params *p) { return (size_t)p->K * p->C * p->R * p->S; }
static inline size_t conv_out_count(const conv_params *p) { return (size_t)p->N * p->K * p->P * p->Q; }

/* Values a row-major matrix of `rows` rows of `cols` with row stride ld spans
 * in memory (no padding after its last row is read). */
static inline size_t matrix_span(int rows, int cols, int ld) {
    return rows == 0 || cols == 0 ? 0 : (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

typedef enum pool_mode {
    POOL_MODE_MAX,              /* padding never selected */
    POOL_MODE_AVG_INCLUDE_PAD,  /* torch avg_pool2d default: divide by R*S (window clipped to padded input) */
    POOL_MODE_AVG_EXCLUDE_PAD,  /* divide by the number of real input elements in the window */
    POOL_MODE_ADAPTIVE_AVG      /* torch adaptive_avg_pool2d to P x Q; R, S, stride, pad unused */
} pool_mode;

/* What an op's training forward keeps for the backward of the same batch,
 * in memory the caller owns (one per op, sized by the op's *_keep_bytes at
 * the net's largest batch), so that nothing is held by the backend between
 * a forward and its backward. Two ops keep: a batch norm fused with its ReLU
 * (bn_act_fwd_train, bn_act_bwd: cuDNN's fused forward writes the ReLU's
 * mask into a "reserve space" that its fused backward reads) and max
 * pooling (pool_fwd, pool_bwd: the CUDA kernels' position of each window's
 * maximum, which the backward would otherwise search for again). */
typedef struct fwd_keep {
    void *p;      /* device memory of `bytes`; NULL: nothing can be kept */
    size_t bytes;
    int written;  /* set by the forward: 1 when this batch's backward may take what it kept instead of
                   * finding it again (p written; or a fused batch norm whose cuDNN call keeps nothing,
                   * p then unread), else 0 (an op that keeps nothing leaves it 0) */
} fwd_keep;

typedef struct pool_params {
    pool_mode mode;
    int N, C, H, W;      /* input  [N, C, H, W] */
    int R, S;            /* window */
    int stride_h, stride_w;
    int pad_h, pad_w;
    int ceil_mode;       /* torch ceil_mode (Inception's pools use floor) */
    int P, Q;            /* output [N, C, P, Q]; set by pool_params_init except ADAPTIVE, where the caller sets them */
} pool_params;

/* Fills P and Q for non-adaptive modes (torch's formula, including the ceil_mode
 * rule that the last window must start inside the input or left padding);
 * returns CNT_ERR (with a message) if the output would be empty. */
int pool_params_init(pool_params *p);

/* ---- the context of an op ----
 * Math mode: how convolutions and GEMMs may round. It applies to conv_fwd,
 * conv_bwd_data, conv_bwd_filter and gemm only; every other op computes in
 * fp32 in every mode (and stores what ctx->act says: backend_dtype).
 *   BACKEND_MATH_FP32: fp32 products and sums.
 *   BACKEND_MATH_TF32: tensor cores with TF32 inputs (10-bit mantissa) and
 *     fp32 accumulation, where the device has them; the CPU computes fp32.
 *   BACKEND_MATH_BF16, BACKEND_MATH_FP16 (mixed precision): the op's
 *     operands (x and w; dy and w; x and dy; A and B) are rounded to
 *     bfloat16 / IEEE half (round to nearest even), multiplied and summed
 *     in fp32, and the op's result (after `accumulate` or beta has added
 *     the old contents) is rounded to the same type, as a tensor of that
 *     type would hold it: fp16 results beyond +-65504 become +-inf (what
 *     dynamic loss scaling watches for). GPUs run these on tensor cores
 *     with half operands; the CPU emulates the rounding with fp32 GEMMs
 *     (same numbers up to summation order, no speed-up; a GPU's
 *     accumulating conv_bwd_data also rounds the convolution's own sum
 *     before adding, so it may differ by one more rounding). Parameters stay
 *     fp32 (the master weights): only the op's copy of them is rounded. */
typedef enum backend_math {
    BACKEND_MATH_FP32 = 0,
    BACKEND_MATH_TF32 = 1,
    BACKEND_MATH_BF16 = 2,
    BACKEND_MATH_FP16 = 3
} backend_math;

/* Activation layout: how conv_fwd, conv_bwd_data, conv_bwd_filter (x, y,
 * dx, dy), bias_fwd, bias_bwd, the batch-norm ops, pool_fwd, pool_bwd and
 * channel_copy store the 4-D tensors they read and write. The tensor
 * [N, C, H, W] in the ops' comments is the logical one; every layout stores the
 * same N*C*H*W values (a permutation of NCHW that depends only on C and
 * H*W), so a net allocates alike in all of them, and elementwise ops, gemm,
 * the loss and the optimizer do not depend on the layout (their operands
 * share one).
 *   BACKEND_LAYOUT_NCHW, the default: (n, c, h, w) at ((n*C + c)*H + h)*W + w.
 *   BACKEND_LAYOUT_NHWC: channels innermost, (n, c, h, w) at
 *     ((n*H + h)*W + w)*C + c ([N, C, HW] views become [N, HW, C]).
 *   BACKEND_LAYOUT_BLOCKED, only where block_c > 0: the backend's own
 *     channel-blocked layout (oneDNN's nChw8c / nChw16c), with B = block_c:
 *     a tensor whose C is a multiple of B is stored [N, C/B, H, W, B],
 *     (n, c, h, w) at (((n*(C/B) + c/B)*H + h)*W + w)*B + c%B; a tensor
 *     with any other C (a 3-channel image) is stored NCHW.
 * With HW == 1 every layout is the same bytes as NCHW. Filters stay
 * [K, C, R, S] and per-channel vectors [C] in every layout (a backend that
 * wants other filter layouts converts them itself), so parameters,
 * gradients and checkpoints do not depend on the layout. Numbers may differ
 * from NCHW by summation order only. GPUs run tensor-core convolutions
 * natively in NHWC (cuDNN transposes NCHW operands for them); the CPU
 * backend computes NHWC as NCHW with transposes around each op (so that
 * the same tests run on both), and BLOCKED natively on oneDNN, its fast
 * layout. */
/* BACKEND_LAYOUT_AUTO is a request (train.layout = auto), never a backend's
 * layout: backend_layout_choose turns it into one of the others. */
typedef enum backend_layout {
    BACKEND_LAYOUT_NCHW = 0,
    BACKEND_LAYOUT_NHWC = 1,
    BACKEND_LAYOUT_BLOCKED = 2,
    BACKEND_LAYOUT_AUTO = 3
} backend_layout;

/* The type activations are stored in (backend_ctx.act). Every op computes
 * in fp32 whatever the type: it widens the 16-bit values it reads (exactly)
 * and rounds what it writes once, to nearest even (fp16 beyond +-65504: +-inf,
 * common/half.h), after `accumulate` has added the old contents. So a fused
 * op (bn_act_*) rounds once where its composition rounds after each step.
 *   BACKEND_DTYPE_FP32: 4 bytes a value, the default.
 *   BACKEND_DTYPE_BF16, BACKEND_DTYPE_FP16: 2 bytes a value (bfloat16, IEEE
 *     half), what mixed precision stores (PyTorch autocast's activations): half
 *     the memory traffic of every op, and the operands tensor cores read
 *     without a conversion. Only where backend.act_types has the type. */
typedef enum backend_dtype {
    BACKEND_DTYPE_FP32 = 0,
    BACKEND_DTYPE_BF16 = 1,
    BACKEND_DTYPE_FP16 = 2
} backend_dtype;

/* Bytes a value of type t takes. */
static inline size_t backend_dtype_size(backend_dtype t) { return t == BACKEND_DTYPE_FP32 ? 4 : 2; }

/* What an op's results depend on besides its arguments. The ops that read it
 * take it as their first argument; a backend keeps nothing of it between
 * calls, so contexts may alternate from one op to the next. All zero is the
 * default context: NCHW, fp32, no promise about weights. It is small and
 * passed by pointer, so a field added later changes no op's signature. */
/* How a backend runs its convolutions where it has a choice (the CUDA
 * backend: cuDNN's legacy calls, or its backend "graph" API with the
 * engines timed per shape: model/cudnn_graph.h). Others ignore it. */
typedef enum backend_conv_api { BACKEND_CONV_API_LEGACY = 0, BACKEND_CONV_API_GRAPH = 1 } backend_conv_api;

typedef struct backend_ctx {
    backend_layout layout; /* of the activations; never BACKEND_LAYOUT_AUTO (BLOCKED where block_c > 0) */
    backend_math math;     /* of convolutions and GEMMs */
    backend_dtype act;     /* what activations are stored in; one of backend.act_types */
    /* The per-step hint that weights stay fixed: nonzero, a number no other
     * span had in this process (backend_epoch_new), while no convolution's
     * weights change, from a training forward to the end of its backward
     * (net_forward sets it, net_backward and an evaluation forward set 0).
     * A backend that hands its convolutions another form of the filter than
     * w (the CUDA backend's [K, R, S, C] copy in NHWC, its 16-bit copy in
     * bf16/fp16) may keep that form per weight pointer when conv_fwd runs
     * under a nonzero epoch and reuse it in conv_bwd_data of the same w under
     * the same epoch, instead of making it again; under 0 it keeps and
     * reuses nothing. The CUDA backend does this (it costs a second copy of
     * the convolution weights in device memory, conv_filter_kept, which the
     * memory check counts; measured on an H200 at up to 4% of a
     * ResNet-50/101 step: docs/benchmarks.md). */
    uint64_t weights_epoch;
    backend_conv_api conv_api; /* train.conv_api; LEGACY (0) unless asked for */
} backend_ctx;

typedef struct backend {
    const char *name;    /* "cpu", "cuda": for messages */
    /* 1 for the CPU backend (both its tables: OpenBLAS, and oneDNN's on top),
     * whose device memory is host memory and whose ops run on the host's
     * threads (set_threads); 0 for a GPU backend. */
    int is_cpu;
    /* The activation types it stores (backend_ctx.act): bit (1u << t) for
     * each backend_dtype t it has. Every backend has fp32. */
    unsigned act_types;
    /* Those of them train.activations = auto takes (backend_act_choose):
     * the CPU's 16-bit types, the reference that stores what autocast
     * stores; a GPU's once measured faster than fp32 activations. */
    unsigned act_auto;
    /* How train.conv_api = auto runs its convolutions (backend_ctx.conv_api,
     * config_conv_api): a GPU's faster API where measured; LEGACY for a
     * backend with one way only. */
    backend_conv_api conv_api_auto;
    /* One line for logs: which device, e.g. "cuda:1 NVIDIA H100 80GB HBM3
     * (79.1 GiB, compute 9.0)" or "cpu (16 threads)". */
    void (*describe)(char *buf, size_t len);
    /* Optional (NULL: none; call it through backend_pci_bus_id): the
     * device's PCI bus id, "0000:1B:00.0" (cudaDeviceGetPCIBusId), into buf;
     * 1, or 0 where it has none. */
    int (*pci_bus_id)(char *buf, size_t len);

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes);              /* zero-filled; fatal on failure */
    void (*free)(void *ptr);                   /* NULL is fine */
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes); /* waits for pending ops */
    void (*copy)(void *dst, const void *src, size_t bytes);          /* device to device */
    void (*zero)(void *dst, size_t bytes);
    void (*sync)(void);

    /* ---- convolution (no bias; see bias_* below) ----
     * In ctx's layout and math mode; ctx->weights_epoch may let the data
     * pass reuse the forward's form of w (backend_ctx). */
    /* y[N,K,P,Q] = conv(x[N,C,H,W], w[K,C,R,S]) */
    void (*conv_fwd)(const backend_ctx *ctx, const conv_params *p, const void *x, const float *w, void *y);
    /* dx[N,C,H,W] (+)= conv_transpose(dy[N,K,P,Q], w). `paired` is 1 when
     * the conv_bwd_filter called just before read this same dy, unchanged
     * since (a convolution layer's two backward passes): a backend that
     * converts dy for its convolutions (the CUDA backend in bf16/fp16 rounds
     * it to 16 bits) may take that pass's conversion instead of making it
     * again. It checks that the conversion is still there: any convolution
     * or GEMM in between (another net's, say) just cancels the reuse. The
     * result is the same either way. */
    void (*conv_bwd_data)(const backend_ctx *ctx, const conv_params *p, const void *dy, const float *w, void *dx,
                          int accumulate, int paired);
    /* dw[K,C,R,S] = sum over batch of correlation(x, dy) */
    void (*conv_bwd_filter)(const backend_ctx *ctx, const conv_params *p, const void *x, const void *dy,
                            float *dw);
    /* Optional (NULL: 0; call it through backend_conv_filter_kept): the
     * device bytes the backend keeps per weight pointer under a nonzero
     * ctx->weights_epoch for the filter of a convolution of shape p in ctx's
     * math mode and layout (0 where it keeps nothing), so the memory estimate
     * (net_memory_estimate) can count them. */
    size_t (*conv_filter_kept)(const backend_ctx *ctx, const conv_params *p);
    /* What runs the convolution of shape p in ctx's layout and math mode,
     * for profiles and logs: per pass that has run (forward, data, filter),
     * the algorithm or implementation the backend chose for it and its
     * workspace; e.g. cuDNN's algorithm and math type, oneDNN's
     * implementation. A pass not run yet under this context says so.
     * Optional (NULL: backend_conv_describe says the backend's name).
     * Allocates nothing that stays; never fails. */
    void (*conv_describe)(const backend_ctx *ctx, const conv_params *p, char *buf, size_t len);
    /* Optional (NULL: the backend chooses nothing worth keeping; call them
     * through backend_plans_*): the algorithms its convolutions chose so
     * far (the CUDA backend: cuDNN's legacy algorithm, math type and
     * workspace per shape, mode, layout and pass), as text, a first line
     * naming what they were chosen on (device, compute capability, cuDNN)
     * and a line per shape; into buf (len bytes), returning the length the
     * whole text needs, as snprintf. plans_import takes such text: its
     * choices are used for those shapes from then on instead of a search
     * (ones already made are replaced, so every rank can run rank 0's);
     * returns how many it took, or -1 with the reason in why (len bytes)
     * and nothing taken where the text was made on another device or
     * library version, or does not parse. */
    size_t (*plans_export)(char *buf, size_t len);
    int (*plans_import)(const char *text, char *why, size_t len);

    /* ---- per-channel bias on [N, C, HW] (HW = 1 for linear layers), in ctx's layout ---- */
    void (*bias_fwd)(const backend_ctx *ctx, int N, int C, int HW, const float *b, void *y); /* y += b[c] */
    void (*bias_bwd)(const backend_ctx *ctx, int N, int C, int HW, const void *dy, float *db); /* db = sum dy */

    /* ---- batch norm over [N, C, HW] in ctx's layout, statistics per channel ---- */
    /* Training: normalise with batch statistics (biased variance), write
     * save_mean[C] and save_invstd[C] = 1/sqrt(var+eps) for backward, and update
     * running stats: r = (1-momentum)*r + momentum*batch, the running variance
     * using the unbiased batch variance (PyTorch's rule). */
    void (*bn_fwd_train)(const backend_ctx *ctx, int N, int C, int HW, const void *x, const float *gamma,
                         const float *beta, void *y, float *running_mean, float *running_var, float momentum,
                         float eps, float *save_mean, float *save_invstd);
    /* Inference: y = gamma*(x-running_mean)/sqrt(running_var+eps) + beta */
    void (*bn_fwd_infer)(const backend_ctx *ctx, int N, int C, int HW, const void *x, const float *gamma,
                         const float *beta, void *y, const float *running_mean, const float *running_var,
                         float eps);
    /* Gradients of the training forward: dgamma, dbeta overwritten; dx (+)=.
     * eps is the forward's (save_invstd already holds it; cuDNN asks for it
     * again and wants the same value). */
    void (*bn_bwd)(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *dy,
                   const float *gamma, const float *save_mean, const float *save_invstd, float eps, void *dx,
                   float *dgamma, float *dbeta, int accumulate_dx);

    /* ---- batch norm fused with the add and ReLU after it (model/net.c's
     * fusion), in ctx's layout. Optional (NULL: callers go through
     * backend_bn_act_*, which compose bn_*, add and relu_*); a backend that
     * has them gives the composition's numbers. ----
     * Forward: y = act(bn(x) + z), bn as bn_fwd_train / bn_fwd_infer (the
     * statistics, running averages and save_* alike), + z where z is not
     * NULL, then ReLU (relu_fwd's rule) where relu is 1. y may not overlap
     * x or z. keep (may be NULL) is the group's fwd_keep: the training
     * forward may write it and then sets keep->written (its callers clear
     * it first). */
    void (*bn_act_fwd_train)(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *z, int relu,
                             const float *gamma, const float *beta, void *y, float *running_mean,
                             float *running_var, float momentum, float eps, float *save_mean, float *save_invstd,
                             fwd_keep *keep);
    void (*bn_act_fwd_infer)(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *z, int relu,
                             const float *gamma, const float *beta, void *y, const float *running_mean,
                             const float *running_var, float eps);
    /* Backward, given the forward's x and y: g = relu ? dy * (y > 0) : dy;
     * dz (+)= g where dz is not NULL (the residual's gradient, accumulate_dz
     * as bn_bwd's accumulate_dx); then bn_bwd with g for its dy. dy's
     * contents are undefined afterwards (a composition may leave g there).
     * dz may be dy itself when accumulate_dz is 0 (the net's planner lets
     * them share memory: the add's gradient in place, not copied); dx and
     * dz overlap nothing else of x, y, dy. beta is the forward's (cuDNN's
     * fused backward reads it); keep (may be NULL) the fwd_keep the training
     * forward of this x and y was given, read only where keep->written. */
    void (*bn_act_bwd)(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *y, void *dy,
                       int relu, const float *gamma, const float *beta, const float *save_mean,
                       const float *save_invstd, float eps, void *dx, float *dgamma, float *dbeta, int accumulate_dx,
                       void *dz, int accumulate_dz, const fwd_keep *keep);
    /* Optional (NULL: 0; call it through backend_bn_act_keep_bytes): the
     * bytes of fwd_keep that bn_act_fwd_train would write for a group of N
     * images (add: z given; relu as the op's), 0 where it keeps nothing
     * (then its backward recomputes the mask from y). The most any N up to
     * this one needs. */
    size_t (*bn_act_keep_bytes)(const backend_ctx *ctx, int N, int C, int HW, int add, int relu);

    /* ---- pooling, in ctx's layout ---- */
    /* keep (may be NULL; training forwards only, and through
     * backend_pool_fwd_train, which clears keep->written): the forward may
     * write what its backward needs into it and then sets keep->written. */
    void (*pool_fwd)(const backend_ctx *ctx, const pool_params *p, const void *x, void *y, fwd_keep *keep);
    /* dx (+)= gradient; x and y are the forward's input and output (max pooling
     * routes each dy to the first maximum of its window, scanning r then s);
     * keep (may be NULL) the fwd_keep this x's training forward was given,
     * read only where keep->written. */
    void (*pool_bwd)(const backend_ctx *ctx, const pool_params *p, const void *x, const void *y,
                     const void *dy, void *dx, int accumulate, const fwd_keep *keep);
    /* Optional (NULL: 0; call it through backend_pool_keep_bytes): the bytes
     * of fwd_keep pool_fwd would write for p (p->N images), 0 where it keeps
     * nothing (then pool_bwd finds what it needs from x). */
    size_t (*pool_keep_bytes)(const backend_ctx *ctx, const pool_params *p);

    /* ---- GEMM, row-major: C = alpha * op(A) * op(B) + beta * C ----
     * op(A) is [M, K], op(B) is [K, N], C is [M, N]; lda/ldb/ldc are row strides
     * of the matrices as stored. With beta == 0, C's old contents are not read
     * (BLAS's rule). In ctx's math mode. The operands named in `act`
     * (GEMM_ACT_A | _B | _C) are activations, stored in ctx->act; the
     * others are fp32 (a linear layer's weight and weight gradient). */
    void (*gemm)(const backend_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc, unsigned act);

    /* ---- elementwise over n activations (in ctx->act; the output may be
     * one of the inputs: in place) ---- */
    void (*relu_fwd)(const backend_ctx *ctx, size_t n, const void *x, void *y);
    /* dx (+)= dy * (y > 0); y is the forward output */
    void (*relu_bwd)(const backend_ctx *ctx, size_t n, const void *y, const void *dy, void *dx, int accumulate);
    /* y = a + b */
    void (*add)(const backend_ctx *ctx, size_t n, const void *a, const void *b, void *y);
    /* y (+)= a * mask, mask fp32 (dropout's) */
    void (*mul)(const backend_ctx *ctx, size_t n, const void *a, const float *mask, void *y, int accumulate);
    /* ---- elementwise over n fp32 values ---- */
    /* y = alpha * x + (accumulate ? y : 0) */
    void (*axpy)(size_t n, float alpha, const float *x, float *y, int accumulate);
    /* mask[i] = (rng_hash_uniform(seed, i) >= p) ? 1.0f/(1.0f-p) : 0 ; 0 <= p < 1;
     * computed in float exactly so: every backend gives the same bits. */
    void (*dropout_mask)(size_t n, float p, uint64_t seed, float *mask);
    /* Optional (NULL: masks only from a host seed): dropout_mask with the
     * seed rng_hash_dropout_seed(*step_at, node_index), *step_at read when the op
     * runs (in stream order), so a recorded step draws each replay's mask
     * from the value the host wrote before launching it; step_at is device
     * memory. The same bits as dropout_mask with that seed. */
    void (*dropout_mask_at)(size_t n, float p, const uint64_t *step_at, uint64_t node_index, float *mask);

    /* ---- channel slices, for concat and channel padding ----
     * For each n < N: dst[n, dst_off : dst_off+C, :] (+)= src[n, src_off : src_off+C, :]
     * where src has src_C channels and dst has dst_C channels of HW values
     * each, in ctx's layout. */
    void (*channel_copy)(const backend_ctx *ctx, int N, int C, int HW, const void *src, int src_C, int src_off,
                         void *dst, int dst_C, int dst_off, int accumulate);

    /* ---- input ----
     * uint8 batches (data.batch_dtype = uint8): y[n, c, p] = lut[c][x[n, p, c]]
     * for n < N, c < C, p < HW, where x holds N images of HW pixels of C
     * interleaved bytes (HWC, as decoded) and lut, C rows of 256 floats (the
     * loader's normalisation table: (v / 255 - mean) / std), is a device
     * array; y is fp32 NCHW, what the net's input is. So the batch crosses
     * to the device as a quarter of the bytes and becomes exactly the floats
     * the loader's float path makes. */
    void (*normalize_u8)(int N, int C, int HW, const uint8_t *x, const float *lut, float *y);

    /* ---- loss ----
     * Softmax cross-entropy with label smoothing s over logits[N, K], labels[N]
     * (a device int array, values in [0, K)). Target per row: (1-s) one-hot + s/K.
     * Writes the mean loss over the batch to loss[0] (device float) and
     * dlogits[N, K] = (softmax - target) / N (the gradient of that mean). */
    void (*softmax_xent)(int N, int K, const float *logits, const int *labels, float smoothing,
                         float *loss, float *dlogits);

    /* ---- optimizer ----
     * SGD with momentum (PyTorch's form) over n values:
     *   g = grad_scale * grad + weight_decay * param
     *   buf = momentum * buf + g          (buf starts at zero)
     *   step = nesterov ? g + momentum * buf : buf
     *   param -= lr * step
     * With momentum == 0 buf is untouched (it may be NULL) and step = g.
     * lr_at: NULL, or a device float holding the rate, read when the update
     * runs instead of lr (a recorded step, capture_begin, reads the rate of
     * each replay). scale_at: NULL, or a device float s (LARS's trust ratio,
     * lars_trust) that multiplies g: g = s * (grad_scale * grad +
     * weight_decay * param), rounded once more. */
    void (*sgd_update)(size_t n, float *param, const float *grad, float *momentum_buf, float lr,
                       float momentum, float weight_decay, int nesterov, float grad_scale, const float *lr_at,
                       const float *scale_at);
    /* out[0] = sum of a[i]^2, out[1] = sum of b[i]^2 over i < n (out: two
     * device floats), each accumulated in double in an order fixed by n
     * alone, then rounded to float: the same values give the same bits on
     * every call, on every rank and with any number of threads. */
    void (*sumsq2)(size_t n, const float *a, const float *b, float *out);
    /* LARS's trust ratios (You et al. 2017) of k tensors from their sumsq2
     * pairs (sums[2r]: the parameters', sums[2r + 1]: the gradient's, before
     * grad_scale), in double, rounded to float:
     *   w = sqrt(sums[2r]), g = grad_scale * sqrt(sums[2r + 1])
     *   trust[r] = w > 0 && g > 0 ? eta * w / (g + weight_decay * w) : 1
     * sums and trust are device arrays of 2k and k floats. */
    void (*lars_trust)(int k, const float *sums, float eta, float weight_decay, float grad_scale, float *trust);
    /* PowerSGD's two steps that are not GEMMs (dist/powersgd.h), fp32.
     * lowrank_orthonormalise: the r columns of P (rows x r, row-major, a
     * device array) made orthonormal in order by Gram-Schmidt: each column
     * less its projections on the ones before, dot products and norms summed
     * in double and rounded to float before use, then scaled to unit norm (a
     * column with nothing left, norm 0, becomes 0). lowrank_redraw: each row
     * k < r of Qt (r x cols) whose values are all 0 refilled with
     * rng_hash_normal_inline(seed, k * cols + j) (common/rng_hash.h). */
    void (*lowrank_orthonormalise)(int rows, int r, float *P);
    void (*lowrank_redraw)(int r, int cols, float *Qt, uint64_t seed);

    /* ---- recorded steps (optional, all or none; NULL: every op runs as it
     * is called, the CPU's way) ----
     * capture_begin: from here the ops' device work is recorded instead of
     * run; no op before capture_end may wait for the device, allocate or free
     * (an op that would is fatal, saying so). capture_end: the recording as a
     * replayable graph, or NULL with the reason in why. graph_launch: the
     * graph's work again, queued in order with every other op, on the same
     * buffers and with the same arguments (what changes between replays must
     * be read from device memory: sgd_update's lr_at). graph_free: once the
     * work queued has finished. memory_epoch: a count that changes whenever
     * the backend frees or replaces a buffer a recording may point at (its
     * scratch, the convolutions' workspace): a graph recorded under another
     * count must not be launched (record it again). */
    void (*capture_begin)(void);
    void *(*capture_end)(char *why, size_t len);
    void (*graph_launch)(void *graph);
    void (*graph_free)(void *graph);
    uint64_t (*memory_epoch)(void);

    /* ---- threads (CPU); no-op elsewhere. n <= 0 means all cores. ---- */
    void (*set_threads)(int n);

    /* ---- overflow check (dynamic loss scaling) ----
     * found[0] = 1.0f when any of x[0, n) is +-inf or NaN; otherwise found is
     * left as it was, so one flag can collect several arrays. found is a
     * device float. */
    void (*find_nonfinite)(size_t n, const float *x, float *found);

    /* ---- math modes ----
     * Optional (NULL: every mode runs; call it through backend_math_check):
     * CNT_ERR with a message naming the device and what to use instead when
     * the backend cannot run math mode `math` (bf16 on a GPU before Ampere),
     * CNT_OK otherwise. */
    int (*math_check)(int math);

    /* ---- activation layouts (see backend_ctx) ---- */
    /* Converts between NCHW and `layout` (any layout the backend has, named
     * here rather than by a context): with to_layout, dst in `layout` (+)=
     * src in NCHW; otherwise dst in NCHW (+)= src in `layout` (NCHW to NCHW
     * copies or adds). src holds values of type src_type, dst of dst_type
     * (backend_dtype, each one of act_types; narrowing rounds as backend_dtype
     * says), so it also converts types (the net's fp32 input to its 16-bit
     * activations, its 16-bit logits to fp32). src and dst do not overlap. */
    void (*convert_layout)(int N, int C, int HW, const void *src, int src_type, void *dst, int dst_type, int layout,
                           int to_layout, int accumulate);
    /* BACKEND_LAYOUT_BLOCKED's channel block (8 or 16, what the CPU's vector
     * width suits); 0 when the backend has no blocked layout (a context
     * must not name it then: backend_layout_check). */
    int block_c;

    /* The most values one activation tensor (a layer's output for a whole
     * batch, or the input) may hold; 0: no limit. cuDNN's tensor
     * descriptors count in 32-bit ints, so the CUDA backend's is 2^31 - 1:
     * VGG-16's first convolutions at 224x224 reach it at batch 669.
     * net_finalize refuses a max_batch that passes it, naming the layer and
     * the largest batch that fits. */
    size_t max_tensor_values;

    /* ---- ordering against other threads and libraries ----
     * A GPU backend queues every op above on one compute stream, issued by one
     * thread (the training thread). These let another thread (the reducer's
     * communication thread) or another library (NCCL) order itself against
     * that stream. On the CPU, where ops finish before they return, they are
     * plain copies and no-ops. */
    void *(*native_stream)(void);      /* the compute stream (a cudaStream_t, never the legacy default
                                        * stream, so never NULL on a GPU); NULL on the CPU */
    void *(*fence_create)(void);       /* never NULL */
    void (*fence_destroy)(void *fence);
    /* Marks the ops issued so far on the compute stream (training thread). */
    void (*fence_record)(void *fence);
    /* From any thread: copies device to host once the ops before the fence's
     * last record have finished, without waiting for ops issued after it;
     * returns when the copy is done. */
    void (*download_fenced)(void *host_dst, const void *src, size_t bytes, void *fence);
    /* From any thread: copies host to device and returns when the copy is
     * done, so compute ops issued after it returns see the data. It does not
     * wait for the compute stream: the caller makes sure no queued op reads or
     * writes dst meanwhile. */
    void (*upload_sync)(void *dst, const void *host_src, size_t bytes);
    /* Host waits until the ops before the fence's last record have finished
     * (at once for a fence never recorded). */
    void (*fence_wait)(void *fence);

    /* ---- timing marks (trainer --profile) ----
     * Optional: NULL where ops finish before they return (the CPU), whose
     * host clock times them. mark_create: a mark (fatal on failure);
     * mark_record: places it on the compute stream after the ops issued so
     * far, without waiting; mark_elapsed_ms(a, b): the device's time from
     * mark a to mark b in ms, both recorded, waiting until b has passed. */
    void *(*mark_create)(void);
    void (*mark_destroy)(void *mark); /* NULL is fine */
    void (*mark_record)(void *mark);
    double (*mark_elapsed_ms)(void *a, void *b);

    /* ---- input on a copy stream (train/stager.c) ----
     * host_alloc: page-locked memory on GPUs, so copies from it run as DMA
     * beside compute; plain memory on the CPU; fatal on failure. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *ptr);
    /* Queues a host-to-device copy on the copy stream: after the ops before
     * fence `after`'s last record (NULL: no wait), then, when `done` is not
     * NULL, records `done` after the copy and makes the compute stream's later
     * ops wait for it. host_src (from host_alloc) must stay unchanged until
     * `done` has passed (fence_wait); compute ops must not use dst between
     * `after` and `done`. On the CPU a plain copy. */
    void (*upload_async)(void *dst, const void *host_src, size_t bytes, void *after, void *done);

    /* ---- memory planning: a run's estimate before it allocates (train/memory.c) ----
     * mem_info: the bytes alloc() can still hand out (*free_bytes) and the
     * size of the memory they come from (*total_bytes): on a GPU,
     * cudaMemGetInfo's free and total bytes of the device (shared by every
     * process on it); on the CPU, whose device memory is host memory,
     * hostmem_query's (common/hostmem.h). Both 0 when unknown. Never fails. */
    void (*mem_info)(size_t *free_bytes, size_t *total_bytes);
    /* Bytes of scratch the backend keeps once a convolution of shape p (its N
     * included) has run forward, backward-data and backward-filter in ctx's
     * math mode and layout and the current thread count: the buffers it
     * grows to their largest use and keeps for later calls (the CPU's
     * per-thread im2col, output and weight-gradient partials; the 16-bit
     * operand copies in bf16/fp16; NHWC copies). Buffers are shared by every
     * layer (whatever its context), so a process needs the largest of its
     * layers' values, not their sum. cuDNN's own
     * workspace is not counted: the CUDA backend sizes it to the limit or
     * half of what is free, whichever is less, when it chooses algorithms.
     * Allocates nothing; never fails. */
    size_t (*conv_workspace)(const backend_ctx *ctx, const conv_params *p);
    /* The same for gemm with C [M, N] and inner dimension K (dense
     * operands) in ctx's math mode and activation type, `act` naming the
     * operands that are activations as gemm's does: the 16-bit operand
     * copies in bf16/fp16, fp32 copies of 16-bit activations, 0 otherwise. */
    size_t (*gemm_workspace)(const backend_ctx *ctx, int M, int N, int K, unsigned act);
} backend;

/* gemm's `act`: which operands are activations (stored in ctx->act). */
#define GEMM_ACT_A 1u
#define GEMM_ACT_B 2u
#define GEMM_ACT_C 4u

/* Which backend a run asks for (train.device). */
typedef enum backend_device {
    BACKEND_DEVICE_AUTO, /* a GPU when one was built in and is usable, else the CPU */
    BACKEND_DEVICE_CPU,
    BACKEND_DEVICE_CUDA
} backend_device;

/* The layout a net uses on backend be in math mode `math` for input images
 * of image_h x image_w pixels: the one asked for, and for
 * BACKEND_LAYOUT_AUTO the one that suits them: BLOCKED where the backend has
 * it (the CPU with oneDNN), NHWC where convolutions run on tensor cores (a GPU
 * in tf32, bf16 or fp16, where cuDNN would transpose NCHW operands for them)
 * but for tf32 on images with a side under BACKEND_NHWC_TF32_MIN_PX, NCHW elsewhere (the
 * measurements behind it: backend_registry.c). The one place that rule lives. */
#define BACKEND_NHWC_TF32_MIN_PX 64
backend_layout backend_layout_choose(backend_layout requested, const backend *be, backend_math math, int image_h,
                                     int image_w);
/* CNT_ERR with a message naming the backend when it cannot run `requested`
 * (BLOCKED on a backend without one); CNT_OK otherwise. */
int backend_layout_check(backend_layout requested, const backend *be);
/* "nchw", "nhwc", "blocked" (nChw8c/nChw16c as be has it when be is not NULL), "auto". */
const char *backend_layout_name(backend_layout layout, const backend *be);

/* The CPU backend (always built): OpenBLAS for NCHW and NHWC, and with
 * oneDNN built in, the BLOCKED layout on oneDNN. */
const backend *backend_cpu(void);

/* The backend for `device` (BACKEND_DEVICE_AUTO picks a GPU backend when one
 * was built in and a device is usable, else the CPU). Returns NULL and sets an
 * error message when the named backend was not built in or has no device. */
const backend *backend_get(backend_device device);
/* backend_get for one rank of a job: GPU backends take device
 * local_rank % (devices on this node), so ranks of one node spread over its
 * GPUs (several ranks share one when there are more ranks than GPUs). */
const backend *backend_get_for_rank(backend_device device, int local_rank);
/* Writes one line per usable GPU ("cuda:0 NAME, N GiB, compute X.Y") or the
 * reason there is none; returns the number of usable GPUs. */
int backend_describe_devices(char *buf, size_t len);
/* Space-separated names of the backends compiled into this binary. */
const char *backend_list_built(void);
/* `trainer --version`: a line per compute library built in (OpenBLAS, oneDNN,
 * the CUDA runtime, cuDNN, cuBLAS) appended to buf: the version loaded, the
 * headers' version built with, the file it was loaded from. Needs no GPU. */
void backend_libraries(char *buf, size_t len);

/* ---- the context and the optional ops (model/backend.c) ---- */

/* A number for backend_ctx.weights_epoch that no earlier call returned in
 * this process, never 0 (thread-safe). Never fails. */
uint64_t backend_epoch_new(void);
/* CNT_ERR with a message naming the device when be cannot run math mode
 * `math` (be->math_check); CNT_OK otherwise, and for every mode of a backend
 * without math_check. */
int backend_math_check(const backend *be, backend_math math);
/* CNT_ERR with a message naming the backend when it cannot store
 * activations of type t (backend.act_types); CNT_OK otherwise. */
int backend_act_check(const backend *be, backend_dtype t);
/* "fp32", "bf16", "fp16". */
const char *backend_dtype_name(backend_dtype t);
/* The activation type a net on be in math mode `math` stores when left to
 * choose (train.activations = auto): the 16-bit type of bf16 and fp16 math
 * where be takes it by default (act_auto), fp32 otherwise. The one place
 * that rule lives. */
backend_dtype backend_act_choose(const backend *be, backend_math math);
/* be->conv_filter_kept, or 0 where the backend keeps nothing. Never fails. */
size_t backend_conv_filter_kept(const backend *be, const backend_ctx *ctx, const conv_params *p);
/* be->plans_export: the length of the text (0, "" in buf, where the backend
 * has no such op); be->plans_import, or -1 with a reason where it has none. */
size_t backend_plans_export(const backend *be, char *buf, size_t len);
int backend_plans_import(const backend *be, const char *text, char *why, size_t len);
/* be->pci_bus_id: 1 with the id in buf, or 0 ("" in buf) where the backend
 * has no PCI device. */
int backend_pci_bus_id(const backend *be, char *buf, size_t len);
/* be->conv_describe, or the backend's name where it has none. */
void backend_conv_describe(const backend *be, const backend_ctx *ctx, const conv_params *p, char *buf, size_t len);
/* be->bn_act_*, or where the backend lacks them the composition that
 * defines them (bn_*, then add, then relu_*; backward: relu_bwd, add or copy
 * into dz, bn_bwd). Arguments as the ops'; the training forward clears
 * keep->written before the op. */
void backend_bn_act_fwd_train(const backend *be, const backend_ctx *ctx, int N, int C, int HW, const void *x,
                              const void *z, int relu, const float *gamma, const float *beta, void *y,
                              float *running_mean, float *running_var, float momentum, float eps, float *save_mean,
                              float *save_invstd, fwd_keep *keep);
void backend_bn_act_fwd_infer(const backend *be, const backend_ctx *ctx, int N, int C, int HW, const void *x,
                              const void *z, int relu, const float *gamma, const float *beta, void *y,
                              const float *running_mean, const float *running_var, float eps);
void backend_bn_act_bwd(const backend *be, const backend_ctx *ctx, int N, int C, int HW, const void *x,
                        const void *y, void *dy, int relu, const float *gamma, const float *beta,
                        const float *save_mean, const float *save_invstd, float eps, void *dx, float *dgamma,
                        float *dbeta, int accumulate_dx, void *dz, int accumulate_dz, const fwd_keep *keep);
/* The composition alone (backend_bn_act_bwd without be->bn_act_bwd), for a
 * backend whose fused backward cannot run on its arguments. */
void backend_bn_act_bwd_composed(const backend *be, const backend_ctx *ctx, int N, int C, int HW, const void *x,
                                 const void *y, void *dy, int relu, const float *gamma, const float *save_mean,
                                 const float *save_invstd, float eps, void *dx, float *dgamma, float *dbeta,
                                 int accumulate_dx, void *dz, int accumulate_dz);
/* be->bn_act_keep_bytes, or 0. Never fails. */
size_t backend_bn_act_keep_bytes(const backend *be, const backend_ctx *ctx, int N, int C, int HW, int add, int relu);
/* be->pool_fwd with keep->written cleared first (keep may be NULL); a
 * training forward's call. */
void backend_pool_fwd_train(const backend *be, const backend_ctx *ctx, const pool_params *p, const void *x, void *y,
                            fwd_keep *keep);
/* be->pool_keep_bytes, or 0. Never fails. */
size_t backend_pool_keep_bytes(const backend *be, const backend_ctx *ctx, const pool_params *p);

#endif
