/*
 * train/tensorboard.c - TensorBoard event files (see train/tensorboard.h):
 * a protocol-buffer encoder for the few Event fields written, TFRecord
 * framing with masked CRC-32C, and the files' placement in out_dir.
 */
#include "train/tensorboard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"

static const char EVENTS_PREFIX[] = "events.out.tfevents.";

/* ---------------------------------------------------------------- CRC-32C */

uint32_t tb_crc32c(const void *p, size_t n) {
    static uint32_t table[256];
    static int ready; /* the table is the same whoever fills it: a race writes equal words */
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const uint8_t *b = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* TFRecord's masked CRC: stored CRCs of data that holds CRCs stay distinct. */
static uint32_t masked_crc(const void *p, size_t n) {
    uint32_t c = tb_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---------------------------------------------------------------- protobuf */

/* An output buffer: n counts every byte put, also past cap (a buffer of cap
 * 0 measures a message, which is how nested messages learn their length). */
typedef struct pb {
    uint8_t *p;
    size_t n, cap;
} pb;

static void put(pb *b, const void *s, size_t k) {
    if (b->n + k <= b->cap) memcpy(b->p + b->n, s, k);
    b->n += k;
}

static void put_varint(pb *b, uint64_t v) {
    uint8_t t[10];
    size_t k = 0;
    do {
        t[k] = (uint8_t)(v & 0x7F);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    put(b, t, k);
}

enum { WIRE_VARINT = 0, WIRE_64 = 1, WIRE_LEN = 2, WIRE_32 = 5 };

static void put_key(pb *b, int field, int wire) { put_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void put_le(pb *b, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}

static void put_double_bits(pb *b, double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    put_le(b, u, 8);
}

static void put_double(pb *b, int field, double d) {
    put_key(b, field, WIRE_64);
    put_double_bits(b, d);
}

static void put_float(pb *b, int field, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    put_key(b, field, WIRE_32);
    put_le(b, u, 4);
}

static void put_string(pb *b, int field, const char *s) {
    size_t k = strlen(s);
    put_key(b, field, WIRE_LEN);
    put_varint(b, k);
    put(b, s, k);
}

/* A nested message: its length (measured by writing it to nowhere), then it. */
typedef void (*pb_fn)(pb *b, const void *arg);
static void put_message(pb *b, int field, pb_fn fn, const void *arg) {
    pb measure = {0};
    fn(&measure, arg);
    put_key(b, field, WIRE_LEN);
    put_varint(b, measure.n);
    fn(b, arg);
}

/* HistogramProto: min 1, max 2, num 3, sum 4, sum_squares 5, bucket_limit 6
 * and bucket 7 packed. */
static void histo_msg(pb *b, const void *arg) {
    const tb_histogram *h = arg;
    put_double(b, 1, h->min);
    put_double(b, 2, h->max);
    put_double(b, 3, h->num);
    put_double(b, 4, h->sum);
    put_double(b, 5, h->sum_squares);
    for (int field = 6; field <= 7; field++) {
        const double *a = field == 6 ? h->limit : h->count;
        put_key(b, field, WIRE_LEN);
        put_varint(b, 8 * (uint64_t)h->n);
        for (int i = 0; i < h->n; i++) put_double_bits(b, a[i]);
    }
}

/* Summary.Value: tag 1, simple_value 2 or histo 5. */
static void scalar_value_msg(pb *b, const void *arg) {
    const tb_scalar *s = arg;
    put_string(b, 1, s->tag);
    put_float(b, 2, (float)s->value);
}

static void histo_value_msg(pb *b, const void *arg) {
    const tb_histogram *h = arg;
    put_string(b, 1, h->tag);
    put_message(b, 5, histo_msg, h);
}

typedef struct summary_arg {
    const tb_scalar *v;
    int n;
    const tb_histogram *h;
} summary_arg;

/* Summary: value 1, repeated. */
static void summary_msg(pb *b, const void *arg) {
    const summary_arg *s = arg;
    for (int i = 0; i < s->n; i++) put_message(b, 1, scalar_value_msg, &s->v[i]);
    if (s->h) put_message(b, 1, histo_value_msg, s->h);
}

/* A text: Summary.Value { tag 1, metadata 9 { plugin_data 1 { plugin_name 1
 * = "text" } }, tensor 8 { dtype 1 = DT_STRING (7), tensor_shape 2 = {} (a
 * scalar), string_val 8 } }. */
typedef struct text_arg {
    const char *tag, *text;
} text_arg;

static void plugin_data_msg(pb *b, const void *arg) {
    (void)arg;
    put_string(b, 1, "text");
}

static void text_metadata_msg(pb *b, const void *arg) { put_message(b, 1, plugin_data_msg, arg); }

static void empty_msg(pb *b, const void *arg) { (void)b, (void)arg; }

static void string_tensor_msg(pb *b, const void *arg) {
    const text_arg *t = arg;
    put_key(b, 1, WIRE_VARINT);
    put_varint(b, 7);
    put_message(b, 2, empty_msg, NULL);
    put_string(b, 8, t->text);
}

static void text_value_msg(pb *b, const void *arg) {
    const text_arg *t = arg;
    put_string(b, 1, t->tag);
    put_message(b, 9, text_metadata_msg, NULL);
    put_message(b, 8, string_tensor_msg, t);
}

static void text_summary_msg(pb *b, const void *arg) { put_message(b, 1, text_value_msg, arg); }

/* SessionLog: status 1 = START. */
static void session_start_msg(pb *b, const void *arg) {
    (void)arg;
    put_key(b, 1, WIRE_VARINT);
    put_varint(b, 1);
}

/* Event: wall_time 1, step 2, then file_version 3, summary 5 or session_log 7. */
typedef struct event_arg {
    double wall_time;
    long step;
    int version, session_start;
    pb_fn summary;           /* with its argument: the summary message, when neither of the above */
    const void *summary_arg;
} event_arg;

static void event_msg(pb *b, const void *arg) {
    const event_arg *e = arg;
    put_double(b, 1, e->wall_time);
    put_key(b, 2, WIRE_VARINT);
    put_varint(b, (uint64_t)e->step);
    if (e->version) put_string(b, 3, "brain.Event:2");
    else if (e->session_start) put_message(b, 7, session_start_msg, NULL);
    else put_message(b, 5, e->summary, e->summary_arg);
}

/* The event as one TFRecord: its length, the length's masked CRC, the
 * event, its masked CRC. The bytes it takes (also when cap is too small). */
static size_t framed(uint8_t *buf, size_t cap, const event_arg *e) {
    pb measure = {0};
    event_msg(&measure, e);
    size_t len = measure.n, total = 8 + 4 + len + 4;
    if (total > cap) return total;
    pb b = {buf, 0, cap};
    put_le(&b, len, 8);
    put_le(&b, masked_crc(buf, 8), 4);
    event_msg(&b, e);
    put_le(&b, masked_crc(buf + 12, len), 4);
    return b.n;
}

size_t tb_record(uint8_t *buf, size_t cap, double wall_time, long step, int version, int session_start,
                 const tb_scalar *v, int n, const tb_histogram *h) {
    summary_arg s = {v, n, h};
    event_arg e = {wall_time, step, version, session_start, summary_msg, &s};
    size_t total = framed(buf, cap, &e);
    return total <= cap ? total : 0;
}

size_t tb_text_record(uint8_t *buf, size_t cap, double wall_time, long step, const char *tag, const char *text) {
    text_arg t = {tag, text};
    event_arg e = {wall_time, step, 0, 0, text_summary_msg, &t};
    size_t total = framed(buf, cap, &e);
    return total <= cap ? total : 0;
}

/* ---------------------------------------------------------------- files */

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int is_event_file(const char *dir, const struct dirent *e, struct stat *st) {
    if (strncmp(e->d_name, EVENTS_PREFIX, sizeof EVENTS_PREFIX - 1) != 0) return 0;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    return lstat(path, st) == 0 && S_ISREG(st->st_mode);
}

/* The newest event file's last change and the largest time in a name
 * (events.out.tfevents.<time>...), over dir's event files; their count. */
static int scan_events(const char *dir, time_t *newest, long *last_stamp) {
    *newest = 0;
    *last_stamp = 0;
    DIR *d = opendir(dir);
    if (!d) return cnt_err_set("cannot read directory '%s': %s", dir, strerror(errno));
    int count = 0;
    struct dirent *e;
    struct stat st;
    while ((e = readdir(d)))
        if (is_event_file(dir, e, &st)) {
            count++;
            if (st.st_mtime > *newest) *newest = st.st_mtime;
            long t = strtol(e->d_name + sizeof EVENTS_PREFIX - 1, NULL, 10);
            if (t > *last_stamp) *last_stamp = t;
        }
    closedir(d);
    return count;
}

/* A fresh run: the earlier run's event files into dir/earlier-STAMP/. */
static int move_earlier(const char *dir, time_t newest, int count) {
    char stamp[32], stem[4200], side[4300];
    file_time_stamp(newest, stamp, sizeof stamp);
    int w = snprintf(stem, sizeof stem, "%s/earlier-%s", dir, stamp);
    if (w < 0 || (size_t)w >= sizeof stem) return cnt_err_set("path too long: '%s/earlier-%s'", dir, stamp);
    if (file_claim_dir(stem, side, sizeof side) != 0) /* a folder of its own: -2, -3, ... within one second */
        return cnt_err_set("cannot create directory '%s' for the earlier run's TensorBoard files: %s", stem,
                           strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return cnt_err_set("cannot read directory '%s': %s", dir, strerror(errno));
    int rc = CNT_OK;
    struct dirent *e;
    struct stat st;
    while (rc == CNT_OK && (e = readdir(d))) {
        if (!is_event_file(dir, e, &st)) continue;
        char from[4400], to[4600];
        snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
        snprintf(to, sizeof to, "%s/%s", side, e->d_name);
        if (rename(from, to) != 0)
            rc = cnt_err_set("cannot move the earlier run's '%s' to '%s': %s", from, to, strerror(errno));
    }
    closedir(d);
    if (rc == CNT_OK)
        log_info("TensorBoard: the earlier run's %d event file%s moved to %s (this run starts from scratch)", count,
                 count == 1 ? "" : "s", side);
    return rc;
}

/* One event, framed and written (a buffer on the stack when it fits). */
static int write_event(tb_writer *w, const event_arg *e) {
    uint8_t stack[2048], *buf = stack;
    size_t n = framed(NULL, 0, e);
    if (n > sizeof stack) buf = cnt_malloc(n);
    framed(buf, n, e);
    errno = 0;
    int rc = file_flush_record(w->f, fwrite(buf, 1, n, w->f) == n, w->path);
    if (buf != stack) free(buf);
    return rc;
}

int tb_open(tb_writer *w, const char *dir, long first_step, int fresh) {
    w->f = NULL;
    time_t newest;
    long last_stamp;
    int count = scan_events(dir, &newest, &last_stamp);
    if (count < 0) return CNT_ERR;
    if (fresh && count > 0 && move_earlier(dir, newest, count) != CNT_OK) return CNT_ERR;
    /* TensorBoard reads a folder's event files in name order: a resume in the
     * same second as the run before it takes the next second's name */
    long stamp = (long)time(NULL);
    if (!fresh && stamp <= last_stamp) stamp = last_stamp + 1;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    if (snprintf(w->path, sizeof w->path, "%s/%s%010ld.%s.%d.cnntrain", dir, EVENTS_PREFIX, stamp, host,
                 (int)getpid()) >= (int)sizeof w->path)
        return cnt_err_set("path too long: %s/%s...", dir, EVENTS_PREFIX);
    int fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return cnt_err_set("cannot create TensorBoard event file '%s': %s", w->path, strerror(errno));
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        close(fd);
        return cnt_err_set("cannot write '%s': %s", w->path, strerror(errno));
    }
    double now = wall_now();
    event_arg version = {now, 0, 1, 0, NULL, NULL}, start = {now, first_step, 0, 1, NULL, NULL};
    int rc = write_event(w, &version);
    if (rc == CNT_OK) rc = write_event(w, &start);
    if (rc != CNT_OK) {
        fclose(w->f);
        w->f = NULL;
    }
    return rc;
}

int tb_write(tb_writer *w, long step, const tb_scalar *v, int n, const tb_histogram *h) {
    if (!w->f) return CNT_OK;
    summary_arg s = {v, n, h};
    event_arg e = {wall_now(), step, 0, 0, summary_msg, &s};
    return write_event(w, &e);
}

int tb_text(tb_writer *w, long step, const char *tag, const char *markdown) {
    if (!w->f) return CNT_OK;
    text_arg t = {tag, markdown};
    event_arg e = {wall_now(), step, 0, 0, text_summary_msg, &t};
    return write_event(w, &e);
}

int tb_close(tb_writer *w) {
    if (!w->f) return CNT_OK;
    int rc = fclose(w->f) == 0 ? CNT_OK : cnt_err_set("cannot write '%s': %s", w->path, strerror(errno));
    w->f = NULL;
    return rc;
}
