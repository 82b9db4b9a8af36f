/*
 * common/fileio.c - opening input files as regular files only, and atomic
 * file replacement (see common/fileio.h).
 */
#include "common/fileio.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"

const char *file_kind_name(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "of an unknown kind";
}

/* The message of a failed open: "cannot open <what> '<path>': <reason>", or
 * "<path>: <reason>" without `what`. Returns -1. */
static int open_failed(const char *path, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int open_failed(const char *path, const char *what, const char *fmt, ...) {
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (what) cnt_err_set("cannot open %s '%s': %s", what, path, reason);
    else cnt_err_set("%s: %s", path, reason);
    return -1;
}

/* file_open_regular_fd with the open's access flags given. */
static int open_regular(const char *path, const char *what, uint64_t *size, int flags) {
    /* Why O_NONBLOCK: open() of a FIFO without a writer (or, for writing,
     * a reader) waits for one, forever; non-blocking it returns at once and
     * fstat below refuses it (or the open fails with ENXIO, named below).
     * O_NOCTTY: a terminal device must not become our controlling terminal. */
    int fd = open(path, flags | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
    struct stat st;
    if (fd < 0) {
        int err = errno;
        /* A socket cannot be opened at all (ENXIO): say what it is. */
        if (err == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return open_failed(path, what, "it is %s, not a regular file", file_kind_name(st.st_mode));
        return open_failed(path, what, "%s", strerror(err));
    }
    int err = 0;
    if (fstat(fd, &st) != 0) {
        err = errno;
        close(fd);
        return open_failed(path, what, "fstat: %s", strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return open_failed(path, what, "it is %s, not a regular file", file_kind_name(st.st_mode));
    }
    /* Back to blocking reads, as callers of a plain open() expect (O_NONBLOCK
     * has no effect on a regular file today; it was for the open only). */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        err = errno;
        close(fd);
        return open_failed(path, what, "fcntl: %s", strerror(err));
    }
    if (size) *size = (uint64_t)st.st_size;
    return fd;
}

int file_open_regular_fd(const char *path, const char *what, uint64_t *size) {
    return open_regular(path, what, size, O_RDONLY);
}

/* open_regular's descriptor as a stream (`mode` as fdopen's); NULL with the
 * same kind of message when either fails. */
static FILE *stream_regular(const char *path, const char *what, uint64_t *size, int flags, const char *mode) {
    int fd = open_regular(path, what, size, flags);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, mode);
    if (!f) {
        int err = errno;
        close(fd);
        open_failed(path, what, "%s", strerror(err));
        return NULL;
    }
    return f;
}

FILE *file_append_regular(const char *path, const char *what) {
    return stream_regular(path, what, NULL, O_WRONLY | O_APPEND | O_CREAT, "a");
}

FILE *file_open_regular(const char *path, const char *what, uint64_t *size) {
    return stream_regular(path, what, size, O_RDONLY, "rb");
}

char *file_read_all(const char *path, const char *what, uint64_t max, size_t *len) {
    uint64_t size = 0;
    FILE *f = file_open_regular(path, what, &size);
    if (!f) return NULL;
    if (size > max) {
        fclose(f);
        if (what)
            cnt_err_set("%s '%s': %llu bytes, more than the %llu this reads", what, path, (unsigned long long)size,
                        (unsigned long long)max);
        else
            cnt_err_set("%s: %llu bytes, more than the %llu this reads", path, (unsigned long long)size,
                        (unsigned long long)max);
        return NULL;
    }
    char *text = cnt_malloc((size_t)size + 1);
    *len = fread(text, 1, (size_t)size, f);
    int bad = ferror(f) || *len != size;
    fclose(f);
    if (bad) {
        free(text);
        if (what) cnt_err_set("cannot read %s '%s': read error", what, path);
        else cnt_err_set("%s: read error", path);
        return NULL;
    }
    text[*len] = '\0';
    return text;
}

void file_time_stamp(time_t t, char *buf, size_t len) {
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, len, "%Y%m%d-%H%M%S", &tm);
}

int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return cnt_err_set("cannot open directory '%s' to sync it: %s", dir, strerror(errno));
    /* Why: the rename is only durable once the directory entry is on disk. */
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc != 0) return cnt_err_set("cannot fsync directory '%s': %s", dir, strerror(saved));
    return CNT_OK;
}

int file_dir_of(const char *path, char *dir, size_t len) {
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(dir, len, "%.*s", slash == path ? 1 : (int)(slash - path), path)
                  : snprintf(dir, len, ".");
    if (n < 0 || (size_t)n >= len) return cnt_err_set("path too long: '%s'", path);
    return CNT_OK;
}

int file_claim_name(const char *stem, const char *ext, char *name, size_t len, int (*claim)(const char *, void *),
                    void *ctx) {
    for (int k = 1; k < 1000; k++) {
        int w = k == 1 ? snprintf(name, len, "%s%s", stem, ext) : snprintf(name, len, "%s-%d%s", stem, k, ext);
        if (w < 0 || (size_t)w >= len) {
            errno = ENAMETOOLONG;
            return -1;
        }
        if (claim(name, ctx) == 0) return 0;
        if (errno != EEXIST) return -1;
    }
    errno = EEXIST;
    return -1;
}

static int claim_by_mkdir(const char *name, void *ctx) {
    (void)ctx;
    return mkdir(name, 0777);
}

int file_claim_dir(const char *stem, char *name, size_t len) {
    return file_claim_name(stem, "", name, len, claim_by_mkdir, NULL);
}

/* file_claim_name's claim for file_keep_aside: renames ctx (a path) to name
 * unless something is there. */
static int claim_by_rename(const char *name, void *ctx) {
    struct stat taken;
    if (lstat(name, &taken) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename((const char *)ctx, name);
}

int file_keep_aside(const char *path, const char *what, char *kept, size_t len) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        return cnt_err_set("cannot look at %s '%s': %s", what, path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return cnt_err_set("%s '%s' is %s, not a regular file: refusing to replace it", what, path,
                           file_kind_name(st.st_mode));
    char stamp[32], stem[4200];
    file_time_stamp(st.st_mtime, stamp, sizeof stamp);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - path) : strlen(path);
    const char *ext = dot && dot != base ? dot : "";
    int w = snprintf(stem, sizeof stem, "%.*s.%s", (int)n, path, stamp);
    int e = w < 0 || (size_t)w >= sizeof stem ? ENAMETOOLONG : 0;
    if (!e && file_claim_name(stem, ext, kept, len, claim_by_rename, (void *)path) == 0) return 1;
    if (!e) e = errno;
    if (e == ENAMETOOLONG) return cnt_err_set("%s '%s': path too long to keep it aside", what, path);
    if (e == EEXIST) return cnt_err_set("cannot keep the earlier %s '%s': every name is taken", what, path);
    return cnt_err_set("cannot keep the earlier %s '%s' as '%s': %s", what, path, kept, strerror(e));
}

int file_check_output(const char *path, const char *what, int stream, int n, const char *const *inputs,
                      const char *const *roles) {
    struct stat out;
    if (stat(path, &out) != 0) {
        if (errno == ENOENT) return CNT_OK;
        return cnt_err_set("cannot write %s '%s': %s", what, path, strerror(errno));
    }
    if (stream && (S_ISFIFO(out.st_mode) || S_ISCHR(out.st_mode))) return CNT_OK;
    if (!S_ISREG(out.st_mode))
        return cnt_err_set("cannot write %s '%s': it is %s, not a regular file", what, path,
                           file_kind_name(out.st_mode));
    for (int i = 0; i < n; i++) {
        struct stat in;
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino)
            return cnt_err_set("%s '%s' is the %s this reads ('%s'): writing it would destroy it; give another path",
                               what, path, roles[i], inputs[i]);
    }
    return CNT_OK;
}

int file_commit_atomic(FILE *f, int failed, const char *tmp, const char *path, const char *dir, const char *what) {
    if (!failed && fflush(f) != 0) {
        cnt_err_set("cannot write %s '%s': %s", what, tmp, strerror(errno));
        failed = 1;
    }
    /* Why: the data must be on disk before the rename makes it the file. */
    if (!failed && fsync(fileno(f)) != 0) {
        cnt_err_set("cannot fsync %s '%s': %s", what, tmp, strerror(errno));
        failed = 1;
    }
    if (fclose(f) != 0 && !failed) {
        cnt_err_set("cannot close %s '%s': %s", what, tmp, strerror(errno));
        failed = 1;
    }
    if (!failed && rename(tmp, path) != 0) {
        cnt_err_set("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        failed = 1;
    }
    if (failed) {
        unlink(tmp);
        return CNT_ERR;
    }
    return fsync_dir(dir);
}

int file_flush_record(FILE *f, int written, const char *path) {
    if (written && fflush(f) == 0 && !ferror(f)) return CNT_OK;
    int err = errno ? errno : EIO;
    return cnt_err_set("cannot write '%s': %s (checkpoints are not affected)", path, strerror(err));
}

void file_library_line(char *buf, size_t len, const char *name, const char *version, const void *addr) {
    Dl_info info;
    size_t used = strlen(buf);
    const char *file = dladdr(addr, &info) && info.dli_fname && info.dli_fname[0] == '/' ? info.dli_fname : NULL;
    /* the program itself is named by its own path in dli_fname too */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (file && n > 0 && (self[n] = '\0', strcmp(self, file) == 0)) file = NULL;
    if (used < len)
        snprintf(buf + used, len - used, "  %s %s: %s\n", name, version, file ? file : "linked into the program");
}

void file_version_text(char *buf, size_t len, long loaded, long built) {
    snprintf(buf, len, "%ld.%ld.%ld (built with %ld.%ld.%ld)", loaded / 10000, loaded / 100 % 100, loaded % 100,
             built / 10000, built / 100 % 100, built % 100);
}
