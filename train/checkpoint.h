/*
 * train/checkpoint.h - the training checkpoint file: dir/ckpt-EEEEEE.cnt.
 *
 * Provides ckpt_write() (rank 0 of a job writes; atomic: temporary file,
 * fsync, rename, fsync of the directory; old checkpoints pruned to `keep`),
 * ckpt_read() (validates everything before touching the caller's arrays),
 * ckpt_find_latest() (for resuming) and ckpt_supersede() (moving aside the
 * checkpoints a run started before, so they are neither overwritten nor
 * resumed by mistake).
 *
 * Names: a checkpoint after E complete epochs is ckpt-EEEEEE.cnt; one taken
 * inside epoch E+1, after N of its samples (all ranks' together), is
 * ckpt-EEEEEE-NNNNNNNNNN.cnt. Checkpoints order by (E, N): the position in the
 * data, which means the same at any world size or batch size (step numbers
 * do not).
 *
 * File layout, version 6 (version 5 lacked the PowerSGD block and is read
 * with none; version 4 also lacked the normalisation block and is
 * read with none recorded; version 3 also lacked the position block and is read as
 * an epoch-boundary checkpoint with no config text; version 2 also lacked the
 * loss-scaling block and is read with loss_scale 0, "not recorded"; version 1
 * lacked the model block and is rejected with a message saying so). Integers
 * and floats are in the host's byte order,
 * which must be little-endian (checked at compile time); the file is not meant
 * to move between machines of different endianness.
 *
 *   char     magic[8]          "CNTCKPT\0"
 *   u32      version           6
 *   i32      epoch             ckpt_meta, field by field, no padding
 *   i64      step
 *   u64      dropout_seed
 *   u64      config_hash
 *   char     model_name[64]    NUL-padded
 *   i32      in_c, in_h, in_w  model block: what zoo_build needs to rebuild the
 *   i32      classes           exact net from the file alone (trainer --export)
 *   i32      aux_logits        0 or 1: the net has inception's auxiliary head
 *   i32      zero_init_residual  0 or 1 (zoo_options; affects only initialisation)
 *   f32      dropout           zoo_options.dropout (< 0: the model's default)
 *   f64      loss_scale        loss-scaling block (train/loss_scale.h): the scale,
 *   i64      loss_scale_good   0 when the run had none; clean steps since it changed;
 *   i64      skipped_steps     steps skipped for inf/NaN gradients,
 *   i64      skipped_in_a_row  the last of them in a row up to the checkpoint
 *   i64      epoch_samples     position block: samples of epoch `epoch`+1 done,
 *   i32      world, batch      all ranks'; the writing run's ranks and batch per rank
 *   u32      config_len        then its effective config (config.ini's text),
 *   char     config[config_len]  not NUL-terminated, < CKPT_CONFIG_MAX bytes
 *   i32      norm_channels     normalisation block: 0 (none recorded) to 3, then
 *   f32      mean[3], std[3]   the per-channel values the run normalised its
 *                              inputs with (zeros past norm_channels)
 *   u32      n_param_tensors   model signature: net->param_info in order ...
 *   u32      n_buffer_tensors  ... then net->buffer_info in order
 *   { char name[128]; u64 offset; u64 count; } x (n_param_tensors + n_buffer_tensors)
 *   u64      n_params          total values, = net->n_params
 *   u64      n_buffers         total values, = net->n_buffers
 *   f32      params[n_params]  net->params' layout (reverse forward order)
 *   f32      buffers[n_buffers]
 *   u32      has_momentum      0 or 1
 *   f32      momentum[n_params]   only when has_momentum is 1
 *   u32      psgd_rank         PowerSGD block (dist.compress = powersgd, once
 *                              compressing): its rank r, 0 when none; then
 *   u64      n_q, n_e          Q's values and the errors' (dist/powersgd.h),
 *   u64      draws[2]          the state of Q's random draws,
 *   f32      q[n_q]            Q of every compressed tensor (every rank's),
 *   f32      e[n_e]            the sum of the ranks' errors (a resume gives
 *                              it to rank 0: powersgd_state_size says why)
 *   u32      crc32             zlib crc32 of every byte before it
 */
#ifndef CNT_CHECKPOINT_H
#define CNT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model/net.h"

#define CKPT_VERSION 6
#define CKPT_PSGD_MAX_RANK 32 /* dist.powersgd_rank's largest */
#define CKPT_CONFIG_MAX 16384 /* bytes of config text, the NUL included */
#define CKPT_MAX_EPOCH 999999 /* six digits in the file name */

typedef struct ckpt_meta {
    int version;           /* the file's (ckpt_read, ckpt_read_meta); ckpt_write writes CKPT_VERSION */
    int epoch;             /* epochs completed */
    long step;             /* optimizer steps taken */
    uint64_t dropout_seed; /* net->dropout_seed */
    uint64_t config_hash;  /* hash of the effective config (informational) */
    char model_name[64];   /* NUL-terminated */
    /* The model block. ckpt_write takes the shape, classes and aux_logits from
     * the net it is given (these meta fields are ignored there) and
     * zero_init_residual and dropout from meta; ckpt_read fills them all. */
    int in_c, in_h, in_w;  /* input shape per image */
    int classes;
    int aux_logits;        /* the net has an auxiliary classifier (inception_v3) */
    int zero_init_residual;
    float dropout;         /* zoo_options.dropout */
    /* Loss scaling (train/loss_scale.h), so a resumed fp16 run goes on with
     * the scale it had; loss_scale 0: none recorded (no loss scaling, or a
     * version-2 file). */
    double loss_scale;
    long loss_scale_good;
    long skipped_steps;
    int skipped_in_a_row;
    /* Where in the data (version 4; 0, 0, 0 and "" from older files): the
     * samples of the epoch after `epoch` already trained, over all ranks
     * (0: an epoch boundary), and the writing run's world size and batch per
     * rank; its effective config as config.ini holds it, so a resumed run can
     * say which keys changed. */
    long epoch_samples;
    int world, batch;
    char config[CKPT_CONFIG_MAX];
    /* The normalisation the run fed the net (version 5; 0 channels from older
     * files): data.mean and data.std as given or estimated (auto), so that
     * `trainer --eval` can score the checkpoint as the run did. */
    int norm_channels;
    float mean[3], std[3];
} ckpt_meta;

/* dist.compress = powersgd's state (dist/powersgd.h): rank 0 means none. */
typedef struct ckpt_powersgd {
    int rank;              /* the approximation's rank r, 1 to CKPT_PSGD_MAX_RANK; 0: none */
    size_t n_q, n_e;       /* values of q and e, at least 1 each */
    uint64_t draws[2];     /* the random draws' state (draws[1] odd) */
    float *q, *e;          /* Q of the compressed tensors; the ranks' errors summed */
} ckpt_powersgd;

/* Frees what ckpt_read allocated in *psgd and zeroes it. NULL is fine. */
void ckpt_powersgd_free(ckpt_powersgd *psgd);

/* Writes dir/ckpt-EEEEEE.cnt (EEEEEE = meta->epoch, 6 digits; with
 * meta->epoch_samples > 0 dir/ckpt-EEEEEE-NNNNNNNNNN.cnt) holding meta, the
 * model signature of nt, params and buffers (host arrays of nt->n_params and
 * nt->n_buffers floats in net->params' / net->buffers' layout) and momentum
 * (n_params floats, or NULL: recorded as absent) and psgd (NULL: none).
 * Creates dir (and parents) if
 * needed. Atomic: writes dir/.ckpt-EEEEEE.cnt.tmp, flushes and fsyncs it,
 * renames it over the final name and fsyncs dir. Then removes the oldest
 * checkpoints (by position) so that at most `keep` remain (keep <= 0 keeps all); a
 * file that cannot be removed there is only a warning (log_warn).
 * When path_out is non-NULL it receives the final path.
 * Errors: CNT_ERR with a message naming the path (epoch out of 0..999999,
 * epoch_samples out of 0..9999999999, config text too long,
 * path_out too small, directory cannot be created, open/write/fsync/rename
 * failure, an implausible psgd). On error the temporary file is removed and any earlier checkpoint,
 * including one of the same epoch, is left as it was. */
int ckpt_write(const char *dir, const net *nt, const float *params, const float *buffers, const float *momentum,
               const ckpt_powersgd *psgd, const ckpt_meta *meta, int keep, char *path_out, size_t path_len);

/* Reads the checkpoint at path into host arrays sized for nt: params
 * (n_params), buffers (n_buffers) and momentum (n_params, or NULL to skip).
 * When the file has no momentum and momentum is non-NULL, momentum is zero-filled
 * and *has_momentum set to 0 (not an error); otherwise *has_momentum is 1 if the
 * file has one. has_momentum and meta may be NULL. psgd (NULL: not read)
 * gets the PowerSGD block, its q and e allocated (ckpt_powersgd_free), or
 * rank 0 when the file has none (versions before 6 never do).
 * The whole file is validated (size, checksum, model signature) before any of
 * the caller's arrays is written, so on error they are unchanged.
 * Errors: CNT_ERR with a message naming path: cannot open or not a regular
 * file (a FIFO, directory or device, refused unread); truncated (too
 * short for what its header describes); "not a cnntrain checkpoint" (magic);
 * unsupported version (version 1: "has no model block"); "corrupt" (checksum
 * mismatch, bad momentum flag, bytes after the end, implausible model or
 * PowerSGD block); model mismatch (the first parameter or buffer tensor whose
 * name, size or offset differs, or the differing tensor counts, and the
 * checkpoint's model_name). */
int ckpt_read(const char *path, const net *nt, float *params, float *buffers, float *momentum, int *has_momentum,
              ckpt_powersgd *psgd, ckpt_meta *meta);

/* Reads the header of the checkpoint at path (magic, version, meta with the
 * model block) into *meta, enough to rebuild the net with zoo_build, once the
 * whole file's checksum holds (the file is read through, so a corrupt but
 * plausible header is never trusted); the model signature is validated by
 * ckpt_read.
 * Errors: CNT_ERR naming path: cannot open or not a regular file (as
 * ckpt_read); "not a cnntrain checkpoint"; truncated header; a version-1
 * file ("version 1 ... has no model block") or another unsupported version;
 * an implausible model block or a checksum mismatch (corrupt). */
int ckpt_read_meta(const char *path, ckpt_meta *meta);

/* Finds the newest checkpoint in dir: of the regular files named exactly
 * ckpt-EEEEEE.cnt or ckpt-EEEEEE-NNNNNNNNNN.cnt, the one furthest into the
 * data (largest E, then N); its contents are not checked (ckpt_read does
 * that).
 * Returns CNT_OK with the path in path_out, or CNT_ERR with a message when dir
 * cannot be opened, holds no checkpoint (the caller decides whether that is an
 * error) or path_out is too small. */
int ckpt_find_latest(const char *dir, char *path_out, size_t path_len);

/* A run starting at (epoch, epoch_samples) (0, 0 for a fresh start) moves
 * every checkpoint of dir further into the data than that into
 * dir/superseded-YYYYMMDD-HHMMSS/ (created; renames, so nothing is copied or
 * lost), so the run neither overwrites them nor has a later resume = auto
 * pick them over its own; so do best.cnt and best.json (ckpt_best_keep) when
 * their epoch is past the start, or when best.json cannot be read (each
 * logged). *moved gets how many ckpt-* files moved, and the subdirectory's
 * path goes to moved_to when anything moved. A missing dir moves nothing.
 * Errors: CNT_ERR naming the file or directory that could not be listed,
 * created or renamed (what moved before stays moved). */
int ckpt_supersede(const char *dir, int epoch, long epoch_samples, int *moved, char *moved_to, size_t len);

/* checkpoint.keep_best: the checkpoint of the best evaluation so far, kept
 * as dir/best.cnt, a hard link to the epoch's own checkpoint file (so
 * pruning that one to `keep` leaves it, and nothing is copied), described
 * by dir/best.json:
 *   {"epoch": E, "step": S, "top1": T1, "top5": T5, "loss": L, "checkpoint": "ckpt-EEEEEE.cnt"}
 * (top1 and top5 as fractions, the checkpoint's file name in dir). */
typedef struct ckpt_best {
    int epoch;             /* epochs completed at the evaluation */
    long step;
    double top1, top5, loss;
    char checkpoint[64];   /* the file in dir it was linked from */
} ckpt_best;

/* Makes dir's checkpoint after b->epoch whole epochs (ckpt-EEEEEE.cnt,
 * written before) the best, b its scores (b->checkpoint is ignored: the
 * file's name is recorded): best.json first (temporary file, fsync,
 * rename), then best.cnt (a temporary link renamed over it), then an fsync
 * of dir. A crash between the two leaves best.json ahead of best.cnt, which
 * ckpt_best_read mends. Errors: CNT_ERR naming the file. */
int ckpt_best_keep(const char *dir, const ckpt_best *b);

/* Reads dir/best.json into *b; *found = 0 when there is none. Where best.cnt
 * is missing or another file than the checkpoint best.json names while that
 * checkpoint is still in dir (a crash between ckpt_best_keep's two steps), it
 * links it again and says so (log_warn). Errors: CNT_ERR naming best.json
 * (unreadable, not the JSON above) or the link that failed. */
int ckpt_best_read(const char *dir, ckpt_best *b, int *found);

#endif
