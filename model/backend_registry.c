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

backend_layout backend_layout_choose(backend_layout requested, const backend *be, backend_math math) {
    if (requested != BACKEND_LAYOUT_AUTO) return requested;
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

const backend *backend_get_for_rank(backend_device device, int local_rank) {
    switch (device) {
    case BACKEND_DEVICE_CPU: return backend_cpu();
    case BACKEND_DEVICE_CUDA:
#if CNT_HAVE_CUDA_BACKEND
        return backend_cuda(local_rank);
#else
        (void)local_rank;
        cnt_err_set("device 'cuda' requested but this binary has no CUDA backend (built in: %s)",
                    backend_list_built());
        return NULL;
#endif
    case BACKEND_DEVICE_AUTO: {
#if CNT_HAVE_CUDA_BACKEND
        const backend *be = backend_cuda(local_rank);
        if (be) return be;
#else
        (void)local_rank;
#endif
        return backend_cpu();
    }
    }
    cnt_err_set("unknown device %d (expected auto, cpu or cuda)", (int)device);
    return NULL;
}

const backend *backend_get(backend_device device) { return backend_get_for_rank(device, 0); }

int backend_describe_devices(char *buf, size_t len) {
#if CNT_HAVE_CUDA_BACKEND
    return backend_cuda_describe(buf, len);
#else
    snprintf(buf, len, "cuda: not built in (this binary has: %s)\n", backend_list_built());
    return 0;
#endif
}
