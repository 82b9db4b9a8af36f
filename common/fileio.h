/*
 * common/fileio.h - opening input files, and replacing output files atomically.
 *
 * Reading: every file the trainer reads (config, IDX and CIFAR data, images,
 * checkpoints, safetensors) is opened through file_open_regular(), which
 * refuses anything that is not a regular file before a byte is read: a FIFO
 * (whose open would wait forever for a writer, and whose reads block), a
 * directory, a device (/dev/zero, /dev/urandom never end), a socket. The kind
 * is checked with fstat() on the descriptor already open, so the file checked
 * is the file read (no window between a stat and the open).
 *
 * Writing: the writer fills a temporary file beside the target, then
 * file_commit_atomic() makes it the target (flush, fsync, close, rename, fsync
 * of the directory), so a crash leaves either the old file or the new one,
 * never half of one. Used by the checkpoint and safetensors writers.
 */
#ifndef CNT_FILEIO_H
#define CNT_FILEIO_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

/* Opens path for reading (binary; close-on-exec) and returns the stream, or
 * NULL with a message "cannot open <what> '<path>': <reason>" (or
 * "<path>: <reason>" when what is NULL, the style of per-image messages),
 * where reason is strerror's text or, for anything but a regular file
 * (followed through symbolic links), "it is a directory, not a regular file"
 * (or "a FIFO (named pipe)", "a character device", "a block device", "a
 * socket"). Never blocks: the open is non-blocking, so a FIFO without a
 * writer is refused at once. size, when not NULL, receives the file's size
 * in bytes from the same fstat. `what` names the file's role for the message
 * ("config", "checkpoint", "CIFAR file"). */
FILE *file_open_regular(const char *path, const char *what, uint64_t *size);

/* The same, returning a descriptor (for zlib's gzdopen) or -1 with the same
 * message. */
int file_open_regular_fd(const char *path, const char *what, uint64_t *size);

/* The whole of path, opened as file_open_regular opens it, NUL-terminated
 * (free() it), its length in *len; NULL with a message: the open's, "<what>
 * '<path>': N bytes, more than the M this reads" when the file is larger
 * than max bytes, or "cannot read <what> '<path>': read error"; with what
 * NULL, "<path>: <reason>" as file_open_regular's (per-image messages). For
 * files read whole: step profiles (JSON), images (data/image.c). */
char *file_read_all(const char *path, const char *what, uint64_t max, size_t *len);

/* Opens path for appending (created 0644 if missing; close-on-exec), with
 * the same refusal of anything but a regular file and the same messages:
 * an output that is a FIFO never blocks the run. */
FILE *file_append_regular(const char *path, const char *what);

/* Before writing an output the user named (--profile OUT, --export OUT,
 * simulate's --csv and --trace): CNT_OK when path does not exist or is a
 * regular file that is none of the n inputs, or, for an output written as
 * a stream (stream 1: simulate's CSV and trace), a pipe or a character
 * device (/dev/stdout, /dev/null); else CNT_ERR with a message naming
 * `what`, the path and why: "it is a directory, not a regular file" (an
 * output replaced through a rename would replace the FIFO or device), or
 * that it is the <role> the command reads (inputs[i], roles[i]), which
 * writing would destroy. Inputs that do not exist are skipped. */
int file_check_output(const char *path, const char *what, int stream, int n, const char *const *inputs,
                      const char *const *roles);

/* An earlier file at path, kept instead of overwritten: renamed to the
 * same name with ".<stamp>" (its modification time, file_time_stamp)
 * before the last extension ("trace.json" -> "trace.20261128-015800.json",
 * "x.rank0.part" -> "x.rank0.<stamp>.part"), "-2", "-3", ... added when that
 * name is taken. Returns 1 with the new name in kept, 0 when there is no
 * file at path, CNT_ERR with a message naming `what` when it is not a
 * regular file or cannot be renamed. */
int file_keep_aside(const char *path, const char *what, char *kept, size_t len);

/* Takes the first free name of stem + ext, then stem-2 + ext, stem-3 + ext,
 * ... (up to -999): claim(name, ctx) returns 0 when it took the name, -1
 * with errno EEXIST when the name is taken (the next is tried), or -1 with
 * another errno to stop. Returns 0 with the name taken in name, or -1 with
 * errno ENAMETOOLONG (a name does not fit in len bytes), EEXIST (every
 * name taken; name holds the last) or claim's. The one loop behind the
 * files and folders kept beside each other within a second. */
int file_claim_name(const char *stem, const char *ext, char *name, size_t len, int (*claim)(const char *, void *),
                    void *ctx);

/* A new directory at the first free name of stem, stem-2, stem-3, ...
 * (file_claim_name, created with mkdir), its name into name: the folder of
 * one run's files moved aside, never shared with another's. 0, or -1 with
 * errno as file_claim_name's. */
int file_claim_dir(const char *stem, char *name, size_t len);

/* The directory holding path, into dir: what comes before its last '/'
 * ("/" for a file at the root, "." for a bare name). CNT_ERR with a message
 * naming path when it does not fit in len bytes. */
int file_dir_of(const char *path, char *dir, size_t len);

/* "YYYYMMDD-HHMMSS" of t in local time, into buf (16 bytes suffice): the
 * suffix of the files a run moves aside instead of overwriting
 * (metrics.<stamp>.jsonl, config.<stamp>.ini, superseded-<stamp>/). */
void file_time_stamp(time_t t, char *buf, size_t len);

/* The kind of a file that is not a regular one, for messages: "a directory",
 * "a FIFO (named pipe)", "a character device", "a block device", "a socket",
 * "a symbolic link", "a regular file", or "of an unknown kind". */
const char *file_kind_name(mode_t mode);

/* Finishes the temporary file f (open for writing at tmp) and renames it to
 * path inside dir. `failed` != 0: the caller's writes already failed (its
 * message is kept); f is only closed. On any failure tmp is removed and
 * CNT_ERR returned with a message naming `what` (e.g. "checkpoint") and the
 * file. f is closed in every case. */
int file_commit_atomic(FILE *f, int failed, const char *tmp, const char *path, const char *dir, const char *what);

/* fsync of a directory, so a rename inside it is durable. CNT_ERR naming it. */
int fsync_dir(const char *dir);

/* The end of one record appended to a log that is followed as it grows
 * (metrics.jsonl, TensorBoard's events): written is whether its writes
 * succeeded (errno set by a failed one, 0 before them); the stream is
 * flushed. CNT_ERR "cannot write '<path>': <reason> (checkpoints are not
 * affected)" when a write, the flush or the stream failed (EIO when errno
 * gives no reason). */
int file_flush_record(FILE *f, int written, const char *path);

/* `--version`'s list of libraries: appends to buf (NUL-terminated, len in
 * all) the line "  <name> <version>: <the file the library holding addr was
 * loaded from>" ("linked into the program" when it is not a shared library). */
void file_library_line(char *buf, size_t len, const char *name, const char *version, const void *addr);
/* Its version text "X.Y.Z (built with A.B.C)" from the version loaded and
 * the headers' one, each coded major*10000 + minor*100 + patch (as cuDNN 9,
 * cuBLAS and NCCL 2.9+ code theirs). */
void file_version_text(char *buf, size_t len, long loaded, long built);

#endif
