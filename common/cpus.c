/*
 * common/cpus.c - the CPUs this process may run on (see common/cpus.h).
 */
#include "common/cpus.h"

#include <ctype.h>
#include <errno.h>

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

int cpus_parse(const char *list, cpus_mask *m) {
    memset(m, 0, sizeof *m);
    const char *p = list;
    int any = 0;
    while (*p && *p != '\n') {
        if (!isdigit((unsigned char)*p)) goto bad;
        errno = 0;
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            if (!isdigit((unsigned char)p[1])) goto bad;
            hi = strtol(p + 1, &end, 10);
            p = end;
        }
        if (errno || lo < 0 || hi < lo || hi >= CPUS_MAX) goto bad;
        for (long c = lo; c <= hi; c++) m->bits[c / 8] |= (unsigned char)(1u << (c % 8));
        any = 1;
        if (*p == ',') {
            p++;
            if (!isdigit((unsigned char)*p)) goto bad;
        } else if (*p && *p != '\n') {
            goto bad;
        }
    }
    if (*p == '\n' && p[1]) goto bad;
    return any ? cpus_count(m) : 0;
bad:
    memset(m, 0, sizeof *m);
    return -1;
}

int cpus_and(cpus_mask *out, const cpus_mask *a, const cpus_mask *b) {
    for (size_t i = 0; i < sizeof out->bits; i++) out->bits[i] = a->bits[i] & b->bits[i];
    return cpus_count(out);
}

int cpus_of_pci(const char *sysfs, const char *bus_id, cpus_mask *m) {
    memset(m, 0, sizeof *m);
    /* sysfs names devices DDDD:BB:DD.F in lower case; NVML's ids carry an
     * 8-digit domain */
    char id[32];
    size_t n = 0;
    const char *colon = strchr(bus_id, ':');
    if (!colon || strlen(bus_id) >= sizeof id) return 0;
    while (colon - bus_id > 4 && *bus_id == '0') bus_id++; /* 0000xxxx -> xxxx; a wider domain keeps its digits */
    for (const char *q = bus_id; *q && n + 1 < sizeof id; q++) id[n++] = (char)tolower((unsigned char)*q);
    id[n] = 0;
    char path[512], text[4096];
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s/local_cpulist", sysfs, id);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    int c = cpus_parse(text, m);
    return c > 0 ? c : 0;
}
