/*
 * train/safetensors.c - writing and reading safetensors weight files.
 *
 * The format and the contract are in safetensors.h. Writing builds the JSON
 * header in memory (tensor entries in torchvision's state_dict order; the data
 * of the 8-byte num_batches_tracked scalars first, so every tensor stays
 * aligned to its element size), pads it with spaces to a multiple of 8 as the
 * reference implementation does, and streams header and data to a temporary
 * file that is renamed into place. Reading parses the header with the
 * project's JSON parser (common/json.h), checks that it is exactly the
 * format's, checks the data layout (sizes, no overlap, no gap, within the
 * file), matches the net's tensors by name, and only then copies (and
 * converts) their data.
 */
#include "train/safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/half.h"
#include "common/json.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian and is copied as is: the host must be little-endian"
#endif

#define ST_PATH_MAX 4096
#define ST_MAX_DIMS 16
#define ST_CHUNK ((size_t)1 << 20)

/* ---------------------------------------------------------------- dtypes */

typedef struct st_dtype {
    const char *name;
    int bytes;
} st_dtype;

/* The reference implementation's byte-sized dtypes. */
static const st_dtype st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8},
};
#define ST_N_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static int dtype_index(const char *name) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return i;
    return -1;
}

/* ---------------------------------------------------------------- writing */

/* Writes s as a JSON string (names are ASCII in practice; anything below 0x20 is escaped). */
static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void json_entry(FILE *f, int *first, const char *name, const char *dtype, int ndim, const int *shape,
                       uint64_t begin, uint64_t end) {
    fputs(*first ? "" : ",", f);
    *first = 0;
    put_json_string(f, name);
    fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", dtype);
    for (int d = 0; d < ndim; d++) fprintf(f, "%s%d", d ? "," : "", shape[d]);
    fprintf(f, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin, (unsigned long long)end);
}

static int is_bn(const node *nd) { return strcmp(nd->ops->kind, "bn") == 0; }

/* The header text (unpadded). Caller frees. */
static char *build_header(const net *nt, const char *const *metadata, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    CHECK_ERRNO(f != NULL, "open_memstream");
    fputc('{', f);
    int first = 1;
    if (metadata && metadata[0]) {
        fputs("\"__metadata__\":{", f);
        for (int i = 0; metadata[i] && metadata[i + 1]; i += 2) {
            if (i) fputc(',', f);
            put_json_string(f, metadata[i]);
            fputc(':', f);
            put_json_string(f, metadata[i + 1]);
        }
        fputc('}', f);
        first = 0;
    }
    /* Data: the I64 scalars first (8-byte aligned), then the float tensors in entry order. */
    uint64_t n_bn = 0;
    for (int n = 0; n < nt->n_nodes; n++) n_bn += is_bn(&nt->nodes[n]);
    uint64_t i64_at = 0, f32_at = 8 * n_bn;
    for (int n = 0; n < nt->n_nodes; n++) {
        const node *nd = &nt->nodes[n];
        for (int k = 0; k < nd->n_params; k++) {
            const param_info *pi = &nt->param_info[nd->first_param + k];
            json_entry(f, &first, pi->name, "F32", pi->ndim, pi->shape, f32_at, f32_at + 4 * pi->count);
            f32_at += 4 * pi->count;
        }
        for (int k = 0; k < nd->n_buffers; k++) {
            const buffer_info *bi = &nt->buffer_info[nd->first_buffer + k];
            json_entry(f, &first, bi->name, "F32", bi->ndim, bi->shape, f32_at, f32_at + 4 * bi->count);
            f32_at += 4 * bi->count;
        }
        if (is_bn(nd)) {
            char name[NET_NAME_LEN + 32];
            snprintf(name, sizeof name, "%s.num_batches_tracked", nd->name);
            json_entry(f, &first, name, "I64", 0, NULL, i64_at, i64_at + 8);
            i64_at += 8;
        }
    }
    fputc('}', f);
    CHECK_ERRNO(fclose(f) == 0, "building the safetensors header");
    return text;
}

typedef struct st_writer {
    FILE *f;
    const char *path; /* for messages */
    int failed;       /* the first failure already set the message */
} st_writer;

static void put(st_writer *w, const void *data, size_t bytes) {
    if (w->failed || bytes == 0) return;
    if (fwrite(data, 1, bytes, w->f) != bytes) {
        cnt_err_set("cannot write safetensors file '%s': %s", w->path, strerror(errno));
        w->failed = 1;
    }
}

int safetensors_write(const char *path, const net *nt, const float *params, const float *buffers,
                      int64_t num_batches_tracked, const char *const *metadata) {
    /* dir/.name.tmp beside the final file, so the rename stays within one file system. */
    char dir[ST_PATH_MAX], tmp[ST_PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) return cnt_err_set("cannot write safetensors file '%s': the path names a directory", path);
    if (file_dir_of(path, dir, sizeof dir) != CNT_OK) return cnt_err_set("safetensors path too long: '%s'", path);
    if (snprintf(tmp, sizeof tmp, "%.*s.%s.tmp", (int)(base - path), path, base) >= (int)sizeof tmp)
        return cnt_err_set("safetensors path too long: '%s'", path);

    size_t len;
    char *header = build_header(nt, metadata, &len);
    size_t padded = (len + 7) / 8 * 8; /* 8 + padded is a multiple of 8: the data starts aligned */
    st_writer w = {.f = fopen(tmp, "wb"), .path = tmp, .failed = 0};
    if (!w.f) {
        free(header);
        return cnt_err_set("cannot create safetensors file '%s' (for '%s'): %s", tmp, path, strerror(errno));
    }
    uint64_t n = padded;
    put(&w, &n, sizeof n);
    put(&w, header, len);
    for (size_t i = len; i < padded; i++) put(&w, " ", 1);
    free(header);
    for (int k = 0; k < nt->n_nodes; k++) {
        if (!is_bn(&nt->nodes[k])) continue;
        int64_t v = num_batches_tracked;
        put(&w, &v, sizeof v);
    }
    for (int k = 0; k < nt->n_nodes; k++) {
        const node *nd = &nt->nodes[k];
        for (int j = 0; j < nd->n_params; j++) {
            const param_info *pi = &nt->param_info[nd->first_param + j];
            put(&w, params + pi->offset, pi->count * sizeof(float));
        }
        for (int j = 0; j < nd->n_buffers; j++) {
            const buffer_info *bi = &nt->buffer_info[nd->first_buffer + j];
            put(&w, buffers + bi->offset, bi->count * sizeof(float));
        }
    }
    return file_commit_atomic(w.f, w.failed, tmp, path, dir, "safetensors file");
}

/* ---------------------------------------------------------------- the header */

typedef struct st_entry {
    char *name;
    int dtype;               /* index in st_dtypes */
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;     /* data_offsets */
    int used;                /* matched to a tensor of the net */
} st_entry;

/* The header's tensor entries, in the file's order. */
typedef struct st_header {
    st_entry *entries;
    int n;
} st_header;

/* "safetensors file 'PATH' has a bad header: what". */
static int bad(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const char *path, const char *fmt, ...) {
    char what[NET_NAME_LEN + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cnt_err_set("safetensors file '%s' has a bad header: %s", path, what);
}

/* a (tensor's field `key`): an array of at most max non-negative integers,
 * exact to 2^63 - 1, into vals; *count receives how many. */
static int uint_array(const char *path, const char *tensor, const char *key, const json_t *a, uint64_t *vals,
                      int max, int *count) {
    if (!json_is_array(a)) return bad(path, "tensor '%.*s': %s: expected an array, found %s", NET_NAME_LEN, tensor,
                                      key, json_kind(a));
    if (json_array_size(a) > (size_t)max)
        return bad(path, "tensor '%.*s' has more than %d dimensions", NET_NAME_LEN, tensor, max);
    *count = (int)json_array_size(a);
    for (int i = 0; i < *count; i++) {
        const json_t *v = json_array_get(a, i);
        if (json_is_integer(v) && json_integer_value(v) >= 0) {
            vals[i] = (uint64_t)json_integer_value(v);
            continue;
        }
        char found[48];
        if (json_is_integer(v)) snprintf(found, sizeof found, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v)) snprintf(found, sizeof found, "%g", json_real_value(v));
        else snprintf(found, sizeof found, "%s", json_kind(v));
        return bad(path, "tensor '%.*s': %s[%d]: expected a non-negative integer, found %s", NET_NAME_LEN, tensor, key,
                   i, found);
    }
    return CNT_OK;
}

/* One tensor's entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}, those keys exactly. */
static int read_entry(const char *path, const json_t *v, st_entry *e) {
    if (!json_is_object(v))
        return bad(path, "tensor '%.*s': expected an object, found %s", NET_NAME_LEN, e->name, json_kind(v));
    const char *key;
    const json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return bad(path, "tensor '%.*s': unexpected key '%.32s'", NET_NAME_LEN, e->name, key);
    }
    const json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    const json_t *offsets = json_object_get(v, "data_offsets");
    if (!dtype || !shape || !offsets)
        return bad(path, "tensor '%.*s' lacks %s", NET_NAME_LEN, e->name,
                   !dtype ? "\"dtype\"" : !shape ? "\"shape\"" : "\"data_offsets\"");
    if (!json_is_string(dtype))
        return bad(path, "tensor '%.*s': dtype: expected a string, found %s", NET_NAME_LEN, e->name, json_kind(dtype));
    e->dtype = dtype_index(json_string_value(dtype));
    if (e->dtype < 0)
        return bad(path, "tensor '%.*s' has unknown dtype '%.16s'", NET_NAME_LEN, e->name, json_string_value(dtype));
    uint64_t off[2];
    int n = 0;
    if (json_array_size(offsets) != 2) /* 0 when not an array */
        return bad(path, "tensor '%.*s': data_offsets must hold 2 numbers", NET_NAME_LEN, e->name);
    if (uint_array(path, e->name, "shape", shape, e->shape, ST_MAX_DIMS, &e->ndim) != CNT_OK ||
        uint_array(path, e->name, "data_offsets", offsets, off, 2, &n) != CNT_OK)
        return CNT_ERR;
    e->begin = off[0];
    e->end = off[1];
    return CNT_OK;
}

/* "__metadata__": {str: str, ...}; the values are not used. */
static int check_metadata(const char *path, const json_t *v) {
    if (!json_is_object(v)) return bad(path, "__metadata__: expected an object, found %s", json_kind(v));
    const char *key;
    const json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        if (!json_is_string(x)) return bad(path, "__metadata__ values must be strings ('%.32s' is %s)", key, json_kind(x));
    }
    return CNT_OK;
}

/* The header text[0, len) into h's entries (free them with free_header,
 * also after CNT_ERR): an object of tensor entries and "__metadata__". */
static int read_header(const char *path, const char *text, size_t len, st_header *h) {
    json_t *root;
    if (json_parse(text, len, "JSON header", &root) != CNT_OK)
        return cnt_err_prefix("safetensors file '%s' has a bad header", path);
    int rc = CNT_OK;
    if (!json_is_object(root)) rc = bad(path, "expected a JSON object, found %s", json_kind(root));
    h->entries = cnt_calloc(json_is_object(root) && json_object_size(root) ? json_object_size(root) : 1,
                            sizeof *h->entries);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (rc != CNT_OK) break;
        if (strcmp(key, "__metadata__") == 0) {
            rc = check_metadata(path, v);
            continue;
        }
        st_entry *e = &h->entries[h->n++];
        e->name = cnt_strdup(key);
        rc = read_entry(path, v, e);
    }
    json_decref(root);
    return rc;
}

static void free_header(st_header *h) {
    for (int i = 0; i < h->n; i++) free(h->entries[i].name);
    free(h->entries);
    memset(h, 0, sizeof *h);
}

static int find_entry(const st_header *h, const char *name) {
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->entries[i].name, name) == 0) return i;
    return -1;
}

/* ---------------------------------------------------------------- reading */

static int cmp_begin(const void *a, const void *b) {
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    if (x->begin != y->begin) return (x->begin > y->begin) - (x->begin < y->begin);
    return (x->end > y->end) - (x->end < y->end);
}

static void fmt_shape(char *buf, size_t len, int ndim, const uint64_t *u, const int *s) {
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%llu", d ? ", " : "",
                               u ? (unsigned long long)u[d] : (unsigned long long)s[d]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* Appends name to a comma-separated list of fixed size, ending it with "..." when full. */
static void list_add(char *list, size_t len, const char *name) {
    size_t at = strlen(list);
    if (at >= 3 && strcmp(list + at - 3, "...") == 0) return;
    size_t need = strlen(name) + (at ? 2 : 0);
    if (at + need + 4 >= len) {
        snprintf(list + at, len - at, "%s...", at ? ", " : "");
        return;
    }
    snprintf(list + at, len - at, "%s%s", at ? ", " : "", name);
}

/* Sizes and layout of the data section (data_len bytes): every entry's byte
 * size matches dtype x shape; sorted by offset the entries are back to back
 * from 0, without overlap or gap, and end exactly at data_len. */
static int check_layout(const char *path, st_entry *entries, int n, uint64_t data_len) {
    for (int i = 0; i < n; i++) {
        const st_entry *e = &entries[i];
        uint64_t numel = 1;
        int overflow = 0;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] && numel > UINT64_MAX / 8 / e->shape[d]) overflow = 1;
            else numel *= e->shape[d];
        }
        uint64_t bytes = numel * (uint64_t)st_dtypes[e->dtype].bytes;
        if (e->end < e->begin)
            return cnt_err_set("safetensors file '%s': tensor '%s' has data_offsets [%llu, %llu] that are out of "
                               "range (end before begin)",
                               path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
        if (overflow || bytes != e->end - e->begin) {
            char sh[160];
            fmt_shape(sh, sizeof sh, e->ndim, e->shape, NULL);
            char need[32];
            if (overflow) snprintf(need, sizeof need, "too many");
            else snprintf(need, sizeof need, "%llu", (unsigned long long)bytes);
            return cnt_err_set("safetensors file '%s' has a bad header: tensor '%s' (%s %s) needs %s bytes but its "
                               "data_offsets [%llu, %llu] hold %llu",
                               path, e->name, st_dtypes[e->dtype].name, sh, need,
                               (unsigned long long)e->begin, (unsigned long long)e->end,
                               (unsigned long long)(e->end - e->begin));
        }
    }
    st_entry **order = cnt_malloc((size_t)(n ? n : 1) * sizeof *order);
    for (int i = 0; i < n; i++) order[i] = &entries[i];
    qsort(order, (size_t)n, sizeof *order, cmp_begin);
    uint64_t at = 0;
    int rc = CNT_OK;
    for (int i = 0; i < n && rc == CNT_OK; i++) {
        const st_entry *e = order[i];
        if (e->begin < at)
            rc = cnt_err_set("safetensors file '%s': data_offsets overlap: tensor '%s' [%llu, %llu] and tensor '%s' "
                             "[%llu, %llu]",
                             path, order[i - 1]->name, (unsigned long long)order[i - 1]->begin,
                             (unsigned long long)order[i - 1]->end, e->name, (unsigned long long)e->begin,
                             (unsigned long long)e->end);
        else if (e->begin > at)
            rc = cnt_err_set("safetensors file '%s': tensor '%s' has data_offsets [%llu, %llu] out of range: the "
                             "tensors before it end at byte %llu and the format leaves no gaps (data section: %llu "
                             "bytes)",
                             path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                             (unsigned long long)at, (unsigned long long)data_len);
        else if (e->end > data_len)
            rc = cnt_err_set("safetensors file '%s' is truncated: tensor '%s' needs data bytes [%llu, %llu), the file "
                             "holds %llu bytes of data",
                             path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                             (unsigned long long)data_len);
        at = e->end;
    }
    if (rc == CNT_OK && at != data_len)
        rc = cnt_err_set("safetensors file '%s': its tensors' data_offsets end at byte %llu but the data section has "
                         "%llu bytes (out of range offsets or trailing bytes)",
                         path, (unsigned long long)at, (unsigned long long)data_len);
    free(order);
    return rc;
}

/* Reads entry e (F32, F16 or BF16) at data offset base + e->begin into dst as floats. */
static int read_tensor(FILE *f, const char *path, uint64_t base, const st_entry *e, float *dst) {
    if (fseeko(f, (off_t)(base + e->begin), SEEK_SET) != 0)
        return cnt_err_set("cannot seek in safetensors file '%s': %s", path, strerror(errno));
    const char *dt = st_dtypes[e->dtype].name;
    uint64_t bytes = e->end - e->begin;
    if (strcmp(dt, "F32") == 0) {
        if (bytes && fread(dst, 1, (size_t)bytes, f) != bytes) goto fail;
        return CNT_OK;
    }
    int bf16 = strcmp(dt, "BF16") == 0;
    uint16_t *buf = cnt_malloc(ST_CHUNK);
    uint64_t n = bytes / 2, done = 0;
    while (done < n) {
        size_t m = n - done < ST_CHUNK / 2 ? (size_t)(n - done) : ST_CHUNK / 2;
        if (fread(buf, 2, m, f) != m) {
            free(buf);
            goto fail;
        }
        for (size_t i = 0; i < m; i++) dst[done + i] = bf16 ? bf16_to_float(buf[i]) : fp16_to_float(buf[i]);
        done += m;
    }
    free(buf);
    return CNT_OK;
fail:
    if (ferror(f)) return cnt_err_set("cannot read safetensors file '%s' (tensor '%s'): %s", path, e->name, strerror(errno));
    return cnt_err_set("safetensors file '%s' is truncated inside tensor '%s'", path, e->name);
}

/* One of the net's tensors to load. */
typedef struct st_target {
    const char *name;
    int ndim;
    const int *shape;
    float *dst;
    int node;
    int entry;  /* index in the parser's entries */
    int keep;   /* classifier with another class count: leave dst alone */
} st_target;

static int shape_equal(const st_entry *e, const st_target *t, int from) {
    if (e->ndim != t->ndim) return 0;
    for (int d = from; d < t->ndim; d++)
        if (e->shape[d] != (uint64_t)t->shape[d]) return 0;
    return 1;
}

/* The header's length field and text (NUL-terminated, *text: caller frees),
 * checked against the file's size. */
static int read_header_text(FILE *f, const char *path, uint64_t *size, uint64_t *hlen, char **text) {
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return cnt_err_set("cannot stat safetensors file '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return cnt_err_set("safetensors file '%s' is a directory", path);
    *size = (uint64_t)st.st_size;
    if (*size < 8 || fread(hlen, 1, 8, f) != 8)
        return cnt_err_set("safetensors file '%s' is truncated: %llu bytes, too short for the header length", path,
                           (unsigned long long)*size);
    if (*hlen > SAFETENSORS_MAX_HEADER)
        return cnt_err_set("safetensors file '%s' has a bad header: its length field says %llu bytes (at most %llu "
                           "allowed; is this a safetensors file?)",
                           path, (unsigned long long)*hlen, (unsigned long long)SAFETENSORS_MAX_HEADER);
    if (*hlen > *size - 8)
        return cnt_err_set("safetensors file '%s' is truncated: the header needs %llu bytes, the file has %llu after "
                           "the length field",
                           path, (unsigned long long)*hlen, (unsigned long long)(*size - 8));
    *text = cnt_malloc((size_t)*hlen + 1);
    if (*hlen && fread(*text, 1, (size_t)*hlen, f) != *hlen) {
        free(*text);
        return cnt_err_set("cannot read the header of safetensors file '%s': %s", path, strerror(errno));
    }
    (*text)[*hlen] = '\0';
    return CNT_OK;
}

/* Every tensor of nt in tg[n_tg], matched with its entry in h: present, of a
 * dtype we convert, of the net's shape, or (fine-tuning) the classifier
 * for another class count, whose tensors are then kept. */
static int match_tensors(const char *path, const net *nt, float *params, float *buffers, const st_header *h,
                         st_target *tg, int n_tg) {
    for (int i = 0; i < nt->n_param_tensors; i++) {
        const param_info *pi = &nt->param_info[i];
        tg[i] = (st_target){pi->name, pi->ndim, pi->shape, params + pi->offset, pi->node, -1, 0};
    }
    for (int i = 0; i < nt->n_buffer_tensors; i++) {
        const buffer_info *bi = &nt->buffer_info[i];
        tg[nt->n_param_tensors + i] = (st_target){bi->name, bi->ndim, bi->shape, buffers + bi->offset, bi->node, -1, 0};
    }
    int missing = 0, first_missing = -1;
    for (int i = 0; i < n_tg; i++) {
        tg[i].entry = find_entry(h, tg[i].name);
        if (tg[i].entry < 0 && missing++ == 0) first_missing = i;
    }
    if (missing)
        return cnt_err_set("safetensors file '%s' has no tensor '%s', which this model needs (%d of its %d tensors are "
                           "missing; the file has %d)",
                           path, tg[first_missing].name, missing, n_tg, h->n);
    for (int i = 0; i < n_tg; i++) {
        st_target *t = &tg[i];
        const st_entry *e = &h->entries[t->entry];
        const char *dt = st_dtypes[e->dtype].name;
        if (strcmp(dt, "F32") != 0 && strcmp(dt, "F16") != 0 && strcmp(dt, "BF16") != 0)
            return cnt_err_set("safetensors file '%s': tensor '%s' has dtype %s; only F32, F16 and BF16 can be loaded",
                               path, t->name, dt);
        if (shape_equal(e, t, 0)) continue;
        /* Fine-tuning: the classifier for another class count keeps the net's values. */
        int classifier = t->node == nt->output || (nt->aux_output >= 0 && t->node == nt->aux_output);
        if (classifier && shape_equal(e, t, 1)) {
            for (int j = 0; j < n_tg; j++)
                if (tg[j].node == t->node) tg[j].keep = 1;
            continue;
        }
        char fs[160], ns[160];
        fmt_shape(fs, sizeof fs, e->ndim, e->shape, NULL);
        fmt_shape(ns, sizeof ns, t->ndim, NULL, t->shape);
        return cnt_err_set("safetensors file '%s': tensor '%s' has shape %s, this model needs %s", path, t->name, fs,
                           ns);
    }
    return CNT_OK;
}

/* Reads the matched tensors (data from byte base of the file) into the
 * caller's arrays and says in *r what was loaded, kept and ignored. */
static int copy_tensors(FILE *f, const char *path, uint64_t base, st_header *h, const st_target *tg, int n_tg,
                        safetensors_report *r) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < n_tg; i++) {
        const st_target *t = &tg[i];
        st_entry *e = &h->entries[t->entry];
        e->used = 1;
        if (t->keep) {
            char fs[96], ns[96], item[NET_NAME_LEN + 256];
            fmt_shape(fs, sizeof fs, e->ndim, e->shape, NULL);
            fmt_shape(ns, sizeof ns, t->ndim, NULL, t->shape);
            snprintf(item, sizeof item, "%s %s (here %s)", t->name, fs, ns);
            list_add(r->kept, sizeof r->kept, item);
            r->n_kept++;
            continue;
        }
        if (read_tensor(f, path, base, e, t->dst) != CNT_OK) return CNT_ERR;
        r->n_loaded++;
    }
    for (int i = 0; i < h->n; i++) {
        if (h->entries[i].used) continue;
        r->n_ignored++;
        const char *nm = h->entries[i].name, *suffix = ".num_batches_tracked";
        size_t ln = strlen(nm), ls = strlen(suffix);
        if (ln >= ls && strcmp(nm + ln - ls, suffix) == 0) r->n_ignored_nbt++;
        else list_add(r->ignored, sizeof r->ignored, nm);
    }
    return CNT_OK;
}

/* Everything after the file is open: see safetensors_load. */
static int load_open(FILE *f, const char *path, const net *nt, float *params, float *buffers,
                     safetensors_report *rep) {
    uint64_t size = 0, hlen = 0;
    char *text = NULL;
    if (read_header_text(f, path, &size, &hlen, &text) != CNT_OK) return CNT_ERR;
    st_header h = {0};
    int rc = read_header(path, text, (size_t)hlen, &h);
    free(text);
    if (rc == CNT_OK) rc = check_layout(path, h.entries, h.n, size - 8 - hlen);
    int n_tg = nt->n_param_tensors + nt->n_buffer_tensors;
    st_target *tg = cnt_calloc((size_t)(n_tg ? n_tg : 1), sizeof *tg);
    if (rc == CNT_OK) rc = match_tensors(path, nt, params, buffers, &h, tg, n_tg);
    /* valid: now the caller's arrays may be written */
    safetensors_report r;
    if (rc == CNT_OK) rc = copy_tensors(f, path, 8 + hlen, &h, tg, n_tg, &r);
    if (rc == CNT_OK && rep) *rep = r;
    free(tg);
    free_header(&h);
    return rc;
}

int safetensors_metadata(const char *path, const char *key, char *out, size_t len, int *found) {
    *found = 0;
    FILE *f = file_open_regular(path, "safetensors file", NULL);
    if (!f) return CNT_ERR;
    uint64_t size = 0, hlen = 0;
    char *text = NULL;
    int rc = read_header_text(f, path, &size, &hlen, &text);
    fclose(f);
    json_t *root = NULL;
    if (rc == CNT_OK && json_parse(text, (size_t)hlen, "JSON header", &root) != CNT_OK)
        rc = cnt_err_prefix("safetensors file '%s' has a bad header", path);
    free(text);
    const json_t *meta = rc == CNT_OK && json_is_object(root) ? json_object_get(root, "__metadata__") : NULL;
    const json_t *v = meta && json_is_object(meta) ? json_object_get(meta, key) : NULL;
    if (v && json_is_string(v)) {
        snprintf(out, len, "%s", json_string_value(v));
        *found = 1;
    }
    json_decref(root);
    return rc;
}

int safetensors_load(const char *path, const net *nt, float *params, float *buffers, safetensors_report *rep) {
    FILE *f = file_open_regular(path, "safetensors file", NULL);
    if (!f) return CNT_ERR;
    int rc = load_open(f, path, nt, params, buffers, rep);
    fclose(f);
    return rc;
}
