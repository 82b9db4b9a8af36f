/*
 * train/emulate.h - emulated compute (train.emulate_compute): the times a
 * training step takes, read from a step profile (`trainer --profile`, fields
 * in train/profile.h), for a run that sleeps them instead of computing.
 *
 * In such a run each node's forward and backward take the node's profiled
 * time (model/net.h, net_set_emulation), the update the profile's update_ms
 * (train/step.h, step_opts.emulate), while the gradients cross the links
 * through the normal reducer, bucket by bucket, handed over by the grad hook
 * after each node's backward as in a real run. It exists to validate the
 * communication side of the step simulator (tools/simulate) on a cluster
 * whose hosts cannot compute for all their ranks at once (docs/scaling.md,
 * "Emulated compute").
 *
 * The times: each node's forward_ms and backward_ms from the profile's
 * `layers`, matched by name, rescaled so that the forward times add up to
 * the profile's forward_ms and the backward times to its backward_ms (timing
 * each layer apart inflates their sum). That is the rule of the simulator's
 * sim_step (train/sim.c), so emulation and prediction replay the
 * same backward; a phase whose layer times are all 0 is spread evenly over
 * the nodes, as there. The profile's forward_ms includes the loss, which an
 * emulated run also computes (batch x classes values: negligible).
 *
 * Errors: emulation_load returns CNT_ERR with a message that names
 * train.emulate_compute, the file and what does not match: the file cannot
 * be read or is not a profile (profile_load's checks, train/profile.h: not
 * JSON, a field missing or of the wrong type, a time that is negative or not
 * finite, ...), or it was taken of another run: model, batch, input shape,
 * classes, parameter count, or a node of the net missing from the profile or
 * one of the profile's missing from the net.
 * Allocation failure is fatal.
 */
#ifndef CNT_EMULATE_H
#define CNT_EMULATE_H

#include "model/net.h"

typedef struct emulation {
    int n_nodes;
    double *forward_ms;      /* [n_nodes] in the net's node order: each node's forward, rescaled */
    double *backward_ms;     /* [n_nodes] in the net's node order: each node's backward, rescaled */
    double forward_total_ms; /* the profile's phases: forward (with the loss), backward, update */
    double backward_total_ms;
    double update_ms;
    char device[32];         /* where and how the profile was measured, for the log */
    char precision[16];
} emulation;

/* Reads the profile at path and checks it describes this run: model (the
 * zoo name), batch (per rank), and nt's input shape, classes, parameter
 * count and node names, each node exactly once. nt may be built but not
 * finalised (zoo_build): only those are read. Fills *em (free with
 * emulation_free); on CNT_ERR *em holds nothing. */
int emulation_load(emulation *em, const char *path, const char *model, int batch, const net *nt);
/* Frees what emulation_load filled. A zeroed or freed *em is fine. */
void emulation_free(emulation *em);

#endif
