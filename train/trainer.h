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

/* --eval: scores the weights at `weights` on cfg's test set, as a training
 * run's evaluation does (every rank its shard; the same transform, batch
 * size, device and precision): a cnntrain checkpoint, or a safetensors file
 * with torchvision's names (a file whose name ends in .safetensors), read
 * by rank 0 and broadcast. Every parameter and batch-norm statistic must
 * come from the file: a checkpoint of another model or a file of another
 * class count is refused, named. Writes nothing (train.out_dir is not
 * used), so it may run beside the run whose checkpoints it scores. On every
 * rank, which all call it; er->stopped set when a stop signal cut it short.
 * `skipped`: this rank's unreadable test images. */
int trainer_eval(const config *cfg, const char *weights, eval_result *er, long *skipped);

/* Prints the model summary for cfg's model on cfg's data shape (the data set
 * is opened to learn it). */
int trainer_summary_config(const config *cfg, FILE *out);
/* Prints the summary of a zoo model at ImageNet shape with 1000 classes. */
int trainer_summary_model(const char *name, FILE *out);

#endif
