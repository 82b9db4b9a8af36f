#!/usr/bin/env bash
# tests/test_files.sh - the files a run writes beside its checkpoints, against
# the rule in docs/faults.md ("Every file a run writes"): an earlier run's file
# is kept, never silently replaced; something that is not a regular file is
# refused, never written through; a file another run is writing stays that
# run's; a run's own files are never its outputs' targets.
#   - the timeline: a killed run's parts are moved aside by the next run (they
#     were truncated), an earlier trace is kept beside the new one (it was
#     replaced); dist.timeline naming metrics.jsonl or a FIFO is refused; a
#     second run sharing one absolute dist.timeline is refused while the
#     first writes its part;
#   - the lock file that is a FIFO, and checkpoint.dir that is a regular
#     file, are refused naming them;
#   - where flock is not supported (forced), the lock is a file with the
#     owner's pid, host and start time: a second run refused, a stale lock
#     of this host taken over, another host's refused, the file removed.
# (metrics.jsonl and config.ini: tests/test_resume.sh; outputs named on the
# command line: tests/test_cli.sh.) Run from the repository root after `make`.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
T=(timeout 120 ./trainer configs/resnet20-fashion.ini train.device=cpu data.train_limit=256 data.test_limit=100
   train.batch_size=16 train.epochs=2 train.log_every=1 train.threads=1 data.workers=1 optim.lr=0.05)

# trace_steps FILE: the steps of rank 0's "X" events in a trace, as "first last count-of-distinct"
trace_steps() {
    python3 - "$1" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
s = sorted({e["args"]["step"] for e in ev if e.get("ph") == "X" and e["pid"] == 0 and e["name"].startswith("fwd")})
print(s[0], s[-1], len(s))
PY
}

# 1. A killed run's part, then a run in the same directory: the part is moved
# aside whole (it used to be truncated), and the new run writes its trace.
d="$tmp/k"
"${T[@]}" train.out_dir="$d" train.epochs=200 dist.timeline=trace.json >"$d.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "step 5/" "$d.log" 2>/dev/null && break; sleep 0.1; done
pkill -KILL -P $pid
wait $pid 2>/dev/null
size=$(stat -c %s "$d/trace.json.rank0.part" 2>/dev/null || echo 0)
check "killed run: its part holds events" test "$size" -gt 1000
out=$("${T[@]}" train.out_dir="$d" train.max_steps=3 dist.timeline=trace.json 2>&1)
rc=$?
check "the next run: exit 0 (rc=$rc), its trace written" grep -q "timeline: $d/trace.json" <<<"$out"
kept=$(ls "$d" | grep -E '^trace\.json\.rank0\.[0-9]{8}-[0-9]{6}\.part$')
check "the next run: the killed run's part kept aside, whole" \
    test -n "$kept" -a "$(stat -c %s "$d/$kept" 2>/dev/null)" = "$size"
check "the next run: says so" grep -q "earlier run.s part .* moved to $d/$kept" <<<"$out"
check "the next run: no part of its own left" test ! -e "$d/trace.json.rank0.part"

# 2. An earlier trace: kept beside the new one (it used to be replaced).
first=$(md5sum <"$d/trace.json")
out=$("${T[@]}" train.out_dir="$d" train.max_steps=2 dist.timeline=trace.json 2>&1)
old=$(ls "$d" | grep -E '^trace\.[0-9]{8}-[0-9]{6}(-[0-9]+)?\.json$' | head -n 1)
check "an earlier trace: kept as trace.<time>.json" test -n "$old" -a "$(md5sum <"$d/$old" 2>/dev/null)" = "$first"
check "an earlier trace: said" grep -q "earlier trace at $d/trace.json moved to $d/$old" <<<"$out"
check "an earlier trace: the new one holds the new run's 2 steps" test "$(trace_steps "$d/trace.json")" = "1 2 2"

# 3. dist.timeline naming one of the run's own files, or a FIFO: refused at
# once, naming the key; nothing of the run's is touched.
sum=$(md5sum <"$d/metrics.jsonl")
out=$("${T[@]}" train.out_dir="$d" train.max_steps=1 dist.timeline=metrics.jsonl 2>&1)
rc=$?
check "dist.timeline = metrics.jsonl: refused (rc=$rc)" test $rc -ne 0
check "dist.timeline = metrics.jsonl: the key named" \
    grep -q "dist.timeline = metrics.jsonl is this run.s metrics.jsonl in train.out_dir" <<<"$out"
check "dist.timeline = metrics.jsonl: metrics.jsonl untouched" test "$(md5sum <"$d/metrics.jsonl")" = "$sum"
mkfifo "$tmp/pipe.json"
out=$("${T[@]}" train.out_dir="$tmp/f" train.max_steps=1 dist.timeline="$tmp/pipe.json" 2>&1)
rc=$?
check "dist.timeline is a FIFO: refused at once (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "dist.timeline is a FIFO: named" grep -q "'$tmp/pipe.json' is a FIFO (named pipe), not a regular file" <<<"$out"

# 4. Two runs (two out_dirs) sharing one absolute dist.timeline: the second
# is refused while the first writes its part (it had taken the part over),
# and the first's trace holds its own 40 steps, its part gone.
shared="$tmp/shared/trace.json"
"${T[@]}" train.out_dir="$tmp/a" train.max_steps=40 train.epochs=3 dist.timeline="$shared" >"$tmp/a.log" 2>&1 &
pa=$!
for _ in $(seq 300); do grep -q "step 3/" "$tmp/a.log" 2>/dev/null && break; sleep 0.1; done
out=$("${T[@]}" train.out_dir="$tmp/b" train.max_steps=6 dist.timeline="$shared" 2>&1)
rb=$?
wait $pa
ra=$?
check "shared dist.timeline: the second run refused while the first writes (rc=$rb)" test $rb -ne 0
check "shared dist.timeline: the key named" \
    grep -q "dist.timeline = $shared: its part .* is being written by another run" <<<"$out"
check "shared dist.timeline: the first run exits 0 ($ra), its trace its own 40 steps" \
    test $ra -eq 0 -a "$(trace_steps "$shared")" = "1 40 40"
check "shared dist.timeline: no part left" bash -c '! ls "$1"/*.part 2>/dev/null | grep -q .' _ "$tmp/shared"

# 5. The lock file that is a FIFO: refused at once, naming it (flock on a
# FIFO would have taken it).
mkdir -p "$tmp/l" && mkfifo "$tmp/l/.lock"
out=$("${T[@]}" train.out_dir="$tmp/l" train.max_steps=1 2>&1)
rc=$?
check "the lock file is a FIFO: refused (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "the lock file is a FIFO: named" grep -q "lock file '$tmp/l/.lock' is a FIFO" <<<"$out"

# 6. Where flock is not supported (forced here: CNT_TEST_NO_FLOCK), the
# lock is the file .lock.run with the owner's pid, host and start time: a
# second run is refused naming the first; a lock left by a process of this
# host that no longer runs is stale (removed, said, taken); another host's
# is refused; the file goes when the run ends. (It had failed outright.)
d="$tmp/nf"
CNT_TEST_NO_FLOCK=1 "${T[@]}" train.out_dir="$d" train.epochs=2000 >"$d.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "step 2/" "$d.log" 2>/dev/null && break; sleep 0.1; done
check "no flock: the run says how it locks" grep -q "lock: flock is not supported on $d's file system .*: the lock \
is the file $d/.lock.run" "$d.log"
out=$(CNT_TEST_NO_FLOCK=1 "${T[@]}" train.out_dir="$d" train.max_steps=1 2>&1)
rc=$?
check "no flock: a second run refused (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "no flock: ... naming the first" grep -q "in use by another run (pid [0-9]* on $(hostname) start [0-9]*; lock \
$d/.lock.run" <<<"$out"
pkill -TERM -P $pid
wait $pid
rc=$?
check "no flock: the first run stops (rc=$rc) and removes its lock file" test $rc -eq 75 -a ! -e "$d/.lock.run"
echo "pid 999999999 on $(hostname) start 1" >"$d/.lock.run"
out=$(CNT_TEST_NO_FLOCK=1 "${T[@]}" train.out_dir="$d" train.max_steps=1 2>&1)
rc=$?
check "no flock: a stale lock of this host is taken over (rc=$rc)" test $rc -eq 0 -a ! -e "$d/.lock.run"
check "no flock: ... and said" grep -q "lock: $d/.lock.run was left by pid 999999999 on $(hostname) start 1, which \
no longer runs on this host: removed" <<<"$out"
echo "pid 1 on another-host start 5" >"$d/.lock.run"
out=$(CNT_TEST_NO_FLOCK=1 "${T[@]}" train.out_dir="$d" train.max_steps=1 2>&1)
rc=$?
check "no flock: another host's lock refused (rc=$rc), naming it" \
    grep -q "in use by another run (pid 1 on another-host start 5" <<<"$out"
check "no flock: another host's lock left as it was" test "$(cat "$d/.lock.run")" = "pid 1 on another-host start 5"
rm -f "$d/.lock.run"
"${T[@]}" train.out_dir="$d" train.max_steps=1 >/dev/null 2>&1
check "with flock (a local file system): no lock file" test ! -e "$d/.lock.run"

# 7. checkpoint.dir that is a regular file: refused, naming it.
mkdir -p "$tmp/c" && echo "not a directory" >"$tmp/c/ckfile"
out=$("${T[@]}" train.out_dir="$tmp/c" train.max_steps=1 checkpoint.dir=ckfile 2>&1)
rc=$?
check "checkpoint.dir is a regular file: refused (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "checkpoint.dir is a regular file: named" grep -q "$tmp/c/ckfile" <<<"$out"
check "checkpoint.dir is a regular file: the file untouched" test "$(cat "$tmp/c/ckfile")" = "not a directory"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all file checks passed"
