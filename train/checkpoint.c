/*
 * train/checkpoint.c - writing, validating and finding checkpoint files.
 *
 * The layout is documented in checkpoint.h. Writing streams the fields through
 * one writer that updates the CRC as it goes; reading first checks the size the
 * header implies, then the checksum over the whole file, then the model
 * signature, and only then copies the arrays into the caller's memory, so a bad
 * file never leaves half-loaded parameters behind.
 */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/json.h"
#include "train/metrics.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files are written in host byte order, which must be little-endian"
#endif

#define CKPT_MAGIC "CNTCKPT" /* 7 characters + the terminating NUL = 8 bytes */
#define CKPT_MAGIC_LEN 8
#define CKPT_NAME_LEN 128
#define CKPT_ENTRY_BYTES ((uint64_t)CKPT_NAME_LEN + 8 + 8)
/* magic, version, meta (4 + 8 + 8 + 8 + 64), model block (7 x 4), [from
 * version 3: the loss-scaling block (8 + 8 + 8 + 8)], [from version 4: the
 * position block (8 + 4 + 4 + 4 + config_len)], [version 5: the
 * normalisation block (4 + 12 + 12)], two tensor counts */
#define CKPT_MODEL_BYTES 28
#define CKPT_SCALE_BYTES 32
#define CKPT_POS_BYTES 20 /* version 4: epoch_samples, world, batch, config_len (then the config text) */
#define CKPT_V2_FIXED_BYTES ((uint64_t)CKPT_MAGIC_LEN + 4 + 92 + CKPT_MODEL_BYTES + 4 + 4)
#define CKPT_V3_FIXED_BYTES (CKPT_V2_FIXED_BYTES + CKPT_SCALE_BYTES)
#define CKPT_NORM_BYTES 28 /* version 5: norm_channels, mean[3], std[3] */
#define CKPT_V4_FIXED_BYTES (CKPT_V3_FIXED_BYTES + CKPT_POS_BYTES) /* plus config_len */
#define CKPT_FIXED_BYTES (CKPT_V4_FIXED_BYTES + CKPT_NORM_BYTES) /* plus config_len */
#define CKPT_PATH_MAX 4096
#define CKPT_CHUNK ((size_t)1 << 20)

_Static_assert(sizeof(((param_info *)0)->name) <= CKPT_NAME_LEN, "param names must fit the checkpoint's field");
_Static_assert(sizeof(((buffer_info *)0)->name) <= CKPT_NAME_LEN, "buffer names must fit the checkpoint's field");

/* ---------------------------------------------------------------- writing */

typedef struct ckpt_writer {
    FILE *f;
    const char *path; /* for messages */
    uLong crc;
    int failed;       /* the first failure already set the message */
} ckpt_writer;

static void put(ckpt_writer *w, const void *data, size_t bytes) {
    const unsigned char *p = data;
    while (!w->failed && bytes > 0) {
        size_t n = bytes < CKPT_CHUNK ? bytes : CKPT_CHUNK;
        if (fwrite(p, 1, n, w->f) != n) {
            cnt_err_set("cannot write checkpoint '%s': %s", w->path, strerror(errno));
            w->failed = 1;
            return;
        }
        w->crc = crc32(w->crc, p, (uInt)n);
        p += n;
        bytes -= n;
    }
}

static void put_u32(ckpt_writer *w, uint32_t v) { put(w, &v, sizeof v); }
static void put_u64(ckpt_writer *w, uint64_t v) { put(w, &v, sizeof v); }

static void put_name(ckpt_writer *w, const char *name) {
    char buf[CKPT_NAME_LEN];
    memset(buf, 0, sizeof buf);
    snprintf(buf, sizeof buf, "%s", name);
    put(w, buf, sizeof buf);
}

/* A checkpoint's position in the data, from its name. */
typedef struct ckpt_pos {
    int epoch;     /* complete epochs */
    long samples;  /* samples of the next epoch */
} ckpt_pos;

#define CKPT_MAX_SAMPLES 9999999999L /* ten digits in the file name */

/* Parses "ckpt-EEEEEE.cnt" or "ckpt-EEEEEE-NNNNNNNNNN.cnt" exactly; 1 with
 * *pos set, else 0. */
static int parse_ckpt_name(const char *name, ckpt_pos *pos) {
    if (strncmp(name, "ckpt-", 5) != 0) return 0;
    const char *p = name + 5;
    long v = 0;
    for (int i = 0; i < 6; i++, p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (*p - '0');
    }
    pos->epoch = (int)v;
    pos->samples = 0;
    if (*p == '-') {
        p++;
        v = 0;
        for (int i = 0; i < 10; i++, p++) {
            if (*p < '0' || *p > '9') return 0;
            v = v * 10 + (*p - '0');
        }
        if (v == 0) return 0; /* an epoch boundary has the short name only */
        pos->samples = v;
    }
    return strcmp(p, ".cnt") == 0;
}

/* dir/<name of pos> into buf; CNT_ERR when it does not fit. */
static int ckpt_name(char *buf, size_t len, const char *dir, const char *prefix, ckpt_pos pos, const char *suffix) {
    int n = pos.samples > 0 ? snprintf(buf, len, "%s/%sckpt-%06d-%010ld.cnt%s", dir, prefix, pos.epoch, pos.samples,
                                       suffix)
                            : snprintf(buf, len, "%s/%sckpt-%06d.cnt%s", dir, prefix, pos.epoch, suffix);
    return n >= 0 && (size_t)n < len ? CNT_OK : CNT_ERR;
}

static int cmp_pos(const void *a, const void *b) {
    const ckpt_pos *x = a, *y = b;
    if (x->epoch != y->epoch) return (x->epoch > y->epoch) - (x->epoch < y->epoch);
    return (x->samples > y->samples) - (x->samples < y->samples);
}

/* The checkpoints in dir (regular files with a checkpoint's name), oldest
 * first: a new array (free()) in *out and its length in *n. CNT_ERR naming
 * dir when it cannot be listed. */
static int list_checkpoints(const char *dir, ckpt_pos **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return cnt_err_set("cannot list checkpoint directory '%s': %s", dir, strerror(errno));
    int cap = 16;
    ckpt_pos *all = cnt_malloc((size_t)cap * sizeof *all);
    struct dirent *e;
    for (;;) {
        errno = 0;
        if ((e = readdir(d)) == NULL) break;
        ckpt_pos pos;
        if (!parse_ckpt_name(e->d_name, &pos)) continue;
        char path[CKPT_PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (*n == cap) {
            cap *= 2;
            ckpt_pos *grown = realloc(all, (size_t)cap * sizeof *all);
            CHECK_ERRNO(grown != NULL, "growing the checkpoint list");
            all = grown;
        }
        all[(*n)++] = pos;
    }
    int err = errno;
    closedir(d);
    if (err) {
        free(all);
        *n = 0;
        return cnt_err_set("cannot list checkpoint directory '%s': %s", dir, strerror(err));
    }
    qsort(all, (size_t)*n, sizeof *all, cmp_pos);
    *out = all;
    return CNT_OK;
}

/* Removes the oldest checkpoints in dir so that at most keep remain; failures are warnings. */
static void prune(const char *dir, int keep) {
    ckpt_pos *all;
    int n;
    if (list_checkpoints(dir, &all, &n) != CNT_OK) {
        log_warn("checkpoint: old checkpoints not removed: %s", cnt_err_msg());
        return;
    }
    for (int i = 0; i + keep < n; i++) {
        char path[CKPT_PATH_MAX];
        if (ckpt_name(path, sizeof path, dir, "", all[i], "") != CNT_OK) continue;
        if (unlink(path) != 0 && errno != ENOENT)
            log_warn("checkpoint: cannot remove old checkpoint '%s': %s", path, strerror(errno));
    }
    free(all);
}

int ckpt_write(const char *dir, const net *nt, const float *params, const float *buffers, const float *momentum,
               const ckpt_powersgd *psgd, const ckpt_meta *meta, int keep, char *path_out, size_t path_len) {
    if (psgd && (psgd->rank < 1 || psgd->rank > CKPT_PSGD_MAX_RANK || psgd->n_q < 1 || psgd->n_e < 1 ||
                 psgd->n_q > nt->n_params || psgd->n_e > nt->n_params || !(psgd->draws[1] & 1)))
        return cnt_err_set("checkpoint in '%s': implausible PowerSGD state (rank %d, %zu Q values, %zu errors)", dir,
                           psgd->rank, psgd->n_q, psgd->n_e);
    if (meta->epoch < 0 || meta->epoch > CKPT_MAX_EPOCH)
        return cnt_err_set("checkpoint in '%s': epoch %d is outside 0..%d", dir, meta->epoch, CKPT_MAX_EPOCH);
    if (meta->epoch_samples < 0 || meta->epoch_samples > CKPT_MAX_SAMPLES)
        return cnt_err_set("checkpoint in '%s': %ld samples into the epoch is outside 0..%ld", dir,
                           meta->epoch_samples, CKPT_MAX_SAMPLES);
    if (meta->world < 1 || meta->batch < 1)
        return cnt_err_set("checkpoint in '%s': world size %d and batch %d must be at least 1", dir, meta->world,
                           meta->batch);
    size_t config_len = strnlen(meta->config, sizeof meta->config);
    if (config_len >= sizeof meta->config)
        return cnt_err_set("checkpoint in '%s': the config text is longer than %d bytes", dir, CKPT_CONFIG_MAX - 1);
    if (meta->norm_channels < 0 || meta->norm_channels > 3)
        return cnt_err_set("checkpoint in '%s': %d normalisation channels is outside 0..3", dir, meta->norm_channels);
    ckpt_pos pos = {meta->epoch, meta->epoch_samples};
    char path[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    if (ckpt_name(path, sizeof path, dir, "", pos, "") != CNT_OK || ckpt_name(tmp, sizeof tmp, dir, ".", pos, ".tmp"))
        return cnt_err_set("checkpoint directory path too long: '%s'", dir);
    if (path_out && strlen(path) >= path_len)
        return cnt_err_set("checkpoint path '%s' does not fit the caller's %zu-byte buffer", path, path_len);
    if (make_dirs(dir) != CNT_OK) return cnt_err_prefix("cannot write checkpoint '%s'", path);

    ckpt_writer w = {.f = fopen(tmp, "wb"), .path = tmp, .crc = crc32(0L, Z_NULL, 0), .failed = 0};
    if (!w.f) return cnt_err_set("cannot create checkpoint file '%s': %s", tmp, strerror(errno));

    char magic[CKPT_MAGIC_LEN] = CKPT_MAGIC;
    put(&w, magic, sizeof magic);
    put_u32(&w, CKPT_VERSION);
    int32_t epoch = meta->epoch;
    int64_t step = meta->step;
    put(&w, &epoch, sizeof epoch);
    put(&w, &step, sizeof step);
    put_u64(&w, meta->dropout_seed);
    put_u64(&w, meta->config_hash);
    char model_name[sizeof meta->model_name];
    memset(model_name, 0, sizeof model_name);
    snprintf(model_name, sizeof model_name, "%.*s", (int)sizeof model_name - 1, meta->model_name);
    put(&w, model_name, sizeof model_name);
    int32_t model_block[6] = {nt->in_c, nt->in_h, nt->in_w, nt->classes, nt->aux_output >= 0,
                              meta->zero_init_residual != 0};
    float dropout = meta->dropout;
    put(&w, model_block, sizeof model_block);
    put(&w, &dropout, sizeof dropout);
    double scale = meta->loss_scale;
    int64_t scale_good = meta->loss_scale_good, skipped = meta->skipped_steps, in_a_row = meta->skipped_in_a_row;
    put(&w, &scale, sizeof scale);
    put(&w, &scale_good, sizeof scale_good);
    put(&w, &skipped, sizeof skipped);
    put(&w, &in_a_row, sizeof in_a_row);
    int64_t epoch_samples = meta->epoch_samples;
    int32_t geometry[2] = {meta->world, meta->batch};
    put(&w, &epoch_samples, sizeof epoch_samples);
    put(&w, geometry, sizeof geometry);
    put_u32(&w, (uint32_t)config_len);
    put(&w, meta->config, config_len);
    int32_t norm_channels = meta->norm_channels;
    float norm[6] = {0};
    for (int c = 0; c < norm_channels; c++) {
        norm[c] = meta->mean[c];
        norm[3 + c] = meta->std[c];
    }
    put(&w, &norm_channels, sizeof norm_channels);
    put(&w, norm, sizeof norm);
    put_u32(&w, (uint32_t)nt->n_param_tensors);
    put_u32(&w, (uint32_t)nt->n_buffer_tensors);
    for (int i = 0; i < nt->n_param_tensors; i++) {
        put_name(&w, nt->param_info[i].name);
        put_u64(&w, nt->param_info[i].offset);
        put_u64(&w, nt->param_info[i].count);
    }
    for (int i = 0; i < nt->n_buffer_tensors; i++) {
        put_name(&w, nt->buffer_info[i].name);
        put_u64(&w, nt->buffer_info[i].offset);
        put_u64(&w, nt->buffer_info[i].count);
    }
    put_u64(&w, nt->n_params);
    put_u64(&w, nt->n_buffers);
    put(&w, params, nt->n_params * sizeof(float));
    put(&w, buffers, nt->n_buffers * sizeof(float));
    put_u32(&w, momentum ? 1u : 0u);
    if (momentum) put(&w, momentum, nt->n_params * sizeof(float));
    put_u32(&w, psgd ? (uint32_t)psgd->rank : 0u);
    if (psgd) {
        put_u64(&w, psgd->n_q);
        put_u64(&w, psgd->n_e);
        put(&w, psgd->draws, sizeof psgd->draws);
        put(&w, psgd->q, psgd->n_q * sizeof(float));
        put(&w, psgd->e, psgd->n_e * sizeof(float));
    }
    uint32_t crc = (uint32_t)w.crc;
    put(&w, &crc, sizeof crc);

    if (file_commit_atomic(w.f, w.failed, tmp, path, dir, "checkpoint") != CNT_OK) return CNT_ERR;
    if (keep > 0) prune(dir, keep);
    if (path_out) snprintf(path_out, path_len, "%s", path);
    return CNT_OK;
}

/* ---------------------------------------------------------------- reading */

typedef struct ckpt_entry {
    char name[CKPT_NAME_LEN];
    uint64_t offset, count;
} ckpt_entry;

/* Reads exactly bytes; CNT_ERR naming path when the file ends first. */
static int get(FILE *f, const char *path, void *dst, size_t bytes) {
    unsigned char *p = dst;
    while (bytes > 0) {
        size_t n = bytes < CKPT_CHUNK ? bytes : CKPT_CHUNK;
        if (fread(p, 1, n, f) != n) {
            if (ferror(f)) return cnt_err_set("cannot read checkpoint '%s': %s", path, strerror(errno));
            return cnt_err_set("checkpoint '%s' is truncated (the file ends inside its header)", path);
        }
        p += n;
        bytes -= n;
    }
    return CNT_OK;
}

static int seek_to(FILE *f, const char *path, uint64_t pos) {
    if (fseeko(f, (off_t)pos, SEEK_SET) != 0)
        return cnt_err_set("cannot seek in checkpoint '%s': %s", path, strerror(errno));
    return CNT_OK;
}

/* The first difference between the stored signature and the net's tensors
 * (kind "parameter" or "buffer"); CNT_ERR with the message. */
static int compare_tensors(const char *path, const char *model, const char *kind, const ckpt_entry *stored,
                           int n_stored, int n_net, const char *(*name_at)(const net *, int),
                           size_t (*offset_at)(const net *, int), size_t (*count_at)(const net *, int),
                           const net *nt) {
    int n = n_stored < n_net ? n_stored : n_net;
    for (int i = 0; i < n; i++) {
        const ckpt_entry *s = &stored[i];
        if (strcmp(s->name, name_at(nt, i)) != 0)
            return cnt_err_set("checkpoint '%s' (model '%s') does not match this model: %s tensor %d is '%s' in "
                               "the checkpoint but '%s' here",
                               path, model, kind, i, s->name, name_at(nt, i));
        if (s->count != count_at(nt, i))
            return cnt_err_set("checkpoint '%s' (model '%s') does not match this model: %s '%s' has %llu values "
                               "in the checkpoint but %zu here",
                               path, model, kind, s->name, (unsigned long long)s->count, count_at(nt, i));
    }
    if (n_stored != n_net)
        return cnt_err_set("checkpoint '%s' (model '%s') does not match this model: it has %d %s tensors, this "
                           "model %d (first unmatched: '%s')",
                           path, model, n_stored, kind, n_net, n_stored > n_net ? stored[n].name : name_at(nt, n));
    /* Same tensors: a different offset can only mean the flat layout's rules changed. */
    for (int i = 0; i < n; i++) {
        const ckpt_entry *s = &stored[i];
        if (s->offset != offset_at(nt, i))
            return cnt_err_set("checkpoint '%s' (model '%s') does not match this model: %s '%s' is at offset %llu "
                               "in the checkpoint but %zu here (the parameter layout changed)",
                               path, model, kind, s->name, (unsigned long long)s->offset, offset_at(nt, i));
    }
    return CNT_OK;
}

static const char *param_name(const net *nt, int i) { return nt->param_info[i].name; }
static size_t param_offset(const net *nt, int i) { return nt->param_info[i].offset; }
static size_t param_count(const net *nt, int i) { return nt->param_info[i].count; }
static const char *buffer_name(const net *nt, int i) { return nt->buffer_info[i].name; }
static size_t buffer_offset(const net *nt, int i) { return nt->buffer_info[i].offset; }
static size_t buffer_count(const net *nt, int i) { return nt->buffer_info[i].count; }

/* Magic (already checked by the caller) is behind f's position: reads the
 * version and the meta with its model block (and, from version 3, the
 * loss-scaling block) into *m; *fixed gets the version's bytes before the
 * tensor signature entries. The caller has checked the file holds at least
 * CKPT_V2_FIXED_BYTES; a version-3 file shorter than its header fails here. */
static int read_header(FILE *f, const char *path, uint64_t size, ckpt_meta *m, uint64_t *fixed) {
    uint32_t version;
    if (get(f, path, &version, sizeof version) != CNT_OK) return CNT_ERR;
    if (version == 1)
        return cnt_err_set("checkpoint '%s' has version 1, written by an older cnntrain: it has no model block "
                           "(input shape, classes) and this build reads versions 2 to %d only; retrain to get a "
                           "version-%d checkpoint",
                           path, CKPT_VERSION, CKPT_VERSION);
    if (version < 2 || version > CKPT_VERSION)
        return cnt_err_set("checkpoint '%s' has unsupported version %u (this build reads versions 2 to %d)", path,
                           version, CKPT_VERSION);
    *fixed = version == 2   ? CKPT_V2_FIXED_BYTES
             : version == 3 ? CKPT_V3_FIXED_BYTES
             : version == 4 ? CKPT_V4_FIXED_BYTES
                            : CKPT_FIXED_BYTES;
    if (size < *fixed)
        return cnt_err_set("checkpoint '%s' is truncated: %llu bytes, shorter than the %llu-byte header", path,
                           (unsigned long long)size, (unsigned long long)*fixed);
    int32_t epoch;
    int64_t step;
    int32_t block[6];
    float dropout;
    memset(m, 0, sizeof *m);
    m->version = (int)version;
    if (get(f, path, &epoch, sizeof epoch) != CNT_OK || get(f, path, &step, sizeof step) != CNT_OK ||
        get(f, path, &m->dropout_seed, sizeof m->dropout_seed) != CNT_OK ||
        get(f, path, &m->config_hash, sizeof m->config_hash) != CNT_OK ||
        get(f, path, m->model_name, sizeof m->model_name) != CNT_OK || get(f, path, block, sizeof block) != CNT_OK ||
        get(f, path, &dropout, sizeof dropout) != CNT_OK)
        return CNT_ERR;
    m->epoch = epoch;
    m->step = (long)step;
    m->model_name[sizeof m->model_name - 1] = '\0';
    m->in_c = block[0];
    m->in_h = block[1];
    m->in_w = block[2];
    m->classes = block[3];
    m->aux_logits = block[4];
    m->zero_init_residual = block[5];
    m->dropout = dropout;
    if (version >= 3) {
        double scale;
        int64_t good, skipped, in_a_row;
        if (get(f, path, &scale, sizeof scale) != CNT_OK || get(f, path, &good, sizeof good) != CNT_OK ||
            get(f, path, &skipped, sizeof skipped) != CNT_OK || get(f, path, &in_a_row, sizeof in_a_row) != CNT_OK)
            return CNT_ERR;
        if (!(scale == 0 || (scale > 0 && scale <= 1e300)) || good < 0 || skipped < 0 || in_a_row < 0 ||
            in_a_row > skipped)
            return cnt_err_set("checkpoint '%s' is corrupt: implausible loss-scaling block (scale %g, %lld clean "
                               "steps, %lld skipped, %lld of them in a row)",
                               path, scale, (long long)good, (long long)skipped, (long long)in_a_row);
        m->loss_scale = scale;
        m->loss_scale_good = (long)good;
        m->skipped_steps = (long)skipped;
        m->skipped_in_a_row = (int)in_a_row;
    }
    if (version >= 4) {
        int64_t samples;
        int32_t geometry[2];
        uint32_t config_len;
        if (get(f, path, &samples, sizeof samples) != CNT_OK || get(f, path, geometry, sizeof geometry) != CNT_OK ||
            get(f, path, &config_len, sizeof config_len) != CNT_OK)
            return CNT_ERR;
        if (samples < 0 || samples > CKPT_MAX_SAMPLES || geometry[0] < 1 || geometry[1] < 1 ||
            config_len >= CKPT_CONFIG_MAX)
            return cnt_err_set("checkpoint '%s' is corrupt: implausible position block (%lld samples into the "
                               "epoch, %d ranks, batch %d, %u bytes of config)",
                               path, (long long)samples, geometry[0], geometry[1], config_len);
        *fixed += config_len;
        if (size < *fixed)
            return cnt_err_set("checkpoint '%s' is truncated: %llu bytes, shorter than the %llu-byte header", path,
                               (unsigned long long)size, (unsigned long long)*fixed);
        if (get(f, path, m->config, config_len) != CNT_OK) return CNT_ERR;
        m->config[config_len] = '\0';
        m->epoch_samples = (long)samples;
        m->world = geometry[0];
        m->batch = geometry[1];
    }
    if (version >= 5) {
        int32_t channels;
        float norm[6];
        if (get(f, path, &channels, sizeof channels) != CNT_OK || get(f, path, norm, sizeof norm) != CNT_OK)
            return CNT_ERR;
        int bad = channels < 0 || channels > 3;
        for (int c = 0; !bad && c < channels; c++)
            bad = !isfinite(norm[c]) || !isfinite(norm[3 + c]) || !(norm[3 + c] > 0.0f);
        if (bad)
            return cnt_err_set("checkpoint '%s' is corrupt: implausible normalisation block (%d channels, mean %g "
                               "%g %g, std %g %g %g)",
                               path, channels, (double)norm[0], (double)norm[1], (double)norm[2], (double)norm[3],
                               (double)norm[4], (double)norm[5]);
        m->norm_channels = channels;
        for (int c = 0; c < channels; c++) {
            m->mean[c] = norm[c];
            m->std[c] = norm[3 + c];
        }
    }
    const int32_t big = 1 << 20;
    if (block[0] < 1 || block[0] > big || block[1] < 1 || block[1] > big || block[2] < 1 || block[2] > big ||
        block[3] < 1 || block[3] > big || (uint32_t)block[4] > 1 || (uint32_t)block[5] > 1 || !(dropout < 1.0f) ||
        dropout != dropout)
        return cnt_err_set("checkpoint '%s' is corrupt: implausible model block (input %dx%dx%d, %d classes, "
                           "aux_logits %d, zero_init_residual %d, dropout %g)",
                           path, block[0], block[1], block[2], block[3], block[4], block[5], (double)dropout);
    return CNT_OK;
}

/* The checksum of everything before the last 4 bytes (streamed) against
 * the last 4. Leaves f anywhere. */
static int check_crc(FILE *f, const char *path, uint64_t size) {
    if (seek_to(f, path, 0) != CNT_OK) return CNT_ERR;
    unsigned char *chunk = cnt_malloc(CKPT_CHUNK);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t left = size - 4; left > 0;) {
        size_t n = left < CKPT_CHUNK ? (size_t)left : CKPT_CHUNK;
        if (get(f, path, chunk, n) != CNT_OK) {
            free(chunk);
            return CNT_ERR;
        }
        crc = crc32(crc, chunk, (uInt)n);
        left -= n;
    }
    free(chunk);
    uint32_t stored_crc;
    if (get(f, path, &stored_crc, sizeof stored_crc) != CNT_OK) return CNT_ERR;
    if (stored_crc != (uint32_t)crc)
        return cnt_err_set("checkpoint '%s' is corrupt: checksum mismatch (stored %08x, computed %08x)", path,
                           stored_crc, (unsigned)crc);
    return CNT_OK;
}

/* Everything after the file is open: see ckpt_read. */
static int read_open(FILE *f, const char *path, const net *nt, float *params, float *buffers, float *momentum,
                     int *has_momentum, ckpt_powersgd *psgd, ckpt_meta *meta) {
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return cnt_err_set("cannot stat checkpoint '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return cnt_err_set("checkpoint '%s' is a directory", path);
    uint64_t size = (uint64_t)st.st_size;

    unsigned char magic[CKPT_MAGIC_LEN];
    size_t have = size < CKPT_MAGIC_LEN ? (size_t)size : CKPT_MAGIC_LEN;
    if (get(f, path, magic, have) != CNT_OK) return CNT_ERR;
    if (memcmp(magic, CKPT_MAGIC, have) != 0)
        return cnt_err_set("'%s' is not a cnntrain checkpoint (wrong magic number)", path);
    if (size < CKPT_V2_FIXED_BYTES)
        return cnt_err_set("checkpoint '%s' is truncated: %llu bytes, shorter than the %llu-byte header", path,
                           (unsigned long long)size, (unsigned long long)CKPT_V2_FIXED_BYTES);
    ckpt_meta m;
    uint64_t fixed;
    if (read_header(f, path, size, &m, &fixed) != CNT_OK) return CNT_ERR;

    uint32_t n_pt, n_bt;
    if (get(f, path, &n_pt, sizeof n_pt) != CNT_OK || get(f, path, &n_bt, sizeof n_bt) != CNT_OK) return CNT_ERR;
    uint64_t entries = (uint64_t)n_pt + n_bt;
    uint64_t after_sig = fixed + entries * CKPT_ENTRY_BYTES + 16;
    if (after_sig > size)
        return cnt_err_set("checkpoint '%s' is truncated: %llu bytes, but its model signature alone needs %llu",
                           path, (unsigned long long)size, (unsigned long long)after_sig);
    ckpt_entry *ent = cnt_calloc(entries ? (size_t)entries : 1, sizeof *ent);
    int rc = CNT_ERR;
    for (uint64_t i = 0; i < entries; i++) {
        if (get(f, path, ent[i].name, CKPT_NAME_LEN) != CNT_OK || get(f, path, &ent[i].offset, 8) != CNT_OK ||
            get(f, path, &ent[i].count, 8) != CNT_OK)
            goto out;
        ent[i].name[CKPT_NAME_LEN - 1] = '\0';
    }
    uint64_t n_params, n_buffers;
    if (get(f, path, &n_params, 8) != CNT_OK || get(f, path, &n_buffers, 8) != CNT_OK) goto out;
    if (n_params > size / 4 || n_buffers > size / 4 || after_sig + 4 * (n_params + n_buffers) + 4 > size) {
        cnt_err_set("checkpoint '%s' is truncated: %llu bytes, too short for the %llu parameters and %llu buffer "
                    "values its header describes",
                    path, (unsigned long long)size, (unsigned long long)n_params, (unsigned long long)n_buffers);
        goto out;
    }
    uint64_t flag_at = after_sig + 4 * (n_params + n_buffers);
    uint32_t flag;
    if (seek_to(f, path, flag_at) != CNT_OK || get(f, path, &flag, sizeof flag) != CNT_OK) goto out;
    if (flag > 1) {
        cnt_err_set("checkpoint '%s' is corrupt: momentum flag is %u (expected 0 or 1)", path, flag);
        goto out;
    }
    uint64_t expected = flag_at + 4 + (flag ? 4 * n_params : 0) + 4;
    /* version 6: the PowerSGD block after the momentum */
    uint64_t psgd_at = expected - 4;
    ckpt_powersgd ps = {0};
    if (m.version >= 6) {
        uint32_t rank = 0;
        if (size < expected + 4 || seek_to(f, path, psgd_at) != CNT_OK || get(f, path, &rank, sizeof rank) != CNT_OK) {
            cnt_err_set("checkpoint '%s' is truncated: %llu bytes, its header describes at least %llu", path,
                        (unsigned long long)size, (unsigned long long)(expected + 4));
            goto out;
        }
        expected += 4;
        if (rank > 0) {
            uint64_t nq = 0, ne = 0;
            if (size < expected + 32 || get(f, path, &nq, 8) != CNT_OK || get(f, path, &ne, 8) != CNT_OK ||
                get(f, path, ps.draws, sizeof ps.draws) != CNT_OK) {
                cnt_err_set("checkpoint '%s' is truncated: %llu bytes, too short for its PowerSGD block", path,
                            (unsigned long long)size);
                goto out;
            }
            if (rank > CKPT_PSGD_MAX_RANK || nq < 1 || ne < 1 || nq > n_params || ne > n_params ||
                !(ps.draws[1] & 1)) {
                cnt_err_set("checkpoint '%s' is corrupt: implausible PowerSGD block (rank %u, %llu Q values, %llu "
                            "errors, %llu parameters)",
                            path, rank, (unsigned long long)nq, (unsigned long long)ne, (unsigned long long)n_params);
                goto out;
            }
            ps.rank = (int)rank;
            ps.n_q = (size_t)nq;
            ps.n_e = (size_t)ne;
            expected += 32 + 4 * (nq + ne);
        }
    }
    if (size < expected) {
        cnt_err_set("checkpoint '%s' is truncated: %llu bytes, its header describes %llu", path,
                    (unsigned long long)size, (unsigned long long)expected);
        goto out;
    }
    if (size > expected) {
        cnt_err_set("checkpoint '%s' is corrupt: %llu bytes, its header describes only %llu", path,
                    (unsigned long long)size, (unsigned long long)expected);
        goto out;
    }

    if (check_crc(f, path, size) != CNT_OK) goto out;

    if (compare_tensors(path, m.model_name, "parameter", ent, (int)n_pt, nt->n_param_tensors, param_name,
                        param_offset, param_count, nt) != CNT_OK ||
        compare_tensors(path, m.model_name, "buffer", ent + n_pt, (int)n_bt, nt->n_buffer_tensors, buffer_name,
                        buffer_offset, buffer_count, nt) != CNT_OK)
        goto out;
    if (n_params != nt->n_params || n_buffers != nt->n_buffers) {
        cnt_err_set("checkpoint '%s' (model '%s') does not match this model: %llu parameters and %llu buffer "
                    "values in the checkpoint, %zu and %zu here",
                    path, m.model_name, (unsigned long long)n_params, (unsigned long long)n_buffers, nt->n_params,
                    nt->n_buffers);
        goto out;
    }

    /* Valid: now the caller's arrays may be written. */
    if (seek_to(f, path, after_sig) != CNT_OK || get(f, path, params, nt->n_params * sizeof(float)) != CNT_OK ||
        get(f, path, buffers, nt->n_buffers * sizeof(float)) != CNT_OK)
        goto out;
    if (momentum) {
        if (flag) {
            if (seek_to(f, path, flag_at + 4) != CNT_OK || get(f, path, momentum, nt->n_params * sizeof(float)) != CNT_OK)
                goto out;
        } else {
            memset(momentum, 0, nt->n_params * sizeof(float));
        }
    }
    if (psgd) {
        *psgd = ps;
        if (ps.rank > 0) {
            psgd->q = cnt_malloc(ps.n_q * sizeof(float));
            psgd->e = cnt_malloc(ps.n_e * sizeof(float));
            if (seek_to(f, path, psgd_at + 36) != CNT_OK || get(f, path, psgd->q, ps.n_q * sizeof(float)) != CNT_OK ||
                get(f, path, psgd->e, ps.n_e * sizeof(float)) != CNT_OK) {
                ckpt_powersgd_free(psgd);
                goto out;
            }
        }
    }
    if (has_momentum) *has_momentum = (int)flag;
    if (meta) *meta = m;
    rc = CNT_OK;
out:
    free(ent);
    return rc;
}

void ckpt_powersgd_free(ckpt_powersgd *psgd) {
    if (!psgd) return;
    free(psgd->q);
    free(psgd->e);
    *psgd = (ckpt_powersgd){0};
}

int ckpt_read(const char *path, const net *nt, float *params, float *buffers, float *momentum, int *has_momentum,
              ckpt_powersgd *psgd, ckpt_meta *meta) {
    if (psgd) *psgd = (ckpt_powersgd){0};
    FILE *f = file_open_regular(path, "checkpoint", NULL);
    if (!f) return CNT_ERR;
    int rc = read_open(f, path, nt, params, buffers, momentum, has_momentum, psgd, meta);
    fclose(f);
    return rc;
}

int ckpt_read_meta(const char *path, ckpt_meta *meta) {
    FILE *f = file_open_regular(path, "checkpoint", NULL);
    if (!f) return CNT_ERR;
    struct stat st;
    int rc = CNT_ERR;
    unsigned char magic[CKPT_MAGIC_LEN];
    if (fstat(fileno(f), &st) != 0) {
        cnt_err_set("cannot stat checkpoint '%s': %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        cnt_err_set("checkpoint '%s' is a directory", path);
    } else {
        uint64_t size = (uint64_t)st.st_size;
        size_t have = size < CKPT_MAGIC_LEN ? (size_t)size : CKPT_MAGIC_LEN;
        if (get(f, path, magic, have) != CNT_OK) {
            /* message set */
        } else if (memcmp(magic, CKPT_MAGIC, have) != 0 || have < CKPT_MAGIC_LEN) {
            cnt_err_set("'%s' is not a cnntrain checkpoint (wrong magic number)", path);
        } else if (size < CKPT_V2_FIXED_BYTES) {
            cnt_err_set("checkpoint '%s' is truncated: %llu bytes, shorter than the %llu-byte header", path,
                        (unsigned long long)size, (unsigned long long)CKPT_V2_FIXED_BYTES);
        } else {
            uint64_t fixed;
            /* The header is trusted only once the whole file's checksum
             * holds: a corrupt but plausible input size would have the
             * caller build (and allocate) a net for it. */
            rc = read_header(f, path, size, meta, &fixed);
            if (rc == CNT_OK) rc = check_crc(f, path, size);
        }
    }
    fclose(f);
    return rc;
}

/* ---------------------------------------------------------------- finding */

int ckpt_find_latest(const char *dir, char *path_out, size_t path_len) {
    ckpt_pos *all;
    int n;
    if (list_checkpoints(dir, &all, &n) != CNT_OK) return CNT_ERR;
    if (n == 0) {
        free(all);
        return cnt_err_set("no checkpoint (ckpt-EEEEEE.cnt or ckpt-EEEEEE-NNNNNNNNNN.cnt) in '%s'", dir);
    }
    ckpt_pos last = all[n - 1];
    free(all);
    if (ckpt_name(path_out, path_len, dir, "", last, "") != CNT_OK)
        return cnt_err_set("checkpoint path in '%s' does not fit the caller's %zu-byte buffer", dir, path_len);
    return CNT_OK;
}

/* ---------------------------------------------------------------- the best */

#define BEST_JSON "best.json"
#define BEST_CNT "best.cnt"

/* path (a best.json) into *b, or CNT_ERR naming it. */
static int best_parse(const char *path, ckpt_best *b) {
    size_t n;
    char *text = file_read_all(path, "best checkpoint's record", 1023, &n);
    if (!text) return CNT_ERR;
    json_t *j;
    int parsed = json_parse(text, n, path, &j);
    free(text);
    if (parsed != CNT_OK) return CNT_ERR;
    json_t *e = json_object_get(j, "epoch"), *st = json_object_get(j, "step"), *t1 = json_object_get(j, "top1"),
           *t5 = json_object_get(j, "top5"), *l = json_object_get(j, "loss"), *c = json_object_get(j, "checkpoint");
    const char *name = json_is_string(c) ? json_string_value(c) : NULL;
    int ok = json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) <= CKPT_MAX_EPOCH &&
             json_is_integer(st) && json_integer_value(st) >= 0 && json_is_number(t1) && json_is_number(t5) &&
             (json_is_number(l) || json_is_null(l)) && name && name[0] && strlen(name) < sizeof b->checkpoint &&
             !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
    if (ok) {
        memset(b, 0, sizeof *b);
        b->epoch = (int)json_integer_value(e);
        b->step = (long)json_integer_value(st);
        b->top1 = json_number_value(t1);
        b->top5 = json_number_value(t5);
        b->loss = json_is_null(l) ? NAN : json_number_value(l);
        snprintf(b->checkpoint, sizeof b->checkpoint, "%s", name);
    }
    json_decref(j);
    return ok ? CNT_OK
              : cnt_err_set("%s: not what checkpoint.keep_best writes (epoch, step, top1, top5, loss, checkpoint)",
                            path);
}

/* dir/best.cnt made a link to `from` (a temporary link renamed over it). */
static int best_link(const char *dir, const char *from) {
    char cnt[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    snprintf(cnt, sizeof cnt, "%s/" BEST_CNT, dir);
    snprintf(tmp, sizeof tmp, "%s/." BEST_CNT ".tmp", dir);
    unlink(tmp);
    if (link(from, tmp) != 0)
        return cnt_err_set("cannot link '%s' to '%s' (checkpoint.keep_best needs hard links): %s", from, tmp,
                           strerror(errno));
    if (rename(tmp, cnt) != 0) {
        int e = errno;
        unlink(tmp);
        return cnt_err_set("cannot rename '%s' to '%s': %s", tmp, cnt, strerror(e));
    }
    unlink(tmp); /* still there when best.cnt was this file already: rename then does nothing */
    return fsync_dir(dir);
}

int ckpt_best_keep(const char *dir, const ckpt_best *in) {
    /* the epoch's own checkpoint: the best is scored at an epoch's end */
    char ckpt_path[CKPT_PATH_MAX];
    if (ckpt_name(ckpt_path, sizeof ckpt_path, dir, "", (ckpt_pos){in->epoch, 0}, "") != CNT_OK)
        return cnt_err_set("checkpoint directory path too long: '%s'", dir);
    const char *base = strrchr(ckpt_path, '/') + 1;
    char json[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], loss[32];
    snprintf(json, sizeof json, "%s/" BEST_JSON, dir);
    snprintf(tmp, sizeof tmp, "%s/." BEST_JSON ".tmp", dir);
    if (isfinite(in->loss))
        snprintf(loss, sizeof loss, "%.6g", in->loss);
    else
        snprintf(loss, sizeof loss, "null");
    FILE *f = fopen(tmp, "w");
    if (!f) return cnt_err_set("cannot write '%s': %s", tmp, strerror(errno));
    int failed = fprintf(f, "{\"epoch\": %d, \"step\": %ld, \"top1\": %.6f, \"top5\": %.6f, \"loss\": %s, "
                            "\"checkpoint\": \"%s\"}\n",
                         in->epoch, in->step, in->top1, in->top5, loss, base) < 0
                     ? cnt_err_set("cannot write '%s': %s", tmp, strerror(errno))
                     : 0;
    if (file_commit_atomic(f, failed, tmp, json, dir, "best checkpoint's record") != CNT_OK) return CNT_ERR;
    return best_link(dir, ckpt_path);
}

int ckpt_best_read(const char *dir, ckpt_best *b, int *found) {
    *found = 0;
    memset(b, 0, sizeof *b);
    char json[CKPT_PATH_MAX], cnt[CKPT_PATH_MAX], named[CKPT_PATH_MAX];
    snprintf(json, sizeof json, "%s/" BEST_JSON, dir);
    snprintf(cnt, sizeof cnt, "%s/" BEST_CNT, dir);
    struct stat sj, sn, sc;
    if (lstat(json, &sj) != 0) {
        if (errno == ENOENT) return CNT_OK;
        return cnt_err_set("cannot read '%s': %s", json, strerror(errno));
    }
    if (best_parse(json, b) != CNT_OK)
        return cnt_err_suffix(" (checkpoint.keep_best: move it away, or set checkpoint.keep_best = false)");
    *found = 1;
    snprintf(named, sizeof named, "%s/%s", dir, b->checkpoint);
    if (stat(named, &sn) == 0 && (stat(cnt, &sc) != 0 || sc.st_ino != sn.st_ino || sc.st_dev != sn.st_dev)) {
        log_warn("checkpoint.keep_best: %s is not %s, which %s names (a run stopped between the two): linked again",
                 cnt, named, json);
        return best_link(dir, named);
    }
    return CNT_OK;
}

/* Whether ckpt_supersede moves best.json and best.cnt for a run starting at
 * (epoch, epoch_samples): the best is further into the data (or unknown, and
 * the run a fresh start), or best.json cannot be read. */
static int best_superseded(const char *dir, int epoch, long epoch_samples) {
    char json[CKPT_PATH_MAX], cnt[CKPT_PATH_MAX];
    snprintf(json, sizeof json, "%s/" BEST_JSON, dir);
    snprintf(cnt, sizeof cnt, "%s/" BEST_CNT, dir);
    struct stat st;
    if (lstat(json, &st) != 0) return lstat(cnt, &st) == 0 && epoch == 0 && epoch_samples == 0;
    ckpt_best b;
    if (best_parse(json, &b) != CNT_OK) {
        log_warn("%s (moved aside with what this run supersedes)", cnt_err_msg());
        return 1;
    }
    return b.epoch > epoch;
}

int ckpt_supersede(const char *dir, int epoch, long epoch_samples, int *moved, char *moved_to, size_t len) {
    *moved = 0;
    struct stat st;
    if (stat(dir, &st) != 0 && errno == ENOENT) return CNT_OK;
    ckpt_pos *all;
    int n;
    if (list_checkpoints(dir, &all, &n) != CNT_OK) return CNT_ERR;
    ckpt_pos start = {epoch, epoch_samples};
    int first = 0;
    while (first < n && cmp_pos(&all[first], &start) <= 0) first++;
    int best = best_superseded(dir, epoch, epoch_samples);
    if (first == n && !best) {
        free(all);
        return CNT_OK;
    }
    char stamp[32], stem[CKPT_PATH_MAX], sub[CKPT_PATH_MAX];
    file_time_stamp(time(NULL), stamp, sizeof stamp);
    /* two runs started in the same second: a suffix keeps them apart */
    int w = snprintf(stem, sizeof stem, "%s/superseded-%s", dir, stamp);
    int e = w < 0 || (size_t)w >= sizeof stem ? ENAMETOOLONG : 0;
    if (!e && file_claim_dir(stem, sub, len < sizeof sub ? len : sizeof sub) != 0) e = errno;
    if (e == ENAMETOOLONG) {
        free(all);
        return cnt_err_set("checkpoint directory path too long: '%s'", dir);
    }
    int rc = CNT_OK;
    if (e) rc = cnt_err_set("cannot create '%s' to move superseded checkpoints into: %s", sub, strerror(e));
    for (int i = first; i < n && rc == CNT_OK; i++) {
        char from[CKPT_PATH_MAX], to[CKPT_PATH_MAX];
        if (ckpt_name(from, sizeof from, dir, "", all[i], "") != CNT_OK ||
            ckpt_name(to, sizeof to, sub, "", all[i], "") != CNT_OK) {
            rc = cnt_err_set("checkpoint directory path too long: '%s'", dir);
        } else if (rename(from, to) != 0) {
            rc = cnt_err_set("cannot move superseded checkpoint '%s' to '%s': %s", from, to, strerror(errno));
        } else {
            (*moved)++;
        }
    }
    free(all);
    /* best.cnt first: best.json left without it is mended by ckpt_best_read's link or moved by the next run */
    const char *names[2] = {BEST_CNT, BEST_JSON};
    for (int i = 0; best && i < 2 && rc == CNT_OK; i++) {
        char from[CKPT_PATH_MAX], to[CKPT_PATH_MAX];
        int fw = snprintf(from, sizeof from, "%s/%s", dir, names[i]);
        int tw = snprintf(to, sizeof to, "%s/%s", sub, names[i]);
        if (fw < 0 || (size_t)fw >= sizeof from || tw < 0 || (size_t)tw >= sizeof to)
            rc = cnt_err_set("checkpoint directory path too long: '%s'", dir);
        else if (rename(from, to) == 0)
            log_info("checkpoint.dir: %s moved to %s with what this run supersedes", from, sub);
        else if (errno != ENOENT)
            rc = cnt_err_set("cannot move superseded '%s' to '%s': %s", from, to, strerror(errno));
    }
    if (rc == CNT_OK) rc = fsync_dir(dir);
    snprintf(moved_to, len, "%s", sub);
    return rc;
}
