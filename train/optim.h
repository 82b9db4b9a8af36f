/*
 * train/optim.h - SGD with momentum, LARS, and the learning-rate schedules.
 *
 * The optimizer keeps one momentum buffer with the layout of net->grads (the
 * flat, reverse-forward-order buffer) and updates every parameter tensor with
 * the backend's sgd_update, one call per range of tensors with the same
 * weight decay (none on batch-norm and bias parameters unless
 * optim.wd_on_bn_bias). (All ranges in one GPU launch measured within noise
 * of this on an H200: docs/benchmarks.md.)
 *
 * LARS (optim.name = lars; You, Gitman and Ginsburg 2017, "Large Batch
 * Training of Convolutional Networks") is that SGD with each weight tensor's
 * step multiplied by its trust ratio, computed on the device every step
 * (the backend's sumsq2 and lars_trust):
 *   g = grad_scale * grad, w = params,
 *   trust = ||w|| > 0 && ||g|| > 0 ? eta * ||w|| / (||g|| + weight_decay * ||w||) : 1
 *   buf = momentum * buf + trust * (g + weight_decay * w);  w -= lr * buf
 * Batch-norm and bias parameters are not adapted (trust 1), as in MLPerf's
 * reference. The rate multiplies the momentum buffer on its way out, as
 * PyTorch's SGD (and with it apex's LARC and torchlars) has it; the paper's
 * Algorithm 1 multiplies each step's term on its way in: the same updates
 * while the rate is constant. Adapted tensors are never merged into one
 * range, and a range given to optim_step_range/_shard must hold every
 * adapted tensor it touches whole (a parameter server's shards do).
 *
 * Schedules (per step, so warm-up is smooth within an epoch):
 *   constant: lr
 *   step:     lr * gamma^(number of milestones <= current epoch)
 *   cosine:   min_lr + (lr - min_lr) * (1 + cos(pi * step / total_steps)) / 2
 *   poly:     min_lr + (lr - min_lr) * (1 - step / total_steps)^power
 *             (MLPerf's ResNet-50 with LARS: power 2)
 * during the first warmup_epochs replaced by a linear ramp from warmup_start
 * (0, or optim.lr with optim.warmup_start = lr) to the schedule's value:
 * start + (value - start) * (step + 1) / warmup_steps, so the first step is
 * small and the rate reaches the schedule's value when warm-up ends.
 */
#ifndef CNT_OPTIM_H
#define CNT_OPTIM_H

#include "model/net.h"

typedef struct optim_opts {
    float momentum;     /* 0: plain SGD, no momentum buffer */
    float weight_decay;
    int nesterov;       /* bool */
    int wd_on_bn_bias;  /* bool: decay batch-norm and bias parameters too */
    int lars;           /* bool: LARS's trust ratio on every weight tensor */
    float lars_eta;     /* LARS's trust coefficient */
} optim_opts;

typedef struct optimizer {
    const backend *be;
    float *momentum_buf; /* [end - base] device, zero at start: the momentum of values [base, end) */
    size_t base, end;    /* the values of the flat buffers this optimizer updates: [0, n_params), or a shard */
    optim_opts o;
    /* the ranges of one update (optim_ranges), host arrays of n_param_tensors */
    size_t *r_lo, *r_hi;
    float *r_wd;
    int *r_adapt;        /* LARS: the range's index into lars_trust, or -1 (not adapted) */
    float *lars_sums;    /* LARS: device, 2 per adapted tensor (sumsq2's pairs) */
    float *lars_trust;   /* LARS: device, 1 per adapted tensor */
    /* NULL, or a device float the updates read the rate from instead of
     * their lr argument (sgd_update's lr_at): whoever sets it writes the
     * step's rate there first (a recorded step: train/step.c) */
    const float *lr_at;
} optimizer;

/* Allocates the momentum buffer for nt. Never fails (allocation failures
 * are fatal). */
void optim_init(optimizer *opt, const net *nt, const optim_opts *o);
/* The same for the values [begin, end) of nt's flat buffers only (a
 * parameter server's shard): the momentum buffer holds end - begin values,
 * and nt needs its parameter layout only (net_param_layout), not its
 * buffers. Step it with optim_step_shard. */
void optim_init_shard(optimizer *opt, const net *nt, const optim_opts *o, size_t begin, size_t end);
/* One update of every parameter from nt->grads, which are multiplied by
 * grad_scale first (1/world_size when gradients were summed over ranks). */
void optim_step(optimizer *opt, net *nt, float lr, float grad_scale);
/* The same update for the values [begin, end) of the flat buffers only (a
 * parameter server's shard): each value gets exactly what optim_step gives
 * it, since the update is elementwise. */
void optim_step_range(optimizer *opt, net *nt, float lr, float grad_scale, size_t begin, size_t end);
/* optim_step_range for an optimizer of optim_init_shard, on buffers that
 * hold the shard: params[i] and grads[i] are the values base + i (opt->base),
 * and [begin, end) lies within the shard. Each value gets exactly what
 * optim_step gives it. */
void optim_step_shard(optimizer *opt, const net *nt, float *params, float *grads, float lr, float grad_scale,
                      size_t begin, size_t end);
/* Frees the momentum buffer only (momentum_buf NULL): for parameter-server
 * workers, whose servers keep the momentum and which never step. */
void optim_drop_momentum(optimizer *opt);
void optim_free(optimizer *opt);
/* The update of [begin, end) as ranges of the flat buffers, each with its
 * weight decay (0 on batch-norm and bias parameters unless
 * optim.wd_on_bn_bias; neighbouring tensors with the same decay merged,
 * but for LARS's adapted tensors, a range each): written to lo/hi/wd (room
 * for n_param_tensors), and when adapt is not NULL whether LARS adapts the
 * range (0 or 1); their number returned. */
int optim_ranges(const optimizer *opt, const net *nt, size_t begin, size_t end, size_t *lo, size_t *hi, float *wd,
                 int *adapt);

#define SCHEDULE_MAX_MILESTONES 16

typedef enum lr_schedule { LR_SCHEDULE_CONSTANT, LR_SCHEDULE_STEP, LR_SCHEDULE_COSINE, LR_SCHEDULE_POLY } lr_schedule;

/* A run's learning-rate schedule (config_schedule builds it from [optim]). */
typedef struct schedule {
    lr_schedule kind;
    double base_lr;         /* the effective (already scaled) rate */
    double warmup_start;    /* where the warm-up ramp starts */
    double warmup_epochs;   /* may be fractional; 0: none */
    int milestones[SCHEDULE_MAX_MILESTONES]; /* epochs, ascending (step) */
    int n_milestones;
    double gamma;           /* step: factor per milestone passed */
    double min_lr;          /* cosine, poly: floor */
    double poly_power;      /* poly: the exponent */
    long steps_per_epoch;
    long total_steps;       /* the schedule's length: train.epochs x steps per epoch
                             * (train.max_steps does not shorten it) */
} schedule;

/* Learning rate for a 0-based step. */
double schedule_lr(const schedule *s, long step);

#endif
