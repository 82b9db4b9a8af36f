/*
 * train/progress.h - what a run tells: the progress line every
 * train.log_every steps, the epoch summary after each evaluation, their
 * records in <out_dir>/metrics.jsonl (train/metrics.h), and the run's result.
 *
 * One object holds every counter: the window since the last progress line
 * and the current epoch (steps, images, data wait, communication), the loss
 * accumulated on the device, and the numbers the run returns.
 *
 * Collectives: progress_log and progress_epoch_end take part in allreduces
 * over every rank (the mean loss, skipped images), so every rank calls them
 * at the same steps. Only rank 0 prints progress lines and writes the file.
 */
#ifndef CNT_PROGRESS_H
#define CNT_PROGRESS_H

#include "model/backend.h"
#include "train/loss_scale.h"
#include "train/step.h"

typedef struct progress progress;

typedef struct progress_opts {
    const backend *be;       /* where the step's loss lives */
    const char *out_dir;     /* metrics.jsonl goes here (rank 0) */
    int world;
    int batch;               /* samples per step on each rank */
    int epochs;              /* train.epochs */
    long total_steps;        /* the step the run stops at */
    exchange_traits xt;      /* what the exchange reports (dist/exchange.h): reduced gradients show their
                              * communication; servers their traffic and wait instead, and where
                              * asynchronous the staleness of rank 0's gradients (the ranks do not
                              * meet: rank 0's loss alone) */
    int fp16;                /* train.precision = fp16: the hint for inf/NaN logits */
    double wait_warn;        /* data.wait_warn: the share of a window's time waiting for batches that is
                              * warned about (once an epoch; 0: never) */
    int workers;             /* data.workers, named by that warning */
    int tensorboard;         /* train.tensorboard: the records as TensorBoard events too */
} progress_opts;

/* The result of a whole run (trainer_run). */
typedef struct train_result {
    long steps;             /* optimizer steps taken */
    int epochs;             /* epochs started */
    double first_loss;      /* training loss of the first step */
    double last_loss;       /* mean training loss over the last logging interval */
    double eval_loss;       /* last evaluation */
    double top1, top5;      /* last evaluation, fractions in [0, 1] */
    double seconds;         /* wall time of the training loop */
    double img_per_sec;     /* training throughput over the whole run */
    double loss_scale;      /* the loss scale at the end (1 without loss scaling) */
    long skipped_steps;     /* steps skipped for inf/NaN gradients (loss scaling) */
    int stop_signal;        /* the signal that stopped the run at a step boundary (train/stop.h), 0: none */
} train_result;

/* An evaluation over the whole test set (train/eval.h). */
typedef struct eval_result {
    double loss, top1, top5; /* mean loss; top-1 and top-5 fractions */
    long images;             /* test samples scored, every rank's */
    long nonfinite;          /* samples with an inf or NaN logit (counted as wrong) */
    int stopped;             /* a stop signal ended the evaluation early: no scores (train/eval.h) */
} eval_result;

/* progress_log's result when the mean loss is not finite. */
enum { PROGRESS_DIVERGED = 1 };

progress *progress_create(const progress_opts *o);
void progress_free(progress *p);

/* Rank 0 creates out_dir and opens metrics.jsonl (train/metrics.h
 * metrics_open: until_step < 0 for a fresh run, else the step of the
 * checkpoint the run resumed from; rollback: it starts before a newer run's
 * checkpoints), and with opts.tensorboard a TensorBoard
 * event file (train/tensorboard.h). CNT_ERR with a message naming the path
 * when rank 0 cannot write there. Other ranks: CNT_OK, nothing done. */
int progress_open(progress *p, long until_step, int rollback);
/* Rank 0, with opts.tensorboard: the effective configuration (config.ini's
 * text) as TensorBoard text "config" at step, shown verbatim in the Text
 * tab beside the curves. CNT_ERR when it cannot be written. */
int progress_config(progress *p, long step, const char *ini);
/* The "resume" record (rank 0). CNT_ERR when it cannot be written. */
int progress_resumed(progress *p, long step, int epoch, long epoch_samples, int world, int batch_size);

/* Training starts (the clock too) after first_step steps done before this
 * run, skipped_before of them skipped by loss scaling (a resumed run's); it
 * stops at step total_steps. */
void progress_start(progress *p, long first_step, long skipped_before, long total_steps);

/* A new epoch (0-based) starts. */
void progress_epoch_begin(progress *p, int epoch);
/* Step `step` (from 1) took r and n images after waiting data_wait_s for
 * its batch, step_s seconds in all from asking for its batch to the end of
 * its update (the wait included); loss is the step's device loss (counted
 * when r->loss_counts). */
void progress_step(progress *p, long step, const step_result *r, const float *loss, int n, double data_wait_s,
                   double step_s);
/* After step `step`: the progress line and its record (a collective: the
 * mean loss over every rank's counted steps). PROGRESS_DIVERGED when the
 * mean loss is not finite: "training diverged" was said, and the run should
 * evaluate and end. CNT_ERR (rank 0) when the record could not be written:
 * the run must end with that error. */
int progress_log(progress *p, long step, double lr, const loss_scaler *ls);
/* Steps taken in the current epoch so far. */
long progress_epoch_steps(const progress *p);
/* Rank 0, after a step that progress_log does not log: when it is this
 * run's first (a fresh or a resumed run), one line that training has begun
 * and how long the step took, so that a large train.log_every leaves no
 * long silence at the start. No record, no collective. */
void progress_first_step(progress *p, long step, double step_s, int log_every);
/* The epoch's training is over: its time stops here (before the evaluation). */
void progress_epoch_trained(progress *p);
/* The epoch's summary: unreadable images (a collective: summed over ranks),
 * the summary and communication lines, the epoch and eval records. er NULL:
 * the epoch was not evaluated, for the reason no_eval says ("emulated
 * compute"): no scores, no eval record. An epoch of no steps here (its
 * steps were trained before a resume, which then evaluates it) writes the
 * eval record alone: the run that trained it wrote its epoch record.
 * CNT_ERR (rank 0) when a record could not be written. */
int progress_epoch_end(progress *p, const eval_result *er, const char *no_eval, long skipped_train,
                       long skipped_eval);
/* Closes metrics.jsonl, then the last line ("finished: ...", "stopped
 * (<stopped>) after ..." when the run was stopped early on purpose, or, when
 * status is not CNT_OK, "stopped after ...; <saved>", saved saying what the
 * run can resume from, NULL: "no checkpoint written") and the run's result;
 * status becomes CNT_ERR when the last logged loss was not finite, or the
 * file's last bytes or a log line could not be written. Returns the status. */
int progress_finish(progress *p, int status, long steps, const loss_scaler *ls, const char *stopped,
                    const char *saved, train_result *res);

/* The run's metrics file (records a caller adds itself: the staleness). */
struct metrics *progress_metrics(progress *p);

#endif
