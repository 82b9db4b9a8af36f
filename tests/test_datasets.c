/*
 * tests/test_datasets.c - the CIFAR-10/100 readers and the synthetic generator.
 *
 * The CIFAR tests write small binary batches with known pixels and labels to a
 * fresh directory under /tmp (7 records per file: record r of file f has label
 * (f + r) mod classes and pixel k = (f * 31 + r * 7 + k) mod 256) and read them
 * back: shape, classes, exact pixels and labels, the five CIFAR-10 training
 * batches concatenated in order, the archives' sub-directories, and the errors
 * (missing root, missing files, truncated file, bad label, a FIFO, directory
 * or device in a file's place), each checked to name the file at fault. The synthetic tests check shape, determinism per
 * (seed, stream), the label distribution, and the parsing of
 * data.synthetic_shape.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/check.h"
#include "data/dataset.h"
#include "train/config.h"

#define PIX 3072
#define RECS 7

static char tmp_dir[256];

/* Removes every file under dir, then dir (one level of sub-directories). */
static void remove_tree(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (depth > 0 && stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p, depth - 1);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* A fresh empty directory per test. */
static int setup_tmp(void **state) {
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/cnt_test_datasets_XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown_tmp(void **state) {
    (void)state;
    remove_tree(tmp_dir, 2);
    return 0;
}

static const char *path_in(int slot, const char *dir, const char *name) {
    static char paths[4][600];
    int len = snprintf(paths[slot], sizeof paths[slot], "%s/%s", dir, name);
    assert_true(len > 0 && (size_t)len < sizeof paths[slot]);
    return paths[slot];
}

static uint8_t pixel_of(int file, int rec, int k) { return (uint8_t)((file * 31 + rec * 7 + k) & 255); }
static int label_of(int file, int rec, int classes) { return (file + rec) % classes; }

/* Writes a CIFAR file of `recs` records (label_bytes 1: CIFAR-10, 2:
 * CIFAR-100 with coarse = fine / 5), then `extra` bytes of 0xEE. */
static void write_cifar(const char *path, int file, int recs, int label_bytes, int classes, size_t extra) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t rec[2 + PIX];
    for (int r = 0; r < recs; r++) {
        int fine = label_of(file, r, classes);
        if (label_bytes == 2) rec[0] = (uint8_t)(fine / 5);
        rec[label_bytes - 1] = (uint8_t)fine;
        for (int k = 0; k < PIX; k++) rec[label_bytes + k] = pixel_of(file, r, k);
        assert_int_equal(fwrite(rec, 1, (size_t)label_bytes + PIX, f), (size_t)label_bytes + PIX);
    }
    for (size_t i = 0; i < extra; i++) fputc(0xEE, f);
    assert_int_equal(fclose(f), 0);
}

/* Overwrites byte `offset` of path with v. */
static void poke(const char *path, long offset, uint8_t v) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, offset, SEEK_SET), 0);
    assert_int_equal(fputc(v, f), v);
    assert_int_equal(fclose(f), 0);
}

static void expect_msg_has(const char *needle) {
    const char *msg = cnt_err_msg();
    if (!strstr(msg, needle)) fail_msg("error message \"%s\" does not contain \"%s\"", msg, needle);
}

/* Checks that sample i of ds is record `rec` of file `file`. */
static void expect_record(const dataset *ds, int i, int file, int rec) {
    assert_int_equal(ds->labels[i], label_of(file, rec, ds->classes));
    const uint8_t *p = ds->pixels + (size_t)i * PIX;
    for (int k = 0; k < PIX; k++)
        if (p[k] != pixel_of(file, rec, k))
            fail_msg("sample %d pixel %d is %d, expected %d (file %d record %d)", i, k, p[k], pixel_of(file, rec, k),
                     file, rec);
}

static void write_cifar10(const char *dir) {
    char name[64];
    for (int b = 1; b <= 5; b++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", b);
        write_cifar(path_in(0, dir, name), b, RECS, 1, 10, 0);
    }
    write_cifar(path_in(0, dir, "test_batch.bin"), 0, RECS, 1, 10, 0);
}

static void test_cifar10(void **state) {
    (void)state;
    dataset ds;
    write_cifar10(tmp_dir);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_OK);
    assert_int_equal(ds.n, 5 * RECS);
    assert_int_equal(ds.c, 3);
    assert_int_equal(ds.h, 32);
    assert_int_equal(ds.w, 32);
    assert_int_equal(ds.classes, 10);
    /* The five batches, concatenated in order. */
    for (int b = 1; b <= 5; b++)
        for (int r = 0; r < RECS; r++) expect_record(&ds, (b - 1) * RECS + r, b, r);
    dataset_free(&ds);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 0), CNT_OK);
    assert_int_equal(ds.n, RECS);
    assert_int_equal(ds.classes, 10);
    for (int r = 0; r < RECS; r++) expect_record(&ds, r, 0, r);
    dataset_free(&ds);
}

static void test_cifar100_subdir(void **state) {
    (void)state;
    dataset ds;
    const char *sub = path_in(1, tmp_dir, "cifar-100-binary");
    assert_int_equal(mkdir(sub, 0700), 0);
    /* 100 fine classes: labels up to 99 occur with 3 + r for file 96. */
    write_cifar(path_in(0, sub, "train.bin"), 96, RECS, 2, 100, 0);
    write_cifar(path_in(0, sub, "test.bin"), 3, RECS, 2, 100, 0);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_OK);
    assert_int_equal(ds.n, RECS);
    assert_int_equal(ds.c, 3);
    assert_int_equal(ds.h, 32);
    assert_int_equal(ds.w, 32);
    assert_int_equal(ds.classes, 100);
    assert_int_equal(ds.labels[3], 99); /* the fine label, not the coarse one (19) */
    for (int r = 0; r < RECS; r++) expect_record(&ds, r, 96, r);
    dataset_free(&ds);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 0), CNT_OK);
    assert_int_equal(ds.n, RECS);
    for (int r = 0; r < RECS; r++) expect_record(&ds, r, 3, r);
    dataset_free(&ds);
    /* The root itself works too. */
    assert_int_equal(dataset_load_cifar(&ds, sub, 0), CNT_OK);
    assert_int_equal(ds.classes, 100);
    dataset_free(&ds);
}

static void test_cifar10_subdir(void **state) {
    (void)state;
    dataset ds;
    const char *sub = path_in(1, tmp_dir, "cifar-10-batches-bin");
    assert_int_equal(mkdir(sub, 0700), 0);
    write_cifar10(sub);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_OK);
    assert_int_equal(ds.n, 5 * RECS);
    assert_int_equal(ds.classes, 10);
    expect_record(&ds, 4 * RECS + 6, 5, 6);
    dataset_free(&ds);
}

static void test_cifar_errors(void **state) {
    (void)state;
    dataset ds;
    /* Missing root. */
    const char *missing = path_in(1, tmp_dir, "no-such-root");
    assert_int_equal(dataset_load_cifar(&ds, missing, 1), CNT_ERR);
    expect_msg_has(missing);
    assert_null(ds.pixels);
    /* An empty root: every path tried is named. */
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 0), CNT_ERR);
    expect_msg_has(path_in(0, tmp_dir, "test_batch.bin"));
    expect_msg_has(path_in(0, tmp_dir, "test.bin"));
    expect_msg_has(path_in(0, tmp_dir, "cifar-10-batches-bin/test_batch.bin"));
    expect_msg_has(path_in(0, tmp_dir, "cifar-100-binary/test.bin"));
    /* A missing batch. */
    write_cifar10(tmp_dir);
    unlink(path_in(0, tmp_dir, "data_batch_4.bin"));
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_ERR);
    expect_msg_has(path_in(0, tmp_dir, "data_batch_4.bin"));
    assert_null(ds.pixels);
    /* A truncated batch: size not a multiple of 3073. */
    const char *b2 = path_in(2, tmp_dir, "data_batch_2.bin");
    write_cifar(path_in(0, tmp_dir, "data_batch_4.bin"), 4, RECS, 1, 10, 0);
    assert_int_equal(truncate(b2, (off_t)RECS * 3073 - 5), 0);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_ERR);
    expect_msg_has(b2);
    expect_msg_has("21506"); /* 7 * 3073 - 5 */
    /* Trailing bytes are just as wrong. */
    write_cifar(b2, 2, RECS, 1, 10, 2);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_ERR);
    expect_msg_has(b2);
    expect_msg_has("21513");
    /* A label out of range in record 3 of the test batch. */
    write_cifar(b2, 2, RECS, 1, 10, 0);
    const char *tb = path_in(2, tmp_dir, "test_batch.bin");
    poke(tb, 3L * 3073, 10);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 0), CNT_ERR);
    expect_msg_has(tb);
    expect_msg_has("record 3");
    expect_msg_has("label 10");
    assert_null(ds.pixels);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_OK); /* the training batches are fine */
    dataset_free(&ds);
    /* CIFAR-100: a fine label of 100 in record 5 (the records are 3074 bytes). */
    const char *t100 = path_in(3, tmp_dir, "cifar-100-binary");
    assert_int_equal(mkdir(t100, 0700), 0);
    const char *test100 = path_in(2, t100, "test.bin");
    write_cifar(test100, 0, RECS, 2, 100, 0);
    assert_int_equal(dataset_load_cifar(&ds, t100, 0), CNT_OK);
    dataset_free(&ds);
    poke(test100, 5L * 3074 + 1, 100);
    assert_int_equal(dataset_load_cifar(&ds, t100, 0), CNT_ERR);
    expect_msg_has(test100);
    expect_msg_has("record 5");
    expect_msg_has("label 100");
    /* CIFAR-100 size check uses its own record size: 7 CIFAR-10 records are not whole. */
    write_cifar(test100, 0, RECS, 1, 10, 0);
    assert_int_equal(dataset_load_cifar(&ds, t100, 0), CNT_ERR);
    expect_msg_has(test100);
    expect_msg_has("21511");
    unlink(test100);
    rmdir(t100);
}

/* A FIFO, a directory or a device in a CIFAR file's place is refused unread,
 * naming the path and its kind, whether it is the file that identifies the
 * variant (test_batch.bin) or one found after it. alarm() turns a hang into
 * a failure. */
static void test_cifar_not_regular(void **state) {
    (void)state;
    dataset ds;
    write_cifar10(tmp_dir);
    const char *b3 = path_in(1, tmp_dir, "data_batch_3.bin");
    const char *tb = path_in(2, tmp_dir, "test_batch.bin");
    alarm(20);
    unlink(b3);
    assert_int_equal(mkfifo(b3, 0600), 0);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_ERR);
    expect_msg_has(b3);
    expect_msg_has("it is a FIFO (named pipe), not a regular file");
    assert_null(ds.pixels);
    unlink(tb);
    assert_int_equal(mkfifo(tb, 0600), 0);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 0), CNT_ERR);
    expect_msg_has(tb);
    expect_msg_has("it is a FIFO (named pipe), not a regular file");
    unlink(b3);
    assert_int_equal(mkdir(b3, 0700), 0);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_ERR);
    expect_msg_has(b3);
    expect_msg_has("it is a directory, not a regular file");
    rmdir(b3);
    assert_int_equal(symlink("/dev/zero", b3), 0);
    assert_int_equal(dataset_load_cifar(&ds, tmp_dir, 1), CNT_ERR);
    expect_msg_has(b3);
    expect_msg_has("it is a character device, not a regular file");
    alarm(0);
}

static int count_diff(const dataset *a, const dataset *b) {
    size_t bytes = (size_t)a->n * (size_t)a->c * (size_t)a->h * (size_t)a->w;
    int diff = 0;
    for (size_t k = 0; k < bytes; k++) diff += a->pixels[k] != b->pixels[k];
    for (int i = 0; i < a->n; i++) diff += a->labels[i] != b->labels[i];
    return diff;
}

static void test_synthetic(void **state) {
    (void)state;
    dataset a, b, c, d;
    assert_int_equal(dataset_make_synthetic(&a, 2, 5, 7, 13, 2000, 42, 1), CNT_OK);
    assert_int_equal(a.n, 2000);
    assert_int_equal(a.c, 2);
    assert_int_equal(a.h, 5);
    assert_int_equal(a.w, 7);
    assert_int_equal(a.classes, 13);
    /* Labels in range, every class present, roughly uniform (2000 / 13 = 154). */
    int hist[13] = {0};
    for (int i = 0; i < a.n; i++) {
        assert_in_range(a.labels[i], 0, 12);
        hist[a.labels[i]]++;
    }
    for (int k = 0; k < 13; k++) assert_in_range(hist[k], 100, 210);
    /* Pixels cover the byte range and average near 127.5. */
    size_t bytes = 2000u * 70u;
    double sum = 0;
    int seen_0 = 0, seen_255 = 0;
    for (size_t k = 0; k < bytes; k++) {
        sum += a.pixels[k];
        seen_0 |= a.pixels[k] == 0;
        seen_255 |= a.pixels[k] == 255;
    }
    assert_true(seen_0 && seen_255);
    assert_true(sum / (double)bytes > 125.0 && sum / (double)bytes < 130.0);
    /* Deterministic for (seed, stream); another seed or stream differs. */
    assert_int_equal(dataset_make_synthetic(&b, 2, 5, 7, 13, 2000, 42, 1), CNT_OK);
    assert_int_equal(count_diff(&a, &b), 0);
    assert_int_equal(dataset_make_synthetic(&c, 2, 5, 7, 13, 2000, 43, 1), CNT_OK);
    assert_true(count_diff(&a, &c) > 100000);
    assert_int_equal(dataset_make_synthetic(&d, 2, 5, 7, 13, 2000, 42, 2), CNT_OK);
    assert_true(count_diff(&a, &d) > 100000);
    dataset_free(&a);
    dataset_free(&b);
    dataset_free(&c);
    dataset_free(&d);
    /* An image size that is not a multiple of 4 bytes, one sample. */
    assert_int_equal(dataset_make_synthetic(&a, 1, 1, 3, 2, 1, 7, 0), CNT_OK);
    assert_int_equal(a.n, 1);
    dataset_free(&a);
    /* Bad requests. */
    assert_int_equal(dataset_make_synthetic(&a, 3, 32, 32, 1, 10, 1, 0), CNT_ERR);
    expect_msg_has("classes");
    assert_int_equal(dataset_make_synthetic(&a, 3, 32, 0, 10, 10, 1, 0), CNT_ERR);
    assert_int_equal(dataset_make_synthetic(&a, 3, 4096, 4096, 10, 10000, 1, 0), CNT_ERR);
    expect_msg_has("3x4096x4096");
    assert_null(a.pixels);
}

/* data.synthetic_shape: CxHxW, C in 1..3, H and W in 1..4096. */
static void test_synthetic_shape(void **state) {
    (void)state;
    config cfg;
    config_defaults(&cfg);
    int c = 0, h = 0, w = 0;
    assert_int_equal(config_synthetic_shape(&cfg, &c, &h, &w), CNT_OK);
    assert_true(c == 3 && h == 32 && w == 32);
    assert_int_equal(config_validate(&cfg), CNT_OK);
    static const struct { const char *s; int c, h, w; } good[] = {{"1x1x1", 1, 1, 1}, {"2x4096x7", 2, 4096, 7},
                                                                   {"3x224x200", 3, 224, 200}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "data.synthetic_shape=%s", good[i].s);
        assert_int_equal(config_override(&cfg, arg), CNT_OK);
        assert_int_equal(config_synthetic_shape(&cfg, &c, &h, &w), CNT_OK);
        assert_true(c == good[i].c && h == good[i].h && w == good[i].w);
    }
    static const char *const bad[] = {"3x32", "3x32x32x1", "0x32x32", "4x32x32", "3x0x32", "3x4097x32",
                                      "3x32x99999999999", "ax32x32", "3X32X32", "3x32x32 ", "x32x32", "3xx32",
                                      "-3x32x32", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cfg.synthetic_shape, sizeof cfg.synthetic_shape, "%s", bad[i]);
        if (config_synthetic_shape(&cfg, &c, &h, &w) != CNT_ERR) fail_msg("shape '%s' was accepted", bad[i]);
        expect_msg_has("data.synthetic_shape");
        assert_int_equal(config_validate(&cfg), CNT_ERR);
        expect_msg_has("data.synthetic_shape");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cifar10, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_cifar100_subdir, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_cifar10_subdir, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_cifar_errors, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_cifar_not_regular, setup_tmp, teardown_tmp),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_synthetic_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
