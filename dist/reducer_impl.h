/*
 * dist/reducer_impl.h - what the gradient reducer's strategies share with
 * dist/reducer.c. Internal to dist/: callers use dist/reducer.h only.
 *
 * dist/reducer.c owns what does not depend on how a bucket is summed: the
 * bucket layout, the grad hook that decides which buckets a slice of
 * gradients completes, and the calls of the public API, which it hands to a
 * strategy through a small ops table. A strategy owns the rest, in private
 * state behind rd->state:
 *   reducer_mpi.c   a communication thread, staged through host memory,
 *                   optionally fp16 on the wire (reducer_opts.nccl == NULL);
 *   reducer_nccl.c  queued on the GPU with NCCL by the training thread.
 * Design: docs/ARCHITECTURE.md, "Data parallelism".
 */
#ifndef CNT_REDUCER_IMPL_H
#define CNT_REDUCER_IMPL_H

#include "dist/reducer.h"

typedef struct bucket {
    size_t begin, end;   /* [begin, end) of the gradient buffer */
    double t_ready;      /* when the training thread launched it this step (time_now()) */
} bucket;

/* Every op runs on the training thread. */
typedef struct reducer_ops {
    /* A step starts (rd->step is its number, no bucket is launched). May be NULL. */
    void (*begin)(reducer *rd);
    /* Starts the allreduces of buckets [from, upto) (from < upto), in that
     * order: launches come in increasing bucket order, the same on every
     * rank, so the ranks' collectives match. Backward has issued every
     * gradient of those buckets. */
    void (*launch)(reducer *rd, int from, int upto);
    /* Every bucket is launched: completes the step as reducer_finish promises
     * and fills st's comm_ms, exposed_ms and comm_step (st is never NULL).
     * t0: when reducer_finish was entered. */
    void (*finish)(reducer *rd, double t0, reducer_stats *st);
    /* reducer_wait_sums after reducer_finish. May be NULL (nothing to wait for). */
    void (*wait_sums)(reducer *rd);
    void (*set_timeline)(reducer *rd, timeline *tl);
    /* Recorded steps (reducer_record, reducer_replayed); both NULL where
     * the strategy's work is the host's (the MPI path). */
    void (*record)(reducer *rd, int set);
    void (*replayed)(reducer *rd, int set, reducer_stats *st);
    /* Stops what the strategy runs and frees rd->state; reducer.c frees the rest. */
    void (*free)(reducer *rd);
} reducer_ops;

struct reducer {
    const reducer_ops *ops;
    void *state;         /* the strategy's own */
    const backend *be;
    float *grads;        /* [n] device */
    size_t n;
    int overlap;
    dist_watchdog *wd;   /* NULL when the watchdog is off */
    bucket *buckets;     /* [n_buckets] */
    int n_buckets;
    long step;           /* training thread only: as given to reducer_begin */
    size_t ready_upto;   /* training thread only: gradients final below this offset */
    int next_launch;     /* training thread only: first bucket not yet launched */
    powersgd *psgd;      /* the strategy's compression state (it owns it), NULL: none */
};

/* Called last by reducer_create, once the rest of rd is filled: set rd->ops
 * and rd->state (reducer_mpi_init also starts the communication thread).
 * Failures are fatal, as reducer_create says. In a build without NCCL,
 * reducer_nccl_init is a stub that fails an assertion: such a build cannot
 * have made opts->nccl, so reducer_create never calls it. */
void reducer_mpi_init(reducer *rd, const reducer_opts *opts);
void reducer_nccl_init(reducer *rd, const reducer_opts *opts);

/* Records bucket b's allreduce, [start_s, end_s) on the host clock, on tl as
 * "allreduce bucket b" and `what` after it ("": nothing; " (P sum)", as the
 * step simulator's traces name PowerSGD's sums) (TIMELINE_TID_COMM), and,
 * when ready_s >= 0, a flow arrow from the training track at ready_s (the
 * bucket's last gradient written) to the allreduce's start. */
void reducer_record_bucket(timeline *tl, int b, const char *what, double ready_s, double start_s, double end_s);

#endif
