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
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/threads.h"
#include "common/timer.h"
#include "dist/fault.h"
#include "dist/wait.h"

/* dist.stall_warn_s and dist.stall_abort_s's defaults (train/config.c), so a
 * program that never calls dist_set_wait_limits is bounded the same way.
 * Why atomic: the stall monitor's thread (deadman) reads them, and the
 * trainer sets them after dist_init has started it. Read them through
 * warn_limit() and abort_limit(). */
static double g_warn_s = 60, g_abort_s = 1800;

static double warn_limit(void) {
    double v;
    __atomic_load(&g_warn_s, &v, __ATOMIC_RELAXED);
    return v;
}

static double abort_limit(void) {
    double v;
    __atomic_load(&g_abort_s, &v, __ATOMIC_RELAXED);
    return v;
}

/* What this thread is doing, for the messages; "" until named. */
static _Thread_local char tl_phase[128];

static dist_progress g_progress = DIST_PROGRESS_SLEEP;

/* atomic as the limits: a communication thread reads it */
void dist_set_progress(dist_progress p) { __atomic_store_n(&g_progress, p, __ATOMIC_RELAXED); }

dist_progress dist_progress_mode(void) { return __atomic_load_n(&g_progress, __ATOMIC_RELAXED); }

void dist_set_wait_limits(double warn_s, double abort_s) {
    double w = warn_s > 0 ? warn_s : 0, a = abort_s > 0 ? abort_s : 0;
    __atomic_store(&g_warn_s, &w, __ATOMIC_RELAXED);
    __atomic_store(&g_abort_s, &a, __ATOMIC_RELAXED);
}

void dist_wait_limits(double *warn_s, double *abort_s) {
    *warn_s = warn_limit();
    *abort_s = abort_limit();
}

void dist_phase(const char *what) {
    snprintf(tl_phase, sizeof tl_phase, "%s", what);
    fault_stall_in_point(tl_phase); /* tests only: CNT_TEST_STALL_IN (dist/fault.h) */
}

/* ------------------------------------------------- blocking calls' deadman */

/* A call that cannot be polled (the gradient sum's MPI_Allreduce: its
 * nonblocking form measured several times slower) is watched by a monitor
 * thread instead: dist_blocking_begin notes when the call started and what
 * it is; the thread, started when the table is attached (or at the first
 * such call), looks once a second (or four times per dist.stall_warn_s when
 * that is shorter): it beats (its slot in the node's table, and a datagram
 * to every other node), takes the other nodes' datagrams, warns at every
 * multiple of the warn limit the call has been inside, as the polled waits
 * do, naming the late ranks the table shows, and when the call has been
 * inside for the abort limit it writes one line and ends the process
 * (_exit(DIST_STALL_EXIT): the thread may not call MPI while another thread
 * is inside it; mpirun then ends the job, as for any rank that dies).
 * dist_blocking_end says "stall over" for a call it warned about. The state
 * is under a mutex, so a line never pairs one call's label with another's
 * time.
 *
 * Why the throttle: Open MPI polls inside a blocking collective, so a rank
 * waiting there for a stopped rank spins a core for as long as the stall
 * lasts (up to dist.stall_abort_s: 30 minutes by default). The monitor
 * cannot make MPI sleep, but it can make the thread inside it sleep: a
 * signal whose handler sleeps DIST_THROTTLE_PAUSE_MS, sent again a
 * millisecond after the handler returns, leaves MPI about 1 ms of polling in
 * each period (about 5% of a core). Only while the table names a late rank:
 * a call that is merely long (a slow link, a large bucket) keeps its speed.
 * Signals are nothing new to an MPI library (profilers interrupt it
 * thousands of times a second); the handler touches nothing but errno and
 * the clock. */
static pthread_mutex_t blocking_mu = PTHREAD_MUTEX_INITIALIZER;
static double blocking_since = 0; /* time_now() the call in progress began; 0: none */
static int blocking_warned = 0;   /* warnings said about it */
static char blocking_what[256];
static pthread_t blocking_thread; /* the thread inside it */
static pthread_once_t deadman_once = PTHREAD_ONCE_INIT;
/* The table (dist_beats_attach), under blocking_mu; slots NULL: none. */
static dist_beats beats = {.fd = -1};

static int64_t now_ns(void) { return (int64_t)(time_now() * 1e9); }

/* The monitor's period: a second, or a quarter of the warn limit when that
 * is shorter (at least 50 ms). */
static double beat_period(void) {
    double warn_s = warn_limit();
    double nap = warn_s > 0 && warn_s < 4 ? warn_s / 4 : 1;
    return nap < 0.05 ? 0.05 : nap;
}

/* A rank whose monitor has been silent for 3 of its periods and a second
 * is stopped (a live one beats every period; a datagram is taken at most a
 * period late). */
static double stale_after(void) { return 3 * beat_period() + 1; }

static int throttle_signal(void) { return SIGRTMIN + 4; }

static void throttle_pause(int sig) {
    (void)sig;
    int saved = errno;
    struct timespec ts = {0, DIST_THROTTLE_PAUSE_MS * 1000000L};
    nanosleep(&ts, NULL); /* async-signal-safe; an interruption only ends the pause early */
    errno = saved;
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

static void *deadman(void *arg) {
    (void)arg;
    double last_beat = 0;
    int throttling = 0;
    for (int first = 1;; first = 0) {
        double period = beat_period();
        /* the first beat at once: a rank that stops early has been heard of */
        if (!first) sleep_us_whole(throttling ? (DIST_THROTTLE_PAUSE_MS + 1) * 1000L : (long)(period * 1e6));
        cnt_mutex_lock(&blocking_mu);
        double now = time_now();
        int64_t ns = (int64_t)(now * 1e9);
        if (beats.slots) {
            __atomic_store_n(&beats.slots[beats.mine].beat_ns, ns, __ATOMIC_RELEASE);
            dist_beats_drain(&beats, ns);
            if (now - last_beat >= period) {
                dist_beats_send(&beats, ns);
                last_beat = now;
            }
        }
        double waited = blocking_since > 0 ? now - blocking_since : 0;
        char late[1024] = "";
        int named = blocking_since > 0 ? dist_beats_describe(&beats, late, sizeof late, ns, stale_after(), 1) : 0;
        double warn_s = warn_limit(), abort_s = abort_limit();
        if (blocking_since > 0 && abort_s > 0 && waited >= abort_s) {
            char line[1200];
            int n = snprintf(line, sizeof line,
                             "[rank %d] error: stall: rank %d has been inside %s for %.0f s: a rank stopped or hung in "
                             "the middle of it%s; ending this rank, and with it the job (dist.stall_abort_s = %g)\n",
                             dist_job_rank(), dist_job_rank(), blocking_what, waited, late, abort_s);
            fflush(stdout);
            if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) {
                /* nothing left to tell it to */
            }
            cnt_say_last_words();
            _exit(DIST_STALL_EXIT);
        }
        int due = blocking_since > 0 && warn_s > 0 ? (int)(waited / warn_s) : 0;
        if (due > blocking_warned) {
            blocking_warned = due;
            /* every rank had arrived (the watchdog's barrier before it): one stopped at or inside it */
            log_warn("stall: rank %d has been inside %s for %.0f s: every rank had reached it (the stall watchdog), "
                     "so one stopped or hung at or inside it and prints no such line%s (dist.stall_warn_s = %g; the "
                     "job ends after dist.stall_abort_s = %g)",
                     dist_job_rank(), blocking_what, waited, late, warn_s, abort_s);
        }
        throttling = named > 0 && waited >= DIST_THROTTLE_AFTER_S;
        if (throttling) pthread_kill(blocking_thread, throttle_signal()); /* the thread is inside: it cannot end */
        cnt_mutex_unlock(&blocking_mu);
    }
    return NULL;
}

static void deadman_start(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = throttle_pause;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK_ERRNO(sigaction(throttle_signal(), &sa, NULL) == 0, "sigaction (stall throttle)");
    pthread_t t;
    errno = pthread_create(&t, NULL, deadman, NULL);
    CHECK_ERRNO(errno == 0, "pthread_create (stall deadman)");
    cnt_thread_name(t, "cnt-stall");
    pthread_detach(t);
}

static void deadman_once_start(void) {
    errno = pthread_once(&deadman_once, deadman_start);
    CHECK_ERRNO(errno == 0, "pthread_once (stall deadman)");
}

void dist_beats_attach(const dist_beats *t) {
    cnt_mutex_lock(&blocking_mu);
    if (t) {
        beats = *t;
        /* this rank's slot: known from now on, its group the workers' until dist_split_servers says */
        __atomic_store_n(&beats.slots[beats.mine].group, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&beats.slots[beats.mine].beat_ns, now_ns(), __ATOMIC_RELEASE);
    } else {
        /* the socket is not closed (the process's end closes it): no
         * descriptor number is reused under a monitor about to read it */
        memset(&beats, 0, sizeof beats);
        beats.fd = -1;
    }
    int start = t && t->world > 1;
    cnt_mutex_unlock(&blocking_mu);
    if (start) deadman_once_start();
}

void dist_beats_set_group(int group) {
    cnt_mutex_lock(&blocking_mu);
    if (beats.slots) __atomic_store_n(&beats.slots[beats.mine].group, (int64_t)group + 1, __ATOMIC_RELEASE);
    cnt_mutex_unlock(&blocking_mu);
}

void dist_beats_note(char *buf, size_t cap) {
    size_t n = strnlen(buf, cap);
    if (n + 1 >= cap) return;
    cnt_mutex_lock(&blocking_mu);
    dist_beats_describe(&beats, buf + n, cap - n, now_ns(), stale_after(), 0);
    cnt_mutex_unlock(&blocking_mu);
}

/* A wait of DIST_WAITING_AFTER_S or more begins (+1) or ends (-1) on
 * this rank: for the others' lines (dist/wait.h). */
static void beats_waiting(int delta) {
    cnt_mutex_lock(&blocking_mu);
    if (beats.slots) __atomic_add_fetch(&beats.slots[beats.mine].waiting, delta, __ATOMIC_ACQ_REL);
    cnt_mutex_unlock(&blocking_mu);
}

void dist_blocking_begin(const char *call) {
    if (abort_limit() <= 0 && warn_limit() <= 0) return;
    deadman_once_start();
    fault_stall_in_point(call); /* tests only: CNT_TEST_STALL_IN stops a rank here, the others inside the call */
    cnt_mutex_lock(&blocking_mu);
    snprintf(blocking_what, sizeof blocking_what, "%s during %s", call, tl_phase[0] ? tl_phase : "an unnamed phase");
    blocking_since = time_now();
    blocking_warned = 0;
    blocking_thread = pthread_self();
    if (beats.slots) {
        dist_beat *b = &beats.slots[beats.mine];
        int64_t ns = (int64_t)(blocking_since * 1e9);
        __atomic_store_n(&b->beat_ns, ns, __ATOMIC_RELEASE);
        __atomic_store_n(&b->inside_ns, ns, __ATOMIC_RELEASE);
        __atomic_add_fetch(&b->seq, 1, __ATOMIC_ACQ_REL);
    }
    cnt_mutex_unlock(&blocking_mu);
    fault_stall_in_point("inside the call"); /* tests only: a rank stopped inside it (its monitor with it) */
}

void dist_blocking_end(void) {
    if (abort_limit() <= 0 && warn_limit() <= 0) return;
    cnt_mutex_lock(&blocking_mu);
    if (beats.slots) __atomic_store_n(&beats.slots[beats.mine].inside_ns, 0, __ATOMIC_RELEASE);
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

void dist_wait_until(const dist_wait_site *s) {
    if (s->poll(s->ctx)) return;
    double (*now)(void) = s->clock ? s->clock : time_now;
    double t0 = now(), next_warn = s->warn_s;
    long sleep_us = s->max_sleep_us < 10 ? s->max_sleep_us : 10;
    int warned = 0, polls = 1; /* polls counts up to spin_polls only: a wait of hours would overflow it */
    int marked = 0;            /* this wait counts in the rank's slot (beats_waiting) */
    while (!s->poll(s->ctx)) {
        double waited = now() - t0;
        if (!marked && waited >= DIST_WAITING_AFTER_S) {
            beats_waiting(1);
            marked = 1;
        }
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
    if (marked) beats_waiting(-1);
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
    else if (part == DIST_WAIT_OVER)
        snprintf(buf, cap, "%s during %s completed", p->collective, phase_name());
    else {
        /* a collective cannot know who is missing, but the table knows who is stopped or elsewhere */
        snprintf(buf, cap, "in %s during %s for the other ranks", p->collective, phase_name());
        dist_beats_note(buf, cap);
    }
}

void dist_wait_polled(int (*poll)(void *ctx), void *ctx, const char *collective, dist_wait_mode mode) {
    polled p = {poll, ctx, collective};
    int max_sleep_us = mode == DIST_WAIT_YIELD ? 0 : mode == DIST_WAIT_PACED ? WAIT_PACED_MAX_SLEEP_US
                                                                               : WAIT_MAX_SLEEP_US;
    dist_wait_site s = {
        .poll = polled_poll,
        .describe = polled_describe,
        .ctx = &p,
        .warn_note = "",
        /* a collective cannot know who is missing; the others print nothing */
        .abort_note = ": one or more did not arrive (stopped, hung or slow; the ranks that print no such line "
                      "are the late ones)",
        .spin_s = WAIT_SPIN_S,
        .yield_s = mode == DIST_WAIT_PACED ? WAIT_PACED_YIELD_S : 0,
        .max_sleep_us = max_sleep_us,
        .relax_s = mode == DIST_WAIT_PACED ? WAIT_PACED_RELAX_S : 0,
        .relaxed_max_sleep_us = WAIT_PACED_RELAXED_US,
        .warn_s = warn_limit(),
        .abort_s = abort_limit(),
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
