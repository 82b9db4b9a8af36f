/*
 * dist/exchange.h - how a rank's gradients become the next parameters: the
 * one seam between the training step (train/step.c) and data parallelism.
 *
 * Three versions, chosen once from the config by exchange_create:
 *   none       one rank: nothing leaves the process; the step's own
 *              optimizer updates from its own gradients.
 *   allreduce  the gradient reducer (dist/reducer.h): buckets summed over
 *              the ranks while backward runs, through NCCL on the GPUs or
 *              through host memory (MPI_Allreduce or our ring); the step's
 *              optimizer then updates from the sums on every rank.
 *   ps         parameter servers (dist/ps.h): the last dist.ps_servers ranks
 *              hold the parameters and the momentum; a worker pushes its
 *              gradients during backward and pulls the updated parameters,
 *              so its own optimizer does not run.
 * The caller (the trainer and its stepper) makes the same calls whichever it
 * is and never asks which; what differs is said by the answers
 * (exchange_stats.updated, exchange_traits).
 *
 * Lifecycle, on every rank of the job, in this order:
 *   exchange_create    first of all (after the ranks agreed on the config):
 *                      with parameter servers, splits the job; a server
 *                      rank then runs the server's own entry point
 *                      (train/ps_server.c, exchange_server) and never the
 *                      rest of this list
 *   exchange_connect   once the rank's device is chosen, before the memory
 *                      check: the transport (NCCL or MPI)
 *   exchange_attach    once the net exists: its buffers, its grad hook
 *   [exchange_seed]    once the starting weights are known
 *   per step:          exchange_begin, the grad hook during backward,
 *                      exchange_finish, [exchange_wait_sums],
 *                      exchange_agree_stop
 *   per epoch:         exchange_epoch_end
 *   exchange_end       after the last step of a run that got through
 *   exchange_free      always (failed or not)
 *
 * Collectives: create, connect and attach are collectives of the whole job
 * (or of the workers, after the split); the per-step calls match across
 * ranks as dist/reducer.h and dist/ps.h require. Every wait is bounded by
 * dist.stall_warn_s / dist.stall_abort_s.
 *
 * Threads: the training thread makes every call.
 * Errors: create, connect and attach return CNT_ERR with a message naming the
 * config key (a job too small for its servers, dist.backend = nccl without
 * a GPU per rank); after that, MPI, NCCL and CUDA failures and stalls past
 * the abort limit end the job, as in dist/reducer.h and dist/ps.h.
 */
#ifndef CNT_EXCHANGE_H
#define CNT_EXCHANGE_H

#include <stddef.h>

#include "dist/ps.h"
#include "dist/reducer.h"
#include "dist/timeline.h"
#include "model/backend.h"
#include "model/net.h"

/* dist.mode */
typedef enum dist_mode { DIST_MODE_ALLREDUCE, DIST_MODE_PS } dist_mode;
/* dist.backend: how an allreduce moves; auto decides at exchange_connect */
typedef enum dist_backend {
    DIST_BACKEND_AUTO,
    DIST_BACKEND_MPI,
    DIST_BACKEND_RING,
    DIST_BACKEND_NCCL,
    DIST_BACKEND_HIER /* within each node to a leader, the ring between leaders (dist_hier_allreduce) */
} dist_backend;

/* The host-memory algorithm a dist.backend runs (MPI for auto and nccl, which
 * are not host algorithms or fall back to MPI). */
static inline dist_algo dist_backend_algo(dist_backend b) {
    return b == DIST_BACKEND_RING ? DIST_ALGO_RING : b == DIST_BACKEND_HIER ? DIST_ALGO_HIER : DIST_ALGO_MPI;
}

/* What dist.backend = auto runs through host memory (no NCCL), from the
 * job's shape: MPI_Allreduce on one node (shared memory: Open MPI's tuned
 * algorithms); across nodes our ring, or the hierarchical allreduce when any
 * node holds more than one rank (docs/scaling.md, "dist.backend = auto across
 * hosts": MPI_Allreduce took 1.3 to 8 times the ring's time at 3 and 4 hosts). */
static inline dist_backend dist_auto_host_backend(int nodes, int crowded_nodes) {
    return nodes <= 1 ? DIST_BACKEND_MPI : crowded_nodes > 0 ? DIST_BACKEND_HIER : DIST_BACKEND_RING;
}

typedef struct exchange_opts {
    dist_mode mode;
    dist_backend backend;
    reducer_opts reducer;    /* buckets, overlap, compression, stall limits (its nccl and algo are set here) */
    int ps_servers;          /* mode ps: the last ps_servers ranks serve */
    int ps_sync;             /* mode ps: synchronous servers */
    int ps_max_staleness;    /* mode ps, asynchronous: -1 unbounded, else the bound */
    /* as configured, for messages */
    double bucket_mb, first_bucket_mb;
    char device[32];         /* train.device */
} exchange_opts;

typedef struct exchange exchange;

/* What a version says about itself, so callers choose by property. */
typedef struct exchange_traits {
    const char *mode_name;   /* the run record's mode: "allreduce" (one rank too), "ps-sync", "ps-async" */
    int reduces;             /* gradients are summed over ranks (allreduce): communication times to show */
    int serves;              /* parameter servers: their traffic and wait to show */
    int stale;               /* asynchronous servers: gradients may be stale; ranks do not meet every step */
    int keeps_state;         /* the exchange keeps the parameters and the optimizer's momentum (the
                              * servers): the workers keep no momentum, checkpoints fetch the state
                              * (exchange_fetch_state), a start seeds it (exchange_seed) */
    const char *wait_phase;  /* the name of the wait for exchange_finish's result on the timeline
                              * ("allreduce wait"); NULL: nothing to wait for */
} exchange_traits;

/* One step's report (exchange_finish). */
typedef struct exchange_stats {
    int updated;             /* the parameters are already the step's result (servers): no update here */
    reducer_stats rs;        /* allreduce: the reducer's numbers; zero otherwise */
    ps_stats ps;             /* servers: the worker's traffic and wait; zero otherwise */
} exchange_stats;

/* What an exchange keeps beside the net, per rank (the memory check,
 * train/memory.c, adds it up before anything is allocated). */
typedef struct exchange_footprint {
    double host_per_param_byte;   /* host staging, in bytes per byte of parameters */
    double device_per_param_byte; /* the same on the rank's device (NCCL's fp16 halves, PowerSGD's error) */
    int momentum_on_worker;     /* the optimizer's momentum stays on this rank's device */
} exchange_footprint;

/* The start: from opts, on every rank of the job. Mode ps splits the job
 * (dist_split_servers: dist_rank and dist_world then count this rank's
 * group) and creates the server link; mode allreduce at one rank without
 * dist.backend = nccl is the none version. *out: the exchange (freed by
 * exchange_free). CNT_ERR with a message naming dist.ps_servers when the
 * job has too few ranks for its servers. */
int exchange_create(const exchange_opts *opts, exchange **out);
/* The none version, for a step of one process that never exchanges
 * (--bench, --profile, tests): one object for the process, nothing to free
 * (exchange_free ignores it). */
exchange *exchange_none(void);
/* 1 on a parameter-server rank: it serves (exchange_server) and is no worker. */
int exchange_is_server(const exchange *x);
/* The server link of a server rank (train/ps_server.c drives dist/ps.h's
 * server side with it); NULL on a worker. */
ps *exchange_server(exchange *x);

/* Workers: the transport, once the device be is chosen (a collective of the
 * workers): NCCL when dist.backend = nccl, or auto with several ranks all on
 * GPUs, no compression and a build with NCCL (auto falls back to MPI, with a
 * warning, when NCCL does not start). CNT_ERR with a message naming
 * dist.backend when nccl is asked for and cannot be had. */
int exchange_connect(exchange *x, const backend *be);
/* The footprint of this rank (after exchange_connect). */
exchange_footprint exchange_footprint_of(const exchange *x);
/* The same from the options alone, for a job of `world` workers with or
 * without NCCL (what exchange_footprint_of answers for such an exchange). */
exchange_footprint exchange_footprint_for(const exchange_opts *opts, int world, int nccl);
exchange_traits exchange_traits_of(const exchange *x);
/* The servers' shards of nt's flat buffers (ps_plan over its tensors in
 * buffer order, reverse forward order: the same on every rank, workers and
 * servers): *shard_end a new array of `servers` ends. CNT_ERR with ps_plan's
 * message (the caller names the model). */
int exchange_shards(int servers, const net *nt, size_t **shard_end);
/* dist.compress = powersgd: the compression's state (reducer_powersgd),
 * after exchange_attach, between steps once exchange_wait_sums has
 * returned; NULL otherwise (another mode, before attach, exchange_none). */
powersgd *exchange_powersgd(exchange *x);
/* Ranks whose gradients are combined in each update (the workers; 1 alone). */
int exchange_workers(const exchange *x);

/* dist.bucket_mb = auto: whether this exchange sums gradients over ranks by
 * an allreduce whose buckets can be sized, after exchange_connect: 1 for
 * the allreduce version at two or more ranks, naming its transport in *name
 * ("the ring", "MPI_Allreduce", "the hierarchical allreduce", "NCCL"); 0
 * otherwise (nothing to size: one rank, servers). */
int exchange_sized_allreduce(const exchange *x, const char **name);
/* Whether exchange_connect chose NCCL (the gradients stay on the GPUs). */
int exchange_nccl(const exchange *x);
/* After exchange_connect: the threads of PowerSGD's host arithmetic
 * (dist.powersgd_threads, auto resolved), 0 where there is none (another
 * dist.compress, servers, NCCL's ranks, which compress on the GPU). */
int exchange_powersgd_threads(const exchange *x);
/* Where exchange_sized_allreduce says 1: the time of one sum over the ranks
 * of `bytes` bytes of floats on this exchange's transport, in microseconds,
 * each rank's fastest of `reps`, the slowest rank's of those: through host
 * memory dist_allreduce_time_us, with NCCL a device buffer's allreduce timed
 * by CUDA events on the communication stream (dist_nccl_allreduce_time_us).
 * A collective, before exchange_attach. */
double exchange_allreduce_time_us(exchange *x, size_t bytes, int reps);
/* Before exchange_attach: every bucket after the first holds `values`
 * gradient values (`mb` MiB, for the start-up line). The same on every
 * rank. */
void exchange_set_bucket(exchange *x, size_t values, double mb);

/* Workers: binds to nt (finalised: its flat parameter and gradient buffers)
 * and sets its grad hook (net_set_grad_hook), so backward hands each
 * finished slice to the exchange. A collective of the workers. CNT_ERR with
 * a message when the model cannot be cut for its servers. */
int exchange_attach(exchange *x, net *nt);
/* dist.timeline: from now on buckets or shard round trips are recorded on
 * tl (NULL stops it); call between steps. */
void exchange_set_timeline(exchange *x, timeline *tl);
/* One sentence for the start-up log: how gradients travel ("4 ranks (4 on
 * this node), global batch 256; gradients allreduced with ..."). Returns 1
 * when nothing travels (the none version), 0 otherwise. A server version
 * also logs one line per server (its shard). */
int exchange_describe(const exchange *x, int batch, char *buf, size_t len);

/* Rank 0 of the workers, once the starting weights are known (fresh, from
 * model.init_from or from a checkpoint): hands them to where the exchange
 * keeps state: the servers get their shards of params and momentum (host
 * arrays of the net's n_params; momentum NULL: zeros; shape: the model,
 * which a server rebuilds). Other versions keep nothing: a no-op. Other
 * ranks call it too (a no-op there). */
void exchange_seed(exchange *x, const ps_shape *shape, const float *params, const float *momentum);
/* Rank 0, between steps, for a checkpoint: where the exchange keeps state
 * (keeps_state), the momentum into momentum[0 .. n_params) (host; may be
 * NULL), and with stale traits the servers' current parameters into params
 * (newer than rank 0's). Other versions leave both untouched. */
void exchange_fetch_state(exchange *x, float *params, float *momentum);

/* Starts step `step` (from 1) at learning rate lr. */
void exchange_begin(exchange *x, long step, double lr);
/* After backward is queued: what is left goes out, and the step's result
 * comes in: the summed gradients in the net's gradient buffer (for every op
 * issued after this returns; the caller divides by exchange_workers), or the
 * servers' new parameters in the net's parameters (st->updated). st may be
 * NULL. */
void exchange_finish(exchange *x, exchange_stats *st);
/* Recorded steps (train.cuda_graph). exchange_record_why: NULL where the
 * exchange's device work can be recorded with the step's (no exchange, or
 * the allreduce through NCCL), else why not, for the start-up log.
 * exchange_record(x, k) before the capture of a step that calls
 * exchange_begin, backward and exchange_finish as usual, k in [0, 2);
 * exchange_record(x, -1) after it. exchange_replayed(x, step, k, st) after
 * each launch of recording k for step `step`: the host's part of what the
 * recorded exchange did (the stall watchdog's arrivals, the wait for the
 * step before, its times in *st, as exchange_finish). */
const char *exchange_record_why(const exchange *x);
void exchange_record(exchange *x, int set);
void exchange_replayed(exchange *x, long step, int set, exchange_stats *st);
/* After exchange_finish, before a host decision on the sums (loss scaling's
 * inf/NaN check): returns once they are complete on the device. */
void exchange_wait_sums(exchange *x);
/* At each step boundary, after step `step`: the stop signal every worker
 * acts on now, given this rank's (train/stop.h; 0: none). Every worker gets
 * the same answer at the same step: with ranks that meet each step, any
 * rank's signal of the step before (it travels during the step); with
 * asynchronous servers, the step server 0 names for all. */
int exchange_agree_stop(exchange *x, long step, int signal);
/* After the last step: the last exchange_agree_stop's message, still in
 * flight, completed (every rank stopped at the same step). */
void exchange_agree_stop_drain(exchange *x);
/* After an epoch's steps, on every worker: workers whose parameters may
 * differ (stale traits) all take the servers' current ones. Rank 0 with
 * stale traits: *window gets the staleness of the gradients applied since
 * the last call, and the return is 1; 0 otherwise (window untouched). */
int exchange_epoch_end(exchange *x, ps_staleness *window);
/* Every worker after its last step, in a run that got through: the servers
 * are told (and rank 0 logs what each did). */
void exchange_end(exchange *x);
/* Rank 0, after it wrote the run's trace (written 1) or could not (0):
 * processes that sent it their events (parameter servers) keep their
 * timeline parts until told it is written. */
void exchange_trace_written(exchange *x, int written);
/* Frees everything; `failed`: the run failed, so collectives no peer will
 * join may be queued (NCCL is aborted instead of waited for). NULL is fine. */
void exchange_free(exchange *x, int failed);

#endif
