/*
 * dist/timeline.c - Chrome-trace event recording and the end-of-run gather to
 * rank 0 (see dist/timeline.h).
 */
#include "dist/timeline.h"
#include "common/check.h"
#include "common/fileio.h"
#include "common/threads.h"
#include "common/timer.h"
#include "dist/dist.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct tl_event {
    char name[128];
    const char *cat;  /* a string literal */
    int tid;
    long step;
    double t_start, t_end; /* seconds, time_now() */
    int flow;         /* a flow arrow from (tid, t_start) to (tid_to, t_end) */
    int tid_to;
    long id;          /* a flow's number, in the order recorded */
} tl_event;

enum { TL_THREADS = 8 };

struct timeline {
    double t0;        /* this rank's zero, taken after a barrier */
    char threads[TL_THREADS][32]; /* track names by tid ("" unnamed) */
    char *foreign;    /* other processes' events for rank 0's file (timeline_add_text) */
    size_t foreign_len;
    /* Guards events, n, cap and step: the training thread and the reducer's
     * communication thread both append during a step. */
    pthread_mutex_t mu;
    tl_event *events;
    long n, cap;
    long step;
    long first, last; /* the window of steps recorded */
    /* timeline_spool: events go to this file at every step boundary */
    FILE *spool;             /* open for writing and reading ("w+"): read back through it, not by name */
    char spool_path[4200];
    dev_t spool_dev;         /* the part's identity, so only our own part is ever removed */
    ino_t spool_ino;
    int spool_pid;
    char spool_process[64];
    int spool_meta;   /* its metadata is written */
    long flows;       /* flows recorded so far (their ids) */
};

timeline *timeline_create_local(void) {
    timeline *tl = cnt_calloc(1, sizeof *tl);
    cnt_mutex_init(&tl->mu);
    tl->cap = 1024;
    tl->events = cnt_malloc((size_t)tl->cap * sizeof *tl->events);
    timeline_name_thread(tl, TIMELINE_TID_TRAIN, "train");
    timeline_name_thread(tl, TIMELINE_TID_COMM, "comm");
    tl->first = LONG_MIN;
    tl->last = LONG_MAX;
    tl->t0 = time_now();
    return tl;
}

void timeline_set_window(timeline *tl, long first, long last) {
    cnt_mutex_lock(&tl->mu);
    tl->first = first;
    tl->last = last;
    cnt_mutex_unlock(&tl->mu);
}

timeline *timeline_create(void) {
    timeline *tl = timeline_create_local();
    /* Why a barrier: every rank takes its zero at (nearly) the same moment,
     * so the ranks' events line up on one time axis. */
    dist_barrier();
    tl->t0 = time_now();
    return tl;
}

double timeline_zero(const timeline *tl) { return tl->t0; }

void timeline_name_thread(timeline *tl, int tid, const char *name) {
    CNT_ASSERT(tid >= 0 && tid < TL_THREADS);
    snprintf(tl->threads[tid], sizeof tl->threads[tid], "%s", name);
}

static void spool_flush_locked(timeline *tl);

void timeline_set_step(timeline *tl, long step) {
    cnt_mutex_lock(&tl->mu);
    spool_flush_locked(tl); /* a step boundary: what the last step recorded goes to disk */
    tl->step = step;
    cnt_mutex_unlock(&tl->mu);
}

/* Appends an event (flow: an arrow to tid_to); the caller holds tl->mu. */
static void append(timeline *tl, const char *name, const char *cat, int tid, double t_start, double t_end, int flow,
                   int tid_to);

void timeline_flow(timeline *tl, const char *name, int tid_from, double t_from, int tid_to, double t_to) {
    cnt_mutex_lock(&tl->mu);
    if (tl->step >= tl->first && tl->step <= tl->last) append(tl, name, "flow", tid_from, t_from, t_to, 1, tid_to);
    cnt_mutex_unlock(&tl->mu);
}

void timeline_record(timeline *tl, const char *name, const char *cat, int tid, double t_start, double t_end) {
    cnt_mutex_lock(&tl->mu);
    if (tl->step >= tl->first && tl->step <= tl->last) append(tl, name, cat, tid, t_start, t_end, 0, 0);
    cnt_mutex_unlock(&tl->mu);
}

static void append(timeline *tl, const char *name, const char *cat, int tid, double t_start, double t_end, int flow,
                   int tid_to) {
    if (tl->n == tl->cap) {
        long cap = 2 * tl->cap;
        tl_event *ev = realloc(tl->events, (size_t)cap * sizeof *ev);
        CHECK_ERRNO(ev != NULL, "realloc (timeline events)");
        tl->events = ev;
        tl->cap = cap;
    }
    tl_event *e = &tl->events[tl->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->cat = cat;
    e->tid = tid;
    e->step = tl->step;
    e->t_start = t_start;
    e->t_end = t_end;
    e->flow = flow;
    e->tid_to = tid_to;
    if (flow) e->id = tl->flows++;
}

long timeline_count(timeline *tl) {
    cnt_mutex_lock(&tl->mu);
    long n = tl->n;
    cnt_mutex_unlock(&tl->mu);
    return n;
}

/* A growable text buffer. */
typedef struct text {
    char *p;
    size_t len, cap;
} text;

static void text_printf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        CNT_ASSERT(k >= 0);
        if ((size_t)k < t->cap - t->len) {
            t->len += (size_t)k;
            return;
        }
        size_t cap = 2 * t->cap + (size_t)k + 1;
        char *p = realloc(t->p, cap);
        CHECK_ERRNO(p != NULL, "realloc (timeline text)");
        t->p = p;
        t->cap = cap;
    }
}

/* name as a JSON string body: quotes, backslashes and control bytes escaped. */
static void json_escape(const char *s, char *out, size_t len) {
    size_t j = 0;
    for (; *s && j + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[j++] = '\\';
            out[j++] = (char)c;
        } else if (c < 0x20) {
            j += (size_t)snprintf(out + j, len - j, "\\u%04x", c);
        } else {
            out[j++] = (char)c;
        }
    }
    out[j] = '\0';
}

/* A process's part of the trace: metadata (meta), then its events in memory
 * with times from zero, each element preceded by ",\n" (rank 0 drops the very
 * first comma). The caller holds tl->mu. */
static void rank_events_locked(timeline *tl, int rank, const char *process, double zero, int meta, text *t) {
    if (meta) {
        char pname[200];
        json_escape(process, pname, sizeof pname);
        text_printf(t, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"%s\"}}",
                    rank, pname);
        text_printf(t,
                    ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
                    rank, rank);
    }
    for (int tid = 0; meta && tid < TL_THREADS; tid++) {
        if (!tl->threads[tid][0]) continue;
        char tname[200];
        json_escape(tl->threads[tid], tname, sizeof tname);
        text_printf(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                    rank, tid, tname);
        text_printf(t,
                    ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                    rank, tid, tid);
    }
    for (long i = 0; i < tl->n; i++) {
        const tl_event *e = &tl->events[i];
        char name[6 * sizeof e->name + 8];
        json_escape(e->name, name, sizeof name);
        double ts = 1e6 * (e->t_start - zero), dur = 1e6 * (e->t_end - e->t_start);
        if (e->flow) {
            /* ids: unique in the file (a process's count of flows, above the pid) */
            long long id = ((long long)rank << 32) + e->id;
            text_printf(t,
                        ",\n{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"s\",\"id\":%lld,\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                        "\"args\":{\"step\":%ld}}",
                        name, id, rank, e->tid, ts, e->step);
            text_printf(t,
                        ",\n{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"f\",\"bp\":\"e\",\"id\":%lld,\"pid\":%d,\"tid\":%d,"
                        "\"ts\":%.3f,\"args\":{\"step\":%ld}}",
                        name, id, rank, e->tid_to, ts + (dur > 0 ? dur : 0), e->step);
            continue;
        }
        text_printf(t,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                    "\"dur\":%.3f,\"args\":{\"step\":%ld}}",
                    name, e->cat, rank, e->tid, ts, dur > 0 ? dur : 0, e->step);
    }
}

static void rank_events(timeline *tl, int rank, const char *process, double zero, text *t) {
    cnt_mutex_lock(&tl->mu);
    rank_events_locked(tl, rank, process, zero, 1, t);
    cnt_mutex_unlock(&tl->mu);
}

/* Moves the events in memory to the spool file, one element a line; the
 * caller holds tl->mu. A failed write stops the spooling (said once): the
 * events stay in memory from then on, those spooled before are dropped. */
static void spool_flush_locked(timeline *tl) {
    if (!tl->spool || (tl->n == 0 && tl->spool_meta)) return;
    text t = {.p = cnt_malloc(4096), .len = 0, .cap = 4096};
    rank_events_locked(tl, tl->spool_pid, tl->spool_process, tl->t0, !tl->spool_meta, &t);
    /* ",\n{...},\n{...}" -> "\n{...}\n{...}": names are escaped, so ",\n" only separates */
    size_t o = 0;
    for (size_t i = 0; i < t.len; i++) {
        if (t.p[i] == ',' && i + 1 < t.len && t.p[i + 1] == '\n') continue;
        t.p[o++] = t.p[i];
    }
    errno = 0;
    if (fwrite(t.p, 1, o, tl->spool) != o || fflush(tl->spool) != 0) {
        log_warn("timeline: cannot write '%s': %s; the steps written there are lost, the rest is kept in memory",
                 tl->spool_path, strerror(errno ? errno : EIO));
        fclose(tl->spool);
        remove(tl->spool_path);
        tl->spool = NULL;
    } else {
        tl->spool_meta = 1;
        tl->n = 0;
    }
    free(t.p);
}

int timeline_spool(timeline *tl, const char *path, int pid, const char *process) {
    cnt_mutex_lock(&tl->mu);
    CNT_ASSERT(!tl->spool && tl->n == 0);
    snprintf(tl->spool_path, sizeof tl->spool_path, "%s", path);
    snprintf(tl->spool_process, sizeof tl->spool_process, "%s", process);
    tl->spool_pid = pid;
    tl->spool = fopen(path, "w+");
    int err = errno;
    struct stat st;
    if (tl->spool && fstat(fileno(tl->spool), &st) == 0) {
        tl->spool_dev = st.st_dev;
        tl->spool_ino = st.st_ino;
    }
    /* held while the part is ours: another run that finds it knows it is
     * being written (timeline_part_in_use); released when the process ends */
    if (tl->spool) (void)flock(fileno(tl->spool), LOCK_EX | LOCK_NB);
    cnt_mutex_unlock(&tl->mu);
    if (!tl->spool) return cnt_err_set("cannot write the timeline's part '%s': %s", path, strerror(err));
    return CNT_OK;
}

int timeline_part_in_use(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    int busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); /* releases the lock if taken */
    return busy;
}

/* Removes this timeline's part, if the name still holds it (another run
 * that moved it aside and spooled its own there keeps its own). */
static void remove_own_part(timeline *tl) {
    struct stat st;
    if (tl->spool_path[0] && stat(tl->spool_path, &st) == 0 && st.st_dev == tl->spool_dev &&
        st.st_ino == tl->spool_ino)
        remove(tl->spool_path);
}

/* One spooled element, its "ts" moved by shift_us (0: as written). */
static void shifted_line(text *t, const char *line, double shift_us) {
    const char *ts = shift_us != 0 ? strstr(line, "\"ts\":") : NULL;
    char *end;
    double v = ts ? strtod(ts + 5, &end) : 0;
    if (!ts || end == ts + 5) {
        text_printf(t, ",\n%s", line);
        return;
    }
    text_printf(t, ",\n%.*s%.3f%s", (int)(ts + 5 - line), line, v + shift_us, end);
}

/* The spooled events and those still in memory, as trace elements each
 * preceded by ",\n", times counted from zero, appended to t; the spool file
 * is closed (it stays on disk until the trace is written). */
static int spool_read(timeline *tl, double zero, text *t) {
    cnt_mutex_lock(&tl->mu);
    spool_flush_locked(tl);
    FILE *f = tl->spool;
    tl->spool = NULL;
    if (!f) { /* spooling failed: what is in memory */
        rank_events_locked(tl, tl->spool_pid, tl->spool_process, zero, 1, t);
        cnt_mutex_unlock(&tl->mu);
        return CNT_OK;
    }
    cnt_mutex_unlock(&tl->mu);
    /* through the stream it was written with: renamed or replaced, the part is still ours */
    if (fseek(f, 0, SEEK_SET) != 0) {
        int err = errno;
        fclose(f);
        return cnt_err_set("cannot read the timeline's part '%s': %s", tl->spool_path, strerror(err));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    double shift_us = 1e6 * (tl->t0 - zero);
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] == '\n') line[--n] = '\0';
        if (n > 0) shifted_line(t, line, shift_us);
    }
    free(line);
    int bad = ferror(f);
    fclose(f);
    if (bad) return cnt_err_set("cannot read the timeline's part '%s'", tl->spool_path);
    return CNT_OK;
}

char *timeline_events_text(timeline *tl, int pid, const char *process, double zero, size_t *len) {
    text t = {.p = cnt_malloc(4096), .len = 0, .cap = 4096};
    if (!tl->spool) {
        rank_events(tl, pid, process, zero, &t);
    } else if (spool_read(tl, zero, &t) != CNT_OK) {
        log_warn("%s", cnt_err_msg()); /* this process's part is lost to the trace, and said */
        t.len = 0;
    }
    *len = t.len;
    return t.p;
}

void timeline_remove_part(timeline *tl) {
    if (!tl->spool) remove_own_part(tl);
}

void timeline_add_text(timeline *tl, const char *txt, size_t len) {
    cnt_mutex_lock(&tl->mu);
    char *p = realloc(tl->foreign, tl->foreign_len + len + 1);
    CHECK_ERRNO(p != NULL, "realloc (timeline text)");
    memcpy(p + tl->foreign_len, txt, len);
    tl->foreign = p;
    tl->foreign_len += len;
    cnt_mutex_unlock(&tl->mu);
}

static int64_t write_trace(const char *path, void *all, size_t *counts);

int timeline_write(timeline *tl, const char *path) {
    text t = {.p = cnt_malloc(4096), .len = 0, .cap = 4096};
    char process[32];
    snprintf(process, sizeof process, "rank %d", dist_rank());
    int spooled = tl->spool != NULL;
    if (!spooled) {
        rank_events(tl, dist_rank(), process, tl->t0, &t);
    } else if (spool_read(tl, tl->t0, &t) != CNT_OK) {
        /* this rank's part is lost to the trace; say so and go on with the others' (a collective follows) */
        log_warn("%s", cnt_err_msg());
        t.len = 0;
        spooled = 0;
    }
    if (tl->foreign_len) {
        text_printf(&t, "%.*s", (int)tl->foreign_len, tl->foreign);
    }
    void *all = NULL;
    size_t *counts = NULL;
    dist_gather_bytes(t.p, t.len, &all, &counts);
    free(t.p);
    /* rank 0 says whether the trace is written; only then do the parts go */
    int64_t written = dist_rank() == 0 ? write_trace(path, all, counts) : 0;
    dist_broadcast(&written, sizeof written, 0);
    if (written == 1 && spooled) remove_own_part(tl);
    return dist_rank() == 0 && written != 1 ? CNT_ERR : CNT_OK;
}

/* Rank 0: the gathered parts as one trace file, through path.tmp and a
 * rename. 1 when written, 0 (with the message set) when not. */
static int64_t write_trace(const char *path, void *all, size_t *counts) {
    size_t total = 0;
    for (int r = 0; r < dist_world(); r++) total += counts[r];
    free(counts);
    if (total == 0 || ((char *)all)[0] != ',') {
        free(all);
        cnt_err_set("the timeline '%s' has no events from any rank", path);
        return 0;
    }

    char tmp[4096 + 8];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(all);
        cnt_err_set("timeline path too long: '%s'", path);
        return 0;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(all);
        cnt_err_set("cannot write the timeline '%s': %s", tmp, strerror(errno));
        return 0;
    }
    int ok = fputs("{\"traceEvents\":[", f) >= 0;
    ok = ok && fwrite((char *)all + 1, 1, total - 1, f) == total - 1; /* drop the first ',' */
    ok = ok && fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f) >= 0;
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    free(all);
    if (!ok) {
        remove(tmp);
        cnt_err_set("cannot write the timeline '%s': %s", tmp, strerror(err));
        return 0;
    }
    /* an earlier run's trace (a resumed run's, say) is kept, not replaced */
    char kept[4096 + 64];
    int moved = file_keep_aside(path, "timeline", kept, sizeof kept);
    if (moved == CNT_ERR) {
        remove(tmp);
        return 0;
    }
    if (moved) log_info("timeline: the earlier trace at %s moved to %s", path, kept);
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        cnt_err_set("cannot rename '%s' to '%s': %s", tmp, path, strerror(err));
        return 0;
    }
    return 1;
}

void timeline_free(timeline *tl) {
    if (!tl) return;
    if (tl->spool) fclose(tl->spool); /* a run that failed: its part stays, as far as written */
    pthread_mutex_destroy(&tl->mu);
    free(tl->foreign);
    free(tl->events);
    free(tl);
}
