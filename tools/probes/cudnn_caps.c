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
 *   - the graph API (cudnn_graph.h): how many engine configurations its
 *     heuristics (mode A) offer for a 3x3 convolution forward of each data
 *     type in NHWC with fp32 accumulation; 0 or an error means none.
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

/* ---- the graph API ---- */

static cudnnStatus_t set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                              cudnnBackendAttributeType_t type, int64_t count, const void *value) {
    return cudnnBackendSetAttribute(d, name, type, count, value);
}

/* A finalized tensor descriptor [N, C, H, W] in NHWC strides. */
static cudnnStatus_t graph_tensor(cudnnBackendDescriptor_t *d, cudnnDataType_t t, const int64_t *dims, int64_t uid) {
    int64_t strides[4] = {dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]}, align = 16;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, d);
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t));
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    TRY(st, cudnnBackendFinalize(*d));
    return st;
}

/* Engine configurations the heuristics offer for y = conv3x3(x, w) of type t,
 * [32, 64, 28, 28] -> [32, 64, 28, 28], fp32 accumulation; *count = 0 when none. */
static cudnnStatus_t graph_conv_engines(cudnnHandle_t h, cudnnDataType_t t, int64_t *count) {
    const int64_t xd[4] = {32, 64, 28, 28}, wd[4] = {64, 64, 3, 3}, yd[4] = {32, 64, 28, 28};
    const int64_t two = 2, pad[2] = {1, 1}, one2[2] = {1, 1};
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
    const float alpha = 1.0f, beta = 0.0f;
    cudnnBackendDescriptor_t x = NULL, w = NULL, y = NULL, conv = NULL, op = NULL, graph = NULL, heur = NULL;
    *count = 0;
    cudnnStatus_t st = graph_tensor(&x, t, xd, 1);
    TRY(st, graph_tensor(&w, t, wd, 2));
    TRY(st, graph_tensor(&y, t, yd, 3));
    TRY(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    TRY(st, cudnnBackendFinalize(conv));
    TRY(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op));
    TRY(st, set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    TRY(st, set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    TRY(st, set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    TRY(st, set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    TRY(st, set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    TRY(st, set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    TRY(st, cudnnBackendFinalize(op));
    TRY(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
    TRY(st, set_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    TRY(st, set_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    TRY(st, cudnnBackendFinalize(graph));
    TRY(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    TRY(st, set_attr(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    TRY(st, set_attr(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode));
    TRY(st, cudnnBackendFinalize(heur));
    /* with no array given, the attribute's element count comes back */
    TRY(st, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, count,
                                     NULL));
    cudnnBackendDescriptor_t all[] = {heur, graph, op, conv, y, w, x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) cudnnBackendDestroyDescriptor(all[i]);
    return st;
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
        int64_t engines = 0;
        st = graph_conv_engines(h, types[k].type, &engines);
        if (st == CUDNN_STATUS_SUCCESS)
            printf("%-58s %-5s %lld engine configurations\n", "graph API: 3x3 convolution forward, NHWC",
                   types[k].name, (long long)engines);
        else
            answer("graph API: 3x3 convolution forward, NHWC", types[k].name, st);
    }
    cudnnDestroy(h);
    return 0;
}
