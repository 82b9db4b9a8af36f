/*
 * train/profile.c - one training step, layer by layer (see train/profile.h):
 * measured and written (train/profile_read.c reads it back).
 */
#include "train/profile.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/json.h"
#include "common/timer.h"
#include "data/loader.h"
#include "dist/reducer.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/config.h"
#include "train/input.h"
#include "train/step.h"

/* What the node hooks record: per timed step, each node's forward and
 * backward seconds: by the host's clock (on a GPU synchronised after each
 * node, so the device's time for the node alone), or with marks (timing
 * events) on the compute stream and no synchronisation, the node's time
 * within the stream as training runs it. */
typedef struct recorder {
    const backend *be;
    const node *nodes;  /* net->nodes: a node's index is its offset from here */
    int gpu;            /* synchronise before each time: the device's, not the queue's */
    int n_nodes;
    int step;           /* the timed step being recorded; -1: none */
    double *fwd, *bwd;  /* [steps][n_nodes] */
    void **mk;          /* with marks: [4][n_nodes], forward begin and end, backward begin and end; else NULL */
} recorder;

static void record_begin(void *ctx, const node *nd, int backward) {
    recorder *rc = ctx;
    rc->be->mark_record(rc->mk[(size_t)(backward ? 2 : 0) * rc->n_nodes + (size_t)(nd - rc->nodes)]);
}

static void record_node(void *ctx, const node *nd, int backward, double t0, double t1) {
    recorder *rc = ctx;
    if (rc->mk) {
        rc->be->mark_record(rc->mk[(size_t)(backward ? 3 : 1) * rc->n_nodes + (size_t)(nd - rc->nodes)]);
        return;
    }
    if (rc->gpu) {
        rc->be->sync(); /* the node's work is done now; the device was idle at t0 (the last node synced) */
        t1 = time_now();
    }
    if (rc->step < 0) return;
    double *at = backward ? rc->bwd : rc->fwd;
    at[(size_t)rc->step * rc->n_nodes + (size_t)(nd - rc->nodes)] = t1 - t0;
}

/* With marks, after a step's synchronisation: each node's times from them. */
static void read_marks(recorder *rc) {
    if (!rc->mk || rc->step < 0) return;
    size_t n = (size_t)rc->n_nodes, at = (size_t)rc->step * n;
    for (size_t i = 0; i < n; i++) {
        rc->fwd[at + i] = 1e-3 * rc->be->mark_elapsed_ms(rc->mk[i], rc->mk[n + i]);
        rc->bwd[at + i] = 1e-3 * rc->be->mark_elapsed_ms(rc->mk[2 * n + i], rc->mk[3 * n + i]);
    }
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
static void put_json_string(FILE *out, const char *s) {
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
 * is complete, by the reducer's own rule (reducer_bucket_ready_after) over
 * the nodes' gradient ranges in backward order. Caller frees both. */
static size_t *bucket_plan(const config *cfg, const net *nt, int *nb, int **done_at) {
    reducer_opts ro = config_reducer_opts(cfg);
    *nb = reducer_bucket_layout(nt->n_params, ro.first_bucket, ro.bucket, NULL, 0);
    size_t *ends = cnt_malloc((size_t)*nb * sizeof *ends);
    reducer_bucket_layout(nt->n_params, ro.first_bucket, ro.bucket, ends, *nb);
    size_t *slice_end = cnt_malloc((size_t)nt->n_nodes * sizeof *slice_end), gb;
    for (int k = 0; k < nt->n_nodes; k++) node_grads(nt, &nt->nodes[nt->n_nodes - 1 - k], &gb, &slice_end[k]);
    *done_at = cnt_malloc((size_t)*nb * sizeof **done_at);
    reducer_bucket_ready_after(ends, *nb, slice_end, nt->n_nodes, *done_at);
    for (int b = 0; b < *nb; b++) {
        CNT_ASSERT((*done_at)[b] >= 0); /* backward writes every gradient */
        (*done_at)[b] = nt->n_nodes - 1 - (*done_at)[b];
    }
    free(slice_end);
    return ends;
}

void profile_print_buckets(const config *cfg, const net *nt, FILE *out) {
    reducer_opts ro = config_reducer_opts(cfg);
    double mib = (double)(1 << 20);
    double bytes = (double)nt->n_params * sizeof(float);
    fprintf(out, "gradients: %zu values, %.2f MiB as fp32", nt->n_params, bytes / mib);
    if (ro.compress == REDUCER_COMPRESS_FP16) fprintf(out, ", %.2f MiB on the wire (dist.compress = fp16)", bytes / 2 / mib);
    if (ro.compress == REDUCER_COMPRESS_POWERSGD) {
        powersgd_tensor *t = powersgd_net_tensors(nt);
        size_t values, wire;
        int k = powersgd_summary(t, nt->n_param_tensors, ro.psgd_rank, &values, &wire);
        fprintf(out, ", %.2f MiB on the wire once compressed (dist.compress = powersgd, rank %d: %d of %d tensors)",
                (double)wire * sizeof(float) / mib, ro.psgd_rank, k, nt->n_param_tensors);
        free(t);
    }
    fprintf(out, "\n");
    int nb, *done_at;
    size_t *ends = bucket_plan(cfg, nt, &nb, &done_at);
    fprintf(out,
            "buckets: %d (dist.first_bucket_mb = %g, dist.bucket_mb = %g%s); backward fills the buffer from the last "
            "layer's parameters, and each bucket is allreduced once the backward of its last layer here is done:\n",
            nb, cfg->first_bucket_mb, (double)ro.bucket * sizeof(float) / mib,
            cfg->bucket_mb == 0.0f ? ", auto: chosen at start-up, shown at the default" : "");
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

/* The timed steps of one pass: the recorder's node times, and per step the
 * whole step, the wait for its batch and the stepper's phases (seconds). */
typedef struct pass_times {
    recorder rc;
    double *step_s, *wait_s, *fwd_s, *bwd_s, *upd_s; /* [steps] each, one allocation */
} pass_times;

static void pass_init(pass_times *pt, const backend *be, const net *nt, int steps, int marks) {
    size_t n = (size_t)nt->n_nodes;
    memset(pt, 0, sizeof *pt);
    pt->rc = (recorder){.be = be, .nodes = nt->nodes, .gpu = !be->is_cpu, .n_nodes = nt->n_nodes, .step = -1};
    pt->rc.fwd = cnt_calloc((size_t)steps * n, sizeof *pt->rc.fwd);
    pt->rc.bwd = cnt_calloc((size_t)steps * n, sizeof *pt->rc.bwd);
    if (marks) {
        pt->rc.mk = cnt_calloc(4 * n, sizeof *pt->rc.mk);
        for (size_t k = 0; k < 4 * n; k++) pt->rc.mk[k] = be->mark_create();
    }
    pt->step_s = cnt_calloc((size_t)steps * 5, sizeof *pt->step_s);
    pt->wait_s = pt->step_s + steps;
    pt->fwd_s = pt->step_s + 2 * steps;
    pt->bwd_s = pt->step_s + 3 * steps;
    pt->upd_s = pt->step_s + 4 * steps;
}

static void pass_free(pass_times *pt) {
    if (pt->rc.mk)
        for (size_t k = 0; k < 4 * (size_t)pt->rc.n_nodes; k++) pt->rc.be->mark_destroy(pt->rc.mk[k]);
    free(pt->rc.mk);
    free(pt->rc.fwd);
    free(pt->rc.bwd);
    free(pt->step_s);
}

/* pa: the pass timed by the host's clock; pb, the pass timed by marks, or
 * NULL (the CPU, where the two are the same). */
static void write_json(FILE *out, const config *cfg, const net *nt, const dataset *d, int steps, int warmup,
                       const pass_times *pa, const pass_times *pb) {
    const recorder *rc = &pa->rc;
    reducer_opts ro = config_reducer_opts(cfg);
    int nb, *done_at;
    size_t *ends = bucket_plan(cfg, nt, &nb, &done_at);
    fprintf(out, "{\"model\":");
    put_json_string(out, cfg->model_name);
    fprintf(out, ",\"device\":");
    put_json_string(out, nt->be->name);
    fprintf(out,
            ",\"precision\":\"%s\",\"activations\":\"%s\",\"layout\":\"%s\",\"input\":[%d,%d,%d],\"classes\":%d,"
            "\"batch\":%d,",
            config_name(cfg, &cfg->precision), backend_dtype_name(nt->ctx.act),
            backend_layout_name(nt->ctx.layout, NULL), d->c, d->h, d->w, d->classes, cfg->batch_size);
    fprintf(out, "\"steps\":%d,\"warmup\":%d,\"params\":%zu,\"grad_bytes\":%zu,", steps, warmup, nt->n_params,
            nt->n_params * sizeof(float));
    fprintf(out,
            "\"step_ms\":%.4f,\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"update_ms\":%.4f,\"data_wait_ms\":%.4f,",
            1e3 * median(pa->step_s, steps, 1), 1e3 * median(pa->fwd_s, steps, 1), 1e3 * median(pa->bwd_s, steps, 1),
            1e3 * median(pa->upd_s, steps, 1), 1e3 * median(pa->wait_s, steps, 1));
    if (pb) fprintf(out, "\"stream_step_ms\":%.4f,", 1e3 * median(pb->step_s, steps, 1));
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
        put_json_string(out, nd->name);
        fprintf(out, ",\"kind\":");
        put_json_string(out, nd->ops->kind);
        if (nd->ops->runs) {
            char runs[512];
            nd->ops->runs(nt, nd, runs, sizeof runs);
            fprintf(out, ",\"runs\":");
            put_json_string(out, runs);
        }
        if (pb)
            fprintf(out, ",\"forward_stream_ms\":%.4f,\"backward_stream_ms\":%.4f",
                    1e3 * median(pb->rc.fwd + i, steps, (size_t)rc->n_nodes),
                    1e3 * median(pb->rc.bwd + i, steps, (size_t)rc->n_nodes));
        fprintf(out, ",\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"grad_begin\":%zu,\"grad_end\":%zu,\"grad_bytes\":%zu,"
                     "\"completes\":[",
                1e3 * median(rc->fwd + i, steps, (size_t)rc->n_nodes),
                1e3 * median(rc->bwd + i, steps, (size_t)rc->n_nodes), gb, ge, (ge - gb) * sizeof(float));
        for (int first = 1; next_bucket < nb && done_at[next_bucket] == i; next_bucket++, first = 0)
            fprintf(out, "%s%d", first ? "" : ",", next_bucket);
        fprintf(out, "]}");
    }
    /* the parameter tensors in buffer order, [offset, count, rows]: what
     * dist.compress = powersgd compresses (the simulator's --powersgd) */
    powersgd_tensor *t = powersgd_net_tensors(nt);
    fprintf(out, "],\"tensors\":[");
    for (int i = 0; i < nt->n_param_tensors; i++)
        fprintf(out, "%s[%zu,%zu,%d]", i ? "," : "", t[i].offset, t[i].count, t[i].rows);
    free(t);
    fprintf(out, "]}\n");
    free(ends);
    free(done_at);
}

/* What the passes share: the net, its stepper, the loader and where the
 * schedule and the epochs are. */
typedef struct run_state {
    net *nt;
    stepper *st;
    loader *ld;
    const schedule *sched;
    long step;
    int epoch;
} run_state;

/* warmup + steps steps, the last `steps` timed into pt. */
static int run_pass(run_state *rs, int warmup, int steps, pass_times *pt) {
    recorder *rc = &pt->rc;
    const backend *be = rs->nt->be;
    net_set_node_hook(rs->nt, record_node, rc);
    net_set_node_begin_hook(rs->nt, rc->mk ? record_begin : NULL);
    int status = CNT_OK;
    for (int i = 0; i < warmup + steps && status == CNT_OK; i++) {
        double t0 = time_now();
        const batch *b = loader_next(rs->ld);
        if (!b) { /* the epoch ran out: the next one (its first batch is waited for, as in training) */
            loader_start_epoch(rs->ld, ++rs->epoch);
            b = loader_next(rs->ld);
            if (!b) {
                status = cnt_err_set("--profile: the training set gives no batch");
                break;
            }
        }
        double t1 = time_now();
        rc->step = i < warmup ? -1 : i - warmup;
        step_result sr;
        double lr = schedule_lr(rs->sched, rs->step++);
        if (stepper_run(rs->st, b, rs->step, lr, &sr) != CNT_OK) {
            status = cnt_err_prefix("--profile, step %ld", rs->step);
            break;
        }
        be->sync();
        read_marks(rc);
        double t2 = time_now();
        if (rc->step >= 0) {
            pt->step_s[rc->step] = t2 - t1;
            pt->wait_s[rc->step] = t1 - t0;
            pt->fwd_s[rc->step] = sr.forward_s;
            pt->bwd_s[rc->step] = sr.backward_s;
            pt->upd_s[rc->step] = sr.update_s;
        }
    }
    net_set_node_begin_hook(rs->nt, NULL);
    net_set_node_hook(rs->nt, NULL, NULL);
    return status;
}

/* The backend the config names, checked for its layout, math and activations. */
static const backend *profile_backend(const config *cfg) {
    const backend *be = backend_get(cfg->device);
    if (!be) {
        cnt_err_prefix("train.device = %s", config_name(cfg, &cfg->device));
        return NULL;
    }
    if (backend_layout_check(cfg->layout, be) != CNT_OK) {
        cnt_err_prefix("train.layout = %s", config_name(cfg, &cfg->layout));
        return NULL;
    }
    if (backend_math_check(be, cfg->precision) != CNT_OK) {
        cnt_err_prefix("train.precision = %s", config_name(cfg, &cfg->precision));
        return NULL;
    }
    if (backend_act_check(be, config_activations(cfg, be)) != CNT_OK) {
        cnt_err_prefix("train.activations = %s", config_name(cfg, &cfg->activations));
        return NULL;
    }
    be->set_threads(cfg->threads);
    return be;
}

static int profile_data(const config *cfg, const backend *be, const input_data *d, int steps, int warmup,
                        FILE *out);

int profile_run(const config *cfg, int steps, int warmup, FILE *out) {
    if (steps < 1 || warmup < 0) return cnt_err_set("--profile: steps must be at least 1 and warm-up at least 0");
    const backend *be = profile_backend(cfg);
    if (!be) return CNT_ERR;
    input_data d;
    if (input_load(cfg, &d) != CNT_OK) return CNT_ERR;
    int status = profile_data(cfg, be, &d, steps, warmup, out);
    input_free(&d);
    return status;
}

int profile_run_data(const config *cfg, const input_data *d, int steps, int warmup, FILE *out) {
    if (steps < 1 || warmup < 0) return cnt_err_set("--profile: steps must be at least 1 and warm-up at least 0");
    const backend *be = profile_backend(cfg);
    return be ? profile_data(cfg, be, d, steps, warmup, out) : CNT_ERR;
}

/* profile_run's steps on data already loaded. */
static int profile_data(const config *cfg, const backend *be, const input_data *d, int steps, int warmup,
                        FILE *out) {
    loader_options lo, eo;
    input_loader_options(cfg, d, be, 0, 1, &lo, &eo);
    loader *ld = loader_create(&d->train, &lo);
    zoo_options zo = config_zoo_options(cfg, be);
    net *nt = ld ? zoo_create(be, cfg->model_name, &zo, d->train.c, d->train.h, d->train.w, d->train.classes,
                              backend_layout_choose(cfg->layout, be, cfg->precision, d->train.h, d->train.w), lo.batch)
                 : NULL;
    if (!nt) {
        if (ld) cnt_err_prefix("model '%s'", cfg->model_name);
        loader_free(ld);
        return CNT_ERR;
    }
    net_init_params(nt, cfg->seed);
    /* the step as training builds it, one rank */
    optim_opts oo = config_optim_opts(cfg);
    loss_scale_opts lso = config_loss_scale_opts(cfg);
    step_opts so = config_step_opts(cfg);
    int gpu = !be->is_cpu;
    so.sync_phases = gpu; /* the phase times of a GPU step are the device's */
    so.accumulate = 1;    /* one forward, backward and update: an emulated run with train.accumulate repeats
                           * the forward and backward per micro-batch */
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &lso, &so, lo.batch, d->train.c, d->train.h * d->train.w, lo.u8);
    schedule sched = config_schedule(cfg, 1, loader_steps_per_epoch(ld));

    /* first each node synchronised (on a GPU), then, where the backend has
     * marks, the same steps again with none (train/profile.h) */
    pass_times pa, pb;
    pass_init(&pa, be, nt, steps, 0);
    int marks = gpu && be->mark_create;
    if (marks) pass_init(&pb, be, nt, steps, 1);
    run_state rs = {.nt = nt, .st = &st, .ld = ld, .sched = &sched};
    loader_start_epoch(ld, 0);
    int status = run_pass(&rs, warmup, steps, &pa);
    if (status == CNT_OK && marks) status = run_pass(&rs, warmup, steps, &pb);
    if (status == CNT_OK) {
        write_json(out, cfg, nt, &d->train, steps, warmup, &pa, marks ? &pb : NULL);
        if (fflush(out) != 0 || ferror(out)) status = cnt_err_set("--profile: cannot write the profile");
    }
    pass_free(&pa);
    if (marks) pass_free(&pb);
    stepper_free(&st);
    net_free(nt);
    loader_free(ld);
    return status;
}
