/*
 * train/progress.c - progress lines, epoch summaries, metrics records and the
 * run's result (see train/progress.h).
 */
#include "train/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/cpus.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "train/metrics.h"

/* Sums over the steps of one window (since the last progress line) or one
 * epoch. Communication times are ms per step summed. */
typedef struct tally {
    double t0;               /* when it began */
    double wait;             /* seconds waited for batches */
    double busy;             /* seconds of the steps themselves, each from its batch request to its update's end */
    double comm, exposed;    /* allreduce ms, the part backward did not hide */
    long steps, images;
    long early, buckets;     /* buckets started during backward, of all */
    double ps_push, ps_pull; /* parameter servers: bytes out and in */
    double ps_wait;          /* seconds waited for their parameters */
    double stale_sum, stale_max; /* asynchronous: this rank's gradients' staleness */
} tally;

struct progress {
    progress_opts o;
    metrics m;
    double t_start;
    int epoch;               /* 0-based, the one running */
    long first_step;         /* steps done before this run */
    long step;               /* the last step taken */
    tally win, ep;
    double win_loss_steps;   /* steps whose loss is in loss_acc */
    float *loss_acc;         /* [1] device: the window's summed loss */
    long win_skipped0;       /* loss scaling's skipped steps when the window began */
    double ep_secs;          /* the epoch's training time */
    eval_result er;          /* the last evaluation */
    int evaluated;           /* er holds one of this run's */
    int wait_warned;         /* the epoch (1-based) whose data-wait warning was given */
    train_result r;
};

static void tally_start(tally *t, double t0) {
    memset(t, 0, sizeof *t);
    t->t0 = t0;
}

static void tally_add(tally *t, const step_result *r, int n, double wait, double step_s) {
    t->wait += wait;
    t->busy += step_s;
    t->comm += r->xs.rs.comm_ms;
    t->exposed += r->xs.rs.exposed_ms;
    t->early += r->xs.rs.early;
    t->buckets += r->xs.rs.buckets;
    t->ps_push += r->xs.ps.push_bytes;
    t->ps_pull += r->xs.ps.pull_bytes;
    t->ps_wait += r->xs.ps.wait_s;
    t->stale_sum += (double)r->xs.ps.staleness;
    if ((double)r->xs.ps.staleness > t->stale_max) t->stale_max = (double)r->xs.ps.staleness;
    t->steps++;
    t->images += n;
}

static void format_duration(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, len, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
}

progress *progress_create(const progress_opts *o) {
    progress *p = cnt_calloc(1, sizeof *p);
    p->o = *o;
    p->loss_acc = o->be->alloc(sizeof(float));
    return p;
}

int progress_open(progress *p, long until_step, int rollback) {
    /* Only rank 0 writes files: one run directory, no races between ranks. */
    if (dist_rank() != 0) return CNT_OK;
    if (metrics_open(&p->m, p->o.out_dir, until_step, rollback) != CNT_OK) return CNT_ERR;
    return p->o.tensorboard ? metrics_open_tensorboard(&p->m, p->o.out_dir, until_step) : CNT_OK;
}

int progress_config(progress *p, long step, const char *ini) {
    if (!p->m.tb.f) return CNT_OK;
    /* markdown: every line indented 4 spaces is a code block, shown as written */
    size_t n = strlen(ini), lines = 1;
    for (size_t i = 0; i < n; i++) lines += ini[i] == '\n';
    char *md = cnt_malloc(n + 4 * lines + 64), *o = md;
    o += sprintf(o, "config.ini of this run:\n\n");
    for (const char *line = ini; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        o += sprintf(o, "    %.*s\n", (int)len, line);
        line += len + (end != NULL);
    }
    int rc = tb_text(&p->m.tb, step, "config", md);
    free(md);
    return rc;
}

int progress_resumed(progress *p, long step, int epoch, long epoch_samples, int world, int batch_size) {
    return metrics_resume(&p->m, step, epoch, epoch_samples, world, batch_size);
}

void progress_start(progress *p, long first_step, long skipped_before, long total_steps) {
    p->o.total_steps = total_steps;
    p->first_step = p->step = first_step;
    p->win_skipped0 = skipped_before;
    p->t_start = time_now();
    p->win.t0 = p->t_start;
    metrics_start_clock(&p->m);
}

void progress_free(progress *p) {
    if (!p) return;
    metrics_close(&p->m); /* a failure was reported by progress_finish */
    p->o.be->free(p->loss_acc);
    free(p);
}

void progress_epoch_begin(progress *p, int epoch) {
    p->epoch = epoch;
    p->r.epochs = epoch + 1;
    tally_start(&p->ep, time_now());
}

void progress_step(progress *p, long step, const step_result *r, const float *loss, int n, double data_wait_s,
                   double step_s) {
    const backend *be = p->o.be;
    tally_add(&p->win, r, n, data_wait_s, step_s);
    tally_add(&p->ep, r, n, data_wait_s, step_s);
    metrics_add_images(&p->m, (double)p->o.world * n);
    /* The loss stays on the device until a line needs it. */
    if (r->loss_counts) {
        be->axpy(1, 1.0f, loss, p->loss_acc, p->win_loss_steps > 0);
        p->win_loss_steps++;
    }
    p->step = step;
    if (step == p->first_step + 1) {
        float l;
        be->download(&l, loss, sizeof l);
        p->r.first_loss = l;
        if (!isfinite(l)) log_warn("the first step's loss is %g", (double)l);
    }
}

/* This rank's loader starved the window's steps for more than data.wait_warn
 * of its time: said once an epoch, by the rank it happened on. */
static void warn_data_wait(progress *p, const tally *w, double secs, double wait_ms) {
    double share = secs > 0 ? w->wait / secs : 0;
    if (p->o.wait_warn <= 0 || share <= p->o.wait_warn || p->wait_warned == p->epoch + 1) return;
    p->wait_warned = p->epoch + 1;
    log_warn("data: the last %ld steps waited for batches %.0f%% of their time (%.2f ms a step, more than "
             "data.wait_warn = %g): the loader's %d thread%s (data.workers) cannot keep up; raise data.workers "
             "(this rank may run on %d CPUs), keep data.jpeg_scaling on, or use fewer ranks per node",
             w->steps, 100 * share, wait_ms, p->o.wait_warn, p->o.workers, p->o.workers == 1 ? "" : "s",
             cpus_process(NULL));
}

int progress_log(progress *p, long step, double lr, const loss_scaler *ls) {
    float acc = 0;
    if (p->win_loss_steps > 0) p->o.be->download(&acc, p->loss_acc, sizeof acc);
    /* Mean loss over every rank's counted steps (all ranks log at the same
     * steps; a step skipped for a forward overflow on one rank is left out
     * there only). */
    double lsum[2] = {acc, p->win_loss_steps};
    /* asynchronous workers do not wait for each other here: rank 0's loss */
    dist_phase("progress line");
    if (!p->o.xt.stale) dist_allreduce_sum_f64(lsum, 2);
    double now = time_now();
    /* none when no step of the window had a finite loss (loss scaling skips) */
    int have_loss = lsum[1] > 0;
    double loss = have_loss ? lsum[0] / lsum[1] : NAN;
    char loss_s[32];
    if (have_loss) snprintf(loss_s, sizeof loss_s, "%.4f", loss);
    else snprintf(loss_s, sizeof loss_s, "-");
    const tally *w = &p->win;
    double ips = p->o.world * w->images / (now - w->t0);
    double wait_ms = 1e3 * w->wait / w->steps;
    double eta = (now - p->t_start) / (step - p->first_step) * (p->o.total_steps - step);
    char eta_s[32];
    format_duration(eta, eta_s, sizeof eta_s);
    char comm[128] = "";
    metrics_ps mps = {w->ps_push / w->steps / (1 << 20), w->ps_pull / w->steps / (1 << 20), 1e3 * w->ps_wait / w->steps,
                      p->o.xt.stale, w->stale_sum / w->steps, w->stale_max};
    if (p->o.xt.serves) {
        int o = snprintf(comm, sizeof comm, "  ps wait %.2f ms (push %.2f MiB, pull %.2f MiB)", mps.wait_ms,
                         mps.push_mb, mps.pull_mb);
        if (mps.async)
            snprintf(comm + o, sizeof comm - (size_t)o, "  stale %.1f (max %.0f)", mps.stale_mean, mps.stale_max);
    }
    else if (p->o.xt.reduces)
        snprintf(comm, sizeof comm, "  comm %.2f ms (exposed %.2f ms)", w->comm / w->steps, w->exposed / w->steps);
    char scaling[96] = "";
    long skipped = ls->skipped - p->win_skipped0;
    if (loss_scaler_active(ls))
        snprintf(scaling, sizeof scaling, "  loss scale %g (%ld step%s skipped)", ls->scale, skipped,
                 skipped == 1 ? "" : "s");
    p->win_skipped0 = ls->skipped;
    log_info("epoch %d/%d  step %ld/%ld  loss %s  lr %.5f  %.1f img/s  data wait %.2f ms%s%s  eta %s", p->epoch + 1,
             p->o.epochs, step, p->o.total_steps, loss_s, lr, ips, wait_ms, comm, scaling, eta_s);
    warn_data_wait(p, w, now - w->t0, wait_ms);
    if (metrics_step(&p->m, p->epoch + 1, step, loss, lr, ips, 1e3 * w->busy / w->steps, wait_ms, w->comm / w->steps,
                     w->exposed / w->steps, ls->scale, ls->skipped, p->o.xt.serves ? &mps : NULL) != CNT_OK)
        return CNT_ERR;
    if (cnt_log_write_error())
        return cnt_err_set("cannot write the log (standard output or error): %s", strerror(cnt_log_write_error()));
    if (have_loss) p->r.last_loss = loss;
    if (have_loss && !isfinite(loss)) {
        log_error("training diverged: loss is %g at step %ld; lower optim.lr", loss, step);
        return PROGRESS_DIVERGED;
    }
    tally_start(&p->win, now);
    p->win_loss_steps = 0;
    return CNT_OK;
}

void progress_first_step(progress *p, long step, double step_s, int log_every) {
    if (step != p->first_step + 1) return;
    log_info("epoch %d/%d  step %ld/%ld: the first step of this run took %.2f s; a progress line every %d steps "
             "(train.log_every)",
             p->epoch + 1, p->o.epochs, step, p->o.total_steps, step_s, log_every);
}

long progress_epoch_steps(const progress *p) { return p->ep.steps; }

struct metrics *progress_metrics(progress *p) { return &p->m; }

void progress_epoch_trained(progress *p) { p->ep_secs = time_now() - p->ep.t0; }

int progress_epoch_end(progress *p, const eval_result *er, const char *no_eval, long skipped_train,
                       long skipped_eval) {
    int e = p->epoch + 1, E = p->o.epochs;
    const tally *t = &p->ep;
    double secs = p->ep_secs;
    if (er) {
        p->er = *er;
        p->evaluated = 1;
    }
    /* Unreadable images of every rank's shard (collective on all ranks). */
    double skipped[2] = {(double)skipped_train, (double)skipped_eval};
    dist_phase("epoch summary");
    dist_allreduce_sum_f64(skipped, 2);
    if (skipped[0] > 0 || skipped[1] > 0)
        log_warn("epoch %d/%d: %.0f unreadable training image%s replaced, %.0f unreadable test image%s left out "
                 "(each named once above)",
                 e, E, skipped[0], skipped[0] == 1 ? "" : "s", skipped[1], skipped[1] == 1 ? "" : "s");
    double ips = secs > 0 ? p->o.world * t->images / secs : 0;
    double wait_ms = t->steps ? 1e3 * t->wait / t->steps : 0;
    double comm_ms = t->steps ? t->comm / t->steps : 0, exposed_ms = t->steps ? t->exposed / t->steps : 0;
    char scores[128];
    if (er)
        snprintf(scores, sizeof scores, "test loss %.4f  top-1 %.2f%%  top-5 %.2f%%", er->loss, 100 * er->top1,
                 100 * er->top5);
    else
        snprintf(scores, sizeof scores, "not evaluated (%s)", no_eval);
    if (t->steps == 0) { /* resumed after a stop during this epoch's evaluation */
        log_info("epoch %d/%d (trained before the resume): %s", e, E, scores);
        return er ? metrics_eval(&p->m, e, p->step, er->loss, er->top1, er->top5) : CNT_OK;
    }
    log_info("epoch %d/%d done in %.1f s (%.1f img/s, data wait %.2f ms/step = %.1f%%): %s", e, E, secs, ips, wait_ms,
             secs > 0 ? 100.0 * t->wait / secs : 0, scores);
    int rc = metrics_epoch(&p->m, e, p->step, secs, ips, wait_ms, secs > 0 ? t->wait / secs : 0, comm_ms,
                           exposed_ms, (long)skipped[0], (long)skipped[1]);
    if (p->o.xt.serves)
        log_info("epoch %d/%d parameter servers: %.2f ms/step waiting for parameters after backward; %.2f MiB "
                 "pushed and %.2f MiB pulled per step by each worker",
                 e, E, t->steps ? 1e3 * t->ps_wait / t->steps : 0, t->steps ? t->ps_push / t->steps / (1 << 20) : 0,
                 t->steps ? t->ps_pull / t->steps / (1 << 20) : 0);
    else if (p->o.xt.reduces)
        log_info("epoch %d/%d communication: %.2f ms/step allreduce, %.2f ms/step not hidden by backward; "
                 "%ld of %ld buckets started during backward",
                 e, E, comm_ms, exposed_ms, t->early, t->buckets);
    if (er && er->nonfinite > 0 && dist_rank() == 0)
        log_warn("epoch %d/%d: %ld test sample%s had inf or NaN logits, counted as wrong%s", e, E, er->nonfinite,
                 er->nonfinite == 1 ? "" : "s",
                 p->o.fp16 ? " (fp16 activations beyond 65504 overflow; train.precision = bf16 has fp32's range)" : "");
    if (rc == CNT_OK && er) rc = metrics_eval(&p->m, e, p->step, er->loss, er->top1, er->top5);
    return rc;
}

int progress_finish(progress *p, int status, long steps, const loss_scaler *ls, const char *stopped,
                    const char *saved, train_result *res) {
    train_result *r = &p->r;
    /* the file's last bytes: a run whose record is incomplete did not succeed */
    if (metrics_close(&p->m) != CNT_OK && status == CNT_OK) {
        log_error("%s", cnt_err_msg());
        status = CNT_ERR;
    }
    r->seconds = time_now() - p->t_start;
    r->steps = steps;
    r->loss_scale = ls->scale;
    r->skipped_steps = ls->skipped;
    r->eval_loss = p->er.loss;
    r->top1 = p->er.top1;
    r->top5 = p->er.top5;
    r->img_per_sec =
        r->seconds > 0 ? (double)(steps - p->first_step) * p->o.batch * p->o.world / r->seconds : 0;
    if (status == CNT_OK && !isfinite(r->last_loss))
        status = cnt_err_set("training diverged (loss %g)", r->last_loss);
    char scores[96] = "";
    if (p->evaluated)
        snprintf(scores, sizeof scores, ", test top-1 %.2f%%, top-5 %.2f%%", 100 * r->top1, 100 * r->top5);
    if (status == CNT_OK && stopped)
        log_info("stopped (%s) after %ld steps in %.1f s%s; metrics in %s/metrics.jsonl", stopped, steps, r->seconds,
                 scores, p->o.out_dir);
    else if (status == CNT_OK)
        log_info("finished: %ld steps in %.1f s%s; metrics in %s/metrics.jsonl", steps, r->seconds, scores,
                 p->o.out_dir);
    else
        log_info("stopped after %ld steps (%.1f s); metrics so far in %s/metrics.jsonl; %s", steps, r->seconds,
                 p->o.out_dir, saved ? saved : "no checkpoint written");
    if (status == CNT_OK && cnt_log_write_error())
        status = cnt_err_set("cannot write the log (standard output or error): %s", strerror(cnt_log_write_error()));
    if (res) *res = *r;
    return status;
}
