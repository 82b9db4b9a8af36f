/*
 * data/cifar.c - CIFAR-10 and CIFAR-100 readers (the "binary version" files).
 *
 * A CIFAR binary file is a plain sequence of fixed-size records with no header:
 * CIFAR-10 records are 1 label byte + 3072 pixel bytes, CIFAR-100 records are 2
 * label bytes (coarse, fine) + 3072 pixel bytes. The pixels are 32x32 in three
 * planes (R, G, B), i.e. already CHW, so they are copied as they are.
 *
 * The variant is detected from the files present under the root (or under the
 * archives' own sub-directories cifar-10-batches-bin/ and cifar-100-binary/):
 * CIFAR-10 has data_batch_1.bin .. data_batch_5.bin and test_batch.bin,
 * CIFAR-100 has train.bin and test.bin. Every file's size must be a whole
 * number of records and every label must be in range; errors name the file.
 */
#include "data/dataset.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/check.h"

#define CIFAR_SIDE 32
#define CIFAR_CHANNELS 3
#define CIFAR_PIXELS (CIFAR_CHANNELS * CIFAR_SIDE * CIFAR_SIDE) /* 3072 */
#define CIFAR_PATH_MAX 4096
#define CIFAR10_BATCHES 5
#define CIFAR_MAX_FILES CIFAR10_BATCHES

/* One of the two layouts. */
typedef struct cifar_variant {
    const char *name;         /* for messages */
    const char *subdir;       /* the archive's directory name */
    const char *train_files[CIFAR_MAX_FILES + 1]; /* NULL-terminated */
    const char *test_file;
    int label_bytes;          /* 1: label; 2: coarse, fine (the fine one is used) */
    int classes;              /* of the label used */
    int coarse_classes;       /* CIFAR-100's coarse labels; 0 when there are none */
} cifar_variant;

static const cifar_variant cifar_variants[] = {
    {"CIFAR-10", "cifar-10-batches-bin",
     {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin", NULL},
     "test_batch.bin", 1, 10, 0},
    {"CIFAR-100", "cifar-100-binary", {"train.bin", NULL}, "test.bin", 2, 100, 20},
};
#define N_VARIANTS ((int)(sizeof cifar_variants / sizeof cifar_variants[0]))

static int is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir + "/" + name into out; CNT_ERR when it does not fit. */
static int join_path(char out[CIFAR_PATH_MAX], const char *dir, const char *name) {
    int len = snprintf(out, CIFAR_PATH_MAX, "%s/%s", dir, name);
    if (len < 0 || len >= CIFAR_PATH_MAX) return cnt_err_set("dataset path too long: %s/%s", dir, name);
    return CNT_OK;
}

/* Finds the directory and variant for the split: the first of root,
 * root/<subdir> whose first file of the split exists. */
static int cifar_find(const char *root, int train, char dir[CIFAR_PATH_MAX], const cifar_variant **variant) {
    struct stat st;
    if (stat(root, &st) != 0) return cnt_err_set("CIFAR data directory %s: %s", root, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return cnt_err_set("CIFAR data directory %s is not a directory", root);
    char tried[4 * CIFAR_PATH_MAX] = "";
    size_t used = 0;
    for (int v = 0; v < N_VARIANTS; v++) {
        const cifar_variant *cv = &cifar_variants[v];
        const char *first = train ? cv->train_files[0] : cv->test_file;
        char sub[CIFAR_PATH_MAX], path[CIFAR_PATH_MAX];
        if (join_path(sub, root, cv->subdir) != CNT_OK) return CNT_ERR;
        const char *dirs[2] = {root, sub};
        for (int d = 0; d < 2; d++) {
            if (join_path(path, dirs[d], first) != CNT_OK) return CNT_ERR;
            if (is_regular_file(path)) {
                memcpy(dir, dirs[d], strlen(dirs[d]) + 1);
                *variant = cv;
                return CNT_OK;
            }
            int len = snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", path);
            if (len > 0 && (size_t)len < sizeof tried - used) used += (size_t)len;
        }
    }
    return cnt_err_set("no CIFAR-10 or CIFAR-100 %s file under %s: tried %s", train ? "training" : "test", root,
                       tried);
}

/* Size of path in records of rec_size bytes, checked to be whole and non-zero. */
static int cifar_count(const char *path, size_t rec_size, long *records) {
    struct stat st;
    if (stat(path, &st) != 0) return cnt_err_set("cannot open %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return cnt_err_set("cannot read %s: not a regular file", path);
    size_t size = (size_t)st.st_size;
    if (size == 0) return cnt_err_set("%s: empty file, expected records of %zu bytes", path, rec_size);
    if (size % rec_size != 0)
        return cnt_err_set("%s: size %zu bytes is not a multiple of the %zu-byte record (truncated file?)", path,
                           size, rec_size);
    *records = (long)(size / rec_size);
    return CNT_OK;
}

/* Reads `records` records of path into ds at sample offset `at`. */
static int cifar_read(const char *path, const cifar_variant *cv, long records, dataset *ds, long at) {
    size_t rec_size = (size_t)cv->label_bytes + CIFAR_PIXELS;
    FILE *f = fopen(path, "rb");
    if (!f) return cnt_err_set("cannot open %s: %s", path, strerror(errno));
    unsigned char rec[2 + CIFAR_PIXELS];
    for (long i = 0; i < records; i++) {
        if (fread(rec, 1, rec_size, f) != rec_size) {
            int err = ferror(f);
            fclose(f);
            return cnt_err_set("%s: %s at record %ld of %ld", path, err ? "read error" : "unexpected end of file",
                               i, records);
        }
        int label = rec[cv->label_bytes - 1];
        if (cv->coarse_classes > 0 && rec[0] >= cv->coarse_classes) {
            fclose(f);
            return cnt_err_set("%s: record %ld has coarse label %d, expected 0..%d", path, i, rec[0],
                               cv->coarse_classes - 1);
        }
        if (label >= cv->classes) {
            fclose(f);
            return cnt_err_set("%s: record %ld has label %d, expected 0..%d", path, i, label, cv->classes - 1);
        }
        ds->labels[at + i] = label;
        memcpy(ds->pixels + (size_t)(at + i) * CIFAR_PIXELS, rec + cv->label_bytes, CIFAR_PIXELS);
    }
    fclose(f);
    return CNT_OK;
}

int dataset_load_cifar(dataset *ds, const char *root, int train) {
    memset(ds, 0, sizeof *ds);
    char dir[CIFAR_PATH_MAX];
    const cifar_variant *cv = NULL;
    if (cifar_find(root, train, dir, &cv) != CNT_OK) return CNT_ERR;
    const char *single[2] = {cv->test_file, NULL};
    const char *const *names = train ? cv->train_files : single;
    size_t rec_size = (size_t)cv->label_bytes + CIFAR_PIXELS;

    int nfiles = 0;
    char paths[CIFAR_MAX_FILES][CIFAR_PATH_MAX];
    long counts[CIFAR_MAX_FILES], total = 0;
    for (; names[nfiles]; nfiles++) {
        if (join_path(paths[nfiles], dir, names[nfiles]) != CNT_OK) return CNT_ERR;
        if (cifar_count(paths[nfiles], rec_size, &counts[nfiles]) != CNT_OK) return CNT_ERR;
        total += counts[nfiles];
        if (total > INT_MAX) return cnt_err_set("%s: more than %d records in all", paths[nfiles], INT_MAX);
    }
    ds->pixels = malloc((size_t)total * CIFAR_PIXELS);
    ds->labels = malloc((size_t)total * sizeof *ds->labels);
    if (!ds->pixels || !ds->labels) {
        dataset_free(ds);
        return cnt_err_set("%s: cannot allocate %ld %s images", dir, total, cv->name);
    }
    long at = 0;
    for (int i = 0; i < nfiles; i++) {
        if (cifar_read(paths[i], cv, counts[i], ds, at) != CNT_OK) {
            dataset_free(ds);
            return CNT_ERR;
        }
        at += counts[i];
    }
    ds->n = (int)total;
    ds->c = CIFAR_CHANNELS;
    ds->h = CIFAR_SIDE;
    ds->w = CIFAR_SIDE;
    ds->classes = cv->classes;
    return CNT_OK;
}
