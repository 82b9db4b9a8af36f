/*
 * train/loss_scale.c - static and dynamic loss scaling (see loss_scale.h).
 */
#include "train/loss_scale.h"

#include <stdio.h>
#include <string.h>

#include "common/check.h"

void loss_scaler_init(loss_scaler *ls, const loss_scale_opts *o) {
    CNT_ASSERT(o->mode != LOSS_SCALE_AUTO);
    memset(ls, 0, sizeof *ls);
    ls->mode = o->mode;
    ls->scale = ls->mode == LOSS_SCALE_NONE ? 1.0 : o->scale;
    ls->window = o->window;
}

int loss_scaler_active(const loss_scaler *ls) { return ls->mode != LOSS_SCALE_NONE; }

int loss_scaler_update(loss_scaler *ls, int overflow, int *failed) {
    *failed = 0;
    if (ls->mode == LOSS_SCALE_NONE) return 1;
    if (!overflow) {
        ls->in_a_row = 0;
        if (ls->mode == LOSS_SCALE_DYNAMIC && ++ls->good >= ls->window) {
            ls->scale *= 2.0;
            ls->good = 0;
        }
        return 1;
    }
    ls->skipped++;
    ls->in_a_row++;
    ls->good = 0;
    double was = ls->scale;
    /* the floor keeps 1/scale finite in float, whatever the overflows */
    if (ls->mode == LOSS_SCALE_DYNAMIC) ls->scale = ls->scale * 0.5 > LOSS_SCALE_MIN ? ls->scale * 0.5 : LOSS_SCALE_MIN;
    if (ls->in_a_row >= LOSS_SCALE_MAX_SKIPS) {
        *failed = 1;
        cnt_err_set("%d steps in a row had inf or NaN gradients (loss scale %g%s): the overflow is not the loss "
                    "scale's; activations may exceed the precision's range in the forward pass, or the run has "
                    "diverged (try train.precision = bf16, or a lower optim.lr)",
                    ls->in_a_row, was, ls->mode == LOSS_SCALE_DYNAMIC ? ", halved at each" : ", static");
    }
    return 0;
}

void loss_scaler_restore(loss_scaler *ls, double scale, long good, long skipped, int in_a_row) {
    if (!(scale > 0)) return;
    if (ls->mode == LOSS_SCALE_DYNAMIC) {
        ls->scale = scale;
        ls->good = good;
    }
    ls->skipped = skipped;
    ls->in_a_row = in_a_row;
}

void loss_scaler_describe(const loss_scaler *ls, char *buf, size_t len) {
    switch (ls->mode) {
    case LOSS_SCALE_NONE: snprintf(buf, len, "no loss scaling"); break;
    case LOSS_SCALE_STATIC:
        snprintf(buf, len, "static loss scale %g (a step with inf/NaN gradients is skipped)", ls->scale);
        break;
    case LOSS_SCALE_DYNAMIC:
        snprintf(buf, len,
                 "dynamic loss scaling from %g (x2 after %ld steps without overflow; on inf/NaN gradients the step "
                 "is skipped and the scale halved)",
                 ls->scale, ls->window);
        break;
    case LOSS_SCALE_AUTO: CNT_ASSERT(!"loss_scaler_init refuses auto"); break;
    }
}
