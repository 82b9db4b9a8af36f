/*
 * train/sim.h - predicts one data-parallel training step on N
 * workers from a step profile (`trainer --profile`, optionally with the
 * allreduce curve of tools/profile.sh), as read and checked by
 * profile_load (train/profile.h). Used by tools/simulate.c and
 * tests/test_simulate.c.
 *
 * The model of a step (times relative to the start of backward):
 *   - forward takes forward_ms / speed; backward replays the profile's layers
 *     in backward order, each layer's backward_ms / speed, rescaled so that
 *     they add up to the profile's backward_ms / speed (per-layer timing
 *     inflates the sum);
 *   - a bucket is ready when backward has written its last value (the
 *     running maximum of the layers' grad_end reaches the bucket's end);
 *     with overlap off every bucket is ready when backward ends;
 *   - buckets cross the network one after another: a bucket starts at
 *     max(its ready time, the previous bucket's end) and takes
 *     sim_allreduce_ms of its bytes (halved with fp16);
 *   - PowerSGD (powersgd_rank = r > 0, dist.compress = powersgd): each
 *     bucket sums its region (the tensors whose last value lies in it,
 *     powersgd_bucket_tensors; none: nothing is sent) in two allreduces,
 *     one after the other: the compressed tensors' P (rows x r each) with
 *     the others whole, then their Q (r x cols each; only when the region
 *     compresses one). The host arithmetic, powersgd_ns per compressed
 *     value, occupies the communication thread as the reducer runs it, in
 *     shares of the memory its passes move: 2/5 before the first sum (the
 *     error added, P), 2/5 between (Q, the error), 1/5 after the second
 *     (the result); the next bucket starts after it. comm_ms counts it.
 *     With powersgd_at_end (NCCL's ranks, dist/reducer_nccl.c) there are no
 *     buckets: the whole gradient is one region, ready when backward ends,
 *     its arithmetic (on the GPU there: give its rate) split the same way;
 *   - Horovod mode replaces the buckets with Horovod's background loop
 *     (horovod/common/operations.cc): sleep one cycle, fuse the layers'
 *     gradients that are ready and not yet sent, in order, into allreduces
 *     of at most the fusion size (a larger gradient goes alone), run them
 *     one after another (blocking), sleep again. The first look is one cycle
 *     after the start of backward; each next look one cycle after the last
 *     allreduce ends, so a slower network fuses more per message;
 *   - step = forward + max(backward end, last allreduce end) + update / speed
 *     + data wait + jitter, where jitter = sigma * sqrt(2 ln N) approximates
 *     the expected slowest of N workers with sigma = jitter_pct % of the
 *     compute (forward + backward + update);
 *   - N = 1 has no communication;
 *   - parameter-server mode (ps_servers = K > 0, dist.mode = ps,
 *     synchronous) replaces the allreduce: the gradient buffer is cut into K
 *     shards of whole layers (ps_plan, dist/ps.h), each on a server with
 *     its own link of bw. A shard is pushed when backward has written it;
 *     the push ends when the server has received all N workers' copies (N x
 *     its bytes over the server's link, after that link's previous push) and
 *     no sooner than the worker's own link allows (its bytes after its
 *     previous push); the server then updates (the profile's update, times
 *     the shard's share) and sends the shard back the same way (N x its
 *     bytes over the server's link; the worker's link takes the shards one
 *     after another). The step ends when the last shard is back (the
 *     update is inside that); even N = 1 communicates.
 *
 * Errors: sim_step returns CNT_ERR with a message for a cluster
 * it cannot model (curve mode at another world size, N not a multiple of the
 * GPUs per node, more servers than layers with parameters, PowerSGD with
 * fp16, Horovod's loop or servers, or on a profile without its tensors).
 * Allocation failure is fatal.
 */
#ifndef CNT_SIMULATE_ENGINE_H
#define CNT_SIMULATE_ENGINE_H

#include <stddef.h>
#include <stdio.h>

#include "train/profile.h"

typedef enum sim_algo { SIM_ALGO_RING, SIM_ALGO_HIER, SIM_ALGO_CURVE } sim_algo;

typedef struct sim_cluster {
    int gpus_per_node;      /* G, at least 1 */
    double bw_gbit;         /* inter-node link, Gbit/s */
    double intra_bw_gbit;   /* intra-node link (hier), Gbit/s */
    double latency_us;      /* alpha, per message */
    double speed;           /* compute speed relative to the profile */
    int overlap;            /* 1: buckets start during backward */
    size_t first_bucket_values, bucket_values; /* 0: the profile's */
    int fp16;               /* half the bytes on the wire */
    int powersgd_rank;      /* > 0: PowerSGD at this rank (needs the profile's tensors) */
    double powersgd_ns;     /* its host arithmetic, ns per compressed gradient value */
    int powersgd_at_end;    /* 1: as with NCCL, after backward, the whole gradient as one region */
    sim_algo algo;
    int curve_ring;         /* curve mode: 1 the ring's curve, 0 MPI_Allreduce's */
    double horovod_cycle_ms; /* > 0: Horovod mode */
    double horovod_fusion_mb;
    double jitter_pct;
    int ps_servers;         /* > 0: synchronous parameter servers instead of the allreduce */
} sim_cluster;

/* One message on the network. */
typedef enum sim_msg_kind { SIM_MSG_ALLREDUCE, SIM_MSG_PUSH, SIM_MSG_PULL } sim_msg_kind;

typedef struct sim_msg {
    sim_msg_kind kind;
    int shard;                         /* push and pull: the server; PowerSGD's sums: the bucket */
    int part;                          /* PowerSGD: 1 the P sum, 2 the Q sum; else 0 */
    double ready_ms, start_ms, end_ms; /* relative to the start of backward */
    double host_before_ms, host_after_ms; /* PowerSGD's arithmetic on the thread just before start, after end */
    double bytes;
    double latency_ms;                 /* the per-message part of its time */
} sim_msg;

typedef struct sim_result {
    int workers;
    double forward_ms, backward_ms, update_ms, data_wait_ms, jitter_ms;
    double step_ms, images_per_s, efficiency;
    double comm_ms;      /* sum of the allreduce times (parameter servers: of the pushes and pulls) */
    double latency_ms;   /* the per-message part of comm_ms */
    double exposed_ms;   /* comm not hidden by backward */
    int n_msgs;
    sim_msg *msgs;       /* [n_msgs], owned: sim_result_free */
    double *layer_end_ms; /* [n_layers], backward end of each layer */
    char verdict[160];
} sim_result;

/* PowerSGD's host arithmetic by default, ns per compressed value at rank
 * r: BASE + PER_RANK x r, fitted to build/tools/bench_powersgd on the
 * development VM (ResNet-50: 1.7, 2.4 and 3.1 ns at r 1, 2 and 4; one core,
 * docs/scaling.md): sim_powersgd_ns(r), for sim_cluster.powersgd_ns in
 * tools/simulate (the trainer's dist.bucket_mb = auto times its own,
 * powersgd_time_ns). */
#define SIM_POWERSGD_NS_BASE 1.2
#define SIM_POWERSGD_NS_PER_RANK 0.5
double sim_powersgd_ns(int rank);

/* A cluster with the defaults of tools/simulate (G=1, 10 Gbit/s, 40 Gbit/s
 * intra, 5 us, speed 1, overlap on, the profile's buckets, ring). */
sim_cluster sim_cluster_default(void);
/* Moves a profile to other hardware, in this order (a value <= 0 leaves that
 * part as it is):
 *   - batch: the per-worker batch; forward and backward times (the layers'
 *     too) scale linearly with it, the update does not;
 *   - backward_ratio R: forward and backward are redistributed so that
 *     backward = R x forward, keeping their sum (the layers keep their shares
 *     of each). A CPU's backward can be 3 to 6 times its forward where a
 *     GPU's is about 2 times;
 *   - images_per_s X: every time (forward, backward, layers, update, data
 *     wait) is scaled by one factor so that one worker's step takes
 *     batch / X seconds: the device's measured single-worker speed.
 * CNT_ERR with a message when the profile has no compute to scale. */
int sim_profile_retarget(profile *p, int batch, double backward_ratio, double images_per_s);
/* One allreduce of bytes over n workers, in ms (0 when n == 1); *latency_ms
 * (when not NULL) gets its per-message part. CNT_ERR for curve mode at a world
 * size the curve was not measured at, or n not a multiple of G (hier). */
int sim_allreduce_ms(const profile *p, const sim_cluster *c, int n, double bytes, double *ms, double *latency_ms);
/* Predicts the step at n workers into *r (free with sim_result_free). */
int sim_step(const profile *p, const sim_cluster *c, int n, sim_result *r);
void sim_result_free(sim_result *r);

/* dist.bucket_mb = auto (the trainer) and tools/simulate --bucket-mb auto:
 * the size of the later buckets (the first stays c's or the profile's) that
 * sim_step predicts fastest for p on c at n workers. Tried: 1, 2, 4, 8, 16,
 * 25, 32, 64, 128, ... MiB, up to the first size that holds every gradient
 * after the first bucket (one bucket). Of the sizes whose step is within
 * SIM_BUCKET_TIE of the fastest, the largest is chosen: what the model
 * leaves out (each bucket's copies and arrival barrier, communication
 * slowing backward on shared cores) costs per bucket. */
#define SIM_BUCKET_TIE 0.01
#define SIM_BUCKET_MAX_TRIED 16
typedef struct sim_bucket_choice {
    double mb;                        /* the choice, MiB */
    size_t values;                    /* the same in gradient values */
    double step_ms;                   /* its predicted step */
    int tried;
    double tried_mb[SIM_BUCKET_MAX_TRIED], tried_step_ms[SIM_BUCKET_MAX_TRIED];
} sim_bucket_choice;
/* CNT_ERR as sim_step (a cluster it cannot model); n == 1 chooses the one
 * bucket (nothing to exchange). */
int sim_choose_bucket(const profile *p, const sim_cluster *c, int n, sim_bucket_choice *ch);
/* The choice and what it beat, for a log line: "16 MiB: predicted step 812.3
 * ms (1 MiB 901.2, 2 MiB 877.0, ..., 64 MiB 830.5)". */
void sim_bucket_choice_text(const sim_bucket_choice *ch, char *buf, size_t cap);
/* Writes r's step as a Chrome trace (the event format of dist/timeline.c:
 * forward and backward layers on the train thread, "allreduce bucket k" on
 * the comm thread). CNT_ERR with a message when the file cannot be written. */
int sim_write_trace(const profile *p, const sim_result *r, const char *path);

#endif
