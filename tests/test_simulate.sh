#!/usr/bin/env bash
# tests/test_simulate.sh - build/tools/simulate from the command line (the
# engine's numbers are checked in tests/test_simulate.c): a real
# `trainer --profile` of a small run is read, the table has one row per N
# with efficiency 1 at N=1, --csv and --trace write a CSV and a Chrome trace
# Python can load (with "allreduce bucket" events on the comm thread), the
# curve mode refuses another world size, --powersgd sends each bucket as
# a P and a Q sum and refuses a profile without its tensors, a malformed profile is refused
# naming the file and field, a bad option exits 2; the tool links none of
# the communication or compute libraries (it starts in milliseconds, and
# reproduce_horovod.py runs it about a thousand times). Run from the
# repository root after `make`.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
sim=./build/tools/simulate
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...

# dist/buckets.c holds the cuts the simulator shares with the exchange; a function of the exchange's
# communication or of a backend that it reaches pulls MPI and cuDNN in (100 ms a start, not 3)
libs=$(ldd "$sim" 2>&1)
check "simulate links no MPI, NCCL, CUDA, cuDNN, oneDNN or OpenBLAS" \
    test -z "$(grep -E 'lib(mpi|nccl|cudart|cudnn|cublas|dnnl|openblas)' <<<"$libs")"
./trainer --profile configs/resnet20-fashion.ini "$tmp/p.json" train.device=cpu train.batch_size=8 \
    train.max_steps=2 train.threads=1 data.train_limit=64 data.test_limit=64 >/dev/null 2>&1
check "trainer --profile wrote a profile" test -s "$tmp/p.json"

out=$($sim "$tmp/p.json" --workers 1,4,512 --bw 25 --csv "$tmp/s.csv" --trace "$tmp/t.json" 2>"$tmp/err")
rc=$?
check "simulate: exit 0" test $rc -eq 0
check "simulate: rows for 1, 4 and 512 workers; efficiency 1.000 at 1" \
    bash -c "grep -qE '^ +1 .* 1\.000 +0\.00 ' <<<\"\$1\" && grep -qE '^ +4 ' <<<\"\$1\" && grep -qE '^ +512 ' <<<\"\$1\"" _ "$out"
check "simulate: says how long the simulations took" grep -qE 'simulated in [0-9.]+ ms' "$tmp/err"
check "simulate --csv: a header and 3 rows" test "$(wc -l <"$tmp/s.csv")" -eq 4
check "simulate --trace: Chrome trace with allreduce buckets on the comm thread and backward layers on train" \
    python3 -c 'import json,sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
assert any(e["name"].startswith("allreduce bucket") and e["tid"] == 1 and e["ph"] == "X" for e in ev)
assert any(e["name"].startswith("bwd ") and e["tid"] == 0 for e in ev)
assert any(e.get("args", {}).get("name") == "predicted, 512 workers" for e in ev)' "$tmp/t.json"

# Parameter servers: the server's link carries every worker's copy, so the
# PS step grows with the workers where the ring's stays nearly flat; more
# servers share the load; a trace names the pushes and pulls.
out=$($sim "$tmp/p.json" --workers 2,8 --bw 1 --ps-servers 1 --trace "$tmp/ps.json" 2>&1)
check "simulate --ps-servers 1: exit 0, the header says so" grep -q "1 synchronous parameter server, 1 Gbit/s" <<<"$out"
check "simulate --ps-servers: push and pull events in the trace" python3 -c 'import json,sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
assert any(e["name"] == "push shard 0" and e["tid"] == 1 for e in ev)
assert any(e["name"] == "pull shard 0" and e["tid"] == 1 for e in ev)' "$tmp/ps.json"
ring=$($sim "$tmp/p.json" --workers 2,8 --bw 1 --overlap off 2>&1)
ps1=$($sim "$tmp/p.json" --workers 2,8 --bw 1 --overlap off --ps-servers 1 2>&1)
ps4=$($sim "$tmp/p.json" --workers 2,8 --bw 1 --overlap off --ps-servers 4 2>&1)
check "simulate: 1 server's exposed communication at 8 workers is about 4x its 2-worker one, the ring's under 2x; 4 servers take less than half" \
    python3 - "$ring" "$ps1" "$ps4" <<'PY'
import sys
def comm(text):
    rows = {int(l.split()[0]): float(l.split()[5]) for l in text.splitlines() if l.strip()[:1].isdigit()}
    return rows[2], rows[8]
r2, r8 = comm(sys.argv[1]); p2, p8 = comm(sys.argv[2]); q2, q8 = comm(sys.argv[3])
assert 3.5 < p8 / p2 <= 4.0 + 1e-9, (p2, p8)
assert r8 / r2 < 2, (r2, r8)
assert q8 < p8 / 2, (q8, p8)
PY
out=$($sim "$tmp/p.json" --ps-servers 1 --algo hier 2>&1)
check "simulate --ps-servers with --algo hier: usage error (exit 2)" test $? -eq 2

# PowerSGD: the header says what travels; the trace has each bucket's P and Q sums and the arithmetic
# between them; a profile without its tensors (an older one) is refused naming it; not with --fp16.
out=$($sim "$tmp/p.json" --workers 1,4 --bw 1 --powersgd 2 --trace "$tmp/psgd.json" 2>&1)
check "simulate --powersgd 2: exit 0, the header says what travels" \
    grep -q "PowerSGD rank 2 (20 of 59 tensors; 0.06 MB a step on the wire; 2.2 ns a value of arithmetic; bucket by bucket)" <<<"$out"
check "simulate --powersgd: P and Q sums and the arithmetic in the trace" python3 -c 'import json,sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = [e["name"] for e in ev if e["tid"] == 1]
assert any(n.endswith("(P sum)") for n in names) and any(n.endswith("(Q sum)") for n in names), names
assert "PowerSGD arithmetic" in names, names' "$tmp/psgd.json"
python3 -c 'import json,sys
p = json.load(open(sys.argv[1])); del p["tensors"]; json.dump(p, open(sys.argv[2], "w"))' "$tmp/p.json" "$tmp/old.json"
out=$($sim "$tmp/old.json" --powersgd 2 2>&1)
rc=$?
check "simulate --powersgd on a profile without tensors: exit 1 naming it" \
    bash -c "[ $rc -eq 1 ] && grep -q 'old.json has no \"tensors\"' <<<\"\$1\"" _ "$out"
$sim "$tmp/p.json" --powersgd 2 --fp16 >/dev/null 2>&1
check "simulate --powersgd with --fp16: usage error (exit 2)" test $? -eq 2
# as NCCL's ranks run it: after backward, one P and one Q sum for the whole gradient
out=$($sim "$tmp/p.json" --workers 4 --bw 1 --powersgd 2,0.05 --powersgd-at end 2>&1)
check "simulate --powersgd-at end: exit 0, the header says so, 2 messages a step" \
    bash -c 'grep -q "0.05 ns a value of arithmetic; after backward, the whole gradient at once)" <<<"$1" &&
             grep -qE "^ +4 .* 2 +[a-z]" <<<"$1"' _ "$out"
$sim "$tmp/p.json" --powersgd 2 --powersgd-at middle >/dev/null 2>&1
check "simulate --powersgd-at middle: usage error (exit 2)" test $? -eq 2

python3 - "$tmp/p.json" "$tmp/c.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["allreduce"] = {"world": 2, "curves": {"mpi": [{"bytes": 4096, "us": 80}, {"bytes": 4194304, "us": 9000}],
                                         "ring": [{"bytes": 4096, "us": 90}]}}
json.dump(p, open(sys.argv[2], "w"))
PY
out=$($sim "$tmp/c.json" --algo curve --workers 1,2 2>&1)
check "simulate --algo curve: runs at the curve's world size" bash -c "grep -qE '^ +2 ' <<<\"\$1\"" _ "$out"
out=$($sim "$tmp/c.json" --algo curve --workers 2,4 2>&1)
rc=$?
check "simulate --algo curve: refuses 4 workers with a curve at 2 (exit 1)" \
    bash -c "[ $rc -eq 1 ] && grep -q 'measured at 2 workers and cannot predict 4' <<<\"\$1\"" _ "$out"

sed 's/"backward_ms":[0-9.]*/"backward_ms":"x"/2' "$tmp/p.json" >"$tmp/bad.json"
out=$($sim "$tmp/bad.json" 2>&1)
rc=$?
check "simulate: a malformed profile exits 1 naming the file and the field" \
    bash -c "[ $rc -eq 1 ] && grep -q 'bad.json: layers\[0\].backward_ms: expected a number' <<<\"\$1\"" _ "$out"
mkfifo "$tmp/fifo.json"
out=$(timeout 10 $sim "$tmp/fifo.json" 2>&1)
rc=$?
check "simulate: a FIFO as the profile is refused at once (exit 1), not read forever" \
    bash -c "[ $rc -eq 1 ] && grep -q \"cannot open profile '$tmp/fifo.json': it is a FIFO\" <<<\"\$1\"" _ "$out"
$sim "$tmp/p.json" --overlap maybe >/dev/null 2>&1
check "simulate: a bad option value exits 2" test $? -eq 2

out=$($sim "$tmp/p.json" --batch 64 --backward-ratio 2 --images-per-s 134.4 --workers 1,16 2>&1)
check "simulate --batch --images-per-s: one worker runs at the given speed (64 / 134.4 images/s = 476.19 ms)" \
    bash -c "grep -q 'batch 64 per worker, one worker 134.4 images/s' <<<\"\$1\" && grep -qE '^ +1 +476\.19 +134\.4 ' <<<\"\$1\"" _ "$out"
$sim "$tmp/p.json" --images-per-s 100 --speed 2 >/dev/null 2>&1
check "simulate: --images-per-s with --speed exits 2" test $? -eq 2

# tools/reproduce_horovod.py end to end on small profiles (the real ones take
# minutes to make): it fits its two parameters, writes the tables and the CSV
mkdir -p "$tmp/hv"
for m in inception3 resnet101 vgg16; do cp "$tmp/p.json" "$tmp/hv/$m.json"; done
python3 tools/reproduce_horovod.py --profiles "$tmp/hv" --out "$tmp/hv" >"$tmp/hv.out" 2>&1
rc=$?
check "reproduce_horovod.py: exit 0, the fitted J and eta, 15 published rows and 15 what-ifs" \
    bash -c "[ $rc -eq 0 ] && grep -qE '^Fitted on the 16-GPU table: J = [0-9.]+ %' '$tmp/hv/horovod.md' &&
             [ \$(grep -c '^| [0-9]* GPUs' '$tmp/hv/horovod.md') -eq 15 ] &&
             [ \$(sed -n '/^What-ifs/,\$p' '$tmp/hv/horovod.md' | grep -c '^| ') -eq 16 ] &&
             [ \$(wc -l <'$tmp/hv/horovod.csv') -eq 61 ]" || cat "$tmp/hv.out"

# --bucket-mb auto: at each N the size the model predicts fastest (the rule: tests/test_simulate.c). On
# ResNet-50's 94 MB at 16 workers, a slow link wants fewer, larger buckets than a fast one, where buckets
# that start during backward pay off.
./trainer --profile configs/resnet20-fashion.ini "$tmp/p50.json" model.name=resnet50 data.kind=synthetic \
    data.synthetic_shape=3x32x32 data.synthetic_train=16 data.synthetic_test=8 train.device=cpu train.batch_size=2 \
    train.threads=1 train.max_steps=2 > /dev/null 2>&1
slow=$($sim "$tmp/p50.json" --workers 2,16 --bw 1 --speed 50 --bucket-mb auto --csv "$tmp/auto.csv" 2>&1)
rc=$?
fast=$($sim "$tmp/p50.json" --workers 2,16 --bw 100 --speed 50 --bucket-mb auto 2>&1)
check "simulate --bucket-mb auto: exit 0, a bucket_mb column and one reason per worker count" \
    test $rc -eq 0 -a "$(grep -c "^bucket_mb = auto, [0-9]* workers: [0-9.]* MiB: predicted step [0-9.]* ms (against 1 MiB" <<<"$slow")" -eq 2 \
    -a "$(head -n 1 "$tmp/auto.csv")" = "workers,step_ms,images_per_s,efficiency,allreduce_ms,exposed_ms,messages,verdict,bucket_mb"
check "simulate --bucket-mb auto: at 16 workers a 1 Gbit/s link gets larger buckets than a 100 Gbit/s one" \
    python3 - "$slow" "$fast" <<'PY'
import re, sys
def chosen(text):
    return float(re.search(r"^bucket_mb = auto, 16 workers: ([0-9.]+) MiB", text, re.M).group(1))
s, f = chosen(sys.argv[1]), chosen(sys.argv[2])
print("1 Gbit/s:", s, "MiB; 100 Gbit/s:", f, "MiB")
assert s > f, (s, f)
PY
out=$($sim "$tmp/p50.json" --bucket-mb auto --horovod 5,64 2>&1)
check "simulate --bucket-mb auto with --horovod: usage error (exit 2)" test $? -eq 2

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
