/*
 * dist/buckets.c - how the gradient buffer is cut: where the reducer's
 * buckets end and when each is ready (dist/reducer.h), the servers' shards
 * (ps_plan, dist/ps.h) and PowerSGD's table of tensors (which it
 * compresses, which a bucket completes: dist/powersgd.h). Plain
 * arithmetic, on its own so that the step simulator (train/sim.c,
 * tools/simulate) plans the exchange's own cuts without linking its
 * communication or compute (MPI, NCCL, the backends): tools/simulate
 * starts in milliseconds instead of loading cuDNN and MPI
 * (tests/test_simulate.sh checks that it links neither).
 */
#include "dist/reducer.h"
#include "common/check.h"
#include "dist/powersgd.h"
#include "dist/ps.h"

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

int ps_plan(const size_t *tensor_end, int n_tensors, int servers, size_t *shard_end) {
    if (servers < 1) return cnt_err_set("dist.ps_servers = %d: at least one server", servers);
    if (servers > n_tensors)
        return cnt_err_set("dist.ps_servers = %d exceeds the model's %d parameter tensors: a shard holds whole "
                           "tensors, so at most %d servers can each hold one",
                           servers, n_tensors, n_tensors);
    size_t n = tensor_end[n_tensors - 1];
    int j = 0; /* tensors [0, j) are in earlier shards */
    for (int k = 0; k < servers - 1; k++) {
        double target = (double)n * (k + 1) / servers;
        /* the first shard end at or past the target, or the one before if nearer;
         * every later shard keeps at least one tensor */
        int lo = j + 1, hi = n_tensors - (servers - 1 - k);
        int best = lo;
        for (int e = lo; e <= hi; e++) {
            best = e;
            if ((double)tensor_end[e - 1] >= target) {
                if (e > lo && target - (double)tensor_end[e - 2] < (double)tensor_end[e - 1] - target) best = e - 1;
                break;
            }
        }
        shard_end[k] = tensor_end[best - 1];
        j = best;
    }
    shard_end[servers - 1] = n;
    return CNT_OK;
}

void powersgd_bucket_tensors(const powersgd_tensor *t, int n, size_t begin, size_t end, int *first, int *last) {
    /* the first tensor ending after begin, then every tensor ending by end */
    int i = 0;
    while (i < n && t[i].offset + t[i].count <= begin) i++;
    int j = i;
    while (j < n && t[j].offset + t[j].count <= end) j++;
    *first = i;
    *last = j;
}

int powersgd_compresses(const powersgd_tensor *t, int rank) {
    if (t->rows < 2 || t->count % (size_t)t->rows != 0) return 0;
    size_t cols = t->count / (size_t)t->rows;
    return cols >= 2 && (double)t->count >= POWERSGD_MIN_RATE * rank * ((double)t->rows + (double)cols);
}

int powersgd_summary(const powersgd_tensor *t, int n_tensors, int rank, size_t *values, size_t *wire) {
    int k = 0;
    size_t v = 0, w = 0;
    for (int i = 0; i < n_tensors; i++) {
        if (powersgd_compresses(&t[i], rank)) {
            k++;
            v += t[i].count;
            w += (size_t)rank * ((size_t)t[i].rows + t[i].count / (size_t)t[i].rows);
        } else {
            w += t[i].count;
        }
    }
    if (values) *values = v;
    if (wire) *wire = w;
    return k;
}
