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
 *    "step_ms":T,"forward_ms":F,"backward_ms":R,"update_ms":U,"data_wait_ms":Q,
 *    "first_bucket_values":A,"bucket_values":Z,
 *    "buckets":[{"begin":b,"end":e,"bytes":x},...],
 *    "layers":[{"name":n,"kind":k,"forward_ms":f,"backward_ms":r,
 *               "grad_begin":b,"grad_end":e,"grad_bytes":x,"completes":[k,...]},...]}
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
 * node's backward. On a GPU each node is synchronised before its time is
 * taken (the profile's times are the device's; the step runs slower than in
 * training while profiled).
 *
 * Errors: CNT_ERR with a message (data, model, device, or the output file).
 */
#ifndef CNT_PROFILE_H
#define CNT_PROFILE_H

#include <stdio.h>

#include "train/config.h"

/* Profiles cfg's step and writes the JSON to out. */
int profile_run(const config *cfg, int steps, int warmup, FILE *out);

/* For --summary: the gradient's size (and on the wire with
 * dist.compress = fp16) and how the reducer cuts it into buckets
 * (dist.first_bucket_mb, dist.bucket_mb), each with its size and the layer
 * after whose backward it is complete (the buffer fills from the last
 * layer's parameters, so bucket 0 is ready first). */
void profile_print_buckets(const config *cfg, const struct net *nt, FILE *out);

#endif
