/*
 * model/net.c - the network container: nodes, flat parameter storage in
 * reverse forward order, forward and backward passes, initialisation, summary.
 *
 * See model/net.h for the layout and the gradient-accumulation rule.
 */
#include "model/net.h"
#include "model/layer.h"
#include "common/check.h"
#include "common/cpus.h"
#include "common/rng.h"
#include "common/timer.h"

#include <math.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

net *net_create(const backend *be, int in_c, int in_h, int in_w, int classes) {
    net *nt = cnt_calloc(1, sizeof *nt);
    nt->be = be;
    nt->in_c = in_c;
    nt->in_h = in_h;
    nt->in_w = in_w;
    nt->classes = classes;
    nt->output = -1;
    nt->aux_output = -1;
    if (in_c <= 0 || in_h <= 0 || in_w <= 0 || classes < 2) {
        cnt_err_set("network input %dx%dx%d with %d classes is invalid", in_c, in_h, in_w, classes);
        nt->failed = 1;
    }
    return nt;
}

void net_free(net *nt) {
    if (!nt) return;
    for (int i = 0; i < nt->n_nodes; i++) {
        node *nd = &nt->nodes[i];
        if (nd->ops->free_state) nd->ops->free_state(nt, nd);
        free(nd->state);
    }
    nt->be->free(nt->act_pool);
    nt->be->free(nt->params);
    nt->be->free(nt->grads);
    nt->be->free(nt->buffers);
    nt->be->free(nt->input_grad);
    nt->be->free(nt->input_conv);
    nt->be->free(nt->logits32);
    nt->be->free(nt->dropout_seed_at);
    free(nt->nodes);
    free(nt->param_info);
    free(nt->buffer_info);
    free(nt->emu_forward_end);
    free(nt->emu_backward_end);
    free(nt);
}

int layer_fail(net *nt, const char *name) {
    if (!nt->failed) cnt_err_prefix("layer '%s'", name);
    nt->failed = 1;
    return CNT_ERR;
}

int layer_check_input(net *nt, int in, const char *name) {
    if (nt->failed) return CNT_ERR;
    if (in != NET_INPUT && (in < 0 || in >= nt->n_nodes)) {
        cnt_err_set("input node %d does not exist", in);
        return layer_fail(nt, name);
    }
    return CNT_OK;
}

int layer_add_node(net *nt, const layer_ops *ops, const char *name, const int *inputs, int n_inputs,
                   int C, int H, int W, void *state) {
    if (nt->failed || nt->finalized) {
        free(state);
        if (nt->finalized) cnt_err_set("layer '%s' added after net_finalize", name);
        nt->failed = 1;
        return CNT_ERR;
    }
    if (n_inputs < 1 || n_inputs > NET_MAX_INPUTS) {
        free(state);
        cnt_err_set("%d inputs (1 to %d allowed)", n_inputs, NET_MAX_INPUTS);
        return layer_fail(nt, name);
    }
    for (int i = 0; i < n_inputs; i++) {
        if (inputs[i] != NET_INPUT && (inputs[i] < 0 || inputs[i] >= nt->n_nodes)) {
            free(state);
            cnt_err_set("input %d refers to node %d, which does not exist", i, inputs[i]);
            return layer_fail(nt, name);
        }
    }
    if (C <= 0 || H <= 0 || W <= 0) {
        free(state);
        cnt_err_set("empty output %dx%dx%d", C, H, W);
        return layer_fail(nt, name);
    }
    for (int i = 0; i < nt->n_nodes; i++) {
        if (strcmp(nt->nodes[i].name, name) == 0) {
            free(state);
            cnt_err_set("duplicate node name");
            return layer_fail(nt, name);
        }
    }
    if (nt->n_nodes == nt->cap_nodes) {
        nt->cap_nodes = nt->cap_nodes ? 2 * nt->cap_nodes : 64;
        nt->nodes = realloc(nt->nodes, (size_t)nt->cap_nodes * sizeof *nt->nodes);
        CHECK_ERRNO(nt->nodes != NULL, "realloc");
    }
    node *nd = &nt->nodes[nt->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->ops = ops;
    snprintf(nd->name, sizeof nd->name, "%s", name);
    nd->n_inputs = n_inputs;
    memcpy(nd->inputs, inputs, (size_t)n_inputs * sizeof *inputs);
    nd->C = C;
    nd->H = H;
    nd->W = W;
    nd->fuse_add = nd->fuse_relu = nd->fused_into = -1;
    nd->first_param = nt->n_param_tensors;
    nd->first_buffer = nt->n_buffer_tensors;
    nd->state = state;
    return nt->n_nodes++;
}

int layer_add_param(net *nt, int node_idx, const char *suffix, size_t count, int fan_in, int fan_out,
                    int no_decay, init_spec init) {
    node *nd = &nt->nodes[node_idx];
    CNT_ASSERT(node_idx == nt->n_nodes - 1 && nd->first_param + nd->n_params == nt->n_param_tensors);
    if (nt->n_param_tensors == nt->cap_params) {
        nt->cap_params = nt->cap_params ? 2 * nt->cap_params : 128;
        nt->param_info = realloc(nt->param_info, (size_t)nt->cap_params * sizeof *nt->param_info);
        CHECK_ERRNO(nt->param_info != NULL, "realloc");
    }
    param_info *pi = &nt->param_info[nt->n_param_tensors];
    memset(pi, 0, sizeof *pi);
    snprintf(pi->name, sizeof pi->name, "%s.%s", nd->name, suffix);
    pi->count = count;
    pi->node = node_idx;
    pi->no_decay = no_decay;
    pi->fan_in = fan_in;
    pi->fan_out = fan_out;
    pi->init = init;
    pi->ndim = 1;
    pi->shape[0] = (int)count;
    nt->n_params += count;
    nd->n_params++;
    return nt->n_param_tensors++;
}

void layer_set_param_shape(net *nt, int param, int ndim, const int *shape) {
    param_info *pi = &nt->param_info[param];
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    CNT_ASSERT(ndim >= 1 && ndim <= 4 && n == pi->count);
    pi->ndim = ndim;
    memcpy(pi->shape, shape, (size_t)ndim * sizeof *shape);
}

int layer_add_buffer(net *nt, int node_idx, const char *suffix, size_t count, float init_value) {
    node *nd = &nt->nodes[node_idx];
    CNT_ASSERT(node_idx == nt->n_nodes - 1 && nd->first_buffer + nd->n_buffers == nt->n_buffer_tensors);
    if (nt->n_buffer_tensors == nt->cap_buffers) {
        nt->cap_buffers = nt->cap_buffers ? 2 * nt->cap_buffers : 128;
        nt->buffer_info = realloc(nt->buffer_info, (size_t)nt->cap_buffers * sizeof *nt->buffer_info);
        CHECK_ERRNO(nt->buffer_info != NULL, "realloc");
    }
    buffer_info *bi = &nt->buffer_info[nt->n_buffer_tensors];
    memset(bi, 0, sizeof *bi);
    snprintf(bi->name, sizeof bi->name, "%s.%s", nd->name, suffix);
    bi->offset = nt->n_buffers;
    bi->count = count;
    bi->node = node_idx;
    bi->init_value = init_value;
    bi->ndim = 1;
    bi->shape[0] = (int)count;
    nt->n_buffers += count;
    nd->n_buffers++;
    return nt->n_buffer_tensors++;
}

void layer_input_shape(const net *nt, int idx, int *C, int *H, int *W) {
    if (idx == NET_INPUT) {
        *C = nt->in_c;
        *H = nt->in_h;
        *W = nt->in_w;
    } else {
        *C = nt->nodes[idx].C;
        *H = nt->nodes[idx].H;
        *W = nt->nodes[idx].W;
    }
}

const void *layer_in(const net *nt, const node *nd, int i) {
    int p = nd->inputs[i];
    return p == NET_INPUT ? nt->input : nt->nodes[p].y;
}

void *layer_in_grad(const net *nt, const node *nd, int i) {
    int p = nd->inputs[i];
    return p == NET_INPUT ? nt->input_grad : nt->nodes[p].dy;
}

float *layer_param(const net *nt, const node *nd, int k) {
    return nt->params + nt->param_info[nd->first_param + k].offset;
}

float *layer_param_grad(const net *nt, const node *nd, int k) {
    return nt->grads + nt->param_info[nd->first_param + k].offset;
}

float *layer_buffer(const net *nt, const node *nd, int k) {
    return nt->buffers + nt->buffer_info[nd->first_buffer + k].offset;
}

void layer_grads_ready(net *nt, const node *nd) {
    if (!nd->n_params) return;
    /* Reverse layout: the node's last parameter has the lowest offset and its
     * parameters are contiguous. */
    const param_info *first = &nt->param_info[nd->first_param];
    const param_info *last = &nt->param_info[nd->first_param + nd->n_params - 1];
    size_t begin = last->offset;
    size_t count = first->offset + first->count - begin;
    float *g = nt->grads + begin, *kept = nt->grad_kept ? nt->grad_kept + begin : NULL;
    int real = !nt->emu_backward_end;
    switch (nt->grads_mode) {
    case NET_GRADS_KEEP_FIRST:
    case NET_GRADS_KEEP_MORE:
        if (real) nt->be->axpy(count, 1.0f, g, kept, nt->grads_mode == NET_GRADS_KEEP_MORE);
        return;
    case NET_GRADS_ADD_KEPT:
        if (real) nt->be->axpy(count, 1.0f, kept, g, 1);
        break;
    case NET_GRADS_HAND_ON: break;
    }
    if (nt->grad_hook) nt->grad_hook(nt->grad_hook_ctx, begin, count);
}

size_t layer_out_count(const net *nt, const node *nd) {
    return (size_t)nt->batch * (size_t)nd->C * (size_t)nd->H * (size_t)nd->W;
}

size_t layer_act_size(const net *nt) { return backend_dtype_size(nt->ctx.act); }

/* Whether the input given to net_forward (fp32 NCHW) is converted into
 * input_conv: in every other layout or activation type. */
static int input_converted(const net *nt) {
    return nt->ctx.layout != BACKEND_LAYOUT_NCHW || nt->ctx.act != BACKEND_DTYPE_FP32;
}

/* The net's outputs: the logits and any auxiliary logits; before
 * net_finalize names them, the nodes nobody consumes (what the planner
 * takes for outputs then too). */
static int n_outputs(const net *nt) {
    if (nt->finalized) return nt->aux_output >= 0 ? 2 : 1;
    int n = 0;
    for (int i = 0; i < nt->n_nodes; i++) {
        int used = 0;
        for (int j = i + 1; j < nt->n_nodes && !used; j++)
            for (int k = 0; k < nt->nodes[j].n_inputs; k++) used |= nt->nodes[j].inputs[k] == i;
        n += !used;
    }
    return n ? n : 1;
}

void net_set_init(net *nt, int node_idx, init_spec weight, init_spec bias) {
    if (nt->failed || node_idx < 0 || node_idx >= nt->n_nodes) return;
    node *nd = &nt->nodes[node_idx];
    if (nd->n_params >= 1) nt->param_info[nd->first_param].init = weight;
    if (nd->n_params >= 2) nt->param_info[nd->first_param + 1].init = bias;
}

static int check_logits(const net *nt, int idx, const char *what) {
    if (idx < 0 || idx >= nt->n_nodes) return cnt_err_set("%s node %d does not exist", what, idx);
    const node *nd = &nt->nodes[idx];
    if (nd->C != nt->classes || nd->H != 1 || nd->W != 1)
        return cnt_err_set("%s '%s' has shape %dx%dx%d, expected %dx1x1 (the class count)", what, nd->name, nd->C,
                           nd->H, nd->W, nt->classes);
    return CNT_OK;
}

/* ---- activation memory ----
 * Every node's output y and its gradient dy live in one pool, each only while
 * something can still read it. On one clock, node i's forward runs at t = i,
 * the loss at t = n (it reads the outputs' y; net_backward then writes the
 * outputs' dy) and node j's backward at t = 2n - j:
 *   y[i]  from i to its last reader: the forward of its last consumer; its own
 *         backward if the layer reads its output there (LAYER_READS_OUTPUT);
 *         a consumer's backward if that layer reads its inputs
 *         (LAYER_READS_INPUTS); past the end for the net's outputs, which the
 *         caller reads after the passes;
 *   dy[i] from the backward of its last consumer (the first to run, which
 *         writes it; the outputs: t = n) to its own backward (the last to read
 *         it).
 * Both ends count, so a pass never writes where it reads. Tensors whose
 * lifetimes do not overlap share memory: each is placed, in order of its start,
 * at the lowest offset where no tensor alive at the same time lies (first
 * fit). So a batch norm's output that only its ReLU reads, or an add's inputs,
 * give their memory back after the forward that consumes them, and the
 * gradients reuse the outputs whose last backward reader has run. Sizes, in
 * values of the net's activation type, are rounded to 64 bytes' worth, so
 * every tensor is 64-byte aligned as alloc() returns. */

/* The fusion plan (struct node's fuse_*): fz[3i] and fz[3i+1], the add and
 * the ReLU batch norm i computes, fz[3i+2] the batch norm that computes node
 * i (all -1 where none). out and aux: the output nodes, as act_lifetimes'.
 * Deterministic: net_finalize, the estimate and net_output_kept agree. */
static int *plan_fusion(const net *nt, int out, int aux) {
    int n = nt->n_nodes;
    int *fz = cnt_malloc(3 * (size_t)(n ? n : 1) * sizeof(int)), *uses = cnt_calloc((size_t)(n ? n : 1), sizeof(int));
    for (int i = 0; i < 3 * n; i++) fz[i] = -1;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < nt->nodes[j].n_inputs; k++)
            if (nt->nodes[j].inputs[k] >= 0) uses[nt->nodes[j].inputs[k]]++;
    for (int b = 0; b < n && !nt->no_fusion; b++) {
        if (strcmp(nt->nodes[b].ops->kind, "bn") != 0 || uses[b] != 1 || b == out || b == aux) continue;
        int last = b, j = b + 1;
        const node *nx = j < n ? &nt->nodes[j] : NULL;
        if (nx && strcmp(nx->ops->kind, "add") == 0 && (nx->inputs[0] == b || nx->inputs[1] == b)) {
            fz[3 * b] = last = j++;
            nx = j < n ? &nt->nodes[j] : NULL;
        }
        if (nx && strcmp(nx->ops->kind, "relu") == 0 && nx->inputs[0] == last && uses[last] == 1 && last != out &&
            last != aux)
            fz[3 * b + 1] = j;
        for (int k = 0; k < 2; k++)
            if (fz[3 * b + k] >= 0) fz[3 * fz[3 * b + k] + 2] = b;
    }
    free(uses);
    return fz;
}

/* The node whose y and dy hold a fused group's result (its ReLU, else its add). */
static int fused_last(const int *fz, int b) { return fz[3 * b + 1] >= 0 ? fz[3 * b + 1] : fz[3 * b]; }

/* Whether tensor t (y of node i: 2i, its dy: 2i+1) exists: not for a fused
 * group's nodes but its last. */
static int tensor_made(const int *fz, int t) {
    int i = t / 2, lead = fz[3 * i] >= 0 || fz[3 * i + 1] >= 0 ? i : fz[3 * i + 2];
    return lead < 0 || fused_last(fz, lead) == i;
}

static size_t act_values(const net *nt, const node *nd, int max_batch) {
    size_t n = (size_t)max_batch * nd->C * nd->H * nd->W, line = 64 / layer_act_size(nt);
    return (n + line - 1) / line * line;
}

/* Lifetimes of node i's y (tensor 2i) and dy (2i+1) on the clock above. out
 * and aux: the output nodes (-1 when not yet known: nodes nobody consumes count
 * as outputs then). A fused group runs at its batch norm b's times: its last
 * node's y is written at b's forward, and its y (for the ReLU's mask) and dy
 * are read at b's backward. */
static void act_lifetimes(const net *nt, int out, int aux, const int *fz, int *start, int *end) {
    int n = nt->n_nodes;
    for (int i = 0; i < n; i++) {
        start[2 * i] = i;
        end[2 * i] = (nt->nodes[i].ops->backward_reads & LAYER_READS_OUTPUT) ? 2 * n - i : i;
        start[2 * i + 1] = -1; /* no consumer yet */
        end[2 * i + 1] = 2 * n - i;
    }
    for (int j = 0; j < n; j++) {
        const node *nd = &nt->nodes[j];
        int reads_inputs = (nd->ops->backward_reads & LAYER_READS_INPUTS) != 0;
        for (int k = 0; k < nd->n_inputs; k++) {
            int i = nd->inputs[k];
            if (i < 0) continue;
            int last = reads_inputs ? 2 * n - j : j; /* j > i, so 2n - j < 2n - i */
            if (last > end[2 * i]) end[2 * i] = last;
            if (start[2 * i + 1] < 0 || 2 * n - j < start[2 * i + 1]) start[2 * i + 1] = 2 * n - j;
        }
    }
    for (int i = 0; i < n; i++)
        if (i == out || i == aux || (out < 0 && start[2 * i + 1] < 0)) {
            end[2 * i] = 2 * n + 1;
            start[2 * i + 1] = n;
        }
    for (int b = 0; b < n; b++) {
        if (fz[3 * b] < 0 && fz[3 * b + 1] < 0) continue;
        int l = fused_last(fz, b);
        start[2 * l] = b;
        if (fz[3 * b + 1] >= 0 && end[2 * l] < 2 * n - b) end[2 * l] = 2 * n - b;
        if (end[2 * l + 1] < 2 * n - b) end[2 * l + 1] = 2 * n - b;
    }
    if (nt->no_sharing)
        for (int t = 0; t < 2 * n; t++) {
            start[t] = 0;
            end[t] = 2 * n + 1;
        }
}

static int rep_of(int *rep, int t) {
    while (rep[t] != t) t = rep[t] = rep[rep[t]];
    return t;
}

/* LAYER_PASSES_DY: node j's dy (for a fused add, its group's last dy) and
 * the dy of its first input i whose
 * gradient j writes first (j is i's last consumer in forward order, so its
 * backward is the first to write i's dy) become one tensor, living from the
 * start of j's dy to the end of i's. The two lifetimes meet at j's backward,
 * where j's dy is read for the last time and i's dy begins as a copy of it:
 * sharing the memory makes that copy unnecessary. Later writers of i's dy add
 * to it, after j's dy is dead. Not with sharing off (every tensor its own
 * memory), nor for i an output, nor for an input given twice. rep[t]: the
 * tensor whose lifetime and place t shares. */
static void alias_passed_dy(const net *nt, int out, int aux, const int *fz, int *start, int *end, int *rep) {
    int n = nt->n_nodes;
    for (int t = 0; t < 2 * n; t++) rep[t] = t;
    if (nt->no_sharing) return;
    for (int j = 0; j < n; j++) {
        const node *nd = &nt->nodes[j];
        if (!(nd->ops->backward_reads & LAYER_PASSES_DY)) continue;
        /* A fused add: its batch norm's op passes the group's gradient to
         * the add's other input, in place when they share memory. */
        int lead = fz[3 * j + 2], passed = lead >= 0 ? 2 * fused_last(fz, lead) + 1 : 2 * j + 1;
        for (int k = 0; k < nd->n_inputs; k++) {
            int i = nd->inputs[k], twice = 0;
            for (int q = 0; q < nd->n_inputs; q++) twice += nd->inputs[q] == i;
            if (i < 0 || i == out || i == aux || i == lead || twice > 1 || start[2 * i + 1] != 2 * n - j) continue;
            int a = rep_of(rep, passed), b = rep_of(rep, 2 * i + 1);
            if (start[b] < start[a]) start[a] = start[b];
            if (end[b] > end[a]) end[a] = end[b];
            rep[b] = a;
            break; /* one input only: the others get copies */
        }
    }
}

/* Fills off[t] (values into the pool) for each tensor t (y of node i: 2i, its
 * dy: 2i+1; SIZE_MAX for a tensor a fused group does without); returns the
 * pool's size in values of the net's activation type. fz: plan_fusion's. */
static size_t plan_activations(const net *nt, int max_batch, int out, int aux, const int *fz, size_t *off) {
    int m = 2 * nt->n_nodes;
    int *start = cnt_malloc(4 * (size_t)(m ? m : 1) * sizeof(int)), *end = start + m, *order = end + m;
    int *rep = order + m;
    act_lifetimes(nt, out, aux, fz, start, end);
    alias_passed_dy(nt, out, aux, fz, start, end, rep);
    for (int t = 0; t < m; t++) order[t] = t;
    /* by start, then index: insertion sort keeps it deterministic */
    for (int a = 1; a < m; a++) {
        int v = order[a], b = a;
        while (b > 0 && (start[order[b - 1]] > start[v] || (start[order[b - 1]] == start[v] && order[b - 1] > v))) {
            order[b] = order[b - 1];
            b--;
        }
        order[b] = v;
    }
    size_t total = 0;
    for (int a = 0; a < m; a++) {
        int t = order[a];
        if (rep[t] != t || !tensor_made(fz, t)) continue; /* placed with its representative; or none */
        size_t size = act_values(nt, &nt->nodes[t / 2], max_batch), at = 0;
        /* the lowest offset clear of every placed tensor alive at the same time */
        for (int moved = 1; moved;) {
            moved = 0;
            for (int b = 0; b < a; b++) {
                int k = order[b];
                if (rep[k] != k || !tensor_made(fz, k) || end[k] < start[t] || end[t] < start[k]) continue;
                size_t ks = act_values(nt, &nt->nodes[k / 2], max_batch);
                if (at < off[k] + ks && off[k] < at + size) {
                    at = off[k] + ks;
                    moved = 1;
                }
            }
        }
        off[t] = at;
        if (at + size > total) total = at + size;
    }
    for (int t = 0; t < m; t++) off[t] = tensor_made(fz, t) ? off[rep_of(rep, t)] : SIZE_MAX;
    free(start);
    return total;
}

int net_output_kept(const net *nt, int i) {
    CNT_ASSERT(nt->finalized && i >= 0 && i < nt->n_nodes);
    int m = 2 * nt->n_nodes;
    int *start = cnt_malloc(2 * (size_t)m * sizeof(int)), *end = start + m;
    int *fz = plan_fusion(nt, nt->output, nt->aux_output);
    act_lifetimes(nt, nt->output, nt->aux_output, fz, start, end);
    int kept = end[2 * i] >= nt->n_nodes && tensor_made(fz, 2 * i);
    free(fz);
    free(start);
    return kept;
}

void net_set_memory_sharing(net *nt, int on) {
    CNT_ASSERT(!nt->finalized);
    nt->no_sharing = !on;
}

void net_set_fusion(net *nt, int on) {
    CNT_ASSERT(!nt->finalized);
    nt->no_fusion = !on;
}

int net_fused_groups(const net *nt) {
    int groups = 0;
    for (int i = 0; i < nt->n_nodes; i++) groups += nt->nodes[i].fuse_add >= 0 || nt->nodes[i].fuse_relu >= 0;
    return groups;
}

void net_set_layout(net *nt, int layout) {
    CNT_ASSERT(!nt->finalized);
    CNT_ASSERT(layout == BACKEND_LAYOUT_NCHW || layout == BACKEND_LAYOUT_NHWC ||
               (layout == BACKEND_LAYOUT_BLOCKED && nt->be->block_c > 0));
    nt->ctx.layout = (backend_layout)layout;
}

void net_set_activations(net *nt, backend_dtype type) {
    CNT_ASSERT(!nt->finalized && backend_act_check(nt->be, type) == CNT_OK);
    nt->ctx.act = type;
}

void net_set_conv_api(net *nt, backend_conv_api api) {
    CNT_ASSERT(api == BACKEND_CONV_API_LEGACY || api == BACKEND_CONV_API_GRAPH);
    nt->ctx.conv_api = api;
}

void net_set_math(net *nt, int math) {
    CNT_ASSERT(math == BACKEND_MATH_FP32 || math == BACKEND_MATH_TF32 || math == BACKEND_MATH_BF16 ||
               math == BACKEND_MATH_FP16);
    nt->ctx.math = (backend_math)math;
}

int net_max_batch_for(const net *nt, size_t limit, const node **layer, size_t *per_image) {
    *layer = NULL;
    size_t worst = (size_t)nt->in_c * nt->in_h * nt->in_w;
    for (int i = 0; i < nt->n_nodes; i++) {
        const node *nd = &nt->nodes[i];
        size_t v = (size_t)nd->C * nd->H * nd->W; /* per image */
        if (v > worst) {
            worst = v;
            *layer = &nt->nodes[i];
        }
    }
    *per_image = worst;
    if (!limit) return INT_MAX;
    size_t b = worst ? limit / worst : (size_t)INT_MAX;
    return b > (size_t)INT_MAX ? INT_MAX : (int)b;
}

void net_param_layout(net *nt) {
    /* Reverse forward order: the first registered tensor ends the buffer. */
    size_t running = nt->n_params;
    for (int i = 0; i < nt->n_param_tensors; i++) {
        running -= nt->param_info[i].count;
        nt->param_info[i].offset = running;
    }
}

int net_finalize(net *nt, int out, int aux_out, int max_batch) {
    if (nt->failed) return CNT_ERR;
    if (nt->finalized) return cnt_err_set("net_finalize called twice");
    if (max_batch < 1) return cnt_err_set("batch size %d must be at least 1", max_batch);
    const node *big;
    size_t per;
    int fits = net_max_batch_for(nt, nt->be->max_tensor_values, &big, &per);
    if (max_batch > fits) {
        return cnt_err_set("batch %d does not fit the %s backend: %s holds %zu values per image, %zu for the "
                           "batch, more than one tensor may (%zu: cuDNN's descriptors count in 32-bit ints); the "
                           "largest batch that fits is %d",
                           max_batch, nt->be->name, big ? big->name : "the input", per, per * (size_t)max_batch,
                           nt->be->max_tensor_values, fits);
    }
    if (check_logits(nt, out, "logits") != CNT_OK) return CNT_ERR;
    if (aux_out >= 0 && check_logits(nt, aux_out, "auxiliary logits") != CNT_OK) return CNT_ERR;
    nt->output = out;
    nt->aux_output = aux_out;
    nt->max_batch = max_batch;

    /* Gradient flow: walking backward, the first consumer of a tensor writes its
     * gradient, later ones add to it. A node nobody consumes (other than the
     * outputs) would leave a gradient unwritten: reject it. */
    char *written = cnt_calloc((size_t)nt->n_nodes + 1, 1);
    written[out + 1] = 1;
    if (aux_out >= 0) written[aux_out + 1] = 1;
    for (int i = nt->n_nodes - 1; i >= 0; i--) {
        node *nd = &nt->nodes[i];
        if (!written[i + 1]) {
            free(written);
            return cnt_err_set("layer '%s' output is never used", nd->name);
        }
        for (int j = 0; j < nd->n_inputs; j++) {
            int slot = nd->inputs[j] + 1;
            nd->accumulate[j] = written[slot];
            written[slot] = 1;
        }
    }
    free(written);

    net_param_layout(nt);
    const backend *be = nt->be;
    nt->params = be->alloc(nt->n_params * sizeof(float));
    nt->grads = be->alloc(nt->n_params * sizeof(float));
    nt->buffers = be->alloc((nt->n_buffers ? nt->n_buffers : 1) * sizeof(float));
    size_t a = layer_act_size(nt), in_values = (size_t)max_batch * nt->in_c * nt->in_h * nt->in_w;
    nt->input_grad = be->alloc(in_values * a);
    if (input_converted(nt)) nt->input_conv = be->alloc(in_values * a);
    if (nt->ctx.act != BACKEND_DTYPE_FP32)
        nt->logits32 = be->alloc((size_t)(aux_out >= 0 ? 2 : 1) * max_batch * nt->classes * sizeof(float));
    size_t *off = cnt_malloc(2 * (size_t)(nt->n_nodes ? nt->n_nodes : 1) * sizeof *off);
    int *fz = plan_fusion(nt, out, aux_out);
    size_t pool = plan_activations(nt, max_batch, out, aux_out, fz, off);
    nt->act_pool = be->alloc((pool ? pool : 1) * a);
    char *base = nt->act_pool;
    for (int i = 0; i < nt->n_nodes; i++) {
        node *nd = &nt->nodes[i];
        nd->y = off[2 * i] == SIZE_MAX ? NULL : base + off[2 * i] * a;
        nd->dy = off[2 * i + 1] == SIZE_MAX ? NULL : base + off[2 * i + 1] * a;
        nd->fuse_add = fz[3 * i];
        nd->fuse_relu = fz[3 * i + 1];
        nd->fused_into = fz[3 * i + 2];
        if (nd->ops->setup) nd->ops->setup(nt, nd);
    }
    free(fz);
    free(off);
    nt->finalized = 1;
    nt->batch = max_batch;
    return CNT_OK;
}

void net_memory_estimate(const net *nt, int max_batch, net_memory *m) {
    memset(m, 0, sizeof *m);
    size_t B = (size_t)max_batch, f = sizeof(float), a = layer_act_size(nt);
    /* as net_finalize allocates them */
    m->params = nt->n_params * f;
    m->grads = nt->n_params * f;
    m->buffers = (nt->n_buffers ? nt->n_buffers : 1) * f;
    size_t in = B * nt->in_c * nt->in_h * nt->in_w * a;
    m->activations = input_converted(nt) ? 2 * in : in;
    if (nt->ctx.act != BACKEND_DTYPE_FP32) /* logits32 */
        m->activations += (size_t)n_outputs(nt) * B * nt->classes * f;
    size_t *off = cnt_malloc(2 * (size_t)(nt->n_nodes ? nt->n_nodes : 1) * sizeof *off);
    int out = nt->finalized ? nt->output : -1, aux = nt->finalized ? nt->aux_output : -1;
    int *fz = plan_fusion(nt, out, aux);
    size_t pool = plan_activations(nt, max_batch, out, aux, fz, off);
    free(off);
    m->activations += (pool ? pool : 1) * a; /* outputs and gradients, sharing memory */
    for (int i = 0; i < nt->n_nodes; i++) {
        const node *nd = &nt->nodes[i];
        size_t ws = 0, kept = 0;
        if (nd->ops->memory) m->activations += nd->ops->memory(nt, nd, max_batch, &ws, &kept);
        if (fz[3 * i + 1] >= 0) /* a batch norm fused with its ReLU: what its forward keeps (bn_setup) */
            m->activations += layer_bn_keep_bytes(nt, nd, fz[3 * i] >= 0, max_batch);
        if (ws > m->workspace) m->workspace = ws;
        m->kept += kept;
    }
    free(fz);
    m->total = m->params + m->grads + m->buffers + m->activations + m->workspace + m->kept;
}

static float sample_init(rng *r, const param_info *pi) {
    switch (pi->init.kind) {
    case INIT_ZERO: return 0.0f;
    case INIT_ONE: return 1.0f;
    case INIT_KAIMING_NORMAL_FAN_OUT: return rng_normal(r) * sqrtf(2.0f / (float)pi->fan_out);
    case INIT_TORCH_DEFAULT: {
        float bound = 1.0f / sqrtf((float)pi->fan_in);
        return rng_range(r, -bound, bound);
    }
    case INIT_NORMAL: return rng_normal(r) * pi->init.std;
    case INIT_TRUNC_NORMAL:
        for (;;) {
            float v = rng_normal(r) * pi->init.std;
            if (v >= -2.0f && v <= 2.0f) return v;
        }
    }
    return 0.0f;
}

/* rng_u32 draws per value of an init whose draws do not depend on the
 * values (0: none); -1 for the truncated normal, which redraws. */
static int draws_per_value(init_kind k) {
    switch (k) {
    case INIT_ZERO:
    case INIT_ONE: return 0;
    case INIT_TORCH_DEFAULT: return 1;                /* rng_range */
    case INIT_KAIMING_NORMAL_FAN_OUT:
    case INIT_NORMAL: return 2;                       /* rng_normal */
    case INIT_TRUNC_NORMAL: return -1;
    }
    return -1;
}

/* Values of a tensor below this are drawn by one thread. */
#define INIT_PIECE_MIN ((size_t)1 << 18)

/* One thread's piece of one tensor: values [from, to) of its stream. */
typedef struct init_piece {
    const param_info *pi;
    float *out;              /* host + pi->offset */
    uint64_t seed, stream;
    size_t from, to;
} init_piece;

static void *init_piece_run(void *arg) {
    init_piece *p = arg;
    rng r;
    rng_seed(&r, p->seed, p->stream);
    int per = draws_per_value(p->pi->init.kind);
    if (per > 0) rng_advance(&r, (uint64_t)per * p->from);
    for (size_t k = p->from; k < p->to; k++) p->out[k] = sample_init(&r, p->pi);
    return NULL;
}

/* Params (host, n_params), buffers, gradients; draw: the params from seed, else zeros. */
static void init_state(net *nt, uint64_t seed, int threads, int draw) {
    CNT_ASSERT(nt->finalized);
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    float *host = draw ? cnt_malloc(nt->n_params * sizeof(float)) : cnt_calloc(nt->n_params, sizeof(float));
    init_piece pieces[64];
    pthread_t tid[64];
    for (int i = 0; draw && i < nt->n_param_tensors; i++) {
        const param_info *pi = &nt->param_info[i];
        /* One stream per tensor: a tensor's values do not depend on the others. */
        int n = draws_per_value(pi->init.kind) < 0 || pi->count < INIT_PIECE_MIN ? 1 : threads;
        for (int t = 0; t < n; t++)
            pieces[t] = (init_piece){pi, host + pi->offset, seed, (uint64_t)i + 1, pi->count * (size_t)t / (size_t)n,
                                     pi->count * (size_t)(t + 1) / (size_t)n};
        int started = 0;
        for (int t = 1; t < n; t++, started++)
            if (pthread_create(&tid[t], NULL, init_piece_run, &pieces[t]) != 0) break;
        init_piece_run(&pieces[0]);
        for (int t = 1; t <= started; t++) pthread_join(tid[t], NULL);
        /* a thread that could not be started: its piece here, the same values */
        for (int t = started + 1; t < n; t++) init_piece_run(&pieces[t]);
    }
    nt->be->upload(nt->params, host, nt->n_params * sizeof(float));
    free(host);
    if (nt->n_buffers) {
        float *hb = cnt_malloc(nt->n_buffers * sizeof(float));
        for (int i = 0; i < nt->n_buffer_tensors; i++) {
            const buffer_info *bi = &nt->buffer_info[i];
            for (size_t k = 0; k < bi->count; k++) hb[bi->offset + k] = bi->init_value;
        }
        nt->be->upload(nt->buffers, hb, nt->n_buffers * sizeof(float));
        free(hb);
    }
    nt->be->zero(nt->grads, nt->n_params * sizeof(float));
    nt->dropout_seed = seed ^ 0x5DEECE66DULL;
}

void net_init_params_threads(net *nt, uint64_t seed, int threads) { init_state(nt, seed, threads, 1); }

void net_init_params(net *nt, uint64_t seed) {
    cpus_mask m;
    init_state(nt, seed, cpus_allowed(&m), 1);
}

void net_init_params_blank(net *nt, uint64_t seed) { init_state(nt, seed, 1, 0); }

/* The auxiliary logits' fp32 copy: after the logits' in logits32. */
static float *aux_logits32(const net *nt) { return nt->logits32 + (size_t)nt->max_batch * nt->classes; }

/* dst = src, [batch, classes] from type st to dt (a copy when both are the same). */
static void logits_convert(const net *nt, const void *src, backend_dtype st, void *dst, backend_dtype dt) {
    if (st == dt) {
        nt->be->copy(dst, src, (size_t)nt->batch * nt->classes * backend_dtype_size(st));
        return;
    }
    nt->be->convert_layout(nt->batch, nt->classes, 1, src, st, dst, dt, BACKEND_LAYOUT_NCHW, 1, 0);
}

/* One node's pass; emulated (net_set_emulation): asleep until its end,
 * counted from the pass's start, so no rounding accumulates. */
static void node_forward(net *nt, node *nd, int training, double start) {
    if (nt->emu_forward_end) time_sleep_until(start + 1e-3 * nt->emu_forward_end[nd - nt->nodes]);
    else if (nd->fused_into < 0) nd->ops->forward(nt, nd, training); /* else its batch norm ran it */
}

static void node_backward(net *nt, node *nd, double start) {
    if (!nt->emu_backward_end) {
        if (nd->fused_into < 0) nd->ops->backward(nt, nd); /* else its batch norm will */
        return;
    }
    time_sleep_until(start + 1e-3 * nt->emu_backward_end[nd - nt->nodes]);
    layer_grads_ready(nt, nd); /* the slice a real backward hands over here (at the node's end, as tools/simulate) */
}

void net_forward(net *nt, const float *x, int N, int training) {
    CNT_ASSERT(nt->finalized && N >= 1 && N <= nt->max_batch);
    nt->batch = N;
    nt->input = x;
    if (input_converted(nt) && !nt->emu_forward_end) {
        nt->be->convert_layout(N, nt->in_c, nt->in_h * nt->in_w, x, BACKEND_DTYPE_FP32, nt->input_conv, nt->ctx.act,
                               nt->ctx.layout, 1, 0);
        nt->input = nt->input_conv;
    }
    if (training) nt->dropout_seed++;
    /* the weights stay as they are until this forward's backward has run
     * (net_backward ends the epoch); an evaluation promises nothing */
    nt->ctx.weights_epoch = training ? backend_epoch_new() : 0;
    double start = nt->emu_forward_end ? time_now() : 0;
    for (int i = 0; i < nt->n_nodes; i++) {
        node *nd = &nt->nodes[i];
        if (!nt->node_hook) {
            node_forward(nt, nd, training, start);
            continue;
        }
        if (nt->node_begin_hook) nt->node_begin_hook(nt->node_hook_ctx, nd, 0);
        double t0 = time_now();
        node_forward(nt, nd, training, start);
        nt->node_hook(nt->node_hook_ctx, nd, 0, t0, time_now());
    }
    if (nt->logits32 && !nt->emu_forward_end) {
        logits_convert(nt, nt->nodes[nt->output].y, nt->ctx.act, nt->logits32, BACKEND_DTYPE_FP32);
        if (nt->aux_output >= 0)
            logits_convert(nt, nt->nodes[nt->aux_output].y, nt->ctx.act, aux_logits32(nt), BACKEND_DTYPE_FP32);
    }
}

const float *net_logits(const net *nt) { return nt->logits32 ? nt->logits32 : nt->nodes[nt->output].y; }

const float *net_aux_logits(const net *nt) {
    if (nt->aux_output < 0) return NULL;
    return nt->logits32 ? aux_logits32(nt) : nt->nodes[nt->aux_output].y;
}

void net_backward(net *nt, const float *dlogits, const float *dlogits_aux) {
    if (!nt->emu_backward_end) {
        logits_convert(nt, dlogits, BACKEND_DTYPE_FP32, nt->nodes[nt->output].dy, nt->ctx.act);
        if (nt->aux_output >= 0) {
            if (dlogits_aux) logits_convert(nt, dlogits_aux, BACKEND_DTYPE_FP32, nt->nodes[nt->aux_output].dy, nt->ctx.act);
            else nt->be->zero(nt->nodes[nt->aux_output].dy, (size_t)nt->batch * nt->classes * layer_act_size(nt));
        }
    }
    double start = nt->emu_backward_end ? time_now() : 0;
    for (int i = nt->n_nodes - 1; i >= 0; i--) {
        node *nd = &nt->nodes[i];
        if (!nt->node_hook) {
            node_backward(nt, nd, start);
            continue;
        }
        if (nt->node_begin_hook) nt->node_begin_hook(nt->node_hook_ctx, nd, 1);
        double t0 = time_now();
        node_backward(nt, nd, start);
        nt->node_hook(nt->node_hook_ctx, nd, 1, t0, time_now());
    }
    nt->ctx.weights_epoch = 0; /* the optimizer may change the weights now */
}

void net_set_grad_hook(net *nt, void (*hook)(void *ctx, size_t offset, size_t count), void *ctx) {
    nt->grad_hook = hook;
    nt->grad_hook_ctx = ctx;
}

void net_set_grad_accumulation(net *nt, net_grads mode, float *kept) {
    CNT_ASSERT((mode == NET_GRADS_HAND_ON) == (kept == NULL));
    nt->grads_mode = mode;
    nt->grad_kept = kept;
}

void net_set_node_hook(net *nt, void (*hook)(void *ctx, const node *nd, int backward, double t0, double t1),
                       void *ctx) {
    nt->node_hook = hook;
    nt->node_hook_ctx = ctx;
}

void net_set_node_begin_hook(net *nt, void (*hook)(void *ctx, const node *nd, int backward)) {
    nt->node_begin_hook = hook;
}

void net_set_emulation(net *nt, const double *forward_ms, const double *backward_ms) {
    CNT_ASSERT(nt->finalized && (forward_ms == NULL) == (backward_ms == NULL));
    free(nt->emu_forward_end);
    free(nt->emu_backward_end);
    nt->emu_forward_end = nt->emu_backward_end = NULL;
    if (!forward_ms) return;
    int n = nt->n_nodes;
    nt->emu_forward_end = cnt_malloc((size_t)n * sizeof *nt->emu_forward_end);
    nt->emu_backward_end = cnt_malloc((size_t)n * sizeof *nt->emu_backward_end);
    double t = 0;
    for (int i = 0; i < n; i++) { /* forward runs nodes 0 .. n-1 */
        CNT_ASSERT(forward_ms[i] >= 0 && isfinite(forward_ms[i]));
        t += forward_ms[i];
        nt->emu_forward_end[i] = t;
    }
    t = 0;
    for (int i = n - 1; i >= 0; i--) { /* backward runs n-1 .. 0 */
        CNT_ASSERT(backward_ms[i] >= 0 && isfinite(backward_ms[i]));
        t += backward_ms[i];
        nt->emu_backward_end[i] = t;
    }
    /* nothing writes the logits while emulated: zero, so the loss computed from them is finite */
    size_t logits = (size_t)nt->max_batch * nt->classes;
    nt->be->zero(nt->nodes[nt->output].y, logits * layer_act_size(nt));
    if (nt->aux_output >= 0) nt->be->zero(nt->nodes[nt->aux_output].y, logits * layer_act_size(nt));
    if (nt->logits32) nt->be->zero(nt->logits32, (nt->aux_output >= 0 ? 2 : 1) * logits * sizeof(float));
}

double net_flops_per_image(const net *nt) {
    double total = 0;
    for (int i = 0; i < nt->n_nodes; i++) {
        const node *nd = &nt->nodes[i];
        if (nd->ops->flops) total += nd->ops->flops(nt, nd);
    }
    return total;
}

static void format_count(size_t v, char *buf, size_t len) {
    /* 11689512 -> "11,689,512" */
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%zu", v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

void net_print_summary(const net *nt, FILE *out) {
    fprintf(out, "%-4s %-36s %-11s %-26s %-16s %12s\n", "#", "layer", "kind", "config", "output (CxHxW)", "params");
    fprintf(out, "%-4s %-36s %-11s %-26s %-16s %12s\n", "", "input", "", "", "", "");
    for (int i = 0; i < nt->n_nodes; i++) {
        const node *nd = &nt->nodes[i];
        size_t params = 0;
        for (int k = 0; k < nd->n_params; k++) params += nt->param_info[nd->first_param + k].count;
        char shape[48], desc[64] = "", count[32];
        snprintf(shape, sizeof shape, "%dx%dx%d", nd->C, nd->H, nd->W);
        if (nd->ops->describe) nd->ops->describe(nd, desc, sizeof desc);
        format_count(params, count, sizeof count);
        /* a fused group shows on its batch norm's line; its other nodes say where they run */
        char kind[32];
        snprintf(kind, sizeof kind, "%s%s%s", nd->ops->kind, nd->fuse_add >= 0 ? "+add" : "",
                 nd->fuse_relu >= 0 ? "+relu" : "");
        if (nd->fused_into >= 0) snprintf(desc, sizeof desc, "(in #%d's op)", nd->fused_into);
        fprintf(out, "%-4d %-36s %-11s %-26s %-16s %12s\n", i, nd->name, kind, desc, shape, count);
    }
    if (nt->finalized && net_fused_groups(nt))
        fprintf(out, "fused: %d batch norms compute the add and/or ReLU after them in one op\n",
                net_fused_groups(nt));
    fprintf(out, "input: %dx%dx%d, classes: %d\n", nt->in_c, nt->in_h, nt->in_w, nt->classes);
    fprintf(out, "params: %zu\n", nt->n_params);
    fprintf(out, "forward GFLOPs/image: %.4f\n", net_flops_per_image(nt) / 1e9);
}

int net_find_param(const net *nt, const char *name) {
    for (int i = 0; i < nt->n_param_tensors; i++)
        if (strcmp(nt->param_info[i].name, name) == 0) return i;
    return -1;
}
