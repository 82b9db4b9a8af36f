/*
 * common/threads.h - checked pthread locking shared by the loader, the
 * gradient reducer and the timeline, and thread names.
 *
 * A failure of these calls means a broken program (an uninitialised or
 * destroyed mutex), not a user error: each ends the process through
 * cnt_fatal with the call and strerror of its result.
 */
#ifndef CNT_THREADS_H
#define CNT_THREADS_H

#include <pthread.h>

/* Default attributes. */
void cnt_mutex_init(pthread_mutex_t *mu);
void cnt_cond_init(pthread_cond_t *cv);
void cnt_mutex_lock(pthread_mutex_t *mu);
void cnt_mutex_unlock(pthread_mutex_t *mu);
/* pthread_cond_wait on cv with mu held. */
void cnt_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu);
/* The same for at most `seconds` (>= 0; cv made by cnt_cond_init): 1 when
 * that time passed, 0 when woken (callers recheck their condition). */
int cnt_cond_timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds);
/* Names thread t (printf-style; cut to Linux's 15 characters) for the tools
 * that show threads (top -H, ps -L, gdb, perf): "cnt-comm", "cnt-stall",
 * "cnt-train-0", ... Best effort: a name is not worth failing a run over. */
void cnt_thread_name(pthread_t t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Moves the calling thread's nice value (Linux: per thread) by delta, within
 * -20..19, from what it inherited: a negative delta runs it ahead of the
 * process's other threads on a shared core. 0, or -1 with errno (EACCES
 * where lowering it needs CAP_SYS_NICE or a high enough RLIMIT_NICE, `ulimit
 * -e`), the thread left as it was. */
int cnt_thread_nice(int delta);

#endif
