/*
 * train/loss_scale.h - loss scaling for mixed precision (train.loss_scaling).
 *
 * fp16 holds magnitudes from 2^-24 to 65504. Gradients of a loss averaged over
 * a batch are small, and many would round to zero in fp16 convolutions and
 * GEMMs. Multiplying the loss (in practice its gradient, dlogits) by S moves
 * every gradient up by S; the update divides by S again, in fp32.
 *
 * Modes:
 *   none     S = 1, gradients are not checked (fp32, tf32, bf16 by default:
 *            bf16 has fp32's range).
 *   static   S = train.loss_scale; a step whose gradients hold inf or NaN is
 *            skipped.
 *   dynamic  S starts at train.loss_scale (default 65536 = 2^16, as PyTorch's
 *            GradScaler); a step with inf/NaN gradients is skipped and S
 *            halved; after train.loss_scale_window (2000) steps in a row
 *            without one, S doubles. The default for fp16.
 * Powers of two keep the scaling exact. A step is skipped before the optimizer
 * touches anything (parameters and momentum stay as they were). Every rank
 * checks the allreduced gradients, which are the same bits on every rank, so
 * every rank takes the same decision without a message.
 *
 * LOSS_SCALE_MAX_SKIPS skipped steps in a row mean the overflow does not come
 * from the scale (activations beyond fp16's range in the forward pass, or a
 * diverged run): loss_scaler_update reports it and the trainer stops.
 */
#ifndef CNT_LOSS_SCALE_H
#define CNT_LOSS_SCALE_H

#include <stddef.h>

typedef enum loss_scale_mode {
    LOSS_SCALE_NONE,
    LOSS_SCALE_STATIC,
    LOSS_SCALE_DYNAMIC,
    LOSS_SCALE_AUTO /* a request (train.loss_scaling = auto): config_loss_scale_opts resolves it */
} loss_scale_mode;

#define LOSS_SCALE_MAX_SKIPS 30
/* The dynamic scale is never halved below this (2^-24, train.loss_scale's
 * own lower bound). */
#define LOSS_SCALE_MIN (1.0 / 16777216.0)

typedef struct loss_scaler {
    loss_scale_mode mode;
    double scale;     /* S: 1 when mode is none */
    long window;      /* dynamic: overflow-free steps before S doubles */
    long good;        /* overflow-free steps since S last changed (or since the start) */
    long skipped;     /* steps skipped since the start of the run */
    int in_a_row;     /* steps skipped in a row, up to now */
} loss_scaler;

typedef struct loss_scale_opts {
    loss_scale_mode mode; /* none, static or dynamic (not auto) */
    double scale;         /* static scale, or the dynamic scale's start */
    long window;          /* dynamic: overflow-free steps before the scale doubles */
} loss_scale_opts;

/* A scaler at its start; the scale is 1 when mode is none. */
void loss_scaler_init(loss_scaler *ls, const loss_scale_opts *o);
/* 1 when the step's gradients must be checked for inf/NaN (mode != none). */
int loss_scaler_active(const loss_scaler *ls);
/* Records whether the step's gradients overflowed; returns 1 when the update
 * should be applied, 0 when the step is skipped. Sets an error (CNT_ERR
 * through *failed = 1, message in cnt_err_msg) after LOSS_SCALE_MAX_SKIPS
 * skipped steps in a row; *failed is 0 otherwise. */
int loss_scaler_update(loss_scaler *ls, int overflow, int *failed);
/* A resumed run goes on from a checkpoint's state (scale 0: none recorded,
 * nothing changes): dynamic scaling takes the scale and its count of clean
 * steps; static keeps train.loss_scale, which the user may have changed on
 * purpose; every mode takes the count of skipped steps. */
void loss_scaler_restore(loss_scaler *ls, double scale, long good, long skipped, int in_a_row);

/* One phrase for the start-up log, e.g. "dynamic loss scaling from 65536
 * (x2 after 2000 steps without overflow, /2 and the step skipped on one)". */
void loss_scaler_describe(const loss_scaler *ls, char *buf, size_t len);

#endif
