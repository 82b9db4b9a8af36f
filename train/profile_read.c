/*
 * train/profile_read.c - a step profile read back and checked, for its two
 * readers (tools/simulate and train.emulate_compute; see train/profile.h).
 * Apart from the profiler (train/profile.c), so the simulator links the
 * JSON reader without the network, the backends and their libraries.
 */
#include "train/profile.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/json.h"
#include "dist/reducer.h"

/* Every reading error: "FILE: what". */
static int refuse(const char *file, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(const char *file, const char *fmt, ...) {
    char what[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cnt_err_set("%s: %s", file, what);
}

/* What a field must be. */
typedef enum want { WANT_NUMBER, WANT_STRING, WANT_ARRAY, WANT_OBJECT } want;

static const char *const want_name[] = {"a number", "a string", "an array", "an object"};

static int is(const json_t *v, want w) {
    switch (w) {
    case WANT_NUMBER: return json_is_number(v);
    case WANT_STRING: return json_is_string(v);
    case WANT_ARRAY: return json_is_array(v);
    default: return json_is_object(v);
    }
}

/* obj[key] as w wants it, or CNT_ERR naming the field (where: "" or "layers[3]."). */
static int field(const char *file, const char *where, const json_t *obj, const char *key, want w, const json_t **out) {
    const json_t *v = json_object_get(obj, key);
    if (!v) return refuse(file, "%s%s: missing (is it a profile written by trainer --profile?)", where, key);
    if (!is(v, w)) return refuse(file, "%s%s: expected %s, found %s", where, key, want_name[w], json_kind(v));
    *out = v;
    return CNT_OK;
}

/* A number >= 0: a time in ms, a size in bytes. */
static int number(const char *file, const char *where, const json_t *obj, const char *key, double *out) {
    const json_t *v = NULL;
    if (field(file, where, obj, key, WANT_NUMBER, &v) != CNT_OK) return CNT_ERR;
    double d = json_number_value(v);
    if (!(d >= 0) || !isfinite(d)) return refuse(file, "%s%s: expected a number >= 0, found %g", where, key, d);
    *out = d;
    return CNT_OK;
}

/* v (named name) a whole number in [min, max]; max <= 1e15, exact in a
 * double, so 600.0 is 600 as well. */
static int whole(const char *file, const char *name, const json_t *v, double min, double max, size_t *out) {
    if (!json_is_number(v)) return refuse(file, "%s: expected a number, found %s", name, json_kind(v));
    double d = json_number_value(v);
    if (d != floor(d) || d < min || d > max)
        return refuse(file, "%s: expected a whole number from %.0f to %.0f, found %g", name, min, max, d);
    *out = (size_t)d;
    return CNT_OK;
}

static int count(const char *file, const char *where, const json_t *obj, const char *key, double min, double max,
                 size_t *out) {
    const json_t *v = NULL;
    char name[96];
    snprintf(name, sizeof name, "%s%s", where, key);
    if (field(file, where, obj, key, WANT_NUMBER, &v) != CNT_OK) return CNT_ERR;
    return whole(file, name, v, min, max, out);
}

/* A string that fits buf. */
static int text(const char *file, const char *where, const json_t *obj, const char *key, char *buf, size_t size) {
    const json_t *v = NULL;
    if (field(file, where, obj, key, WANT_STRING, &v) != CNT_OK) return CNT_ERR;
    if (json_string_length(v) >= size) return refuse(file, "%s%s: longer than %zu bytes", where, key, size - 1);
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return CNT_OK;
}

/* The run the profile was taken of, its phases and its bucket sizes. */
static int read_run(const char *file, const json_t *root, profile *p) {
    const json_t *in = NULL;
    size_t per_rank, dims[3], classes, grad_bytes;
    if (text(file, "", root, "model", p->model, sizeof p->model) != CNT_OK ||
        count(file, "", root, "batch", 1, 1e6, &per_rank) != CNT_OK ||
        field(file, "", root, "input", WANT_ARRAY, &in) != CNT_OK)
        return CNT_ERR;
    if (json_array_size(in) != 3) return refuse(file, "input: expected [C,H,W], found %zu numbers", json_array_size(in));
    for (int k = 0; k < 3; k++)
        if (whole(file, "input", json_array_get(in, k), 1, 1e6, &dims[k]) != CNT_OK) return CNT_ERR;
    if (count(file, "", root, "classes", 1, 1e9, &classes) != CNT_OK ||
        count(file, "", root, "params", 1, 1e15, &p->params) != CNT_OK ||
        count(file, "", root, "grad_bytes", 0, 4e15, &grad_bytes) != CNT_OK ||
        text(file, "", root, "device", p->device, sizeof p->device) != CNT_OK ||
        text(file, "", root, "precision", p->precision, sizeof p->precision) != CNT_OK ||
        number(file, "", root, "step_ms", &p->step_ms) != CNT_OK ||
        number(file, "", root, "forward_ms", &p->forward_ms) != CNT_OK ||
        number(file, "", root, "backward_ms", &p->backward_ms) != CNT_OK ||
        number(file, "", root, "update_ms", &p->update_ms) != CNT_OK ||
        number(file, "", root, "data_wait_ms", &p->data_wait_ms) != CNT_OK ||
        count(file, "", root, "first_bucket_values", 1, 1e15, &p->first_bucket_values) != CNT_OK ||
        count(file, "", root, "bucket_values", 1, 1e15, &p->bucket_values) != CNT_OK)
        return CNT_ERR;
    if (grad_bytes != 4 * p->params)
        return refuse(file, "grad_bytes: %zu is not 4 x params (%zu)", grad_bytes, p->params);
    p->batch = (int)per_rank;
    p->c = (int)dims[0];
    p->h = (int)dims[1];
    p->w = (int)dims[2];
    p->classes = (int)classes;
    return CNT_OK;
}

/* "tensors", when present: [offset, count, rows] each, tiling [0, params)
 * in order. */
static int read_tensors(const char *file, const json_t *root, profile *p) {
    const json_t *a = json_object_get(root, "tensors");
    if (!a) return CNT_OK;
    if (!json_is_array(a)) return refuse(file, "tensors: expected an array, found %s", json_kind(a));
    size_t n = json_array_size(a);
    if (n < 1 || n > 1000000) return refuse(file, "tensors: expected 1 to 1000000 tensors, found %zu", n);
    p->tensors = cnt_calloc(n, sizeof *p->tensors);
    p->n_tensors = (int)n;
    size_t next = 0;
    char where[48];
    for (int i = 0; i < p->n_tensors; i++) {
        const json_t *e = json_array_get(a, i);
        snprintf(where, sizeof where, "tensors[%d]", i);
        if (!json_is_array(e) || json_array_size(e) != 3)
            return refuse(file, "%s: expected [offset, count, rows], found %s", where, json_kind(e));
        size_t v[3];
        for (int k = 0; k < 3; k++)
            if (whole(file, where, json_array_get(e, k), k ? 1 : 0, k == 2 ? 2147483647.0 : 1e15, &v[k]) != CNT_OK)
                return CNT_ERR;
        if (v[0] != next || v[1] > p->params - next || v[2] > v[1])
            return refuse(file, "%s: [%zu, %zu, %zu] does not go on from %zu within params (%zu) with at most "
                          "count rows", where, v[0], v[1], v[2], next, p->params);
        p->tensors[i] = (powersgd_tensor){.offset = v[0], .count = v[1], .rows = (int)v[2]};
        next += v[1];
    }
    if (next != p->params) return refuse(file, "tensors: they end at %zu, not at params (%zu)", next, p->params);
    return CNT_OK;
}

/* The layers in backward order: times and gradient ranges, which together
 * end at params. */
static int read_layers(const char *file, const json_t *layers, profile *p) {
    size_t n = json_array_size(layers);
    if (n < 1 || n > 1000000) return refuse(file, "layers: expected 1 to 1000000 layers, found %zu", n);
    p->n_layers = (int)n;
    p->layers = cnt_calloc(n, sizeof *p->layers);
    size_t covered = 0, gbytes;
    char where[48];
    for (int i = 0; i < p->n_layers; i++) {
        const json_t *l = json_array_get(layers, i);
        profile_layer *pl = &p->layers[i];
        snprintf(where, sizeof where, "layers[%d].", i);
        if (!json_is_object(l)) return refuse(file, "layers[%d]: expected an object, found %s", i, json_kind(l));
        const json_t *name = NULL;
        if (field(file, where, l, "name", WANT_STRING, &name) != CNT_OK) return CNT_ERR;
        pl->name = cnt_strdup(json_string_value(name));
        if (number(file, where, l, "forward_ms", &pl->forward_ms) != CNT_OK ||
            number(file, where, l, "backward_ms", &pl->backward_ms) != CNT_OK ||
            count(file, where, l, "grad_begin", 0, 1e15, &pl->grad_begin) != CNT_OK ||
            count(file, where, l, "grad_end", 0, 1e15, &pl->grad_end) != CNT_OK ||
            count(file, where, l, "grad_bytes", 0, 4e15, &gbytes) != CNT_OK)
            return CNT_ERR;
        if (pl->grad_end < pl->grad_begin || pl->grad_end > p->params)
            return refuse(file, "%sgrad_end: %zu is below grad_begin (%zu) or above params (%zu)", where, pl->grad_end,
                          pl->grad_begin, p->params);
        if (gbytes != 4 * (pl->grad_end - pl->grad_begin))
            return refuse(file, "%sgrad_bytes: %zu is not 4 x (grad_end - grad_begin)", where, gbytes);
        if (pl->grad_end > covered) covered = pl->grad_end;
    }
    if (covered != p->params)
        return refuse(file, "layers: the gradient ranges end at %zu, not at params (%zu)", covered, p->params);
    return CNT_OK;
}

/* Layer i's `completes`: exactly the buckets b with done[b] == i, in order. */
static int check_completes(const char *file, const json_t *layer, int i, const int *done, int nb) {
    const json_t *cv = NULL;
    char where[48];
    snprintf(where, sizeof where, "layers[%d].", i);
    if (field(file, where, layer, "completes", WANT_ARRAY, &cv) != CNT_OK) return CNT_ERR;
    size_t k = 0;
    int same = 1;
    for (int b = 0; b < nb; b++) {
        if (done[b] != i) continue;
        const json_t *item = json_array_get(cv, k); /* NULL beyond the end */
        if (!item || !json_is_number(item) || json_number_value(item) != b) same = 0;
        k++;
    }
    if (!same || k != json_array_size(cv))
        return refuse(file, "layers[%d].completes: does not match the buckets its gradient range completes", i);
    return CNT_OK;
}

/* `buckets` is the reducer's cut of params, and each layer's `completes`
 * the buckets the reducer's rule completes after it. */
static int check_buckets(const char *file, const json_t *root, const json_t *layers, const profile *p) {
    const json_t *buckets = NULL;
    if (field(file, "", root, "buckets", WANT_ARRAY, &buckets) != CNT_OK) return CNT_ERR;
    /* the count first, so a tiny bucket_values cannot make the cut below long */
    size_t nb_cut = p->params <= p->first_bucket_values
                        ? 1 : 1 + (p->params - p->first_bucket_values + p->bucket_values - 1) / p->bucket_values;
    if (json_array_size(buckets) != nb_cut)
        return refuse(file, "buckets: %zu buckets, but first_bucket_values and bucket_values cut params into %zu",
                      json_array_size(buckets), nb_cut);
    int nb = (int)nb_cut, rc = CNT_OK;
    size_t *ends = cnt_malloc(nb_cut * sizeof *ends), *slice_end = cnt_malloc((size_t)p->n_layers * sizeof *slice_end);
    int *done = cnt_malloc(nb_cut * sizeof *done);
    reducer_bucket_layout(p->params, p->first_bucket_values, p->bucket_values, ends, nb);
    for (int i = 0; i < p->n_layers; i++) slice_end[i] = p->layers[i].grad_end;
    reducer_bucket_ready_after(ends, nb, slice_end, p->n_layers, done);
    char where[48];
    for (int b = 0; rc == CNT_OK && b < nb; b++) {
        size_t begin, end, cut_begin = b ? ends[b - 1] : 0;
        const json_t *bk = json_array_get(buckets, b);
        snprintf(where, sizeof where, "buckets[%d].", b);
        if (!json_is_object(bk))
            rc = refuse(file, "buckets[%d]: expected an object, found %s", b, json_kind(bk));
        else if (count(file, where, bk, "begin", 0, 1e15, &begin) != CNT_OK ||
                 count(file, where, bk, "end", 0, 1e15, &end) != CNT_OK)
            rc = CNT_ERR;
        else if (begin != cut_begin || end != ends[b])
            rc = refuse(file, "buckets[%d]: [%zu, %zu) is not the reducer's cut [%zu, %zu)", b, begin, end, cut_begin,
                        ends[b]);
    }
    for (int i = 0; rc == CNT_OK && i < p->n_layers; i++) rc = check_completes(file, json_array_get(layers, i), i, done, nb);
    free(ends);
    free(slice_end);
    free(done);
    return rc;
}

static int read_curve(const char *file, const json_t *curves, const char *key, profile_curve *c) {
    const json_t *a = NULL;
    char at[64], where[72];
    if (field(file, "allreduce.curves.", curves, key, WANT_ARRAY, &a) != CNT_OK) return CNT_ERR;
    size_t n = json_array_size(a);
    if (n < 1) return refuse(file, "allreduce.curves.%s: empty", key);
    if (n > 1000000) return refuse(file, "allreduce.curves.%s: more than 1000000 points", key);
    c->n = (int)n;
    c->bytes = cnt_malloc(n * sizeof *c->bytes);
    c->us = cnt_malloc(n * sizeof *c->us);
    for (int i = 0; i < c->n; i++) {
        snprintf(at, sizeof at, "allreduce.curves.%s[%d]", key, i);
        snprintf(where, sizeof where, "%s.", at);
        const json_t *pt = json_array_get(a, i);
        if (!json_is_object(pt)) return refuse(file, "%s: expected an object, found %s", at, json_kind(pt));
        if (number(file, where, pt, "bytes", &c->bytes[i]) != CNT_OK || number(file, where, pt, "us", &c->us[i]) != CNT_OK)
            return CNT_ERR;
        if (c->bytes[i] <= 0 || c->us[i] <= 0) return refuse(file, "%s: bytes and us must be above 0", at);
        if (i > 0 && c->bytes[i] <= c->bytes[i - 1]) return refuse(file, "%s.bytes: not above the previous point's", at);
    }
    return CNT_OK;
}

/* The optional allreduce curves of tools/profile.sh. */
static int read_allreduce(const char *file, const json_t *root, profile *p) {
    const json_t *ar = json_object_get(root, "allreduce"), *curves = NULL;
    size_t world;
    if (!ar) return CNT_OK;
    if (!json_is_object(ar)) return refuse(file, "allreduce: expected an object, found %s", json_kind(ar));
    if (count(file, "allreduce.", ar, "world", 2, 1e6, &world) != CNT_OK) return CNT_ERR;
    p->curve_world = (int)world;
    if (field(file, "allreduce.", ar, "curves", WANT_OBJECT, &curves) != CNT_OK ||
        read_curve(file, curves, "mpi", &p->curve_mpi) != CNT_OK || read_curve(file, curves, "ring", &p->curve_ring) != CNT_OK)
        return CNT_ERR;
    return CNT_OK;
}

static int read_tree(const char *file, const json_t *root, profile *p) {
    const json_t *layers = NULL;
    if (!json_is_object(root))
        return refuse(file, "not a step profile (a JSON object written by trainer --profile); found %s",
                      json_kind(root));
    if (read_run(file, root, p) != CNT_OK || field(file, "", root, "layers", WANT_ARRAY, &layers) != CNT_OK ||
        read_layers(file, layers, p) != CNT_OK || check_buckets(file, root, layers, p) != CNT_OK ||
        read_tensors(file, root, p) != CNT_OK || read_allreduce(file, root, p) != CNT_OK)
        return CNT_ERR;
    return CNT_OK;
}

int profile_parse(const char *text, size_t len, const char *name, profile *p) {
    memset(p, 0, sizeof *p);
    json_t *root;
    if (json_parse(text, len, name, &root) != CNT_OK) return CNT_ERR;
    int rc = read_tree(name, root, p);
    json_decref(root);
    if (rc != CNT_OK) profile_free(p);
    return rc;
}

int profile_load(const char *path, profile *p) {
    memset(p, 0, sizeof *p);
    size_t len;
    char *text = file_read_all(path, "profile", (uint64_t)1 << 30, &len);
    if (!text) return CNT_ERR;
    int rc = profile_parse(text, len, path, p);
    free(text);
    return rc;
}

void profile_free(profile *p) {
    for (int i = 0; p->layers && i < p->n_layers; i++) free(p->layers[i].name);
    free(p->layers);
    free(p->tensors);
    free(p->curve_mpi.bytes);
    free(p->curve_mpi.us);
    free(p->curve_ring.bytes);
    free(p->curve_ring.us);
    memset(p, 0, sizeof *p);
}
