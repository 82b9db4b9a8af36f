/*
 * dist/fault.c - test-only fault injection (see dist/fault.h): each fault
 * point parses its variable once and acts when this rank and step (or phase)
 * match.
 */
#include "dist/fault.h"
#include "common/check.h"
#include "dist/dist.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

/* One fault, armed by the environment variable `var` = RANK:STEP:VALUE. */
typedef struct fault {
    const char *var;
    const char *value_name;  /* what VALUE means, for the error message */
    int read;                /* var has been read */
    int rank;                /* -1: not armed */
    long step;
    double value;
} fault;

static void fault_read(fault *f) {
    f->read = 1;
    f->rank = -1;
    const char *v = getenv(f->var);
    if (!v || !*v) return;
    int r, used = 0;
    long st;
    double val;
    if (sscanf(v, "%d:%ld:%lf%n", &r, &st, &val, &used) != 3 || v[used] != '\0' || r < 0 || st < 1 || val < 0)
        cnt_fatal("%s='%s': expected RANK:STEP:%s (test-only fault injection)", f->var, v, f->value_name);
    f->rank = r;
    f->step = st;
    f->value = val;
}

/* Whether f is armed for this rank at this step; reads it at the first call. */
static int fault_due(fault *f, long step) {
    if (!f->read) fault_read(f);
    return f->rank == dist_job_rank() && f->step == step;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static fault stall = {.var = "CNT_TEST_STALL", .value_name = "SECONDS"};

void fault_stall_point(long step) {
    if (!fault_due(&stall, step)) return;
    double s = stall.value;
    log_warn("CNT_TEST_STALL: sleeping %g s at the start of step %ld (test-only fault injection)", s, step);
    sleep_s(s);
}

/* CNT_TEST_STALL_IN=RANK:PHASE:SECONDS. PHASE may itself hold colons
 * ("start-up: configuration check"): RANK ends at the first, SECONDS starts
 * after the last. Parsed once (pthread_once: the training thread and the
 * reducer's communication thread both name phases); fires once, for the
 * first thread that names a matching phase. */
static struct {
    pthread_once_t once;
    int rank;               /* -1: not armed */
    char phase[128];        /* what the phase's name starts with */
    double seconds;
    atomic_int fired;
} stall_in = {.once = PTHREAD_ONCE_INIT, .rank = -1};

static void stall_in_read(void) {
    const char *var = "CNT_TEST_STALL_IN", *v = getenv(var);
    if (!v || !*v) return;
    const char *c1 = strchr(v, ':'), *c2 = strrchr(v, ':');
    char *end;
    int ok = c1 && c2 > c1 + 1 && (size_t)(c2 - c1 - 1) < sizeof stall_in.phase;
    long r = ok ? strtol(v, &end, 10) : -1;
    ok = ok && end == c1 && r >= 0 && r <= 1 << 30;
    double s = ok ? strtod(c2 + 1, &end) : -1;
    ok = ok && c2[1] && *end == '\0' && s >= 0;
    if (!ok)
        cnt_fatal("%s='%s': expected RANK:PHASE:SECONDS, PHASE a phase the trainer names (dist_phase) or the start "
                  "of one, e.g. 1:evaluation:30 (test-only fault injection)",
                  var, v);
    stall_in.rank = (int)r;
    memcpy(stall_in.phase, c1 + 1, (size_t)(c2 - c1 - 1));
    stall_in.phase[c2 - c1 - 1] = '\0';
    stall_in.seconds = s;
}

void fault_stall_in_point(const char *phase) {
    errno = pthread_once(&stall_in.once, stall_in_read);
    CHECK_ERRNO(errno == 0, "pthread_once (CNT_TEST_STALL_IN)");
    if (stall_in.rank != dist_job_rank() || strncmp(phase, stall_in.phase, strlen(stall_in.phase)) != 0) return;
    if (atomic_exchange(&stall_in.fired, 1)) return;
    log_warn("CNT_TEST_STALL_IN: sleeping %g s on entering '%s', before its first collective (test-only fault "
             "injection; pid %ld)",
             stall_in.seconds, phase, (long)getpid());
    sleep_s(stall_in.seconds);
}
