/*
 * common/timer.c - monotonic wall clock.
 */
#include "common/timer.h"

#include <errno.h>
#include <math.h>
#include <time.h>

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void time_sleep_until(double t) {
    if (!(t > 0) || !isfinite(t)) return;
    struct timespec ts;
    ts.tv_sec = (time_t)floor(t);
    ts.tv_nsec = (long)((t - floor(t)) * 1e9);
    if (ts.tv_nsec > 999999999L) ts.tv_nsec = 999999999L;
    /* TIMER_ABSTIME: an interrupted sleep resumes toward the same deadline */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}
