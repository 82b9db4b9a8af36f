/*
 * tools/probes/cudnn_caps.c - what this GPU's cuDNN offers the CUDA
 * backend's 16-bit and fused paths (issue 30), asked of the library itself
 * rather than read from its documentation, which differs by version:
 *
 *   - batch norm, training forward and backward, on NHWC tensors of each
 *     data type (fp32, fp16, bf16) with fp32 statistics, in
 *     SPATIAL_PERSISTENT mode: alone, with ReLU, and with the residual add
 *     and ReLU (cudnnBatchNormalization*Ex, the fused operations): each run
 *     once on a small tensor, so "yes" means it ran, not only that the
 *     workspace query answered;
 *   - the plain SPATIAL calls on the same tensors (what model/backend_cuda.c
 *     falls back to);
 *   - the graph API (cudnn_graph.h), through the builder train.conv_api =
 *     graph runs (model/cudnn_graph.c): how many engine configurations its
 *     heuristics (mode A) offer for each pass of a 3x3 convolution of each
 *     data type in NHWC with fp32 accumulation, and how many of them the
 *     math mode admits and cuDNN finalises; 0 or an error means none.
 *
 *   build/tools/cudnn_caps [DEVICE]
 *
 * One line per question: "yes", or "no (" and cuDNN's own status string ")".
 * Exits 0 when it could ask (whatever the answers), 1 when there is no
 * usable GPU or a CUDA call fails (the message says which). Built with the
 * CUDA backend (make); tools/dev/gpu_check.sh runs it first.
 */
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/backend.h"
#include "model/cudnn_graph.h"

#define CUDA_OR_EXIT(call)                                                                                   \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "cudnn_caps: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* The first failing status of a sequence of cuDNN calls. */
#define TRY(st, call)                                  \
    do {                                               \
        if ((st) == CUDNN_STATUS_SUCCESS) (st) = (call); \
    } while (0)

static const struct {
    const char *name;
    cudnnDataType_t type;
    size_t size;
} types[] = {{"fp32", CUDNN_DATA_FLOAT, 4}, {"fp16", CUDNN_DATA_HALF, 2}, {"bf16", CUDNN_DATA_BFLOAT16, 2}};

static void answer(const char *what, const char *type, cudnnStatus_t st) {
    if (st == CUDNN_STATUS_SUCCESS) printf("%-58s %-5s yes\n", what, type);
    else printf("%-58s %-5s no (%s)\n", what, type, cudnnGetErrorString(st));
}

/* Batch norm on [N, C, H, W] = [8, 64, 14, 14] in NHWC of type t: forward
 * training with ops (and, when backward, its backward), mode as given. */
static cudnnStatus_t bn_run(cudnnHandle_t h, cudnnDataType_t t, size_t tsize, cudnnBatchNormMode_t mode,
                            cudnnBatchNormOps_t ops, int backward, int ex) {
    const int N = 8, C = 64, H = 14, W = 14;
    const size_t n = (size_t)N * C * H * W;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    cudnnTensorDescriptor_t x = NULL, p = NULL;
    cudnnActivationDescriptor_t act = NULL;
    void *buf[6] = {0};
    float *vec = NULL;
    size_t ws_bytes = 0, reserve = 0;
    void *ws = NULL, *rs = NULL;
    const float one = 1.0f, zero = 0.0f;
    TRY(st, cudnnCreateTensorDescriptor(&x));
    TRY(st, cudnnCreateTensorDescriptor(&p));
    TRY(st, cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, t, N, C, H, W));
    TRY(st, cudnnSetTensor4dDescriptor(p, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, C, 1, 1));
    if (ops != CUDNN_BATCHNORM_OPS_BN) {
        TRY(st, cudnnCreateActivationDescriptor(&act));
        TRY(st, cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    }
    for (int i = 0; i < 6; i++) CUDA_OR_EXIT(cudaMalloc(&buf[i], n * tsize)); /* x, y, z, dy, dx, dz */
    CUDA_OR_EXIT(cudaMalloc((void **)&vec, 8 * (size_t)C * sizeof(float)));
    CUDA_OR_EXIT(cudaMemset(buf[0], 0, n * tsize));
    CUDA_OR_EXIT(cudaMemset(vec, 0, 8 * (size_t)C * sizeof(float)));
    cudnnTensorDescriptor_t z = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? x : NULL;
    float *gamma = vec, *beta = vec + C, *rm = vec + 2 * C, *rv = vec + 3 * C, *sm = vec + 4 * C, *si = vec + 5 * C,
          *dg = vec + 6 * C, *db = vec + 7 * C;
    if (ex) {
        TRY(st, cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, mode, ops, x, z, x, p, act, &ws_bytes));
        TRY(st, cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, mode, ops, act, x, &reserve));
        if (st == CUDNN_STATUS_SUCCESS && ws_bytes) CUDA_OR_EXIT(cudaMalloc(&ws, ws_bytes));
        if (st == CUDNN_STATUS_SUCCESS && reserve) CUDA_OR_EXIT(cudaMalloc(&rs, reserve));
        TRY(st, cudnnBatchNormalizationForwardTrainingEx(h, mode, ops, &one, &zero, x, buf[0], z, z ? buf[2] : NULL, x,
                                                         buf[1], p, gamma, beta, 0.1, rm, rv, 1e-5, sm, si, act, ws,
                                                         ws_bytes, rs, reserve));
        if (backward) {
            size_t bws = 0;
            void *bw = NULL;
            TRY(st, cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, mode, ops, x, act ? x : NULL, x, z, x, p,
                                                                      act, &bws));
            if (st == CUDNN_STATUS_SUCCESS && bws) CUDA_OR_EXIT(cudaMalloc(&bw, bws));
            TRY(st, cudnnBatchNormalizationBackwardEx(h, mode, ops, &one, &zero, &one, &zero, x, buf[0],
                                                      act ? x : NULL, act ? buf[1] : NULL, x, buf[3], z,
                                                      z ? buf[5] : NULL, x, buf[4], p, gamma, beta, dg, db, 1e-5, sm,
                                                      si, act, bw, bws, rs, reserve));
            cudaFree(bw);
        }
    } else {
        TRY(st, cudnnBatchNormalizationForwardTraining(h, mode, &one, &zero, x, buf[0], x, buf[1], p, gamma, beta, 0.1,
                                                       rm, rv, 1e-5, sm, si));
        if (backward)
            TRY(st, cudnnBatchNormalizationBackward(h, mode, &one, &zero, &one, &zero, x, buf[0], x, buf[3], x, buf[4],
                                                    p, gamma, dg, db, 1e-5, sm, si));
    }
    CUDA_OR_EXIT(cudaDeviceSynchronize());
    for (int i = 0; i < 6; i++) cudaFree(buf[i]);
    cudaFree(vec);
    cudaFree(ws);
    cudaFree(rs);
    if (act) cudnnDestroyActivationDescriptor(act);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(p);
    return st;
}

/* ---- the graph API: model/cudnn_graph.c's own graph builder (cg_count), so
 * these lines also check the code train.conv_api = graph runs ---- */

/* Each pass of a 3x3 convolution [32, 64, 28, 28] -> [32, 64, 28, 28] in
 * NHWC of type t, in math mode `math`: the heuristics' engine
 * configurations, and those the mode admits and cuDNN finalises. */
static void graph_counts(cudnnHandle_t h, const char *type_name, cudnnDataType_t t, int math, const char *math_name) {
    static const char *passes[] = {"forward", "data gradient", "weight gradient"};
    cg_conv cv = {.n = 32, .c = 64, .h = 28, .w = 28, .k = 64, .r = 3, .s = 3, .p = 28, .q = 28, .pad_h = 1,
                  .pad_w = 1, .stride_h = 1, .stride_w = 1, .nhwc = 1, .type = t, .math = math};
    for (int k = 0; k < 3; k++) {
        int offered = 0, qualified = 0;
        cudnnStatus_t st = cg_count(h, &cv, (cg_pass)k, &offered, &qualified);
        char what[96];
        snprintf(what, sizeof what, "graph API: 3x3 convolution %s, NHWC, %s math", passes[k], math_name);
        if (st == CUDNN_STATUS_SUCCESS)
            printf("%-58s %-5s %d engine configurations, %d qualify\n", what, type_name, offered, qualified);
        else
            answer(what, type_name, st);
    }
}

int main(int argc, char **argv) {
    int dev = argc > 1 ? atoi(argv[1]) : 0, n = 0;
    CUDA_OR_EXIT(cudaGetDeviceCount(&n));
    if (dev < 0 || dev >= n) {
        fprintf(stderr, "cudnn_caps: no GPU %d (%d usable)\n", dev, n);
        return 1;
    }
    CUDA_OR_EXIT(cudaSetDevice(dev));
    struct cudaDeviceProp prop;
    CUDA_OR_EXIT(cudaGetDeviceProperties(&prop, dev));
    cudnnHandle_t h;
    cudnnStatus_t st = cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "cudnn_caps: cudnnCreate: %s\n", cudnnGetErrorString(st));
        return 1;
    }
    printf("cuda:%d %s (compute %d.%d), cuDNN %zu\n", dev, prop.name, prop.major, prop.minor, cudnnGetVersion());
    static const struct {
        const char *what;
        cudnnBatchNormOps_t ops;
    } fused[] = {{"batch norm", CUDNN_BATCHNORM_OPS_BN},
                 {"batch norm + ReLU", CUDNN_BATCHNORM_OPS_BN_ACTIVATION},
                 {"batch norm + add + ReLU", CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION}};
    char what[96];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        for (size_t f = 0; f < sizeof fused / sizeof fused[0]; f++)
            for (int bwd = 0; bwd < 2; bwd++) {
                snprintf(what, sizeof what, "%s, NHWC persistent Ex, %s", fused[f].what,
                         bwd ? "forward and backward" : "forward");
                answer(what, types[k].name,
                       bn_run(h, types[k].type, types[k].size, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, fused[f].ops, bwd, 1));
            }
        answer("batch norm, NHWC plain SPATIAL, forward and backward", types[k].name,
               bn_run(h, types[k].type, types[k].size, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, 1, 0));
        if (types[k].type == CUDNN_DATA_FLOAT) {
            graph_counts(h, types[k].name, types[k].type, BACKEND_MATH_FP32, "fp32");
            graph_counts(h, types[k].name, types[k].type, BACKEND_MATH_TF32, "tf32");
        } else {
            graph_counts(h, types[k].name, types[k].type,
                         types[k].type == CUDNN_DATA_HALF ? BACKEND_MATH_FP16 : BACKEND_MATH_BF16, types[k].name);
        }
    }
    cudnnDestroy(h);
    return 0;
}
