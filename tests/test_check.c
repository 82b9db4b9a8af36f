/*
 * tests/test_check.c - the error-message helpers of common/check.h:
 * cnt_err_prefix and cnt_err_suffix add context around the stored message
 * (which lives in the very buffer they write), return CNT_ERR, and truncate
 * a message that would not fit instead of overrunning. log_warn and
 * log_error write each line, rank prefix included, with one write: mpirun
 * forwards every write of every rank as it comes, so a line in pieces can be
 * cut apart by another rank's output. common/fileio.h's file_dir_of.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/cpus.h"
#include "common/fileio.h"
#include "common/threads.h"
#include "common/timer.h"

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

/* stderr on a SOCK_SEQPACKET socket keeps the writes apart: one recv returns
 * exactly one write. */
static void test_log_line_is_one_write(void **state) {
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    int saved = dup(2);
    assert_true(saved >= 0);
    fflush(stderr);
    assert_int_equal(dup2(sv[0], 2), 2);
    cnt_log_set_rank(1, 2);
    log_error("dataset directory %s: %s", "/nope", "No such file or directory");
    log_warn("stall: step %d", 3);
    cnt_log_set_rank(0, 1);
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    char got[256];
    ssize_t n = recv(sv[1], got, sizeof got - 1, 0);
    assert_true(n > 0);
    got[n] = '\0';
    assert_string_equal(got, "[rank 1] error: dataset directory /nope: No such file or directory\n");
    n = recv(sv[1], got, sizeof got - 1, 0);
    assert_true(n > 0);
    got[n] = '\0';
    assert_string_equal(got, "[rank 1] warning: stall: step 3\n");
    close(sv[0]);
    close(sv[1]);
}

/* common/cpus.h: a mask's ranges, and this process's own mask. */
static void test_cpus_format(void **state) {
    (void)state;
    cpus_mask m;
    memset(&m, 0, sizeof m);
    char buf[64];
    cpus_format(&m, buf, sizeof buf);
    assert_string_equal(buf, "");
    int on[] = {0, 1, 2, 3, 8, 10, 11, 1023};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) m.bits[on[i] / 8] |= (unsigned char)(1u << (on[i] % 8));
    assert_int_equal(cpus_count(&m), 8);
    cpus_format(&m, buf, sizeof buf);
    assert_string_equal(buf, "0-3,8,10-11,1023");
    cpus_format(&m, buf, 12); /* too short: cut at a whole range, marked */
    assert_string_equal(buf, "0-3,8...");
    cpus_mask mine;
    int n = cpus_allowed(&mine);
    assert_true(n >= 1 && n == cpus_count(&mine) && n <= cpus_online());
}

/* cpus_parse: what sysfs and cpusets write, and what they never write. */
static void test_cpus_parse(void **state) {
    (void)state;
    cpus_mask m;
    char buf[64];
    assert_int_equal(cpus_parse("0-3,8,10-11,1023\n", &m), 8);
    cpus_format(&m, buf, sizeof buf);
    assert_string_equal(buf, "0-3,8,10-11,1023");
    assert_int_equal(cpus_parse("5", &m), 1);
    assert_int_equal(cpus_parse("", &m), 0);
    assert_int_equal(cpus_parse("\n", &m), 0);
    const char *bad[] = {"1024", "3-1", "0-", "-2", "0,,1", "0,", "a", "0 1", "1-2-3", "0\n1", "0-1023x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (cpus_parse(bad[i], &m) != -1) fail_msg("cpus_parse took '%s'", bad[i]);
        assert_int_equal(cpus_count(&m), 0);
    }
    cpus_mask a, b;
    cpus_parse("0-7,16", &a);
    cpus_parse("4-11,16-17", &b);
    assert_int_equal(cpus_and(&a, &a, &b), 5);
    cpus_format(&a, buf, sizeof buf);
    assert_string_equal(buf, "4-7,16");
}

/* cpus_of_pci: a GPU's local CPUs from a sysfs tree (here a made-up one):
 * the bus id as CUDA writes it (upper case) and as NVML does (8-digit
 * domain) both find the lower-case directory, and a domain wider than 16
 * bits keeps its digits; a missing device or file, or
 * a file that is no list, gives 0. */
static void test_cpus_of_pci(void **state) {
    (void)state;
    char root[] = "/tmp/cnt_sysfs_XXXXXX", dir[256], path[300];
    assert_non_null(mkdtemp(root));
    snprintf(dir, sizeof dir, "%s/bus/pci/devices/0000:1b:00.0", root);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/bus/pci/devices/0000:3d:00.0'", dir, root);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/local_cpulist", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("0-15,64-79\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/bus/pci/devices/0000:3d:00.0/local_cpulist", root);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("ff,ffff\n", f); /* a mask, not a list (local_cpus): refused */
    fclose(f);
    cpus_mask m;
    char buf[64];
    assert_int_equal(cpus_of_pci(root, "0000:1B:00.0", &m), 32);
    cpus_format(&m, buf, sizeof buf);
    assert_string_equal(buf, "0-15,64-79");
    assert_int_equal(cpus_of_pci(root, "00000000:1B:00.0", &m), 32);
    /* a domain past 16 bits (VMD) is not cut to its last 4 digits, which would name 0000:1b:00.0 */
    assert_int_equal(cpus_of_pci(root, "10000:1B:00.0", &m), 0);
    assert_int_equal(cpus_of_pci(root, "00010000:1B:00.0", &m), 0);
    assert_int_equal(cpus_of_pci(root, "0000:3D:00.0", &m), 0);
    assert_int_equal(cpus_of_pci(root, "0000:99:00.0", &m), 0);
    assert_int_equal(cpus_of_pci(root, "garbage", &m), 0);
    assert_int_equal(cpus_count(&m), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* cnt_cond_timedwait: unsignalled, it returns 1 after about its time, also
 * across a second boundary (0.35 s three times from any start). */
static void test_cond_timedwait(void **state) {
    (void)state;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cnt_mutex_init(&mu);
    cnt_cond_init(&cv);
    cnt_mutex_lock(&mu);
    for (int k = 0; k < 3; k++) {
        double t0 = time_now();
        assert_int_equal(cnt_cond_timedwait(&cv, &mu, 0.35), 1);
        double dt = time_now() - t0;
        assert_true(dt >= 0.34 && dt < 5.0);
    }
    cnt_mutex_unlock(&mu);
    pthread_cond_destroy(&cv);
    pthread_mutex_destroy(&mu);
}

/* cnt_thread_name: the name reads back, formatted, and one past Linux's 15
 * characters is cut instead of refused (pthread_setname_np refuses it). */
static void test_thread_name(void **state) {
    (void)state;
    char got[32];
    cnt_thread_name(pthread_self(), "cnt-%s-%d", "train", 3);
    assert_int_equal(pthread_getname_np(pthread_self(), got, sizeof got), 0);
    assert_string_equal(got, "cnt-train-3");
    cnt_thread_name(pthread_self(), "cnt-a-very-long-thread-name");
    assert_int_equal(pthread_getname_np(pthread_self(), got, sizeof got), 0);
    assert_string_equal(got, "cnt-a-very-long");
}

/* common/fileio.h's file_dir_of: the part before the last '/', "/" for a
 * file at the root, "." for a bare name; a directory that does not fit is
 * an error naming the path, never a cut one. */
/* cnt_thread_nice, in a child process (its nice values die with it), from
 * a thread that is not the main one, as the communication thread: it moves
 * only that thread, clamps at 19, and where lowering is not allowed (as an
 * unprivileged user: a root test drops to uid 65534 first) fails with
 * EACCES and leaves the thread as it was. */
static int nice_of(pid_t tid) {
    errno = 0;
    int v = getpriority(PRIO_PROCESS, (id_t)tid);
    return errno ? 99 : v;
}

static pid_t nice_main;

static void *nice_checks(void *arg) {
    int *bad = arg;
    pid_t me = (pid_t)syscall(SYS_gettid);
    int base = nice_of(me);
    if (geteuid() == 0) { /* privileged: lowering works; then as nobody, it must not */
        *bad |= cnt_thread_nice(-3) != 0 || nice_of(me) != base - 3 || nice_of(nice_main) != base ? 1 : 0;
        *bad |= cnt_thread_nice(3) != 0 || nice_of(me) != base ? 2 : 0;
        if (setresuid(65534, 65534, 65534) != 0) *bad |= 64;
    }
    errno = 0;
    *bad |= cnt_thread_nice(-1) != -1 || errno != EACCES || nice_of(me) != base ? 4 : 0;
    *bad |= cnt_thread_nice(100) != 0 || nice_of(me) != 19 || nice_of(nice_main) != base ? 8 : 0;
    return NULL;
}

static void test_thread_nice(void **state) {
    (void)state;
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        int bad = 0;
        pthread_t t;
        nice_main = (pid_t)syscall(SYS_gettid);
        if (pthread_create(&t, NULL, nice_checks, &bad) != 0 || pthread_join(t, NULL) != 0) _exit(90);
        _exit(bad);
    }
    int st = 0;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st)) fail_msg("cnt_thread_nice: check bits %d failed (1: lower, 2: raise back, 4: refused "
                                  "as unprivileged, 8: clamp at 19; 1 and 8 also: the main thread moved; 64, "
                                  "90: set-up)", WEXITSTATUS(st));
}

static void test_file_dir_of(void **state) {
    (void)state;
    char dir[16];
    assert_int_equal(file_dir_of("runs/a/trace.json", dir, sizeof dir), CNT_OK);
    assert_string_equal(dir, "runs/a");
    assert_int_equal(file_dir_of("/trace.json", dir, sizeof dir), CNT_OK);
    assert_string_equal(dir, "/");
    assert_int_equal(file_dir_of("trace.json", dir, sizeof dir), CNT_OK);
    assert_string_equal(dir, ".");
    assert_int_equal(file_dir_of("/a/very/long/directory/x", dir, sizeof dir), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "/a/very/long/directory/x"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpus_format),
        cmocka_unit_test(test_cpus_parse),
        cmocka_unit_test(test_cpus_of_pci),
        cmocka_unit_test(test_cond_timedwait),
        cmocka_unit_test(test_thread_name),
        cmocka_unit_test(test_thread_nice),
        cmocka_unit_test(test_prefix_and_suffix),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_log_line_is_one_write),
        cmocka_unit_test(test_file_dir_of),
    };
    return cmocka_run_group_tests_name("check", tests, NULL, NULL);
}
