/*
 * tests/test_config.c - train/config: defaults, INI loading, every class of
 * load error (with file:line and the key in the message), command-line
 * overrides, validation, the config_write_ini -> load round trip (exact floats and a
 * seed above 2^53), milestone lists, and the help and Markdown reference
 * naming every key.
 *
 * Config files are written to /tmp with mkstemp() and removed afterwards. A
 * FIFO, a directory and a device given as the config file are refused, the
 * FIFO under alarm() so that a hang fails the test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "train/config.h"

/* Every key, as section.name; the help, the reference and the written INI
 * file must each name all of them. */
static const char *const all_keys[] = {
    "model.name", "model.zero_init_residual", "model.aux_logits", "model.dropout", "model.init_from",
    "data.kind", "data.root", "data.train_root", "data.val_root", "data.image_size", "data.channels",
    "data.train_limit", "data.test_limit", "data.augment", "data.crop", "data.batch_dtype", "data.jpeg_scaling",
    "data.decoder",
    "data.pad", "data.min_scale", "data.mean",
    "data.std", "data.workers", "data.wait_warn", "data.remainder", "data.read_order", "data.block_mb",
    "data.shuffle_blocks",
    "data.prefetch", "data.synthetic_shape", "data.synthetic_classes", "data.synthetic_train", "data.synthetic_test",
    "train.device", "train.precision", "train.layout", "train.activations", "train.conv_api", "train.fuse",
    "train.cuda_graph",
    "train.loss_scaling",
    "train.loss_scale", "train.loss_scale_window",
    "train.epochs", "train.max_steps", "train.batch_size", "train.accumulate", "train.eval_batch_size", "train.seed",
    "train.log_every", "train.out_dir", "train.tensorboard", "train.threads", "train.label_smoothing",
    "train.aux_weight", "train.memory_check",
    "train.emulate_compute",
    "optim.name", "optim.lars_eta", "optim.lr", "optim.momentum", "optim.nesterov", "optim.weight_decay",
    "optim.wd_on_bn_bias", "optim.schedule",
    "optim.milestones", "optim.gamma", "optim.warmup_epochs", "optim.warmup_start", "optim.min_lr", "optim.poly_power", "optim.lr_scaling", "dist.mode", "dist.ps_servers", "dist.ps_sync", "dist.ps_max_staleness", "dist.backend",
    "dist.overlap", "dist.progress", "dist.comm_nice", "dist.buckets_in_flight", "dist.bucket_mb", "dist.bucket_profile",
    "dist.first_bucket_mb", "dist.timeline", "dist.timeline_steps",
    "dist.compress", "dist.powersgd_rank", "dist.powersgd_start", "dist.powersgd_threads", "dist.stall_warn_s", "dist.stall_abort_s",
    "checkpoint.dir", "checkpoint.every_epochs", "checkpoint.every_steps", "checkpoint.keep", "checkpoint.keep_best",
    "checkpoint.resume",
};
#define N_ALL_KEYS ((int)(sizeof all_keys / sizeof all_keys[0]))

/* ---------------------------------------------------------------- helpers */

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) {
        print_error("expected \"%s\" in:\n%s\n", needle, haystack);
        fail();
    }
}

static void assert_not_contains(const char *haystack, const char *needle) {
    if (strstr(haystack, needle)) {
        print_error("did not expect \"%s\" in:\n%s\n", needle, haystack);
        fail();
    }
}

/* Writes text to a new file under /tmp; its name goes into path. */
static void write_tmp(const char *text, char *path, size_t path_len) {
    snprintf(path, path_len, "/tmp/cnt_test_config_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* config_load() of text over cfg; the temporary file's name goes into path. */
static int load_text(config *cfg, const char *text, char *path, size_t path_len) {
    write_tmp(text, path, path_len);
    int rc = config_load(cfg, path);
    unlink(path);
    return rc;
}

/* Loading text over the defaults must fail at `line`, leave the config
 * untouched, and produce a message starting "path:line: " that contains each
 * of the NULL-terminated needles. */
static void expect_load_error(const char *text, int line, ...) {
    config cfg, before;
    config_defaults(&cfg);
    config_defaults(&before);
    char path[64], prefix[96];
    int rc = load_text(&cfg, text, path, sizeof path);
    if (rc != CNT_ERR) {
        print_error("loading this text should have failed:\n%s\n", text);
        fail();
    }
    const char *msg = cnt_err_msg();
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    if (strncmp(msg, prefix, strlen(prefix)) != 0) {
        print_error("expected the message to start with \"%s\": %s\n", prefix, msg);
        fail();
    }
    va_list ap;
    va_start(ap, line);
    for (const char *needle; (needle = va_arg(ap, const char *)) != NULL;) assert_contains(msg, needle);
    va_end(ap);
    assert_memory_equal(&cfg, &before, sizeof cfg);
}

/* An override must fail with a message naming the override text and
 * containing each NULL-terminated needle, leaving cfg untouched. */
static void expect_override_error(const char *arg, ...) {
    config cfg, before;
    config_defaults(&cfg);
    config_defaults(&before);
    if (config_override(&cfg, arg) != CNT_ERR) {
        print_error("override '%s' should have failed\n", arg);
        fail();
    }
    const char *msg = cnt_err_msg();
    char head[256];
    snprintf(head, sizeof head, "command line override '%s': ", arg);
    assert_contains(msg, head);
    va_list ap;
    va_start(ap, arg);
    for (const char *needle; (needle = va_arg(ap, const char *)) != NULL;) assert_contains(msg, needle);
    va_end(ap);
    assert_memory_equal(&cfg, &before, sizeof cfg);
}

static void override_ok(config *cfg, const char *arg) {
    if (config_override(cfg, arg) != CNT_OK) {
        print_error("override '%s' failed: %s\n", arg, cnt_err_msg());
        fail();
    }
}

/* The output of a printing function, as a malloc'ed string. */
static char *capture(void (*print)(FILE *)) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    print(f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static char *capture_ini(const config *cfg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    config_write_ini(cfg, f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static void assert_float_bits(float a, float b) {
    if (memcmp(&a, &b, sizeof a) != 0) {
        print_error("floats differ: %.9g vs %.9g\n", (double)a, (double)b);
        fail();
    }
}

/* Field-by-field equality (floats bit for bit; strings as strings). */
static void assert_config_equal(const config *a, const config *b) {
    assert_string_equal(a->model_name, b->model_name);
    assert_int_equal(a->zero_init_residual, b->zero_init_residual);
    assert_int_equal(a->aux_logits, b->aux_logits);
    assert_float_bits(a->dropout, b->dropout);
    assert_int_equal(a->data_kind, b->data_kind);
    assert_string_equal(a->data_root, b->data_root);
    assert_int_equal(a->train_limit, b->train_limit);
    assert_int_equal(a->test_limit, b->test_limit);
    assert_int_equal(a->augment, b->augment);
    assert_int_equal(a->pad, b->pad);
    assert_int_equal(a->workers, b->workers);
    assert_int_equal(a->prefetch, b->prefetch);
    assert_int_equal(a->device, b->device);
    assert_int_equal(a->epochs, b->epochs);
    assert_true(a->max_steps == b->max_steps);
    assert_int_equal(a->batch_size, b->batch_size);
    assert_int_equal(a->accumulate, b->accumulate);
    assert_int_equal(a->eval_batch_size, b->eval_batch_size);
    assert_true(a->seed == b->seed);
    assert_int_equal(a->log_every, b->log_every);
    assert_string_equal(a->out_dir, b->out_dir);
    assert_int_equal(a->threads, b->threads);
    assert_float_bits(a->label_smoothing, b->label_smoothing);
    assert_float_bits(a->aux_weight, b->aux_weight);
    assert_float_bits(a->lr, b->lr);
    assert_float_bits(a->momentum, b->momentum);
    assert_int_equal(a->nesterov, b->nesterov);
    assert_float_bits(a->weight_decay, b->weight_decay);
    assert_int_equal(a->wd_on_bn_bias, b->wd_on_bn_bias);
    assert_int_equal(a->schedule, b->schedule);
    assert_int_equal(a->n_milestones, b->n_milestones);
    for (int i = 0; i < a->n_milestones; i++) assert_int_equal(a->milestones[i], b->milestones[i]);
    assert_float_bits(a->gamma, b->gamma);
    assert_float_bits(a->warmup_epochs, b->warmup_epochs);
    assert_float_bits(a->min_lr, b->min_lr);
    assert_int_equal(a->warmup_start, b->warmup_start);
    assert_int_equal(a->remainder, b->remainder);
    assert_string_equal(a->init_from, b->init_from);
    assert_string_equal(a->train_root, b->train_root);
    assert_string_equal(a->val_root, b->val_root);
    assert_int_equal(a->image_size, b->image_size);
    assert_int_equal(a->channels, b->channels);
    assert_int_equal(a->crop, b->crop);
    assert_float_bits(a->min_scale, b->min_scale);
    assert_string_equal(a->mean, b->mean);
    assert_string_equal(a->std, b->std);
    assert_int_equal(a->compress, b->compress);
    assert_int_equal(a->powersgd_rank, b->powersgd_rank);
    assert_int_equal(a->powersgd_start, b->powersgd_start);
    assert_float_bits(a->stall_warn_s, b->stall_warn_s);
    assert_float_bits(a->stall_abort_s, b->stall_abort_s);
}

/* ---------------------------------------------------------------- tests */

static void test_defaults(void **state) {
    (void)state;
    config c;
    config_defaults(&c);
    assert_string_equal(c.model_name, "resnet20");
    assert_int_equal(c.zero_init_residual, 0);
    assert_int_equal(c.aux_logits, 1);
    assert_float_bits(c.dropout, -1.0f);
    assert_int_equal(c.data_kind, DATA_KIND_IDX);
    assert_string_equal(c.data_root, "/usr/share/datasets/fashion-mnist");
    assert_int_equal(c.train_limit, 0);
    assert_int_equal(c.test_limit, 0);
    assert_int_equal(c.augment, 1);
    assert_int_equal(c.pad, 4);
    assert_int_equal(c.workers, 2);
    assert_int_equal(c.prefetch, 4);
    assert_int_equal(c.device, BACKEND_DEVICE_AUTO);
    assert_int_equal(c.epochs, 15);
    assert_true(c.max_steps == 0);
    assert_int_equal(c.batch_size, 128);
    assert_int_equal(c.accumulate, 1);
    assert_int_equal(c.eval_batch_size, 0);
    assert_true(c.seed == 42);
    assert_int_equal(c.log_every, 50);
    assert_string_equal(c.out_dir, "runs/default");
    assert_int_equal(c.threads, 0);
    assert_float_bits(c.label_smoothing, 0.0f);
    assert_float_bits(c.aux_weight, 0.4f);
    /* a stalled rank ends the job after 30 minutes by default, never hangs it */
    assert_float_bits(c.stall_warn_s, 60.0f);
    assert_float_bits(c.stall_abort_s, 1800.0f);
    assert_float_bits(c.lr, 0.1f);
    assert_float_bits(c.momentum, 0.9f);
    assert_int_equal(c.nesterov, 0);
    assert_float_bits(c.weight_decay, 5e-4f);
    assert_int_equal(c.wd_on_bn_bias, 1);
    assert_int_equal(c.schedule, LR_SCHEDULE_COSINE);
    assert_int_equal(c.n_milestones, 0);
    assert_float_bits(c.gamma, 0.1f);
    assert_float_bits(c.warmup_epochs, 0.0f);
    assert_float_bits(c.min_lr, 0.0f);
    assert_int_equal(config_validate(&c), CNT_OK);
}

static void test_load_valid(void **state) {
    (void)state;
    const char *text = "\xEF\xBB\xBF; a comment on a line with a UTF-8 byte order mark\r\n"
                       "# another comment\n"
                       "\n"
                       "[model]\n"
                       "name = resnet56 ; inline comment\n"
                       "zero_init_residual = yes\n"
                       "dropout: 0.25\n"
                       "\n"
                       "[optim]\r\n"
                       "lr = 0.05\r\n"
                       "schedule = step\n"
                       "milestones = 30, 60 90\n"
                       "   ; an indented comment\n"
                       "nesterov = ON\n"
                       "[train]\n"
                       "seed = 18446744073709551615\n"
                       "max_steps = 9000000000\n"
                       "device = cpu\n"
                       "[optim] ; the same section again\n"
                       "gamma = 0.2\n";
    config c;
    char path[64];
    config_defaults(&c);
    if (load_text(&c, text, path, sizeof path) != CNT_OK) {
        print_error("load failed: %s\n", cnt_err_msg());
        fail();
    }
    assert_string_equal(c.model_name, "resnet56");
    assert_int_equal(c.zero_init_residual, 1);
    assert_float_bits(c.dropout, 0.25f);
    assert_float_bits(c.lr, 0.05f);
    assert_int_equal(c.schedule, LR_SCHEDULE_STEP);
    assert_int_equal(c.n_milestones, 3);
    assert_int_equal(c.milestones[0], 30);
    assert_int_equal(c.milestones[1], 60);
    assert_int_equal(c.milestones[2], 90);
    assert_int_equal(c.nesterov, 1);
    assert_true(c.seed == UINT64_MAX);
    assert_true(c.max_steps == 9000000000L);
    assert_int_equal(c.device, BACKEND_DEVICE_CPU);
    assert_float_bits(c.gamma, 0.2f);
    /* Keys the file does not mention keep what cfg held. */
    assert_int_equal(c.epochs, 15);
    assert_int_equal(c.batch_size, 128);
    assert_string_equal(c.data_root, "/usr/share/datasets/fashion-mnist");
    assert_int_equal(config_validate(&c), CNT_OK);

    /* A file applies over what cfg already holds, not over the defaults. */
    override_ok(&c, "train.epochs=7");
    assert_int_equal(load_text(&c, "[optim]\nlr = 0.3\n", path, sizeof path), CNT_OK);
    assert_int_equal(c.epochs, 7);
    assert_float_bits(c.lr, 0.3f);

    /* An empty file changes nothing. */
    config before = c;
    assert_int_equal(load_text(&c, "", path, sizeof path), CNT_OK);
    assert_memory_equal(&c, &before, sizeof c);
}

static void test_bool_spellings(void **state) {
    (void)state;
    static const char *const yes[] = {"true", "1", "yes", "on", "TRUE", "Yes", "On"};
    static const char *const no[] = {"false", "0", "no", "off", "FALSE", "No", "OFF"};
    config c;
    config_defaults(&c);
    char arg[64];
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        c.augment = 0;
        snprintf(arg, sizeof arg, "data.augment=%s", yes[i]);
        override_ok(&c, arg);
        assert_int_equal(c.augment, 1);
        c.augment = 1;
        snprintf(arg, sizeof arg, "data.augment=%s", no[i]);
        override_ok(&c, arg);
        assert_int_equal(c.augment, 0);
    }
    expect_override_error("data.augment=2", "data.augment", "not a bool", NULL);
    expect_override_error("data.augment=y", "data.augment", "not a bool", NULL);
}

static void test_open_errors(void **state) {
    (void)state;
    config c, before;
    config_defaults(&c);
    before = c;
    assert_int_equal(config_load(&c, "/tmp/cnt_test_config_does_not_exist.ini"), CNT_ERR);
    assert_string_equal(cnt_err_msg(),
                        "cannot open config '/tmp/cnt_test_config_does_not_exist.ini': No such file or directory");
    assert_int_equal(config_load(&c, "/tmp"), CNT_ERR);
    assert_string_equal(cnt_err_msg(), "cannot open config '/tmp': it is a directory, not a regular file");
    assert_memory_equal(&c, &before, sizeof c);
    /* A device is not a config file either (/dev/null would read as empty). */
    assert_int_equal(config_load(&c, "/dev/null"), CNT_ERR);
    assert_string_equal(cnt_err_msg(), "cannot open config '/dev/null': it is a character device, not a regular file");
    assert_memory_equal(&c, &before, sizeof c);
}

/* A FIFO given as the config file is refused at once: a plain open() of a
 * FIFO waits for a writer forever. alarm() turns a hang into a failure. */
static void test_fifo_refused(void **state) {
    (void)state;
    char dir[] = "/tmp/cnt_test_config_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fifo[64];
    snprintf(fifo, sizeof fifo, "%s/pipe.ini", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    config c, before;
    config_defaults(&c);
    before = c;
    alarm(20);
    int rc = config_load(&c, fifo);
    alarm(0);
    unlink(fifo);
    rmdir(dir);
    assert_int_equal(rc, CNT_ERR);
    assert_contains(cnt_err_msg(), fifo);
    assert_contains(cnt_err_msg(), "it is a FIFO (named pipe), not a regular file");
    assert_memory_equal(&c, &before, sizeof c);
}

static void test_unknown_section(void **state) {
    (void)state;
    expect_load_error("[model]\nname = x\n[foo]\nbar = 1\n", 3,
                      "unknown section [foo] (sections: model data train optim dist checkpoint)", NULL);
    /* An unknown section with no keys in it is an error too. */
    expect_load_error("[optim]\nlr = 0.1\n\n[nosuch]\n", 4, "unknown section [nosuch]", NULL);
    expect_load_error("[Optim]\nlr = 0.1\n", 1, "unknown section [Optim]", NULL);
}

static void test_unknown_key(void **state) {
    (void)state;
    expect_load_error("[optim]\nlr = 0.1\nlrr = 0.1\n", 3, "unknown key 'lrr' in [optim]", "did you mean optim.lr?",
                      NULL);
    expect_load_error("[optim]\nmomentun = 0.9\n", 2, "'momentun'", "did you mean optim.momentum?", NULL);
    /* The right name in the wrong section points to the right section. */
    expect_load_error("[train]\nlr = 0.1\n", 2, "unknown key 'lr' in [train]", "did you mean optim.lr?", NULL);
    /* Nothing close: list the section's keys instead. */
    expect_load_error("[optim]\nfrobnicate = 1\n", 2, "unknown key 'frobnicate' in [optim]",
                      "keys in [optim]: name lars_eta lr momentum nesterov", NULL);
    config c;
    char path[64];
    config_defaults(&c);
    assert_int_equal(load_text(&c, "[optim]\nfrobnicate = 1\n", path, sizeof path), CNT_ERR);
    assert_not_contains(cnt_err_msg(), "did you mean");
}

static void test_duplicate_key(void **state) {
    (void)state;
    expect_load_error("[optim]\nlr = 0.1\nmomentum = 0.8\n\nlr = 0.2\n", 5, "duplicate key optim.lr",
                      "first set on line 2", NULL);
    /* Also when the section is opened twice. */
    expect_load_error("[optim]\nlr = 0.1\n[train]\nepochs = 3\n[optim]\nlr = 0.2\n", 6, "duplicate key optim.lr",
                      "first set on line 2", NULL);
}

static void test_key_outside_section(void **state) {
    (void)state;
    expect_load_error("lr = 0.1\n[optim]\n", 1, "key 'lr' is outside any section", "optim.lr", NULL);
    expect_load_error("; comment\nzzz = 1\n", 2, "key 'zzz' is outside any section", NULL);
}

static void test_syntax_errors(void **state) {
    (void)state;
    expect_load_error("[optim]\nlr 0.1\n", 2, "expected 'key = value' or '[section]'", "lr 0.1", NULL);
    expect_load_error("[optim\nlr = 1\n", 1, "no closing ']'", NULL);
    expect_load_error("[optim] x\nlr = 1\n", 1, "unexpected text 'x' after section header", NULL);
    expect_load_error("[optim]\n= 5\n", 2, "missing key name", NULL);
    /* inih would read an indented line as a continuation of the previous value. */
    expect_load_error("[optim]\nlr = 0.1\n  momentum = 0.5\n", 3, "whitespace", NULL);
    expect_load_error("[optim]\n\tlr = 0.1\n", 2, "whitespace", NULL);
    /* A line longer than inih's buffer. */
    char text[512];
    snprintf(text, sizeof text, "[data]\nroot = /%0300d\n", 0);
    expect_load_error(text, 2, "line is longer than", NULL);
}

static void test_line_numbers_count_every_line(void **state) {
    (void)state;
    expect_load_error("; c\n\n[optim]\r\n# c\n  ; c\n\nlr = x\n", 7, "optim.lr", NULL);
    /* The first error wins; parsing stops there. */
    expect_load_error("[optim]\nlr = abc\nmomentum = xyz\n[foo]\n", 2, "optim.lr", "'abc'", NULL);
}

static void test_bad_values(void **state) {
    (void)state;
    char long_value[256];
    snprintf(long_value, sizeof long_value, "[data]\nroot = /%0150d\n", 0);
    expect_load_error(long_value, 2, "data.root", "longer than 150 characters", NULL);

    expect_load_error("[optim]\nlr = abc\n", 2, "optim.lr", "'abc' is not a number", NULL);
    expect_load_error("[optim]\nmomentum = 0.9\nlr = 0.1x\n", 3, "optim.lr", "unexpected 'x' after '0.1'", NULL);
    expect_load_error("[optim]\nlr = 0.1 # not a comment\n", 2, "optim.lr", "not a number", NULL);
    expect_load_error("[optim]\nlr =\n", 2, "optim.lr", "empty value", NULL);
    expect_load_error("[optim]\nlr = ; only a comment\n", 2, "optim.lr", "empty value", NULL);
    expect_load_error("[optim]\nlr = 200\n", 2, "optim.lr", "out of range", "(0, 100]", NULL);
    expect_load_error("[optim]\nlr = 0\n", 2, "optim.lr", "out of range", NULL);
    expect_load_error("[optim]\nlr = -0.1\n", 2, "optim.lr", "out of range", NULL);
    expect_load_error("[optim]\nlr = nan\n", 2, "optim.lr", "not a finite number", NULL);
    expect_load_error("[optim]\nlr = inf\n", 2, "optim.lr", "not a finite number", NULL);
    expect_load_error("[optim]\nlr = 1e40\n", 2, "optim.lr", "outside the range of a float", NULL);
    expect_load_error("[optim]\nmomentum = 1\n", 2, "optim.momentum", "[0, 0.999]", NULL);
    expect_load_error("[model]\ndropout = 1\n", 2, "model.dropout", "[-1, 0.99]", NULL);
    expect_load_error("[train]\nepochs = 1e3\n", 2, "train.epochs", "not an integer", NULL);
    expect_load_error("[train]\nepochs = 2.5\n", 2, "train.epochs", "not an integer", NULL);
    expect_load_error("[train]\nbatch_size = 12 34\n", 2, "train.batch_size", "not an integer", NULL);
    expect_load_error("[train]\nepochs = 99999999999\n", 2, "train.epochs", "out of the range of an int", NULL);
    expect_load_error("[train]\nepochs = 0\n", 2, "train.epochs", "[1, 100000]", NULL);
    expect_load_error("[train]\nmax_steps = 99999999999999999999\n", 2, "train.max_steps", "too large", NULL);
    expect_load_error("[train]\nmax_steps = -5\n", 2, "train.max_steps", ">= 0", NULL);
    expect_load_error("[train]\nseed = -1\n", 2, "train.seed", "not an unsigned integer", NULL);
    expect_load_error("[train]\nseed = 18446744073709551616\n", 2, "train.seed", "too large", NULL);
    expect_load_error("[train]\nseed = 12ab\n", 2, "train.seed", "unexpected 'ab'", NULL);
    expect_load_error("[optim]\nnesterov = maybe\n", 2, "optim.nesterov", "not a bool", NULL);
    expect_load_error("[optim]\nschedule = linear\n", 2, "optim.schedule",
                      "'linear' is not one of: constant, step, cosine", NULL);
    expect_load_error("[train]\ndevice = gpu\n", 2, "train.device", "not one of: auto, cpu, cuda", NULL);
    expect_load_error("[data]\nkind = png\n", 2, "data.kind", "not one of: idx", NULL);
    expect_load_error("[data]\npad = 65\n", 2, "data.pad", "[0, 64]", NULL);
    expect_load_error("[data]\nworkers = 0\n", 2, "data.workers", "[1, 64]", NULL);
    expect_load_error("[model]\nname =\n", 2, "model.name", "empty value", NULL);
    expect_load_error("[optim]\nmilestones = 30,,60\n", 2, "optim.milestones", "empty item", NULL);
    expect_load_error("[optim]\nmilestones = 30,60,\n", 2, "optim.milestones", "ends with ','", NULL);
    expect_load_error("[optim]\nmilestones = 30,x\n", 2, "optim.milestones", "'x' is not an integer", NULL);
    expect_load_error("[optim]\nmilestones = 30,6o\n", 2, "optim.milestones", "'6o'", NULL);
    expect_load_error("[optim]\nmilestones = 0\n", 2, "optim.milestones", "out of range", NULL);
    expect_load_error("[optim]\nmilestones = 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n", 2, "optim.milestones",
                      "more than 16 items", NULL);
}

static void test_overrides(void **state) {
    (void)state;
    config c;
    config_defaults(&c);
    override_ok(&c, "optim.lr=0.05");
    assert_float_bits(c.lr, 0.05f);
    override_ok(&c, " train.epochs = 3 ");
    assert_int_equal(c.epochs, 3);
    override_ok(&c, "train.seed=9007199254740993");
    assert_true(c.seed == 9007199254740993ULL);
    override_ok(&c, "data.root=/tmp/a dir");
    assert_string_equal(c.data_root, "/tmp/a dir");
    override_ok(&c, "optim.milestones=30 60 90");
    assert_int_equal(c.n_milestones, 3);
    assert_int_equal(c.milestones[2], 90);
    override_ok(&c, "optim.milestones=");
    assert_int_equal(c.n_milestones, 0);
    override_ok(&c, "train.device=cuda");
    assert_int_equal(c.device, BACKEND_DEVICE_CUDA);
    override_ok(&c, "model.name=inception_v3");
    assert_string_equal(c.model_name, "inception_v3");
    /* A shorter string leaves no trace of the longer one. */
    override_ok(&c, "model.name=vgg");
    assert_string_equal(c.model_name, "vgg");
    assert_int_equal(c.model_name[4], 0);

    expect_override_error("optim.lr", "no '='", NULL);
    expect_override_error("lr=0.1", "no '.'", "did you mean optim.lr?", NULL);
    expect_override_error("foo.bar=1", "unknown section [foo] (sections: model data train optim dist checkpoint)", NULL);
    expect_override_error("optim.lrr=1", "unknown key 'lrr' in [optim]", "did you mean optim.lr?", NULL);
    expect_override_error("optim.lr=abc", "optim.lr: 'abc' is not a number", NULL);
    expect_override_error("optim.lr=0.1x", "optim.lr", "unexpected 'x'", NULL);
    expect_override_error("optim.lr=", "optim.lr", "empty value", NULL);
    expect_override_error("optim.lr=1000", "optim.lr", "out of range", NULL);
    expect_override_error("train.device=gpu", "train.device", "auto, cpu, cuda", NULL);
    expect_override_error("optim.milestones=10,,20", "optim.milestones", "empty item", NULL);
    /* A value that would not read back from an INI file. */
    expect_override_error("train.out_dir=runs/a ;b", "train.out_dir", "comment", NULL);

    /* An over-long override is quoted shortened, so the reason still shows
     * (it was cut off by the 2 KB message buffer). */
    char *longer = malloc(3001);
    assert_non_null(longer);
    memcpy(longer, "data.root=", 10);
    memset(longer + 10, 'a', 2990);
    longer[3000] = '\0';
    config_defaults(&c);
    assert_int_equal(config_override(&c, longer), CNT_ERR);
    assert_contains(cnt_err_msg(), "command line override 'data.root=aaaa");
    assert_contains(cnt_err_msg(), "... (3000 characters)': data.root: value is longer than 150 characters");
    assert_true(strlen(cnt_err_msg()) < 512);
    free(longer);
}

static void test_milestones(void **state) {
    (void)state;
    config c;
    char path[64];
    static const char *const forms[] = {"30,60,90", "30 60 90", "30, 60, 90", " 30 ,60\t90 ", "30,60 90"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "[optim]\nmilestones = %s\n", forms[i]);
        config_defaults(&c);
        if (load_text(&c, text, path, sizeof path) != CNT_OK) {
            print_error("'%s': %s\n", forms[i], cnt_err_msg());
            fail();
        }
        assert_int_equal(c.n_milestones, 3);
        assert_int_equal(c.milestones[0], 30);
        assert_int_equal(c.milestones[1], 60);
        assert_int_equal(c.milestones[2], 90);
    }
    /* Exactly CONFIG_MAX_MILESTONES items fit. */
    config_defaults(&c);
    override_ok(&c, "optim.milestones=1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16");
    assert_int_equal(c.n_milestones, CONFIG_MAX_MILESTONES);
    assert_int_equal(c.milestones[15], 16);
    assert_int_equal(config_validate(&c), CNT_OK);

    /* Order is checked by config_validate. */
    override_ok(&c, "optim.milestones=60,30");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "optim.milestones");
    assert_contains(cnt_err_msg(), "strictly ascending");
    override_ok(&c, "optim.milestones=30,30");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "strictly ascending");

    /* The step schedule needs milestones. */
    config_defaults(&c);
    override_ok(&c, "optim.schedule=step");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "optim.milestones");
    override_ok(&c, "optim.milestones=5");
    assert_int_equal(config_validate(&c), CNT_OK);
}

static void test_validate(void **state) {
    (void)state;
    config c;
    config_defaults(&c);
    assert_int_equal(config_validate(&c), CNT_OK);

    override_ok(&c, "optim.nesterov=true");
    override_ok(&c, "optim.momentum=0");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "optim.nesterov");
    override_ok(&c, "optim.momentum=0.9");
    assert_int_equal(config_validate(&c), CNT_OK);

    override_ok(&c, "optim.min_lr=0.5");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "optim.min_lr");
    /* min_lr only matters to the cosine schedule. */
    override_ok(&c, "optim.schedule=constant");
    assert_int_equal(config_validate(&c), CNT_OK);

    /* A struct filled by code is checked against the table as well. */
    config_defaults(&c);
    c.lr = -1.0f;
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "optim.lr");
    config_defaults(&c);
    c.lr = NAN;
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "optim.lr");
    config_defaults(&c);
    c.device = (backend_device)7; /* no such device */
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "train.device");
    config_defaults(&c);
    c.out_dir[0] = '\0';
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "train.out_dir");
    config_defaults(&c);
    c.augment = 2;
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "data.augment");
    config_defaults(&c);
    c.n_milestones = CONFIG_MAX_MILESTONES + 1;
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "optim.milestones");
    config_defaults(&c);
    c.batch_size = 0;
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "train.batch_size");
    config_defaults(&c);
    c.accumulate = 0;
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "train.accumulate");

    /* Parameter servers send fp32 shards: fp16 compression was accepted
     * and silently ignored. */
    config_defaults(&c);
    override_ok(&c, "dist.mode=ps");
    override_ok(&c, "dist.compress=fp16");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "dist.compress = fp16 compresses the allreduce's buckets; dist.mode = ps");
    override_ok(&c, "dist.compress=none");
    assert_int_equal(config_validate(&c), CNT_OK);
    /* fp16 through NCCL: converted on the GPU (dist/nccl.h); PowerSGD too, its arithmetic there */
    config_defaults(&c);
    override_ok(&c, "dist.backend=nccl");
    override_ok(&c, "train.device=cuda");
    override_ok(&c, "dist.compress=fp16");
    assert_int_equal(config_validate(&c), CNT_OK);
    override_ok(&c, "dist.compress=powersgd");
    assert_int_equal(config_validate(&c), CNT_OK);

    /* PowerSGD: the exchange's two sums per bucket, its errors across steps. */
    const char *psgd_bad[][2] = {
        {"dist.mode=ps", "dist.compress = powersgd compresses the allreduce's buckets; dist.mode = ps"},
        {"dist.buckets_in_flight=2", "dist.buckets_in_flight = 2 with dist.compress = powersgd"},
        {"train.loss_scaling=dynamic", "dist.compress = powersgd keeps each rank's compression error"},
    };
    for (size_t i = 0; i < sizeof psgd_bad / sizeof psgd_bad[0]; i++) {
        config_defaults(&c);
        override_ok(&c, "dist.compress=powersgd");
        override_ok(&c, "dist.backend=ring");
        override_ok(&c, psgd_bad[i][0]);
        assert_int_equal(config_validate(&c), CNT_ERR);
        assert_contains(cnt_err_msg(), psgd_bad[i][1]);
    }
    config_defaults(&c);
    override_ok(&c, "dist.compress=powersgd");
    override_ok(&c, "dist.powersgd_rank=4");
    override_ok(&c, "dist.powersgd_start=0");
    assert_int_equal(config_validate(&c), CNT_OK);
    assert_int_equal(config_reducer_opts(&c).psgd_rank, 4);
    assert_int_equal(config_reducer_opts(&c).psgd_start, 0);

    /* Input channels: 0, 1 or 3. */
    config_defaults(&c);
    override_ok(&c, "data.channels=2");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "data.channels");
    override_ok(&c, "data.channels=1");
    assert_int_equal(config_validate(&c), CNT_OK);
}

/* dist.bucket_mb = auto (stored as 0, written back as auto, the default
 * size in the reducer's options until the trainer chooses; a profile file
 * optional; not with servers or NCCL) and dist.buckets_in_flight (1 to 8; above 1
 * only with ring or hier). */
static void test_bucket_keys(void **state) {
    (void)state;
    config c;
    config_defaults(&c);
    assert_true(c.bucket_mb == 25.0f);
    assert_int_equal(c.buckets_in_flight, 1);
    assert_int_equal(config_reducer_opts(&c).in_flight, 1);
    override_ok(&c, "dist.bucket_mb=auto");
    assert_true(c.bucket_mb == 0.0f);
    assert_int_equal(config_validate(&c), CNT_OK); /* rank 0 profiles at start-up */
    override_ok(&c, "dist.bucket_profile=runs/p.json");
    assert_int_equal(config_validate(&c), CNT_OK);
    assert_int_equal(config_reducer_opts(&c).bucket, (size_t)25 << 18);
    assert_true(config_exchange_opts(&c).bucket_mb == 25.0);
    char *ini = capture_ini(&c);
    assert_contains(ini, "bucket_mb = auto\n");
    assert_contains(ini, "bucket_profile = runs/p.json\n");
    free(ini);
    override_ok(&c, "dist.mode=ps");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "dist.bucket_mb = auto sizes the allreduce's buckets; dist.mode = ps");
    override_ok(&c, "dist.mode=allreduce");
    override_ok(&c, "dist.backend=nccl"); /* NCCL's allreduce is timed on the GPUs */
    override_ok(&c, "train.device=cuda");
    assert_int_equal(config_validate(&c), CNT_OK);
    override_ok(&c, "dist.bucket_mb=12.5");
    assert_int_equal(config_validate(&c), CNT_OK);
    expect_override_error("dist.bucket_mb=0", "dist.bucket_mb", NULL); /* auto is spelled auto */
    expect_override_error("dist.bucket_mb=automatic", "dist.bucket_mb", NULL);

    config_defaults(&c);
    override_ok(&c, "dist.buckets_in_flight=4");
    assert_int_equal(config_validate(&c), CNT_OK); /* auto: the reducer runs 1 if auto picks MPI or NCCL */
    override_ok(&c, "dist.backend=ring");
    assert_int_equal(config_validate(&c), CNT_OK);
    assert_int_equal(config_reducer_opts(&c).in_flight, 4);
    override_ok(&c, "dist.backend=hier");
    assert_int_equal(config_validate(&c), CNT_OK);
    override_ok(&c, "dist.backend=mpi");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "dist.buckets_in_flight = 4 needs dist.backend = ring or hier; dist.backend = mpi");
    expect_override_error("dist.buckets_in_flight=9", "dist.buckets_in_flight", NULL);
    /* dist.comm_nice: -10 unless set, -20 to 0 (lowered only) */
    assert_int_equal(c.comm_nice, -10);
    expect_override_error("dist.comm_nice=1", "dist.comm_nice", NULL);
    expect_override_error("dist.comm_nice=-21", "dist.comm_nice", NULL);
    expect_override_error("dist.buckets_in_flight=0", "dist.buckets_in_flight", NULL);
}

/* data.mean / data.std: auto, one number for every channel, or three. */
static void test_norm_values(void **state) {
    (void)state;
    config c;
    config_defaults(&c);
    float v[3];
    int is_auto = 0;
    assert_int_equal(config_norm_values(&c, 0, v, &is_auto), CNT_OK);
    assert_true(is_auto);
    override_ok(&c, "data.mean=0.485, 0.456,0.406");
    override_ok(&c, "data.std=0.5");
    assert_int_equal(config_validate(&c), CNT_OK);
    assert_int_equal(config_norm_values(&c, 0, v, &is_auto), CNT_OK);
    assert_false(is_auto);
    assert_true(v[0] == 0.485f && v[1] == 0.456f && v[2] == 0.406f);
    assert_int_equal(config_norm_values(&c, 1, v, &is_auto), CNT_OK);
    assert_true(v[0] == 0.5f && v[1] == 0.5f && v[2] == 0.5f);
    /* the text of values, parsed back bit for bit, with their count; one normalisation up to 1e-5 */
    const float three[3] = {0.485f, 0.456f, 1.0f / 3.0f};
    char text[128];
    int n = -1;
    config_norm_text(three, 3, text, sizeof text);
    assert_string_equal(text, "0.485000014,0.456,0.333333343");
    assert_int_equal(config_norm_parse("data.mean", text, 0, v, &n), CNT_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(v, three, sizeof three);
    config_norm_text(three, 1, text, sizeof text);
    assert_int_equal(config_norm_parse("data.std", text, 1, v, &n), CNT_OK);
    assert_true(n == 1 && v[2] == three[0]);
    assert_int_equal(config_norm_parse("data.std", "auto", 1, v, &n), CNT_OK);
    assert_int_equal(n, 0);
    const float near[3] = {0.485001f, 0.456f, 1.0f / 3.0f}, far[3] = {0.4851f, 0.456f, 1.0f / 3.0f};
    assert_true(config_norm_same(near, three, 3));
    assert_false(config_norm_same(far, three, 3));
    assert_true(config_norm_same(far, three, 0));
    static const char *const bad_std[] = {"0", "-1", "0.2,0.2", "0.1,0.2,0.3,0.4", "x", "0.2,", "0.2;0.3", ""};
    for (size_t i = 0; i < sizeof bad_std / sizeof bad_std[0]; i++) {
        config_defaults(&c);
        snprintf(c.std, sizeof c.std, "%s", bad_std[i]);
        assert_int_equal(config_validate(&c), CNT_ERR);
        assert_contains(cnt_err_msg(), "data.std");
    }
    config_defaults(&c);
    override_ok(&c, "data.mean=-0.5");
    assert_int_equal(config_validate(&c), CNT_OK);
    override_ok(&c, "data.mean=nan");
    assert_int_equal(config_validate(&c), CNT_ERR);
    assert_contains(cnt_err_msg(), "data.mean");
}

/* Writes cfg as INI, loads it over the defaults, and checks the result equals
 * cfg field by field and writes the same text again. */
static void round_trip(const config *cfg) {
    char *text = capture_ini(cfg);
    config back;
    char path[64];
    config_defaults(&back);
    if (load_text(&back, text, path, sizeof path) != CNT_OK) {
        print_error("reading back failed: %s\n%s\n", cnt_err_msg(), text);
        fail();
    }
    assert_config_equal(cfg, &back);
    char *again = capture_ini(&back);
    assert_string_equal(text, again);
    free(again);
    free(text);
}

static void test_round_trip(void **state) {
    (void)state;
    config c;
    config_defaults(&c);
    round_trip(&c);

    strcpy(c.model_name, "vgg19_bn");
    c.zero_init_residual = 1;
    c.aux_logits = 0;
    c.dropout = 0.3f;
    strcpy(c.data_root, "/data/fashion mnist");
    c.train_limit = 1000;
    c.test_limit = 500;
    c.augment = 0;
    c.pad = 2;
    c.workers = 3;
    c.prefetch = 7;
    c.device = BACKEND_DEVICE_CUDA;
    c.epochs = 90;
    c.max_steps = 123456789012L;
    c.batch_size = 256;
    c.eval_batch_size = 1000;
    c.memory_check = 0;
    c.seed = (1ULL << 63) + 12345; /* not representable as a double */
    c.log_every = 10;
    strcpy(c.out_dir, "runs/round trip");
    c.threads = 2;
    c.label_smoothing = 0.1f;
    c.aux_weight = 1.0f / 3.0f;
    c.lr = nextafterf(0.1f, 1.0f); /* needs all nine digits */
    c.momentum = 0.875f;
    c.nesterov = 1;
    c.weight_decay = 1.2345678e-5f;
    c.wd_on_bn_bias = 0;
    c.schedule = LR_SCHEDULE_STEP;
    c.n_milestones = 3;
    c.milestones[0] = 30;
    c.milestones[1] = 60;
    c.milestones[2] = 90;
    c.gamma = 0.2f;
    c.warmup_epochs = 2.0f / 3.0f;
    c.min_lr = 1e-6f;
    assert_int_equal(config_validate(&c), CNT_OK);
    round_trip(&c);

    /* The longest values still fit inih's line buffer. */
    c.n_milestones = CONFIG_MAX_MILESTONES;
    for (int i = 0; i < CONFIG_MAX_MILESTONES; i++) c.milestones[i] = 100000 - CONFIG_MAX_MILESTONES + i;
    memset(c.data_root, 0, sizeof c.data_root);
    memset(c.data_root, 'r', 150);
    c.seed = UINT64_MAX;
    c.max_steps = 9223372036854775807L;
    c.dropout = -1.0f;
    c.min_lr = 1e-30f;
    c.lr = 99.9999924f;
    round_trip(&c);
}

static void test_help_and_reference(void **state) {
    (void)state;
    char *help = capture(config_print_help);
    char *md = capture(config_print_reference_md);
    config c;
    config_defaults(&c);
    char *ini = capture_ini(&c);
    for (int i = 0; i < N_ALL_KEYS; i++) {
        char quoted[64], line[64];
        snprintf(quoted, sizeof quoted, "`%s`", all_keys[i]);
        assert_contains(help, all_keys[i]);
        assert_contains(md, quoted);
        snprintf(line, sizeof line, "\n%s =", strchr(all_keys[i], '.') + 1);
        assert_contains(ini, line);
    }
    static const char *const sections[] = {"model", "data", "train", "optim"};
    for (int i = 0; i < 4; i++) {
        char head[32];
        snprintf(head, sizeof head, "[%s]", sections[i]);
        assert_contains(help, head);
        assert_contains(ini, head);
        snprintf(head, sizeof head, "### [%s]", sections[i]);
        assert_contains(md, head);
    }
    /* Help shows defaults, ranges and choices. */
    assert_contains(help, "default 0.1");
    assert_contains(help, "(0, 100]");
    assert_contains(help, "constant, step, cosine");
    assert_contains(md, "| key | type | default | allowed | description |");
    assert_contains(md, "`auto`, `cpu`, `cuda`");

    /* Every table row has five cells; no line is an unterminated row. */
    int rows = 0;
    for (char *line = md; *line;) {
        char *end = strchr(line, '\n');
        assert_non_null(end);
        if (line[0] == '|') {
            int bars = 0;
            for (char *p = line; p < end; p++)
                if (*p == '|' && (p == line || p[-1] != '\\')) bars++;
            assert_int_equal(bars, 6);
            rows++;
        }
        line = end + 1;
    }
    assert_int_equal(rows, N_ALL_KEYS + 2 * 6); /* header and rule rows of 6 sections */

    /* Deterministic: the README embeds this text. */
    char *md2 = capture(config_print_reference_md);
    assert_string_equal(md, md2);
    free(md2);
    free(ini);
    free(md);
    free(help);
}

/* optim.lr_scaling = linear: the rate times the global batch's multiple of
 * one rank's micro-batch (world x train.accumulate); none: optim.lr. */
/* train.conv_api: auto by default, which is what the backend runs fastest
 * (its conv_api_auto: graph for CUDA) and legacy for a net only described;
 * legacy and graph when asked, whatever the backend prefers; carried into
 * the zoo's options (and from there into the net's context: test_zoo), and
 * a value it does not take refused naming the choices. */
static void test_conv_api(void **state) {
    (void)state;
    backend prefers_graph = *backend_cpu(), prefers_legacy = *backend_cpu();
    prefers_graph.conv_api_auto = BACKEND_CONV_API_GRAPH;
    prefers_legacy.conv_api_auto = BACKEND_CONV_API_LEGACY;
    config cfg;
    config_defaults(&cfg);
    assert_int_equal(cfg.conv_api, CONFIG_CONV_API_AUTO);
    assert_int_equal(config_zoo_options(&cfg, NULL).conv_api, BACKEND_CONV_API_LEGACY);
    assert_int_equal(config_zoo_options(&cfg, &prefers_graph).conv_api, BACKEND_CONV_API_GRAPH);
    assert_int_equal(config_zoo_options(&cfg, &prefers_legacy).conv_api, BACKEND_CONV_API_LEGACY);
    assert_int_equal(config_conv_api(&cfg, backend_cpu()), BACKEND_CONV_API_LEGACY); /* one way only */
    assert_int_equal(config_override(&cfg, "train.conv_api=graph"), CNT_OK);
    assert_int_equal(config_zoo_options(&cfg, NULL).conv_api, BACKEND_CONV_API_GRAPH);
    assert_int_equal(config_zoo_options(&cfg, &prefers_legacy).conv_api, BACKEND_CONV_API_GRAPH);
    assert_int_equal(config_override(&cfg, "train.conv_api=legacy"), CNT_OK);
    assert_int_equal(config_zoo_options(&cfg, &prefers_graph).conv_api, BACKEND_CONV_API_LEGACY);
    expect_override_error("train.conv_api=v8", "auto", "legacy", "graph", NULL);
}

static void test_lr_scaling(void **state) {
    (void)state;
    config c;
    config_defaults(&c);
    c.lr = 0.1f;
    assert_true(fabs(config_schedule(&c, 4, 10).base_lr - 4 * (double)c.lr) < 1e-12);
    c.accumulate = 3;
    assert_true(fabs(config_schedule(&c, 4, 10).base_lr - 12 * (double)c.lr) < 1e-12);
    assert_true(fabs(config_schedule(&c, 1, 10).base_lr - 3 * (double)c.lr) < 1e-12);
    c.lr_scaling = LR_SCALING_NONE;
    assert_true(config_schedule(&c, 4, 10).base_lr == (double)c.lr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_load_valid),
        cmocka_unit_test(test_bool_spellings),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_fifo_refused),
        cmocka_unit_test(test_conv_api),
        cmocka_unit_test(test_unknown_section),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_key_outside_section),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_line_numbers_count_every_line),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_milestones),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_bucket_keys),
        cmocka_unit_test(test_norm_values),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_help_and_reference),
        cmocka_unit_test(test_lr_scaling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
