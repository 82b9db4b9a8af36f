/*
 * tests/test_data.c - IDX readers, dataset helpers and the batch loader.
 *
 * Small IDX files with known content are written (raw and gzipped) to a fresh
 * directory under /tmp and read back; every error case checks that the message
 * names the file at fault (a FIFO, device or directory in place of a file
 * among them; a gzipped header claiming more data than the file holds is
 * checked under an address-space limit). The real Fashion-MNIST files are checked for shape
 * and label balance. Loader tests use in-memory datasets whose label is the
 * sample index, so shard membership, order and pixel content can be traced
 * back to the source sample. Tests that could hang (start_epoch or free in the
 * middle of an epoch) run under alarm(): a hang kills the process, which the
 * test runner counts as a failure.
 */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "common/check.h"
#include "common/rng.h"
#include "common/timer.h"
#include "data/dataset.h"
#include "common/cpus.h"
#include "data/loader.h"
#include "model/backend.h"
#include "train/input.h"

#define FASHION_ROOT "/usr/share/datasets/fashion-mnist"

static char tmp_dir[256];

/* A path inside the test's temporary directory (static buffer per slot). */
static const char *tmp_path(int slot, const char *name) {
    static char paths[4][512];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", tmp_dir, name);
    return paths[slot];
}

static int setup_tmp(void **state) {
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/cnt_test_data_XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown_tmp(void **state) {
    (void)state;
    DIR *d = opendir(tmp_dir);
    if (!d) return -1;
    struct dirent *e;
    char p[600];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", tmp_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    return rmdir(tmp_dir);
}

/* The IDX header for an unsigned-byte file of the given dims. */
static size_t idx_header(unsigned char *hdr, uint32_t magic, const uint32_t *dims, int ndims) {
    size_t len = 0;
    uint32_t words[4];
    words[0] = magic;
    for (int i = 0; i < ndims; i++) words[i + 1] = dims[i];
    for (int i = 0; i <= ndims; i++) {
        hdr[len++] = (unsigned char)(words[i] >> 24);
        hdr[len++] = (unsigned char)(words[i] >> 16);
        hdr[len++] = (unsigned char)(words[i] >> 8);
        hdr[len++] = (unsigned char)words[i];
    }
    return len;
}

/* Writes header + data (+ `extra` trailing 0xAB bytes), gzipped when gz is 1.
 * `keep` < header+data+extra writes only the first `keep` bytes of content. */
static void write_idx(const char *path, int gz, uint32_t magic, const uint32_t *dims, int ndims,
                      const uint8_t *data, size_t len, size_t extra, size_t keep) {
    unsigned char hdr[16];
    size_t hlen = idx_header(hdr, magic, dims, ndims);
    size_t total = hlen + len + extra;
    unsigned char *buf = malloc(total);
    assert_non_null(buf);
    memcpy(buf, hdr, hlen);
    if (len) memcpy(buf + hlen, data, len);
    memset(buf + hlen + len, 0xAB, extra);
    if (keep < total) total = keep;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, buf, (unsigned)total), (int)total);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, total, f), total);
        assert_int_equal(fclose(f), 0);
    }
    free(buf);
}

static void expect_msg_has(const char *needle) {
    const char *msg = cnt_err_msg();
    if (!strstr(msg, needle)) fail_msg("error message \"%s\" does not contain \"%s\"", msg, needle);
}

/* 5 images of 3x4 with pixel k of the file = (7k + 3) mod 256; labels below. */
enum { SN = 5, SH = 3, SW = 4 };
static const uint8_t small_labels[SN] = {0, 3, 1, 3, 2};

static void small_pixels(uint8_t *px) {
    for (int k = 0; k < SN * SH * SW; k++) px[k] = (uint8_t)((7 * k + 3) & 255);
}

static void write_small(const char *img, const char *lab, int gz_img, int gz_lab) {
    uint8_t px[SN * SH * SW];
    small_pixels(px);
    uint32_t idims[3] = {SN, SH, SW}, ldims[1] = {SN};
    write_idx(img, gz_img, 0x803, idims, 3, px, sizeof px, 0, SIZE_MAX);
    write_idx(lab, gz_lab, 0x801, ldims, 1, small_labels, SN, 0, SIZE_MAX);
}

static void test_idx_reads_raw_and_gzip(void **state) {
    (void)state;
    uint8_t px[SN * SH * SW];
    small_pixels(px);
    for (int mode = 0; mode < 4; mode++) {
        const char *img = tmp_path(0, "small-images");
        const char *lab = tmp_path(1, "small-labels");
        write_small(img, lab, mode & 1, (mode >> 1) & 1);
        dataset ds;
        assert_int_equal(dataset_load_idx(&ds, img, lab), CNT_OK);
        assert_int_equal(ds.n, SN);
        assert_int_equal(ds.c, 1);
        assert_int_equal(ds.h, SH);
        assert_int_equal(ds.w, SW);
        assert_int_equal(ds.classes, 4);
        assert_memory_equal(ds.pixels, px, sizeof px);
        for (int i = 0; i < SN; i++) assert_int_equal(ds.labels[i], small_labels[i]);
        dataset_free(&ds);
        assert_null(ds.pixels);
        assert_int_equal(ds.n, 0);
    }
    /* All labels 0: classes is still at least 2. */
    uint8_t zeros[2] = {0, 0}, img2[2 * 2 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint32_t idims[3] = {2, 2, 2}, ldims[1] = {2};
    write_idx(tmp_path(0, "zero-images"), 1, 0x803, idims, 3, img2, sizeof img2, 0, SIZE_MAX);
    write_idx(tmp_path(1, "zero-labels"), 0, 0x801, ldims, 1, zeros, 2, 0, SIZE_MAX);
    dataset ds;
    assert_int_equal(dataset_load_idx(&ds, tmp_path(0, "zero-images"), tmp_path(1, "zero-labels")), CNT_OK);
    assert_int_equal(ds.classes, 2);
    assert_int_equal(ds.pixels[7], 8);
    dataset_free(&ds);
}

/* Loads and expects failure with a message naming `bad` and containing `what`. */
static void expect_load_error(const char *img, const char *lab, const char *bad, const char *what) {
    dataset ds;
    memset(&ds, 0x5A, sizeof ds);
    assert_int_equal(dataset_load_idx(&ds, img, lab), CNT_ERR);
    expect_msg_has(bad);
    if (what) expect_msg_has(what);
    assert_null(ds.pixels);
    assert_null(ds.labels);
    assert_int_equal(ds.n, 0);
}

static void test_idx_errors(void **state) {
    (void)state;
    uint8_t px[SN * SH * SW];
    small_pixels(px);
    uint32_t idims[3] = {SN, SH, SW}, ldims[1] = {SN};
    const char *img = tmp_path(0, "err-images");
    const char *lab = tmp_path(1, "err-labels");
    const char *bad = tmp_path(2, "err-bad");
    size_t full = 16 + sizeof px;
    write_small(img, lab, 0, 1);

    expect_load_error(tmp_path(2, "no-such-file"), lab, tmp_path(2, "no-such-file"), "No such file");
    expect_load_error(img, tmp_path(2, "no-such-labels"), tmp_path(2, "no-such-labels"), "No such file");

    for (int gz = 0; gz < 2; gz++) {
        /* Bad magic: a label file given as images, and images given as labels. */
        write_idx(bad, gz, 0x801, ldims, 1, small_labels, SN, 0, SIZE_MAX);
        expect_load_error(bad, lab, bad, "magic 0x00000801");
        expect_load_error(img, img, img, "magic 0x00000803");
        /* Truncated data: 60 bytes promised, 59 present. */
        write_idx(bad, gz, 0x803, idims, 3, px, sizeof px, 0, full - 1);
        expect_load_error(bad, lab, bad, "truncated");
        expect_msg_has(gz ? "expected 60 bytes" : "76");
        expect_msg_has(gz ? "read 59" : "75");
        /* Truncated header. */
        write_idx(bad, gz, 0x803, idims, 3, px, sizeof px, 0, 10);
        expect_load_error(bad, lab, bad, "truncated");
        /* Trailing garbage. */
        write_idx(bad, gz, 0x803, idims, 3, px, sizeof px, 3, SIZE_MAX);
        expect_load_error(bad, lab, bad, "3 trailing bytes");
        /* Image and label counts differ. */
        uint32_t ldims4[1] = {SN - 1};
        write_idx(bad, gz, 0x801, ldims4, 1, small_labels, SN - 1, 0, SIZE_MAX);
        expect_load_error(img, bad, img, bad);
        expect_msg_has("5 images");
        expect_msg_has("4 labels");
        /* Absurd dimensions are refused from the header alone. */
        uint32_t zero_dims[3] = {0, SH, SW}, huge_side[3] = {SN, 100000, SW};
        uint32_t huge_total[3] = {2000000000u, 4096, 4096};
        write_idx(bad, gz, 0x803, zero_dims, 3, NULL, 0, 0, SIZE_MAX);
        expect_load_error(bad, lab, bad, "dimension 0");
        write_idx(bad, gz, 0x803, huge_side, 3, px, sizeof px, 0, SIZE_MAX);
        expect_load_error(bad, lab, bad, "dimension 1");
        write_idx(bad, gz, 0x803, huge_total, 3, px, sizeof px, 0, SIZE_MAX);
        expect_load_error(bad, lab, bad, "corrupt");
    }
    /* A gzip stream cut in the middle. */
    uint8_t big[4000];
    rng r;
    rng_seed(&r, 1, 2);
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)rng_u32(&r);
    uint32_t bdims[3] = {SN, 20, 40};
    write_idx(bad, 1, 0x803, bdims, 3, big, sizeof big, 0, SIZE_MAX);
    FILE *f = fopen(bad, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fclose(f);
    assert_int_equal(truncate(bad, sz / 2), 0);
    expect_load_error(bad, lab, bad, "truncated");
    /* A directory is not a file. */
    expect_load_error(tmp_dir, lab, tmp_dir, "directory");
}

/* Only regular files are read: a FIFO (whose open would wait for a writer
 * forever), a device and a directory are refused unread, naming the path and
 * the kind, also when found by dataset_load_mnist_dir. alarm() turns a hang
 * into a failure. */
static void test_idx_not_regular(void **state) {
    (void)state;
    const char *img = tmp_path(0, "kind-images");
    const char *lab = tmp_path(1, "kind-labels");
    const char *fifo = tmp_path(2, "kind-fifo");
    write_small(img, lab, 0, 1);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20);
    expect_load_error(fifo, lab, fifo, "it is a FIFO (named pipe), not a regular file");
    expect_load_error(img, fifo, fifo, "it is a FIFO (named pipe), not a regular file");
    expect_load_error("/dev/zero", lab, "/dev/zero", "it is a character device, not a regular file");
    expect_load_error(tmp_dir, lab, tmp_dir, "it is a directory, not a regular file");
    unlink(fifo);
    /* An MNIST directory whose t10k-labels-idx1-ubyte.gz is a FIFO. */
    const char *dir = tmp_path(3, "kind-mnist");
    assert_int_equal(mkdir(dir, 0700), 0);
    char images[600], labels[600];
    snprintf(images, sizeof images, "%s/t10k-images-idx3-ubyte", dir);
    snprintf(labels, sizeof labels, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_small(images, tmp_path(1, "kind-labels"), 0, 1);
    assert_int_equal(mkfifo(labels, 0600), 0);
    dataset ds;
    assert_int_equal(dataset_load_mnist_dir(&ds, dir, 0), CNT_ERR);
    expect_msg_has(labels);
    expect_msg_has("FIFO");
    alarm(0);
    unlink(images);
    unlink(labels);
    rmdir(dir);
}

/* A gzipped file's header is only as good as the data behind it: one that
 * claims 2 GB of images over a few bytes is reported as truncated, and no
 * more memory is taken than the data read needs (under an address-space
 * limit 1 GiB above what the process maps, a buffer allocated at the claimed
 * size would fail as "cannot allocate"). */
static void test_idx_gz_claims_more_than_it_holds(void **state) {
    (void)state;
    const char *img = tmp_path(0, "claim-images");
    const char *lab = tmp_path(1, "claim-labels");
    write_small(img, lab, 1, 1);
    uint8_t px[SN * SH * SW];
    small_pixels(px);
    uint32_t dims[3] = {500000, 64, 64}; /* 2,048,000,000 bytes promised */
    write_idx(img, 1, 0x803, dims, 3, px, sizeof px, 0, SIZE_MAX);
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld", &pages), 1);
    fclose(f);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    lim = old;
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
    if (old.rlim_max == RLIM_INFINITY || cap < old.rlim_max) lim.rlim_cur = cap;
    assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    dataset ds;
    int rc = dataset_load_idx(&ds, img, lab);
    assert_int_equal(setrlimit(RLIMIT_AS, &old), 0);
    assert_int_equal(rc, CNT_ERR);
    expect_msg_has(img);
    expect_msg_has("truncated: expected 2048000000 bytes of data after the header, read 60");
}

static void test_mnist_dir(void **state) {
    (void)state;
    dataset ds;
    const char *missing = tmp_path(0, "missing-root");
    assert_int_equal(dataset_load_mnist_dir(&ds, missing, 1), CNT_ERR);
    expect_msg_has(missing);
    /* An existing directory without the files: both names tried are reported. */
    assert_int_equal(dataset_load_mnist_dir(&ds, tmp_dir, 0), CNT_ERR);
    expect_msg_has(tmp_path(0, "t10k-images-idx3-ubyte.gz"));
    expect_msg_has(tmp_path(0, "t10k-images-idx3-ubyte"));
    /* Raw files without .gz are found; classes is 10 whatever the labels. */
    write_small(tmp_path(0, "t10k-images-idx3-ubyte"), tmp_path(1, "t10k-labels-idx1-ubyte.gz"), 0, 1);
    assert_int_equal(dataset_load_mnist_dir(&ds, tmp_dir, 0), CNT_OK);
    assert_int_equal(ds.n, SN);
    assert_int_equal(ds.classes, 10);
    assert_int_equal(ds.labels[1], 3);
    dataset_free(&ds);
    /* Training files are looked up under their own prefix. */
    assert_int_equal(dataset_load_mnist_dir(&ds, tmp_dir, 1), CNT_ERR);
    expect_msg_has("train-images-idx3-ubyte");
    /* A label of 10 or more cannot be MNIST. */
    uint8_t bad_labels[SN] = {0, 1, 12, 3, 4};
    uint32_t ldims[1] = {SN};
    write_idx(tmp_path(1, "t10k-labels-idx1-ubyte.gz"), 1, 0x801, ldims, 1, bad_labels, SN, 0, SIZE_MAX);
    assert_int_equal(dataset_load_mnist_dir(&ds, tmp_dir, 0), CNT_ERR);
    expect_msg_has("t10k-labels-idx1-ubyte.gz");
    expect_msg_has("label 12");
    assert_null(ds.pixels);
    unlink(tmp_path(0, "t10k-images-idx3-ubyte"));
    unlink(tmp_path(1, "t10k-labels-idx1-ubyte.gz"));
}

static void test_fashion_mnist(void **state) {
    (void)state;
    dataset tr, te;
    if (dataset_load_mnist_dir(&tr, FASHION_ROOT, 1) != CNT_OK) fail_msg("%s", cnt_err_msg());
    assert_int_equal(tr.n, 60000);
    assert_int_equal(tr.c, 1);
    assert_int_equal(tr.h, 28);
    assert_int_equal(tr.w, 28);
    assert_int_equal(tr.classes, 10);
    int hist[10] = {0};
    for (int i = 0; i < tr.n; i++) {
        assert_in_range(tr.labels[i], 0, 9);
        hist[tr.labels[i]]++;
    }
    for (int k = 0; k < 10; k++) assert_int_equal(hist[k], 6000);
    /* Known statistics of Fashion-MNIST training images: mean 0.2860, std 0.3530. */
    float mean, std;
    dataset_channel_stats(&tr, &mean, &std);
    assert_float_equal(mean, 0.2860f, 5e-4f);
    assert_float_equal(std, 0.3530f, 5e-4f);

    /* One training epoch through the loader, as the trainer would run it. */
    loader_options o = {.batch = 128, .rank = 0, .world = 1, .seed = 7, .shuffle = 1, .drop_last = 1,
                        .augment = 1, .pad = 2, .mean = {mean}, .std = {std}, .workers = 2, .prefetch = 4};
    loader *ld = loader_create(&tr, &o);
    assert_non_null(ld);
    assert_int_equal(loader_steps_per_epoch(ld), 60000 / 128);
    double t0 = time_now();
    loader_start_epoch(ld, 0);
    int steps = 0;
    const batch *b;
    while ((b = loader_next(ld)) != NULL) {
        assert_int_equal(b->n, 128);
        steps++;
    }
    double dt = time_now() - t0;
    assert_int_equal(steps, 60000 / 128);
    printf("loader: one Fashion-MNIST epoch (batch 128, 2 workers, augment) in %.3f s, %.0f samples/s\n", dt,
           steps * 128 / dt);
    loader_free(ld);
    dataset_free(&tr);

    if (dataset_load_mnist_dir(&te, FASHION_ROOT, 0) != CNT_OK) fail_msg("%s", cnt_err_msg());
    assert_int_equal(te.n, 10000);
    assert_int_equal(te.h, 28);
    assert_int_equal(te.w, 28);
    assert_int_equal(te.classes, 10);
    dataset_free(&te);
}

static void test_dataset_helpers(void **state) {
    (void)state;
    /* Two 3-channel 1x2 images: channel 0 is all 0 or all 255 (mean 0.5,
     * std 0.5), channel 1 constant 51 (0.2, std 0), channel 2 {0, 255, 0, 0}. */
    uint8_t px[2 * 3 * 2] = {0, 0, 51, 51, 0, 255, 255, 255, 51, 51, 0, 0};
    int32_t labels[2] = {0, 1};
    dataset ds = {.n = 2, .c = 3, .h = 1, .w = 2, .classes = 2, .pixels = px, .labels = labels};
    float mean[3], std[3];
    dataset_channel_stats(&ds, mean, std);
    assert_float_equal(mean[0], 0.5f, 1e-7f);
    assert_float_equal(std[0], 0.5f, 1e-7f);
    assert_float_equal(mean[1], 0.2f, 1e-7f);
    assert_float_equal(std[1], 0.0f, 1e-7f);
    assert_float_equal(mean[2], 0.25f, 1e-7f);
    assert_float_equal(std[2], sqrtf(3.0f) / 4.0f, 1e-7f);
    dataset_truncate(&ds, 0);
    assert_int_equal(ds.n, 2);
    dataset_truncate(&ds, 5);
    assert_int_equal(ds.n, 2);
    dataset_truncate(&ds, 1);
    assert_int_equal(ds.n, 1);
    dataset_channel_stats(&ds, mean, std);
    assert_float_equal(mean[0], 0.0f, 1e-7f);
    assert_float_equal(mean[2], 0.5f, 1e-7f);
}

/* An in-memory dataset of n images c x h x w; label = sample index; pixels
 * random but reproducible. */
static dataset make_dataset(int n, int c, int h, int w, uint64_t seed) {
    dataset ds = {.n = n, .c = c, .h = h, .w = w, .classes = n};
    ds.pixels = malloc((size_t)n * c * h * w);
    ds.labels = malloc((size_t)n * sizeof *ds.labels);
    assert_non_null(ds.pixels);
    assert_non_null(ds.labels);
    rng r;
    rng_seed(&r, seed, 0);
    for (size_t k = 0; k < (size_t)n * c * h * w; k++) ds.pixels[k] = (uint8_t)rng_u32(&r);
    for (int i = 0; i < n; i++) ds.labels[i] = i;
    return ds;
}

static loader_options plain_options(int bs, int rank, int world) {
    loader_options o = {.batch = bs, .rank = rank, .world = world, .seed = 1234, .shuffle = 1,
                        .drop_last = 1, .augment = 0, .pad = 0, .mean = {0, 0, 0}, .std = {1, 1, 1},
                        .workers = 2, .prefetch = 2};
    return o;
}

/* Runs one epoch and stores the labels (sample indices) it delivers in order;
 * checks each batch's size and pixels against the source. Returns the count. */
static int run_epoch(loader *ld, const dataset *ds, int epoch, int bs, int drop_last, int *out, int *steps) {
    size_t sample = (size_t)ds->c * ds->h * ds->w;
    loader_start_epoch(ld, epoch);
    int count = 0, s = 0;
    const batch *b;
    while ((b = loader_next(ld)) != NULL) {
        if (drop_last) assert_int_equal(b->n, bs);
        assert_in_range(b->n, 1, bs);
        if (s + 1 < loader_steps_per_epoch(ld)) assert_int_equal(b->n, bs);
        for (int i = 0; i < b->n; i++) {
            int idx = b->labels[i];
            assert_in_range(idx, 0, ds->n - 1);
            for (size_t k = 0; k < sample; k++)
                assert_float_equal(b->x[i * sample + k], ds->pixels[idx * sample + k] / 255.0f, 1e-6f);
            out[count++] = idx;
        }
        s++;
    }
    assert_null(loader_next(ld));
    *steps = s;
    return count;
}

static void test_shards(void **state) {
    (void)state;
    const int n = 103, bs = 4;
    dataset ds = make_dataset(n, 1, 2, 3, 5);
    int *reference = malloc(n * sizeof(int));
    int *seen = malloc(n * sizeof(int));
    int *got = malloc((n + 8 * bs) * sizeof(int)); /* wrap delivers up to a step per rank more */
    /* World 1, evaluation order, shuffled: the permutation every rank draws. */
    loader_options o = plain_options(bs, 0, 1);
    o.drop_last = 0;
    loader *ld = loader_create(&ds, &o);
    assert_non_null(ld);
    int steps;
    assert_int_equal(run_epoch(ld, &ds, 3, bs, 0, reference, &steps), n);
    assert_int_equal(steps, (n + bs - 1) / bs);
    memset(seen, 0, n * sizeof(int));
    for (int i = 0; i < n; i++) seen[reference[i]]++;
    for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
    int identity = 1;
    for (int i = 0; i < n; i++) identity &= reference[i] == i;
    assert_false(identity);
    /* Another epoch draws another permutation; the same epoch the same one. */
    assert_int_equal(run_epoch(ld, &ds, 4, bs, 0, got, &steps), n);
    assert_memory_not_equal(got, reference, n * sizeof(int));
    assert_int_equal(run_epoch(ld, &ds, 3, bs, 0, got, &steps), n);
    assert_memory_equal(got, reference, n * sizeof(int));
    loader_free(ld);

    for (int world = 1; world <= 8; world++) {
        /* Training: disjoint shards, equal step counts, full batches. */
        memset(seen, 0, n * sizeof(int));
        int expect_steps = (n / world) / bs;
        for (int rank = 0; rank < world; rank++) {
            o = plain_options(bs, rank, world);
            o.workers = 1 + rank % 3;
            ld = loader_create(&ds, &o);
            assert_non_null(ld);
            assert_int_equal(loader_steps_per_epoch(ld), expect_steps);
            int c = run_epoch(ld, &ds, 3, bs, 1, got, &steps);
            assert_int_equal(steps, expect_steps);
            assert_int_equal(c, expect_steps * bs);
            for (int p = 0; p < c; p++) {
                assert_int_equal(got[p], reference[rank + p * world]);
                assert_int_equal(seen[got[p]], 0);
                seen[got[p]] = 1;
            }
            loader_free(ld);
        }
        /* Training with wrap: equal steps, full batches, every sample at least
         * once and at most twice, the extra ones from the permutation's start. */
        memset(seen, 0, n * sizeof(int));
        int wrap_steps = (n + world * bs - 1) / (world * bs);
        for (int rank = 0; rank < world; rank++) {
            o = plain_options(bs, rank, world);
            o.wrap = 1;
            ld = loader_create(&ds, &o);
            assert_non_null(ld);
            assert_int_equal(loader_steps_per_epoch(ld), wrap_steps);
            int c = run_epoch(ld, &ds, 3, bs, 1, got, &steps);
            assert_int_equal(steps, wrap_steps);
            assert_int_equal(c, wrap_steps * bs);
            for (int p = 0; p < c; p++) {
                assert_int_equal(got[p], reference[(rank + p * world) % n]);
                seen[got[p]]++;
            }
            loader_free(ld);
        }
        for (int i = 0; i < n; i++) assert_true(seen[i] >= 1 && seen[i] <= 2);

        /* Evaluation, shuffled and in natural order: every sample exactly once. */
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            memset(seen, 0, n * sizeof(int));
            int total = 0, min_c = n, max_c = 0;
            for (int rank = 0; rank < world; rank++) {
                o = plain_options(bs, rank, world);
                o.drop_last = 0;
                o.shuffle = shuffle;
                o.workers = 3;
                o.prefetch = 1;
                ld = loader_create(&ds, &o);
                assert_non_null(ld);
                int c = run_epoch(ld, &ds, 3, bs, 0, got, &steps);
                assert_int_equal(steps, (c + bs - 1) / bs);
                assert_int_equal(loader_steps_per_epoch(ld), steps);
                for (int p = 0; p < c; p++) {
                    int q = rank + p * world;
                    assert_int_equal(got[p], shuffle ? reference[q] : q);
                    seen[got[p]]++;
                }
                total += c;
                if (c < min_c) min_c = c;
                if (c > max_c) max_c = c;
                loader_free(ld);
            }
            assert_int_equal(total, n);
            assert_true(max_c - min_c <= 1);
            for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
        }
    }
    free(reference);
    free(seen);
    free(got);
    dataset_free(&ds);
}

static void test_bad_options(void **state) {
    (void)state;
    dataset ds = make_dataset(10, 1, 2, 2, 9);
    loader_options o = plain_options(4, 0, 1);
    o.batch = 0;
    assert_null(loader_create(&ds, &o));
    expect_msg_has("batch");
    o = plain_options(2, 4, 4);
    assert_null(loader_create(&ds, &o));
    expect_msg_has("rank 4");
    o = plain_options(2, -1, 4);
    assert_null(loader_create(&ds, &o));
    expect_msg_has("rank -1");
    o = plain_options(3, 0, 4); /* 10 / 4 = 2 samples per rank < batch 3 */
    assert_null(loader_create(&ds, &o));
    expect_msg_has("smaller than one batch");
    o.drop_last = 0; /* evaluation takes the short shard */
    loader *ld = loader_create(&ds, &o);
    assert_non_null(ld);
    assert_int_equal(loader_steps_per_epoch(ld), 1);
    loader_free(ld);
    o = plain_options(2, 0, 1);
    o.std[0] = 0.0f;
    assert_null(loader_create(&ds, &o));
    expect_msg_has("std");
    o = plain_options(2, 0, 1);
    o.workers = 0;
    assert_null(loader_create(&ds, &o));
    expect_msg_has("workers");
    o = plain_options(2, 0, 1);
    o.prefetch = 0;
    assert_null(loader_create(&ds, &o));
    expect_msg_has("prefetch");
    dataset_free(&ds);
}

static void test_normalisation(void **state) {
    (void)state;
    uint8_t px[2 * 2 * 2] = {255, 0, 51, 128, 255, 0, 51, 128};
    int32_t labels[2] = {0, 1};
    dataset ds = {.n = 1, .c = 2, .h = 2, .w = 2, .classes = 2, .pixels = px, .labels = labels};
    loader_options o = plain_options(1, 0, 1);
    o.mean[0] = 0.5f;
    o.std[0] = 0.25f;
    o.mean[1] = 0.1f;
    o.std[1] = 2.0f;
    loader *ld = loader_create(&ds, &o);
    assert_non_null(ld);
    assert_null(loader_next(ld)); /* no epoch started yet */
    loader_start_epoch(ld, 0);
    const batch *b = loader_next(ld);
    assert_non_null(b);
    assert_int_equal(b->n, 1);
    assert_true(b->x[0] == 2.0f);
    assert_true(b->x[1] == -2.0f);
    assert_float_equal(b->x[2], -1.2f, 1e-6f);
    assert_float_equal(b->x[3], (128.0f / 255.0f - 0.5f) / 0.25f, 1e-6f);
    assert_float_equal(b->x[4], 0.45f, 1e-6f);
    assert_float_equal(b->x[5], -0.05f, 1e-6f);
    assert_float_equal(b->x[6], 0.05f, 1e-6f);
    assert_null(loader_next(ld));
    assert_null(loader_next(ld));
    loader_free(ld);
}

/* Whether out (c x h x w) equals src shifted by (dy, dx) (output (y, x) reads
 * source (y + dy, x' + dx), x' = x or w - 1 - x when flipped), zero outside. */
static int is_shifted_copy(const float *out, const uint8_t *src, int c, int h, int w, int dy, int dx,
                           int flip) {
    for (int ch = 0; ch < c; ch++) {
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++) {
                int sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
                float v = 0.0f;
                if (sy >= 0 && sy < h && sx >= 0 && sx < w) v = src[(ch * h + sy) * w + sx] / 255.0f;
                if (out[(ch * h + y) * w + x] != v) return 0;
            }
        }
    }
    return 1;
}

static void test_crop_flip(void **state) {
    (void)state;
    /* 64 copies of a 2-channel 4x5 image with distinct non-zero pixels, so each
     * output identifies its shift and flip; std 1 mean 0 keeps x = p / 255. */
    enum { N = 64, C = 2, H = 4, W = 5, PAD = 2 };
    dataset ds = make_dataset(N, C, H, W, 3);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < C * H * W; k++) ds.pixels[i * C * H * W + k] = (uint8_t)(10 + 3 * k);
    loader_options o = plain_options(8, 0, 1);
    o.augment = 1;
    o.pad = PAD;
    o.workers = 2;
    loader *ld = loader_create(&ds, &o);
    assert_non_null(ld);
    int combos[2 * PAD + 1][2 * PAD + 1][2];
    memset(combos, 0, sizeof combos);
    for (int epoch = 0; epoch < 3; epoch++) {
        loader_start_epoch(ld, epoch);
        const batch *b;
        while ((b = loader_next(ld)) != NULL) {
            for (int i = 0; i < b->n; i++) {
                const float *out = b->x + (size_t)i * C * H * W;
                int matches = 0;
                for (int dy = -PAD; dy <= PAD; dy++)
                    for (int dx = -PAD; dx <= PAD; dx++)
                        for (int flip = 0; flip < 2; flip++)
                            if (is_shifted_copy(out, ds.pixels, C, H, W, dy, dx, flip)) {
                                matches++;
                                combos[dy + PAD][dx + PAD][flip]++;
                            }
                assert_int_equal(matches, 1);
            }
        }
    }
    loader_free(ld);
    /* 192 draws over 50 equally likely combinations: both flips, both signs
     * of shift and most combinations must appear. */
    int distinct = 0, flips[2] = {0, 0};
    for (int dy = 0; dy <= 2 * PAD; dy++)
        for (int dx = 0; dx <= 2 * PAD; dx++)
            for (int flip = 0; flip < 2; flip++) {
                distinct += combos[dy][dx][flip] > 0;
                flips[flip] += combos[dy][dx][flip];
            }
    assert_true(distinct >= 30);
    assert_true(flips[0] > 40 && flips[1] > 40);
    int extreme[4] = {0, 0, 0, 0}; /* shifts of -PAD, +PAD in y, then in x */
    for (int k = 0; k <= 2 * PAD; k++)
        for (int flip = 0; flip < 2; flip++) {
            extreme[0] += combos[0][k][flip];
            extreme[1] += combos[2 * PAD][k][flip];
            extreme[2] += combos[k][0][flip];
            extreme[3] += combos[k][2 * PAD][flip];
        }
    for (int k = 0; k < 4; k++) assert_true(extreme[k] > 10);
    /* Without augmentation the image comes through unchanged. */
    o.augment = 0;
    ld = loader_create(&ds, &o);
    assert_non_null(ld);
    loader_start_epoch(ld, 0);
    const batch *b = loader_next(ld);
    assert_non_null(b);
    assert_true(is_shifted_copy(b->x, ds.pixels, C, H, W, 0, 0, 0));
    loader_free(ld);
    dataset_free(&ds);
}

/* All batches of `epochs` epochs, concatenated (x then labels per batch). */
static size_t collect(const dataset *ds, const loader_options *o, int first_epoch, int epochs, float *xs,
                      int32_t *ls) {
    loader *ld = loader_create(ds, o);
    assert_non_null(ld);
    size_t sample = (size_t)ds->c * ds->h * ds->w, count = 0;
    for (int e = first_epoch; e < first_epoch + epochs; e++) {
        loader_start_epoch(ld, e);
        const batch *b;
        while ((b = loader_next(ld)) != NULL) {
            if (b->u8) /* bytes: the floats the device would make of them */
                backend_cpu()->normalize_u8(b->n, b->c, b->hw, b->u8, b->lut, xs + count * sample);
            else
                memcpy(xs + count * sample, b->x, b->n * sample * sizeof(float));
            memcpy(ls + count, b->labels, b->n * sizeof(int32_t));
            count += b->n;
        }
    }
    loader_free(ld);
    return count;
}

static void test_augment_reproducible(void **state) {
    (void)state;
    enum { N = 96, C = 3, H = 6, W = 7 };
    size_t sample = C * H * W;
    dataset ds = make_dataset(N, C, H, W, 11);
    float *xa = malloc(2 * N * sample * sizeof(float)), *xb = malloc(2 * N * sample * sizeof(float));
    int32_t *la = malloc(2 * N * sizeof(int32_t)), *lb = malloc(2 * N * sizeof(int32_t));
    loader_options o = plain_options(8, 1, 2);
    o.augment = 1;
    o.pad = 2;
    o.mean[1] = 0.3f;
    o.std[2] = 0.7f;
    o.workers = 1;
    o.prefetch = 1;
    size_t na = collect(&ds, &o, 0, 2, xa, la);
    o.workers = 3;
    o.prefetch = 4;
    size_t nb = collect(&ds, &o, 0, 2, xb, lb);
    assert_int_equal(na, 2 * (N / 2));
    assert_int_equal(na, nb);
    assert_memory_equal(la, lb, na * sizeof(int32_t));
    assert_memory_equal(xa, xb, na * sample * sizeof(float));
    /* Epoch 1 alone reproduces the second half. */
    nb = collect(&ds, &o, 1, 1, xb, lb);
    assert_int_equal(nb, N / 2);
    assert_memory_equal(xb, xa + nb * sample, nb * sample * sizeof(float));
    /* In natural order the same samples come in both epochs, augmented differently. */
    o.shuffle = 0;
    na = collect(&ds, &o, 0, 2, xa, la);
    assert_memory_equal(la, la + na / 2, na / 2 * sizeof(int32_t));
    assert_memory_not_equal(xa, xa + (na / 2) * sample, na / 2 * sample * sizeof(float));
    /* Another seed, other augmentations of the same samples. */
    o.seed = 99;
    nb = collect(&ds, &o, 0, 1, xb, lb);
    assert_memory_equal(la, lb, nb * sizeof(int32_t));
    assert_memory_not_equal(xa, xb, nb * sample * sizeof(float));
    /* Identical images: rank 0 and rank 1 at the same positions must still
     * draw different augmentations (the rank is part of the RNG seed). */
    memset(ds.pixels, 200, (size_t)N * sample);
    o.rank = 0;
    na = collect(&ds, &o, 0, 1, xa, la);
    o.rank = 1;
    nb = collect(&ds, &o, 0, 1, xb, lb);
    assert_int_equal(na, nb);
    assert_memory_not_equal(xa, xb, na * sample * sizeof(float));
    free(xa);
    free(xb);
    free(la);
    free(lb);
    dataset_free(&ds);
}

/* uint8 batches (data.batch_dtype = uint8), normalised as the device does,
 * are the float batches bit for bit: pad crop and resized crop, augmented
 * and not, odd mean and std. */
static void test_u8_batches_equal_float(void **state) {
    (void)state;
    enum { N = 40, C = 3, H = 9, W = 7 };
    size_t sample = C * H * W;
    dataset ds = make_dataset(N, C, H, W, 5);
    float *xa = malloc(N * sample * sizeof(float)), *xb = malloc(N * sample * sizeof(float));
    int32_t *la = malloc(N * sizeof(int32_t)), *lb = malloc(N * sizeof(int32_t));
    for (int v = 0; v < 4; v++) {
        loader_options o = plain_options(8, 1, 2);
        o.augment = v & 1;
        o.crop = v & 2 ? LOADER_CROP_RESIZED : LOADER_CROP_PAD;
        o.min_scale = 0.3f;
        o.pad = 2;
        o.mean[0] = 0.45f;
        o.std[1] = 0.3f;
        size_t na = collect(&ds, &o, 0, 1, xa, la);
        o.u8 = 1;
        size_t nb = collect(&ds, &o, 0, 1, xb, lb);
        assert_int_equal(na, nb);
        assert_memory_equal(la, lb, na * sizeof(int32_t));
        assert_memory_equal(xa, xb, na * sample * sizeof(float));
    }
    free(xa);
    free(xb);
    free(la);
    free(lb);
    dataset_free(&ds);
}

/* Loader threads run on the process's CPUs even when the thread creating
 * them was pinned to one (as OpenMP pins it under OMP_PROC_BIND): created
 * from a thread bound to one CPU, each binds itself to all of them. */
static void test_loader_threads_on_process_cpus(void **state) {
    (void)state;
    cpus_mask all, one;
    int n = cpus_process(&all);
    if (n < 2) {
        print_message("this process may run on one CPU: nothing to tell apart\n");
        skip();
    }
    memset(&one, 0, sizeof one);
    for (int c = 0; c < CPUS_MAX; c++)
        if ((all.bits[c / 8] >> (c % 8)) & 1) {
            one.bits[c / 8] = (unsigned char)(1u << (c % 8));
            break;
        }
    assert_int_equal(cpus_bind_thread(&one), 0);
    assert_int_equal(cpus_allowed(NULL), 1);
    dataset ds = make_dataset(32, 1, 4, 4, 3);
    loader_options o = plain_options(8, 0, 1);
    o.workers = 3;
    loader *ld = loader_create(&ds, &o);
    assert_non_null(ld);
    char list[64], want[64];
    cpus_format(&all, want, sizeof want);
    assert_int_equal(loader_thread_cpus(ld, list, sizeof list), n);
    assert_string_equal(list, want);
    loader_free(ld);
    assert_int_equal(cpus_bind_thread(&all), 0);
    dataset_free(&ds);
}

/* On a GPU the loader threads run on the CPUs of the GPU's NUMA node among
 * the process's (input_loader_cpus): a made-up backend with a PCI device and
 * a made-up sysfs tree whose local_cpulist says, in turn, one of the
 * process's CPUs (narrowed, and the loader's threads bind there), all of
 * them and more (unchanged), CPUs the process may not use (unchanged, said
 * as outside), and nothing (unchanged). The CPU backend has no PCI device. */
static const char *fake_bus = "0000:1B:00.0";
static int fake_pci_bus_id(char *buf, size_t len) {
    snprintf(buf, len, "%s", fake_bus);
    return 1;
}

static void write_cpulist(const char *root, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/bus/pci/devices/0000:1b:00.0/local_cpulist", root);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_loader_threads_on_gpu_numa_node(void **state) {
    (void)state;
    cpus_mask all, m;
    int n = cpus_process(&all);
    if (n < 2) {
        print_message("this process may run on one CPU: nothing to narrow\n");
        skip();
    }
    int first = -1, last = -1;
    for (int c = 0; c < CPUS_MAX; c++)
        if ((all.bits[c / 8] >> (c % 8)) & 1) {
            if (first < 0) first = c;
            last = c;
        }
    char root[] = "/tmp/cnt_numa_XXXXXX", cmd[300], text[64], why[512], list[64];
    assert_non_null(mkdtemp(root));
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/bus/pci/devices/0000:1b:00.0'", root);
    assert_int_equal(system(cmd), 0);
    backend gpu = *backend_cpu();
    gpu.pci_bus_id = fake_pci_bus_id;
    int outside = -1;

    snprintf(text, sizeof text, "%d\n", last); /* one of the process's CPUs */
    write_cpulist(root, text);
    assert_int_equal(input_loader_cpus(&gpu, root, &m, &outside, why, sizeof why), 1);
    assert_int_equal(outside, 0);
    assert_int_equal(cpus_count(&m), 1);
    assert_true((m.bits[last / 8] >> (last % 8)) & 1);
    assert_non_null(strstr(why, "NUMA node of its GPU (PCI 0000:1B:00.0)"));
    dataset ds = make_dataset(32, 1, 4, 4, 3);
    loader_options o = plain_options(8, 0, 1);
    o.workers = 2;
    o.have_cpus = 1;
    o.cpus = m;
    loader *ld = loader_create(&ds, &o);
    assert_non_null(ld);
    assert_int_equal(loader_thread_cpus(ld, list, sizeof list), 1);
    snprintf(text, sizeof text, "%d", last);
    assert_string_equal(list, text);
    loader_free(ld);
    dataset_free(&ds);

    snprintf(text, sizeof text, "%d-%d\n", first, last + 8); /* all of them and more */
    write_cpulist(root, text);
    assert_int_equal(input_loader_cpus(&gpu, root, &m, &outside, why, sizeof why), 0);
    assert_int_equal(outside, 0);
    assert_non_null(strstr(why, "on the NUMA node of its GPU"));

    snprintf(text, sizeof text, "%d\n", CPUS_MAX - 1); /* none the process may use */
    write_cpulist(root, text);
    assert_int_equal(input_loader_cpus(&gpu, root, &m, &outside, why, sizeof why), 0);
    assert_int_equal(outside, 1);
    assert_non_null(strstr(why, "none of them on the NUMA node"));

    write_cpulist(root, ""); /* no NUMA information */
    assert_int_equal(input_loader_cpus(&gpu, root, &m, &outside, why, sizeof why), 0);
    assert_int_equal(outside, 0);
    assert_non_null(strstr(why, "no NUMA node known"));

    assert_int_equal(input_loader_cpus(backend_cpu(), root, &m, &outside, why, sizeof why), 0);
    assert_true(strncmp(why, "the process's CPUs ", 19) == 0 && !strstr(why, "NUMA"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

static void test_restart_and_free_mid_epoch(void **state) {
    (void)state;
    alarm(20); /* a hang ends the process with SIGALRM: a failure, never a pass */
    enum { N = 400, C = 1, H = 8, W = 8 };
    size_t sample = C * H * W;
    dataset ds = make_dataset(N, C, H, W, 21);
    loader_options o = plain_options(5, 0, 1);
    o.augment = 1;
    o.pad = 1;
    o.workers = 3;
    o.prefetch = 3;
    float *ref = malloc(N * sample * sizeof(float));
    int32_t *ref_l = malloc(N * sizeof(int32_t));
    size_t nref = collect(&ds, &o, 1, 1, ref, ref_l);
    assert_int_equal(nref, N);

    loader *ld = loader_create(&ds, &o);
    assert_non_null(ld);
    for (int round = 0; round < 50; round++) {
        loader_start_epoch(ld, 0);
        for (int k = 0; k < round % 7; k++) assert_non_null(loader_next(ld));
        if (round % 3 == 0) usleep(200);
        loader_start_epoch(ld, 1);
        if (round % 5 == 0) loader_start_epoch(ld, 1);
        size_t count = 0;
        const batch *b;
        while ((b = loader_next(ld)) != NULL) {
            assert_memory_equal(b->labels, ref_l + count, b->n * sizeof(int32_t));
            assert_memory_equal(b->x, ref + count * sample, b->n * sample * sizeof(float));
            count += b->n;
        }
        assert_int_equal(count, N);
    }
    loader_free(ld);

    for (int round = 0; round < 30; round++) {
        ld = loader_create(&ds, &o);
        assert_non_null(ld);
        if (round % 3 == 0) {
            assert_null(loader_next(ld)); /* freed before any epoch */
        } else {
            loader_start_epoch(ld, round);
            for (int k = 0; k < round % 4; k++) assert_non_null(loader_next(ld));
        }
        loader_free(ld);
    }
    alarm(0);
    free(ref);
    free(ref_l);
    dataset_free(&ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_reads_raw_and_gzip),
        cmocka_unit_test(test_idx_errors),
        cmocka_unit_test(test_idx_not_regular),
        cmocka_unit_test(test_idx_gz_claims_more_than_it_holds),
        cmocka_unit_test(test_mnist_dir),
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_dataset_helpers),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_normalisation),
        cmocka_unit_test(test_crop_flip),
        cmocka_unit_test(test_augment_reproducible),
        cmocka_unit_test(test_u8_batches_equal_float),
        cmocka_unit_test(test_loader_threads_on_process_cpus),
        cmocka_unit_test(test_loader_threads_on_gpu_numa_node),
        cmocka_unit_test(test_restart_and_free_mid_epoch),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
