/*
 * dist/reducer.h - the gradient reducer: allreduces the flat gradient buffer
 * bucket by bucket while backward is still running.
 *
 * The net lays gradients out in reverse forward order, so backward completes
 * them from offset 0 upwards and reports each completed slice through its grad
 * hook (reducer_grads_ready). A bucket is a contiguous slice of the buffer:
 * the first is `first_bucket` values (small, so communication starts early),
 * the rest `bucket` values. When backward has written the last gradient of a
 * bucket, the bucket is handed to a communication thread, which allreduces it
 * in place (staged through host memory) while backward goes on. reducer_finish
 * waits for the remaining buckets: the time it waits is the communication
 * backward could not hide (comm_exposed_ms).
 *
 * With overlap off, every bucket is launched only in reducer_finish, after
 * backward, so the benefit of overlap can be measured.
 *
 * Compression (dist.compress = fp16, as Horovod's fp16 compression): the
 * communication thread converts the bucket to IEEE binary16 (round to nearest
 * even, dist/fp16.h), allreduces the halves (dist_allreduce_sum_f16: MPI with
 * a 16-bit datatype and a user op, or the fp16 ring; partial sums are added in
 * fp32 and rounded to half at each reduction step) and converts the sum back
 * to fp32; the update then averages (divides by the world size) as without
 * compression. Half the bytes on the wire, about 3 significant digits per
 * gradient, and values or sums beyond 65504 become inf (the loss then
 * diverges and the run stops), the same limit Horovod has. Every rank still
 * gets the same bits.
 *
 * Stall watchdog (dist.stall_warn_s, dist.stall_abort_s; either > 0 turns it
 * on): before each bucket's allreduce the communication thread runs
 * dist_watchdog_arrive (dist/dist.h), an arrival barrier with a timeout: it
 * announces (step, bucket) to every other rank and polls for their
 * announcements, a short spin then sleeps of up to 250 us, so a late peer costs
 * no core. After warn_s seconds (and each further multiple) it warns, naming
 * the step, the bucket and the ranks that have not arrived with the last
 * bucket seen from each; after abort_s seconds it prints an error and ends the
 * job (dist_abort) instead of hanging. Steps are the numbers the trainer
 * passes to reducer_begin (its optimizer step, from 1, continued after a
 * resume); buckets are numbered from 0 within the step. With both limits 0 nothing extra is
 * sent. The watchdog covers the gradient allreduces only, where a training
 * job spends its collective time; a rank stuck elsewhere (data loading,
 * backward) shows up there, at the next step's first bucket.
 *
 * Fault injection, for tests only: the environment variable
 * CNT_TEST_STALL=RANK:STEP:SECONDS makes rank RANK sleep SECONDS seconds in
 * reducer_begin of step STEP (on the training thread, before backward), so
 * the other ranks' watchdogs see it late (tests/test_dist_train.sh). Read once
 * by reducer_create; a malformed value is a fatal error.
 *
 * Threads: the communication thread is the only one calling MPI between
 * reducer_begin and the return of reducer_finish; the training thread calls
 * MPI only outside that window (MPI_THREAD_SERIALIZED is enough).
 */
#ifndef CNT_REDUCER_H
#define CNT_REDUCER_H

#include <stddef.h>

#include "dist/dist.h"
#include "dist/timeline.h"
#include "model/backend.h"

typedef struct reducer reducer;

typedef struct reducer_stats {
    double comm_ms;          /* sum of the allreduce times of this step's buckets */
    double exposed_ms;       /* time reducer_finish waited for communication */
    int buckets;             /* buckets reduced this step */
    int early;               /* buckets whose allreduce started before backward ended */
} reducer_stats;

typedef enum reducer_compress {
    REDUCER_COMPRESS_NONE, /* fp32 on the wire */
    REDUCER_COMPRESS_FP16  /* IEEE binary16 on the wire, summed through fp32 */
} reducer_compress;

typedef struct reducer_opts {
    size_t first_bucket;      /* values in the first bucket (at least 1) */
    size_t bucket;            /* values in every later bucket (at least 1) */
    dist_algo algo;           /* MPI_Allreduce or our ring */
    int overlap;              /* launch buckets during backward; 0: after it */
    reducer_compress compress;
    double stall_warn_s;      /* watchdog warning after this wait; 0: off */
    double stall_abort_s;     /* watchdog ends the job after this wait; 0: off */
} reducer_opts;

/* grads: the device gradient buffer of n values (net->grads). A collective
 * when the watchdog is on (every rank creates its reducer at the same point).
 * Never fails on valid arguments; thread creation failure, an MPI failure or
 * a malformed CNT_TEST_STALL is fatal. */
reducer *reducer_create(const backend *be, float *grads, size_t n, const reducer_opts *opts);
/* Starts a step (the next step number): no bucket is ready. */
void reducer_begin(reducer *rd, long step);
/* The net's grad hook: grads[offset, offset+count) are final. Slices arrive
 * in increasing, contiguous order. */
void reducer_grads_ready(void *rd, size_t offset, size_t count);
/* Launches what is left, waits for every bucket, and leaves the summed
 * gradients in the device buffer. Fills *st when st is not NULL. */
void reducer_finish(reducer *rd, reducer_stats *st);
int reducer_bucket_count(const reducer *rd);
/* From now on the communication thread records "allreduce bucket k" on tl's
 * comm thread (TIMELINE_TID_COMM) for every bucket; NULL stops it. Call
 * between steps only. Never fails. */
void reducer_set_timeline(reducer *rd, timeline *tl);
void reducer_free(reducer *rd);

#endif
