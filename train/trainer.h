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
#include "train/progress.h" /* train_result */

/* Trains as configured: on every rank of the job, which all call it. res
 * (may be NULL) receives the run's result once training has started (also
 * when it stopped early); a failure during setup leaves it untouched. */
int trainer_run(const config *cfg, train_result *res);

/* Prints the model summary for cfg's model on cfg's data shape (the data set
 * is opened to learn it). */
int trainer_summary_config(const config *cfg, FILE *out);
/* Prints the summary of a zoo model at ImageNet shape with 1000 classes. */
int trainer_summary_model(const char *name, FILE *out);

#endif
