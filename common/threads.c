/*
 * common/threads.c - checked pthread locking (see common/threads.h).
 */
#include "common/threads.h"
#include "common/check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void cnt_mutex_init(pthread_mutex_t *mu) {
    errno = pthread_mutex_init(mu, NULL);
    CHECK_ERRNO(errno == 0, "pthread_mutex_init");
}

void cnt_cond_init(pthread_cond_t *cv) {
    errno = pthread_cond_init(cv, NULL);
    CHECK_ERRNO(errno == 0, "pthread_cond_init");
}

void cnt_mutex_lock(pthread_mutex_t *mu) {
    errno = pthread_mutex_lock(mu);
    CHECK_ERRNO(errno == 0, "pthread_mutex_lock");
}

void cnt_mutex_unlock(pthread_mutex_t *mu) {
    errno = pthread_mutex_unlock(mu);
    CHECK_ERRNO(errno == 0, "pthread_mutex_unlock");
}

void cnt_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu) {
    errno = pthread_cond_wait(cv, mu);
    CHECK_ERRNO(errno == 0, "pthread_cond_wait");
}

int cnt_cond_timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* a default condition variable's clock */
    long long ns = (long long)ts.tv_nsec + (long long)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    errno = pthread_cond_timedwait(cv, mu, &ts);
    if (errno == ETIMEDOUT) return 1;
    CHECK_ERRNO(errno == 0, "pthread_cond_timedwait");
    return 0;
}

void cnt_thread_name(pthread_t t, const char *fmt, ...) {
    char name[16]; /* the kernel's TASK_COMM_LEN, its NUL included */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    (void)pthread_setname_np(t, name);
}

int cnt_thread_nice(int delta) {
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int now = getpriority(PRIO_PROCESS, tid);
    if (now == -1 && errno) return -1;
    return setpriority(PRIO_PROCESS, tid, now + delta) == 0 ? 0 : -1; /* the kernel clamps to -20..19 */
}
