/*
 * tests/mpi_ring.c - the collectives of dist/ checked under mpirun (run by
 * tests/test_dist.sh with 2, 3 and 4 ranks; alone it is a world of one).
 *
 * Checks: dist_ring_allreduce against MPI_Allreduce (through
 * dist_allreduce_sum(DIST_ALGO_MPI), so this file needs no mpi.h) and against
 * the sum computed analytically, BITWISE, for sizes that hit the segment edge
 * cases (1, 3, 7, world-1, world+1, 1000, 2^20+3) and chunk sizes that force
 * one float per message up to the 1 MiB default; dist_allreduce_sum with both
 * algorithms; dist_broadcast from the last rank; dist_allgather_u64;
 * dist_allreduce_sum_f64; the node-local rank and world.
 * Every value is a small integer, exact in float, and so is every partial sum,
 * so any summation order gives the same bits.
 *
 * fp16 (dist.compress = fp16): dist_ring_allreduce_f16 and
 * dist_allreduce_sum_f16 with both algorithms, for sizes 1, 7, 1000 and
 * 2^20+3: on the small integers (exact in half too) bitwise equal to each
 * other and to the analytic sum; on random fractional values within the fp16
 * rounding bound of the exact sum of the halves ((world-1) roundings of at
 * most half an ulp of a partial sum each), and bitwise equal to each other at
 * 2 ranks (one rounding, whatever the order); sums beyond 65504 become inf.
 * The stall watchdog's arrival barrier (dist_watchdog_arrive) is run for a
 * few buckets, so its messages are matched and freed. The hierarchical
 * allreduce (dist_hier_allreduce, also through dist_allreduce_sum and the
 * fp16 sum) bitwise equal to the analytic sum. dist.progress: the
 * ring bitwise the same sleeping or spinning between polls, and a rank that
 * waits for a late neighbour under 25% of a core when it sleeps.
 *
 * Options:
 *   --expect-world N    fail unless the job has N ranks (a broken dist_init
 *                       reporting a world of one would otherwise pass);
 *   --single-node       also require local_world == world (and one node for
 *                       the hierarchical allreduce);
 *   --expect-nodes N    the hierarchical allreduce must find N nodes;
 *   --expect-tcp-links N C
 *                       require Open MPI's TCP transport to use N connections
 *                       per pair of ranks (dist_tcp_links), set by dist_init
 *                       (C = 1) or by the environment (C = 0);
 *   --die-on-rank R     rank R calls cnt_fatal() while the others wait in a
 *                       barrier: the whole job must end (abort hook), non-zero.
 *   --bench             no checks: time, per bucket, the allreduce alone and
 *                       with the stall watchdog's arrival barrier before it
 *                       (its overhead), and fp32 against fp16 allreduces.
 *
 * Output: rank 0 prints "ok ..." or "FAIL ..." per check (a check fails when it
 * fails on any rank); other ranks print their own failures on stderr. Every
 * rank exits 1 if any check failed anywhere, so mpirun exits non-zero.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "tests/support/mpi_check.h"
#include "common/half.h"

#include <math.h>

static int rank_, world_;


static float value_of(int r, size_t i) { return (float)((r + 1) * (int)(i % 13) - 6); }

/* Sum over ranks of value_of(r, i), computed in closed form. */
static float expected_of(size_t i) {
    int w = world_;
    return (float)((int)(i % 13) * w * (w + 1) / 2 - 6 * w);
}

static void test_ring(size_t n, size_t chunk_bytes) {
    float *ring = cnt_malloc(n * sizeof(float));
    float *ref = cnt_malloc(n * sizeof(float));
    float *want = cnt_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        ring[i] = ref[i] = value_of(rank_, i);
        want[i] = expected_of(i);
    }
    dist_ring_allreduce(ring, n, chunk_bytes);
    dist_allreduce_sum(ref, n, DIST_ALGO_MPI);
    tu_mpi_check(memcmp(ring, ref, n * sizeof(float)) == 0,
                 "ring n=%zu chunk_bytes=%zu: bitwise equal to MPI_Allreduce", n, chunk_bytes);
    tu_mpi_check(memcmp(ring, want, n * sizeof(float)) == 0,
                 "ring n=%zu chunk_bytes=%zu: bitwise equal to the analytic sum", n, chunk_bytes);
    free(ring);
    free(ref);
    free(want);
}

static void test_allreduce_algo(dist_algo algo, const char *name, size_t n) {
    float *buf = cnt_malloc(n * sizeof(float));
    int ok = 1;
    for (size_t i = 0; i < n; i++) buf[i] = value_of(rank_, i);
    dist_allreduce_sum(buf, n, algo);
    for (size_t i = 0; i < n; i++) ok &= buf[i] == expected_of(i);
    tu_mpi_check(ok, "dist_allreduce_sum %s n=%zu: analytic sum", name, n);
    free(buf);
}

/* fp16 on the small integers: every partial sum is exact in half, so the
 * ring, MPI and the analytic sum agree bit for bit. */
static void test_f16_exact(size_t n, size_t chunk_bytes) {
    uint16_t *ring = cnt_malloc(n * sizeof *ring), *mpi = cnt_malloc(n * sizeof *mpi);
    uint16_t *viaring = cnt_malloc(n * sizeof *viaring);
    for (size_t i = 0; i < n; i++) ring[i] = mpi[i] = viaring[i] = fp16_from_float(value_of(rank_, i));
    dist_ring_allreduce_f16(ring, n, chunk_bytes);
    dist_allreduce_sum_f16(mpi, n, DIST_ALGO_MPI);
    dist_allreduce_sum_f16(viaring, n, DIST_ALGO_RING);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= ring[i] == fp16_from_float(expected_of(i));
    tu_mpi_check(ok, "fp16 ring n=%zu chunk_bytes=%zu: bitwise equal to the analytic sum", n, chunk_bytes);
    tu_mpi_check(memcmp(ring, mpi, n * sizeof *ring) == 0 && memcmp(ring, viaring, n * sizeof *ring) == 0,
                 "fp16 n=%zu: ring, MPI (user op) and dist_allreduce_sum_f16(RING) bitwise equal", n);
    free(ring);
    free(mpi);
    free(viaring);
}

/* A fractional value rank r holds at i, the same function on every rank, so
 * each rank can compute the exact sum of every rank's half. */
static float frac_of(int r, size_t i) {
    uint32_t s = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u);
    s = s * 1664525u + 1013904223u;
    s ^= s >> 13;
    s *= 2246822519u;
    s ^= s >> 16;
    float u = (float)(s & 0xffffff) / (float)(1 << 24) - 0.5f; /* [-0.5, 0.5) */
    int e = (int)((s >> 24) % 24) - 18;                        /* magnitudes 2^-19 .. 2^5 */
    return ldexpf(u, e);
}

static void test_f16_tolerance(size_t n) {
    uint16_t *ring = cnt_malloc(n * sizeof *ring), *mpi = cnt_malloc(n * sizeof *mpi);
    for (size_t i = 0; i < n; i++) ring[i] = mpi[i] = fp16_from_float(frac_of(rank_, i));
    dist_allreduce_sum_f16(ring, n, DIST_ALGO_RING);
    dist_allreduce_sum_f16(mpi, n, DIST_ALGO_MPI);
    int ok_ring = 1, ok_mpi = 1, inexact = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double exact = 0, mag = 0;
        for (int r = 0; r < world_; r++) {
            double v = fp16_to_float(fp16_from_float(frac_of(r, i)));
            exact += v;
            mag += fabs(v);
        }
        /* Each of the world-1 additions rounds once to half: at most half an
         * ulp of a partial sum (2^-11 of it when normal, 2^-25 subnormal). */
        double tol = 1.01 * (world_ - 1) * (ldexp(mag, -11) + ldexp(1.0, -25)); /* 1%: float's own rounding */
        double er = fabs(fp16_to_float(ring[i]) - exact), em = fabs(fp16_to_float(mpi[i]) - exact);
        ok_ring &= er <= tol;
        ok_mpi &= em <= tol;
        inexact += er > 0;
        if (mag > 0 && er / mag > worst) worst = er / mag;
    }
    tu_mpi_check(ok_ring, "fp16 ring n=%zu: within the fp16 rounding bound of the fp32 sum (worst %.2g of sum|x|)", n,
                 worst);
    tu_mpi_check(ok_mpi, "fp16 MPI n=%zu: within the fp16 rounding bound of the fp32 sum", n);
    /* At 2 ranks both round the same single sum; beyond, the orders differ. */
    if (world_ == 2)
        tu_mpi_check(memcmp(ring, mpi, n * sizeof *ring) == 0, "fp16 n=%zu: ring and MPI agree (bitwise at 2 ranks)", n);
    else
        tu_mpi_check(ok_ring && ok_mpi, "fp16 n=%zu: ring and MPI agree (within the bound at %d ranks)", n, world_);
    if (n >= 1000) tu_mpi_check(inexact > 0, "fp16 n=%zu: the test values do round (%d inexact sums)", n, inexact);
    free(ring);
    free(mpi);
}

static void test_f16_overflow(void) {
    uint16_t b[3] = {fp16_from_float(40000.0f), fp16_from_float(-40000.0f), fp16_from_float(1.0f)};
    uint16_t c[3];
    memcpy(c, b, sizeof b);
    dist_allreduce_sum_f16(b, 3, DIST_ALGO_MPI);
    dist_allreduce_sum_f16(c, 3, DIST_ALGO_RING);
    int ok = b[0] == 0x7c00 && b[1] == 0xfc00 && fp16_to_float(b[2]) == (float)world_;
    tu_mpi_check(ok && memcmp(b, c, sizeof b) == 0, "fp16: sums beyond 65504 become +-inf (MPI and ring)");
}

/* The watchdog's arrival barrier with warnings on (none should fire), a few
 * buckets around real allreduces, then freed: nothing left unmatched. */
static void test_watchdog(void) {
    dist_watchdog *wd = dist_watchdog_create(30, 0);
    float x = 1;
    for (int b = 0; b < 5; b++) {
        dist_watchdog_arrive(wd, 1, b);
        dist_allreduce_sum(&x, 1, DIST_ALGO_MPI);
    }
    dist_watchdog_free(wd);
    tu_mpi_check(x == powf((float)world_, 5), "stall watchdog: arrival barriers between allreduces, then freed");
    tu_mpi_check(dist_watchdog_create(0, 0) == NULL, "stall watchdog: off (NULL) when both limits are 0");
}

/* --bench: mean time per bucket over `reps` buckets of n floats. */
static double bench_buckets(size_t n, int reps, dist_watchdog *wd, int fp16) {
    float *buf = cnt_malloc(n * sizeof *buf);
    uint16_t *half = cnt_malloc(n * sizeof *half);
    for (size_t i = 0; i < n; i++) buf[i] = value_of(rank_, i);
    dist_barrier();
    double t0 = time_now();
    for (int k = 0; k < reps; k++) {
        if (fp16) fp16_from_float_array(half, buf, n);
        dist_watchdog_arrive(wd, 1, k);
        if (fp16) {
            dist_allreduce_sum_f16(half, n, DIST_ALGO_MPI);
            fp16_to_float_array(buf, half, n);
        } else {
            dist_allreduce_sum(buf, n, DIST_ALGO_MPI);
        }
        for (size_t i = 0; i < n && i < 64; i++) buf[i] = value_of(rank_, i);
    }
    double mean = (time_now() - t0) / reps;
    dist_allreduce_sum_f64(&mean, 1);
    free(buf);
    free(half);
    return mean / world_; /* the mean over ranks */
}

static void bench(void) {
    size_t sizes[] = {1, 256 * 1024, 25 * 256 * 1024}; /* 4 B, 1 MiB, 25 MiB of floats */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        int reps = n == 1 ? 10000 : n < 1000000 ? 100 : 10;
        dist_watchdog *wd = dist_watchdog_create(60, 0);
        /* Rounds alternate the variants; the best round of each counts, so
         * other load on a shared machine inflates neither. */
        double plain = 1e30, guarded = 1e30, f16 = 1e30;
        for (int round = 0; round < 5; round++) {
            plain = fmin(plain, bench_buckets(n, reps, NULL, 0));
            guarded = fmin(guarded, bench_buckets(n, reps, wd, 0));
            f16 = fmin(f16, bench_buckets(n, reps, NULL, 1));
        }
        if (rank_ == 0)
            printf("bench world %d, %zu floats: allreduce %.1f us/bucket, with the stall watchdog %.1f us "
                   "(%+.1f us); fp16 (with conversions) %.1f us\n",
                   world_, n, 1e6 * plain, 1e6 * guarded, 1e6 * (guarded - plain), 1e6 * f16);
        dist_watchdog_free(wd);
    }
}

static void test_broadcast(size_t bytes) {
    int root = world_ - 1;
    unsigned char *buf = cnt_malloc(bytes);
    for (size_t i = 0; i < bytes; i++) buf[i] = rank_ == root ? (unsigned char)(i * 7 + 3) : 0;
    dist_broadcast(buf, bytes, root);
    int ok = 1;
    for (size_t i = 0; i < bytes; i++) ok &= buf[i] == (unsigned char)(i * 7 + 3);
    tu_mpi_check(ok, "dist_broadcast bytes=%zu from the last rank (%d)", bytes, root);
    free(buf);
}

static void test_tcp_links(int links, int chosen) {
    int c = -1, got = dist_tcp_links(&c);
    tu_mpi_check(got == links && c == chosen, "Open MPI's btl_tcp_links: %d, set by %s (got %d, set by %s)", links,
                 chosen ? "dist_init" : "the environment", got, c ? "dist_init" : "the environment");
}

static void test_misc(int expect_world, int single_node) {
    uint64_t *all = cnt_malloc((size_t)world_ * sizeof(uint64_t));
    dist_allgather_u64(((uint64_t)rank_ << 40) + 1000u * (uint64_t)rank_ + 7u, all);
    int ok = 1;
    for (int r = 0; r < world_; r++) ok &= all[r] == ((uint64_t)r << 40) + 1000u * (uint64_t)r + 7u;
    tu_mpi_check(ok, "dist_allgather_u64: every rank's value in rank order");
    free(all);

    double d[3] = {rank_ + 0.5, 1.0, -0.25 * rank_};
    dist_allreduce_sum_f64(d, 3);
    double w = world_;
    tu_mpi_check(d[0] == w * (w - 1) / 2 + 0.5 * w && d[1] == w && d[2] == -0.25 * w * (w - 1) / 2,
                 "dist_allreduce_sum_f64: exact sums");

    int lr = dist_local_rank(), lw = dist_local_world();
    tu_mpi_check(lw >= 1 && lw <= world_ && lr >= 0 && lr < lw,
                 "local rank: 0 <= local_rank < local_world <= world");
    if (single_node)
        tu_mpi_check(lw == world_, "local world: local_world == world on one node");
    if (expect_world > 0)
        tu_mpi_check(world_ == expect_world && rank_ >= 0 && rank_ < world_,
                     "world: world size as launched");
}

/* The hierarchical allreduce (dist.backend = hier): the analytic sum
 * bitwise, in floats (several chunk sizes, through dist_allreduce_sum too)
 * and in halves; and the shape dist_hier_init found: the ranks of each node,
 * one leader per node (expect_nodes > 0: that many nodes, e.g. with
 * --single-node, 1). */
static void test_hier(int expect_nodes) {
    CNT_ASSERT(dist_hier_init() == CNT_OK);
    int nodes, local;
    dist_hier_shape(&nodes, &local);
    tu_mpi_check(local == dist_local_world() && (expect_nodes <= 0 || nodes == expect_nodes) && nodes >= 1 &&
                     nodes <= world_,
                 "hier: %d node(s), %d rank(s) on this one (dist_local_world %d)", nodes, local, dist_local_world());
    const size_t sizes[] = {1, 7, 1000, ((size_t)1 << 20) + 3};
    const size_t chunks[] = {0, 4, 0, 64 * 1024};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *a = cnt_malloc(n * sizeof *a), *b = cnt_malloc(n * sizeof *b);
        uint16_t *h = cnt_malloc(n * sizeof *h);
        for (size_t i = 0; i < n; i++) {
            a[i] = b[i] = value_of(rank_, i);
            h[i] = fp16_from_float(value_of(rank_, i));
        }
        dist_hier_allreduce(a, n, chunks[k]);
        dist_allreduce_sum(b, n, DIST_ALGO_HIER);
        dist_allreduce_sum_f16(h, n, DIST_ALGO_HIER);
        int ok = 1, ok16 = 1;
        for (size_t i = 0; i < n; i++) {
            ok &= a[i] == expected_of(i) && b[i] == a[i];
            ok16 &= h[i] == fp16_from_float(expected_of(i));
        }
        tu_mpi_check(ok, "hier n=%zu chunk_bytes=%zu: bitwise the analytic sum, also as DIST_ALGO_HIER", n, chunks[k]);
        tu_mpi_check(ok16, "hier fp16 n=%zu: bitwise the analytic sum", n);
        free(a);
        free(b);
        free(h);
    }
}

/* Sums in flight together (dist.buckets_in_flight): four ops of different
 * kinds (ring in floats, ring in halves, hier, the ring in 64-byte
 * messages), each on fractional values whose sum depends on the order of
 * its additions, all started before any is waited for and completed by one
 * thread polling them: each bitwise equal to its blocking call run alone.
 * Then again with the ops started one wait apart (the slots' messages must
 * still match), and a small sum started after a large one ends first (they
 * really move together). Slot 0 is reused back to back by the blocking calls
 * in between. */
static void test_in_flight(void) {
    enum { OPS = 4 };
    const size_t n[OPS] = {100003, 1000, ((size_t)1 << 18) + 7, 4099};
    const int half[OPS] = {0, 1, 0, 0};
    const dist_algo algo[OPS] = {DIST_ALGO_RING, DIST_ALGO_RING, DIST_ALGO_HIER, DIST_ALGO_RING};
    const size_t chunk[OPS] = {0, 0, 64 * 1024, 64};
    void *ref[OPS], *got[OPS];
    dist_iallreduce *ops[OPS];
    for (int k = 0; k < OPS; k++) {
        size_t bytes = n[k] * (half[k] ? sizeof(uint16_t) : sizeof(float));
        ref[k] = cnt_malloc(bytes);
        got[k] = cnt_malloc(bytes);
        ops[k] = dist_iallreduce_create(k);
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < OPS; k++) {
            for (size_t i = 0; i < n[k]; i++) {
                float v = frac_of(rank_ + 3 * k, i);
                if (half[k]) ((uint16_t *)ref[k])[i] = fp16_from_float(v);
                else ((float *)ref[k])[i] = v;
            }
            memcpy(got[k], ref[k], n[k] * (half[k] ? sizeof(uint16_t) : sizeof(float)));
            if (algo[k] == DIST_ALGO_HIER) {
                if (half[k]) dist_hier_allreduce_f16(ref[k], n[k], chunk[k]);
                else dist_hier_allreduce(ref[k], n[k], chunk[k]);
            } else if (half[k]) {
                dist_ring_allreduce_f16(ref[k], n[k], chunk[k]);
            } else {
                dist_ring_allreduce(ref[k], n[k], chunk[k]);
            }
        }
        for (int k = 0; k < OPS; k++) {
            dist_iallreduce_start(ops[k], got[k], n[k], half[k], algo[k], chunk[k]);
            if (pass == 1) dist_iallreduce_wait(ops, k + 1, NULL, NULL);
        }
        for (;;) {
            int running = 0;
            for (int k = 0; k < OPS; k++) running += !dist_iallreduce_done(ops[k]);
            if (!running) break;
            dist_iallreduce_wait(ops, OPS, NULL, NULL);
        }
        int same = 1;
        for (int k = 0; k < OPS; k++)
            same &= memcmp(got[k], ref[k], n[k] * (half[k] ? sizeof(uint16_t) : sizeof(float))) == 0;
        tu_mpi_check(same, "%d sums in flight (ring, ring fp16, hier, ring in 64-byte messages), started %s: each "
                     "bitwise its blocking call's", OPS, pass ? "one wait apart" : "together");
    }
    /* A large sum, then a small one: the small one ends while the large one
     * still moves. */
    size_t big = (size_t)8 << 20, small = 7;
    float *a = cnt_malloc(big * sizeof *a), *b = cnt_malloc(small * sizeof *b);
    for (size_t i = 0; i < big; i++) a[i] = value_of(rank_, i);
    for (size_t i = 0; i < small; i++) b[i] = value_of(rank_, i);
    dist_iallreduce_start(ops[0], a, big, 0, DIST_ALGO_RING, 0);
    dist_iallreduce_start(ops[1], b, small, 0, DIST_ALGO_RING, 0);
    while (!dist_iallreduce_done(ops[1])) dist_iallreduce_wait(ops, 2, NULL, NULL);
    int overtook = !dist_iallreduce_done(ops[0]) || world_ == 1;
    while (!dist_iallreduce_done(ops[0])) dist_iallreduce_wait(ops, 1, NULL, NULL);
    int ok = 1;
    for (size_t i = 0; i < big; i++) ok &= a[i] == expected_of(i);
    for (size_t i = 0; i < small; i++) ok &= b[i] == expected_of(i);
    tu_mpi_check(overtook && ok, "in flight: a 7-float sum started after a 32 MiB one ends first; both exact");
    free(a);
    free(b);
    for (int k = 0; k < OPS; k++) {
        dist_iallreduce_free(ops[k]);
        free(ref[k]);
        free(got[k]);
    }
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* dist.progress: the ring is bitwise the same whichever way it waits; and
 * while its neighbour is late (the last rank joins LATE_S after the others),
 * a rank that sleeps between polls uses a small share of a core (under 25%),
 * one that spins more (about all of it at 2 ranks on a quiet machine; ranks
 * and other jobs sharing the cores take part of it). */
static void test_progress(void) {
    const double late_s = 0.4;
    const dist_progress modes[2] = {DIST_PROGRESS_SLEEP, DIST_PROGRESS_SPIN};
    const char *names[2] = {"sleep", "spin"};
    double sleep_share = 0;
    size_t n = ((size_t)1 << 20) + 3;
    float *buf = cnt_malloc(n * sizeof(float));
    for (int m = 0; m < 2; m++) {
        dist_set_progress(modes[m]);
        for (size_t i = 0; i < n; i++) buf[i] = value_of(rank_, i);
        dist_ring_allreduce(buf, n, 0);
        int same = 1;
        for (size_t i = 0; i < n; i++) same &= buf[i] == expected_of(i);
        tu_mpi_check(same, "ring, dist.progress = %s: bitwise the analytic sum (n=%zu)", names[m], n);

        dist_barrier();
        if (rank_ == world_ - 1) time_sleep_until(time_now() + late_s);
        double c0 = thread_cpu_s(), t0 = time_now();
        dist_ring_allreduce(buf, 1000, 0);
        double share = (thread_cpu_s() - c0) / (time_now() - t0);
        int ok = 1;
        if (rank_ == 0) {
            printf("     dist.progress = %s: rank 0 used %.0f%% of a core waiting %.1f s for the last rank\n",
                   names[m], 100 * share, late_s);
            ok = modes[m] == DIST_PROGRESS_SLEEP ? share < 0.25 : share > sleep_share;
        }
        if (modes[m] == DIST_PROGRESS_SLEEP) sleep_share = share;
        tu_mpi_check(ok, "ring, dist.progress = %s: waiting for a late rank takes %s of a core", names[m],
                     modes[m] == DIST_PROGRESS_SLEEP ? "under 25%" : "more than with sleep");
    }
    dist_set_progress(DIST_PROGRESS_SLEEP);
    free(buf);
}

int main(int argc, char **argv) {
    if (dist_init(&argc, &argv) != CNT_OK) {
        fprintf(stderr, "dist_init: %s\n", cnt_err_msg());
        return 1;
    }
    rank_ = dist_rank();
    world_ = dist_world();
    int expect_world = 0, single_node = 0, die_on = -1, do_bench = 0, links = 0, links_chosen = 0, expect_nodes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect-world") && i + 1 < argc)
            expect_world = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expect-nodes") && i + 1 < argc)
            expect_nodes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--single-node"))
            single_node = 1;
        else if (!strcmp(argv[i], "--expect-tcp-links") && i + 2 < argc) {
            links = atoi(argv[++i]);
            links_chosen = atoi(argv[++i]);
        }
        else if (!strcmp(argv[i], "--bench"))
            do_bench = 1;
        else if (!strcmp(argv[i], "--die-on-rank") && i + 1 < argc)
            die_on = atoi(argv[++i]);
        else
            cnt_fatal("unknown argument '%s'", argv[i]);
    }
    if (die_on >= 0) {
        if (rank_ == die_on) cnt_fatal("deliberate fatal error on rank %d (test_dist.sh)", rank_);
        /* Why a barrier: the other ranks must be blocked in a collective the
         * dying rank never joins; only the abort hook can end them. */
        dist_barrier();
        fprintf(stderr, "[rank %d] left the barrier: the job was not aborted\n", rank_);
        dist_finalize();
        return 1;
    }

    if (do_bench) {
        bench();
        dist_finalize();
        return 0;
    }
    test_misc(expect_world, single_node);
    if (links > 0) test_tcp_links(links, links_chosen);
    size_t sizes[] = {1, 3, 7, (size_t)(world_ > 1 ? world_ - 1 : 2), (size_t)world_ + 1, 1000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        test_ring(sizes[i], 0);
        test_ring(sizes[i], 4);  /* one float per message */
        test_ring(sizes[i], 64); /* 16 floats per message */
    }
    test_ring(((size_t)1 << 16) + 5, 64);
    test_ring(((size_t)1 << 20) + 3, 0);            /* default 256 KiB chunks */
    test_ring(((size_t)1 << 20) + 3, 64 * 1024);    /* many chunks per step */
    test_ring(((size_t)1 << 20) + 3, 4096 * 1024);  /* one message per step */
    test_progress();
    test_hier(single_node ? 1 : expect_nodes);
    test_in_flight();
    test_allreduce_algo(DIST_ALGO_MPI, "MPI", 1000);
    test_allreduce_algo(DIST_ALGO_RING, "RING", 1000);
    test_allreduce_algo(DIST_ALGO_RING, "RING", ((size_t)1 << 20) + 3);
    test_broadcast(1);
    test_broadcast((3u << 20) + 5);
    size_t f16_sizes[] = {1, 7, 1000, ((size_t)1 << 20) + 3};
    for (size_t i = 0; i < sizeof f16_sizes / sizeof f16_sizes[0]; i++) {
        test_f16_exact(f16_sizes[i], 0);
        test_f16_tolerance(f16_sizes[i]);
    }
    test_f16_exact(1000, 6); /* 3 halves per message */
    test_f16_overflow();
    test_watchdog();

    if (rank_ == 0) printf("mpi_ring: world %d, %s\n", world_, tu_mpi_failures() ? "FAILED" : "all checks passed");
    dist_finalize();
    dist_finalize(); /* safe twice */
    return tu_mpi_failures() ? 1 : 0;
}
