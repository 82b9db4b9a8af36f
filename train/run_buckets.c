/*
 * train/run_buckets.c - dist.bucket_mb = auto: the size of the gradient
 * buckets, chosen at start-up by the step simulator (train/sim.h) from a
 * profile of this model's layers and the allreduce timed on this job's own
 * ranks and transport, through host memory or NCCL (docs/data-parallel.md,
 * "Buckets sized to the network").
 *
 * Rank 0 takes the profile from dist.bucket_profile or
 * train.emulate_compute, or measures one (`trainer --profile`'s steps, in
 * memory) before the model is built, so the two never hold memory at once.
 * Every rank then times the allreduce (a collective: the curve is the
 * slowest rank's) and, with PowerSGD through host memory, its arithmetic;
 * rank 0 simulates each candidate size and broadcasts its choice, so every
 * rank cuts the same buckets.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "dist/powersgd.h"
#include "train/profile.h"
#include "train/run.h"
#include "train/sim.h"

/* The curve's points: 64 KiB to 64 MiB by fours; the simulator extends its
 * last segment (bandwidth-bound, linear in bytes) to larger buckets. */
#define CURVE_MIN_BYTES ((size_t)64 << 10)
#define CURVE_MAX_BYTES ((size_t)64 << 20)
#define CURVE_POINTS 6
#define CURVE_REPS 2
/* A measured profile: timed steps after untimed ones (medians). */
#define PROFILE_STEPS 3
#define PROFILE_WARMUP 2
/* PowerSGD's host arithmetic, timed on a copy of the model's compressed
 * tensors cut to about this many values (32 MiB of gradients and as much
 * error: beyond the caches, as the whole gradient is), the fastest of 2. */
#define PSGD_TIME_VALUES ((size_t)8 << 20)
#define PSGD_TIME_REPS 2

/* The profile file auto reads: dist.bucket_profile, else train.emulate_compute's ("": none, measure). */
static const char *profile_file(const config *cfg) {
    return cfg->bucket_profile[0] ? cfg->bucket_profile : cfg->emulate_compute;
}

int run_bucket_profile(run *r) {
    const config *cfg = r->cfg;
    const char *via;
    if (r->rank != 0 || cfg->bucket_mb != 0.0f || !exchange_sized_allreduce(r->x, &via)) return CNT_OK;
    r->bucket_prof = cnt_calloc(1, sizeof *r->bucket_prof);
    const char *path = profile_file(cfg);
    if (path[0]) {
        if (profile_load(path, r->bucket_prof) != CNT_OK) return cnt_err_prefix("dist.bucket_mb = auto");
        snprintf(r->bucket_prof_from, sizeof r->bucket_prof_from, "%s's layers", path);
        return CNT_OK;
    }
    /* no file: this config's step on this rank alone, as --profile times it */
    dist_phase("start-up: dist.bucket_mb = auto, profiling the step on rank 0");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_ERRNO(f != NULL, "open_memstream");
    double t0 = time_now();
    int rc = profile_run_data(cfg, &r->data, PROFILE_STEPS, PROFILE_WARMUP, f); /* r->data: loaded already */
    CHECK_ERRNO(fclose(f) == 0, "fclose (memory stream)");
    if (rc == CNT_OK) rc = profile_parse(text, len, "the start-up profile", r->bucket_prof);
    free(text);
    if (rc != CNT_OK) return cnt_err_prefix("dist.bucket_mb = auto, profiling the step on rank 0");
    snprintf(r->bucket_prof_from, sizeof r->bucket_prof_from,
             "the layers of %d steps profiled on rank 0 at start-up in %.1f s", PROFILE_STEPS, time_now() - t0);
    return CNT_OK;
}

/* What rank 0 sends every rank: the choice, or that it failed. */
typedef struct bucket_choice_msg {
    int ok;
    double mb;
    uint64_t values;
} bucket_choice_msg;

/* Rank 0: its profile (run_bucket_profile), moved to this run's batch, with
 * the measured curve; the simulator's choice into *msg and the log line. */
static int choose_on_rank0(const run *r, const char *via, const double *bytes, const double *us, double psgd_ns,
                           bucket_choice_msg *msg) {
    const config *cfg = r->cfg;
    profile *p = r->bucket_prof;
    CNT_ASSERT(p); /* run_bucket_profile, on rank 0 */
    if (p->params != r->nt->n_params)
        return cnt_err_set("dist.bucket_mb = auto: the profile %s is of a model with %zu parameters (%s); this run's "
                           "%s has %zu: profile this config (./trainer --profile)",
                           profile_file(cfg), p->params, p->model, cfg->model_name, r->nt->n_params);
    int profiled_batch = p->batch;
    if (p->batch != cfg->batch_size && sim_profile_retarget(p, cfg->batch_size, 0, 0) != CNT_OK)
        return cnt_err_prefix("dist.bucket_mb = auto: %s", r->bucket_prof_from);
    /* the curve as measured here, in the profile's ring slot, which curve mode reads with curve_ring */
    profile_curve *cv = &p->curve_ring;
    free(cv->bytes);
    free(cv->us);
    p->curve_world = r->world;
    cv->n = CURVE_POINTS;
    cv->bytes = cnt_malloc(CURVE_POINTS * sizeof(double));
    cv->us = cnt_malloc(CURVE_POINTS * sizeof(double));
    memcpy(cv->bytes, bytes, CURVE_POINTS * sizeof(double));
    memcpy(cv->us, us, CURVE_POINTS * sizeof(double));
    sim_cluster c = sim_cluster_default();
    c.algo = SIM_ALGO_CURVE;
    c.curve_ring = 1;
    c.overlap = cfg->overlap;
    c.fp16 = cfg->compress == REDUCER_COMPRESS_FP16;
    /* the buckets of the compressed steps, most of a run's; with NCCL those
     * steps compress the whole gradient after backward, in no bucket, so
     * the buckets are the uncompressed steps' */
    char psgd[160] = "";
    if (psgd_ns > 0) {
        c.powersgd_rank = cfg->powersgd_rank;
        c.powersgd_ns = psgd_ns;
        int threads = exchange_powersgd_threads(r->x);
        snprintf(psgd, sizeof psgd, ", and PowerSGD's arithmetic at %.2f ns a compressed value on %d thread%s", psgd_ns,
                 threads, threads == 1 ? "" : "s");
    }
    c.first_bucket_values = config_reducer_opts(cfg).first_bucket;
    sim_bucket_choice ch;
    if (sim_choose_bucket(p, &c, r->world, &ch) != CNT_OK) return cnt_err_prefix("dist.bucket_mb = auto");
    char why[1024], curve[256];
    sim_bucket_choice_text(&ch, why, sizeof why);
    size_t len = 0;
    for (int k = 0; k < CURVE_POINTS && len < sizeof curve; k++)
        len += (size_t)snprintf(curve + len, sizeof curve - len, "%s%g MiB %.2f ms", k ? ", " : "",
                                bytes[k] / 1048576.0, us[k] / 1e3);
    log_info("dist.bucket_mb = auto: %s; from %s (batch %d, run at %d) and %s timed over these %d ranks at "
             "start-up (%s)%s",
             why, r->bucket_prof_from, profiled_batch, cfg->batch_size, via, r->world, curve, psgd);
    *msg = (bucket_choice_msg){.ok = 1, .mb = ch.mb, .values = ch.values};
    return CNT_OK;
}

/* dist.compress = powersgd through host memory: its arithmetic's time on
 * this job, ns per compressed value, the slowest rank's (every rank times
 * its own, at its dist.powersgd_threads; a collective); 0 where the
 * compressed steps have none on the host (another mode; NCCL's ranks
 * compress after backward, in no bucket). What the simulator charges
 * each compressed bucket besides its two sums. */
static double psgd_time_ns(run *r) {
    int threads = exchange_powersgd_threads(r->x);
    if (threads == 0) return 0;
    dist_phase("start-up: dist.bucket_mb = auto, timing PowerSGD's arithmetic");
    powersgd_tensor *t = powersgd_net_tensors(r->nt);
    double ns = powersgd_time_ns(t, r->nt->n_param_tensors, r->cfg->powersgd_rank, threads, PSGD_TIME_VALUES,
                                 PSGD_TIME_REPS);
    free(t);
    /* a million values' time in seconds, so that the slowest keeps ns's
     * fractions: dist_slowest_us counts whole nanoseconds */
    return dist_slowest_us(ns * 1e-3) * 1e-3;
}

int run_choose_buckets(run *r) {
    const char *via;
    if (!exchange_sized_allreduce(r->x, &via)) {
        if (r->rank == 0)
            log_info("dist.bucket_mb = auto: no allreduce here (one rank); buckets of %g MiB", CONFIG_BUCKET_MB_DEFAULT);
        return CNT_OK;
    }
    dist_phase("start-up: dist.bucket_mb = auto, timing the allreduce");
    double bytes[CURVE_POINTS], us[CURVE_POINTS];
    for (int k = 0; k < CURVE_POINTS; k++) {
        bytes[k] = (double)(CURVE_MIN_BYTES << (2 * k));
        us[k] = exchange_allreduce_time_us(r->x, (size_t)bytes[k], CURVE_REPS);
    }
    CNT_ASSERT(bytes[CURVE_POINTS - 1] == (double)CURVE_MAX_BYTES);
    double psgd_ns = psgd_time_ns(r);
    bucket_choice_msg msg = {0};
    int status = r->rank == 0 ? choose_on_rank0(r, via, bytes, us, psgd_ns, &msg) : CNT_OK;
    dist_phase("start-up: dist.bucket_mb = auto, the choice");
    dist_broadcast(&msg, sizeof msg, 0);
    if (r->bucket_prof) {
        profile_free(r->bucket_prof);
        free(r->bucket_prof);
        r->bucket_prof = NULL;
    }
    if (status != CNT_OK) return CNT_ERR;
    if (!msg.ok) return cnt_err_set("dist.bucket_mb = auto: rank 0 could not choose (its message says why)");
    exchange_set_bucket(r->x, (size_t)msg.values, msg.mb);
    return CNT_OK;
}
