/*
 * train/metrics.h - the run's machine-readable record: <out_dir>/metrics.jsonl,
 * one JSON object per line.
 *
 *   {"kind":"step","epoch":E,"step":S,"loss":L,"lr":R,"img_per_sec":I,"data_wait_ms":W,
 *    "comm_ms":C,"comm_exposed_ms":X,"loss_scale":G,"skipped_steps":K}
 *   {"kind":"eval","epoch":E,"step":S,"eval_loss":L,"top1":A,"top5":B}
 *   {"kind":"epoch","epoch":E,"seconds":T,"img_per_sec":I,"data_wait_ms":W,"data_wait_frac":F,
 *    "comm_ms":C,"comm_exposed_ms":X}
 *
 * Per-step times are means over the steps the record covers. comm_ms is the
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
 */
#ifndef CNT_METRICS_H
#define CNT_METRICS_H

#include <stdio.h>

typedef struct metrics {
    FILE *f;
} metrics;

/* Creates dir (and parents) and opens dir/metrics.jsonl, truncating it.
 * CNT_ERR with a message naming the path on failure. */
int metrics_open(metrics *m, const char *dir);
/* loss_scale: the loss scale after this step (1 without loss scaling);
 * skipped_steps: steps skipped for inf/NaN gradients since the run started. */
void metrics_step(metrics *m, int epoch, long step, double loss, double lr, double img_per_sec,
                  double data_wait_ms, double comm_ms, double comm_exposed_ms, double loss_scale,
                  long skipped_steps);
void metrics_eval(metrics *m, int epoch, long step, double loss, double top1, double top5);
/* skipped_train / skipped_eval: unreadable images left out this epoch, all ranks. */
void metrics_epoch(metrics *m, int epoch, double seconds, double img_per_sec, double data_wait_ms,
                   double data_wait_frac, double comm_ms, double comm_exposed_ms, long skipped_train,
                   long skipped_eval);
void metrics_close(metrics *m);

/* mkdir -p. CNT_ERR with a message naming the path on failure. */
int make_dirs(const char *path);

#endif
