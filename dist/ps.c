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
 * Every wait is dist/wait.h's bounded wait (dist_wait_until: MPI_Test on
 * each request, sleeping up to 1 ms between polls once a short spin has
 * passed), with a late-ranks callback that names the ranks waited for when
 * dist.stall_warn_s / stall_abort_s pass (dist_wait_limits). A server's
 * wait for something to do polls its receive phase.
 */
#include "dist/ps.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "dist/wait.h"

/* What a worker's header asks (rank 0 alone asks for state and staleness). */
enum { PS_PUSH = 1, PS_STATE, PS_STATE_PARAMS, PS_STALENESS, PS_BYE };
enum {
    TAG_SHAPE = 40, TAG_INIT_PARAMS, TAG_INIT_MOMENTUM, TAG_HEAD, TAG_GRAD, TAG_PARAMS, TAG_ACK, TAG_MOMENTUM,
    TAG_STATE_PARAMS, TAG_STALENESS, TAG_STATS, TAG_TRACE_LEN, TAG_TRACE, TAG_CLOCK, TAG_TRACE_DONE
};
/* Round trips rank 0 times to a server's clock (dist.timeline); the fastest wins. */
#define CLOCK_PINGS 8
/* dist.timeline: a worker's track for server k, and a server's tracks */
enum { TID_SERVER0 = 2, TID_SERVE = 0, TID_IN = 1, TID_OUT = 2 };
/* A worker's header: kind, step, the version its parameters are, the
 * learning rate's bits, the stop signal it asks for (0: none). */
#define HEAD_LEN 5
/* A server's answer: its version, the staleness the worker's gradient was
 * applied with, (server 0, asynchronous) the step every worker stops after
 * and the signal (0: none), and a stop signal this server got (0: none). */
#define ACK_LEN 5
/* ps_staleness and ps_server_stats as doubles on the wire */
#define STALE_DOUBLES (3 + PS_HIST)
#define STATS_DOUBLES (4 + STALE_DOUBLES)

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
    int servers_stop;        /* a stop signal a server got and passed on (ps_servers_stop) */
    int64_t *version;        /* [servers] the version of each shard this worker's parameters are */
    MPI_Request *send_req;   /* [2 * servers]: header and shard */
    MPI_Request *recv_req;   /* [2 * servers]: parameters and answer */
    long step;
    double lr;
    size_t ready;            /* gradients final in [0, ready) */
    int pushed;              /* shards pushed this step */
    int early;
    timeline *tl;            /* dist.timeline, or NULL */
    int traced;              /* rank 0: the servers sent their timelines and wait to hear it is written */
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

/* How a parameter-server wait pauses between polls (dist_wait_until): a
 * 50 us spin, then sleeps from 10 us doubling to 1 ms. */
#define PS_SPIN_S 50e-6
#define PS_MAX_SLEEP_US 1000

/* Appends ", R" (or "R" first) to buf[0 .. *o), leaving room for the end. */
static void name_rank(char *buf, size_t cap, size_t *o, int rank) {
    if (*o + 16 < cap) *o += (size_t)snprintf(buf + *o, cap - *o, "%s%d", *o ? ", " : "", rank);
}

/* A wait on requests of named ranks (wait_all_named_at). */
typedef struct named_wait {
    int n;
    MPI_Request *reqs;   /* [n]: request i waits on job rank first_rank + i / per */
    int first_rank, per;
    const char *what;    /* what is waited for: "the parameters of step 12" */
    double *done;        /* [n] when each completed; NULL: not noted */
} named_wait;

static int named_poll(void *ctx) {
    named_wait *w = ctx;
    int left = 0;
    for (int i = 0; i < w->n; i++) {
        if (w->reqs[i] == MPI_REQUEST_NULL) continue;
        int f = 0;
        DIST_MPI_CHECK(MPI_Test(&w->reqs[i], &f, MPI_STATUS_IGNORE));
        if (f && w->done) w->done[i] = time_now();
        left += !f;
    }
    return left == 0;
}

/* The late-ranks callback: "rank R has waited T s for <what> from rank(s)
 * 2, 3", the ranks of the requests not complete (MPI_Test sets a completed
 * request to MPI_REQUEST_NULL). */
static void named_describe(void *ctx, dist_wait_text part, char *buf, size_t cap) {
    const named_wait *w = ctx;
    if (part == DIST_WAIT_WHO) {
        snprintf(buf, cap, "rank %d", dist_job_rank());
    } else if (part == DIST_WAIT_OVER) {
        snprintf(buf, cap, "%s arrived", w->what);
    } else {
        char who[256] = "";
        size_t o = 0;
        int last = -1;
        for (int i = 0; i < w->n; i++) {
            int rank = w->first_rank + i / w->per;
            if (w->reqs[i] == MPI_REQUEST_NULL || rank == last) continue; /* done, or named already */
            name_rank(who, sizeof who, &o, rank);
            last = rank;
        }
        snprintf(buf, cap, "for %s from rank(s) %s", w->what, who);
    }
}

/* Completes every request in reqs[0 .. n) (request i waits on job rank
 * first_rank + i / per: `per` requests a rank), naming the ranks still
 * missing past the limits (dist_wait_limits); done not NULL: when each
 * completed. */
static void wait_all_named_at(int n, MPI_Request *reqs, int first_rank, int per, const char *what, double *done) {
    named_wait w = {n, reqs, first_rank, per, what, done};
    dist_wait_site s = {.poll = named_poll,
                        .describe = named_describe,
                        .ctx = &w,
                        .abort_note = " (stopped, hung or slow)",
                        .spin_s = PS_SPIN_S,
                        .max_sleep_us = PS_MAX_SLEEP_US};
    dist_wait_limits(&s.warn_s, &s.abort_s);
    dist_wait_until(&s);
}

/* The same, one request a rank, without noting when each completed. */
static void wait_all_named(int n, MPI_Request *reqs, int first_rank, const char *what) {
    wait_all_named_at(n, reqs, first_rank, 1, what, NULL);
}

/* Every request in reqs[0 .. n), all of them on job rank `rank`. */
static void wait_rank(int n, MPI_Request *reqs, int rank, const char *what) {
    wait_all_named_at(n, reqs, rank, n, what, NULL);
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
        wait_rank(3, &r[3 * k], ps_server_rank(p, k), "the initial parameters to be received");
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
        wait_all_named_at(p->servers, p->recv_req + half * p->servers, ps_server_rank(p, 0), 1, what,
                          p->tl ? p->done_t + half * p->servers : NULL);
    }
    snprintf(what, sizeof what, "the gradients of step %ld to be received", p->step);
    for (int k = 0; k < p->servers; k++) wait_rank(2, &p->send_req[2 * k], ps_server_rank(p, k), what);
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
    for (int k = 0; k < p->servers && !p->servers_stop; k++) p->servers_stop = (int)p->ack[k][4];
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

int ps_servers_stop(const ps *p) { return p->servers_stop; }

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
    if (nr) wait_all_named_at(nr, r, ps_server_rank(p, 0), 2, "the servers' parameters", NULL);
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
        wait_rank(2, r, to, "the server's clock");
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
    p->traced = p->tl != NULL;
}

void ps_worker_trace_written(ps *p, int written) {
    if (!p->traced) return;
    p->traced = 0;
    int64_t w = written;
    MPI_Request *r = cnt_malloc((size_t)p->servers * sizeof *r);
    for (int k = 0; k < p->servers; k++)
        DIST_MPI_CHECK(MPI_Isend(&w, 1, MPI_INT64_T, ps_server_rank(p, k), TAG_TRACE_DONE, p->comm, &r[k]));
    wait_all_named(p->servers, r, ps_server_rank(p, 0), "the servers to hear the trace is written");
    free(r);
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

/* One server's bookkeeping of a worker. */
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

/* A server while it serves (ps_serve): its shard, its workers, what it owes. */
typedef struct server {
    ps *p;
    int k, W, S;             /* this server's shard; the workers; the staleness bound (-1: none) */
    size_t b, len;           /* the shard: values [b, b + len) of the model's */
    float *params, *mom;     /* [len] the shard's parameters and momentum (zeros without momentum) */
    float *zeros;            /* [len] that stand-in */
    ps_update_fn update;
    ps_stop_fn stop;
    void *ctx;
    int64_t own_stop;        /* the stop signal this server got (0: none), in every answer from then on */
    ps_server_stats *st;
    worker_state *ws;        /* [W] */
    MPI_Request *sreq;       /* [2W] each answer's parameters and ack */
    int64_t (*ack)[ACK_LEN]; /* [W] the answers */
    int *answerable;         /* [W] the workers the server may answer now */
    double *sent_t;          /* [W] when each answer was sent (timeline) */
    double trace_zero;       /* rank 0's timeline zero on this clock */
    long stop_step;          /* server 0, asynchronous: the step every worker stops after; 0: none */
    int64_t stop_signal;     /* and the signal */
    int64_t version;         /* updates applied */
    ps_staleness window;     /* staleness since rank 0 last asked */
    int n_gone;              /* workers that said goodbye */
    int last_from;           /* the worker whose header arrived last (the "stall over" line) */
} server;

/* Allocates the bookkeeping, receives rank 0's initial shard (fresh
 * weights, or a checkpoint's; without momentum, optim.momentum = 0, a
 * checkpoint holds zeros) and posts every worker's first header receive. */
static void server_open(server *s, float *momentum) {
    ps *p = s->p;
    int W = s->W;
    size_t len = s->len;
    s->zeros = cnt_calloc(len ? len : 1, sizeof(float));
    s->mom = momentum ? momentum : s->zeros;
    MPI_Request init[2];
    DIST_MPI_CHECK(MPI_Irecv(s->params, (int)len, MPI_FLOAT, 0, TAG_INIT_PARAMS, p->comm, &init[0]));
    DIST_MPI_CHECK(MPI_Irecv(s->mom, (int)len, MPI_FLOAT, 0, TAG_INIT_MOMENTUM, p->comm, &init[1]));
    wait_rank(2, init, 0, "the initial parameters");
    if (!momentum) memset(s->zeros, 0, len * sizeof(float));

    s->ws = cnt_calloc((size_t)W, sizeof *s->ws);
    s->sreq = cnt_malloc(2 * (size_t)W * sizeof *s->sreq);
    s->ack = cnt_calloc((size_t)W, sizeof *s->ack);
    s->answerable = cnt_calloc((size_t)W, sizeof *s->answerable);
    s->sent_t = cnt_calloc((size_t)W, sizeof *s->sent_t);
    s->trace_zero = p->tl ? timeline_zero(p->tl) : 0;
    for (int w = 0; w < W; w++) {
        s->ws[w].g = cnt_malloc((len ? len : 1) * sizeof(float));
        s->sreq[2 * w] = s->sreq[2 * w + 1] = MPI_REQUEST_NULL;
        DIST_MPI_CHECK(MPI_Irecv(s->ws[w].head, HEAD_LEN, MPI_INT64_T, w, TAG_HEAD, p->comm, &s->ws[w].hreq));
    }
}

static void server_close(server *s) {
    free(s->sent_t);
    for (int w = 0; w < s->W; w++) free(s->ws[w].g);
    free(s->ws);
    free(s->sreq);
    free(s->ack);
    free(s->answerable);
    free(s->zeros);
}

/* ---- receive */

/* Worker w's header says PUSH: receives its gradient shard into its own
 * buffer; server 0 notes a stop signal it carries. */
static void server_receive_push(server *s, int w) {
    worker_state *x = &s->ws[w];
    double t_head = time_now();
    if (x->owed)
        cnt_fatal("parameter server %d: worker rank %d pushed step %lld before its step %ld was answered", s->k, w,
                  (long long)x->head[1], x->step);
    MPI_Request r;
    DIST_MPI_CHECK(MPI_Irecv(x->g, (int)s->len, MPI_FLOAT, w, TAG_GRAD, s->p->comm, &r));
    wait_all_named(1, &r, w, "a gradient shard");
    x->pending = x->owed = 1;
    x->clock++;
    x->step = (long)x->head[1];
    if (s->p->tl) {
        char name[64];
        snprintf(name, sizeof name, "gradient from rank %d", w);
        timeline_set_step(s->p->tl, x->step);
        timeline_record(s->p->tl, name, "ps", TID_IN, t_head, time_now());
    }
    x->version = x->head[2];
    x->lr = lr_of(x->head[3]);
    s->st->bytes += (double)s->len * sizeof(float);
    if (s->k == 0 && x->head[4] && !s->stop_step) {
        /* a worker got a stop signal: every worker stops after the step
         * after the furthest one begun, which none has passed */
        for (int j = 0; j < s->W; j++)
            if (s->ws[j].step > s->stop_step) s->stop_step = s->ws[j].step;
        s->stop_step++;
        s->stop_signal = x->head[4];
    }
}

static void server_report(server *s, int w, int64_t kind);

/* Receives every header that has arrived and does what it asks; returns 1
 * when one had. A worker's next header receive is posted once its request
 * is done, except after its goodbye. */
static int server_receive(server *s) {
    int progressed = 0;
    for (int w = 0; w < s->W; w++) {
        worker_state *x = &s->ws[w];
        int f = 0;
        if (x->hreq == MPI_REQUEST_NULL) continue;
        DIST_MPI_CHECK(MPI_Test(&x->hreq, &f, MPI_STATUS_IGNORE));
        if (!f) continue;
        progressed = 1;
        s->last_from = w;
        int64_t kind = x->head[0];
        if (kind == PS_PUSH)
            server_receive_push(s, w);
        else
            server_report(s, w, kind);
        if (kind == PS_BYE) continue; /* no further header from it */
        DIST_MPI_CHECK(MPI_Irecv(x->head, HEAD_LEN, MPI_INT64_T, w, TAG_HEAD, s->p->comm, &x->hreq));
    }
    return progressed;
}

/* ---- admissible, apply, answer */

/* Marks whom the server may answer now; returns 1 when anyone. Synchronous
 * (S = 0) and bounded staleness: a worker that is owed and at most S pushes
 * ahead of the slowest still training; unbounded (S < 0): any owed worker.
 * The slowest always may, so this never deadlocks. */
static int server_admissible(server *s) {
    long slowest = -1;
    for (int w = 0; w < s->W; w++)
        if (!s->ws[w].gone && (slowest < 0 || s->ws[w].clock < slowest)) slowest = s->ws[w].clock;
    int any = 0;
    for (int w = 0; w < s->W; w++) {
        s->answerable[w] = s->ws[w].owed && (s->S < 0 || s->ws[w].clock - slowest <= s->S);
        any |= s->answerable[w];
    }
    return any;
}

/* Applies what has arrived as one update: the pending gradients summed in
 * worker order into the first one's receive buffer (its worker pushes no
 * more until answered, and the update is done before that), at the learning
 * rate of the newest step among them, scale 1/W. Nothing pending: nothing. */
static void server_apply(server *s) {
    int first = -1;
    long newest = -1;
    double lr = 0;
    for (int w = 0; w < s->W; w++)
        if (s->ws[w].pending) {
            if (first < 0) first = w;
            if (s->ws[w].step > newest) {
                newest = s->ws[w].step;
                lr = s->ws[w].lr;
            }
        }
    if (first < 0) return;
    double t0 = time_now();
    float *acc = s->ws[first].g;
    for (int w = first + 1; w < s->W; w++) {
        if (!s->ws[w].pending) continue;
        const float *gw = s->ws[w].g;
        for (size_t i = 0; i < s->len; i++) acc[i] += gw[i];
    }
    int summed = 0;
    for (int w = first; w < s->W; w++) {
        if (!s->ws[w].pending) continue;
        summed++;
        s->ws[w].stale = s->version - s->ws[w].version;
        stale_add(&s->st->stale, (double)s->ws[w].stale);
        stale_add(&s->window, (double)s->ws[w].stale);
        s->ws[w].pending = 0;
    }
    s->update(s->ctx, s->b, s->b + s->len, acc, lr, (float)(1.0 / s->W));
    s->version++;
    double t1 = time_now();
    s->st->update_s += t1 - t0;
    if (s->p->tl) {
        char name[64];
        snprintf(name, sizeof name, "update %lld (%d gradient%s)", (long long)s->version, summed,
                 summed == 1 ? "" : "s");
        timeline_set_step(s->p->tl, newest);
        timeline_record(s->p->tl, name, "ps", TID_SERVE, t0, t1);
    }
    s->st->steps++;
}

/* Sends the shard's parameters and an answer (version, staleness, the stop
 * step and signal) to every answerable worker, and waits for the sends: the
 * next update writes params (each worker posted its receives when it
 * pushed). */
static void server_answer(server *s) {
    ps *p = s->p;
    for (int w = 0; w < s->W; w++) {
        if (!s->answerable[w]) continue;
        s->ack[w][0] = s->version;
        s->ack[w][1] = s->ws[w].stale;
        s->ack[w][2] = s->stop_step;
        s->ack[w][3] = s->stop_signal;
        s->ack[w][4] = s->own_stop;
        DIST_MPI_CHECK(MPI_Isend(s->params, (int)s->len, MPI_FLOAT, w, TAG_PARAMS, p->comm, &s->sreq[2 * w]));
        DIST_MPI_CHECK(MPI_Isend(s->ack[w], ACK_LEN, MPI_INT64_T, w, TAG_ACK, p->comm, &s->sreq[2 * w + 1]));
        s->sent_t[w] = time_now();
        s->ws[w].owed = 0;
        s->st->bytes += (double)s->len * sizeof(float);
    }
    char what[96];
    for (int w = 0; w < s->W; w++) {
        if (!s->answerable[w]) continue;
        snprintf(what, sizeof what, "the parameters of step %ld to be received", s->ws[w].step);
        wait_rank(2, &s->sreq[2 * w], w, what);
        if (p->tl) {
            char name[64];
            snprintf(name, sizeof name, "parameters to rank %d", w);
            timeline_record(p->tl, name, "ps", TID_OUT, s->sent_t[w], time_now());
        }
    }
}

/* ---- report */

/* Rank 0's requests between its steps, and every worker's goodbye: kind is
 * the header's (anything but PS_PUSH). STATE: the momentum; STATE_PARAMS:
 * also the parameters with their version; STALENESS: the window since the
 * last such request; BYE: the worker is done (rank 0's, with a timeline,
 * brings the clock pings that put this server's events on rank 0's axis). */
static void server_report(server *s, int w, int64_t kind) {
    ps *p = s->p;
    int len = (int)s->len;
    if (kind == PS_STATE || kind == PS_STATE_PARAMS) {
        MPI_Request r[3];
        int nr = 0;
        DIST_MPI_CHECK(MPI_Isend(s->mom, len, MPI_FLOAT, w, TAG_MOMENTUM, p->comm, &r[nr++]));
        int64_t v[ACK_LEN] = {s->version, 0, 0, 0};
        if (kind == PS_STATE_PARAMS) {
            DIST_MPI_CHECK(MPI_Isend(s->params, len, MPI_FLOAT, w, TAG_STATE_PARAMS, p->comm, &r[nr++]));
            DIST_MPI_CHECK(MPI_Isend(v, ACK_LEN, MPI_INT64_T, w, TAG_ACK, p->comm, &r[nr++]));
        }
        wait_rank(nr, r, w, "the state to be received");
    } else if (kind == PS_STALENESS) {
        double v[STALE_DOUBLES];
        stale_pack(&s->window, v);
        memset(&s->window, 0, sizeof s->window);
        MPI_Request r;
        DIST_MPI_CHECK(MPI_Isend(v, STALE_DOUBLES, MPI_DOUBLE, w, TAG_STALENESS, p->comm, &r));
        wait_all_named(1, &r, w, "the staleness statistics to be received");
    } else if (kind == PS_BYE) {
        if (s->ws[w].owed) cnt_fatal("parameter server %d: worker rank %d said goodbye while owed an answer", s->k, w);
        if (w == 0 && p->tl) s->trace_zero = clock_pong(p); /* this server's events go onto rank 0's axis */
        s->ws[w].gone = 1;
        s->n_gone++;
    } else {
        cnt_fatal("parameter server %d: unknown message kind %lld from rank %d", s->k, (long long)kind, w);
    }
}

/* After every goodbye: the server's numbers to rank 0 (its receive is
 * posted), then, with a timeline, the server's events on rank 0's axis. */
static void server_report_end(server *s) {
    ps *p = s->p;
    ps_server_stats *st = s->st;
    double v[STATS_DOUBLES] = {(double)st->steps, st->wait_s, st->update_s, st->bytes};
    stale_pack(&st->stale, v + 4);
    MPI_Request r;
    DIST_MPI_CHECK(MPI_Isend(v, STATS_DOUBLES, MPI_DOUBLE, 0, TAG_STATS, p->comm, &r));
    wait_all_named(1, &r, 0, "the statistics to be received");
    if (!p->tl) return;
    char process[64];
    snprintf(process, sizeof process, "rank %d (parameter server %d)", p->rank, s->k);
    size_t n_text;
    char *text = timeline_events_text(p->tl, p->rank, process, s->trace_zero, &n_text);
    if (n_text > INT_MAX)
        cnt_fatal("parameter server %d: a timeline of %zu bytes exceeds MPI's count limit", s->k, n_text);
    uint64_t text_len = n_text;
    MPI_Request tr[2];
    DIST_MPI_CHECK(MPI_Isend(&text_len, 1, MPI_UINT64_T, 0, TAG_TRACE_LEN, p->comm, &tr[0]));
    DIST_MPI_CHECK(MPI_Isend(text, (int)n_text, MPI_CHAR, 0, TAG_TRACE, p->comm, &tr[1]));
    wait_rank(2, tr, 0, "the timeline to be received");
    free(text);
    /* the part on disk goes once rank 0 has the trace written, not before */
    int64_t written = 0;
    DIST_MPI_CHECK(MPI_Irecv(&written, 1, MPI_INT64_T, 0, TAG_TRACE_DONE, p->comm, &tr[0]));
    wait_all_named(1, tr, 0, "rank 0 to write the trace");
    if (written == 1) timeline_remove_part(p->tl);
}

/* ---- the loop */

/* The wait for something to do: dist_wait_until's poll is the receive
 * phase. */
static int server_poll(void *ctx) {
    server *s = ctx;
    if (!s->own_stop) s->own_stop = s->stop(s->ctx);
    return server_receive(s);
}

/* The late-ranks callback: "rank R has waited T s for gradients (the newest
 * step pushed: 12) from rank(s) 0, 3": the workers that owe a push. */
static void server_describe(void *ctx, dist_wait_text part, char *buf, size_t cap) {
    const server *s = ctx;
    if (part == DIST_WAIT_WHO) {
        snprintf(buf, cap, "rank %d", s->p->rank);
        return;
    }
    if (part == DIST_WAIT_OVER) {
        snprintf(buf, cap, "a message from rank %d arrived", s->last_from);
        return;
    }
    long step = 0;
    char who[256] = "";
    size_t o = 0;
    for (int w = 0; w < s->W; w++) {
        if (!s->ws[w].gone && !s->ws[w].owed) name_rank(who, sizeof who, &o, w);
        if (s->ws[w].step > step) step = s->ws[w].step;
    }
    snprintf(buf, cap, "for gradients (the newest step pushed: %ld) from rank(s) %s", step, who);
}

void ps_serve(ps *p, float *params, float *momentum, size_t n, const size_t *shard_end, ps_update_fn update,
              ps_stop_fn stop, void *ctx, ps_server_stats *st) {
    server s = {.p = p, .k = ps_server_index(p), .W = p->workers, .S = p->max_staleness, .params = params,
                .update = update, .stop = stop, .ctx = ctx, .st = st};
    CNT_ASSERT(s.k >= 0 && s.k < p->servers);
    s.b = s.k ? shard_end[s.k - 1] : 0;
    s.len = shard_end[s.k] - s.b;
    CNT_ASSERT(shard_end[p->servers - 1] == n);
    check_count(s.len);
    memset(st, 0, sizeof *st);
    server_open(&s, momentum);
    dist_wait_site wait = {.poll = server_poll,
                           .describe = server_describe,
                           .ctx = &s,
                           .abort_note = " (stopped, hung or slow)",
                           .spin_s = PS_SPIN_S,
                           .max_sleep_us = PS_MAX_SLEEP_US};
    dist_wait_limits(&wait.warn_s, &wait.abort_s);
    while (s.n_gone < s.W) {
        /* Admissibility changes only when a header arrives: wait for one. */
        double idle_from = time_now();
        dist_wait_until(&wait);
        if (!server_admissible(&s)) continue;
        st->wait_s += time_now() - idle_from;
        server_apply(&s);
        server_answer(&s);
    }
    server_report_end(&s);
    server_close(&s);
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
void ps_set_timeline(ps *p, timeline *tl) { (void)p, (void)tl; }
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
int ps_servers_stop(const ps *p) { (void)p; return 0; }
long ps_stop_step(const ps *p, int *signal) {
    (void)p;
    *signal = 0;
    return 0;
}
void ps_worker_fetch_staleness(ps *p, ps_staleness *window) { (void)p, (void)window; }
void ps_worker_bye(ps *p, ps_server_stats *st) { (void)p, (void)st; }
void ps_worker_trace_written(ps *p, int written) { (void)p, (void)written; }
void ps_server_shape(ps *p, ps_shape *shape) { (void)p, (void)shape; }
void ps_serve(ps *p, float *params, float *momentum, size_t n, const size_t *shard_end, ps_update_fn update,
              ps_stop_fn stop, void *ctx, ps_server_stats *st) {
    (void)p, (void)params, (void)momentum, (void)n, (void)shard_end, (void)update, (void)stop, (void)ctx, (void)st;
}

#endif
