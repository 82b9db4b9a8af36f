#!/usr/bin/env bash
# tools/bench_data.sh - the JPEG input pipeline against torchvision's, side by
# side in one call (issue 31).
#
#   tools/bench_data.sh ROOT [--rounds R] [--workers "1 2"] [--python PY] [--out FILE]
#
# ROOT is an image folder (ROOT/train/<class>/...), e.g. one written by
#   /opt/torch-venv/bin/python tools/photo_jpegs.py /tmp/photos --train 5000
# For each transform (train: RandomResizedCrop 224 + flip + normalise; eval:
# Resize 256 + CenterCrop 224 + normalise) and each worker count W, it runs in
# turns, R rounds (default 3):
#   ./trainer --bench-data configs/resnet50.ini data.root=ROOT
#       (its row for the transform and W workers; data.jpeg_scaling at its default, on)
#   PY tools/bench_data_torch.py ROOT/train --transform T --workers W
# each timing about 3 s after one warm-up batch, batch 64. It prints the CPU,
# then a markdown table: the median images/s of each, the median of the
# per-round ratios (cnntrain / torchvision), and images/s per worker. --out
# FILE also writes the table. PyTorch, torchvision and Pillow come from PY,
# else $TORCH_PYTHON, else /opt/torch-venv/bin/python. Exit 0; 1 when a run
# fails (its output is shown); 2 for usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rounds=3
workers="1 2"
py=${TORCH_PYTHON:-/opt/torch-venv/bin/python}
out=""
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
data=$1
shift
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) usage ;;
    esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_data.sh: --rounds: a whole number >= 1, not '$rounds'" >&2; exit 2; }
[ -d "$data/train" ] || { echo "bench_data.sh: $data/train is not a directory" >&2; exit 2; }
"$py" -c 'import torch, torchvision, PIL' 2> /dev/null ||
    { echo "bench_data.sh: no torch, torchvision and Pillow in $py (see --python)" >&2; exit 2; }
cd "$root"
maxw=$(tr ' ' '\n' <<< "$workers" | sort -n | tail -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run_ours() { # both transforms into $tmp/ours
    if ! ./trainer --bench-data configs/resnet50.ini data.root="$data" data.workers="$maxw" train.batch_size=64 \
        > "$tmp/ours" 2>&1; then
        cat "$tmp/ours" >&2
        exit 1
    fi
}
run_torch() { # TRANSFORM W -> IMG/S
    if ! "$py" tools/bench_data_torch.py "$data/train" --transform "$1" --workers "$2" > "$tmp/torch" \
        2> "$tmp/err"; then
        cat "$tmp/torch" "$tmp/err" >&2
        exit 1
    fi
    awk '{ print $(NF - 1) }' "$tmp/torch"
}
source "$here/median.sh" # median V... or values on stdin

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
echo "CPU: $cpu ($(nproc) cores); $rounds rounds, alternating"
for r in $(seq "$rounds"); do
    run_ours
    for t in train eval; do
        for w in $workers; do
            o=$(awk -v t="$t" -v w="$w" '$1 == t && $2 == w && NF >= 6 { print $3 }' "$tmp/ours")
            [ -n "$o" ] || { echo "bench_data.sh: no row for $w workers in --bench-data's output" >&2; exit 1; }
            p=$(run_torch "$t" "$w")
            echo "$o" >> "$tmp/$t.$w.ours"
            echo "$p" >> "$tmp/$t.$w.torch"
            awk -v a="$o" -v b="$p" 'BEGIN { print a / b }' >> "$tmp/$t.$w.ratio"
            echo "  round $r $t, $w worker(s): cnntrain $o, torchvision $p img/s" >&2
        done
    done
done
{
    echo "| transform | workers | cnntrain img/s | torchvision img/s | ratio (median of rounds) |" \
        "cnntrain img/s per worker |"
    echo "|---|---:|---:|---:|---:|---:|"
    for t in train eval; do
        for w in $workers; do
            o=$(median < "$tmp/$t.$w.ours")
            p=$(median < "$tmp/$t.$w.torch")
            q=$(median < "$tmp/$t.$w.ratio")
            per=$(awk -v a="$o" -v w="$w" 'BEGIN { print a / w }')
            printf "| %s | %d | %.1f | %.1f | %.2fx | %.1f |\n" "$t" "$w" "$o" "$p" "$q" "$per"
        done
    done
} | tee "$tmp/table"
[ -z "$out" ] || cp "$tmp/table" "$out"
