#!/usr/bin/env bash
# tools/probes/probe.sh > build/probe.mk
# Compiles and links each probe in this folder with the flags the Makefile
# found for its library (the environment: CC, CUDA_HOME, NVJPEG_HOME, MPICC,
# and BLAS_FLAGS, JANSSON_FLAGS, JPEG_FLAGS, INIH_FLAGS, ZLIB_FLAGS,
# STB_FLAGS, DNNL_FLAGS, CUDNN_FLAGS, NCCL_FLAGS, CMOCKA_FLAGS: include, link
# and rpath flags); prints HAVE_X := 0|1 lines for the Makefile. Detection
# never asks the package manager.
cc=${CC:-gcc}
cuda=${CUDA_HOME:-/usr/local/cuda}
nvjpeg=${NVJPEG_HOME:-$cuda}
dir=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
try() { # name compiler flags... (the flags word-split, as make passes them)
    local name=$1 comp=$2
    shift 2
    if $comp "$dir/$name.c" -o "$tmp/$name" $* >/dev/null 2>&1; then echo 1; else echo 0; fi
}
cuda_flags="-I$cuda/include -L$cuda/lib64 -Wl,-rpath,$cuda/lib64"
echo "HAVE_BLAS := $(try blas "$cc" "$BLAS_FLAGS")"
echo "HAVE_JANSSON := $(try jansson "$cc" "$JANSSON_FLAGS")"
echo "HAVE_JPEG := $(try jpeg "$cc" "$JPEG_FLAGS")"
echo "HAVE_INIH := $(try inih "$cc" "$INIH_FLAGS")"
echo "HAVE_ZLIB := $(try zlib "$cc" "$ZLIB_FLAGS")"
# stb_image: the header (HAVE_STB), and a library holding its implementation (Debian's libstb)
stb_inc=$(echo "$STB_FLAGS" | tr ' ' '\n' | grep -- '^-I' | tr '\n' ' ')
echo "HAVE_STB := $(try stb "$cc" "$stb_inc" -DCNT_STB_IMPL=1 -lm)"
echo "HAVE_LIBSTB := $(try stb "$cc" "$STB_FLAGS" -DCNT_STB_IMPL=0 -lm)"
echo "HAVE_DNNL := $(try dnnl "$cc" "$DNNL_FLAGS")"
mpicc=${MPICC:-mpicc}
if command -v "$mpicc" >/dev/null 2>&1; then echo "HAVE_MPI := $(try mpi "$mpicc")"; else echo "HAVE_MPI := 0"; fi
echo "HAVE_CUDART := $(try cudart "$cc" "$cuda_flags" -lcudart)"
if [ -x "$cuda/bin/nvcc" ]; then echo "HAVE_NVCC := 1"; else echo "HAVE_NVCC := 0"; fi
# a prefix of cuDNN's or NCCL's own first, as the build has it
echo "HAVE_CUDNN := $(try cudnn "$cc" "${CUDNN_FLAGS:--lcudnn}" "$cuda_flags")"
echo "HAVE_CUBLAS := $(try cublas "$cc" "$cuda_flags" -lcublas)"
echo "HAVE_NCCL := $(try nccl "$cc" "${NCCL_FLAGS:--lnccl}" "$cuda_flags")"
nvj_lib=$nvjpeg/lib64
[ -d "$nvj_lib" ] || nvj_lib=$nvjpeg/lib
echo "HAVE_NVJPEG := $(try nvjpeg "$cc" "-I$nvjpeg/include" "$cuda_flags" "-L$nvj_lib -Wl,-rpath,$nvj_lib -lnvjpeg")"
