/*
 * common/threads.c - checked pthread locking (see common/threads.h).
 */
#include "common/threads.h"
#include "common/check.h"

#include <errno.h>

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
