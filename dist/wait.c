/*
 * dist/wait.c - bounded waits for the host collectives (see dist/dist.h,
 * dist_set_wait_limits and dist_phase): the process-wide limits, the phase
 * each thread names, and the one loop that completes the requests of every
 * collective dist/ issues.
 *
 * Why poll: a blocking MPI call cannot be interrupted, so a rank whose peer
 * stopped would wait in it forever and say nothing. Each collective is
 * issued in its nonblocking form (MPI_Ibcast, MPI_Iallreduce, ...) and
 * completed here with MPI_Testall, which also drives MPI's progress (Open
 * MPI has no progress thread by default): a spin of WAIT_SPIN_S first, since
 * a balanced collective completes within microseconds, then either sleeps
 * doubling from 10 us to WAIT_MAX_SLEEP_US, so a thread that waits for a
 * late rank leaves the cores to compute (a blocking MPI_Wait would spin on
 * one), or, for the ring, a yield between polls (dist/wait.h says why). The
 * clock is read at every poll after the first: the limits are seconds, a
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
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/fault.h"

/* dist.stall_warn_s and dist.stall_abort_s's defaults (train/config.c), so a
 * program that never calls dist_set_wait_limits is bounded the same way. */
static double g_warn_s = 60, g_abort_s = 1800;

/* What this thread is doing, for the messages; "" until named. */
static _Thread_local char tl_phase[128];

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
 * nonblocking form measured several times slower) is bounded by a monitor
 * thread instead: dist_blocking_begin notes when the call started and what
 * it is; the thread, started at the first such call, looks once a second and,
 * when a call has been inside for the abort limit, writes one line and ends
 * the process (_exit(1): the thread may not call MPI while another thread is
 * inside it; mpirun then ends the job, as for any rank that dies). */
static _Atomic long long blocking_since_ms = 0; /* 0: no blocking call in progress */
static char blocking_what[256];
static pthread_once_t deadman_once = PTHREAD_ONCE_INIT;

static long long now_ms(void) { return (long long)(time_now() * 1e3); }

static void *deadman(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        long long since = atomic_load(&blocking_since_ms);
        if (since == 0 || g_abort_s <= 0) continue;
        double waited = (double)(now_ms() - since) / 1e3;
        if (waited < g_abort_s) continue;
        char line[600];
        int n = snprintf(line, sizeof line,
                         "[rank %d] error: stall: rank %d has been inside %s for %.0f s: a rank stopped or hung in "
                         "the middle of it; ending this rank, and with it the job (dist.stall_abort_s = %g)\n",
                         dist_job_rank(), dist_job_rank(), blocking_what, waited, g_abort_s);
        fflush(stdout);
        if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) {
            /* nothing left to tell it to */
        }
        cnt_say_last_words();
        _exit(1);
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
    if (g_abort_s <= 0) return;
    errno = pthread_once(&deadman_once, deadman_start);
    CHECK_ERRNO(errno == 0, "pthread_once (stall deadman)");
    fault_stall_in_point(call); /* tests only: CNT_TEST_STALL_IN stops a rank here, the others inside the call */
    /* the label first, then the time that arms the check (the monitor reads them in that order) */
    snprintf(blocking_what, sizeof blocking_what, "%s during %s", call, tl_phase[0] ? tl_phase : "an unnamed phase");
    atomic_store(&blocking_since_ms, now_ms());
}

void dist_blocking_end(void) { atomic_store(&blocking_since_ms, 0); }

#if CNT_HAVE_MPI
#include "dist/wait.h"

/* Polls without sleeping or yielding for this long. */
#define WAIT_SPIN_S 50e-6
/* The sleep between polls grows from 10 us to this. */
#define WAIT_MAX_SLEEP_US 1000

static const char *phase_name(void) { return tl_phase[0] ? tl_phase : "an unnamed phase"; }

void dist_wait_bounded(int n, MPI_Request *reqs, const char *collective, dist_wait_mode mode) {
    int done = 0;
    DIST_MPI_CHECK(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    double t0 = time_now(), next_warn = g_warn_s, waited = 0;
    long sleep_us = 10;
    int warned = 0;
    for (;;) {
        DIST_MPI_CHECK(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        if (done) break;
        waited = time_now() - t0;
        if (g_abort_s > 0 && waited >= g_abort_s) {
            log_error("stall: rank %d has waited %.0f s in %s during %s: one or more other ranks did not arrive "
                      "(stopped, hung or slow; the ranks that print no such line are the late ones); ending the "
                      "job (dist.stall_abort_s = %g: raise it if that phase can legitimately take longer)",
                      dist_job_rank(), waited, collective, phase_name(), g_abort_s);
            dist_abort(1);
        }
        if (g_warn_s > 0 && waited >= next_warn) {
            log_warn("stall: rank %d has waited %.0f s in %s during %s for the other ranks", dist_job_rank(), waited,
                     collective, phase_name());
            warned = 1;
            while (next_warn <= waited) next_warn += g_warn_s; /* once per threshold crossing */
        }
        if (waited < WAIT_SPIN_S) continue;
        if (mode == DIST_WAIT_YIELD) {
            sched_yield(); /* cannot fail on Linux; returns at once when no other thread wants the core */
            continue;
        }
        /* Why sleep: this thread must not take a core from compute (or from
         * the late rank, on an oversubscribed node) while it waits. */
        struct timespec ts = {0, sleep_us * 1000};
        nanosleep(&ts, NULL);
        sleep_us = sleep_us * 2 < WAIT_MAX_SLEEP_US ? sleep_us * 2 : WAIT_MAX_SLEEP_US;
    }
    if (warned)
        log_warn("stall over: %s during %s completed after %.1f s", collective, phase_name(), time_now() - t0);
}

#endif
