/*
 * tests/test_powersgd.c - PowerSGD compression (dist/powersgd.h) against
 * references in double: regions that tile the buffer whatever the buckets;
 * which tensors are compressed and the floats on the wire; a matrix of rank
 * <= r reproduced; vectors and small matrices summed exactly; several ranks
 * (threads whose sum is an in-order addition) writing the same bits, the
 * sum of rank-1 gradients reproduced; error feedback making the mean of the
 * outputs converge to the true sum of a full-rank gradient (without it the
 * mean stays a rank-1 approximation); a zero gradient not freezing Q; the
 * state a checkpoint keeps resuming the same sums from the errors' sum; the
 * arithmetic on several threads writing the one thread's bits; its timing
 * for dist.bucket_mb = auto, in groups and with a tensor cut.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "dist/powersgd.h"
#include "model/backend.h"

/* Where the objects under test keep their state and run their arithmetic:
 * NULL, the host's loops (powersgd_create); the CPU backend, the device
 * path (powersgd_create_on), which NCCL's ranks run on a GPU. */
static const backend *dev_;
static powersgd *mk(const powersgd_tensor *t, int n_t, size_t n, int r, uint64_t seed) {
    return powersgd_create_on(dev_, t, n_t, n, r, seed);
}

/* One rank: the sum over the ranks is the identity; counts its calls in *ctx. */
static void count_sum(float *buf, size_t n, void *ctx) {
    (void)buf;
    (void)n;
    (*(int *)ctx)++;
}

/* tensors: a 16x36 matrix (576: compressed at r 2: 2*(16+36) = 104), a
 * vector of 16, a 4x4 matrix (16 < 2*2*8: not compressed), a 10x300 matrix. */
static const powersgd_tensor T4[] = {{0, 576, 16}, {576, 16, 1}, {592, 16, 4}, {608, 3000, 10}};
#define T4_N 3608

static void test_regions_tile(void **state) {
    (void)state;
    powersgd *p = powersgd_create(T4, 4, T4_N, 2, 1);
    size_t values, wire;
    assert_int_equal(powersgd_summary(T4, 4, 2, &values, &wire), 2);
    assert_int_equal(values, 576 + 3000);
    assert_int_equal(wire, 2 * (16 + 36) + 16 + 16 + 2 * (10 + 300));
    assert_int_equal(powersgd_summary(T4, 4, 1, &values, &wire), 3); /* the 4x4: 16 >= 2 * 1 * (4 + 4) */
    assert_int_equal(wire, 52 + 16 + 8 + 310);
    /* bucket sizes that cut tensors anywhere: the regions tile [0, n) in order */
    size_t sizes[] = {1, 7, 100, 577, 600, 5000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t covered = 0;
        for (size_t begin = 0; begin < T4_N; begin += sizes[s]) {
            size_t end = begin + sizes[s] < T4_N ? begin + sizes[s] : T4_N, lo, hi;
            powersgd_region(p, begin, end, &lo, &hi);
            assert_true(lo <= hi && hi <= end);
            if (lo == hi) continue;
            assert_int_equal(lo, covered);
            covered = hi;
        }
        assert_int_equal(covered, T4_N);
    }
    size_t lo, hi;
    powersgd_region(p, 0, 600, &lo, &hi); /* ends inside the 4x4 matrix: the first two tensors */
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 592);
    powersgd_region(p, 600, 700, &lo, &hi); /* the 4x4 ends here; the big one does not */
    assert_int_equal(lo, 592);
    assert_int_equal(hi, 608);
    powersgd_region(p, 700, 800, &lo, &hi);
    assert_int_equal(lo, hi);
    int calls = 0;
    float g[1] = {0};
    powersgd_reduce(p, g, 800, 800, count_sum, &calls); /* empty: no sum */
    assert_int_equal(calls, 0);
    powersgd_free(p);
}


/* dist.bucket_mb = auto's timing of the arithmetic: 0 with nothing
 * compressed, positive otherwise; in groups under a budget, and with a
 * tensor above the budget cut to 16 of its 256 rows, it gives about the
 * rate of one group of everything (within 4x either way: timings, but a
 * cut tensor's time left unscaled would be 16x off). */
static void test_time_ns(void **state) {
    (void)state;
    const powersgd_tensor vectors[] = {{0, 16, 1}, {16, 16, 4}};
    assert_true(powersgd_time_ns(vectors, 2, 2, 1, 1000, 1) == 0.0);
    double whole = powersgd_time_ns(T4, 4, 2, 1, 1 << 20, 3), groups = powersgd_time_ns(T4, 4, 2, 1, 600, 3);
    printf("    T4 at r 2: %.2f ns a value in one group, %.2f in groups of 600 values\n", whole, groups);
    assert_true(whole > 0 && groups > whole / 4 && groups < whole * 4);
    const powersgd_tensor big[] = {{0, 3000, 10}, {3000, 256 * 4096, 256}};
    whole = powersgd_time_ns(big, 2, 2, 1, 1 << 21, 3);
    double cut = powersgd_time_ns(big, 2, 2, 1, 16 * 4096, 3);
    printf("    256x4096 at r 2: %.2f ns a value whole, %.2f cut to 16 rows\n", whole, cut);
    assert_true(whole > 0 && cut > whole / 4 && cut < whole * 4);
}

static void fill_normal(float *x, size_t n, uint64_t seed) {
    rng g;
    rng_seed(&g, seed, 7);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&g);
}

static double rel_err(const float *x, const double *ref, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += (x[i] - ref[i]) * (x[i] - ref[i]);
        s += ref[i] * ref[i];
    }
    return sqrt(d / (s > 0 ? s : 1));
}

/* rel_err against a float reference. */
static double rel_err_f(const float *x, const float *ref, size_t n) {
    double *r = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) r[i] = ref[i];
    double e = rel_err(x, r, n);
    free(r);
    return e;
}

/* p's state (powersgd_state_get) in new arrays *q[*nq], *e[*ne] the caller frees. */
static void state_copy(const powersgd *p, float **q, size_t *nq, float **e, size_t *ne, uint64_t draws[2]) {
    int rk;
    powersgd_state_size(p, &rk, nq, ne);
    *q = malloc(*nq * sizeof(float));
    *e = malloc(*ne * sizeof(float));
    powersgd_state_get(p, *q, *e, draws);
}

/* M = U V^T of rank 2 at r 2 is reproduced; the vector and the 4x4 matrix
 * pass through bit for bit; two sums for the region. */
static void test_low_rank_reproduced(void **state) {
    (void)state;
    powersgd *p = mk(T4, 4, T4_N, 2, 3);
    float *g = malloc(T4_N * sizeof(float)), *want = malloc(T4_N * sizeof(float));
    double *ref = malloc(T4_N * sizeof(double));
    float U[16 * 2], V[36 * 2], U2[10 * 2], V2[300 * 2];
    fill_normal(U, 32, 1);
    fill_normal(V, 72, 2);
    fill_normal(U2, 20, 3);
    fill_normal(V2, 600, 4);
    fill_normal(g, T4_N, 5);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 36; j++) g[i * 36 + j] = U[i * 2] * V[j * 2] + U[i * 2 + 1] * V[j * 2 + 1];
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 300; j++) g[608 + i * 300 + j] = U2[i * 2] * V2[j * 2] + U2[i * 2 + 1] * V2[j * 2 + 1];
    memcpy(want, g, T4_N * sizeof(float));
    for (size_t i = 0; i < T4_N; i++) ref[i] = want[i];
    int calls = 0;
    powersgd_reduce(p, g, 0, T4_N, count_sum, &calls);
    assert_int_equal(calls, 2);
    assert_memory_equal(g + 576, want + 576, 32 * sizeof(float));
    assert_true(rel_err(g, ref, 576) < 1e-5);
    assert_true(rel_err(g + 608, ref + 608, 3000) < 1e-5);
    /* a region of uncompressed tensors alone: one sum, the values unchanged */
    calls = 0;
    powersgd_reduce(p, g, 576, 608, count_sum, &calls);
    assert_int_equal(calls, 1);
    assert_memory_equal(g + 576, want + 576, 32 * sizeof(float));
    free(g);
    free(want);
    free(ref);
    powersgd_free(p);
}

/* W ranks as threads; the sum adds the ranks' buffers in rank order. */
#define W 3
typedef struct world {
    pthread_barrier_t bar;
    float *bufs[W];
} world;

typedef struct rank_ctx {
    world *w;
    int rank;
    float *tmp;
    powersgd *p;
    float *g;    /* this rank's gradient buffer */
    float *grad; /* what it starts each step from */
    int steps;
    float *mean; /* sum of the outputs over the steps */
} rank_ctx;

static void world_sum(float *buf, size_t n, void *ctx) {
    rank_ctx *c = ctx;
    c->w->bufs[c->rank] = buf;
    pthread_barrier_wait(&c->w->bar);
    for (size_t j = 0; j < n; j++) {
        float s = 0;
        for (int q = 0; q < W; q++) s += c->w->bufs[q][j];
        c->tmp[j] = s;
    }
    pthread_barrier_wait(&c->w->bar);
    memcpy(buf, c->tmp, n * sizeof(float));
}

static void *rank_main(void *arg) {
    rank_ctx *c = arg;
    for (int s = 0; s < c->steps; s++) {
        memcpy(c->g, c->grad, T4_N * sizeof(float));
        powersgd_reduce(c->p, c->g, 0, T4_N, world_sum, c);
        if (c->mean)
            for (size_t i = 0; i < T4_N; i++) c->mean[i] += c->g[i];
    }
    return NULL;
}

/* The W ranks p[] take `steps` steps from grads[], writing out[] (and
 * adding the outputs into mean[] when mean is not NULL). */
static void run_ranks(powersgd *p[W], float *grads[W], int steps, float *out[W], float *mean[W]) {
    world w;
    pthread_barrier_init(&w.bar, NULL, W);
    rank_ctx c[W];
    pthread_t th[W];
    for (int q = 0; q < W; q++) {
        c[q] = (rank_ctx){.w = &w, .rank = q, .tmp = malloc(T4_N * sizeof(float)), .p = p[q], .g = out[q],
                          .grad = grads[q], .steps = steps, .mean = mean ? mean[q] : NULL};
        pthread_create(&th[q], NULL, rank_main, &c[q]);
    }
    for (int q = 0; q < W; q++) {
        pthread_join(th[q], NULL);
        free(c[q].tmp);
    }
    pthread_barrier_destroy(&w.bar);
}

static void run_world(float *grads[W], int steps, float *out[W], float *mean[W], int rank_r) {
    powersgd *p[W];
    for (int q = 0; q < W; q++) p[q] = mk(T4, 4, T4_N, rank_r, 11);
    run_ranks(p, grads, steps, out, mean);
    for (int q = 0; q < W; q++) powersgd_free(p[q]);
}

/* Each rank's matrices u v_q^T share u: their sum is rank 1, reproduced at
 * r 1; every rank writes the same bits; the uncompressed tensors are the
 * in-order sums exactly. */
static void test_ranks_agree_and_sum(void **state) {
    (void)state;
    float *grads[W], *out[W];
    float u[16], u2[10];
    fill_normal(u, 16, 21);
    fill_normal(u2, 10, 22);
    double *ref = calloc(T4_N, sizeof(double));
    for (int q = 0; q < W; q++) {
        grads[q] = malloc(T4_N * sizeof(float));
        out[q] = malloc(T4_N * sizeof(float));
        fill_normal(grads[q], T4_N, 30 + (uint64_t)q);
        float v[36], v2[300];
        fill_normal(v, 36, 40 + (uint64_t)q);
        fill_normal(v2, 300, 50 + (uint64_t)q);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 36; j++) grads[q][i * 36 + j] = u[i] * v[j];
        for (int i = 0; i < 10; i++)
            for (int j = 0; j < 300; j++) grads[q][608 + i * 300 + j] = u2[i] * v2[j];
        for (size_t i = 0; i < T4_N; i++) ref[i] += grads[q][i];
    }
    run_world(grads, 1, out, NULL, 1);
    for (int q = 1; q < W; q++) assert_memory_equal(out[q], out[0], T4_N * sizeof(float));
    for (size_t i = 576; i < 592; i++) { /* the vector (the 4x4 matrix is compressed at r 1) */
        float s = 0;
        for (int q = 0; q < W; q++) s += grads[q][i];
        assert_true(out[0][i] == s);
    }
    assert_true(rel_err(out[0], ref, 576) < 1e-5);
    assert_true(rel_err(out[0] + 608, ref + 608, 3000) < 1e-5);
    for (int q = 0; q < W; q++) {
        free(grads[q]);
        free(out[q]);
    }
    free(ref);
}

/* Full-rank gradients, the same every step, at r 1: one output is a rank-1
 * approximation far from the sum (94 % off here), but with error feedback
 * what is left out comes back later, and the mean over 1000 steps is within
 * 2 % of the sum (measured 0.6 % and 1.0 %; 93 % without the error). */
static void test_error_feedback_converges(void **state) {
    (void)state;
    float *grads[W], *out[W], *mean[W];
    double *ref = calloc(T4_N, sizeof(double));
    for (int q = 0; q < W; q++) {
        grads[q] = malloc(T4_N * sizeof(float));
        out[q] = malloc(T4_N * sizeof(float));
        mean[q] = calloc(T4_N, sizeof(float));
        fill_normal(grads[q], T4_N, 60 + (uint64_t)q);
        for (size_t i = 0; i < T4_N; i++) ref[i] += grads[q][i];
    }
    run_world(grads, 1, out, NULL, 1);
    double one = rel_err(out[0] + 608, ref + 608, 3000);
    assert_true(one > 0.5); /* a rank-1 approximation of a random 10x300 matrix */
    const int steps = 1000;
    run_world(grads, steps, out, mean, 1);
    for (int q = 1; q < W; q++) assert_memory_equal(mean[q], mean[0], T4_N * sizeof(float));
    for (size_t i = 0; i < T4_N; i++) mean[0][i] /= (float)steps;
    double big = rel_err(mean[0] + 608, ref + 608, 3000), small = rel_err(mean[0], ref, 576);
    if (getenv("PSGD_DEBUG")) fprintf(stderr, "one step %.4f; mean of %d: %.4f %.4f\n", one, steps, big, small);
    assert_true(big < 0.02);
    assert_true(small < 0.02);
    for (int q = 0; q < W; q++) {
        free(grads[q]);
        free(out[q]);
        free(mean[q]);
    }
    free(ref);
}

/* A step of zero gradients leaves Q zero; it is drawn again, so the next
 * step's rank-1 gradient is still reproduced. */
static void test_zero_gradient_does_not_freeze(void **state) {
    (void)state;
    powersgd *p = mk(T4, 4, T4_N, 1, 5);
    float *g = calloc(T4_N, sizeof(float));
    int calls = 0;
    powersgd_reduce(p, g, 0, T4_N, count_sum, &calls);
    for (size_t i = 0; i < T4_N; i++) assert_true(g[i] == 0.0f);
    float u[16], v[36];
    fill_normal(u, 16, 70);
    fill_normal(v, 36, 71);
    double ref[576];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 36; j++) ref[i * 36 + j] = g[i * 36 + j] = u[i] * v[j];
    powersgd_reduce(p, g, 0, T4_N, count_sum, &calls);
    assert_true(rel_err(g, ref, 576) < 1e-5);
    free(g);
    powersgd_free(p);
}

/* A resume (what a checkpoint keeps, dist/powersgd.h): after 5 steps of
 * full-rank gradients at r 1, new ranks given Q, the draws and the ranks'
 * summed error on rank 0 alone (none on the others) go on as the old ranks
 * do, up to rounding (5 more steps within 1e-4 of the sum's size; the same
 * bits on every new rank); with Q alone (the error lost), or each rank's
 * own error without the others', they do not (above 1e-2). */
static double resume_gap(int mode) {
    float *grads[W], *out[W], *again[W];
    powersgd *p[W], *r[W];
    for (int q = 0; q < W; q++) {
        grads[q] = malloc(T4_N * sizeof(float));
        out[q] = malloc(T4_N * sizeof(float));
        again[q] = malloc(T4_N * sizeof(float));
        fill_normal(grads[q], T4_N, 70 + (uint64_t)q);
        p[q] = mk(T4, 4, T4_N, 1, 5);
        r[q] = mk(T4, 4, T4_N, 1, 99); /* another seed: everything must come from the state */
    }
    run_ranks(p, grads, 5, out, NULL);
    int rank;
    size_t nq, ne;
    powersgd_state_size(p[0], &rank, &nq, &ne);
    assert_int_equal(rank, 1);
    assert_true(nq == 36 + 4 + 300 && ne == 576 + 16 + 3000); /* r x cols; the compressed values */
    float *q = malloc(nq * sizeof(float)), *q1 = malloc(nq * sizeof(float)), *e = calloc(ne, sizeof(float));
    float *e1 = malloc(ne * sizeof(float)), *sum = calloc(ne, sizeof(float));
    uint64_t draws[2], draws1[2];
    for (int k = 0; k < W; k++) {
        powersgd_state_get(p[k], k ? q1 : q, e1, k ? draws1 : draws);
        if (k) assert_memory_equal(q1, q, nq * sizeof(float)); /* Q and the draws: every rank's */
        if (k) assert_true(draws1[0] == draws[0] && draws1[1] == draws[1]);
        for (size_t i = 0; i < ne; i++) sum[i] += e1[i];
        if (k == 0) memcpy(e, e1, ne * sizeof(float));
    }
    for (int k = 0; k < W; k++)
        powersgd_state_set(r[k], q, k > 0 ? NULL : mode == 0 ? sum : mode == 1 ? NULL : e, draws);
    run_ranks(p, grads, 5, out, NULL);
    run_ranks(r, grads, 5, again, NULL);
    for (int k = 1; k < W; k++) assert_memory_equal(again[k], again[0], T4_N * sizeof(float));
    double d = 0, n = 0;
    for (size_t i = 0; i < T4_N; i++) {
        d += ((double)again[0][i] - out[0][i]) * ((double)again[0][i] - out[0][i]);
        n += (double)out[0][i] * out[0][i];
    }
    for (int k = 0; k < W; k++) {
        free(grads[k]);
        free(out[k]);
        free(again[k]);
        powersgd_free(p[k]);
        powersgd_free(r[k]);
    }
    free(q);
    free(q1);
    free(e);
    free(e1);
    free(sum);
    return sqrt(d / n);
}

static void test_state_resumes(void **state) {
    (void)state;
    double summed = resume_gap(0), lost = resume_gap(1), own = resume_gap(2);
    printf("    resumed with the summed error %.2e, without it %.2e, with rank 0's own %.2e\n", summed, lost, own);
    assert_true(summed < 1e-4);
    assert_true(lost > 1e-2);
    assert_true(own > 1e-2);
}

/* The arithmetic on 2 and 3 threads writes the one thread's bits, output
 * and state, step after step: tensors above the 64 K values where the
 * threads start (one with a column count that is no multiple of the
 * threads' 16-float column blocks, one with fewer rows than threads), one
 * below, and a vector; bucket regions as the reducer cuts them. */
static void test_threads_same_bits(void **state) {
    (void)state;
    static const powersgd_tensor T[] = {{0, 70000, 100},      /* 100 x 700 */
                                        {70000, 65, 1},       /* a vector */
                                        {70065, 150000, 3},   /* 3 x 50000 (at r 1): rows split 2 + 1 */
                                        {220065, 3000, 10},   /* below the threshold */
                                        {223065, 69993, 33}}; /* 33 x 2121 */
    enum { NT = 5, N = 293058, STEPS = 3 };
    for (int r = 1; r <= 3; r += 2) {
        powersgd *one = powersgd_create(T, NT, N, r, 11);
        powersgd *two = powersgd_create(T, NT, N, r, 11), *three = powersgd_create(T, NT, N, r, 11);
        powersgd_set_threads(two, 2);
        powersgd_set_threads(three, 3);
        powersgd *ps[3] = {one, two, three};
        float *g[3], *in = malloc(N * sizeof(float));
        for (int k = 0; k < 3; k++) g[k] = malloc(N * sizeof(float));
        for (int step = 0; step < STEPS; step++) {
            fill_normal(in, N, 100 + (uint64_t)step);
            for (int k = 0; k < 3; k++) {
                memcpy(g[k], in, N * sizeof(float));
                int calls = 0;
                size_t cut[] = {0, 100000, 230000, N}, lo, hi;
                for (int b = 0; b < 3; b++) {
                    powersgd_region(ps[k], cut[b], cut[b + 1], &lo, &hi);
                    powersgd_reduce(ps[k], g[k], lo, hi, count_sum, &calls);
                }
            }
            assert_memory_equal(g[1], g[0], N * sizeof(float));
            assert_memory_equal(g[2], g[0], N * sizeof(float));
        }
        size_t nq, ne;
        float *q[3], *e[3];
        uint64_t d[3][2];
        for (int k = 0; k < 3; k++) state_copy(ps[k], &q[k], &nq, &e[k], &ne, d[k]);
        for (int k = 1; k < 3; k++) {
            assert_memory_equal(q[k], q[0], nq * sizeof(float));
            assert_memory_equal(e[k], e[0], ne * sizeof(float));
        }
        for (int k = 0; k < 3; k++) {
            free(q[k]);
            free(e[k]);
            free(g[k]);
            powersgd_free(ps[k]);
        }
        free(in);
    }
}

/* The device path (powersgd_create_on) on the CPU backend: the tests above
 * again, and step by step the host path's outputs and state, to the
 * rounding of the backend's GEMMs. */
static void on_device(void (*test)(void **), void **state) {
    dev_ = backend_cpu();
    test(state);
    dev_ = NULL;
}
static void test_device_ranks_agree_and_sum(void **state) { on_device(test_ranks_agree_and_sum, state); }
static void test_device_error_feedback_converges(void **state) { on_device(test_error_feedback_converges, state); }
static void test_device_zero_gradient_does_not_freeze(void **state) {
    on_device(test_zero_gradient_does_not_freeze, state);
}
static void test_device_low_rank_reproduced(void **state) { on_device(test_low_rank_reproduced, state); }
static void test_device_state_resumes(void **state) { on_device(test_state_resumes, state); }

static void test_device_matches_host(void **state) {
    (void)state;
    for (int r = 1; r <= 2; r++) {
        powersgd *host = powersgd_create(T4, 4, T4_N, r, 9);
        powersgd *dev = powersgd_create_on(backend_cpu(), T4, 4, T4_N, r, 9);
        float *gh = malloc(T4_N * sizeof(float)), *gd = malloc(T4_N * sizeof(float));
        int calls_h = 0, calls_d = 0;
        for (int step = 0; step < 6; step++) {
            fill_normal(gh, T4_N, 80 + (uint64_t)step);
            memcpy(gd, gh, T4_N * sizeof(float));
            /* two regions, as two buckets cut them */
            size_t lo, hi;
            powersgd_region(host, 0, 600, &lo, &hi);
            powersgd_reduce(host, gh, lo, hi, count_sum, &calls_h);
            powersgd_reduce(dev, gd, lo, hi, count_sum, &calls_d);
            powersgd_region(host, 600, T4_N, &lo, &hi);
            powersgd_reduce(host, gh, lo, hi, count_sum, &calls_h);
            powersgd_reduce(dev, gd, lo, hi, count_sum, &calls_d);
            assert_true(rel_err_f(gd, gh, T4_N) < 1e-5);
        }
        assert_int_equal(calls_d, calls_h);
        size_t nq, ne;
        float *q[2], *e[2];
        uint64_t d[2][2];
        state_copy(host, &q[0], &nq, &e[0], &ne, d[0]);
        state_copy(dev, &q[1], &nq, &e[1], &ne, d[1]);
        assert_true(rel_err_f(q[1], q[0], nq) < 1e-4);
        assert_true(rel_err_f(e[1], e[0], ne) < 1e-4);
        /* the state set on the device reads back the same */
        powersgd_state_set(dev, q[0], e[0], d[0]);
        powersgd_state_get(dev, q[1], e[1], d[1]);
        assert_memory_equal(q[1], q[0], nq * sizeof(float));
        assert_memory_equal(e[1], e[0], ne * sizeof(float));
        assert_memory_equal(d[1], d[0], sizeof d[0]);
        for (int k = 0; k < 2; k++) {
            free(q[k]);
            free(e[k]);
        }
        free(gh);
        free(gd);
        powersgd_free(host);
        powersgd_free(dev);
    }
}

int main(void) {
    backend_cpu()->set_threads(1); /* the ranks are threads that call the backend at once */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regions_tile),
        cmocka_unit_test(test_time_ns),
        cmocka_unit_test(test_low_rank_reproduced),
        cmocka_unit_test(test_ranks_agree_and_sum),
        cmocka_unit_test(test_error_feedback_converges),
        cmocka_unit_test(test_zero_gradient_does_not_freeze),
        cmocka_unit_test(test_state_resumes),
        cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_device_matches_host),
        cmocka_unit_test(test_device_low_rank_reproduced),
        cmocka_unit_test(test_device_ranks_agree_and_sum),
        cmocka_unit_test(test_device_error_feedback_converges),
        cmocka_unit_test(test_device_zero_gradient_does_not_freeze),
        cmocka_unit_test(test_device_state_resumes),
    };
    return cmocka_run_group_tests_name("powersgd", tests, NULL, NULL);
}
