/*
 * train/trainer.h - a whole training run from a config: data, model,
 * optimizer, the step loop, evaluation, progress lines and metrics.
 *
 * Errors a user can cause (bad model name, missing data, an input too small
 * for the model, unwritable out_dir) return CNT_ERR with a message; the caller
 * prints it and exits non-zero.
 */
#ifndef CNT_TRAINER_H
#define CNT_TRAINER_H

#include <stdio.h>
#include "train/config.h"

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
} train_result;

/* Trains as configured. res may be NULL. */
int trainer_run(const config *cfg, train_result *res);

/* Prints the model summary for cfg's model on cfg's data shape (the data set
 * is opened to learn it). */
int trainer_summary_config(const config *cfg, FILE *out);
/* Prints the summary of a zoo model at ImageNet shape with 1000 classes. */
int trainer_summary_model(const char *name, FILE *out);

#endif
