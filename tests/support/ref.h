/*
 * tests/support/ref.h - the naive reference of every op in model/backend.h.
 *
 * Provides one ref_<op>() per backend op, with the same arguments and the same
 * semantics as documented in model/backend.h, but on host arrays of DOUBLE and
 * written as the direct loops of the definition: this file is the executable
 * specification that every backend is tested against, and its backward ops are
 * themselves checked against finite differences (tests/test_gradcheck.c).
 *
 * Conventions (as in backend.h): dense NCHW tensors, filters [K, C, R, S],
 * row-major GEMM; `accumulate` 0 overwrites the output, 1 adds to it; weight
 * gradients are always overwritten. Scalars that backends receive as float are
 * double here, except the dropout probability, kept float so the keep/drop
 * decision compares exactly the same two floats a backend compares.
 *
 * Errors: none at run time. Shapes must be consistent (P, Q filled by
 * conv_params_init / pool_params_init, or set by the caller for adaptive
 * pooling); an inconsistent argument is a programming error in the test and
 * ends the process through CNT_ASSERT.
 */
#ifndef CNT_TEST_REF_H
#define CNT_TEST_REF_H

#include <stddef.h>
#include <stdint.h>

#include "model/backend.h"

/* ---- convolution ---- */
/* y[N,K,P,Q] = sum_{c,r,s} x[n, c, p*sh - ph + r, q*sw - pw + s] * w[k,c,r,s] (zero outside x) */
void ref_conv_fwd(const conv_params *p, const double *x, const double *w, double *y);
/* dx[N,C,H,W] (+)= the adjoint of ref_conv_fwd with respect to x, applied to dy[N,K,P,Q] */
void ref_conv_bwd_data(const conv_params *p, const double *dy, const double *w, double *dx, int accumulate);
/* dw[K,C,R,S] = the adjoint of ref_conv_fwd with respect to w, applied to dy (overwritten) */
void ref_conv_bwd_filter(const conv_params *p, const double *x, const double *dy, double *dw);

/* ---- per-channel bias on [N, C, HW] ---- */
/* y[n,c,i] += b[c] */
void ref_bias_fwd(int N, int C, int HW, const double *b, double *y);
/* db[c] = sum_{n,i} dy[n,c,i] (overwritten) */
void ref_bias_bwd(int N, int C, int HW, const double *dy, double *db);

/* ---- batch norm over [N, C, HW], statistics per channel over M = N*HW values ---- */
/* Batch mean and biased variance normalise x; save_mean[C], save_invstd[C] =
 * 1/sqrt(var+eps); running_mean/var = (1-momentum)*r + momentum*batch with the
 * unbiased variance var*M/(M-1). M must be at least 2 (PyTorch refuses M == 1). */
void ref_bn_fwd_train(int N, int C, int HW, const double *x, const double *gamma, const double *beta, double *y,
                      double *running_mean, double *running_var, double momentum, double eps, double *save_mean,
                      double *save_invstd);
/* y = gamma*(x-running_mean)/sqrt(running_var+eps) + beta */
void ref_bn_fwd_infer(int N, int C, int HW, const double *x, const double *gamma, const double *beta, double *y,
                      const double *running_mean, const double *running_var, double eps);
/* Gradients of ref_bn_fwd_train (batch statistics depend on x): dgamma, dbeta
 * overwritten, dx (+)=. save_mean/save_invstd are the forward's. */
void ref_bn_bwd(int N, int C, int HW, const double *x, const double *dy, const double *gamma,
                const double *save_mean, const double *save_invstd, double *dx, double *dgamma, double *dbeta,
                int accumulate_dx);

/* ---- pooling (torch semantics, see pool_mode in backend.h) ---- */
void ref_pool_fwd(const pool_params *p, const double *x, double *y);
/* dx (+)= gradient. Max pooling routes each dy to the first maximum of its
 * window in x, scanning r then s; y is unused by the reference (kept for the
 * backend's signature). */
void ref_pool_bwd(const pool_params *p, const double *x, const double *y, const double *dy, double *dx,
                  int accumulate);

/* ---- GEMM, row-major: C = alpha * op(A) * op(B) + beta * C ----
 * op(A) [M, K], op(B) [K, N], C [M, N]; lda/ldb/ldc are the stored row strides.
 * beta == 0 ignores C's previous contents (BLAS rule). */
void ref_gemm(int trans_a, int trans_b, int M, int N, int K, double alpha, const double *A, int lda,
              const double *B, int ldb, double beta, double *C, int ldc);

/* ---- elementwise ---- */
void ref_relu_fwd(size_t n, const double *x, double *y);
/* dx (+)= dy * (y > 0) */
void ref_relu_bwd(size_t n, const double *y, const double *dy, double *dx, int accumulate);
/* y = a + b */
void ref_add(size_t n, const double *a, const double *b, double *y);
/* y = alpha * x + (accumulate ? y : 0) */
void ref_axpy(size_t n, double alpha, const double *x, double *y, int accumulate);
/* y (+)= a * b */
void ref_mul(size_t n, const double *a, const double *b, double *y, int accumulate);
/* mask[i] = (rng_hash_uniform(seed, i) >= p) ? 1/(1-p) : 0, with 1/(1-p) in double; 0 <= p < 1 */
void ref_dropout_mask(size_t n, float p, uint64_t seed, double *mask);

/* ---- channel slices ----
 * dst[n, dst_off + c, i] (+)= src[n, src_off + c, i] for c < C, i < HW. */
void ref_channel_copy(int N, int C, int HW, const double *src, int src_C, int src_off, double *dst, int dst_C,
                      int dst_off, int accumulate);

/* ---- loss ----
 * Softmax cross-entropy with label smoothing s: target (1-s) one-hot + s/K;
 * *loss = mean over rows of -sum_k target_k log softmax_k; dlogits = (softmax - target) / N.
 * labels are host ints in [0, K). */
void ref_softmax_xent(int N, int K, const double *logits, const int *labels, double smoothing, double *loss,
                      double *dlogits);

/* ---- optimizer: SGD with momentum, PyTorch's form (see backend.h) ---- */
void ref_sgd_update(size_t n, double *param, const double *grad, double *momentum_buf, double lr, double momentum,
                    double weight_decay, int nesterov, double grad_scale);

#endif
