/*
 * common/fileio.c - atomic file replacement (see common/fileio.h).
 */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"

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
