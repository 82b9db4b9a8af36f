/*
 * data/image.h - one image file (or in-memory image) made into the pixels a
 * transform asks for: a view (a source box resampled to a size, of which
 * some outputs are kept) rendered with data/resample.h's antialiased
 * bilinear filter, which is torchvision's on PIL images.
 *
 * JPEG files (recognised by their first bytes, whatever the extension) are
 * opened by reading the header only; rendering then decodes through
 * libjpeg-turbo just the rows and columns the view's filter taps read, and,
 * with `dct` set, at the smallest of the DCT scalings 1/8, 1/4 and 1/2 whose
 * box still holds at least as many pixels as the view's output in both
 * directions (the decoder does the first part of the downscaling, the
 * filter the rest; PIL's Image.draft makes the same choice). Other
 * formats (PNG, BMP, ...) are decoded whole by stb_image when opened.
 *
 * With dct = 0 a render equals torchvision's transform on the same file
 * (decoded by the same libjpeg-turbo, resampled by the same arithmetic)
 * within 1 level (data/resample.h). With dct = 1 it differs where the
 * reduced-size IDCT was used: the stated tolerance is in
 * tests/test_image.c.
 */
#ifndef CNT_DATA_IMAGE_H
#define CNT_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* Images above this many pixels are refused (a decompression bomb's guard). */
#define IMAGE_MAX_PIXELS (1L << 28)
/* Larger files are refused before reading (a 2^28-pixel JPEG is far smaller). */
#define IMAGE_MAX_FILE_BYTES (1ULL << 30)

typedef struct image_src {
    const char *path;       /* for messages; not owned */
    uint8_t *bytes;         /* JPEG: the file's bytes (owned); else NULL */
    size_t len;
    uint8_t *pix;           /* other formats and in-memory images: c channels interleaved */
    size_t stride;          /* bytes between pix's rows */
    int owns_pix;
    int w, h, c;
} image_src;

/* Reads path: a JPEG's header, any other format decoded whole to c (1 or 3)
 * channels. CNT_ERR with "PATH: reason" for a file that cannot be read, is
 * not an image, is corrupt, or has more than IMAGE_MAX_PIXELS pixels. */
int image_open(image_src *im, const char *path, int c);

/* The same for a file's bytes already in memory (buf, len bytes, malloc'ed:
 * taken over, freed on error too); path names it in messages. For images
 * read from a shard set (data/shards.h). */
int image_open_bytes(image_src *im, uint8_t *buf, size_t len, const char *path, int c);

/* An in-memory interleaved image (not copied; must outlive im). */
void image_wrap(image_src *im, const uint8_t *hwc, int w, int h, int c, const char *name);

void image_close(image_src *im);

typedef struct image_view {
    double bx0, by0, bx1, by1; /* the source box, in source pixels */
    int cx0, cy0, cx1, cy1;    /* filter taps read only source pixels [cx0, cx1) x [cy0, cy1) */
    int out_w, out_h;          /* the box's size once resampled */
    int ox, oy, ow, oh;        /* the outputs kept: [ox, ox + ow) x [oy, oy + oh) */
} image_view;

/* The whole w x h image resized to out_w x out_h (PIL's resize). */
image_view image_view_resize(int w, int h, int out_w, int out_h);

/* The crop (x, y, cw, ch) resized to out_w x out_h; the filter reads
 * nothing outside the crop (torchvision's resized_crop: crop, then resize). */
image_view image_view_crop_resize(int x, int y, int cw, int ch, int out_w, int out_h);

/* torchvision's Resize(short_side) then CenterCrop((ch, cw)): the shorter
 * side to short_side, the longer in proportion (rounded down), then the
 * centre cw x ch (offsets rounded half to even, as Python's round). A crop
 * larger than the resized image is not supported: cw and ch must fit. */
image_view image_view_resize_centre(int w, int h, int short_side, int cw, int ch);

/* The DCT scaling (M of M/8: 1, 2, 4 or 8) a render of v with dct = 1 decodes at. */
int image_view_scale(const image_src *im, const image_view *v);

/* The source pixels a render of v at full size reads: columns [*x0, *x1),
 * rows [*y0, *y1) (inside the image). */
void image_view_window(const image_src *im, const image_view *v, int *x0, int *y0, int *x1, int *y1);

/* Renders v from win, the source decoded at full size elsewhere (nvJPEG,
 * data/gpu_jpeg.h) over at least image_view_window's pixels; otherwise as
 * image_render with dct = 0. */
struct jpeg_window;
void image_render_window(const image_src *im, const image_view *v, const struct jpeg_window *win, uint8_t *dst);

/* Renders v into dst: v->oh rows of v->ow pixels, c channels, rows
 * v->ow * c bytes apart. CNT_ERR with "PATH: corrupt JPEG (...)" when the
 * decode fails. */
int image_render(const image_src *im, const image_view *v, int dct, uint8_t *dst);

#endif
