/*
 * data/resample.h - antialiased bilinear resampling of 8-bit images, the
 * filter torchvision applies to PIL images (Resize, RandomResizedCrop and
 * CenterCrop with interpolation BILINEAR, which PIL always antialiases).
 *
 * Contract: for each output pixel, the triangle filter stretched by the
 * downscale factor (support max(scale, 1) source pixels on each side of the
 * output's centre) weighs the source pixels under it, weights normalised to
 * sum to 1 and taken in fixed point with 22 fractional bits; rows are
 * resampled first into an 8-bit intermediate, then columns; each pass rounds
 * to nearest and clamps to 0..255. That is PIL's Resample.c arithmetic, so an
 * output equals PIL's resize of the same pixels (with the same box), except
 * that recent Pillow (13) runs the columns first for some tall boxes, which
 * rounds the intermediate differently: within 1 level then
 * (tools/check_image_torch.py). tests/test_image.c holds it to a
 * double-precision evaluation of the filter within 1 level and to values
 * worked by hand.
 *
 * An axis maps a box [b0, b1) of source coordinates (fractional, in pixels)
 * onto out_size outputs; taps are clipped to the source pixels [lo, hi),
 * which is the image (a whole-image resize) or the crop (crop, then resize:
 * the filter never reads outside the crop). Only outputs [o0, o0 + n) are
 * computed, so a centre crop of a resize costs only what it keeps.
 */
#ifndef CNT_DATA_RESAMPLE_H
#define CNT_DATA_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct resample_axis {
    int n;           /* outputs computed */
    int taps;        /* the most taps an output has; k holds taps per output */
    int *first;      /* [n] first source pixel each output reads */
    int *count;      /* [n] how many it reads */
    int32_t *k;      /* [n * taps] fixed-point weights */
    int src_lo, src_hi; /* every output reads within [src_lo, src_hi) */
    int identity;    /* 1: output i is source pixel first[i], weight 1 (no filtering) */
    int fixed;       /* 1: every output reads exactly `taps` pixels within [src_lo, src_hi) */
} resample_axis;

/* Builds the axis mapping the box [b0, b1) to out_size outputs, of which
 * [o0, o0 + n) are computed, reading only source pixels [lo, hi).
 * Requires lo < hi, b0 < b1, out_size >= 1, 0 <= o0 and o0 + n <= out_size. */
void resample_axis_init(resample_axis *a, int lo, int hi, double b0, double b1, int out_size, int o0, int n);
void resample_axis_free(resample_axis *a);

/* Resamples an interleaved image of c channels (1..4): src points at source
 * pixel (x0, y0) of a window whose rows are stride bytes apart and which
 * covers ax's and ay's [src_lo, src_hi); writes ay->n rows of ax->n pixels to
 * dst (rows dst_stride bytes apart). */
void resample_run(const resample_axis *ax, const resample_axis *ay, const uint8_t *src, size_t stride, int x0, int y0,
                  int c, uint8_t *dst, size_t dst_stride);

#endif
