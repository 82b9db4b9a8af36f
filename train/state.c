/*
 * train/state.c - a net's training state in host memory (see train/state.h).
 */
#include "train/state.h"

#include <stdlib.h>

#include "common/check.h"
#include "dist/dist.h"

void host_state_alloc(host_state *hs, const net *nt, int with_momentum) {
    hs->params = cnt_malloc((nt->n_params ? nt->n_params : 1) * sizeof(float));
    hs->buffers = cnt_malloc((nt->n_buffers ? nt->n_buffers : 1) * sizeof(float));
    hs->momentum = with_momentum ? cnt_malloc((nt->n_params ? nt->n_params : 1) * sizeof(float)) : NULL;
}

void host_state_free(host_state *hs) {
    free(hs->params);
    free(hs->buffers);
    free(hs->momentum);
    hs->params = hs->buffers = hs->momentum = NULL;
}

void host_state_download(host_state *hs, const net *nt, const float *momentum_dev) {
    nt->be->download(hs->params, nt->params, nt->n_params * sizeof(float));
    if (nt->n_buffers) nt->be->download(hs->buffers, nt->buffers, nt->n_buffers * sizeof(float));
    if (hs->momentum && momentum_dev) nt->be->download(hs->momentum, momentum_dev, nt->n_params * sizeof(float));
}

void host_state_upload(const host_state *hs, net *nt, float *momentum_dev) {
    nt->be->upload(nt->params, hs->params, nt->n_params * sizeof(float));
    if (nt->n_buffers) nt->be->upload(nt->buffers, hs->buffers, nt->n_buffers * sizeof(float));
    if (hs->momentum && momentum_dev) nt->be->upload(momentum_dev, hs->momentum, nt->n_params * sizeof(float));
}

void host_state_broadcast(host_state *hs, const net *nt) {
    dist_broadcast(hs->params, nt->n_params * sizeof(float), 0);
    if (nt->n_buffers) dist_broadcast(hs->buffers, nt->n_buffers * sizeof(float), 0);
    if (hs->momentum) dist_broadcast(hs->momentum, nt->n_params * sizeof(float), 0);
}
