/*
 * model/zoo.c - torchvision's architectures built from a name with net.h's builder.
 *
 * Every parameterised node carries torchvision's module path as its name, so
 * net.c registers parameters under torchvision's state_dict names
 * ("layer1.0.conv1.weight", "features.0.bias", "Mixed_5b.branch1x1.conv.weight").
 * Nodes without parameters (ReLU, pooling, add, concat) get names that say
 * where they sit ("layer1.0.relu1", "layer1.0.add", "Mixed_5b.cat").
 *
 * Nodes are added in torchvision's forward order; inside a block, parameterised
 * nodes follow the order in which the block's __init__ defines its modules, so
 * the parameter list reads as torchvision's state_dict does.
 *
 * Builder calls are not checked one by one: once one fails, net.h guarantees
 * the later ones fail too, so each model checks nt->failed at the end and
 * zoo_build() turns the builder's message into one naming the model and the
 * input size.
 *
 * Initialisation (net_set_init) follows what torchvision's constructors do:
 *   ResNet (ImageNet and CIFAR): net.c's defaults (convs kaiming_normal fan_out,
 *     BN weight 1 / bias 0, Linear torch default); zero_init_residual zeroes the
 *     last BN weight of each residual block.
 *   VGG: convs kaiming_normal fan_out with bias 0, Linear N(0, 0.01) with bias 0.
 *   Inception V3: every Conv2d and Linear weight trunc_normal(std 0.1, [-2, 2])
 *     unless the module itself has a `stddev` attribute. Only AuxLogits.fc has
 *     one (0.001): torchvision sets `AuxLogits.conv1.stddev = 0.01` on the
 *     BasicConv2d wrapper, which its init loop never looks at (it visits the
 *     inner nn.Conv2d), so AuxLogits.conv1.conv gets 0.1 like every other conv.
 *     Linear biases keep torch's default.
 */
#include "model/zoo.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"

#define ZOO_BN_EPS 1e-5f
#define ZOO_INCEPTION_BN_EPS 1e-3f
#define ZOO_DEFAULT_DROPOUT 0.5f

typedef int (*zoo_builder)(net *nt, int variant, const zoo_options *opt, int *out, int *aux_out);

typedef struct zoo_entry {
    const char *name;
    zoo_builder build;
    int variant; /* depth for ResNets, table index for VGG */
} zoo_entry;

static const init_spec init_zero = {INIT_ZERO, 0.0f};

/* Formats a node name into buf (NET_NAME_LEN bytes) and returns buf. */
static const char *zoo_name(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *zoo_name(char *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, NET_NAME_LEN, fmt, ap);
    va_end(ap);
    return buf;
}

/* Output channels of node x (the network's input for NET_INPUT). */
static int zoo_channels(const net *nt, int x) {
    if (x < 0 || x >= nt->n_nodes) return nt->in_c;
    return nt->nodes[x].C;
}

static float zoo_dropout(const zoo_options *opt) {
    return opt->dropout < 0.0f ? ZOO_DEFAULT_DROPOUT : opt->dropout;
}

/* ------------------------------------------------------------------ ResNet */

/* torchvision BasicBlock: conv3x3(stride) bn relu conv3x3 bn, + identity or
 * downsample (1x1 conv stride + BN), relu. */
static int resnet_basic_block(net *nt, int x, const char *pfx, int planes, int stride, int zero_init) {
    char b[NET_NAME_LEN];
    int in_c = zoo_channels(nt, x);
    int y = net_conv(nt, x, zoo_name(b, "%s.conv1", pfx), planes, 3, stride, 1, 0);
    y = net_bn(nt, y, zoo_name(b, "%s.bn1", pfx), ZOO_BN_EPS);
    y = net_relu(nt, y, zoo_name(b, "%s.relu1", pfx));
    y = net_conv(nt, y, zoo_name(b, "%s.conv2", pfx), planes, 3, 1, 1, 0);
    y = net_bn(nt, y, zoo_name(b, "%s.bn2", pfx), ZOO_BN_EPS);
    if (zero_init) net_set_init(nt, y, init_zero, init_zero);
    int shortcut = x;
    if (stride != 1 || in_c != planes) {
        shortcut = net_conv(nt, x, zoo_name(b, "%s.downsample.0", pfx), planes, 1, stride, 0, 0);
        shortcut = net_bn(nt, shortcut, zoo_name(b, "%s.downsample.1", pfx), ZOO_BN_EPS);
    }
    y = net_add(nt, y, shortcut, zoo_name(b, "%s.add", pfx));
    return net_relu(nt, y, zoo_name(b, "%s.relu2", pfx));
}

/* torchvision Bottleneck (v1.5: stride on the 3x3 conv), expansion 4. */
static int resnet_bottleneck(net *nt, int x, const char *pfx, int planes, int stride, int zero_init) {
    char b[NET_NAME_LEN];
    int in_c = zoo_channels(nt, x);
    int out_c = planes * 4;
    int y = net_conv(nt, x, zoo_name(b, "%s.conv1", pfx), planes, 1, 1, 0, 0);
    y = net_bn(nt, y, zoo_name(b, "%s.bn1", pfx), ZOO_BN_EPS);
    y = net_relu(nt, y, zoo_name(b, "%s.relu1", pfx));
    y = net_conv(nt, y, zoo_name(b, "%s.conv2", pfx), planes, 3, stride, 1, 0);
    y = net_bn(nt, y, zoo_name(b, "%s.bn2", pfx), ZOO_BN_EPS);
    y = net_relu(nt, y, zoo_name(b, "%s.relu2", pfx));
    y = net_conv(nt, y, zoo_name(b, "%s.conv3", pfx), out_c, 1, 1, 0, 0);
    y = net_bn(nt, y, zoo_name(b, "%s.bn3", pfx), ZOO_BN_EPS);
    if (zero_init) net_set_init(nt, y, init_zero, init_zero);
    int shortcut = x;
    if (stride != 1 || in_c != out_c) {
        shortcut = net_conv(nt, x, zoo_name(b, "%s.downsample.0", pfx), out_c, 1, stride, 0, 0);
        shortcut = net_bn(nt, shortcut, zoo_name(b, "%s.downsample.1", pfx), ZOO_BN_EPS);
    }
    y = net_add(nt, y, shortcut, zoo_name(b, "%s.add", pfx));
    return net_relu(nt, y, zoo_name(b, "%s.relu3", pfx));
}

/* ImageNet ResNet: depth 18, 34 (BasicBlock) or 50, 101, 152 (Bottleneck). */
static int build_resnet(net *nt, int depth, const zoo_options *opt, int *out, int *aux_out) {
    static const struct {
        int depth, bottleneck, blocks[4];
    } cfgs[] = {
        {18, 0, {2, 2, 2, 2}},  {34, 0, {3, 4, 6, 3}},   {50, 1, {3, 4, 6, 3}},
        {101, 1, {3, 4, 23, 3}}, {152, 1, {3, 8, 36, 3}},
    };
    int c = 0;
    while (cfgs[c].depth != depth) c++;

    int x = net_conv(nt, NET_INPUT, "conv1", 64, 7, 2, 3, 0);
    x = net_bn(nt, x, "bn1", ZOO_BN_EPS);
    x = net_relu(nt, x, "relu");
    x = net_maxpool(nt, x, "maxpool", 3, 2, 1, 0);
    for (int stage = 0; stage < 4; stage++) {
        int planes = 64 << stage;
        for (int blk = 0; blk < cfgs[c].blocks[stage]; blk++) {
            char pfx[NET_NAME_LEN];
            zoo_name(pfx, "layer%d.%d", stage + 1, blk);
            int stride = (stage > 0 && blk == 0) ? 2 : 1;
            if (cfgs[c].bottleneck)
                x = resnet_bottleneck(nt, x, pfx, planes, stride, opt->zero_init_residual);
            else
                x = resnet_basic_block(nt, x, pfx, planes, stride, opt->zero_init_residual);
        }
    }
    x = net_adaptive_avgpool(nt, x, "avgpool", 1, 1);
    x = net_linear(nt, x, "fc", nt->classes, 1);
    *out = x;
    *aux_out = -1;
    return nt->failed ? CNT_ERR : CNT_OK;
}

/* CIFAR ResNet (He et al. 2016, sec. 4.2): depth = 6n + 2, BasicBlocks with
 * shortcut option A (subsample + zero channel padding) where the shape changes. */
static int build_resnet_cifar(net *nt, int depth, const zoo_options *opt, int *out, int *aux_out) {
    int n = (depth - 2) / 6;
    char b[NET_NAME_LEN];
    int x = net_conv(nt, NET_INPUT, "conv1", 16, 3, 1, 1, 0);
    x = net_bn(nt, x, "bn1", ZOO_BN_EPS);
    x = net_relu(nt, x, "relu");
    for (int stage = 0; stage < 3; stage++) {
        int planes = 16 << stage;
        for (int blk = 0; blk < n; blk++) {
            char pfx[NET_NAME_LEN];
            zoo_name(pfx, "layer%d.%d", stage + 1, blk);
            int stride = (stage > 0 && blk == 0) ? 2 : 1;
            int in_c = zoo_channels(nt, x);
            int y = net_conv(nt, x, zoo_name(b, "%s.conv1", pfx), planes, 3, stride, 1, 0);
            y = net_bn(nt, y, zoo_name(b, "%s.bn1", pfx), ZOO_BN_EPS);
            y = net_relu(nt, y, zoo_name(b, "%s.relu1", pfx));
            y = net_conv(nt, y, zoo_name(b, "%s.conv2", pfx), planes, 3, 1, 1, 0);
            /* the shortcut before bn2, so that bn2 comes right before the add
             * and computes it (net_set_fusion); after conv1, so that its
             * gradient still reaches x first and conv1's is added to it (in
             * bf16 and fp16 the order of that sum rounds differently) */
            int shortcut = x;
            if (stride != 1 || in_c != planes)
                shortcut = net_shortcut_pad(nt, x, zoo_name(b, "%s.shortcut", pfx), planes, stride);
            y = net_bn(nt, y, zoo_name(b, "%s.bn2", pfx), ZOO_BN_EPS);
            if (opt->zero_init_residual) net_set_init(nt, y, init_zero, init_zero);
            y = net_add(nt, y, shortcut, zoo_name(b, "%s.add", pfx));
            x = net_relu(nt, y, zoo_name(b, "%s.relu2", pfx));
        }
    }
    x = net_adaptive_avgpool(nt, x, "avgpool", 1, 1);
    x = net_linear(nt, x, "fc", nt->classes, 1);
    *out = x;
    *aux_out = -1;
    return nt->failed ? CNT_ERR : CNT_OK;
}

/* --------------------------------------------------------------------- VGG */

#define VGG_M 0 /* max pool 2x2 / 2 in a VGG configuration */
#define VGG_CFG_END (-1)

/* variant: 0..3 = cfg A, B, D, E (VGG 11, 13, 16, 19); + 4 = with batch norm. */
static int build_vgg(net *nt, int variant, const zoo_options *opt, int *out, int *aux_out) {
    static const int cfgs[4][22] = {
        {64, VGG_M, 128, VGG_M, 256, 256, VGG_M, 512, 512, VGG_M, 512, 512, VGG_M, VGG_CFG_END},
        {64, 64, VGG_M, 128, 128, VGG_M, 256, 256, VGG_M, 512, 512, VGG_M, 512, 512, VGG_M, VGG_CFG_END},
        {64, 64, VGG_M, 128, 128, VGG_M, 256, 256, 256, VGG_M, 512, 512, 512, VGG_M, 512, 512, 512, VGG_M,
         VGG_CFG_END},
        {64, 64, VGG_M, 128, 128, VGG_M, 256, 256, 256, 256, VGG_M, 512, 512, 512, 512, VGG_M, 512, 512, 512,
         512, VGG_M, VGG_CFG_END},
    };
    const int *cfg = cfgs[variant % 4];
    int batch_norm = variant >= 4;
    const init_spec conv_w = {INIT_KAIMING_NORMAL_FAN_OUT, 0.0f};
    const init_spec linear_w = {INIT_NORMAL, 0.01f};
    float p = zoo_dropout(opt);
    char b[NET_NAME_LEN];

    /* features.N numbers every module of torchvision's nn.Sequential. */
    int idx = 0;
    int x = NET_INPUT;
    for (int i = 0; cfg[i] != VGG_CFG_END; i++) {
        if (cfg[i] == VGG_M) {
            x = net_maxpool(nt, x, zoo_name(b, "features.%d", idx++), 2, 2, 0, 0);
            continue;
        }
        x = net_conv(nt, x, zoo_name(b, "features.%d", idx++), cfg[i], 3, 1, 1, 1);
        net_set_init(nt, x, conv_w, init_zero);
        if (batch_norm) x = net_bn(nt, x, zoo_name(b, "features.%d", idx++), ZOO_BN_EPS);
        x = net_relu(nt, x, zoo_name(b, "features.%d", idx++));
    }
    x = net_adaptive_avgpool(nt, x, "avgpool", 7, 7);
    x = net_linear(nt, x, "classifier.0", 4096, 1);
    net_set_init(nt, x, linear_w, init_zero);
    x = net_relu(nt, x, "classifier.1");
    x = net_dropout(nt, x, "classifier.2", p);
    x = net_linear(nt, x, "classifier.3", 4096, 1);
    net_set_init(nt, x, linear_w, init_zero);
    x = net_relu(nt, x, "classifier.4");
    x = net_dropout(nt, x, "classifier.5", p);
    x = net_linear(nt, x, "classifier.6", nt->classes, 1);
    net_set_init(nt, x, linear_w, init_zero);
    *out = x;
    *aux_out = -1;
    return nt->failed ? CNT_ERR : CNT_OK;
}

/* ------------------------------------------------------------ Inception V3 */

/* BasicConv2d: conv (no bias, trunc_normal std) + BN eps 0.001 + ReLU; the
 * nodes are "<pfx>.conv", "<pfx>.bn", "<pfx>.relu". */
static int incep_conv(net *nt, int x, const char *pfx, int K, int R, int S, int stride, int pad_h, int pad_w,
                      float std) {
    char b[NET_NAME_LEN];
    const init_spec w = {INIT_TRUNC_NORMAL, std};
    int y = net_conv_rect(nt, x, zoo_name(b, "%s.conv", pfx), K, R, S, stride, stride, pad_h, pad_w, 0);
    net_set_init(nt, y, w, init_zero);
    y = net_bn(nt, y, zoo_name(b, "%s.bn", pfx), ZOO_INCEPTION_BN_EPS);
    return net_relu(nt, y, zoo_name(b, "%s.relu", pfx));
}

/* BasicConv2d with torchvision's default init, named "<block>.<branch>". */
static int incep_bc(net *nt, int x, const char *block, const char *branch, int K, int R, int S, int stride,
                    int pad_h, int pad_w) {
    char pfx[NET_NAME_LEN];
    return incep_conv(nt, x, zoo_name(pfx, "%s.%s", block, branch), K, R, S, stride, pad_h, pad_w, 0.1f);
}

/* The 3x3 / stride 1 / pad 1 average pool (count_include_pad) before branch_pool. */
static int incep_avgpool(net *nt, int x, const char *block) {
    char b[NET_NAME_LEN];
    return net_avgpool(nt, x, zoo_name(b, "%s.avg_pool", block), 3, 1, 1, 1);
}

static int incep_maxpool(net *nt, int x, const char *block) {
    char b[NET_NAME_LEN];
    return net_maxpool(nt, x, zoo_name(b, "%s.max_pool", block), 3, 2, 0, 0);
}

static int incep_cat(net *nt, const int *ins, int n, const char *block) {
    char b[NET_NAME_LEN];
    return net_concat(nt, ins, n, zoo_name(b, "%s.cat", block));
}

static int inception_a(net *nt, int x, const char *blk, int pool_features) {
    int br[4];
    br[0] = incep_bc(nt, x, blk, "branch1x1", 64, 1, 1, 1, 0, 0);
    br[1] = incep_bc(nt, x, blk, "branch5x5_1", 48, 1, 1, 1, 0, 0);
    br[1] = incep_bc(nt, br[1], blk, "branch5x5_2", 64, 5, 5, 1, 2, 2);
    br[2] = incep_bc(nt, x, blk, "branch3x3dbl_1", 64, 1, 1, 1, 0, 0);
    br[2] = incep_bc(nt, br[2], blk, "branch3x3dbl_2", 96, 3, 3, 1, 1, 1);
    br[2] = incep_bc(nt, br[2], blk, "branch3x3dbl_3", 96, 3, 3, 1, 1, 1);
    br[3] = incep_avgpool(nt, x, blk);
    br[3] = incep_bc(nt, br[3], blk, "branch_pool", pool_features, 1, 1, 1, 0, 0);
    return incep_cat(nt, br, 4, blk);
}

static int inception_b(net *nt, int x, const char *blk) {
    int br[3];
    br[0] = incep_bc(nt, x, blk, "branch3x3", 384, 3, 3, 2, 0, 0);
    br[1] = incep_bc(nt, x, blk, "branch3x3dbl_1", 64, 1, 1, 1, 0, 0);
    br[1] = incep_bc(nt, br[1], blk, "branch3x3dbl_2", 96, 3, 3, 1, 1, 1);
    br[1] = incep_bc(nt, br[1], blk, "branch3x3dbl_3", 96, 3, 3, 2, 0, 0);
    br[2] = incep_maxpool(nt, x, blk);
    return incep_cat(nt, br, 3, blk);
}

static int inception_c(net *nt, int x, const char *blk, int c7) {
    int br[4];
    br[0] = incep_bc(nt, x, blk, "branch1x1", 192, 1, 1, 1, 0, 0);
    br[1] = incep_bc(nt, x, blk, "branch7x7_1", c7, 1, 1, 1, 0, 0);
    br[1] = incep_bc(nt, br[1], blk, "branch7x7_2", c7, 1, 7, 1, 0, 3);
    br[1] = incep_bc(nt, br[1], blk, "branch7x7_3", 192, 7, 1, 1, 3, 0);
    br[2] = incep_bc(nt, x, blk, "branch7x7dbl_1", c7, 1, 1, 1, 0, 0);
    br[2] = incep_bc(nt, br[2], blk, "branch7x7dbl_2", c7, 7, 1, 1, 3, 0);
    br[2] = incep_bc(nt, br[2], blk, "branch7x7dbl_3", c7, 1, 7, 1, 0, 3);
    br[2] = incep_bc(nt, br[2], blk, "branch7x7dbl_4", c7, 7, 1, 1, 3, 0);
    br[2] = incep_bc(nt, br[2], blk, "branch7x7dbl_5", 192, 1, 7, 1, 0, 3);
    br[3] = incep_avgpool(nt, x, blk);
    br[3] = incep_bc(nt, br[3], blk, "branch_pool", 192, 1, 1, 1, 0, 0);
    return incep_cat(nt, br, 4, blk);
}

static int inception_d(net *nt, int x, const char *blk) {
    int br[3];
    br[0] = incep_bc(nt, x, blk, "branch3x3_1", 192, 1, 1, 1, 0, 0);
    br[0] = incep_bc(nt, br[0], blk, "branch3x3_2", 320, 3, 3, 2, 0, 0);
    br[1] = incep_bc(nt, x, blk, "branch7x7x3_1", 192, 1, 1, 1, 0, 0);
    br[1] = incep_bc(nt, br[1], blk, "branch7x7x3_2", 192, 1, 7, 1, 0, 3);
    br[1] = incep_bc(nt, br[1], blk, "branch7x7x3_3", 192, 7, 1, 1, 3, 0);
    br[1] = incep_bc(nt, br[1], blk, "branch7x7x3_4", 192, 3, 3, 2, 0, 0);
    br[2] = incep_maxpool(nt, x, blk);
    return incep_cat(nt, br, 3, blk);
}

/* torchvision concatenates [1x1, cat(3x3_2a, 3x3_2b), cat(3x3dbl_3a, 3x3dbl_3b),
 * pool]; one flat concat of the six tensors gives the same channel order. */
static int inception_e(net *nt, int x, const char *blk) {
    int br[6];
    br[0] = incep_bc(nt, x, blk, "branch1x1", 320, 1, 1, 1, 0, 0);
    int b3 = incep_bc(nt, x, blk, "branch3x3_1", 384, 1, 1, 1, 0, 0);
    br[1] = incep_bc(nt, b3, blk, "branch3x3_2a", 384, 1, 3, 1, 0, 1);
    br[2] = incep_bc(nt, b3, blk, "branch3x3_2b", 384, 3, 1, 1, 1, 0);
    int d3 = incep_bc(nt, x, blk, "branch3x3dbl_1", 448, 1, 1, 1, 0, 0);
    d3 = incep_bc(nt, d3, blk, "branch3x3dbl_2", 384, 3, 3, 1, 1, 1);
    br[3] = incep_bc(nt, d3, blk, "branch3x3dbl_3a", 384, 1, 3, 1, 0, 1);
    br[4] = incep_bc(nt, d3, blk, "branch3x3dbl_3b", 384, 3, 1, 1, 1, 0);
    br[5] = incep_avgpool(nt, x, blk);
    br[5] = incep_bc(nt, br[5], blk, "branch_pool", 192, 1, 1, 1, 0, 0);
    return incep_cat(nt, br, 6, blk);
}

/* InceptionAux on Mixed_6e's output (768 x 17 x 17 at 299 x 299). */
static int inception_aux(net *nt, int x) {
    const init_spec fc_w = {INIT_TRUNC_NORMAL, 0.001f};
    const init_spec fc_b = {INIT_TORCH_DEFAULT, 0.0f};
    x = net_avgpool(nt, x, "AuxLogits.avg_pool", 5, 3, 0, 1);
    x = incep_conv(nt, x, "AuxLogits.conv0", 128, 1, 1, 1, 0, 0, 0.1f);
    x = incep_conv(nt, x, "AuxLogits.conv1", 768, 5, 5, 1, 0, 0, 0.1f);
    x = net_adaptive_avgpool(nt, x, "AuxLogits.avgpool", 1, 1);
    x = net_linear(nt, x, "AuxLogits.fc", nt->classes, 1);
    net_set_init(nt, x, fc_w, fc_b);
    return x;
}

static int build_inception_v3(net *nt, int variant, const zoo_options *opt, int *out, int *aux_out) {
    (void)variant;
    const init_spec fc_w = {INIT_TRUNC_NORMAL, 0.1f};
    const init_spec fc_b = {INIT_TORCH_DEFAULT, 0.0f};
    int x = incep_conv(nt, NET_INPUT, "Conv2d_1a_3x3", 32, 3, 3, 2, 0, 0, 0.1f);
    x = incep_conv(nt, x, "Conv2d_2a_3x3", 32, 3, 3, 1, 0, 0, 0.1f);
    x = incep_conv(nt, x, "Conv2d_2b_3x3", 64, 3, 3, 1, 1, 1, 0.1f);
    x = net_maxpool(nt, x, "maxpool1", 3, 2, 0, 0);
    x = incep_conv(nt, x, "Conv2d_3b_1x1", 80, 1, 1, 1, 0, 0, 0.1f);
    x = incep_conv(nt, x, "Conv2d_4a_3x3", 192, 3, 3, 1, 0, 0, 0.1f);
    x = net_maxpool(nt, x, "maxpool2", 3, 2, 0, 0);
    x = inception_a(nt, x, "Mixed_5b", 32);
    x = inception_a(nt, x, "Mixed_5c", 64);
    x = inception_a(nt, x, "Mixed_5d", 64);
    x = inception_b(nt, x, "Mixed_6a");
    x = inception_c(nt, x, "Mixed_6b", 128);
    x = inception_c(nt, x, "Mixed_6c", 160);
    x = inception_c(nt, x, "Mixed_6d", 160);
    x = inception_c(nt, x, "Mixed_6e", 192);
    int aux = -1;
    if (opt->aux_logits) {
        int failed_before = nt->failed;
        aux = inception_aux(nt, x);
        if (nt->failed && !failed_before)
            return cnt_err_prefix("the auxiliary classifier needs an input of at least 299x299 "
                                  "(build without aux logits for smaller inputs)");
    }
    x = inception_d(nt, x, "Mixed_7a");
    x = inception_e(nt, x, "Mixed_7b");
    x = inception_e(nt, x, "Mixed_7c");
    x = net_adaptive_avgpool(nt, x, "avgpool", 1, 1);
    x = net_dropout(nt, x, "dropout", zoo_dropout(opt));
    x = net_linear(nt, x, "fc", nt->classes, 1);
    net_set_init(nt, x, fc_w, fc_b);
    *out = x;
    *aux_out = aux;
    return nt->failed ? CNT_ERR : CNT_OK;
}

/* ------------------------------------------------------------------ lookup */

static const zoo_entry zoo_table[] = {
    {"resnet18", build_resnet, 18},
    {"resnet34", build_resnet, 34},
    {"resnet50", build_resnet, 50},
    {"resnet101", build_resnet, 101},
    {"resnet152", build_resnet, 152},
    {"resnet20", build_resnet_cifar, 20},
    {"resnet32", build_resnet_cifar, 32},
    {"resnet56", build_resnet_cifar, 56},
    {"resnet110", build_resnet_cifar, 110},
    {"vgg11", build_vgg, 0},
    {"vgg13", build_vgg, 1},
    {"vgg16", build_vgg, 2},
    {"vgg19", build_vgg, 3},
    {"vgg11_bn", build_vgg, 4},
    {"vgg13_bn", build_vgg, 5},
    {"vgg16_bn", build_vgg, 6},
    {"vgg19_bn", build_vgg, 7},
    {"inception_v3", build_inception_v3, 0},
};

/* Kept equal to zoo_table's names, in order (tests/test_zoo.c checks it). */
static const char zoo_all_names[] = "resnet18 resnet34 resnet50 resnet101 resnet152 resnet20 resnet32 resnet56 "
                                    "resnet110 vgg11 vgg13 vgg16 vgg19 vgg11_bn vgg13_bn vgg16_bn vgg19_bn "
                                    "inception_v3";

static const zoo_entry *zoo_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof zoo_table / sizeof zoo_table[0]; i++)
        if (strcmp(zoo_table[i].name, name) == 0) return &zoo_table[i];
    return NULL;
}

int zoo_has(const char *name) { return zoo_find(name) != NULL; }

const char *zoo_names(void) { return zoo_all_names; }

void zoo_imagenet_shape(const char *name, int *c, int *h, int *w) {
    int side = (name && strcmp(name, "inception_v3") == 0) ? 299 : 224;
    *c = 3;
    *h = side;
    *w = side;
}

/* Beyond zoo.h's contract: opt NULL means all defaults (no zero init, no aux
 * logits, the model's dropout); aux_out may be NULL; *out and *aux_out are -1
 * after any failure; a net that already has nodes, a net whose creation failed
 * and a dropout probability of 1 or more are CNT_ERR too. */
int zoo_build(net *nt, const char *name, const zoo_options *opt, int *out, int *aux_out) {
    static const zoo_options defaults = {0, 0, -1.0f, BACKEND_MATH_FP32, 0, BACKEND_DTYPE_FP32,
                                         BACKEND_CONV_API_LEGACY};
    if (out) *out = -1;
    if (aux_out) *aux_out = -1;
    const zoo_entry *e = zoo_find(name);
    if (!e) return cnt_err_set("unknown model '%s' (available: %s)", name ? name : "(null)", zoo_all_names);
    if (!nt || !out) return cnt_err_set("model '%s': no net or no output index to build into", name);
    if (nt->failed) return cnt_err_prefix("model '%s'", name);
    if (nt->n_nodes != 0)
        return cnt_err_set("model '%s': the net must be freshly created (it has %d nodes)", name, nt->n_nodes);
    if (!opt) opt = &defaults;
    if (opt->dropout >= 1.0f)
        return cnt_err_set("model '%s': dropout probability %g must be below 1", name, (double)opt->dropout);

    int aux = -1;
    if (e->build(nt, e->variant, opt, out, &aux) != CNT_OK) {
        const char *inner = cnt_err_msg();
        *out = -1;
        if (strstr(inner, "too small") || strstr(inner, "at least") || strstr(inner, "empty output"))
            return cnt_err_prefix("model '%s': input %dx%dx%d is too small", name, nt->in_c, nt->in_h, nt->in_w);
        return cnt_err_prefix("model '%s': cannot build for input %dx%dx%d with %d classes", name, nt->in_c,
                              nt->in_h, nt->in_w, nt->classes);
    }
    if (aux_out) *aux_out = aux;
    return CNT_OK;
}

net *zoo_create(const backend *be, const char *name, const zoo_options *zo, int c, int h, int w, int classes,
                int layout, int max_batch) {
    net *nt = net_create(be, c, h, w, classes);
    net_set_layout(nt, layout);
    if (zo) net_set_math(nt, zo->math);
    if (zo) net_set_fusion(nt, !zo->no_fusion);
    if (zo) net_set_activations(nt, zo->activations);
    if (zo) net_set_conv_api(nt, zo->conv_api);
    int out = -1, aux = -1;
    if (zoo_build(nt, name, zo, &out, &aux) != CNT_OK || net_finalize(nt, out, aux, max_batch) != CNT_OK) {
        net_free(nt); /* leaves the message */
        return NULL;
    }
    return nt;
}
