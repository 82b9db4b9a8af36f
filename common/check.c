/*
 * common/check.c - error messages, fatal exits and rank-aware logging.
 */
#include "common/check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char err_buf[2048];
static int log_rank = 0;
static int log_world = 1;
static void (*abort_hook)(int code) = NULL;

int cnt_err_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return CNT_ERR;
}

/* Joins before + the stored message + after into the buffer (truncated to
 * its size). The stored message is copied first: it is the buffer written. */
static int err_join(const char *before, const char *after) {
    char old[sizeof err_buf];
    memcpy(old, err_buf, sizeof old);
    size_t n = 0;
    const char *parts[3] = {before, old, after};
    for (int i = 0; i < 3; i++)
        for (const char *p = parts[i]; *p && n + 1 < sizeof err_buf; p++) err_buf[n++] = *p;
    err_buf[n] = '\0';
    return CNT_ERR;
}

int cnt_err_prefix(const char *fmt, ...) {
    char prefix[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix - 2, fmt, ap);
    va_end(ap);
    strcat(prefix, ": ");
    return err_join(prefix, "");
}

int cnt_err_suffix(const char *fmt, ...) {
    char suffix[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(suffix, sizeof suffix, fmt, ap);
    va_end(ap);
    return err_join("", suffix);
}

const char *cnt_err_msg(void) { return err_buf; }

void cnt_log_set_rank(int rank, int world) {
    log_rank = rank;
    log_world = world;
}

int cnt_log_rank(void) { return log_rank; }

void cnt_set_abort_hook(void (*hook)(int code)) { abort_hook = hook; }

/* Writes one line to stderr, "[rank r] " (in a job of several ranks), head
 * and the formatted message, with a single write: stderr is unbuffered, and
 * mpirun forwards each write of each rank as it comes, so a line written in
 * pieces could be interleaved with another rank's output (a test once found
 * "[rank 1] " in front of rank 0's line and rank 1's error without it). */
/* The first failed write of a log line, to stdout or stderr (errno), 0: none. */
static int log_errno = 0;

static void write_line(const char *head, const char *fmt, va_list ap) {
    char line[4096];
    int n = log_world > 1 ? snprintf(line, sizeof line, "[rank %d] %s", log_rank, head)
                          : snprintf(line, sizeof line, "%s", head);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof line) {
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        if (m > 0) n += m;
    }
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    line[n] = '\0';
    errno = 0;
    if (fwrite(line, 1, (size_t)n, stderr) != (size_t)n && !log_errno) log_errno = errno ? errno : EIO;
}

int cnt_log_write_error(void) { return log_errno; }


static void write_linef(const char *head, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void write_linef(const char *head, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    write_line(head, fmt, ap);
    va_end(ap);
}

/* What a run that ends abruptly should still say (cnt_set_last_words). */
static char last_words[1024];

void cnt_set_last_words(const char *text) { snprintf(last_words, sizeof last_words, "%s", text ? text : ""); }

const char *cnt_last_words(void) { return last_words; }

void cnt_say_last_words(void) {
    if (!last_words[0]) return;
    write_linef("stopped: ", "%s", last_words);
    last_words[0] = '\0'; /* once */
    fflush(stderr);
}

void cnt_fatal_at(const char *file, int line, int code, const char *hint, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    char where[256];
    snprintf(where, sizeof where, "%s:%d: ", file, line);
    va_start(ap, fmt);
    write_line(where, fmt, ap);
    va_end(ap);
    if (hint) write_linef("HINT: ", "%s", hint);
    cnt_say_last_words();
    fflush(stderr);
    if (code == 0) code = 1;
    if (abort_hook) abort_hook(code);
    exit(code);
}

void cnt_fatal_errno_at(const char *file, int line, const char *stmt, const char *what) {
    int e = errno;
    cnt_fatal_at(file, line, 1, NULL, "%s failed (%s): %s", what, stmt, strerror(e));
}

void *cnt_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) cnt_fatal("out of memory allocating %zu bytes", bytes);
    return p;
}

void *cnt_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) cnt_fatal("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *cnt_realloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) cnt_fatal_at(__FILE__, __LINE__, 1, NULL, "out of memory (%zu bytes)", bytes);
    return q;
}

char *cnt_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = cnt_malloc(n);
    memcpy(p, s, n);
    return p;
}

void log_info(const char *fmt, ...) {
    if (log_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int bad = vfprintf(stdout, fmt, ap) < 0;
    va_end(ap);
    bad |= fputc('\n', stdout) == EOF;
    bad |= fflush(stdout) != 0;
    if (bad && !log_errno) log_errno = errno ? errno : EIO;
}

static void log_stderr(const char *level, const char *fmt, va_list ap) {
    fflush(stdout);
    char head[32];
    snprintf(head, sizeof head, "%s: ", level);
    write_line(head, fmt, ap);
    fflush(stderr);
}

void log_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_stderr("warning", fmt, ap);
    va_end(ap);
}

void log_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_stderr("error", fmt, ap);
    va_end(ap);
}
