/*
 * dist/fault.c - test-only fault injection (see dist/fault.h): each fault
 * point parses its RANK:STEP:VALUE variable once and acts when this rank and
 * step match.
 */
#include "dist/fault.h"
#include "common/check.h"
#include "dist/dist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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
    return f->rank == dist_rank() && f->step == step;
}

static fault stall = {.var = "CNT_TEST_STALL", .value_name = "SECONDS"};

void fault_stall_point(long step) {
    if (!fault_due(&stall, step)) return;
    double s = stall.value;
    log_warn("CNT_TEST_STALL: sleeping %g s at the start of step %ld (test-only fault injection)", s, step);
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
