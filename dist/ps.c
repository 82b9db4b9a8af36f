/*
 * dist/ps.c - parameter servers, synchronous and asynchronous (see dist/ps.h).
 *
 * One step, seen from both sides (W workers, K servers):
 *
 *   worker w                                server k
 *   backward writes shard k's gradients
 *     -> header {PUSH, step, version, lr,  ->  receives each worker's shard into
 *        stop}, shard (Isends, no wait)       its own buffer; once it may answer
 *   ... more shards, more backward            (synchronous: every worker pushed
 *   backward ends; pushes what is left        this step), sums the pending ones
 *                                             in worker order, update(shard, lr,
 *                                             1/W), version++
 *   waits for every server's parameters <-  Isend of the shard's parameters and
 *   and answer {version, staleness, ...}     the answer to each worker it may answer
 *   uploads them
 *
 * A server's traffic per step is W gradient shards in and W parameter
 * shards out: it grows with the workers, where a ring allreduce moves
 * 2(W-1)/W of the model per rank whatever W (docs/data-parallel.md).
 *
 * Waits poll each request (MPI_Test, sleeping up to 1 ms between polls once
 * a short spin has passed) so they can name the ranks they wait for when
 * dist.stall_warn_s / stall_abort_s pass (dist_wait_limits).
 */
#include "dist/ps.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "dist/wait.h"

/* What a worker's header asks (rank 0 alone asks for state and staleness). */
enum { PS_PUSH = 1, PS_STATE, PS_STATE_PARAMS, PS_STALENESS, PS_BYE };
enum {
    TAG_SHAPE = 40, TAG_INIT_PARAMS, TAG_INIT_MOMENTUM, TAG_HEAD, TAG_GRAD, TAG_PARAMS, TAG_ACK, TAG_MOMENTUM,
    TAG_STATE_PARAMS, TAG_STALENESS, TAG_STATS, TAG_TRACE_LEN, TAG_TRACE, TAG_CLOCK
};
/* Round trips rank 0 times to a server's clock (dist.timeline); the fastest wins. */
#define CLOCK_PINGS 8
/* dist.timeline: a worker's track for server k, and a server's tracks */
enum { TID_SERVER0 = 2, TID_SERVE = 0, TID_IN = 1, TID_OUT = 2 };
/* A worker's header: kind, step, the version its parameters are, the
 * learning rate's bits, the stop signal it asks for (0: none). */
#define HEAD_LEN 5
/* A server's answer: its version, the staleness the worker's gradient was
 * applied with, and (server 0, asynchronous) the step every worker stops
 * after and the signal (0: none). */
#define ACK_LEN 4
/* ps_staleness and ps_server_stats as doubles on the wire */
#define STALE_DOUBLES (3 + PS_HIST)
#define STATS_DOUBLES (4 + STALE_DOUBLES)

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
    int servers, workers;
    int max_staleness;       /* -1: unbounded; 0: synchronous */
    int rank;                /* job rank */
    /* worker */
    const backend *be;
    float *params_dev, *grads_dev;
    size_t n;
    const size_t *shard_end; /* [servers] */
    float *host_grads;       /* [n] staging */
    float *host_params;      /* [n] staging */
    int64_t (*head)[HEAD_LEN]; /* [servers] headers in flight */
    int64_t (*ack)[ACK_LEN]; /* [servers] the answers */
    int stop_signal;         /* asynchronous: the stop signal this worker asks for (ps_note_stop) */
    long stop_step;          /* and the step server 0 set for every worker to stop after; 0: none */
    int stop_agreed;         /* its signal */
    int64_t *version;        /* [servers] the version of each shard this worker's parameters are */
    MPI_Request *send_req;   /* [2 * servers]: header and shard */
    MPI_Request *recv_req;   /* [2 * servers]: parameters and answer */
    long step;
    double lr;
    size_t ready;            /* gradients final in [0, ready) */
    int pushed;              /* shards pushed this step */
    int early;
    timeline *tl;            /* dist.timeline, or NULL */
    double *push_t;          /* [servers] when each shard was pushed (for the timeline) */
    double *done_t;          /* [2 * servers] when each request was seen complete */
};

static size_t shard_begin(const ps *p, int k) { return k ? p->shard_end[k - 1] : 0; }

int ps_workers(const ps *p) { return p->workers; }
int ps_servers(const ps *p) { return p->servers; }
int ps_server_rank(const ps *p, int k) { return p->workers + k; }
int ps_server_index(const ps *p) { return p->rank >= p->workers ? p->rank - p->workers : -1; }

void ps_set_timeline(ps *p, timeline *tl) {
    p->tl = tl;
    if (!tl || p->rank >= p->workers) {
        if (tl) {
            timeline_name_thread(tl, TID_SERVE, "serve");
            timeline_name_thread(tl, TID_IN, "gradients in");
            timeline_name_thread(tl, TID_OUT, "parameters out");
        }
        return;
    }
    CNT_ASSERT(TID_SERVER0 + p->servers <= 8);
    for (int k = 0; k < p->servers; k++) {
        char name[48];
        snprintf(name, sizeof name, "server %d (rank %d)", k, ps_server_rank(p, k));
        timeline_name_thread(tl, TID_SERVER0 + k, name);
    }
}

ps *ps_create(int servers, int max_staleness) {
    CNT_ASSERT(max_staleness >= -1 && servers >= 1 && servers < dist_job_world());
    ps *p = cnt_calloc(1, sizeof *p);
    p->servers = servers;
    p->workers = dist_job_world() - servers;
    p->max_staleness = max_staleness;
    p->rank = dist_job_rank();
    p->push_t = cnt_calloc((size_t)servers, sizeof *p->push_t);
    p->done_t = cnt_calloc(2 * (size_t)servers, sizeof *p->done_t);
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
    free(p->push_t);
    free(p->done_t);
    free(p->head);
    free(p->ack);
    free(p->version);
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
static void wait_all_named_at(int n, MPI_Request *reqs, int first_rank, const char *what, double *done) {
    int *missing = cnt_calloc((size_t)n, sizeof *missing);
    stall w;
    stall_start(&w);
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            int f = 1;
            if (reqs[i] != MPI_REQUEST_NULL) {
                DIST_MPI_CHECK(MPI_Test(&reqs[i], &f, MPI_STATUS_IGNORE));
                if (f && done) done[i] = time_now();
            }
            missing[i] = !f;
            left += !f;
        }
        if (!left) break;
        stall_poll(&w, n, missing, first_rank, what);
    }
    stall_end(&w, what);
    free(missing);
}

/* The same, without noting when each request completed. */
static void wait_all_named(int n, MPI_Request *reqs, int first_rank, const char *what) {
    wait_all_named_at(n, reqs, first_rank, what, NULL);
}

/* A shard travels as one message, and MPI's counts are ints. */
#define PS_MAX_COUNT ((size_t)1 << 30)

static void check_count(size_t n) {
    if (n > PS_MAX_COUNT) cnt_fatal("a parameter-server shard of %zu values exceeds MPI's count limit: use more "
                                    "servers (dist.ps_servers)", n);
}

/* ---------------------------------------------------------------- staleness */

static void stale_add(ps_staleness *s, double v) {
    s->applied++;
    s->sum += v;
    if (v > s->max) s->max = v;
    s->hist[v < PS_HIST - 1 ? (int)v : PS_HIST - 1]++;
}

static void stale_pack(const ps_staleness *s, double *v) {
    v[0] = s->applied;
    v[1] = s->sum;
    v[2] = s->max;
    memcpy(v + 3, s->hist, sizeof s->hist);
}

static void stale_unpack(ps_staleness *s, const double *v) {
    s->applied = v[0];
    s->sum = v[1];
    s->max = v[2];
    memcpy(s->hist, v + 3, sizeof s->hist);
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
    p->ack = cnt_calloc((size_t)p->servers, sizeof *p->ack);
    p->version = cnt_calloc((size_t)p->servers, sizeof *p->version);
    p->send_req = cnt_malloc(2 * (size_t)p->servers * sizeof *p->send_req);
    p->recv_req = cnt_malloc(2 * (size_t)p->servers * sizeof *p->recv_req);
    for (int k = 0; k < 2 * p->servers; k++) p->send_req[k] = p->recv_req[k] = MPI_REQUEST_NULL;
    for (int k = 0; k < p->servers; k++) check_count(p->shard_end[k] - shard_begin(p, k));
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
static void send_head(ps *p, int k, int64_t kind) {
    int64_t h[HEAD_LEN] = {kind, p->step, p->version ? p->version[k] : 0, lr_bits(p->lr), 0};
    MPI_Request r;
    DIST_MPI_CHECK(MPI_Isend(h, HEAD_LEN, MPI_INT64_T, ps_server_rank(p, k), TAG_HEAD, p->comm, &r));
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
 * on their way (completed in ps_finish_step), and the receives of the
 * answer posted. */
static void push_shard(ps *p, int k) {
    size_t b = shard_begin(p, k), len = p->shard_end[k] - b;
    p->be->download(p->host_grads + b, p->grads_dev + b, len * sizeof(float));
    int64_t *h = p->head[k];
    h[0] = PS_PUSH;
    h[1] = p->step;
    h[2] = p->version[k];
    h[3] = lr_bits(p->lr);
    h[4] = p->stop_signal;
    int to = ps_server_rank(p, k);
    DIST_MPI_CHECK(MPI_Irecv(p->host_params + b, (int)len, MPI_FLOAT, to, TAG_PARAMS, p->comm, &p->recv_req[k]));
    DIST_MPI_CHECK(MPI_Irecv(p->ack[k], ACK_LEN, MPI_INT64_T, to, TAG_ACK, p->comm, &p->recv_req[p->servers + k]));
    DIST_MPI_CHECK(MPI_Isend(h, HEAD_LEN, MPI_INT64_T, to, TAG_HEAD, p->comm, &p->send_req[2 * k]));
    DIST_MPI_CHECK(MPI_Isend(p->host_grads + b, (int)len, MPI_FLOAT, to, TAG_GRAD, p->comm, &p->send_req[2 * k + 1]));
    if (p->tl) p->push_t[k] = time_now();
    p->pushed++;
}

/* Lets MPI move what is in flight while backward runs: a large message
 * moves only while its receiver (and sender) call into MPI, so without this
 * a shard's parameters, sent while this worker computes, would wait for
 * ps_finish_step. Notes when each completes (for the timeline). */
static void progress_pushed(ps *p) {
    for (int k = 0; k < p->pushed; k++) {
        int f;
        for (int half = 0; half < 2; half++) {
            MPI_Request *r = &p->recv_req[half * p->servers + k];
            if (*r == MPI_REQUEST_NULL) continue;
            DIST_MPI_CHECK(MPI_Test(r, &f, MPI_STATUS_IGNORE));
            if (f) p->done_t[half * p->servers + k] = time_now();
        }
        for (int j = 0; j < 2; j++)
            if (p->send_req[2 * k + j] != MPI_REQUEST_NULL)
                DIST_MPI_CHECK(MPI_Test(&p->send_req[2 * k + j], &f, MPI_STATUS_IGNORE));
    }
}

void ps_grads_ready(void *ctx, size_t offset, size_t count) {
    ps *p = ctx;
    CNT_ASSERT(offset == p->ready && offset + count <= p->n);
    p->ready = offset + count;
    progress_pushed(p);
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
    /* request i of the 2K waits on server i mod K */
    for (int half = 0; half < 2; half++) {
        snprintf(what, sizeof what, half ? "the answers of step %ld" : "the parameters of step %ld", p->step);
        wait_all_named_at(p->servers, p->recv_req + half * p->servers, ps_server_rank(p, 0), what,
                          p->tl ? p->done_t + half * p->servers : NULL);
    }
    snprintf(what, sizeof what, "the gradients of step %ld to be received", p->step);
    for (int k = 0; k < p->servers; k++) wait_all_named(2, &p->send_req[2 * k], ps_server_rank(p, k), what);
    p->be->upload(p->params_dev, p->host_params, p->n * sizeof(float));
    if (p->tl) {
        /* each shard's round trip on its server's track: push, the server's wait and update, pull (the
         * training track's "parameter-server wait" is the stepper's) */
        for (int k = 0; k < p->servers; k++) {
            double arrived = p->done_t[k] > p->done_t[p->servers + k] ? p->done_t[k] : p->done_t[p->servers + k];
            char name[64];
            snprintf(name, sizeof name, "push+pull shard %d", k);
            timeline_record(p->tl, name, "ps", TID_SERVER0 + k, p->push_t[k], arrived);
        }
    }
    long stale = 0;
    for (int k = 0; k < p->servers; k++) {
        p->version[k] = p->ack[k][0];
        if (p->ack[k][1] > stale) stale = (long)p->ack[k][1];
    }
    if (p->ack[0][2] > 0 && !p->stop_step) { /* server 0 decides when everyone stops */
        p->stop_step = (long)p->ack[0][2];
        p->stop_agreed = (int)p->ack[0][3];
    }
    p->pushed = 0;
    if (st) {
        st->push_bytes = (double)p->n * sizeof(float);
        st->pull_bytes = (double)p->n * sizeof(float);
        st->wait_s = time_now() - t0;
        st->early = early;
        st->staleness = stale;
    }
}

void ps_note_stop(ps *p, int signal) {
    if (signal && !p->stop_signal) p->stop_signal = signal;
}

long ps_stop_step(const ps *p, int *signal) {
    *signal = p->stop_agreed;
    return p->stop_step;
}

void ps_worker_fetch_state(ps *p, float *params, float *momentum) {
    CNT_ASSERT(p->rank == 0 && p->pushed == 0 && (params || momentum));
    int K = p->servers, nr = 0;
    MPI_Request *r = cnt_malloc(3 * (size_t)K * sizeof *r);
    int64_t(*ver)[ACK_LEN] = cnt_calloc((size_t)K, sizeof *ver);
    for (int k = 0; k < K; k++) {
        size_t b = shard_begin(p, k), len = p->shard_end[k] - b;
        int from = ps_server_rank(p, k);
        send_head(p, k, params ? PS_STATE_PARAMS : PS_STATE);
        /* the answer: momentum, then with PS_STATE_PARAMS the parameters and their version */
        float *m = momentum ? momentum + b : cnt_malloc((len ? len : 1) * sizeof(float));
        MPI_Request mr;
        DIST_MPI_CHECK(MPI_Irecv(m, (int)len, MPI_FLOAT, from, TAG_MOMENTUM, p->comm, &mr));
        wait_all_named(1, &mr, from, "the servers' momentum");
        if (!momentum) free(m);
        if (params) {
            DIST_MPI_CHECK(MPI_Irecv(params + b, (int)len, MPI_FLOAT, from, TAG_STATE_PARAMS, p->comm, &r[nr++]));
            DIST_MPI_CHECK(MPI_Irecv(ver[k], ACK_LEN, MPI_INT64_T, from, TAG_ACK, p->comm, &r[nr++]));
        }
    }
    if (nr) wait_all_named(nr, r, ps_server_rank(p, 0), "the servers' parameters");
    if (params)
        for (int k = 0; k < K; k++) p->version[k] = ver[k][0];
    free(ver);
    free(r);
}

void ps_worker_sync_params(ps *p) {
    CNT_ASSERT(p->pushed == 0);
    dist_phase("parameter-server sync: every worker's last push answered");
    dist_barrier();
    if (p->rank == 0) ps_worker_fetch_state(p, p->host_params, NULL);
    dist_phase("parameter-server sync: the servers' parameters");
    dist_broadcast(p->host_params, p->n * sizeof(float), 0);
    dist_broadcast(p->version, (size_t)p->servers * sizeof *p->version, 0);
    p->be->upload(p->params_dev, p->host_params, p->n * sizeof(float));
}

void ps_worker_fetch_staleness(ps *p, ps_staleness *window) {
    CNT_ASSERT(p->rank == 0 && p->pushed == 0);
    memset(window, 0, sizeof *window);
    double v[STALE_DOUBLES];
    for (int k = 0; k < p->servers; k++) {
        send_head(p, k, PS_STALENESS);
        MPI_Request r;
        DIST_MPI_CHECK(MPI_Irecv(v, STALE_DOUBLES, MPI_DOUBLE, ps_server_rank(p, k), TAG_STALENESS, p->comm, &r));
        wait_all_named(1, &r, ps_server_rank(p, k), "the staleness statistics");
        ps_staleness one;
        stale_unpack(&one, v);
        window->applied += one.applied;
        window->sum += one.sum;
        if (one.max > window->max) window->max = one.max;
        for (int i = 0; i < PS_HIST; i++) window->hist[i] += one.hist[i];
    }
}

/* dist.timeline, rank 0 after its goodbye to server k: CLOCK_PINGS round
 * trips, each carrying rank 0's time out and the server's back; the fastest
 * gives the offset of the server's clock (off by at most half its time), and
 * rank 0's timeline zero on the server's clock goes to the server (clock_pong). */
static void clock_ping(ps *p, int k) {
    int to = ps_server_rank(p, k);
    double best_rtt = -1, offset = 0;
    for (int i = 0; i < CLOCK_PINGS; i++) {
        double t0 = time_now(), ts = 0;
        MPI_Request r[2];
        DIST_MPI_CHECK(MPI_Irecv(&ts, 1, MPI_DOUBLE, to, TAG_CLOCK, p->comm, &r[0]));
        DIST_MPI_CHECK(MPI_Isend(&t0, 1, MPI_DOUBLE, to, TAG_CLOCK, p->comm, &r[1]));
        wait_all_named(2, r, to, "the server's clock");
        double t1 = time_now();
        if (best_rtt < 0 || t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            offset = ts - (t0 + t1) / 2;
        }
    }
    double zero = timeline_zero(p->tl) + offset;
    MPI_Request r;
    DIST_MPI_CHECK(MPI_Isend(&zero, 1, MPI_DOUBLE, to, TAG_CLOCK, p->comm, &r));
    wait_all_named(1, &r, to, "the clock offset to be received");
}

/* A server's side of clock_ping: answers the round trips; returns rank 0's timeline zero on this clock. */
static double clock_pong(ps *p) {
    for (int i = 0; i < CLOCK_PINGS; i++) {
        double t = 0;
        MPI_Request r;
        DIST_MPI_CHECK(MPI_Irecv(&t, 1, MPI_DOUBLE, 0, TAG_CLOCK, p->comm, &r));
        wait_all_named(1, &r, 0, "rank 0's clock");
        t = time_now();
        DIST_MPI_CHECK(MPI_Isend(&t, 1, MPI_DOUBLE, 0, TAG_CLOCK, p->comm, &r));
        wait_all_named(1, &r, 0, "the clock to be received");
    }
    double zero = 0;
    MPI_Request r;
    DIST_MPI_CHECK(MPI_Irecv(&zero, 1, MPI_DOUBLE, 0, TAG_CLOCK, p->comm, &r));
    wait_all_named(1, &r, 0, "rank 0's clock offset");
    return zero;
}

void ps_worker_bye(ps *p, ps_server_stats *st) {
    CNT_ASSERT(p->pushed == 0 && (p->rank == 0) == (st != NULL));
    for (int k = 0; k < p->servers; k++) {
        send_head(p, k, PS_BYE);
        if (p->rank == 0 && p->tl) clock_ping(p, k);
    }
    if (!st) return;
    /* a server answers rank 0's goodbye once every worker has said it */
    double *v = cnt_malloc(STATS_DOUBLES * (size_t)p->servers * sizeof *v);
    for (int k = 0; k < p->servers; k++)
        DIST_MPI_CHECK(MPI_Irecv(v + STATS_DOUBLES * k, STATS_DOUBLES, MPI_DOUBLE, ps_server_rank(p, k), TAG_STATS,
                                 p->comm, &p->recv_req[k]));
    wait_all_named(p->servers, p->recv_req, ps_server_rank(p, 0), "the servers' statistics");
    for (int k = 0; k < p->servers; k++) {
        const double *x = v + STATS_DOUBLES * k;
        st[k].steps = (long)x[0];
        st[k].wait_s = x[1];
        st[k].update_s = x[2];
        st[k].bytes = x[3];
        stale_unpack(&st[k].stale, x + 4);
    }
    free(v);
    for (int k = 0; p->tl && k < p->servers; k++) {
        /* each server's timeline, already on rank 0's time axis */
        uint64_t len = 0;
        MPI_Request r;
        int from = ps_server_rank(p, k);
        DIST_MPI_CHECK(MPI_Irecv(&len, 1, MPI_UINT64_T, from, TAG_TRACE_LEN, p->comm, &r));
        wait_all_named(1, &r, from, "the server's timeline");
        char *text = cnt_malloc(len ? (size_t)len : 1);
        DIST_MPI_CHECK(MPI_Irecv(text, (int)len, MPI_CHAR, from, TAG_TRACE, p->comm, &r));
        wait_all_named(1, &r, from, "the server's timeline");
        timeline_add_text(p->tl, text, (size_t)len);
        free(text);
    }
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

/* One server's bookkeeping of its workers. */
typedef struct worker_state {
    int64_t head[HEAD_LEN]; /* the header being received */
    MPI_Request hreq;    /* its receive; MPI_REQUEST_NULL once the worker said goodbye */
    float *g;            /* [len] its last gradient */
    int pending;         /* g holds a gradient not yet applied */
    int owed;            /* it pushed and waits for an answer */
    long clock;          /* pushes so far */
    int64_t version;     /* the version its pending gradient was computed on */
    long step;           /* the step of its last push */
    double lr;           /* and its learning rate */
    int64_t stale;       /* the staleness its last gradient was applied with */
    int gone;
} worker_state;

void ps_serve(ps *p, float *params, float *momentum, size_t n, const size_t *shard_end, ps_update_fn update,
              void *ctx, ps_server_stats *st) {
    int k = ps_server_index(p), W = p->workers, S = p->max_staleness;
    CNT_ASSERT(k >= 0 && k < p->servers);
    size_t b = k ? shard_end[k - 1] : 0, len = shard_end[k] - b;
    CNT_ASSERT(shard_end[p->servers - 1] == n);
    check_count(len);
    memset(st, 0, sizeof *st);

    /* rank 0's initial shard: fresh weights, or a checkpoint's; without
     * momentum (optim.momentum = 0) a checkpoint holds zeros */
    float *zeros = cnt_calloc(len ? len : 1, sizeof(float));
    float *mom = momentum ? momentum : zeros;
    MPI_Request init[2];
    DIST_MPI_CHECK(MPI_Irecv(params, (int)len, MPI_FLOAT, 0, TAG_INIT_PARAMS, p->comm, &init[0]));
    DIST_MPI_CHECK(MPI_Irecv(mom, (int)len, MPI_FLOAT, 0, TAG_INIT_MOMENTUM, p->comm, &init[1]));
    wait_all_named(2, init, 0, "the initial parameters");
    if (!momentum) memset(zeros, 0, len * sizeof(float));

    worker_state *ws = cnt_calloc((size_t)W, sizeof *ws);
    MPI_Request *sreq = cnt_malloc(2 * (size_t)W * sizeof *sreq);
    int64_t(*ack)[ACK_LEN] = cnt_calloc((size_t)W, sizeof *ack);
    long stop_step = 0;  /* server 0, asynchronous: the step every worker stops after */
    int64_t stop_signal = 0;
    int *missing = cnt_calloc((size_t)W, sizeof *missing), *answerable = cnt_calloc((size_t)W, sizeof *answerable);
    double *sent_t = cnt_calloc((size_t)W, sizeof *sent_t); /* when each answer was sent (timeline) */
    double trace_zero = p->tl ? timeline_zero(p->tl) : 0;   /* rank 0's zero on this clock */
    for (int w = 0; w < W; w++) {
        ws[w].g = cnt_malloc((len ? len : 1) * sizeof(float));
        sreq[2 * w] = sreq[2 * w + 1] = MPI_REQUEST_NULL;
        DIST_MPI_CHECK(MPI_Irecv(ws[w].head, HEAD_LEN, MPI_INT64_T, w, TAG_HEAD, p->comm, &ws[w].hreq));
    }
    int64_t version = 0;
    ps_staleness window;
    memset(&window, 0, sizeof window);
    int n_gone = 0;
    stall wait;
    stall_start(&wait);
    char what[96];
    while (n_gone < W) {
        int progressed = 0;
        for (int w = 0; w < W; w++) {
            worker_state *x = &ws[w];
            int f = 0;
            if (x->hreq == MPI_REQUEST_NULL) continue;
            DIST_MPI_CHECK(MPI_Test(&x->hreq, &f, MPI_STATUS_IGNORE));
            if (!f) continue;
            progressed = 1;
            int64_t kind = x->head[0];
            if (kind == PS_PUSH) {
                double t_head = time_now();
                if (x->owed)
                    cnt_fatal("parameter server %d: worker rank %d pushed step %lld before its step %ld was answered",
                              k, w, (long long)x->head[1], x->step);
                MPI_Request r;
                DIST_MPI_CHECK(MPI_Irecv(x->g, (int)len, MPI_FLOAT, w, TAG_GRAD, p->comm, &r));
                wait_all_named(1, &r, w, "a gradient shard");
                x->pending = x->owed = 1;
                x->clock++;
                x->step = (long)x->head[1];
                if (p->tl) {
                    char name[64];
                    snprintf(name, sizeof name, "gradient from rank %d", w);
                    timeline_set_step(p->tl, x->step);
                    timeline_record(p->tl, name, "ps", TID_IN, t_head, time_now());
                }
                x->version = x->head[2];
                x->lr = lr_of(x->head[3]);
                st->bytes += (double)len * sizeof(float);
                if (k == 0 && x->head[4] && !stop_step) {
                    /* a worker got a stop signal: every worker stops after the
                     * step after the furthest one begun, which none has passed */
                    for (int j = 0; j < W; j++)
                        if (ws[j].step > stop_step) stop_step = ws[j].step;
                    stop_step++;
                    stop_signal = x->head[4];
                }
            } else if (kind == PS_STATE || kind == PS_STATE_PARAMS) {
                /* rank 0, between its steps: momentum, and the parameters with their version */
                MPI_Request r[3];
                int nr = 0;
                DIST_MPI_CHECK(MPI_Isend(mom, (int)len, MPI_FLOAT, w, TAG_MOMENTUM, p->comm, &r[nr++]));
                int64_t v[ACK_LEN] = {version, 0, 0, 0};
                if (kind == PS_STATE_PARAMS) {
                    DIST_MPI_CHECK(MPI_Isend(params, (int)len, MPI_FLOAT, w, TAG_STATE_PARAMS, p->comm, &r[nr++]));
                    DIST_MPI_CHECK(MPI_Isend(v, ACK_LEN, MPI_INT64_T, w, TAG_ACK, p->comm, &r[nr++]));
                }
                wait_all_named(nr, r, w, "the state to be received");
            } else if (kind == PS_STALENESS) {
                double v[STALE_DOUBLES];
                stale_pack(&window, v);
                memset(&window, 0, sizeof window);
                MPI_Request r;
                DIST_MPI_CHECK(MPI_Isend(v, STALE_DOUBLES, MPI_DOUBLE, w, TAG_STALENESS, p->comm, &r));
                wait_all_named(1, &r, w, "the staleness statistics to be received");
            } else if (kind == PS_BYE) {
                if (x->owed) cnt_fatal("parameter server %d: worker rank %d said goodbye while owed an answer", k, w);
                if (w == 0 && p->tl) trace_zero = clock_pong(p); /* this server's events go onto rank 0's axis */
                x->gone = 1;
                n_gone++;
                continue; /* no further header from it */
            } else {
                cnt_fatal("parameter server %d: unknown message kind %lld from rank %d", k, (long long)kind, w);
            }
            DIST_MPI_CHECK(MPI_Irecv(x->head, HEAD_LEN, MPI_INT64_T, w, TAG_HEAD, p->comm, &x->hreq));
        }

        /* Whom it may answer: a worker at most S pushes ahead of the slowest
         * still training (S < 0: anyone). The slowest always may, so this
         * never deadlocks. */
        long slowest = -1;
        for (int w = 0; w < W; w++)
            if (!ws[w].gone && (slowest < 0 || ws[w].clock < slowest)) slowest = ws[w].clock;
        int answer = 0;
        for (int w = 0; w < W; w++) {
            answerable[w] = ws[w].owed && (S < 0 || ws[w].clock - slowest <= S);
            answer |= answerable[w];
        }
        if (answer) {
            st->wait_s += time_now() - wait.t0;
            stall_end(&wait, "the gradients");
            int first = -1;
            long newest = -1;
            double lr = 0;
            for (int w = 0; w < W; w++)
                if (ws[w].pending) {
                    if (first < 0) first = w;
                    if (ws[w].step > newest) {
                        newest = ws[w].step;
                        lr = ws[w].lr;
                    }
                }
            if (first >= 0) {
                /* what has arrived, summed in worker order, as one update */
                double t0 = time_now();
                /* into the first one's buffer: its worker pushes no more
                 * until answered, and the update is done before that */
                float *acc = ws[first].g;
                for (int w = first + 1; w < W; w++) {
                    if (!ws[w].pending) continue;
                    const float *gw = ws[w].g;
                    for (size_t i = 0; i < len; i++) acc[i] += gw[i];
                }
                int summed = 0;
                for (int w = first; w < W; w++) {
                    if (!ws[w].pending) continue;
                    summed++;
                    ws[w].stale = version - ws[w].version;
                    stale_add(&st->stale, (double)ws[w].stale);
                    stale_add(&window, (double)ws[w].stale);
                    ws[w].pending = 0;
                }
                update(ctx, b, b + len, acc, lr, (float)(1.0 / W));
                version++;
                double t1 = time_now();
                st->update_s += t1 - t0;
                if (p->tl) {
                    char name[64];
                    snprintf(name, sizeof name, "update %lld (%d gradient%s)", (long long)version, summed,
                             summed == 1 ? "" : "s");
                    timeline_set_step(p->tl, newest);
                    timeline_record(p->tl, name, "ps", TID_SERVE, t0, t1);
                }
                st->steps++;
            }
            for (int w = 0; w < W; w++) {
                if (!answerable[w]) continue;
                ack[w][0] = version;
                ack[w][1] = ws[w].stale;
                ack[w][2] = stop_step;
                ack[w][3] = stop_signal;
                DIST_MPI_CHECK(MPI_Isend(params, (int)len, MPI_FLOAT, w, TAG_PARAMS, p->comm, &sreq[2 * w]));
                DIST_MPI_CHECK(MPI_Isend(ack[w], ACK_LEN, MPI_INT64_T, w, TAG_ACK, p->comm, &sreq[2 * w + 1]));
                sent_t[w] = time_now();
                ws[w].owed = 0;
                st->bytes += (double)len * sizeof(float);
            }
            /* the next update writes params: these sends must have gone by
             * then (each worker posted its receives when it pushed) */
            for (int w = 0; w < W; w++) {
                if (!answerable[w]) continue;
                snprintf(what, sizeof what, "the parameters of step %ld to be received", ws[w].step);
                wait_all_named(2, &sreq[2 * w], w, what);
                if (p->tl) {
                    char name[64];
                    snprintf(name, sizeof name, "parameters to rank %d", w);
                    timeline_record(p->tl, name, "ps", TID_OUT, sent_t[w], time_now());
                }
            }
            stall_start(&wait);
            continue;
        }
        if (progressed) {
            stall_start(&wait);
            continue;
        }
        /* nothing to do: waiting for the workers that owe a push */
        long step = 0;
        for (int w = 0; w < W; w++) {
            missing[w] = !ws[w].gone && !ws[w].owed;
            if (ws[w].step > step) step = ws[w].step;
        }
        snprintf(what, sizeof what, "gradients (the newest step pushed: %ld)", step);
        stall_poll(&wait, W, missing, 0, what);
    }
    /* rank 0's goodbye gets the server's numbers (its receive is posted) */
    double v[STATS_DOUBLES] = {(double)st->steps, st->wait_s, st->update_s, st->bytes};
    stale_pack(&st->stale, v + 4);
    MPI_Request r;
    DIST_MPI_CHECK(MPI_Isend(v, STATS_DOUBLES, MPI_DOUBLE, 0, TAG_STATS, p->comm, &r));
    wait_all_named(1, &r, 0, "the statistics to be received");
    if (p->tl) {
        char process[64];
        snprintf(process, sizeof process, "rank %d (parameter server %d)", p->rank, k);
        size_t n_text;
        char *text = timeline_events_text(p->tl, p->rank, process, trace_zero, &n_text);
        if (n_text > INT_MAX)
            cnt_fatal("parameter server %d: a timeline of %zu bytes exceeds MPI's count limit", k, n_text);
        uint64_t text_len = n_text;
        MPI_Request tr[2];
        DIST_MPI_CHECK(MPI_Isend(&text_len, 1, MPI_UINT64_T, 0, TAG_TRACE_LEN, p->comm, &tr[0]));
        DIST_MPI_CHECK(MPI_Isend(text, (int)n_text, MPI_CHAR, 0, TAG_TRACE, p->comm, &tr[1]));
        wait_all_named(2, tr, 0, "the timeline to be received");
        free(text);
    }
    free(sent_t);
    for (int w = 0; w < W; w++) free(ws[w].g);
    free(ws);
    free(sreq);
    free(ack);
    free(missing);
    free(answerable);
    free(zeros);
}

#else /* !CNT_HAVE_MPI: no servers in a world of one (dist.mode = ps is refused before) */

struct ps {
    int unused;
};

ps *ps_create(int servers, int max_staleness) {
    (void)servers;
    (void)max_staleness;
    CNT_ASSERT(!"parameter servers need MPI");
    return NULL;
}
void ps_free(ps *p) { (void)p; }
int ps_workers(const ps *p) { (void)p; return 1; }
int ps_servers(const ps *p) { (void)p; return 0; }
int ps_server_rank(const ps *p, int k) { (void)p; return k; }
int ps_server_index(const ps *p) { (void)p; return -1; }
void ps_worker_bind(ps *p, const backend *be, float *params, float *grads, size_t n, const size_t *shard_end) {
    (void)p, (void)be, (void)params, (void)grads, (void)n, (void)shard_end;
}
void ps_worker_init_servers(ps *p, const ps_shape *shape, const float *params, const float *momentum) {
    (void)p, (void)shape, (void)params, (void)momentum;
}
void ps_begin_step(ps *p, long step, double lr) { (void)p, (void)step, (void)lr; }
void ps_grads_ready(void *p, size_t offset, size_t count) { (void)p, (void)offset, (void)count; }
void ps_finish_step(ps *p, ps_stats *st) { (void)p, (void)st; }
void ps_worker_fetch_state(ps *p, float *params, float *momentum) { (void)p, (void)params, (void)momentum; }
void ps_worker_sync_params(ps *p) { (void)p; }
void ps_note_stop(ps *p, int signal) { (void)p, (void)signal; }
long ps_stop_step(const ps *p, int *signal) {
    (void)p;
    *signal = 0;
    return 0;
}
void ps_worker_fetch_staleness(ps *p, ps_staleness *window) { (void)p, (void)window; }
void ps_worker_bye(ps *p, ps_server_stats *st) { (void)p, (void)st; }
void ps_server_shape(ps *p, ps_shape *shape) { (void)p, (void)shape; }
void ps_serve(ps *p, float *params, float *momentum, size_t n, const size_t *shard_end, ps_update_fn update,
              void *ctx, ps_server_stats *st) {
    (void)p, (void)params, (void)momentum, (void)n, (void)shard_end, (void)update, (void)ctx, (void)st;
}

#endif
