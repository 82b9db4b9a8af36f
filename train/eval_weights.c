/*
 * train/eval_weights.c - trainer --eval: a checkpoint's or a safetensors
 * file's weights scored on the config's test set (train/trainer.h,
 * trainer_eval), with the pieces a training run sets up for its own
 * evaluation (train/run_setup.c's device, the input, the model, the
 * stepper's inference forward) and none of the rest: no out_dir, no lock,
 * no exchange, no optimizer step.
 */
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/eval.h"
#include "train/input.h"
#include "train/run.h"
#include "train/safetensors.h"
#include "train/state.h"
#include "train/stop.h"

/* Whether path names a safetensors file (by its name, as --export writes
 * it); anything else is read as a cnntrain checkpoint, whose reader says
 * when it is not one. */
static int is_safetensors(const char *path) {
    size_t n = strlen(path), k = strlen(".safetensors");
    return n >= k && strcmp(path + n - k, ".safetensors") == 0;
}

/* Rank 0: the file's parameters and batch-norm statistics into hs, every
 * one of them, or CNT_ERR naming the file. */
static int read_weights(const char *path, const net *nt, const config *cfg, host_state *hs) {
    if (!is_safetensors(path)) {
        ckpt_meta meta;
        if (ckpt_read(path, nt, hs->params, hs->buffers, NULL, NULL, NULL, &meta) != CNT_OK) {
            if (strstr(cnt_err_msg(), "not a cnntrain checkpoint"))
                cnt_err_suffix(" (--eval reads a cnntrain checkpoint, or a safetensors file named *.safetensors)");
            return CNT_ERR;
        }
        log_info("eval: %s: %s's checkpoint after step %ld (%d epoch%s done%s)", path, meta.model_name, meta.step,
                 meta.epoch, meta.epoch == 1 ? "" : "s", meta.epoch_samples ? ", and part of the next" : "");
        return CNT_OK;
    }
    safetensors_report rep;
    if (safetensors_load(path, nt, hs->params, hs->buffers, &rep) != CNT_OK) return CNT_ERR;
    if (rep.n_kept)
        return cnt_err_set("%s: %d classifier tensor%s of another class count than the test set's %d (%s): these "
                           "weights cannot score it (model %s)",
                           path, rep.n_kept, rep.n_kept == 1 ? "" : "s", nt->classes, rep.kept, cfg->model_name);
    log_info("eval: %s: %d tensors loaded, %d extra ignored", path, rep.n_loaded, rep.n_ignored);
    return CNT_OK;
}

/* The normalisation a weights file records into v (channels, mean[3],
 * std[3]; channels 0: none): a checkpoint's normalisation block (version 5),
 * or the "mean" and "std" metadata of a safetensors file (--export writes
 * them). A file that cannot be read records none here: read_weights names
 * it. */
static void recorded_norm(const char *weights, float v[7]) {
    memset(v, 0, 7 * sizeof *v);
    if (!is_safetensors(weights)) {
        ckpt_meta *m = cnt_calloc(1, sizeof *m);
        if (ckpt_read_meta(weights, m) == CNT_OK && (m->norm_channels == 1 || m->norm_channels == 3)) {
            v[0] = (float)m->norm_channels;
            memcpy(v + 1, m->mean, sizeof m->mean);
            memcpy(v + 4, m->std, sizeof m->std);
        }
        free(m);
        return;
    }
    char text[2][CONFIG_STR];
    int found[2] = {0, 0}, n[2] = {0, 0};
    if (safetensors_metadata(weights, "mean", text[0], sizeof text[0], &found[0]) != CNT_OK ||
        safetensors_metadata(weights, "std", text[1], sizeof text[1], &found[1]) != CNT_OK || !found[0] || !found[1])
        return;
    if (config_norm_parse("mean", text[0], 0, v + 1, &n[0]) == CNT_OK &&
        config_norm_parse("std", text[1], 1, v + 4, &n[1]) == CNT_OK && n[0] && n[0] == n[1]) {
        v[0] = (float)n[0];
        return;
    }
    memset(v, 0, 7 * sizeof *v);
    log_warn("eval: %s: its mean and std metadata ('%s', '%s') are not 1 or 3 numbers each: not used", weights,
             text[0], text[1]);
}

/* The normalisation the weights' run fed its net (recorded_norm), as
 * data.mean and data.std in *out (cfg otherwise): where cfg says auto, the
 * test set is scored as the run scored it, and an image folder's training
 * split need not be read to estimate them; where cfg gives values that
 * differ, a warning. Collective: rank 0 reads the file's header and
 * broadcasts. */
static int recorded_normalisation(const config *cfg, const char *weights, config *out) {
    *out = *cfg;
    float v[7] = {0}; /* channels, mean[3], std[3] */
    if (dist_rank() == 0) recorded_norm(weights, v);
    if (dist_world() > 1) {
        dist_phase("eval: the checkpoint's normalisation");
        dist_broadcast(v, sizeof v, 0);
    }
    int n = (int)v[0];
    if (n == 0) return CNT_OK;
    float given[2][3];
    int is_auto[2];
    char text[2][128];
    int differ = 0;
    for (int k = 0; k < 2; k++) {
        if (config_norm_values(cfg, k, given[k], &is_auto[k]) != CNT_OK) return CNT_ERR;
        config_norm_text(v + 1 + 3 * k, n, text[k], sizeof text[k]);
        differ |= !is_auto[k] && !config_norm_same(given[k], v + 1 + 3 * k, n);
    }
    if (is_auto[0]) snprintf(out->mean, sizeof out->mean, "%s", text[0]);
    if (is_auto[1]) snprintf(out->std, sizeof out->std, "%s", text[1]);
    if (dist_rank() != 0) return CNT_OK;
    if (is_auto[0] || is_auto[1])
        log_info("eval: normalised as the training run did, as %s records it (data.mean, data.std = auto): "
                 "data.mean=%s data.std=%s",
                 weights, out->mean, out->std);
    if (differ)
        log_warn("eval: data.mean = %s, data.std = %s: not what %s was trained with (data.mean=%s data.std=%s): "
                 "the scores are of inputs the model never saw; leave both auto to use the checkpoint's",
                 cfg->mean, cfg->std, weights, text[0], text[1]);
    return CNT_OK;
}

int trainer_eval(const config *cfg_given, const char *weights, eval_result *er, long *skipped) {
    memset(er, 0, sizeof *er);
    *skipped = 0;
    stop_install();
    int rank = dist_rank(), world = dist_world();
    input_data data;
    memset(&data, 0, sizeof data);
    net *nt = NULL;
    loader *ld = NULL;
    stepper st;
    memset(&st, 0, sizeof st);
    int have_stepper = 0;
    const backend *be = NULL;
    /* the ranks agree on the config first: they meet in the same collectives */
    int rc = run_check_same_config(cfg_given, 0);
    config *cfg = cnt_calloc(1, sizeof *cfg);
    if (rc == CNT_OK) rc = recorded_normalisation(cfg_given, weights, cfg);
    if (rc == CNT_OK && !(be = run_choose_device(cfg))) rc = CNT_ERR;
    if (rc == CNT_OK) rc = input_load_test(cfg, &data);
    if (rc == CNT_OK && cfg->decoder == DATA_DECODER_NVJPEG && be->is_cpu)
        rc = cnt_err_set("data.decoder = nvjpeg decodes on the rank's GPU, and this rank runs on the CPU "
                         "(train.device = %s); use data.decoder = cpu or auto",
                         config_name(cfg, &cfg->device));
    if (rc == CNT_OK) rc = input_open_decoder(cfg, &data, -1);
    loader_options lo, eo;
    if (rc == CNT_OK) {
        input_loader_options(cfg, &data, be, rank, world, &lo, &eo);
        const dataset *d = &data.test;
        /* the training set's classes, as the training run built the model; the test set's where it was not read */
        int classes = data.train.classes ? data.train.classes : d->classes;
        if (!(nt = run_build_model(be, cfg, d->c, d->h, d->w, classes, eo.batch))) rc = CNT_ERR;
    }
    if (rc == CNT_OK) rc = run_check_same_config(cfg, nt->n_params);
    if (rc == CNT_OK) {
        /* rank 0 reads the file, every rank scores with what it read */
        host_state hs;
        host_state_alloc(&hs, nt, 0);
        if (rank == 0) rc = read_weights(weights, nt, cfg, &hs);
        if (rc == CNT_OK && world > 1) {
            dist_phase("eval: weights broadcast");
            host_state_broadcast(&hs, nt);
        }
        if (rc == CNT_OK) host_state_upload(&hs, nt, NULL);
        host_state_free(&hs);
    }
    if (rc == CNT_OK && !(ld = loader_create(&data.test, &eo))) rc = CNT_ERR;
    if (rc == CNT_OK) {
        optim_opts oo = config_optim_opts(cfg);
        loss_scale_opts lso = config_loss_scale_opts(cfg);
        step_opts so = config_step_opts(cfg);
        so.cuda_graph = 0; /* a recording is of training steps */
        const dataset *d = &data.test;
        stepper_init(&st, nt, exchange_none(), NULL, &oo, &lso, &so, eo.batch, d->c, d->h * d->w, eo.u8);
        have_stepper = 1;
        log_info("eval: model %s (%zu parameters) on %s; %s %s: %d test images of %dx%dx%d, %d classes, batches "
                 "of %d on each of %d rank%s",
                 cfg->model_name, nt->n_params, be->name, config_name(cfg, &cfg->data_kind), cfg->data_root,
                 d->n, d->c, d->h, d->w, d->classes, eo.batch, world, world == 1 ? "" : "s");
        rc = evaluate(&st, ld, stop_pending, er);
        if (rc != CNT_OK) cnt_err_prefix("test set %s", data.test.root ? data.test.root : cfg->data_root);
        *skipped = loader_skipped(ld);
    }
    if (have_stepper) stepper_free(&st);
    loader_free(ld);
    net_free(nt);
    input_free(&data);
    free(cfg);
    stop_restore();
    return rc;
}
