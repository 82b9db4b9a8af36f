/*
 * tools/render_image.c - one image through the loader's decode and resize
 * (data/image.h), written as a binary PPM (3 channels) or PGM (1): what the
 * trainer's transforms make of a file, to look at or to compare with
 * torchvision (tests/test_image_torch.sh).
 *
 *   render_image FILE OUT --resize W H            the whole image to W x H
 *   render_image FILE OUT --crop X Y CW CH W H    the crop resized to W x H (RandomResizedCrop's)
 *   render_image FILE OUT --centre SHORT CW CH    shorter side to SHORT, centre CW x CH (the eval transform)
 *   options: --grey (1 channel), --dct (JPEG: decode at the reduced size the
 *            loader's data.jpeg_scaling picks), --info (print "WxH scale M/8")
 *
 * Exit codes: 0 written, 1 the file could not be read or decoded (message
 * names it), 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "data/image.h"

static int usage(void) {
    fprintf(stderr, "usage: render_image FILE OUT (--resize W H | --crop X Y CW CH W H | --centre SHORT CW CH)\n"
                    "                    [--grey] [--dct] [--info]\n");
    return 2;
}

static int ints(char **argv, int i, int argc, int n, int *v) {
    if (i + n >= argc) return 0;
    for (int k = 0; k < n; k++) {
        char *end;
        long x = strtol(argv[i + 1 + k], &end, 10);
        if (*end || x < 0 || x > 1 << 20) return 0;
        v[k] = (int)x;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) return usage();
    const char *file = argv[1], *outp = argv[2];
    int mode = 0, v[6] = {0}, grey = 0, dct = 0, info = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--resize") && ints(argv, i, argc, 2, v)) mode = 1, i += 2;
        else if (!strcmp(argv[i], "--crop") && ints(argv, i, argc, 6, v)) mode = 2, i += 6;
        else if (!strcmp(argv[i], "--centre") && ints(argv, i, argc, 3, v)) mode = 3, i += 3;
        else if (!strcmp(argv[i], "--grey")) grey = 1;
        else if (!strcmp(argv[i], "--dct")) dct = 1;
        else if (!strcmp(argv[i], "--info")) info = 1;
        else return usage();
    }
    if (!mode) return usage();
    int c = grey ? 1 : 3;
    image_src im;
    if (image_open(&im, file, c) != CNT_OK) {
        fprintf(stderr, "render_image: %s\n", cnt_err_msg());
        return 1;
    }
    image_view view;
    if (mode == 1) {
        if (v[0] < 1 || v[1] < 1) return usage();
        view = image_view_resize(im.w, im.h, v[0], v[1]);
    } else if (mode == 2) {
        if (v[2] < 1 || v[3] < 1 || v[4] < 1 || v[5] < 1 || v[0] + v[2] > im.w || v[1] + v[3] > im.h) {
            fprintf(stderr, "render_image: crop %d,%d %dx%d is not inside the %dx%d image\n", v[0], v[1], v[2], v[3],
                    im.w, im.h);
            image_close(&im);
            return 2;
        }
        view = image_view_crop_resize(v[0], v[1], v[2], v[3], v[4], v[5]);
    } else {
        int s = v[0], rw = im.w <= im.h ? s : (int)((long)s * im.w / im.h),
            rh = im.w <= im.h ? (int)((long)s * im.h / im.w) : s;
        if (s < 1 || v[1] < 1 || v[2] < 1 || v[1] > rw || v[2] > rh) {
            fprintf(stderr, "render_image: centre %dx%d does not fit the image resized to %dx%d\n", v[1], v[2], rw,
                    rh);
            image_close(&im);
            return 2;
        }
        view = image_view_resize_centre(im.w, im.h, s, v[1], v[2]);
    }
    if (info) printf("%dx%d scale %d/8\n", im.w, im.h, dct ? image_view_scale(&im, &view) : 8);
    size_t n = (size_t)view.ow * (size_t)view.oh * (size_t)c;
    uint8_t *pix = cnt_malloc(n);
    int rc = image_render(&im, &view, dct, pix);
    image_close(&im);
    if (rc != CNT_OK) {
        fprintf(stderr, "render_image: %s\n", cnt_err_msg());
        free(pix);
        return 1;
    }
    FILE *f = fopen(outp, "wb");
    int ok = f && fprintf(f, "P%d\n%d %d\n255\n", grey ? 5 : 6, view.ow, view.oh) > 0 && fwrite(pix, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    free(pix);
    if (!ok) {
        fprintf(stderr, "render_image: cannot write %s\n", outp);
        return 1;
    }
    return 0;
}
