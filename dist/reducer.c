/*
 * dist/reducer.c - bucketed gradient allreduce on a communication thread,
 * overlapped with backward, optionally fp16 on the wire and guarded by the
 * stall watchdog (see dist/reducer.h).
 */
#include "dist/reducer.h"
#include "common/check.h"
#include "common/threads.h"
#include "common/timer.h"
#include "dist/fp16.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bucket {
    size_t begin, end;   /* [begin, end) of the gradient buffer */
    double t_start, t_end;
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
    int stall_rank;      /* CNT_TEST_STALL: this rank (or -1: none) ... */
    long stall_step;     /* ... sleeps in reducer_begin of this step ... */
    double stall_s;      /* ... for this long */
    bucket *buckets;
    int n_buckets;
    size_t ready_upto;   /* training thread only: gradients final below this offset */
    int next_launch;     /* training thread only: first bucket not yet handed over */
    timeline *tl;        /* NULL, or where the communication thread records buckets */

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
        rd->be->download(h, rd->grads + bk->begin, len * sizeof(float));
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
        rd->be->upload(rd->grads + bk->begin, rd->host + bk->begin, len * sizeof(float));
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

/* CNT_TEST_STALL=RANK:STEP:SECONDS (tests only, see dist/reducer.h). */
static void parse_test_stall(reducer *rd) {
    rd->stall_rank = -1;
    const char *v = getenv("CNT_TEST_STALL");
    if (!v || !*v) return;
    int r, used = 0;
    long st;
    double sec;
    if (sscanf(v, "%d:%ld:%lf%n", &r, &st, &sec, &used) != 3 || v[used] != '\0' || r < 0 || st < 1 || sec < 0)
        cnt_fatal("CNT_TEST_STALL='%s': expected RANK:STEP:SECONDS (test-only fault injection)", v);
    rd->stall_rank = r;
    rd->stall_step = st;
    rd->stall_s = sec;
}

reducer *reducer_create(const backend *be, float *grads, size_t n, const reducer_opts *opts) {
    size_t first_bucket = opts->first_bucket, bucket_size = opts->bucket;
    CNT_ASSERT(n > 0 && first_bucket > 0 && bucket_size > 0);
    CNT_ASSERT(opts->compress == REDUCER_COMPRESS_NONE || opts->compress == REDUCER_COMPRESS_FP16);
    reducer *rd = cnt_calloc(1, sizeof *rd);
    rd->be = be;
    rd->grads = grads;
    rd->n = n;
    rd->algo = opts->algo;
    rd->overlap = opts->overlap;
    rd->host = cnt_malloc(n * sizeof(float));
    if (opts->compress == REDUCER_COMPRESS_FP16) rd->half = cnt_malloc(n * sizeof(uint16_t));
    rd->wd = dist_watchdog_create(opts->stall_warn_s, opts->stall_abort_s);
    parse_test_stall(rd);
    size_t cap = 2 + n / bucket_size;
    rd->buckets = cnt_calloc(cap, sizeof *rd->buckets);
    size_t off = 0;
    while (off < n) {
        size_t len = rd->n_buckets == 0 ? first_bucket : bucket_size;
        if (len > n - off) len = n - off;
        rd->buckets[rd->n_buckets].begin = off;
        rd->buckets[rd->n_buckets].end = off + len;
        rd->n_buckets++;
        off += len;
    }
    errno = pthread_mutex_init(&rd->mu, NULL);
    CHECK_ERRNO(errno == 0, "pthread_mutex_init");
    errno = pthread_cond_init(&rd->work_cv, NULL);
    CHECK_ERRNO(errno == 0, "pthread_cond_init");
    errno = pthread_cond_init(&rd->done_cv, NULL);
    CHECK_ERRNO(errno == 0, "pthread_cond_init");
    errno = pthread_create(&rd->thread, NULL, comm_main, rd);
    CHECK_ERRNO(errno == 0, "pthread_create (communication thread)");
    return rd;
}

int reducer_bucket_count(const reducer *rd) { return rd->n_buckets; }

void reducer_set_timeline(reducer *rd, timeline *tl) {
    /* Why the lock: it orders this write before the communication thread's
     * next read of rd->tl (which follows its own lock in comm_main). */
    cnt_mutex_lock(&rd->mu);
    rd->tl = tl;
    cnt_mutex_unlock(&rd->mu);
}

void reducer_begin(reducer *rd, long step_number) {
    rd->ready_upto = 0;
    rd->next_launch = 0;
    cnt_mutex_lock(&rd->mu);
    CNT_ASSERT(rd->done == rd->launched);
    rd->launched = rd->done = 0;
    long step = rd->step = step_number;
    cnt_mutex_unlock(&rd->mu);
    if (rd->stall_rank == dist_rank() && rd->stall_step == step) {
        log_warn("CNT_TEST_STALL: sleeping %g s at the start of step %ld (test-only fault injection)",
                 rd->stall_s, step);
        struct timespec ts = {(time_t)rd->stall_s, (long)((rd->stall_s - (double)(time_t)rd->stall_s) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

/* Hands buckets [next_launch, upto) to the communication thread. */
static void launch(reducer *rd, int upto) {
    if (upto <= rd->next_launch) return;
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
    launch(rd, b);
}

void reducer_finish(reducer *rd, reducer_stats *st) {
    CNT_ASSERT(rd->ready_upto == rd->n);
    double t0 = time_now();
    int early = rd->next_launch;
    launch(rd, rd->n_buckets);
    cnt_mutex_lock(&rd->mu);
    while (rd->done < rd->n_buckets) cnt_cond_wait(&rd->done_cv, &rd->mu);
    cnt_mutex_unlock(&rd->mu);
    double t1 = time_now();
    if (st) {
        st->exposed_ms = 1e3 * (t1 - t0);
        st->comm_ms = 0;
        for (int b = 0; b < rd->n_buckets; b++)
            st->comm_ms += 1e3 * (rd->buckets[b].t_end - rd->buckets[b].t_start);
        st->buckets = rd->n_buckets;
        st->early = early;
    }
}

void reducer_free(reducer *rd) {
    if (!rd) return;
    cnt_mutex_lock(&rd->mu);
    rd->stop = 1;
    pthread_cond_signal(&rd->work_cv);
    cnt_mutex_unlock(&rd->mu);
    pthread_join(rd->thread, NULL);
    dist_watchdog_free(rd->wd); /* after the join: the communication thread used it */
    pthread_mutex_destroy(&rd->mu);
    pthread_cond_destroy(&rd->work_cv);
    pthread_cond_destroy(&rd->done_cv);
    free(rd->buckets);
    free(rd->host);
    free(rd->half);
    free(rd);
}
