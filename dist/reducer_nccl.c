/*
 * dist/reducer_nccl.c - the reducer's NCCL strategy: no thread; the training
 * thread queues each launched bucket's allreduce (fp32, or fp16 on the wire
 * with dist.compress = fp16) on NCCL's communication stream after the
 * compute stream's ops so far (dist/nccl.h), and reducer_finish makes the
 * compute stream wait for them. With dist.compress = powersgd, once
 * compression has started, nothing is queued during backward:
 * reducer_finish queues PowerSGD's arithmetic on the GPU for the whole
 * gradient (powersgd_create_on) and its two sums, the compute stream
 * waiting for the first before it goes on (a few MiB, not worth cutting
 * into buckets). Times come from CUDA
 * events, read one step late. Design: docs/ARCHITECTURE.md, "Data
 * parallelism". Built only when the Makefile finds NCCL (CNT_HAVE_NCCL=1);
 * otherwise reducer_nccl_init is a stub that reducer_create never reaches.
 */
#include "dist/reducer_impl.h"
#include "common/check.h"

#if CNT_HAVE_NCCL

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct reducer_nccl {
    dist_nccl *nccl;     /* not owned */
    void *stream;        /* be->native_stream(): the compute stream */
    void *half;          /* [n] device fp16 (dist.compress = fp16; the communicator's), else NULL */
    double stall_warn_s, stall_abort_s;
    timeline *tl;        /* NULL, or where buckets are recorded */
    long pending_round;  /* the last step's round, not yet read; -1: none */
    long pending_step;   /* ... and its step */
    int have_prev;       /* prev_* hold a read round not yet reported */
    double prev_comm_ms, prev_exposed_ms;
    long prev_step;
    int recording;       /* the recording being made (reducer_record); -1: none */
    powersgd *psgd;      /* compress = powersgd (its state on the GPU), else NULL */
    long psgd_start;     /* ... compressed steps: after this one */
    int pending_count;   /* the allreduces of the pending round */
    int pending_psgd;    /* they are PowerSGD's sums (P, then Q), not buckets */
    int psgd_sums;       /* PowerSGD's sums queued this step (psgd_sum) */
    int early[DIST_NCCL_RECORDINGS]; /* each recording's buckets launched during backward */
} reducer_nccl;

/* Whether this step is compressed (PowerSGD at finish, no buckets). */
static int compressing(const reducer *rd) {
    const reducer_nccl *c = rd->state;
    return c->psgd && rd->step > c->psgd_start;
}

/* Queues buckets [from, upto) on the communication stream after the compute
 * stream's ops so far, each after the host-side half of the watchdog (a
 * compressed step queues nothing here: reducer_finish does it). */
static void nccl_launch(reducer *rd, int from, int upto) {
    reducer_nccl *c = rd->state;
    if (compressing(rd)) { /* the ranks still meet the watchdog at every bucket */
        for (int b = from; b < upto; b++) dist_watchdog_arrive(rd->wd, rd->step, b);
        return;
    }
    for (int b = from; b < upto; b++) {
        const bucket *bk = &rd->buckets[b];
        dist_watchdog_arrive(rd->wd, rd->step, b);
        dist_nccl_allreduce_after(c->nccl, c->stream, rd->grads + bk->begin, bk->end - bk->begin,
                                  c->half ? (uint16_t *)c->half + bk->begin : NULL);
    }
}

/* Waits for the pending round (the last finished step's allreduces) on the
 * device, records its buckets on the timeline, and keeps its times for the
 * next reducer_finish to report. */
static void nccl_read_pending(reducer *rd) {
    reducer_nccl *c = rd->state;
    if (c->pending_round < 0) return;
    char what[96];
    snprintf(what, sizeof what, "the gradient allreduces of step %ld", c->pending_step);
    dist_nccl_round r;
    dist_nccl_round_wait(c->nccl, c->pending_round, c->stall_warn_s, c->stall_abort_s, what, &r);
    CNT_ASSERT(r.count == c->pending_count);
    /* device times: no arrow; PowerSGD's sums are the whole gradient's, one region after backward, named
     * as the simulator's --powersgd-at end names them */
    for (int b = 0; c->tl && b < r.count; b++)
        reducer_record_bucket(c->tl, c->pending_psgd ? 0 : b, !c->pending_psgd ? "" : b ? " (Q sum)" : " (P sum)", -1,
                              r.start_s[b], r.end_s[b]);
    c->have_prev = 1;
    c->prev_comm_ms = r.comm_ms;
    c->prev_exposed_ms = r.exposed_ms;
    c->prev_step = c->pending_step;
    c->pending_round = -1;
}

/* The step's round is queued (or launched, replayed): the previous step's
 * times into *st, and this one's pending. */
static void nccl_round_queued(reducer *rd, long round, reducer_stats *st) {
    reducer_nccl *c = rd->state;
    /* Why here: this step's backward is still queued on the device, so the
     * wait for the previous step's allreduces leaves it no idle time (while
     * recording, reducer_record waited for it: nothing pending here) */
    nccl_read_pending(rd);
    st->comm_ms = c->have_prev ? c->prev_comm_ms : 0;
    st->exposed_ms = c->have_prev ? c->prev_exposed_ms : 0;
    st->comm_step = c->have_prev ? c->prev_step : 0;
    c->have_prev = 0;
    c->pending_round = round;
    c->pending_step = rd->step;
}

/* PowerSGD's sums (powersgd_sum_fn): queued on the communication stream,
 * and the compute stream, which goes on with the arithmetic that reads
 * them, waits for them there. */
static void psgd_sum(float *buf, size_t n, void *ctx) {
    reducer *rd = ctx;
    reducer_nccl *c = rd->state;
    dist_nccl_allreduce_after(c->nccl, c->stream, buf, n, NULL);
    dist_nccl_wait(c->nccl, c->stream);
    c->psgd_sums++;
}

static void nccl_finish(reducer *rd, double t0, reducer_stats *st) {
    (void)t0;
    reducer_nccl *c = rd->state;
    int count = rd->n_buckets;
    if (compressing(rd)) {
        c->psgd_sums = 0;
        powersgd_reduce(c->psgd, rd->grads, 0, rd->n, psgd_sum, rd);
        count = c->psgd_sums;
        st->early = 0;
    }
    /* The optimizer ops issued after this return run after the sums. */
    long round = dist_nccl_join(c->nccl, c->stream);
    if (c->recording >= 0) c->early[c->recording] = st->early;
    nccl_round_queued(rd, round, st);
    c->pending_count = count;
    c->pending_psgd = compressing(rd);
}

static void nccl_record(reducer *rd, int set) {
    reducer_nccl *c = rd->state;
    /* the host waits of reducer_finish cannot be recorded: the previous
     * step's round is read now, before the capture begins */
    if (set >= 0) nccl_read_pending(rd);
    dist_nccl_record(c->nccl, set);
    c->recording = set;
}

static void nccl_replayed(reducer *rd, int set, reducer_stats *st) {
    reducer_nccl *c = rd->state;
    /* what the recorded step's launches said to the watchdog, bucket by
     * bucket: every rank arrives at each of this step's buckets, or the
     * stall names who did not */
    for (int b = 0; b < rd->n_buckets; b++) dist_watchdog_arrive(rd->wd, rd->step, b);
    st->early = c->early[set];
    nccl_round_queued(rd, dist_nccl_replay(c->nccl, set), st);
    c->pending_count = rd->n_buckets; /* recorded steps do not compress (exchange_record_why) */
    c->pending_psgd = 0;
}

static void nccl_set_timeline(reducer *rd, timeline *tl) {
    reducer_nccl *c = rd->state;
    /* The last step's buckets belong on the timeline being left. */
    if (c->tl && tl != c->tl) nccl_read_pending(rd);
    c->tl = tl;
}

static void nccl_free(reducer *rd) {
    reducer_nccl *c = rd->state;
    powersgd_free(c->psgd); /* device buffers: after the communicator's abort on a failed run (exchange) */
    free(c);
}

static const reducer_ops nccl_ops = {
    .begin = NULL,
    .launch = nccl_launch,
    .finish = nccl_finish,
    .wait_sums = nccl_read_pending,
    .set_timeline = nccl_set_timeline,
    .record = nccl_record,
    .replayed = nccl_replayed,
    .free = nccl_free,
};

void reducer_nccl_init(reducer *rd, const reducer_opts *opts) {
    /* NCCL orders itself against the compute stream: a GPU backend's. */
    CNT_ASSERT(rd->be->native_stream() != NULL);
    reducer_nccl *c = cnt_calloc(1, sizeof *c);
    c->nccl = opts->nccl;
    c->stream = rd->be->native_stream();
    /* each bucket's halves at the bucket's own offset: buckets never share them */
    if (opts->compress == REDUCER_COMPRESS_FP16) c->half = dist_nccl_half_staging(c->nccl, rd->n);
    if (opts->compress == REDUCER_COMPRESS_POWERSGD) {
        CNT_ASSERT(opts->tensors && opts->n_tensors > 0);
        c->psgd = powersgd_create_on(rd->be, opts->tensors, opts->n_tensors, rd->n, opts->psgd_rank, opts->psgd_seed);
        c->psgd_start = opts->psgd_start;
        rd->psgd = c->psgd;
    }
    c->stall_warn_s = opts->stall_warn_s;
    c->stall_abort_s = opts->stall_abort_s;
    c->pending_round = -1;
    c->recording = -1;
    rd->ops = &nccl_ops;
    rd->state = c;
}

#else

void reducer_nccl_init(reducer *rd, const reducer_opts *opts) {
    (void)rd;
    CNT_ASSERT(opts->nccl == NULL); /* a build without NCCL cannot have made one */
}

#endif /* CNT_HAVE_NCCL */
