/*
 * dist/ps.c - parameter servers, synchronous (see dist/ps.h).
 *
 * One step, seen from both sides (W workers, K servers):
 *
 *   worker w                                server k
 *   backward writes shard k's gradients
 *     -> header {PUSH, step, lr}, shard  ->  waits for every worker's PUSH of
 *        (one Isend each, no wait)          the step, each into its own buffer
 *   ... more shards, more backward          grads = g_0 + g_1 + ... (worker order)
 *   backward ends; pushes what is left      update(shard, lr, 1/W)
 *   waits for every server's parameters <-  Isend of the shard's parameters
 *   uploads them                             to every worker
 *
 * A server's traffic per step is W gradient shards in and W parameter
 * shards out: it grows with the workers, where a ring allreduce moves
 * 2(W-1)/W of the model per rank whatever W (docs/data-parallel.md).
 *
 * Waits poll (MPI_Testsome / MPI_Testall, sleeping up to 1 ms between polls
 * once a short spin has passed) so they can name the ranks they wait for
 * when dist.stall_warn_s / stall_abort_s pass (dist_wait_limits).
 */
#include "dist/ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "dist/wait.h"

enum { PS_PUSH = 1, PS_STATE = 2, PS_BYE = 3 };
enum { TAG_SHAPE = 40, TAG_INIT_PARAMS, TAG_INIT_MOMENTUM, TAG_HEAD, TAG_GRAD, TAG_PARAMS, TAG_MOMENTUM, TAG_STATS };

int ps_plan(const size_t *tensor_end, int n_tensors, int servers, size_t *shard_end) {
    if (servers < 1) return cnt_err_set("dist.ps_servers = %d: at least one server", servers);
    if (servers > n_tensors)
        return cnt_err_set("dist.ps_servers = %d exceeds the model's %d parameter tensors: a shard holds whole "
                           "tensors, so at most %d servers can each hold one",
                           servers, n_tensors, n_tensors);
    size_t n = tensor_end[n_tensors - 1];
    int j = 0; /* tensors [0, j) are in earlier shards */
    for (int k = 0; k < servers - 1; k++) {
        double target = (double)n * (k + 1) / servers;
        /* the first shard end at or past the target, or the one before if nearer;
         * every later shard keeps at least one tensor */
        int lo = j + 1, hi = n_tensors - (servers - 1 - k);
        int best = lo;
        for (int e = lo; e <= hi; e++) {
            best = e;
            if ((double)tensor_end[e - 1] >= target) {
                if (e > lo && target - (double)tensor_end[e - 2] < (double)tensor_end[e - 1] - target) best = e - 1;
                break;
            }
        }
        shard_end[k] = tensor_end[best - 1];
        j = best;
    }
    shard_end[servers - 1] = n;
    return CNT_OK;
}

#if CNT_HAVE_MPI
#include <mpi.h>

struct ps {
    MPI_Comm comm;
    int servers, workers, sync;
    int rank;                /* job rank */
    /* worker */
    const backend *be;
    float *params_dev, *grads_dev;
    size_t n;
    const size_t *shard_end; /* [servers] */
    float *host_grads;       /* [n] staging */
    float *host_params;      /* [n] staging */
    int64_t (*head)[4];      /* [servers] headers in flight */
    MPI_Request *send_req;   /* [2 * servers]: header and shard */
    MPI_Request *recv_req;   /* [servers] */
    long step;
    double lr;
    size_t ready;            /* gradients final in [0, ready) */
    int pushed;              /* shards pushed this step */
    int early;
};

static size_t shard_begin(const ps *p, int k) { return k ? p->shard_end[k - 1] : 0; }

int ps_workers(const ps *p) { return p->workers; }
int ps_servers(const ps *p) { return p->servers; }
int ps_server_rank(const ps *p, int k) { return p->workers + k; }

ps *ps_create(int servers, int sync) {
    CNT_ASSERT(sync == 1 && servers >= 1 && servers < dist_job_world());
    ps *p = cnt_calloc(1, sizeof *p);
    p->servers = servers;
    p->workers = dist_job_world() - servers;
    p->sync = sync;
    p->rank = dist_job_rank();
    /* Why a duplicate: the PS messages then never match the trainer's own
     * point-to-point traffic (the ring, the watchdog). */
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &p->comm, &req));
    dist_wait_bounded(1, &req, "ps_create", DIST_WAIT_SLEEP);
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(p->comm, MPI_ERRORS_RETURN));
    return p;
}

void ps_free(ps *p) {
    if (!p) return;
    DIST_MPI_CHECK(MPI_Comm_free(&p->comm));
    free(p->host_grads);
    free(p->host_params);
    free(p->head);
    free(p->send_req);
    free(p->recv_req);
    free(p);
}

/* "2, 3": the job ranks first_rank + i of the i in [0, n) with missing[i]. */
static void name_ranks(int n, const int *missing, int first_rank, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o + 16 < len; i++)
        if (missing[i]) o += (size_t)snprintf(buf + o, len - o, "%s%d", o ? ", " : "", first_rank + i);
}

/* The stall limits and the growing sleep of one bounded wait. */
typedef struct stall {
    double t0, warn_s, abort_s, next_warn;
    long sleep_us;
    int warned;
} stall;

static void stall_start(stall *w) {
    memset(w, 0, sizeof *w);
    dist_wait_limits(&w->warn_s, &w->abort_s);
    w->t0 = time_now();
    w->next_warn = w->warn_s;
}

/* Between polls: past a limit, names the missing ranks (warns, or ends the
 * job); then spins, or sleeps 10 us doubling to 1 ms. */
static void stall_poll(stall *w, int n, const int *missing, int first_rank, const char *what) {
    double waited = time_now() - w->t0;
    int abort_now = w->abort_s > 0 && waited >= w->abort_s;
    if (abort_now || (w->warn_s > 0 && waited >= w->next_warn)) {
        char who[256];
        name_ranks(n, missing, first_rank, who, sizeof who);
        if (abort_now) {
            log_error("stall: rank %d has waited %.0f s for %s from rank(s) %s (stopped, hung or slow); ending the "
                      "job (dist.stall_abort_s = %g: raise it if that can legitimately take longer)",
                      dist_job_rank(), waited, what, who, w->abort_s);
            dist_abort(1);
        }
        log_warn("stall: rank %d has waited %.0f s for %s from rank(s) %s", dist_job_rank(), waited, what, who);
        w->warned = 1;
        while (w->next_warn <= waited) w->next_warn += w->warn_s;
    }
    if (waited < 50e-6) return;
    w->sleep_us = w->sleep_us ? (w->sleep_us * 2 < 1000 ? w->sleep_us * 2 : 1000) : 10;
    struct timespec ts = {0, w->sleep_us * 1000};
    nanosleep(&ts, NULL);
}

static void stall_end(const stall *w, const char *what) {
    if (w->warned) log_warn("stall over: %s arrived after %.1f s", what, time_now() - w->t0);
}

/* Completes every request in reqs[0 .. n) (request i waits on job rank
 * first_rank + i), naming the ranks still missing past the limits. */
static void wait_all_named(int n, MPI_Request *reqs, int first_rank, const char *what) {
    int *missing = cnt_calloc((size_t)n, sizeof *missing);
    stall w;
    stall_start(&w);
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            int f = 1;
            if (reqs[i] != MPI_REQUEST_NULL) DIST_MPI_CHECK(MPI_Test(&reqs[i], &f, MPI_STATUS_IGNORE));
            missing[i] = !f;
            left += !f;
        }
        if (!left) break;
        stall_poll(&w, n, missing, first_rank, what);
    }
    stall_end(&w, what);
    free(missing);
}

/* Sends and receives of n floats in pieces MPI's int counts can hold. */
#define PS_MAX_COUNT ((size_t)1 << 30)

static void check_count(size_t n) {
    if (n > PS_MAX_COUNT) cnt_fatal("a parameter-server shard of %zu values exceeds MPI's count limit: use more "
                                    "servers (dist.ps_servers)", n);
}

/* ---------------------------------------------------------------- worker */

void ps_worker_bind(ps *p, const backend *be, float *params, float *grads, size_t n, const size_t *shard_end) {
    p->be = be;
    p->params_dev = params;
    p->grads_dev = grads;
    p->n = n;
    p->shard_end = shard_end;
    p->host_grads = cnt_malloc(n * sizeof(float));
    p->host_params = cnt_malloc(n * sizeof(float));
    p->head = cnt_calloc((size_t)p->servers, sizeof *p->head);
    p->send_req = cnt_malloc(2 * (size_t)p->servers * sizeof *p->send_req);
    p->recv_req = cnt_malloc((size_t)p->servers * sizeof *p->recv_req);
    for (int k = 0; k < 2 * p->servers; k++) p->send_req[k] = MPI_REQUEST_NULL;
    for (int k = 0; k < p->servers; k++) {
        check_count(p->shard_end[k] - shard_begin(p, k));
        p->recv_req[k] = MPI_REQUEST_NULL;
    }
}

static int64_t lr_bits(double lr) {
    int64_t b;
    memcpy(&b, &lr, sizeof b);
    return b;
}

static double lr_of(int64_t b) {
    double lr;
    memcpy(&lr, &b, sizeof lr);
    return lr;
}

/* Sends a header to server k and waits for it to go (small: immediate). */
static void send_head(ps *p, int k, int64_t kind, long step) {
    int64_t h[4] = {kind, step, 0, lr_bits(p->lr)};
    MPI_Request r;
    DIST_MPI_CHECK(MPI_Isend(h, 4, MPI_INT64_T, ps_server_rank(p, k), TAG_HEAD, p->comm, &r));
    char what[96];
    snprintf(what, sizeof what, "a message to parameter server %d to be received", k);
    wait_all_named(1, &r, ps_server_rank(p, k), what);
}

void ps_worker_init_servers(ps *p, const ps_shape *shape, const float *params, const float *momentum) {
    CNT_ASSERT(p->rank == 0 && p->shard_end);
    int64_t s[4] = {shape->c, shape->h, shape->w, shape->classes};
    float *zeros = momentum ? NULL : cnt_calloc(p->n ? p->n : 1, sizeof(float));
    const float *m = momentum ? momentum : zeros;
    MPI_Request *r = cnt_malloc(3 * (size_t)p->servers * sizeof *r);
    for (int k = 0; k < p->servers; k++) {
        size_t b = shard_begin(p, k), len = p->shard_end[k] - b;
        int to = ps_server_rank(p, k);
        DIST_MPI_CHECK(MPI_Isend(s, 4, MPI_INT64_T, to, TAG_SHAPE, p->comm, &r[3 * k]));
        DIST_MPI_CHECK(MPI_Isend(params + b, (int)len, MPI_FLOAT, to, TAG_INIT_PARAMS, p->comm, &r[3 * k + 1]));
        DIST_MPI_CHECK(MPI_Isend(m + b, (int)len, MPI_FLOAT, to, TAG_INIT_MOMENTUM, p->comm, &r[3 * k + 2]));
    }
    for (int k = 0; k < p->servers; k++)
        wait_all_named(3, &r[3 * k], ps_server_rank(p, k), "the initial parameters to be received");
    free(r);
    free(zeros);
}

void ps_begin_step(ps *p, long step, double lr) {
    CNT_ASSERT(p->shard_end && p->pushed == 0);
    p->step = step;
    p->lr = lr;
    p->ready = 0;
    p->early = 0;
}

/* Pushes shard k: its gradients to the host, then the header and the shard
 * on their way (completed in ps_finish_step). */
static void push_shard(ps *p, int k) {
    size_t b = shard_begin(p, k), len = p->shard_end[k] - b;
    p->be->download(p->host_grads + b, p->grads_dev + b, len * sizeof(float));
    int64_t *h = p->head[k];
    h[0] = PS_PUSH;
    h[1] = p->step;
    h[2] = 0;
    h[3] = lr_bits(p->lr);
    int to = ps_server_rank(p, k);
    DIST_MPI_CHECK(MPI_Isend(h, 4, MPI_INT64_T, to, TAG_HEAD, p->comm, &p->send_req[2 * k]));
    DIST_MPI_CHECK(MPI_Isend(p->host_grads + b, (int)len, MPI_FLOAT, to, TAG_GRAD, p->comm, &p->send_req[2 * k + 1]));
    /* the parameters it will answer with */
    DIST_MPI_CHECK(MPI_Irecv(p->host_params + b, (int)len, MPI_FLOAT, to, TAG_PARAMS, p->comm, &p->recv_req[k]));
    p->pushed++;
}

void ps_grads_ready(void *ctx, size_t offset, size_t count) {
    ps *p = ctx;
    CNT_ASSERT(offset == p->ready && offset + count <= p->n);
    p->ready = offset + count;
    /* shards are in buffer order, as backward completes it */
    while (p->pushed < p->servers && p->shard_end[p->pushed] <= p->ready) {
        push_shard(p, p->pushed);
        p->early++;
    }
}

void ps_finish_step(ps *p, ps_stats *st) {
    double t0 = time_now();
    int early = p->early;
    while (p->pushed < p->servers) push_shard(p, p->pushed);
    char what[96];
    snprintf(what, sizeof what, "the parameters of step %ld", p->step);
    wait_all_named(p->servers, p->recv_req, ps_server_rank(p, 0), what);
    snprintf(what, sizeof what, "the gradients of step %ld to be received", p->step);
    for (int k = 0; k < p->servers; k++) wait_all_named(2, &p->send_req[2 * k], ps_server_rank(p, k), what);
    p->be->upload(p->params_dev, p->host_params, p->n * sizeof(float));
    p->pushed = 0;
    if (st) {
        st->push_bytes = (double)p->n * sizeof(float);
        st->pull_bytes = (double)p->n * sizeof(float);
        st->wait_s = time_now() - t0;
        st->early = early;
    }
}

void ps_worker_fetch_momentum(ps *p, float *momentum) {
    CNT_ASSERT(p->rank == 0 && p->pushed == 0);
    for (int k = 0; k < p->servers; k++) {
        size_t b = shard_begin(p, k), len = p->shard_end[k] - b;
        send_head(p, k, PS_STATE, p->step);
        DIST_MPI_CHECK(MPI_Irecv(momentum + b, (int)len, MPI_FLOAT, ps_server_rank(p, k), TAG_MOMENTUM, p->comm,
                                 &p->recv_req[k]));
    }
    wait_all_named(p->servers, p->recv_req, ps_server_rank(p, 0), "the servers' momentum (for a checkpoint)");
}

void ps_worker_bye(ps *p, ps_server_stats *st) {
    CNT_ASSERT(p->pushed == 0 && (p->rank == 0) == (st != NULL));
    for (int k = 0; k < p->servers; k++) send_head(p, k, PS_BYE, p->step);
    if (!st) return;
    /* every step is served by now: rank 0's last step needed every worker's push */
    double *v = cnt_malloc(4 * (size_t)p->servers * sizeof *v);
    for (int k = 0; k < p->servers; k++)
        DIST_MPI_CHECK(MPI_Irecv(v + 4 * k, 4, MPI_DOUBLE, ps_server_rank(p, k), TAG_STATS, p->comm, &p->recv_req[k]));
    wait_all_named(p->servers, p->recv_req, ps_server_rank(p, 0), "the servers' statistics");
    for (int k = 0; k < p->servers; k++) {
        st[k].steps = (long)v[4 * k];
        st[k].wait_s = v[4 * k + 1];
        st[k].update_s = v[4 * k + 2];
        st[k].bytes = v[4 * k + 3];
    }
    free(v);
}

/* ---------------------------------------------------------------- server */

void ps_server_shape(ps *p, ps_shape *shape) {
    int64_t s[4];
    MPI_Request r;
    DIST_MPI_CHECK(MPI_Irecv(s, 4, MPI_INT64_T, 0, TAG_SHAPE, p->comm, &r));
    wait_all_named(1, &r, 0, "the model's shape");
    shape->c = s[0];
    shape->h = s[1];
    shape->w = s[2];
    shape->classes = s[3];
}

void ps_serve(ps *p, float *params, float *grads, float *momentum, size_t n, const size_t *shard_end,
              ps_update_fn update, void *ctx, ps_server_stats *st) {
    int k = p->rank - p->workers, W = p->workers;
    CNT_ASSERT(k >= 0 && k < p->servers);
    size_t b = k ? shard_end[k - 1] : 0, len = shard_end[k] - b;
    CNT_ASSERT(shard_end[p->servers - 1] == n);
    check_count(len);
    memset(st, 0, sizeof *st);

    /* rank 0's initial shard: fresh weights, or a checkpoint's */
    float *scratch_m = momentum ? NULL : cnt_malloc((len ? len : 1) * sizeof(float));
    MPI_Request init[2];
    DIST_MPI_CHECK(MPI_Irecv(params + b, (int)len, MPI_FLOAT, 0, TAG_INIT_PARAMS, p->comm, &init[0]));
    DIST_MPI_CHECK(MPI_Irecv(momentum ? momentum + b : scratch_m, (int)len, MPI_FLOAT, 0, TAG_INIT_MOMENTUM,
                             p->comm, &init[1]));
    wait_all_named(2, init, 0, "the initial parameters");
    free(scratch_m);

    /* one header in flight from every worker; gradients each into its own buffer */
    int64_t(*head)[4] = cnt_calloc((size_t)W, sizeof *head);
    MPI_Request *hreq = cnt_malloc((size_t)W * sizeof *hreq);
    MPI_Request *sreq = cnt_malloc((size_t)W * sizeof *sreq);
    float **g = cnt_calloc((size_t)W, sizeof *g);
    int *pushed = cnt_calloc((size_t)W, sizeof *pushed), *gone = cnt_calloc((size_t)W, sizeof *gone);
    int *missing = cnt_calloc((size_t)W, sizeof *missing);
    for (int w = 0; w < W; w++) {
        g[w] = w == 0 ? grads + b : cnt_malloc((len ? len : 1) * sizeof(float));
        sreq[w] = MPI_REQUEST_NULL;
        DIST_MPI_CHECK(MPI_Irecv(head[w], 4, MPI_INT64_T, w, TAG_HEAD, p->comm, &hreq[w]));
    }
    int n_pushed = 0, n_gone = 0;
    long step = -1;
    double lr = 0;
    stall wait;
    stall_start(&wait);
    char what[96];
    while (n_gone < W) {
        int progressed = 0;
        for (int w = 0; w < W; w++) {
            int f = 0;
            if (hreq[w] == MPI_REQUEST_NULL) continue;
            DIST_MPI_CHECK(MPI_Test(&hreq[w], &f, MPI_STATUS_IGNORE));
            if (!f) continue;
            progressed = 1;
            int64_t kind = head[w][0];
            if (kind == PS_PUSH) {
                if (pushed[w])
                    cnt_fatal("parameter server %d: worker rank %d pushed step %lld before step %ld was served", k, w,
                              (long long)head[w][1], step);
                if (n_pushed == 0) {
                    step = (long)head[w][1];
                    lr = lr_of(head[w][3]);
                } else if (head[w][1] != step) {
                    cnt_fatal("parameter server %d: worker rank %d pushed step %lld while others pushed step %ld "
                              "(synchronous mode: every worker takes the same steps)",
                              k, w, (long long)head[w][1], step);
                }
                MPI_Request r;
                DIST_MPI_CHECK(MPI_Irecv(g[w], (int)len, MPI_FLOAT, w, TAG_GRAD, p->comm, &r));
                wait_all_named(1, &r, w, "a gradient shard");
                pushed[w] = 1;
                n_pushed++;
            } else if (kind == PS_STATE) {
                /* without momentum (optim.momentum = 0) the zeros a checkpoint holds then */
                float *m = momentum ? momentum + b : cnt_calloc(len ? len : 1, sizeof(float));
                DIST_MPI_CHECK(MPI_Isend(m, (int)len, MPI_FLOAT, w, TAG_MOMENTUM, p->comm, &sreq[w]));
                wait_all_named(1, &sreq[w], w, "the momentum to be received");
                if (!momentum) free(m);
            } else if (kind == PS_BYE) {
                gone[w] = 1;
                n_gone++;
                if (w == 0) { /* rank 0 reports every server's numbers */
                    double v[4] = {(double)st->steps, st->wait_s, st->update_s, st->bytes};
                    DIST_MPI_CHECK(MPI_Isend(v, 4, MPI_DOUBLE, 0, TAG_STATS, p->comm, &sreq[0]));
                    wait_all_named(1, &sreq[0], 0, "the statistics to be received");
                }
                continue; /* no further header from it */
            } else {
                cnt_fatal("parameter server %d: unknown message kind %lld from rank %d", k, (long long)kind, w);
            }
            DIST_MPI_CHECK(MPI_Irecv(head[w], 4, MPI_INT64_T, w, TAG_HEAD, p->comm, &hreq[w]));
        }
        if (n_pushed == W) {
            /* every worker's gradient of the step: sum in worker order, update, answer */
            st->wait_s += time_now() - wait.t0;
            stall_end(&wait, "the gradients");
            double t0 = time_now();
            for (int w = 1; w < W; w++) {
                float *acc = grads + b;
                const float *gw = g[w];
                for (size_t i = 0; i < len; i++) acc[i] += gw[i];
            }
            update(ctx, b, b + len, lr, (float)(1.0 / W));
            st->update_s += time_now() - t0;
            st->steps++;
            st->bytes += 2.0 * W * (double)len * sizeof(float); /* W shards in, W out */
            for (int w = 0; w < W; w++) {
                DIST_MPI_CHECK(MPI_Isend(params + b, (int)len, MPI_FLOAT, w, TAG_PARAMS, p->comm, &sreq[w]));
                pushed[w] = 0;
            }
            n_pushed = 0;
            /* the next update writes params: its sends must have gone (each worker
             * posted its receive when it pushed, so this is quick) */
            for (int w = 0; w < W; w++) {
                snprintf(what, sizeof what, "the parameters of step %ld to be received", step);
                wait_all_named(1, &sreq[w], w, what);
            }
            stall_start(&wait);
            continue;
        }
        if (!progressed) {
            for (int w = 0; w < W; w++) missing[w] = !gone[w] && !pushed[w];
            snprintf(what, sizeof what, "the gradients of step %ld", n_pushed ? step : step + 1);
            stall_poll(&wait, W, missing, 0, what);
        }
    }
    if (n_pushed) cnt_fatal("parameter server %d: workers left with step %ld half pushed", k, step);
    for (int w = 1; w < W; w++) free(g[w]);
    free(g);
    free(head);
    free(hreq);
    free(sreq);
    free(pushed);
    free(gone);
    free(missing);
}

#else /* !CNT_HAVE_MPI: no servers in a world of one (dist.mode = ps is refused before) */

struct ps {
    int unused;
};

ps *ps_create(int servers, int sync) {
    (void)servers;
    (void)sync;
    CNT_ASSERT(!"parameter servers need MPI");
    return NULL;
}
void ps_free(ps *p) { (void)p; }
int ps_workers(const ps *p) { (void)p; return 1; }
int ps_servers(const ps *p) { (void)p; return 0; }
int ps_server_rank(const ps *p, int k) { (void)p; return k; }
void ps_worker_bind(ps *p, const backend *be, float *params, float *grads, size_t n, const size_t *shard_end) {
    (void)p, (void)be, (void)params, (void)grads, (void)n, (void)shard_end;
}
void ps_worker_init_servers(ps *p, const ps_shape *shape, const float *params, const float *momentum) {
    (void)p, (void)shape, (void)params, (void)momentum;
}
void ps_begin_step(ps *p, long step, double lr) { (void)p, (void)step, (void)lr; }
void ps_grads_ready(void *p, size_t offset, size_t count) { (void)p, (void)offset, (void)count; }
void ps_finish_step(ps *p, ps_stats *st) { (void)p, (void)st; }
void ps_worker_fetch_momentum(ps *p, float *momentum) { (void)p, (void)momentum; }
void ps_worker_bye(ps *p, ps_server_stats *st) { (void)p, (void)st; }
void ps_server_shape(ps *p, ps_shape *shape) { (void)p, (void)shape; }
void ps_serve(ps *p, float *params, float *grads, float *momentum, size_t n, const size_t *shard_end,
              ps_update_fn update, void *ctx, ps_server_stats *st) {
    (void)p, (void)params, (void)grads, (void)momentum, (void)n, (void)shard_end, (void)update, (void)ctx, (void)st;
}

#endif
