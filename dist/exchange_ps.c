/*
 * dist/exchange_ps.c - the parameter-server version of the exchange
 * (dist/exchange.h) on the workers' side, over dist/ps.h: gradients pushed
 * shard by shard during backward, the servers' updated parameters pulled
 * after it, so the worker's own optimizer never runs and the servers keep
 * the momentum. A server rank gets the same object from exchange_create and
 * leaves it at once for its own entry point (train/ps_server.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "dist/dist.h"
#include "dist/exchange_impl.h"

typedef struct ps_x {
    exchange base;
    ps *p;
    int server;              /* this rank serves */
    size_t *shard_end;       /* [servers] from exchange_attach */
} ps_x;

static ps_x *of(exchange *x) { return (ps_x *)x; }

int exchange_shards(int servers, const net *nt, size_t **shard_end) {
    int n = nt->n_param_tensors;
    size_t *ends = cnt_malloc((size_t)n * sizeof *ends);
    for (int j = 0; j < n; j++) {
        const param_info *pi = &nt->param_info[n - 1 - j];
        ends[j] = pi->offset + pi->count;
    }
    *shard_end = cnt_malloc((size_t)servers * sizeof **shard_end);
    int rc = ps_plan(ends, n, servers, *shard_end);
    free(ends);
    if (rc != CNT_OK) {
        free(*shard_end);
        *shard_end = NULL;
    }
    return rc;
}

static int psx_attach(exchange *x, net *nt) {
    ps_x *s = of(x);
    if (exchange_shards(ps_servers(s->p), nt, &s->shard_end) != CNT_OK) return CNT_ERR;
    ps_worker_bind(s->p, nt->be, nt->params, nt->grads, nt->n_params, s->shard_end);
    net_set_grad_hook(nt, ps_grads_ready, s->p);
    return CNT_OK;
}

static void psx_set_timeline(exchange *x, timeline *tl) { ps_set_timeline(of(x)->p, tl); }
static void psx_trace_written(exchange *x, int written) { ps_worker_trace_written(of(x)->p, written); }

/* Logs each server's shard, then says how the workers use them. */
static void psx_describe(const exchange *x, int batch, char *buf, size_t len) {
    const ps_x *s = (const ps_x *)x;
    const exchange_opts *o = &x->o;
    int K = ps_servers(s->p), world = x->world;
    for (int k = 0; k < K; k++) {
        size_t b = k ? s->shard_end[k - 1] : 0;
        log_info("parameter server %d of %d (rank %d): parameters [%zu, %zu) of the flat buffer, %.2f MiB", k + 1, K,
                 ps_server_rank(s->p, k), b, s->shard_end[k], (double)(s->shard_end[k] - b) * sizeof(float) / (1 << 20));
    }
    char mode[96];
    if (o->ps_sync) snprintf(mode, sizeof mode, "synchronously");
    else if (o->ps_max_staleness < 0) snprintf(mode, sizeof mode, "asynchronously (no staleness bound)");
    else snprintf(mode, sizeof mode, "asynchronously (at most %d steps ahead of the slowest worker)", o->ps_max_staleness);
    char ranks[48];
    if (K == 1) snprintf(ranks, sizeof ranks, "rank %d", world);
    else snprintf(ranks, sizeof ranks, "ranks %d-%d", world, world + K - 1);
    snprintf(buf, len,
             "%d worker%s and %d parameter server%s (%s), global batch %d; gradients pushed to the servers shard by "
             "shard during backward, parameters pulled after it, %s, over MPI through host memory; stall limits "
             "warn %g s, abort %g s",
             world, world == 1 ? "" : "s", K, K == 1 ? "" : "s", ranks, batch * world, mode, o->reducer.stall_warn_s,
             o->reducer.stall_abort_s);
}

static void psx_seed(exchange *x, const ps_shape *shape, const float *params, const float *momentum) {
    if (dist_rank() != 0) return;
    dist_phase("start-up: parameter-server seeding");
    ps_worker_init_servers(of(x)->p, shape, params, momentum); /* momentum NULL: zeros */
}

/* The momentum lives on the servers; the parameters rank 0 pulled after the
 * last step are theirs when they are synchronous, and may be older than
 * theirs when not. */
static void psx_fetch_state(exchange *x, float *params, float *momentum) {
    int async = !x->o.ps_sync;
    if (momentum || async) ps_worker_fetch_state(of(x)->p, async ? params : NULL, momentum);
}

static void psx_begin(exchange *x, long step, double lr) { ps_begin_step(of(x)->p, step, lr); }

/* The servers updated: the rest of the gradients out, their parameters in. */
static void psx_finish(exchange *x, exchange_stats *st) {
    ps_finish_step(of(x)->p, &st->ps);
    st->updated = 1;
}

/* Synchronous workers meet every step; asynchronous ones do not wait for
 * each other: server 0 names the step they all stop after (dist/ps.h). A
 * signal a server got counts as the worker's own. */
static int psx_agree_stop(exchange *x, long step, int signal) {
    ps *p = of(x)->p;
    if (!signal) signal = ps_servers_stop(p);
    if (x->o.ps_sync) return exchange_agree_lagged(x, step, signal);
    ps_note_stop(p, signal);
    int sig;
    long at = ps_stop_step(p, &sig);
    return at > 0 && step >= at ? sig : 0;
}

/* Asynchronous workers hold parameters of different ages: all take the
 * servers'; rank 0 asks how stale the applied gradients were. */
static int psx_epoch_end(exchange *x, ps_staleness *window) {
    if (x->o.ps_sync) return 0;
    ps *p = of(x)->p;
    ps_worker_sync_params(p);
    if (dist_rank() != 0) return 0;
    dist_phase("parameter-server staleness");
    ps_worker_fetch_staleness(p, window);
    return 1;
}

/* The servers may stop; rank 0 logs what each did. */
static void psx_end(exchange *x) {
    ps *p = of(x)->p;
    int K = ps_servers(p);
    ps_server_stats *st = dist_rank() == 0 ? cnt_calloc((size_t)K, sizeof *st) : NULL;
    dist_phase("parameter-server goodbye");
    ps_worker_bye(p, st);
    for (int k = 0; st && k < K; k++)
        log_info("parameter server %d of %d (rank %d): %ld updates applying %.0f gradients (mean staleness %.2f, max "
                 "%.0f); %.1f s waiting for gradients, %.2f s updating; %.1f MiB in and out per update",
                 k + 1, K, ps_server_rank(p, k), st[k].steps, st[k].stale.applied,
                 st[k].stale.applied > 0 ? st[k].stale.sum / st[k].stale.applied : 0, st[k].stale.max, st[k].wait_s,
                 st[k].update_s, st[k].steps ? st[k].bytes / st[k].steps / (1 << 20) : 0);
    free(st);
}

static void psx_free(exchange *x, int failed) {
    (void)failed;
    ps_x *s = of(x);
    ps_free(s->p);
    free(s->shard_end);
}

static ps *psx_server(exchange *x) { return of(x)->server ? of(x)->p : NULL; }

static const char *psx_record_why(const exchange *x) {
    (void)x;
    return "dist.mode = ps: the workers push and pull through the host";
}

static const exchange_ops ps_ops = {
    .attach = psx_attach,
    .set_timeline = psx_set_timeline,
    .describe = psx_describe,
    .seed = psx_seed,
    .fetch_state = psx_fetch_state,
    .begin = psx_begin,
    .finish = psx_finish,
    .record_why = psx_record_why,
    .agree_stop = psx_agree_stop,
    .epoch_end = psx_epoch_end,
    .end = psx_end,
    .trace_written = psx_trace_written,
    .free = psx_free,
    .server = psx_server,
};

/* The last dist.ps_servers ranks become servers (dist/ps.h); on a worker,
 * dist_rank and dist_world are then the workers'. Every rank sees the same
 * world and config (the ranks agreed on it), so every rank refuses alike. */
int exchange_ps_create(const exchange_opts *o, exchange **out) {
    int world = dist_job_world(), servers = o->ps_servers;
    if (servers >= world && !CNT_HAVE_MPI)
        return cnt_err_set("dist.mode = ps with dist.ps_servers = %d needs at least %d ranks under mpirun, and this "
                           "binary was built without MPI (MPI=0): install Open MPI (make deps) and rebuild",
                           servers, servers + 1);
    if (servers >= world)
        return cnt_err_set("dist.mode = ps with dist.ps_servers = %d needs at least %d ranks (the servers and one "
                           "worker), this job has %d: start more (mpirun -np %d) or lower dist.ps_servers",
                           servers, servers + 1, world, servers + 1);
    dist_phase("start-up: parameter-server split");
    ps_x *s = cnt_calloc(1, sizeof *s);
    s->base.ops = &ps_ops;
    s->base.traits = (exchange_traits){.mode_name = o->ps_sync ? "ps-sync" : "ps-async",
                                       .serves = 1,
                                       .stale = !o->ps_sync,
                                       .keeps_state = 1,
                                       .wait_phase = "parameter-server wait"};
    s->base.o = *o;
    s->server = dist_split_servers(servers);
    s->p = ps_create(servers, o->ps_sync ? 0 : o->ps_max_staleness);
    s->base.world = dist_world();
    *out = &s->base;
    return CNT_OK;
}
