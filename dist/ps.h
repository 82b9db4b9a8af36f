/*
 * dist/ps.h - parameter servers (dist.mode = ps): the other architecture of
 * data parallelism, beside the reducer's allreduce (dist/reducer.h).
 *
 * The last K ranks of the job are servers (dist_split_servers), the others
 * workers. The flat parameter buffer (net->params, reverse forward order) is
 * cut into K contiguous shards of whole tensors, balanced by bytes
 * (ps_plan); server k holds shard k's parameters and momentum. Each step a
 * worker pushes every shard of its gradient to that shard's server as soon
 * as backward has written it (the net's grad hook, as the reducer's buckets),
 * then pulls every shard's parameters back. Everything travels through host
 * memory over MPI point-to-point on a private duplicate of MPI_COMM_WORLD; a
 * GPU worker stages its gradients and parameters through the host.
 *
 * Synchronous (dist.ps_sync = true): a server waits for every worker's
 * gradient of step t, sums them in worker order, has the caller's update
 * apply the optimizer to its shard with scale 1/workers, then sends the new
 * parameters to every worker. So a step equals an allreduce step with the
 * same global batch: the same sum (bit for bit with 2 workers, whose sum a+b
 * no order changes) and the same update.
 *
 * Asynchronous (dist.ps_sync = false): a server owes each worker that pushed
 * an answer, and answers as soon as it may: at once without a bound, or, with
 * dist.ps_max_staleness = S, once the worker is at most S steps ahead of the
 * slowest worker still training (stale-synchronous parallel; the slowest
 * never waits). Before answering, it applies what has arrived: the pending
 * gradients, summed in worker order, as one update (scale 1/workers each, at
 * the learning rate of the newest step among them). Without a bound that is
 * one update per gradient, as it arrives, and other workers compute on
 * parameters that are older by the updates in between: a gradient's
 * staleness is the server's version (updates applied) when it is applied
 * minus the version the worker computed on. With S = 0 every worker waits
 * for all the others at every step and each update sums all of a step's
 * gradients: exactly the synchronous mode, which is how it is built.
 *
 * Messages (tags on the private communicator): a worker's header (kind,
 * step, learning rate) precedes what it asks: a gradient shard (PUSH), the
 * server's momentum (STATE, rank 0 for a checkpoint), the end (BYE). Rank 0
 * seeds the servers (INIT: the model's shape, then each shard's parameters
 * and momentum) before the first step, from a fresh start or a checkpoint.
 *
 * Waits: every wait is bounded by dist.stall_warn_s / dist.stall_abort_s
 * (dist_set_wait_limits) and names the ranks waited for: a worker names the
 * servers whose parameters have not come, a server the workers whose
 * gradients have not. A rank that dies ends the job through mpirun, or the
 * waits end it.
 *
 * Threads: the training thread makes every call (MPI_THREAD_SERIALIZED).
 * Errors: invalid calls fail an assertion; MPI failures and stalls past the
 * abort limit end the job.
 */
#ifndef CNT_PS_H
#define CNT_PS_H

#include <stddef.h>
#include <stdint.h>

#include "dist/timeline.h"
#include "model/backend.h"

/* Cuts a buffer of tensors ending at tensor_end[0 .. n_tensors) (increasing
 * exclusive ends in values; the last is the buffer's size) into `servers`
 * contiguous shards of whole tensors, each shard's end as close to an equal
 * share of the values as whole tensors allow, every shard at least one
 * tensor. shard_end[k]: shard k's exclusive end. CNT_ERR with a message
 * naming dist.ps_servers when servers < 1 or servers > n_tensors. */
int ps_plan(const size_t *tensor_end, int n_tensors, int servers, size_t *shard_end);

typedef struct ps ps;

/* What the model looks like, sent by rank 0 to the servers, which build the
 * same net to hold their shards (they read no data). */
typedef struct ps_shape {
    int64_t c, h, w, classes;
} ps_shape;

/* A collective of the whole job, after dist_split_servers(servers):
 * duplicates MPI_COMM_WORLD. max_staleness: -1 unbounded asynchronous
 * training, S >= 0 the bound above (0: synchronous). */
ps *ps_create(int servers, int max_staleness);
void ps_free(ps *p);
int ps_workers(const ps *p);
int ps_servers(const ps *p);
/* Job rank of server k. */
int ps_server_rank(const ps *p, int k);
/* This rank's server index k (its shard), or -1 on a worker. */
int ps_server_index(const ps *p);

/* Per-step numbers of a worker (ps_finish_step). */
typedef struct ps_stats {
    double push_bytes;   /* gradient bytes this worker sent this step */
    double pull_bytes;   /* parameter bytes it received */
    double wait_s;       /* seconds from the end of backward to the last parameter shard's arrival */
    int early;           /* shards pushed before backward ended */
    long staleness;      /* the largest over the shards of this step's gradient's staleness (0 when synchronous) */
} ps_stats;

/* How stale the applied gradients were: a histogram of 0 .. PS_HIST-2 and
 * PS_HIST-1 for that or more. */
#define PS_HIST 16
typedef struct ps_staleness {
    double applied;      /* gradients applied */
    double sum;          /* their staleness summed */
    double max;
    double hist[PS_HIST];
} ps_staleness;

/* ---- worker side ---- */
/* Binds the worker to its net's device buffers (n values each) cut at
 * shard_end (ps_plan, the same on every rank). */
/* dist.timeline (call on every rank of the job, before the first step, or
 * never): a worker records on its timeline each shard's round trip ("push+pull
 * shard k": from its push to its parameters' arrival) on a track per server
 * (the stepper records its wait after backward on the training track); a server, on
 * its own (timeline_create_local), each gradient's arrival ("gradients in"),
 * each update ("serve") and each answer ("parameters out"), and sends them to
 * rank 0 at the goodbye (ps_worker_bye), on rank 0's time axis. */
void ps_set_timeline(ps *p, timeline *tl);
void ps_worker_bind(ps *p, const backend *be, float *params, float *grads, size_t n, const size_t *shard_end);
/* Rank 0 only, before the first step: the shape, then each server's shard
 * of params and momentum (host arrays of n values; momentum NULL: zeros). */
void ps_worker_init_servers(ps *p, const ps_shape *shape, const float *params, const float *momentum);
/* Starts step `step` (from 1) at learning rate lr: no shard pushed yet. */
void ps_begin_step(ps *p, long step, double lr);
/* The net's grad hook (as reducer_grads_ready): grads[offset, offset+count)
 * are final; pushes every shard this completes. */
void ps_grads_ready(void *p, size_t offset, size_t count);
/* Pushes what is left, then waits for every server's new parameters and
 * uploads them into the net's params. Fills *st when not NULL. */
void ps_finish_step(ps *p, ps_stats *st);
/* Rank 0 only, between steps: every server's momentum shard into
 * momentum[0 .. n) (host), for a checkpoint; and, params not NULL, its
 * current parameters (asynchronous training: newer than rank 0's). */
void ps_worker_fetch_state(ps *p, float *params, float *momentum);
/* Asynchronous training, every worker: waits for the others (a collective
 * among the workers, once every worker's last push has been answered), then
 * gives every worker the servers' current parameters (rank 0 fetches them and
 * broadcasts), so evaluation and the next epoch start from the same ones. */
void ps_worker_sync_params(ps *p);
/* Rank 0 only: the staleness of the gradient shards every server applied
 * since the previous call, all servers together, into *window. */
void ps_worker_fetch_staleness(ps *p, ps_staleness *window);
typedef struct ps_server_stats ps_server_stats;
/* Asynchronous training: a stop signal (train/stop.h) this worker got,
 * carried to the servers with its next push; server 0 answers every worker
 * with the step all of them stop after (the one after the furthest step any
 * has begun, so none has passed it and all stop at the same step, as the
 * trainer's collectives need), which ps_stop_step then returns with the
 * signal (0: not yet). Workers need not wait for each other for it, as an
 * allreduce of the signal would make them. */
void ps_note_stop(ps *p, int signal);
long ps_stop_step(const ps *p, int *signal);
/* A stop signal a server got and passed on in its answers (0: none yet):
 * the worker treats it as its own (synchronous: the workers agree on it;
 * asynchronous: ps_note_stop carries it to server 0). */
int ps_servers_stop(const ps *p);
/* Every worker, once, after its last step: tells the servers it is done.
 * Rank 0 passes st[servers] and gets each server's numbers; the others NULL. */
void ps_worker_bye(ps *p, ps_server_stats *st);
/* Rank 0, after its goodbye brought the servers' timelines (dist.timeline)
 * and it wrote the trace or failed to (written 0): tells every server,
 * which removes its timeline part once the trace holds it. Nothing without
 * a timeline. */
void ps_worker_trace_written(ps *p, int written);

/* ---- server side ---- */
/* Receives rank 0's model shape (the first message a server gets). */
void ps_server_shape(ps *p, ps_shape *shape);
/* The server's update of its shard, the values [begin, end) of the flat
 * buffers: grads (end - begin values, which the update may overwrite) holds
 * the sum of the workers' gradients; apply the optimizer at lr with scale
 * (1/workers) to the shard's parameters and momentum. */
typedef void (*ps_update_fn)(void *ctx, size_t begin, size_t end, float *grads, double lr, float scale);
/* The stop signal (train/stop.h) this server got, 0 while none: asked
 * between messages. The server goes on serving and passes the first signal
 * to every worker it answers from then on (ps_servers_stop). */
typedef int (*ps_stop_fn)(void *ctx);

struct ps_server_stats {
    long steps;          /* updates applied */
    double wait_s;       /* seconds with nothing to do: waiting for gradients */
    double update_s;     /* seconds in the update */
    double bytes;        /* gradient and parameter bytes received and sent */
    ps_staleness stale;  /* every applied gradient's staleness */
};

/* Serves until every worker has said goodbye: receives rank 0's initial
 * shard into params and momentum, then each step sums the pending gradient
 * shards (in worker order, into the first one's receive buffer), calls
 * update, sends the parameters back, as the mode above says; answers rank
 * 0's requests; asks stop (with ctx) between messages. params and
 * momentum are host arrays of this server's shard
 * only, the values [shard_end[k-1], shard_end[k]) of the model's n (k: this
 * server; momentum NULL without momentum): a server holds its shard's
 * parameters, momentum and one receive buffer per worker, nothing more. */
void ps_serve(ps *p, float *params, float *momentum, size_t n, const size_t *shard_end, ps_update_fn update,
              ps_stop_fn stop, void *ctx, ps_server_stats *st);

#endif
