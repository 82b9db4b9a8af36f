/*
 * dist/reducer_mpi.c - the reducer's communication-thread strategy: each
 * launched bucket is copied to host memory after its fence, optionally
 * converted to fp16, allreduced there (MPI_Allreduce or our ring) and copied
 * back, while the training thread goes on with backward. reducer_finish
 * waits for the last bucket and measures that wait (exposed_ms). Design:
 * docs/ARCHITECTURE.md, "Data parallelism".
 */
#include "dist/reducer_impl.h"
#include "common/check.h"
#include "common/half.h"
#include "common/threads.h"
#include "common/timer.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct mpi_bucket {
    void *fence;             /* marks the ops that wrote the bucket */
    double t_start, t_end;   /* its allreduce, on the communication thread */
} mpi_bucket;

typedef struct reducer_mpi {
    float *host;         /* [n] host staging, from the backend's host_alloc (page-locked on a GPU) */
    uint16_t *half;      /* [n] host fp16 staging (compress = fp16), else NULL */
    dist_algo algo;
    mpi_bucket *mb;      /* [n_buckets] */
    timeline *tl;        /* NULL, or where buckets are recorded */

    /* Guards launched, done, stop and step: the training thread hands
     * buckets over (launched), the communication thread reports them
     * finished (done). */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* the communication thread waits here for a launch */
    pthread_cond_t done_cv;  /* reducer_finish waits here for the last bucket */
    int launched, done, stop;
    long step;           /* the current step, as given to reducer_begin */
    pthread_t thread;
} reducer_mpi;

static void *comm_main(void *arg) {
    reducer *rd = arg;
    reducer_mpi *m = rd->state;
    cnt_mutex_lock(&m->mu);
    for (;;) {
        while (!m->stop && m->done == m->launched) cnt_cond_wait(&m->work_cv, &m->mu);
        if (m->stop) break;
        int b = m->done;
        long step = m->step;
        cnt_mutex_unlock(&m->mu);
        /* Buckets are reduced in launch order, the same order on every rank,
         * so the ranks' collectives always match. */
        const bucket *bk = &rd->buckets[b];
        mpi_bucket *mbk = &m->mb[b];
        size_t len = bk->end - bk->begin;
        mbk->t_start = time_now();
        float *h = m->host + bk->begin;
        /* Waits for the ops that wrote this bucket and for nothing after them
         * (docs/ARCHITECTURE.md): backward goes on on the device. */
        rd->be->download_fenced(h, rd->grads + bk->begin, len * sizeof(float), mbk->fence);
        if (m->half) fp16_from_float_array(m->half + bk->begin, h, len);
        /* Why before the allreduce: a blocking collective cannot tell who is
         * missing; the watchdog's arrival barrier can, and warns or aborts.
         * The phase names the bucket in the ring's bounded waits' messages. */
        dist_watchdog_arrive(rd->wd, step, b);
        char phase[64];
        snprintf(phase, sizeof phase, "gradient allreduce (step %ld, bucket %d)", step, b);
        dist_phase(phase);
        if (m->half) {
            dist_allreduce_sum_f16(m->half + bk->begin, len, m->algo);
            fp16_to_float_array(h, m->half + bk->begin, len);
        } else {
            dist_allreduce_sum(h, len, m->algo);
        }
        /* Returns once the sum is on the device; nothing queued touches a
         * finished bucket before the optimizer, issued after reducer_finish. */
        rd->be->upload_sync(rd->grads + bk->begin, m->host + bk->begin, len * sizeof(float));
        mbk->t_end = time_now();
        if (m->tl) reducer_record_bucket(m->tl, b, rd->buckets[b].t_ready, mbk->t_start, mbk->t_end);
        cnt_mutex_lock(&m->mu);
        m->done++;
        pthread_cond_signal(&m->done_cv);
    }
    cnt_mutex_unlock(&m->mu);
    return NULL;
}

static void mpi_set_timeline(reducer *rd, timeline *tl) {
    reducer_mpi *m = rd->state;
    /* Why the lock: it orders this write before the communication thread's
     * next read of m->tl (which follows its own lock in comm_main). */
    cnt_mutex_lock(&m->mu);
    m->tl = tl;
    cnt_mutex_unlock(&m->mu);
}

static void mpi_begin(reducer *rd) {
    reducer_mpi *m = rd->state;
    /* Why the lock: the communication thread reads launched, done and step
     * under it. */
    cnt_mutex_lock(&m->mu);
    CNT_ASSERT(m->done == m->launched);
    m->launched = m->done = 0;
    m->step = rd->step;
    cnt_mutex_unlock(&m->mu);
}

/* Marks the ops issued so far as the writers of buckets [from, upto), whose
 * last gradients backward has just issued, and hands the buckets to the
 * communication thread. */
static void mpi_launch(reducer *rd, int from, int upto) {
    reducer_mpi *m = rd->state;
    for (int b = from; b < upto; b++) rd->be->fence_record(m->mb[b].fence);
    /* Why the lock: launched is the hand-over; the signal wakes the thread. */
    cnt_mutex_lock(&m->mu);
    m->launched = upto;
    pthread_cond_signal(&m->work_cv);
    cnt_mutex_unlock(&m->mu);
}

static void mpi_finish(reducer *rd, double t0, reducer_stats *st) {
    reducer_mpi *m = rd->state;
    /* On an asynchronous backend the device may still be running backward:
     * that wait is not communication. Wait for the last bucket's fence first
     * (a one-float fenced download; the value is not used, and may race with
     * the communication thread's upload of the sum: either value is fine). */
    double t_grads = t0;
    if (rd->be->native_stream() != NULL) {
        const bucket *last = &rd->buckets[rd->n_buckets - 1];
        float probe;
        rd->be->download_fenced(&probe, rd->grads + last->begin, sizeof probe, m->mb[rd->n_buckets - 1].fence);
        t_grads = time_now();
    }
    /* Why the lock: done is the communication thread's report; done_cv
     * wakes us at each bucket it finishes. */
    cnt_mutex_lock(&m->mu);
    while (m->done < rd->n_buckets) cnt_cond_wait(&m->done_cv, &m->mu);
    cnt_mutex_unlock(&m->mu);
    double t1 = time_now();
    st->exposed_ms = 1e3 * (t1 - t_grads);
    st->comm_ms = 0;
    for (int b = 0; b < rd->n_buckets; b++) st->comm_ms += 1e3 * (m->mb[b].t_end - m->mb[b].t_start);
    st->comm_step = rd->step;
}

static void mpi_free(reducer *rd) {
    reducer_mpi *m = rd->state;
    /* Why the lock: stop is read by the communication thread under it. */
    cnt_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_signal(&m->work_cv);
    cnt_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    /* After the join: the thread waited on them. */
    for (int b = 0; b < rd->n_buckets; b++) rd->be->fence_destroy(m->mb[b].fence);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->work_cv);
    pthread_cond_destroy(&m->done_cv);
    free(m->mb);
    rd->be->host_free(m->host);
    free(m->half);
    free(m);
}

static const reducer_ops mpi_ops = {
    .begin = mpi_begin,
    .launch = mpi_launch,
    .finish = mpi_finish,
    .wait_sums = NULL, /* reducer_finish has waited for every upload */
    .set_timeline = mpi_set_timeline,
    .free = mpi_free,
};

void reducer_mpi_init(reducer *rd, const reducer_opts *opts) {
    reducer_mpi *m = cnt_calloc(1, sizeof *m);
    m->algo = opts->algo;
    /* page-locked on a GPU (the backend's host_alloc), so each bucket's download is a DMA copy instead of
     * a staged one; plain memory on the CPU */
    m->host = rd->be->host_alloc(rd->n * sizeof(float));
    if (opts->compress == REDUCER_COMPRESS_FP16) m->half = cnt_malloc(rd->n * sizeof(uint16_t));
    m->mb = cnt_calloc((size_t)rd->n_buckets, sizeof *m->mb);
    for (int b = 0; b < rd->n_buckets; b++) m->mb[b].fence = rd->be->fence_create();
    cnt_mutex_init(&m->mu);
    cnt_cond_init(&m->work_cv);
    cnt_cond_init(&m->done_cv);
    rd->ops = &mpi_ops;
    rd->state = m;
    /* Last: the thread reads rd->state. */
    errno = pthread_create(&m->thread, NULL, comm_main, rd);
    CHECK_ERRNO(errno == 0, "pthread_create (communication thread)");
}
