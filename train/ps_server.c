/*
 * train/ps_server.c - a parameter server's run (see train/ps_server.h): the
 * server side of dist/ps.h with this project's optimizer as its update.
 */
#include "train/ps_server.h"

#include "common/check.h"
#include "dist/dist.h"
#include "dist/ps.h"
#include "model/zoo.h"
#include "train/optim.h"
#include "train/run.h"
#include "train/stop.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct server_ctx {
    const net *nt;
    optimizer *opt;
    float *params; /* the shard's, from opt->base */
    int k, servers, rank; /* for the stop line */
    int stop;      /* the stop signal this server got and said, 0: none */
} server_ctx;

static void server_update(void *ctx, size_t begin, size_t end, float *grads, double lr, float scale) {
    server_ctx *c = ctx;
    optim_step_shard(c->opt, c->nt, c->params, grads, (float)lr, scale, begin, end);
}

/* A stop signal (train/stop.h) to a server: said once here; ps_serve passes
 * it to the workers, which stop and checkpoint as if they had got it. */
static int server_stop(void *ctx) {
    server_ctx *c = ctx;
    if (!c->stop && (c->stop = stop_pending()) != 0)
        log_warn("parameter server %d of %d (rank %d): %s: the workers stop after their next step and rank 0 writes "
                 "a checkpoint; serving until they have",
                 c->k + 1, c->servers, c->rank, stop_signal_name(c->stop));
    return c->stop;
}

/* The model rank 0 describes, laid out (offsets) without its buffers. */
static net *server_model(const config *cfg, const backend *be, const ps_shape *sh) {
    net *nt = net_create(be, (int)sh->c, (int)sh->h, (int)sh->w, (int)sh->classes);
    zoo_options zo = config_zoo_options(cfg, NULL); /* described, never run: fp32 */
    int out, aux;
    if (zoo_build(nt, cfg->model_name, &zo, &out, &aux) != CNT_OK) {
        cnt_err_prefix("model '%s' on %dx%dx%d input with %d classes", cfg->model_name, (int)sh->c, (int)sh->h,
                       (int)sh->w, (int)sh->classes);
        net_free(nt);
        return NULL;
    }
    net_param_layout(nt);
    return nt;
}

/* Holds its shard's parameters and momentum (and ps_serve a receive buffer
 * per worker) and nothing else of the model; rank 0 tells what each server
 * holds and did (exchange_describe, exchange_end). */
int ps_server_run(const config *cfg, exchange *x) {
    ps *p = exchange_server(x);
    CNT_ASSERT(p != NULL);
    dist_phase("parameter server");
    ps_shape sh;
    ps_server_shape(p, &sh);
    const backend *be = backend_cpu();
    be->set_threads(cfg->threads);
    net *nt = server_model(cfg, be, &sh);
    size_t *shard_end = NULL;
    if (!nt) return CNT_ERR;
    if (exchange_shards(ps_servers(p), nt, &shard_end) != CNT_OK) {
        cnt_err_prefix("model %s", cfg->model_name);
        net_free(nt);
        return CNT_ERR;
    }
    int k = ps_server_index(p); /* this server's shard */
    CNT_ASSERT(k >= 0);
    size_t b = k ? shard_end[k - 1] : 0, len = shard_end[k] - b;
    optimizer opt;
    optim_opts oo = config_optim_opts(cfg);
    optim_init_shard(&opt, nt, &oo, b, b + len);
    float *params = be->alloc((len ? len : 1) * sizeof(float));
    server_ctx ctx = {nt, &opt, params, k, ps_servers(p), dist_job_rank(), 0};
    timeline *tl = NULL;
    int status = CNT_OK;
    if (cfg->timeline[0]) {
        /* the server's own events, spooled to its part as it serves (a
         * killed run keeps them), sent to rank 0 at the end (dist/ps.h) */
        tl = timeline_create_local();
        char part[2 * CONFIG_STR + 32], process[64];
        snprintf(process, sizeof process, "rank %d (parameter server %d)", dist_job_rank(), k);
        status = run_timeline_part(cfg, dist_job_rank(), part, sizeof part);
        if (status == CNT_OK && timeline_spool(tl, part, dist_job_rank(), process) != CNT_OK)
            status = cnt_err_prefix("dist.timeline");
        ps_set_timeline(p, tl);
    }
    if (status == CNT_OK) {
        ps_server_stats st;
        ps_serve(p, params, opt.momentum_buf, nt->n_params, shard_end, server_update, server_stop, &ctx, &st);
    }
    optim_free(&opt);
    be->free(params);
    free(shard_end);
    net_free(nt);
    timeline_free(tl);
    return status;
}
