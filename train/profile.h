/*
 * train/profile.h - the profile of one training step (`trainer --profile`):
 * what a step simulator needs to predict the step on N workers, measured on
 * this rank alone.
 *
 * It runs `warmup` untimed and `steps` timed steps of the configured run (its
 * model, batch, precision, layout, device and data loader; one rank, so no
 * communication) and writes one JSON object:
 *
 *   {"model":M,"device":D,"precision":P,"layout":L,"input":[C,H,W],"classes":K,
 *    "batch":B,"steps":S,"warmup":W,"params":N,"grad_bytes":G,
 *    "step_ms":T,"forward_ms":F,"backward_ms":R,"update_ms":U,"data_wait_ms":Q,["stream_step_ms":S,]
 *    "first_bucket_values":A,"bucket_values":Z,
 *    "buckets":[{"begin":b,"end":e,"bytes":x},...],
 *    "layers":[{"name":n,"kind":k,["runs":s,]["forward_stream_ms":f2,"backward_stream_ms":r2,]
 *               "forward_ms":f,"backward_ms":r,
 *               "grad_begin":b,"grad_end":e,"grad_bytes":x,"completes":[k,...]},...],
 *    "tensors":[[offset,count,rows],...]}
 *
 * Every time is the median over the timed steps (ms). step_ms is the whole
 * step (stepper_run) and data_wait_ms the wait for the loader's batch before
 * it. `buckets` is the reducer's own cut of the gradient buffer at the
 * config's dist.first_bucket_mb / dist.bucket_mb (reducer_bucket_layout), in
 * values (4 bytes each) of net->grads, whose layout is reverse forward order:
 * the order backward finishes them. `layers` lists every node in backward
 * order (the order the simulator replays): its forward and backward time,
 * the gradient range its backward writes (empty for a node without
 * parameters: grad_begin = grad_end) and the buckets that range completes,
 * i.e. the buckets a reducer with overlap on launches right after this
 * node's backward. `tensors` lists the parameter tensors in buffer order
 * (powersgd_net_tensors: each one's offset and values, and its first
 * dimension, 1 for a vector), which tell the simulator what
 * dist.compress = powersgd would compress. On a GPU each node is synchronised before its time is
 * taken (the profile's times are the device's; the step runs slower than in
 * training while profiled). Where the backend has timing marks (the GPU),
 * the same number of steps then runs again with a mark on the compute
 * stream before and after each node and no synchronisation between nodes:
 * forward_stream_ms and backward_stream_ms are each node's time within the
 * stream as training runs it (a small layer's launch overhead hidden behind
 * the one before, which synchronising exposes), stream_step_ms that pass's
 * step. On the CPU, whose ops finish before they return, the two would be
 * the same and the second pass is not run. `runs`, on a convolution, says what ran each of
 * its passes (backend_conv_describe: cuDNN's algorithm, math type and
 * workspace; oneDNN's implementation; OpenBLAS's formulation).
 *
 * Reading one back: profile_load reads and checks a profile file into a
 * `profile`, for both of its readers: emulated compute (train/emulate.c,
 * which checks it against the net it will build) and the step simulator
 * (train/sim.c, which may move it to other hardware). It checks
 * what a profile must be to replay: every field above that a reader uses,
 * of its type (times finite and >= 0, counts whole), grad_bytes 4 x params,
 * each layer's gradient range inside [0, params), the ranges together
 * ending at params, `buckets` the reducer's own cut of params at
 * first_bucket_values / bucket_values (reducer_bucket_layout), and each
 * layer's `completes` the buckets the reducer's rule completes after it
 * (reducer_bucket_ready_after); `tensors`, optional (profiles written
 * before it lack it), tiling [0, params) in order with rows >= 1. steps,
 * warmup, layout and a layer's kind
 * and runs are for people and not read. The optional "allreduce" block of
 * tools/profile.sh: {"world": N >= 2, "curves": {"mpi": [{"bytes": B,
 * "us": T}, ...], "ring": [...]}}, each curve non-empty with bytes
 * increasing and bytes, us above 0.
 *
 * Errors: profile_run: CNT_ERR with a message (data, model, device, or the
 * output file). profile_load / profile_parse: CNT_ERR with a message naming
 * the file and the field ("p.json: layers[2].grad_end: expected a number,
 * found a string"; malformed JSON: "p.json:LINE:COL: what was expected");
 * the file cannot be read, or is larger than 1 GiB. Allocation failure is
 * fatal.
 */
#ifndef CNT_PROFILE_H
#define CNT_PROFILE_H

#include <stddef.h>
#include <stdio.h>

#include "dist/powersgd.h"

struct config;
struct net;

typedef struct profile_layer {
    char *name;
    double forward_ms, backward_ms;
    size_t grad_begin, grad_end; /* values of the gradient buffer its backward writes; equal: none */
} profile_layer;

/* A measured allreduce curve: time against bytes. */
typedef struct profile_curve {
    int n;
    double *bytes, *us; /* [n], bytes increasing */
} profile_curve;

/* A step profile as read back (the fields of the JSON above). */
typedef struct profile {
    char model[64], device[32], precision[16];
    int batch, c, h, w, classes;        /* per rank; the input's C x H x W */
    size_t params;                      /* values of the gradient buffer (4 bytes each) */
    size_t first_bucket_values, bucket_values;
    double step_ms, forward_ms, backward_ms, update_ms, data_wait_ms;
    int n_layers;
    profile_layer *layers;              /* [n_layers], backward order */
    int n_tensors;                      /* 0: the profile has no "tensors" */
    powersgd_tensor *tensors;           /* [n_tensors], buffer order */
    int curve_world;                    /* 0: no allreduce block */
    profile_curve curve_mpi, curve_ring;
} profile;

/* Profiles cfg's step and writes the JSON to out. */
int profile_run(const struct config *cfg, int steps, int warmup, FILE *out);
/* The same on data cfg's input_load already gave (read, not freed): the
 * trainer's dist.bucket_mb = auto profiles without listing the data again. */
struct input_data;
int profile_run_data(const struct config *cfg, const struct input_data *d, int steps, int warmup, FILE *out);

/* For --summary: the gradient's size (and on the wire with
 * dist.compress = fp16) and how the reducer cuts it into buckets
 * (dist.first_bucket_mb, dist.bucket_mb), each with its size and the layer
 * after whose backward it is complete (the buffer fills from the last
 * layer's parameters, so bucket 0 is ready first). */
void profile_print_buckets(const struct config *cfg, const struct net *nt, FILE *out);

/* Reads and checks the profile file at path into *p (free with
 * profile_free); on CNT_ERR *p holds nothing. */
int profile_load(const char *path, profile *p);
/* The same from text[0, len); name: the file's name in messages. */
int profile_parse(const char *text, size_t len, const char *name, profile *p);
/* Frees what profile_load filled. A zeroed or freed *p is fine. */
void profile_free(profile *p);

#endif
