/*
 * train/config.c - the run configuration: one table of keys (key_table below)
 * drives defaults, INI parsing, command-line overrides, validation, `--help`,
 * the README's Markdown reference and the effective-config INI writer.
 *
 * Each table entry names its section and key, its type, its default (a string
 * parsed by the same code as a user's value), its range or choices, a help
 * line, and where the value lives in struct config (offsetof, type-checked at
 * compile time by the OFF_* macros).
 *
 * The INI file is read through inih's ini_parse_stream() with our own line
 * reader. The packaged inih (Debian 55) calls the handler without a line
 * number, reads an indented line as the continuation of the previous value,
 * accepts text after a "[section]" header and does not report empty sections.
 * The reader therefore counts lines itself (inih calls the handler for line N
 * right after reading line N, so the reader's count is the handler's line),
 * and checks each line before inih sees it: section headers (known name,
 * closing ']', nothing after it but a ';' comment), indentation (refused, so
 * no line is silently glued onto the previous value), a key separator, the
 * length limit of inih's line buffer. The first error stops the parse: the
 * reader returns NULL, which inih treats as the end of the file.
 *
 * Every value written by config_write_ini() fits one inih line: strings are
 * limited to CONFIG_VALUE_MAX characters and list items to six digits (see the
 * static assertions), and floats are printed with the fewest digits (at most
 * 9) that read back to the identical float.
 */
#include "train/config.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <ini.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "common/check.h"
#include "common/fileio.h"
#include "model/zoo.h"

/* Longest string value, so that "key = value" fits inih's line buffer. */
#define CONFIG_VALUE_MAX 150
/* Longest key name (checked against the table by config_defaults). */
#define CONFIG_NAME_MAX 32
/* Largest milestone: six digits, so a full list fits one line. */
#define CONFIG_MILESTONE_MAX 100000
/* Room for range_text(): two "%.10g" numbers and punctuation. */
#define RANGE_TEXT_MAX 80

_Static_assert(CONFIG_VALUE_MAX < CONFIG_STR, "string values must fit struct config");
_Static_assert(CONFIG_NAME_MAX + 3 + CONFIG_VALUE_MAX + 3 <= INI_MAX_LINE,
               "the longest string key line must fit inih's line buffer");
_Static_assert(CONFIG_NAME_MAX + 3 + CONFIG_MAX_MILESTONES * 8 + 3 <= INI_MAX_LINE,
               "a full milestone list must fit inih's line buffer");

typedef enum key_type {
    KEY_INT,
    KEY_LONG,
    KEY_UINT64,
    KEY_FLOAT,
    KEY_BOOL,
    KEY_STRING,
    KEY_ENUM,
    KEY_INT_LIST,
} key_type;

enum {
    RANGE_MIN = 1u << 0,      /* value >= min (or > min with RANGE_MIN_EXCL) */
    RANGE_MAX = 1u << 1,      /* value <= max */
    RANGE_MIN_EXCL = 1u << 2, /* the lower bound is exclusive */
};

/* One allowed value of an enumerated key: its name and the enum value stored. */
typedef struct choice {
    const char *name;
    int value;
} choice;

typedef struct key_def {
    const char *section;
    const char *name;
    key_type type;
    const char *def;            /* default, parsed like a user's value */
    unsigned range;             /* RANGE_* flags; numbers and list items */
    double min, max;
    const choice *choices;      /* KEY_ENUM: ends with a NULL name */
    const char *help;
    size_t off;                 /* the field in struct config */
    size_t count_off;           /* KEY_INT_LIST: the int holding the count */
    int max_count;              /* KEY_INT_LIST: capacity of the array */
    int empty_ok;               /* KEY_STRING: "" is a valid value (it means "off") */
    int auto_ok;                /* KEY_INT, KEY_FLOAT: "auto" is a valid value, stored as 0 (outside the range) */
} key_def;

/* offsetof() that fails to compile when the field has another type. */
#define OFF_INT(f) _Generic(((config *)0)->f, int: offsetof(config, f))
#define OFF_LONG(f) _Generic(((config *)0)->f, long: offsetof(config, f))
#define OFF_U64(f) _Generic(((config *)0)->f, uint64_t: offsetof(config, f))
#define OFF_FLOAT(f) _Generic(((config *)0)->f, float: offsetof(config, f))
#define OFF_STR(f) _Generic(((config *)0)->f, char *: offsetof(config, f))
#define OFF_LIST(f) _Generic(((config *)0)->f, int *: offsetof(config, f))
/* An enum field: stored and read as an int (an enum type is compatible with
 * an integer type of its size; this fails to compile for any other size). */
#define OFF_ENUM(f) (offsetof(config, f) + 0 * sizeof(char[sizeof(((config *)0)->f) == sizeof(int) ? 1 : -1]))

#define BETWEEN(lo, hi) .range = RANGE_MIN | RANGE_MAX, .min = (lo), .max = (hi)
#define ABOVE(lo, hi) .range = RANGE_MIN | RANGE_MIN_EXCL | RANGE_MAX, .min = (lo), .max = (hi)
#define AT_LEAST(lo) .range = RANGE_MIN, .min = (lo)

#define K_INT(sec, key, field, dflt, ...) \
    {.section = sec, .name = key, .type = KEY_INT, .def = dflt, .off = OFF_INT(field), __VA_ARGS__}
#define K_LONG(sec, key, field, dflt, ...) \
    {.section = sec, .name = key, .type = KEY_LONG, .def = dflt, .off = OFF_LONG(field), __VA_ARGS__}
#define K_U64(sec, key, field, dflt, ...) \
    {.section = sec, .name = key, .type = KEY_UINT64, .def = dflt, .off = OFF_U64(field), __VA_ARGS__}
#define K_FLOAT(sec, key, field, dflt, ...) \
    {.section = sec, .name = key, .type = KEY_FLOAT, .def = dflt, .off = OFF_FLOAT(field), __VA_ARGS__}
#define K_BOOL(sec, key, field, dflt, ...) \
    {.section = sec, .name = key, .type = KEY_BOOL, .def = dflt, .off = OFF_INT(field), __VA_ARGS__}
#define K_STRING(sec, key, field, dflt, ...) \
    {.section = sec, .name = key, .type = KEY_STRING, .def = dflt, .off = OFF_STR(field), __VA_ARGS__}
#define K_ENUM(sec, key, field, dflt, ...) \
    {.section = sec, .name = key, .type = KEY_ENUM, .def = dflt, .off = OFF_ENUM(field), __VA_ARGS__}
#define K_INT_LIST(sec, key, field, count, dflt, ...)                                              \
    {.section = sec, .name = key, .type = KEY_INT_LIST, .def = dflt, .off = OFF_LIST(field),    \
     .count_off = OFF_INT(count),                                                               \
     .max_count = (int)(sizeof(((config *)0)->field) / sizeof(((config *)0)->field[0])), __VA_ARGS__}

static const choice data_kinds[] = {{"idx", DATA_KIND_IDX}, {"cifar", DATA_KIND_CIFAR},
                                    {"imagefolder", DATA_KIND_IMAGEFOLDER}, {"shards", DATA_KIND_SHARDS},
                                    {"synthetic", DATA_KIND_SYNTHETIC}, {0}};
static const choice decoders[] = {
    {"auto", DATA_DECODER_AUTO}, {"cpu", DATA_DECODER_CPU}, {"nvjpeg", DATA_DECODER_NVJPEG}, {0}};
static const choice read_orders[] = {{"random", LOADER_ORDER_RANDOM}, {"blocks", LOADER_ORDER_BLOCKS}, {0}};
static const choice crops[] = {{"auto", DATA_CROP_AUTO}, {"pad", DATA_CROP_PAD}, {"resized", DATA_CROP_RESIZED}, {0}};
static const choice batch_dtypes[] = {
    {"auto", DATA_BATCH_AUTO}, {"uint8", DATA_BATCH_UINT8}, {"fp32", DATA_BATCH_FP32}, {0}};
static const choice remainders[] = {{"drop", DATA_REMAINDER_DROP}, {"wrap", DATA_REMAINDER_WRAP}, {0}};
static const choice dist_modes[] = {{"allreduce", DIST_MODE_ALLREDUCE}, {"ps", DIST_MODE_PS}, {0}};
static const choice compressions[] = {{"none", REDUCER_COMPRESS_NONE},
                                      {"fp16", REDUCER_COMPRESS_FP16},
                                      {"powersgd", REDUCER_COMPRESS_POWERSGD},
                                      {0}};
static const choice devices[] = {{"auto", BACKEND_DEVICE_AUTO}, {"cpu", BACKEND_DEVICE_CPU},
                                 {"cuda", BACKEND_DEVICE_CUDA}, {0}};
static const choice schedules[] = {{"constant", LR_SCHEDULE_CONSTANT}, {"step", LR_SCHEDULE_STEP},
                                   {"cosine", LR_SCHEDULE_COSINE}, {"poly", LR_SCHEDULE_POLY}, {0}};
static const choice optim_kinds[] = {{"sgd", OPTIM_SGD}, {"lars", OPTIM_LARS}, {0}};
static const choice lr_scalings[] = {{"linear", LR_SCALING_LINEAR}, {"none", LR_SCALING_NONE}, {0}};
static const choice warmup_starts[] = {{"zero", WARMUP_FROM_ZERO}, {"lr", WARMUP_FROM_LR}, {0}};
static const choice dist_progresses[] = {{"sleep", DIST_PROGRESS_SLEEP}, {"spin", DIST_PROGRESS_SPIN}, {0}};
static const choice dist_backends[] = {{"auto", DIST_BACKEND_AUTO}, {"mpi", DIST_BACKEND_MPI},
                                       {"ring", DIST_BACKEND_RING}, {"nccl", DIST_BACKEND_NCCL},
                                       {"hier", DIST_BACKEND_HIER}, {0}};
static const choice precisions[] = {{"fp32", BACKEND_MATH_FP32}, {"tf32", BACKEND_MATH_TF32},
                                    {"bf16", BACKEND_MATH_BF16}, {"fp16", BACKEND_MATH_FP16}, {0}};
static const choice layouts[] = {{"auto", BACKEND_LAYOUT_AUTO}, {"nchw", BACKEND_LAYOUT_NCHW},
                                 {"nhwc", BACKEND_LAYOUT_NHWC},
                                 {"blocked", BACKEND_LAYOUT_BLOCKED}, {0}};
static const choice activation_types[] = {{"auto", CONFIG_ACT_AUTO}, {"fp32", BACKEND_DTYPE_FP32},
                                          {"bf16", BACKEND_DTYPE_BF16}, {"fp16", BACKEND_DTYPE_FP16}, {0}};
static const choice conv_apis[] = {{"auto", CONFIG_CONV_API_AUTO}, {"legacy", BACKEND_CONV_API_LEGACY},
                                   {"graph", BACKEND_CONV_API_GRAPH}, {0}};
static const choice loss_scalings[] = {{"auto", LOSS_SCALE_AUTO}, {"dynamic", LOSS_SCALE_DYNAMIC},
                                       {"static", LOSS_SCALE_STATIC}, {"none", LOSS_SCALE_NONE}, {0}};

/* The keys, grouped by section, in the order of --help, the README and the
 * written INI file. */
static const key_def key_table[] = {
    K_STRING("model", "name", model_name, "resnet20",
           .help = "network architecture: a name from the model zoo"),
    K_BOOL("model", "zero_init_residual", zero_init_residual, "false",
         .help = "start the last batch-norm scale of each residual block at 0"),
    K_BOOL("model", "aux_logits", aux_logits, "true",
         .help = "train the auxiliary classifier (inception_v3; other models ignore it)"),
    K_FLOAT("model", "dropout", dropout, "-1", BETWEEN(-1, 0.99),
          .help = "dropout probability before the classifier; negative keeps the model's default"),
    K_STRING("model", "init_from", init_from, "", .empty_ok = 1,
           .help = "start from the weights in this safetensors file (torchvision tensor names, e.g. torchvision's "
                   "pretrained weights, or a file written by --export); empty: random initialisation"),

    K_ENUM("data", "kind", data_kind, "idx", .choices = data_kinds,
         .help = "data set format: idx (MNIST-style ubyte files), cifar (CIFAR-10/100 binary batches), "
                 "imagefolder (root/<class>/<image> trees of JPEG/PNG/BMP/TGA/GIF files), "
                 "shards (image folders packed into a few large files by build/tools/make_shards), "
                 "synthetic (random images generated in memory)"),
    K_STRING("data", "root", data_root, "/usr/share/datasets/fashion-mnist",
           .help = "directory holding the data set (idx, cifar; imagefolder and shards: the folder holding train/ "
                   "and val/; synthetic ignores it)"),
    K_STRING("data", "train_root", train_root, "", .empty_ok = 1,
           .help = "imagefolder: the training tree <class>/<image>; shards: the training shard set; empty: "
                   "data.root/train"),
    K_STRING("data", "val_root", val_root, "", .empty_ok = 1,
           .help = "imagefolder: the validation tree <class>/<image>; shards: the validation shard set; empty: "
                   "data.root/val"),
    K_INT("data", "image_size", image_size, "0", BETWEEN(0, 4096),
        .help = "imagefolder, shards: height and width images are cropped and resized to (the model input); 0: "
                "224 (299 "
                "for inception_v3). Other kinds keep their own size and ignore it"),
    K_INT("data", "channels", channels, "0", BETWEEN(0, 3),
        .help = "imagefolder, shards: channels images are decoded to, 1 (grey) or 3 (RGB); 0: 3. Other kinds keep "
                "their "
                "own and ignore it"),
    K_INT("data", "train_limit", train_limit, "0", AT_LEAST(0),
        .help = "use only the first N training samples; 0 uses all"),
    K_INT("data", "test_limit", test_limit, "0", AT_LEAST(0),
        .help = "use only the first N test samples; 0 uses all"),
    K_BOOL("data", "augment", augment, "true",
         .help = "random crop (data.crop) and horizontal flip of training images"),
    K_ENUM("data", "crop", crop, "auto", .choices = crops,
         .help = "pad: pad by data.pad and crop at random (CIFAR style); resized: random-resized crop, evaluation "
                 "resizes the shorter side to size x 256/224 and crops the centre (ImageNet style); auto: resized for "
                 "imagefolder and shards, pad otherwise"),
    K_ENUM("data", "batch_dtype", batch_dtype, "auto", .choices = batch_dtypes,
         .help = "what the loader hands the device: uint8 (bytes, normalised on the device: a quarter of the "
                 "transfer), fp32 (normalised floats); auto: uint8 on a GPU, fp32 on the CPU"),
    K_BOOL("data", "jpeg_scaling", jpeg_scaling, "true",
         .help = "decode JPEGs at a reduced size (libjpeg-turbo's DCT scaling, M/8) when the crop shrinks them: "
                 "faster; false decodes at full size, as torchvision does"),
    K_ENUM("data", "decoder", decoder, "auto", .choices = decoders,
         .help = "who decodes JPEGs (imagefolder, shards): cpu (libjpeg-turbo in the loader threads), nvjpeg "
                 "(the rank's GPU: its hardware decoder where it has one, at full size; other formats and what "
                 "nvJPEG refuses on the CPU, with data.jpeg_scaling; on an H200 slower than as many CPU cores for "
                 "the train transform); auto: cpu"),
    K_INT("data", "pad", pad, "4", BETWEEN(0, 64),
        .help = "padding in pixels on each side before the random crop (crop = pad)"),
    K_FLOAT("data", "min_scale", min_scale, "0.08", BETWEEN(0.01, 1),
          .help = "smallest crop area as a fraction of the image (crop = resized; aspect ratio 3/4 to 4/3)"),
    K_STRING("data", "mean", mean, "auto",
           .help = "per-channel mean of pixels scaled to [0, 1], e.g. 0.485,0.456,0.406; auto: measured on the "
                   "training data (imagefolder, shards: on up to 1024 images spread over it)"),
    K_STRING("data", "std", std, "auto",
           .help = "per-channel standard deviation of pixels scaled to [0, 1], e.g. 0.229,0.224,0.225; auto: "
                   "measured like data.mean"),
    K_INT("data", "workers", workers, "2", BETWEEN(1, 64),
        .help = "loader threads decoding and augmenting batches"),
    K_INT("data", "prefetch", prefetch, "4", BETWEEN(1, 256),
        .help = "batches prepared ahead of the training step"),
    K_FLOAT("data", "wait_warn", wait_warn, "0.1", BETWEEN(0, 1),
          .help = "warn (once an epoch, naming data.workers) when the steps between two progress lines spent more "
                  "than this share of their time waiting for batches; 0: never"),
    K_ENUM("data", "remainder", remainder, "drop", .choices = remainders,
         .help = "training samples that do not fill one more step on every rank: drop them (a different few "
                 "each epoch), or wrap around to the epoch's first samples so every sample is seen"),
    K_ENUM("data", "read_order", read_order, "random", .choices = read_orders,
         .help = "shards: random reads images in the order of a full permutation, as from a folder; blocks gives "
                 "each rank a run of blocks (data.block_mb) in a random order and shuffles within windows of "
                 "data.shuffle_blocks blocks: large sequential reads, batches drawn from a window"),
    K_INT("data", "block_mb", block_mb, "16", BETWEEN(1, 4096),
        .help = "shards with data.read_order = blocks: megabytes of images a block holds (one sequential read)"),
    K_INT("data", "shuffle_blocks", shuffle_blocks, "32", BETWEEN(1, 1000000),
        .help = "shards with data.read_order = blocks: blocks whose images a rank shuffles together (memory: "
                "shuffle_blocks x block_mb of page cache per rank)"),
    K_STRING("data", "synthetic_shape", synthetic_shape, "3x32x32",
           .help = "image shape CxHxW of the synthetic data set (C 1..3, H and W 1..4096)"),
    K_INT("data", "synthetic_classes", synthetic_classes, "10", BETWEEN(2, 100000),
        .help = "number of classes of the synthetic data set"),
    K_INT("data", "synthetic_train", synthetic_train, "10000", AT_LEAST(1),
        .help = "training samples of the synthetic data set"),
    K_INT("data", "synthetic_test", synthetic_test, "1000", AT_LEAST(1),
        .help = "test samples of the synthetic data set"),

    K_ENUM("train", "device", device, "auto", .choices = devices,
         .help = "compute device; auto picks cuda when a GPU is usable, else cpu; each rank takes GPU "
                 "local_rank % GPUs on its node"),
    K_ENUM("train", "precision", precision, "fp32", .choices = precisions,
         .help = "convolution and GEMM math: fp32; tf32 (GPU tensor cores, 10-bit mantissa inputs, fp32 "
                 "accumulation; fp32 on the CPU); bf16 or fp16 mixed precision (operands and results of convolutions "
                 "and GEMMs rounded to the type, fp32 accumulation, fp32 master weights, batch norm, loss and "
                 "optimizer; tensor cores on GPUs, emulated on the CPU)"),
    K_ENUM("train", "layout", layout, "auto", .choices = layouts,
         .help = "memory layout of activations: nchw; nhwc (channels last: what GPU tensor-core convolutions "
                 "read natively; the CPU backend transposes around each op, slower); blocked (the CPU backend "
                 "built with oneDNN: channels in blocks of 8 or 16, its fast layout). auto is blocked on the CPU "
                 "when oneDNN is built in, nhwc on a GPU with bf16 or fp16, or tf32 on images of 64 pixels a side "
                 "or more, nchw otherwise. Parameters and "
                 "checkpoints are the same in all"),
    K_ENUM("train", "activations", activations, "auto", .choices = activation_types,
         .help = "the type every activation and activation gradient is stored in: fp32, or with train.precision "
                 "= bf16 or fp16 the same 16-bit type (half the memory and memory traffic; each op computes in "
                 "fp32 and rounds what it stores, as PyTorch autocast stores them). auto is the 16-bit type on "
                 "the CPU (the reference) and on a GPU (measured faster there); fp32 keeps fp32 activations"),
    K_ENUM("train", "conv_api", conv_api, "auto", .choices = conv_apis,
         .help = "how a GPU runs convolutions: legacy (cuDNN's cudnnFind and cudnnConvolution* calls) or graph "
                 "(cuDNN's backend API: every engine its heuristics offer for a shape, timed at the first step, "
                 "the fastest kept in out_dir's conv_plans.txt; what PyTorch's cudnn.benchmark uses). auto is "
                 "graph on a GPU (on an H200, ResNet-50 bf16 trained 3x faster than with the legacy calls); "
                 "the CPU ignores it"),
    K_BOOL("train", "fuse", fuse, "true",
         .help = "run each batch norm together with the residual add and ReLU right after it, in one op: one "
                 "pass over memory instead of three, and no tensors between them; the same numbers (false: "
                 "each layer its own op, to compare)"),
    K_BOOL("train", "cuda_graph", cuda_graph, "false",
         .help = "on a GPU, record a training step's device work once (after two eager steps) and replay it: one "
                 "launch a step instead of one per op, for steps too short to hide the host's launch time. One "
                 "rank, or several through NCCL (its allreduces recorded too), without loss scaling (fp16), "
                 "train.accumulate or dist.timeline; elsewhere "
                 "the start-up log says why it is not used. Written, not yet run on a GPU, so not the default"),
    K_ENUM("train", "loss_scaling", loss_scaling, "auto", .choices = loss_scalings,
         .help = "multiply the loss gradient by a scale and divide the update by it, skipping steps whose "
                 "gradients hold inf/NaN: dynamic (halve on overflow, double after train.loss_scale_window clean "
                 "steps), static, none; auto is dynamic for fp16, none otherwise"),
    K_FLOAT("train", "loss_scale", loss_scale, "65536", BETWEEN(1.0 / 16777216, 1e30),
          .help = "the static loss scale, or where dynamic scaling starts (powers of two keep it exact)"),
    K_INT("train", "loss_scale_window", loss_scale_window, "2000", BETWEEN(1, 1000000000),
        .help = "dynamic loss scaling: steps in a row without inf/NaN gradients before the scale doubles"),
    K_INT("train", "epochs", epochs, "15", BETWEEN(1, 100000),
        .help = "passes over the training set"),
    K_LONG("train", "max_steps", max_steps, "0", AT_LEAST(0),
         .help = "stop after this many optimizer steps; 0 means no limit"),
    K_INT("train", "batch_size", batch_size, "128", BETWEEN(1, 65536),
        .help = "training samples per forward and backward on each rank (a micro-batch with train.accumulate)"),
    K_INT("train", "accumulate", accumulate, "1", BETWEEN(1, 4096),
        .help = "gradient accumulation: micro-batches of train.batch_size per optimizer step, their gradients "
                "summed and exchanged once, after the last (global batch: batch_size x ranks x accumulate)"),
    K_INT("train", "eval_batch_size", eval_batch_size, "0", BETWEEN(0, 65536),
        .help = "samples per evaluation batch (at most a rank's share of the test set); 0 uses batch_size"),
    K_U64("train", "seed", seed, "42",
        .help = "seed for initialisation, shuffling, augmentation and dropout"),
    K_INT("train", "log_every", log_every, "50", AT_LEAST(1),
        .help = "optimizer steps between progress lines"),
    K_STRING("train", "out_dir", out_dir, "runs/default",
           .help = "directory for metrics.jsonl, checkpoints and the effective config"),
    K_BOOL("train", "tensorboard", tensorboard, "false",
         .help = "also write metrics.jsonl's records as TensorBoard scalars into out_dir (events.out.tfevents.*, "
                 "flushed as written): watch a running job with tensorboard --logdir OUT_DIR"),
    K_INT("train", "threads", threads, "0", BETWEEN(0, 1024),
        .help = "CPU compute threads per rank; 0: one per CPU this rank may run on (its affinity: mpirun binds "
                "each rank to one core by default when it starts 2 ranks or fewer; the start-up lines say what "
                "each rank got)"),
    K_FLOAT("train", "label_smoothing", label_smoothing, "0", BETWEEN(0, 0.99),
          .help = "probability mass spread uniformly over all classes in the loss target"),
    K_FLOAT("train", "aux_weight", aux_weight, "0.4", BETWEEN(0, 10),
          .help = "weight of the auxiliary classifier's loss (inception_v3)"),
    K_BOOL("train", "memory_check", memory_check, "true",
         .help = "before allocating the model, estimate the memory each rank needs (activations, parameters, "
                 "loader, ...) and refuse to start when this node (or GPU) has less available; false: start "
                 "anyway"),
    K_STRING("train", "emulate_compute", emulate_compute, "", .empty_ok = 1,
           .help = "emulated compute, to validate the step simulator's communication side: a step profile "
                   "(trainer --profile) of this model, batch, input shape and classes; each layer sleeps its "
                   "profiled forward and backward time (rescaled to the profile's phase times, as tools/simulate "
                   "does) instead of computing and the update sleeps update_ms (parameters stay as they are), "
                   "while the gradients are allreduced for real, bucket by bucket during backward (with "
                   "dist.mode = ps: pushed to the servers, which update for real, and pulled back); evaluation is "
                   "skipped. Use with data.kind = synthetic (docs/scaling.md). Empty: real compute"),

    K_ENUM("optim", "name", optim, "sgd", .choices = optim_kinds,
         .help = "sgd: SGD with momentum (PyTorch's); lars: the same with each weight tensor's step scaled by "
                 "its trust ratio eta x ||w|| / (||g|| + weight_decay x ||w||), batch-norm and bias parameters "
                 "left as SGD has them (You et al. 2017: large global batches; docs/data-parallel.md)"),
    K_FLOAT("optim", "lars_eta", lars_eta, "0.001", ABOVE(0, 1),
          .help = "LARS's trust coefficient eta (optim.name = lars)"),
    K_FLOAT("optim", "lr", lr, "0.1", ABOVE(0, 100),
          .help = "base learning rate of each worker"),
    K_FLOAT("optim", "momentum", momentum, "0.9", BETWEEN(0, 0.999),
          .help = "SGD momentum; 0 disables it"),
    K_BOOL("optim", "nesterov", nesterov, "false",
         .help = "use Nesterov momentum (needs momentum > 0)"),
    K_FLOAT("optim", "weight_decay", weight_decay, "5e-4", BETWEEN(0, 1),
          .help = "L2 weight decay added to the gradient"),
    K_BOOL("optim", "wd_on_bn_bias", wd_on_bn_bias, "true",
         .help = "apply weight decay to batch-norm and bias parameters too"),
    K_ENUM("optim", "schedule", schedule, "cosine", .choices = schedules,
         .help = "learning-rate schedule after warm-up"),
    K_INT_LIST("optim", "milestones", milestones, n_milestones, "", BETWEEN(1, CONFIG_MILESTONE_MAX),
             .help = "epochs at which the step schedule multiplies the rate by gamma, e.g. 30,60,90"),
    K_FLOAT("optim", "gamma", gamma, "0.1", ABOVE(0, 1),
          .help = "factor applied at each milestone (step schedule)"),
    K_FLOAT("optim", "warmup_epochs", warmup_epochs, "0", BETWEEN(0, 1000),
          .help = "linear warm-up to the (scaled) rate over this many epochs (may be fractional); 0: none"),
    K_ENUM("optim", "warmup_start", warmup_start, "zero", .choices = warmup_starts,
         .help = "where the warm-up starts: zero, or lr (optim.lr, one worker's rate, rising to the scaled "
                 "rate: Goyal et al.'s gradual warm-up; a single rank without train.accumulate then has no warm-up)"),
    K_FLOAT("optim", "min_lr", min_lr, "0", AT_LEAST(0),
          .help = "final learning rate of the cosine and poly schedules"),
    K_FLOAT("optim", "poly_power", poly_power, "2", BETWEEN(0.1, 10),
          .help = "the poly schedule's exponent: lr falls as (1 - step / total steps)^power to optim.min_lr"),
    K_ENUM("optim", "lr_scaling", lr_scaling, "linear", .choices = lr_scalings,
         .help = "linear: the effective rate is optim.lr x world size x train.accumulate, the global batch's "
                 "multiple of one rank's batch (Goyal et al. 2017); none: optim.lr"),

    K_ENUM("dist", "mode", dist_mode, "allreduce", .choices = dist_modes,
         .help = "allreduce: every rank trains and the gradients are summed among them; ps: parameter servers, the "
                 "last dist.ps_servers ranks hold the parameters, the other ranks (workers) push gradients to them "
                 "and pull parameters back each step, synchronously (docs/data-parallel.md)"),
    K_INT("dist", "ps_servers", ps_servers, "1", AT_LEAST(1),
        .help = "dist.mode = ps: how many of the job's ranks are servers (the last ones); the parameters are split "
                "among them in contiguous shards of whole tensors, balanced by bytes. Needs at least one more rank"),
    K_BOOL("dist", "ps_sync", ps_sync, "true",
         .help = "dist.mode = ps: true: a server waits for every worker's gradient of a step, then updates once (the "
                 "same steps as allreduce); false: asynchronous, it updates with what has arrived and answers each "
                 "worker at once, so workers compute on stale parameters (staleness is reported)"),
    K_INT("dist", "ps_max_staleness", ps_max_staleness, "-1", AT_LEAST(-1),
        .help = "dist.ps_sync = false: a worker more than this many steps ahead of the slowest waits for it "
                "(stale-synchronous parallel; 0 is the synchronous mode); -1: no bound"),
    K_ENUM("dist", "backend", dist_backend, "auto", .choices = dist_backends,
         .help = "gradient allreduce: mpi (MPI_Allreduce), ring (our ring allreduce over MPI point-to-point), hier "
                 "(several ranks per node: each node's sum at one leader, our ring between the leaders, sent "
                 "back), nccl (GPU to GPU, on its own stream; needs device cuda and one GPU per rank); auto: nccl "
                 "on GPUs when every rank has its own GPU; else mpi on one node, ring across nodes with one rank "
                 "each, hier across nodes when one holds several ranks"),
    K_BOOL("dist", "overlap", overlap, "true",
         .help = "allreduce each gradient bucket as soon as backward completes it; false: after backward"),
    K_ENUM("dist", "progress", progress, "sleep", .choices = dist_progresses,
         .help = "how dist.backend = ring or hier waits for its messages: sleep (polls between sleeps of at most 50 us, "
                 "leaving the cores to backward while the network moves a bucket) or spin (polls with "
                 "sched_yield: for a communication thread with a core of its own)"),
    K_INT("dist", "comm_nice", comm_nice, "-10", BETWEEN(-20, 0),
        .help = "dist.backend = ring or hier with dist.progress = sleep: the communication thread's nice value "
                "below the process's (Linux, per thread), so that it wakes ahead of backward's threads when a "
                "chunk arrives and the link idles less while backward holds the cores (on 2 shared cores a 25 MiB "
                "bucket allreduced during backward went from 10.5% slower than one after it to 6%: "
                "docs/scaling.md); "
                "0: the process's. Lowering a nice value needs CAP_SYS_NICE or `ulimit -e` of at least 20 minus "
                "this; where refused, rank 0 says so and the run goes on"),
    K_INT("dist", "buckets_in_flight", buckets_in_flight, "1", BETWEEN(1, DIST_MAX_IN_FLIGHT),
        .help = "dist.backend = ring or hier: how many gradient buckets' allreduces move at once, kept moving by the "
                "one communication thread (each adds in the same order, so the results are the same bits for "
                "every value); mpi and nccl run one bucket at a time. 1 measured fastest on a shared-core "
                "cluster, where a second bucket slows backward more than it speeds the link (docs/scaling.md)"),
    K_FLOAT("dist", "bucket_mb", bucket_mb, "25", BETWEEN(0.001, 4096), .auto_ok = 1,
          .help = "gradient bucket size in MiB (Horovod fuses up to 64 MiB, PyTorch DDP uses 25); auto: at start-up "
                  "the ranks time their allreduce (through host memory or NCCL) from 64 KiB to 64 MiB, and the step simulator picks the size it "
                  "predicts fastest for this model and world from a profile of its layers (dist.bucket_profile), "
                  "logging why (docs/data-parallel.md)"),
    K_STRING("dist", "bucket_profile", bucket_profile, "", .empty_ok = 1,
           .help = "dist.bucket_mb = auto: a step profile of this model (./trainer --profile CONFIG.ini FILE, or "
                   "tools/profile.sh), read by rank 0 for when backward completes each gradient; its batch may "
                   "differ (times scale with it); empty: train.emulate_compute's profile when set, else rank 0 "
                   "profiles 5 steps of this config at start-up"),
    K_FLOAT("dist", "first_bucket_mb", first_bucket_mb, "1", BETWEEN(0.001, 4096),
          .help = "size of the first bucket in MiB: small, so communication starts early"),
    K_STRING("dist", "timeline", timeline, "", .empty_ok = 1,
           .help = "write a Chrome-trace timeline (chrome://tracing, Perfetto; tools/plot_timeline.py) of every "
                   "rank's steps to this file, each rank's events going to FILE.rankR.part as the run goes (kept "
                   "when the run is killed); a relative path is inside train.out_dir; empty: off"),
    K_STRING("dist", "timeline_steps", timeline_steps, "", .empty_ok = 1,
           .help = "the steps the timeline records, A:B (inclusive, from 1), so a long run's trace stays small "
                   "(every step of a 90-epoch ImageNet run would be gigabytes per rank); empty: every step"),
    K_ENUM("dist", "compress", compress, "none", .choices = compressions,
         .help = "gradient format on the wire: none (fp32), fp16 (half the bytes; the partial sums rounded to fp16, "
                 "as Horovod's fp16 compression; with NCCL too, converted on the GPU) or powersgd (each weight "
                 "matrix's gradient as two rank-r factors with error feedback, as PyTorch DDP's PowerSGD hook: "
                 "dist.powersgd_rank, dist.powersgd_start; with NCCL its arithmetic runs on the GPU); not with "
                 "parameter servers"),
    K_INT("dist", "powersgd_rank", powersgd_rank, "2", BETWEEN(1, 32),
          .help = "dist.compress = powersgd: the rank r of each weight matrix's approximation; an n x m gradient "
                  "sends r(n + m) values instead of nm (tensors that would not shrink twofold, biases and batch "
                  "norm among them, go whole). Higher: closer to the uncompressed sum, more bytes"),
    K_INT("dist", "powersgd_start", powersgd_start, "1000", AT_LEAST(0),
          .help = "dist.compress = powersgd: optimizer steps summed uncompressed first (fp32), as DDP's "
                  "start_powerSGD_iter: compression from the start costs accuracy"),
    K_INT("dist", "powersgd_threads", powersgd_threads, "auto", BETWEEN(1, 256), .auto_ok = 1,
          .help = "dist.compress = powersgd: threads of its host arithmetic (passes over the gradients, bound by "
                  "memory; the same bits whatever the number), through host memory (not NCCL); auto: 1 on a CPU "
                  "rank, whose cores compute backward meanwhile, and on a GPU rank half its share of the node's "
                  "CPUs, at most 4"),
    K_FLOAT("dist", "stall_warn_s", stall_warn_s, "60", BETWEEN(0, 86400),
          .help = "warn when a collective has waited this many seconds for the other ranks (a gradient bucket "
                  "names the late ranks, the step and the bucket; any other collective names itself, the "
                  "phase (start-up, evaluation, ...) and the ranks that are stopped or wait in nothing), "
                  "and again at every multiple; 0: off"),
    K_FLOAT("dist", "stall_abort_s", stall_abort_s, "1800", BETWEEN(0, 86400),
          .help = "end the job when any collective (gradient allreduce, start-up, evaluation, checks, "
                  "broadcasts) has waited this many seconds for the other ranks (default 30 minutes, as "
                  "PyTorch's process-group timeout); 0: never, which can hang a job forever"),

    K_STRING("checkpoint", "dir", ckpt_dir, "checkpoints",
           .help = "where rank 0 writes checkpoints; a relative path is inside train.out_dir"),
    K_INT("checkpoint", "every_epochs", ckpt_every, "1", AT_LEAST(0),
        .help = "write a checkpoint after every N completed epochs (and after the last); 0: only those "
                "checkpoint.every_steps asks for, and on SIGTERM/SIGINT/SIGUSR1 when that is set"),
    K_LONG("checkpoint", "every_steps", ckpt_every_steps, "0", AT_LEAST(0),
         .help = "also write a checkpoint every N optimizer steps, inside epochs too (a resumed run goes on from "
                 "that exact step: same batches, same losses); 0: at epoch ends only"),
    K_INT("checkpoint", "keep", ckpt_keep, "3", AT_LEAST(0),
        .help = "checkpoints kept in checkpoint.dir, oldest deleted first; 0 keeps all (best.cnt is not counted)"),
    K_BOOL("checkpoint", "keep_best", ckpt_keep_best, "false",
         .help = "keep the checkpoint of the best test top-1 so far as checkpoint.dir/best.cnt (a hard link to "
                 "that epoch's checkpoint, which is written for it when not due) with best.json saying its "
                 "epoch and scores; needs checkpoints on (checkpoint.every_epochs or every_steps)"),
    K_STRING("checkpoint", "resume", ckpt_resume, "none",
           .help = "none; auto: the newest checkpoint in checkpoint.dir if there is one; or a checkpoint file"),
};

#define N_KEYS ((int)(sizeof key_table / sizeof key_table[0]))

/* ------------------------------------------------------------------ helpers */

static void *field_ptr(const key_def *k, config *cfg) { return (char *)cfg + k->off; }
static const void *field_cptr(const key_def *k, const config *cfg) { return (const char *)cfg + k->off; }

/* Appends printf-style text to buf (size n), truncating silently. */
static void append(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t n, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, n - used, fmt, ap);
    va_end(ap);
}

/* The shortest "%.Ng" (N = 6..9) that reads back to exactly v. */
static void format_float(float v, char *buf, size_t n) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

static const char *type_name(key_type t) {
    switch (t) {
    case KEY_INT:
    case KEY_LONG: return "int";
    case KEY_UINT64: return "uint64";
    case KEY_FLOAT: return "float";
    case KEY_BOOL: return "bool";
    case KEY_STRING: return "string";
    case KEY_ENUM: return "enum";
    case KEY_INT_LIST: return "int list";
    }
    return "?";
}

/* "[0, 64]", "(0, 100]", ">= 1", "> 0", or "" when the key has no range. */
static void range_text(const key_def *k, char *buf, size_t n) {
    char lo[32], hi[32];
    snprintf(lo, sizeof lo, "%.10g", k->min);
    snprintf(hi, sizeof hi, "%.10g", k->max);
    int excl = (k->range & RANGE_MIN_EXCL) != 0;
    if ((k->range & RANGE_MIN) && (k->range & RANGE_MAX))
        snprintf(buf, n, "%c%s, %s]", excl ? '(' : '[', lo, hi);
    else if (k->range & RANGE_MIN)
        snprintf(buf, n, "%s %s", excl ? ">" : ">=", lo);
    else if (k->range & RANGE_MAX)
        snprintf(buf, n, "<= %s", hi);
    else
        buf[0] = '\0';
}

static int in_range_double(const key_def *k, double v) {
    if (k->range & RANGE_MIN) {
        if ((k->range & RANGE_MIN_EXCL) ? !(v > k->min) : !(v >= k->min)) return 0;
    }
    if ((k->range & RANGE_MAX) && !(v <= k->max)) return 0;
    return 1;
}

/* Float keys compare in float precision, so a bound written in the table
 * (0.999) admits the float a user's "0.999" becomes, and so does its
 * round-tripped printout. */
static int in_range_float(const key_def *k, float v) {
    if (k->range & RANGE_MIN) {
        float lo = (float)k->min;
        if ((k->range & RANGE_MIN_EXCL) ? !(v > lo) : !(v >= lo)) return 0;
    }
    if ((k->range & RANGE_MAX) && !(v <= (float)k->max)) return 0;
    return 1;
}

/* The "allowed" column of --help and the README. */
static void allowed_text(const key_def *k, int markdown, char *buf, size_t n) {
    char range[RANGE_TEXT_MAX];
    range_text(k, range, sizeof range);
    buf[0] = '\0';
    switch (k->type) {
    case KEY_INT:
    case KEY_LONG:
    case KEY_FLOAT:
        snprintf(buf, n, "%s%s", range[0] ? range : "any", !k->auto_ok ? "" : markdown ? ", `auto`" : ", auto");
        break;
    case KEY_UINT64: snprintf(buf, n, "[0, 2^64-1]"); break;
    case KEY_BOOL: snprintf(buf, n, "true, false"); break;
    case KEY_STRING: snprintf(buf, n, "text, at most %d characters", CONFIG_VALUE_MAX); break;
    case KEY_ENUM:
        for (int i = 0; k->choices[i].name; i++)
            append(buf, n, markdown ? "%s`%s`" : "%s%s", i ? ", " : "", k->choices[i].name);
        break;
    case KEY_INT_LIST: snprintf(buf, n, "up to %d ascending ints in %s", k->max_count, range); break;
    }
}

/* ------------------------------------------------------------ key lookup */

static int section_known(const char *s, size_t len) {
    for (int i = 0; i < N_KEYS; i++)
        if (strlen(key_table[i].section) == len && strncmp(key_table[i].section, s, len) == 0) return 1;
    return 0;
}

/* "model data train optim dist checkpoint": the sections in table order. */
static void section_list(char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; i < N_KEYS; i++)
        if (i == 0 || strcmp(key_table[i].section, key_table[i - 1].section) != 0)
            append(buf, n, "%s%s", i ? " " : "", key_table[i].section);
}

static const key_def *key_find(const char *section, const char *name) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(key_table[i].section, section) == 0 && strcmp(key_table[i].name, name) == 0)
            return &key_table[i];
    return NULL;
}

/* Levenshtein distance, or a large number for names longer than keys get. */
static int edit_distance(const char *a, const char *b) {
    enum { MAXLEN = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= MAXLEN || lb >= MAXLEN) return INT_MAX;
    int prev[MAXLEN + 1], cur[MAXLEN + 1];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

/* The key closest to name (any section; ties go to `section`, then to table
 * order), when it is within edit distance 2 and not a mere replacement of a
 * very short name. NULL when nothing is close. */
static const key_def *key_suggest(const char *section, const char *name) {
    const key_def *best = NULL;
    int best_d = INT_MAX, best_other = 1;
    for (int i = 0; i < N_KEYS; i++) {
        int d = edit_distance(name, key_table[i].name);
        int other = strcmp(key_table[i].section, section) != 0;
        if (d < best_d || (d == best_d && other < best_other)) {
            best = &key_table[i];
            best_d = d;
            best_other = other;
        }
    }
    if (best && best_d <= 2 && (size_t)best_d < strlen(name)) return best;
    return NULL;
}

/* The message for a (section, name) pair key_find() did not find. */
static void describe_unknown(const char *section, const char *name, char *buf, size_t n) {
    if (!section_known(section, strlen(section))) {
        char sections[128];
        section_list(sections, sizeof sections);
        snprintf(buf, n, "unknown section [%s] (sections: %s)", section, sections);
        return;
    }
    snprintf(buf, n, "unknown key '%s' in [%s]", name, section);
    const key_def *s = key_suggest(section, name);
    if (s) {
        append(buf, n, " (did you mean %s.%s?)", s->section, s->name);
        return;
    }
    append(buf, n, " (keys in [%s]:", section);
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(key_table[i].section, section) == 0) append(buf, n, " %s", key_table[i].name);
    append(buf, n, ")");
}

/* ------------------------------------------------------ values: printing */

/* The index in k->choices of the entry with this value, or -1. */
static int choice_index(const key_def *k, int value) {
    for (int i = 0; k->choices[i].name; i++)
        if (k->choices[i].value == value) return i;
    return -1;
}

/* The name of an enumerated key's value, "?" when it is none of them. */
static const char *choice_name(const key_def *k, int value) {
    int i = choice_index(k, value);
    return i < 0 ? "?" : k->choices[i].name;
}

/* "'v' is not one of: a, b, c" into why. */
static int not_a_choice(const key_def *k, const char *v, char *why, size_t n) {
    snprintf(why, n, "'%s' is not one of: ", v);
    for (int i = 0; k->choices[i].name; i++) append(why, n, "%s%s", i ? ", " : "", k->choices[i].name);
    return CNT_ERR;
}

static void value_text(const key_def *k, const config *cfg, char *buf, size_t n) {
    const void *p = field_cptr(k, cfg);
    switch (k->type) {
    case KEY_INT:
        if (k->auto_ok && *(const int *)p == 0) snprintf(buf, n, "auto");
        else snprintf(buf, n, "%d", *(const int *)p);
        break;
    case KEY_LONG: snprintf(buf, n, "%ld", *(const long *)p); break;
    case KEY_UINT64: snprintf(buf, n, "%" PRIu64, *(const uint64_t *)p); break;
    case KEY_FLOAT:
        if (k->auto_ok && *(const float *)p == 0.0f) snprintf(buf, n, "auto");
        else format_float(*(const float *)p, buf, n);
        break;
    case KEY_BOOL: snprintf(buf, n, "%s", *(const int *)p ? "true" : "false"); break;
    case KEY_STRING: snprintf(buf, n, "%s", (const char *)p); break;
    case KEY_ENUM: snprintf(buf, n, "%s", choice_name(k, *(const int *)p)); break;
    case KEY_INT_LIST: {
        const int *items = p;
        int count = *(const int *)((const char *)cfg + k->count_off);
        buf[0] = '\0';
        for (int i = 0; i < count && i < k->max_count; i++) append(buf, n, "%s%d", i ? ", " : "", items[i]);
        break;
    }
    }
}

/* -------------------------------------------------- values: validation */

/* A string value that reads back from an INI file unchanged: non-empty, at
 * most CONFIG_VALUE_MAX characters, no control characters, no leading or
 * trailing blanks, no " ;" (inih starts an inline comment there). */
static int check_text(const char *s, char *why, size_t n) {
    size_t len = strlen(s);
    if (len == 0) {
        snprintf(why, n, "empty value");
        return CNT_ERR;
    }
    if (len > CONFIG_VALUE_MAX) {
        snprintf(why, n, "value is longer than %d characters", CONFIG_VALUE_MAX);
        return CNT_ERR;
    }
    if (isspace((unsigned char)s[0]) || isspace((unsigned char)s[len - 1])) {
        snprintf(why, n, "'%s' starts or ends with whitespace", s);
        return CNT_ERR;
    }
    for (size_t i = 0; i < len; i++) {
        if (iscntrl((unsigned char)s[i])) {
            snprintf(why, n, "value contains a control character (byte %zu)", i);
            return CNT_ERR;
        }
        if (s[i] == ';' && i > 0 && isspace((unsigned char)s[i - 1])) {
            snprintf(why, n, "'%s' contains ' ;', which starts a comment in an INI file", s);
            return CNT_ERR;
        }
    }
    return CNT_OK;
}

static int out_of_range(const key_def *k, const char *value, char *why, size_t n) {
    char range[RANGE_TEXT_MAX];
    range_text(k, range, sizeof range);
    snprintf(why, n, "%s is out of range; allowed: %s%s", value, range, k->auto_ok ? ", or auto" : "");
    return CNT_ERR;
}

/* Checks the value stored in cfg against the key's range, choices or string
 * rules. Used after parsing and by config_validate. */
static int key_check(const key_def *k, const config *cfg, char *why, size_t n) {
    const void *p = field_cptr(k, cfg);
    char text[64];
    switch (k->type) {
    case KEY_INT:
        if (in_range_double(k, *(const int *)p) || (k->auto_ok && *(const int *)p == 0)) return CNT_OK;
        value_text(k, cfg, text, sizeof text);
        return out_of_range(k, text, why, n);
    case KEY_LONG:
        if (in_range_double(k, (double)*(const long *)p)) return CNT_OK;
        value_text(k, cfg, text, sizeof text);
        return out_of_range(k, text, why, n);
    case KEY_UINT64: return CNT_OK;
    case KEY_FLOAT: {
        float v = *(const float *)p;
        value_text(k, cfg, text, sizeof text);
        if (!isfinite(v)) {
            snprintf(why, n, "%s is not a finite number", text);
            return CNT_ERR;
        }
        return in_range_float(k, v) || (k->auto_ok && v == 0.0f) ? CNT_OK : out_of_range(k, text, why, n);
    }
    case KEY_BOOL:
        if (*(const int *)p == 0 || *(const int *)p == 1) return CNT_OK;
        snprintf(why, n, "%d is not a bool (0 or 1)", *(const int *)p);
        return CNT_ERR;
    case KEY_STRING: {
        const char *s = p;
        if (!memchr(s, '\0', CONFIG_STR)) {
            snprintf(why, n, "value is not NUL-terminated");
            return CNT_ERR;
        }
        if (s[0] == '\0' && k->empty_ok) return CNT_OK;
        return check_text(s, why, n);
    }
    case KEY_ENUM: {
        int v = *(const int *)p;
        if (choice_index(k, v) >= 0) return CNT_OK;
        snprintf(text, sizeof text, "%d", v);
        return not_a_choice(k, text, why, n);
    }
    case KEY_INT_LIST: {
        const int *items = p;
        int count = *(const int *)((const char *)cfg + k->count_off);
        if (count < 0 || count > k->max_count) {
            snprintf(why, n, "%d items; allowed: 0 to %d", count, k->max_count);
            return CNT_ERR;
        }
        for (int i = 0; i < count; i++) {
            if (in_range_double(k, items[i])) continue;
            snprintf(text, sizeof text, "item %d", items[i]);
            return out_of_range(k, text, why, n);
        }
        return CNT_OK;
    }
    }
    snprintf(why, n, "unknown key type");
    return CNT_ERR;
}

/* ----------------------------------------------------- values: parsing */

/* A base-10 integer with nothing after it. */
static int parse_ll(const char *s, long long *out, const char *what, char *why, size_t n) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || isspace((unsigned char)s[0])) {
        snprintf(why, n, "'%s' is not %s", s, what);
        return CNT_ERR;
    }
    if (*end) {
        snprintf(why, n, "'%s' is not %s (unexpected '%s' after '%.*s')", s, what, end, (int)(end - s), s);
        return CNT_ERR;
    }
    if (errno == ERANGE) {
        snprintf(why, n, "'%s' is too large for a 64-bit integer", s);
        return CNT_ERR;
    }
    *out = v;
    return CNT_OK;
}

static int parse_int(const char *s, int *out, char *why, size_t n) {
    long long v;
    if (parse_ll(s, &v, "an integer", why, n) != CNT_OK) return CNT_ERR;
    if (v < INT_MIN || v > INT_MAX) {
        snprintf(why, n, "'%s' is out of the range of an int", s);
        return CNT_ERR;
    }
    *out = (int)v;
    return CNT_OK;
}

static int parse_long(const char *s, long *out, char *why, size_t n) {
    long long v;
    if (parse_ll(s, &v, "an integer", why, n) != CNT_OK) return CNT_ERR;
#if LLONG_MAX > LONG_MAX
    if (v < LONG_MIN || v > LONG_MAX) {
        snprintf(why, n, "'%s' is out of the range of a long", s);
        return CNT_ERR;
    }
#endif
    *out = (long)v;
    return CNT_OK;
}

static int parse_u64(const char *s, uint64_t *out, char *why, size_t n) {
    char *end;
    if (!isdigit((unsigned char)s[0])) {
        snprintf(why, n, "'%s' is not an unsigned integer", s);
        return CNT_ERR;
    }
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end) {
        snprintf(why, n, "'%s' is not an unsigned integer (unexpected '%s' after '%.*s')", s, end,
                 (int)(end - s), s);
        return CNT_ERR;
    }
    if (errno == ERANGE) {
        snprintf(why, n, "'%s' is too large for a 64-bit unsigned integer", s);
        return CNT_ERR;
    }
    *out = (uint64_t)v;
    return CNT_OK;
}

static int parse_float(const char *s, float *out, char *why, size_t n) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (end == s || isspace((unsigned char)s[0])) {
        snprintf(why, n, "'%s' is not a number", s);
        return CNT_ERR;
    }
    if (*end) {
        snprintf(why, n, "'%s' is not a number (unexpected '%s' after '%.*s')", s, end, (int)(end - s), s);
        return CNT_ERR;
    }
    if (errno == ERANGE) {
        snprintf(why, n, "'%s' is outside the range of a float", s);
        return CNT_ERR;
    }
    if (!isfinite(v)) {
        snprintf(why, n, "'%s' is not a finite number", s);
        return CNT_ERR;
    }
    *out = v;
    return CNT_OK;
}

static int parse_bool(const char *s, int *out, char *why, size_t n) {
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return CNT_OK;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return CNT_OK;
        }
    }
    snprintf(why, n, "'%s' is not a bool (use true/false, yes/no, on/off or 1/0)", s);
    return CNT_ERR;
}

/* Items separated by commas, whitespace, or both: "30,60,90", "30 60 90",
 * "30, 60, 90". Empty text is the empty list; an empty item is an error. */
static int parse_int_list(const char *s, int *items, int *count, int max_count, char *why, size_t n) {
    int k = 0, after_comma = 0;
    const char *p = s;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0') {
            if (after_comma) {
                snprintf(why, n, "'%s' ends with ','", s);
                return CNT_ERR;
            }
            break;
        }
        if (*p == ',') {
            snprintf(why, n, "'%s' has an empty item", s);
            return CNT_ERR;
        }
        size_t len = strcspn(p, ", \t\r\n\v\f");
        char item[32];
        if (len >= sizeof item) {
            snprintf(why, n, "item '%.*s' is too long", (int)len, p);
            return CNT_ERR;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (k == max_count) {
            snprintf(why, n, "'%s' has more than %d items", s, max_count);
            return CNT_ERR;
        }
        if (parse_int(item, &items[k], why, n) != CNT_OK) return CNT_ERR;
        k++;
        p += len;
        while (isspace((unsigned char)*p)) p++;
        after_comma = *p == ',';
        if (after_comma) p++;
    }
    *count = k;
    return CNT_OK;
}

/* Parses text as the value of key k and stores it into cfg (which the caller
 * discards on failure), then checks range and choices. On failure why holds a
 * description without the key's name. */
static int key_parse(const key_def *k, const char *text, config *cfg, char *why, size_t n) {
    void *p = field_ptr(k, cfg);
    if (text[0] == '\0' && k->type != KEY_INT_LIST && !k->empty_ok) {
        snprintf(why, n, "empty value");
        return CNT_ERR;
    }
    int rc = CNT_OK;
    switch (k->type) {
    case KEY_INT:
        if (k->auto_ok && strcmp(text, "auto") == 0) *(int *)p = 0;
        else rc = parse_int(text, p, why, n);
        break;
    case KEY_LONG: rc = parse_long(text, p, why, n); break;
    case KEY_UINT64: rc = parse_u64(text, p, why, n); break;
    case KEY_FLOAT:
        if (k->auto_ok && strcmp(text, "auto") == 0) *(float *)p = 0.0f;
        else rc = parse_float(text, p, why, n);
        break;
    case KEY_BOOL: rc = parse_bool(text, p, why, n); break;
    case KEY_STRING:
        rc = text[0] == '\0' && k->empty_ok ? CNT_OK : check_text(text, why, n);
        if (rc == CNT_OK) {
            memset(p, 0, CONFIG_STR);
            memcpy(p, text, strlen(text));
        }
        break;
    case KEY_ENUM:
        rc = check_text(text, why, n);
        if (rc != CNT_OK) break;
        rc = CNT_ERR;
        for (int i = 0; k->choices[i].name && rc != CNT_OK; i++)
            if (strcmp(text, k->choices[i].name) == 0) {
                *(int *)p = k->choices[i].value;
                rc = CNT_OK;
            }
        if (rc != CNT_OK) not_a_choice(k, text, why, n);
        break;
    case KEY_INT_LIST:
        rc = parse_int_list(text, p, (int *)((char *)cfg + k->count_off), k->max_count, why, n);
        break;
    }
    if (rc != CNT_OK) return CNT_ERR;
    /* a typed 0 is a number out of range, not auto (which is stored as 0) */
    int zero = (k->type == KEY_INT && *(const int *)p == 0) || (k->type == KEY_FLOAT && *(const float *)p == 0.0f);
    if (k->auto_ok && zero && strcmp(text, "auto") != 0) return out_of_range(k, text, why, n);
    return key_check(k, cfg, why, n);
}

/* ----------------------------------------------------------------- public */

void config_defaults(config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *k = &key_table[i];
        char why[256];
        CNT_ASSERT(strlen(k->name) <= CONFIG_NAME_MAX);
        CNT_ASSERT(k->type != KEY_ENUM || k->choices);
        if (key_parse(k, k->def, cfg, why, sizeof why) != CNT_OK)
            cnt_fatal("config table: default of %s.%s: %s", k->section, k->name, why);
    }
}

/* State of one config_load(): shared by the line reader and the key handler. */
typedef struct load_ctx {
    const char *path;
    FILE *f;
    config work;           /* the result, copied out only on success */
    char *line;            /* getline() buffer */
    size_t line_cap;
    int lineno;            /* the line inih is processing */
    int failed;            /* an error message has been stored */
    int first_line[N_KEYS]; /* where each key was set, 0: not yet */
} load_ctx;

/* Stores "path:line: message" and marks the load failed. Returns CNT_ERR. */
static int load_fail(load_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int load_fail(load_ctx *ctx, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->failed = 1;
    return cnt_err_set("%s:%d: %s", ctx->path, ctx->lineno, msg);
}

/* The checks inih does not do (see the top of the file). s has no newline. */
static int check_line(load_ctx *ctx, const char *s) {
    const char *t = s;
    while (isspace((unsigned char)*t)) t++;
    if (*t == '\0' || *t == ';' || *t == '#') return CNT_OK;
    if (t > s)
        return load_fail(ctx, "line starts with whitespace; INI would read it as the continuation of the "
                              "previous value, which is not supported: remove the indentation");
    if (*t == '[') {
        const char *end = strchr(t, ']');
        if (!end) return load_fail(ctx, "section header '%s' has no closing ']'", t);
        const char *after = end + 1;
        while (isspace((unsigned char)*after)) after++;
        if (*after && *after != ';')
            return load_fail(ctx, "unexpected text '%s' after section header", after);
        size_t len = (size_t)(end - t - 1);
        if (!section_known(t + 1, len)) {
            char sections[128];
            section_list(sections, sizeof sections);
            return load_fail(ctx, "unknown section [%.*s] (sections: %s)", (int)len, t + 1, sections);
        }
        return CNT_OK;
    }
    const char *p = t;
    while (*p && *p != '=' && *p != ':' && !(*p == ';' && isspace((unsigned char)p[-1]))) p++;
    if (*p != '=' && *p != ':') return load_fail(ctx, "expected 'key = value' or '[section]', got '%s'", t);
    if (p == t) return load_fail(ctx, "missing key name before '%c'", *p);
    return CNT_OK;
}

/* inih's fgets-style reader: one whole line per call, so the count of lines
 * read is the line number of the handler call that follows. */
static char *ini_read_line(char *str, int num, void *stream) {
    load_ctx *ctx = stream;
    if (ctx->failed) return NULL;
    errno = 0;
    ssize_t got = getline(&ctx->line, &ctx->line_cap, ctx->f);
    if (got < 0) {
        if (ferror(ctx->f)) {
            ctx->failed = 1;
            cnt_err_set("cannot read config '%s': %s", ctx->path, strerror(errno ? errno : EIO));
        }
        return NULL;
    }
    ctx->lineno++;
    char *s = ctx->line;
    size_t len = (size_t)got;
    if (memchr(s, '\0', len)) {
        load_fail(ctx, "line contains a NUL byte");
        return NULL;
    }
    while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == '\r')) s[--len] = '\0';
    if (ctx->lineno == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
        s += 3;
        len -= 3;
    }
    if (num < 1 || len >= (size_t)num) {
        load_fail(ctx, "line is longer than %d characters", num - 1);
        return NULL;
    }
    if (check_line(ctx, s) != CNT_OK) return NULL;
    memcpy(str, s, len + 1);
    return str;
}

static int ini_on_key(void *user, const char *section, const char *name, const char *value) {
    load_ctx *ctx = user;
    if (ctx->failed) return 0;
    if (section[0] == '\0') {
        const key_def *s = key_suggest("", name);
        if (s)
            load_fail(ctx, "key '%s' is outside any section (did you mean %s.%s under [%s]?)", name, s->section,
                      s->name, s->section);
        else
            load_fail(ctx, "key '%s' is outside any section", name);
        return 0;
    }
    const key_def *k = key_find(section, name);
    if (!k) {
        char msg[1024];
        describe_unknown(section, name, msg, sizeof msg);
        load_fail(ctx, "%s", msg);
        return 0;
    }
    int idx = (int)(k - key_table);
    if (ctx->first_line[idx]) {
        load_fail(ctx, "duplicate key %s.%s (first set on line %d)", k->section, k->name, ctx->first_line[idx]);
        return 0;
    }
    ctx->first_line[idx] = ctx->lineno;
    char why[512];
    if (key_parse(k, value, &ctx->work, why, sizeof why) != CNT_OK) {
        load_fail(ctx, "%s.%s: %s", k->section, k->name, why);
        return 0;
    }
    return 1;
}

int config_load(config *cfg, const char *path) {
    FILE *f = file_open_regular(path, "config", NULL);
    if (!f) return CNT_ERR;
    load_ctx *ctx = cnt_calloc(1, sizeof *ctx);
    ctx->path = path;
    ctx->f = f;
    ctx->work = *cfg;
    int ret = ini_parse_stream(ini_read_line, ctx, ini_on_key, ctx);
    int rc = CNT_OK;
    if (ctx->failed) {
        /* An earlier line inih rejected on its own wins over our later error. */
        if (ret > 0 && ret < ctx->lineno) rc = cnt_err_set("%s:%d: syntax error", path, ret);
        else rc = CNT_ERR;
    } else if (ret > 0) {
        rc = cnt_err_set("%s:%d: syntax error", path, ret);
    } else if (ret != 0) {
        rc = cnt_err_set("cannot parse config '%s': inih error %d", path, ret);
    }
    if (rc == CNT_OK) *cfg = ctx->work;
    free(ctx->line);
    free(ctx);
    fclose(f);
    return rc;
}

/* An override as its error messages quote it: shortened when long, so the
 * reason that follows is never cut off by the message buffer. */
static const char *quoted_override(const char *arg, char *buf, size_t len) {
    size_t n = strlen(arg);
    if (n <= 200) return arg;
    snprintf(buf, len, "%.160s... (%zu characters)", arg, n);
    return buf;
}

int config_override(config *cfg, const char *full) {
    char shown[224];
    const char *arg = quoted_override(full, shown, sizeof shown);
    const char *eq = strchr(full, '=');
    if (!eq) return cnt_err_set("command line override '%s': expected section.key=value (no '=')", arg);
    const char *a = full, *b = eq;
    while (a < b && isspace((unsigned char)*a)) a++;
    while (b > a && isspace((unsigned char)b[-1])) b--;
    char key[128];
    if ((size_t)(b - a) >= sizeof key) return cnt_err_set("command line override '%s': key is too long", arg);
    memcpy(key, a, (size_t)(b - a));
    key[b - a] = '\0';
    char *dot = strchr(key, '.');
    if (!dot) {
        const key_def *s = key_suggest("", key);
        if (s)
            return cnt_err_set("command line override '%s': expected section.key=value (no '.'; did you mean %s.%s?)",
                               arg, s->section, s->name);
        return cnt_err_set("command line override '%s': expected section.key=value (no '.')", arg);
    }
    *dot = '\0';
    const char *section = key, *name = dot + 1;
    const key_def *k = key_find(section, name);
    if (!k) {
        char msg[1024];
        describe_unknown(section, name, msg, sizeof msg);
        return cnt_err_set("command line override '%s': %s", arg, msg);
    }
    const char *v = eq + 1, *ve = eq + strlen(eq);
    while (*v && isspace((unsigned char)*v)) v++;
    while (ve > v && isspace((unsigned char)ve[-1])) ve--;
    char *value = cnt_malloc((size_t)(ve - v) + 1);
    memcpy(value, v, (size_t)(ve - v));
    value[ve - v] = '\0';
    config work = *cfg;
    char why[512];
    int rc = key_parse(k, value, &work, why, sizeof why);
    free(value);
    if (rc != CNT_OK) return cnt_err_set("command line override '%s': %s.%s: %s", arg, k->section, k->name, why);
    *cfg = work;
    return CNT_OK;
}

/* One dimension of the shape: digits only, in 1..max. *end receives the
 * character after the digits. */
static int shape_dim(const char *s, const char **end, int max, int *out) {
    long v = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9' && p - s < 9) v = v * 10 + (*p++ - '0');
    if (p == s || (*p >= '0' && *p <= '9') || v < 1 || v > max) return CNT_ERR;
    *end = p;
    *out = (int)v;
    return CNT_OK;
}

int config_parse_shape(const char *s, int *c, int *h, int *w) {
    const char *p = s;
    int dims[3];
    static const int max[3] = {3, 4096, 4096};
    for (int i = 0; i < 3; i++) {
        if (shape_dim(p, &p, max[i], &dims[i]) != CNT_OK || *p != (i < 2 ? 'x' : '\0'))
            return cnt_err_set("'%.64s' is not CxHxW with C in 1..3 and H, W in 1..4096 (e.g. 3x32x32)", s);
        if (i < 2) p++;
    }
    *c = dims[0];
    *h = dims[1];
    *w = dims[2];
    return CNT_OK;
}

int config_synthetic_shape(const config *cfg, int *c, int *h, int *w) {
    if (config_parse_shape(cfg->synthetic_shape, c, h, w) == CNT_OK) return CNT_OK;
    return cnt_err_prefix("invalid configuration: data.synthetic_shape");
}

int config_norm_values(const config *cfg, int want_std, float v[3], int *is_auto) {
    int n;
    int rc = config_norm_parse(want_std ? "data.std" : "data.mean", want_std ? cfg->std : cfg->mean, want_std, v, &n);
    *is_auto = rc == CNT_OK && n == 0;
    return rc;
}

void config_norm_text(const float *v, int n, char *out, size_t len) {
    size_t o = 0;
    out[0] = '\0';
    for (int c = 0; c < n && o < len; c++) {
        int w = snprintf(out + o, len - o, "%s%.9g", c ? "," : "", (double)v[c]);
        if (w < 0) break;
        o += (size_t)w;
    }
}

int config_norm_same(const float *a, const float *b, int n) {
    for (int c = 0; c < n; c++)
        if (fabsf(a[c] - b[c]) > 1e-5f * fabsf(b[c]) + 1e-7f) return 0;
    return 1;
}

int config_norm_parse(const char *key, const char *s, int want_std, float v[3], int *count) {
    *count = 0;
    if (strcmp(s, "auto") == 0) {
        for (int i = 0; i < 3; i++) v[i] = want_std ? 1.0f : 0.0f;
        return CNT_OK;
    }
    int n = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ') p++;
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno != 0 || !isfinite(x) || n == 3 || (want_std && !(x > 0)) || x < -1e6 || x > 1e6)
            return cnt_err_set("invalid configuration: %s: '%.64s' is not auto or 1 or 3 numbers separated by "
                               "commas%s",
                               key, s, want_std ? " (each > 0)" : "");
        v[n++] = (float)x;
        p = end;
        while (*p == ' ') p++;
        if (*p == '\0') break;
        if (*p != ',') return cnt_err_set("invalid configuration: %s: '%.64s': unexpected '%c'", key, s, *p);
        p++;
    }
    if (n == 2) return cnt_err_set("invalid configuration: %s: '%.64s' has 2 numbers; give 1 or 3", key, s);
    if (n == 1) v[1] = v[2] = v[0];
    *count = n;
    return CNT_OK;
}

int config_timeline_window(const config *cfg, long *first, long *last) {
    *first = 1;
    *last = LONG_MAX;
    if (!cfg->timeline_steps[0]) return CNT_OK;
    char *end;
    errno = 0;
    long a = strtol(cfg->timeline_steps, &end, 10);
    long b = -1;
    if (*end == ':') b = strtol(end + 1, &end, 10);
    if (errno || *end || a < 1 || b < a)
        return cnt_err_set("invalid configuration: dist.timeline_steps = '%s': give A:B, the first and last step "
                           "to record (1 <= A <= B), or leave it empty for every step",
                           cfg->timeline_steps);
    *first = a;
    *last = b;
    return CNT_OK;
}

int config_validate(const config *cfg) {
    if (!zoo_has(cfg->model_name))
        return cnt_err_set("invalid configuration: model.name = '%s' is not a model of the zoo (available: %s)",
                           cfg->model_name, zoo_names());
    char why[512];
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *k = &key_table[i];
        if (key_check(k, cfg, why, sizeof why) != CNT_OK)
            return cnt_err_set("invalid configuration: %s.%s: %s", k->section, k->name, why);
    }
    int sc, sh, sw;
    if (config_synthetic_shape(cfg, &sc, &sh, &sw) != CNT_OK) return CNT_ERR;
    if (cfg->channels == 2)
        return cnt_err_set("invalid configuration: data.channels must be 0 (from the data), 1 or 3, got 2");
    float nv[3];
    int na;
    if (config_norm_values(cfg, 0, nv, &na) != CNT_OK || config_norm_values(cfg, 1, nv, &na) != CNT_OK)
        return CNT_ERR;
    for (int i = 1; i < cfg->n_milestones; i++)
        if (cfg->milestones[i] <= cfg->milestones[i - 1])
            return cnt_err_set("invalid configuration: optim.milestones must be strictly ascending (%d follows %d)",
                               cfg->milestones[i], cfg->milestones[i - 1]);
    if (cfg->schedule == LR_SCHEDULE_STEP && cfg->n_milestones == 0)
        return cnt_err_set("invalid configuration: optim.schedule = step needs optim.milestones (e.g. 30,60,90)");
    if (cfg->nesterov && cfg->momentum == 0.0f)
        return cnt_err_set("invalid configuration: optim.nesterov = true needs optim.momentum > 0");
    if ((cfg->schedule == LR_SCHEDULE_COSINE || cfg->schedule == LR_SCHEDULE_POLY) && cfg->min_lr > cfg->lr)
        return cnt_err_set("invalid configuration: optim.min_lr (%g) is above optim.lr (%g): the %s schedule "
                           "would raise the rate",
                           (double)cfg->min_lr, (double)cfg->lr, config_name(cfg, &cfg->schedule));
    if (cfg->bucket_mb == 0.0f && cfg->dist_mode == DIST_MODE_PS)
        return cnt_err_set("invalid configuration: dist.bucket_mb = auto sizes the allreduce's buckets; dist.mode = "
                           "ps sends whole shards (set a size, or leave the key out)");
    if (cfg->compress == REDUCER_COMPRESS_POWERSGD && cfg->buckets_in_flight > 1)
        return cnt_err_set("invalid configuration: dist.buckets_in_flight = %d with dist.compress = powersgd: each "
                           "bucket's two sums depend on each other, so buckets are compressed one at a time "
                           "(dist.buckets_in_flight = 1)",
                           cfg->buckets_in_flight);
    if (cfg->buckets_in_flight > 1 &&
        (cfg->dist_backend == DIST_BACKEND_MPI || cfg->dist_backend == DIST_BACKEND_NCCL))
        return cnt_err_set("invalid configuration: dist.buckets_in_flight = %d needs dist.backend = ring or hier; "
                           "dist.backend = %s sums one bucket at a time (MPI_Allreduce blocks its thread, NCCL "
                           "queues its buckets on one stream)",
                           cfg->buckets_in_flight, config_name(cfg, &cfg->dist_backend));
    if (cfg->dist_mode == DIST_MODE_PS && cfg->compress != REDUCER_COMPRESS_NONE)
        return cnt_err_set("invalid configuration: dist.compress = %s compresses the allreduce's buckets; dist.mode = "
                           "ps pushes and pulls fp32 shards (dist.compress = none)",
                           config_name(cfg, &cfg->compress));
    if (cfg->dist_mode == DIST_MODE_PS && cfg->dist_backend == DIST_BACKEND_NCCL)
        return cnt_err_set("invalid configuration: dist.mode = ps sends gradients and parameters over MPI through "
                           "host memory; dist.backend = nccl is for dist.mode = allreduce");
    int loss_scaled = cfg->loss_scaling == LOSS_SCALE_DYNAMIC || cfg->loss_scaling == LOSS_SCALE_STATIC ||
                      (cfg->loss_scaling == LOSS_SCALE_AUTO && cfg->precision == BACKEND_MATH_FP16);
    if (cfg->dist_mode == DIST_MODE_PS && loss_scaled)
        return cnt_err_set("invalid configuration: dist.mode = ps does not do loss scaling (train.precision = fp16 "
                           "or train.loss_scaling = dynamic/static): use fp32, tf32 or bf16, or dist.mode = "
                           "allreduce");
    if (cfg->compress == REDUCER_COMPRESS_POWERSGD && loss_scaled)
        return cnt_err_set("invalid configuration: dist.compress = powersgd keeps each rank's compression error "
                           "from step to step, which a loss scale that changes (or an overflowing step) would "
                           "corrupt; it does not go with loss scaling (train.precision = fp16 or "
                           "train.loss_scaling = dynamic/static): use fp32, tf32 or bf16, or dist.compress = fp16");
    if ((cfg->activations == BACKEND_DTYPE_BF16 && cfg->precision != BACKEND_MATH_BF16) ||
        (cfg->activations == BACKEND_DTYPE_FP16 && cfg->precision != BACKEND_MATH_FP16))
        return cnt_err_set("invalid configuration: train.activations = %s goes with train.precision = %s (found "
                           "%s); use auto or fp32",
                           config_name(cfg, &cfg->activations), config_name(cfg, &cfg->activations),
                           config_name(cfg, &cfg->precision));
    long tl_first, tl_last;
    if (config_timeline_window(cfg, &tl_first, &tl_last) != CNT_OK) return CNT_ERR;
    if (cfg->ps_sync && cfg->ps_max_staleness >= 0)
        return cnt_err_set("invalid configuration: dist.ps_max_staleness = %d bounds asynchronous training: set "
                           "dist.ps_sync = false with it (synchronous training has no stale gradients)",
                           cfg->ps_max_staleness);
    if (cfg->decoder == DATA_DECODER_NVJPEG && cfg->device == BACKEND_DEVICE_CPU)
        return cnt_err_set("invalid configuration: data.decoder = nvjpeg decodes on the rank's GPU: it needs "
                           "train.device = cuda or auto, got cpu");
    if (cfg->read_order == LOADER_ORDER_BLOCKS && cfg->data_kind != DATA_KIND_SHARDS)
        return cnt_err_set("invalid configuration: data.read_order = blocks reads shard sets (data.kind = shards, "
                           "written by build/tools/make_shards), got data.kind = %s",
                           config_name(cfg, &cfg->data_kind));
    if (cfg->dist_backend == DIST_BACKEND_NCCL && cfg->device == BACKEND_DEVICE_CPU)
        return cnt_err_set("invalid configuration: dist.backend = nccl needs GPUs (train.device = cuda or auto), "
                           "got train.device = cpu");
    return CNT_OK;
}

/* The default as shown to people: the table's text, "(none)" when empty. */
static const char *default_text(const key_def *k) { return k->def[0] ? k->def : "(none)"; }

void config_print_help(FILE *out) {
    fprintf(out, "Configuration keys: set them in an INI file under [section] headers, or override\n"
                 "one on the command line as section.key=value (e.g. optim.lr=0.05). Booleans take\n"
                 "true/false, yes/no, on/off or 1/0; lists are separated by commas or spaces.\n");
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *k = &key_table[i];
        if (i == 0 || strcmp(k->section, key_table[i - 1].section) != 0) fprintf(out, "\n[%s]\n", k->section);
        char full[80], allowed[256];
        snprintf(full, sizeof full, "%s.%s", k->section, k->name);
        allowed_text(k, 0, allowed, sizeof allowed);
        fprintf(out, "  %-26s %s, default %s; allowed: %s\n", full, type_name(k->type), default_text(k), allowed);
        fprintf(out, "  %-26s %s\n", "", k->help);
    }
}

/* A Markdown table cell: '|' escaped. */
static void md_cell(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}

void config_print_reference_md(FILE *out) {
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *k = &key_table[i];
        if (i == 0 || strcmp(k->section, key_table[i - 1].section) != 0) {
            fprintf(out, "%s### [%s]\n\n", i ? "\n" : "", k->section);
            fprintf(out, "| key | type | default | allowed | description |\n");
            fprintf(out, "|-----|------|---------|---------|-------------|\n");
        }
        char allowed[256];
        allowed_text(k, 1, allowed, sizeof allowed);
        fprintf(out, "| `%s.%s` | %s | ", k->section, k->name, type_name(k->type));
        if (k->def[0]) {
            fputc('`', out);
            md_cell(out, k->def);
            fputc('`', out);
        } else {
            fputs("(none)", out);
        }
        fputs(" | ", out);
        md_cell(out, allowed);
        fputs(" | ", out);
        md_cell(out, k->help);
        fputs(" |\n", out);
    }
}

void config_write_ini(const config *cfg, FILE *out) {
    fprintf(out, "; cnntrain configuration: every key, as used by the run\n");
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *k = &key_table[i];
        if (i == 0 || strcmp(k->section, key_table[i - 1].section) != 0) fprintf(out, "\n[%s]\n", k->section);
        char value[CONFIG_STR];
        value_text(k, cfg, value, sizeof value);
        fprintf(out, "%s =%s%s\n", k->name, value[0] ? " " : "", value);
    }
}

/* ------------------------------------------------ enumerated values by name */

/* The key "section.key", or NULL. */
static const key_def *key_find_dotted(const char *dotted) {
    const char *dot = strchr(dotted, '.');
    if (!dot || (size_t)(dot - dotted) >= 32) return NULL;
    char section[32];
    memcpy(section, dotted, (size_t)(dot - dotted));
    section[dot - dotted] = '\0';
    return key_find(section, dot + 1);
}

const char *config_name(const config *cfg, const void *field) {
    size_t off = (size_t)((const char *)field - (const char *)cfg);
    for (int i = 0; i < N_KEYS; i++)
        if (key_table[i].type == KEY_ENUM && key_table[i].off == off) return choice_name(&key_table[i], *(const int *)field);
    CNT_ASSERT(!"config_name: not an enumerated key's field");
    return "?";
}

void config_choices(const char *key, const char *sep, char *buf, size_t len) {
    const key_def *k = key_find_dotted(key);
    CNT_ASSERT(k && k->type == KEY_ENUM);
    buf[0] = '\0';
    for (int i = 0; k->choices[i].name; i++) append(buf, len, "%s%s", i ? sep : "", k->choices[i].name);
}

int config_parse_choice(const char *key, const char *value, int *out) {
    const key_def *k = key_find_dotted(key);
    CNT_ASSERT(k && k->type == KEY_ENUM);
    config work;
    char why[512];
    if (key_parse(k, value, &work, why, sizeof why) != CNT_OK) return cnt_err_set("%s: %s", key, why);
    *out = *(const int *)field_cptr(k, &work);
    return CNT_OK;
}

/* --------------------------------------------- what the modules are given */

optim_opts config_optim_opts(const config *cfg) {
    return (optim_opts){.momentum = cfg->momentum, .weight_decay = cfg->weight_decay, .nesterov = cfg->nesterov,
                        .wd_on_bn_bias = cfg->wd_on_bn_bias, .lars = cfg->optim == OPTIM_LARS,
                        .lars_eta = cfg->lars_eta};
}

schedule config_schedule(const config *cfg, int world, long steps_per_epoch) {
    schedule s = {.kind = cfg->schedule, .gamma = cfg->gamma, .min_lr = cfg->min_lr, .poly_power = cfg->poly_power,
                  .warmup_epochs = cfg->warmup_epochs, .steps_per_epoch = steps_per_epoch,
                  .total_steps = steps_per_epoch * cfg->epochs, .n_milestones = cfg->n_milestones};
    memcpy(s.milestones, cfg->milestones, sizeof s.milestones);
    /* Linear scaling (Goyal et al. 2017): N workers take N times larger steps
     * on the N times larger global batch, reached through the warm-up, whose
     * gradual form starts at one worker's rate; K accumulated micro-batches
     * make the global batch K times larger again. */
    s.base_lr = cfg->lr_scaling == LR_SCALING_LINEAR ? (double)cfg->lr * world * cfg->accumulate : (double)cfg->lr;
    s.warmup_start = cfg->warmup_start == WARMUP_FROM_LR ? (double)cfg->lr : 0.0;
    return s;
}

loss_scale_opts config_loss_scale_opts(const config *cfg) {
    loss_scale_mode m = cfg->loss_scaling;
    if (m == LOSS_SCALE_AUTO) m = cfg->precision == BACKEND_MATH_FP16 ? LOSS_SCALE_DYNAMIC : LOSS_SCALE_NONE;
    return (loss_scale_opts){.mode = m, .scale = (double)cfg->loss_scale, .window = cfg->loss_scale_window};
}

/* dist.bucket_mb in MiB; auto: the default until the trainer has chosen (train/run_buckets.c). */
static double bucket_mb_now(const config *cfg) {
    return cfg->bucket_mb == 0.0f ? CONFIG_BUCKET_MB_DEFAULT : (double)cfg->bucket_mb;
}

reducer_opts config_reducer_opts(const config *cfg) {
    size_t mib = (size_t)1 << 20;
    size_t first = (size_t)(cfg->first_bucket_mb * mib / sizeof(float));
    size_t bucket = (size_t)(bucket_mb_now(cfg) * mib / sizeof(float));
    return (reducer_opts){.first_bucket = first ? first : 1, .bucket = bucket ? bucket : 1,
                          .algo = dist_backend_algo(cfg->dist_backend),
                          .in_flight = cfg->buckets_in_flight, .overlap = cfg->overlap, .comm_nice = cfg->comm_nice,
                          .compress = cfg->compress, .psgd_rank = cfg->powersgd_rank,
                          .psgd_start = cfg->powersgd_start, .psgd_threads = cfg->powersgd_threads,
                          .psgd_seed = cfg->seed, .stall_warn_s = cfg->stall_warn_s,
                          .stall_abort_s = cfg->stall_abort_s, .nccl = NULL};
}

exchange_opts config_exchange_opts(const config *cfg) {
    exchange_opts o = {.mode = cfg->dist_mode, .backend = cfg->dist_backend, .reducer = config_reducer_opts(cfg),
                       .ps_servers = cfg->ps_servers, .ps_sync = cfg->ps_sync,
                       .ps_max_staleness = cfg->ps_max_staleness,
                       .bucket_mb = bucket_mb_now(cfg),
                       .first_bucket_mb = cfg->first_bucket_mb};
    snprintf(o.device, sizeof o.device, "%s", config_name(cfg, &cfg->device));
    return o;
}

zoo_options config_zoo_options(const config *cfg, const backend *be) {
    return (zoo_options){.zero_init_residual = cfg->zero_init_residual, .aux_logits = cfg->aux_logits,
                         .dropout = cfg->dropout, .math = cfg->precision, .no_fusion = !cfg->fuse,
                         .activations = config_activations(cfg, be), .conv_api = config_conv_api(cfg, be)};
}

backend_dtype config_activations(const config *cfg, const backend *be) {
    if (cfg->activations != CONFIG_ACT_AUTO) return (backend_dtype)cfg->activations;
    return be ? backend_act_choose(be, cfg->precision) : BACKEND_DTYPE_FP32;
}

backend_conv_api config_conv_api(const config *cfg, const backend *be) {
    if (cfg->conv_api != CONFIG_CONV_API_AUTO) return (backend_conv_api)cfg->conv_api;
    return be ? be->conv_api_auto : BACKEND_CONV_API_LEGACY;
}

step_opts config_step_opts(const config *cfg) {
    return (step_opts){.label_smoothing = cfg->label_smoothing, .aux_weight = cfg->aux_weight,
                       .accumulate = cfg->accumulate, .cuda_graph = cfg->cuda_graph, .batch = cfg->batch_size};
}

int config_crop(const config *cfg) {
    switch (cfg->crop) {
    case DATA_CROP_PAD: return LOADER_CROP_PAD;
    case DATA_CROP_RESIZED: return LOADER_CROP_RESIZED;
    case DATA_CROP_AUTO: break;
    }
    return config_file_backed(cfg) ? LOADER_CROP_RESIZED : LOADER_CROP_PAD;
}

int config_file_backed(const config *cfg) {
    return cfg->data_kind == DATA_KIND_IMAGEFOLDER || cfg->data_kind == DATA_KIND_SHARDS;
}

int config_batch_u8(const config *cfg, const backend *be) {
    if (cfg->batch_dtype != DATA_BATCH_AUTO) return cfg->batch_dtype == DATA_BATCH_UINT8;
    return be && !be->is_cpu;
}

resume_mode config_resume(const config *cfg) {
    if (strcmp(cfg->ckpt_resume, "none") == 0) return RESUME_NONE;
    if (strcmp(cfg->ckpt_resume, "auto") == 0) return RESUME_AUTO;
    return RESUME_FILE;
}
