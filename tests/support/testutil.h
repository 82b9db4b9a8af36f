/*
 * tests/support/testutil.h - what every cmocka test of the project shares.
 *
 * Provides:
 *   - THE comparison helper: tu_assert_close() (double vs double) and
 *     tu_assert_close_f() (double expected vs float actual). Element i passes
 *     when |actual - expected| <= atol + rtol * |expected|; a NaN or infinity
 *     on either side never passes. On failure it prints the label, how many
 *     values differ, the first differing index with both values, and the
 *     largest absolute and relative errors with their indices, then fails the
 *     current cmocka test at the caller's file:line. tu_check_close() is the
 *     same comparison returning a status instead of failing, for tests that
 *     expect a mismatch. tu_assert_bitwise_equal_f() for determinism tests.
 *   - Random fills driven by common/rng.h. Every value they produce is exactly
 *     representable in float, so the float copy a backend receives holds the
 *     same numbers as the double copy the reference sees.
 *   - float <-> double conversion, and backend transfers that convert on the way
 *     (tu_dev_from_double / tu_dev_to_double).
 *   - A central finite-difference gradient checker: tu_gradcheck().
 *   - Each node's output gradient as its backward ends (tu_grads_capture):
 *     a net's gradients share memory by lifetime, so nd->dy is only valid
 *     during net_backward.
 *
 * Errors: allocation failure is fatal (cnt_malloc); comparison failures fail the
 * running cmocka test (these helpers must be called from inside a cmocka test).
 */
#ifndef CNT_TEST_TESTUTIL_H
#define CNT_TEST_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "model/backend.h"

/* ---------------------------------------------------------------- comparison */

/* Returns CNT_OK when every element is close, else prints the report described
 * above (when verbose) and returns CNT_ERR. Never fails the test itself. */
int tu_check_close(const char *what, const double *expected, const double *actual, size_t n, double rtol,
                   double atol, int verbose);

/* Fails the running cmocka test (reported at file:line) unless all n values are close. */
void tu_assert_close_at(const char *file, int line, const char *what, const double *expected, const double *actual,
                        size_t n, double rtol, double atol);
/* The default context (NCHW, fp32 math and activations) for the ops that
 * take one. */
extern const backend_ctx tu_fp32;

/* The same, with a float `actual` (a backend's output, compared in double). */
void tu_assert_close_f_at(const char *file, int line, const char *what, const double *expected,
                          const float *actual, size_t n, double rtol, double atol);
/* Fails the running test unless a and b hold the same n floats bit for bit. */
void tu_assert_bitwise_equal_f_at(const char *file, int line, const char *what, const float *a, const float *b,
                                  size_t n);

#define tu_assert_close(what, expected, actual, n, rtol, atol) \
    tu_assert_close_at(__FILE__, __LINE__, (what), (expected), (actual), (n), (rtol), (atol))
#define tu_assert_close_f(what, expected, actual, n, rtol, atol) \
    tu_assert_close_f_at(__FILE__, __LINE__, (what), (expected), (actual), (n), (rtol), (atol))
#define tu_assert_bitwise_equal_f(what, a, b, n) tu_assert_bitwise_equal_f_at(__FILE__, __LINE__, (what), (a), (b), (n))

/* Absolute tolerance for a float32 result against the double reference when
 * each output value is a sum of `reduction_len` terms whose products are of
 * order `scale`: 1e-5 * scale * sqrt(reduction_len) (rounding errors grow like
 * a random walk). Use with rtol 1e-4. */
double tu_atol_f32(size_t reduction_len, double scale);

/* ---------------------------------------------------------------- data */

/* cnt_malloc'ed arrays of n zeros (fatal on failure); free with free(). */
double *tu_alloc(size_t n);
float *tu_alloc_f(size_t n);
/* x[i] uniform in [lo, hi), rounded to float. */
/* rm -r of a test's scratch directory: directories are made writable before
 * they are emptied (tests create read-only ones), symbolic links are removed,
 * not followed. Errors are ignored (a test's teardown must not fail). */
void tu_remove_tree(const char *dir);
/* root/<fmt...> in a static buffer (valid until the next call), with the
 * directories above it created: where a test writes its scratch files. */
const char *tu_path_in(const char *root, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Fails the test, printing both strings, unless needle occurs in haystack. */
void tu_assert_contains(const char *haystack, const char *needle);

/* A pooling geometry written as one table row; P and Q are read for adaptive
 * pooling only (pool_params_init derives them otherwise). */
typedef struct tu_pool_case {
    pool_mode mode;
    int N, C, H, W, R, S, sh, sw, ph, pw, ceil_mode, P, Q;
} tu_pool_case;
/* The row's pool_params, through pool_params_init (a cmocka failure if torch
 * would refuse the geometry). */
pool_params tu_pool_params(const tu_pool_case *c);

/* channel_copy geometries shared by the CPU and GPU backend tests: N, C, HW,
 * src_C, src_off, dst_C, dst_off (concat inputs, concat-backward slices,
 * HW = 1, the option-A shortcut's padding, odd sizes). */
extern const int tu_channel_copy_cases[][7];
extern const size_t tu_n_channel_copy_cases;

void tu_fill_uniform(rng *r, double *x, size_t n, double lo, double hi);
/* x[i] = mean + std * N(0, 1), rounded to float. */
void tu_fill_normal(rng *r, double *x, size_t n, double mean, double std);
/* n distinct values lo + (hi - lo) * j / n, j = 0..n-1, in random order, rounded
 * to float: any two differ by at least (hi - lo) / n (up to rounding), so a max
 * or a ReLU kink is never within a finite-difference step. */
void tu_fill_distinct(rng *r, double *x, size_t n, double lo, double hi);
/* Labels uniform in [0, K). */
void tu_fill_labels(rng *r, int *labels, size_t n, int K);

void tu_to_float(const double *src, float *dst, size_t n);
void tu_to_double(const float *src, double *dst, size_t n);
/* sum_i a[i] * b[i] */
double tu_dot(const double *a, const double *b, size_t n);
/* ||a - b|| / ||a|| over n floats, in double (||a|| = 0 counts as 1). */
double tu_rel_l2_f(const float *a, const float *b, size_t n);

/* ---------------------------------------------------------------- backend transfers */

/* be->alloc of n floats, filled with host (converted to float), uploaded. */
float *tu_dev_from_double(const backend *be, const double *host, size_t n);
/* Downloads n floats from dev and converts them into host. */
void tu_dev_to_double(const backend *be, const float *dev, double *host, size_t n);

/* ---------------------------------------------------------------- gradient check */

/* A scalar function of parameters that the checker perturbs in place. */
typedef double (*tu_scalar_fn)(void *ctx);

#define TU_GRADCHECK_EPS 1e-6

/* Central finite differences: for each checked i, numeric[i] =
 * (f(x + eps e_i) - f(x - eps e_i)) / (2 eps) with eps = TU_GRADCHECK_EPS,
 * restoring x[i] afterwards; f reads x through ctx. When n > max_points, a
 * random subset of max_points indices is checked (always including 0 and
 * n - 1), drawn from a generator seeded by n so runs repeat exactly.
 * Returns CNT_OK when numeric and grad (the analytic gradient) are close by
 * tu_check_close's rule, else prints the report (with the real indices, when
 * verbose) and returns CNT_ERR. */
int tu_gradcheck_check(const char *what, tu_scalar_fn f, void *ctx, double *x, size_t n, const double *grad,
                       size_t max_points, double rtol, double atol, int verbose);
/* The same, failing the running cmocka test at file:line on a mismatch. */
void tu_gradcheck_at(const char *file, int line, const char *what, tu_scalar_fn f, void *ctx, double *x, size_t n,
                     const double *grad, size_t max_points, double rtol, double atol);

#define tu_gradcheck(what, f, ctx, x, n, grad, max_points, rtol, atol) \
    tu_gradcheck_at(__FILE__, __LINE__, (what), (f), (ctx), (x), (n), (grad), (max_points), (rtol), (atol))

/* Copies of every node's y, taken by a node hook as the node's forward ends,
 * and of its dy as its backward ends: when each is complete and not yet
 * reused (outputs and gradients share memory by lifetime; see net.h). On the
 * net's backend: y[i] and dy[i] hold max_batch x C x H x W floats of node i,
 * in the net's layout, from the last pass that ran. tu_grads_capture sets the
 * net's node hook (replacing any). */
struct net;
typedef struct tu_grads {
    struct net *nt;
    float **y;
    float **dy;
} tu_grads;
void tu_grads_capture(struct net *nt, tu_grads *g);
void tu_grads_free(tu_grads *g);

#endif
