/*
 * dist/watchdog.c - the stall watchdog: an arrival barrier with a timeout
 * before each gradient bucket's allreduce (see dist/dist.h).
 *
 * Why not just time the allreduce: a blocking MPI_Allreduce cannot say which
 * ranks are missing, and cannot be interrupted to warn. Instead, before the
 * allreduce each rank tells every other rank "I have reached bucket seq"
 * (seq counts buckets since the watchdog was created, the same on every rank)
 * and polls until it has heard the same from everyone. Only then does it
 * enter the blocking allreduce, which every rank is by then about to join, so
 * it cannot hang on a missing rank (a rank dying inside the allreduce itself
 * ends the job through MPI anyway).
 *
 * Messages: three int64 (step, bucket, seq) per peer per bucket, tag
 * WATCHDOG_TAG on a duplicate of dist_comm() (dist/wait.h). MPI keeps messages between
 * two ranks on one communicator in order, and a peer cannot announce bucket
 * seq+1 before finishing allreduce seq, which needs this rank; so the last
 * message from a peer always tells how far it got. The sends of one bucket
 * are completed (MPI_Waitall) before the next bucket reuses their buffer and
 * at dist_watchdog_free; every announcement is received, because every rank
 * waits for every peer's announcement of every bucket.
 *
 * Cost with the limits on: per bucket, world-1 small sends and receives and
 * one polling loop, 6-10 us at 2 ranks on the 2-core development VM
 * (`mpirun -np 2 build/tests/mpi_ring --bench`).
 *
 * Threads: called by one thread at a time (the reducer's communication
 * thread), under MPI_THREAD_SERIALIZED.
 */
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/check.h"
#include "dist/wait.h"

#if CNT_HAVE_MPI
#include <mpi.h>

/* Our own tag ("STAL"), on our own communicator. */
#define WATCHDOG_TAG 0x5354414c
/* Polls before the first sleep (dist_wait_until): with balanced ranks the
 * peers arrive within microseconds, and a few polls catch them without a
 * sleep's latency. */
#define WATCHDOG_SPINS 64
/* The sleep between polls grows from 10 us to this. */
#define WATCHDOG_MAX_SLEEP_US 250

struct dist_watchdog {
    MPI_Comm comm;       /* private duplicate of dist_comm() (the workers, in a job with servers) */
    double warn_s, abort_s;
    int rank, world;
    int64_t seq;         /* buckets this rank has announced */
    int64_t msg[3];      /* the current announcement: step, bucket, seq */
    MPI_Request *reqs;   /* [world] sends of the current announcement */
    int64_t *seen_seq;   /* [world] last seq heard from each rank; 0: none */
    int64_t *seen_step;  /* [world] the step and bucket of that announcement */
    int64_t *seen_bucket;
};

dist_watchdog *dist_watchdog_create(double warn_s, double abort_s) {
    if (dist_world() <= 1 || (warn_s <= 0 && abort_s <= 0)) return NULL;
    dist_watchdog *wd = cnt_calloc(1, sizeof *wd);
    wd->warn_s = warn_s;
    wd->abort_s = abort_s;
    wd->rank = dist_rank();
    wd->world = dist_world();
    /* Collective: every rank creates its watchdog at the same point; a
     * bounded wait, like every other collective (dist/wait.h). */
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Comm_idup(dist_comm(), &wd->comm, &req));
    dist_wait_bounded(1, &req, "dist_watchdog_create", DIST_WAIT_SLEEP);
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(wd->comm, MPI_ERRORS_RETURN));
    wd->reqs = cnt_malloc((size_t)wd->world * sizeof *wd->reqs);
    for (int r = 0; r < wd->world; r++) wd->reqs[r] = MPI_REQUEST_NULL;
    wd->seen_seq = cnt_calloc((size_t)wd->world, sizeof *wd->seen_seq);
    wd->seen_step = cnt_calloc((size_t)wd->world, sizeof *wd->seen_step);
    wd->seen_bucket = cnt_calloc((size_t)wd->world, sizeof *wd->seen_bucket);
    return wd;
}

/* Receives every announcement that has arrived. */
static void drain(dist_watchdog *wd) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        DIST_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, WATCHDOG_TAG, wd->comm, &flag, &st));
        if (!flag) return;
        int64_t m[3];
        DIST_MPI_CHECK(MPI_Recv(m, 3, MPI_INT64_T, st.MPI_SOURCE, WATCHDOG_TAG, wd->comm, MPI_STATUS_IGNORE));
        int src = st.MPI_SOURCE;
        wd->seen_step[src] = m[0];
        wd->seen_bucket[src] = m[1];
        wd->seen_seq[src] = m[2];
        /* The same seq must be the same (step, bucket) everywhere; if not,
         * the ranks run different schedules and the allreduces would mix
         * buckets. */
        if (m[2] == wd->seq && (m[0] != wd->msg[0] || m[1] != wd->msg[1]))
            cnt_fatal("stall watchdog: rank %d is at step %lld bucket %lld where this rank is at step %lld "
                      "bucket %lld (collective number %lld): the ranks disagree on the bucket schedule",
                      src, (long long)m[0], (long long)m[1], (long long)wd->msg[0], (long long)wd->msg[1],
                      (long long)m[2]);
    }
}

/* "2 (last seen at step 12 bucket 1), 5 (not seen yet)" for the ranks not
 * yet at wd->seq; returns how many there are. */
static int describe_missing(const dist_watchdog *wd, char *out, size_t cap) {
    int missing = 0;
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < wd->world; r++) {
        if (r == wd->rank || wd->seen_seq[r] >= wd->seq) continue;
        missing++;
        if (len + 80 >= cap) continue; /* counted, not listed */
        int k;
        if (wd->seen_seq[r] > 0)
            k = snprintf(out + len, cap - len, "%s%d (last seen at step %lld bucket %lld)", missing > 1 ? ", " : "",
                         r, (long long)wd->seen_step[r], (long long)wd->seen_bucket[r]);
        else
            k = snprintf(out + len, cap - len, "%s%d (not seen yet)", missing > 1 ? ", " : "", r);
        if (k > 0) len += (size_t)k < cap - len ? (size_t)k : cap - len - 1;
    }
    return missing;
}

static int count_missing(const dist_watchdog *wd) {
    int missing = 0;
    for (int r = 0; r < wd->world; r++) missing += r != wd->rank && wd->seen_seq[r] < wd->seq;
    return missing;
}

/* dist_wait_until's poll: every peer has announced the current bucket. */
static int arrived_poll(void *ctx) {
    dist_watchdog *wd = ctx;
    drain(wd);
    return count_missing(wd) == 0;
}

/* The late-ranks callback: "step S bucket B has waited T s for ranks 2
 * (last seen at ...), 5 (...)". */
static void arrived_describe(void *ctx, dist_wait_text part, char *buf, size_t cap) {
    const dist_watchdog *wd = ctx;
    if (part == DIST_WAIT_LATE) {
        char who[1024];
        int missing = describe_missing(wd, who, sizeof who);
        snprintf(buf, cap, "for rank%s %s", missing > 1 ? "s" : "", who);
        /* whether a late one is alive (slow) or stopped: the node's table and the relay (dist/wait.h) */
        dist_beats_note(buf, cap);
        return;
    }
    snprintf(buf, cap, "step %lld bucket %lld%s", (long long)wd->msg[0], (long long)wd->msg[1],
             part == DIST_WAIT_OVER ? ": every rank arrived" : "");
}

void dist_watchdog_arrive(dist_watchdog *wd, long step, int bucket) {
    if (!wd) return;
    /* Why wait: msg is about to be overwritten. The previous announcement has
     * been received by every peer (each needed it before the allreduce this
     * rank has since finished), so this returns at once. */
    DIST_MPI_CHECK(MPI_Waitall(wd->world, wd->reqs, MPI_STATUSES_IGNORE));
    wd->seq++;
    wd->msg[0] = step;
    wd->msg[1] = bucket;
    wd->msg[2] = wd->seq;
    for (int r = 0; r < wd->world; r++)
        if (r != wd->rank)
            DIST_MPI_CHECK(MPI_Isend(wd->msg, 3, MPI_INT64_T, r, WATCHDOG_TAG, wd->comm, &wd->reqs[r]));
    /* Why the sleeps: this thread must not take a core from backward (or
     * from the late rank, on an oversubscribed node) while it waits. */
    dist_wait_site s = {.poll = arrived_poll,
                        .describe = arrived_describe,
                        .ctx = wd,
                        .spin_polls = WATCHDOG_SPINS,
                        .max_sleep_us = WATCHDOG_MAX_SLEEP_US,
                        .warn_s = wd->warn_s,
                        .abort_s = wd->abort_s};
    dist_wait_until(&s);
}

void dist_watchdog_free(dist_watchdog *wd) {
    if (!wd) return;
    DIST_MPI_CHECK(MPI_Waitall(wd->world, wd->reqs, MPI_STATUSES_IGNORE));
    DIST_MPI_CHECK(MPI_Comm_free(&wd->comm));
    free(wd->reqs);
    free(wd->seen_seq);
    free(wd->seen_step);
    free(wd->seen_bucket);
    free(wd);
}

#else /* !CNT_HAVE_MPI: a world of one never waits for anyone */

dist_watchdog *dist_watchdog_create(double warn_s, double abort_s) {
    (void)warn_s;
    (void)abort_s;
    return NULL;
}

void dist_watchdog_arrive(dist_watchdog *wd, long step, int bucket) {
    (void)wd;
    (void)step;
    (void)bucket;
}

void dist_watchdog_free(dist_watchdog *wd) { (void)wd; }

#endif
