/*
 * tools/simulate.c - predicts a data-parallel training step on 1 to
 * thousands of workers from one worker's step profile (issue 14, part 3).
 *
 *   build/tools/simulate PROFILE.json [options]
 *
 * PROFILE.json: `trainer --profile` (train/profile.h), optionally with the
 * allreduce curve of tools/profile.sh. The step model: train/sim.h.
 *
 * Options (defaults in brackets):
 *   --workers LIST          comma-separated worker counts [1,2,4,8,16,32,64,128,256,512]
 *   --gpus-per-node G       workers per node [1]
 *   --bw GBIT               inter-node link, Gbit/s [10]
 *   --intra-bw GBIT         intra-node link (hier), Gbit/s [40]
 *   --latency US            per-message latency alpha, us [5]
 *   --speed X               compute speed relative to the profile [1]
 *   --batch B               per-worker batch; compute scales linearly [the profile's]
 *   --backward-ratio R      backward = R x forward, same sum [the profile's]
 *   --images-per-s X        one worker's measured images/s: sets the speed
 *                           (after --batch and --backward-ratio; not with --speed)
 *   --overlap on|off        allreduce during backward [on]
 *   --bucket-mb M|auto      later buckets, MiB [the profile's]; auto: at each
 *                           N the size the model predicts fastest, as the
 *                           trainer's dist.bucket_mb = auto chooses it
 *                           (sim_choose_bucket; the table gains a bucket_mb
 *                           column and each choice's reason follows it)
 *   --first-bucket-mb F     first bucket, MiB [the profile's]
 *   --fp16                  half the bytes on the wire
 *   --powersgd R[,NS]       dist.compress = powersgd at rank R: each bucket's
 *                           region as P and Q sums, NS ns of host arithmetic
 *                           per compressed value [NS: 1.2 + 0.5 R, fitted to
 *                           the development VM's bench_powersgd, train/sim.h];
 *                           needs a profile with its "tensors" (train/profile.h)
 *   --powersgd-at buckets|end  where PowerSGD runs: each bucket's region as
 *                           the host path does, or after backward, the whole
 *                           gradient in two sums, as NCCL's ranks do (there
 *                           the arithmetic is the GPU's: give NS) [buckets]
 *   --algo ring|hier|curve  alpha-beta ring over all workers; hierarchical
 *                           (intra-node reduce-scatter, ring over nodes on
 *                           bytes/G, intra-node allgather); the profile's
 *                           measured curve (only at its world size) [ring]
 *   --curve mpi|ring        which measured curve --algo curve reads [mpi]
 *   --horovod CYCLE_MS,FUSION_MB  Horovod's cycle and fusion buffer instead
 *                           of fixed buckets
 *   --jitter PCT            stragglers: sigma = PCT % of compute [0]
 *   --ps-servers K          synchronous parameter servers (dist.mode = ps)
 *                           on K nodes of their own instead of the allreduce:
 *                           the workers push gradient shards and pull
 *                           parameters, each server's link carrying every
 *                           worker's copy of its shard [0: allreduce]
 *   --csv FILE              also write the table as CSV
 *   --trace FILE            Chrome trace of the predicted step at the largest
 *                           N (or --trace-workers N)
 *
 * Output: an aligned table on stdout, one row per N: step, images/s,
 * scaling efficiency, allreduce and exposed communication, messages and a
 * verdict; on stderr the time the simulations took. Exit status 0; 1 when the profile or the cluster cannot be
 * simulated (the message names the file and field, or the option); 2 for
 * usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/timer.h"
#include "train/sim.h"

#define MAX_WORKERS_LIST 256

static void usage(FILE *f) {
    fprintf(f, "usage: simulate PROFILE.json [--workers 1,2,4,...] [--gpus-per-node G] [--bw GBIT] [--intra-bw GBIT]\n"
               "       [--latency US] [--speed X | --images-per-s X] [--batch B] [--backward-ratio R] [--overlap on|off] [--bucket-mb M|auto]\n"
               "       [--first-bucket-mb F] [--fp16 | --powersgd R[,NS] [--powersgd-at buckets|end]]\n"
               "       [--algo ring|hier|curve] [--curve mpi|ring] [--horovod CYCLE_MS,FUSION_MB] [--jitter PCT] [--ps-servers K]\n"
               "       [--csv FILE] [--trace FILE] [--trace-workers N]\n");
}

/* A number in (lo, hi] from an option's value; exits 2 naming the option. */
static double num_arg(const char *opt, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !(d > lo) || d > hi) {
        fprintf(stderr, "simulate: %s: expected a number above %g and at most %g, found '%s'\n", opt, lo, hi, s);
        exit(2);
    }
    return d;
}

static int whole_arg(const char *opt, const char *s, int lo, int hi) {
    double d = num_arg(opt, s, lo - 1, hi);
    if (d != (int)d) {
        fprintf(stderr, "simulate: %s: expected a whole number, found '%s'\n", opt, s);
        exit(2);
    }
    return (int)d;
}

static int parse_workers(const char *s, int *w) {
    int n = 0;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_WORKERS_LIST) {
            fprintf(stderr, "simulate: --workers: at most %d counts\n", MAX_WORKERS_LIST);
            exit(2);
        }
        w[n++] = whole_arg("--workers", tok, 1, 1 << 20);
    }
    if (n == 0) {
        fprintf(stderr, "simulate: --workers: expected a list like 1,2,4\n");
        exit(2);
    }
    return n;
}

int main(int argc, char **argv) {
    sim_cluster c = sim_cluster_default();
    int workers[MAX_WORKERS_LIST], nw = parse_workers("1,2,4,8,16,32,64,128,256,512", workers);
    const char *profile_path = NULL, *csv_path = NULL, *trace_path = NULL;
    int trace_workers = 0;
    double bucket_mb = 0, first_mb = 0, backward_ratio = 0, images_per_s = 0;
    int batch = 0, speed_set = 0, bucket_auto = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--fp16")) {
            c.fp16 = 1;
            continue;
        }
        if (a[0] != '-') {
            if (profile_path) {
                usage(stderr);
                return 2;
            }
            profile_path = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "simulate: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--workers")) {
            nw = parse_workers(v, workers);
        } else if (!strcmp(a, "--gpus-per-node")) {
            c.gpus_per_node = whole_arg(a, v, 1, 1 << 16);
        } else if (!strcmp(a, "--bw")) {
            c.bw_gbit = num_arg(a, v, 0, 1e6);
        } else if (!strcmp(a, "--intra-bw")) {
            c.intra_bw_gbit = num_arg(a, v, 0, 1e6);
        } else if (!strcmp(a, "--latency")) {
            c.latency_us = num_arg(a, v, -1e-300, 1e7);
        } else if (!strcmp(a, "--speed")) {
            c.speed = num_arg(a, v, 0, 1e6);
            speed_set = 1;
        } else if (!strcmp(a, "--batch")) {
            batch = whole_arg(a, v, 1, 1000000);
        } else if (!strcmp(a, "--backward-ratio")) {
            backward_ratio = num_arg(a, v, 0.01, 100);
        } else if (!strcmp(a, "--images-per-s")) {
            images_per_s = num_arg(a, v, 1e-6, 1e12);
        } else if (!strcmp(a, "--overlap")) {
            if (strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr, "simulate: --overlap: expected on or off, found '%s'\n", v);
                return 2;
            }
            c.overlap = !strcmp(v, "on");
        } else if (!strcmp(a, "--bucket-mb")) {
            if (!strcmp(v, "auto")) bucket_auto = 1;
            else bucket_mb = num_arg(a, v, 0, 1 << 20);
        } else if (!strcmp(a, "--first-bucket-mb")) {
            first_mb = num_arg(a, v, 0, 1 << 20);
        } else if (!strcmp(a, "--algo")) {
            if (!strcmp(v, "ring")) c.algo = SIM_ALGO_RING;
            else if (!strcmp(v, "hier")) c.algo = SIM_ALGO_HIER;
            else if (!strcmp(v, "curve")) c.algo = SIM_ALGO_CURVE;
            else {
                fprintf(stderr, "simulate: --algo: expected ring, hier or curve, found '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--curve")) {
            if (strcmp(v, "mpi") && strcmp(v, "ring")) {
                fprintf(stderr, "simulate: --curve: expected mpi or ring, found '%s'\n", v);
                return 2;
            }
            c.curve_ring = !strcmp(v, "ring");
        } else if (!strcmp(a, "--ps-servers")) {
            c.ps_servers = whole_arg(a, v, 1, 1 << 20);
        } else if (!strcmp(a, "--horovod")) {
            char buf[128], *comma;
            snprintf(buf, sizeof buf, "%s", v);
            if (!(comma = strchr(buf, ','))) {
                fprintf(stderr, "simulate: --horovod: expected CYCLE_MS,FUSION_MB, found '%s'\n", v);
                return 2;
            }
            *comma = '\0';
            c.horovod_cycle_ms = num_arg("--horovod (cycle ms)", buf, 0, 1e6);
            c.horovod_fusion_mb = num_arg("--horovod (fusion MB)", comma + 1, 0, 1 << 20);
        } else if (!strcmp(a, "--powersgd")) {
            char buf[128], *comma;
            snprintf(buf, sizeof buf, "%s", v);
            if ((comma = strchr(buf, ','))) *comma = '\0';
            c.powersgd_rank = whole_arg("--powersgd (rank)", buf, 1, 32);
            c.powersgd_ns = comma ? num_arg("--powersgd (ns a value)", comma + 1, -1e-300, 1e9)
                                  : sim_powersgd_ns(c.powersgd_rank);
        } else if (!strcmp(a, "--powersgd-at")) {
            if (strcmp(v, "buckets") && strcmp(v, "end")) {
                fprintf(stderr, "simulate: --powersgd-at: expected buckets or end, found '%s'\n", v);
                return 2;
            }
            c.powersgd_at_end = !strcmp(v, "end");
        } else if (!strcmp(a, "--jitter")) {
            c.jitter_pct = num_arg(a, v, -1e-300, 1000);
        } else if (!strcmp(a, "--csv")) {
            csv_path = v;
        } else if (!strcmp(a, "--trace")) {
            trace_path = v;
        } else if (!strcmp(a, "--trace-workers")) {
            trace_workers = whole_arg(a, v, 1, 1 << 20);
        } else {
            fprintf(stderr, "simulate: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!profile_path) {
        usage(stderr);
        return 2;
    }
    if (bucket_auto && c.horovod_cycle_ms > 0) {
        fprintf(stderr, "simulate: --horovod replaces the buckets with Horovod's loop: not with --bucket-mb auto\n");
        return 2;
    }
    if (c.ps_servers > 0 &&
        (c.horovod_cycle_ms > 0 || c.algo != SIM_ALGO_RING || bucket_mb > 0 || first_mb > 0 || bucket_auto)) {
        fprintf(stderr, "simulate: --ps-servers replaces the allreduce: not with --horovod, --algo hier|curve or "
                        "--bucket-mb / --first-bucket-mb\n");
        return 2;
    }
    if (c.powersgd_rank > 0 && (c.fp16 || c.horovod_cycle_ms > 0 || c.ps_servers > 0)) {
        fprintf(stderr, "simulate: --powersgd replaces what travels: not with --fp16, --horovod or --ps-servers\n");
        return 2;
    }
    profile p;
    if (profile_load(profile_path, &p) != CNT_OK) {
        fprintf(stderr, "simulate: %s\n", cnt_err_msg());
        return 1;
    }
    if (c.powersgd_rank > 0 && !p.n_tensors) {
        fprintf(stderr, "simulate: --powersgd: %s has no \"tensors\" (written before profiles recorded them): "
                        "profile the step again with trainer --profile\n", profile_path);
        profile_free(&p);
        return 1;
    }
    if (images_per_s > 0 && speed_set) {
        fprintf(stderr, "simulate: --images-per-s sets the speed: give it or --speed, not both\n");
        profile_free(&p);
        return 2;
    }
    if ((batch || backward_ratio > 0 || images_per_s > 0) &&
        sim_profile_retarget(&p, batch, backward_ratio, images_per_s) != CNT_OK) {
        fprintf(stderr, "simulate: %s: %s\n", profile_path, cnt_err_msg());
        profile_free(&p);
        return 1;
    }
    if (bucket_mb > 0) c.bucket_values = (size_t)(bucket_mb * 1048576 / 4) ? (size_t)(bucket_mb * 1048576 / 4) : 1;
    if (first_mb > 0) c.first_bucket_values = (size_t)(first_mb * 1048576 / 4) ? (size_t)(first_mb * 1048576 / 4) : 1;
    if (!trace_workers) {
        for (int k = 0; k < nw; k++)
            if (workers[k] > trace_workers) trace_workers = workers[k];
    }

    const char *in[1] = {profile_path}, *role[1] = {"profile"};
    if ((csv_path && file_check_output(csv_path, "the CSV", 1, 1, in, role) != CNT_OK) ||
        (trace_path && file_check_output(trace_path, "the trace", 1, 1, in, role) != CNT_OK)) {
        fprintf(stderr, "simulate: %s\n", cnt_err_msg());
        profile_free(&p);
        return 1;
    }
    FILE *csv = NULL;
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "simulate: cannot write '%s': %s\n", csv_path, strerror(errno));
        profile_free(&p);
        return 1;
    }
    /* Refuse a cluster the engine cannot model before printing anything. */
    for (int k = 0; k < nw; k++) {
        double ms;
        if (sim_allreduce_ms(&p, &c, workers[k], 4096, &ms, NULL) != CNT_OK) {
            fprintf(stderr, "simulate: %d workers: %s\n", workers[k], cnt_err_msg());
            if (csv) fclose(csv);
            profile_free(&p);
            return 1;
        }
    }
    char where[160];
    if (c.algo == SIM_ALGO_CURVE)
        snprintf(where, sizeof where, "the measured %s curve at %d workers", c.curve_ring ? "ring" : "MPI_Allreduce",
                 p.curve_world);
    else if (c.algo == SIM_ALGO_HIER)
        snprintf(where, sizeof where, "hier, %g Gbit/s between nodes, %g Gbit/s inside, %g us, G=%d", c.bw_gbit,
                 c.intra_bw_gbit, c.latency_us, c.gpus_per_node);
    else if (c.ps_servers > 0)
        snprintf(where, sizeof where, "%d synchronous parameter server%s, %g Gbit/s links, %g us", c.ps_servers,
                 c.ps_servers == 1 ? "" : "s", c.bw_gbit, c.latency_us);
    else
        snprintf(where, sizeof where, "ring, %g Gbit/s, %g us", c.bw_gbit, c.latency_us);
    printf("%s, batch %d per worker, one worker %.1f images/s, %.2f MB of gradients; %s%s, overlap %s, speed %g", p.model, p.batch,
           1e3 * p.batch / (p.forward_ms + p.backward_ms + p.update_ms + p.data_wait_ms),
           4.0 * (double)p.params / 1e6, where, c.fp16 ? ", fp16" : "", c.overlap ? "on" : "off", c.speed);
    if (c.horovod_cycle_ms > 0) printf(", Horovod cycle %g ms, fusion %g MB", c.horovod_cycle_ms, c.horovod_fusion_mb);
    if (c.powersgd_rank > 0) {
        size_t values, wire;
        int k = powersgd_summary(p.tensors, p.n_tensors, c.powersgd_rank, &values, &wire);
        printf(", PowerSGD rank %d (%d of %d tensors; %.2f MB a step on the wire; %g ns a value of arithmetic; %s)",
               c.powersgd_rank, k, p.n_tensors, 4.0 * (double)wire / 1e6, c.powersgd_ns,
               c.powersgd_at_end ? "after backward, the whole gradient at once" : "bucket by bucket");
    }
    if (c.jitter_pct > 0) printf(", jitter %g %%", c.jitter_pct);
    printf("\n");
    printf("%7s %10s %11s %6s %13s %11s %5s%s  %s\n", "workers", "step_ms", "images/s", "eff", "allreduce_ms",
           "exposed_ms", "msgs", bucket_auto ? " bucket_mb" : "", "verdict");
    if (csv)
        fprintf(csv, "workers,step_ms,images_per_s,efficiency,allreduce_ms,exposed_ms,messages,verdict%s\n",
                bucket_auto ? ",bucket_mb" : "");
    char (*why)[1024] = bucket_auto ? cnt_calloc((size_t)nw, sizeof *why) : NULL;
    int status = 0, traced = 0;
    double sim_s = 0;
    for (int k = 0; k < nw; k++) {
        sim_result r;
        sim_cluster ck = c;
        sim_bucket_choice ch = {0};
        double t0 = time_now();
        int rc = bucket_auto ? sim_choose_bucket(&p, &c, workers[k], &ch) : CNT_OK;
        if (rc == CNT_OK && bucket_auto) {
            ck.bucket_values = ch.values;
            sim_bucket_choice_text(&ch, why[k], sizeof why[k]);
        }
        if (rc == CNT_OK) rc = sim_step(&p, &ck, workers[k], &r);
        sim_s += time_now() - t0;
        if (rc != CNT_OK) {
            fprintf(stderr, "simulate: %d workers: %s\n", workers[k], cnt_err_msg());
            status = 1;
            break;
        }
        char col[24] = "";
        if (bucket_auto) snprintf(col, sizeof col, " %9g", ch.mb);
        printf("%7d %10.2f %11.1f %6.3f %13.2f %11.2f %5d%s  %s\n", r.workers, r.step_ms, r.images_per_s, r.efficiency,
               r.comm_ms, r.exposed_ms, r.n_msgs, col, r.verdict);
        if (csv) {
            fprintf(csv, "%d,%.4f,%.2f,%.5f,%.4f,%.4f,%d,\"%s\"", r.workers, r.step_ms, r.images_per_s, r.efficiency,
                    r.comm_ms, r.exposed_ms, r.n_msgs, r.verdict);
            if (bucket_auto) fprintf(csv, ",%g", ch.mb);
            fprintf(csv, "\n");
        }
        if (trace_path && r.workers == trace_workers && !traced) {
            traced = 1;
            if (sim_write_trace(&p, &r, trace_path) != CNT_OK) {
                fprintf(stderr, "simulate: %s\n", cnt_err_msg());
                status = 1;
            }
        }
        sim_result_free(&r);
    }
    for (int k = 0; why && status == 0 && k < nw; k++) printf("bucket_mb = auto, %d workers: %s\n", workers[k], why[k]);
    free(why);
    if (status == 0) fprintf(stderr, "simulate: %d worker counts simulated in %.3f ms\n", nw, 1e3 * sim_s);
    if (status == 0 && trace_path && !traced) {
        fprintf(stderr, "simulate: --trace-workers %d is not in --workers\n", trace_workers);
        status = 2;
    }
    if (csv && (fclose(csv) != 0) && status == 0) {
        fprintf(stderr, "simulate: cannot write '%s': %s\n", csv_path, strerror(errno));
        status = 1;
    }
    profile_free(&p);
    return status;
}
