/*
 * train/config.h - the run configuration: one table of keys drives parsing,
 * validation, `--help` and the README's reference.
 *
 * Sources, in order: defaults from the table, the INI file (parsed with inih),
 * then `section.key=value` overrides from the command line. Strict: an unknown
 * section or key, a duplicate key in the file, a value of the wrong type, with
 * trailing junk, or out of range is an error naming file:line (or the override)
 * and the key.
 *
 * Enumerated values are parsed into enums here and nowhere else; the
 * config_*_opts functions below turn the configuration into the small option
 * structs the modules take, resolving each "auto" that depends on the
 * configuration alone (those that depend on the machine are resolved where it
 * is known: train.device and train.layout by model/backend.h, dist.backend by
 * the trainer, data.mean/std by train/input.c).
 *
 * Errors: functions returning int give CNT_OK, or CNT_ERR with the message in
 * cnt_err_msg(); the caller (train/main.c) prints it and exits with code 2.
 */
#ifndef CNT_CONFIG_H
#define CNT_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "data/loader.h"
#include "dist/exchange.h"
#include "dist/reducer.h"
#include "model/backend.h"
#include "model/zoo.h"
#include "train/loss_scale.h"
#include "train/optim.h"
#include "train/step.h"

#define CONFIG_STR 512
#define CONFIG_MAX_MILESTONES SCHEDULE_MAX_MILESTONES
/* dist.bucket_mb's default, and the size used with auto until the trainer has chosen. */
#define CONFIG_BUCKET_MB_DEFAULT 25.0
/* train.activations = auto (config_activations). */
#define CONFIG_ACT_AUTO (-1)
/* train.conv_api = auto: what the backend runs fastest (config_conv_api) */
#define CONFIG_CONV_API_AUTO (-1)

/* Enumerated keys are stored as enums, parsed once by the key table; where a
 * module owns the concept its enum is used (backend_math, backend_layout,
 * backend_device, loss_scale_mode, lr_schedule, reducer_compress, dist_mode,
 * dist_backend). These are
 * the ones only the configuration has. */
typedef enum data_kind {
    DATA_KIND_IDX, DATA_KIND_CIFAR, DATA_KIND_IMAGEFOLDER, DATA_KIND_SHARDS, DATA_KIND_SYNTHETIC
} data_kind;
typedef enum data_crop { DATA_CROP_AUTO, DATA_CROP_PAD, DATA_CROP_RESIZED } data_crop;
typedef enum data_batch_dtype { DATA_BATCH_AUTO, DATA_BATCH_UINT8, DATA_BATCH_FP32 } data_batch_dtype;
typedef enum data_remainder { DATA_REMAINDER_DROP, DATA_REMAINDER_WRAP } data_remainder;
typedef enum data_decoder { DATA_DECODER_AUTO, DATA_DECODER_CPU, DATA_DECODER_NVJPEG } data_decoder;
typedef enum warmup_from { WARMUP_FROM_ZERO, WARMUP_FROM_LR } warmup_from;
typedef enum lr_scaling { LR_SCALING_LINEAR, LR_SCALING_NONE } lr_scaling;
typedef enum optim_kind { OPTIM_SGD, OPTIM_LARS } optim_kind;
/* checkpoint.resume: "none", "auto", or a checkpoint file's path. */
typedef enum resume_mode { RESUME_NONE, RESUME_AUTO, RESUME_FILE } resume_mode;

typedef struct config {
    /* [model] */
    char model_name[CONFIG_STR];     /* zoo name */
    int zero_init_residual;          /* bool */
    int aux_logits;                  /* bool, inception_v3 */
    float dropout;                   /* < 0: the model's default */
    char init_from[CONFIG_STR];      /* safetensors file to start from; "": random init */

    /* [data] */
    data_kind data_kind;
    char data_root[CONFIG_STR];      /* directory holding the data set (idx, cifar, imagefolder, shards) */
    char train_root[CONFIG_STR];     /* imagefolder tree or shard set for training; "": data_root/train */
    char val_root[CONFIG_STR];       /* imagefolder tree or shard set for validation; "": data_root/val */
    int image_size;                  /* model input side; 0: from the data / 224 (299 inception_v3) */
    int channels;                    /* model input channels 1 or 3; 0: from the data / 3 */
    int train_limit;                 /* 0: all training samples */
    int test_limit;                  /* 0: all test samples */
    int augment;                     /* bool: random crop and flip of training images */
    int jpeg_scaling;                /* bool: JPEGs decoded at a reduced size when the crop allows */
    data_decoder decoder;            /* who decodes JPEGs; auto: the CPU (until nvJPEG is measured) */
    data_crop crop;                  /* auto: config_crop */
    data_batch_dtype batch_dtype;    /* auto: config_batch_u8 */
    int pad;                         /* crop padding (crop = pad) */
    float min_scale;                 /* smallest crop area fraction (crop = resized) */
    char mean[CONFIG_STR];           /* "auto" or per-channel list */
    char std[CONFIG_STR];            /* "auto" or per-channel list */
    int workers;                     /* loader threads */
    float wait_warn;                 /* share of the time waiting for batches that is warned about; 0: off */
    int prefetch;                    /* batches ready ahead */
    data_remainder remainder;        /* training samples that do not fill a step */
    int read_order;                  /* LOADER_ORDER_RANDOM or _BLOCKS (shards) */
    int block_mb;                    /* read_order = blocks: block size */
    int shuffle_blocks;              /* read_order = blocks: blocks a rank shuffles together */
    char synthetic_shape[CONFIG_STR]; /* "CxHxW" (synthetic) */
    int synthetic_classes;           /* label range (synthetic) */
    int synthetic_train;             /* training samples (synthetic) */
    int synthetic_test;              /* test samples (synthetic) */

    /* [train] */
    backend_device device;
    backend_math precision;
    backend_layout layout;           /* auto: backend_layout_choose */
    int activations;                 /* CONFIG_ACT_AUTO or a backend_dtype: config_activations */
    int fuse;                        /* bool: batch norm + add + ReLU in one op (net_set_fusion) */
    int cuda_graph;                  /* bool: record the step and replay it (step_opts.cuda_graph) */
    int conv_api;                    /* CONFIG_CONV_API_AUTO or a backend_conv_api: config_conv_api */
    loss_scale_mode loss_scaling;    /* auto: config_loss_scale_opts */
    float loss_scale;                /* static scale, or the dynamic scale's start */
    int loss_scale_window;           /* dynamic: overflow-free steps before the scale doubles */
    int epochs;
    long max_steps;                  /* 0: no limit */
    int batch_size;                  /* per rank and micro-batch */
    int accumulate;                  /* micro-batches per optimizer step (gradient accumulation) */
    int eval_batch_size;             /* 0: batch_size */
    uint64_t seed;
    int log_every;                   /* steps between progress lines */
    char out_dir[CONFIG_STR];        /* metrics.jsonl and the effective config go here */
    int tensorboard;                 /* bool: TensorBoard event files in out_dir too (train/tensorboard.h) */
    int threads;                     /* CPU compute threads, 0: all cores */
    float label_smoothing;
    float aux_weight;                /* weight of the auxiliary loss (inception_v3) */
    int memory_check;                /* bool: refuse a run whose memory estimate exceeds what is available */
    char emulate_compute[CONFIG_STR]; /* step profile whose times the run sleeps instead of computing
                                       * (train/emulate.h); "": real compute */

    /* [optim] */
    optim_kind optim;                /* optim.name */
    float lars_eta;                  /* LARS's trust coefficient */
    float lr;                        /* per-worker base learning rate */
    float momentum;
    int nesterov;                    /* bool */
    float weight_decay;
    int wd_on_bn_bias;               /* bool: apply weight decay to BN and bias parameters too */
    lr_schedule schedule;
    int milestones[CONFIG_MAX_MILESTONES]; /* epochs, ascending (step schedule) */
    int n_milestones;
    float gamma;                     /* step schedule factor */
    float warmup_epochs;             /* linear warm-up length, may be fractional */
    warmup_from warmup_start;        /* where the warm-up ramp starts */
    float min_lr;                    /* cosine and poly floor */
    float poly_power;                /* poly schedule's exponent */
    lr_scaling lr_scaling;

    /* [dist] */
    dist_mode dist_mode;             /* allreduce or ps */
    int ps_servers;                  /* dist.mode = ps: the last ps_servers ranks hold the parameters */
    int ps_sync;                     /* bool: synchronous servers; false: asynchronous */
    int ps_max_staleness;            /* asynchronous: how many steps a worker may run ahead of the slowest; -1: any */
    dist_backend dist_backend;       /* auto: decided at run time (dist/exchange_allreduce.c) */
    int overlap;                     /* bool: allreduce buckets during backward */
    int buckets_in_flight;           /* ring and hier: buckets whose allreduces move at once */
    dist_progress progress;          /* how the ring's thread waits for the network (dist_set_progress) */
    int comm_nice;                   /* the communication thread's nice below the process's (reducer_opts) */
    float bucket_mb;                 /* bucket size, MiB; 0: auto (the trainer chooses at start-up) */
    char bucket_profile[CONFIG_STR]; /* dist.bucket_mb = auto: the step profile read; "": emulate_compute's */
    float first_bucket_mb;           /* first bucket size, MiB */
    char timeline[CONFIG_STR];       /* Chrome-trace file, relative: inside out_dir; "": off */
    char timeline_steps[CONFIG_STR]; /* "A:B": the steps the timeline records; "": all */
    reducer_compress compress;       /* gradient format on the wire */
    int powersgd_rank;               /* compress = powersgd: r */
    int powersgd_start;              /* compress = powersgd: steps summed uncompressed first */
    int powersgd_threads;            /* compress = powersgd: its arithmetic's threads; 0: auto */
    float stall_warn_s;              /* warn when a collective waits this long; 0: off */
    float stall_abort_s;             /* end the job when a collective waits this long; 0: off */

    /* [checkpoint] */
    char ckpt_dir[CONFIG_STR];       /* relative: inside out_dir */
    int ckpt_every;                  /* epochs between checkpoints, 0: never */
    long ckpt_every_steps;           /* steps between checkpoints (inside epochs too), 0: never */
    int ckpt_keep;                   /* 0: keep all */
    int ckpt_keep_best;              /* best.cnt: the best test top-1's checkpoint (train/checkpoint.h) */
    char ckpt_resume[CONFIG_STR];    /* "none", "auto" or a path: config_resume */
} config;

/* Fills every field with the table's default. */
void config_defaults(config *cfg);
/* Applies an INI file over cfg. CNT_ERR with a message naming the file (and
 * line) when it cannot be opened, is not a regular file (a FIFO, directory or
 * device is refused before it is read), or holds an error; cfg is then left
 * as it was. */
int config_load(config *cfg, const char *path);
/* Applies one "section.key=value" override. */
int config_override(config *cfg, const char *arg);
/* Checks relations between keys (e.g. milestones ascending). */
int config_validate(const config *cfg);
/* dist.timeline_steps as steps [*first, *last] (1 and LONG_MAX when empty);
 * CNT_ERR naming the key when it is not "A:B" with 1 <= A <= B. */
int config_timeline_window(const config *cfg, long *first, long *last);

/* Parses an image shape "CxHxW" (C in 1..3, H and W in 1..4096) into *c, *h,
 * *w. Errors: CNT_ERR with a message quoting the value. */
int config_parse_shape(const char *s, int *c, int *h, int *w);
/* Parses data.synthetic_shape with config_parse_shape. Errors: CNT_ERR with a
 * message naming data.synthetic_shape and the value; config_validate() reports
 * the same error. */
int config_synthetic_shape(const config *cfg, int *c, int *h, int *w);
/* Parses data.mean or data.std ("auto", or 1 or 3 comma-separated numbers)
 * into v[0..2] (one number is used for every channel); *is_auto is set for
 * "auto". Errors: CNT_ERR naming the key and the value. */
int config_norm_values(const config *cfg, int want_std, float v[3], int *is_auto);
/* The same for a value s of `key` given elsewhere (a file's metadata): *n
 * gets how many numbers s holds, 1 or 3, or 0 for "auto". */
int config_norm_parse(const char *key, const char *s, int want_std, float v[3], int *n);
/* v[0..n) as data.mean or data.std takes them: comma-separated, each exact
 * for a float ("%.9g"). */
void config_norm_text(const float *v, int n, char *out, size_t len);
/* Whether a[0..n) and b[0..n) are one normalisation, up to the rounding of
 * a value copied from a log line (1e-5 relative). */
int config_norm_same(const float *a, const float *b, int n);

/* The name of an enumerated key's value as a user writes it ("fp16" for
 * cfg->precision == BACKEND_MATH_FP16): field points into cfg at an enum
 * field. Never NULL ("?" for a value outside the key's choices). */
const char *config_name(const config *cfg, const void *field);
/* The choices of enumerated key "section.key" joined by sep ("fp32|tf32|..."),
 * into buf. */
void config_choices(const char *key, const char *sep, char *buf, size_t len);
/* Parses value as enumerated key "section.key" ("train.precision") into *out.
 * CNT_ERR with the key's message ("'fp8' is not one of: ...") otherwise. */
int config_parse_choice(const char *key, const char *value, int *out);

/* ---- what the modules take: the configuration's "auto"s resolved, once ----
 * Modules take these small structs, never the whole config. */
optim_opts config_optim_opts(const config *cfg);
/* The learning-rate schedule of a run on `world` ranks: optim.lr scaled by
 * optim.lr_scaling (linear: x world x train.accumulate), the warm-up from 0 or from optim.lr (optim.warmup_start),
 * train.epochs x steps_per_epoch long. */
schedule config_schedule(const config *cfg, int world, long steps_per_epoch);
/* train.loss_scaling; auto is dynamic for fp16 and none otherwise (bf16 has
 * fp32's exponent range). */
loss_scale_opts config_loss_scale_opts(const config *cfg);
/* The reducer's buckets (dist.first_bucket_mb, bucket_mb), algorithm
 * (dist.backend ring or MPI), overlap, compression and watchdog; nccl NULL. */
reducer_opts config_reducer_opts(const config *cfg);
/* How gradients become the next parameters (dist.mode, dist.backend, the
 * reducer's options above, the servers'). */
exchange_opts config_exchange_opts(const config *cfg);
/* What zoo_build and zoo_create take from cfg for a net on backend be: the
 * model's options (model.zero_init_residual, aux_logits, dropout), the math
 * mode (train.precision), fusion (train.fuse) and the activation type
 * (config_activations; fp32 where be is NULL: a net only described). */
zoo_options config_zoo_options(const config *cfg, const backend *be);
/* train.activations on backend be: the type asked for, and for auto the
 * 16-bit type of train.precision where be stores it (backend_act_choose),
 * else fp32. */
backend_dtype config_activations(const config *cfg, const backend *be);
/* train.conv_api on backend be: the API asked for, and for auto be's
 * (its conv_api_auto; legacy where be is NULL). */
backend_conv_api config_conv_api(const config *cfg, const backend *be);
/* The step's loss options (train.label_smoothing, train.aux_weight). */
step_opts config_step_opts(const config *cfg);
/* data.crop: LOADER_CROP_PAD or LOADER_CROP_RESIZED; auto is the resized
 * crop for image folders and shard sets, the pad crop for in-memory sets. */
int config_crop(const config *cfg);
/* 1 when data.kind is a file-backed set (imagefolder, shards): images
 * decoded by the loader, data.image_size and data.channels apply. */
int config_file_backed(const config *cfg);
/* data.batch_dtype on backend be (NULL: none chosen yet, as for
 * --bench-data): 1 for uint8 batches (loader_options.u8), 0 for floats;
 * auto is uint8 on a GPU (a quarter of the bytes cross to it) and floats on
 * the CPU (its loader threads normalise in parallel, off the training
 * thread). */
int config_batch_u8(const config *cfg, const backend *be);
/* checkpoint.resume: RESUME_NONE, RESUME_AUTO or RESUME_FILE (the value is
 * the file's path). */
resume_mode config_resume(const config *cfg);

/* `trainer --help`: every key with type, default, range and help. */
void config_print_help(FILE *out);
/* The README's config reference, as a Markdown table. */
void config_print_reference_md(FILE *out);
/* The effective configuration as an INI file (every key, in table order). */
void config_write_ini(const config *cfg, FILE *out);

#endif
