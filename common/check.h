/*
 * common/check.h - errors, checks and logging shared by every module.
 *
 * Provides:
 *   - cnt_err_set()/cnt_err_msg(): library code (config, data, checkpoint, net
 *     building) reports a recoverable error by returning CNT_ERR after storing a
 *     message here; only train/ decides to print it and exit.
 *   - CHECK_ERRNO(): for libc calls whose failure is fatal (allocation, threads).
 *   - cnt_fatal(): print "[rank r] file:line: message", then end the job. In a
 *     multi-rank job the abort hook (set by dist/) calls MPI_Abort, so no rank is
 *     left waiting in a collective. Never exits 0.
 *   - log_info(): progress lines, printed by rank 0 only; log_warn()/log_error()
 *     print on every rank with a "[rank r]" prefix when the world is larger than 1.
 *
 * Library-specific checks (CUDA, cuDNN, cuBLAS, NCCL, MPI) live beside the code
 * that calls the library and all end in cnt_fatal_at(), so every failure reads
 * the same: statement, file:line, rank, the library's own error string, a hint.
 */
#ifndef CNT_CHECK_H
#define CNT_CHECK_H

#include <stddef.h>

enum { CNT_OK = 0, CNT_ERR = -1 };

/* Store a printf-style message describing the last error of this thread.
 * Always returns CNT_ERR so callers can write `return cnt_err_set(...)`. */
int cnt_err_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Adds context to the stored message, so a caller can say where an error
 * happened without copying the message first: cnt_err_prefix makes it
 * "<formatted>: <message>", cnt_err_suffix "<message><formatted>" (both
 * truncated to the buffer's 2047 characters). Both return CNT_ERR. */
int cnt_err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int cnt_err_suffix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The message stored by the last cnt_err_set() on this thread ("" if none). */
const char *cnt_err_msg(void);

/* Rank and world size used in log prefixes; set by dist/ once MPI is up. */
void cnt_log_set_rank(int rank, int world);
int cnt_log_rank(void);
/* Hook called by cnt_fatal before exiting (dist/ installs MPI_Abort). */
void cnt_set_abort_hook(void (*hook)(int code));

/* Print "[rank r] file:line: msg" (and "HINT: hint" when hint is non-NULL),
 * then run the abort hook and exit with `code` (never 0). Does not return. */
void cnt_fatal_at(const char *file, int line, int code, const char *hint, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 5, 6)));

#define cnt_fatal(...) cnt_fatal_at(__FILE__, __LINE__, 1, NULL, __VA_ARGS__)

/* Fatal check of a libc-style call returning non-zero / NULL on failure; prints
 * the statement and strerror(errno). */
#define CHECK_ERRNO(cond, what)                                                  \
    do {                                                                         \
        if (!(cond)) cnt_fatal_errno_at(__FILE__, __LINE__, #cond, (what));      \
    } while (0)
void cnt_fatal_errno_at(const char *file, int line, const char *stmt, const char *what)
    __attribute__((noreturn));

/* An assertion on program invariants (not on user input) that survives NDEBUG. */
#define CNT_ASSERT(cond)                                                         \
    do {                                                                         \
        if (!(cond)) cnt_fatal_at(__FILE__, __LINE__, 3, NULL, "assertion failed: %s", #cond); \
    } while (0)

/* Allocation that never returns NULL (fatal on failure). */
void *cnt_malloc(size_t bytes);
void *cnt_calloc(size_t count, size_t size);
void *cnt_realloc(void *p, size_t bytes);
char *cnt_strdup(const char *s);

void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The errno of the first log line that could not be written to standard
 * output or error (a full disk they were redirected to, a closed pipe), 0 when every one
 * was: the trainer checks it at its progress lines and at the end, so a run
 * whose log was cut short does not end with status 0. */
int cnt_log_write_error(void);
/* A line a process that ends abruptly should still print ("stopped: <text>"
 * on stderr, with the rank prefix): the trainer keeps here what a resume
 * would start from. cnt_fatal, dist_abort and the stall deadman say it, once,
 * before ending the process; an empty text (or NULL) says nothing. */
void cnt_set_last_words(const char *text);
/* The text set last ("" when none or already said). */
const char *cnt_last_words(void);
void cnt_say_last_words(void);

#endif
