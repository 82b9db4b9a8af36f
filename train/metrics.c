/*
 * train/metrics.c - JSON-lines metrics writer (see train/metrics.h), and
 * the cut of its file on a resume, which reads each record with the one
 * JSON parser (common/json.h).
 */
#include "train/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/json.h"
#include "common/timer.h"

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

/* Line `no` of path, a record: its "step" (-1: none), "time" and "images"
 * (-1: none), read with the one JSON parser. CNT_ERR naming the file, the
 * line and, for text that is not JSON, the column. */
static int read_record(const char *path, long no, const char *line, size_t len, long *step, double *t, double *images) {
    json_t *rec;
    if (json_parse_at(line, len, path, no, &rec) != CNT_OK) return CNT_ERR;
    const json_t *s = json_object_get(rec, "step"), *tv = json_object_get(rec, "time");
    const json_t *iv = json_object_get(rec, "images"), *odd = tv && !json_is_number(tv) ? tv : iv;
    int rc = CNT_OK;
    if (!json_is_object(rec))
        rc = cnt_err_set("%s:%ld: not a metrics record (a JSON object), found %s", path, no, json_kind(rec));
    else if (s && !json_is_integer(s))
        rc = cnt_err_set("%s:%ld: \"step\": expected a whole number, found %s", path, no, json_kind(s));
    else if (odd && !json_is_number(odd))
        rc = cnt_err_set("%s:%ld: \"%s\": expected a number, found %s", path, no, odd == tv ? "time" : "images",
                         json_kind(odd));
    *step = s ? (long)json_integer_value(s) : -1;
    *t = tv ? json_number_value(tv) : -1;
    *images = iv ? json_number_value(iv) : -1;
    json_decref(rec);
    return rc;
}

/* file_claim_name's claim for open_side: creates name, its stream in *ctx. */
static int claim_by_create(const char *name, void *ctx) {
    int fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0) return -1;
    if (!(*(FILE **)ctx = fdopen(fd, "w"))) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return 0;
}

/* Opens a new side file dir/metrics.<kind>-<stamp>.jsonl into *f, its name
 * into side: "-2", "-3", ... added when the name is taken (two cuts in one
 * second keep two files). CNT_ERR naming the file. */
static int open_side(const char *dir, const char *kind, FILE **f, char *side, size_t len) {
    char stamp[32], stem[4200];
    file_time_stamp(time(NULL), stamp, sizeof stamp);
    int w = snprintf(stem, sizeof stem, "%s/metrics.%s-%s", dir, kind, stamp);
    int e = w < 0 || (size_t)w >= sizeof stem ? ENAMETOOLONG : 0;
    if (!e && file_claim_name(stem, ".jsonl", side, len, claim_by_create, f) == 0) return CNT_OK;
    if (!e) e = errno;
    if (e == ENAMETOOLONG) return cnt_err_set("path too long: %s/metrics.%s-%s.jsonl", dir, kind, stamp);
    if (e == EEXIST) return cnt_err_set("cannot write '%s': a thousand earlier files of that name this second", side);
    return cnt_err_set("cannot write '%s': %s", side, strerror(e));
}

/* Copies the records of in (path) whose step is at most until_step to out
 * (tmp), carrying m's clock and image count on from them, and the others,
 * counted in *cut, to the side file (*beyond, opened in dir on the first,
 * its name in side). Returns CNT_OK, or CNT_ERR with the message set. */
static int copy_records(metrics *m, FILE *in, const char *path, FILE *out, const char *tmp, FILE **beyond,
                        const char *dir, const char *kind, char *side, size_t side_len, long until_step, long *cut) {
    int failed = CNT_OK;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long no = 0, step;
    double t, im;
    while (failed == CNT_OK && (n = getline(&line, &cap, in)) > 0) {
        no++;
        if (line[n - 1] != '\n') break; /* a record cut short by a kill is no record */
        if (read_record(path, no, line, (size_t)n, &step, &t, &im) != CNT_OK) {
            failed = cnt_err_suffix(" (a resume cuts metrics.jsonl after step %ld: mend that line or move the file "
                                    "aside)", until_step);
        } else if (step <= until_step) {
            if (fputs(line, out) < 0) failed = cnt_err_set("cannot write '%s': %s", tmp, strerror(errno));
            /* the clock and the image count go on from the last kept record's */
            if (t > m->t_base) m->t_base = t;
            if (im > m->images) m->images = im;
        } else {
            ++*cut;
            if (!*beyond) failed = open_side(dir, kind, beyond, side, side_len);
            if (failed == CNT_OK && fputs(line, *beyond) < 0)
                failed = cnt_err_set("cannot write '%s': %s", side, strerror(errno));
        }
    }
    free(line);
    if (failed == CNT_OK && ferror(in)) failed = cnt_err_set("cannot read '%s': %s", path, strerror(errno));
    return failed;
}

/* Keeps the records of path up to until_step (see metrics_open). */
static int cut_records(metrics *m, const char *path, const char *dir, long until_step, int rollback) {
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT) return CNT_OK;
    FILE *in = file_open_regular(path, "metrics file", NULL);
    if (!in) return CNT_ERR;
    char tmp[4200], side[4200] = "";
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w"), *beyond = NULL;
    if (!out) {
        fclose(in);
        return cnt_err_set("cannot write '%s': %s", tmp, strerror(errno));
    }
    long cut = 0;
    int failed = copy_records(m, in, path, out, tmp, &beyond, dir, rollback ? "superseded" : "redone", side,
                              sizeof side, until_step, &cut);
    fclose(in);
    if (beyond && fclose(beyond) != 0 && failed == CNT_OK)
        failed = cnt_err_set("cannot write '%s': %s", side, strerror(errno));
    if (failed != CNT_OK && beyond) unlink(side); /* the file stays whole: nothing has moved */
    if (file_commit_atomic(out, failed, tmp, path, dir, "metrics record") != CNT_OK) return CNT_ERR;
    if (cut > 0 && rollback)
        log_info("metrics.jsonl: %ld record%s after step %ld, of the run this one supersedes, moved to %s", cut,
                 cut == 1 ? "" : "s", until_step, side);
    else if (cut > 0)
        log_info("metrics.jsonl: %ld record%s after step %ld (the interrupted run's, past its last checkpoint: "
                 "steps this run redoes) moved to %s",
                 cut, cut == 1 ? "" : "s", until_step, side);
    return CNT_OK;
}

int metrics_open(metrics *m, const char *dir, long until_step, int rollback) {
    m->f = NULL;
    m->tb.f = NULL;
    m->t_base = m->t0 = m->images = 0;
    if (make_dirs(dir) != CNT_OK) return CNT_ERR;
    if (snprintf(m->path, sizeof m->path, "%s/metrics.jsonl", dir) >= (int)sizeof m->path)
        return cnt_err_set("path too long: %s/metrics.jsonl", dir);
    struct stat st;
    if (until_step < 0 && stat(m->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        /* a fresh run: the earlier run's record moves aside, named by its
         * last change (-2, -3, ... when runs end within one second) */
        char old[sizeof m->path + 64];
        int kept = file_keep_aside(m->path, "run's metrics record", old, sizeof old);
        if (kept < 0) return CNT_ERR;
        if (kept) log_info("metrics.jsonl: the earlier run's records moved to %s (this run starts from scratch)", old);
    } else if (until_step >= 0 && cut_records(m, m->path, dir, until_step, rollback) != CNT_OK) {
        return CNT_ERR;
    }
    m->f = file_append_regular(m->path, "metrics file");
    if (!m->f) return CNT_ERR;
    return CNT_OK;
}

int metrics_open_tensorboard(metrics *m, const char *dir, long until_step) {
    if (tb_open(&m->tb, dir, until_step < 0 ? 1 : until_step + 1, until_step < 0) != CNT_OK) return CNT_ERR;
    log_info("TensorBoard: events in %s (watch with: tensorboard --logdir %s)", m->tb.path, dir);
    return CNT_OK;
}

static int finish_record(metrics *m, int printed);

void metrics_start_clock(metrics *m) { m->t0 = time_now(); }

void metrics_add_images(metrics *m, double n) { m->images += n; }

/* The record's "time": seconds of training, resumes included. */
static double run_time(const metrics *m) { return m->t_base + (m->t0 > 0 ? time_now() - m->t0 : 0); }

/* s as a JSON string's contents (the few names this file writes: no escapes needed but these). */
static const char *json_str(char *buf, size_t len, const char *s) {
    size_t o = 0;
    for (; s && *s && o + 3 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') buf[o++] = '\\';
        buf[o++] = c < 0x20 ? '?' : (char)c;
    }
    buf[o] = '\0';
    return buf;
}

int metrics_run(metrics *m, const metrics_run_info *in) {
    if (!m->f) return CNT_OK;
    char model[128], mode[32], device[64], prec[32], host[256] = "", hostj[300], started[32];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int acc = in->accumulate > 1 ? in->accumulate : 1;
    errno = 0;
    int printed = fprintf(m->f,
                          "{\"kind\":\"run\",\"model\":\"%s\",\"params\":%ld,\"mode\":\"%s\",\"ranks\":%d,\"workers\":%d,"
                          "\"servers\":%d,\"batch\":%d,\"accumulate\":%d,\"global_batch\":%ld,\"epochs\":%d,"
                          "\"steps_per_epoch\":%ld,\"device\":\"%s\",\"precision\":\"%s\",\"threads\":%d,\"config_hash\":\"%016llx\","
                          "\"started\":\"%s\",\"host\":\"%s\"}\n",
                          json_str(model, sizeof model, in->model), in->params, json_str(mode, sizeof mode, in->mode),
                          in->ranks, in->workers, in->servers, in->batch, acc, (long)in->batch * in->workers * acc,
                          in->epochs, in->steps_per_epoch, json_str(device, sizeof device, in->device),
                          json_str(prec, sizeof prec, in->precision), in->threads, in->config_hash, started,
                          json_str(hostj, sizeof hostj, host));
    return finish_record(m, printed);
}

/* The end of every record: flushed, and a failure of the writes or of the
 * flush reported with the file's name. */
static int finish_record(metrics *m, int printed) { return file_flush_record(m->f, printed >= 0, m->path); }

/* A loss as JSON: JSON has no inf or NaN, so a non-finite value is null. */
static const char *json_loss(char *buf, size_t len, double v) {
    if (isfinite(v)) snprintf(buf, len, "%.6g", v);
    else snprintf(buf, len, "null");
    return buf;
}

int metrics_step(metrics *m, int epoch, long step, double loss, double lr, double img_per_sec, double step_ms,
                 double data_wait_ms, double comm_ms, double comm_exposed_ms, double loss_scale,
                 long skipped_steps, const metrics_ps *ps) {
    if (!m->f) return CNT_OK;
    char l[32], extra[160] = "";
    errno = 0;
    if (ps) {
        int o = snprintf(extra, sizeof extra, ",\"ps_push_mb\":%.3f,\"ps_pull_mb\":%.3f,\"ps_wait_ms\":%.3f",
                         ps->push_mb, ps->pull_mb, ps->wait_ms);
        if (ps->async)
            snprintf(extra + o, sizeof extra - (size_t)o, ",\"ps_stale_mean\":%.3f,\"ps_stale_max\":%.0f",
                     ps->stale_mean, ps->stale_max);
    }
    /* the scale with %.17g: a power of two prints exactly at any size */
    int printed = fprintf(m->f,
                          "{\"kind\":\"step\",\"epoch\":%d,\"step\":%ld,\"time\":%.3f,\"images\":%.0f,\"loss\":%s,\"lr\":%.6g,\"img_per_sec\":%.1f,"
                          "\"step_ms\":%.3f,\"data_wait_ms\":%.3f,\"comm_ms\":%.3f,\"comm_exposed_ms\":%.3f,"
                          "\"loss_scale\":%.17g,\"skipped_steps\":%ld%s}\n",
                          epoch, step, run_time(m), m->images, json_loss(l, sizeof l, loss), lr, img_per_sec, step_ms, data_wait_ms, comm_ms,
                          comm_exposed_ms, loss_scale, skipped_steps, extra);
    int rc = finish_record(m, printed);
    tb_scalar v[14] = {{"train/loss", loss},
                       {"train/lr", lr},
                       {"train/img_per_sec", img_per_sec},
                       {"train/step_ms", step_ms},
                       {"train/data_wait_ms", data_wait_ms},
                       {"train/comm_ms", comm_ms},
                       {"train/comm_exposed_ms", comm_exposed_ms},
                       {"train/loss_scale", loss_scale},
                       {"train/skipped_steps", (double)skipped_steps}};
    int n = 9;
    if (ps) {
        v[n++] = (tb_scalar){"ps/push_mb", ps->push_mb};
        v[n++] = (tb_scalar){"ps/pull_mb", ps->pull_mb};
        v[n++] = (tb_scalar){"ps/wait_ms", ps->wait_ms};
        if (ps->async) {
            v[n++] = (tb_scalar){"ps/stale_mean", ps->stale_mean};
            v[n++] = (tb_scalar){"ps/stale_max", ps->stale_max};
        }
    }
    return rc == CNT_OK ? tb_write(&m->tb, step, v, n, NULL) : rc;
}

int metrics_eval(metrics *m, int epoch, long step, double loss, double top1, double top5) {
    if (!m->f) return CNT_OK;
    char l[32];
    errno = 0;
    int printed =
        fprintf(m->f, "{\"kind\":\"eval\",\"epoch\":%d,\"step\":%ld,\"time\":%.3f,\"images\":%.0f,\"eval_loss\":%s,\"top1\":%.6f,\"top5\":%.6f}\n",
                epoch, step, run_time(m), m->images, json_loss(l, sizeof l, loss), top1, top5);
    int rc = finish_record(m, printed);
    tb_scalar v[] = {{"eval/loss", loss}, {"eval/top1", top1}, {"eval/top5", top5}};
    return rc == CNT_OK ? tb_write(&m->tb, step, v, 3, NULL) : rc;
}

int metrics_staleness(metrics *m, int epoch, long step, double mean, double max, double applied, const double *hist,
                      int n) {
    if (!m->f) return CNT_OK;
    char h[512];
    size_t o = 0;
    h[0] = '\0';
    for (int i = 0; i < n && o + 24 < sizeof h; i++) o += (size_t)snprintf(h + o, sizeof h - o, "%s%.0f", i ? "," : "", hist[i]);
    errno = 0;
    int printed = fprintf(m->f,
                          "{\"kind\":\"staleness\",\"epoch\":%d,\"step\":%ld,\"time\":%.3f,\"mean\":%.4f,\"max\":%.0f,"
                          "\"applied\":%.0f,\"hist\":[%s]}\n",
                          epoch, step, run_time(m), mean, max, applied, h);
    int rc = finish_record(m, printed);
    /* the histogram: bucket i holds staleness i (up to limit i, above i - 1),
     * the last i or more (its squares counted as i's) */
    double limit[64], sq = 0, lo = -1;
    int nb = n < 64 ? n : 64;
    for (int i = 0; i < nb; i++) {
        limit[i] = i == nb - 1 && max > i ? max : i;
        sq += (double)i * i * hist[i];
        if (lo < 0 && hist[i] > 0) lo = i;
    }
    tb_histogram hg = {"ps/staleness", lo < 0 ? 0 : lo, max, applied, mean * applied, sq, limit, hist, nb};
    tb_scalar v[] = {{"ps/staleness_mean", mean}, {"ps/staleness_max", max}};
    return rc == CNT_OK ? tb_write(&m->tb, step, v, 2, nb > 0 ? &hg : NULL) : rc;
}

int metrics_epoch(metrics *m, int epoch, long step, double seconds, double img_per_sec, double data_wait_ms,
                  double data_wait_frac, double comm_ms, double comm_exposed_ms, long skipped_train,
                  long skipped_eval) {
    if (!m->f) return CNT_OK;
    errno = 0;
    int printed = fprintf(m->f,
                          "{\"kind\":\"epoch\",\"epoch\":%d,\"step\":%ld,\"time\":%.3f,\"images\":%.0f,\"seconds\":%.3f,\"img_per_sec\":%.1f,"
                          "\"data_wait_ms\":%.3f,\"data_wait_frac\":%.5f,\"comm_ms\":%.3f,\"comm_exposed_ms\":%.3f,"
                          "\"skipped_images\":%ld,\"skipped_eval_images\":%ld}\n",
                          epoch, step, run_time(m), m->images, seconds, img_per_sec, data_wait_ms, data_wait_frac, comm_ms, comm_exposed_ms,
                          skipped_train, skipped_eval);
    int rc = finish_record(m, printed);
    tb_scalar v[] = {{"epoch/seconds", seconds},
                     {"epoch/img_per_sec", img_per_sec},
                     {"epoch/data_wait_ms", data_wait_ms},
                     {"epoch/data_wait_frac", data_wait_frac},
                     {"epoch/comm_ms", comm_ms},
                     {"epoch/comm_exposed_ms", comm_exposed_ms},
                     {"epoch/skipped_images", (double)skipped_train},
                     {"epoch/skipped_eval_images", (double)skipped_eval}};
    return rc == CNT_OK ? tb_write(&m->tb, step, v, 8, NULL) : rc;
}

int metrics_resume(metrics *m, long step, int epoch, long epoch_samples, int world, int batch) {
    if (!m->f) return CNT_OK;
    errno = 0;
    int printed = fprintf(m->f,
                          "{\"kind\":\"resume\",\"step\":%ld,\"epoch\":%d,\"epoch_samples\":%ld,\"world\":%d,"
                          "\"batch\":%d}\n",
                          step, epoch, epoch_samples, world, batch);
    return finish_record(m, printed);
}

int metrics_close(metrics *m) {
    int rc = tb_close(&m->tb);
    if (!m->f) return rc;
    if (fclose(m->f) != 0 && rc == CNT_OK) rc = cnt_err_set("cannot write '%s': %s", m->path, strerror(errno));
    m->f = NULL;
    return rc;
}
