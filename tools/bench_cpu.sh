#!/usr/bin/env bash
# tools/bench_cpu.sh - `make bench`: CPU training throughput of ResNet-20 at
# batch 128 on Fashion-MNIST-shaped (1x28x28) and CIFAR-shaped (3x32x32)
# inputs, on all cores and on one core, plus ResNet-50 at ImageNet shape for
# scale. Random inputs, so only compute is measured (no data loading).
# Each line: images/sec, training GFLOP/s (3x forward FLOPs), and the time of
# forward, backward and update per step.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${BENCH_STEPS:-20}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for shape in 1x28x28 3x32x32; do
    ./trainer --bench resnet20 "$shape" 128 "$steps" 0
    ./trainer --bench resnet20 "$shape" 128 "$steps" 1
done
./trainer --bench resnet50 3x224x224 16 3 0
