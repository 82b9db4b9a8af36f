/*
 * dist/dist.h - ranks and host-memory collectives for data-parallel training.
 *
 * Provides the process's place in the job (rank, world size, local rank on its
 * node), broadcast, barrier, gathering a value from every rank, and sum
 * allreduce of float buffers through two algorithms:
 *   DIST_ALGO_MPI   MPI_Allreduce;
 *   DIST_ALGO_RING  our own ring allreduce (dist/ring.c): reduce-scatter, then
 *                   allgather, over MPI point-to-point, chunked so large
 *                   buffers are pipelined; any size, any world size. It is the
 *                   textbook algorithm docs/ explains, and is tested against
 *                   MPI_Allreduce.
 *
 * Built with MPI (CNT_HAVE_MPI=1) the job is whatever mpirun started; a plain
 * `./trainer` is a world of one. Built without MPI every function works for a
 * world of one. MPI appears only in dist/ (this module's own files).
 *
 * Errors: every MPI call is checked; a failure prints the call, file:line,
 * rank and MPI's own error string, then ends the whole job (MPI_Abort), so no
 * rank is left waiting in a collective. dist_init installs that abort as the
 * hook of cnt_fatal(), so any fatal error on any rank ends the job.
 */
#ifndef CNT_DIST_H
#define CNT_DIST_H

#include <stddef.h>
#include <stdint.h>

typedef enum dist_algo {
    DIST_ALGO_MPI,
    DIST_ALGO_RING
} dist_algo;

/* Initialises MPI when built with it, asking for MPI_THREAD_SERIALIZED (one
 * thread at a time may call MPI: the training thread, or the communication
 * thread while the training thread does not); fails with a clear message if
 * the library grants less. Sets the log prefix ("[rank r]") and the abort hook.
 * Returns CNT_OK, or CNT_ERR with a message. */
int dist_init(int *argc, char ***argv);
/* Finalises MPI (after a barrier). Safe to call when dist_init was not. */
void dist_finalize(void);

int dist_rank(void);
int dist_world(void);
/* Rank among the processes on this node (MPI_COMM_TYPE_SHARED split). */
int dist_local_rank(void);
int dist_local_world(void);

/* Ends every rank of the job with `code` (MPI_Abort; exit when alone). */
void dist_abort(int code) __attribute__((noreturn));

void dist_barrier(void);
/* Broadcasts `bytes` bytes of host memory from `root` to every rank. */
void dist_broadcast(void *buf, size_t bytes, int root);
/* Every rank's `value` into out[0..world) on every rank. */
void dist_allgather_u64(uint64_t value, uint64_t *out);
/* Gathers every rank's n bytes at buf to rank 0 (a collective: every rank
 * calls it). On rank 0, *out is a new buffer (free()) holding the ranks'
 * bytes one after another in rank order and *counts a new array (free()) of
 * world byte counts; on other ranks both are set to NULL. A world of one just
 * copies. Fatal (the whole job ends) if the total exceeds INT_MAX bytes, MPI's
 * count limit. */
void dist_gather_bytes(const void *buf, size_t n, void **out, size_t **counts);
/* In-place sum over ranks of n floats of host memory. */
void dist_allreduce_sum(float *buf, size_t n, dist_algo algo);
/* In-place sum over ranks of n doubles (metrics: loss sums, hit counts). */
void dist_allreduce_sum_f64(double *buf, size_t n);

/* The ring algorithm alone over every rank (what DIST_ALGO_RING runs), for
 * tests and benchmarks; `chunk_bytes` bounds each message (0: default). */
void dist_ring_allreduce(float *buf, size_t n, size_t chunk_bytes);

/* For dist/ sources only (kept free of MPI types so this header never needs mpi.h):
 * the check of every MPI call. MPI_SUCCESS is 0 by the standard. On failure
 * dist_mpi_fail_at prints the statement, file:line, rank and MPI's own error
 * string, then ends the job through cnt_fatal_at (whose hook is MPI_Abort). */
#define DIST_MPI_CHECK(call)                                                     \
    do {                                                                         \
        int dist_err_ = (call);                                                  \
        if (dist_err_ != 0) dist_mpi_fail_at(__FILE__, __LINE__, #call, dist_err_); \
    } while (0)
void dist_mpi_fail_at(const char *file, int line, const char *stmt, int err)
    __attribute__((noreturn));

#endif
