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
 * Errors: functions returning int give CNT_OK, or CNT_ERR with the message in
 * cnt_err_msg(); the caller (train/main.c) prints it and exits with code 2.
 */
#ifndef CNT_CONFIG_H
#define CNT_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#define CONFIG_STR 512
#define CONFIG_MAX_MILESTONES 16

typedef struct config {
    /* [model] */
    char model_name[CONFIG_STR];     /* zoo name */
    int zero_init_residual;          /* bool */
    int aux_logits;                  /* bool, inception_v3 */
    float dropout;                   /* < 0: the model's default */
    char init_from[CONFIG_STR];      /* safetensors file to start from; "": random init */

    /* [data] */
    char data_kind[CONFIG_STR];      /* "idx", "cifar", "imagefolder", "synthetic" */
    char data_root[CONFIG_STR];      /* directory holding the data set (idx, cifar, imagefolder) */
    char train_root[CONFIG_STR];     /* imagefolder training tree; "": data_root/train */
    char val_root[CONFIG_STR];       /* imagefolder validation tree; "": data_root/val */
    int image_size;                  /* model input side; 0: from the data / 224 (299 inception_v3) */
    int channels;                    /* model input channels 1 or 3; 0: from the data / 3 */
    int train_limit;                 /* 0: all training samples */
    int test_limit;                  /* 0: all test samples */
    int augment;                     /* bool: random crop and flip of training images */
    char crop[CONFIG_STR];           /* "auto", "pad", "resized" */
    int pad;                         /* crop padding (crop = pad) */
    float min_scale;                 /* smallest crop area fraction (crop = resized) */
    char mean[CONFIG_STR];           /* "auto" or per-channel list */
    char std[CONFIG_STR];            /* "auto" or per-channel list */
    int workers;                     /* loader threads */
    int prefetch;                    /* batches ready ahead */
    char remainder[CONFIG_STR];      /* "drop", "wrap": training samples that do not fill a step */
    char synthetic_shape[CONFIG_STR]; /* "CxHxW" (synthetic) */
    int synthetic_classes;           /* label range (synthetic) */
    int synthetic_train;             /* training samples (synthetic) */
    int synthetic_test;              /* test samples (synthetic) */

    /* [train] */
    char device[CONFIG_STR];         /* "auto", "cpu", "cuda" */
    char precision[CONFIG_STR];      /* "fp32", "tf32", "bf16", "fp16" */
    char layout[CONFIG_STR];         /* "auto", "nchw", "nhwc" */
    char loss_scaling[CONFIG_STR];   /* "auto", "dynamic", "static", "none" */
    float loss_scale;                /* static scale, or the dynamic scale's start */
    int loss_scale_window;           /* dynamic: overflow-free steps before the scale doubles */
    int epochs;
    long max_steps;                  /* 0: no limit */
    int batch_size;                  /* per rank */
    int eval_batch_size;             /* 0: batch_size */
    uint64_t seed;
    int log_every;                   /* steps between progress lines */
    char out_dir[CONFIG_STR];        /* metrics.jsonl and the effective config go here */
    int threads;                     /* CPU compute threads, 0: all cores */
    float label_smoothing;
    float aux_weight;                /* weight of the auxiliary loss (inception_v3) */

    /* [optim] */
    float lr;                        /* per-worker base learning rate */
    float momentum;
    int nesterov;                    /* bool */
    float weight_decay;
    int wd_on_bn_bias;               /* bool: apply weight decay to BN and bias parameters too */
    char schedule[CONFIG_STR];       /* "constant", "step", "cosine" */
    int milestones[CONFIG_MAX_MILESTONES]; /* epochs, ascending (step schedule) */
    int n_milestones;
    float gamma;                     /* step schedule factor */
    float warmup_epochs;             /* linear warm-up length, may be fractional */
    char warmup_start[CONFIG_STR];   /* "zero", "lr": where the warm-up ramp starts */
    float min_lr;                    /* cosine floor */
    char lr_scaling[CONFIG_STR];     /* "linear", "none" */

    /* [dist] */
    char dist_backend[CONFIG_STR];   /* "auto", "mpi", "ring", "nccl" */
    int overlap;                     /* bool: allreduce buckets during backward */
    float bucket_mb;                 /* bucket size, MiB */
    float first_bucket_mb;           /* first bucket size, MiB */
    char timeline[CONFIG_STR];       /* Chrome-trace file, relative: inside out_dir; "": off */
    char compress[CONFIG_STR];       /* "none", "fp16": gradient format on the wire */
    float stall_warn_s;              /* warn when a collective waits this long; 0: off */
    float stall_abort_s;             /* end the job when a collective waits this long; 0: off */

    /* [checkpoint] */
    char ckpt_dir[CONFIG_STR];       /* relative: inside out_dir */
    int ckpt_every;                  /* epochs between checkpoints, 0: never */
    int ckpt_keep;                   /* 0: keep all */
    char ckpt_resume[CONFIG_STR];    /* "none", "auto" or a path */
} config;

/* Fills every field with the table's default. */
void config_defaults(config *cfg);
/* Applies an INI file over cfg. */
int config_load(config *cfg, const char *path);
/* Applies one "section.key=value" override. */
int config_override(config *cfg, const char *arg);
/* Checks relations between keys (e.g. milestones ascending). */
int config_validate(const config *cfg);

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

/* `trainer --help`: every key with type, default, range and help. */
void config_print_help(FILE *out);
/* The README's config reference, as a Markdown table. */
void config_print_reference_md(FILE *out);
/* The effective configuration as an INI file (every key, in table order). */
void config_write_ini(const config *cfg, FILE *out);

#endif
