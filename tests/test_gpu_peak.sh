#!/usr/bin/env bash
# tests/test_gpu_peak.sh - tools/gpu_peak.sh, which the GPU benchmarks use to
# put cnntrain's and PyTorch's peak device memory side by side, against a
# fake nvidia-smi whose reading the measured command changes as it runs: the
# peak is the largest reading less the one before the command, the command's
# output and exit status pass through, readings that are not numbers are
# skipped, and without nvidia-smi the peak is empty and the command still
# runs. Needs no GPU.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
source "$(dirname "$0")/../tools/gpu_peak.sh"

# The fake: prints the MiB in $tmp/mem once, or every -lms milliseconds
# until killed, as `nvidia-smi --query-gpu=memory.used
# --format=csv,noheader,nounits [-lms MS]` does.
cat > "$tmp/nvidia-smi" << 'SH'
#!/usr/bin/env bash
ms=""
for a in "$@"; do
    case "$a" in -lms) ms=next ;; *) [ "$ms" = next ] && ms=$a ;; esac
done
if [ -z "$ms" ]; then cat "$FAKE_MEM"; exit 0; fi
while :; do
    cat "$FAKE_MEM"
    sleep "$(awk -v m="$ms" 'BEGIN { print m / 1000 }')"
done
SH
chmod +x "$tmp/nvidia-smi"
export FAKE_MEM=$tmp/mem NVIDIA_SMI=$tmp/nvidia-smi GPU_PEAK_MS=20

# what a benchmark does: its memory rises, peaks for a while, falls back, and it prints its speed
bench() {
    echo 1200 > "$FAKE_MEM"
    sleep 0.3
    echo 3700 > "$FAKE_MEM"
    sleep 0.3
    echo "No devices were found" > "$FAKE_MEM" # a driver message between readings
    sleep 0.2
    echo 1500 > "$FAKE_MEM"
    sleep 0.3
    echo "bench: 1234.5 img/s"
    return "${1:-0}"
}
echo 700 > "$FAKE_MEM"
out=$(gpu_peak_run "$tmp/peak" bench)
rc=$?
check "the command's output passes through" test "$out" = "bench: 1234.5 img/s"
check "the command's status 0 is returned" test "$rc" -eq 0
check "peak: the largest reading less the one before (3700 - 700 = 3000 MiB)" test "$(cat "$tmp/peak")" = 3000

echo 700 > "$FAKE_MEM"
gpu_peak_run "$tmp/peak" bench 3 > /dev/null
rc=$?
check "a failing command's status (3) is returned" test "$rc" -eq 3
check "... and its peak still written" test "$(cat "$tmp/peak")" = 3000

echo 900 > "$FAKE_MEM"
gpu_peak_run "$tmp/peak" true
check "a command that takes nothing: peak 0" test "$(cat "$tmp/peak")" = 0

out=$(NVIDIA_SMI=$tmp/no-such-smi gpu_peak_run "$tmp/peak" bench)
check "without nvidia-smi the command still runs" test "$out" = "bench: 1234.5 img/s"
check "... and the peak is empty" test ! -s "$tmp/peak"

# no poller is left behind
sleep 0.1
check "no nvidia-smi poller left running" bash -c "! pgrep -f '$tmp/[n]vidia-smi' > /dev/null"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
