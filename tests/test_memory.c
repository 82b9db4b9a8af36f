/*
 * tests/test_memory.c - the memory estimate of a run (train/memory.h,
 * net_memory_estimate in model/net.h) and the check built on it.
 *
 *   - net_memory_estimate: the activation part is linear in the batch, the
 *     parameters do not depend on it, and a finalized net gives the same
 *     numbers as the net before net_finalize;
 *   - the estimate of a whole run on the CPU is within 25% of the growth of
 *     the process's peak resident memory (VmHWM, reset through
 *     /proc/self/clear_refs) over a real run of ResNet-20 at two batch sizes;
 *   - memory_check refuses a run that cannot fit (ResNet-50, batch 4096 on
 *     ImageNet-size images: over a terabyte, estimated and never allocated)
 *     with a message naming train.batch_size, and train.memory_check = false
 *     lets it pass;
 *   - hostmem_query reports ulimit -v as the bound when that is lowest (in a
 *     child process).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/hostmem.h"
#include "model/net.h"
#include "model/zoo.h"
#include "train/config.h"
#include "train/input.h"
#include "dist/exchange_impl.h"
#include "train/memory.h"
#include "train/step.h"
#include "train/trainer.h"

static void set(config *cfg, const char *kv) { assert_int_equal(config_override(cfg, kv), CNT_OK); }

/* ResNet-20 on synthetic 3x32x32 images: a few steps, no checkpoints. */
static void small_config(config *cfg, int batch_size) {
    config_defaults(cfg);
    set(cfg, "model.name=resnet20");
    set(cfg, "data.kind=synthetic");
    set(cfg, "data.synthetic_shape=3x32x32");
    set(cfg, "data.synthetic_train=1024");
    set(cfg, "data.synthetic_test=256");
    set(cfg, "train.epochs=1");
    set(cfg, "train.max_steps=2");
    set(cfg, "train.log_every=1");
    set(cfg, "train.device=cpu");
    set(cfg, "checkpoint.every_epochs=0");
    set(cfg, "train.out_dir=/tmp/cnt_test_memory");
    char kv[64];
    snprintf(kv, sizeof kv, "train.batch_size=%d", batch_size);
    set(cfg, kv);
    assert_int_equal(config_validate(cfg), CNT_OK);
}

/* A "VmRSS:" / "VmHWM:" line of /proc/self/status, in bytes; 0 when absent. */
static size_t read_status(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0) sscanf(line + klen, " %llu", &kb);
    fclose(f);
    return (size_t)kb * 1024;
}

static void test_net_estimate_scales_with_batch(void **state) {
    (void)state;
    const backend *be = backend_cpu();
    zoo_options zo = {0, 1, -1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    int out, aux;
    net *nt = net_create(be, 3, 32, 32, 10);
    assert_int_equal(zoo_build(nt, "resnet20", &zo, &out, &aux), CNT_OK);
    net_memory m1, m2, m3;
    net_memory_estimate(nt, 64, &m1);
    net_memory_estimate(nt, 128, &m2);
    net_memory_estimate(nt, 192, &m3);
    assert_true(m1.params == nt->n_params * sizeof(float) && m2.params == m1.params);
    assert_true(m2.grads == m1.grads && m2.buffers == m1.buffers);
    /* the outputs and gradients alive at once (their shared pool), the
     * input's gradient, the shortcuts' copies: all per image (batch norm's
     * saved statistics are per channel; the pool's 16-float rounding is exact
     * for these batches) */
    assert_true(m3.activations - m2.activations == m2.activations - m1.activations);
    assert_true(m2.activations > 199 * m1.activations / 100 && m2.activations <= 2 * m1.activations);
    assert_true(m1.activations > 50 * m1.params); /* 95x: ResNet-20's 1 MiB of weights, 98 MiB at batch 64 */
    assert_true(m2.total > m1.total && m3.total > m2.total);
    /* net_finalize allocates what the estimate said it would: the same numbers after it */
    assert_int_equal(net_finalize(nt, out, aux, 64), CNT_OK);
    net_memory_estimate(nt, 64, &m3);
    assert_memory_equal(&m1, &m3, sizeof m1);
    net_free(nt);
}

/* The forms of the convolution filters a backend keeps between a step's
 * forward and backward (backend_ctx.weights_epoch, model/backend.h) are counted
 * apart, in the total, once per convolution and independent of the batch:
 * here a CPU backend that says it keeps 2 bytes a filter value, on
 * ResNet-20, whose 19 convolutions hold 267,696 filter values (3*16*9 for
 * the stem; 6 of 16*16*9; 32*16*9 and 5 of 32*32*9; 64*32*9 and 5 of
 * 64*64*9; its option-A shortcuts have no convolution). */
static size_t kept_16bit(const backend_ctx *ctx, const conv_params *p) {
    (void)ctx;
    return (size_t)p->K * p->C * p->R * p->S * 2;
}

static void test_net_estimate_counts_kept_filters(void **state) {
    (void)state;
    backend kb = *backend_cpu();
    kb.conv_filter_kept = kept_16bit;
    zoo_options zo = {0, 1, -1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    int out, aux;
    net *plain = net_create(backend_cpu(), 3, 32, 32, 10), *keeping = net_create(&kb, 3, 32, 32, 10);
    assert_int_equal(zoo_build(plain, "resnet20", &zo, &out, &aux), CNT_OK);
    assert_int_equal(zoo_build(keeping, "resnet20", &zo, &out, &aux), CNT_OK);
    net_memory m0, m1, m2;
    net_memory_estimate(plain, 64, &m0);
    net_memory_estimate(keeping, 64, &m1);
    net_memory_estimate(keeping, 128, &m2);
    assert_int_equal(m0.kept, 0); /* the CPU backend keeps nothing */
    assert_int_equal(m1.kept, 2 * 267696);
    assert_int_equal(m2.kept, m1.kept);
    assert_int_equal(m1.total, m0.total + m1.kept);
    net_free(plain);
    net_free(keeping);
}

/* The estimate of a run of cfg, as run_setup computes it. */
static int estimate(const config *cfg, run_memory *m) {
    input_data d;
    if (input_load(cfg, &d) != CNT_OK) return CNT_ERR;
    loader_options lo, eo;
    input_loader_options(cfg, &d, backend_cpu(), 0, 1, &lo, &eo);
    int rc = memory_estimate(cfg, backend_cpu(), &d, &lo, &eo, NULL, m);
    input_free(&d);
    return rc;
}

/* Runs cfg in a child process, as the trainer would (nothing run before in
 * it: freed memory a previous run left in the allocator's pools would be
 * reused and hide growth), and reports the growth of its peak resident
 * memory over the run and the run's estimate (made after the run, so its own
 * allocations are not measured). 0, or -1 when the child failed. */
static int measure(const config *cfg, size_t *grown, size_t *est) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        size_t r[2] = {0, 0};
        FILE *f = fopen("/proc/self/clear_refs", "w"); /* the peak restarts from the current size */
        if (f) {
            fputs("5", f);
            fclose(f);
        }
        size_t before = read_status("VmRSS:");
        run_memory m;
        if (f && before && trainer_run(cfg, NULL) == CNT_OK && estimate(cfg, &m) == CNT_OK) {
            r[0] = read_status("VmHWM:") - before;
            r[1] = m.device + m.host;
        }
        _exit(write(fd[1], r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    size_t r[2] = {0, 0};
    ssize_t got = read(fd[0], r, sizeof r);
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    *grown = r[0];
    *est = r[1];
    return got == (ssize_t)sizeof r && WIFEXITED(status) && WEXITSTATUS(status) == 0 && r[0] && r[1] ? 0 : -1;
}

static void test_estimate_matches_peak_rss(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer's red zones and quarantine are resident memory the
     * estimate does not (and should not) count (make test-sanitize) */
    print_message("skipped: peak resident memory under AddressSanitizer is not the run's\n");
    skip();
#endif
    const int batches[] = {64, 256};
    size_t est[2];
    for (int i = 0; i < 2; i++) {
        config cfg;
        small_config(&cfg, batches[i]);
        size_t grown;
        assert_int_equal(measure(&cfg, &grown, &est[i]), 0);
        /* the data set the run loads is not part of the estimate (it is in
         * memory when the estimate is made): 3x32x32 bytes per image */
        size_t data = (size_t)(1024 + 256) * 3 * 32 * 32;
        double ratio = (double)est[i] / (double)(grown - data);
        print_message("batch %d: estimate %.1f MiB, peak resident memory grew by %.1f MiB (%.1f MiB of it the "
                      "data set): ratio %.3f\n",
                      batches[i], est[i] / 1048576.0, grown / 1048576.0, data / 1048576.0, ratio);
        assert_true(ratio > 0.75 && ratio < 1.25);
    }
    /* four times the batch: about four times the memory (all but the parameters scale) */
    double scale = (double)est[1] / (double)est[0];
    assert_true(scale > 3.5 && scale < 4.05);
}

/* ResNet-50 at batch 4096 on 3x224x224: about 1.2 TB, estimated only. */
static void test_check_refuses_what_cannot_fit(void **state) {
    (void)state;
    config cfg;
    config_defaults(&cfg);
    set(&cfg, "model.name=resnet50");
    set(&cfg, "data.kind=synthetic");
    set(&cfg, "data.synthetic_shape=3x224x224");
    set(&cfg, "data.synthetic_train=16");
    set(&cfg, "data.synthetic_test=16");
    set(&cfg, "train.batch_size=4096");
    set(&cfg, "train.device=cpu");
    input_data d;
    assert_int_equal(input_load(&cfg, &d), CNT_OK);
    loader_options lo, eo;
    input_loader_options(&cfg, &d, backend_cpu(), 0, 1, &lo, &eo);
    run_memory m;
    assert_int_equal(memory_estimate(&cfg, backend_cpu(), &d, &lo, &eo, NULL, &m), CNT_OK);
    assert_int_equal(m.max_batch, 4096);
    /* 327 GiB: the outputs a backward reads, and the tensors alive at once besides */
    assert_true((double)m.net.activations > 250.0 * (1 << 30));
    assert_true(m.net.activations > m.device / 2);

    assert_int_equal(memory_check(&cfg, backend_cpu(), &d, &lo, &eo, NULL), CNT_ERR);
    const char *msg = cnt_err_msg();
    assert_non_null(strstr(msg, "model resnet50 with batch 4096"));
    assert_non_null(strstr(msg, "needs about"));
    assert_non_null(strstr(msg, "activations"));
    assert_non_null(strstr(msg, "lower train.batch_size"));
    assert_non_null(strstr(msg, "train.memory_check = false"));
    assert_null(strstr(msg, "kept filters")); /* the CPU backend keeps none */

    /* a backend that keeps filters (a GPU's, with the CPU's memory) names them */
    backend kb = *backend_cpu();
    kb.is_cpu = 0;
    kb.conv_filter_kept = kept_16bit;
    assert_int_equal(memory_check(&cfg, &kb, &d, &lo, &eo, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "of GPU memory per rank"));
    assert_non_null(strstr(cnt_err_msg(), ", kept filters 0.04,"));

    set(&cfg, "train.memory_check=false");
    assert_int_equal(memory_check(&cfg, backend_cpu(), &d, &lo, &eo, NULL), CNT_OK);

    /* a model that cannot be built is left to make_model to report */
    set(&cfg, "model.name=resnet21");
    set(&cfg, "train.memory_check=true");
    assert_int_equal(memory_check(&cfg, backend_cpu(), &d, &lo, &eo, NULL), CNT_OK);
    input_free(&d);
}

/* Parameter-server workers keep no momentum on the device (the servers do;
 * the stepper frees the optimizer's buffer where the exchange keeps the
 * state): their estimate is a model's worth smaller than allreduce's, their
 * host staging holds the gradients and the parameters (2 bytes per
 * parameter byte) where the MPI reducer's holds one copy, and the stepper
 * holds no momentum buffer. */
static void test_ps_workers_keep_no_momentum(void **state) {
    (void)state;
    config cfg;
    small_config(&cfg, 32);
    input_data d;
    assert_int_equal(input_load(&cfg, &d), CNT_OK);
    loader_options lo, eo;
    input_loader_options(&cfg, &d, backend_cpu(), 0, 1, &lo, &eo);
    run_memory all, with_ps;
    exchange_opts xo = config_exchange_opts(&cfg);
    exchange_footprint ar = exchange_footprint_for(&xo, 2, 0);
    assert_int_equal(memory_estimate(&cfg, backend_cpu(), &d, &lo, &eo, &ar, &all), CNT_OK);
    set(&cfg, "dist.mode=ps");
    xo = config_exchange_opts(&cfg);
    exchange_footprint servers = exchange_footprint_for(&xo, 2, 0);
    assert_int_equal(memory_estimate(&cfg, backend_cpu(), &d, &lo, &eo, &servers, &with_ps), CNT_OK);
    assert_true(all.momentum > 0 && all.momentum == with_ps.momentum); /* a checkpoint's, on the host */
    assert_int_equal(all.device - with_ps.device, all.momentum);
    size_t P = all.momentum; /* momentum > 0: a model's worth of bytes */
    assert_int_equal(with_ps.host - all.host, P);
    input_free(&d);

    net *nt = net_create(backend_cpu(), 3, 32, 32, 10);
    int out, aux;
    zoo_options zo = {0, 0, -1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    assert_int_equal(zoo_build(nt, "resnet20", &zo, &out, &aux), CNT_OK);
    assert_int_equal(net_finalize(nt, out, aux, 8), CNT_OK);
    optim_opts oo = config_optim_opts(&cfg);
    loss_scale_opts lso = {0};
    step_opts so = {0};
    stepper st;
    stepper_init(&st, nt, exchange_none(), NULL, &oo, &lso, &so, 8, 3, 32 * 32, 0);
    assert_non_null(st.opt.momentum_buf);
    stepper_free(&st);
    /* a stand-in for the servers' version: only its traits are read */
    static const exchange_ops no_ops = {0};
    exchange keeper = {.ops = &no_ops, .traits = {.keeps_state = 1}, .world = 1};
    stepper_init(&st, nt, &keeper, NULL, &oo, &lso, &so, 8, 3, 32 * 32, 0);
    assert_null(st.opt.momentum_buf);
    stepper_free(&st);
    net_free(nt);
}

/* Parameter servers on a node take their own (small) share of its memory,
 * not a worker's: 2 workers and 1 server on 23 GiB, a server needing 0.1
 * GiB, leave each worker 11.45 GiB (a whole third each, 7.67, had refused
 * workers of 9 GiB that fit). */
static void test_servers_take_their_own_share(void **state) {
    (void)state;
    const size_t G = 1u << 30;
    size_t avail = 23 * G, server = G / 10;
    assert_int_equal(memory_share(avail, 3, 0, 0), avail / 3);
    assert_int_equal(memory_share(avail, 3, 1, server), (avail - server) / 2);
    assert_true(memory_share(avail, 3, 1, server) > 9 * G);
    assert_int_equal(memory_share(avail, 4, 2, server), (avail - 2 * server) / 2);
    /* servers that need more than there is leave the workers nothing */
    assert_int_equal(memory_share(G, 2, 1, 2 * G), 0);
    /* a node of servers only: no worker to share among */
    assert_int_equal(memory_share(avail, 1, 1, server), 0);

    /* a server holds its shard's parameters, momentum and stand-in zeros and
     * one receive buffer per worker: (3 + W) x P / K */
    assert_int_equal(memory_server_bytes(1000 * 4, 2, 4), (3 + 4) * 2000);
    assert_int_equal(memory_server_bytes(1000 * 4, 3, 2), (3 + 2) * 1336);
}

static void test_hostmem_ulimit(void **state) {
    (void)state;
    hostmem m;
    assert_int_equal(hostmem_query(&m), 0);
    assert_true(m.available > 0 && m.available <= m.total);
    assert_non_null(m.bound);
    /* in a child: address space limited to what is mapped now plus 256 MiB */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        size_t vm = read_status("VmSize:");
        struct rlimit rl = {vm + ((size_t)256 << 20), vm + ((size_t)256 << 20)};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(2);
        hostmem c;
        if (hostmem_query(&c) != 0) _exit(3);
        _exit(strcmp(c.bound, "ulimit -v") == 0 && c.available <= ((size_t)256 << 20) && c.available > 0 ? 0 : 4);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimate_matches_peak_rss),
        cmocka_unit_test(test_net_estimate_scales_with_batch),
        cmocka_unit_test(test_net_estimate_counts_kept_filters),
        cmocka_unit_test(test_check_refuses_what_cannot_fit),
        cmocka_unit_test(test_servers_take_their_own_share),
        cmocka_unit_test(test_hostmem_ulimit),
        cmocka_unit_test(test_ps_workers_keep_no_momentum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
