/*
 * tools/make_shards.c - packs an image folder into a shard set
 * (data/shards.h): a few large files that `./trainer ... data.kind=shards`
 * reads instead of one file per image.
 *
 *   make_shards SRC OUT [--shard-mb N] [--order shuffled|listing] [--seed S] [--no-check]
 *
 * SRC is one tree SRC/<class>/<image> (as data.kind = imagefolder lists
 * it); OUT the set's directory, created (it must not hold a set already).
 * For a whole data set, run it once for train/ and once for val/:
 *   make_shards /data/imagenet/train /data/imagenet-shards/train
 *   make_shards /data/imagenet/val   /data/imagenet-shards/val
 * --shard-mb (1024): shard size; --order (shuffled): images in a random
 * order from --seed (1), or the folder's order (listing: a run with
 * data.read_order = random then gets the folder's batches bit for bit);
 * --no-check: copy every file without opening it as an image (by default
 * the ones the loader could not read are left out, with a warning each).
 * Exit codes: 0 done, 1 failure (message names the file), 2 usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/timer.h"
#include "data/dataset.h"
#include "data/shards.h"

static void usage(FILE *out) {
    fprintf(out, "usage: make_shards SRC OUT [--shard-mb N] [--order shuffled|listing] [--seed S] [--no-check]\n"
                 "  packs the image folder SRC/<class>/<image> into the shard set OUT (data.kind = shards)\n");
}

static int parse_u64(const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi) {
        fprintf(stderr, "make_shards: %s wants a whole number in %llu..%llu, got '%s'\n", opt,
                (unsigned long long)lo, (unsigned long long)hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    shards_write_options o = {.shard_bytes = 1024ULL << 20, .shuffle = 1, .seed = 1, .check = 1};
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--no-check") == 0) {
            o.check = 0;
            continue;
        }
        if (a[0] == '-' && a[1] == '-') {
            if (i + 1 >= argc) {
                fprintf(stderr, "make_shards: %s needs a value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            uint64_t x;
            if (strcmp(a, "--shard-mb") == 0) {
                if (parse_u64(a, v, 1, 1 << 20, &x)) return 2;
                o.shard_bytes = x << 20;
            } else if (strcmp(a, "--seed") == 0) {
                if (parse_u64(a, v, 0, UINT64_MAX, &o.seed)) return 2;
            } else if (strcmp(a, "--order") == 0) {
                if (strcmp(v, "shuffled") && strcmp(v, "listing")) {
                    fprintf(stderr, "make_shards: --order is shuffled or listing, got '%s'\n", v);
                    return 2;
                }
                o.shuffle = strcmp(v, "shuffled") == 0;
            } else {
                fprintf(stderr, "make_shards: unknown option %s\n", a);
                usage(stderr);
                return 2;
            }
            continue;
        }
        if (npos == 2) {
            usage(stderr);
            return 2;
        }
        pos[npos++] = a;
    }
    if (npos != 2) {
        usage(stderr);
        return 2;
    }
    double t0 = time_now();
    dataset ds;
    if (dataset_list_imagefolder(&ds, pos[0]) != CNT_OK) {
        fprintf(stderr, "make_shards: %s\n", cnt_err_msg());
        return 1;
    }
    printf("make_shards: %s holds %d images in %d classes; writing %s\n", pos[0], ds.n, ds.classes, pos[1]);
    fflush(stdout);
    shards_write_stats st;
    int rc = shards_write(&ds, pos[1], &o, &st);
    dataset_free(&ds);
    if (rc != CNT_OK) {
        fprintf(stderr, "make_shards: %s\n", cnt_err_msg());
        return 1;
    }
    double s = time_now() - t0;
    printf("make_shards: wrote %d images (%.1f MB) in %d shard%s to %s in %.1f s (%.0f images/s, %.0f MB/s)", st.images,
           st.bytes / 1e6, st.shards, st.shards == 1 ? "" : "s", pos[1], s, st.images / (s > 0 ? s : 1e-9),
           st.bytes / 1e6 / (s > 0 ? s : 1e-9));
    if (st.left_out) printf("; %d unreadable image%s left out", st.left_out, st.left_out == 1 ? "" : "s");
    printf("\n");
    return 0;
}
