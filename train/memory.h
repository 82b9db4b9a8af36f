/*
 * train/memory.h - the memory a training run will hold, estimated before
 * anything is allocated, and the check that refuses a run its node cannot
 * hold (train.memory_check) instead of letting the OOM killer end it
 * without a word.
 *
 * The estimate adds what the run allocates, part by part, from the model's
 * layer shapes (net_memory_estimate on a net built but not finalized) and
 * the configuration: the net at the largest batch (parameters, gradients,
 * batch-norm statistics, every node's output and gradient, the backend's
 * scratch and the forms of the filters it keeps for the backward), the
 * optimizer's momentum, the stepper's device buffers, the exchange's device
 * buffers (with NCCL: fp16 gradients, PowerSGD's error), the loaders' rings of prefetched batches,
 * and host copies (pinned stager slots on a GPU, the reducer's staging
 * buffer and its fp16 copy or PowerSGD's error, parameter copies for the
 * ranks' comparison and for checkpoints, PowerSGD's error summed into a
 * checkpoint, evaluation logits). Not counted: the
 * process itself (libraries, MPI, thread stacks), the data set already
 * loaded (the available memory is measured after it), cuDNN's workspace
 * (sized to what is free when algorithms are chosen), per-image decoding
 * buffers of image folders, and the CPU backend's NHWC copies around
 * pooling and batch norm. On the CPU it came within 3% of the growth of
 * peak resident memory over runs of ResNet-20 (fp32, bf16, NHWC), ResNet-50,
 * VGG-11 and Inception V3 (tests/test_memory.c holds it to 25%).
 */
#ifndef CNT_MEMORY_H
#define CNT_MEMORY_H

#include <stddef.h>

#include "data/loader.h"
#include "model/backend.h"
#include "model/net.h"
#include "dist/exchange.h"
#include "train/config.h"
#include "train/input.h"

typedef struct run_memory {
    int max_batch;           /* the larger of the training and evaluation batches: what the net is sized for */
    net_memory net;          /* the net at max_batch (model/net.h) */
    size_t momentum;         /* the optimizer's momentum buffer (optim.momentum > 0) */
    size_t device_momentum;  /* of which on the device: 0 where the exchange keeps it (parameter servers) */
    size_t step;             /* the stepper's device buffers: the stager's two slots, the logits' gradients,
                              * the batch-norm statistics a skipped step restores (loss scaling) */
    size_t accumulated;      /* the gradients summed over micro-batches (train.accumulate > 1), loss's sum */
    size_t device_exchange;  /* what the exchange keeps on the device with NCCL: fp16 gradients, PowerSGD's error */
    size_t loader;           /* host: both loaders' rings (data.prefetch + 1 batches each) and per-sample tables */
    size_t host_copies;      /* host: the stager's pinned slots (GPU backends), the reducer's staging buffer,
                              * copies of the parameters (ranks' comparison, checkpoints), evaluation logits */
    size_t device;           /* net + momentum + step + accumulated + device_exchange: on the backend's memory */
    size_t host;             /* loader + host_copies: host memory (the same memory as `device` on the CPU) */
    size_t server;           /* one parameter server's host memory (memory_server_bytes); 0 without servers */
} run_memory;

/* What one parameter server holds, in bytes, for a model of param_bytes
 * (fp32) cut into `servers` shards, with `workers` workers: its shard's
 * parameters, momentum and stand-in zeros and one receive buffer per
 * worker (dist/ps.h), the shard taken as an even share rounded up. */
size_t memory_server_bytes(size_t param_bytes, int servers, int workers);
/* What each worker on a node may use of `avail` bytes shared by `ranks`
 * processes of which `servers` are parameter servers needing server_bytes
 * each: the rest split among the workers; 0 when nothing is left. */
size_t memory_share(size_t avail, int ranks, int servers, size_t server_bytes);

/* Fills *m for a run of cfg on backend be (its math mode and thread count
 * already set) with data d and the loader options input_loader_options gave
 * (train, eval), as rank dist_rank() of dist_world(); xf: what the
 * exchange keeps beside the net (exchange_footprint_of; NULL: nothing, the
 * momentum on this rank). Allocates nothing on be. CNT_ERR with
 * zoo_build's message when the model cannot be built (unknown name, input
 * too small). */
int memory_estimate(const config *cfg, const backend *be, const input_data *d, const loader_options *train,
                    const loader_options *eval, const exchange_footprint *xf, run_memory *m);

/* The check before the net is allocated: memory_estimate, then what this
 * rank may use: on the CPU the host's available memory (common/hostmem.h)
 * shared by the ranks of this node (dist_local_world); on a GPU its free
 * memory shared by the ranks of this node on that GPU, and the host's for
 * the host part. Parameter servers on the node (dist_local_servers) take
 * their own estimate off the host's memory first, not a worker's share.
 * Logs one line (rank 0) with the estimate and the available memory.
 * Collective when world > 1 (a barrier: every rank measures before any
 * allocates). When the estimate exceeds it: CNT_ERR with a message naming
 * the model, the batch, the parts, what is available and the keys to change
 * (train.batch_size, train.eval_batch_size), or with train.memory_check =
 * false a warning and CNT_OK. Memory that cannot be measured is said and not
 * checked. A model that cannot be built gives CNT_OK without a line: the
 * model's own construction reports it. */
int memory_check(const config *cfg, const backend *be, const input_data *d, const loader_options *train,
                 const loader_options *eval, const exchange_footprint *xf);

#endif
