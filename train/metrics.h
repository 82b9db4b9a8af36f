/*
 * train/metrics.h - the run's machine-readable record: <out_dir>/metrics.jsonl,
 * one JSON object per line.
 *
 *   {"kind":"run","model":M,"params":P,"mode":D,"ranks":R,"workers":W,"servers":K,"batch":B,
 *    "accumulate":A,"global_batch":G (B x W x A),"epochs":E,"steps_per_epoch":N,"device":V,"precision":X,"threads":T,
 *    "config_hash":"H","started":"YYYY-MM-DDTHH:MM:SSZ","host":"NAME"}
 *   {"kind":"step","epoch":E,"step":S,"time":T,"images":I,"loss":L,"lr":R,"img_per_sec":I,"step_ms":T,
 *    "data_wait_ms":W,"comm_ms":C,"comm_exposed_ms":X,"loss_scale":G,"skipped_steps":K}
 *   {"kind":"eval","epoch":E,"step":S,"time":T,"images":I,"eval_loss":L,"top1":A,"top5":B}
 *   {"kind":"epoch","epoch":E,"step":S,"time":T,"images":I,"seconds":T,"img_per_sec":I,"data_wait_ms":W,
 *    "data_wait_frac":F,"comm_ms":C,"comm_exposed_ms":X,"skipped_images":K,"skipped_eval_images":J}
 *   {"kind":"resume","step":S,"epoch":E,"epoch_samples":N,"world":W,"batch":B}
 *
 * The "run" record describes the run that follows it: the model and its
 * parameter count, mode ("allreduce", "ps-sync", "ps-async"), the job's ranks
 * and how many of them are workers and servers, the batch per worker and all
 * workers' together, the device, precision and threads per rank, a hash of
 * the effective configuration (config.ini, as in checkpoints) and when and
 * where it started. It is the file's first record; a resumed run appends its
 * own before its "resume" record.
 *
 * "time" (in every record but "run" and "resume") is seconds of training since the run began, on rank 0's clock,
 * counted from the start of the training loop (set-up excluded) and carried
 * across resumes: a resumed run goes on from the last kept record's time, so
 * time lost past the checkpoint is not counted. "images" (in step, eval and epoch
 * records) is the training images every worker has taken so far (steps times the global batch, summed
 * across resumes at any world size). Both make curves against wall time and
 * against data seen one column away (tools/plot_metrics.py).
 *
 * A resumed run continues the file: the records up to its checkpoint's step
 * S stay, those after it (what the interrupted run did past its last
 * checkpoint, and which is now redone) go, and a "resume" record says where
 * the run went on: after step S, N samples into epoch E, on W ranks of batch
 * B. Steps count the optimizer's updates since the first run, also across a
 * resume at another world size or batch, so the file holds the whole curve,
 * each step once, in order.
 *
 * Per-step times are means over the steps the record covers (train.log_every
 * of them, fewer at a checkpoint or the run's end), measured on rank 0.
 * img_per_sec counts every rank's images: world x batch x steps over the
 * wall time since the previous record, the progress line, checkpoints and
 * the other bookkeeping between steps included. step_ms is the time of the
 * steps alone, each from the request for its batch (data_wait_ms is part of
 * it) to the end of its update, so with train.log_every = 1 it is each
 * step's own time: what a median after warm-up is taken of (on a GPU the
 * host's time, which follows the device's only on average). comm_ms is the
 * time the gradient allreduce took, comm_exposed_ms the part of it backward
 * did not hide (the training thread waited); both are 0 in a world of one.
 * loss_scale is the loss scale after the step (1 without loss scaling) and
 * skipped_steps the steps skipped for inf/NaN gradients since the run began.
 * A loss that is not finite (a diverged run; every step of the window skipped
 * by loss scaling; an fp16 evaluation that overflowed) is written as null.
 *
 * `epoch` is 1-based in records (the epoch being trained or just finished),
 * `step` counts optimizer steps from 1. Every line is flushed as written, so
 * the file can be followed while a run is in progress.
 *
 * With train.tensorboard = true every record but "run" and "resume" is also
 * an event in out_dir's TensorBoard file (train/tensorboard.h), at the same
 * step, its numbers as scalars named by the record's kind and field:
 * train/loss, train/lr, train/img_per_sec, train/step_ms, train/data_wait_ms,
 * train/comm_ms, train/comm_exposed_ms, train/loss_scale, train/skipped_steps
 * (ps/push_mb, ps/pull_mb, ps/wait_ms, ps/stale_mean, ps/stale_max with
 * servers); eval/loss, eval/top1, eval/top5; epoch/seconds,
 * epoch/img_per_sec, epoch/data_wait_ms, epoch/data_wait_frac, epoch/comm_ms,
 * epoch/comm_exposed_ms, epoch/skipped_images, epoch/skipped_eval_images;
 * ps/staleness_mean, ps/staleness_max and the histogram ps/staleness. A
 * non-finite loss stays inf or NaN there. (The run's config.ini goes there
 * too, as text: progress_config.)
 */
#ifndef CNT_METRICS_H
#define CNT_METRICS_H

#include <stdio.h>

#include "train/tensorboard.h"

typedef struct metrics {
    FILE *f;
    tb_writer tb;            /* the same records as TensorBoard scalars (metrics_open_tensorboard) */
    char path[4096];
    double t_base;           /* "time" when this run's clock started: the resumed record's last */
    double t0;               /* time_now() then; 0: not started */
    double images;           /* "images" so far */
} metrics;

/* What the "run" record says. */
typedef struct metrics_run_info {
    const char *model, *mode, *device, *precision;
    long params;
    int ranks, workers, servers, batch, epochs, threads;
    int accumulate;          /* micro-batches per optimizer step (train.accumulate); 0 is read as 1 */
    long steps_per_epoch;
    unsigned long long config_hash;
} metrics_run_info;

/* Creates dir (and parents) and opens dir/metrics.jsonl.
 * until_step < 0 (a fresh run): an existing non-empty file is first renamed
 * to metrics.YYYYMMDD-HHMMSS.jsonl (its last change), so no earlier run's
 * record is lost. until_step >= 0 (a resumed run): the records whose "step"
 * is at most until_step (and any without a step) are kept, the rest move
 * to a side file, metrics.superseded-YYYYMMDD-HHMMSS.jsonl when rollback
 * (this run starts before a newer run's checkpoints), else
 * metrics.redone-YYYYMMDD-HHMMSS.jsonl (the interrupted run's steps past its
 * checkpoint, which this run does again), "-2", "-3", ... added to a name
 * taken; the file is rewritten atomically, and new records are appended.
 * What happened is logged (log_info) when anything was moved. Each
 * record is read with the one JSON parser (common/json.h): a line that is
 * not a JSON object (a record cut short by a kill, the last line without its
 * newline, is dropped instead), or whose "step" is not a whole number or
 * "time" / "images" not a number, fails with "PATH:LINE:COL: what" (PATH:LINE
 * for a record of the wrong shape) and leaves the file as it was.
 * CNT_ERR with a message naming the path on failure. */
int metrics_open(metrics *m, const char *dir, long until_step, int rollback);

/* After metrics_open (the same until_step): the TensorBoard event file in
 * dir. CNT_ERR naming the file when it cannot be written. */
int metrics_open_tensorboard(metrics *m, const char *dir, long until_step);

/* The "run" record (see above). */
int metrics_run(metrics *m, const metrics_run_info *info);
/* Training starts now: "time" counts from here (plus a resumed file's last). */
void metrics_start_clock(metrics *m);
/* n more training images (all workers'), for the next step record's "images". */
void metrics_add_images(metrics *m, double n);

/* Each record is written and flushed at once; a failed write or flush
 * (ENOSPC, EIO, EFBIG) returns CNT_ERR with a message naming the file and
 * the system's reason. With no file open (ranks other than 0) they do
 * nothing and return CNT_OK.
 * loss_scale: the loss scale after this step (1 without loss scaling);
 * skipped_steps: steps skipped for inf/NaN gradients since the run started. */
/* A step record's parameter-server fields (dist.mode = ps), per step of the
 * window, on rank 0: ps_push_mb and ps_pull_mb (its gradients out, its
 * parameters in; every worker moves as much), ps_wait_ms (from the end of
 * backward to the last parameter shard's arrival). */
typedef struct metrics_ps {
    double push_mb, pull_mb, wait_ms;
    int async;                 /* add ps_stale_mean and ps_stale_max: rank 0's gradients' staleness */
    double stale_mean, stale_max;
} metrics_ps;
/* ps: NULL in allreduce mode (no such fields). */
int metrics_step(metrics *m, int epoch, long step, double loss, double lr, double img_per_sec, double step_ms,
                 double data_wait_ms, double comm_ms, double comm_exposed_ms, double loss_scale,
                 long skipped_steps, const metrics_ps *ps);
int metrics_eval(metrics *m, int epoch, long step, double loss, double top1, double top5);
/* Asynchronous parameter servers, once an epoch: the staleness of every
 * gradient shard the servers applied in it (mean, max, count, and the
 * histogram hist[0 .. n): index i counts staleness i, the last "or more"). */
int metrics_staleness(metrics *m, int epoch, long step, double mean, double max, double applied, const double *hist,
                      int n);
/* skipped_train / skipped_eval: unreadable images left out this epoch, all ranks. */
int metrics_epoch(metrics *m, int epoch, long step, double seconds, double img_per_sec, double data_wait_ms,
                  double data_wait_frac, double comm_ms, double comm_exposed_ms, long skipped_train,
                  long skipped_eval);
int metrics_resume(metrics *m, long step, int epoch, long epoch_samples, int world, int batch);
/* Closes the files: CNT_ERR naming one whose last bytes could not be written. */
int metrics_close(metrics *m);

/* mkdir -p. CNT_ERR with a message naming the path on failure. */
int make_dirs(const char *path);

#endif
