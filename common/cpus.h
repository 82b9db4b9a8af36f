/*
 * common/cpus.h - the CPUs this process may run on (its affinity mask, as
 * mpirun's binding or taskset left it), which is what "all cores" means for
 * compute threads: a rank bound to one core that started a thread per core
 * of the machine would run them all on that core.
 */
#ifndef CNT_CPUS_H
#define CNT_CPUS_H

#include <stddef.h>

enum { CPUS_MAX = 1024 }; /* CPUs a mask describes (cpu_set_t's size) */

/* A CPU mask as plain bytes (bit c of byte c / 8: CPU c), to send between ranks. */
typedef struct cpus_mask {
    unsigned char bits[CPUS_MAX / 8];
} cpus_mask;

/* The calling thread's affinity mask: the number of CPUs in it. Where the
 * system cannot say (sched_getaffinity fails), every online CPU. */
int cpus_allowed(cpus_mask *m);
/* The CPUs online on this machine. */
int cpus_online(void);
/* Number of CPUs in m. */
int cpus_count(const cpus_mask *m);
/* m as a list of ranges, "0-3,8,10-11" (truncated to len with "..."). */
void cpus_format(const cpus_mask *m, char *buf, size_t len);

#endif
