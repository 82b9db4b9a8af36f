/*
 * dist/reducer.c - bucketed gradient allreduce overlapped with backward: the
 * grad hook that launches each bucket backward completes (the layout is
 * dist/buckets.c's), in front of a strategy (dist/reducer_impl.h): a communication
 * thread through host memory (reducer_mpi.c) or NCCL on the GPU
 * (reducer_nccl.c). Design: docs/ARCHITECTURE.md, "Data parallelism".
 */
#include "dist/reducer_impl.h"
#include "common/check.h"
#include "common/timer.h"

#include <stdio.h>
#include <stdlib.h>

reducer *reducer_create(const backend *be, float *grads, size_t n, const reducer_opts *opts) {
    size_t first_bucket = opts->first_bucket, bucket_size = opts->bucket;
    CNT_ASSERT(n > 0 && first_bucket > 0 && bucket_size > 0);
    CNT_ASSERT(opts->compress == REDUCER_COMPRESS_NONE || opts->compress == REDUCER_COMPRESS_FP16 ||
               opts->compress == REDUCER_COMPRESS_POWERSGD);
    reducer *rd = cnt_calloc(1, sizeof *rd);
    rd->be = be;
    rd->grads = grads;
    rd->n = n;
    rd->overlap = opts->overlap;
    rd->wd = dist_watchdog_create(opts->stall_warn_s, opts->stall_abort_s);
    int count = reducer_bucket_layout(n, first_bucket, bucket_size, NULL, 0);
    size_t *ends = cnt_malloc((size_t)count * sizeof *ends);
    reducer_bucket_layout(n, first_bucket, bucket_size, ends, count);
    rd->buckets = cnt_calloc((size_t)count, sizeof *rd->buckets);
    for (int b = 0; b < count; b++) {
        rd->buckets[b].begin = b ? ends[b - 1] : 0;
        rd->buckets[b].end = ends[b];
    }
    rd->n_buckets = count;
    free(ends);
    if (opts->nccl) reducer_nccl_init(rd, opts);
    else reducer_mpi_init(rd, opts);
    return rd;
}

int reducer_bucket_count(const reducer *rd) { return rd->n_buckets; }

void reducer_set_timeline(reducer *rd, timeline *tl) { rd->ops->set_timeline(rd, tl); }

void reducer_record_bucket(timeline *tl, int b, const char *what, double ready_s, double start_s, double end_s) {
    char name[80];
    snprintf(name, sizeof name, "allreduce bucket %d%s", b, what);
    timeline_record(tl, name, "comm", TIMELINE_TID_COMM, start_s, end_s);
    if (ready_s >= 0) {
        snprintf(name, sizeof name, "bucket %d ready", b);
        timeline_flow(tl, name, TIMELINE_TID_TRAIN, ready_s, TIMELINE_TID_COMM, start_s);
    }
}

void reducer_begin(reducer *rd, long step) {
    rd->ready_upto = 0;
    rd->next_launch = 0;
    rd->step = step;
    if (rd->ops->begin) rd->ops->begin(rd);
}

/* Starts the allreduces of buckets [next_launch, upto). */
static void launch_upto(reducer *rd, int upto) {
    if (upto <= rd->next_launch) return;
    double now = time_now();
    for (int b = rd->next_launch; b < upto; b++) rd->buckets[b].t_ready = now;
    rd->ops->launch(rd, rd->next_launch, upto);
    rd->next_launch = upto;
}

void reducer_grads_ready(void *ctx, size_t offset, size_t count) {
    reducer *rd = ctx;
    CNT_ASSERT(offset == rd->ready_upto && offset + count <= rd->n);
    rd->ready_upto = offset + count;
    if (!rd->overlap) return;
    int b = rd->next_launch;
    while (b < rd->n_buckets && rd->buckets[b].end <= rd->ready_upto) b++;
    launch_upto(rd, b);
}

void reducer_finish(reducer *rd, reducer_stats *st) {
    CNT_ASSERT(rd->ready_upto == rd->n);
    double t0 = time_now();
    reducer_stats s = {.buckets = rd->n_buckets, .early = rd->next_launch};
    launch_upto(rd, rd->n_buckets);
    rd->ops->finish(rd, t0, &s);
    if (st) *st = s;
}

void reducer_record(reducer *rd, int set) {
    CNT_ASSERT(rd->ops->record);
    rd->ops->record(rd, set);
}

void reducer_replayed(reducer *rd, long step, int set, reducer_stats *st) {
    CNT_ASSERT(rd->ops->replayed);
    rd->step = step; /* the step the strategy's arrivals and round are of */
    reducer_stats s = {.buckets = rd->n_buckets}; /* .early: the strategy's, as recorded */
    rd->ops->replayed(rd, set, &s);
    if (st) *st = s;
}

powersgd *reducer_powersgd(reducer *rd) { return rd->psgd; }

void reducer_wait_sums(reducer *rd) {
    if (rd->ops->wait_sums) rd->ops->wait_sums(rd);
}

void reducer_free(reducer *rd) {
    if (!rd) return;
    rd->ops->free(rd);
    dist_watchdog_free(rd->wd); /* after the strategy's free: the communication thread used it */
    free(rd->buckets);
    free(rd);
}
