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
 * Options:
 *   --expect-world N    fail unless the job has N ranks (a broken dist_init
 *                       reporting a world of one would otherwise pass);
 *   --single-node       also require local_world == world;
 *   --die-on-rank R     rank R calls cnt_fatal() while the others wait in a
 *                       barrier: the whole job must end (abort hook), non-zero.
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

#include "common/check.h"
#include "dist/dist.h"

static int rank_, world_;
static int failures = 0;

/* Record one check: agree over ranks on whether it failed anywhere. */
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    char name[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (!ok) {
        failures++;
        if (rank_ != 0) fprintf(stderr, "[rank %d] FAIL %s\n", rank_, name);
    }
    double bad = ok ? 0.0 : 1.0;
    dist_allreduce_sum_f64(&bad, 1);
    if (bad > 0 && ok) failures++; /* failed on another rank */
    if (rank_ == 0) {
        if (bad > 0 || !ok)
            printf("FAIL %s (on %.0f rank(s))\n", name, bad > 0 ? bad : 1.0);
        else
            printf("ok   %s\n", name);
        fflush(stdout);
    }
}

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
    check(memcmp(ring, ref, n * sizeof(float)) == 0,
          "ring n=%zu chunk_bytes=%zu: bitwise equal to MPI_Allreduce", n, chunk_bytes);
    check(memcmp(ring, want, n * sizeof(float)) == 0,
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
    check(ok, "dist_allreduce_sum %s n=%zu: analytic sum", name, n);
    free(buf);
}

static void test_broadcast(size_t bytes) {
    int root = world_ - 1;
    unsigned char *buf = cnt_malloc(bytes);
    for (size_t i = 0; i < bytes; i++) buf[i] = rank_ == root ? (unsigned char)(i * 7 + 3) : 0;
    dist_broadcast(buf, bytes, root);
    int ok = 1;
    for (size_t i = 0; i < bytes; i++) ok &= buf[i] == (unsigned char)(i * 7 + 3);
    check(ok, "dist_broadcast bytes=%zu from the last rank (%d)", bytes, root);
    free(buf);
}

static void test_misc(int expect_world, int single_node) {
    uint64_t *all = cnt_malloc((size_t)world_ * sizeof(uint64_t));
    dist_allgather_u64(((uint64_t)rank_ << 40) + 1000u * (uint64_t)rank_ + 7u, all);
    int ok = 1;
    for (int r = 0; r < world_; r++) ok &= all[r] == ((uint64_t)r << 40) + 1000u * (uint64_t)r + 7u;
    check(ok, "dist_allgather_u64: every rank's value in rank order");
    free(all);

    double d[3] = {rank_ + 0.5, 1.0, -0.25 * rank_};
    dist_allreduce_sum_f64(d, 3);
    double w = world_;
    check(d[0] == w * (w - 1) / 2 + 0.5 * w && d[1] == w && d[2] == -0.25 * w * (w - 1) / 2,
          "dist_allreduce_sum_f64: exact sums");

    int lr = dist_local_rank(), lw = dist_local_world();
    check(lw >= 1 && lw <= world_ && lr >= 0 && lr < lw,
          "local rank: 0 <= local_rank < local_world <= world");
    if (single_node)
        check(lw == world_, "local world: local_world == world on one node");
    if (expect_world > 0)
        check(world_ == expect_world && rank_ >= 0 && rank_ < world_,
              "world: world size as launched");
}

int main(int argc, char **argv) {
    if (dist_init(&argc, &argv) != CNT_OK) {
        fprintf(stderr, "dist_init: %s\n", cnt_err_msg());
        return 1;
    }
    rank_ = dist_rank();
    world_ = dist_world();
    int expect_world = 0, single_node = 0, die_on = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect-world") && i + 1 < argc)
            expect_world = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--single-node"))
            single_node = 1;
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

    test_misc(expect_world, single_node);
    size_t sizes[] = {1, 3, 7, (size_t)(world_ > 1 ? world_ - 1 : 2), (size_t)world_ + 1, 1000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        test_ring(sizes[i], 0);
        test_ring(sizes[i], 4);  /* one float per message */
        test_ring(sizes[i], 64); /* 16 floats per message */
    }
    test_ring(((size_t)1 << 16) + 5, 64);
    test_ring(((size_t)1 << 20) + 3, 0);            /* default 1 MiB chunks */
    test_ring(((size_t)1 << 20) + 3, 64 * 1024);    /* many chunks per step */
    test_ring(((size_t)1 << 20) + 3, 4096 * 1024);  /* one message per step */
    test_allreduce_algo(DIST_ALGO_MPI, "MPI", 1000);
    test_allreduce_algo(DIST_ALGO_RING, "RING", 1000);
    test_allreduce_algo(DIST_ALGO_RING, "RING", ((size_t)1 << 20) + 3);
    test_broadcast(1);
    test_broadcast((3u << 20) + 5);

    if (rank_ == 0) printf("mpi_ring: world %d, %s\n", world_, failures ? "FAILED" : "all checks passed");
    dist_finalize();
    dist_finalize(); /* safe twice */
    return failures ? 1 : 0;
}
