/*
 * train/stager.c - double-buffered batch uploads on the copy stream (see
 * train/stager.h).
 */
#include "train/stager.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"

#define SLOTS 2

struct stager {
    const backend *be;
    int max_batch;
    size_t sample_floats;
    size_t bytes;            /* per slot: labels (max_batch int32), then images at xoff */
    size_t xoff;
    void *host[SLOTS];       /* page-locked */
    char *dev[SLOTS];
    void *released[SLOTS];   /* compute ops that read the slot are done */
    void *uploaded[SLOTS];   /* the slot's upload is done (host buffer free, device data there) */
    int next;                /* the slot of the next put */
    int out;                 /* the slot put and not yet released, or -1 */
};

/* Images start on a 256-byte boundary, as cudaMalloc's own allocations do,
 * so cuDNN sees them aligned for its vector loads. */
static size_t x_offset(int max_batch) { return ((size_t)max_batch * sizeof(int32_t) + 255) / 256 * 256; }

stager *stager_create(const backend *be, int max_batch, size_t sample_floats) {
    CNT_ASSERT(max_batch >= 1 && sample_floats >= 1);
    stager *s = cnt_calloc(1, sizeof *s);
    s->be = be;
    s->max_batch = max_batch;
    s->sample_floats = sample_floats;
    s->xoff = x_offset(max_batch);
    s->bytes = s->xoff + (size_t)max_batch * sample_floats * sizeof(float);
    for (int i = 0; i < SLOTS; i++) {
        s->host[i] = be->host_alloc(s->bytes);
        s->dev[i] = be->alloc(s->bytes);
        s->released[i] = be->fence_create();
        s->uploaded[i] = be->fence_create();
    }
    s->out = -1;
    return s;
}

void stager_put(stager *s, const batch *b, float **x, int32_t **labels) {
    CNT_ASSERT(s->out < 0 && b->n >= 1 && b->n <= s->max_batch);
    int k = s->next;
    const backend *be = s->be;
    /* the slot's previous upload (two puts ago) has read the host buffer */
    be->fence_wait(s->uploaded[k]);
    char *h = s->host[k];
    size_t lbytes = (size_t)b->n * sizeof(int32_t), xbytes = (size_t)b->n * s->sample_floats * sizeof(float);
    size_t xoff = s->xoff;
    memcpy(h, b->labels, lbytes);
    memcpy(h + xoff, b->x, xbytes);
    be->upload_async(s->dev[k], h, lbytes, s->released[k], NULL);
    be->upload_async(s->dev[k] + xoff, h + xoff, xbytes, NULL, s->uploaded[k]);
    *labels = (int32_t *)s->dev[k];
    *x = (float *)(s->dev[k] + xoff);
    s->out = k;
    s->next = (k + 1) % SLOTS;
}

void stager_release(stager *s) {
    CNT_ASSERT(s->out >= 0);
    s->be->fence_record(s->released[s->out]);
    s->out = -1;
}

void stager_free(stager *s) {
    if (!s) return;
    s->be->sync();
    for (int i = 0; i < SLOTS; i++) {
        s->be->fence_wait(s->uploaded[i]);
        s->be->host_free(s->host[i]);
        s->be->free(s->dev[i]);
        s->be->fence_destroy(s->released[i]);
        s->be->fence_destroy(s->uploaded[i]);
    }
    free(s);
}
