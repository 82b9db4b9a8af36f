/*
 * tests/test_optim.c - learning-rate schedules and the SGD (and LARS) step
 * over the flat parameter buffer: warm-up ramp, step milestones, cosine end
 * points, weight decay applied to exactly the tensors it should be, LARS's
 * trust ratios on exactly the weight tensors (checked against the
 * double-precision reference update, tensor by tensor).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "model/net.h"
#include "tests/support/ref.h"
#include "tests/support/testutil.h"
#include "train/config.h"
#include "train/optim.h"

static void set(config *cfg, const char *kv) { assert_int_equal(config_override(cfg, kv), CNT_OK); }

/* schedule_lr of the config's schedule with the given effective base rate,
 * warm-up start and length (config_schedule derives those from a world size). */
static double lr_at(const config *cfg, double base_lr, double warmup_start, long step, long steps_per_epoch,
                    long total_steps) {
    schedule s = config_schedule(cfg, 1, steps_per_epoch);
    s.base_lr = base_lr;
    s.warmup_start = warmup_start;
    s.total_steps = total_steps;
    return schedule_lr(&s, step);
}

static void test_constant_and_warmup(void **state) {
    (void)state;
    config cfg;
    config_defaults(&cfg);
    set(&cfg, "optim.schedule=constant");
    set(&cfg, "optim.warmup_epochs=2");
    /* 10 steps per epoch: warm-up is 20 steps, step s gets (s+1)/20 of the rate */
    assert_float_equal(lr_at(&cfg, 0.4, 0.0, 0, 10, 100), 0.4 * 1 / 20, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.4, 0.0, 9, 10, 100), 0.4 * 10 / 20, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.4, 0.0, 19, 10, 100), 0.4, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.4, 0.0, 20, 10, 100), 0.4, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.4, 0.0, 99, 10, 100), 0.4, 1e-12);
    /* fractional warm-up */
    set(&cfg, "optim.warmup_epochs=0.5");
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 0, 10, 100), 0.2, 1e-12);
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 4, 10, 100), 1.0, 1e-12);
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 5, 10, 100), 1.0, 1e-12);
    /* Goyal et al.'s gradual warm-up: from one worker's rate 0.1 to 4 x 0.1
     * over 20 steps: step s gets 0.1 + 0.3 (s+1)/20. */
    set(&cfg, "optim.warmup_epochs=2");
    assert_float_equal(lr_at(&cfg, 0.4, 0.1, 0, 10, 100), 0.1 + 0.3 / 20, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.4, 0.1, 9, 10, 100), 0.1 + 0.3 * 10 / 20, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.4, 0.1, 19, 10, 100), 0.4, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.4, 0.1, 50, 10, 100), 0.4, 1e-12);
    /* One worker: the start equals the rate, so there is no ramp. */
    assert_float_equal(lr_at(&cfg, 0.1, 0.1, 0, 10, 100), 0.1, 1e-12);
    /* A start above the schedule's value never raises the rate. */
    set(&cfg, "optim.schedule=cosine");
    set(&cfg, "optim.min_lr=0");
    assert_true(lr_at(&cfg, 0.4, 0.5, 19, 10, 20) <= 0.4);
}

static void test_step_schedule(void **state) {
    (void)state;
    config cfg;
    config_defaults(&cfg);
    set(&cfg, "optim.schedule=step");
    set(&cfg, "optim.milestones=3,5");
    set(&cfg, "optim.gamma=0.1");
    set(&cfg, "optim.warmup_epochs=0");
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 0, 10, 80), 1.0, 1e-12);
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 29, 10, 80), 1.0, 1e-12);
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 30, 10, 80), 0.1, 1e-12);
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 49, 10, 80), 0.1, 1e-12);
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 50, 10, 80), 0.01, 1e-12);
    assert_float_equal(lr_at(&cfg, 1.0, 0.0, 79, 10, 80), 0.01, 1e-12);
}

/* poly (MLPerf's with LARS): min_lr + (lr - min_lr) (1 - t)^power, t =
 * step / total steps, held at min_lr past the end; warm-up multiplies in as
 * for the others; a min_lr above lr refused naming the schedule. */
static void test_poly_schedule(void **state) {
    (void)state;
    config cfg;
    config_defaults(&cfg);
    set(&cfg, "optim.schedule=poly");
    set(&cfg, "optim.warmup_epochs=0");
    set(&cfg, "optim.min_lr=0.0001");
    assert_float_equal(lr_at(&cfg, 2.0, 0.0, 0, 10, 100), 2.0, 1e-12);
    assert_float_equal(lr_at(&cfg, 2.0, 0.0, 25, 10, 100), 0.0001 + 1.9999 * 0.75 * 0.75, 1e-12);
    assert_float_equal(lr_at(&cfg, 2.0, 0.0, 90, 10, 100), 0.0001 + 1.9999 * 0.1 * 0.1, 1e-12);
    assert_float_equal(lr_at(&cfg, 2.0, 0.0, 100, 10, 100), 0.0001, 1e-12);
    assert_float_equal(lr_at(&cfg, 2.0, 0.0, 150, 10, 100), 0.0001, 1e-12);
    set(&cfg, "optim.poly_power=1"); /* linear decay */
    assert_float_equal(lr_at(&cfg, 2.0, 0.0, 50, 10, 100), 0.0001 + 1.9999 * 0.5, 1e-12);
    set(&cfg, "optim.warmup_epochs=1");
    double plain = 0.0001 + 1.9999 * (1.0 - 4 / 100.0);
    assert_float_equal(lr_at(&cfg, 2.0, 0.0, 4, 10, 100), plain * 5 / 10, 1e-12);
    set(&cfg, "optim.lr=0.1");
    set(&cfg, "optim.min_lr=0.2");
    assert_int_equal(config_validate(&cfg), CNT_ERR);
    tu_assert_contains(cnt_err_msg(), "optim.min_lr (0.2) is above optim.lr (0.1): the poly schedule");
}

static void test_cosine_schedule(void **state) {
    (void)state;
    config cfg;
    config_defaults(&cfg);
    set(&cfg, "optim.schedule=cosine");
    set(&cfg, "optim.warmup_epochs=0");
    set(&cfg, "optim.min_lr=0.001");
    assert_float_equal(lr_at(&cfg, 0.1, 0.0, 0, 10, 100), 0.1, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.1, 0.0, 50, 10, 100), 0.001 + 0.099 * 0.5, 1e-12);
    assert_float_equal(lr_at(&cfg, 0.1, 0.0, 100, 10, 100), 0.001, 1e-12);
    /* monotone non-increasing */
    double prev = 1;
    for (long s = 0; s <= 100; s++) {
        double lr = lr_at(&cfg, 0.1, 0.0, s, 10, 100);
        assert_true(lr <= prev + 1e-15);
        prev = lr;
    }
    /* warm-up multiplies the cosine value */
    set(&cfg, "optim.warmup_epochs=1");
    double plain = 0.001 + 0.099 * 0.5 * (1 + cos(M_PI * 4 / 100.0));
    assert_float_equal(lr_at(&cfg, 0.1, 0.0, 4, 10, 100), plain * 5 / 10, 1e-12);
}

/* A small net whose tensors alternate decayed (conv/linear weights) and
 * exempt (BN, bias) parameters: finalized and initialised, or (described)
 * only laid out, as a parameter server's (net_param_layout). */
static net *build_small_net(int described) {
    net *nt = net_create(backend_cpu(), 2, 5, 5, 3);
    int c = net_conv(nt, NET_INPUT, "conv", 4, 3, 1, 1, 1);
    int b = net_bn(nt, c, "bn", 1e-5f);
    int r = net_relu(nt, b, "relu");
    int c2 = net_conv(nt, r, "conv2", 4, 3, 2, 1, 0);
    int fc = net_linear(nt, c2, "fc", 3, 1);
    if (described) {
        net_param_layout(nt);
        return nt;
    }
    assert_int_equal(net_finalize(nt, fc, -1, 2), CNT_OK);
    net_init_params(nt, 5);
    return nt;
}

static net *small_net(void) { return build_small_net(0); }

static void check_update(int lars, int wd_on_bn_bias, int nesterov, int zero_conv2);
static void check_sgd(int wd_on_bn_bias, int nesterov) { check_update(0, wd_on_bn_bias, nesterov, 0); }

static void test_sgd_no_decay_on_bn_bias(void **state) {
    (void)state;
    check_sgd(0, 0);
    check_sgd(0, 1);
}

static void test_sgd_decay_everywhere(void **state) {
    (void)state;
    check_sgd(1, 0);
}

/* optim_ranges: the tensors' ranges, neighbours with the same decay merged,
 * covering [begin, end) exactly once, each value with its tensor's decay;
 * a cut through the middle of tensors (a parameter server's shard) clips
 * the ranges at its ends. */
static void test_sgd_ranges(void **state) {
    (void)state;
    net *nt = small_net();
    optimizer opt;
    optim_opts oo = {.momentum = 0.9f, .weight_decay = 0.01f};
    optim_init(&opt, nt, &oo);
    size_t n = nt->n_params;
    size_t cuts[][2] = {{0, n}, {3, n - 2}, {n / 2, n / 2 + 1}, {5, 5}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        size_t begin = cuts[c][0], end = cuts[c][1];
        size_t lo[16], hi[16];
        float wd[16];
        assert_true(nt->n_param_tensors <= 16);
        int k = optim_ranges(&opt, nt, begin, end, lo, hi, wd, NULL);
        float *want = tu_alloc_f(n);
        int *seen = calloc(n, sizeof *seen);
        for (int t = 0; t < nt->n_param_tensors; t++) {
            const param_info *pi = &nt->param_info[t];
            for (size_t i = pi->offset; i < pi->offset + pi->count; i++) want[i] = pi->no_decay ? 0.0f : 0.01f;
        }
        for (int r = 0; r < k; r++) {
            assert_true(begin <= lo[r] && lo[r] < hi[r] && hi[r] <= end);
            for (size_t i = lo[r]; i < hi[r]; i++) {
                seen[i]++;
                assert_float_equal(wd[r], want[i], 0.0);
            }
            /* merged: a neighbouring range has the other decay or is not adjacent */
            if (r > 0) assert_true(wd[r] != wd[r - 1] || hi[r] != lo[r - 1]);
        }
        for (size_t i = 0; i < n; i++) assert_int_equal(seen[i], i >= begin && i < end);
        if (begin == 0 && end == n) assert_true(k >= 4 && k < nt->n_param_tensors);
        free(want);
        free(seen);
    }
    optim_free(&opt);
    net_free(nt);
}

/* A parameter server's update (train/ps_server.c): optimizers of
 * optim_init_shard on a net that is only laid out, stepping buffers that
 * hold their shard alone, cut through the middle of tensors, must leave
 * every parameter and momentum value bit for bit as optim_step on the whole
 * net does, with and without Nesterov momentum. */
static void check_shard(int nesterov, int lars) {
    net *nt = small_net(), *desc = build_small_net(1);
    const backend *be = nt->be;
    size_t n = nt->n_params;
    assert_int_equal(desc->n_params, n);
    assert_null(desc->params); /* nothing allocated */
    for (int t = 0; t < nt->n_param_tensors; t++)
        assert_int_equal(desc->param_info[t].offset, nt->param_info[t].offset);
    optim_opts oo = {.momentum = 0.9f, .weight_decay = 0.01f, .nesterov = nesterov, .lars = lars, .lars_eta = 0.3f};
    optimizer whole, shard[2];
    optim_init(&whole, nt, &oo);
    size_t cut[3] = {0, n / 2 + 3, n}; /* n / 2 + 3: inside a tensor */
    if (lars) /* LARS: shards of whole tensors, as ps_plan cuts them: the first tensor boundary past n / 2 */
        for (int t = 0; t < nt->n_param_tensors; t++)
            if (nt->param_info[t].offset > n / 2 && (cut[1] == n / 2 + 3 || nt->param_info[t].offset < cut[1]))
                cut[1] = nt->param_info[t].offset;
    assert_true(cut[1] > 0 && cut[1] < n);
    float *sp[2], *sg[2], *host = tu_alloc_f(n), *g = tu_alloc_f(n);
    be->download(host, nt->params, n * sizeof(float));
    for (int s = 0; s < 2; s++) {
        optim_init_shard(&shard[s], desc, &oo, cut[s], cut[s + 1]);
        sp[s] = tu_alloc_f(cut[s + 1] - cut[s]);
        sg[s] = tu_alloc_f(cut[s + 1] - cut[s]);
        memcpy(sp[s], host + cut[s], (cut[s + 1] - cut[s]) * sizeof(float));
        memset(shard[s].momentum_buf, 0, (cut[s + 1] - cut[s]) * sizeof(float));
    }
    be->zero(whole.momentum_buf, n * sizeof(float));
    rng r;
    rng_seed(&r, 12, 0);
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < n; i++) g[i] = rng_normal(&r);
        be->upload(nt->grads, g, n * sizeof(float));
        optim_step(&whole, nt, 0.05f, 0.5f);
        for (int s = 0; s < 2; s++) {
            memcpy(sg[s], g + cut[s], (cut[s + 1] - cut[s]) * sizeof(float));
            optim_step_shard(&shard[s], desc, sp[s], sg[s], 0.05f, 0.5f, cut[s], cut[s + 1]);
        }
    }
    float *mom = tu_alloc_f(n);
    be->download(host, nt->params, n * sizeof(float));
    be->download(mom, whole.momentum_buf, n * sizeof(float));
    for (int s = 0; s < 2; s++) {
        assert_memory_equal(sp[s], host + cut[s], (cut[s + 1] - cut[s]) * sizeof(float));
        assert_memory_equal(shard[s].momentum_buf, mom + cut[s], (cut[s + 1] - cut[s]) * sizeof(float));
        optim_free(&shard[s]);
        free(sp[s]);
        free(sg[s]);
    }
    optim_free(&whole);
    free(host);
    free(g);
    free(mom);
    net_free(nt);
    net_free(desc);
}

static void test_sgd_shard(void **state) {
    (void)state;
    check_shard(0, 0);
    check_shard(1, 0);
}

static void test_lars_shard(void **state) {
    (void)state;
    check_shard(0, 1);
    check_shard(1, 1);
}

/* SGD, and LARS, against the double-precision reference over 3 steps:
 * weight decay on exactly the tensors it should be; with LARS each weight
 * tensor's step scaled by eta ||w|| / (||g|| + wd ||w||) from this step's
 * values (g after grad_scale), batch-norm and bias parameters stepped as
 * SGD, and a weight tensor of zeros (a zero-initialised layer) given a trust
 * ratio of 1. The parameters' changes are compared, so that a trust ratio
 * off by a few per cent shows. */
static void check_update(int lars, int wd_on_bn_bias, int nesterov, int zero_conv2) {
    config cfg;
    config_defaults(&cfg);
    if (lars) set(&cfg, "optim.name=lars");
    set(&cfg, "optim.lars_eta=0.3");
    set(&cfg, "optim.momentum=0.9");
    set(&cfg, "optim.weight_decay=0.01");
    set(&cfg, nesterov ? "optim.nesterov=true" : "optim.nesterov=false");
    set(&cfg, wd_on_bn_bias ? "optim.wd_on_bn_bias=true" : "optim.wd_on_bn_bias=false");
    net *nt = small_net();
    const backend *be = nt->be;
    size_t n = nt->n_params;
    if (zero_conv2) {
        const param_info *pi = &nt->param_info[net_find_param(nt, "conv2.weight")];
        be->zero(nt->params + pi->offset, pi->count * sizeof(float));
    }
    rng r;
    rng_seed(&r, 13, 0);
    double *p = tu_alloc(n), *p0 = tu_alloc(n), *g = tu_alloc(n), *m = tu_alloc(n), *got = tu_alloc(n);
    float *pf = tu_alloc_f(n);
    be->download(pf, nt->params, n * sizeof(float));
    tu_to_double(pf, p, n);
    memcpy(p0, p, n * sizeof(double));
    optimizer opt;
    optim_opts oo = config_optim_opts(&cfg);
    assert_true(oo.lars == lars && oo.lars_eta == 0.3f);
    optim_init(&opt, nt, &oo);
    int ones = 0;
    for (int step = 0; step < 3; step++) {
        tu_fill_normal(&r, g, n, 0.0, 1.0);
        float *gd = tu_dev_from_double(be, g, n);
        be->copy(nt->grads, gd, n * sizeof(float));
        be->free(gd);
        optim_step(&opt, nt, 0.05f, 0.5f);
        for (int t = 0; t < nt->n_param_tensors; t++) {
            const param_info *pi = &nt->param_info[t];
            double wd = (!pi->no_decay || wd_on_bn_bias) ? 0.01 : 0.0, trust = 1.0;
            if (lars && !pi->no_decay) {
                double w2 = 0, g2 = 0;
                for (size_t i = pi->offset; i < pi->offset + pi->count; i++) {
                    w2 += p[i] * p[i];
                    g2 += g[i] * g[i];
                }
                double w = sqrt(w2), gn = 0.5 * sqrt(g2);
                if (w > 0 && gn > 0) trust = 0.3 * w / (gn + 0.01 * w);
                else ones++;
            }
            ref_sgd_update(pi->count, p + pi->offset, g + pi->offset, m + pi->offset, 0.05, 0.9, trust * wd,
                           nesterov, trust * 0.5);
        }
    }
    assert_int_equal(ones, zero_conv2 ? 1 : 0); /* conv2's first step only: it is not zero after it */
    be->download(pf, nt->params, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        got[i] = (double)pf[i] - p0[i];
        p[i] -= p0[i];
    }
    tu_assert_close(lars ? "parameter changes over 3 LARS steps" : "parameter changes over 3 SGD steps", p, got, n,
                    1e-4, 1e-7);
    optim_free(&opt);
    free(p);
    free(p0);
    free(g);
    free(m);
    free(got);
    free(pf);
    net_free(nt);
}

static void test_lars(void **state) {
    (void)state;
    check_update(1, 0, 0, 0);
    check_update(1, 0, 1, 0);
    check_update(1, 1, 0, 0);
    check_update(1, 0, 0, 1);
}

/* optim_ranges with LARS: each weight tensor a range of its own, flagged
 * adapted; batch-norm and bias parameters merged as for SGD, not adapted. */
static void test_lars_ranges(void **state) {
    (void)state;
    net *nt = small_net();
    optimizer opt;
    optim_opts oo = {.momentum = 0.9f, .weight_decay = 0.01f, .lars = 1, .lars_eta = 0.001f};
    optim_init(&opt, nt, &oo);
    size_t lo[16], hi[16];
    float wd[16];
    int adapt[16];
    int k = optim_ranges(&opt, nt, 0, nt->n_params, lo, hi, wd, adapt), adapted = 0;
    for (int r = 0; r < k; r++) {
        int whole = 0, no_decay = -1;
        for (int t = 0; t < nt->n_param_tensors; t++) {
            const param_info *pi = &nt->param_info[t];
            if (pi->offset == lo[r] && pi->offset + pi->count == hi[r]) whole = 1;
            if (pi->offset >= lo[r] && pi->offset < hi[r]) no_decay = pi->no_decay;
        }
        assert_int_equal(adapt[r], !no_decay);
        if (adapt[r]) {
            assert_true(whole);
            adapted++;
        }
    }
    assert_int_equal(adapted, 3); /* conv.weight, conv2.weight, fc.weight */
    optim_free(&opt);
    net_free(nt);
}

static void test_no_decay_flags(void **state) {
    (void)state;
    net *nt = small_net();
    const char *exempt[] = {"conv.bias", "bn.weight", "bn.bias", "fc.bias"};
    const char *decayed[] = {"conv.weight", "conv2.weight", "fc.weight"};
    for (size_t i = 0; i < 4; i++) assert_true(nt->param_info[net_find_param(nt, exempt[i])].no_decay);
    for (size_t i = 0; i < 3; i++) assert_false(nt->param_info[net_find_param(nt, decayed[i])].no_decay);
    net_free(nt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant_and_warmup),
        cmocka_unit_test(test_step_schedule),
        cmocka_unit_test(test_cosine_schedule),
        cmocka_unit_test(test_poly_schedule),
        cmocka_unit_test(test_no_decay_flags),
        cmocka_unit_test(test_sgd_no_decay_on_bn_bias),
        cmocka_unit_test(test_sgd_decay_everywhere),
        cmocka_unit_test(test_sgd_ranges),
        cmocka_unit_test(test_sgd_shard),
        cmocka_unit_test(test_lars),
        cmocka_unit_test(test_lars_ranges),
        cmocka_unit_test(test_lars_shard),
    };
    return cmocka_run_group_tests_name("optim", tests, NULL, NULL);
}
