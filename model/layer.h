/*
 * model/layer.h - what layer implementations share with model/net.c.
 * Internal to model/: the zoo and the trainer use model/net.h only.
 *
 * Provides node creation for the builder functions, parameter and buffer
 * registration, and the accessors a layer's forward/backward uses to find its
 * inputs, their gradients, and its own parameters.
 */
#ifndef CNT_LAYER_H
#define CNT_LAYER_H

#include "model/net.h"

/* Appends a node with the given inputs, output shape and ops. Returns its index,
 * or CNT_ERR (message set, nt->failed raised) on a bad input index or when an
 * earlier builder call failed. `state` is owned by the node from now on (freed
 * with free() after ops->free_state, even on failure). */
int layer_add_node(net *nt, const layer_ops *ops, const char *name, const int *inputs, int n_inputs,
                   int C, int H, int W, void *state);
/* Registers a learnable tensor "<node name>.<suffix>" of `count` values for the
 * last added node. Returns its index in nt->param_info. */
int layer_add_param(net *nt, int node_idx, const char *suffix, size_t count, int fan_in, int fan_out,
                    int no_decay, init_spec init);
/* Records torchvision's shape of parameter tensor `param` (ndim <= 4 dims whose
 * product must equal its count); without a call the shape is 1-D [count]. */
void layer_set_param_shape(net *nt, int param, int ndim, const int *shape);
/* Registers a buffer "<node name>.<suffix>" (1-D, [count]) for the given node. Returns its index. */
int layer_add_buffer(net *nt, int node_idx, const char *suffix, size_t count, float init_value);
/* CNT_OK if the builder has not failed and `in` names an existing node or
 * NET_INPUT; otherwise marks the builder failed (message names the layer). */
int layer_check_input(net *nt, int in, const char *name);
/* Marks the builder as failed with the message already in cnt_err_msg(), prefixed by the node name. */
int layer_fail(net *nt, const char *name);

/* Output shape of node `idx` (NET_INPUT: the net's input). */
void layer_input_shape(const net *nt, int idx, int *C, int *H, int *W);

/* Forward/backward accessors. Activations and their gradients hold values
 * of the type nt->ctx.act (net_set_activations), layer_act_size(nt) bytes
 * each; parameters, gradients and buffers are fp32. */
const void *layer_in(const net *nt, const node *nd, int i);    /* input i's activations */
void *layer_in_grad(const net *nt, const node *nd, int i);      /* input i's gradient buffer */
float *layer_param(const net *nt, const node *nd, int k);       /* k-th parameter of the node */
float *layer_param_grad(const net *nt, const node *nd, int k);
float *layer_buffer(const net *nt, const node *nd, int k);
/* Called by a layer's backward right after it wrote all its weight gradients,
 * before it computes input gradients: hands the completed slice to the grad hook. */
void layer_grads_ready(net *nt, const node *nd);

/* Number of elements of a node's output for the current batch. */
size_t layer_out_count(const net *nt, const node *nd);
/* Bytes of one activation value in nt (4 in fp32, 2 in bf16 or fp16). */
size_t layer_act_size(const net *nt);
/* The bytes of fwd_keep a batch norm (nd) fused with a ReLU, and with the
 * residual add where add, holds for batches of max_batch: the backend's
 * bn_act_keep_bytes (a group without a ReLU keeps nothing). Allocated at
 * net_finalize, counted by net_memory_estimate. */
size_t layer_bn_keep_bytes(const net *nt, const node *nd, int add, int max_batch);

#endif
