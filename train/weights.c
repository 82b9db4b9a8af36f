/*
 * train/weights.c - `trainer --export` and `model.init_from`: the glue between
 * checkpoints, the model zoo and the safetensors format.
 */
#include "train/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "model/backend.h"
#include "model/zoo.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/safetensors.h"
#include "train/state.h"

int weights_export(const char *ckpt_path, const char *out_path, int *n_tensors) {
    ckpt_meta m;
    if (ckpt_read_meta(ckpt_path, &m) != CNT_OK) return CNT_ERR;
    zoo_options zo = {.zero_init_residual = m.zero_init_residual, .aux_logits = m.aux_logits, .dropout = m.dropout};
    /* Batch 1: only the parameters are needed, activations stay small. */
    net *nt = zoo_create(backend_cpu(), m.model_name, &zo, m.in_c, m.in_h, m.in_w, m.classes, BACKEND_LAYOUT_NCHW, 1);
    if (!nt)
        return cnt_err_prefix("checkpoint '%s': cannot rebuild its model '%s' on %dx%dx%d input with %d classes",
                              ckpt_path, m.model_name, m.in_c, m.in_h, m.in_w, m.classes);
    host_state hs;
    host_state_alloc(&hs, nt, 0);
    int rc = ckpt_read(ckpt_path, nt, hs.params, hs.buffers, NULL, NULL, NULL, NULL);
    if (rc == CNT_OK) {
        char epoch[32], step[32], shape[64], classes[32];
        snprintf(epoch, sizeof epoch, "%d", m.epoch);
        snprintf(step, sizeof step, "%ld", m.step);
        snprintf(shape, sizeof shape, "%dx%dx%d", m.in_c, m.in_h, m.in_w);
        snprintf(classes, sizeof classes, "%d", m.classes);
        /* the normalisation the inputs need, as torchvision's Normalize takes it, where the checkpoint has it */
        char mean[64], std[64];
        config_norm_text(m.mean, m.norm_channels, mean, sizeof mean);
        config_norm_text(m.std, m.norm_channels, std, sizeof std);
        const char *metadata[] = {"format", "pt", "producer", "cnntrain", "model", m.model_name, "input_shape", shape,
                                  "classes", classes, "epoch", epoch, "step", step,
                                  m.norm_channels ? "mean" : NULL, mean, "std", std, NULL};
        /* num_batches_tracked: the optimizer steps taken, i.e. the training
         * batches every batch-norm layer has seen (on one rank). PyTorch reads
         * it only when a BatchNorm's momentum is None. */
        rc = safetensors_write(out_path, nt, hs.params, hs.buffers, (int64_t)m.step, metadata);
    }
    if (rc == CNT_OK && n_tensors) {
        int n_bn = 0;
        for (int i = 0; i < nt->n_nodes; i++) n_bn += strcmp(nt->nodes[i].ops->kind, "bn") == 0;
        *n_tensors = nt->n_param_tensors + nt->n_buffer_tensors + n_bn;
    }
    host_state_free(&hs);
    net_free(nt);
    return rc;
}

int weights_init_from(net *nt, const char *path) {
    host_state hs;
    host_state_alloc(&hs, nt, 0);
    host_state_download(&hs, nt, NULL);
    safetensors_report rep;
    int rc = safetensors_load(path, nt, hs.params, hs.buffers, &rep);
    if (rc == CNT_OK) {
        host_state_upload(&hs, nt, NULL);
        char extra[400];
        int others = rep.n_ignored - rep.n_ignored_nbt;
        snprintf(extra, sizeof extra, "%d num_batches_tracked%s%s", rep.n_ignored_nbt, others ? "; " : "",
                 rep.ignored);
        log_info("model.init_from: loaded %d tensors from %s; ignored %d extra tensor%s in the file (%s)", rep.n_loaded,
                 path, rep.n_ignored, rep.n_ignored == 1 ? "" : "s", extra);
        if (rep.n_kept)
            log_warn("model.init_from: %d classifier tensor%s of %s have another class count and keep this "
                     "model's random initialisation (fine-tuning): %s",
                     rep.n_kept, rep.n_kept == 1 ? "" : "s", path, rep.kept);
    }
    host_state_free(&hs);
    return rc;
}
