/*
 * tests/test_check.c - the error-message helpers of common/check.h:
 * cnt_err_prefix and cnt_err_suffix add context around the stored message
 * (which lives in the very buffer they write), return CNT_ERR, and truncate
 * a message that would not fit instead of overrunning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/check.h"

static void test_prefix_and_suffix(void **state) {
    (void)state;
    cnt_err_set("cannot open '%s': %s", "/x", "No such file");
    assert_int_equal(cnt_err_prefix("model '%s' on %dx%dx%d", "resnet20", 1, 28, 28), CNT_ERR);
    assert_string_equal(cnt_err_msg(), "model 'resnet20' on 1x28x28: cannot open '/x': No such file");
    assert_int_equal(cnt_err_suffix(" (see %s)", "--devices"), CNT_ERR);
    assert_string_equal(cnt_err_msg(), "model 'resnet20' on 1x28x28: cannot open '/x': No such file (see --devices)");
    /* the stored message may be an argument: it is read before it is written */
    cnt_err_set("inner");
    cnt_err_prefix("%s again", cnt_err_msg());
    assert_string_equal(cnt_err_msg(), "inner again: inner");
    cnt_err_set("%s", "");
    cnt_err_prefix("empty");
    assert_string_equal(cnt_err_msg(), "empty: ");
}

static void test_truncation(void **state) {
    (void)state;
    char big[3000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cnt_err_set("%s", big);
    assert_int_equal(strlen(cnt_err_msg()), 2047);
    cnt_err_prefix("p");
    size_t n = strlen(cnt_err_msg());
    assert_int_equal(n, 2047);
    assert_memory_equal(cnt_err_msg(), "p: aaa", 6);
    cnt_err_suffix("%s", big);
    assert_int_equal(strlen(cnt_err_msg()), 2047);
    cnt_err_set("short");
    cnt_err_prefix("%s", big);
    assert_int_equal(strlen(cnt_err_msg()), 2047); /* the prefix alone fills it */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_and_suffix),
        cmocka_unit_test(test_truncation),
    };
    return cmocka_run_group_tests_name("check", tests, NULL, NULL);
}
