/*
 * train/input.h - the configured data set, ready for the loaders: reading or
 * listing it ([data] kind, root, train_root, val_root), the model input shape
 * (image_size, channels), normalisation (mean, std), crop style and the loader
 * options derived from the config. Shared by training and --bench-data.
 *
 * Image folders are listed by rank 0 only and the listing broadcast, so every
 * rank sees the same samples in the same order even if the file system
 * changes meanwhile; rank 0 also estimates mean/std (data.mean = auto) and
 * broadcasts them. input_load is therefore collective when world > 1.
 *
 * Errors: CNT_ERR with a message naming the path or key (missing root, empty
 * class folder, no images, train/val classes that differ).
 */
#ifndef CNT_INPUT_H
#define CNT_INPUT_H

#include "data/dataset.h"
#include "data/loader.h"
#include "train/config.h"

typedef struct input_data {
    dataset train, test;
    float mean[3], std[3];
    int crop;              /* LOADER_CROP_PAD or LOADER_CROP_RESIZED */
    struct gpu_jpeg *gpu_jpeg; /* data.decoder = nvjpeg: input_open_decoder's; NULL: the CPU decodes */
} input_data;

int input_load(const config *cfg, input_data *d);
/* The same for scoring weights (trainer --eval): an image folder's or shard
 * set's training split is neither listed nor required (d->train stays empty)
 * unless data.mean or data.std is auto, whose estimate needs it (d->train.classes
 * is then 0: the model's class count is the test split's). */
int input_load_test(const config *cfg, input_data *d);
void input_free(input_data *d);

/* data.decoder: with nvjpeg (and a file-backed set), opens nvJPEG on CUDA
 * device `device` (-1: the calling thread's current one, the backend's once
 * it is chosen) into d->gpu_jpeg and logs what decodes. CNT_ERR naming the
 * key when nvJPEG is not built in or cannot start. */
int input_open_decoder(const config *cfg, input_data *d, int device);

/* Loader options for training (shuffled, augmented, full batches) and for
 * evaluation (natural order, no augmentation, every sample once; batches of
 * train.eval_batch_size, or train.batch_size, but never more than a rank's
 * shard of the test set). be: the backend the batches go to (NULL: none
 * yet), which data.batch_dtype = auto needs (config_batch_u8). */
void input_loader_options(const config *cfg, const input_data *d, const backend *be, int rank, int world,
                          loader_options *train, loader_options *eval);

/* The CPUs the loader threads of a rank on be's device run on (an 8-GPU node
 * has two or more NUMA nodes, each GPU local to one): the process's CPUs
 * narrowed to the device's NUMA node (cpus_of_pci under sysfs, normally
 * "/sys"). 1 with *m set where that is some but not all of the process's;
 * 0 where it is not (no PCI device, no NUMA information, the process's CPUs
 * lie within the node or outside it). why (len bytes, may be NULL) says
 * which, as a clause for the log; *outside is 1 in the last case (the rank
 * was bound away from its GPU, by mpirun or a scheduler). */
int input_loader_cpus(const backend *be, const char *sysfs, cpus_mask *m, int *outside, char *why, size_t len);

#endif
