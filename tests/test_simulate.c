/*
 * tests/test_simulate.c - the step simulator's engine (train/sim.c),
 * the profile reader it replays (profile_parse, train/profile.c) and the JSON
 * reader under that, on a tiny synthetic profile whose answers are
 * worked out by hand in the comments.
 *
 * The profile: 1000 gradient values (4000 bytes) cut into two buckets,
 * [0,600) = 2400 bytes and [600,1000) = 1600 bytes. Backward order: "fc"
 * writes [0,600) in 2 ms (completes bucket 0 at t = 2), "conv" writes
 * [600,1000) in 3 ms (completes bucket 1 at t = 5). Forward 3 ms, update 1 ms,
 * data wait 0.5 ms: one worker's step is 9.5 ms. The cluster: 0.008 Gbit/s =
 * 10^6 bytes/s and no latency, so a ring over 2 workers takes
 * 2(N-1)/N x bytes / BW = 1 us per byte: 2.4 ms and 1.6 ms.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "common/json.h"
#include "train/sim.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-9)

static const char *base_layers =
    "\"layers\":[{\"name\":\"fc\",\"kind\":\"linear\",\"forward_ms\":1,\"backward_ms\":2,\"grad_begin\":0,"
    "\"grad_end\":600,\"grad_bytes\":2400,\"completes\":[0]},"
    "{\"name\":\"conv\",\"kind\":\"conv\",\"forward_ms\":2,\"backward_ms\":3,\"grad_begin\":600,"
    "\"grad_end\":1000,\"grad_bytes\":1600,\"completes\":[1]}]";

/* The synthetic profile with `layers` and `extra` (",\"allreduce\":..." or "") spliced in. */
static int load(profile *p, const char *layers, const char *extra) {
    char text[4096];
    snprintf(text, sizeof text,
             "{\"model\":\"tiny\",\"device\":\"cpu\",\"precision\":\"fp32\",\"input\":[1,8,8],\"classes\":10,"
             "\"batch\":10,\"params\":1000,\"grad_bytes\":4000,"
             "\"step_ms\":9.5,\"forward_ms\":3,\"backward_ms\":5,\"update_ms\":1,\"data_wait_ms\":0.5,"
             "\"first_bucket_values\":600,\"bucket_values\":1000,"
             "\"buckets\":[{\"begin\":0,\"end\":600,\"bytes\":2400},{\"begin\":600,\"end\":1000,\"bytes\":1600}],"
             "%s%s}",
             layers, extra);
    return profile_parse(text, strlen(text), "t.json", p);
}

static sim_cluster slow_net(void) {
    sim_cluster c = sim_cluster_default();
    c.bw_gbit = 0.008; /* 10^6 bytes/s */
    c.intra_bw_gbit = 0.008;
    c.latency_us = 0;
    return c;
}

static void test_one_worker_has_no_communication(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 1, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 0);
    NEAR(r.comm_ms, 0);
    NEAR(r.step_ms, 9.5);
    NEAR(r.efficiency, 1.0);
    NEAR(r.images_per_s, 10 / 9.5e-3);
    assert_string_equal(r.verdict, "compute-bound");
    sim_result_free(&r);
    profile_free(&p);
}

static void test_overlap_off_adds_every_allreduce(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    c.overlap = 0;
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    /* both start when backward ends (5 ms): 9.5 + 2.4 + 1.6 */
    assert_int_equal(r.n_msgs, 2);
    NEAR(r.comm_ms, 4.0);
    NEAR(r.step_ms, 13.5);
    NEAR(r.exposed_ms, 4.0);
    NEAR(r.efficiency, 9.5 / 13.5);
    NEAR(r.images_per_s, 2 * 10 / 13.5e-3);
    assert_true(strncmp(r.verdict, "network-bound: 4.0 ms of 4.0 ms", 31) == 0);
    sim_result_free(&r);
    profile_free(&p);
}

static void test_overlap_hides_the_early_bucket(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    /* bucket 0: ready 2, runs 2..4.4 (hidden); bucket 1: ready 5, runs 5..6.6 */
    NEAR(r.msgs[0].start_ms, 2);
    NEAR(r.msgs[0].end_ms, 4.4);
    NEAR(r.msgs[1].start_ms, 5);
    NEAR(r.msgs[1].end_ms, 6.6);
    NEAR(r.exposed_ms, 1.6);
    NEAR(r.step_ms, 3 + 6.6 + 1 + 0.5);
    sim_result_free(&r);
    /* a network 4x slower: bucket 0 runs 2..11.6, bucket 1 waits for it: 11.6..18 */
    c.bw_gbit = 0.002;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    NEAR(r.msgs[1].start_ms, 11.6);
    NEAR(r.msgs[1].end_ms, 18);
    NEAR(r.exposed_ms, 13);
    sim_result_free(&r);
    profile_free(&p);
}

static void test_alpha_beta_ring_exact(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    c.latency_us = 10;
    double ms, lat;
    /* N = 4: 2*3*0.01 ms + 2*3/4 * 2400 bytes / 10^6 bytes/s = 0.06 + 3.6 */
    assert_int_equal(sim_allreduce_ms(&p, &c, 4, 2400, &ms, &lat), CNT_OK);
    NEAR(ms, 3.66);
    NEAR(lat, 0.06);
    /* 10 Gbit/s, 5 us, N = 512, 1 MiB: 2*511*0.005 + 2*511/512 * 1048576 / 1.25e9 s */
    c = sim_cluster_default();
    assert_int_equal(sim_allreduce_ms(&p, &c, 512, 1048576, &ms, NULL), CNT_OK);
    NEAR(ms, 2 * 511 * 0.005 + 2.0 * 511 / 512 * 1048576 / 1.25e9 * 1e3);
    profile_free(&p);
}

static void test_fp16_halves_the_network_term(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    c.overlap = 0;
    c.fp16 = 1;
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    NEAR(r.comm_ms, 2.0);
    NEAR(r.step_ms, 11.5);
    sim_result_free(&r);
    profile_free(&p);
}

/* PowerSGD at rank 1 on tensors fc.weight 20 x 25 [0,500), fc.bias [500,600),
 * conv.weight 10 x 40 [600,1000): bucket 0 completes fc's two, sent as a P
 * sum of 20 + 100 floats (480 bytes: 0.48 ms) and a Q sum of 25 (0.1 ms);
 * bucket 1 conv's, 10 floats (0.04 ms) then 40 (0.16 ms). At 1000 ns a
 * compressed value, bucket 0's arithmetic is 0.5 ms (0.2 before each sum,
 * 0.1 after), bucket 1's 0.4 ms (0.16, 0.16, 0.08). Bucket 0, ready at 2:
 * P 2.2..2.68, Q 2.88..2.98, free at 3.08; bucket 1, ready at 5: P
 * 5.16..5.2, Q 5.36..5.52, free at 5.6: 0.6 ms exposed, the step 3 + 5.6 +
 * 1 + 0.5. Without the tensors, or with fp16, it is refused. As NCCL's
 * ranks run it (after backward, the whole gradient at once): below. */
static void test_powersgd(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ",\"tensors\":[[0,500,20],[500,100,1],[600,400,10]]"), CNT_OK);
    assert_int_equal(p.n_tensors, 3);
    sim_cluster c = slow_net();
    c.powersgd_rank = 1;
    c.powersgd_ns = 1000;
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 4);
    static const double start[4] = {2.2, 2.88, 5.16, 5.36}, end[4] = {2.68, 2.98, 5.2, 5.52};
    static const double bytes[4] = {480, 100, 40, 160};
    for (int k = 0; k < 4; k++) {
        NEAR(r.msgs[k].start_ms, start[k]);
        NEAR(r.msgs[k].end_ms, end[k]);
        NEAR(r.msgs[k].bytes, bytes[k]);
        assert_int_equal(r.msgs[k].shard, k / 2);
        assert_int_equal(r.msgs[k].part, 1 + k % 2);
    }
    NEAR(r.exposed_ms, 0.6);
    NEAR(r.comm_ms, 1.08 + 0.6);
    NEAR(r.step_ms, 3 + 5.6 + 1 + 0.5);
    sim_result_free(&r);
    /* one worker sends nothing */
    assert_int_equal(sim_step(&p, &c, 1, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 0);
    sim_result_free(&r);
    /* As with NCCL (powersgd_at_end): after backward (5), the whole gradient
     * as one region: P 20 + 100 + 10 floats (520 bytes, 0.52 ms) after 0.36
     * ms of arithmetic (0.4 x 0.9), 5.36..5.88; Q 25 + 40 (0.26 ms) after
     * 0.36 more, 6.24..6.5; the last 0.18 to 6.68: 1.68 ms exposed, the same
     * sums in two messages instead of four. */
    c.powersgd_at_end = 1;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 2);
    NEAR(r.msgs[0].start_ms, 5.36);
    NEAR(r.msgs[0].end_ms, 5.88);
    NEAR(r.msgs[0].bytes, 520);
    NEAR(r.msgs[1].start_ms, 6.24);
    NEAR(r.msgs[1].end_ms, 6.5);
    NEAR(r.msgs[1].bytes, 260);
    assert_int_equal(r.msgs[1].part, 2);
    NEAR(r.exposed_ms, 1.68);
    NEAR(r.step_ms, 3 + 6.68 + 1 + 0.5);
    sim_result_free(&r);
    c.powersgd_at_end = 0;
    c.fp16 = 1;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "PowerSGD: not with fp16"));
    profile_free(&p);
    c.fp16 = 0;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "the profile has no \"tensors\""));
    profile_free(&p);
}

static void test_hierarchical(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    c.latency_us = 7;
    c.algo = SIM_ALGO_HIER;
    c.gpus_per_node = 4;
    c.bw_gbit = 1000; /* unused when one node holds every worker */
    double hier, ring;
    assert_int_equal(sim_allreduce_ms(&p, &c, 4, 2400, &hier, NULL), CNT_OK);
    sim_cluster flat = slow_net();
    flat.latency_us = 7;
    assert_int_equal(sim_allreduce_ms(&p, &flat, 4, 2400, &ring, NULL), CNT_OK);
    NEAR(hier, ring);
    /* G = 2, 2 nodes, no latency: intra 2*1/2 * 2400 us + inter 2*1/2 * 1200 us */
    c.latency_us = 0;
    c.gpus_per_node = 2;
    c.bw_gbit = 0.008;
    assert_int_equal(sim_allreduce_ms(&p, &c, 4, 2400, &hier, NULL), CNT_OK);
    NEAR(hier, 2.4 + 1.2);
    /* 6 workers on nodes of 4: refused */
    c.gpus_per_node = 4;
    assert_int_equal(sim_allreduce_ms(&p, &c, 6, 2400, &hier, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "not a multiple of --gpus-per-node 4"));
    profile_free(&p);
}

static void test_horovod_cycles_and_fusion(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    c.horovod_cycle_ms = 3;
    c.horovod_fusion_mb = 64;
    sim_result r;
    /* fc ready at 2: sent at the first look (3), 2400 bytes take 2.4 ms; the
     * loop looks again a cycle after that allreduce ends (5.4 + 3), not at 6 */
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 2);
    NEAR(r.msgs[0].start_ms, 3);
    NEAR(r.msgs[0].end_ms, 5.4);
    NEAR(r.msgs[1].start_ms, 8.4);
    NEAR(r.msgs[1].end_ms, 10);
    sim_result_free(&r);
    /* a 10 ms cycle: both ready by the tick at 10, fused into one 4000-byte allreduce */
    c.horovod_cycle_ms = 10;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 1);
    NEAR(r.msgs[0].bytes, 4000);
    NEAR(r.msgs[0].start_ms, 10);
    NEAR(r.step_ms, 3 + 14 + 1 + 0.5);
    sim_result_free(&r);
    /* a fusion buffer of 2048 bytes: the two gradients go one after another */
    c.horovod_fusion_mb = 2048.0 / 1048576;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 2);
    NEAR(r.msgs[1].start_ms, 12.4);
    sim_result_free(&r);
    profile_free(&p);
}

static void test_other_bucket_sizes_recut(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    c.first_bucket_values = 200;
    c.bucket_values = 200;
    sim_result r;
    /* five buckets of 800 bytes: three complete with fc (t = 2), two with conv (t = 5) */
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 5);
    NEAR(r.msgs[2].ready_ms, 2);
    NEAR(r.msgs[3].ready_ms, 5);
    NEAR(r.msgs[4].end_ms, 6.6);
    sim_result_free(&r);
    profile_free(&p);
}

/* A large profile for the bucket choice: "fc" writes 1 MiB (262,144
 * values) in 1 ms, then 8 convolutions write 32 MiB each in 10 ms each
 * (backward 81 ms); 257 MiB in all. Its own cut: 1 MiB, then 32 MiB, one
 * bucket per layer. */
static int load_large(profile *p) {
    char text[8192];
    size_t first = 262144, conv = (size_t)8 << 20, len = 0;
    len += (size_t)snprintf(text + len, sizeof text - len,
                            "{\"model\":\"large\",\"device\":\"cpu\",\"precision\":\"fp32\",\"input\":[3,32,32],"
                            "\"classes\":10,\"batch\":16,\"params\":%zu,\"grad_bytes\":%zu,\"step_ms\":100,"
                            "\"forward_ms\":18,\"backward_ms\":81,\"update_ms\":1,\"data_wait_ms\":0,"
                            "\"first_bucket_values\":%zu,\"bucket_values\":%zu,\"buckets\":[",
                            first + 8 * conv, 4 * (first + 8 * conv), first, conv);
    for (int b = 0; b <= 8; b++) {
        size_t begin = b ? first + (size_t)(b - 1) * conv : 0, end = first + (size_t)b * conv;
        len += (size_t)snprintf(text + len, sizeof text - len, "%s{\"begin\":%zu,\"end\":%zu,\"bytes\":%zu}",
                                b ? "," : "", begin, end, 4 * (end - begin));
    }
    len += (size_t)snprintf(text + len, sizeof text - len, "],\"layers\":[");
    for (int b = 0; b <= 8; b++) {
        size_t begin = b ? first + (size_t)(b - 1) * conv : 0, end = first + (size_t)b * conv;
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "%s{\"name\":\"l%d\",\"kind\":\"conv\",\"forward_ms\":2,\"backward_ms\":%d,"
                                "\"grad_begin\":%zu,\"grad_end\":%zu,\"grad_bytes\":%zu,\"completes\":[%d]}",
                                b ? "," : "", b, b ? 10 : 1, begin, end, 4 * (end - begin), b);
    }
    len += (size_t)snprintf(text + len, sizeof text - len, "]}");
    assert_true(len < sizeof text);
    return profile_parse(text, len, "large.json", p);
}

/* dist.bucket_mb = auto's choice. Bandwidth-bound (a 32 MiB bucket takes
 * 20 ms on the wire, a layer's backward 10 ms; no latency): every size up
 * to a layer's 32 MiB ships each layer's gradients as soon as it is done and
 * keeps the link busy from the first convolution on, so they tie, and the
 * largest of them is chosen; 64 MiB waits for two layers (10 ms later).
 * Latency-bound (50 ms a message, a fast link): the fewest messages, one
 * bucket after the first (256 MiB). One worker: nothing to exchange, every
 * size the same, the largest tried. */
static void test_bucket_choice(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load_large(&p), CNT_OK);
    sim_cluster c = sim_cluster_default();
    c.latency_us = 0;
    c.bw_gbit = 8.0 * 32 * 1048576 / 20e-3 / 1e9; /* 32 MiB in 20 ms */
    sim_bucket_choice ch;
    assert_int_equal(sim_choose_bucket(&p, &c, 2, &ch), CNT_OK);
    NEAR(ch.mb, 32);
    assert_int_equal(ch.values, (size_t)8 << 20);
    assert_int_equal(ch.tried, 10); /* 1, 2, 4, 8, 16, 25, 32, 64, 128, 256 */
    NEAR(ch.tried_mb[ch.tried - 1], 256);
    for (int k = 0; k < ch.tried; k++) {
        if (ch.tried_mb[k] <= 32) assert_true(ch.tried_step_ms[k] <= ch.step_ms * (1 + SIM_BUCKET_TIE));
        else assert_true(ch.tried_step_ms[k] > ch.step_ms + 9);
    }
    /* the predicted step is sim_step's at that size */
    sim_cluster at = c;
    at.bucket_values = ch.values;
    sim_result r;
    assert_int_equal(sim_step(&p, &at, 2, &r), CNT_OK);
    NEAR(r.step_ms, ch.step_ms);
    sim_result_free(&r);
    char why[1024];
    sim_bucket_choice_text(&ch, why, sizeof why);
    assert_non_null(strstr(why, "32 MiB: predicted step "));
    assert_non_null(strstr(why, "(against 1 MiB "));
    assert_non_null(strstr(why, ", 256 MiB "));

    c.latency_us = 50e3;
    c.bw_gbit = 1e4;
    assert_int_equal(sim_choose_bucket(&p, &c, 2, &ch), CNT_OK);
    NEAR(ch.mb, 256);
    assert_true(ch.tried_step_ms[0] > ch.step_ms + 1000); /* 1 MiB buckets: 256 messages */

    assert_int_equal(sim_choose_bucket(&p, &c, 1, &ch), CNT_OK);
    NEAR(ch.mb, 256);
    profile_free(&p);
}

static void test_retarget(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    /* batch 10 -> 20 doubles forward (3 -> 6) and backward (5 -> 10), not the update;
     * ratio 2 splits their 16 ms as 16/3 + 32/3; 1000 images/s at batch 20 is a 20 ms step */
    assert_int_equal(sim_profile_retarget(&p, 20, 2, 1000), CNT_OK);
    assert_int_equal(p.batch, 20);
    double k = 20 / 17.5;
    NEAR(p.forward_ms, 16.0 / 3 * k);
    NEAR(p.backward_ms, 32.0 / 3 * k);
    NEAR(p.update_ms, 1 * k);
    NEAR(p.data_wait_ms, 0.5 * k);
    /* the layers keep their shares: fc had 2 of backward's 5 ms */
    NEAR(p.layers[0].backward_ms / (p.layers[0].backward_ms + p.layers[1].backward_ms), 0.4);
    sim_cluster c = slow_net();
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 1, &r), CNT_OK);
    NEAR(r.step_ms, 20);
    NEAR(r.images_per_s, 1000);
    sim_result_free(&r);
    profile_free(&p);
}

static void test_jitter(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    c.jitter_pct = 10; /* sigma = 0.9 ms of 9 ms compute */
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 8, &r), CNT_OK);
    NEAR(r.jitter_ms, 0.9 * sqrt(2 * log(8.0)));
    sim_result_free(&r);
    assert_int_equal(sim_step(&p, &c, 1, &r), CNT_OK);
    NEAR(r.jitter_ms, 0);
    sim_result_free(&r);
    profile_free(&p);
}

static const char *curve = ",\"allreduce\":{\"world\":2,\"curves\":{\"mpi\":[{\"bytes\":4096,\"us\":100},"
                           "{\"bytes\":16384,\"us\":400}],\"ring\":[{\"bytes\":4096,\"us\":50}]}}";

static void test_curve_only_at_its_world(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, curve), CNT_OK);
    sim_cluster c = slow_net();
    c.algo = SIM_ALGO_CURVE;
    double ms;
    assert_int_equal(sim_allreduce_ms(&p, &c, 2, 8192, &ms, NULL), CNT_OK);
    NEAR(ms, 0.2); /* log-log between (4096, 100 us) and (16384, 400 us) */
    assert_int_equal(sim_allreduce_ms(&p, &c, 1, 8192, &ms, NULL), CNT_OK);
    NEAR(ms, 0);
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 4, &r), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "measured at 2 workers and cannot predict 4"));
    profile_free(&p);
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    assert_int_equal(sim_allreduce_ms(&p, &c, 2, 8192, &ms, NULL), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "no allreduce curve"));
    profile_free(&p);
}

/* Each malformed profile is refused with a message naming the field. */
/* Synchronous parameter servers, worked by hand (bw 10^6 bytes/s: 1 ms per
 * 1000 bytes; no latency). One server, 2 workers: the whole 4000-byte shard
 * is ready when backward ends (5 ms); the server's link takes both workers'
 * copies (8 ms, to 13), updates (the whole update, 1 ms, to 14) and sends
 * both back (8 ms, to 22): step = 3 + 22 + 0.5 = 25.5, where the ring took
 * 3 + 6.6 + 1 + 0.5. The server's traffic grows with the workers: 4 workers
 * push and pull for 16 ms each. Two servers hold [0,600) and [600,1000):
 * shard 0 is pushed at 2 (4.8 ms on its server's link, to 6.8; this
 * worker's own link is busy 2..4.4), updated to 7.4 (0.6 of the update),
 * back at 12.2; shard 1 at 5 (3.2 ms, to 8.2), updated to 8.6, back at
 * 11.8 on its server's link but this worker's link still takes shard 0
 * until 12.2, so 13.8: step 3 + 13.8 + 0.5 = 17.3. One worker, one server:
 * 4 ms there, 1 ms update, 4 ms back: 3 + 14 + 0.5. */
static void test_parameter_servers(void **state) {
    (void)state;
    profile p;
    assert_int_equal(load(&p, base_layers, ""), CNT_OK);
    sim_cluster c = slow_net();
    c.ps_servers = 1;
    sim_result r;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 2);
    assert_int_equal(r.msgs[0].kind, SIM_MSG_PUSH);
    NEAR(r.msgs[0].start_ms, 5);
    NEAR(r.msgs[0].end_ms, 13);
    assert_int_equal(r.msgs[1].kind, SIM_MSG_PULL);
    NEAR(r.msgs[1].start_ms, 14);
    NEAR(r.msgs[1].end_ms, 22);
    NEAR(r.comm_ms, 16);
    NEAR(r.exposed_ms, 17);
    NEAR(r.step_ms, 25.5);
    sim_result_free(&r);
    assert_int_equal(sim_step(&p, &c, 4, &r), CNT_OK);
    NEAR(r.comm_ms, 32);
    NEAR(r.step_ms, 3 + 5 + 16 + 1 + 16 + 0.5);
    sim_result_free(&r);
    assert_int_equal(sim_step(&p, &c, 1, &r), CNT_OK);
    NEAR(r.step_ms, 3 + 14 + 0.5);
    sim_result_free(&r);
    c.ps_servers = 2;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_OK);
    assert_int_equal(r.n_msgs, 4);
    NEAR(r.msgs[0].end_ms, 6.8);
    NEAR(r.msgs[1].start_ms, 7.4);
    NEAR(r.msgs[1].end_ms, 12.2);
    NEAR(r.msgs[2].start_ms, 5);
    NEAR(r.msgs[2].end_ms, 8.2);
    NEAR(r.msgs[3].end_ms, 13.8);
    NEAR(r.step_ms, 17.3);
    sim_result_free(&r);
    /* more servers than layers with parameters */
    c.ps_servers = 3;
    assert_int_equal(sim_step(&p, &c, 2, &r), CNT_ERR);
    assert_non_null(strstr(cnt_err_msg(), "--ps-servers"));
    assert_non_null(strstr(cnt_err_msg(), "exceeds the model's 2 parameter tensors"));
    profile_free(&p);
}

static void test_malformed_profiles(void **state) {
    (void)state;
    const struct {
        const char *layers, *extra, *expect;
    } cases[] = {
        {"\"layers\":[{\"name\":\"fc\",\"forward_ms\":1,\"backward_ms\":2,\"grad_begin\":0,\"grad_end\":\"600\","
         "\"grad_bytes\":2400,\"completes\":[0]}]",
         "", "t.json: layers[0].grad_end: expected a number, found a string"},
        {"\"layers\":[{\"name\":\"fc\",\"forward_ms\":1,\"grad_begin\":0,\"grad_end\":1000,"
         "\"grad_bytes\":4000,\"completes\":[0,1]}]",
         "", "t.json: layers[0].backward_ms: missing"},
        {"\"layers\":[{\"name\":\"fc\",\"forward_ms\":1,\"backward_ms\":-2,\"grad_begin\":0,\"grad_end\":1000,"
         "\"grad_bytes\":4000,\"completes\":[0,1]}]",
         "", "t.json: layers[0].backward_ms: expected a number >= 0"},
        {"\"layers\":[{\"name\":\"fc\",\"forward_ms\":1,\"backward_ms\":2,\"grad_begin\":0,\"grad_end\":1000,"
         "\"grad_bytes\":4000,\"completes\":[0]}]",
         "", "t.json: layers[0].completes: does not match"},
        {base_layers, ",\"allreduce\":{\"world\":2,\"curves\":{\"mpi\":[]}}", "t.json: allreduce.curves.mpi: empty"},
        {base_layers, ",\"extra\":1,", "t.json:1:"},
        {"\"layers\":[1,]", "", "t.json:1:"},
        {base_layers, ",\"batch\":3", "duplicate object key near '\"batch\"'"},
        {base_layers, ",\"tensors\":[[0,500,20],[600,400,10]]",
         "t.json: tensors[1]: [600, 400, 10] does not go on from 500"},
        {base_layers, ",\"tensors\":[[0,500,20]]", "t.json: tensors: they end at 500, not at params (1000)"},
        {base_layers, ",\"tensors\":[[0,1000,1001]]", "t.json: tensors[0]: [0, 1000, 1001] does not go on"},
        {base_layers, ",\"tensors\":[[0,1000]]", "t.json: tensors[0]: expected [offset, count, rows]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        profile p;
        assert_int_equal(load(&p, cases[i].layers, cases[i].extra), CNT_ERR);
        if (!strstr(cnt_err_msg(), cases[i].expect)) fail_msg("case %zu: '%s' lacks '%s'", i, cnt_err_msg(), cases[i].expect);
    }
}

/* What the one profile reader (train/profile.c) checks beyond a field's
 * type: the top is an object; the run's fields are there (the simulator
 * does not use input, emulated compute does); a bucket size that would cut
 * params into 10^15 buckets is refused by the count, before any cut. */
static void test_profile_reader_checks(void **state) {
    (void)state;
    profile p;
    const char *top = "[1,2]";
    assert_int_equal(profile_parse(top, strlen(top), "t.json", &p), CNT_ERR);
    if (!strstr(cnt_err_msg(), "t.json: not a step profile")) fail_msg("%s", cnt_err_msg());
    const char *no_input = "{\"model\":\"tiny\",\"batch\":10}";
    assert_int_equal(profile_parse(no_input, strlen(no_input), "t.json", &p), CNT_ERR);
    if (!strstr(cnt_err_msg(), "t.json: input: missing")) fail_msg("%s", cnt_err_msg());
    const char *tiny_buckets =
        "{\"model\":\"tiny\",\"device\":\"cpu\",\"precision\":\"fp32\",\"input\":[1,8,8],\"classes\":10,"
        "\"batch\":10,\"params\":1000000000000000,\"grad_bytes\":4000000000000000,\"step_ms\":9.5,\"forward_ms\":3,"
        "\"backward_ms\":5,\"update_ms\":1,\"data_wait_ms\":0.5,\"first_bucket_values\":1,\"bucket_values\":1,"
        "\"buckets\":[{\"begin\":0,\"end\":1,\"bytes\":4}],"
        "\"layers\":[{\"name\":\"fc\",\"kind\":\"linear\",\"forward_ms\":1,\"backward_ms\":2,\"grad_begin\":0,"
        "\"grad_end\":1000000000000000,\"grad_bytes\":4000000000000000,\"completes\":[0]}]}";
    assert_int_equal(profile_parse(tiny_buckets, strlen(tiny_buckets), "t.json", &p), CNT_ERR);
    if (!strstr(cnt_err_msg(), "t.json: buckets: 1 buckets, but first_bucket_values and bucket_values cut params "
                               "into 1000000000000000"))
        fail_msg("%s", cnt_err_msg());
}

/* The JSON parser (common/json.h, jansson made strict): what it gives, and
 * what it refuses with "NAME:LINE:COL: what". */
static void test_json_reader(void **state) {
    (void)state;
    json_t *v;
    const char *ok = " {\"a\":[1,-2.5e3,\"x\\u00e9\\ud83d\\ude00\\n\"],\"b\":{},\"c\":true,\"d\":null,"
                     "\"big\":9007199254740993,\"top\":9223372036854775807} ";
    assert_int_equal(json_parse(ok, strlen(ok), "ok", &v), CNT_OK);
    const json_t *a = json_object_get(v, "a");
    assert_non_null(a);
    assert_int_equal(json_array_size(a), 3);
    NEAR(json_number_value(json_array_get(a, 1)), -2500);
    assert_string_equal(json_string_value(json_array_get(a, 2)), "x\xc3\xa9\xf0\x9f\x98\x80\n");
    assert_string_equal(json_kind(json_object_get(v, "c")), "true/false");
    assert_string_equal(json_kind(json_object_get(v, "d")), "null");
    assert_string_equal(json_kind(json_array_get(a, 0)), "a number");
    assert_null(json_object_get(v, "e"));
    /* integers exact in 64 bits: 2^53 + 1 is not a double */
    assert_true(json_is_integer(json_object_get(v, "big")));
    assert_true(json_integer_value(json_object_get(v, "big")) == 9007199254740993LL);
    assert_true(json_integer_value(json_object_get(v, "top")) == 9223372036854775807LL);
    /* keys in the text's order */
    const char *order[] = {"a", "b", "c", "d", "big", "top"}, *key;
    int k = 0;
    json_t *item;
    json_object_foreach(v, key, item) assert_string_equal(key, order[k++]);
    json_decref(v);
    /* nesting: 2048 levels are read, 2049 and a million refused (no stack overflow) */
    size_t deep = 1000000;
    char *nest = cnt_malloc(2 * deep);
    for (size_t depth = 2048; depth <= 2049; depth++) {
        memset(nest, '[', depth);
        memset(nest + depth, ']', depth);
        int rc = json_parse(nest, 2 * depth, "deep", &v);
        assert_int_equal(rc, depth == 2048 ? CNT_OK : CNT_ERR);
        json_decref(v);
    }
    assert_non_null(strstr(cnt_err_msg(), "deep:1:2049: maximum parsing depth reached"));
    memset(nest, '[', deep);
    memset(nest + deep, ']', deep);
    assert_int_equal(json_parse(nest, 2 * deep, "deep", &v), CNT_ERR);
    free(nest);
    static const struct {
        const char *text;
        size_t len; /* 0: strlen */
    } bad[] = {
        {"", 0}, {"{", 0}, {"[1 2]", 0}, {"{\"a\":01}", 0}, {"{\"a\":1.}", 0}, {"\"\\q\"", 0}, {"[1]x", 0},
        {"{'a':1}", 0}, {"[-]", 0}, {"1e999", 0},
        {"{\"a\":{\"x\":1,\"x\":2}}", 0},   /* a duplicate key, nested */
        {"[1,]", 0}, {"{\"a\":1,}", 0},      /* trailing commas */
        {"[\"a\xff\"]", 0},                  /* not UTF-8 */
        {"[\"a\xc0\xaf\"]", 0},              /* an overlong UTF-8 '/' */
        {"[\"\\udc00\"]", 0},                /* a lone low surrogate */
        {"[\"\\ud800x\"]", 0},               /* a high one without its pair */
        {"[\"a\\u0000b\"]", 0},              /* NUL in a string */
        {"[\"a\x01\"]", 0},                  /* a raw control byte */
        {"[1,\0 2]", 6},                     /* a NUL byte in the text */
        {"[9223372036854775808]", 0},        /* 2^63: no int64 */
        {"[1] /* c */", 0},                  /* a comment */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].text);
        if (json_parse(bad[i].text, len, "bad", &v) != CNT_ERR) fail_msg("accepted case %zu", i);
        assert_null(v);
        if (strncmp(cnt_err_msg(), "bad:1:", 6) != 0) fail_msg("case %zu: '%s'", i, cnt_err_msg());
    }
    assert_int_equal(json_parse("[1,\n 2,\n 2,]", 12, "lines", &v), CNT_ERR);
    if (strncmp(cnt_err_msg(), "lines:3:4: ", 11) != 0) fail_msg("%s", cnt_err_msg());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_worker_has_no_communication),
        cmocka_unit_test(test_overlap_off_adds_every_allreduce),
        cmocka_unit_test(test_overlap_hides_the_early_bucket),
        cmocka_unit_test(test_alpha_beta_ring_exact),
        cmocka_unit_test(test_fp16_halves_the_network_term),
        cmocka_unit_test(test_powersgd),
        cmocka_unit_test(test_hierarchical),
        cmocka_unit_test(test_horovod_cycles_and_fusion),
        cmocka_unit_test(test_other_bucket_sizes_recut),
        cmocka_unit_test(test_bucket_choice),
        cmocka_unit_test(test_retarget),
        cmocka_unit_test(test_jitter),
        cmocka_unit_test(test_curve_only_at_its_world),
        cmocka_unit_test(test_parameter_servers),
        cmocka_unit_test(test_malformed_profiles),
        cmocka_unit_test(test_profile_reader_checks),
        cmocka_unit_test(test_json_reader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
