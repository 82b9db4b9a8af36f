/*
 * train/safetensors.h - model weights in the safetensors format, to exchange
 * them with PyTorch and torchvision (`trainer --export`, `model.init_from`).
 *
 * Provides safetensors_write() (a net's parameters and batch-norm buffers under
 * torchvision's state_dict names and shapes, written atomically) and
 * safetensors_load() (the inverse, strict about the file, tolerant of extra
 * tensors and of a classifier sized for another class count).
 *
 * The format (github.com/huggingface/safetensors):
 *   u64    N                 little-endian length of the header
 *   char   header[N]         UTF-8 JSON: {"__metadata__": {str: str, ...} (optional),
 *                            NAME: {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...}
 *                            padded with spaces so that 8 + N is a multiple of 8
 *   u8     data[...]         the tensors back to back, row-major, little-endian;
 *                            data_offsets are relative to the start of data and
 *                            cover it exactly, without overlap or gap
 * The header is read by the project's JSON parser (common/json.h: jansson,
 * strict: no duplicate key, valid UTF-8, exact integers) and must be exactly
 * this: an object whose values are tensor entries (exactly those three keys)
 * or the string-to-string "__metadata__"; numbers are non-negative integers,
 * read exactly up to 2^63 - 1. Anything else is an error. A header is read
 * whole, so its length is bounded first (SAFETENSORS_MAX_HEADER).
 */
#ifndef CNT_SAFETENSORS_H
#define CNT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "model/net.h"

#define SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20) /* the reference implementation's limit */

/* What safetensors_load did besides loading. */
typedef struct safetensors_report {
    int n_loaded;       /* the net's tensors read from the file */
    int n_ignored;      /* tensors of the file this net has no use for ... */
    int n_ignored_nbt;  /* ... of which *.num_batches_tracked */
    char ignored[256];  /* the first of the others, comma-separated, "..." when cut */
    int n_kept;         /* classifier tensors left at the net's values (shape differs in the file) */
    char kept[256];     /* e.g. "fc.weight [1000, 2048] (here [10, 2048]), fc.bias ..." */
} safetensors_report;

/* Writes path holding every parameter and buffer of nt in torchvision's
 * state_dict order (per module: weight, bias, running_mean, running_var,
 * num_batches_tracked), all F32 with the shapes recorded in param_info /
 * buffer_info, plus, for every batch-norm node, "<node>.num_batches_tracked":
 * an I64 scalar (shape []) holding num_batches_tracked. params and buffers are
 * host arrays in net->params' / net->buffers' layout. metadata: NULL, or
 * key, value, key, value, ..., NULL strings stored as "__metadata__".
 * Atomic: writes DIR/.NAME.tmp, fsyncs it, renames it to path, fsyncs DIR.
 * Errors: CNT_ERR with a message naming path (or the temporary file) when it
 * cannot be created, written, synced or renamed; the temporary file is removed
 * and an existing file at path is left as it was. */
int safetensors_write(const char *path, const net *nt, const float *params, const float *buffers,
                      int64_t num_batches_tracked, const char *const *metadata);

/* Reads the safetensors file at path into params and buffers (host arrays in
 * net->params' / net->buffers' layout, holding the net's current values).
 * Every parameter and buffer of nt must be in the file under its name with
 * dtype F32, F16 or BF16 (converted to float) and the net's shape. Tensors of
 * the file that nt does not have (num_batches_tracked, AuxLogits.* for a net
 * without the auxiliary head, ...) are ignored and counted in rep. Exception
 * for fine-tuning: when a tensor of the logits node (or of the auxiliary logits
 * node) differs only in its first dimension (the class count), all of that
 * node's tensors keep their values in params and are listed in rep->kept.
 * rep may be NULL.
 * The whole header, every needed tensor's dtype and shape, and the file's size
 * are checked before params or buffers is written; a read error after that
 * leaves them partly loaded.
 * Errors: CNT_ERR with a message naming path and, where one is at fault, the
 * tensor: cannot open, or not a regular file (a FIFO, directory or device is
 * refused before it is read); truncated (header length, header or data); a bad header
 * (longer than SAFETENSORS_MAX_HEADER; not JSON: "JSON header:LINE:COL: what",
 * the position in the header's text; not the JSON above, naming the tensor
 * and the key; an unknown dtype; a shape and dtype that do not match the
 * data_offsets' size); data_offsets out of range, overlapping, or leaving
 * bytes unused; a missing tensor; an unsupported dtype or a wrong shape. */
int safetensors_load(const char *path, const net *nt, float *params, float *buffers, safetensors_report *rep);
/* The string value of `key` in the file's "__metadata__" into out (len
 * bytes, cut to fit), *found 1; *found 0 where the file has none. Reads the
 * header only, and checks no more of it than that it is JSON. CNT_ERR
 * naming the file when it cannot be read as one. */
int safetensors_metadata(const char *path, const char *key, char *out, size_t len, int *found);

#endif
