#!/usr/bin/env bash
# tools/gpu_check.sh - a lent GPU machine's whole visit in one command: set up
# the kit (tools/device_env.sh), run the GPU tests one by one, each under a
# time limit, then the throughput table (tools/bench_gpu.sh) while time is
# left. Everything printed also goes to $OUT/gpu_check.log (or
# ./gpu-check/gpu_check.log where OUT is unset).
#
#   tools/device_kit.sh                  # here, first: builds and packs .devkit
#   tools/gpu_check.sh [TESTS...]        # there, with .devkit carried
#   env: GPU_CHECK_SECONDS (total budget, default 420; the benchmark runs only
#        in what the tests left), GPU_BENCH ("MODELS|BATCHES|PRECISIONS|LAYOUTS",
#        default "resnet50|64|tf32 bf16|nchw nhwc"; "none" skips it),
#        BENCH_STEPS (default 20)
#
# TESTS default to every GPU test: the backend against the CPU, the stager,
# the NCCL reducer under mpirun, the trainer end to end on the GPU. A TEST is
# a script (*.sh, run with bash), a program, or any other shell command line
# (run with bash -c). Each is reported with its exit status and seconds; the
# last line counts failures.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check}
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
budget=${GPU_CHECK_SECONDS:-420}
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
# shellcheck source=tools/device_env.sh
source tools/device_env.sh || { echo "gpu_check: the kit did not set up"; exit 1; }
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(build/tests/test_backend_gpu build/tests/test_stager tests/test_nccl.sh
    tests/test_gpu_train.sh)
failed=()
for t in "${tests[@]}"; do
    left=$((budget - (SECONDS - t0)))
    if [ "$left" -lt 20 ]; then
        echo "=== $t: not run, the budget is spent"
        failed+=("$t (not run)")
        continue
    fi
    echo "=== $t (limit ${left}s, at $((SECONDS - t0))s)"
    s=$SECONDS
    if [[ "$t" == *.sh ]]; then
        timeout -k 5 "$left" bash "$t"
    elif [ -f "$t" ] && [ -x "$t" ]; then
        timeout -k 5 "$left" "$t"
    else
        timeout -k 5 "$left" bash -c "$t"
    fi
    rc=$?
    echo "=== $t: exit $rc in $((SECONDS - s))s"
    [ "$rc" -eq 0 ] || failed+=("$t (exit $rc)")
done
bench=${GPU_BENCH:-"resnet50|64|tf32 bf16|nchw nhwc"}
left=$((budget - (SECONDS - t0)))
if [ "$bench" != none ] && [ "$left" -ge 30 ]; then
    IFS='|' read -r m b p l <<<"$bench"
    echo "=== tools/bench_gpu.sh \"$m\" \"$b\" \"$p\" \"$l\" (limit ${left}s)"
    BENCH_STEPS=${BENCH_STEPS:-20} timeout -k 5 "$left" tools/bench_gpu.sh "$m" "$b" "$p" "$l"
    echo "=== bench: exit $? at $((SECONDS - t0))s"
elif [ "$bench" != none ]; then
    echo "=== bench: not run, ${left}s left"
fi
echo "gpu_check: ${#failed[@]} of ${#tests[@]} test(s) failed${failed:+: ${failed[*]}} ($((SECONDS - t0))s)"
[ ${#failed[@]} -eq 0 ]
