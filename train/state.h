/*
 * train/state.h - a net's training state in host memory: parameters,
 * batch-norm buffers and, optionally, the momentum buffer, in the net's flat
 * layouts. What checkpoints, weight files, broadcasts from rank 0 and the
 * ranks' parameter comparison read and write.
 */
#ifndef CNT_STATE_H
#define CNT_STATE_H

#include "model/net.h"

typedef struct host_state {
    float *params;    /* [n_params] */
    float *buffers;   /* [n_buffers] (at least one float) */
    float *momentum;  /* [n_params], or NULL when not asked for */
} host_state;

/* Host arrays sized for nt; momentum only when with_momentum. Never fails
 * (allocation failure is fatal). */
void host_state_alloc(host_state *hs, const net *nt, int with_momentum);
void host_state_free(host_state *hs);
/* Device to host: nt's parameters and buffers, and momentum_dev (an
 * optimizer's buffer) when hs has momentum and momentum_dev is not NULL (a
 * parameter-server worker keeps no momentum: hs->momentum is then left as
 * it is). */
void host_state_download(host_state *hs, const net *nt, const float *momentum_dev);
/* Host to device, the other way (momentum_dev NULL: the momentum stays in hs). */
void host_state_upload(const host_state *hs, net *nt, float *momentum_dev);
/* Every rank receives rank 0's arrays (a collective). */
void host_state_broadcast(host_state *hs, const net *nt);

#endif
