/*
 * model/backend.c - what every backend shares besides its table: the
 * weights epochs of backend_ctx, and the wrappers through which callers reach
 * the optional ops (ggml's pattern: the op where the backend has it, else a
 * fallback with the same result), so no caller tests an op's pointer.
 */
#include "model/backend.h"
#include "common/check.h"

#include <stdatomic.h>
#include <stdio.h>

uint64_t backend_epoch_new(void) {
    /* from any thread: one atomic counter for the process, so no two spans
     * (of any two nets) share a number, and 0 is never handed out */
    static atomic_uint_fast64_t last;
    return (uint64_t)atomic_fetch_add(&last, 1) + 1;
}

int backend_math_check(const backend *be, backend_math math) {
    CNT_ASSERT(math == BACKEND_MATH_FP32 || math == BACKEND_MATH_TF32 || math == BACKEND_MATH_BF16 ||
               math == BACKEND_MATH_FP16);
    return be->math_check ? be->math_check(math) : CNT_OK;
}

int backend_act_check(const backend *be, backend_dtype t) {
    CNT_ASSERT(t == BACKEND_DTYPE_FP32 || t == BACKEND_DTYPE_BF16 || t == BACKEND_DTYPE_FP16);
    if (be->act_types & (1u << t)) return CNT_OK;
    return cnt_err_set("backend '%s' cannot store activations in %s yet: set train.activations = fp32", be->name,
                       backend_dtype_name(t));
}

const char *backend_dtype_name(backend_dtype t) {
    switch (t) {
    case BACKEND_DTYPE_FP32: return "fp32";
    case BACKEND_DTYPE_BF16: return "bf16";
    case BACKEND_DTYPE_FP16: return "fp16";
    }
    return "?";
}

backend_dtype backend_act_choose(const backend *be, backend_math math) {
    backend_dtype t = math == BACKEND_MATH_BF16   ? BACKEND_DTYPE_BF16
                      : math == BACKEND_MATH_FP16 ? BACKEND_DTYPE_FP16
                                                  : BACKEND_DTYPE_FP32;
    return be->act_auto & (1u << t) ? t : BACKEND_DTYPE_FP32;
}

size_t backend_conv_filter_kept(const backend *be, const backend_ctx *ctx, const conv_params *p) {
    return be->conv_filter_kept ? be->conv_filter_kept(ctx, p) : 0;
}


size_t backend_plans_export(const backend *be, char *buf, size_t len) {
    if (len) buf[0] = '\0';
    return be->plans_export ? be->plans_export(buf, len) : 0;
}

int backend_plans_import(const backend *be, const char *text, char *why, size_t len) {
    if (why && len) why[0] = '\0';
    if (!be->plans_import) {
        if (why) snprintf(why, len, "the %s backend keeps no convolution plans", be->name);
        return -1;
    }
    return be->plans_import(text, why, len);
}

int backend_pci_bus_id(const backend *be, char *buf, size_t len) {
    if (!len) return 0;
    buf[0] = '\0';
    if (be->pci_bus_id && be->pci_bus_id(buf, len)) return 1;
    buf[0] = '\0';
    return 0;
}

void backend_conv_describe(const backend *be, const backend_ctx *ctx, const conv_params *p, char *buf, size_t len) {
    if (!len) return;
    buf[0] = '\0';
    if (be->conv_describe) be->conv_describe(ctx, p, buf, len);
    else snprintf(buf, len, "%s", be->name);
}

void backend_bn_act_fwd_train(const backend *be, const backend_ctx *ctx, int N, int C, int HW, const void *x,
                              const void *z, int relu, const float *gamma, const float *beta, void *y,
                              float *running_mean, float *running_var, float momentum, float eps, float *save_mean,
                              float *save_invstd, fwd_keep *keep) {
    if (keep) keep->written = 0;
    if (be->bn_act_fwd_train) {
        be->bn_act_fwd_train(ctx, N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, momentum, eps,
                             save_mean, save_invstd, keep);
        return;
    }
    be->bn_fwd_train(ctx, N, C, HW, x, gamma, beta, y, running_mean, running_var, momentum, eps, save_mean,
                     save_invstd);
    size_t n = (size_t)N * C * HW;
    if (z) be->add(ctx, n, y, z, y);
    if (relu) be->relu_fwd(ctx, n, y, y);
}

void backend_bn_act_fwd_infer(const backend *be, const backend_ctx *ctx, int N, int C, int HW, const void *x,
                              const void *z, int relu, const float *gamma, const float *beta, void *y,
                              const float *running_mean, const float *running_var, float eps) {
    if (be->bn_act_fwd_infer) {
        be->bn_act_fwd_infer(ctx, N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, eps);
        return;
    }
    be->bn_fwd_infer(ctx, N, C, HW, x, gamma, beta, y, running_mean, running_var, eps);
    size_t n = (size_t)N * C * HW;
    if (z) be->add(ctx, n, y, z, y);
    if (relu) be->relu_fwd(ctx, n, y, y);
}

void backend_bn_act_bwd(const backend *be, const backend_ctx *ctx, int N, int C, int HW, const void *x,
                        const void *y, void *dy, int relu, const float *gamma, const float *beta,
                        const float *save_mean, const float *save_invstd, float eps, void *dx, float *dgamma,
                        float *dbeta, int accumulate_dx, void *dz, int accumulate_dz, const fwd_keep *keep) {
    if (be->bn_act_bwd) {
        be->bn_act_bwd(ctx, N, C, HW, x, y, dy, relu, gamma, beta, save_mean, save_invstd, eps, dx, dgamma, dbeta,
                       accumulate_dx, dz, accumulate_dz, keep);
        return;
    }
    backend_bn_act_bwd_composed(be, ctx, N, C, HW, x, y, dy, relu, gamma, save_mean, save_invstd, eps, dx, dgamma,
                                dbeta, accumulate_dx, dz, accumulate_dz);
}

void backend_bn_act_bwd_composed(const backend *be, const backend_ctx *ctx, int N, int C, int HW, const void *x,
                                 const void *y, void *dy, int relu, const float *gamma, const float *save_mean,
                                 const float *save_invstd, float eps, void *dx, float *dgamma, float *dbeta,
                                 int accumulate_dx, void *dz, int accumulate_dz) {
    size_t n = (size_t)N * C * HW;
    const void *g = dy;
    if (relu && dz && !accumulate_dz) {
        be->relu_bwd(ctx, n, y, dy, dz, 0); /* g straight into dz, which then is g */
        g = dz;
    } else {
        if (relu) be->relu_bwd(ctx, n, y, dy, dy, 0); /* g in place */
        if (dz && accumulate_dz) be->add(ctx, n, dy, dz, dz);
        else if (dz && dz != dy) be->copy(dz, dy, n * backend_dtype_size(ctx->act));
    }
    be->bn_bwd(ctx, N, C, HW, x, g, gamma, save_mean, save_invstd, eps, dx, dgamma, dbeta, accumulate_dx);
}

size_t backend_bn_act_keep_bytes(const backend *be, const backend_ctx *ctx, int N, int C, int HW, int add, int relu) {
    return be->bn_act_keep_bytes ? be->bn_act_keep_bytes(ctx, N, C, HW, add, relu) : 0;
}

void backend_pool_fwd_train(const backend *be, const backend_ctx *ctx, const pool_params *p, const void *x, void *y,
                            fwd_keep *keep) {
    if (keep) keep->written = 0;
    be->pool_fwd(ctx, p, x, y, keep);
}

size_t backend_pool_keep_bytes(const backend *be, const backend_ctx *ctx, const pool_params *p) {
    return be->pool_keep_bytes ? be->pool_keep_bytes(ctx, p) : 0;
}
