/*
 * data/imagefolder.c - ImageNet-style trees root/<class>/<image>: listing,
 * decoding through stb_image, the listing as bytes for a broadcast, and
 * normalisation statistics from a sample (see data/dataset.h).
 *
 * Listing reads directory entries only: d_type tells files from folders, and
 * stat() is called only where the file system does not fill d_type (or for a
 * symbolic link). An image name that is not a regular file (a FIFO, a device)
 * is left out with a warning, and decoding opens regular files only
 * (common/fileio.h), so a file replaced by a FIFO after the listing is an
 * unreadable image, never a blocked worker. Paths are stored once, back to back in one pool, so a
 * 1.28-million-image tree costs about 40 MB and two sorts.
 */
#include "data/dataset.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/check.h"
#include "common/fileio.h"
#include "data/shards.h"

static const char *const image_exts[] = {"jpg", "jpeg", "png", "bmp", "tga", "gif", "ppm",
                                         "pgm", "pnm", "psd", "hdr", "pic", NULL};

static int has_image_ext(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 0;
    for (int i = 0; image_exts[i]; i++)
        if (strcasecmp(dot + 1, image_exts[i]) == 0) return 1;
    return 0;
}

/* A growing pool of NUL-terminated strings. */
typedef struct pool {
    char *buf;
    size_t len, cap;
} pool;

static size_t pool_add(pool *p, const char *a, const char *b) {
    size_t la = strlen(a), lb = b ? strlen(b) : 0;
    size_t need = la + (b ? 1 + lb : 0) + 1;
    if (p->len + need > p->cap) {
        size_t cap = p->cap ? p->cap : 1 << 16;
        while (cap < p->len + need) cap *= 2;
        p->buf = cnt_realloc(p->buf, cap);
        p->cap = cap;
    }
    size_t off = p->len;
    memcpy(p->buf + off, a, la);
    if (b) {
        p->buf[off + la] = '/';
        memcpy(p->buf + off + la + 1, b, lb);
    }
    p->buf[off + need - 1] = '\0';
    p->len += need;
    return off;
}

/* Entry kind: 1 directory, 2 regular file, 0 other; follows symbolic links.
 * An entry that cannot be followed (a dangling or looping symbolic link, a
 * file gone since readdir) is left out with a warning naming it, as the
 * loader does with an unreadable image; so is, when `warn_other`, an entry
 * that is neither a directory nor a regular file (a FIFO, whose reads would
 * block, a device, a socket). */
static int entry_kind(const char *dir, const struct dirent *e, int warn_other) {
    if (e->d_type == DT_DIR) return 1;
    if (e->d_type == DT_REG) return 2;
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) return 0;
    mode_t mode = DTTOIF(e->d_type);
    if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
        struct stat st;
        if (stat(path, &st) != 0) {
            log_warn("data: skipping %s while listing: %s", path, strerror(errno));
            return 0;
        }
        mode = st.st_mode;
    }
    if (S_ISDIR(mode)) return 1;
    if (S_ISREG(mode)) return 2;
    if (warn_other) log_warn("data: skipping %s while listing: it is %s, not a regular file", path, file_kind_name(mode));
    return 0;
}

static int cmp_off(const void *a, const void *b, void *base) {
    return strcmp((const char *)base + *(const size_t *)a, (const char *)base + *(const size_t *)b);
}

/* Names of the entries of `dir` of the wanted kind (1 dirs, 2 image files),
 * sorted, as offsets into p. Returns the count, or -1 (errno set) when dir
 * cannot be opened. */
static long list_dir(const char *dir, int kind, pool *p, size_t **offs, size_t *cap) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    long n = 0;
    size_t first = p->len;
    struct dirent *e;
    /* errno is readdir's only error report, so it is cleared before each
     * call: a stat of an entry (entry_kind) may leave it set. */
    for (;;) {
        errno = 0;
        if ((e = readdir(d)) == NULL) break;
        if (e->d_name[0] == '.') continue;
        if (kind == 2 && !has_image_ext(e->d_name)) continue;
        /* Images only: a FIFO among the class folders is as ignored as a file. */
        if (entry_kind(dir, e, kind == 2) != kind) continue;
        if ((size_t)n == *cap) {
            *cap = *cap ? *cap * 2 : 1024;
            *offs = cnt_realloc(*offs, *cap * sizeof **offs);
        }
        (*offs)[n++] = pool_add(p, e->d_name, NULL) - first;
    }
    int err = errno;
    closedir(d);
    if (err) {
        errno = err;
        return -1;
    }
    if (n > 0) qsort_r(*offs, (size_t)n, sizeof **offs, cmp_off, p->buf + first);
    for (long i = 0; i < n; i++) (*offs)[i] += first;
    return n;
}

int dataset_list_imagefolder(dataset *ds, const char *root) {
    memset(ds, 0, sizeof *ds);
    struct stat st;
    if (stat(root, &st) != 0) return cnt_err_set("image folder %s: %s", root, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return cnt_err_set("image folder %s: not a directory", root);

    pool classes = {0}, files = {0}, scratch = {0};
    size_t *coffs = NULL, ccap = 0, *foffs = NULL, fcap = 0;
    long nc = list_dir(root, 1, &classes, &coffs, &ccap);
    if (nc < 0) {
        int err = errno;
        free(classes.buf);
        free(coffs);
        return cnt_err_set("image folder %s: cannot read the directory: %s", root, strerror(err));
    }
    if (nc == 0) {
        free(classes.buf);
        free(coffs);
        return cnt_err_set("image folder %s: no class folders (expected %s/<class>/<image>)", root, root);
    }
    int rc = CNT_OK;
    size_t cap = 0;
    int32_t *labels = NULL;
    size_t *name_off = NULL, *class_off = cnt_malloc((size_t)nc * sizeof *class_off);
    long n = 0;
    for (long k = 0; k < nc && rc == CNT_OK; k++) {
        const char *cname = classes.buf + coffs[k];
        char dir[PATH_MAX];
        if ((size_t)snprintf(dir, sizeof dir, "%s/%s", root, cname) >= sizeof dir) {
            rc = cnt_err_set("image folder %s: path of class '%s' is too long", root, cname);
            break;
        }
        scratch.len = 0;
        long m = list_dir(dir, 2, &scratch, &foffs, &fcap);
        if (m < 0) {
            rc = cnt_err_set("image folder %s: cannot read the directory: %s", dir, strerror(errno));
            break;
        }
        if (m == 0) {
            rc = cnt_err_set("image folder %s: class folder '%s' holds no images (%s)", root, cname,
                             "jpg, jpeg, png, bmp, tga, gif, ppm, pgm, pnm, psd, hdr, pic");
            break;
        }
        if (n + m > INT_MAX) {
            rc = cnt_err_set("image folder %s: more than %d images", root, INT_MAX);
            break;
        }
        if ((size_t)(n + m) > cap) {
            while ((size_t)(n + m) > cap) cap = cap ? cap * 2 : 4096;
            labels = cnt_realloc(labels, cap * sizeof *labels);
            name_off = cnt_realloc(name_off, cap * sizeof *name_off);
        }
        for (long i = 0; i < m; i++) {
            size_t off = pool_add(&files, cname, scratch.buf + foffs[i]);
            if (i == 0) class_off[k] = off;
            name_off[n] = off;
            labels[n] = (int32_t)k;
            n++;
        }
    }
    free(classes.buf);
    free(coffs);
    free(scratch.buf);
    free(foffs);
    if (rc != CNT_OK) {
        free(files.buf);
        free(labels);
        free(name_off);
        free(class_off);
        return rc;
    }
    ds->n = (int)n;
    ds->classes = (int)nc;
    ds->labels = labels;
    ds->root = cnt_strdup(root);
    ds->names = files.buf;
    ds->names_len = files.len;
    ds->name_off = name_off;
    ds->class_off = class_off;
    return CNT_OK;
}

void dataset_set_shape(dataset *ds, int c, int size) {
    ds->c = c;
    ds->h = ds->w = size;
}

const char *dataset_class_name(const dataset *ds, int k) {
    static __thread char buf[PATH_MAX];
    const char *p = ds->names + ds->class_off[k];
    const char *slash = strchr(p, '/');
    size_t len = slash ? (size_t)(slash - p) : strlen(p);
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

int dataset_same_classes(const dataset *a, const dataset *b) {
    int n = a->classes < b->classes ? a->classes : b->classes;
    for (int k = 0; k < n; k++) {
        char ca[PATH_MAX];
        snprintf(ca, sizeof ca, "%s", dataset_class_name(a, k));
        const char *cb = dataset_class_name(b, k);
        if (strcmp(ca, cb) != 0)
            return cnt_err_set("image folders %s and %s do not have the same classes: class %d is '%s' in the first "
                               "and '%s' in the second",
                               a->root, b->root, k, ca, cb);
    }
    if (a->classes != b->classes)
        return cnt_err_set("image folders %s and %s do not have the same classes: %d class folders and %d (class "
                           "'%s' is only in %s)",
                           a->root, b->root, a->classes, b->classes,
                           dataset_class_name(a->classes > b->classes ? a : b, n),
                           a->classes > b->classes ? a->root : b->root);
    return CNT_OK;
}

void dataset_sample_path(const dataset *ds, int i, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", ds->root, ds->names + ds->name_off[i]);
}

int dataset_open_image(const dataset *ds, int i, image_src *im, char *path, size_t path_len) {
    if (ds->shards) {
        uint8_t *bytes;
        size_t len;
        if (shards_read(ds, i, &bytes, &len, path, path_len) != CNT_OK) {
            memset(im, 0, sizeof *im);
            return CNT_ERR;
        }
        return image_open_bytes(im, bytes, len, path, ds->c);
    }
    dataset_sample_path(ds, i, path, path_len);
    return image_open(im, path, ds->c);
}

int dataset_decode(const dataset *ds, int i, uint8_t **pix, int *w, int *h) {
    char path[PATH_MAX];
    image_src im;
    *pix = NULL;
    if (dataset_open_image(ds, i, &im, path, sizeof path) != CNT_OK) return CNT_ERR;
    image_view v = image_view_resize(im.w, im.h, im.w, im.h);
    uint8_t *p = cnt_malloc((size_t)im.w * (size_t)im.h * (size_t)ds->c);
    if (image_render(&im, &v, 0, p) != CNT_OK) {
        free(p);
        image_close(&im);
        return CNT_ERR;
    }
    *pix = p;
    *w = im.w;
    *h = im.h;
    image_close(&im);
    return CNT_OK;
}

/* ---- the listing as bytes ----
 *   "CNTLIST1" u64 n u64 classes u64 names_len u64 root_len
 *   root bytes, names bytes, i32 labels[n], u64 name_off[n], u64 class_off[classes] */

typedef struct {
    char magic[8];
    uint64_t n, classes, names_len, root_len;
} list_header;

void *dataset_pack(const dataset *ds, size_t *len) {
    list_header hd = {{'C', 'N', 'T', 'L', 'I', 'S', 'T', '1'}, (uint64_t)ds->n, (uint64_t)ds->classes,
                      ds->names_len, strlen(ds->root)};
    size_t total = sizeof hd + hd.root_len + hd.names_len + (size_t)ds->n * (sizeof(int32_t) + sizeof(uint64_t)) +
                   (size_t)ds->classes * sizeof(uint64_t);
    char *buf = cnt_malloc(total), *p = buf;
    memcpy(p, &hd, sizeof hd), p += sizeof hd;
    memcpy(p, ds->root, hd.root_len), p += hd.root_len;
    memcpy(p, ds->names, hd.names_len), p += hd.names_len;
    memcpy(p, ds->labels, (size_t)ds->n * sizeof(int32_t)), p += (size_t)ds->n * sizeof(int32_t);
    for (int i = 0; i < ds->n; i++, p += sizeof(uint64_t)) {
        uint64_t v = ds->name_off[i];
        memcpy(p, &v, sizeof v);
    }
    for (int k = 0; k < ds->classes; k++, p += sizeof(uint64_t)) {
        uint64_t v = ds->class_off[k];
        memcpy(p, &v, sizeof v);
    }
    *len = total;
    return buf;
}

int dataset_unpack(dataset *ds, const void *buf, size_t len) {
    memset(ds, 0, sizeof *ds);
    list_header hd;
    if (len < sizeof hd) return cnt_err_set("image folder listing: %zu bytes is too short", len);
    memcpy(&hd, buf, sizeof hd);
    if (memcmp(hd.magic, "CNTLIST1", 8) != 0) return cnt_err_set("image folder listing: bad magic");
    if (hd.n < 1 || hd.n > INT_MAX || hd.classes < 1 || hd.classes > hd.n || hd.names_len > len ||
        hd.root_len > len ||
        len != sizeof hd + hd.root_len + hd.names_len + hd.n * (sizeof(int32_t) + sizeof(uint64_t)) +
                   hd.classes * sizeof(uint64_t))
        return cnt_err_set("image folder listing: inconsistent sizes");
    const char *p = (const char *)buf + sizeof hd;
    const char *root = p, *names = p + hd.root_len;
    if (hd.names_len == 0 || names[hd.names_len - 1] != '\0' || memchr(root, '\0', hd.root_len))
        return cnt_err_set("image folder listing: malformed names");
    p = names + hd.names_len;
    int32_t *labels = cnt_malloc(hd.n * sizeof *labels);
    size_t *name_off = cnt_malloc(hd.n * sizeof *name_off);
    size_t *class_off = cnt_malloc(hd.classes * sizeof *class_off);
    memcpy(labels, p, hd.n * sizeof *labels), p += hd.n * sizeof(int32_t);
    int ok = 1;
    for (uint64_t i = 0; i < hd.n; i++, p += sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        name_off[i] = v;
        ok &= v < hd.names_len && labels[i] >= 0 && (uint64_t)labels[i] < hd.classes;
    }
    for (uint64_t k = 0; k < hd.classes; k++, p += sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        class_off[k] = v;
        ok &= v < hd.names_len;
    }
    if (!ok) {
        free(labels);
        free(name_off);
        free(class_off);
        return cnt_err_set("image folder listing: offset or label out of range");
    }
    ds->n = (int)hd.n;
    ds->classes = (int)hd.classes;
    ds->labels = labels;
    ds->name_off = name_off;
    ds->class_off = class_off;
    ds->root = cnt_malloc(hd.root_len + 1);
    memcpy(ds->root, root, hd.root_len);
    ds->root[hd.root_len] = '\0';
    ds->names = cnt_malloc(hd.names_len);
    memcpy(ds->names, names, hd.names_len);
    ds->names_len = hd.names_len;
    return CNT_OK;
}

/* ---- statistics ---- */

int dataset_estimate_stats(const dataset *ds, int max_images, int threads, float *mean, float *std,
                           int *unreadable) {
    int m = max_images < ds->n ? max_images : ds->n;
    if (m < 1) m = 1;
    int c = ds->c;
    /* Per image: pixel count and per-channel sum and sum of squares of the
     * bytes (exact in double below 2^53), summed in image order afterwards so
     * the result does not depend on the threads. */
    double *acc = cnt_calloc((size_t)m * 7, sizeof(double));
    int bad = 0;
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads > 0 ? threads : 1) reduction(+ : bad)
    for (int j = 0; j < m; j++) {
        int i = (int)((long)j * ds->n / m);
        uint8_t *pix;
        int w, h;
        if (dataset_decode(ds, i, &pix, &w, &h) != CNT_OK) {
            bad++;
            continue;
        }
        double *a = acc + (size_t)j * 7;
        size_t np = (size_t)w * (size_t)h;
        a[0] = (double)np;
        for (int ch = 0; ch < c; ch++) {
            uint64_t s = 0, s2 = 0;
            for (size_t k = 0; k < np; k++) {
                uint64_t v = pix[k * (size_t)c + (size_t)ch];
                s += v;
                s2 += v * v;
            }
            a[1 + ch] = (double)s;
            a[4 + ch] = (double)s2;
        }
        free(pix);
    }
    double count = 0, sum[3] = {0}, sum2[3] = {0};
    for (int j = 0; j < m; j++) {
        const double *a = acc + (size_t)j * 7;
        count += a[0];
        for (int ch = 0; ch < c; ch++) {
            sum[ch] += a[1 + ch];
            sum2[ch] += a[4 + ch];
        }
    }
    free(acc);
    *unreadable = bad;
    if (count == 0)
        return cnt_err_set("image folder %s: none of the %d images sampled for data.mean/data.std decodes", ds->root,
                           m);
    for (int ch = 0; ch < c; ch++) {
        double mu = sum[ch] / count / 255.0;
        double var = sum2[ch] / count / (255.0 * 255.0) - mu * mu;
        mean[ch] = (float)mu;
        std[ch] = (float)sqrt(var > 0 ? var : 0);
    }
    return CNT_OK;
}
