/*
 * tests/test_loss_scale.c - train/loss_scale: which mode train.loss_scaling =
 * auto picks for each precision, the dynamic rule (halve and skip on
 * overflow, double after the window, the window restarting at each change),
 * static scaling (skip, never change), no scaling (never skip), and the stop
 * after LOSS_SCALE_MAX_SKIPS skipped steps in a row.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "common/check.h"
#include "train/config.h"
#include "train/loss_scale.h"

/* The scaler a run with this config starts with. */
static void scaler_from(loss_scaler *ls, const config *cfg) {
    loss_scale_opts o = config_loss_scale_opts(cfg);
    loss_scaler_init(ls, &o);
}

static void config_with(config *cfg, const char *precision, const char *scaling, const char *scale,
                        const char *window) {
    config_defaults(cfg);
    char o[128];
    snprintf(o, sizeof o, "train.precision=%s", precision);
    assert_int_equal(config_override(cfg, o), CNT_OK);
    snprintf(o, sizeof o, "train.loss_scaling=%s", scaling);
    assert_int_equal(config_override(cfg, o), CNT_OK);
    if (scale) {
        snprintf(o, sizeof o, "train.loss_scale=%s", scale);
        assert_int_equal(config_override(cfg, o), CNT_OK);
    }
    if (window) {
        snprintf(o, sizeof o, "train.loss_scale_window=%s", window);
        assert_int_equal(config_override(cfg, o), CNT_OK);
    }
    assert_int_equal(config_validate(cfg), CNT_OK);
}

static void test_auto_mode(void **state) {
    (void)state;
    static const struct {
        const char *precision;
        loss_scale_mode mode;
    } cases[] = {{"fp32", LOSS_SCALE_NONE}, {"tf32", LOSS_SCALE_NONE}, {"bf16", LOSS_SCALE_NONE},
                 {"fp16", LOSS_SCALE_DYNAMIC}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        config cfg;
        config_with(&cfg, cases[i].precision, "auto", NULL, NULL);
        loss_scaler ls;
        scaler_from(&ls, &cfg);
        assert_int_equal(ls.mode, cases[i].mode);
        assert_int_equal(loss_scaler_active(&ls), cases[i].mode != LOSS_SCALE_NONE);
        /* the default start is PyTorch GradScaler's 2^16; none means 1 */
        assert_true(ls.scale == (cases[i].mode == LOSS_SCALE_NONE ? 1.0 : 65536.0));
    }
    /* named modes win over the precision */
    config cfg;
    config_with(&cfg, "fp16", "none", NULL, NULL);
    loss_scaler ls;
    scaler_from(&ls, &cfg);
    assert_int_equal(ls.mode, LOSS_SCALE_NONE);
    config_with(&cfg, "fp32", "static", "128", NULL);
    scaler_from(&ls, &cfg);
    assert_int_equal(ls.mode, LOSS_SCALE_STATIC);
    assert_true(ls.scale == 128.0);
    char buf[256];
    loss_scaler_describe(&ls, buf, sizeof buf);
    assert_non_null(strstr(buf, "static loss scale 128"));
}

static void test_dynamic_rule(void **state) {
    (void)state;
    config cfg;
    config_with(&cfg, "fp16", "auto", "1024", "3");
    loss_scaler ls;
    scaler_from(&ls, &cfg);
    int failed;
    /* overflow: skipped, halved */
    assert_int_equal(loss_scaler_update(&ls, 1, &failed), 0);
    assert_int_equal(failed, 0);
    assert_true(ls.scale == 512.0);
    assert_int_equal(ls.skipped, 1);
    /* two clean steps: applied, unchanged; the third doubles */
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_true(ls.scale == 512.0);
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_true(ls.scale == 1024.0);
    /* the window restarts after a doubling ... */
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_true(ls.scale == 1024.0);
    /* ... and after an overflow, which also forgets the clean steps before it */
    assert_int_equal(loss_scaler_update(&ls, 1, &failed), 0);
    assert_true(ls.scale == 512.0);
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_true(ls.scale == 512.0);
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_true(ls.scale == 1024.0);
    assert_int_equal(ls.skipped, 2);
    assert_int_equal(failed, 0);
}

/* The dynamic scale stops at LOSS_SCALE_MIN, so 1/scale stays finite. */
static void test_floor(void **state) {
    (void)state;
    config cfg;
    config_with(&cfg, "fp16", "dynamic", "1.5e-7", NULL); /* about 2.5 x 2^-24 */
    loss_scaler ls;
    scaler_from(&ls, &cfg);
    int failed;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(loss_scaler_update(&ls, 1, &failed), 0);
        assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1); /* clean steps between: no stop */
    }
    assert_true(ls.scale == LOSS_SCALE_MIN);
    assert_true(isfinite(1.0f / (float)ls.scale));
    /* restored state: a resumed run takes the scale, its clean steps and the skips in a row */
    loss_scaler_restore(&ls, 4096.0, 7, 11, 3);
    assert_true(ls.scale == 4096.0 && ls.good == 7 && ls.skipped == 11 && ls.in_a_row == 3);
    loss_scaler_restore(&ls, 0.0, 1, 1, 1); /* nothing recorded: unchanged */
    assert_true(ls.scale == 4096.0 && ls.good == 7);
}

static void test_static_and_none(void **state) {
    (void)state;
    config cfg;
    config_with(&cfg, "fp16", "static", "256", "1");
    loss_scaler ls;
    scaler_from(&ls, &cfg);
    int failed;
    assert_int_equal(loss_scaler_update(&ls, 1, &failed), 0);
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    assert_true(ls.scale == 256.0); /* never changes, window or not */
    assert_int_equal(ls.skipped, 1);

    config_with(&cfg, "fp32", "none", "256", NULL);
    scaler_from(&ls, &cfg);
    assert_true(ls.scale == 1.0);
    assert_int_equal(loss_scaler_update(&ls, 1, &failed), 1); /* none never skips */
    assert_int_equal(ls.skipped, 0);
    assert_int_equal(failed, 0);
}

static void test_stops_after_max_skips(void **state) {
    (void)state;
    config cfg;
    config_with(&cfg, "fp16", "dynamic", NULL, NULL);
    loss_scaler ls;
    scaler_from(&ls, &cfg);
    int failed = 0;
    /* one clean step between runs of overflows resets the count */
    for (int i = 0; i < LOSS_SCALE_MAX_SKIPS - 1; i++) {
        assert_int_equal(loss_scaler_update(&ls, 1, &failed), 0);
        assert_int_equal(failed, 0);
    }
    assert_int_equal(loss_scaler_update(&ls, 0, &failed), 1);
    for (int i = 0; i < LOSS_SCALE_MAX_SKIPS - 1; i++) {
        assert_int_equal(loss_scaler_update(&ls, 1, &failed), 0);
        assert_int_equal(failed, 0);
    }
    assert_int_equal(loss_scaler_update(&ls, 1, &failed), 0);
    assert_int_equal(failed, 1);
    assert_non_null(strstr(cnt_err_msg(), "steps in a row had inf or NaN gradients"));
    assert_non_null(strstr(cnt_err_msg(), "bf16"));
}

static void test_config_errors(void **state) {
    (void)state;
    config cfg;
    config_defaults(&cfg);
    assert_int_not_equal(config_override(&cfg, "train.loss_scaling=sometimes"), CNT_OK);
    assert_non_null(strstr(cnt_err_msg(), "train.loss_scaling"));
    config_defaults(&cfg);
    int bad = config_override(&cfg, "train.loss_scale=-2") != CNT_OK || config_validate(&cfg) != CNT_OK;
    assert_true(bad);
    assert_non_null(strstr(cnt_err_msg(), "train.loss_scale"));
    config_defaults(&cfg);
    bad = config_override(&cfg, "train.loss_scale_window=0") != CNT_OK || config_validate(&cfg) != CNT_OK;
    assert_true(bad);
    assert_non_null(strstr(cnt_err_msg(), "train.loss_scale_window"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_mode),
        cmocka_unit_test(test_dynamic_rule),
        cmocka_unit_test(test_floor),
        cmocka_unit_test(test_static_and_none),
        cmocka_unit_test(test_stops_after_max_skips),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
