/*
 * tests/test_fusion.c - batch norm fused with the residual add and ReLU
 * after it (net_set_fusion, backend_bn_act_*), on the CPU backend.
 *
 * The fused op is defined as the composition of the separate ops (bn_*, add,
 * relu_*; backward relu_bwd, axpy, bn_bwd), and the CPU's fused kernels take
 * the same steps per value in the same order, so every check here is bit
 * for bit: the fused ops against the composition in every layout, with and
 * without the add and the ReLU, overwriting and accumulating; whole nets
 * (CIFAR ResNet-20, whose option-A shortcut comes before bn2, and
 * ResNet-18, whose downsampling batch norm computes the add) fused against
 * unfused through two training steps and an evaluation; what a forward
 * keeps for its backward (the fused batch norm's ReLU mask, max pooling's
 * positions of the maxima), through a made-up backend; and which nodes the
 * plan fuses, including the patterns it must leave alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/rng.h"
#include "model/net.h"
#include "model/zoo.h"
#include "tests/support/testutil.h"

/* ---------------------------------------------------------------- the ops */

/* n floats on be from a normal distribution (mean m). */
static float *dev_normal(const backend *be, rng *r, size_t n, double m) {
    double *h = tu_alloc(n);
    tu_fill_normal(r, h, n, m, 1.0);
    float *d = tu_dev_from_double(be, h, n);
    free(h);
    return d;
}

static float *dev_copy(const backend *be, const float *src, size_t n) {
    float *d = be->alloc(n * sizeof(float));
    be->copy(d, src, n * sizeof(float));
    return d;
}

static void expect_bitwise(const backend *be, const char *what, const float *a, const float *b, size_t n) {
    float *ha = tu_alloc_f(n), *hb = tu_alloc_f(n);
    be->download(ha, a, n * sizeof(float));
    be->download(hb, b, n * sizeof(float));
    tu_assert_bitwise_equal_f(what, ha, hb, n);
    free(ha);
    free(hb);
}

/* The fused op of `be` against the composition (`be` without its bn_act_*)
 * for one shape, layout and combination; everything it writes, bit for bit.
 * in_place: dz is dy itself (what the net's planner does when the add
 * writes its other input's gradient first). */
static void fused_case(const backend *be, int layout, int N, int C, int HW, int with_z, int relu, int acc_dx,
                       int acc_dz, int in_place) {
    backend comp = *be;
    comp.bn_act_fwd_train = NULL;
    comp.bn_act_fwd_infer = NULL;
    comp.bn_act_bwd = NULL;
    const backend *side[2] = {be, &comp};
    backend_ctx ctx = {.layout = (backend_layout)layout, .math = BACKEND_MATH_FP32};
    size_t n = (size_t)N * C * HW;
    rng r;
    rng_seed(&r, 1000 + (uint64_t)(C * 7 + HW * 3 + with_z * 2 + relu), 1);
    /* mean 0.3: about as many values on each side of the ReLU after normalising */
    float *x = dev_normal(be, &r, n, 0.3), *z = with_z ? dev_normal(be, &r, n, -0.2) : NULL;
    float *gamma = dev_normal(be, &r, (size_t)C, 1.0), *beta = dev_normal(be, &r, (size_t)C, 0.0);
    float *rm0 = dev_normal(be, &r, (size_t)C, 0.0), *rv0 = dev_normal(be, &r, (size_t)C, 3.0);
    float *dy0 = dev_normal(be, &r, n, 0.0), *dx0 = dev_normal(be, &r, n, 0.0), *dz0 = dev_normal(be, &r, n, 0.0);
    float *y[2], *rm[2], *rv[2], *sm[2], *si[2], *dy[2], *dx[2], *dz[2], *dg[2], *db[2], *yi[2];
    for (int s = 0; s < 2; s++) {
        y[s] = be->alloc(n * sizeof(float));
        yi[s] = be->alloc(n * sizeof(float));
        rm[s] = dev_copy(be, rm0, (size_t)C);
        rv[s] = dev_copy(be, rv0, (size_t)C);
        sm[s] = be->alloc((size_t)C * sizeof(float));
        si[s] = be->alloc((size_t)C * sizeof(float));
        dy[s] = dev_copy(be, dy0, n);
        dx[s] = dev_copy(be, dx0, n);
        dz[s] = with_z && !in_place ? dev_copy(be, dz0, n) : NULL;
        dg[s] = be->alloc((size_t)C * sizeof(float));
        db[s] = be->alloc((size_t)C * sizeof(float));
        backend_bn_act_fwd_train(side[s], &ctx, N, C, HW, x, z, relu, gamma, beta, y[s], rm[s], rv[s], 0.1f, 1e-5f,
                                 sm[s], si[s], NULL);
        backend_bn_act_fwd_infer(side[s], &ctx, N, C, HW, x, z, relu, gamma, beta, yi[s], rm[s], rv[s], 1e-3f);
        backend_bn_act_bwd(side[s], &ctx, N, C, HW, x, y[s], dy[s], relu, gamma, beta, sm[s], si[s], 1e-5f, dx[s],
                           dg[s], db[s], acc_dx, in_place ? dy[s] : dz[s], acc_dz, NULL);
        if (in_place) dz[s] = dy[s];
    }
    char what[160];
#define SAME(name, a, count)                                                                                        \
    do {                                                                                                            \
        snprintf(what, sizeof what, "%s: layout %d, %dx%dx%d, z %d, relu %d, accumulate %d/%d, in place %d", name,  \
                 layout, N, C, HW, with_z, relu, acc_dx, acc_dz, in_place);                                         \
        expect_bitwise(be, what, a[0], a[1], count);                                                                \
    } while (0)
    SAME("training y", y, n);
    SAME("running mean", rm, (size_t)C);
    SAME("running var", rv, (size_t)C);
    SAME("saved mean", sm, (size_t)C);
    SAME("saved invstd", si, (size_t)C);
    SAME("inference y", yi, n);
    SAME("dx", dx, n);
    SAME("dgamma", dg, (size_t)C);
    SAME("dbeta", db, (size_t)C);
    if (with_z) SAME("dz", dz, n);
#undef SAME
    for (int s = 0; s < 2; s++) {
        float *all[] = {y[s], yi[s], rm[s], rv[s], sm[s], si[s], dy[s], dx[s], in_place ? NULL : dz[s], dg[s], db[s]};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) be->free(all[k]);
    }
    float *inputs[] = {x, z, gamma, beta, rm0, rv0, dy0, dx0, dz0};
    for (size_t k = 0; k < sizeof inputs / sizeof inputs[0]; k++) be->free(inputs[k]);
}

static void test_fused_ops_equal_composition(void **state) {
    (void)state;
    const backend *be = backend_cpu();
    int last = be->block_c > 0 ? BACKEND_LAYOUT_BLOCKED : BACKEND_LAYOUT_NHWC;
    int wide = be->block_c > 0 ? 2 * be->block_c : 16; /* whole channel blocks */
    /* channels: whole blocks, and 5 (stored NCHW in the blocked layout);
     * positions: 7x5, and 1 (batch norm over features) */
    const int shapes[][3] = {{3, 0, 35}, {2, 5, 35}, {4, 0, 1}, {5, 5, 1}};
    for (int layout = BACKEND_LAYOUT_NCHW; layout <= last; layout++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (int combo = 0; combo < 32; combo++) {
                int with_z = combo & 1, relu = (combo >> 1) & 1, acc_dx = (combo >> 2) & 1, acc_dz = (combo >> 3) & 1;
                int in_place = combo >> 4;
                if ((!with_z && (acc_dz || in_place)) || (in_place && acc_dz)) continue;
                fused_case(be, layout, shapes[k][0], shapes[k][1] ? shapes[k][1] : wide, shapes[k][2], with_z, relu,
                           acc_dx, acc_dz, in_place);
            }
}

/* ---------------------------------------------------------------- whole nets */

typedef struct run {
    net *nt;
    float *x, *loss, *dlogits;
    int32_t *labels;
} run;

#define BATCH 4
#define CLASSES 10

static void run_init_on(run *r, const backend *be, const char *model, int side, int layout, int fuse, int sharing) {
    r->nt = net_create(be, 3, side, side, CLASSES);
    net_set_layout(r->nt, layout);
    net_set_fusion(r->nt, fuse);
    net_set_memory_sharing(r->nt, sharing);
    int out, aux;
    assert_int_equal(zoo_build(r->nt, model, NULL, &out, &aux), CNT_OK);
    assert_int_equal(net_finalize(r->nt, out, aux, BATCH), CNT_OK);
    net_init_params(r->nt, 5);
    rng g;
    rng_seed(&g, 77, 1);
    r->x = dev_normal(be, &g, (size_t)BATCH * 3 * side * side, 0.0);
    int32_t lab[BATCH] = {3, 0, 9, 3};
    r->labels = be->alloc(sizeof lab);
    be->upload(r->labels, lab, sizeof lab);
    r->loss = be->alloc(sizeof(float));
    r->dlogits = be->alloc((size_t)BATCH * CLASSES * sizeof(float));
}

static void run_init(run *r, const char *model, int side, int layout, int fuse, int sharing) {
    run_init_on(r, backend_cpu(), model, side, layout, fuse, sharing);
}

static void run_free(run *r) {
    const backend *be = r->nt->be;
    be->free(r->x);
    be->free(r->labels);
    be->free(r->loss);
    be->free(r->dlogits);
    net_free(r->nt);
}

static void run_step(run *r) {
    net_forward(r->nt, r->x, BATCH, 1);
    r->nt->be->softmax_xent(BATCH, CLASSES, net_logits(r->nt), r->labels, 0.0f, r->loss, r->dlogits);
    net_backward(r->nt, r->dlogits, NULL);
}

/* Whether [a, a + n) and [b, b + n) share memory (NULL: nothing). */
static int overlap(const float *a, const float *b, size_t n) { return a && b && a < b + n && b < a + n; }

/* The planner keeps what each fused op reads and writes apart, as the ops'
 * contract asks (model/backend.h): the group's y from its x and z; dx from
 * x, y and dy; dz from x and y, and from dy unless it is dy itself. (On the
 * CPU, whose ops are elementwise in place, an overlap would not change a
 * number: this is the check that sees it.) */
static void expect_groups_apart(const net *nt) {
    for (int b = 0; b < nt->n_nodes; b++) {
        const node *nd = &nt->nodes[b];
        if (nd->fuse_add < 0 && nd->fuse_relu < 0) continue;
        const node *last = &nt->nodes[nd->fuse_relu >= 0 ? nd->fuse_relu : nd->fuse_add];
        size_t n = (size_t)nt->max_batch * nd->C * nd->H * nd->W;
        const float *x = nd->inputs[0] >= 0 ? nt->nodes[nd->inputs[0]].y : NULL;
        const float *dx = nd->inputs[0] >= 0 ? nt->nodes[nd->inputs[0]].dy : NULL;
        const float *z = NULL, *dz = NULL;
        if (nd->fuse_add >= 0) {
            const node *a = &nt->nodes[nd->fuse_add];
            int zi = a->inputs[0] == b ? a->inputs[1] : a->inputs[0];
            z = zi >= 0 ? nt->nodes[zi].y : NULL;
            dz = zi >= 0 ? nt->nodes[zi].dy : NULL;
        }
        const char *name = nd->name;
        if (overlap(last->y, x, n) || overlap(last->y, z, n)) fail_msg("%s: the group's y overlaps x or z", name);
        if (overlap(dx, x, n) || overlap(dx, last->y, n) || overlap(dx, last->dy, n))
            fail_msg("%s: dx overlaps x, y or dy", name);
        if (overlap(dz, x, n) || overlap(dz, last->y, n) || (dz != last->dy && overlap(dz, last->dy, n)))
            fail_msg("%s: dz overlaps x or y, or part of dy", name);
    }
}

/* `model` fused and unfused: the same loss, logits, parameter gradients,
 * running statistics and input gradient, bit for bit, through two training
 * steps (plain SGD between them) and an evaluation; the fused net has
 * `groups` groups, leaves their inner tensors unmade, and plans no more
 * activation memory (less without sharing, where every tensor is kept). */
static void net_case(const char *model, int side, int layout, int sharing, int groups) {
    run f, u;
    run_init(&f, model, side, layout, 1, sharing);
    run_init(&u, model, side, layout, 0, sharing);
    const backend *be = f.nt->be;
    assert_int_equal(net_fused_groups(f.nt), groups);
    assert_int_equal(net_fused_groups(u.nt), 0);
    expect_groups_apart(f.nt);
    for (int i = 0; i < f.nt->n_nodes; i++) {
        const node *nd = &f.nt->nodes[i];
        int lead = nd->fuse_add >= 0 || nd->fuse_relu >= 0;
        int last = nd->fused_into >= 0 && (f.nt->nodes[nd->fused_into].fuse_relu >= 0
                                               ? f.nt->nodes[nd->fused_into].fuse_relu == i
                                               : f.nt->nodes[nd->fused_into].fuse_add == i);
        int made = !lead && (nd->fused_into < 0 || last);
        assert_int_equal(nd->y != NULL, made);
        assert_int_equal(nd->dy != NULL, made);
        assert_non_null(u.nt->nodes[i].y);
    }
    char what[160];
    for (int step = 0; step < 2; step++) {
        run_step(&f);
        run_step(&u);
        snprintf(what, sizeof what, "%s layout %d sharing %d step %d", model, layout, sharing, step);
        expect_bitwise(be, what, f.loss, u.loss, 1);
        expect_bitwise(be, what, net_logits(f.nt), net_logits(u.nt), (size_t)BATCH * CLASSES);
        expect_bitwise(be, what, f.nt->grads, u.nt->grads, f.nt->n_params);
        expect_bitwise(be, what, f.nt->buffers, u.nt->buffers, f.nt->n_buffers);
        expect_bitwise(be, what, f.nt->input_grad, u.nt->input_grad, (size_t)BATCH * 3 * side * side);
        be->axpy(f.nt->n_params, -0.05f, f.nt->grads, f.nt->params, 1);
        be->axpy(u.nt->n_params, -0.05f, u.nt->grads, u.nt->params, 1);
    }
    net_forward(f.nt, f.x, BATCH, 0);
    net_forward(u.nt, u.x, BATCH, 0);
    expect_bitwise(be, "evaluation logits", net_logits(f.nt), net_logits(u.nt), (size_t)BATCH * CLASSES);
    net_memory fm, um;
    net_memory_estimate(f.nt, BATCH, &fm);
    net_memory_estimate(u.nt, BATCH, &um);
    /* with sharing the peak (the tensors backward reads) is the same; never more */
    assert_true(sharing ? fm.activations <= um.activations : fm.activations < um.activations);
    run_free(&f);
    run_free(&u);
}

static void test_resnet20_fused_equals_unfused(void **state) {
    (void)state;
    int last = backend_cpu()->block_c > 0 ? BACKEND_LAYOUT_BLOCKED : BACKEND_LAYOUT_NHWC;
    /* 19 groups: the stem's bn+relu, and in each of 9 blocks bn1+relu1 and bn2+add+relu2 */
    for (int layout = BACKEND_LAYOUT_NCHW; layout <= last; layout++) net_case("resnet20", 12, layout, 1, 19);
    net_case("resnet20", 12, BACKEND_LAYOUT_NCHW, 0, 19);
}

static void test_resnet18_fused_equals_unfused(void **state) {
    (void)state;
    /* 17 groups: the stem, bn1+relu1 in each of 8 blocks, bn2+add+relu in
     * the 5 blocks without downsampling and downsample.1+add+relu in the 3
     * with (their bn2 runs alone: the downsampling convolution comes between) */
    net_case("resnet18", 32, backend_cpu()->block_c > 0 ? BACKEND_LAYOUT_BLOCKED : BACKEND_LAYOUT_NCHW, 1, 17);
    net_case("resnet18", 32, BACKEND_LAYOUT_NCHW, 1, 17);
}

/* ---------------------------------------------------------------- what a fused forward keeps */

/* A backend that keeps something between a fused group's training forward
 * and its backward, as the CUDA backend keeps cuDNN's ReLU mask
 * (bn_act_keep_bytes): the CPU's, whose ops it calls, with a stamp written
 * over all of each fwd_keep it is given and checked by the backward. */
#define KEEP_MAX 64
static struct {
    int max_batch;                   /* the net's */
    int write;                       /* whether the forwards write their keep */
    unsigned char stamp;             /* the last forward's */
    const void *p[KEEP_MAX];         /* each fwd_keep seen, and its forward's stamp */
    unsigned char stamp_of[KEEP_MAX];
    int n, fwd, bwd;                 /* bn_keeps seen; forwards and backwards with a ReLU */
    char err[256];                   /* the first broken promise */
} kt;

static size_t kt_bytes(const backend_ctx *ctx, int N, int C, int HW, int add, int relu) {
    (void)ctx;
    return relu ? ((size_t)N * C * HW + 7) / 8 + 32 * (size_t)add : 0; /* a bit a value, as cuDNN's mask */
}

static void kt_fail(const char *what) {
    if (!kt.err[0]) snprintf(kt.err, sizeof kt.err, "%s", what);
}

static int kt_slot(const void *p) {
    for (int i = 0; i < kt.n; i++)
        if (kt.p[i] == p) return i;
    if (kt.n == KEEP_MAX) return -1;
    kt.p[kt.n] = p;
    return kt.n++;
}

/* A forward's part: stamps all of keep (where the test has forwards write)
 * and marks it written. */
static void kt_stamp(fwd_keep *keep) {
    if (!kt.write) return;
    int i = kt_slot(keep->p);
    if (i < 0) return kt_fail("more fwd_keeps than the test holds");
    kt.stamp_of[i] = ++kt.stamp;
    memset(keep->p, kt.stamp, keep->bytes);
    keep->written = 1;
}

/* A backward's part: keep is marked as the step's forwards left it and,
 * where written, holds its own forward's stamp. */
static void kt_check(const fwd_keep *keep, const char *op) {
    const char *why = NULL;
    if (!keep || !keep->p) why = "was given no fwd_keep";
    else if (keep->written != kt.write) why = kt.write ? "got a fwd_keep not marked written"
                                                       : "got a fwd_keep marked written by an earlier step";
    else if (keep->written) {
        int i = kt_slot(keep->p);
        const unsigned char *b = keep->p;
        for (size_t k = 0; k < keep->bytes && !why; k++)
            if (i < 0 || b[k] != kt.stamp_of[i]) why = "got a fwd_keep holding another forward's bytes";
    }
    if (!why) return;
    char msg[160];
    snprintf(msg, sizeof msg, "%s's backward %s", op, why);
    kt_fail(msg);
}

static void kt_fwd(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *z, int relu,
                   const float *gamma, const float *beta, void *y, float *running_mean, float *running_var,
                   float momentum, float eps, float *save_mean, float *save_invstd, fwd_keep *keep) {
    backend_cpu()->bn_act_fwd_train(ctx, N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, momentum,
                                    eps, save_mean, save_invstd, keep);
    if (!relu) return;
    kt.fwd++;
    if (!keep || !keep->p) return kt_fail("a fused batch norm with a ReLU was given nothing to keep");
    if (keep->bytes != kt_bytes(ctx, kt.max_batch, C, HW, z != NULL, 1))
        return kt_fail("a fwd_keep is not of the backend's size at the net's largest batch");
    if (keep->written) return kt_fail("a forward was handed a fwd_keep marked written");
    kt_stamp(keep);
}

static void kt_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *y, void *dy, int relu,
                   const float *gamma, const float *beta, const float *save_mean, const float *save_invstd,
                   float eps, void *dx, float *dgamma, float *dbeta, int accumulate_dx, void *dz, int accumulate_dz,
                   const fwd_keep *keep) {
    if (relu) {
        kt.bwd++;
        kt_check(keep, "a batch norm fused with its ReLU");
    }
    backend_cpu()->bn_act_bwd(ctx, N, C, HW, x, y, dy, relu, gamma, beta, save_mean, save_invstd, eps, dx, dgamma,
                              dbeta, accumulate_dx, dz, accumulate_dz, keep);
}

/* Two steps of k (on the made-up backend) and c (the CPU's): the first with
 * forwards that keep, the second (a step whose forwards keep nothing)
 * without; each step *fwd and *bwd (the made-up ops' counts, reset here)
 * reach `ops`, and k's loss and gradients are c's bit for bit. */
static void keep_steps(run *k, run *c, int *fwd, int *bwd, int ops) {
    for (int step = 0; step < 2; step++) {
        kt.write = step == 0;
        *fwd = *bwd = 0;
        run_step(k);
        run_step(c);
        if (kt.err[0]) fail_msg("step %d: %s", step, kt.err);
        assert_int_equal(*fwd, ops);
        assert_int_equal(*bwd, ops);
        expect_bitwise(k->nt->be, "loss", k->loss, c->loss, 1);
        expect_bitwise(k->nt->be, "gradients", k->nt->grads, c->nt->grads, k->nt->n_params);
    }
}

/* k's memory estimate at `batch` is c's plus `kept` bytes of activations. */
static void expect_estimate_adds(const run *k, const run *c, int batch, size_t kept) {
    net_memory km, cm;
    net_memory_estimate(k->nt, batch, &km);
    net_memory_estimate(c->nt, batch, &cm);
    assert_true(kept > 0);
    assert_int_equal(km.activations, cm.activations + kept);
    assert_int_equal(km.total, cm.total + kept);
}

static void test_fused_forward_keeps_for_its_backward(void **state) {
    (void)state;
    backend kb = *backend_cpu();
    kb.bn_act_fwd_train = kt_fwd;
    kb.bn_act_bwd = kt_bwd;
    kb.bn_act_keep_bytes = kt_bytes;
    memset(&kt, 0, sizeof kt);
    kt.max_batch = BATCH;
    run k, c;
    run_init_on(&k, &kb, "resnet20", 12, BACKEND_LAYOUT_NCHW, 1, 1);
    run_init(&c, "resnet20", 12, BACKEND_LAYOUT_NCHW, 1, 1);
    keep_steps(&k, &c, &kt.fwd, &kt.bwd, 19); /* every group of ResNet-20 ends in a ReLU */
    assert_int_equal(kt.n, 19); /* one fwd_keep each */
    /* the estimate counts each group's fwd_keep, at the batch asked for */
    for (int batch = BATCH; batch <= 4 * BATCH; batch *= 4) {
        size_t want = 0;
        for (int i = 0; i < k.nt->n_nodes; i++) {
            const node *nd = &k.nt->nodes[i];
            if (nd->fuse_relu >= 0) want += kt_bytes(&k.nt->ctx, batch, nd->C, nd->H * nd->W, nd->fuse_add >= 0, 1);
        }
        expect_estimate_adds(&k, &c, batch, want);
    }
    run_free(&k);
    run_free(&c);
}

/* Max pooling keeps too (the CUDA backend: each window's maximum's
 * position, pool_keep_bytes): the same made-up backend's pool ops stamp and
 * check each fwd_keep they are given as the batch norm's above do. */
static size_t kp_bytes(const backend_ctx *ctx, const pool_params *p) {
    (void)ctx;
    return p->mode == POOL_MODE_MAX ? (size_t)p->N * p->C * p->P * p->Q + 16 : 0;
}

static struct {
    int fwd, bwd, eval; /* max pooling's training forwards and backwards, and evaluation forwards */
} kp;

static void kp_fwd(const backend_ctx *ctx, const pool_params *p, const void *x, void *y, fwd_keep *keep) {
    backend_cpu()->pool_fwd(ctx, p, x, y, keep);
    if (!keep) {
        kp.eval++;
        return;
    }
    if (keep->written) return kt_fail("a pool's forward was handed a fwd_keep marked written");
    pool_params big = *p;
    big.N = kt.max_batch;
    if (keep->bytes != kp_bytes(ctx, &big) || (keep->p == NULL) != (keep->bytes == 0))
        return kt_fail("a pool's fwd_keep is not of the backend's size at the net's largest batch");
    if (p->mode != POOL_MODE_MAX) return;
    kp.fwd++;
    kt_stamp(keep);
}

static void kp_bwd(const backend_ctx *ctx, const pool_params *p, const void *x, const void *y, const void *dy,
                   void *dx, int accumulate, const fwd_keep *keep) {
    if (p->mode == POOL_MODE_MAX) {
        kp.bwd++;
        kt_check(keep, "a max pool");
    }
    backend_cpu()->pool_bwd(ctx, p, x, y, dy, dx, accumulate, keep);
}

/* ResNet-18: its stem's max pool keeps (its adaptive average pool does
 * not); an evaluation forward is handed nothing to keep; the estimate
 * counts what is kept at the batch asked for. */
static void test_pool_forward_keeps_for_its_backward(void **state) {
    (void)state;
    backend kb = *backend_cpu();
    kb.pool_fwd = kp_fwd;
    kb.pool_bwd = kp_bwd;
    kb.pool_keep_bytes = kp_bytes;
    memset(&kt, 0, sizeof kt);
    memset(&kp, 0, sizeof kp);
    kt.max_batch = BATCH;
    run k, c;
    run_init_on(&k, &kb, "resnet18", 32, BACKEND_LAYOUT_NCHW, 1, 1);
    run_init(&c, "resnet18", 32, BACKEND_LAYOUT_NCHW, 1, 1);
    keep_steps(&k, &c, &kp.fwd, &kp.bwd, 1);
    assert_int_equal(kp.eval, 0);
    net_forward(k.nt, k.x, BATCH, 0);
    assert_int_equal(kp.eval, 2); /* the stem's max pool and the adaptive average pool */
    if (kt.err[0]) fail_msg("evaluation: %s", kt.err);
    for (int batch = BATCH; batch <= 4 * BATCH; batch *= 4) {
        size_t want = 0;
        for (int i = 0; i < k.nt->n_nodes; i++) {
            const node *nd = &k.nt->nodes[i];
            char what[64] = "";
            if (strcmp(nd->ops->kind, "pool") == 0) nd->ops->describe(nd, what, sizeof what);
            if (strncmp(what, "max ", 4) != 0) continue; /* the average pool keeps nothing */
            pool_params p = {.mode = POOL_MODE_MAX, .N = batch, .C = nd->C, .P = nd->H, .Q = nd->W};
            want += kp_bytes(NULL, &p);
        }
        expect_estimate_adds(&k, &c, batch, want);
    }
    run_free(&k);
    run_free(&c);
}

/* ---------------------------------------------------------------- the plan */

/* What the plan must leave alone: a batch norm with two consumers, one whose
 * consumer does not come right after it, a ReLU after an add that has
 * another consumer, a batch norm that is the output; and what it takes: a
 * batch norm and the add right after it without a ReLU, and a batch norm
 * feeding a ReLU. */
static void test_fusion_plan(void **state) {
    (void)state;
    net *nt = net_create(backend_cpu(), 4, 3, 3, 4);
    int c0 = net_conv(nt, NET_INPUT, "c0", 4, 3, 1, 1, 0);
    int b1 = net_bn(nt, c0, "b1", 1e-5f); /* consumed twice: alone */
    int r1 = net_relu(nt, b1, "r1");
    int b2 = net_bn(nt, r1, "b2", 1e-5f); /* its add comes after another node: alone */
    int c2 = net_conv(nt, b1, "c2", 4, 1, 1, 0, 0);
    int a2 = net_add(nt, b2, c2, "a2");
    int b3 = net_bn(nt, a2, "b3", 1e-5f); /* + add (whose other input is a2) */
    int a3 = net_add(nt, a2, b3, "a3");   /* consumed twice: its ReLU stays apart */
    int r3 = net_relu(nt, a3, "r3");
    int b4 = net_bn(nt, r3, "b4", 1e-5f); /* + relu */
    int r4 = net_relu(nt, b4, "r4");
    int a4 = net_add(nt, r4, a3, "a4");
    int b5 = net_bn(nt, a4, "b5", 1e-5f); /* followed by fc: alone */
    int fc = net_linear(nt, b5, "fc", 4, 1);
    int b6 = net_bn(nt, fc, "b6", 1e-5f); /* the output: alone */
    assert_int_equal(net_finalize(nt, b6, -1, 2), CNT_OK);
    const node *n = nt->nodes;
    assert_int_equal(n[b1].fuse_add, -1);
    assert_int_equal(n[b1].fuse_relu, -1);
    assert_int_equal(n[r1].fused_into, -1);
    assert_int_equal(n[b2].fuse_add, -1);
    assert_int_equal(n[a2].fused_into, -1);
    assert_int_equal(n[b3].fuse_add, a3);
    assert_int_equal(n[b3].fuse_relu, -1);
    assert_int_equal(n[a3].fused_into, b3);
    assert_int_equal(n[r3].fused_into, -1);
    assert_int_equal(n[b4].fuse_add, -1);
    assert_int_equal(n[b4].fuse_relu, r4);
    assert_int_equal(n[r4].fused_into, b4);
    assert_int_equal(n[b5].fuse_add + n[b5].fuse_relu, -2);
    assert_int_equal(n[b6].fuse_add + n[b6].fuse_relu, -2);
    assert_int_equal(net_fused_groups(nt), 2);
    /* a3 is the group's last node: it has a y (read by r3 and a4); b3 has none */
    assert_non_null(n[a3].y);
    assert_null(n[b3].y);
    assert_null(n[b4].y);
    /* the summary shows the groups */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    net_print_summary(nt, f);
    fclose(f);
    assert_non_null(strstr(buf, "bn+add "));
    assert_non_null(strstr(buf, "bn+relu "));
    assert_non_null(strstr(buf, "fused: 2 batch norms"));
    free(buf);

    /* and the whole net, fused, still trains to the same numbers as unfused:
     * one forward and backward of each */
    net *u = net_create(backend_cpu(), 4, 3, 3, 4);
    net_set_fusion(u, 0);
    int k = net_conv(u, NET_INPUT, "c0", 4, 3, 1, 1, 0);
    int ub1 = net_bn(u, k, "b1", 1e-5f), ur1 = net_relu(u, ub1, "r1"), ub2 = net_bn(u, ur1, "b2", 1e-5f);
    int uc2 = net_conv(u, ub1, "c2", 4, 1, 1, 0, 0), ua2 = net_add(u, ub2, uc2, "a2");
    int ub3 = net_bn(u, ua2, "b3", 1e-5f), ua3 = net_add(u, ua2, ub3, "a3"), ur3 = net_relu(u, ua3, "r3");
    int ub4 = net_bn(u, ur3, "b4", 1e-5f), ur4 = net_relu(u, ub4, "r4"), ua4 = net_add(u, ur4, ua3, "a4");
    int ub5 = net_bn(u, ua4, "b5", 1e-5f), ufc = net_linear(u, ub5, "fc", 4, 1), ub6 = net_bn(u, ufc, "b6", 1e-5f);
    assert_int_equal(net_finalize(u, ub6, -1, 2), CNT_OK);
    net *both[2] = {nt, u};
    rng g;
    rng_seed(&g, 3, 1);
    float *x = dev_normal(nt->be, &g, 2 * 4 * 3 * 3, 0.0), *dl = dev_normal(nt->be, &g, 2 * 4, 0.0);
    for (int s = 0; s < 2; s++) {
        net_init_params(both[s], 11);
        net_forward(both[s], x, 2, 1);
        net_backward(both[s], dl, NULL);
    }
    expect_bitwise(nt->be, "plan net logits", net_logits(nt), net_logits(u), 2 * 4);
    expect_bitwise(nt->be, "plan net gradients", nt->grads, u->grads, nt->n_params);
    expect_bitwise(nt->be, "plan net input gradient", nt->input_grad, u->input_grad, 2 * 4 * 3 * 3);
    nt->be->free(x);
    nt->be->free(dl);
    net_free(u);
    net_free(nt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_ops_equal_composition),
        cmocka_unit_test(test_resnet20_fused_equals_unfused),
        cmocka_unit_test(test_resnet18_fused_equals_unfused),
        cmocka_unit_test(test_fused_forward_keeps_for_its_backward),
        cmocka_unit_test(test_pool_forward_keeps_for_its_backward),
        cmocka_unit_test(test_fusion_plan),
    };
    return cmocka_run_group_tests_name("fusion", tests, NULL, NULL);
}
