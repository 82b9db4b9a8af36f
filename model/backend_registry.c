/*
 * model/backend_registry.c - which backends this binary has, chosen by name.
 *
 * The only file outside a backend's own sources that knows whether CUDA was
 * compiled in (CNT_HAVE_CUDA_BACKEND, set by the Makefile when the CUDA
 * toolkit, cuDNN and cuBLAS were found).
 */
#include "model/backend.h"
#include "common/check.h"

#include <stdio.h>
#include <string.h>

#if CNT_HAVE_CUDA_BACKEND
/* model/backend_cuda.c */
const backend *backend_cuda(int local_rank); /* NULL when no device is usable (reason in cnt_err_msg) */
int backend_cuda_describe(char *buf, size_t len);
#endif

int backend_math_from_name(const char *name) {
    static const char *const names[] = {[BACKEND_MATH_FP32] = "fp32", [BACKEND_MATH_TF32] = "tf32",
                                        [BACKEND_MATH_BF16] = "bf16", [BACKEND_MATH_FP16] = "fp16"};
    for (int m = 0; m < (int)(sizeof names / sizeof names[0]); m++)
        if (strcmp(name, names[m]) == 0) return m;
    return -1;
}

int backend_layout_from_name(const char *name, const backend *be, int math) {
    if (strcmp(name, "nchw") == 0) return BACKEND_LAYOUT_NCHW;
    if (strcmp(name, "nhwc") == 0) return BACKEND_LAYOUT_NHWC;
    if (strcmp(name, "auto") != 0) return -1;
    int reduced = math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16;
    return reduced && strcmp(be->name, "cpu") != 0 ? BACKEND_LAYOUT_NHWC : BACKEND_LAYOUT_NCHW;
}

const char *backend_list_built(void) {
#if CNT_HAVE_CUDA_BACKEND
    return "cpu cuda";
#else
    return "cpu";
#endif
}

const backend *backend_get_for_rank(const char *name, int local_rank) {
    if (strcmp(name, "cpu") == 0) return backend_cpu();
    if (strcmp(name, "cuda") == 0) {
#if CNT_HAVE_CUDA_BACKEND
        return backend_cuda(local_rank);
#else
        (void)local_rank;
        cnt_err_set("device 'cuda' requested but this binary has no CUDA backend (built in: %s)",
                    backend_list_built());
        return NULL;
#endif
    }
    if (strcmp(name, "auto") == 0) {
#if CNT_HAVE_CUDA_BACKEND
        const backend *be = backend_cuda(local_rank);
        if (be) return be;
#else
        (void)local_rank;
#endif
        return backend_cpu();
    }
    cnt_err_set("unknown device '%s' (expected auto, cpu or cuda)", name);
    return NULL;
}

const backend *backend_get(const char *name) { return backend_get_for_rank(name, 0); }

int backend_describe_devices(char *buf, size_t len) {
#if CNT_HAVE_CUDA_BACKEND
    return backend_cuda_describe(buf, len);
#else
    snprintf(buf, len, "cuda: not built in (this binary has: %s)\n", backend_list_built());
    return 0;
#endif
}
