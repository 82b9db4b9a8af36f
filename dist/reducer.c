/*
 * dist/reducer.c - bucketed gradient allreduce overlapped with backward: on a
 * communication thread staged through host memory (MPI, our ring), optionally
 * fp16 on the wire, or queued on the GPU with NCCL; guarded by the stall
 * watchdog (see dist/reducer.h).
 */
#include "dist/reducer.h"
#include "common/check.h"
#include "common/threads.h"
#include "common/timer.h"
#include "common/half.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bucket {
    size_t begin, end;   /* [begin, end) of the gradient buffer */
    double t_start, t_end;
    void *fence;         /* MPI path: marks the ops that wrote the bucket */
} bucket;

struct reducer {
    const backend *be;
    float *grads;        /* [n] device */
    float *host;         /* [n] host staging */
    uint16_t *half;      /* [n] host fp16 staging (compress = fp16), else NULL */
    size_t n;
    dist_algo algo;
    int overlap;
    dist_watchdog *wd;   /* NULL when the watchdog is off */
    bucket *buckets;
    int n_buckets;
    size_t ready_upto;   /* training thread only: gradients final below this offset */
    int next_launch;     /* training thread only: first bucket not yet handed over */
    int next_fence;      /* training thread only: first bucket whose fence is not recorded this step */
    timeline *tl;        /* NULL, or where buckets are recorded */

    /* The NCCL path (nccl != NULL); training thread only. */
    dist_nccl *nccl;
    void *stream;        /* be->native_stream() */
    double stall_warn_s, stall_abort_s;
    long pending_round;  /* the last step's round, not yet read; -1: none */
    long pending_step;   /* ... and its step */
    int have_prev;       /* prev_* hold a read round not yet reported */
    double prev_comm_ms, prev_exposed_ms;
    long prev_step;
    int have_thread;     /* the MPI path's communication thread runs */

    /* Guards launched, done and stop: the training thread hands buckets over
     * (launched), the communication thread reports them finished (done). */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* the communication thread waits here for a launch */
    pthread_cond_t done_cv;  /* reducer_finish waits here for the last bucket */
    int launched, done, stop;
    long step;           /* the current step, as given to reducer_begin */
    pthread_t thread;
};

static void *comm_main(void *arg) {
    reducer *rd = arg;
    cnt_mutex_lock(&rd->mu);
    for (;;) {
        while (!rd->stop && rd->done == rd->launched) cnt_cond_wait(&rd->work_cv, &rd->mu);
        if (rd->stop) break;
        int b = rd->done;
        long step = rd->step;
        cnt_mutex_unlock(&rd->mu);
        /* Buckets are reduced in launch order, the same order on every rank,
         * so the ranks' collectives always match. */
        bucket *bk = &rd->buckets[b];
        size_t len = bk->end - bk->begin;
        bk->t_start = time_now();
        float *h = rd->host + bk->begin;
        /* Waits for the ops that wrote this bucket and for nothing after them
         * (see dist/reducer.h): backward goes on on the device. */
        rd->be->download_fenced(h, rd->grads + bk->begin, len * sizeof(float), bk->fence);
        if (rd->half) fp16_from_float_array(rd->half + bk->begin, h, len);
        /* Why before the allreduce: a blocking collective cannot tell who is
         * missing; the watchdog's arrival barrier can, and warns or aborts. */
        dist_watchdog_arrive(rd->wd, step, b);
        if (rd->half) {
            dist_allreduce_sum_f16(rd->half + bk->begin, len, rd->algo);
            fp16_to_float_array(h, rd->half + bk->begin, len);
        } else {
            dist_allreduce_sum(h, len, rd->algo);
        }
        /* Returns once the sum is on the device; nothing queued touches a
         * finished bucket before the optimizer, issued after reducer_finish. */
        rd->be->upload_sync(rd->grads + bk->begin, rd->host + bk->begin, len * sizeof(float));
        bk->t_end = time_now();
        if (rd->tl) {
            char name[48];
            snprintf(name, sizeof name, "allreduce bucket %d", b);
            timeline_record(rd->tl, name, "comm", TIMELINE_TID_COMM, bk->t_start, bk->t_end);
        }
        cnt_mutex_lock(&rd->mu);
        rd->done++;
        pthread_cond_signal(&rd->done_cv);
    }
    cnt_mutex_unlock(&rd->mu);
    return NULL;
}

reducer *reducer_create(const backend *be, float *grads, size_t n, const reducer_opts *opts) {
    size_t first_bucket = opts->first_bucket, bucket_size = opts->bucket;
    CNT_ASSERT(n > 0 && first_bucket > 0 && bucket_size > 0);
    CNT_ASSERT(opts->compress == REDUCER_COMPRESS_NONE || opts->compress == REDUCER_COMPRESS_FP16);
#if CNT_HAVE_NCCL
    /* fp16 with NCCL would need a device conversion kernel; the trainer
     * rejects dist.compress=fp16 with dist.backend=nccl as a config error. */
    CNT_ASSERT(!opts->nccl || opts->compress == REDUCER_COMPRESS_NONE);
    /* NCCL orders itself against the compute stream: a GPU backend's. */
    CNT_ASSERT(!opts->nccl || be->native_stream() != NULL);
#else
    CNT_ASSERT(opts->nccl == NULL); /* a build without NCCL cannot have made one */
#endif
    reducer *rd = cnt_calloc(1, sizeof *rd);
    rd->be = be;
    rd->grads = grads;
    rd->n = n;
    rd->algo = opts->algo;
    rd->overlap = opts->overlap;
    rd->nccl = opts->nccl;
    rd->stream = opts->nccl ? be->native_stream() : NULL;
    rd->stall_warn_s = opts->stall_warn_s;
    rd->stall_abort_s = opts->stall_abort_s;
    rd->pending_round = -1;
    if (!rd->nccl) rd->host = cnt_malloc(n * sizeof(float));
    if (opts->compress == REDUCER_COMPRESS_FP16) rd->half = cnt_malloc(n * sizeof(uint16_t));
    rd->wd = dist_watchdog_create(opts->stall_warn_s, opts->stall_abort_s);
    size_t cap = 2 + n / bucket_size;
    rd->buckets = cnt_calloc(cap, sizeof *rd->buckets);
    size_t off = 0;
    while (off < n) {
        size_t len = rd->n_buckets == 0 ? first_bucket : bucket_size;
        if (len > n - off) len = n - off;
        rd->buckets[rd->n_buckets].begin = off;
        rd->buckets[rd->n_buckets].end = off + len;
        if (!rd->nccl) rd->buckets[rd->n_buckets].fence = be->fence_create();
        rd->n_buckets++;
        off += len;
    }
    errno = pthread_mutex_init(&rd->mu, NULL);
    CHECK_ERRNO(errno == 0, "pthread_mutex_init");
    errno = pthread_cond_init(&rd->work_cv, NULL);
    CHECK_ERRNO(errno == 0, "pthread_cond_init");
    errno = pthread_cond_init(&rd->done_cv, NULL);
    CHECK_ERRNO(errno == 0, "pthread_cond_init");
    if (!rd->nccl) {
        errno = pthread_create(&rd->thread, NULL, comm_main, rd);
        CHECK_ERRNO(errno == 0, "pthread_create (communication thread)");
        rd->have_thread = 1;
    }
    return rd;
}

int reducer_bucket_count(const reducer *rd) { return rd->n_buckets; }

static void nccl_read_pending(reducer *rd);

void reducer_set_timeline(reducer *rd, timeline *tl) {
    /* NCCL: the last step's buckets belong on the timeline being left. */
    if (rd->nccl && rd->tl && tl != rd->tl) nccl_read_pending(rd);
    /* Why the lock: it orders this write before the communication thread's
     * next read of rd->tl (which follows its own lock in comm_main). */
    cnt_mutex_lock(&rd->mu);
    rd->tl = tl;
    cnt_mutex_unlock(&rd->mu);
}

void reducer_begin(reducer *rd, long step_number) {
    rd->ready_upto = 0;
    rd->next_launch = 0;
    rd->next_fence = 0;
    cnt_mutex_lock(&rd->mu);
    CNT_ASSERT(rd->done == rd->launched);
    rd->launched = rd->done = 0;
    rd->step = step_number;
    cnt_mutex_unlock(&rd->mu);
}

/* MPI path: marks the ops issued so far as the writers of buckets
 * [next_fence, upto), whose last gradients backward has just issued. */
static void record_fences(reducer *rd, int upto) {
    for (; rd->next_fence < upto; rd->next_fence++) rd->be->fence_record(rd->buckets[rd->next_fence].fence);
}

/* Starts the allreduces of buckets [next_launch, upto). MPI path: hands them
 * to the communication thread (their fences are recorded). NCCL path: queues
 * them on the communication stream after the compute stream's ops so far,
 * each after the host-side half of the watchdog (dist/reducer.h). */
static void launch(reducer *rd, int upto) {
    if (upto <= rd->next_launch) return;
    if (rd->nccl) {
#if CNT_HAVE_NCCL
        for (int b = rd->next_launch; b < upto; b++) {
            bucket *bk = &rd->buckets[b];
            dist_watchdog_arrive(rd->wd, rd->step, b);
            dist_nccl_allreduce_after(rd->nccl, rd->stream, rd->grads + bk->begin, bk->end - bk->begin);
        }
#endif
        rd->next_launch = upto;
        return;
    }
    CNT_ASSERT(rd->next_fence >= upto);
    cnt_mutex_lock(&rd->mu);
    rd->launched = upto;
    pthread_cond_signal(&rd->work_cv);
    cnt_mutex_unlock(&rd->mu);
    rd->next_launch = upto;
}

void reducer_grads_ready(void *ctx, size_t offset, size_t count) {
    reducer *rd = ctx;
    CNT_ASSERT(offset == rd->ready_upto && offset + count <= rd->n);
    rd->ready_upto = offset + count;
    if (!rd->overlap) return;
    int b = rd->next_launch;
    while (b < rd->n_buckets && rd->buckets[b].end <= rd->ready_upto) b++;
    if (!rd->nccl) record_fences(rd, b);
    launch(rd, b);
}

/* NCCL path: waits for the pending round (the last finished step's
 * allreduces) on the device, records its buckets on the timeline, and keeps
 * its times for the next reducer_finish to report. */
static void nccl_read_pending(reducer *rd) {
    if (rd->pending_round < 0) return;
#if CNT_HAVE_NCCL
    char what[96];
    snprintf(what, sizeof what, "the gradient allreduces of step %ld", rd->pending_step);
    dist_nccl_round r;
    dist_nccl_round_wait(rd->nccl, rd->pending_round, rd->stall_warn_s, rd->stall_abort_s, what, &r);
    CNT_ASSERT(r.count == rd->n_buckets);
    if (rd->tl) {
        for (int b = 0; b < r.count; b++) {
            char name[48];
            snprintf(name, sizeof name, "allreduce bucket %d", b);
            timeline_record(rd->tl, name, "comm", TIMELINE_TID_COMM, r.start_s[b], r.end_s[b]);
        }
    }
    rd->have_prev = 1;
    rd->prev_comm_ms = r.comm_ms;
    rd->prev_exposed_ms = r.exposed_ms;
    rd->prev_step = rd->pending_step;
#endif
    rd->pending_round = -1;
}

static void finish_nccl(reducer *rd, reducer_stats *st) {
    int early = rd->next_launch;
    launch(rd, rd->n_buckets);
    long round = 0;
#if CNT_HAVE_NCCL
    /* The optimizer ops issued after this return run after the sums. */
    round = dist_nccl_join(rd->nccl, rd->stream);
#endif
    /* Why here: this step's backward is still queued on the device, so the
     * wait for the previous step's allreduces leaves it no idle time. */
    nccl_read_pending(rd);
    if (st) {
        st->comm_ms = rd->have_prev ? rd->prev_comm_ms : 0;
        st->exposed_ms = rd->have_prev ? rd->prev_exposed_ms : 0;
        st->comm_step = rd->have_prev ? rd->prev_step : 0;
        st->buckets = rd->n_buckets;
        st->early = early;
    }
    rd->have_prev = 0;
    rd->pending_round = round;
    rd->pending_step = rd->step;
}

void reducer_wait_sums(reducer *rd) {
    if (rd->nccl) nccl_read_pending(rd);
}

void reducer_finish(reducer *rd, reducer_stats *st) {
    CNT_ASSERT(rd->ready_upto == rd->n);
    if (rd->nccl) {
        finish_nccl(rd, st);
        return;
    }
    double t0 = time_now();
    int early = rd->next_launch;
    record_fences(rd, rd->n_buckets);
    launch(rd, rd->n_buckets);
    /* On an asynchronous backend the device may still be running backward:
     * that wait is not communication. Wait for the last bucket's fence first
     * (a one-float fenced download; the value is not used, and may race with
     * the communication thread's upload of the sum: either value is fine). */
    double t_grads = t0;
    if (rd->be->native_stream() != NULL) {
        bucket *last = &rd->buckets[rd->n_buckets - 1];
        float probe;
        rd->be->download_fenced(&probe, rd->grads + last->begin, sizeof probe, last->fence);
        t_grads = time_now();
    }
    cnt_mutex_lock(&rd->mu);
    while (rd->done < rd->n_buckets) cnt_cond_wait(&rd->done_cv, &rd->mu);
    cnt_mutex_unlock(&rd->mu);
    double t1 = time_now();
    if (st) {
        st->exposed_ms = 1e3 * (t1 - t_grads);
        st->comm_ms = 0;
        for (int b = 0; b < rd->n_buckets; b++)
            st->comm_ms += 1e3 * (rd->buckets[b].t_end - rd->buckets[b].t_start);
        st->comm_step = rd->step;
        st->buckets = rd->n_buckets;
        st->early = early;
    }
}

void reducer_free(reducer *rd) {
    if (!rd) return;
    if (rd->have_thread) {
        cnt_mutex_lock(&rd->mu);
        rd->stop = 1;
        pthread_cond_signal(&rd->work_cv);
        cnt_mutex_unlock(&rd->mu);
        pthread_join(rd->thread, NULL);
    }
    dist_watchdog_free(rd->wd); /* after the join: the communication thread used it */
    /* After the join too: the thread waited on them. */
    for (int b = 0; b < rd->n_buckets; b++)
        if (rd->buckets[b].fence) rd->be->fence_destroy(rd->buckets[b].fence);
    pthread_mutex_destroy(&rd->mu);
    pthread_cond_destroy(&rd->work_cv);
    pthread_cond_destroy(&rd->done_cv);
    free(rd->buckets);
    free(rd->host);
    free(rd->half);
    free(rd);
}
