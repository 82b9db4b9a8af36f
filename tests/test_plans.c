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
 * go through them on the CPU, where rank 0 has nothing to send).
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_then_restore),
    };
    return cmocka_run_group_tests_name("plans", tests, NULL, NULL);
}
