/*
 * model/backend_impl.h - the backends' constructors, for
 * model/backend_registry.c and for backends built on another one. Layer code
 * and everything outside model/backend*.c use model/backend.h only.
 */
#ifndef CNT_BACKEND_IMPL_H
#define CNT_BACKEND_IMPL_H

#include "model/backend.h"

/* model/backend_cpu.c: OpenBLAS + OpenMP, layouts NCHW and NHWC (block_c 0).
 * Always built. */
const backend *backend_cpu_openblas(void);

/* model/backend_onednn.c (built with CNT_HAVE_ONEDNN): the OpenBLAS backend's
 * table with BACKEND_LAYOUT_BLOCKED added on oneDNN; NCHW and NHWC still run
 * the OpenBLAS ops. Fatal (with oneDNN's status) when oneDNN cannot start. */
const backend *backend_cpu_onednn(void);

/* model/backend_cuda.c (built with CNT_HAVE_CUDA_BACKEND). */
const backend *backend_cuda(int local_rank); /* NULL when no device is usable (reason in cnt_err_msg) */
int backend_cuda_describe(char *buf, size_t len);

#endif
