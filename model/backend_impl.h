/*
 * model/backend_impl.h - the backends' constructors, for
 * model/backend_registry.c and for backends built on another one. Layer code
 * and everything outside model/backend*.c use model/backend.h only.
 */
#ifndef CNT_BACKEND_IMPL_H
#define CNT_BACKEND_IMPL_H

#include "model/backend.h"

#include <stdint.h>
#include <string.h>

/* model/backend_cpu.c: OpenBLAS + OpenMP, layouts NCHW and NHWC (block_c 0).
 * Always built. */
const backend *backend_cpu_openblas(void);

/* The CPU backend's scratch and reduced-precision helpers, shared by its two
 * parts (model/backend_cpu.c, model/backend_onednn.c). */
typedef struct cpu_buf {
    float *data;
    size_t cap; /* floats */
} cpu_buf;
/* b's buffer, grown (64-byte aligned, old contents dropped) to at least
 * `floats`; fatal when out of memory. */
float *cpu_buf_get(cpu_buf *b, size_t floats);
/* Whether math mode `math` is bf16 or fp16 (the CPU backend emulates them). */
int cpu_math_reduced(int math);
/* dst[0, n) = src rounded to the type of `math` (bf16 or fp16), in parallel
 * chunks when large. */
void cpu_round_to_math(int math, float *dst, const float *src, size_t n);
/* A copy of src[0, n) rounded so, in b. */
const float *cpu_rounded_copy(int math, cpu_buf *b, const float *src, size_t n);

/* relu_bwd's rule for one value, y > 0 ? d : +0, as a bit mask, so that
 * the loops using it vectorise (gcc leaves the ternary's conditional load of
 * d scalar in loops that also sum in double). Same bits as the ternary. */
static inline float cpu_relu_grad(float y, float d) {
    uint32_t u;
    memcpy(&u, &d, sizeof u);
    u &= -(uint32_t)(y > 0.0f);
    float g;
    memcpy(&g, &u, sizeof g);
    return g;
}

/* model/backend_onednn.c (built with CNT_HAVE_ONEDNN): the OpenBLAS backend's
 * table with BACKEND_LAYOUT_BLOCKED added on oneDNN; NCHW and NHWC still run
 * the OpenBLAS ops. Fatal (with oneDNN's status) when oneDNN cannot start. */
const backend *backend_cpu_onednn(void);

/* model/backend_cpu16.c: the CPU backend as callers get it (backend_cpu):
 * the fp32 table given (OpenBLAS's or oneDNN's) with 16-bit activation
 * storage on top. One fp32 table per process; the same table on every call. */
const backend *backend_cpu16(const backend *fp32);

/* model/backend_cuda.c (built with CNT_HAVE_CUDA_BACKEND). */
const backend *backend_cuda(int local_rank); /* NULL when no device is usable (reason in cnt_err_msg) */
int backend_cuda_describe(char *buf, size_t len);
/* backend_libraries' lines of each part. */
void backend_cpu_libraries(char *buf, size_t len);
void backend_onednn_libraries(char *buf, size_t len);
void backend_cuda_libraries(char *buf, size_t len);

#endif
