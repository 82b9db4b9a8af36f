/*
 * tests/test_stager.c - train/stager: batches reach the device intact, the
 * two slots alternate (so a put never overwrites the batch still being
 * read), and images are aligned; uint8 batches (data.batch_dtype = uint8)
 * arrive as exactly the floats their table gives, in NCHW, with the table
 * uploaded again when it changes; on the CPU backend, and on the GPU too
 * when one is usable (there the uploads run on the copy stream). On the GPU a
 * stress test also checks the three fence pairings under load, with no
 * download between rounds to hide a missing one (test_stager_gpu_stress).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/check.h"
#include "model/backend.h"
#include "train/stager.h"

enum { MAXB = 7, SAMPLE = 5, ROUNDS = 6 };

static void fill(batch *b, float *x, int32_t *l, int n, int round) {
    for (int i = 0; i < n; i++) {
        l[i] = 1000 * round + i;
        for (int j = 0; j < SAMPLE; j++) x[i * SAMPLE + j] = (float)(round * 100 + i * SAMPLE + j) + 0.25f;
    }
    b->n = n;
    b->x = x;
    b->labels = l;
}

static void run_on(const backend *be) {
    stager *s = stager_create(be, MAXB, 1, SAMPLE, 0);
    float *prev_x = NULL;
    float *slot_x[2] = {NULL, NULL};
    for (int r = 0; r < ROUNDS; r++) {
        float x[MAXB * SAMPLE], back_x[MAXB * SAMPLE];
        int32_t l[MAXB], back_l[MAXB];
        batch b;
        int n = r % 3 == 2 ? 3 : MAXB; /* a short batch now and then, as the last of an epoch */
        fill(&b, x, l, n, r);
        float *dx;
        int32_t *dl;
        stager_put(s, &b, &dx, &dl);
        /* the loader may reuse its buffers at once: scribble over them */
        memset(x, 0xff, sizeof x);
        memset(l, 0xff, sizeof l);
        assert_true(((uintptr_t)dx - (uintptr_t)dl) % 256 == 0);
        assert_true((void *)dx != prev_x);
        if (r >= 2) assert_ptr_equal(dx, slot_x[r % 2]);
        slot_x[r % 2] = dx;
        prev_x = dx;
        be->download(back_x, dx, (size_t)n * SAMPLE * sizeof(float));
        be->download(back_l, dl, (size_t)n * sizeof(int32_t));
        stager_release(s);
        for (int i = 0; i < n; i++) {
            assert_int_equal(back_l[i], 1000 * r + i);
            for (int j = 0; j < SAMPLE; j++)
                assert_true(back_x[i * SAMPLE + j] == (float)(r * 100 + i * SAMPLE + j) + 0.25f);
        }
    }
    stager_free(s);
}

static void test_stager_cpu(void **state) {
    (void)state;
    run_on(backend_cpu());
}

enum { UC = 3, UHW = 11 };

/* Table t: a value per (channel, byte) that no other pair has. */
static void lut_fill(float *lut, int t) {
    for (int c = 0; c < UC; c++)
        for (int v = 0; v < 256; v++) lut[c * 256 + v] = (float)(v * 3 + c) * 0.5f - 100.0f * (float)t + 0.125f;
}

/* uint8 batches: each round's bytes (HWC), the table switched after round 2,
 * must come out as lut[c][byte] at [n, c, p]. */
static void run_on_u8(const backend *be) {
    stager *s = stager_create(be, MAXB, UC, UHW, 1);
    float lut[2][UC * 256];
    lut_fill(lut[0], 0);
    lut_fill(lut[1], 1);
    float *slot_x[2] = {NULL, NULL};
    for (int r = 0; r < ROUNDS; r++) {
        uint8_t u[MAXB * UHW * UC];
        int32_t l[MAXB];
        float back[MAXB * UC * UHW];
        int n = r % 3 == 2 ? 3 : MAXB, t = r > 2;
        for (int i = 0; i < n * UHW * UC; i++) u[i] = (uint8_t)(i * 7 + r * 31);
        for (int i = 0; i < n; i++) l[i] = 1000 * r + i;
        batch b = {.n = n, .u8 = u, .lut = lut[t], .c = UC, .hw = UHW, .labels = l};
        float *dx;
        int32_t *dl;
        stager_put(s, &b, &dx, &dl);
        memset(u, 0xff, sizeof u);
        if (r >= 2) assert_ptr_equal(dx, slot_x[r % 2]);
        assert_true(((uintptr_t)dx - (uintptr_t)dl) % 256 == 0);
        slot_x[r % 2] = dx;
        be->download(back, dx, (size_t)n * UC * UHW * sizeof(float));
        stager_release(s);
        for (int i = 0; i < n; i++)
            for (int c = 0; c < UC; c++)
                for (int p = 0; p < UHW; p++) {
                    uint8_t v = (uint8_t)(((i * UHW + p) * UC + c) * 7 + r * 31);
                    float want = lut[t][c * 256 + v], got = back[(i * UC + c) * UHW + p];
                    if (got != want) fail_msg("round %d: [%d, %d, %d] is %g, want %g", r, i, c, p, got, want);
                }
    }
    stager_free(s);
}

static void test_stager_u8_cpu(void **state) {
    (void)state;
    run_on_u8(backend_cpu());
}

/* The GPU backend, or the test skipped (saying why) when none is usable. */
static const backend *gpu_or_skip(void) {
    const backend *gpu = backend_get(BACKEND_DEVICE_CUDA);
    if (!gpu) {
        printf("no GPU: %s\n", cnt_err_msg());
        skip();
    }
    return gpu;
}

static void test_stager_gpu(void **state) {
    (void)state;
    run_on(gpu_or_skip());
}

static void test_stager_u8_gpu(void **state) {
    (void)state;
    run_on_u8(gpu_or_skip());
}

/* Each round's batch is read by a long run of GPU ops (a GEMM reading it
 * again and again, between two additions of it into that round's own sum),
 * issued without waiting, while the host goes on to put the next batches,
 * prepared in advance so that a put costs the host only its copy into pinned
 * memory: the GPU falls further behind the host every round. Rounds 0 and 8
 * start with the compute stream idle. Nothing is downloaded until the end.
 * Any missing pairing changes some round's sum:
 * - an upload that does not wait for `released` overwrites a slot whose
 *   GEMMs (two rounds back) are still running; the second addition sees it;
 * - ops that do not wait for `uploaded` read the slot while its upload lands
 *   (on an idle stream the first addition starts at once);
 * - a host copy that does not wait for `uploaded` overwrites the pinned
 *   buffer of an upload still queued behind the `released` wait.
 * The first version of this test did the host's filling inside the loop and
 * read the slot with additions only: on an H200 the GPU kept up with the
 * host, and only the second pairing's removal failed it.
 * Values are small integers, so every sum is exact. */
enum { SB = 64, SF = 32768, SROUNDS = 16, GEMMS = 100, GM = 2048, GK = 1024, GN = 1024 };

static float stress_value(int r, size_t i) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 7u);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (float)((int)(h % 17u) - 8);
}

static void test_stager_gpu_stress(void **state) {
    (void)state;
    const backend *gpu = gpu_or_skip();
    const backend_ctx fp32 = {0}; /* the GEMMs' context: fp32 */
    size_t n = (size_t)SB * SF; /* 8 MiB a batch, read by the GEMMs as [GM, GK] */
    assert_true(n == (size_t)GM * GK);
    stager *s = stager_create(gpu, SB, 1, SF, 0);
    float *x = cnt_malloc((size_t)SROUNDS * n * sizeof(float)), *got = cnt_malloc(n * sizeof(float));
    int32_t l[SROUNDS][SB], got_l[SB];
    for (int r = 0; r < SROUNDS; r++) {
        for (size_t i = 0; i < n; i++) x[(size_t)r * n + i] = stress_value(r, i);
        for (int i = 0; i < SB; i++) l[r][i] = 1000 * r + i;
    }
    float *sums = gpu->alloc((size_t)SROUNDS * n * sizeof(float));
    int32_t *labels = gpu->alloc((size_t)SROUNDS * SB * sizeof(int32_t));
    float *ones = gpu->alloc((size_t)GK * GN * sizeof(float)), *junk = gpu->alloc((size_t)GM * GN * sizeof(float));
    float *h1 = cnt_malloc((size_t)GK * GN * sizeof(float));
    for (size_t i = 0; i < (size_t)GK * GN; i++) h1[i] = 1.0f;
    gpu->upload(ones, h1, (size_t)GK * GN * sizeof(float));
    free(h1);
    for (int r = 0; r < SROUNDS; r++) {
        if (r == 0 || r == 8) gpu->sync();
        batch b = {.n = SB, .x = x + (size_t)r * n, .labels = l[r]};
        float *dx;
        int32_t *dl;
        stager_put(s, &b, &dx, &dl);
        float *sum = sums + (size_t)r * n;
        gpu->axpy(n, 1.0f, dx, sum, 1);
        for (int k = 0; k < GEMMS; k++) gpu->gemm(&fp32, 0, 0, GM, GN, GK, 1.0f, dx, GK, ones, GN, 0.0f, junk, GN, 0);
        gpu->axpy(n, 1.0f, dx, sum, 1);
        gpu->copy(labels + (size_t)r * SB, dl, sizeof got_l);
        stager_release(s);
    }
    int bad_rounds = 0;
    for (int r = 0; r < SROUNDS; r++) {
        gpu->download(got, sums + (size_t)r * n, n * sizeof(float));
        gpu->download(got_l, labels + (size_t)r * SB, sizeof got_l);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n; i++)
            if (got[i] != 2.0f * stress_value(r, i) && bad++ == 0) first = i;
        for (int i = 0; i < SB; i++) bad += got_l[i] != 1000 * r + i;
        if (bad) {
            printf("round %d: %zu wrong values (first at %zu: %g, want %g)\n", r, bad, first, got[first],
                   2.0f * stress_value(r, first));
            bad_rounds++;
        }
    }
    stager_free(s);
    gpu->free(sums);
    gpu->free(labels);
    gpu->free(ones);
    gpu->free(junk);
    free(x);
    free(got);
    assert_int_equal(bad_rounds, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stager_cpu),
        cmocka_unit_test(test_stager_gpu),
        cmocka_unit_test(test_stager_u8_cpu),
        cmocka_unit_test(test_stager_u8_gpu),
        cmocka_unit_test(test_stager_gpu_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
