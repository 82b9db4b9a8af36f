/*
 * model/plan_line.h - one line of the text a GPU backend's plans_export
 * writes (model/backend.h; kept in out_dir by train/plans.h): what was chosen
 * for one convolution shape in one math mode and layout. Written and read
 * here, in plain C, so that the format is tested on a machine without a GPU
 * (tests/test_plans.c); what the numbers mean to cuDNN (an algorithm below
 * its count, a workspace within the limit, a graph engine that still is at
 * that place in the heuristics' list) the backend checks when it takes them.
 *
 *   N C H W K R S stride_h stride_w pad_h pad_w P Q math M layout L
 *     fwd HAVE ALGO MATHTYPE WS data ... filter ...
 *     graph I0 E0 I1 E1 ... I5 E5
 *
 * on one line: per legacy pass (forward, data gradient, filter gradient)
 * whether it chose, its algorithm, its cudnnMathType_t and its workspace in
 * bytes; then per graph-API plan (pass, then output blend beta 0 and 1, as
 * model/cudnn_graph.h's cg_pass) the chosen configuration's place in
 * cuDNN's heuristics list and its engine's global index, -1 -1 where none
 * was made.
 */
#ifndef CNT_PLAN_LINE_H
#define CNT_PLAN_LINE_H

#include <stddef.h>
#include <stdint.h>

#include "model/backend.h"

typedef struct plan_line {
    conv_params p; /* conv_params_init'ed: P and Q consistent with the rest */
    int math, layout;
    int have[3], algo[3], math_type[3];
    size_t ws[3];
    int graph_index[3][2];       /* -1: no graph plan */
    int64_t graph_engine[3][2];  /* -1 with index -1 */
} plan_line;

/* l as one line of text, with its newline, into buf (len bytes, always
 * terminated); the length it needs, as snprintf. */
size_t plan_line_format(const plan_line *l, char *buf, size_t len);
/* The line at text (up to its newline or end) into *l: 1 where it parses
 * whole and its shape, mode, layout and graph choices are consistent, else
 * 0 (*l then unspecified). Algorithms, math types and workspaces are
 * checked only for sign. */
int plan_line_parse(const char *text, plan_line *l);

#endif
