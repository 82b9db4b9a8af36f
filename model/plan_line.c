/*
 * model/plan_line.c - a convolution plan's line of text (see
 * model/plan_line.h).
 */
#include "model/plan_line.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"

#define PLAN_LINE_MAX_INDEX 4096 /* far more configurations than cuDNN's heuristics offer */

size_t plan_line_format(const plan_line *l, char *buf, size_t len) {
    const conv_params *p = &l->p;
    char graph[256];
    size_t o = 0;
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 2; b++) {
            int n = snprintf(graph + o, sizeof graph - o, " %d %" PRId64, l->graph_index[k][b],
                             l->graph_engine[k][b]);
            o += n > 0 && (size_t)n < sizeof graph - o ? (size_t)n : 0;
        }
    int n = snprintf(buf, len,
                     "%d %d %d %d %d %d %d %d %d %d %d %d %d math %d layout %d fwd %d %d %d %zu data %d %d %d %zu "
                     "filter %d %d %d %zu graph%s\n",
                     p->N, p->C, p->H, p->W, p->K, p->R, p->S, p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->P,
                     p->Q, l->math, l->layout, l->have[0], l->algo[0], l->math_type[0], l->ws[0], l->have[1],
                     l->algo[1], l->math_type[1], l->ws[1], l->have[2], l->algo[2], l->math_type[2], l->ws[2], graph);
    return n < 0 ? 0 : (size_t)n;
}

int plan_line_parse(const char *text, plan_line *l) {
    memset(l, 0, sizeof *l);
    conv_params *p = &l->p;
    int used = 0;
    int got = sscanf(text,
                     "%d %d %d %d %d %d %d %d %d %d %d %d %d math %d layout %d fwd %d %d %d %zu data %d %d %d %zu "
                     "filter %d %d %d %zu graph%n",
                     &p->N, &p->C, &p->H, &p->W, &p->K, &p->R, &p->S, &p->stride_h, &p->stride_w, &p->pad_h,
                     &p->pad_w, &p->P, &p->Q, &l->math, &l->layout, &l->have[0], &l->algo[0], &l->math_type[0],
                     &l->ws[0], &l->have[1], &l->algo[1], &l->math_type[1], &l->ws[1], &l->have[2], &l->algo[2],
                     &l->math_type[2], &l->ws[2], &used);
    if (got != 27 || used == 0) return 0;
    const char *s = text + used;
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 2; b++) {
            int n = 0;
            if (sscanf(s, " %d %" SCNd64 "%n", &l->graph_index[k][b], &l->graph_engine[k][b], &n) != 2 || n == 0)
                return 0;
            s += n;
            int i = l->graph_index[k][b];
            int64_t e = l->graph_engine[k][b];
            if (i == -1 ? e != -1 : i < 0 || i >= PLAN_LINE_MAX_INDEX || e < 0) return 0;
        }
    if (*s != '\n' && *s != '\0') return 0;
    conv_params q = *p;
    if (p->N <= 0 || p->C <= 0 || p->K <= 0 || p->R <= 0 || p->S <= 0 || p->stride_h <= 0 || p->stride_w <= 0 ||
        p->pad_h < 0 || p->pad_w < 0 || conv_params_init(&q) != CNT_OK || q.P != p->P || q.Q != p->Q)
        return 0;
    if (l->math < BACKEND_MATH_FP32 || l->math > BACKEND_MATH_FP16) return 0;
    if (l->layout != BACKEND_LAYOUT_NCHW && l->layout != BACKEND_LAYOUT_NHWC) return 0;
    for (int k = 0; k < 3; k++)
        if ((l->have[k] != 0 && l->have[k] != 1) || l->algo[k] < 0 || l->math_type[k] < 0) return 0;
    return 1;
}
