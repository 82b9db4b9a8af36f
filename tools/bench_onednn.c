/*
 * tools/bench_onednn.c - oneDNN against our OpenBLAS CPU backend on the
 * ResNet-20 training convolutions (batch 128), forward, backward-data and
 * backward-filter.
 *
 * Purpose: the measurement behind the CPU backend's layouts. On plain NCHW
 * tensors our OpenBLAS convolutions (model/backend_cpu.c) beat oneDNN's; in
 * oneDNN's blocked layout oneDNN's are about twice as fast, which is why the
 * CPU backend's BLOCKED layout (model/backend_onednn.c) keeps activations
 * blocked from end to end. Built by `make` when oneDNN is found
 * (build/tools/bench_onednn); docs/benchmarks.md has its tables.
 *
 * For each 3x3 / pad 1 convolution shape of ResNet-20 (Fashion-MNIST 1x28x28
 * and CIFAR 3x32x32 inputs) it times, each as the median of --reps runs after
 * warm-up runs:
 *   ours      backend_cpu()->conv_fwd / conv_bwd_data / conv_bwd_filter on
 *             NCHW tensors;
 *   blk       oneDNN with every tensor in the layout oneDNN prefers
 *             (format_tag any, usually nChw16c / blocked weights); only the
 *             convolution primitive is timed, as if a backend kept oneDNN's
 *             layout throughout;
 *   +reord    the same primitive plus the reorders from our NCHW/OIHW tensors
 *             into its layout and of its output back to NCHW (reorders that
 *             are not needed, because oneDNN chose a plain layout, cost 0);
 *   nchw      oneDNN forced to plain NCHW/OIHW tensors (no reorders at all).
 * oneDNN runs forward_training, backward_data and backward_weights with the
 * algorithm picked by --alg (convolution_auto by default). Every pass of every
 * oneDNN variant is checked against ours on the same random inputs: the error
 * column is max|ours - onednn| / max|ours| over the output, the worst of the
 * two oneDNN variants. GFLOP/s counts 2*N*K*C*R*S*P*Q flops per pass.
 * Finally the times are summed over one ResNet-20 training step (stem 1 conv
 * without backward-data; 6 convs 16->16; 1 stride-2 16->32 + 5 convs 32->32;
 * 1 stride-2 32->64 + 5 convs 64->64; the shortcuts are option A, no conv).
 *
 * Both libraries run on the same number of threads (--threads, default 2):
 * omp_set_num_threads for oneDNN (built with the OpenMP runtime) and
 * backend->set_threads, which sets OpenMP and OpenBLAS.
 *
 * Build: `make` (with oneDNN 2.x, which `make deps` installs).
 * Run:
 *   build/tools/bench_onednn [--alg auto|direct|winograd] [--reps N] [--warmup N]
 *                     [--threads T] [--set fashion|cifar|all] [--batch N]
 */
#include "model/backend.h"
#include "common/check.h"
#include "common/timer.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DNNL_CHECK(call)                                                                  \
    do {                                                                                  \
        dnnl_status_t st_ = (call);                                                       \
        if (st_ != dnnl_success) {                                                        \
            fprintf(stderr, "%s:%d: %s failed: dnnl status %d (%s)\n", __FILE__, __LINE__, \
                    #call, (int)st_, dnnl_status2str(st_));                               \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_FILTER, N_PASSES };
static const char *const pass_names[N_PASSES] = {"fwd", "bwd_data", "bwd_filt"};

/* One convolution shape of ResNet-20 and how often a training step runs it. */
typedef struct shape_def {
    const char *name;
    int C, K, H, stride;
    int count;
} shape_def;

/* A ResNet-20 stage layout for an input of in_c x hw x hw. */
static void make_shapes(int in_c, int hw, shape_def out[6], char names[6][32]) {
    int h2 = (hw + 2 - 3) / 2 + 1, h4 = (h2 + 2 - 3) / 2 + 1;
    const shape_def defs[6] = {
        {NULL, in_c, 16, hw, 1, 1}, {NULL, 16, 16, hw, 1, 6}, {NULL, 16, 32, hw, 2, 1},
        {NULL, 32, 32, h2, 1, 5},   {NULL, 32, 64, h2, 2, 1}, {NULL, 64, 64, h4, 1, 5},
    };
    for (int i = 0; i < 6; i++) {
        out[i] = defs[i];
        snprintf(names[i], sizeof names[i], "%s%d->%d %dx%d", defs[i].stride == 2 ? "s2 " : "", defs[i].C,
                 defs[i].K, defs[i].H, defs[i].H);
        out[i].name = names[i];
    }
}

/* ------------------------------------------------------------------ timing */

typedef void (*run_fn)(void *ctx);

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median wall time of fn in milliseconds. */
static double time_median_ms(run_fn fn, void *ctx, int warmup, int reps) {
    for (int i = 0; i < warmup; i++) fn(ctx);
    double *t = cnt_malloc(sizeof *t * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        double t0 = time_now();
        fn(ctx);
        t[i] = 1e3 * (time_now() - t0);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    free(t);
    return med;
}

/* ------------------------------------------------------------- our backend */

typedef struct ours_ctx {
    const backend *be;
    const conv_params *p;
    int pass;
    const float *x, *w, *dy;
    float *y, *dx, *dw;
} ours_ctx;

static void ours_run(void *arg) {
    ours_ctx *c = arg;
    const backend_ctx nchw = {0}; /* NCHW, fp32 */
    switch (c->pass) {
    case PASS_FWD: c->be->conv_fwd(&nchw, c->p, c->x, c->w, c->y); break;
    case PASS_BWD_DATA: c->be->conv_bwd_data(&nchw, c->p, c->dy, c->w, c->dx, 0, 0); break;
    default: c->be->conv_bwd_filter(&nchw, c->p, c->x, c->dy, c->dw); break;
    }
    c->be->sync();
}

/* ------------------------------------------------------------------ oneDNN */

/* One oneDNN pass: the convolution primitive, its two inputs and one output.
 * user_* wrap our NCHW/OIHW buffers; prim_* are in the primitive's layout and
 * are the same objects as user_* when the layouts match (no reorder). */
typedef struct dnnl_pass {
    int ok; /* 0: the primitive descriptor could not be created */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    int in_arg[2], out_arg;
    dnnl_memory_t in_user[2], in_prim[2], out_user, out_prim;
    dnnl_primitive_t in_reorder[2], out_reorder; /* NULL when not needed */
    char impl[64];
    char fmt[104]; /* layouts of in0, in1 -> out */
} dnnl_pass;

typedef struct dnnl_env {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
} dnnl_env;

/* A layout in oneDNN's own notation: outer dims by decreasing stride (upper
 * case when also blocked), then the inner blocks, e.g. aBcd16b = nChw16c. */
static void md_str(const dnnl_memory_desc_t *md, char *buf, size_t len) {
    if (md->format_kind != dnnl_blocked) {
        snprintf(buf, len, "%s", dnnl_fmt_kind2str(md->format_kind));
        return;
    }
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int nd = md->ndims, order[DNNL_MAX_NDIMS];
    for (int i = 0; i < nd; i++) order[i] = i;
    for (int i = 1; i < nd; i++) /* insertion sort, larger stride first, stable */
        for (int j = i; j > 0 && b->strides[order[j]] > b->strides[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t n = 0;
    for (int i = 0; i < nd && n + 1 < len; i++) {
        int d = order[i], blocked = 0;
        for (int k = 0; k < b->inner_nblks; k++) blocked |= b->inner_idxs[k] == d;
        buf[n++] = (char)((blocked ? 'A' : 'a') + d);
    }
    buf[n] = '\0';
    for (int k = 0; k < b->inner_nblks && n + 1 < len; k++) {
        int w = snprintf(buf + n, len - n, "%d%c", (int)b->inner_blks[k], (char)('a' + b->inner_idxs[k]));
        if (w < 0) break;
        n += (size_t)w;
        if (n >= len) n = len - 1;
    }
}

/* Memory in the primitive's layout for argument `md`, with a reorder from or
 * to the user memory when the layouts differ. to_user: output direction. */
static void bind_arg(const dnnl_env *env, const dnnl_memory_desc_t *md, dnnl_memory_t user, int to_user,
                     dnnl_memory_t *prim_mem, dnnl_primitive_t *reorder) {
    const dnnl_memory_desc_t *umd;
    DNNL_CHECK(dnnl_memory_get_memory_desc(user, &umd));
    if (dnnl_memory_desc_equal(md, umd)) {
        *prim_mem = user;
        *reorder = NULL;
        return;
    }
    DNNL_CHECK(dnnl_memory_create(prim_mem, md, env->eng, DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_desc_t rpd;
    if (to_user)
        DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, md, env->eng, umd, env->eng, NULL));
    else
        DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, umd, env->eng, md, env->eng, NULL));
    DNNL_CHECK(dnnl_primitive_create(reorder, rpd));
    DNNL_CHECK(dnnl_primitive_desc_destroy(rpd));
}

static void exec_reorder(const dnnl_env *env, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    DNNL_CHECK(dnnl_primitive_execute(r, env->strm, 2, a));
}

static void exec_conv(const dnnl_env *env, const dnnl_pass *ps) {
    dnnl_exec_arg_t a[3] = {
        {ps->in_arg[0], ps->in_prim[0]}, {ps->in_arg[1], ps->in_prim[1]}, {ps->out_arg, ps->out_prim}};
    DNNL_CHECK(dnnl_primitive_execute(ps->prim, env->strm, 3, a));
}

/* Creates the pass's primitive for layouts act_tag / wei_tag (any or plain).
 * user_in[0..1] and user_out wrap our buffers. A primitive descriptor that
 * oneDNN cannot create (unimplemented algorithm) leaves ps->ok = 0 after
 * printing the status; every other failure is fatal. */
static void pass_create(const dnnl_env *env, dnnl_pass *ps, int pass, const conv_params *p, dnnl_alg_kind_t alg,
                        dnnl_format_tag_t act_tag, dnnl_format_tag_t wei_tag, dnnl_memory_t user_in0,
                        dnnl_memory_t user_in1, dnnl_memory_t user_out, const char *label) {
    memset(ps, 0, sizeof *ps);
    dnnl_dims_t sd = {p->N, p->C, p->H, p->W}, wd = {p->K, p->C, p->R, p->S}, dd = {p->N, p->K, p->P, p->Q};
    dnnl_dims_t strides = {p->stride_h, p->stride_w}, pad = {p->pad_h, p->pad_w};
    /* padding on the high side: whatever makes oneDNN's output size P x Q */
    dnnl_dims_t pad_r = {(p->P - 1) * p->stride_h + p->R - p->H - p->pad_h,
                         (p->Q - 1) * p->stride_w + p->S - p->W - p->pad_w};
    dnnl_memory_desc_t smd, wmd, dmd;
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, act_tag));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, wei_tag));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, act_tag));

    dnnl_convolution_desc_t fd;
    DNNL_CHECK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &smd, &wmd, NULL, &dmd, strides,
                                                  pad, pad_r));
    dnnl_primitive_desc_t fpd;
    dnnl_status_t st = dnnl_primitive_desc_create(&fpd, &fd, NULL, env->eng, NULL);
    if (st != dnnl_success) {
        fprintf(stderr, "  [%s %s] forward primitive descriptor: dnnl status %d (%s)\n", label, pass_names[pass],
                (int)st, dnnl_status2str(st));
        return;
    }
    dnnl_query_t q_in[2], q_out;
    if (pass == PASS_FWD) {
        ps->pd = fpd;
        ps->in_arg[0] = DNNL_ARG_SRC, q_in[0] = dnnl_query_src_md;
        ps->in_arg[1] = DNNL_ARG_WEIGHTS, q_in[1] = dnnl_query_weights_md;
        ps->out_arg = DNNL_ARG_DST, q_out = dnnl_query_dst_md;
    } else {
        dnnl_convolution_desc_t bd;
        if (pass == PASS_BWD_DATA) {
            DNNL_CHECK(dnnl_convolution_backward_data_desc_init(&bd, alg, &smd, &wmd, &dmd, strides, pad, pad_r));
            ps->in_arg[0] = DNNL_ARG_DIFF_DST, q_in[0] = dnnl_query_diff_dst_md;
            ps->in_arg[1] = DNNL_ARG_WEIGHTS, q_in[1] = dnnl_query_weights_md;
            ps->out_arg = DNNL_ARG_DIFF_SRC, q_out = dnnl_query_diff_src_md;
        } else {
            DNNL_CHECK(dnnl_convolution_backward_weights_desc_init(&bd, alg, &smd, &wmd, NULL, &dmd, strides, pad,
                                                                   pad_r));
            ps->in_arg[0] = DNNL_ARG_SRC, q_in[0] = dnnl_query_src_md;
            ps->in_arg[1] = DNNL_ARG_DIFF_DST, q_in[1] = dnnl_query_diff_dst_md;
            ps->out_arg = DNNL_ARG_DIFF_WEIGHTS, q_out = dnnl_query_diff_weights_md;
        }
        st = dnnl_primitive_desc_create(&ps->pd, &bd, NULL, env->eng, fpd);
        DNNL_CHECK(dnnl_primitive_desc_destroy(fpd));
        if (st != dnnl_success) {
            fprintf(stderr, "  [%s %s] primitive descriptor: dnnl status %d (%s)\n", label, pass_names[pass],
                    (int)st, dnnl_status2str(st));
            return;
        }
    }
    DNNL_CHECK(dnnl_primitive_create(&ps->prim, ps->pd));
    const char *impl = NULL;
    DNNL_CHECK(dnnl_primitive_desc_query(ps->pd, dnnl_query_impl_info_str, 0, &impl));
    snprintf(ps->impl, sizeof ps->impl, "%s", impl ? impl : "?");

    dnnl_memory_t user_in[2] = {user_in0, user_in1};
    char f[3][32];
    for (int i = 0; i < 2; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(ps->pd, q_in[i], 0);
        if (!md) {
            fprintf(stderr, "%s: query of input %d of %s failed\n", label, i, pass_names[pass]);
            exit(1);
        }
        ps->in_user[i] = user_in[i];
        bind_arg(env, md, user_in[i], 0, &ps->in_prim[i], &ps->in_reorder[i]);
        md_str(md, f[i], sizeof f[i]);
    }
    const dnnl_memory_desc_t *omd = dnnl_primitive_desc_query_md(ps->pd, q_out, 0);
    if (!omd) {
        fprintf(stderr, "%s: query of the output of %s failed\n", label, pass_names[pass]);
        exit(1);
    }
    ps->out_user = user_out;
    bind_arg(env, omd, user_out, 1, &ps->out_prim, &ps->out_reorder);
    md_str(omd, f[2], sizeof f[2]);
    snprintf(ps->fmt, sizeof ps->fmt, "%s,%s->%s", f[0], f[1], f[2]);
    ps->ok = 1;
}

static void pass_destroy(dnnl_pass *ps) {
    if (!ps->ok) return;
    for (int i = 0; i < 2; i++)
        if (ps->in_reorder[i]) {
            DNNL_CHECK(dnnl_primitive_destroy(ps->in_reorder[i]));
            DNNL_CHECK(dnnl_memory_destroy(ps->in_prim[i]));
        }
    if (ps->out_reorder) {
        DNNL_CHECK(dnnl_primitive_destroy(ps->out_reorder));
        DNNL_CHECK(dnnl_memory_destroy(ps->out_prim));
    }
    DNNL_CHECK(dnnl_primitive_destroy(ps->prim));
    DNNL_CHECK(dnnl_primitive_desc_destroy(ps->pd));
}

typedef struct dnnl_ctx {
    const dnnl_env *env;
    dnnl_pass *ps;
} dnnl_ctx;

/* The convolution alone, on tensors already in oneDNN's layout. */
static void dnnl_run_blocked(void *arg) {
    dnnl_ctx *c = arg;
    exec_conv(c->env, c->ps);
    DNNL_CHECK(dnnl_stream_wait(c->env->strm));
}

/* NCHW in, NCHW out: input reorders, the convolution, the output reorder. */
static void dnnl_run_full(void *arg) {
    dnnl_ctx *c = arg;
    dnnl_pass *ps = c->ps;
    for (int i = 0; i < 2; i++)
        if (ps->in_reorder[i]) exec_reorder(c->env, ps->in_reorder[i], ps->in_user[i], ps->in_prim[i]);
    exec_conv(c->env, ps);
    if (ps->out_reorder) exec_reorder(c->env, ps->out_reorder, ps->out_prim, ps->out_user);
    DNNL_CHECK(dnnl_stream_wait(c->env->strm));
}

/* ------------------------------------------------------------------- main */

static void fill_uniform(float *a, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        a[i] = (float)((double)(s >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
    }
}

static double max_rel_err(const float *ref, const float *got, size_t n) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)ref[i] - (double)got[i]), r = fabs((double)ref[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (r > mr) mr = r;
    }
    return mr > 0.0 ? md / mr : md;
}

static double gflops(double flops, double ms) { return ms > 0.0 ? flops / (ms * 1e6) : 0.0; }

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [--alg auto|direct|winograd] [--reps N] [--warmup N] [--threads T]\n"
            "          [--set fashion|cifar|all] [--batch N]\n",
            prog);
    exit(2);
}

int main(int argc, char **argv) {
    const char *alg_name = "auto", *set = "all";
    int reps = 20, warmup = 3, threads = 2, batch = 128;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage(argv[0]);
        if (!strcmp(argv[i], "--alg")) alg_name = argv[++i];
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--set")) set = argv[++i];
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[++i]);
        else usage(argv[0]);
    }
    dnnl_alg_kind_t alg;
    if (!strcmp(alg_name, "auto")) alg = dnnl_convolution_auto;
    else if (!strcmp(alg_name, "direct")) alg = dnnl_convolution_direct;
    else if (!strcmp(alg_name, "winograd")) alg = dnnl_convolution_winograd;
    else usage(argv[0]);
    if (reps < 1 || warmup < 0 || threads < 1 || batch < 1) usage(argv[0]);
    int do_fashion = !strcmp(set, "all") || !strcmp(set, "fashion");
    int do_cifar = !strcmp(set, "all") || !strcmp(set, "cifar");
    if (!do_fashion && !do_cifar) usage(argv[0]);

    const backend *be = backend_cpu();
    be->set_threads(threads); /* OpenMP and OpenBLAS */
    omp_set_num_threads(threads);

    dnnl_env env;
    DNNL_CHECK(dnnl_engine_create(&env.eng, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&env.strm, env.eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d (hash %s, cpu runtime %s), effective ISA %s; algorithm convolution_%s\n", v->major,
           v->minor, v->patch, v->hash ? v->hash : "?", dnnl_runtime2str(v->cpu_runtime),
           dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()), alg_name);
    printf("threads %d (omp_get_max_threads %d), batch %d, median of %d runs after %d warm-up runs\n", threads,
           omp_get_max_threads(), batch, reps, warmup);
    printf("err = max|ours-onednn|/max|ours| (worst of blk and nchw); GF/s = 2*N*K*C*R*S*P*Q / time\n\n");

    for (int si = 0; si < 2; si++) {
        if ((si == 0 && !do_fashion) || (si == 1 && !do_cifar)) continue;
        shape_def shapes[6];
        char names[6][32];
        make_shapes(si == 0 ? 1 : 3, si == 0 ? 28 : 32, shapes, names);
        double total[4] = {0, 0, 0, 0}; /* ours, blk, +reord, nchw: ms per step */
        int total_ok[4] = {1, 1, 1, 1};
        printf("=== ResNet-20, %s input %s ===\n", si == 0 ? "Fashion-MNIST" : "CIFAR", si == 0 ? "1x28x28" : "3x32x32");
        char head[32];
        snprintf(head, sizeof head, "shape (N=%d)", batch);
        printf("%-17s %-8s %8s %8s %8s %8s | %6s %6s %6s %6s | %8s | %s\n", head, "pass", "ours ms",
               "blk ms", "+reord", "nchw ms", "GF/s", "blk", "+reord", "nchw", "err", "oneDNN impl (blk layouts; nchw impl)");
        for (int k = 0; k < 6; k++) {
            const shape_def *sh = &shapes[k];
            conv_params p = {.N = batch, .C = sh->C, .H = sh->H, .W = sh->H, .K = sh->K, .R = 3, .S = 3,
                             .stride_h = sh->stride, .stride_w = sh->stride, .pad_h = 1, .pad_w = 1};
            if (conv_params_init(&p) != CNT_OK) {
                fprintf(stderr, "%s: %s\n", sh->name, cnt_err_msg());
                return 1;
            }
            size_t nx = (size_t)p.N * p.C * p.H * p.W, nw = (size_t)p.K * p.C * p.R * p.S,
                   ny = (size_t)p.N * p.K * p.P * p.Q;
            float *x = cnt_malloc(nx * sizeof *x), *w = cnt_malloc(nw * sizeof *w), *dy = cnt_malloc(ny * sizeof *dy);
            float *y = cnt_calloc(ny, sizeof *y), *dx = cnt_calloc(nx, sizeof *dx), *dw = cnt_calloc(nw, sizeof *dw);
            float *y_d = cnt_calloc(ny, sizeof *y), *dx_d = cnt_calloc(nx, sizeof *dx),
                  *dw_d = cnt_calloc(nw, sizeof *dw);
            fill_uniform(x, nx, 1000 + (uint64_t)k);
            fill_uniform(w, nw, 2000 + (uint64_t)k);
            fill_uniform(dy, ny, 3000 + (uint64_t)k);
            double flops = 2.0 * p.N * p.K * p.C * p.R * p.S * p.P * p.Q;

            /* user (NCHW / OIHW) memory objects over our buffers */
            dnnl_dims_t sd = {p.N, p.C, p.H, p.W}, wd = {p.K, p.C, p.R, p.S}, dd = {p.N, p.K, p.P, p.Q};
            dnnl_memory_desc_t smd, wmd, dmd;
            DNNL_CHECK(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, dnnl_nchw));
            DNNL_CHECK(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, dnnl_oihw));
            DNNL_CHECK(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dnnl_nchw));
            dnnl_memory_t m_x, m_w, m_dy, m_y, m_dx, m_dw;
            DNNL_CHECK(dnnl_memory_create(&m_x, &smd, env.eng, x));
            DNNL_CHECK(dnnl_memory_create(&m_w, &wmd, env.eng, w));
            DNNL_CHECK(dnnl_memory_create(&m_dy, &dmd, env.eng, dy));
            DNNL_CHECK(dnnl_memory_create(&m_y, &dmd, env.eng, y_d));
            DNNL_CHECK(dnnl_memory_create(&m_dx, &smd, env.eng, dx_d));
            DNNL_CHECK(dnnl_memory_create(&m_dw, &wmd, env.eng, dw_d));

            for (int pass = 0; pass < N_PASSES; pass++) {
                int count = sh->count;
                if (pass == PASS_BWD_DATA && k == 0) count = 0; /* the stem's input needs no gradient */
                ours_ctx oc = {be, &p, pass, x, w, dy, y, dx, dw};
                double t_ours = time_median_ms(ours_run, &oc, warmup, reps);
                float *ref = pass == PASS_FWD ? y : pass == PASS_BWD_DATA ? dx : dw;
                float *got = pass == PASS_FWD ? y_d : pass == PASS_BWD_DATA ? dx_d : dw_d;
                size_t nout = pass == PASS_FWD ? ny : pass == PASS_BWD_DATA ? nx : nw;
                dnnl_memory_t in0 = pass == PASS_BWD_DATA ? m_dy : m_x;
                dnnl_memory_t in1 = pass == PASS_FWD ? m_w : pass == PASS_BWD_DATA ? m_w : m_dy;
                dnnl_memory_t out = pass == PASS_FWD ? m_y : pass == PASS_BWD_DATA ? m_dx : m_dw;

                /* oneDNN, its preferred layouts */
                dnnl_pass pb, pn;
                double t_blk = NAN, t_full = NAN, t_nchw = NAN, err = 0.0;
                pass_create(&env, &pb, pass, &p, alg, dnnl_format_tag_any, dnnl_format_tag_any, in0, in1, out,
                            sh->name);
                if (pb.ok) {
                    dnnl_ctx dc = {&env, &pb};
                    memset(got, 0, nout * sizeof *got);
                    dnnl_run_full(&dc); /* also leaves valid inputs in the blocked buffers */
                    double e = max_rel_err(ref, got, nout);
                    if (e > err || e != e) err = e;
                    t_blk = time_median_ms(dnnl_run_blocked, &dc, warmup, reps);
                    t_full = time_median_ms(dnnl_run_full, &dc, warmup, reps);
                }
                /* oneDNN on plain NCHW / OIHW */
                pass_create(&env, &pn, pass, &p, alg, dnnl_nchw, dnnl_oihw, in0, in1, out, sh->name);
                if (pn.ok) {
                    dnnl_ctx dc = {&env, &pn};
                    memset(got, 0, nout * sizeof *got);
                    dnnl_run_full(&dc);
                    double e = max_rel_err(ref, got, nout);
                    if (e > err || e != e) err = e;
                    t_nchw = time_median_ms(dnnl_run_full, &dc, warmup, reps);
                }
                double ts[4] = {t_ours, t_blk, t_full, t_nchw};
                for (int c = 0; c < 4; c++) {
                    if (count == 0) continue;
                    if (ts[c] != ts[c]) total_ok[c] = 0;
                    else total[c] += count * ts[c];
                }
                printf("%-17s %-8s %8.3f %8.3f %8.3f %8.3f | %6.1f %6.1f %6.1f %6.1f | %8.1e | %s (%s; %s)%s\n",
                       pass == 0 ? sh->name : "", pass_names[pass], t_ours, t_blk, t_full, t_nchw,
                       gflops(flops, t_ours), gflops(flops, t_blk), gflops(flops, t_full), gflops(flops, t_nchw), err,
                       pb.ok ? pb.impl : "n/a", pb.ok ? pb.fmt : "-", pn.ok ? pn.impl : "n/a",
                       count == 0 ? " [not in step]" : "");
                fflush(stdout);
                pass_destroy(&pb);
                pass_destroy(&pn);
            }
            DNNL_CHECK(dnnl_memory_destroy(m_x));
            DNNL_CHECK(dnnl_memory_destroy(m_w));
            DNNL_CHECK(dnnl_memory_destroy(m_dy));
            DNNL_CHECK(dnnl_memory_destroy(m_y));
            DNNL_CHECK(dnnl_memory_destroy(m_dx));
            DNNL_CHECK(dnnl_memory_destroy(m_dw));
            free(x), free(w), free(dy), free(y), free(dx), free(dw), free(y_d), free(dx_d), free(dw_d);
        }
        const char *col[4] = {"ours (OpenBLAS)", "oneDNN blocked", "oneDNN +reorders", "oneDNN nchw"};
        printf("conv time per ResNet-20 training step (19 convs x fwd/bwd_data/bwd_filter, stem without "
               "bwd_data):\n");
        for (int c = 0; c < 4; c++) {
            if (total_ok[c])
                printf("  %-17s %8.2f ms  (%.2fx ours)\n", col[c], total[c], total[0] > 0 ? total[c] / total[0] : 0);
            else
                printf("  %-17s      n/a  (a pass could not be created)\n", col[c]);
        }
        printf("\n");
    }
    DNNL_CHECK(dnnl_stream_destroy(env.strm));
    DNNL_CHECK(dnnl_engine_destroy(env.eng));
    return 0;
}
