/*
 * model/backend_cpu.c - the CPU compute backend: OpenBLAS sgemm for the matrix
 * work, plain C loops with OpenMP for everything else.
 *
 * Convolutions use one of three GEMM formulations (conv_plan_init picks):
 *   - direct: a 1x1 stride-1 unpadded convolution is one GEMM on the input;
 *   - shift: a stride-1 convolution with 8+ input channels runs one GEMM per
 *     filter tap over shifted views of a zero-padded copy of the input, so no
 *     im2col matrix is built (it cost as much as the GEMM itself at ResNet-20
 *     sizes); see the comment above conv_plan;
 *   - im2col: everything else (strided convolutions, stems with 1-3 channels),
 *     in tiles of output rows so the column buffer stays near L2 size.
 * The batch is cut into work groups: one image, or several images in one GEMM
 * when a single image makes the GEMM too small. Threads are used in one of two
 * ways: outer, when there are enough groups to share evenly, threads take whole
 * groups (`omp parallel for schedule(static)`) with their own scratch buffers,
 * and OpenBLAS, called inside a parallel region, runs on one thread; inner, with
 * too few groups (a batch of 1 or 2 ImageNet images), groups run one after the
 * other, the packing loops split channels across threads and OpenBLAS uses its
 * own OpenMP threads.
 *
 * Scratch buffers are per thread (thread-local), grown when a larger layer
 * comes and reused for every later call; nothing is allocated per image, and
 * the file keeps no other mutable state.
 *
 * Determinism: with a fixed thread count every op gives bitwise the same result
 * for the same inputs. Work is split with static schedules, no float atomics are
 * used, and every cross-thread reduction (the per-thread weight-gradient
 * partials) is summed in thread order. Per-channel statistics (batch norm, bias
 * gradients) are accumulated in double by one thread per channel.
 */
#include "model/backend.h"
#include "model/backend_impl.h"
#include "common/check.h"
#include "common/cpus.h"
#include "common/fileio.h"
#include "common/half.h"
#include "common/hostmem.h"
#include "common/rng.h"
#include "common/rng_hash.h"

#include <cblas.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elementwise loops shorter than this run on one thread: below it, waking the
 * team costs more than the loop. */
#define CPU_PAR_MIN 32768
/* Target size of one im2col tile (floats): about half of a 2 MiB L2. */
#define CPU_COL_TILE_FLOATS (256 * 1024)
/* Whole images are put side by side until a GEMM has at least this many columns. */
#define CPU_GROUP_MIN_COLS 512
/* The shifted algorithm needs this many input channels: each per-tap GEMM sums over C only. */
#define CPU_SHIFT_MIN_C 8
/* Filters with at least K*C values get images stacked until a GEMM has this many columns. */
#define CPU_SHIFT_STACK_KC (128 * 128)
#define CPU_SHIFT_STACK_COLS 256
/* Output columns per shifted GEMM (a block of the output stays in cache across the taps). */
#define CPU_SHIFT_CHUNK 1024

/* ------------------------------------------------------------------ memory */

static void *cpu_alloc(size_t bytes) {
    void *p = NULL;
    int rc = posix_memalign(&p, 64, bytes ? bytes : 1);
    if (rc != 0 || !p) cnt_fatal("cpu backend: out of memory allocating %zu bytes", bytes);
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(void *ptr) { free(ptr); }

/* Host <-> "device" moves are plain copies, on the calling thread: the data
 * loader may call them from its own threads. */
static void cpu_transfer(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

/* Large device copies and clears are split across threads: one core does not
 * saturate memory. */
#define CPU_COPY_BLOCK ((size_t)1 << 18)

static void cpu_copy(void *dst, const void *src, size_t bytes) {
    size_t blocks = (bytes + CPU_COPY_BLOCK - 1) / CPU_COPY_BLOCK;
#pragma omp parallel for schedule(static) if (blocks >= 4)
    for (size_t b = 0; b < blocks; b++) {
        size_t off = b * CPU_COPY_BLOCK, len = bytes - off < CPU_COPY_BLOCK ? bytes - off : CPU_COPY_BLOCK;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

static void cpu_zero(void *dst, size_t bytes) {
    size_t blocks = (bytes + CPU_COPY_BLOCK - 1) / CPU_COPY_BLOCK;
#pragma omp parallel for schedule(static) if (blocks >= 4)
    for (size_t b = 0; b < blocks; b++) {
        size_t off = b * CPU_COPY_BLOCK, len = bytes - off < CPU_COPY_BLOCK ? bytes - off : CPU_COPY_BLOCK;
        memset((char *)dst + off, 0, len);
    }
}

static void cpu_sync(void) {}

/* Per-thread scratch (cpu_buf, model/backend_impl.h), grown on demand and
 * kept for the thread's lifetime. */
typedef struct cpu_scratch {
    cpu_buf col;  /* [CRS, columns] im2col tile, or [C, CS] padded input (shift) */
    cpu_buf tmp;  /* [K, columns] outputs / output gradients of a group of images */
    cpu_buf dw;   /* [K*CRS] this thread's weight-gradient partial */
    cpu_buf taps; /* [RS, K, C] the filter split by tap (shift algorithm) */
    cpu_buf op_a; /* bf16/fp16 math: the rounded copies of an op's two operands */
    cpu_buf op_b;
    cpu_buf lay[4]; /* NHWC layout: NCHW copies of an op's tensors (see lay_* below) */
} cpu_scratch;

static _Thread_local cpu_scratch tls_scratch;

float *cpu_buf_get(cpu_buf *b, size_t floats) {
    if (b->cap < floats) {
        free(b->data);
        void *p = NULL;
        if (posix_memalign(&p, 64, floats * sizeof(float)) != 0 || !p)
            cnt_fatal("cpu backend: out of memory allocating %zu bytes of scratch", floats * sizeof(float));
        b->data = p;
        b->cap = floats;
    }
    return b->data;
}

/* ------------------------------------------------------------- convolution */

typedef enum conv_algo {
    CONV_ALGO_DIRECT, /* 1x1, stride 1, no padding: x[n] is its own im2col matrix [C, HW] */
    CONV_ALGO_SHIFT,  /* stride 1: one GEMM per filter tap over a shifted padded copy */
    CONV_ALGO_IM2COL  /* everything else: im2col + one GEMM */
} conv_algo;

/*
 * The shifted algorithm (stride 1, no im2col). Each channel of an image is
 * copied into a zero-padded buffer with row pitch Wp >= W + pad_w: image row h
 * starts at (pad_h + h)*Wp + pad_w, and the zeros at the end of a row double as
 * the left padding of the next. Output (p, q) gets the flat index j = p*Wp + q
 * and reads padded input (p + r, q + s), which sits at j + r*Wp + s. So for each
 * filter tap (r, s) the whole output is one GEMM over a contiguous shifted view:
 *     out[K, L] += w_rs[K, C] * buf[C, r*Wp + s + (0 .. L)]
 * A group of images is stacked vertically, image b from buffer row b*Hs on,
 * Hs = max(H + pad_h, P): the zero rows between two images serve as the bottom
 * padding of one and the top padding of the next, and output row b*Hs + p is
 * row p of image b. L = ((nb - 1)*Hs + P)*Wp. Columns q >= Q and the rows
 * between images are junk: forward drops them, backward gives them a zero
 * gradient so they add nothing. A channel of the buffer holds
 * ((nb - 1)*Hs + H + 2*pad_h)*Wp values plus S - 1 read by the last junk columns.
 */

/* How a convolution call is split into work (see the file comment). */
typedef struct conv_plan {
    conv_algo algo;
    int CRS, RS, PQ;
    size_t CHW, KPQ;
    int group;     /* images per GEMM (the last group may be smaller) */
    int tile_rows; /* im2col: output rows per tile when group == 1 */
    int n_groups;
    int outer;     /* 1: threads take whole groups; 0: threads work inside each group */
    int Wp, Hs;    /* shift: row pitch of the padded buffer, rows per stacked image */
    int chunk;     /* shift: output columns per GEMM in forward and backward-data */
} conv_plan;

/* Shift: output columns of a group of nb images. */
static int shift_cols(const conv_params *p, const conv_plan *pl, int nb) {
    return ((nb - 1) * pl->Hs + p->P) * pl->Wp;
}

/* Shift: floats per channel of the padded buffer of nb images (a multiple of 16). */
static size_t shift_chan_stride(const conv_params *p, const conv_plan *pl, int nb) {
    size_t n = (size_t)((nb - 1) * pl->Hs + p->H + 2 * p->pad_h) * pl->Wp + p->S - 1;
    return (n + 15) & ~(size_t)15;
}

static void conv_plan_init(const conv_params *p, conv_plan *pl) {
    CNT_ASSERT(p->N >= 1 && p->C >= 1 && p->K >= 1 && p->H >= 1 && p->W >= 1);
    CNT_ASSERT(p->R >= 1 && p->S >= 1 && p->stride_h >= 1 && p->stride_w >= 1);
    CNT_ASSERT(p->pad_h >= 0 && p->pad_w >= 0);
    CNT_ASSERT(p->P == (p->H + 2 * p->pad_h - p->R) / p->stride_h + 1 && p->P >= 1);
    CNT_ASSERT(p->Q == (p->W + 2 * p->pad_w - p->S) / p->stride_w + 1 && p->Q >= 1);
    int threads = omp_get_max_threads();
    memset(pl, 0, sizeof *pl);
    pl->RS = p->R * p->S;
    pl->CRS = p->C * pl->RS;
    pl->PQ = p->P * p->Q;
    pl->CHW = (size_t)p->C * p->H * p->W;
    pl->KPQ = (size_t)p->K * pl->PQ;
    int stride1 = p->stride_h == 1 && p->stride_w == 1;
    int Wp = p->W + p->pad_w > p->Q ? p->W + p->pad_w : p->Q;
    int want = 1; /* images per GEMM for efficiency */
    if (stride1 && pl->RS == 1 && p->pad_h == 0 && p->pad_w == 0) {
        pl->algo = CONV_ALGO_DIRECT;
    } else if (stride1 && p->C >= CPU_SHIFT_MIN_C && 10 * p->Q >= 7 * Wp) {
        /* a few channels make the per-tap GEMMs too thin, and narrow images
         * waste too many junk columns: those go to im2col */
        pl->algo = CONV_ALGO_SHIFT;
        pl->Wp = Wp;
        pl->Hs = p->H + p->pad_h > p->P ? p->H + p->pad_h : p->P;
        /* large filters are streamed once per GEMM: stack small images so the
         * GEMM has enough columns to pay for it. Small filters stay in cache,
         * and there one image per GEMM measured fastest. */
        if ((size_t)p->K * p->C >= CPU_SHIFT_STACK_KC)
            while (want < p->N && shift_cols(p, pl, want) < CPU_SHIFT_STACK_COLS) want++;
    } else {
        pl->algo = CONV_ALGO_IM2COL;
        size_t row_floats = (size_t)pl->CRS * p->Q;
        size_t rows = CPU_COL_TILE_FLOATS / row_floats;
        /* keep at least CPU_GROUP_MIN_COLS columns per GEMM even when that
         * overshoots the cache budget: a thin GEMM loses more than the cache saves */
        size_t min_rows = ((size_t)CPU_GROUP_MIN_COLS + p->Q - 1) / p->Q;
        if (rows < min_rows) rows = min_rows;
        if (rows > (size_t)p->P) rows = (size_t)p->P;
        pl->tile_rows = (int)rows;
        if (pl->tile_rows == p->P && pl->PQ < CPU_GROUP_MIN_COLS)
            want = (CPU_GROUP_MIN_COLS + pl->PQ - 1) / pl->PQ;
    }
    /* as many groups as efficiency wants but at least one per thread (threads
     * sharing whole groups beat threads sharing one GEMM), rounded up to a
     * multiple of the thread count when there are enough images, then evened out */
    int fair = p->N / threads;
    if (want > fair) want = fair > 1 ? fair : 1;
    int n_groups = (p->N + want - 1) / want;
    if (n_groups >= threads) {
        int rounded = (n_groups + threads - 1) / threads * threads;
        if (rounded <= p->N) n_groups = rounded;
    }
    pl->group = (p->N + n_groups - 1) / n_groups;
    pl->n_groups = (p->N + pl->group - 1) / pl->group;
    pl->outer = threads > 1 && (pl->n_groups % threads == 0 || pl->n_groups >= 4 * threads);
    if (pl->algo == CONV_ALGO_SHIFT) {
        int L = shift_cols(p, pl, pl->group);
        int n_chunks = (L + CPU_SHIFT_CHUNK - 1) / CPU_SHIFT_CHUNK;
        pl->chunk = (L + n_chunks - 1) / n_chunks;
    }
}

/* ---- im2col / col2im ---- */

/* col[(c*R + r)*S + s][(p - p0)*Q + q] = x[c][p*sh - ph + r][q*sw - pw + s] (0 outside),
 * for channels [c0, c1) and output rows [p0, p1); ld is col's row stride. */
static void im2col_channels(const conv_params *p, const float *x, int c0, int c1, int p0, int p1, float *col,
                            size_t ld) {
    const int H = p->H, W = p->W, Q = p->Q, R = p->R, S = p->S;
    const int sh = p->stride_h, sw = p->stride_w, ph = p->pad_h, pw = p->pad_w;
    for (int c = c0; c < c1; c++) {
        const float *xc = x + (size_t)c * H * W;
        for (int r = 0; r < R; r++) {
            for (int s = 0; s < S; s++) {
                float *row = col + ((size_t)(c * R + r) * S + s) * ld;
                int off = s - pw;
                /* output columns whose input column q*sw + off lies inside [0, W) */
                int q_lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int q_hi = W - 1 - off < 0 ? 0 : (W - 1 - off) / sw + 1;
                if (q_hi > Q) q_hi = Q;
                if (q_lo > q_hi) q_lo = q_hi;
                for (int op = p0; op < p1; op++) {
                    float *dst = row + (size_t)(op - p0) * Q;
                    int h = op * sh - ph + r;
                    if (h < 0 || h >= H) {
                        memset(dst, 0, (size_t)Q * sizeof(float));
                        continue;
                    }
                    const float *src = xc + (size_t)h * W + off;
                    for (int q = 0; q < q_lo; q++) dst[q] = 0.0f;
                    if (sw == 1) {
                        memcpy(dst + q_lo, src + q_lo, (size_t)(q_hi - q_lo) * sizeof(float));
                    } else {
                        for (int q = q_lo; q < q_hi; q++) dst[q] = src[(size_t)q * sw];
                    }
                    for (int q = q_hi; q < Q; q++) dst[q] = 0.0f;
                }
            }
        }
    }
}

/* The transpose of im2col_channels: x[c][h][w] += every col entry that was read from it. */
static void col2im_channels(const conv_params *p, const float *col, size_t ld, int c0, int c1, int p0, int p1,
                            float *x) {
    const int H = p->H, W = p->W, Q = p->Q, R = p->R, S = p->S;
    const int sh = p->stride_h, sw = p->stride_w, ph = p->pad_h, pw = p->pad_w;
    for (int c = c0; c < c1; c++) {
        float *xc = x + (size_t)c * H * W;
        for (int r = 0; r < R; r++) {
            for (int s = 0; s < S; s++) {
                const float *row = col + ((size_t)(c * R + r) * S + s) * ld;
                int off = s - pw;
                int q_lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int q_hi = W - 1 - off < 0 ? 0 : (W - 1 - off) / sw + 1;
                if (q_hi > Q) q_hi = Q;
                for (int op = p0; op < p1; op++) {
                    int h = op * sh - ph + r;
                    if (h < 0 || h >= H) continue;
                    const float *src = row + (size_t)(op - p0) * Q;
                    float *dst = xc + (size_t)h * W + off;
                    if (sw == 1) {
                        for (int q = q_lo; q < q_hi; q++) dst[q] += src[q];
                    } else {
                        for (int q = q_lo; q < q_hi; q++) dst[(size_t)q * sw] += src[q];
                    }
                }
            }
        }
    }
}

/* im2col of one image's output rows [p0, p1); par: split channels across threads. */
static void im2col_rows(const conv_params *p, const float *x, int p0, int p1, float *col, size_t ld, int par) {
#pragma omp parallel for schedule(static) if (par)
    for (int c = 0; c < p->C; c++) im2col_channels(p, x, c, c + 1, p0, p1, col, ld);
}

static void col2im_rows(const conv_params *p, const float *col, size_t ld, int p0, int p1, float *x, int par) {
#pragma omp parallel for schedule(static) if (par)
    for (int c = 0; c < p->C; c++) col2im_channels(p, col, ld, c, c + 1, p0, p1, x);
}

/* ---- the shifted layout ---- */

/* buf[c] = images x[0 .. nb)[c] in the stacked padded layout, zeros around them. */
static void shift_pack_input(const conv_params *p, const conv_plan *pl, const float *x, int nb, float *buf, int par) {
    size_t cs = shift_chan_stride(p, pl, nb);
#pragma omp parallel for schedule(static) if (par)
    for (int c = 0; c < p->C; c++) {
        float *bc = buf + (size_t)c * cs;
        memset(bc, 0, cs * sizeof(float));
        for (int b = 0; b < nb; b++) {
            const float *xc = x + (size_t)b * pl->CHW + (size_t)c * p->H * p->W;
            float *dst = bc + (size_t)(b * pl->Hs + p->pad_h) * pl->Wp + p->pad_w;
            for (int h = 0; h < p->H; h++)
                memcpy(dst + (size_t)h * pl->Wp, xc + (size_t)h * p->W, (size_t)p->W * sizeof(float));
        }
    }
}

/* x[0 .. nb)[c] (+)= the image parts of buf[c]: the inverse of shift_pack_input. */
static void shift_unpack_input(const conv_params *p, const conv_plan *pl, const float *buf, int nb, float *x,
                               int accumulate, int par) {
    size_t cs = shift_chan_stride(p, pl, nb);
#pragma omp parallel for schedule(static) if (par)
    for (int c = 0; c < p->C; c++) {
        for (int b = 0; b < nb; b++) {
            float *xc = x + (size_t)b * pl->CHW + (size_t)c * p->H * p->W;
            const float *bc = buf + (size_t)c * cs + (size_t)(b * pl->Hs + p->pad_h) * pl->Wp + p->pad_w;
            for (int h = 0; h < p->H; h++) {
                const float *src = bc + (size_t)h * pl->Wp;
                float *dst = xc + (size_t)h * p->W;
                if (accumulate) {
#pragma omp simd
                    for (int w = 0; w < p->W; w++) dst[w] += src[w];
                } else {
                    memcpy(dst, src, (size_t)p->W * sizeof(float));
                }
            }
        }
    }
}

/* buf[K, L] = t[0 .. nb)[K, P, Q] laid out as the stacked output, zeros in the junk. */
static void shift_pack_output(const conv_params *p, const conv_plan *pl, const float *t, int nb, float *buf,
                              int par) {
    int L = shift_cols(p, pl, nb), rows = L / pl->Wp;
#pragma omp parallel for schedule(static) if (par)
    for (int k = 0; k < p->K; k++) {
        for (int row = 0; row < rows; row++) {
            float *dst = buf + (size_t)k * L + (size_t)row * pl->Wp;
            int b = row / pl->Hs, op = row % pl->Hs, q0 = 0;
            if (op < p->P) {
                memcpy(dst, t + b * pl->KPQ + (size_t)k * pl->PQ + (size_t)op * p->Q, (size_t)p->Q * sizeof(float));
                q0 = p->Q;
            }
            for (int q = q0; q < pl->Wp; q++) dst[q] = 0.0f;
        }
    }
}

/* t[0 .. nb)[K, P, Q] = the valid part of the stacked output buf[K, L]. */
static void shift_unpack_output(const conv_params *p, const conv_plan *pl, const float *buf, int nb, float *t,
                                int par) {
    int L = shift_cols(p, pl, nb);
#pragma omp parallel for schedule(static) if (par)
    for (int k = 0; k < p->K; k++)
        for (int b = 0; b < nb; b++)
            for (int op = 0; op < p->P; op++)
                memcpy(t + b * pl->KPQ + (size_t)k * pl->PQ + (size_t)op * p->Q,
                       buf + (size_t)k * L + (size_t)(b * pl->Hs + op) * pl->Wp, (size_t)p->Q * sizeof(float));
}

/* wt[r*S + s][K, C] = w[K, C, r, s]: one [K, C] matrix per filter tap. */
static void shift_split_taps(const conv_params *p, const conv_plan *pl, const float *w, float *wt) {
    size_t KC = (size_t)p->K * p->C;
    for (size_t kc = 0; kc < KC; kc++)
        for (int rs = 0; rs < pl->RS; rs++) wt[(size_t)rs * KC + kc] = w[kc * pl->RS + rs];
}

static size_t shift_tap_offset(const conv_params *p, const conv_plan *pl, int rs) {
    return (size_t)(rs / p->S) * pl->Wp + (size_t)(rs % p->S);
}

/* ---- the three passes, one group of images at a time ---- */

static void sgemm_rm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                lda, B, ldb, beta, C, ldc);
}

/* tmp[k][b*PQ + i] = t[n0 + b][k][i]: a group's [K, PQ] slices side by side. */
static void group_gather(const conv_plan *pl, int K, const float *t, int n0, int nb, float *tmp) {
    size_t ld = (size_t)nb * pl->PQ;
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < K; k++)
            memcpy(tmp + k * ld + (size_t)b * pl->PQ, t + (size_t)(n0 + b) * pl->KPQ + (size_t)k * pl->PQ,
                   (size_t)pl->PQ * sizeof(float));
}

static int group_size(const conv_params *p, const conv_plan *pl, int g) {
    int left = p->N - g * pl->group;
    return left < pl->group ? left : pl->group;
}

/* wt: the filter split by tap (shift only). */
static void conv_fwd_group(const conv_params *p, const conv_plan *pl, const float *x, const float *w,
                           const float *wt, float *y, int g, int par) {
    cpu_scratch *sc = &tls_scratch;
    int n0 = g * pl->group, nb = group_size(p, pl, g);
    const float *xn = x + (size_t)n0 * pl->CHW;
    float *yn = y + (size_t)n0 * pl->KPQ;
    if (pl->algo == CONV_ALGO_DIRECT) {
        /* y[n][K, HW] = w[K, C] * x[n][C, HW] */
        sgemm_rm(0, 0, p->K, pl->PQ, p->C, w, p->C, xn, pl->PQ, 0.0f, yn, pl->PQ);
    } else if (pl->algo == CONV_ALGO_SHIFT) {
        int L = shift_cols(p, pl, nb);
        size_t cs = shift_chan_stride(p, pl, nb), KC = (size_t)p->K * p->C;
        float *buf = cpu_buf_get(&sc->col, (size_t)p->C * cs);
        float *out = cpu_buf_get(&sc->tmp, (size_t)p->K * L);
        shift_pack_input(p, pl, xn, nb, buf, par);
        /* column blocks first, so each block of out stays in cache across the taps */
        for (int j0 = 0; j0 < L; j0 += pl->chunk) {
            int cols = L - j0 < pl->chunk ? L - j0 : pl->chunk;
            for (int rs = 0; rs < pl->RS; rs++)
                /* out[K, cols] += w_rs[K, C] * buf[C, shifted cols] */
                sgemm_rm(0, 0, p->K, cols, p->C, wt + rs * KC, p->C, buf + shift_tap_offset(p, pl, rs) + j0,
                         (int)cs, rs ? 1.0f : 0.0f, out + j0, L);
        }
        shift_unpack_output(p, pl, out, nb, yn, par);
    } else if (nb == 1) {
        float *col = cpu_buf_get(&sc->col, (size_t)pl->CRS * pl->tile_rows * p->Q);
        for (int p0 = 0; p0 < p->P; p0 += pl->tile_rows) {
            int p1 = p0 + pl->tile_rows < p->P ? p0 + pl->tile_rows : p->P;
            int cols = (p1 - p0) * p->Q;
            im2col_rows(p, xn, p0, p1, col, (size_t)cols, par);
            /* y[n][K, rows p0..p1] = w[K, CRS] * col[CRS, cols] */
            sgemm_rm(0, 0, p->K, cols, pl->CRS, w, pl->CRS, col, cols, 0.0f, yn + (size_t)p0 * p->Q, pl->PQ);
        }
    } else {
        size_t ld = (size_t)nb * pl->PQ;
        float *col = cpu_buf_get(&sc->col, (size_t)pl->CRS * ld);
        float *tmp = cpu_buf_get(&sc->tmp, (size_t)p->K * ld);
        for (int b = 0; b < nb; b++) im2col_rows(p, xn + b * pl->CHW, 0, p->P, col + (size_t)b * pl->PQ, ld, par);
        /* tmp[K, nb*PQ] = w[K, CRS] * col[CRS, nb*PQ] */
        sgemm_rm(0, 0, p->K, (int)ld, pl->CRS, w, pl->CRS, col, (int)ld, 0.0f, tmp, (int)ld);
        for (int b = 0; b < nb; b++)
            for (int k = 0; k < p->K; k++)
                memcpy(yn + b * pl->KPQ + (size_t)k * pl->PQ, tmp + k * ld + (size_t)b * pl->PQ,
                       (size_t)pl->PQ * sizeof(float));
    }
}

/* The filter split by tap, in the calling thread's scratch; NULL unless shift. */
static const float *conv_taps(const conv_params *p, const conv_plan *pl, const float *w) {
    if (pl->algo != CONV_ALGO_SHIFT) return NULL;
    float *wt = cpu_buf_get(&tls_scratch.taps, (size_t)p->K * pl->CRS);
    shift_split_taps(p, pl, w, wt);
    return wt;
}

static void f32_conv_fwd(const conv_params *p, const float *x, const float *w, float *y) {
    conv_plan pl;
    conv_plan_init(p, &pl);
    const float *wt = conv_taps(p, &pl, w);
    if (pl.outer) {
#pragma omp parallel for schedule(static)
        for (int g = 0; g < pl.n_groups; g++) conv_fwd_group(p, &pl, x, w, wt, y, g, 0);
    } else {
        for (int g = 0; g < pl.n_groups; g++) conv_fwd_group(p, &pl, x, w, wt, y, g, 1);
    }
}

static void conv_bwd_data_group(const conv_params *p, const conv_plan *pl, const float *dy, const float *w,
                                const float *wt, float *dx, int accumulate, int g, int par) {
    cpu_scratch *sc = &tls_scratch;
    int n0 = g * pl->group, nb = group_size(p, pl, g);
    const float *dyn = dy + (size_t)n0 * pl->KPQ;
    float *dxn = dx + (size_t)n0 * pl->CHW;
    if (pl->algo == CONV_ALGO_DIRECT) {
        /* dx[n][C, HW] (+)= w^T[C, K] * dy[n][K, HW] */
        sgemm_rm(1, 0, p->C, pl->PQ, p->K, w, p->C, dyn, pl->PQ, accumulate ? 1.0f : 0.0f, dxn, pl->PQ);
    } else if (pl->algo == CONV_ALGO_SHIFT) {
        int L = shift_cols(p, pl, nb);
        size_t cs = shift_chan_stride(p, pl, nb), KC = (size_t)p->K * p->C;
        float *buf = cpu_buf_get(&sc->col, (size_t)p->C * cs);
        float *gout = cpu_buf_get(&sc->tmp, (size_t)p->K * L);
        shift_pack_output(p, pl, dyn, nb, gout, par);
#pragma omp parallel for schedule(static) if (par)
        for (int c = 0; c < p->C; c++) memset(buf + (size_t)c * cs, 0, cs * sizeof(float));
        for (int j0 = 0; j0 < L; j0 += pl->chunk) {
            int cols = L - j0 < pl->chunk ? L - j0 : pl->chunk;
            for (int rs = 0; rs < pl->RS; rs++)
                /* buf[C, shifted cols] += w_rs^T[C, K] * gout[K, cols] */
                sgemm_rm(1, 0, p->C, cols, p->K, wt + rs * KC, p->C, gout + j0, L, 1.0f,
                         buf + shift_tap_offset(p, pl, rs) + j0, (int)cs);
        }
        shift_unpack_input(p, pl, buf, nb, dxn, accumulate, par);
    } else if (nb == 1) {
        if (!accumulate) memset(dxn, 0, pl->CHW * sizeof(float));
        float *col = cpu_buf_get(&sc->col, (size_t)pl->CRS * pl->tile_rows * p->Q);
        for (int p0 = 0; p0 < p->P; p0 += pl->tile_rows) {
            int p1 = p0 + pl->tile_rows < p->P ? p0 + pl->tile_rows : p->P;
            int cols = (p1 - p0) * p->Q;
            /* col[CRS, cols] = w^T[CRS, K] * dy[n][K, rows p0..p1] */
            sgemm_rm(1, 0, pl->CRS, cols, p->K, w, pl->CRS, dyn + (size_t)p0 * p->Q, pl->PQ, 0.0f, col, cols);
            col2im_rows(p, col, (size_t)cols, p0, p1, dxn, par);
        }
    } else {
        size_t ld = (size_t)nb * pl->PQ;
        float *col = cpu_buf_get(&sc->col, (size_t)pl->CRS * ld);
        float *tmp = cpu_buf_get(&sc->tmp, (size_t)p->K * ld);
        group_gather(pl, p->K, dy, n0, nb, tmp);
        /* col[CRS, nb*PQ] = w^T[CRS, K] * tmp[K, nb*PQ] */
        sgemm_rm(1, 0, pl->CRS, (int)ld, p->K, w, pl->CRS, tmp, (int)ld, 0.0f, col, (int)ld);
        for (int b = 0; b < nb; b++) {
            if (!accumulate) memset(dxn + b * pl->CHW, 0, pl->CHW * sizeof(float));
            col2im_rows(p, col + (size_t)b * pl->PQ, ld, 0, p->P, dxn + b * pl->CHW, par);
        }
    }
}

static void f32_conv_bwd_data(const conv_params *p, const float *dy, const float *w, float *dx, int accumulate) {
    conv_plan pl;
    conv_plan_init(p, &pl);
    const float *wt = conv_taps(p, &pl, w);
    if (pl.outer) {
#pragma omp parallel for schedule(static)
        for (int g = 0; g < pl.n_groups; g++) conv_bwd_data_group(p, &pl, dy, w, wt, dx, accumulate, g, 0);
    } else {
        for (int g = 0; g < pl.n_groups; g++) conv_bwd_data_group(p, &pl, dy, w, wt, dx, accumulate, g, 1);
    }
}

/* part = beta * part + this group's weight gradient, in the algorithm's own
 * layout (see wgrad_reduce): [RS][K][C] for shift, [CRS][K] otherwise, the
 * orientations in which the GEMMs run fastest. */
static void conv_bwd_filter_group(const conv_params *p, const conv_plan *pl, const float *x, const float *dy,
                                  float *part, float beta, int g, int par) {
    cpu_scratch *sc = &tls_scratch;
    int n0 = g * pl->group, nb = group_size(p, pl, g);
    const float *xn = x + (size_t)n0 * pl->CHW;
    const float *dyn = dy + (size_t)n0 * pl->KPQ;
    if (pl->algo == CONV_ALGO_DIRECT) {
        /* part[C, K] += x[n][C, HW] * dy[n]^T[HW, K] */
        sgemm_rm(0, 1, p->C, p->K, pl->PQ, xn, pl->PQ, dyn, pl->PQ, beta, part, p->K);
    } else if (pl->algo == CONV_ALGO_SHIFT) {
        int L = shift_cols(p, pl, nb);
        size_t cs = shift_chan_stride(p, pl, nb), KC = (size_t)p->K * p->C;
        float *buf = cpu_buf_get(&sc->col, (size_t)p->C * cs);
        float *gout = cpu_buf_get(&sc->tmp, (size_t)p->K * L);
        shift_pack_input(p, pl, xn, nb, buf, par);
        shift_pack_output(p, pl, dyn, nb, gout, par);
        for (int rs = 0; rs < pl->RS; rs++)
            /* part_rs[K, C] += gout[K, L] * buf^T[shifted L, C] */
            sgemm_rm(0, 1, p->K, p->C, L, gout, L, buf + shift_tap_offset(p, pl, rs), (int)cs, beta,
                     part + rs * KC, p->C);
    } else if (nb == 1) {
        float *col = cpu_buf_get(&sc->col, (size_t)pl->CRS * pl->tile_rows * p->Q);
        for (int p0 = 0; p0 < p->P; p0 += pl->tile_rows) {
            int p1 = p0 + pl->tile_rows < p->P ? p0 + pl->tile_rows : p->P;
            int cols = (p1 - p0) * p->Q;
            im2col_rows(p, xn, p0, p1, col, (size_t)cols, par);
            /* part[CRS, K] += col[CRS, cols] * dy[n]^T[rows p0..p1, K] */
            sgemm_rm(0, 1, pl->CRS, p->K, cols, col, cols, dyn + (size_t)p0 * p->Q, pl->PQ, beta, part, p->K);
            beta = 1.0f;
        }
    } else {
        size_t ld = (size_t)nb * pl->PQ;
        float *col = cpu_buf_get(&sc->col, (size_t)pl->CRS * ld);
        float *tmp = cpu_buf_get(&sc->tmp, (size_t)p->K * ld);
        group_gather(pl, p->K, dy, n0, nb, tmp);
        for (int b = 0; b < nb; b++) im2col_rows(p, xn + b * pl->CHW, 0, p->P, col + (size_t)b * pl->PQ, ld, par);
        /* part[CRS, K] += col[CRS, nb*PQ] * tmp^T[nb*PQ, K] */
        sgemm_rm(0, 1, pl->CRS, p->K, (int)ld, col, (int)ld, tmp, (int)ld, beta, part, p->K);
    }
}

/* dw[k, :] = sum over t < nt, in order, of parts[t] (each in the layout
 * conv_bwd_filter_group writes), for filters k in [k0, k1). */
static void wgrad_reduce(const conv_params *p, const conv_plan *pl, float *const *parts, int nt, float *dw, int k0,
                         int k1) {
    size_t KC = (size_t)p->K * p->C;
    for (int k = k0; k < k1; k++) {
        float *dk = dw + (size_t)k * pl->CRS;
        for (int c = 0; c < p->C; c++) {
            for (int rs = 0; rs < pl->RS; rs++) {
                /* shift: [RS][K][C]; the others: [CRS][K] */
                size_t src = pl->algo == CONV_ALGO_SHIFT ? rs * KC + (size_t)k * p->C + c
                                                         : ((size_t)c * pl->RS + rs) * p->K + k;
                float s = parts[0][src];
                for (int t = 1; t < nt; t++) s += parts[t][src];
                dk[c * pl->RS + rs] = s;
            }
        }
    }
}

static void f32_conv_bwd_filter(const conv_params *p, const float *x, const float *dy, float *dw) {
    conv_plan pl;
    conv_plan_init(p, &pl);
    size_t wsize = (size_t)p->K * pl.CRS;
    if (!pl.outer) {
        float *part = cpu_buf_get(&tls_scratch.dw, wsize);
        for (int g = 0; g < pl.n_groups; g++) conv_bwd_filter_group(p, &pl, x, dy, part, g ? 1.0f : 0.0f, g, 1);
#pragma omp parallel for schedule(static) if (wsize >= CPU_PAR_MIN)
        for (int k = 0; k < p->K; k++) wgrad_reduce(p, &pl, &part, 1, dw, k, k + 1);
        return;
    }
    int threads = omp_get_max_threads();
    float **parts = cnt_calloc((size_t)threads, sizeof *parts);
#pragma omp parallel num_threads(threads)
    {
        int nt = omp_get_num_threads();
        float *part = cpu_buf_get(&tls_scratch.dw, wsize);
        memset(part, 0, wsize * sizeof(float));
        parts[omp_get_thread_num()] = part;
#pragma omp for schedule(static)
        for (int g = 0; g < pl.n_groups; g++) conv_bwd_filter_group(p, &pl, x, dy, part, 1.0f, g, 0);
        /* the implicit barrier above: every partial is complete before the sum.
         * The sum runs in thread order, so the result depends only on nt. */
#pragma omp for schedule(static)
        for (int k = 0; k < p->K; k++) wgrad_reduce(p, &pl, parts, nt, dw, k, k + 1);
    }
    free(parts);
}

/* -------------------------------------------------------------------- bias */

static void cpu_bias_fwd(int N, int C, int HW, const float *b, float *y) {
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 1);
    size_t total = (size_t)N * C * HW;
#pragma omp parallel for schedule(static) if (total >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            float *yp = y + ((size_t)n * C + c) * HW;
            float v = b[c];
#pragma omp simd
            for (int i = 0; i < HW; i++) yp[i] += v;
        }
    }
}

static void cpu_bias_bwd(int N, int C, int HW, const float *dy, float *db) {
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 1);
    size_t total = (size_t)N * C * HW;
#pragma omp parallel for schedule(static) if (total >= CPU_PAR_MIN)
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int n = 0; n < N; n++) {
            const float *dp = dy + ((size_t)n * C + c) * HW;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < HW; i++) s += dp[i];
        }
        db[c] = (float)s;
    }
}

/* -------------------------------------------------------------- batch norm */

/* One normalised row of batch norm, with what the fusion puts after it:
 * y = act((x - m) * scale + b + z), z where zp is not NULL, ReLU where relu
 * (relu_fwd's rule). Each value takes the steps the separate ops take, in
 * their order, so fused and separate give the same bits. */
static void bn_apply_row(int n, const float *xp, const float *zp, int relu, float m, float scale, float b,
                         float *yp) {
    if (zp && relu) {
#pragma omp simd
        for (int i = 0; i < n; i++) {
            float v = (xp[i] - m) * scale + b + zp[i];
            yp[i] = v < 0.0f ? 0.0f : v;
        }
    } else if (zp) {
#pragma omp simd
        for (int i = 0; i < n; i++) yp[i] = (xp[i] - m) * scale + b + zp[i];
    } else if (relu) {
#pragma omp simd
        for (int i = 0; i < n; i++) {
            float v = (xp[i] - m) * scale + b;
            yp[i] = v < 0.0f ? 0.0f : v;
        }
    } else {
#pragma omp simd
        for (int i = 0; i < n; i++) yp[i] = (xp[i] - m) * scale + b;
    }
}

/* bn_act_fwd_train in NCHW (z NULL and relu 0: bn_fwd_train). */
static void cpu_bn_fwd_train(int N, int C, int HW, const float *x, const float *z, int relu, const float *gamma,
                             const float *beta, float *y, float *running_mean, float *running_var, float momentum,
                             float eps, float *save_mean, float *save_invstd) {
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1);
    size_t M = (size_t)N * HW;
#pragma omp parallel for schedule(static) if (M * C >= CPU_PAR_MIN)
    for (int c = 0; c < C; c++) {
        /* one pass in double over values shifted by one of them (x0), so the
         * sum of squares does not cancel when |mean| >> std */
        double x0 = x[(size_t)c * HW], s1 = 0.0, s2 = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((size_t)n * C + c) * HW;
#pragma omp simd reduction(+ : s1, s2)
            for (int i = 0; i < HW; i++) {
                double d = (double)xp[i] - x0;
                s1 += d;
                s2 += d * d;
            }
        }
        double dmean = s1 / (double)M, mean = x0 + dmean;
        double ss = s2 - s1 * dmean; /* sum of squared deviations from the mean */
        if (ss < 0.0) ss = 0.0;
        double var = ss / (double)M;
        double invstd = 1.0 / sqrt(var + (double)eps);
        /* (x - mean) first: x*scale + shift would cancel when |mean| >> std */
        float m = (float)mean, scale = (float)((double)gamma[c] * invstd), b = beta[c];
        for (int n = 0; n < N; n++) {
            size_t o = ((size_t)n * C + c) * HW;
            bn_apply_row(HW, x + o, z ? z + o : NULL, relu, m, scale, b, y + o);
        }
        save_mean[c] = (float)mean;
        save_invstd[c] = (float)invstd;
        /* unbiased variance for the running estimate; a single value has none, so it counts as 0 */
        double unbiased = M > 1 ? ss / (double)(M - 1) : 0.0;
        running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * (float)mean;
        running_var[c] = (1.0f - momentum) * running_var[c] + momentum * (float)unbiased;
    }
}

/* bn_act_fwd_infer in NCHW (z NULL and relu 0: bn_fwd_infer). */
static void cpu_bn_fwd_infer(int N, int C, int HW, const float *x, const float *z, int relu, const float *gamma,
                             const float *beta, float *y, const float *running_mean, const float *running_var,
                             float eps) {
    CNT_ASSERT(N >= 0 && C >= 1 && HW >= 1);
    size_t total = (size_t)N * C * HW;
#pragma omp parallel for schedule(static) if (total >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            float m = running_mean[c], b = beta[c];
            float scale = (float)((double)gamma[c] / sqrt((double)running_var[c] + (double)eps));
            size_t o = ((size_t)n * C + c) * HW;
            bn_apply_row(HW, x + o, z ? z + o : NULL, relu, m, scale, b, y + o);
        }
    }
}

/* dst (+)= relu ? dy * (y > 0) : dy over n values: the gradient that reaches
 * a fused batch norm's output, as relu_bwd computes it. */
static void bn_grad_row(int n, const float *yp, const float *dp, int relu, float *dst, int accumulate) {
    if (relu && accumulate) {
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] += cpu_relu_grad(yp[i], dp[i]);
    } else if (relu) {
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = cpu_relu_grad(yp[i], dp[i]);
    } else if (accumulate) {
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] += 1.0f * dp[i];
    } else {
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = 1.0f * dp[i];
    }
}

/* bn_grad_row over a whole [N, C, HW] tensor in any layout. */
static void bn_grad_rows(int N, int C, int HW, const float *y, const float *dy, int relu, float *dst,
                         int accumulate) {
    size_t per = (size_t)C * HW;
    CNT_ASSERT(per <= INT_MAX);
#pragma omp parallel for schedule(static) if (per * N >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++)
        bn_grad_row((int)per, relu ? y + n * per : NULL, dy + n * per, relu, dst + n * per, accumulate);
}

/* bn_act_bwd in NCHW (y NULL, relu 0 and dz NULL: bn_bwd). With relu, the
 * gradient g = dy * (y > 0) is recomputed in each pass rather than stored. */
static void cpu_bn_bwd(int N, int C, int HW, const float *x, const float *y, const float *dy, int relu,
                       const float *gamma, const float *save_mean, const float *save_invstd, float *dx,
                       float *dgamma, float *dbeta, int accumulate_dx, float *dz, int accumulate_dz) {
    CNT_ASSERT(N >= 1 && C >= 1 && HW >= 1 && (!relu || y));
    size_t M = (size_t)N * HW;
#pragma omp parallel for schedule(static) if (M * C >= CPU_PAR_MIN)
    for (int c = 0; c < C; c++) {
        float mean = save_mean[c];
        double sdy = 0.0, sdyx = 0.0;
        for (int n = 0; n < N; n++) {
            size_t o = ((size_t)n * C + c) * HW;
            const float *xp = x + o, *dp = dy + o, *yp = relu ? y + o : NULL;
            if (relu) {
#pragma omp simd reduction(+ : sdy, sdyx)
                for (int i = 0; i < HW; i++) {
                    float g = cpu_relu_grad(yp[i], dp[i]);
                    sdy += g;
                    sdyx += (double)g * (double)(xp[i] - mean);
                }
            } else {
#pragma omp simd reduction(+ : sdy, sdyx)
                for (int i = 0; i < HW; i++) {
                    sdy += dp[i];
                    sdyx += (double)dp[i] * (double)(xp[i] - mean);
                }
            }
        }
        double invstd = save_invstd[c];
        dgamma[c] = (float)(sdyx * invstd);
        dbeta[c] = (float)sdy;
        /* dx = gamma*invstd * (dy - mean(dy) - (x-mean)*invstd^2 * mean(dy*(x-mean))) */
        float a = (float)((double)gamma[c] * invstd);
        float mdy = (float)(sdy / (double)M);
        float b = (float)(invstd * invstd * sdyx / (double)M);
        for (int n = 0; n < N; n++) {
            size_t o = ((size_t)n * C + c) * HW;
            const float *xp = x + o, *dp = dy + o;
            float *gp = dx + o;
            if (dz) bn_grad_row(HW, relu ? y + o : NULL, dp, relu, dz + o, accumulate_dz);
            if (relu) {
                const float *yp = y + o;
                if (accumulate_dx) {
#pragma omp simd
                    for (int i = 0; i < HW; i++) gp[i] += a * (cpu_relu_grad(yp[i], dp[i]) - mdy - (xp[i] - mean) * b);
                } else {
#pragma omp simd
                    for (int i = 0; i < HW; i++) gp[i] = a * (cpu_relu_grad(yp[i], dp[i]) - mdy - (xp[i] - mean) * b);
                }
            } else if (accumulate_dx) {
#pragma omp simd
                for (int i = 0; i < HW; i++) gp[i] += a * (dp[i] - mdy - (xp[i] - mean) * b);
            } else {
#pragma omp simd
                for (int i = 0; i < HW; i++) gp[i] = a * (dp[i] - mdy - (xp[i] - mean) * b);
            }
        }
    }
}

/* ----------------------------------------------------------------- pooling */

/* Every pooling window is a product of a row range and a column range, and so
 * is its divisor: the ranges are worked out once per call, per axis. */
typedef struct pool_axis {
    int *lo, *hi; /* [out] the window clipped to the input: [lo, hi) */
    int *count;   /* [out] this axis' factor of the average's divisor */
} pool_axis;

static void pool_axis_init(pool_axis *a, const pool_params *p, int in, int out, int k, int stride, int pad) {
    a->lo = cnt_malloc(3 * (size_t)out * sizeof(int));
    a->hi = a->lo + out;
    a->count = a->hi + out;
    for (int i = 0; i < out; i++) {
        if (p->mode == POOL_MODE_ADAPTIVE_AVG) {
            a->lo[i] = (int)((long)i * in / out);                  /* floor(i*in/out) */
            a->hi[i] = (int)(((long)(i + 1) * in + out - 1) / out); /* ceil((i+1)*in/out) */
            a->count[i] = a->hi[i] - a->lo[i];
            continue;
        }
        int s = i * stride - pad;
        int e = s + k < in + pad ? s + k : in + pad; /* clipped to the padded input */
        a->lo[i] = s > 0 ? s : 0;
        a->hi[i] = e < in ? e : in;
        a->count[i] = p->mode == POOL_MODE_AVG_INCLUDE_PAD ? e - s : a->hi[i] - a->lo[i];
        /* torch's output size rule keeps every window inside the input */
        CNT_ASSERT(a->lo[i] < a->hi[i]);
    }
}

static void pool_check(const pool_params *p, pool_axis *rows, pool_axis *cols) {
    CNT_ASSERT(p->N >= 0 && p->C >= 1 && p->H >= 1 && p->W >= 1 && p->P >= 1 && p->Q >= 1);
    if (p->mode != POOL_MODE_ADAPTIVE_AVG)
        CNT_ASSERT(p->R >= 1 && p->S >= 1 && p->stride_h >= 1 && p->stride_w >= 1 && p->pad_h >= 0 &&
                   p->pad_w >= 0);
    pool_axis_init(rows, p, p->H, p->P, p->R, p->stride_h, p->pad_h);
    pool_axis_init(cols, p, p->W, p->Q, p->S, p->stride_w, p->pad_w);
}

/* The first maximum of a window, scanning rows then columns, as torch picks it:
 * a NaN wins over numbers (it propagates) and the first NaN stays. take()
 * decides whether v replaces the current best. */
static inline int pool_take(float v, float best) { return (v > best) | ((v != v) & (best == best)); }

/* Window [h0, h1) x [w0, w1) of plane xp: its maximum in *best, the index of
 * that first maximum in *bi. */
static void pool_window_max(const float *xp, int W, int h0, int h1, int w0, int w1, float *best, int *bi) {
    float b = -INFINITY;
    int i = h0 * W + w0;
    for (int h = h0; h < h1; h++) {
        for (int w = w0; w < w1; w++) {
            float v = xp[h * W + w];
            int take = pool_take(v, b);
            b = take ? v : b;
            i = take ? h * W + w : i;
        }
    }
    *best = b;
    *bi = i;
}

/* Max pooling of output row i of plane xp: best[Q] and first-maximum index bi[Q].
 * Columns whose window lies inside the input run as straight vector loops over
 * the row (selects, not branches: a data-dependent branch mispredicts all the
 * time); the few at the borders take pool_window_max. */
static void pool_max_row(const pool_params *p, const pool_axis *rows, const pool_axis *cols, const float *xp, int i,
                         float *best, int *bi) {
    const int W = p->W, Q = p->Q, S = p->S, sw = p->stride_w, pw = p->pad_w;
    int h0 = rows->lo[i], h1 = rows->hi[i];
    /* inside: j*sw - pw >= 0 and j*sw - pw + S <= W */
    int j_lo = (pw + sw - 1) / sw;
    int j_hi = W - S + pw < 0 ? 0 : (W - S + pw) / sw + 1;
    if (j_hi > Q) j_hi = Q;
    if (j_lo > j_hi) j_lo = j_hi;
    for (int j = 0; j < Q; j++) {
        if (j == j_lo) j = j_hi;
        if (j >= Q) break;
        pool_window_max(xp, W, h0, h1, cols->lo[j], cols->hi[j], &best[j], &bi[j]);
    }
    for (int j = j_lo; j < j_hi; j++) {
        best[j] = -INFINITY;
        bi[j] = h0 * W + j * sw - pw;
    }
    for (int h = h0; h < h1; h++) {
        for (int s = 0; s < S; s++) {
            const float *xr = xp + (size_t)h * W + s - pw;
            int base = h * W + s - pw;
#pragma omp simd
            for (int j = j_lo; j < j_hi; j++) {
                float v = xr[j * sw];
                int take = pool_take(v, best[j]);
                best[j] = take ? v : best[j];
                bi[j] = take ? base + j * sw : bi[j];
            }
        }
    }
}

static void cpu_pool_fwd(const pool_params *p, const float *x, float *y) {
    pool_axis rows, cols;
    pool_check(p, &rows, &cols);
    int planes = p->N * p->C;
    size_t HW = (size_t)p->H * p->W, PQ = (size_t)p->P * p->Q;
#pragma omp parallel if ((size_t)planes * HW >= CPU_PAR_MIN)
    {
        int *bi = p->mode == POOL_MODE_MAX ? cnt_malloc((size_t)p->Q * sizeof(int)) : NULL;
#pragma omp for schedule(static)
        for (int pl = 0; pl < planes; pl++) {
            const float *xp = x + pl * HW;
            float *yp = y + pl * PQ;
            for (int i = 0; i < p->P; i++) {
                if (p->mode == POOL_MODE_MAX) {
                    pool_max_row(p, &rows, &cols, xp, i, yp + (size_t)i * p->Q, bi);
                    continue;
                }
                int h0 = rows.lo[i], h1 = rows.hi[i];
                for (int j = 0; j < p->Q; j++) {
                    float s = 0.0f;
                    for (int h = h0; h < h1; h++)
                        for (int w = cols.lo[j]; w < cols.hi[j]; w++) s += xp[h * p->W + w];
                    yp[i * p->Q + j] = s / (float)(rows.count[i] * cols.count[j]);
                }
            }
        }
        free(bi);
    }
    free(rows.lo);
    free(cols.lo);
}

static void cpu_pool_bwd(const pool_params *p, const float *x, const float *y, const float *dy, float *dx,
                         int accumulate) {
    (void)y; /* the maximum's position is recomputed from x, exactly as the forward chose it */
    pool_axis rows, cols;
    pool_check(p, &rows, &cols);
    int planes = p->N * p->C;
    size_t HW = (size_t)p->H * p->W, PQ = (size_t)p->P * p->Q;
#pragma omp parallel if ((size_t)planes * HW >= CPU_PAR_MIN)
    {
        float *best = NULL;
        int *bi = NULL;
        if (p->mode == POOL_MODE_MAX) {
            best = cnt_malloc((size_t)p->Q * sizeof(float));
            bi = cnt_malloc((size_t)p->Q * sizeof(int));
        }
#pragma omp for schedule(static)
        for (int pl = 0; pl < planes; pl++) {
            const float *xp = x + pl * HW;
            const float *gp = dy + pl * PQ;
            float *dp = dx + pl * HW;
            if (!accumulate) memset(dp, 0, HW * sizeof(float));
            for (int i = 0; i < p->P; i++) {
                if (p->mode == POOL_MODE_MAX) {
                    pool_max_row(p, &rows, &cols, xp, i, best, bi);
                    /* in order: windows overlap, so the sum order must be fixed */
                    for (int j = 0; j < p->Q; j++) dp[bi[j]] += gp[i * p->Q + j];
                    continue;
                }
                int h0 = rows.lo[i], h1 = rows.hi[i];
                for (int j = 0; j < p->Q; j++) {
                    float v = gp[i * p->Q + j] / (float)(rows.count[i] * cols.count[j]);
                    for (int h = h0; h < h1; h++)
                        for (int w = cols.lo[j]; w < cols.hi[j]; w++) dp[h * p->W + w] += v;
                }
            }
        }
        free(best);
        free(bi);
    }
    free(rows.lo);
    free(cols.lo);
}

/* -------------------------------------------------------------------- gemm */

static void f32_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
    CNT_ASSERT(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ----------------------------------------------------- reduced-precision math
 * BACKEND_MATH_BF16 / FP16 (see backend.h): the CPU has no bf16 or fp16 GEMM
 * that every machine can run, so it emulates what a GPU's tensor cores
 * compute: the operands are rounded to the type (copies, so the caller's fp32
 * tensors and master weights are untouched), the op runs in fp32 (products of
 * two rounded values are exact in fp32, so only the order of the sums differs
 * from a GPU), and the result is rounded in place. It is slower than fp32
 * here; its use is checking a mixed-precision run's numbers anywhere. */

static void round_span(int math, float *dst, const float *src, size_t n) {
    if (math == BACKEND_MATH_FP16) fp16_round_array(dst, src, n);
    else bf16_round_array(dst, src, n);
}

/* dst[0, n) = src rounded, in parallel chunks when large. */
void cpu_round_to_math(int math, float *dst, const float *src, size_t n) {
    const size_t chunk = (size_t)1 << 16;
    if (n < 4 * chunk) {
        round_span(math, dst, src, n);
        return;
    }
    long chunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        size_t lo = (size_t)c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        round_span(math, dst + lo, src + lo, hi - lo);
    }
}

const float *cpu_rounded_copy(int math, cpu_buf *b, const float *src, size_t n) {
    float *d = cpu_buf_get(b, n ? n : 1);
    cpu_round_to_math(math, d, src, n);
    return d;
}

int cpu_math_reduced(int math) { return math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16; }

static void cpu_conv_fwd(int math, const conv_params *p, const float *x, const float *w, float *y) {
    if (!cpu_math_reduced(math)) {
        f32_conv_fwd(p, x, w, y);
        return;
    }
    f32_conv_fwd(p, cpu_rounded_copy(math, &tls_scratch.op_a, x, conv_in_count(p)),
                 cpu_rounded_copy(math, &tls_scratch.op_b, w, conv_w_count(p)), y);
    cpu_round_to_math(math, y, y, conv_out_count(p));
}

static void cpu_conv_bwd_data(int math, const conv_params *p, const float *dy, const float *w, float *dx,
                              int accumulate) {
    if (!cpu_math_reduced(math)) {
        f32_conv_bwd_data(p, dy, w, dx, accumulate);
        return;
    }
    f32_conv_bwd_data(p, cpu_rounded_copy(math, &tls_scratch.op_a, dy, conv_out_count(p)),
                      cpu_rounded_copy(math, &tls_scratch.op_b, w, conv_w_count(p)), dx, accumulate);
    cpu_round_to_math(math, dx, dx, conv_in_count(p));
}

static void cpu_conv_bwd_filter(int math, const conv_params *p, const float *x, const float *dy, float *dw) {
    if (!cpu_math_reduced(math)) {
        f32_conv_bwd_filter(p, x, dy, dw);
        return;
    }
    f32_conv_bwd_filter(p, cpu_rounded_copy(math, &tls_scratch.op_a, x, conv_in_count(p)),
                        cpu_rounded_copy(math, &tls_scratch.op_b, dy, conv_out_count(p)), dw);
    cpu_round_to_math(math, dw, dw, conv_w_count(p));
}

static void cpu_gemm(const backend_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const void *Av, int lda, const void *Bv, int ldb, float beta, void *Cv, int ldc, unsigned act) {
    (void)act; /* fp32 only: the 16-bit adapter (model/backend_cpu16.c) widens them first */
    const float *A = Av, *B = Bv;
    float *C = Cv;
    int math = ctx->math;
    if (!cpu_math_reduced(math) || M == 0 || N == 0) {
        f32_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* stored shapes: A is [M, K] or, transposed, [K, M]; B is [K, N] or [N, K] */
    size_t na = trans_a ? matrix_span(K, M, lda) : matrix_span(M, K, lda);
    size_t nb = trans_b ? matrix_span(N, K, ldb) : matrix_span(K, N, ldb);
    f32_gemm(trans_a, trans_b, M, N, K, alpha, cpu_rounded_copy(math, &tls_scratch.op_a, A, na), lda,
             cpu_rounded_copy(math, &tls_scratch.op_b, B, nb), ldb, beta, C, ldc);
    for (int i = 0; i < M; i++) cpu_round_to_math(math, C + (size_t)i * ldc, C + (size_t)i * ldc, (size_t)N);
}

/* ------------------------------------------------------------ overflow check */

static void cpu_find_nonfinite(size_t n, const float *x, float *found) {
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    if (bad) found[0] = 1.0f;
}

/* ------------------------------------------------------------- elementwise */

static void cpu_relu_fwd(const backend_ctx *ctx, size_t n, const void *xv, void *yv) {
    (void)ctx;
    const float *x = xv;
    float *y = yv;
    /* `x < 0 ? 0 : x` lets a NaN through, so a diverged run still shows it */
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

static void cpu_relu_bwd(const backend_ctx *ctx, size_t n, const void *yv, const void *dyv, void *dxv,
                         int accumulate) {
    (void)ctx;
    const float *y = yv, *dy = dyv;
    float *dx = dxv;
    if (accumulate) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
    } else {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    }
}

static void cpu_add(const backend_ctx *ctx, size_t n, const void *av, const void *bv, void *yv) {
    (void)ctx;
    const float *a = av, *b = bv;
    float *y = yv;
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void cpu_axpy(size_t n, float alpha, const float *x, float *y, int accumulate) {
    if (accumulate) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
    } else {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) y[i] = alpha * x[i];
    }
}

static void cpu_mul(const backend_ctx *ctx, size_t n, const void *av, const float *b, void *yv, int accumulate) {
    (void)ctx;
    const float *a = av;
    float *y = yv;
    if (accumulate) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) y[i] += a[i] * b[i];
    } else {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) y[i] = a[i] * b[i];
    }
}

static void cpu_dropout_mask(size_t n, float p, uint64_t seed, float *mask) {
    CNT_ASSERT(p >= 0.0f && p < 1.0f);
    float keep = 1.0f / (1.0f - p);
    size_t blocks = (n + 255) / 256;
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN / 8)
    for (size_t b = 0; b < blocks; b++) {
        size_t i0 = b * 256, i1 = i0 + 256 < n ? i0 + 256 : n;
        /* draw first, then threshold in a vector loop: a branch on a coin flip
         * would mispredict half the time */
        for (size_t i = i0; i < i1; i++) mask[i] = rng_hash_uniform(seed, i);
#pragma omp simd
        for (size_t i = i0; i < i1; i++) mask[i] = mask[i] >= p ? keep : 0.0f;
    }
}

static void cpu_dropout_mask_at(size_t n, float p, const uint64_t *step_at, uint64_t node_index, float *mask) {
    cpu_dropout_mask(n, p, rng_hash_dropout_seed(*step_at, node_index), mask);
}

static void cpu_channel_copy(int N, int C, int HW, const float *src, int src_C, int src_off, float *dst, int dst_C,
                             int dst_off, int accumulate) {
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 0);
    CNT_ASSERT(src_off >= 0 && src_off + C <= src_C && dst_off >= 0 && dst_off + C <= dst_C);
    size_t total = (size_t)N * C * HW;
#pragma omp parallel for collapse(2) schedule(static) if (total >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            const float *s = src + ((size_t)n * src_C + src_off + c) * HW;
            float *d = dst + ((size_t)n * dst_C + dst_off + c) * HW;
            if (accumulate) {
#pragma omp simd
                for (int i = 0; i < HW; i++) d[i] += s[i];
            } else {
                memcpy(d, s, (size_t)HW * sizeof(float));
            }
        }
    }
}

/* -------------------------------------------------------------------- loss */

static void cpu_normalize_u8(int N, int C, int HW, const uint8_t *x, const float *lut, float *y) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const uint8_t *src = x + (size_t)n * HW * C + c;
            const float *t = lut + (size_t)c * 256;
            float *dst = y + ((size_t)n * C + c) * HW;
            for (int p = 0; p < HW; p++) dst[p] = t[src[(size_t)p * C]];
        }
}

static void cpu_softmax_xent(int N, int K, const float *logits, const int *labels, float smoothing, float *loss,
                             float *dlogits) {
    CNT_ASSERT(N >= 1 && K >= 1);
    double total = 0.0;
    double off = (double)smoothing / K, on = 1.0 - smoothing + off;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * K;
        float *dz = dlogits + (size_t)n * K;
        int label = labels[n];
        CNT_ASSERT(label >= 0 && label < K);
        float mx = z[0];
        for (int k = 1; k < K; k++)
            if (z[k] > mx) mx = z[k];
        double se = 0.0, sz = 0.0;
        for (int k = 0; k < K; k++) {
            float e = expf(z[k] - mx); /* <= 1; kept in dz until the sum is known */
            dz[k] = e;
            se += e;
            sz += z[k];
        }
        /* -sum_k target_k * log_softmax_k, with sum_k target_k = 1 */
        total += (double)mx + log(se) - (1.0 - smoothing) * z[label] - off * sz;
        for (int k = 0; k < K; k++) {
            double target = k == label ? on : off;
            dz[k] = (float)((dz[k] / se - target) / N);
        }
    }
    loss[0] = (float)(total / N);
}

/* --------------------------------------------------------------- optimizer */

static void cpu_sgd_update(size_t n, float *param, const float *grad, float *momentum_buf, float lr, float momentum,
                           float weight_decay, int nesterov, float grad_scale, const float *lr_at,
                           const float *scale_at) {
    if (lr_at) lr = *lr_at; /* device memory is host memory here */
    /* LARS's trust ratio, 1 without it: a product with 1 is exact, the same bits as none */
    const float s = scale_at ? *scale_at : 1.0f;
    if (momentum == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) param[i] -= lr * (s * (grad_scale * grad[i] + weight_decay * param[i]));
        return;
    }
    CNT_ASSERT(momentum_buf != NULL);
    if (nesterov) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            float g = s * (grad_scale * grad[i] + weight_decay * param[i]);
            float b = momentum * momentum_buf[i] + g;
            momentum_buf[i] = b;
            param[i] -= lr * (g + momentum * b);
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            float g = s * (grad_scale * grad[i] + weight_decay * param[i]);
            float b = momentum * momentum_buf[i] + g;
            momentum_buf[i] = b;
            param[i] -= lr * b;
        }
    }
}

/* Chunks of at least this many values, at most SUMSQ_CHUNKS of them: their
 * partial sums in a fixed order whatever the number of threads. */
#define SUMSQ_MIN_CHUNK 16384
#define SUMSQ_CHUNKS 1024

static void cpu_sumsq2(size_t n, const float *a, const float *b, float *out) {
    size_t chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
    if (chunk < SUMSQ_MIN_CHUNK) chunk = SUMSQ_MIN_CHUNK;
    long chunks = (long)((n + chunk - 1) / chunk);
    double part[2 * SUMSQ_CHUNKS];
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (long c = 0; c < chunks; c++) {
        size_t lo = (size_t)c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        double sa = 0.0, sb = 0.0;
#pragma omp simd reduction(+ : sa, sb)
        for (size_t i = lo; i < hi; i++) {
            sa += (double)a[i] * a[i];
            sb += (double)b[i] * b[i];
        }
        part[2 * c] = sa;
        part[2 * c + 1] = sb;
    }
    double sa = 0.0, sb = 0.0;
    for (long c = 0; c < chunks; c++) {
        sa += part[2 * c];
        sb += part[2 * c + 1];
    }
    out[0] = (float)sa;
    out[1] = (float)sb;
}

static void cpu_lars_trust(int k, const float *sums, float eta, float weight_decay, float grad_scale, float *trust) {
    for (int r = 0; r < k; r++) {
        double w = sqrt((double)sums[2 * r]), g = (double)grad_scale * sqrt((double)sums[2 * r + 1]);
        trust[r] = w > 0.0 && g > 0.0 ? (float)(eta * w / (g + (double)weight_decay * w)) : 1.0f;
    }
}

static void cpu_lowrank_orthonormalise(int rows, int r, float *P) {
    for (int k = 0; k < r; k++) {
        for (int c = 0; c < k; c++) {
            double d = 0.0;
            for (int i = 0; i < rows; i++) d += (double)P[(size_t)i * r + c] * P[(size_t)i * r + k];
            float f = (float)d;
            for (int i = 0; i < rows; i++) P[(size_t)i * r + k] -= f * P[(size_t)i * r + c];
        }
        double s = 0.0;
        for (int i = 0; i < rows; i++) s += (double)P[(size_t)i * r + k] * P[(size_t)i * r + k];
        float inv = s > 0.0 ? (float)(1.0 / sqrt(s)) : 0.0f;
        for (int i = 0; i < rows; i++) P[(size_t)i * r + k] *= inv;
    }
}

static void cpu_lowrank_redraw(int r, int cols, float *Qt, uint64_t seed) {
    for (int k = 0; k < r; k++) {
        float *row = Qt + (size_t)k * cols;
        int zero = 1;
        for (int j = 0; j < cols && zero; j++) zero = row[j] == 0.0f;
        if (zero)
            for (int j = 0; j < cols; j++) row[j] = rng_hash_normal_inline(seed, (uint64_t)k * cols + j);
    }
}

/* ----------------------------------------------------------------- threads */

static void cpu_set_threads(int n) {
    if (n <= 0) n = cpus_allowed(NULL); /* the CPUs this process may run on, not the machine's */
    omp_set_num_threads(n);
    /* the OpenMP build of OpenBLAS runs on OpenMP's threads; keep its count the same */
    openblas_set_num_threads(n);
}

/* ------------------------------------------------- math mode and ordering */

/* --------------------------------------------------------------- layout */

/* NHWC on the CPU: the NCHW kernels above, with the op's tensors transposed
 * into per-thread NCHW copies on the way in and back on the way out. Slower
 * than NCHW, never faster: NHWC exists here so that every layout test runs on
 * the CPU too and the GPU's NHWC results have a reference. Results are
 * bitwise those of NCHW. */

/* Tiles of 32 x 32 keep both the rows read and the rows written in cache. */
#define CPU_TRANSPOSE_TILE 32

/* For each of N images: dst[j, i] (+)= src[i, j], src [rows, cols]. */
static void transpose_images(int N, int rows, int cols, const float *src, float *dst, int accumulate) {
    const int T = CPU_TRANSPOSE_TILE;
    int row_tiles = (rows + T - 1) / T;
    size_t total = (size_t)N * rows * cols;
#pragma omp parallel for collapse(2) schedule(static) if (total >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        for (int rt = 0; rt < row_tiles; rt++) {
            const float *s = src + (size_t)n * rows * cols;
            float *d = dst + (size_t)n * rows * cols;
            int i0 = rt * T, i1 = i0 + T < rows ? i0 + T : rows;
            for (int j0 = 0; j0 < cols; j0 += T) {
                int j1 = j0 + T < cols ? j0 + T : cols;
                for (int j = j0; j < j1; j++) {
                    float *dp = d + (size_t)j * rows;
                    if (accumulate)
                        for (int i = i0; i < i1; i++) dp[i] += s[(size_t)i * cols + j];
                    else
                        for (int i = i0; i < i1; i++) dp[i] = s[(size_t)i * cols + j];
                }
            }
        }
    }
}

static void cpu_transpose_layout(int N, int C, int HW, const float *src, float *dst, int to_nhwc, int accumulate) {
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 0);
    if (to_nhwc)
        transpose_images(N, C, HW, src, dst, accumulate);
    else
        transpose_images(N, HW, C, src, dst, accumulate);
}

static void cpu_convert_layout(int N, int C, int HW, const void *src, int src_type, void *dst, int dst_type,
                               int layout, int to_layout, int accumulate) {
    CNT_ASSERT(layout == BACKEND_LAYOUT_NCHW || layout == BACKEND_LAYOUT_NHWC);
    CNT_ASSERT(src_type == BACKEND_DTYPE_FP32 && dst_type == BACKEND_DTYPE_FP32); /* others: backend_cpu16.c */
    if (layout == BACKEND_LAYOUT_NHWC) {
        cpu_transpose_layout(N, C, HW, src, dst, to_layout, accumulate);
        return;
    }
    size_t n = (size_t)N * C * HW;
    if (accumulate)
        cpu_axpy(n, 1.0f, src, dst, 1);
    else
        cpu_copy(dst, src, n * sizeof(float));
}

/* Whether ctx's layout is NHWC (this table's other layout is NCHW). */
static int nhwc(const backend_ctx *ctx) {
    CNT_ASSERT(ctx->layout == BACKEND_LAYOUT_NCHW || ctx->layout == BACKEND_LAYOUT_NHWC);
    return ctx->layout == BACKEND_LAYOUT_NHWC;
}

/* An NCHW copy of the NHWC tensor x [N, HW, C] in scratch slot k. */
static float *lay_in(int k, int N, int C, int HW, const float *x) {
    size_t n = (size_t)N * C * HW;
    float *t = cpu_buf_get(&tls_scratch.lay[k], n ? n : 1);
    cpu_transpose_layout(N, C, HW, x, t, 0, 0);
    return t;
}

/* Scratch slot k for an NCHW result of N x C x HW values. */
static float *lay_out(int k, int N, int C, int HW) {
    size_t n = (size_t)N * C * HW;
    return cpu_buf_get(&tls_scratch.lay[k], n ? n : 1);
}

/* y [N, HW, C] = the NCHW result t. */
static void lay_back(int N, int C, int HW, const float *t, float *y) { cpu_transpose_layout(N, C, HW, t, y, 1, 0); }

static void lay_conv_fwd(const backend_ctx *ctx, const conv_params *p, const void *x, const float *w, void *y) {
    if (!nhwc(ctx)) {
        cpu_conv_fwd(ctx->math, p, x, w, y);
        return;
    }
    const float *xt = lay_in(0, p->N, p->C, p->H * p->W, x);
    float *yt = lay_out(1, p->N, p->K, p->P * p->Q);
    cpu_conv_fwd(ctx->math, p, xt, w, yt);
    lay_back(p->N, p->K, p->P * p->Q, yt, y);
}

/* paired (model/backend.h): the CPU converts nothing it could share. */
static void lay_conv_bwd_data(const backend_ctx *ctx, const conv_params *p, const void *dy, const float *w,
                              void *dx, int accumulate, int paired) {
    (void)paired;
    if (!nhwc(ctx)) {
        cpu_conv_bwd_data(ctx->math, p, dy, w, dx, accumulate);
        return;
    }
    int HW = p->H * p->W;
    const float *dyt = lay_in(0, p->N, p->K, p->P * p->Q, dy);
    /* accumulating: the old dx goes through the NCHW op, which rounds the sum */
    float *dxt = accumulate ? lay_in(1, p->N, p->C, HW, dx) : lay_out(1, p->N, p->C, HW);
    cpu_conv_bwd_data(ctx->math, p, dyt, w, dxt, accumulate);
    lay_back(p->N, p->C, HW, dxt, dx);
}

static void lay_conv_bwd_filter(const backend_ctx *ctx, const conv_params *p, const void *x, const void *dy,
                                float *dw) {
    if (!nhwc(ctx)) {
        cpu_conv_bwd_filter(ctx->math, p, x, dy, dw);
        return;
    }
    const float *xt = lay_in(0, p->N, p->C, p->H * p->W, x);
    const float *dyt = lay_in(1, p->N, p->K, p->P * p->Q, dy);
    cpu_conv_bwd_filter(ctx->math, p, xt, dyt, dw);
}

static void lay_bias_fwd(const backend_ctx *ctx, int N, int C, int HW, const float *b, void *yv) {
    float *y = yv;
    if (!nhwc(ctx) || HW == 1) {
        cpu_bias_fwd(N, C, HW, b, y);
        return;
    }
    size_t rows = (size_t)N * HW;
#pragma omp parallel for schedule(static) if (rows * C >= CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        float *yp = y + r * C;
#pragma omp simd
        for (int c = 0; c < C; c++) yp[c] += b[c];
    }
}

static void lay_bias_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *dy, float *db) {
    if (!nhwc(ctx) || HW == 1) {
        cpu_bias_bwd(N, C, HW, dy, db);
        return;
    }
    cpu_bias_bwd(N, C, HW, lay_in(0, N, C, HW, dy), db);
}

static void lay_bn_act_fwd_train(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *z,
                                 int relu, const float *gamma, const float *beta, void *y, float *running_mean,
                                 float *running_var, float momentum, float eps, float *save_mean, float *save_invstd,
                                 fwd_keep *keep) {
    (void)keep; /* the backward recomputes the mask from y */
    if (!nhwc(ctx) || HW == 1) {
        cpu_bn_fwd_train(N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, momentum, eps, save_mean,
                         save_invstd);
        return;
    }
    const float *xt = lay_in(0, N, C, HW, x);
    const float *zt = z ? lay_in(2, N, C, HW, z) : NULL;
    float *yt = lay_out(1, N, C, HW);
    cpu_bn_fwd_train(N, C, HW, xt, zt, relu, gamma, beta, yt, running_mean, running_var, momentum, eps, save_mean,
                     save_invstd);
    lay_back(N, C, HW, yt, y);
}

static void lay_bn_fwd_train(const backend_ctx *ctx, int N, int C, int HW, const void *x, const float *gamma,
                             const float *beta, void *y, float *running_mean, float *running_var, float momentum,
                             float eps, float *save_mean, float *save_invstd) {
    lay_bn_act_fwd_train(ctx, N, C, HW, x, NULL, 0, gamma, beta, y, running_mean, running_var, momentum, eps,
                         save_mean, save_invstd, NULL);
}

static void lay_bn_act_fwd_infer(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *z,
                                 int relu, const float *gamma, const float *beta, void *y,
                                 const float *running_mean, const float *running_var, float eps) {
    if (!nhwc(ctx) || HW == 1) {
        cpu_bn_fwd_infer(N, C, HW, x, z, relu, gamma, beta, y, running_mean, running_var, eps);
        return;
    }
    const float *xt = lay_in(0, N, C, HW, x);
    const float *zt = z ? lay_in(2, N, C, HW, z) : NULL;
    float *yt = lay_out(1, N, C, HW);
    cpu_bn_fwd_infer(N, C, HW, xt, zt, relu, gamma, beta, yt, running_mean, running_var, eps);
    lay_back(N, C, HW, yt, y);
}

static void lay_bn_fwd_infer(const backend_ctx *ctx, int N, int C, int HW, const void *x, const float *gamma,
                             const float *beta, void *y, const float *running_mean, const float *running_var,
                             float eps) {
    lay_bn_act_fwd_infer(ctx, N, C, HW, x, NULL, 0, gamma, beta, y, running_mean, running_var, eps);
}

/* bn_act_bwd, which here leaves dy as it was (and bn_bwd: y NULL, relu 0, dz NULL). */
static void lay_bn_bwd_any(const backend_ctx *ctx, int N, int C, int HW, const float *x, const float *y,
                           const float *dy, int relu, const float *gamma, const float *save_mean,
                           const float *save_invstd, float *dx, float *dgamma, float *dbeta, int accumulate_dx,
                           float *dz, int accumulate_dz) {
    if (!nhwc(ctx) || HW == 1) {
        cpu_bn_bwd(N, C, HW, x, y, dy, relu, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate_dx, dz,
                   accumulate_dz);
        return;
    }
    /* dz is elementwise, so it is written in NHWC directly */
    if (dz) bn_grad_rows(N, C, HW, y, dy, relu, dz, accumulate_dz);
    const float *xt = lay_in(0, N, C, HW, x);
    const float *yt = relu ? lay_in(1, N, C, HW, y) : NULL;
    const float *dyt = lay_in(2, N, C, HW, dy);
    float *dxt = accumulate_dx ? lay_in(3, N, C, HW, dx) : lay_out(3, N, C, HW);
    cpu_bn_bwd(N, C, HW, xt, yt, dyt, relu, gamma, save_mean, save_invstd, dxt, dgamma, dbeta, accumulate_dx, NULL,
               0);
    lay_back(N, C, HW, dxt, dx);
}

static void lay_bn_act_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *y, void *dy,
                           int relu, const float *gamma, const float *beta, const float *save_mean,
                           const float *save_invstd, float eps, void *dx, float *dgamma, float *dbeta,
                           int accumulate_dx, void *dz, int accumulate_dz, const fwd_keep *keep) {
    (void)eps; /* in save_invstd already */
    (void)beta;
    (void)keep;
    lay_bn_bwd_any(ctx, N, C, HW, x, y, dy, relu, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate_dx, dz,
                   accumulate_dz);
}

static void lay_bn_bwd(const backend_ctx *ctx, int N, int C, int HW, const void *x, const void *dy,
                       const float *gamma, const float *save_mean, const float *save_invstd, float eps, void *dx,
                       float *dgamma, float *dbeta, int accumulate_dx) {
    (void)eps;
    lay_bn_bwd_any(ctx, N, C, HW, x, NULL, dy, 0, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate_dx,
                   NULL, 0);
}

/* keep: nothing kept (pool_bwd finds each maximum from x) */
static void lay_pool_fwd(const backend_ctx *ctx, const pool_params *p, const void *x, void *y, fwd_keep *keep) {
    (void)keep;
    if (!nhwc(ctx)) {
        cpu_pool_fwd(p, x, y);
        return;
    }
    const float *xt = lay_in(0, p->N, p->C, p->H * p->W, x);
    float *yt = lay_out(1, p->N, p->C, p->P * p->Q);
    cpu_pool_fwd(p, xt, yt);
    lay_back(p->N, p->C, p->P * p->Q, yt, y);
}

static void lay_pool_bwd(const backend_ctx *ctx, const pool_params *p, const void *x, const void *y,
                         const void *dy, void *dx, int accumulate, const fwd_keep *keep) {
    (void)keep;
    if (!nhwc(ctx)) {
        cpu_pool_bwd(p, x, y, dy, dx, accumulate);
        return;
    }
    int HW = p->H * p->W, PQ = p->P * p->Q;
    const float *xt = lay_in(0, p->N, p->C, HW, x);
    const float *yt = lay_in(1, p->N, p->C, PQ, y);
    const float *dyt = lay_in(2, p->N, p->C, PQ, dy);
    float *dxt = accumulate ? lay_in(3, p->N, p->C, HW, dx) : lay_out(3, p->N, p->C, HW);
    cpu_pool_bwd(p, xt, yt, dyt, dxt, accumulate);
    lay_back(p->N, p->C, HW, dxt, dx);
}

/* NHWC: each pixel's channel vector is contiguous, so a slice is C values per pixel. */
static void lay_channel_copy(const backend_ctx *ctx, int N, int C, int HW, const void *srcv, int src_C, int src_off,
                             void *dstv, int dst_C, int dst_off, int accumulate) {
    const float *src = srcv;
    float *dst = dstv;
    if (!nhwc(ctx) || HW == 1) {
        cpu_channel_copy(N, C, HW, src, src_C, src_off, dst, dst_C, dst_off, accumulate);
        return;
    }
    CNT_ASSERT(N >= 0 && C >= 0 && HW >= 0);
    CNT_ASSERT(src_off >= 0 && src_off + C <= src_C && dst_off >= 0 && dst_off + C <= dst_C);
    size_t rows = (size_t)N * HW;
#pragma omp parallel for schedule(static) if (rows * C >= CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *s = src + r * src_C + src_off;
        float *d = dst + r * dst_C + dst_off;
        if (accumulate) {
#pragma omp simd
            for (int c = 0; c < C; c++) d[c] += s[c];
        } else {
            memcpy(d, s, (size_t)C * sizeof(float));
        }
    }
}

/* Every CPU op has finished when it returns: nothing to order against. */
static void *cpu_native_stream(void) { return NULL; }
static char cpu_fence_token;
static void *cpu_fence_create(void) { return &cpu_fence_token; }
static void cpu_fence_destroy(void *fence) { (void)fence; }
static void cpu_fence_record(void *fence) { (void)fence; }
static void cpu_download_fenced(void *host_dst, const void *src, size_t bytes, void *fence) {
    (void)fence;
    cpu_transfer(host_dst, src, bytes);
}
static void cpu_fence_wait(void *fence) { (void)fence; }
static void cpu_upload_async(void *dst, const void *host_src, size_t bytes, void *after, void *done) {
    (void)after;
    (void)done;
    cpu_transfer(dst, host_src, bytes);
}

/* ------------------------------------------------------- memory planning */

/* The CPU's device memory is the host's. */
static void cpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    hostmem m;
    hostmem_query(&m);
    *free_bytes = m.available;
    *total_bytes = m.total;
}

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* What the three passes leave in the scratch buffers (see cpu_scratch): per
 * thread that runs groups (the whole team when the plan is outer, else the
 * calling thread), the group's im2col or padded input (col), its stacked
 * outputs (tmp) and a weight-gradient partial (dw); on the calling thread,
 * the filter split by tap (shift), bf16/fp16 operand copies and NHWC copies. */
static size_t cpu_conv_workspace(const backend_ctx *ctx, const conv_params *p);

/* The formulation conv_plan_init picks (the same for the three passes). */
static void cpu_conv_describe(const backend_ctx *ctx, const conv_params *p, char *buf, size_t len) {
    static const char *const algos[] = {"direct GEMM", "shifted GEMMs", "im2col + GEMM"};
    conv_plan pl;
    conv_plan_init(p, &pl);
    snprintf(buf, len, "OpenBLAS %s, %d image%s a GEMM, threads %s%s, scratch %.2f MiB", algos[pl.algo], pl.group,
             pl.group == 1 ? "" : "s", pl.outer ? "over images" : "inside GEMMs",
             nhwc(ctx) ? ", NHWC transposed around it" : "", cpu_conv_workspace(ctx, p) / 1048576.0);
}

static size_t cpu_conv_workspace(const backend_ctx *ctx, const conv_params *p) {
    conv_plan pl;
    conv_plan_init(p, &pl);
    size_t col = 0, tmp = 0, nb = (size_t)pl.group;
    switch (pl.algo) {
    case CONV_ALGO_DIRECT: break;
    case CONV_ALGO_SHIFT:
        col = (size_t)p->C * shift_chan_stride(p, &pl, pl.group);
        tmp = (size_t)p->K * (size_t)shift_cols(p, &pl, pl.group);
        break;
    case CONV_ALGO_IM2COL:
        if (nb == 1) {
            col = (size_t)pl.CRS * pl.tile_rows * p->Q;
        } else {
            col = (size_t)pl.CRS * nb * pl.PQ;
            tmp = (size_t)p->K * nb * pl.PQ;
        }
        break;
    }
    size_t w = conv_w_count(p), in = conv_in_count(p), out = conv_out_count(p);
    size_t threads = pl.outer ? (size_t)omp_get_max_threads() : 1;
    size_t floats = threads * (col + tmp + w) + (pl.algo == CONV_ALGO_SHIFT ? w : 0);
    if (cpu_math_reduced(ctx->math)) floats += max2(in, out) + max2(w, out); /* op_a, op_b */
    if (nhwc(ctx)) floats += 2 * max2(in, out);                              /* lay[0], lay[1] */
    return floats * sizeof(float);
}

static size_t cpu_gemm_workspace(const backend_ctx *ctx, int M, int N, int K, unsigned act) {
    (void)act; /* both operands get a rounded copy, activations or not */
    if (!cpu_math_reduced(ctx->math)) return 0;
    return ((size_t)M * K + (size_t)K * N) * sizeof(float); /* op_a, op_b */
}

static void cpu_describe(char *buf, size_t len) {
    snprintf(buf, len, "cpu (%d thread%s, OpenBLAS + OpenMP)", omp_get_max_threads(),
             omp_get_max_threads() == 1 ? "" : "s");
}

static const backend cpu_backend = {
    .name = "cpu",
    .is_cpu = 1,
    .act_types = 1u << BACKEND_DTYPE_FP32, /* 16-bit ones: model/backend_cpu16.c on top */
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_transfer,
    .download = cpu_transfer,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .conv_fwd = lay_conv_fwd,
    .conv_bwd_data = lay_conv_bwd_data,
    .conv_bwd_filter = lay_conv_bwd_filter,
    .conv_describe = cpu_conv_describe,
    .bias_fwd = lay_bias_fwd,
    .bias_bwd = lay_bias_bwd,
    .bn_fwd_train = lay_bn_fwd_train,
    .bn_fwd_infer = lay_bn_fwd_infer,
    .bn_bwd = lay_bn_bwd,
    .bn_act_fwd_train = lay_bn_act_fwd_train,
    .bn_act_fwd_infer = lay_bn_act_fwd_infer,
    .bn_act_bwd = lay_bn_act_bwd,
    .pool_fwd = lay_pool_fwd,
    .pool_bwd = lay_pool_bwd,
    .gemm = cpu_gemm,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .add = cpu_add,
    .axpy = cpu_axpy,
    .mul = cpu_mul,
    .dropout_mask = cpu_dropout_mask,
    .dropout_mask_at = cpu_dropout_mask_at,
    .channel_copy = lay_channel_copy,
    .normalize_u8 = cpu_normalize_u8,
    .softmax_xent = cpu_softmax_xent,
    .sgd_update = cpu_sgd_update,
    .sumsq2 = cpu_sumsq2,
    .lars_trust = cpu_lars_trust,
    .lowrank_orthonormalise = cpu_lowrank_orthonormalise,
    .lowrank_redraw = cpu_lowrank_redraw,
    .set_threads = cpu_set_threads,
    .find_nonfinite = cpu_find_nonfinite,
    .convert_layout = cpu_convert_layout,
    .block_c = 0,
    .max_tensor_values = 0,
    .native_stream = cpu_native_stream,
    .fence_create = cpu_fence_create,
    .fence_destroy = cpu_fence_destroy,
    .fence_record = cpu_fence_record,
    .download_fenced = cpu_download_fenced,
    .upload_sync = cpu_transfer,
    .fence_wait = cpu_fence_wait,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .upload_async = cpu_upload_async,
    .mem_info = cpu_mem_info,
    .conv_workspace = cpu_conv_workspace,
    .gemm_workspace = cpu_gemm_workspace,
};

const backend *backend_cpu_openblas(void) { return &cpu_backend; }

void backend_cpu_libraries(char *buf, size_t len) {
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Prescott MAX_THREADS=64": the version, then how it was built
     * (the core named there is the build's baseline); the kernels it picked for this CPU: its core name */
    const char *cfg = openblas_get_config();
    char ver[64];
    snprintf(ver, sizeof ver, "%s", strncmp(cfg, "OpenBLAS ", 9) == 0 ? cfg + 9 : cfg);
    ver[strcspn(ver, " ")] = '\0';
    char text[160];
    snprintf(text, sizeof text, "%s (kernels for %s)", ver, openblas_get_corename());
    file_library_line(buf, len, "OpenBLAS", text, (const void *)cblas_sgemm);
}
