/*
 * tests/support/ref.c - the naive double-precision reference of the backend ops.
 *
 * Every function is the direct loop nest of its definition, written for a
 * reader to check against PyTorch's documentation, not for speed. Backward ops
 * are written as the adjoint of the forward loop (the same loop, scattering
 * instead of gathering), so the index arithmetic exists once per op in spirit.
 */
#include "tests/support/ref.h"

#include <math.h>

#include "common/check.h"
#include "common/rng.h"

/* ---------------------------------------------------------------- convolution */

void ref_conv_fwd(const conv_params *p, const double *x, const double *w, double *y) {
    CNT_ASSERT(p->P > 0 && p->Q > 0);
    for (int n = 0; n < p->N; n++)
        for (int k = 0; k < p->K; k++)
            for (int oh = 0; oh < p->P; oh++)
                for (int ow = 0; ow < p->Q; ow++) {
                    double sum = 0.0;
                    for (int c = 0; c < p->C; c++)
                        for (int r = 0; r < p->R; r++)
                            for (int s = 0; s < p->S; s++) {
                                int h = oh * p->stride_h - p->pad_h + r;
                                int wi = ow * p->stride_w - p->pad_w + s;
                                if (h < 0 || h >= p->H || wi < 0 || wi >= p->W) continue;
                                sum += x[(((size_t)n * p->C + c) * p->H + h) * p->W + wi] *
                                       w[(((size_t)k * p->C + c) * p->R + r) * p->S + s];
                            }
                    y[(((size_t)n * p->K + k) * p->P + oh) * p->Q + ow] = sum;
                }
}

void ref_conv_bwd_data(const conv_params *p, const double *dy, const double *w, double *dx, int accumulate) {
    CNT_ASSERT(p->P > 0 && p->Q > 0);
    size_t nx = (size_t)p->N * p->C * p->H * p->W;
    if (!accumulate)
        for (size_t i = 0; i < nx; i++) dx[i] = 0.0;
    for (int n = 0; n < p->N; n++)
        for (int k = 0; k < p->K; k++)
            for (int oh = 0; oh < p->P; oh++)
                for (int ow = 0; ow < p->Q; ow++) {
                    double g = dy[(((size_t)n * p->K + k) * p->P + oh) * p->Q + ow];
                    for (int c = 0; c < p->C; c++)
                        for (int r = 0; r < p->R; r++)
                            for (int s = 0; s < p->S; s++) {
                                int h = oh * p->stride_h - p->pad_h + r;
                                int wi = ow * p->stride_w - p->pad_w + s;
                                if (h < 0 || h >= p->H || wi < 0 || wi >= p->W) continue;
                                dx[(((size_t)n * p->C + c) * p->H + h) * p->W + wi] +=
                                    g * w[(((size_t)k * p->C + c) * p->R + r) * p->S + s];
                            }
                }
}

void ref_conv_bwd_filter(const conv_params *p, const double *x, const double *dy, double *dw) {
    CNT_ASSERT(p->P > 0 && p->Q > 0);
    size_t nw = (size_t)p->K * p->C * p->R * p->S;
    for (size_t i = 0; i < nw; i++) dw[i] = 0.0;
    for (int n = 0; n < p->N; n++)
        for (int k = 0; k < p->K; k++)
            for (int oh = 0; oh < p->P; oh++)
                for (int ow = 0; ow < p->Q; ow++) {
                    double g = dy[(((size_t)n * p->K + k) * p->P + oh) * p->Q + ow];
                    for (int c = 0; c < p->C; c++)
                        for (int r = 0; r < p->R; r++)
                            for (int s = 0; s < p->S; s++) {
                                int h = oh * p->stride_h - p->pad_h + r;
                                int wi = ow * p->stride_w - p->pad_w + s;
                                if (h < 0 || h >= p->H || wi < 0 || wi >= p->W) continue;
                                dw[(((size_t)k * p->C + c) * p->R + r) * p->S + s] +=
                                    g * x[(((size_t)n * p->C + c) * p->H + h) * p->W + wi];
                            }
                }
}

/* ---------------------------------------------------------------- bias */

void ref_bias_fwd(int N, int C, int HW, const double *b, double *y) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) y[((size_t)n * C + c) * HW + i] += b[c];
}

void ref_bias_bwd(int N, int C, int HW, const double *dy, double *db) {
    for (int c = 0; c < C; c++) {
        double sum = 0.0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) sum += dy[((size_t)n * C + c) * HW + i];
        db[c] = sum;
    }
}

/* ---------------------------------------------------------------- batch norm */

void ref_bn_fwd_train(int N, int C, int HW, const double *x, const double *gamma, const double *beta, double *y,
                      double *running_mean, double *running_var, double momentum, double eps, double *save_mean,
                      double *save_invstd) {
    double M = (double)N * HW;
    CNT_ASSERT(M >= 2.0);
    for (int c = 0; c < C; c++) {
        double sum = 0.0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) sum += x[((size_t)n * C + c) * HW + i];
        double mean = sum / M;
        double sq = 0.0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                double d = x[((size_t)n * C + c) * HW + i] - mean;
                sq += d * d;
            }
        double var = sq / M;
        double invstd = 1.0 / sqrt(var + eps);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                y[j] = gamma[c] * (x[j] - mean) * invstd + beta[c];
            }
        save_mean[c] = mean;
        save_invstd[c] = invstd;
        running_mean[c] = (1.0 - momentum) * running_mean[c] + momentum * mean;
        running_var[c] = (1.0 - momentum) * running_var[c] + momentum * var * M / (M - 1.0);
    }
}

void ref_bn_fwd_infer(int N, int C, int HW, const double *x, const double *gamma, const double *beta, double *y,
                      const double *running_mean, const double *running_var, double eps) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                y[j] = gamma[c] * (x[j] - running_mean[c]) / sqrt(running_var[c] + eps) + beta[c];
            }
}

void ref_bn_bwd(int N, int C, int HW, const double *x, const double *dy, const double *gamma,
                const double *save_mean, const double *save_invstd, double *dx, double *dgamma, double *dbeta,
                int accumulate_dx) {
    /* y = gamma * xhat + beta, xhat = (x - mean) * invstd with batch mean/var:
     * dx = gamma * invstd / M * (M * dy - sum(dy) - xhat * sum(dy * xhat)). */
    double M = (double)N * HW;
    for (int c = 0; c < C; c++) {
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                double xhat = (x[j] - save_mean[c]) * save_invstd[c];
                sum_dy += dy[j];
                sum_dy_xhat += dy[j] * xhat;
            }
        dgamma[c] = sum_dy_xhat;
        dbeta[c] = sum_dy;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                double xhat = (x[j] - save_mean[c]) * save_invstd[c];
                double g = gamma[c] * save_invstd[c] / M * (M * dy[j] - sum_dy - xhat * sum_dy_xhat);
                dx[j] = accumulate_dx ? dx[j] + g : g;
            }
    }
}

/* ---------------------------------------------------------------- pooling */

/* The window of output (oh, ow), clipped to the real input: rows [h0, h1),
 * columns [w0, w1); *divisor is what an average divides by in this mode. */
static void pool_window(const pool_params *p, int oh, int ow, int *h0, int *h1, int *w0, int *w1, int *divisor) {
    if (p->mode == POOL_MODE_ADAPTIVE_AVG) {
        /* torch: start = floor(i*H/P), end = ceil((i+1)*H/P) */
        *h0 = (int)(((long)oh * p->H) / p->P);
        *h1 = (int)(((long)(oh + 1) * p->H + p->P - 1) / p->P);
        *w0 = (int)(((long)ow * p->W) / p->Q);
        *w1 = (int)(((long)(ow + 1) * p->W + p->Q - 1) / p->Q);
        *divisor = (*h1 - *h0) * (*w1 - *w0);
        return;
    }
    int hs = oh * p->stride_h - p->pad_h;
    int ws = ow * p->stride_w - p->pad_w;
    /* the window clipped to the padded input (ceil_mode can run past it) */
    int he = hs + p->R < p->H + p->pad_h ? hs + p->R : p->H + p->pad_h;
    int we = ws + p->S < p->W + p->pad_w ? ws + p->S : p->W + p->pad_w;
    int padded_count = (he - hs) * (we - ws);
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = he > p->H ? p->H : he;
    *w1 = we > p->W ? p->W : we;
    *divisor = p->mode == POOL_MODE_AVG_INCLUDE_PAD ? padded_count : (*h1 - *h0) * (*w1 - *w0);
}

void ref_pool_fwd(const pool_params *p, const double *x, double *y) {
    CNT_ASSERT(p->P > 0 && p->Q > 0);
    for (int n = 0; n < p->N; n++)
        for (int c = 0; c < p->C; c++) {
            const double *xc = x + ((size_t)n * p->C + c) * p->H * p->W;
            double *yc = y + ((size_t)n * p->C + c) * p->P * p->Q;
            for (int oh = 0; oh < p->P; oh++)
                for (int ow = 0; ow < p->Q; ow++) {
                    int h0, h1, w0, w1, divisor;
                    pool_window(p, oh, ow, &h0, &h1, &w0, &w1, &divisor);
                    CNT_ASSERT(h1 > h0 && w1 > w0);
                    double out;
                    if (p->mode == POOL_MODE_MAX) {
                        out = xc[(size_t)h0 * p->W + w0];
                        for (int h = h0; h < h1; h++)
                            for (int w = w0; w < w1; w++)
                                if (xc[(size_t)h * p->W + w] > out) out = xc[(size_t)h * p->W + w];
                    } else {
                        double sum = 0.0;
                        for (int h = h0; h < h1; h++)
                            for (int w = w0; w < w1; w++) sum += xc[(size_t)h * p->W + w];
                        out = sum / divisor;
                    }
                    yc[(size_t)oh * p->Q + ow] = out;
                }
        }
}

void ref_pool_bwd(const pool_params *p, const double *x, const double *y, const double *dy, double *dx,
                  int accumulate) {
    (void)y;
    CNT_ASSERT(p->P > 0 && p->Q > 0);
    size_t nx = (size_t)p->N * p->C * p->H * p->W;
    if (!accumulate)
        for (size_t i = 0; i < nx; i++) dx[i] = 0.0;
    for (int n = 0; n < p->N; n++)
        for (int c = 0; c < p->C; c++) {
            const double *xc = x + ((size_t)n * p->C + c) * p->H * p->W;
            double *dxc = dx + ((size_t)n * p->C + c) * p->H * p->W;
            const double *dyc = dy + ((size_t)n * p->C + c) * p->P * p->Q;
            for (int oh = 0; oh < p->P; oh++)
                for (int ow = 0; ow < p->Q; ow++) {
                    int h0, h1, w0, w1, divisor;
                    pool_window(p, oh, ow, &h0, &h1, &w0, &w1, &divisor);
                    double g = dyc[(size_t)oh * p->Q + ow];
                    if (p->mode == POOL_MODE_MAX) {
                        int best_h = h0, best_w = w0;
                        for (int h = h0; h < h1; h++)
                            for (int w = w0; w < w1; w++)
                                if (xc[(size_t)h * p->W + w] > xc[(size_t)best_h * p->W + best_w]) {
                                    best_h = h;
                                    best_w = w;
                                }
                        dxc[(size_t)best_h * p->W + best_w] += g;
                    } else {
                        for (int h = h0; h < h1; h++)
                            for (int w = w0; w < w1; w++) dxc[(size_t)h * p->W + w] += g / divisor;
                    }
                }
        }
}

/* ---------------------------------------------------------------- GEMM */

void ref_gemm(int trans_a, int trans_b, int M, int N, int K, double alpha, const double *A, int lda,
              const double *B, int ldb, double beta, double *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = 0.0;
            for (int l = 0; l < K; l++) {
                double a = trans_a ? A[(size_t)l * lda + i] : A[(size_t)i * lda + l];
                double b = trans_b ? B[(size_t)j * ldb + l] : B[(size_t)l * ldb + j];
                sum += a * b;
            }
            double *c = &C[(size_t)i * ldc + j];
            *c = beta == 0.0 ? alpha * sum : alpha * sum + beta * *c;
        }
}

/* ---------------------------------------------------------------- elementwise */

void ref_relu_fwd(size_t n, const double *x, double *y) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

void ref_relu_bwd(size_t n, const double *y, const double *dy, double *dx, int accumulate) {
    for (size_t i = 0; i < n; i++) {
        double g = y[i] > 0.0 ? dy[i] : 0.0;
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

void ref_add(size_t n, const double *a, const double *b, double *y) {
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void ref_axpy(size_t n, double alpha, const double *x, double *y, int accumulate) {
    for (size_t i = 0; i < n; i++) y[i] = alpha * x[i] + (accumulate ? y[i] : 0.0);
}

void ref_mul(size_t n, const double *a, const double *b, double *y, int accumulate) {
    for (size_t i = 0; i < n; i++) y[i] = a[i] * b[i] + (accumulate ? y[i] : 0.0);
}

void ref_dropout_mask(size_t n, float p, uint64_t seed, double *mask) {
    CNT_ASSERT(p >= 0.0f && p < 1.0f);
    for (size_t i = 0; i < n; i++) mask[i] = rng_hash_uniform(seed, i) >= p ? 1.0 / (1.0 - (double)p) : 0.0;
}

/* ---------------------------------------------------------------- channel slices */

void ref_channel_copy(int N, int C, int HW, const double *src, int src_C, int src_off, double *dst, int dst_C,
                      int dst_off, int accumulate) {
    CNT_ASSERT(src_off >= 0 && src_off + C <= src_C && dst_off >= 0 && dst_off + C <= dst_C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) {
                double v = src[((size_t)n * src_C + src_off + c) * HW + i];
                double *d = &dst[((size_t)n * dst_C + dst_off + c) * HW + i];
                *d = accumulate ? *d + v : v;
            }
}

/* ---------------------------------------------------------------- loss */

void ref_softmax_xent(int N, int K, const double *logits, const int *labels, double smoothing, double *loss,
                      double *dlogits) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const double *z = logits + (size_t)n * K;
        CNT_ASSERT(labels[n] >= 0 && labels[n] < K);
        /* log softmax_k = z_k - max - log(sum_j exp(z_j - max)); the max keeps exp finite */
        double zmax = z[0];
        for (int k = 1; k < K; k++)
            if (z[k] > zmax) zmax = z[k];
        double sum_exp = 0.0;
        for (int k = 0; k < K; k++) sum_exp += exp(z[k] - zmax);
        double log_sum = log(sum_exp);
        for (int k = 0; k < K; k++) {
            double target = (k == labels[n] ? 1.0 - smoothing : 0.0) + smoothing / K;
            double log_softmax = z[k] - zmax - log_sum;
            total -= target * log_softmax;
            dlogits[(size_t)n * K + k] = (exp(log_softmax) - target) / N;
        }
    }
    *loss = total / N;
}

/* ---------------------------------------------------------------- optimizer */

void ref_sgd_update(size_t n, double *param, const double *grad, double *momentum_buf, double lr, double momentum,
                    double weight_decay, int nesterov, double grad_scale) {
    for (size_t i = 0; i < n; i++) {
        double g = grad_scale * grad[i] + weight_decay * param[i];
        double step = g;
        if (momentum != 0.0) {
            momentum_buf[i] = momentum * momentum_buf[i] + g;
            step = nesterov ? g + momentum * momentum_buf[i] : momentum_buf[i];
        }
        param[i] -= lr * step;
    }
}
