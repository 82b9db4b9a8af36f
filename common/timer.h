/*
 * common/timer.h - wall-clock time for metrics and benchmarks, and sleeping
 * until a point on the same clock.
 */
#ifndef CNT_TIMER_H
#define CNT_TIMER_H

/* Seconds from an arbitrary fixed point (CLOCK_MONOTONIC). */
double time_now(void);

/* Sleeps until time_now() >= t (an absolute deadline on CLOCK_MONOTONIC, so
 * deadlines summed from one start do not accumulate rounding); returns at
 * once when t has passed. A signal does not cut the sleep short. Never fails. */
void time_sleep_until(double t);

#endif
