/*
 * train/main.c - the `trainer` command line.
 *
 *   trainer CONFIG.ini [section.key=value ...]     train
 *   trainer --summary CONFIG.ini [overrides ...]   layers, shapes, parameters, FLOPs of the configured model
 *   trainer --summary MODEL                        the same for a zoo model at ImageNet shape
 *   trainer --bench-data CONFIG.ini [overrides ...] data loader images/sec for 1, 2, 4, ... workers
 *   trainer --export CHECKPOINT OUT.safetensors    the checkpoint's weights for PyTorch (torchvision names)
 *   trainer --devices                              the backends built in and the GPUs this process sees
 *   trainer --config-reference [md]
 *   trainer --help | --version
 *
 * Exit codes: 0 success, 1 run-time failure (missing data, diverged), 2 usage
 * or configuration error.
 */
#include "common/check.h"
#include "common/cpus.h"
#include "common/fileio.h"
#include "common/timer.h"
#include "dist/dist.h"
#include "data/jpeg.h"
#include "model/backend.h"
#include "model/zoo.h"
#include "train/bench.h"
#include "train/config.h"
#include "train/profile.h"
#include "train/stop.h"
#include "train/trainer.h"
#include "train/weights.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#define CNT_VERSION "0.1.0"

static void usage(FILE *out) {
    fprintf(out,
            "usage: trainer CONFIG.ini [section.key=value ...]\n"
            "       trainer --summary CONFIG.ini [section.key=value ...]\n"
            "       trainer --summary MODEL          (a zoo model at ImageNet shape)\n"
            "       trainer " BENCH_SYNOPSIS "\n"
            "                                        (training speed on random data; KEY: device, precision,\n"
            "                                         layout, activations, fuse, optim, classes)\n"
            "       trainer --bench-data CONFIG.ini [section.key=value ...]   (loader images/s, 1, 2, 4... workers)\n"
            "       trainer --profile CONFIG.ini OUT.json [section.key=value ...]   (one step, layer by layer, as JSON)\n"
            "       trainer --export CHECKPOINT OUT.safetensors   (weights with torchvision's names, for PyTorch)\n"
            "       trainer --eval CONFIG.ini WEIGHTS [section.key=value ...]\n"
            "                                        (a checkpoint or .safetensors scored on the test set)\n"
            "       trainer --devices                (backends built in, GPUs usable here)\n"
            "       trainer --config-reference [md]  (every config key: type, default, allowed values, meaning)\n"
            "       trainer --help | --version\n");
}

static void print_help(void) {
    usage(stdout);
    printf("\ncnntrain trains ResNet, VGG and Inception V3 on CPUs or NVIDIA GPUs, in one process or\n"
           "data-parallel under mpirun. A run is an INI file; any key can be overridden as section.key=value.\n"
           "\n"
           "examples:\n"
           "  ./trainer configs/resnet20-fashion.ini                     the quick start: one process\n"
           "  ./trainer configs/resnet20-fashion.ini train.epochs=5 optim.lr=0.05\n"
           "  mpirun -np 4 ./trainer configs/resnet20-fashion.ini train.threads=1\n"
           "                                                 4 ranks on this machine (CPU: 1 thread each)\n"
           "  mpirun -np 16 --hostfile hosts --map-by ppr:8:node ./trainer configs/resnet101.ini\n"
           "                                                 2 nodes of 8 GPUs: one rank per GPU\n"
           "  ./trainer configs/resnet101.ini checkpoint.resume=auto\n"
           "                                                 resume from the latest checkpoint in train.out_dir\n"
           "  mpirun -np 4 ./trainer configs/resnet20-fashion.ini dist.mode=ps dist.ps_servers=1\n"
           "                                                 3 workers and a parameter server\n"
           "  ./trainer --export runs/resnet20-fashion/checkpoints/ckpt-000015.cnt w.safetensors\n"
           "                                                 weights for PyTorch (torchvision's names)\n"
           "  ./trainer --eval configs/resnet20-fashion.ini runs/resnet20-fashion/checkpoints/ckpt-000015.cnt\n"
           "                                                 a checkpoint's test loss, top-1 and top-5\n"
           "  python3 tools/plot_metrics.py runs/resnet20-fashion   training curves (curves.png)\n"
           "\n");
    /* the zoo's names, wrapped */
    const char *z = zoo_names();
    int col = printf("zoo models:");
    while (*z) {
        while (*z == ' ') z++;
        int len = (int)strcspn(z, " ");
        if (!len) break;
        if (col + 1 + len > 100) col = printf("\n           ") - 1;
        col += printf(" %.*s", len, z);
        z += len;
    }
    printf("\n"
           "config sections: [model] [data] [train] [optim] [checkpoint] [dist]; every key: --config-reference\n"
           "docs: README.md, docs/data-parallel.md (how it works), docs/multi-node.md (clusters, Slurm)\n");
}

/* A whole-number command-line argument >= min, or a message naming `what`. */
static int parse_count(const char *arg, const char *what, int min, int *out) {
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end || errno || v < min || v > 1 << 30) {
        fprintf(stderr, "trainer: bad %s '%s'\n", what, arg);
        return CNT_ERR;
    }
    *out = (int)v;
    return CNT_OK;
}

/* One `--bench` key=value option into cfg: device, precision, layout,
 * activations, fuse, conv_api and cuda_graph are train.device,
 * train.precision, train.layout, train.activations, train.fuse,
 * train.conv_api and train.cuda_graph, optim is optim.name (the config's
 * table parses them), classes a count. Prints why and returns
 * CNT_ERR. */
static int parse_bench_option(const char *arg, config *cfg) {
    static const char *const keys[] = {"device", "precision", "layout", "activations", "fuse", "conv_api",
                                       "cuda_graph"};
    const char *eq = strchr(arg, '=');
    if (!eq) {
        fprintf(stderr, "trainer: --bench: '%s' after a key=value option; expected key=value\n", arg);
        return CNT_ERR;
    }
    size_t kl = (size_t)(eq - arg);
    if (kl == 5 && strncmp(arg, "optim", kl) == 0) {
        char setting[256];
        snprintf(setting, sizeof setting, "optim.name%s", eq);
        if (config_override(cfg, setting) == CNT_OK) return CNT_OK;
    }
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (strlen(keys[k]) != kl || strncmp(arg, keys[k], kl) != 0) continue;
        char setting[256];
        snprintf(setting, sizeof setting, "train.%s", arg);
        if (config_override(cfg, setting) == CNT_OK) return CNT_OK;
        break; /* a value the key does not take: the options below */
    }
    if (kl == 7 && strncmp(arg, "classes", kl) == 0)
        return parse_count(eq + 1, "classes (at least 2)", 2, &cfg->synthetic_classes);
    char choices[7][128], key[32];
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (strcmp(keys[k], "fuse") == 0 || strcmp(keys[k], "cuda_graph") == 0) continue; /* booleans */
        snprintf(key, sizeof key, "train.%s", keys[k]);
        config_choices(key, "|", choices[k], sizeof choices[k]);
    }
    fprintf(stderr,
            "trainer: --bench: unknown option '%s' (device=%s, precision=%s, layout=%s, activations=%s, "
            "fuse=true|false, conv_api=%s, cuda_graph=true|false, optim=sgd|lars, classes=N)\n",
            arg, choices[0], choices[1], choices[2], choices[3], choices[5]);
    return CNT_ERR;
}

/* Loads CONFIG and applies overrides argv[first..argc). Exits 2 on error. */
static void load_config(config *cfg, const char *path, int argc, char **argv, int first) {
    config_defaults(cfg);
    if (config_load(cfg, path) != CNT_OK) {
        fprintf(stderr, "trainer: %s\n", cnt_err_msg());
        exit(2);
    }
    for (int i = first; i < argc; i++) {
        if (config_override(cfg, argv[i]) != CNT_OK) {
            fprintf(stderr, "trainer: %s\n", cnt_err_msg());
            exit(2);
        }
    }
    if (config_validate(cfg) != CNT_OK) {
        fprintf(stderr, "trainer: %s\n", cnt_err_msg());
        exit(2);
    }
}

/* --version */
static int cmd_version(int argc, char **argv) {
    (void)argc, (void)argv;
    printf("cnntrain %s\nbackends: %s\nmpi: %s\nnccl: %s\n", CNT_VERSION, backend_list_built(),
           CNT_HAVE_MPI ? "built in" : "not built in", CNT_HAVE_NCCL ? "built in" : "not built in");
    /* which copy of each library this binary runs with: on a cluster, the module or wheel it came from */
    char libs[4096] = "";
    backend_libraries(libs, sizeof libs);
    dist_libraries(libs, sizeof libs);
    jpeg_libraries(libs, sizeof libs);
    printf("libraries (the version loaded, the headers built with, the file):\n%s", libs);
    return 0;
}

/* --help, -h */
static int cmd_help(int argc, char **argv) {
    (void)argc, (void)argv;
    print_help();
    return 0;
}

/* --devices: the backends built in and the GPUs this process sees. */
static int cmd_devices(int argc, char **argv) {
    (void)argc, (void)argv;
    char buf[4096];
    int n = backend_describe_devices(buf, sizeof buf);
    char cpu[256];
    backend_cpu()->describe(cpu, sizeof cpu);
    printf("backends built in: %s\n%s: layouts nchw, nhwc%s\n%s", backend_list_built(), cpu,
           backend_cpu()->block_c > 0 ? ", blocked (the default)" : "", buf);
    printf("device=auto uses: %s\n", n > 0 ? "cuda (one GPU per rank, by local rank)" : "cpu");
    return 0;
}

/* --config-reference [md]: plain text for people; md: the Markdown tables
 * docs/usage.md embeds (tools/dev/update_config_reference.sh). */
static int cmd_config_reference(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[2], "md") != 0) {
        fprintf(stderr, "trainer: --config-reference takes nothing or md, got '%s'\n", argv[2]);
        return 2;
    }
    if (argc > 2) config_print_reference_md(stdout);
    else config_print_help(stdout);
    return 0;
}

/* A command's failure: its message, exit 1. */
static int failed(void) {
    fprintf(stderr, "trainer: %s\n", cnt_err_msg());
    return 1;
}

/* --summary CONFIG.ini [overrides] | --summary MODEL */
static int cmd_summary(int argc, char **argv) {
    if (argc < 3) {
        usage(stderr);
        return 2;
    }
    const char *what = argv[2];
    int status;
    if (access(what, F_OK) != 0 && zoo_has(what)) {
        if (argc > 3) {
            fprintf(stderr, "trainer: --summary MODEL takes no overrides\n");
            return 2;
        }
        status = trainer_summary_model(what, stdout);
    } else {
        config cfg;
        load_config(&cfg, what, argc, argv, 3);
        status = trainer_summary_config(&cfg, stdout);
    }
    return status != CNT_OK ? failed() : 0;
}

/* --bench MODEL CxHxW BATCH [STEPS [THREADS]] [key=value ...]: positional
 * STEPS and THREADS, then key=value options in any order. */
static int cmd_bench(int argc, char **argv) {
    int npos = argc;
    for (int i = 5; i < argc; i++)
        if (strchr(argv[i], '=')) {
            npos = i;
            break;
        }
    if (argc < 5 || npos > 7) {
        usage(stderr);
        return 2;
    }
    int c, h, w, batch_size, steps = 20, threads = 0;
    if (parse_count(argv[4], "batch size", 1, &batch_size) != CNT_OK ||
        (npos > 5 && parse_count(argv[5], "step count", 1, &steps) != CNT_OK) ||
        (npos > 6 && parse_count(argv[6], "thread count", 0, &threads) != CNT_OK))
        return 2;
    if (config_parse_shape(argv[3], &c, &h, &w) != CNT_OK) {
        fprintf(stderr, "trainer: %s\n", cnt_err_msg());
        return 2;
    }
    config cfg;
    bench_config(&cfg, argv[2], c, h, w, 10, batch_size, threads);
    for (int i = npos; i < argc; i++)
        if (parse_bench_option(argv[i], &cfg) != CNT_OK) return 2;
    if (config_validate(&cfg) != CNT_OK) { /* options that do not go together */
        fprintf(stderr, "trainer: --bench: %s\n", cnt_err_msg());
        return 2;
    }
    return bench_run(&cfg, steps, 3, NULL, stdout) != CNT_OK ? failed() : 0;
}

/* --bench-data CONFIG.ini [overrides] */
static int cmd_bench_data(int argc, char **argv) {
    if (argc < 3) {
        usage(stderr);
        return 2;
    }
    config cfg;
    load_config(&cfg, argv[2], argc, argv, 3);
    return bench_data(&cfg, 3.0, stdout) != CNT_OK ? failed() : 0;
}

/* --profile CONFIG.ini OUT.json [overrides]: train.max_steps, when set, is
 * the number of timed steps. A failed profile leaves no file. */
static int cmd_profile(int argc, char **argv) {
    if (argc < 4) {
        usage(stderr);
        return 2;
    }
    config cfg;
    load_config(&cfg, argv[2], argc, argv, 4);
    int steps = cfg.max_steps > 0 ? (int)(cfg.max_steps < 100000 ? cfg.max_steps : 100000) : 20;
    /* through OUT.tmp and a rename: a failed profile leaves an earlier OUT whole */
    const char *out = argv[3], *in[1] = {argv[2]}, *role[1] = {"config"};
    if (file_check_output(out, "the profile", 0, 1, in, role) != CNT_OK) return failed();
    char tmp[4096], dir[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out) >= (int)sizeof tmp || file_dir_of(out, dir, sizeof dir) != CNT_OK) {
        fprintf(stderr, "trainer: --profile: path too long: '%s'\n", out);
        return 1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "trainer: --profile: cannot write the profile '%s': %s\n", out, strerror(errno));
        return 1;
    }
    int rc = profile_run(&cfg, steps, 3, f);
    if (file_commit_atomic(f, rc != CNT_OK, tmp, out, dir, "profile") != CNT_OK) return failed();
    printf("profile of %d steps of %s written to %s\n", steps, cfg.model_name, argv[3]);
    return 0;
}

/* --export CHECKPOINT OUT.safetensors */
static int cmd_export(int argc, char **argv) {
    if (argc != 4) {
        usage(stderr);
        return 2;
    }
    int n_tensors = 0;
    const char *in[1] = {argv[2]}, *role[1] = {"checkpoint"};
    if (file_check_output(argv[3], "the export", 0, 1, in, role) != CNT_OK) return failed();
    if (weights_export(argv[2], argv[3], &n_tensors) != CNT_OK) return failed();
    printf("exported %d tensors from %s to %s\n", n_tensors, argv[2], argv[3]);
    return 0;
}

/* --eval CONFIG.ini WEIGHTS [overrides]: WEIGHTS is the one argument after
 * CONFIG without '=' (so it may come before, between or after the
 * overrides). In one process or as a rank of a job. */
static int cmd_eval(int argc, char **argv) {
    const char *weights = NULL;
    char **rest = cnt_malloc((size_t)argc * sizeof *rest);
    int n = 0;
    for (int i = 3; i < argc; i++) {
        if (strchr(argv[i], '=') || weights) rest[n++] = argv[i];
        else weights = argv[i];
    }
    if (argc < 4 || !weights) {
        free(rest);
        usage(stderr);
        return 2;
    }
    config cfg;
    char *args[] = {argv[0], argv[1], argv[2]};
    char **all = cnt_malloc((size_t)(3 + n) * sizeof *all);
    memcpy(all, args, sizeof args);
    memcpy(all + 3, rest, (size_t)n * sizeof *rest);
    load_config(&cfg, argv[2], 3 + n, all, 3);
    free(all);
    free(rest);
    /* before any rank reads it: a missing or unreadable file is said at once, on every rank */
    FILE *f = file_open_regular(weights, "weights file", NULL);
    if (!f) return failed();
    fclose(f);
    if (dist_init(&argc, &argv) != CNT_OK) return failed();
    dist_set_wait_limits(cfg.stall_warn_s, cfg.stall_abort_s);
    dist_set_progress(cfg.progress);
    eval_result er;
    long skipped = 0;
    double t0 = time_now();
    if (trainer_eval(&cfg, weights, &er, &skipped) != CNT_OK) {
        log_error("%s", cnt_err_msg());
        if (dist_job_world() > 1) dist_abort(1); /* the other ranks may wait in a collective */
        return 1;
    }
    double secs = time_now() - t0;
    int rank0 = dist_rank() == 0;
    long skipped_all = skipped;
    dist_phase("eval: unreadable images count");
    if (dist_world() > 1) {
        double s = (double)skipped;
        dist_allreduce_sum_f64(&s, 1);
        skipped_all = (long)s;
    }
    dist_finalize();
    if (er.stopped) {
        log_info("eval: stopped by %s before the test set's end: no scores", stop_signal_name(er.stopped));
        return TRAINER_EXIT_STOPPED;
    }
    char also[160] = "";
    int o = 0;
    if (skipped_all) o += snprintf(also + o, sizeof also - o, "; %ld unreadable, skipped", skipped_all);
    if (er.nonfinite) snprintf(also + o, sizeof also - (size_t)o, "; %ld with inf or NaN logits, counted wrong",
                               er.nonfinite);
    if (rank0)
        printf("eval: %s: %ld test images, top-1 %.2f%%, top-5 %.2f%%, loss %.4f (%.1f s%s)\n", weights, er.images,
               100 * er.top1, 100 * er.top5, er.loss, secs, also);
    if (fflush(stdout) != 0 || ferror(stdout)) { /* the result is the command's whole point */
        fprintf(stderr, "trainer: --eval: cannot write the result: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

/* CONFIG.ini [overrides]: training, in one process or as a rank of a job. */
static int cmd_train(int argc, char **argv) {
    config cfg;
    load_config(&cfg, argv[1], argc, argv, 2);
    if (dist_init(&argc, &argv) != CNT_OK) return failed();
    dist_set_wait_limits(cfg.stall_warn_s, cfg.stall_abort_s); /* every collective's bound, not just the gradients' */
    dist_set_progress(cfg.progress);
    train_result res;
    if (trainer_run(&cfg, &res) != CNT_OK) {
        log_error("%s", cnt_err_msg());
        /* Other ranks may be waiting in a collective: end the whole job. */
        if (dist_job_world() > 1) dist_abort(1);
        return 1;
    }
    dist_finalize();
    return res.stop_signal ? TRAINER_EXIT_STOPPED : 0;
}

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"--help", cmd_help},
    {"-h", cmd_help},
    {"--version", cmd_version},
    {"--devices", cmd_devices},
    {"--config-reference", cmd_config_reference},
    {"--summary", cmd_summary},
    {"--bench", cmd_bench},
    {"--bench-data", cmd_bench_data},
    {"--profile", cmd_profile},
    {"--export", cmd_export},
    {"--eval", cmd_eval},
};

int main(int argc, char **argv) {
    cpus_process(NULL); /* before any thread (OpenMP's) can pin this one: the loaders' CPUs */
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0) return commands[i].run(argc, argv);
    if (cmd[0] == '-') {
        fprintf(stderr, "trainer: unknown option '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    return cmd_train(argc, argv);
}
