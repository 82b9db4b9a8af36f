/*
 * tests/support/testutil.c - the shared comparison helper, random fills,
 * conversions, backend transfers and the finite-difference gradient checker.
 *
 * Every comparison in the project's tests goes through compare() below, so a
 * failure always reads the same way: label, count, first bad index with both
 * values, largest errors.
 */
#include "tests/support/testutil.h"
#include <unistd.h>
#include <sys/stat.h>
#include <dirent.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/check.h"
#include "model/net.h"

const backend_ctx tu_fp32;

/* ---------------------------------------------------------------- comparison */

/* Compares expected[i] with actual(i) for i < n, where actual comes either from
 * a double array or a float array. `index` (may be NULL) maps position i to the
 * index reported to the reader (the gradient checker compares a subset). */
static int compare(const char *what, const double *expected, const double *actual_d, const float *actual_f,
                   const size_t *index, size_t n, double rtol, double atol, int verbose) {
    size_t bad = 0, first = 0, max_abs_i = 0, max_rel_i = 0;
    double max_abs = 0.0, max_rel = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = expected[i];
        double a = actual_d ? actual_d[i] : (double)actual_f[i];
        double err = fabs(a - e);
        int ok = isfinite(e) && isfinite(a) && err <= atol + rtol * fabs(e);
        if (!ok) {
            if (bad == 0) first = i;
            bad++;
        }
        /* a non-finite error dominates every finite one */
        if (!isfinite(err) && isfinite(max_abs)) {
            max_abs = INFINITY;
            max_abs_i = i;
        } else if (err > max_abs) {
            max_abs = err;
            max_abs_i = i;
        }
        double rel = e != 0.0 ? err / fabs(e) : (err != 0.0 ? INFINITY : 0.0);
        if (rel > max_rel) {
            max_rel = rel;
            max_rel_i = i;
        }
    }
    if (bad == 0) return CNT_OK;
    if (verbose) {
#define AT(i) ((unsigned long long)(index ? index[i] : (i)))
#define ACT(i) (actual_d ? actual_d[i] : (double)actual_f[i])
        print_error("%s: %zu of %zu values differ (rtol %.1e, atol %.1e)\n", what, bad, n, rtol, atol);
        print_error("  first at [%llu]: expected %.10e, actual %.10e (abs err %.3e, allowed %.3e)\n", AT(first),
                    expected[first], ACT(first), fabs(ACT(first) - expected[first]),
                    atol + rtol * fabs(expected[first]));
        print_error("  max abs err %.3e at [%llu] (expected %.10e, actual %.10e)\n", max_abs, AT(max_abs_i),
                    expected[max_abs_i], ACT(max_abs_i));
        print_error("  max rel err %.3e at [%llu] (expected %.10e, actual %.10e)\n", max_rel, AT(max_rel_i),
                    expected[max_rel_i], ACT(max_rel_i));
#undef AT
#undef ACT
    }
    return CNT_ERR;
}

int tu_check_close(const char *what, const double *expected, const double *actual, size_t n, double rtol,
                   double atol, int verbose) {
    return compare(what, expected, actual, NULL, NULL, n, rtol, atol, verbose);
}

void tu_assert_close_at(const char *file, int line, const char *what, const double *expected, const double *actual,
                        size_t n, double rtol, double atol) {
    if (compare(what, expected, actual, NULL, NULL, n, rtol, atol, 1) != CNT_OK) _fail(file, line);
}

void tu_assert_close_f_at(const char *file, int line, const char *what, const double *expected,
                          const float *actual, size_t n, double rtol, double atol) {
    if (compare(what, expected, NULL, actual, NULL, n, rtol, atol, 1) != CNT_OK) _fail(file, line);
}

void tu_assert_bitwise_equal_f_at(const char *file, int line, const char *what, const float *a, const float *b,
                                  size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (bad == 0) first = i;
            bad++;
        }
    if (bad == 0) return;
    print_error("%s: %zu of %zu values not bitwise equal; first at [%zu]: %.9e vs %.9e\n", what, bad, n, first,
                (double)a[first], (double)b[first]);
    _fail(file, line);
}

double tu_atol_f32(size_t reduction_len, double scale) {
    return 1e-5 * scale * sqrt((double)(reduction_len > 0 ? reduction_len : 1));
}

/* ---------------------------------------------------------------- data */

double *tu_alloc(size_t n) { return cnt_calloc(n > 0 ? n : 1, sizeof(double)); }

float *tu_alloc_f(size_t n) { return cnt_calloc(n > 0 ? n : 1, sizeof(float)); }

void tu_fill_uniform(rng *r, double *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (double)(float)(lo + (hi - lo) * (double)rng_uniform(r));
}

void tu_fill_normal(rng *r, double *x, size_t n, double mean, double std) {
    for (size_t i = 0; i < n; i++) x[i] = (double)(float)(mean + std * (double)rng_normal(r));
}

void tu_fill_distinct(rng *r, double *x, size_t n, double lo, double hi) {
    CNT_ASSERT(n <= (size_t)INT32_MAX);
    int *perm = cnt_malloc((n > 0 ? n : 1) * sizeof(int));
    rng_permutation(r, perm, (int)n);
    for (size_t i = 0; i < n; i++) x[i] = (double)(float)(lo + (hi - lo) * (double)perm[i] / (double)n);
    free(perm);
}

void tu_fill_labels(rng *r, int *labels, size_t n, int K) {
    CNT_ASSERT(K > 0);
    for (size_t i = 0; i < n; i++) labels[i] = (int)rng_below(r, (uint32_t)K);
}

void tu_to_float(const double *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

void tu_to_double(const float *src, double *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (double)src[i];
}

double tu_dot(const double *a, const double *b, size_t n) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

double tu_rel_l2_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* ---------------------------------------------------------------- backend transfers */

float *tu_dev_from_double(const backend *be, const double *host, size_t n) {
    float *tmp = tu_alloc_f(n);
    tu_to_float(host, tmp, n);
    float *dev = be->alloc((n > 0 ? n : 1) * sizeof(float));
    be->upload(dev, tmp, n * sizeof(float));
    free(tmp);
    return dev;
}

void tu_dev_to_double(const backend *be, const float *dev, double *host, size_t n) {
    float *tmp = tu_alloc_f(n);
    be->download(tmp, dev, n * sizeof(float));
    tu_to_double(tmp, host, n);
    free(tmp);
}

/* ---------------------------------------------------------------- gradient check */

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

int tu_gradcheck_check(const char *what, tu_scalar_fn f, void *ctx, double *x, size_t n, const double *grad,
                       size_t max_points, double rtol, double atol, int verbose) {
    CNT_ASSERT(n > 0 && max_points >= 2);
    /* which indices: all, or 0, n-1 and a random subset (partial Fisher-Yates) */
    size_t m = n <= max_points ? n : max_points;
    size_t *idx = cnt_malloc(n * sizeof(size_t));
    for (size_t i = 0; i < n; i++) idx[i] = i;
    if (m < n) {
        rng r;
        rng_seed(&r, 0x6772616463686bULL, n);
        idx[1] = n - 1;
        idx[n - 1] = 1;
        for (size_t i = 2; i < m; i++) {
            size_t j = i + (size_t)rng_below(&r, (uint32_t)(n - i));
            size_t t = idx[i];
            idx[i] = idx[j];
            idx[j] = t;
        }
        qsort(idx, m, sizeof(size_t), cmp_size);
    }
    double *numeric = tu_alloc(m), *analytic = tu_alloc(m);
    for (size_t k = 0; k < m; k++) {
        size_t i = idx[k];
        double saved = x[i];
        double hi = saved + TU_GRADCHECK_EPS, lo = saved - TU_GRADCHECK_EPS;
        x[i] = hi;
        double fp = f(ctx);
        x[i] = lo;
        double fm = f(ctx);
        x[i] = saved;
        /* divide by the step actually taken, which rounding makes slightly different from 2 eps */
        numeric[k] = (fp - fm) / (hi - lo);
        analytic[k] = grad[i];
    }
    /* the finite difference is what the analytic gradient must match */
    char label[512];
    snprintf(label, sizeof label, "%s (expected: finite difference, actual: analytic gradient)", what);
    int rc = compare(label, numeric, analytic, NULL, idx, m, rtol, atol, verbose);
    free(numeric);
    free(analytic);
    free(idx);
    return rc;
}

void tu_gradcheck_at(const char *file, int line, const char *what, tu_scalar_fn f, void *ctx, double *x, size_t n,
                     const double *grad, size_t max_points, double rtol, double atol) {
    if (tu_gradcheck_check(what, f, ctx, x, n, grad, max_points, rtol, atol, 1) != CNT_OK) _fail(file, line);
}

void tu_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        unlink(dir);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            chmod(p, 0700);
            tu_remove_tree(p);
        } else {
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

const int tu_channel_copy_cases[][7] = {
    {2, 3, 25, 3, 0, 8, 0},    /* first concat input */
    {2, 5, 25, 5, 0, 8, 3},    /* second concat input */
    {3, 2, 7, 6, 4, 4, 1},     /* slice of a larger source (concat backward) */
    {1, 64, 49, 64, 0, 96, 32},
    {4, 1, 1, 5, 2, 3, 2},     /* HW = 1 */
    {2, 4, 9, 4, 0, 4, 0},     /* whole tensor */
    {8, 16, 64, 16, 0, 32, 8}, /* option-A shortcut padding: 16 channels into the middle of 32 */
    {3, 7, 35, 11, 3, 13, 5},  /* odd everything */
};
const size_t tu_n_channel_copy_cases = sizeof tu_channel_copy_cases / sizeof tu_channel_copy_cases[0];

pool_params tu_pool_params(const tu_pool_case *c) {
    pool_params p = {.mode = c->mode, .N = c->N, .C = c->C, .H = c->H, .W = c->W, .R = c->R, .S = c->S,
                     .stride_h = c->sh, .stride_w = c->sw, .pad_h = c->ph, .pad_w = c->pw,
                     .ceil_mode = c->ceil_mode, .P = c->P, .Q = c->Q};
    assert_int_equal(pool_params_init(&p), CNT_OK);
    return p;
}

static void grads_hook(void *ctx, const node *nd, int backward, double t0, double t1) {
    (void)t0;
    (void)t1;
    tu_grads *g = ctx;
    net *nt = g->nt;
    size_t bytes = (size_t)nt->batch * nd->C * nd->H * nd->W * sizeof(float);
    /* a node inside a fused group has no y or dy of its own: its copy stays zero */
    if (backward && nd->dy) nt->be->copy(g->dy[nd - nt->nodes], nd->dy, bytes);
    else if (!backward && nd->y) nt->be->copy(g->y[nd - nt->nodes], nd->y, bytes);
}

void tu_grads_capture(net *nt, tu_grads *g) {
    g->nt = nt;
    g->y = cnt_calloc((size_t)nt->n_nodes, sizeof *g->y);
    g->dy = cnt_calloc((size_t)nt->n_nodes, sizeof *g->dy);
    for (int i = 0; i < nt->n_nodes; i++) {
        const node *nd = &nt->nodes[i];
        size_t bytes = (size_t)nt->max_batch * nd->C * nd->H * nd->W * sizeof(float);
        g->y[i] = nt->be->alloc(bytes);
        g->dy[i] = nt->be->alloc(bytes);
    }
    net_set_node_hook(nt, grads_hook, g);
}

void tu_grads_free(tu_grads *g) {
    if (!g->nt) return;
    for (int i = 0; i < g->nt->n_nodes; i++) {
        g->nt->be->free(g->y[i]);
        g->nt->be->free(g->dy[i]);
    }
    free(g->y);
    free(g->dy);
    net_set_node_hook(g->nt, NULL, NULL);
    g->nt = NULL;
}

const char *tu_path_in(const char *root, const char *fmt, ...) {
    static char buf[1024];
    char rel[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(buf, sizeof buf, "%s/%s", root, rel);
    for (char *p = buf + strlen(root) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0777);
            *p = '/';
        }
    }
    return buf;
}

void tu_assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) {
        print_error("expected \"%s\" in: %s\n", needle, haystack);
        fail();
    }
}
