/*
 * data/dataset.h - data sets held in memory as 8-bit images, and their readers.
 *
 * A dataset is n images of c x h x w bytes with integer labels in [0, classes).
 * Readers: IDX files, gzipped or raw (MNIST, Fashion-MNIST). Other formats
 * (CIFAR, image folders, synthetic) plug in beside it.
 *
 * Errors: readers return CNT_ERR with a message naming the file and what is
 * wrong (missing, truncated, bad magic, label/image count mismatch).
 */
#ifndef CNT_DATASET_H
#define CNT_DATASET_H

#include <stdint.h>

typedef struct dataset {
    int n;                 /* number of samples */
    int c, h, w;           /* image shape */
    int classes;           /* label range [0, classes) */
    uint8_t *pixels;       /* [n, c, h, w] */
    int32_t *labels;       /* [n] */
} dataset;

/* Reads an IDX image file (magic 0x00000803, [n, h, w] unsigned bytes) and an
 * IDX label file (magic 0x00000801) into ds (c = 1). Either may be gzipped
 * (detected from content, not name). classes = max label + 1, at least 2. */
int dataset_load_idx(dataset *ds, const char *images_path, const char *labels_path);

/* Fashion-MNIST / MNIST layout under root: train-images-idx3-ubyte(.gz) and
 * train-labels-idx1-ubyte(.gz) for train, t10k-* for test. classes = 10. */
int dataset_load_mnist_dir(dataset *ds, const char *root, int train);

/* Keep only the first `limit` samples (limit <= 0 or >= n: no change). */
void dataset_truncate(dataset *ds, int limit);

/* Per-channel mean and standard deviation of the pixels scaled to [0, 1]. */
void dataset_channel_stats(const dataset *ds, float *mean, float *std);

void dataset_free(dataset *ds);

#endif
