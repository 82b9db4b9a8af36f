/*
 * train/eval.c - evaluation over the whole test set (see train/eval.h).
 */
#include "train/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "dist/dist.h"

/* How many logits of row (K classes) beat the true class's: 0 is a top-1
 * hit, < 5 a top-5 hit. Ties count against; NaN compares false with
 * everything, so a row with one (or an infinite true-class logit) ranks
 * nothing: K. *nonfinite is set when any logit is inf or NaN. */
static int true_class_rank(const float *row, int K, int label, int *nonfinite) {
    int better = 0, bad = !isfinite(row[label]), inf_or_nan = bad;
    for (int k = 0; k < K; k++) {
        bad |= row[k] != row[k];
        inf_or_nan |= !isfinite(row[k]);
        if (k != label && (row[k] > row[label] || (row[k] == row[label] && k < label))) better++;
    }
    *nonfinite = inf_or_nan;
    return bad ? K : better;
}

int evaluate(stepper *s, loader *ld, int (*stop)(void), eval_result *er) {
    const backend *be = s->nt->be;
    int K = s->nt->classes;
    int topk = K < 5 ? K : 5;
    float *logits = cnt_malloc((size_t)s->nt->max_batch * K * sizeof(float));
    double loss_sum = 0;
    long n_total = 0, hit1 = 0, hit5 = 0, nonfinite = 0;
    int signal = 0;
    dist_phase("evaluation");
    loader_start_epoch(ld, 0);
    const batch *b;
    while (!(signal = stop ? stop() : 0) && (b = loader_next(ld)) != NULL) {
        if (b->n == 0) continue; /* every image of the batch was unreadable */
        const float *logits_dev = stepper_eval(s, b);
        float loss;
        be->download(&loss, s->loss, sizeof loss);
        be->download(logits, logits_dev, (size_t)b->n * K * sizeof(float));
        loss_sum += (double)loss * b->n;
        for (int i = 0; i < b->n; i++) {
            int bad;
            int rank = true_class_rank(logits + (size_t)i * K, K, b->labels[i], &bad);
            nonfinite += bad;
            hit1 += rank < 1;
            hit5 += rank < topk;
        }
        n_total += b->n;
    }
    free(logits);
    /* Every rank evaluated its own shard; every sample counts once in the
     * sums. A rank a stop signal stopped has not: no scores. */
    double sums[5] = {loss_sum, (double)n_total, (double)hit1, (double)hit5, (double)nonfinite};
    dist_allreduce_sum_f64(sums, 5);
    memset(er, 0, sizeof *er);
    if (stop) {
        dist_phase("evaluation: stop-signal check");
        if ((er->stopped = (int)dist_first_nonzero(signal)) != 0) return CNT_OK;
    }
    er->nonfinite = (long)sums[4];
    er->images = (long)sums[1];
    er->loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
    er->top1 = sums[1] > 0 ? sums[2] / sums[1] : 0;
    er->top5 = sums[1] > 0 ? sums[3] / sums[1] : 0;
    if (sums[1] == 0)
        return cnt_err_set("the evaluation read no test image: every one was unreadable (each named above); a "
                           "test loss and accuracy of nothing would be no result");
    return CNT_OK;
}
