/*
 * train/tensorboard.h - TensorBoard event files (train.tensorboard = true):
 * the records of metrics.jsonl as scalars, so a running job is watched live
 * with `tensorboard --logdir OUT_DIR` (or the folder above several runs).
 *
 * Format: an event file is a sequence of TFRecords (a little-endian uint64
 * length, its masked CRC-32C, the bytes, their masked CRC-32C), each an
 * `Event` protocol buffer (tensorboard/compat/proto/event.proto): wall_time,
 * step, and one of file_version ("brain.Event:2", the first record),
 * session_log (START) or summary (tag/simple_value pairs, a histogram, or
 * a text: a string tensor with the text plugin's metadata).
 * The encoder here writes only those fields; TensorBoard's own reader is
 * the test (tests/test_tensorboard.sh).
 *
 * Files: <out_dir>/events.out.tfevents.<unix time>.<host>.cnntrain, one per
 * run (a resumed run adds its own; TensorBoard reads a folder's files in
 * name order). Each file starts with a SessionLog START at the first step
 * the run will write: a resumed run's START at checkpoint step + 1 makes
 * TensorBoard drop what the interrupted run logged past its checkpoint,
 * as metrics.jsonl's cut does (the bytes stay in the older file). A fresh
 * run moves the event files of an earlier run in out_dir into
 * <out_dir>/earlier-YYYYMMDD-HHMMSS/ (the newest file's last change), where
 * TensorBoard shows them as a run of their own. Every event is flushed as
 * written. Only rank 0 writes.
 *
 * Errors: tb_open and tb_write return CNT_ERR with a message naming the
 * file and the system's reason (ENOSPC, EIO, ...), like metrics.jsonl.
 */
#ifndef CNT_TENSORBOARD_H
#define CNT_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct tb_writer {
    FILE *f;                 /* NULL: not writing (off, or not rank 0) */
    char path[4200];
} tb_writer;

/* One scalar of an event: tag (e.g. "train/loss") and its value (a float
 * in the file; inf and NaN are kept). */
typedef struct tb_scalar {
    const char *tag;
    double value;
} tb_scalar;

/* A histogram: n buckets, bucket i counting values up to limit[i] (and above
 * limit[i - 1]); min, max, num, sum and sum of squares of the values. */
typedef struct tb_histogram {
    const char *tag;
    double min, max, num, sum, sum_squares;
    const double *limit, *count;
    int n;
} tb_histogram;

/* Opens a new event file in dir (which exists) and writes its first
 * records: the file version and a SessionLog START at first_step (1 for a
 * fresh run; checkpoint step + 1 for a resumed one). fresh: earlier event
 * files in dir move into dir/earlier-STAMP/ first (see above). */
int tb_open(tb_writer *w, const char *dir, long first_step, int fresh);
/* One event at step: the n scalars and, when h is not NULL, a histogram.
 * Nothing is written and CNT_OK returned when w is not open. */
int tb_write(tb_writer *w, long step, const tb_scalar *v, int n, const tb_histogram *h);
/* One event at step holding text under tag for TensorBoard's Text tab
 * (a string tensor of the text plugin; markdown). Nothing without a file. */
int tb_text(tb_writer *w, long step, const char *tag, const char *markdown);
/* CNT_ERR naming the file when its last bytes could not be written. */
int tb_close(tb_writer *w);

/* For tests: CRC-32C (Castagnoli) of n bytes, and the encoding of one event
 * as a whole TFRecord into buf (its size, 0 when cap is too small).
 * session_start: a SessionLog START (v, h ignored); version: the
 * file_version record (v, h ignored). */
uint32_t tb_crc32c(const void *p, size_t n);
size_t tb_record(uint8_t *buf, size_t cap, double wall_time, long step, int version, int session_start,
                 const tb_scalar *v, int n, const tb_histogram *h);
/* The same for a text event (tb_text's). */
size_t tb_text_record(uint8_t *buf, size_t cap, double wall_time, long step, const char *tag, const char *text);

#endif
