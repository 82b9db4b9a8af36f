#!/usr/bin/env bash
# tests/test_dist_train.sh - data-parallel training under mpirun (2 and 4
# ranks, oversubscribed), and one process without it (no MPI started): the
# job trains and logs once; the learning rate is
# scaled by the world size; one step on 2 ranks x batch B, and on 2 ranks x 2
# accumulated micro-batches of B/2, equals one step on 1 rank x batch 2B (same
# samples, model without batch norm or dropout);
# ranks with different configs are reported, not hung on; a rank that fails
# ends the job; dist.timeline writes a Chrome trace in which buckets leave
# during backward; dist.compress=fp16 and powersgd train with bit-identical
# ranks (powersgd's uncompressed first steps equal the plain allreduce's), and
# a powersgd resume goes on as the uninterrupted run, to rounding; the
# stall watchdog names a late rank (CNT_TEST_STALL, test-only fault
# injection) and ends a job whose rank stalls past dist.stall_abort_s; so do
# the bounded waits of every other collective (CNT_TEST_STALL_IN: start-up,
# evaluation, the post-epoch check, the ring's messages); the
# warm-up starts at 0 or, with optim.warmup_start=lr, at one worker's rate;
# fp16 mixed precision skips the same overflowing steps on every rank;
# threads follow each rank's CPU set and oversubscription is named.
# Every run here is pinned to the CPU (train.device=cpu): bitwise equality
# across batch splits and reruns is the CPU backend's promise (a GPU picks
# cuDNN algorithms by timing). The GPU's multi-rank paths are checked by
# tests/test_gpu_train.sh and tests/test_nccl.sh.
# Run from the repository root after `make`.
set -u
if ! command -v mpirun >/dev/null 2>&1 || ! ./trainer --version | grep -q "^mpi: built in"; then
    echo "SKIPPED: no MPI in this build"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
MPI=(timeout 120 mpirun --allow-run-as-root --oversubscribe)
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
small=(train.device=cpu data.train_limit=512 data.test_limit=200 train.batch_size=16 train.epochs=1 train.max_steps=8
       train.log_every=4 train.threads=1 data.workers=1 optim.lr=0.05)

# A process no MPI launcher started trains without starting MPI (no singleton daemon): an Open MPI
# setting that makes MPI_Init fail does not touch it; under mpirun the same setting does.
out=$(OMPI_MCA_pml=no_such_pml ./trainer configs/resnet20-fashion.ini "${small[@]}" train.max_steps=1 \
      train.out_dir="$tmp/nompi" 2>&1)
check "1 process without mpirun: trains without MPI_Init (exit $?)" grep -q "^stopped (train.max_steps = 1" <<<"$out"
# (by its exit status and the missing training line: Open MPI's own message about the bad setting is
# sometimes lost, 'ORTE_ERROR_LOG: Data unpack would read past end of buffer' in its place)
out=$(OMPI_MCA_pml=no_such_pml "${MPI[@]}" -np 1 ./trainer configs/resnet20-fashion.ini "${small[@]}" \
      train.max_steps=1 train.out_dir="$tmp/mpi1" 2>&1)
rc=$?
check "1 rank under mpirun: MPI starts and fails on the bad setting (exit $rc), nothing trained" \
    test $rc -ne 0 -a $rc -ne 124 -a -z "$(grep '^stopped (train.max_steps' <<<"$out")"

# Threads follow each rank's CPUs (sched_getaffinity) and the start-up lines say so: 2 unbound ranks
# with train.threads = 0 each run one per CPU of the machine, more than its CPUs, and rank 0 says which
# setting fixes it; with train.threads = 1 nothing is said; bound to a core each, each runs 1.
# (nproc would honour OMP_NUM_THREADS: the CPUs this test may use, and the machine's)
ncpu=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
online=$(getconf _NPROCESSORS_ONLN)
if [ "$ncpu" -ge 2 ]; then
    out=$("${MPI[@]}" -np 2 --bind-to none ./trainer configs/resnet20-fashion.ini "${small[@]}" train.threads=0 \
          train.max_steps=1 train.out_dir="$tmp/thr0" 2>&1)
    check "threads = 0, 2 unbound ranks: each says $ncpu threads" \
        test "$(grep -c "threads: rank [01] on .*: $ncpu (train.threads = 0: one per CPU the rank may run on), on CPUs [0-9,-]* of its $online" <<<"$out")" -eq 2
    check "threads = 0, 2 unbound ranks: oversubscription named, with the setting that fixes it" \
        grep -q "warning: threads: the 2 ranks on .* run $((2 * ncpu)) threads on $ncpu CPUs, which take turns: set train.threads = $((ncpu / 2))" <<<"$out"
    out=$("${MPI[@]}" -np 2 --bind-to none ./trainer configs/resnet20-fashion.ini "${small[@]}" train.max_steps=1 \
          train.out_dir="$tmp/thr1" 2>&1)
    check "threads = 1, 2 unbound ranks: no threads warning" bash -c '! grep -q "warning: threads" <<<"$1"' _ "$out"
    out=$("${MPI[@]}" -np 2 --bind-to core ./trainer configs/resnet20-fashion.ini "${small[@]}" train.threads=0 \
          train.max_steps=1 train.out_dir="$tmp/thrc" 2>&1)
    check "threads = 0, each rank bound to a core: 1 thread each, on one CPU" \
        test "$(grep -c "threads: rank [01] on .*: 1 (train.threads = 0: .*), on CPU [0-9]* of its $online" <<<"$out")" -eq 2
    if [ "$online" -gt 2 ]; then
        check "threads = 0, bound to a core each: the idle CPUs are named" \
            grep -q "may run on 2 of its $online CPUs .* so $((online - 2)) CPU" <<<"$out"
    fi
fi

for np in 2 4; do
    out=$("${MPI[@]}" -np $np ./trainer configs/resnet20-fashion.ini "${small[@]}" train.out_dir="$tmp/r$np" 2>&1)
    rc=$?
    check "$np ranks: training exits 0" test $rc -eq 0
    check "$np ranks: start-up line names the world and the scaled lr" \
        grep -q "dist: $np ranks.*lr 0.05 per worker x $np = $(python3 -c "print($np*0.05)")" <<<"$out"
    check "$np ranks on one node: dist.backend=auto chose MPI_Allreduce, saying why" \
        grep -q "allreduced with MPI_Allreduce (dist.backend = auto: one node) in" <<<"$out"
    check "$np ranks: progress is logged once" test "$(grep -c 'step 8/8' <<<"$out")" -eq 1
    check "$np ranks: parameters bit-identical on every rank after the steps" \
        grep -q "parameters bit-identical on all $np ranks" <<<"$out"
    check "$np ranks: metrics.jsonl written once per record" \
        test "$(grep -c '"kind":"step"' "$tmp/r$np/metrics.jsonl" 2>/dev/null)" -eq 2
done

# Overlap on and off: the same sums, so the same losses; with overlap the
# buckets leave during backward, without it none does.
for ov in true false; do
    out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.overlap=$ov dist.bucket_mb=0.25 \
          dist.first_bucket_mb=0.05 train.out_dir="$tmp/ov$ov" 2>&1)
    check "overlap=$ov: exits 0 with 5 buckets" grep -q "in 5 buckets" <<<"$out"
    if [ $ov = true ]; then
        check "overlap=true: buckets start during backward" grep -qE "communication: .* 40 of 40 buckets started during backward" <<<"$out"
    else
        check "overlap=false: no bucket starts during backward" grep -qE "communication: .* 0 of 40 buckets started during backward" <<<"$out"
    fi
    check "overlap=$ov: comm_ms and comm_exposed_ms in metrics.jsonl" grep -q '"comm_exposed_ms":' "$tmp/ov$ov/metrics.jsonl"
done
check "overlap on and off give the same losses" test "$(grep -o '"loss":[^,]*' "$tmp/ovtrue/metrics.jsonl")" = "$(grep -o '"loss":[^,]*' "$tmp/ovfalse/metrics.jsonl")"

# dist.timeline: one Chrome-trace file from both ranks, with per-layer
# backward events, bucket allreduces that start before backward ends, and an
# arrow from each bucket's readiness to its allreduce.
"${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.timeline=timeline.json dist.bucket_mb=0.25 \
    dist.first_bucket_mb=0.05 train.max_steps=4 train.out_dir="$tmp/tl2" >/dev/null 2>&1
check "timeline (2 ranks): valid JSON with both ranks, layer events and overlapped buckets" \
    python3 - "$tmp/tl2/timeline.json" 2 <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
world = int(sys.argv[2])
x = [e for e in ev if e["ph"] == "X"]
assert {e["pid"] for e in x} == set(range(world)), "events from every rank"
assert any(e["name"].startswith("bwd ") for e in x), "per-layer backward events"
names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert names == {"train", "comm"}, names
bwd_end = {(e["pid"], e["args"]["step"]): e["ts"] + e["dur"] for e in x if e["name"] == "backward"}
assert len(bwd_end) == 4 * world, bwd_end
buckets = [e for e in x if e["name"].startswith("allreduce bucket") and e["tid"] == 1]
assert buckets, "bucket events on the comm thread"
early = [e for e in buckets if e["ts"] < bwd_end[(e["pid"], e["args"]["step"])]]
print(len(early), "of", len(buckets), "bucket allreduces start before backward ends")
assert early
# a flow arrow per bucket: from the training track when it was ready to its allreduce's start
s = {(e["pid"], e["id"]): e for e in ev if e["ph"] == "s"}
f = {(e["pid"], e["id"]): e for e in ev if e["ph"] == "f"}
assert s.keys() == f.keys() and len(s) == len(buckets), (len(s), len(f), len(buckets))
starts = {(e["pid"], e["args"]["step"], round(e["ts"], 3)) for e in buckets}
for k, a in s.items():
    b = f[k]
    assert a["tid"] == 0 and b["tid"] == 1 and b["bp"] == "e" and a["ts"] <= b["ts"] + 1, (a, b)
    assert (b["pid"], b["args"]["step"], round(b["ts"], 3)) in starts, b
PY
./trainer configs/resnet20-fashion.ini "${small[@]}" dist.timeline=tl.json train.max_steps=2 train.out_dir="$tmp/tl1" \
    >/dev/null 2>&1
check "timeline (1 process): valid JSON with forward and backward events" python3 - "$tmp/tl1/tl.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["name"] for e in ev if e["ph"] == "X"}
assert {"data wait", "forward", "backward", "optimizer"} <= names, names
assert {e["pid"] for e in ev} == {0}
PY
# A window of steps (dist.timeline_steps): only steps 2 and 3 of 4, with per-layer forward and backward
# events, the evaluation and the checkpoint (stamped with the step they follow).
./trainer configs/resnet20-fashion.ini "${small[@]}" dist.timeline=tl.json dist.timeline_steps=2:3 train.max_steps=4 \
    checkpoint.every_steps=3 train.out_dir="$tmp/tlw" >/dev/null 2>&1
check "timeline, steps 2:3: only those steps, layer events both ways, the checkpoint at step 3" \
    python3 - "$tmp/tlw/tl.json" <<'PY'
import json, sys
x = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
assert {e["args"]["step"] for e in x} == {2, 3}, sorted({e["args"]["step"] for e in x})
assert [e["args"]["step"] for e in x if e["name"] == "forward"] == [2, 3]
fwd = [e for e in x if e["name"].startswith("fwd ")]
assert len(fwd) == len([e for e in x if e["name"].startswith("bwd ")]) > 0 and all(e["cat"] == "forward" for e in fwd)
assert [e["args"]["step"] for e in x if e["name"] == "checkpoint"] == [3], [e for e in x if e["name"] == "checkpoint"]
PY
./trainer configs/resnet20-fashion.ini "${small[@]}" dist.timeline=tl.json train.max_steps=2 train.out_dir="$tmp/tle" \
    >/dev/null 2>&1
check "timeline: the evaluation after the last step" \
    python3 -c 'import json, sys; x = json.load(open(sys.argv[1]))["traceEvents"]; assert [e["args"]["step"] for e in x if e["name"] == "evaluate"] == [2]' "$tmp/tle/tl.json"
check "timeline: the ranks' parts are gone once the trace is written" \
    bash -c '! ls "$1"/*.part 2>/dev/null | grep -q .' _ "$tmp/tl2"
# A run killed in the middle leaves each rank's events up to its last step boundary in
# <trace>.rank<R>.part, which tools/plot_timeline.py draws.
"${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.timeline=tl.json train.max_steps=0 \
    train.epochs=50 train.out_dir="$tmp/tlk" >/dev/null 2>&1 &
job=$!
for _ in $(seq 1 100); do grep -q '"step":12,' "$tmp/tlk/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
pkill -KILL -P "$(pgrep -P $job)" 2>/dev/null
wait $job 2>/dev/null
check "killed run: no trace, a part per rank with at least 12 steps' events" python3 - "$tmp/tlk" <<'PY'
import json, os, sys
d = sys.argv[1]
assert not os.path.exists(d + "/tl.json")
for r in (0, 1):
    lines = [l for l in open(f"{d}/tl.json.rank{r}.part").read().split("\n") if l.strip()]
    ev = [json.loads(l) for l in lines[:-1]]  # the last line may be cut short
    assert ev[0]["name"] == "process_name" and ev[0]["args"]["name"] == f"rank {r}", ev[0]
    steps = {e["args"]["step"] for e in ev if e["ph"] == "X"}
    assert {1, 12} <= steps, sorted(steps)
PY
if python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    out=$(python3 tools/plot_timeline.py "$tmp/tlk/tl.json.rank0.part" "$tmp/tlk/tl.json.rank1.part" --steps 10:11 2>&1)
    check "killed run: plot_timeline.py draws its parts" grep -q "wrote $tmp/tlk/tl.png (4 tracks" <<<"$out"
fi
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" dist.timeline=tl.json dist.timeline_steps=3:2 2>&1)
check "timeline_steps = 3:2: refused naming the key" grep -q "dist.timeline_steps = '3:2': give A:B" <<<"$out"

# One SGD step: 2 ranks x batch 8 == 1 rank x batch 16 on the same 16 samples
# (rank r takes positions r, r+2, ... of the shared permutation). VGG-11 on
# synthetic 3x32x32 data has no batch norm; dropout off, no augmentation.
one=(train.device=cpu model.name=vgg11 model.dropout=0 data.kind=synthetic data.synthetic_shape=3x32x32 data.synthetic_train=64
     data.synthetic_test=32 data.augment=false train.epochs=1 train.max_steps=1 train.log_every=1 train.threads=1
     data.workers=1 optim.lr_scaling=none optim.lr=0.01 optim.warmup_epochs=0 optim.schedule=constant
     checkpoint.every_epochs=0) # no checkpoint: VGG-11's is 1 GB
# unbound, so that rank 0 draws VGG-11's 129 million initial values on both cores (the others sleep in the
# broadcast); mpirun would bind each rank to one core
"${MPI[@]}" --bind-to none -np 1 ./trainer configs/resnet20-fashion.ini "${one[@]}" train.batch_size=16 \
    train.out_dir="$tmp/one1" >/dev/null 2>&1
"${MPI[@]}" --bind-to none -np 2 ./trainer configs/resnet20-fashion.ini "${one[@]}" train.batch_size=8 \
    train.out_dir="$tmp/one2" >/dev/null 2>&1
# and gradient accumulation: rank r's two micro-batches of 4 are its first 8 positions, r, r+2, ...
"${MPI[@]}" --bind-to none -np 2 ./trainer configs/resnet20-fashion.ini "${one[@]}" train.batch_size=4 \
    train.accumulate=2 train.out_dir="$tmp/one2a" >/dev/null 2>&1
same_step() { # same_step METRICS METRICS: the first step's loss, the evaluation's loss and top-1 agree
    python3 - "$1" "$2" <<'PY'
import json, sys
def rec(path):
    rows = [json.loads(l) for l in open(path)]
    step = [r for r in rows if r["kind"] == "step"][0]
    ev = [r for r in rows if r["kind"] == "eval"][0]
    return step["loss"], ev["eval_loss"], ev["top1"]
a, b = rec(sys.argv[1]), rec(sys.argv[2])
print("1 rank:", a, " 2 ranks:", b)
ok = abs(a[0] - b[0]) <= 1e-5 * abs(a[0]) and abs(a[1] - b[1]) <= 1e-5 * abs(a[1]) and a[2] == b[2]
sys.exit(0 if ok else 1)
PY
}
check "2 ranks x batch 8 == 1 rank x batch 16: step loss and eval loss agree" same_step "$tmp/one1/metrics.jsonl" \
    "$tmp/one2/metrics.jsonl"
check "2 ranks x 2 accumulated micro-batches of 4 == 1 rank x batch 16: the same" same_step "$tmp/one1/metrics.jsonl" \
    "$tmp/one2a/metrics.jsonl"

# Buckets in flight (dist.buckets_in_flight): several buckets' allreduces move at once, each adding in its
# own order, so 3 ranks (whose sums round differently in another order) end with the same parameters, bit
# for bit, with 1 and with several in flight, through the ring and through hier, in 52 buckets a step.
fl=(configs/resnet20-fashion.ini "${small[@]}" train.max_steps=4 dist.bucket_mb=0.02 dist.first_bucket_mb=0.01
    checkpoint.every_steps=4)
for run in ring:1 ring:4 hier:1 hier:3; do
    be=${run%:*} f=${run#*:}
    "${MPI[@]}" -np 3 ./trainer "${fl[@]}" dist.backend=$be dist.buckets_in_flight=$f \
        train.out_dir="$tmp/fl-$be$f" > "$tmp/fl-$be$f.log" 2>&1
    ./trainer --export "$(ls "$tmp/fl-$be$f"/checkpoints/ckpt-*.cnt 2> /dev/null | head -n 1)" "$tmp/fl-$be$f.st" \
        > /dev/null 2>&1
done
check "3 ranks, 4 buckets in flight: the start-up line says so" \
    grep -q "in 52 buckets (0.02 MiB, first 0.01 MiB; 4 in flight at once)" "$tmp/fl-ring4.log"
check "3 ranks, ring: the parameters after 4 steps are the same bits with 1 and 4 buckets in flight" \
    cmp "$tmp/fl-ring1.st" "$tmp/fl-ring4.st"
check "3 ranks, hier: the same bits with 1 and 3 in flight" cmp "$tmp/fl-hier1.st" "$tmp/fl-hier3.st"
check "3 ranks, hier with 3 in flight: bit-identical ranks" grep -q "parameters bit-identical on all 3 ranks" \
    "$tmp/fl-hier3.log"
out=$(./trainer configs/resnet20-fashion.ini dist.backend=mpi dist.buckets_in_flight=2 2>&1)
check "buckets_in_flight = 2 with dist.backend = mpi: refused naming both keys" \
    grep -q "dist.buckets_in_flight = 2 needs dist.backend = ring or hier; dist.backend = mpi sums one bucket" <<<"$out"

# dist.bucket_mb = auto: the ranks time the allreduce at start-up, rank 0 predicts the step at each bucket
# size from a profile of this model (tests/test_simulate.c checks the choice itself) and every rank cuts
# the buckets it chose. ResNet-20's 1 MiB of gradients after a 0.05 MiB first bucket: one bucket of 1 MiB.
./trainer --profile configs/resnet20-fashion.ini "$tmp/p20.json" "${small[@]}" > "$tmp/p20.log" 2>&1
au=(configs/resnet20-fashion.ini "${small[@]}" train.max_steps=2 dist.bucket_mb=auto dist.first_bucket_mb=0.05)
"${MPI[@]}" -np 2 ./trainer "${au[@]}" dist.bucket_profile="$tmp/p20.json" train.out_dir="$tmp/au" > "$tmp/au.log" 2>&1
want="dist.bucket_mb = auto: 1 MiB: predicted step [0-9.]* ms; from $tmp/p20.json's layers (batch 16, run at 16)"
want+=" and MPI_Allreduce timed over these 2 ranks at start-up (0.0625 MiB [0-9.]* ms, .*, 64 MiB [0-9.]* ms)"
check "bucket_mb = auto, 2 ranks: the choice, its prediction and the curve it timed, in one line" \
    grep -q "$want" "$tmp/au.log"
check "bucket_mb = auto: every rank cuts it (2 buckets: 0.05 MiB, then 1 MiB) and trains bit-identically" \
    test -n "$(grep 'in 2 buckets (1 MiB, first 0.05 MiB)' "$tmp/au.log")" \
    -a -n "$(grep 'parameters bit-identical on all 2 ranks' "$tmp/au.log")"
# one process: nothing to size, said so, and the default buckets
out=$(./trainer "${au[@]}" train.out_dir="$tmp/au0" 2>&1)
check "bucket_mb = auto, one process: no allreduce to size, the default 25 MiB, exit 0" \
    test $? -eq 0 -a -n "$(grep 'dist.bucket_mb = auto: no allreduce here (one rank); buckets of 25 MiB' <<<"$out")"
# without a profile file rank 0 profiles the step itself, before the model is built
out=$("${MPI[@]}" -np 2 ./trainer "${au[@]}" train.out_dir="$tmp/au1" 2>&1)
check "bucket_mb = auto without a profile: rank 0 profiles 3 steps at start-up, the ranks train bit-identically" \
    test -n "$(grep "dist.bucket_mb = auto: 1 MiB: .* from the layers of 3 steps profiled on rank 0 at start-up in" \
        <<<"$out")" \
    -a -n "$(grep 'parameters bit-identical on all 2 ranks' <<<"$out")"
out=$("${MPI[@]}" -np 2 ./trainer "${au[@]}" dist.bucket_profile="$tmp/none.json" train.out_dir="$tmp/au2" 2>&1)
rc=$?
check "bucket_mb = auto, a missing profile: exit non-zero naming the key and the file" \
    test $rc -ne 0 -a -n "$(grep "dist.bucket_mb = auto: .*$tmp/none.json" <<<"$out")"
out=$("${MPI[@]}" -np 2 ./trainer "${au[@]}" model.name=resnet32 dist.bucket_profile="$tmp/p20.json" \
    train.out_dir="$tmp/au3" 2>&1)
rc=$?
want="dist.bucket_mb = auto: the profile $tmp/p20.json is of a model with 269434 parameters (resnet20); this run's"
check "bucket_mb = auto, another model's profile: refused naming the file and both parameter counts" \
    test $rc -ne 0 -a -n "$(grep "$want resnet32 has" <<<"$out")"
# with dist.compress = powersgd auto sizes the compressed steps' buckets (two sums each, and the arithmetic,
# timed at start-up: the simulator's PowerSGD model), which needs the profile's tensors: one without them is
# refused
out=$("${MPI[@]}" -np 2 ./trainer "${au[@]}" dist.compress=powersgd dist.powersgd_start=0 \
    dist.bucket_profile="$tmp/p20.json" train.out_dir="$tmp/au4" 2>&1)
want="and PowerSGD's arithmetic at [0-9.]* ns a compressed value on 1 thread$"
check "bucket_mb = auto with PowerSGD: the choice and the arithmetic's time logged, every rank cuts it, bit-identical" \
    test -n "$(grep "dist.bucket_mb = auto: [0-9.]* MiB: predicted step [0-9.]* ms.*from $tmp/p20.json.*$want" \
        <<<"$out")" \
    -a -n "$(grep 'PowerSGD rank 2' <<<"$out")" -a -n "$(grep 'parameters bit-identical on all 2 ranks' <<<"$out")"
python3 -c 'import json,sys
p = json.load(open(sys.argv[1])); del p["tensors"]; json.dump(p, open(sys.argv[2], "w"))' "$tmp/p20.json" "$tmp/p20old.json"
out=$("${MPI[@]}" -np 2 ./trainer "${au[@]}" dist.compress=powersgd dist.bucket_profile="$tmp/p20old.json" \
    train.out_dir="$tmp/au5" 2>&1)
rc=$?
check "bucket_mb = auto with PowerSGD, a profile without tensors: refused naming what to do" \
    test $rc -ne 0 -a -n "$(grep 'dist.bucket_mb = auto: PowerSGD: the profile has no "tensors"' <<<"$out")"

# Checkpoints: only rank 0 writes them (one file per epoch, nothing else in
# the directory), and a 2-rank job resumes from one.
ck=(train.device=cpu data.train_limit=512 data.test_limit=100 train.batch_size=16 train.log_every=8 train.threads=1 data.workers=1
    checkpoint.keep=0 train.out_dir="$tmp/ck")
"${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${ck[@]}" train.epochs=1 >/dev/null 2>&1
check "2 ranks: exactly one checkpoint file after one epoch" test "$(ls -A "$tmp/ck/checkpoints" 2>/dev/null)" = "ckpt-000001.cnt"
out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${ck[@]}" train.epochs=2 checkpoint.resume=auto 2>&1)
check "2 ranks: resume from the newest checkpoint" grep -q "resumed from .*ckpt-000001.cnt: 1 epochs and 16 steps done" <<<"$out"
check "2 ranks: the resumed run writes epoch 2" test "$(ls -A "$tmp/ck/checkpoints" | tr '\n' ' ')" = "ckpt-000001.cnt ckpt-000002.cnt "

# dist.compress=fp16: gradients travel as halves (MPI user op, then our ring);
# the job trains (the loss drops) and the ranks stay bit-identical (checked
# after the epoch; a divergence would fail the run).
f16=(train.device=cpu data.train_limit=1024 data.test_limit=200 train.batch_size=16 train.epochs=1 train.max_steps=32 train.log_every=8
     train.threads=1 data.workers=1 optim.lr=0.05 dist.compress=fp16)
for be in mpi ring; do
    out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${f16[@]}" dist.backend=$be train.out_dir="$tmp/f16$be" 2>&1)
    rc=$?
    check "fp16 ($be): training exits 0" test $rc -eq 0
    check "fp16 ($be): start-up line says fp16 on the wire" grep -q "dist: 2 ranks.*fp16 on the wire" <<<"$out"
    check "fp16 ($be): parameters bit-identical on both ranks" grep -q "parameters bit-identical on all 2 ranks" <<<"$out"
    check "fp16 ($be): the loss drops" python3 - "$tmp/f16$be/metrics.jsonl" <<'PY'
import json, sys
loss = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step"]
print("    fp16 losses:", " ".join("%.4f" % l for l in loss))
sys.exit(0 if len(loss) == 4 and loss[-1] < 0.8 * loss[0] else 1)
PY
done

# dist.compress=powersgd: with small buckets (13,107 values) that cut
# ResNet-20's 3x3 convolutions (up to 36,864 values), so some buckets hold
# no whole tensor; steps 1-4 uncompressed, 5-32 compressed at rank 1. The
# ranks stay bit-identical and the loss drops; the uncompressed steps are the
# plain allreduce's bit for bit (a run whose compression would start after
# the last step logs the losses of dist.compress=none), and the compressed
# ones are not.
ps=("${f16[@]/dist.compress=fp16/dist.compress=powersgd}" dist.powersgd_rank=1 dist.powersgd_start=4
    dist.bucket_mb=0.05 dist.first_bucket_mb=0.05)
losses() { python3 -c '
import json, sys
print(" ".join("%.9g" % r["loss"] for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step"))' "$1"; }
for be in mpi ring; do
    out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${ps[@]}" dist.backend=$be train.out_dir="$tmp/ps$be" 2>&1)
    rc=$?
    check "powersgd ($be): training exits 0" test $rc -eq 0
    check "powersgd ($be): the start-up line says what travels" \
        grep -q "dist: 2 ranks.*PowerSGD rank 1 after 4 uncompressed steps (20 of 59 tensors, 99.5% of the values; 0.03 MiB a step instead of 1.03; its arithmetic on 1 thread) on the wire" <<<"$out"
    check "powersgd ($be): parameters bit-identical on both ranks" grep -q "parameters bit-identical on all 2 ranks" <<<"$out"
    "${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${ps[@]}" dist.backend=$be dist.compress=none \
        train.out_dir="$tmp/psnone$be" >/dev/null 2>&1
    "${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${ps[@]}" dist.backend=$be dist.powersgd_start=32 \
        train.out_dir="$tmp/pslate$be" >/dev/null 2>&1
    check "powersgd ($be): uncompressed steps equal dist.compress=none's bit for bit" \
        test -n "$(losses "$tmp/psnone$be/metrics.jsonl")" -a "$(losses "$tmp/pslate$be/metrics.jsonl")" = "$(losses "$tmp/psnone$be/metrics.jsonl")"
    check "powersgd ($be): compressed steps differ from them, the loss drops" python3 - "$tmp/ps$be/metrics.jsonl" \
        "$tmp/psnone$be/metrics.jsonl" <<'PY'
import json, sys
loss = [[r["loss"] for r in map(json.loads, open(f)) if r["kind"] == "step"] for f in sys.argv[1:]]
print("    powersgd losses:", " ".join("%.4f" % l for l in loss[0]), "| none:", " ".join("%.4f" % l for l in loss[1]))
# logged at steps 8, 16, 24, 32: the first after compression began differs
sys.exit(0 if len(loss[0]) == 4 and loss[0][0] != loss[1][0] and loss[0][-1] < 0.8 * loss[0][0] else 1)
PY
done

# dist.powersgd_threads: the arithmetic on 2 threads writes the one thread's
# bits. ResNet-18's convolutions (up to 2.4 M values) are above the 64 K
# values where the threads start (ResNet-20's are not): 8 steps, compressed
# from step 3, the same losses to 9 digits, and the start-up line says so.
r18=(configs/resnet20-fashion.ini model.name=resnet18 train.device=cpu data.train_limit=256 data.test_limit=100
     train.batch_size=8 train.epochs=1 train.max_steps=8 train.threads=1 data.workers=1 train.log_every=1
     optim.lr=0.01 dist.backend=ring dist.compress=powersgd dist.powersgd_start=2 dist.powersgd_rank=1)
for t in 1 2; do
    "${MPI[@]}" -np 2 ./trainer "${r18[@]}" dist.powersgd_threads=$t train.out_dir="$tmp/pst$t" >"$tmp/pst$t.log" 2>&1
    check "powersgd, dist.powersgd_threads=$t: exit 0, its arithmetic on $t thread(s), ranks bit-identical" \
        test $? -eq 0 -a -n "$(grep "its arithmetic on $t thread" "$tmp/pst$t.log")" \
        -a -n "$(grep 'parameters bit-identical on all 2 ranks' "$tmp/pst$t.log")"
done
check "powersgd on 2 threads on CPU ranks: a warning that they take backward's cores, once" \
    test "$(grep -c 'warning: dist.powersgd_threads = 2 on CPU ranks: its threads take the cores' "$tmp/pst2.log")" -eq 1
check "powersgd on 2 threads: the 8 losses of 1 thread, bit for bit ($(losses "$tmp/pst2/metrics.jsonl" | cut -c1-40)...)" \
    test -n "$(losses "$tmp/pst1/metrics.jsonl")" -a "$(losses "$tmp/pst2/metrics.jsonl")" = "$(losses "$tmp/pst1/metrics.jsonl")"

# PowerSGD's state in a checkpoint: a run of 32 steps (compressed from step
# 5) writes one at step 16; a resume from it restores Q and the ranks'
# summed error (on rank 0), which makes the same sums up to rounding: its
# losses at steps 18-22 are the uninterrupted run's within 1e-3 (measured:
# the same 6 digits; 1.5 % off at step 18 without the error restored, 3 %
# with rank 0's own error only). A resume that does not compress says it
# drops the error.
psr=("${ps[@]}" dist.backend=ring train.max_steps=32 train.log_every=2 checkpoint.keep=0)
"${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${psr[@]}" checkpoint.every_steps=16 \
    train.out_dir="$tmp/psrfull" >/dev/null 2>&1
ck16="$tmp/psrfull/checkpoints/ckpt-000000-0000000512.cnt"
out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${psr[@]}" checkpoint.resume="$ck16" \
      train.out_dir="$tmp/psrres" 2>&1)
check "powersgd resume: the checkpoint's state restored" \
    grep -q "resume: PowerSGD's factors and the error it held back (268048 values, the ranks' sum, on rank 0) rest" <<<"$out"
check "powersgd resume: steps 18-22 equal the uninterrupted run's to rounding" python3 - "$tmp/psrfull/metrics.jsonl" \
    "$tmp/psrres/metrics.jsonl" <<'PY'
import json, sys
loss = [{r["step"]: r["loss"] for r in map(json.loads, open(f)) if r["kind"] == "step"} for f in sys.argv[1:]]
steps = (18, 20, 22)
print("    uninterrupted:", " ".join("%.6f" % loss[0].get(s, -1) for s in steps),
      "| resumed:", " ".join("%.6f" % loss[1].get(s, -1) for s in steps))
sys.exit(0 if all(s in loss[0] and s in loss[1] and abs(loss[1][s] - loss[0][s]) <= 1e-3 * loss[0][s]
                  for s in steps) else 1)
PY
# checkpoint.keep_best alone (no checkpoint due at the epoch's end): rank 0 decides to save the best and
# tells rank 1, which must take part in summing the errors (without that, the ranks' collectives part
# after epoch 1: the stall limit ends the job, seen with the broadcast removed)
out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${psr[@]}" train.max_steps=0 train.epochs=2 \
      data.train_limit=256 checkpoint.every_epochs=0 checkpoint.every_steps=1000 checkpoint.keep_best=true dist.stall_abort_s=20 \
      train.out_dir="$tmp/psrbest" 2>&1)
check "powersgd with keep_best: both ranks write the best checkpoint together" \
    test $? -eq 0 -a -f "$tmp/psrbest/checkpoints/best.cnt"
out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${psr[@]}" checkpoint.resume="$ck16" \
      dist.compress=none train.max_steps=17 train.out_dir="$tmp/psrnone" 2>&1)
check "powersgd resume without compression: exits 0, says the error is dropped" \
    grep -q "holds PowerSGD's error (268048 values its compression held back), which this run drops" <<<"$out"

# Mixed precision on 2 ranks: fp16 with dynamic loss scaling started at 2^24,
# so the first steps overflow. Every rank checks the allreduced gradients and
# must skip the same steps (else the parameters would differ after the
# epoch); with dist.compress=fp16 the sums on the wire overflow too, and are
# caught the same way.
for wire in none fp16; do
    out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${f16[@]}" dist.compress=$wire dist.backend=ring \
          train.precision=fp16 train.loss_scale=16777216 train.out_dir="$tmp/amp$wire" 2>&1)
    rc=$?
    check "fp16 math, $wire on the wire: training exits 0" test $rc -eq 0
    check "fp16 math, $wire on the wire: parameters bit-identical on both ranks" \
        grep -q "parameters bit-identical on all 2 ranks" <<<"$out"
    check "fp16 math, $wire on the wire: steps skipped, the scale lowered, the loss drops" \
        python3 - "$tmp/amp$wire/metrics.jsonl" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step"]
print("    fp16 math: loss %.4f -> %.4f, loss scale %g, %d steps skipped" %
      (rows[0]["loss"], rows[-1]["loss"], rows[-1]["loss_scale"], rows[-1]["skipped_steps"]))
skipped = rows[-1]["skipped_steps"]
ok = 0 < skipped < 32 and rows[-1]["loss_scale"] == 2.0 ** (24 - skipped) and rows[-1]["loss"] < 0.8 * rows[0]["loss"]
sys.exit(0 if ok else 1)
PY
done

# Stall watchdog: rank 1 sleeps 3 s at the start of step 3 (CNT_TEST_STALL,
# test-only); with dist.stall_warn_s=1 rank 0 names rank 1, the step and the
# bucket, and the run still finishes.
out=$(CNT_TEST_STALL=1:3:3 "${MPI[@]}" -np 2 -x CNT_TEST_STALL ./trainer configs/resnet20-fashion.ini "${small[@]}" \
      dist.stall_warn_s=1 train.out_dir="$tmp/stw" 2>&1)
rc=$?
check "stall warning: the run finishes (exit 0)" test $rc -eq 0
check "stall warning: rank 0 names the late rank 1, step 3 and bucket 0" \
    grep -qE "^\[rank 0\] warning: stall: step 3 bucket 0 has waited [0-9]+ s for rank 1 \(last seen at step 2 bucket" <<<"$out"
check "stall warning: rank 0 reports the stall over" grep -q "^\[rank 0\] warning: stall over: step 3 bucket 0" <<<"$out"
if [ $rc -ne 0 ]; then tail -n 20 <<<"$out" | sed 's/^/    /'; fi

# dist.stall_abort_s=2 and a 30 s stall: the job ends non-zero within seconds
# (not by the timeout), with an error naming the late rank.
t0=$(date +%s)
out=$(CNT_TEST_STALL=1:2:30 timeout 40 mpirun --allow-run-as-root --oversubscribe -np 2 -x CNT_TEST_STALL ./trainer \
      configs/resnet20-fashion.ini "${small[@]}" dist.stall_abort_s=2 train.out_dir="$tmp/sta" 2>&1)
rc=$?
secs=$(($(date +%s) - t0))
check "stall abort: the job ends non-zero, not by the timeout (rc=$rc, ${secs}s)" test $rc -ne 0 -a $rc -ne 124 -a $rc -ne 137
check "stall abort: within 15 s of start (start-up included)" test $secs -le 15
check "stall abort: rank 0's error names rank 1" \
    grep -qE "^\[rank 0\] error: stall: step 2 bucket 0 has waited [0-9]+ s for rank 1 .*ending the job" <<<"$out"

# Bounded waits: every host collective, not only the gradient allreduce,
# gives up after dist.stall_abort_s. A rank stalls (CNT_TEST_STALL_IN, test-
# only) on entering a phase; the other rank names the collective and the
# phase it waited in, and ends the job within seconds (not by the timeout).
# The stalled rank prints no such line. With rank 0 stalled at start-up,
# rank 1 may get through the device report's gather (its part is a send)
# and wait in the next start-up collective, hence the pattern. The cases run
# at once (each job mostly waits out its stall), then are checked in order.
# Cases: STALLED_RANK|PHASE|REPORTING_RANK|COLLECTIVE AND PHASE (regex)|EXTRA OPTIONS
cases='1|evaluation|0|dist_allreduce_sum_f64 during evaluation|
0|start-up|1|dist_[a-z0-9_]+ during start-up: [a-z ]+|
1|post-epoch parameter check|0|dist_allgather_u64 during post-epoch parameter check|
1|gradient allreduce|0|the ring allreduce during gradient allreduce \(step 1, bucket [0-9]+\)|dist.backend=ring'
k=0
while IFS='|' read -r sr phase rr what extra; do
    k=$((k + 1))
    (
        t0=$(date +%s)
        # shellcheck disable=SC2086 # $extra: zero or more options
        CNT_TEST_STALL_IN="$sr:$phase:30" timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
            -x CNT_TEST_STALL_IN ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.stall_abort_s=3 $extra \
            train.out_dir="$tmp/bw$k" </dev/null > "$tmp/bw$k.out" 2>&1
        echo "$? $(($(date +%s) - t0))" > "$tmp/bw$k.rc"
    ) &
done <<< "$cases"
wait
k=0
while IFS='|' read -r sr phase rr what extra; do
    k=$((k + 1))
    out=$(cat "$tmp/bw$k.out")
    read -r rc secs < "$tmp/bw$k.rc"
    check "stall in $phase: the job ends non-zero, not by the timeout (rc=$rc, ${secs}s)" \
        test $rc -ne 0 -a $rc -ne 124 -a $rc -ne 137
    check "stall in $phase: within 30 s of start" test $secs -le 30
    check "stall in $phase: rank $rr names the collective and the phase, and ends the job" \
        grep -qE "^\[rank $rr\] error: stall: rank $rr has waited [0-9]+ s in $what for the other ranks.*: one or more did not arrive.*dist.stall_abort_s = 3" <<<"$out"
    check "stall in $phase: rank $rr names the asleep rank $sr as alive and waiting in no collective" \
        grep -qE "^\[rank $rr\] error: stall: .*; on this node rank $sr is alive and waits in no collective" <<<"$out"
    check "stall in $phase: the stalled rank $sr reports no wait" \
        test "$(grep -c "^\[rank $sr\] error: stall:" <<<"$out")" -eq 0
    if ! grep -q "error: stall: rank" <<<"$out"; then tail -n 8 <<<"$out" | sed 's/^/    /'; fi
done <<< "$cases"

# A rank stopped inside the blocking MPI_Allreduce of the gradients (after the
# watchdog let every rank in): the other rank's deadman thread ends the job.
start=$(date +%s)
out=$(CNT_TEST_STALL_IN=1:MPI_Allreduce:30 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
      -x CNT_TEST_STALL_IN ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.backend=mpi dist.stall_abort_s=3 \
      train.out_dir="$tmp/deadman" 2>&1)
rc=$?
secs=$(($(date +%s) - start))
check "stall inside MPI_Allreduce: the job ends non-zero, not by the timeout (rc=$rc, ${secs}s)" \
    test $rc -ne 0 -a $rc -ne 124 -a $rc -ne 137
check "stall inside MPI_Allreduce: within 20 s" test $secs -le 20
check "stall inside MPI_Allreduce: rank 0 names the call and the phase" \
    grep -qE "^\[rank 0\] error: stall: rank 0 has been inside MPI_Allreduce during gradient allreduce \(step 1, bucket [0-9]+\) for [0-9]+ s" <<<"$out"
check "stall inside MPI_Allreduce: rank 0 says what can be resumed (nothing yet)" \
    grep -q "^\[rank 0\] stopped: no checkpoint written" <<<"$out"
# A shorter stop inside it, under dist.stall_warn_s = 1: the waiting rank
# warns every second while it is inside (it used to say nothing until the
# abort), says when the call returned, and the run finishes.
out=$(CNT_TEST_STALL_IN=1:MPI_Allreduce:3.5 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
      -x CNT_TEST_STALL_IN ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.backend=mpi dist.stall_warn_s=1 \
      dist.stall_abort_s=30 train.out_dir="$tmp/deadwarn" 2>&1)
rc=$?
check "short stop inside MPI_Allreduce: the run finishes (rc=$rc)" test $rc -eq 0
inside="MPI_Allreduce during gradient allreduce \(step 1, bucket [0-9]+\)"
check "short stop inside MPI_Allreduce: rank 0 warns at least twice, naming the call and the phase" \
    test "$(grep -cE "^\[rank 0\] warning: stall: rank 0 has been inside $inside for [0-9]+ s" <<<"$out")" -ge 2
check "short stop inside MPI_Allreduce: rank 0 says when it returned" \
    grep -qE "^\[rank 0\] warning: stall over: rank 0 left $inside after [0-9.]+ s" <<<"$out"
check "short stop inside MPI_Allreduce: the stopped rank warns of nothing" \
    bash -c '! grep -q "^\[rank 1\] warning: stall" <<<"$1"' _ "$out"
check "short stop before MPI_Allreduce: rank 0 names rank 1 (on this node, not entered, alive)" \
    grep -qE "^\[rank 0\] warning: stall: rank 0 has been inside $inside .*; on this node rank 1 has not entered it, its process alive" <<<"$out"
# A rank stopped (SIGSTOP) inside MPI_Allreduce: its monitor thread stops
# with it, so the waiting rank's warnings name it from the node's shared
# slots (dist/wait.h) as giving no sign of life, and the waiting rank's
# thread inside MPI is throttled instead of spinning; after SIGCONT the run
# finishes.
log="$tmp/sigstop.log"
CNT_TEST_STALL_IN="1:inside the call:6" timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
    -x CNT_TEST_STALL_IN ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.backend=mpi dist.stall_warn_s=1 \
    dist.stall_abort_s=30 train.out_dir="$tmp/sigstop" >"$log" 2>&1 &
job=$!
pid=$(injected_pid "$log")
r0=$(trainer_pid "$tmp/sigstop" "$pid")
[ -n "$pid" ] && kill -STOP "$pid"
sleep 2.5
share=$(cpu_percent "${r0:-0}" 1.5)
threads=$(cat /proc/"${r0:-0}"/task/*/comm 2> /dev/null | sort -u | tr '\n' ' ')
mpi_nice=$(thread_nice "${r0:-0}" cnt-comm)
[ -n "$pid" ] && kill -CONT "$pid"
wait "$job"
rc=$?
check "rank stopped inside MPI_Allreduce: the run finishes after SIGCONT (rc=$rc, pid ${pid:-not found})" \
    test $rc -eq 0 -a -n "$pid"
check "rank stopped inside MPI_Allreduce: rank 0 names rank 1 as giving no sign of life" \
    grep -qE "^\[rank 0\] warning: stall: .*; on this node rank 1 has given no sign of life for [0-9]+ s: its process is stopped or gone" "$log"
# ... and does not spin a core meanwhile (its monitor throttles the thread inside MPI: dist/wait.h)
check "rank stopped inside MPI_Allreduce: rank 0 (pid ${r0:-not found}) used ${share}% of a core for 1.5 s (< 30%)" \
    test -n "$r0" -a "$share" -lt 30
# ... whose threads say what they are (top -H, ps -L): the one inside MPI, its monitor, the loader's
check "rank 0's threads are named: cnt-comm, cnt-stall, cnt-train-0 among: $threads" \
    eval 'grep -q "cnt-comm " <<< "$threads" && grep -q "cnt-stall " <<< "$threads" && grep -q "cnt-train-0 " <<< "$threads"'
# ... whose communication thread keeps the process's priority with MPI_Allreduce, which spins inside
# Open MPI (a raised thread would keep a core from backward); with the ring, which sleeps between
# polls, it runs dist.comm_nice (-10) below the process's, so that it wakes ahead of backward.
check "dist.backend = mpi: rank 0's cnt-comm thread keeps nice 0 (${mpi_nice:-no such thread})" test "${mpi_nice:-x}" = 0
log="$tmp/nice.log"
CNT_TEST_STALL_IN="1:evaluation:3" "${MPI[@]}" -np 2 -x CNT_TEST_STALL_IN ./trainer configs/resnet20-fashion.ini \
    "${small[@]}" train.max_steps=2 dist.backend=ring train.out_dir="$tmp/nice" >"$log" 2>&1 &
job=$!
pid=$(injected_pid "$log")
r0=$(trainer_pid "$tmp/nice" "$pid")
nice0=$(thread_nice "${r0:-0}" cnt-comm)
nice1=$(thread_nice "${pid:-0}" cnt-comm)
wait "$job"
rc=$?
check "dist.backend = ring: both ranks' cnt-comm threads run at nice -10 (${nice0:-none}, ${nice1:-none}; rc=$rc)" \
    test "${nice0:-x}" = -10 -a "${nice1:-x}" = -10 -a $rc -eq 0
# A stall after a checkpoint: the job's last words name it.
out=$(CNT_TEST_STALL_IN=1:evaluation:30 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 -x CNT_TEST_STALL_IN \
      ./trainer configs/resnet20-fashion.ini "${small[@]}" train.max_steps=0 checkpoint.every_steps=4 dist.stall_abort_s=3 \
      train.out_dir="$tmp/lastwords" 2>&1)
check "stall in evaluation after step checkpoints: rank 0 names the last one" \
    grep -q "^\[rank 0\] stopped: last checkpoint $tmp/lastwords/checkpoints/ckpt-000000-0000000[0-9]*.cnt (step [0-9]*)" <<<"$out"

# A stall shorter than the abort limit: warnings every dist.stall_warn_s,
# then "stall over", and the run finishes. Three ranks, rank 2 asleep on
# entering evaluation: rank 0's warning names it as alive and waiting in no
# collective (the node's table, dist/wait.h), not as stopped, and not rank 1,
# which waits in the same collective as rank 0.
out=$(CNT_TEST_STALL_IN=2:evaluation:2.5 "${MPI[@]}" -np 3 -x CNT_TEST_STALL_IN ./trainer configs/resnet20-fashion.ini \
      "${small[@]}" dist.stall_warn_s=1 dist.stall_abort_s=20 train.out_dir="$tmp/bww" 2>&1)
rc=$?
check "short stall in evaluation: the run finishes (exit 0)" test $rc -eq 0
check "short stall in evaluation: rank 0 warns, naming the collective and the phase" \
    grep -qE "^\[rank 0\] warning: stall: rank 0 has waited [12] s in dist_allreduce_sum_f64 during evaluation for the other ranks" <<<"$out"
check "short stall in evaluation: rank 0 reports the stall over" \
    grep -q "^\[rank 0\] warning: stall over: dist_allreduce_sum_f64 during evaluation completed after" <<<"$out"
check "short stall in evaluation: rank 0 names rank 2 as alive and waiting in no collective" \
    grep -qE "^\[rank 0\] warning: stall: .*; on this node rank 2 is alive and waits in no collective" <<<"$out"
check "short stall in evaluation: rank 0 does not name rank 1, which waits too" \
    test "$(grep "^\[rank 0\] warning: stall: " <<<"$out" | grep -c "rank 1 ")" -eq 0
check "short stall in evaluation: rank 2 is asleep, not stopped, and is not called stopped" \
    test "$(grep -c "no sign of life" <<<"$out")" -eq 0
if [ $rc -ne 0 ]; then tail -n 20 <<<"$out" | sed 's/^/    /'; fi

# Warm-up: from 0 by default; optim.warmup_start=lr (Goyal et al.) starts at
# one worker's rate 0.05 and rises to 2 x 0.05 over the 16 steps of an epoch.
for ws in zero lr; do
    out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${small[@]}" train.max_steps=2 train.log_every=1 \
          optim.schedule=constant optim.warmup_epochs=1 optim.warmup_start=$ws train.out_dir="$tmp/w$ws" 2>&1)
    want=$([ $ws = zero ] && echo '0\.00625' || echo '0\.0531[23]')
    check "warmup_start=$ws: the first step's lr is $want" grep -qE "step 1/2 .* lr $want " <<<"$out"
done

# Different configurations on the ranks: reported with the differing key.
out=$("${MPI[@]}" -np 1 ./trainer configs/resnet20-fashion.ini "${small[@]}" train.out_dir="$tmp/m" optim.momentum=0.9 : \
      -np 1 ./trainer configs/resnet20-fashion.ini "${small[@]}" train.out_dir="$tmp/m" optim.momentum=0.8 2>&1)
rc=$?
check "config mismatch: non-zero exit" test $rc -ne 0 -a $rc -ne 124
check "config mismatch: rank 1 names the differing key" grep -q "\[rank 1\].*optim.momentum = 0.8.*optim.momentum = 0.9" <<<"$out"

# MPMD launch whose ranks differ in a key that decides a collective
# (dist.backend=auto joins an allreduce to choose NCCL, mpi does not): the
# configuration check comes before anything such a key decides, so the job
# ends naming the key instead of hanging.
start=$(date +%s)
out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 ./trainer configs/resnet20-fashion.ini "${small[@]}" \
      train.out_dir="$tmp/mp" dist.backend=auto : -np 1 ./trainer configs/resnet20-fashion.ini "${small[@]}" \
      train.out_dir="$tmp/mp" dist.backend=mpi 2>&1)
rc=$?
secs=$(($(date +%s) - start))
check "MPMD dist.backend auto/mpi: non-zero exit, no hang (rc=$rc, ${secs}s)" test $rc -ne 0 -a $rc -ne 124
check "MPMD dist.backend auto/mpi: rank 1 names dist.backend" grep -q "\[rank 1\].*dist.backend = mpi.*dist.backend = auto" <<<"$out"

# A rank that fails ends the job instead of leaving rank 0 waiting.
out=$("${MPI[@]}" -np 1 ./trainer configs/resnet20-fashion.ini "${small[@]}" train.out_dir="$tmp/d" : \
      -np 1 ./trainer configs/resnet20-fashion.ini "${small[@]}" train.out_dir="$tmp/d" data.root="$tmp/none" 2>&1)
rc=$?
check "a failing rank ends the job (no hang)" test $rc -ne 0 -a $rc -ne 124
check "the failing rank is named" grep -q "\[rank 1\].*$tmp/none" <<<"$out"

# tools/profile.sh: the step profile plus the allreduce curve of both transports at 2 ranks.
out=$(BENCH_ARGS="--iters-time 0.02" timeout 120 tools/profile.sh configs/resnet20-fashion.ini "$tmp/prof.json" \
      train.device=cpu train.threads=1 data.workers=1 train.batch_size=16 train.max_steps=3 2>&1)
check "tools/profile.sh: exit 0" test $? -eq 0
check "tools/profile.sh: the curves cover 4 KiB to the gradient's size at 2 ranks, both transports" \
    python3 - "$tmp/prof.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
a = p["allreduce"]
assert a["world"] == 2 and set(a["curves"]) == {"mpi", "ring"}, a
for name, c in a["curves"].items():
    sizes = [x["bytes"] for x in c]
    assert sizes[0] == 4096 and all(y == 4 * x for x, y in zip(sizes, sizes[1:])), (name, sizes)
    assert sizes[-1] >= p["grad_bytes"] > sizes[-2], (name, sizes, p["grad_bytes"])
    assert all(x["us"] > 0 for x in c), c
assert p["layers"] and p["buckets"]
PY

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all distributed training checks passed"
