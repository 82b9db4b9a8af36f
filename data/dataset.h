/*
 * data/dataset.h - data sets held in memory as 8-bit images, and their readers.
 *
 * A dataset is n images of c x h x w bytes with integer labels in [0, classes).
 * Readers: IDX files, gzipped or raw (MNIST, Fashion-MNIST, data/idx.c),
 * CIFAR-10/100 binary batches (data/cifar.c); a synthetic generator
 * (data/synthetic.c). Image folders may plug in beside them.
 *
 * Errors: readers return CNT_ERR with a message naming the file and what is
 * wrong (missing, truncated, bad magic, label/image count mismatch, label out
 * of range). On error *ds is left empty (nothing to free).
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

/* CIFAR binary batches under root, or under root/cifar-10-batches-bin or
 * root/cifar-100-binary (the first place holding the split's first file wins):
 * CIFAR-10 (data_batch_1..5.bin concatenated in order for train, test_batch.bin
 * for test; 10 classes) or CIFAR-100 (train.bin / test.bin; the fine label,
 * 100 classes). Images are 3x32x32. Errors: root missing or not a directory;
 * no split file (message lists every path tried); a missing batch; a file size
 * that is not a whole number of records (names the file and its size); a
 * label out of range (names the file and the record index). */
int dataset_load_cifar(dataset *ds, const char *root, int train);

/* n uniformly random images of c x h x w bytes with labels uniform in
 * [0, classes), from the project RNG seeded with (seed, stream); the same
 * arguments give the same data. Errors: a size < 1, classes < 2, or more than
 * 8 GiB of pixels (nothing is allocated then). */
int dataset_make_synthetic(dataset *ds, int c, int h, int w, int classes, int n, uint64_t seed,
                           uint64_t stream);

/* Keep only the first `limit` samples (limit <= 0 or >= n: no change). */
void dataset_truncate(dataset *ds, int limit);

/* Per-channel mean and standard deviation of the pixels scaled to [0, 1]. */
void dataset_channel_stats(const dataset *ds, float *mean, float *std);

void dataset_free(dataset *ds);

#endif
