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

#include <sched.h>
#include <stdio.h>
#include <time.h>

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

void dist_phase(const char *what) {
    snprintf(tl_phase, sizeof tl_phase, "%s", what);
    fault_stall_in_point(tl_phase); /* tests only: CNT_TEST_STALL_IN (dist/fault.h) */
}

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
                      dist_rank(), waited, collective, phase_name(), g_abort_s);
            dist_abort(1);
        }
        if (g_warn_s > 0 && waited >= next_warn) {
            log_warn("stall: rank %d has waited %.0f s in %s during %s for the other ranks", dist_rank(), waited,
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
