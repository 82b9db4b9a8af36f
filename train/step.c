/*
 * train/step.c - one training step (see train/step.h).
 */
#include "train/step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/dist.h"

/* train.cuda_graph: whether this run's steps can be recorded and replayed
 * (what a replay would get wrong otherwise, or the backend cannot do), into
 * s->graph_why; if so, the device rate the update reads from then on. */
static void graph_setup(stepper *s) {
    const net *nt = s->nt;
    const backend *be = nt->be;
    const char *why = NULL, *xwhy = exchange_record_why(s->x);
    if (!be->capture_begin)
        why = "this backend runs each op as it is called";
    else if (xwhy)
        why = xwhy;
    else if (s->o.accumulate > 1)
        why = "train.accumulate > 1";
    else if (loss_scaler_active(&s->ls))
        why = "loss scaling checks the gradients for inf/NaN on the host in mid-step";
    else if (net_dropout_active(nt) && !be->dropout_mask_at)
        why = "this backend draws dropout masks only from a seed the host passes";
    else if (s->tl)
        why = "dist.timeline records each layer from the host";
    else if (s->o.emulate)
        why = "train.emulate_compute";
    if (why) {
        snprintf(s->graph_why, sizeof s->graph_why, "%s", why);
        return;
    }
    s->graph_on = 1;
    s->graph_x = s->x != exchange_none(); /* NCCL's allreduces recorded with the step */
    s->graph_vote = dist_allreduce_sum_f64;
    s->graph_last_set = -1;
    s->lr_dev = be->alloc(sizeof(float));
    s->opt.lr_at = s->lr_dev;
    /* each replay's masks from the seed stepper_run writes before it (the
     * backend has dropout_mask_at: checked above) */
    if (net_dropout_active(nt)) net_dropout_seed_on_device(s->nt);
}

void stepper_init(stepper *s, net *nt, exchange *x, timeline *tl, const optim_opts *oo, const loss_scale_opts *lso,
                  const step_opts *so, int max_batch, int c, int hw, int u8) {
    const backend *be = nt->be;
    memset(s, 0, sizeof *s);
    s->nt = nt;
    s->x = x;
    s->tl = tl;
    s->o = *so;
    optim_init(&s->opt, nt, oo);
    loss_scaler_init(&s->ls, lso);
    if (exchange_traits_of(x).keeps_state) {
        /* the servers update and keep the momentum: a worker's would only
         * take device memory (a model's worth) */
        CNT_ASSERT(!loss_scaler_active(&s->ls));
        optim_drop_momentum(&s->opt);
    }
    /* Batches reach the device one step ahead, on the copy stream. */
    s->st = stager_create(be, max_batch, c, hw, u8);
    size_t logits_bytes = (size_t)max_batch * nt->classes * sizeof(float);
    s->loss = be->alloc(sizeof(float));
    s->dlogits = be->alloc(logits_bytes);
    if (nt->aux_output >= 0) {
        s->aux_loss = be->alloc(sizeof(float));
        s->dlogits_aux = be->alloc(logits_bytes);
    }
    if (loss_scaler_active(&s->ls)) {
        s->overflow = be->alloc(sizeof(float));
        if (nt->n_buffers) s->buffers_before = be->alloc(nt->n_buffers * sizeof(float));
    }
    if (s->o.accumulate < 1) s->o.accumulate = 1;
    if (s->o.accumulate > 1) {
        s->grad_kept = be->alloc(nt->n_params * sizeof(float));
        s->loss_sum = be->alloc(sizeof(float));
    }
    if (s->o.cuda_graph) graph_setup(s);
}

void stepper_drop_recordings(stepper *s) {
    if (!s->nt) return;
    for (int k = 0; k < 2; k++)
        if (s->graphs[k].graph) s->nt->be->graph_free(s->graphs[k].graph);
    memset(s->graphs, 0, sizeof s->graphs);
}

void stepper_free(stepper *s) {
    if (!s->nt) return;
    const backend *be = s->nt->be;
    optim_free(&s->opt);
    stager_free(s->st);
    be->free(s->loss);
    be->free(s->dlogits);
    be->free(s->aux_loss);
    be->free(s->dlogits_aux);
    be->free(s->overflow);
    be->free(s->buffers_before);
    if (s->grad_kept) net_set_grad_accumulation(s->nt, NET_GRADS_HAND_ON, NULL); /* the net outlives the buffer */
    be->free(s->grad_kept);
    be->free(s->loss_sum);
    free(s->seed_momentum);
    stepper_drop_recordings(s);
    be->free(s->lr_dev);
    if (s->graph_on) net_dropout_seed_on_host(s->nt); /* the net outlives the steps that wrote the seed */
    memset(s, 0, sizeof *s);
}

/* Ends a phase: waits for the device when asked to (so the time is the
 * device's), records the phase on the timeline, returns its seconds. */
static double phase_end(const stepper *s, const char *name, const char *cat, double t0) {
    if (s->o.sync_phases) s->nt->be->sync();
    double t1 = time_now();
    if (s->tl) timeline_record(s->tl, name, cat, TIMELINE_TID_TRAIN, t0, t1);
    return t1 - t0;
}

/* Forward and loss; the loss scale S enters through the loss's gradient, so
 * every gradient is S times larger; the loss itself stays unscaled. */
static void forward_loss(stepper *s, const float *x, const int32_t *labels, int n, float scale) {
    net *nt = s->nt;
    const backend *be = nt->be;
    int K = nt->classes;
    net_forward(nt, x, n, 1);
    be->softmax_xent(n, K, net_logits(nt), labels, s->o.label_smoothing, s->loss, s->dlogits);
    if (scale != 1.0f) be->axpy((size_t)n * K, scale, s->dlogits, s->dlogits, 0);
    if (s->dlogits_aux) {
        /* Inception's auxiliary head: loss + aux_weight * aux_loss. */
        be->softmax_xent(n, K, net_aux_logits(nt), labels, s->o.label_smoothing, s->aux_loss, s->dlogits_aux);
        be->axpy((size_t)n * K, s->o.aux_weight * scale, s->dlogits_aux, s->dlogits_aux, 0);
        be->axpy(1, s->o.aux_weight, s->aux_loss, s->loss, 1);
    }
}

/* Loss scaling's check of the summed gradients: whether to apply the update.
 * Every rank checks the same bits (the allreduced sums), so every rank
 * decides alike without a message. *failed: the scaler gave up. */
static int gradients_finite(stepper *s, int *failed) {
    const backend *be = s->nt->be;
    float found = 0;
    exchange_wait_sums(s->x); /* NCCL: wait under the watchdog, not in a copy */
    be->zero(s->overflow, sizeof(float));
    be->find_nonfinite(s->nt->n_params, s->nt->grads, s->overflow);
    be->download(&found, s->overflow, sizeof found);
    return loss_scaler_update(&s->ls, found != 0, failed);
}

void stepper_set_prefetch(stepper *s, stepper_next_fn next, void *ctx) {
    CNT_ASSERT(!s->staged);
    s->next = next;
    s->next_ctx = ctx;
}

int stepper_staged(const stepper *s) { return s->staged; }

void stepper_drop_staged(stepper *s) {
    if (!s->staged) return;
    stager_release(s->st); /* nothing will read it */
    s->staged = 0;
}

/* The micro-batch's device batch: the one staged by the step before, or b
 * put in the stager now. Returns its size. */
static int take_batch(stepper *s, const batch *b, float **x, int32_t **labels) {
    if (s->staged) {
        CNT_ASSERT(!b);
        *x = s->staged_x;
        *labels = s->staged_labels;
        s->staged = 0;
        return s->staged_n;
    }
    CNT_ASSERT(b);
    stager_put(s->st, b, x, labels);
    return b->n;
}

/* Once backward is queued: the next batch from the prefetch, staged. */
static void stage_next(stepper *s) {
    if (!s->next) return;
    /* b, the loader's, may be reused from here on */
    const batch *nb = s->next(s->next_ctx);
    if (!nb) return;
    stager_put(s->st, nb, &s->staged_x, &s->staged_labels);
    s->staged_n = nb->n;
    s->staged = 1;
}

/* Forward, loss and backward of micro-batch s->micro of the step (the only
 * one without accumulation), adding its times and images to *r. The last
 * starts the exchange (step step_number at lr) and hands it the gradients,
 * the kept sum of the others added; the others keep theirs. */
static void micro_step(stepper *s, const batch *b, int last, long step_number, double lr, step_result *r) {
    net *nt = s->nt;
    const backend *be = nt->be;
    int K = s->o.accumulate, first = s->micro == 0;
    float *x;
    int32_t *labels;
    int n = take_batch(s, b, &x, &labels);
    r->n += n;
    if (first && s->buffers_before) be->copy(s->buffers_before, nt->buffers, nt->n_buffers * sizeof(float));

    double t = time_now();
    forward_loss(s, x, labels, n, (float)(s->ls.scale / K)); /* the sum of K is the mean's gradient */
    if (K > 1) {
        be->axpy(1, 1.0f / (float)K, s->loss, s->loss_sum, !first);
        if (last) be->copy(s->loss, s->loss_sum, sizeof(float)); /* the step's loss: the micro-batches' mean */
    }
    r->forward_s += phase_end(s, "forward", "forward", t);

    t = time_now();
    if (last) exchange_begin(s->x, step_number, lr);
    if (K > 1)
        net_set_grad_accumulation(nt, last ? NET_GRADS_ADD_KEPT : first ? NET_GRADS_KEEP_FIRST : NET_GRADS_KEEP_MORE,
                                  s->grad_kept);
    net_backward(nt, s->dlogits, s->dlogits_aux); /* the grad hook hands each finished slice to the exchange */
    if (K > 1) net_set_grad_accumulation(nt, NET_GRADS_HAND_ON, NULL);
    stager_release(s->st);                          /* backward was the last reader of the batch */
    r->backward_s += phase_end(s, "backward", "backward", t);
    stage_next(s);
    s->micro = last ? 0 : s->micro + 1;
}

void stepper_accumulate(stepper *s, const batch *b) {
    CNT_ASSERT(s->micro < s->o.accumulate - 1);
    if (s->micro == 0) memset(&s->pending, 0, sizeof s->pending);
    micro_step(s, b, 0, 0, 0.0, &s->pending);
}

/* The recorded step of s's input slot x (with labels) and batch size n, if
 * one is current (recorded under the backend's present memory epoch); else
 * the entry to record it into: that slot's stale one, an empty one, or one
 * of another slot's, not the one the last step launched (its NCCL round is
 * read after this step is queued; the other slot's owner records again when
 * it comes back). */
static struct step_graph *graph_for(stepper *s, const float *x, const int32_t *labels, int n, int *current) {
    uint64_t epoch = s->nt->be->memory_epoch();
    struct step_graph *same = NULL, *empty = NULL;
    for (int k = 0; k < 2; k++) {
        struct step_graph *g = &s->graphs[k];
        if (!g->graph) {
            if (!empty) empty = g;
        } else if (g->x == x && g->labels == labels) {
            same = g;
        }
    }
    *current = same && same->n == n && same->epoch == epoch;
    return same ? same : empty ? empty : &s->graphs[s->graph_last_set == 0];
}

/* train.cuda_graph: the step on batch b as one launch of its recording, made
 * now where none is current (recording runs nothing on a GPU: the launch
 * after it runs this step). Forward, loss, the exchange, backward and update
 * as stepper_run's eager path runs them without loss scaling or
 * accumulation (graph_setup's conditions); with several ranks the exchange's
 * NCCL allreduces are in the recording, and each replay does the exchange's
 * host part after its launch (exchange_replayed). stepper_run has written
 * the rate to lr_dev. The phase times are the host's time to queue, all in
 * forward_s. */
static int graph_step(stepper *s, const batch *b, long step_number, double lr, step_result *r) {
    net *nt = s->nt;
    const backend *be = nt->be;
    memset(r, 0, sizeof *r);
    float *x;
    int32_t *labels;
    int n = take_batch(s, b, &x, &labels);
    r->n = n;
    double t = time_now();
    float l = (float)lr; /* in lr_dev already (stepper_run) */
    int current;
    struct step_graph *g = graph_for(s, x, labels, n, &current);
    int set = (int)(g - s->graphs); /* the exchange's events of this recording */
    if (s->graph_rerecord) current = 0; /* another rank records (graph_agreed) */
    /* a recording's NCCL round is read one step later, before its events
     * are recorded again: so never the same recording twice in a row. It
     * holds by construction: with an exchange only staged batches launch
     * (graph_agreed), each step stages one batch, and the stager's two slots
     * alternate, so consecutive launches are of the two slots' recordings. */
    CNT_ASSERT(!s->graph_x || set != s->graph_last_set);
    if (!current) {
        if (g->graph) be->graph_free(g->graph);
        g->graph = NULL;
        exchange_record(s->x, set); /* its host waits first: a recording cannot hold them */
        be->capture_begin();
        /* as the eager path with K = 1 and the scale at 1 (graph_setup); the
         * exchange's hook queues NCCL's allreduces into the recording */
        float scale = (float)s->ls.scale;
        forward_loss(s, x, labels, n, scale);
        exchange_begin(s->x, step_number, lr);
        net_backward(nt, s->dlogits, s->dlogits_aux);
        exchange_finish(s->x, &r->xs);
        optim_step(&s->opt, nt, l, (float)(1.0 / (exchange_workers(s->x) * (double)scale)));
        char why[256] = "";
        g->graph = be->capture_end(why, sizeof why);
        exchange_record(s->x, -1);
        if (!g->graph) {
            /* with several ranks the others recorded and launch: their
             * collectives would wait for this rank until the stall limit */
            if (s->graph_x)
                cnt_fatal("train.cuda_graph: rank %d could not record step %ld (%s); set train.cuda_graph = false",
                          dist_rank(), step_number, why);
            stager_release(s->st);
            return cnt_err_set("train.cuda_graph: the step could not be recorded (%s); set train.cuda_graph = false",
                               why);
        }
        g->x = x;
        g->labels = labels;
        g->n = n;
        g->epoch = be->memory_epoch();
        s->recorded++;
        be->graph_launch(g->graph);
    } else {
        s->replayed++;
        nt->dropout_seed++; /* what the recorded forward's net_forward did (its masks read it: stepper_run) */
        be->graph_launch(g->graph);
        exchange_replayed(s->x, step_number, set, &r->xs); /* what the recorded exchange did on the host */
    }
    s->graph_last_set = set;
    stager_release(s->st); /* the launch was the last reader of the batch */
    r->forward_s = time_now() - t;
    stage_next(s);
    r->applied = r->loss_counts = 1;
    return CNT_OK;
}

/* Whether this step (on batch b, or the staged one) goes through
 * graph_step: recording is on, the batch is full (an epoch's last, smaller
 * batch runs eagerly rather than be recorded for one use), the eager steps
 * are done, and nothing would run host code inside the step (a profile's
 * layer hooks, phase waits, a gradient hook that is not the exchange's). */
static int graph_here(stepper *s, const batch *b) {
    /* a grad hook other than the exchange's (which records its work) is host code in backward */
    if (s->o.sync_phases || s->nt->node_hook || (s->nt->grad_hook && !s->graph_x)) return 0;
    int n = s->staged ? s->staged_n : b->n;
    /* a full batch: train.batch_size (a run resumed at an epoch's last, short
     * batch must not record that size), or the run's first */
    if (!s->graph_batch) s->graph_batch = s->o.batch > 0 ? s->o.batch : n;
    if (n != s->graph_batch) return 0;
    if (s->graph_warm < STEP_GRAPH_WARM) {
        s->graph_warm++;
        return 0;
    }
    return 1;
}

/* With NCCL's collectives in the recordings, whether a step's are
 * recorded, replayed or run op by op must be the same on every rank (NCCL's
 * rule for captured collectives), while what decides it is each rank's own
 * (its batch's size, its backend's memory epoch): the ranks agree, op by op
 * if any rank would, recording again if any rank must. A staged batch only
 * (the slot it is in is known); training stages every batch after the
 * first. */
static int graph_agreed(stepper *s, const batch *b) {
    int here = graph_here(s, b) && s->staged, current = 0;
    if (here) graph_for(s, s->staged_x, s->staged_labels, s->staged_n, &current);
    double v[2] = {!here, here && !current};
    dist_phase("train.cuda_graph: whether this step is a recording's launch");
    s->graph_vote(v, 2);
    s->graph_rerecord = v[1] > 0;
    return v[0] == 0;
}

static int graph_now(stepper *s, const batch *b) {
    if (!s->graph_on) return 0;
    return s->graph_x ? graph_agreed(s, b) : graph_here(s, b);
}

int stepper_run(stepper *s, const batch *b, long step_number, double lr, step_result *r) {
    net *nt = s->nt;
    const backend *be = nt->be;
    CNT_ASSERT(s->micro == s->o.accumulate - 1); /* every micro-batch before this one taken */
    if (s->lr_dev) { /* train.cuda_graph: the update reads the rate there, recorded or not (stream order) */
        float l = (float)lr;
        be->upload(s->lr_dev, &l, sizeof l);
        net_dropout_seed_upload(nt); /* and dropout masks this step's seed (nothing without dropout) */
    }
    if (graph_now(s, b)) return graph_step(s, b, step_number, lr, r);
    s->graph_last_set = -1; /* this step's round is its own */
    if (s->micro > 0) *r = s->pending;
    else memset(r, 0, sizeof *r);
    float scale = (float)s->ls.scale;
    micro_step(s, b, 1, step_number, lr, r);

    /* What is still in flight: summed gradients, which the update divides
     * by the workers, or parameters the servers updated, which end the step. */
    const char *wait = exchange_traits_of(s->x).wait_phase;
    double t = time_now();
    exchange_finish(s->x, &r->xs);
    if (wait) r->comm_wait_s = phase_end(s, wait, "comm", t);
    if (r->xs.updated) {
        r->applied = r->loss_counts = 1;
        return CNT_OK;
    }

    t = time_now();
    r->applied = 1;
    if (s->o.emulate) {
        /* emulated compute: the update's time, nothing updated (the sums are
         * complete first, as the update would need them) */
        exchange_wait_sums(s->x);
        time_sleep_until(t + 1e-3 * s->o.emulate_update_ms);
        r->update_s = phase_end(s, "optimizer", "optimizer", t);
        r->loss_counts = 1;
        return CNT_OK;
    }
    if (s->overflow) {
        int failed;
        r->applied = gradients_finite(s, &failed);
        if (failed) return CNT_ERR;
    }
    /* Sums over ranks of S-times gradients: the update divides both out. */
    double workers = exchange_workers(s->x);
    if (r->applied) optim_step(&s->opt, nt, (float)lr, (float)(1.0 / (workers * (double)scale)));
    r->update_s = phase_end(s, "optimizer", "optimizer", t);

    r->loss_counts = r->applied;
    if (!r->applied) {
        /* The host has waited for this step anyway: its loss counts when
         * finite. And its forward's batch-norm statistics go: a skipped step
         * changes nothing. */
        float l;
        be->download(&l, s->loss, sizeof l);
        r->loss_counts = isfinite(l);
        if (nt->n_buffers) be->copy(nt->buffers, s->buffers_before, nt->n_buffers * sizeof(float));
    }
    return CNT_OK;
}

const float *stepper_eval(stepper *s, const batch *b) {
    CNT_ASSERT(!s->staged);
    net *nt = s->nt;
    float *x;
    int32_t *labels;
    stager_put(s->st, b, &x, &labels);
    net_forward(nt, x, b->n, 0);
    nt->be->softmax_xent(b->n, nt->classes, net_logits(nt), labels, 0.0f, s->loss, s->dlogits);
    stager_release(s->st);
    return net_logits(nt);
}

void stepper_state_alloc(const stepper *s, step_state *ss) {
    memset(ss, 0, sizeof *ss);
    int here = !exchange_traits_of(s->x).keeps_state || dist_rank() == 0;
    host_state_alloc(&ss->hs, s->nt, s->opt.o.momentum > 0.0f && here);
}

void stepper_save(stepper *s, step_state *ss) {
    host_state_download(&ss->hs, s->nt, s->opt.momentum_buf);
    exchange_fetch_state(s->x, ss->hs.params, ss->hs.momentum);
    ss->dropout_seed = s->nt->dropout_seed;
    if (loss_scaler_active(&s->ls)) {
        ss->loss_scale = s->ls.scale;
        ss->loss_scale_good = s->ls.good;
        ss->skipped = s->ls.skipped;
        ss->skipped_in_a_row = s->ls.in_a_row;
    }
}

void stepper_restore(stepper *s, step_state *ss) {
    if (exchange_traits_of(s->x).keeps_state) {
        /* rank 0's, or NULL: it goes to the servers (stepper_seed), not to the workers */
        free(s->seed_momentum);
        s->seed_momentum = ss->hs.momentum;
        ss->hs.momentum = NULL;
    }
    host_state_broadcast(&ss->hs, s->nt);
    host_state_upload(&ss->hs, s->nt, s->opt.momentum_buf);
    s->nt->dropout_seed = ss->dropout_seed;
    loss_scaler_restore(&s->ls, ss->loss_scale, ss->loss_scale_good, ss->skipped, ss->skipped_in_a_row);
}

void stepper_seed(stepper *s) {
    if (!exchange_traits_of(s->x).keeps_state || dist_rank() != 0) return;
    net *nt = s->nt;
    ps_shape shape = {nt->in_c, nt->in_h, nt->in_w, nt->classes};
    host_state hs;
    host_state_alloc(&hs, nt, 0); /* the workers keep no momentum */
    host_state_download(&hs, nt, NULL);
    exchange_seed(s->x, &shape, hs.params, s->seed_momentum); /* NULL: zeros */
    host_state_free(&hs);
    free(s->seed_momentum);
    s->seed_momentum = NULL;
}
