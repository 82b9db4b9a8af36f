/*
 * tests/test_zoo.c - the model zoo against torchvision.
 *
 * Checks, for every zoo model, the exact parameter count torchvision reports
 * (sum(p.numel() for p in model.parameters())), a sample of state_dict names
 * with their sizes and order, layer kinds and output shapes at key points, the
 * initialisation each model asks net.c for (zero_init_residual included), the
 * error messages for an unknown name and for an input too small, and runs a
 * CIFAR ResNet and Inception V3 forward and backward on the CPU backend. VGG-16
 * at 3x32x32 checks the gradient order docs/benchmarks.md relies on.
 *
 * Most tests only build nets (no net_finalize): building allocates no
 * parameter memory, so even VGG and ResNet-152 at ImageNet size are cheap.
 * The gradient-order test finalizes VGG-16 (about 1.1 GB, a second or two).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "common/check.h"
#include "common/rng.h"
#include "model/backend.h"
#include "model/net.h"
#include "model/zoo.h"
#include "tests/support/testutil.h"

static const zoo_options opt_default = {0, 0, -1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
static const zoo_options opt_zero_init = {1, 0, -1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
static const zoo_options opt_aux = {0, 1, -1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};

/* Builds `name` for a c x h x w input with `classes` classes; fails the test on error. */
/* Not a zoo model: residual adds whose inputs the planner may or may not let
 * share the add's gradient (LAYER_PASSES_DY): "s" adds a, which a later
 * layer "t" also reads (so t's backward, not s's, writes a's gradient
 * first: no sharing), to b (read by s alone: shared); "u" chains on s; "d"
 * adds u to itself (its gradient is twice d's: no sharing). */
static int build_adds(net *nt, int *out) {
    int a = net_conv(nt, NET_INPUT, "a", 4, 3, 1, 1, 0);
    int b = net_conv(nt, a, "b", 4, 3, 1, 1, 0);
    int s = net_add(nt, a, b, "s");
    int t = net_conv(nt, a, "t", 4, 3, 1, 1, 0);
    int u = net_add(nt, s, t, "u");
    int d = net_add(nt, u, u, "d");
    int p = net_adaptive_avgpool(nt, d, "p", 1, 1);
    *out = net_linear(nt, p, "fc", nt->classes, 1);
    return nt->failed ? CNT_ERR : CNT_OK;
}

/* Which gradients the planner lets share memory in build_adds's net. */
static void test_passed_dy_sharing(void **state) {
    (void)state;
    for (int sharing = 1; sharing >= 0; sharing--) {
        net *nt = net_create(backend_cpu(), 3, 8, 8, 5);
        int out;
        assert_int_equal(build_adds(nt, &out), CNT_OK);
        net_set_memory_sharing(nt, sharing);
        assert_int_equal(net_finalize(nt, out, -1, 2), CNT_OK);
        const float *dy[6];
        for (int i = 0; i < 6; i++) dy[i] = nt->nodes[i].dy; /* a b s t u d */
        assert_true((dy[1] == dy[2]) == sharing); /* b, read by s alone, shares s's */
        assert_true((dy[2] == dy[4]) == sharing); /* s, read by u alone, shares u's */
        assert_true(dy[0] != dy[2]);              /* a: t writes its gradient first */
        assert_true(dy[3] != dy[4]);              /* t: u shares its gradient with s only */
        assert_true(dy[4] != dy[5]);              /* u, given to d twice */
        net_free(nt);
    }
}

static net *build_ok(const char *name, int c, int h, int w, int classes, const zoo_options *opt, int *out,
                     int *aux) {
    net *nt = net_create(backend_cpu(), c, h, w, classes);
    assert_non_null(nt);
    *aux = -1;
    int rc = strcmp(name, "adds") == 0 ? build_adds(nt, out) : zoo_build(nt, name, opt, out, aux);
    if (rc != CNT_OK) fail_msg("zoo_build(%s, %dx%dx%d): %s", name, c, h, w, cnt_err_msg());
    assert_int_equal(nt->failed, 0);
    return nt;
}

static net *build_imagenet(const char *name, const zoo_options *opt, int *out, int *aux) {
    int c, h, w;
    zoo_imagenet_shape(name, &c, &h, &w);
    return build_ok(name, c, h, w, 1000, opt, out, aux);
}

/* Builds `name` expecting CNT_ERR; returns the message (static storage of check.c). */
static const char *build_fail(const char *name, int c, int h, int w, int classes, const zoo_options *opt) {
    net *nt = net_create(backend_cpu(), c, h, w, classes);
    assert_non_null(nt);
    int out = 12345, aux = 12345;
    int rc = zoo_build(nt, name, opt, &out, &aux);
    net_free(nt);
    if (rc != CNT_ERR) fail_msg("zoo_build(%s, %dx%dx%d) succeeded, expected an error", name, c, h, w);
    assert_int_equal(out, -1);
    assert_int_equal(aux, -1);
    return cnt_err_msg();
}

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) fail_msg("message \"%s\" lacks \"%s\"", haystack, needle);
}

static const param_info *param(const net *nt, const char *name) {
    int i = net_find_param(nt, name);
    if (i < 0) fail_msg("no parameter named %s", name);
    return &nt->param_info[i];
}

static void assert_param(const net *nt, const char *name, size_t count) {
    const param_info *p = param(nt, name);
    if (p->count != count) fail_msg("%s has %zu values, expected %zu", name, p->count, count);
}

static void assert_buffer(const net *nt, const char *name, size_t count, float init_value) {
    for (int i = 0; i < nt->n_buffer_tensors; i++) {
        const buffer_info *b = &nt->buffer_info[i];
        if (strcmp(b->name, name) != 0) continue;
        if (b->count != count) fail_msg("buffer %s has %zu values, expected %zu", name, b->count, count);
        assert_true(b->init_value == init_value);
        return;
    }
    fail_msg("no buffer named %s", name);
}

static const node *find_node(const net *nt, const char *name) {
    for (int i = 0; i < nt->n_nodes; i++)
        if (strcmp(nt->nodes[i].name, name) == 0) return &nt->nodes[i];
    return NULL;
}

/* Node `name` exists, is of `kind` and outputs C x H x W. */
static void assert_node(const net *nt, const char *name, const char *kind, int C, int H, int W) {
    const node *nd = find_node(nt, name);
    if (!nd) fail_msg("no node named %s", name);
    if (strcmp(nd->ops->kind, kind) != 0) fail_msg("%s is a %s, expected %s", name, nd->ops->kind, kind);
    if (nd->C != C || nd->H != H || nd->W != W)
        fail_msg("%s outputs %dx%dx%d, expected %dx%dx%d", name, nd->C, nd->H, nd->W, C, H, W);
}

/* Node `name` reads exactly the nodes named in `inputs` (n of them), in order. */
static void assert_inputs(const net *nt, const char *name, const char *const *inputs, int n) {
    const node *nd = find_node(nt, name);
    if (!nd) fail_msg("no node named %s", name);
    if (nd->n_inputs != n) fail_msg("%s has %d inputs, expected %d", name, nd->n_inputs, n);
    for (int i = 0; i < n; i++) {
        const char *got = nd->inputs[i] == NET_INPUT ? "(input)" : nt->nodes[nd->inputs[i]].name;
        if (strcmp(got, inputs[i]) != 0) fail_msg("%s input %d is %s, expected %s", name, i, got, inputs[i]);
    }
}

static void assert_input1(const net *nt, const char *name, const char *input) {
    assert_inputs(nt, name, &input, 1);
}

static void assert_input2(const net *nt, const char *name, const char *a, const char *b) {
    const char *const in[2] = {a, b};
    assert_inputs(nt, name, in, 2);
}

/* The layer describes itself (net_print_summary's config column) exactly as
 * `text`: a BN's eps, a dropout's p, a pool's window and padding rule. */
static void assert_describe(const net *nt, const char *name, const char *text) {
    const node *nd = find_node(nt, name);
    if (!nd) fail_msg("no node named %s", name);
    assert_non_null(nd->ops->describe);
    char buf[128];
    nd->ops->describe(nd, buf, sizeof buf);
    if (strcmp(buf, text) != 0) fail_msg("%s is described as \"%s\", expected \"%s\"", name, buf, text);
}

static void assert_init(const net *nt, const char *name, init_kind kind, float std) {
    const param_info *p = param(nt, name);
    if (p->init.kind != kind) fail_msg("%s init kind %d, expected %d", name, (int)p->init.kind, (int)kind);
    if ((kind == INIT_NORMAL || kind == INIT_TRUNC_NORMAL) && p->init.std != std)
        fail_msg("%s init std %g, expected %g", name, (double)p->init.std, (double)std);
}

/* n_params equals the sum of the tensors, and every name is unique and ends in .weight or .bias. */
static void assert_params_consistent(const net *nt) {
    size_t sum = 0;
    for (int i = 0; i < nt->n_param_tensors; i++) {
        const param_info *p = &nt->param_info[i];
        sum += p->count;
        size_t len = strlen(p->name);
        int weight = len > 7 && strcmp(p->name + len - 7, ".weight") == 0;
        int bias = len > 5 && strcmp(p->name + len - 5, ".bias") == 0;
        if (!weight && !bias) fail_msg("parameter %s is neither a weight nor a bias", p->name);
        for (int j = 0; j < i; j++)
            if (strcmp(nt->param_info[j].name, p->name) == 0) fail_msg("parameter %s registered twice", p->name);
    }
    assert_int_equal(sum, nt->n_params);
}

/* Position of parameter `name` in registration (state_dict) order. */
static int param_pos(const net *nt, const char *name) {
    int i = net_find_param(nt, name);
    if (i < 0) fail_msg("no parameter named %s", name);
    return i;
}

/* ------------------------------------------------------------------ names */

static void test_names(void **state) {
    (void)state;
    static const char *expected[] = {"resnet18", "resnet34", "resnet50",  "resnet101", "resnet152",   "resnet20",
                                     "resnet32", "resnet56", "resnet110", "vgg11",     "vgg13",       "vgg16",
                                     "vgg19",    "vgg11_bn", "vgg13_bn",  "vgg16_bn",  "vgg19_bn", "inception_v3"};
    const size_t n_expected = sizeof expected / sizeof expected[0];
    char list[512];
    snprintf(list, sizeof list, "%s", zoo_names());
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(list, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        assert_true(n < n_expected);
        assert_string_equal(tok, expected[n]);
        assert_true(zoo_has(tok));
        n++;
    }
    assert_int_equal(n, n_expected);
    assert_false(zoo_has("resnet"));
    assert_false(zoo_has("resnet18 "));
    assert_false(zoo_has(""));
    assert_false(zoo_has("VGG16"));

    int c, h, w;
    zoo_imagenet_shape("inception_v3", &c, &h, &w);
    assert_int_equal(c, 3);
    assert_int_equal(h, 299);
    assert_int_equal(w, 299);
    for (size_t i = 0; i + 1 < n_expected; i++) {
        zoo_imagenet_shape(expected[i], &c, &h, &w);
        assert_int_equal(c, 3);
        assert_int_equal(h, 224);
        assert_int_equal(w, 224);
    }
}

/* ------------------------------------------------------ parameter counts */

typedef struct count_case {
    const char *name;
    size_t params;
} count_case;

static void check_count(const char *name, const zoo_options *opt, size_t expected) {
    int out = -1, aux = -2;
    net *nt = build_imagenet(name, opt, &out, &aux);
    if (nt->n_params != expected) fail_msg("%s: %zu parameters, torchvision has %zu", name, nt->n_params, expected);
    assert_params_consistent(nt);
    assert_true(out >= 0 && out < nt->n_nodes);
    assert_int_equal(out, nt->n_nodes - 1);
    assert_string_equal(nt->nodes[out].name, "fc");
    net_free(nt);
}

static void test_resnet_imagenet_counts(void **state) {
    (void)state;
    static const count_case cases[] = {
        {"resnet18", 11689512},  {"resnet34", 21797672},  {"resnet50", 25557032},
        {"resnet101", 44549160}, {"resnet152", 60192808},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_count(cases[i].name, &opt_default, cases[i].params);
        check_count(cases[i].name, &opt_zero_init, cases[i].params);
    }
}

/* backend.max_tensor_values (cuDNN's 32-bit descriptors on the CUDA
 * backend): the largest batch, the layer that sets it, and net_finalize
 * refusing one more with a message naming both. */
static void test_tensor_limit(void **state) {
    (void)state;
    const size_t cudnn = 2147483647;
    int out = -1, aux = -1;
    const node *big;
    size_t per;
    net *nt = build_imagenet("vgg16", &opt_default, &out, &aux);
    assert_int_equal(net_max_batch_for(nt, cudnn, &big, &per), 668);
    assert_string_equal(big->name, "features.0");
    assert_int_equal(per, 64 * 224 * 224);
    assert_int_equal(net_max_batch_for(nt, 0, &big, &per), INT_MAX);
    net_free(nt);
    nt = build_imagenet("resnet50", &opt_default, &out, &aux);
    assert_int_equal(net_max_batch_for(nt, cudnn, &big, &per), 2674);
    assert_int_equal(per, 64 * 112 * 112);
    assert_string_equal(big->name, "conv1");
    net_free(nt);
    /* a backend whose tensors hold 4 of resnet20's first outputs (16x28x28): batch 4 is built, 5 refused */
    backend small = *backend_cpu();
    small.max_tensor_values = 4 * 16 * 28 * 28;
    for (int batch = 4; batch <= 5; batch++) {
        nt = net_create(&small, 1, 28, 28, 10);
        assert_int_equal(zoo_build(nt, "resnet20", &opt_default, &out, &aux), CNT_OK);
        int rc = net_finalize(nt, out, aux, batch);
        if (batch == 4) {
            assert_int_equal(rc, CNT_OK);
        } else {
            assert_int_equal(rc, CNT_ERR);
            const char *m = cnt_err_msg();
            if (!strstr(m, "batch 5 does not fit the cpu backend: conv1 holds 12544 values per image") ||
                !strstr(m, "the largest batch that fits is 4"))
                fail_msg("message: %s", m);
        }
        net_free(nt);
    }
}

static void test_vgg_counts(void **state) {
    (void)state;
    static const count_case cases[] = {
        {"vgg11", 132863336},    {"vgg13", 133047848},    {"vgg16", 138357544},    {"vgg19", 143667240},
        {"vgg11_bn", 132868840}, {"vgg13_bn", 133053736}, {"vgg16_bn", 138365992}, {"vgg19_bn", 143678248},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int out = -1, aux = -2;
        net *nt = build_imagenet(cases[i].name, &opt_default, &out, &aux);
        if (nt->n_params != cases[i].params)
            fail_msg("%s: %zu parameters, torchvision has %zu", cases[i].name, nt->n_params, cases[i].params);
        assert_params_consistent(nt);
        assert_int_equal(aux, -1);
        assert_int_equal(out, nt->n_nodes - 1);
        assert_string_equal(nt->nodes[out].name, "classifier.6");
        net_free(nt);
    }
}

/* The auxiliary classifier holds conv0 (768*128 + BN 2*128 = 98,560),
 * conv1 (128*768*25 + BN 2*768 = 2,459,136) and fc (768*1000 + 1000 =
 * 769,000): 3,326,696 of torchvision's 27,161,264, leaving 23,834,568. */
static void test_inception_counts(void **state) {
    (void)state;
    int out = -1, aux = -1;
    net *nt = build_imagenet("inception_v3", &opt_aux, &out, &aux);
    assert_int_equal(nt->n_params, 27161264);
    assert_params_consistent(nt);
    assert_true(aux >= 0);
    assert_string_equal(nt->nodes[aux].name, "AuxLogits.fc");
    assert_string_equal(nt->nodes[out].name, "fc");
    assert_int_equal(nt->nodes[aux].C, 1000);
    net_free(nt);

    aux = 7;
    nt = build_imagenet("inception_v3", &opt_default, &out, &aux);
    assert_int_equal(nt->n_params, 23834568);
    assert_params_consistent(nt);
    assert_int_equal(aux, -1);
    assert_null(find_node(nt, "AuxLogits.fc"));
    net_free(nt);
}

/* CIFAR ResNet with option A, depth 6n+2, 3x32x32 and 10 classes:
 * conv1 + bn1 = 432 + 32; stage 1: n blocks of 2 x (2304 + 32) = 4672;
 * stage 2: first block (4608 + 64) + (9216 + 64) = 13952, then (n-1) x 18560;
 * stage 3: first block (18432 + 128) + (36864 + 128) = 55552, then (n-1) x 73984;
 * fc 64*10 + 10 = 650. Total 70618 + 4672 n + 92544 (n - 1). */
static void test_cifar_resnet_counts(void **state) {
    (void)state;
    static const count_case cases[] = {
        {"resnet20", 269722}, {"resnet32", 464154}, {"resnet56", 853018}, {"resnet110", 1727962},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int out = -1, aux = -2;
        net *nt = build_ok(cases[i].name, 3, 32, 32, 10, &opt_default, &out, &aux);
        if (nt->n_params != cases[i].params)
            fail_msg("%s: %zu parameters, expected %zu", cases[i].name, nt->n_params, cases[i].params);
        assert_params_consistent(nt);
        assert_int_equal(aux, -1);
        assert_node(nt, "fc", "linear", 10, 1, 1);
        net_free(nt);
    }
}

/* ------------------------------------------------------- names and shapes */

static void test_resnet_structure(void **state) {
    (void)state;
    int out, aux;
    net *nt = build_imagenet("resnet50", &opt_default, &out, &aux);
    assert_param(nt, "conv1.weight", 64 * 3 * 7 * 7);
    assert_param(nt, "layer1.0.downsample.0.weight", 256 * 64);
    assert_param(nt, "layer1.0.downsample.1.bias", 256);
    assert_param(nt, "layer2.0.conv2.weight", 128 * 128 * 9);
    assert_param(nt, "layer4.2.conv3.weight", 2048 * 512);
    assert_param(nt, "layer4.2.bn3.weight", 2048);
    assert_param(nt, "fc.weight", 1000 * 2048);
    assert_param(nt, "fc.bias", 1000);
    assert_int_equal(net_find_param(nt, "layer1.1.downsample.0.weight"), -1);
    assert_int_equal(net_find_param(nt, "layer1.0.conv1.bias"), -1);
    assert_buffer(nt, "layer3.5.bn2.running_var", 256, 1.0f);
    assert_node(nt, "conv1", "conv", 64, 112, 112);
    assert_node(nt, "maxpool", "pool", 64, 56, 56);
    assert_node(nt, "layer1.2.relu3", "relu", 256, 56, 56);
    /* v1.5: the stride sits on the 3x3 conv */
    assert_node(nt, "layer2.0.conv1", "conv", 128, 56, 56);
    assert_node(nt, "layer2.0.conv2", "conv", 128, 28, 28);
    assert_node(nt, "layer2.0.downsample.0", "conv", 512, 28, 28);
    assert_node(nt, "layer4.2.add", "add", 2048, 7, 7);
    assert_node(nt, "avgpool", "pool", 2048, 1, 1);
    assert_describe(nt, "maxpool", "max 3x3/2 p1");
    assert_describe(nt, "layer1.0.bn1", "eps 1e-05");
    /* state_dict order inside a block: conv1 bn1 conv2 bn2 conv3 bn3 downsample */
    assert_true(param_pos(nt, "layer2.0.bn3.bias") < param_pos(nt, "layer2.0.downsample.0.weight"));
    assert_true(param_pos(nt, "layer2.0.downsample.1.bias") < param_pos(nt, "layer2.1.conv1.weight"));
    assert_input1(nt, "conv1", "(input)");
    assert_input2(nt, "layer1.0.add", "layer1.0.bn3", "layer1.0.downsample.1");
    assert_input1(nt, "layer1.0.downsample.0", "maxpool");
    assert_input2(nt, "layer1.1.add", "layer1.1.bn3", "layer1.0.relu3");
    assert_input1(nt, "layer1.1.conv1", "layer1.0.relu3");
    assert_input1(nt, "layer1.1.relu3", "layer1.1.add");
    assert_input1(nt, "avgpool", "layer4.2.relu3");
    assert_input1(nt, "fc", "avgpool");
    assert_int_equal(param_pos(nt, "conv1.weight"), 0);
    assert_int_equal(param_pos(nt, "fc.bias"), nt->n_param_tensors - 1);
    net_free(nt);

    nt = build_imagenet("resnet18", &opt_default, &out, &aux);
    assert_buffer(nt, "bn1.running_mean", 64, 0.0f);
    assert_buffer(nt, "bn1.running_var", 64, 1.0f);
    assert_buffer(nt, "layer4.1.bn2.running_mean", 512, 0.0f);
    assert_param(nt, "layer2.0.downsample.0.weight", 128 * 64);
    assert_int_equal(net_find_param(nt, "layer1.0.downsample.0.weight"), -1);
    assert_int_equal(net_find_param(nt, "layer1.0.conv3.weight"), -1);
    assert_node(nt, "layer2.0.conv1", "conv", 128, 28, 28);
    assert_node(nt, "layer4.1.relu2", "relu", 512, 7, 7);
    assert_input2(nt, "layer1.0.add", "layer1.0.bn2", "maxpool");
    assert_input2(nt, "layer2.0.add", "layer2.0.bn2", "layer2.0.downsample.1");
    assert_input1(nt, "layer2.0.relu2", "layer2.0.add");
    assert_input1(nt, "layer2.1.conv1", "layer2.0.relu2");
    /* 20 convolutions + 20 batch norms (2 per tensor) + fc weight and bias */
    assert_int_equal(nt->n_param_tensors, 20 + 40 + 2);
    assert_int_equal(nt->n_buffer_tensors, 40);
    net_free(nt);

    nt = build_ok("resnet20", 3, 32, 32, 10, &opt_default, &out, &aux);
    assert_param(nt, "conv1.weight", 16 * 3 * 9);
    assert_param(nt, "layer3.2.conv2.weight", 64 * 64 * 9);
    assert_node(nt, "layer1.2.relu2", "relu", 16, 32, 32);
    assert_node(nt, "layer2.0.shortcut", "shortcut", 32, 16, 16);
    assert_node(nt, "layer3.0.shortcut", "shortcut", 64, 8, 8);
    assert_null(find_node(nt, "layer2.1.shortcut"));
    assert_input2(nt, "layer1.0.add", "layer1.0.bn2", "relu");
    assert_input2(nt, "layer2.0.add", "layer2.0.bn2", "layer2.0.shortcut");
    assert_input1(nt, "layer2.0.shortcut", "layer1.2.relu2");
    assert_input2(nt, "layer2.1.add", "layer2.1.bn2", "layer2.0.relu2");
    assert_input1(nt, "fc", "avgpool");
    assert_null(find_node(nt, "layer1.0.shortcut"));
    assert_int_equal(net_find_param(nt, "layer2.0.downsample.0.weight"), -1);
    assert_node(nt, "layer3.2.relu2", "relu", 64, 8, 8);
    assert_node(nt, "avgpool", "pool", 64, 1, 1);
    net_free(nt);
}

/* features.N in torchvision's numbering: c conv, b batch norm, r relu, m max pool. */
static void check_vgg_features(const char *name, const char *kinds) {
    int out, aux;
    net *nt = build_imagenet(name, &opt_default, &out, &aux);
    size_t n = strlen(kinds);
    for (size_t i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "features.%zu", i);
        const node *nd = find_node(nt, nm);
        if (!nd) fail_msg("%s: no node %s", name, nm);
        const char *kind = kinds[i] == 'c' ? "conv" : kinds[i] == 'b' ? "bn" : kinds[i] == 'r' ? "relu" : "pool";
        if (strcmp(nd->ops->kind, kind) != 0) fail_msg("%s: %s is a %s, expected %s", name, nm, nd->ops->kind, kind);
    }
    char nm[32];
    snprintf(nm, sizeof nm, "features.%zu", n);
    assert_null(find_node(nt, nm));
    net_free(nt);
}

static void test_vgg_structure(void **state) {
    (void)state;
    check_vgg_features("vgg11", "crm" "crm" "crcrm" "crcrm" "crcrm");
    check_vgg_features("vgg11_bn", "cbrm" "cbrm" "cbrcbrm" "cbrcbrm" "cbrcbrm");
    check_vgg_features("vgg13", "crcrm" "crcrm" "crcrm" "crcrm" "crcrm");
    check_vgg_features("vgg16", "crcrm" "crcrm" "crcrcrm" "crcrcrm" "crcrcrm");
    check_vgg_features("vgg19_bn", "cbrcbrm" "cbrcbrm" "cbrcbrcbrcbrm" "cbrcbrcbrcbrm" "cbrcbrcbrcbrm");

    int out, aux;
    net *nt = build_imagenet("vgg16", &opt_default, &out, &aux);
    assert_param(nt, "features.0.weight", 64 * 3 * 9);
    assert_param(nt, "features.0.bias", 64);
    assert_param(nt, "features.28.weight", 512 * 512 * 9);
    assert_param(nt, "classifier.0.weight", (size_t)4096 * 512 * 7 * 7);
    assert_param(nt, "classifier.3.weight", 4096 * 4096);
    assert_param(nt, "classifier.6.bias", 1000);
    assert_int_equal(nt->n_buffer_tensors, 0);
    assert_node(nt, "features.30", "pool", 512, 7, 7);
    assert_node(nt, "avgpool", "pool", 512, 7, 7);
    assert_node(nt, "classifier.1", "relu", 4096, 1, 1);
    assert_node(nt, "classifier.2", "dropout", 4096, 1, 1);
    assert_node(nt, "classifier.5", "dropout", 4096, 1, 1);
    assert_describe(nt, "classifier.2", "p 0.5");
    assert_input1(nt, "avgpool", "features.30");
    static const char *chain[] = {"avgpool", "classifier.0", "classifier.1", "classifier.2",
                                  "classifier.3", "classifier.4", "classifier.5", "classifier.6"};
    for (int i = 1; i < 8; i++) assert_input1(nt, chain[i], chain[i - 1]);
    assert_node(nt, "classifier.4", "relu", 4096, 1, 1);
    assert_describe(nt, "features.4", "max 2x2/2 p0");
    net_free(nt);

    nt = build_imagenet("vgg16_bn", &opt_default, &out, &aux);
    assert_param(nt, "features.40.weight", 512 * 512 * 9);
    assert_param(nt, "features.41.weight", 512);
    assert_buffer(nt, "features.41.running_var", 512, 1.0f);
    assert_buffer(nt, "features.1.running_mean", 64, 0.0f);
    assert_describe(nt, "features.1", "eps 1e-05");
    assert_node(nt, "features.43", "pool", 512, 7, 7);
    net_free(nt);

    /* 32x32 ends the features at 1x1; the adaptive pool still yields 7x7. */
    const zoo_options opt_p = {0, 0, 0.25f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    nt = build_ok("vgg11", 3, 32, 32, 10, &opt_p, &out, &aux);
    assert_node(nt, "features.20", "pool", 512, 1, 1);
    assert_node(nt, "avgpool", "pool", 512, 7, 7);
    assert_node(nt, "classifier.6", "linear", 10, 1, 1);
    assert_describe(nt, "classifier.5", "p 0.25");
    net_free(nt);
}

static void test_inception_structure(void **state) {
    (void)state;
    int out, aux;
    net *nt = build_imagenet("inception_v3", &opt_aux, &out, &aux);
    assert_param(nt, "Conv2d_1a_3x3.conv.weight", 32 * 3 * 9);
    assert_int_equal(net_find_param(nt, "Conv2d_1a_3x3.conv.bias"), -1);
    assert_param(nt, "Conv2d_1a_3x3.bn.weight", 32);
    assert_buffer(nt, "Conv2d_4a_3x3.bn.running_mean", 192, 0.0f);
    assert_param(nt, "Mixed_5b.branch1x1.conv.weight", 64 * 192);
    assert_param(nt, "Mixed_5b.branch5x5_2.conv.weight", 64 * 48 * 25);
    assert_param(nt, "Mixed_5b.branch_pool.conv.weight", 32 * 192);
    assert_param(nt, "Mixed_6b.branch7x7_2.conv.weight", 128 * 128 * 7);
    assert_param(nt, "Mixed_6e.branch7x7dbl_5.conv.weight", 192 * 192 * 7);
    assert_param(nt, "Mixed_7a.branch3x3_2.conv.weight", 320 * 192 * 9);
    assert_param(nt, "Mixed_7c.branch3x3dbl_3b.bn.bias", 384);
    assert_param(nt, "AuxLogits.conv0.conv.weight", 128 * 768);
    assert_param(nt, "AuxLogits.conv1.conv.weight", 768 * 128 * 25);
    assert_param(nt, "AuxLogits.fc.weight", 1000 * 768);
    assert_param(nt, "fc.weight", 1000 * 2048);
    assert_buffer(nt, "AuxLogits.conv1.bn.running_var", 768, 1.0f);

    assert_node(nt, "Conv2d_1a_3x3.relu", "relu", 32, 149, 149);
    assert_node(nt, "Conv2d_2b_3x3.relu", "relu", 64, 147, 147);
    assert_node(nt, "maxpool1", "pool", 64, 73, 73);
    assert_node(nt, "Conv2d_4a_3x3.relu", "relu", 192, 71, 71);
    assert_node(nt, "maxpool2", "pool", 192, 35, 35);
    assert_node(nt, "Mixed_5b.cat", "concat", 256, 35, 35);
    assert_node(nt, "Mixed_5c.cat", "concat", 288, 35, 35);
    assert_node(nt, "Mixed_5d.cat", "concat", 288, 35, 35);
    assert_node(nt, "Mixed_6a.cat", "concat", 768, 17, 17);
    assert_node(nt, "Mixed_6b.branch7x7_2.conv", "conv", 128, 17, 17);
    assert_node(nt, "Mixed_6e.cat", "concat", 768, 17, 17);
    assert_node(nt, "AuxLogits.avg_pool", "pool", 768, 5, 5);
    assert_node(nt, "AuxLogits.conv1.relu", "relu", 768, 1, 1);
    assert_node(nt, "Mixed_7a.cat", "concat", 1280, 8, 8);
    assert_node(nt, "Mixed_7b.cat", "concat", 2048, 8, 8);
    assert_node(nt, "Mixed_7c.cat", "concat", 2048, 8, 8);
    assert_node(nt, "avgpool", "pool", 2048, 1, 1);
    assert_node(nt, "dropout", "dropout", 2048, 1, 1);
    assert_describe(nt, "dropout", "p 0.5");
    assert_describe(nt, "Mixed_5b.branch1x1.bn", "eps 0.001");
    assert_describe(nt, "Mixed_5b.avg_pool", "avg 3x3/1 p1");
    assert_describe(nt, "Mixed_6a.max_pool", "max 3x3/2 p0");
    assert_describe(nt, "AuxLogits.avg_pool", "avg 5x5/3 p0");

    /* concat order: torchvision's [branch1x1, branch5x5, branch3x3dbl, branch_pool] */
    const node *cat = find_node(nt, "Mixed_5b.cat");
    static const char *a_order[] = {"Mixed_5b.branch1x1.relu", "Mixed_5b.branch5x5_2.relu",
                                    "Mixed_5b.branch3x3dbl_3.relu", "Mixed_5b.branch_pool.relu"};
    assert_int_equal(cat->n_inputs, 4);
    for (int i = 0; i < 4; i++) assert_string_equal(nt->nodes[cat->inputs[i]].name, a_order[i]);
    /* InceptionE: [1x1, cat(3x3_2a, 3x3_2b), cat(3x3dbl_3a, 3x3dbl_3b), pool] as one flat concat */
    cat = find_node(nt, "Mixed_7b.cat");
    static const char *e_order[] = {"Mixed_7b.branch1x1.relu",       "Mixed_7b.branch3x3_2a.relu",
                                    "Mixed_7b.branch3x3_2b.relu",    "Mixed_7b.branch3x3dbl_3a.relu",
                                    "Mixed_7b.branch3x3dbl_3b.relu", "Mixed_7b.branch_pool.relu"};
    assert_int_equal(cat->n_inputs, 6);
    for (int i = 0; i < 6; i++) assert_string_equal(nt->nodes[cat->inputs[i]].name, e_order[i]);
    /* InceptionD: [branch3x3, branch7x7x3, branch_pool] */
    cat = find_node(nt, "Mixed_7a.cat");
    assert_int_equal(cat->n_inputs, 3);
    assert_string_equal(nt->nodes[cat->inputs[0]].name, "Mixed_7a.branch3x3_2.relu");
    assert_string_equal(nt->nodes[cat->inputs[1]].name, "Mixed_7a.branch7x7x3_4.relu");
    assert_string_equal(nt->nodes[cat->inputs[2]].name, "Mixed_7a.max_pool");
    /* the aux head reads Mixed_6e, as does Mixed_7a */
    assert_input1(nt, "AuxLogits.avg_pool", "Mixed_6e.cat");
    assert_input1(nt, "Mixed_7a.branch3x3_1.conv", "Mixed_6e.cat");
    assert_input1(nt, "Mixed_7a.max_pool", "Mixed_6e.cat");
    assert_input1(nt, "AuxLogits.fc", "AuxLogits.avgpool");
    /* InceptionE: 2a and 2b both read 3x3_1; 3a and 3b both read 3x3dbl_2 */
    assert_input1(nt, "Mixed_7c.branch3x3_2b.conv", "Mixed_7c.branch3x3_1.relu");
    assert_input1(nt, "Mixed_7c.branch3x3dbl_3a.conv", "Mixed_7c.branch3x3dbl_2.relu");
    assert_input1(nt, "Mixed_7c.branch_pool.conv", "Mixed_7c.avg_pool");
    assert_input1(nt, "Mixed_7c.avg_pool", "Mixed_7b.cat");
    assert_input1(nt, "Mixed_5b.branch1x1.conv", "maxpool2");
    static const char *head[] = {"Mixed_7c.cat", "avgpool", "dropout", "fc"};
    for (int i = 1; i < 4; i++) assert_input1(nt, head[i], head[i - 1]);
    net_free(nt);
}

/* ------------------------------------------------------------ initialisation */

static void test_init(void **state) {
    (void)state;
    int out, aux;
    net *nt = build_imagenet("resnet50", &opt_default, &out, &aux);
    assert_init(nt, "conv1.weight", INIT_KAIMING_NORMAL_FAN_OUT, 0);
    assert_init(nt, "layer1.0.conv2.weight", INIT_KAIMING_NORMAL_FAN_OUT, 0);
    assert_init(nt, "layer1.0.bn3.weight", INIT_ONE, 0);
    assert_init(nt, "layer1.0.bn3.bias", INIT_ZERO, 0);
    assert_init(nt, "fc.weight", INIT_TORCH_DEFAULT, 0);
    assert_init(nt, "fc.bias", INIT_TORCH_DEFAULT, 0);
    net_free(nt);

    nt = build_imagenet("resnet50", &opt_zero_init, &out, &aux);
    assert_init(nt, "layer1.0.bn3.weight", INIT_ZERO, 0);
    assert_init(nt, "layer1.0.bn3.bias", INIT_ZERO, 0);
    assert_init(nt, "layer4.2.bn3.weight", INIT_ZERO, 0);
    assert_init(nt, "layer1.0.bn1.weight", INIT_ONE, 0);
    assert_init(nt, "layer1.0.bn2.weight", INIT_ONE, 0);
    assert_init(nt, "layer1.0.downsample.1.weight", INIT_ONE, 0);
    assert_init(nt, "bn1.weight", INIT_ONE, 0);
    int zeroed = 0;
    for (int i = 0; i < nt->n_param_tensors; i++)
        if (nt->param_info[i].init.kind == INIT_ZERO && strstr(nt->param_info[i].name, ".weight")) zeroed++;
    assert_int_equal(zeroed, 3 + 4 + 6 + 3); /* one per block */
    net_free(nt);

    nt = build_imagenet("resnet18", &opt_zero_init, &out, &aux);
    assert_init(nt, "layer1.0.bn2.weight", INIT_ZERO, 0);
    assert_init(nt, "layer2.0.bn2.weight", INIT_ZERO, 0);
    assert_init(nt, "layer1.0.bn1.weight", INIT_ONE, 0);
    assert_init(nt, "layer2.0.downsample.1.weight", INIT_ONE, 0);
    net_free(nt);

    nt = build_ok("resnet20", 3, 32, 32, 10, &opt_zero_init, &out, &aux);
    assert_init(nt, "layer3.2.bn2.weight", INIT_ZERO, 0);
    assert_init(nt, "layer3.2.bn1.weight", INIT_ONE, 0);
    assert_init(nt, "bn1.weight", INIT_ONE, 0);
    net_free(nt);
    nt = build_ok("resnet20", 3, 32, 32, 10, &opt_default, &out, &aux);
    assert_init(nt, "layer3.2.bn2.weight", INIT_ONE, 0);
    assert_init(nt, "layer1.0.conv1.weight", INIT_KAIMING_NORMAL_FAN_OUT, 0);
    net_free(nt);

    nt = build_imagenet("vgg11_bn", &opt_default, &out, &aux);
    assert_init(nt, "features.0.weight", INIT_KAIMING_NORMAL_FAN_OUT, 0);
    assert_init(nt, "features.0.bias", INIT_ZERO, 0);
    assert_init(nt, "features.1.weight", INIT_ONE, 0);
    assert_init(nt, "classifier.0.weight", INIT_NORMAL, 0.01f);
    assert_init(nt, "classifier.0.bias", INIT_ZERO, 0);
    assert_init(nt, "classifier.3.weight", INIT_NORMAL, 0.01f);
    assert_init(nt, "classifier.6.weight", INIT_NORMAL, 0.01f);
    assert_init(nt, "classifier.6.bias", INIT_ZERO, 0);
    net_free(nt);

    nt = build_imagenet("inception_v3", &opt_aux, &out, &aux);
    assert_init(nt, "Conv2d_1a_3x3.conv.weight", INIT_TRUNC_NORMAL, 0.1f);
    assert_init(nt, "Mixed_7c.branch_pool.conv.weight", INIT_TRUNC_NORMAL, 0.1f);
    assert_init(nt, "Mixed_7c.branch_pool.bn.weight", INIT_ONE, 0);
    assert_init(nt, "Mixed_7c.branch_pool.bn.bias", INIT_ZERO, 0);
    /* torchvision's `conv1.stddev = 0.01` sits on the BasicConv2d wrapper,
     * which its init loop never reads: the inner conv gets 0.1. */
    assert_init(nt, "AuxLogits.conv1.conv.weight", INIT_TRUNC_NORMAL, 0.1f);
    assert_init(nt, "AuxLogits.fc.weight", INIT_TRUNC_NORMAL, 0.001f);
    assert_init(nt, "AuxLogits.fc.bias", INIT_TORCH_DEFAULT, 0);
    assert_init(nt, "fc.weight", INIT_TRUNC_NORMAL, 0.1f);
    assert_init(nt, "fc.bias", INIT_TORCH_DEFAULT, 0);
    net_free(nt);
}

/* rng_advance(k) lands where k draws land; the threaded initialisation
 * draws the same bits with 1, 3 and 7 threads, and those bits are the
 * single stream's (recomputed here for a Kaiming-normal convolution of 2.4M
 * values and a torch-default classifier of 512,000, both cut into pieces);
 * net_init_params_blank leaves the parameters zero and the buffers set. */
static void test_init_threads(void **state) {
    (void)state;
    const uint64_t jumps[] = {0, 1, 2, 7, 1000, 123457, (uint64_t)1 << 33};
    for (size_t j = 0; j < sizeof jumps / sizeof jumps[0]; j++) {
        rng a, b;
        rng_seed(&a, 11, 3);
        rng_seed(&b, 11, 3);
        if (jumps[j] < 1000000)
            for (uint64_t k = 0; k < jumps[j]; k++) rng_u32(&a);
        else
            for (uint64_t k = 0; k < jumps[j]; k += jumps[j] / 4) rng_advance(&a, jumps[j] / 4); /* 4 jumps = 1 */
        rng_advance(&b, jumps[j]);
        for (int k = 0; k < 5; k++) assert_int_equal(rng_u32(&a), rng_u32(&b));
    }
    int out, aux;
    net *nt = build_ok("resnet18", 3, 32, 32, 1000, &opt_default, &out, &aux);
    assert_int_equal(net_finalize(nt, out, aux, 1), CNT_OK);
    size_t bytes = nt->n_params * sizeof(float);
    float *one = cnt_malloc(bytes), *many = cnt_malloc(bytes);
    net_init_params_threads(nt, 1234, 1);
    nt->be->download(one, nt->params, bytes);
    for (int threads = 3; threads <= 7; threads += 4) {
        net_init_params_threads(nt, 1234, threads);
        nt->be->download(many, nt->params, bytes);
        if (memcmp(one, many, bytes) != 0) fail_msg("%d threads draw other values than 1", threads);
    }
    const char *names[] = {"layer4.1.conv2.weight", "fc.weight"};
    for (int k = 0; k < 2; k++) {
        int i = net_find_param(nt, names[k]);
        assert_true(i >= 0);
        const param_info *pi = &nt->param_info[i];
        assert_true(pi->count >= (size_t)1 << 18); /* cut into pieces */
        rng r;
        rng_seed(&r, 1234, (uint64_t)i + 1);
        float bound = 1.0f / sqrtf((float)pi->fan_in), std = sqrtf(2.0f / (float)pi->fan_out);
        size_t bad = 0;
        for (size_t v = 0; v < pi->count; v++) {
            float want = pi->init.kind == INIT_TORCH_DEFAULT ? rng_range(&r, -bound, bound) : rng_normal(&r) * std;
            bad += memcmp(&want, &many[pi->offset + v], sizeof want) != 0;
        }
        if (bad) fail_msg("%s: %zu values differ from the single stream's", names[k], bad);
    }
    net_init_params_blank(nt, 1234);
    nt->be->download(many, nt->params, bytes);
    for (size_t v = 0; v < nt->n_params; v++) assert_true(many[v] == 0.0f);
    float *buf = cnt_malloc(nt->n_buffers * sizeof *buf);
    nt->be->download(buf, nt->buffers, nt->n_buffers * sizeof *buf);
    for (int i = 0; i < nt->n_buffer_tensors; i++)
        assert_true(buf[nt->buffer_info[i].offset] == nt->buffer_info[i].init_value);
    free(buf);
    free(one);
    free(many);
    net_free(nt);
}

/* ------------------------------------------------------------------ errors */

static void test_unknown_model(void **state) {
    (void)state;
    const char *msg = build_fail("resnet19", 3, 224, 224, 1000, &opt_default);
    assert_contains(msg, "unknown model 'resnet19'");
    assert_contains(msg, "resnet18");
    assert_contains(msg, "inception_v3");
    msg = build_fail("", 3, 224, 224, 1000, &opt_default);
    assert_contains(msg, "unknown model ''");
}

static void test_input_too_small(void **state) {
    (void)state;
    /* 28 -> 14 -> 7 -> 3 -> 1, and the fifth 2x2 pool has nothing to pool */
    const char *msg = build_fail("vgg11", 1, 28, 28, 10, &opt_default);
    assert_contains(msg, "vgg11");
    assert_contains(msg, "too small");
    assert_contains(msg, "1x28x28");
    msg = build_fail("vgg16_bn", 3, 16, 16, 10, &opt_default);
    assert_contains(msg, "vgg16_bn");
    assert_contains(msg, "too small");
    assert_contains(msg, "3x16x16");

    /* Inception needs 75x75; its auxiliary head needs 299x299 (17x17 at Mixed_6e). */
    msg = build_fail("inception_v3", 3, 64, 64, 10, &opt_default);
    assert_contains(msg, "inception_v3");
    assert_contains(msg, "too small");
    assert_contains(msg, "3x64x64");
    msg = build_fail("inception_v3", 3, 298, 298, 10, &opt_aux);
    assert_contains(msg, "inception_v3");
    assert_contains(msg, "too small");
    assert_contains(msg, "auxiliary");
    int out, aux;
    net *nt = build_ok("inception_v3", 3, 75, 75, 10, &opt_default, &out, &aux);
    assert_node(nt, "Mixed_7c.cat", "concat", 2048, 1, 1);
    net_free(nt);
    nt = build_ok("inception_v3", 3, 224, 224, 10, &opt_default, &out, &aux);
    assert_int_equal(aux, -1);
    net_free(nt);

    /* The same errors through zoo_build's other checks: bad dropout, a used net. */
    const zoo_options bad_p = {0, 0, 1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    msg = build_fail("vgg11", 3, 224, 224, 10, &bad_p);
    assert_contains(msg, "vgg11");
    assert_contains(msg, "dropout");
    nt = build_ok("resnet20", 3, 32, 32, 10, &opt_default, &out, &aux);
    assert_int_equal(zoo_build(nt, "resnet20", &opt_default, &out, &aux), CNT_ERR);
    assert_contains(cnt_err_msg(), "resnet20");
    net_free(nt);
}

/* ---------------------------------------------------------- forward/backward */

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Trains one step's forward and backward on random data; returns the host
 * logits [N, classes] (and aux logits when the net has them) for inspection. */
static void forward_backward(net *nt, int N, float *logits, float *aux_logits) {
    const backend *be = nt->be;
    net_init_params(nt, 42);
    size_t in_n = (size_t)N * nt->in_c * nt->in_h * nt->in_w;
    size_t out_n = (size_t)N * nt->classes;
    float *x = cnt_malloc(in_n * sizeof(float));
    float *dl = cnt_malloc(out_n * sizeof(float));
    rng r;
    rng_seed(&r, 7, 1);
    for (size_t i = 0; i < in_n; i++) x[i] = rng_normal(&r);
    for (size_t i = 0; i < out_n; i++) dl[i] = rng_range(&r, -0.1f, 0.1f);
    float *dx = be->alloc(in_n * sizeof(float));
    float *ddl = be->alloc(out_n * sizeof(float));
    be->upload(dx, x, in_n * sizeof(float));
    be->upload(ddl, dl, out_n * sizeof(float));

    net_forward(nt, dx, N, 1);
    be->download(logits, net_logits(nt), out_n * sizeof(float));
    if (aux_logits) {
        assert_non_null(net_aux_logits(nt));
        be->download(aux_logits, net_aux_logits(nt), out_n * sizeof(float));
    }
    net_backward(nt, ddl, aux_logits ? ddl : NULL);

    float *g = cnt_malloc(nt->n_params * sizeof(float));
    be->download(g, nt->grads, nt->n_params * sizeof(float));
    assert_true(all_finite(g, nt->n_params));
    /* the first conv (farthest from the loss) received a gradient */
    const param_info *first = &nt->param_info[0];
    double norm = 0;
    for (size_t i = 0; i < first->count; i++) norm += (double)g[first->offset + i] * g[first->offset + i];
    if (!(norm > 0)) fail_msg("%s has a zero gradient", first->name);
    free(g);
    be->free(dx);
    be->free(ddl);
    free(x);
    free(dl);
}

static void test_resnet20_forward_backward(void **state) {
    (void)state;
    int out, aux;
    net *nt = build_ok("resnet20", 1, 28, 28, 10, &opt_default, &out, &aux);
    assert_int_equal(aux, -1);
    if (net_finalize(nt, out, aux, 2) != CNT_OK) fail_msg("net_finalize: %s", cnt_err_msg());
    assert_int_equal(nt->n_params, 269722 - 2 * 16 * 9); /* 1 input channel instead of 3 */
    assert_node(nt, "layer3.2.relu2", "relu", 64, 7, 7);
    float logits[2 * 10];
    forward_backward(nt, 2, logits, NULL);
    assert_true(all_finite(logits, 20));
    assert_false(logits[0] == logits[10] && logits[1] == logits[11]); /* two different images */
    net_free(nt);
}

static void test_inception_forward_backward(void **state) {
    (void)state;
    int out, aux;
    net *nt = build_ok("inception_v3", 3, 299, 299, 5, &opt_aux, &out, &aux);
    assert_true(aux >= 0);
    if (net_finalize(nt, out, aux, 2) != CNT_OK) fail_msg("net_finalize: %s", cnt_err_msg());
    float logits[2 * 5], aux_logits[2 * 5];
    forward_backward(nt, 2, logits, aux_logits);
    assert_true(all_finite(logits, 10));
    assert_true(all_finite(aux_logits, 10));
    net_free(nt);
}

/* ------------------------------------------------------------ shared memory */

/* One training forward and backward of a fresh `name` (seed 42, the same
 * batch), with outputs and gradients sharing memory by lifetime or not: every
 * node's output and gradient (captured as its pass ends), the logits, the
 * parameter gradients, the running statistics and the input gradient. */
typedef struct pass_result {
    float *grads, *buffers, *input_grad, *logits, **y, **dy;
    size_t *count; /* [n_nodes] values of each y and dy */
    char (*node)[NET_NAME_LEN];
    int n_nodes;
    size_t n_params, n_buffers, n_in, n_logits;
    size_t pool_bytes; /* net_memory_estimate's activations */
} pass_result;

static void run_pass(const char *name, int c, int h, int w, int layout, int sharing, pass_result *r) {
    const backend *be = backend_cpu();
    int out, aux, N = 2;
    net *nt = build_ok(name, c, h, w, 5, strcmp(name, "inception_v3") == 0 ? &opt_aux : &opt_default, &out, &aux);
    net_set_layout(nt, layout);
    net_set_memory_sharing(nt, sharing);
    if (net_finalize(nt, out, aux, N) != CNT_OK) fail_msg("net_finalize: %s", cnt_err_msg());
    net_memory m;
    net_memory_estimate(nt, N, &m);
    r->pool_bytes = m.activations;
    net_init_params(nt, 42);
    r->n_in = (size_t)N * c * h * w;
    r->n_logits = (size_t)N * 5;
    float *x = cnt_malloc(r->n_in * sizeof(float)), *dl = cnt_malloc(r->n_logits * sizeof(float));
    rng g;
    rng_seed(&g, 7, 1);
    for (size_t i = 0; i < r->n_in; i++) x[i] = rng_normal(&g);
    for (size_t i = 0; i < r->n_logits; i++) dl[i] = rng_range(&g, -0.1f, 0.1f);
    float *dx = be->alloc(r->n_in * sizeof(float)), *ddl = be->alloc(r->n_logits * sizeof(float));
    be->upload(dx, x, r->n_in * sizeof(float));
    be->upload(ddl, dl, r->n_logits * sizeof(float));
    tu_grads cap;
    tu_grads_capture(nt, &cap);
    net_forward(nt, dx, N, 1);
    net_backward(nt, ddl, aux >= 0 ? ddl : NULL);
    r->n_params = nt->n_params;
    r->n_buffers = nt->n_buffers;
    r->grads = cnt_malloc(nt->n_params * sizeof(float));
    be->download(r->grads, nt->grads, nt->n_params * sizeof(float));
    r->buffers = cnt_malloc(nt->n_buffers * sizeof(float));
    be->download(r->buffers, nt->buffers, nt->n_buffers * sizeof(float));
    r->input_grad = cnt_malloc(r->n_in * sizeof(float));
    be->download(r->input_grad, nt->input_grad, r->n_in * sizeof(float));
    r->logits = cnt_malloc(r->n_logits * sizeof(float));
    be->download(r->logits, net_logits(nt), r->n_logits * sizeof(float));
    r->n_nodes = nt->n_nodes;
    r->y = cnt_calloc((size_t)nt->n_nodes, sizeof *r->y);
    r->dy = cnt_calloc((size_t)nt->n_nodes, sizeof *r->dy);
    r->count = cnt_calloc((size_t)nt->n_nodes, sizeof *r->count);
    r->node = cnt_calloc((size_t)nt->n_nodes, sizeof *r->node);
    for (int i = 0; i < nt->n_nodes; i++) {
        size_t n = (size_t)N * nt->nodes[i].C * nt->nodes[i].H * nt->nodes[i].W;
        r->count[i] = n;
        snprintf(r->node[i], sizeof r->node[i], "%s", nt->nodes[i].name);
        r->y[i] = cnt_malloc(n * sizeof(float));
        r->dy[i] = cnt_malloc(n * sizeof(float));
        be->download(r->y[i], cap.y[i], n * sizeof(float));
        be->download(r->dy[i], cap.dy[i], n * sizeof(float));
    }
    tu_grads_free(&cap);
    be->free(dx);
    be->free(ddl);
    free(x);
    free(dl);
    net_free(nt);
}

static void free_pass(pass_result *r) {
    for (int i = 0; i < r->n_nodes; i++) {
        free(r->y[i]);
        free(r->dy[i]);
    }
    free(r->y);
    free(r->dy);
    free(r->count);
    free(r->node);
    free(r->grads);
    free(r->buffers);
    free(r->input_grad);
    free(r->logits);
}

/* Sharing memory by lifetime (net.c, "activation memory") changes no number:
 * if a layer's backward read a tensor its backward_reads flags do not name,
 * that tensor would have been overwritten by then and the outputs and
 * gradients would differ. Every layer kind of the zoo is in one of these nets
 * (the option-A shortcut, bottlenecks, Inception's pools, concats, dropout
 * and auxiliary head; VGG adds none, and its 100M-parameter classifier would
 * take most of this test's time). A layer hands the backend the pointers it reads, so the flags hold
 * in every layout; the blocked one, where the backend has it, is checked on
 * ResNet-20 for the layers that convert their input (linear). And sharing
 * saves memory: ResNet-50's outputs and gradients take at most 60% of what
 * they take unshared. */
static void test_shared_memory_changes_nothing(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int c, h, w, layout;
    } nets[] = {{"resnet20", 3, 32, 32, BACKEND_LAYOUT_NCHW},   {"resnet20", 3, 32, 32, BACKEND_LAYOUT_BLOCKED},
                {"resnet50", 3, 64, 64, BACKEND_LAYOUT_NCHW}, {"inception_v3", 3, 299, 299, BACKEND_LAYOUT_NCHW},
                {"adds", 3, 8, 8, BACKEND_LAYOUT_NCHW}};
    for (size_t k = 0; k < sizeof nets / sizeof nets[0]; k++) {
        int layout = nets[k].layout;
        if (layout == BACKEND_LAYOUT_BLOCKED && backend_cpu()->block_c == 0) continue;
        const char *ln = backend_layout_name(layout, backend_cpu());
        pass_result a, b;
        run_pass(nets[k].name, nets[k].c, nets[k].h, nets[k].w, layout, 1, &a);
        run_pass(nets[k].name, nets[k].c, nets[k].h, nets[k].w, layout, 0, &b);
        char what[160];
        /* in forward, then backward order, so the first failure names the first pass that read a dead tensor */
        for (int i = 0; i < a.n_nodes; i++) {
            snprintf(what, sizeof what, "%s %s output of %s", nets[k].name, ln, a.node[i]);
            tu_assert_bitwise_equal_f(what, a.y[i], b.y[i], a.count[i]);
        }
        snprintf(what, sizeof what, "%s %s logits", nets[k].name, ln);
        tu_assert_bitwise_equal_f(what, a.logits, b.logits, a.n_logits);
        for (int i = a.n_nodes - 1; i >= 0; i--) {
            snprintf(what, sizeof what, "%s %s gradient of the output of %s", nets[k].name, ln, a.node[i]);
            tu_assert_bitwise_equal_f(what, a.dy[i], b.dy[i], a.count[i]);
        }
        snprintf(what, sizeof what, "%s %s parameter gradients", nets[k].name, ln);
        tu_assert_bitwise_equal_f(what, a.grads, b.grads, a.n_params);
        snprintf(what, sizeof what, "%s %s running statistics", nets[k].name, ln);
        tu_assert_bitwise_equal_f(what, a.buffers, b.buffers, a.n_buffers);
        snprintf(what, sizeof what, "%s %s input gradient", nets[k].name, ln);
        tu_assert_bitwise_equal_f(what, a.input_grad, b.input_grad, a.n_in);
        if (strcmp(nets[k].name, "resnet50") == 0 && !(a.pool_bytes <= 0.6 * b.pool_bytes))
            fail_msg("resnet50 %s: activations take %zu bytes shared, %zu unshared", ln, a.pool_bytes, b.pool_bytes);
        free_pass(&a);
        free_pass(&b);
    }
}

/* A ResNet-20 for 2 images of 3x32x32 on backend be (a recording copy of
 * the CPU's), with an input batch and logits gradient on it: how many
 * convolutions it has is convs. */
typedef struct recorded_net {
    net *nt;
    float *x, *dlogits;
    int convs;
} recorded_net;

static recorded_net recorded_resnet20(const backend *be) {
    recorded_net rn = {net_create(be, 3, 32, 32, 10), NULL, NULL, 0};
    int out, aux;
    assert_int_equal(zoo_build(rn.nt, "resnet20", &opt_default, &out, &aux), CNT_OK);
    assert_int_equal(net_finalize(rn.nt, out, aux, 2), CNT_OK);
    net_init_params(rn.nt, 1);
    for (int i = 0; i < rn.nt->n_nodes; i++) rn.convs += strcmp(rn.nt->nodes[i].ops->kind, "conv") == 0;
    size_t nx = 2 * 3 * 32 * 32, nl = 2 * 10;
    rn.x = be->alloc(nx * sizeof(float));
    rn.dlogits = be->alloc(nl * sizeof(float));
    float *h = cnt_malloc(nx * sizeof(float));
    for (size_t i = 0; i < nx; i++) h[i] = (float)(i % 7) - 3.0f;
    be->upload(rn.x, h, nx * sizeof(float));
    be->upload(rn.dlogits, h, nl * sizeof(float));
    free(h);
    return rn;
}

static void recorded_free(recorded_net *rn) {
    rn->nt->be->free(rn->x);
    rn->nt->be->free(rn->dlogits);
    net_free(rn->nt);
}

/* ------------------------------------------------ conv_bwd_data's `paired` */

/* The CPU backend with the two backward passes of a convolution recorded: a
 * convolution layer runs its weight-gradient pass, then hands the same dy to
 * its data-gradient pass with `paired` set (model/backend.h), which lets a
 * backend reuse what the first pass made of dy; the stem (whose input needs
 * no gradient) has no data pass. `paired` on a data pass whose dy is not the
 * one the filter pass just read would hand it a stale conversion. */
static backend pair_be;
static const void *pair_last_dy; /* the dy of the last filter pass, until a data pass */
static int pair_filters, pair_datas, pair_unpaired_datas, pair_wrong;

static void pair_filter(const backend_ctx *ctx, const conv_params *p, const void *x, const void *dy, float *dw) {
    pair_last_dy = dy;
    pair_filters++;
    backend_cpu()->conv_bwd_filter(ctx, p, x, dy, dw);
}

static void pair_data(const backend_ctx *ctx, const conv_params *p, const void *dy, const float *w, void *dx,
                      int accumulate, int paired) {
    if (!paired) pair_unpaired_datas++;
    else if (dy == pair_last_dy) pair_datas++;
    else pair_wrong++;
    pair_last_dy = NULL;
    backend_cpu()->conv_bwd_data(ctx, p, dy, w, dx, accumulate, paired);
}

static void test_conv_bwd_data_paired(void **state) {
    (void)state;
    pair_be = *backend_cpu();
    pair_be.conv_bwd_filter = pair_filter;
    pair_be.conv_bwd_data = pair_data;
    recorded_net rn = recorded_resnet20(&pair_be);
    int convs = rn.convs;
    net_forward(rn.nt, rn.x, 2, 1);
    net_backward(rn.nt, rn.dlogits, NULL);
    print_message("resnet20: %d convolutions, %d filter passes, %d data passes paired with the one before\n", convs,
                  pair_filters, pair_datas);
    assert_int_equal(pair_filters, convs);
    assert_int_equal(pair_datas, convs - 1); /* all but the stem */
    assert_int_equal(pair_unpaired_datas, 0);
    assert_int_equal(pair_wrong, 0);
    recorded_free(&rn);
}

/* --------------------------------------------------- the convolution API */

/* train.conv_api reaches the backend: zoo_create's options set the net's
 * context (net_set_conv_api), which every convolution pass of a training
 * step carries (backend_ctx.conv_api; the CUDA backend's graph API reads it
 * there). Counted by a recording copy of the CPU backend, for both values:
 * a pass that saw another value than the net's is counted wrong. */
static backend api_be;
static backend_conv_api api_want;
static int api_passes, api_wrong;

static void api_note(const backend_ctx *ctx) {
    api_passes++;
    api_wrong += ctx->conv_api != api_want;
}

static void api_fwd(const backend_ctx *ctx, const conv_params *p, const void *x, const float *w, void *y) {
    api_note(ctx);
    backend_cpu()->conv_fwd(ctx, p, x, w, y);
}

static void api_data(const backend_ctx *ctx, const conv_params *p, const void *dy, const float *w, void *dx,
                     int accumulate, int paired) {
    api_note(ctx);
    backend_cpu()->conv_bwd_data(ctx, p, dy, w, dx, accumulate, paired);
}

static void api_filter(const backend_ctx *ctx, const conv_params *p, const void *x, const void *dy, float *dw) {
    api_note(ctx);
    backend_cpu()->conv_bwd_filter(ctx, p, x, dy, dw);
}

static void test_conv_api_reaches_every_pass(void **state) {
    (void)state;
    api_be = *backend_cpu();
    api_be.conv_fwd = api_fwd;
    api_be.conv_bwd_data = api_data;
    api_be.conv_bwd_filter = api_filter;
    for (int k = 0; k < 2; k++) {
        api_want = k ? BACKEND_CONV_API_GRAPH : BACKEND_CONV_API_LEGACY;
        api_passes = api_wrong = 0;
        zoo_options zo = opt_default;
        zo.conv_api = api_want;
        net *nt = zoo_create(&api_be, "resnet20", &zo, 3, 32, 32, 10, BACKEND_LAYOUT_NCHW, 2);
        assert_non_null(nt);
        net_init_params(nt, 1);
        int convs = 0;
        for (int i = 0; i < nt->n_nodes; i++) convs += strcmp(nt->nodes[i].ops->kind, "conv") == 0;
        size_t nx = 2 * 3 * 32 * 32, nl = 2 * 10;
        float *x = api_be.alloc(nx * sizeof(float)), *dl = api_be.alloc(nl * sizeof(float));
        net_forward(nt, x, 2, 1);
        net_backward(nt, dl, NULL);
        print_message("conv_api %d: %d convolution passes, %d with another API\n", (int)api_want, api_passes,
                      api_wrong);
        assert_int_equal(api_passes, 3 * convs - 1); /* the stem has no data pass */
        assert_int_equal(api_wrong, 0);
        api_be.free(x);
        api_be.free(dl);
        net_free(nt);
    }
}

/* --------------------------------------------------- the weights epoch */

/* The CPU backend with the weights epoch (backend_ctx.weights_epoch) each
 * convolution runs under recorded: a training forward runs under a new
 * nonzero epoch, every data-gradient pass of its backward under the epoch
 * the forward convolved the same weights in, and the backward ends it (the
 * net's context says 0 after it); an evaluation forward runs under 0. The
 * CUDA backend reuses the forward's filter only under the same epoch, so a
 * data pass under another would read a stale one. */
static backend fc_be;
static int fc_fwd_inside, fc_fwd_outside, fc_data_inside, fc_data_stale, fc_epochs;
static uint64_t fc_last_epoch;
static const float *fc_w[256];
static uint64_t fc_w_epoch[256];
static int fc_n_seen;

static void fc_fwd(const backend_ctx *ctx, const conv_params *p, const void *x, const float *w, void *y) {
    if (ctx->weights_epoch) {
        fc_fwd_inside++;
        if (ctx->weights_epoch != fc_last_epoch) fc_epochs++;
        fc_last_epoch = ctx->weights_epoch;
        int i = 0;
        while (i < fc_n_seen && fc_w[i] != w) i++;
        if (i == fc_n_seen && fc_n_seen < 256) fc_w[fc_n_seen++] = w;
        if (i < 256) fc_w_epoch[i] = ctx->weights_epoch;
    } else {
        fc_fwd_outside++;
    }
    backend_cpu()->conv_fwd(ctx, p, x, w, y);
}

static void fc_data(const backend_ctx *ctx, const conv_params *p, const void *dy, const float *w, void *dx,
                    int accumulate, int paired) {
    int kept = 0;
    for (int i = 0; i < fc_n_seen; i++) kept |= fc_w[i] == w && fc_w_epoch[i] == ctx->weights_epoch;
    if (ctx->weights_epoch && kept) fc_data_inside++;
    else fc_data_stale++;
    backend_cpu()->conv_bwd_data(ctx, p, dy, w, dx, accumulate, paired);
}

static void test_weights_epoch_bracket(void **state) {
    (void)state;
    fc_be = *backend_cpu();
    fc_be.conv_fwd = fc_fwd;
    fc_be.conv_bwd_data = fc_data;
    recorded_net rn = recorded_resnet20(&fc_be);
    net *nt = rn.nt;
    const float *x = rn.x, *dl = rn.dlogits;
    int convs = rn.convs;
    uint64_t before = 0;
    for (int step = 0; step < 2; step++) {
        net_forward(nt, x, 2, 1);
        assert_true(nt->ctx.weights_epoch != 0 && nt->ctx.weights_epoch != before);
        before = nt->ctx.weights_epoch;
        net_backward(nt, dl, NULL);
        assert_true(nt->ctx.weights_epoch == 0);
    }
    net_forward(nt, x, 2, 1); /* a training forward left without its backward... */
    net_forward(nt, x, 2, 0); /* ...then an evaluation: no epoch */
    assert_true(nt->ctx.weights_epoch == 0);
    assert_int_equal(fc_epochs, 3);
    assert_int_equal(fc_fwd_inside, 3 * convs);
    assert_int_equal(fc_fwd_outside, convs);
    assert_int_equal(fc_data_inside, 2 * (convs - 1)); /* the stem computes no input gradient */
    assert_int_equal(fc_data_stale, 0);
    recorded_free(&rn);
}

/* ------------------------------------------------------------ gradient order */

/* The grad hook's slices, in the order backward completes them. */
typedef struct slice_log {
    size_t offset[64], count[64];
    int n;
} slice_log;

static void log_slice(void *ctx, size_t offset, size_t count) {
    slice_log *log = ctx;
    if (log->n < 64) {
        log->offset[log->n] = offset;
        log->count[log->n] = count;
    }
    log->n++;
}

/* The lowest offset of a layer's tensors (a weight and its bias) and their total size. */
static void layer_slice(const net *nt, const char *layer, size_t *begin, size_t *count) {
    char name[NET_NAME_LEN + 32];
    snprintf(name, sizeof name, "%s.weight", layer);
    const param_info *w = param(nt, name);
    snprintf(name, sizeof name, "%s.bias", layer);
    const param_info *b = param(nt, name);
    *begin = w->offset < b->offset ? w->offset : b->offset;
    *count = w->count + b->count;
}

/* docs/benchmarks.md (gradient bucket size) rests on this: the gradient buffer
 * is in reverse forward order, so VGG-16's big first classifier layer
 * (classifier.0, 25088 -> 4096) is the third layer backward reaches, after
 * classifier.6 and classifier.3, and the convolutions come after it. At
 * 3x32x32 with 10 classes, as tools/bench_buckets.sh runs it. */
static void test_vgg16_gradient_order(void **state) {
    (void)state;
    int out, aux;
    net *nt = build_ok("vgg16", 3, 32, 32, 10, &opt_default, &out, &aux);
    if (net_finalize(nt, out, aux, 1) != CNT_OK) fail_msg("net_finalize: %s", cnt_err_msg());
    assert_int_equal(nt->n_params, 134301514);
    size_t c6, n6, c3, n3, c0, n0;
    layer_slice(nt, "classifier.6", &c6, &n6);
    layer_slice(nt, "classifier.3", &c3, &n3);
    layer_slice(nt, "classifier.0", &c0, &n0);
    assert_int_equal(n0, (size_t)4096 * 25088 + 4096);
    /* lowest offsets first: classifier.6, classifier.3, then classifier.0 */
    assert_int_equal(c6, 0);
    assert_int_equal(c3, n6);
    assert_int_equal(c0, n6 + n3);
    /* exactly classifier.6's and .3's weights and biases lie below classifier.0's slice */
    static const char *before[] = {"classifier.6.weight", "classifier.6.bias", "classifier.3.weight",
                                   "classifier.3.bias"};
    int below = 0;
    for (int i = 0; i < nt->n_param_tensors; i++) {
        const param_info *p = &nt->param_info[i];
        if (p->offset >= c0) {
            if (strncmp(p->name, "features.", 9) == 0 && p->offset < c0 + n0)
                fail_msg("%s lies inside classifier.0's slice", p->name);
            continue;
        }
        int known = 0;
        for (int k = 0; k < 4; k++) known |= strcmp(p->name, before[k]) == 0;
        if (!known) fail_msg("%s comes before classifier.0 in the gradient buffer", p->name);
        below++;
    }
    assert_int_equal(below, 4);

    /* Backward hands the reducer the slices in that order: one training step
     * at batch 1 (parameters left at zero: only the order matters), 13
     * convolutions and 3 linear layers, classifier.0 third, features.0 last. */
    slice_log log = {{0}, {0}, 0};
    net_set_grad_hook(nt, log_slice, &log);
    const backend *be = nt->be;
    float *x = be->alloc(3 * 32 * 32 * sizeof(float));
    float *dlogits = be->alloc(10 * sizeof(float));
    net_forward(nt, x, 1, 1);
    net_backward(nt, dlogits, NULL);
    assert_int_equal(log.n, 16);
    assert_int_equal(log.offset[0], c6);
    assert_int_equal(log.offset[1], c3);
    assert_int_equal(log.offset[2], c0);
    assert_int_equal(log.count[2], n0);
    size_t f0, nf0;
    layer_slice(nt, "features.0", &f0, &nf0);
    assert_int_equal(log.offset[15], f0);
    assert_int_equal(f0 + nf0, nt->n_params);
    be->free(x);
    be->free(dlogits);
    net_free(nt);
}

/* zoo_create: a finalised net ready for net_init_params, in the layout
 * asked for and the options' math mode, or NULL with the reason (an unknown
 * name; an input too small) for the caller to prefix. */
static void test_zoo_create(void **state) {
    (void)state;
    zoo_options zo = {0, 1, -1, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32, BACKEND_CONV_API_LEGACY};
    net *nt = zoo_create(backend_cpu(), "resnet20", &zo, 1, 28, 28, 10, BACKEND_LAYOUT_NCHW, 4);
    assert_non_null(nt);
    assert_true(nt->n_params == 269434);
    assert_int_equal(nt->max_batch, 4);
    assert_int_equal(nt->ctx.layout, BACKEND_LAYOUT_NCHW);
    assert_int_equal(nt->ctx.math, BACKEND_MATH_FP32);
    net_free(nt);
    zo.math = BACKEND_MATH_BF16;
    nt = zoo_create(backend_cpu(), "resnet20", &zo, 1, 28, 28, 10, BACKEND_LAYOUT_NHWC, 1);
    assert_non_null(nt);
    assert_int_equal(nt->ctx.layout, BACKEND_LAYOUT_NHWC);
    assert_int_equal(nt->ctx.math, BACKEND_MATH_BF16);
    net_free(nt);
    zo.math = BACKEND_MATH_FP32;
    assert_null(zoo_create(backend_cpu(), "resnet21", &zo, 1, 28, 28, 10, BACKEND_LAYOUT_NCHW, 1));
    assert_non_null(strstr(cnt_err_msg(), "resnet21"));
    assert_null(zoo_create(backend_cpu(), "vgg11", &zo, 1, 28, 28, 10, BACKEND_LAYOUT_NCHW, 1));
    assert_non_null(strstr(cnt_err_msg(), "vgg11"));
    assert_non_null(strstr(cnt_err_msg(), "too small"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_resnet_imagenet_counts),
        cmocka_unit_test(test_vgg_counts),
        cmocka_unit_test(test_tensor_limit),
        cmocka_unit_test(test_inception_counts),
        cmocka_unit_test(test_cifar_resnet_counts),
        cmocka_unit_test(test_resnet_structure),
        cmocka_unit_test(test_vgg_structure),
        cmocka_unit_test(test_inception_structure),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_init_threads),
        cmocka_unit_test(test_unknown_model),
        cmocka_unit_test(test_input_too_small),
        cmocka_unit_test(test_resnet20_forward_backward),
        cmocka_unit_test(test_inception_forward_backward),
        cmocka_unit_test(test_shared_memory_changes_nothing),
        cmocka_unit_test(test_passed_dy_sharing),
        cmocka_unit_test(test_conv_bwd_data_paired),
        cmocka_unit_test(test_conv_api_reaches_every_pass),
        cmocka_unit_test(test_weights_epoch_bracket),
        cmocka_unit_test(test_vgg16_gradient_order),
        cmocka_unit_test(test_zoo_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
