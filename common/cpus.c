/*
 * common/cpus.c - the CPUs this process may run on (see common/cpus.h).
 */
#include "common/cpus.h"

#include <sched.h>
#include <stdio.h>
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
