/*
 * train/profile.c - one training step, layer by layer (see train/profile.h).
 */
#include "train/profile.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/timer.h"
#include "data/loader.h"
#include "dist/reducer.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/input.h"
#include "train/step.h"

/* What the node hook records: per timed step, each node's forward and
 * backward seconds. */
typedef struct recorder {
    const backend *be;
    const node *nodes;  /* net->nodes: a node's index is its offset from here */
    int gpu;            /* synchronise before each time: the device's, not the queue's */
    int n_nodes;
    int step;           /* the timed step being recorded; -1: none */
    double *fwd, *bwd;  /* [steps][n_nodes] */
} recorder;

static void record_node(void *ctx, const node *nd, int backward, double t0, double t1) {
    recorder *rc = ctx;
    if (rc->gpu) {
        rc->be->sync(); /* the node's work is done now; the device was idle at t0 (the last node synced) */
        t1 = time_now();
    }
    if (rc->step < 0) return;
    double *at = backward ? rc->bwd : rc->fwd;
    at[(size_t)rc->step * rc->n_nodes + (size_t)(nd - rc->nodes)] = t1 - t0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n values taken with a stride (sorted in a copy). */
static double median(const double *v, int n, size_t stride) {
    double *c = cnt_malloc((size_t)n * sizeof *c);
    for (int i = 0; i < n; i++) c[i] = v[(size_t)i * stride];
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

/* A JSON string: the names here are module paths, but quote what needs it. */
static void json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', out);
        if ((unsigned char)*s < 0x20) fprintf(out, "\\u%04x", (unsigned char)*s);
        else fputc(*s, out);
    }
    fputc('"', out);
}

/* The range of net->grads a node's backward writes: its parameters' span
 * (grad_begin == grad_end when it has none). */
static void node_grads(const net *nt, const node *nd, size_t *begin, size_t *end) {
    *begin = *end = 0;
    for (int p = nd->first_param; p < nd->first_param + nd->n_params; p++) {
        const param_info *pi = &nt->param_info[p];
        if (*begin == *end || pi->offset < *begin) *begin = pi->offset;
        if (pi->offset + pi->count > *end) *end = pi->offset + pi->count;
    }
}

/* The reducer's buckets for cfg over nt's gradient buffer (*nb of them,
 * their ends returned) and, in *done_at, the node after whose backward each
 * is complete: backward writes the buffer from offset 0 upwards, so bucket b
 * is complete once the largest gradient end written so far reaches its end.
 * Caller frees both. */
static size_t *bucket_plan(const config *cfg, const net *nt, int *nb, int **done_at) {
    reducer_opts ro = config_reducer_opts(cfg);
    *nb = reducer_bucket_layout(nt->n_params, ro.first_bucket, ro.bucket, NULL, 0);
    size_t *ends = cnt_malloc((size_t)*nb * sizeof *ends);
    reducer_bucket_layout(nt->n_params, ro.first_bucket, ro.bucket, ends, *nb);
    *done_at = cnt_malloc((size_t)*nb * sizeof **done_at);
    size_t ready = 0;
    int next = 0;
    for (int i = nt->n_nodes - 1; i >= 0 && next < *nb; i--) {
        size_t gb, ge;
        node_grads(nt, &nt->nodes[i], &gb, &ge);
        if (ge > ready) ready = ge;
        for (; next < *nb && ends[next] <= ready; next++) (*done_at)[next] = i;
    }
    CNT_ASSERT(next == *nb);
    return ends;
}

void profile_print_buckets(const config *cfg, const net *nt, FILE *out) {
    reducer_opts ro = config_reducer_opts(cfg);
    double mib = (double)(1 << 20);
    double bytes = (double)nt->n_params * sizeof(float);
    fprintf(out, "gradients: %zu values, %.2f MiB as fp32", nt->n_params, bytes / mib);
    if (ro.compress == REDUCER_COMPRESS_FP16) fprintf(out, ", %.2f MiB on the wire (dist.compress = fp16)", bytes / 2 / mib);
    fprintf(out, "\n");
    int nb, *done_at;
    size_t *ends = bucket_plan(cfg, nt, &nb, &done_at);
    fprintf(out,
            "buckets: %d (dist.first_bucket_mb = %g, dist.bucket_mb = %g); backward fills the buffer from the last "
            "layer's parameters, and each bucket is allreduced once the backward of its last layer here is done:\n",
            nb, cfg->first_bucket_mb, cfg->bucket_mb);
    for (int b = 0; b < nb; b++) {
        size_t begin = b ? ends[b - 1] : 0;
        /* its first layer: the one whose gradient holds the bucket's first value */
        const char *first = "?";
        for (int i = nt->n_nodes - 1; i >= 0; i--) {
            size_t gb, ge;
            node_grads(nt, &nt->nodes[i], &gb, &ge);
            if (gb <= begin && begin < ge) {
                first = nt->nodes[i].name;
                break;
            }
        }
        fprintf(out, "  bucket %-3d %9.3f MiB  %10zu values  layers %s .. %s\n", b,
                (double)(ends[b] - begin) * sizeof(float) / mib, ends[b] - begin, first, nt->nodes[done_at[b]].name);
    }
    free(ends);
    free(done_at);
}

static void write_json(FILE *out, const config *cfg, const net *nt, const dataset *d, int steps, int warmup,
                       const recorder *rc, const double *step_s, const double *wait_s, const double *fwd_s,
                       const double *bwd_s, const double *upd_s) {
    reducer_opts ro = config_reducer_opts(cfg);
    int nb, *done_at;
    size_t *ends = bucket_plan(cfg, nt, &nb, &done_at);
    fprintf(out, "{\"model\":");
    json_string(out, cfg->model_name);
    fprintf(out, ",\"device\":");
    json_string(out, nt->be->name);
    fprintf(out, ",\"precision\":\"%s\",\"layout\":\"%s\",\"input\":[%d,%d,%d],\"classes\":%d,\"batch\":%d,",
            config_name(cfg, &cfg->precision), backend_layout_name(nt->ctx.layout, NULL), d->c, d->h, d->w,
            d->classes, cfg->batch_size);
    fprintf(out, "\"steps\":%d,\"warmup\":%d,\"params\":%zu,\"grad_bytes\":%zu,", steps, warmup, nt->n_params,
            nt->n_params * sizeof(float));
    fprintf(out,
            "\"step_ms\":%.4f,\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"update_ms\":%.4f,\"data_wait_ms\":%.4f,",
            1e3 * median(step_s, steps, 1), 1e3 * median(fwd_s, steps, 1), 1e3 * median(bwd_s, steps, 1),
            1e3 * median(upd_s, steps, 1), 1e3 * median(wait_s, steps, 1));
    fprintf(out, "\"first_bucket_values\":%zu,\"bucket_values\":%zu,\"buckets\":[", ro.first_bucket, ro.bucket);
    for (int b = 0; b < nb; b++) {
        size_t begin = b ? ends[b - 1] : 0;
        fprintf(out, "%s{\"begin\":%zu,\"end\":%zu,\"bytes\":%zu}", b ? "," : "", begin, ends[b],
                (ends[b] - begin) * sizeof(float));
    }
    fprintf(out, "],\"layers\":[");
    /* backward order, each node with the buckets its backward completes */
    int next_bucket = 0;
    for (int i = nt->n_nodes - 1; i >= 0; i--) {
        const node *nd = &nt->nodes[i];
        size_t gb, ge;
        node_grads(nt, nd, &gb, &ge);
        fprintf(out, "%s{\"name\":", i == nt->n_nodes - 1 ? "" : ",");
        json_string(out, nd->name);
        fprintf(out, ",\"kind\":");
        json_string(out, nd->ops->kind);
        fprintf(out, ",\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"grad_begin\":%zu,\"grad_end\":%zu,\"grad_bytes\":%zu,"
                     "\"completes\":[",
                1e3 * median(rc->fwd + i, steps, (size_t)rc->n_nodes),
                1e3 * median(rc->bwd + i, steps, (size_t)rc->n_nodes), gb, ge, (ge - gb) * sizeof(float));
        for (int first = 1; next_bucket < nb && done_at[next_bucket] == i; next_bucket++, first = 0)
            fprintf(out, "%s%d", first ? "" : ",", next_bucket);
        fprintf(out, "]}");
    }
    fprintf(out, "]}\n");
    free(ends);
    free(done_at);
}

int profile_run(const config *cfg, int steps, int warmup, FILE *out) {
    if (steps < 1 || warmup < 0) return cnt_err_set("--profile: steps must be at least 1 and warm-up at least 0");
    const backend *be = backend_get(cfg->device);
    if (!be) return cnt_err_prefix("train.device = %s", config_name(cfg, &cfg->device));
    if (backend_layout_check(cfg->layout, be) != CNT_OK)
        return cnt_err_prefix("train.layout = %s", config_name(cfg, &cfg->layout));
    if (backend_math_check(be, cfg->precision) != CNT_OK)
        return cnt_err_prefix("train.precision = %s", config_name(cfg, &cfg->precision));
    be->set_threads(cfg->threads);
    input_data d;
    if (input_load(cfg, &d) != CNT_OK) return CNT_ERR;
    loader_options lo, eo;
    input_loader_options(cfg, &d, 0, 1, &lo, &eo);
    loader *ld = loader_create(&d.train, &lo);
    zoo_options zo = config_zoo_options(cfg);
    net *nt = ld ? zoo_create(be, cfg->model_name, &zo, d.train.c, d.train.h, d.train.w, d.train.classes,
                              backend_layout_choose(cfg->layout, be, cfg->precision, d.train.h, d.train.w), lo.batch)
                 : NULL;
    if (!nt) {
        if (ld) cnt_err_prefix("model '%s'", cfg->model_name);
        loader_free(ld);
        input_free(&d);
        return CNT_ERR;
    }
    net_init_params(nt, cfg->seed);
    /* the step as training builds it, one rank */
    optim_opts oo = config_optim_opts(cfg);
    loss_scale_opts lso = config_loss_scale_opts(cfg);
    step_opts so = config_step_opts(cfg, 1);
    int gpu = !be->is_cpu;
    so.sync_phases = gpu; /* the phase times of a GPU step are the device's */
    stepper st;
    stepper_init(&st, nt, NULL, NULL, &oo, &lso, &so, lo.batch, (size_t)d.train.c * d.train.h * d.train.w);
    schedule sched = config_schedule(cfg, 1, loader_steps_per_epoch(ld));

    recorder rc = {.be = be, .nodes = nt->nodes, .gpu = gpu, .n_nodes = nt->n_nodes, .step = -1};
    rc.fwd = cnt_calloc((size_t)steps * nt->n_nodes, sizeof *rc.fwd);
    rc.bwd = cnt_calloc((size_t)steps * nt->n_nodes, sizeof *rc.bwd);
    double *step_s = cnt_calloc((size_t)steps * 5, sizeof *step_s);
    double *wait_s = step_s + steps, *fwd_s = step_s + 2 * steps, *bwd_s = step_s + 3 * steps,
           *upd_s = step_s + 4 * steps;
    net_set_node_hook(nt, record_node, &rc);
    int status = CNT_OK, epoch = 0;
    long step = 0;
    loader_start_epoch(ld, epoch);
    for (int i = 0; i < warmup + steps && status == CNT_OK; i++) {
        double t0 = time_now();
        const batch *b = loader_next(ld);
        if (!b) { /* the epoch ran out: the next one (its first batch is waited for, as in training) */
            loader_start_epoch(ld, ++epoch);
            b = loader_next(ld);
            if (!b) {
                status = cnt_err_set("--profile: the training set gives no batch");
                break;
            }
        }
        double t1 = time_now();
        rc.step = i < warmup ? -1 : i - warmup;
        step_result sr;
        double lr = schedule_lr(&sched, step++);
        if (stepper_run(&st, b, step, lr, &sr) != CNT_OK) {
            status = cnt_err_prefix("--profile, step %ld", step);
            break;
        }
        be->sync();
        double t2 = time_now();
        if (rc.step >= 0) {
            step_s[rc.step] = t2 - t1;
            wait_s[rc.step] = t1 - t0;
            fwd_s[rc.step] = sr.forward_s;
            bwd_s[rc.step] = sr.backward_s;
            upd_s[rc.step] = sr.update_s;
        }
    }
    net_set_node_hook(nt, NULL, NULL);
    if (status == CNT_OK) {
        write_json(out, cfg, nt, &d.train, steps, warmup, &rc, step_s, wait_s, fwd_s, bwd_s, upd_s);
        if (fflush(out) != 0 || ferror(out)) status = cnt_err_set("--profile: cannot write the profile");
    }
    free(rc.fwd);
    free(rc.bwd);
    free(step_s);
    stepper_free(&st);
    net_free(nt);
    loader_free(ld);
    input_free(&d);
    return status;
}
