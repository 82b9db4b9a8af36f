/*
 * model/net.h - a network as an ordered array of layer nodes.
 *
 * Provides the builder used by the model zoo (net_conv, net_bn, ..., each
 * returning the new node's index), the flat parameter / gradient / buffer
 * storage, forward and backward passes, parameter initialisation and the
 * summary printed by `trainer --summary`.
 *
 * Layout that makes gradient overlap free (docs/ARCHITECTURE.md):
 *   All parameters live in one flat device buffer and all gradients in another
 *   of the same layout, ordered in REVERSE forward order: the last layer's
 *   parameters come first, which is the order backward produces gradients. A
 *   bucket of the gradient reducer is a contiguous slice of `grads`. After each
 *   node's backward has written its weight gradients (always before its input
 *   gradient), the grad hook is called with the slice it completed.
 *
 * Nodes name their inputs by index (NET_INPUT for the network's input), so a
 * residual add or an Inception concat is a node with several inputs. A tensor
 * consumed by several nodes receives the sum of their gradients: net_finalize()
 * decides, per (node, input), whether backward overwrites or accumulates, so no
 * gradient buffer is ever cleared.
 *
 * Errors: builder functions return the node index, or CNT_ERR with a message in
 * cnt_err_msg() (bad shape, input too small); once one failed, the later ones
 * fail too, so a zoo function may check only at the end.
 */
#ifndef CNT_NET_H
#define CNT_NET_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#include "model/backend.h"

#define NET_INPUT (-1)
#define NET_MAX_INPUTS 8
#define NET_NAME_LEN 96

typedef struct net net;
typedef struct node node;

typedef enum init_kind {
    INIT_ZERO,
    INIT_ONE,
    INIT_KAIMING_NORMAL_FAN_OUT, /* N(0, sqrt(2 / (K*R*S))): torchvision ResNet/VGG convs */
    INIT_TORCH_DEFAULT,          /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): nn.Linear / nn.Conv2d defaults, weight and bias */
    INIT_NORMAL,                 /* N(0, std) */
    INIT_TRUNC_NORMAL            /* N(0, std) truncated to [-2, 2] (absolute, as torch.nn.init.trunc_normal_) */
} init_kind;

typedef struct init_spec {
    init_kind kind;
    float std; /* INIT_NORMAL, INIT_TRUNC_NORMAL */
} init_spec;

/* One learnable tensor: a view into the flat params/grads buffers. */
typedef struct param_info {
    char name[NET_NAME_LEN + 32]; /* torchvision state_dict name, e.g. "layer1.0.conv1.weight" */
    size_t offset;           /* elements from the start of net->params / net->grads */
    size_t count;
    int node;                /* owning node */
    int no_decay;            /* a bias or batch-norm parameter (optim.wd_on_bn_bias) */
    int fan_in, fan_out;     /* for initialisation */
    init_spec init;
    int ndim;                /* torchvision's shape: conv weight [K, C, R, S], linear weight [out, in], */
    int shape[4];            /* biases and batch norm [C]; the product is count */
} param_info;

/* One non-learnable tensor (batch-norm running statistics). */
typedef struct buffer_info {
    char name[NET_NAME_LEN + 32]; /* e.g. "bn1.running_mean" */
    size_t offset;           /* elements from the start of net->buffers */
    size_t count;
    int node;
    float init_value;        /* 0 for running_mean, 1 for running_var */
    int ndim;                /* torchvision's shape: [C] for the running statistics */
    int shape[4];
} buffer_info;

/* What a layer's backward reads besides its dy, parameters and own state
 * (layer_ops.backward_reads): the lifetimes of activations follow from it
 * (net.c, "activation memory"), so a flag missing here lets backward read
 * memory that another tensor has overwritten. */
#define LAYER_READS_INPUTS 1u /* its inputs' y (a convolution's x for the weight gradient) */
#define LAYER_READS_OUTPUT 2u /* its own y (ReLU's mask) */
/* Its backward hands dy unchanged to every input (the residual add): the
 * planner lets the gradient of one input, the one whose gradient this node
 * writes first, share dy's memory (then layer_in_grad(nt, nd, i) == nd->dy,
 * and the backward writes nothing there). */
#define LAYER_PASSES_DY 4u

typedef struct layer_ops {
    const char *kind;                                   /* "conv", "bn", ... */
    unsigned backward_reads;                            /* LAYER_READS_*, LAYER_PASSES_DY */
    void (*forward)(net *nt, node *nd, int training);   /* reads inputs' y, writes nd->y */
    /* Writes this node's parameter gradients first, then adds/writes into its
     * inputs' dy according to nd->accumulate[]. */
    void (*backward)(net *nt, node *nd);
    double (*flops)(const net *nt, const node *nd);     /* forward FLOPs per image, multiply-add = 2 */
    void (*describe)(const node *nd, char *buf, size_t len); /* e.g. "3x3/2 pad 1, 64" */
    void (*setup)(net *nt, node *nd);                   /* allocates batch-sized scratch at net_finalize; may be NULL */
    void (*free_state)(net *nt, node *nd);              /* frees nd->state and its device memory; may be NULL */
    /* Device bytes the node holds for batches of max_batch besides its y and
     * dy: what setup allocates (returned), into *workspace the backend
     * scratch its passes keep (conv_workspace, gemm_workspace in
     * model/backend.h), and into *kept what the backend keeps of its weights
     * between a step's forward and backward (conv_filter_kept). Allocates
     * nothing; may be NULL (nothing). */
    size_t (*memory)(const net *nt, const node *nd, int max_batch, size_t *workspace, size_t *kept);
    /* What ran the node's last passes, in the backend's words (a
     * convolution's algorithms: backend_conv_describe), for profiles; may
     * be NULL (nothing to say). */
    void (*runs)(const net *nt, const node *nd, char *buf, size_t len);
} layer_ops;

struct node {
    const layer_ops *ops;
    char name[NET_NAME_LEN];          /* torchvision module path, e.g. "layer1.0.conv1" */
    int n_inputs;
    int inputs[NET_MAX_INPUTS];       /* node indices or NET_INPUT */
    int accumulate[NET_MAX_INPUTS];   /* set by net_finalize: 1 if backward must add into the input's dy */
    int C, H, W;                      /* output shape per image */
    void *y;                          /* [N, C, H, W] output, device, in the net's activation type
                                       * (net_set_activations): valid from this node's forward to its
                                       * last reader (net_output_kept: through backward); it shares memory
                                       * with tensors that are dead meanwhile */
    void *dy;                         /* [N, C, H, W] gradient of the loss w.r.t. y, device, same type: valid during
                                       * net_backward from the backward of this node's last consumer to its
                                       * own (it shares memory the same way, and may be the dy of the
                                       * LAYER_PASSES_DY consumer that writes it first) */
    /* Fusion (net_set_fusion): a batch norm whose sole consumer comes right
     * after it and is the residual add (and/or the ReLU that is the add's
     * sole consumer, or the batch norm's) computes them in one op
     * (backend_bn_act_*, in the batch norm's forward and backward). Set by
     * net_finalize: on the batch norm, fuse_add and fuse_relu name the nodes
     * it computes (-1: none); on those, fused_into names the batch norm
     * (-1 everywhere else), and their own passes do nothing. Only the
     * group's last node has a y and a dy: the others' are NULL. */
    int fuse_add, fuse_relu, fused_into;
    int first_param, n_params;        /* range in net->param_info */
    int first_buffer, n_buffers;      /* range in net->buffer_info */
    void *state;                      /* layer-private */
};

/* What net_backward does with each node's finished parameter gradients
 * (net_set_grad_accumulation). */
typedef enum net_grads {
    NET_GRADS_HAND_ON,    /* the grad hook gets them (the default) */
    NET_GRADS_KEEP_FIRST, /* kept = grads; the hook is not called */
    NET_GRADS_KEEP_MORE,  /* kept += grads; the hook is not called */
    NET_GRADS_ADD_KEPT,   /* grads += kept, then the hook gets them */
} net_grads;

struct net {
    const backend *be;
    /* What the backend's ops compute in for this net, passed to each of them
     * (model/backend.h): the layout of every activation (net_set_layout), the
     * math mode (net_set_math), the type activations are stored in
     * (net_set_activations), and the weights epoch that net_forward opens
     * for a training step and net_backward closes. */
    backend_ctx ctx;
    int in_c, in_h, in_w;             /* input shape per image */
    int classes;
    int max_batch;                    /* allocation size, set by net_finalize */
    int batch;                        /* N of the current forward/backward */

    node *nodes;                      /* [n_nodes] in forward order */
    int n_nodes, cap_nodes;
    param_info *param_info;           /* [n_param_tensors] in registration (forward) order */
    int n_param_tensors, cap_params;
    buffer_info *buffer_info;
    int n_buffer_tensors, cap_buffers;

    size_t n_params;                  /* total learnable values */
    size_t n_buffers;                 /* total buffer values */
    float *params;                    /* [n_params] device, reverse forward order */
    float *grads;                     /* [n_params] device, same layout */
    void *act_pool;                   /* device: every node's y and dy, placed by lifetime (net_finalize) */
    float *buffers;                   /* [n_buffers] device */

    const void *input;                /* [N, in_c, in_h, in_w] device in the net's layout and activation type,
                                       * set by net_forward */
    void *input_conv;                 /* [max_batch, in_c, in_h, in_w] device: the input in the net's layout
                                       * and type (only where either is not the given input's: NCHW fp32) */
    void *input_grad;                 /* [max_batch, in_c, in_h, in_w] device, in the net's layout and type:
                                       * where gradients w.r.t. the input land */
    float *logits32;                  /* [max_batch, classes] device: 16-bit nets only, the logits (and, after
                                       * them, the auxiliary logits) widened to fp32 by net_forward */
    int output;                       /* index of the node producing the logits */
    int aux_output;                   /* Inception's auxiliary logits node, or -1 */
    uint64_t dropout_seed;            /* advanced every training forward */
    uint64_t *dropout_seed_at;        /* device, or NULL: the step seed dropout masks read there
                                       * (net_dropout_seed_on_device) instead of dropout_seed */
    int no_sharing;                   /* net_set_memory_sharing(nt, 0): every y and dy has memory of its own */
    int no_fusion;                    /* net_set_fusion(nt, 0): every node runs its own op */
    int failed;                       /* a builder call failed; later ones fail too */
    int finalized;

    /* Called after a node's weight gradients are written: grads[offset, offset+count). */
    void (*grad_hook)(void *ctx, size_t offset, size_t count);
    void *grad_hook_ctx;
    /* Gradient accumulation (net_set_grad_accumulation): what each node's
     * finished gradients do besides; grad_kept [n_params] device, the caller's. */
    net_grads grads_mode;
    float *grad_kept;
    /* Called after each node's forward (backward = 0) or backward (1) with its
     * start and end (time_now() seconds); NULL: not timed (one branch). */
    void (*node_hook)(void *ctx, const node *nd, int backward, double t0, double t1);
    void *node_hook_ctx;
    /* Called before each node's pass while node_hook is set, with its ctx
     * (net_set_node_begin_hook); NULL: not called. */
    void (*node_begin_hook)(void *ctx, const node *nd, int backward);
    /* Emulated compute (net_set_emulation); NULL: real compute. */
    double *emu_forward_end;          /* [n_nodes]: ms from the start of net_forward at which node i's forward ends */
    double *emu_backward_end;         /* [n_nodes]: ms from the start of net_backward at which node i's backward
                                       * ends (backward runs node n_nodes-1 first) */
};

/* ---- building ---- */
net *net_create(const backend *be, int in_c, int in_h, int in_w, int classes);
void net_free(net *nt);

/* Convolution with square kernel, stride and padding; bias optional. */
int net_conv(net *nt, int in, const char *name, int K, int kernel, int stride, int pad, int bias);
/* Rectangular variant (Inception's 1x7 / 7x1). */
int net_conv_rect(net *nt, int in, const char *name, int K, int R, int S, int stride_h, int stride_w,
                  int pad_h, int pad_w, int bias);
/* BatchNorm2d, momentum 0.1 (PyTorch convention), eps as given (1e-5 usual, 1e-3 Inception). */
int net_bn(net *nt, int in, const char *name, float eps);
int net_relu(net *nt, int in, const char *name);
int net_maxpool(net *nt, int in, const char *name, int kernel, int stride, int pad, int ceil_mode);
int net_avgpool(net *nt, int in, const char *name, int kernel, int stride, int pad, int count_include_pad);
/* Adaptive average pool to P x Q (global average pool: 1 x 1). */
int net_adaptive_avgpool(net *nt, int in, const char *name, int P, int Q);
/* Linear over the flattened input (C*H*W features); output shape [out, 1, 1]. */
int net_linear(net *nt, int in, const char *name, int out_features, int bias);
int net_dropout(net *nt, int in, const char *name, float p);
/* Channel concatenation of n inputs with equal H and W. */
int net_concat(net *nt, const int *ins, int n, const char *name);
/* Residual add of two inputs of equal shape. */
int net_add(net *nt, int a, int b, const char *name);
/* CIFAR ResNet shortcut "option A" (He et al. 2016): subsample by `stride` and
 * zero-pad channels symmetrically up to out_channels. No parameters. */
int net_shortcut_pad(net *nt, int in, const char *name, int out_channels, int stride);

/* Override the initialisation of a node's weight (and bias, if any). */
void net_set_init(net *nt, int node, init_spec weight, init_spec bias);

/* The layout of every activation: BACKEND_LAYOUT_NCHW (the default),
 * BACKEND_LAYOUT_NHWC, or BACKEND_LAYOUT_BLOCKED where the backend has it (see
 * backend_ctx in model/backend.h). Before net_finalize. Parameters, gradients,
 * the input given to net_forward and the logits are the same in all; nodes' y
 * and dy and input_grad follow it. A programming error (CNT_ASSERT) after
 * net_finalize or for a layout the backend lacks. */
void net_set_layout(net *nt, int layout);
/* The math mode of the net's convolutions and GEMMs: BACKEND_MATH_FP32 (the
 * default), _TF32, _BF16 or _FP16 (model/backend.h). At any time between
 * passes; the memory estimate follows it. The backend must be able to run
 * it (backend_math_check, the caller's to ask); a value outside the enum is
 * a programming error (CNT_ASSERT). */
void net_set_math(net *nt, int math);

/* The type every activation and activation gradient is stored in:
 * BACKEND_DTYPE_FP32 (the default), _BF16 or _FP16 (backend_dtype in
 * model/backend.h: each op computes in fp32 and rounds what it stores).
 * Parameters, their gradients, batch-norm statistics, the input given to
 * net_forward, the logits net_logits returns and the dlogits net_backward
 * takes stay fp32: the net converts the input once and the logits both
 * ways. Before net_finalize (and before net_memory_estimate, which
 * follows it). A programming error (CNT_ASSERT) after net_finalize or for a
 * type the backend does not store (backend_act_check, the caller's to ask). */
void net_set_activations(net *nt, backend_dtype type);
/* How the backend runs the net's convolutions (backend_ctx.conv_api); any
 * time, as net_set_math. */
void net_set_conv_api(net *nt, backend_conv_api api);

/* Whether outputs and gradients share memory by lifetime (1, the default)
 * or each keeps its own for the net's life (0: what a backward reads that its
 * layer did not declare in backward_reads stays intact, so comparing the two
 * finds such a layer; tests/test_zoo.c does). Before net_finalize. */
void net_set_memory_sharing(net *nt, int on);

/* Whether net_finalize fuses each batch norm with the residual add and ReLU
 * right after it (1, the default; struct node's fuse_* say which) or every
 * node runs its own op (0). Same numbers either way on the CPU (the fused
 * op takes the separate ops' steps); fusing saves a pass over memory and
 * the intermediate tensors. Before net_finalize (and before
 * net_memory_estimate, which follows it). */
void net_set_fusion(net *nt, int on);
/* The number of batch norms that compute the nodes after them (after
 * net_finalize). */
int net_fused_groups(const net *nt);

/* Gives every parameter tensor its offset in the flat parameter (and
 * gradient) buffer, without allocating anything: tensors in reverse order of
 * registration, so backward completes the buffer from offset 0 upwards.
 * net_finalize does this too; a net that is only described, never run (a
 * parameter server's, which holds one shard: train/ps_server.c), calls it
 * after building instead. May be called again: same offsets. */
void net_param_layout(net *nt);

/* Marks `out` as the logits node (and `aux_out`, or -1, as auxiliary logits),
 * checks their shape is [classes, 1, 1], lays out
 * and allocates parameters, gradients, buffers and activations for batches up
 * to max_batch. Returns CNT_OK or CNT_ERR with a message. */
int net_finalize(net *nt, int out, int aux_out, int max_batch);

/* The largest batch whose every activation tensor (the input and each
 * layer's output, batch x values per image) holds at most `limit` values,
 * in *layer the node that sets it (NULL: the input) and in *per_image its
 * values per image; the backends' limit is backend.max_tensor_values (0:
 * none, the result is INT_MAX). Works on a net built but not finalized. */
int net_max_batch_for(const net *nt, size_t limit, const node **layer, size_t *per_image);

/* Deterministic initialisation from seed (generated on the host with the
 * project's RNG, then uploaded, so every backend starts from the same values).
 * Each tensor has its own stream; a large one is drawn by up to `threads`
 * threads at once (net_init_params: one per CPU the process may run on),
 * each jumping to its piece of the stream (rng_advance), so the values are
 * the same bits for any number of threads. A truncated normal (which
 * redraws) is drawn by one thread. */
void net_init_params(net *nt, uint64_t seed);
void net_init_params_threads(net *nt, uint64_t seed, int threads);
/* The same state without drawing: parameters zero, buffers at their initial
 * values, gradients zero. For a rank whose parameters are about to be
 * replaced by rank 0's (the trainer's initial broadcast), which would
 * otherwise draw a VGG-16's 138 million values for nothing. */
void net_init_params_blank(net *nt, uint64_t seed);

/* What net_finalize(nt, ..., max_batch) allocates on the net's backend and
 * what its passes then keep there, in bytes, by part. */
typedef struct net_memory {
    size_t params;      /* parameters */
    size_t grads;       /* their gradients */
    size_t buffers;     /* batch-norm running statistics */
    size_t activations; /* max_batch images of the node outputs and gradients alive at once (they share
                         * memory by lifetime: net_finalize), the
                         * input's gradient (and its NHWC copy), the layers' own batch-sized buffers (dropout
                         * masks, the option-A shortcut's subsample, NHWC flatten copies, a fused batch
                         * norm's fwd_keep) */
    size_t workspace;   /* the backend's scratch for the most demanding layer (shared by all layers) */
    size_t kept;        /* the forms of the convolution filters the backend keeps for the backward
                         * (backend_ctx.weights_epoch; one per convolution, whatever the batch) */
    size_t total;       /* the sum of the above */
} net_memory;

/* The memory of nt at max_batch from its layer shapes alone, so it can be
 * known before anything is allocated: nt may be built (zoo_build) but not
 * finalized, and a finalized net gives the same numbers. The workspace is the
 * backend's answer in the net's context (layout, math mode) and the current
 * thread count. Allocates nothing; never fails. */
void net_memory_estimate(const net *nt, int max_batch, net_memory *m);

/* ---- running ---- */
/* x: [N, in_c, in_h, in_w] device pointer, fp32 NCHW in every layout and
 * activation type (a net in another converts it into its own copy),
 * N <= max_batch. A training forward
 * promises the backend that the weights stay as they are until the end of
 * the net_backward after it (a new ctx.weights_epoch); an evaluation
 * promises nothing (epoch 0). */
void net_forward(net *nt, const float *x, int N, int training);
/* The logits [N, classes] of the last forward (device, fp32: a 16-bit net's
 * widened, as they were stored). */
const float *net_logits(const net *nt);
/* The auxiliary logits [N, classes], or NULL when the net has none. */
const float *net_aux_logits(const net *nt);
/* Backward for the last training forward from dlogits [N, classes] (device)
 * and, when the net has auxiliary logits, dlogits_aux (already weighted), both
 * fp32 (a 16-bit net rounds them to its type).
 * Ends the forward's weights epoch: the optimizer may change them after it. */
void net_backward(net *nt, const float *dlogits, const float *dlogits_aux);
void net_set_grad_hook(net *nt, void (*hook)(void *ctx, size_t offset, size_t count), void *ctx);
/* Gradient accumulation over micro-batches (train/step.c): from the next
 * net_backward on, each node's parameter gradients, once written, are kept
 * in kept [n_params] (device, the caller's; KEEP_FIRST copies, KEEP_MORE
 * adds, and the grad hook is not called: nothing leaves the rank), or the
 * kept sum is added to them before the grad hook hands them on (ADD_KEPT:
 * the last micro-batch, whose grads then hold the sum of all). Each node's
 * slice as it finishes, so the exchange still overlaps the last backward.
 * HAND_ON (kept NULL) is the plain backward. Emulated compute
 * (net_set_emulation) adds nothing, as it computes nothing. */
void net_set_grad_accumulation(net *nt, net_grads mode, float *kept);
/* Times every node of net_forward and net_backward and reports it to hook
 * (for the timeline); hook NULL turns timing off. Never fails. */
void net_set_node_hook(net *nt, void (*hook)(void *ctx, const node *nd, int backward, double t0, double t1),
                       void *ctx);
/* Also calls hook (with the node hook's ctx) right before each node's pass,
 * while a node hook is set (a profile places its start marks there); NULL:
 * not called. net_set_node_hook leaves it as it is. */
void net_set_node_begin_hook(net *nt, void (*hook)(void *ctx, const node *nd, int backward));
/* Whether a training forward draws dropout masks (a dropout node with p >
 * 0), each step's from a seed the host counts (dropout_seed). */
int net_dropout_active(const net *nt);
/* For a recorded step (train.cuda_graph), whose replays must each draw
 * their own masks: from now on dropout masks take the step seed from a
 * device word (the backend's dropout_mask_at) rather than from the host's
 * dropout_seed by value; the caller writes the word before every training
 * forward with net_dropout_seed_upload, outside any recording. The host
 * still counts dropout_seed (checkpoints keep it). Returns 1, or 0 with
 * nothing changed where the backend has no dropout_mask_at. */
int net_dropout_seed_on_device(net *nt);
/* Back to host seeds passed by value (the device word freed): for a net that
 * outlives the recorded steps, whose later forwards nobody writes a seed for. */
void net_dropout_seed_on_host(net *nt);
/* Writes the seed the next training forward takes (dropout_seed + 1: each
 * training forward advances it first) to the device word, in stream order;
 * nothing without one. */
void net_dropout_seed_upload(net *nt);
/* Emulated compute (train.emulate_compute, train/emulate.h): from now on
 * net_forward and net_backward compute nothing (no layer runs, no input
 * transpose, no dlogits copy); node i takes forward_ms[i] and backward_ms[i]
 * milliseconds (node order, each >= 0 and finite; copied) by sleeping until
 * its deadline, the sum of the times so far counted from the start of the
 * pass, and the node hook times it as usual. After each node's backward the
 * grad hook gets the node's gradient slice, in the order a real backward
 * hands them over, so a reducer launches its buckets at the same points
 * (the slice comes at the node's end; a real conv hands it over between its
 * weight and its input gradient). Parameters, gradients and buffers stay as
 * they are; the logits (and auxiliary logits) are set to 0 here, so a loss
 * taken from them is finite. Both NULL: real compute again. On a finalised
 * net; never fails. */
void net_set_emulation(net *nt, const double *forward_ms, const double *backward_ms);

/* 1 if node i's y stays valid from its forward to the end of net_backward
 * (a backward reads it, or it is an output); 0 if its memory is reused once
 * the forwards that read it have run, or it has none (inside a fused group).
 * On a finalized net. */
int net_output_kept(const net *nt, int i);

/* ---- inspection ---- */
double net_flops_per_image(const net *nt);
/* Prints one line per node (name, kind, output shape, parameters), then
 * "params: N" and "forward GFLOPs/image: X". */
void net_print_summary(const net *nt, FILE *out);
/* Index of the parameter tensor with this name, or -1. */
int net_find_param(const net *nt, const char *name);

#endif
