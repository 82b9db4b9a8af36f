/*
 * tests/mpi_nccl.c - the gradient reducer on a GPU under mpirun, both paths:
 * NCCL (dist/nccl.h) and MPI staged through host memory with fences (run by
 * tests/test_nccl.sh; alone it is a world of one).
 *
 * Needs a build with NCCL (CNT_HAVE_NCCL=1) and a usable CUDA device on every
 * rank (backend_get_for_rank(BACKEND_DEVICE_CUDA, local rank)); otherwise rank 0 prints
 * "SKIPPED: <reason>" and every rank exits 0.
 *
 * Checks, for several buffer sizes and bucket layouts, overlap on and off,
 * three steps each: backward is imitated on the compute stream (a few large
 * GEMMs keep the stream busy, then a device copy writes the next slice of
 * gradients, then reducer_grads_ready reports it), reducer_finish, then an op
 * issued after it copies the gradients out; the result must equal
 * dist_allreduce_sum (MPI, on the host) of every rank's values: bitwise for
 * small integers (exact in any summation order), within a rounding bound for
 * fractional values. With dist.compress = fp16 (REDUCER_COMPRESS_FP16) on
 * both paths the result must equal MPI_Allreduce of the rounded halves
 * (dist_allreduce_sum_f16), widened: bitwise for integers and, at 2 ranks
 * (one rounding), for fractions too. Each step's values differ, and the buffer starts at
 * zero, so an allreduce that ran before the copy that wrote its bucket (a
 * missing fence or event wait) reads stale values and fails. Also: the
 * reducer's stats (buckets, early, comm_step one step late on NCCL), the
 * dist_nccl round times (count, order, on the host clock), and the timeline
 * getting every bucket of both steps when reducer_set_timeline(rd, NULL)
 * flushes the last one. And a recorded round (train.cuda_graph): a copy
 * and K allreduces captured into a CUDA graph under dist_nccl_record, the
 * graph launched and then replayed on new values, each replay's round
 * (dist_nccl_replay) timed on its own events after the recording's, the
 * sums right each time, and an eager round between replays still working.
 * And dist.compress = powersgd through NCCL (its arithmetic on the GPU)
 * against the same through host memory (test_powersgd_paths).
 *
 * --quick runs fewer sizes (for NCCL over its socket transport, which
 * test_nccl.sh uses to give two ranks on one GPU real allreduces).
 *
 * dist_nccl_create refuses two ranks on one GPU: then rank 0 prints
 * "mpi_nccl: dist_nccl_create failed: <message>" on stderr and every rank
 * exits 2 (test_nccl.sh runs more ranks than GPUs and expects exactly that).
 *
 * Output: rank 0 prints "mpi_nccl: world W, G GPU(s) on this node" first, then
 * "ok ..." or "FAIL ..." per check, then "mpi_nccl: world W, all checks
 * passed" (or "FAILED"); every rank exits 1 if any check failed anywhere.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/half.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "tests/support/mpi_check.h"
#include "dist/nccl.h"
#include "dist/reducer.h"
#include "dist/timeline.h"
#include "model/backend.h"

static int rank_, world_;
static int quick_; /* --quick: fewer sizes and no 1000-value buckets past 64K values (NCCL over sockets) */

#if CNT_HAVE_NCCL



/* Small integers: every partial sum is exact in float, whatever the order. */
static float int_value(int r, size_t i, long step) { return (float)((r + 1) * (int)(i % 13) - 6 + 3 * (int)step); }

/* Fractional values in [-1, 1), the same function on every rank. */
static float frac_value(int r, size_t i, long step) {
    uint32_t s = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u) ^ (uint32_t)(step * 97u);
    s = s * 1664525u + 1013904223u;
    s ^= s >> 13;
    s *= 2246822519u;
    s ^= s >> 16;
    return (float)(s & 0xffffff) / (float)(1 << 23) - 1.0f;
}

/* Keeps the compute stream busy for a while (large GEMMs), so an allreduce
 * that did not wait for the ops before it would overtake them. */
typedef struct busy {
    float *a, *b, *c;
    int dim;
} busy;

static void keep_busy(const backend *be, const busy *w, int reps) {
    const backend_ctx fp32 = {0};
    for (int k = 0; k < reps; k++)
        be->gemm(&fp32, 0, 0, w->dim, w->dim, w->dim, 1.0f, w->a, w->dim, w->b, w->dim, 0.0f, w->c, w->dim, 0);
}

typedef struct layout {
    size_t n, first, bucket;
} layout;

/* Three steps of imitated backward + reducer on one layout (path: NCCL when
 * nc, else MPI staged through host memory), checked against MPI on the host. */
static void run_reducer(const backend *be, dist_nccl *nc, const busy *w, layout L, int overlap, int fractional,
                        int fp16, timeline *tl) {
    const char *path = nc ? (fp16 ? "nccl fp16" : "nccl") : (fp16 ? "mpi-staged fp16" : "mpi-staged");
    size_t n = L.n;
    float *src_h = cnt_malloc(n * sizeof(float)), *want = cnt_malloc(n * sizeof(float));
    float *got = cnt_malloc(n * sizeof(float));
    uint16_t *half = fp16 ? cnt_malloc(n * sizeof(uint16_t)) : NULL;
    float *src = be->alloc(n * sizeof(float)), *grads = be->alloc(n * sizeof(float));
    float *out = be->alloc(n * sizeof(float));
    reducer_opts ro = {.first_bucket = L.first, .bucket = L.bucket, .algo = DIST_ALGO_MPI, .overlap = overlap,
                       .compress = fp16 ? REDUCER_COMPRESS_FP16 : REDUCER_COMPRESS_NONE, .stall_warn_s = 10,
                       .stall_abort_s = 60, .nccl = nc};
    reducer *rd = reducer_create(be, grads, n, &ro);
    if (tl) reducer_set_timeline(rd, tl);
    int nb = reducer_bucket_count(rd);
    int ok_sum = 1, ok_stats = 1;
    double worst = 0;
    uint32_t lcg = (uint32_t)(n * 7 + L.first);
    for (long step = 1; step <= 3; step++) {
        for (size_t i = 0; i < n; i++) src_h[i] = fractional ? frac_value(rank_, i, step) : int_value(rank_, i, step);
        be->upload(src, src_h, n * sizeof(float));
        reducer_begin(rd, step);
        /* backward: slices of varying length, from offset 0 upwards */
        size_t off = 0;
        while (off < n) {
            lcg = lcg * 1664525u + 1013904223u;
            size_t max_len = n / 5 + 1, len = 1 + (lcg >> 8) % max_len;
            if (len > n - off) len = n - off;
            keep_busy(be, w, 2);
            be->copy(grads + off, src + off, len * sizeof(float));
            reducer_grads_ready(rd, off, len);
            off += len;
        }
        reducer_stats st;
        reducer_finish(rd, &st);
        /* the optimizer's place: an op issued after reducer_finish */
        be->copy(out, grads, n * sizeof(float));
        /* a stuck allreduce ends the test here, named, within the limits (a copy would wait unbounded) */
        reducer_wait_sums(rd);
        be->download(got, out, n * sizeof(float));

        if (fp16) { /* MPI_Allreduce of the halves (dist.h's fp16 sum), widened */
            fp16_from_float_array(half, src_h, n);
            dist_allreduce_sum_f16(half, n, DIST_ALGO_MPI);
            fp16_to_float_array(want, half, n);
        } else {
            memcpy(want, src_h, n * sizeof(float));
            dist_allreduce_sum(want, n, DIST_ALGO_MPI);
        }
        /* 2 ranks: one rounding, the same bits in any order */
        if (fractional && !(fp16 && world_ == 2)) {
            for (size_t i = 0; i < n; i++) {
                double err = fabs((double)got[i] - (double)want[i]);
                /* Each of the world-1 additions rounds once, at most half an
                 * ulp of a partial sum (|partial| <= world): 2^-23 of it in
                 * float, 2^-10 in half. */
                double tol = world_ * (double)world_ * ldexp(1.0, fp16 ? -10 : -23);
                if (!(err <= tol)) ok_sum = 0;
                if (err > worst) worst = err;
            }
        } else {
            ok_sum &= memcmp(got, want, n * sizeof(float)) == 0;
        }
        ok_stats &= st.buckets == nb;
        ok_stats &= st.early == (overlap ? nb : 0);
        ok_stats &= st.comm_ms >= 0 && st.exposed_ms >= 0;
        if (nc) {
            /* one step late */
            ok_stats &= st.comm_step == step - 1;
            if (step > 1) ok_stats &= st.comm_ms > 0;
        } else {
            ok_stats &= st.comm_step == step;
        }
    }
    if (tl) reducer_set_timeline(rd, NULL);
    tu_mpi_check(ok_sum, "%s n=%zu buckets=%d (first %zu, then %zu) overlap=%d %s: 3 steps of sums %s", path, n, nb,
                 L.first, L.bucket, overlap, fractional ? "fractional" : "integer",
                 fractional && !(fp16 && world_ == 2) ? "within the rounding bound" : "bitwise equal to MPI_Allreduce");
    if (fractional && rank_ == 0 && worst > 0) printf("     (largest difference from MPI: %.3g)\n", worst);
    tu_mpi_check(ok_stats, "%s n=%zu overlap=%d: stats (buckets %d, early, comm_step %s)", path, n, overlap, nb,
                 nc ? "one step late" : "this step");
    reducer_free(rd);
    be->free(src);
    be->free(grads);
    be->free(out);
    free(src_h);
    free(want);
    free(got);
    free(half);
}

/* dist.compress = powersgd on both paths from the same gradients: NCCL's
 * (the arithmetic on the GPU after backward, dist/reducer_nccl.c) against
 * the host's (the communication thread, bucket by bucket): step 1
 * uncompressed, steps 2-4 compressed at rank 2; each step's output within
 * 1e-4 of the host path's (the GEMMs round differently), the same bits on
 * every rank, NCCL's rounds of 2 sums in its stats (comm_ms), and an
 * uncompressed first step equal to a plain allreduce bit for bit. */
static void test_powersgd_paths(const backend *be, dist_nccl *nc, const busy *w) {
    static const powersgd_tensor T[] = {{0, 36864, 64},       /* 64 x 576 */
                                        {36864, 64, 1},       /* a vector */
                                        {36928, 147456, 128}, /* 128 x 1152 */
                                        {184384, 10, 1}};
    enum { NT = 4, STEPS = 4 };
    const size_t n = 184394;
    float *src_h = cnt_malloc(n * sizeof(float)), *got[2], *want = cnt_malloc(n * sizeof(float));
    float *src = be->alloc(n * sizeof(float)), *grads[2];
    reducer *rd[2];
    for (int k = 0; k < 2; k++) { /* 0: NCCL, 1: MPI through host memory */
        got[k] = cnt_malloc(n * sizeof(float));
        grads[k] = be->alloc(n * sizeof(float));
        reducer_opts ro = {.first_bucket = n / 7 + 1, .bucket = n / 3 + 1, .algo = DIST_ALGO_MPI, .overlap = 1,
                           .in_flight = 1, .compress = REDUCER_COMPRESS_POWERSGD, .psgd_rank = 2, .psgd_start = 1,
                           .psgd_threads = 1, .psgd_seed = 7, .tensors = T, .n_tensors = NT, .stall_warn_s = 10,
                           .stall_abort_s = 60, .nccl = k == 0 ? nc : NULL};
        rd[k] = reducer_create(be, grads[k], n, &ro);
    }
    int ok_close = 1, ok_same = 1, ok_first = 1, ok_stats = 1;
    double worst = 0;
    for (long step = 1; step <= STEPS; step++) {
        for (size_t i = 0; i < n; i++) src_h[i] = frac_value(rank_, i, step);
        be->upload(src, src_h, n * sizeof(float));
        for (int k = 0; k < 2; k++) {
            reducer_begin(rd[k], step);
            size_t half = n / 2; /* backward in two slices */
            keep_busy(be, w, 2);
            be->copy(grads[k], src, half * sizeof(float));
            reducer_grads_ready(rd[k], 0, half);
            be->copy(grads[k] + half, src + half, (n - half) * sizeof(float));
            reducer_grads_ready(rd[k], half, n - half);
            reducer_stats st;
            reducer_finish(rd[k], &st);
            reducer_wait_sums(rd[k]);
            be->download(got[k], grads[k], n * sizeof(float));
            if (k == 0 && step > 2) ok_stats &= st.comm_step == step - 1 && st.comm_ms > 0;
        }
        double d = 0, s = 0;
        for (size_t i = 0; i < n; i++) {
            d += ((double)got[0][i] - got[1][i]) * ((double)got[0][i] - got[1][i]);
            s += (double)got[1][i] * got[1][i];
        }
        double rel = sqrt(d / (s > 0 ? s : 1));
        if (rel > worst) worst = rel;
        ok_close &= rel < 1e-4;
        memcpy(want, got[0], n * sizeof(float));
        dist_broadcast(want, n * sizeof(float), 0);
        ok_same &= memcmp(want, got[0], n * sizeof(float)) == 0;
        if (step == 1) { /* uncompressed: the plain sum, exactly as MPI_Allreduce adds (2 ranks: one addition) */
            memcpy(want, src_h, n * sizeof(float));
            dist_allreduce_sum(want, n, DIST_ALGO_MPI);
            if (world_ == 2) ok_first &= memcmp(want, got[0], n * sizeof(float)) == 0;
        }
    }
    tu_mpi_check(ok_close, "powersgd: NCCL's path (on the GPU) within 1e-4 of the host's, %d steps (worst %.2g)",
                 STEPS, worst);
    tu_mpi_check(ok_same, "powersgd through NCCL: every rank the same bits");
    tu_mpi_check(ok_first, "powersgd through NCCL: the uncompressed first step is the plain sum");
    tu_mpi_check(ok_stats, "powersgd through NCCL: its rounds timed, one step late");
    for (int k = 0; k < 2; k++) {
        reducer_free(rd[k]);
        be->free(grads[k]);
        free(got[k]);
    }
    be->free(src);
    free(src_h);
    free(want);
}

/* dist_nccl directly: one round of allreduces, joined and timed. */
static void test_rounds(const backend *be, dist_nccl *nc) {
    enum { K = 5 };
    size_t n = (size_t)1 << 20;
    float *buf = be->alloc(K * n * sizeof(float));
    float *h = cnt_malloc(K * n * sizeof(float));
    for (size_t i = 0; i < K * n; i++) h[i] = int_value(rank_, i, 0);
    be->upload(buf, h, K * n * sizeof(float));
    void *stream = be->native_stream();
    double t0 = time_now();
    long r0 = -1, r1 = -1;
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < K; k++) dist_nccl_allreduce_after(nc, stream, buf + k * n, n, NULL);
        long r = dist_nccl_join(nc, stream);
        if (round == 0) r0 = r; else r1 = r;
    }
    tu_mpi_check(r1 == r0 + 1, "dist_nccl_join: rounds numbered in order (%ld, %ld)", r0, r1);
    dist_nccl_round rr;
    dist_nccl_round_wait(nc, r0, 60, 0, "test round", &rr);
    double t1 = time_now();
    int ok = rr.count == K && rr.comm_ms > 0 && rr.exposed_ms >= 0;
    for (int k = 0; k < rr.count; k++) {
        ok &= rr.start_s[k] <= rr.end_s[k];
        if (k) ok &= rr.start_s[k] >= rr.end_s[k - 1] - 1e-5; /* one stream: in order */
        /* on the host clock: between t0 and t1, give or take the anchor's error */
        ok &= rr.start_s[k] > t0 - 0.05 && rr.end_s[k] < t1 + 0.05;
    }
    tu_mpi_check(ok, "dist_nccl_round_wait: %d allreduces, %.3f ms, in order, on the host clock", rr.count, rr.comm_ms);
    dist_nccl_round_wait(nc, r1, 0, 0, "test round", &rr);
    /* two rounds summed in place: world^2 times each value */
    float *got = cnt_malloc(K * n * sizeof(float));
    be->download(got, buf, K * n * sizeof(float));
    int ok_sum = 1;
    for (size_t i = 0; i < K * n; i++) {
        double s = 0;
        for (int r = 0; r < world_; r++) s += int_value(r, i, 0);
        ok_sum &= got[i] == (float)(s * world_);
    }
    tu_mpi_check(ok_sum, "dist_nccl: two rounds of in-place sums, seen by a download after the join");
    be->free(buf);
    free(h);
    free(got);
}

/* Checks round rd: K allreduces, positive times, in order, later than after_s; their end into *end_s. */
static int round_ok(dist_nccl *nc, long round, int K, double after_s, double *end_s, double *ms) {
    dist_nccl_round rr;
    dist_nccl_round_wait(nc, round, 60, 0, "test round", &rr);
    int ok = rr.count == K && rr.comm_ms > 0;
    for (int k = 0; ok && k < rr.count; k++) {
        ok &= rr.start_s[k] <= rr.end_s[k] && rr.start_s[k] > after_s;
        if (k) ok &= rr.start_s[k] >= rr.end_s[k - 1] - 1e-5;
    }
    *end_s = rr.count ? rr.end_s[rr.count - 1] : after_s;
    *ms = rr.comm_ms;
    return ok;
}

/* buf (device, n values) holds the sum over ranks of int_value(r, i, step). */
static int sums_ok(const backend *be, const float *buf, size_t n, long step) {
    float *got = cnt_malloc(n * sizeof(float));
    be->download(got, buf, n * sizeof(float));
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < world_; r++) s += int_value(r, i, step);
        ok &= got[i] == (float)s;
    }
    free(got);
    return ok;
}

static void test_recorded_rounds(const backend *be, dist_nccl *nc) {
    if (!be->capture_begin) return;
    enum { K = 3 };
    size_t n = (size_t)1 << 18, bytes = K * n * sizeof(float);
    float *buf = be->alloc(bytes), *src = be->alloc(bytes), *h = cnt_malloc(bytes);
    void *stream = be->native_stream();
    for (size_t i = 0; i < K * n; i++) h[i] = int_value(rank_, i, 0);
    be->upload(src, h, bytes);
    dist_nccl_record(nc, 1);
    be->capture_begin();
    be->copy(buf, src, bytes); /* each launch sums this launch's values */
    for (int k = 0; k < K; k++) dist_nccl_allreduce_after(nc, stream, buf + k * n, n, NULL);
    long r = dist_nccl_join(nc, stream);
    char why[256] = "";
    void *graph = be->capture_end(why, sizeof why);
    dist_nccl_record(nc, -1);
    tu_mpi_check(graph != NULL, "dist_nccl_record: a copy and %d allreduces captured into a graph%s%s", K,
                 why[0] ? ": " : "", why);
    if (!graph) {
        be->free(buf);
        be->free(src);
        free(h);
        return;
    }
    double end_s = time_now() - 60, ms = 0;
    be->graph_launch(graph);
    int ok = round_ok(nc, r, K, end_s, &end_s, &ms) && sums_ok(be, buf, K * n, 0);
    tu_mpi_check(ok, "recorded round: the first launch sums and times its %d allreduces (%.3f ms)", K, ms);
    for (long step = 1; step <= 3; step++) {
        for (size_t i = 0; i < K * n; i++) h[i] = int_value(rank_, i, step);
        be->upload(src, h, bytes);
        be->graph_launch(graph);
        long rr = dist_nccl_replay(nc, 1);
        ok = rr == r + step && round_ok(nc, rr, K, end_s, &end_s, &ms) && sums_ok(be, buf, K * n, step);
        tu_mpi_check(ok, "replay %ld: round %ld, its own times after the last (%.3f ms), the new values' sums", step,
                     rr, ms);
        if (step == 2) { /* an eager round between replays */
            for (size_t i = 0; i < K * n; i++) h[i] = int_value(rank_, i, 9);
            be->upload(buf, h, bytes);
            for (int k = 0; k < K; k++) dist_nccl_allreduce_after(nc, stream, buf + k * n, n, NULL);
            long re = dist_nccl_join(nc, stream);
            ok = re == rr + 1 && round_ok(nc, re, K, end_s, &end_s, &ms) && sums_ok(be, buf, K * n, 9);
            tu_mpi_check(ok, "an eager round between replays: its own events, after the replay's, summed");
            r++; /* the next replay's round comes after this one */
        }
    }
    be->graph_free(graph);
    be->free(buf);
    be->free(src);
    free(h);
}

static void test_timeline(const backend *be, dist_nccl *nc, const busy *w) {
    timeline *tl = timeline_create(); /* a collective */
    layout L = {100003, 4000, 30000}; /* 5 buckets */
    run_reducer(be, nc, w, L, 1, 0, 0, tl);
    /* 3 steps x 5 buckets: the last step's by reducer_set_timeline(NULL) */
    tu_mpi_check(timeline_count(tl) == 15, "timeline: every NCCL bucket of every step recorded (%ld of 15)",
                 timeline_count(tl));
    timeline_free(tl);
}

static void run_all(const backend *be, dist_nccl *nc) {
    busy w = {.dim = 1024};
    w.a = be->alloc((size_t)w.dim * w.dim * sizeof(float));
    w.b = be->alloc((size_t)w.dim * w.dim * sizeof(float));
    w.c = be->alloc((size_t)w.dim * w.dim * sizeof(float));

    test_rounds(be, nc);
    test_recorded_rounds(be, nc);
    size_t full[] = {1, 7, 1000, 65536 + 3, ((size_t)1 << 22) + 5}, few[] = {7, 65536 + 3, ((size_t)1 << 20) + 5};
    size_t *sizes = quick_ ? few : full, count = quick_ ? sizeof few / sizeof *few : sizeof full / sizeof *full;
    for (size_t s = 0; s < count; s++) {
        size_t n = sizes[s];
        layout ls[] = {{n, n, n}, {n, 3, 1000}, {n, n / 7 + 1, n / 3 + 1}};
        for (size_t l = 0; l < sizeof ls / sizeof ls[0]; l++) {
            if (quick_ && l == 1 && n > 70000) continue;
            for (int overlap = 1; overlap >= 0; overlap--) {
                run_reducer(be, nc, &w, ls[l], overlap, 0, 0, NULL);
                run_reducer(be, NULL, &w, ls[l], overlap, 0, 0, NULL);
            }
        }
        layout lf = {n, n / 5 + 1, n / 4 + 1};
        run_reducer(be, nc, &w, lf, 1, 1, 0, NULL);
        run_reducer(be, NULL, &w, lf, 1, 1, 0, NULL);
        /* dist.compress = fp16, both paths: integers (exact in half) and fractions */
        for (int fractional = 0; fractional <= 1; fractional++) {
            run_reducer(be, nc, &w, lf, 1, fractional, 1, NULL);
            run_reducer(be, NULL, &w, lf, 1, fractional, 1, NULL);
        }
    }
    test_timeline(be, nc, &w);
    test_powersgd_paths(be, nc, &w);
    be->free(w.a);
    be->free(w.b);
    be->free(w.c);
}

#endif /* CNT_HAVE_NCCL */

int main(int argc, char **argv) {
    if (dist_init(&argc, &argv) != CNT_OK) {
        fprintf(stderr, "dist_init: %s\n", cnt_err_msg());
        return 1;
    }
    rank_ = dist_rank();
    world_ = dist_world();
    dist_set_wait_limits(10, 60); /* a hang is a named failure in a minute, not the harness's timeout */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick_ = 1;
        else
            cnt_fatal("unknown argument '%s' (the only option is --quick)", argv[i]);
    }
#if !CNT_HAVE_NCCL
    if (rank_ == 0) printf("SKIPPED: this build has no NCCL (CNT_HAVE_NCCL=0)\n");
    dist_finalize();
    return 0;
#else
    const backend *be = backend_get_for_rank(BACKEND_DEVICE_CUDA, dist_local_rank());
    char why[512];
    snprintf(why, sizeof why, "%s", be ? "" : cnt_err_msg());
    /* Every rank takes the same branch. */
    double have = be ? 1.0 : 0.0;
    dist_allreduce_sum_f64(&have, 1);
    if (have < world_) {
        if (rank_ == 0)
            printf("SKIPPED: no usable CUDA device on %.0f of %d rank(s)%s%s\n", world_ - have, world_,
                   why[0] ? ": " : "", why);
        dist_finalize();
        return 0;
    }
    char devs[2048];
    int gpus = backend_describe_devices(devs, sizeof devs);
    if (rank_ == 0) {
        printf("mpi_nccl: world %d, %d GPU(s) on this node\n%s", world_, gpus, devs);
        fflush(stdout);
    }
    dist_nccl *nc = dist_nccl_create();
    if (!nc) {
        if (rank_ == 0) fprintf(stderr, "mpi_nccl: dist_nccl_create failed: %s\n", cnt_err_msg());
        dist_finalize();
        return 2;
    }
    run_all(be, nc);
    dist_nccl_free(nc);
    if (rank_ == 0) printf("mpi_nccl: world %d, %s\n", world_, tu_mpi_failures() ? "FAILED" : "all checks passed");
    dist_finalize();
    return tu_mpi_failures() ? 1 : 0;
#endif
}
