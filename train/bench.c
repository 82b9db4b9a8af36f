/*
 * train/bench.c - timed training steps of a zoo model on random inputs.
 */
#include "train/bench.h"

#include <unistd.h>

#include "common/timer.h"
#include "data/loader.h"
#include "train/input.h"
#include "common/check.h"
#include "common/rng.h"
#include "common/timer.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/optim.h"

#include <stdlib.h>
#include <string.h>

/* fp16: what the trainer's dynamic loss scaling adds to a step (the scale on
 * dlogits; the inf/NaN check of every gradient, read back by the host; the
 * unscaling, folded into the update). The scale stays put: a benchmark step
 * must not be skipped. */
#define BENCH_LOSS_SCALE 65536.0f

static void bench_scale_loss(const backend *be, const bench_options *opt, float *dl, float *dl_aux) {
    size_t n = (size_t)opt->batch * opt->classes;
    be->axpy(n, BENCH_LOSS_SCALE, dl, dl, 0);
    if (dl_aux) be->axpy(n, BENCH_LOSS_SCALE, dl_aux, dl_aux, 0);
}

static void bench_update(const backend *be, net *nt, optimizer *o, float *overflow) {
    if (!overflow) {
        optim_step(o, nt, 0.01f, 1.0f);
        return;
    }
    float found;
    be->zero(overflow, sizeof(float));
    be->find_nonfinite(nt->n_params, nt->grads, overflow);
    be->download(&found, overflow, sizeof found);
    optim_step(o, nt, 0.01f, 1.0f / BENCH_LOSS_SCALE);
}

int bench_run(const bench_options *opt, bench_result *res, FILE *out) {
    const backend *be = backend_get(opt->device);
    if (!be) return CNT_ERR;
    be->set_threads(opt->threads);
    int math = opt->precision;
    int fp16 = math == BACKEND_MATH_FP16;
    be->set_math(math);
    int layout = backend_layout_choose(opt->layout, be, math);
    if (opt->batch < 1 || opt->steps < 1) return cnt_err_set("batch and steps must be at least 1");
    net *nt = net_create(be, opt->c, opt->h, opt->w, opt->classes);
    net_set_layout(nt, layout);
    zoo_options zo = {.zero_init_residual = 0, .aux_logits = 1, .dropout = -1};
    int outn = -1, aux = -1;
    if (zoo_build(nt, opt->model, &zo, &outn, &aux) != CNT_OK || net_finalize(nt, outn, aux, opt->batch) != CNT_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", cnt_err_msg());
        net_free(nt);
        return cnt_err_set("%s", msg);
    }
    net_init_params(nt, 1);

    size_t in_n = (size_t)opt->batch * opt->c * opt->h * opt->w;
    float *xh = cnt_malloc(in_n * sizeof(float));
    int32_t *lh = cnt_malloc((size_t)opt->batch * sizeof(int32_t));
    rng r;
    rng_seed(&r, 1, 2);
    for (size_t i = 0; i < in_n; i++) xh[i] = rng_normal(&r);
    for (int i = 0; i < opt->batch; i++) lh[i] = (int32_t)rng_below(&r, (uint32_t)opt->classes);
    float *x = be->alloc(in_n * sizeof(float));
    int32_t *labels = be->alloc((size_t)opt->batch * sizeof(int32_t));
    float *loss = be->alloc(sizeof(float));
    float *dl = be->alloc((size_t)opt->batch * opt->classes * sizeof(float));
    float *dl_aux = aux >= 0 ? be->alloc((size_t)opt->batch * opt->classes * sizeof(float)) : NULL;
    be->upload(x, xh, in_n * sizeof(float));
    be->upload(labels, lh, (size_t)opt->batch * sizeof(int32_t));
    config cfg;
    config_defaults(&cfg);
    optimizer o;
    optim_opts oo = config_optim_opts(&cfg);
    optim_init(&o, nt, &oo);
    /* fp16 steps pay what the trainer's dynamic loss scaling costs. */
    float *overflow = fp16 ? be->alloc(sizeof(float)) : NULL;

    /* Pass 1: warm-up (cuDNN chooses its algorithms there), then steps queued
     * back to back: the throughput. On the CPU every op has finished when it
     * returns, so the phase times of this pass are exact too. */
    double total = 0, fwd = 0, bwd = 0, upd = 0;
    for (int s = 0; s < opt->warmup + opt->steps; s++) {
        if (s == opt->warmup) {
            be->sync();
            total = time_now();
            fwd = bwd = upd = 0;
        }
        double t0 = time_now();
        net_forward(nt, x, opt->batch, 1);
        be->softmax_xent(opt->batch, opt->classes, net_logits(nt), labels, 0.0f, loss, dl);
        if (dl_aux) be->softmax_xent(opt->batch, opt->classes, net_aux_logits(nt), labels, 0.0f, loss, dl_aux);
        if (overflow) bench_scale_loss(be, opt, dl, dl_aux);
        double t1 = time_now();
        net_backward(nt, dl, dl_aux);
        double t2 = time_now();
        bench_update(be, nt, &o, overflow);
        double t3 = time_now();
        fwd += t1 - t0;
        bwd += t2 - t1;
        upd += t3 - t2;
    }
    be->sync();
    total = time_now() - total;
    /* Pass 2, GPU only: the same steps with a wait after each phase, for the
     * phase times (pass 1's host times were only the time to queue). */
    int gpu = strcmp(be->name, "cpu") != 0;
    if (gpu) fwd = bwd = upd = 0;
    for (int s = 0; s < (gpu ? opt->steps : 0); s++) {
        double t0 = time_now();
        net_forward(nt, x, opt->batch, 1);
        be->softmax_xent(opt->batch, opt->classes, net_logits(nt), labels, 0.0f, loss, dl);
        if (dl_aux) be->softmax_xent(opt->batch, opt->classes, net_aux_logits(nt), labels, 0.0f, loss, dl_aux);
        if (overflow) bench_scale_loss(be, opt, dl, dl_aux);
        be->sync();
        double t1 = time_now();
        net_backward(nt, dl, dl_aux);
        be->sync();
        double t2 = time_now();
        bench_update(be, nt, &o, overflow);
        be->sync();
        double t3 = time_now();
        fwd += t1 - t0;
        bwd += t2 - t1;
        upd += t3 - t2;
    }
    char threads[16];
    if (opt->threads > 0) snprintf(threads, sizeof threads, "%d", opt->threads);
    else snprintf(threads, sizeof threads, "all");
    /* the math a run used: tf32 is fp32 on the CPU; bf16 and fp16 are emulated there */
    char prec_note[64] = "";
    config named = {.precision = opt->precision};
    const char *prec = config_name(&named, &named.precision);
    if (math != BACKEND_MATH_FP32 && (gpu || math != BACKEND_MATH_TF32))
        snprintf(prec_note, sizeof prec_note, " (%s%s)", prec, gpu ? "" : ", emulated");
    /* NHWC on the CPU is NCHW with transposes around each op */
    if (layout == BACKEND_LAYOUT_NHWC)
        snprintf(prec_note + strlen(prec_note), sizeof prec_note - strlen(prec_note), " nhwc%s",
                 gpu ? "" : " (transposed)");
    bench_result br;
    br.fwd_ms = 1e3 * fwd / opt->steps;
    br.bwd_ms = 1e3 * bwd / opt->steps;
    br.update_ms = 1e3 * upd / opt->steps;
    br.img_per_sec = (double)opt->batch * opt->steps / total;
    br.gflops = 3.0 * net_flops_per_image(nt) * br.img_per_sec / 1e9;
    fprintf(out,
            "bench %s %dx%dx%d batch %d on %s%s, %s threads: %.1f img/s, %.1f GFLOP/s (forward %.1f ms, backward %.1f ms, "
            "update %.1f ms per step; %d steps)\n",
            opt->model, opt->c, opt->h, opt->w, opt->batch, be->name, prec_note, threads, br.img_per_sec, br.gflops,
            br.fwd_ms, br.bwd_ms, br.update_ms, opt->steps);
    if (res) *res = br;
    optim_free(&o);
    be->free(x);
    be->free(labels);
    be->free(loss);
    be->free(dl);
    be->free(dl_aux);
    be->free(overflow);
    free(xh);
    free(lh);
    net_free(nt);
    return CNT_OK;
}

int bench_data(const config *cfg, double seconds, FILE *out) {
    input_data d;
    if (input_load(cfg, &d) != CNT_OK) return CNT_ERR;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int max_workers = cfg->workers > cores ? cfg->workers : (int)cores;
    fprintf(out, "data: %s %s, %d training images -> %dx%dx%d, batch %d, %s crop, augment %s\n",
            config_name(cfg, &cfg->data_kind),
            d.train.root ? d.train.root : cfg->data_root, d.train.n, d.train.c, d.train.h, d.train.w,
            cfg->batch_size, d.crop == LOADER_CROP_RESIZED ? "resized" : "pad", cfg->augment ? "on" : "off");
    fprintf(out, "%8s %12s %12s %14s %10s\n", "workers", "images/s", "ms/batch", "img/s/worker", "skipped");
    int status = CNT_OK;
    for (int workers = 1;; workers = workers * 2 > max_workers && workers < max_workers ? max_workers : workers * 2) {
        loader_options lo, eo;
        input_loader_options(cfg, &d, 0, 1, &lo, &eo);
        lo.workers = workers;
        lo.prefetch = 2 * workers > cfg->prefetch ? 2 * workers : cfg->prefetch;
        loader *ld = loader_create(&d.train, &lo);
        if (!ld) {
            status = CNT_ERR;
            break;
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
        if (batches == 0 || dt <= 0) {
            fprintf(out, "%8d %12s   (one epoch is a single batch: nothing to time)\n", workers, "-");
        } else {
            fprintf(out, "%8d %12.1f %12.2f %14.1f %10ld\n", workers, images / dt, 1e3 * dt / batches,
                    images / dt / workers, skipped);
        }
        fflush(out);
        if (workers >= max_workers) break;
    }
    input_free(&d);
    return status;
}
