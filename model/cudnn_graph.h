/*
 * model/cudnn_graph.h - convolutions through cuDNN's backend ("graph") API
 * (cudnn_graph.h), behind train.conv_api = graph in the CUDA backend: each
 * pass of each shape is an operation graph of one convolution node, cuDNN's
 * heuristics (mode A) list engine configurations, those whose numerical
 * notes the math mode rules out are dropped, the rest are finalised into
 * execution plans (cuDNN refuses some: dropped), each within the workspace
 * limit is timed on the layer's own inputs, and the fastest is kept for the
 * run. This is what PyTorch's cudnn.benchmark does through cudnn-frontend;
 * the legacy calls (cudnnFind*Ex) see a subset of these engines.
 *
 * Engines compiled at finalisation (behaviour note RUNTIME_COMPILATION,
 * through NVRTC: seconds each, for every shape, every run) are left out, as
 * are configurations that say they need more workspace than the limit.
 *
 * Math modes (model/backend.h), by the engines' numerical notes: every mode
 * drops DOWN_CONVERT_INPUTS (fp32 data computed in fp16) and
 * REDUCED_PRECISION_REDUCTION (16-bit accumulation); BACKEND_MATH_FP32 also
 * drops TENSOR_CORE (which TF32 engines carry), as the legacy path admits
 * only FMA kernels there, and WINOGRAD_TILE_13x13 (errors far above fp32's).
 *
 * Internal to model/ (the CUDA backend's); compiled with it only. Not
 * thread-safe: the backend's compute thread only. Every cuDNN failure while
 * a plan is made is an answer (no plan: the caller keeps its legacy call);
 * a failure to execute a plan that was made is fatal, with the call and
 * cuDNN's message.
 */
#ifndef CNT_CUDNN_GRAPH_H
#define CNT_CUDNN_GRAPH_H

#include <cuda_runtime.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cg_pass {
    CG_FWD = 0,        /* y = conv(x, w) (+ beta y) */
    CG_BWD_DATA = 1,   /* dx (the x slot) = conv^T(dy (the y slot), w) (+ beta dx) */
    CG_BWD_FILTER = 2  /* dw (the w slot) = x (*) dy (the y slot) (+ beta dw) */
} cg_pass;

/* One convolution as cuDNN sees it: x [N, C, H, W], w [K, C, R, S], y
 * [N, K, P, Q] (dimensions in that order whatever the layout); nhwc: the
 * tensors lie as [N, H, W, C] and the filter as [K, R, S, C], else as
 * written. Dilation 1, one group, cross-correlation, fp32 compute. */
typedef struct cg_conv {
    int64_t n, c, h, w, k, r, s, p, q;
    int64_t pad_h, pad_w, stride_h, stride_w;
    int nhwc;
    cudnnDataType_t type; /* of x, w and y */
    int math;             /* BACKEND_MATH_*: which engines qualify */
} cg_conv;

typedef struct cg_plan cg_plan;

/* What cg_plan_make needs from the backend: a workspace of at least `bytes`
 * (the backend's, grown; valid until the next call), and an output-sized
 * buffer the timing runs write instead of the real output. */
typedef struct cg_env {
    cudnnHandle_t handle;
    cudaStream_t stream; /* the handle's */
    size_t ws_limit;     /* the most workspace a plan may take */
    void *(*workspace)(size_t bytes);
    void *scratch_out;   /* the output's bytes: where timing runs write */
} cg_env;

/* The fastest qualifying plan of `pass` for cv with output blend beta (0 or
 * 1), timed on x, w, y (the pass's inputs among them; its output slot is
 * replaced by env->scratch_out while timing, so nothing the caller holds is
 * written). NULL where none qualifies or cuDNN cannot describe the graph,
 * with the reason in why (len bytes). */
cg_plan *cg_plan_make(const cg_env *env, const cg_conv *cv, cg_pass pass, float beta, const void *x, const void *w,
                      const void *y, char *why, size_t len);
/* The plan cg_plan_make chose on an earlier run or another rank, made again
 * without timing: configuration `index` of the heuristics' list for cv's
 * pass and blend, which must be engine `engine`, admitted by the rules
 * above, finalised by cuDNN, within the workspace limit, and run once on x,
 * w, y (as cg_plan_make's timing: the output slot in env->scratch_out);
 * NULL otherwise, with the reason in why (the caller then searches with
 * cg_plan_make). */
cg_plan *cg_plan_take(const cg_env *env, const cg_conv *cv, cg_pass pass, float beta, int index, int64_t engine,
                      const void *x, const void *w, const void *y, char *why, size_t len);
/* What identifies pl for cg_plan_take: its configuration's place in the
 * heuristics' list and its engine's global index. */
void cg_plan_choice(const cg_plan *pl, int *index, int64_t *engine);
/* For probes (tools/probes/cudnn_caps): how many engine configurations the
 * heuristics offer for cv's pass (*offered) and how many of them cv's math
 * mode admits and cuDNN finalises (*qualified); the first failure's status
 * (counts 0 then). Runs nothing. */
cudnnStatus_t cg_count(cudnnHandle_t h, const cg_conv *cv, cg_pass pass, int *offered, int *qualified);
/* The workspace the plan needs. */
size_t cg_plan_workspace(const cg_plan *pl);
/* Runs the plan on x, w, y (roles as cg_pass says) with workspace ws (at
 * least cg_plan_workspace bytes). Every pointer 16-byte aligned (the
 * alignment the tensors were described with): cg_aligned says. */
void cg_execute(cudnnHandle_t h, const cg_plan *pl, const void *x, const void *w, const void *y, void *ws);
int cg_aligned(const void *x, const void *w, const void *y);
/* "graph engine 12 (of 31 qualifying, 40 offered), 0.34 ms, workspace 4.0 MiB" for profiles. */
void cg_describe(const cg_plan *pl, char *buf, size_t len);
void cg_plan_free(cg_plan *pl);

#endif
