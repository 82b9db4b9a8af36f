/*
 * train/metrics.c - JSON-lines metrics writer.
 */
#include "train/metrics.h"
#include "common/check.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int make_dirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return cnt_err_set("path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return cnt_err_set("cannot create directory '%s': %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return cnt_err_set("cannot create directory '%s': %s", buf, strerror(errno));
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) return cnt_err_set("'%s' is not a directory", buf);
    return CNT_OK;
}

int metrics_open(metrics *m, const char *dir) {
    m->f = NULL;
    if (make_dirs(dir) != CNT_OK) return CNT_ERR;
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    m->f = fopen(path, "w");
    if (!m->f) return cnt_err_set("cannot write '%s': %s", path, strerror(errno));
    return CNT_OK;
}

/* A loss as JSON: JSON has no inf or NaN, so a non-finite value is null. */
static const char *json_loss(char *buf, size_t len, double v) {
    if (isfinite(v)) snprintf(buf, len, "%.6g", v);
    else snprintf(buf, len, "null");
    return buf;
}

void metrics_step(metrics *m, int epoch, long step, double loss, double lr, double img_per_sec,
                  double data_wait_ms, double comm_ms, double comm_exposed_ms, double loss_scale,
                  long skipped_steps) {
    if (!m->f) return;
    char l[32];
    /* the scale with %.17g: a power of two prints exactly at any size */
    fprintf(m->f,
            "{\"kind\":\"step\",\"epoch\":%d,\"step\":%ld,\"loss\":%s,\"lr\":%.6g,\"img_per_sec\":%.1f,"
            "\"data_wait_ms\":%.3f,\"comm_ms\":%.3f,\"comm_exposed_ms\":%.3f,\"loss_scale\":%.17g,"
            "\"skipped_steps\":%ld}\n",
            epoch, step, json_loss(l, sizeof l, loss), lr, img_per_sec, data_wait_ms, comm_ms, comm_exposed_ms,
            loss_scale, skipped_steps);
    fflush(m->f);
}

void metrics_eval(metrics *m, int epoch, long step, double loss, double top1, double top5) {
    if (!m->f) return;
    char l[32];
    fprintf(m->f, "{\"kind\":\"eval\",\"epoch\":%d,\"step\":%ld,\"eval_loss\":%s,\"top1\":%.6f,\"top5\":%.6f}\n",
            epoch, step, json_loss(l, sizeof l, loss), top1, top5);
    fflush(m->f);
}

void metrics_epoch(metrics *m, int epoch, double seconds, double img_per_sec, double data_wait_ms,
                   double data_wait_frac, double comm_ms, double comm_exposed_ms, long skipped_train,
                   long skipped_eval) {
    if (!m->f) return;
    fprintf(m->f,
            "{\"kind\":\"epoch\",\"epoch\":%d,\"seconds\":%.3f,\"img_per_sec\":%.1f,\"data_wait_ms\":%.3f,"
            "\"data_wait_frac\":%.5f,\"comm_ms\":%.3f,\"comm_exposed_ms\":%.3f,\"skipped_images\":%ld,"
            "\"skipped_eval_images\":%ld}\n",
            epoch, seconds, img_per_sec, data_wait_ms, data_wait_frac, comm_ms, comm_exposed_ms, skipped_train,
            skipped_eval);
    fflush(m->f);
}

void metrics_close(metrics *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}
