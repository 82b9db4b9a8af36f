#!/usr/bin/env bash
# tests/test_best.sh - checkpoint.keep_best: checkpoint.dir/best.cnt is the
# checkpoint of the best test top-1 so far (its epoch the first argmax of
# metrics.jsonl's evaluations; --eval of it gives that top-1), kept when
# checkpoint.keep prunes its epoch's file; best.json says which; a best
# epoch whose checkpoint is not due gets one; a resume goes on from the
# best so far; a lost link (a stop between best.json and best.cnt) is
# mended; a fresh start moves the earlier run's best aside with its
# checkpoints, and a resume an unreadable best.json (with a warning);
# checkpoint.keep_best = false keeps none.
# Run from the repository root after `make`.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
C=(configs/resnet20-fashion.ini data.train_limit=512 data.test_limit=200 train.batch_size=32 train.threads=1
   data.workers=1 optim.lr=0.05 optim.schedule=constant optim.warmup_epochs=0 checkpoint.keep=1
   checkpoint.keep_best=true)
# best_of DIR: "EPOCH TOP1" of the first best evaluation in DIR/metrics.jsonl (every record of this run)
best_of() {
    python3 -c '
import json, sys
best = None
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "eval" and (best is None or r["top1"] > best[1]):
        best = (r["epoch"], r["top1"])
print(best[0], "%.6f" % best[1])' "$1/metrics.jsonl"
}
# json_of DIR: "EPOCH TOP1 CHECKPOINT" from DIR/checkpoints/best.json
json_of() {
    python3 -c '
import json, sys
b = json.load(open(sys.argv[1]))
print(b["epoch"], "%.6f" % b["top1"], b["checkpoint"])' "$1/checkpoints/best.json" 2>/dev/null
}

# Four epochs (16 steps each), then a resume whose rate (5) ruins the fifth:
# the best is one of the first four, whatever the machine's rounding.
timeout 600 ./trainer "${C[@]}" train.epochs=5 train.max_steps=64 train.out_dir="$tmp/a" >"$tmp/a.log" 2>&1
check "4 epochs: exit 0" test $? -eq 0
timeout 600 ./trainer "${C[@]}" train.epochs=5 optim.lr=5 checkpoint.resume=auto train.out_dir="$tmp/a" \
    >"$tmp/a2.log" 2>&1
check "the fifth, resumed: exit 0, the best so far said" \
    bash -c '[ $1 -eq 0 ] && grep -q "the best test top-1 so far" "$2"' _ $? "$tmp/a2.log"
read -r be bt < <(best_of "$tmp/a")
read -r je jt jc < <(json_of "$tmp/a")
tops=$(cat "$tmp/a.log" "$tmp/a2.log" | grep 'done in' | grep -oE 'top-1 [0-9.]+%' | tr '\n' ' ')
check "best.json names the first best evaluation of the five: epoch $je ($jt), metrics say $be ($bt); $tops" \
    test "$je" = "$be" -a "$jt" = "$bt"
check "the best is not the fifth (epoch $be)" test "$be" -lt 5
check "best.cnt is there, from that epoch's checkpoint ($jc)" \
    test -f "$tmp/a/checkpoints/best.cnt" -a "$jc" = "$(printf 'ckpt-%06d.cnt' "$be")"
check "checkpoint.keep = 1: the fifth's checkpoint alone beside best.cnt" \
    test "$(ls "$tmp/a/checkpoints" | grep '^ckpt-.*\.cnt$')" = ckpt-000005.cnt
ev=$(timeout 120 ./trainer --eval "${C[@]}" "$tmp/a/checkpoints/best.cnt" 2>&1 | grep -oE 'top-1 [0-9.]+%')
check "--eval of best.cnt: the best epoch's $ev" test "$ev" = "top-1 $(awk -v t="$bt" 'BEGIN{printf "%.2f", 100*t}')%"

# A best epoch whose checkpoint is not due gets one: the first evaluation is
# always the best so far, and checkpoint.every_epochs = 10 makes only the last due.
timeout 600 ./trainer "${C[@]}" train.epochs=2 checkpoint.every_epochs=10 train.out_dir="$tmp/b" >"$tmp/b.log" 2>&1
check "checkpoint.every_epochs = 10: epoch 1, the best so far, written and kept" \
    bash -c 'grep -q "checkpoint: .*ckpt-000001.cnt" "$1" && grep -q "so far (.* after epoch 1," "$1"' _ "$tmp/b.log"

# A stop between best.json and best.cnt (best.cnt lost): the resume links it again.
timeout 600 ./trainer "${C[@]}" train.epochs=3 train.max_steps=32 checkpoint.keep=0 train.out_dir="$tmp/r" \
    >"$tmp/r1.log" 2>&1
rm -f "$tmp/r/checkpoints/best.cnt"
timeout 600 ./trainer "${C[@]}" train.epochs=3 checkpoint.keep=0 checkpoint.resume=auto train.out_dir="$tmp/r" \
    >"$tmp/r2.log" 2>&1
check "resume: exit 0 (rc=$?), a lost best.cnt linked again" grep -q "linked again" "$tmp/r2.log"
read -r be4 bt4 < <(best_of "$tmp/r")
read -r je4 jt4 jc4 < <(json_of "$tmp/r")
check "resume: best.json is the best of all 3 epochs (epoch $je4, metrics $be4), best.cnt its file" \
    test "$je4" = "$be4" -a "$jt4" = "$bt4" -a "$tmp/r/checkpoints/best.cnt" -ef "$tmp/r/checkpoints/$jc4"

# A fresh start in the same out_dir moves the earlier best aside with its checkpoints.
timeout 600 ./trainer "${C[@]}" train.epochs=1 train.out_dir="$tmp/a" >"$tmp/a2.log" 2>&1
check "fresh start: exit 0" test $? -eq 0
check "fresh start: the earlier best.cnt and best.json are in superseded-*/" \
    bash -c 'ls "$1"/checkpoints/superseded-*/best.cnt "$1"/checkpoints/superseded-*/best.json >/dev/null' _ "$tmp/a"
read -r je5 _ < <(json_of "$tmp/a")
check "fresh start: its own best is epoch 1 ($je5)" test "$je5" = 1

timeout 600 ./trainer "${C[@]}" train.epochs=1 checkpoint.keep_best=false train.out_dir="$tmp/n" >"$tmp/n.log" 2>&1
timeout 600 ./trainer "${C[@]:0:${#C[@]}-1}" train.epochs=1 train.out_dir="$tmp/d" >"$tmp/d.log" 2>&1
check "by default (keep_best = false): no best.cnt, no best.json" \
    test -f "$tmp/d/checkpoints/ckpt-000001.cnt" -a ! -e "$tmp/d/checkpoints/best.cnt" \
    -a ! -e "$tmp/d/checkpoints/best.json"
check "checkpoint.keep_best = false: no best.cnt, no best.json" \
    test ! -e "$tmp/n/checkpoints/best.cnt" -a ! -e "$tmp/n/checkpoints/best.json"

echo "{\"epoch\": 1" >"$tmp/n/checkpoints/best.json"
out=$(timeout 600 ./trainer "${C[@]}" train.epochs=2 checkpoint.resume=auto train.out_dir="$tmp/n" 2>&1)
rc=$?
check "resume with a corrupt best.json: exit 0 (rc=$rc), a warning naming it, moved aside, a new best kept" \
    bash -c '[ $1 -eq 0 ] && grep -q "warning: .*best.json" <<<"$2" &&
             ls "$3"/checkpoints/superseded-*/best.json >/dev/null && [ -f "$3/checkpoints/best.cnt" ]' \
    _ $rc "$out" "$tmp/n"

[ "$fails" -eq 0 ] && echo "all keep_best checks passed"
exit "$fails"
