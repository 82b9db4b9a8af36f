/*
 * dist/nccl.c - NCCL allreduce on a communication stream, ordered against the
 * compute stream with CUDA events (see dist/nccl.h). Built only when the
 * Makefile finds NCCL (CNT_HAVE_NCCL=1).
 */
#include "dist/nccl.h"

#if CNT_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/cuda_check.h"
#include "common/fileio.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "dist/wait.h"
#include "model/backend.h"
#include "model/cuda_kernels.h"

/* Rounds whose events are kept: the one being queued, the one just closed
 * and the one before it (which the reducer reads). */
#define ROUND_SLOTS 3

/* The events a round's allreduces record: an eager round's own (slot
 * round % ROUND_SLOTS), or a recording's, which every replay of that
 * recorded step records again (as event-record nodes of its graph). */
typedef struct round_events {
    int count, cap;        /* allreduces queued; events created */
    cudaEvent_t *start, *end;   /* [cap] timing events on the communication stream */
    cudaEvent_t mark;      /* on the compute stream, where its first wait (dist_nccl_wait or the join's) begins */
    int marked;            /* mark recorded in this round */
    double *start_s, *end_s;    /* [cap] filled by dist_nccl_round_wait */
} round_events;

typedef struct round_slot {
    long round;            /* which round uses this slot; -1: none yet */
    int closed;            /* dist_nccl_join (or dist_nccl_replay) has closed it */
    round_events *ev;      /* whose events it records */
} round_slot;

struct dist_nccl {
    ncclComm_t comm;
    cudaStream_t stream;   /* the communication stream */
    int device;            /* the CUDA device it was created on */
    cudaEvent_t ready;     /* compute stream -> communication stream (no timing) */
    cudaEvent_t done;      /* communication stream -> compute stream (no timing) */
    cudaEvent_t anchor;    /* a GPU time whose host time is anchor_s */
    double anchor_s;
    long next_round;       /* the round being queued (opened by its first allreduce) */
    long last_closed;      /* -1: none */
    round_slot slots[ROUND_SLOTS];
    round_events own[ROUND_SLOTS];                /* eager rounds' */
    round_events recorded[DIST_NCCL_RECORDINGS]; /* recorded steps' */
    int recording;         /* the set being recorded (dist_nccl_record); -1: none */
    int any_recorded;      /* a recording was made: graphs may hold collectives of this communicator */
    void *half;            /* dist_nccl_half_staging's buffer, half_n values; NULL: none */
    size_t half_n;
    int half_recorded;     /* a recording converted through it */
    size_t own_bytes;      /* GPU memory NCCL took by the end of dist_nccl_create */
};

/* Event set s of ROUND_SLOTS + DIST_NCCL_RECORDINGS: the eager slots', then the recordings'. */
static round_events *event_set(dist_nccl *c, int s) {
    return s < ROUND_SLOTS ? &c->own[s] : &c->recorded[s - ROUND_SLOTS];
}

/* ------------------------------------------------------------ creation */

/* What each rank tells rank 0 about its GPU. Fixed-size, NUL-terminated
 * strings, so the record can travel as bytes. */
typedef struct peer_info {
    int32_t rank;
    int32_t device;        /* cudaGetDevice; -1 on error */
    int32_t n_devices;     /* visible to this rank */
    char bus_id[32];       /* cudaDeviceGetPCIBusId: the physical GPU */
    char host[96];         /* NCCL_HOSTID, or the host name */
    char boot_id[48];      /* /proc/sys/kernel/random/boot_id; "" if unreadable */
    char error[200];       /* "" or why this rank cannot take part */
} peer_info;

/* Rank 0's answer to every rank: "" and the id, or why no communicator. */
typedef struct verdict {
    char message[640];
    ncclUniqueId id;
} verdict;

static void copy_str(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src);
}

static void describe_self(peer_info *me) {
    memset(me, 0, sizeof *me);
    me->rank = dist_rank();
    me->device = -1;
    /* Two processes are on one machine when NCCL would think so: the same
     * NCCL_HOSTID when set, else the same host name and boot id (NCCL's own
     * host hash uses those), so this check refuses exactly what NCCL would. */
    const char *hostid = getenv("NCCL_HOSTID");
    if (hostid && *hostid) {
        copy_str(me->host, sizeof me->host, hostid);
    } else {
        if (gethostname(me->host, sizeof me->host - 1) != 0) copy_str(me->host, sizeof me->host, "?");
        me->host[sizeof me->host - 1] = '\0';
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
        if (f) {
            if (!fgets(me->boot_id, sizeof me->boot_id, f)) me->boot_id[0] = '\0';
            me->boot_id[strcspn(me->boot_id, "\r\n")] = '\0';
            fclose(f);
        }
    }
    /* Not CUDA_CHECK: a rank without a usable device must still take part
     * in the gather below, or the others would wait for it forever. */
    int dev = -1, n = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) e = cudaDeviceGetPCIBusId(me->bus_id, (int)sizeof me->bus_id, dev);
    if (e != cudaSuccess) {
        snprintf(me->error, sizeof me->error, "rank %d has no usable CUDA device (%s)", me->rank,
                 cudaGetErrorString(e));
        return;
    }
    me->device = dev;
    me->n_devices = n;
}

static int same_machine(const peer_info *a, const peer_info *b) {
    return strcmp(a->host, b->host) == 0 && strcmp(a->boot_id, b->boot_id) == 0;
}

/* Rank 0: "" when every rank can take part, else the reason. */
static void judge(const peer_info *p, int world, char *msg, size_t cap) {
    msg[0] = '\0';
    for (int r = 0; r < world; r++) {
        if (p[r].error[0]) {
            snprintf(msg, cap, "dist.backend=nccl: %s; use dist.backend=mpi or ring, or a GPU on every rank",
                     p[r].error);
            return;
        }
    }
    for (int i = 0; i < world; i++) {
        for (int j = i + 1; j < world; j++) {
            if (!same_machine(&p[i], &p[j]) || strcmp(p[i].bus_id, p[j].bus_id) != 0) continue;
            int sharing = 0, on_host = 0;
            for (int r = 0; r < world; r++) {
                sharing += same_machine(&p[r], &p[i]) && strcmp(p[r].bus_id, p[i].bus_id) == 0;
                on_host += same_machine(&p[r], &p[i]);
            }
            snprintf(msg, cap,
                     "dist.backend=nccl: ranks %d and %d (%d rank%s in all) share one GPU (PCI %s, cuda:%d "
                     "of rank %d) on host %s, and NCCL needs a GPU of its own for each rank; %d ranks run "
                     "there on %d visible GPU%s: start no more ranks per node than GPUs, or use "
                     "dist.backend=mpi (or ring), which stages through host memory and allows sharing",
                     i, j, sharing, sharing == 1 ? "" : "s", p[i].bus_id, p[i].device, i, p[i].host,
                     on_host, p[i].n_devices, p[i].n_devices == 1 ? "" : "s");
            return;
        }
    }
}

static void warm_up(dist_nccl *c);

dist_nccl *dist_nccl_create(void) {
    int rank = dist_rank(), world = dist_world();
    peer_info me;
    describe_self(&me);

    /* Why a gather to one judge and a broadcast of its verdict: every rank
     * must take the same branch (build the communicator or return NULL), or
     * some would wait in ncclCommInitRank for ranks that gave up. */
    void *all = NULL;
    size_t *counts = NULL;
    dist_gather_bytes(&me, sizeof me, &all, &counts);
    verdict v;
    memset(&v, 0, sizeof v);
    if (rank == 0) {
        for (int r = 0; r < world; r++) CNT_ASSERT(counts[r] == sizeof me);
        judge(all, world, v.message, sizeof v.message);
        /* The id names rank 0's bootstrap socket; made only when it will be used. */
        if (!v.message[0]) NCCL_CHECK(ncclGetUniqueId(&v.id));
    }
    free(all);
    free(counts);
    dist_broadcast(&v, sizeof v, 0);
    v.message[sizeof v.message - 1] = '\0';
    if (v.message[0]) {
        cnt_err_set("%s", v.message);
        return NULL;
    }

    dist_nccl *c = cnt_calloc(1, sizeof *c);
    c->device = me.device;
    size_t free_before = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    /* Blocking: returns once every rank has joined (or fails, fatally);
     * bounded by the stall limits, naming the call (a rank that never
     * joins would otherwise hold every other one here for ever). */
    dist_blocking_begin("ncclCommInitRank");
    NCCL_CHECK(ncclCommInitRank(&c->comm, world, v.id, rank));
    dist_blocking_end();
    /* At the device's highest priority: an allreduce queued while backward
     * still fills the GPU gets its blocks scheduled ahead of the backward
     * kernels waiting beside it, so the exchange overlaps instead of
     * queueing behind them (issue 30; not yet measured on a GPU). */
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    /* The anchor: recorded on the idle communication stream and waited for at
     * once, so its GPU time is (within a few microseconds) anchor_s. */
    CUDA_CHECK(cudaEventCreate(&c->anchor));
    CUDA_CHECK(cudaEventRecord(c->anchor, c->stream));
    CUDA_CHECK(cudaEventSynchronize(c->anchor));
    c->anchor_s = time_now();
    for (int s = 0; s < ROUND_SLOTS; s++) c->slots[s].round = -1;
    for (int s = 0; s < ROUND_SLOTS + DIST_NCCL_RECORDINGS; s++) CUDA_CHECK(cudaEventCreate(&event_set(c, s)->mark));
    c->last_closed = -1;
    c->recording = -1;
    warm_up(c);
    size_t free_after = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    c->own_bytes = free_before > free_after ? free_before - free_after : 0;
    return c;
}

size_t dist_nccl_own_bytes(const dist_nccl *c) { return c ? c->own_bytes : 0; }

void dist_nccl_free(dist_nccl *c) {
    if (!c) return;
    /* Why wait first: the events and the communicator must outlive every
     * operation queued on them. */
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    dist_blocking_begin("ncclCommFinalize"); /* waits for the peers: bounded as ncclCommInitRank */
    NCCL_CHECK(ncclCommFinalize(c->comm));
    dist_blocking_end();
    NCCL_CHECK(ncclCommDestroy(c->comm));
    for (int s = 0; s < ROUND_SLOTS + DIST_NCCL_RECORDINGS; s++) {
        round_events *ev = event_set(c, s);
        for (int k = 0; k < ev->cap; k++) {
            CUDA_CHECK(cudaEventDestroy(ev->start[k]));
            CUDA_CHECK(cudaEventDestroy(ev->end[k]));
        }
        CUDA_CHECK(cudaEventDestroy(ev->mark));
        free(ev->start);
        free(ev->end);
        free(ev->start_s);
        free(ev->end_s);
    }
    CUDA_CHECK(cudaEventDestroy(c->ready));
    CUDA_CHECK(cudaEventDestroy(c->done));
    CUDA_CHECK(cudaEventDestroy(c->anchor));
    CUDA_CHECK(cudaStreamDestroy(c->stream));
    if (c->half) CUDA_CHECK(cudaFree(c->half)); /* the stream has finished: nothing reads it */
    free(c);
}

void dist_nccl_abort(dist_nccl *c) {
    if (!c) return;
    /* No waits: a peer may never join the collectives still queued. The
     * process is about to end; its streams and events go with it. (The
     * recorded steps' graphs were destroyed first, stepper_drop_recordings:
     * the abort stops their collectives, they complete, and NCCL's wait for
     * them ends.) */
    (void)ncclCommAbort(c->comm);
    for (int s = 0; s < ROUND_SLOTS + DIST_NCCL_RECORDINGS; s++) {
        round_events *ev = event_set(c, s);
        free(ev->start);
        free(ev->end);
        free(ev->start_s);
        free(ev->end_s);
    }
    free(c);
}

/* ------------------------------------------------------------ queueing */

void *dist_nccl_half_staging(dist_nccl *c, size_t n) {
    CNT_ASSERT(c && n > 0 && c->recording < 0);
    if (c->half && n <= c->half_n) return c->half;
    /* a recorded step holds the old buffer's address: it cannot move */
    CNT_ASSERT(!c->half_recorded);
    if (c->half) {
        CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* queued conversions may still use it */
        CUDA_CHECK(cudaFree(c->half));
    }
    CUDA_CHECK(cudaMalloc(&c->half, n * sizeof(uint16_t)));
    c->half_n = n;
    return c->half;
}

/* The slot of the round being queued, opened (reset) by its first use:
 * with events of its own, or a recording's while one is made. */
static round_slot *open_slot(dist_nccl *c) {
    round_slot *sl = &c->slots[c->next_round % ROUND_SLOTS];
    if (sl->round != c->next_round) {
        sl->round = c->next_round;
        sl->closed = 0;
        sl->ev = c->recording >= 0 ? &c->recorded[c->recording] : &c->own[c->next_round % ROUND_SLOTS];
        sl->ev->count = 0;
        sl->ev->marked = 0;
    }
    return sl;
}

/* A timing event: while a step is recorded, an event-record node of its
 * graph (cudaEventRecordExternal), which each replay records again; a plain
 * record there would only order the capture and leave the event unrecorded. */
static void record_timing(const dist_nccl *c, cudaEvent_t ev, cudaStream_t s) {
    if (c->recording >= 0) CUDA_CHECK(cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal));
    else CUDA_CHECK(cudaEventRecord(ev, s));
}

void dist_nccl_allreduce_after(dist_nccl *c, void *compute_stream, float *buf, size_t n, void *half) {
    CNT_ASSERT(c && buf && n > 0);
    cudaStream_t cs = (cudaStream_t)compute_stream;
    round_events *ev = open_slot(c)->ev;
    if (ev->count == ev->cap) {
        int cap = ev->cap ? 2 * ev->cap : 8;
        ev->start = cnt_realloc(ev->start, (size_t)cap * sizeof *ev->start);
        ev->end = cnt_realloc(ev->end, (size_t)cap * sizeof *ev->end);
        ev->start_s = cnt_realloc(ev->start_s, (size_t)cap * sizeof *ev->start_s);
        ev->end_s = cnt_realloc(ev->end_s, (size_t)cap * sizeof *ev->end_s);
        for (int k = ev->cap; k < cap; k++) {
            CUDA_CHECK(cudaEventCreate(&ev->start[k]));
            CUDA_CHECK(cudaEventCreate(&ev->end[k]));
        }
        ev->cap = cap;
    }
    int k = ev->count++;
    /* One `ready` event serves every call: cudaStreamWaitEvent waits for the
     * record made just before it, and a later record does not change that.
     * (While recording, the two order the capture: the communication stream
     * joins it here and leaves it at the join's `done`.) */
    CUDA_CHECK(cudaEventRecord(c->ready, cs));
    CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->ready, 0));
    record_timing(c, ev->start[k], c->stream);
    if (half) {
        CNT_ASSERT(c->half && (uint16_t *)half >= (uint16_t *)c->half &&
                   (uint16_t *)half + n <= (uint16_t *)c->half + c->half_n);
        if (c->recording >= 0) c->half_recorded = 1;
        CUDA_CHECK(cuk_narrow(c->stream, BACKEND_MATH_FP16, n, buf, half));
        NCCL_CHECK(ncclAllReduce(half, half, n, ncclFloat16, ncclSum, c->comm, c->stream));
        CUDA_CHECK(cuk_widen(c->stream, BACKEND_MATH_FP16, n, half, buf, 0));
    } else {
        NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->comm, c->stream));
    }
    record_timing(c, ev->end[k], c->stream);
}

/* compute_stream waits for everything queued on the communication stream,
 * the round's mark recorded first if no wait of this round has. */
static round_slot *compute_waits(dist_nccl *c, cudaStream_t cs) {
    round_slot *sl = open_slot(c);
    if (!sl->ev->marked) {
        record_timing(c, sl->ev->mark, cs);
        sl->ev->marked = 1;
    }
    CUDA_CHECK(cudaEventRecord(c->done, c->stream));
    CUDA_CHECK(cudaStreamWaitEvent(cs, c->done, 0));
    return sl;
}

void dist_nccl_wait(dist_nccl *c, void *compute_stream) {
    CNT_ASSERT(c && c->recording < 0);
    compute_waits(c, (cudaStream_t)compute_stream);
}

long dist_nccl_join(dist_nccl *c, void *compute_stream) {
    CNT_ASSERT(c);
    round_slot *sl = compute_waits(c, (cudaStream_t)compute_stream);
    sl->closed = 1;
    c->last_closed = c->next_round++;
    return c->last_closed;
}

double dist_nccl_allreduce_time_us(dist_nccl *c, void *compute_stream, float *buf, size_t n, int reps,
                                   double warn_s, double abort_s) {
    CNT_ASSERT(c && buf && n > 0 && reps >= 1 && c->recording < 0);
    double best = 0;
    for (int k = 0; k < reps; k++) {
        /* Why the barrier: the time is the sum's, not the wait inside NCCL's
         * kernel for a rank still finishing the one before. */
        dist_barrier();
        dist_nccl_allreduce_after(c, compute_stream, buf, n, NULL);
        long round = dist_nccl_join(c, compute_stream);
        dist_nccl_round r;
        dist_nccl_round_wait(c, round, warn_s, abort_s, "the allreduce timed for dist.bucket_mb = auto", &r);
        double t = r.comm_ms * 1e-3;
        if (k == 0 || t < best) best = t;
    }
    return dist_slowest_us(best);
}

void dist_nccl_record(dist_nccl *c, int set) {
    CNT_ASSERT(c && set >= -1 && set < DIST_NCCL_RECORDINGS);
    /* a round is recorded whole: from its first allreduce to its join */
    CNT_ASSERT(c->slots[c->next_round % ROUND_SLOTS].round != c->next_round);
    c->recording = set;
    if (set >= 0) c->any_recorded = 1;
}

long dist_nccl_replay(dist_nccl *c, int set) {
    CNT_ASSERT(c && set >= 0 && set < DIST_NCCL_RECORDINGS && c->recording < 0);
    CNT_ASSERT(c->slots[c->next_round % ROUND_SLOTS].round != c->next_round); /* no round open */
    round_slot *sl = &c->slots[c->next_round % ROUND_SLOTS];
    sl->round = c->next_round;
    sl->closed = 1;
    sl->ev = &c->recorded[set]; /* its count: the recording's */
    c->last_closed = c->next_round++;
    return c->last_closed;
}

/* ------------------------------------------------------------ timing */

static void check_async_error(dist_nccl *c, const char *what) {
    ncclResult_t ae = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(c->comm, &ae));
    if (ae != ncclSuccess && ae != ncclInProgress) {
        const char *last = ncclGetLastError(c->comm);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", last ? last : "");
        /* what is still running on the device stops (NCCL's error handling);
         * not while recorded steps may hold collectives: the abort would wait
         * for their graphs to be destroyed, and the job ends here anyway */
        if (!c->any_recorded) (void)ncclCommAbort(c->comm);
        cnt_fatal("NCCL reported an asynchronous error while waiting for %s: %s (%s)", what,
                  ncclGetErrorString(ae), msg);
    }
}

/* 1 once ev has completed (or was never recorded), 0 while pending. */
static int event_done(cudaEvent_t ev) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) {
        /* not a failure: do not leave it as the thread's last error, where
         * the next kernel launch's check would report it */
        if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
        return 0;
    }
    CUDA_CHECK(e);
    return 1;
}

static double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
    return ms;
}

/* What dist_nccl_round_wait waits for: both events of a round. */
typedef struct round_wait {
    dist_nccl *c;
    cudaEvent_t last, mark;
    const char *what;
} round_wait;

/* dist_wait_until's poll: 1 once both events are done; while not, NCCL's
 * asynchronous error is checked (a failed peer ends the job here rather
 * than at the limit). */
static int round_poll(void *ctx) {
    round_wait *w = ctx;
    if (event_done(w->last) && event_done(w->mark)) return 1;
    check_async_error(w->c, w->what);
    return 0;
}

/* The late-ranks callback: the GPU cannot say which peer is late, so the
 * lines name what has not finished. */
static void round_describe(void *ctx, dist_wait_text part, char *buf, size_t cap) {
    const round_wait *w = ctx;
    if (part == DIST_WAIT_WHO)
        snprintf(buf, cap, "rank %d", dist_job_rank());
    else
        snprintf(buf, cap, part == DIST_WAIT_LATE ? "for %s to finish on the GPU" : "%s finished on the GPU", w->what);
}

/* Waits, bounded, until both of w's events are done, then checks NCCL's
 * asynchronous error. A short spin, then sleeps growing to 250 us: usually
 * the events have long completed; when not, the host has nothing better to
 * do than wait, and should leave the cores to the data loaders. */
static void wait_events(round_wait *w, double warn_s, double abort_s) {
    dist_wait_site s = {.poll = round_poll,
                        .describe = round_describe,
                        .ctx = w,
                        .warn_note = " (NCCL reports no error): a peer rank or the network may be stuck",
                        .abort_note = ": a peer rank (its process or its GPU) or the network is stuck",
                        .spin_polls = 16,
                        .max_sleep_us = 250,
                        .warn_s = warn_s,
                        .abort_s = abort_s};
    dist_wait_until(&s);
    check_async_error(w->c, w->what);
}

/* NCCL connects to its peers at the first collective of each algorithm and
 * protocol (NCCL_RUNTIME_CONNECT, the default since 2.22), allocating its
 * buffers on the GPU then: after the start-up memory check, which reads the
 * free memory to decide whether the run fits. Two sums now, one value (the
 * LL protocol, as the small last bucket uses) and 32 MiB (SIMPLE, as a
 * gradient bucket of the default 25 MiB), make those buffers before the
 * check, so the free memory it reads already leaves them out; what they
 * took is dist_nccl_own_bytes. Waited for like a round (bounded). */
static void warm_up(dist_nccl *c) {
    size_t n = (size_t)8 << 20; /* floats: 32 MiB */
    float *buf = NULL;
    if (cudaMalloc((void **)&buf, n * sizeof(float)) != cudaSuccess) {
        /* a GPU that full fails the memory check next anyway; the large sum
         * only warms up, so it is left out rather than ending the job here.
         * Every rank still queues the same collectives: the count is agreed
         * below, before any is queued. */
        (void)cudaGetLastError();
        n = 0;
    }
    double lacking = n == 0; /* ranks without the 32 MiB */
    dist_phase("start-up: NCCL warm-up");
    dist_allreduce_sum_f64(&lacking, 1);
    if (lacking > 0 && buf) {
        CUDA_CHECK(cudaFree(buf));
        buf = NULL;
    }
    if (!buf) {
        n = 1;
        CUDA_CHECK(cudaMalloc((void **)&buf, sizeof(float)));
    }
    CUDA_CHECK(cudaMemsetAsync(buf, 0, n * sizeof(float), c->stream));
    NCCL_CHECK(ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, c->comm, c->stream));
    if (n > 1) NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->comm, c->stream));
    CUDA_CHECK(cudaEventRecord(c->done, c->stream));
    double warn_s, abort_s;
    dist_wait_limits(&warn_s, &abort_s);
    round_wait w = {c, c->done, c->done, "NCCL's warm-up allreduce at start-up"};
    wait_events(&w, warn_s, abort_s);
    CUDA_CHECK(cudaFree(buf));
}

void dist_nccl_round_wait(dist_nccl *c, long round, double warn_s, double abort_s, const char *what,
                          dist_nccl_round *out) {
    CNT_ASSERT(c && out && round >= 0 && round <= c->last_closed);
    round_slot *sl = &c->slots[round % ROUND_SLOTS];
    /* A slot is reused when round + ROUND_SLOTS opens. */
    CNT_ASSERT(sl->round == round && sl->closed);
    round_events *ev = sl->ev;
    /* The end of the last allreduce (the communication stream runs them in
     * order) and the join's mark on the compute stream. */
    round_wait w = {c, ev->count ? ev->end[ev->count - 1] : c->done, ev->mark, what};
    wait_events(&w, warn_s, abort_s);
    cudaEvent_t last = w.last;
    out->count = ev->count;
    out->comm_ms = 0;
    out->exposed_ms = 0;
    if (ev->count > 0) {
        /* Why relative to the round's first start: cudaEventElapsedTime is a
         * float of milliseconds, exact to its resolution over a step but not
         * over hours; only the round's offset from the anchor takes the
         * coarse path. */
        cudaEvent_t first = ev->start[0];
        double base_s = c->anchor_s + 1e-3 * elapsed_ms(c->anchor, first);
        for (int k = 0; k < ev->count; k++) {
            double a = k ? elapsed_ms(first, ev->start[k]) : 0.0, b = elapsed_ms(first, ev->end[k]);
            ev->start_s[k] = base_s + 1e-3 * a;
            ev->end_s[k] = base_s + 1e-3 * b;
            out->comm_ms += b - a;
        }
        double ex = elapsed_ms(ev->mark, last);
        out->exposed_ms = ex > 0 ? ex : 0;
    }
    out->start_s = ev->start_s;
    out->end_s = ev->end_s;
}

void dist_nccl_libraries(char *buf, size_t len) {
    int v = 0; /* 2.9 and later: major*10000 + minor*100 + patch */
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    char ver[96];
    file_version_text(ver, sizeof ver, v, NCCL_MAJOR * 10000L + NCCL_MINOR * 100 + NCCL_PATCH);
    file_library_line(buf, len, "NCCL", ver, (const void *)ncclGetVersion);
}

#endif /* CNT_HAVE_NCCL */
