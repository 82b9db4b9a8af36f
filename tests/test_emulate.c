/*
 * tests/test_emulate.c - emulated compute (train.emulate_compute): reading
 * and checking a profile (train/emulate.c), the emulated passes of the net
 * (model/net.c, net_set_emulation) and the emulated update (train/step.c).
 *
 * The net is ResNet-20 on 3x8x8 inputs with 10 classes (70 nodes), the
 * profiles are written here with times chosen per node, except the one that
 * checks emulation against the simulator, which is a real `--profile` of a
 * small run. Times are only checked from below (a sleep may oversleep on a
 * loaded machine, never undersleep).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/reducer.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/sim.h"
#include "train/config.h"
#include "train/emulate.h"
#include "train/profile.h"
#include "train/step.h"

#define BATCH 4
#define NEAR(a, b) assert_true(fabs((double)(a) - (double)(b)) <= 1e-9 * (1 + fabs((double)(b))))

static net *small_net(void) {
    zoo_options zo = {.dropout = -1};
    net *nt = zoo_create(backend_cpu(), "resnet20", &zo, 3, 8, 8, 10, BACKEND_LAYOUT_NCHW, BATCH);
    assert_non_null(nt);
    net_init_params(nt, 7);
    return nt;
}

/* What a profile written by write_profile says. */
typedef struct spec {
    const char *model;
    int batch, c, h, w, classes;
    size_t params;
    double fwd_total, bwd_total, update;
    const double *fwd, *bwd;  /* [n_nodes] by node index; NULL: 0 */
    int drop;                 /* node left out of `layers`; -1: none */
    int dup;                  /* node listed twice; -1: none */
    const char *extra;        /* a layer the net does not have; NULL: none */
} spec;

static spec spec_for(const net *nt) {
    return (spec){.model = "resnet20", .batch = BATCH, .c = 3, .h = 8, .w = 8, .classes = 10,
                  .params = nt->n_params, .fwd_total = 7, .bwd_total = 14, .update = 1, .drop = -1, .dup = -1};
}

/* One entry of a profile's `layers`. */
typedef struct layer_entry {
    const char *name;
    double fwd, bwd;
    size_t begin, end; /* gradient range */
} layer_entry;

/* The gradient range of node i, as train/profile.c writes it; the range that
 * ends at the net's parameter count ends at `params` instead. */
static void node_range(const net *nt, int i, size_t params, size_t *begin, size_t *end) {
    const node *nd = &nt->nodes[i];
    *begin = *end = 0;
    for (int p = nd->first_param; p < nd->first_param + nd->n_params; p++) {
        const param_info *pi = &nt->param_info[p];
        if (*begin == *end || pi->offset < *begin) *begin = pi->offset;
        if (pi->offset + pi->count > *end) *end = pi->offset + pi->count;
    }
    if (*end == nt->n_params) *end = params;
}

/* A profile of nt with the fields of s: every field trainer --profile
 * writes, layers in backward order, one gradient bucket of all `params`
 * values and the layer that completes it by the reducer's rule. */
static void write_profile(const char *path, const net *nt, const spec *s) {
    layer_entry *l = cnt_calloc(2 * (size_t)nt->n_nodes + 1, sizeof *l);
    size_t *ends = cnt_calloc(2 * (size_t)nt->n_nodes + 1, sizeof *ends), cut = s->params;
    int n = 0, done;
    for (int i = nt->n_nodes - 1; i >= 0; i--) {
        if (i == s->drop) continue;
        for (int k = 0; k < (i == s->dup ? 2 : 1); k++, n++) {
            l[n] = (layer_entry){nt->nodes[i].name, s->fwd ? s->fwd[i] : 0, s->bwd ? s->bwd[i] : 0, 0, 0};
            node_range(nt, i, s->params, &l[n].begin, &l[n].end);
        }
    }
    if (s->extra) l[n++] = (layer_entry){s->extra, 1, 1, 0, 0};
    for (int k = 0; k < n; k++) ends[k] = l[k].end;
    reducer_bucket_ready_after(&cut, 1, ends, n, &done);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"model\":\"%s\",\"device\":\"cuda\",\"precision\":\"bf16\",\"layout\":\"nhwc\","
               "\"input\":[%d,%d,%d],\"classes\":%d,\"batch\":%d,\"steps\":20,\"warmup\":3,\"params\":%zu,"
               "\"grad_bytes\":%zu,\"step_ms\":30,\"forward_ms\":%.17g,\"backward_ms\":%.17g,\"update_ms\":%.17g,"
               "\"data_wait_ms\":0.1,\"first_bucket_values\":%zu,\"bucket_values\":%zu,"
               "\"buckets\":[{\"begin\":0,\"end\":%zu,\"bytes\":%zu}],\"layers\":[",
            s->model, s->c, s->h, s->w, s->classes, s->batch, s->params, 4 * s->params, s->fwd_total, s->bwd_total,
            s->update, s->params, s->params, s->params, 4 * s->params);
    for (int k = 0; k < n; k++)
        fprintf(f, "%s{\"name\":\"%s\",\"kind\":\"x\",\"forward_ms\":%.17g,\"backward_ms\":%.17g,\"grad_begin\":%zu,"
                   "\"grad_end\":%zu,\"grad_bytes\":%zu,\"completes\":[%s]}",
                k ? "," : "", l[k].name, l[k].fwd, l[k].bwd, l[k].begin, l[k].end, 4 * (l[k].end - l[k].begin),
                k == done ? "0" : "");
    fprintf(f, "]}\n");
    assert_int_equal(fclose(f), 0);
    free(l);
    free(ends);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static char dir[] = "/tmp/cnt_emulate_XXXXXX";

static int setup(void **state) {
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static void test_times_rescaled_to_the_phases(void **state) {
    (void)state;
    net *nt = small_net();
    int n = nt->n_nodes;
    double *fwd = cnt_malloc((size_t)n * sizeof *fwd), *bwd = cnt_malloc((size_t)n * sizeof *bwd);
    double fsum = 0, bsum = 0;
    for (int i = 0; i < n; i++) {
        fwd[i] = 1 + i % 3;
        bwd[i] = 2 + i % 5;
        fsum += fwd[i];
        bsum += bwd[i];
    }
    spec s = spec_for(nt);
    s.fwd = fwd;
    s.bwd = bwd;
    s.fwd_total = 0.5 * fsum;  /* the layers' sum is twice the phase: halved */
    s.bwd_total = 0.25 * bsum; /* four times: quartered */
    char path[128];
    snprintf(path, sizeof path, "%s/scaled.json", dir);
    write_profile(path, nt, &s);
    emulation em;
    assert_int_equal(emulation_load(&em, path, "resnet20", BATCH, nt), CNT_OK);
    assert_int_equal(em.n_nodes, n);
    double f = 0, b = 0;
    for (int i = 0; i < n; i++) { /* each node gets its own time, matched by name */
        NEAR(em.forward_ms[i], 0.5 * fwd[i]);
        NEAR(em.backward_ms[i], 0.25 * bwd[i]);
        f += em.forward_ms[i];
        b += em.backward_ms[i];
    }
    NEAR(f, s.fwd_total);
    NEAR(b, s.bwd_total);
    NEAR(em.update_ms, 1);
    assert_string_equal(em.device, "cuda");
    assert_string_equal(em.precision, "bf16");
    emulation_free(&em);

    /* all layer times 0: the phase spread evenly, as sim_step does */
    s.fwd = s.bwd = NULL;
    s.fwd_total = 7;
    s.bwd_total = 14;
    write_profile(path, nt, &s);
    assert_int_equal(emulation_load(&em, path, "resnet20", BATCH, nt), CNT_OK);
    for (int i = 0; i < n; i++) {
        NEAR(em.forward_ms[i], 7.0 / n);
        NEAR(em.backward_ms[i], 14.0 / n);
    }
    emulation_free(&em);
    emulation_free(&em); /* twice is fine */
    free(fwd);
    free(bwd);
    net_free(nt);
}

/* A real profile: the emulated backward ends each node where the simulator's
 * step at one worker ends it. */
static void test_agrees_with_the_simulator(void **state) {
    (void)state;
    config cfg;
    config_defaults(&cfg);
    const char *keys[] = {"model.name=resnet20", "data.kind=synthetic", "data.synthetic_shape=3x8x8",
                          "data.synthetic_train=64", "data.synthetic_test=8", "train.batch_size=4",
                          "train.device=cpu", "train.threads=1", "data.workers=1"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) assert_int_equal(config_override(&cfg, keys[k]), CNT_OK);
    char path[128];
    snprintf(path, sizeof path, "%s/real.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(profile_run(&cfg, 2, 1, f), CNT_OK);
    assert_int_equal(fclose(f), 0);

    net *nt = small_net();
    emulation em;
    assert_int_equal(emulation_load(&em, path, "resnet20", BATCH, nt), CNT_OK);
    profile p;
    assert_int_equal(profile_load(path, &p), CNT_OK);
    sim_cluster c = sim_cluster_default();
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 1, &r), CNT_OK);
    assert_int_equal(p.n_layers, nt->n_nodes);
    double t = 0, fwd = 0;
    for (int i = 0; i < p.n_layers; i++) {
        int k = nt->n_nodes - 1 - i; /* the profile's layers are in backward order */
        assert_string_equal(p.layers[i].name, nt->nodes[k].name);
        t += em.backward_ms[k];
        NEAR(t, r.layer_end_ms[i]);
        fwd += em.forward_ms[k];
    }
    NEAR(t, r.backward_ms);
    NEAR(fwd, r.forward_ms);
    NEAR(em.update_ms, r.update_ms);
    sim_result_free(&r);
    profile_free(&p);
    emulation_free(&em);
    net_free(nt);
}

/* Loads path and expects CNT_ERR with a message naming the key, the file and `what`. */
static void expect_refused(const char *path, const char *model, int batch_size, const net *nt, const char *what) {
    emulation em;
    assert_int_equal(emulation_load(&em, path, model, batch_size, nt), CNT_ERR);
    const char *msg = cnt_err_msg();
    if (!strstr(msg, "train.emulate_compute") || !strstr(msg, path) || !strstr(msg, what))
        fail_msg("message '%s' lacks train.emulate_compute, %s or '%s'", msg, path, what);
    assert_null(em.forward_ms);
    assert_null(em.backward_ms);
}

static void test_mismatches_refused(void **state) {
    (void)state;
    net *nt = small_net();
    char path[128];
    snprintf(path, sizeof path, "%s/bad.json", dir);
    spec s;

    expect_refused("/nonexistent/p.json", "resnet20", BATCH, nt, "No such file");
    write_text(path, "{\"model\":");
    expect_refused(path, "resnet20", BATCH, nt, ":1:");
    write_text(path, "[1,2]");
    expect_refused(path, "resnet20", BATCH, nt, "not a step profile");
    write_text(path, "{\"model\":\"resnet20\"}");
    expect_refused(path, "resnet20", BATCH, nt, "batch");

    s = spec_for(nt);
    write_profile(path, nt, &s);
    expect_refused(path, "resnet32", BATCH, nt, "resnet32");  /* the run's model differs */
    expect_refused(path, "resnet20", 8, nt, "batch");         /* the run's batch differs */
    s.c = 1;
    write_profile(path, nt, &s);
    expect_refused(path, "resnet20", BATCH, nt, "1x8x8");
    s = spec_for(nt);
    s.classes = 100;
    write_profile(path, nt, &s);
    expect_refused(path, "resnet20", BATCH, nt, "classes");
    s = spec_for(nt);
    s.params = nt->n_params + 1;
    write_profile(path, nt, &s);
    expect_refused(path, "resnet20", BATCH, nt, "parameters");
    s = spec_for(nt);
    s.drop = 5;
    write_profile(path, nt, &s);
    expect_refused(path, "resnet20", BATCH, nt, nt->nodes[5].name);
    s = spec_for(nt);
    s.extra = "layer9.conv1";
    write_profile(path, nt, &s);
    expect_refused(path, "resnet20", BATCH, nt, "layer9.conv1");
    s = spec_for(nt);
    s.dup = 9;
    write_profile(path, nt, &s);
    expect_refused(path, "resnet20", BATCH, nt, nt->nodes[9].name);
    s = spec_for(nt);
    s.update = -1;
    write_profile(path, nt, &s);
    expect_refused(path, "resnet20", BATCH, nt, "update_ms");
    net_free(nt);
}

/* The grad hook's calls: where the reducer's buckets are launched from. */
typedef struct hook_log {
    int n;
    size_t offset[256], count[256];
    double at[256]; /* time_now() of the call */
} hook_log;

static void record_hook(void *ctx, size_t offset, size_t count) {
    hook_log *h = ctx;
    assert_true(h->n < 256);
    h->offset[h->n] = offset;
    h->count[h->n] = count;
    h->at[h->n] = time_now();
    h->n++;
}

static void test_emulated_passes(void **state) {
    (void)state;
    net *nt = small_net();
    const backend *be = nt->be;
    int n = nt->n_nodes;
    size_t in_count = (size_t)BATCH * 3 * 8 * 8, logits = (size_t)BATCH * nt->classes;
    float *x = be->alloc(in_count * sizeof(float)), *dl = be->alloc(logits * sizeof(float));
    float *hx = cnt_malloc(in_count * sizeof(float)), *hd = cnt_malloc(logits * sizeof(float));
    for (size_t i = 0; i < in_count; i++) hx[i] = (float)((int)(i % 17) - 8) / 8;
    for (size_t i = 0; i < logits; i++) hd[i] = (float)((int)(i % 5) - 2) / 16;
    be->upload(x, hx, in_count * sizeof(float));
    be->upload(dl, hd, logits * sizeof(float));

    /* the real passes: the hook's slices in order */
    hook_log real = {0}, emu = {0};
    net_set_grad_hook(nt, record_hook, &real);
    net_forward(nt, x, BATCH, 1);
    net_backward(nt, dl, NULL);
    float *ref_logits = cnt_malloc(logits * sizeof(float)), *out = cnt_malloc(logits * sizeof(float));
    net_forward(nt, x, BATCH, 0);
    be->download(ref_logits, net_logits(nt), logits * sizeof(float));

    /* emulated: 0.05 ms forward, 0.1 ms backward per node */
    size_t P = nt->n_params;
    float *params0 = cnt_malloc(P * sizeof(float)), *grads0 = cnt_malloc(P * sizeof(float));
    float *after = cnt_malloc(P * sizeof(float));
    be->download(params0, nt->params, P * sizeof(float));
    be->download(grads0, nt->grads, P * sizeof(float));
    double *fwd = cnt_malloc((size_t)n * sizeof *fwd), *bwd = cnt_malloc((size_t)n * sizeof *bwd);
    for (int i = 0; i < n; i++) {
        fwd[i] = 0.05;
        bwd[i] = 0.1;
    }
    net_set_emulation(nt, fwd, bwd);
    net_set_grad_hook(nt, record_hook, &emu);
    double t0 = time_now();
    net_forward(nt, x, BATCH, 1);
    double t1 = time_now();
    net_backward(nt, dl, NULL);
    double t2 = time_now();
    assert_true(t1 - t0 >= 1e-3 * 0.05 * n);
    assert_true(t2 - t1 >= 1e-3 * 0.1 * n);
    /* the same slices in the same order, each no earlier than its node's deadline */
    assert_int_equal(emu.n, real.n);
    assert_true(emu.n > 1);
    for (int k = 0; k < emu.n; k++) {
        assert_int_equal(emu.offset[k], real.offset[k]);
        assert_int_equal(emu.count[k], real.count[k]);
    }
    /* nothing computed: parameters and gradients as they were; the logits 0 (a finite loss) */
    be->download(after, nt->params, P * sizeof(float));
    assert_memory_equal(after, params0, P * sizeof(float));
    be->download(after, nt->grads, P * sizeof(float));
    assert_memory_equal(after, grads0, P * sizeof(float));
    be->download(out, net_logits(nt), logits * sizeof(float));
    for (size_t i = 0; i < logits; i++) assert_true(out[i] == 0.0f);

    /* off again: real compute, the same logits as before */
    net_set_emulation(nt, NULL, NULL);
    net_forward(nt, x, BATCH, 0);
    be->download(out, net_logits(nt), logits * sizeof(float));
    assert_memory_equal(out, ref_logits, logits * sizeof(float));

    free(fwd);
    free(bwd);
    free(params0);
    free(grads0);
    free(after);
    free(ref_logits);
    free(out);
    free(hx);
    free(hd);
    be->free(x);
    be->free(dl);
    net_free(nt);
}

/* The stepper's emulated update: it sleeps update_ms and leaves the
 * parameters alone; the loss is finite. */
static void test_emulated_update(void **state) {
    (void)state;
    net *nt = small_net();
    const backend *be = nt->be;
    double *t = cnt_calloc((size_t)nt->n_nodes, sizeof *t);
    net_set_emulation(nt, t, t);
    optim_opts oo = {.momentum = 0.9f, .weight_decay = 5e-4f, .wd_on_bn_bias = 1};
    loss_scale_opts lso = {.mode = LOSS_SCALE_DYNAMIC, .scale = 65536, .window = 2000};
    step_opts so = {.emulate = 1, .emulate_update_ms = 3};
    stepper st;
    size_t sample = 3 * 8 * 8;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &lso, &so, BATCH, 3, 8 * 8, 0);
    float *x = cnt_calloc(BATCH * sample, sizeof(float));
    int32_t labels[BATCH] = {1, 2, 3, 4};
    batch b = {.n = BATCH, .x = x, .labels = labels};
    size_t P = nt->n_params;
    float *p0 = cnt_malloc(P * sizeof(float)), *p1 = cnt_malloc(P * sizeof(float));
    be->download(p0, nt->params, P * sizeof(float));
    for (int step = 1; step <= 2; step++) {
        step_result r;
        assert_int_equal(stepper_run(&st, &b, step, 0.1, &r), CNT_OK);
        assert_true(r.applied);
        assert_true(r.update_s >= 3e-3);
        float loss;
        be->download(&loss, st.loss, sizeof loss);
        assert_true(isfinite(loss));
    }
    be->download(p1, nt->params, P * sizeof(float));
    assert_memory_equal(p1, p0, P * sizeof(float));
    stepper_free(&st);
    free(p0);
    free(p1);
    free(x);
    free(t);
    net_free(nt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_times_rescaled_to_the_phases),
        cmocka_unit_test(test_agrees_with_the_simulator),
        cmocka_unit_test(test_mismatches_refused),
        cmocka_unit_test(test_emulated_passes),
        cmocka_unit_test(test_emulated_update),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
