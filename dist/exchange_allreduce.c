/*
 * dist/exchange_allreduce.c - the allreduce version of the exchange
 * (dist/exchange.h): the gradient reducer (dist/reducer.h) over NCCL on the
 * GPUs or over MPI through host memory (MPI_Allreduce or our ring). Every
 * rank sums every bucket; each rank's optimizer then takes the same step.
 *
 * The transport is decided at exchange_connect, the same way on every rank
 * (it rests on a sum over the ranks): NCCL when dist.backend names it, or
 * with auto when every rank has a GPU and the build has NCCL (in fp32, fp16
 * or PowerSGD's factors, its arithmetic then on the GPU); through host
 * memory otherwise, by the named algorithm
 * or, with auto, by the job's shape (dist_auto_host_backend).
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/check.h"
#include "common/cpus.h"
#include "dist/dist.h"
#include "dist/exchange_impl.h"
#include "dist/nccl.h"

typedef struct allreduce_x {
    exchange base;
    const backend *be;
    dist_nccl *nccl;         /* NULL: gradients go through host memory */
    char auto_why[96];       /* dist.backend = auto through host memory: the shape it chose by */
    char psgd_what[320];     /* dist.compress = powersgd: what travels */
    reducer *rd;             /* from exchange_attach */
} allreduce_x;

static allreduce_x *of(exchange *x) { return (allreduce_x *)x; }

/* NCCL when dist.backend asks for it by name, or with auto when it can be
 * had; *out NULL for MPI. CNT_ERR: named and impossible. */
static int choose_nccl(const exchange_opts *o, const backend *be, dist_nccl **out) {
    *out = NULL;
    int named = o->backend == DIST_BACKEND_NCCL, is_auto = o->backend == DIST_BACKEND_AUTO;
    if (!named && !(is_auto && dist_world() > 1)) return CNT_OK;
    /* Ranks on the CPU rule NCCL out. Whether ranks share a GPU is judged by
     * dist_nccl_create from the GPUs' PCI bus ids: a rank's count of visible
     * GPUs says nothing when CUDA_VISIBLE_DEVICES gives each rank its own. */
    double cpu_ranks = be->is_cpu;
    dist_phase("start-up: gradient transport choice");
    if (dist_world() > 1) dist_allreduce_sum_f64(&cpu_ranks, 1);
    if (is_auto && (cpu_ranks > 0 || !CNT_HAVE_NCCL)) return CNT_OK;
    if (named && cpu_ranks > 0)
        return cnt_err_set("dist.backend = nccl: %g rank%s run%s on the CPU (train.device = %s); NCCL needs a GPU "
                           "per rank (see ./trainer --devices)",
                           cpu_ranks, cpu_ranks == 1 ? "" : "s", cpu_ranks == 1 ? "s" : "", o->device);
#if CNT_HAVE_NCCL
    dist_nccl *nc = dist_nccl_create();
    if (!nc) {
        if (named) return CNT_ERR; /* the message names dist.backend=nccl and what to do */
        if (dist_rank() == 0)
            log_warn("dist.backend = auto: NCCL did not start (%s); the gradients go through host memory",
                     cnt_err_msg());
        return CNT_OK;
    }
    if (dist_rank() == 0)
        log_info("dist: NCCL took %.0f MiB of GPU memory on rank 0 for its buffers (connected at start-up, so the "
                 "memory check sees them)",
                 (double)dist_nccl_own_bytes(nc) / 1048576.0);
    *out = nc;
    return CNT_OK;
#else
    return cnt_err_set("dist.backend = nccl: this binary was built without NCCL (rebuild where `make` finds it, "
                       "or use dist.backend = mpi)");
#endif
}

/* dist.backend = auto through host memory: the same choice on every rank,
 * from the nodes (MPI_COMM_TYPE_SHARED) and how many hold several ranks. */
static void choose_host_backend(allreduce_x *a) {
    exchange_opts *o = &a->base.o;
    if (o->backend != DIST_BACKEND_AUTO || a->nccl || dist_world() <= 1) return;
    /* the job's shape, as dist_init learnt it: with an allreduce exchange every rank is a worker */
    int crowded, nodes = dist_nodes(&crowded);
    o->backend = dist_auto_host_backend(nodes, crowded);
    if (nodes <= 1) snprintf(a->auto_why, sizeof a->auto_why, "dist.backend = auto: one node");
    else
        snprintf(a->auto_why, sizeof a->auto_why, "dist.backend = auto: %d nodes, %s", nodes,
                 crowded == 0 ? "one rank each" : crowded == nodes ? "several ranks each" : "some with several ranks");
}

/* dist.powersgd_threads = auto: 1 on a CPU rank (its cores compute
 * backward while the communication thread compresses: 2 threads there made
 * a 2-rank run 3.5x slower); on a GPU rank, whose host cores wait for the
 * GPU, half its share of the node's CPUs (those it may run on, or the
 * node's split among its ranks, whichever is fewer), at most 4: the passes
 * are bound by memory, which a few threads fill, and the loader's threads
 * need the rest. Not measured on a GPU rank yet. */
static int powersgd_auto_threads(const backend *be) {
    if (be->is_cpu) return 1;
    cpus_mask m;
    int allowed = cpus_process(&m), ranks = dist_local_world() > 0 ? dist_local_world() : 1;
    int share = cpus_online() / ranks;
    if (allowed < share) share = allowed;
    int t = share / 2;
    return t < 1 ? 1 : t > 4 ? 4 : t;
}

/* dist.powersgd_threads, once the transport is known: auto resolved (NCCL's
 * ranks compress on the GPU: 1, unused), a count above 1 on CPU ranks
 * warned about. */
static void resolve_powersgd_threads(exchange *x, const backend *be) {
    reducer_opts *ro = &x->o.reducer;
    if (ro->compress != REDUCER_COMPRESS_POWERSGD) return;
    if (ro->psgd_threads == 0) ro->psgd_threads = x->nccl ? 1 : powersgd_auto_threads(be);
    else if (be->is_cpu && ro->psgd_threads > 1 && dist_rank() == 0)
        log_warn("dist.powersgd_threads = %d on CPU ranks: its threads take the cores backward computes on "
                 "(2 ranks on 2 cores trained 3.5x slower with 2 than with 1, docs/data-parallel.md (e4)); "
                 "auto takes 1 there",
                 ro->psgd_threads);
}

static int ar_connect(exchange *x, const backend *be) {
    allreduce_x *a = of(x);
    a->be = be;
    if (choose_nccl(&x->o, be, &a->nccl) != CNT_OK) return CNT_ERR;
    x->nccl = a->nccl != NULL;
    choose_host_backend(a);
    resolve_powersgd_threads(x, be);
    if (x->o.backend == DIST_BACKEND_HIER) {
        dist_phase("start-up: hierarchical allreduce's communicators");
        return dist_hier_init();
    }
    return CNT_OK;
}

static int ar_attach(exchange *x, net *nt) {
    allreduce_x *a = of(x);
    reducer_opts ro = x->o.reducer;
    ro.algo = dist_backend_algo(x->o.backend);
    ro.nccl = a->nccl;
    if (ro.in_flight > 1 && (ro.nccl || ro.algo == DIST_ALGO_MPI)) {
        /* only auto gets here: the config refuses the key with mpi and nccl named */
        if (dist_rank() == 0)
            log_info("dist.buckets_in_flight = %d: dist.backend = auto chose %s, which sums one bucket at a time",
                     ro.in_flight, ro.nccl ? "NCCL" : "MPI_Allreduce (one node)");
        ro.in_flight = 1;
    }
    x->o.reducer.in_flight = ro.in_flight > 1 ? ro.in_flight : 1;
    powersgd_tensor *tensors = NULL;
    if (ro.compress == REDUCER_COMPRESS_POWERSGD) {
        tensors = powersgd_net_tensors(nt);
        ro.tensors = tensors;
        ro.n_tensors = nt->n_param_tensors;
        CNT_ASSERT(ro.psgd_threads >= 1); /* resolve_powersgd_threads, at connect */
    }
    dist_phase("start-up: gradient reducer");
    a->rd = reducer_create(nt->be, nt->grads, nt->n_params, &ro);
    if (tensors) {
        char how[80];
        if (ro.nccl) snprintf(how, sizeof how, "on the GPU after backward, the whole gradient at once");
        else snprintf(how, sizeof how, "on %d thread%s", ro.psgd_threads, ro.psgd_threads == 1 ? "" : "s");
        size_t values, wire;
        int k = powersgd_summary(tensors, ro.n_tensors, ro.psgd_rank, &values, &wire);
        snprintf(a->psgd_what, sizeof a->psgd_what,
                 "PowerSGD rank %d after %ld uncompressed step%s (%d of %d tensors, %.1f%% of the values; %.2f MiB "
                 "a step instead of %.2f; its arithmetic %s)",
                 ro.psgd_rank, ro.psgd_start, ro.psgd_start == 1 ? "" : "s", k, ro.n_tensors,
                 100.0 * (double)values / (double)nt->n_params, (double)wire * sizeof(float) / 1048576.0,
                 (double)nt->n_params * sizeof(float) / 1048576.0, how);
    }
    free(tensors);
    net_set_grad_hook(nt, reducer_grads_ready, a->rd);
    return CNT_OK;
}

static void ar_set_timeline(exchange *x, timeline *tl) { reducer_set_timeline(of(x)->rd, tl); }

static void ar_describe(const exchange *x, int batch, char *buf, size_t len) {
    const allreduce_x *a = (const allreduce_x *)x;
    const exchange_opts *o = &x->o;
    int world = x->world, buckets = a->rd ? reducer_bucket_count(a->rd) : 0;
    char hier[160] = "";
    if (o->backend == DIST_BACKEND_HIER) {
        int nodes, local;
        dist_hier_shape(&nodes, &local);
        snprintf(hier, sizeof hier, "the hierarchical allreduce (%d node%s: to each node's leader, the ring between "
                 "the leaders, back)", nodes, nodes == 1 ? "" : "s");
    }
    char flight[48] = "";
    if (o->reducer.in_flight > 1) snprintf(flight, sizeof flight, "; %d in flight at once", o->reducer.in_flight);
    const char *algo_name = a->nccl ? "NCCL (on the GPUs, its own stream; times reported one step late)"
                            : o->backend == DIST_BACKEND_RING ? "ring"
                            : o->backend == DIST_BACKEND_HIER ? hier
                                                              : "MPI_Allreduce";
    char comm_name[320];
    snprintf(comm_name, sizeof comm_name, "%s%s%s%s", algo_name, a->auto_why[0] ? " (" : "", a->auto_why,
             a->auto_why[0] ? ")" : "");
    snprintf(buf, len,
             "%d rank%s (%d on this node), global batch %d; gradients allreduced with %s in %d bucket%s (%g MiB, "
             "first %g MiB%s) %s, %s on the wire; stall watchdog %s (warn %g s, abort %g s)",
             world, world > 1 ? "s" : "", dist_local_world(), batch * world, comm_name, buckets,
             buckets == 1 ? "" : "s", o->bucket_mb, o->first_bucket_mb, flight,
             o->reducer.overlap ? "during backward" : "after backward",
             o->reducer.compress == REDUCER_COMPRESS_FP16 ? "fp16" : a->psgd_what[0] ? a->psgd_what : "fp32",
             o->reducer.stall_warn_s > 0 || o->reducer.stall_abort_s > 0 ? "on" : "off", o->reducer.stall_warn_s,
             o->reducer.stall_abort_s);
}

static void ar_begin(exchange *x, long step, double lr) {
    (void)lr;
    reducer_begin(of(x)->rd, step);
}

/* The buckets still in flight; the sums stay in the gradient buffer. */
static void ar_finish(exchange *x, exchange_stats *st) { reducer_finish(of(x)->rd, &st->rs); }

static void ar_wait_sums(exchange *x) { reducer_wait_sums(of(x)->rd); }

static const char *ar_record_why(const exchange *x) {
    /* known from exchange_connect on: the stepper asks before exchange_attach */
    if (((const allreduce_x *)x)->nccl) {
        if (x->o.reducer.compress != REDUCER_COMPRESS_POWERSGD) return NULL;
        return "dist.compress = powersgd changes the step at dist.powersgd_start (its buckets give way to the "
               "compression's two sums), which one recording cannot follow";
    }
    return "with more than one rank the gradients go through host memory, summed by the host (dist.backend = nccl "
           "records NCCL's allreduces with the step)";
}

static void ar_record(exchange *x, int set) { reducer_record(of(x)->rd, set); }

static void ar_replayed(exchange *x, long step, int set, exchange_stats *st) {
    reducer_replayed(of(x)->rd, step, set, &st->rs);
}

static void ar_free(exchange *x, int failed) {
    allreduce_x *a = of(x);
#if CNT_HAVE_NCCL
    /* A failed run may have left collectives no peer will join: it aborts
     * them before the reducer frees its device buffers (PowerSGD's), whose
     * cudaFree would wait for them; otherwise the communicator goes after
     * the reducer that used it. */
    if (failed) {
        dist_nccl_abort(a->nccl);
        reducer_free(a->rd);
    } else {
        reducer_free(a->rd);
        dist_nccl_free(a->nccl);
    }
#else
    (void)failed;
    reducer_free(a->rd);
#endif
}

static powersgd *ar_powersgd(exchange *x) { return of(x)->rd ? reducer_powersgd(of(x)->rd) : NULL; }

static double ar_allreduce_time_us(exchange *x, size_t bytes, int reps) {
    allreduce_x *a = of(x);
    if (!a->nccl) return dist_allreduce_time_us(dist_backend_algo(x->o.backend), bytes, reps);
#if CNT_HAVE_NCCL
    size_t n = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
    float *buf = a->be->alloc(n * sizeof(float));
    double us = dist_nccl_allreduce_time_us(a->nccl, a->be->native_stream(), buf, n, reps,
                                            x->o.reducer.stall_warn_s, x->o.reducer.stall_abort_s);
    a->be->free(buf);
    return us;
#else
    CNT_ASSERT(!"an exchange without NCCL built in chose NCCL");
    return 0;
#endif
}

static const exchange_ops allreduce_ops = {
    .connect = ar_connect,
    .attach = ar_attach,
    .set_timeline = ar_set_timeline,
    .describe = ar_describe,
    .begin = ar_begin,
    .finish = ar_finish,
    .wait_sums = ar_wait_sums,
    .record_why = ar_record_why,
    .record = ar_record,
    .replayed = ar_replayed,
    .agree_stop = exchange_agree_lagged,
    .free = ar_free,
    .powersgd = ar_powersgd,
    .allreduce_time_us = ar_allreduce_time_us,
};

exchange *exchange_allreduce_create(const exchange_opts *o) {
    allreduce_x *a = cnt_calloc(1, sizeof *a);
    a->base.ops = &allreduce_ops;
    a->base.o = *o;
    a->base.world = dist_world();
    a->base.traits = (exchange_traits){.mode_name = "allreduce", .reduces = 1, .wait_phase = "allreduce wait"};
    return &a->base;
}
