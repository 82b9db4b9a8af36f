/*
 * common/timer.c - monotonic wall clock.
 */
#include "common/timer.h"

#include <time.h>

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
