/*
 * data/loader.c - sharded, augmented, prefetched batches (see data/loader.h).
 *
 * Steps of an epoch are numbered 0..steps-1; step s is built into ring slot
 * s % nslots. The ring holds prefetch + 1 slots: up to `prefetch` batches made
 * ahead plus the one the consumer holds (it stays valid until the next
 * loader_next, so its slot cannot be refilled before then).
 *
 * Counters, all guarded by the mutex:
 *   claimed   next step a worker may take; a worker takes step s only when
 *             s < released + nslots, i.e. when the slot's previous batch has
 *             been given back by the consumer;
 *   delivered next step the consumer will receive;
 *   released  steps whose slots the consumer has given back;
 *   busy      workers filling a slot right now (outside the lock).
 * Workers finish out of order; each marks its slot ready, and loader_next waits
 * for the slot of step `delivered` specifically, so batches arrive in order.
 *
 * A sample's content depends only on (seed, epoch, rank, position in the shard)
 * and the data, never on which worker built it or when.
 */
#include "data/loader.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "common/check.h"
#include "common/cpus.h"
#include "common/threads.h"
#include "common/timer.h"
#include "common/rng.h"
#include "data/gpu_jpeg.h"
#include "data/shards.h"

#define LOADER_MAX_WORKERS 256
#define LOADER_MAX_PREFETCH 1024

typedef struct loader_slot {
    batch b;          /* b.x: [batch, c, h, w], b.labels: [batch]; owned here */
    int ready;        /* 1: filled for the step the consumer expects next in this slot */
} loader_slot;

struct loader {
    const dataset *ds;
    loader_options opt;
    int steps;        /* batches per epoch on this rank */
    int shard_n;      /* samples of this rank visited per epoch */
    int *perm;        /* [ds->n] permutation of the current epoch */
    /* Read order blocks (shard sets): the blocks, this epoch's block order,
     * each ordered block's first position in the sequence of blocks
     * (bseq[m] = n), the rank's run (n / world) and window (in samples). */
    int nblocks, *bstart, *border, *bseq, *scratch;
    int run, window;
    float lut[3][256];/* per channel: normalised value of each byte */
    int nslots;
    loader_slot *slots;
    pthread_t *threads;

    /* Guards every field below, and perm/epoch while workers may read them. */
    pthread_mutex_t mu;
    /* Workers wait here for a step to claim (a new epoch, a slot given back,
     * or shutdown). */
    pthread_cond_t work_cv;
    /* Signalled whenever a worker finishes a batch: the consumer waits on it
     * for its next batch in order, loader_start_epoch for busy to reach 0. */
    pthread_cond_t done_cv;
    int epoch;
    int active;       /* 1 once an epoch has been started */
    int claimed, delivered, released, busy;
    int holding;      /* 1: the consumer holds the slot of step delivered - 1 */
    int hinted;       /* steps [.., hinted) of the epoch handed to the kernel to read ahead */
    int hinted_win;   /* blocks order: windows [0, hinted_win) of the rank's run handed over */
    int stop;         /* 1: workers exit */

    cpus_mask cpus;      /* the process's CPUs (cpus_process), every worker's binding */
    int started;         /* workers that have bound themselves (under mu) */
    int min_cpus;        /* the fewest CPUs a started worker may run on (under mu) */

    /* Unreadable images, updated by workers with atomics (no lock). */
    uint8_t *known_bad; /* [ds->n] 1 once a sample failed to decode (reported then, never retried) */
    int *bad_stamp;     /* [ds->n] the pass it was last counted in (0: never) */
    int pass;           /* loader_start_epoch_at calls: an evaluation loader starts epoch 0 every time */
    long skipped;       /* distinct unreadable samples met this pass */
};

static void broadcast(pthread_cond_t *cv) {
    errno = pthread_cond_broadcast(cv);
    CHECK_ERRNO(errno == 0, "pthread_cond_broadcast");
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The uint8 form of loader_fill_sample's copy: dst is h x w x c bytes
 * (HWC), output (y, x) reading source row y + dy, column sx0 + step * x
 * within [x0, x1), 0 (the padding) elsewhere. */
static void fill_sample_u8(const loader *ld, const uint8_t *src, uint8_t *dst, int dy, int x0, int x1, int sx0,
                           int step) {
    const dataset *ds = ld->ds;
    int h = ds->h, w = ds->w, c = ds->c;
    size_t plane = (size_t)h * (size_t)w;
    memset(dst, 0, plane * (size_t)c);
    for (int y = 0; y < h; y++) {
        int sy = y + dy;
        if (sy < 0 || sy >= h) continue;
        uint8_t *row = dst + (size_t)y * (size_t)w * (size_t)c;
        for (int ch = 0; ch < c; ch++) {
            const uint8_t *srow = src + (size_t)ch * plane + (size_t)sy * (size_t)w;
            for (int x = x0; x < x1; x++) row[(size_t)x * (size_t)c + (size_t)ch] = srow[sx0 + step * x];
        }
    }
}

/* Copies one image into dst (floats, normalised; or with opt.u8 bytes as
 * they are, HWC) and, when rng is given, a random crop of the zero-padded
 * image and a random horizontal flip. Padding is a raw pixel value of 0
 * (black), normalised like any other pixel. */
static void loader_fill_sample(const loader *ld, const uint8_t *src, void *out, rng *r) {
    const dataset *ds = ld->ds;
    int h = ds->h, w = ds->w, pad = ld->opt.pad;
    int dy = 0, dx = 0, flip = 0;
    if (r) {
        dy = pad > 0 ? (int)rng_below(r, (uint32_t)(2 * pad + 1)) - pad : 0;
        dx = pad > 0 ? (int)rng_below(r, (uint32_t)(2 * pad + 1)) - pad : 0;
        flip = (int)rng_below(r, 2);
    }
    /* Output (y, x) reads source row y + dy and column sx(x), where
     * sx(x) = x + dx, or (w - 1 - x) + dx when flipped; [x0, x1) is where
     * sx lies inside the image. */
    int x0, x1, sx0, step;
    if (!flip) {
        x0 = dx < 0 ? -dx : 0;
        x1 = dx > 0 ? w - dx : w;
        sx0 = dx;
        step = 1;
    } else {
        x0 = dx > 0 ? dx : 0;
        x1 = dx < 0 ? w + dx : w;
        sx0 = w - 1 + dx;
        step = -1;
    }
    if (x1 < x0) x1 = x0;
    if (ld->opt.u8) {
        fill_sample_u8(ld, src, out, dy, x0, x1, sx0, step);
        return;
    }
    float *dst = out;
    for (int ch = 0; ch < ds->c; ch++) {
        const float *lut = ld->lut[ch];
        float zero = lut[0];
        const uint8_t *plane = src + (size_t)ch * (size_t)h * (size_t)w;
        float *pl = dst + (size_t)ch * (size_t)h * (size_t)w;
        for (int y = 0; y < h; y++) {
            float *row = pl + (size_t)y * (size_t)w;
            int sy = y + dy;
            if (sy < 0 || sy >= h) {
                for (int x = 0; x < w; x++) row[x] = zero;
                continue;
            }
            const uint8_t *srow = plane + (size_t)sy * (size_t)w;
            for (int x = 0; x < x0; x++) row[x] = zero;
            for (int x = x0; x < x1; x++) row[x] = lut[srow[sx0 + step * x]];
            for (int x = x1; x < w; x++) row[x] = zero;
        }
    }
}

/* Sample idx opened for rendering: its file (path, PATH_MAX bytes, names it
 * while im is open), or for an in-memory set an interleaved copy of its planes
 * in *hwc (freed by the caller after image_close). Returns CNT_ERR (with the
 * message) for an unreadable file. */
static int loader_open(const loader *ld, int idx, image_src *im, char *path, uint8_t **hwc) {
    const dataset *ds = ld->ds;
    *hwc = NULL;
    if (!ds->pixels) return dataset_open_image(ds, idx, im, path, PATH_MAX);
    size_t plane = (size_t)ds->h * (size_t)ds->w;
    const uint8_t *src = ds->pixels + (size_t)idx * plane * (size_t)ds->c;
    uint8_t *p = cnt_malloc(plane * (size_t)ds->c);
    for (size_t k = 0; k < plane; k++)
        for (int ch = 0; ch < ds->c; ch++) p[k * (size_t)ds->c + (size_t)ch] = src[(size_t)ch * plane + k];
    snprintf(path, PATH_MAX, "sample %d", idx);
    image_wrap(im, p, ds->w, ds->h, ds->c, path);
    *hwc = p;
    return CNT_OK;
}

/* torchvision's RandomResizedCrop.get_params: the crop (x, y, cw, ch) of a
 * w x h image. */
void loader_resized_crop_params(rng *r, int w, int h, float min_scale, int *x, int *y, int *cw, int *ch) {
    double area = (double)w * (double)h;
    double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * ((double)min_scale + (1.0 - (double)min_scale) * (double)rng_uniform(r));
        double ratio = exp(lr0 + (lr1 - lr0) * (double)rng_uniform(r));
        int tw = (int)rint(sqrt(target * ratio)), th = (int)rint(sqrt(target / ratio));
        if (tw > 0 && tw <= w && th > 0 && th <= h) {
            *y = (int)rng_below(r, (uint32_t)(h - th + 1));
            *x = (int)rng_below(r, (uint32_t)(w - tw + 1));
            *cw = tw;
            *ch = th;
            return;
        }
    }
    /* Fallback: the centre crop of the whole image, its ratio clamped. */
    double in_ratio = (double)w / (double)h;
    int tw = w, th = h;
    if (in_ratio < 3.0 / 4.0) {
        th = (int)rint(w / (3.0 / 4.0));
    } else if (in_ratio > 4.0 / 3.0) {
        tw = (int)rint(h * (4.0 / 3.0));
    }
    if (th > h) th = h;
    if (tw > w) tw = w;
    *cw = tw;
    *ch = th;
    *y = (h - th) / 2;
    *x = (w - tw) / 2;
}

/* Writes an interleaved h x w x c image (row stride `stride`) as normalised
 * planes (with opt.u8: as bytes, HWC), mirrored when flip. */
static void loader_store_hwc(const loader *ld, const uint8_t *img, int stride, int flip, void *out) {
    const dataset *ds = ld->ds;
    int c = ds->c, h = ds->h, w = ds->w;
    if (ld->opt.u8) {
        uint8_t *dst = out;
        for (int y = 0; y < h; y++) {
            const uint8_t *row = img + (size_t)y * (size_t)stride;
            uint8_t *o = dst + (size_t)y * (size_t)w * (size_t)c;
            if (!flip) {
                memcpy(o, row, (size_t)w * (size_t)c);
                continue;
            }
            for (int x = 0; x < w; x++) memcpy(o + (size_t)x * c, row + (size_t)(w - 1 - x) * c, (size_t)c);
        }
        return;
    }
    float *dst = out;
    for (int ch = 0; ch < c; ch++) {
        const float *lut = ld->lut[ch];
        float *pl = dst + (size_t)ch * (size_t)h * (size_t)w;
        for (int y = 0; y < h; y++) {
            const uint8_t *row = img + (size_t)y * (size_t)stride + ch;
            float *o = pl + (size_t)y * (size_t)w;
            if (flip)
                for (int x = 0; x < w; x++) o[x] = lut[row[(size_t)(w - 1 - x) * (size_t)c]];
            else
                for (int x = 0; x < w; x++) o[x] = lut[row[(size_t)x * (size_t)c]];
        }
    }
}

/* The view of sample image im the transform asks for: RandomResizedCrop
 * (drawing from r) for training, the resize and centre crop for
 * evaluation, a resize to the input size for the pad crop; *flip drawn
 * with the crop. */
static image_view loader_view(const loader *ld, const image_src *im, rng *r, int *flip) {
    const loader_options *o = &ld->opt;
    int H = ld->ds->h, W = ld->ds->w;
    *flip = 0;
    if (o->crop == LOADER_CROP_PAD) return image_view_resize(im->w, im->h, W, H);
    if (r) {
        int x, y, cw, chh;
        loader_resized_crop_params(r, im->w, im->h, o->min_scale, &x, &y, &cw, &chh);
        *flip = (int)rng_below(r, 2);
        return image_view_crop_resize(x, y, cw, chh, W, H);
    }
    /* torchvision's Resize(256) + CenterCrop(224), scaled to H x W: the
     * shorter side to floor(H x 256/224), at least the crop. */
    int side = H * 256 / 224;
    if (side < H) side = H;
    if (side < W) side = W;
    return image_view_resize_centre(im->w, im->h, side, W, H);
}

/* A rendered H x W x c image (HWC) into dst: the pad crop's pad-crop-flip
 * (drawing from r), or the resized crop's flip. */
static void loader_store_rendered(const loader *ld, const uint8_t *sized, int flip, rng *r, void *dst) {
    const dataset *ds = ld->ds;
    int c = ds->c, H = ds->h, W = ds->w;
    if (ld->opt.crop != LOADER_CROP_PAD) {
        loader_store_hwc(ld, sized, W * c, flip, dst);
        return;
    }
    /* To planes, then the in-memory pad-crop-flip path. */
    size_t plane = (size_t)H * (size_t)W;
    uint8_t *planes = cnt_malloc(plane * (size_t)c);
    for (size_t k = 0; k < plane; k++)
        for (int ch = 0; ch < c; ch++) planes[(size_t)ch * plane + k] = sized[k * (size_t)c + (size_t)ch];
    loader_fill_sample(ld, planes, dst, r);
    free(planes);
}

/* Produces sample idx into dst through the general path (decoded files, or any
 * set with the resized crop). Returns CNT_ERR for an unreadable file. */
static int loader_fill_general(const loader *ld, int idx, void *dst, rng *r) {
    const dataset *ds = ld->ds;
    char path[PATH_MAX];
    image_src im;
    uint8_t *hwc;
    if (loader_open(ld, idx, &im, path, &hwc) != CNT_OK) return CNT_ERR;
    int flip;
    image_view v = loader_view(ld, &im, r, &flip);
    uint8_t *sized = cnt_malloc((size_t)ds->w * (size_t)ds->h * (size_t)ds->c);
    int rc = image_render(&im, &v, ld->opt.jpeg_scaling, sized);
    image_close(&im);
    free(hwc);
    if (rc == CNT_OK) loader_store_rendered(ld, sized, flip, r, dst);
    free(sized);
    return rc;
}

/* Records an unreadable sample: reported the first time, counted once per
 * pass over the data however often it is met (as itself or as a
 * replacement). */
static void loader_note_unreadable(loader *ld, int idx, int decoded) {
    if (decoded && !__atomic_exchange_n(&ld->known_bad[idx], 1, __ATOMIC_RELAXED))
        log_warn("data: skipping unreadable image: %s", cnt_err_msg());
    if (__atomic_exchange_n(&ld->bad_stamp[idx], ld->pass, __ATOMIC_RELAXED) != ld->pass)
        __atomic_add_fetch(&ld->skipped, 1, __ATOMIC_RELAXED);
}

/* loader_fill_general for a sample not known to be unreadable; an unreadable
 * one is noted and CNT_ERR returned. */
static int loader_try_sample(loader *ld, int idx, void *dst, rng *r) {
    if (__atomic_load_n(&ld->known_bad[idx], __ATOMIC_RELAXED)) {
        loader_note_unreadable(ld, idx, 0);
        return CNT_ERR;
    }
    if (loader_fill_general(ld, idx, dst, r) == CNT_OK) return CNT_OK;
    loader_note_unreadable(ld, idx, 1);
    return CNT_ERR;
}

/* The sample at position pos of this rank's shard of the epoch (positions
 * past the shard wrap around the permutation). */
static int loader_sample_at(const loader *ld, int pos) {
    return ld->perm[(ld->opt.rank + pos * ld->opt.world) % ld->ds->n];
}

/* The generator of position pos: a sample's randomness depends on (seed,
 * epoch: key), rank and position only. */
static void loader_seed(const loader *ld, uint64_t key, int pos, rng *r) {
    rng_seed(r, key, ((uint64_t)ld->opt.rank << 32) | (uint64_t)pos);
}

/* Where the out-th sample of a slot's batch goes (floats, or bytes with u8). */
static void *loader_slot_sample(const loader *ld, loader_slot *slot, int out) {
    size_t sample = (size_t)ld->ds->c * (size_t)ld->ds->h * (size_t)ld->ds->w;
    return ld->opt.u8 ? (void *)(slot->b.u8 + (size_t)out * sample) : (void *)(slot->b.x + (size_t)out * sample);
}

void loader_blocks_permutation(rng *r, const int *bstart, int m, int world, int window, int shuffle, int *perm,
                               int *order, int *scratch) {
    int n = bstart[m];
    if (shuffle)
        rng_permutation(r, order, m);
    else
        for (int k = 0; k < m; k++) order[k] = k;
    int at = 0;
    for (int j = 0; j < m; j++)
        for (int i = bstart[order[j]]; i < bstart[order[j] + 1]; i++) scratch[at++] = i;
    int run = n / world;
    if (window < 1) window = 1;
    for (int q = 0; q < world; q++) {
        int *piece = scratch + (size_t)q * (size_t)run;
        for (int w0 = 0; shuffle && w0 < run; w0 += window) {
            int len = run - w0 < window ? run - w0 : window;
            for (int i = len - 1; i > 0; i--) { /* Fisher-Yates within the window */
                int j = (int)rng_below(r, (uint32_t)(i + 1)), t = piece[w0 + i];
                piece[w0 + i] = piece[w0 + j];
                piece[w0 + j] = t;
            }
        }
        for (int pos = 0; pos < run; pos++) perm[q + pos * world] = piece[pos];
    }
    for (int i = world * run; i < n; i++) perm[i] = scratch[i];
}

/* The blocks of a shard set in index order: runs of images back to back in
 * one shard, cut once they hold block_bytes. */
static void loader_make_blocks(loader *ld) {
    const dataset *ds = ld->ds;
    ld->bstart = cnt_malloc(((size_t)ds->n + 1) * sizeof *ld->bstart);
    int m = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < ds->n; i++) {
        if (i == 0 || bytes >= ld->opt.block_bytes || !shards_follows(ds, i)) {
            ld->bstart[m++] = i;
            bytes = 0;
        }
        bytes += ds->recs[i].len;
    }
    ld->bstart[m] = ds->n;
    ld->nblocks = m;
    ld->border = cnt_malloc((size_t)m * sizeof *ld->border);
    ld->bseq = cnt_malloc(((size_t)m + 1) * sizeof *ld->bseq);
    ld->scratch = cnt_malloc((size_t)ds->n * sizeof *ld->scratch);
    ld->run = ds->n / ld->opt.world;
    long win = (long)ld->opt.window_blocks * ds->n / m;
    ld->window = win < 1 ? 1 : win > INT_MAX ? INT_MAX : (int)win;
}

static void loader_epoch_permutation(loader *ld) {
    rng r;
    rng_seed(&r, ld->opt.seed, (uint64_t)ld->epoch);
    if (ld->opt.read_order == LOADER_ORDER_BLOCKS) {
        loader_blocks_permutation(&r, ld->bstart, ld->nblocks, ld->opt.world, ld->window, ld->opt.shuffle, ld->perm,
                                  ld->border, ld->scratch);
        ld->bseq[0] = 0;
        for (int j = 0; j < ld->nblocks; j++)
            ld->bseq[j + 1] = ld->bseq[j] + ld->bstart[ld->border[j] + 1] - ld->bstart[ld->border[j]];
    } else if (ld->opt.shuffle) {
        rng_permutation(&r, ld->perm, ld->ds->n);
    } else {
        for (int i = 0; i < ld->ds->n; i++) ld->perm[i] = i;
    }
}

/* Reads ahead window k of the rank's run: its images, block by block. */
static void loader_hint_window(const loader *ld, int k) {
    int a = ld->opt.rank * ld->run + k * ld->window;
    int b = a + (ld->run - k * ld->window < ld->window ? ld->run - k * ld->window : ld->window);
    int lo = 0, hi = ld->nblocks; /* the ordered block holding sequence position a */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (ld->bseq[mid] <= a) lo = mid; else hi = mid;
    }
    for (int j = lo; j < ld->nblocks && ld->bseq[j] < b; j++) {
        int s0 = a > ld->bseq[j] ? a : ld->bseq[j], s1 = b < ld->bseq[j + 1] ? b : ld->bseq[j + 1];
        int first = ld->bstart[ld->border[j]] - ld->bseq[j];
        shards_will_need(ld->ds, first + s0, first + s1);
    }
}

/* Reads ahead steps [s0, s1) (and in blocks order the windows [w0, w1) of
 * the rank's run): called without the lock, like loader_fill_batch. */
static void loader_read_ahead(const loader *ld, int s0, int s1, int w0, int w1) {
    const loader_options *o = &ld->opt;
    int blocks = o->read_order == LOADER_ORDER_BLOCKS;
    for (int k = w0; k < w1; k++) loader_hint_window(ld, k);
    int end = s1 * o->batch < ld->shard_n ? s1 * o->batch : ld->shard_n;
    for (int pos = s0 * o->batch; pos < end; pos++) {
        if (blocks && pos < ld->run) continue; /* in a window */
        int idx = loader_sample_at(ld, pos);
        shards_will_need(ld->ds, idx, idx + 1);
    }
}

/* Under the lock, when step s is claimed: what to read ahead now (steps
 * [*s0, *s1), windows [*w0, *w1)), marked as handed over. */
static void loader_claim_read_ahead(loader *ld, int s, int *s0, int *s1, int *w0, int *w1) {
    *s0 = *s1 = *w0 = *w1 = 0;
    if (!ld->ds->shards) return;
    int last = s + ld->nslots < ld->steps ? s + ld->nslots : ld->steps;
    if (ld->hinted < last) {
        *s0 = ld->hinted > s ? ld->hinted : s;
        *s1 = ld->hinted = last;
    }
    if (ld->opt.read_order != LOADER_ORDER_BLOCKS) return;
    long p = (long)last * ld->opt.batch - 1; /* the last position of those steps */
    if (p >= ld->run) p = ld->run - 1;
    int nwin = (ld->run + ld->window - 1) / ld->window;
    int want = p < 0 ? 0 : (int)(p / ld->window) + 2; /* through the window after it */
    if (want > nwin) want = nwin;
    if (ld->hinted_win < want) {
        *w0 = ld->hinted_win;
        *w1 = ld->hinted_win = want;
    }
}

/* Sample position pos of the epoch into dst on the CPU, drawing from r
 * (seeded for pos): *idx receives the sample used (a training replacement
 * when pos's is unreadable). Returns 0 when an evaluation leaves it out. */
static int loader_fill_position(loader *ld, int pos, uint64_t key, rng *r, void *dst, int *idx) {
    const dataset *ds = ld->ds;
    const loader_options *o = &ld->opt;
    size_t sample = (size_t)ds->c * (size_t)ds->h * (size_t)ds->w;
    rng *ra = o->augment ? r : NULL;
    *idx = loader_sample_at(ld, pos);
    if (ds->pixels && o->crop != LOADER_CROP_RESIZED) {
        loader_fill_sample(ld, ds->pixels + (size_t)*idx * sample, dst, ra);
        return 1;
    }
    if (loader_try_sample(ld, *idx, dst, ra) == CNT_OK) return 1;
    if (!o->drop_last) return 0; /* evaluation: leave it out */
    /* Training: the next readable image of the shard takes its place. */
    for (int k = 1; k < ld->shard_n; k++) {
        *idx = loader_sample_at(ld, (pos + k) % ld->shard_n);
        loader_seed(ld, key, pos, r);
        if (loader_try_sample(ld, *idx, dst, ra) == CNT_OK) return 1;
    }
    cnt_fatal("data: no image of this rank's shard of %s can be read (%d tried)", ds->root, ld->shard_n);
}

/* data.decoder = nvjpeg: a batch's images opened (im[i].w = 0: did not
 * open), their views drawn with each sample's generator (rs[i] after the
 * view), and the JPEG windows decoded on the GPU together (jobs[i].ok). */
typedef struct gpu_batch {
    image_src *im;
    char (*path)[PATH_MAX];
    image_view *v;
    int *flip;
    rng *rs;
    gpu_jpeg_job *jobs;
} gpu_batch;

static void loader_gpu_decode(loader *ld, int first, int n, uint64_t key, gpu_batch *g) {
    const loader_options *o = &ld->opt;
    for (int i = 0; i < n; i++) {
        int idx = loader_sample_at(ld, first + i);
        g->jobs[i] = (gpu_jpeg_job){0};
        memset(&g->im[i], 0, sizeof g->im[i]);
        loader_seed(ld, key, first + i, &g->rs[i]);
        if (__atomic_load_n(&ld->known_bad[idx], __ATOMIC_RELAXED) ||
            dataset_open_image(ld->ds, idx, &g->im[i], g->path[i], PATH_MAX) != CNT_OK)
            continue; /* the CPU path says why */
        g->v[i] = loader_view(ld, &g->im[i], o->augment ? &g->rs[i] : NULL, &g->flip[i]);
        if (!g->im[i].bytes) continue; /* not a JPEG: decoded when opened */
        gpu_jpeg_job *j = &g->jobs[i];
        image_view_window(&g->im[i], &g->v[i], &j->x0, &j->y0, &j->x1, &j->y1);
        j->bytes = g->im[i].bytes;
        j->len = g->im[i].len;
        j->c = ld->ds->c;
        j->w = g->im[i].w;
        j->h = g->im[i].h;
    }
    /* Only the jobs with bytes: compact them for the call, then put them back. */
    gpu_jpeg_job *call = cnt_malloc((size_t)n * sizeof *call);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (g->jobs[i].bytes) call[m++] = g->jobs[i];
    gpu_jpeg_decode(o->gpu_jpeg, call, m);
    for (int i = 0, k = 0; i < n; i++)
        if (g->jobs[i].bytes) g->jobs[i] = call[k++];
    free(call);
}

/* loader_fill_batch with data.decoder = nvjpeg: what the GPU decoded is
 * resized here; an image that opened but was not decoded there (another
 * format, or a JPEG nvJPEG refused) is rendered on the CPU from what was
 * opened; a sample that did not open or render takes the CPU path from its
 * seed (which draws the same crop, and notes or replaces the file). */
static int loader_fill_batch_gpu(loader *ld, int first, int n, uint64_t key, loader_slot *slot) {
    const dataset *ds = ld->ds;
    gpu_batch g = {cnt_calloc((size_t)n, sizeof *g.im), cnt_malloc((size_t)n * sizeof *g.path),
                   cnt_malloc((size_t)n * sizeof *g.v), cnt_calloc((size_t)n, sizeof *g.flip),
                   cnt_malloc((size_t)n * sizeof *g.rs), cnt_malloc((size_t)n * sizeof *g.jobs)};
    loader_gpu_decode(ld, first, n, key, &g);
    uint8_t *sized = cnt_malloc((size_t)ds->c * (size_t)ds->h * (size_t)ds->w);
    int out = 0;
    for (int i = 0; i < n; i++) {
        void *dst = loader_slot_sample(ld, slot, out);
        rng *ra = ld->opt.augment ? &g.rs[i] : NULL;
        int idx = loader_sample_at(ld, first + i), kept = 1;
        if (g.jobs[i].ok) {
            image_render_window(&g.im[i], &g.v[i], &g.jobs[i].win, sized);
            loader_store_rendered(ld, sized, g.flip[i], ra, dst);
            free(g.jobs[i].win.pix);
        } else if (g.im[i].w && image_render(&g.im[i], &g.v[i], ld->opt.jpeg_scaling, sized) == CNT_OK) {
            loader_store_rendered(ld, sized, g.flip[i], ra, dst);
        } else {
            rng r;
            loader_seed(ld, key, first + i, &r);
            kept = loader_fill_position(ld, first + i, key, &r, dst, &idx);
        }
        image_close(&g.im[i]);
        if (kept) slot->b.labels[out++] = ds->labels[idx];
    }
    free(sized);
    free(g.im);
    free(g.path);
    free(g.v);
    free(g.flip);
    free(g.rs);
    free(g.jobs);
    return out;
}

/* Builds step s of the current epoch into slot. Called without the lock: the
 * epoch and perm cannot change while busy > 0 (loader_start_epoch waits). */
static void loader_fill_batch(loader *ld, int s, loader_slot *slot) {
    const dataset *ds = ld->ds;
    const loader_options *o = &ld->opt;
    int first = s * o->batch;
    int n = ld->shard_n - first < o->batch ? ld->shard_n - first : o->batch;
    uint64_t key = mix64(o->seed ^ mix64(0x6a09e667f3bcc909ULL + (uint64_t)ld->epoch));
    if (o->gpu_jpeg && !ds->pixels) {
        slot->b.n = loader_fill_batch_gpu(ld, first, n, key, slot);
        return;
    }
    int out = 0;
    for (int i = 0; i < n; i++) {
        rng r;
        loader_seed(ld, key, first + i, &r);
        void *dst = loader_slot_sample(ld, slot, out);
        int idx;
        if (loader_fill_position(ld, first + i, key, &r, dst, &idx)) slot->b.labels[out++] = ds->labels[idx];
    }
    slot->b.n = out;
}

static void *loader_worker(void *arg) {
    loader *ld = arg;
    /* On the process's CPUs (or the GPU's NUMA node's among them), not the
     * creating thread's: OpenMP may have pinned that one to a single CPU,
     * which this thread would inherit. */
    int err = cpus_bind_thread(&ld->cpus);
    if (err) log_warn("data: a loader thread could not bind itself to its CPUs: %s", strerror(err));
    int mine = cpus_allowed(NULL);
    cnt_mutex_lock(&ld->mu);
    ld->started++;
    if (!ld->min_cpus || mine < ld->min_cpus) ld->min_cpus = mine;
    broadcast(&ld->done_cv);
    for (;;) {
        if (ld->stop) break;
        if (ld->active && ld->claimed < ld->steps && ld->claimed < ld->released + ld->nslots) {
            int s = ld->claimed++, s0, s1, w0, w1;
            loader_slot *slot = &ld->slots[s % ld->nslots];
            loader_claim_read_ahead(ld, s, &s0, &s1, &w0, &w1);
            ld->busy++;
            cnt_mutex_unlock(&ld->mu);
            loader_read_ahead(ld, s0, s1, w0, w1);
            loader_fill_batch(ld, s, slot);
            cnt_mutex_lock(&ld->mu);
            ld->busy--;
            slot->ready = 1;
            broadcast(&ld->done_cv);
            continue;
        }
        cnt_cond_wait(&ld->work_cv, &ld->mu);
    }
    cnt_mutex_unlock(&ld->mu);
    return NULL;
}

static int loader_check_options(const dataset *ds, const loader_options *o) {
    if (!ds || (!ds->pixels && !ds->name_off)) return cnt_err_set("loader: the dataset is empty");
    if (ds->c < 1 || ds->c > 3 || ds->h < 1 || ds->w < 1)
        return cnt_err_set("loader: unsupported image shape %dx%dx%d (1 to 3 channels)", ds->c, ds->h, ds->w);
    if (o->batch < 1) return cnt_err_set("loader: batch must be >= 1, got %d", o->batch);
    if (o->world < 1) return cnt_err_set("loader: world size must be >= 1, got %d", o->world);
    if (o->rank < 0 || o->rank >= o->world)
        return cnt_err_set("loader: rank %d is outside 0..%d", o->rank, o->world - 1);
    if (o->workers < 1 || o->workers > LOADER_MAX_WORKERS)
        return cnt_err_set("loader: workers must be in 1..%d, got %d", LOADER_MAX_WORKERS, o->workers);
    if (o->prefetch < 1 || o->prefetch > LOADER_MAX_PREFETCH)
        return cnt_err_set("loader: prefetch must be in 1..%d, got %d", LOADER_MAX_PREFETCH, o->prefetch);
    if (!ds->labels || ds->n < 1) return cnt_err_set("loader: the dataset is empty");
    if (o->read_order != LOADER_ORDER_RANDOM && o->read_order != LOADER_ORDER_BLOCKS)
        return cnt_err_set("loader: unknown read order %d", o->read_order);
    if (o->read_order == LOADER_ORDER_BLOCKS && (!ds->shards || o->block_bytes < 1 || o->window_blocks < 1))
        return cnt_err_set("loader: read order blocks needs a shard set (data.kind = shards), a block size and a "
                           "window of at least 1");
    if (o->crop != LOADER_CROP_PAD && o->crop != LOADER_CROP_RESIZED)
        return cnt_err_set("loader: unknown crop mode %d", o->crop);
    if (o->crop == LOADER_CROP_RESIZED && !(o->min_scale > 0.0f && o->min_scale <= 1.0f))
        return cnt_err_set("loader: min_scale must be in (0, 1], got %g", (double)o->min_scale);
    if (o->augment && o->crop == LOADER_CROP_PAD && (o->pad < 0 || o->pad > ds->h || o->pad > ds->w))
        return cnt_err_set("loader: pad must be in 0..%d for %dx%d images, got %d",
                           ds->h < ds->w ? ds->h : ds->w, ds->h, ds->w, o->pad);
    for (int ch = 0; ch < ds->c; ch++) {
        if (!(o->std[ch] > 0.0f))
            return cnt_err_set("loader: std of channel %d must be > 0, got %g", ch, (double)o->std[ch]);
    }
    if (o->drop_last && !o->wrap && ds->n / o->world < o->batch)
        return cnt_err_set("loader: rank shard of %d samples (%d samples over %d ranks) is smaller than "
                           "one batch of %d",
                           ds->n / o->world, ds->n, o->world, o->batch);
    return CNT_OK;
}

loader *loader_create(const dataset *ds, const loader_options *opt) {
    if (!opt) {
        cnt_err_set("loader: no options given");
        return NULL;
    }
    if (loader_check_options(ds, opt) != CNT_OK) return NULL;
    loader *ld = cnt_calloc(1, sizeof *ld);
    ld->ds = ds;
    ld->opt = *opt;
    if (opt->drop_last && opt->wrap) {
        /* Enough steps for every sample: ceil(n / (world x batch)). */
        long global = (long)opt->world * opt->batch;
        ld->steps = (int)((ds->n + global - 1) / global);
        ld->shard_n = ld->steps * opt->batch;
    } else if (opt->drop_last) {
        int per_rank = ds->n / opt->world;
        ld->steps = per_rank / opt->batch;
        ld->shard_n = ld->steps * opt->batch;
    } else {
        ld->shard_n = (ds->n - opt->rank + opt->world - 1) / opt->world;
        ld->steps = (ld->shard_n + opt->batch - 1) / opt->batch;
    }
    for (int ch = 0; ch < ds->c; ch++) {
        for (int v = 0; v < 256; v++)
            ld->lut[ch][v] = (float)(((double)v / 255.0 - (double)opt->mean[ch]) / (double)opt->std[ch]);
    }
    ld->perm = cnt_malloc((size_t)ds->n * sizeof *ld->perm);
    ld->window = 1;
    if (opt->read_order == LOADER_ORDER_BLOCKS) loader_make_blocks(ld);
    ld->known_bad = cnt_calloc((size_t)ds->n, 1);
    ld->bad_stamp = cnt_calloc((size_t)ds->n, sizeof *ld->bad_stamp);
    ld->nslots = opt->prefetch + 1;
    ld->slots = cnt_calloc((size_t)ld->nslots, sizeof *ld->slots);
    size_t sample = (size_t)ds->c * (size_t)ds->h * (size_t)ds->w;
    for (int i = 0; i < ld->nslots; i++) {
        if (opt->u8)
            ld->slots[i].b.u8 = cnt_malloc((size_t)opt->batch * sample);
        else
            ld->slots[i].b.x = cnt_malloc((size_t)opt->batch * sample * sizeof(float));
        ld->slots[i].b.lut = &ld->lut[0][0];
        ld->slots[i].b.c = ds->c;
        ld->slots[i].b.hw = ds->h * ds->w;
        ld->slots[i].b.labels = cnt_malloc((size_t)opt->batch * sizeof(int32_t));
    }
    if (opt->have_cpus && cpus_count(&opt->cpus) > 0)
        ld->cpus = opt->cpus;
    else
        cpus_process(&ld->cpus);
    cnt_mutex_init(&ld->mu);
    cnt_cond_init(&ld->work_cv);
    cnt_cond_init(&ld->done_cv);
    ld->threads = cnt_malloc((size_t)opt->workers * sizeof *ld->threads);
    for (int i = 0; i < opt->workers; i++) {
        errno = pthread_create(&ld->threads[i], NULL, loader_worker, ld);
        CHECK_ERRNO(errno == 0, "pthread_create (data loader worker)");
        cnt_thread_name(ld->threads[i], "cnt-%s-%d", opt->drop_last ? "train" : "eval", i);
    }
    return ld;
}

int loader_steps_per_epoch(const loader *ld) { return ld->steps; }

int loader_thread_cpus(loader *ld, char *cpus, size_t len) {
    cnt_mutex_lock(&ld->mu);
    /* threads start at once; 10 s is a stuck system, said as such */
    double deadline = time_now() + 10.0;
    for (double left; ld->started < ld->opt.workers && (left = deadline - time_now()) > 0;)
        cnt_cond_timedwait(&ld->done_cv, &ld->mu, left);
    int n = ld->started < ld->opt.workers ? -1 : ld->min_cpus;
    cnt_mutex_unlock(&ld->mu);
    if (cpus) cpus_format(&ld->cpus, cpus, len);
    return n;
}

long loader_skipped(const loader *ld) { return __atomic_load_n(&ld->skipped, __ATOMIC_RELAXED); }

void loader_start_epoch(loader *ld, int epoch) { loader_start_epoch_at(ld, epoch, 0); }

void loader_start_epoch_at(loader *ld, int epoch, int first_step) {
    if (first_step < 0) first_step = 0;
    if (first_step > ld->steps) first_step = ld->steps;
    cnt_mutex_lock(&ld->mu);
    /* Stop new claims and let in-flight batches finish: workers read perm and
     * epoch without the lock, so both may change only once busy is 0. */
    ld->active = 0;
    while (ld->busy > 0) cnt_cond_wait(&ld->done_cv, &ld->mu);
    ld->epoch = epoch;
    ld->pass++;
    loader_epoch_permutation(ld);
    for (int i = 0; i < ld->nslots; i++) ld->slots[i].ready = 0;
    __atomic_store_n(&ld->skipped, 0, __ATOMIC_RELAXED);
    ld->claimed = ld->delivered = ld->released = ld->hinted = first_step;
    ld->hinted_win = (int)((long)first_step * ld->opt.batch / ld->window);
    ld->holding = 0;
    ld->active = 1;
    broadcast(&ld->work_cv);
    cnt_mutex_unlock(&ld->mu);
}

const batch *loader_next(loader *ld) {
    cnt_mutex_lock(&ld->mu);
    if (ld->holding) {
        /* The batch handed out last time is given back: its slot may be refilled. */
        ld->holding = 0;
        ld->released++;
        broadcast(&ld->work_cv);
    }
    if (!ld->active || ld->delivered >= ld->steps) {
        cnt_mutex_unlock(&ld->mu);
        return NULL;
    }
    loader_slot *slot = &ld->slots[ld->delivered % ld->nslots];
    while (!slot->ready) cnt_cond_wait(&ld->done_cv, &ld->mu);
    slot->ready = 0;
    ld->delivered++;
    ld->holding = 1;
    cnt_mutex_unlock(&ld->mu);
    return &slot->b;
}

void loader_free(loader *ld) {
    if (!ld) return;
    cnt_mutex_lock(&ld->mu);
    ld->stop = 1;
    broadcast(&ld->work_cv);
    cnt_mutex_unlock(&ld->mu);
    for (int i = 0; i < ld->opt.workers; i++) {
        errno = pthread_join(ld->threads[i], NULL);
        CHECK_ERRNO(errno == 0, "pthread_join (data loader worker)");
    }
    pthread_cond_destroy(&ld->done_cv);
    pthread_cond_destroy(&ld->work_cv);
    pthread_mutex_destroy(&ld->mu);
    for (int i = 0; i < ld->nslots; i++) {
        free(ld->slots[i].b.x);
        free(ld->slots[i].b.u8);
        free(ld->slots[i].b.labels);
    }
    free(ld->slots);
    free(ld->threads);
    free(ld->perm);
    free(ld->bstart);
    free(ld->border);
    free(ld->bseq);
    free(ld->scratch);
    free(ld->known_bad);
    free(ld->bad_stamp);
    free(ld);
}
