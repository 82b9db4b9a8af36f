/*
 * dist/nccl.h - gradient allreduce with NCCL, on the GPU, ordered against the
 * compute stream by CUDA events: the host never waits for it.
 *
 * Provides one NCCL communicator over every MPI rank (one GPU per rank), a
 * communication stream of its own, and in-place float sum allreduces queued
 * on that stream after "everything issued so far on the compute stream".
 * dist/reducer_nccl.c uses it for dist.backend = nccl; nothing else needs to.
 *
 * Ordering, all on the device (| = an event, v = a stream waiting for it):
 *
 *   compute stream:  bwd writes bucket 0 |  bwd writes bucket 1 |  ... |mark  (wait)  optimizer
 *                                        v                      v            ^
 *   comm stream:              start allreduce 0 end   start allreduce 1 end  | done
 *
 * dist_nccl_allreduce_after records an event on the compute stream and makes
 * the communication stream wait for it, so the allreduce reads the gradients
 * only once the ops that wrote them have run; backward goes on meanwhile.
 * dist_nccl_join makes the compute stream wait for every allreduce queued so
 * far, so the optimizer, issued next, reads the sums. Both return at once.
 *
 * Rounds and timing: the allreduces queued between two dist_nccl_join calls
 * form a round (the reducer's step); dist_nccl_join closes it and returns its
 * number (0, 1, 2, ...). Each allreduce is bracketed by two timing events on
 * the communication stream. dist_nccl_round_wait waits on the host until a
 * closed round has finished on the device and reads its times. The reducer
 * reads the previous step's round at the end of the current step's issue
 * (reducer_finish), when the device still has this step's backward queued, so
 * the wait costs the GPU nothing; it bounds how far the host runs ahead to
 * about one step. The events of the last three rounds are kept.
 *
 * Requirements: built with CNT_HAVE_NCCL=1 (this header declares the API in
 * every build; callers, dist/exchange_allreduce.c and the reducer, guard
 * their calls with #if CNT_HAVE_NCCL). One thread
 * (the training thread, whose current CUDA device is the rank's GPU) makes
 * every call. NCCL needs one GPU per rank: dist_nccl_create refuses two ranks
 * on one GPU with a message instead of letting NCCL fail.
 *
 * Errors: every CUDA and NCCL call is checked (CUDA_CHECK / NCCL_CHECK,
 * common/cuda_check.h): a failure prints the call, file:line and the
 * library's own string and ends the whole job. NCCL's asynchronous errors
 * (a peer or the network failing during an allreduce) are polled in
 * dist_nccl_round_wait and end the job the same way.
 */
#ifndef CNT_DIST_NCCL_H
#define CNT_DIST_NCCL_H

#include <stddef.h>

typedef struct dist_nccl dist_nccl;

/* A collective over every MPI rank. Each rank describes its GPU (host, the
 * current CUDA device, its PCI bus id); rank 0 checks that no two ranks share
 * one, makes the ncclUniqueId and broadcasts its verdict and the id; every
 * rank then calls ncclCommInitRank on its current device (so create it after
 * backend_get_for_rank has selected the rank's GPU on this thread) and
 * creates the communication stream (non-blocking) and events. Returns NULL
 * with a message (cnt_err_msg) on every rank when a rank has no usable device
 * or two ranks share a GPU; CUDA or NCCL failures after that are fatal (the
 * whole job ends). Before it returns, two warm-up allreduces (one value, 32
 * MiB, or the one value alone on every rank when a rank cannot allocate the
 * 32 MiB; waited for within the stall limits) make NCCL connect and allocate
 * its buffers, which it would otherwise do at the first step, after the
 * start-up memory check had read the free memory without them. */
dist_nccl *dist_nccl_create(void);
/* The GPU memory the communicator took by then: its buffers, as the free
 * memory fell from before ncclCommInitRank to after the warm-up (another
 * process on the GPU may move it; 0 where the free memory grew). */
size_t dist_nccl_own_bytes(const dist_nccl *c);
/* Waits for everything queued on the communication stream, then finalises
 * and destroys the communicator. Every rank calls it (NCCL's finalisation
 * waits for the peers). NULL is fine. */
void dist_nccl_free(dist_nccl *c);

/* For a run that failed: aborts the communicator without waiting for queued
 * collectives (a failed peer may never join them) and frees the host side.
 * Call it on the failing path instead of dist_nccl_free. NULL is fine. */
void dist_nccl_abort(dist_nccl *c);

/* Queues an in-place float sum allreduce of buf[0, n) (device memory, n >= 1)
 * on the communication stream, after every op issued so far on
 * compute_stream (a cudaStream_t): cudaEventRecord on compute_stream,
 * cudaStreamWaitEvent on the communication stream, then the start event,
 * the allreduce and the end event. No host wait. Every rank must queue the
 * same sequence of sizes, with half NULL on all or on none. Opens a round if
 * none is open.
 *
 * half NULL: ncclAllReduce of the floats. half: n 2-byte values inside
 * dist_nccl_half_staging's buffer (dist.compress = fp16): buf rounded to IEEE half into half (to
 * nearest even; beyond +-65504: inf), ncclAllReduce of the halves (ncclFloat16,
 * half the bytes on the wire; NCCL adds halves with half arithmetic, so each
 * partial sum is rounded to half as the host ring's fp16 sum rounds it at
 * every hop, dist/ring.c), then widened back into buf, all on the
 * communication stream and inside the timing events (the conversions count
 * as communication). With 2 ranks the result is the rounded sum of the two
 * rounded values, the same as dist.backend = ring or mpi with fp16. */
void dist_nccl_allreduce_after(dist_nccl *c, void *compute_stream, float *buf, size_t n, void *half);
/* dist.compress = fp16: a device buffer of n 2-byte values for
 * dist_nccl_allreduce_after's `half`, owned by the communicator, which frees
 * it once its stream has finished (dist_nccl_free; dist_nccl_abort waits for
 * nothing and leaves it to the process's end: a cudaFree would wait for
 * collectives a failed peer never joins). A later call with n no larger
 * returns the same buffer; a larger n moves it (after the stream's queued
 * work), which no recorded step that converted through it may outlive: it
 * fails an assertion then. Not while recording. `half` passed to
 * dist_nccl_allreduce_after lies inside it. */
void *dist_nccl_half_staging(dist_nccl *c, size_t n);
/* Makes compute_stream wait, on the device, for every allreduce queued so far
 * (no host wait), after marking on it where the wait begins (for exposed_ms;
 * a dist_nccl_wait of the round marked it already). Closes the current round
 * (possibly empty) and returns its number. */
long dist_nccl_join(dist_nccl *c, void *compute_stream);
/* The same wait in the middle of a round, which stays open: the compute
 * stream's next ops read the sums queued so far (PowerSGD's second sum needs
 * its first, dist/reducer_nccl.c). Its first call in a round marks where
 * exposed_ms begins. Not while recording. */
void dist_nccl_wait(dist_nccl *c, void *compute_stream);

/* dist.bucket_mb = auto's curve through NCCL: the device time of one
 * in-place fp32 allreduce of buf[0, n) (device memory) on the communication
 * stream, in microseconds: each rank's fastest of `reps` (each after a
 * barrier, its round waited for within warn_s / abort_s as
 * dist_nccl_round_wait waits), the slowest rank's of those. A collective,
 * with no round open and nothing being recorded; buf's contents are
 * summed over (left as garbage). */
double dist_nccl_allreduce_time_us(dist_nccl *c, void *compute_stream, float *buf, size_t n, int reps,
                                   double warn_s, double abort_s);

/* Recorded steps (train.cuda_graph). dist_nccl_record(c, k), k in [0,
 * DIST_NCCL_RECORDINGS), with no round open: the next round (its allreduces
 * and its join, made while the compute stream is being captured) records
 * its timing events as event-record nodes of the graph and into recording
 * k's own events, which every replay of that graph records again;
 * dist_nccl_record(c, -1) after the join ends it. dist_nccl_replay(c, k),
 * once the graph of recording k is launched, with no round open: closes a
 * round on recording k's events and returns its number, to be read by
 * dist_nccl_round_wait as any round. Recording k's events are those of its
 * newest launch: read a replay's round before its graph is launched again
 * (the stepper alternates two recordings, and the reducer reads each round
 * one step later). */
#define DIST_NCCL_RECORDINGS 2
void dist_nccl_record(dist_nccl *c, int set);
long dist_nccl_replay(dist_nccl *c, int set);

/* The times of one closed round, on the device. */
typedef struct dist_nccl_round {
    int count;             /* allreduces in the round */
    double comm_ms;        /* sum over them of end - start */
    /* How long the compute stream waited in dist_nccl_join: the time from
     * the join's mark (the end of the ops issued before it, i.e. backward)
     * to the end of the last allreduce, or 0 when they had finished first. */
    double exposed_ms;
    /* [count] each allreduce's start and end on the host clock (time_now()
     * seconds), mapped from GPU event times through an anchor taken at
     * creation: durations and the order within a round are exact to the
     * events' resolution (about 0.5 us); the round's position drifts from the
     * host clock by the float rounding of cudaEventElapsedTime over the time
     * since creation (about 0.25 ms after an hour) plus the clocks' drift.
     * Valid until the third round after this one opens. */
    const double *start_s, *end_s;
} dist_nccl_round;

/* Waits on the host until round `round` (the newest closed round or the one
 * before it; an older one only while no later round is open: its events are
 * reused from then on) has finished on the device, then
 * fills *out. It polls (cudaEventQuery, 16 polls, then sleeping up to 250 us
 * between polls) and checks NCCL's asynchronous error each time, in the
 * bounded-wait loop of dist/wait.h: when warn_s > 0 it warns after warn_s
 * seconds of waiting (and once per further multiple), then says "stall
 * over" when the round finishes; when abort_s > 0 it ends the job after
 * abort_s seconds (exit status DIST_STALL_EXIT), naming `what` (e.g. "the
 * gradient allreduces of step 12"): the GPU-side half of the stall watchdog. */
void dist_nccl_round_wait(dist_nccl *c, long round, double warn_s, double abort_s, const char *what,
                          dist_nccl_round *out);

/* dist_libraries' NCCL line (the version loaded, built with, its file). */
void dist_nccl_libraries(char *buf, size_t len);

#endif
