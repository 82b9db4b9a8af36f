/*
 * data/dataset.c - helpers on an in-memory dataset, whatever reader made it:
 * truncation, per-channel statistics for normalisation, release.
 */
#include "data/dataset.h"
#include "data/shards.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* In memory the first samples are kept (the files' order is already mixed);
 * a file-backed listing is sorted by class, so samples spread evenly over it
 * are kept instead, which keeps every class. */
void dataset_truncate(dataset *ds, int limit) {
    if (limit <= 0 || limit >= ds->n) return;
    if (ds->name_off) {
        for (int j = 0; j < limit; j++) {
            int i = (int)((long)j * ds->n / limit);
            ds->labels[j] = ds->labels[i];
            ds->name_off[j] = ds->name_off[i];
            if (ds->recs) ds->recs[j] = ds->recs[i];
        }
    }
    ds->n = limit;
}

/* A 256-bin histogram per channel makes the sums exact and the pass one
 * integer increment per pixel; mean and variance then come from 256 terms in
 * double precision. An empty dataset gives mean 0 and std 1 so callers can
 * divide by it; a constant channel gives std 0. */
void dataset_channel_stats(const dataset *ds, float *mean, float *std) {
    size_t plane = (size_t)ds->h * (size_t)ds->w;
    for (int ch = 0; ch < ds->c; ch++) {
        uint64_t hist[256];
        memset(hist, 0, sizeof hist);
        for (int i = 0; i < ds->n; i++) {
            const uint8_t *p = ds->pixels + ((size_t)i * (size_t)ds->c + (size_t)ch) * plane;
            for (size_t k = 0; k < plane; k++) hist[p[k]]++;
        }
        double count = (double)ds->n * (double)plane;
        if (count == 0.0) {
            mean[ch] = 0.0f;
            std[ch] = 1.0f;
            continue;
        }
        double sum = 0.0;
        for (int v = 0; v < 256; v++) sum += (double)hist[v] * (v / 255.0);
        double m = sum / count;
        double var = 0.0;
        for (int v = 0; v < 256; v++) {
            double d = v / 255.0 - m;
            var += (double)hist[v] * d * d;
        }
        mean[ch] = (float)m;
        std[ch] = (float)sqrt(var / count);
    }
}

void dataset_free(dataset *ds) {
    free(ds->pixels);
    free(ds->labels);
    free(ds->root);
    free(ds->names);
    free(ds->name_off);
    free(ds->class_off);
    free(ds->recs);
    shards_close(ds->shards);
    memset(ds, 0, sizeof *ds);
}
