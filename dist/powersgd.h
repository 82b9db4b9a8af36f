/*
 * dist/powersgd.h - PowerSGD gradient compression (Vogels, Karimireddy and
 * Jaggi, NeurIPS 2019; PyTorch DDP's powerSGD_hook): dist.compress =
 * powersgd.
 *
 * Each weight matrix's gradient M (a convolution's [K, C, R, S] read as K
 * rows of C*R*S, a linear layer's [out, in]) travels as two thin factors
 * instead of its n*m values. With Q (m x r) kept from the step before (warm
 * start; at first random, the same on every rank):
 *
 *   M += e                  error feedback: what earlier steps left out
 *   P  = M Q                (n x r)   summed over the ranks
 *   P  = orthonormal(P)     Gram-Schmidt on its r columns
 *   Q  = M^T P              (m x r)   this rank's, then summed over the ranks
 *   e  = M - P Q^T          with this rank's Q (the paper's local error)
 *   M  = P Q_sum^T          the sum's rank-r approximation, written back
 *
 * so r*(n + m) values cross the wire instead of n*m. Tensors that would not
 * shrink by at least POWERSGD_MIN_RATE (vectors: biases, batch norm; small
 * matrices) are summed whole, in the first of the two sums. The result
 * replaces the gradients with the (approximate) sum over the ranks, as an
 * uncompressed allreduce would leave it: the caller divides by the world.
 *
 * Determinism: every rank gets the same P sum and the same Q sum, and runs
 * the same code on them, so every rank writes the same bits and parameters
 * stay identical across ranks. The error e and this rank's Q differ between
 * ranks, by design.
 *
 * Not thread-safe: one thread (the reducer's communication thread) makes
 * every call on an object; the arithmetic may run on a team of that
 * thread's (powersgd_set_threads). Errors: none returned; invalid arguments
 * fail an assertion.
 */
#ifndef CNT_POWERSGD_H
#define CNT_POWERSGD_H

#include <stddef.h>
#include <stdint.h>

#include "model/net.h"

/* PyTorch's min_compression_rate default: a tensor is compressed only when
 * n*m >= POWERSGD_MIN_RATE * r*(n + m). */
#define POWERSGD_MIN_RATE 2.0

/* One parameter tensor of the flat gradient buffer: [offset, offset+count),
 * `rows` rows of count/rows values (torchvision's first dimension); rows <= 1
 * for a vector. */
typedef struct powersgd_tensor {
    size_t offset, count;
    int rows;
} powersgd_tensor;

typedef struct powersgd powersgd;

/* The sum over every rank of buf[0, n), in place: each rank calls it with the
 * same n, in the same order (the reducer's allreduce). */
typedef void (*powersgd_sum_fn)(float *buf, size_t n, void *ctx);

/* tensors: n_tensors tensors that tile [0, n) in offset order (copied).
 * rank: the approximation's rank, 1 or more. seed: Q's first values (every
 * rank must pass the same). Never fails. */
powersgd *powersgd_create(const powersgd_tensor *tensors, int n_tensors, size_t n, int rank, uint64_t seed);
/* The same on a backend's device (be NULL: powersgd_create): its state (Q,
 * the error, the two sums' buffers) in be's memory, and powersgd_reduce
 * takes device gradients and hands sum device buffers, its arithmetic be's
 * ops queued in order (GEMMs in fp32, lowrank_orthonormalise, axpy,
 * copies), made by the thread that makes be's other calls. What differs
 * from the host's: the rounding of be's GEMMs, and a column of Q that summed
 * to zero is drawn again from a stateless hash of (seed, the call's number,
 * the tensor) on the device (lowrank_redraw) instead of the host's stream,
 * which then only makes Q's first values (draws[] below). powersgd_state_get
 * and _set copy through host memory (download waits for what is queued).
 * For NCCL's ranks (dist/reducer_nccl.c); the CPU backend runs it too, which
 * is how the tests check it without a GPU. powersgd_set_threads does not
 * apply. */
powersgd *powersgd_create_on(const backend *be, const powersgd_tensor *tensors, int n_tensors, size_t n, int rank,
                             uint64_t seed);
void powersgd_free(powersgd *p);

/* The tensors of a table t[0, n) (tiling a buffer in offset order) that a
 * bucket [begin, end) completes: those whose last value lies in it,
 * [*first, *last) (first == last: none). What powersgd_region covers, for
 * callers without a powersgd object (the step simulator, train/sim.c). */
void powersgd_bucket_tensors(const powersgd_tensor *t, int n, size_t begin, size_t end, int *first, int *last);

/* The part of the buffer that a bucket [begin, end) completes: the tensors
 * whose last value lies in it, [*lo, *hi) (lo == hi: none; a tensor larger
 * than the bucket waits for the bucket holding its end). Buckets that tile
 * the buffer give regions that tile it too. */
void powersgd_region(const powersgd *p, size_t begin, size_t end, size_t *lo, size_t *hi);

/* The arithmetic of powersgd_reduce on `threads` threads (>= 1; 1 at
 * creation): an OpenMP team of the calling thread's, for the passes over
 * tensors of 64 K values or more. The results are the same bits whatever
 * the number: the threads split rows, or Q's columns, never a sum. What it
 * is for: on a GPU rank the host's cores are idle while PowerSGD's passes
 * over the gradients (memory-bound) hold back the step; on a CPU rank they
 * compute backward meanwhile. */
void powersgd_set_threads(powersgd *p, int threads);

/* Compresses grads[lo, hi) (host memory, a region from powersgd_region),
 * sums it over the ranks through sum (called twice, or once when nothing in
 * the region is compressed, never when it is empty), and writes the result
 * back into grads[lo, hi). Updates the error and Q of the tensors there. */
void powersgd_reduce(powersgd *p, float *grads, size_t lo, size_t hi, powersgd_sum_fn sum, void *ctx);

/* nt's parameter tensors as a table in offset order (backward's, not
 * registration's), nt->n_param_tensors of them; the caller frees it. */
powersgd_tensor *powersgd_net_tensors(const net *nt);

/* Whether tensor t is compressed at rank r: a matrix (rows > 1, at least 2
 * columns) with count >= POWERSGD_MIN_RATE * r * (rows + cols). */
int powersgd_compresses(const powersgd_tensor *t, int rank);
/* A table's compressed tensors (returned), their values and the floats
 * both sums carry per step for the whole buffer. Never fails. */
int powersgd_summary(const powersgd_tensor *t, int n_tensors, int rank, size_t *values, size_t *wire);

/* The host arithmetic's time on this machine, ns per compressed value:
 * powersgd_reduce on `threads` threads over every compressed tensor of the
 * table (gradients of hashed values; sums that add nothing, and the
 * tensors sent whole left out), in groups of consecutive tensors of at most
 * `budget` values, each group the fastest of `reps` calls after an untimed
 * one; a tensor above the budget cut to fewer rows of the same width and
 * its time scaled to its size. 0 when no tensor is compressed. Holds about
 * 2 x budget floats at a time. For dist.bucket_mb = auto's model of the
 * compressed step (train/run_buckets.c). */
double powersgd_time_ns(const powersgd_tensor *t, int n_tensors, int rank, int threads, size_t budget, int reps);

/* What a checkpoint keeps of the compression (train/checkpoint.h), between
 * steps only (no powersgd_reduce running): the rank r, Q of every compressed
 * tensor (n_q values, the same on every rank), this rank's error (n_e
 * values: the compressed tensors' counts) and the state of Q's random draws
 * (the same on every rank).
 *
 * Why one error is enough for a resume at any world size: every sum the
 * ranks make (P = sum_i (M_i + e_i) Q, then Q = sum_i (M_i + e_i)^T P) is
 * linear in the ranks' M_i + e_i, so the sums, the result and the sum of the
 * next errors depend on the errors only through their sum. A resumed run
 * that gives rank 0 the sum of the ranks' errors and the others none makes
 * the same sums as the uninterrupted run, up to the rounding of the order
 * of additions (the same bits at one rank). */
void powersgd_state_size(const powersgd *p, int *rank, size_t *n_q, size_t *n_e);
/* Copies Q into q[n_q], the error into e[n_e] and the draws' state into
 * draws[2]. */
void powersgd_state_get(const powersgd *p, float *q, float *e, uint64_t draws[2]);
/* Sets Q, the error (e NULL: zero) and the draws' state, sized as
 * powersgd_state_size gives them (the caller checks the sizes first). */
void powersgd_state_set(powersgd *p, const float *q, const float *e, const uint64_t draws[2]);

#endif
