/*
 * data/gpu_jpeg.c - JPEG windows decoded on the GPU by nvJPEG (see
 * data/gpu_jpeg.h). NOT RUN on a GPU yet.
 *
 * Hardware decoder: one nvjpegDecodeBatchedEx per call, each image with its
 * own decode parameters (RGB interleaved or grey, the window as the region
 * of interest), after nvjpegDecodeBatchedSupportedEx has sorted out what the
 * engines cannot take. Hybrid decoder: the decoupled API, one image at a
 * time (host stage, transfer, device stage). Either way the windows land
 * back to back in one device buffer, come back in one copy to pinned host
 * memory, and are handed out as jpeg_windows.
 */
#include "data/gpu_jpeg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

#if CNT_HAVE_NVJPEG
#include <cuda_runtime.h>
#include <nvjpeg.h>
typedef struct state state;
#endif

struct gpu_jpeg {
    int reference;            /* 1: libjpeg-turbo on the CPU (gpu_jpeg_create_reference) */
    long refused;             /* atomics */
    long notes;               /* refusals said so far (atomic; the first few are) */
    char what[96];
#if CNT_HAVE_NVJPEG
    int device, hardware;
    nvjpegHandle_t h;
    nvjpegJpegDecoder_t dec;  /* hybrid: the decoupled API's decoder */
    pthread_mutex_t mu;       /* guards the pool */
    state *free_list, *all;
#endif
};

gpu_jpeg *gpu_jpeg_create_reference(void) {
    gpu_jpeg *g = cnt_calloc(1, sizeof *g);
    g->reference = 1;
    snprintf(g->what, sizeof g->what, "reference decoder (libjpeg-turbo on the CPU)");
    return g;
}

static void decode_reference(gpu_jpeg *g, gpu_jpeg_job *jobs, int n) {
    for (int j = 0; j < n; j++) {
        gpu_jpeg_job *job = &jobs[j];
        job->ok = !jpeg_is_progressive(job->bytes, job->len) &&
                  jpeg_decode_window("(reference decoder)", job->bytes, job->len, 8, job->c, job->x0, job->y0,
                                     job->x1, job->y1, &job->win) == CNT_OK;
        if (!job->ok) __atomic_add_fetch(&g->refused, 1, __ATOMIC_RELAXED);
    }
}

const char *gpu_jpeg_describe(const gpu_jpeg *g) { return g->what; }

long gpu_jpeg_refused(const gpu_jpeg *g) { return __atomic_load_n(&g->refused, __ATOMIC_RELAXED); }

#if CNT_HAVE_NVJPEG

#include <pthread.h>

#include "common/cuda_check.h"
#include "common/threads.h"

static const char *nvjpeg_status_name(nvjpegStatus_t s) {
    switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
    default: return "unknown status";
    }
}

#define NVJPEG_CHECK(call)                                                                                    \
    do {                                                                                                      \
        nvjpegStatus_t cnt_s_ = (call);                                                                       \
        if (cnt_s_ != NVJPEG_STATUS_SUCCESS)                                                                  \
            cnt_fatal_at(__FILE__, __LINE__, 1, NULL, "%s: nvJPEG error %d: %s", #call, (int)cnt_s_,          \
                         nvjpeg_status_name(cnt_s_));                                                         \
    } while (0)

/* One caller's decoding state: stream, nvJPEG state and buffers, and the
 * device and pinned buffers its windows pass through. */
struct state {
    struct state *next;       /* in the pool's free list */
    struct state *next_all;   /* every state, for gpu_jpeg_free */
    cudaStream_t stream;
    nvjpegJpegState_t js;
    nvjpegJpegStream_t jstream;
    nvjpegBufferPinned_t pinned_buf;  /* hybrid: the decoupled API's buffers */
    nvjpegBufferDevice_t device_buf;
    nvjpegDecodeParams_t *params;     /* [cap_params] per image of a call */
    int cap_params;
    int batch;                        /* hardware: the batch size nvjpegDecodeBatchedInitialize was given; 0 none */
    nvjpegOutputFormat_t batch_fmt;
    uint8_t *dev, *host;              /* the windows of a call, back to back */
    size_t cap_bytes;
};

int gpu_jpeg_built(void) { return 1; }

gpu_jpeg *gpu_jpeg_create(int device) {
    cudaError_t e = device < 0 ? cudaGetDevice(&device) : cudaSuccess;
    if (e == cudaSuccess) e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        cnt_err_set("nvJPEG: cannot use CUDA device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    gpu_jpeg *g = cnt_calloc(1, sizeof *g);
    g->device = device;
    /* chroma upsampled with interpolation, as libjpeg-turbo's default ("fancy") upsampling does */
    const unsigned flags = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;
    /* CNT_NVJPEG_BACKEND=hybrid: the hybrid decoder even where engines exist (tests run both paths) */
    const char *want = getenv("CNT_NVJPEG_BACKEND");
    const int hybrid_only = want && strcmp(want, "hybrid") == 0;
    nvjpegStatus_t s = hybrid_only ? NVJPEG_STATUS_ARCH_MISMATCH
                                   : nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, flags, &g->h);
    unsigned engines = 0, cores = 0;
    if (s == NVJPEG_STATUS_SUCCESS && nvjpegGetHardwareDecoderInfo(g->h, &engines, &cores) == NVJPEG_STATUS_SUCCESS &&
        engines > 0) {
        g->hardware = 1;
        snprintf(g->what, sizeof g->what, "nvJPEG hardware decoder (%u engines x %u cores) on GPU %d", engines,
                 cores, device);
    } else {
        if (s == NVJPEG_STATUS_SUCCESS) nvjpegDestroy(g->h);
        g->h = NULL;
        s = nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, NULL, NULL, flags, &g->h);
        if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegDecoderCreate(g->h, NVJPEG_BACKEND_DEFAULT, &g->dec);
        if (s != NVJPEG_STATUS_SUCCESS) {
            if (g->h) nvjpegDestroy(g->h);
            free(g);
            cnt_err_set("nvJPEG: cannot start on GPU %d: nvJPEG error %d: %s", device, (int)s, nvjpeg_status_name(s));
            return NULL;
        }
        snprintf(g->what, sizeof g->what, "nvJPEG hybrid decoder on GPU %d (%s)", device,
                 hybrid_only ? "CNT_NVJPEG_BACKEND=hybrid" : "no hardware decoder");
    }
    cnt_mutex_init(&g->mu);
    return g;
}

static state *acquire(gpu_jpeg *g) {
    cnt_mutex_lock(&g->mu);
    state *s = g->free_list;
    if (s) {
        g->free_list = s->next;
        cnt_mutex_unlock(&g->mu);
        return s;
    }
    cnt_mutex_unlock(&g->mu);
    s = cnt_calloc(1, sizeof *s);
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    NVJPEG_CHECK(nvjpegJpegStreamCreate(g->h, &s->jstream));
    if (g->hardware) {
        NVJPEG_CHECK(nvjpegJpegStateCreate(g->h, &s->js));
    } else {
        NVJPEG_CHECK(nvjpegDecoderStateCreate(g->h, g->dec, &s->js));
        NVJPEG_CHECK(nvjpegBufferPinnedCreate(g->h, NULL, &s->pinned_buf));
        NVJPEG_CHECK(nvjpegBufferDeviceCreate(g->h, NULL, &s->device_buf));
        NVJPEG_CHECK(nvjpegStateAttachPinnedBuffer(s->js, s->pinned_buf));
        NVJPEG_CHECK(nvjpegStateAttachDeviceBuffer(s->js, s->device_buf));
    }
    cnt_mutex_lock(&g->mu);
    s->next_all = g->all;
    g->all = s;
    cnt_mutex_unlock(&g->mu);
    return s;
}

static void release(gpu_jpeg *g, state *s) {
    cnt_mutex_lock(&g->mu);
    s->next = g->free_list;
    g->free_list = s;
    cnt_mutex_unlock(&g->mu);
}

/* Room for n images' parameters and `bytes` of windows. The device buffer
 * is stream-ordered (cudaMallocAsync, cudaFreeAsync on the state's
 * stream): cudaFree waits for the whole device, and a loader thread doing
 * that while NCCL's kernels wait for other ranks can hang them (NVIDIA/nccl
 * #194). Both buffers grow by half again, so a run grows them a few times. */
static void reserve(gpu_jpeg *g, state *s, int n, size_t bytes) {
    for (; s->cap_params < n; s->cap_params++) {
        s->params = cnt_realloc(s->params, (size_t)(s->cap_params + 1) * sizeof *s->params);
        NVJPEG_CHECK(nvjpegDecodeParamsCreate(g->h, &s->params[s->cap_params]));
    }
    if (bytes <= s->cap_bytes) return;
    CUDA_CHECK(cudaStreamSynchronize(s->stream)); /* the host buffer's last copy is done */
    if (s->dev) CUDA_CHECK(cudaFreeAsync(s->dev, s->stream));
    if (s->host) CUDA_CHECK(cudaFreeHost(s->host));
    s->cap_bytes = bytes + bytes / 2;
    CUDA_CHECK(cudaMallocAsync((void **)&s->dev, s->cap_bytes, s->stream));
    CUDA_CHECK(cudaMallocHost((void **)&s->host, s->cap_bytes));
}

/* The first few refusals are said, with the call and nvJPEG's status, so a
 * run whose every file goes to the CPU says why. */
static void note(gpu_jpeg *g, const char *what, int status) {
    long k = __atomic_add_fetch(&g->notes, 1, __ATOMIC_RELAXED);
    if (k <= 8)
        log_warn("nvJPEG (%s): %s%s%s: decoded on the CPU instead%s", g->what, what, status >= 0 ? ": " : "",
                 status >= 0 ? nvjpeg_status_name((nvjpegStatus_t)status) : "", k == 8 ? " (said 8 times)" : "");
}

/* The region decoded for a job: its window and up to 16 pixels (one iMCU)
 * more on each side, the left and top edges on a 16-pixel boundary, inside
 * the image: chroma upsampled across a region's edge differs from the
 * whole image's (jpeg.c keeps the same margin). */
static void region(const gpu_jpeg_job *j, int *x0, int *y0, int *x1, int *y1) {
    *x0 = j->x0 > 16 ? (j->x0 - 16) & ~15 : 0;
    *y0 = j->y0 > 16 ? (j->y0 - 16) & ~15 : 0;
    *x1 = j->x1 + 16 < j->w ? j->x1 + 16 : j->w;
    *y1 = j->y1 + 16 < j->h ? j->y1 + 16 : j->h;
}

static size_t window_bytes(const gpu_jpeg_job *j) {
    int x0, y0, x1, y1;
    region(j, &x0, &y0, &x1, &y1);
    return (size_t)(x1 - x0) * (size_t)(y1 - y0) * (size_t)j->c;
}

/* Whether the file ends in an end-of-image marker (trailing zero bytes
 * allowed): nvJPEG may decode a truncated file with filler where the CPU
 * decoder refuses it, so such files go to the CPU. */
static int ends_whole(const uint8_t *b, size_t len) {
    while (len > 2 && b[len - 1] == 0) len--;
    return len >= 4 && b[len - 2] == 0xFF && b[len - 1] == 0xD9;
}

/* Job j's parameters: output format and region. 1 when the decoder takes it. */
static int prepare(gpu_jpeg *g, state *s, gpu_jpeg_job *job, nvjpegDecodeParams_t p) {
    if (job->c != 1 && job->c != 3) return note(g, "only 1 or 3 channels are decoded here", -1), 0;
    if (!ends_whole(job->bytes, job->len)) return note(g, "no end-of-image marker (truncated?)", -1), 0;
    int x0, y0, x1, y1;
    region(job, &x0, &y0, &x1, &y1);
    nvjpegOutputFormat_t fmt = job->c == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
    nvjpegStatus_t st = nvjpegDecodeParamsSetOutputFormat(p, fmt);
    if (st == NVJPEG_STATUS_SUCCESS) st = nvjpegDecodeParamsSetROI(p, x0, y0, x1 - x0, y1 - y0);
    if (st != NVJPEG_STATUS_SUCCESS) return note(g, "nvjpegDecodeParamsSet*", (int)st), 0;
    int unsupported = 1; /* nvJPEG's convention: 0 when supported */
    if (g->hardware) {
        st = nvjpegJpegStreamParseHeader(g->h, job->bytes, job->len, s->jstream);
        if (st != NVJPEG_STATUS_SUCCESS) return note(g, "nvjpegJpegStreamParseHeader", (int)st), 0;
    } else {
        st = nvjpegJpegStreamParse(g->h, job->bytes, job->len, 0, 0, s->jstream);
        if (st != NVJPEG_STATUS_SUCCESS) return note(g, "nvjpegJpegStreamParse", (int)st), 0;
    }
    /* CMYK and other component counts: the CPU path's conversions */
    unsigned comps = 0;
    st = nvjpegJpegStreamGetComponentsNum(s->jstream, &comps);
    if (st != NVJPEG_STATUS_SUCCESS || (comps != 1 && comps != 3))
        return note(g, "a file with neither 1 nor 3 components", st != NVJPEG_STATUS_SUCCESS ? (int)st : -1), 0;
    st = g->hardware ? nvjpegDecodeBatchedSupportedEx(g->h, s->jstream, p, &unsupported)
                     : nvjpegDecoderJpegSupported(g->dec, s->jstream, p, &unsupported);
    if (st != NVJPEG_STATUS_SUCCESS) return note(g, g->hardware ? "nvjpegDecodeBatchedSupportedEx"
                                                                 : "nvjpegDecoderJpegSupported", (int)st), 0;
    if (unsupported) note(g, g->hardware ? "the hardware decoder does not take this file or region"
                                         : "the hybrid decoder does not take this file", -1);
    return unsupported == 0;
}

/* The decoupled API, image by image: 1 when it decoded into dst. The state's
 * one pinned buffer is written by the host stage and read by the previous
 * image's transfer, which is asynchronous: that transfer ends first. */
static int decode_one(gpu_jpeg *g, state *s, gpu_jpeg_job *job, nvjpegDecodeParams_t p, nvjpegImage_t *dst) {
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
    /* prepare() parsed this job's stream last; parse again: a batch's later
     * jobs have been parsed since. */
    const char *what = "nvjpegJpegStreamParse";
    nvjpegStatus_t st = nvjpegJpegStreamParse(g->h, job->bytes, job->len, 0, 0, s->jstream);
    if (st == NVJPEG_STATUS_SUCCESS) {
        what = "nvjpegDecodeJpegHost";
        st = nvjpegDecodeJpegHost(g->h, g->dec, s->js, p, s->jstream);
    }
    if (st == NVJPEG_STATUS_SUCCESS) {
        what = "nvjpegDecodeJpegTransferToDevice";
        st = nvjpegDecodeJpegTransferToDevice(g->h, g->dec, s->js, s->jstream, s->stream);
    }
    if (st == NVJPEG_STATUS_SUCCESS) {
        what = "nvjpegDecodeJpegDevice";
        st = nvjpegDecodeJpegDevice(g->h, g->dec, s->js, dst, s->stream);
    }
    if (st != NVJPEG_STATUS_SUCCESS) note(g, what, (int)st);
    return st == NVJPEG_STATUS_SUCCESS;
}

/* The hardware decoder on the m jobs in `take` (all of one output format):
 * 1 when the batch decoded. */
static int decode_batch(gpu_jpeg *g, state *s, gpu_jpeg_job *jobs, const int *take, int m, nvjpegImage_t *dst) {
    nvjpegOutputFormat_t fmt = jobs[take[0]].c == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
    if (s->batch != m || s->batch_fmt != fmt) {
        nvjpegStatus_t st = nvjpegDecodeBatchedInitialize(g->h, s->js, m, 1, fmt);
        if (st != NVJPEG_STATUS_SUCCESS) return note(g, "nvjpegDecodeBatchedInitialize", (int)st), 0;
        s->batch = m;
        s->batch_fmt = fmt;
    }
    const unsigned char **data = cnt_malloc((size_t)m * sizeof *data);
    size_t *lens = cnt_malloc((size_t)m * sizeof *lens);
    nvjpegDecodeParams_t *params = cnt_malloc((size_t)m * sizeof *params);
    for (int k = 0; k < m; k++) {
        data[k] = jobs[take[k]].bytes;
        lens[k] = jobs[take[k]].len;
        params[k] = s->params[take[k]];
    }
    nvjpegStatus_t st = nvjpegDecodeBatchedEx(g->h, s->js, data, lens, dst, params, s->stream);
    free(data);
    free(lens);
    free(params);
    if (st != NVJPEG_STATUS_SUCCESS) {
        s->batch = 0; /* a failed batch needs a fresh initialisation */
        note(g, m > 1 ? "nvjpegDecodeBatchedEx (the batch's files are tried one by one)" : "nvjpegDecodeBatchedEx",
             (int)st);
    }
    return st == NVJPEG_STATUS_SUCCESS;
}

void gpu_jpeg_decode(gpu_jpeg *g, gpu_jpeg_job *jobs, int n) {
    if (n < 1) return;
    if (g->reference) {
        decode_reference(g, jobs, n);
        return;
    }
    CUDA_CHECK(cudaSetDevice(g->device)); /* a loader thread starts on device 0 */
    state *s = acquire(g);
    size_t total = 0;
    for (int j = 0; j < n; j++) total += window_bytes(&jobs[j]);
    reserve(g, s, n, total);
    int *take = cnt_malloc((size_t)n * sizeof *take), m = 0;
    size_t *at = cnt_malloc((size_t)n * sizeof *at);
    nvjpegImage_t *dst = cnt_calloc((size_t)n, sizeof *dst);
    total = 0;
    for (int j = 0; j < n; j++) {
        jobs[j].ok = 0;
        memset(&jobs[j].win, 0, sizeof jobs[j].win);
        if (!prepare(g, s, &jobs[j], s->params[j])) continue;
        int x0, y0, x1, y1;
        region(&jobs[j], &x0, &y0, &x1, &y1);
        at[j] = total;
        dst[m].channel[0] = s->dev + total;
        dst[m].pitch[0] = (size_t)(x1 - x0) * (size_t)jobs[j].c;
        total += window_bytes(&jobs[j]);
        take[m++] = j;
    }
    int done = 0;
    if (m > 0 && g->hardware) {
        /* one output format a batch: the grey jobs, then the colour ones */
        int *part = cnt_malloc((size_t)m * sizeof *part);
        nvjpegImage_t *pdst = cnt_malloc((size_t)m * sizeof *pdst);
        for (int c = 1; c <= 3; c += 2) {
            int pm = 0;
            for (int k = 0; k < m; k++)
                if (jobs[take[k]].c == c) {
                    part[pm] = take[k];
                    pdst[pm++] = dst[k];
                }
            if (!pm) continue;
            if (decode_batch(g, s, jobs, part, pm, pdst)) {
                for (int k = 0; k < pm; k++) jobs[part[k]].ok = 1;
                done = 1;
            } else if (pm > 1) { /* one bad file fails the batch: the others one by one */
                for (int k = 0; k < pm; k++) done |= jobs[part[k]].ok = decode_batch(g, s, jobs, &part[k], 1,
                                                                                     &pdst[k]);
            }
        }
        free(part);
        free(pdst);
    } else {
        for (int k = 0; k < m; k++) done |= jobs[take[k]].ok = decode_one(g, s, &jobs[take[k]], s->params[take[k]],
                                                                          &dst[k]);
    }
    if (done) {
        CUDA_CHECK(cudaMemcpyAsync(s->host, s->dev, total, cudaMemcpyDeviceToHost, s->stream));
        CUDA_CHECK(cudaStreamSynchronize(s->stream));
    }
    for (int j = 0; j < n; j++) {
        gpu_jpeg_job *job = &jobs[j];
        if (!job->ok) {
            __atomic_add_fetch(&g->refused, 1, __ATOMIC_RELAXED);
            continue;
        }
        int x0, y0, x1, y1;
        region(job, &x0, &y0, &x1, &y1);
        size_t b = window_bytes(job);
        job->win.pix = cnt_malloc(b);
        memcpy(job->win.pix, s->host + at[j], b);
        job->win.stride = (size_t)(x1 - x0) * (size_t)job->c;
        job->win.x0 = x0;
        job->win.y0 = y0;
        job->win.w = x1 - x0;
        job->win.h = y1 - y0;
        job->win.sw = job->w;
        job->win.sh = job->h;
    }
    free(take);
    free(at);
    free(dst);
    release(g, s);
}

void gpu_jpeg_free(gpu_jpeg *g) {
    if (!g) return;
    if (g->reference) {
        free(g);
        return;
    }
    CUDA_CHECK(cudaSetDevice(g->device));
    for (state *s = g->all, *next; s; s = next) {
        next = s->next_all;
        for (int k = 0; k < s->cap_params; k++) NVJPEG_CHECK(nvjpegDecodeParamsDestroy(s->params[k]));
        free(s->params);
        NVJPEG_CHECK(nvjpegJpegStreamDestroy(s->jstream));
        NVJPEG_CHECK(nvjpegJpegStateDestroy(s->js));
        if (s->pinned_buf) NVJPEG_CHECK(nvjpegBufferPinnedDestroy(s->pinned_buf));
        if (s->device_buf) NVJPEG_CHECK(nvjpegBufferDeviceDestroy(s->device_buf));
        if (s->dev) CUDA_CHECK(cudaFreeAsync(s->dev, s->stream));
        CUDA_CHECK(cudaStreamSynchronize(s->stream));
        if (s->host) CUDA_CHECK(cudaFreeHost(s->host));
        CUDA_CHECK(cudaStreamDestroy(s->stream));
        free(s);
    }
    if (g->dec) NVJPEG_CHECK(nvjpegDecoderDestroy(g->dec));
    NVJPEG_CHECK(nvjpegDestroy(g->h));
    pthread_mutex_destroy(&g->mu);
    free(g);
}

#else /* no nvJPEG in this build: the reference decoder only */

int gpu_jpeg_built(void) { return 0; }

gpu_jpeg *gpu_jpeg_create(int device) {
    (void)device;
    cnt_err_set("this build has no nvJPEG (the CUDA backend with nvJPEG's header and library: `make deps` fetches "
                "them where the CUDA toolkit lacks them, then `make`)");
    return NULL;
}

void gpu_jpeg_decode(gpu_jpeg *g, gpu_jpeg_job *jobs, int n) { decode_reference(g, jobs, n); }

void gpu_jpeg_free(gpu_jpeg *g) { free(g); }

#endif
