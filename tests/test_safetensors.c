/*
 * tests/test_safetensors.c - weights interchange: safetensors files written
 * for zoo models (resnet20, resnet18, vgg11_bn, inception_v3 with its
 * auxiliary head) load back bitwise into a fresh net; the header is valid JSON
 * (checked by python3's json module when python3 is present, and by our own
 * parser) holding exactly the net's torchvision names, torchvision's shapes and
 * num_batches_tracked; F16 and BF16 files convert; every rejection
 * safetensors_load promises names the file and the tensor (a FIFO, directory
 * or device in place of the file among them); a classifier for
 * another class count is kept and reported; failed writes leave nothing
 * behind; `trainer --export`'s path (checkpoint -> zoo rebuild -> file) works
 * and names the checkpoint on errors.
 * Files live under a fresh mkdtemp directory in /tmp, removed afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/rng.h"
#include "model/net.h"
#include "model/zoo.h"
#include "tests/support/testutil.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "train/weights.h"

static char root[64]; /* the mkdtemp directory */

static void path_in_root(const char *name, char *out, size_t len) { snprintf(out, len, "%s/%s", root, name); }

static net *build_zoo(const char *name, int c, int h, int w, int classes, int aux) {
    net *nt = net_create(backend_cpu(), c, h, w, classes);
    zoo_options zo = {.zero_init_residual = 0, .aux_logits = aux, .dropout = -1};
    int out = -1, aux_out = -1;
    if (zoo_build(nt, name, &zo, &out, &aux_out) != CNT_OK || net_finalize(nt, out, aux_out, 1) != CNT_OK)
        fail_msg("building %s: %s", name, cnt_err_msg());
    net_init_params_blank(nt, 5); /* round_trip fills the values itself */
    return nt;
}

/* conv(K) -> bn -> relu -> global avgpool -> linear(classes). */
static net *build_tiny(int K, int classes) {
    net *nt = net_create(backend_cpu(), 3, 6, 6, classes);
    int c = net_conv(nt, NET_INPUT, "conv1", K, 3, 1, 1, 0);
    int b = net_bn(nt, c, "bn1", 1e-5f);
    int r = net_relu(nt, b, "relu");
    int p = net_adaptive_avgpool(nt, r, "avgpool", 1, 1);
    int fc = net_linear(nt, p, "fc", classes, 1);
    assert_int_equal(net_finalize(nt, fc, -1, 2), CNT_OK);
    net_init_params(nt, 17);
    return nt;
}

static void fill_random(uint64_t seed, float *x, size_t n) {
    rng r;
    rng_seed(&r, seed, 0);
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(&r) * 4.0f - 2.0f;
}

static int count_bn(const net *nt) {
    int n = 0;
    for (int i = 0; i < nt->n_nodes; i++) n += strcmp(nt->nodes[i].ops->kind, "bn") == 0;
    return n;
}

static char *read_all(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = cnt_malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    *size = n;
    return b;
}

static void write_all(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* The JSON header of a safetensors file (NUL-terminated, caller frees). */
static char *header_of(const char *path) {
    long size;
    char *b = read_all(path, &size);
    uint64_t n;
    memcpy(&n, b, 8);
    assert_true(8 + n <= (uint64_t)size);
    assert_int_equal((8 + n) % 8, 0); /* padded as the reference implementation does */
    char *h = cnt_malloc(n + 1);
    memcpy(h, b + 8, n);
    h[n] = '\0';
    free(b);
    return h;
}

static int count_substr(const char *s, const char *part) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, part)) != NULL; p += strlen(part)) n++;
    return n;
}

/* python3 (json + struct only) lists the header's tensor names, sorted, one a
 * line, with their dtype and shape, and checks data_offsets tile the data. The
 * same list is computed from the net; both must be equal. Skipped (with a
 * note) when python3 is absent. */
static void check_with_python(const char *path, const net *nt) {
    if (system("python3 -c pass >/dev/null 2>&1") != 0) {
        printf("python3 not found: independent JSON check skipped\n");
        return;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c '\n"
             "import json, struct, sys\n"
             "import os\n"
             "f = open(sys.argv[1], \"rb\")\n"
             "n = struct.unpack(\"<Q\", f.read(8))[0]\n"
             "h = json.loads(f.read(n).decode(\"utf-8\"))\n"
             "h.pop(\"__metadata__\")\n"
             "spans = sorted(tuple(v[\"data_offsets\"]) for v in h.values())\n"
             "assert spans[0][0] == 0 and spans[-1][1] == os.path.getsize(sys.argv[1]) - 8 - n\n"
             "assert all(a[1] == c[0] for a, c in zip(spans, spans[1:]))\n"
             "for k in sorted(h): print(k, h[k][\"dtype\"], h[k][\"shape\"])\n"
             "' %s",
             path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *out = NULL;
    size_t cap = 0;
    FILE *mem = open_memstream(&out, &cap);
    char line[512];
    while (fgets(line, sizeof line, p)) fputs(line, mem);
    fclose(mem);
    assert_int_equal(pclose(p), 0);

    /* The expected listing, from the net. */
    int n = nt->n_param_tensors + nt->n_buffer_tensors + count_bn(nt);
    char **lines = cnt_calloc((size_t)n, sizeof *lines);
    int k = 0;
    for (int i = 0; i < nt->n_nodes; i++) {
        const node *nd = &nt->nodes[i];
        for (int j = 0; j < nd->n_params + nd->n_buffers; j++) {
            const char *name = j < nd->n_params ? nt->param_info[nd->first_param + j].name
                                                : nt->buffer_info[nd->first_buffer + j - nd->n_params].name;
            int ndim = j < nd->n_params ? nt->param_info[nd->first_param + j].ndim
                                        : nt->buffer_info[nd->first_buffer + j - nd->n_params].ndim;
            const int *sh = j < nd->n_params ? nt->param_info[nd->first_param + j].shape
                                             : nt->buffer_info[nd->first_buffer + j - nd->n_params].shape;
            char buf[512];
            int at = snprintf(buf, sizeof buf, "%s F32 [", name);
            for (int d = 0; d < ndim; d++) at += snprintf(buf + at, sizeof buf - (size_t)at, "%s%d", d ? ", " : "", sh[d]);
            snprintf(buf + at, sizeof buf - (size_t)at, "]\n");
            lines[k++] = strdup(buf);
        }
        if (strcmp(nd->ops->kind, "bn") == 0) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s.num_batches_tracked I64 []\n", nd->name);
            lines[k++] = strdup(buf);
        }
    }
    assert_int_equal(k, n);
    /* Python sorts by code point; names are ASCII, so strcmp agrees. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(lines[j - 1], lines[j]) > 0; j--) {
            char *t = lines[j];
            lines[j] = lines[j - 1];
            lines[j - 1] = t;
        }
    char *expected = NULL;
    mem = open_memstream(&expected, &cap);
    for (int i = 0; i < n; i++) {
        fputs(lines[i], mem);
        free(lines[i]);
    }
    fclose(mem);
    free(lines);
    if (strcmp(out, expected) != 0) fail_msg("python3's view of %s differs from the net:\n%s\nexpected:\n%s", path, out, expected);
    free(out);
    free(expected);
}

/* Writes a random state of nt to `name`, loads it into a fresh net from make(),
 * and checks the round trip and the header. Returns the file's path in path. */
static void round_trip(net *nt, net *fresh, const char *name, char *path, size_t len) {
    path_in_root(name, path, len);
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers ? nt->n_buffers : 1);
    fill_random(11, p, nt->n_params);
    fill_random(12, b, nt->n_buffers);
    const char *meta[] = {"format", "pt", "note", "quote \" and backslash \\ and tab \t", NULL};
    if (safetensors_write(path, nt, p, b, 42, meta) != CNT_OK) fail_msg("safetensors_write: %s", cnt_err_msg());

    float *p2 = tu_alloc_f(fresh->n_params), *b2 = tu_alloc_f(fresh->n_buffers ? fresh->n_buffers : 1);
    safetensors_report rep;
    if (safetensors_load(path, fresh, p2, b2, &rep) != CNT_OK) fail_msg("safetensors_load: %s", cnt_err_msg());
    tu_assert_bitwise_equal_f("params", p, p2, nt->n_params);
    tu_assert_bitwise_equal_f("buffers", b, b2, nt->n_buffers);
    assert_int_equal(rep.n_loaded, nt->n_param_tensors + nt->n_buffer_tensors);
    assert_int_equal(rep.n_ignored, count_bn(nt));
    assert_int_equal(rep.n_ignored_nbt, count_bn(nt));
    assert_int_equal(rep.n_kept, 0);

    char *h = header_of(path);
    assert_int_equal(count_substr(h, "\"dtype\""), nt->n_param_tensors + nt->n_buffer_tensors + count_bn(nt));
    assert_int_equal(count_substr(h, "\"num_batches_tracked\""), 0);
    assert_int_equal(count_substr(h, ".num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],"), count_bn(nt));
    assert_non_null(strstr(h, "\"__metadata__\":{\"format\":\"pt\""));
    free(h);
    /* safetensors_metadata: a key's value (escapes undone), a key not there */
    char v[64];
    int found = -1;
    assert_int_equal(safetensors_metadata(path, "note", v, sizeof v, &found), CNT_OK);
    assert_int_equal(found, 1);
    assert_string_equal(v, "quote \" and backslash \\ and tab \t");
    assert_int_equal(safetensors_metadata(path, "mean", v, sizeof v, &found), CNT_OK);
    assert_int_equal(found, 0);
    check_with_python(path, nt);
    free(p);
    free(b);
    free(p2);
    free(b2);
}

static void expect_in_header(const char *path, const char *entry) {
    char *h = header_of(path);
    if (!strstr(h, entry)) fail_msg("header of %s lacks %s", path, entry);
    free(h);
}

/* ---------------------------------------------------------------- round trips */

static void test_resnet20(void **state) {
    (void)state;
    char path[512];
    net *a = build_zoo("resnet20", 1, 28, 28, 10, 0), *b = build_zoo("resnet20", 1, 28, 28, 10, 0);
    round_trip(a, b, "resnet20.safetensors", path, sizeof path);
    expect_in_header(path, "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[16,1,3,3],");
    expect_in_header(path, "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[10,64],");
    net_free(a);
    net_free(b);
}

static void test_resnet18(void **state) {
    (void)state;
    char path[512];
    net *a = build_zoo("resnet18", 3, 64, 64, 1000, 0), *b = build_zoo("resnet18", 3, 64, 64, 1000, 0);
    round_trip(a, b, "resnet18.safetensors", path, sizeof path);
    /* torchvision's shapes */
    expect_in_header(path, "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[64,3,7,7],");
    expect_in_header(path, "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1000,512],");
    expect_in_header(path, "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[1000],");
    expect_in_header(path, "\"layer1.0.bn1.running_var\":{\"dtype\":\"F32\",\"shape\":[64],");
    expect_in_header(path, "\"layer2.0.downsample.0.weight\":{\"dtype\":\"F32\",\"shape\":[128,64,1,1],");
    expect_in_header(path, "\"layer2.0.downsample.1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],");
    /* num_batches_tracked holds the value given */
    long size;
    char *raw = read_all(path, &size);
    uint64_t hl;
    memcpy(&hl, raw, 8);
    int64_t v;
    memcpy(&v, raw + 8 + hl, 8); /* the I64 scalars come first in the data */
    assert_true(v == 42);
    free(raw);
    net_free(a);
    net_free(b);
}

static void test_vgg11_bn(void **state) {
    (void)state;
    char path[512];
    net *a = build_zoo("vgg11_bn", 3, 32, 32, 10, 0), *b = build_zoo("vgg11_bn", 3, 32, 32, 10, 0);
    round_trip(a, b, "vgg11_bn.safetensors", path, sizeof path);
    expect_in_header(path, "\"features.0.weight\":{\"dtype\":\"F32\",\"shape\":[64,3,3,3],");
    expect_in_header(path, "\"features.1.running_mean\":{\"dtype\":\"F32\",\"shape\":[64],");
    expect_in_header(path, "\"classifier.0.weight\":{\"dtype\":\"F32\",\"shape\":[4096,25088],");
    expect_in_header(path, "\"classifier.6.weight\":{\"dtype\":\"F32\",\"shape\":[10,4096],");
    net_free(a);
    net_free(b);
}

/* Inception V3 with its auxiliary head (299x299 is the smallest input it allows);
 * then the same file into a net without the head (AuxLogits.* ignored) and
 * into one for 10 classes (both classifiers kept). */
static void test_inception_v3(void **state) {
    (void)state;
    char path[512];
    net *a = build_zoo("inception_v3", 3, 299, 299, 1000, 1), *b = build_zoo("inception_v3", 3, 299, 299, 1000, 1);
    round_trip(a, b, "inception.safetensors", path, sizeof path);
    expect_in_header(path, "\"Conv2d_1a_3x3.conv.weight\":{\"dtype\":\"F32\",\"shape\":[32,3,3,3],");
    expect_in_header(path, "\"Mixed_6b.branch7x7_2.conv.weight\":{\"dtype\":\"F32\",\"shape\":[128,128,1,7],");
    expect_in_header(path, "\"AuxLogits.fc.weight\":{\"dtype\":\"F32\",\"shape\":[1000,768],");
    expect_in_header(path, "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1000,2048],");
    net_free(b);

    net *noaux = build_zoo("inception_v3", 3, 299, 299, 1000, 0);
    float *p = tu_alloc_f(noaux->n_params), *bf = tu_alloc_f(noaux->n_buffers);
    safetensors_report rep;
    if (safetensors_load(path, noaux, p, bf, &rep) != CNT_OK) fail_msg("no aux head: %s", cnt_err_msg());
    int aux_tensors = (a->n_param_tensors + a->n_buffer_tensors) - (noaux->n_param_tensors + noaux->n_buffer_tensors);
    assert_true(aux_tensors > 0);
    assert_int_equal(rep.n_ignored, count_bn(a) + aux_tensors);
    assert_int_equal(rep.n_ignored_nbt, count_bn(a));
    assert_non_null(strstr(rep.ignored, "AuxLogits."));
    free(p);
    free(bf);
    net_free(noaux);

    net *ten = build_zoo("inception_v3", 3, 299, 299, 10, 1);
    net_init_params(ten, 5); /* drawn values, so that keeping them is seen */
    p = tu_alloc_f(ten->n_params);
    bf = tu_alloc_f(ten->n_buffers);
    ten->be->download(p, ten->params, ten->n_params * sizeof(float));
    float *before = tu_alloc_f(ten->n_params);
    memcpy(before, p, ten->n_params * sizeof(float));
    if (safetensors_load(path, ten, p, bf, &rep) != CNT_OK) fail_msg("10 classes: %s", cnt_err_msg());
    assert_int_equal(rep.n_kept, 4);
    assert_non_null(strstr(rep.kept, "AuxLogits.fc.weight [1000, 768] (here [10, 768])"));
    assert_non_null(strstr(rep.kept, "fc.bias [1000] (here [10])"));
    int fc = net_find_param(ten, "fc.weight");
    tu_assert_bitwise_equal_f("kept fc.weight", before + ten->param_info[fc].offset, p + ten->param_info[fc].offset,
                              ten->param_info[fc].count);
    free(p);
    free(bf);
    free(before);
    net_free(ten);
    net_free(a);
}

/* ---------------------------------------------------------------- hand-made files */

/* One tensor of a hand-made file; the data are `bytes` bytes of `data`. */
typedef struct tensor_spec {
    const char *name, *dtype;
    const char *shape;     /* JSON array text, e.g. "[4,3,3,3]" */
    const void *data;
    size_t bytes;
    long begin, end;       /* >= 0: data_offsets written as given (data still appended in order) */
} tensor_spec;

/* Writes a safetensors file from specs; header_override, when non-NULL, replaces the JSON. */
static void write_file(const char *path, const tensor_spec *t, int n, const char *header_override) {
    char *h = NULL, *data = NULL;
    size_t hl, dl;
    FILE *hf = open_memstream(&h, &hl), *df = open_memstream(&data, &dl);
    fputc('{', hf);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        long b = t[i].begin >= 0 ? t[i].begin : (long)at, e = t[i].begin >= 0 ? t[i].end : (long)(at + t[i].bytes);
        fprintf(hf, "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, \"data_offsets\": [%ld, %ld]}", i ? ", " : "",
                t[i].name, t[i].dtype, t[i].shape, b, e);
        fwrite(t[i].data, 1, t[i].bytes, df);
        at += t[i].bytes;
    }
    fputc('}', hf);
    fclose(hf);
    fclose(df);
    const char *json = header_override ? header_override : h;
    uint64_t len = strlen(json);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(&len, 8, 1, f);
    fwrite(json, 1, len, f);
    fwrite(data, 1, dl, f);
    assert_int_equal(fclose(f), 0);
    free(h);
    free(data);
}

/* The tiny net's tensors as specs (F32, its own values from p/b), in a fixed array. */
typedef struct tiny_file {
    tensor_spec t[8];
    int n;
    char shapes[8][48];
} tiny_file;

static void tiny_specs(const net *nt, const float *p, const float *b, tiny_file *tf) {
    tf->n = 0;
    for (int i = 0; i < nt->n_param_tensors + nt->n_buffer_tensors; i++) {
        int is_p = i < nt->n_param_tensors;
        const char *name = is_p ? nt->param_info[i].name : nt->buffer_info[i - nt->n_param_tensors].name;
        int ndim = is_p ? nt->param_info[i].ndim : 1;
        const int *sh = is_p ? nt->param_info[i].shape : nt->buffer_info[i - nt->n_param_tensors].shape;
        size_t count = is_p ? nt->param_info[i].count : nt->buffer_info[i - nt->n_param_tensors].count;
        const float *src = is_p ? p + nt->param_info[i].offset : b + nt->buffer_info[i - nt->n_param_tensors].offset;
        char *s = tf->shapes[tf->n];
        int at = snprintf(s, 48, "[");
        for (int d = 0; d < ndim; d++) at += snprintf(s + at, 48 - (size_t)at, "%s%d", d ? "," : "", sh[d]);
        snprintf(s + at, 48 - (size_t)at, "]");
        tf->t[tf->n] = (tensor_spec){name, "F32", s, src, count * sizeof(float), -1, -1};
        tf->n++;
    }
}

static void expect_load_error(const net *nt, const char *path, const char *what, const char *tensor) {
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers);
    int rc = safetensors_load(path, nt, p, b, NULL);
    const char *msg = cnt_err_msg();
    if (rc != CNT_ERR || !strstr(msg, path) || !strstr(msg, what) || (tensor && !strstr(msg, tensor)))
        fail_msg("safetensors_load('%s'): rc %d, message \"%s\"; expected CNT_ERR naming the file%s%s and "
                 "containing \"%s\"",
                 path, rc, msg, tensor ? " and tensor " : "", tensor ? tensor : "", what);
    if (getenv("ST_VERBOSE")) printf("  rejected: %s\n", msg);
    /* The caller's arrays are untouched by a rejected file. */
    for (size_t i = 0; i < nt->n_params; i++) assert_true(p[i] == 0.0f);
    free(p);
    free(b);
}

static uint16_t to_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    return (uint16_t)(bits >> 16); /* exact for the values used (low 16 bits zero) */
}

static void test_f16_bf16(void **state) {
    (void)state;
    net *nt = build_tiny(4, 5);
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers);
    /* Values exact in F16 and BF16: k/8 for small k, and a few specials. */
    for (size_t i = 0; i < nt->n_params; i++) p[i] = (float)((int)(i % 33) - 16) / 8.0f;
    for (size_t i = 0; i < nt->n_buffers; i++) b[i] = (float)(i % 7) * 0.25f;
    tiny_file tf;
    tiny_specs(nt, p, b, &tf);
    /* conv1.weight as F16, fc.weight as BF16, the rest F32. */
    int cw = net_find_param(nt, "conv1.weight"), fw = net_find_param(nt, "fc.weight");
    size_t ncw = nt->param_info[cw].count, nfw = nt->param_info[fw].count;
    uint16_t *h16 = cnt_malloc(ncw * 2), *b16 = cnt_malloc(nfw * 2);
    for (size_t i = 0; i < ncw; i++) {
        float x = p[nt->param_info[cw].offset + i];
        /* F16 of k/8, |k| <= 16: sign, exponent, 10-bit mantissa. */
        uint32_t bits;
        memcpy(&bits, &x, 4);
        uint32_t sign = (bits >> 16) & 0x8000u;
        int exp = (int)((bits >> 23) & 0xff);
        h16[i] = x == 0.0f ? (uint16_t)sign : (uint16_t)(sign | (uint32_t)(exp - 112) << 10 | ((bits >> 13) & 0x3ffu));
    }
    h16[0] = 0x0001; /* the smallest F16 subnormal, 2^-24 */
    p[nt->param_info[cw].offset] = 0x1p-24f;
    for (size_t i = 0; i < nfw; i++) b16[i] = to_bf16(p[nt->param_info[fw].offset + i]);
    for (int i = 0; i < tf.n; i++) {
        if (strcmp(tf.t[i].name, "conv1.weight") == 0) {
            tf.t[i].dtype = "F16";
            tf.t[i].data = h16;
            tf.t[i].bytes = ncw * 2;
        }
        if (strcmp(tf.t[i].name, "fc.weight") == 0) {
            tf.t[i].dtype = "BF16";
            tf.t[i].data = b16;
            tf.t[i].bytes = nfw * 2;
        }
    }
    char path[512];
    path_in_root("half.safetensors", path, sizeof path);
    write_file(path, tf.t, tf.n, NULL);
    float *p2 = tu_alloc_f(nt->n_params), *b2 = tu_alloc_f(nt->n_buffers);
    safetensors_report rep;
    if (safetensors_load(path, nt, p2, b2, &rep) != CNT_OK) fail_msg("F16/BF16: %s", cnt_err_msg());
    tu_assert_bitwise_equal_f("params", p, p2, nt->n_params);
    tu_assert_bitwise_equal_f("buffers", b, b2, nt->n_buffers);
    assert_int_equal(rep.n_ignored, 0);
    free(h16);
    free(b16);
    free(p);
    free(b);
    free(p2);
    free(b2);
    net_free(nt);
}

static void test_errors(void **state) {
    (void)state;
    net *nt = build_tiny(4, 5);
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers);
    fill_random(3, p, nt->n_params);
    fill_random(4, b, nt->n_buffers);
    char path[512], good[512];
    path_in_root("good.safetensors", good, sizeof good);
    assert_int_equal(safetensors_write(good, nt, p, b, 7, NULL), CNT_OK);
    long size;
    char *raw = read_all(good, &size);
    uint64_t hl;
    memcpy(&hl, raw, 8);

    /* missing file */
    path_in_root("nope.safetensors", path, sizeof path);
    expect_load_error(nt, path, "cannot open", NULL);

    /* Not a regular file: refused unread, naming the kind. A FIFO's open
     * would wait for a writer forever; alarm() turns a hang into a failure. */
    path_in_root("pipe.safetensors", path, sizeof path);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(20);
    expect_load_error(nt, path, "it is a FIFO (named pipe), not a regular file", NULL);
    alarm(0);
    unlink(path);
    path_in_root("dir.safetensors", path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0);
    expect_load_error(nt, path, "it is a directory, not a regular file", NULL);
    rmdir(path);
    expect_load_error(nt, "/dev/zero", "it is a character device, not a regular file", NULL);

    /* truncated: in the length field, in the header, in the data (naming the tensor cut) */
    path_in_root("cut.safetensors", path, sizeof path);
    long cuts[] = {0, 4, 12, 8 + (long)hl - 1, 8 + (long)hl + 2, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_all(path, raw, (size_t)cuts[i]);
        expect_load_error(nt, path, "truncated", i == 5 ? "'fc.bias'" : NULL);
    }

    /* bytes after the last tensor */
    char *longer = cnt_malloc((size_t)size + 4);
    memcpy(longer, raw, (size_t)size);
    memcpy(longer + size, "junk", 4);
    path_in_root("long.safetensors", path, sizeof path);
    write_all(path, longer, (size_t)size + 4);
    expect_load_error(nt, path, "trailing bytes", NULL);
    free(longer);

    /* an absurd header length */
    char *bad = cnt_malloc((size_t)size);
    memcpy(bad, raw, (size_t)size);
    uint64_t huge = (uint64_t)1 << 40;
    memcpy(bad, &huge, 8);
    path_in_root("hl.safetensors", path, sizeof path);
    write_all(path, bad, (size_t)size);
    expect_load_error(nt, path, "bad header", NULL);
    free(bad);

    tiny_file tf;
    tiny_specs(nt, p, b, &tf);
    path_in_root("bad.safetensors", path, sizeof path);
    /* malformed JSON, each naming the problem */
    const char *headers[] = {
        "{\"conv1.weight\": {\"dtype\": \"F32\", \"shape\": [4,3,3,3], \"data_offsets\": [0, 432]}", /* no '}' */
        "[1, 2]",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"extra\": 1}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}} x",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"a\": {}}",
        "{\"a\\q\": {}}",
        "{\"__metadata__\": {\"k\": 1}}",
    };
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        write_file(path, tf.t, tf.n, headers[i]);
        expect_load_error(nt, path, "bad header", NULL);
    }
    /* unknown dtype, and a shape that does not match its bytes: named */
    const char *saved = tf.t[1].dtype;
    tf.t[1].dtype = "F33";
    write_file(path, tf.t, tf.n, NULL);
    expect_load_error(nt, path, "unknown dtype", tf.t[1].name);
    tf.t[1].dtype = "F64"; /* known, but 8 bytes a value: the offsets hold half of that */
    write_file(path, tf.t, tf.n, NULL);
    expect_load_error(nt, path, "bad header", tf.t[1].name);
    tf.t[1].dtype = saved;

    /* a needed tensor of another dtype (sizes consistent) */
    saved = tf.t[1].dtype;
    tf.t[1].dtype = "I32";
    write_file(path, tf.t, tf.n, NULL);
    expect_load_error(nt, path, "dtype I32", tf.t[1].name);
    tf.t[1].dtype = saved;

    /* overlapping data_offsets: tensor 2 starts inside tensor 1 */
    long b1 = 0;
    for (int i = 0; i < 1; i++) b1 += (long)tf.t[i].bytes;
    tf.t[1].begin = b1;
    tf.t[1].end = b1 + (long)tf.t[1].bytes;
    tf.t[2].begin = b1 + 4;
    tf.t[2].end = b1 + 4 + (long)tf.t[2].bytes;
    write_file(path, tf.t, tf.n, NULL);
    expect_load_error(nt, path, "overlap", tf.t[2].name);
    tf.t[1].begin = tf.t[2].begin = -1;

    /* out-of-range data_offsets: the last tensor points past the data */
    int last = tf.n - 1;
    long total = 0;
    for (int i = 0; i < tf.n; i++) total += (long)tf.t[i].bytes;
    tf.t[last].begin = total + 1000;
    tf.t[last].end = total + 1000 + (long)tf.t[last].bytes;
    write_file(path, tf.t, tf.n, NULL);
    expect_load_error(nt, path, "out of range", tf.t[last].name);
    tf.t[last].begin = -1;

    /* a missing tensor: named (bn1.running_var left out) */
    tensor_spec fewer[8];
    int nf = 0;
    for (int i = 0; i < tf.n; i++)
        if (strcmp(tf.t[i].name, "bn1.running_var") != 0) fewer[nf++] = tf.t[i];
    write_file(path, fewer, nf, NULL);
    expect_load_error(nt, path, "no tensor", "'bn1.running_var'");

    /* a wrong shape outside the classifier: named, with both shapes */
    for (int i = 0; i < tf.n; i++)
        if (strcmp(tf.t[i].name, "conv1.weight") == 0) tf.t[i].shape = "[4,3,9]";
    write_file(path, tf.t, tf.n, NULL);
    expect_load_error(nt, path, "shape [4, 3, 9]", "'conv1.weight'");

    /* The unmodified file still loads (the fixtures were sane). */
    float *p2 = tu_alloc_f(nt->n_params), *b2 = tu_alloc_f(nt->n_buffers);
    assert_int_equal(safetensors_load(good, nt, p2, b2, NULL), CNT_OK);
    tu_assert_bitwise_equal_f("params", p, p2, nt->n_params);
    free(p2);
    free(b2);
    free(raw);
    free(p);
    free(b);
    net_free(nt);
}

/* The JSON header of tf's tensors, as write_file writes it, with `extra`
 * (", NAME: {...}", or "") spliced in before its closing brace. Caller frees. */
static char *header_with(const tiny_file *tf, const char *extra) {
    char *h = NULL;
    size_t hl, at = 0;
    FILE *f = open_memstream(&h, &hl);
    fputc('{', f);
    for (int i = 0; i < tf->n; i++) {
        fprintf(f, "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, \"data_offsets\": [%zu, %zu]}", i ? ", " : "",
                tf->t[i].name, tf->t[i].dtype, tf->t[i].shape, at, at + tf->t[i].bytes);
        at += tf->t[i].bytes;
    }
    fprintf(f, "%s}", extra);
    fclose(f);
    return h;
}

/* What the header's JSON parser (common/json.h) must refuse in a file from
 * elsewhere, each naming the file and, for text that is not JSON, the line
 * and column in the header; and what it must read: \u escapes in names,
 * offsets exact above 2^53. */
static void test_header_json(void **state) {
    (void)state;
    net *nt = build_tiny(4, 5);
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers);
    fill_random(5, p, nt->n_params);
    fill_random(6, b, nt->n_buffers);
    tiny_file tf;
    tiny_specs(nt, p, b, &tf);
    size_t total = 0;
    for (int i = 0; i < tf.n; i++) total += tf.t[i].bytes;
    char path[512], extra[256];
    path_in_root("json.safetensors", path, sizeof path);

    /* names spelled with \u escapes are the same names: it loads */
    char *h = header_with(&tf, "");
    char *w = strstr(h, "\"conv1.weight\"");
    assert_non_null(w);
    char *spelled = cnt_malloc(strlen(h) + 16);
    snprintf(spelled, strlen(h) + 16, "%.*s\"conv1.w\\u0065ight\"%s", (int)(w - h), h, w + strlen("\"conv1.weight\""));
    write_file(path, tf.t, tf.n, spelled);
    float *p2 = tu_alloc_f(nt->n_params), *b2 = tu_alloc_f(nt->n_buffers);
    if (safetensors_load(path, nt, p2, b2, NULL) != CNT_OK) fail_msg("\\u escapes: %s", cnt_err_msg());
    tu_assert_bitwise_equal_f("params", p, p2, nt->n_params);
    free(spelled);
    free(h);

    /* an extra, empty tensor whose name is not UTF-8, or holds \u0000: no longer read past */
    const char *names[] = {"x\xff", "x\xc0\xaf", "x\\u0000y", "x\\udc00"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(extra, sizeof extra, ", \"%s\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [%zu, %zu]}",
                 names[i], total, total);
        h = header_with(&tf, extra);
        write_file(path, tf.t, tf.n, h);
        expect_load_error(nt, path, "bad header: JSON header:1:", NULL);
        free(h);
    }
    /* a duplicate key inside an entry; offsets from 2^63 on */
    snprintf(extra, sizeof extra, ", \"x\": {\"dtype\": \"F32\", \"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": "
                                  "[%zu, %zu]}", total, total);
    h = header_with(&tf, extra);
    write_file(path, tf.t, tf.n, h);
    expect_load_error(nt, path, "bad header: JSON header:1:", NULL);
    free(h);
    h = header_with(&tf, ", \"x\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [9223372036854775808, 0]}");
    write_file(path, tf.t, tf.n, h);
    expect_load_error(nt, path, "bad header: JSON header:1:", NULL);
    free(h);
    /* 2^53 + 1 stays 2^53 + 1 (a double would make it 2^53) */
    h = header_with(&tf, ", \"x\": {\"dtype\": \"U8\", \"shape\": [9007199254740993], \"data_offsets\": [0, 1]}");
    write_file(path, tf.t, tf.n, h);
    expect_load_error(nt, path, "needs 9007199254740993 bytes", "'x'");
    free(h);
    /* nesting 3000 deep: refused where the parser stops, not by running off the stack */
    char *deep = cnt_malloc(8000);
    int at = snprintf(deep, 8000, "{\"__metadata__\": ");
    for (int i = 0; i < 3000; i++) deep[at++] = '[';
    for (int i = 0; i < 3000; i++) deep[at++] = ']';
    snprintf(deep + at, 8000 - (size_t)at, "}");
    write_file(path, tf.t, tf.n, deep);
    expect_load_error(nt, path, "bad header: JSON header:1:2065: maximum parsing depth", NULL);
    free(deep);
    /* malformed on line 3: the line and column say where */
    write_file(path, tf.t, tf.n, "{\n\"__metadata__\": {\"k\": \"v\"},\n  \"a\": {\"dtype\": \"F32\",}}");
    expect_load_error(nt, path, "bad header: JSON header:3:", NULL);

    free(p);
    free(b);
    free(p2);
    free(b2);
    net_free(nt);
}

/* fc for 1000 classes in the file, 5 in the net: fc keeps the net's values;
 * any other difference (conv1 with 6 filters) is still an error. */
static void test_classifier_mismatch(void **state) {
    (void)state;
    net *big = build_tiny(4, 1000), *small = build_tiny(4, 5), *wide = build_tiny(6, 5);
    float *p = tu_alloc_f(big->n_params), *b = tu_alloc_f(big->n_buffers);
    fill_random(21, p, big->n_params);
    fill_random(22, b, big->n_buffers);
    char path[512];
    path_in_root("big.safetensors", path, sizeof path);
    assert_int_equal(safetensors_write(path, big, p, b, 0, NULL), CNT_OK);

    float *ps = tu_alloc_f(small->n_params), *bs = tu_alloc_f(small->n_buffers);
    fill_random(23, ps, small->n_params);
    float *before = tu_alloc_f(small->n_params);
    memcpy(before, ps, small->n_params * sizeof(float));
    safetensors_report rep;
    if (safetensors_load(path, small, ps, bs, &rep) != CNT_OK) fail_msg("classifier mismatch: %s", cnt_err_msg());
    assert_int_equal(rep.n_kept, 2);
    assert_non_null(strstr(rep.kept, "fc.weight [1000, 4] (here [5, 4])"));
    assert_int_equal(rep.n_loaded, small->n_param_tensors + small->n_buffer_tensors - 2);
    for (int i = 0; i < small->n_param_tensors; i++) {
        const param_info *pi = &small->param_info[i];
        int j = net_find_param(big, pi->name);
        const float *want = strncmp(pi->name, "fc.", 3) == 0 ? before + pi->offset : p + big->param_info[j].offset;
        tu_assert_bitwise_equal_f(pi->name, want, ps + pi->offset, pi->count);
    }
    tu_assert_bitwise_equal_f("buffers", b, bs, small->n_buffers);

    expect_load_error(wide, path, "shape [4, 3, 3, 3]", "'conv1.weight'");
    free(p);
    free(b);
    free(ps);
    free(bs);
    free(before);
    net_free(big);
    net_free(small);
    net_free(wide);
}

/* Failed writes name the path and leave no file (and an existing one intact). */
static void test_write_errors(void **state) {
    (void)state;
    net *nt = build_tiny(4, 5);
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers);
    char path[512], file[512];
    path_in_root("missing-dir/w.safetensors", path, sizeof path);
    assert_int_equal(safetensors_write(path, nt, p, b, 0, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "missing-dir"));
    /* The target exists; its temporary file cannot be created: the old file stays. */
    path_in_root("keep.safetensors", file, sizeof file);
    write_all(file, "old", 3);
    path_in_root(".keep.safetensors.tmp", path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(safetensors_write(file, nt, p, b, 0, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), path));
    long size;
    char *raw = read_all(file, &size);
    assert_int_equal(size, 3);
    free(raw);
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(safetensors_write(file, nt, p, b, 0, NULL), CNT_OK);
    /* A path with no directory part is written in the current directory: not tested here (cwd). */
    free(p);
    free(b);
    net_free(nt);
}

/* trainer --export's path: a checkpoint of a zoo model (written as the trainer
 * does) is rebuilt from the file alone and exported; the export loads back. */
static void test_export_checkpoint(void **state) {
    (void)state;
    net *nt = build_zoo("resnet20", 3, 32, 32, 7, 0);
    float *p = tu_alloc_f(nt->n_params), *b = tu_alloc_f(nt->n_buffers);
    fill_random(31, p, nt->n_params);
    fill_random(32, b, nt->n_buffers);
    ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.epoch = 2;
    meta.world = meta.batch = 1;
    meta.step = 123;
    meta.dropout = -1;
    meta.norm_channels = 3; /* the normalisation: the export's "mean" and "std" metadata */
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(meta.mean, mean, sizeof mean);
    memcpy(meta.std, std, sizeof std);
    snprintf(meta.model_name, sizeof meta.model_name, "resnet20");
    char dir[512], ckpt[512], out[512];
    path_in_root("ckpts", dir, sizeof dir);
    assert_int_equal(ckpt_write(dir, nt, p, b, NULL, NULL, &meta, 0, ckpt, sizeof ckpt), CNT_OK);
    path_in_root("export.safetensors", out, sizeof out);
    int n = 0;
    if (weights_export(ckpt, out, &n) != CNT_OK) fail_msg("weights_export: %s", cnt_err_msg());
    assert_int_equal(n, nt->n_param_tensors + nt->n_buffer_tensors + count_bn(nt));
    float *p2 = tu_alloc_f(nt->n_params), *b2 = tu_alloc_f(nt->n_buffers);
    assert_int_equal(safetensors_load(out, nt, p2, b2, NULL), CNT_OK);
    tu_assert_bitwise_equal_f("params", p, p2, nt->n_params);
    tu_assert_bitwise_equal_f("buffers", b, b2, nt->n_buffers);
    expect_in_header(out, "\"model\":\"resnet20\"");
    expect_in_header(out, "\"mean\":\"0.485000014,0.456,0.405999988\"");
    expect_in_header(out, "\"std\":\"0.229000002,0.224000007,0.224999994\"");
    expect_in_header(out, "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[16,3,3,3],");
    check_with_python(out, nt);
    long size;
    char *raw = read_all(out, &size);
    uint64_t hl;
    memcpy(&hl, raw, 8);
    int64_t v;
    memcpy(&v, raw + 8 + hl, 8);
    assert_true(v == 123); /* num_batches_tracked = the checkpoint's step count */
    free(raw);

    /* Errors name the checkpoint or the output. */
    char missing[512], bad_out[512];
    path_in_root("ckpts/ckpt-000099.cnt", missing, sizeof missing);
    assert_int_equal(weights_export(missing, out, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), missing));
    path_in_root("no/such/dir/w.safetensors", bad_out, sizeof bad_out);
    assert_int_equal(weights_export(ckpt, bad_out, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), bad_out));
    /* A corrupt checkpoint: named. */
    FILE *f = fopen(ckpt, "r+b");
    assert_non_null(f);
    fseek(f, -10, SEEK_END);
    fputc('x', f);
    fclose(f);
    assert_int_equal(weights_export(ckpt, out, NULL), CNT_ERR);
    if (!strstr(cnt_err_msg(), ckpt) || !strstr(cnt_err_msg(), "corrupt")) fail_msg("corrupt: %s", cnt_err_msg());
    free(p);
    free(b);
    free(p2);
    free(b2);
    net_free(nt);
}


static int group_setup(void **state) {
    (void)state;
    snprintf(root, sizeof root, "/tmp/cnt_st_XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    tu_remove_tree(root);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet20),
        cmocka_unit_test(test_resnet18),
        cmocka_unit_test(test_vgg11_bn),
        cmocka_unit_test(test_inception_v3),
        cmocka_unit_test(test_f16_bf16),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_header_json),
        cmocka_unit_test(test_classifier_mismatch),
        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_export_checkpoint),
    };
    return cmocka_run_group_tests_name("safetensors", tests, group_setup, group_teardown);
}
