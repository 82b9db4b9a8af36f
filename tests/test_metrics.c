/*
 * tests/test_metrics.c - cutting metrics.jsonl on a resume (train/metrics.c,
 * metrics_open with until_step >= 0): the records up to the checkpoint's
 * step stay (and those without a step), the later ones go or move aside,
 * the clock and the image count go on from the last kept record, a record
 * cut short by a kill is dropped, and a line that is not a JSON record
 * stops the resume with its file, line and column, leaving the file as it
 * was. Each record is read with the one JSON parser (common/json.h), not
 * searched for text: a "step" inside a string is not the record's step.
 * The whole resume path, on real runs: tests/test_resume.sh.
 * Files live under a fresh mkdtemp directory in /tmp, removed afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/check.h"
#include "train/metrics.h"

static char root[] = "/tmp/cnt_metrics_XXXXXX";

static int setup(void **state) {
    (void)state;
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd);
}

/* dir/metrics.jsonl holding text. */
static void write_records(const char *dir, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* The whole of path (caller frees). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *s = cnt_calloc(1 << 16, 1);
    size_t n = fread(s, 1, (1 << 16) - 1, f);
    s[n] = '\0';
    fclose(f);
    return s;
}

static const char *records =
    "{\"kind\":\"run\",\"model\":\"resnet20\",\"host\":\"a\\\"step\\\":99\",\"steps_per_epoch\":8}\n"
    "{\"kind\":\"step\",\"epoch\":1,\"step\":2,\"time\":1.5,\"images\":64,\"loss\":2.3}\n"
    "{\"kind\":\"step\",\"epoch\":1,\"step\":4,\"time\":3.25,\"images\":128,\"loss\":null}\n"
    "{\"kind\":\"eval\",\"epoch\":1,\"step\":4,\"time\":3.5,\"images\":128,\"top1\":0.5}\n"
    "{\"kind\":\"step\",\"epoch\":1,\"step\":6,\"time\":5,\"images\":192,\"loss\":2.1}\n"
    "{\"kind\":\"step\",\"epoch\":1,\"step\":8,\"time\":7,\"images\":256,\"loss\":2.0}\n";

/* Counts the files matching dir/pattern; the first one's text into *first
 * (NULL: not wanted). */
static int side_files(const char *dir, const char *pattern, char **first) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, pattern);
    glob_t g;
    if (glob(path, 0, NULL, &g) != 0) return 0;
    int n = (int)g.gl_pathc;
    if (first) *first = slurp(g.gl_pathv[0]);
    globfree(&g);
    return n;
}

/* A resume (rollback 0) and a rollback (1) at step 4: the records up to it
 * stay, the rest (steps 6 and 8) move to metrics.redone-<stamp>.jsonl (the
 * steps the resume redoes) or metrics.superseded-<stamp>.jsonl; the last
 * line, cut short by a kill, is no record. Nothing is lost either way. */
static void test_cut_at_a_step(void **state) {
    (void)state;
    char dir[128], path[160];
    for (int rollback = 0; rollback <= 1; rollback++) {
        snprintf(dir, sizeof dir, "%s/cut%d", root, rollback);
        assert_int_equal(make_dirs(dir), CNT_OK);
        char text[2048];
        snprintf(text, sizeof text, "%s{\"kind\":\"step\",\"step\":9,\"ti", records); /* cut short by a kill */
        write_records(dir, text);
        metrics m;
        if (metrics_open(&m, dir, 4, rollback) != CNT_OK) fail_msg("%s", cnt_err_msg());
        assert_true(m.t_base == 3.5 && m.images == 128);
        assert_int_equal(metrics_close(&m), CNT_OK);
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
        char *kept = slurp(path);
        /* the run record (no step, and none in its host's name), steps 2 and 4, the eval at 4 */
        assert_non_null(strstr(kept, "\"kind\":\"run\""));
        assert_non_null(strstr(kept, "\"step\":2,"));
        assert_non_null(strstr(kept, "\"kind\":\"eval\""));
        assert_null(strstr(kept, "\"step\":6,"));
        assert_null(strstr(kept, "\"step\":9"));
        free(kept);
        const char *side = rollback ? "metrics.superseded-*.jsonl" : "metrics.redone-*.jsonl";
        const char *other = rollback ? "metrics.redone-*.jsonl" : "metrics.superseded-*.jsonl";
        char *moved = NULL;
        if (side_files(dir, side, &moved) != 1) fail_msg("rollback %d: no single %s in %s", rollback, side, dir);
        assert_non_null(strstr(moved, "\"step\":6,"));
        assert_non_null(strstr(moved, "\"step\":8,"));
        assert_null(strstr(moved, "\"step\":4,"));
        assert_null(strstr(moved, "\"step\":9"));
        free(moved);
        assert_int_equal(side_files(dir, other, NULL), 0);
    }
}

/* Three resumes and three rollbacks in a row, within a second or two (one
 * stamp): each cut keeps its own side file, none overwrites another's. */
static void test_cuts_in_one_second(void **state) {
    (void)state;
    char dir[128];
    for (int rollback = 0; rollback <= 1; rollback++) {
        snprintf(dir, sizeof dir, "%s/again%d", root, rollback);
        assert_int_equal(make_dirs(dir), CNT_OK);
        for (int k = 0; k < 3; k++) {
            write_records(dir, records);
            metrics m;
            if (metrics_open(&m, dir, 4, rollback) != CNT_OK) fail_msg("%s", cnt_err_msg());
            assert_int_equal(metrics_close(&m), CNT_OK);
        }
        const char *side = rollback ? "metrics.superseded-*.jsonl" : "metrics.redone-*.jsonl";
        assert_int_equal(side_files(dir, side, NULL), 3);
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, side);
        glob_t g;
        assert_int_equal(glob(path, 0, NULL, &g), 0);
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char *moved = slurp(g.gl_pathv[i]);
            if (!strstr(moved, "\"step\":6,") || !strstr(moved, "\"step\":8,")) fail_msg("%s: lost", g.gl_pathv[i]);
            free(moved);
        }
        globfree(&g);
    }
}

/* Fresh runs (until_step -1) in a row whose earlier metrics.jsonl all
 * share one modification second: each moves aside to its own name
 * (metrics.<stamp>.jsonl, then -2, -3), none overwrites another's; a
 * metrics.jsonl that is not a regular file is refused by name. */
static void test_fresh_runs_in_one_second(void **state) {
    (void)state;
    char dir[128], path[192];
    snprintf(dir, sizeof dir, "%s/fresh", root);
    assert_int_equal(make_dirs(dir), CNT_OK);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    struct timeval same[2] = {{1700000000, 0}, {1700000000, 0}};
    for (int k = 0; k < 3; k++) {
        char text[64];
        snprintf(text, sizeof text, "{\"kind\":\"run\",\"run\":%d}\n", k);
        write_records(dir, text);
        assert_int_equal(utimes(path, same), 0);
        metrics m;
        if (metrics_open(&m, dir, -1, 0) != CNT_OK) fail_msg("run %d: %s", k, cnt_err_msg());
        assert_int_equal(metrics_close(&m), CNT_OK);
    }
    assert_int_equal(side_files(dir, "metrics.2023*.jsonl", NULL), 3);
    for (int k = 0; k < 3; k++) {
        char want[32];
        snprintf(want, sizeof want, "\"run\":%d}", k);
        int found = 0;
        char pattern[256];
        snprintf(pattern, sizeof pattern, "%s/metrics.2023*.jsonl", dir);
        glob_t g;
        assert_int_equal(glob(pattern, 0, NULL, &g), 0);
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char *moved = slurp(g.gl_pathv[i]);
            found += strstr(moved, want) != NULL;
            free(moved);
        }
        globfree(&g);
        if (found != 1) fail_msg("run %d's records kept %d times", k, found);
    }
    /* a directory where metrics.jsonl belongs: refused, named, left alone */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0777), 0);
    char inside[256];
    snprintf(inside, sizeof inside, "%s/keep", path);
    FILE *f = fopen(inside, "w");
    assert_non_null(f);
    fclose(f);
    metrics m;
    assert_int_equal(metrics_open(&m, dir, -1, 0), CNT_ERR);
    if (!strstr(cnt_err_msg(), path)) fail_msg("'%s' lacks '%s'", cnt_err_msg(), path);
    assert_non_null(fopen(inside, "r"));
}

/* A line that is not a JSON object, or whose step is not a whole number:
 * CNT_ERR naming the file, the line and the column; the file untouched, and
 * the side file that the record before it (step 7) had started removed. */
static void test_bad_record_refused(void **state) {
    (void)state;
    static const struct {
        const char *line, *what;
    } bad[] = {
        {"{\"kind\":\"step\",\"step\":5,,\"time\":1}\n", "metrics.jsonl:4:25: "},
        {"garbage\n", "metrics.jsonl:4:7: invalid token near 'garbage'"},
        {"{\"kind\":\"step\",\"step\":5,\"step\":6}\n", "metrics.jsonl:4:"},
        {"[1,2]\n", "metrics.jsonl:4: not a metrics record"},
        {"{\"kind\":\"step\",\"step\":\"5\"}\n", "metrics.jsonl:4: \"step\": expected a whole number"},
        {"{\"kind\":\"step\",\"step\":5,\"time\":\"x\"}\n", "metrics.jsonl:4: \"time\": expected a number"},
    };
    char dir[128], path[160];
    snprintf(dir, sizeof dir, "%s/bad", root);
    assert_int_equal(make_dirs(dir), CNT_OK);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "{\"kind\":\"run\"}\n{\"kind\":\"step\",\"step\":1,\"time\":1}\n"
                                    "{\"kind\":\"step\",\"step\":7,\"time\":9}\n%s", bad[i].line);
        write_records(dir, text);
        metrics m;
        assert_int_equal(metrics_open(&m, dir, 1, 1), CNT_ERR);
        const char *msg = cnt_err_msg();
        if (!strstr(msg, path) || !strstr(msg, bad[i].what)) fail_msg("case %zu: '%s' lacks '%s'", i, msg, bad[i].what);
        char *after = slurp(path);
        assert_string_equal(after, text);
        free(after);
        char side[192];
        assert_int_equal(side_files(dir, "metrics.superseded-*.jsonl", NULL), 0);
        snprintf(side, sizeof side, "%s/metrics.jsonl.tmp", dir);
        assert_null(fopen(side, "r"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_at_a_step),
        cmocka_unit_test(test_cuts_in_one_second),
        cmocka_unit_test(test_fresh_runs_in_one_second),
        cmocka_unit_test(test_bad_record_refused),
    };
    return cmocka_run_group_tests_name("metrics", tests, setup, teardown);
}
