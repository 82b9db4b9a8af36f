/*
 * data/resample.c - antialiased bilinear resampling (see data/resample.h).
 */
#include "data/resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

/* Fixed point: 32 bits less 8 for the pixel and 2 for the sum's headroom. */
#define PRECISION_BITS (32 - 8 - 2)

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

void resample_axis_init(resample_axis *a, int lo, int hi, double b0, double b1, int out_size, int o0, int n) {
    CNT_ASSERT(lo < hi && b0 < b1 && out_size >= 1 && o0 >= 0 && n >= 1 && o0 + n <= out_size);
    memset(a, 0, sizeof *a);
    int in_size = hi - lo;
    double scale = (b1 - b0) / out_size;
    double fscale = scale < 1.0 ? 1.0 : scale;
    double support = fscale; /* the triangle's support is 1 */
    /* The box relative to lo, as if the source were cut to [lo, hi). */
    b0 -= lo;
    a->n = n;
    a->taps = (int)ceil(support) * 2 + 1;
    a->first = cnt_malloc((size_t)n * sizeof *a->first);
    a->count = cnt_malloc((size_t)n * sizeof *a->count);
    a->k = cnt_calloc((size_t)n * (size_t)a->taps, sizeof *a->k);
    double *w = cnt_malloc((size_t)a->taps * sizeof *w);
    a->identity = scale == 1.0 && b0 == floor(b0);
    a->src_lo = hi;
    a->src_hi = lo;
    for (int i = 0; i < n; i++) {
        double centre = b0 + (o0 + i + 0.5) * scale;
        /* Truncation, as C's (int) does; below 0 clamps anyway. */
        int xmin = (int)(centre - support + 0.5), xmax = (int)(centre + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        int cnt = xmax - xmin;
        if (cnt > a->taps) cnt = a->taps;
        if (cnt < 1) { /* a box beyond the clip: the nearest edge pixel */
            xmin = centre < 0 ? 0 : in_size - 1;
            cnt = 1;
        }
        double sum = 0;
        for (int x = 0; x < cnt; x++) {
            w[x] = triangle((x + xmin - centre + 0.5) / fscale);
            sum += w[x];
        }
        int32_t *k = a->k + (size_t)i * (size_t)a->taps;
        for (int x = 0; x < cnt; x++) {
            double v = sum != 0.0 ? w[x] / sum : (x == 0);
            k[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        a->first[i] = lo + xmin;
        a->count[i] = cnt;
        if (a->identity && (cnt < 1 || k[0] != (1 << PRECISION_BITS) || (cnt > 1 && k[1] != 0))) a->identity = 0;
        if (lo + xmin < a->src_lo) a->src_lo = lo + xmin;
        if (lo + xmin + cnt > a->src_hi) a->src_hi = lo + xmin + cnt;
    }
    free(w);
    /* Every output reading `taps` pixels (weights past its count are 0), so
     * the rows pass runs a loop of fixed length: an output whose taps would
     * pass src_hi starts earlier, its weights moved right by as much. */
    a->fixed = !a->identity && a->src_hi - a->src_lo >= a->taps;
    for (int i = 0; a->fixed && i < n; i++) {
        int over = a->first[i] + a->taps - a->src_hi;
        if (over <= 0) continue;
        int32_t *k = a->k + (size_t)i * (size_t)a->taps;
        memmove(k + over, k, (size_t)(a->taps - over) * sizeof *k);
        memset(k, 0, (size_t)over * sizeof *k);
        a->first[i] -= over;
        a->count[i] += over;
    }
}

void resample_axis_free(resample_axis *a) {
    free(a->first);
    free(a->count);
    free(a->k);
    memset(a, 0, sizeof *a);
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One row of 3 channels with T taps for every output (ax->fixed). */
#define ROW3_FIXED(T)                                                                                         \
    static void row3_##T(const resample_axis *ax, const uint8_t *in, int x0, uint8_t *out) {                 \
        const int32_t half = 1 << (PRECISION_BITS - 1);                                                       \
        for (int i = 0; i < ax->n; i++) {                                                                     \
            const int32_t *k = ax->k + (size_t)i * T;                                                         \
            const uint8_t *p = in + (size_t)(ax->first[i] - x0) * 3;                                          \
            int32_t s0 = half, s1 = half, s2 = half;                                                          \
            for (int x = 0; x < T; x++) {                                                                     \
                s0 += p[3 * x] * k[x];                                                                        \
                s1 += p[3 * x + 1] * k[x];                                                                    \
                s2 += p[3 * x + 2] * k[x];                                                                    \
            }                                                                                                 \
            out[3 * i] = clip8(s0);                                                                           \
            out[3 * i + 1] = clip8(s1);                                                                       \
            out[3 * i + 2] = clip8(s2);                                                                       \
        }                                                                                                     \
    }
ROW3_FIXED(3)
ROW3_FIXED(5)
ROW3_FIXED(7)
ROW3_FIXED(9)

/* One row: out[i] (c channels) from in (pixel 0 = source pixel x0). */
static void resample_row(const resample_axis *ax, const uint8_t *in, int x0, int c, uint8_t *out) {
    if (c == 3 && ax->fixed) {
        switch (ax->taps) {
        case 3: row3_3(ax, in, x0, out); return;
        case 5: row3_5(ax, in, x0, out); return;
        case 7: row3_7(ax, in, x0, out); return;
        case 9: row3_9(ax, in, x0, out); return;
        default: break;
        }
    }
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (int i = 0; i < ax->n; i++) {
        const int32_t *k = ax->k + (size_t)i * (size_t)ax->taps;
        const uint8_t *p = in + (size_t)(ax->first[i] - x0) * (size_t)c;
        int cnt = ax->count[i];
        if (c == 3) {
            int32_t s0 = half, s1 = half, s2 = half;
            for (int x = 0; x < cnt; x++, p += 3) {
                s0 += p[0] * k[x];
                s1 += p[1] * k[x];
                s2 += p[2] * k[x];
            }
            out[3 * i] = clip8(s0);
            out[3 * i + 1] = clip8(s1);
            out[3 * i + 2] = clip8(s2);
        } else {
            for (int ch = 0; ch < c; ch++) {
                int32_t s = half;
                for (int x = 0; x < cnt; x++) s += p[(size_t)x * (size_t)c + (size_t)ch] * k[x];
                out[(size_t)i * (size_t)c + (size_t)ch] = clip8(s);
            }
        }
    }
}

/* Output row of ay's output i from rows (row r = source row y0 + r) of
 * `width` bytes each, stride bytes apart; acc: width sums. Row by row, so
 * the inner loop runs along a row (vectorised). */
static void resample_col(const resample_axis *ay, int i, const uint8_t *rows, size_t stride, int y0, size_t width,
                         int32_t *restrict acc, uint8_t *restrict out) {
    const int32_t *k = ay->k + (size_t)i * (size_t)ay->taps;
    const uint8_t *p = rows + (size_t)(ay->first[i] - y0) * stride;
    int cnt = ay->count[i];
    for (size_t x = 0; x < width; x++) acc[x] = 1 << (PRECISION_BITS - 1);
    for (int y = 0; y < cnt; y++) {
        const uint8_t *restrict r = p + (size_t)y * stride;
        int32_t kk = k[y];
        for (size_t x = 0; x < width; x++) acc[x] += r[x] * kk;
    }
    for (size_t x = 0; x < width; x++) out[x] = clip8(acc[x]);
}

void resample_run(const resample_axis *ax, const resample_axis *ay, const uint8_t *src, size_t stride, int x0, int y0,
                  int c, uint8_t *dst, size_t dst_stride) {
    size_t width = (size_t)ax->n * (size_t)c;
    int rows = ay->src_hi - ay->src_lo;
    if (!ax->identity && !ay->identity && ay->n < rows) {
        /* Columns first when they shrink: the rows pass (scalar) then runs
         * on ay->n rows instead of all the band's; the columns pass is
         * vectorised along the band's width. */
        size_t bw = (size_t)(ax->src_hi - ax->src_lo) * (size_t)c;
        const uint8_t *band = src + (size_t)(ay->src_lo - y0) * stride + (size_t)(ax->src_lo - x0) * (size_t)c;
        uint8_t *tmp = cnt_malloc((size_t)ay->n * bw);
        int32_t *acc = cnt_malloc(bw * sizeof *acc);
        for (int i = 0; i < ay->n; i++) resample_col(ay, i, band, stride, ay->src_lo, bw, acc, tmp + (size_t)i * bw);
        for (int i = 0; i < ay->n; i++)
            resample_row(ax, tmp + (size_t)i * bw, ax->src_lo, c, dst + (size_t)i * dst_stride);
        free(acc);
        free(tmp);
        return;
    }
    /* Rows first: only the rows the columns pass reads. */
    const uint8_t *mid;
    size_t mid_stride;
    uint8_t *tmp = NULL;
    if (ax->identity) {
        mid = src + (size_t)(ay->src_lo - y0) * stride + (size_t)(ax->first[0] - x0) * (size_t)c;
        mid_stride = stride;
    } else {
        tmp = cnt_malloc((size_t)rows * width);
        for (int r = 0; r < rows; r++)
            resample_row(ax, src + (size_t)(ay->src_lo + r - y0) * stride, x0, c, tmp + (size_t)r * width);
        mid = tmp;
        mid_stride = width;
    }
    int32_t *acc = ay->identity ? NULL : cnt_malloc(width * sizeof *acc);
    for (int i = 0; i < ay->n; i++) {
        uint8_t *out = dst + (size_t)i * dst_stride;
        if (ay->identity)
            memcpy(out, mid + (size_t)(ay->first[i] - ay->src_lo) * mid_stride, width);
        else
            resample_col(ay, i, mid, mid_stride, ay->src_lo, width, acc, out);
    }
    free(acc);
    free(tmp);
}
