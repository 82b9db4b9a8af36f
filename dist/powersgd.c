/*
 * dist/powersgd.c - PowerSGD gradient compression (dist/powersgd.h): the
 * algorithm's host arithmetic, on the caller's thread (the reducer's
 * communication thread) or a team of it, with the sums over the ranks
 * handed in by the caller.
 *
 * Q is kept transposed, r rows of m values, so that each product is a
 * loop over a contiguous row: P[i][k] is the dot product of M's row i with
 * Q's row k; M^T P and P Q^T add multiples of rows. The loops' order is
 * fixed, so a given input gives the same bits on every rank; a team splits
 * rows (M + e with P, the error, the result) or Q's columns (M^T P), so
 * each value is computed in that same order whatever the number of
 * threads. Four passes over each matrix: M + e and P in one, M^T P, the
 * error, the result.
 */
#include "dist/powersgd.h"
#include "common/check.h"
#include "common/rng.h"
#include "common/rng_hash.h"
#include "common/timer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the arithmetic needs of a tensor beside its place (p->src[i]). */
typedef struct ptensor {
    int rows, cols;
    int compressed;
    size_t q_off; /* compressed: its Q (r x cols) in p->q */
    size_t e_off; /* compressed: its error (count) in p->e */
} ptensor;

struct powersgd {
    int n_t, r;
    int threads; /* of the arithmetic (powersgd_set_threads) */
    ptensor *t;
    powersgd_tensor *src; /* the table as given: each tensor's offset and count */
    size_t n;
    size_t n_q, n_e;
    float *q;    /* every compressed tensor's Q, transposed (r x cols), the last sum's */
    float *e;    /* every compressed tensor's error, this rank's */
    float *a;    /* the first sum: P of each compressed tensor (rows x r), the others' values */
    float *b;    /* the second sum: this rank's Q of each compressed tensor (r x cols) */
    rng g;       /* Q's random values: the same draws on every rank */
    /* powersgd_create_on: q, e, a, b are device memory of be, and the
     * arithmetic is be's ops; NULL: host memory and the loops below */
    const backend *be;
    uint64_t seed;  /* the device's redraws: keyed by it, reduce_calls and the tensor */
    uint64_t reduce_calls;
};

powersgd *powersgd_create(const powersgd_tensor *tensors, int n_tensors, size_t n, int rank, uint64_t seed) {
    return powersgd_create_on(NULL, tensors, n_tensors, n, rank, seed);
}

powersgd *powersgd_create_on(const backend *be, const powersgd_tensor *tensors, int n_tensors, size_t n, int rank,
                             uint64_t seed) {
    CNT_ASSERT(n_tensors > 0 && rank >= 1);
    CNT_ASSERT(!be || (be->gemm && be->axpy && be->lowrank_orthonormalise && be->lowrank_redraw));
    powersgd *p = cnt_calloc(1, sizeof *p);
    p->be = be;
    p->seed = seed;
    p->n_t = n_tensors;
    p->r = rank;
    p->threads = 1;
    p->n = n;
    p->t = cnt_calloc((size_t)n_tensors, sizeof *p->t);
    p->src = cnt_malloc((size_t)n_tensors * sizeof *p->src);
    memcpy(p->src, tensors, (size_t)n_tensors * sizeof *p->src);
    size_t next = 0, q_len = 0, e_len = 0, a_len = 0;
    for (int i = 0; i < n_tensors; i++) {
        const powersgd_tensor *s = &tensors[i];
        ptensor *t = &p->t[i];
        CNT_ASSERT(s->offset == next && s->count > 0);
        next += s->count;
        t->compressed = powersgd_compresses(s, rank);
        t->rows = t->compressed ? s->rows : 1;
        t->cols = (int)(s->count / (size_t)t->rows);
        if (t->compressed) {
            t->q_off = q_len;
            t->e_off = e_len;
            q_len += (size_t)rank * (size_t)t->cols;
            e_len += s->count;
            a_len += (size_t)t->rows * (size_t)rank;
        } else {
            a_len += s->count;
        }
    }
    CNT_ASSERT(next == n);
    p->n_q = q_len;
    p->n_e = e_len;
    size_t sz_q = (q_len ? q_len : 1) * sizeof(float), sz_e = (e_len ? e_len : 1) * sizeof(float);
    size_t sz_a = (a_len ? a_len : 1) * sizeof(float);
    float *q = cnt_malloc(sz_q); /* drawn on the host either way: the same Q on every kind of rank */
    rng_seed(&p->g, seed, 0x5053474455ull); /* "PSGDU": a stream of its own */
    for (size_t i = 0; i < q_len; i++) q[i] = rng_normal(&p->g);
    if (be) { /* be->alloc zero-fills: the error starts at 0 */
        p->q = be->alloc(sz_q);
        be->upload(p->q, q, sz_q);
        free(q);
        p->e = be->alloc(sz_e);
        p->a = be->alloc(sz_a);
        p->b = be->alloc(sz_q);
    } else {
        p->q = q;
        p->e = cnt_calloc(1, sz_e);
        p->a = cnt_malloc(sz_a);
        p->b = cnt_malloc(sz_q);
    }
    return p;
}

void powersgd_free(powersgd *p) {
    if (!p) return;
    void (*release)(void *) = p->be ? p->be->free : free;
    release(p->q);
    release(p->e);
    release(p->a);
    release(p->b);
    free(p->t);
    free(p->src);
    free(p);
}

void powersgd_region(const powersgd *p, size_t begin, size_t end, size_t *lo, size_t *hi) {
    CNT_ASSERT(begin <= end && end <= p->n);
    int i, j;
    powersgd_bucket_tensors(p->src, p->n_t, begin, end, &i, &j);
    if (j == i) {
        *lo = *hi = end;
        return;
    }
    *lo = p->src[i].offset;
    *hi = p->src[j - 1].offset + p->src[j - 1].count;
}

static float dot(const float *x, const float *y, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < n; j++) s += x[j] * y[j];
    return s;
}

static void axpy(float a, const float *x, float *y, int n) {
#pragma omp simd
    for (int j = 0; j < n; j++) y[j] += a * x[j];
}

/* Below this many values a tensor's passes run on the calling thread alone:
 * a team's start costs more than they take. */
#define PAR_MIN_VALUES 65536

/* Whether a tensor of `count` values is worth a team of p->threads. */
static int par(const powersgd *p, size_t count) { return p->threads > 1 && count >= PAR_MIN_VALUES; }

/* The first sum's pass over one compressed tensor, row by row: M += e, then
 * P[i][k] = M's row i . Qt's row k (while the row is in cache). */
static void add_error_project(const powersgd *p, float *M, const float *e, const float *Qt, int rows, int cols,
                              float *P) {
    const int r = p->r;
#pragma omp parallel for schedule(static) num_threads(p->threads) if (par(p, (size_t)rows * cols))
    for (int i = 0; i < rows; i++) {
        float *row = M + (size_t)i * cols;
        const float *er = e + (size_t)i * cols;
#pragma omp simd
        for (int j = 0; j < cols; j++) row[j] += er[j];
        for (int k = 0; k < r; k++) P[(size_t)i * r + k] = dot(row, Qt + (size_t)k * cols, cols);
    }
}

/* Qt (r x cols) = (M^T P)^T: M rows x cols, P rows x r. The threads split
 * the columns, so each value adds the rows in the same order whatever their
 * number. */
static void mt_p(const powersgd *p, const float *M, const float *P, int rows, int cols, float *Qt) {
    const int r = p->r;
    int teams = par(p, (size_t)rows * cols) ? p->threads : 1;
#pragma omp parallel for schedule(static) num_threads(teams) if (teams > 1)
    for (int part = 0; part < teams; part++) {
        /* columns [c0, c1): multiples of 16 floats (a cache line) but the last */
        int per = ((cols + teams - 1) / teams + 15) / 16 * 16;
        int c0 = part * per, c1 = c0 + per < cols ? c0 + per : cols;
        if (c0 >= c1) continue;
        for (int k = 0; k < r; k++) memset(Qt + (size_t)k * cols + c0, 0, (size_t)(c1 - c0) * sizeof(float));
        for (int i = 0; i < rows; i++)
            for (int k = 0; k < r; k++)
                axpy(P[(size_t)i * r + k], M + (size_t)i * cols + c0, Qt + (size_t)k * cols + c0, c1 - c0);
    }
}

/* out = base - sign * P Qt^T, row by row (base may be out; NULL: 0). */
static void p_qt(const powersgd *p, const float *P, const float *Qt, int rows, int cols, const float *base,
                 float sign, float *out) {
    const int r = p->r;
#pragma omp parallel for schedule(static) num_threads(p->threads) if (par(p, (size_t)rows * cols))
    for (int i = 0; i < rows; i++) {
        float *o = out + (size_t)i * cols;
        if (base) {
            if (base + (size_t)i * cols != o) memcpy(o, base + (size_t)i * cols, (size_t)cols * sizeof(float));
        } else {
            memset(o, 0, (size_t)cols * sizeof(float));
        }
        for (int k = 0; k < r; k++) axpy(sign * P[(size_t)i * r + k], Qt + (size_t)k * cols, o, cols);
    }
}

/* The values [n) from src to dst: host memory, or p->be's. */
static void copy_values(const powersgd *p, float *dst, const float *src, size_t n) {
    if (p->be) p->be->copy(dst, src, n * sizeof(float));
    else memcpy(dst, src, n * sizeof(float));
}

/* A compressed tensor's arithmetic before the first sum: M += e, then P = M Q
 * (Qt = Q transposed, r x cols). On p->be's device: GEMMs in fp32 (no TF32)
 * and ops queued in order on the backend; on the host: the loops above. */
static void phase_project(const powersgd *p, const ptensor *t, float *M, float *P) {
    const float *e = p->e + t->e_off, *Qt = p->q + t->q_off;
    if (!p->be) {
        add_error_project(p, M, e, Qt, t->rows, t->cols, P);
        return;
    }
    const backend_ctx fp32 = {0};
    p->be->axpy((size_t)t->rows * t->cols, 1.0f, e, M, 1);
    p->be->gemm(&fp32, 0, 1, t->rows, p->r, t->cols, 1.0f, M, t->cols, Qt, t->cols, 0.0f, P, p->r, 0);
}

/* Between the sums: P (summed) orthonormal, this rank's Qt = P^T M, its
 * error e = M - P Qt. */
static void phase_error(const powersgd *p, const ptensor *t, const float *M, float *P, float *Qt) {
    float *e = p->e + t->e_off;
    if (!p->be) { /* host memory: the CPU backend's Gram-Schmidt */
        backend_cpu()->lowrank_orthonormalise(t->rows, p->r, P);
        mt_p(p, M, P, t->rows, t->cols, Qt);
        p_qt(p, P, Qt, t->rows, t->cols, M, -1.0f, e);
        return;
    }
    const backend_ctx fp32 = {0};
    const backend *be = p->be;
    be->lowrank_orthonormalise(t->rows, p->r, P);
    be->gemm(&fp32, 1, 0, p->r, t->cols, t->rows, 1.0f, P, p->r, M, t->cols, 0.0f, Qt, t->cols, 0);
    be->copy(e, M, (size_t)t->rows * t->cols * sizeof(float));
    be->gemm(&fp32, 0, 0, t->rows, t->cols, p->r, -1.0f, P, p->r, Qt, t->cols, 1.0f, e, t->cols, 0);
}

/* After the second sum: M = P Qs (Qs the summed Qt), Qs kept as the next
 * step's Q, a column of it that summed to zero (a gradient of zeros), which
 * would stay zero for ever as a warm start, drawn again, the same on every
 * rank: on the host from p->g, on the device keyed by (seed, call, tensor
 * i). */
static void phase_result(powersgd *p, const ptensor *t, int i, uint64_t call, float *M, const float *P,
                         const float *Qs) {
    float *Qt = p->q + t->q_off;
    if (p->be) {
        const backend_ctx fp32 = {0};
        p->be->gemm(&fp32, 0, 0, t->rows, t->cols, p->r, 1.0f, P, p->r, Qs, t->cols, 0.0f, M, t->cols, 0);
        p->be->copy(Qt, Qs, (size_t)p->r * t->cols * sizeof(float));
        uint64_t key = rng_hash_dropout_seed(rng_hash_dropout_seed(p->seed, call), (uint64_t)i);
        p->be->lowrank_redraw(p->r, t->cols, Qt, key);
        return;
    }
    p_qt(p, P, Qs, t->rows, t->cols, NULL, 1.0f, M);
    memcpy(Qt, Qs, (size_t)p->r * t->cols * sizeof(float));
    for (int k = 0; k < p->r; k++) {
        float *col = Qt + (size_t)k * t->cols;
        int zero = 1;
        for (int j = 0; j < t->cols && zero; j++) zero = col[j] == 0.0f;
        if (zero)
            for (int j = 0; j < t->cols; j++) col[j] = rng_normal(&p->g);
    }
}

void powersgd_set_threads(powersgd *p, int threads) {
    CNT_ASSERT(threads >= 1);
    p->threads = threads;
}

void powersgd_reduce(powersgd *p, float *grads, size_t lo, size_t hi, powersgd_sum_fn sum, void *ctx) {
    int t0, t1; /* a region: the tensors that end in it are those inside it */
    powersgd_bucket_tensors(p->src, p->n_t, lo, hi, &t0, &t1);
    CNT_ASSERT(lo == hi ||
               (t0 < t1 && p->src[t0].offset == lo && p->src[t1 - 1].offset + p->src[t1 - 1].count == hi));
    if (t0 == t1) return;
    const int r = p->r;
    uint64_t call = p->reduce_calls++;
    /* The first sum: P = (M + e) Q of each compressed tensor, the others whole. */
    size_t na = 0;
    int any = 0;
    for (int i = t0; i < t1; i++) {
        const ptensor *t = &p->t[i];
        float *M = grads + p->src[i].offset;
        if (!t->compressed) {
            copy_values(p, p->a + na, M, p->src[i].count);
            na += p->src[i].count;
            continue;
        }
        any = 1;
        phase_project(p, t, M, p->a + na);
        na += (size_t)t->rows * r;
    }
    sum(p->a, na, ctx);
    /* P orthonormal; this rank's Q = M^T P and its error; the others' sums back. */
    size_t ia = 0, nb = 0;
    for (int i = t0; i < t1; i++) {
        const ptensor *t = &p->t[i];
        float *M = grads + p->src[i].offset;
        if (!t->compressed) {
            copy_values(p, M, p->a + ia, p->src[i].count);
            ia += p->src[i].count;
            continue;
        }
        phase_error(p, t, M, p->a + ia, p->b + nb);
        ia += (size_t)t->rows * r;
        nb += (size_t)r * t->cols;
    }
    if (!any) return;
    sum(p->b, nb, ctx);
    /* The sum's approximation P Q_sum^T; Q_sum kept for the next step. */
    ia = 0;
    nb = 0;
    for (int i = t0; i < t1; i++) {
        const ptensor *t = &p->t[i];
        if (!t->compressed) {
            ia += p->src[i].count;
            continue;
        }
        phase_result(p, t, i, call, grads + p->src[i].offset, p->a + ia, p->b + nb);
        ia += (size_t)t->rows * r;
        nb += (size_t)r * t->cols;
    }
}

static int by_offset(const void *a, const void *b) {
    size_t x = ((const powersgd_tensor *)a)->offset, y = ((const powersgd_tensor *)b)->offset;
    return x < y ? -1 : x > y;
}

powersgd_tensor *powersgd_net_tensors(const net *nt) {
    int k = nt->n_param_tensors;
    powersgd_tensor *t = cnt_calloc((size_t)(k ? k : 1), sizeof *t);
    for (int i = 0; i < k; i++) {
        const param_info *pi = &nt->param_info[i];
        t[i] = (powersgd_tensor){.offset = pi->offset, .count = pi->count, .rows = pi->ndim >= 2 ? pi->shape[0] : 1};
    }
    qsort(t, (size_t)k, sizeof *t, by_offset);
    return t;
}

/* One rank's sum: nothing to add (the timing is the arithmetic's alone). */
static void sum_none(float *buf, size_t n, void *ctx) {
    (void)buf;
    (void)n;
    (void)ctx;
}

/* powersgd_reduce over tensors t[0, k) (their offsets made contiguous from
 * 0) on `threads` threads: the fastest of `reps` calls after an untimed one
 * (the pages' first touch), in seconds. */
static double time_group(const powersgd_tensor *t, int k, int rank, int threads, int reps) {
    powersgd_tensor *s = cnt_malloc((size_t)k * sizeof *s);
    size_t n = 0;
    for (int i = 0; i < k; i++) {
        s[i] = t[i];
        s[i].offset = n;
        n += t[i].count;
    }
    float *g = cnt_malloc(n * sizeof *g);
    /* values in [-1, 1) from a multiplicative hash: no column of Q sums to zero */
    for (size_t i = 0; i < n; i++) g[i] = (float)((uint32_t)(i * 2654435761u) >> 8) * 0x1p-23f - 1.0f;
    powersgd *p = powersgd_create(s, k, n, rank, 1);
    powersgd_set_threads(p, threads);
    powersgd_reduce(p, g, 0, n, sum_none, NULL);
    double best = 0;
    for (int i = 0; i < reps; i++) {
        double t0 = time_now();
        powersgd_reduce(p, g, 0, n, sum_none, NULL);
        double dt = time_now() - t0;
        if (i == 0 || dt < best) best = dt;
    }
    powersgd_free(p);
    free(g);
    free(s);
    return best;
}

double powersgd_time_ns(const powersgd_tensor *t, int n_tensors, int rank, int threads, size_t budget, int reps) {
    CNT_ASSERT(threads >= 1 && reps >= 1 && budget > 0);
    powersgd_tensor *group = cnt_malloc((size_t)(n_tensors > 0 ? n_tensors : 1) * sizeof *group);
    int k = 0;
    size_t in_group = 0, total = 0;
    double seconds = 0;
    for (int i = 0; i < n_tensors; i++) {
        if (!powersgd_compresses(&t[i], rank)) continue;
        total += t[i].count;
        if (k > 0 && in_group + t[i].count > budget) { /* the group so far, timed */
            seconds += time_group(group, k, rank, threads, reps);
            k = 0;
            in_group = 0;
        }
        if (t[i].count <= budget) {
            group[k++] = t[i];
            in_group += t[i].count;
            continue;
        }
        /* larger than a group: fewer rows of the same width (the same passes, beyond the caches either way),
         * at least as many as still compress, its time scaled up to the whole */
        powersgd_tensor cut = t[i];
        size_t cols = t[i].count / (size_t)t[i].rows;
        cut.rows = (int)(budget / cols > 2 ? budget / cols : 2);
        for (;; cut.rows++) { /* t[i] itself compresses: ends by rows == t[i].rows */
            cut.count = (size_t)cut.rows * cols;
            if (powersgd_compresses(&cut, rank)) break;
        }
        seconds += time_group(&cut, 1, rank, threads, reps) * (double)t[i].count / (double)cut.count;
    }
    if (k > 0) seconds += time_group(group, k, rank, threads, reps);
    free(group);
    return total ? seconds * 1e9 / (double)total : 0;
}

void powersgd_state_size(const powersgd *p, int *rank, size_t *n_q, size_t *n_e) {
    *rank = p->r;
    *n_q = p->n_q;
    *n_e = p->n_e;
}

void powersgd_state_get(const powersgd *p, float *q, float *e, uint64_t draws[2]) {
    if (p->be) { /* download waits for the ops queued before it */
        p->be->download(q, p->q, p->n_q * sizeof(float));
        p->be->download(e, p->e, p->n_e * sizeof(float));
    } else {
        memcpy(q, p->q, p->n_q * sizeof(float));
        memcpy(e, p->e, p->n_e * sizeof(float));
    }
    draws[0] = p->g.state;
    draws[1] = p->g.inc;
}

void powersgd_state_set(powersgd *p, const float *q, const float *e, const uint64_t draws[2]) {
    if (p->be) {
        p->be->upload(p->q, q, p->n_q * sizeof(float));
        if (e) p->be->upload(p->e, e, p->n_e * sizeof(float));
        else p->be->zero(p->e, p->n_e * sizeof(float));
    } else {
        memcpy(p->q, q, p->n_q * sizeof(float));
        if (e) memcpy(p->e, e, p->n_e * sizeof(float));
        else memset(p->e, 0, p->n_e * sizeof(float));
    }
    p->g.state = draws[0];
    p->g.inc = draws[1];
}
