/*
 * train/memory.c - a run's memory estimate and the check against what the
 * node has (see train/memory.h).
 */
#include "train/memory.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "common/hostmem.h"
#include "dist/dist.h"
#include "model/zoo.h"
#include "train/loss_scale.h"
#include "train/stager.h"

#define GIB 1073741824.0

/* A loader's ring (loader_create: prefetch + 1 slots of a batch of images,
 * floats or bytes, and labels) and its per-sample tables (permutation,
 * unreadable marks). */
static size_t loader_bytes(const dataset *ds, const loader_options *o) {
    size_t sample = (size_t)ds->c * ds->h * ds->w * (o->u8 ? 1 : sizeof(float)) + sizeof(int32_t);
    size_t per_sample = sizeof(int) + 1 + sizeof(int);
    return (size_t)(o->prefetch + 1) * o->batch * sample + (size_t)ds->n * per_sample;
}

size_t memory_server_bytes(size_t param_bytes, int servers, int workers) {
    size_t n = param_bytes / sizeof(float), shard = (n + (size_t)servers - 1) / (size_t)servers;
    return (3 + (size_t)workers) * shard * sizeof(float);
}

size_t memory_share(size_t avail, int ranks, int servers, size_t server_bytes) {
    size_t taken = (size_t)servers * server_bytes;
    if (ranks <= servers || taken >= avail) return 0;
    return (avail - taken) / (size_t)(ranks - servers);
}

int memory_estimate(const config *cfg, const backend *be, const input_data *d, const loader_options *train,
                    const loader_options *eval, const exchange_footprint *xf, run_memory *m) {
    static const exchange_footprint alone = {.host_per_param_byte = 0, .momentum_on_worker = 1};
    if (!xf) xf = &alone;
    memset(m, 0, sizeof *m);
    const dataset *ds = &d->train;
    m->max_batch = train->batch > eval->batch ? train->batch : eval->batch;
    int B = m->max_batch;

    /* The net as make_model will build it, without net_finalize's allocations. */
    net *nt = net_create(be, ds->c, ds->h, ds->w, ds->classes);
    net_set_layout(nt, backend_layout_choose(cfg->layout, be, cfg->precision, ds->h, ds->w));
    net_set_math(nt, cfg->precision);
    net_set_fusion(nt, cfg->fuse);
    net_set_activations(nt, config_activations(cfg, be));
    zoo_options zo = config_zoo_options(cfg, be);
    int out, aux;
    if (zoo_build(nt, cfg->model_name, &zo, &out, &aux) != CNT_OK) {
        net_free(nt);
        return CNT_ERR;
    }
    net_memory_estimate(nt, B, &m->net);
    size_t P = nt->n_params * sizeof(float), Bf = nt->n_buffers * sizeof(float);
    net_free(nt);

    /* the stepper (train/step.c) and the optimizer (train/optim.c) */
    size_t slot_host, slot_dev;
    stager_slot_bytes(B, ds->c, ds->h * ds->w, train->u8, &slot_host, &slot_dev);
    size_t logits = (size_t)B * ds->classes * sizeof(float);
    m->momentum = cfg->momentum > 0.0f ? P : 0; /* a checkpoint's, on the host */
    m->step = 2 * slot_dev + (aux >= 0 ? 2 : 1) * logits;
    if (config_loss_scale_opts(cfg).mode != LOSS_SCALE_NONE) m->step += Bf;
    m->accumulated = cfg->accumulate > 1 ? P + sizeof(float) : 0;

    /* host memory */
    m->loader = loader_bytes(&d->train, train) + loader_bytes(&d->test, eval);
    int cpu = be->is_cpu;
    m->host_copies = (cpu ? 0 : 2 * slot_host) + logits; /* pinned stager slots; evaluation's logits (train/eval.c) */
    int world = dist_world();
    if (world > 1) m->host_copies += P + Bf; /* the parameters compared after each epoch, rank 0's statistics */
    m->host_copies += (size_t)(xf->host_per_param_byte * (double)P); /* the exchange's staging (dist/exchange.h) */
    if ((dist_rank() == 0 && (cfg->ckpt_every > 0 || cfg->ckpt_every_steps > 0)) || config_resume(cfg) != RESUME_NONE)
        m->host_copies += P + Bf + m->momentum; /* a checkpoint's state on the host (train/state.c) */
    if (cfg->compress == REDUCER_COMPRESS_POWERSGD && world > 1 &&
        (cfg->ckpt_every > 0 || cfg->ckpt_every_steps > 0 || config_resume(cfg) != RESUME_NONE))
        m->host_copies += P; /* every rank: PowerSGD's error summed for a checkpoint (train/run_ckpt.c) */

    /* parameter-server workers keep no momentum on the device (the servers do) */
    m->device_momentum = xf->momentum_on_worker ? m->momentum : 0;
    m->device_exchange = (size_t)(xf->device_per_param_byte * (double)P); /* dist/exchange.h */
    m->device = m->net.total + m->device_momentum + m->step + m->accumulated + m->device_exchange;
    m->host = m->loader + m->host_copies;
    if (cfg->dist_mode == DIST_MODE_PS) m->server = memory_server_bytes(P, cfg->ps_servers, world);
    return CNT_OK;
}

/* "38.2" for 38.2 GiB: one decimal from 10 GiB on, two below. */
static const char *gib(char *buf, size_t len, double bytes) {
    snprintf(buf, len, bytes >= 10 * GIB ? "%.1f" : "%.2f", bytes / GIB);
    return buf;
}

/* Workers of this node that share this rank's GPU (GPU local_rank % GPUs;
 * parameter servers, this node's last local ranks, use none). */
static int ranks_on_this_gpu(void) {
    char devs[4096];
    int n = backend_describe_devices(devs, sizeof devs);
    int local = dist_local_world() - dist_local_servers(), mine = dist_local_rank();
    if (n < 1) return 1;
    int shared = 0;
    for (int r = 0; r < local; r++) shared += r % n == mine % n;
    return shared > 0 ? shared : 1;
}

/* One pool of memory: what the run needs of it, what is available to all
 * ranks sharing it, and how to say it. */
typedef enum pool_kind {
    POOL_ALL,    /* the CPU backend: device memory is host memory */
    POOL_DEVICE, /* a GPU's memory */
    POOL_HOST    /* host memory beside a GPU */
} pool_kind;

typedef struct pool {
    pool_kind kind;
    size_t need;        /* per rank */
    size_t avail;       /* for every rank sharing it; 0: unknown */
    int ranks;          /* ranks sharing it, servers included */
    const char *bound;  /* what limits avail: "MemAvailable", "cgroup limit", "ulimit -v", "free on the GPU" */
    int servers;        /* of which parameter servers (host memory only) */
    size_t server;      /* what each of them needs */
} pool;

/* What each worker sharing the pool may use. */
static size_t pool_share(const pool *p) { return memory_share(p->avail, p->ranks, p->servers, p->server); }

static const char *pool_what(const pool *p) {
    return p->kind == POOL_DEVICE ? " of GPU memory" : p->kind == POOL_HOST ? " of host memory" : "";
}

/* "22.61 GiB available (MemAvailable)" and, for several ranks, " for 2 ranks (11.30 GiB each)"
 * or " for 2 workers beside 1 parameter server of 0.01 GiB (11.30 GiB each)". */
static void describe_avail(const pool *p, char *buf, size_t len) {
    char a[32], e[32], s[32];
    if (!p->avail)
        snprintf(buf, len, "available memory unknown, not checked");
    else if (p->servers > 0)
        snprintf(buf, len, "%s GiB available (%s) for %d worker%s beside %d parameter server%s of %s GiB (%s GiB each "
                 "worker)",
                 gib(a, sizeof a, (double)p->avail), p->bound, p->ranks - p->servers,
                 p->ranks - p->servers == 1 ? "" : "s", p->servers, p->servers == 1 ? "" : "s",
                 gib(s, sizeof s, (double)p->server), gib(e, sizeof e, (double)pool_share(p)));
    else if (p->ranks > 1)
        snprintf(buf, len, "%s GiB available (%s) for %d ranks (%s GiB each)", gib(a, sizeof a, (double)p->avail),
                 p->bound, p->ranks, gib(e, sizeof e, (double)pool_share(p)));
    else
        snprintf(buf, len, "%s GiB available (%s)", gib(a, sizeof a, (double)p->avail), p->bound);
}

static int pool_fits(const pool *p) { return p->avail == 0 || p->need <= pool_share(p); }

/* Appends ", NAME X" (the first without the comma) to buf. */
static void add_part(char *buf, size_t len, const char *name, size_t bytes) {
    char x[32];
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s%s %s", used ? ", " : "", name, gib(x, sizeof x, (double)bytes));
}

/* The message for a pool the run does not fit in. */
static int refuse(const config *cfg, const run_memory *m, const loader_options *eval, const pool *p) {
    char parts[512] = "", avail[256], need[32];
    const net_memory *n = &m->net;
    if (p->kind != POOL_HOST) {
        add_part(parts, sizeof parts, "activations", n->activations);
        add_part(parts, sizeof parts, m->device_momentum ? "parameters+gradients+momentum" : "parameters+gradients",
                 n->params + n->grads + n->buffers + m->device_momentum);
        add_part(parts, sizeof parts, "backend workspace", n->workspace);
        if (n->kept) add_part(parts, sizeof parts, "kept filters", n->kept);
        add_part(parts, sizeof parts, "stager and logits", m->step);
        if (m->accumulated) add_part(parts, sizeof parts, "accumulated gradients", m->accumulated);
        if (m->device_exchange) add_part(parts, sizeof parts, "compression's buffers", m->device_exchange);
    }
    if (p->kind != POOL_DEVICE) {
        add_part(parts, sizeof parts, "loader", m->loader);
        add_part(parts, sizeof parts, "host copies", m->host_copies);
    }
    describe_avail(p, avail, sizeof avail);
    return cnt_err_set("model %s with batch %d (train.batch_size %d; evaluation batch %d, train.eval_batch_size "
                       "%d) needs about %s GiB%s per rank (%s) but this node has %s: lower train.batch_size (a larger "
                       "train.accumulate keeps the global batch) / train.eval_batch_size%s, or set "
                       "train.memory_check = false to start anyway",
                       cfg->model_name, m->max_batch, cfg->batch_size, eval->batch, cfg->eval_batch_size,
                       gib(need, sizeof need, (double)p->need), pool_what(p), parts, avail,
                       p->ranks > 1 ? (p->kind == POOL_DEVICE ? " or give each rank its own GPU"
                                                             : " or run fewer ranks per node")
                                    : "");
}

int memory_check(const config *cfg, const backend *be, const input_data *d, const loader_options *train,
                 const loader_options *eval, const exchange_footprint *xf) {
    int cpu = be->is_cpu;
    hostmem hm;
    hostmem_query(&hm);
    size_t dev_free = 0, dev_total = 0;
    if (!cpu) be->mem_info(&dev_free, &dev_total);
    /* Why a barrier: every rank of a node divides the same free memory by
     * the ranks sharing it, so none may take its share before all have
     * measured (a rank ahead would shrink the others' shares). */
    dist_phase("start-up: memory check");
    if (dist_world() > 1) dist_barrier();

    run_memory m;
    if (memory_estimate(cfg, be, d, train, eval, xf, &m) != CNT_OK) return CNT_OK;
    pool pools[2];
    int n_pools = 0;
    int servers = dist_local_servers();
    if (cpu) {
        pools[n_pools++] = (pool){POOL_ALL, m.device + m.host, hm.available, dist_local_world(), hm.bound, servers,
                                  m.server};
    } else {
        pools[n_pools++] = (pool){POOL_DEVICE, m.device, dev_free, ranks_on_this_gpu(), "free on the GPU", 0, 0};
        pools[n_pools++] = (pool){POOL_HOST, m.host, hm.available, dist_local_world(), hm.bound, servers, m.server};
    }

    char line[1024] = "", avail[256], x[32];
    for (int i = 0; i < n_pools; i++) {
        const pool *p = &pools[i];
        describe_avail(p, avail, sizeof avail);
        size_t used = strlen(line);
        snprintf(line + used, sizeof line - used, "%sabout %s GiB%s per rank, %s", i ? "; " : "",
                 gib(x, sizeof x, (double)p->need), pool_what(p), avail);
    }
    log_info("memory: %s", line);

    for (int i = 0; i < n_pools; i++) {
        if (pool_fits(&pools[i])) continue;
        if (cfg->memory_check) return refuse(cfg, &m, eval, &pools[i]);
        log_warn("memory: this run needs more%s than is available; train.memory_check = false: starting anyway",
                 pool_what(&pools[i]));
    }
    return CNT_OK;
}
