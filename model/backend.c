/*
 * model/backend.c - what every backend shares besides its table: the
 * weights epochs of backend_ctx, and the wrappers through which callers reach
 * the optional ops (ggml's pattern: the op where the backend has it, else a
 * fallback with the same result), so no caller tests an op's pointer.
 */
#include "model/backend.h"
#include "common/check.h"

#include <stdatomic.h>

uint64_t backend_epoch_new(void) {
    /* from any thread: one atomic counter for the process, so no two spans
     * (of any two nets) share a number, and 0 is never handed out */
    static atomic_uint_fast64_t last;
    return (uint64_t)atomic_fetch_add(&last, 1) + 1;
}

int backend_math_check(const backend *be, backend_math math) {
    CNT_ASSERT(math == BACKEND_MATH_FP32 || math == BACKEND_MATH_TF32 || math == BACKEND_MATH_BF16 ||
               math == BACKEND_MATH_FP16);
    return be->math_check ? be->math_check(math) : CNT_OK;
}

size_t backend_conv_filter_kept(const backend *be, const backend_ctx *ctx, const conv_params *p) {
    return be->conv_filter_kept ? be->conv_filter_kept(ctx, p) : 0;
}

