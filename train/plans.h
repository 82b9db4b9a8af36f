/*
 * train/plans.h - the convolution plans a GPU backend chose (cuDNN's
 * algorithms and graph-API engine configurations per shape: model/backend.h's
 * plans_export, a line each as model/plan_line.h), made the same on
 * every rank and kept in the run's out_dir, as conv_plans.txt:
 *
 *   - at start (plans_restore) rank 0 reads the file, every rank takes its
 *     choices, so a resumed or repeated run does not search again (a file
 *     made on another GPU or cuDNN is left alone, with a line saying so);
 *   - after this run's first step (plans_share with to_ranks) rank 0's
 *     choices go to every rank, which runs them from then on (each rank
 *     searched on its own in that step, and two searches may choose
 *     differently), and into the file;
 *   - at each checkpoint (plans_share without) rank 0 rewrites the file
 *     with what was chosen since (the evaluation's shapes).
 *
 * The file is a cache: one that cannot be read or written is a warning,
 * never the end of the run. Backends without plans (the CPU) write nothing
 * and take nothing. Collectives where to_ranks (and in plans_restore):
 * every rank of the group calls them alike.
 */
#ifndef CNT_TRAIN_PLANS_H
#define CNT_TRAIN_PLANS_H

#include "model/backend.h"

#define PLANS_FILE "conv_plans.txt"

void plans_restore(const backend *be, const char *out_dir);
void plans_share(const backend *be, const char *out_dir, int to_ranks);

#endif
