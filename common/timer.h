/*
 * common/timer.h - wall-clock time for metrics and benchmarks.
 */
#ifndef CNT_TIMER_H
#define CNT_TIMER_H

/* Seconds from an arbitrary fixed point (CLOCK_MONOTONIC). */
double time_now(void);

#endif
