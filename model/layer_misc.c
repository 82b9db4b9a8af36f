/*
 * model/layer_misc.c - layers without parameters: ReLU, residual add, channel
 * concat, dropout, and the CIFAR ResNet option-A shortcut.
 */
#include "model/layer.h"
#include "common/check.h"
#include "common/rng_hash.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- relu */

static void relu_forward(net *nt, node *nd, int training) {
    (void)training;
    nt->be->relu_fwd(&nt->ctx, layer_out_count(nt, nd), layer_in(nt, nd, 0), nd->y);
}

static void relu_backward(net *nt, node *nd) {
    nt->be->relu_bwd(&nt->ctx, layer_out_count(nt, nd), nd->y, nd->dy, layer_in_grad(nt, nd, 0), nd->accumulate[0]);
}

static double elementwise_flops(const net *nt, const node *nd) {
    (void)nt;
    return (double)nd->C * nd->H * nd->W;
}

static const layer_ops relu_ops = {
    .kind = "relu", .backward_reads = LAYER_READS_OUTPUT, .forward = relu_forward, .backward = relu_backward, .flops = elementwise_flops};

int net_relu(net *nt, int in, const char *name) {
    if (layer_check_input(nt, in, name) != CNT_OK) return CNT_ERR;
    int C, H, W;
    layer_input_shape(nt, in, &C, &H, &W);
    return layer_add_node(nt, &relu_ops, name, &in, 1, C, H, W, NULL);
}

/* ---------------------------------------------------------------- add */

static void add_forward(net *nt, node *nd, int training) {
    (void)training;
    nt->be->add(&nt->ctx, layer_out_count(nt, nd), layer_in(nt, nd, 0), layer_in(nt, nd, 1), nd->y);
}

/* g (+)= dy over n activations: a copy, or an add in place. */
static void pass_grad(net *nt, size_t n, const void *dy, void *g, int accumulate) {
    if (accumulate) nt->be->add(&nt->ctx, n, dy, g, g);
    else nt->be->copy(g, dy, n * layer_act_size(nt));
}

/* An input whose gradient shares dy's memory (LAYER_PASSES_DY) has it already. */
static void add_backward(net *nt, node *nd) {
    size_t n = layer_out_count(nt, nd);
    for (int i = 0; i < 2; i++) {
        void *g = layer_in_grad(nt, nd, i);
        if (g != nd->dy) pass_grad(nt, n, nd->dy, g, nd->accumulate[i]);
    }
}

static const layer_ops add_ops = {.kind = "add",
                                  .backward_reads = LAYER_PASSES_DY,
                                  .forward = add_forward,
                                  .backward = add_backward,
                                  .flops = elementwise_flops};

int net_add(net *nt, int a, int b, const char *name) {
    if (layer_check_input(nt, a, name) != CNT_OK || layer_check_input(nt, b, name) != CNT_OK) return CNT_ERR;
    int Ca, Ha, Wa, Cb, Hb, Wb;
    layer_input_shape(nt, a, &Ca, &Ha, &Wa);
    layer_input_shape(nt, b, &Cb, &Hb, &Wb);
    if (Ca != Cb || Ha != Hb || Wa != Wb) {
        cnt_err_set("residual add of %dx%dx%d and %dx%dx%d", Ca, Ha, Wa, Cb, Hb, Wb);
        return layer_fail(nt, name);
    }
    int ins[2] = {a, b};
    return layer_add_node(nt, &add_ops, name, ins, 2, Ca, Ha, Wa, NULL);
}

/* ---------------------------------------------------------------- concat */

static void concat_forward(net *nt, node *nd, int training) {
    (void)training;
    int HW = nd->H * nd->W, off = 0;
    for (int i = 0; i < nd->n_inputs; i++) {
        int Ci, Hi, Wi;
        layer_input_shape(nt, nd->inputs[i], &Ci, &Hi, &Wi);
        nt->be->channel_copy(&nt->ctx, nt->batch, Ci, HW, layer_in(nt, nd, i), Ci, 0, nd->y, nd->C, off, 0);
        off += Ci;
    }
}

static void concat_backward(net *nt, node *nd) {
    int HW = nd->H * nd->W, off = 0;
    for (int i = 0; i < nd->n_inputs; i++) {
        int Ci, Hi, Wi;
        layer_input_shape(nt, nd->inputs[i], &Ci, &Hi, &Wi);
        nt->be->channel_copy(&nt->ctx, nt->batch, Ci, HW, nd->dy, nd->C, off, layer_in_grad(nt, nd, i), Ci, 0,
                             nd->accumulate[i]);
        off += Ci;
    }
}

static const layer_ops concat_ops = {.kind = "concat", .forward = concat_forward, .backward = concat_backward};

int net_concat(net *nt, const int *ins, int n, const char *name) {
    if (nt->failed) return CNT_ERR;
    if (n < 1 || n > NET_MAX_INPUTS) {
        cnt_err_set("concat of %d inputs (1 to %d allowed)", n, NET_MAX_INPUTS);
        return layer_fail(nt, name);
    }
    int C = 0, H = 0, W = 0;
    for (int i = 0; i < n; i++) {
        if (layer_check_input(nt, ins[i], name) != CNT_OK) return CNT_ERR;
        int Ci, Hi, Wi;
        layer_input_shape(nt, ins[i], &Ci, &Hi, &Wi);
        if (i > 0 && (Hi != H || Wi != W)) {
            cnt_err_set("concat input %d is %dx%d, input 0 is %dx%d", i, Hi, Wi, H, W);
            return layer_fail(nt, name);
        }
        H = Hi;
        W = Wi;
        C += Ci;
    }
    return layer_add_node(nt, &concat_ops, name, ins, n, C, H, W, NULL);
}

/* ---------------------------------------------------------------- dropout */

typedef struct dropout_state {
    float p;
    float *mask;      /* [max_batch, C, H, W] device, in the net's layout: 0 or 1/(1-p), fp32 in every context */
    float *mask_nchw; /* nets in other layouts than NCHW, with H*W > 1: the mask drawn in NCHW order,
                       * then converted, so a seed drops the same logical elements in every layout */
} dropout_state;

static void dropout_forward(net *nt, node *nd, int training) {
    dropout_state *s = nd->state;
    size_t n = layer_out_count(nt, nd);
    if (!training || s->p == 0.0f) {
        nt->be->copy(nd->y, layer_in(nt, nd, 0), n * layer_act_size(nt));
        return;
    }
    /* Mask from (step seed, node): the same on every backend and reproducible;
     * the step seed from the device word where a recorded step replays */
    uint64_t node_index = (uint64_t)(nd - nt->nodes);
    float *drawn = s->mask_nchw ? s->mask_nchw : s->mask;
    if (nt->dropout_seed_at)
        nt->be->dropout_mask_at(n, s->p, nt->dropout_seed_at, node_index, drawn);
    else
        nt->be->dropout_mask(n, s->p, rng_hash_dropout_seed(nt->dropout_seed, node_index), drawn);
    if (s->mask_nchw)
        nt->be->convert_layout(nt->batch, nd->C, nd->H * nd->W, s->mask_nchw, BACKEND_DTYPE_FP32, s->mask,
                               BACKEND_DTYPE_FP32, nt->ctx.layout, 1, 0);
    nt->be->mul(&nt->ctx, n, layer_in(nt, nd, 0), s->mask, nd->y, 0);
}

static void dropout_backward(net *nt, node *nd) {
    dropout_state *s = nd->state;
    size_t n = layer_out_count(nt, nd);
    if (s->p == 0.0f)
        pass_grad(nt, n, nd->dy, layer_in_grad(nt, nd, 0), nd->accumulate[0]);
    else
        nt->be->mul(&nt->ctx, n, nd->dy, s->mask, layer_in_grad(nt, nd, 0), nd->accumulate[0]);
}

static void dropout_describe(const node *nd, char *buf, size_t len) {
    const dropout_state *s = nd->state;
    snprintf(buf, len, "p %g", (double)s->p);
}

static void dropout_setup(net *nt, node *nd) {
    dropout_state *s = nd->state;
    size_t bytes = (size_t)nt->max_batch * nd->C * nd->H * nd->W * sizeof(float);
    s->mask = nt->be->alloc(bytes);
    if (nt->ctx.layout != BACKEND_LAYOUT_NCHW && nd->H * nd->W > 1) s->mask_nchw = nt->be->alloc(bytes);
}

static void dropout_free(net *nt, node *nd) {
    dropout_state *s = nd->state;
    nt->be->free(s->mask);
    nt->be->free(s->mask_nchw);
}

static size_t dropout_memory(const net *nt, const node *nd, int max_batch, size_t *workspace, size_t *kept) {
    (void)kept; /* nothing kept */
    *workspace = 0;
    size_t bytes = (size_t)max_batch * nd->C * nd->H * nd->W * sizeof(float); /* dropout_setup's */
    return nt->ctx.layout != BACKEND_LAYOUT_NCHW && nd->H * nd->W > 1 ? 2 * bytes : bytes;
}

static const layer_ops dropout_ops = {
    .kind = "dropout",
    .forward = dropout_forward,
    .backward = dropout_backward,
    .describe = dropout_describe,
    .setup = dropout_setup,
    .free_state = dropout_free,
    .memory = dropout_memory,
};

int net_dropout_active(const net *nt) {
    for (int i = 0; i < nt->n_nodes; i++)
        if (nt->nodes[i].ops == &dropout_ops && ((const dropout_state *)nt->nodes[i].state)->p > 0.0f) return 1;
    return 0;
}

int net_dropout_seed_on_device(net *nt) {
    if (!nt->be->dropout_mask_at) return 0;
    if (!nt->dropout_seed_at) nt->dropout_seed_at = nt->be->alloc(sizeof *nt->dropout_seed_at);
    return 1;
}

void net_dropout_seed_on_host(net *nt) {
    nt->be->free(nt->dropout_seed_at);
    nt->dropout_seed_at = NULL;
}

void net_dropout_seed_upload(net *nt) {
    if (!nt->dropout_seed_at) return;
    uint64_t next = nt->dropout_seed + 1; /* net_forward advances it before the layers run */
    nt->be->upload(nt->dropout_seed_at, &next, sizeof next);
}

int net_dropout(net *nt, int in, const char *name, float p) {
    if (layer_check_input(nt, in, name) != CNT_OK) return CNT_ERR;
    if (!(p >= 0.0f && p < 1.0f)) {
        cnt_err_set("dropout probability %g outside [0, 1)", (double)p);
        return layer_fail(nt, name);
    }
    int C, H, W;
    layer_input_shape(nt, in, &C, &H, &W);
    dropout_state *s = cnt_calloc(1, sizeof *s);
    s->p = p;
    return layer_add_node(nt, &dropout_ops, name, &in, 1, C, H, W, s);
}

/* ---------------------------------------------------------------- shortcut (option A) */

typedef struct shortcut_state {
    pool_params sub;  /* 1x1 max "pool" with the stride: x[:, :, ::s, ::s] */
    int in_c, offset; /* zero channels before the copied ones */
    void *tmp;        /* [max_batch, in_c, P, Q] activations, device: the subsampled input */
    void *tmp_grad;   /* its gradient */
} shortcut_state;

static void shortcut_forward(net *nt, node *nd, int training) {
    (void)training;
    shortcut_state *s = nd->state;
    int PQ = nd->H * nd->W;
    s->sub.N = nt->batch;
    nt->be->pool_fwd(&nt->ctx, &s->sub, layer_in(nt, nd, 0), s->tmp, NULL); /* 1x1: nothing worth keeping */
    nt->be->zero(nd->y, layer_out_count(nt, nd) * layer_act_size(nt));
    nt->be->channel_copy(&nt->ctx, nt->batch, s->in_c, PQ, s->tmp, s->in_c, 0, nd->y, nd->C, s->offset, 0);
}

static void shortcut_backward(net *nt, node *nd) {
    shortcut_state *s = nd->state;
    int PQ = nd->H * nd->W;
    s->sub.N = nt->batch;
    nt->be->channel_copy(&nt->ctx, nt->batch, s->in_c, PQ, nd->dy, nd->C, s->offset, s->tmp_grad, s->in_c, 0, 0);
    nt->be->pool_bwd(&nt->ctx, &s->sub, layer_in(nt, nd, 0), s->tmp, s->tmp_grad, layer_in_grad(nt, nd, 0),
                     nd->accumulate[0], NULL);
}

static void shortcut_describe(const node *nd, char *buf, size_t len) {
    const shortcut_state *s = nd->state;
    snprintf(buf, len, "option A /%d, %d->%d", s->sub.stride_h, s->in_c, nd->C);
}

static void shortcut_setup(net *nt, node *nd) {
    shortcut_state *s = nd->state;
    size_t n = (size_t)nt->max_batch * s->in_c * nd->H * nd->W * layer_act_size(nt);
    s->tmp = nt->be->alloc(n);
    s->tmp_grad = nt->be->alloc(n);
}

static void shortcut_free(net *nt, node *nd) {
    shortcut_state *s = nd->state;
    nt->be->free(s->tmp);
    nt->be->free(s->tmp_grad);
}

static size_t shortcut_memory(const net *nt, const node *nd, int max_batch, size_t *workspace, size_t *kept) {
    (void)kept; /* nothing kept */
    const shortcut_state *s = nd->state;
    *workspace = 0;
    return 2 * (size_t)max_batch * s->in_c * nd->H * nd->W * layer_act_size(nt); /* shortcut_setup's */
}

static const layer_ops shortcut_ops = {
    .kind = "shortcut",
    .backward_reads = LAYER_READS_INPUTS, /* pool_bwd of the subsample takes x */
    .forward = shortcut_forward,
    .backward = shortcut_backward,
    .describe = shortcut_describe,
    .setup = shortcut_setup,
    .free_state = shortcut_free,
    .memory = shortcut_memory,
};

int net_shortcut_pad(net *nt, int in, const char *name, int out_channels, int stride) {
    if (layer_check_input(nt, in, name) != CNT_OK) return CNT_ERR;
    int C, H, W;
    layer_input_shape(nt, in, &C, &H, &W);
    if (out_channels < C || stride < 1) {
        cnt_err_set("shortcut from %d to %d channels with stride %d", C, out_channels, stride);
        return layer_fail(nt, name);
    }
    shortcut_state *s = cnt_calloc(1, sizeof *s);
    s->sub = (pool_params){.mode = POOL_MODE_MAX, .N = 1, .C = C, .H = H, .W = W, .R = 1, .S = 1,
                           .stride_h = stride, .stride_w = stride};
    if (pool_params_init(&s->sub) != CNT_OK) {
        free(s);
        return layer_fail(nt, name);
    }
    s->in_c = C;
    s->offset = (out_channels - C) / 2;
    return layer_add_node(nt, &shortcut_ops, name, &in, 1, out_channels, s->sub.P, s->sub.Q, s);
}
