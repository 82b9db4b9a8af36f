#!/usr/bin/env bash
# tests/test_bench_jpeg_train.sh - tools/bench_jpeg_train.py, the training
# run from JPEG files beside the same run on synthetic data (issue 31's
# goal), on the CPU with ResNet-20 at 32x32: both runs train, the synthetic
# one on the folder's shape and classes, the table and --out agree; its
# windows' arithmetic on a made-up metrics.jsonl; refusals (too few images
# for the steps, bad options) exit 2 naming the numbers, a failing run
# exits 1 with its message. Checks the tool, not the speeds (those are
# docs/benchmarks.md's). Run from the repository root after make.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
tool=tools/bench_jpeg_train.py
small=(--inputs "cpu synthetic" --steps 8 --skip 4 --log-every 2 --rounds 2 --workers 1
       model.name=resnet20 data.image_size=32 train.batch_size=8 train.device=cpu train.threads=1)

build/tools/to_imagefolder synthetic "$tmp/jpg" --classes 4 --train 80 --val 8 --size 64x48 >/dev/null
check "to_imagefolder: 80 training JPEGs in 4 classes" test "$(find "$tmp/jpg/train" -name '*.jpg' | wc -l)" -eq 80

out=$(timeout 300 python3 $tool "$tmp/jpg" "${small[@]}" --out "$tmp/table.md" 2>&1)
rc=$?
check "two rounds of cpu and synthetic: exit 0 (rc=$rc)" test $rc -eq 0
[ $rc -eq 0 ] || sed 's/^/    /' <<<"$out" | tail -20
check "each run's line, four in all, in alternating order" \
    test "$(grep -oE '^round [12] (cpu|synthetic)' <<<"$out" | tr '\n' ,)" = \
    "round 1 cpu,round 1 synthetic,round 2 synthetic,round 2 cpu,"
check "the header: the folder's input shape and classes, batch, workers, the counted steps" \
    grep -q "3x32x32, 4 classes, batch 8, data.workers = 1, steps 5-8 of 8, 2 round(s), medians" <<<"$out"
check "the cpu row: images/s with both rounds, a ratio, a waiting share" \
    grep -qE '^\| cpu \| [0-9]+\.[0-9] \([0-9]+\.[0-9], [0-9]+\.[0-9]\) \| [0-9]+\.[0-9]{3} \| [0-9]+\.[0-9]% \|$' <<<"$out"
check "the synthetic row: its ratio to itself is 1" \
    grep -qE '^\| synthetic \| [0-9]+\.[0-9] \(.*\) \| 1\.000 \|' <<<"$out"
check "--out holds the printed table" bash -c 'grep -qF "$(head -3 "$1" | tail -1)" <<<"$2" && tail -n 4 <<<"$2" |
    diff -q - <(tail -n 4 "$1") >/dev/null' _ "$tmp/table.md" "$out"

# The windows' arithmetic: steps 2, 4 and 6 logged, skip 2: the images of the
# windows after step 2 (64 + 64) over their times (64/32 + 64/16 = 6 s), and
# the waits (10 ms and 40 ms a step, 2 steps each: 0.1 s of 6).
cat > "$tmp/m.jsonl" <<'EOF'
{"kind":"run","model":"resnet20"}
{"kind":"step","step":2,"images":64,"img_per_sec":8,"data_wait_ms":500}
{"kind":"step","step":4,"images":128,"img_per_sec":32,"data_wait_ms":10}
{"kind":"eval","step":4,"images":128}
{"kind":"step","step":6,"images":192,"img_per_sec":16,"data_wait_ms":40}
EOF
got=$(python3 -c 'import sys; sys.path.insert(0, "tools"); import bench_jpeg_train as b
r, w = b.window_rate(sys.argv[1], 2); print(f"{r:.4f} {w:.4f}")' "$tmp/m.jsonl")
check "window_rate: 128 images in 6 s, 0.1 s of them waiting (got $got)" test "$got" = "21.3333 0.0167"

# Refusals.
out=$(python3 $tool "$tmp/jpg" "${small[@]}" --steps 20 2>&1)
rc=$?
check "too few images for the steps: exit 2 (rc=$rc)" test $rc -eq 2
check "too few images: the counts named" grep -q "holds 80 images in 4 classes; 20 steps of 8 images need 160" <<<"$out"
out=$(python3 $tool "$tmp/jpg" --inputs "cpu gzip" 2>&1)
check "an unknown input: exit 2, named" bash -c "[ $? -eq 2 ] && grep -q \"not 'cpu gzip'\" <<<\"\$1\"" _ "$out"
out=$(python3 $tool "$tmp/jpg" --inputs synthetic 2>&1)
check "synthetic alone: exit 2 (it takes a folder run's shape)" test $? -eq 2
out=$(python3 $tool "$tmp/jpg" "${small[@]}" --skip 3 2>&1)
check "--skip not a multiple of --log-every: exit 2" test $? -eq 2
out=$(python3 $tool "$tmp/nothing" 2>&1)
check "no ROOT/train: exit 2, named" bash -c "[ $? -eq 2 ] && grep -q '$tmp/nothing/train is not a directory' <<<\"\$1\"" \
    _ "$out"
out=$(timeout 120 python3 $tool "$tmp/jpg" "${small[@]}" optim.nokey=1 2>&1)
rc=$?
check "a run that fails: exit 1 (rc=$rc), the trainer's message shown" \
    bash -c "[ $rc -eq 1 ] && grep -q 'the cpu run failed' <<<\"\$1\" && grep -q 'optim.nokey' <<<\"\$1\"" _ "$out"

[ "$fails" -eq 0 ] && echo "all bench_jpeg_train checks passed"
exit "$fails"
