/*
 * train/emulate.c - the step profile used for emulated compute (see
 * train/emulate.h): read by train/profile.c's reader, checked against the
 * run, and each node's time rescaled to the profile's phases.
 */
#include "train/emulate.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "train/profile.h"

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

/* The node of nt named name, or -1. */
static int node_named(const net *nt, const char *name) {
    for (int i = 0; i < nt->n_nodes; i++)
        if (strcmp(nt->nodes[i].name, name) == 0) return i;
    return -1;
}

/* Per-layer times scaled to add up to the phase's total; all 0: the total
 * spread evenly (train/sim.c, sim_step). */
static void rescale(double *ms, int n, double total) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    for (int i = 0; i < n; i++) ms[i] = sum > 0 ? ms[i] * (total / sum) : total / n;
}

/* The run the profile was taken of is this one: model, batch, input, classes, parameters. */
static int check_run(const profile *p, const char *file, const char *model, int batch, const net *nt) {
    if (strcmp(p->model, model) != 0)
        return refuse(file, "the profile is of model %s, this run trains %s (model.name)", p->model, model);
    if (p->batch != batch)
        return refuse(file, "the profile's batch is %d per rank, this run's is %d (train.batch_size)", p->batch, batch);
    if (p->c != nt->in_c || p->h != nt->in_h || p->w != nt->in_w)
        return refuse(file, "the profile's input is %dx%dx%d, this run's data is %dx%dx%d", p->c, p->h, p->w, nt->in_c,
                      nt->in_h, nt->in_w);
    if (p->classes != nt->classes)
        return refuse(file, "the profile's data has %d classes, this run's %d", p->classes, nt->classes);
    if (p->params != nt->n_params)
        return refuse(file, "the profile's model has %zu parameters, this run's %zu (other model options?)", p->params,
                      nt->n_params);
    return CNT_OK;
}

/* Each of the profile's layers a node of the net, each node once: their
 * times into em, in the net's node order. */
static int map_layers(emulation *em, const profile *p, const char *file, const char *model, const net *nt) {
    int n = nt->n_nodes, rc = CNT_OK;
    em->n_nodes = n;
    em->forward_ms = cnt_malloc((size_t)n * sizeof *em->forward_ms);
    em->backward_ms = cnt_malloc((size_t)n * sizeof *em->backward_ms);
    int *seen = cnt_calloc((size_t)n, sizeof *seen);
    for (int k = 0; rc == CNT_OK && k < p->n_layers; k++) {
        const profile_layer *l = &p->layers[k];
        int i = node_named(nt, l->name);
        if (i < 0) {
            rc = refuse(file, "layers[%d] '%s' is not a node of this run's %s (see ./trainer --summary)", k, l->name,
                        model);
        } else if (seen[i]) {
            rc = refuse(file, "layers[%d]: '%s' is listed twice", k, l->name);
        } else {
            seen[i] = 1;
            em->forward_ms[i] = l->forward_ms;
            em->backward_ms[i] = l->backward_ms;
        }
    }
    for (int i = 0; rc == CNT_OK && i < n; i++)
        if (!seen[i]) rc = refuse(file, "node '%s' of this run's %s is not in the profile's layers", nt->nodes[i].name, model);
    free(seen);
    return rc;
}

int emulation_load(emulation *em, const char *path, const char *model, int batch, const net *nt) {
    memset(em, 0, sizeof *em);
    profile p;
    if (profile_load(path, &p) != CNT_OK) return cnt_err_prefix(KEY);
    int rc = check_run(&p, path, model, batch, nt);
    if (rc == CNT_OK) rc = map_layers(em, &p, path, model, nt);
    if (rc == CNT_OK) {
        em->forward_total_ms = p.forward_ms;
        em->backward_total_ms = p.backward_ms;
        em->update_ms = p.update_ms;
        snprintf(em->device, sizeof em->device, "%s", p.device);
        snprintf(em->precision, sizeof em->precision, "%s", p.precision);
        rescale(em->forward_ms, em->n_nodes, em->forward_total_ms);
        rescale(em->backward_ms, em->n_nodes, em->backward_total_ms);
    }
    profile_free(&p);
    if (rc != CNT_OK) emulation_free(em);
    return rc;
}

void emulation_free(emulation *em) {
    free(em->forward_ms);
    free(em->backward_ms);
    memset(em, 0, sizeof *em);
}
