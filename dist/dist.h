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
 * Both also sum IEEE binary16 buffers (dist_allreduce_sum_f16, for
 * dist.compress = fp16; conversions in common/half.h). And two guards against
 * a rank that stops arriving: the stall watchdog (dist/watchdog.c), an
 * arrival barrier with a timeout that names late ranks, in front of each
 * gradient bucket; and bounded waits (dist/wait.c) in every other collective,
 * which warn and end the job after the same limits, naming the collective
 * and the phase the caller names (dist_set_wait_limits, dist_phase).
 *
 * Built with MPI (CNT_HAVE_MPI=1) the job is whatever mpirun started; a plain
 * `./trainer` is a world of one. Built without MPI every function works for a
 * world of one. MPI appears only in dist/ (this module's own files).
 *
 * Errors: every MPI call is checked; a failure prints the call, file:line,
 * rank and MPI's own error string, then ends the whole job (MPI_Abort), so no
 * rank is left waiting in a collective. dist_init installs that abort as the
 * hook of cnt_fatal(), so any fatal error on any rank ends the job. A
 * collective that waits past the abort limit ends the job too (below).
 */
#ifndef CNT_DIST_H
#define CNT_DIST_H

#include <stddef.h>
#include <stdint.h>

typedef enum dist_algo {
    DIST_ALGO_MPI,
    DIST_ALGO_RING,
    DIST_ALGO_HIER  /* dist_hier_allreduce; dist_hier_init first */
} dist_algo;

/* Initialises MPI when built with it, asking for MPI_THREAD_SERIALIZED (one
 * thread at a time may call MPI: the training thread, or the communication
 * thread while the training thread does not); fails with a clear message if
 * the library grants less. Sets the log prefix ("[rank r]") and the abort hook.
 * Before MPI starts, asks Open MPI's TCP transport for two connections per
 * pair of ranks (OMPI_MCA_btl_tcp_links=2) unless that variable is already
 * set: over one connection it moves one direction at a time, so two ranks
 * exchanging data (every allreduce at 2 ranks) got half the link's rate
 * each way (docs/multi-node.md). Other MPI libraries ignore the variable.
 * A process that no MPI launcher started (none of the variables that
 * mpirun, Slurm's PMI/PMIx or MPICH's Hydra give their processes:
 * dist_launched_by_mpi) is a world of one without MPI, as in a build
 * without it: MPI_Init would only start a singleton daemon (about 0.4 s and
 * a process) for collectives that have nobody to talk to.
 * Returns CNT_OK, or CNT_ERR with a message. */
int dist_init(int *argc, char ***argv);

/* `trainer --version`: the MPI library's and NCCL's lines (the version
 * loaded, what it was built with, the file), appended to buf. Callable
 * without dist_init. */
void dist_libraries(char *buf, size_t len);
/* Whether an MPI launcher started this process (dist_init's test). */
int dist_launched_by_mpi(void);
/* Open MPI's TCP connections per pair of ranks as the library took it
 * (its btl_tcp_links control variable, read through MPI_T by dist_init,
 * before any other thread calls MPI), and in *chosen 1 when dist_init set
 * it, 0 when the environment did (chosen may be NULL). -1 where it cannot
 * be read: another MPI library, no TCP transport, or built without MPI. */
int dist_tcp_links(int *chosen);
/* Finalises MPI (after a barrier). Safe to call when dist_init was not. */
void dist_finalize(void);

/* This rank and the number of ranks in its group: the whole job, or after
 * dist_split_servers the workers (on a worker) or the servers (on a server).
 * Every collective below runs within the group. */
int dist_rank(void);
int dist_world(void);
/* This rank and the number of ranks in the whole job (MPI_COMM_WORLD): what
 * log prefixes, mpirun and the fault injection of dist/fault.h count in. */
int dist_job_rank(void);
int dist_job_world(void);
/* Parameter-server mode (dist.mode = ps, dist/ps.h): the last n_servers
 * ranks of the job become servers, the others workers, each group with its
 * own communicator; returns 1 on a server, 0 on a worker. Workers are job
 * ranks 0 .. world-n_servers-1 in order, so a worker's dist_rank() is its
 * job rank and rank 0 (progress, evaluation, checkpoints) is a worker. A
 * collective of the whole job, at most once, with 1 <= n_servers < the job's
 * world. MPI failures are fatal. */
int dist_split_servers(int n_servers);
/* Rank among the processes on this node (MPI_COMM_TYPE_SHARED split). */
int dist_local_rank(void);
int dist_local_world(void);
/* The job's nodes (MPI_COMM_TYPE_SHARED splits of all its ranks, servers
 * included), and in *crowded how many of them run several ranks; learnt at
 * dist_init (1 and 0 in a world of one), no collective. */
int dist_nodes(int *crowded);
/* How many of this node's processes are parameter servers (set by
 * dist_split_servers; 0 before it or without servers). Servers are the
 * job's last ranks, so they are this node's last local ranks too. */
int dist_local_servers(void);

/* Ends every rank of the job with `code` (MPI_Abort; exit when alone). */
void dist_abort(int code) __attribute__((noreturn));

/* Bounded waits. The host collectives below (barrier, broadcast, gathers,
 * the f64 allreduce, the ring's messages; not the MPI gradient sums, see
 * there) are issued in MPI's nonblocking form and completed by polling (a
 * short spin, then sleeps growing to 1 ms; the ring yields instead), so a rank
 * whose peers do not arrive can say so and end the job instead of hanging:
 *   after warn_s seconds (and every further multiple) it logs
 *     "stall: rank R has waited T s in <collective> during <phase> for the
 *     other ranks";
 *   after abort_s seconds it logs an error naming the collective, the phase
 *   and the seconds waited, then ends the job (dist_abort). Late ranks print
 *   no such line; they are the ones the others wait for.
 * 0 turns either limit off. Process-wide, for every thread; the defaults
 * until set are dist.stall_warn_s and dist.stall_abort_s's (60 s and 1800 s).
 * Safe while other threads run (stored atomically: the stall monitor that
 * dist_init starts reads them). The trainer sets them from its config right
 * after dist_init. */
void dist_set_wait_limits(double warn_s, double abort_s);
/* How the ring allreduce's thread waits for its messages (dist.progress):
 * DIST_PROGRESS_SLEEP polls between short sleeps (10 us doubling to 50 us),
 * so while the network moves a bucket the thread leaves the cores to
 * backward; DIST_PROGRESS_SPIN polls with sched_yield, never sleeping (the
 * lowest latency where the communication has a core of its own). Messages
 * move in the kernel and in Open MPI's TCP buffers while the thread sleeps:
 * a 50 us sleep is far shorter than the time a 256 KiB chunk takes on the
 * wire (2 ms at 1 Gbit/s, 0.4 ms at 5). MPI_Allreduce (dist.backend = mpi) waits inside Open MPI, by its own
 * rules, whichever is set. Process-wide; the default is SLEEP. Call it
 * before starting the exchange (a communication thread reads it when it
 * starts); stored atomically, as dist_set_wait_limits. */
typedef enum dist_progress { DIST_PROGRESS_SLEEP, DIST_PROGRESS_SPIN } dist_progress;
void dist_set_progress(dist_progress p);
/* Names what the calling thread is doing ("evaluation", "start-up:
 * configuration check") for the messages above, until it names another
 * (copied; up to 127 characters kept). Per thread: the reducer's
 * communication thread names its own. Also where CNT_TEST_STALL_IN
 * (dist/fault.h) strikes. Never fails. */
void dist_phase(const char *what);

/* The collectives. Each returns once this rank's part is done; each is a
 * bounded wait (above) except the gradient sums, dist_allreduce_sum and
 * dist_allreduce_sum_f16 with DIST_ALGO_MPI: blocking MPI_Allreduce, which
 * the nonblocking form was measured much slower than for large buffers; the
 * reducer runs the stall watchdog's arrival barrier right before each. */
void dist_barrier(void);
/* Broadcasts `bytes` bytes of host memory from `root` to every rank. */
void dist_broadcast(void *buf, size_t bytes, int root);
/* Every rank's `value` into out[0..world) on every rank. */
void dist_allgather_u64(uint64_t value, uint64_t *out);
/* A collective (an allgather): the value of the lowest rank whose value is
 * not 0, on every rank; 0 when every rank's is. What ranks agree a stop
 * signal with where no step's lagged exchange carries it. */
int64_t dist_first_nonzero(int64_t value);
/* A decision that may lag one call, at no wait: the maximum over ranks of
 * the values every rank passed to its previous call (0 at the first), while
 * this call's value starts on its way (MPI_Iallreduce, completed by the next
 * call: every rank sent it a step ago, so that completion does not wait in
 * practice). A world of one returns value itself, at once. A collective:
 * every rank calls it equally often, in the same order relative to the other
 * collectives on MPI_COMM_WORLD. The trainer's stop signal uses it after
 * every step. dist_max_lagged_drain completes the exchange in flight (call
 * it once the calls end, on every rank) and returns its maximum (0: none). */
int64_t dist_max_lagged(int64_t value);
int64_t dist_max_lagged_drain(void);
/* Gathers every rank's n bytes at buf to rank 0 (a collective: every rank
 * calls it). On rank 0, *out is a new buffer (free()) holding the ranks'
 * bytes one after another in rank order and *counts a new array (free()) of
 * world byte counts; on other ranks both are set to NULL. A world of one just
 * copies. Fatal (the whole job ends) if the total exceeds INT_MAX bytes, MPI's
 * count limit. */
void dist_gather_bytes(const void *buf, size_t n, void **out, size_t **counts);
/* In-place sum over ranks of n floats of host memory. */
void dist_allreduce_sum(float *buf, size_t n, dist_algo algo);
/* The time of one sum over the ranks of `bytes` bytes of floats with algo,
 * in microseconds: each rank's fastest of `reps` (each after a barrier), the
 * slowest rank's of those. A collective (every rank, the same arguments);
 * 0 at one rank. For dist.bucket_mb = auto's curve. */
double dist_allreduce_time_us(dist_algo algo, size_t bytes, int reps);
/* The largest over the ranks of each rank's `seconds` (to the nanosecond),
 * in microseconds: a timing's slowest rank. A collective. */
double dist_slowest_us(double seconds);
/* In-place sum over ranks of n doubles (metrics: loss sums, hit counts). */
void dist_allreduce_sum_f64(double *buf, size_t n);

/* In-place sum over ranks of n IEEE binary16 values (common/half.h), for
 * dist.compress = fp16: half the bytes of the float sum on the wire. Each
 * reduction step widens both halves to float, adds, and rounds once back to
 * half (ties to even), so a sum beyond 65504 becomes inf (as in Horovod).
 * DIST_ALGO_MPI: MPI_Allreduce with a 16-bit MPI datatype and a user-defined,
 * commutative MPI_Op doing that step (both created at first use, freed by
 * dist_finalize); DIST_ALGO_RING: dist_ring_allreduce_f16; DIST_ALGO_HIER:
 * dist_hier_allreduce_f16. Every rank gets the
 * same bits. */
void dist_allreduce_sum_f16(uint16_t *buf, size_t n, dist_algo algo);

/* The ring algorithm alone over every rank (what DIST_ALGO_RING runs), for
 * tests and benchmarks; `chunk_bytes` bounds each message (0: default).
 * Each chunk's send and receive are a bounded wait paced by dist.progress
 * (dist_set_progress). */
void dist_ring_allreduce(float *buf, size_t n, size_t chunk_bytes);
/* The same over halves: partial sums travel as halves and are added in float
 * at every hop (what dist_allreduce_sum_f16 runs with DIST_ALGO_RING). */
void dist_ring_allreduce_f16(uint16_t *buf, size_t n, size_t chunk_bytes);

/* The hierarchical allreduce (DIST_ALGO_HIER, dist.backend = hier), for
 * several ranks per node: the ranks of a node send their buffers to its
 * leader (local rank 0), which adds them in local-rank order; the leaders,
 * one per node, run the ring between them; each leader sends the sums back
 * to its node. Every message is a chunk as the ring's (two in flight,
 * bounded, paced by dist.progress), so the ranks that wait for their leader
 * sleep instead of spinning; every rank gets the same bits. Only the leaders'
 * traffic crosses the network: (nodes-1)/nodes x 2 x n per leader, against
 * (world-1)/world x 2 x n per rank of a flat ring over every rank, whose
 * ring crosses each node's link as often. dist_hier_init first: it makes
 * the node's and the leaders' communicators from the current group (a
 * collective of the group, at start-up; after dist_split_servers where
 * there are servers; no-op at one rank, and when done). */
int dist_hier_init(void);
void dist_hier_allreduce(float *buf, size_t n, size_t chunk_bytes);
void dist_hier_allreduce_f16(uint16_t *buf, size_t n, size_t chunk_bytes);
/* The nodes and this node's ranks as dist_hier_init found them (1 and 1
 * before it, or at one rank). */
void dist_hier_shape(int *nodes, int *local_world);

/* Sums in flight together (dist.buckets_in_flight): the ring's and the
 * hierarchical allreduce's messages as a state machine that moves only when
 * polled, so one thread keeps several sums moving without
 * MPI_THREAD_MULTIPLE. An op adds in the order the blocking call above adds,
 * so its sum has the same bits whatever else is in flight. Each op sends
 * with its slot's tag, so two sums between the same ranks never take each
 * other's messages. Not MPI_Allreduce: its nonblocking form was measured
 * much slower (dist.c). */
typedef struct dist_iallreduce dist_iallreduce;
#define DIST_MAX_IN_FLIGHT 8
/* An idle op for slot 0..DIST_MAX_IN_FLIGHT-1. Never fails. */
dist_iallreduce *dist_iallreduce_create(int slot);
/* op must not be running. NULL is fine. */
void dist_iallreduce_free(dist_iallreduce *op);
/* Starts the sum over every rank of buf[0, n), floats or (half) IEEE
 * binary16 as dist_ring_allreduce_f16, with DIST_ALGO_RING or
 * DIST_ALGO_HIER (dist_hier_init first), chunk_bytes as above; posts the
 * first messages and returns. Every rank starts the same sums in the same
 * order, each in an op of the same slot; the op must be idle (new, or
 * done). buf is the op's until it is done. */
void dist_iallreduce_start(dist_iallreduce *op, void *buf, size_t n, int half, dist_algo algo, size_t chunk_bytes);
/* 1 once the op's sum is complete in its buffer (and for an op never
 * started), 0 while it runs. */
int dist_iallreduce_done(const dist_iallreduce *op);
/* Moves the n ops on (NULL and done ones are skipped) and returns once a
 * message of one of them completed, none is left running, or wake(ctx)
 * (may be NULL; called between polls) returns 1. A bounded wait, paced by
 * dist.progress as each chunk of the blocking ring's is; past the abort
 * limit it ends the job. */
void dist_iallreduce_wait(dist_iallreduce *const *ops, int n, int (*wake)(void *ctx), void *ctx);

/* The stall watchdog (dist/watchdog.c): an arrival barrier with a timeout,
 * run by the reducer before each gradient bucket's allreduce (on its
 * communication thread; with NCCL on the training thread, before queueing
 * the bucket) when dist.stall_warn_s or dist.stall_abort_s is set.
 * dist_watchdog_arrive announces "this rank reached (step, bucket)" to every
 * other rank (MPI_Isend of three int64 on a private duplicate of
 * MPI_COMM_WORLD, so the announcements never match other messages) and polls
 * (MPI_Iprobe + MPI_Recv; a short spin, then sleeps growing to 250 us so the
 * waiting thread leaves the cores to compute) until every peer has announced
 * the same bucket. While it waits it knows exactly which peers have not
 * arrived: after warn_s seconds (and again at every further multiple) it
 * prints "stall: step S bucket B has waited T s for rank(s) ... (last seen
 * at ...)"; after abort_s seconds it prints an error naming them and ends
 * the job (dist_abort). 0 turns either off. */
typedef struct dist_watchdog dist_watchdog;
/* A collective over every rank (it duplicates MPI_COMM_WORLD). Returns NULL
 * when both limits are 0 or the world is one (then nothing is ever sent).
 * MPI failures are fatal. */
dist_watchdog *dist_watchdog_create(double warn_s, double abort_s);
/* Announces (step, bucket) and returns once every rank has announced it;
 * every rank calls it for the same sequence of buckets. Warns or ends the job
 * as above; never returns an error. wd may be NULL (returns at once). */
void dist_watchdog_arrive(dist_watchdog *wd, long step, int bucket);
/* Completes the outstanding sends and frees the communicator (every rank,
 * after its last dist_watchdog_arrive). NULL is fine. */
void dist_watchdog_free(dist_watchdog *wd);

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
