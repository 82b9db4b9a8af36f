/*
 * train/bench.h - benchmark mode: training throughput of a zoo model on
 * random data, without a data set or loader in the way.
 *
 *   trainer --bench MODEL CxHxW BATCH [STEPS [THREADS]] [device=D] [precision=P] [layout=L] [classes=N]
 *
 * Prints images/sec and the GFLOP/s reached (training FLOPs counted as 3x the
 * forward FLOPs: forward, backward-data and backward-filter each cost about
 * one forward), and forward / backward / update times per step. On a GPU the
 * images/sec come from steps queued back to back with one wait at the end (as
 * training runs them); the per-phase times from a second pass that waits after
 * each phase, so they add up to a little more.
 */
#ifndef CNT_BENCH_H
#define CNT_BENCH_H

#include <stdio.h>

#include "train/config.h"

typedef struct bench_options {
    const char *model;
    int c, h, w;
    int classes;
    int batch;
    int steps;     /* timed steps, after warm-up */
    int warmup;    /* untimed steps */
    int threads;   /* 0: all cores */
    backend_device device;
    backend_math precision;
    backend_layout layout; /* auto: as train.layout = auto */
} bench_options;

typedef struct bench_result {
    double img_per_sec;
    double gflops;        /* training GFLOP/s */
    double fwd_ms, bwd_ms, update_ms; /* per step */
} bench_result;

/* Runs the benchmark and prints one summary line to out. CNT_ERR with a
 * message on an unknown model, bad shape or device. */
int bench_run(const bench_options *opt, bench_result *res, FILE *out);

/* `trainer --bench-data CONFIG`: decoded and augmented training images per
 * second from the configured data set's loader (no model), with 1, 2, 4, ...
 * worker threads up to max(cores, data.workers), each for about `seconds`
 * (at most one epoch), as a table on out. CNT_ERR with a message when the data
 * cannot be loaded. */
int bench_data(const config *cfg, double seconds, FILE *out);

#endif
