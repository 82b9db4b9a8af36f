#!/usr/bin/env bash
# tests/test_emulate.sh - emulated compute (train.emulate_compute, train/emulate.h):
# a profile of another model, another batch, another input shape, a renamed
# layer or a missing file ends the run with an error naming the key and the
# file, on 1 rank and on 2 without a hang; a 1-rank emulated run of ResNet-20
# with layer times we set takes at least the profiled time in every step
# (metrics.jsonl's step_ms; a lower bound only, timed goals do not belong in
# tests), logs finite losses and says once that it skips evaluation; a
# 2-rank emulated run really allreduces its gradients (comm_ms > 0), bucket
# by bucket during backward; 2 emulated workers with a parameter server push,
# pull and have their gradients applied.
# Run from the repository root after `make`. Exits non-zero when a check fails.
set -u
T=./trainer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
run() { out=$("$@" 2>&1); rc=$?; }

small=(train.device=cpu data.kind=synthetic data.synthetic_shape=3x8x8 data.synthetic_train=256
       data.synthetic_test=32 train.batch_size=8 train.threads=1 data.workers=1 train.epochs=1
       checkpoint.every_epochs=0)

# A real profile of the run (2 timed steps: its layers and phases), then
# times we choose: every node 0.2 ms forward and 0.4 ms backward, the phase
# totals their sums, 5 ms update. ResNet-20 has 70 nodes: 14 + 28 + 5 = 47 ms.
run $T --profile configs/resnet20-fashion.ini "$tmp/real.json" "${small[@]}" train.max_steps=2
check "the profile of the small run is written" test "$rc" -eq 0
python3 - "$tmp/real.json" "$tmp" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
d = sys.argv[2]
for l in p["layers"]:
    l["forward_ms"], l["backward_ms"] = 0.2, 0.4
p["forward_ms"] = 0.2 * len(p["layers"])
p["backward_ms"] = 0.4 * len(p["layers"])
p["update_ms"] = 5.0
json.dump(p, open(d + "/set.json", "w"))
open(d + "/floor_ms", "w").write("%.4f\n" % (p["forward_ms"] + p["backward_ms"] + p["update_ms"]))
def variant(name, **kv):
    q = json.loads(json.dumps(p))
    q.update(kv)
    json.dump(q, open(d + "/" + name + ".json", "w"))
variant("model", model="resnet32")
variant("batch", batch=16)
variant("input", input=[1, 8, 8])
renamed = json.loads(json.dumps(p))
renamed["layers"][3]["name"] = "layer9.conv1"
json.dump(renamed, open(d + "/renamed.json", "w"))
PY
floor=$(cat "$tmp/floor_ms")

# Mismatches end the run before training, naming the key, the file and what differs.
for v in model:resnet32 batch:16 input:1x8x8 renamed:layer9.conv1; do
    name=${v%%:*} what=${v#*:}
    run timeout 60 $T configs/resnet20-fashion.ini "${small[@]}" train.emulate_compute="$tmp/$name.json" \
        train.out_dir="$tmp/bad-$name"
    check "profile with another $name: exit non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
    check "profile with another $name: the message names the key, the file and '$what'" \
        grep -q "train.emulate_compute.*$tmp/$name.json.*$what" <<<"$out"
done
run timeout 60 $T configs/resnet20-fashion.ini "${small[@]}" train.emulate_compute="$tmp/none.json" \
    train.out_dir="$tmp/bad-none"
check "missing profile: exit non-zero naming the key and the file" \
    test "$rc" -ne 0 -a "$rc" -ne 124 -a -n "$(grep "train.emulate_compute.*$tmp/none.json" <<<"$out")"

# 1 rank: every step at least the profiled time; finite losses; evaluation skipped, said once.
run timeout 120 $T configs/resnet20-fashion.ini "${small[@]}" train.emulate_compute="$tmp/set.json" \
    train.max_steps=10 train.log_every=1 train.out_dir="$tmp/one"
check "1 rank emulated: exit 0" test "$rc" -eq 0
[ "$rc" -eq 0 ] || echo "$out" | tail -5
check "1 rank emulated: says once that evaluation is skipped" test "$(grep -c 'evaluation skipped' <<<"$out")" -eq 1
check "1 rank emulated: every step takes at least the profiled $floor ms, losses finite" \
    python3 - "$tmp/one/metrics.jsonl" "$floor" <<'PY'
import json, math, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step"]
floor = float(sys.argv[2])
assert len(steps) == 10, len(steps)
for r in steps:
    assert r["loss"] is not None and math.isfinite(r["loss"]), r
    assert r["step_ms"] >= floor, (r["step_ms"], floor)
assert not any(r["kind"] == "eval" for r in map(json.loads, open(sys.argv[1])))
print("     step_ms: min %.1f, max %.1f (profiled %.1f)" % (min(r["step_ms"] for r in steps),
      max(r["step_ms"] for r in steps), floor))
PY

# Gradient accumulation: --profile with train.accumulate = 2 times one micro-batch's step; the
# emulated run sleeps forward and backward in each micro-batch, the update once: 2 x 42 + 5 ms a step.
run $T --profile configs/resnet20-fashion.ini "$tmp/acc.json" "${small[@]}" train.max_steps=1 train.accumulate=2
check "profile with train.accumulate = 2: written (rc=$rc)" test "$rc" -eq 0
run timeout 120 $T configs/resnet20-fashion.ini "${small[@]}" train.emulate_compute="$tmp/set.json" \
    train.accumulate=2 train.max_steps=4 train.log_every=1 train.out_dir="$tmp/acc"
check "accumulate = 2 emulated: exit 0, says each micro-batch sleeps" grep -q "each micro-batch sleeps" <<<"$out"
check "accumulate = 2 emulated: every step takes at least 2 x (forward + backward) + update" \
    python3 - "$tmp/acc/metrics.jsonl" "$floor" <<'PY'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step"]
want = 2 * float(sys.argv[2]) - 5
assert len(steps) == 4 and all(r["step_ms"] >= want for r in steps), ([r["step_ms"] for r in steps], want)
PY

if command -v mpirun >/dev/null 2>&1 && $T --version | grep -q "^mpi: built in"; then
    MPI=(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none)
    # 2 ranks: the buckets really cross (5 buckets, comm_ms > 0), during backward.
    run "${MPI[@]}" -np 2 $T configs/resnet20-fashion.ini "${small[@]}" train.emulate_compute="$tmp/set.json" \
        train.max_steps=6 train.log_every=2 dist.bucket_mb=0.25 dist.first_bucket_mb=0.05 train.out_dir="$tmp/two"
    check "2 ranks emulated: exit 0 with 5 buckets" test "$rc" -eq 0 -a -n "$(grep 'in 5 buckets' <<<"$out")"
    [ "$rc" -eq 0 ] || echo "$out" | tail -5
    check "2 ranks emulated: comm_ms > 0 in every step record" python3 - "$tmp/two/metrics.jsonl" <<'PY'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step"]
assert len(steps) == 3 and all(r["comm_ms"] > 0 for r in steps), steps
print("     comm_ms: %s" % [r["comm_ms"] for r in steps])
PY
    check "2 ranks emulated: buckets start during backward" \
        grep -qE "communication: .* [1-9][0-9]* of 30 buckets started during backward" <<<"$out"
    # Parameter servers: 2 emulated workers push and pull for real, the server updates (tools/bench_ps.sh --emulate).
    run "${MPI[@]}" -np 3 $T configs/resnet20-fashion.ini "${small[@]}" train.emulate_compute="$tmp/set.json" \
        train.max_steps=4 train.log_every=2 dist.mode=ps train.out_dir="$tmp/ps"
    check "2 emulated workers + 1 server: exit 0, the server applied 8 gradients" \
        test "$rc" -eq 0 -a -n "$(grep 'parameter server 1 of 1 (rank 2): 4 updates applying 8 gradients' <<<"$out")"
    check "2 emulated workers + 1 server: each step pushed and pulled the model" \
        grep -q '"ps_push_mb":1.0[0-9]*,"ps_pull_mb":1.0' "$tmp/ps/metrics.jsonl"
    # A mismatch on 2 ranks ends the job (no rank waits for the other).
    run "${MPI[@]}" -np 2 $T configs/resnet20-fashion.ini "${small[@]}" train.emulate_compute="$tmp/batch.json" \
        train.out_dir="$tmp/bad-two"
    check "2 ranks, profile of another batch: the job ends non-zero, not by the timeout" \
        test "$rc" -ne 0 -a "$rc" -ne 124
    check "2 ranks, profile of another batch: the message names the key" grep -q "train.emulate_compute" <<<"$out"
else
    echo "(no MPI in this build: the 2-rank checks are left out)"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all emulated-compute checks passed"
