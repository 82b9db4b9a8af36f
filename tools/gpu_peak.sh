# tools/gpu_peak.sh - sourced by the GPU benchmark scripts: the peak device
# memory a command takes, measured from outside the process the same way for
# cnntrain and for PyTorch (issue 30's goal: "no more peak GPU memory").
#
#   gpu_peak_run PEAKFILE CMD [ARG...]
#
# runs CMD (its output passes through; its exit status is returned), polling
# `nvidia-smi --query-gpu=memory.used` every GPU_PEAK_MS milliseconds
# (default 50) meanwhile, and writes to PEAKFILE the largest reading less the
# reading just before CMD started, in MiB: what the process took, its CUDA
# context, cuDNN's and cuBLAS's workspaces and NCCL's buffers included,
# whoever allocated them. PEAKFILE is left empty when there is no nvidia-smi
# (NVIDIA_SMI names another) or it gave no reading. GPU_PEAK_INDEX picks the
# GPU (default 0). Sound while CMD is the only process using that GPU, as in
# the benchmark scripts, which run one measurement at a time; an allocation
# freed within one poll can be missed (a cuDNN algorithm search's trial
# workspace, say), so the number is a lower bound on the true peak.
gpu_peak_run() {
    local peakfile=$1
    shift
    local smi=${NVIDIA_SMI:-nvidia-smi} idx=${GPU_PEAK_INDEX:-0} ms=${GPU_PEAK_MS:-50}
    : > "$peakfile"
    if ! command -v "$smi" > /dev/null 2>&1; then
        "$@"
        return
    fi
    local query=(--id="$idx" --query-gpu=memory.used --format=csv,noheader,nounits)
    local base log poller rc
    base=$("$smi" "${query[@]}" 2> /dev/null | head -n 1 | tr -dc '0-9')
    log=$(mktemp)
    "$smi" "${query[@]}" -lms "$ms" > "$log" 2> /dev/null < /dev/null &
    poller=$!
    "$@"
    rc=$?
    # SIGKILL, not SIGTERM: a poller still between bash's fork and its exec
    # (after a command that ended at once) would run the caller's EXIT trap
    kill -KILL "$poller" 2> /dev/null
    wait "$poller" 2> /dev/null
    "$smi" "${query[@]}" >> "$log" 2> /dev/null # and once after it: a command too short for a poll still has one
    # the readings are integers of MiB; anything else (a driver message) is skipped
    awk -v base="$base" '$1 ~ /^[0-9]+$/ { n++; if ($1 + 0 > m) m = $1 + 0 }
        END { if (n && base != "") print (m > base ? m - base : 0) }' "$log" > "$peakfile"
    rm -f "$log"
    return "$rc"
}
