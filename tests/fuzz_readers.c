/*
 * tests/fuzz_readers.c - libFuzzer targets for the readers of files a user
 * hands the trainer, which must refuse a corrupt file with a message and
 * never crash (`make fuzz`, docs/testing.md). One target per build, chosen
 * by -DFUZZ_<name>:
 *
 *   image          image_open_bytes, then image_render of a crop chosen by
 *                  the input's first bytes, with and without DCT scaling
 *                  (JPEG through libjpeg-turbo's partial decoding, PNG and
 *                  the rest through stb_image)
 *   safetensors    safetensors_load into ResNet-20 (1x28x28, 10 classes), safetensors_metadata
 *   checkpoint     ckpt_read_meta and ckpt_read into the same net; the
 *                  input's last 4 bytes are replaced by the CRC-32 of the
 *                  rest, so the fuzzer explores what lies behind the checksum
 *   profile        profile_parse (dist.bucket_profile, tools/simulate)
 *   shards         dataset_open_shards on an index whose CRC-32 is fixed the
 *                  same way (its shards absent: the index's own checks)
 *   listing        dataset_unpack (an image-folder listing broadcast by rank 0)
 *   config         config_load and config_validate of an INI file
 *   idx            dataset_load_idx: the input split into an images file and
 *                  a labels file at a point its first byte gives
 *
 * A target returns after any CNT_ERR: only a crash, a sanitizer report, a
 * leak or a hang is a finding. Files go to a private folder under /dev/shm
 * (or TMPDIR), removed at exit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/check.h"
#include "data/dataset.h"
#include "data/image.h"
#include "data/shards.h"
#include "model/backend.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/profile.h"
#include "train/safetensors.h"

#if !defined(FUZZ_image) && !defined(FUZZ_safetensors) && !defined(FUZZ_checkpoint) && !defined(FUZZ_profile) && \
    !defined(FUZZ_shards) && !defined(FUZZ_listing) && !defined(FUZZ_config) && !defined(FUZZ_idx)
#error "build with -DFUZZ_<target> (make fuzz)"
#endif

static char dir[256];

static void remove_dir(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (dir[0] && system(cmd) != 0) {
        /* nothing to do at exit */
    }
}

/* A private folder for the files the readers take by path. */
static void make_dir(void) {
    if (dir[0]) return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/cnt_fuzz_XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    atexit(remove_dir);
}

/* data[0, n) into dir/name, optionally with its last 4 bytes the CRC-32 of
 * the rest; the path in out. */
__attribute__((unused)) static void put_file(const char *name, const uint8_t *data, size_t n, int fix_crc, char *out,
                                             size_t len) {
    make_dir();
    snprintf(out, len, "%s/%s", dir, name);
    FILE *f = fopen(out, "wb");
    if (!f) abort();
    if (fix_crc && n >= 4) {
        uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), data, (uInt)(n - 4));
        if (fwrite(data, 1, n - 4, f) != n - 4 || fwrite(&crc, 4, 1, f) != 1) abort();
    } else if (n && fwrite(data, 1, n, f) != n) {
        abort();
    }
    if (fclose(f) != 0) abort();
}

#if defined(FUZZ_safetensors) || defined(FUZZ_checkpoint)
/* ResNet-20 on 1x28x28, 10 classes (the quick start's), and room for its
 * state: built once. */
static net *nt;
static float *params, *buffers, *momentum;

static void make_net(void) {
    if (nt) return;
    zoo_options zo;
    memset(&zo, 0, sizeof zo);
    nt = zoo_create(backend_cpu(), "resnet20", &zo, 1, 28, 28, 10, BACKEND_LAYOUT_NCHW, 1);
    if (!nt) abort();
    params = calloc(nt->n_params, sizeof *params);
    momentum = calloc(nt->n_params, sizeof *momentum);
    buffers = calloc(nt->n_buffers ? nt->n_buffers : 1, sizeof *buffers);
    if (!params || !momentum || !buffers) abort();
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[320];
#if defined(FUZZ_image)
    if (n < 8) return 0;
    /* the first 8 bytes choose the channels, the crop and the DCT scaling */
    int c = data[0] & 1 ? 3 : 1, dct = data[0] & 2 ? 1 : 0;
    uint8_t *buf = malloc(n - 8 ? n - 8 : 1);
    if (!buf) abort();
    memcpy(buf, data + 8, n - 8);
    image_src im;
    if (image_open_bytes(&im, buf, n - 8, "fuzz", c) != CNT_OK) return 0;
    int x = im.w > 1 ? data[1] % im.w : 0, y = im.h > 1 ? data[2] % im.h : 0;
    int cw = 1 + (im.w - x > 1 ? data[3] % (im.w - x) : 0), ch = 1 + (im.h - y > 1 ? data[4] % (im.h - y) : 0);
    int ow = 1 + data[5] % 48, oh = 1 + data[6] % 48;
    image_view v = image_view_crop_resize(x, y, cw, ch, ow, oh);
    uint8_t *dst = malloc((size_t)v.ow * (size_t)v.oh * (size_t)c + 1);
    if (!dst) abort();
    (void)image_render(&im, &v, dct, dst);
    if (data[7] & 1) {
        image_view r = image_view_resize(im.w, im.h, ow, oh);
        uint8_t *d2 = malloc((size_t)r.ow * (size_t)r.oh * (size_t)c + 1);
        if (!d2) abort();
        (void)image_render(&im, &r, !dct, d2);
        free(d2);
    }
    free(dst);
    image_close(&im);
#elif defined(FUZZ_safetensors)
    make_net();
    put_file("w.safetensors", data, n, 0, path, sizeof path);
    safetensors_report rep;
    (void)safetensors_load(path, nt, params, buffers, &rep);
    char value[64];
    int found;
    (void)safetensors_metadata(path, "mean", value, sizeof value, &found);
#elif defined(FUZZ_checkpoint)
    make_net();
    put_file("ckpt.cnt", data, n, 1, path, sizeof path);
    ckpt_meta meta;
    int has_momentum;
    (void)ckpt_read_meta(path, &meta);
    ckpt_powersgd psgd;
    if (ckpt_read(path, nt, params, buffers, momentum, &has_momentum, &psgd, &meta) == CNT_OK)
        ckpt_powersgd_free(&psgd);
#elif defined(FUZZ_profile)
    profile p;
    memset(&p, 0, sizeof p);
    if (profile_parse((const char *)data, n, "fuzz.json", &p) == CNT_OK) profile_free(&p);
#elif defined(FUZZ_shards)
    char index[320];
    make_dir();
    snprintf(index, sizeof index, "%s/set", dir);
    mkdir(index, 0700);
    put_file("set/" SHARDS_INDEX, data, n, 1, path, sizeof path);
    dataset ds;
    memset(&ds, 0, sizeof ds);
    uint64_t id;
    (void)dataset_open_shards(&ds, index, &id);
    dataset_free(&ds);
#elif defined(FUZZ_listing)
    dataset ds;
    memset(&ds, 0, sizeof ds);
    (void)dataset_unpack(&ds, data, n);
    dataset_free(&ds);
#elif defined(FUZZ_config)
    put_file("c.ini", data, n, 0, path, sizeof path);
    config cfg;
    config_defaults(&cfg);
    if (config_load(&cfg, path) == CNT_OK) (void)config_validate(&cfg);
#elif defined(FUZZ_idx)
    if (n < 1) return 0;
    size_t cut = 1 + (n - 1) * data[0] / 256;
    char labels[320];
    put_file("images.idx", data + 1, cut - 1, 0, path, sizeof path);
    put_file("labels.idx", data + cut, n - cut, 0, labels, sizeof labels);
    dataset ds;
    memset(&ds, 0, sizeof ds);
    (void)dataset_load_idx(&ds, path, labels);
    dataset_free(&ds);
#endif
    (void)path;
    return 0;
}
