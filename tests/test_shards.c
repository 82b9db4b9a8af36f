/*
 * tests/test_shards.c - shard sets (data/shards.h) and the loader's block
 * order (data/loader.h): the round trip from an image folder, byte for byte;
 * the folder's batches from a set in the folder's order; every refusal of a
 * damaged set (index magic, size, checksum; a shard missing, truncated, from
 * another set; an image whose bytes changed, skipped by the loader); the
 * writer's refusals; read-ahead landing in the page cache; the block order's
 * permutation and what each rank reads.
 *
 * Every test builds its own tree under a fresh mkdtemp directory. Images are
 * 4x4 PNGs whose pixels encode their id (red = id % 256, green = id / 256).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stb/stb_image_write.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/rng.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/shards.h"
#include "tests/support/testutil.h"

static char tmp_root[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/cnt_shards_XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tu_remove_tree(tmp_root);
    return 0;
}

#define path_of(...) tu_path_in(tmp_root, __VA_ARGS__)

#define assert_contains tu_assert_contains

/* A tree of n 4x4 RGB PNGs in `classes` classes (c0, c1, ...), image i in
 * class i % classes, its pixels encoding i; returns its root (static). */
static const char *make_tree(const char *name, int n, int classes) {
    uint8_t p[4 * 4 * 3];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 16; k++) {
            p[k * 3] = (uint8_t)(i % 256);
            p[k * 3 + 1] = (uint8_t)(i / 256);
            p[k * 3 + 2] = (uint8_t)(k * 13);
        }
        assert_true(stbi_write_png(path_of("%s/c%d/img%05d.png", name, i % classes, i), 4, 4, 3, p, 12));
    }
    static char root[512];
    snprintf(root, sizeof root, "%s/%s", tmp_root, name);
    return root;
}

/* Packs tree `src` into tmp_root/<set> (path returned, static). */
static const char *pack(const char *src, const char *set, uint64_t shard_bytes, int shuffle) {
    static char out[512];
    snprintf(out, sizeof out, "%s/%s", tmp_root, set);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, src), CNT_OK);
    shards_write_options o = {.shard_bytes = shard_bytes, .shuffle = shuffle, .seed = 3, .check = 1};
    shards_write_stats st;
    if (shards_write(&ds, out, &o, &st) != CNT_OK) {
        print_error("%s\n", cnt_err_msg());
        fail();
    }
    assert_int_equal(st.images, ds.n);
    assert_int_equal(st.left_out, 0);
    dataset_free(&ds);
    return out;
}

static uint8_t *read_file(const char *path, size_t *len) {
    uint8_t *b = (uint8_t *)file_read_all(path, NULL, 1 << 30, len);
    assert_non_null(b);
    return b;
}

/* Changes byte `at` of path (negative: from the end), or cuts the file to `cut` bytes (>= 0). */
static void damage(const char *path, long at, long cut) {
    if (cut >= 0) {
        assert_int_equal(truncate(path, cut), 0);
        return;
    }
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    off_t end = lseek(fd, 0, SEEK_END);
    off_t off = at >= 0 ? at : end + at;
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

/* The id image i of a set encodes, from its name ("c<k>/img<id>.png"). */
static int id_of(const dataset *ds, int i) { return atoi(strstr(ds->names + ds->name_off[i], "img") + 3); }

/* Every image of the set is its file's bytes, under its name and label. */
static void assert_same_images(const dataset *set, const dataset *folder) {
    assert_int_equal(set->n, folder->n);
    assert_int_equal(set->classes, folder->classes);
    for (int k = 0; k < folder->classes; k++) {
        char name[256];
        snprintf(name, sizeof name, "%s", dataset_class_name(folder, k));
        assert_string_equal(dataset_class_name(set, k), name);
    }
    for (int i = 0; i < set->n; i++) {
        const char *rel = set->names + set->name_off[i];
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", folder->root, rel);
        size_t flen, slen;
        uint8_t *f = read_file(path, &flen), *s;
        char name[1024];
        assert_int_equal(shards_read(set, i, &s, &slen, name, sizeof name), CNT_OK);
        assert_int_equal(slen, flen);
        assert_memory_equal(s, f, flen);
        assert_int_equal(set->labels[i], atoi(rel + 1) /* "c<k>/..." */);
        free(f);
        free(s);
    }
}

/* ------------------------------------------------------------------ tests */

static void test_round_trip(void **state) {
    (void)state;
    const char *src = make_tree("src", 40, 3);
    /* 64-byte shards: a shard per image or two, so records span many files. */
    const char *out = pack(src, "set", 64, 0);
    dataset folder, set;
    assert_int_equal(dataset_list_imagefolder(&folder, src), CNT_OK);
    uint64_t id = 0;
    assert_int_equal(dataset_open_shards(&set, out, &id), CNT_OK);
    assert_true(id != 0);
    assert_true(shards_count(&set) > 10);
    assert_string_equal(set.root, out);
    assert_same_images(&set, &folder);
    /* The folder's order: the same names in the same places; decoding gives the same pixels. */
    dataset_set_shape(&folder, 3, 4);
    dataset_set_shape(&set, 3, 4);
    for (int i = 0; i < set.n; i++) {
        assert_string_equal(set.names + set.name_off[i], folder.names + folder.name_off[i]);
        uint8_t *a, *b;
        int w, h, w2, h2;
        assert_int_equal(dataset_decode(&set, i, &a, &w, &h), CNT_OK);
        assert_int_equal(dataset_decode(&folder, i, &b, &w2, &h2), CNT_OK);
        assert_int_equal(w, 4);
        assert_memory_equal(a, b, 48);
        assert_int_equal(a[0], id_of(&set, i) % 256);
        free(a);
        free(b);
    }
    assert_int_equal(dataset_same_classes(&set, &folder), CNT_OK);
    dataset_free(&set);
    dataset_free(&folder);
}

static void test_shuffled_order(void **state) {
    (void)state;
    const char *src = make_tree("src", 60, 4);
    const char *out = pack(src, "set", 1 << 20, 1);
    dataset folder, set;
    assert_int_equal(dataset_list_imagefolder(&folder, src), CNT_OK);
    assert_int_equal(dataset_open_shards(&set, out, NULL), CNT_OK);
    assert_int_equal(shards_count(&set), 1);
    assert_same_images(&set, &folder); /* a permutation: each name once with its own bytes */
    int moved = 0, seen[60] = {0};
    for (int i = 0; i < set.n; i++) {
        int id = id_of(&set, i);
        seen[id]++;
        moved += id != i;
    }
    for (int i = 0; i < 60; i++) assert_int_equal(seen[i], 1);
    assert_true(moved > 40);
    dataset_free(&set);
    dataset_free(&folder);
}

static loader_options options(int rank, int world, int order) {
    loader_options o = {.batch = 4, .rank = rank, .world = world, .seed = 11, .shuffle = 1, .drop_last = 1,
                        .augment = 1, .crop = LOADER_CROP_RESIZED, .min_scale = 0.08f, .jpeg_scaling = 1,
                        .mean = {0.5f, 0.4f, 0.3f}, .std = {0.2f, 0.25f, 0.3f}, .workers = 2, .prefetch = 2,
                        .read_order = order, .block_bytes = 200, .window_blocks = 2};
    return o;
}

/* With data.read_order = random a set in the folder's order gives the folder's batches, bit for bit. */
static void test_same_batches_as_folder(void **state) {
    (void)state;
    const char *src = make_tree("src", 30, 3);
    const char *out = pack(src, "set", 256, 0);
    dataset folder, set;
    assert_int_equal(dataset_list_imagefolder(&folder, src), CNT_OK);
    assert_int_equal(dataset_open_shards(&set, out, NULL), CNT_OK);
    dataset_set_shape(&folder, 3, 8);
    dataset_set_shape(&set, 3, 8);
    loader_options o = options(1, 2, LOADER_ORDER_RANDOM);
    loader *a = loader_create(&folder, &o), *b = loader_create(&set, &o);
    assert_non_null(a);
    assert_non_null(b);
    for (int epoch = 0; epoch < 2; epoch++) {
        loader_start_epoch(a, epoch);
        loader_start_epoch(b, epoch);
        const batch *x, *y;
        int steps = 0;
        while ((x = loader_next(a)) != NULL) {
            assert_non_null(y = loader_next(b));
            assert_int_equal(x->n, y->n);
            assert_memory_equal(x->labels, y->labels, (size_t)x->n * sizeof(int32_t));
            assert_memory_equal(x->x, y->x, (size_t)x->n * 3 * 64 * sizeof(float));
            steps++;
        }
        assert_null(loader_next(b));
        assert_int_equal(steps, 3);
    }
    loader_free(a);
    loader_free(b);
    dataset_free(&set);
    dataset_free(&folder);
}

static void expect_open_error(const char *dir, const char *what) {
    dataset ds;
    assert_int_equal(dataset_open_shards(&ds, dir, NULL), CNT_ERR);
    assert_contains(cnt_err_msg(), what);
    assert_null(ds.recs);
}

/* A fresh copy of set `from` named `to` (path returned, static). */
static const char *copy_set(const char *from, const char *to) {
    static char dst[512];
    snprintf(dst, sizeof dst, "%s/%s", tmp_root, to);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, from, dst);
    assert_int_equal(system(cmd), 0);
    return dst;
}

static void test_damaged_sets_refused(void **state) {
    (void)state;
    const char *src = make_tree("src", 24, 2);
    char good[512], other[512], path[1024];
    snprintf(good, sizeof good, "%s", pack(src, "good", 300, 1));
    snprintf(other, sizeof other, "%s", pack(src, "other", 300, 1));
    const char *d;

    d = copy_set(good, "magic");
    snprintf(path, sizeof path, "%s/index.cnts", d);
    damage(path, 0, -1);
    expect_open_error(d, "not a shard index (bad magic)");
    assert_contains(cnt_err_msg(), path);

    d = copy_set(good, "short");
    snprintf(path, sizeof path, "%s/index.cnts", d);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    damage(path, 0, st.st_size - 10);
    expect_open_error(d, "sizes do not add up");

    d = copy_set(good, "crc");
    snprintf(path, sizeof path, "%s/index.cnts", d);
    damage(path, 100, -1); /* inside the listing */
    expect_open_error(d, "checksum mismatch");

    d = copy_set(good, "missing");
    snprintf(path, sizeof path, "%s/shard-00001.cnts", d);
    assert_int_equal(unlink(path), 0);
    expect_open_error(d, path);
    assert_contains(cnt_err_msg(), "No such file");

    d = copy_set(good, "truncated");
    snprintf(path, sizeof path, "%s/shard-00001.cnts", d);
    assert_int_equal(stat(path, &st), 0);
    damage(path, 0, st.st_size - 1);
    expect_open_error(d, "the index says");

    d = copy_set(good, "foreign");
    char from[1024];
    snprintf(path, sizeof path, "%s/shard-00000.cnts", d);
    snprintf(from, sizeof from, "%s/shard-00000.cnts", other);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, path);
    assert_int_equal(system(cmd), 0);
    expect_open_error(d, "belongs to another shard set");

    d = copy_set(good, "fifo");
    snprintf(path, sizeof path, "%s/shard-00000.cnts", d);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    expect_open_error(d, "FIFO");

    expect_open_error(path_of("nowhere"), "No such file");
}

/* A changed byte inside an image: opening succeeds (images are not read),
 * the read names the image and the checksum, and the loader skips it. */
static void test_corrupt_image_skipped(void **state) {
    (void)state;
    const char *src = make_tree("src", 16, 2);
    const char *out = pack(src, "set", 1 << 20, 0);
    dataset set;
    assert_int_equal(dataset_open_shards(&set, out, NULL), CNT_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/shard-00000.cnts", out);
    damage(path, (long)(set.recs[5].off + set.recs[5].len / 2), -1);
    uint8_t *b;
    size_t len;
    char name[1024];
    assert_int_equal(shards_read(&set, 4, &b, &len, name, sizeof name), CNT_OK);
    free(b);
    assert_int_equal(shards_read(&set, 5, &b, &len, name, sizeof name), CNT_ERR);
    assert_contains(cnt_err_msg(), "checksum mismatch");
    assert_contains(cnt_err_msg(), "/shard-00000.cnts:");
    assert_contains(cnt_err_msg(), set.names + set.name_off[5]);
    /* Evaluation leaves it out: 15 of 16 images. */
    dataset_set_shape(&set, 3, 4);
    loader_options o = options(0, 1, LOADER_ORDER_RANDOM);
    o.shuffle = o.drop_last = o.augment = 0;
    loader *ld = loader_create(&set, &o);
    loader_start_epoch(ld, 0);
    int seen = 0;
    const batch *x;
    while ((x = loader_next(ld)) != NULL) seen += x->n;
    assert_int_equal(seen, 15);
    assert_int_equal(loader_skipped(ld), 1);
    loader_free(ld);
    dataset_free(&set);
}

static void test_writer_refusals(void **state) {
    (void)state;
    const char *src = make_tree("src", 6, 2);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, src), CNT_OK);
    shards_write_options o = {.shard_bytes = 1 << 20, .shuffle = 1, .seed = 1, .check = 1};
    shards_write_stats st;
    assert_int_equal(shards_write(&ds, path_of("a/b/set"), &o, &st), CNT_OK); /* parents made */
    assert_int_equal(shards_write(&ds, path_of("a/b/set"), &o, &st), CNT_ERR);
    assert_contains(cnt_err_msg(), "already holds a shard set");
    FILE *f = fopen(path_of("busy/notes.txt"), "w");
    fclose(f);
    assert_int_equal(shards_write(&ds, path_of("busy"), &o, &st), CNT_ERR);
    assert_contains(cnt_err_msg(), "is not empty (it holds notes.txt)");
    /* An interrupted run's leftovers are replaced. */
    f = fopen(path_of("again/shard-00007.cnts.tmp"), "w");
    fclose(f);
    assert_int_equal(shards_write(&ds, path_of("again"), &o, &st), CNT_OK);
    assert_int_equal(access(path_of("again/shard-00007.cnts.tmp"), F_OK), -1);
    dataset_free(&ds);

    /* An image that does not decode is left out (named), or copied with check = 0. */
    f = fopen(path_of("src/c1/broken.png"), "w");
    fputs("not a png", f);
    fclose(f);
    assert_int_equal(dataset_list_imagefolder(&ds, src), CNT_OK);
    assert_int_equal(shards_write(&ds, path_of("checked"), &o, &st), CNT_OK);
    assert_int_equal(st.images, 6);
    assert_int_equal(st.left_out, 1);
    o.check = 0;
    assert_int_equal(shards_write(&ds, path_of("unchecked"), &o, &st), CNT_OK);
    assert_int_equal(st.images, 7);
    /* A source file gone since the listing fails the write, and leaves nothing. */
    assert_int_equal(unlink(path_of("src/c0/img00000.png")), 0);
    assert_int_equal(shards_write(&ds, path_of("gone"), &o, &st), CNT_ERR);
    assert_contains(cnt_err_msg(), "img00000.png");
    assert_int_equal(access(path_of("gone/index.cnts"), F_OK), -1);
    assert_int_equal(access(path_of("gone/shard-00000.cnts"), F_OK), -1);
    assert_int_equal(access(path_of("gone/shard-00000.cnts.tmp"), F_OK), -1);
    dataset_free(&ds);
}

/* Pages of [off, off + len) of fd in the page cache. */
static long resident(int fd, off_t off, size_t len) {
    long page = sysconf(_SC_PAGESIZE);
    off_t a = off / page * page;
    size_t n = (size_t)(off + (off_t)len - a);
    void *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, a);
    assert_true(m != MAP_FAILED);
    size_t pages = (n + (size_t)page - 1) / (size_t)page;
    unsigned char *v = malloc(pages);
    assert_int_equal(mincore(m, n, v), 0);
    long in = 0;
    for (size_t i = 0; i < pages; i++) in += v[i] & 1;
    free(v);
    munmap(m, n);
    return in;
}

/* A set of n side x side noise PNGs (seeded by seed) in the folder's
 * order, one shard, opened into *set, the shard open in *fd with its pages
 * dropped from the cache. 0 when this file system keeps them anyway (the
 * caller skips: the test cannot see read-ahead there). */
static int cold_noise_set(int n, int side, uint64_t seed, dataset *set, int *fd) {
    rng r;
    rng_seed(&r, seed, seed);
    uint8_t *p = malloc((size_t)side * side * 3);
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < (size_t)side * side * 3; k++) p[k] = (uint8_t)rng_below(&r, 256);
        assert_true(stbi_write_png(path_of("big/c%d/%02d.png", i % 2, i), side, side, 3, p, side * 3));
    }
    free(p);
    char src[512];
    snprintf(src, sizeof src, "%s/big", tmp_root);
    const char *out = pack(src, "set", 1 << 30, 0);
    assert_int_equal(dataset_open_shards(set, out, NULL), CNT_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/shard-00000.cnts", out);
    *fd = open(path, O_RDONLY);
    assert_true(*fd >= 0);
    fdatasync(*fd);
    posix_fadvise(*fd, 0, 0, POSIX_FADV_DONTNEED);
    const shard_rec *last = &set->recs[n - 1];
    if (resident(*fd, 0, (size_t)(last->off + last->len)) <= 2) return 1;
    close(*fd);
    dataset_free(set);
    return 0;
}

/* shards_will_need puts the asked images in the page cache (on a file
 * system whose cache can be dropped, as ext4 here; skipped elsewhere). */
static void test_read_ahead(void **state) {
    (void)state;
    /* Large enough images for whole pages: 64x64 noise PNGs, about 12 KB each. */
    dataset set;
    int fd;
    if (!cold_noise_set(24, 64, 9, &set, &fd)) skip();
    const shard_rec *a = &set.recs[8], *b = &set.recs[15];
    size_t span = (size_t)(b->off + b->len - a->off);
    shards_will_need(&set, 8, 16);
    long page = sysconf(_SC_PAGESIZE);
    long want = (long)(span / (size_t)page) - 1;
    for (int t = 0; t < 200 && resident(fd, (off_t)a->off, span) < want; t++) usleep(10000);
    assert_true(resident(fd, (off_t)a->off, span) >= want);
    close(fd);
    dataset_free(&set);
}

/* In block order the loader reads ahead whole windows: once the first
 * batch is out, the images of the windows through the one after the
 * claimed steps' (not yet read by any worker) are in the page cache. Each
 * image is a block, windows are 10 images; the worker has claimed steps 0
 * and 1 (positions 0-7), so windows 0-2 are asked for. Images of about
 * 190 KB: a worker's read of one may pull the start of its neighbour into
 * the cache (the kernel's own read-ahead), not a whole unread image (with
 * the next window left out, this test fails). */
static void test_blocks_read_ahead(void **state) {
    (void)state;
    dataset set;
    int fd;
    if (!cold_noise_set(40, 256, 5, &set, &fd)) skip();
    dataset_set_shape(&set, 3, 8);
    loader_options o = options(0, 1, LOADER_ORDER_BLOCKS);
    o.block_bytes = 1; /* each image a block */
    o.window_blocks = 10;
    o.workers = 1;
    o.prefetch = 1;
    loader *ld = loader_create(&set, &o);
    loader_start_epoch(ld, 0);
    assert_non_null(loader_next(ld));
    /* The epoch's order, as the loader drew it. */
    int bstart[41], perm[40], order[40], scratch[40];
    for (int i = 0; i <= 40; i++) bstart[i] = i;
    rng r;
    rng_seed(&r, o.seed, 0);
    loader_blocks_permutation(&r, bstart, 40, 1, 10, 1, perm, order, scratch);
    long page = sysconf(_SC_PAGESIZE), in = 0, want = 0;
    for (int pos = 12; pos < 30; pos++) {
        const shard_rec *a = &set.recs[perm[pos]];
        want += (long)(a->len / (uint32_t)page) - 1; /* the pages wholly inside it */
        long got = 0;
        for (int t = 0; t < 200 && (got = resident(fd, (off_t)a->off, a->len)) < (long)(a->len / (uint32_t)page) - 1;
             t++)
            usleep(10000);
        in += got;
    }
    assert_true(want > 8);
    assert_true(in >= want);
    loader_free(ld);
    close(fd);
    dataset_free(&set);
}

/* The block order: a permutation; each rank's run is a contiguous stretch of
 * the permuted blocks, each window of it the same stretch's images; without
 * shuffling, rank q's run is images q x run onwards, in order. */
static void test_blocks_permutation(void **state) {
    (void)state;
    int bstart[] = {0, 7, 9, 20, 21, 33, 40, 52, 53, 60, 71};
    int m = 10, n = 71, world = 3, window = 9, run = n / world;
    int perm[71], order[10], scratch[71], seq[71];
    rng r;
    rng_seed(&r, 4, 1);
    int differs = 0, first[71];
    for (int epoch = 0; epoch < 3; epoch++) {
        loader_blocks_permutation(&r, bstart, m, world, window, 1, perm, order, scratch);
        int seen[71] = {0};
        for (int i = 0; i < n; i++) seen[perm[i]]++;
        for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
        int at = 0; /* the permuted blocks, back to back */
        for (int j = 0; j < m; j++)
            for (int i = bstart[order[j]]; i < bstart[order[j] + 1]; i++) seq[at++] = i;
        for (int q = 0; q < world; q++) {
            for (int w0 = 0; w0 < run; w0 += window) {
                int len = run - w0 < window ? run - w0 : window;
                int want[71] = {0}, got[71] = {0};
                for (int k = 0; k < len; k++) {
                    want[seq[q * run + w0 + k]]++;
                    got[perm[q + (w0 + k) * world]]++;
                }
                assert_memory_equal(want, got, sizeof want);
            }
        }
        for (int i = world * run; i < n; i++) assert_int_equal(perm[i], seq[i]);
        if (epoch == 0) memcpy(first, perm, sizeof perm);
        else differs |= memcmp(first, perm, sizeof perm) != 0;
    }
    assert_true(differs);
    loader_blocks_permutation(&r, bstart, m, world, window, 0, perm, order, scratch);
    for (int q = 0; q < world; q++)
        for (int pos = 0; pos < run; pos++) assert_int_equal(perm[q + pos * world], q * run + pos);
    for (int i = world * run; i < n; i++) assert_int_equal(perm[i], i);
}

/* The loader in block order over a set: two ranks together see each image
 * once per epoch (one step's remainder dropped), each from a few blocks per
 * window; evaluation reads each rank's run in order. */
static void test_blocks_loader(void **state) {
    (void)state;
    const char *src = make_tree("src", 50, 5);
    const char *out = pack(src, "set", 1 << 20, 0);
    dataset set;
    assert_int_equal(dataset_open_shards(&set, out, NULL), CNT_OK);
    dataset_set_shape(&set, 3, 4);
    int seen[2][50];
    memset(seen, 0, sizeof seen);
    for (int q = 0; q < 2; q++) {
        loader_options o = options(q, 2, LOADER_ORDER_BLOCKS);
        o.crop = LOADER_CROP_PAD;
        o.augment = 0;
        o.mean[0] = o.mean[1] = o.mean[2] = 0;
        o.std[0] = o.std[1] = o.std[2] = 1;
        loader *ld = loader_create(&set, &o);
        assert_non_null(ld);
        for (int epoch = 0; epoch < 2; epoch++) {
            loader_start_epoch(ld, epoch);
            const batch *x;
            while ((x = loader_next(ld)) != NULL)
                for (int i = 0; i < x->n; i++) {
                    const float *px = x->x + (size_t)i * 48;
                    int id = (int)lroundf(px[0] * 255) + 256 * (int)lroundf(px[16] * 255);
                    assert_true(id >= 0 && id < 50);
                    seen[epoch][id]++;
                }
        }
        loader_free(ld);
    }
    for (int epoch = 0; epoch < 2; epoch++) {
        int total = 0;
        for (int i = 0; i < 50; i++) {
            assert_true(seen[epoch][i] <= 1);
            total += seen[epoch][i];
        }
        assert_int_equal(total, 48); /* 2 ranks x 6 steps x 4 */
    }
    /* Evaluation: rank 1 of 2 reads the set's images 25..49 in order. */
    loader_options o = options(1, 2, LOADER_ORDER_BLOCKS);
    o.shuffle = o.drop_last = o.augment = 0;
    o.crop = LOADER_CROP_PAD;
    o.mean[0] = o.mean[1] = o.mean[2] = 0;
    o.std[0] = o.std[1] = o.std[2] = 1;
    loader *ld = loader_create(&set, &o);
    loader_start_epoch(ld, 0);
    const batch *x;
    int next = 25;
    while ((x = loader_next(ld)) != NULL)
        for (int i = 0; i < x->n; i++) assert_int_equal((int)lroundf(x->x[(size_t)i * 48] * 255), id_of(&set, next++));
    assert_int_equal(next, 50);
    loader_free(ld);
    /* Only shard sets read in blocks. */
    dataset folder;
    assert_int_equal(dataset_list_imagefolder(&folder, src), CNT_OK);
    dataset_set_shape(&folder, 3, 4);
    assert_null(loader_create(&folder, &o));
    assert_contains(cnt_err_msg(), "needs a shard set");
    dataset_free(&folder);
    dataset_free(&set);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shuffled_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_batches_as_folder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_sets_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_image_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blocks_read_ahead, setup, teardown),
        cmocka_unit_test(test_blocks_permutation),
        cmocka_unit_test_setup_teardown(test_blocks_loader, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
