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

/* grads: the device gradient buffer of n values (net->grads). Bucket sizes in
 * values (at least 1). Never fails on valid arguments; thread creation
 * failure is fatal. */
reducer *reducer_create(const backend *be, float *grads, size_t n, size_t first_bucket, size_t bucket,
                        dist_algo algo, int overlap);
/* Starts a step: no bucket is ready. */
void reducer_begin(reducer *rd);
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
