/*
 * tests/test_net.c - the network container on the CPU backend: parameter
 * layout in reverse forward order, the gradient hook, gradient accumulation
 * for tensors with several consumers, a whole-network finite-difference check
 * through every layer kind, determinism, and builder errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/rng.h"
#include "model/net.h"
#include "tests/support/testutil.h"

#define BATCH 3
#define CLASSES 5

/* A small net that uses every layer kind, with a tensor consumed three times
 * (relu1 feeds a conv, a shortcut and a concat branch):
 *   conv -> bn -> relu1 -> conv a (stride 2) -> bn -> relu ------+
 *                        relu1 -> shortcut (option A, /2, 8 -> 12) ---- add -> concat(add, avgpool(relu1 /2))
 *   -> maxpool 3x3/2 ceil -> conv 1x7 -> adaptive avg 2x2 -> dropout -> linear
 * `width` multiplies the channel counts: 4 makes them 32, 48 and 80, whole
 * blocks of the BLOCKED layout (8 or 16), with the shortcut's padding of 8
 * channels half a block of 16. */
static net *build_test_net_wide(uint64_t seed, float dropout_p, int layout, int width) {
    net *nt = net_create(backend_cpu(), 2, 9, 9, CLASSES);
    net_set_layout(nt, layout);
    int c1 = net_conv(nt, NET_INPUT, "conv1", 8 * width, 3, 1, 1, 0); /* no bias: BN would cancel it */
    int b1 = net_bn(nt, c1, "bn1", 1e-5f);
    int r1 = net_relu(nt, b1, "relu1");
    int ca = net_conv(nt, r1, "a.conv", 12 * width, 3, 2, 1, 0);
    int ba = net_bn(nt, ca, "a.bn", 1e-3f);
    int ra = net_relu(nt, ba, "a.relu");
    int sc = net_shortcut_pad(nt, r1, "shortcut", 12 * width, 2);
    int ad = net_add(nt, ra, sc, "add");
    int ap = net_avgpool(nt, r1, "avg", 3, 2, 1, 1);
    int ins[2] = {ad, ap};
    int cat = net_concat(nt, ins, 2, "cat");
    int mp = net_maxpool(nt, cat, "maxpool", 3, 2, 0, 1);
    int c7 = net_conv_rect(nt, mp, "conv17", 6, 1, 3, 1, 1, 0, 1, 1);
    int gp = net_adaptive_avgpool(nt, c7, "gap", 2, 2);
    int dr = net_dropout(nt, gp, "drop", dropout_p);
    int fc = net_linear(nt, dr, "fc", CLASSES, 1);
    assert_int_equal(net_finalize(nt, fc, -1, BATCH), CNT_OK);
    net_init_params(nt, seed);
    return nt;
}

static net *build_test_net_layout(uint64_t seed, float dropout_p, int layout) {
    return build_test_net_wide(seed, dropout_p, layout, 1);
}

static net *build_test_net(uint64_t seed, float dropout_p) {
    return build_test_net_layout(seed, dropout_p, BACKEND_LAYOUT_NCHW);
}

typedef struct fixture {
    net *nt;
    float *x;       /* device input */
    int32_t *labels;
    float *loss;
    float *dlogits;
    uint64_t dropout_seed;
} fixture;

static void fixture_init_wide(fixture *f, float dropout_p, int layout, int width) {
    f->nt = build_test_net_wide(7, dropout_p, layout, width);
    const backend *be = f->nt->be;
    rng r;
    rng_seed(&r, 99, 1);
    size_t nx = (size_t)BATCH * 2 * 9 * 9;
    double *xh = tu_alloc(nx);
    tu_fill_normal(&r, xh, nx, 0.0, 1.0);
    f->x = tu_dev_from_double(be, xh, nx);
    free(xh);
    int32_t lab[BATCH] = {1, 4, 0};
    f->labels = be->alloc(sizeof lab);
    be->upload(f->labels, lab, sizeof lab);
    f->loss = be->alloc(sizeof(float));
    f->dlogits = be->alloc((size_t)BATCH * CLASSES * sizeof(float));
    f->dropout_seed = f->nt->dropout_seed;
}

static void fixture_init_layout(fixture *f, float dropout_p, int layout) {
    fixture_init_wide(f, dropout_p, layout, 1);
}

static void fixture_init(fixture *f, float dropout_p) { fixture_init_layout(f, dropout_p, BACKEND_LAYOUT_NCHW); }

static void fixture_free(fixture *f) {
    const backend *be = f->nt->be;
    be->free(f->x);
    be->free(f->labels);
    be->free(f->loss);
    be->free(f->dlogits);
    net_free(f->nt);
}

/* Training-mode loss with the dropout mask fixed (the seed is reset, so every
 * evaluation draws the same mask). */
static double fixture_loss(fixture *f) {
    f->nt->dropout_seed = f->dropout_seed;
    net_forward(f->nt, f->x, BATCH, 1);
    f->nt->be->softmax_xent(BATCH, CLASSES, net_logits(f->nt), f->labels, 0.1f, f->loss, f->dlogits);
    float l;
    f->nt->be->download(&l, f->loss, sizeof l);
    return l;
}

static void test_layout_reverse_order(void **state) {
    (void)state;
    net *nt = build_test_net(1, 0.0f);
    /* first registered tensor ends the buffer, last registered starts it */
    const param_info *first = &nt->param_info[0];
    const param_info *last = &nt->param_info[nt->n_param_tensors - 1];
    assert_string_equal(first->name, "conv1.weight");
    assert_string_equal(last->name, "fc.bias");
    assert_int_equal(last->offset, 0);
    assert_int_equal(first->offset + first->count, nt->n_params);
    size_t expect = nt->n_params;
    for (int i = 0; i < nt->n_param_tensors; i++) {
        expect -= nt->param_info[i].count;
        assert_int_equal(nt->param_info[i].offset, expect);
    }
    assert_int_equal(net_find_param(nt, "a.bn.bias"), 5);
    assert_int_equal(net_find_param(nt, "nope"), -1);
    /* parameter count by hand */
    size_t n = (8 * 2 * 9) + 16 + (12 * 8 * 9) + 24 + (6 * 20 * 3 + 6) + (CLASSES * 24 + CLASSES);
    assert_int_equal(nt->n_params, n);
    assert_int_equal(nt->n_buffers, 2 * 8 + 2 * 12);
    net_free(nt);
}

typedef struct hook_log {
    size_t next; /* where the next slice must start */
    int calls;
    int ordered;
} hook_log;

static void hook(void *ctx, size_t offset, size_t count) {
    hook_log *h = ctx;
    if (offset != h->next) h->ordered = 0;
    h->next = offset + count;
    h->calls++;
}

static void test_grad_hook_covers_buffer_in_order(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 0.0f);
    hook_log h = {0, 0, 1};
    net_set_grad_hook(f.nt, hook, &h);
    fixture_loss(&f);
    net_backward(f.nt, f.dlogits, NULL);
    /* Backward produces gradients from offset 0 upwards, contiguously. */
    assert_true(h.ordered);
    assert_int_equal(h.next, f.nt->n_params);
    assert_int_equal(h.calls, 6); /* conv1, bn1, a.conv, a.bn, conv17, fc: nodes with parameters */
    fixture_free(&f);
}

/* The node hooks: with a begin hook, every node's pass is bracketed by its
 * begin and its end call, nothing between them, forward in node order and
 * backward in reverse; without one (or after net_set_node_hook(NULL)),
 * only the end calls, or none. */
typedef struct bracket_log {
    int calls, open, bad; /* open: the node whose begin came last, -1: none */
    int seq[2 * 64];      /* node indices in call order (begin as i, end as ~i) */
    const node *nodes;
} bracket_log;

static void bracket_begin(void *ctx, const node *nd, int backward) {
    (void)backward;
    bracket_log *b = ctx;
    if (b->open >= 0) b->bad = 1;
    b->open = (int)(nd - b->nodes);
    if (b->calls < 2 * 64) b->seq[b->calls] = b->open;
    b->calls++;
}

static void bracket_end(void *ctx, const node *nd, int backward, double t0, double t1) {
    (void)backward;
    bracket_log *b = ctx;
    int i = (int)(nd - b->nodes);
    if (t1 < t0) b->bad = 1;
    if (b->open != -2 && b->open != i) b->bad = 1; /* -2: no begin hook: ends only */
    if (b->open != -2) b->open = -1;
    if (b->calls < 2 * 64) b->seq[b->calls] = ~i;
    b->calls++;
}

static void test_node_begin_hook(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 0.0f);
    int n = f.nt->n_nodes;
    assert_true(n <= 32);
    bracket_log b = {.open = -1, .nodes = f.nt->nodes};
    net_set_node_hook(f.nt, bracket_end, &b);
    net_set_node_begin_hook(f.nt, bracket_begin);
    fixture_loss(&f);
    net_backward(f.nt, f.dlogits, NULL);
    assert_false(b.bad);
    assert_int_equal(b.calls, 4 * n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(b.seq[2 * i], i);                  /* forward, in order */
        assert_int_equal(b.seq[2 * i + 1], ~i);
        assert_int_equal(b.seq[2 * n + 2 * i], n - 1 - i); /* backward, reversed */
        assert_int_equal(b.seq[2 * n + 2 * i + 1], ~(n - 1 - i));
    }
    /* without the begin hook: ends only */
    net_set_node_begin_hook(f.nt, NULL);
    bracket_log e = {.open = -2, .nodes = f.nt->nodes};
    net_set_node_hook(f.nt, bracket_end, &e);
    fixture_loss(&f);
    assert_false(e.bad);
    assert_int_equal(e.calls, n);
    /* no node hook: the begin hook is not called either */
    bracket_log z = {.open = -1, .nodes = f.nt->nodes};
    net_set_node_hook(f.nt, NULL, NULL);
    net_set_node_begin_hook(f.nt, bracket_begin);
    f.nt->node_hook_ctx = &z;
    fixture_loss(&f);
    assert_int_equal(z.calls, 0);
    net_set_node_begin_hook(f.nt, NULL);
    fixture_free(&f);
}

/* Every parameter's gradient (a sample of each tensor) against central
 * differences of the float network. This checks the wiring (offsets, gradient
 * accumulation, which tensor each layer reads); the precision of each op's
 * backward is checked in double in test_gradcheck.c. A float network with ReLU
 * and max-pool kinks gives noisy single differences, so each tensor is judged
 * by the relative L2 error of its sampled gradient, which a wiring error
 * (a missing or doubled contribution, a wrong slice) pushes far above 5%. */
#define FD_POINTS 16
static void check_net_gradients_wide(float dropout_p, int layout, int width) {
    fixture f;
    fixture_init_wide(&f, dropout_p, layout, width);
    net *nt = f.nt;
    const backend *be = nt->be;
    fixture_loss(&f);
    net_backward(nt, f.dlogits, NULL);
    float *params = tu_alloc_f(nt->n_params);
    float *grads = tu_alloc_f(nt->n_params);
    be->download(params, nt->params, nt->n_params * sizeof(float));
    be->download(grads, nt->grads, nt->n_params * sizeof(float));
    rng r;
    rng_seed(&r, 3, 3);
    const double eps = 1e-3;
    for (int t = 0; t < nt->n_param_tensors; t++) {
        const param_info *pi = &nt->param_info[t];
        int k = pi->count < FD_POINTS ? (int)pi->count : FD_POINTS;
        double analytic[FD_POINTS], numeric[FD_POINTS], diff2 = 0, norm2 = 0;
        for (int j = 0; j < k; j++) {
            size_t i = pi->offset + (pi->count <= FD_POINTS ? (size_t)j : rng_below(&r, (uint32_t)pi->count));
            float orig = params[i];
            float v = (float)(orig + eps);
            be->upload(nt->params + i, &v, sizeof v);
            double lp = fixture_loss(&f);
            v = (float)(orig - eps);
            be->upload(nt->params + i, &v, sizeof v);
            double lm = fixture_loss(&f);
            be->upload(nt->params + i, &orig, sizeof orig);
            numeric[j] = (lp - lm) / (2 * eps);
            analytic[j] = grads[i];
            diff2 += (numeric[j] - analytic[j]) * (numeric[j] - analytic[j]);
            norm2 += numeric[j] * numeric[j];
        }
        double rel = sqrt(diff2) / fmax(sqrt(norm2), 1e-3);
        if (rel > 0.05) {
            /* the shared helper prints the element-wise report */
            tu_check_close(pi->name, numeric, analytic, (size_t)k, 5e-2, 1e-3, 1);
            fail_msg("%s: relative L2 error %.3g of the sampled gradient exceeds 0.05", pi->name, rel);
        }
    }
    free(params);
    free(grads);
    fixture_free(&f);
}

static void check_net_gradients(float dropout_p, int layout) { check_net_gradients_wide(dropout_p, layout, 1); }

static void test_net_gradients(void **state) {
    (void)state;
    check_net_gradients(0.0f, BACKEND_LAYOUT_NCHW);
}

static void test_net_gradients_with_dropout(void **state) {
    (void)state;
    check_net_gradients(0.4f, BACKEND_LAYOUT_NCHW);
}

/* The finite-difference check with every activation channels last: a layer
 * that indexed NHWC tensors as NCHW (the linear layer's flatten of the 2x2
 * pool, the concat, the shortcut's channel padding) gets wrong gradients. */
static void test_net_gradients_nhwc(void **state) {
    (void)state;
    check_net_gradients(0.4f, BACKEND_LAYOUT_NHWC);
}

/* The same check in BLOCKED, with every channel count in whole blocks (and
 * the shortcut's half block): a layer that indexed blocked tensors as NCHW
 * gets wrong gradients. */
static void test_net_gradients_blocked(void **state) {
    (void)state;
    if (backend_cpu()->block_c == 0) skip(); /* built without oneDNN */
    check_net_gradients_wide(0.4f, BACKEND_LAYOUT_BLOCKED, 4);
    check_net_gradients_wide(0.0f, BACKEND_LAYOUT_BLOCKED, 1); /* mixed: some counts blocked, some not */
}

/* The n device floats at a and b are equal up to summation order: within
 * relative tolerance rtol, absolute rtol / 10. */
static void expect_same(const backend *be, const char *what, const float *a, const float *b, size_t n, double rtol) {
    double *ea = tu_alloc(n), *eb = tu_alloc(n);
    tu_dev_to_double(be, a, ea, n);
    tu_dev_to_double(be, b, eb, n);
    tu_assert_close(what, ea, eb, n, rtol, rtol / 10);
    free(ea);
    free(eb);
}

/* An NCHW tensor (NCHW net) and one in `layout` of C x HW per image hold
 * the same values. */
static void expect_same_layout(const backend *be, const char *what, const float *nchw, const float *other,
                               int layout, int C, int HW, double rtol) {
    size_t n = (size_t)BATCH * C * HW;
    float *t = be->alloc(n * sizeof(float));
    be->convert_layout(BATCH, C, HW, other, BACKEND_DTYPE_FP32, t, BACKEND_DTYPE_FP32, layout, 0, 0);
    expect_same(be, what, nchw, t, n, rtol);
    be->free(t);
}

/* A net in `layout` computes the same function as in NCHW: the same loss,
 * logits, parameter gradients, running statistics and (converted)
 * activations and input gradient, from the same weights and batch. NHWC
 * runs the NCHW kernels between transposes (the same sums); BLOCKED runs
 * oneDNN's, whose sums in another order drift further through two steps and
 * batch norm's backward, so it gets rtol 1e-4 (a wiring error is off by far
 * more). */
static void layout_matches_nchw(int layout, int width) {
    double rtol = layout == BACKEND_LAYOUT_BLOCKED ? 1e-4 : 1e-5;
    fixture a, b;
    fixture_init_wide(&a, 0.3f, BACKEND_LAYOUT_NCHW, width);
    fixture_init_wide(&b, 0.3f, layout, width);
    const backend *be = a.nt->be;
    tu_grads ga, gb;
    tu_grads_capture(a.nt, &ga);
    tu_grads_capture(b.nt, &gb);
    for (int step = 0; step < 2; step++) {
        double la = fixture_loss(&a), lb = fixture_loss(&b);
        assert_true(fabs(la - lb) <= 1e-6 * fabs(la));
        net_backward(a.nt, a.dlogits, NULL);
        net_backward(b.nt, b.dlogits, NULL);
        for (int i = 0; i < a.nt->n_nodes; i++) {
            const node *na = &a.nt->nodes[i];
            char what[160];
            snprintf(what, sizeof what, "%s y", na->name);
            expect_same_layout(be, what, ga.y[i], gb.y[i], layout, na->C, na->H * na->W, rtol);
            snprintf(what, sizeof what, "%s dy", na->name);
            expect_same_layout(be, what, ga.dy[i], gb.dy[i], layout, na->C, na->H * na->W, rtol);
        }
        expect_same(be, "parameter gradients", a.nt->grads, b.nt->grads, a.nt->n_params, rtol);
        expect_same(be, "running statistics", a.nt->buffers, b.nt->buffers, a.nt->n_buffers, rtol);
        expect_same_layout(be, "input gradient", a.nt->input_grad, b.nt->input_grad, layout, 2, 9 * 9, rtol);
        /* a step of plain SGD on both, so the second round starts elsewhere */
        be->axpy(a.nt->n_params, -0.05f, a.nt->grads, a.nt->params, 1);
        be->axpy(b.nt->n_params, -0.05f, b.nt->grads, b.nt->params, 1);
    }
    tu_grads_free(&ga);
    tu_grads_free(&gb);
    /* evaluation mode (running statistics, no dropout) */
    net_forward(a.nt, a.x, BATCH, 0);
    net_forward(b.nt, b.x, BATCH, 0);
    expect_same(be, "eval logits", net_logits(a.nt), net_logits(b.nt), (size_t)BATCH * CLASSES, rtol);
    fixture_free(&a);
    fixture_free(&b);
}

static void test_nhwc_matches_nchw(void **state) {
    (void)state;
    layout_matches_nchw(BACKEND_LAYOUT_NHWC, 1);
}

static void test_blocked_matches_nchw(void **state) {
    (void)state;
    if (backend_cpu()->block_c == 0) skip(); /* built without oneDNN */
    layout_matches_nchw(BACKEND_LAYOUT_BLOCKED, 4);
    layout_matches_nchw(BACKEND_LAYOUT_BLOCKED, 1);
}

/* ---- two nets, two contexts, one process ----
 * Net A (NCHW, fp32) and net B (BLOCKED where the backend has it, else NHWC;
 * bf16) interleaved as tightly as the interface allows: A's node hook runs a
 * whole training step of B (forward, loss, backward) after A's middle node,
 * once in A's forward and once in A's backward, so A's later layers run
 * right after B's. Each must compute bit for bit what it computes alone: no
 * op may depend on which net called the backend last (each passes its own
 * context, model/backend.h). */
typedef struct interleave {
    const net *host; /* the net whose passes the other's steps run inside */
    int at;          /* ...after this node of it, forward and backward */
    fixture *other;
    int runs;
} interleave;

static void fixture_step(fixture *f) {
    fixture_loss(f);
    net_backward(f->nt, f->dlogits, NULL);
}

static void interleave_hook(void *ctx, const node *nd, int backward, double t0, double t1) {
    (void)backward;
    (void)t0;
    (void)t1;
    interleave *il = ctx;
    if (nd - il->host->nodes != il->at) return;
    fixture_step(il->other);
    il->runs++;
}

/* What a net leaves after its passes: logits, gradients, running statistics, input gradient. */
typedef struct net_result {
    float *logits, *grads, *buffers, *input_grad;
} net_result;

static net_result net_result_of(const net *nt) {
    const backend *be = nt->be;
    size_t nl = (size_t)BATCH * CLASSES, ni = (size_t)BATCH * nt->in_c * nt->in_h * nt->in_w;
    net_result r = {tu_alloc_f(nl), tu_alloc_f(nt->n_params), tu_alloc_f(nt->n_buffers), tu_alloc_f(ni)};
    be->download(r.logits, net_logits(nt), nl * sizeof(float));
    be->download(r.grads, nt->grads, nt->n_params * sizeof(float));
    be->download(r.buffers, nt->buffers, nt->n_buffers * sizeof(float));
    be->download(r.input_grad, nt->input_grad, ni * sizeof(float));
    return r;
}

static void net_result_expect_equal(const char *who, const net *nt, const net_result *a, const net_result *b) {
    char what[96];
    snprintf(what, sizeof what, "%s: logits", who);
    tu_assert_bitwise_equal_f(what, a->logits, b->logits, (size_t)BATCH * CLASSES);
    snprintf(what, sizeof what, "%s: parameter gradients", who);
    tu_assert_bitwise_equal_f(what, a->grads, b->grads, nt->n_params);
    snprintf(what, sizeof what, "%s: running statistics", who);
    tu_assert_bitwise_equal_f(what, a->buffers, b->buffers, nt->n_buffers);
    snprintf(what, sizeof what, "%s: input gradient", who);
    tu_assert_bitwise_equal_f(what, a->input_grad, b->input_grad, (size_t)BATCH * nt->in_c * nt->in_h * nt->in_w);
}

static void net_result_free(net_result *r) {
    free(r->logits);
    free(r->grads);
    free(r->buffers);
    free(r->input_grad);
}

/* Net B's fixture: the other layout, in `math`. */
static void fixture_init_b(fixture *f, int math) {
    int layout = backend_cpu()->block_c > 0 ? BACKEND_LAYOUT_BLOCKED : BACKEND_LAYOUT_NHWC;
    fixture_init_wide(f, 0.3f, layout, 4);
    net_set_math(f->nt, math);
}

static void test_two_nets_interleaved(void **state) {
    (void)state;
    /* alone: A one step, B two */
    fixture a, b;
    fixture_init_wide(&a, 0.3f, BACKEND_LAYOUT_NCHW, 4);
    fixture_init_b(&b, BACKEND_MATH_BF16);
    fixture_step(&a);
    net_result a_alone = net_result_of(a.nt);
    fixture_step(&b);
    fixture_step(&b);
    net_result b_alone = net_result_of(b.nt);
    fixture_free(&b);
    /* B's math mode took effect: in fp32 its gradients differ */
    fixture_init_b(&b, BACKEND_MATH_FP32);
    fixture_step(&b);
    fixture_step(&b);
    net_result b_fp32 = net_result_of(b.nt);
    assert_true(memcmp(b_fp32.grads, b_alone.grads, b.nt->n_params * sizeof(float)) != 0);
    net_result_free(&b_fp32);
    fixture_free(&a);
    fixture_free(&b);
    /* interleaved: B's two steps inside A's forward and A's backward */
    fixture_init_wide(&a, 0.3f, BACKEND_LAYOUT_NCHW, 4);
    fixture_init_b(&b, BACKEND_MATH_BF16);
    interleave il = {a.nt, a.nt->n_nodes / 2, &b, 0};
    net_set_node_hook(a.nt, interleave_hook, &il);
    fixture_step(&a);
    assert_int_equal(il.runs, 2);
    net_result a_mixed = net_result_of(a.nt), b_mixed = net_result_of(b.nt);
    net_result_expect_equal("net A (NCHW, fp32) interleaved with B", a.nt, &a_alone, &a_mixed);
    net_result_expect_equal("net B (bf16) interleaved with A", b.nt, &b_alone, &b_mixed);
    net_result_free(&a_alone);
    net_result_free(&b_alone);
    net_result_free(&a_mixed);
    net_result_free(&b_mixed);
    fixture_free(&a);
    fixture_free(&b);
}

static void test_deterministic(void **state) {
    (void)state;
    fixture a, b;
    fixture_init(&a, 0.3f);
    fixture_init(&b, 0.3f);
    size_t n = a.nt->n_params;
    float *pa = tu_alloc_f(n), *pb = tu_alloc_f(n);
    a.nt->be->download(pa, a.nt->params, n * sizeof(float));
    b.nt->be->download(pb, b.nt->params, n * sizeof(float));
    tu_assert_bitwise_equal_f("initial parameters", pa, pb, n);
    fixture_loss(&a);
    net_backward(a.nt, a.dlogits, NULL);
    fixture_loss(&b);
    net_backward(b.nt, b.dlogits, NULL);
    a.nt->be->download(pa, a.nt->grads, n * sizeof(float));
    b.nt->be->download(pb, b.nt->grads, n * sizeof(float));
    tu_assert_bitwise_equal_f("gradients", pa, pb, n);
    /* a different seed gives different weights */
    net *c = build_test_net(8, 0.3f);
    c->be->download(pb, c->params, n * sizeof(float));
    assert_true(memcmp(pa, pb, n * sizeof(float)) != 0);
    net_free(c);
    free(pa);
    free(pb);
    fixture_free(&a);
    fixture_free(&b);
}

static void test_eval_uses_running_stats(void **state) {
    (void)state;
    /* With fresh running stats (mean 0, var 1), eval-mode BN is an affine
     * identity; after training forwards the outputs change. */
    fixture f;
    fixture_init(&f, 0.0f);
    net *nt = f.nt;
    size_t nl = (size_t)BATCH * CLASSES;
    float *l0 = tu_alloc_f(nl), *l1 = tu_alloc_f(nl), *l2 = tu_alloc_f(nl);
    net_forward(nt, f.x, BATCH, 0);
    nt->be->download(l0, net_logits(nt), nl * sizeof(float));
    net_forward(nt, f.x, BATCH, 0);
    nt->be->download(l1, net_logits(nt), nl * sizeof(float));
    tu_assert_bitwise_equal_f("eval is repeatable", l0, l1, nl);
    fixture_loss(&f); /* a training forward updates running statistics */
    net_forward(nt, f.x, BATCH, 0);
    nt->be->download(l2, net_logits(nt), nl * sizeof(float));
    assert_true(memcmp(l0, l2, nl * sizeof(float)) != 0);
    /* a smaller batch gives the same per-sample eval outputs */
    net_forward(nt, f.x, 1, 0);
    nt->be->download(l1, net_logits(nt), CLASSES * sizeof(float));
    double e[CLASSES], a[CLASSES];
    tu_to_double(l2, e, CLASSES);
    tu_to_double(l1, a, CLASSES);
    tu_assert_close("batch 1 eval", e, a, CLASSES, 1e-5, 1e-6);
    free(l0);
    free(l1);
    free(l2);
    fixture_free(&f);
}

static void test_builder_errors(void **state) {
    (void)state;
    /* input too small: the error names the layer, later calls fail too */
    net *nt = net_create(backend_cpu(), 1, 4, 4, 3);
    int c = net_conv(nt, NET_INPUT, "big", 4, 7, 1, 0, 0);
    assert_int_equal(c, CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "big"));
    assert_non_null(strstr(cnt_err_msg(), "too small"));
    assert_int_equal(net_relu(nt, NET_INPUT, "r"), CNT_ERR);
    assert_int_equal(net_finalize(nt, 0, -1, 2), CNT_ERR);
    net_free(nt);

    /* an unused branch */
    nt = net_create(backend_cpu(), 1, 4, 4, 3);
    int r = net_relu(nt, NET_INPUT, "r");
    net_relu(nt, r, "dangling");
    int fc = net_linear(nt, r, "fc", 3, 1);
    assert_int_equal(net_finalize(nt, fc, -1, 2), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "dangling"));
    net_free(nt);

    /* logits of the wrong size */
    nt = net_create(backend_cpu(), 1, 4, 4, 3);
    fc = net_linear(nt, NET_INPUT, "fc", 4, 1);
    assert_int_equal(net_finalize(nt, fc, -1, 2), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "fc"));
    net_free(nt);

    /* shapes that do not match */
    nt = net_create(backend_cpu(), 2, 4, 4, 3);
    int a = net_conv(nt, NET_INPUT, "a", 3, 3, 1, 1, 0);
    int b = net_conv(nt, NET_INPUT, "b", 3, 3, 2, 1, 0);
    assert_int_equal(net_add(nt, a, b, "sum"), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "sum"));
    net_free(nt);

    /* duplicate names */
    nt = net_create(backend_cpu(), 2, 4, 4, 3);
    net_relu(nt, NET_INPUT, "x");
    assert_int_equal(net_relu(nt, NET_INPUT, "x"), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "duplicate"));
    net_free(nt);
}

static void test_summary(void **state) {
    (void)state;
    net *nt = build_test_net(1, 0.0f);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    net_print_summary(nt, f);
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "params: %zu\n", nt->n_params);
    assert_non_null(strstr(buf, want));
    assert_non_null(strstr(buf, "forward GFLOPs/image: "));
    assert_non_null(strstr(buf, "conv17"));
    /* conv1 alone: 2 * 8*2*9 * 81 FLOPs */
    assert_true(net_flops_per_image(nt) > 2.0 * 8 * 2 * 9 * 81);
    free(buf);
    net_free(nt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_reverse_order),
        cmocka_unit_test(test_grad_hook_covers_buffer_in_order),
        cmocka_unit_test(test_node_begin_hook),
        cmocka_unit_test(test_net_gradients),
        cmocka_unit_test(test_net_gradients_with_dropout),
        cmocka_unit_test(test_net_gradients_nhwc),
        cmocka_unit_test(test_nhwc_matches_nchw),
        cmocka_unit_test(test_net_gradients_blocked),
        cmocka_unit_test(test_blocked_matches_nchw),
        cmocka_unit_test(test_two_nets_interleaved),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_eval_uses_running_stats),
        cmocka_unit_test(test_builder_errors),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests_name("net", tests, NULL, NULL);
}
