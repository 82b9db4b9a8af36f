/*
 * common/hostmem.h - how much host memory this process can still use: what
 * a run compares its estimate with before allocating (train/memory.c), and
 * what the CPU backend reports as its device memory.
 */
#ifndef CNT_HOSTMEM_H
#define CNT_HOSTMEM_H

#include <stddef.h>

typedef struct hostmem {
    size_t available; /* bytes this process can still allocate and touch */
    size_t total;     /* the memory those bytes are a part of: MemTotal, or the cgroup's limit when lower */
    const char *bound; /* what sets `available`: "MemAvailable", "cgroup limit" or "ulimit -v" */
} hostmem;

/* The smallest of: MemAvailable in /proc/meminfo; the room left under the
 * memory cgroup's limit when one is set (cgroup v2 memory.max, v1
 * memory.limit_in_bytes, of this process's own cgroup, minus its usage that
 * is not reclaimable page cache: memory.current or usage_in_bytes less
 * inactive_file); the room left under the address-space limit (ulimit -v:
 * RLIMIT_AS minus VmSize). Limits of parent cgroups are not read. Returns 0,
 * or -1 with everything zero when /proc/meminfo cannot be read (not Linux):
 * the caller then knows nothing. Never sets an error message; allocates
 * nothing. */
int hostmem_query(hostmem *m);

#endif
