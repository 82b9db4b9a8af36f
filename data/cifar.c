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
 * CIFAR-100 has train.bin and test.bin. Only regular files are read (a FIFO
 * or device in a file's place is refused unread, common/fileio.h); every
 * file's size must be a whole number of records and every label must be in
 * range; errors name the file.
 */
#include "data/dataset.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/check.h"
#include "common/fileio.h"

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

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* dir + "/" + name into out; CNT_ERR when it does not fit. */
static int join_path(char out[CIFAR_PATH_MAX], const char *dir, const char *name) {
    int len = snprintf(out, CIFAR_PATH_MAX, "%s/%s", dir, name);
    if (len < 0 || len >= CIFAR_PATH_MAX) return cnt_err_set("dataset path too long: %s/%s", dir, name);
    return CNT_OK;
}

/* Finds the directory and variant for the split: the first of root,
 * root/<subdir> whose first file of the split exists (of whatever kind: a
 * FIFO or directory in its place is then refused by name when opened). */
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
            if (file_exists(path)) {
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

/* Opens path (a regular file only: common/fileio.h) and counts its records
 * of rec_size bytes from the open file's size, checked to be whole and
 * non-zero. On success *f is the open stream. */
static int cifar_open(const char *path, size_t rec_size, FILE **f, long *records) {
    uint64_t size = 0;
    *f = file_open_regular(path, "CIFAR file", &size);
    if (!*f) return CNT_ERR;
    int rc = CNT_OK;
    if (size == 0)
        rc = cnt_err_set("%s: empty file, expected records of %zu bytes", path, rec_size);
    else if (size % rec_size != 0)
        rc = cnt_err_set("%s: size %llu bytes is not a multiple of the %zu-byte record (truncated file?)", path,
                         (unsigned long long)size, rec_size);
    if (rc != CNT_OK) {
        fclose(*f);
        *f = NULL;
        return rc;
    }
    *records = (long)(size / rec_size);
    return CNT_OK;
}

/* Reads `records` records of f (path, for messages) into ds at sample offset `at`. */
static int cifar_read(FILE *f, const char *path, const cifar_variant *cv, long records, dataset *ds, long at) {
    size_t rec_size = (size_t)cv->label_bytes + CIFAR_PIXELS;
    unsigned char rec[2 + CIFAR_PIXELS];
    for (long i = 0; i < records; i++) {
        if (fread(rec, 1, rec_size, f) != rec_size)
            return cnt_err_set("%s: %s at record %ld of %ld", path, ferror(f) ? "read error" : "unexpected end of file",
                               i, records);
        int label = rec[cv->label_bytes - 1];
        if (cv->coarse_classes > 0 && rec[0] >= cv->coarse_classes)
            return cnt_err_set("%s: record %ld has coarse label %d, expected 0..%d", path, i, rec[0],
                               cv->coarse_classes - 1);
        if (label >= cv->classes)
            return cnt_err_set("%s: record %ld has label %d, expected 0..%d", path, i, label, cv->classes - 1);
        ds->labels[at + i] = label;
        memcpy(ds->pixels + (size_t)(at + i) * CIFAR_PIXELS, rec + cv->label_bytes, CIFAR_PIXELS);
    }
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

    /* Every file is opened, and its record count taken from the open file,
     * before anything is allocated: the count read is the count of the file
     * read. */
    int nfiles = 0;
    char paths[CIFAR_MAX_FILES][CIFAR_PATH_MAX];
    FILE *files[CIFAR_MAX_FILES] = {NULL};
    long counts[CIFAR_MAX_FILES], total = 0;
    int rc = CNT_OK;
    for (; names[nfiles] && rc == CNT_OK; nfiles++) {
        rc = join_path(paths[nfiles], dir, names[nfiles]);
        if (rc == CNT_OK) rc = cifar_open(paths[nfiles], rec_size, &files[nfiles], &counts[nfiles]);
        if (rc == CNT_OK) {
            total += counts[nfiles];
            if (total > INT_MAX) rc = cnt_err_set("%s: more than %d records in all", paths[nfiles], INT_MAX);
        }
    }
    if (rc == CNT_OK) {
        ds->pixels = malloc((size_t)total * CIFAR_PIXELS);
        ds->labels = malloc((size_t)total * sizeof *ds->labels);
        if (!ds->pixels || !ds->labels) rc = cnt_err_set("%s: cannot allocate %ld %s images", dir, total, cv->name);
    }
    long at = 0;
    for (int i = 0; i < nfiles && rc == CNT_OK; i++) {
        rc = cifar_read(files[i], paths[i], cv, counts[i], ds, at);
        at += counts[i];
    }
    for (int i = 0; i < nfiles; i++)
        if (files[i]) fclose(files[i]);
    if (rc != CNT_OK) {
        dataset_free(ds);
        return CNT_ERR;
    }
    ds->n = (int)total;
    ds->c = CIFAR_CHANNELS;
    ds->h = CIFAR_SIDE;
    ds->w = CIFAR_SIDE;
    ds->classes = cv->classes;
    return CNT_OK;
}
