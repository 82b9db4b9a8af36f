/*
 * data/shards.c - shard sets: writing one from an image folder, opening it
 * as a dataset, reading and reading ahead (see data/shards.h).
 */
#include "data/shards.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/rng.h"

#define SHARD_MAGIC "CNTSHRD1"
#define INDEX_MAGIC "CNTSIDX1"
#define SHARD_HEADER 24
#define MAX_SHARDS 100000

struct shard_set {
    int n;       /* shards */
    int *fd;     /* [n] */
};

typedef struct index_header {
    char magic[8];
    uint64_t set_id, n;
    uint32_t shards, zero;
    uint64_t listing_len;
} index_header;

typedef struct shard_header {
    char magic[8];
    uint64_t set_id;
    uint32_t number, zero;
} shard_header;

_Static_assert(sizeof(index_header) == 40, "index header layout");
_Static_assert(sizeof(shard_header) == SHARD_HEADER, "shard header layout");
_Static_assert(sizeof(shard_rec) == 24, "record layout");

static uint32_t crc_of(uint32_t crc, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, b, k);
        b += k;
        n -= k;
    }
    return crc;
}

static void shard_name(char *buf, size_t n, const char *dir, uint32_t k, const char *suffix) {
    snprintf(buf, n, "%s/shard-%05u.cnts%s", dir, k, suffix);
}

/* ---- writing ---- */

typedef struct writer {
    const char *dir;
    const shards_write_options *o;
    uint64_t set_id;
    FILE *f;              /* the shard being written */
    char tmp[PATH_MAX];   /* its temporary name */
    uint64_t at;          /* bytes in it so far */
    uint32_t shard;       /* its number */
    uint64_t *shard_bytes;
    int nshards, cap;
} writer;

/* Fails the write of f with the reason errno gives (a full disk names it). */
static int write_failed(const char *path) {
    return cnt_err_set("shard set: cannot write %s: %s", path, strerror(errno ? errno : EIO));
}

static int shard_begin(writer *w) {
    shard_name(w->tmp, sizeof w->tmp, w->dir, w->shard, ".tmp");
    w->f = fopen(w->tmp, "wbe");
    if (!w->f) return cnt_err_set("shard set: cannot create %s: %s", w->tmp, strerror(errno));
    shard_header h = {.set_id = w->set_id, .number = w->shard};
    memcpy(h.magic, SHARD_MAGIC, 8);
    errno = 0;
    if (fwrite(&h, sizeof h, 1, w->f) != 1) return write_failed(w->tmp);
    w->at = sizeof h;
    return CNT_OK;
}

/* Flushes, syncs and renames the shard being written. */
static int shard_end(writer *w) {
    char path[PATH_MAX];
    shard_name(path, sizeof path, w->dir, w->shard, "");
    errno = 0;
    int bad = fflush(w->f) != 0 || fsync(fileno(w->f)) != 0;
    int err = errno;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (bad) {
        errno = err ? err : errno;
        return write_failed(w->tmp);
    }
    if (rename(w->tmp, path) != 0) return cnt_err_set("shard set: cannot rename %s to %s: %s", w->tmp, path,
                                                      strerror(errno));
    if (w->nshards == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->shard_bytes = cnt_realloc(w->shard_bytes, (size_t)w->cap * sizeof *w->shard_bytes);
    }
    w->shard_bytes[w->nshards++] = w->at;
    w->shard++;
    return CNT_OK;
}

/* A file a writer of a set makes in its directory: a shard, or a shard's
 * or the index's temporary name (the index itself is checked apart). */
static int written_here(const char *name) {
    unsigned k;
    char rest[16];
    return sscanf(name, "shard-%5u.cnts%15s", &k, rest) >= 1 || strcmp(name, SHARDS_INDEX ".tmp") == 0;
}

/* Removes what a run wrote, or an interrupted earlier run left. */
static void remove_ours(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d)) != NULL)
        if (written_here(e->d_name) && (size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < sizeof path)
            unlink(path);
    closedir(d);
}

/* out_dir made ready: created (with its parents), or holding nothing but
 * an interrupted run's files. */
static int prepare_dir(const char *dir) {
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    for (char *p = parent + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(parent, 0755) != 0 && errno != EEXIST)
            return cnt_err_set("shard set: cannot create the directory %s: %s", parent, strerror(errno));
        *p = '/';
    }
    if (mkdir(dir, 0755) == 0) return CNT_OK;
    if (errno != EEXIST) return cnt_err_set("shard set: cannot create the directory %s: %s", dir, strerror(errno));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, SHARDS_INDEX);
    if (access(path, F_OK) == 0)
        return cnt_err_set("shard set: %s already holds a shard set (%s); remove it or choose another directory", dir,
                           path);
    DIR *d = opendir(dir);
    if (!d) return cnt_err_set("shard set: %s: %s", dir, strerror(errno));
    struct dirent *e;
    const char *other = NULL;
    while ((e = readdir(d)) != NULL && !other) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        if (!written_here(e->d_name)) other = e->d_name;
    }
    int rc = other ? cnt_err_set("shard set: %s is not empty (it holds %s); choose a new directory", dir, other)
                   : CNT_OK;
    closedir(d);
    if (rc == CNT_OK) remove_ours(dir);
    return rc;
}

static uint64_t random_id(void) {
    uint64_t id = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &id, sizeof id) != (ssize_t)sizeof id) id = 0;
        close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return id ^ ((uint64_t)ts.tv_sec * 1000000007ULL + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32);
}

/* Appends image i of ds to the set (or leaves it out when o->check finds it
 * unreadable): *rec receives where it went. Returns 1 written, 0 left out,
 * CNT_ERR on a failed write or an unreadable source file. */
static int write_image(writer *w, const dataset *ds, int i, shard_rec *rec) {
    char path[PATH_MAX];
    dataset_sample_path(ds, i, path, sizeof path);
    size_t len;
    uint8_t *buf = (uint8_t *)file_read_all(path, NULL, IMAGE_MAX_FILE_BYTES, &len);
    if (!buf) return CNT_ERR;
    if (w->o->check) {
        uint8_t *copy = cnt_malloc(len ? len : 1);
        memcpy(copy, buf, len);
        image_src im;
        if (image_open_bytes(&im, copy, len, path, ds->c ? ds->c : 3) != CNT_OK) {
            log_warn("shard set: leaving out %s", cnt_err_msg());
            free(buf);
            return 0;
        }
        image_close(&im);
    }
    if (!w->f && shard_begin(w) != CNT_OK) {
        free(buf);
        return CNT_ERR;
    }
    *rec = (shard_rec){.off = w->at, .len = (uint32_t)len, .crc = crc_of(0, buf, len), .shard = w->shard};
    errno = 0;
    int ok = len == 0 || fwrite(buf, len, 1, w->f) == 1;
    free(buf);
    if (!ok) return write_failed(w->tmp);
    w->at += len;
    if (w->at >= w->o->shard_bytes && shard_end(w) != CNT_OK) return CNT_ERR;
    return 1;
}

/* The index: header, shard sizes, listing, records, checksum. */
static int write_index(writer *w, const dataset *kept, const shard_rec *recs) {
    size_t listing_len;
    void *listing = dataset_pack(kept, &listing_len);
    index_header h = {.set_id = w->set_id, .n = (uint64_t)kept->n, .shards = (uint32_t)w->nshards,
                      .listing_len = listing_len};
    memcpy(h.magic, INDEX_MAGIC, 8);
    char tmp[PATH_MAX], path[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", w->dir, SHARDS_INDEX);
    snprintf(path, sizeof path, "%s/%s", w->dir, SHARDS_INDEX);
    FILE *f = fopen(tmp, "wbe");
    if (!f) {
        free(listing);
        return cnt_err_set("shard set: cannot create %s: %s", tmp, strerror(errno));
    }
    uint32_t crc = crc_of(0, &h, sizeof h);
    crc = crc_of(crc, w->shard_bytes, (size_t)w->nshards * sizeof *w->shard_bytes);
    crc = crc_of(crc, listing, listing_len);
    crc = crc_of(crc, recs, (size_t)kept->n * sizeof *recs);
    errno = 0;
    int failed = fwrite(&h, sizeof h, 1, f) != 1 ||
                 fwrite(w->shard_bytes, sizeof *w->shard_bytes, (size_t)w->nshards, f) != (size_t)w->nshards ||
                 fwrite(listing, 1, listing_len, f) != listing_len ||
                 fwrite(recs, sizeof *recs, (size_t)kept->n, f) != (size_t)kept->n || fwrite(&crc, 4, 1, f) != 1;
    if (failed) write_failed(tmp);
    free(listing);
    return file_commit_atomic(f, failed, tmp, path, w->dir, "shard index");
}

/* Image order of the set: shuffled from o->seed, or the folder's. */
static int *write_order(const dataset *ds, const shards_write_options *o) {
    int *order = cnt_malloc((size_t)ds->n * sizeof *order);
    if (o->shuffle) {
        rng r;
        rng_seed(&r, o->seed, 0x5a4d5348ULL);
        rng_permutation(&r, order, ds->n);
    } else {
        for (int i = 0; i < ds->n; i++) order[i] = i;
    }
    return order;
}

int shards_write(const dataset *ds, const char *out_dir, const shards_write_options *o, shards_write_stats *st) {
    memset(st, 0, sizeof *st);
    if (!ds->name_off || ds->shards || ds->n < 1) return cnt_err_set("shard set: the source is not an image folder");
    if (o->shard_bytes == 0) return cnt_err_set("shard set: the shard size must be > 0");
    if (prepare_dir(out_dir) != CNT_OK) return CNT_ERR;
    writer w = {.dir = out_dir, .o = o, .set_id = random_id()};
    int *order = write_order(ds, o);
    /* The set's listing: the folder's names and classes, labels and name
     * offsets in the order written. */
    dataset kept = *ds;
    kept.labels = cnt_malloc((size_t)ds->n * sizeof *kept.labels);
    kept.name_off = cnt_malloc((size_t)ds->n * sizeof *kept.name_off);
    shard_rec *recs = cnt_malloc((size_t)ds->n * sizeof *recs);
    int n = 0, rc = CNT_OK;
    for (int j = 0; j < ds->n && rc == CNT_OK; j++) {
        int i = order[j], got = write_image(&w, ds, i, &recs[n]);
        if (got < 0) {
            rc = CNT_ERR;
        } else if (got == 0) {
            st->left_out++;
        } else {
            kept.labels[n] = ds->labels[i];
            kept.name_off[n] = ds->name_off[i];
            st->bytes += recs[n].len;
            n++;
        }
    }
    if (rc == CNT_OK && n == 0) rc = cnt_err_set("shard set: none of the %d images of %s is readable", ds->n, ds->root);
    if (rc == CNT_OK && w.f) rc = shard_end(&w);
    kept.n = n;
    if (rc == CNT_OK) rc = write_index(&w, &kept, recs);
    if (w.f) {
        fclose(w.f);
        unlink(w.tmp);
    }
    if (rc != CNT_OK) remove_ours(out_dir);
    st->images = n;
    st->shards = w.nshards;
    free(order);
    free(kept.labels);
    free(kept.name_off);
    free(recs);
    free(w.shard_bytes);
    return rc;
}

/* ---- reading ---- */

/* Room for `need` more descriptors: the soft limit raised towards the hard one. */
static int ensure_fds(int need, const char *dir) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return CNT_OK;
    rlim_t want = (rlim_t)need + 256;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < want)
            return cnt_err_set("shard set %s: its %d shards need %d open files, and this process may open %llu "
                               "(ulimit -n); write it with larger shards (make_shards --shard-mb)",
                               dir, need, need, (unsigned long long)rl.rlim_cur);
    }
    return CNT_OK;
}

/* Opens shard k and checks its size and header against the index. */
static int open_shard(const char *dir, uint32_t k, uint64_t bytes, uint64_t set_id, int *fd_out) {
    char path[PATH_MAX];
    shard_name(path, sizeof path, dir, k, "");
    uint64_t size;
    int fd = file_open_regular_fd(path, "shard", &size);
    if (fd < 0) return CNT_ERR;
    shard_header h;
    int rc = CNT_OK;
    if (size != bytes)
        rc = cnt_err_set("shard set %s: %s is %llu bytes, the index says %llu (truncated or rewritten)", dir, path,
                         (unsigned long long)size, (unsigned long long)bytes);
    else if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h.magic, SHARD_MAGIC, 8) != 0)
        rc = cnt_err_set("shard set %s: %s is not a shard (bad header)", dir, path);
    else if (h.set_id != set_id || h.number != k)
        rc = cnt_err_set("shard set %s: %s belongs to another shard set (its id or number differs from the index's); "
                         "copy the whole set again",
                         dir, path);
    if (rc != CNT_OK) {
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return CNT_OK;
}

/* The index's parts, checked: sizes, checksum, then (on the aligned copy
 * in *recs, malloc'ed) every record inside its shard. */
static int parse_index(const char *path, const uint8_t *buf, size_t len, index_header *h, const uint64_t **sizes,
                       const uint8_t **listing, shard_rec **recs) {
    *recs = NULL;
    if (len < sizeof *h + 4) return cnt_err_set("shard index %s: %zu bytes is too short", path, len);
    memcpy(h, buf, sizeof *h);
    if (memcmp(h->magic, INDEX_MAGIC, 8) != 0)
        return cnt_err_set("shard index %s: not a shard index (bad magic)", path);
    if (h->shards < 1 || h->shards > MAX_SHARDS || h->n < 1 || h->n > INT_MAX || h->listing_len > len ||
        len != sizeof *h + h->shards * 8ULL + h->listing_len + h->n * sizeof(shard_rec) + 4)
        return cnt_err_set("shard index %s: sizes do not add up (%zu bytes; truncated or not written by make_shards)",
                           path, len);
    uint32_t want;
    memcpy(&want, buf + len - 4, 4);
    if (crc_of(0, buf, len - 4) != want)
        return cnt_err_set("shard index %s: checksum mismatch (the file is corrupt)", path);
    *sizes = (const uint64_t *)(buf + sizeof *h);
    *listing = buf + sizeof *h + h->shards * 8ULL;
    shard_rec *r = cnt_malloc(h->n * sizeof *r);
    memcpy(r, *listing + h->listing_len, h->n * sizeof *r);
    for (uint64_t i = 0; i < h->n; i++) {
        if (r[i].shard >= h->shards || r[i].off < SHARD_HEADER || r[i].off + r[i].len > (*sizes)[r[i].shard]) {
            free(r);
            return cnt_err_set("shard index %s: image %llu lies outside its shard", path, (unsigned long long)i);
        }
    }
    *recs = r;
    return CNT_OK;
}

/* Opens every shard of the set the index h describes. */
static int open_all(const char *dir, const index_header *h, const uint64_t *sizes, struct shard_set **out) {
    if (ensure_fds((int)h->shards, dir) != CNT_OK) return CNT_ERR;
    struct shard_set *s = cnt_calloc(1, sizeof *s);
    s->fd = cnt_malloc(h->shards * sizeof *s->fd);
    for (uint32_t k = 0; k < h->shards; k++) {
        if (open_shard(dir, k, sizes[k], h->set_id, &s->fd[k]) != CNT_OK) {
            shards_close(s);
            return CNT_ERR;
        }
        s->n++;
    }
    *out = s;
    return CNT_OK;
}

int dataset_open_shards(dataset *ds, const char *dir, uint64_t *set_id) {
    memset(ds, 0, sizeof *ds);
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, SHARDS_INDEX) >= sizeof path)
        return cnt_err_set("shard set %s: path too long", dir);
    size_t len;
    uint8_t *buf = (uint8_t *)file_read_all(path, "shard index", (uint64_t)1 << 40, &len);
    if (!buf) return CNT_ERR;
    index_header h;
    const uint64_t *sizes = NULL;
    const uint8_t *listing = NULL;
    shard_rec *recs;
    int rc = parse_index(path, buf, len, &h, &sizes, &listing, &recs);
    if (rc == CNT_OK && (rc = dataset_unpack(ds, listing, h.listing_len)) != CNT_OK)
        cnt_err_prefix("shard index %s", path);
    if (rc == CNT_OK && (uint64_t)ds->n != h.n)
        rc = cnt_err_set("shard index %s: its listing holds %d images, its records %llu", path, ds->n,
                         (unsigned long long)h.n);
    struct shard_set *s = NULL;
    if (rc == CNT_OK) rc = open_all(dir, &h, sizes, &s);
    free(buf);
    if (rc != CNT_OK) {
        free(recs);
        dataset_free(ds);
        return CNT_ERR;
    }
    ds->recs = recs;
    free(ds->root);
    ds->root = cnt_strdup(dir);
    ds->shards = s;
    if (set_id) *set_id = h.set_id;
    return CNT_OK;
}

int shards_read(const dataset *ds, int i, uint8_t **bytes, size_t *len, char *name, size_t name_len) {
    const shard_rec *r = &ds->recs[i];
    snprintf(name, name_len, "%s/shard-%05u.cnts:%s", ds->root, r->shard, ds->names + ds->name_off[i]);
    uint8_t *buf = cnt_malloc(r->len ? r->len : 1);
    size_t got = 0;
    while (got < r->len) {
        ssize_t k = pread(ds->shards->fd[r->shard], buf + got, r->len - got, (off_t)(r->off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            free(buf);
            return cnt_err_set("%s: %s", name,
                               k < 0 ? strerror(errno) : "the shard ends early (truncated since opened)");
        }
        got += (size_t)k;
    }
    if (crc_of(0, buf, r->len) != r->crc) {
        free(buf);
        return cnt_err_set("%s: checksum mismatch (the shard is corrupt)", name);
    }
    *bytes = buf;
    *len = r->len;
    return CNT_OK;
}

int shards_follows(const dataset *ds, int i) {
    const shard_rec *a = &ds->recs[i - 1], *b = &ds->recs[i];
    return b->shard == a->shard && b->off == a->off + a->len;
}

void shards_will_need(const dataset *ds, int i0, int i1) {
    if (!ds->shards) return;
    for (int i = i0; i < i1;) {
        const shard_rec *a = &ds->recs[i];
        uint64_t end = a->off + a->len;
        int j = i + 1;
        while (j < i1 && shards_follows(ds, j)) end += ds->recs[j++].len;
        /* Advice only: a file system without it reads on demand. */
        (void)posix_fadvise(ds->shards->fd[a->shard], (off_t)a->off, (off_t)(end - a->off), POSIX_FADV_WILLNEED);
        i = j;
    }
}

int shards_count(const dataset *ds) { return ds->shards ? ds->shards->n : 0; }

void shards_close(struct shard_set *s) {
    if (!s) return;
    for (int k = 0; k < s->n; k++) close(s->fd[k]);
    free(s->fd);
    free(s);
}
