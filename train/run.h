/*
 * train/run.h - the pieces of one worker's training run, shared by the files
 * that make it (train/ only):
 *
 *   train/trainer.c    trainer_run: the run's steps, epochs, end and teardown
 *   train/run_setup.c  set-up: device, threads, layout, data, model, the
 *                      exchange, the stepper, the timeline, the opening lines
 *   train/run_files.c  files in train.out_dir: the lock, config.ini, the run
 *                      record, where a resume reads from
 *   train/run_agree.c  agreement across ranks: the config, identical
 *                      parameters
 *   train/run_ckpt.c   checkpoints: resume and save
 *   train/run_buckets.c  dist.bucket_mb = auto: the buckets' size, chosen
 *                      by the step simulator at start-up
 *
 * A parameter-server rank runs none of this: train/ps_server.c.
 */
#ifndef CNT_RUN_H
#define CNT_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "data/loader.h"
#include "dist/exchange.h"
#include "dist/timeline.h"
#include "model/net.h"
#include "train/config.h"
#include "train/emulate.h"
#include "train/input.h"
#include "train/optim.h"
#include "train/progress.h"
#include "train/state.h"
#include "train/step.h"

/* The pieces of one run. run_free frees whichever exist. */
typedef struct run {
    const config *cfg;
    int rank, world;         /* among the workers */
    const backend *be;
    exchange *x;             /* how gradients become the next parameters (dist/exchange.h) */
    input_data data;
    net *nt;
    loader *train_ld, *test_ld;
    progress *pg;            /* exists from the moment metrics.jsonl is open */
    timeline *tl;            /* NULL unless dist.timeline */
    stepper st;
    schedule sched;
    host_state peers;        /* world > 1: parameters for the ranks' comparison, buffers for rank 0's */
    long steps_per_epoch, total_steps; /* optimizer steps, each of train.accumulate loader batches */
    long step;               /* optimizer steps taken, a resumed run's included */
    int plans_shared;        /* rank 0's convolution plans went to every rank (train/plans.h) */
    long first_step;         /* r->step when this run's training began (a resume's is not 0) */
    int start_epoch;
    long first_epoch_step;   /* where start_epoch begins: a resume inside an epoch */
    int epoch;               /* the current epoch, 0-based */
    long epoch_step;         /* steps of the current epoch done */
    int save_at_epoch_end;   /* end_epoch writes a checkpoint (decided at the epoch's last step) */
    int stopped;             /* the stop signal the ranks agreed on, 0: none */
    int stopped_in_eval;     /* it came during an evaluation, which was left unfinished */
    int stopped_at_start;    /* it came during start-up: no step was taken */
    int eval_first;          /* resumed from a checkpoint a stop wrote in start_epoch's evaluation: its steps
                              * are done, the evaluation and the epoch's end come first */
    int lock_fd;             /* rank 0: train.out_dir/.lock, held (flock) while the run lives; -1: none */
    char lock_file[CONFIG_STR + 16]; /* rank 0: train.out_dir/.lock.run where the lock is a file; "": none */
    int diverged;
    double best_top1;        /* rank 0, checkpoint.keep_best: the best test top-1 kept so far; -1: none */
    emulation emu;           /* train.emulate_compute: the profile's times; n_nodes 0: real compute */
    struct profile *bucket_prof; /* rank 0, dist.bucket_mb = auto: its profile until chosen; else NULL */
    char bucket_prof_from[CONFIG_STR + 64]; /* where that profile came from, for the log */
    double next_wait_s;      /* the loader wait of the batch prefetched for the next micro-batch */
    int micro;               /* the micro-batch of the current step being stepped (0 without accumulation) */
} run;

/* Global samples per optimizer step: all ranks' batches, all micro-batches. */
static inline long run_samples_per_step(const run *r) {
    return (long)r->cfg->batch_size * r->world * r->cfg->accumulate;
}

/* ---- train/run_setup.c ---- */
/* train.device: this rank's backend (a GPU: local rank % the node's GPUs),
 * its threads set and its precision, activations and convolution API
 * checked, said in the log (rank 0 says every rank's: a collective). NULL
 * with a message naming the key. */
const backend *run_choose_device(const config *cfg);
/* Everything the steps need, in the order the ranks must meet: the device,
 * the transport, the data, the memory check, the model on rank 0's
 * weights, the loaders, progress, the exchange's binding, the timeline, the
 * stepper; then the opening lines. CNT_ERR with a message naming the key. */
int run_setup(run *r);
/* dist.bucket_mb = auto (train/run_buckets.c), before the exchange is
 * attached: times the allreduce on every rank, rank 0 chooses the buckets'
 * size from dist.bucket_profile and logs why, every rank takes it. A
 * collective. CNT_ERR with a message naming the key and the file. */
int run_choose_buckets(run *r);
/* Before the model is built, on rank 0 with dist.bucket_mb = auto and an
 * allreduce to size: r->bucket_prof from dist.bucket_profile or
 * train.emulate_compute, or measured (profile_run of cfg, in memory). A
 * no-op elsewhere. CNT_ERR with a message naming the key (the job ends). */
int run_bucket_profile(run *r);
/* The model of cfg on c x h x w images of `classes` classes, for batches up
 * to max_batch, in train.layout's choice for be; NULL with a message. */
net *run_build_model(const backend *be, const config *cfg, int c, int h, int w, int classes, int max_batch);

/* ---- train/run_files.c ---- */
/* A path from the config (checkpoint.dir, dist.timeline), resolved inside
 * train.out_dir when relative. */
void run_path_in_out_dir(const config *cfg, const char *path, char *out, size_t len);
/* dist.timeline's part for job rank `rank` (<trace>.rank<R>.part, the
 * trace resolved in train.out_dir), its directory made: CNT_ERR naming
 * dist.timeline when it cannot be. */
int run_timeline_part(const config *cfg, int rank, char *part, size_t len);
/* The checkpoint checkpoint.resume asks for: 1 with its path in path (auto:
 * the newest in checkpoint.dir), 0 for none. `say`: tell when auto finds no
 * checkpoint. */
int run_resume_path(const config *cfg, char *path, size_t len, int say);
/* Job rank 0, before anything is written in train.out_dir (trainer_run):
 * train.out_dir/.lock, held while the process lives (r->lock_fd).
 * CNT_ERR naming the directory and the owner when another run holds it. */
int run_lock_out_dir(run *r);
/* Releases it (the lock file removed). */
void run_unlock_out_dir(run *r);
/* Rank 0: config.ini holding text (len bytes, run_config_text's), keeping
 * an earlier run's that differs. */
int run_write_config_ini(const config *cfg, const char *text, size_t len);
/* metrics.jsonl's "run" record (rank 0). */
int run_write_record(run *r);
/* Rank 0: what a resume would start from, kept as the process's last words. */
void run_set_last_checkpoint(const char *path, long step);
/* Rank 0, checkpoint.keep_best: the checkpoint run_save_checkpoint wrote
 * after `epochs_done` epochs becomes best.cnt, er its scores
 * (ckpt_best_keep). A failure is a warning (the run goes on; the epoch's
 * checkpoint is written), and the best is not moved. */
void run_keep_best(run *r, int epochs_done, const eval_result *er);

/* ---- train/run_agree.c ---- */
/* The effective config as written to config.ini, plus the model's parameter
 * count when not 0. Caller frees. */
char *run_config_text(const config *cfg, size_t n_params, size_t *len);
/* Hash of the effective configuration, stored in checkpoints. */
uint64_t run_config_hash(const config *cfg);
/* Every rank runs the same configuration and model (n_params; 0 before the
 * model exists): CNT_ERR after the differing ranks said what differs. A
 * collective. */
int run_check_same_config(const config *cfg, size_t n_params);
/* After an epoch, several ranks: their parameters are bit-identical; CNT_ERR
 * naming the first rank that differs. host: n_params floats of scratch. A
 * collective. */
int run_check_params_identical(const net *nt, float *host);

/* ---- train/run_ckpt.c ---- */
/* checkpoint.resume and train.out_dir's files before the first step (rank 0
 * locks the directory, reads and validates the checkpoint; every rank gets
 * its state and position; checkpoints beyond it moved aside; metrics.jsonl
 * and config.ini). CNT_ERR with a message. */
int run_resume(run *r);
/* Every rank at the same point (a collective with dist.compress =
 * powersgd, whose errors it sums); rank 0 writes the checkpoint of the
 * state after `epochs_done` complete epochs and `epoch_samples` samples (all
 * ranks') of the next, the others return CNT_OK. */
int run_save_checkpoint(run *r, int epochs_done, long epoch_samples);

#endif
