/*
 * common/cpus.c - the CPUs this process may run on (see common/cpus.h).
 */
#include "common/cpus.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cpus_online(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int cpus_allowed(cpus_mask *m) {
    cpus_mask local;
    if (!m) m = &local;
    memset(m, 0, sizeof *m);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPUS_MAX && c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) m->bits[c / 8] |= (unsigned char)(1u << (c % 8));
    } else {
        int n = cpus_online();
        for (int c = 0; c < n && c < CPUS_MAX; c++) m->bits[c / 8] |= (unsigned char)(1u << (c % 8));
    }
    int n = cpus_count(m);
    return n > 0 ? n : 1;
}

static int has(const cpus_mask *m, int c) { return c < CPUS_MAX && (m->bits[c / 8] >> (c % 8)) & 1; }

static cpus_mask process_mask;
static pthread_once_t process_once = PTHREAD_ONCE_INIT;
/* The thread's mask, and the CPUs of OpenMP's places: with OMP_PROC_BIND
 * set, libgomp pins the initial thread to the first place before main()
 * runs, and its places are what is left of the mask it found. */
static void record_process(void) {
    cpus_allowed(&process_mask);
    int places = omp_get_num_places();
    for (int p = 0; p < places; p++) {
        int n = omp_get_place_num_procs(p);
        if (n <= 0) continue;
        int *ids = malloc((size_t)n * sizeof *ids);
        if (!ids) continue;
        omp_get_place_proc_ids(p, ids);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < CPUS_MAX) process_mask.bits[ids[i] / 8] |= (unsigned char)(1u << (ids[i] % 8));
        free(ids);
    }
}

int cpus_process(cpus_mask *m) {
    pthread_once(&process_once, record_process);
    if (m) *m = process_mask;
    int n = cpus_count(&process_mask);
    return n > 0 ? n : 1;
}

int cpus_bind_thread(const cpus_mask *m) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c = 0; c < CPUS_MAX && c < CPU_SETSIZE; c++)
        if (has(m, c)) CPU_SET(c, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

int cpus_count(const cpus_mask *m) {
    int n = 0;
    for (int c = 0; c < CPUS_MAX; c++) n += has(m, c);
    return n;
}

void cpus_format(const cpus_mask *m, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPUS_MAX; c++) {
        if (!has(m, c)) continue;
        int e = c;
        while (has(m, e + 1)) e++;
        char part[32];
        int k = e > c ? snprintf(part, sizeof part, "%s%d-%d", o ? "," : "", c, e)
                      : snprintf(part, sizeof part, "%s%d", o ? "," : "", c);
        if (o + (size_t)k + 4 > len) {
            if (o + 4 <= len) snprintf(buf + o, len - o, "...");
            return;
        }
        memcpy(buf + o, part, (size_t)k + 1);
        o += (size_t)k;
        c = e;
    }
}
