/*
 * train/sim.c - the event-driven step model of tools/simulate
 * (see train/sim.h), on a profile read by train/profile.c.
 */
#include "train/sim.h"
#include "common/check.h"
#include "dist/ps.h"
#include "dist/reducer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

sim_cluster sim_cluster_default(void) {
    return (sim_cluster){.gpus_per_node = 1, .bw_gbit = 10, .intra_bw_gbit = 40, .latency_us = 5, .speed = 1,
                         .overlap = 1, .algo = SIM_ALGO_RING};
}

/* ---------------------------------------------------------------- the profile */

/* The layer whose backward completes each of the nb buckets (or shards)
 * ending at ends[], by the reducer's rule (reducer_bucket_ready_after) over
 * the layers' gradient ranges, into done_by[]. */
static void bucket_completion(const profile *p, const size_t *ends, int nb, int *done_by) {
    size_t *slice_end = cnt_malloc((size_t)p->n_layers * sizeof *slice_end);
    for (int i = 0; i < p->n_layers; i++) slice_end[i] = p->layers[i].grad_end;
    reducer_bucket_ready_after(ends, nb, slice_end, p->n_layers, done_by);
    for (int b = 0; b < nb; b++)
        if (done_by[b] < 0) done_by[b] = p->n_layers - 1; /* not reached on a checked profile */
    free(slice_end);
}

static void scale_layers(profile *p, double fwd, double bwd) {
    for (int i = 0; i < p->n_layers; i++) {
        p->layers[i].forward_ms *= fwd;
        p->layers[i].backward_ms *= bwd;
    }
}

int sim_profile_retarget(profile *p, int batch, double backward_ratio, double images_per_s) {
    if (p->forward_ms <= 0 || p->backward_ms <= 0)
        return cnt_err_set("%s: no forward or backward time to move to other hardware", p->model);
    if (batch > 0 && batch != p->batch) {
        double k = (double)batch / p->batch;
        p->forward_ms *= k;
        p->backward_ms *= k;
        scale_layers(p, k, k);
        p->batch = batch;
    }
    if (backward_ratio > 0) {
        double sum = p->forward_ms + p->backward_ms;
        double f = sum / (1 + backward_ratio), b = sum - f;
        scale_layers(p, f / p->forward_ms, b / p->backward_ms);
        p->forward_ms = f;
        p->backward_ms = b;
    }
    if (images_per_s > 0) {
        double now = p->forward_ms + p->backward_ms + p->update_ms + p->data_wait_ms;
        double k = 1e3 * p->batch / images_per_s / now;
        p->forward_ms *= k;
        p->backward_ms *= k;
        p->update_ms *= k;
        p->data_wait_ms *= k;
        p->step_ms = p->forward_ms + p->backward_ms + p->update_ms + p->data_wait_ms;
        scale_layers(p, k, k);
    }
    return CNT_OK;
}

/* ---------------------------------------------------------------- network */

/* alpha-beta ring over n: 2(n-1) alpha + 2(n-1)/n bytes / bw. */
static double ring_ms(int n, double bytes, double alpha_ms, double bw_gbit, double *lat) {
    if (n <= 1) return 0;
    double l = 2.0 * (n - 1) * alpha_ms;
    if (lat) *lat += l;
    return l + 2.0 * (n - 1) / n * bytes / (bw_gbit * 1e9 / 8) * 1e3;
}

/* Log-log interpolation of the curve; beyond its ends, the end segment's
 * slope (a single point: time proportional to bytes above it, flat below). */
static double curve_ms(const profile_curve *c, double bytes) {
    if (c->n == 1) return c->us[0] * (bytes > c->bytes[0] ? bytes / c->bytes[0] : 1) * 1e-3;
    int i = 0;
    while (i < c->n - 2 && bytes > c->bytes[i + 1]) i++;
    double x0 = log(c->bytes[i]), x1 = log(c->bytes[i + 1]), y0 = log(c->us[i]), y1 = log(c->us[i + 1]);
    double y = y0 + (y1 - y0) * (log(bytes) - x0) / (x1 - x0);
    return exp(y) * 1e-3;
}

int sim_allreduce_ms(const profile *p, const sim_cluster *c, int n, double bytes, double *ms, double *latency_ms) {
    double lat = 0, alpha = c->latency_us * 1e-3;
    *ms = 0;
    if (latency_ms) *latency_ms = 0;
    if (c->fp16) bytes /= 2;
    if (n <= 1 || bytes <= 0) return CNT_OK;
    switch (c->algo) {
    case SIM_ALGO_RING:
        *ms = ring_ms(n, bytes, alpha, c->bw_gbit, &lat);
        break;
    case SIM_ALGO_HIER: {
        int g = c->gpus_per_node < n ? c->gpus_per_node : n;
        if (n % g != 0)
            return cnt_err_set("--algo hier: %d workers are not a multiple of --gpus-per-node %d", n, g);
        int nodes = n / g;
        /* intra-node reduce-scatter and allgather: half a ring each */
        double intra = ring_ms(g, bytes, alpha, c->intra_bw_gbit, &lat);
        *ms = intra + ring_ms(nodes, bytes / g, alpha, c->bw_gbit, &lat);
        break;
    }
    case SIM_ALGO_CURVE: {
        if (!p->curve_world)
            return cnt_err_set("--algo curve: the profile has no allreduce curve (tools/profile.sh adds it)");
        if (n != p->curve_world)
            return cnt_err_set("--algo curve: the curve was measured at %d workers and cannot predict %d "
                               "(use --algo ring or hier there)",
                               p->curve_world, n);
        const profile_curve *cv = c->curve_ring ? &p->curve_ring : &p->curve_mpi;
        *ms = curve_ms(cv, bytes);
        lat = curve_ms(cv, cv->bytes[0]); /* the smallest message's time: the per-message floor */
        if (lat > *ms) lat = *ms;
        break;
    }
    }
    if (latency_ms) *latency_ms = lat;
    return CNT_OK;
}

/* ---------------------------------------------------------------- the step */

static sim_msg *add_msg(sim_result *r, int *cap, double ready, double bytes) {
    if (r->n_msgs == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        r->msgs = cnt_realloc(r->msgs, (size_t)*cap * sizeof *r->msgs);
    }
    r->msgs[r->n_msgs] = (sim_msg){.ready_ms = ready, .bytes = bytes};
    return &r->msgs[r->n_msgs++];
}

/* Horovod mode: the message just added leaves at *now and the loop waits
 * for it; *now becomes its end. */
static int horovod_send(const profile *p, const sim_cluster *c, int n, sim_result *r, double *now) {
    double ms;
    if (sim_allreduce_ms(p, c, n, r->msgs[r->n_msgs - 1].bytes, &ms, NULL) != CNT_OK) {
        sim_result_free(r);
        return CNT_ERR;
    }
    *now += ms;
    return CNT_OK;
}

/* Parameter-server mode (the model in train/sim.h): the pushes and
 * pulls as messages; *end the time the last shard is back. */
static int ps_messages(const profile *p, const sim_cluster *c, int n, sim_result *r, double bwd_end,
                       double update_ms, double *end) {
    int K = c->ps_servers, nt = 0;
    size_t *tensor_end = cnt_malloc((size_t)(p->n_layers ? p->n_layers : 1) * sizeof *tensor_end);
    for (int i = 0; i < p->n_layers; i++)
        if (p->layers[i].grad_end > p->layers[i].grad_begin && (!nt || p->layers[i].grad_end > tensor_end[nt - 1]))
            tensor_end[nt++] = p->layers[i].grad_end;
    size_t *shard_end = cnt_malloc((size_t)K * sizeof *shard_end);
    int *done_by = cnt_malloc((size_t)K * sizeof *done_by);
    if (!nt || tensor_end[nt - 1] != p->params || ps_plan(tensor_end, nt, K, shard_end) != CNT_OK) {
        if (nt && tensor_end[nt - 1] == p->params) cnt_err_prefix("--ps-servers");
        else cnt_err_set("--ps-servers: the profile's layers do not cover its %zu parameters", p->params);
        free(tensor_end);
        free(shard_end);
        free(done_by);
        return CNT_ERR;
    }
    bucket_completion(p, shard_end, K, done_by);
    double bw = c->bw_gbit * 1e9 / 8 / 1e3, alpha = c->latency_us * 1e-3; /* bytes per ms, ms */
    double up_free = 0, down_free = 0;
    int cap = 0;
    *end = bwd_end;
    for (int k = 0; k < K; k++) {
        size_t values = shard_end[k] - (k ? shard_end[k - 1] : 0);
        double bytes = 4.0 * (double)values / (c->fp16 ? 2 : 1);
        double ready = c->overlap ? r->layer_end_ms[done_by[k]] : bwd_end;
        /* push: this worker's link, then the server's, which takes every worker's copy */
        sim_msg *push = add_msg(r, &cap, ready, bytes);
        push->kind = SIM_MSG_PUSH;
        push->shard = k;
        push->latency_ms = alpha;
        push->start_ms = ready > up_free ? ready : up_free;
        up_free = push->start_ms + bytes / bw;
        push->end_ms = push->start_ms + alpha + n * bytes / bw;
        if (push->end_ms < up_free) push->end_ms = up_free;
        /* the server updates its share of the parameters */
        double updated = push->end_ms + update_ms * (double)values / (double)p->params;
        r->comm_ms += push->end_ms - push->start_ms;
        /* pull: the server's link sends every worker its copy; this worker's link takes them in turn */
        sim_msg *pull = add_msg(r, &cap, updated, bytes);
        pull->kind = SIM_MSG_PULL;
        pull->shard = k;
        pull->latency_ms = alpha;
        pull->start_ms = updated;
        pull->end_ms = updated + alpha + n * bytes / bw;
        if (pull->end_ms < down_free + bytes / bw) pull->end_ms = down_free + bytes / bw;
        down_free = pull->end_ms;
        r->comm_ms += pull->end_ms - pull->start_ms;
        r->latency_ms += 2 * alpha;
        if (pull->end_ms > *end) *end = pull->end_ms;
    }
    free(tensor_end);
    free(shard_end);
    free(done_by);
    return CNT_OK;
}

/* Horovod mode: its background loop sleeps a cycle, fuses what is ready,
 * allreduces it (blocking), sleeps again. The next look comes a cycle after
 * the last allreduce ends, so a slow network fuses more. On CNT_ERR r is
 * freed. */
static int horovod_messages(const profile *p, const sim_cluster *c, int n, sim_result *r, int *cap, double bwd_end) {
    double fusion = c->horovod_fusion_mb * 1048576.0, cycle = c->horovod_cycle_ms, now = 0;
    int next = 0; /* first layer not yet sent */
    while (next < p->n_layers) {
        now += cycle;
        double pending = 0;
        while (next < p->n_layers) {
            double bytes = 4.0 * (double)(p->layers[next].grad_end - p->layers[next].grad_begin);
            double ready = c->overlap ? r->layer_end_ms[next] : bwd_end;
            if (ready > now + 1e-9) break;
            next++;
            if (bytes <= 0) continue;
            if (pending > 0 && pending + bytes > fusion) {
                add_msg(r, cap, now, pending);
                if (horovod_send(p, c, n, r, &now) != CNT_OK) return CNT_ERR;
                pending = 0;
            }
            pending += bytes;
        }
        if (pending > 0) {
            add_msg(r, cap, now, pending);
            if (horovod_send(p, c, n, r, &now) != CNT_OK) return CNT_ERR;
        }
    }
    return CNT_OK;
}

/* PowerSGD: bucket b [begin, end)'s region as one or two sums, ready at
 * `ready` (the model in train/sim.h); nothing when the region is empty. */
static void powersgd_bucket(const profile *p, const sim_cluster *c, sim_result *r, int *cap, int b, size_t begin,
                            size_t end, double ready) {
    int t0, t1, rank = c->powersgd_rank;
    powersgd_bucket_tensors(p->tensors, p->n_tensors, begin, end, &t0, &t1);
    if (t0 == t1) return;
    double a = 0, q = 0, compressed = 0; /* floats of the two sums; values compressed */
    for (int i = t0; i < t1; i++) {
        const powersgd_tensor *t = &p->tensors[i];
        if (!powersgd_compresses(t, rank)) {
            a += (double)t->count;
            continue;
        }
        a += (double)t->rows * rank;
        q += (double)rank * (double)(t->count / (size_t)t->rows);
        compressed += (double)t->count;
    }
    double host = c->powersgd_ns * compressed * 1e-6; /* ms */
    sim_msg *m = add_msg(r, cap, ready, 4.0 * a);
    m->shard = b;
    m->part = 1;
    m->host_before_ms = 0.4 * host;
    if (q > 0) {
        m = add_msg(r, cap, ready, 4.0 * q);
        m->shard = b;
        m->part = 2;
        m->host_before_ms = 0.4 * host;
        m->host_after_ms = 0.2 * host;
    }
}

/* The reducer's buckets (the cluster's sizes, else the profile's), each
 * ready when backward completes it, or when backward ends with overlap off:
 * one allreduce each, or PowerSGD's sums. */
static void bucket_messages(const profile *p, const sim_cluster *c, sim_result *r, int *cap, double bwd_end) {
    if (c->powersgd_rank > 0 && c->powersgd_at_end) { /* NCCL's: one region, after backward, no buckets */
        powersgd_bucket(p, c, r, cap, 0, 0, p->params, bwd_end);
        return;
    }
    size_t first = c->first_bucket_values ? c->first_bucket_values : p->first_bucket_values;
    size_t rest = c->bucket_values ? c->bucket_values : p->bucket_values;
    int nb = reducer_bucket_layout(p->params, first, rest, NULL, 0);
    size_t *ends = cnt_malloc((size_t)nb * sizeof *ends);
    int *done_by = cnt_malloc((size_t)nb * sizeof *done_by);
    reducer_bucket_layout(p->params, first, rest, ends, nb);
    bucket_completion(p, ends, nb, done_by);
    for (int b = 0; b < nb; b++) {
        size_t begin = b ? ends[b - 1] : 0;
        double ready = c->overlap ? r->layer_end_ms[done_by[b]] : bwd_end;
        if (c->powersgd_rank > 0) powersgd_bucket(p, c, r, cap, b, begin, ends[b], ready);
        else add_msg(r, cap, ready, 4.0 * (double)(ends[b] - begin));
    }
    free(ends);
    free(done_by);
}

/* The verdict: what the step waits for beyond its own compute. */
static void set_verdict(sim_result *r, int n) {
    if (r->exposed_ms <= 0.05 * r->step_ms && r->jitter_ms <= 0.05 * r->step_ms) {
        snprintf(r->verdict, sizeof r->verdict, "compute-bound");
    } else if (r->jitter_ms > r->exposed_ms) {
        snprintf(r->verdict, sizeof r->verdict, "straggler-bound: %.1f ms waiting for the slowest of %d", r->jitter_ms,
                 n);
    } else if (r->latency_ms > 0.5 * r->comm_ms) {
        snprintf(r->verdict, sizeof r->verdict,
                 "latency-bound: %d messages, %.1f ms of %.1f ms allreduce is per-message latency", r->n_msgs,
                 r->latency_ms, r->comm_ms);
    } else {
        snprintf(r->verdict, sizeof r->verdict, "network-bound: %.1f ms of %.1f ms allreduce exposed", r->exposed_ms,
                 r->comm_ms);
    }
}

/* Backward layer by layer, each layer's time rescaled so that they add up
 * to r->backward_ms (all 0: spread evenly): r->layer_end_ms. */
static void replay_backward(const profile *p, sim_result *r) {
    double sum = 0;
    for (int i = 0; i < p->n_layers; i++) sum += p->layers[i].backward_ms;
    double scale = sum > 0 ? r->backward_ms / sum : 0;
    r->layer_end_ms = cnt_malloc((size_t)p->n_layers * sizeof *r->layer_end_ms);
    double t = 0;
    for (int i = 0; i < p->n_layers; i++) {
        t += sum > 0 ? p->layers[i].backward_ms * scale : r->backward_ms / p->n_layers;
        r->layer_end_ms[i] = t;
    }
}

int sim_step(const profile *p, const sim_cluster *c, int n, sim_result *r) {
    memset(r, 0, sizeof *r);
    if (c->powersgd_rank > 0 && (c->fp16 || c->horovod_cycle_ms > 0 || c->ps_servers > 0))
        return cnt_err_set("PowerSGD: not with fp16, Horovod's loop or parameter servers (each replaces what is "
                           "sent)");
    if (c->powersgd_rank > 0 && !p->n_tensors)
        return cnt_err_set("PowerSGD: the profile has no \"tensors\" (it was written before they were "
                           "recorded): profile the step again with trainer --profile");
    r->workers = n;
    double speed = c->speed > 0 ? c->speed : 1;
    r->forward_ms = p->forward_ms / speed;
    r->backward_ms = p->backward_ms / speed;
    r->update_ms = p->update_ms / speed;
    r->data_wait_ms = p->data_wait_ms;

    replay_backward(p, r);
    double bwd_end = r->backward_ms;

    /* the messages and their ready times */
    int cap = 0;
    double ps_end = 0;
    if (c->ps_servers > 0) {
        if (ps_messages(p, c, n, r, bwd_end, r->update_ms, &ps_end) != CNT_OK) {
            sim_result_free(r);
            return CNT_ERR;
        }
    } else if (n > 1 && c->horovod_cycle_ms > 0) {
        if (horovod_messages(p, c, n, r, &cap, bwd_end) != CNT_OK) return CNT_ERR;
    } else if (n > 1) {
        bucket_messages(p, c, r, &cap, bwd_end);
    }

    /* allreduces: one after another on the network (the servers' messages are placed already) */
    double net_free = ps_end;
    for (int k = 0; c->ps_servers <= 0 && k < r->n_msgs; k++) {
        sim_msg *m = &r->msgs[k];
        double ms;
        if (sim_allreduce_ms(p, c, n, m->bytes, &ms, &m->latency_ms) != CNT_OK) {
            sim_result_free(r);
            return CNT_ERR;
        }
        m->start_ms = (m->ready_ms > net_free ? m->ready_ms : net_free) + m->host_before_ms;
        m->end_ms = m->start_ms + ms;
        net_free = m->end_ms + m->host_after_ms;
        r->comm_ms += m->host_before_ms + ms + m->host_after_ms;
        r->latency_ms += m->latency_ms;
    }
    double end = net_free > bwd_end ? net_free : bwd_end;
    r->exposed_ms = end - bwd_end;
    double compute = r->forward_ms + r->backward_ms + r->update_ms;
    r->jitter_ms = n > 1 ? c->jitter_pct / 100 * compute * sqrt(2 * log((double)n)) : 0;
    /* with servers the update is theirs, inside the time the last shard comes back */
    r->step_ms = r->forward_ms + end + (c->ps_servers > 0 ? 0 : r->update_ms) + r->data_wait_ms + r->jitter_ms;
    r->images_per_s = r->step_ms > 0 ? n * p->batch / (r->step_ms * 1e-3) : 0;
    double single = r->forward_ms + r->backward_ms + r->update_ms + r->data_wait_ms;
    r->efficiency = r->step_ms > 0 ? single / r->step_ms : 0;

    set_verdict(r, n);
    return CNT_OK;
}

int sim_choose_bucket(const profile *p, const sim_cluster *c, int n, sim_bucket_choice *ch) {
    static const double sizes_mb[] = {1, 2, 4, 8, 16, 25, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    memset(ch, 0, sizeof *ch);
    size_t first = c->first_bucket_values ? c->first_bucket_values : p->first_bucket_values;
    double rest_mb = p->params > first ? (double)(p->params - first) * sizeof(float) / 1048576.0 : 0;
    sim_cluster t = *c;
    int best = -1;
    for (size_t k = 0; k < sizeof sizes_mb / sizeof sizes_mb[0] && ch->tried < SIM_BUCKET_MAX_TRIED; k++) {
        t.bucket_values = (size_t)(sizes_mb[k] * 1048576.0 / sizeof(float));
        sim_result r;
        if (sim_step(p, &t, n, &r) != CNT_OK) return CNT_ERR;
        ch->tried_mb[ch->tried] = sizes_mb[k];
        ch->tried_step_ms[ch->tried] = r.step_ms;
        if (best < 0 || r.step_ms < ch->tried_step_ms[best]) best = ch->tried;
        ch->tried++;
        sim_result_free(&r);
        if (sizes_mb[k] >= rest_mb) break; /* one bucket holds the rest: larger sizes are the same cut */
    }
    int pick = best;
    for (int k = 0; k < ch->tried; k++)
        if (ch->tried_step_ms[k] <= ch->tried_step_ms[best] * (1 + SIM_BUCKET_TIE)) pick = k; /* the largest */
    ch->mb = ch->tried_mb[pick];
    ch->values = (size_t)(ch->mb * 1048576.0 / sizeof(float));
    ch->step_ms = ch->tried_step_ms[pick];
    return CNT_OK;
}

void sim_bucket_choice_text(const sim_bucket_choice *ch, char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "%g MiB: predicted step %.1f ms", ch->mb, ch->step_ms);
    for (int k = 0, first = 1; k < ch->tried && len < cap; k++) {
        if (ch->tried_mb[k] == ch->mb) continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%g MiB %.1f", first ? " (against " : ", ", ch->tried_mb[k],
                                ch->tried_step_ms[k]);
        first = 0;
    }
    if (ch->tried > 1 && len < cap) snprintf(buf + len, cap - len, ")");
}

double sim_powersgd_ns(int rank) { return SIM_POWERSGD_NS_BASE + SIM_POWERSGD_NS_PER_RANK * rank; }

void sim_result_free(sim_result *r) {
    free(r->msgs);
    free(r->layer_end_ms);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- trace */

static void trace_event(FILE *f, int *first, const char *name, const char *cat, int tid, double start_ms,
                        double dur_ms) {
    fprintf(f, "%s\n{\"name\":\"", *first ? "" : ",");
    for (const char *s = name; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":0}}",
            cat, tid, 1e3 * start_ms, dur_ms > 0 ? 1e3 * dur_ms : 0);
    *first = 0;
}

int sim_write_trace(const profile *p, const sim_result *r, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return cnt_err_set("cannot write the trace '%s': %s", path, strerror(errno));
    int first = 1;
    fprintf(f, "{\"traceEvents\":[");
    fprintf(f, "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"predicted, %d "
               "workers\"}}",
            r->workers);
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"train\"}}");
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":1,\"args\":{\"name\":\"comm\"}}");
    first = 0;
    double t = 0;
    trace_event(f, &first, "data wait", "data", 0, t, r->data_wait_ms);
    t += r->data_wait_ms;
    trace_event(f, &first, "forward", "forward", 0, t, r->forward_ms);
    double bwd0 = t + r->forward_ms;
    char name[96];
    for (int i = 0; i < p->n_layers; i++) {
        double s = i ? r->layer_end_ms[i - 1] : 0;
        snprintf(name, sizeof name, "bwd %s", p->layers[i].name);
        trace_event(f, &first, name, "backward", 0, bwd0 + s, r->layer_end_ms[i] - s);
    }
    double end = r->backward_ms;
    for (int k = 0; k < r->n_msgs; k++) {
        const sim_msg *m = &r->msgs[k];
        if (m->part) snprintf(name, sizeof name, "allreduce bucket %d (%s sum)", m->shard, m->part == 1 ? "P" : "Q");
        else if (m->kind == SIM_MSG_ALLREDUCE) snprintf(name, sizeof name, "allreduce bucket %d", k);
        else snprintf(name, sizeof name, "%s shard %d", m->kind == SIM_MSG_PUSH ? "push" : "pull", m->shard);
        if (m->host_before_ms > 0)
            trace_event(f, &first, "PowerSGD arithmetic", "comm", 1, bwd0 + m->start_ms - m->host_before_ms,
                        m->host_before_ms);
        trace_event(f, &first, name, "comm", 1, bwd0 + m->start_ms, m->end_ms - m->start_ms);
        if (m->host_after_ms > 0)
            trace_event(f, &first, "PowerSGD arithmetic", "comm", 1, bwd0 + m->end_ms, m->host_after_ms);
        if (m->end_ms + m->host_after_ms > end) end = m->end_ms + m->host_after_ms;
    }
    int servers = r->n_msgs && r->msgs[0].kind != SIM_MSG_ALLREDUCE;
    if (end > r->backward_ms)
        trace_event(f, &first, servers ? "parameter-server wait" : "allreduce wait", "comm", 0, bwd0 + r->backward_ms,
                    end - r->backward_ms);
    if (r->jitter_ms > 0) trace_event(f, &first, "straggler wait", "comm", 0, bwd0 + end, r->jitter_ms);
    if (!servers) trace_event(f, &first, "optimizer", "optimizer", 0, bwd0 + end + r->jitter_ms, r->update_ms);
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return cnt_err_set("cannot write the trace '%s': %s", path, strerror(errno));
    return CNT_OK;
}
