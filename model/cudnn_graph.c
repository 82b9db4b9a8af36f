/*
 * model/cudnn_graph.c - convolutions through cuDNN's backend API (see
 * model/cudnn_graph.h).
 *
 * The descriptors, in the order cuDNN wants them finalised: three tensors
 * (uids 1, 2, 3 for the x, w and y slots), the convolution, the operation
 * (forward, backward data or backward filter, alpha 1 and the beta asked
 * for), the graph of that one operation, the heuristics' list of engine
 * configurations, and per configuration an execution plan. A plan's call is
 * a variant pack (the three pointers and the workspace) and
 * cudnnBackendExecute.
 */
#include "model/cudnn_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/cuda_check.h"
#include "model/backend.h"

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };
#define CG_MAX_CONFIGS 64 /* engine configurations looked at, best first */
#define CG_TIMED_RUNS 2   /* after one untimed run */

struct cg_plan {
    cudnnBackendDescriptor_t plan;
    cg_pass pass;
    int64_t ws;
    int64_t engine;         /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX */
    int index;              /* its configuration's place in the heuristics' list */
    int offered, qualified; /* configurations: the heuristics', those the math mode admits and cuDNN finalised
                             * (taken by cg_plan_take: qualified 0) */
    float ms;               /* its timed run (taken: -1, not timed) */
};

static cudnnStatus_t set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                              cudnnBackendAttributeType_t type, int64_t count, const void *value) {
    return cudnnBackendSetAttribute(d, name, type, count, value);
}

/* st's first failure: set_attr chains stop at it. */
#define TRY(st, call)                                  \
    do {                                               \
        if ((st) == CUDNN_STATUS_SUCCESS) (st) = (call); \
    } while (0)

static void destroy(cudnnBackendDescriptor_t *d) {
    if (*d) cudnnBackendDestroyDescriptor(*d);
    *d = NULL;
}

/* A finalised tensor descriptor of dims (N, C, H, W order), laid out NCHW
 * or, with nhwc, channels innermost. */
static cudnnStatus_t tensor(cudnnBackendDescriptor_t *d, cudnnDataType_t type, const int64_t dims[4], int nhwc,
                            int64_t uid) {
    int64_t st4[4], align = 16;
    if (nhwc) {
        st4[1] = 1;
        st4[3] = dims[1];
        st4[2] = dims[3] * dims[1];
        st4[0] = dims[2] * dims[3] * dims[1];
    } else {
        st4[3] = 1;
        st4[2] = dims[3];
        st4[1] = dims[2] * dims[3];
        st4[0] = dims[1] * dims[2] * dims[3];
    }
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, d);
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st4));
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    TRY(st, set_attr(*d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    TRY(st, cudnnBackendFinalize(*d));
    return st;
}

/* The operation graph of cv's pass with output blend beta, into *graph. */
static cudnnStatus_t make_graph(cudnnHandle_t h, const cg_conv *cv, cg_pass pass, float beta,
                                cudnnBackendDescriptor_t *graph) {
    const int64_t xd[4] = {cv->n, cv->c, cv->h, cv->w}, wd[4] = {cv->k, cv->c, cv->r, cv->s};
    const int64_t yd[4] = {cv->n, cv->k, cv->p, cv->q};
    const int64_t two = 2, pads[2] = {cv->pad_h, cv->pad_w}, strides[2] = {cv->stride_h, cv->stride_w};
    const int64_t dil[2] = {1, 1};
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const float alpha = 1.0f;
    cudnnBackendDescriptor_t x = NULL, w = NULL, y = NULL, conv = NULL, op = NULL;
    cudnnStatus_t st = tensor(&x, cv->type, xd, cv->nhwc, UID_X);
    TRY(st, tensor(&w, cv->type, wd, cv->nhwc, UID_W));
    TRY(st, tensor(&y, cv->type, yd, cv->nhwc, UID_Y));
    TRY(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
    TRY(st, set_attr(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
    TRY(st, cudnnBackendFinalize(conv));
    static const cudnnBackendDescriptorType_t kinds[] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    /* per pass: the x, w, y, conv, alpha and beta attributes */
    static const cudnnBackendAttributeName_t names[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    const cudnnBackendAttributeName_t *a = names[pass];
    TRY(st, cudnnBackendCreateDescriptor(kinds[pass], &op));
    TRY(st, set_attr(op, a[0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    TRY(st, set_attr(op, a[1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    TRY(st, set_attr(op, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    TRY(st, set_attr(op, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    TRY(st, set_attr(op, a[4], CUDNN_TYPE_FLOAT, 1, &alpha));
    TRY(st, set_attr(op, a[5], CUDNN_TYPE_FLOAT, 1, &beta));
    TRY(st, cudnnBackendFinalize(op));
    TRY(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph));
    TRY(st, set_attr(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    TRY(st, set_attr(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    TRY(st, cudnnBackendFinalize(*graph));
    /* the graph holds what it needs of the others */
    destroy(&op);
    destroy(&conv);
    destroy(&y);
    destroy(&w);
    destroy(&x);
    if (st != CUDNN_STATUS_SUCCESS) destroy(graph);
    return st;
}

/* Whether engine configuration cfg qualifies in math mode `math` by its
 * engine's numerical and behaviour notes (see the header); *engine: its
 * global index. */
static int qualifies(cudnnBackendDescriptor_t cfg, int math, int64_t *engine) {
    cudnnBackendDescriptor_t eng = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
    int64_t got = 0;
    TRY(st, cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng));
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0;
    TRY(st, cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
    cudnnBackendBehaviorNote_t behaviour[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t nb = 0;
    TRY(st, cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                     CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, behaviour));
    *engine = -1;
    TRY(st, cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, engine));
    destroy(&eng);
    if (st != CUDNN_STATUS_SUCCESS) return 0;
    /* compiled at finalisation (NVRTC): seconds each, for every shape of every run */
    for (int64_t i = 0; i < nb && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
        if (behaviour[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return 0;
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
        if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
            notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
            return 0;
        if (math == BACKEND_MATH_FP32 && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return 0;
        /* Winograd on 13x13 tiles: errors far above fp32's (the legacy calls' fp32 tolerance) */
        if (math == BACKEND_MATH_FP32 && notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13) return 0;
    }
    return 1;
}

/* The variant pack of x, w, y and ws, and one run of plan on it. */
static cudnnStatus_t run(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const void *x, const void *w, const void *y,
                         void *ws) {
    const int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {(void *)x, (void *)w, (void *)y};
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    TRY(st, set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
    TRY(st, set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
    TRY(st, set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    TRY(st, cudnnBackendFinalize(vp));
    TRY(st, cudnnBackendExecute(h, plan, vp));
    destroy(&vp);
    /* a failed launch's CUDA error is this run's, not the next call's (a
     * candidate that fails is dropped; cg_execute's failure is fatal anyway) */
    if (st != CUDNN_STATUS_SUCCESS) (void)cudaGetLastError();
    return st;
}

/* The pointers a search's runs take: x, w, y with the pass's output slot
 * (y forward, x for the data gradient, w for the filter's) replaced by
 * env->scratch_out, so nothing the caller holds is written. */
static void trial_slots(const cg_env *env, cg_pass pass, const void **x, const void **w, const void **y) {
    if (pass == CG_FWD) *y = env->scratch_out;
    if (pass == CG_BWD_DATA) *x = env->scratch_out;
    if (pass == CG_BWD_FILTER) *w = env->scratch_out;
}

/* A finalised execution plan of cfg and its workspace; NULL where cuDNN
 * refuses it. */
static cudnnBackendDescriptor_t finalise(cudnnBackendDescriptor_t cfg, int64_t *ws) {
    cudnnBackendDescriptor_t plan = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    TRY(st, set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    TRY(st, cudnnBackendFinalize(plan));
    int64_t got = 0;
    *ws = 0;
    TRY(st, cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, ws));
    if (st != CUDNN_STATUS_SUCCESS) destroy(&plan);
    return plan;
}

/* The fastest of CG_TIMED_RUNS runs of plan after one untimed
 * run, in ms; a negative number where a run failed. */
static float time_plan(const cg_env *env, cudnnBackendDescriptor_t plan, size_t ws, const void *x, const void *w,
                       const void *y) {
    void *wsp = ws ? env->workspace(ws) : NULL;
    if (run(env->handle, plan, x, w, y, wsp) != CUDNN_STATUS_SUCCESS) return -1.0f;
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    float best = -1.0f;
    for (int i = 0; i < CG_TIMED_RUNS; i++) {
        CUDA_CHECK(cudaEventRecord(a, env->stream));
        cudnnStatus_t st = run(env->handle, plan, x, w, y, wsp);
        CUDA_CHECK(cudaEventRecord(b, env->stream));
        CUDA_CHECK(cudaEventSynchronize(b));
        if (st != CUDNN_STATUS_SUCCESS) {
            best = -1.0f;
            break;
        }
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (best < 0.0f || ms < best) best = ms;
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    return best;
}

/* The heuristics' engine configurations (mode A, best first) for cv's
 * pass with blend beta: *got of them in cfgs[CG_MAX_CONFIGS] (destroy each
 * with destroy()), and their operation graph in *graph_out, which the caller
 * destroys once it has finalised what it wants of them (no documentation
 * says plans may be finalised after their graph is gone); the first
 * failure's status. */
static cudnnStatus_t list_configs(cudnnHandle_t h, const cg_conv *cv, cg_pass pass, float beta,
                                  cudnnBackendDescriptor_t *cfgs, int64_t *got, cudnnBackendDescriptor_t *graph_out) {
    cudnnBackendDescriptor_t graph = NULL, heur = NULL;
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    *got = 0;
    cudnnStatus_t st = make_graph(h, cv, pass, beta, &graph);
    TRY(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    TRY(st, set_attr(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    TRY(st, set_attr(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    TRY(st, cudnnBackendFinalize(heur));
    int64_t offered = 0;
    /* the count first (no array), then that many configurations into
     * descriptors made for them */
    TRY(st, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &offered,
                                     NULL));
    if (offered > CG_MAX_CONFIGS) offered = CG_MAX_CONFIGS;
    for (int64_t i = 0; i < offered; i++)
        TRY(st, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
    if (offered > 0)
        TRY(st, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, offered,
                                         got, cfgs));
    /* what was made but not filled goes now */
    for (int64_t i = st == CUDNN_STATUS_SUCCESS ? *got : 0; i < offered; i++) destroy(&cfgs[i]);
    if (st != CUDNN_STATUS_SUCCESS) *got = 0;
    destroy(&heur);
    if (st == CUDNN_STATUS_SUCCESS) *graph_out = graph;
    else destroy(&graph);
    return st;
}

/* Whether cfg says (cuDNN 9.2 on) that it needs more workspace than limit,
 * so that it is not finalised for nothing; 0 where it does not say. */
static int over_limit(cudnnBackendDescriptor_t cfg, size_t limit) {
    int64_t ws = -1, got = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws) !=
        CUDNN_STATUS_SUCCESS)
        return 0;
    return got == 1 && ws > 0 && (uint64_t)ws > (uint64_t)limit;
}

cudnnStatus_t cg_count(cudnnHandle_t h, const cg_conv *cv, cg_pass pass, int *offered, int *qualified) {
    cudnnBackendDescriptor_t cfgs[CG_MAX_CONFIGS] = {NULL}, graph = NULL;
    int64_t got = 0;
    *offered = *qualified = 0;
    cudnnStatus_t st = list_configs(h, cv, pass, 0.0f, cfgs, &got, &graph);
    for (int64_t i = 0; i < got; i++) {
        int64_t engine, ws;
        if (qualifies(cfgs[i], cv->math, &engine)) {
            cudnnBackendDescriptor_t plan = finalise(cfgs[i], &ws);
            *qualified += plan != NULL;
            destroy(&plan);
        }
        destroy(&cfgs[i]);
    }
    destroy(&graph);
    *offered = (int)got;
    return st;
}

cg_plan *cg_plan_make(const cg_env *env, const cg_conv *cv, cg_pass pass, float beta, const void *x, const void *w,
                      const void *y, char *why, size_t len) {
    if (why && len) why[0] = '\0';
    cudnnBackendDescriptor_t cfgs[CG_MAX_CONFIGS] = {NULL}, graph = NULL;
    int64_t got = 0;
    cudnnStatus_t st = list_configs(env->handle, cv, pass, beta, cfgs, &got, &graph);
    if (st != CUDNN_STATUS_SUCCESS && why)
        snprintf(why, len, "cuDNN could not describe it: %s", cudnnGetErrorString(st));
    const void *tx = x, *tw = w, *ty = y;
    trial_slots(env, pass, &tx, &tw, &ty);
    cg_plan *best = NULL;
    int qualified = 0;
    for (int64_t i = 0; i < got; i++) {
        int64_t engine = -1, ws = 0;
        if (over_limit(cfgs[i], env->ws_limit)) {
            destroy(&cfgs[i]);
            continue;
        }
        cudnnBackendDescriptor_t plan = qualifies(cfgs[i], cv->math, &engine) ? finalise(cfgs[i], &ws) : NULL;
        destroy(&cfgs[i]);
        if (!plan) continue;
        qualified++;
        float ms = ws >= 0 && (size_t)ws <= env->ws_limit ? time_plan(env, plan, (size_t)ws, tx, tw, ty) : -1.0f;
        if (ms < 0.0f || (best && best->ms <= ms)) {
            destroy(&plan);
            continue;
        }
        if (!best) best = cnt_calloc(1, sizeof *best);
        else destroy(&best->plan);
        *best = (cg_plan){.plan = plan, .pass = pass, .ws = ws, .engine = engine, .index = (int)i, .ms = ms};
    }
    destroy(&graph);
    if (best) {
        best->offered = (int)got;
        best->qualified = qualified;
    } else if (why && !why[0]) {
        snprintf(why, len, "none of the %lld engine configurations cuDNN offered ran here (%d qualified)",
                 (long long)got, qualified);
    }
    return best;
}

cg_plan *cg_plan_take(const cg_env *env, const cg_conv *cv, cg_pass pass, float beta, int index, int64_t engine,
                      const void *x, const void *w, const void *y, char *why, size_t len) {
    if (why && len) why[0] = '\0';
    cudnnBackendDescriptor_t cfgs[CG_MAX_CONFIGS] = {NULL}, graph = NULL;
    int64_t got = 0, at = -1, ws = 0;
    cudnnStatus_t st = list_configs(env->handle, cv, pass, beta, cfgs, &got, &graph);
    cudnnBackendDescriptor_t plan = NULL;
    if (st != CUDNN_STATUS_SUCCESS) {
        if (why) snprintf(why, len, "cuDNN could not describe it: %s", cudnnGetErrorString(st));
    } else if (index < 0 || index >= got) {
        if (why) snprintf(why, len, "cuDNN's heuristics offer %lld configurations, not %d", (long long)got, index + 1);
    } else if (!qualifies(cfgs[index], cv->math, &at) || at != engine) {
        if (why)
            snprintf(why, len, "configuration %d is engine %lld%s, not engine %lld", index, (long long)at,
                     at == engine ? " of notes this run rules out" : "", (long long)engine);
    } else if (!(plan = finalise(cfgs[index], &ws))) {
        if (why) snprintf(why, len, "cuDNN refuses configuration %d (engine %lld) here", index, (long long)engine);
    } else if (ws < 0 || (size_t)ws > env->ws_limit) {
        if (why) snprintf(why, len, "engine %lld wants %lld bytes of workspace, over the limit", (long long)engine,
                          (long long)ws);
        destroy(&plan);
    } else {
        /* one run before it is trusted (a failure of a chosen plan is fatal later) */
        trial_slots(env, pass, &x, &w, &y);
        st = run(env->handle, plan, x, w, y, ws ? env->workspace((size_t)ws) : NULL);
        if (st != CUDNN_STATUS_SUCCESS) {
            if (why)
                snprintf(why, len, "engine %lld failed a trial run: %s", (long long)engine, cudnnGetErrorString(st));
            destroy(&plan);
        }
    }
    for (int64_t i = 0; i < got; i++) destroy(&cfgs[i]);
    destroy(&graph);
    if (!plan) return NULL;
    cg_plan *pl = cnt_calloc(1, sizeof *pl);
    *pl = (cg_plan){.plan = plan, .pass = pass, .ws = ws, .engine = engine, .index = index, .offered = (int)got,
                    .ms = -1.0f};
    return pl;
}

void cg_plan_choice(const cg_plan *pl, int *index, int64_t *engine) {
    *index = pl->index;
    *engine = pl->engine;
}

size_t cg_plan_workspace(const cg_plan *pl) { return (size_t)pl->ws; }

int cg_aligned(const void *x, const void *w, const void *y) {
    return (((uintptr_t)x | (uintptr_t)w | (uintptr_t)y) & 15) == 0;
}

void cg_execute(cudnnHandle_t h, const cg_plan *pl, const void *x, const void *w, const void *y, void *ws) {
    CNT_ASSERT(cg_aligned(x, w, y));
    CUDNN_CHECK(run(h, pl->plan, x, w, y, ws));
}

void cg_describe(const cg_plan *pl, char *buf, size_t len) {
    if (pl->ms < 0.0f) {
        snprintf(buf, len, "graph engine %lld (configuration %d of %d offered, as the plans file says), workspace "
                 "%.1f MiB",
                 (long long)pl->engine, pl->index, pl->offered, (double)pl->ws / 1048576.0);
        return;
    }
    snprintf(buf, len, "graph engine %lld (fastest of %d qualifying, %d offered), %.3f ms when chosen, workspace "
             "%.1f MiB",
             (long long)pl->engine, pl->qualified, pl->offered, (double)pl->ms, (double)pl->ws / 1048576.0);
}

void cg_plan_free(cg_plan *pl) {
    if (!pl) return;
    destroy(&pl->plan);
    free(pl);
}
