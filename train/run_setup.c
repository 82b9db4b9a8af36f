/*
 * train/run_setup.c - a worker's run, set up (see train/run.h): the device
 * and its threads, the transport, the data and the memory check, the model
 * on rank 0's weights, the loaders, the exchange bound to the net, the
 * timeline, the stepper, and the lines that open the log.
 */
#include "train/run.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/cpus.h"
#include "common/fileio.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "model/zoo.h"
#include "train/memory.h"
#include "train/metrics.h"
#include "train/plans.h"
#include "train/weights.h"

/* train.layout for h x w input images; auto: see backend_layout_choose. */
static int layout_for(const config *cfg, const backend *be, int h, int w) {
    return backend_layout_choose(cfg->layout, be, cfg->precision, h, w);
}

/* The start-up line saying which layout the run takes, and why where it is
 * not the plain one. */
static void say_layout(const config *cfg, const backend *be, int h, int w) {
    int cpu = be->is_cpu;
    int layout = layout_for(cfg, be, h, w);
    if (layout == BACKEND_LAYOUT_NHWC)
        log_info("layout: nhwc (train.layout = %s)%s", config_name(cfg, &cfg->layout),
                 cpu ? "; the CPU backend computes NCHW and transposes around each op (slower than nchw)"
                     : ": activations channels last, as tensor-core convolutions read them");
    else if (layout == BACKEND_LAYOUT_BLOCKED)
        log_info("layout: %s (train.layout = %s): activations in oneDNN's channel blocks from the first "
                 "convolution to the classifier", backend_layout_name(layout, be), config_name(cfg, &cfg->layout));
    else if (cfg->layout == BACKEND_LAYOUT_AUTO && !cpu && cfg->precision == BACKEND_MATH_TF32)
        log_info("layout: nchw (train.layout = auto): tf32 on %dx%d images, under %d pixels a side, where NCHW "
                 "measured faster than NHWC", h, w, BACKEND_NHWC_TF32_MIN_PX);
}

net *run_build_model(const backend *be, const config *cfg, int c, int h, int w, int classes, int max_batch) {
    zoo_options zo = config_zoo_options(cfg, be);
    net *nt = zoo_create(be, cfg->model_name, &zo, c, h, w, classes, layout_for(cfg, be, h, w), max_batch);
    if (!nt)
        cnt_err_prefix("model '%s' on %dx%dx%d input with %d classes, batches up to %d (train.batch_size, "
                       "train.eval_batch_size)",
                       cfg->model_name, c, h, w, classes, max_batch);
    return nt;
}

/* model.init_from on rank 0: loads the safetensors file into nt, unless
 * checkpoint.resume will load a checkpoint (which then wins). */
static int load_init_from(const config *cfg, net *nt) {
    char path[2 * CONFIG_STR + 64];
    if (run_resume_path(cfg, path, sizeof path, 0)) {
        log_info("model.init_from = %s not loaded: checkpoint.resume loads %s, and the checkpoint wins",
                 cfg->init_from, path);
        return CNT_OK;
    }
    return weights_init_from(nt, cfg->init_from);
}

/* The net's node hook while dist.timeline is on: one "fwd <node>" or
 * "bwd <node>" event per layer, inside the step's "forward" and "backward". */
static void timeline_node_hook(void *ctx, const node *nd, int backward, double t0, double t1) {
    char name[NET_NAME_LEN + 8];
    snprintf(name, sizeof name, "%s %s", backward ? "bwd" : "fwd", nd->name);
    timeline_record(ctx, name, backward ? "backward" : "forward", TIMELINE_TID_TRAIN, t0, t1);
}

/* train.device: the backend of this rank (GPU local_rank % GPUs of its node),
 * said in one line (rank 0 prints every rank's), with the reason when auto
 * falls back to the CPU. */
const backend *run_choose_device(const config *cfg) {
    const backend *be = backend_get_for_rank(cfg->device, dist_local_rank());
    if (!be) {
        cnt_err_prefix("train.device = %s", config_name(cfg, &cfg->device));
        cnt_err_suffix(" (see ./trainer --devices)");
        return NULL;
    }
    if (backend_layout_check(cfg->layout, be) != CNT_OK) {
        cnt_err_prefix("train.layout = %s", config_name(cfg, &cfg->layout));
        return NULL;
    }
    be->set_threads(cfg->threads); /* before describe, which says how many */
    char what[768], desc[512];
    be->describe(desc, sizeof desc);
    if (be->is_cpu && cfg->device == BACKEND_DEVICE_AUTO) {
        /* why no GPU: asked only here, so device=cpu never touches the CUDA runtime */
        char devs[4096];
        backend_describe_devices(devs, sizeof devs);
        char *nl = strchr(devs, '\n');
        if (nl) *nl = '\0';
        snprintf(what, sizeof what, "%.300s (train.device = auto; %.300s)", desc, devs);
    } else {
        snprintf(what, sizeof what, "%.300s (train.device = %.100s)", desc, config_name(cfg, &cfg->device));
    }
    if (dist_world() == 1) {
        log_info("device: %s", what);
    } else {
        /* one line per rank, printed by rank 0 (a collective: every rank is here) */
        void *all;
        size_t *counts;
        dist_phase("start-up: device report");
        dist_gather_bytes(what, sizeof what, &all, &counts);
        for (int r = 0; all && r < dist_world(); r++)
            log_info("device: rank %d: %s", r, (char *)all + (size_t)r * sizeof what);
        free(all);
        free(counts);
    }
    int cpu = be->is_cpu;
    int math = cfg->precision;
    if (backend_math_check(be, math) != CNT_OK) { /* the message names the device and what to use instead */
        cnt_err_prefix("train.precision = %s", config_name(cfg, &cfg->precision));
        return NULL;
    }
    backend_dtype act = config_activations(cfg, be);
    if (backend_act_check(be, act) != CNT_OK) {
        cnt_err_prefix("train.activations = %s", config_name(cfg, &cfg->activations));
        return NULL;
    }
    if (math == BACKEND_MATH_TF32) {
        if (cpu) log_info("precision: tf32 requested; the CPU backend computes fp32");
        else log_info("precision: tf32 (cuDNN and cuBLAS tensor cores, fp32 accumulation and storage)");
    } else if (math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16) {
        log_info("precision: %s mixed: convolutions and GEMMs take %s operands and round their results to it, "
                 "accumulating in fp32%s; fp32 master weights, batch norm, loss and optimizer",
                 config_name(cfg, &cfg->precision), config_name(cfg, &cfg->precision),
                 cpu ? " (emulated by the CPU backend: the same rounding, slower than fp32)" : " on tensor cores");
        if (act != BACKEND_DTYPE_FP32)
            log_info("activations: %s (train.activations = %s): every activation and its gradient stored in 16 "
                     "bits, each op computing in fp32%s", backend_dtype_name(act),
                     config_name(cfg, &cfg->activations),
                     cpu ? " (the CPU converts around each op: the reference, no faster)" : "");
        else
            log_info("activations: fp32 (train.activations = %s)%s", config_name(cfg, &cfg->activations),
                     cfg->activations == CONFIG_ACT_AUTO
                         ? ": this backend keeps fp32 activations unless train.activations = bf16 or fp16 (the "
                           "precision's type) asks for 16-bit ones"
                         : "");
    }
    if (cpu) {
        if (cfg->conv_api == BACKEND_CONV_API_GRAPH)
            log_info("convolutions: the CPU backend ignores train.conv_api = graph");
    } else if (config_conv_api(cfg, be) == BACKEND_CONV_API_GRAPH) {
        log_info("convolutions: cuDNN's graph API (train.conv_api = %s): every engine its heuristics offer for a "
                 "shape timed at its first step and the fastest kept (a pass with no such plan takes the legacy "
                 "call, with a warning)", config_name(cfg, &cfg->conv_api));
    } else {
        log_info("convolutions: cuDNN's legacy calls (train.conv_api = %s)", config_name(cfg, &cfg->conv_api));
    }
    return be;
}

/* The run's opening lines: the model, the data, the schedule. */
static void log_plan(const run *r) {
    const config *cfg = r->cfg;
    const dataset *d = &r->data.train;
    if (loss_scaler_active(&r->st.ls)) {
        char what[256];
        loss_scaler_describe(&r->st.ls, what, sizeof what);
        log_info("loss scaling: %s", what);
    }
    log_info("cnntrain: model %s (%zu parameters, %.3f GFLOPs/image forward) on %s", cfg->model_name,
             r->nt->n_params, net_flops_per_image(r->nt) / 1e9, r->be->name);
    log_info("data: %s %s, %d train / %d test images of %dx%dx%d, %d classes%s", config_name(cfg, &cfg->data_kind),
             cfg->data_root, d->n, r->data.test.n, d->c, d->h, d->w, d->classes,
             config_batch_u8(cfg, r->be) ? "; uint8 batches, normalised on the device (data.batch_dtype)" : "");
    char acc[128] = "";
    if (cfg->accumulate > 1)
        snprintf(acc, sizeof acc, " x %d micro-batches accumulated (train.accumulate)", cfg->accumulate);
    char opt[96];
    if (cfg->optim == OPTIM_LARS) snprintf(opt, sizeof opt, "LARS (eta %g)", (double)cfg->lars_eta);
    else snprintf(opt, sizeof opt, "SGD");
    if (cfg->momentum > 0.0f)
        snprintf(opt + strlen(opt), sizeof opt - strlen(opt), ", %smomentum %g", cfg->nesterov ? "Nesterov " : "",
                 (double)cfg->momentum);
    log_info("train: %d epochs x %ld steps (batch %d%s), %ld steps in all; %s, %s schedule, warm-up %g epochs; "
             "out %s",
             cfg->epochs, r->steps_per_epoch, cfg->batch_size, acc, r->total_steps, opt,
             config_name(cfg, &cfg->schedule), (double)cfg->warmup_epochs, cfg->out_dir);
    if (r->emu.n_nodes)
        log_info("emulated compute (train.emulate_compute = %s, a profile taken on %s in %s): each %s sleeps "
                 "forward %.3f ms, backward %.3f ms layer by layer (gradients handed to the reducer after each "
                 "node%s) and update %.3f ms instead of computing; parameters are not updated; evaluation "
                 "skipped",
                 cfg->emulate_compute, r->emu.device, r->emu.precision, cfg->accumulate > 1 ? "micro-batch" : "step",
                 r->emu.forward_total_ms, r->emu.backward_total_ms, cfg->accumulate > 1 ? ", in the last" : "",
                 r->emu.update_ms);
}

/* Across nodes, how many TCP connections Open MPI keeps per pair of ranks,
 * and who chose it (dist_init in dist/dist.h says why cnntrain asks for 2). */
static void log_tcp_links(void) {
    int chosen = 0, links = dist_tcp_links(&chosen);
    if (dist_job_world() <= dist_local_world() || links < 0) return;
    log_info("dist: Open MPI's TCP transport uses %d connection%s per pair of ranks (btl_tcp_links, set by %s)",
             links, links == 1 ? "" : "s",
             chosen ? "cnntrain: one connection moves one direction at a time; OMPI_MCA_btl_tcp_links=N overrides"
                    : "the environment");
}

/* train.emulate_compute: the profile, read and checked against the net
 * make_model will build (built here without its allocations, as the memory
 * check does) before the memory check's, the model's and the reducer's
 * collectives. Every rank reads the same file and reaches the same verdict;
 * a rank that fails alone (another file on its host) ends the job, as any
 * start-up error does (main: dist_abort). */
static int load_emulation(run *r) {
    const config *cfg = r->cfg;
    const dataset *d = &r->data.train;
    net *nt = net_create(r->be, d->c, d->h, d->w, d->classes);
    zoo_options zo = config_zoo_options(cfg, r->be);
    int out, aux;
    int rc = zoo_build(nt, cfg->model_name, &zo, &out, &aux);
    if (rc == CNT_OK) rc = emulation_load(&r->emu, cfg->emulate_compute, cfg->model_name, cfg->batch_size, nt);
    else cnt_err_prefix("model '%s' on %dx%dx%d input with %d classes", cfg->model_name, d->c, d->h, d->w, d->classes);
    net_free(nt);
    return rc;
}

/* The model on rank 0's weights: initialised from train.seed, or from
 * model.init_from (rank 0 reads the file), then broadcast, so every rank
 * starts from the same weights whatever it did itself. */
static int make_model(run *r, int max_batch) {
    const config *cfg = r->cfg;
    const dataset *d = &r->data.train;
    r->nt = run_build_model(r->be, cfg, d->c, d->h, d->w, d->classes, max_batch);
    if (!r->nt) return CNT_ERR;
    /* the other ranks take rank 0's parameters below: drawing their own would be wasted */
    if (r->rank == 0 || r->world == 1) net_init_params(r->nt, cfg->seed);
    else net_init_params_blank(r->nt, cfg->seed);
    /* again with the parameter count: ranks that read different data (another
     * class count) build different models from the same config */
    if (run_check_same_config(cfg, r->nt->n_params) != CNT_OK) return CNT_ERR;
    if (r->rank == 0 && cfg->init_from[0] && load_init_from(cfg, r->nt) != CNT_OK) return CNT_ERR;
    if (r->world > 1) {
        host_state hs;
        host_state_alloc(&hs, r->nt, 0);
        host_state_download(&hs, r->nt, NULL);
        dist_phase("start-up: initial weights broadcast");
        host_state_broadcast(&hs, r->nt);
        host_state_upload(&hs, r->nt, NULL);
        host_state_free(&hs);
    }
    return CNT_OK;
}

/* What one rank tells rank 0 about its compute threads (report_threads). */
typedef struct thread_report {
    int threads, allowed, online;
    cpus_mask mask;
    char host[64];
} thread_report;

/* train.threads on the CPU: how many threads each rank runs on which CPUs,
 * said by rank 0 (a collective), with a warning for each host where the
 * ranks run more threads than the CPUs they may use (the threads take
 * turns), or where, with train.threads = 0, a binding leaves CPUs idle. */
static void report_threads(const config *cfg, int world) {
    thread_report me;
    memset(&me, 0, sizeof me);
    me.allowed = cpus_allowed(&me.mask);
    me.online = cpus_online();
    me.threads = omp_get_max_threads();
    gethostname(me.host, sizeof me.host - 1);
    const char *why = cfg->threads > 0 ? "train.threads" : "train.threads = 0: one per CPU the rank may run on";
    char cpus[128];
    void *all = NULL;
    size_t *counts = NULL;
    if (world > 1) {
        dist_phase("start-up: threads report");
        dist_gather_bytes(&me, sizeof me, &all, &counts);
        free(counts);
        if (!all) return; /* ranks other than 0 */
    }
    const thread_report *t = world > 1 ? all : &me;
    for (int i = 0; i < world && i < 16; i++) {
        char who[96] = "this process";
        if (world > 1) snprintf(who, sizeof who, "rank %d on %s", i, t[i].host);
        cpus_format(&t[i].mask, cpus, sizeof cpus);
        log_info("threads: %s: %d (%s), on CPU%s %s of its %d", who, t[i].threads, why, t[i].allowed == 1 ? "" : "s",
                 cpus, t[i].online);
    }
    if (world > 16) log_info("threads: ranks 16 to %d alike", world - 1);
    /* per host: its ranks, the CPUs they may use together, their threads */
    char *seen = cnt_calloc((size_t)world, 1);
    for (int i = 0; i < world; i++) {
        if (seen[i]) continue;
        cpus_mask uni;
        memset(&uni, 0, sizeof uni);
        int ranks = 0, threads = 0;
        for (int j = i; j < world; j++) {
            if (seen[j] || strcmp(t[j].host, t[i].host) != 0) continue;
            seen[j] = 1;
            ranks++;
            threads += t[j].threads;
            for (size_t b = 0; b < sizeof uni.bits; b++) uni.bits[b] |= t[j].mask.bits[b];
        }
        int usable = cpus_count(&uni), online = t[i].online;
        int fair = online / ranks > 0 ? online / ranks : 1;
        if (threads > usable)
            log_warn("threads: the %d rank%s on %s run%s %d threads on %d CPU%s, which take turns: set "
                     "train.threads = %d (its CPUs / its ranks)%s",
                     ranks, ranks == 1 ? "" : "s", t[i].host, ranks == 1 ? "s" : "", threads, usable,
                     usable == 1 ? "" : "s", usable / ranks > 0 ? usable / ranks : 1,
                     usable < online ? ", or let them use more CPUs (mpirun --bind-to none)" : "");
        else if (cfg->threads == 0 && usable < online)
            log_warn("threads: the %d rank%s on %s may run on %d of its %d CPUs (mpirun binds each rank to a core "
                     "when it starts 2 ranks or fewer, to a socket or NUMA node otherwise; taskset and schedulers "
                     "bind too), so %d CPU%s stay%s idle: launch with --bind-to none, or --map-by slot:PE=%d for "
                     "%d core%s per rank",
                     ranks, ranks == 1 ? "" : "s", t[i].host, usable, online, online - usable,
                     online - usable == 1 ? "" : "s", online - usable == 1 ? "s" : "", fair, fair, fair == 1 ? "" : "s");
    }
    free(seen);
    free(all);
}

/* How gradients travel: one line (after the TCP connections' across nodes). */
static void log_dist(const run *r) {
    log_tcp_links();
    const config *cfg = r->cfg;
    char how[1024];
    int linear = cfg->lr_scaling == LR_SCALING_LINEAR, K = cfg->accumulate;
    int alone = exchange_describe(r->x, cfg->batch_size * K, how, sizeof how);
    if (!linear || (alone && K == 1))
        log_info("dist: %s; lr %g (optim.lr_scaling = %s)", how, r->sched.base_lr, config_name(cfg, &cfg->lr_scaling));
    else if (K == 1)
        log_info("dist: %s; lr %g per worker x %d = %g (optim.lr_scaling = %s)", how, (double)cfg->lr, r->world,
                 r->sched.base_lr, config_name(cfg, &cfg->lr_scaling));
    else
        log_info("dist: %s; lr %g per worker x %d rank%s x %d accumulated = %g (optim.lr_scaling = %s)", how,
                 (double)cfg->lr, r->world, r->world == 1 ? "" : "s", K, r->sched.base_lr,
                 config_name(cfg, &cfg->lr_scaling));
}

/* dist.timeline: the clock agreed on (a collective: every rank has the same
 * config), then each rank's events spooled to <trace>.rank<R>.part as the
 * run goes (a killed run keeps them), per layer and per bucket or shard. */
static int setup_timeline(run *r) {
    const config *cfg = r->cfg;
    dist_phase("start-up: timeline clock");
    r->tl = timeline_create();
    long first, last;
    config_timeline_window(cfg, &first, &last); /* checked with the config */
    timeline_set_window(r->tl, first, last);
    char part[2 * CONFIG_STR + 32], process[32];
    snprintf(process, sizeof process, "rank %d", r->rank);
    if (run_timeline_part(cfg, r->rank, part, sizeof part) != CNT_OK) return CNT_ERR;
    if (timeline_spool(r->tl, part, r->rank, process) != CNT_OK) return cnt_err_prefix("dist.timeline");
    net_set_node_hook(r->nt, timeline_node_hook, r->tl);
    exchange_set_timeline(r->x, r->tl);
    return CNT_OK;
}

/* The device, its threads, the transport, the data and the layout it takes;
 * with emulated compute, the profile. */
static int setup_device_and_data(run *r) {
    const config *cfg = r->cfg;
    if (!(r->be = run_choose_device(cfg)) || exchange_connect(r->x, r->be) != CNT_OK) return CNT_ERR;
    if (r->be->is_cpu) report_threads(cfg, r->world);
    if (input_load(cfg, &r->data) != CNT_OK) return CNT_ERR;
    if (cfg->decoder == DATA_DECODER_NVJPEG && r->be->is_cpu)
        return cnt_err_set("data.decoder = nvjpeg decodes on the rank's GPU, and this rank runs on the CPU "
                           "(train.device = %s); use data.decoder = cpu or auto",
                           config_name(cfg, &cfg->device));
    if (input_open_decoder(cfg, &r->data, -1) != CNT_OK) return CNT_ERR;
    say_layout(cfg, r->be, r->data.train.h, r->data.train.w);
    if (cfg->emulate_compute[0] && load_emulation(r) != CNT_OK) return CNT_ERR;
    return CNT_OK;
}

/* The loaders over this rank's shard, and the run's length in steps. */
static int setup_loaders(run *r, const loader_options *lo, const loader_options *eo) {
    const config *cfg = r->cfg;
    if (!(r->train_ld = loader_create(&r->data.train, lo)) || !(r->test_ld = loader_create(&r->data.test, eo)))
        return CNT_ERR;
    int batches = loader_steps_per_epoch(r->train_ld);
    r->steps_per_epoch = batches / cfg->accumulate;
    if (r->steps_per_epoch < 1)
        return cnt_err_set("train.accumulate = %d micro-batches per step, but rank %d's share of the training set "
                           "makes %d batch%s of train.batch_size = %d an epoch: lower one of them",
                           cfg->accumulate, r->rank, batches, batches == 1 ? "" : "es", cfg->batch_size);
    r->total_steps = r->steps_per_epoch * cfg->epochs;
    if (cfg->max_steps > 0 && cfg->max_steps < r->total_steps) r->total_steps = cfg->max_steps;
    return CNT_OK;
}

/* On a GPU: which CPUs the loader threads run on (input_loader_cpus: the
 * GPU's NUMA node where that narrows the process's), or a warning where the
 * rank may run on none of them. */
static void log_loader_cpus(const run *r) {
    char bus[64], why[512];
    if (!backend_pci_bus_id(r->be, bus, sizeof bus)) return;
    cpus_mask m;
    int outside;
    input_loader_cpus(r->be, "/sys", &m, &outside, why, sizeof why);
    if (outside)
        log_warn("data: loader threads on %s: every batch crosses between NUMA nodes; start each rank on CPUs of "
                 "its GPU's node (mpirun --map-by numa, or --bind-to none, or the scheduler's GPU binding)",
                 why);
    else
        log_info("data: loader threads on %s", why);
}

/* The stepper over the net and the exchange, as --bench builds it too. */
static void setup_stepper(run *r, int max_batch, int u8) {
    const config *cfg = r->cfg;
    optim_opts oo = config_optim_opts(cfg);
    loss_scale_opts lso = config_loss_scale_opts(cfg);
    step_opts so = config_step_opts(cfg);
    so.emulate = r->emu.n_nodes > 0;
    so.emulate_update_ms = r->emu.update_ms;
    const dataset *d = &r->data.train;
    stepper_init(&r->st, r->nt, r->x, r->tl, &oo, &lso, &so, max_batch, d->c, d->h * d->w, u8);
    if (r->st.graph_on)
        log_info("cuda graph: each full training step recorded after %d eager steps and replayed as one launch "
                 "(train.cuda_graph = true)", STEP_GRAPH_WARM);
    else if (cfg->cuda_graph)
        log_warn("train.cuda_graph = true: not used, every step runs op by op: %s", r->st.graph_why);
}

int run_setup(run *r) {
    const config *cfg = r->cfg;
    if (setup_device_and_data(r) != CNT_OK) return CNT_ERR;
    loader_options lo, eo;
    input_loader_options(cfg, &r->data, r->be, r->rank, r->world, &lo, &eo);
    int max_batch = lo.batch > eo.batch ? lo.batch : eo.batch;
    exchange_footprint xf = exchange_footprint_of(r->x);
    if (memory_check(cfg, r->be, &r->data, &lo, &eo, &xf) != CNT_OK) return CNT_ERR;
    if (run_bucket_profile(r) != CNT_OK) return CNT_ERR;
    if (make_model(r, max_batch) != CNT_OK) return CNT_ERR;
    plans_restore(r->be, cfg->out_dir);
    if (r->emu.n_nodes) {
        CNT_ASSERT(r->emu.n_nodes == r->nt->n_nodes); /* the same zoo_build as load_emulation's */
        net_set_emulation(r->nt, r->emu.forward_ms, r->emu.backward_ms);
    }
    if (setup_loaders(r, &lo, &eo) != CNT_OK) return CNT_ERR;
    log_loader_cpus(r);
    progress_opts po = {.be = r->be, .out_dir = cfg->out_dir, .world = r->world, .batch = cfg->batch_size,
                        .epochs = cfg->epochs, .total_steps = r->total_steps, .xt = exchange_traits_of(r->x),
                        .fp16 = cfg->precision == BACKEND_MATH_FP16, .wait_warn = cfg->wait_warn,
                        .workers = cfg->workers, .tensorboard = cfg->tensorboard};
    r->pg = progress_create(&po);
    /* The schedule spans every configured epoch; train.max_steps only stops
     * early, so a stopped run resumes onto the same schedule. */
    r->sched = config_schedule(cfg, r->world, r->steps_per_epoch);
    if (cfg->bucket_mb == 0.0f && run_choose_buckets(r) != CNT_OK) return CNT_ERR;
    if (exchange_attach(r->x, r->nt) != CNT_OK) return cnt_err_prefix("model %s", cfg->model_name);
    if (cfg->timeline[0] && setup_timeline(r) != CNT_OK) return CNT_ERR;
    setup_stepper(r, max_batch, lo.u8);
    if (r->world > 1) host_state_alloc(&r->peers, r->nt, 0);
    log_plan(r);
    log_dist(r);
    return CNT_OK;
}
