/*
 * model/layer_conv.c - convolution and linear (fully connected) layers.
 *
 * Both compute their weight gradient before their input gradient and call
 * layer_grads_ready() in between, so the reducer can send this layer's
 * gradients while the input gradient is still being computed.
 */
#include "model/layer.h"
#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- conv */

typedef struct conv_state {
    conv_params p;  /* N is set per call */
    int bias;
} conv_state;

static void conv_forward(net *nt, node *nd, int training) {
    (void)training;
    conv_state *s = nd->state;
    s->p.N = nt->batch;
    const void *x = layer_in(nt, nd, 0);
    nt->be->conv_fwd(&nt->ctx, &s->p, x, layer_param(nt, nd, 0), nd->y);
    if (s->bias) nt->be->bias_fwd(&nt->ctx, nt->batch, s->p.K, s->p.P * s->p.Q, layer_param(nt, nd, 1), nd->y);
}

static void conv_backward(net *nt, node *nd) {
    conv_state *s = nd->state;
    s->p.N = nt->batch;
    const void *x = layer_in(nt, nd, 0);
    nt->be->conv_bwd_filter(&nt->ctx, &s->p, x, nd->dy, layer_param_grad(nt, nd, 0));
    if (s->bias) nt->be->bias_bwd(&nt->ctx, nt->batch, s->p.K, s->p.P * s->p.Q, nd->dy, layer_param_grad(nt, nd, 1));
    layer_grads_ready(nt, nd);
    /* The network's input needs no gradient: skip the most expensive pass of the stem. */
    if (nd->inputs[0] == NET_INPUT) return;
    /* paired: the filter pass just read this dy, and nothing has written it since */
    nt->be->conv_bwd_data(&nt->ctx, &s->p, nd->dy, layer_param(nt, nd, 0), layer_in_grad(nt, nd, 0),
                          nd->accumulate[0], 1);
}

static double conv_flops(const net *nt, const node *nd) {
    (void)nt;
    const conv_state *s = nd->state;
    double out = (double)s->p.K * s->p.P * s->p.Q;
    return 2.0 * out * s->p.C * s->p.R * s->p.S + (s->bias ? out : 0.0);
}

static void conv_describe(const node *nd, char *buf, size_t len) {
    const conv_state *s = nd->state;
    if (s->p.stride_h == s->p.stride_w && s->p.pad_h == s->p.pad_w)
        snprintf(buf, len, "%dx%d/%d p%d%s", s->p.R, s->p.S, s->p.stride_h, s->p.pad_h, s->bias ? " +b" : "");
    else
        snprintf(buf, len, "%dx%d/%dx%d p%dx%d%s", s->p.R, s->p.S, s->p.stride_h, s->p.stride_w, s->p.pad_h,
                 s->p.pad_w, s->bias ? " +b" : "");
}

/* Nothing of its own; the backend's scratch for this shape at max_batch and
 * the filter form it keeps for the backward. */
static size_t conv_memory(const net *nt, const node *nd, int max_batch, size_t *workspace, size_t *kept) {
    conv_params p = ((const conv_state *)nd->state)->p;
    p.N = max_batch;
    *workspace = nt->be->conv_workspace(&nt->ctx, &p);
    *kept = backend_conv_filter_kept(nt->be, &nt->ctx, &p);
    return 0;
}

/* The backend's choices for this convolution at the last pass's batch. */
static void conv_runs(const net *nt, const node *nd, char *buf, size_t len) {
    conv_params p = ((const conv_state *)nd->state)->p;
    p.N = nt->batch;
    backend_conv_describe(nt->be, &nt->ctx, &p, buf, len);
}

static const layer_ops conv_ops = {
    .kind = "conv",
    .backward_reads = LAYER_READS_INPUTS, /* x for the weight gradient */
    .forward = conv_forward,
    .backward = conv_backward,
    .flops = conv_flops,
    .describe = conv_describe,
    .memory = conv_memory,
    .runs = conv_runs,
};

int net_conv_rect(net *nt, int in, const char *name, int K, int R, int S, int stride_h, int stride_w, int pad_h,
                  int pad_w, int bias) {
    if (layer_check_input(nt, in, name) != CNT_OK) return CNT_ERR;
    conv_state *s = cnt_calloc(1, sizeof *s);
    layer_input_shape(nt, in, &s->p.C, &s->p.H, &s->p.W);
    s->p.N = 1;
    s->p.K = K;
    s->p.R = R;
    s->p.S = S;
    s->p.stride_h = stride_h;
    s->p.stride_w = stride_w;
    s->p.pad_h = pad_h;
    s->p.pad_w = pad_w;
    s->bias = bias;
    if (K <= 0 || conv_params_init(&s->p) != CNT_OK) {
        if (K <= 0) cnt_err_set("convolution with %d filters", K);
        free(s);
        return layer_fail(nt, name);
    }
    int C = s->p.C, P = s->p.P, Q = s->p.Q;
    int idx = layer_add_node(nt, &conv_ops, name, &in, 1, K, P, Q, s);
    if (idx < 0) return CNT_ERR;
    int fan_in = C * R * S, fan_out = K * R * S;
    int w = layer_add_param(nt, idx, "weight", (size_t)K * C * R * S, fan_in, fan_out, 0,
                            (init_spec){INIT_KAIMING_NORMAL_FAN_OUT, 0});
    layer_set_param_shape(nt, w, 4, (const int[]){K, C, R, S});
    if (bias) layer_add_param(nt, idx, "bias", (size_t)K, fan_in, fan_out, 1, (init_spec){INIT_ZERO, 0});
    return idx;
}

int net_conv(net *nt, int in, const char *name, int K, int kernel, int stride, int pad, int bias) {
    return net_conv_rect(nt, in, name, K, kernel, kernel, stride, stride, pad, pad, bias);
}

/* ---------------------------------------------------------------- linear */

typedef struct linear_state {
    int in_features, out_features;
    int bias;
    int in_c, in_hw;   /* the input's channels and pixels: in_features = in_c * in_hw */
    void *xt, *dxt;    /* non-NCHW nets with in_hw > 1: [max_batch, in_features] activations, the input
                        * and its gradient in NCHW order (torchvision's flatten, which W's columns follow) */
} linear_state;

/* The flattened input [N, in] in NCHW order: the input itself, or in a non-NCHW
 * net with more than one pixel, its transposed copy. */
static const void *linear_input(net *nt, node *nd) {
    linear_state *s = nd->state;
    const void *x = layer_in(nt, nd, 0);
    if (!s->xt) return x;
    nt->be->convert_layout(nt->batch, s->in_c, s->in_hw, x, nt->ctx.act, s->xt, nt->ctx.act, nt->ctx.layout, 0, 0);
    return s->xt;
}

/* y[N, out] = x[N, in] * W[out, in]^T + b */
static void linear_forward(net *nt, node *nd, int training) {
    (void)training;
    linear_state *s = nd->state;
    const void *x = linear_input(nt, nd);
    nt->be->gemm(&nt->ctx, 0, 1, nt->batch, s->out_features, s->in_features, 1.0f, x, s->in_features,
                 layer_param(nt, nd, 0), s->in_features, 0.0f, nd->y, s->out_features, GEMM_ACT_A | GEMM_ACT_C);
    if (s->bias) nt->be->bias_fwd(&nt->ctx, nt->batch, s->out_features, 1, layer_param(nt, nd, 1), nd->y);
}

static void linear_backward(net *nt, node *nd) {
    linear_state *s = nd->state;
    const void *x = linear_input(nt, nd);
    /* dW[out, in] = dy^T[out, N] * x[N, in] */
    nt->be->gemm(&nt->ctx, 1, 0, s->out_features, s->in_features, nt->batch, 1.0f, nd->dy, s->out_features, x,
                 s->in_features, 0.0f, layer_param_grad(nt, nd, 0), s->in_features, GEMM_ACT_A | GEMM_ACT_B);
    if (s->bias) nt->be->bias_bwd(&nt->ctx, nt->batch, s->out_features, 1, nd->dy, layer_param_grad(nt, nd, 1));
    layer_grads_ready(nt, nd);
    if (nd->inputs[0] == NET_INPUT) return;
    /* dx[N, in] (+)= dy[N, out] * W[out, in] */
    if (s->dxt) {
        nt->be->gemm(&nt->ctx, 0, 0, nt->batch, s->in_features, s->out_features, 1.0f, nd->dy, s->out_features,
                     layer_param(nt, nd, 0), s->in_features, 0.0f, s->dxt, s->in_features, GEMM_ACT_A | GEMM_ACT_C);
        nt->be->convert_layout(nt->batch, s->in_c, s->in_hw, s->dxt, nt->ctx.act, layer_in_grad(nt, nd, 0),
                               nt->ctx.act, nt->ctx.layout, 1, nd->accumulate[0]);
        return;
    }
    nt->be->gemm(&nt->ctx, 0, 0, nt->batch, s->in_features, s->out_features, 1.0f, nd->dy, s->out_features,
                 layer_param(nt, nd, 0), s->in_features, nd->accumulate[0] ? 1.0f : 0.0f,
                 layer_in_grad(nt, nd, 0), s->in_features, GEMM_ACT_A | GEMM_ACT_C);
}

static void linear_setup(net *nt, node *nd) {
    linear_state *s = nd->state;
    if (nt->ctx.layout == BACKEND_LAYOUT_NCHW || s->in_hw == 1) return;
    size_t n = (size_t)nt->max_batch * s->in_features * layer_act_size(nt);
    s->xt = nt->be->alloc(n);
    s->dxt = nt->be->alloc(n);
}

static void linear_free(net *nt, node *nd) {
    linear_state *s = nd->state;
    nt->be->free(s->xt);
    nt->be->free(s->dxt);
}

/* linear_setup's copies; the backend's scratch for the largest of the three GEMMs. */
static size_t linear_memory(const net *nt, const node *nd, int max_batch, size_t *workspace, size_t *kept) {
    (void)kept; /* nothing kept */
    const linear_state *s = nd->state;
    const backend *be = nt->be;
    int in = s->in_features, out = s->out_features;
    const backend_ctx *ctx = &nt->ctx;
    size_t ws[3] = {be->gemm_workspace(ctx, max_batch, out, in, GEMM_ACT_A | GEMM_ACT_C),
                    be->gemm_workspace(ctx, out, in, max_batch, GEMM_ACT_A | GEMM_ACT_B),
                    be->gemm_workspace(ctx, max_batch, in, out, GEMM_ACT_A | GEMM_ACT_C)};
    *workspace = 0;
    for (int i = 0; i < 3; i++)
        if (ws[i] > *workspace) *workspace = ws[i];
    if (nt->ctx.layout == BACKEND_LAYOUT_NCHW || s->in_hw == 1) return 0;
    return 2 * (size_t)max_batch * in * layer_act_size(nt);
}

static double linear_flops(const net *nt, const node *nd) {
    (void)nt;
    const linear_state *s = nd->state;
    return 2.0 * s->in_features * s->out_features + (s->bias ? s->out_features : 0);
}

static void linear_describe(const node *nd, char *buf, size_t len) {
    const linear_state *s = nd->state;
    snprintf(buf, len, "%d -> %d%s", s->in_features, s->out_features, s->bias ? " +b" : "");
}

static const layer_ops linear_ops = {
    .kind = "linear",
    .backward_reads = LAYER_READS_INPUTS, /* x for the weight gradient */
    .forward = linear_forward,
    .backward = linear_backward,
    .flops = linear_flops,
    .describe = linear_describe,
    .setup = linear_setup,
    .free_state = linear_free,
    .memory = linear_memory,
};

int net_linear(net *nt, int in, const char *name, int out_features, int bias) {
    if (layer_check_input(nt, in, name) != CNT_OK) return CNT_ERR;
    if (out_features <= 0) {
        cnt_err_set("linear layer with %d outputs", out_features);
        return layer_fail(nt, name);
    }
    int C, H, W;
    layer_input_shape(nt, in, &C, &H, &W);
    linear_state *s = cnt_calloc(1, sizeof *s);
    s->in_features = C * H * W;
    s->in_c = C;
    s->in_hw = H * W;
    s->out_features = out_features;
    s->bias = bias;
    int idx = layer_add_node(nt, &linear_ops, name, &in, 1, out_features, 1, 1, s);
    if (idx < 0) return CNT_ERR;
    int fan_in = s->in_features;
    int w = layer_add_param(nt, idx, "weight", (size_t)out_features * fan_in, fan_in, out_features, 0,
                            (init_spec){INIT_TORCH_DEFAULT, 0});
    layer_set_param_shape(nt, w, 2, (const int[]){out_features, fan_in}); /* [out, in] */
    if (bias) layer_add_param(nt, idx, "bias", (size_t)out_features, fan_in, out_features, 1,
                              (init_spec){INIT_TORCH_DEFAULT, 0});
    return idx;
}
