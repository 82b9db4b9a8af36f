#!/usr/bin/env bash
# tools/probes/probe.sh CC CUDA_HOME [NVJPEG_HOME] > build/probe.mk
# Compiles and links each probe in this folder; prints HAVE_X := 0|1 lines for
# the Makefile. Detection never asks the package manager.
cc=$1
cuda=$2
nvjpeg=${3:-$cuda}
dir=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
try() { # name compiler flags...
    local name=$1 comp=$2
    shift 2
    if $comp "$dir/$name.c" -o "$tmp/$name" "$@" >/dev/null 2>&1; then echo 1; else echo 0; fi
}
cuda_flags=(-I"$cuda/include" -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64")
echo "HAVE_BLAS := $(try blas "$cc" -I/usr/include/x86_64-linux-gnu/openblas-openmp -lopenblas)"
echo "HAVE_JANSSON := $(try jansson "$cc" -ljansson)"
echo "HAVE_JPEG := $(try jpeg "$cc" -ljpeg)"
echo "HAVE_DNNL := $(try dnnl "$cc" -ldnnl)"
if command -v mpicc >/dev/null 2>&1; then echo "HAVE_MPI := $(try mpi mpicc)"; else echo "HAVE_MPI := 0"; fi
echo "HAVE_CUDART := $(try cudart "$cc" "${cuda_flags[@]}" -lcudart)"
if [ -x "$cuda/bin/nvcc" ]; then echo "HAVE_NVCC := 1"; else echo "HAVE_NVCC := 0"; fi
echo "HAVE_CUDNN := $(try cudnn "$cc" "${cuda_flags[@]}" -lcudnn)"
echo "HAVE_CUBLAS := $(try cublas "$cc" "${cuda_flags[@]}" -lcublas)"
echo "HAVE_NCCL := $(try nccl "$cc" "${cuda_flags[@]}" -lnccl)"
nvj_lib=$nvjpeg/lib64
[ -d "$nvj_lib" ] || nvj_lib=$nvjpeg/lib
echo "HAVE_NVJPEG := $(try nvjpeg "$cc" -I"$nvjpeg/include" "${cuda_flags[@]}" -L"$nvj_lib" -Wl,-rpath,"$nvj_lib" -lnvjpeg)"
