/*
 * model/backend_registry.c - which backends this binary has, chosen by name.
 *
 * The only file outside a backend's own sources that knows which optional
 * parts were compiled in: CUDA (CNT_HAVE_CUDA_BACKEND, set by the Makefile
 * when the CUDA toolkit, cuDNN and cuBLAS were found) and oneDNN
 * (CNT_HAVE_ONEDNN, the CPU backend's blocked layout).
 */
#include "model/backend.h"
#include "model/backend_impl.h"
#include "common/check.h"

#include <stdio.h>

backend_layout backend_layout_choose(backend_layout requested, const backend *be, backend_math math, int image_h,
                                     int image_w) {
    if (requested != BACKEND_LAYOUT_AUTO) return requested;
    if (be->block_c > 0) return BACKEND_LAYOUT_BLOCKED;
    /* On a GPU, NHWC wherever the convolutions run on tensor cores (cuDNN's
     * native layout for them): ResNet-50 at batch 64 on an H200 trained 1.21x
     * faster in NHWC than NCHW in TF32 and 1.03-1.14x in bf16. Except TF32 on
     * small images: ResNet-20 on 28x28 at batch 128 trained 1.2x faster in
     * NCHW (docs/benchmarks.md); the boundary, 64 pixels, lies somewhere
     * between the two sizes measured. Plain fp32 stays NCHW: not measured. */
    int tensor_cores = math == BACKEND_MATH_TF32 || math == BACKEND_MATH_BF16 || math == BACKEND_MATH_FP16;
    if (!tensor_cores || be->is_cpu) return BACKEND_LAYOUT_NCHW;
    int px = image_h < image_w ? image_h : image_w;
    if (math == BACKEND_MATH_TF32 && px < BACKEND_NHWC_TF32_MIN_PX) return BACKEND_LAYOUT_NCHW;
    return BACKEND_LAYOUT_NHWC;
}

int backend_layout_check(backend_layout requested, const backend *be) {
    if (requested != BACKEND_LAYOUT_BLOCKED || be->block_c > 0) return CNT_OK;
    return cnt_err_set("layout 'blocked' needs the CPU backend built with oneDNN (`make deps && make`); "
                       "backend '%s' of this binary has none: use nchw, nhwc or auto", be->name);
}

const char *backend_layout_name(backend_layout layout, const backend *be) {
    switch (layout) {
    case BACKEND_LAYOUT_NCHW: return "nchw";
    case BACKEND_LAYOUT_NHWC: return "nhwc";
    case BACKEND_LAYOUT_BLOCKED:
        return be && be->block_c == 8 ? "blocked (nChw8c)" : be && be->block_c == 16 ? "blocked (nChw16c)" : "blocked";
    case BACKEND_LAYOUT_AUTO: return "auto";
    }
    return "?";
}

const backend *backend_cpu(void) {
#if CNT_HAVE_ONEDNN
    return backend_cpu16(backend_cpu_onednn());
#else
    return backend_cpu16(backend_cpu_openblas());
#endif
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

void backend_libraries(char *buf, size_t len) {
    backend_cpu_libraries(buf, len);
#if CNT_HAVE_ONEDNN
    backend_onednn_libraries(buf, len);
#endif
#if CNT_HAVE_CUDA_BACKEND
    backend_cuda_libraries(buf, len);
#endif
}

int backend_describe_devices(char *buf, size_t len) {
#if CNT_HAVE_CUDA_BACKEND
    return backend_cuda_describe(buf, len);
#else
    snprintf(buf, len, "cuda: not built in (this binary has: %s)\n", backend_list_built());
    return 0;
#endif
}
