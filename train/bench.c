/*
 * train/bench.c - the training step, timed (`trainer --bench`), and the data
 * loader alone (`trainer --bench-data`).
 */
#include "train/bench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/cpus.h"
#include "common/hash.h"
#include "common/timer.h"
#include "data/loader.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/input.h"
#include "train/state.h"
#include "train/step.h"

void bench_config(config *cfg, const char *model, int c, int h, int w, int classes, int batch_size, int threads) {
    config_defaults(cfg);
    snprintf(cfg->model_name, sizeof cfg->model_name, "%s", model);
    cfg->data_kind = DATA_KIND_SYNTHETIC;
    snprintf(cfg->synthetic_shape, sizeof cfg->synthetic_shape, "%dx%dx%d", c, h, w);
    cfg->synthetic_classes = classes;
    cfg->synthetic_train = batch_size;
    cfg->synthetic_test = 1;
    cfg->batch_size = batch_size;
    cfg->threads = threads;
}

/* The net as training builds it: cfg's model and options on backend be, its
 * parameters initialised from train.seed. */
static net *bench_model(const backend *be, const config *cfg, const dataset *d) {
    zoo_options zo = config_zoo_options(cfg, be);
    net *nt = zoo_create(be, cfg->model_name, &zo, d->c, d->h, d->w, d->classes,
                         backend_layout_choose(cfg->layout, be, cfg->precision, d->h, d->w), cfg->batch_size);
    if (nt) net_init_params(nt, cfg->seed);
    return nt;
}

/* The first batch of cfg's training data, copied: the one every step takes. */
static int first_batch(const config *cfg, input_data *d, batch *b) {
    if (input_load(cfg, d) != CNT_OK) return CNT_ERR;
    loader_options lo, eo;
    input_loader_options(cfg, d, NULL, 0, 1, &lo, &eo);
    lo.u8 = 0; /* the step times compute on one batch of floats, kept */
    loader *ld = loader_create(&d->train, &lo);
    if (!ld) return CNT_ERR;
    loader_start_epoch(ld, 0);
    const batch *first = loader_next(ld);
    if (!first) {
        loader_free(ld);
        return cnt_err_set("--bench: no training batch in the data set");
    }
    size_t x_bytes = (size_t)first->n * d->train.c * d->train.h * d->train.w * sizeof(float);
    b->n = first->n;
    b->x = cnt_malloc(x_bytes);
    b->labels = cnt_malloc((size_t)first->n * sizeof(int32_t));
    memcpy(b->x, first->x, x_bytes);
    memcpy(b->labels, first->labels, (size_t)first->n * sizeof(int32_t));
    loader_free(ld);
    return CNT_OK;
}

/* `steps` steps; with sync_phases the phase times are the device's. */
static void time_steps(stepper *s, const batch *b, long *step, double lr, int steps, double *fwd, double *bwd,
                       double *upd) {
    for (int i = 0; i < steps; i++) {
        step_result r;
        /* A benchmark step is never refused: the loss scale only shrinks on
         * overflow, and thirty in a row would need a diverging net. */
        if (stepper_run(s, b, ++*step, lr, &r) != CNT_OK) cnt_fatal("--bench: %s", cnt_err_msg());
        *fwd += r.forward_s;
        *bwd += r.backward_s + r.comm_wait_s;
        *upd += r.update_s;
    }
}

int bench_run(const config *cfg, int steps, int warmup, bench_result *res, FILE *out) {
    if (cfg->batch_size < 1 || steps < 1) return cnt_err_set("batch and steps must be at least 1");
    const backend *be = backend_get(cfg->device);
    if (!be) return CNT_ERR;
    if (backend_layout_check(cfg->layout, be) != CNT_OK) return CNT_ERR;
    if (backend_math_check(be, cfg->precision) != CNT_OK) return CNT_ERR;
    if (backend_act_check(be, config_activations(cfg, be)) != CNT_OK) return CNT_ERR;
    be->set_threads(cfg->threads);
    input_data d;
    batch b = {0};
    if (first_batch(cfg, &d, &b) != CNT_OK) {
        input_free(&d);
        return CNT_ERR;
    }
    net *nt = bench_model(be, cfg, &d.train);
    if (!nt) {
        input_free(&d);
        free(b.x);
        free(b.labels);
        return CNT_ERR;
    }
    /* The step exactly as training builds it (one rank). */
    optim_opts oo = config_optim_opts(cfg);
    loss_scale_opts lso = config_loss_scale_opts(cfg);
    step_opts so = config_step_opts(cfg);
    stepper s;
    stepper_init(&s, nt, exchange_none(), NULL, &oo, &lso, &so, cfg->batch_size, d.train.c, d.train.h * d.train.w, 0);
    schedule sched = config_schedule(cfg, 1, 1);
    double lr = schedule_lr(&sched, 0);

    /* Pass 1: warm-up (cuDNN chooses its algorithms there), then steps queued
     * back to back: the throughput. On the CPU every op has finished when it
     * returns, so the phase times of this pass are exact too. */
    long step = 0;
    double fwd = 0, bwd = 0, upd = 0;
    /* a recorded step (train.cuda_graph): the eager steps and a recording on
     * each of the stager's two slots before the clock starts, so that every
     * timed step is a launch, as in training */
    if (s.graph_on && warmup < STEP_GRAPH_WARM + 2) warmup = STEP_GRAPH_WARM + 2;
    time_steps(&s, &b, &step, lr, warmup, &fwd, &bwd, &upd);
    be->sync();
    double total = time_now();
    fwd = bwd = upd = 0;
    time_steps(&s, &b, &step, lr, steps, &fwd, &bwd, &upd);
    be->sync();
    total = time_now() - total;
    /* Pass 2, GPU only: the same steps with a wait after each phase, for the
     * phase times (pass 1's host times were only the time to queue). */
    int gpu = !be->is_cpu;
    if (gpu) {
        fwd = bwd = upd = 0;
        s.o.sync_phases = 1;
        time_steps(&s, &b, &step, lr, steps, &fwd, &bwd, &upd);
    }
    char threads[16];
    if (cfg->threads > 0) snprintf(threads, sizeof threads, "%d", cfg->threads);
    else snprintf(threads, sizeof threads, "all");
    /* the math a run used: tf32 is fp32 on the CPU; bf16 and fp16 are emulated there */
    char prec_note[192] = "";
    if (cfg->precision != BACKEND_MATH_FP32 && (gpu || cfg->precision != BACKEND_MATH_TF32))
        snprintf(prec_note, sizeof prec_note, " (%s%s, %s activations)", config_name(cfg, &cfg->precision),
                 gpu ? "" : ", emulated", backend_dtype_name(nt->ctx.act));
    /* NHWC on the CPU is NCHW with transposes around each op */
    if (nt->ctx.layout == BACKEND_LAYOUT_BLOCKED)
        snprintf(prec_note + strlen(prec_note), sizeof prec_note - strlen(prec_note), " %s",
                 backend_layout_name(nt->ctx.layout, nt->be));
    else if (nt->ctx.layout == BACKEND_LAYOUT_NHWC)
        snprintf(prec_note + strlen(prec_note), sizeof prec_note - strlen(prec_note), " nhwc%s",
                 gpu ? "" : " (transposed)");
    /* the convolutions' API where a GPU has two (an A/B's columns differ in it) */
    if (gpu)
        snprintf(prec_note + strlen(prec_note), sizeof prec_note - strlen(prec_note), ", %s convolutions",
                 nt->ctx.conv_api == BACKEND_CONV_API_GRAPH ? "graph-API" : "legacy");
    if (cfg->optim == OPTIM_LARS)
        snprintf(prec_note + strlen(prec_note), sizeof prec_note - strlen(prec_note), ", LARS");
    /* train.cuda_graph: pass 1's steps replayed a recording (pass 2 runs op by op) */
    if (s.replayed)
        snprintf(prec_note + strlen(prec_note), sizeof prec_note - strlen(prec_note),
                 ", recorded step (%ld recordings, %ld replays)", s.recorded, s.replayed);
    bench_result br;
    br.fwd_ms = 1e3 * fwd / steps;
    br.bwd_ms = 1e3 * bwd / steps;
    br.update_ms = 1e3 * upd / steps;
    br.img_per_sec = (double)cfg->batch_size * steps / total;
    br.gflops = 3.0 * net_flops_per_image(nt) * br.img_per_sec / 1e9;
    host_state hs;
    host_state_alloc(&hs, nt, 0);
    host_state_download(&hs, nt, NULL);
    br.params_hash = hash_bytes(hs.params, nt->n_params * sizeof(float));
    host_state_free(&hs);
    fprintf(out,
            "bench %s %dx%dx%d batch %d on %s%s, %s threads: %.1f img/s, %.1f GFLOP/s (forward %.1f ms, backward %.1f ms, "
            "update %.1f ms per step; %d steps)\n",
            cfg->model_name, d.train.c, d.train.h, d.train.w, cfg->batch_size, be->name, prec_note, threads,
            br.img_per_sec, br.gflops, br.fwd_ms, br.bwd_ms, br.update_ms, steps);
    if (res) *res = br;
    stepper_free(&s);
    net_free(nt);
    input_free(&d);
    free(b.x);
    free(b.labels);
    return CNT_OK;
}

/* One row of --bench-data: the loader over the training set with `augment`
 * (the train transform) or without (the evaluation transform), `workers`
 * threads, timed for `seconds` after a warm-up batch. cpus: the process's.
 * The first row says first where its threads run (as they found their
 * binding), then the columns. */
static int bench_data_row(const config *cfg, const input_data *d, int augment, int workers, int cpus, int first,
                          double seconds, FILE *out) {
    loader_options lo, eo;
    input_loader_options(cfg, d, NULL, 0, 1, &lo, &eo);
    lo.augment = augment;
    lo.workers = workers;
    lo.prefetch = 2 * workers > cfg->prefetch ? 2 * workers : cfg->prefetch;
    loader *ld = loader_create(&d->train, &lo);
    if (!ld) return CNT_ERR;
    if (first) {
        char list[128];
        int n = loader_thread_cpus(ld, list, sizeof list);
        fprintf(out, "loader threads bound to the process's CPUs %s (%d of %ld online); img/s/core divides by "
                     "min(workers, %d)\n", list, n, sysconf(_SC_NPROCESSORS_ONLN), cpus);
        fprintf(out, "%9s %8s %12s %12s %12s %10s\n", "transform", "workers", "images/s", "ms/batch", "img/s/core",
                "skipped");
    }
    loader_start_epoch(ld, 0);
    /* The first batch warms up (threads start, files enter the page cache). */
    long images = 0, batches = 0;
    const batch *b = loader_next(ld);
    double t0 = time_now(), t = t0;
    while (b && (b = loader_next(ld)) != NULL) {
        images += b->n;
        batches++;
        t = time_now();
        if (t - t0 >= seconds) break;
    }
    long skipped = loader_skipped(ld);
    loader_free(ld);
    double dt = t - t0;
    const char *name = augment ? "train" : "eval";
    if (batches == 0 || dt <= 0)
        fprintf(out, "%9s %8d %12s   (one epoch is a single batch: nothing to time)\n", name, workers, "-");
    else
        fprintf(out, "%9s %8d %12.1f %12.2f %12.1f %10ld\n", name, workers, images / dt, 1e3 * dt / batches,
                images / dt / (workers < cpus ? workers : cpus), skipped);
    fflush(out);
    return CNT_OK;
}

int bench_data(const config *cfg, double seconds, FILE *out) {
    input_data d;
    if (input_load(cfg, &d) != CNT_OK) return CNT_ERR;
    if (input_open_decoder(cfg, &d, 0) != CNT_OK) { /* GPU 0: --bench-data is one process */
        input_free(&d);
        return CNT_ERR;
    }
    int cpus = cpus_process(NULL);
    int max_workers = cfg->workers > cpus ? cfg->workers : cpus;
    fprintf(out, "data: %s %s, %d training images -> %dx%dx%d, batch %d, %s crop, %s batches\n",
            config_name(cfg, &cfg->data_kind), d.train.root ? d.train.root : cfg->data_root, d.train.n, d.train.c,
            d.train.h, d.train.w, cfg->batch_size, d.crop == LOADER_CROP_RESIZED ? "resized" : "pad",
            config_batch_u8(cfg, NULL) ? "uint8" : "fp32");
    int status = CNT_OK, first = 1;
    /* the training transform (unless data.augment is off), then evaluation's */
    for (int augment = cfg->augment; augment >= 0 && status == CNT_OK; augment--)
        for (int w = 1; status == CNT_OK; w = w * 2 > max_workers && w < max_workers ? max_workers : w * 2) {
            status = bench_data_row(cfg, &d, augment, w, cpus, first, seconds, out);
            first = 0;
            if (w >= max_workers) break;
        }
    input_free(&d);
    return status;
}
