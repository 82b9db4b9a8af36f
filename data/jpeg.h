/*
 * data/jpeg.h - JPEG decoding through libjpeg-turbo: the header alone, then
 * the image at a reduced size (scaling in the DCT domain, M/8 for M = 1..8)
 * and only the rows and columns asked for (partial decoding: whole iMCU
 * columns are decoded, rows above the region are skipped, rows below are
 * never read).
 *
 * Colour: the output has 1 or 3 channels whatever the file holds (greyscale,
 * YCbCr, RGB, CMYK or Adobe's YCCK). CMYK becomes RGB as stb_image converts
 * it (each of C, M, Y times K / 255, on the values as stored, which is what
 * Adobe's inverted CMYK needs), so images decode to what they decoded to
 * before libjpeg-turbo; 3 channels become 1 with stb_image's weights
 * (77 R + 150 G + 29 B) / 256.
 *
 * Errors: a file libjpeg refuses, and one that ends before the rows asked
 * for (libjpeg's "premature end of data" warning), return CNT_ERR with
 * "PATH: corrupt JPEG (libjpeg's message)"; other libjpeg warnings (bytes
 * before a marker and the like, common in photo collections) are accepted,
 * as PIL accepts them. Thread-safe: no state outside the call.
 */
#ifndef CNT_DATA_JPEG_H
#define CNT_DATA_JPEG_H

#include <stddef.h>
#include <stdint.h>

/* Whether the bytes start like a JPEG file (SOI then a marker). */
int jpeg_is_jpeg(const uint8_t *buf, size_t len);

/* `trainer --version`: libjpeg-turbo's line (built with, its file), appended to buf. */
void jpeg_libraries(char *buf, size_t len);

/* The image's size from its header; CNT_ERR (message names path) when the
 * header does not parse. */
int jpeg_read_size(const char *path, const uint8_t *buf, size_t len, int *w, int *h);

/* 1 when the file is progressive (its header says so), 0 when not or when
 * the header does not parse. */
int jpeg_is_progressive(const uint8_t *buf, size_t len);

/* A decoded window of the image scaled by scale/8. */
typedef struct jpeg_window {
    uint8_t *pix;       /* malloc'ed, rows of stride bytes, c channels interleaved */
    size_t stride;
    int x0, y0, w, h;   /* the window's origin and size in scaled pixels */
    int sw, sh;         /* the whole scaled image's size */
} jpeg_window;

/* The size of the image scaled by scale/8 (libjpeg's rounding: up). */
void jpeg_scaled_size(int w, int h, int scale, int *sw, int *sh);

/* Decodes at scale/8 (1..8) the window that covers scaled columns [x0, x1)
 * and rows [y0, y1) (clamped to the scaled image; the window may start left
 * of x0 and be wider, at iMCU boundaries) into *out, c = 1 or 3 channels.
 * CNT_ERR with the message for a corrupt file. */
int jpeg_decode_window(const char *path, const uint8_t *buf, size_t len, int scale, int c, int x0, int y0, int x1,
                       int y1, jpeg_window *out);

#endif
