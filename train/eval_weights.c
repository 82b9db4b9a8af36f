/*
 * train/eval_weights.c - trainer --eval: a checkpoint's or a safetensors
 * file's weights scored on the config's test set (train/trainer.h,
 * trainer_eval), with the pieces a training run sets up for its own
 * evaluation (train/run_setup.c's device, the input, the model, the
 * stepper's inference forward) and none of the rest: no out_dir, no lock,
 * no exchange, no optimizer step.
 */
#include "train/trainer.h"

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
        if (ckpt_read(path, nt, hs->params, hs->buffers, NULL, NULL, &meta) != CNT_OK) {
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

int trainer_eval(const config *cfg, const char *weights, eval_result *er, long *skipped) {
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
    int rc = run_check_same_config(cfg, 0);
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
    stop_restore();
    return rc;
}
