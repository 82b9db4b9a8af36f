#!/usr/bin/env bash
# tools/bench_gpu.sh - training throughput on one GPU, cnntrain against PyTorch
# eager + torchvision, same model, batch, precision and memory layout (NCHW,
# or NHWC = torch.channels_last), both measured in this one call on random
# data (no data loading), as a markdown table for docs/benchmarks.md, with
# each run's peak device memory over the idle GPU's (tools/gpu_peak.sh: the
# same nvidia-smi polling for both; "n/a" without nvidia-smi).
#
#   tools/bench_gpu.sh [MODELS] [BATCHES] [PRECISIONS] [LAYOUTS]
#   defaults: "resnet50 resnet101 vgg16 inception_v3" "64 128" "tf32 bf16" "nchw nhwc"
#   env: BENCH_STEPS (timed steps, default 30), PYTHON (default python3)
#
# Needs a GPU build (`make`, with the CUDA backend) and python3 with torch and
# torchvision. inception_v3 runs at 3x299x299, the others at 3x224x224.
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-"resnet50 resnet101 vgg16 inception_v3"}
batches=${2:-"64 128"}
precisions=${3:-"tf32 bf16"}
layouts=${4:-"nchw nhwc"}
steps=${BENCH_STEPS:-30}
py=${PYTHON:-python3}
gpu=$(./trainer --devices | grep -m1 '^cuda:[0-9]' || true)
if [ -z "$gpu" ]; then
    echo "bench_gpu: no usable GPU:" >&2
    ./trainer --devices >&2
    exit 1
fi
source tools/median.sh # ratio A B
echo "GPU: $gpu"
echo "torch: $($py -c 'import torch, torchvision; print(torch.__version__, "torchvision", torchvision.__version__, "cuDNN", torch.backends.cudnn.version())')"
echo "command: tools/bench_gpu.sh \"$models\" \"$batches\" \"$precisions\" \"$layouts\" (BENCH_STEPS=$steps)"
echo
source tools/gpu_peak.sh # gpu_peak_run PEAKFILE CMD...
peak=$(mktemp)
trap 'rm -f "$peak"' EXIT
echo "| model | batch | precision | layout | cnntrain img/s | PyTorch eager img/s | cnntrain / PyTorch |" \
    "cnntrain peak MiB | PyTorch peak MiB | memory cnntrain / PyTorch |"
echo "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for m in $models; do
    shape=3x224x224
    [ "$m" = inception_v3 ] && shape=3x299x299
    for b in $batches; do
        for p in $precisions; do
            for l in $layouts; do
                ours=$(gpu_peak_run "$peak" ./trainer --bench "$m" "$shape" "$b" "$steps" device=cuda precision="$p" \
                    layout="$l" classes=1000 2>&1 | grep -oE '[0-9.]+ img/s' | head -1 | cut -d' ' -f1 || true)
                ours_mib=$(cat "$peak")
                ref=$(gpu_peak_run "$peak" "$py" tools/bench_torch.py "$m" "$shape" "$b" "$steps" --device cuda \
                    --precision "$p" --layout "$l" 2>&1 | grep -oE '[0-9.]+ img/s' | head -1 | cut -d' ' -f1 || true)
                ref_mib=$(cat "$peak")
                echo "| $m | $b | $p | $l | ${ours:-failed} | ${ref:-failed} | $(ratio "$ours" "$ref") |" \
                    "${ours_mib:-n/a} | ${ref_mib:-n/a} | $(ratio "$ours_mib" "$ref_mib") |"
            done
        done
    done
done
