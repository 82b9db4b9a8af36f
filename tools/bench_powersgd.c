/*
 * tools/bench_powersgd.c - the host arithmetic of dist.compress = powersgd
 * (dist/powersgd.c) on a zoo model's gradients, against the conversion that
 * dist.compress = fp16 does to the same buffer (to halves and back), timed
 * in turns on one thread: what each costs the communication thread per
 * step, sums over the ranks left out (a world of one).
 *
 *   build/tools/bench_powersgd [--model M] [--shape CxHxW] [--classes K] [--rank R] [--reps N]
 *
 * Defaults: resnet50, 3x224x224, 1000 classes, rank 2, 7 rounds. Prints the
 * gradient's size, what PowerSGD compresses and sends, and the median time
 * of each side with their ratio. docs/data-parallel.md (e4) quotes it.
 * Exit status 0; 2 for usage errors; 1 when the model cannot be built.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/half.h"
#include "common/rng.h"
#include "common/timer.h"
#include "dist/powersgd.h"
#include "model/backend.h"
#include "model/zoo.h"

static void no_sum(float *buf, size_t n, void *ctx) {
    (void)buf;
    (void)n;
    (void)ctx;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int usage(const char *why) {
    fprintf(stderr, "bench_powersgd: %s\nusage: bench_powersgd [--model M] [--shape CxHxW] [--classes K] "
                    "[--rank R] [--reps N]\n", why);
    return 2;
}

int main(int argc, char **argv) {
    const char *model = "resnet50";
    int c = 3, h = 224, w = 224, classes = 1000, rank = 2, reps = 7;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) return usage("every option takes a value");
        const char *a = argv[i], *v = argv[i + 1];
        if (strcmp(a, "--model") == 0) model = v;
        else if (strcmp(a, "--shape") == 0) {
            if (sscanf(v, "%dx%dx%d", &c, &h, &w) != 3 || c < 1 || h < 1 || w < 1) return usage("--shape: CxHxW");
        } else if (strcmp(a, "--classes") == 0) {
            if ((classes = atoi(v)) < 2) return usage("--classes: at least 2");
        } else if (strcmp(a, "--rank") == 0) {
            if ((rank = atoi(v)) < 1 || rank > 32) return usage("--rank: 1 to 32");
        } else if (strcmp(a, "--reps") == 0) {
            if ((reps = atoi(v)) < 1 || reps > 1000) return usage("--reps: 1 to 1000");
        } else {
            return usage("unknown option");
        }
    }
    zoo_options zo = {0};
    /* batch 1: the parameters are what counts, activations stay small */
    net *nt = zoo_create(backend_cpu(), model, &zo, c, h, w, classes, BACKEND_LAYOUT_NCHW, 1);
    if (!nt) {
        fprintf(stderr, "bench_powersgd: %s\n", cnt_err_msg());
        return 1;
    }
    size_t n = nt->n_params, values, wire;
    powersgd_tensor *t = powersgd_net_tensors(nt);
    int k = powersgd_summary(t, nt->n_param_tensors, rank, &values, &wire);
    powersgd *p = powersgd_create(t, nt->n_param_tensors, n, rank, 1);
    float *g = cnt_malloc(n * sizeof(float)), *g0 = cnt_malloc(n * sizeof(float));
    uint16_t *half = cnt_malloc(n * sizeof(uint16_t));
    rng r;
    rng_seed(&r, 1, 1);
    for (size_t i = 0; i < n; i++) g0[i] = rng_normal(&r) * 1e-3f;
    double *tp = cnt_malloc((size_t)reps * sizeof(double)), *th = cnt_malloc((size_t)reps * sizeof(double));
    /* one round of each first (page faults, the error's first use), then in turns */
    for (int i = -1; i < reps; i++) {
        memcpy(g, g0, n * sizeof(float));
        double t0 = time_now();
        powersgd_reduce(p, g, 0, n, no_sum, NULL);
        double t1 = time_now();
        fp16_from_float_array(half, g0, n);
        fp16_to_float_array(g, half, n);
        double t2 = time_now();
        if (i >= 0) {
            tp[i] = (t1 - t0) * 1e3;
            th[i] = (t2 - t1) * 1e3;
        }
    }
    qsort(tp, (size_t)reps, sizeof *tp, cmp_double);
    qsort(th, (size_t)reps, sizeof *th, cmp_double);
    double mp = tp[reps / 2], mh = th[reps / 2], mib = 1048576.0;
    printf("%s %dx%dx%d, %d classes: %zu gradient values (%.2f MiB); PowerSGD rank %d compresses %d of %d tensors "
           "(%.1f%% of the values) and sends %.2f MiB a step\n",
           model, c, h, w, classes, n, (double)n * 4 / mib, rank, k, nt->n_param_tensors,
           100.0 * (double)values / (double)n, (double)wire * 4 / mib);
    printf("one thread, median of %d: PowerSGD's arithmetic %.1f ms (%.0f to %.0f), fp16's conversions %.1f ms (%.0f "
           "to %.0f): %.2fx\n",
           reps, mp, tp[0], tp[reps - 1], mh, th[0], th[reps - 1], mp / mh);
    free(tp);
    free(th);
    free(g);
    free(g0);
    free(half);
    free(t);
    powersgd_free(p);
    net_free(nt);
    return 0;
}
