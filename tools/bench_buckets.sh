#!/usr/bin/env bash
# tools/bench_buckets.sh - how the gradient bucket size changes a data-parallel
# step: trains MODEL (default resnet50) on synthetic data under
# `mpirun -np NP` (default 2, one thread per rank) once per dist.bucket_mb
# value, and prints a Markdown table of images/sec, allreduce time per step
# and the part of it backward did not hide (comm_exposed_ms), averaged over
# the steps after the first log window. What dist.bucket_mb's default rests on.
#
#   tools/bench_buckets.sh                      # resnet50, 3x64x64, batch 16
#   MODEL=vgg16 SHAPE=3x32x32 BUCKETS="1 4 25 100" tools/bench_buckets.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-resnet50}
SHAPE=${SHAPE:-3x64x64}
BATCH=${BATCH:-16}
NP=${NP:-2}
STEPS=${STEPS:-12}
BUCKETS=${BUCKETS:-"0.25 1 4 25 100 400"}
FIRST=${FIRST:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model $MODEL $SHAPE, batch $BATCH per rank, $NP ranks x 1 thread, $STEPS steps, first bucket $FIRST MiB"
echo
echo "| bucket_mb | buckets | img/s | allreduce ms/step | exposed ms/step |"
echo "|---:|---:|---:|---:|---:|"
for b in $BUCKETS; do
    out=$(OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$NP" ./trainer configs/resnet20-fashion.ini \
        model.name="$MODEL" data.kind=synthetic data.synthetic_shape="$SHAPE" data.synthetic_train=$((BATCH * NP * STEPS)) \
        data.synthetic_test=$((BATCH * NP)) train.batch_size="$BATCH" train.epochs=1 train.log_every=$((STEPS / 3)) \
        train.threads=1 data.workers=1 dist.bucket_mb="$b" dist.first_bucket_mb="$FIRST" checkpoint.every_epochs=0 \
        dist.stall_warn_s=0 train.out_dir="$tmp/b$b" 2>&1) || { echo "run with bucket_mb=$b failed:"; echo "$out"; exit 1; }
    nb=$(grep -oE 'in [0-9]+ buckets?' <<<"$out" | grep -oE '[0-9]+')
    python3 - "$tmp/b$b/metrics.jsonl" "$b" "$nb" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"step"' in l][1:]  # skip the warm-up window
n = len(rows) or 1
ips = sum(r["img_per_sec"] for r in rows) / n
comm = sum(r["comm_ms"] for r in rows) / n
exp = sum(r["comm_exposed_ms"] for r in rows) / n
print(f"| {sys.argv[2]} | {sys.argv[3]} | {ips:.1f} | {comm:.1f} | {exp:.1f} |")
PY
done
