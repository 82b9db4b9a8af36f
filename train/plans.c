/*
 * train/plans.c - the convolution plans kept and shared (see train/plans.h).
 */
#include "train/plans.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/check.h"
#include "common/fileio.h"
#include "dist/dist.h"

/* The largest file taken: a ResNet's plans are a few kB. */
#define PLANS_MAX ((uint64_t)16 << 20)

/* Rank 0's text (its length in *len) to every rank; NULL where it has none. */
static char *to_all(char *text, uint64_t *len) {
    dist_broadcast(len, sizeof *len, 0);
    if (*len == 0) {
        free(text);
        return NULL;
    }
    if (dist_rank() != 0) text = cnt_malloc((size_t)*len + 1);
    dist_broadcast(text, (size_t)*len, 0);
    text[*len] = '\0';
    return text;
}

/* Takes text's plans (from `whence`: "from PATH", "from rank 0"); says
 * what it took (rank 0) or why not (any rank). */
static void take(const backend *be, const char *text, const char *whence) {
    char why[512];
    int n = backend_plans_import(be, text, why, sizeof why);
    if (n < 0)
        log_warn("convolution plans %s not taken (%s): this rank chooses its own", whence, why);
    else if (dist_rank() == 0)
        log_info("convolution plans: %d shape%s taken %s", n, n == 1 ? "" : "s", whence);
}

/* out_dir's plans file into path (4096 bytes). */
static void plans_path(char *path, const char *out_dir) { snprintf(path, 4096, "%s/%s", out_dir, PLANS_FILE); }

void plans_restore(const backend *be, const char *out_dir) {
    char path[4096];
    plans_path(path, out_dir);
    char *text = NULL;
    uint64_t len = 0;
    struct stat st;
    if (dist_rank() == 0 && be->plans_import && stat(path, &st) == 0) {
        size_t n = 0;
        text = file_read_all(path, "convolution plans", PLANS_MAX, &n);
        if (!text) log_warn("%s; this run chooses its own", cnt_err_msg());
        len = text ? n : 0;
    }
    dist_phase("start-up: convolution plans");
    text = to_all(text, &len);
    char whence[4200];
    snprintf(whence, sizeof whence, "from %s", path);
    if (text && be->plans_import) take(be, text, whence);
    free(text);
}

/* Rank 0: text into path through path.tmp and a rename; a warning when it
 * cannot be written (a cache: the run goes on). */
static void write_file(const char *path, const char *dir, const char *text, size_t len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        log_warn("cannot write the convolution plans '%s': %s (the run goes on)", tmp, strerror(errno));
        return;
    }
    int failed = fwrite(text, 1, len, f) != len;
    if (failed) cnt_err_set("cannot write the convolution plans '%s': %s", tmp, strerror(errno));
    if (file_commit_atomic(f, failed, tmp, path, dir, "convolution plans") != CNT_OK)
        log_warn("%s (the run goes on)", cnt_err_msg());
}

void plans_share(const backend *be, const char *out_dir, int to_ranks) {
    char path[4096];
    plans_path(path, out_dir);
    char *text = NULL;
    uint64_t len = 0;
    if (dist_rank() == 0 && be->plans_export) {
        size_t need = backend_plans_export(be, NULL, 0);
        text = cnt_malloc(need + 1);
        len = backend_plans_export(be, text, need + 1);
        if (len > need) len = need; /* never past the buffer */
        if (len) write_file(path, out_dir, text, (size_t)len);
    }
    if (!to_ranks) {
        free(text);
        return;
    }
    dist_phase("convolution plans from rank 0");
    text = to_all(text, &len);
    if (text && dist_rank() != 0 && be->plans_import) take(be, text, "from rank 0");
    free(text);
}
