/*
 * train/emulate.c - the step profile read for emulated compute (see
 * train/emulate.h): the fields it needs, checked against the run, and each
 * node's time rescaled to the profile's phases.
 */
#include "train/emulate.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/json.h"

#define KEY "train.emulate_compute"

/* Every message: "train.emulate_compute: FILE: what". */
static int refuse(const char *file, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(const char *file, const char *fmt, ...) {
    char what[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cnt_err_set(KEY ": %s: %s", file, what);
}

/* obj[key] of type t, or CNT_ERR naming the field (`where`: "" or "layers[3]."). */
static int field(const char *file, const char *where, const json_value *obj, const char *key, json_type t,
                 const json_value **out) {
    const json_value *v = json_get(obj, key);
    if (!v) return refuse(file, "%s%s: missing (is it a profile written by trainer --profile?)", where, key);
    if (v->type != t)
        return refuse(file, "%s%s: expected a %s, found a %s", where, key, json_type_name(t), json_type_name(v->type));
    *out = v;
    return CNT_OK;
}

/* A time in ms: a number >= 0. */
static int time_ms(const char *file, const char *where, const json_value *obj, const char *key, double *out) {
    const json_value *v = NULL;
    if (field(file, where, obj, key, JSON_TYPE_NUMBER, &v) != CNT_OK) return CNT_ERR;
    if (!(v->number >= 0) || !isfinite(v->number))
        return refuse(file, "%s%s: expected a time in ms >= 0, found %g", where, key, v->number);
    *out = v->number;
    return CNT_OK;
}

/* A whole number in [1, max] from a value. */
static int count_of(const char *file, const char *name, const json_value *v, double max, long *out) {
    if (v->type != JSON_TYPE_NUMBER || v->number != floor(v->number) || v->number < 1 || v->number > max)
        return refuse(file, "%s: expected a whole number from 1 to %.0f", name, max);
    *out = (long)v->number;
    return CNT_OK;
}

static int count(const char *file, const json_value *obj, const char *key, double max, long *out) {
    const json_value *v = NULL;
    if (field(file, "", obj, key, JSON_TYPE_NUMBER, &v) != CNT_OK) return CNT_ERR;
    return count_of(file, key, v, max, out);
}

/* The node of nt named name, or -1. */
static int node_named(const net *nt, const char *name) {
    for (int i = 0; i < nt->n_nodes; i++)
        if (strcmp(nt->nodes[i].name, name) == 0) return i;
    return -1;
}

/* Per-layer times scaled to add up to the phase's total; all 0: the total
 * spread evenly (tools/simulate_engine.c, sim_step). */
static void rescale(double *ms, int n, double total) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    for (int i = 0; i < n; i++) ms[i] = sum > 0 ? ms[i] * (total / sum) : total / n;
}

static int check_tree(emulation *em, const json_value *root, const char *file, const char *model, int batch,
                      const net *nt) {
    const json_value *v = NULL;
    if (root->type != JSON_TYPE_OBJECT)
        return refuse(file, "not a step profile (a JSON object written by trainer --profile); found a %s",
                      json_type_name(root->type));

    /* the fields, in the order of the file */
    const json_value *jmodel = NULL, *jinput = NULL, *jdev = NULL, *jprec = NULL, *layers = NULL;
    long pbatch = 0, classes = 0, params = 0, in[3] = {0, 0, 0};
    if (field(file, "", root, "model", JSON_TYPE_STRING, &jmodel) != CNT_OK ||
        count(file, root, "batch", 1e6, &pbatch) != CNT_OK ||
        field(file, "", root, "input", JSON_TYPE_ARRAY, &jinput) != CNT_OK)
        return CNT_ERR;
    if (jinput->n != 3) return refuse(file, "input: expected [C,H,W], found %zu numbers", jinput->n);
    for (int k = 0; k < 3; k++)
        if (count_of(file, "input", &jinput->items[k], 1e6, &in[k]) != CNT_OK) return CNT_ERR;
    if (count(file, root, "classes", 1e9, &classes) != CNT_OK || count(file, root, "params", 1e15, &params) != CNT_OK ||
        field(file, "", root, "device", JSON_TYPE_STRING, &jdev) != CNT_OK ||
        field(file, "", root, "precision", JSON_TYPE_STRING, &jprec) != CNT_OK ||
        time_ms(file, "", root, "forward_ms", &em->forward_total_ms) != CNT_OK ||
        time_ms(file, "", root, "backward_ms", &em->backward_total_ms) != CNT_OK ||
        time_ms(file, "", root, "update_ms", &em->update_ms) != CNT_OK ||
        field(file, "", root, "layers", JSON_TYPE_ARRAY, &layers) != CNT_OK)
        return CNT_ERR;
    snprintf(em->device, sizeof em->device, "%s", jdev->string);
    snprintf(em->precision, sizeof em->precision, "%s", jprec->string);

    /* the run the profile was taken of */
    if (strcmp(jmodel->string, model) != 0)
        return refuse(file, "the profile is of model %s, this run trains %s (model.name)", jmodel->string, model);
    if (pbatch != batch)
        return refuse(file, "the profile's batch is %ld per rank, this run's is %d (train.batch_size)", pbatch, batch);
    if (in[0] != nt->in_c || in[1] != nt->in_h || in[2] != nt->in_w)
        return refuse(file, "the profile's input is %ldx%ldx%ld, this run's data is %dx%dx%d", in[0], in[1], in[2],
                      nt->in_c, nt->in_h, nt->in_w);
    if (classes != nt->classes)
        return refuse(file, "the profile's data has %ld classes, this run's %d", classes, nt->classes);
    if ((size_t)params != nt->n_params)
        return refuse(file, "the profile's model has %ld parameters, this run's %zu (other model options?)", params,
                      nt->n_params);

    /* each layer a node of the net, each node once */
    int n = nt->n_nodes;
    em->n_nodes = n;
    em->forward_ms = cnt_malloc((size_t)n * sizeof *em->forward_ms);
    em->backward_ms = cnt_malloc((size_t)n * sizeof *em->backward_ms);
    int *seen = cnt_calloc((size_t)n, sizeof *seen);
    int rc = CNT_OK;
    char where[48];
    for (size_t k = 0; rc == CNT_OK && k < layers->n; k++) {
        const json_value *l = &layers->items[k];
        snprintf(where, sizeof where, "layers[%zu].", k);
        if (l->type != JSON_TYPE_OBJECT) {
            rc = refuse(file, "layers[%zu]: expected an object", k);
            break;
        }
        if (field(file, where, l, "name", JSON_TYPE_STRING, &v) != CNT_OK) {
            rc = CNT_ERR;
            break;
        }
        int i = node_named(nt, v->string);
        if (i < 0) {
            rc = refuse(file, "layers[%zu] '%s' is not a node of this run's %s (see ./trainer --summary)", k, v->string,
                        model);
        } else if (seen[i]) {
            rc = refuse(file, "layers[%zu]: '%s' is listed twice", k, v->string);
        } else {
            seen[i] = 1;
            rc = time_ms(file, where, l, "forward_ms", &em->forward_ms[i]);
            if (rc == CNT_OK) rc = time_ms(file, where, l, "backward_ms", &em->backward_ms[i]);
        }
    }
    for (int i = 0; rc == CNT_OK && i < n; i++)
        if (!seen[i]) rc = refuse(file, "node '%s' of this run's %s is not in the profile's layers", nt->nodes[i].name, model);
    free(seen);
    if (rc != CNT_OK) return rc;
    rescale(em->forward_ms, n, em->forward_total_ms);
    rescale(em->backward_ms, n, em->backward_total_ms);
    return CNT_OK;
}

int emulation_load(emulation *em, const char *path, const char *model, int batch, const net *nt) {
    memset(em, 0, sizeof *em);
    size_t len = 0;
    char *text = file_read_all(path, "step profile", (uint64_t)1 << 30, &len);
    if (!text) return cnt_err_prefix(KEY);
    json_value *root;
    int rc = json_parse(text, len, path, &root);
    free(text);
    if (rc != CNT_OK) return cnt_err_prefix(KEY);
    rc = check_tree(em, root, path, model, batch, nt);
    json_free(root);
    if (rc != CNT_OK) emulation_free(em);
    return rc;
}

void emulation_free(emulation *em) {
    free(em->forward_ms);
    free(em->backward_ms);
    memset(em, 0, sizeof *em);
}
