/*
 * tests/test_stager.c - train/stager: batches reach the device intact, the
 * two slots alternate (so a put never overwrites the batch still being
 * read), and images are aligned; on the CPU backend, and on the GPU too when
 * one is usable (there the uploads run on the copy stream).
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
    stager *s = stager_create(be, MAXB, SAMPLE);
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

static void test_stager_gpu(void **state) {
    (void)state;
    const backend *gpu = backend_get(BACKEND_DEVICE_CUDA);
    if (!gpu) {
        printf("no GPU: %s\n", cnt_err_msg());
        skip();
    }
    run_on(gpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stager_cpu),
        cmocka_unit_test(test_stager_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
