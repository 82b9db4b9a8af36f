/*
 * train/optim.c - SGD with momentum (and LARS) over the flat parameter
 * buffer, and the learning-rate schedules with linear warm-up.
 */
#include "train/optim.h"
#include "common/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void optim_init(optimizer *opt, const net *nt, const optim_opts *o) { optim_init_shard(opt, nt, o, 0, nt->n_params); }

void optim_init_shard(optimizer *opt, const net *nt, const optim_opts *o, size_t begin, size_t end) {
    CNT_ASSERT(begin <= end && end <= nt->n_params);
    memset(opt, 0, sizeof *opt);
    opt->be = nt->be;
    opt->o = *o;
    opt->base = begin;
    opt->end = end;
    if (o->momentum > 0.0f) opt->momentum_buf = nt->be->alloc((end > begin ? end - begin : 1) * sizeof(float));
    int n = nt->n_param_tensors > 0 ? nt->n_param_tensors : 1;
    opt->r_lo = cnt_calloc((size_t)n, sizeof *opt->r_lo);
    opt->r_hi = cnt_calloc((size_t)n, sizeof *opt->r_hi);
    opt->r_wd = cnt_calloc((size_t)n, sizeof *opt->r_wd);
    opt->r_adapt = cnt_calloc((size_t)n, sizeof *opt->r_adapt);
    if (o->lars) {
        opt->lars_sums = nt->be->alloc(2 * (size_t)n * sizeof(float));
        opt->lars_trust = nt->be->alloc((size_t)n * sizeof(float));
    }
}

/* LARS adapts the tensor's rate: a weight, not a batch-norm or bias parameter */
static int adapted(const optimizer *opt, const param_info *pi) { return opt->o.lars && !pi->no_decay; }

void optim_step(optimizer *opt, net *nt, float lr, float grad_scale) {
    optim_step_range(opt, nt, lr, grad_scale, 0, nt->n_params);
}

int optim_ranges(const optimizer *opt, const net *nt, size_t begin, size_t end, size_t *lo_out, size_t *hi_out,
                 float *wd_out, int *adapt_out) {
    /* Walk the tensors, merging neighbours with the same decay into one
     * range: most of a ResNet is conv weights interleaved with BN parameters.
     * LARS's adapted tensors each keep a range: each has its trust ratio. */
    int n = nt->n_param_tensors, k = 0;
    int i = 0;
    while (i < n) {
        const param_info *pi = &nt->param_info[i];
        int decay = !pi->no_decay || opt->o.wd_on_bn_bias, adapt = adapted(opt, pi);
        size_t lo = pi->offset, hi = pi->offset + pi->count;
        int j = i + 1;
        /* Forward-order neighbours sit just below in the reverse layout. */
        while (j < n && !adapt) {
            const param_info *pj = &nt->param_info[j];
            int dj = !pj->no_decay || opt->o.wd_on_bn_bias;
            if (dj != decay || adapted(opt, pj) || pj->offset + pj->count != lo) break;
            lo = pj->offset;
            j++;
        }
        if (adapt && lo < hi && lo < end && hi > begin)
            CNT_ASSERT(lo >= begin && hi <= end); /* a trust ratio needs the whole tensor */
        if (lo < begin) lo = begin;
        if (hi > end) hi = end;
        if (lo < hi) {
            lo_out[k] = lo;
            hi_out[k] = hi;
            wd_out[k] = decay ? opt->o.weight_decay : 0.0f;
            if (adapt_out) adapt_out[k] = adapt;
            k++;
        }
        i = j;
    }
    return k;
}

void optim_step_shard(optimizer *opt, const net *nt, float *params, float *grads, float lr, float grad_scale,
                      size_t begin, size_t end) {
    CNT_ASSERT(opt->base <= begin && end <= opt->end);
    int k = optim_ranges(opt, nt, begin, end, opt->r_lo, opt->r_hi, opt->r_wd, opt->r_adapt);
    for (int r = 0; r < k; r++) { /* offsets into the buffers, which start at base */
        opt->r_lo[r] -= opt->base;
        opt->r_hi[r] -= opt->base;
    }
    /* LARS: every adapted tensor's two norms, then all trust ratios in one
     * call, on the device and in its queue (no wait: a recorded step holds
     * them too) */
    int adapt = 0;
    for (int r = 0; r < k; r++) {
        if (!opt->r_adapt[r]) {
            opt->r_adapt[r] = -1;
            continue;
        }
        size_t lo = opt->r_lo[r];
        opt->be->sumsq2(opt->r_hi[r] - lo, params + lo, grads + lo, opt->lars_sums + 2 * adapt);
        opt->r_adapt[r] = adapt++;
    }
    if (adapt) opt->be->lars_trust(adapt, opt->lars_sums, opt->o.lars_eta, opt->o.weight_decay, grad_scale,
                                   opt->lars_trust);
    for (int r = 0; r < k; r++) {
        size_t lo = opt->r_lo[r];
        opt->be->sgd_update(opt->r_hi[r] - lo, params + lo, grads + lo, opt->momentum_buf ? opt->momentum_buf + lo : NULL,
                            lr, opt->o.momentum, opt->r_wd[r], opt->o.nesterov, grad_scale, opt->lr_at,
                            opt->r_adapt[r] >= 0 ? opt->lars_trust + opt->r_adapt[r] : NULL);
    }
}

void optim_step_range(optimizer *opt, net *nt, float lr, float grad_scale, size_t begin, size_t end) {
    CNT_ASSERT(opt->base == 0); /* an optimizer of the whole flat buffer */
    optim_step_shard(opt, nt, nt->params, nt->grads, lr, grad_scale, begin, end);
}

void optim_drop_momentum(optimizer *opt) {
    if (opt->be) opt->be->free(opt->momentum_buf);
    opt->momentum_buf = NULL;
}

void optim_free(optimizer *opt) {
    optim_drop_momentum(opt);
    if (opt->be) {
        opt->be->free(opt->lars_sums);
        opt->be->free(opt->lars_trust);
    }
    opt->lars_sums = opt->lars_trust = NULL;
    free(opt->r_lo);
    free(opt->r_hi);
    free(opt->r_wd);
    free(opt->r_adapt);
    opt->r_lo = opt->r_hi = NULL;
    opt->r_wd = NULL;
    opt->r_adapt = NULL;
}

double schedule_lr(const schedule *s, long step) {
    double lr = s->base_lr;
    /* cosine and poly: the fraction of the schedule done, held at 1 past its end */
    double t = s->total_steps > 0 ? (double)step / (double)s->total_steps : 0.0;
    if (t > 1.0) t = 1.0;
    if (s->kind == LR_SCHEDULE_STEP) {
        long epoch = step / s->steps_per_epoch;
        for (int k = 0; k < s->n_milestones; k++)
            if (epoch >= s->milestones[k]) lr *= s->gamma;
    } else if (s->kind == LR_SCHEDULE_COSINE) {
        lr = s->min_lr + (s->base_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * t));
    } else if (s->kind == LR_SCHEDULE_POLY) {
        lr = s->min_lr + (s->base_lr - s->min_lr) * pow(1.0 - t, s->poly_power);
    }
    double warmup_steps = s->warmup_epochs * (double)s->steps_per_epoch;
    if (warmup_steps > 0 && (double)step < warmup_steps) {
        double start = s->warmup_start < lr ? s->warmup_start : lr;
        lr = start + (lr - start) * (((double)step + 1.0) / warmup_steps);
    }
    return lr;
}
