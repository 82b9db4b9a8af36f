/*
 * train/bench.h - benchmark mode: the training step, timed.
 *
 *   trainer --bench MODEL CxHxW BATCH [STEPS [THREADS]] [device=D precision=P layout=L activations=A fuse=B classes=N]
 *
 * Times the step training runs (train/step.h: stager upload, forward, loss,
 * backward, loss scaling's check, update) on one batch of the synthetic data
 * set (random pixels, CLASSES classes), repeated, with every other setting at
 * its training default, so no data loading is in the way. Prints images/sec
 * and the GFLOP/s reached (training FLOPs counted as 3x the forward FLOPs:
 * forward, backward-data and backward-filter each cost about one forward),
 * and forward / backward / update times per step. On a GPU the images/sec
 * come from steps queued back to back with one wait at the end (as training
 * runs them); the per-phase times from a second pass that waits after each
 * phase, so they add up to a little more.
 */
#ifndef CNT_BENCH_H
#define CNT_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "train/config.h"

/* The command line's synopsis, for usage texts. */
#define BENCH_SYNOPSIS "--bench MODEL CxHxW BATCH [STEPS [THREADS]] [KEY=VALUE ...]"

/* The configuration `trainer --bench` times: the defaults, with model.name,
 * the synthetic data set of the given shape, classes and one batch of
 * training images, train.batch_size and train.threads (0: all cores). Never
 * fails on a shape config_parse_shape accepted. */
void bench_config(config *cfg, const char *model, int c, int h, int w, int classes, int batch_size, int threads);

typedef struct bench_result {
    double img_per_sec;
    double gflops;        /* training GFLOP/s */
    double fwd_ms, bwd_ms, update_ms; /* per step */
    uint64_t params_hash; /* hash_bytes of the parameters after the last step (tests) */
} bench_result;

/* Times `warmup` untimed and then `steps` timed training steps of cfg's model
 * on the first batch of cfg's training data and prints one summary line to
 * out. The step is built from cfg exactly as training builds it. CNT_ERR with
 * a message on an unknown model, a shape it cannot take, an unusable device. */
int bench_run(const config *cfg, int steps, int warmup, bench_result *res, FILE *out);

/* `trainer --bench-data CONFIG`: decoded and augmented training images per
 * second from the configured data set's loader (no model), with 1, 2, 4, ...
 * worker threads up to max(cores, data.workers), each for about `seconds`
 * (at most one epoch), as a table on out. CNT_ERR with a message when the data
 * cannot be loaded. */
int bench_data(const config *cfg, double seconds, FILE *out);

#endif
