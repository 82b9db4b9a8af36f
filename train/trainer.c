/*
 * train/trainer.c - a training run, start to end.
 *
 *   trainer_run:  the ranks agree on the config; the exchange
 *                 (dist/exchange.h) is created: a parameter-server rank
 *                 leaves here for its own run (train/ps_server.c)
 *                 run_setup   device, data, model on rank 0's weights,
 *                             loaders, the exchange bound to the net, the
 *                             stepper (train/run_setup.c)
 *                 run_resume  checkpoint.resume: the state and the position
 *                             in the data; checkpoints beyond that point
 *                             moved aside; metrics.jsonl and config.ini
 *                             (train/run_ckpt.c)
 *                 run_epoch   the steps of an epoch (train/step.h), a
 *                             progress line every train.log_every steps, a
 *                             checkpoint every checkpoint.every_steps, the
 *                             stop signals (train/stop.h) agreed on
 *                 end_epoch   the ranks' parameters compared, evaluation
 *                             (skipped with emulated compute, train/emulate.h),
 *                             the epoch's summary, a checkpoint
 *                 run_finish  the last line, the timeline
 *                 run_free    everything, on every path
 *
 * Counters, lines and metrics records live in train/progress.c; the step in
 * train/step.c; evaluation in train/eval.c.
 */
#include "train/trainer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "model/zoo.h"
#include "train/eval.h"
#include "train/metrics.h"
#include "train/plans.h"
#include "train/profile.h"
#include "train/ps_server.h"
#include "train/run.h"
#include "train/stop.h"

/* Whether checkpoints are written at all. */
static int ckpt_on(const config *cfg) { return cfg->ckpt_every > 0 || cfg->ckpt_every_steps > 0; }

/* The stepper's prefetch (stepper_set_prefetch), called inside micro-batch
 * r->micro of step r->step + 1 once its backward is queued: the step's next
 * micro-batch, or the first batch of the step after it unless that step is
 * not in this epoch or this run (then the loop ends the epoch, as without
 * prefetch). The loader's position moves one batch early, but checkpoints
 * record epoch_step, not the loader's position, and a run that stops with a
 * batch staged drops it. */
static const batch *next_batch(void *ctx) {
    run *r = ctx;
    r->next_wait_s = 0;
    int step_ends = r->micro + 1 >= r->cfg->accumulate;
    if (step_ends && (r->step + 1 >= r->total_steps || r->epoch_step + 1 >= r->steps_per_epoch)) return NULL;
    double t0 = time_now();
    const batch *b = loader_next(r->train_ld);
    double t1 = time_now();
    r->next_wait_s = t1 - t0;
    if (r->tl) timeline_record(r->tl, "data wait (next step's batch)", "data", TIMELINE_TID_TRAIN, t0, t1);
    return b;
}

/* The micro-batch to step now: *b from the loader, or NULL where the
 * prefetch staged it (its wait, during the micro-batch before, is
 * r->next_wait_s). The wait is added to *wait_s. 0 when the epoch's data
 * has ended. */
static int take_batch(run *r, const batch **b, double *wait_s) {
    *b = NULL;
    if (stepper_staged(&r->st)) {
        *wait_s += r->next_wait_s;
        return 1;
    }
    double t0 = time_now();
    *b = loader_next(r->train_ld);
    double t1 = time_now();
    if (!*b) return 0;
    *wait_s += t1 - t0;
    if (r->tl) timeline_record(r->tl, "data wait", "data", TIMELINE_TID_TRAIN, t0, t1);
    return 1;
}

/* One optimizer step: train.accumulate micro-batches (stepper_accumulate,
 * then stepper_run for the last), *wait_s the time they waited for data.
 * 0 when the epoch's data has ended before the step began; CNT_ERR as
 * stepper_run; 1 once stepped. */
static int take_step(run *r, double lr, step_result *sr, double *wait_s) {
    const batch *b = NULL;
    int K = r->cfg->accumulate;
    for (r->micro = 0; r->micro < K; r->micro++) {
        if (!take_batch(r, &b, wait_s)) {
            CNT_ASSERT(r->micro == 0); /* steps_per_epoch counts whole steps only */
            return 0;
        }
        if (r->micro < K - 1) stepper_accumulate(&r->st, b);
    }
    r->micro = K - 1;
    return stepper_run(&r->st, b, r->step + 1, lr, sr) == CNT_OK ? 1 : CNT_ERR;
}

/* The stop signal (train/stop.h) every rank acts on at this step boundary
 * (exchange_agree_stop: any rank's, at the same step everywhere). 0: none. */
static int agree_stop(const run *r) { return exchange_agree_stop(r->x, r->step, stop_pending()); }

/* A stop signal agreed on now, outside the steps' lagged exchange (start-up,
 * after a checkpoint or an epoch): the lowest rank's, 0 for none. A
 * collective, named `phase` for the stall lines. */
static int agree_stop_now(const char *phase) {
    dist_phase(phase);
    return (int)dist_first_nonzero(stop_pending());
}

/* Whether end_epoch writes a checkpoint: `save` (this step's own reasons),
 * or checkpoint.every_epochs says so. */
static int save_at_epoch_end(const run *r, int epoch, int save) {
    const config *cfg = r->cfg;
    return save || (cfg->ckpt_every > 0 && ((epoch + 1) % cfg->ckpt_every == 0 || epoch + 1 == cfg->epochs));
}

/* The steps of one epoch: *done once the run's last step is taken, the loss
 * diverged or a stop signal came. Checkpoints inside the epoch are written
 * here (checkpoint.every_steps, the last step of a run that ends inside an
 * epoch, a stop signal); at the epoch's end, end_epoch writes it, after the
 * evaluation. A step that closes a checkpoint also closes a progress window,
 * so the records a resumed run writes are those of an uninterrupted one.
 * CNT_ERR when the step failed (loss scaling gave up, on every rank alike:
 * the decision rests on allreduced gradients) or a file could not be
 * written (rank 0). */
static int run_epoch_steps(run *r, int epoch, int *done) {
    const config *cfg = r->cfg;
    r->epoch = epoch;
    r->epoch_step = epoch == r->start_epoch ? r->first_epoch_step : 0;
    loader_start_epoch_at(r->train_ld, epoch, (int)(r->epoch_step * r->cfg->accumulate));
    progress_epoch_begin(r->pg, epoch);
    if (r->epoch_step == r->steps_per_epoch) /* resumed with only the evaluation left (r->eval_first) */
        r->save_at_epoch_end = save_at_epoch_end(r, epoch, ckpt_on(cfg) && r->step >= r->total_steps);
    /* batches beyond the last whole step of accumulate are not trained */
    while (r->epoch_step < r->steps_per_epoch) {
        if (r->tl) timeline_set_step(r->tl, r->step + 1);
        double t0 = time_now(), wait = 0;
        if (stepper_staged(&r->st)) t0 -= r->next_wait_s; /* the wait it had, during the step before */
        /* the schedule follows the position in the data (the same as the
         * step count unless a resume changed the steps per epoch) */
        double lr = schedule_lr(&r->sched, (long)epoch * r->steps_per_epoch + r->epoch_step);
        step_result sr;
        int took = take_step(r, lr, &sr, &wait);
        if (took == 0) return CNT_OK;
        if (took == CNT_ERR) {
            *done = 1;
            return cnt_err_prefix("train.precision = %s, train.loss_scaling = %s, step %ld",
                                  config_name(cfg, &cfg->precision), config_name(cfg, &cfg->loss_scaling),
                                  r->step + 1);
        }
        double t2 = time_now();
        r->step++;
        r->epoch_step++;
        /* The host reads the device after the first step (its loss), at a
         * progress line, a checkpoint and an epoch's end: with NCCL the
         * compute stream waits for this step's sums, so the sums are waited
         * for first, under the stall limits, not inside an unbounded copy. */
        int epoch_end = r->epoch_step == r->steps_per_epoch;
        if (r->step == r->first_step + 1) exchange_wait_sums(r->x);
        progress_step(r->pg, r->step, &sr, r->st.loss, sr.n, wait, t2 - t0);
        if (!r->plans_shared) { /* every rank's first step of this run chose its own */
            plans_share(r->be, cfg->out_dir, 1);
            r->plans_shared = 1;
        }
        int last = r->step >= r->total_steps;
        int stop = agree_stop(r);
        int every = cfg->ckpt_every_steps > 0 && r->step % cfg->ckpt_every_steps == 0;
        int save = ckpt_on(cfg) && (every || stop || last);
        if (epoch_end) r->save_at_epoch_end = save_at_epoch_end(r, epoch, save);
        int log_now = r->step % cfg->log_every == 0 || last || save || (epoch_end && r->save_at_epoch_end);
        if (log_now || epoch_end || stop) exchange_wait_sums(r->x);
        if (!log_now) progress_first_step(r->pg, r->step, t2 - t0, cfg->log_every);
        if (log_now) {
            int lg = progress_log(r->pg, r->step, lr, &r->st.ls);
            if (lg == CNT_ERR) return CNT_ERR;
            if (lg == PROGRESS_DIVERGED) {
                r->diverged = *done = 1; /* evaluate and stop, saving nothing */
                r->save_at_epoch_end = 0;
                return CNT_OK;
            }
        }
        long samples = r->epoch_step * run_samples_per_step(r);
        if (save && !epoch_end && run_save_checkpoint(r, epoch, samples) != CNT_OK) return CNT_ERR;
        if (save && !epoch_end && !stop && !last) {
            /* A stop signal that came while the checkpoint was written stops
             * the run on it, not a step and a checkpoint later: the ranks
             * agree once a checkpoint (every rank saves at the same steps). */
            stop = agree_stop_now("stop-signal check after a checkpoint");
        }
        if (stop) {
            r->stopped = stop;
            *done = 1;
            return CNT_OK;
        }
        if (last) {
            *done = 1;
            return CNT_OK;
        }
    }
    return CNT_OK;
}

/* The steps of one epoch (run_epoch_steps), then a batch staged for a step
 * that will not come (the run stopped inside the epoch) let go, so that
 * evaluation has the stager. */
static int run_epoch(run *r, int epoch, int *done) {
    int rc = run_epoch_steps(r, epoch, done);
    stepper_drop_staged(&r->st);
    return rc;
}

/* Where gradients may be stale (asynchronous parameter servers), after an
 * epoch, on rank 0: how stale the gradients the servers applied were (all
 * shards' counted), logged and recorded in metrics.jsonl. */
static int log_staleness(run *r, int epoch, const ps_staleness *all) {
    double mean = all->applied > 0 ? all->sum / all->applied : 0;
    char hist[256];
    size_t o = 0;
    for (int i = 0; i < PS_HIST && o + 24 < sizeof hist; i++)
        if (all->hist[i] > 0)
            o += (size_t)snprintf(hist + o, sizeof hist - o, "%s%s%d: %.0f", o ? ", " : "", i == PS_HIST - 1 ? ">=" : "",
                                  i, all->hist[i]);
    log_info("epoch %d/%d staleness of the applied gradients (every server's shards): mean %.2f, max %.0f over %.0f; "
             "by staleness %s",
             epoch + 1, r->cfg->epochs, mean, all->max, all->applied, hist);
    return metrics_staleness(progress_metrics(r->pg), epoch + 1, r->step, mean, all->max, all->applied, all->hist,
                             PS_HIST);
}

/* Whether a stop during this epoch's evaluation writes a checkpoint whose
 * position says every step is done, which a resume evaluates first: the
 * epoch's steps all done, not diverged, checkpoints on. (Otherwise a stop
 * or train.max_steps inside the epoch wrote one already, or none is due.) */
static int eval_stop_saves(const run *r) {
    return r->epoch_step == r->steps_per_epoch && !r->diverged && ckpt_on(r->cfg);
}

/* A stop signal ended the evaluation after an epoch's steps: the run stops,
 * with a checkpoint at this step when eval_stop_saves. */
static int stop_in_eval(run *r, int epoch, int signal) {
    r->stopped = signal;
    r->stopped_in_eval = 1;
    r->save_at_epoch_end = 0;
    int complete = r->epoch_step == r->steps_per_epoch;
    char why[96];
    snprintf(why, sizeof why, "%s during the evaluation%s", stop_signal_name(signal),
             complete ? "; a resume evaluates it first" : "");
    if (progress_epoch_end(r->pg, NULL, why, loader_skipped(r->train_ld), loader_skipped(r->test_ld)) != CNT_OK)
        return CNT_ERR;
    if (eval_stop_saves(r) && run_save_checkpoint(r, epoch, r->epoch_step * run_samples_per_step(r)) != CNT_OK)
        return CNT_ERR;
    return CNT_OK;
}

/* After an epoch's steps: the ranks' parameters compared, evaluation, the
 * epoch's summary, a checkpoint when due. */
static int end_epoch(run *r, int epoch) {
    const config *cfg = r->cfg;
    progress_epoch_trained(r->pg);
    /* Batch-norm statistics stay per rank during training (as in Horovod);
     * evaluate every shard with rank 0's, so N ranks score what one would. */
    ps_staleness window;
    if (exchange_epoch_end(r->x, &window) && log_staleness(r, epoch, &window) != CNT_OK) return CNT_ERR;
    if (r->world > 1) {
        if (run_check_params_identical(r->nt, r->peers.params) != CNT_OK) return CNT_ERR;
        log_info("epoch %d/%d: parameters bit-identical on all %d ranks", epoch + 1, cfg->epochs, r->world);
        if (r->nt->n_buffers) {
            r->be->download(r->peers.buffers, r->nt->buffers, r->nt->n_buffers * sizeof(float));
            dist_phase("batch-norm buffer broadcast");
            dist_broadcast(r->peers.buffers, r->nt->n_buffers * sizeof(float), 0);
            r->be->upload(r->nt->buffers, r->peers.buffers, r->nt->n_buffers * sizeof(float));
        }
    }
    eval_result er;
    int evaluated = !r->emu.n_nodes; /* an emulated net computes no logits to score */
    double t_eval = time_now();
    if (evaluated && evaluate(&r->st, r->test_ld, stop_pending, &er) != CNT_OK) {
        const char *root = r->data.test.root ? r->data.test.root : cfg->data_root;
        return cnt_err_prefix("epoch %d/%d, test set %s", epoch + 1, cfg->epochs, root);
    }
    if (r->tl && evaluated) timeline_record(r->tl, "evaluate", "eval", TIMELINE_TID_TRAIN, t_eval, time_now());
    if (evaluated && er.stopped) return stop_in_eval(r, epoch, er.stopped);
    if (progress_epoch_end(r->pg, evaluated ? &er : NULL, "emulated compute", loader_skipped(r->train_ld),
                           loader_skipped(r->test_ld)) != CNT_OK)
        return CNT_ERR;
    int complete = r->epoch_step == r->steps_per_epoch;
    /* checkpoint.keep_best: a better test top-1 than any kept is saved, due or not (rank 0 decides: it alone
     * writes, and knows the best so far) */
    int best = r->rank == 0 && cfg->ckpt_keep_best && ckpt_on(cfg) && evaluated && complete && !r->diverged &&
               er.top1 > r->best_top1;
    int64_t saved = complete && (r->save_at_epoch_end || best);
    if (r->world > 1 && cfg->ckpt_keep_best) { /* best is rank 0's alone; every rank makes the call */
        dist_phase("checkpoint decision");
        dist_broadcast(&saved, sizeof saved, 0);
    }
    if (saved && run_save_checkpoint(r, epoch + 1, 0) != CNT_OK) return CNT_ERR;
    if (best) run_keep_best(r, epoch + 1, &er);
    r->save_at_epoch_end = 0;
    /* A stop signal that came after this rank's evaluation or during the
     * checkpoint stops the run here, not one step into the next epoch. */
    if (r->stopped || r->diverged || r->step >= r->total_steps) return CNT_OK;
    if ((r->stopped = agree_stop_now("stop-signal check after an epoch")) != 0 && !saved && complete && ckpt_on(cfg) &&
        run_save_checkpoint(r, epoch + 1, 0) != CNT_OK)
        return CNT_ERR;
    return CNT_OK;
}

static int run_train(run *r) {
    /* A stop signal during start-up (data, model, resume: minutes on a
     * large data set) ends the run before its first step, with nothing new
     * to save; the ranks agree on it here. */
    if ((r->stopped = agree_stop_now("stop-signal check before the first step")) != 0) {
        r->stopped_at_start = 1;
        return CNT_OK;
    }
    int done = 0;
    for (int epoch = r->start_epoch;
         epoch < r->cfg->epochs && !done && (r->step < r->total_steps || (epoch == r->start_epoch && r->eval_first));
         epoch++) {
        if (run_epoch(r, epoch, &done) != CNT_OK) return CNT_ERR;
        /* a stop inside an epoch ends at once: its checkpoint is written, the evaluation would only delay */
        if (r->stopped && r->epoch_step < r->steps_per_epoch) break;
        if (end_epoch(r, epoch) != CNT_OK) return CNT_ERR;
        if (r->stopped) break; /* during the evaluation */
    }
    /* the last step's stop-signal exchange, still in flight on every rank (all stop at the same step) */
    exchange_agree_stop_drain(r->x);
    return CNT_OK;
}

/* How an early end is said in the last line: a stop signal, or
 * train.max_steps inside an epoch; NULL for a run that did all its epochs. */
static const char *how_stopped(const run *r, char *buf, size_t len) {
    const config *cfg = r->cfg;
    const char *saved = ckpt_on(cfg) ? "checkpoint written; resume with checkpoint.resume = auto"
                                     : "no checkpoint (checkpoint.every_epochs and checkpoint.every_steps are 0)";
    if (r->stopped && r->stopped_at_start) {
        snprintf(buf, len, "%s during start-up, before step %ld; nothing trained, nothing new to save; %s",
                 stop_signal_name(r->stopped), r->step + 1,
                 r->step > 0 ? "resume with checkpoint.resume = auto as this run did" : "start it again");
        return buf;
    }
    if (r->stopped && r->stopped_in_eval) {
        snprintf(buf, len, "%s during epoch %d/%d's evaluation, after step %ld; %s%s", stop_signal_name(r->stopped),
                 r->epoch + 1, cfg->epochs, r->step, eval_stop_saves(r) ? "a resume evaluates it first; " : "", saved);
        return buf;
    }
    if (r->stopped) {
        snprintf(buf, len, "%s at step %ld, %ld of %ld steps into epoch %d/%d; %s", stop_signal_name(r->stopped),
                 r->step, r->epoch_step, r->steps_per_epoch, r->epoch + 1, cfg->epochs, saved);
        return buf;
    }
    if (!r->diverged && cfg->max_steps > 0 && r->step == cfg->max_steps && r->epoch_step < r->steps_per_epoch) {
        snprintf(buf, len, "train.max_steps = %ld reached %ld of %ld steps into an epoch; the partial epoch was "
                 "%s; %s",
                 cfg->max_steps, r->epoch_step, r->steps_per_epoch, r->emu.n_nodes ? "not evaluated" : "evaluated",
                 saved);
        return buf;
    }
    return NULL;
}

/* The last line and, for a run that got through, the timeline: a collective
 * gather to rank 0, which every rank reaches (the loop ends at the same step
 * everywhere). A rank that failed (rank 0 alone, writing a checkpoint) skips
 * it: the others are in other collectives, and main() ends the job. */
static int run_finish(run *r, int status, train_result *res) {
    /* what a resume would start from: the last line says it now, not an abort */
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", cnt_last_words());
    cnt_set_last_words(NULL);
    /* train.cuda_graph: whether the recording was used, not only set up */
    if (r->st.graph_on)
        log_info("cuda graph: %ld steps were one launch of a recording (%ld recording%s made); the others ran op by op",
                 r->st.replayed + r->st.recorded, r->st.recorded, r->st.recorded == 1 ? "" : "s");
    char why[512];
    status = progress_finish(r->pg, status, r->step, &r->st.ls, status == CNT_OK ? how_stopped(r, why, sizeof why) : NULL,
                             saved[0] ? saved : NULL, res);
    if (res) res->stop_signal = status == CNT_OK ? r->stopped : 0;
    if (!r->tl || status != CNT_OK) return status;
    net_set_node_hook(r->nt, NULL, NULL);
    exchange_set_timeline(r->x, NULL);
    char path[2 * CONFIG_STR + 8];
    run_path_in_out_dir(r->cfg, r->cfg->timeline, path, sizeof path);
    dist_phase("timeline gather");
    int written = timeline_write(r->tl, path) == CNT_OK;
    if (r->rank == 0) exchange_trace_written(r->x, written); /* the servers' parts go once it is written */
    if (!written) return CNT_ERR;
    if (r->rank == 0) log_info("timeline: %s (open in chrome://tracing or ui.perfetto.dev)", path);
    return CNT_OK;
}

static void run_free(run *r, int status) {
    progress_free(r->pg);
    /* before the exchange: NCCL's finalisation waits until no recording
     * holds its collectives, which the recordings' destruction releases */
    stepper_drop_recordings(&r->st);
    exchange_free(r->x, status != CNT_OK); /* its communication thread records into the timeline */
    timeline_free(r->tl);
    stepper_free(&r->st);
    host_state_free(&r->peers);
    loader_free(r->train_ld);
    loader_free(r->test_ld);
    net_free(r->nt);
    emulation_free(&r->emu);
    if (r->bucket_prof) profile_free(r->bucket_prof); /* a start-up that failed before the buckets were chosen */
    free(r->bucket_prof);
    input_free(&r->data);
    run_unlock_out_dir(r);
}

/* The worker's run, once the exchange exists. */
static int run_worker(run *r, train_result *res) {
    int status = run_setup(r);
    if (status == CNT_OK) stepper_set_prefetch(&r->st, next_batch, r);
    if (status == CNT_OK) status = run_resume(r);
    if (status == CNT_OK) stepper_seed(&r->st);
    if (r->pg) {
        r->first_step = r->step;
        progress_start(r->pg, r->step, r->st.ls.skipped, r->total_steps);
        if (status == CNT_OK) status = run_train(r);
        /* the servers serve until every worker has said so (a failed run ends the job instead: main) */
        if (status == CNT_OK) exchange_end(r->x);
        status = run_finish(r, status, res);
    }
    return status;
}

int trainer_run(const config *cfg, train_result *res) {
    run r = {.cfg = cfg, .lock_fd = -1, .best_top1 = -1};
    stop_install();
    /* First of all, before any collective that a key decides (the exchange's,
     * the timeline's, the watchdog's): ranks launched with different keys
     * would otherwise join different collectives and wait on each other. */
    exchange_opts xo = config_exchange_opts(cfg);
    /* Job rank 0 (always a worker) takes train.out_dir's lock before any
     * rank writes there (a timeline part, config.ini, metrics.jsonl): a run
     * refused by the lock must not have touched the running run's files.
     * The others wait in the next collective until main() ends the job. */
    int status = dist_job_rank() == 0 ? run_lock_out_dir(&r) : CNT_OK;
    if (status == CNT_OK) status = run_check_same_config(cfg, 0);
    if (status == CNT_OK) status = exchange_create(&xo, &r.x);
    r.rank = dist_rank();
    r.world = dist_world();
    if (status == CNT_OK && exchange_is_server(r.x)) {
        status = ps_server_run(cfg, r.x);
        if (res) memset(res, 0, sizeof *res);
    } else if (status == CNT_OK) {
        status = run_worker(&r, res);
    }
    run_free(&r, status);
    stop_restore();
    return status;
}

int trainer_summary_config(const config *cfg, FILE *out) {
    /* The data's shape and classes are all a summary needs: a synthetic set
     * of one image each instead of data.synthetic_train's 10,000 (VGG-16's
     * summary at 224x224 took 5.9 s, nearly all of it making images). */
    config c = *cfg;
    if (c.data_kind == DATA_KIND_SYNTHETIC) c.synthetic_train = c.synthetic_test = 1;
    input_data d;
    if (input_load(&c, &d) != CNT_OK) return CNT_ERR;
    net *nt = run_build_model(backend_cpu(), cfg, d.train.c, d.train.h, d.train.w, d.train.classes, 1);
    input_free(&d);
    if (!nt) return CNT_ERR;
    fprintf(out, "model %s\n", cfg->model_name);
    net_print_summary(nt, out);
    profile_print_buckets(cfg, nt, out);
    net_free(nt);
    return CNT_OK;
}

int trainer_summary_model(const char *name, FILE *out) {
    int c, h, w;
    if (!zoo_has(name)) return cnt_err_set("unknown model '%s' (available: %s)", name, zoo_names());
    zoo_imagenet_shape(name, &c, &h, &w);
    config cfg;
    config_defaults(&cfg);
    snprintf(cfg.model_name, sizeof cfg.model_name, "%s", name);
    net *nt = run_build_model(backend_cpu(), &cfg, c, h, w, 1000, 1);
    if (!nt) return CNT_ERR;
    fprintf(out, "model %s\n", name);
    net_print_summary(nt, out);
    profile_print_buckets(&cfg, nt, out);
    net_free(nt);
    return CNT_OK;
}
