/*
 * dist/reducer.h - the gradient reducer: allreduces the flat gradient buffer
 * bucket by bucket while backward is still running.
 *
 * Provides one reducer over a net's gradient buffer. It cuts the buffer into
 * contiguous buckets (the first `first_bucket` values, then `bucket` values
 * each), takes backward's completed slices through the net's grad hook
 * (reducer_grads_ready) and, with overlap on, starts each bucket's sum over
 * the ranks as soon as backward has written it; reducer_finish leaves the
 * sums in the buffer (the caller divides by the world size). Two strategies,
 * chosen by reducer_opts.nccl: a communication thread through host memory
 * (MPI_Allreduce or our ring, optionally fp16 or PowerSGD-compressed on the
 * wire), or NCCL on the GPU (fp16 converted there; PowerSGD computed there
 * after backward, for the whole buffer at once). Both can run under the
 * stall watchdog, which
 * warns about or ends a job whose ranks do not reach a bucket together. The
 * design (ordering against the compute stream, what the times measure, the
 * watchdog's two halves, compression): docs/ARCHITECTURE.md, "Data
 * parallelism".
 *
 * Each step: reducer_begin, reducer_grads_ready for contiguous slices that
 * cover the buffer in increasing order, reducer_finish, then optionally
 * reducer_wait_sums. Every rank makes the same calls in the same order: the
 * buckets' collectives must match.
 *
 * Threads: one thread, the training thread, makes every call. On the MPI path
 * the communication thread is the only one calling MPI between reducer_begin
 * and the return of reducer_finish; the training thread calls MPI only
 * outside that window (MPI_THREAD_SERIALIZED is enough). On the NCCL path
 * only the training thread calls MPI and NCCL.
 *
 * Errors: nothing returns one. Invalid arguments and calls out of order fail
 * an assertion; a failure to create the thread, an MPI, CUDA or NCCL failure,
 * or a stall past reducer_opts.stall_abort_s ends the whole job, so no rank
 * is left waiting in a collective.
 */
#ifndef CNT_REDUCER_H
#define CNT_REDUCER_H

#include <stddef.h>

#include "dist/dist.h"
#include "dist/nccl.h"
#include "dist/powersgd.h"
#include "dist/timeline.h"
#include "model/backend.h"

typedef struct reducer reducer;

typedef struct reducer_stats {
    /* comm_ms and exposed_ms describe step comm_step: this step on the MPI
     * path; on the NCCL path the previous one (0: none yet, both 0). */
    double comm_ms;          /* time some bucket's allreduce ran (overlapping buckets' times count once) */
    double exposed_ms;       /* communication backward did not hide (docs/ARCHITECTURE.md) */
    long comm_step;
    int buckets;             /* buckets reduced this step */
    int early;               /* buckets whose allreduce started before backward ended */
} reducer_stats;

typedef enum reducer_compress {
    REDUCER_COMPRESS_NONE,    /* fp32 on the wire */
    REDUCER_COMPRESS_FP16,    /* IEEE binary16 on the wire, summed through fp32 */
    REDUCER_COMPRESS_POWERSGD /* weight matrices as rank-r factors, error feedback (dist/powersgd.h) */
} reducer_compress;

typedef struct reducer_opts {
    size_t first_bucket;      /* values in the first bucket (at least 1) */
    size_t bucket;            /* values in every later bucket (at least 1) */
    dist_algo algo;           /* MPI_Allreduce, our ring or the hierarchical allreduce */
    /* Buckets whose sums move at once (dist.buckets_in_flight), 1 to
     * DIST_MAX_IN_FLIGHT; 0 means 1. Above 1 only with the ring or hier
     * (MPI_Allreduce blocks its thread) and on the MPI path. Each sum adds in
     * the same order whatever else moves, so the results have the same bits
     * for every value. */
    int in_flight;
    int overlap;              /* launch buckets during backward; 0: after it */
    /* dist.comm_nice: the communication thread's nice value moved by this
     * (<= 0; cnt_thread_nice) where it waits by sleeping (algo ring or hier
     * with DIST_PROGRESS_SLEEP): it then wakes ahead of backward's threads
     * when a chunk arrives, and the link does not idle on a shared core.
     * Not with MPI_Allreduce or spinning, whose thread would keep a core
     * from backward; refused (no privilege): said once, and the run goes on. */
    int comm_nice;
    reducer_compress compress;
    /* compress = POWERSGD: the rank, the steps summed uncompressed first
     * (reducer_begin's numbers, from 1, up to psgd_start), the threads of
     * its arithmetic (1 or more by reducer_create), the seed of Q
     * (the same on every rank), and the parameter tensors tiling the buffer
     * in offset order (not owned; read by reducer_create only). One bucket
     * at a time (in_flight 1). */
    int psgd_rank;
    long psgd_start;
    int psgd_threads;   /* of the arithmetic (powersgd_set_threads); 0: auto (exchange_allreduce.c resolves it) */
    uint64_t psgd_seed;
    const powersgd_tensor *tensors;
    int n_tensors;
    double stall_warn_s;      /* watchdog warning after this wait; 0: off */
    double stall_abort_s;     /* watchdog ends the job after this wait; 0: off */
    /* NULL: the MPI path (a communication thread, staged through host
     * memory, with `algo`). Else the NCCL path over this communicator (not
     * owned: free it after reducer_free, or abort it before on a failed run);
     * `algo`, in_flight and psgd_threads are unused, be->native_stream() not
     * NULL; fp16 is converted on the GPU, PowerSGD computed there after
     * backward (dist/reducer_nccl.c). Only in builds with NCCL. */
    dist_nccl *nccl;
} reducer_opts;

/* grads: the device gradient buffer of n values (net->grads). A collective
 * when the watchdog is on (every rank creates its reducer at the same point).
 * On the MPI path it creates one fence per bucket and starts the
 * communication thread. Never fails on valid arguments; thread creation
 * failure or an MPI failure is fatal. */
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
 * waits only for the previous step's allreduces, under the stall watchdog's
 * limits). Fills *st when st is not NULL. */
void reducer_finish(reducer *rd, reducer_stats *st);
/* After reducer_finish, for a host decision on this step's sums (loss
 * scaling's overflow check): returns once they are complete on the device.
 * On the MPI path they already are. On the NCCL path it waits for this step's
 * allreduces with the stall watchdog's warn and abort limits (polling, so a
 * peer that never joins ends the job instead of hanging it); their times then
 * come with the next reducer_finish as usual. */
void reducer_wait_sums(reducer *rd);
/* Recorded steps (train.cuda_graph; the NCCL path only).
 * reducer_record(rd, k) before a step's device work is captured, k in
 * [0, 2): waits for the previous step's allreduces (the wait reducer_finish
 * would make, which a capture cannot hold), then the step's begin, launches
 * and finish, made while capturing, queue its allreduces into the recording
 * with timing events that each replay records again; reducer_record(rd, -1)
 * once the capture has ended. reducer_replayed(rd, step, k, st) once the
 * graph of recording k has been launched for step `step`: the host's part
 * of what the recorded begin, launches and finish did (each bucket's
 * arrival at the stall watchdog, the round's accounting, the wait for the
 * step before and its times in *st, as reducer_finish). */
void reducer_record(reducer *rd, int set);
void reducer_replayed(reducer *rd, long step, int set, reducer_stats *st);
/* The cut of a gradient buffer of n values into buckets, as reducer_create
 * makes it (the first first_bucket values, then bucket_size each, the last
 * possibly shorter): returns the number of buckets and, when ends is not
 * NULL, writes the first min(count, max) bucket ends (exclusive, in values)
 * to ends. Shared with the step profile (train/profile.c), so a simulation
 * sees the reducer's own buckets. */
int reducer_bucket_layout(size_t n, size_t first_bucket, size_t bucket_size, size_t *ends, int max);
/* When each bucket is complete, by the rule reducer_grads_ready launches
 * buckets by (with overlap on): bucket b can start once backward has handed
 * over the slice that makes the gradients final up to its end. Backward
 * hands over n_slices slices in order, slice k ending at slice_end[k] (for a
 * net in backward order, each node's grad_end; a node without parameters
 * hands over nothing: 0, or any end not above the ones before, changes
 * nothing). For each of the nb buckets ending at ends[] (increasing, as
 * reducer_bucket_layout writes them), writes to ready_after[b] the first k
 * after which the gradients below ends[b] are all final, -1 when no slice
 * completes it. A pure function of its arguments; shared with the step
 * profile (train/profile.c) and the step simulator (train/sim.c),
 * so neither re-derives the rule. Never fails. */
void reducer_bucket_ready_after(const size_t *ends, int nb, const size_t *slice_end, int n_slices, int *ready_after);
/* compress = POWERSGD: the compression's state (errors, Q; the reducer
 * owns it), for a checkpoint to save or a resume to restore between steps,
 * once reducer_finish has returned (the communication thread is idle then).
 * NULL without compression. */
powersgd *reducer_powersgd(reducer *rd);
/* The number of buckets the buffer was cut into (at least 1). */
int reducer_bucket_count(const reducer *rd);
/* From now on every bucket is recorded as "allreduce bucket k" on tl's comm
 * thread (TIMELINE_TID_COMM); NULL stops it. MPI path: by the communication
 * thread, host times. NCCL path: one step late, from the GPU events mapped to
 * the host clock (so stamped with the next step's number); switching
 * timelines first waits for the last step's allreduces and records them on
 * the old one. Call between steps only. Never fails. */
void reducer_set_timeline(reducer *rd, timeline *tl);
/* Stops the communication thread and frees the fences; not opts->nccl.
 * NULL is fine. */
void reducer_free(reducer *rd);

#endif
