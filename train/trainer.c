/*
 * train/trainer.c - the training loop.
 *
 * One step, as data flows:
 *   loader_next (host batch, prepared ahead by worker threads; the wait is
 *   measured) -> upload -> forward -> softmax cross-entropy -> backward ->
 *   SGD update -> every log_every steps: one progress line and one JSON record.
 * After each epoch (and at the end of a run stopped by train.max_steps): an
 * evaluation over the whole test set, top-1 and top-5.
 *
 * The host reads device memory only when a log line needs a value: the loss of
 * each step is accumulated on the device.
 */
#include "train/trainer.h"
#include "common/check.h"
#include "common/timer.h"
#include "data/dataset.h"
#include "train/input.h"
#include "data/loader.h"
#include "dist/dist.h"
#include "dist/fault.h"
#include "dist/nccl.h"
#include "dist/reducer.h"
#include "dist/timeline.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/checkpoint.h"
#include "train/loss_scale.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/stager.h"
#include "train/weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* train.layout, validated by the config; auto: see backend_layout_from_name. */
static int layout_for(const config *cfg, const backend *be) {
    return backend_layout_from_name(cfg->layout, be, backend_math_from_name(cfg->precision));
}

static net *build_model(const backend *be, const config *cfg, int c, int h, int w, int classes, int max_batch) {
    net *nt = net_create(be, c, h, w, classes);
    net_set_layout(nt, layout_for(cfg, be));
    zoo_options zo = {.zero_init_residual = cfg->zero_init_residual, .aux_logits = cfg->aux_logits,
                      .dropout = cfg->dropout};
    int out = -1, aux = -1;
    if (zoo_build(nt, cfg->model_name, &zo, &out, &aux) != CNT_OK || net_finalize(nt, out, aux, max_batch) != CNT_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", cnt_err_msg());
        net_free(nt);
        cnt_err_set("model '%s' on %dx%dx%d input with %d classes: %s", cfg->model_name, c, h, w, classes, msg);
        return NULL;
    }
    return nt;
}

/* Evaluation over the whole test set: mean loss, top-1 and top-5 fractions,
 * and how many samples had an inf or NaN logit (fp16 activations beyond 65504
 * end so). A sample with a NaN logit or an infinite true-class logit counts
 * as wrong: such logits rank nothing. */
typedef struct eval_result {
    double loss, top1, top5;
    long nonfinite;
} eval_result;

static void evaluate(net *nt, loader *ld, stager *st, float *loss_dev, float *dlogits_dev, eval_result *er) {
    const backend *be = nt->be;
    int K = nt->classes;
    int topk = K < 5 ? K : 5;
    float *logits = cnt_malloc((size_t)nt->max_batch * K * sizeof(float));
    double loss_sum = 0;
    long n_total = 0, hit1 = 0, hit5 = 0, nonfinite = 0;
    loader_start_epoch(ld, 0);
    const batch *b;
    while ((b = loader_next(ld)) != NULL) {
        if (b->n == 0) continue; /* every image of the batch was unreadable */
        float *x_dev;
        int32_t *labels_dev;
        stager_put(st, b, &x_dev, &labels_dev);
        net_forward(nt, x_dev, b->n, 0);
        be->softmax_xent(b->n, K, net_logits(nt), labels_dev, 0.0f, loss_dev, dlogits_dev);
        stager_release(st);
        float loss;
        be->download(&loss, loss_dev, sizeof loss);
        be->download(logits, net_logits(nt), (size_t)b->n * K * sizeof(float));
        loss_sum += (double)loss * b->n;
        for (int i = 0; i < b->n; i++) {
            const float *row = logits + (size_t)i * K;
            int label = b->labels[i];
            /* rank of the true class: how many logits beat it (ties count against) */
            int better = 0, bad = !isfinite(row[label]), inf_or_nan = bad;
            for (int k = 0; k < K; k++) {
                bad |= row[k] != row[k];
                inf_or_nan |= !isfinite(row[k]);
                if (k != label && (row[k] > row[label] || (row[k] == row[label] && k < label))) better++;
            }
            /* NaN compares false with everything: it would rank first; an
             * infinite true-class logit ranks nothing either */
            if (bad) better = K;
            nonfinite += inf_or_nan;
            hit1 += better < 1;
            hit5 += better < topk;
        }
        n_total += b->n;
    }
    free(logits);
    /* Every rank evaluated its own shard; every sample counts once in the sums. */
    double sums[5] = {loss_sum, (double)n_total, (double)hit1, (double)hit5, (double)nonfinite};
    dist_allreduce_sum_f64(sums, 5);
    er->nonfinite = (long)sums[4];
    er->loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
    er->top1 = sums[1] > 0 ? sums[2] / sums[1] : 0;
    er->top5 = sums[1] > 0 ? sums[3] / sums[1] : 0;
}

/* Sends rank 0's n host floats to every rank and uploads them into dev. */
static void broadcast_upload(const backend *be, float *dev, size_t n, float *host) {
    dist_broadcast(host, n * sizeof(float), 0);
    be->upload(dev, host, n * sizeof(float));
}

/* Copies n floats of device memory to every rank from rank 0, through host
 * staging memory (the backend's pointers may not be host pointers). */
static void broadcast_device(const backend *be, float *dev, size_t n, float *host) {
    be->download(host, dev, n * sizeof(float));
    broadcast_upload(be, dev, n, host);
}

/* The effective config as written to config.ini, plus the model's parameter
 * count: what every rank must agree on. Caller frees. */
static char *config_text(const config *cfg, size_t n_params, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    CHECK_ERRNO(f != NULL, "open_memstream");
    config_write_ini(cfg, f);
    fprintf(f, "; model parameters %zu\n", n_params);
    fclose(f);
    return text;
}

static uint64_t fnv1a(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

/* After each epoch in a multi-rank job: every rank must hold bit-identical
 * parameters (they start from rank 0's and apply the same summed gradients).
 * A difference means a broken reduction or a nondeterministic update, and
 * training on would silently diverge: report the ranks and stop. */
static int check_params_identical(const net *nt, float *host) {
    int world = dist_world();
    nt->be->download(host, nt->params, nt->n_params * sizeof(float));
    uint64_t h = fnv1a((const char *)host, nt->n_params * sizeof(float));
    uint64_t *all = cnt_malloc((size_t)world * sizeof *all);
    dist_allgather_u64(h, all);
    int bad = -1;
    for (int r = 1; r < world && bad < 0; r++)
        if (all[r] != all[0]) bad = r;
    free(all);
    if (bad >= 0) return cnt_err_set("parameters on rank %d differ from rank 0's: the ranks have diverged", bad);
    return CNT_OK;
}

/* Hash of the effective configuration, stored in checkpoints. */
static uint64_t config_hash(const config *cfg) {
    size_t len;
    char *text = config_text(cfg, 0, &len);
    uint64_t h = fnv1a(text, len);
    free(text);
    return h;
}

/* Ranks must run the same configuration and model: compare a hash of the
 * effective config (as written to config.ini) and the parameter count. On a
 * mismatch, each differing rank names the first line that differs from rank
 * 0's config, and the job ends (a silent divergence or a hang is worse). */
static int check_same_config(const config *cfg, const net *nt) {
    int world = dist_world();
    if (world == 1) return CNT_OK;
    size_t len;
    char *text = config_text(cfg, nt->n_params, &len);
    uint64_t h = fnv1a(text, len);
    uint64_t *all = cnt_malloc((size_t)world * sizeof *all);
    dist_allgather_u64(h, all);
    int same = 1;
    for (int r = 1; r < world; r++) same &= all[r] == all[0];
    free(all);
    if (same) {
        free(text);
        return CNT_OK;
    }
    /* Rank 0's text travels to every rank so each can say what differs. */
    uint64_t n0 = len;
    dist_broadcast(&n0, sizeof n0, 0);
    char *text0 = cnt_malloc(n0 + 1);
    if (dist_rank() == 0) memcpy(text0, text, n0);
    dist_broadcast(text0, n0, 0);
    text0[n0] = '\0';
    if (dist_rank() != 0) {
        const char *a = text0, *b = text;
        while (*a && *b) {
            const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
            size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
            if (la != lb || memcmp(a, b, la) != 0) {
                log_error("this rank's configuration differs from rank 0's: '%.*s' here, '%.*s' on rank 0", (int)lb,
                          b, (int)la, a);
                break;
            }
            a += la + (ea ? 1 : 0);
            b += lb + (eb ? 1 : 0);
        }
    }
    free(text0);
    free(text);
    dist_barrier(); /* let every rank print before rank 0 reports and the job ends */
    return cnt_err_set("ranks run different configurations or models (see the lines from the differing ranks)");
}

/* A path from the config (checkpoint.dir, dist.timeline), resolved inside
 * train.out_dir when relative. */
static void path_in_out_dir(const config *cfg, const char *path, char *out, size_t len) {
    if (path[0] == '/') snprintf(out, len, "%s", path);
    else snprintf(out, len, "%s/%s", cfg->out_dir, path);
}

/* checkpoint.resume: rank 0 finds and validates the checkpoint, then every
 * rank receives its state (parameters, buffers, momentum, position). Sets
 * *start_epoch and *step; leaves them at 0 when starting fresh. A missing or
 * bad checkpoint on rank 0 is an error (CNT_ERR on rank 0; the caller ends the
 * job, which releases the ranks waiting in the broadcast). */
static int resume_state(const config *cfg, net *nt, optimizer *opt, loss_scaler *ls, int *start_epoch, long *step) {
    const backend *be = nt->be;
    int64_t found = 0; /* rank 0 tells the others whether a checkpoint was loaded */
    ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    float *params = cnt_malloc((nt->n_params ? nt->n_params : 1) * sizeof(float));
    float *buffers = cnt_malloc((nt->n_buffers ? nt->n_buffers : 1) * sizeof(float));
    float *momentum = opt->momentum_buf ? cnt_malloc(nt->n_params * sizeof(float)) : NULL;
    int status = CNT_OK;
    if (dist_rank() == 0 && strcmp(cfg->ckpt_resume, "none") != 0) {
        char path[2 * CONFIG_STR + 64];
        int have = 1;
        if (strcmp(cfg->ckpt_resume, "auto") == 0) {
            char dir[2 * CONFIG_STR + 8];
            path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
            if (ckpt_find_latest(dir, path, sizeof path) != CNT_OK) {
                log_info("checkpoint.resume = auto: no checkpoint in %s, starting from scratch", dir);
                have = 0;
            }
        } else {
            snprintf(path, sizeof path, "%s", cfg->ckpt_resume);
        }
        if (have) {
            int has_momentum = 0;
            if (ckpt_read(path, nt, params, buffers, momentum, &has_momentum, &meta) != CNT_OK) {
                status = CNT_ERR;
            } else {
                found = 1;
                if (momentum && !has_momentum) log_warn("%s holds no momentum buffer; momentum restarts at zero", path);
                char scaled[64] = "";
                if (meta.loss_scale > 0)
                    snprintf(scaled, sizeof scaled, ", loss scale %g (%ld steps skipped)", meta.loss_scale,
                             meta.skipped_steps);
                log_info("resumed from %s: %d epochs and %ld steps done%s", path, meta.epoch, meta.step, scaled);
            }
        }
    }
    if (status != CNT_OK) {
        free(params);
        free(buffers);
        free(momentum);
        return CNT_ERR;
    }
    dist_broadcast(&found, sizeof found, 0);
    if (found) {
        dist_broadcast(&meta, sizeof meta, 0);
        broadcast_upload(be, nt->params, nt->n_params, params);
        if (nt->n_buffers) broadcast_upload(be, nt->buffers, nt->n_buffers, buffers);
        if (momentum) broadcast_upload(be, opt->momentum_buf, nt->n_params, momentum);
        nt->dropout_seed = meta.dropout_seed;
        loss_scaler_restore(ls, meta.loss_scale, meta.loss_scale_good, meta.skipped_steps, meta.skipped_in_a_row);
        *start_epoch = meta.epoch;
        *step = meta.step;
    }
    free(params);
    free(buffers);
    free(momentum);
    return CNT_OK;
}

/* model.init_from on rank 0: loads the safetensors file into nt, unless
 * checkpoint.resume will load a checkpoint (which then wins). */
static int load_init_from(const config *cfg, net *nt) {
    if (strcmp(cfg->ckpt_resume, "none") != 0) {
        char dir[2 * CONFIG_STR + 8], path[2 * CONFIG_STR + 64];
        int have = 1;
        if (strcmp(cfg->ckpt_resume, "auto") == 0) {
            path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
            have = ckpt_find_latest(dir, path, sizeof path) == CNT_OK;
        } else {
            snprintf(path, sizeof path, "%s", cfg->ckpt_resume);
        }
        if (have) {
            log_info("model.init_from = %s not loaded: checkpoint.resume loads %s, and the checkpoint wins",
                     cfg->init_from, path);
            return CNT_OK;
        }
    }
    return weights_init_from(nt, cfg->init_from);
}

/* Rank 0 writes the state after `epochs_done` complete epochs. */
static int save_checkpoint(const config *cfg, const net *nt, const optimizer *opt, const loss_scaler *ls,
                           int epochs_done, long step) {
    const backend *be = nt->be;
    float *params = cnt_malloc(nt->n_params * sizeof(float));
    float *buffers = cnt_malloc((nt->n_buffers ? nt->n_buffers : 1) * sizeof(float));
    float *momentum = opt->momentum_buf ? cnt_malloc(nt->n_params * sizeof(float)) : NULL;
    be->download(params, nt->params, nt->n_params * sizeof(float));
    if (nt->n_buffers) be->download(buffers, nt->buffers, nt->n_buffers * sizeof(float));
    if (momentum) be->download(momentum, opt->momentum_buf, nt->n_params * sizeof(float));
    ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.epoch = epochs_done;
    meta.step = step;
    meta.dropout_seed = nt->dropout_seed;
    meta.config_hash = config_hash(cfg);
    snprintf(meta.model_name, sizeof meta.model_name, "%.*s", (int)sizeof meta.model_name - 1, cfg->model_name);
    /* What zoo_build needs besides the net's shape (ckpt_write takes that from nt). */
    meta.zero_init_residual = cfg->zero_init_residual;
    meta.dropout = cfg->dropout;
    if (loss_scaler_active(ls)) {
        meta.loss_scale = ls->scale;
        meta.loss_scale_good = ls->good;
        meta.skipped_steps = ls->skipped;
        meta.skipped_in_a_row = ls->in_a_row;
    }
    char dir[2 * CONFIG_STR + 8], path[3 * CONFIG_STR];
    path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
    int status = ckpt_write(dir, nt, params, buffers, momentum, &meta, cfg->ckpt_keep, path, sizeof path);
    if (status == CNT_OK) log_info("checkpoint: %s", path);
    free(params);
    free(buffers);
    free(momentum);
    return status;
}

/* The net's node hook while dist.timeline is on: one "bwd <node>" event per
 * layer of backward (forward is recorded as a whole). */
static void timeline_node_hook(void *ctx, const node *nd, int backward, double t0, double t1) {
    if (!backward) return;
    char name[NET_NAME_LEN + 8];
    snprintf(name, sizeof name, "bwd %s", nd->name);
    timeline_record(ctx, name, "backward", TIMELINE_TID_TRAIN, t0, t1);
}

static void format_duration(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, len, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
}

/* train.device: the backend of this rank (GPU local_rank % GPUs of its node),
 * said in one line (rank 0 prints every rank's), with the reason when auto
 * falls back to the CPU. */
static const backend *choose_device(const config *cfg) {
    const backend *be = backend_get_for_rank(cfg->device, dist_local_rank());
    if (!be) {
        char why[1024];
        snprintf(why, sizeof why, "%s", cnt_err_msg()); /* cnt_err_set writes the buffer it reads */
        cnt_err_set("train.device = %s: %s (see ./trainer --devices)", cfg->device, why);
        return NULL;
    }
    char what[768], desc[512];
    be->describe(desc, sizeof desc);
    if (strcmp(be->name, "cpu") == 0 && strcmp(cfg->device, "auto") == 0) {
        /* why no GPU: asked only here, so device=cpu never touches the CUDA runtime */
        char devs[4096];
        backend_describe_devices(devs, sizeof devs);
        char *nl = strchr(devs, '\n');
        if (nl) *nl = '\0';
        snprintf(what, sizeof what, "%.300s (train.device = auto; %.300s)", desc, devs);
    } else {
        snprintf(what, sizeof what, "%.300s (train.device = %.100s)", desc, cfg->device);
    }
    if (dist_world() == 1) {
        log_info("device: %s", what);
    } else {
        /* one line per rank, printed by rank 0 (a collective: every rank is here) */
        void *all;
        size_t *counts;
        dist_gather_bytes(what, sizeof what, &all, &counts);
        for (int r = 0; all && r < dist_world(); r++)
            log_info("device: rank %d: %s", r, (char *)all + (size_t)r * sizeof what);
        free(all);
        free(counts);
    }
    int cpu = strcmp(be->name, "cpu") == 0;
    int math = backend_math_from_name(cfg->precision); /* validated by the config */
    be->set_math(math);
    if (math == BACKEND_MATH_TF32) {
        if (cpu) log_info("precision: tf32 requested; the CPU backend computes fp32");
        else log_info("precision: tf32 (cuDNN and cuBLAS tensor cores, fp32 accumulation and storage)");
    } else if (math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16) {
        log_info("precision: %s mixed: convolutions and GEMMs take %s operands and round their results to it, "
                 "accumulating in fp32%s; fp32 master weights, batch norm, loss and optimizer",
                 cfg->precision, cfg->precision,
                 cpu ? " (emulated by the CPU backend: the same rounding, slower than fp32)" : " on tensor cores");
    }
    if (layout_for(cfg, be) == BACKEND_LAYOUT_NHWC)
        log_info("layout: nhwc (train.layout = %s)%s", cfg->layout,
                 cpu ? "; the CPU backend computes NCHW and transposes around each op (slower than nchw)"
                     : ": activations channels last, as tensor-core convolutions read them");
    return be;
}

/* dist.backend: whether gradients go through NCCL (GPU to GPU) or MPI. The
 * decision is the same on every rank: it rests on sums over all ranks.
 * *nccl_out is the communicator when NCCL is used (also for 1 rank when
 * asked for by name, so one GPU can try the path), else NULL. */
static int choose_comm(const config *cfg, const backend *be, dist_nccl **nccl_out) {
    *nccl_out = NULL;
    int named = strcmp(cfg->dist_backend, "nccl") == 0, is_auto = strcmp(cfg->dist_backend, "auto") == 0;
    if (!named && !(is_auto && dist_world() > 1)) return CNT_OK;
    /* Ranks on the CPU rule NCCL out. Whether ranks share a GPU is judged by
     * dist_nccl_create from the GPUs' PCI bus ids: a rank's count of visible
     * GPUs says nothing when CUDA_VISIBLE_DEVICES gives each rank its own. */
    double cpu_ranks = strcmp(be->name, "cpu") == 0;
    if (dist_world() > 1) dist_allreduce_sum_f64(&cpu_ranks, 1);
    if (is_auto && (cpu_ranks > 0 || !CNT_HAVE_NCCL || strcmp(cfg->compress, "none") != 0)) return CNT_OK;
    if (named && cpu_ranks > 0)
        return cnt_err_set("dist.backend = nccl: %g rank%s run%s on the CPU (train.device = %s); NCCL needs a GPU "
                           "per rank (see ./trainer --devices)",
                           cpu_ranks, cpu_ranks == 1 ? "" : "s", cpu_ranks == 1 ? "s" : "", cfg->device);
#if CNT_HAVE_NCCL
    dist_nccl *nc = dist_nccl_create();
    if (!nc) {
        if (named) return CNT_ERR; /* the message names dist.backend=nccl and what to do */
        if (dist_rank() == 0)
            log_warn("dist.backend = auto: NCCL did not start (%s); using MPI through host memory", cnt_err_msg());
        return CNT_OK;
    }
    *nccl_out = nc;
    return CNT_OK;
#else
    return cnt_err_set("dist.backend = nccl: this binary was built without NCCL (rebuild where `make` finds it, "
                       "or use dist.backend = mpi)");
#endif
}

static int trainer_run_on(const config *cfg, const backend *be, dist_nccl *nccl, train_result *res);

int trainer_run(const config *cfg, train_result *res) {
    const backend *be = choose_device(cfg);
    if (!be) return CNT_ERR;
    dist_nccl *nccl = NULL;
    if (choose_comm(cfg, be, &nccl) != CNT_OK) return CNT_ERR;
    int status = trainer_run_on(cfg, be, nccl, res);
#if CNT_HAVE_NCCL
    /* after the reducer that used it; a failed run may have left collectives
     * no peer will join, so it aborts instead of waiting for them */
    if (status == CNT_OK) dist_nccl_free(nccl);
    else dist_nccl_abort(nccl);
#endif
    return status;
}

static int trainer_run_on(const config *cfg, const backend *be, dist_nccl *nccl, train_result *res) {
    train_result r;
    memset(&r, 0, sizeof r);
    be->set_threads(cfg->threads);

    input_data d;
    if (input_load(cfg, &d) != CNT_OK) return CNT_ERR;
    int C = d.train.c, H = d.train.h, W = d.train.w, classes = d.train.classes;
    int eval_batch = cfg->eval_batch_size > 0 ? cfg->eval_batch_size : cfg->batch_size;
    int max_batch = cfg->batch_size > eval_batch ? cfg->batch_size : eval_batch;
    net *nt = build_model(be, cfg, C, H, W, classes, max_batch);
    if (!nt) {
        input_free(&d);
        return CNT_ERR;
    }
    net_init_params(nt, cfg->seed);

    int rank = dist_rank(), world = dist_world();
    if (check_same_config(cfg, nt) != CNT_OK) {
        net_free(nt);
        input_free(&d);
        return CNT_ERR;
    }
    /* model.init_from: rank 0 reads the file; the broadcast below copies it. */
    if (rank == 0 && cfg->init_from[0] && load_init_from(cfg, nt) != CNT_OK) {
        net_free(nt);
        input_free(&d);
        return CNT_ERR;
    }
    /* Every rank starts from rank 0's weights (the same seed gives the same
     * weights anyway; the broadcast makes it so whatever the ranks did). */
    if (world > 1) {
        size_t n = nt->n_params > nt->n_buffers ? nt->n_params : nt->n_buffers;
        float *host = cnt_malloc((n ? n : 1) * sizeof(float));
        broadcast_device(be, nt->params, nt->n_params, host);
        if (nt->n_buffers) broadcast_device(be, nt->buffers, nt->n_buffers, host);
        free(host);
    }
    loader_options lo, eo;
    input_loader_options(cfg, &d, rank, world, &lo, &eo);
    loader *train_ld = loader_create(&d.train, &lo);
    loader *test_ld = train_ld ? loader_create(&d.test, &eo) : NULL;
    metrics m = {0};
    /* Only rank 0 writes files: one run directory, no races between ranks. */
    if (!train_ld || !test_ld || (rank == 0 && metrics_open(&m, cfg->out_dir) != CNT_OK)) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", cnt_err_msg());
        loader_free(train_ld);
        loader_free(test_ld);
        net_free(nt);
        input_free(&d);
        return cnt_err_set("%s", msg);
    }
    if (rank == 0) {
        char path[CONFIG_STR + 32];
        snprintf(path, sizeof path, "%s/config.ini", cfg->out_dir);
        FILE *f = fopen(path, "w");
        if (f) {
            config_write_ini(cfg, f);
            fclose(f);
        }
    }

    long steps_per_epoch = loader_steps_per_epoch(train_ld);
    long total_steps = steps_per_epoch * cfg->epochs;
    if (cfg->max_steps > 0 && cfg->max_steps < total_steps) total_steps = cfg->max_steps;
    int in_size = C * H * W;
    optimizer opt;
    optim_init(&opt, nt, cfg);

    /* Batches reach the device one step ahead, on the copy stream. */
    stager *st = stager_create(be, max_batch, (size_t)in_size);
    float *loss_dev = be->alloc(sizeof(float));
    /* Loss scaling (train.loss_scaling): the flag collects inf/NaN over every gradient. */
    loss_scaler ls;
    loss_scaler_init(&ls, cfg);
    float *overflow_dev = loss_scaler_active(&ls) ? be->alloc(sizeof(float)) : NULL;
    /* the running statistics before each forward, for a skipped step to restore */
    float *buffers_before = overflow_dev && nt->n_buffers ? be->alloc(nt->n_buffers * sizeof(float)) : NULL;
    if (loss_scaler_active(&ls)) {
        char what[256];
        loss_scaler_describe(&ls, what, sizeof what);
        log_info("loss scaling: %s", what);
    }
    float *loss_acc_dev = be->alloc(sizeof(float));
    float *dlogits = be->alloc((size_t)max_batch * classes * sizeof(float));
    float *aux_loss_dev = NULL, *dlogits_aux = NULL;
    if (nt->aux_output >= 0) {
        aux_loss_dev = be->alloc(sizeof(float));
        dlogits_aux = be->alloc((size_t)max_batch * classes * sizeof(float));
    }

    log_info("cnntrain: model %s (%zu parameters, %.3f GFLOPs/image forward) on %s", cfg->model_name,
             nt->n_params, net_flops_per_image(nt) / 1e9, be->name);
    log_info("data: %s %s, %d train / %d test images of %dx%dx%d, %d classes", cfg->data_kind, cfg->data_root,
             d.train.n, d.test.n, C, H, W, classes);
    log_info("train: %d epochs x %ld steps (batch %d), %ld steps in all; %s schedule, warm-up %g epochs; out %s",
             cfg->epochs, steps_per_epoch, cfg->batch_size, total_steps, cfg->schedule, (double)cfg->warmup_epochs,
             cfg->out_dir);
    /* Linear scaling (Goyal et al. 2017): N workers take N times larger steps
     * on the N times larger global batch, reached through the warm-up. */
    double base_lr = strcmp(cfg->lr_scaling, "linear") == 0 ? (double)cfg->lr * world : (double)cfg->lr;
    /* Goyal et al.'s gradual warm-up starts at one worker's rate. */
    double warmup_start = strcmp(cfg->warmup_start, "lr") == 0 ? (double)cfg->lr : 0.0;
    dist_algo algo = strcmp(cfg->dist_backend, "ring") == 0 ? DIST_ALGO_RING : DIST_ALGO_MPI;
    reducer *rd = NULL;
    if (world > 1 || nccl) {
        size_t mib = (size_t)1 << 20;
        size_t first = (size_t)(cfg->first_bucket_mb * mib / sizeof(float)), bucket = (size_t)(cfg->bucket_mb * mib / sizeof(float));
        reducer_opts ro = {.first_bucket = first ? first : 1, .bucket = bucket ? bucket : 1, .algo = algo,
                           .overlap = cfg->overlap,
                           .compress = strcmp(cfg->compress, "fp16") == 0 ? REDUCER_COMPRESS_FP16 : REDUCER_COMPRESS_NONE,
                           .stall_warn_s = cfg->stall_warn_s, .stall_abort_s = cfg->stall_abort_s,
                           .nccl = nccl};
        rd = reducer_create(be, nt->grads, nt->n_params, &ro);
        net_set_grad_hook(nt, reducer_grads_ready, rd);
    }
    const char *comm_name = nccl ? "NCCL (on the GPUs, its own stream; times reported one step late)"
                            : algo == DIST_ALGO_RING ? "ring"
                                                     : "MPI_Allreduce";
    if (world == 1 && !nccl) {
        log_info("dist: 1 rank, no gradient communication; lr %g (optim.lr_scaling = %s)", base_lr, cfg->lr_scaling);
    } else {
        log_info("dist: %d rank%s (%d on this node), global batch %d; gradients allreduced with %s in %d bucket%s "
                 "(%g MiB, first %g MiB) %s, %s on the wire; stall watchdog %s (warn %g s, abort %g s); "
                 "lr %g per worker x %d = %g (optim.lr_scaling = %s)",
                 world, world > 1 ? "s" : "", dist_local_world(), cfg->batch_size * world,
                 comm_name, rd ? reducer_bucket_count(rd) : 0,
                 rd && reducer_bucket_count(rd) == 1 ? "" : "s", (double)cfg->bucket_mb, (double)cfg->first_bucket_mb,
                 cfg->overlap ? "during backward" : "after backward",
                 strcmp(cfg->compress, "fp16") == 0 ? "fp16" : "fp32",
                 cfg->stall_warn_s > 0 || cfg->stall_abort_s > 0 ? "on" : "off", (double)cfg->stall_warn_s,
                 (double)cfg->stall_abort_s, (double)cfg->lr,
                 strcmp(cfg->lr_scaling, "linear") == 0 ? world : 1, base_lr, cfg->lr_scaling);
    }
    timeline *tl = NULL;
    if (cfg->timeline[0]) {
        tl = timeline_create(); /* a collective: every rank has the same config */
        net_set_node_hook(nt, timeline_node_hook, tl);
        if (rd) reducer_set_timeline(rd, tl);
    }
    float *buffers_host = world > 1 ? cnt_malloc((nt->n_buffers ? nt->n_buffers : 1) * sizeof(float)) : NULL;
    float *params_host = world > 1 ? cnt_malloc(nt->n_params * sizeof(float)) : NULL;

    long step = 0;
    int start_epoch = 0;
    int status = resume_state(cfg, nt, &opt, &ls, &start_epoch, &step);
    long first_step = step;
    double t_start = time_now();
    double win_t0 = t_start, win_wait = 0, win_loss_steps = 0, win_comm = 0, win_exposed = 0;
    long win_images = 0, win_steps = 0, win_skipped0 = ls.skipped;
    int done = status != CNT_OK;
    eval_result er = {0};
    /* The schedule spans every configured epoch; train.max_steps only stops
     * early, so a stopped run resumes onto the same schedule. */
    long schedule_steps = steps_per_epoch * cfg->epochs;
    for (int epoch = start_epoch; epoch < cfg->epochs && !done && step < total_steps; epoch++) {
        r.epochs = epoch + 1;
        loader_start_epoch(train_ld, epoch);
        double ep_t0 = time_now(), ep_wait = 0, ep_comm = 0, ep_exposed = 0;
        long ep_early = 0, ep_buckets = 0;
        long ep_images = 0, ep_steps = 0;
        for (;;) {
            if (tl) timeline_set_step(tl, step + 1);
            double tw = time_now();
            const batch *b = loader_next(train_ld);
            double tw1 = time_now(), wait = tw1 - tw;
            if (!b) break;
            if (tl) timeline_record(tl, "data wait", "data", TIMELINE_TID_TRAIN, tw, tw1);
            win_wait += wait;
            ep_wait += wait;
            double lr = schedule_lr(cfg, base_lr, warmup_start, step, steps_per_epoch, schedule_steps);
            float *x_dev;
            int32_t *labels_dev;
            stager_put(st, b, &x_dev, &labels_dev);
            if (buffers_before) be->copy(buffers_before, nt->buffers, nt->n_buffers * sizeof(float));
            double tf = time_now();
            net_forward(nt, x_dev, b->n, 1);
            be->softmax_xent(b->n, classes, net_logits(nt), labels_dev, cfg->label_smoothing, loss_dev, dlogits);
            /* The loss scale enters through the loss's gradient; the logged loss stays unscaled. */
            float scale = (float)ls.scale;
            if (scale != 1.0f) be->axpy((size_t)b->n * classes, scale, dlogits, dlogits, 0);
            if (dlogits_aux) {
                /* Inception's auxiliary head: loss + aux_weight * aux_loss. */
                be->softmax_xent(b->n, classes, net_aux_logits(nt), labels_dev, cfg->label_smoothing,
                                 aux_loss_dev, dlogits_aux);
                be->axpy((size_t)b->n * classes, cfg->aux_weight * scale, dlogits_aux, dlogits_aux, 0);
                be->axpy(1, cfg->aux_weight, aux_loss_dev, loss_dev, 1);
            }
            double tb = time_now();
            if (tl) timeline_record(tl, "forward", "forward", TIMELINE_TID_TRAIN, tf, tb);
            if (rd) fault_stall_point(step + 1);
            if (rd) reducer_begin(rd, step + 1);
            net_backward(nt, dlogits, dlogits_aux);
            stager_release(st); /* backward was the last reader of the batch */
            double tr = time_now();
            if (tl) timeline_record(tl, "backward", "backward", TIMELINE_TID_TRAIN, tb, tr);
            if (rd) {
                /* Wait for the buckets still in flight; the update divides the sums by world. */
                reducer_stats rs;
                reducer_finish(rd, &rs);
                if (tl) timeline_record(tl, "allreduce wait", "comm", TIMELINE_TID_TRAIN, tr, time_now());
                win_comm += rs.comm_ms;
                win_exposed += rs.exposed_ms;
                ep_comm += rs.comm_ms;
                ep_exposed += rs.exposed_ms;
                ep_early += rs.early;
                ep_buckets += rs.buckets;
            }
            double to = time_now();
            int apply = 1;
            if (overflow_dev) {
                /* The one host wait per step that loss scaling costs (PyTorch's
                 * GradScaler has it too): whether to update at all. */
                float found = 0;
                if (rd) reducer_wait_sums(rd); /* NCCL: wait under the watchdog, not in a copy */
                be->zero(overflow_dev, sizeof(float));
                be->find_nonfinite(nt->n_params, nt->grads, overflow_dev);
                be->download(&found, overflow_dev, sizeof found);
                int failed;
                apply = loss_scaler_update(&ls, found != 0, &failed);
                if (failed) {
                    char why[1024];
                    snprintf(why, sizeof why, "%s", cnt_err_msg()); /* cnt_err_set writes the buffer it reads */
                    status = cnt_err_set("train.precision = %s, train.loss_scaling = %s, step %ld: %s",
                                         cfg->precision, cfg->loss_scaling, step + 1, why);
                    done = 1;
                    break;
                }
            }
            /* Sums over ranks of S-times gradients: the update divides both out. */
            if (apply) optim_step(&opt, nt, (float)lr, (float)(1.0 / ((double)world * (double)scale)));
            if (tl) timeline_record(tl, "optimizer", "optimizer", TIMELINE_TID_TRAIN, to, time_now());
            /* A skipped step's loss counts when it is finite (its gradients
             * overflowed, not its forward): the host has waited for it anyway. */
            int count_loss = apply;
            if (!apply) {
                float l;
                be->download(&l, loss_dev, sizeof l);
                count_loss = isfinite(l);
                /* and its forward's batch-norm statistics go: a skipped step changes nothing */
                if (nt->n_buffers) be->copy(nt->buffers, buffers_before, nt->n_buffers * sizeof(float));
            }
            if (count_loss) {
                be->axpy(1, 1.0f, loss_dev, loss_acc_dev, win_loss_steps > 0);
                win_loss_steps++;
            }
            step++;
            win_steps++;
            ep_steps++;
            win_images += b->n;
            ep_images += b->n;
            if (step == first_step + 1) {
                float l;
                be->download(&l, loss_dev, sizeof l);
                r.first_loss = l;
                if (!isfinite(l)) log_warn("the first step's loss is %g", (double)l);
            }
            int last = step == total_steps;
            if (step % cfg->log_every == 0 || last) {
                float acc = 0;
                if (win_loss_steps > 0) be->download(&acc, loss_acc_dev, sizeof acc);
                /* Mean loss over every rank's counted steps (all ranks log at the
                 * same steps; a step skipped for a forward overflow on one rank
                 * is left out there only). */
                double lsum[2] = {acc, win_loss_steps};
                dist_allreduce_sum_f64(lsum, 2);
                double now = time_now();
                /* none when no step of the window had a finite loss (loss scaling skips) */
                int have_loss = lsum[1] > 0;
                double loss = have_loss ? lsum[0] / lsum[1] : NAN;
                char loss_s[32];
                if (have_loss) snprintf(loss_s, sizeof loss_s, "%.4f", loss);
                else snprintf(loss_s, sizeof loss_s, "-");
                double ips = world * win_images / (now - win_t0);
                double wait_ms = 1e3 * win_wait / win_steps;
                double eta = (now - t_start) / (step - first_step) * (total_steps - step);
                char eta_s[32];
                format_duration(eta, eta_s, sizeof eta_s);
                char comm[96] = "";
                if (rd)
                    snprintf(comm, sizeof comm, "  comm %.2f ms (exposed %.2f ms)", win_comm / win_steps,
                             win_exposed / win_steps);
                char scaling[96] = "";
                if (loss_scaler_active(&ls))
                    snprintf(scaling, sizeof scaling, "  loss scale %g (%ld step%s skipped)", ls.scale,
                             ls.skipped - win_skipped0, ls.skipped - win_skipped0 == 1 ? "" : "s");
                win_skipped0 = ls.skipped;
                log_info("epoch %d/%d  step %ld/%ld  loss %s  lr %.5f  %.1f img/s  data wait %.2f ms%s%s  eta %s",
                         epoch + 1, cfg->epochs, step, total_steps, loss_s, lr, ips, wait_ms, comm, scaling, eta_s);
                metrics_step(&m, epoch + 1, step, loss, lr, ips, wait_ms, win_comm / win_steps,
                             win_exposed / win_steps, ls.scale, ls.skipped);
                if (have_loss) r.last_loss = loss;
                if (have_loss && !isfinite(loss)) {
                    log_error("training diverged: loss is %g at step %ld; lower optim.lr", loss, step);
                    done = 1;
                    break;
                }
                win_t0 = now;
                win_wait = 0;
                win_images = 0;
                win_steps = 0;
                win_comm = 0;
                win_exposed = 0;
                win_loss_steps = 0;
            }
            if (last) {
                done = 1;
                break;
            }
        }
        if (status != CNT_OK) break; /* every rank: the decision rests on allreduced gradients */
        double ep_secs = time_now() - ep_t0;
        /* Batch-norm statistics stay per rank during training (as in Horovod);
         * evaluate every shard with rank 0's, so N ranks score what one would. */
        if (world > 1) {
            if (check_params_identical(nt, params_host) != CNT_OK) {
                status = CNT_ERR;
                break;
            }
            log_info("epoch %d/%d: parameters bit-identical on all %d ranks", epoch + 1, cfg->epochs, world);
            if (nt->n_buffers) broadcast_device(be, nt->buffers, nt->n_buffers, buffers_host);
        }
        evaluate(nt, test_ld, st, loss_dev, dlogits, &er);
        /* Unreadable images of every rank's shard (collective on all ranks). */
        double skipped[2] = {(double)loader_skipped(train_ld), (double)loader_skipped(test_ld)};
        dist_allreduce_sum_f64(skipped, 2);
        if (skipped[0] > 0 || skipped[1] > 0)
            log_warn("epoch %d/%d: %.0f unreadable training image%s replaced, %.0f unreadable test image%s left out "
                     "(each named once above)",
                     epoch + 1, cfg->epochs, skipped[0], skipped[0] == 1 ? "" : "s", skipped[1],
                     skipped[1] == 1 ? "" : "s");
        double ep_ips = ep_secs > 0 ? world * ep_images / ep_secs : 0;
        double ep_wait_ms = ep_steps ? 1e3 * ep_wait / ep_steps : 0;
        log_info("epoch %d/%d done in %.1f s (%.1f img/s, data wait %.2f ms/step = %.1f%%): test loss %.4f  "
                 "top-1 %.2f%%  top-5 %.2f%%",
                 epoch + 1, cfg->epochs, ep_secs, ep_ips, ep_wait_ms, ep_secs > 0 ? 100.0 * ep_wait / ep_secs : 0,
                 er.loss, 100 * er.top1, 100 * er.top5);
        metrics_epoch(&m, epoch + 1, ep_secs, ep_ips, ep_wait_ms, ep_secs > 0 ? ep_wait / ep_secs : 0,
                      ep_steps ? ep_comm / ep_steps : 0, ep_steps ? ep_exposed / ep_steps : 0, (long)skipped[0],
                      (long)skipped[1]);
        if (rd)
            log_info("epoch %d/%d communication: %.2f ms/step allreduce, %.2f ms/step not hidden by backward; "
                     "%ld of %ld buckets started during backward",
                     epoch + 1, cfg->epochs, ep_steps ? ep_comm / ep_steps : 0, ep_steps ? ep_exposed / ep_steps : 0,
                     ep_early, ep_buckets);
        if (er.nonfinite > 0 && rank == 0)
            log_warn("epoch %d/%d: %ld test sample%s had inf or NaN logits, counted as wrong%s", epoch + 1, cfg->epochs,
                     er.nonfinite, er.nonfinite == 1 ? "" : "s",
                     strcmp(cfg->precision, "fp16") == 0
                         ? " (fp16 activations beyond 65504 overflow; train.precision = bf16 has fp32's range)"
                         : "");
        metrics_eval(&m, epoch + 1, step, er.loss, er.top1, er.top5);
        /* Checkpoints hold whole epochs only: a resumed run restarts at an epoch boundary. */
        int complete = ep_steps == steps_per_epoch;
        int due = cfg->ckpt_every > 0 && ((epoch + 1) % cfg->ckpt_every == 0 || epoch + 1 == cfg->epochs || done);
        if (rank == 0 && complete && due && save_checkpoint(cfg, nt, &opt, &ls, epoch + 1, step) != CNT_OK) {
            status = CNT_ERR;
            break;
        }
    }
    r.seconds = time_now() - t_start;
    r.steps = step;
    r.loss_scale = ls.scale;
    r.skipped_steps = ls.skipped;
    r.eval_loss = er.loss;
    r.top1 = er.top1;
    r.top5 = er.top5;
    r.img_per_sec = r.seconds > 0 ? (double)(step - first_step) * cfg->batch_size * world / r.seconds : 0;
    if (status == CNT_OK)
        log_info("finished: %ld steps in %.1f s, test top-1 %.2f%%, top-5 %.2f%%; metrics in %s/metrics.jsonl", step,
                 r.seconds, 100 * r.top1, 100 * r.top5, cfg->out_dir);
    else
        log_info("stopped after %ld steps (%.1f s); metrics so far in %s/metrics.jsonl", step, r.seconds,
                 cfg->out_dir);

    if (status == CNT_OK && !isfinite(r.last_loss)) status = cnt_err_set("training diverged (loss %g)", r.last_loss);
    if (tl && status == CNT_OK) {
        /* Every rank gets here (the loop ends at the same step everywhere);
         * the write is a collective gather to rank 0. A rank that failed
         * (rank 0 alone, writing a checkpoint) skips it: the others are in
         * other collectives, and main() ends the job (dist_abort). */
        net_set_node_hook(nt, NULL, NULL);
        if (rd) reducer_set_timeline(rd, NULL);
        char path[2 * CONFIG_STR + 8];
        path_in_out_dir(cfg, cfg->timeline, path, sizeof path);
        if (timeline_write(tl, path) != CNT_OK) {
            status = CNT_ERR;
        } else if (rank == 0) {
            log_info("timeline: %s (open in chrome://tracing or ui.perfetto.dev)", path);
        }
        timeline_free(tl);
        tl = NULL;
    }
    metrics_close(&m);
    reducer_free(rd);
    timeline_free(tl); /* a failed run wrote none: freed once the reducer's thread, which records into it, is gone */
    free(buffers_host);
    free(params_host);
    stager_free(st);
    be->free(loss_dev);
    be->free(overflow_dev);
    be->free(buffers_before);
    be->free(loss_acc_dev);
    be->free(dlogits);
    be->free(aux_loss_dev);
    be->free(dlogits_aux);
    optim_free(&opt);
    loader_free(train_ld);
    loader_free(test_ld);
    net_free(nt);
    input_free(&d);
    if (res) *res = r;
    return status;
}

int trainer_summary_config(const config *cfg, FILE *out) {
    input_data d;
    if (input_load(cfg, &d) != CNT_OK) return CNT_ERR;
    net *nt = build_model(backend_cpu(), cfg, d.train.c, d.train.h, d.train.w, d.train.classes, 1);
    input_free(&d);
    if (!nt) return CNT_ERR;
    fprintf(out, "model %s\n", cfg->model_name);
    net_print_summary(nt, out);
    net_free(nt);
    return CNT_OK;
}

int trainer_summary_model(const char *name, FILE *out) {
    int c, h, w;
    if (!zoo_has(name)) return cnt_err_set("unknown model '%s' (available: %s)", name, zoo_names());
    zoo_imagenet_shape(name, &c, &h, &w);
    config cfg;
    config_defaults(&cfg);
    snprintf(cfg.model_name, sizeof cfg.model_name, "%s", name);
    net *nt = build_model(backend_cpu(), &cfg, c, h, w, 1000, 1);
    if (!nt) return CNT_ERR;
    fprintf(out, "model %s\n", name);
    net_print_summary(nt, out);
    net_free(nt);
    return CNT_OK;
}
