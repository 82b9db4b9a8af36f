/*
 * tests/test_exchange.c - the exchange (dist/exchange.h) in a world of one,
 * driven by the training step (train/step.h):
 *   - the none version and a one-rank allreduce version (the reducer over
 *     MPI_Allreduce and over our ring, buckets cut mid-tensor, overlap on
 *     and off, with and without loss scaling) leave identical parameters,
 *     momentum and batch-norm statistics, bit for bit, after several steps;
 *   - the stepper's state saved for a checkpoint and restored into a fresh
 *     stepper continues exactly as the run that was not interrupted;
 *   - what each version keeps beside the net (the memory check's input),
 *     and its traits;
 *   - what dist.backend = auto runs through host memory, by the job's shape.
 * Several ranks and parameter servers: tests/test_dist_train.sh,
 * tests/test_ps.sh.
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
#include "dist/exchange_impl.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/step.h"

enum { C = 3, H = 16, W = 16, CLASSES = 10, BATCH = 4, STEPS = 4 };

/* A fixed batch of random images and labels. */
typedef struct fixture {
    float x[BATCH * C * H * W];
    int32_t labels[BATCH];
    batch b;
} fixture;

static void make_batch(fixture *f) {
    rng r;
    rng_seed(&r, 7, 1);
    for (size_t i = 0; i < sizeof f->x / sizeof f->x[0]; i++) f->x[i] = rng_uniform(&r) * 2 - 1;
    for (int i = 0; i < BATCH; i++) f->labels[i] = (int32_t)rng_below(&r, CLASSES);
    f->b = (batch){.n = BATCH, .x = f->x, .labels = f->labels};
}

static net *make_net(void) {
    zoo_options zo = {.dropout = -1.0f, .math = BACKEND_MATH_FP32};
    net *nt = zoo_create(backend_cpu(), "resnet20", &zo, C, H, W, CLASSES, BACKEND_LAYOUT_NCHW, BATCH);
    assert_non_null(nt);
    net_init_params(nt, 42);
    return nt;
}

static const optim_opts oo = {.momentum = 0.9f, .weight_decay = 5e-4f};

/* The state after `steps` steps of the fixture's batch through x (attached
 * to the net here), at a learning rate that changes per step. */
static void train_with(exchange *x, const loss_scale_opts *lso, int steps, step_state *out) {
    fixture *f = cnt_calloc(1, sizeof *f);
    make_batch(f);
    net *nt = make_net();
    assert_int_equal(exchange_attach(x, nt), CNT_OK);
    step_opts so = {0};
    stepper st;
    stepper_init(&st, nt, x, NULL, &oo, lso, &so, BATCH, C, H * W, 0);
    for (int s = 1; s <= steps; s++) {
        step_result r;
        assert_int_equal(stepper_run(&st, &f->b, s, 0.05 + 0.01 * s, &r), CNT_OK);
        assert_true(r.applied);
    }
    stepper_state_alloc(&st, out);
    stepper_save(&st, out);
    stepper_free(&st);
    net_free(nt);
    free(f);
}

static void assert_same_state(const step_state *a, const step_state *b, const net *shape) {
    assert_memory_equal(a->hs.params, b->hs.params, shape->n_params * sizeof(float));
    assert_memory_equal(a->hs.buffers, b->hs.buffers, shape->n_buffers * sizeof(float));
    assert_memory_equal(a->hs.momentum, b->hs.momentum, shape->n_params * sizeof(float));
    assert_true(a->loss_scale == b->loss_scale && a->skipped == b->skipped);
}

/* An allreduce version at one rank: what several ranks run, with the sums
 * over one rank, which must change nothing. */
static exchange *one_rank_allreduce(dist_backend transport, size_t first, size_t bucket, int overlap) {
    exchange_opts o = {.mode = DIST_MODE_ALLREDUCE, .backend = transport};
    o.reducer = (reducer_opts){.first_bucket = first, .bucket = bucket, .overlap = overlap};
    exchange *x = exchange_allreduce_create(&o);
    assert_int_equal(exchange_connect(x, backend_cpu()), CNT_OK);
    assert_int_equal(exchange_traits_of(x).reduces, 1);
    return x;
}

static void test_none_equals_one_rank_allreduce(void **state) {
    (void)state;
    net *shape = make_net();
    loss_scale_opts plain = {.mode = LOSS_SCALE_NONE};
    loss_scale_opts scaled = {.mode = LOSS_SCALE_DYNAMIC, .scale = 1024, .window = 2};
    const loss_scale_opts *modes[2] = {&plain, &scaled};
    for (int m = 0; m < 2; m++) {
        step_state want;
        train_with(exchange_none(), modes[m], STEPS, &want);
        /* buckets cut mid-tensor (1000, 7000 values), and one bucket for all */
        struct { dist_backend t; size_t first, bucket; int overlap; } cases[] = {
            {DIST_BACKEND_MPI, 1000, 7000, 1}, {DIST_BACKEND_RING, 1000, 7000, 1},
            {DIST_BACKEND_MPI, 1000, 7000, 0}, {DIST_BACKEND_RING, 1 << 30, 1 << 30, 1}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            exchange *x = one_rank_allreduce(cases[c].t, cases[c].first, cases[c].bucket, cases[c].overlap);
            step_state got;
            train_with(x, modes[m], STEPS, &got);
            assert_same_state(&want, &got, shape);
            host_state_free(&got.hs);
            exchange_free(x, 0);
        }
        host_state_free(&want.hs);
    }
    net_free(shape);
}

/* Interrupted after 2 steps, restored into a new net and stepper, then 2
 * more: the same state as 4 steps without a stop. */
static void test_state_save_restore_continues_exactly(void **state) {
    (void)state;
    loss_scale_opts scaled = {.mode = LOSS_SCALE_DYNAMIC, .scale = 1024, .window = 1};
    step_state want, mid;
    train_with(exchange_none(), &scaled, STEPS, &want);
    train_with(exchange_none(), &scaled, 2, &mid);
    assert_true(mid.loss_scale > 1024); /* the window of 1 doubled it: the scaler's state matters */

    fixture *f = cnt_calloc(1, sizeof *f);
    make_batch(f);
    net *nt = make_net();
    net_init_params(nt, 99); /* other weights: the restore must replace them */
    step_opts so = {0};
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &scaled, &so, BATCH, C, H * W, 0);
    stepper_restore(&st, &mid);
    for (int s = 3; s <= STEPS; s++) {
        step_result r;
        assert_int_equal(stepper_run(&st, &f->b, s, 0.05 + 0.01 * s, &r), CNT_OK);
    }
    step_state got;
    stepper_state_alloc(&st, &got);
    stepper_save(&st, &got);
    assert_same_state(&want, &got, nt);
    assert_true(got.dropout_seed == want.dropout_seed);
    host_state_free(&got.hs);
    host_state_free(&mid.hs);
    host_state_free(&want.hs);
    stepper_free(&st);
    net_free(nt);
    free(f);
}

/* What each version keeps beside the net: the reducer's host staging (and
 * its fp16 copy, or PowerSGD's error) with several ranks over MPI, nothing
 * with NCCL or alone but NCCL's fp16 halves on the device, the servers'
 * gradients and parameters on the host and no momentum on the worker. */
static void test_footprints(void **state) {
    (void)state;
    exchange_opts ar = {.mode = DIST_MODE_ALLREDUCE}, servers = {.mode = DIST_MODE_PS};
    exchange_footprint f = exchange_footprint_for(&ar, 1, 0);
    assert_true(f.host_per_param_byte == 0 && f.momentum_on_worker);
    f = exchange_footprint_for(&ar, 4, 0);
    assert_true(f.host_per_param_byte == 1 && f.momentum_on_worker);
    f = exchange_footprint_for(&ar, 4, 1);
    assert_true(f.host_per_param_byte == 0 && f.momentum_on_worker);
    ar.reducer.compress = REDUCER_COMPRESS_FP16;
    f = exchange_footprint_for(&ar, 4, 0);
    assert_true(f.host_per_param_byte == 1.5 && f.device_per_param_byte == 0 && f.momentum_on_worker);
    f = exchange_footprint_for(&ar, 4, 1);
    assert_true(f.host_per_param_byte == 0 && f.device_per_param_byte == 0.5 && f.momentum_on_worker);
    ar.reducer.compress = REDUCER_COMPRESS_POWERSGD;
    f = exchange_footprint_for(&ar, 4, 0);
    assert_true(f.host_per_param_byte == 2 && f.device_per_param_byte == 0 && f.momentum_on_worker);
    f = exchange_footprint_for(&ar, 4, 1); /* with NCCL its error is on the GPU */
    assert_true(f.host_per_param_byte == 0 && f.device_per_param_byte == 1 && f.momentum_on_worker);
    f = exchange_footprint_for(&ar, 1, 0); /* one rank never compresses */
    assert_true(f.host_per_param_byte == 0 && f.device_per_param_byte == 0);
    f = exchange_footprint_for(&servers, 1, 0);
    assert_true(f.host_per_param_byte == 2 && !f.momentum_on_worker);
    f = exchange_footprint_of(exchange_none());
    assert_true(f.host_per_param_byte == 0 && f.momentum_on_worker);
    const char *via = NULL; /* one process: no allreduce for dist.bucket_mb = auto to size */
    assert_int_equal(exchange_sized_allreduce(exchange_none(), &via), 0);
    assert_int_equal(exchange_nccl(exchange_none()), 0);
}

/* The none version: nothing to wait for, nothing kept, the run record's
 * mode, one worker, and the sentence the start-up line quotes. */
static void test_none_traits(void **state) {
    (void)state;
    exchange *x = exchange_none();
    exchange_traits t = exchange_traits_of(x);
    assert_true(!t.reduces && !t.serves && !t.stale && !t.keeps_state && t.wait_phase == NULL);
    assert_string_equal(t.mode_name, "allreduce");
    assert_int_equal(exchange_workers(x), 1);
    assert_false(exchange_is_server(x));
    char buf[128];
    assert_int_equal(exchange_describe(x, 32, buf, sizeof buf), 1);
    assert_string_equal(buf, "1 rank, no gradient communication");
    assert_int_equal(exchange_agree_stop(x, 5, 15), 15);
    exchange_free(x, 0); /* ignored: the one none object stays */
    assert_int_equal(exchange_workers(exchange_none()), 1);
}

/* dist.backend = auto through host memory: MPI_Allreduce on one node, the
 * ring across nodes of one rank each, the hierarchy as soon as one node holds
 * several (the multi-host checks: tests/test_multihost.sh). */
static void test_auto_host_backend(void **state) {
    (void)state;
    assert_int_equal(dist_auto_host_backend(1, 0), DIST_BACKEND_MPI);
    assert_int_equal(dist_auto_host_backend(1, 1), DIST_BACKEND_MPI);
    assert_int_equal(dist_auto_host_backend(2, 0), DIST_BACKEND_RING);
    assert_int_equal(dist_auto_host_backend(4, 0), DIST_BACKEND_RING);
    assert_int_equal(dist_auto_host_backend(2, 2), DIST_BACKEND_HIER);
    assert_int_equal(dist_auto_host_backend(3, 1), DIST_BACKEND_HIER);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_equals_one_rank_allreduce),
        cmocka_unit_test(test_state_save_restore_continues_exactly),
        cmocka_unit_test(test_footprints),
        cmocka_unit_test(test_none_traits),
        cmocka_unit_test(test_auto_host_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
