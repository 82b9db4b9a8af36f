#!/usr/bin/env bash
# tests/gpu_line.sh - reads `./trainer --devices` and prints the line make test
# starts with: whether the GPU tests (tests/test_backend_gpu, the NCCL test and
# the GPU training checks) run here, on what, or why they are skipped.
out=$(cat)
if gpu=$(grep -m1 '^cuda:[0-9]' <<<"$out"); then
    echo "GPU tests: running on $gpu"
else
    reason=$(grep -m1 '^cuda:' <<<"$out" | sed 's/^cuda: *//')
    echo "GPU tests: skipped (${reason:-no CUDA device})"
fi
