/*
 * data/synthetic.c - a synthetic data set: uniformly random 8-bit images with
 * uniformly random labels, generated in memory from the project's RNG.
 *
 * It needs no files, so it measures throughput and smoke-tests any input
 * shape and class count. The content depends only on (seed, stream): the
 * trainer uses one stream for the training set and another for the test set.
 * Pixels and labels are independent, so there is nothing to learn beyond the
 * label frequencies.
 */
#include "data/dataset.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/rng.h"

/* Larger requests are refused rather than attempted (same bound as IDX). */
#define SYNTHETIC_MAX_BYTES ((size_t)1 << 33)

int dataset_make_synthetic(dataset *ds, int c, int h, int w, int classes, int n, uint64_t seed,
                           uint64_t stream) {
    memset(ds, 0, sizeof *ds);
    if (c < 1 || h < 1 || w < 1 || classes < 2 || n < 1)
        return cnt_err_set("synthetic data set: bad request %d images of %dx%dx%d with %d classes (need every "
                           "size >= 1 and classes >= 2)",
                           n, c, h, w, classes);
    size_t image = (size_t)c * (size_t)h * (size_t)w;
    if (image > SYNTHETIC_MAX_BYTES / (size_t)n)
        return cnt_err_set("synthetic data set: %d images of %dx%dx%d need more than %zu bytes", n, c, h, w,
                           SYNTHETIC_MAX_BYTES);
    size_t bytes = image * (size_t)n;
    ds->pixels = malloc(bytes);
    ds->labels = malloc((size_t)n * sizeof *ds->labels);
    if (!ds->pixels || !ds->labels) {
        dataset_free(ds);
        return cnt_err_set("synthetic data set: cannot allocate %zu bytes for %d images of %dx%dx%d", bytes, n, c,
                           h, w);
    }
    rng r;
    rng_seed(&r, seed, stream);
    for (int i = 0; i < n; i++) ds->labels[i] = (int32_t)rng_below(&r, (uint32_t)classes);
    size_t k = 0;
    for (; k + 4 <= bytes; k += 4) {
        uint32_t v = rng_u32(&r);
        memcpy(ds->pixels + k, &v, 4);
    }
    if (k < bytes) {
        uint32_t v = rng_u32(&r);
        memcpy(ds->pixels + k, &v, bytes - k);
    }
    ds->n = n;
    ds->c = c;
    ds->h = h;
    ds->w = w;
    ds->classes = classes;
    return CNT_OK;
}
