/*
 * tests/test_image.c - the JPEG and resize path the loader uses
 * (data/jpeg.h, data/resample.h, data/image.h).
 *
 * Resampling: values worked by hand from the filter's definition, and random
 * images, boxes and sizes (both pass orders) against a double-precision
 * evaluation of the same antialiased triangle filter: within 1 level, the
 * fixed-point rounding of two passes.
 *
 * JPEG: files are written by libjpeg in the test (a synthetic photograph:
 * gradients, hard-edged discs, fine texture) as baseline 4:2:0 RGB, 4:4:4,
 * progressive, greyscale and CMYK (Adobe marker). A decoded window equals
 * the same pixels of the full decode exactly, at odd offsets and at the
 * edges; the full decode agrees with stb_image's (another decoder, other
 * IDCT and chroma upsampling) within the tolerances stated there; a render
 * at a reduced DCT size stays within the tolerance stated below of the
 * full-size render. Corrupt, truncated, oversized and non-image files are
 * refused with the path in the message.
 *
 * Decoding elsewhere (data.decoder = nvjpeg, data/gpu_jpeg.h): a view
 * rendered from a window decoded apart equals the ordinary render; the
 * loader's batched path (a batch's windows decoded together, the refused
 * ones falling back to the CPU) gives the CPU path's batches bit for bit
 * with the reference decoder; on a GPU, nvJPEG's windows stay within the
 * tolerance stated at test_nvjpeg_within_tolerance of libjpeg-turbo's
 * (skipped without a GPU or without nvJPEG in the build).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

#include "common/check.h"
#include "common/rng.h"
#include "data/dataset.h"
#include "data/gpu_jpeg.h"
#include "data/image.h"
#include "data/jpeg.h"
#include "data/loader.h"
#include "data/resample.h"
#include "tests/support/testutil.h"

static char tmp_root[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/cnt_image_XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tu_remove_tree(tmp_root);
    return 0;
}

static const char *path_of(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", tmp_root, name);
    return buf;
}

/* ---- resampling ---- */

static void resample_1d(const uint8_t *src, int n, double b0, double b1, int out_n, uint8_t *dst) {
    resample_axis ax, ay;
    resample_axis_init(&ax, 0, n, b0, b1, out_n, 0, out_n);
    resample_axis_init(&ay, 0, 1, 0, 1, 1, 0, 1);
    resample_run(&ax, &ay, src, (size_t)n, 0, 0, 1, dst, (size_t)out_n);
    resample_axis_free(&ax);
    resample_axis_free(&ay);
}

/* Worked from the filter's definition (data/resample.h): halving 4 pixels
 * weighs 3/4, 3/4, 1/4 of three neighbours; doubling 2 pixels gives the
 * linear interpolation at 1/4 and 3/4, edges clamped. */
static void test_resample_hand_values(void **state) {
    (void)state;
    const uint8_t four[4] = {0, 100, 200, 255}, two[2] = {0, 100};
    uint8_t out[4];
    resample_1d(four, 4, 0, 4, 2, out);
    /* (0*.75 + 100*.75 + 200*.25) / 1.75 = 71.4; (100*.25 + 200*.75 + 255*.75) / 1.75 = 209.3 */
    assert_int_equal(out[0], 71);
    assert_int_equal(out[1], 209);
    resample_1d(two, 2, 0, 2, 4, out);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 25);
    assert_int_equal(out[2], 75);
    assert_int_equal(out[3], 100);
    /* The box [1, 3) of four at its own size: pixels 1 and 2 exactly. */
    resample_1d(four, 4, 1, 3, 2, out);
    assert_int_equal(out[0], 100);
    assert_int_equal(out[1], 200);
}

/* The filter in double precision, without intermediate rounding: output
 * (i, j) of the box mapped to out_w x out_h, taps clipped to [lo, hi). */
static double ref_weight(int x, double centre, double fscale) {
    double t = fabs((x - centre + 0.5) / fscale);
    return t < 1.0 ? 1.0 - t : 0.0;
}

static void ref_axis(int lo, int hi, double b0, double b1, int out, int i, double *w) {
    double scale = (b1 - b0) / out, fscale = scale < 1 ? 1 : scale, centre = b0 + (i + 0.5) * scale, sum = 0;
    for (int x = lo; x < hi; x++) sum += w[x] = ref_weight(x, centre, fscale);
    for (int x = lo; x < hi; x++) w[x] = sum > 0 ? w[x] / sum : 0;
}

static void test_resample_matches_double_reference(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 7, 0);
    int worst = 0;
    for (int trial = 0; trial < 60; trial++) {
        int c = trial % 3 == 0 ? 1 : 3;
        int w = 8 + (int)rng_below(&r, 120), h = 8 + (int)rng_below(&r, 120);
        uint8_t *img = cnt_malloc((size_t)w * h * c);
        for (int k = 0; k < w * h * c; k++) img[k] = (uint8_t)rng_below(&r, 256);
        /* a crop (clip = box) or a whole-image resize with a part of the output kept */
        int crop = trial % 2;
        int cx = crop ? (int)rng_below(&r, (uint32_t)w / 2) : 0, cy = crop ? (int)rng_below(&r, (uint32_t)h / 2) : 0;
        int cw = crop ? 1 + (int)rng_below(&r, (uint32_t)(w - cx)) : w;
        int ch = crop ? 1 + (int)rng_below(&r, (uint32_t)(h - cy)) : h;
        int ow = 1 + (int)rng_below(&r, 160), oh = 1 + (int)rng_below(&r, 160);
        int ox = crop ? 0 : (int)rng_below(&r, (uint32_t)ow), oy = crop ? 0 : (int)rng_below(&r, (uint32_t)oh);
        int nw = ow - ox, nh = oh - oy;
        resample_axis ax, ay;
        resample_axis_init(&ax, cx, cx + cw, cx, cx + cw, ow, ox, nw);
        resample_axis_init(&ay, cy, cy + ch, cy, cy + ch, oh, oy, nh);
        uint8_t *out = cnt_malloc((size_t)nw * nh * c);
        resample_run(&ax, &ay, img, (size_t)w * c, 0, 0, c, out, (size_t)nw * c);
        double *wx = cnt_calloc((size_t)w, sizeof *wx), *wy = cnt_calloc((size_t)h, sizeof *wy);
        for (int i = 0; i < nh; i++) {
            ref_axis(cy, cy + ch, cy, cy + ch, oh, oy + i, wy);
            for (int j = 0; j < nw; j++) {
                ref_axis(cx, cx + cw, cx, cx + cw, ow, ox + j, wx);
                for (int k = 0; k < c; k++) {
                    double v = 0;
                    for (int y = cy; y < cy + ch; y++)
                        for (int x = cx; x < cx + cw; x++) v += wy[y] * wx[x] * img[((size_t)y * w + x) * c + k];
                    int d = abs((int)lround(v) - out[((size_t)i * nw + j) * c + k]);
                    if (d > worst) worst = d;
                    if (d > 1)
                        fail_msg("trial %d (%dx%d c%d, box %d,%d %dx%d -> %dx%d from %d,%d): output (%d,%d,%d) is %d, "
                                 "the filter gives %.3f",
                                 trial, w, h, c, cx, cy, cw, ch, ow, oh, ox, oy, i, j, k,
                                 out[((size_t)i * nw + j) * c + k], v);
                }
            }
        }
        free(wx);
        free(wy);
        free(out);
        free(img);
        resample_axis_free(&ax);
        resample_axis_free(&ay);
    }
    assert_true(worst <= 1);
}

/* ---- JPEG files written here ---- */

/* A synthetic photograph: a smooth gradient, hard-edged discs and texture. */
static uint8_t *photo(int w, int h, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 1);
    uint8_t *p = cnt_malloc((size_t)w * h * 3);
    double disc[6][5];
    for (int d = 0; d < 6; d++)
        for (int k = 0; k < 5; k++) disc[d][k] = rng_uniform(&r);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < 3; k++) {
                double v = 60 + 120.0 * (x + (k + 1) * y) / (w + 3.0 * h);
                for (int d = 0; d < 6; d++) {
                    double dx = x - disc[d][0] * w, dy = y - disc[d][1] * h, rad = (0.05 + 0.2 * disc[d][2]) * w;
                    if (dx * dx + dy * dy < rad * rad) v = 255 * disc[d][3 + (k == 2)] * (k ? 0.8 : 1);
                }
                v += 12 * sin(x * 0.9 + k) * cos(y * 1.3) + (double)rng_below(&r, 17) - 8;
                p[((size_t)y * w + x) * 3 + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

enum { J_420, J_444, J_PROGRESSIVE, J_GREY, J_CMYK };

/* Writes pixels (3 channels; J_GREY keeps the first, J_CMYK stores
 * 255 - R, 255 - G, 255 - B and K = 255 as Adobe's inverted CMYK) as a JPEG. */
static void write_jpeg(const char *path, const uint8_t *rgb, int w, int h, int kind, int quality) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = kind == J_GREY ? 1 : kind == J_CMYK ? 4 : 3;
    ci.in_color_space = kind == J_GREY ? JCS_GRAYSCALE : kind == J_CMYK ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    if (kind == J_444 || kind == J_CMYK)
        for (int k = 0; k < ci.num_components; k++) ci.comp_info[k].h_samp_factor = ci.comp_info[k].v_samp_factor = 1;
    if (kind == J_CMYK) /* as PIL writes 4:2:0 CMYK */
        ci.comp_info[0].h_samp_factor = ci.comp_info[0].v_samp_factor = 2;
    if (kind == J_PROGRESSIVE) jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    uint8_t *row = cnt_malloc((size_t)w * 4);
    while (ci.next_scanline < ci.image_height) {
        const uint8_t *s = rgb + (size_t)ci.next_scanline * w * 3;
        for (int x = 0; x < w; x++) {
            if (kind == J_GREY) row[x] = s[3 * x];
            else if (kind == J_CMYK)
                for (int k = 0; k < 4; k++) row[4 * x + k] = (uint8_t)(k < 3 ? 255 - s[3 * x + k] : 255);
            else memcpy(row + 3 * x, s + 3 * x, 3);
        }
        JSAMPROW rp = row;
        jpeg_write_scanlines(&ci, &rp, 1);
    }
    free(row);
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = cnt_malloc((size_t)n);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static const char *const kind_names[] = {"4:2:0", "4:4:4", "progressive", "grey", "CMYK"};

/* A window at odd offsets, one at each edge and corner, and the whole image:
 * the same bytes as the full decode's pixels there, for every kind and both
 * channel counts. */
static void test_window_equals_full_decode(void **state) {
    (void)state;
    int w = 203, h = 157;
    uint8_t *rgb = photo(w, h, 3);
    const int win[][4] = {{37, 21, 101, 77}, {0, 0, 17, 9}, {190, 150, 203, 157}, {0, 60, 203, 61},
                          {99, 0, 100, 157}, {16, 16, 32, 32}, {0, 0, 203, 157}};
    for (int kind = J_420; kind <= J_CMYK; kind++) {
        write_jpeg(path_of("w.jpg"), rgb, w, h, kind, 90);
        size_t len;
        uint8_t *buf = slurp(path_of("w.jpg"), &len);
        for (int c = 1; c <= 3; c += 2) {
            jpeg_window full;
            assert_int_equal(jpeg_decode_window("w.jpg", buf, len, 8, c, 0, 0, w, h, &full), CNT_OK);
            assert_int_equal(full.w, w);
            assert_int_equal(full.h, h);
            for (size_t k = 0; k < sizeof win / sizeof *win; k++) {
                jpeg_window part;
                assert_int_equal(jpeg_decode_window("w.jpg", buf, len, 8, c, win[k][0], win[k][1], win[k][2], win[k][3],
                                                    &part),
                                 CNT_OK);
                assert_true(part.x0 <= win[k][0] && part.x0 + part.w >= win[k][2]);
                assert_int_equal(part.y0, win[k][1]);
                assert_int_equal(part.h, win[k][3] - win[k][1]);
                for (int y = win[k][1]; y < win[k][3]; y++) {
                    const uint8_t *a =
                        part.pix + (size_t)(y - part.y0) * part.stride + (size_t)(win[k][0] - part.x0) * c;
                    const uint8_t *b = full.pix + (size_t)y * full.stride + (size_t)win[k][0] * c;
                    if (memcmp(a, b, (size_t)(win[k][2] - win[k][0]) * c) != 0)
                        fail_msg("%s, %d channel(s): window %d,%d-%d,%d differs from the full decode in row %d",
                                 kind_names[kind], c, win[k][0], win[k][1], win[k][2], win[k][3], y);
                }
                free(part.pix);
            }
            free(full.pix);
        }
        free(buf);
    }
    free(rgb);
}

/* libjpeg-turbo's full decode against stb_image's (the decoder before it):
 * different IDCT and chroma upsampling, so not equal, but close. Stated
 * tolerance: mean absolute difference below 1 level and 99.9 % of values
 * within 12 levels; measured means 0.004-0.55 and at most 10 levels apart
 * (grey output of 4:4:4 colour) on this image. */
static void test_full_decode_agrees_with_stb(void **state) {
    (void)state;
    int w = 160, h = 120;
    uint8_t *rgb = photo(w, h, 5);
    for (int kind = J_420; kind <= J_CMYK; kind++) {
        write_jpeg(path_of("s.jpg"), rgb, w, h, kind, 90);
        for (int c = 1; c <= 3; c += 2) {
            image_src im;
            assert_int_equal(image_open(&im, path_of("s.jpg"), c), CNT_OK);
            assert_non_null(im.bytes); /* a JPEG: header only */
            assert_int_equal(im.w, w);
            assert_int_equal(im.h, h);
            image_view v = image_view_resize(w, h, w, h);
            uint8_t *ours = cnt_malloc((size_t)w * h * c);
            assert_int_equal(image_render(&im, &v, 0, ours), CNT_OK);
            image_close(&im);
            int sw, sh, comp;
            uint8_t *theirs = stbi_load(path_of("s.jpg"), &sw, &sh, &comp, c);
            assert_non_null(theirs);
            double sum = 0;
            size_t n = (size_t)w * h * c, over = 0;
            for (size_t k = 0; k < n; k++) {
                int d = abs(ours[k] - theirs[k]);
                sum += d;
                over += d > 12;
            }
            if (sum / n >= 1.0 || over > n / 1000)
                fail_msg("%s, %d channel(s): mean difference from stb_image %.3f, %zu of %zu values off by more "
                         "than 12",
                         kind_names[kind], c, sum / n, over, n);
            stbi_image_free(theirs);
            free(ours);
        }
    }
    free(rgb);
}

/* A render at a reduced DCT size against the full-size render of the same
 * view. Stated tolerance: mean absolute difference at most 2 levels and PSNR
 * at least 38 dB; measured here 0.5-1.3 levels and 42.7-48.9 dB (on natural
 * photographs at 1/2 size, tools/check_image_torch.py: 1-2.5 levels). */
static void test_dct_scaled_render_within_tolerance(void **state) {
    (void)state;
    int w = 640, h = 480;
    uint8_t *rgb = photo(w, h, 9);
    write_jpeg(path_of("d.jpg"), rgb, w, h, J_420, 90);
    image_src im;
    assert_int_equal(image_open(&im, path_of("d.jpg"), 3), CNT_OK);
    struct {
        image_view v;
        int scale;
    } cases[] = {
        {image_view_crop_resize(40, 30, 500, 450, 224, 224), 4},   /* train: a large crop, 1/2 */
        {image_view_crop_resize(0, 0, 640, 480, 112, 112), 2},     /* the whole image to 112: 1/4 */
        {image_view_resize_centre(w, h, 100, 96, 96), 2},          /* eval, small: 1/4 */
        {image_view_resize_centre(w, h, 200, 176, 176), 4},        /* eval: 1/2 */
        {image_view_crop_resize(100, 100, 200, 200, 224, 224), 8}, /* an upscale: full size */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const image_view *v = &cases[k].v;
        assert_int_equal(image_view_scale(&im, v), cases[k].scale);
        size_t n = (size_t)v->ow * v->oh * 3;
        uint8_t *a = cnt_malloc(n), *b = cnt_malloc(n);
        assert_int_equal(image_render(&im, v, 0, a), CNT_OK);
        assert_int_equal(image_render(&im, v, 1, b), CNT_OK);
        double sum = 0, sq = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)a[i] - b[i];
            sum += fabs(d);
            sq += d * d;
        }
        double mean = sum / n, psnr = sq > 0 ? 10 * log10(255.0 * 255.0 / (sq / n)) : 99;
        if (cases[k].scale == 8) assert_true(sq == 0);
        if (mean > 2.0 || psnr < 38)
            fail_msg("case %zu (scale %d/8): mean difference %.3f levels, PSNR %.1f dB", k, cases[k].scale, mean, psnr);
        free(a);
        free(b);
    }
    image_close(&im);
    free(rgb);
}

/* torchvision's CenterCrop rounds half to even (Python's round). */
static void test_centre_crop_rounding(void **state) {
    (void)state;
    /* 300x257, shorter side to 257: (257 - 224) / 2 = 16.5 -> 16; (300 - 224) / 2 = 38 */
    image_view v = image_view_resize_centre(300, 257, 257, 224, 224);
    assert_int_equal(v.out_w, 300);
    assert_int_equal(v.out_h, 257);
    assert_int_equal(v.oy, 16);
    assert_int_equal(v.ox, 38);
    /* 500x375 to 256: the longer side is floor(256 * 500 / 375) = 341; (341 - 224) / 2 = 58.5 -> 58 */
    v = image_view_resize_centre(500, 375, 256, 224, 224);
    assert_int_equal(v.out_w, 341);
    assert_int_equal(v.ox, 58);
    assert_int_equal(v.oy, 16);
}

static void expect_refused(const char *name, int at_open, const char *what) {
    image_src im;
    char path[512];
    snprintf(path, sizeof path, "%s", path_of(name));
    int rc = image_open(&im, path, 3);
    if (!at_open) {
        assert_int_equal(rc, CNT_OK);
        image_view v = image_view_resize(im.w, im.h, 64, 64);
        uint8_t *out = cnt_malloc(64 * 64 * 3);
        rc = image_render(&im, &v, 0, out);
        free(out);
        image_close(&im);
    }
    assert_int_equal(rc, CNT_ERR);
    const char *msg = cnt_err_msg();
    if (!strstr(msg, path) || !strstr(msg, what)) fail_msg("%s: message '%s' lacks the path or '%s'", name, msg, what);
}

static void test_refusals(void **state) {
    (void)state;
    int w = 96, h = 80;
    uint8_t *rgb = photo(w, h, 11);
    write_jpeg(path_of("ok.jpg"), rgb, w, h, J_420, 90);
    write_jpeg(path_of("okp.jpg"), rgb, w, h, J_PROGRESSIVE, 90);
    size_t len, plen;
    uint8_t *buf = slurp(path_of("ok.jpg"), &len), *pbuf = slurp(path_of("okp.jpg"), &plen);
    /* Truncated after the header: the rows are missing. */
    spit(path_of("cut.jpg"), buf, len / 2);
    expect_refused("cut.jpg", 0, "corrupt JPEG");
    spit(path_of("cutp.jpg"), pbuf, plen / 2);
    expect_refused("cutp.jpg", 0, "corrupt JPEG");
    /* Only the start-of-image marker and garbage. */
    uint8_t junk[200] = {0xFF, 0xD8, 0xFF};
    for (size_t k = 3; k < sizeof junk; k++) junk[k] = (uint8_t)(k * 37);
    spit(path_of("junk.jpg"), junk, sizeof junk);
    expect_refused("junk.jpg", 1, "corrupt JPEG");
    /* Empty, and not an image at all. */
    spit(path_of("empty.jpg"), junk, 0);
    expect_refused("empty.jpg", 1, "not a decodable image");
    spit(path_of("text.jpg"), (const uint8_t *)"hello", 5);
    expect_refused("text.jpg", 1, "not a decodable image");
    /* A header claiming 60000 x 60000 pixels: refused before any decode. */
    uint8_t *big = cnt_malloc(len);
    memcpy(big, buf, len);
    size_t k;
    for (k = 2; k + 8 < len && !(big[k] == 0xFF && big[k + 1] == 0xC0); k++) {}
    assert_true(k + 8 < len);
    big[k + 5] = big[k + 7] = 60000 >> 8;
    big[k + 6] = big[k + 8] = 60000 & 255;
    spit(path_of("big.jpg"), big, len);
    expect_refused("big.jpg", 1, "outside 1..");
    /* A directory named like an image. */
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path_of("dir.jpg"));
    assert_int_equal(mkdir(dir, 0700), 0);
    expect_refused("dir.jpg", 1, "directory");
    /* and the intact files still decode */
    image_src im;
    assert_int_equal(image_open(&im, path_of("okp.jpg"), 3), CNT_OK);
    image_view v = image_view_resize(w, h, w, h);
    uint8_t *out = cnt_malloc((size_t)w * h * 3);
    assert_int_equal(image_render(&im, &v, 1, out), CNT_OK);
    image_close(&im);
    free(out);
    free(big);
    free(buf);
    free(pbuf);
    free(rgb);
}

/* A view rendered from a window decoded apart (as nvJPEG's are) equals the
 * ordinary full-size render, for training crops and the evaluation view. */
static void test_render_from_window(void **state) {
    (void)state;
    int w = 241, h = 173;
    uint8_t *rgb = photo(w, h, 11);
    rng r;
    rng_seed(&r, 12, 1);
    for (int kind = J_420; kind <= J_GREY; kind++) {
        write_jpeg(path_of("v.jpg"), rgb, w, h, kind, 88);
        for (int c = 1; c <= 3; c += 2) {
            image_src im;
            assert_int_equal(image_open(&im, path_of("v.jpg"), c), CNT_OK);
            for (int t = 0; t < 12; t++) {
                int x, y, cw, ch;
                loader_resized_crop_params(&r, w, h, 0.08f, &x, &y, &cw, &ch);
                image_view v = t == 0 ? image_view_resize_centre(w, h, 73, 64, 64)
                                      : image_view_crop_resize(x, y, cw, ch, 48 + t, 40 + 3 * t);
                uint8_t *a = cnt_malloc((size_t)v.ow * v.oh * c), *b = cnt_malloc((size_t)v.ow * v.oh * c);
                assert_int_equal(image_render(&im, &v, 0, a), CNT_OK);
                int x0, y0, x1, y1;
                image_view_window(&im, &v, &x0, &y0, &x1, &y1);
                assert_true(x0 >= 0 && y0 >= 0 && x1 <= w && y1 <= h && x0 < x1 && y0 < y1);
                jpeg_window win;
                assert_int_equal(jpeg_decode_window("v.jpg", im.bytes, im.len, 8, c, x0, y0, x1, y1, &win), CNT_OK);
                image_render_window(&im, &v, &win, b);
                if (memcmp(a, b, (size_t)v.ow * v.oh * c) != 0)
                    fail_msg("%s, %d channel(s), view %d: the render from a window differs", kind_names[kind], c, t);
                free(win.pix);
                free(a);
                free(b);
            }
            image_close(&im);
        }
    }
    free(rgb);
}

/* A tree of every kind the loader meets: baseline and progressive JPEGs
 * (which the hardware decoder and the reference refuse), grey JPEGs, PNGs
 * and one truncated JPEG, 3 classes. */
static const char *mixed_tree(void) {
    static char root[512];
    snprintf(root, sizeof root, "%s/mixed", tmp_root);
    for (int i = 0; i < 30; i++) {
        char dir[600], file[700];
        snprintf(dir, sizeof dir, "%s/mixed", tmp_root);
        mkdir(dir, 0777);
        snprintf(dir, sizeof dir, "%s/mixed/c%d", tmp_root, i % 3);
        mkdir(dir, 0777);
        int w = 90 + 7 * i, h = 70 + 5 * (i % 7);
        uint8_t *rgb = photo(w, h, (uint64_t)i + 100);
        int kind = i % 5 == 1 ? J_PROGRESSIVE : i % 5 == 3 ? J_GREY : J_420;
        snprintf(file, sizeof file, "%s/%02d.%s", dir, i, i % 5 == 4 ? "png" : "jpg");
        if (i % 5 == 4)
            assert_true(stbi_write_png(file, w, h, 3, rgb, w * 3));
        else
            write_jpeg(file, rgb, w, h, kind, 85);
        if (i == 7) { /* truncated: unreadable on any decoder */
            size_t len;
            uint8_t *b = slurp(file, &len);
            spit(file, b, len / 3);
            free(b);
        }
        free(rgb);
    }
    return root;
}

/* Every batch of an epoch from two loaders, compared bit for bit. */
static void assert_same_epoch(const dataset *ds, const loader_options *a, const loader_options *b) {
    loader *la = loader_create(ds, a), *lb = loader_create(ds, b);
    assert_non_null(la);
    assert_non_null(lb);
    size_t sample = (size_t)ds->c * ds->h * ds->w;
    for (int epoch = 0; epoch < 2; epoch++) {
        loader_start_epoch(la, epoch);
        loader_start_epoch(lb, epoch);
        const batch *x, *y;
        while ((x = loader_next(la)) != NULL) {
            assert_non_null(y = loader_next(lb));
            assert_int_equal(x->n, y->n);
            assert_memory_equal(x->labels, y->labels, (size_t)x->n * sizeof(int32_t));
            assert_memory_equal(x->x, y->x, (size_t)x->n * sample * sizeof(float));
        }
        assert_null(loader_next(lb));
        assert_int_equal(loader_skipped(la), loader_skipped(lb));
    }
    loader_free(la);
    loader_free(lb);
}

/* The loader's batched decode (data.decoder = nvjpeg's path) with the
 * reference decoder: the CPU path's batches, bit for bit, in training
 * (resized crop and pad crop, a truncated file replaced) and evaluation
 * (left out), the refused files decoded on the CPU. */
static void test_loader_batched_decode(void **state) {
    (void)state;
    dataset ds;
    assert_int_equal(dataset_list_imagefolder(&ds, mixed_tree()), CNT_OK);
    dataset_set_shape(&ds, 3, 32);
    gpu_jpeg *ref = gpu_jpeg_create_reference();
    loader_options o = {.batch = 4, .rank = 1, .world = 2, .seed = 3, .shuffle = 1, .drop_last = 1, .augment = 1,
                        .crop = LOADER_CROP_RESIZED, .min_scale = 0.08f, .jpeg_scaling = 0,
                        .mean = {0.4f, 0.5f, 0.6f}, .std = {0.2f, 0.3f, 0.25f}, .workers = 2, .prefetch = 2};
    for (int mode = 0; mode < 3; mode++) {
        loader_options a = o;
        if (mode == 1) a.crop = LOADER_CROP_PAD, a.pad = 3;
        if (mode == 2) a.shuffle = a.drop_last = a.augment = 0; /* evaluation */
        loader_options b = a;
        b.gpu_jpeg = ref;
        assert_same_epoch(&ds, &a, &b);
    }
    /* the progressive files (6 of them) and the truncated one were refused */
    assert_true(gpu_jpeg_refused(ref) > 0);
    gpu_jpeg_free(ref);
    dataset_free(&ds);
}

/* On a GPU: nvJPEG's windows against the reference decoder's. nvJPEG's IDCT
 * and chroma upsampling are not libjpeg-turbo's; stated tolerance (to be
 * confirmed on the first GPU run): mean absolute difference at most 1.5
 * levels and every value within 24 levels, for baseline 4:2:0, 4:4:4 and
 * grey files, 1 and 3 channels; progressive files decoded or refused. */
static void test_nvjpeg_within_tolerance(void **state) {
    (void)state;
    gpu_jpeg *g = gpu_jpeg_built() ? gpu_jpeg_create(0) : NULL;
    if (!g) skip(); /* no nvJPEG in this build, or no GPU */
    int w = 251, h = 187;
    uint8_t *rgb = photo(w, h, 21);
    const int win[][4] = {{0, 0, 251, 187}, {37, 21, 101, 77}, {200, 150, 251, 187}, {3, 5, 9, 11}};
    for (int kind = J_420; kind <= J_GREY; kind++) {
        write_jpeg(path_of("n.jpg"), rgb, w, h, kind, 90);
        size_t len;
        uint8_t *buf = slurp(path_of("n.jpg"), &len);
        for (int c = 1; c <= 3; c += 2) {
            gpu_jpeg_job jobs[4];
            for (int k = 0; k < 4; k++)
                jobs[k] = (gpu_jpeg_job){.bytes = buf, .len = len, .c = c, .w = w, .h = h, .x0 = win[k][0],
                                         .y0 = win[k][1], .x1 = win[k][2], .y1 = win[k][3]};
            gpu_jpeg_decode(g, jobs, 4);
            for (int k = 0; k < 4; k++) {
                if (!jobs[k].ok) {
                    assert_int_equal(kind, J_PROGRESSIVE); /* only those may be refused */
                    continue;
                }
                jpeg_window ref;
                assert_int_equal(jpeg_decode_window("n.jpg", buf, len, 8, c, win[k][0], win[k][1], win[k][2],
                                                    win[k][3], &ref), CNT_OK);
                double sum = 0;
                int worst = 0;
                long count = 0;
                for (int y = win[k][1]; y < win[k][3]; y++)
                    for (int x = win[k][0]; x < win[k][2]; x++)
                        for (int ch = 0; ch < c; ch++) {
                            int a = jobs[k].win.pix[(size_t)(y - jobs[k].win.y0) * jobs[k].win.stride +
                                                    (size_t)(x - jobs[k].win.x0) * c + ch];
                            int b = ref.pix[(size_t)(y - ref.y0) * ref.stride + (size_t)(x - ref.x0) * c + ch];
                            sum += abs(a - b);
                            worst = abs(a - b) > worst ? abs(a - b) : worst;
                            count++;
                        }
                print_message("nvJPEG against libjpeg-turbo, %s, %d channel(s), window %d: mean %.3f, max %d\n",
                              kind_names[kind], c, k, sum / count, worst);
                assert_true(sum / count <= 1.5);
                assert_true(worst <= 24);
                free(ref.pix);
                free(jobs[k].win.pix);
            }
        }
        free(buf);
    }
    printf("%s; refused %ld\n", gpu_jpeg_describe(g), gpu_jpeg_refused(g));
    gpu_jpeg_free(g);
    free(rgb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resample_hand_values),
        cmocka_unit_test(test_resample_matches_double_reference),
        cmocka_unit_test(test_window_equals_full_decode),
        cmocka_unit_test(test_full_decode_agrees_with_stb),
        cmocka_unit_test(test_dct_scaled_render_within_tolerance),
        cmocka_unit_test(test_centre_crop_rounding),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_render_from_window),
        cmocka_unit_test(test_loader_batched_decode),
        cmocka_unit_test(test_nvjpeg_within_tolerance),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
