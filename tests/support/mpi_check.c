/*
 * tests/support/mpi_check.c - see mpi_check.h.
 */
#include "tests/support/mpi_check.h"

#include <stdarg.h>
#include <stdio.h>

#include "dist/dist.h"

static int failures;

void tu_mpi_check(int ok, const char *fmt, ...) {
    char name[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int rank = dist_rank();
    if (!ok) {
        failures++;
        if (rank != 0) fprintf(stderr, "[rank %d] FAIL %s\n", rank, name);
    }
    double bad = ok ? 0.0 : 1.0;
    dist_allreduce_sum_f64(&bad, 1);
    if (bad > 0 && ok) failures++; /* failed on another rank */
    if (rank == 0) {
        if (bad > 0 || !ok)
            printf("FAIL %s (on %.0f rank(s))\n", name, bad > 0 ? bad : 1.0);
        else
            printf("ok   %s\n", name);
        fflush(stdout);
    }
}

int tu_mpi_failures(void) { return failures; }
