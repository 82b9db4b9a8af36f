/*
 * dist/exchange_impl.h - what the versions of the exchange (dist/exchange.h)
 * implement, for dist/exchange*.c only.
 *
 * A version is a table of operations (the backend's pattern) and a struct
 * that starts with `exchange` (its own fields after it). exchange.c calls
 * each operation through a wrapper: an operation a version does not have is
 * NULL and the wrapper does what "nothing exchanged" means.
 */
#ifndef CNT_EXCHANGE_IMPL_H
#define CNT_EXCHANGE_IMPL_H

#include "dist/exchange.h"

typedef struct exchange_ops {
    int (*connect)(exchange *x, const backend *be);
    int (*attach)(exchange *x, net *nt);
    void (*set_timeline)(exchange *x, timeline *tl);
    void (*describe)(const exchange *x, int batch, char *buf, size_t len);
    void (*seed)(exchange *x, const ps_shape *shape, const float *params, const float *momentum);
    void (*fetch_state)(exchange *x, float *params, float *momentum);
    void (*begin)(exchange *x, long step, double lr);
    void (*finish)(exchange *x, exchange_stats *st);
    void (*wait_sums)(exchange *x);
    /* recorded steps (exchange_record_why); record_why NULL only where
     * nothing is exchanged (exchange_none), every version says */
    const char *(*record_why)(const exchange *x);
    void (*record)(exchange *x, int set);
    void (*replayed)(exchange *x, long step, int set, exchange_stats *st);
    int (*agree_stop)(exchange *x, long step, int signal); /* only with several workers */
    int (*epoch_end)(exchange *x, ps_staleness *window);
    void (*end)(exchange *x);
    void (*trace_written)(exchange *x, int written); /* rank 0, after the trace */
    void (*free)(exchange *x, int failed); /* the version's own fields; exchange.c frees the struct */
    ps *(*server)(exchange *x);            /* this rank's server link, NULL on a worker */
    powersgd *(*powersgd)(exchange *x);    /* dist.compress = powersgd's state, NULL: none */
    /* exchange_allreduce_time_us; NULL where there is no allreduce to size */
    double (*allreduce_time_us)(exchange *x, size_t bytes, int reps);
} exchange_ops;

struct exchange {
    const exchange_ops *ops;
    exchange_opts o;
    exchange_traits traits;
    int world;               /* workers: dist_world() after any split */
    int nccl;                /* exchange_connect chose NCCL */
};

/* The versions: each allocates its struct (exchange first) and fills the
 * base. exchange_allreduce_create never fails; exchange_ps_create CNT_ERR
 * with a message when the job is too small for its servers. */
exchange *exchange_allreduce_create(const exchange_opts *o);
int exchange_ps_create(const exchange_opts *o, exchange **out);
/* A version with ranks that meet at every step: the stop signal of the step
 * before, any rank's (dist_max_lagged). */
int exchange_agree_lagged(exchange *x, long step, int signal);

#endif
