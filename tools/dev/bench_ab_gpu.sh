#!/usr/bin/env bash
# tools/dev/bench_ab_gpu.sh - a change's GPU speed in one call: the trainer
# before the change (OLD), after it (NEW) and PyTorch eager, each row's
# measurements alternating (old, new, torch, and with TORCH_NO_V8=1 torch
# with cuDNN's graph API off; then again), medians over ROUNDS, as a markdown table for
# docs/benchmarks.md. Rows are printed as they finish, so a run cut short by
# its time limit still leaves the rows it completed.
#
#   tools/dev/bench_ab_gpu.sh OLD NEW [MODELS] [BATCHES] [PRECISIONS] [LAYOUTS]
#   defaults: "resnet50" "64 128 256" "bf16 tf32" "nhwc"
#   env: ROUNDS (default 2), BENCH_STEPS (timed steps, default 20), NEW_ACT16
#        (1: NEW's bf16 and fp16 rows store activations in that type,
#        --bench's activations=; default 0, NEW as configured), TORCH_NO_V8
#        (1: the "torch, no v8" column; default 0: on an H200 it ran at 291
#        img/s against 2401 with the graph API, ResNet-50 bf16 batch 64, and
#        took most of a 200 s A/B on its own), NEW_VARIANTS (more columns:
#        NEW with other --bench options, "LABEL:KEY=VALUE[,KEY=VALUE]" each,
#        space-separated, after NEW's own options, e.g. "act32:activations=fp32
#        nofuse:fuse=false"; measured in every round beside the others), DEVICE
#        (default cuda; cpu to try the script here), PYTHON (default
#        python3; the torch columns say "n/a" where it has no torch)
#
# OLD and NEW are trainer binaries: on a lent GPU machine, the kit's
# .devkit/trainer.base (tools/dev/device_kit.sh builds KIT_BASE beside the
# checkout) and ./trainer. "torch" is tools/bench_torch.py at the same
# model, batch, precision and layout; "torch, no v8" the same with
# TORCH_CUDNN_V8_API_DISABLED=1, which makes PyTorch use cuDNN's legacy
# convolution calls (ours today) instead of its graph API: the difference is
# what the graph API is worth to PyTorch on this card. Ratios: new/old and
# new/torch. The peak device memory of new and of torch (tools/gpu_peak.sh,
# the same nvidia-smi polling for both; medians over the rounds, MiB over the
# idle GPU's) ends each row.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then
    echo "usage: tools/dev/bench_ab_gpu.sh OLD_TRAINER NEW_TRAINER [MODELS] [BATCHES] [PRECISIONS] [LAYOUTS]" >&2
    exit 2
fi
old=$1 new=$2
models=${3:-resnet50}
batches=${4:-"64 128 256"}
precisions=${5:-"bf16 tf32"}
layouts=${6:-nhwc}
rounds=${ROUNDS:-2}
steps=${BENCH_STEPS:-20}
device=${DEVICE:-cuda}
py=${PYTHON:-python3}
for t in "$old" "$new"; do
    if [ ! -x "$t" ]; then
        echo "bench_ab_gpu: '$t' is not an executable trainer" >&2
        exit 2
    fi
done
have_torch=1
"$py" -c 'import torch, torchvision' 2>/dev/null || have_torch=0

# One measurement: img/s, or nothing when it failed.
ours() { # TRAINER MODEL SHAPE BATCH PRECISION LAYOUT [KEY=VALUE...]
    "$1" --bench "$2" "$3" "$4" "$steps" device="$device" precision="$5" layout="$6" classes=1000 "${@:7}" 2>&1 |
        grep -oE '[0-9.]+ img/s' | head -1 | cut -d' ' -f1
}
torch() { # MODEL SHAPE BATCH PRECISION LAYOUT [ENV...]
    local m=$1 s=$2 b=$3 p=$4 l=$5
    shift 5
    [ "$have_torch" = 1 ] || return 0
    env "$@" "$py" tools/bench_torch.py "$m" "$s" "$b" "$steps" --device "$device" --precision "$p" --layout "$l" \
        2>&1 | grep -oE '[0-9.]+ img/s' | head -1 | cut -d' ' -f1
}
source tools/median.sh # median V..., ratio A B
source tools/gpu_peak.sh # gpu_peak_run PEAKFILE CMD...
peakf=$(mktemp)
trap 'rm -f "$peakf"' EXIT

echo "device: $("$new" --devices | grep -m1 -E "^$device" || echo "$device")"
[ "$have_torch" = 1 ] && echo "torch: $("$py" -c 'import torch; print(torch.__version__, "cuDNN", torch.backends.cudnn.version())')"
echo "old: $old ($("$old" --version | head -1)); new: $new ($("$new" --version | head -1))"
echo "command: tools/dev/bench_ab_gpu.sh $old $new \"$models\" \"$batches\" \"$precisions\" \"$layouts\" (ROUNDS=$rounds BENCH_STEPS=$steps NEW_ACT16=${NEW_ACT16:-0}: new stores 16-bit activations in the bf16/fp16 rows when 1;" \
    "NEW_VARIANTS=\"${NEW_VARIANTS:-}\")"
echo
variants=(${NEW_VARIANTS:-})
vhead="" vrule=""
for va in "${variants[@]}"; do
    vhead="$vhead new, ${va%%:*} img/s |" vrule="$vrule ---: |"
done
echo "| model | batch | precision | layout | old img/s | new img/s |$vhead torch img/s | torch, no v8 img/s |" \
    "new/old | new/torch | new peak MiB | torch peak MiB |"
echo "| --- | ---: | --- | --- | ---: | ---: |$vrule ---: | ---: | ---: | ---: | ---: | ---: |"
for m in $models; do
    shape=3x224x224
    [ "$m" = inception_v3 ] && shape=3x299x299
    [[ "$m" =~ ^resnet(20|32|44|56|110)$ ]] && shape=3x32x32
    for b in $batches; do
        for p in $precisions; do
            for l in $layouts; do
                o=() n=() t=() v=() nm=() tm=()
                declare -A vr=()
                for r in $(seq "$rounds"); do
                    new_act=()
                    [ "${NEW_ACT16:-0}" = 1 ] && [ "$p" = bf16 -o "$p" = fp16 ] && new_act=(activations="$p")
                    # each measurement said as it is made (to stderr): a row the time limit cuts off
                    # still leaves its numbers in the log
                    o+=("$(ours "$old" "$m" "$shape" "$b" "$p" "$l")")
                    echo "    $m $b $p $l round $r: old ${o[-1]:-failed}" >&2
                    n+=("$(gpu_peak_run "$peakf" ours "$new" "$m" "$shape" "$b" "$p" "$l" "${new_act[@]}")")
                    nm+=("$(cat "$peakf")")
                    echo "    $m $b $p $l round $r: new ${n[-1]:-failed} (peak ${nm[-1]:-n/a} MiB)" >&2
                    for va in "${variants[@]}"; do
                        IFS=, read -r -a vopts <<<"${va#*:}"
                        got=$(ours "$new" "$m" "$shape" "$b" "$p" "$l" "${new_act[@]}" "${vopts[@]}")
                        vr[$va]="${vr[$va]:-} $got"
                        echo "    $m $b $p $l round $r: new, ${va%%:*} ${got:-failed}" >&2
                    done
                    t+=("$(gpu_peak_run "$peakf" torch "$m" "$shape" "$b" "$p" "$l")")
                    tm+=("$(cat "$peakf")")
                    echo "    $m $b $p $l round $r: torch ${t[-1]:-n/a} (peak ${tm[-1]:-n/a} MiB)" >&2
                    if [ "${TORCH_NO_V8:-0}" = 1 ]; then
                        v+=("$(torch "$m" "$shape" "$b" "$p" "$l" TORCH_CUDNN_V8_API_DISABLED=1)")
                        echo "    $m $b $p $l round $r: torch no v8 ${v[-1]:-n/a}" >&2
                    fi
                done
                mo=$(median "${o[@]}" </dev/null) mn=$(median "${n[@]}" </dev/null) mt=$(median "${t[@]}" </dev/null)
                mv=$(median "${v[@]}" </dev/null) mnm=$(median "${nm[@]}" </dev/null)
                mtm=$(median "${tm[@]}" </dev/null)
                vcols="" vrounds=""
                for va in "${variants[@]}"; do
                    # shellcheck disable=SC2086 # the rounds, one word each
                    mvar=$(median ${vr[$va]} </dev/null)
                    vcols="$vcols ${mvar:-failed} |" vrounds="$vrounds; new, ${va%%:*}${vr[$va]}"
                done
                echo "| $m | $b | $p | $l | ${mo:-failed} | ${mn:-failed} |$vcols ${mt:-n/a} | ${mv:-n/a} |" \
                    "$(ratio "$mn" "$mo") | $(ratio "$mn" "$mt") | ${mnm:-n/a} | ${mtm:-n/a} |"
                echo "    rounds: old ${o[*]:-}; new ${n[*]:-}$vrounds; torch ${t[*]:-}; torch no v8 ${v[*]:-}" >&2
                unset vr
            done
        done
    done
done
