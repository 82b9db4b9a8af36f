/*
 * tools/bench_allreduce.c - bus bandwidth of the project's allreduce
 * algorithms (dist_allreduce_sum with DIST_ALGO_MPI = MPI_Allreduce,
 * DIST_ALGO_RING = our ring, dist/ring.c, and DIST_ALGO_HIER = the
 * hierarchical allreduce over the ring, --algo hier), through the dist/ API
 * only. busbw uses the flat formula below for every algorithm, so the
 * algorithms compare as the time of the same sum.
 *
 *   mpirun -np 2 build/tools/bench_allreduce [options]     (tools/bench_allreduce.sh)
 *
 * For each message size from --min-bytes to --max-bytes (x --factor each step)
 * and each algorithm: --warmup untimed operations, then timed batches of 3,
 * then more operations (at least twice as many each time) until one batch
 * lasts about --iters-time seconds; that batch is reported. The time of one
 * operation is the slowest rank's mean over the batch; every rank sees that
 * same number and so takes the same decisions: the collectives always match.
 * As in nccl-tests:
 *   algbw = bytes / time
 *   busbw = algbw x 2(N-1)/N   (what each rank's link carries in an optimal
 *                                allreduce, so busbw is comparable across N
 *                                and with the link's bandwidth)
 * GB/s are 10^9 bytes per second.
 *
 * Correctness: after the timing, the buffer is refilled with small integers
 * (rank r, element i: (r+1)*(i%13) - 6) whose sum over ranks is exact in
 * float whatever the order of additions, reduced once more, and compared
 * with the sum computed in closed form. "max err" is the largest absolute
 * difference on any rank; it must be 0 for both algorithms, which then also
 * agree with each other bit for bit. (The timed operations reduce a buffer of
 * zeros: reducing the same buffer again and again would otherwise overflow.)
 *
 * --ring-chunk B times dist_ring_allreduce with messages of at most B bytes
 * instead of the ring's default (what training uses), to see what chunking
 * costs or saves.
 *
 * --comm-nice N (default -10) runs the ring and hier rows at nice N below the
 * process's and MPI_Allreduce's at the process's, as the trainer runs its
 * communication thread (dist.comm_nice): what the ring gets on cores that a
 * second job also wants.
 *
 * Output: a header, then an aligned table (or a Markdown one with --markdown),
 * on rank 0. Exit status: 0, 1 when a result is wrong, 2 for a bad option.
 * Built without MPI, or run without mpirun, the world is one rank: the
 * operations are no-ops, the tool says it needs mpirun with more than one
 * rank, measures the single-rank case anyway and exits 0.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/threads.h"
#include "common/timer.h"
#include "dist/dist.h"

#define MIN_TIMED_ITERS 3
#define MAX_TIMED_ITERS 1000000
/* Largest buffer accepted, so sizes and counts never overflow. */
#define MAX_BYTES ((uint64_t)1 << 36)

typedef struct bench_opts {
    uint64_t min_bytes, max_bytes; /* message sizes, multiples of 4 */
    int factor;                    /* size step */
    double iters_time;             /* seconds of timed operations per size and algorithm */
    int warmup;                    /* untimed operations before timing */
    int run_mpi, run_ring, run_hier; /* which algorithms */
    int markdown;                  /* Markdown table instead of aligned text */
    uint64_t ring_chunk;           /* 0: DIST_ALGO_RING as training runs it; else
                                      dist_ring_allreduce with this chunk size */
    dist_progress progress;        /* how the ring waits (dist.progress) */
    int comm_nice;                 /* the ring's and hier's nice below the process's (dist.comm_nice) */
} bench_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -np N bench_allreduce [options]\n"
            "  --min-bytes B    smallest message (default 1K; suffixes K, M, G = 2^10, 2^20, 2^30)\n"
            "  --max-bytes B    largest message (default 256M); both multiples of 4 (floats)\n"
            "  --factor F       size step, 2..16 (default 4)\n"
            "  --iters-time S   seconds of timed operations per size and algorithm (default 0.2;\n"
            "                   at least %d operations are timed)\n"
            "  --warmup N       untimed operations before timing, 1..1000 (default 3)\n"
            "  --algo A         mpi, ring, hier (dist.backend = hier), both (mpi and ring) or all\n"
            "                   (default both)\n"
            "  --ring-chunk B   ring message size (default 0: dist/ring.c's own, what training uses)\n"
            "  --progress P     how the ring waits between polls: sleep (default) or spin (dist.progress)\n"
            "  --comm-nice N    run ring and hier at nice N below the process's, -20..0 (default -10, as\n"
            "                   dist.comm_nice gives the trainer's communication thread; 0 with spin);\n"
            "                   MPI_Allreduce at the process's, as in training\n"
            "  --markdown       print a Markdown table (for docs/benchmarks.md)\n"
            "  -h, --help       this text\n",
            MIN_TIMED_ITERS);
}

/* Parses "1024", "1K", "4M", "1G" into *out. Returns CNT_OK or CNT_ERR with a
 * message. */
static int parse_bytes(const char *opt, const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (*s < '0' || *s > '9') return cnt_err_set("%s: '%s' is not a byte count", opt, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0) return cnt_err_set("%s: '%s' is out of range", opt, s);
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    if (*end != '\0') return cnt_err_set("%s: '%s' is not a byte count (e.g. 1024, 1K, 4M, 1G)", opt, s);
    if (v > (MAX_BYTES >> shift))
        return cnt_err_set("%s: '%s' exceeds the limit of %llu bytes", opt, s,
                           (unsigned long long)MAX_BYTES);
    v <<= shift;
    if (v < 4 || v % 4 != 0)
        return cnt_err_set("%s: %llu bytes is not a positive multiple of 4 (whole floats)", opt, v);
    *out = v;
    return CNT_OK;
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi)
        return cnt_err_set("%s: '%s' is not an integer in [%d, %d]", opt, s, lo, hi);
    *out = (int)v;
    return CNT_OK;
}

static int parse_seconds(const char *opt, const char *s, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !(v > 0.0) || v > 3600.0)
        return cnt_err_set("%s: '%s' is not a number of seconds in (0, 3600]", opt, s);
    *out = v;
    return CNT_OK;
}

/* Runs the calling thread at `nice` below the process's nice value (0: at
 * the process's), as the trainer runs its communication thread
 * (dist.comm_nice): moved only when it changes. A refusal (no CAP_SYS_NICE
 * or ulimit -e) is said once by rank 0, and the rows run where they are. */
static void at_priority(int nice, int rank) {
    static int now, refused;
    if (nice == now || refused) return;
    if (cnt_thread_nice(nice - now) == 0) {
        now = nice;
    } else {
        refused = 1;
        if (rank == 0)
            printf("note: --comm-nice %d refused (%s): every row runs at the process's priority\n", nice,
                   strerror(errno));
    }
}

/* Fills *o from argv. Returns CNT_OK, 1 for --help, or CNT_ERR with a message. */
static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.min_bytes = 1 << 10, .max_bytes = (uint64_t)256 << 20, .factor = 4,
                      .iters_time = 0.2, .warmup = 3, .run_mpi = 1, .run_ring = 1, .comm_nice = -10};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--markdown")) {
            o->markdown = 1;
            continue;
        }
        int takes_value = !strcmp(a, "--min-bytes") || !strcmp(a, "--max-bytes") ||
                          !strcmp(a, "--factor") || !strcmp(a, "--iters-time") ||
                          !strcmp(a, "--warmup") || !strcmp(a, "--algo") ||
                          !strcmp(a, "--ring-chunk") || !strcmp(a, "--progress") || !strcmp(a, "--comm-nice");
        if (!takes_value) return cnt_err_set("unknown option '%s'", a);
        if (i + 1 >= argc) return cnt_err_set("%s needs a value", a);
        const char *v = argv[++i];
        int rc = CNT_OK;
        if (!strcmp(a, "--min-bytes")) rc = parse_bytes(a, v, &o->min_bytes);
        else if (!strcmp(a, "--max-bytes")) rc = parse_bytes(a, v, &o->max_bytes);
        else if (!strcmp(a, "--factor")) rc = parse_int(a, v, 2, 16, &o->factor);
        else if (!strcmp(a, "--iters-time")) rc = parse_seconds(a, v, &o->iters_time);
        else if (!strcmp(a, "--warmup")) rc = parse_int(a, v, 1, 1000, &o->warmup);
        else if (!strcmp(a, "--ring-chunk")) {
            if (!strcmp(v, "0")) o->ring_chunk = 0;
            else rc = parse_bytes(a, v, &o->ring_chunk);
        }
        else if (!strcmp(a, "--comm-nice")) rc = parse_int(a, v, -20, 0, &o->comm_nice);
        else if (!strcmp(a, "--progress")) {
            if (!strcmp(v, "sleep")) o->progress = DIST_PROGRESS_SLEEP;
            else if (!strcmp(v, "spin")) o->progress = DIST_PROGRESS_SPIN;
            else rc = cnt_err_set("--progress: '%s' is not sleep or spin", v);
        }
        else if (!strcmp(v, "mpi") || !strcmp(v, "ring") || !strcmp(v, "hier") || !strcmp(v, "both") ||
                 !strcmp(v, "all")) {
            int all = !strcmp(v, "all"), both = !strcmp(v, "both");
            o->run_mpi = all || both || !strcmp(v, "mpi");
            o->run_ring = all || both || !strcmp(v, "ring");
            o->run_hier = all || !strcmp(v, "hier");
        } else {
            rc = cnt_err_set("--algo: '%s' is not mpi, ring, hier, both or all", v);
        }
        if (rc != CNT_OK) return rc;
    }
    if (o->min_bytes > o->max_bytes)
        return cnt_err_set("--min-bytes (%llu) is larger than --max-bytes (%llu)",
                           (unsigned long long)o->min_bytes, (unsigned long long)o->max_bytes);
    return CNT_OK;
}

/* The largest of every rank's x (a collective). */
static double max_over_ranks(double x) {
    int world = dist_world();
    uint64_t bits, *all = cnt_malloc((size_t)world * sizeof *all);
    memcpy(&bits, &x, sizeof bits);
    dist_allgather_u64(bits, all);
    double m = x;
    for (int r = 0; r < world; r++) {
        double v;
        memcpy(&v, &all[r], sizeof v);
        if (v > m || isnan(v)) m = v;
    }
    free(all);
    return m;
}

/* Ring chunk size given by --ring-chunk (0: the ring as DIST_ALGO_RING runs it). */
static size_t g_ring_chunk = 0;

/* One allreduce of n floats at buf with algo. */
static void allreduce(float *buf, size_t n, dist_algo algo) {
    if (algo == DIST_ALGO_RING && g_ring_chunk)
        dist_ring_allreduce(buf, n, g_ring_chunk);
    else
        dist_allreduce_sum(buf, n, algo);
}

/* Mean seconds of `iters` operations on n floats, slowest rank (a collective). */
static double time_ops(float *buf, size_t n, dist_algo algo, int iters) {
    /* Why a barrier: every rank starts its clock together, so a rank that
     * arrives late is not charged to the others' first operation. */
    dist_barrier();
    double t0 = time_now();
    for (int i = 0; i < iters; i++) allreduce(buf, n, algo);
    return max_over_ranks((time_now() - t0) / iters);
}

/* Largest |result - exact sum| over every rank after one reduction of small
 * integers (a collective). */
static double check_op(float *buf, size_t n, dist_algo algo) {
    int rank = dist_rank(), world = dist_world();
    for (size_t i = 0; i < n; i++) buf[i] = (float)((rank + 1) * (int)(i % 13) - 6);
    allreduce(buf, n, algo);
    double err = 0.0;
    for (size_t i = 0; i < n; i++) {
        double want = (double)((int)(i % 13) * world * (world + 1) / 2 - 6 * world);
        double d = fabs((double)buf[i] - want);
        if (d > err || isnan(d)) err = d;
    }
    return max_over_ranks(err);
}

static void format_size(uint64_t bytes, char *out, size_t cap) {
    if (bytes >= ((uint64_t)1 << 30) && bytes % ((uint64_t)1 << 30) == 0)
        snprintf(out, cap, "%llu GiB", (unsigned long long)(bytes >> 30));
    else if (bytes >= (1 << 20) && bytes % (1 << 20) == 0)
        snprintf(out, cap, "%llu MiB", (unsigned long long)(bytes >> 20));
    else if (bytes >= (1 << 10) && bytes % (1 << 10) == 0)
        snprintf(out, cap, "%llu KiB", (unsigned long long)(bytes >> 10));
    else
        snprintf(out, cap, "%llu B", (unsigned long long)bytes);
}

int main(int argc, char **argv) {
    if (dist_init(&argc, &argv) != CNT_OK) {
        fprintf(stderr, "bench_allreduce: %s\n", cnt_err_msg());
        return 1;
    }
    int rank = dist_rank(), world = dist_world();
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != CNT_OK) {
        /* Every rank parses the same arguments, so every rank ends here. */
        if (rank == 0) {
            if (rc == 1) usage(stdout);
            else {
                fprintf(stderr, "bench_allreduce: %s (--help lists the options)\n", cnt_err_msg());
            }
        }
        dist_finalize();
        return rc == 1 ? 0 : 2;
    }
    g_ring_chunk = (size_t)o.ring_chunk;
    dist_set_progress(o.progress);
    if (o.progress == DIST_PROGRESS_SPIN) o.comm_nice = 0; /* as the trainer: a spinning thread is not raised */

    if (rank == 0) {
        char host[256] = "?";
        if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
        host[sizeof host - 1] = '\0';
        printf("bench_allreduce: %d rank(s), %d on this node (%s); %g s of timed operations per "
               "size and algorithm (at least %d), %d warm-up; GB/s = 1e9 bytes/s, "
               "busbw = algbw x 2(N-1)/N\n",
               world, dist_local_world(), host, o.iters_time, MIN_TIMED_ITERS, o.warmup);
        if (o.ring_chunk && o.run_ring)
            printf("ring: messages of at most %llu bytes (--ring-chunk)\n", (unsigned long long)o.ring_chunk);
        if (o.run_ring || o.run_hier)
            printf("ring and hier: at nice %d below the process's (--comm-nice, as dist.comm_nice)\n", o.comm_nice);
        if (world == 1)
            printf("note: a world of one rank: the allreduce is a no-op and busbw is 0; run it "
                   "under mpirun with more than one rank (tools/bench_allreduce.sh)\n");
        if (o.markdown)
            printf("\n| size | algorithm | iterations | time (us) | algbw (GB/s) | busbw (GB/s) | max err |\n"
                   "|---:|---|---:|---:|---:|---:|---:|\n");
        else
            printf("\n%10s  %-4s  %10s  %12s  %12s  %12s  %8s\n", "size", "algo", "iterations",
                   "time (us)", "algbw (GB/s)", "busbw (GB/s)", "max err");
        fflush(stdout);
    }

    size_t max_n = (size_t)(o.max_bytes / sizeof(float));
    float *buf = cnt_malloc(max_n * sizeof(float));
    double bus_factor = 2.0 * (world - 1) / world;
    int bad = 0;
    const dist_algo algos[3] = {DIST_ALGO_MPI, DIST_ALGO_RING, DIST_ALGO_HIER};
    const char *names[3] = {"mpi", "ring", "hier"};
    const int on[3] = {o.run_mpi, o.run_ring, o.run_hier};
    if (o.run_hier && dist_hier_init() != CNT_OK) cnt_fatal("dist_hier_init: %s", cnt_err_msg());

    for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
        size_t n = (size_t)(bytes / sizeof(float));
        for (int a = 0; a < 3; a++) {
            if (!on[a]) continue;
            at_priority(algos[a] != DIST_ALGO_MPI ? o.comm_nice : 0, rank);
            memset(buf, 0, n * sizeof(float));
            (void)time_ops(buf, n, algos[a], o.warmup);
            /* Grow the count until one timed batch lasts about --iters-time.
             * time_ops returns the same value (the slowest rank's) on every
             * rank, so every rank takes the same decisions and runs the same
             * number of collectives. */
            int iters = MIN_TIMED_ITERS;
            double t = time_ops(buf, n, algos[a], iters);
            while (t * iters < 0.9 * o.iters_time && iters < MAX_TIMED_ITERS) {
                double want = t > 0 ? ceil(1.05 * o.iters_time / t) : MAX_TIMED_ITERS;
                if (want < 2.0 * iters) want = 2.0 * iters;
                iters = want > MAX_TIMED_ITERS ? MAX_TIMED_ITERS : (int)want;
                t = time_ops(buf, n, algos[a], iters);
            }
            double err = check_op(buf, n, algos[a]);
            if (err != 0.0) bad = 1;
            if (rank == 0) {
                char size[32];
                format_size(bytes, size, sizeof size);
                double algbw = t > 0 ? (double)bytes / t / 1e9 : 0.0;
                double busbw = algbw * bus_factor;
                if (o.markdown)
                    printf("| %s | %s | %d | %.2f | %.3f | %.3f | %g |\n", size, names[a],
                           iters, t * 1e6, algbw, busbw, err);
                else
                    printf("%10s  %-4s  %10d  %12.2f  %12.3f  %12.3f  %8g\n", size, names[a],
                           iters, t * 1e6, algbw, busbw, err);
                fflush(stdout);
            }
        }
        if (bytes > o.max_bytes / (uint64_t)o.factor) break;
        bytes *= (uint64_t)o.factor;
    }
    free(buf);

    if (rank == 0) {
        if (bad)
            printf("\nFAIL: a result differs from the exact sum (max err above)\n");
        else if (o.run_mpi + o.run_ring + o.run_hier > 1)
            printf("\nok: every algorithm gave the exact sum at every size\n");
        else
            printf("\nok: the exact sum at every size\n");
    }
    dist_finalize();
    return bad ? 1 : 0;
}
