/*
 * dist/timeline.c - Chrome-trace event recording and the end-of-run gather to
 * rank 0 (see dist/timeline.h).
 */
#include "dist/timeline.h"
#include "common/check.h"
#include "common/threads.h"
#include "common/timer.h"
#include "dist/dist.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tl_event {
    char name[128];
    const char *cat;  /* a string literal */
    int tid;
    long step;
    double t_start, t_end; /* seconds, time_now() */
    int flow;         /* a flow arrow from (tid, t_start) to (tid_to, t_end) */
    int tid_to;
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

void timeline_set_step(timeline *tl, long step) {
    cnt_mutex_lock(&tl->mu);
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

/* A process's part of the trace: metadata, then its events with times from
 * zero, each element preceded by ",\n" (rank 0 drops the very first comma). */
static void rank_events(timeline *tl, int rank, const char *process, double zero, text *t) {
    char pname[200];
    json_escape(process, pname, sizeof pname);
    text_printf(t, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"%s\"}}",
                rank, pname);
    text_printf(t, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
                rank, rank);
    for (int tid = 0; tid < TL_THREADS; tid++) {
        if (!tl->threads[tid][0]) continue;
        char tname[200];
        json_escape(tl->threads[tid], tname, sizeof tname);
        text_printf(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                    rank, tid, tname);
        text_printf(t,
                    ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                    rank, tid, tid);
    }
    cnt_mutex_lock(&tl->mu);
    for (long i = 0; i < tl->n; i++) {
        const tl_event *e = &tl->events[i];
        char name[6 * sizeof e->name + 8];
        json_escape(e->name, name, sizeof name);
        double ts = 1e6 * (e->t_start - zero), dur = 1e6 * (e->t_end - e->t_start);
        if (e->flow) {
            /* ids: unique in the file (a process's count, above the pid) */
            long long id = ((long long)rank << 32) + i;
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
    cnt_mutex_unlock(&tl->mu);
}

char *timeline_events_text(timeline *tl, int pid, const char *process, double zero, size_t *len) {
    text t = {.p = cnt_malloc(4096), .len = 0, .cap = 4096};
    rank_events(tl, pid, process, zero, &t);
    *len = t.len;
    return t.p;
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

int timeline_write(timeline *tl, const char *path) {
    text t = {.p = cnt_malloc(4096), .len = 0, .cap = 4096};
    char process[32];
    snprintf(process, sizeof process, "rank %d", dist_rank());
    rank_events(tl, dist_rank(), process, tl->t0, &t);
    if (tl->foreign_len) {
        text_printf(&t, "%.*s", (int)tl->foreign_len, tl->foreign);
    }
    void *all = NULL;
    size_t *counts = NULL;
    dist_gather_bytes(t.p, t.len, &all, &counts);
    free(t.p);
    if (dist_rank() != 0) return CNT_OK;
    size_t total = 0;
    for (int r = 0; r < dist_world(); r++) total += counts[r];
    free(counts);
    CNT_ASSERT(total > 0 && ((char *)all)[0] == ',');

    char tmp[4096 + 8];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(all);
        return cnt_err_set("timeline path too long: '%s'", path);
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(all);
        return cnt_err_set("cannot write the timeline '%s': %s", tmp, strerror(errno));
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
        return cnt_err_set("cannot write the timeline '%s': %s", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        return cnt_err_set("cannot rename '%s' to '%s': %s", tmp, path, strerror(err));
    }
    return CNT_OK;
}

void timeline_free(timeline *tl) {
    if (!tl) return;
    pthread_mutex_destroy(&tl->mu);
    free(tl->foreign);
    free(tl->events);
    free(tl);
}
