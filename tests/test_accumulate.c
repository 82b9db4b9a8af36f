/*
 * tests/test_accumulate.c - gradient accumulation (train.accumulate,
 * train/step.h) in a world of one:
 *   - K micro-batches of b images give the update of one batch of K x b, up
 *     to fp32 rounding, on a net without batch norm (whose statistics are
 *     the micro-batch's, by design), for K = 2, 3 and 4: parameters,
 *     momentum and the step's loss;
 *   - the net hands nothing to the grad hook while it accumulates, and every
 *     value once, with the kept sum added, in the last micro-batch;
 *   - with batch norm and loss scaling, accumulating through a one-rank
 *     allreduce (buckets cut mid-tensor, in backward) leaves the state of
 *     the none version bit for bit: the exchange gets the whole sum.
 * Several ranks, checkpoints inside accumulation: tests/test_dist_train.sh,
 * tests/test_resume.sh.
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
#include "dist/exchange_impl.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/step.h"

enum { C = 3, H = 12, W = 12, CLASSES = 10, TOTAL = 12, STEPS = 3 };

static const optim_opts oo = {.momentum = 0.9f, .weight_decay = 5e-4f};

/* STEPS batches of TOTAL random images and labels, one after the other. */
typedef struct images {
    float x[STEPS * TOTAL * C * H * W];
    int32_t labels[STEPS * TOTAL];
} images;

static images *make_images(void) {
    images *im = cnt_calloc(1, sizeof *im);
    rng r;
    rng_seed(&r, 11, 3);
    for (size_t i = 0; i < sizeof im->x / sizeof im->x[0]; i++) im->x[i] = rng_uniform(&r) * 2 - 1;
    for (int i = 0; i < STEPS * TOTAL; i++) im->labels[i] = (int32_t)rng_below(&r, CLASSES);
    return im;
}

/* images [first, first + n) as a batch */
static batch slice(images *im, int first, int n) {
    return (batch){.n = n, .x = im->x + (size_t)first * C * H * W, .labels = im->labels + first};
}

/* conv (bias) - relu - max-pool - conv - relu - average - linear: every
 * kind of parameter gradient but batch norm's. */
static net *plain_net(int max_batch) {
    net *nt = net_create(backend_cpu(), C, H, W, CLASSES);
    int c1 = net_conv(nt, NET_INPUT, "conv1", 8, 3, 1, 1, 1);
    int r1 = net_relu(nt, c1, "relu1");
    int p1 = net_maxpool(nt, r1, "pool1", 2, 2, 0, 0);
    int c2 = net_conv(nt, p1, "conv2", 16, 3, 1, 1, 0);
    int r2 = net_relu(nt, c2, "relu2");
    int a = net_adaptive_avgpool(nt, r2, "avg", 1, 1);
    int fc = net_linear(nt, a, "fc", CLASSES, 1);
    assert_int_equal(net_finalize(nt, fc, -1, max_batch), CNT_OK);
    net_init_params(nt, 5);
    return nt;
}

static net *resnet20(int max_batch) {
    zoo_options zo = {.dropout = -1.0f, .math = BACKEND_MATH_FP32};
    net *nt = zoo_create(backend_cpu(), "resnet20", &zo, C, H, W, CLASSES, BACKEND_LAYOUT_NCHW, max_batch);
    assert_non_null(nt);
    net_init_params(nt, 42);
    return nt;
}

/* STEPS optimizer steps of TOTAL images each, as K micro-batches through
 * x (attached here) with loss scaling lso; the state into *out, each step's
 * loss into losses[STEPS]. */
static void train_k(net *nt, exchange *x, int K, const loss_scale_opts *lso, step_state *out, float *losses) {
    images *im = make_images();
    int b = TOTAL / K;
    assert_int_equal(exchange_attach(x, nt), CNT_OK);
    step_opts so = {.accumulate = K};
    stepper st;
    stepper_init(&st, nt, x, NULL, &oo, lso, &so, b, C, H * W, 0);
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < K - 1; m++) {
            batch mb = slice(im, s * TOTAL + m * b, b);
            stepper_accumulate(&st, &mb);
        }
        batch last = slice(im, s * TOTAL + (K - 1) * b, b);
        step_result r;
        assert_int_equal(stepper_run(&st, &last, s + 1, 0.05 + 0.02 * s, &r), CNT_OK);
        assert_true(r.applied);
        assert_int_equal(r.n, TOTAL);
        nt->be->download(&losses[s], st.loss, sizeof(float));
    }
    stepper_state_alloc(&st, out);
    stepper_save(&st, out);
    stepper_free(&st);
    free(im);
}

/* max |a - b| over max |b|: fp32 rounding of sums in another order. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

static void test_micro_batches_equal_one_batch(void **state) {
    (void)state;
    loss_scale_opts plain = {.mode = LOSS_SCALE_NONE};
    net *one = plain_net(TOTAL);
    step_state want;
    float want_loss[STEPS];
    train_k(one, exchange_none(), 1, &plain, &want, want_loss);
    /* the steps moved the parameters well beyond the tolerance below, so an
     * update that lost a micro-batch or a factor of K could not pass */
    net *init = plain_net(TOTAL);
    assert_true(rel_diff(want.hs.params, init->params, init->n_params) > 1e-3);
    net_free(init);
    const int ks[] = {2, 3, 4};
    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
        net *nt = plain_net(TOTAL / ks[k]);
        step_state got;
        float got_loss[STEPS];
        train_k(nt, exchange_none(), ks[k], &plain, &got, got_loss);
        double dp = rel_diff(got.hs.params, want.hs.params, nt->n_params);
        double dm = rel_diff(got.hs.momentum, want.hs.momentum, nt->n_params);
        print_message("K = %d: parameters %.2e, momentum %.2e apart\n", ks[k], dp, dm);
        assert_true(dp < 1e-5);
        assert_true(dm < 1e-5);
        for (int s = 0; s < STEPS; s++) assert_true(fabsf(got_loss[s] - want_loss[s]) <= 1e-5f * want_loss[s]);
        host_state_free(&got.hs);
        net_free(nt);
    }
    host_state_free(&want.hs);
    net_free(one);
}

/* The grad hook's calls: values handed over, and calls. */
typedef struct handed {
    size_t values;
    int calls;
} handed;

static void count_hook(void *ctx, size_t offset, size_t count) {
    (void)offset;
    handed *h = ctx;
    h->values += count;
    h->calls++;
}

static void test_hook_only_in_last_micro_batch(void **state) {
    (void)state;
    enum { B = 4 };
    images *im = make_images();
    net *nt = plain_net(B);
    handed h = {0};
    net_set_grad_hook(nt, count_hook, &h);
    loss_scale_opts plain = {.mode = LOSS_SCALE_NONE};
    step_opts so = {.accumulate = 3};
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &plain, &so, B, C, H * W, 0);
    batch b0 = slice(im, 0, B), b1 = slice(im, B, B), b2 = slice(im, 2 * B, B);
    stepper_accumulate(&st, &b0);
    stepper_accumulate(&st, &b1);
    assert_int_equal(h.calls, 0);
    step_result r;
    assert_int_equal(stepper_run(&st, &b2, 1, 0.1, &r), CNT_OK);
    assert_int_equal(h.values, nt->n_params);
    assert_int_equal(h.calls, 3); /* one per layer with parameters: conv1, conv2, fc */
    assert_int_equal(nt->grads_mode, NET_GRADS_HAND_ON);

    /* a plain backward afterwards hands over its own gradients only */
    memset(&h, 0, sizeof h);
    net_forward(nt, b0.x, B, 1);
    float *dl = cnt_calloc((size_t)B * CLASSES, sizeof(float));
    dl[0] = 1.0f;
    net_backward(nt, dl, NULL);
    assert_int_equal(h.values, nt->n_params);
    stepper_free(&st);
    free(dl);
    net_free(nt);
    free(im);
}

static exchange *one_rank_allreduce(dist_backend transport) {
    exchange_opts o = {.mode = DIST_MODE_ALLREDUCE, .backend = transport};
    o.reducer = (reducer_opts){.first_bucket = 1000, .bucket = 7000, .overlap = 1};
    exchange *x = exchange_allreduce_create(&o);
    assert_int_equal(exchange_connect(x, backend_cpu()), CNT_OK);
    return x;
}

static void assert_same_state(const step_state *a, const step_state *b, const net *shape) {
    assert_memory_equal(a->hs.params, b->hs.params, shape->n_params * sizeof(float));
    assert_memory_equal(a->hs.buffers, b->hs.buffers, shape->n_buffers * sizeof(float));
    assert_memory_equal(a->hs.momentum, b->hs.momentum, shape->n_params * sizeof(float));
    assert_true(a->loss_scale == b->loss_scale && a->skipped == b->skipped);
}

static void test_exchange_gets_the_sum(void **state) {
    (void)state;
    loss_scale_opts scaled = {.mode = LOSS_SCALE_DYNAMIC, .scale = 1024, .window = 2};
    step_state want;
    float want_loss[STEPS], got_loss[STEPS];
    net *a = resnet20(TOTAL / 2);
    train_k(a, exchange_none(), 2, &scaled, &want, want_loss);
    const dist_backend transports[] = {DIST_BACKEND_MPI, DIST_BACKEND_RING};
    for (int t = 0; t < 2; t++) {
        net *nt = resnet20(TOTAL / 2);
        exchange *x = one_rank_allreduce(transports[t]);
        step_state got;
        train_k(nt, x, 2, &scaled, &got, got_loss);
        assert_same_state(&want, &got, nt);
        assert_memory_equal(want_loss, got_loss, sizeof want_loss);
        host_state_free(&got.hs);
        exchange_free(x, 0);
        net_free(nt);
    }
    host_state_free(&want.hs);
    net_free(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_micro_batches_equal_one_batch),
        cmocka_unit_test(test_hook_only_in_last_micro_batch),
        cmocka_unit_test(test_exchange_gets_the_sum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
