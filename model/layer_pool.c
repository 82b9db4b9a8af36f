/*
 * model/layer_pool.c - max, average and adaptive average pooling, with
 * torchvision's semantics (padding, count_include_pad, ceil_mode, adaptive
 * windows).
 */
#include "model/layer.h"
#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct pool_state {
    pool_params p; /* N is set per call */
    fwd_keep keep; /* what the training forward keeps for its backward (p NULL: nothing) */
} pool_state;

static void pool_forward(net *nt, node *nd, int training) {
    pool_state *s = nd->state;
    s->p.N = nt->batch;
    if (training)
        backend_pool_fwd_train(nt->be, &nt->ctx, &s->p, layer_in(nt, nd, 0), nd->y, &s->keep);
    else
        nt->be->pool_fwd(&nt->ctx, &s->p, layer_in(nt, nd, 0), nd->y, NULL);
}

static void pool_backward(net *nt, node *nd) {
    pool_state *s = nd->state;
    s->p.N = nt->batch;
    nt->be->pool_bwd(&nt->ctx, &s->p, layer_in(nt, nd, 0), nd->y, nd->dy, layer_in_grad(nt, nd, 0), nd->accumulate[0],
                     &s->keep);
}

/* The fwd_keep's bytes at max_batch images. */
static size_t pool_keep_bytes(const net *nt, const node *nd, int max_batch) {
    const pool_state *s = nd->state;
    pool_params p = s->p;
    p.N = max_batch;
    return backend_pool_keep_bytes(nt->be, &nt->ctx, &p);
}

static void pool_setup(net *nt, node *nd) {
    pool_state *s = nd->state;
    s->keep = (fwd_keep){NULL, pool_keep_bytes(nt, nd, nt->max_batch), 0};
    if (s->keep.bytes) s->keep.p = nt->be->alloc(s->keep.bytes);
}

static void pool_free(net *nt, node *nd) {
    pool_state *s = nd->state;
    if (s->keep.p) nt->be->free(s->keep.p);
}

static size_t pool_memory(const net *nt, const node *nd, int max_batch, size_t *workspace, size_t *kept) {
    (void)kept; /* nothing of the weights */
    *workspace = 0;
    return pool_keep_bytes(nt, nd, max_batch); /* pool_setup's */
}

static double pool_flops(const net *nt, const node *nd) {
    (void)nt;
    const pool_state *s = nd->state;
    double window = s->p.mode == POOL_MODE_ADAPTIVE_AVG
                        ? ((double)s->p.H / s->p.P) * ((double)s->p.W / s->p.Q)
                        : (double)s->p.R * s->p.S;
    return (double)nd->C * nd->H * nd->W * window;
}

static void pool_describe(const node *nd, char *buf, size_t len) {
    const pool_state *s = nd->state;
    switch (s->p.mode) {
    case POOL_MODE_ADAPTIVE_AVG: snprintf(buf, len, "adaptive avg %dx%d", s->p.P, s->p.Q); break;
    case POOL_MODE_MAX:
        snprintf(buf, len, "max %dx%d/%d p%d%s", s->p.R, s->p.S, s->p.stride_h, s->p.pad_h,
                 s->p.ceil_mode ? " ceil" : "");
        break;
    default:
        snprintf(buf, len, "avg %dx%d/%d p%d%s", s->p.R, s->p.S, s->p.stride_h, s->p.pad_h,
                 s->p.mode == POOL_MODE_AVG_EXCLUDE_PAD ? " excl" : "");
        break;
    }
}

static const layer_ops pool_ops = {
    .kind = "pool",
    .backward_reads = LAYER_READS_INPUTS | LAYER_READS_OUTPUT, /* pool_bwd takes x and y (max: the argmax) */
    .forward = pool_forward,
    .backward = pool_backward,
    .setup = pool_setup,
    .free_state = pool_free,
    .memory = pool_memory,
    .flops = pool_flops,
    .describe = pool_describe,
};

static int add_pool(net *nt, int in, const char *name, pool_params *p) {
    if (layer_check_input(nt, in, name) != CNT_OK) return CNT_ERR;
    layer_input_shape(nt, in, &p->C, &p->H, &p->W);
    p->N = 1;
    if (pool_params_init(p) != CNT_OK) return layer_fail(nt, name);
    pool_state *s = cnt_calloc(1, sizeof *s);
    s->p = *p;
    return layer_add_node(nt, &pool_ops, name, &in, 1, p->C, p->P, p->Q, s);
}

int net_maxpool(net *nt, int in, const char *name, int kernel, int stride, int pad, int ceil_mode) {
    pool_params p = {.mode = POOL_MODE_MAX, .R = kernel, .S = kernel, .stride_h = stride, .stride_w = stride,
                     .pad_h = pad, .pad_w = pad, .ceil_mode = ceil_mode};
    return add_pool(nt, in, name, &p);
}

int net_avgpool(net *nt, int in, const char *name, int kernel, int stride, int pad, int count_include_pad) {
    pool_params p = {.mode = count_include_pad ? POOL_MODE_AVG_INCLUDE_PAD : POOL_MODE_AVG_EXCLUDE_PAD,
                     .R = kernel, .S = kernel, .stride_h = stride, .stride_w = stride, .pad_h = pad, .pad_w = pad};
    return add_pool(nt, in, name, &p);
}

int net_adaptive_avgpool(net *nt, int in, const char *name, int P, int Q) {
    pool_params p = {.mode = POOL_MODE_ADAPTIVE_AVG, .P = P, .Q = Q};
    return add_pool(nt, in, name, &p);
}
