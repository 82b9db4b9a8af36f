/*
 * tests/test_checkpoint.c - the checkpoint file: a bitwise round trip of
 * parameters, buffers, momentum and meta; pruning to `keep`; finding the latest;
 * and every rejection ckpt_read promises (wrong magic, truncation at many
 * points, a flipped byte, another model, a missing file, a FIFO or directory
 * in place of the file), plus failed writes
 * that must leave the previous checkpoint intact and no temporary file behind.
 * Version 2's model block (input shape, classes, aux_logits, zoo options) is
 * round-tripped through ckpt_read and ckpt_read_meta; version-1 files get a
 * message saying what they lack.
 * Files live under a fresh mkdtemp directory in /tmp, removed afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/check.h"
#include "common/rng.h"
#include "model/net.h"
#include "tests/support/testutil.h"
#include "train/checkpoint.h"

/* Bytes before the tensor signature entries: magic 8, version 4, meta 92,
 * model block 28, loss-scaling block 32 (from version 3), position block 20
 * plus the config text (from version 4), normalisation block 28 (version 5),
 * two tensor counts 8. */
#define CONFIG_TEXT "[model]\nname = tiny_cnn\n"
#define FIXED_BYTES (220L + (long)sizeof CONFIG_TEXT - 1)
#define SCALE_BLOCK_AT 132L
#define SCALE_BLOCK_BYTES 32L
#define POS_BLOCK_AT 164L
#define POS_BLOCK_BYTES (20L + (long)sizeof CONFIG_TEXT - 1)
#define NORM_BLOCK_AT (POS_BLOCK_AT + POS_BLOCK_BYTES)
#define NORM_BLOCK_BYTES 28L

/* ---------------------------------------------------------------- fixtures */

typedef struct fixture {
    char root[64];     /* the mkdtemp directory */
    net *nt;
    float *params;     /* [n_params] host copy */
    float *buffers;    /* [n_buffers] */
    float *momentum;   /* [n_params] */
    ckpt_meta meta;
} fixture;

/* conv(K) -> bn -> relu -> global avgpool -> linear: params and BN buffers. */
static net *build_net(int K) {
    net *nt = net_create(backend_cpu(), 3, 6, 6, 5);
    int c = net_conv(nt, NET_INPUT, "conv1", K, 3, 1, 1, 0);
    int b = net_bn(nt, c, "bn1", 1e-5f);
    int r = net_relu(nt, b, "relu");
    int p = net_adaptive_avgpool(nt, r, "avgpool", 1, 1);
    int fc = net_linear(nt, p, "fc", 5, 1);
    assert_int_equal(net_finalize(nt, fc, -1, 2), CNT_OK);
    net_init_params(nt, 17);
    return nt;
}

static void fill_random(rng *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(r) * 4.0f - 2.0f;
}

static int setup(void **state) {
    fixture *fx = cnt_calloc(1, sizeof *fx);
    snprintf(fx->root, sizeof fx->root, "/tmp/cnt_ckpt_XXXXXX");
    if (!mkdtemp(fx->root)) return -1;
    fx->nt = build_net(4);
    const net *nt = fx->nt;
    fx->params = tu_alloc_f(nt->n_params);
    fx->buffers = tu_alloc_f(nt->n_buffers);
    fx->momentum = tu_alloc_f(nt->n_params);
    nt->be->download(fx->params, nt->params, nt->n_params * sizeof(float));
    /* Running statistics start at 0 and 1; make them arbitrary so the round trip means something. */
    rng r;
    rng_seed(&r, 99, 0);
    fill_random(&r, fx->buffers, nt->n_buffers);
    fill_random(&r, fx->momentum, nt->n_params);
    fx->meta.epoch = 3;
    fx->meta.step = 1234567890123L;
    fx->meta.dropout_seed = 0xdeadbeefcafef00dULL;
    fx->meta.config_hash = 0x0123456789abcdefULL;
    snprintf(fx->meta.model_name, sizeof fx->meta.model_name, "tiny_cnn");
    fx->meta.zero_init_residual = 1;
    fx->meta.dropout = 0.25f;
    fx->meta.loss_scale = 32768.0;
    fx->meta.loss_scale_good = 17;
    fx->meta.skipped_steps = 5;
    fx->meta.skipped_in_a_row = 2;
    fx->meta.in_c = 99; /* ignored by ckpt_write: the net's shape is stored */
    fx->meta.world = 4;
    fx->meta.batch = 32;
    snprintf(fx->meta.config, sizeof fx->meta.config, "%s", CONFIG_TEXT);
    fx->meta.norm_channels = 3;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(fx->meta.mean, mean, sizeof mean);
    memcpy(fx->meta.std, std, sizeof std);
    *state = fx;
    return 0;
}


static int teardown(void **state) {
    fixture *fx = *state;
    tu_remove_tree(fx->root);
    net_free(fx->nt);
    free(fx->params);
    free(fx->buffers);
    free(fx->momentum);
    free(fx);
    return 0;
}

static void sub(const fixture *fx, const char *name, char *out, size_t len) {
    snprintf(out, len, "%s/%s", fx->root, name);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static long file_size(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (long)st.st_size;
}

/* Copies the first `bytes` of src to dst (bytes < 0: all of it). */
static void copy_prefix(const char *src, const char *dst, long bytes) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    assert_non_null(in);
    assert_non_null(out);
    long n = 0;
    int c;
    while ((bytes < 0 || n < bytes) && (c = fgetc(in)) != EOF) {
        fputc(c, out);
        n++;
    }
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    int c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    fputc(c ^ 0x5a, f);
    assert_int_equal(fclose(f), 0);
}

/* Count of directory entries whose name contains `part`. */
static int count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

/* ckpt_read must fail, with a message naming path and containing `what`. */
static void expect_read_error(const fixture *fx, const char *path, const char *what) {
    float *p = tu_alloc_f(fx->nt->n_params), *b = tu_alloc_f(fx->nt->n_buffers), *m = tu_alloc_f(fx->nt->n_params);
    int rc = ckpt_read(path, fx->nt, p, b, m, NULL, NULL, NULL);
    if (rc != CNT_ERR || !strstr(cnt_err_msg(), path) || !strstr(cnt_err_msg(), what))
        fail_msg("ckpt_read('%s'): rc %d, message \"%s\"; expected CNT_ERR naming the path and containing \"%s\"",
                 path, rc, cnt_err_msg(), what);
    free(p);
    free(b);
    free(m);
}

/* Reads path and checks it holds exactly the fixture's arrays (momentum when with_momentum) and meta. */
static void expect_round_trip(const fixture *fx, const char *path, int with_momentum) {
    const net *nt = fx->nt;
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers), *m = tu_alloc_f(nt->n_params);
    for (size_t i = 0; i < nt->n_params; i++) m[i] = 7.0f; /* must be overwritten */
    int has = -1;
    ckpt_meta meta;
    memset(&meta, 0xff, sizeof meta);
    if (ckpt_read(path, nt, p, b, m, &has, NULL, &meta) != CNT_OK) fail_msg("ckpt_read: %s", cnt_err_msg());
    tu_assert_bitwise_equal_f("params", fx->params, p, nt->n_params);
    tu_assert_bitwise_equal_f("buffers", fx->buffers, b, nt->n_buffers);
    assert_int_equal(has, with_momentum);
    if (with_momentum) {
        tu_assert_bitwise_equal_f("momentum", fx->momentum, m, nt->n_params);
    } else {
        for (size_t i = 0; i < nt->n_params; i++) assert_true(m[i] == 0.0f);
    }
    assert_int_equal(meta.epoch, fx->meta.epoch);
    assert_true(meta.step == fx->meta.step);
    assert_true(meta.dropout_seed == fx->meta.dropout_seed);
    assert_true(meta.config_hash == fx->meta.config_hash);
    assert_string_equal(meta.model_name, fx->meta.model_name);
    /* The model block: the net's shape and head, the zoo options from meta. */
    assert_int_equal(meta.in_c, 3);
    assert_int_equal(meta.in_h, 6);
    assert_int_equal(meta.in_w, 6);
    assert_int_equal(meta.classes, 5);
    assert_int_equal(meta.aux_logits, 0);
    assert_int_equal(meta.zero_init_residual, fx->meta.zero_init_residual);
    assert_true(meta.dropout == fx->meta.dropout);
    assert_true(meta.loss_scale == fx->meta.loss_scale);
    assert_true(meta.loss_scale_good == fx->meta.loss_scale_good);
    assert_true(meta.skipped_steps == fx->meta.skipped_steps);
    assert_int_equal(meta.skipped_in_a_row, fx->meta.skipped_in_a_row);
    assert_true(meta.epoch_samples == fx->meta.epoch_samples);
    assert_int_equal(meta.world, 4);
    assert_int_equal(meta.batch, 32);
    assert_string_equal(meta.config, CONFIG_TEXT);
    assert_int_equal(meta.norm_channels, 3);
    assert_memory_equal(meta.mean, fx->meta.mean, sizeof meta.mean);
    assert_memory_equal(meta.std, fx->meta.std, sizeof meta.std);
    ckpt_meta head;
    memset(&head, 0xff, sizeof head);
    if (ckpt_read_meta(path, &head) != CNT_OK) fail_msg("ckpt_read_meta: %s", cnt_err_msg());
    assert_int_equal(head.epoch, fx->meta.epoch);
    assert_true(head.step == fx->meta.step);
    assert_string_equal(head.model_name, fx->meta.model_name);
    assert_int_equal(head.in_c, 3);
    assert_int_equal(head.in_h, 6);
    assert_int_equal(head.in_w, 6);
    assert_int_equal(head.classes, 5);
    assert_int_equal(head.aux_logits, 0);
    assert_true(head.dropout == fx->meta.dropout);
    assert_true(head.loss_scale == fx->meta.loss_scale);
    assert_true(head.epoch_samples == fx->meta.epoch_samples);
    assert_string_equal(head.config, CONFIG_TEXT);
    assert_int_equal(head.norm_channels, 3);
    assert_memory_equal(head.std, fx->meta.std, sizeof head.std);
    free(p);
    free(b);
    free(m);
}

static void write_ok(fixture *fx, const char *dir, int epoch, int keep, const float *momentum, char *path,
                     size_t len) {
    fx->meta.epoch = epoch;
    if (ckpt_write(dir, fx->nt, fx->params, fx->buffers, momentum, NULL, &fx->meta, keep, path, len) != CNT_OK)
        fail_msg("ckpt_write(%s, epoch %d): %s", dir, epoch, cnt_err_msg());
}

/* ---------------------------------------------------------------- tests */

static void test_round_trip(void **state) {
    fixture *fx = *state;
    assert_true(fx->nt->n_buffer_tensors > 0 && fx->nt->n_param_tensors > 0);
    char dir[256], path[512], expected[512];
    sub(fx, "a/b/ckpts", dir, sizeof dir); /* parents created too */
    write_ok(fx, dir, 3, 0, fx->momentum, path, sizeof path);
    snprintf(expected, sizeof expected, "%s/ckpt-000003.cnt", dir);
    assert_string_equal(path, expected);
    assert_int_equal(count_entries(dir, ".tmp"), 0);
    assert_int_equal(count_entries(dir, "ckpt-"), 1);
    expect_round_trip(fx, path, 1);

    /* momentum not requested: params and buffers still read */
    float *p = tu_alloc_f(fx->nt->n_params), *b = tu_alloc_f(fx->nt->n_buffers);
    int has = -1;
    assert_int_equal(ckpt_read(path, fx->nt, p, b, NULL, &has, NULL, NULL), CNT_OK);
    assert_int_equal(has, 1);
    tu_assert_bitwise_equal_f("params", fx->params, p, fx->nt->n_params);
    free(p);
    free(b);
}

static void test_without_momentum(void **state) {
    fixture *fx = *state;
    char dir[256], path[512];
    sub(fx, "nomom", dir, sizeof dir);
    write_ok(fx, dir, 0, 0, NULL, path, sizeof path);
    expect_round_trip(fx, path, 0); /* zero-filled, has_momentum = 0 */
}

static void test_keep_and_find_latest(void **state) {
    fixture *fx = *state;
    char dir[256], path[512], latest[512], name[600];
    sub(fx, "keep", dir, sizeof dir);
    assert_int_equal(ckpt_find_latest(dir, latest, sizeof latest), CNT_ERR); /* no directory yet */
    for (int e = 1; e <= 4; e++) write_ok(fx, dir, e, 2, fx->momentum, path, sizeof path);
    for (int e = 1; e <= 4; e++) {
        snprintf(name, sizeof name, "%s/ckpt-%06d.cnt", dir, e);
        if (file_exists(name) != (e >= 3)) fail_msg("after keep=2: %s %s", name, e >= 3 ? "missing" : "still there");
    }
    assert_int_equal(count_entries(dir, "ckpt-"), 2);
    /* Files that only look similar are neither pruned nor found. */
    snprintf(name, sizeof name, "%s/ckpt-999999.cnt.bak", dir);
    copy_prefix(path, name, -1);
    snprintf(name, sizeof name, "%s/ckpt-12.cnt", dir);
    copy_prefix(path, name, -1);
    assert_int_equal(ckpt_find_latest(dir, latest, sizeof latest), CNT_OK);
    snprintf(name, sizeof name, "%s/ckpt-000004.cnt", dir);
    assert_string_equal(latest, name);
    fx->meta.epoch = 4;
    expect_round_trip(fx, latest, 1);
    /* keep <= 0 keeps everything */
    write_ok(fx, dir, 5, 0, fx->momentum, path, sizeof path);
    assert_int_equal(count_entries(dir, "ckpt-0"), 3);
    assert_int_equal(ckpt_find_latest(dir, latest, sizeof latest), CNT_OK);
    assert_string_equal(latest, path);

    char empty[256];
    sub(fx, "empty", empty, sizeof empty);
    assert_int_equal(mkdir(empty, 0700), 0);
    assert_int_equal(ckpt_find_latest(empty, latest, sizeof latest), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), empty));
}

/* Mid-epoch checkpoints: named by position (ckpt-EEEEEE-NNNNNNNNNN.cnt),
 * ordered by (epoch, samples) whatever their step numbers, pruned in that
 * order; ckpt_supersede moves those past a starting point aside. */
static void test_mid_epoch_names_and_supersede(void **state) {
    fixture *fx = *state;
    char dir[256], path[512], latest[512], name[600];
    sub(fx, "mid", dir, sizeof dir);
    struct { int epoch; long samples; long step; } w[] = {{1, 0, 100}, {1, 640, 110}, {1, 1280, 60}, {2, 0, 70}, {2, 64, 71}};
    for (size_t i = 0; i < 5; i++) {
        fx->meta.epoch_samples = w[i].samples;
        fx->meta.step = w[i].step; /* a resume at another world size renumbers steps: not the order */
        write_ok(fx, dir, w[i].epoch, 4, fx->momentum, path, sizeof path);
        if (w[i].samples) snprintf(name, sizeof name, "%s/ckpt-%06d-%010ld.cnt", dir, w[i].epoch, w[i].samples);
        else snprintf(name, sizeof name, "%s/ckpt-%06d.cnt", dir, w[i].epoch);
        assert_string_equal(path, name);
        assert_int_equal(ckpt_find_latest(dir, latest, sizeof latest), CNT_OK);
        assert_string_equal(latest, name);
    }
    expect_round_trip(fx, latest, 1);
    /* keep 4: the oldest position went, not the lowest step */
    snprintf(name, sizeof name, "%s/ckpt-000001.cnt", dir);
    assert_false(file_exists(name));
    snprintf(name, sizeof name, "%s/ckpt-000001-0000001280.cnt", dir);
    assert_true(file_exists(name));
    /* a boundary never has the long name; zero samples is not a name */
    snprintf(name, sizeof name, "%s/ckpt-000009-0000000000.cnt", dir);
    copy_prefix(path, name, -1);
    assert_int_equal(ckpt_find_latest(dir, latest, sizeof latest), CNT_OK);
    assert_string_equal(latest, path);
    unlink(name);

    /* a run restarting at epoch 1 + 640 samples moves the three beyond it */
    int moved = -1;
    char to[512];
    assert_int_equal(ckpt_supersede(dir, 1, 640, &moved, to, sizeof to), CNT_OK);
    assert_int_equal(moved, 3);
    assert_non_null(strstr(to, "/superseded-"));
    assert_int_equal(count_entries(dir, "ckpt-"), 1);
    assert_int_equal(count_entries(to, "ckpt-"), 3);
    assert_int_equal(ckpt_find_latest(dir, latest, sizeof latest), CNT_OK);
    snprintf(name, sizeof name, "%s/ckpt-000001-0000000640.cnt", dir);
    assert_string_equal(latest, name);
    /* nothing beyond: nothing moves, no directory made; a fresh start moves all */
    assert_int_equal(ckpt_supersede(dir, 1, 640, &moved, to, sizeof to), CNT_OK);
    assert_int_equal(moved, 0);
    assert_int_equal(ckpt_supersede(dir, 0, 0, &moved, to, sizeof to), CNT_OK);
    assert_int_equal(moved, 1);
    assert_int_equal(count_entries(dir, "ckpt-"), 0);
    assert_int_equal(count_entries(dir, "superseded-"), 2);
    /* a directory that does not exist: nothing to move */
    sub(fx, "mid/none", name, sizeof name);
    assert_int_equal(ckpt_supersede(name, 0, 0, &moved, to, sizeof to), CNT_OK);
    assert_int_equal(moved, 0);
    fx->meta.epoch_samples = 0;
}

static void test_wrong_magic(void **state) {
    fixture *fx = *state;
    char dir[256], path[512], bad[512];
    sub(fx, "magic", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    sub(fx, "magic/flipped.cnt", bad, sizeof bad);
    copy_prefix(path, bad, -1);
    flip_byte(bad, 2);
    expect_read_error(fx, bad, "not a cnntrain checkpoint");
    sub(fx, "magic/text.cnt", bad, sizeof bad);
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fputs("epoch=3\n", f);
    fclose(f);
    expect_read_error(fx, bad, "not a cnntrain checkpoint");
    sub(fx, "magic/short.cnt", bad, sizeof bad);
    f = fopen(bad, "w");
    fputs("ab", f);
    fclose(f);
    expect_read_error(fx, bad, "not a cnntrain checkpoint");
}

static void test_bad_version(void **state) {
    fixture *fx = *state;
    char dir[256], path[512];
    sub(fx, "version", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    flip_byte(path, 8); /* the version's low byte */
    expect_read_error(fx, path, "unsupported version");
    ckpt_meta m;
    assert_int_equal(ckpt_read_meta(path, &m), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "unsupported version"));
}

/* A header field changed to a plausible but wrong value (an input height of
 * 20000, which --export would build a net for) is not trusted: ckpt_read_meta
 * checks the whole file's checksum first. */
static void test_meta_checks_checksum(void **state) {
    fixture *fx = *state;
    char dir[256], path[512];
    sub(fx, "plausible", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    ckpt_meta m;
    assert_int_equal(ckpt_read_meta(path, &m), CNT_OK);
    /* in_h: magic 8, version 4, epoch 4, step 8, dropout seed 8, config hash 8, model name 64, in_c 4 */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    int32_t h = 20000;
    assert_int_equal(fseek(f, 8 + 4 + 4 + 8 + 8 + 8 + 64 + 4, SEEK_SET), 0);
    assert_int_equal(fwrite(&h, sizeof h, 1, f), 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ckpt_read_meta(path, &m), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), path));
    assert_non_null(strstr(cnt_err_msg(), "checksum mismatch"));
}

/* A version-1 file (no model block) is refused by name, by ckpt_read and ckpt_read_meta. */
static void test_version_1(void **state) {
    fixture *fx = *state;
    char dir[256], path[512];
    sub(fx, "v1", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    uint32_t one = 1;
    assert_int_equal(fseek(f, 8, SEEK_SET), 0);
    assert_int_equal(fwrite(&one, sizeof one, 1, f), 1);
    assert_int_equal(fclose(f), 0);
    expect_read_error(fx, path, "version 1");
    ckpt_meta m;
    assert_int_equal(ckpt_read_meta(path, &m), CNT_ERR);
    if (!strstr(cnt_err_msg(), path) || !strstr(cnt_err_msg(), "version 1") || !strstr(cnt_err_msg(), "model block"))
        fail_msg("version-1 message should name the path, the version and what it lacks: %s", cnt_err_msg());
    /* ckpt_read_meta's other errors name the path too. */
    char missing[512];
    sub(fx, "v1/none.cnt", missing, sizeof missing);
    assert_int_equal(ckpt_read_meta(missing, &m), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), missing));
}

/* path with `bytes` bytes at `at` cut out, `version` written over the
 * version and the checksum computed again, saved as out: an older file. */
static void write_older(const char *path, const char *out, uint32_t version, const long *at, const long *bytes,
                        int cuts) {
    long size = file_size(path);
    unsigned char *buf = malloc((size_t)size);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    long n = size;
    for (int i = cuts - 1; i >= 0; i--) { /* from the back, so earlier offsets hold */
        memmove(buf + at[i], buf + at[i] + bytes[i], (size_t)(n - at[i] - bytes[i]));
        n -= bytes[i];
    }
    memcpy(buf + 8, &version, sizeof version);
    uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, (uInt)(n - 4));
    memcpy(buf + n - 4, &crc, sizeof crc);
    f = fopen(out, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, (size_t)n, f), (size_t)n);
    assert_int_equal(fclose(f), 0);
    free(buf);
}

/* Version-2 to 5 files (written before the loss-scaling block, before the
 * position block, before the normalisation block, before the PowerSGD
 * block) still read: loss_scale 0 ("not recorded") for version 2; an epoch
 * boundary with no config text for 2 and 3; no normalisation recorded for
 * 2 to 4; no PowerSGD state for all four. */
static void test_versions_2_to_5(void **state) {
    fixture *fx = *state;
    char dir[256], path[512], old[512];
    sub(fx, "v2", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    const net *nt = fx->nt;
    long psgd_at = file_size(path) - 8; /* the PowerSGD block's rank (0: none), before the checksum */
    for (uint32_t version = 2; version <= 5; version++) {
        /* the position and normalisation blocks are neighbours: cut as one */
        long at[3] = {SCALE_BLOCK_AT, POS_BLOCK_AT, psgd_at},
             bytes[3] = {SCALE_BLOCK_BYTES, POS_BLOCK_BYTES + NORM_BLOCK_BYTES, 4};
        long at4[2] = {NORM_BLOCK_AT, psgd_at}, bytes4[2] = {NORM_BLOCK_BYTES, 4};
        char name[32];
        snprintf(name, sizeof name, "v2/old%u.cnt", version);
        sub(fx, name, old, sizeof old);
        if (version == 2) write_older(path, old, 2, at, bytes, 3);
        else if (version == 3) write_older(path, old, 3, at + 1, bytes + 1, 2);
        else if (version == 4) write_older(path, old, 4, at4, bytes4, 2);
        else write_older(path, old, 5, at + 2, bytes + 2, 1);
        float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers), *m = tu_alloc_f(nt->n_params);
        ckpt_meta meta;
        ckpt_powersgd ps;
        memset(&ps, 0xff, sizeof ps);
        int has = -1;
        if (ckpt_read(old, nt, p, b, m, &has, &ps, &meta) != CNT_OK)
            fail_msg("version-%u file: %s", version, cnt_err_msg());
        tu_assert_bitwise_equal_f("params", fx->params, p, nt->n_params);
        tu_assert_bitwise_equal_f("momentum", fx->momentum, m, nt->n_params);
        assert_int_equal(has, 1);
        assert_int_equal(meta.version, (int)version);
        assert_int_equal(ps.rank, 0);
        assert_null(ps.q);
        assert_null(ps.e);
        assert_int_equal(meta.epoch, 1);
        assert_true(meta.dropout == fx->meta.dropout);
        if (version == 2) assert_true(meta.loss_scale == 0.0 && meta.skipped_steps == 0);
        else assert_true(meta.loss_scale == fx->meta.loss_scale && meta.skipped_steps == fx->meta.skipped_steps);
        if (version < 4) assert_true(meta.epoch_samples == 0 && meta.world == 0 && meta.config[0] == '\0');
        else assert_true(meta.world == 4 && strcmp(meta.config, CONFIG_TEXT) == 0);
        assert_int_equal(meta.norm_channels, version < 5 ? 0 : 3);
        ckpt_meta head;
        assert_int_equal(ckpt_read_meta(old, &head), CNT_OK);
        assert_true(head.classes == 5 && head.norm_channels == (version < 5 ? 0 : 3));
        if (version < 4) assert_true(head.epoch_samples == 0);
        free(p);
        free(b);
        free(m);
    }
}

/* The PowerSGD block: written and read back bit for bit (Q, the summed
 * error, the draws); a file without one reads rank 0; an implausible block
 * under a correct checksum (rank 0 with a block after it, a rank above
 * CKPT_PSGD_MAX_RANK, an even draws[1], more errors than parameters, a
 * block cut short) is refused by name, and ckpt_write refuses one too. */
static void test_powersgd_block(void **state) {
    fixture *fx = *state;
    const net *nt = fx->nt;
    char dir[256], path[512], bad[512];
    sub(fx, "psgd", dir, sizeof dir);
    size_t nq = 7, ne = nt->n_params / 2;
    ckpt_powersgd in = {.rank = 3, .n_q = nq, .n_e = ne, .draws = {0x123456789abcdefull, 0x55}};
    in.q = tu_alloc_f(nq);
    in.e = tu_alloc_f(ne);
    for (size_t i = 0; i < nq; i++) in.q[i] = 0.25f * (float)i - 1.0f;
    for (size_t i = 0; i < ne; i++) in.e[i] = 1e-3f * (float)(i % 97) - 0.04f;
    fx->meta.epoch = 2;
    if (ckpt_write(dir, nt, fx->params, fx->buffers, fx->momentum, &in, &fx->meta, 0, path, sizeof path) != CNT_OK)
        fail_msg("ckpt_write with PowerSGD: %s", cnt_err_msg());
    expect_round_trip(fx, path, 1); /* the rest as without the block */
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers);
    ckpt_powersgd out;
    assert_int_equal(ckpt_read(path, nt, p, b, NULL, NULL, &out, NULL), CNT_OK);
    assert_int_equal(out.rank, 3);
    assert_true(out.n_q == nq && out.n_e == ne);
    assert_true(out.draws[0] == in.draws[0] && out.draws[1] == in.draws[1]);
    tu_assert_bitwise_equal_f("q", in.q, out.q, nq);
    tu_assert_bitwise_equal_f("e", in.e, out.e, ne);
    ckpt_powersgd_free(&out);
    assert_null(out.q);
    assert_int_equal(out.rank, 0);

    /* block at: rank (4), n_q (8), n_e (8), draws (16), q, e, then the checksum */
    long at = file_size(path) - 4 - 4 * (long)(nq + ne) - 36;
    static const struct {
        long off;   /* from the block's start */
        uint64_t value;
        int bytes;
    } cases[] = {{0, 0, 4}, {0, CKPT_PSGD_MAX_RANK + 1, 4}, {28, 0x54, 8}, {12, 1u << 30, 8}, {4, 0, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sub(fx, "psgd/patched.cnt", bad, sizeof bad);
        copy_prefix(path, bad, -1);
        FILE *f = fopen(bad, "r+b");
        assert_non_null(f);
        assert_int_equal(fseek(f, at + cases[i].off, SEEK_SET), 0);
        assert_int_equal(fwrite(&cases[i].value, (size_t)cases[i].bytes, 1, f), 1);
        assert_int_equal(fclose(f), 0);
        char fixed[512];
        sub(fx, "psgd/bad.cnt", fixed, sizeof fixed);
        write_older(bad, fixed, CKPT_VERSION, NULL, NULL, 0); /* the checksum made right again */
        /* rank 0 leaves the rest of the block as bytes after the end */
        expect_read_error(fx, fixed, i == 0 ? "bytes, its header describes only" : "implausible PowerSGD block");
    }
    /* cut inside the block, the checksum made right: truncated */
    long cut_at = at + 36 + 4 * (long)nq, cut = 4;
    sub(fx, "psgd/cut.cnt", bad, sizeof bad);
    write_older(path, bad, CKPT_VERSION, &cut_at, &cut, 1);
    expect_read_error(fx, bad, "truncated");

    in.draws[1] = 0x54;
    char o[512];
    assert_int_equal(ckpt_write(dir, nt, fx->params, fx->buffers, NULL, &in, &fx->meta, 0, o, sizeof o), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "implausible PowerSGD state"));
    free(in.q);
    free(in.e);
    free(p);
    free(b);
}

/* An implausible normalisation block under a correct checksum (a channel
 * count outside 0..3, a std of 0 or NaN, an infinite mean) is refused by
 * name; ckpt_write refuses a channel count outside 0..3. */
static void test_bad_normalisation(void **state) {
    fixture *fx = *state;
    char dir[256], path[512], bad[512];
    sub(fx, "norm", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    static const struct {
        long off; /* from the block's start */
        float value;
        int as_int;
    } cases[] = {{0, 4, 1}, {0, -1, 1}, {16, 0.0f, 0}, {24, NAN, 0}, {4, INFINITY, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sub(fx, "norm/patched.cnt", bad, sizeof bad);
        copy_prefix(path, bad, -1);
        FILE *f = fopen(bad, "r+b");
        assert_non_null(f);
        assert_int_equal(fseek(f, NORM_BLOCK_AT + cases[i].off, SEEK_SET), 0);
        int32_t n = (int32_t)cases[i].value;
        assert_int_equal(cases[i].as_int ? fwrite(&n, sizeof n, 1, f) : fwrite(&cases[i].value, 4, 1, f), 1);
        assert_int_equal(fclose(f), 0);
        char fixed[512];
        sub(fx, "norm/bad.cnt", fixed, sizeof fixed);
        write_older(bad, fixed, CKPT_VERSION, NULL, NULL, 0); /* the checksum made right again */
        expect_read_error(fx, fixed, "implausible normalisation block");
    }
    fx->meta.norm_channels = 4;
    char out[512];
    assert_int_equal(ckpt_write(dir, fx->nt, fx->params, fx->buffers, NULL, NULL, &fx->meta, 0, out, sizeof out),
                     CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "normalisation channels"));
    fx->meta.norm_channels = 3;
}

static void test_truncated(void **state) {
    fixture *fx = *state;
    char dir[256], path[512], cut[512];
    sub(fx, "trunc", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    long size = file_size(path);
    const net *nt = fx->nt;
    long sig_end = FIXED_BYTES + 144L * (nt->n_param_tensors + nt->n_buffer_tensors) + 16;
    long cuts[] = {0, 5, 8, 12, 60, 111, 112, FIXED_BYTES - 1, FIXED_BYTES, 200, sig_end - 1, sig_end, sig_end + 10, size / 2, size - 4 * (long)nt->n_params,
                   size - 5, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        assert_true(cuts[i] >= 0 && cuts[i] < size);
        sub(fx, "trunc/cut.cnt", cut, sizeof cut);
        copy_prefix(path, cut, cuts[i]);
        assert_int_equal(file_size(cut), cuts[i]);
        expect_read_error(fx, cut, "truncated");
    }
    /* Bytes appended after the checksum are caught too. */
    copy_prefix(path, cut, -1);
    FILE *f = fopen(cut, "ab");
    fputs("xyz", f);
    fclose(f);
    expect_read_error(fx, cut, "corrupt");
}

static void test_flipped_byte(void **state) {
    fixture *fx = *state;
    char dir[256], path[512], bad[512];
    sub(fx, "flip", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    long size = file_size(path);
    const net *nt = fx->nt;
    long params_at = FIXED_BYTES + 144L * (nt->n_param_tensors + nt->n_buffer_tensors) + 16;
    /* meta, the model block, a tensor name, params, buffers, momentum, the stored checksum itself */
    long at[] = {20, 117, SCALE_BLOCK_AT + 3, FIXED_BYTES + 20, params_at, params_at + 4 * (long)nt->n_params + 1, size - 12, size - 2};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        sub(fx, "flip/bad.cnt", bad, sizeof bad);
        copy_prefix(path, bad, -1);
        flip_byte(bad, at[i]);
        expect_read_error(fx, bad, "corrupt");
    }
    /* The caller's arrays are untouched by a rejected file. */
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers);
    assert_int_equal(ckpt_read(bad, nt, p, b, NULL, NULL, NULL, NULL), CNT_ERR);
    for (size_t i = 0; i < nt->n_params; i++) assert_true(p[i] == 0.0f);
    free(p);
    free(b);
}

static void test_other_model(void **state) {
    fixture *fx = *state;
    char dir[256], path[512];
    sub(fx, "model", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    net *other = build_net(6); /* conv1 with 6 output channels instead of 4 */
    float *p = tu_alloc_f(other->n_params), *b = tu_alloc_f(other->n_buffers);
    assert_int_equal(ckpt_read(path, other, p, b, NULL, NULL, NULL, NULL), CNT_ERR);
    const char *msg = cnt_err_msg();
    if (!strstr(msg, path) || !strstr(msg, "conv1.weight") || !strstr(msg, "tiny_cnn"))
        fail_msg("model mismatch message should name the path, 'conv1.weight' and 'tiny_cnn': %s", msg);
    free(p);
    free(b);
    net_free(other);

    /* A net with a different tensor list (no batch norm): names the first differing tensor. */
    other = net_create(backend_cpu(), 3, 6, 6, 5);
    int c = net_conv(other, NET_INPUT, "conv1", 4, 3, 1, 1, 0);
    int pool = net_adaptive_avgpool(other, c, "avgpool", 1, 1);
    int fc = net_linear(other, pool, "fc", 5, 1);
    assert_int_equal(net_finalize(other, fc, -1, 2), CNT_OK);
    p = tu_alloc_f(other->n_params);
    b = tu_alloc_f(other->n_buffers + 1);
    assert_int_equal(ckpt_read(path, other, p, b, NULL, NULL, NULL, NULL), CNT_ERR);
    msg = cnt_err_msg();
    if (!strstr(msg, path) || !strstr(msg, "bn1.weight") || !strstr(msg, "fc.weight"))
        fail_msg("model mismatch message should name 'bn1.weight' and 'fc.weight': %s", msg);
    free(p);
    free(b);
    net_free(other);
}

static void test_missing_and_uncreatable(void **state) {
    fixture *fx = *state;
    char path[512], dir[512], file[256];
    sub(fx, "nowhere/ckpt-000001.cnt", path, sizeof path);
    expect_read_error(fx, path, "cannot open");
    /* A directory below a regular file cannot be created. */
    sub(fx, "plainfile", file, sizeof file);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file);
    fx->meta.epoch = 1;
    assert_int_equal(ckpt_write(dir, fx->nt, fx->params, fx->buffers, NULL, NULL, &fx->meta, 0, NULL, 0), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), dir));
    /* Epoch out of range. */
    sub(fx, "range", dir, sizeof dir);
    fx->meta.epoch = 1000000;
    assert_int_equal(ckpt_write(dir, fx->nt, fx->params, fx->buffers, NULL, NULL, &fx->meta, 0, NULL, 0), CNT_ERR);
}

/* Only regular files are read: a FIFO (whose open would wait for a writer
 * forever) and a directory are refused by ckpt_read and ckpt_read_meta with
 * a message naming the path and the kind, and ckpt_find_latest passes over
 * ckpt-NNNNNN.cnt entries that are not regular files. alarm() turns a hang
 * into a failure. */
static void test_not_regular(void **state) {
    fixture *fx = *state;
    char dir[256], fifo[512], sub_dir[512], path[512], latest[512];
    sub(fx, "kinds", dir, sizeof dir);
    write_ok(fx, dir, 1, 0, fx->momentum, path, sizeof path);
    snprintf(fifo, sizeof fifo, "%s/ckpt-000009.cnt", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(sub_dir, sizeof sub_dir, "%s/ckpt-000008.cnt", dir);
    assert_int_equal(mkdir(sub_dir, 0700), 0);
    alarm(20);
    expect_read_error(fx, fifo, "it is a FIFO (named pipe), not a regular file");
    ckpt_meta m;
    assert_int_equal(ckpt_read_meta(fifo, &m), CNT_ERR);
    if (!strstr(cnt_err_msg(), fifo) || !strstr(cnt_err_msg(), "FIFO"))
        fail_msg("ckpt_read_meta of a FIFO: \"%s\"", cnt_err_msg());
    expect_read_error(fx, sub_dir, "it is a directory, not a regular file");
    assert_int_equal(ckpt_read_meta(sub_dir, &m), CNT_ERR);
    if (!strstr(cnt_err_msg(), sub_dir) || !strstr(cnt_err_msg(), "directory"))
        fail_msg("ckpt_read_meta of a directory: \"%s\"", cnt_err_msg());
    assert_int_equal(ckpt_find_latest(dir, latest, sizeof latest), CNT_OK);
    assert_string_equal(latest, path);
    expect_round_trip(fx, latest, 1);
    alarm(0);
}

static void test_failed_write_keeps_previous(void **state) {
    fixture *fx = *state;
    char dir[256], path[512], tmp[512];
    sub(fx, "fail", dir, sizeof dir);
    write_ok(fx, dir, 2, 0, fx->momentum, path, sizeof path);
    float saved0 = fx->params[0];
    fx->params[0] += 1.0f; /* the failed writes carry different values */

    /* (1) dir is a file: nothing written, earlier checkpoint elsewhere untouched. */
    char file[256];
    sub(fx, "fail/ckpt-000002.cnt", file, sizeof file);
    fx->meta.epoch = 2;
    assert_int_equal(ckpt_write(file, fx->nt, fx->params, fx->buffers, NULL, NULL, &fx->meta, 1, NULL, 0), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), file));

    /* (2) the temporary file cannot be created. */
    snprintf(tmp, sizeof tmp, "%s/.ckpt-000002.cnt.tmp", dir);
    assert_int_equal(mkdir(tmp, 0700), 0);
    assert_int_equal(ckpt_write(dir, fx->nt, fx->params, fx->buffers, NULL, NULL, &fx->meta, 1, NULL, 0), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), tmp));
    assert_int_equal(rmdir(tmp), 0);

    /* (3) the disk "fills up" part-way: a file size limit makes write() fail with EFBIG. */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 200;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = ckpt_write(dir, fx->nt, fx->params, fx->buffers, fx->momentum, NULL, &fx->meta, 1, NULL, 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), tmp));
    assert_false(file_exists(tmp));
    assert_int_equal(count_entries(dir, ".tmp"), 0);

    /* The epoch-2 checkpoint still holds the original values. */
    fx->params[0] = saved0;
    fx->meta.epoch = 2;
    expect_round_trip(fx, path, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_momentum, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_and_find_latest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_version_1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_versions_2_to_5, setup, teardown),
        cmocka_unit_test_setup_teardown(test_powersgd_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_normalisation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mid_epoch_names_and_supersede, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta_checks_checksum, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_uncreatable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_regular, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_keeps_previous, setup, teardown),
    };
    return cmocka_run_group_tests_name("checkpoint", tests, NULL, NULL);
}
