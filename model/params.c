/*
 * model/params.c - geometry helpers shared by every backend.
 */
#include "model/backend.h"
#include "common/check.h"

int conv_params_init(conv_params *p) {
    if (p->R <= 0 || p->S <= 0 || p->stride_h <= 0 || p->stride_w <= 0 || p->pad_h < 0 || p->pad_w < 0)
        return cnt_err_set("convolution: bad kernel %dx%d, stride %dx%d or padding %dx%d", p->R, p->S,
                           p->stride_h, p->stride_w, p->pad_h, p->pad_w);
    p->P = (p->H + 2 * p->pad_h - p->R) / p->stride_h + 1;
    p->Q = (p->W + 2 * p->pad_w - p->S) / p->stride_w + 1;
    if (p->H + 2 * p->pad_h < p->R || p->W + 2 * p->pad_w < p->S || p->P <= 0 || p->Q <= 0)
        return cnt_err_set("convolution: input %dx%d too small for a %dx%d kernel with padding %dx%d",
                           p->H, p->W, p->R, p->S, p->pad_h, p->pad_w);
    return CNT_OK;
}

static int pool_out(int in, int k, int s, int pad, int ceil_mode) {
    int num = in + 2 * pad - k;
    if (num < 0) return 0;
    int out = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
    /* torch: the last window must start inside the input or the left padding */
    if (ceil_mode && (out - 1) * s >= in + pad) out--;
    return out;
}

int pool_params_init(pool_params *p) {
    if (p->mode == POOL_MODE_ADAPTIVE_AVG) {
        if (p->P <= 0 || p->Q <= 0) return cnt_err_set("adaptive pooling: bad output size %dx%d", p->P, p->Q);
        return CNT_OK;
    }
    if (p->R <= 0 || p->S <= 0 || p->stride_h <= 0 || p->stride_w <= 0 || p->pad_h < 0 || p->pad_w < 0 ||
        2 * p->pad_h > p->R || 2 * p->pad_w > p->S)
        return cnt_err_set("pooling: bad window %dx%d, stride %dx%d or padding %dx%d", p->R, p->S, p->stride_h,
                           p->stride_w, p->pad_h, p->pad_w);
    p->P = pool_out(p->H, p->R, p->stride_h, p->pad_h, p->ceil_mode);
    p->Q = pool_out(p->W, p->S, p->stride_w, p->pad_w, p->ceil_mode);
    if (p->P <= 0 || p->Q <= 0)
        return cnt_err_set("pooling: input %dx%d too small for a %dx%d window", p->H, p->W, p->R, p->S);
    return CNT_OK;
}
