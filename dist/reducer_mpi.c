/*
 * dist/reducer_mpi.c - the reducer's communication-thread strategy: each
 * launched bucket is copied to host memory after its fence, optionally
 * converted to fp16 or compressed with PowerSGD, allreduced there
 * (MPI_Allreduce or our ring) and copied back, while the training thread
 * goes on with backward. reducer_finish waits for the last bucket and
 * measures that wait (exposed_ms). Design: docs/ARCHITECTURE.md, "Data
 * parallelism".
 */
#include "dist/reducer_impl.h"
#include "common/check.h"
#include "common/half.h"
#include "common/threads.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "dist/wait.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mpi_bucket {
    void *fence;             /* marks the ops that wrote the bucket */
    double t_start, t_end;   /* its allreduce, on the communication thread */
    size_t up_lo, up_hi;     /* what goes back to the device: the bucket, or with PowerSGD its region */
} mpi_bucket;

typedef struct reducer_mpi {
    float *host;         /* [n] host staging, from the backend's host_alloc (page-locked on a GPU) */
    uint16_t *half;      /* [n] host fp16 staging (compress = fp16), else NULL */
    powersgd *psgd;      /* compress = powersgd, else NULL: buckets one at a time, blocking */
    long psgd_start;     /* steps 1 to psgd_start are summed uncompressed */
    dist_algo algo;
    /* Buckets whose sums move at once: 1 for MPI_Allreduce (blocking, one at a
     * time); with the ring or hier, bucket b runs in ops[b % in_flight]. */
    int in_flight;
    dist_iallreduce *ops[DIST_MAX_IN_FLIGHT];
    mpi_bucket *mb;      /* [n_buckets] */
    timeline *tl;        /* NULL, or where buckets are recorded */

    /* Guards launched, done, stop and step: the training thread hands
     * buckets over (launched), the communication thread reports them
     * finished (done, in bucket order). launched is also read without the
     * lock (atomically) by the thread's wake-up test while sums are moving. */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* the communication thread waits here for a launch */
    pthread_cond_t done_cv;  /* reducer_finish waits here for the last bucket */
    int launched, done, stop;
    long step;           /* the current step, as given to reducer_begin */
    int nice;            /* reducer_opts.comm_nice where it applies, else 0 */
    pthread_t thread;
} reducer_mpi;

/* PowerSGD's sums over the ranks (powersgd_sum_fn). */
static void psgd_sum(float *buf, size_t n, void *ctx) {
    const reducer_mpi *m = ctx;
    dist_allreduce_sum(buf, n, m->algo);
}

/* Bucket b's allreduce starts: its gradients to host memory (after its
 * fence), fp16 when compressed, the watchdog's arrival barrier, then the
 * sum: to its end through MPI_Allreduce or PowerSGD (whose region, the
 * tensors that end in the bucket, is what goes back), else started in its
 * op. */
static void bucket_start(reducer *rd, int b, long step) {
    reducer_mpi *m = rd->state;
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
    mbk->up_lo = bk->begin;
    mbk->up_hi = bk->end;
    if (m->psgd && step > m->psgd_start) {
        powersgd_region(m->psgd, bk->begin, bk->end, &mbk->up_lo, &mbk->up_hi);
        powersgd_reduce(m->psgd, m->host, mbk->up_lo, mbk->up_hi, psgd_sum, m);
    } else if (m->algo == DIST_ALGO_MPI || m->psgd) {
        if (m->half) dist_allreduce_sum_f16(m->half + bk->begin, len, m->algo);
        else dist_allreduce_sum(h, len, m->algo);
    } else {
        void *buf = m->half ? (void *)(m->half + bk->begin) : (void *)h;
        dist_iallreduce_start(m->ops[b % m->in_flight], buf, len, m->half != NULL, m->algo, 0);
    }
}

/* Bucket b's sum is complete in host memory: back to the device, recorded,
 * and reported done (buckets end in bucket order). */
static void bucket_end(reducer *rd, int b) {
    reducer_mpi *m = rd->state;
    const bucket *bk = &rd->buckets[b];
    size_t len = bk->end - bk->begin;
    if (m->half) fp16_to_float_array(m->host + bk->begin, m->half + bk->begin, len);
    /* Returns once the sum is on the device; nothing queued touches a
     * finished bucket before the optimizer, issued after reducer_finish. */
    const mpi_bucket *mbk = &m->mb[b];
    if (mbk->up_hi > mbk->up_lo)
        rd->be->upload_sync(rd->grads + mbk->up_lo, m->host + mbk->up_lo, (mbk->up_hi - mbk->up_lo) * sizeof(float));
    m->mb[b].t_end = time_now();
    if (m->tl) reducer_record_bucket(m->tl, b, "", rd->buckets[b].t_ready, m->mb[b].t_start, m->mb[b].t_end);
    /* Why the lock: done is the report finish waits on. */
    cnt_mutex_lock(&m->mu);
    m->done++;
    pthread_cond_signal(&m->done_cv);
    cnt_mutex_unlock(&m->mu);
}

/* Where the communication thread is in the step: buckets started and
 * ended, its own counts (never read by another thread), back to 0 once the
 * step's last bucket has ended (every step ends all of them). done is the
 * report of `ended`, under the lock: the thread never reads done unlocked,
 * which reducer_begin resets. */
typedef struct comm_pos {
    reducer_mpi *m;
    int started, ended;
} comm_pos;

/* dist_iallreduce_wait's wake-up: a launched bucket waits and a slot is free. */
static int launch_waits(void *ctx) {
    const comm_pos *c = ctx;
    return c->started - c->ended < c->m->in_flight &&
           __atomic_load_n(&c->m->launched, __ATOMIC_ACQUIRE) > c->started;
}

static void *comm_main(void *arg) {
    reducer *rd = arg;
    reducer_mpi *m = rd->state;
    comm_pos pos = {m, 0, 0};
    if (m->nice && cnt_thread_nice(m->nice) != 0 && dist_rank() == 0)
        log_warn("dist.comm_nice = %d: the communication thread keeps the process's priority (%s: lowering a nice "
                 "value needs CAP_SYS_NICE or `ulimit -e` of at least %d); buckets allreduced during backward may "
                 "move slower on shared cores", m->nice, strerror(errno), 20 - m->nice);
    cnt_mutex_lock(&m->mu);
    for (;;) {
        while (!m->stop && m->done == m->launched) cnt_cond_wait(&m->work_cv, &m->mu);
        if (m->stop) break;
        int launched = m->launched;
        long step = m->step;
        cnt_mutex_unlock(&m->mu);
        /* Buckets start in launch order, the same order on every rank, so
         * the ranks' collectives (and each slot's messages) always match;
         * they end in that order too. */
        if (m->algo == DIST_ALGO_MPI || m->psgd) {
            bucket_start(rd, pos.started++, step);
            bucket_end(rd, pos.ended++);
        } else {
            while (pos.started < launched && pos.started - pos.ended < m->in_flight)
                bucket_start(rd, pos.started++, step);
            int ended = 0;
            while (pos.ended < pos.started && dist_iallreduce_done(m->ops[pos.ended % m->in_flight])) {
                bucket_end(rd, pos.ended++);
                ended = 1;
            }
            if (!ended && pos.ended < pos.started) {
                if (pos.started - pos.ended > 1) {
                    char phase[64];
                    snprintf(phase, sizeof phase, "gradient allreduce (step %ld, buckets %d-%d)", step, pos.ended,
                             pos.started - 1);
                    dist_phase(phase);
                }
                dist_iallreduce_wait(m->ops, m->in_flight, launch_waits, &pos);
            }
        }
        if (pos.ended == rd->n_buckets) pos.started = pos.ended = 0; /* the step's last: the next starts at 0 */
        cnt_mutex_lock(&m->mu);
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
    __atomic_store_n(&m->launched, upto, __ATOMIC_RELEASE); /* also read unlocked by launch_waits */
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
    /* The time some bucket's allreduce ran: with several in flight their
     * times overlap, and each moment counts once. Buckets start in order. */
    st->comm_ms = 0;
    double covered = -1e300;
    for (int b = 0; b < rd->n_buckets; b++) {
        double from = m->mb[b].t_start > covered ? m->mb[b].t_start : covered;
        if (m->mb[b].t_end > from) st->comm_ms += 1e3 * (m->mb[b].t_end - from);
        if (m->mb[b].t_end > covered) covered = m->mb[b].t_end;
    }
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
    for (int i = 0; i < m->in_flight; i++) dist_iallreduce_free(m->ops[i]);
    rd->be->host_free(m->host);
    free(m->half);
    powersgd_free(m->psgd);
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
    m->in_flight = opts->in_flight > 1 ? opts->in_flight : 1;
    CNT_ASSERT(opts->comm_nice <= 0);
    m->nice = m->algo != DIST_ALGO_MPI && dist_progress_mode() == DIST_PROGRESS_SLEEP ? opts->comm_nice : 0;
    CNT_ASSERT(m->in_flight <= DIST_MAX_IN_FLIGHT && (m->in_flight == 1 || m->algo != DIST_ALGO_MPI));
    if (m->algo != DIST_ALGO_MPI)
        for (int i = 0; i < m->in_flight; i++) m->ops[i] = dist_iallreduce_create(i);
    /* page-locked on a GPU (the backend's host_alloc), so each bucket's download is a DMA copy instead of
     * a staged one; plain memory on the CPU */
    m->host = rd->be->host_alloc(rd->n * sizeof(float));
    if (opts->compress == REDUCER_COMPRESS_FP16) m->half = cnt_malloc(rd->n * sizeof(uint16_t));
    if (opts->compress == REDUCER_COMPRESS_POWERSGD) {
        CNT_ASSERT(m->in_flight == 1 && opts->tensors && opts->n_tensors > 0);
        CNT_ASSERT(opts->psgd_threads >= 1);
        m->psgd = powersgd_create(opts->tensors, opts->n_tensors, rd->n, opts->psgd_rank, opts->psgd_seed);
        powersgd_set_threads(m->psgd, opts->psgd_threads);
        m->psgd_start = opts->psgd_start;
        rd->psgd = m->psgd;
    }
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
    cnt_thread_name(m->thread, "cnt-comm");
}
