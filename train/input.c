/*
 * train/input.c - the configured data set (see train/input.h).
 */
#include "train/input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "data/gpu_jpeg.h"
#include "data/shards.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "model/zoo.h"

/* RNG streams of the synthetic data set; other consumers of train.seed use
 * their own streams, so the data does not repeat the initialisation. */
enum { SYNTHETIC_STREAM_TRAIN = 0x5d7a0001, SYNTHETIC_STREAM_TEST = 0x5d7a0002 };

/* Images of an image folder estimated for data.mean / data.std = auto. */
#define STATS_IMAGES 1024

static int load_in_memory(const config *cfg, input_data *d, int with_train) {
    switch (cfg->data_kind) {
    case DATA_KIND_IDX:
        if (with_train && dataset_load_mnist_dir(&d->train, cfg->data_root, 1) != CNT_OK) return CNT_ERR;
        return dataset_load_mnist_dir(&d->test, cfg->data_root, 0);
    case DATA_KIND_CIFAR:
        if (with_train && dataset_load_cifar(&d->train, cfg->data_root, 1) != CNT_OK) return CNT_ERR;
        return dataset_load_cifar(&d->test, cfg->data_root, 0);
    case DATA_KIND_SYNTHETIC: {
        /* Train and test are two streams of the same seed: different images. */
        int c, h, w;
        if (config_synthetic_shape(cfg, &c, &h, &w) != CNT_OK) return CNT_ERR;
        if (with_train && dataset_make_synthetic(&d->train, c, h, w, cfg->synthetic_classes, cfg->synthetic_train,
                                                 cfg->seed, SYNTHETIC_STREAM_TRAIN) != CNT_OK)
            return CNT_ERR;
        return dataset_make_synthetic(&d->test, c, h, w, cfg->synthetic_classes, cfg->synthetic_test, cfg->seed,
                                      SYNTHETIC_STREAM_TEST);
    }
    case DATA_KIND_IMAGEFOLDER:
    case DATA_KIND_SHARDS: break; /* file-backed: list_folders, open_shard_sets */
    }
    return cnt_err_set("data.kind '%s' is not an in-memory data set", config_name(cfg, &cfg->data_kind));
}

static void folder_path(char *out, size_t n, const char *given, const char *root, const char *sub) {
    if (given[0])
        snprintf(out, n, "%s", given);
    else
        snprintf(out, n, "%s/%s", root, sub);
}

/* Rank 0 lists both trees (and checks their classes agree), or the test tree
 * alone (with_train 0), then broadcasts the listings; every rank returns the
 * same sets or the same failure. */
static int list_folders(const config *cfg, input_data *d, int with_train) {
    char train_root[CONFIG_STR + 16], val_root[CONFIG_STR + 16];
    folder_path(train_root, sizeof train_root, cfg->train_root, cfg->data_root, "train");
    folder_path(val_root, sizeof val_root, cfg->val_root, cfg->data_root, "val");
    int64_t lens[2] = {-1, -1};
    void *packed[2] = {NULL, NULL};
    int rc = CNT_OK;
    if (dist_rank() == 0) {
        double t0 = time_now();
        if (with_train) rc = dataset_list_imagefolder(&d->train, train_root);
        if (rc == CNT_OK) rc = dataset_list_imagefolder(&d->test, val_root);
        if (rc != CNT_OK && access(with_train && !d->train.root ? train_root : val_root, F_OK) != 0) {
            rc = cnt_err_suffix("; set data.root to the folder holding %s (or %s), or use data.kind=synthetic for "
                                "a run without data",
                                with_train ? "train/ and val/" : "val/", with_train ? "data.train_root and "
                                "data.val_root" : "data.val_root");
        }
        if (rc == CNT_OK && with_train) rc = dataset_same_classes(&d->train, &d->test);
        if (rc == CNT_OK) {
            if (with_train)
                log_info("data: listed %s (%d images in %d classes) and %s (%d images) in %.2f s", train_root,
                         d->train.n, d->train.classes, val_root, d->test.n, time_now() - t0);
            else
                log_info("data: listed only %s (%d images in %d classes) in %.2f s", val_root, d->test.n,
                         d->test.classes, time_now() - t0);
            if (dist_world() > 1) {
                size_t l0 = 0, l1;
                if (with_train) packed[0] = dataset_pack(&d->train, &l0);
                packed[1] = dataset_pack(&d->test, &l1);
                lens[0] = (int64_t)l0;
                lens[1] = (int64_t)l1;
            }
        }
    }
    if (dist_world() == 1) return rc;
    dist_phase("start-up: image folder listing");
    dist_broadcast(lens, sizeof lens, 0);
    if (lens[1] < 0) {
        if (dist_rank() == 0) return rc;
        if (!with_train)
            return cnt_err_set("rank 0 could not list the image folder %s (its message says why)", val_root);
        return cnt_err_set("rank 0 could not list the image folders %s and %s (its message says why)", train_root,
                           val_root);
    }
    for (int i = with_train ? 0 : 1; i < 2; i++) {
        if (dist_rank() != 0) packed[i] = cnt_malloc((size_t)lens[i]);
        dist_broadcast(packed[i], (size_t)lens[i], 0);
    }
    if (dist_rank() != 0) {
        if (with_train) rc = dataset_unpack(&d->train, packed[0], (size_t)lens[0]);
        if (rc == CNT_OK) rc = dataset_unpack(&d->test, packed[1], (size_t)lens[1]);
    }
    free(packed[0]);
    free(packed[1]);
    return rc;
}

/* Every rank opens both shard sets itself, or the test set alone (with_train
 * 0): one sequential read of each index, no listing to broadcast; then the
 * ranks compare, so that all fail together, naming the rank that could not
 * open them, or that sees another copy of the data (a different set id). */
static int open_shard_sets(const config *cfg, input_data *d, int with_train) {
    char train_root[CONFIG_STR + 16], val_root[CONFIG_STR + 16];
    folder_path(train_root, sizeof train_root, cfg->train_root, cfg->data_root, "train");
    folder_path(val_root, sizeof val_root, cfg->val_root, cfg->data_root, "val");
    double t0 = time_now();
    uint64_t ids[2] = {0, 0};
    int rc = with_train ? dataset_open_shards(&d->train, train_root, &ids[0]) : CNT_OK;
    if (rc == CNT_OK) rc = dataset_open_shards(&d->test, val_root, &ids[1]);
    if (rc != CNT_OK) {
        const char *failed = with_train && !d->train.root ? train_root : val_root;
        char index[CONFIG_STR + 32];
        snprintf(index, sizeof index, "%s/%s", failed, SHARDS_INDEX);
        if (access(failed, F_OK) != 0)
            cnt_err_suffix("; set data.root to the folder holding the train/ and val/ shard sets (or data.train_root "
                           "and data.val_root); build/tools/make_shards writes them from image folders");
        else if (access(index, F_OK) != 0)
            cnt_err_suffix("; %s is not a shard set: build/tools/make_shards packs an image folder into one, and "
                           "data.kind=imagefolder reads image folders", failed);
    }
    if (rc == CNT_OK && with_train) rc = dataset_same_classes(&d->train, &d->test);
    int world = dist_world();
    if (world > 1) {
        dist_phase("start-up: opening the shard sets");
        uint64_t *all = cnt_malloc(3 * (size_t)world * sizeof *all);
        dist_allgather_u64(rc == CNT_OK, all);
        dist_allgather_u64(ids[0], all + world);
        dist_allgather_u64(ids[1], all + 2 * world);
        for (int q = 0; q < world && rc == CNT_OK; q++) {
            if (!all[q])
                rc = cnt_err_set("rank %d could not open the shard sets %s and %s (its message says why)", q,
                                 train_root, val_root);
            else if (all[world + q] != all[world] || all[2 * world + q] != all[2 * world])
                rc = cnt_err_set("rank %d reads other shard sets at %s and %s than rank 0 (a different copy on its "
                                 "node?): every rank must read the same sets",
                                 q, train_root, val_root);
        }
        free(all);
    }
    if (rc == CNT_OK && with_train)
        log_info("data: opened the shard sets %s (%d images in %d classes, %d shards) and %s (%d images) in %.2f s",
                 train_root, d->train.n, d->train.classes, shards_count(&d->train), val_root, d->test.n,
                 time_now() - t0);
    else if (rc == CNT_OK)
        log_info("data: opened only the shard set %s (%d images in %d classes, %d shards) in %.2f s", val_root,
                 d->test.n, d->test.classes, shards_count(&d->test), time_now() - t0);
    return rc;
}

/* data.mean / data.std = auto on an image folder: rank 0 estimates them from
 * a sample and broadcasts them, so every rank normalises identically. */
static int folder_stats(const config *cfg, input_data *d) {
    float v[7] = {0};  /* mean[3], std[3], status */
    if (dist_rank() == 0) {
        int unreadable = 0;
        double t0 = time_now();
        int threads = cfg->workers > 2 ? cfg->workers : 2;
        if (dataset_estimate_stats(&d->train, STATS_IMAGES, threads, v, v + 3, &unreadable) == CNT_OK) {
            v[6] = 1;
            /* as keys, for --eval without the training set or a run that should not estimate again */
            char keys[2][64];
            for (int k = 0; k < 2; k++) {
                int o = 0;
                for (int c = 0; c < d->train.c && c < 3; c++)
                    o += snprintf(keys[k] + o, sizeof keys[k] - (size_t)o, "%s%.6g", c ? "," : "",
                                  (double)v[3 * k + c]);
            }
            log_info("data: mean/std estimated from %d images in %.2f s%s: data.mean=%s data.std=%s",
                     d->train.n < STATS_IMAGES ? d->train.n : STATS_IMAGES, time_now() - t0,
                     unreadable ? " (some unreadable ones left out)" : "", keys[0], keys[1]);
        }
    }
    dist_phase("start-up: data statistics");
    dist_broadcast(v, sizeof v, 0);
    if (v[6] != 1) {
        if (dist_rank() == 0) return CNT_ERR; /* dataset_estimate_stats said why */
        return cnt_err_set("rank 0 could not estimate data.mean/data.std from %s", d->train.root);
    }
    memcpy(d->mean, v, sizeof d->mean);
    memcpy(d->std, v + 3, sizeof d->std);
    return CNT_OK;
}

/* input_load, and with test_only input_load_test: the training split is
 * left out unless mean or std is auto. */
static int load(const config *cfg, input_data *d, int test_only) {
    memset(d, 0, sizeof *d);
    int folder = config_file_backed(cfg);
    float mean[3], std[3];
    int mean_auto, std_auto;
    if (config_norm_values(cfg, 0, mean, &mean_auto) != CNT_OK || config_norm_values(cfg, 1, std, &std_auto) != CNT_OK)
        return CNT_ERR;
    int with_train = !(test_only && !mean_auto && !std_auto);
    int rc;
    if (folder) {
        rc = cfg->data_kind == DATA_KIND_SHARDS ? open_shard_sets(cfg, d, with_train)
                                                : list_folders(cfg, d, with_train);
        if (rc == CNT_OK) {
            /* 0: the side torchvision trains the model at (299 for inception_v3) */
            int zc, zh, zw;
            zoo_imagenet_shape(cfg->model_name, &zc, &zh, &zw);
            int size = cfg->image_size ? cfg->image_size : zh;
            int c = cfg->channels ? cfg->channels : 3;
            dataset_set_shape(&d->train, c, size);
            dataset_set_shape(&d->test, c, size);
        }
    } else {
        /* data.image_size and data.channels apply to image folders only. */
        rc = load_in_memory(cfg, d, with_train);
        if (rc == CNT_OK && (d->test.c > 3 || (with_train && (d->test.c != d->train.c || d->test.h != d->train.h ||
                                                               d->test.w != d->train.w))))
            rc = cnt_err_set("%s %s: test images are %dx%dx%d but training images are %dx%dx%d (at most 3 "
                             "channels)",
                             config_name(cfg, &cfg->data_kind), cfg->data_root, d->test.c, d->test.h, d->test.w, d->train.c,
                             d->train.h, d->train.w);
    }
    if (rc != CNT_OK && test_only && with_train && !d->train.n)
        cnt_err_suffix(" (data.mean or data.std is auto: they are estimated from the training set; give both, as "
                       "the training run logged them, to score without it)");
    if (rc != CNT_OK) {
        input_free(d);
        return CNT_ERR;
    }
    dataset_truncate(&d->train, cfg->train_limit);
    dataset_truncate(&d->test, cfg->test_limit);

    if (mean_auto || std_auto) {
        /* Normalise with the training set's own statistics. */
        if (folder) {
            if (folder_stats(cfg, d) != CNT_OK) {
                input_free(d);
                return CNT_ERR;
            }
        } else {
            dataset_channel_stats(&d->train, d->mean, d->std);
        }
        for (int c = 0; c < d->train.c; c++)
            if (d->std[c] < 1e-6f) d->std[c] = 1.0f;
    }
    if (!mean_auto) memcpy(d->mean, mean, sizeof mean);
    if (!std_auto) memcpy(d->std, std, sizeof std);
    d->crop = config_crop(cfg);
    return CNT_OK;
}

int input_load(const config *cfg, input_data *d) { return load(cfg, d, 0); }

int input_load_test(const config *cfg, input_data *d) { return load(cfg, d, 1); }

void input_free(input_data *d) {
    dataset_free(&d->train);
    dataset_free(&d->test);
    gpu_jpeg_free(d->gpu_jpeg);
    d->gpu_jpeg = NULL;
}

int input_open_decoder(const config *cfg, input_data *d, int device) {
    if (cfg->decoder != DATA_DECODER_NVJPEG || !config_file_backed(cfg)) return CNT_OK;
    if (!(d->gpu_jpeg = gpu_jpeg_create(device))) return cnt_err_prefix("data.decoder = nvjpeg");
    log_info("data: JPEGs decoded by the %s (data.decoder = nvjpeg); other images and what it refuses on the CPU",
             gpu_jpeg_describe(d->gpu_jpeg));
    return CNT_OK;
}

int input_loader_cpus(const backend *be, const char *sysfs, cpus_mask *m, int *outside, char *why, size_t len) {
    char bus[64], mine[128], nodecpus[128];
    cpus_mask proc, local;
    if (outside) *outside = 0;
    if (why && len) why[0] = '\0';
    cpus_process(&proc);
    cpus_format(&proc, mine, sizeof mine);
    if (!backend_pci_bus_id(be, bus, sizeof bus)) {
        if (why) snprintf(why, len, "the process's CPUs %s", mine);
        return 0;
    }
    if (!cpus_of_pci(sysfs, bus, &local)) {
        if (why) snprintf(why, len, "the process's CPUs %s (no NUMA node known for the GPU at PCI %s)", mine, bus);
        return 0;
    }
    cpus_format(&local, nodecpus, sizeof nodecpus);
    int both = cpus_and(m, &proc, &local), all = cpus_count(&proc);
    if (both == 0) {
        if (outside) *outside = 1;
        if (why)
            snprintf(why, len, "the process's CPUs %s, none of them on the NUMA node of its GPU (PCI %s: CPUs %s)",
                     mine, bus, nodecpus);
        return 0;
    }
    if (both == all) {
        if (why) snprintf(why, len, "the process's CPUs %s, on the NUMA node of its GPU (PCI %s)", mine, bus);
        return 0;
    }
    char got[128];
    cpus_format(m, got, sizeof got);
    if (why)
        snprintf(why, len, "CPUs %s, those of the process's %s on the NUMA node of its GPU (PCI %s)", got, mine, bus);
    return 1;
}

void input_loader_options(const config *cfg, const input_data *d, const backend *be, int rank, int world,
                          loader_options *train, loader_options *eval) {
    loader_options lo = {.batch = cfg->batch_size, .rank = rank, .world = world, .seed = cfg->seed, .shuffle = 1,
                         .drop_last = 1, .wrap = cfg->remainder == DATA_REMAINDER_WRAP, .augment = cfg->augment,
                         .crop = d->crop, .pad = cfg->pad, .min_scale = cfg->min_scale,
                         .jpeg_scaling = cfg->jpeg_scaling, .u8 = config_batch_u8(cfg, be), .workers = cfg->workers,
                         .prefetch = cfg->prefetch, .read_order = cfg->read_order,
                         .block_bytes = (uint64_t)cfg->block_mb << 20, .window_blocks = cfg->shuffle_blocks,
                         .gpu_jpeg = d->gpu_jpeg};
    memcpy(lo.mean, d->mean, sizeof lo.mean);
    memcpy(lo.std, d->std, sizeof lo.std);
    if (be) lo.have_cpus = input_loader_cpus(be, "/sys", &lo.cpus, NULL, NULL, 0);
    *train = lo;
    *eval = lo;
    eval->batch = cfg->eval_batch_size > 0 ? cfg->eval_batch_size : cfg->batch_size;
    /* No larger than this rank's shard of the test set: the net's buffers are
     * sized for the largest batch, and an evaluation batch beyond the shard
     * would only hold memory (gigabytes for a large train.eval_batch_size). */
    int shard = (d->test.n + world - 1) / world;
    if (shard < 1) shard = 1;
    if (eval->batch > shard) eval->batch = shard;
    eval->shuffle = 0;
    eval->drop_last = 0;
    eval->wrap = 0;
    eval->augment = 0;
    /* Decoding files is the expensive part: evaluation gets the same workers. */
    eval->workers = d->test.pixels ? 1 : cfg->workers;
}
