/*
 * model/cuda_kernels.h - the CUDA kernels of ours that the CUDA backend
 * (model/backend_cuda.c) launches for what cuDNN and cuBLAS lack.
 *
 * Each launcher queues its kernel(s) on `stream` and returns
 * cudaGetLastError(), which the caller checks with CUDA_CHECK, so a failed
 * launch is reported at the op that made it. Semantics are exactly those of
 * the op of the same name in model/backend.h (and of model/backend_cpu.c):
 * where the CPU fixes a summation order (pooling backward, softmax loss), so
 * do these, which makes them deterministic run to run.
 */
#ifndef CNT_CUDA_KERNELS_H
#define CNT_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "model/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cudaSuccess when this build has kernels the current device can run (else
 * cudaErrorNoKernelImageForDevice or similar); launches nothing. */
cudaError_t cuk_probe(void);
/* ---- activations ----
 * `type` is the backend_dtype the activation operands (void *) hold: each
 * kernel reads them as floats, computes in float and rounds what it stores
 * once (model/backend.h, backend_dtype); in fp32 the same bits as float
 * kernels. Other operands are fp32. */
cudaError_t cuk_relu_fwd(cudaStream_t s, int type, size_t n, const void *x, void *y);
cudaError_t cuk_relu_bwd(cudaStream_t s, int type, size_t n, const void *y, const void *dy, void *dx,
                         int accumulate);
cudaError_t cuk_add(cudaStream_t s, int type, size_t n, const void *a, const void *b, void *y);
cudaError_t cuk_mul(cudaStream_t s, int type, size_t n, const void *a, const float *b, void *y, int accumulate);
cudaError_t cuk_axpy(cudaStream_t s, size_t n, float alpha, const float *x, float *y, int accumulate);
/* dst[0, n) = src[0, n), n <= CUK_SMALL_UPLOAD bytes from host memory, as a
 * kernel's argument: in stream order, with nothing staged (a pageable
 * cudaMemcpyAsync may wait for the stream to stage its copy); src may be
 * reused at once. For the values a step writes before it runs (its rate,
 * its dropout seed). */
#define CUK_SMALL_UPLOAD 64
cudaError_t cuk_upload_small(cudaStream_t s, void *dst, const void *src, size_t n);
cudaError_t cuk_dropout_mask(cudaStream_t s, size_t n, float p, uint64_t seed, float *mask);
/* The same, its seed rng_hash_dropout_seed(*step_at, node_index) read on the device. */
cudaError_t cuk_dropout_mask_at(cudaStream_t s, size_t n, float p, const uint64_t *step_at, uint64_t node_index,
                                float *mask);
/* ---- layout-sensitive ops ----
 * `nhwc` 0: tensors [N, C, HW] (NCHW); 1: [N, HW, C] (NHWC, channels
 * innermost), element (n, c, i) at (n*HW + i)*C + c. With HW == 1 the two are
 * the same bytes. */
cudaError_t cuk_channel_copy(cudaStream_t s, int type, int N, int C, int HW, const void *src, int src_C,
                             int src_off, void *dst, int dst_C, int dst_off, int accumulate, int nhwc);
cudaError_t cuk_bias_fwd(cudaStream_t s, int type, int N, int C, int HW, const float *b, void *y, int nhwc);
/* Batch norm of a batch with one value per channel (N * HW == 1), which
 * cuDNN refuses: the CPU backend's rule (mean = the value, variance 0). */
cudaError_t cuk_bn_single_fwd(cudaStream_t s, int C, const float *x, const float *gamma, const float *beta, float *y,
                              float *running_mean, float *running_var, float momentum, float eps, float *save_mean,
                              float *save_invstd);
cudaError_t cuk_bn_single_bwd(cudaStream_t s, int C, const float *dy, float *dx, float *dgamma, float *dbeta,
                              int accumulate);
/* partial: scratch of cuk_bias_bwd_scratch(N, C, HW) doubles */
size_t cuk_bias_bwd_scratch(int N, int C, int HW);
/* db[c] = sum of dy over n and i, in double, in an order fixed by the shape
 * (two passes, no atomics) */
cudaError_t cuk_bias_bwd(cudaStream_t s, int type, int N, int C, int HW, const void *dy, float *db,
                         double *partial, int nhwc);
/* x, y, dx, dy all of backend_dtype `type` and in the layout `nhwc` says;
 * the values (and, for the same layout, the bits) are those of the CPU
 * backend's NCHW rules, each computed in fp32 and rounded once to the type */
/* With arg (may be NULL; max pooling only), the position of each output's
 * first maximum too (model/pool_rules.h), cuk_pool_arg_bytes(p) of it. */
cudaError_t cuk_pool_fwd(cudaStream_t s, int type, const pool_params *p, const void *x, void *y, int nhwc,
                         void *arg);
/* The bytes of max pooling's positions of maxima for p (p->N images); 0 for
 * the other modes. */
size_t cuk_pool_arg_bytes(const pool_params *p);
/* Max pooling reads the positions of the maxima from kept (cuk_pool_fwd's
 * arg for this x) or, where kept is NULL, first finds them (pr_argmax_one)
 * into scratch (cuk_pool_arg_bytes(p)); the other modes read neither. */
cudaError_t cuk_pool_bwd(cudaStream_t s, int type, const pool_params *p, const void *x, const void *dy, void *dx,
                         int accumulate, int nhwc, const void *kept, void *scratch);
/* Layout conversion of N images of C x HW values (backend.h's
 * convert_layout with NHWC): with to_nhwc dst[(n*HW + i)*C + c] (+)= src[(n*C + c)*HW
 * + i], else dst[(n*C + c)*HW + i] (+)= src[(n*HW + i)*C + c]. Also turns
 * [K, C, R, S] filters into [K, R, S, C] (N = K, HW = R*S) and back. src and
 * dst must not overlap. */
cudaError_t cuk_transpose_layout(cudaStream_t s, int N, int C, int HW, const float *src, float *dst, int to_nhwc,
                                 int accumulate);
/* backend.h's convert_layout between NCHW and NHWC (nhwc 1) or NCHW (nhwc 0:
 * a copy), src of type src_type and dst of dst_type (backend_dtype): the
 * transpose above with the types converted on the way (rounded once, after
 * accumulate). */
cudaError_t cuk_convert_layout(cudaStream_t s, int N, int C, int HW, const void *src, int src_type, void *dst,
                               int dst_type, int nhwc, int to_nhwc, int accumulate);
/* row_loss: scratch of N doubles */
/* model/backend.h's normalize_u8. */
cudaError_t cuk_normalize_u8(cudaStream_t s, int N, int C, int HW, const uint8_t *x, const float *lut, float *y);
cudaError_t cuk_softmax_xent(cudaStream_t s, int N, int K, const float *logits, const int *labels,
                             float smoothing, float *loss, float *dlogits, double *row_loss);
/* lr_at: NULL, or a device float the kernel reads the rate from instead of
 * lr; scale_at: NULL, or a device float multiplying the step (LARS) */
cudaError_t cuk_sgd_update(cudaStream_t s, size_t n, float *param, const float *grad, float *momentum_buf,
                           float lr, float momentum, float weight_decay, int nesterov, float grad_scale,
                           const float *lr_at, const float *scale_at);
/* model/backend.h's sumsq2; partial: device scratch of 2 * CUK_SUMSQ2_BLOCKS doubles */
#define CUK_SUMSQ2_BLOCKS 512
cudaError_t cuk_sumsq2(cudaStream_t s, size_t n, const float *a, const float *b, float *out, double *partial);
/* model/backend.h's lars_trust */
cudaError_t cuk_lars_trust(cudaStream_t s, int k, const float *sums, float eta, float weight_decay,
                           float grad_scale, float *trust);

/* model/backend.h's lowrank_orthonormalise and lowrank_redraw (PowerSGD) */
cudaError_t cuk_lowrank_orthonormalise(cudaStream_t s, int rows, int r, float *P);
cudaError_t cuk_lowrank_redraw(cudaStream_t s, int r, int cols, float *Qt, uint64_t seed);

/* ---- 16-bit copies for the reduced-precision math modes ----
 * `math` is BACKEND_MATH_FP16 (IEEE half) or BACKEND_MATH_BF16 (bfloat16);
 * any other value launches nothing and returns cudaErrorInvalidValue. `h`
 * holds n 2-byte values of that type (void * so that C callers need no
 * cuda_fp16.h). Rounding is to nearest even, as common/half.h's fp16_round
 * and bf16_round: fp16 magnitudes that round above 65504 become inf. */
/* h[i] = round(x[i]) */
cudaError_t cuk_narrow(cudaStream_t s, int math, size_t n, const float *x, void *h);
/* y[i] = float(h[i]); with accumulate y[i] = float(round(y[i] + float(h[i]))) */
cudaError_t cuk_widen(cudaStream_t s, int math, size_t n, const void *h, float *y, int accumulate);
/* y[r * ld + c] = float(round(y[r * ld + c])) for r < rows, c < cols: a
 * row-major matrix rounded in place, the padding up to ld untouched. */
cudaError_t cuk_round_narrow(cudaStream_t s, int math, size_t rows, size_t cols, size_t ld, float *y);

/* found[0] = 1.0f when any of x[0, n) is inf or NaN, else found untouched. */
cudaError_t cuk_find_nonfinite(cudaStream_t s, size_t n, const float *x, float *found);

#ifdef __cplusplus
}
#endif

#endif
