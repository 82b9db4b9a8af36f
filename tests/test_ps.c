/*
 * tests/test_ps.c - the parts of the parameter servers (dist/ps.h) that need
 * no MPI: how the flat buffer is cut into shards (ps_plan: whole tensors,
 * balanced by values, every server one tensor at least, a clear error when
 * there are more servers than tensors) and the update of one shard
 * (optim_step_range: the shards' updates together are optim_step's, bit for
 * bit, which is what makes a synchronous PS step equal an allreduce step).
 * The servers themselves run under mpirun: tests/test_ps.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/rng.h"
#include "dist/ps.h"
#include "model/backend.h"
#include "model/net.h"
#include "model/zoo.h"
#include "tests/support/testutil.h"
#include "train/optim.h"

static void test_plan_whole_tensors_balanced(void **state) {
    (void)state;
    /* ten tensors of 10 values: two servers take five each, five take two each */
    size_t ends[10], shard[5];
    for (int i = 0; i < 10; i++) ends[i] = (size_t)(i + 1) * 10;
    assert_int_equal(ps_plan(ends, 10, 2, shard), CNT_OK);
    assert_true(shard[0] == 50 && shard[1] == 100);
    assert_int_equal(ps_plan(ends, 10, 5, shard), CNT_OK);
    for (int k = 0; k < 5; k++) assert_true(shard[k] == (size_t)(k + 1) * 20);
    /* one big tensor among small ones: the cut lands at the nearest tensor end */
    size_t uneven[4] = {10, 20, 1020, 1030}; /* sizes 10, 10, 1000, 10 */
    assert_int_equal(ps_plan(uneven, 4, 2, shard), CNT_OK);
    assert_true(shard[0] == 20 && shard[1] == 1030); /* half of 1030 is nearer 20 (495 away) than 1020 (505) */
    size_t later[4] = {10, 20, 1020, 1230};                /* sizes 10, 10, 1000, 210: half is 615 */
    assert_int_equal(ps_plan(later, 4, 2, shard), CNT_OK);
    assert_true(shard[0] == 1020 && shard[1] == 1230);
    /* every server keeps one tensor, even when the sizes would rather not */
    assert_int_equal(ps_plan(uneven, 4, 4, shard), CNT_OK);
    assert_true(shard[0] == 10 && shard[1] == 20 && shard[2] == 1020 && shard[3] == 1030);
    size_t big_first[3] = {1000, 1001, 1002};
    assert_int_equal(ps_plan(big_first, 3, 3, shard), CNT_OK);
    assert_true(shard[0] == 1000 && shard[1] == 1001 && shard[2] == 1002);
    /* one server holds everything */
    assert_int_equal(ps_plan(uneven, 4, 1, shard), CNT_OK);
    assert_true(shard[0] == 1030);
}

static void test_plan_more_servers_than_tensors(void **state) {
    (void)state;
    size_t ends[3] = {5, 10, 15}, shard[4];
    assert_int_equal(ps_plan(ends, 3, 4, shard), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "dist.ps_servers = 4 exceeds the model's 3 parameter tensors"));
    assert_int_equal(ps_plan(ends, 3, 0, shard), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "dist.ps_servers = 0"));
}

/* ResNet-20's tensors cut for 1 to 7 servers: contiguous, in order, each
 * end a tensor's end, no shard more than twice the even share plus the
 * largest tensor. */
static void test_plan_resnet20(void **state) {
    (void)state;
    net *nt = zoo_create(backend_cpu(), "resnet20", NULL, 3, 32, 32, 10, BACKEND_LAYOUT_NCHW, 1);
    assert_non_null(nt);
    int n = nt->n_param_tensors;
    size_t *ends = cnt_malloc((size_t)n * sizeof *ends), largest = 0;
    for (int j = 0; j < n; j++) {
        const param_info *pi = &nt->param_info[n - 1 - j];
        ends[j] = pi->offset + pi->count;
        if (pi->count > largest) largest = pi->count;
        assert_true(j == 0 || ends[j] > ends[j - 1]);
    }
    assert_true(ends[n - 1] == nt->n_params);
    for (int K = 1; K <= 7; K++) {
        size_t shard[7];
        assert_int_equal(ps_plan(ends, n, K, shard), CNT_OK);
        size_t begin = 0;
        for (int k = 0; k < K; k++) {
            int is_end = 0;
            for (int j = 0; j < n; j++) is_end |= ends[j] == shard[k];
            assert_true(is_end && shard[k] > begin);
            assert_true(shard[k] - begin <= nt->n_params / K + largest);
            begin = shard[k];
        }
        assert_true(begin == nt->n_params);
    }
    free(ends);
    net_free(nt);
}

/* optim_step over the whole buffer equals optim_step_range over the shards
 * of any cut, bit for bit, with momentum, weight decay (skipped on batch
 * norm), and a gradient scale. */
static void test_step_range_equals_step(void **state) {
    (void)state;
    const backend *be = backend_cpu();
    net *a = zoo_create(be, "resnet20", NULL, 3, 32, 32, 10, BACKEND_LAYOUT_NCHW, 1);
    net *b = zoo_create(be, "resnet20", NULL, 3, 32, 32, 10, BACKEND_LAYOUT_NCHW, 1);
    net_init_params(a, 5);
    net_init_params(b, 5);
    size_t n = a->n_params;
    optim_opts oo = {.momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = 0, .wd_on_bn_bias = 0};
    optimizer oa, ob;
    optim_init(&oa, a, &oo);
    optim_init(&ob, b, &oo);
    be->zero(oa.momentum_buf, n * sizeof(float));
    be->zero(ob.momentum_buf, n * sizeof(float));
    rng r;
    rng_seed(&r, 9, 1);
    float *g = cnt_malloc(n * sizeof(float));
    size_t cuts[4] = {1000, 1001, 150000, n};
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < n; i++) g[i] = rng_normal(&r);
        be->upload(a->grads, g, n * sizeof(float));
        be->upload(b->grads, g, n * sizeof(float));
        optim_step(&oa, a, 0.1f, 0.5f);
        size_t begin = 0;
        for (int k = 0; k < 4; k++) {
            optim_step_range(&ob, b, 0.1f, 0.5f, begin, cuts[k]);
            begin = cuts[k];
        }
    }
    tu_assert_bitwise_equal_f("parameters", a->params, b->params, n);
    tu_assert_bitwise_equal_f("momentum", oa.momentum_buf, ob.momentum_buf, n);
    /* and a range leaves the rest alone */
    float *before = cnt_malloc(n * sizeof(float));
    memcpy(before, b->params, n * sizeof(float));
    optim_step_range(&ob, b, 0.1f, 0.5f, 1000, 2000);
    tu_assert_bitwise_equal_f("below the range", before, b->params, 1000);
    tu_assert_bitwise_equal_f("above the range", before + 2000, b->params + 2000, n - 2000);
    assert_true(memcmp(before + 1000, b->params + 1000, 1000 * sizeof(float)) != 0);
    free(before);
    free(g);
    optim_free(&oa);
    optim_free(&ob);
    net_free(a);
    net_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_whole_tensors_balanced),
        cmocka_unit_test(test_plan_more_servers_than_tensors),
        cmocka_unit_test(test_plan_resnet20),
        cmocka_unit_test(test_step_range_equals_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
