/*
 * tests/test_imagefolder.c - image folders: listing, errors, decoding (PNG,
 * JPEG, grey, odd sizes), normalised values, the two crop styles, corrupt
 * files, FIFOs and devices among the images (left out of the listing with a
 * warning, or skipped as unreadable when they appear after it), shards and
 * reproducible augmentation.
 *
 * Every test builds its own small tree of images with stb_image_write under
 * a fresh mkdtemp directory, removed afterwards. Images that must be checked
 * value by value are PNG (lossless); sample identity is encoded in the pixels
 * (red = id % 256, green = id / 256) so a batch tells which files it holds.
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
#include <sys/stat.h>
#include <unistd.h>

#include <stb/stb_image_write.h>

#include "common/check.h"
#include "common/rng.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "model/backend.h"
#include "tests/support/testutil.h"

static char tmp_root[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/cnt_imagefolder_XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tu_remove_tree(tmp_root);
    return 0;
}

#define path_of(...) tu_path_in(tmp_root, __VA_ARGS__)

/* A w x h image with c channels whose pixels encode id (red/grey = id % 256,
 * green = id / 256, blue = 7), written as PNG (or JPEG when the name ends in
 * .jpg). */
static void write_id_image(const char *path, int id, int w, int h, int c) {
    uint8_t *p = malloc((size_t)w * h * c);
    for (int k = 0; k < w * h; k++) {
        p[k * c] = (uint8_t)(id % 256);
        if (c == 3) {
            p[k * c + 1] = (uint8_t)(id / 256);
            p[k * c + 2] = 7;
        }
    }
    const char *ext = strrchr(path, '.');
    int ok = strcmp(ext, ".jpg") == 0 ? stbi_write_jpg(path, w, h, c, p, 95) : stbi_write_png(path, w, h, c, p, w * c);
    assert_true(ok);
    free(p);
}

static void write_bytes(const char *path, const char *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

#define assert_contains tu_assert_contains

/* A tree of n images in `classes` classes (named c0, c1, ...), image i in
 * class i % classes, 4x4 RGB PNG encoding id i. */
static const char *make_id_tree(const char *name, int n, int classes) {
    for (int i = 0; i < n; i++) write_id_image(path_of("%s/c%d/img%05d.png", name, i % classes, i), i, 4, 4, 3);
    static char root[512];
    snprintf(root, sizeof root, "%s/%s", tmp_root, name);
    return root;
}

static loader_options plain_options(int batch_size, int rank, int world, int drop_last) {
    loader_options o = {.batch = batch_size, .rank = rank, .world = world, .seed = 5, .shuffle = drop_last,
                        .drop_last = drop_last, .augment = 0, .crop = LOADER_CROP_PAD, .pad = 0, .min_scale = 0.08f,
                        .mean = {0, 0, 0}, .std = {1, 1, 1}, .workers = 2, .prefetch = 3};
    return o;
}

/* The id a normalised (mean 0, std 1) sample encodes. */
static int sample_id(const float *x, int hw) {
    return (int)lroundf(x[0] * 255.0f) + 256 * (int)lroundf(x[hw] * 255.0f);
}

/* ------------------------------------------------------------------ tests */

static void test_listing_sorted_and_filtered(void **state) {
    (void)state;
    /* Classes sorted by name whatever the creation order; files sorted within. */
    write_id_image(path_of("list/zebra/b.png"), 1, 4, 4, 3);
    write_id_image(path_of("list/zebra/a.PNG"), 2, 4, 4, 3);
    write_id_image(path_of("list/ant/x.jpg"), 3, 4, 4, 3);
    write_id_image(path_of("list/moth/m1.png"), 4, 4, 4, 1);
    write_bytes(path_of("list/moth/readme.txt"), "not an image", 12);
    write_id_image(path_of("list/moth/.hidden.png"), 5, 4, 4, 3);
    write_bytes(path_of("list/stray.png"), "x", 1); /* a file at class level is ignored */
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("list")), CNT_OK);
    assert_int_equal(ds.classes, 3);
    assert_int_equal(ds.n, 4);
    assert_null(ds.pixels);
    assert_string_equal(dataset_class_name(&ds, 0), "ant");
    assert_string_equal(dataset_class_name(&ds, 1), "moth");
    assert_string_equal(dataset_class_name(&ds, 2), "zebra");
    static const int want_labels[] = {0, 1, 2, 2};
    static const char *const want_names[] = {"ant/x.jpg", "moth/m1.png", "zebra/a.PNG", "zebra/b.png"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ds.labels[i], want_labels[i]);
        char p[1024];
        dataset_sample_path(&ds, i, p, sizeof p);
        assert_string_equal(p + strlen(p) - strlen(want_names[i]), want_names[i]);
    }

    /* The packed listing comes back identical; damaged bytes are refused. */
    size_t len;
    char *packed = dataset_pack(&ds, &len);
    dataset back;
    assert_int_equal(dataset_unpack(&back, packed, len), CNT_OK);
    assert_int_equal(back.n, ds.n);
    assert_int_equal(back.classes, ds.classes);
    assert_string_equal(back.root, ds.root);
    for (int i = 0; i < ds.n; i++) {
        assert_int_equal(back.labels[i], ds.labels[i]);
        assert_string_equal(back.names + back.name_off[i], ds.names + ds.name_off[i]);
    }
    assert_int_equal(dataset_same_classes(&ds, &back), CNT_OK);
    dataset_free(&back);
    assert_int_equal(dataset_unpack(&back, packed, len - 1), CNT_ERR);
    packed[0] = 'X';
    assert_int_equal(dataset_unpack(&back, packed, len), CNT_ERR);
    free(packed);
    dataset_free(&ds);
}

/* A dangling or looping symbolic link in a class folder (or among the class
 * folders) is left out with a warning; the rest of the tree is listed. */
static void test_listing_skips_broken_links(void **state) {
    (void)state;
    write_id_image(path_of("links/a/1.png"), 1, 4, 4, 3);
    write_id_image(path_of("links/b/2.png"), 2, 4, 4, 3);
    char target[1024]; /* path_of returns one static buffer */
    snprintf(target, sizeof target, "%s", path_of("links/nowhere.png"));
    assert_int_equal(symlink(target, path_of("links/a/dangling.png")), 0);
    assert_int_equal(symlink("loop.png", path_of("links/a/loop.png")), 0);
    assert_int_equal(symlink("c", path_of("links/c")), 0); /* a class folder linking to itself */
    dataset ds;
    if (dataset_list_imagefolder(&ds, path_of("links")) != CNT_OK) fail_msg("%s", cnt_err_msg());
    assert_int_equal(ds.classes, 2);
    assert_int_equal(ds.n, 2);
    dataset_free(&ds);
}

/* Runs the listing of root with stderr sent to a file; returns what was
 * written there (malloc'ed) and the listing's status in *rc. */
static char *list_capturing_stderr(dataset *ds, const char *root, int *rc) {
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fileno(tmp), 2), 2);
    *rc = dataset_list_imagefolder(ds, root);
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    long n = ftell(tmp);
    if (n < 0) n = 0;
    char *text = calloc(1, (size_t)n + 1);
    rewind(tmp);
    size_t got = fread(text, 1, (size_t)n, tmp);
    text[got] = '\0';
    fclose(tmp);
    return text;
}

/* An image name that is not a regular file (a FIFO, whose reads would block a
 * worker; a link to a device) is left out of the listing with a warning
 * naming it and its kind; a FIFO among the class folders is ignored as a
 * file is. alarm() turns a hang into a failure. */
static void test_listing_skips_special_files(void **state) {
    (void)state;
    write_id_image(path_of("special/a/1.png"), 1, 4, 4, 3);
    write_id_image(path_of("special/b/2.png"), 2, 4, 4, 3);
    char fifo[1024], dev[1024];
    snprintf(fifo, sizeof fifo, "%s", path_of("special/a/pipe.png"));
    snprintf(dev, sizeof dev, "%s", path_of("special/b/zero.jpg"));
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink("/dev/zero", dev), 0);
    assert_int_equal(mkfifo(path_of("special/c"), 0600), 0);
    alarm(20);
    dataset ds;
    int rc;
    char *err = list_capturing_stderr(&ds, path_of("special"), &rc);
    alarm(0);
    if (rc != CNT_OK) fail_msg("%s", cnt_err_msg());
    assert_int_equal(ds.classes, 2);
    assert_int_equal(ds.n, 2);
    char want[1200];
    snprintf(want, sizeof want, "skipping %s while listing: it is a FIFO (named pipe), not a regular file", fifo);
    assert_contains(err, want);
    snprintf(want, sizeof want, "skipping %s while listing: it is a character device, not a regular file", dev);
    assert_contains(err, want);
    if (strstr(err, "special/c")) fail_msg("a FIFO among the class folders is ignored silently: %s", err);
    free(err);
    dataset_free(&ds);
}

/* An image replaced by a FIFO after the listing (or a listing made on
 * another node) is an unreadable image: named, skipped and counted like a
 * corrupt one; a worker never blocks in its open. alarm() turns a hang into
 * a failure. */
static void test_fifo_after_listing(void **state) {
    (void)state;
    const char *root = make_id_tree("late", 12, 3);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, root), CNT_OK);
    dataset_set_shape(&ds, 3, 4);
    char fifo[1024];
    snprintf(fifo, sizeof fifo, "%s", path_of("late/c1/img00004.png"));
    assert_int_equal(unlink(fifo), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20);
    uint8_t *pix = NULL;
    int w, h, idx = -1;
    for (int i = 0; i < ds.n; i++) {
        char p[1024];
        dataset_sample_path(&ds, i, p, sizeof p);
        if (strcmp(p, fifo) == 0) idx = i;
    }
    assert_true(idx >= 0);
    assert_int_equal(dataset_decode(&ds, idx, &pix, &w, &h), CNT_ERR);
    assert_null(pix);
    char want[1200];
    snprintf(want, sizeof want, "%s: it is a FIFO (named pipe), not a regular file", fifo);
    assert_string_equal(cnt_err_msg(), want);
    loader_options o = plain_options(4, 0, 1, 0);
    loader *ld = loader_create(&ds, &o);
    loader_start_epoch(ld, 0);
    const batch *b;
    long seen = 0;
    while ((b = loader_next(ld)) != NULL) seen += b->n;
    alarm(0);
    assert_int_equal(seen, 11);
    assert_int_equal(loader_skipped(ld), 1);
    loader_free(ld);
    dataset_free(&ds);
}

static void test_listing_errors(void **state) {
    (void)state;
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("does/not/exist")), CNT_ERR);
    assert_contains(cnt_err_msg(), "does/not/exist");

    write_bytes(path_of("afile"), "x", 1);
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("afile")), CNT_ERR);
    assert_contains(cnt_err_msg(), "not a directory");

    mkdir(path_of("noclasses"), 0777);
    write_id_image(path_of("noclasses/loose.png"), 1, 4, 4, 3);
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("noclasses")), CNT_ERR);
    assert_contains(cnt_err_msg(), "no class folders");

    /* An empty class folder (or one with no images) is named. */
    write_id_image(path_of("emptyclass/good/a.png"), 1, 4, 4, 3);
    mkdir(path_of("emptyclass/hollow"), 0777);
    write_bytes(path_of("emptyclass/hollow/notes.txt"), "x", 1);
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("emptyclass")), CNT_ERR);
    assert_contains(cnt_err_msg(), "'hollow'");
    assert_contains(cnt_err_msg(), "no images");

    /* Train and val with different classes. */
    write_id_image(path_of("tv/train/cat/a.png"), 1, 4, 4, 3);
    write_id_image(path_of("tv/train/dog/a.png"), 1, 4, 4, 3);
    write_id_image(path_of("tv/val/cat/a.png"), 1, 4, 4, 3);
    write_id_image(path_of("tv/val/cow/a.png"), 1, 4, 4, 3);
    write_id_image(path_of("tv/val3/cat/a.png"), 1, 4, 4, 3);
    dataset tr, va;
    assert_int_equal(dataset_list_imagefolder(&tr, path_of("tv/train")), CNT_OK);
    assert_int_equal(dataset_list_imagefolder(&va, path_of("tv/val")), CNT_OK);
    assert_int_equal(dataset_same_classes(&tr, &va), CNT_ERR);
    assert_contains(cnt_err_msg(), "'dog'");
    assert_contains(cnt_err_msg(), "'cow'");
    dataset_free(&va);
    assert_int_equal(dataset_list_imagefolder(&va, path_of("tv/val3")), CNT_OK);
    assert_int_equal(dataset_same_classes(&tr, &va), CNT_ERR);
    assert_contains(cnt_err_msg(), "2 class folders and 1");
    dataset_free(&va);
    dataset_free(&tr);
}

/* Decoding: values come through normalised exactly (PNG), grey images are
 * replicated to RGB, RGB turns into stb's luma for one channel, JPEG decodes
 * close to what was written. */
static void test_decode_values(void **state) {
    (void)state;
    write_id_image(path_of("vals/a/rgb.png"), 200 + 256 * 3, 6, 6, 3); /* (200, 3, 7) */
    write_id_image(path_of("vals/b/grey.png"), 90, 6, 6, 1);
    write_id_image(path_of("vals/c/photo.jpg"), 120, 6, 6, 1);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("vals")), CNT_OK);
    dataset_set_shape(&ds, 3, 6);
    loader_options o = plain_options(3, 0, 1, 0);
    o.mean[0] = 0.5f, o.mean[1] = 0.25f, o.mean[2] = 0.0f;
    o.std[0] = 0.5f, o.std[1] = 2.0f, o.std[2] = 0.25f;
    loader *ld = loader_create(&ds, &o);
    assert_non_null(ld);
    loader_start_epoch(ld, 0);
    const batch *b = loader_next(ld);
    assert_non_null(b);
    assert_int_equal(b->n, 3);
    const int hw = 36;
    const float want_rgb[3] = {(200 / 255.0f - 0.5f) / 0.5f, (3 / 255.0f - 0.25f) / 2.0f, (7 / 255.0f) / 0.25f};
    for (int ch = 0; ch < 3; ch++)
        for (int k = 0; k < hw; k++) assert_float_equal(b->x[ch * hw + k], want_rgb[ch], 1e-6);
    const float *grey = b->x + 3 * hw;
    for (int ch = 0; ch < 3; ch++)
        assert_float_equal(grey[ch * hw + 5], (90 / 255.0f - o.mean[ch]) / o.std[ch], 1e-6);
    const float *jpg = b->x + 6 * hw;
    assert_float_equal(jpg[10] * 0.5f + 0.5f, 120 / 255.0f, 3 / 255.0f);
    assert_int_equal(b->labels[0], 0);
    assert_int_equal(b->labels[1], 1);
    assert_int_equal(b->labels[2], 2);
    assert_null(loader_next(ld));
    loader_free(ld);

    /* One channel from RGB: stb_image's luma, (77 r + 150 g + 29 b) >> 8. */
    dataset_set_shape(&ds, 1, 6);
    o = plain_options(1, 0, 1, 0);
    ld = loader_create(&ds, &o);
    loader_start_epoch(ld, 0);
    b = loader_next(ld);
    assert_float_equal(b->x[0] * 255.0f, (float)((77 * 200 + 150 * 3 + 29 * 7) >> 8), 1e-3);
    loader_free(ld);
    dataset_free(&ds);
}

/* Images of another size are resized: a constant image stays constant at
 * the new shape, with either crop style; the shape is the dataset's. */
static void test_odd_sizes(void **state) {
    (void)state;
    write_id_image(path_of("odd/a/wide.png"), 100, 37, 23, 3);
    write_id_image(path_of("odd/a/tall.jpg"), 180, 9, 41, 1);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("odd")), CNT_OK);
    dataset_set_shape(&ds, 3, 16);
    for (int crop = 0; crop < 2; crop++)
        for (int augment = 0; augment < 2; augment++) {
            loader_options o = plain_options(2, 0, 1, 0);
            o.crop = crop;
            o.augment = augment;
            o.pad = 2;
            loader *ld = loader_create(&ds, &o);
            assert_non_null(ld);
            loader_start_epoch(ld, 0);
            const batch *b = loader_next(ld);
            assert_int_equal(b->n, 2);
            /* Sorted: tall.jpg (grey 180) first, then wide.png (100, 0, 7). */
            const int hw = 16 * 16;
            for (int k = 0; k < hw; k++) {
                if (crop == LOADER_CROP_PAD && augment) break; /* padding is black: checked elsewhere */
                assert_float_equal(b->x[k] * 255.0f, 180.0f, 4.0f);
                assert_float_equal(b->x[3 * hw + k] * 255.0f, 100.0f, 1.0f);
                assert_float_equal(b->x[3 * hw + hw + k] * 255.0f, 0.0f, 1.0f);
            }
            loader_free(ld);
        }
    dataset_free(&ds);
}

/* Evaluation with the resized crop: shorter side to floor(16 x 256/224) = 18,
 * centre 16 x 16. A 64 x 32 image black on the left half and white on the
 * right becomes 36 x 18 with the edge at column 18; the crop starts at
 * column 10, so the edge sits at crop column 8. */
static void test_eval_resize_centre_crop(void **state) {
    (void)state;
    int w = 64, h = 32;
    uint8_t *p = calloc((size_t)w * h, 1);
    for (int y = 0; y < h; y++)
        for (int x = w / 2; x < w; x++) p[y * w + x] = 255;
    assert_true(stbi_write_png(path_of("centre/a/half.png"), w, h, 1, p, w));
    free(p);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("centre")), CNT_OK);
    dataset_set_shape(&ds, 1, 16);
    loader_options o = plain_options(1, 0, 1, 0);
    o.crop = LOADER_CROP_RESIZED;
    loader *ld = loader_create(&ds, &o);
    loader_start_epoch(ld, 0);
    const batch *b = loader_next(ld);
    for (int y = 0; y < 16; y++) {
        for (int x = 0; x < 7; x++) assert_true(b->x[y * 16 + x] < 0.05f);
        for (int x = 9; x < 16; x++) assert_true(b->x[y * 16 + x] > 0.95f);
    }
    loader_free(ld);
    dataset_free(&ds);
}

/* torchvision's RandomResizedCrop: inside the image, area fraction in
 * [min_scale, 1] and aspect ratio in [3/4, 4/3] (up to rounding); images too
 * elongated for any try fall back to a centre crop of the clamped ratio. */
static void test_resized_crop_params(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 11, 0);
    int smallest = 1 << 30, largest = 0;
    for (int t = 0; t < 5000; t++) {
        int w = 50 + (int)rng_below(&r, 400), h = 50 + (int)rng_below(&r, 400);
        int x, y, cw, ch;
        loader_resized_crop_params(&r, w, h, 0.08f, &x, &y, &cw, &ch);
        assert_true(x >= 0 && y >= 0 && cw >= 1 && ch >= 1 && x + cw <= w && y + ch <= h);
        double area = (double)cw * ch / ((double)w * h), ratio = (double)cw / ch;
        if (cw == w && ch == h) continue;
        assert_true(area > 0.08 * 0.9 && area < 1.0 + 1e-9);
        assert_true(ratio > 0.75 * 0.95 && ratio < 4.0 / 3.0 * 1.05);
        if (cw * ch < smallest) smallest = cw * ch;
        if (cw * ch > largest) largest = cw * ch;
    }
    assert_true(smallest < largest); /* it does vary */
    int x, y, cw, ch;
    loader_resized_crop_params(&r, 1000, 10, 0.5f, &x, &y, &cw, &ch);
    assert_int_equal(ch, 10);
    assert_int_equal(cw, 13); /* 10 x 4/3 rounded */
    assert_int_equal(x, (1000 - 13) / 2);
    loader_resized_crop_params(&r, 10, 1000, 0.5f, &x, &y, &cw, &ch);
    assert_int_equal(cw, 10);
    assert_int_equal(ch, 13);
}

/* A corrupt file: training batches stay full (a readable image takes its
 * place) and the skip is counted; evaluation leaves it out. */
static void test_corrupt_images(void **state) {
    (void)state;
    const char *root = make_id_tree("corrupt", 24, 3);
    /* Truncated PNG and plain garbage with an image extension. */
    FILE *f = fopen(path_of("corrupt/c0/img00000.png"), "rb");
    char head[40];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    write_bytes(path_of("corrupt/c0/img00000.png"), head, sizeof head);
    write_bytes(path_of("corrupt/c1/img00001.png"), "garbage garbage garbage", 23);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, root), CNT_OK);
    dataset_set_shape(&ds, 3, 4);
    for (int world = 1; world <= 2; world++) {
        long train_skipped = 0;
        for (int rank = 0; rank < world; rank++) {
            loader_options o = plain_options(4, rank, world, 1);
            o.augment = 1;
            o.pad = 1;
            loader *ld = loader_create(&ds, &o);
            loader_start_epoch(ld, 0);
            const batch *b;
            while ((b = loader_next(ld)) != NULL) {
                assert_int_equal(b->n, 4);
                for (int i = 0; i < b->n; i++) assert_true(b->labels[i] >= 0 && b->labels[i] < 3);
            }
            train_skipped += loader_skipped(ld);
            if (world == 1) {
                /* The next epoch counts them again (known bad: not decoded again). */
                loader_start_epoch(ld, 1);
                while ((b = loader_next(ld)) != NULL) assert_int_equal(b->n, 4);
                assert_int_equal(loader_skipped(ld), 2);
            }
            loader_free(ld);
        }
        assert_int_equal(train_skipped, 2);
        long seen = 0, skipped = 0;
        for (int rank = 0; rank < world; rank++) {
            loader_options o = plain_options(5, rank, world, 0);
            loader *ld = loader_create(&ds, &o);
            loader_start_epoch(ld, 0);
            const batch *b;
            while ((b = loader_next(ld)) != NULL) {
                for (int i = 0; i < b->n; i++) {
                    int id = sample_id(b->x + (size_t)i * 48, 16);
                    assert_true(id != 0 && id != 1);
                    assert_int_equal(b->labels[i], id % 3);
                }
                seen += b->n;
            }
            skipped += loader_skipped(ld);
            loader_free(ld);
        }
        assert_int_equal(seen, 22);
        assert_int_equal(skipped, 2);
    }
    dataset_free(&ds);
}

/* Shards of an image folder: disjoint, covering, equal step counts, for world
 * sizes 1 to 8 and 37 images (not a multiple of most of them). */
static void test_shards(void **state) {
    (void)state;
    const int n = 37;
    const char *root = make_id_tree("shards", n, 4);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, root), CNT_OK);
    dataset_set_shape(&ds, 3, 4);
    for (int world = 1; world <= 8; world++) {
        int count[37] = {0}, train_count[37] = {0}, steps0 = -1;
        for (int rank = 0; rank < world; rank++) {
            loader_options o = plain_options(3, rank, world, 0);
            loader *ld = loader_create(&ds, &o);
            loader_start_epoch(ld, 0);
            const batch *b;
            while ((b = loader_next(ld)) != NULL)
                for (int i = 0; i < b->n; i++) {
                    int id = sample_id(b->x + (size_t)i * 48, 16);
                    assert_true(id >= 0 && id < n);
                    assert_int_equal(b->labels[i], id % 4);
                    count[id]++;
                }
            loader_free(ld);
            if (n / world < 2) continue;
            o = plain_options(2, rank, world, 1);
            ld = loader_create(&ds, &o);
            assert_non_null(ld);
            if (steps0 < 0) steps0 = loader_steps_per_epoch(ld);
            assert_int_equal(loader_steps_per_epoch(ld), steps0);
            loader_start_epoch(ld, 3);
            while ((b = loader_next(ld)) != NULL)
                for (int i = 0; i < b->n; i++) train_count[sample_id(b->x + (size_t)i * 48, 16)]++;
            loader_free(ld);
        }
        for (int i = 0; i < n; i++) {
            assert_int_equal(count[i], 1);
            assert_true(train_count[i] <= 1);
        }
    }
    dataset_free(&ds);
}

/* The same (seed, epoch) gives the same augmented batches whatever the number
 * of workers; another epoch gives others. */
static void test_augment_reproducible(void **state) {
    (void)state;
    const char *root = make_id_tree("repro", 16, 2);
    /* Give the images texture so crops differ visibly. */
    for (int i = 0; i < 16; i++) {
        uint8_t p[24 * 20 * 3];
        for (int k = 0; k < 24 * 20 * 3; k++) p[k] = (uint8_t)(k * 7 + i * 13);
        assert_true(stbi_write_png(path_of("repro/c%d/img%05d.png", i % 2, i), 24, 20, 3, p, 24 * 3));
    }
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, root), CNT_OK);
    dataset_set_shape(&ds, 3, 12);
    const size_t per_epoch = 16 * 3 * 12 * 12;
    for (int crop = 0; crop < 2; crop++) {
        float *runs[3];
        for (int v = 0; v < 3; v++) {
            loader_options o = plain_options(4, 0, 1, 1);
            o.augment = 1;
            o.crop = crop;
            o.pad = 3;
            o.min_scale = 0.2f;
            o.workers = v == 1 ? 3 : 1;
            loader *ld = loader_create(&ds, &o);
            loader_start_epoch(ld, v == 2 ? 1 : 0);
            runs[v] = malloc(per_epoch * sizeof(float));
            size_t at = 0;
            const batch *b;
            while ((b = loader_next(ld)) != NULL) {
                memcpy(runs[v] + at, b->x, (size_t)b->n * 3 * 144 * sizeof(float));
                at += (size_t)b->n * 3 * 144;
            }
            assert_int_equal(at, per_epoch);
            loader_free(ld);
        }
        assert_memory_equal(runs[0], runs[1], per_epoch * sizeof(float));
        assert_memory_not_equal(runs[0], runs[2], per_epoch * sizeof(float));
        for (int v = 0; v < 3; v++) free(runs[v]);
    }
    /* uint8 batches, normalised as the device does: the float batches bit
     * for bit, augmented and not, both crops, with a JPEG among the files */
    write_id_image(path_of("repro/c0/jpeg.jpg"), 77, 31, 17, 3);
    dataset_free(&ds);
    assert_int_equal(dataset_list_imagefolder(&ds, root), CNT_OK);
    dataset_set_shape(&ds, 3, 12);
    float *fl = malloc(per_epoch * 2 * sizeof(float)), *by = malloc(per_epoch * 2 * sizeof(float));
    for (int v = 0; v < 4; v++) {
        size_t got[2] = {0, 0};
        for (int u8 = 0; u8 < 2; u8++) {
            loader_options o = plain_options(4, 0, 1, 1);
            o.augment = v & 1;
            o.crop = v >> 1;
            o.pad = 3;
            o.min_scale = 0.2f;
            o.u8 = u8;
            loader *ld = loader_create(&ds, &o);
            loader_start_epoch(ld, 0);
            const batch *b;
            float *dst = u8 ? by : fl;
            while ((b = loader_next(ld)) != NULL) {
                assert_true(u8 ? b->u8 && !b->x : b->x && !b->u8);
                if (u8) backend_cpu()->normalize_u8(b->n, b->c, b->hw, b->u8, b->lut, dst + got[u8]);
                else memcpy(dst + got[u8], b->x, (size_t)b->n * 3 * 144 * sizeof(float));
                got[u8] += (size_t)b->n * 3 * 144;
            }
            loader_free(ld);
        }
        assert_int_equal(got[0], got[1]);
        assert_memory_equal(fl, by, got[0] * sizeof(float));
    }
    free(fl);
    free(by);
    dataset_free(&ds);
}

/* Statistics from a sample: exact for images of known constant values,
 * unreadable images left out; a spread subset keeps every class. */
static void test_stats_and_truncate(void **state) {
    (void)state;
    write_id_image(path_of("stats/a/1.png"), 51, 5, 5, 1);
    write_id_image(path_of("stats/a/2.png"), 153, 5, 5, 1);
    write_bytes(path_of("stats/b/3.png"), "broken", 6);
    write_id_image(path_of("stats/b/4.png"), 102, 10, 5, 1);
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("stats")), CNT_OK);
    dataset_set_shape(&ds, 1, 8);
    float mean[3], std[3];
    int bad = -1;
    assert_int_equal(dataset_estimate_stats(&ds, 100, 2, mean, std, &bad), CNT_OK);
    assert_int_equal(bad, 1);
    /* pixels: 25 x 0.2, 25 x 0.6, 50 x 0.4 */
    assert_float_equal(mean[0], 0.4f, 1e-6);
    assert_float_equal(std[0], sqrtf((25 * 0.04f + 25 * 0.04f) / 100), 1e-6);
    dataset_truncate(&ds, 2);
    assert_int_equal(ds.n, 2);
    assert_int_equal(ds.labels[0], 0);
    assert_int_equal(ds.labels[1], 1);
    dataset_free(&ds);

    write_bytes(path_of("allbad/a/1.png"), "broken", 6);
    assert_int_equal(dataset_list_imagefolder(&ds, path_of("allbad")), CNT_OK);
    dataset_set_shape(&ds, 3, 8);
    assert_int_equal(dataset_estimate_stats(&ds, 100, 1, mean, std, &bad), CNT_ERR);
    assert_contains(cnt_err_msg(), "allbad");
    dataset_free(&ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing_sorted_and_filtered),
        cmocka_unit_test(test_listing_skips_broken_links),
        cmocka_unit_test(test_listing_skips_special_files),
        cmocka_unit_test(test_fifo_after_listing),
        cmocka_unit_test(test_listing_errors),
        cmocka_unit_test(test_decode_values),
        cmocka_unit_test(test_odd_sizes),
        cmocka_unit_test(test_eval_resize_centre_crop),
        cmocka_unit_test(test_resized_crop_params),
        cmocka_unit_test(test_corrupt_images),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_augment_reproducible),
        cmocka_unit_test(test_stats_and_truncate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
