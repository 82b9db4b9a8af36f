/*
 * tests/test_step_graph.c - the recorded step (train.cuda_graph,
 * train/step.h) on the host, through a backend that is the CPU's with
 * recording ops that count what the stepper asks of them:
 *   - two eager steps, then one recording per stager slot, then one launch
 *     a step; the rate each launch reads from the device is that step's;
 *   - nothing allocates, frees, waits for the device, downloads, uploads,
 *     records or waits for a fence, reads the free memory, draws a dropout
 *     mask from a seed passed by value or updates at a rate passed by value
 *     between capture_begin and capture_end (a GPU's recording would fail
 *     there, or replay one value);
 *   - the recorded region is the eager step's work: the CPU runs the ops as
 *     they are recorded, so after the recording steps the parameters are,
 *     bit for bit, those of a run without recording;
 *   - with dropout, each launch reads its own step's seed from the device
 *     (the one an eager step's masks take), and the recordings draw the
 *     eager steps' masks, bit for bit;
 *   - a new memory epoch records again; a smaller batch runs eagerly; a
 *     layer hook runs eagerly; a failed recording is an error naming the
 *     key;
 *   - where it cannot be used (a backend without recording, accumulation,
 *     loss scaling, dropout without device seeds) stepper_init says why and
 *     nothing is recorded.
 * On a GPU: tests/test_gpu_train.sh (not yet run there).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/rng.h"
#include "dist/exchange.h"
#include "dist/exchange_impl.h"
#include "model/net.h"
#include "train/step.h"

enum { C = 3, H = 12, W = 12, CLASSES = 10, B = 6, STEPS = 8 };

static const optim_opts oo = {.momentum = 0.9f, .weight_decay = 5e-4f};
static const loss_scale_opts no_scaling = {.mode = LOSS_SCALE_NONE, .scale = 1.0};

/* What the fake backend's ops saw. */
static struct {
    int capturing;
    int begins, ends, launches, frees;
    int forbidden; /* what a recording may not hold, done while capturing (above) */
    int fail;      /* capture_end refuses */
    uint64_t epoch;
    const float *lr_dev;
    float lr_at_launch[64];
    const net *nt;               /* its dropout_seed_at, where set */
    const void *last_graph;      /* what the last launch ran */
    uint64_t seed_at_launch[64]; /* what the masks of each launch would read */
    char tokens[4];
} fk;

static backend fake;

static void *fake_alloc(size_t bytes) {
    fk.forbidden += fk.capturing;
    return backend_cpu()->alloc(bytes);
}
static void fake_free(void *p) {
    fk.forbidden += fk.capturing;
    backend_cpu()->free(p);
}
static void fake_sync(void) {
    fk.forbidden += fk.capturing;
    backend_cpu()->sync();
}
static void fake_download(void *dst, const void *src, size_t bytes) {
    fk.forbidden += fk.capturing;
    backend_cpu()->download(dst, src, bytes);
}
/* a mask from a seed passed by value, recorded, would be every replay's mask */
static void fake_dropout_mask(size_t n, float p, uint64_t seed, float *mask) {
    fk.forbidden += fk.capturing;
    backend_cpu()->dropout_mask(n, p, seed, mask);
}
/* and an update with its rate by value, every replay's rate */
static void fake_sgd_update(size_t n, float *param, const float *grad, float *momentum_buf, float lr, float momentum,
                            float weight_decay, int nesterov, float grad_scale, const float *lr_at,
                            const float *scale_at) {
    fk.forbidden += fk.capturing && !lr_at;
    backend_cpu()->sgd_update(n, param, grad, momentum_buf, lr, momentum, weight_decay, nesterov, grad_scale, lr_at,
                              scale_at);
}
/* host copies, fences and memory queries are the host's, not the step's: none while recording */
static void fake_upload(void *dst, const void *src, size_t bytes) {
    fk.forbidden += fk.capturing;
    backend_cpu()->upload(dst, src, bytes);
}
static void fake_upload_sync(void *dst, const void *src, size_t bytes) {
    fk.forbidden += fk.capturing;
    backend_cpu()->upload_sync(dst, src, bytes);
}
static void fake_fence_record(void *fence) {
    fk.forbidden += fk.capturing;
    backend_cpu()->fence_record(fence);
}
static void fake_fence_wait(void *fence) {
    fk.forbidden += fk.capturing;
    backend_cpu()->fence_wait(fence);
}
static void fake_upload_async(void *dst, const void *src, size_t bytes, void *after, void *done) {
    fk.forbidden += fk.capturing;
    backend_cpu()->upload_async(dst, src, bytes, after, done);
}
static void *fake_host_alloc(size_t bytes) {
    fk.forbidden += fk.capturing;
    return backend_cpu()->host_alloc(bytes);
}
static void fake_mem_info(size_t *free_bytes, size_t *total_bytes) {
    fk.forbidden += fk.capturing;
    backend_cpu()->mem_info(free_bytes, total_bytes);
}
static void fake_capture_begin(void) {
    assert_false(fk.capturing);
    fk.capturing = 1;
    fk.begins++;
}
static void *fake_capture_end(char *why, size_t len) {
    assert_true(fk.capturing);
    fk.capturing = 0;
    fk.ends++;
    if (fk.fail) {
        snprintf(why, len, "refused by the test");
        return NULL;
    }
    return &fk.tokens[fk.ends % 4];
}
static void fake_graph_launch(void *graph) {
    assert_non_null(graph);
    assert_true(fk.launches < 64);
    if (fk.nt && fk.nt->dropout_seed_at) fk.seed_at_launch[fk.launches] = *fk.nt->dropout_seed_at;
    fk.lr_at_launch[fk.launches++] = *fk.lr_dev; /* device memory is host memory */
    fk.last_graph = graph;
}
static void fake_graph_free(void *graph) {
    assert_non_null(graph);
    fk.frees++;
}
static uint64_t fake_memory_epoch(void) { return fk.epoch; }

static const backend *recording_backend(void) {
    fake = *backend_cpu();
    fake.name = "fake";
    fake.alloc = fake_alloc;
    fake.free = fake_free;
    fake.sync = fake_sync;
    fake.download = fake_download;
    fake.dropout_mask = fake_dropout_mask;
    fake.sgd_update = fake_sgd_update;
    fake.upload = fake_upload;
    fake.upload_sync = fake_upload_sync;
    if (fake.fence_record) fake.fence_record = fake_fence_record;
    if (fake.fence_wait) fake.fence_wait = fake_fence_wait;
    if (fake.mem_info) fake.mem_info = fake_mem_info;
    if (fake.upload_async) fake.upload_async = fake_upload_async;
    if (fake.host_alloc) fake.host_alloc = fake_host_alloc;
    fake.capture_begin = fake_capture_begin;
    fake.capture_end = fake_capture_end;
    fake.graph_launch = fake_graph_launch;
    fake.graph_free = fake_graph_free;
    fake.memory_epoch = fake_memory_epoch;
    memset(&fk, 0, sizeof fk);
    return &fake;
}

/* conv (bias) - relu - max-pool - conv - relu - average - linear, and a
 * dropout before the linear layer with p = dropout (0: none). */
static net *small_net(const backend *be, float dropout) {
    net *nt = net_create(be, C, H, W, CLASSES);
    int c1 = net_conv(nt, NET_INPUT, "conv1", 8, 3, 1, 1, 1);
    int r1 = net_relu(nt, c1, "relu1");
    int p1 = net_maxpool(nt, r1, "pool1", 2, 2, 0, 0);
    int c2 = net_conv(nt, p1, "conv2", 16, 3, 1, 1, 0);
    int r2 = net_relu(nt, c2, "relu2");
    int a = net_adaptive_avgpool(nt, r2, "avg", 1, 1);
    if (dropout > 0) a = net_dropout(nt, a, "drop", dropout);
    int fc = net_linear(nt, a, "fc", CLASSES, 1);
    assert_int_equal(net_finalize(nt, fc, -1, B), CNT_OK);
    net_init_params(nt, 5);
    return nt;
}

typedef struct images {
    float x[(STEPS + 4) * B * C * H * W];
    int32_t labels[(STEPS + 4) * B];
} images;

static images *make_images(void) {
    images *im = cnt_calloc(1, sizeof *im);
    rng r;
    rng_seed(&r, 21, 1);
    for (size_t i = 0; i < sizeof im->x / sizeof im->x[0]; i++) im->x[i] = rng_uniform(&r) * 2 - 1;
    for (size_t i = 0; i < sizeof im->labels / sizeof im->labels[0]; i++)
        im->labels[i] = (int32_t)rng_below(&r, CLASSES);
    return im;
}

static batch slice(images *im, int step, int n) {
    return (batch){.n = n, .x = im->x + (size_t)step * B * C * H * W, .labels = im->labels + step * B};
}

static double rate(int step) { return 0.01 * (step + 1); }

/* steps steps of full batches on nt (recording or not), the parameters into params */
static void train(net *nt, int graph, images *im, int steps, float *params) {
    step_opts so = {.cuda_graph = graph};
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &no_scaling, &so, B, C, H * W, 0);
    if (graph) {
        assert_true(st.graph_on);
        fk.lr_dev = st.lr_dev;
        fk.nt = nt;
    }
    for (int s = 0; s < steps; s++) {
        batch b = slice(im, s, B);
        step_result r;
        assert_int_equal(stepper_run(&st, &b, s + 1, rate(s), &r), CNT_OK);
        assert_true(r.applied);
        assert_int_equal(r.n, B);
    }
    backend_cpu()->download(params, nt->params, nt->n_params * sizeof(float));
    stepper_free(&st);
}

/* Two eager steps, a recording on each of the stager's two slots (steps 3
 * and 4), then launches only; each launch reads its step's rate. */
static void test_records_then_replays(void **state) {
    (void)state;
    images *im = make_images();
    net *nt = small_net(recording_backend(), 0);
    float *p = cnt_malloc(nt->n_params * sizeof(float));
    train(nt, 1, im, STEPS, p);
    assert_int_equal(fk.begins, 2);
    assert_int_equal(fk.ends, 2);
    assert_int_equal(fk.launches, STEPS - STEP_GRAPH_WARM);
    assert_int_equal(fk.forbidden, 0);
    for (int k = 0; k < fk.launches; k++)
        if (fk.lr_at_launch[k] != (float)rate(STEP_GRAPH_WARM + k))
            fail_msg("launch %d (step %d) read the rate %g, not %g", k, STEP_GRAPH_WARM + k + 1,
                     (double)fk.lr_at_launch[k], rate(STEP_GRAPH_WARM + k));
    assert_int_equal(fk.frees, 2); /* stepper_free: both recordings */
    net_free(nt);
    free(p);
    free(im);
}

/* The CPU runs the recorded ops as they are recorded (a GPU only records
 * them): so up to the recordings (steps 3 and 4) a recording run's
 * parameters must be those of a run without, bit for bit: the same work,
 * the same rate (read from the device), the same scale. */
static void test_recorded_work_is_the_step(void **state) {
    (void)state;
    images *im = make_images();
    net *eager = small_net(backend_cpu(), 0);
    net *rec = small_net(recording_backend(), 0);
    size_t n = eager->n_params;
    float *pe = cnt_malloc(n * sizeof(float)), *pr = cnt_malloc(n * sizeof(float));
    train(eager, 0, im, STEP_GRAPH_WARM + 2, pe);
    train(rec, 1, im, STEP_GRAPH_WARM + 2, pr);
    assert_int_equal(fk.begins, 2);
    assert_int_equal(memcmp(pe, pr, n * sizeof(float)), 0);
    net_free(eager);
    net_free(rec);
    free(pe);
    free(pr);
    free(im);
}

/* Dropout: each step draws its own masks, so a replay must not reuse the
 * recorded step's. The recorded forward reads the step seed from a device
 * word that stepper_run writes before every step: the recordings (steps 3
 * and 4, run as they are recorded here) equal the eager run's steps bit for
 * bit, masks included, and each later launch finds in the word the seed the
 * eager run's step of the same number took (dropout_seed after it, the host's
 * count, equal too). */
static void test_dropout_replays_draw_their_masks(void **state) {
    (void)state;
    images *im = make_images();
    net *eager = small_net(backend_cpu(), 0.5f);
    net *rec = small_net(recording_backend(), 0.5f);
    size_t n = eager->n_params;
    float *pe = cnt_malloc(n * sizeof(float)), *pr = cnt_malloc(n * sizeof(float));
    uint64_t seed0 = eager->dropout_seed;
    train(eager, 0, im, STEP_GRAPH_WARM + 2, pe);
    train(rec, 1, im, STEPS, pr);
    assert_int_equal(fk.begins, 2);
    assert_int_equal(fk.launches, STEPS - STEP_GRAPH_WARM);
    assert_int_equal(fk.forbidden, 0);
    /* the fake's launches run nothing, so rec's parameters hold the work of
     * the two eager steps and the two recordings: the eager run's four */
    assert_int_equal(memcmp(pe, pr, n * sizeof(float)), 0);
    /* the eager run's step k (1-based) drew from seed0 + k; so must launch j (step STEP_GRAPH_WARM + 1 + j) */
    for (int j = 0; j < STEPS - STEP_GRAPH_WARM; j++) {
        uint64_t want = seed0 + (uint64_t)(STEP_GRAPH_WARM + 1 + j);
        if (fk.seed_at_launch[j] != want)
            fail_msg("launch %d (step %d) found the seed %llu, not %llu", j, STEP_GRAPH_WARM + 1 + j,
                     (unsigned long long)fk.seed_at_launch[j], (unsigned long long)want);
    }
    assert_true(rec->dropout_seed == seed0 + STEPS); /* the host counted the replays' forwards too */
    assert_null(rec->dropout_seed_at);                /* train() freed its stepper: host seeds again */
    net_free(eager);
    net_free(rec);
    free(pe);
    free(pr);
    free(im);
}

/* A new memory epoch (the backend replaced a buffer a recording may point
 * at) records again; a smaller batch runs eagerly, as does a step with a
 * layer hook (a profile's); a failed recording is an error naming the key. */
static void hook(void *ctx, const node *nd, int backward, double t0, double t1) {
    (void)nd, (void)backward, (void)t0, (void)t1;
    (*(int *)ctx)++;
}

static void test_records_again_or_runs_eagerly(void **state) {
    (void)state;
    images *im = make_images();
    net *nt = small_net(recording_backend(), 0);
    step_opts so = {.cuda_graph = 1};
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &no_scaling, &so, B, C, H * W, 0);
    fk.lr_dev = st.lr_dev;
    step_result r;
    int s = 0;
    for (; s < 6; s++) {
        batch b = slice(im, s, B);
        assert_int_equal(stepper_run(&st, &b, s + 1, rate(s), &r), CNT_OK);
    }
    assert_int_equal(fk.begins, 2);
    assert_int_equal(fk.launches, 4);
    fk.epoch++;
    batch b = slice(im, s, B);
    s++;
    assert_int_equal(stepper_run(&st, &b, s, rate(s), &r), CNT_OK);
    assert_int_equal(fk.begins, 3); /* this slot's recording was stale */
    assert_int_equal(fk.frees, 1);
    assert_int_equal(fk.launches, 5);
    b = slice(im, s, B - 1); /* an epoch's last batch */
    s++;
    assert_int_equal(stepper_run(&st, &b, s, rate(s), &r), CNT_OK);
    assert_int_equal(r.n, B - 1);
    assert_int_equal(fk.begins, 3);
    assert_int_equal(fk.launches, 5);
    int calls = 0;
    net_set_node_hook(nt, hook, &calls);
    b = slice(im, s, B);
    s++;
    assert_int_equal(stepper_run(&st, &b, s, rate(s), &r), CNT_OK);
    assert_true(calls > 0);
    assert_int_equal(fk.launches, 5);
    net_set_node_hook(nt, NULL, NULL);
    assert_int_equal(fk.forbidden, 0);
    fk.fail = 1;
    fk.epoch++;
    b = slice(im, s, B);
    s++;
    assert_int_equal(stepper_run(&st, &b, s, rate(s), &r), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "train.cuda_graph: the step could not be recorded (refused by the test)"));
    stepper_free(&st);
    net_free(nt);
    free(im);
}

/* An exchange whose device work is recorded with the step (NCCL's, with
 * several ranks), faked: it sums nothing (one process) but divides as two
 * workers would, and counts what the stepper asks of it. */
static struct {
    int records[2], record_ends;  /* exchange_record(k), exchange_record(-1) */
    int bad_order;                /* a record while capturing, a begin/finish/hook outside a step's work */
    int begins, finishes, hooks_capturing, hooks_eager;
    int replayed, replay_set_wrong, replay_step_wrong;
    long last_step;
    const stepper *st;            /* whose recordings the launches run */
    int in_step;                  /* between begin and finish */
    const char *why;              /* what record_why says (NULL: recordable) */
} fx;

static void fx_hook(void *ctx, size_t offset, size_t count) {
    (void)ctx, (void)offset, (void)count;
    if (!fx.in_step) fx.bad_order++;
    if (fk.capturing) fx.hooks_capturing++;
    else fx.hooks_eager++;
}
static const char *fx_record_why(const exchange *x) {
    (void)x;
    return fx.why;
}
static void fx_record(exchange *x, int set) {
    (void)x;
    if (fk.capturing) fx.bad_order++; /* its host waits come before the capture, its end after */
    if (set >= 0) fx.records[set]++;
    else fx.record_ends++;
}
static void fx_begin(exchange *x, long step, double lr) {
    (void)x, (void)lr;
    fx.begins++;
    fx.in_step = 1;
    fx.last_step = step;
}
static void fx_finish(exchange *x, exchange_stats *st) {
    (void)x, (void)st;
    if (!fx.in_step) fx.bad_order++;
    fx.finishes++;
    fx.in_step = 0;
}
static void fx_replayed(exchange *x, long step, int set, exchange_stats *st) {
    (void)x, (void)st;
    if (fk.capturing) fx.bad_order++;
    fx.replayed++;
    if (step != fx.last_step + 1) fx.replay_step_wrong++;
    fx.last_step = step;
    /* the recording the launch just before ran */
    if (set < 0 || set > 1 || fx.st->graphs[set].graph != fk.last_graph) fx.replay_set_wrong++;
}
static const exchange_ops fx_ops = {.begin = fx_begin, .finish = fx_finish, .record_why = fx_record_why,
                                    .record = fx_record, .replayed = fx_replayed};

static exchange *fake_exchange(net *nt) {
    static exchange x;
    memset(&x, 0, sizeof x);
    memset(&fx, 0, sizeof fx);
    x.ops = &fx_ops;
    x.world = 2;
    x.traits.mode_name = "allreduce";
    x.traits.reduces = 1;
    net_set_grad_hook(nt, fx_hook, NULL);
    return &x;
}

/* The next step's batch, staged during backward (training's prefetch). */
static struct {
    images *im;
    int next;
    batch b;
} pf;
static const batch *prefetch_next(void *ctx) {
    (void)ctx;
    if (pf.next >= STEPS) return NULL;
    pf.b = slice(pf.im, pf.next, B);
    pf.next++;
    return &pf.b;
}

/* With an exchange that records (NCCL's): the recordings hold its begin,
 * backward's hooks and its finish, with the exchange's host waits before
 * the capture (exchange_record(k)) and its end after; every later launch is
 * followed by exchange_replayed with that step's number and the recording
 * it ran; the recorded work (the update divided by 2 workers) equals the
 * eager step's with the same exchange, bit for bit. One that cannot record
 * leaves the steps op by op, saying why. With such an exchange the ranks
 * agree each step on what runs, which needs the batch staged (training's
 * prefetch): the first, unstaged step runs op by op. */
static void test_exchange_recorded_with_the_step(void **state) {
    (void)state;
    images *im = make_images();
    net *eager = small_net(backend_cpu(), 0);
    exchange *xe = fake_exchange(eager);
    size_t n = eager->n_params;
    float *pe = cnt_malloc(n * sizeof(float)), *pr = cnt_malloc(n * sizeof(float));
    step_opts off = {0}, on = {.cuda_graph = 1};
    stepper st;
    stepper_init(&st, eager, xe, NULL, &oo, &no_scaling, &off, B, C, H * W, 0);
    step_result r;
    for (int s = 0; s < STEP_GRAPH_WARM + 2; s++) {
        batch b = slice(im, s, B);
        assert_int_equal(stepper_run(&st, &b, s + 1, rate(s), &r), CNT_OK);
    }
    backend_cpu()->download(pe, eager->params, n * sizeof(float));
    stepper_free(&st);

    net *rec = small_net(recording_backend(), 0);
    exchange *x = fake_exchange(rec);
    stepper_init(&st, rec, x, NULL, &oo, &no_scaling, &on, B, C, H * W, 0);
    assert_true(st.graph_on);
    assert_true(st.graph_x);
    fk.lr_dev = st.lr_dev;
    fx.st = &st;
    pf.im = im;
    pf.next = 1;
    stepper_set_prefetch(&st, prefetch_next, NULL);
    for (int s = 0; s < STEPS; s++) {
        batch b = slice(im, s, B);
        assert_int_equal(stepper_run(&st, s == 0 ? &b : NULL, s + 1, rate(s), &r), CNT_OK);
        if (s == STEP_GRAPH_WARM + 1) backend_cpu()->download(pr, rec->params, n * sizeof(float));
    }
    assert_int_equal(fx.bad_order, 0);
    assert_int_equal(fk.forbidden, 0);
    assert_int_equal(fx.records[0] + fx.records[1], 2);
    assert_int_equal(fx.record_ends, 2);
    assert_int_equal(fx.begins, STEP_GRAPH_WARM + 2); /* the eager steps and the recordings */
    assert_int_equal(fx.finishes, fx.begins);
    assert_true(fx.hooks_capturing > 0 && fx.hooks_eager > 0);
    assert_int_equal(fx.replayed, STEPS - STEP_GRAPH_WARM - 2);
    assert_int_equal(fx.replay_step_wrong, 0);
    assert_int_equal(fx.replay_set_wrong, 0);
    assert_int_equal(memcmp(pe, pr, n * sizeof(float)), 0);
    stepper_free(&st);

    fx.why = "this one sums on the host";
    stepper_init(&st, rec, x, NULL, &oo, &no_scaling, &on, B, C, H * W, 0);
    assert_false(st.graph_on);
    assert_string_equal(st.graph_why, "this one sums on the host");
    stepper_free(&st);
    net_free(eager);
    net_free(rec);
    free(pe);
    free(pr);
    free(im);
}

/* The ranks agree each step (NCCL's rule: a collective is captured on every
 * rank or on none). A scripted peer: at step 6 it must record again (its
 * memory epoch moved), so this rank records too though its recording is
 * current; at step 7 it runs op by op (a short batch), so this rank does too,
 * and its exchange runs eagerly. */
static int peer_step;
static void peer_votes(double *v, size_t n) {
    assert_int_equal(n, 2);
    peer_step++;
    if (peer_step == 6) v[1] += 1; /* the peer records */
    if (peer_step == 7) v[0] += 1; /* the peer runs op by op */
}

static void test_ranks_agree_on_each_step(void **state) {
    (void)state;
    images *im = make_images();
    net *nt = small_net(recording_backend(), 0);
    exchange *x = fake_exchange(nt);
    step_opts on = {.cuda_graph = 1};
    stepper st;
    stepper_init(&st, nt, x, NULL, &oo, &no_scaling, &on, B, C, H * W, 0);
    assert_true(st.graph_x);
    st.graph_vote = peer_votes;
    peer_step = 0;
    fk.lr_dev = st.lr_dev;
    fx.st = &st;
    pf.im = im;
    pf.next = 1;
    stepper_set_prefetch(&st, prefetch_next, NULL);
    step_result r;
    int begins_at[STEPS + 1], launches_at[STEPS + 1], ex_at[STEPS + 1];
    for (int s = 0; s < STEPS; s++) {
        batch b = slice(im, s, B);
        assert_int_equal(stepper_run(&st, s == 0 ? &b : NULL, s + 1, rate(s), &r), CNT_OK);
        begins_at[s + 1] = fk.begins;
        launches_at[s + 1] = fk.launches;
        ex_at[s + 1] = fx.begins;
    }
    /* steps 3 and 4 record, 5 replays, 6 records again (the peer), 7 op by op (the peer), 8 replays */
    assert_int_equal(begins_at[4], 2);
    assert_int_equal(begins_at[5], 2);
    assert_int_equal(begins_at[6], 3);
    assert_int_equal(launches_at[6], launches_at[5] + 1);
    assert_int_equal(launches_at[7], launches_at[6]);  /* op by op: no launch */
    assert_int_equal(ex_at[7], ex_at[6] + 1);          /* ... and the exchange eagerly */
    assert_int_equal(begins_at[8], 3);
    assert_int_equal(launches_at[8], launches_at[7] + 1);
    assert_int_equal(peer_step, STEPS);                 /* a vote every step */
    assert_int_equal(fx.bad_order, 0);
    assert_int_equal(fk.forbidden, 0);
    stepper_free(&st);
    net_free(nt);
    free(im);
}

/* A run whose first batch is short (resumed at an epoch's last batch)
 * records the configured batch size, not the first batch's: the short one
 * runs eagerly, then the full ones warm up, record and replay. */
static void test_records_the_configured_batch(void **state) {
    (void)state;
    images *im = make_images();
    net *nt = small_net(recording_backend(), 0);
    step_opts so = {.cuda_graph = 1, .batch = B};
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &no_scaling, &so, B, C, H * W, 0);
    fk.lr_dev = st.lr_dev;
    step_result r;
    batch b = slice(im, 0, B - 1);
    assert_int_equal(stepper_run(&st, &b, 1, rate(0), &r), CNT_OK);
    for (int s = 1; s < STEPS; s++) {
        b = slice(im, s, B);
        assert_int_equal(stepper_run(&st, &b, s + 1, rate(s), &r), CNT_OK);
    }
    assert_int_equal(st.graph_batch, B);
    assert_int_equal(fk.begins, 2);
    assert_int_equal(fk.launches, STEPS - 1 - STEP_GRAPH_WARM);
    stepper_free(&st);
    net_free(nt);
    free(im);
}

/* Where a replay would differ from the eager step, or the backend cannot
 * record: off, with the reason, and nothing recorded. */
static void expect_off(net *nt, const step_opts *so, const loss_scale_opts *lso, const char *why) {
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, lso, so, B, C, H * W, 0);
    assert_false(st.graph_on);
    assert_null(st.lr_dev);
    if (!strstr(st.graph_why, why)) fail_msg("graph_why is '%s', expected it to say '%s'", st.graph_why, why);
    stepper_free(&st);
}

static void test_where_it_cannot(void **state) {
    (void)state;
    step_opts on = {.cuda_graph = 1}, acc = {.cuda_graph = 1, .accumulate = 2};
    loss_scale_opts fixed = {.mode = LOSS_SCALE_STATIC, .scale = 128.0};
    net *cpu = small_net(backend_cpu(), 0);
    expect_off(cpu, &on, &no_scaling, "runs each op as it is called");
    net_free(cpu);
    net *nt = small_net(recording_backend(), 0);
    expect_off(nt, &acc, &no_scaling, "train.accumulate > 1");
    expect_off(nt, &on, &fixed, "loss scaling");
    step_opts off = {0};
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &no_scaling, &off, B, C, H * W, 0);
    assert_false(st.graph_on);
    assert_string_equal(st.graph_why, ""); /* not asked for */
    stepper_free(&st);
    net_free(nt);
    net *dropped = small_net(recording_backend(), 0.5f);
    fake.dropout_mask_at = NULL; /* a backend that takes dropout seeds by value only */
    expect_off(dropped, &on, &no_scaling, "dropout");
    assert_null(dropped->dropout_seed_at);
    net_free(dropped);
    assert_int_equal(fk.begins, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_then_replays),
        cmocka_unit_test(test_recorded_work_is_the_step),
        cmocka_unit_test(test_dropout_replays_draw_their_masks),
        cmocka_unit_test(test_records_again_or_runs_eagerly),
        cmocka_unit_test(test_records_the_configured_batch),
        cmocka_unit_test(test_exchange_recorded_with_the_step),
        cmocka_unit_test(test_ranks_agree_on_each_step),
        cmocka_unit_test(test_where_it_cannot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
