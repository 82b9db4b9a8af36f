/*
 * data/gpu_jpeg.h - JPEG decoding on the rank's GPU with nvJPEG
 * (data.decoder = nvjpeg): the hardware decoder (the NVJPG engines of an
 * A100 or H100) where the GPU has one, nvJPEG's GPU-assisted hybrid decoder
 * otherwise.
 *
 * The loader keeps its semantics: a worker opens its batch's files and draws
 * each crop as it does for the CPU (data/loader.h); the windows its resize
 * filter reads are decoded here at full size, all of a batch in one call (a
 * batched decode on the hardware decoder, one image at a time on the
 * hybrid one), and come back to host memory, where the same resize as the
 * CPU path's makes the batch. What nvJPEG refuses (an encoding it does not
 * support: progressive or 4:1:0 files on the hardware decoder, CMYK, or a
 * corrupt file) is left to the caller's CPU decode, and counted.
 *
 * Pixels: nvJPEG's IDCT and colour conversion are not libjpeg-turbo's, so a
 * window differs from the CPU's by a level or two (the tolerance is stated
 * in tests/test_gpu_jpeg.c, which runs on a GPU only). NOT RUN on a GPU
 * yet: compiled and linked where nvJPEG is found (tools/fetch_nvjpeg.sh).
 *
 * Threads: gpu_jpeg_decode may be called from every loader thread at once;
 * each call takes a decoding state of its own (stream, buffers) from a pool.
 */
#ifndef CNT_DATA_GPU_JPEG_H
#define CNT_DATA_GPU_JPEG_H

#include <stddef.h>
#include <stdint.h>

#include "data/jpeg.h"

typedef struct gpu_jpeg gpu_jpeg;

typedef struct gpu_jpeg_job {
    const uint8_t *bytes;  /* the JPEG file */
    size_t len;
    int c;                 /* channels wanted: 1 (grey) or 3 (RGB) */
    int w, h;              /* the image's size (win.sw, win.sh) */
    int x0, y0, x1, y1;    /* the window: full-size columns [x0, x1), rows [y0, y1), inside the image */
    int ok;                /* out: 1 when decoded into win, 0 when refused (decode it on the CPU) */
    jpeg_window win;       /* out: pixels at scale 1 of a region holding the window, up to 16 pixels wider on
                            * each side (win.x0, .y0, .w, .h say where; win.pix malloc'ed; the caller frees it) */
} gpu_jpeg_job;

/* 1 when this build has nvJPEG (CNT_HAVE_NVJPEG). */
int gpu_jpeg_built(void);

/* nvJPEG on CUDA device `device` (-1: the calling thread's current one):
 * its hardware decoder where the GPU has one, else the hybrid decoder
 * (always the hybrid one with CNT_NVJPEG_BACKEND=hybrid in the environment,
 * for tests). Files it refuses (the first few said, with nvJPEG's status)
 * are left for the CPU: CMYK and other component counts, files without an
 * end-of-image marker, what nvJPEG says it does not support. NULL with a
 * message when the build has no nvJPEG or nvJPEG cannot start on the
 * device. */
gpu_jpeg *gpu_jpeg_create(int device);

/* The reference decoder: the same interface and contract, decoding with
 * libjpeg-turbo on the CPU, and refusing progressive files as the hardware
 * decoder does. What the GPU's tests compare with, and what the loader's
 * batched path (decode a batch's windows, fall back for the refused) is
 * tested on where there is no GPU. Any build. */
gpu_jpeg *gpu_jpeg_create_reference(void);

/* What decodes: "nvJPEG hardware decoder (N engines)", "nvJPEG hybrid decoder", "reference decoder". */
const char *gpu_jpeg_describe(const gpu_jpeg *g);

/* Decodes the n jobs' windows (each job's ok and win set). Thread-safe. */
void gpu_jpeg_decode(gpu_jpeg *g, gpu_jpeg_job *jobs, int n);

/* Images refused so far (left to the CPU). */
long gpu_jpeg_refused(const gpu_jpeg *g);

void gpu_jpeg_free(gpu_jpeg *g);

#endif
