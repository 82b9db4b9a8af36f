/*
 * train/run_ckpt.c - a run's checkpoints (see train/run.h and
 * train/checkpoint.h for the file): the resume before the first step (what
 * checkpoint.resume names, checked against this run, its state handed to
 * every rank through the stepper, its position in the data turned into this
 * run's steps, and the files of train.out_dir made to continue from it),
 * and the checkpoint rank 0 writes.
 */
#include "train/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/plans.h"

/* One line of config.ini's text: a "key = value" line (key and value
 * trimmed of spaces, not NUL-terminated) in `section`, or any other line
 * (key NULL). */
typedef struct ini_entry {
    char section[64]; /* the last "[section]" seen; "" before any */
    const char *key, *value;
    size_t key_len, value_len;
} ini_entry;

/* Reads the line at *p into *e (keeping e->section from the previous call
 * unless the line is a section header; start each text with it "") and
 * moves *p past it: 0, or -1 at the end of the text (nothing read). */
static int ini_next(const char **p, ini_entry *e) {
    const char *l = *p;
    if (!*l) return -1;
    const char *end = strchr(l, '\n');
    size_t n = end ? (size_t)(end - l) : strlen(l);
    *p = l + n + (end ? 1 : 0);
    e->key = NULL;
    if (l[0] == '[' && n > 2) {
        snprintf(e->section, sizeof e->section, "%.*s", (int)(n - 2), l + 1);
        return 0;
    }
    const char *eq = memchr(l, '=', n);
    if (l[0] == ';' || !eq) return 0;
    e->key = l;
    e->key_len = (size_t)(eq - l);
    while (e->key_len > 0 && l[e->key_len - 1] == ' ') e->key_len--;
    e->value = eq + 1;
    e->value_len = n - (size_t)(e->value - l);
    while (e->value_len > 0 && *e->value == ' ') e->value++, e->value_len--;
    return 0;
}

static int key_is(const ini_entry *e, const char *key) {
    return e->key_len == strlen(key) && memcmp(e->key, key, e->key_len) == 0;
}

/* The keys of two config texts (config.ini's form) that differ, as
 * "section.key old -> new" joined by "; " into out (checkpoint.resume, which
 * a resume always sets, left out); `model_out` gets those of
 * [model] other than init_from, which a resume may not change (the weights
 * belong to that model). */
static void config_changes(const char *before, const char *now, char *out, size_t len, char *model_out,
                           size_t mlen) {
    out[0] = model_out[0] = '\0';
    ini_entry e = {.section = ""};
    for (const char *p = now; ini_next(&p, &e) >= 0;) {
        if (!e.key) continue;
        if (strcmp(e.section, "checkpoint") == 0 && key_is(&e, "resume")) continue;
        ini_entry o = {.section = ""};
        const char *q = before;
        int found = 0;
        while (!found && ini_next(&q, &o) >= 0)
            found = o.key && strcmp(o.section, e.section) == 0 && o.key_len == e.key_len &&
                    memcmp(o.key, e.key, e.key_len) == 0;
        if (found && o.value_len == e.value_len && memcmp(o.value, e.value, e.value_len) == 0) continue;
        int model = strcmp(e.section, "model") == 0 && !key_is(&e, "init_from");
        char *dst = model ? model_out : out;
        size_t dlen = model ? mlen : len, used = strlen(dst);
        snprintf(dst + used, dlen - used, "%s%s.%.*s %.*s -> %.*s", used ? "; " : "", e.section, (int)e.key_len, e.key,
                 found ? (int)o.value_len : 5, found ? o.value : "unset", (int)e.value_len, e.value);
    }
}

/* Whether the checkpoint read into meta fits this run: its model, its input
 * shape and classes, the [model] keys of the config that wrote it. Messages
 * name the key. On rank 0. */
static int check_resume_fits(const run *r, const char *path, const ckpt_meta *meta) {
    const config *cfg = r->cfg;
    const dataset *d = &r->data.train;
    if (strcmp(meta->model_name, cfg->model_name) != 0)
        return cnt_err_set("checkpoint '%s' holds model %s, but model.name = %s: a resume may not change the model",
                           path, meta->model_name, cfg->model_name);
    if (meta->in_c != d->c || meta->in_h != d->h || meta->in_w != d->w)
        return cnt_err_set("checkpoint '%s' was trained on %dx%dx%d images, this run's data are %dx%dx%d "
                           "(data.image_size, data.channels, data.kind): a resume may not change the input shape",
                           path, meta->in_c, meta->in_h, meta->in_w, d->c, d->h, d->w);
    if (meta->classes != d->classes)
        return cnt_err_set("checkpoint '%s' has %d classes, this run's data %d (data.root, data.kind): a resume may "
                           "not change the classes",
                           path, meta->classes, d->classes);
    /* the inputs normalised otherwise than the run before normalised them
     * (another data.train_limit, a changed folder, other given values) */
    int nc = meta->norm_channels;
    if (!config_norm_same(r->data.mean, meta->mean, nc) || !config_norm_same(r->data.std, meta->std, nc)) {
        char was[2][96], now[2][96];
        for (int k = 0; k < 2; k++) {
            config_norm_text(k ? meta->std : meta->mean, nc, was[k], sizeof was[k]);
            config_norm_text(k ? r->data.std : r->data.mean, nc, now[k], sizeof now[k]);
        }
        log_warn("resume: this run normalises its inputs with data.mean=%s data.std=%s, the run that wrote %s with "
                 "data.mean=%s data.std=%s: give those two to go on as it did",
                 now[0], now[1], path, was[0], was[1]);
    }
    if (!meta->config[0]) return CNT_OK; /* written before checkpoints held their config */
    size_t len;
    char *now = run_config_text(cfg, 0, &len);
    char changes[4096], model[1024];
    config_changes(meta->config, now, changes, sizeof changes, model, sizeof model);
    free(now);
    if (model[0])
        return cnt_err_set("checkpoint '%s': a resume may not change the model's keys: %s", path, model);
    if (changes[0]) log_info("resume: keys changed since the checkpoint: %s", changes);
    return CNT_OK;
}

/* Rank 0 (which holds train.out_dir's lock): reads the checkpoint
 * checkpoint.resume names (if any) into ss and meta and checks that it fits
 * this run: *found 1 with its path in path. CNT_ERR with a message. */
static int read_checkpoint(run *r, step_state *ss, ckpt_powersgd *psgd, ckpt_meta *meta, char *path, size_t len,
                           int64_t *found) {
    if (!run_resume_path(r->cfg, path, len, 1)) return CNT_OK;
    int has_momentum = 0;
    if (ckpt_read(path, r->nt, ss->hs.params, ss->hs.buffers, ss->hs.momentum, &has_momentum, psgd, meta) !=
        CNT_OK) {
        /* the header, when the file holds one, can name the key that differs */
        char why[1024];
        snprintf(why, sizeof why, "%s", cnt_err_msg());
        if (ckpt_read_meta(path, meta) != CNT_OK || check_resume_fits(r, path, meta) == CNT_OK) cnt_err_set("%s", why);
        return CNT_ERR;
    }
    if (check_resume_fits(r, path, meta) != CNT_OK) {
        ckpt_powersgd_free(psgd);
        return CNT_ERR;
    }
    *found = 1;
    if (ss->hs.momentum && !has_momentum) log_warn("%s holds no momentum buffer; momentum restarts at zero", path);
    return CNT_OK;
}

/* Every rank: the checkpoint's state, read by rank 0 into ss, on every rank
 * (the stepper's part through the stepper). meta is the same everywhere. */
static void restore_state(run *r, step_state *ss, const ckpt_meta *meta) {
    ss->dropout_seed = meta->dropout_seed;
    ss->loss_scale = meta->loss_scale;
    ss->loss_scale_good = meta->loss_scale_good;
    ss->skipped = meta->skipped_steps;
    ss->skipped_in_a_row = meta->skipped_in_a_row;
    stepper_restore(&r->st, ss);
    r->step = meta->step;
}

/* Every rank: dist.compress = powersgd's state from the checkpoint (saved,
 * read on rank 0), when this run compresses at the same rank: Q and the
 * draws on every rank, the ranks' summed error on rank 0 and none on the
 * others, which makes the same sums (dist/powersgd.h says why). Otherwise
 * rank 0 says what restarts. */
static void restore_powersgd(run *r, const ckpt_powersgd *saved, const ckpt_meta *meta, const char *path) {
    const config *cfg = r->cfg;
    powersgd *p = exchange_powersgd(r->x); /* the same on every rank: the config and the world decide */
    int rank = 0;
    size_t n_q = 0, n_e = 0;
    if (p) powersgd_state_size(p, &rank, &n_q, &n_e);
    int64_t restore = 0;
    if (r->rank == 0) {
        restore = p && saved->rank == rank && saved->n_q == n_q && saved->n_e == n_e;
        if (saved->rank > 0 && !p)
            log_warn("resume: %s holds PowerSGD's error (%zu values its compression held back), which this run "
                     "drops: it does not compress with PowerSGD (%s)",
                     path, saved->n_e,
                     cfg->compress != REDUCER_COMPRESS_POWERSGD ? "dist.compress is not powersgd"
                                                                 : "one rank sums nothing");
        else if (saved->rank > 0 && !restore)
            log_warn("resume: %s holds PowerSGD's state at rank %d, this run compresses at dist.powersgd_rank = %d: "
                     "its error and factors start afresh",
                     path, saved->rank, rank);
        else if (p && !saved->rank && meta->step > cfg->powersgd_start)
            log_info("resume: %s holds no PowerSGD state (written without it, or by a cnntrain before checkpoint "
                     "version 6): its error and factors start afresh",
                     path);
    }
    if (!p) return;
    dist_phase("resume broadcast (PowerSGD)");
    dist_broadcast(&restore, sizeof restore, 0);
    if (!restore) return;
    float *q = r->rank == 0 ? saved->q : cnt_malloc(n_q * sizeof(float));
    uint64_t draws[2] = {saved->draws[0], saved->draws[1]};
    dist_broadcast(q, n_q * sizeof(float), 0);
    dist_broadcast(draws, sizeof draws, 0);
    powersgd_state_set(p, q, r->rank == 0 ? saved->e : NULL, draws);
    if (r->rank != 0) free(q);
    if (r->rank == 0)
        log_info("resume: PowerSGD's factors and the error it held back (%zu values, the ranks' sum, on rank 0) "
                 "restored",
                 n_e);
}

/* The checkpoint's position (samples of epoch meta->epoch + 1 done), in this
 * run's steps: the same at the same world size and batch, recomputed at
 * others; said in the log. */
static void resume_position(run *r, const ckpt_meta *meta, const char *path) {
    const config *cfg = r->cfg;
    long per_step = run_samples_per_step(r);
    r->start_epoch = meta->epoch;
    r->first_epoch_step = meta->epoch_samples / per_step;
    long again = meta->epoch_samples % per_step;
    if (r->first_epoch_step > r->steps_per_epoch) { /* past this run's last full step of the epoch */
        r->start_epoch++;
        r->first_epoch_step = 0;
        again = 0;
    } else if (r->first_epoch_step == r->steps_per_epoch) {
        /* every step of the epoch done (a stop during its evaluation wrote
         * such a checkpoint): the epoch's evaluation and end come first */
        r->eval_first = 1;
        again = 0;
    }
    char scaled[64] = "", at[160] = "";
    if (meta->loss_scale > 0)
        snprintf(scaled, sizeof scaled, ", loss scale %g (%ld steps skipped)", meta->loss_scale, meta->skipped_steps);
    if (meta->epoch_samples > 0)
        snprintf(at, sizeof at, " and %ld samples of epoch %d (step %ld of its %ld)", meta->epoch_samples,
                 meta->epoch + 1, r->first_epoch_step, r->steps_per_epoch);
    log_info("resumed from %s: %d epochs%s and %ld steps done%s%s", path, meta->epoch, at, meta->step, scaled,
             r->eval_first ? "; the epoch's evaluation comes first" : "");
    if (r->rank == 0) run_set_last_checkpoint(path, meta->step);
    if (meta->world > 0 && (meta->world != r->world || meta->batch != cfg->batch_size))
        log_info("resume: the checkpoint's run had %d rank%s x batch %d, this one %d x %d: the position in the "
                 "data and the schedule are recomputed from the samples done",
                 meta->world, meta->world == 1 ? "" : "s", meta->batch, r->world, cfg->batch_size);
    if (again > 0)
        log_warn("resume: %ld samples into epoch %d do not fill whole steps of %ld (%d ranks x batch %d): the "
                 "first %ld samples of this run's step %ld were trained before and are seen again",
                 meta->epoch_samples, meta->epoch + 1, per_step, r->world, cfg->batch_size, again,
                 r->first_epoch_step + 1);
}

/* How far this run goes: train.epochs, or train.max_steps steps in all. */
static void plan_total_steps(run *r, int found) {
    const config *cfg = r->cfg;
    r->total_steps = r->step + (long)(cfg->epochs - r->start_epoch) * r->steps_per_epoch - r->first_epoch_step;
    if (cfg->max_steps > 0 && cfg->max_steps < r->total_steps) r->total_steps = cfg->max_steps;
    if (r->total_steps < r->step) r->total_steps = r->step;
    if (found && r->step >= r->total_steps && !r->eval_first && r->rank == 0)
        log_warn("the checkpoint is already at step %ld: nothing left to train (train.epochs = %d, "
                 "train.max_steps = %ld)",
                 r->step, cfg->epochs, cfg->max_steps);
}

/* Rank 0's files: nothing beyond the starting point is overwritten or
 * resumed by mistake (checkpoints moved aside, metrics.jsonl cut), then the
 * run record, the resume record and config.ini. */
static int resume_files(run *r, int found, const ckpt_meta *meta) {
    const config *cfg = r->cfg;
    int moved = 0, rc = CNT_OK;
    if (r->rank == 0) {
        char dir[2 * CONFIG_STR + 8], to[3 * CONFIG_STR];
        run_path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
        if (ckpt_supersede(dir, found ? meta->epoch : 0, found ? meta->epoch_samples : 0, &moved, to, sizeof to) !=
            CNT_OK)
            rc = CNT_ERR;
        else if (moved > 0)
            log_warn("checkpoint.dir: %d checkpoint%s beyond this run's starting point (%s) moved to %s, so this run "
                     "neither overwrites %s nor a later checkpoint.resume = auto picks %s; resume %s by path",
                     moved, moved == 1 ? "" : "s", found ? "the checkpoint it resumes" : "a fresh start", to,
                     moved == 1 ? "it" : "them", moved == 1 ? "it" : "them", moved == 1 ? "it" : "one");
        ckpt_best b;
        int have = 0;
        if (rc == CNT_OK && cfg->ckpt_keep_best && ckpt_best_read(dir, &b, &have) != CNT_OK) rc = CNT_ERR;
        if (rc == CNT_OK && have) {
            r->best_top1 = b.top1;
            log_info("checkpoint: the best test top-1 so far, %.2f%% after epoch %d, is %s/best.cnt", 100 * b.top1,
                     b.epoch, dir);
        }
    }
    if (rc == CNT_OK) rc = progress_open(r->pg, found ? meta->step : -1, moved > 0);
    if (rc == CNT_OK) rc = run_write_record(r);
    if (rc == CNT_OK && found)
        rc = progress_resumed(r->pg, r->step, r->start_epoch + 1, r->first_epoch_step * run_samples_per_step(r),
                              r->world, cfg->batch_size);
    if (rc == CNT_OK && r->rank == 0) {
        size_t len;
        char *ini = run_config_text(cfg, 0, &len);
        rc = run_write_config_ini(cfg, ini, len);
        if (rc == CNT_OK) rc = progress_config(r->pg, r->step + 1, ini); /* nothing without train.tensorboard */
        free(ini);
    }
    if (rc == CNT_OK && r->rank == 0 && !found) cnt_set_last_words("no checkpoint written");
    return rc;
}

void run_keep_best(run *r, int epochs_done, const eval_result *er) {
    const config *cfg = r->cfg;
    char dir[2 * CONFIG_STR + 8];
    run_path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
    ckpt_best b = {.epoch = epochs_done, .step = r->step, .top1 = er->top1, .top5 = er->top5, .loss = er->loss};
    if (ckpt_best_keep(dir, &b) != CNT_OK) {
        log_warn("checkpoint.keep_best: %s; the best checkpoint is not kept this time", cnt_err_msg());
        return;
    }
    char before[48] = "the first kept";
    if (r->best_top1 >= 0) snprintf(before, sizeof before, "%.2f%% before", 100 * r->best_top1);
    log_info("checkpoint: best test top-1 so far (%.2f%% after epoch %d, %s): %s/best.cnt", 100 * er->top1,
             epochs_done, before, dir);
    r->best_top1 = er->top1;
}

/* A missing or bad checkpoint on rank 0 is an error (CNT_ERR on rank 0; the
 * caller ends the job, which releases the ranks waiting in the broadcast). */
int run_resume(run *r) {
    ckpt_meta *meta = cnt_calloc(1, sizeof *meta);
    step_state ss;
    stepper_state_alloc(&r->st, &ss);
    char path[2 * CONFIG_STR + 64];
    int64_t found = 0; /* rank 0 tells the others whether a checkpoint was loaded */
    ckpt_powersgd psgd = {0};
    int rc = r->rank == 0 ? read_checkpoint(r, &ss, &psgd, meta, path, sizeof path, &found) : CNT_OK;
    if (rc == CNT_OK) {
        dist_phase("resume broadcast");
        dist_broadcast(&found, sizeof found, 0);
        if (found) {
            dist_broadcast(meta, sizeof *meta, 0);
            restore_state(r, &ss, meta);
            restore_powersgd(r, &psgd, meta, path);
            resume_position(r, meta, path);
        }
    }
    ckpt_powersgd_free(&psgd);
    host_state_free(&ss.hs);
    if (rc == CNT_OK) {
        plan_total_steps(r, (int)found);
        rc = resume_files(r, (int)found, meta);
    }
    free(meta);
    return rc;
}

/* Every rank: dist.compress = powersgd's state once it compresses (after
 * powersgd_start steps), for rank 0's checkpoint: Q and the draws (the same
 * on every rank) and the ranks' errors summed (a collective, after the
 * step's sums: the communication thread is idle). 0, and *ps untouched,
 * where there is none. The caller frees ps->q and ps->e. */
static int save_powersgd(run *r, ckpt_powersgd *out) {
    powersgd *p = exchange_powersgd(r->x);
    if (!p || r->step <= r->cfg->powersgd_start) return 0;
    powersgd_state_size(p, &out->rank, &out->n_q, &out->n_e);
    out->q = cnt_malloc(out->n_q * sizeof(float));
    out->e = cnt_malloc(out->n_e * sizeof(float));
    powersgd_state_get(p, out->q, out->e, out->draws);
    dist_phase("checkpoint: PowerSGD's errors summed");
    dist_allreduce_sum(out->e, out->n_e, DIST_ALGO_MPI);
    return 1;
}

int run_save_checkpoint(run *r, int epochs_done, long epoch_samples) {
    const config *cfg = r->cfg;
    ckpt_powersgd psgd = {0};
    int have_psgd = save_powersgd(r, &psgd);
    if (r->rank != 0) {
        ckpt_powersgd_free(&psgd);
        return CNT_OK;
    }
    plans_share(r->be, cfg->out_dir, 0); /* rank 0 only: the plans chosen since, evaluation's too */
    step_state ss;
    stepper_state_alloc(&r->st, &ss);
    stepper_save(&r->st, &ss);
    ckpt_meta *meta = cnt_calloc(1, sizeof *meta);
    meta->epoch = epochs_done;
    meta->epoch_samples = epoch_samples;
    meta->world = r->world;
    meta->batch = cfg->batch_size;
    meta->step = r->step;
    meta->dropout_seed = ss.dropout_seed;
    meta->config_hash = run_config_hash(cfg);
    size_t len;
    char *text = run_config_text(cfg, 0, &len);
    snprintf(meta->config, sizeof meta->config, "%s", text);
    free(text);
    /* the normalisation the net was fed, given or estimated: what --eval scores with */
    meta->norm_channels = r->data.train.c < 3 ? r->data.train.c : 3;
    memcpy(meta->mean, r->data.mean, sizeof meta->mean);
    memcpy(meta->std, r->data.std, sizeof meta->std);
    snprintf(meta->model_name, sizeof meta->model_name, "%.*s", (int)sizeof meta->model_name - 1, cfg->model_name);
    /* What zoo_build needs besides the net's shape (ckpt_write takes that from nt). */
    meta->zero_init_residual = cfg->zero_init_residual;
    meta->dropout = cfg->dropout;
    meta->loss_scale = ss.loss_scale;
    meta->loss_scale_good = ss.loss_scale_good;
    meta->skipped_steps = ss.skipped;
    meta->skipped_in_a_row = ss.skipped_in_a_row;
    char dir[2 * CONFIG_STR + 8], path[3 * CONFIG_STR];
    run_path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
    dist_phase("checkpoint write"); /* rank 0 alone: named for CNT_TEST_STALL_IN and the stall lines */
    double t_ckpt = time_now();
    int status = ckpt_write(dir, r->nt, ss.hs.params, ss.hs.buffers, ss.hs.momentum, have_psgd ? &psgd : NULL, meta,
                            cfg->ckpt_keep, path, sizeof path);
    if (r->tl) timeline_record(r->tl, "checkpoint", "checkpoint", TIMELINE_TID_TRAIN, t_ckpt, time_now());
    if (status == CNT_OK) {
        log_info("checkpoint: %s (step %ld)", path, r->step);
        run_set_last_checkpoint(path, r->step);
    }
    host_state_free(&ss.hs);
    ckpt_powersgd_free(&psgd);
    free(meta);
    return status;
}
