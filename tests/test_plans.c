/*
 * tests/test_plans.c - the convolution plans kept in out_dir and shared
 * (train/plans.h), with a made-up backend whose plans_export hands out a
 * text and whose plans_import records what it was given: the file holds
 * exactly the exported text (written through a temporary and a rename), a
 * restore hands the file's text to the backend, a text the backend refuses
 * and a file that is not a regular file change nothing and end nothing, an
 * out_dir that cannot be written is a warning, and a backend without plans
 * (the CPU) writes and takes nothing. One process: the broadcasts to the
 * other ranks are no-ops here (the multi-rank runs of tests/test_dist*.sh
 * go through them on the CPU, where rank 0 has nothing to send). And the
 * CUDA backend's line per plan (model/plan_line.h): written and read back
 * unchanged, and every malformed or inconsistent variant refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/check.h"
#include "model/backend.h"
#include "model/plan_line.h"
#include "train/plans.h"

static const char *exported = "fake plans v1; device test\n1 2 3\n4 5 6\n";
static char imported[256];
static int imports;

static size_t fake_export(char *buf, size_t len) {
    if (len) snprintf(buf, len, "%s", exported);
    return strlen(exported);
}

/* Takes a text with its own first line; counts the lines after it. */
static int fake_import(const char *text, char *why, size_t len) {
    imports++;
    snprintf(imported, sizeof imported, "%s", text);
    if (strncmp(text, "fake plans v1;", 14) != 0) {
        snprintf(why, len, "made elsewhere");
        return -1;
    }
    int n = 0;
    for (const char *p = strchr(text, '\n'); p && p[1]; p = strchr(p + 1, '\n')) n++;
    return n;
}

static backend fake;

static char *read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void test_share_then_restore(void **state) {
    (void)state;
    fake = *backend_cpu();
    fake.plans_export = fake_export;
    fake.plans_import = fake_import;
    char dir[] = "/tmp/cnt_plans_XXXXXX", path[128], cmd[160];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/%s", dir, PLANS_FILE);

    plans_restore(&fake, dir); /* no file yet: nothing taken */
    assert_int_equal(imports, 0);
    plans_share(&fake, dir, 1);
    const char *got = read_file(path);
    assert_non_null(got);
    assert_string_equal(got, exported);
    snprintf(cmd, sizeof cmd, "%s.tmp", path);
    assert_int_not_equal(access(cmd, F_OK), 0); /* the temporary renamed away */
    assert_int_equal(imports, 0);               /* rank 0 keeps its own */

    plans_restore(&fake, dir);
    assert_int_equal(imports, 1);
    assert_string_equal(imported, exported);

    /* a text the backend refuses: a warning, the run goes on */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("plans of another machine\n1 2 3\n", f);
    fclose(f);
    plans_restore(&fake, dir);
    assert_int_equal(imports, 2);
    assert_string_equal(imported, "plans of another machine\n1 2 3\n");

    /* the file is a directory: refused by name, nothing taken */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    plans_restore(&fake, dir);
    assert_int_equal(imports, 2);
    /* ... and it cannot be replaced by a file: a warning, no crash */
    plans_share(&fake, dir, 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(rmdir(path), 0);

    /* an out_dir that does not exist: a warning */
    char gone[160];
    snprintf(gone, sizeof gone, "%s/missing", dir);
    plans_share(&fake, gone, 0);

    /* the CPU backend has no plans: nothing written, nothing taken */
    plans_share(backend_cpu(), dir, 1);
    assert_int_not_equal(access(path, F_OK), 0);
    plans_restore(backend_cpu(), dir);
    assert_int_equal(imports, 2);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---------------------------------------------------- a plan's line of text */

/* ResNet-50's 3x3 convolution of its third stage, in bf16 NHWC: the legacy
 * forward and filter choices, graph plans for two of the six slots. */
static plan_line sample_line(void) {
    plan_line l;
    memset(&l, 0, sizeof l);
    l.p = (conv_params){.N = 64, .C = 256, .H = 14, .W = 14, .K = 256, .R = 3, .S = 3, .stride_h = 1,
                        .stride_w = 1, .pad_h = 1, .pad_w = 1};
    assert_int_equal(conv_params_init(&l.p), CNT_OK);
    l.math = BACKEND_MATH_BF16;
    l.layout = BACKEND_LAYOUT_NHWC;
    l.have[0] = 1, l.algo[0] = 1, l.math_type[0] = 2, l.ws[0] = 5242880;
    l.have[2] = 1, l.algo[2] = 3, l.math_type[2] = 1, l.ws[2] = (size_t)3 << 32; /* past 32 bits */
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 2; b++) l.graph_index[k][b] = -1, l.graph_engine[k][b] = -1;
    l.graph_index[0][0] = 3, l.graph_engine[0][0] = 57;
    l.graph_index[1][1] = 0, l.graph_engine[1][1] = 4096000000LL; /* an engine index past 32 bits */
    return l;
}

static void expect_same_line(const plan_line *a, const plan_line *b) {
    assert_memory_equal(&a->p, &b->p, sizeof a->p);
    assert_int_equal(a->math, b->math);
    assert_int_equal(a->layout, b->layout);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(a->have[k], b->have[k]);
        assert_int_equal(a->algo[k], b->algo[k]);
        assert_int_equal(a->math_type[k], b->math_type[k]);
        assert_true(a->ws[k] == b->ws[k]);
        for (int g = 0; g < 2; g++) {
            assert_int_equal(a->graph_index[k][g], b->graph_index[k][g]);
            assert_true(a->graph_engine[k][g] == b->graph_engine[k][g]);
        }
    }
}

/* A line written is read back as it was, text and all, up to its newline. */
static void test_plan_line_round_trip(void **state) {
    (void)state;
    plan_line l = sample_line(), back;
    char text[512], again[512];
    size_t n = plan_line_format(&l, text, sizeof text);
    assert_int_equal(n, strlen(text));
    assert_true(n > 0 && text[n - 1] == '\n');
    assert_int_equal(plan_line_parse(text, &back), 1);
    expect_same_line(&l, &back);
    plan_line_format(&back, again, sizeof again);
    assert_string_equal(again, text);
    /* the next line does not belong to it; the last line may lack its newline */
    char two[1024];
    snprintf(two, sizeof two, "%sgarbage\n", text);
    assert_int_equal(plan_line_parse(two, &back), 1);
    text[n - 1] = '\0';
    assert_int_equal(plan_line_parse(text, &back), 1);
    expect_same_line(&l, &back);
    /* too short a buffer: cut, terminated, and the length it needed */
    char small[16];
    assert_int_equal(plan_line_format(&l, small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
}

/* Each of these changes to a good line makes it refused: a line of the
 * format before graph choices (v1), a graph choice half given, out of range
 * or missing, something after the last choice, a shape whose output size
 * does not follow, a math mode, layout or pass flag out of range. */
static void test_plan_line_refusals(void **state) {
    (void)state;
    plan_line l = sample_line(), back;
    char good[512];
    plan_line_format(&l, good, sizeof good);
    good[strlen(good) - 1] = '\0';
    const char *graph = strstr(good, " graph ");
    assert_non_null(graph);
    char bad[600];
    /* v1: the legacy part alone */
    snprintf(bad, sizeof bad, "%.*s", (int)(graph - good), good);
    assert_int_equal(plan_line_parse(bad, &back), 0);
    static const char *const graphs[] = {
        " graph 3 57 -1 5 -1 -1 -1 -1 0 4096000000 -1 -1",  /* no plan, but an engine */
        " graph 3 -1 -1 -1 -1 -1 -1 -1 0 4096000000 -1 -1", /* a plan without its engine */
        " graph 4096 57 -1 -1 -1 -1 -1 -1 0 4096000000 -1 -1",
        " graph -2 -1 -1 -1 -1 -1 -1 -1 0 4096000000 -1 -1",
        " graph 3 57 -1 -1 -1 -1 -1 -1 0 4096000000 -1",      /* a choice short */
        " graph 3 57 -1 -1 -1 -1 -1 -1 0 4096000000 -1 -1 7", /* something after */
        " graph 3 57 -1 -1 -1 -1 -1 -1 0 x -1 -1",
    };
    for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
        snprintf(bad, sizeof bad, "%.*s%s", (int)(graph - good), good, graphs[i]);
        if (plan_line_parse(bad, &back)) fail_msg("taken: '%s'", bad);
    }
    /* the same graph part as the good line's is taken (the list above changes only what it says) */
    snprintf(bad, sizeof bad, "%.*s%s", (int)(graph - good), good, " graph 3 57 -1 -1 -1 -1 -1 -1 0 4096000000 -1 -1");
    assert_int_equal(plan_line_parse(bad, &back), 1);
    /* the legacy part's fields, one at a time */
    struct {
        const char *from, *to;
    } edits[] = {
        {"64 256 14 14 256 3 3 1 1 1 1 14 14 ", "64 256 14 14 256 3 3 1 1 1 1 13 14 "}, /* P does not follow */
        {"64 256 14 14 256 3 3 1 1 1 1 14 14 ", "0 256 14 14 256 3 3 1 1 1 1 14 14 "},  /* no images */
        {"math 2 ", "math 7 "},
        {"layout 1 ", "layout 3 "},
        {"fwd 1 ", "fwd 2 "},
        {"filter 1 3 ", "filter 1 -3 "},
    };
    char look[64];
    snprintf(look, sizeof look, "math %d layout %d ", l.math, l.layout);
    assert_non_null(strstr(good, look)); /* the edits below are written for this line */
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        const char *at = strstr(good, edits[i].from);
        if (!at) fail_msg("the sample line lacks '%s': '%s'", edits[i].from, good);
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - good), good, edits[i].to, at + strlen(edits[i].from));
        if (plan_line_parse(bad, &back)) fail_msg("taken: '%s'", bad);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_then_restore),
        cmocka_unit_test(test_plan_line_round_trip),
        cmocka_unit_test(test_plan_line_refusals),
    };
    return cmocka_run_group_tests_name("plans", tests, NULL, NULL);
}
