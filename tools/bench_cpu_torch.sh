#!/usr/bin/env bash
# tools/bench_cpu_torch.sh - cnntrain's CPU training speed against PyTorch
# eager on the same cores, side by side in one call (issue 15).
#
#   tools/bench_cpu_torch.sh [--rounds R] [--threads T] [--rows "NAME ..."] [--python PY] [--out FILE]
#
# Each row runs `./trainer --bench MODEL SHAPE BATCH STEPS T classes=K` and
# `tools/bench_torch.py MODEL SHAPE BATCH STEPS --device cpu --threads T
# --warmup 3` (3 warm-up steps each, then STEPS timed: forward, softmax
# cross-entropy, backward, SGD with momentum 0.9 and weight decay 1e-4, on
# one random batch) in turns: cnntrain, PyTorch, cnntrain, PyTorch, ... R
# rounds (default 3). Each run's peak memory is its maximum resident set
# (/usr/bin/time's %M). It prints the CPU, then a markdown table: the median
# images/s of each, the median of the per-round ratios (cnntrain / PyTorch),
# and the largest peak memory of each. --out FILE also writes the table.
#
# Rows (fp32; NAME for --rows): resnet20 (3x32x32, batch 128, 10 classes:
# tools/ddp_peer.py builds it as model/zoo.c does), resnet50 (3x224x224, batch
# 32), vgg11_bn (3x64x64, batch 64), inception_v3 (3x299x299, batch 8);
# torchvision's models for the last three, 1000 classes. bf16 rows (the same
# under torch.autocast("cpu", torch.bfloat16) and train.precision=bf16) are
# added where /proc/cpuinfo lists avx512_bf16 or amx_bf16; name them
# resnet20-bf16 and so on.
#
# PyTorch comes from a virtual environment outside the repository: --python
# PY, else $TORCH_PYTHON, else /opt/torch-venv/bin/python, which this script
# creates (python3 -m venv /opt/torch-venv && pip install torch torchvision,
# about 5 GB from PyPI) when it is missing. Threads: T (default: the cores)
# for both; OMP_NUM_THREADS=T too. Exit status 0; 1 when a run fails (its
# output is shown); 2 for usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rounds=3
threads=$(nproc)
rows=""
py=${TORCH_PYTHON:-}
out=""
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=${2:?}; shift 2 ;;
    --threads) threads=${2:?}; shift 2 ;;
    --rows) rows=${2:?}; shift 2 ;;
    --python) py=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "bench_cpu_torch.sh: unknown option $1" >&2; usage ;;
    esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_cpu_torch.sh: --rounds: a whole number >= 1" >&2; exit 2; }
[[ $threads =~ ^[1-9][0-9]*$ ]] || { echo "bench_cpu_torch.sh: --threads: a whole number >= 1" >&2; exit 2; }
[ -x "$root/trainer" ] || { echo "bench_cpu_torch.sh: $root/trainer not built (make)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench_cpu_torch.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
if [ -z "$py" ]; then
    py=/opt/torch-venv/bin/python
    if [ ! -x "$py" ]; then
        echo "bench_cpu_torch.sh: making /opt/torch-venv (python3 -m venv; pip install torch torchvision)" >&2
        python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install -q torch torchvision >&2
    fi
fi
"$py" -c 'import torch, torchvision' 2>/dev/null || { echo "bench_cpu_torch.sh: $py has no torch/torchvision" >&2; exit 1; }

# name: model shape batch steps classes
declare -A ROW=(
    [resnet20]="resnet20 3x32x32 128 20 10"
    [resnet50]="resnet50 3x224x224 32 3 1000"
    [vgg11_bn]="vgg11_bn 3x64x64 64 6 1000"
    [inception_v3]="inception_v3 3x299x299 8 4 1000"
)
bf16=no
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && bf16=yes
if [ -z "$rows" ]; then
    rows="resnet20 resnet50 vgg11_bn inception_v3"
    [ $bf16 = yes ] && rows="$rows resnet20-bf16 resnet50-bf16 vgg11_bn-bf16 inception_v3-bf16"
fi
for r in $rows; do [ -n "${ROW[${r%-bf16}]:-}" ] || { echo "bench_cpu_torch.sh: --rows: unknown row $r" >&2; exit 2; }; done

export OMP_NUM_THREADS=$threads
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
torchv=$("$py" -c 'import torch; print(torch.__version__)')
echo "CPU: $cpu; $(nproc) cores; $threads thread(s) each; torch $torchv; $rounds round(s); bf16 in this CPU: $bf16"

# run WHAT LOG CMD...: the command under /usr/bin/time; prints "IMG_PER_S PEAK_KB"
run() {
    local log=$1
    shift
    if ! /usr/bin/time -f 'peak_kb %M' -o "$log.time" "$@" >"$log" 2>&1; then
        echo "bench_cpu_torch.sh: failed: $*" >&2
        tail -n 5 "$log" >&2
        exit 1
    fi
    local ips
    ips=$(grep -oE '[0-9.]+ img/s' "$log" | tail -1 | cut -d' ' -f1)
    [ -n "$ips" ] || { echo "bench_cpu_torch.sh: no img/s in the output of: $*" >&2; tail -n 5 "$log" >&2; exit 1; }
    echo "$ips $(awk '/^peak_kb/ {print $2}' "$log.time")"
}

table="| model | input | batch | precision | cnntrain img/s | PyTorch img/s | ratio | peak MiB cnntrain | peak MiB PyTorch |
|---|---|---:|---|---:|---:|---:|---:|---:|"
for r in $rows; do
    read -r model shape batch steps classes <<<"${ROW[${r%-bf16}]}"
    prec=fp32
    [ "$r" != "${r%-bf16}" ] && prec=bf16
    : >"$tmp/c" && : >"$tmp/t" && : >"$tmp/ratio"
    for ((k = 1; k <= rounds; k++)); do
        read -r ci cm < <(run "$tmp/log" "$root/trainer" --bench "$model" "$shape" "$batch" "$steps" "$threads" \
            classes="$classes" precision="$prec")
        read -r ti tm < <(run "$tmp/log" "$py" "$here/bench_torch.py" "$model" "$shape" "$batch" "$steps" \
            --device cpu --threads "$threads" --warmup 3 --classes "$classes" --precision "$prec")
        echo "  $r round $k: cnntrain $ci img/s (${cm} KB), PyTorch $ti img/s (${tm} KB)" >&2
        echo "$ci $cm" >>"$tmp/c"
        echo "$ti $tm" >>"$tmp/t"
        awk -v a="$ci" -v b="$ti" 'BEGIN {print a / b}' >>"$tmp/ratio"
    done
    med() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
    cmed=$(cut -d' ' -f1 "$tmp/c" | med)
    tmed=$(cut -d' ' -f1 "$tmp/t" | med)
    rmed=$(med <"$tmp/ratio")
    cpk=$(cut -d' ' -f2 "$tmp/c" | sort -g | tail -1)
    tpk=$(cut -d' ' -f2 "$tmp/t" | sort -g | tail -1)
    table+=$'\n'$(printf '| %s | %s | %s | %s | %.1f | %.1f | %.2fx | %d | %d |' "$model" "$shape" "$batch" "$prec" \
        "$cmed" "$tmed" "$rmed" $((cpk / 1024)) $((tpk / 1024)))
done
echo "$table"
[ -z "$out" ] || echo "$table" >"$out"
