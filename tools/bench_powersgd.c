/*
 * tools/bench_powersgd.c - the host arithmetic of dist.compress = powersgd
 * (dist/powersgd.c) on a zoo model's gradients, against the conversion that
 * dist.compress = fp16 does to the same buffer (to halves and back), timed
 * in turns on one thread: what each costs the communication thread per
 * step, sums over the ranks left out (a world of one).
 *
 *   build/tools/bench_powersgd [--model M] [--shape CxHxW] [--classes K] [--rank R] [--reps N] [--threads T]
 *                              [--device cuda]
 *
 * Defaults: resnet50, 3x224x224, 1000 classes, rank 2, 7 rounds. Prints the
 * gradient's size, what PowerSGD compresses and sends, and the median time
 * of each side with their ratio. docs/data-parallel.md (e4) quotes it.
 * --threads T (2 or more): PowerSGD on T threads too (powersgd_set_threads),
 * a third side in the turns, its median and speed-up over one thread, and
 * whether its results were the one thread's bit for bit (exit 1 if not).
 * --device cuda: the same on the GPU too (powersgd_create_on: cuBLAS GEMMs
 * and the backend's kernels, what dist.backend = nccl runs), each round
 * from the same gradient uploaded untimed, timed to the device's end (a
 * download of one value), its median, ns a compressed value and speed-up
 * over one host thread: the rate `tools/simulate --powersgd R,NS` needs for
 * GPU arithmetic, which the simulator has so far assumed. Its results
 * differ from the host's by the GEMMs' rounding: the output's relative
 * difference is printed. Exit 1 where no GPU can be used.
 * Exit status 0; 2 for usage errors; 1 when the model cannot be built.
 */
#include <math.h>
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
                    "[--rank R] [--reps N] [--threads T] [--device cuda]\n", why);
    return 2;
}

int main(int argc, char **argv) {
    const char *model = "resnet50";
    int c = 3, h = 224, w = 224, classes = 1000, rank = 2, reps = 7, threads = 1, cuda = 0;
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
        } else if (strcmp(a, "--threads") == 0) {
            if ((threads = atoi(v)) < 2 || threads > 256) return usage("--threads: 2 to 256");
        } else if (strcmp(a, "--device") == 0) {
            if (strcmp(v, "cuda") != 0) return usage("--device: cuda (the host is always timed)");
            cuda = 1;
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
    /* the same state on T threads: each round both start from the same error and Q */
    powersgd *pt = threads > 1 ? powersgd_create(t, nt->n_param_tensors, n, rank, 1) : NULL;
    if (pt) powersgd_set_threads(pt, threads);
    float *g = cnt_malloc(n * sizeof(float)), *g0 = cnt_malloc(n * sizeof(float));
    float *gt = pt ? cnt_malloc(n * sizeof(float)) : NULL;
    int same = 1;
    const backend *dev = NULL;
    powersgd *pd = NULL;
    float *gd = NULL, *gdh = NULL;
    char dev_name[160] = "";
    if (cuda) {
        dev = backend_get_for_rank(BACKEND_DEVICE_CUDA, 0);
        if (!dev) {
            fprintf(stderr, "bench_powersgd: --device cuda: %s\n", cnt_err_msg());
            return 1;
        }
        dev->describe(dev_name, sizeof dev_name);
        pd = powersgd_create_on(dev, t, nt->n_param_tensors, n, rank, 1);
        gd = dev->alloc(n * sizeof(float));
        gdh = cnt_malloc(n * sizeof(float));
    }
    double *td = cnt_malloc((size_t)reps * sizeof(double)), diff = 0;
    uint16_t *half = cnt_malloc(n * sizeof(uint16_t));
    rng r;
    rng_seed(&r, 1, 1);
    for (size_t i = 0; i < n; i++) g0[i] = rng_normal(&r) * 1e-3f;
    double *tp = cnt_malloc((size_t)reps * sizeof(double)), *th = cnt_malloc((size_t)reps * sizeof(double));
    double *tt = cnt_malloc((size_t)reps * sizeof(double));
    /* one round of each first (page faults, the error's first use), then in
     * turns; p and pt see the same gradients, so their outputs (and states)
     * must stay the same bits */
    float *gh = cnt_malloc(n * sizeof(float));
    for (int i = -1; i < reps; i++) {
        memcpy(g, g0, n * sizeof(float));
        double t0 = time_now();
        powersgd_reduce(p, g, 0, n, no_sum, NULL);
        double t1 = time_now();
        fp16_from_float_array(half, g0, n);
        fp16_to_float_array(gh, half, n);
        double t2h = time_now(), t2 = t2h, t3 = t2;
        if (pt) {
            memcpy(gt, g0, n * sizeof(float));
            t2 = time_now();
            powersgd_reduce(pt, gt, 0, n, no_sum, NULL);
            t3 = time_now();
            same &= memcmp(g, gt, n * sizeof(float)) == 0;
        }
        double t4 = 0, t5 = 0;
        if (pd) {
            dev->upload(gd, g0, n * sizeof(float));
            float one;
            dev->download(&one, gd, sizeof one); /* the upload done */
            t4 = time_now();
            powersgd_reduce(pd, gd, 0, n, no_sum, NULL);
            dev->download(&one, gd, sizeof one); /* waits for what is queued */
            t5 = time_now();
            dev->download(gdh, gd, n * sizeof(float));
            double d = 0, s = 0;
            for (size_t j = 0; j < n; j++) {
                d += ((double)gdh[j] - g[j]) * ((double)gdh[j] - g[j]);
                s += (double)g[j] * g[j];
            }
            double rel = sqrt(d / (s > 0 ? s : 1));
            if (rel > diff) diff = rel;
        }
        if (i >= 0) {
            tp[i] = (t1 - t0) * 1e3;
            th[i] = (t2h - t1) * 1e3;
            tt[i] = (t3 - t2) * 1e3;
            td[i] = (t5 - t4) * 1e3;
        }
    }
    free(gh);
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
    if (pd) {
        qsort(td, (size_t)reps, sizeof *td, cmp_double);
        double md = td[reps / 2];
        printf("%s, median of %d: PowerSGD's arithmetic %.2f ms (%.2f to %.2f), %.3f ns a compressed value: %.1fx "
               "one host thread's speed; output within %.1e of the host's\n",
               dev_name, reps, md, td[0], td[reps - 1], md * 1e6 / (double)values, mp / md, diff);
    }
    if (pt) {
        qsort(tt, (size_t)reps, sizeof *tt, cmp_double);
        double mt = tt[reps / 2];
        printf("%d threads, median of %d: PowerSGD's arithmetic %.1f ms (%.0f to %.0f): %.2fx one thread's speed; "
               "results %s\n",
               threads, reps, mt, tt[0], tt[reps - 1], mp / mt,
               same ? "the same bits as one thread's" : "DIFFERENT from one thread's");
    }
    free(tp);
    free(th);
    free(tt);
    free(td);
    free(gt);
    free(gdh);
    powersgd_free(pt);
    powersgd_free(pd);
    if (dev) dev->free(gd);
    free(g);
    free(g0);
    free(half);
    free(t);
    powersgd_free(p);
    net_free(nt);
    return same ? 0 : 1;
}
