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
/* The CPUs the process was given (mpirun's binding, taskset), as the first
 * call found them: the calling thread's mask together with the CPUs of
 * OpenMP's places. OpenMP with OMP_PROC_BIND pins the initial thread to its
 * first place (libgomp does it before main()), and every thread created
 * afterwards would inherit that one CPU; main() makes the first call.
 * Returns the count; thread-safe. */
int cpus_process(cpus_mask *m);
/* Binds the calling thread to m's CPUs: 0, or the errno of the failure. */
int cpus_bind_thread(const cpus_mask *m);

/* m = the CPUs of a list as sysfs and cpuset write them ("0-3,8,10-11",
 * a trailing newline allowed): their number, or -1 (m empty) where the
 * text is not such a list or names a CPU at or past CPUS_MAX. */
int cpus_parse(const char *list, cpus_mask *m);
/* out = a & b (out may be either): the count. */
int cpus_and(cpus_mask *out, const cpus_mask *a, const cpus_mask *b);
/* m = the CPUs local to PCI device bus_id (as cudaDeviceGetPCIBusId writes
 * it, "0000:1B:00.0", or with NVML's 8-digit domain): sysfs's
 * SYSFS/bus/pci/devices/0000:1b:00.0/local_cpulist, the CPUs of the
 * device's NUMA node. The count, or 0 (m empty) where the file cannot be
 * read or holds no list: the caller then has nothing to narrow by. */
int cpus_of_pci(const char *sysfs, const char *bus_id, cpus_mask *m);

#endif
