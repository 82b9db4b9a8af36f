/*
 * data/idx.c - IDX readers (MNIST, Fashion-MNIST), gzipped or raw.
 *
 * An IDX file is a big-endian header followed by the data: a 4-byte magic
 * (0x00, 0x00, element type, number of dimensions), one 32-bit size per
 * dimension, then the elements in row-major order. We read unsigned-byte
 * files only: images (magic 0x00000803, [n, h, w]) and labels (0x00000801,
 * [n]). zlib's gzread reads gzipped and raw files alike, so the format is
 * detected from the content, never from the file name.
 *
 * Only regular files are opened (common/fileio.h: a FIFO or device is refused
 * unread). Every header field is validated before anything is allocated, and
 * the file must hold exactly the bytes its header promises: a short file and a
 * file with trailing bytes are both errors naming the file and the byte
 * counts. Nothing is allocated beyond the bytes actually present: a raw
 * file's size is checked against its header first; a gzipped file's buffer
 * grows as its data is inflated.
 */
#include "data/dataset.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/check.h"
#include "common/fileio.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
/* Sanity limits checked before allocating: larger headers are corrupt files. */
#define IDX_MAX_SIDE 16384u
#define IDX_MAX_BYTES ((size_t)1 << 33)
#define IDX_MAX_DIMS 3
/* A gzipped file's data buffer starts at this size and doubles as data arrives. */
#define IDX_FIRST_ALLOC ((size_t)1 << 20)

#define MNIST_DEFAULT_ROOT "/usr/share/datasets/fashion-mnist"
#define MNIST_CLASSES 10

/* An IDX file being read: the path for messages and the zlib handle. */
typedef struct idx_file {
    const char *path;
    gzFile gz;
    int raw;         /* 1: not gzipped, so the file size can be checked up front */
    off_t raw_size;  /* size on disk when raw */
} idx_file;

static uint32_t be32(const unsigned char *b) {
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | (uint32_t)b[3];
}

/* zlib's description of the last error on gz, or "" when there is none. */
static const char *gz_msg(gzFile gz) {
    int errnum = Z_OK;
    const char *m = gzerror(gz, &errnum);
    return (errnum == Z_OK || !m) ? "" : m;
}

/* Reads up to `len` bytes into buf; *got receives the count actually read.
 * Returns CNT_ERR only on a read error (a short read at end of file is not one). */
static int idx_read_bytes(idx_file *f, void *buf, size_t len, size_t *got) {
    unsigned char *p = buf;
    *got = 0;
    while (*got < len) {
        size_t want = len - *got;
        if (want > (size_t)1 << 30) want = (size_t)1 << 30;
        int r = gzread(f->gz, p + *got, (unsigned)want);
        if (r < 0) return cnt_err_set("%s: read error: %s", f->path, gz_msg(f->gz));
        if (r == 0) break;
        *got += (size_t)r;
    }
    return CNT_OK;
}

static int idx_open(idx_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = path;
    uint64_t size = 0;
    int fd = file_open_regular_fd(path, "IDX file", &size);
    if (fd < 0) return CNT_ERR;
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        close(fd);
        return cnt_err_set("cannot open %s: out of memory in zlib", path);
    }
    /* Called before the first read, gzdirect looks at the content: 1 = not gzip. */
    f->raw = gzdirect(f->gz);
    f->raw_size = (off_t)size;
    return CNT_OK;
}

static void idx_close(idx_file *f) {
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

/* Reads the header of f, checks the magic and the dimensions, and fills
 * dims[0..ndims-1]. *payload receives the number of data bytes promised. */
static int idx_read_header(idx_file *f, uint32_t magic, int ndims, uint32_t *dims, size_t *payload,
                           const char *what) {
    unsigned char hdr[4 + 4 * IDX_MAX_DIMS];
    size_t hdr_len = 4 + 4 * (size_t)ndims;
    size_t got;
    if (idx_read_bytes(f, hdr, 4, &got) != CNT_OK) return CNT_ERR;
    if (got < 4)
        return cnt_err_set("%s: truncated IDX header: expected 4 bytes of magic, read %zu%s%s", f->path, got,
                           *gz_msg(f->gz) ? "; zlib: " : "", gz_msg(f->gz));
    uint32_t m = be32(hdr);
    if (m != magic)
        return cnt_err_set("%s: bad magic 0x%08x, expected 0x%08x (IDX unsigned-byte %s)", f->path, m, magic,
                           what);
    if (idx_read_bytes(f, hdr + 4, hdr_len - 4, &got) != CNT_OK) return CNT_ERR;
    if (got < hdr_len - 4)
        return cnt_err_set("%s: truncated IDX header: expected %zu bytes of dimensions, read %zu", f->path,
                           hdr_len - 4, got);
    size_t total = 1;
    for (int i = 0; i < ndims; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        uint32_t limit = i == 0 ? (uint32_t)INT_MAX : IDX_MAX_SIDE;
        if (dims[i] == 0 || dims[i] > limit)
            return cnt_err_set("%s: dimension %d of the IDX header is %u, expected 1..%u (corrupt file?)",
                               f->path, i, dims[i], limit);
        total *= dims[i];
        if (total > IDX_MAX_BYTES)
            return cnt_err_set("%s: IDX header promises more than %zu bytes of data (corrupt file?)", f->path,
                               IDX_MAX_BYTES);
    }
    *payload = total;
    if (f->raw) {
        size_t expected = hdr_len + total;
        if ((size_t)f->raw_size < expected)
            return cnt_err_set("%s: truncated: the header promises %zu bytes in all, the file holds %zu",
                               f->path, expected, (size_t)f->raw_size);
        if ((size_t)f->raw_size > expected)
            return cnt_err_set("%s: %zu trailing bytes after the %zu bytes the header promises", f->path,
                               (size_t)f->raw_size - expected, expected);
    }
    return CNT_OK;
}

/* Reads the data after the header into a new buffer and checks that nothing
 * follows it. A raw file's size was checked against the header already; a
 * gzipped one's data is only known as it is inflated, so its buffer grows
 * with the bytes actually read (from IDX_FIRST_ALLOC, doubling) instead of
 * being allocated at the size the header claims: a corrupt header on a small
 * file is reported as truncated, not as gigabytes allocated first. */
static int idx_read_payload(idx_file *f, size_t payload, uint8_t **out) {
    size_t cap = f->raw || payload < IDX_FIRST_ALLOC ? payload : IDX_FIRST_ALLOC;
    uint8_t *buf = malloc(cap);
    if (!buf) return cnt_err_set("%s: cannot allocate %zu bytes for its data", f->path, cap);
    size_t got = 0;
    for (;;) {
        size_t n;
        if (idx_read_bytes(f, buf + got, cap - got, &n) != CNT_OK) {
            free(buf);
            return CNT_ERR;
        }
        got += n;
        if (got < cap || cap == payload) break; /* end of the data, or all of it */
        size_t grown = cap > payload / 2 ? payload : 2 * cap;
        uint8_t *p = realloc(buf, grown);
        if (!p) {
            free(buf);
            return cnt_err_set("%s: cannot allocate %zu bytes for its data", f->path, grown);
        }
        buf = p;
        cap = grown;
    }
    if (got < payload) {
        const char *zm = gz_msg(f->gz);
        cnt_err_set("%s: truncated: expected %zu bytes of data after the header, read %zu%s%s", f->path,
                    payload, got, *zm ? "; zlib: " : "", zm);
        free(buf);
        return CNT_ERR;
    }
    size_t extra = 0;
    unsigned char scratch[4096];
    for (;;) {
        int r = gzread(f->gz, scratch, sizeof scratch);
        if (r < 0) {
            cnt_err_set("%s: read error after the data: %s", f->path, gz_msg(f->gz));
            free(buf);
            return CNT_ERR;
        }
        if (r == 0) break;
        extra += (size_t)r;
    }
    if (extra > 0) {
        cnt_err_set("%s: %zu trailing bytes after the %zu data bytes the header promises", f->path, extra,
                    payload);
        free(buf);
        return CNT_ERR;
    }
    *out = buf;
    return CNT_OK;
}

/* Reads a whole unsigned-byte IDX file with the given magic and rank. */
static int idx_read(const char *path, uint32_t magic, int ndims, uint32_t *dims, uint8_t **data,
                    const char *what) {
    idx_file f;
    if (idx_open(&f, path) != CNT_OK) return CNT_ERR;
    size_t payload = 0;
    int rc = idx_read_header(&f, magic, ndims, dims, &payload, what);
    if (rc == CNT_OK) rc = idx_read_payload(&f, payload, data);
    idx_close(&f);
    return rc;
}

int dataset_load_idx(dataset *ds, const char *images_path, const char *labels_path) {
    memset(ds, 0, sizeof *ds);
    uint32_t idims[3], ldims[1];
    uint8_t *pixels = NULL, *raw_labels = NULL;
    if (idx_read(images_path, IDX_MAGIC_IMAGES, 3, idims, &pixels, "images [n, h, w]") != CNT_OK)
        return CNT_ERR;
    if (idx_read(labels_path, IDX_MAGIC_LABELS, 1, ldims, &raw_labels, "labels [n]") != CNT_OK) {
        free(pixels);
        return CNT_ERR;
    }
    if (idims[0] != ldims[0]) {
        cnt_err_set("%s holds %u images but %s holds %u labels", images_path, idims[0], labels_path,
                    ldims[0]);
        free(pixels);
        free(raw_labels);
        return CNT_ERR;
    }
    int n = (int)idims[0];
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    if (!labels) {
        cnt_err_set("%s: cannot allocate %d labels", labels_path, n);
        free(pixels);
        free(raw_labels);
        return CNT_ERR;
    }
    int max_label = 0;
    for (int i = 0; i < n; i++) {
        labels[i] = raw_labels[i];
        if (labels[i] > max_label) max_label = labels[i];
    }
    free(raw_labels);
    ds->n = n;
    ds->c = 1;
    ds->h = (int)idims[1];
    ds->w = (int)idims[2];
    ds->classes = max_label + 1 < 2 ? 2 : max_label + 1;
    ds->pixels = pixels;
    ds->labels = labels;
    return CNT_OK;
}

#define MNIST_PATH_MAX 4096

/* Picks "<root>/<name>.gz" when it exists, else "<root>/<name>", into out. */
static int mnist_find(const char *root, const char *name, char out[MNIST_PATH_MAX]) {
    char gz_path[MNIST_PATH_MAX], raw_path[MNIST_PATH_MAX];
    int len = snprintf(gz_path, sizeof gz_path, "%s/%s.gz", root, name);
    if (len < 0 || (size_t)len >= sizeof gz_path)
        return cnt_err_set("dataset path too long: %s/%s.gz", root, name);
    snprintf(raw_path, sizeof raw_path, "%s/%s", root, name);
    const char *found = access(gz_path, F_OK) == 0 ? gz_path : access(raw_path, F_OK) == 0 ? raw_path : NULL;
    if (found) {
        memcpy(out, found, strlen(found) + 1);
        return CNT_OK;
    }
    int is_default = strcmp(root, MNIST_DEFAULT_ROOT) == 0;
    return cnt_err_set("dataset file not found: tried %s and %s%s", gz_path, raw_path,
                       is_default ? " (HINT: `make deps` installs dataset-fashion-mnist)" : "");
}

int dataset_load_mnist_dir(dataset *ds, const char *root, int train) {
    memset(ds, 0, sizeof *ds);
    int is_default = strcmp(root, MNIST_DEFAULT_ROOT) == 0;
    struct stat st;
    if (stat(root, &st) != 0)
        return cnt_err_set("dataset directory %s: %s%s", root, strerror(errno),
                           is_default ? " (HINT: `make deps` installs dataset-fashion-mnist)" : "");
    if (!S_ISDIR(st.st_mode)) return cnt_err_set("dataset directory %s is not a directory", root);
    const char *prefix = train ? "train" : "t10k";
    char name[64], images[MNIST_PATH_MAX], labels[MNIST_PATH_MAX];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    if (mnist_find(root, name, images) != CNT_OK) return CNT_ERR;
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    if (mnist_find(root, name, labels) != CNT_OK) return CNT_ERR;
    if (dataset_load_idx(ds, images, labels) != CNT_OK) return CNT_ERR;
    for (int i = 0; i < ds->n; i++) {
        if (ds->labels[i] >= MNIST_CLASSES) {
            cnt_err_set("%s: label %d of sample %d is outside 0..%d", labels, ds->labels[i], i,
                        MNIST_CLASSES - 1);
            dataset_free(ds);
            return CNT_ERR;
        }
    }
    ds->classes = MNIST_CLASSES;
    return CNT_OK;
}
