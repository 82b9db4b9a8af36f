/*
 * train/eval.h - evaluation over the whole test set: mean loss, top-1 and
 * top-5.
 *
 * Every rank evaluates its shard of the test set (the evaluation loader
 * visits each sample once) with the stepper's inference forward; the sums are
 * allreduced, so every sample counts once and every rank gets the same
 * result. A sample with a NaN logit or an infinite true-class logit counts as
 * wrong (such logits rank nothing; fp16 activations beyond 65504 end so), and
 * samples with any inf or NaN logit are counted. An evaluation that read no
 * sample at all (every test image unreadable) is an error, never a result.
 */
#ifndef CNT_EVAL_H
#define CNT_EVAL_H

#include "data/loader.h"
#include "train/progress.h"
#include "train/step.h"

/* A collective: every rank calls it with its own evaluation loader. CNT_ERR
 * on every rank, with a message, when no rank could read a single sample.
 * stop (may be NULL) is asked before each batch for a stop signal
 * (train/stop.h); a rank that gets one reads no more, and when any rank
 * did, every rank returns CNT_OK with er->stopped set to the lowest such
 * rank's signal and no scores: an evaluation of a few minutes does not hold
 * up a preempted job. */
int evaluate(stepper *s, loader *ld, int (*stop)(void), eval_result *er);

#endif
