/*
 * common/fileio.h - durable, atomic replacement of a file: the writer fills
 * a temporary file beside the target, then file_commit_atomic() makes it the
 * target (flush, fsync, close, rename, fsync of the directory), so a crash
 * leaves either the old file or the new one, never half of one. Used by the
 * checkpoint and safetensors writers.
 */
#ifndef CNT_FILEIO_H
#define CNT_FILEIO_H

#include <stdio.h>

/* Finishes the temporary file f (open for writing at tmp) and renames it to
 * path inside dir. `failed` != 0: the caller's writes already failed (its
 * message is kept); f is only closed. On any failure tmp is removed and
 * CNT_ERR returned with a message naming `what` (e.g. "checkpoint") and the
 * file. f is closed in every case. */
int file_commit_atomic(FILE *f, int failed, const char *tmp, const char *path, const char *dir, const char *what);

/* fsync of a directory, so a rename inside it is durable. CNT_ERR naming it. */
int fsync_dir(const char *dir);

#endif
