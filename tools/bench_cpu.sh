#!/usr/bin/env bash
# tools/bench_cpu.sh - `make bench`: CPU training throughput of ResNet-20 at
# batch 128 on Fashion-MNIST-shaped (1x28x28) and CIFAR-shaped (3x32x32)
# inputs, on all cores and on one core, plus ResNet-50 at ImageNet shape for
# scale, in each activation layout the CPU backend has: nchw (OpenBLAS) and,
# when oneDNN is built in, blocked (oneDNN's channel blocks, the default).
# Random inputs, so only compute is measured (no data loading).
# Each line: images/sec, training GFLOP/s (3x forward FLOPs), and the time of
# forward, backward and update per step. PyTorch side by side:
# tools/bench_cpu_torch.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${BENCH_STEPS:-20}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
./trainer --devices | grep '^cpu'
layouts="nchw"
if ./trainer --devices | grep -q "blocked (the default)"; then layouts="nchw blocked"; fi
for layout in $layouts; do
    for shape in 1x28x28 3x32x32; do
        ./trainer --bench resnet20 "$shape" 128 "$steps" 0 device=cpu layout="$layout"
        ./trainer --bench resnet20 "$shape" 128 "$steps" 1 device=cpu layout="$layout"
    done
    ./trainer --bench resnet50 3x224x224 16 3 0 device=cpu layout="$layout"
done
