/*
 * common/cuda_check.h - every CUDA, cuDNN, cuBLAS and NCCL call goes through
 * one of these macros: a failure ends the process with file:line, the call as
 * written and the library's own error string (through cnt_fatal, so under MPI
 * the whole job stops instead of hanging on a collective).
 *
 * Include the library headers first; each macro exists only when its
 * library's header was included.
 */
#ifndef CNT_CUDA_CHECK_H
#define CNT_CUDA_CHECK_H

#include "common/check.h"

#ifdef __CUDA_RUNTIME_H__
#define CUDA_CHECK(call)                                                                               \
    do {                                                                                               \
        cudaError_t cnt_e_ = (call);                                                                   \
        if (cnt_e_ != cudaSuccess)                                                                     \
            cnt_fatal_at(__FILE__, __LINE__, 1, NULL, "%s: CUDA error %d: %s", #call, (int)cnt_e_,          \
                      cudaGetErrorString(cnt_e_));                                                     \
    } while (0)
#endif

#ifdef CUDNN_MAJOR
#define CUDNN_CHECK(call)                                                                              \
    do {                                                                                               \
        cudnnStatus_t cnt_s_ = (call);                                                                 \
        if (cnt_s_ != CUDNN_STATUS_SUCCESS)                                                            \
            cnt_fatal_at(__FILE__, __LINE__, 1, NULL, "%s: cuDNN error %d: %s", #call, (int)cnt_s_,         \
                      cudnnGetErrorString(cnt_s_));                                                    \
    } while (0)
#endif

#ifdef CUBLAS_VER_MAJOR
#define CUBLAS_CHECK(call)                                                                             \
    do {                                                                                               \
        cublasStatus_t cnt_s_ = (call);                                                                \
        if (cnt_s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            cnt_fatal_at(__FILE__, __LINE__, 1, NULL, "%s: cuBLAS error %d: %s", #call, (int)cnt_s_,        \
                      cublasGetStatusString(cnt_s_));                                                  \
    } while (0)
#endif

#ifdef NCCL_MAJOR
#define NCCL_CHECK(call)                                                                               \
    do {                                                                                               \
        ncclResult_t cnt_r_ = (call);                                                                  \
        if (cnt_r_ != ncclSuccess)                                                                     \
            cnt_fatal_at(__FILE__, __LINE__, 1, NULL, "%s: NCCL error %d: %s (%s)", #call, (int)cnt_r_,     \
                      ncclGetErrorString(cnt_r_), ncclGetLastError(NULL));                             \
    } while (0)
#endif

#endif
