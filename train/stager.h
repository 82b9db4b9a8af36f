/*
 * train/stager.h - moves batches from the loader to the device, one step
 * ahead, on the backend's copy stream.
 *
 * Two slots, each a page-locked host buffer and a device buffer holding a
 * batch's labels and images. stager_put copies the loader's batch into the
 * next slot's host buffer (after that slot's previous upload has left it)
 * and queues the upload on the copy stream, after the compute ops that last
 * read the slot's device buffer; the compute ops issued next wait for the
 * upload on the device, not the host. So while the GPU computes step t, step
 * t+1's images cross PCIe, and the host never waits for the GPU to take a
 * batch. On the CPU backend the same calls are two memcpys.
 *
 *   stager_put(s, b, &x, &labels);   forward/backward/update reading x, labels
 *   stager_release(s);               after the last op that reads them
 */
#ifndef CNT_STAGER_H
#define CNT_STAGER_H

#include <stdint.h>

#include "data/loader.h"
#include "model/backend.h"

typedef struct stager stager;

/* Slots for up to max_batch samples of c x hw values each: floats, or with
 * u8 the loader's bytes (batch.u8, HWC), which put uploads and then
 * normalises on the device into the slot's floats (backend normalize_u8,
 * queued on the compute stream), so a quarter of the bytes cross to a GPU
 * and the net reads the same floats. */
stager *stager_create(const backend *be, int max_batch, int c, int hw, int u8);
/* What stager_create allocates per slot (it makes two): page-locked host
 * bytes and device bytes (train/memory.c counts them). */
void stager_slot_bytes(int max_batch, int c, int hw, int u8, size_t *host, size_t *dev);
/* Queues batch b's upload into the next slot; *x and *labels point at its
 * device copies (valid for ops issued until stager_release). */
void stager_put(stager *s, const batch *b, float **x, int32_t **labels);
/* The ops that read the last put's slot are all issued: marks them, so the
 * slot's next upload waits for them. Every put needs its release. */
void stager_release(stager *s);
void stager_free(stager *s);

#endif
