/*
 * data/dataset.h - data sets of 8-bit images with integer labels, and their
 * readers.
 *
 * A dataset is n images with labels in [0, classes), in one of two forms:
 *  - in memory: `pixels` holds n images of c x h x w bytes. Readers: IDX files,
 *    gzipped or raw (MNIST, Fashion-MNIST, data/idx.c), CIFAR-10/100 binary
 *    batches (data/cifar.c), a synthetic generator (data/synthetic.c);
 *  - file-backed (image folders, data/imagefolder.c; shard sets, the same
 *    images packed into a few large files, data/shards.h): `pixels` is NULL
 *    and sample i is the file root/names[i] (or its copy in a shard),
 *    decoded on demand by the loader's worker threads; c x h x w is then the
 *    shape the loader produces (the model's input), set with
 *    dataset_set_shape().
 *
 * Errors: readers return CNT_ERR with a message naming the file and what is
 * wrong (missing, truncated, bad magic, label/image count mismatch, label out
 * of range). On error *ds is left empty (nothing to free).
 */
#ifndef CNT_DATASET_H
#define CNT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "data/image.h"

typedef struct dataset {
    int n;                 /* number of samples */
    int c, h, w;           /* image shape (file-backed: the shape produced) */
    int classes;           /* label range [0, classes) */
    uint8_t *pixels;       /* [n, c, h, w]; NULL when file-backed */
    int32_t *labels;       /* [n] */
    /* File-backed only (NULL otherwise). */
    char *root;            /* the tree's root directory */
    char *names;           /* "class/file" paths relative to root, NUL-terminated, back to back */
    size_t names_len;      /* bytes in names */
    size_t *name_off;      /* [n] offset of sample i's path in names */
    size_t *class_off;     /* [classes] offset of class k's folder name in names (the path of its first file) */
    /* Shard sets only (data/shards.h; NULL otherwise): root is the set's
     * directory, sample i is the image at recs[i] in the open shards. */
    struct shard_rec *recs; /* [n] */
    struct shard_set *shards;
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

/* ---- image folders (data/imagefolder.c) ---- */

/* Lists an ImageNet-style tree root/<class>/<image>: classes are the
 * sub-directories, sorted by name (strcmp) and numbered from 0 as torchvision's
 * ImageFolder does; images are the files whose extension stb_image decodes
 * (jpg jpeg png bmp tga gif ppm pgm pnm psd hdr pic, any case), sorted by name
 * within a class. Hidden entries (leading '.') and other files are ignored;
 * symbolic links are followed; an image name that is not a regular file (a
 * FIFO, a device, a socket) or a link that cannot be followed is left out
 * with a warning naming it. Reads directories only (no file is opened), so a
 * tree of a million images lists in seconds. c, h, w are left 0 (see
 * dataset_set_shape). Errors: root missing or not a directory; no class
 * folder; a class folder without images (names it); more than 2^31-1 images. */
int dataset_list_imagefolder(dataset *ds, const char *root);

/* Sets the shape a file-backed dataset's images are produced in: c = 1 (grey)
 * or 3 (RGB), h = w = size. */
void dataset_set_shape(dataset *ds, int c, int size);

/* 1 when the two file-backed sets have the same class folders in the same
 * order; otherwise CNT_ERR with a message naming both roots and the first
 * class that differs (or the counts). */
int dataset_same_classes(const dataset *a, const dataset *b);

/* Path of sample i (root/class/file) into buf; truncated to n bytes. */
void dataset_sample_path(const dataset *ds, int i, char *buf, size_t n);
/* Name of class k (its folder). */
const char *dataset_class_name(const dataset *ds, int k);

/* Opens file-backed sample i for rendering with ds->c channels
 * (data/image.h: a JPEG's header only, other formats decoded whole); path
 * (path_len bytes) receives the file's name and must outlive im. Errors:
 * CNT_ERR with the path and the reason (unreadable, not a regular file
 * (refused unread, so a FIFO never blocks), not an image, corrupt, or larger
 * than IMAGE_MAX_PIXELS). Thread-safe. */
int dataset_open_image(const dataset *ds, int i, image_src *im, char *path, size_t path_len);

/* Decodes sample i whole, at its own size, with ds->c channels (grey images
 * are replicated to RGB, RGB is converted to grey by stb_image's luma rule)
 * as interleaved rows (h x w x c bytes, malloc'ed into *pix, caller frees).
 * Errors as dataset_open_image's, and a corrupt JPEG's. Thread-safe. */
int dataset_decode(const dataset *ds, int i, uint8_t **pix, int *w, int *h);

/* The listing as one byte string (so rank 0 can list and broadcast), and
 * back. dataset_unpack validates the bytes (CNT_ERR on a malformed string) and
 * leaves c, h, w 0. */
void *dataset_pack(const dataset *ds, size_t *len);
int dataset_unpack(dataset *ds, const void *buf, size_t len);

/* Per-channel mean and std (pixels scaled to [0, 1]) of up to max_images
 * images spread evenly over a file-backed dataset, decoded at their own size
 * with `threads` threads; the result does not depend on the thread count.
 * Unreadable images are left out (*unreadable counts them). Errors: CNT_ERR
 * when no image in the sample decodes. */
int dataset_estimate_stats(const dataset *ds, int max_images, int threads, float *mean, float *std,
                           int *unreadable);

/* Keep only the first `limit` samples (limit <= 0 or >= n: no change). */
void dataset_truncate(dataset *ds, int limit);

/* Per-channel mean and standard deviation of the pixels scaled to [0, 1]. */
void dataset_channel_stats(const dataset *ds, float *mean, float *std);

void dataset_free(dataset *ds);

#endif
