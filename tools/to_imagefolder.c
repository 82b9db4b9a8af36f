/*
 * tools/to_imagefolder.c - writes a data set out as an ImageNet-style image
 * folder, OUT/train/<class>/<n>.png and OUT/val/<class>/<n>.png, which
 * `./trainer ... data.kind=imagefolder data.root=OUT` reads back. Shows the
 * image path on real data with no download, and makes JPEG trees for
 * `trainer --bench-data`.
 *
 *   to_imagefolder idx ROOT OUT [options]     MNIST / Fashion-MNIST IDX files under ROOT
 *   to_imagefolder cifar ROOT OUT [options]   CIFAR-10/100 binary batches under ROOT
 *   to_imagefolder synthetic OUT [options]    smooth random images (benchmarks)
 *
 * Options: --format png|jpg (png: lossless, the default), --quality Q (jpg,
 * 1..100, default 90), --limit N (at most N images per split), and for
 * synthetic: --classes K (10), --train N (1000), --val N (200), --size WxH
 * (500x375, about ImageNet's average), --seed S.
 *
 * Class folders are the label zero-padded to the width of the largest label
 * ("0".."9", "00".."99"), so sorting them by name, as the trainer does,
 * restores the numbering; files are numbered in the data set's order. OUT/train
 * and OUT/val must not exist yet (nothing is overwritten). Exit codes: 0 done,
 * 1 failure (message names the path), 2 usage.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stb/stb_image_write.h>

#include "common/check.h"
#include "common/rng.h"
#include "data/dataset.h"
#include "train/metrics.h"

typedef struct options {
    const char *format;
    int quality, limit, classes, n_train, n_val, width, height;
    uint64_t seed;
} options;

static void usage(FILE *out) {
    fprintf(out, "usage: to_imagefolder idx ROOT OUT [--format png|jpg] [--quality Q] [--limit N]\n"
                 "       to_imagefolder cifar ROOT OUT [--format png|jpg] [--quality Q] [--limit N]\n"
                 "       to_imagefolder synthetic OUT [--classes K] [--train N] [--val N] [--size WxH]\n"
                 "                      [--format jpg|png] [--quality Q] [--seed S]\n");
}

static int digits(long v) {
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

/* Writes one interleaved image (h x w x c) to dir/<label>/<index>.<ext>. */
static int write_image(const char *dir, const options *o, int label, int label_width, long index, int index_width,
                       const uint8_t *hwc, int w, int h, int c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%0*d", dir, label_width, label);
    if (mkdir(path, 0777) != 0 && errno != EEXIST) return cnt_err_set("%s: %s", path, strerror(errno));
    int jpg = strcmp(o->format, "jpg") == 0;
    if ((size_t)snprintf(path, sizeof path, "%s/%0*d/%0*ld.%s", dir, label_width, label, index_width, index,
                         jpg ? "jpg" : "png") >= sizeof path)
        return cnt_err_set("%s: path too long", dir);
    int ok = jpg ? stbi_write_jpg(path, w, h, c, hwc, o->quality) : stbi_write_png(path, w, h, c, hwc, w * c);
    if (!ok) return cnt_err_set("%s: cannot write the image (disk full or no permission?)", path);
    return CNT_OK;
}

/* Creates out/split; it must not exist already. */
static int make_split_dir(const char *out, const char *split, char *dir, size_t n) {
    if (make_dirs(out) != CNT_OK) return CNT_ERR;
    snprintf(dir, n, "%s/%s", out, split);
    if (mkdir(dir, 0777) != 0) {
        if (errno == EEXIST)
            return cnt_err_set("%s already exists: remove it or choose another output folder (nothing is "
                               "overwritten)",
                               dir);
        return cnt_err_set("%s: %s", dir, strerror(errno));
    }
    return CNT_OK;
}

static int write_dataset(const dataset *ds, const char *out, const char *split, const options *o) {
    char dir[4096];
    if (make_split_dir(out, split, dir, sizeof dir) != CNT_OK) return CNT_ERR;
    int n = o->limit > 0 && o->limit < ds->n ? o->limit : ds->n;
    int lw = digits(ds->classes - 1), iw = digits(n - 1);
    size_t plane = (size_t)ds->h * (size_t)ds->w;
    uint8_t *hwc = cnt_malloc(plane * (size_t)ds->c);
    for (int i = 0; i < n; i++) {
        const uint8_t *src = ds->pixels + (size_t)i * plane * (size_t)ds->c;
        for (size_t k = 0; k < plane; k++)
            for (int ch = 0; ch < ds->c; ch++) hwc[k * (size_t)ds->c + (size_t)ch] = src[(size_t)ch * plane + k];
        if (write_image(dir, o, ds->labels[i], lw, i, iw, hwc, ds->w, ds->h, ds->c) != CNT_OK) {
            free(hwc);
            return CNT_ERR;
        }
    }
    free(hwc);
    printf("%s: %d images in %d classes\n", dir, n, ds->classes);
    return CNT_OK;
}

/* Smooth random images: a class colour, a few random low-frequency waves and
 * a little noise, so JPEG sizes and decode times are like photographs rather
 * than like white noise. Image i draws from its own stream of the seed, so
 * the files are the same whatever the number of threads (OpenMP: one image
 * each at a time; OMP_NUM_THREADS chooses how many). */
static int write_synthetic(const char *out, const char *split, int n, uint64_t stream, const options *o) {
    char dir[4096];
    if (make_split_dir(out, split, dir, sizeof dir) != CNT_OK) return CNT_ERR;
    int w = o->width, h = o->height, lw = digits(o->classes - 1), iw = digits(n - 1);
    char first_error[1024] = "";
    int failed = 0;
#pragma omp parallel
    {
        uint8_t *img = cnt_malloc((size_t)w * (size_t)h * 3);
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            rng r;
            rng_seed(&r, o->seed, (stream << 32) | (uint64_t)i);
            int label = i % o->classes;
            float base[3], fx[3], fy[3], ph[3];
            for (int ch = 0; ch < 3; ch++) {
                base[ch] = 64.0f + 128.0f * rng_hash_uniform((uint64_t)label, (uint64_t)ch);
                fx[ch] = rng_range(&r, 0.5f, 6.0f) * 6.2831853f / (float)w;
                fy[ch] = rng_range(&r, 0.5f, 6.0f) * 6.2831853f / (float)h;
                ph[ch] = rng_range(&r, 0.0f, 6.2831853f);
            }
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    for (int ch = 0; ch < 3; ch++) {
                        float v = base[ch] + 50.0f * sinf(fx[ch] * (float)x + fy[ch] * (float)y + ph[ch]) +
                                  8.0f * rng_normal(&r);
                        img[((size_t)y * (size_t)w + (size_t)x) * 3 + (size_t)ch] =
                            (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                    }
            if (write_image(dir, o, label, lw, i, iw, img, w, h, 3) != CNT_OK) {
#pragma omp critical(to_imagefolder_error)
                {
                    if (!failed) snprintf(first_error, sizeof first_error, "%s", cnt_err_msg()); /* this thread's */
#pragma omp atomic write
                    failed = 1;
                }
            }
        }
        free(img);
    }
    if (failed) return cnt_err_set("%s", first_error);
    printf("%s: %d images of %dx%d in %d classes\n", dir, n, w, h, o->classes);
    return CNT_OK;
}

static int parse_int(const char *opt, const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "to_imagefolder: %s wants a whole number in %d..%d, got '%s'\n", opt, lo, hi, v);
        return CNT_ERR;
    }
    *out = (int)x;
    return CNT_OK;
}

int main(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc < 3) {
        usage(stderr);
        return 2;
    }
    const char *kind = argv[1];
    int synthetic = strcmp(kind, "synthetic") == 0;
    if (!synthetic && strcmp(kind, "idx") != 0 && strcmp(kind, "cifar") != 0) {
        fprintf(stderr, "to_imagefolder: unknown kind '%s' (idx, cifar or synthetic)\n", kind);
        usage(stderr);
        return 2;
    }
    int first_opt = synthetic ? 3 : 4;
    if (argc < first_opt) {
        usage(stderr);
        return 2;
    }
    const char *root = synthetic ? NULL : argv[2];
    const char *out = synthetic ? argv[2] : argv[3];
    options o = {.format = synthetic ? "jpg" : "png", .quality = 90, .limit = 0, .classes = 10, .n_train = 1000,
                 .n_val = 200, .width = 500, .height = 375, .seed = 1};
    for (int i = first_opt; i < argc; i += 2) { /* option, value */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "to_imagefolder: %s needs a value\n", a);
            return 2;
        }
        int rc = CNT_OK;
        if (strcmp(a, "--format") == 0) {
            if (strcmp(v, "png") != 0 && strcmp(v, "jpg") != 0) {
                fprintf(stderr, "to_imagefolder: --format is png or jpg, got '%s'\n", v);
                return 2;
            }
            o.format = v;
        } else if (strcmp(a, "--quality") == 0) {
            rc = parse_int(a, v, 1, 100, &o.quality);
        } else if (strcmp(a, "--limit") == 0) {
            rc = parse_int(a, v, 1, 1 << 30, &o.limit);
        } else if (synthetic && strcmp(a, "--classes") == 0) {
            rc = parse_int(a, v, 2, 100000, &o.classes);
        } else if (synthetic && strcmp(a, "--train") == 0) {
            rc = parse_int(a, v, 1, 1 << 30, &o.n_train);
        } else if (synthetic && strcmp(a, "--val") == 0) {
            rc = parse_int(a, v, 1, 1 << 30, &o.n_val);
        } else if (synthetic && strcmp(a, "--seed") == 0) {
            int s;
            rc = parse_int(a, v, 0, 1 << 30, &s);
            o.seed = (uint64_t)s;
        } else if (synthetic && strcmp(a, "--size") == 0) {
            char *x = strchr(v, 'x');
            char wbuf[16];
            if (!x || (size_t)(x - v) >= sizeof wbuf) {
                fprintf(stderr, "to_imagefolder: --size wants WxH, got '%s'\n", v);
                return 2;
            }
            memcpy(wbuf, v, (size_t)(x - v));
            wbuf[x - v] = '\0';
            rc = parse_int(a, wbuf, 1, 8192, &o.width);
            if (rc == CNT_OK) rc = parse_int(a, x + 1, 1, 8192, &o.height);
        } else {
            fprintf(stderr, "to_imagefolder: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (rc != CNT_OK) return 2;
    }
    if (synthetic) {
        int nt = o.limit && o.limit < o.n_train ? o.limit : o.n_train;
        int nv = o.limit && o.limit < o.n_val ? o.limit : o.n_val;
        if (nt < o.classes || nv < o.classes) {
            /* Images go to classes in turn; a class without images in one split
             * would give train and val trees the trainer refuses. */
            fprintf(stderr, "to_imagefolder: --train %d / --val %d: each split needs at least one image per class "
                            "(--classes %d)\n",
                    nt, nv, o.classes);
            return 2;
        }
        if (write_synthetic(out, "train", nt, 1, &o) != CNT_OK || write_synthetic(out, "val", nv, 2, &o) != CNT_OK) {
            fprintf(stderr, "to_imagefolder: %s\n", cnt_err_msg());
            return 1;
        }
        return 0;
    }
    for (int train = 1; train >= 0; train--) {
        dataset ds;
        int rc = strcmp(kind, "idx") == 0 ? dataset_load_mnist_dir(&ds, root, train) : dataset_load_cifar(&ds, root, train);
        if (rc == CNT_OK) {
            rc = write_dataset(&ds, out, train ? "train" : "val", &o);
            dataset_free(&ds);
        }
        if (rc != CNT_OK) {
            fprintf(stderr, "to_imagefolder: %s\n", cnt_err_msg());
            return 1;
        }
    }
    return 0;
}
