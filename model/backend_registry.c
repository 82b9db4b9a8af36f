/*
 * model/backend_registry.c - which backends this binary has, chosen by name.
 *
 * The only file outside a backend's own sources that knows whether CUDA was
 * compiled in (CNT_HAVE_CUDA, set by the Makefile's probe).
 */
#include "model/backend.h"
#include "common/check.h"

#include <string.h>

#if CNT_HAVE_CUDA_BACKEND
const backend *backend_cuda(void); /* NULL when no device is usable (message in cnt_err_msg) */
#endif

const char *backend_list_built(void) {
#if CNT_HAVE_CUDA_BACKEND
    return "cpu cuda";
#else
    return "cpu";
#endif
}

const backend *backend_get(const char *name) {
    if (strcmp(name, "cpu") == 0) return backend_cpu();
    if (strcmp(name, "cuda") == 0) {
#if CNT_HAVE_CUDA_BACKEND
        return backend_cuda();
#else
        cnt_err_set("device 'cuda' requested but this binary has no CUDA backend (built in: %s)",
                    backend_list_built());
        return NULL;
#endif
    }
    if (strcmp(name, "auto") == 0) {
#if CNT_HAVE_CUDA_BACKEND
        const backend *be = backend_cuda();
        if (be) return be;
#endif
        return backend_cpu();
    }
    cnt_err_set("unknown device '%s' (expected auto, cpu or cuda)", name);
    return NULL;
}
