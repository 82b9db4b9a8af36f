/*
 * data/image.c - image files made into a transform's pixels (see
 * data/image.h).
 */
#include "data/image.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image.h>

#include "common/check.h"
#include "common/fileio.h"
#include "data/jpeg.h"
#include "data/resample.h"

static int check_size(const char *path, int w, int h) {
    if (w < 1 || h < 1 || (long)w * (long)h > IMAGE_MAX_PIXELS)
        return cnt_err_set("%s: image of %dx%d pixels is outside 1..%ld pixels", path, w, h, IMAGE_MAX_PIXELS);
    return CNT_OK;
}

int image_open(image_src *im, const char *path, int c) {
    size_t len = 0;
    /* A regular file only: a FIFO's open and reads would block the worker. */
    uint8_t *buf = (uint8_t *)file_read_all(path, NULL, IMAGE_MAX_FILE_BYTES, &len);
    if (!buf) {
        memset(im, 0, sizeof *im);
        return CNT_ERR;
    }
    return image_open_bytes(im, buf, len, path, c);
}

int image_open_bytes(image_src *im, uint8_t *buf, size_t len, const char *path, int c) {
    memset(im, 0, sizeof *im);
    im->path = path;
    im->c = c;
    if (jpeg_is_jpeg(buf, len)) {
        if (jpeg_read_size(path, buf, len, &im->w, &im->h) != CNT_OK || check_size(path, im->w, im->h) != CNT_OK) {
            free(buf);
            return CNT_ERR;
        }
        im->bytes = buf;
        im->len = len;
        return CNT_OK;
    }
    int w, h, comp;
    if (len > INT32_MAX || !stbi_info_from_memory(buf, (int)len, &w, &h, &comp)) {
        const char *why = stbi_failure_reason();
        free(buf);
        return cnt_err_set("%s: not a decodable image (%s)", path, why ? why : "unknown format");
    }
    if (check_size(path, w, h) != CNT_OK) {
        free(buf);
        return CNT_ERR;
    }
    uint8_t *p = stbi_load_from_memory(buf, (int)len, &w, &h, &comp, c);
    const char *why = p ? NULL : stbi_failure_reason();
    free(buf);
    if (!p) return cnt_err_set("%s: corrupt image (%s)", path, why ? why : "decode failed");
    im->pix = p;
    im->owns_pix = 1;
    im->stride = (size_t)w * (size_t)c;
    im->w = w;
    im->h = h;
    return CNT_OK;
}

void image_wrap(image_src *im, const uint8_t *hwc, int w, int h, int c, const char *name) {
    memset(im, 0, sizeof *im);
    im->path = name;
    im->pix = (uint8_t *)hwc;
    im->stride = (size_t)w * (size_t)c;
    im->w = w;
    im->h = h;
    im->c = c;
}

void image_close(image_src *im) {
    free(im->bytes);
    if (im->owns_pix) stbi_image_free(im->pix);
    memset(im, 0, sizeof *im);
}

image_view image_view_resize(int w, int h, int out_w, int out_h) {
    return (image_view){0, 0, w, h, 0, 0, w, h, out_w, out_h, 0, 0, out_w, out_h};
}

image_view image_view_crop_resize(int x, int y, int cw, int ch, int out_w, int out_h) {
    return (image_view){x, y, x + cw, y + ch, x, y, x + cw, y + ch, out_w, out_h, 0, 0, out_w, out_h};
}

image_view image_view_resize_centre(int w, int h, int short_side, int cw, int ch) {
    int rw, rh;
    if (w <= h) {
        rw = short_side;
        rh = (int)((long)short_side * h / w);
    } else {
        rh = short_side;
        rw = (int)((long)short_side * w / h);
    }
    CNT_ASSERT(cw <= rw && ch <= rh);
    image_view v = image_view_resize(w, h, rw, rh);
    v.ox = (int)rint((rw - cw) / 2.0);
    v.oy = (int)rint((rh - ch) / 2.0);
    v.ow = cw;
    v.oh = ch;
    return v;
}

int image_view_scale(const image_src *im, const image_view *v) {
    if (!im->bytes) return 8;
    /* 1/8, 1/4 and 1/2 only: libjpeg-turbo's other reduced sizes (3/8, 5/8,
     * 6/8, 7/8) run its plain C IDCTs and decode slower than the full size
     * (0.7-2.1 ms against 0.8 ms for a 500x375 photograph here). */
    for (int m = 1; m < 8; m *= 2) {
        int sw, sh;
        jpeg_scaled_size(im->w, im->h, m, &sw, &sh);
        double bw = (v->bx1 - v->bx0) * sw / im->w, bh = (v->by1 - v->by0) * sh / im->h;
        if (bw >= v->out_w && bh >= v->out_h) return m;
    }
    return 8;
}

/* The axes of v on an image whose size is scaled by (sx, sy) and is sw x sh. */
static void view_axes(const image_view *v, double sx, double sy, int sw, int sh, resample_axis *ax,
                      resample_axis *ay) {
    int lx = (int)floor(v->cx0 * sx), hx = (int)ceil(v->cx1 * sx), ly = (int)floor(v->cy0 * sy),
        hy = (int)ceil(v->cy1 * sy);
    if (hx > sw) hx = sw;
    if (hy > sh) hy = sh;
    if (hx <= lx) hx = lx + 1;
    if (hy <= ly) hy = ly + 1;
    resample_axis_init(ax, lx, hx, v->bx0 * sx, v->bx1 * sx, v->out_w, v->ox, v->ow);
    resample_axis_init(ay, ly, hy, v->by0 * sy, v->by1 * sy, v->out_h, v->oy, v->oh);
}

void image_view_window(const image_src *im, const image_view *v, int *x0, int *y0, int *x1, int *y1) {
    resample_axis ax, ay;
    view_axes(v, 1.0, 1.0, im->w, im->h, &ax, &ay);
    *x0 = ax.src_lo;
    *x1 = ax.src_hi;
    *y0 = ay.src_lo;
    *y1 = ay.src_hi;
    resample_axis_free(&ax);
    resample_axis_free(&ay);
}

void image_render_window(const image_src *im, const image_view *v, const jpeg_window *win, uint8_t *dst) {
    resample_axis ax, ay;
    view_axes(v, 1.0, 1.0, im->w, im->h, &ax, &ay);
    CNT_ASSERT(win->sw == im->w && win->sh == im->h && win->x0 <= ax.src_lo && win->y0 <= ay.src_lo &&
               win->x0 + win->w >= ax.src_hi && win->y0 + win->h >= ay.src_hi);
    resample_run(&ax, &ay, win->pix, win->stride, win->x0, win->y0, im->c, dst, (size_t)v->ow * (size_t)im->c);
    resample_axis_free(&ax);
    resample_axis_free(&ay);
}

int image_render(const image_src *im, const image_view *v, int dct, uint8_t *dst) {
    resample_axis ax, ay;
    size_t dst_stride = (size_t)v->ow * (size_t)im->c;
    if (!im->bytes) {
        view_axes(v, 1.0, 1.0, im->w, im->h, &ax, &ay);
        resample_run(&ax, &ay, im->pix, im->stride, 0, 0, im->c, dst, dst_stride);
        resample_axis_free(&ax);
        resample_axis_free(&ay);
        return CNT_OK;
    }
    int m = dct ? image_view_scale(im, v) : 8, sw, sh;
    jpeg_scaled_size(im->w, im->h, m, &sw, &sh);
    view_axes(v, (double)sw / im->w, (double)sh / im->h, sw, sh, &ax, &ay);
    jpeg_window win;
    int rc = jpeg_decode_window(im->path, im->bytes, im->len, m, im->c, ax.src_lo, ay.src_lo, ax.src_hi, ay.src_hi,
                                &win);
    if (rc == CNT_OK) {
        CNT_ASSERT(win.sw == sw && win.sh == sh);
        resample_run(&ax, &ay, win.pix, win.stride, win.x0, win.y0, im->c, dst, dst_stride);
        free(win.pix);
    }
    resample_axis_free(&ax);
    resample_axis_free(&ay);
    return rc;
}
