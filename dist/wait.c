/*
 * dist/wait.c - bounded waits (see dist/wait.h, and dist/dist.h's
 * dist_set_wait_limits and dist_phase): the process-wide limits, the phase
 * each thread names, the one polling loop behind every wait in dist/
 * (dist_wait_until), the loop's use for the requests of every host
 * collective (dist_wait_bounded), and the deadman of the blocking calls.
 *
 * Why poll: a blocking MPI call cannot be interrupted, so a rank whose peer
 * stopped would wait in it forever and say nothing. Each collective is
 * issued in its nonblocking form (MPI_Ibcast, MPI_Iallreduce, ...) and
 * completed by polling MPI_Testall, which also drives MPI's progress (Open
 * MPI has no progress thread by default): a spin of WAIT_SPIN_S first, since
 * a balanced collective completes within microseconds, then either sleeps
 * doubling from 10 us to WAIT_MAX_SLEEP_US, so a thread that waits for a
 * late rank leaves the cores to compute (a blocking MPI_Wait would spin on
 * one), or, for the ring's chunks, shorter sleeps (to 50 us) or a yield
 * between polls, as dist.progress says (dist/wait.h says why). The
 * other sites (the stall watchdog, the parameter servers, NCCL's events)
 * poll their own things with their own spin and sleep through the same loop.
 * The clock is read at every poll after the first: the limits are seconds, a
 * clock read is tens of nanoseconds.
 *
 * Threads: MPI_THREAD_SERIALIZED. Polling adds no thread; whichever thread
 * issued the collective polls it, and no other thread calls MPI meanwhile
 * (the reducer's protocol, dist/reducer.h). The phase is per thread, so the
 * communication thread's never mixes with the training thread's.
 */
#include "dist/dist.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/threads.h"
#include "common/timer.h"
#include "dist/fault.h"
#include "dist/wait.h"

/* dist.stall_warn_s and dist.stall_abort_s's defaults (train/config.c), so a
 * program that never calls dist_set_wait_limits is bounded the same way. */
static double g_warn_s = 60, g_abort_s = 1800;

/* What this thread is doing, for the messages; "" until named. */
static _Thread_local char tl_phase[128];

static dist_progress g_progress = DIST_PROGRESS_SLEEP;

void dist_set_progress(dist_progress p) { g_progress = p; }

dist_progress dist_progress_mode(void) { return g_progress; }

void dist_set_wait_limits(double warn_s, double abort_s) {
    g_warn_s = warn_s > 0 ? warn_s : 0;
    g_abort_s = abort_s > 0 ? abort_s : 0;
}

void dist_wait_limits(double *warn_s, double *abort_s) {
    *warn_s = g_warn_s;
    *abort_s = g_abort_s;
}

void dist_phase(const char *what) {
    snprintf(tl_phase, sizeof tl_phase, "%s", what);
    fault_stall_in_point(tl_phase); /* tests only: CNT_TEST_STALL_IN (dist/fault.h) */
}

/* ------------------------------------------------- blocking calls' deadman */

/* A call that cannot be polled (the gradient sum's MPI_Allreduce: its
 * nonblocking form measured several times slower) is watched by a monitor
 * thread instead: dist_blocking_begin notes when the call started and what
 * it is; the thread, started at the first such call, looks once a second
 * (or four times per dist.stall_warn_s when that is shorter): it warns at
 * every multiple of the warn limit the call has been inside, as the polled
 * waits do, and when the call has been inside for the abort limit it
 * writes one line and ends the process (_exit(DIST_STALL_EXIT): the thread
 * may not call MPI while another thread is inside it; mpirun then ends the
 * job, as for any rank that dies). dist_blocking_end says "stall over" for
 * a call it warned about. The state is under a mutex, so a line never pairs
 * one call's label with another's time. */
static pthread_mutex_t blocking_mu = PTHREAD_MUTEX_INITIALIZER;
static double blocking_since = 0; /* time_now() the call in progress began; 0: none */
static int blocking_warned = 0;   /* warnings said about it */
static char blocking_what[256];
static pthread_once_t deadman_once = PTHREAD_ONCE_INIT;
/* The node's shared slots (dist_beats_attach), under blocking_mu; NULL: none. */
static dist_beat *beats;
static int beats_n, beats_mine;

void dist_beats_attach(dist_beat *slots, int n, int mine) {
    cnt_mutex_lock(&blocking_mu);
    beats = slots;
    beats_n = slots ? n : 0;
    beats_mine = mine;
    if (slots) __atomic_store_n(&slots[mine].job_rank, (int64_t)dist_job_rank(), __ATOMIC_RELEASE);
    cnt_mutex_unlock(&blocking_mu);
}

static int64_t now_ns(void) { return (int64_t)(time_now() * 1e9); }

/* Who on this node keeps the call from finishing, into buf (len bytes):
 * "; on this node rank 1 has not entered it, its process alive" (or "has
 * given no sign of life for 5 s: its process is stopped or gone"), or ""
 * where every other rank of the node is inside it and alive (the late one
 * is on another node, or in the MPI library itself). stale_s: a monitor
 * silent that long has stopped. Under blocking_mu. */
static void beats_describe(char *buf, size_t len, double stale_s) {
    buf[0] = '\0';
    if (!beats || len < 2) return;
    const dist_beat *me = &beats[beats_mine];
    int64_t my_seq = __atomic_load_n(&me->seq, __ATOMIC_ACQUIRE), now = now_ns();
    size_t o = 0;
    int named = 0;
    for (int i = 0; i < beats_n && o + 1 < len; i++) {
        if (i == beats_mine) continue;
        const dist_beat *b = &beats[i];
        int64_t rank = __atomic_load_n(&b->job_rank, __ATOMIC_ACQUIRE);
        int64_t seq = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE);
        int64_t inside = __atomic_load_n(&b->inside_ns, __ATOMIC_ACQUIRE);
        int64_t beat = __atomic_load_n(&b->beat_ns, __ATOMIC_ACQUIRE);
        double silent = beat > 0 ? (double)(now - beat) * 1e-9 : 0;
        int n = 0;
        const char *lead = named ? ", " : "; on this node ";
        if (beat > 0 && silent >= stale_s)
            n = snprintf(buf + o, len - o, "%srank %lld has given no sign of life for %.0f s: its process is stopped "
                         "or gone", lead, (long long)rank, silent);
        else if (seq < my_seq || (seq == my_seq && inside == 0))
            n = snprintf(buf + o, len - o, "%srank %lld has not entered it, its process alive", lead, (long long)rank);
        if (n > 0) {
            named = 1;
            o += (size_t)n < len - o ? (size_t)n : len - o - 1;
        }
    }
}

static void *deadman(void *arg) {
    (void)arg;
    for (;;) {
        double nap = g_warn_s > 0 && g_warn_s < 4 ? g_warn_s / 4 : 1;
        if (nap < 0.05) nap = 0.05;
        struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
        nanosleep(&ts, NULL);
        cnt_mutex_lock(&blocking_mu);
        if (beats) __atomic_store_n(&beats[beats_mine].beat_ns, now_ns(), __ATOMIC_RELEASE);
        double waited = blocking_since > 0 ? time_now() - blocking_since : 0;
        /* a neighbour's monitor silent for 3 of its naps and a second is stopped */
        char late[512] = "";
        if (blocking_since > 0) beats_describe(late, sizeof late, 3 * nap + 1);
        if (blocking_since > 0 && g_abort_s > 0 && waited >= g_abort_s) {
            char line[600];
            int n = snprintf(line, sizeof line,
                             "[rank %d] error: stall: rank %d has been inside %s for %.0f s: a rank stopped or hung in "
                             "the middle of it%s; ending this rank, and with it the job (dist.stall_abort_s = %g)\n",
                             dist_job_rank(), dist_job_rank(), blocking_what, waited, late, g_abort_s);
            fflush(stdout);
            if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) {
                /* nothing left to tell it to */
            }
            cnt_say_last_words();
            _exit(DIST_STALL_EXIT);
        }
        int due = blocking_since > 0 && g_warn_s > 0 ? (int)(waited / g_warn_s) : 0;
        if (due > blocking_warned) {
            blocking_warned = due;
            /* every rank had arrived (the watchdog's barrier before it): one stopped at or inside it */
            log_warn("stall: rank %d has been inside %s for %.0f s: every rank had reached it (the stall watchdog), "
                     "so one stopped or hung at or inside it and prints no such line%s (dist.stall_warn_s = %g; the "
                     "job ends after dist.stall_abort_s = %g)",
                     dist_job_rank(), blocking_what, waited, late, g_warn_s, g_abort_s);
        }
        cnt_mutex_unlock(&blocking_mu);
    }
    return NULL;
}

static void deadman_start(void) {
    pthread_t t;
    errno = pthread_create(&t, NULL, deadman, NULL);
    CHECK_ERRNO(errno == 0, "pthread_create (stall deadman)");
    pthread_detach(t);
}

void dist_blocking_begin(const char *call) {
    if (g_abort_s <= 0 && g_warn_s <= 0) return;
    errno = pthread_once(&deadman_once, deadman_start);
    CHECK_ERRNO(errno == 0, "pthread_once (stall deadman)");
    fault_stall_in_point(call); /* tests only: CNT_TEST_STALL_IN stops a rank here, the others inside the call */
    cnt_mutex_lock(&blocking_mu);
    snprintf(blocking_what, sizeof blocking_what, "%s during %s", call, tl_phase[0] ? tl_phase : "an unnamed phase");
    blocking_since = time_now();
    blocking_warned = 0;
    if (beats) {
        dist_beat *b = &beats[beats_mine];
        __atomic_store_n(&b->beat_ns, now_ns(), __ATOMIC_RELEASE);
        __atomic_store_n(&b->inside_ns, now_ns(), __ATOMIC_RELEASE);
        __atomic_add_fetch(&b->seq, 1, __ATOMIC_ACQ_REL);
    }
    cnt_mutex_unlock(&blocking_mu);
    fault_stall_in_point("inside the call"); /* tests only: a rank stopped inside it (its monitor with it) */
}

void dist_blocking_end(void) {
    if (g_abort_s <= 0 && g_warn_s <= 0) return;
    cnt_mutex_lock(&blocking_mu);
    if (beats) __atomic_store_n(&beats[beats_mine].inside_ns, 0, __ATOMIC_RELEASE);
    if (blocking_warned > 0)
        log_warn("stall over: rank %d left %s after %.1f s", dist_job_rank(), blocking_what,
                 time_now() - blocking_since);
    blocking_since = 0;
    blocking_warned = 0;
    cnt_mutex_unlock(&blocking_mu);
}

/* ------------------------------------------------------------ the one loop */

static void stall_line(const dist_wait_site *s, double waited, int aborting) {
    char who[128], late[1024];
    who[0] = late[0] = '\0';
    s->describe(s->ctx, DIST_WAIT_WHO, who, sizeof who);
    s->describe(s->ctx, DIST_WAIT_LATE, late, sizeof late);
    const char *note = aborting ? s->abort_note : s->warn_note;
    if (!note) note = "";
    if (!aborting) {
        log_warn("stall: %s has waited %.0f s %s%s", who, waited, late, note);
        return;
    }
    log_error("stall: %s has waited %.0f s %s%s; ending the job (dist.stall_abort_s = %g: raise it if that can "
              "legitimately take longer)",
              who, waited, late, note, s->abort_s);
    dist_abort(DIST_STALL_EXIT);
}

/* Sleeps us microseconds. Why the loop: a signal (the trainer's SIGTERM,
 * SIGUSR1 handlers) ends nanosleep early with EINTR; going on with what is
 * left keeps the pause a pause, where returning would turn a stream of
 * signals into a spin. */
static void sleep_us_whole(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void dist_wait_until(const dist_wait_site *s) {
    if (s->poll(s->ctx)) return;
    double (*now)(void) = s->clock ? s->clock : time_now;
    double t0 = now(), next_warn = s->warn_s;
    long sleep_us = s->max_sleep_us < 10 ? s->max_sleep_us : 10;
    int warned = 0, polls = 1; /* polls counts up to spin_polls only: a wait of hours would overflow it */
    while (!s->poll(s->ctx)) {
        double waited = now() - t0;
        if (s->abort_s > 0 && waited >= s->abort_s) stall_line(s, waited, 1);
        if (s->warn_s > 0 && waited >= next_warn) {
            stall_line(s, waited, 0);
            warned = 1;
            while (next_warn <= waited) next_warn += s->warn_s; /* once per multiple crossed */
        }
        if (polls < s->spin_polls) {
            polls++;
            continue;
        }
        if (waited < s->spin_s) continue;
        if (s->max_sleep_us <= 0 || waited < s->yield_s) {
            sched_yield(); /* cannot fail on Linux; returns at once when no other thread wants the core */
            continue;
        }
        /* Why sleep: this thread must not take a core from compute (or from
         * the late rank, on an oversubscribed node) while it waits. */
        sleep_us_whole(sleep_us);
        long cap = s->relax_s > 0 && waited >= s->relax_s ? s->relaxed_max_sleep_us : s->max_sleep_us;
        sleep_us = sleep_us * 2 < cap ? sleep_us * 2 : cap;
    }
    if (warned) {
        char over[512];
        over[0] = '\0';
        s->describe(s->ctx, DIST_WAIT_OVER, over, sizeof over);
        log_warn("stall over: %s after %.1f s", over, now() - t0);
    }
}

#if CNT_HAVE_MPI

/* Polls without sleeping or yielding for this long. */
#define WAIT_SPIN_S 50e-6
/* The sleep between polls grows from 10 us to this. */
#define WAIT_MAX_SLEEP_US 1000
/* DIST_WAIT_PACED (the ring's chunks): after the spin, yields until this
 * long, then sleeps growing to WAIT_PACED_MAX_SLEEP_US. */
#define WAIT_PACED_YIELD_S 1e-3
#define WAIT_PACED_MAX_SLEEP_US 50
/* ... and after this long, to WAIT_PACED_RELAXED_US: a chunk 20 ms late
 * (a late rank, a slow link) loses at most about 1% to the longer sleep,
 * and a rank waiting 0.4 s for a late one used 13-16% of a core instead of
 * 26-32% (tests/mpi_ring.c, 2 ranks on a 2-core Xeon VM). */
#define WAIT_PACED_RELAX_S 20e-3
#define WAIT_PACED_RELAXED_US 250

static const char *phase_name(void) { return tl_phase[0] ? tl_phase : "an unnamed phase"; }

typedef struct polled {
    int (*poll)(void *ctx);
    void *ctx;
    const char *collective;
} polled;

static int polled_poll(void *ctx) {
    polled *p = ctx;
    return p->poll(p->ctx);
}

static void polled_describe(void *ctx, dist_wait_text part, char *buf, size_t cap) {
    const polled *p = ctx;
    if (part == DIST_WAIT_WHO)
        snprintf(buf, cap, "rank %d", dist_job_rank());
    else
        snprintf(buf, cap, part == DIST_WAIT_LATE ? "in %s during %s" : "%s during %s completed", p->collective,
                 phase_name());
}

void dist_wait_polled(int (*poll)(void *ctx), void *ctx, const char *collective, dist_wait_mode mode) {
    polled p = {poll, ctx, collective};
    int max_sleep_us = mode == DIST_WAIT_YIELD ? 0 : mode == DIST_WAIT_PACED ? WAIT_PACED_MAX_SLEEP_US
                                                                               : WAIT_MAX_SLEEP_US;
    dist_wait_site s = {
        .poll = polled_poll,
        .describe = polled_describe,
        .ctx = &p,
        .warn_note = " for the other ranks",
        /* a collective cannot know who is missing; the others print nothing */
        .abort_note = ": one or more other ranks did not arrive (stopped, hung or slow; the ranks that print no "
                      "such line are the late ones)",
        .spin_s = WAIT_SPIN_S,
        .yield_s = mode == DIST_WAIT_PACED ? WAIT_PACED_YIELD_S : 0,
        .max_sleep_us = max_sleep_us,
        .relax_s = mode == DIST_WAIT_PACED ? WAIT_PACED_RELAX_S : 0,
        .relaxed_max_sleep_us = WAIT_PACED_RELAXED_US,
        .warn_s = g_warn_s,
        .abort_s = g_abort_s,
    };
    dist_wait_until(&s);
}

typedef struct requests {
    int n;
    MPI_Request *reqs;
} requests;

static int requests_poll(void *ctx) {
    requests *r = ctx;
    int done = 0;
    DIST_MPI_CHECK(MPI_Testall(r->n, r->reqs, &done, MPI_STATUSES_IGNORE));
    return done;
}

void dist_wait_bounded(int n, MPI_Request *reqs, const char *collective, dist_wait_mode mode) {
    requests r = {n, reqs};
    dist_wait_polled(requests_poll, &r, collective, mode);
}

#endif
