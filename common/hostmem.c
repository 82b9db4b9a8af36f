/*
 * common/hostmem.c - host memory this process can still use (see
 * common/hostmem.h). Everything is read from /proc and /sys text files.
 */
#include "common/hostmem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* The value after `key` in a "key value [kB]" file (/proc/meminfo,
 * /proc/self/status, memory.stat), times `unit`, into *out: 1, or 0 when
 * absent. */
static int read_keyed(const char *path, const char *key, size_t unit, uint64_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t klen = strlen(key);
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != ':' && line[klen] != '\t'))
            continue;
        char *p = line + klen + (line[klen] == ':');
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end != p) {
            *out = (uint64_t)v * unit;
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* The single number a cgroup file holds into *out: 1, or 0 for "max" (v2's
 * "no limit") or a missing file. */
static int read_number(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (ok) *out = (uint64_t)v;
    return ok;
}

/* This process's cgroup path for the v1 memory controller ("memory") or v2
 * (""), from /proc/self/cgroup; "" when there is none. */
static void cgroup_path(const char *controller, char *out, size_t len) {
    out[0] = '\0';
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        /* "ID:controllers:path" */
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *b = '\0';
        int match = controller[0] ? strstr(a + 1, controller) != NULL : a[1] == '\0';
        if (!match) continue;
        b[1 + strcspn(b + 1, "\n")] = '\0';
        snprintf(out, len, "%s", strcmp(b + 1, "/") == 0 ? "" : b + 1);
        break;
    }
    fclose(f);
}

/* The room under this process's memory cgroup limit, into *room and the limit
 * into *limit; 0 when no limit is set or none can be read. Tries the cgroup's
 * own directory, then the mount's root (a container sees its own cgroup
 * there). */
static int cgroup_room(uint64_t *room, uint64_t *limit) {
    static const struct {
        const char *controller, *mount, *max, *usage, *inactive;
    } kinds[] = {
        {"", "/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"},
        {"memory", "/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char rel[512];
        cgroup_path(kinds[k].controller, rel, sizeof rel);
        for (int own = 1; own >= 0; own--) {
            if (own && !rel[0]) continue;
            char dir[768], path[1024];
            snprintf(dir, sizeof dir, "%s%s", kinds[k].mount, own ? rel : "");
            uint64_t max = 0, usage = 0, inactive = 0;
            snprintf(path, sizeof path, "%s/%s", dir, kinds[k].max);
            if (!read_number(path, &max)) continue;
            /* v1 writes "no limit" as a huge number, v2 as "max" (read_number fails) */
            if (max == 0 || max >= ((uint64_t)1 << 60)) continue;
            snprintf(path, sizeof path, "%s/%s", dir, kinds[k].usage);
            if (!read_number(path, &usage)) continue;
            snprintf(path, sizeof path, "%s/memory.stat", dir);
            read_keyed(path, kinds[k].inactive, 1, &inactive);
            uint64_t used = usage > inactive ? usage - inactive : 0;
            *room = max > used ? max - used : 0;
            *limit = max;
            return 1;
        }
    }
    return 0;
}

int hostmem_query(hostmem *m) {
    memset(m, 0, sizeof *m);
    uint64_t avail = 0, total = 0;
    if (!read_keyed("/proc/meminfo", "MemAvailable", 1024, &avail) ||
        !read_keyed("/proc/meminfo", "MemTotal", 1024, &total))
        return -1;
    m->available = (size_t)avail;
    m->total = (size_t)total;
    m->bound = "MemAvailable";
    uint64_t room, limit;
    if (cgroup_room(&room, &limit)) {
        if (room < m->available) {
            m->available = (size_t)room;
            m->bound = "cgroup limit";
        }
        if (limit < m->total) m->total = (size_t)limit;
    }
    struct rlimit rl;
    uint64_t vm = 0;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        read_keyed("/proc/self/status", "VmSize", 1024, &vm)) {
        uint64_t left = (uint64_t)rl.rlim_cur > vm ? (uint64_t)rl.rlim_cur - vm : 0;
        if (left < m->available) {
            m->available = (size_t)left;
            m->bound = "ulimit -v";
        }
    }
    return 0;
}
