/*
 * tests/test_reducer.c - the gradient reducer in a world of one: buckets cut
 * the flat buffer as configured, a bucket leaves as soon as backward has
 * completed it (overlap on) or only at the end (overlap off), the gradients
 * come back unchanged (the sum over one rank), and a whole net's backward
 * drives it through the grad hook; fp16 compression rounds what comes back to
 * half. Several ranks: tests/test_dist_train.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/half.h"
#include "common/rng.h"
#include "dist/reducer.h"
#include "dist/reducer_impl.h" /* rd->next_launch: which buckets reducer_grads_ready has launched */
#include "model/net.h"

static void test_buckets_and_early_launch(void **state) {
    (void)state;
    const backend *be = backend_cpu();
    float host[10];
    for (int i = 0; i < 10; i++) host[i] = (float)i + 0.5f;
    float *g = be->alloc(sizeof host);
    be->upload(g, host, sizeof host);
    for (int overlap = 0; overlap <= 1; overlap++) {
        reducer_opts ro = {.first_bucket = 3, .bucket = 4, .algo = DIST_ALGO_MPI, .overlap = overlap};
        reducer *rd = reducer_create(be, g, 10, &ro);
        assert_int_equal(reducer_bucket_count(rd), 3); /* [0,3) [3,7) [7,10) */
        for (int step = 0; step < 2; step++) {
            reducer_begin(rd, step + 1);
            reducer_grads_ready(rd, 0, 2);
            reducer_grads_ready(rd, 2, 5); /* completes buckets 0 and 1 */
            reducer_grads_ready(rd, 7, 3);
            reducer_stats st;
            reducer_finish(rd, &st);
            assert_int_equal(st.buckets, 3);
            assert_int_equal(st.early, overlap ? 3 : 0);
            assert_true(st.comm_ms >= 0 && st.exposed_ms >= 0);
        }
        float back[10];
        be->download(back, g, sizeof back);
        assert_memory_equal(back, host, sizeof host);
        reducer_free(rd);
    }
    /* one bucket bigger than the buffer */
    reducer_opts big = {.first_bucket = 100, .bucket = 100, .algo = DIST_ALGO_RING, .overlap = 1};
    reducer *rd = reducer_create(be, g, 10, &big);
    assert_int_equal(reducer_bucket_count(rd), 1);
    reducer_free(rd);
    be->free(g);
}

/* The layout the step profile reports is the reducer's: same count, same
 * cut, for a grid of sizes (first bucket larger, smaller, equal, beyond n). */
static void test_bucket_layout(void **state) {
    (void)state;
    size_t ends[8];
    assert_int_equal(reducer_bucket_layout(10, 3, 4, ends, 8), 3);
    assert_true(ends[0] == 3 && ends[1] == 7 && ends[2] == 10);
    assert_int_equal(reducer_bucket_layout(10, 100, 100, ends, 8), 1);
    assert_true(ends[0] == 10);
    assert_int_equal(reducer_bucket_layout(10, 1, 1, ends, 8), 10); /* only the first 8 ends written */
    assert_true(ends[7] == 8);
    const backend *be = backend_cpu();
    float *g = be->alloc(1000 * sizeof(float));
    size_t firsts[] = {1, 7, 64, 999, 1000, 5000}, sizes[] = {1, 13, 100, 1000, 4096};
    for (size_t i = 0; i < sizeof firsts / sizeof *firsts; i++) {
        for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
            reducer_opts ro = {.first_bucket = firsts[i], .bucket = sizes[j], .algo = DIST_ALGO_MPI, .overlap = 1};
            reducer *rd = reducer_create(be, g, 1000, &ro);
            assert_int_equal(reducer_bucket_count(rd), reducer_bucket_layout(1000, firsts[i], sizes[j], NULL, 0));
            reducer_free(rd);
        }
    }
    be->free(g);
}

/* reducer_bucket_ready_after states the rule reducer_grads_ready follows:
 * a hand-worked case, then random cuts and random slicings of 50 values,
 * where after each slice the buckets it says are complete are exactly those
 * the reducer has launched. */
static void test_bucket_ready_after(void **state) {
    (void)state;
    /* buckets [0,3) [3,7) [7,10); slices end at 2, (a node without parameters), 7, 10 */
    size_t ends[3] = {3, 7, 10}, slices[4] = {2, 0, 7, 10};
    int after[3];
    reducer_bucket_ready_after(ends, 3, slices, 4, after);
    assert_true(after[0] == 2 && after[1] == 2 && after[2] == 3);
    reducer_bucket_ready_after(ends, 3, slices, 2, after); /* backward not over: nothing complete */
    assert_true(after[0] == -1 && after[1] == -1 && after[2] == -1);

    enum { N = 50 };
    const backend *be = backend_cpu();
    float *g = be->alloc(N * sizeof(float));
    be->zero(g, N * sizeof(float));
    rng r;
    rng_seed(&r, 29, 5);
    for (int trial = 0; trial < 200; trial++) {
        size_t first = 1 + rng_below(&r, 20), size = 1 + rng_below(&r, 20);
        size_t cut[N], slice_end[2 * N];
        int nb = reducer_bucket_layout(N, first, size, cut, N), ns = 0, ready[N];
        for (size_t at = 0; at < N;) { /* slices of 1 to 9 values, some nodes without parameters between them */
            if (rng_below(&r, 3) == 0) slice_end[ns++] = 0;
            size_t len = 1 + rng_below(&r, 9);
            at = at + len < N ? at + len : N;
            slice_end[ns++] = at;
        }
        reducer_bucket_ready_after(cut, nb, slice_end, ns, ready);
        reducer_opts ro = {.first_bucket = first, .bucket = size, .algo = DIST_ALGO_MPI, .overlap = 1};
        reducer *rd = reducer_create(be, g, N, &ro);
        reducer_begin(rd, 1);
        size_t upto = 0;
        for (int k = 0; k < ns; k++) {
            if (slice_end[k] > upto) {
                reducer_grads_ready(rd, upto, slice_end[k] - upto);
                upto = slice_end[k];
            }
            int done = 0;
            for (int b = 0; b < nb; b++) done += ready[b] >= 0 && ready[b] <= k;
            assert_int_equal(rd->next_launch, done);
        }
        assert_int_equal(ready[nb - 1], ns - 1); /* the last slice completes the last bucket */
        reducer_finish(rd, NULL);
        reducer_free(rd);
    }
    be->free(g);
}

typedef struct hook_spy {
    reducer *rd;
    size_t calls;
} hook_spy;

static void spy_hook(void *ctx, size_t offset, size_t count) {
    hook_spy *h = ctx;
    h->calls++;
    reducer_grads_ready(h->rd, offset, count);
}

static void test_driven_by_backward(void **state) {
    (void)state;
    net *nt = net_create(backend_cpu(), 1, 8, 8, 4);
    int c = net_conv(nt, NET_INPUT, "conv1", 8, 3, 1, 1, 0);
    int b = net_bn(nt, c, "bn1", 1e-5f);
    int r = net_relu(nt, b, "relu");
    int c2 = net_conv(nt, r, "conv2", 8, 3, 2, 1, 0);
    int p = net_adaptive_avgpool(nt, c2, "pool", 1, 1);
    int fc = net_linear(nt, p, "fc", 4, 1);
    assert_int_equal(net_finalize(nt, fc, -1, 2), CNT_OK);
    net_init_params(nt, 3);
    /* buckets of 100 values: the fc and conv2 ones are complete before conv1's backward */
    reducer_opts ro = {.first_bucket = 40, .bucket = 100, .algo = DIST_ALGO_MPI, .overlap = 1};
    hook_spy h = {reducer_create(nt->be, nt->grads, nt->n_params, &ro), 0};
    net_set_grad_hook(nt, spy_hook, &h);
    float x[2 * 64];
    for (int i = 0; i < 128; i++) x[i] = (float)((i * 37) % 11) - 5.0f;
    float *xd = nt->be->alloc(sizeof x);
    nt->be->upload(xd, x, sizeof x);
    float dl[8] = {0.1f, -0.2f, 0.05f, 0.05f, -0.1f, 0.3f, -0.1f, -0.1f};
    float *dld = nt->be->alloc(sizeof dl);
    nt->be->upload(dld, dl, sizeof dl);
    reducer_begin(h.rd, 1);
    net_forward(nt, xd, 2, 1);
    net_backward(nt, dld, NULL);
    reducer_stats st;
    reducer_finish(h.rd, &st);
    assert_int_equal(h.calls, 4); /* fc, conv2, bn1, conv1 */
    assert_int_equal(st.buckets, reducer_bucket_count(h.rd));
    assert_int_equal(st.early, st.buckets); /* all complete once conv1 reports */
    reducer_free(h.rd);
    nt->be->free(xd);
    nt->be->free(dld);
    net_free(nt);
}

/* dist.compress = fp16 in a world of one: the sum over one rank is the
 * gradient itself, so what comes back is each gradient rounded to half (and
 * inf beyond the half range); the watchdog settings are accepted and, alone,
 * send nothing. */
static void test_fp16_compression(void **state) {
    (void)state;
    const backend *be = backend_cpu();
    enum { N = 9 };
    float host[N] = {1.5f, 0.1f, -3.0e-6f, 65504.0f, 70000.0f, -1.0f / 3.0f, 1e-9f, 2049.0f, 0.0f};
    float *g = be->alloc(sizeof host);
    reducer_opts ro = {.first_bucket = 2, .bucket = 4, .algo = DIST_ALGO_RING, .overlap = 1,
                       .compress = REDUCER_COMPRESS_FP16, .stall_warn_s = 1, .stall_abort_s = 2};
    reducer *rd = reducer_create(be, g, N, &ro);
    assert_int_equal(reducer_bucket_count(rd), 3);
    be->upload(g, host, sizeof host);
    reducer_begin(rd, 1);
    reducer_grads_ready(rd, 0, N);
    reducer_finish(rd, NULL);
    float back[N];
    be->download(back, g, sizeof back);
    for (int i = 0; i < N; i++) assert_true(back[i] == fp16_to_float(fp16_from_float(host[i])));
    assert_true(back[0] == 1.5f && back[3] == 65504.0f && back[7] == 2048.0f && back[8] == 0.0f);
    assert_true(back[4] > 0 && back[4] * 0.0f != 0.0f); /* +inf */
    assert_true(back[1] != host[1] && back[1] > 0.0999f && back[1] < 0.1001f);
    reducer_free(rd);
    be->free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_and_early_launch),
        cmocka_unit_test(test_bucket_layout),
        cmocka_unit_test(test_bucket_ready_after),
        cmocka_unit_test(test_driven_by_backward),
        cmocka_unit_test(test_fp16_compression),
    };
    return cmocka_run_group_tests_name("reducer", tests, NULL, NULL);
}
