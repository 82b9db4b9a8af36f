/*
 * data/loader.h - batches for training and evaluation, prepared ahead by
 * worker threads.
 *
 * Sharding: each epoch every rank draws the same permutation from (seed,
 * epoch); rank r takes positions r, r+world, r+2*world, ... Training batches
 * are all full and every rank runs the same number of steps: the remainder
 * that does not fill a step of every rank is dropped, or with `wrap` the last
 * step is filled by continuing at the start of the permutation (positions
 * taken modulo n), so every sample is seen at least once per epoch and a few
 * twice. Evaluation
 * loaders (shuffle = 0, drop_last = 0) visit every sample of the shard exactly
 * once, the last batch possibly short.
 *
 * Images come out at the dataset's c x h x w (for image folders: the model's
 * input shape; each file is decoded by a worker thread).
 *
 * Augmentation (training, `augment`), by `crop`:
 *  - LOADER_CROP_PAD (CIFAR style): pad by `pad` with zeros, random crop back
 *    to h x w, horizontal flip with probability 1/2. An image of another size
 *    is first resized to h x w. Without augmentation: the image as it is
 *    (resized to h x w if needed).
 *  - LOADER_CROP_RESIZED (ImageNet style, torchvision's RandomResizedCrop): a
 *    crop of area scale x (image area), scale uniform in [min_scale, 1], aspect
 *    ratio log-uniform in [3/4, 4/3], at a uniform position (10 tries, then a
 *    centre crop of the largest allowed ratio), resized to h x w, flipped with
 *    probability 1/2. Without augmentation (evaluation): the shorter side is
 *    resized to floor(h x 256/224), then the centre h x w is cut out.
 * Resizing is torchvision's on PIL images: antialiased bilinear
 * (data/resample.h). JPEG files are decoded by libjpeg-turbo, only the rows
 * and columns the crop reads, and with `jpeg_scaling` at a reduced size (DCT
 * scaling) when the crop shrinks (data/image.h; without it, the decode is
 * torchvision's). All
 * randomness comes from the project's RNG seeded by (seed, epoch, rank, sample
 * position), so a batch's content does not depend on which worker thread made
 * it. Normalisation: (x/255 - mean)/std, through a table of the 256 values
 * per channel. With `u8` a batch holds the bytes instead (HWC, after crop,
 * resize and flip: a quarter of the floats' size), and the table travels
 * with it (batch.lut); train/stager.c uploads the bytes and normalises them
 * on the device (backend normalize_u8), to the same floats.
 *
 * Read order (shard sets, data/shards.h). LOADER_ORDER_RANDOM draws the
 * permutation above, as for a folder: a shard set written in the folder's
 * order then gives the folder's batches bit for bit. LOADER_ORDER_BLOCKS
 * cuts the set (in its index order) into blocks of about block_bytes, and
 * each epoch permutes the blocks, gives each rank a contiguous run of the
 * permuted blocks (n / world images; the last n % world images are shared
 * out as usual), and shuffles each rank's run within windows of
 * window_blocks blocks (FFCV's quasi-random order, WebDataset's shuffle
 * buffer): a rank reads a few large pieces of a few shards per window
 * instead of scattered images, and its batches mix window_blocks blocks.
 * Evaluation in blocks order: each rank reads its own contiguous run, in
 * order. In both orders, when a worker claims a step, the images of the
 * steps up to `prefetch` ahead (in blocks order: their windows and the next
 * window, block by block) are handed to the kernel to read ahead
 * (shards_will_need), so the workers' reads find them in memory.
 *
 * Unreadable images (file-backed sets): a file that cannot be opened or
 * decoded gets one warning naming it (the first time, per process) and is
 * counted (loader_skipped). Training batches stay full: the sample is replaced
 * by the next readable one of the rank's shard (wrapping around), augmented
 * with the original position's randomness. Evaluation batches leave it out
 * (b.n shrinks), so accuracy is over the readable images only.
 *
 * Threads: `workers` threads fill a ring of `prefetch` batches ahead of the
 * consumer; a mutex and two condition variables guard the ring (why: workers
 * finish out of order, the consumer must receive batches in order).
 */
#ifndef CNT_LOADER_H
#define CNT_LOADER_H

#include <stdint.h>
#include "common/cpus.h"
#include "common/rng.h"
#include "data/dataset.h"

typedef struct loader loader;

enum { LOADER_CROP_PAD = 0, LOADER_CROP_RESIZED = 1 };
enum { LOADER_ORDER_RANDOM = 0, LOADER_ORDER_BLOCKS = 1 };

typedef struct loader_options {
    int batch;             /* samples per batch on this rank */
    int rank, world;       /* shard: 0 <= rank < world */
    uint64_t seed;
    int shuffle;           /* 1: permutation per epoch; 0: natural order */
    int drop_last;         /* 1: every batch full (training) */
    int wrap;              /* with drop_last: instead of dropping the remainder, fill the last steps by
                              wrapping around to the start of the permutation (every sample at least once) */
    int augment;           /* 1: random crop and flip (see crop) */
    int crop;              /* LOADER_CROP_PAD or LOADER_CROP_RESIZED */
    int pad;               /* padding for the random crop (4 usual) */
    float min_scale;       /* LOADER_CROP_RESIZED: smallest crop area fraction, in (0, 1] */
    int jpeg_scaling;      /* 1: JPEGs decoded at the smallest M/8 size the crop allows (data/image.h) */
    float mean[3], std[3]; /* per channel, of pixels scaled to [0, 1] */
    int u8;                /* 1: batches of bytes (batch.u8), normalised on the compute side */
    int workers;           /* >= 1 */
    int prefetch;          /* batches ready ahead, >= 1 */
    int read_order;        /* LOADER_ORDER_RANDOM, or LOADER_ORDER_BLOCKS (shard sets only; see above) */
    uint64_t block_bytes;  /* blocks: a block is a run of images back to back in one shard, this many bytes */
    int window_blocks;     /* blocks: a rank shuffles its images within windows of this many blocks */
    struct gpu_jpeg *gpu_jpeg; /* data.decoder = nvjpeg (file-backed sets): JPEGs decoded on the GPU
                                  (data/gpu_jpeg.h, at full size), the rest (and what it refuses) on the
                                  CPU, with jpeg_scaling; NULL: all on the CPU. Must outlive the loader */
    int have_cpus;         /* 1: the worker threads run on `cpus` (input_loader_options: the GPU's NUMA
                              node); 0: on the process's CPUs (cpus_process) */
    cpus_mask cpus;
} loader_options;

typedef struct batch {
    int n;                 /* samples in this batch (<= batch) */
    float *x;              /* [n, c, h, w] host, normalised; NULL with loader_options.u8 */
    uint8_t *u8;           /* with loader_options.u8: [n, h, w, c] host bytes, cropped and flipped, not
                              normalised (backend normalize_u8 with lut makes x of them); else NULL */
    const float *lut;      /* [c][256]: the normalised value of each byte, per channel (x = lut[c][byte]) */
    int c, hw;             /* channels and pixels per image */
    int32_t *labels;       /* [n] host */
} batch;

/* Returns NULL with a message on bad options (batch < 1, rank out of range,
 * shard smaller than one batch with drop_last). The dataset must outlive it. */
loader *loader_create(const dataset *ds, const loader_options *opt);
/* Batches per epoch on this rank (identical on every rank when drop_last). */
int loader_steps_per_epoch(const loader *ld);
/* Starts preparing the batches of `epoch` (0-based). Any batch of the previous
 * epoch not yet consumed is discarded. */
void loader_start_epoch(loader *ld, int epoch);
/* Blocks until the next batch of the epoch is ready and returns it, or NULL at
 * the end of the epoch. The batch stays valid until the next call. */
const batch *loader_next(loader *ld);
/* loader_start_epoch, beginning at step first_step (0-based, clamped to
 * 0..steps) of the epoch: a run resumed from a checkpoint taken inside an
 * epoch gets the batches the uninterrupted run would have, bit for bit
 * (a sample depends only on seed, epoch, rank and its position). */
void loader_start_epoch_at(loader *ld, int epoch, int first_step);
/* torchvision's RandomResizedCrop parameters for a w x h image: the crop at
 * (*x, *y) of *cw x *ch pixels (used by the loader; exposed for tests). */
void loader_resized_crop_params(rng *r, int w, int h, float min_scale, int *x, int *y, int *cw, int *ch);

/* LOADER_ORDER_BLOCKS' permutation of one epoch (exposed for tests): n =
 * bstart[m] samples in m blocks [bstart[k], bstart[k+1]); with shuffle the
 * blocks in a random order from r (into order[m]; identity without) and
 * each rank's run of n / world samples shuffled within windows of `window`
 * samples. perm (n) is laid out for the loader's sharding: rank q takes
 * positions q, q + world, ... scratch holds n ints. */
void loader_blocks_permutation(rng *r, const int *bstart, int m, int world, int window, int shuffle, int *perm,
                               int *order, int *scratch);

/* The fewest CPUs any of the loader's threads may run on (each binds
 * itself to its CPUs, loader_options.cpus or cpus_process, when it starts), waiting up
 * to 10 s for all of them to start (-1 then); cpus (len bytes, may be NULL)
 * receives those CPUs as a list ("0-15"). */
int loader_thread_cpus(loader *ld, char *cpus, size_t len);

/* Unreadable images met since loader_start_epoch(_at) last started a pass
 * (this rank): each counted once however often it is met. */
long loader_skipped(const loader *ld);
void loader_free(loader *ld);

#endif
