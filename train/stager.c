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
    int c, hw, u8;
    size_t sample_values;    /* c x hw */
    size_t host_bytes;       /* per slot: labels (max_batch int32), then images at xoff (bytes with u8, else floats) */
    size_t dev_bytes;        /* the same on the device; with u8 then the floats normalize_u8 makes, at foff */
    size_t xoff, foff;
    void *host[SLOTS];       /* page-locked */
    char *dev[SLOTS];
    float *lut;              /* u8: the device copy of the batches' normalisation table ([c][256]) */
    float lut_host[3 * 256]; /* what lut holds */
    int lut_set;
    void *released[SLOTS];   /* compute ops that read the slot are done */
    void *uploaded[SLOTS];   /* the slot's upload is done (host buffer free, device data there) */
    int next;                /* the slot of the next put */
    int out;                 /* the slot put and not yet released, or -1 */
};

/* Images start on a 256-byte boundary, as cudaMalloc's own allocations do,
 * so cuDNN sees them aligned for its vector loads. */
static size_t x_offset(int max_batch) { return ((size_t)max_batch * sizeof(int32_t) + 255) / 256 * 256; }

/* The offsets and sizes of a slot's parts. */
static void layout(int max_batch, size_t sample_values, int u8, size_t *xoff, size_t *foff, size_t *host,
                   size_t *dev) {
    size_t images = (size_t)max_batch * sample_values * (u8 ? 1 : sizeof(float));
    *xoff = x_offset(max_batch);
    *host = *xoff + images;
    *foff = u8 ? (*host + 255) / 256 * 256 : *xoff;
    *dev = u8 ? *foff + (size_t)max_batch * sample_values * sizeof(float) : *host;
}

void stager_slot_bytes(int max_batch, int c, int hw, int u8, size_t *host, size_t *dev) {
    size_t xoff, foff;
    layout(max_batch, (size_t)c * (size_t)hw, u8, &xoff, &foff, host, dev);
}

stager *stager_create(const backend *be, int max_batch, int c, int hw, int u8) {
    CNT_ASSERT(max_batch >= 1 && c >= 1 && c <= 3 && hw >= 1);
    stager *s = cnt_calloc(1, sizeof *s);
    s->be = be;
    s->max_batch = max_batch;
    s->c = c;
    s->hw = hw;
    s->u8 = u8;
    s->sample_values = (size_t)c * (size_t)hw;
    layout(max_batch, s->sample_values, u8, &s->xoff, &s->foff, &s->host_bytes, &s->dev_bytes);
    if (u8) s->lut = be->alloc((size_t)c * 256 * sizeof(float));
    for (int i = 0; i < SLOTS; i++) {
        s->host[i] = be->host_alloc(s->host_bytes);
        s->dev[i] = be->alloc(s->dev_bytes);
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
    CNT_ASSERT(s->u8 ? b->u8 && b->lut && b->c == s->c && b->hw == s->hw : b->x != NULL);
    size_t lbytes = (size_t)b->n * sizeof(int32_t);
    size_t xbytes = (size_t)b->n * s->sample_values * (s->u8 ? 1 : sizeof(float));
    size_t xoff = s->xoff;
    memcpy(h, b->labels, lbytes);
    memcpy(h + xoff, s->u8 ? (const void *)b->u8 : (const void *)b->x, xbytes);
    be->upload_async(s->dev[k], h, lbytes, s->released[k], NULL);
    be->upload_async(s->dev[k] + xoff, h + xoff, xbytes, NULL, s->uploaded[k]);
    *labels = (int32_t *)s->dev[k];
    *x = (float *)(s->dev[k] + s->foff);
    if (s->u8) {
        /* the table, queued on the compute stream before the op that reads
         * it, when it is not the one there (a loader with other mean/std) */
        size_t lut_bytes = (size_t)s->c * 256 * sizeof(float);
        if (!s->lut_set || memcmp(s->lut_host, b->lut, lut_bytes) != 0) {
            memcpy(s->lut_host, b->lut, lut_bytes);
            be->upload(s->lut, s->lut_host, lut_bytes);
            s->lut_set = 1;
        }
        be->normalize_u8(b->n, s->c, s->hw, (const uint8_t *)(s->dev[k] + xoff), s->lut, *x);
    }
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
    s->be->free(s->lut);
    free(s);
}
