/*
 * model/layer_norm.c - batch normalisation (BatchNorm2d, and over features for
 * [N, C, 1, 1] inputs).
 *
 * Training: batch statistics, running averages updated with momentum 0.1
 * (PyTorch's convention: running = 0.9 * running + 0.1 * batch). Evaluation:
 * running statistics. Parameters: weight (gamma, init 1) and bias (beta, init
 * 0), both exempt from weight decay unless optim.wd_on_bn_bias.
 */
#include "model/layer.h"
#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>

#define BN_MOMENTUM 0.1f

typedef struct bn_state {
    float eps;
    float *save_mean;   /* [C] device: batch mean of the last training forward */
    float *save_invstd; /* [C] device: 1/sqrt(batch var + eps) */
    fwd_keep keep;       /* a fused group's: what its training forward keeps for its backward (p NULL: nothing) */
} bn_state;

size_t layer_bn_keep_bytes(const net *nt, const node *nd, int add, int max_batch) {
    return backend_bn_act_keep_bytes(nt->be, &nt->ctx, max_batch, nd->C, nd->H * nd->W, add, 1);
}

/* What a fused group (struct node's fuse_*) hands the fused op: the node
 * whose y and dy hold its result, and the add's other input (its index in
 * the add's inputs in *zk; -1 without an add). */
static const node *bn_fused(const net *nt, const node *nd, int *zk) {
    *zk = -1;
    if (nd->fuse_add >= 0) {
        const node *a = &nt->nodes[nd->fuse_add];
        *zk = a->inputs[0] == (int)(nd - nt->nodes) ? 1 : 0;
    }
    return &nt->nodes[nd->fuse_relu >= 0 ? nd->fuse_relu : nd->fuse_add];
}

static void bn_forward(net *nt, node *nd, int training) {
    bn_state *s = nd->state;
    const void *x = layer_in(nt, nd, 0), *z = NULL;
    void *y = nd->y;
    int relu = nd->fuse_relu >= 0, zk;
    if (nd->fuse_add >= 0 || relu) {
        y = bn_fused(nt, nd, &zk)->y;
        if (zk >= 0) z = layer_in(nt, &nt->nodes[nd->fuse_add], zk);
    }
    int HW = nd->H * nd->W;
    if (training)
        backend_bn_act_fwd_train(nt->be, &nt->ctx, nt->batch, nd->C, HW, x, z, relu, layer_param(nt, nd, 0),
                                 layer_param(nt, nd, 1), y, layer_buffer(nt, nd, 0), layer_buffer(nt, nd, 1),
                                 BN_MOMENTUM, s->eps, s->save_mean, s->save_invstd, &s->keep);
    else
        backend_bn_act_fwd_infer(nt->be, &nt->ctx, nt->batch, nd->C, HW, x, z, relu, layer_param(nt, nd, 0),
                                 layer_param(nt, nd, 1), y, layer_buffer(nt, nd, 0), layer_buffer(nt, nd, 1),
                                 s->eps);
}

static void bn_backward(net *nt, node *nd) {
    bn_state *s = nd->state;
    const void *x = layer_in(nt, nd, 0), *y = NULL;
    void *dy = nd->dy, *dz = NULL;
    int relu = nd->fuse_relu >= 0, acc_dz = 0, zk;
    if (nd->fuse_add >= 0 || relu) {
        const node *last = bn_fused(nt, nd, &zk);
        y = last->y;
        dy = last->dy;
        if (zk >= 0) {
            const node *a = &nt->nodes[nd->fuse_add];
            dz = layer_in_grad(nt, a, zk);
            acc_dz = a->accumulate[zk];
        }
    }
    /* One op writes dgamma, dbeta and dx (and the residual's gradient); the
     * weight gradients are complete when it returns, so the hook follows it. */
    backend_bn_act_bwd(nt->be, &nt->ctx, nt->batch, nd->C, nd->H * nd->W, x, y, dy, relu, layer_param(nt, nd, 0),
                       layer_param(nt, nd, 1), s->save_mean, s->save_invstd, s->eps, layer_in_grad(nt, nd, 0),
                       layer_param_grad(nt, nd, 0), layer_param_grad(nt, nd, 1), nd->accumulate[0], dz, acc_dz,
                       &s->keep);
    layer_grads_ready(nt, nd);
}

static double bn_flops(const net *nt, const node *nd) {
    (void)nt;
    return 2.0 * nd->C * nd->H * nd->W;
}

static void bn_describe(const node *nd, char *buf, size_t len) {
    const bn_state *s = nd->state;
    snprintf(buf, len, "eps %g", (double)s->eps);
}

static void bn_setup(net *nt, node *nd) {
    bn_state *s = nd->state;
    s->save_mean = nt->be->alloc((size_t)nd->C * sizeof(float));
    s->save_invstd = nt->be->alloc((size_t)nd->C * sizeof(float));
    /* net_memory_estimate counts it (layer_bn_keep_bytes) */
    s->keep = (fwd_keep){NULL, 0, 0};
    if (nd->fuse_relu >= 0) s->keep.bytes = layer_bn_keep_bytes(nt, nd, nd->fuse_add >= 0, nt->max_batch);
    if (s->keep.bytes) s->keep.p = nt->be->alloc(s->keep.bytes);
}

static void bn_free(net *nt, node *nd) {
    bn_state *s = nd->state;
    nt->be->free(s->save_mean);
    nt->be->free(s->save_invstd);
    if (s->keep.p) nt->be->free(s->keep.p);
}

/* Without the fused group's fwd_keep, which depends on the fusion plan:
 * net_memory_estimate adds layer_bn_keep_bytes. */
static size_t bn_memory(const net *nt, const node *nd, int max_batch, size_t *workspace, size_t *kept) {
    (void)kept; /* nothing kept */
    (void)nt;
    (void)max_batch;
    *workspace = 0;
    return 2 * (size_t)nd->C * sizeof(float); /* bn_setup's */
}

static const layer_ops bn_ops = {
    .kind = "bn",
    .backward_reads = LAYER_READS_INPUTS, /* x (bn_bwd recomputes x-hat from it) */
    .forward = bn_forward,
    .backward = bn_backward,
    .flops = bn_flops,
    .describe = bn_describe,
    .setup = bn_setup,
    .free_state = bn_free,
    .memory = bn_memory,
};

int net_bn(net *nt, int in, const char *name, float eps) {
    if (layer_check_input(nt, in, name) != CNT_OK) return CNT_ERR;
    if (!(eps > 0.0f)) {
        cnt_err_set("batch norm eps %g must be positive", (double)eps);
        return layer_fail(nt, name);
    }
    int C, H, W;
    layer_input_shape(nt, in, &C, &H, &W);
    bn_state *s = cnt_calloc(1, sizeof *s);
    s->eps = eps;
    int idx = layer_add_node(nt, &bn_ops, name, &in, 1, C, H, W, s);
    if (idx < 0) return CNT_ERR;
    layer_add_param(nt, idx, "weight", (size_t)C, C, C, 1, (init_spec){INIT_ONE, 0});
    layer_add_param(nt, idx, "bias", (size_t)C, C, C, 1, (init_spec){INIT_ZERO, 0});
    layer_add_buffer(nt, idx, "running_mean", (size_t)C, 0.0f);
    layer_add_buffer(nt, idx, "running_var", (size_t)C, 1.0f);
    return idx;
}
