/*
 * dist/reducer.h - the gradient reducer: allreduces the flat gradient buffer
 * bucket by bucket while backward is still running.
 *
 * The net lays gradients out in reverse forward order, so backward completes
 * them from offset 0 upwards and reports each completed slice through its grad
 * hook (reducer_grads_ready). A bucket is a contiguous slice of the buffer:
 * the first is `first_bucket` values (small, so communication starts early),
 * the rest `bucket` values. When backward has written the last gradient of a
 * bucket, the bucket's allreduce starts while backward goes on. Two paths do
 * that, chosen by reducer_opts.nccl:
 *
 * 1. MPI (dist.backend = mpi or ring; any backend). The bucket is handed to a
 *    communication thread, which copies it to host memory, allreduces it
 *    there (dist_allreduce_sum: MPI_Allreduce or our ring) and copies the sum
 *    back. reducer_finish waits for the remaining buckets: the time it waits
 *    is the communication backward could not hide (comm_exposed_ms).
 *
 *    Ordering on a GPU backend. "Backward has written the bucket" is a fact
 *    about the host: the ops that write it are queued on the compute stream
 *    and may not have run yet, so a plain download could read stale
 *    gradients (or, if it waited for the stream, wait for the whole of
 *    backward and hide nothing). So each bucket has a fence: the training
 *    thread records it (be->fence_record) right after backward has issued
 *    the bucket's last gradient, before handing the bucket over, and the
 *    communication thread copies with be->download_fenced, which waits for
 *    the ops before the fence and for nothing after it. The sum goes back
 *    with be->upload_sync, which returns once it is on the device; that is
 *    safe without ordering it against the stream because nothing queued
 *    touches a finished bucket until the optimizer, which the training
 *    thread issues only after reducer_finish has seen every upload return.
 *    On the CPU fences are no-ops and the copies plain memcpy.
 *
 *    exposed_ms: reducer_finish waits, on a GPU backend, first for the last
 *    bucket's fence (backward finished on the device; a one-float
 *    download_fenced), then for the communication thread; exposed_ms is the
 *    second wait alone, the time the device sat without work because the
 *    optimizer could not be issued yet. On the CPU, where backward has
 *    finished when reducer_finish is called, it is the whole wait.
 *
 * 2. NCCL (dist.backend = nccl; a GPU backend, dist/nccl.h). No thread: the
 *    training thread queues each complete bucket's allreduce itself
 *    (dist_nccl_allreduce_after on be->native_stream()): the communication
 *    stream waits, on the device, for the compute stream's ops issued so far,
 *    then runs ncclAllReduce in place. reducer_finish queues the rest and
 *    makes the compute stream wait for all of them (dist_nccl_join), so the
 *    optimizer ops issued next see the sums. The host never waits for the
 *    communication; GPU kernels do the summing.
 *
 *    Times come from CUDA events and are known only once the device has run
 *    them, so reducer_finish reports the PREVIOUS step's comm_ms and
 *    exposed_ms (comm_step says which step; 0 at the first): it waits for
 *    that step's events, which costs the GPU nothing (this step's backward is
 *    still queued on it) and keeps the host at most about one step ahead.
 *    exposed_ms is the device time the compute stream waited in the join:
 *    from the end of backward to the end of the last allreduce, or 0. The
 *    last step's times are never reported (they are recorded on the timeline
 *    by reducer_set_timeline(rd, NULL)).
 *
 * With overlap off, every bucket is launched only in reducer_finish, after
 * backward, so the benefit of overlap can be measured.
 *
 * Compression (dist.compress = fp16, as Horovod's fp16 compression; MPI path
 * only: NCCL would need a device conversion kernel, and reducer_create
 * asserts it is not asked for): the communication thread converts the bucket
 * to IEEE binary16 (round to nearest even, common/half.h), allreduces the
 * halves (dist_allreduce_sum_f16: MPI with a 16-bit datatype and a user op,
 * or the fp16 ring; partial sums are added in fp32 and rounded to half at
 * each reduction step) and converts the sum back to fp32; the update then
 * averages (divides by the world size) as without compression. Half the
 * bytes on the wire, about 3 significant digits per gradient, and values or
 * sums beyond 65504 become inf (the loss then diverges and the run stops),
 * the same limit Horovod has. Every rank still gets the same bits.
 *
 * Stall watchdog (dist.stall_warn_s, dist.stall_abort_s; either > 0 turns it
 * on): before each bucket's allreduce, dist_watchdog_arrive (dist/dist.h), an
 * arrival barrier with a timeout: it announces (step, bucket) to every other
 * rank and polls for their announcements, a short spin then sleeps of up to
 * 250 us, so a late peer costs no core. After warn_s seconds (and each
 * further multiple) it warns, naming the step, the bucket and the ranks that
 * have not arrived with the last bucket seen from each; after abort_s seconds
 * it prints an error and ends the job (dist_abort) instead of hanging. Steps
 * are the numbers the trainer passes to reducer_begin (its optimizer step,
 * from 1, continued after a resume); buckets are numbered from 0 within the
 * step. With both limits 0 nothing extra is sent. The watchdog covers the
 * gradient allreduces only, where a training job spends its collective time;
 * a rank stuck elsewhere (data loading, backward) shows up there, at the next
 * step's first bucket.
 *   On the MPI path the communication thread arrives right before its
 * blocking allreduce, after its fenced download, so a rank late for any
 * reason (its host or its device) is seen. On the NCCL path the
 * training thread arrives before queueing each bucket: the host runs ahead of
 * the GPU, so this half sees only ranks whose HOST is late (a stuck data
 * loader, a slow file system, a test's injected stall), which is the common case; it
 * cannot deadlock, because a host waits there only after queueing every
 * earlier collective, so whatever GPU work a late host waits for can finish.
 * The other half is GPU-side: reducer_finish's wait for the previous step's
 * allreduces (above) polls, checks NCCL's asynchronous errors, and warns or
 * ends the job after the same limits, naming the step. A GPU hang that
 * blocks a host inside some other CUDA call (an upload, the loss download)
 * first is not caught.
 *
 * Threads: on the MPI path the communication thread is the only one calling
 * MPI between reducer_begin and the return of reducer_finish; the training
 * thread calls MPI only outside that window (MPI_THREAD_SERIALIZED is
 * enough). On the NCCL path only the training thread calls MPI and NCCL.
 */
#ifndef CNT_REDUCER_H
#define CNT_REDUCER_H

#include <stddef.h>

#include "dist/dist.h"
#include "dist/nccl.h"
#include "dist/timeline.h"
#include "model/backend.h"

typedef struct reducer reducer;

typedef struct reducer_stats {
    /* comm_ms and exposed_ms describe step comm_step: this step on the MPI
     * path; on the NCCL path the previous one (0: none yet, both 0). */
    double comm_ms;          /* sum of the allreduce times of the step's buckets */
    double exposed_ms;       /* communication backward did not hide (see above) */
    long comm_step;
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
    /* NULL: the MPI path (a communication thread, staged through host
     * memory, with `algo`). Else the NCCL path over this communicator (not
     * owned: free it after reducer_free); `algo` is unused, compress must be
     * NONE and be->native_stream() not NULL. Only in builds with NCCL. */
    dist_nccl *nccl;
} reducer_opts;

/* grads: the device gradient buffer of n values (net->grads). A collective
 * when the watchdog is on (every rank creates its reducer at the same point).
 * Never fails on valid arguments; thread creation failure or an MPI failure
 * is fatal. Creates one fence per bucket (MPI
 * path) and, on the MPI path, the communication thread. */
reducer *reducer_create(const backend *be, float *grads, size_t n, const reducer_opts *opts);
/* Starts a step (the next step number): no bucket is ready. */
void reducer_begin(reducer *rd, long step);
/* The net's grad hook: grads[offset, offset+count) are final (issued, on an
 * asynchronous backend). Slices arrive in increasing, contiguous order. With
 * overlap on, launches every bucket this slice completes. */
void reducer_grads_ready(void *rd, size_t offset, size_t count);
/* Launches what is left and leaves the summed gradients in the device
 * buffer for every op issued after it returns: on the MPI path by waiting for
 * every bucket; on the NCCL path by making the compute stream wait (the host
 * waits only for the previous step's allreduces, see above). Fills *st when
 * st is not NULL. */
void reducer_finish(reducer *rd, reducer_stats *st);
/* After reducer_finish, for a host decision on this step's sums (loss
 * scaling's overflow check): returns once they are complete on the device.
 * On the MPI path they already are. On the NCCL path it waits for this step's
 * allreduces with the stall watchdog's warn and abort limits (polling, so a
 * peer that never joins ends the job instead of hanging it); their times then
 * come with the next reducer_finish as usual. */
void reducer_wait_sums(reducer *rd);
int reducer_bucket_count(const reducer *rd);
/* From now on every bucket is recorded as "allreduce bucket k" on tl's comm
 * thread (TIMELINE_TID_COMM); NULL stops it. MPI path: by the communication
 * thread, host times. NCCL path: one step late, from the GPU events mapped to
 * the host clock (so stamped with the next step's number); switching
 * timelines first waits for the last step's allreduces and records them on
 * the old one. Call between steps only. Never fails. */
void reducer_set_timeline(reducer *rd, timeline *tl);
/* Stops the communication thread and frees the fences; not opts->nccl. */
void reducer_free(reducer *rd);

#endif
