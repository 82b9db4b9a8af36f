/*
 * model/zoo.h - the model zoo: torchvision's architectures built from a name.
 *
 * ResNet 18/34/50/101/152 and VGG 11/13/16/19 (with and without BN) follow
 * torchvision layer for layer, parameter for parameter, and name every
 * parameter as torchvision's state_dict does. CIFAR-style ResNet 20/32/56/110
 * follow He et al. 2016 section 4.2 (3x3 stem with 16 filters, three stages of
 * 16/32/64, shortcut option A). Inception V3 follows torchvision's
 * inception_v3 (optionally with the auxiliary classifier).
 *
 * Input channels, size and class count are those of the net passed in (they
 * come from the data); `trainer --summary MODEL` uses ImageNet shape.
 */
#ifndef CNT_ZOO_H
#define CNT_ZOO_H

#include "model/net.h"

typedef struct zoo_options {
    int zero_init_residual; /* init the last BN scale of each residual block to 0 */
    int aux_logits;         /* inception_v3: build the auxiliary classifier */
    float dropout;          /* VGG classifier / Inception dropout probability; < 0: the model's default */
    backend_math math;      /* the net's math mode (net_set_math), which zoo_create sets; zoo_build leaves
                             * the net's as it is. 0: fp32 */
    int no_fusion;          /* 1: every node runs its own op (net_set_fusion(nt, 0)), which zoo_create
                             * sets; 0: batch norms fused with the add and ReLU after them */
    backend_dtype activations; /* what activations are stored in (net_set_activations), which zoo_create
                                * sets; 0: fp32 */
    backend_conv_api conv_api; /* how the backend runs convolutions (net_set_conv_api), which zoo_create
                                * sets; 0: legacy */
} zoo_options;

/* Builds `name` into nt (created with the data's input shape and classes).
 * On success stores the logits node in *out and the auxiliary logits node (or
 * -1) in *aux_out and returns CNT_OK; the caller then calls net_finalize().
 * Unknown name or an input too small for the architecture: CNT_ERR with a
 * message naming the model. */
int zoo_build(net *nt, const char *name, const zoo_options *opt, int *out, int *aux_out);

/* A zoo model ready to run: net_create on be with input c x h x w and
 * `classes` outputs, activations in `layout` (BACKEND_LAYOUT_NCHW, _NHWC, or
 * _BLOCKED where be has it) and of type zo->activations, convolutions and
 * GEMMs in zo->math (fp32 when zo is NULL), zoo_build, net_finalize for batches of up to max_batch. Parameters are not
 * initialised (net_init_params). NULL on an unknown name or an input too
 * small for the architecture, with zoo_build's or net_finalize's message
 * (callers say which model and shape they asked for). */
net *zoo_create(const backend *be, const char *name, const zoo_options *zo, int c, int h, int w, int classes,
                int layout, int max_batch);

/* 1 if name is a zoo model. */
int zoo_has(const char *name);
/* Space-separated list of every zoo name. */
const char *zoo_names(void);
/* The ImageNet input shape torchvision uses for this model (3x224x224,
 * 3x299x299 for inception_v3; 3x224x224 for a name that is no zoo model):
 * the one place that knows a model's default input side. */
void zoo_imagenet_shape(const char *name, int *c, int *h, int *w);

#endif
