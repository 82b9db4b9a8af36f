/*
 * train/trainer.c - a training run, start to end.
 *
 *   trainer_run:  run_setup   the ranks' agreement on the config, device,
 *                             gradient transport, data, model, rank 0's
 *                             initial weights to every rank, loaders, the
 *                             step, the reducer
 *                 run_resume  checkpoint.resume: the state and the position
 *                             in the data; checkpoints beyond that point
 *                             moved aside; metrics.jsonl and config.ini
 *                 run_epoch   the steps of an epoch (train/step.h), a
 *                             progress line every train.log_every steps, a
 *                             checkpoint every checkpoint.every_steps, the
 *                             stop signals (train/stop.h) agreed on
 *                 end_epoch   the ranks' parameters compared, evaluation
 *                             (skipped with emulated compute, train/emulate.h),
 *                             the epoch's summary, a checkpoint
 *                 run_finish  the last line, the timeline
 *                 run_free    everything, on every path
 *
 * Counters, lines and metrics records live in train/progress.c; the step in
 * train/step.c; evaluation in train/eval.c.
 */
#include "train/trainer.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/cpus.h"
#include "common/hash.h"
#include "common/timer.h"
#include "data/loader.h"
#include "dist/dist.h"
#include "dist/nccl.h"
#include "dist/ps.h"
#include "dist/reducer.h"
#include "dist/timeline.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/checkpoint.h"
#include "train/emulate.h"
#include "train/eval.h"
#include "train/input.h"
#include "train/memory.h"
#include "train/profile.h"
#include "train/progress.h"
#include "train/state.h"
#include "train/step.h"
#include "train/stop.h"
#include "common/fileio.h"
#include "train/metrics.h"
#include "train/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The pieces of one run. run_free frees whichever exist. */
typedef struct run {
    const config *cfg;
    int rank, world;
    const backend *be;
    dist_nccl *nccl;         /* NULL: gradients go through MPI (or nowhere) */
    input_data data;
    net *nt;
    loader *train_ld, *test_ld;
    progress *pg;            /* exists from the moment metrics.jsonl is open */
    reducer *rd;             /* NULL for one rank without NCCL, and with parameter servers */
    ps *ps;                  /* dist.mode = ps: the parameter-server link (worker or server); else NULL */
    int ps_server;           /* this rank is a parameter server */
    size_t *shard_end;       /* dist.mode = ps: [dist.ps_servers] the servers' shards of the flat buffers */
    timeline *tl;            /* NULL unless dist.timeline */
    stepper st;
    schedule sched;
    host_state peers;        /* world > 1: parameters for the ranks' comparison, buffers for rank 0's */
    long steps_per_epoch, total_steps;
    long step;               /* optimizer steps taken, a resumed run's included */
    int start_epoch;
    long first_epoch_step;   /* where start_epoch begins: a resume inside an epoch */
    int epoch;               /* the current epoch, 0-based */
    long epoch_step;         /* steps of the current epoch done */
    int save_at_epoch_end;   /* end_epoch writes a checkpoint (decided at the epoch's last step) */
    int stopped;             /* the stop signal the ranks agreed on, 0: none */
    int lock_fd;             /* rank 0: train.out_dir/.lock, held (flock) while the run lives; -1: none */
    int diverged;
    emulation emu;           /* train.emulate_compute: the profile's times; n_nodes 0: real compute */
    double next_wait_s;      /* the loader wait of the batch prefetched for the next step */
    float *seed_momentum;    /* dist.mode = ps, rank 0: a checkpoint's momentum, host, for ps_seed; NULL: zeros */
} run;

/* Whether the optimizer has momentum to save and restore: on the device, or
 * with parameter servers on the servers (the workers keep none). */
static int with_momentum(const run *r) { return r->cfg->momentum > 0.0f; }

/* train.layout for h x w input images; auto: see backend_layout_choose. */
static int layout_for(const config *cfg, const backend *be, int h, int w) {
    return backend_layout_choose(cfg->layout, be, cfg->precision, h, w);
}

/* The start-up line saying which layout the run takes, and why where it is
 * not the plain one. */
static void say_layout(const config *cfg, const backend *be, int h, int w) {
    int cpu = strcmp(be->name, "cpu") == 0;
    int layout = layout_for(cfg, be, h, w);
    if (layout == BACKEND_LAYOUT_NHWC)
        log_info("layout: nhwc (train.layout = %s)%s", config_name(cfg, &cfg->layout),
                 cpu ? "; the CPU backend computes NCHW and transposes around each op (slower than nchw)"
                     : ": activations channels last, as tensor-core convolutions read them");
    else if (layout == BACKEND_LAYOUT_BLOCKED)
        log_info("layout: %s (train.layout = %s): activations in oneDNN's channel blocks from the first "
                 "convolution to the classifier", backend_layout_name(layout, be), config_name(cfg, &cfg->layout));
    else if (cfg->layout == BACKEND_LAYOUT_AUTO && !cpu && cfg->precision == BACKEND_MATH_TF32)
        log_info("layout: nchw (train.layout = auto): tf32 on %dx%d images, under %d pixels a side, where NCHW "
                 "measured faster than NHWC", h, w, BACKEND_NHWC_TF32_MIN_PX);
}

static net *build_model(const backend *be, const config *cfg, int c, int h, int w, int classes, int max_batch) {
    zoo_options zo = config_zoo_options(cfg);
    net *nt = zoo_create(be, cfg->model_name, &zo, c, h, w, classes, layout_for(cfg, be, h, w), max_batch);
    if (!nt)
        cnt_err_prefix("model '%s' on %dx%dx%d input with %d classes, batches up to %d (train.batch_size, "
                       "train.eval_batch_size)",
                       cfg->model_name, c, h, w, classes, max_batch);
    return nt;
}

/* The effective config as written to config.ini, plus the model's parameter
 * count: what every rank must agree on. Caller frees. */
static char *config_text(const config *cfg, size_t n_params, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    CHECK_ERRNO(f != NULL, "open_memstream");
    config_write_ini(cfg, f);
    if (n_params) fprintf(f, "; model parameters %zu\n", n_params);
    fclose(f);
    return text;
}

/* After each epoch in a multi-rank job: every rank must hold bit-identical
 * parameters (they start from rank 0's and apply the same summed gradients).
 * A difference means a broken reduction or a nondeterministic update, and
 * training on would silently diverge: report the ranks and stop. */
static int check_params_identical(const net *nt, float *host) {
    int world = dist_world();
    nt->be->download(host, nt->params, nt->n_params * sizeof(float));
    uint64_t h = hash_bytes(host, nt->n_params * sizeof(float));
    uint64_t *all = cnt_malloc((size_t)world * sizeof *all);
    dist_phase("post-epoch parameter check");
    dist_allgather_u64(h, all);
    int bad = -1;
    for (int r = 1; r < world && bad < 0; r++)
        if (all[r] != all[0]) bad = r;
    free(all);
    if (bad >= 0) return cnt_err_set("parameters on rank %d differ from rank 0's: the ranks have diverged", bad);
    return CNT_OK;
}

/* Hash of the effective configuration, stored in checkpoints. */
static uint64_t config_hash(const config *cfg) {
    size_t len;
    char *text = config_text(cfg, 0, &len);
    uint64_t h = hash_bytes(text, len);
    free(text);
    return h;
}

/* Ranks must run the same configuration and model: compare a hash of the
 * effective config (as written to config.ini) and the parameter count
 * (n_params; 0 before the model exists). On a
 * mismatch, each differing rank names the first line that differs from rank
 * 0's config, and the job ends (a silent divergence or a hang is worse). */
static int check_same_config(const config *cfg, size_t n_params) {
    int world = dist_world();
    if (world == 1) return CNT_OK;
    dist_phase("start-up: configuration check");
    size_t len;
    char *text = config_text(cfg, n_params, &len);
    uint64_t h = hash_bytes(text, len);
    uint64_t *all = cnt_malloc((size_t)world * sizeof *all);
    dist_allgather_u64(h, all);
    int same = 1;
    for (int r = 1; r < world; r++) same &= all[r] == all[0];
    free(all);
    if (same) {
        free(text);
        return CNT_OK;
    }
    /* Rank 0's text travels to every rank so each can say what differs. */
    uint64_t n0 = len;
    dist_broadcast(&n0, sizeof n0, 0);
    char *text0 = cnt_malloc(n0 + 1);
    if (dist_rank() == 0) memcpy(text0, text, n0);
    dist_broadcast(text0, n0, 0);
    text0[n0] = '\0';
    if (dist_rank() != 0) {
        const char *a = text0, *b = text;
        char section[64] = ""; /* "dist." while inside [dist]: the key is named whole */
        while (*a && *b) {
            const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
            size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
            if (la != lb || memcmp(a, b, la) != 0) {
                const char *sec = b[0] == ';' ? "" : section;
                log_error("this rank's configuration differs from rank 0's: '%s%.*s' here, '%s%.*s' on rank 0", sec,
                          (int)lb, b, sec, (int)la, a);
                break;
            }
            if (b[0] == '[' && lb > 2 && b[lb - 1] == ']') snprintf(section, sizeof section, "%.*s.", (int)(lb - 2), b + 1);
            a += la + (ea ? 1 : 0);
            b += lb + (eb ? 1 : 0);
        }
    }
    free(text0);
    free(text);
    dist_barrier(); /* let every rank print before rank 0 reports and the job ends */
    return cnt_err_set("ranks run different configurations or models (see the lines from the differing ranks)");
}

/* A path from the config (checkpoint.dir, dist.timeline), resolved inside
 * train.out_dir when relative. */
static void path_in_out_dir(const config *cfg, const char *path, char *out, size_t len) {
    if (path[0] == '/') snprintf(out, len, "%s", path);
    else snprintf(out, len, "%s/%s", cfg->out_dir, path);
}

/* The checkpoint checkpoint.resume asks for: 1 with its path in path (auto:
 * the newest in checkpoint.dir), 0 for none. `say`: tell when auto finds no
 * checkpoint. */
static int resume_path(const config *cfg, char *path, size_t len, int say) {
    switch (config_resume(cfg)) {
    case RESUME_NONE: return 0;
    case RESUME_FILE: snprintf(path, len, "%s", cfg->ckpt_resume); return 1;
    case RESUME_AUTO: break;
    }
    char dir[2 * CONFIG_STR + 8];
    path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
    if (ckpt_find_latest(dir, path, len) == CNT_OK) return 1;
    if (say) log_info("checkpoint.resume = auto: no checkpoint in %s, starting from scratch", dir);
    return 0;
}

/* Global samples per step: all ranks' batches. */
static long samples_per_step(const run *r) { return (long)r->cfg->batch_size * r->world; }

/* Whether checkpoints are written at all. */
static int ckpt_on(const config *cfg) { return cfg->ckpt_every > 0 || cfg->ckpt_every_steps > 0; }

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
    if (!meta->config[0]) return CNT_OK; /* written before checkpoints held their config */
    size_t len;
    char *now = config_text(cfg, 0, &len);
    char changes[4096], model[1024];
    config_changes(meta->config, now, changes, sizeof changes, model, sizeof model);
    free(now);
    if (model[0])
        return cnt_err_set("checkpoint '%s': a resume may not change the model's keys: %s", path, model);
    if (changes[0]) log_info("resume: keys changed since the checkpoint: %s", changes);
    return CNT_OK;
}

/* config.ini in train.out_dir: this run's effective config. An earlier
 * run's that differs is kept as config.YYYYMMDD-HHMMSS.ini (its time), so
 * every run's config survives a resume. Rank 0. */
static int write_config_ini(const config *cfg) {
    char path[CONFIG_STR + 32], tmp[CONFIG_STR + 40];
    snprintf(path, sizeof path, "%s/config.ini", cfg->out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    size_t len;
    char *text = config_text(cfg, 0, &len);
    struct stat lst;
    FILE *old = NULL;
    if (lstat(path, &lst) == 0 && !(old = file_open_regular(path, "config record", NULL))) {
        free(text);
        return CNT_ERR; /* not a regular file: named */
    }
    if (old) {
        char *prev = cnt_malloc(len + 2);
        size_t n = fread(prev, 1, len + 1, old);
        struct stat st;
        int same = n == len && memcmp(prev, text, len) == 0;
        if (!same && fstat(fileno(old), &st) == 0) {
            char stamp[32], kept[CONFIG_STR + 48];
            file_time_stamp(st.st_mtime, stamp, sizeof stamp);
            snprintf(kept, sizeof kept, "%s/config.%s.ini", cfg->out_dir, stamp);
            if (rename(path, kept) != 0) log_warn("cannot keep the earlier run's %s as %s: %s", path, kept,
                                                  strerror(errno));
        }
        free(prev);
        fclose(old);
        if (same) {
            free(text);
            return CNT_OK;
        }
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(text);
        return cnt_err_set("cannot write '%s': %s", tmp, strerror(errno));
    }
    int failed = fwrite(text, 1, len, f) != len ? cnt_err_set("cannot write '%s': %s", tmp, strerror(errno)) : 0;
    free(text);
    return file_commit_atomic(f, failed, tmp, path, cfg->out_dir, "config");
}

/* Rank 0: what a resume would start from, kept as the process's last words
 * (said by an abort, or by run_finish's last line). */
static void set_last_checkpoint(const char *path, long step) {
    char text[3 * CONFIG_STR + 64];
    snprintf(text, sizeof text, "last checkpoint %s (step %ld)", path, step);
    cnt_set_last_words(text);
}

/* Rank 0 takes train.out_dir/.lock (flock, exclusive, released when the
 * process ends however it ends): two runs writing one directory would cut
 * each other's metrics and overwrite each other's checkpoints. The file
 * holds the owner's pid and host, for the message the second run gives. */
static int lock_out_dir(run *r) {
    const config *cfg = r->cfg;
    char path[CONFIG_STR + 16];
    snprintf(path, sizeof path, "%s/.lock", cfg->out_dir);
    if (make_dirs(cfg->out_dir) != CNT_OK) return cnt_err_prefix("train.out_dir");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return cnt_err_set("cannot create the lock file '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char owner[128] = "";
        ssize_t n = pread(fd, owner, sizeof owner - 1, 0);
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        close(fd);
        if (err == EWOULDBLOCK)
            return cnt_err_set("train.out_dir = %s is in use by another run (%s; lock %s): give this run another "
                               "train.out_dir, or stop that one first",
                               cfg->out_dir, owner[0] ? owner : "owner unknown", path);
        return cnt_err_set("cannot lock '%s': %s", path, strerror(err));
    }
    char me[160], host[64] = "?";
    gethostname(host, sizeof host - 1);
    int len = snprintf(me, sizeof me, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)len, 0) != len)
        log_warn("cannot record this run in the lock file '%s': %s", path, strerror(errno));
    r->lock_fd = fd;
    return CNT_OK;
}

/* metrics.jsonl's "run" record (rank 0; train/metrics.h). */
static int write_run_record(run *r) {
    const config *cfg = r->cfg;
    metrics_run_info in = {
        .model = cfg->model_name,
        .mode = !r->ps ? "allreduce" : cfg->ps_sync ? "ps-sync" : "ps-async",
        .device = r->be->name,
        .precision = config_name(cfg, &cfg->precision),
        .params = (long)r->nt->n_params,
        .ranks = dist_job_world(),
        .workers = r->world,
        .servers = r->ps ? cfg->ps_servers : 0,
        .batch = cfg->batch_size,
        .epochs = cfg->epochs,
        .threads = strcmp(r->be->name, "cpu") == 0 ? omp_get_max_threads() : 0,
        .steps_per_epoch = r->steps_per_epoch,
        .config_hash = config_hash(cfg),
    };
    return metrics_run(progress_metrics(r->pg), &in);
}

/* checkpoint.resume: rank 0 finds and validates the checkpoint, then every
 * rank receives its state (parameters, buffers, momentum, position). The
 * position in the data is the checkpoint's (epochs and samples done),
 * turned into this run's steps: the same at the same world size and batch,
 * recomputed at others. Rank 0 then moves aside the checkpoints beyond the
 * starting point (ckpt_supersede), opens metrics.jsonl (cut to the
 * checkpoint's step) and writes config.ini. A missing or bad checkpoint on
 * rank 0 is an error (CNT_ERR on rank 0; the caller ends the job, which
 * releases the ranks waiting in the broadcast). */
static int run_resume(run *r) {
    const config *cfg = r->cfg;
    stepper *st = &r->st;
    int64_t found = 0; /* rank 0 tells the others whether a checkpoint was loaded */
    ckpt_meta *meta = cnt_calloc(1, sizeof *meta);
    host_state hs;
    /* with parameter servers only rank 0 needs the momentum: ps_seed hands it to them */
    host_state_alloc(&hs, r->nt, with_momentum(r) && (!r->ps || r->rank == 0));
    char path[2 * CONFIG_STR + 64];
    int rc = CNT_OK;
    if (r->rank == 0 && lock_out_dir(r) != CNT_OK) {
        rc = CNT_ERR;
    } else if (r->rank == 0 && resume_path(cfg, path, sizeof path, 1)) {
        int has_momentum = 0;
        if (ckpt_read(path, r->nt, hs.params, hs.buffers, hs.momentum, &has_momentum, meta) != CNT_OK) {
            /* the header, when the file holds one, can name the key that differs */
            char why[1024];
            snprintf(why, sizeof why, "%s", cnt_err_msg());
            if (ckpt_read_meta(path, meta) != CNT_OK || check_resume_fits(r, path, meta) == CNT_OK)
                cnt_err_set("%s", why);
            rc = CNT_ERR;
        } else if (check_resume_fits(r, path, meta) != CNT_OK) {
            rc = CNT_ERR;
        } else {
            found = 1;
            if (hs.momentum && !has_momentum) log_warn("%s holds no momentum buffer; momentum restarts at zero", path);
        }
    }
    if (rc != CNT_OK) {
        host_state_free(&hs);
        free(meta);
        return CNT_ERR;
    }
    dist_phase("resume broadcast");
    dist_broadcast(&found, sizeof found, 0);
    if (found) {
        dist_broadcast(meta, sizeof *meta, 0);
        if (r->ps) {
            r->seed_momentum = hs.momentum; /* rank 0's, or NULL; not broadcast */
            hs.momentum = NULL;
        }
        host_state_broadcast(&hs, r->nt);
        host_state_upload(&hs, r->nt, st->opt.momentum_buf);
        r->nt->dropout_seed = meta->dropout_seed;
        loss_scaler_restore(&st->ls, meta->loss_scale, meta->loss_scale_good, meta->skipped_steps,
                            meta->skipped_in_a_row);
        r->step = meta->step;
        /* the position: samples of epoch meta->epoch + 1 done, in this run's steps */
        long per_step = samples_per_step(r);
        r->start_epoch = meta->epoch;
        r->first_epoch_step = meta->epoch_samples / per_step;
        long again = meta->epoch_samples % per_step;
        if (r->first_epoch_step >= r->steps_per_epoch) { /* past this run's last full step of the epoch */
            r->start_epoch++;
            r->first_epoch_step = 0;
            again = 0;
        }
        char scaled[64] = "", at[160] = "";
        if (meta->loss_scale > 0)
            snprintf(scaled, sizeof scaled, ", loss scale %g (%ld steps skipped)", meta->loss_scale,
                     meta->skipped_steps);
        if (meta->epoch_samples > 0)
            snprintf(at, sizeof at, " and %ld samples of epoch %d (step %ld of its %ld)", meta->epoch_samples,
                     meta->epoch + 1, r->first_epoch_step, r->steps_per_epoch);
        log_info("resumed from %s: %d epochs%s and %ld steps done%s", path, meta->epoch, at, meta->step, scaled);
        if (r->rank == 0) set_last_checkpoint(path, meta->step);
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
    host_state_free(&hs);

    /* How far this run goes: train.epochs, or train.max_steps steps in all. */
    r->total_steps = r->step + (long)(cfg->epochs - r->start_epoch) * r->steps_per_epoch - r->first_epoch_step;
    if (cfg->max_steps > 0 && cfg->max_steps < r->total_steps) r->total_steps = cfg->max_steps;
    if (r->total_steps < r->step) r->total_steps = r->step;
    if (found && r->step >= r->total_steps && r->rank == 0)
        log_warn("the checkpoint is already at step %ld: nothing left to train (train.epochs = %d, "
                 "train.max_steps = %ld)",
                 r->step, cfg->epochs, cfg->max_steps);

    /* Rank 0's files: nothing beyond the starting point is overwritten or resumed by mistake. */
    int moved = 0;
    if (r->rank == 0) {
        char dir[2 * CONFIG_STR + 8], to[3 * CONFIG_STR];
        path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
        if (ckpt_supersede(dir, found ? meta->epoch : 0, found ? meta->epoch_samples : 0, &moved, to, sizeof to) !=
            CNT_OK)
            rc = CNT_ERR;
        else if (moved > 0)
            log_warn("checkpoint.dir: %d checkpoint%s beyond this run's starting point (%s) moved to %s, so this run "
                     "neither overwrites %s nor a later checkpoint.resume = auto picks %s; resume %s by path",
                     moved, moved == 1 ? "" : "s", found ? "the checkpoint it resumes" : "a fresh start", to,
                     moved == 1 ? "it" : "them", moved == 1 ? "it" : "them", moved == 1 ? "it" : "one");
    }
    if (rc == CNT_OK) rc = progress_open(r->pg, found ? meta->step : -1, moved > 0);
    if (rc == CNT_OK) rc = write_run_record(r);
    if (rc == CNT_OK && found)
        rc = progress_resumed(r->pg, r->step, r->start_epoch + 1, r->first_epoch_step * samples_per_step(r),
                              r->world, cfg->batch_size);
    if (rc == CNT_OK && r->rank == 0) rc = write_config_ini(cfg);
    if (rc == CNT_OK && r->rank == 0 && !found) cnt_set_last_words("no checkpoint written");
    free(meta);
    return rc;
}

/* model.init_from on rank 0: loads the safetensors file into nt, unless
 * checkpoint.resume will load a checkpoint (which then wins). */
static int load_init_from(const config *cfg, net *nt) {
    char path[2 * CONFIG_STR + 64];
    if (resume_path(cfg, path, sizeof path, 0)) {
        log_info("model.init_from = %s not loaded: checkpoint.resume loads %s, and the checkpoint wins",
                 cfg->init_from, path);
        return CNT_OK;
    }
    return weights_init_from(nt, cfg->init_from);
}

/* Rank 0 writes the state after `epochs_done` complete epochs and
 * `epoch_samples` samples (all ranks') of the next. */
static int save_checkpoint(run *r, int epochs_done, long epoch_samples) {
    const config *cfg = r->cfg;
    const stepper *st = &r->st;
    host_state hs;
    host_state_alloc(&hs, r->nt, with_momentum(r));
    host_state_download(&hs, r->nt, st->opt.momentum_buf);
    /* with parameter servers the momentum lives on the servers; the
     * parameters rank 0 pulled after the last step are theirs when they are
     * synchronous, and may be older than theirs when not */
    int async = r->ps && !cfg->ps_sync;
    if (r->ps && (hs.momentum || async)) ps_worker_fetch_state(r->ps, async ? hs.params : NULL, hs.momentum);
    ckpt_meta *meta = cnt_calloc(1, sizeof *meta);
    meta->epoch = epochs_done;
    meta->epoch_samples = epoch_samples;
    meta->world = r->world;
    meta->batch = cfg->batch_size;
    meta->step = r->step;
    meta->dropout_seed = r->nt->dropout_seed;
    meta->config_hash = config_hash(cfg);
    size_t len;
    char *text = config_text(cfg, 0, &len);
    snprintf(meta->config, sizeof meta->config, "%s", text);
    free(text);
    snprintf(meta->model_name, sizeof meta->model_name, "%.*s", (int)sizeof meta->model_name - 1, cfg->model_name);
    /* What zoo_build needs besides the net's shape (ckpt_write takes that from nt). */
    meta->zero_init_residual = cfg->zero_init_residual;
    meta->dropout = cfg->dropout;
    if (loss_scaler_active(&st->ls)) {
        meta->loss_scale = st->ls.scale;
        meta->loss_scale_good = st->ls.good;
        meta->skipped_steps = st->ls.skipped;
        meta->skipped_in_a_row = st->ls.in_a_row;
    }
    char dir[2 * CONFIG_STR + 8], path[3 * CONFIG_STR];
    path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
    double t_ckpt = time_now();
    int status = ckpt_write(dir, r->nt, hs.params, hs.buffers, hs.momentum, meta, cfg->ckpt_keep, path, sizeof path);
    if (r->tl) timeline_record(r->tl, "checkpoint", "checkpoint", TIMELINE_TID_TRAIN, t_ckpt, time_now());
    if (status == CNT_OK) {
        log_info("checkpoint: %s (step %ld)", path, r->step);
        set_last_checkpoint(path, r->step);
    }
    host_state_free(&hs);
    free(meta);
    return status;
}

/* The net's node hook while dist.timeline is on: one "fwd <node>" or
 * "bwd <node>" event per layer, inside the step's "forward" and "backward". */
static void timeline_node_hook(void *ctx, const node *nd, int backward, double t0, double t1) {
    char name[NET_NAME_LEN + 8];
    snprintf(name, sizeof name, "%s %s", backward ? "bwd" : "fwd", nd->name);
    timeline_record(ctx, name, backward ? "backward" : "forward", TIMELINE_TID_TRAIN, t0, t1);
}

/* train.device: the backend of this rank (GPU local_rank % GPUs of its node),
 * said in one line (rank 0 prints every rank's), with the reason when auto
 * falls back to the CPU. */
static const backend *choose_device(const config *cfg) {
    const backend *be = backend_get_for_rank(cfg->device, dist_local_rank());
    if (!be) {
        cnt_err_prefix("train.device = %s", config_name(cfg, &cfg->device));
        cnt_err_suffix(" (see ./trainer --devices)");
        return NULL;
    }
    if (backend_layout_check(cfg->layout, be) != CNT_OK) {
        cnt_err_prefix("train.layout = %s", config_name(cfg, &cfg->layout));
        return NULL;
    }
    be->set_threads(cfg->threads); /* before describe, which says how many */
    char what[768], desc[512];
    be->describe(desc, sizeof desc);
    if (strcmp(be->name, "cpu") == 0 && cfg->device == BACKEND_DEVICE_AUTO) {
        /* why no GPU: asked only here, so device=cpu never touches the CUDA runtime */
        char devs[4096];
        backend_describe_devices(devs, sizeof devs);
        char *nl = strchr(devs, '\n');
        if (nl) *nl = '\0';
        snprintf(what, sizeof what, "%.300s (train.device = auto; %.300s)", desc, devs);
    } else {
        snprintf(what, sizeof what, "%.300s (train.device = %.100s)", desc, config_name(cfg, &cfg->device));
    }
    if (dist_world() == 1) {
        log_info("device: %s", what);
    } else {
        /* one line per rank, printed by rank 0 (a collective: every rank is here) */
        void *all;
        size_t *counts;
        dist_phase("start-up: device report");
        dist_gather_bytes(what, sizeof what, &all, &counts);
        for (int r = 0; all && r < dist_world(); r++)
            log_info("device: rank %d: %s", r, (char *)all + (size_t)r * sizeof what);
        free(all);
        free(counts);
    }
    int cpu = strcmp(be->name, "cpu") == 0;
    int math = cfg->precision;
    be->set_math(math);
    if (math == BACKEND_MATH_TF32) {
        if (cpu) log_info("precision: tf32 requested; the CPU backend computes fp32");
        else log_info("precision: tf32 (cuDNN and cuBLAS tensor cores, fp32 accumulation and storage)");
    } else if (math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16) {
        log_info("precision: %s mixed: convolutions and GEMMs take %s operands and round their results to it, "
                 "accumulating in fp32%s; fp32 master weights, batch norm, loss and optimizer",
                 config_name(cfg, &cfg->precision), config_name(cfg, &cfg->precision),
                 cpu ? " (emulated by the CPU backend: the same rounding, slower than fp32)" : " on tensor cores");
    }
    return be;
}

/* dist.backend: whether gradients go through NCCL (GPU to GPU) or MPI. The
 * decision is the same on every rank: it rests on sums over all ranks.
 * *nccl_out is the communicator when NCCL is used (also for 1 rank when
 * asked for by name, so one GPU can try the path), else NULL. */
static int choose_comm(const config *cfg, const backend *be, dist_nccl **nccl_out) {
    *nccl_out = NULL;
    int named = cfg->dist_backend == DIST_BACKEND_NCCL, is_auto = cfg->dist_backend == DIST_BACKEND_AUTO;
    if (!named && !(is_auto && dist_world() > 1)) return CNT_OK;
    /* Ranks on the CPU rule NCCL out. Whether ranks share a GPU is judged by
     * dist_nccl_create from the GPUs' PCI bus ids: a rank's count of visible
     * GPUs says nothing when CUDA_VISIBLE_DEVICES gives each rank its own. */
    double cpu_ranks = strcmp(be->name, "cpu") == 0;
    dist_phase("start-up: gradient transport choice");
    if (dist_world() > 1) dist_allreduce_sum_f64(&cpu_ranks, 1);
    if (is_auto && (cpu_ranks > 0 || !CNT_HAVE_NCCL || cfg->compress != REDUCER_COMPRESS_NONE)) return CNT_OK;
    if (named && cpu_ranks > 0)
        return cnt_err_set("dist.backend = nccl: %g rank%s run%s on the CPU (train.device = %s); NCCL needs a GPU "
                           "per rank (see ./trainer --devices)",
                           cpu_ranks, cpu_ranks == 1 ? "" : "s", cpu_ranks == 1 ? "s" : "",
                           config_name(cfg, &cfg->device));
#if CNT_HAVE_NCCL
    dist_nccl *nc = dist_nccl_create();
    if (!nc) {
        if (named) return CNT_ERR; /* the message names dist.backend=nccl and what to do */
        if (dist_rank() == 0)
            log_warn("dist.backend = auto: NCCL did not start (%s); using MPI through host memory", cnt_err_msg());
        return CNT_OK;
    }
    *nccl_out = nc;
    return CNT_OK;
#else
    return cnt_err_set("dist.backend = nccl: this binary was built without NCCL (rebuild where `make` finds it, "
                       "or use dist.backend = mpi)");
#endif
}

/* The run's opening lines: the model, the data, the schedule. */
static void log_plan(const run *r) {
    const config *cfg = r->cfg;
    const dataset *d = &r->data.train;
    if (loss_scaler_active(&r->st.ls)) {
        char what[256];
        loss_scaler_describe(&r->st.ls, what, sizeof what);
        log_info("loss scaling: %s", what);
    }
    log_info("cnntrain: model %s (%zu parameters, %.3f GFLOPs/image forward) on %s", cfg->model_name,
             r->nt->n_params, net_flops_per_image(r->nt) / 1e9, r->be->name);
    log_info("data: %s %s, %d train / %d test images of %dx%dx%d, %d classes", config_name(cfg, &cfg->data_kind),
             cfg->data_root, d->n, r->data.test.n, d->c, d->h, d->w, d->classes);
    log_info("train: %d epochs x %ld steps (batch %d), %ld steps in all; %s schedule, warm-up %g epochs; out %s",
             cfg->epochs, r->steps_per_epoch, cfg->batch_size, r->total_steps, config_name(cfg, &cfg->schedule),
             (double)cfg->warmup_epochs, cfg->out_dir);
    if (r->emu.n_nodes)
        log_info("emulated compute (train.emulate_compute = %s, a profile taken on %s in %s): each step sleeps "
                 "forward %.3f ms, backward %.3f ms layer by layer (gradients handed to the reducer after each "
                 "node) and update %.3f ms instead of computing; parameters are not updated; evaluation "
                 "skipped",
                 cfg->emulate_compute, r->emu.device, r->emu.precision, r->emu.forward_total_ms,
                 r->emu.backward_total_ms, r->emu.update_ms);
}

/* Across nodes, how many TCP connections Open MPI keeps per pair of ranks,
 * and who chose it (dist_init in dist/dist.h says why cnntrain asks for 2). */
static void log_tcp_links(void) {
    int chosen = 0, links = dist_tcp_links(&chosen);
    if (dist_job_world() <= dist_local_world() || links < 0) return;
    log_info("dist: Open MPI's TCP transport uses %d connection%s per pair of ranks (btl_tcp_links, set by %s)",
             links, links == 1 ? "" : "s",
             chosen ? "cnntrain: one connection moves one direction at a time; OMPI_MCA_btl_tcp_links=N overrides"
                    : "the environment");
}

/* How gradients travel: one line (after the TCP connections' across nodes). */
static void log_dist(const run *r) {
    log_tcp_links();
    const config *cfg = r->cfg;
    int world = r->world;
    double base_lr = r->sched.base_lr;
    if (r->ps) {
        char mode[96];
        if (cfg->ps_sync) snprintf(mode, sizeof mode, "synchronously");
        else if (cfg->ps_max_staleness < 0) snprintf(mode, sizeof mode, "asynchronously (no staleness bound)");
        else snprintf(mode, sizeof mode, "asynchronously (at most %d steps ahead of the slowest worker)",
                      cfg->ps_max_staleness);
        for (int k = 0; k < ps_servers(r->ps); k++) {
            size_t b = k ? r->shard_end[k - 1] : 0;
            log_info("parameter server %d of %d (rank %d): parameters [%zu, %zu) of the flat buffer, %.2f MiB",
                     k + 1, ps_servers(r->ps), ps_server_rank(r->ps, k), b, r->shard_end[k],
                     (double)(r->shard_end[k] - b) * sizeof(float) / (1 << 20));
        }
        log_info("dist: %d worker%s and %d parameter server%s (ranks %d-%d), global batch %d; gradients pushed to "
                 "the servers shard by shard during backward, parameters pulled after it, %s, over MPI "
                 "through host memory; stall limits warn %g s, abort %g s; lr %g per worker x %d = %g "
                 "(optim.lr_scaling = %s)",
                 world, world == 1 ? "" : "s", ps_servers(r->ps), ps_servers(r->ps) == 1 ? "" : "s", world,
                 world + ps_servers(r->ps) - 1, cfg->batch_size * world, mode, (double)cfg->stall_warn_s,
                 (double)cfg->stall_abort_s, (double)cfg->lr, cfg->lr_scaling == LR_SCALING_LINEAR ? world : 1,
                 base_lr, config_name(cfg, &cfg->lr_scaling));
        return;
    }
    if (world == 1 && !r->nccl) {
        log_info("dist: 1 rank, no gradient communication; lr %g (optim.lr_scaling = %s)", base_lr,
                 config_name(cfg, &cfg->lr_scaling));
        return;
    }
    const char *comm_name = r->nccl ? "NCCL (on the GPUs, its own stream; times reported one step late)"
                            : cfg->dist_backend == DIST_BACKEND_RING ? "ring"
                                                                     : "MPI_Allreduce";
    int buckets = r->rd ? reducer_bucket_count(r->rd) : 0;
    log_info("dist: %d rank%s (%d on this node), global batch %d; gradients allreduced with %s in %d bucket%s "
             "(%g MiB, first %g MiB) %s, %s on the wire; stall watchdog %s (warn %g s, abort %g s); "
             "lr %g per worker x %d = %g (optim.lr_scaling = %s)",
             world, world > 1 ? "s" : "", dist_local_world(), cfg->batch_size * world, comm_name, buckets,
             buckets == 1 ? "" : "s", (double)cfg->bucket_mb, (double)cfg->first_bucket_mb,
             cfg->overlap ? "during backward" : "after backward",
             cfg->compress == REDUCER_COMPRESS_FP16 ? "fp16" : "fp32",
             cfg->stall_warn_s > 0 || cfg->stall_abort_s > 0 ? "on" : "off", (double)cfg->stall_warn_s,
             (double)cfg->stall_abort_s, (double)cfg->lr, cfg->lr_scaling == LR_SCALING_LINEAR ? world : 1,
             base_lr, config_name(cfg, &cfg->lr_scaling));
}

/* train.emulate_compute: the profile, read and checked against the net
 * make_model will build (built here without its allocations, as the memory
 * check does) before the memory check's, the model's and the reducer's
 * collectives. Every rank reads the same file and reaches the same verdict;
 * a rank that fails alone (another file on its host) ends the job, as any
 * start-up error does (main: dist_abort). */
static int load_emulation(run *r) {
    const config *cfg = r->cfg;
    const dataset *d = &r->data.train;
    net *nt = net_create(r->be, d->c, d->h, d->w, d->classes);
    zoo_options zo = config_zoo_options(cfg);
    int out, aux;
    int rc = zoo_build(nt, cfg->model_name, &zo, &out, &aux);
    if (rc == CNT_OK) rc = emulation_load(&r->emu, cfg->emulate_compute, cfg->model_name, cfg->batch_size, nt);
    else cnt_err_prefix("model '%s' on %dx%dx%d input with %d classes", cfg->model_name, d->c, d->h, d->w, d->classes);
    net_free(nt);
    return rc;
}

/* The model on rank 0's weights: initialised from train.seed, or from
 * model.init_from (rank 0 reads the file), then broadcast, so every rank
 * starts from the same weights whatever it did itself. */
static int make_model(run *r, int max_batch) {
    const config *cfg = r->cfg;
    const dataset *d = &r->data.train;
    r->nt = build_model(r->be, cfg, d->c, d->h, d->w, d->classes, max_batch);
    if (!r->nt) return CNT_ERR;
    net_init_params(r->nt, cfg->seed);
    /* again with the parameter count: ranks that read different data (another
     * class count) build different models from the same config */
    if (check_same_config(cfg, r->nt->n_params) != CNT_OK) return CNT_ERR;
    if (r->rank == 0 && cfg->init_from[0] && load_init_from(cfg, r->nt) != CNT_OK) return CNT_ERR;
    if (r->world > 1) {
        host_state hs;
        host_state_alloc(&hs, r->nt, 0);
        host_state_download(&hs, r->nt, NULL);
        dist_phase("start-up: initial weights broadcast");
        host_state_broadcast(&hs, r->nt);
        host_state_upload(&hs, r->nt, NULL);
        host_state_free(&hs);
    }
    return CNT_OK;
}

/* dist.mode = ps: the last dist.ps_servers ranks become servers (dist/ps.h);
 * on a worker, r->rank and r->world are then the workers'. Every rank sees
 * the same world and config (check_same_config ran), so every rank refuses
 * alike. */
static int ps_split(run *r) {
    const config *cfg = r->cfg;
    int world = dist_job_world(), servers = cfg->ps_servers;
    if (servers >= world && !CNT_HAVE_MPI)
        return cnt_err_set("dist.mode = ps with dist.ps_servers = %d needs at least %d ranks under mpirun, and this "
                           "binary was built without MPI (MPI=0): install Open MPI (make deps) and rebuild",
                           servers, servers + 1);
    if (servers >= world)
        return cnt_err_set("dist.mode = ps with dist.ps_servers = %d needs at least %d ranks (the servers and one "
                           "worker), this job has %d: start more (mpirun -np %d) or lower dist.ps_servers",
                           servers, servers + 1, world, servers + 1);
    dist_phase("start-up: parameter-server split");
    r->ps_server = dist_split_servers(servers);
    r->ps = ps_create(servers, cfg->ps_sync ? 0 : cfg->ps_max_staleness);
    r->rank = dist_rank();
    r->world = dist_world();
    return CNT_OK;
}

/* The servers' shards of nt's flat buffers (ps_plan over its tensors in
 * buffer order: reverse forward order). *shard_end: a new array. */
static int ps_shards(const ps *p, const net *nt, const char *model, size_t **shard_end) {
    int n = nt->n_param_tensors;
    size_t *ends = cnt_malloc((size_t)n * sizeof *ends);
    for (int j = 0; j < n; j++) {
        const param_info *pi = &nt->param_info[n - 1 - j];
        ends[j] = pi->offset + pi->count;
    }
    *shard_end = cnt_malloc((size_t)ps_servers(p) * sizeof **shard_end);
    int rc = ps_plan(ends, n, ps_servers(p), *shard_end);
    free(ends);
    if (rc != CNT_OK) cnt_err_prefix("model %s", model);
    return rc;
}

/* Rank 0, once the weights are known (fresh, model.init_from or a
 * checkpoint): seeds every server with its shard of them and of the
 * momentum. */
static void ps_seed(run *r) {
    if (r->rank != 0) return;
    const dataset *d = &r->data.train;
    ps_shape shape = {d->c, d->h, d->w, d->classes};
    host_state hs;
    host_state_alloc(&hs, r->nt, 0); /* the workers keep no momentum (stepper_set_ps) */
    host_state_download(&hs, r->nt, NULL);
    dist_phase("start-up: parameter-server seeding");
    ps_worker_init_servers(r->ps, &shape, hs.params, r->seed_momentum); /* NULL: zeros */
    host_state_free(&hs);
    free(r->seed_momentum);
    r->seed_momentum = NULL;
}

/* Every worker after its last step: the servers may stop; rank 0 logs what
 * each did. */
static void ps_finish(run *r) {
    int K = ps_servers(r->ps);
    ps_server_stats *st = r->rank == 0 ? cnt_calloc((size_t)K, sizeof *st) : NULL;
    dist_phase("parameter-server goodbye");
    ps_worker_bye(r->ps, st);
    for (int k = 0; st && k < K; k++)
        log_info("parameter server %d of %d (rank %d): %ld updates applying %.0f gradients (mean staleness %.2f, max "
                 "%.0f); %.1f s waiting for gradients, %.2f s updating; %.1f MiB in and out per update",
                 k + 1, K, ps_server_rank(r->ps, k), st[k].steps, st[k].stale.applied,
                 st[k].stale.applied > 0 ? st[k].stale.sum / st[k].stale.applied : 0, st[k].stale.max, st[k].wait_s,
                 st[k].update_s, st[k].steps ? st[k].bytes / st[k].steps / (1 << 20) : 0);
    free(st);
}

typedef struct server_ctx {
    const net *nt;
    optimizer *opt;
    float *params; /* the shard's, from opt->base */
} server_ctx;

static void server_update(void *ctx, size_t begin, size_t end, float *grads, double lr, float scale) {
    server_ctx *c = ctx;
    optim_step_shard(c->opt, c->nt, c->params, grads, (float)lr, scale, begin, end);
}

/* A parameter server's whole run: the model rank 0 describes, built for its
 * parameter layout only (a server reads no data, computes nothing, and
 * allocates none of the net's buffers), then ps_serve until every worker is
 * done, holding its shard's parameters and momentum (and ps_serve a receive
 * buffer per worker) and nothing else of the model. */
static int run_server(run *r) {
    const config *cfg = r->cfg;
    dist_phase("parameter server");
    ps_shape sh;
    ps_server_shape(r->ps, &sh);
    const backend *be = backend_cpu();
    be->set_threads(cfg->threads);
    r->be = be;
    r->nt = net_create(be, (int)sh.c, (int)sh.h, (int)sh.w, (int)sh.classes);
    zoo_options zo = config_zoo_options(cfg);
    int out, aux;
    if (zoo_build(r->nt, cfg->model_name, &zo, &out, &aux) != CNT_OK) {
        cnt_err_prefix("model '%s' on %dx%dx%d input with %d classes", cfg->model_name, (int)sh.c, (int)sh.h,
                       (int)sh.w, (int)sh.classes);
        return CNT_ERR;
    }
    net_param_layout(r->nt);
    if (ps_shards(r->ps, r->nt, cfg->model_name, &r->shard_end) != CNT_OK) return CNT_ERR;
    int k = ps_server_index(r->ps); /* this server's shard */
    CNT_ASSERT(k >= 0);
    size_t b = k ? r->shard_end[k - 1] : 0, len = r->shard_end[k] - b;
    optimizer opt;
    optim_opts oo = config_optim_opts(cfg);
    optim_init_shard(&opt, r->nt, &oo, b, b + len);
    float *params = be->alloc((len ? len : 1) * sizeof(float));
    /* rank 0 tells what each server holds (log_dist) and did (ps_finish) */
    server_ctx ctx = {r->nt, &opt, params};
    ps_server_stats st;
    if (cfg->timeline[0]) {
        /* the server's own events, sent to rank 0 at the end (dist/ps.h) */
        r->tl = timeline_create_local();
        ps_set_timeline(r->ps, r->tl);
    }
    ps_serve(r->ps, params, opt.momentum_buf, r->nt->n_params, r->shard_end, server_update, &ctx, &st);
    optim_free(&opt);
    be->free(params);
    return CNT_OK;
}

/* What one rank tells rank 0 about its compute threads (report_threads). */
typedef struct thread_report {
    int threads, allowed, online;
    cpus_mask mask;
    char host[64];
} thread_report;

/* The environment variable CNT_STAGE_AHEAD=0 turns the prefetch off, for
 * measuring what it gains; anything else but 1 is an error. */
static int prefetch_on(void) {
    int on = cnt_env_flag("CNT_STAGE_AHEAD", 1, "each step stages the next batch while its backward runs",
                          "the batch is staged at the start of its own step");
    if (on < 0) cnt_fatal("%s", cnt_err_msg());
    return on;
}

/* The stepper's prefetch (stepper_set_prefetch), called inside step
 * r->step + 1 once its backward is queued: the batch of the step after it,
 * unless that step is not in this epoch or this run (then the loop's own
 * loader_next ends the epoch, as without prefetch). The loader's position
 * moves one batch early, but checkpoints record epoch_step, not the
 * loader's position, and a run that stops with a batch staged drops it. */
static const batch *next_batch(void *ctx) {
    run *r = ctx;
    r->next_wait_s = 0;
    if (r->step + 1 >= r->total_steps || r->epoch_step + 1 >= r->steps_per_epoch) return NULL;
    double t0 = time_now();
    const batch *b = loader_next(r->train_ld);
    double t1 = time_now();
    r->next_wait_s = t1 - t0;
    if (r->tl) timeline_record(r->tl, "data wait (next step's batch)", "data", TIMELINE_TID_TRAIN, t0, t1);
    return b;
}

/* train.threads on the CPU: how many threads each rank runs on which CPUs,
 * said by rank 0 (a collective), with a warning for each host where the
 * ranks run more threads than the CPUs they may use (the threads take
 * turns), or where, with train.threads = 0, a binding leaves CPUs idle. */
static void report_threads(const config *cfg, int world) {
    thread_report me;
    memset(&me, 0, sizeof me);
    me.allowed = cpus_allowed(&me.mask);
    me.online = cpus_online();
    me.threads = omp_get_max_threads();
    gethostname(me.host, sizeof me.host - 1);
    const char *why = cfg->threads > 0 ? "train.threads" : "train.threads = 0: one per CPU the rank may run on";
    char cpus[128];
    void *all = NULL;
    size_t *counts = NULL;
    if (world > 1) {
        dist_phase("start-up: threads report");
        dist_gather_bytes(&me, sizeof me, &all, &counts);
        free(counts);
        if (!all) return; /* ranks other than 0 */
    }
    const thread_report *t = world > 1 ? all : &me;
    for (int i = 0; i < world && i < 16; i++) {
        char who[96] = "this process";
        if (world > 1) snprintf(who, sizeof who, "rank %d on %s", i, t[i].host);
        cpus_format(&t[i].mask, cpus, sizeof cpus);
        log_info("threads: %s: %d (%s), on CPU%s %s of its %d", who, t[i].threads, why, t[i].allowed == 1 ? "" : "s",
                 cpus, t[i].online);
    }
    if (world > 16) log_info("threads: ranks 16 to %d alike", world - 1);
    /* per host: its ranks, the CPUs they may use together, their threads */
    char *seen = cnt_calloc((size_t)world, 1);
    for (int i = 0; i < world; i++) {
        if (seen[i]) continue;
        cpus_mask uni;
        memset(&uni, 0, sizeof uni);
        int ranks = 0, threads = 0;
        for (int j = i; j < world; j++) {
            if (seen[j] || strcmp(t[j].host, t[i].host) != 0) continue;
            seen[j] = 1;
            ranks++;
            threads += t[j].threads;
            for (size_t b = 0; b < sizeof uni.bits; b++) uni.bits[b] |= t[j].mask.bits[b];
        }
        int usable = cpus_count(&uni), online = t[i].online;
        int fair = online / ranks > 0 ? online / ranks : 1;
        if (threads > usable)
            log_warn("threads: the %d rank%s on %s run%s %d threads on %d CPU%s, which take turns: set "
                     "train.threads = %d (its CPUs / its ranks)%s",
                     ranks, ranks == 1 ? "" : "s", t[i].host, ranks == 1 ? "s" : "", threads, usable,
                     usable == 1 ? "" : "s", usable / ranks > 0 ? usable / ranks : 1,
                     usable < online ? ", or let them use more CPUs (mpirun --bind-to none)" : "");
        else if (cfg->threads == 0 && usable < online)
            log_warn("threads: the %d rank%s on %s may run on %d of its %d CPUs (mpirun binds each rank to a core "
                     "when it starts 2 ranks or fewer, to a socket or NUMA node otherwise; taskset and schedulers "
                     "bind too), so %d CPU%s stay%s idle: launch with --bind-to none, or --map-by slot:PE=%d for "
                     "%d core%s per rank",
                     ranks, ranks == 1 ? "" : "s", t[i].host, usable, online, online - usable,
                     online - usable == 1 ? "" : "s", online - usable == 1 ? "s" : "", fair, fair, fair == 1 ? "" : "s");
    }
    free(seen);
    free(all);
}

static int run_setup(run *r) {
    const config *cfg = r->cfg;
    /* First of all, before any collective that a key decides (choose_comm's,
     * the timeline's, the watchdog's): ranks launched with different keys
     * would otherwise join different collectives and wait on each other. */
    if (check_same_config(cfg, 0) != CNT_OK) return CNT_ERR;
    if (cfg->dist_mode == DIST_MODE_PS && ps_split(r) != CNT_OK) return CNT_ERR;
    if (r->ps_server) return CNT_OK; /* run_server does the rest */
    if (!(r->be = choose_device(cfg)) || choose_comm(cfg, r->be, &r->nccl) != CNT_OK) return CNT_ERR;
    if (strcmp(r->be->name, "cpu") == 0) report_threads(cfg, r->world);
    if (input_load(cfg, &r->data) != CNT_OK) return CNT_ERR;
    say_layout(cfg, r->be, r->data.train.h, r->data.train.w);
    if (cfg->emulate_compute[0] && load_emulation(r) != CNT_OK) return CNT_ERR;
    loader_options lo, eo;
    input_loader_options(cfg, &r->data, r->rank, r->world, &lo, &eo);
    int max_batch = lo.batch > eo.batch ? lo.batch : eo.batch;
    if (memory_check(cfg, r->be, &r->data, &lo, &eo, r->nccl != NULL) != CNT_OK) return CNT_ERR;
    if (make_model(r, max_batch) != CNT_OK) return CNT_ERR;
    if (r->emu.n_nodes) {
        CNT_ASSERT(r->emu.n_nodes == r->nt->n_nodes); /* the same zoo_build as load_emulation's */
        net_set_emulation(r->nt, r->emu.forward_ms, r->emu.backward_ms);
    }
    if (!(r->train_ld = loader_create(&r->data.train, &lo)) || !(r->test_ld = loader_create(&r->data.test, &eo)))
        return CNT_ERR;
    r->steps_per_epoch = loader_steps_per_epoch(r->train_ld);
    r->total_steps = r->steps_per_epoch * cfg->epochs;
    if (cfg->max_steps > 0 && cfg->max_steps < r->total_steps) r->total_steps = cfg->max_steps;
    progress_opts po = {.be = r->be, .out_dir = cfg->out_dir, .world = r->world, .batch = cfg->batch_size,
                        .epochs = cfg->epochs, .total_steps = r->total_steps, .comm = r->world > 1 || r->nccl,
                        .ps = r->ps ? (cfg->ps_sync ? 1 : 2) : 0,
                        .fp16 = cfg->precision == BACKEND_MATH_FP16};
    r->pg = progress_create(&po);

    /* The schedule spans every configured epoch; train.max_steps only stops
     * early, so a stopped run resumes onto the same schedule. */
    r->sched = config_schedule(cfg, r->world, r->steps_per_epoch);
    if (r->ps) {
        if (ps_shards(r->ps, r->nt, cfg->model_name, &r->shard_end) != CNT_OK) return CNT_ERR;
        ps_worker_bind(r->ps, r->be, r->nt->params, r->nt->grads, r->nt->n_params, r->shard_end);
        net_set_grad_hook(r->nt, ps_grads_ready, r->ps);
    } else if (r->world > 1 || r->nccl) {
        reducer_opts ro = config_reducer_opts(cfg);
        ro.nccl = r->nccl;
        dist_phase("start-up: gradient reducer");
        r->rd = reducer_create(r->be, r->nt->grads, r->nt->n_params, &ro);
        net_set_grad_hook(r->nt, reducer_grads_ready, r->rd);
    }
    if (cfg->timeline[0]) {
        dist_phase("start-up: timeline clock");
        r->tl = timeline_create(); /* a collective: every rank has the same config */
        long first, last;
        config_timeline_window(cfg, &first, &last); /* checked with the config */
        timeline_set_window(r->tl, first, last);
        /* each rank's events go to <trace>.rank<R>.part as the run goes (a killed run keeps them) */
        char path[2 * CONFIG_STR + 8], part[2 * CONFIG_STR + 32], dir[2 * CONFIG_STR + 8], process[32];
        path_in_out_dir(cfg, cfg->timeline, path, sizeof path);
        snprintf(part, sizeof part, "%s.rank%d.part", path, r->rank);
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) *slash = '\0';
        snprintf(process, sizeof process, "rank %d", r->rank);
        if ((slash && slash != dir && make_dirs(dir) != CNT_OK) || timeline_spool(r->tl, part, r->rank, process) != CNT_OK)
            return cnt_err_prefix("dist.timeline");
        net_set_node_hook(r->nt, timeline_node_hook, r->tl);
        if (r->rd) reducer_set_timeline(r->rd, r->tl);
        if (r->ps) ps_set_timeline(r->ps, r->tl);
    }
    optim_opts oo = config_optim_opts(cfg);
    loss_scale_opts lso = config_loss_scale_opts(cfg);
    step_opts so = config_step_opts(cfg, r->world);
    so.emulate = r->emu.n_nodes > 0;
    so.emulate_update_ms = r->emu.update_ms;
    const dataset *d = &r->data.train;
    stepper_init(&r->st, r->nt, r->rd, r->tl, &oo, &lso, &so, max_batch, (size_t)d->c * d->h * d->w);
    if (r->ps) stepper_set_ps(&r->st, r->ps);
    if (prefetch_on()) stepper_set_prefetch(&r->st, next_batch, r);
    if (r->world > 1) host_state_alloc(&r->peers, r->nt, 0);
    log_plan(r);
    log_dist(r);
    return CNT_OK;
}

/* The stop signal (train/stop.h) every rank acts on at this step boundary:
 * with several ranks, any rank's signal from the step before (a maximum
 * that travels during the step, dist_max_lagged, so no step waits for it),
 * which every rank sees at the same step; alone, this step's. 0: none. */
static int agree_stop(const run *r) {
    if (r->world == 1) return stop_pending();
    if (r->ps && !r->cfg->ps_sync) {
        /* asynchronous workers do not wait for each other: server 0 sets the step (dist/ps.h) */
        ps_note_stop(r->ps, stop_pending());
        int sig;
        long at = ps_stop_step(r->ps, &sig);
        return at > 0 && r->step >= at ? sig : 0;
    }
    dist_phase("stop-signal check after a step");
    return (int)dist_max_lagged(stop_pending());
}

/* The steps of one epoch: *done once the run's last step is taken, the loss
 * diverged or a stop signal came. Checkpoints inside the epoch are written
 * here (checkpoint.every_steps, the last step of a run that ends inside an
 * epoch, a stop signal); at the epoch's end, end_epoch writes it, after the
 * evaluation. A step that closes a checkpoint also closes a progress window,
 * so the records a resumed run writes are those of an uninterrupted one.
 * CNT_ERR when the step failed (loss scaling gave up, on every rank alike:
 * the decision rests on allreduced gradients) or a file could not be
 * written (rank 0). */
static int run_epoch_steps(run *r, int epoch, int *done) {
    const config *cfg = r->cfg;
    r->epoch = epoch;
    r->epoch_step = epoch == r->start_epoch ? r->first_epoch_step : 0;
    loader_start_epoch_at(r->train_ld, epoch, (int)r->epoch_step);
    progress_epoch_begin(r->pg, epoch);
    for (;;) {
        if (r->tl) timeline_set_step(r->tl, r->step + 1);
        double t0 = time_now(), t1 = t0;
        const batch *b = NULL;
        if (stepper_staged(&r->st)) {
            t0 -= r->next_wait_s; /* the wait it had, during the step before */
        } else {
            b = loader_next(r->train_ld);
            t1 = time_now();
            if (!b) return CNT_OK;
            if (r->tl) timeline_record(r->tl, "data wait", "data", TIMELINE_TID_TRAIN, t0, t1);
        }
        /* the schedule follows the position in the data (the same as the
         * step count unless a resume changed the steps per epoch) */
        double lr = schedule_lr(&r->sched, (long)epoch * r->steps_per_epoch + r->epoch_step);
        step_result sr;
        if (stepper_run(&r->st, b, r->step + 1, lr, &sr) != CNT_OK) {
            *done = 1;
            return cnt_err_prefix("train.precision = %s, train.loss_scaling = %s, step %ld",
                                  config_name(cfg, &cfg->precision), config_name(cfg, &cfg->loss_scaling),
                                  r->step + 1);
        }
        double t2 = time_now();
        r->step++;
        r->epoch_step++;
        progress_step(r->pg, r->step, &sr, r->st.loss, sr.n, t1 - t0, t2 - t0);
        int last = r->step >= r->total_steps;
        int stop = agree_stop(r);
        int epoch_end = r->epoch_step == r->steps_per_epoch;
        int every = cfg->ckpt_every_steps > 0 && r->step % cfg->ckpt_every_steps == 0;
        int save = ckpt_on(cfg) && (every || stop || last);
        if (epoch_end)
            r->save_at_epoch_end = save || (cfg->ckpt_every > 0 && ((epoch + 1) % cfg->ckpt_every == 0 ||
                                                                   epoch + 1 == cfg->epochs));
        if (r->step % cfg->log_every == 0 || last || save || (epoch_end && r->save_at_epoch_end)) {
            int lg = progress_log(r->pg, r->step, lr, &r->st.ls);
            if (lg == CNT_ERR) return CNT_ERR;
            if (lg == PROGRESS_DIVERGED) {
                r->diverged = *done = 1; /* evaluate and stop, saving nothing */
                r->save_at_epoch_end = 0;
                return CNT_OK;
            }
        }
        if (save && !epoch_end && r->rank == 0 && save_checkpoint(r, epoch, r->epoch_step * samples_per_step(r)) != CNT_OK)
            return CNT_ERR;
        if (stop) {
            r->stopped = stop;
            *done = 1;
            return CNT_OK;
        }
        if (last) {
            *done = 1;
            return CNT_OK;
        }
    }
}

/* The steps of one epoch (run_epoch_steps), then a batch staged for a step
 * that will not come (the run stopped inside the epoch) let go, so that
 * evaluation has the stager. */
static int run_epoch(run *r, int epoch, int *done) {
    int rc = run_epoch_steps(r, epoch, done);
    stepper_drop_staged(&r->st);
    return rc;
}

/* Asynchronous parameter servers, after an epoch: how stale the gradients
 * the servers applied were (rank 0 asks them; all shards' gradients
 * counted), logged and recorded in metrics.jsonl. */
static int ps_epoch_staleness(run *r, int epoch) {
    if (r->rank != 0) return CNT_OK;
    ps_staleness all;
    dist_phase("parameter-server staleness");
    ps_worker_fetch_staleness(r->ps, &all);
    double mean = all.applied > 0 ? all.sum / all.applied : 0;
    char hist[256];
    size_t o = 0;
    for (int i = 0; i < PS_HIST && o + 24 < sizeof hist; i++)
        if (all.hist[i] > 0)
            o += (size_t)snprintf(hist + o, sizeof hist - o, "%s%s%d: %.0f", o ? ", " : "", i == PS_HIST - 1 ? ">=" : "",
                                  i, all.hist[i]);
    log_info("epoch %d/%d staleness of the applied gradients (every server's shards): mean %.2f, max %.0f over %.0f; "
             "by staleness %s",
             epoch + 1, r->cfg->epochs, mean, all.max, all.applied, hist);
    return metrics_staleness(progress_metrics(r->pg), epoch + 1, r->step, mean, all.max, all.applied, all.hist,
                             PS_HIST);
}

/* After an epoch's steps: the ranks' parameters compared, evaluation, the
 * epoch's summary, a checkpoint when due. */
static int end_epoch(run *r, int epoch) {
    const config *cfg = r->cfg;
    progress_epoch_trained(r->pg);
    /* Batch-norm statistics stay per rank during training (as in Horovod);
     * evaluate every shard with rank 0's, so N ranks score what one would. */
    if (r->ps && !cfg->ps_sync) {
        /* asynchronous workers hold parameters of different ages: all take the servers' */
        ps_worker_sync_params(r->ps);
        if (ps_epoch_staleness(r, epoch) != CNT_OK) return CNT_ERR;
    }
    if (r->world > 1) {
        if (check_params_identical(r->nt, r->peers.params) != CNT_OK) return CNT_ERR;
        log_info("epoch %d/%d: parameters bit-identical on all %d ranks", epoch + 1, cfg->epochs, r->world);
        if (r->nt->n_buffers) {
            r->be->download(r->peers.buffers, r->nt->buffers, r->nt->n_buffers * sizeof(float));
            dist_phase("batch-norm buffer broadcast");
            dist_broadcast(r->peers.buffers, r->nt->n_buffers * sizeof(float), 0);
            r->be->upload(r->nt->buffers, r->peers.buffers, r->nt->n_buffers * sizeof(float));
        }
    }
    eval_result er;
    int evaluated = !r->emu.n_nodes; /* an emulated net computes no logits to score */
    double t_eval = time_now();
    if (evaluated && evaluate(&r->st, r->test_ld, &er) != CNT_OK) {
        const char *root = r->data.test.root ? r->data.test.root : cfg->data_root;
        return cnt_err_prefix("epoch %d/%d, test set %s", epoch + 1, cfg->epochs, root);
    }
    if (r->tl && evaluated) timeline_record(r->tl, "evaluate", "eval", TIMELINE_TID_TRAIN, t_eval, time_now());
    if (progress_epoch_end(r->pg, evaluated ? &er : NULL, loader_skipped(r->train_ld), loader_skipped(r->test_ld)) !=
        CNT_OK)
        return CNT_ERR;
    int complete = r->epoch_step == r->steps_per_epoch;
    if (r->rank == 0 && complete && r->save_at_epoch_end && save_checkpoint(r, epoch + 1, 0) != CNT_OK)
        return CNT_ERR;
    r->save_at_epoch_end = 0;
    return CNT_OK;
}

static int run_train(run *r) {
    int done = 0;
    for (int epoch = r->start_epoch; epoch < r->cfg->epochs && !done && r->step < r->total_steps; epoch++) {
        if (run_epoch(r, epoch, &done) != CNT_OK) return CNT_ERR;
        /* a stop inside an epoch ends at once: its checkpoint is written, the evaluation would only delay */
        if (r->stopped && r->epoch_step < r->steps_per_epoch) break;
        if (end_epoch(r, epoch) != CNT_OK) return CNT_ERR;
    }
    /* the last step's stop-signal exchange, still in flight on every rank (all stop at the same step) */
    if (r->world > 1) {
        dist_phase("stop-signal check after the last step");
        dist_max_lagged_drain();
    }
    return CNT_OK;
}

/* How an early end is said in the last line: a stop signal, or
 * train.max_steps inside an epoch; NULL for a run that did all its epochs. */
static const char *how_stopped(const run *r, char *buf, size_t len) {
    const config *cfg = r->cfg;
    const char *saved = ckpt_on(cfg) ? "checkpoint written; resume with checkpoint.resume = auto"
                                     : "no checkpoint (checkpoint.every_epochs and checkpoint.every_steps are 0)";
    if (r->stopped) {
        snprintf(buf, len, "%s at step %ld, %ld of %ld steps into epoch %d/%d; %s", stop_signal_name(r->stopped),
                 r->step, r->epoch_step, r->steps_per_epoch, r->epoch + 1, cfg->epochs, saved);
        return buf;
    }
    if (!r->diverged && cfg->max_steps > 0 && r->step == cfg->max_steps && r->epoch_step < r->steps_per_epoch) {
        snprintf(buf, len, "train.max_steps = %ld reached %ld of %ld steps into an epoch; the partial epoch was "
                 "%s; %s",
                 cfg->max_steps, r->epoch_step, r->steps_per_epoch, r->emu.n_nodes ? "not evaluated" : "evaluated",
                 saved);
        return buf;
    }
    return NULL;
}

/* The last line and, for a run that got through, the timeline: a collective
 * gather to rank 0, which every rank reaches (the loop ends at the same step
 * everywhere). A rank that failed (rank 0 alone, writing a checkpoint) skips
 * it: the others are in other collectives, and main() ends the job. */
static int run_finish(run *r, int status, train_result *res) {
    /* what a resume would start from: the last line says it now, not an abort */
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", cnt_last_words());
    cnt_set_last_words(NULL);
    char why[512];
    status = progress_finish(r->pg, status, r->step, &r->st.ls, status == CNT_OK ? how_stopped(r, why, sizeof why) : NULL,
                             saved[0] ? saved : NULL, res);
    if (res) res->stop_signal = status == CNT_OK ? r->stopped : 0;
    if (!r->tl || status != CNT_OK) return status;
    net_set_node_hook(r->nt, NULL, NULL);
    if (r->rd) reducer_set_timeline(r->rd, NULL);
    char path[2 * CONFIG_STR + 8];
    path_in_out_dir(r->cfg, r->cfg->timeline, path, sizeof path);
    dist_phase("timeline gather");
    if (timeline_write(r->tl, path) != CNT_OK) return CNT_ERR;
    if (r->rank == 0) log_info("timeline: %s (open in chrome://tracing or ui.perfetto.dev)", path);
    return CNT_OK;
}

static void run_free(run *r, int status) {
    progress_free(r->pg);
    reducer_free(r->rd);
    ps_free(r->ps);
    free(r->shard_end);
    timeline_free(r->tl); /* once the reducer's thread, which records into it, is gone */
    stepper_free(&r->st);
    host_state_free(&r->peers);
    free(r->seed_momentum);
    loader_free(r->train_ld);
    loader_free(r->test_ld);
    net_free(r->nt);
    emulation_free(&r->emu);
    input_free(&r->data);
    if (r->lock_fd >= 0) close(r->lock_fd);
#if CNT_HAVE_NCCL
    /* after the reducer that used it; a failed run may have left collectives
     * no peer will join, so it aborts instead of waiting for them */
    if (status == CNT_OK) dist_nccl_free(r->nccl);
    else dist_nccl_abort(r->nccl);
#else
    (void)status;
#endif
}

int trainer_run(const config *cfg, train_result *res) {
    run r = {.cfg = cfg, .rank = dist_rank(), .world = dist_world(), .lock_fd = -1};
    stop_install();
    int status = run_setup(&r);
    if (r.ps_server) {
        if (status == CNT_OK) status = run_server(&r);
        if (res) memset(res, 0, sizeof *res);
        run_free(&r, status);
        stop_restore();
        return status;
    }
    if (status == CNT_OK) status = run_resume(&r);
    if (status == CNT_OK && r.ps) ps_seed(&r);
    if (r.pg) {
        progress_start(r.pg, r.step, r.st.ls.skipped, r.total_steps);
        if (status == CNT_OK) status = run_train(&r);
        /* the servers serve until every worker has said so (a failed run ends the job instead: main) */
        if (status == CNT_OK && r.ps) ps_finish(&r);
        status = run_finish(&r, status, res);
    }
    run_free(&r, status);
    stop_restore();
    return status;
}

int trainer_summary_config(const config *cfg, FILE *out) {
    input_data d;
    if (input_load(cfg, &d) != CNT_OK) return CNT_ERR;
    net *nt = build_model(backend_cpu(), cfg, d.train.c, d.train.h, d.train.w, d.train.classes, 1);
    input_free(&d);
    if (!nt) return CNT_ERR;
    fprintf(out, "model %s\n", cfg->model_name);
    net_print_summary(nt, out);
    profile_print_buckets(cfg, nt, out);
    net_free(nt);
    return CNT_OK;
}

int trainer_summary_model(const char *name, FILE *out) {
    int c, h, w;
    if (!zoo_has(name)) return cnt_err_set("unknown model '%s' (available: %s)", name, zoo_names());
    zoo_imagenet_shape(name, &c, &h, &w);
    config cfg;
    config_defaults(&cfg);
    snprintf(cfg.model_name, sizeof cfg.model_name, "%s", name);
    net *nt = build_model(backend_cpu(), &cfg, c, h, w, 1000, 1);
    if (!nt) return CNT_ERR;
    fprintf(out, "model %s\n", name);
    net_print_summary(nt, out);
    profile_print_buckets(&cfg, nt, out);
    net_free(nt);
    return CNT_OK;
}
