/*
 * dist/exchange.c - the exchange's one entry (see dist/exchange.h): the
 * choice of version, the wrappers every caller goes through, and the none
 * version (one rank), which is the wrappers' defaults and nothing else.
 *
 * The versions live in dist/exchange_allreduce.c (the reducer, over NCCL or
 * MPI) and dist/exchange_ps.c (parameter servers).
 */
#include "dist/exchange.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "dist/dist.h"
#include "dist/exchange_impl.h"
#include "dist/fault.h"

/* One rank: the step's gradients are already the sums; nothing to do. */
static const exchange_ops none_ops = {0};

static exchange none = {.ops = &none_ops, .traits = {.mode_name = "allreduce"}, .world = 1};

exchange *exchange_none(void) { return &none; }

int exchange_create(const exchange_opts *opts, exchange **out) {
    *out = NULL;
    if (opts->mode == DIST_MODE_PS) return exchange_ps_create(opts, out);
    /* one GPU may still try the NCCL path when asked for by name */
    *out = dist_world() > 1 || opts->backend == DIST_BACKEND_NCCL ? exchange_allreduce_create(opts) : &none;
    return CNT_OK;
}

ps *exchange_server(exchange *x) { return x->ops->server ? x->ops->server(x) : NULL; }

powersgd *exchange_powersgd(exchange *x) { return x->ops->powersgd ? x->ops->powersgd(x) : NULL; }

int exchange_is_server(const exchange *x) { return exchange_server((exchange *)x) != NULL; }

int exchange_connect(exchange *x, const backend *be) { return x->ops->connect ? x->ops->connect(x, be) : CNT_OK; }

exchange_footprint exchange_footprint_for(const exchange_opts *opts, int world, int nccl) {
    if (opts->mode == DIST_MODE_PS) /* a worker stages its gradients and the parameters (dist/ps.c) */
        return (exchange_footprint){.host_per_param_byte = 2, .momentum_on_worker = 0};
    reducer_compress z = opts->reducer.compress;
    if (world == 1) return (exchange_footprint){.momentum_on_worker = 1};
    if (nccl) /* NCCL's fp16 halves (dist_nccl_half_staging), or PowerSGD's error on the GPU */
        return (exchange_footprint){.device_per_param_byte = z == REDUCER_COMPRESS_FP16       ? 0.5
                                                             : z == REDUCER_COMPRESS_POWERSGD ? 1
                                                                                              : 0,
                                    .momentum_on_worker = 1};
    /* the reducer's staging buffer (dist/reducer_mpi.c), and its fp16 copy or
     * PowerSGD's error (a value per compressed value, nearly all of them; its
     * factors and the tensors it sends whole take a few percent more) */
    double host = 1 + (z == REDUCER_COMPRESS_FP16 ? 0.5 : z == REDUCER_COMPRESS_POWERSGD ? 1 : 0);
    return (exchange_footprint){.host_per_param_byte = host, .momentum_on_worker = 1};
}

exchange_footprint exchange_footprint_of(const exchange *x) { return exchange_footprint_for(&x->o, x->world, x->nccl); }

exchange_traits exchange_traits_of(const exchange *x) { return x->traits; }

int exchange_workers(const exchange *x) { return x->world; }

int exchange_sized_allreduce(const exchange *x, const char **name) {
    if (!x->ops->allreduce_time_us || x->world < 2) return 0;
    if (x->nccl) *name = "NCCL";
    else {
        dist_algo a = dist_backend_algo(x->o.backend);
        *name = a == DIST_ALGO_RING ? "the ring" : a == DIST_ALGO_HIER ? "the hierarchical allreduce" : "MPI_Allreduce";
    }
    return 1;
}

int exchange_nccl(const exchange *x) { return x->nccl; }

int exchange_powersgd_threads(const exchange *x) {
    const reducer_opts *ro = &x->o.reducer;
    /* the allreduce version resolves the count at connect; the others never compress so (the config) */
    return ro->compress == REDUCER_COMPRESS_POWERSGD && !x->nccl ? ro->psgd_threads : 0;
}

double exchange_allreduce_time_us(exchange *x, size_t bytes, int reps) {
    CNT_ASSERT(x->ops->allreduce_time_us && x->world >= 2); /* exchange_sized_allreduce's 1 */
    return x->ops->allreduce_time_us(x, bytes, reps);
}

void exchange_set_bucket(exchange *x, size_t values, double mb) {
    CNT_ASSERT(values > 0 && x != &none);
    x->o.reducer.bucket = values;
    x->o.bucket_mb = mb;
}

int exchange_attach(exchange *x, net *nt) { return x->ops->attach ? x->ops->attach(x, nt) : CNT_OK; }

void exchange_set_timeline(exchange *x, timeline *tl) {
    if (x->ops->set_timeline) x->ops->set_timeline(x, tl);
}

int exchange_describe(const exchange *x, int batch, char *buf, size_t len) {
    if (!x->ops->describe) {
        snprintf(buf, len, "1 rank, no gradient communication");
        return 1;
    }
    x->ops->describe(x, batch, buf, len);
    return 0;
}

void exchange_seed(exchange *x, const ps_shape *shape, const float *params, const float *momentum) {
    if (x->ops->seed) x->ops->seed(x, shape, params, momentum);
}

void exchange_fetch_state(exchange *x, float *params, float *momentum) {
    if (x->ops->fetch_state) x->ops->fetch_state(x, params, momentum);
}

void exchange_begin(exchange *x, long step, double lr) {
    fault_stall_point(step); /* tests only: CNT_TEST_STALL (dist/fault.h), in a world of one too */
    if (!x->ops->begin) return;
    x->ops->begin(x, step, lr);
}

void exchange_finish(exchange *x, exchange_stats *st) {
    exchange_stats unused;
    if (!st) st = &unused;
    memset(st, 0, sizeof *st);
    if (x->ops->finish) x->ops->finish(x, st);
}

const char *exchange_record_why(const exchange *x) { return x->ops->record_why ? x->ops->record_why(x) : NULL; }

void exchange_record(exchange *x, int set) {
    if (x->ops->record) x->ops->record(x, set);
}

void exchange_replayed(exchange *x, long step, int set, exchange_stats *st) {
    fault_stall_point(step); /* as exchange_begin: a recorded step's exchange began in the launch */
    exchange_stats unused;
    if (!st) st = &unused;
    memset(st, 0, sizeof *st);
    if (x->ops->replayed) x->ops->replayed(x, step, set, st);
}

void exchange_wait_sums(exchange *x) {
    if (x->ops->wait_sums) x->ops->wait_sums(x);
}

int exchange_agree_stop(exchange *x, long step, int signal) {
    if (x->world == 1 || !x->ops->agree_stop) return signal;
    return x->ops->agree_stop(x, step, signal);
}

int exchange_agree_lagged(exchange *x, long step, int signal) {
    (void)x;
    (void)step;
    dist_phase("stop-signal check after a step");
    return (int)dist_max_lagged(signal);
}

void exchange_agree_stop_drain(exchange *x) {
    if (x->world == 1) return;
    dist_phase("stop-signal check after the last step");
    dist_max_lagged_drain();
}

int exchange_epoch_end(exchange *x, ps_staleness *window) {
    return x->ops->epoch_end ? x->ops->epoch_end(x, window) : 0;
}

void exchange_end(exchange *x) {
    if (x->ops->end) x->ops->end(x);
}

void exchange_trace_written(exchange *x, int written) {
    if (x->ops->trace_written) x->ops->trace_written(x, written);
}

void exchange_free(exchange *x, int failed) {
    if (!x || x == &none) return;
    if (x->ops->free) x->ops->free(x, failed);
    free(x);
}
