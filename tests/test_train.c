/*
 * tests/test_train.c - end to end on the CPU: ResNet-20 learns Fashion-MNIST
 * from a slice of the real data (the loss falls and test accuracy passes 70%),
 * the same config and seed reproduce the same losses, and user errors in the
 * run setup are reported, not crashed on.
 *
 * Needs Fashion-MNIST from Debian's dataset-fashion-mnist (`make deps`).
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
#include "model/net.h"
#include "model/zoo.h"
#include "common/hash.h"
#include "train/bench.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/trainer.h"
#include "tests/support/testutil.h"

/* Every directory a test writes lives under one mkdtemp root, removed at the end. */
static char root[] = "/tmp/cnt_train_XXXXXX";

static int make_root(void **state) {
    (void)state;
    return mkdtemp(root) ? 0 : -1;
}

static int remove_root(void **state) {
    (void)state;
    tu_remove_tree(root);
    return 0;
}

/* A new directory under the root, its path into d (160 bytes); NULL on failure. */
static char *tmp_dir(char *d) {
    snprintf(d, 160, "%s/XXXXXX", root);
    return mkdtemp(d);
}

static void small_config(config *cfg, const char *out_dir) {
    config_defaults(cfg);
    assert_int_equal(config_override(cfg, "model.name=resnet20"), CNT_OK);
    assert_int_equal(config_override(cfg, "data.train_limit=4096"), CNT_OK);
    assert_int_equal(config_override(cfg, "data.test_limit=1000"), CNT_OK);
    assert_int_equal(config_override(cfg, "train.batch_size=32"), CNT_OK);
    assert_int_equal(config_override(cfg, "train.epochs=3"), CNT_OK);
    assert_int_equal(config_override(cfg, "train.log_every=32"), CNT_OK);
    assert_int_equal(config_override(cfg, "optim.lr=0.05"), CNT_OK);
    assert_int_equal(config_override(cfg, "optim.warmup_epochs=0.5"), CNT_OK);
    char o[600];
    snprintf(o, sizeof o, "train.out_dir=%s", out_dir);
    assert_int_equal(config_override(cfg, o), CNT_OK);
    assert_int_equal(config_validate(cfg), CNT_OK);
}

static int count_lines_with(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) n++;
    fclose(f);
    return n;
}

static void test_learns_fashion_mnist(void **state) {
    (void)state;
    char dir[160];
    assert_non_null(tmp_dir(dir));
    config cfg;
    small_config(&cfg, dir);
    train_result r;
    assert_int_equal(trainer_run(&cfg, &r), CNT_OK);
    /* 3 epochs x 128 steps of 32 images */
    assert_int_equal(r.steps, 3 * (4096 / 32));
    print_message("first loss %.4f, last loss %.4f, top-1 %.4f, top-5 %.4f\n", r.first_loss, r.last_loss, r.top1,
                  r.top5);
    assert_true(r.first_loss > 1.8);       /* ln(10) = 2.30 at random init */
    assert_true(r.last_loss < 0.7 * r.first_loss);
    assert_true(r.top1 > 0.70);
    assert_true(r.top5 > r.top1);
    char path[700];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    assert_int_equal(count_lines_with(path, "\"kind\":\"step\""), 3 * 128 / 32);
    assert_int_equal(count_lines_with(path, "\"kind\":\"eval\""), 3);
    assert_int_equal(count_lines_with(path, "\"data_wait_ms\""), 3 * 128 / 32 + 3);
    snprintf(path, sizeof path, "%s/config.ini", dir);
    config back;
    config_defaults(&back);
    assert_int_equal(config_load(&back, path), CNT_OK);
    assert_int_equal(back.train_limit, 4096);
}

static void test_same_seed_same_losses(void **state) {
    (void)state;
    char d1[160], d2[160];
    assert_non_null(tmp_dir(d1));
    assert_non_null(tmp_dir(d2));
    config c1, c2;
    small_config(&c1, d1);
    small_config(&c2, d2);
    assert_int_equal(config_override(&c1, "train.max_steps=20"), CNT_OK);
    assert_int_equal(config_override(&c2, "train.max_steps=20"), CNT_OK);
    /* Bitwise reproducibility is the CPU backend's promise. On a GPU, cuDNN's
     * algorithms are chosen by timing them (cudnnFind, as PyTorch's
     * benchmark mode), so two runs may sum in different orders. */
    assert_int_equal(config_override(&c1, "train.device=cpu"), CNT_OK);
    assert_int_equal(config_override(&c2, "train.device=cpu"), CNT_OK);
    assert_int_equal(config_override(&c1, "train.log_every=5"), CNT_OK);
    assert_int_equal(config_override(&c2, "train.log_every=5"), CNT_OK);
    train_result r1, r2;
    assert_int_equal(trainer_run(&c1, &r1), CNT_OK);
    assert_int_equal(trainer_run(&c2, &r2), CNT_OK);
    assert_int_equal(r1.steps, 20);
    assert_true(r1.first_loss == r2.first_loss);
    assert_true(r1.last_loss == r2.last_loss);
    assert_true(r1.top1 == r2.top1);
    /* and the step records agree line for line (apart from timings) */
    char p1[700], p2[700];
    snprintf(p1, sizeof p1, "%s/metrics.jsonl", d1);
    snprintf(p2, sizeof p2, "%s/metrics.jsonl", d2);
    FILE *f1 = fopen(p1, "r"), *f2 = fopen(p2, "r");
    assert_non_null(f1);
    assert_non_null(f2);
    char l1[1024], l2[1024];
    int compared = 0;
    while (fgets(l1, sizeof l1, f1) && fgets(l2, sizeof l2, f2)) {
        char *a = strstr(l1, "\"loss\":"), *b = strstr(l2, "\"loss\":");
        if (!a || !b) continue;
        *strchr(a, ',') = '\0';
        *strchr(b, ',') = '\0';
        assert_string_equal(a, b);
        compared++;
    }
    assert_int_equal(compared, 4);
    fclose(f1);
    fclose(f2);

    /* another seed gives other losses */
    config c3;
    char d3[160];
    assert_non_null(tmp_dir(d3));
    small_config(&c3, d3);
    assert_int_equal(config_override(&c3, "train.max_steps=20"), CNT_OK);
    assert_int_equal(config_override(&c3, "train.seed=7"), CNT_OK);
    train_result r3;
    assert_int_equal(trainer_run(&c3, &r3), CNT_OK);
    assert_true(r3.first_loss != r1.first_loss);
}

static void test_setup_errors(void **state) {
    (void)state;
    config cfg;
    char errors_dir[160];
    assert_non_null(tmp_dir(errors_dir));
    small_config(&cfg, errors_dir);
    assert_int_equal(config_override(&cfg, "data.root=/nonexistent/fmnist"), CNT_OK);
    assert_int_equal(trainer_run(&cfg, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "/nonexistent/fmnist"));

    small_config(&cfg, errors_dir);
    assert_int_equal(config_override(&cfg, "model.name=resnet21"), CNT_OK);
    assert_int_equal(trainer_run(&cfg, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "resnet21"));

    /* VGG's five poolings do not fit 28x28 */
    small_config(&cfg, errors_dir);
    assert_int_equal(config_override(&cfg, "model.name=vgg11"), CNT_OK);
    assert_int_equal(trainer_run(&cfg, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "vgg11"));
    assert_non_null(strstr(cnt_err_msg(), "28"));

    /* an out_dir that cannot be created */
    small_config(&cfg, "/proc/cnt_cannot_write_here");
    assert_int_equal(trainer_run(&cfg, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "/proc/cnt_cannot_write_here"));
}

/* Reads a checkpoint of a resnet20 run on Fashion-MNIST into fresh arrays. */
typedef struct ckpt_arrays {
    float *params, *buffers, *momentum;
    size_t n_params, n_buffers;
    ckpt_meta meta;
} ckpt_arrays;

static void read_ckpt_of(const char *path, const char *model, int c, int hw, ckpt_arrays *a) {
    net *nt = net_create(backend_cpu(), c, hw, hw, 10);
    int out, aux;
    zoo_options zo = {0, 1, -1, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    assert_int_equal(zoo_build(nt, model, &zo, &out, &aux), CNT_OK);
    assert_int_equal(net_finalize(nt, out, aux, 1), CNT_OK);
    a->n_params = nt->n_params;
    a->n_buffers = nt->n_buffers;
    a->params = malloc(a->n_params * sizeof(float));
    a->buffers = malloc(a->n_buffers * sizeof(float));
    a->momentum = malloc(a->n_params * sizeof(float));
    int has_momentum = 0;
    if (ckpt_read(path, nt, a->params, a->buffers, a->momentum, &has_momentum, NULL, &a->meta) != CNT_OK)
        fail_msg("%s", cnt_err_msg());
    assert_true(has_momentum);
    net_free(nt);
}

static void read_ckpt(const char *path, ckpt_arrays *a) { read_ckpt_of(path, "resnet20", 1, 28, a); }

static void free_ckpt(ckpt_arrays *a) {
    free(a->params);
    free(a->buffers);
    free(a->momentum);
}

/* Training 2 epochs equals training 1, stopping, and resuming for 1: bit for
 * bit, parameters, batch-norm buffers and momentum. */
/* Runs a (2 epochs) and b (1 epoch, then resumed for the second) with the
 * given extra overrides; leaves the final checkpoints' paths in pa and pb. */
/* resume_extra: a setting for the resumed half only (NULL: none). */
static void resume_case(const char *const *extra, size_t n_extra, const char *resume_extra, char *da, char *db,
                        char *pa, char *pb, size_t len) {
    /* the CPU: bitwise equality of two runs is its promise, not a GPU's */
    const char *common[] = {"data.train_limit=512", "data.test_limit=100", "train.epochs=2", "train.log_every=8",
                            "checkpoint.keep=0", "train.device=cpu"};
    config a, b;
    small_config(&a, da);
    small_config(&b, db);
    for (size_t i = 0; i < sizeof common / sizeof *common; i++) {
        assert_int_equal(config_override(&a, common[i]), CNT_OK);
        assert_int_equal(config_override(&b, common[i]), CNT_OK);
    }
    for (size_t i = 0; i < n_extra; i++) {
        assert_int_equal(config_override(&a, extra[i]), CNT_OK);
        assert_int_equal(config_override(&b, extra[i]), CNT_OK);
    }
    assert_int_equal(trainer_run(&a, NULL), CNT_OK);
    /* b: stop after the first epoch (16 steps), then resume */
    assert_int_equal(config_override(&b, "train.max_steps=16"), CNT_OK);
    train_result rb;
    assert_int_equal(trainer_run(&b, &rb), CNT_OK);
    assert_int_equal(rb.steps, 16);
    assert_int_equal(config_override(&b, "train.max_steps=0"), CNT_OK);
    assert_int_equal(config_override(&b, "checkpoint.resume=auto"), CNT_OK);
    if (resume_extra) assert_int_equal(config_override(&b, resume_extra), CNT_OK);
    assert_int_equal(trainer_run(&b, &rb), CNT_OK);
    assert_int_equal(rb.steps, 32);

    snprintf(pa, len, "%s/checkpoints/ckpt-000002.cnt", da);
    snprintf(pb, len, "%s/checkpoints/ckpt-000002.cnt", db);
    ckpt_arrays ca, cb;
    read_ckpt(pa, &ca);
    read_ckpt(pb, &cb);
    assert_int_equal(ca.meta.epoch, 2);
    assert_int_equal(cb.meta.step, 32);
    tu_assert_bitwise_equal_f("parameters", ca.params, cb.params, ca.n_params);
    tu_assert_bitwise_equal_f("batch-norm buffers", ca.buffers, cb.buffers, ca.n_buffers);
    tu_assert_bitwise_equal_f("momentum", ca.momentum, cb.momentum, ca.n_params);
    /* and the loss scaler's state (0: no loss scaling) */
    assert_true(ca.meta.loss_scale == cb.meta.loss_scale);
    assert_true(ca.meta.loss_scale_good == cb.meta.loss_scale_good);
    assert_true(ca.meta.skipped_steps == cb.meta.skipped_steps);
    assert_int_equal(ca.meta.skipped_in_a_row, cb.meta.skipped_in_a_row);
    print_message("resumed run: loss scale %g, %ld clean steps, %ld skipped\n", cb.meta.loss_scale,
                  cb.meta.loss_scale_good, cb.meta.skipped_steps);
    free_ckpt(&ca);
    free_ckpt(&cb);
}

static void test_resume_equals_continuous(void **state) {
    (void)state;
    char da[160], db[160];
    assert_non_null(tmp_dir(da));
    assert_non_null(tmp_dir(db));
    char pa[700], pb[700];
    /* resumed in the other layout: checkpoints do not depend on it, and on the
     * CPU NHWC computes bitwise what NCHW does */
    const char *nchw[] = {"train.layout=nchw"};
    resume_case(nchw, 1, "train.layout=nhwc", da, db, pa, pb, sizeof pa);

    /* the CPU's blocked layout (oneDNN) is as deterministic */
    if (backend_cpu()->block_c > 0) {
        char ba[160], bb[160];
        assert_non_null(tmp_dir(ba));
        assert_non_null(tmp_dir(bb));
        const char *blocked[] = {"train.layout=blocked"};
        char xa[700], xb[700];
        resume_case(blocked, 1, NULL, ba, bb, xa, xb, sizeof xa);
        tu_remove_tree(ba);
        tu_remove_tree(bb);
    }

    /* fp16 with dynamic loss scaling: the scale (started too high, so steps
     * are skipped in the first epoch, and doubled every 5 clean steps) goes on
     * from the checkpoint, so the resumed run skips the same steps */
    char ha[160], hb[160];
    assert_non_null(tmp_dir(ha));
    assert_non_null(tmp_dir(hb));
    const char *fp16[] = {"train.precision=fp16", "train.loss_scale=1099511627776",
                          "train.loss_scale_window=5"};
    char qa[700], qb[700];
    resume_case(fp16, sizeof fp16 / sizeof *fp16, NULL, ha, hb, qa, qb, sizeof qa);
    ckpt_arrays ck;
    read_ckpt(qb, &ck);
    assert_true(ck.meta.loss_scale > 0 && ck.meta.skipped_steps > 0);
    free_ckpt(&ck);

    /* resuming a different model from that checkpoint is an error naming the file */
    config c;
    small_config(&c, db);
    assert_int_equal(config_override(&c, "model.name=resnet32"), CNT_OK);
    char o[800];
    snprintf(o, sizeof o, "checkpoint.resume=%s", pa);
    assert_int_equal(config_override(&c, o), CNT_OK);
    assert_int_equal(trainer_run(&c, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), pa));

    /* a missing checkpoint file named explicitly is an error too */
    small_config(&c, db);
    assert_int_equal(config_override(&c, "checkpoint.resume=/tmp/cnt_no_such_checkpoint.cnt"), CNT_OK);
    assert_int_equal(trainer_run(&c, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "/tmp/cnt_no_such_checkpoint.cnt"));
}

/* train.layout = nhwc, and blocked where the CPU backend has it, train the
 * same net as nchw: the same losses, test loss and accuracy after a few
 * steps, in fp32 and in bf16 (whose rounding must not depend on the layout
 * either). NHWC on the CPU sums as NCHW does: bitwise the same run. BLOCKED
 * runs oneDNN's convolutions, summing in another order: activations differ
 * by about 1e-7 relative, enough to flip the odd ReLU whose input is within
 * that of 0, which moves that step's gradients by about 1e-3 (measured on
 * ResNet-20: one flip in 200704 values of one layer); so six steps agree to
 * rtol 1e-3 and top-1 within 1 point (a wiring error is off by far more).
 * In bf16 every activation is stored in bf16 (train.activations = auto),
 * and a value that moves by 1e-7 crosses a bf16 rounding boundary with odds
 * of about 1e-7 / 2^-9, then moving by 2^-8 relative: so rtol16 there
 * (measured on six steps: 1.5e-3 on the last loss). */
static void layout_trains_as_nchw(const char *layout, double rtol, double rtol16, double top1_tol) {
    const char *precisions[] = {"train.precision=fp32", "train.precision=bf16"};
    for (int k = 0; k < 2; k++) {
        train_result r[2];
        for (int l = 0; l < 2; l++) {
            char d[160];
            assert_non_null(tmp_dir(d));
            config c;
            small_config(&c, d);
            assert_int_equal(config_override(&c, "train.max_steps=6"), CNT_OK);
            assert_int_equal(config_override(&c, "train.log_every=3"), CNT_OK);
            assert_int_equal(config_override(&c, precisions[k]), CNT_OK);
            assert_int_equal(config_override(&c, l ? layout : "train.layout=nchw"), CNT_OK);
            assert_int_equal(trainer_run(&c, &r[l]), CNT_OK);
            tu_remove_tree(d);
        }
        print_message("%s: nchw loss %.6f -> %.6f, test %.6f / %.4f; %s %.6f -> %.6f, test %.6f / %.4f\n",
                      precisions[k], r[0].first_loss, r[0].last_loss, r[0].eval_loss, r[0].top1, layout,
                      r[1].first_loss, r[1].last_loss, r[1].eval_loss, r[1].top1);
        double tol = k ? rtol16 : rtol;
        assert_true(fabs(r[1].first_loss - r[0].first_loss) <= tol * r[0].first_loss);
        assert_true(fabs(r[1].last_loss - r[0].last_loss) <= tol * r[0].last_loss);
        assert_true(fabs(r[1].eval_loss - r[0].eval_loss) <= tol * r[0].eval_loss);
        assert_true(fabs(r[1].top1 - r[0].top1) <= top1_tol);
        assert_true(r[0].last_loss != r[0].first_loss);     /* the steps changed the net */
    }
}

static void test_layout_nhwc(void **state) {
    (void)state;
    layout_trains_as_nchw("train.layout=nhwc", 1e-5, 1e-5, 0.002); /* at most 2 of 1000 test images flip */
}

static void test_layout_blocked(void **state) {
    (void)state;
    if (backend_cpu()->block_c == 0) skip(); /* built without oneDNN */
    layout_trains_as_nchw("train.layout=blocked", 1e-3, 5e-3, 0.01);
}

/* bf16 and fp16 mixed precision (emulated by the CPU backend) learn as fp32
 * does; fp16's dynamic loss scaling, started far too high, skips the steps
 * whose gradients overflow, halving the scale until they fit; a static scale
 * that always overflows stops the run with a message instead of training on
 * nothing. */
static void test_mixed_precision(void **state) {
    (void)state;
    char d0[160], d1[160], d2[160], d3[160];
    assert_non_null(tmp_dir(d0));
    assert_non_null(tmp_dir(d1));
    assert_non_null(tmp_dir(d2));
    assert_non_null(tmp_dir(d3));
    config c;
    train_result r32, r;
    small_config(&c, d0);
    assert_int_equal(config_override(&c, "train.max_steps=1"), CNT_OK);
    assert_int_equal(trainer_run(&c, &r32), CNT_OK);

    small_config(&c, d1);
    assert_int_equal(config_override(&c, "train.precision=bf16"), CNT_OK);
    assert_int_equal(config_override(&c, "train.epochs=1"), CNT_OK); /* 67.5 % after it, 75.7 % after 2 */
    assert_int_equal(trainer_run(&c, &r), CNT_OK);
    print_message("bf16: first loss %.4f (fp32 %.4f), last loss %.4f, top-1 %.4f\n", r.first_loss, r32.first_loss,
                  r.last_loss, r.top1);
    assert_true(fabs(r.first_loss - r32.first_loss) < 0.02 * r32.first_loss); /* same net, rounded */
    assert_true(r.first_loss != r32.first_loss);                              /* but rounded */
    assert_true(r.top1 > 0.60);
    assert_true(r.loss_scale == 1.0 && r.skipped_steps == 0); /* bf16 needs no loss scaling */

    small_config(&c, d2);
    assert_int_equal(config_override(&c, "train.precision=fp16"), CNT_OK);
    assert_int_equal(config_override(&c, "train.epochs=1"), CNT_OK); /* 64.7 % top-1 after it here */
    assert_int_equal(config_override(&c, "train.loss_scale=1073741824"), CNT_OK); /* 2^30: the first steps overflow */
    assert_int_equal(trainer_run(&c, &r), CNT_OK);
    print_message("fp16: last loss %.4f, top-1 %.4f, loss scale %g after %ld skipped steps\n", r.last_loss, r.top1,
                  r.loss_scale, r.skipped_steps);
    assert_int_equal(r.steps, 4096 / 32); /* skipped steps still count */
    assert_true(r.skipped_steps >= 10 && r.skipped_steps <= 30);
    assert_true(r.loss_scale == ldexp(1.0, 30 - (int)r.skipped_steps)); /* halved once per skip, no growth */
    assert_true(r.top1 > 0.60);
    char path[700];
    snprintf(path, sizeof path, "%s/metrics.jsonl", d2);
    assert_true(count_lines_with(path, "\"skipped_steps\":0}") == 0); /* the first record already has skips */
    assert_int_equal(count_lines_with(path, "\"loss_scale\":"), 128 / 32);

    /* five skipped steps change nothing: the epoch's checkpoint holds the
     * initial parameters and batch-norm statistics and zero momentum (the
     * forwards of skipped steps updated the statistics; they are restored) */
    char d4[160];
    assert_non_null(tmp_dir(d4));
    small_config(&c, d4);
    assert_int_equal(config_override(&c, "train.precision=fp16"), CNT_OK);
    assert_int_equal(config_override(&c, "train.loss_scaling=static"), CNT_OK);
    assert_int_equal(config_override(&c, "train.loss_scale=1099511627776"), CNT_OK);
    assert_int_equal(config_override(&c, "data.train_limit=160"), CNT_OK); /* 5 steps of 32 */
    assert_int_equal(config_override(&c, "train.epochs=1"), CNT_OK);
    assert_int_equal(config_override(&c, "optim.warmup_epochs=0"), CNT_OK);
    assert_int_equal(trainer_run(&c, &r), CNT_OK);
    assert_int_equal(r.skipped_steps, 5);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/checkpoints/ckpt-000001.cnt", d4);
    ckpt_arrays got;
    read_ckpt(ck, &got);
    net *fresh = net_create(backend_cpu(), 1, 28, 28, 10);
    int out, aux;
    zoo_options zo = {0, 1, -1, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    assert_int_equal(zoo_build(fresh, "resnet20", &zo, &out, &aux), CNT_OK);
    assert_int_equal(net_finalize(fresh, out, aux, 1), CNT_OK);
    net_init_params(fresh, c.seed);
    float *p0 = malloc(got.n_params * sizeof(float)), *b0 = malloc(got.n_buffers * sizeof(float));
    fresh->be->download(p0, fresh->params, got.n_params * sizeof(float));
    fresh->be->download(b0, fresh->buffers, got.n_buffers * sizeof(float));
    tu_assert_bitwise_equal_f("parameters after 5 skipped steps", p0, got.params, got.n_params);
    tu_assert_bitwise_equal_f("batch-norm statistics after 5 skipped steps", b0, got.buffers, got.n_buffers);
    for (size_t i = 0; i < got.n_params; i++) assert_true(got.momentum[i] == 0.0f);
    assert_int_equal(got.meta.skipped_steps, 5);
    assert_int_equal(got.meta.skipped_in_a_row, 5);
    free(p0);
    free(b0);
    net_free(fresh);
    free_ckpt(&got);

    small_config(&c, d3);
    assert_int_equal(config_override(&c, "train.precision=fp16"), CNT_OK);
    assert_int_equal(config_override(&c, "train.loss_scaling=static"), CNT_OK);
    assert_int_equal(config_override(&c, "train.loss_scale=1099511627776"), CNT_OK);
    assert_int_equal(config_override(&c, "train.max_steps=100"), CNT_OK);
    assert_int_equal(trainer_run(&c, &r), CNT_ERR);
    print_message("static overflow: %s\n", cnt_err_msg());
    assert_non_null(strstr(cnt_err_msg(), "train.loss_scaling = static"));
    assert_non_null(strstr(cnt_err_msg(), "30 steps in a row had inf or NaN gradients"));
    assert_int_equal(r.steps, 29); /* stopped at the 30th, which was not taken */
}

/* One --bench step (train/bench.c) on the first batch of its synthetic data
 * leaves the parameters one training step (trainer_run) on the same data
 * leaves, bit for bit: the benchmark times the step training runs. */
static void bench_step_case(const char *model, int c, int hw, int batch_size, const char *const *extra, size_t n_extra) {
    config cfg;
    bench_config(&cfg, model, c, hw, hw, 10, batch_size, 0);
    assert_int_equal(config_override(&cfg, "train.device=cpu"), CNT_OK);
    for (size_t i = 0; i < n_extra; i++) assert_int_equal(config_override(&cfg, extra[i]), CNT_OK);
    bench_result br;
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(bench_run(&cfg, 1, 0, &br, devnull), CNT_OK);
    fclose(devnull);

    char dir[160];
    assert_non_null(tmp_dir(dir));
    char o[600];
    snprintf(o, sizeof o, "train.out_dir=%s", dir);
    assert_int_equal(config_override(&cfg, o), CNT_OK);
    assert_int_equal(config_override(&cfg, "train.epochs=1"), CNT_OK);
    train_result r;
    assert_int_equal(trainer_run(&cfg, &r), CNT_OK);
    assert_int_equal(r.steps, 1);
    char path[700];
    snprintf(path, sizeof path, "%s/checkpoints/ckpt-000001.cnt", dir);
    ckpt_arrays ck;
    read_ckpt_of(path, model, c, hw, &ck);
    uint64_t h = hash_bytes(ck.params, ck.n_params * sizeof(float));
    print_message("%s: bench step %016llx, training step %016llx\n", model, (unsigned long long)br.params_hash,
                  (unsigned long long)h);
    assert_true(br.params_hash == h);
    free_ckpt(&ck);
    tu_remove_tree(dir);
}

static void test_bench_step_is_training_step(void **state) {
    (void)state;
    bench_step_case("resnet20", 1, 28, 16, NULL, 0);
    /* fp16: the loss scale on dlogits, the overflow check, the unscaling */
    const char *fp16[] = {"train.precision=fp16"};
    bench_step_case("resnet20", 1, 28, 16, fp16, 1);
    /* the auxiliary head's loss (train.aux_weight), label smoothing, dropout */
    const char *inception[] = {"train.label_smoothing=0.1", "train.aux_weight=0.3"};
    bench_step_case("inception_v3", 3, 299, 2, inception, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setup_errors),
        cmocka_unit_test(test_same_seed_same_losses),
        cmocka_unit_test(test_learns_fashion_mnist),
        cmocka_unit_test(test_resume_equals_continuous),
        cmocka_unit_test(test_layout_blocked),
        cmocka_unit_test(test_layout_nhwc),
        cmocka_unit_test(test_mixed_precision),
        cmocka_unit_test(test_bench_step_is_training_step),
    };
    return cmocka_run_group_tests_name("train", tests, make_root, remove_root);
}
