/*
 * tests/test_tensorboard.c - the TensorBoard event writer (train/tensorboard.c)
 * read back by a decoder written here from the formats' definitions, not
 * from the writer: TFRecord framing (length, masked CRC-32C of the length,
 * the bytes, their masked CRC-32C), then the Event protocol buffer's fields
 * (wall_time, step, file_version, session_log, summary with tag and
 * simple_value, histo, or a text plugin's string tensor). Also: CRC-32C's check value, a buffer too small,
 * a write to a full device naming the file, and the files' placement (a
 * fresh run moves an earlier run's event files into earlier-STAMP/, a
 * resumed run keeps them and names its own file after theirs).
 * TensorBoard's own reader on a real run: tests/test_tensorboard.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/stat.h>

#include "common/check.h"
#include "train/tensorboard.h"

static char root[] = "/tmp/cnt_tb_XXXXXX";

static int setup(void **state) {
    (void)state;
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd);
}

/* ---------------------------------------------------------------- decoder */

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t unmask(uint32_t m) {
    uint32_t c = m - 0xa282ead8u;
    return (c >> 17) | (c << 15);
}

/* One TFRecord at buf[0..n): its payload (checked against both CRCs) and the
 * record's whole length. */
static const uint8_t *tfrecord(const uint8_t *buf, size_t n, size_t *len, size_t *whole) {
    assert_true(n >= 16);
    *len = (size_t)le(buf, 8);
    assert_int_equal(unmask((uint32_t)le(buf + 8, 4)), tb_crc32c(buf, 8));
    assert_true(12 + *len + 4 <= n);
    assert_int_equal(unmask((uint32_t)le(buf + 12 + *len, 4)), tb_crc32c(buf + 12, *len));
    *whole = 12 + *len + 4;
    return buf + 12;
}

typedef struct field {
    int no, wire;
    uint64_t v;            /* varint, fixed64, fixed32 */
    const uint8_t *p;      /* length-delimited */
    size_t len;
} field;

static uint64_t varint(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    for (int s = 0; *p < end; s += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7F) << s;
        if (!(b & 0x80)) return v;
    }
    fail_msg("varint runs past the message");
    return 0;
}

/* The next field of a message at *p (0 at its end). */
static int next_field(const uint8_t **p, const uint8_t *end, field *f) {
    if (*p >= end) return 0;
    uint64_t key = varint(p, end);
    f->no = (int)(key >> 3);
    f->wire = (int)(key & 7);
    switch (f->wire) {
    case 0: f->v = varint(p, end); break;
    case 1: assert_true(*p + 8 <= end); f->v = le(*p, 8); *p += 8; break;
    case 5: assert_true(*p + 4 <= end); f->v = le(*p, 4); *p += 4; break;
    case 2:
        f->len = (size_t)varint(p, end);
        assert_true(*p + f->len <= end);
        f->p = *p;
        *p += f->len;
        break;
    default: fail_msg("wire type %d", f->wire);
    }
    return 1;
}

static double as_double(uint64_t v) {
    double d;
    memcpy(&d, &v, 8);
    return d;
}

static float as_float(uint64_t v) {
    uint32_t u = (uint32_t)v;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* What an Event holds (scalars and at most one histogram of its summary). */
typedef struct decoded {
    double wall_time;
    long step;
    char version[32];
    int session_status;       /* -1: no session_log */
    int n;
    char tag[16][48];
    float value[16];
    char histo_tag[48];
    char text_tag[48], plugin[16], text[256]; /* a text value: its tag, metadata's plugin name, the string */
    int dtype, shape_dims;
    double histo[5];          /* min, max, num, sum, sum_squares */
    double limit[32], count[32];
    int n_limit, n_count;
} decoded;

static void decode_histo(const uint8_t *p, const uint8_t *end, decoded *d) {
    field f;
    while (next_field(&p, end, &f)) {
        if (f.no >= 1 && f.no <= 5) {
            assert_int_equal(f.wire, 1);
            d->histo[f.no - 1] = as_double(f.v);
        } else if (f.no == 6 || f.no == 7) {
            assert_int_equal(f.wire, 2); /* packed */
            double *a = f.no == 6 ? d->limit : d->count;
            int k = (int)(f.len / 8);
            for (int i = 0; i < k && i < 32; i++) a[i] = as_double(le(f.p + 8 * i, 8));
            *(f.no == 6 ? &d->n_limit : &d->n_count) = k;
        }
    }
}

static void decode_value(const uint8_t *p, const uint8_t *end, decoded *d) {
    field f;
    char tag[48] = "";
    while (next_field(&p, end, &f)) {
        if (f.no == 1) {
            assert_int_equal(f.wire, 2);
            assert_true(f.len < sizeof tag);
            memcpy(tag, f.p, f.len);
            tag[f.len] = '\0';
        } else if (f.no == 2) {
            assert_int_equal(f.wire, 5);
            assert_true(d->n < 16);
            strcpy(d->tag[d->n], tag);
            d->value[d->n++] = as_float(f.v);
        } else if (f.no == 5) {
            assert_int_equal(f.wire, 2);
            strcpy(d->histo_tag, tag);
            decode_histo(f.p, f.p + f.len, d);
        } else if (f.no == 9) { /* metadata { plugin_data 1 { plugin_name 1 } } */
            const uint8_t *q = f.p, *qe = f.p + f.len;
            field m, pd;
            assert_true(next_field(&q, qe, &m));
            assert_int_equal(m.no, 1);
            const uint8_t *r = m.p, *re = m.p + m.len;
            assert_true(next_field(&r, re, &pd));
            assert_int_equal(pd.no, 1);
            assert_true(pd.len < sizeof d->plugin);
            memcpy(d->plugin, pd.p, pd.len);
            d->plugin[pd.len] = '\0';
        } else if (f.no == 8) { /* tensor { dtype 1, tensor_shape 2, string_val 8 } */
            strcpy(d->text_tag, tag);
            const uint8_t *q = f.p, *qe = f.p + f.len;
            field t;
            while (next_field(&q, qe, &t)) {
                if (t.no == 1) d->dtype = (int)t.v;
                else if (t.no == 2) d->shape_dims = (int)t.len; /* an empty shape: a scalar */
                else if (t.no == 8) {
                    assert_true(t.len < sizeof d->text);
                    memcpy(d->text, t.p, t.len);
                    d->text[t.len] = '\0';
                } else fail_msg("unexpected TensorProto field %d", t.no);
            }
        } else {
            fail_msg("unexpected Summary.Value field %d", f.no);
        }
    }
}

static void decode_event(const uint8_t *p, size_t len, decoded *d) {
    memset(d, 0, sizeof *d);
    d->session_status = -1;
    const uint8_t *end = p + len;
    field f;
    while (next_field(&p, end, &f)) {
        if (f.no == 1) {
            assert_int_equal(f.wire, 1);
            d->wall_time = as_double(f.v);
        } else if (f.no == 2) {
            assert_int_equal(f.wire, 0);
            d->step = (long)f.v;
        } else if (f.no == 3) {
            assert_true(f.len < sizeof d->version);
            memcpy(d->version, f.p, f.len);
        } else if (f.no == 5) {
            const uint8_t *q = f.p, *qe = f.p + f.len;
            field v;
            while (next_field(&q, qe, &v)) {
                assert_int_equal(v.no, 1);
                decode_value(v.p, v.p + v.len, d);
            }
        } else if (f.no == 7) {
            const uint8_t *q = f.p, *qe = f.p + f.len;
            field s;
            d->session_status = 0;
            while (next_field(&q, qe, &s))
                if (s.no == 1) d->session_status = (int)s.v;
        } else {
            fail_msg("unexpected Event field %d", f.no);
        }
    }
}

/* ---------------------------------------------------------------- tests */

static void test_crc32c(void **state) {
    (void)state;
    assert_int_equal(tb_crc32c("123456789", 9), 0xE3069283u); /* the CRC catalogue's check value */
    assert_int_equal(tb_crc32c("", 0), 0);
    uint8_t zeros[32] = {0};
    assert_int_equal(tb_crc32c(zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
}

static void test_scalar_event(void **state) {
    (void)state;
    tb_scalar v[] = {{"train/loss", 2.3456789}, {"train/lr", 0.1}, {"eval/top1", NAN}, {"x", -INFINITY}};
    uint8_t buf[512];
    size_t n = tb_record(buf, sizeof buf, 1795839776.25, 123456789012L, 0, 0, v, 4, NULL);
    assert_true(n > 16);
    size_t len, whole;
    const uint8_t *ev = tfrecord(buf, n, &len, &whole);
    assert_int_equal(whole, n);
    decoded d;
    decode_event(ev, len, &d);
    assert_true(d.wall_time == 1795839776.25);
    assert_int_equal(d.step, 123456789012L);
    assert_int_equal(d.session_status, -1);
    assert_int_equal(d.n, 4);
    assert_string_equal(d.tag[0], "train/loss");
    assert_true(d.value[0] == (float)2.3456789);
    assert_string_equal(d.tag[1], "train/lr");
    assert_true(d.value[1] == 0.1f);
    assert_string_equal(d.tag[2], "eval/top1");
    assert_true(isnan(d.value[2]));
    assert_true(isinf(d.value[3]) && d.value[3] < 0);
    /* too small a buffer: nothing */
    assert_int_equal(tb_record(buf, n - 1, 1795839776.25, 123456789012L, 0, 0, v, 4, NULL), 0);
    /* a flipped bit in the payload no longer matches its CRC */
    buf[20] ^= 1;
    assert_int_not_equal(unmask((uint32_t)le(buf + 12 + len, 4)), tb_crc32c(buf + 12, len));
}

static void test_version_start_histogram(void **state) {
    (void)state;
    uint8_t buf[1024];
    size_t len, whole;
    const uint8_t *ev;
    decoded d;
    size_t n = tb_record(buf, sizeof buf, 5.5, 0, 1, 0, NULL, 0, NULL);
    ev = tfrecord(buf, n, &len, &whole);
    decode_event(ev, len, &d);
    assert_string_equal(d.version, "brain.Event:2");
    assert_int_equal(d.step, 0);
    n = tb_record(buf, sizeof buf, 5.5, 41, 0, 1, NULL, 0, NULL);
    ev = tfrecord(buf, n, &len, &whole);
    decode_event(ev, len, &d);
    assert_int_equal(d.session_status, 1); /* START */
    assert_int_equal(d.step, 41);
    assert_int_equal(d.n, 0);
    double limit[3] = {0, 1, 7}, count[3] = {4, 5, 2};
    tb_histogram h = {"ps/staleness", 0, 7, 11, 15, 39, limit, count, 3};
    tb_scalar v[] = {{"ps/staleness_mean", 15.0 / 11}};
    n = tb_record(buf, sizeof buf, 5.5, 60, 0, 0, v, 1, &h);
    ev = tfrecord(buf, n, &len, &whole);
    decode_event(ev, len, &d);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.histo_tag, "ps/staleness");
    double want[5] = {0, 7, 11, 15, 39};
    for (int i = 0; i < 5; i++) assert_true(d.histo[i] == want[i]);
    assert_int_equal(d.n_limit, 3);
    assert_int_equal(d.n_count, 3);
    for (int i = 0; i < 3; i++) assert_true(d.limit[i] == limit[i] && d.count[i] == count[i]);
}

static void test_text_event(void **state) {
    (void)state;
    uint8_t buf[512];
    size_t len, whole;
    decoded d;
    const char *md = "config.ini of this run:\n\n    [train]\n    lr = 0.1\n";
    size_t n = tb_text_record(buf, sizeof buf, 7.25, 12, "config", md);
    assert_true(n > 16);
    const uint8_t *ev = tfrecord(buf, n, &len, &whole);
    assert_int_equal(whole, n);
    decode_event(ev, len, &d);
    assert_int_equal(d.step, 12);
    assert_string_equal(d.text_tag, "config");
    assert_string_equal(d.plugin, "text"); /* TensorBoard's Text tab */
    assert_int_equal(d.dtype, 7);          /* DT_STRING */
    assert_int_equal(d.shape_dims, 0);     /* a scalar */
    assert_string_equal(d.text, md);
    assert_int_equal(tb_text_record(buf, n - 1, 7.25, 12, "config", md), 0);
}

/* The records of one file, decoded (at most max). */
static int read_events(const char *path, decoded *out, int max) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f), off = 0;
    fclose(f);
    int k = 0;
    while (off < n && k < max) {
        size_t len, whole;
        const uint8_t *ev = tfrecord(buf + off, n - off, &len, &whole);
        decode_event(ev, len, &out[k++]);
        off += whole;
    }
    assert_int_equal(off, n); /* nothing left over: every record whole */
    return k;
}

static int count_glob(const char *pattern, char *first, size_t len) {
    glob_t g;
    int k = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    if (k && first) snprintf(first, len, "%s", g.gl_pathv[k - 1]);
    if (k) globfree(&g);
    return k;
}

static void test_files(void **state) {
    (void)state;
    char dir[128], pat[4500], path[4400], side[4400];
    snprintf(dir, sizeof dir, "%s/run", root);
    assert_int_equal(mkdir(dir, 0777), 0);
    tb_writer w;
    assert_int_equal(tb_open(&w, dir, 1, 1), CNT_OK);
    tb_scalar v[] = {{"train/loss", 1.5}};
    assert_int_equal(tb_write(&w, 1, v, 1, NULL), CNT_OK);
    assert_int_equal(tb_write(&w, 2, v, 1, NULL), CNT_OK);
    char first[4200];
    snprintf(first, sizeof first, "%s", w.path);
    /* flushed as written: whole records before the file is closed */
    decoded d[8];
    assert_int_equal(read_events(first, d, 8), 4);
    assert_int_equal(tb_close(&w), CNT_OK);
    assert_string_equal(d[0].version, "brain.Event:2");
    assert_int_equal(d[1].session_status, 1);
    assert_int_equal(d[1].step, 1);
    assert_int_equal(d[3].step, 2);
    assert_true(d[3].wall_time >= d[0].wall_time && d[0].wall_time > 1.7e9);

    /* a resumed run: the earlier file stays, the new one sorts after it and starts at checkpoint step + 1 */
    assert_int_equal(tb_open(&w, dir, 2, 0), CNT_OK);
    assert_int_equal(tb_close(&w), CNT_OK);
    snprintf(pat, sizeof pat, "%s/events.out.tfevents.*", dir);
    assert_int_equal(count_glob(pat, path, sizeof path), 2);
    assert_string_equal(path, w.path); /* the last in name order is the resumed run's */
    assert_true(strcmp(first, w.path) < 0);
    assert_int_equal(read_events(w.path, d, 8), 2);
    assert_int_equal(d[1].step, 2);

    /* a fresh run: both move into earlier-STAMP/ (STAMP: the newest file's
     * modification time, set here), its own file alone in dir */
    struct timeval same[2] = {{1700000000, 0}, {1700000000, 0}};
    assert_int_equal(utimes(first, same), 0);
    assert_int_equal(utimes(w.path, same), 0);
    assert_int_equal(tb_open(&w, dir, 1, 1), CNT_OK);
    assert_int_equal(tb_close(&w), CNT_OK);
    assert_int_equal(count_glob(pat, NULL, 0), 1);
    snprintf(pat, sizeof pat, "%s/earlier-*", dir);
    assert_int_equal(count_glob(pat, side, sizeof side), 1);
    snprintf(pat, sizeof pat, "%s/events.out.tfevents.*", side);
    assert_int_equal(count_glob(pat, NULL, 0), 2);

    /* another fresh run whose earlier file has the same second: a folder of
     * its own (earlier-STAMP-2/), the first one's two files left alone */
    assert_int_equal(utimes(w.path, same), 0);
    assert_int_equal(tb_open(&w, dir, 1, 1), CNT_OK);
    assert_int_equal(tb_close(&w), CNT_OK);
    assert_int_equal(count_glob(pat, NULL, 0), 2);
    snprintf(pat, sizeof pat, "%s-2/events.out.tfevents.*", side);
    assert_int_equal(count_glob(pat, NULL, 0), 1);
}

static void test_full_device(void **state) {
    (void)state;
    tb_writer w = {.f = fopen("/dev/full", "wb")};
    assert_non_null(w.f);
    snprintf(w.path, sizeof w.path, "/dev/full");
    tb_scalar v[] = {{"train/loss", 1.5}};
    assert_int_equal(tb_write(&w, 1, v, 1, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "cannot write '/dev/full': No space left on device"));
    tb_close(&w);
    tb_writer off = {0};
    assert_int_equal(tb_write(&off, 1, v, 1, NULL), CNT_OK); /* not open: nothing, no error */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_scalar_event),
        cmocka_unit_test(test_version_start_histogram),
        cmocka_unit_test(test_text_event),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_full_device),
    };
    return cmocka_run_group_tests_name("tensorboard", tests, setup, teardown);
}
