/*
 * dist/buckets.c - where the reducer's buckets end and when each is ready
 * (declared in dist/reducer.h): plain arithmetic, on its own so that the
 * step simulator (train/sim.c) plans the reducer's own buckets
 * without linking the reducer's communication (MPI, NCCL).
 */
#include "dist/reducer.h"
#include "common/check.h"

int reducer_bucket_layout(size_t n, size_t first_bucket, size_t bucket_size, size_t *ends, int max) {
    CNT_ASSERT(n > 0 && first_bucket > 0 && bucket_size > 0);
    int count = 0;
    for (size_t off = 0; off < n; count++) {
        size_t len = count == 0 ? first_bucket : bucket_size;
        if (len > n - off) len = n - off;
        off += len;
        if (ends && count < max) ends[count] = off;
    }
    return count;
}

void reducer_bucket_ready_after(const size_t *ends, int nb, const size_t *slice_end, int n_slices, int *ready_after) {
    size_t ready = 0; /* what reducer_grads_ready calls ready_upto */
    int b = 0;
    for (int k = 0; k < n_slices; k++) {
        if (slice_end[k] > ready) ready = slice_end[k];
        for (; b < nb && ends[b] <= ready; b++) ready_after[b] = k;
    }
    for (; b < nb; b++) ready_after[b] = -1;
}
