#!/usr/bin/env bash
# tools/dev/gpu_check.sh - a lent GPU machine's whole visit in one command: set up
# the kit (tools/dev/device_env.sh); first cuDNN's capabilities (build/tools/cudnn_caps,
# seconds) and the A/B (tools/dev/bench_ab_gpu.sh:
# the kit's trainer.base, or without one this trainer as configured, then
# this trainer, its NEW_VARIANTS and PyTorch alternating); then the GPU
# tests one by one, each under a time limit, then
# the throughput table (tools/bench_gpu.sh) while time is left. Everything
# printed also goes to $OUT/gpu_check.log (or ./gpu-check/gpu_check.log
# where OUT is unset).
#
#   tools/dev/device_kit.sh                  # here, first: builds and packs .devkit
#   tools/dev/gpu_check.sh [TESTS...]        # there, with .devkit carried
#   env: GPU_CHECK_SECONDS (total budget, default 540, for a run timeout of 600; the benchmark runs only
#        in what the tests left), GPU_BENCH ("MODELS|BATCHES|PRECISIONS|LAYOUTS",
#        default "resnet50|64|tf32 bf16|nchw nhwc"; "none" skips it),
#        BENCH_STEPS (default 20), GPU_AB ("MODELS|BATCHES|PRECISIONS|LAYOUTS" of the A/B,
#        default "resnet50|64 256|bf16 tf32|nhwc"; "none" skips it), GPU_AB_SECONDS (its
#        limit, default 240), GPU_AB_ACT16 (1, the default: the new trainer's
#        bf16 rows store bf16 activations; 0: as configured), NEW_VARIANTS (more
#        columns, bench_ab_gpu.sh's), ROUNDS (the A/B's, default 2), GPU_PROFILE
#        ("MODEL|BATCH|PRECISIONS|LAYOUT" of the profiles written to $OUT after
#        the A/B, default "resnet50|64|bf16 tf32|nhwc"; "none" skips them),
#        GPU_TESTS ("none": neither the tests nor the mutants, for a call that only measures),
#        GPU_ACCURACY (1: the quick start in fp32 and in bf16 with bf16 activations, after the
#        tests; the accuracy goal of issue 30),
#        GPU_TORCH_PROFILE ("MODEL|BATCHES|PRECISIONS|LAYOUT" of PyTorch's runs under its
#        profiler, after the A/B, default "resnet50|64 256|bf16|nhwc"; "none" skips them),
#        GPU_CAPS ("none" skips cudnn_caps), GPU_PSGD ("none" skips bench_powersgd --device cuda,
#        PowerSGD's arithmetic on the GPU against one host thread, seconds, after cudnn_caps),
#        GPU_JPEG_TRAIN ("MODEL|BATCH|PRECISION|LAYOUT": issue 31's training from JPEGs against
#        synthetic data, tools/bench_jpeg_train.py, after the tests; default none), GPU_JPEG_TRAIN_SECONDS
#        (its limit, default 200)
# Every phase's limit is cut to what is left of GPU_CHECK_SECONDS (cap), and
# a phase with less than 15 s left is not started, so the call ends inside
# its budget with its summary line. Without a usable GPU it stops at once.
#
# TESTS default to every GPU test: the backend against the CPU, the stager,
# the NCCL reducer under mpirun, the trainer end to end on the GPU, nvJPEG
# against libjpeg-turbo and its --bench-data beside the CPU's; then,
# when the kit has them (tools/dev/gpu_mutants.sh), the mutants, each of which
# must fail (a timeout counts as not caught). A TEST is
# a script (*.sh, run with bash), a program, or any other shell command line
# (run with bash -c). Each is reported with its exit status and seconds; the
# last line counts failures.
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-check}
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
budget=${GPU_CHECK_SECONDS:-540}
t0=$SECONDS
# cap N: N seconds, or what is left of the budget where that is less (0:
# not enough left to start; `timeout 0` would mean no limit at all)
cap() {
    local left=$((budget - (SECONDS - t0)))
    if [ "$left" -lt 15 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
# compute mode: Exclusive_Process would refuse test_nccl.sh's second rank on the one GPU
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_mode --format=csv,noheader || true
# shellcheck source=tools/dev/device_env.sh
source tools/dev/device_env.sh || { echo "gpu_check: the kit did not set up"; exit 1; }
# Without a usable GPU every GPU test skips and passes: stop instead, saying why
gpus=$(./trainer --devices 2>&1 | grep -c '^cuda:[0-9]')
if [ "$gpus" -lt 1 ]; then
    echo "gpu_check: no usable GPU; stopping. ./trainer --devices says:"
    ./trainer --devices 2>&1 | sed 's/^/    /'
    exit 1
fi
# What this cuDNN offers the 16-bit and fused paths (seconds): which batch-norm
# fusions run per data type, how many graph-API engines a convolution gets.
if [ -x build/tools/cudnn_caps ] && [ $# -eq 0 ] && [ "${GPU_CAPS:-all}" != none ] && [ "$(cap 60)" -gt 0 ]; then
    echo "=== cudnn_caps"
    timeout -k 5 "$(cap 60)" build/tools/cudnn_caps | tee "$out/cudnn_caps.txt"
    echo "=== cudnn_caps: exit ${PIPESTATUS[0]} at $((SECONDS - t0))s"
fi
# PowerSGD's arithmetic on the GPU against one host thread (seconds): the
# rate tools/simulate --powersgd R,NS has so far assumed for it.
if [ -x build/tools/bench_powersgd ] && [ $# -eq 0 ] && [ "${GPU_PSGD:-all}" != none ] && [ "$(cap 60)" -gt 0 ]; then
    echo "=== bench_powersgd --device cuda"
    timeout -k 5 "$(cap 60)" build/tools/bench_powersgd --device cuda --rank 2 --reps 5 | tee "$out/powersgd_gpu.txt"
    echo "=== bench_powersgd: exit ${PIPESTATUS[0]} at $((SECONDS - t0))s"
fi
# The A/B first: the measurement with its baseline, while the budget is whole.
# Without a base in the kit (KIT_BASE=none) "old" is this trainer as
# configured, so the bf16 rows compare its fp32 activations (auto on a GPU)
# with its bf16 ones (GPU_AB_ACT16=1, the default).
ab=${GPU_AB:-"resnet50|64 256|bf16 tf32|nhwc"}
if [ "$ab" != none ] && [ $# -eq 0 ]; then
    old=./trainer old_name="this trainer as configured (no base in the kit)"
    if [ -f .devkit/trainer.base.xz ]; then
        xz -dc .devkit/trainer.base.xz >/tmp/trainer.base && chmod +x /tmp/trainer.base
        old=/tmp/trainer.base old_name=$(cat .devkit/trainer.base.rev 2>/dev/null)
    fi
    IFS='|' read -r m b p l <<<"$ab"
    lim=$(cap "${GPU_AB_SECONDS:-240}")
    if [ "$lim" -gt 0 ]; then
        echo "=== A/B against $old_name (limit ${lim}s; NEW_VARIANTS=\"${NEW_VARIANTS:-}\")"
        NEW_ACT16=${GPU_AB_ACT16:-1} timeout -k 5 "$lim" tools/dev/bench_ab_gpu.sh "$old" ./trainer "$m" "$b" "$p" "$l"
        echo "=== A/B: exit $? at $((SECONDS - t0))s"
    else
        echo "=== A/B: not run, the budget is spent"
    fi
fi
# PyTorch under its profiler (tools/bench_torch.py --profile): whether the
# host or the GPU sets its pace at each batch (the issue's question before
# any ratio at batch 64 is trusted), and its operators' table to $OUT.
tprof=${GPU_TORCH_PROFILE:-"resnet50|64 256|bf16|nhwc"}
if [ "$tprof" != none ] && [ $# -eq 0 ] && python3 -c 'import torch' 2>/dev/null; then
    IFS='|' read -r m bs ps l <<<"$tprof"
    for p in $ps; do
        for b in $bs; do
            lim=$(cap 90)
            [ "$lim" -gt 0 ] || { echo "=== torch profile $m $p $l batch $b: not run, the budget is spent"; continue; }
            echo "=== torch profile $m $p $l batch $b (at $((SECONDS - t0))s)"
            # its img/s line and the profile's (the profiler's own warnings left out)
            PYTHONWARNINGS=ignore timeout -k 5 "$lim" python3 tools/bench_torch.py "$m" 3x224x224 "$b" 20 \
                --device cuda --precision "$p" --layout "$l" --profile "$out/torch-profile-$m-$p-$l-$b.txt" 2>&1 |
                grep -E 'img/s|^torch profile|Error|error' | tail -4
        done
    done
fi
# Step profiles: each layer's time and, in "runs", the algorithm cuDNN gave
# each convolution, so two machines' profiles compare algorithm by algorithm.
prof=${GPU_PROFILE:-"resnet50|64|bf16 tf32|nhwc"}
if [ "$prof" != none ] && [ $# -eq 0 ]; then
    IFS='|' read -r m b ps l <<<"$prof"
    for p in $ps; do
        f="$out/profile-$m-$p-$l-$b.json"
        lim=$(cap 120)
        [ "$lim" -gt 0 ] || { echo "=== profile $m $p $l batch $b: not run, the budget is spent"; continue; }
        echo "=== profile $m $p $l batch $b -> $f (at $((SECONDS - t0))s)"
        cfg=(configs/resnet50.ini model.name="$m") # the ImageNet-shaped settings, another model
        [ -f "configs/$m.ini" ] && cfg=("configs/$m.ini")
        timeout -k 5 "$lim" ./trainer --profile "${cfg[0]}" "$f" "${cfg[@]:1}" data.kind=synthetic train.device=cuda \
            train.batch_size="$b" train.max_steps=10 train.precision="$p" train.layout="$l" | tail -1
    done
fi
tests=("$@")
rm -f /tmp/gpu_failing_tests
# nvJPEG (data.decoder = nvjpeg, never run before): its windows against
# libjpeg-turbo's (test_image's test_nvjpeg_within_tolerance), with the
# hardware decoder where the GPU has one and again with the hybrid one, then the
# loader's images/s decoding on the GPU beside the CPU's, on 500x375 JPEGs.
# On CPUs 0-3 (rows for 1, 2 and 4 workers, 3 s each): the whole machine's
# rows took 151 s with the set's making.
nvjpeg_bench='set -o pipefail; rc=0; d=/tmp/cnt_nvjpeg; [ -d $d ] || build/tools/to_imagefolder synthetic $d \
    --classes 10 --train 600 --val 100 --format jpg >/dev/null; for dec in cpu nvjpeg; do taskset -c 0-3 \
    ./trainer --bench-data configs/resnet50.ini data.root=$d data.decoder=$dec train.batch_size=64 2>&1 |
    sed "s/^/$dec: /" || rc=1; done; exit $rc'
[ ${#tests[@]} -gt 0 ] || tests=(build/tests/test_backend_gpu build/tests/test_stager tests/test_nccl.sh
    tests/test_gpu_train.sh build/tests/test_image "CNT_NVJPEG_BACKEND=hybrid build/tests/test_image"
    "$nvjpeg_bench")
[ "${GPU_TESTS:-all}" = none ] && [ $# -eq 0 ] && tests=() # a measuring call: no tests, no mutants
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
        timeout -k 5 "$left" bash "$t" 2>&1 | tee /tmp/gpu_test.out
    elif [ -f "$t" ] && [ -x "$t" ]; then
        timeout -k 5 "$left" "$t" 2>&1 | tee /tmp/gpu_test.out
    else
        timeout -k 5 "$left" bash -c "$t" 2>&1 | tee /tmp/gpu_test.out
    fi
    rc=${PIPESTATUS[0]}
    echo "=== $t: exit $rc in $((SECONDS - s))s"
    [ "$rc" -eq 0 ] || failed+=("$t (exit $rc)")
    # the cmocka tests that fail as built: a mutant guarded by one of them proves nothing
    grep -oE '^\[  FAILED  \] test_[a-z0-9_]+' /tmp/gpu_test.out | awk '{print $4}' >>/tmp/gpu_failing_tests
done
# The mutants of tools/dev/gpu_mutants.sh: each must fail (a test that passes
# without the fence or event wait it guards does not guard it).
if [ -f .devkit/mutants.tar.xz ] && [ $# -eq 0 ] && [ "${GPU_TESTS:-all}" != none ]; then
    mdir=/tmp/gpu_mutants
    rm -rf "$mdir" && mkdir -p "$mdir" && xz -dc .devkit/mutants.tar.xz | tar -xf - -C "$mdir"
    # each line: NAME PROGRAM FILTER (the cmocka test that guards the line; - runs the program whole)
    # the list on fd 3: mpirun (and anything else in the loop) reads stdin, which would eat the list
    while read -r name prog filter <&3; do
        bin=$mdir/$name
        [ -x "$bin" ] || { echo "=== mutant $name: not in the archive"; failed+=("mutant $name (missing)"); continue; }
        if [ "$filter" != - ] && grep -qx "$filter" /tmp/gpu_failing_tests 2>/dev/null; then
            echo "=== mutant $name: not run, $filter fails without it"
            failed+=("mutant $name (its test fails as built)")
            continue
        fi
        lim=$(cap 120)
        if [ "$lim" -eq 0 ]; then
            echo "=== mutant $name: not run, the budget is spent"
            failed+=("mutant $name (not run)")
            continue
        fi
        case "$prog" in
        mpi_nccl)
            # 2 ranks on a one-GPU node as two NCCL hosts (tests/test_nccl.sh)
            if [ "$gpus" -ge 2 ]; then
                timeout -k 5 "$lim" mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" >/tmp/mutant.out 2>&1
            else
                timeout -k 5 "$lim" mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_SOCKET_IFNAME=lo \
                    bash -c 'NCCL_HOSTID=cnt-mutant-$OMPI_COMM_WORLD_RANK exec "$0" --quick' "$bin" \
                    >/tmp/mutant.out 2>&1
            fi
            ;;
        *)
            if [ "$filter" = - ]; then
                timeout -k 5 "$lim" "$bin" >/tmp/mutant.out 2>&1
            else # the one test that guards the line
                CNT_TEST_FILTER=$filter timeout -k 5 "$lim" "$bin" >/tmp/mutant.out 2>&1
            fi
            ;;
        esac
        rc=$?
        grep -m3 -E '^(FAIL|round |\[  (FAILED|ERROR) )' /tmp/mutant.out | sed 's/^/    /'
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; then
            echo "=== mutant $name ($filter): caught (exit $rc)"
        else
            echo "=== mutant $name ($filter): NOT caught (exit $rc): its test passes without what it guards"
            failed+=("mutant $name (not caught)")
        fi
        rm -f "$bin"
    done 3<"$mdir/mutants.list"
fi

# The goal "bf16 training on the GPU reaches the quick start's fp32 accuracy
# within 0.3 points" (issue 30): the whole quick start (15 epochs of
# ResNet-20 on Fashion-MNIST; the kit carries 8192 of its training images,
# so the run says how many it had), in fp32 and in bf16 with bf16
# activations, on the GPU, one after the other, when GPU_ACCURACY=1.
if [ "${GPU_ACCURACY:-0}" = 1 ] && [ $# -eq 0 ]; then
    for run in "fp32|fp32" "bf16|bf16"; do
        IFS='|' read -r p a <<<"$run"
        left=$((budget - (SECONDS - t0)))
        [ "$left" -ge 30 ] || { echo "=== accuracy $p: not run, ${left}s left"; continue; }
        echo "=== accuracy: the quick start on the GPU, $p with $a activations (limit ${left}s)"
        timeout -k 5 "$left" ./trainer configs/resnet20-fashion.ini train.device=cuda train.precision="$p" \
            train.activations="$a" train.out_dir="/tmp/gpu-accuracy-$p" 2>&1 | grep -E '^(data:|finished|stopped)'
    done
fi

# Issue 31's goal "ResNet-50 trained from JPEGs at 90% or more of its
# synthetic-data images/s, with the machine's cores": tools/bench_jpeg_train.py
# on 500x375 JPEGs (to_imagefolder's smooth synthetic pictures, 640 files
# hard-linked 6 times: the 60 steps of batch 64 end no epoch), decoded on the
# CPU (data.workers = all CPUs but 2) and by nvJPEG, beside data.kind =
# synthetic, 2 rounds; the table to $OUT/jpeg-train.md. When GPU_JPEG_TRAIN
# is "MODEL|BATCH|PRECISION|LAYOUT" (e.g. "resnet50|64|bf16|nhwc"; default none).
jt=${GPU_JPEG_TRAIN:-none}
if [ "$jt" != none ] && [ $# -eq 0 ]; then
    IFS='|' read -r m b p l <<<"$jt"
    lim=$(cap "${GPU_JPEG_TRAIN_SECONDS:-200}")
    if [ "$lim" -gt 0 ]; then
        echo "=== training from JPEGs against synthetic data: $m batch $b $p $l (limit ${lim}s, at $((SECONDS - t0))s)"
        d=/tmp/cnt_jpeg_train
        if [ ! -d $d ]; then
            build/tools/to_imagefolder synthetic $d --classes 10 --train 640 --val 64 --format jpg >/dev/null &&
                for f in $d/train/*/*.jpg; do for k in 2 3 4 5 6; do ln "$f" "${f%.jpg}-$k.jpg"; done; done
        fi
        timeout -k 5 "$lim" python3 tools/bench_jpeg_train.py $d --rounds 2 --out "$out/jpeg-train.md" \
            model.name="$m" train.device=cuda train.batch_size="$b" train.precision="$p" train.layout="$l"
        echo "=== training from JPEGs: exit $? at $((SECONDS - t0))s"
    else
        echo "=== training from JPEGs: not run, the budget is spent"
    fi
fi

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
echo "gpu_check: ${#failed[@]} failed${failed:+: ${failed[*]}}" \
    "(${#tests[@]} test(s), then the mutants; $((SECONDS - t0))s)"
[ ${#failed[@]} -eq 0 ]
