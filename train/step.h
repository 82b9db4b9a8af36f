/*
 * train/step.h - one training step, written once: training, `--bench` and
 * evaluation all run it.
 *
 *   stepper_run:  batch -> stager (device copy, one step ahead; or the batch
 *                    staged by the step before, see stepper_set_prefetch)
 *                 -> forward -> softmax cross-entropy (+ aux_weight x the
 *                    auxiliary head's, inception_v3) [x loss scale]
 *                 -> backward, handing finished gradient slices to the
 *                    exchange (dist/exchange.h)
 *                 -> [prefetch: the next step's batch from the loader into the
 *                    stager, while backward runs on the device]
 *                 -> the exchange's result: summed gradients, or (parameter
 *                    servers) parameters already updated, which ends the step
 *                 -> [loss scaling: inf/NaN in any gradient skips the step]
 *                 -> SGD update (divided by workers x loss scale)
 *                 With emulated compute (step_opts.emulate, train/emulate.h)
 *                 the net sleeps its profiled times instead of computing
 *                 (net_set_emulation) and the update sleeps instead of
 *                 updating; the stager, the loss and the exchange run as usual.
 *                 Gradient accumulation (step_opts.accumulate = K > 1): a step
 *                 takes K micro-batches, the first K-1 through
 *                 stepper_accumulate (forward, loss, backward; gradients
 *                 kept on the device, nothing exchanged), the last through
 *                 stepper_run, whose backward adds the kept sum to each
 *                 layer's gradients as it finishes and hands them to the
 *                 exchange: one exchange and one update per K micro-batches.
 *                 Each micro-batch's loss gradient is divided by K, so the sum
 *                 is the gradient of the mean loss over the K x b images, as
 *                 one batch of K x b would give it (up to fp32 rounding; batch
 *                 norm normalises each micro-batch by its own statistics).
 *   stepper_eval: batch -> forward in inference mode -> loss; the logits stay
 *                 on the device for the caller to rank.
 *
 * The stepper owns what a step needs across steps: the optimizer (momentum),
 * the loss scaler, the input stager and the device buffers of the loss and
 * its gradient; and it saves and restores that state for checkpoints
 * (stepper_save, stepper_restore). It does not own the net, the exchange or
 * the timeline.
 *
 * The host waits for the device only where a decision needs a value: loss
 * scaling's overflow flag (one float per step, as PyTorch's GradScaler), and
 * a skipped step's loss. Everything else is queued.
 */
#ifndef CNT_STEP_H
#define CNT_STEP_H

#include "data/loader.h"
#include "dist/exchange.h"
#include "dist/timeline.h"
#include "model/net.h"
#include "train/loss_scale.h"
#include "train/optim.h"
#include "train/stager.h"
#include "train/state.h"

typedef struct step_opts {
    float label_smoothing;
    float aux_weight;   /* weight of the auxiliary loss (nets with an auxiliary head) */
    int sync_phases;    /* wait for the device after each phase, so the phase times are the
                         * device's (bench on a GPU); training leaves it 0 */
    int emulate;        /* emulated compute (train.emulate_compute, train/emulate.h): the update
                         * sleeps emulate_update_ms instead of running (parameters, momentum and
                         * the loss scale stay as they are; no inf/NaN check) */
    double emulate_update_ms;
    int accumulate;     /* micro-batches per optimizer step (train.accumulate); 0 or 1: none */
    int cuda_graph;     /* train.cuda_graph: record the step's device work and replay it (stepper_init
                         * says where it cannot: stepper.graph_why) */
    int batch;          /* a full training batch (train.batch_size): the size cuda_graph records at,
                         * others run op by op; 0: the size of the run's first batch */
} step_opts;

/* Where the next step's batch comes from (stepper_set_prefetch): a host
 * batch, or NULL when there is no next step to stage for. */
typedef const batch *(*stepper_next_fn)(void *ctx);

typedef struct step_result {
    int applied;             /* the update ran; 0: skipped for inf/NaN gradients */
    int loss_counts;         /* the loss belongs in the progress line: the step was applied, or
                              * skipped with a finite loss (its gradients overflowed, not its forward) */
    exchange_stats xs;       /* the exchange's report */
    double forward_s;        /* host seconds: forward and loss */
    double backward_s;       /* backward */
    double comm_wait_s;      /* waiting for the gradient sums after backward */
    double update_s;         /* overflow check and update */
    int n;                   /* images in the step's batch (all its micro-batches) */
} step_result;

typedef struct stepper {
    net *nt;                 /* not owned */
    exchange *x;             /* not owned: how the gradients become the next parameters */
    timeline *tl;            /* not owned; NULL: no timeline */
    step_opts o;
    optimizer opt;
    loss_scaler ls;
    stager *st;
    float *loss;             /* [1] device: the last step's loss (auxiliary term included), unscaled */
    float *dlogits;          /* [max_batch, classes] device */
    float *aux_loss;         /* [1] device, nets with an auxiliary head only */
    float *dlogits_aux;      /* [max_batch, classes] device, idem */
    float *overflow;         /* [1] device: loss scaling's inf/NaN flag; NULL without loss scaling */
    float *buffers_before;   /* [n_buffers] device: batch-norm statistics before the forward, for a
                              * skipped step to restore; NULL without loss scaling */
    stepper_next_fn next;    /* NULL: no prefetch */
    void *next_ctx;
    int staged;              /* the next step's batch is in the stager: */
    float *staged_x;         /* its device images */
    int32_t *staged_labels;  /* and labels */
    int staged_n;            /* and size */
    int micro;               /* micro-batches of the current optimizer step already taken (accumulation) */
    float *grad_kept;        /* [n_params] device: their gradients summed; NULL without accumulation */
    float *loss_sum;         /* [1] device: their losses / accumulate summed; idem */
    step_result pending;     /* their times and images, which stepper_run reports with the last */
    float *seed_momentum;    /* rank 0, where the exchange keeps the state: a checkpoint's momentum for
                              * stepper_seed (host); NULL: zeros */
    /* train.cuda_graph (step_opts.cuda_graph): after STEP_GRAPH_WARM eager
     * steps, the device work of a step (forward, loss, backward, update) is
     * recorded (backend capture_begin/capture_end) once per input slot of
     * the stager and batch size, and each later step on that slot is one
     * graph_launch; the rate is read from lr_dev, written before each step */
    int graph_on;            /* asked for and possible here */
    int graph_x;             /* ... with an exchange whose device work is recorded with the step (NCCL) */
    int graph_rerecord;      /* graph_x: some rank records this step, so every rank does */
    int graph_last_set;      /* the recording the last step launched; -1: it ran op by op */
    void (*graph_vote)(double *votes, size_t n); /* graph_x: the ranks' sum of each step's votes
                                                  * (dist_allreduce_sum_f64; a test's fake peers) */
    char graph_why[192];     /* asked for and not possible here: why ("" otherwise) */
    int graph_warm;          /* eager steps taken so far, up to STEP_GRAPH_WARM */
    int graph_batch;         /* the batch size recorded (o.batch, or the run's first); others run eagerly */
    float *lr_dev;           /* [1] device: the rate the update reads (optimizer.lr_at); NULL when off */
    struct step_graph {
        void *graph;         /* the backend's; NULL: none */
        const float *x;      /* the input slot, labels and batch size it was recorded on */
        const int32_t *labels;
        int n;
        uint64_t epoch;      /* the backend's memory_epoch then */
    } graphs[2];
    long recorded, replayed; /* steps recorded and steps replayed */
} stepper;

/* Eager steps before the first recording: the first chooses the
 * convolutions' algorithms and grows the buffers, the second runs as every
 * later step will. */
#define STEP_GRAPH_WARM 2

/* The training state a checkpoint holds besides the position in the data:
 * what stepper_state_alloc sizes, stepper_save fills and stepper_restore
 * takes. */
typedef struct step_state {
    host_state hs;           /* parameters, batch-norm buffers, momentum (NULL: none on this rank) */
    uint64_t dropout_seed;   /* the net's */
    double loss_scale;       /* loss scaling (train/loss_scale.h): the scale, 0 without loss scaling */
    long loss_scale_good;    /* clean steps since it changed */
    long skipped;            /* steps skipped for inf/NaN gradients */
    long skipped_in_a_row;   /* the last of them in a row */
} step_state;

/* Ready to step nt (finalised, parameters initialised, attached to x:
 * exchange_attach) on batches of up to max_batch samples of c x hw values
 * each (u8: the loader's uint8 batches, train/stager.h). x (exchange_none() for one rank) and tl (may be NULL) stay
 * the caller's. Where the exchange keeps the optimizer's state (its traits'
 * keeps_state: parameter servers) the optimizer's momentum buffer is freed
 * (s->opt.momentum_buf NULL), and loss scaling is not allowed (the config
 * refuses it). Never fails (allocation failures are fatal). */
void stepper_init(stepper *s, net *nt, exchange *x, timeline *tl, const optim_opts *oo, const loss_scale_opts *lso,
                  const step_opts *so, int max_batch, int c, int hw, int u8);
/* One training step on host batch b at learning rate lr. step_number (from 1,
 * continued after a resume) names the step to the exchange (the reducer's
 * watchdog, the servers), the timeline and the test-only fault point. Fills
 * *r: comm_wait_s is the wait for the exchange's result after backward,
 * update_s 0 where the exchange updated the parameters. CNT_ERR (message in
 * cnt_err_msg) when loss scaling gives up: LOSS_SCALE_MAX_SKIPS steps in a
 * row had inf/NaN gradients; that step changed nothing. */
int stepper_run(stepper *s, const batch *b, long step_number, double lr, step_result *r);
/* One micro-batch of an accumulating step (step_opts.accumulate = K > 1),
 * the first K-1 of each step; the K-th goes through stepper_run, which
 * reports the whole step (its times and images include these). b: as
 * stepper_run's (NULL when staged). Exchanges nothing, updates nothing. */
void stepper_accumulate(stepper *s, const batch *b);
/* Prefetch: from now on each stepper_run (and stepper_accumulate), once backward is queued (and the
 * batch it read released), calls next(ctx) and stages what it returns, so
 * the host copies the next batch into page-locked memory and queues its
 * upload while the device still runs this step's backward, instead of while
 * it waits for the next forward. The next stepper_run then takes b == NULL.
 * next may return NULL (no next step: nothing staged, the next stepper_run
 * takes a batch again). Why: where the host waits for the device every step
 * (loss scaling's overflow flag) the copy would otherwise leave the GPU idle. */
void stepper_set_prefetch(stepper *s, stepper_next_fn next, void *ctx);
/* 1 when a batch is staged for the next step. */
int stepper_staged(const stepper *s);
/* Lets go of a staged batch that no step will take (the run stops inside an
 * epoch): stepper_eval needs the stager free. */
void stepper_drop_staged(stepper *s);
/* Forward of host batch b in inference mode and its loss into s->loss;
 * returns the device logits [b->n, classes], valid until the next call.
 * No batch may be staged (stepper_drop_staged). */
const float *stepper_eval(stepper *s, const batch *b);
void stepper_free(stepper *s);
/* The recorded steps (train.cuda_graph) freed, before the exchange is: a
 * recording holds its NCCL collectives, and NCCL's finalisation waits until
 * none does. Later steps would record again. NULL-safe on a zeroed stepper. */
void stepper_drop_recordings(stepper *s);

/* Host arrays for the state on this rank: parameters and buffers always;
 * momentum when the optimizer has momentum, on rank 0 where the exchange
 * keeps the state (it alone reads and writes checkpoints and seeds the
 * servers) and on every rank elsewhere. step_state's scalars zeroed. Free
 * with host_state_free(&ss->hs). */
void stepper_state_alloc(const stepper *s, step_state *ss);
/* Rank 0, between steps, for a checkpoint: the state into ss (allocated by
 * stepper_state_alloc): the net's parameters and buffers, the momentum from
 * the optimizer or from where the exchange keeps it (the servers, whose
 * parameters asynchronous training also takes: newer than rank 0's), the
 * loss scaler and the dropout seed. */
void stepper_save(stepper *s, step_state *ss);
/* Every rank, from a checkpoint rank 0 read into ss (the scalars set alike
 * on every rank; arrays from stepper_state_alloc): the arrays travel from
 * rank 0 to every rank (a collective) and become the net's parameters and
 * buffers and the optimizer's momentum; the loss scaler and the dropout seed
 * continue from the scalars. Where the exchange keeps the state, rank 0
 * keeps the momentum for stepper_seed instead (it takes ss->hs.momentum). */
void stepper_restore(stepper *s, step_state *ss);
/* Every rank, once the starting weights are known (fresh, model.init_from
 * or a checkpoint: after stepper_restore): where the exchange keeps the
 * state, rank 0 hands it the net's parameters and the checkpoint's momentum
 * (zeros on a fresh start) (exchange_seed). A no-op elsewhere. */
void stepper_seed(stepper *s);

#endif
