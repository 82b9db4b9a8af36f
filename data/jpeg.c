/*
 * data/jpeg.c - JPEG decoding through libjpeg-turbo (see data/jpeg.h).
 *
 * libjpeg reports a fatal error by calling error_exit, which must not
 * return: ours longjmps back to the call that began the decode, which frees
 * what it holds and returns CNT_ERR.
 */
#include "data/jpeg.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "common/check.h"
#include "common/fileio.h"

#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 1005000
#error "libjpeg-turbo 1.5 or later (jpeg_crop_scanline, jpeg_skip_scanlines) is required: run `make deps`"
#endif

typedef struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int truncated;              /* libjpeg warned that the data ended early */
    char msg[JMSG_LENGTH_MAX];
} err_mgr;

static void on_error(j_common_ptr ci) {
    err_mgr *e = (err_mgr *)ci->err;
    ci->err->format_message(ci, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings (level -1) other than the end of data are accepted silently;
 * trace messages (level >= 0) are ignored. */
static void on_message(j_common_ptr ci, int level) {
    err_mgr *e = (err_mgr *)ci->err;
    if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF && !e->truncated) {
        e->truncated = 1;
        ci->err->format_message(ci, e->msg);
    }
}

static void err_init(struct jpeg_decompress_struct *ci, err_mgr *e) {
    ci->err = jpeg_std_error(&e->pub);
    e->pub.error_exit = on_error;
    e->pub.emit_message = on_message;
    e->truncated = 0;
    e->msg[0] = '\0';
}

int jpeg_is_jpeg(const uint8_t *buf, size_t len) {
    return len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF;
}

int jpeg_read_size(const char *path, const uint8_t *buf, size_t len, int *w, int *h) {
    struct jpeg_decompress_struct ci;
    err_mgr em;
    err_init(&ci, &em);
    if (setjmp(em.jb)) {
        jpeg_destroy_decompress(&ci);
        return cnt_err_set("%s: corrupt JPEG (%s)", path, em.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    *w = (int)ci.image_width;
    *h = (int)ci.image_height;
    jpeg_destroy_decompress(&ci);
    return CNT_OK;
}

int jpeg_is_progressive(const uint8_t *buf, size_t len) {
    struct jpeg_decompress_struct ci;
    err_mgr em;
    err_init(&ci, &em);
    if (setjmp(em.jb)) {
        jpeg_destroy_decompress(&ci);
        return 0;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    int p = ci.progressive_mode ? 1 : 0;
    jpeg_destroy_decompress(&ci);
    return p;
}

void jpeg_scaled_size(int w, int h, int scale, int *sw, int *sh) {
    *sw = (int)(((long)w * scale + 7) / 8);
    *sh = (int)(((long)h * scale + 7) / 8);
}

/* stb_image's x * y / 255. */
static inline uint8_t blinn(unsigned x, unsigned y) {
    unsigned t = x * y + 128;
    return (uint8_t)((t + (t >> 8)) >> 8);
}

/* One decoded row of `native` channels (4: CMYK as stored) into c channels. */
static void convert_row(const uint8_t *in, int native, int n, int c, uint8_t *out) {
    for (int i = 0; i < n; i++, in += native, out += c) {
        unsigned r = in[0], g = in[native > 1], b = in[native > 1 ? 2 : 0];
        if (native == 4) {
            r = blinn(in[0], in[3]);
            g = blinn(in[1], in[3]);
            b = blinn(in[2], in[3]);
        }
        if (c == 3) {
            out[0] = (uint8_t)r;
            out[1] = (uint8_t)g;
            out[2] = (uint8_t)b;
        } else {
            out[0] = (uint8_t)((r * 77 + g * 150 + b * 29) >> 8);
        }
    }
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* What a decode holds when libjpeg longjmps out of it. */
typedef struct held {
    uint8_t *volatile pix, *volatile conv;
} held;

/* The decode after the header, rows [y0, y1) of the window's columns into
 * out (and hold); libjpeg's errors longjmp past it. */
static int decode_rows(struct jpeg_decompress_struct *ci, err_mgr *em, const char *path, int scale, int c, int x0,
                       int y0, int x1, int y1, held *hold, jpeg_window *out) {
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    int native = cmyk ? 4 : (c == 1 && ci->jpeg_color_space == JCS_GRAYSCALE) ? 1 : 3;
    ci->out_color_space = cmyk ? JCS_CMYK : native == 1 ? JCS_GRAYSCALE : JCS_RGB;
    ci->scale_num = (unsigned)scale;
    ci->scale_denom = 8;
    ci->dct_method = JDCT_ISLOW;
    jpeg_start_decompress(ci);
    int sw = (int)ci->output_width, sh = (int)ci->output_height;
    x0 = clampi(x0, 0, sw - 1);
    x1 = clampi(x1, x0 + 1, sw);
    y0 = clampi(y0, 0, sh - 1);
    y1 = clampi(y1, y0 + 1, sh);
    /* One iMCU (at most 16 pixels) more on each side: libjpeg-turbo's
     * upsampling treats a cropped window's edges as the image's when the
     * components are subsampled unusually (CMYK at 4:2:0), so the columns
     * wanted are kept away from them. */
    x0 = x0 > 16 ? x0 - 16 : 0;
    x1 = x1 + 16 < sw ? x1 + 16 : sw;
    JDIMENSION xoff = (JDIMENSION)x0, width = (JDIMENSION)(x1 - x0);
    if (x0 > 0 || x1 < sw) jpeg_crop_scanline(ci, &xoff, &width);
    if (y0 > 0 && jpeg_skip_scanlines(ci, (JDIMENSION)y0) != (JDIMENSION)y0)
        return cnt_err_set("%s: corrupt JPEG (fewer than %d rows at scale %d/8)", path, y0, scale);
    int rows = y1 - y0;
    size_t stride = (size_t)width * (size_t)c;
    uint8_t *pix = hold->pix = cnt_malloc((size_t)rows * stride);
    uint8_t *conv = native != c ? (hold->conv = cnt_malloc((size_t)width * (size_t)native)) : NULL;
    for (int r = 0; r < rows && !em->truncated; r++) {
        JSAMPROW rp = conv ? conv : pix + (size_t)r * stride;
        if (jpeg_read_scanlines(ci, &rp, 1) != 1) {
            em->truncated = 1;
            snprintf(em->msg, sizeof em->msg, "no row %d of %d at scale %d/8", y0 + r, sh, scale);
            break;
        }
        if (conv) convert_row(conv, native, (int)width, c, pix + (size_t)r * stride);
    }
    if (em->truncated) return cnt_err_set("%s: corrupt JPEG (%s)", path, em->msg);
    *out = (jpeg_window){pix, stride, (int)xoff, y0, (int)width, rows, sw, sh};
    hold->pix = NULL;
    return CNT_OK;
}

int jpeg_decode_window(const char *path, const uint8_t *buf, size_t len, int scale, int c, int x0, int y0, int x1,
                       int y1, jpeg_window *out) {
    CNT_ASSERT(scale >= 1 && scale <= 8 && (c == 1 || c == 3));
    memset(out, 0, sizeof *out);
    struct jpeg_decompress_struct ci;
    err_mgr em;
    held hold = {NULL, NULL};
    err_init(&ci, &em);
    volatile int rc = CNT_ERR;
    if (setjmp(em.jb)) {
        cnt_err_set("%s: corrupt JPEG (%s)", path, em.msg);
    } else {
        jpeg_create_decompress(&ci);
        jpeg_mem_src(&ci, buf, (unsigned long)len);
        jpeg_read_header(&ci, TRUE);
        rc = decode_rows(&ci, &em, path, scale, c, x0, y0, x1, y1, &hold, out);
        jpeg_abort_decompress(&ci);
    }
    jpeg_destroy_decompress(&ci);
    free(hold.pix);
    free(hold.conv);
    return rc;
}

#define CNT_STR_(x) #x
#define CNT_STR(x) CNT_STR_(x)
void jpeg_libraries(char *buf, size_t len) {
    /* the library tells no version at run time; LIBJPEG_TURBO_VERSION is a bare 2.1.5 in jconfig.h */
    file_library_line(buf, len, "libjpeg-turbo", "(built with " CNT_STR(LIBJPEG_TURBO_VERSION) ")",
                      (const void *)jpeg_std_error);
}
