/*
 * data/shards.h - an image folder packed into a few large files (a "shard
 * set"), so that a parallel file system serves a few large files instead of
 * 1.28 million opens of small ones, and a rank can read ahead in large
 * sequential pieces (data.read_order = blocks, data/loader.h).
 *
 * A shard set is a directory written by build/tools/make_shards from any
 * image folder:
 *   index.cnts           the folder's listing (class names, file names,
 *                        labels, as dataset_pack writes it) and, per image,
 *                        its shard, offset, length and CRC-32;
 *   shard-00000.cnts ... the image files' bytes as they were (a JPEG is not
 *                        re-encoded, so decoding gives the folder's pixels),
 *                        back to back, after a 24-byte header.
 * Images are stored in the order of the index: shuffled by default (so that
 * a stretch of a shard holds every class, which read_order = blocks needs),
 * or in the folder's order.
 *
 * Layout (little-endian, the machines this runs on):
 *   shard: "CNTSHRD1" u64 set_id u32 shard_number u32 0, then the images.
 *   index: "CNTSIDX1" u64 set_id u64 n u32 shards u32 0 u64 listing_len,
 *          u64 shard_bytes[shards], the listing (listing_len bytes),
 *          n records {u64 offset u32 length u32 crc32 u32 shard u32 0},
 *          u32 CRC-32 of everything before it.
 * set_id is drawn at random by the writer: a shard copied in from another
 * set is refused however alike the files look.
 *
 * Opening checks everything but the images' bytes: the index's magic, sizes
 * and checksum; every record inside its shard; every shard present, a
 * regular file, of the size the index gives, with the set's id. A read
 * checks the image's CRC-32, so a flipped byte is an unreadable image named
 * "DIR/shard-00003.cnts:class/file.jpg", skipped by the loader like an
 * unreadable file of a folder.
 */
#ifndef CNT_DATA_SHARDS_H
#define CNT_DATA_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

#define SHARDS_INDEX "index.cnts"

/* Where image i of a shard set lies. */
typedef struct shard_rec {
    uint64_t off;     /* byte offset in its shard */
    uint32_t len;     /* bytes */
    uint32_t crc;     /* CRC-32 (zlib's) of those bytes */
    uint32_t shard;   /* shard number */
    uint32_t pad;
} shard_rec;

typedef struct shards_write_options {
    uint64_t shard_bytes; /* a shard is closed once it holds at least this many bytes (> 0) */
    int shuffle;          /* 1: images in a random order drawn from seed; 0: the folder's order */
    uint64_t seed;
    int check;            /* 1: open each image (a JPEG's header, other formats decoded) and leave out,
                             with a warning, the ones the loader could not read */
} shards_write_options;

typedef struct shards_write_stats {
    int images;           /* images written */
    int left_out;         /* unreadable ones left out */
    int shards;
    uint64_t bytes;       /* images' bytes written */
} shards_write_stats;

/* Writes the images of the listed folder ds (dataset_list_imagefolder) as a
 * shard set in out_dir, created if missing. Shards are written to temporary
 * names, flushed and renamed; the index is written last, atomically, so a
 * directory with an index is a whole set. Errors (CNT_ERR, every file of
 * this run removed): out_dir already holds a set (index.cnts), or files
 * other than an earlier interrupted run's; a source file that cannot be
 * read (naming it); a write that fails (a full disk: naming the file and
 * the reason); no image readable. */
int shards_write(const dataset *ds, const char *out_dir, const shards_write_options *o, shards_write_stats *st);

/* Opens the shard set in dir as a file-backed dataset (c, h, w left 0, as
 * dataset_list_imagefolder leaves them): ds->root is dir, names and labels
 * are the folder's, ds->recs the records, ds->shards the open shards (one
 * descriptor each; the soft limit on open files is raised to the hard one
 * when needed). Errors: CNT_ERR with a message naming the file and what is
 * wrong (see above). *set_id (may be NULL) receives the set's id. */
int dataset_open_shards(dataset *ds, const char *dir, uint64_t *set_id);

/* Image i's bytes (malloc'ed, *len bytes), checked against its CRC-32;
 * name (name_len bytes) receives "DIR/shard-NNNNN.cnts:class/file" for
 * messages. CNT_ERR naming it: a read error, a short read, a checksum
 * mismatch. Thread-safe (pread). */
int shards_read(const dataset *ds, int i, uint8_t **bytes, size_t *len, char *name, size_t name_len);

/* 1 when image i (i > 0) starts where image i - 1 ends, in the same shard:
 * the two are read in one piece. */
int shards_follows(const dataset *ds, int i);

/* Asks the kernel to read images [i0, i1) (index order) ahead
 * (posix_fadvise WILLNEED): one request per run of images that lie back to
 * back in a shard, so a block of images becomes one large read. No-op for
 * other sets. */
void shards_will_need(const dataset *ds, int i0, int i1);

/* The set's number of shards (0 for other sets). */
int shards_count(const dataset *ds);

/* Closes the shards (dataset_free calls it). */
void shards_close(struct shard_set *s);

#endif
