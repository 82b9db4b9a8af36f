#!/usr/bin/env bash
# tests/test_ps.sh - parameter servers (dist.mode = ps, dist/ps.h) under a
# real mpirun, on the CPU:
#   - synchronous PS equals allreduce with the same global batch, step for
#     step: 3 ranks (1 server, 2 workers) and 4 ranks (2 servers, 2
#     workers) against 2 allreduce ranks give the same loss at every step
#     and the same final weights, bit for bit (a sum of two gradients has
#     one order);
#   - one worker with one server equals a single process;
#   - with gradient accumulation (train.accumulate = 2) 2 workers + 1 server
#     equal 2 allreduce ranks too, loss for loss and weight for weight;
#   - LARS (optim.name = lars): 2 workers + 2 servers, each server's trust
#     ratios from its shard's whole tensors, equal 2 allreduce ranks, loss
#     for loss and bit for bit, and end elsewhere than SGD;
#   - the timeline holds the workers' round trips per server and the
#     servers' own tracks, on one time axis; the servers' parts go once
#     it is written, and a killed run keeps the server's part;
#     the run record names the mode;
#   - asynchronous: with staleness bound 0 it equals synchronous bit for bit;
#     unbounded, a worker that sleeps (CNT_TEST_STALL) has its next gradient
#     applied several updates late, staleness is recorded per epoch and in
#     the progress lines, and training learns; bound 1 keeps it small;
#   - checkpoint and resume: a PS run stopped at step 3 and resumed ends
#     with the weights of an uninterrupted one (the servers' momentum goes
#     into the checkpoint and back to them);
#   - one worker with three servers (uneven shards) equals it too;
#   - a stop signal to a server (synchronous, asynchronous) stops the job
#     with a checkpoint and exit 75, also when it comes during evaluation
#     (then two steps later), and the job resumes exactly; asynchronous: a
#     worker or the server signalled in start-up or in evaluation stops
#     once with exit 75, and the job resumes to the end;
#   - errors: too few ranks for dist.ps_servers, loss scaling refused (more
#     servers than tensors: tests/test_ps.c); a stalled server is named by
#     the workers, which end the job; a killed server ends the job with
#     mpirun naming its rank; none of these hangs.
# Run from the repository root after `make`.
set -u
if ! command -v mpirun >/dev/null 2>&1 || ! ./trainer --version | grep -q "^mpi: built in"; then
    echo "SKIPPED: no MPI in this build"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
MPI=(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none)
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
small=(train.device=cpu data.train_limit=512 data.test_limit=200 train.batch_size=16 train.epochs=1 train.max_steps=6
       train.log_every=1 train.threads=1 data.workers=1 optim.lr=0.05 checkpoint.every_steps=6)

# losses DIR: every step's loss in metrics.jsonl, one per line
losses() { grep '"kind":"step"' "$1/metrics.jsonl" | grep -o '"loss":[^,]*'; }
# job_pid RANK ROOT: the process of rank RANK (its mpirun environment says which) among the descendants of
# ROOT (the job's timeout), so no other job's trainer on this machine is ever picked
job_pid() {
    local pid="" p q
    for p in $(pgrep -x trainer); do
        q=$p
        while [ -n "$q" ] && [ "$q" -gt 1 ] && [ "$q" != "$2" ]; do q=$(awk '{print $4}' "/proc/$q/stat" 2>/dev/null); done
        [ "$q" = "$2" ] || continue
        if tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then pid=$p; fi
    done
    echo "$pid"
}
# weights DIR OUT: the last checkpoint's weights as safetensors
weights() {
    local last
    last=$(ls "$1/checkpoints" 2>/dev/null | sort | tail -n 1)
    timeout 60 ./trainer --export "$1/checkpoints/$last" "$2" >/dev/null 2>&1
}

"${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${small[@]}" train.out_dir="$tmp/ar" >"$tmp/ar.log" 2>&1
check "allreduce, 2 ranks: exits 0" test $? -eq 0
weights "$tmp/ar" "$tmp/ar.safetensors"
check "allreduce, 2 ranks: 6 step losses" test "$(losses "$tmp/ar" | wc -l)" -eq 6

for np in 3 4; do
    servers=$((np - 2))
    d="$tmp/ps$np"
    # the 4-rank run also writes a timeline (which changes no number)
    tl=()
    [ $np -eq 4 ] && tl=(dist.timeline=trace.json)
    "${MPI[@]}" -np $np ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.ps_servers=$servers \
        "${tl[@]}" train.out_dir="$d" >"$d.log" 2>&1
    rc=$?
    check "ps, $np ranks ($servers server(s), 2 workers): exits 0" test $rc -eq 0
    [ $rc -eq 0 ] || tail -n 15 "$d.log" | sed 's/^/    /'
    check "ps, $np ranks: the start-up line says 2 workers and $servers server(s), lr scaled by the workers" \
        grep -q "dist: 2 workers and $servers parameter server.*lr 0.05 per worker x 2 = 0.1" "$d.log"
    check "ps, $np ranks: every server reports its steps" \
        test "$(grep -c 'parameter server [0-9] of [0-9] (rank [0-9]): 6 updates applying 12 gradients' "$d.log")" -eq $servers
    check "ps, $np ranks: the same loss as allreduce at every step" test "$(losses "$d")" = "$(losses "$tmp/ar")"
    weights "$d" "$d.safetensors"
    check "ps, $np ranks: the same weights as allreduce after 6 steps, bit for bit" \
        cmp -s "$d.safetensors" "$tmp/ar.safetensors"
    check "ps, $np ranks: metrics.jsonl carries the PS traffic" grep -q '"ps_push_mb":' "$d/metrics.jsonl"
    check "ps, $np ranks: the run record says $np ranks, 2 workers, $servers server(s), synchronous" \
        grep -q "^{\"kind\":\"run\".*\"mode\":\"ps-sync\",\"ranks\":$np,\"workers\":2,\"servers\":$servers," "$d/metrics.jsonl"
done
# Gradient accumulation (train.accumulate = 2 micro-batches of 8): the servers get each step's summed
# gradients once, so 2 workers + 1 server equal allreduce at 2 ranks, loss for loss and bit for bit.
acc=("${small[@]}" train.batch_size=8 train.accumulate=2)
"${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${acc[@]}" train.out_dir="$tmp/acc-ar" >"$tmp/acc-ar.log" 2>&1
"${MPI[@]}" -np 3 ./trainer configs/resnet20-fashion.ini "${acc[@]}" dist.mode=ps dist.ps_servers=1 \
    train.out_dir="$tmp/acc-ps" >"$tmp/acc-ps.log" 2>&1
check "accumulate 2, ps 3 ranks: the server applied 6 updates of 12 gradients" \
    grep -q 'parameter server 1 of 1 (rank 2): 6 updates applying 12 gradients' "$tmp/acc-ps.log"
check "accumulate 2: ps and allreduce give the same 6 losses" \
    test "$(losses "$tmp/acc-ps" | wc -l)" -eq 6 -a "$(losses "$tmp/acc-ps")" = "$(losses "$tmp/acc-ar")"
weights "$tmp/acc-ar" "$tmp/acc-ar.safetensors"
weights "$tmp/acc-ps" "$tmp/acc-ps.safetensors"
check "accumulate 2: ps and allreduce leave the same weights, bit for bit" \
    cmp -s "$tmp/acc-ps.safetensors" "$tmp/acc-ar.safetensors"
# LARS: a trust ratio per weight tensor, from the whole tensor: the servers' shards are whole tensors, so
# their updates are allreduce's, bit for bit
lars=("${small[@]}" optim.name=lars optim.lr=2)
"${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${lars[@]}" train.out_dir="$tmp/lars-ar" \
    >"$tmp/lars-ar.log" 2>&1
check "LARS, allreduce 2 ranks: exits 0, the start-up line says LARS" grep -q "^train: .*; LARS (eta 0.001), " \
    "$tmp/lars-ar.log"
"${MPI[@]}" -np 4 ./trainer configs/resnet20-fashion.ini "${lars[@]}" dist.mode=ps dist.ps_servers=2 \
    train.out_dir="$tmp/lars-ps" >"$tmp/lars-ps.log" 2>&1
check "LARS: ps (2 servers) and allreduce give the same 6 losses" \
    test "$(losses "$tmp/lars-ps" | wc -l)" -eq 6 -a "$(losses "$tmp/lars-ps")" = "$(losses "$tmp/lars-ar")"
weights "$tmp/lars-ar" "$tmp/lars-ar.safetensors"
weights "$tmp/lars-ps" "$tmp/lars-ps.safetensors"
check "LARS: ps and allreduce leave the same weights, bit for bit" \
    cmp -s "$tmp/lars-ps.safetensors" "$tmp/lars-ar.safetensors"
check "LARS: other weights than SGD's" bash -c '! cmp -s "$1" "$2"' _ "$tmp/lars-ar.safetensors" "$tmp/ar.safetensors"

# The servers spool their events as they serve, as workers do, and their
# parts go once rank 0 has written the trace (servers had kept everything in
# memory and written nothing until the end).
check "ps timeline: no part left once the trace is written" bash -c '! ls "$1"/*.part 2>/dev/null | grep -q .' _ "$tmp/ps4"
"${MPI[@]}" -np 3 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.timeline=tl.json \
    train.max_steps=0 train.epochs=50 checkpoint.every_steps=0 train.out_dir="$tmp/tlk" >/dev/null 2>&1 &
job=$!
for _ in $(seq 1 100); do grep -q '"step":12,' "$tmp/tlk/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
pkill -KILL -P "$(pgrep -P $job)" 2>/dev/null
wait $job 2>/dev/null
check "ps timeline, killed run: the server's part holds its events of 12 steps" python3 - "$tmp/tlk" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1] + "/tl.json.rank2.part").read().split("\n") if l.strip()]
ev = [json.loads(l) for l in lines[:-1]]  # the last line may be cut short
assert ev[0]["name"] == "process_name" and ev[0]["args"]["name"] == "rank 2 (parameter server 0)", ev[0]
steps = {e["args"]["step"] for e in ev if e["ph"] == "X" and e["name"].startswith("gradient from rank")}
assert {1, 12} <= steps, sorted(steps)
PY

# The timeline: each worker's round trip to each server on that server's track, and every server's
# own process (gradients in, updates, parameters out), on rank 0's time axis.
check "ps timeline: workers' push+pull per server, servers' gradients, updates and answers, on one axis" \
    python3 - "$tmp/ps4/trace.json" <<'PY'
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
names = {(e["pid"], e["args"]["name"]) for e in ev if e["name"] == "process_name"}
assert names == {(0, "rank 0"), (1, "rank 1"), (2, "rank 2 (parameter server 0)"),
                 (3, "rank 3 (parameter server 1)")}, names
c = collections.Counter((e["pid"], e["tid"], " ".join(e["name"].split()[:2])) for e in x)
for w in (0, 1):
    for k in (0, 1):
        assert c[(w, 2 + k, f"push+pull shard")] == 6, (w, k, c)
for s in (2, 3):
    assert c[(s, 0, "update 1")] == 1 and sum(v for (p, t, n), v in c.items() if p == s and t == 0) == 6, c
    assert c[(s, 1, "gradient from")] == 12 and c[(s, 2, "parameters to")] == 12, c
# a server's update of step t comes after the workers' pushes of its shard began and before their pulls
# ended: the median over the steps, within 5 ms (the clocks agree to half the fastest of 8 round trips; a
# busy machine can delay a single event's time stamp by a few ms)
import statistics
for s in (2, 3):
    k = s - 2
    early, late = [], []
    for step in range(1, 7):
        up = [e for e in x if e["pid"] == s and e["tid"] == 0 and e["args"]["step"] == step]
        rt = [e for e in x if e["pid"] in (0, 1) and e["tid"] == 2 + k and e["args"]["step"] == step]
        assert len(up) == 1 and len(rt) == 2, (s, step, up, rt)
        u = up[0]
        early.append(u["ts"] - max(e["ts"] for e in rt))
        late.append(min(e["ts"] + e["dur"] for e in rt) - (u["ts"] + u["dur"]))
    assert statistics.median(early) >= -5000 and statistics.median(late) >= -5000, (s, early, late)
PY

# One worker and one server: a single process's training.
timeout 120 ./trainer configs/resnet20-fashion.ini "${small[@]}" train.out_dir="$tmp/one" >"$tmp/one.log" 2>&1
"${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps train.out_dir="$tmp/ps2" \
    >"$tmp/ps2.log" 2>&1
check "ps, 1 worker + 1 server: exits 0" test $? -eq 0
check "ps, 1 worker + 1 server: the losses of a single process" test "$(losses "$tmp/ps2")" = "$(losses "$tmp/one")"
# Uneven shards: 3 servers share ResNet-20's 65 tensors, one worker.
"${MPI[@]}" -np 4 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.ps_servers=3 \
    train.out_dir="$tmp/ps31" >"$tmp/ps31.log" 2>&1
check "ps, 1 worker + 3 servers: exits 0" test $? -eq 0
check "ps, 1 worker + 3 servers: the losses of a single process" test "$(losses "$tmp/ps31")" = "$(losses "$tmp/one")"

# Checkpoint and resume: 3 steps, then 3 more from the checkpoint, against the 6 straight (ps4).
"${MPI[@]}" -np 4 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.ps_servers=2 \
    train.max_steps=3 checkpoint.every_steps=3 train.out_dir="$tmp/res" >"$tmp/res1.log" 2>&1
check "ps resume: the first 3 steps exit 0 with a checkpoint" test -n "$(ls "$tmp/res/checkpoints" 2>/dev/null)"
"${MPI[@]}" -np 4 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.ps_servers=2 \
    checkpoint.resume=auto train.out_dir="$tmp/res" >"$tmp/res2.log" 2>&1
check "ps resume: the next 3 steps exit 0 and say they resumed" grep -q "resumed from .* 3 steps done" "$tmp/res2.log"
weights "$tmp/res" "$tmp/res.safetensors"
check "ps resume: the weights of the uninterrupted run, bit for bit (momentum restored on the servers)" \
    cmp -s "$tmp/res.safetensors" "$tmp/ps4.safetensors"

# Asynchronous. With staleness bound 0 every worker waits for the others at
# every step: the synchronous mode's losses and weights, bit for bit.
"${MPI[@]}" -np 3 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.ps_sync=false \
    dist.ps_max_staleness=0 train.out_dir="$tmp/as0" >"$tmp/as0.log" 2>&1
check "async, bound 0: exits 0" test $? -eq 0
check "async, bound 0: the start-up line says asynchronous with the bound" \
    grep -q "asynchronously (at most 0 steps ahead of the slowest worker)" "$tmp/as0.log"
# (its progress lines show rank 0's loss, not the workers' mean: asynchronous workers do not meet to average it)
# eval records: without their time
evals() { grep '"kind":"eval"' "$1/metrics.jsonl" | sed 's/"time":[^,]*,//'; }
check "async, bound 0: the synchronous evaluation" test "$(evals "$tmp/as0")" = "$(evals "$tmp/ps3")"
weights "$tmp/as0" "$tmp/as0.safetensors"
check "async, bound 0: the synchronous weights, bit for bit" cmp -s "$tmp/as0.safetensors" "$tmp/ps3.safetensors"
check "async, bound 0: every applied gradient had staleness 0" \
    grep -q '"kind":"staleness".*"max":0,' "$tmp/as0/metrics.jsonl"

# Unbounded, with worker 1 asleep for 3 s at step 4 (test-only fault
# injection): worker 0 goes on alone, so worker 1's next gradient is applied
# several updates late; it still learns (two epochs of 512 samples).
slice=(train.device=cpu data.train_limit=512 data.test_limit=200 train.batch_size=16 train.epochs=2 train.log_every=8
       train.threads=1 data.workers=1 optim.lr=0.05 checkpoint.every_epochs=0)
CNT_TEST_STALL=1:4:3 "${MPI[@]}" -x CNT_TEST_STALL -np 3 ./trainer configs/resnet20-fashion.ini "${slice[@]}" \
    dist.mode=ps dist.ps_sync=false train.out_dir="$tmp/as" >"$tmp/as.log" 2>&1
check "async, unbounded: exits 0" test $? -eq 0
check "async, unbounded: a staleness record per epoch" \
    test "$(grep -c '"kind":"staleness"' "$tmp/as/metrics.jsonl" 2>/dev/null)" -eq 2
check "async, unbounded: the stalled worker's gradient was applied 3 or more updates late" \
    python3 - "$tmp/as/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
st = [r for r in recs if r["kind"] == "staleness"]
assert max(r["max"] for r in st) >= 3, st
assert sum(r["applied"] for r in st) == 2 * 32, st  # every gradient of 2 workers x 16 steps x 2 epochs, counted once
PY
check "async, unbounded: the progress lines show staleness" grep -q "stale [0-9.]* (max [0-9]*)" "$tmp/as.log"
check "async, unbounded: it learns (the last logged loss below the first)" python3 - "$tmp/as/metrics.jsonl" <<'PY'
import json, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"kind":"step"' in x]
assert l[-1] < l[0], l
PY
check "async: after each epoch every worker holds the servers' parameters (the identity check passes)" \
    test "$(grep -c 'parameters bit-identical on all 2 ranks' "$tmp/as.log")" -eq 2
# Bound 1, the same stall: worker 0 waits for worker 1 instead, so staleness stays small.
CNT_TEST_STALL=1:4:3 "${MPI[@]}" -x CNT_TEST_STALL -np 3 ./trainer configs/resnet20-fashion.ini "${slice[@]}" \
    dist.mode=ps dist.ps_sync=false dist.ps_max_staleness=1 train.out_dir="$tmp/as1" >"$tmp/as1.log" 2>&1
check "async, bound 1: exits 0" test $? -eq 0
check "async, bound 1: no gradient applied more than 2 updates late" python3 - "$tmp/as1/metrics.jsonl" <<'PY'
import json, sys
st = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"staleness"' in l]
assert st and max(r["max"] for r in st) <= 2, st
PY
out=$(timeout 60 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.ps_max_staleness=2 2>&1)
check "a staleness bound with synchronous servers: refused, naming both keys" \
    grep -q "dist.ps_max_staleness = 2 bounds asynchronous training: set dist.ps_sync = false" <<<"$out"

# Errors, each a clear message and a non-zero exit, no hang.
out=$("${MPI[@]}" -np 2 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.ps_servers=2 \
      train.out_dir="$tmp/e1" 2>&1)
rc=$?
check "too few ranks: non-zero exit, not a timeout (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "too few ranks: the message names dist.ps_servers and the ranks needed" \
    grep -q "dist.ps_servers = 2 needs at least 3 ranks.*this job has 2" <<<"$out"
out=$(timeout 60 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps train.precision=fp16 2>&1)
check "loss scaling: refused with a message naming dist.mode" grep -q "dist.mode = ps does not do loss scaling" <<<"$out"
# A stop signal to one asynchronous worker: server 0 names the step every
# worker stops after, rank 0 writes the checkpoint, the job exits 75.
"${MPI[@]}" -np 3 ./trainer configs/resnet20-fashion.ini "${slice[@]}" train.epochs=200 dist.mode=ps \
    dist.ps_sync=false checkpoint.every_epochs=1 train.out_dir="$tmp/sig" >"$tmp/sig.log" 2>&1 &
job=$!
for _ in $(seq 1 100); do grep -q '"kind":"step"' "$tmp/sig/metrics.jsonl" 2>/dev/null && break; sleep 0.3; done
victim=$(job_pid 1 "$job")
[ -n "$victim" ] && kill -TERM "$victim"
wait $job
rc=$?
check "SIGTERM to async worker 1: the job exits 75 (rc=$rc)" test $rc -eq 75
check "SIGTERM to async worker 1: rank 0 says so and writes the checkpoint" \
    grep -qE "stopped \(SIGTERM (at step [0-9]*, |during epoch [0-9/]*.s evaluation, ).*checkpoint written" "$tmp/sig.log"
[ $rc -eq 75 ] || tail -n 8 "$tmp/sig.log" | sed 's/^/    /'

# A stop signal to a server (which had ignored it: no stop, no checkpoint,
# no message): the server says so and passes it to the workers with its
# next answer; they stop at one step, rank 0 writes the checkpoint, the job
# exits 75. Synchronous with SIGTERM to the only server (rank 2 of 3);
# asynchronous with SIGUSR1 to the second of two servers (rank 3 of 4),
# which reaches server 0 through a worker's next push. Both jobs at once.
server_stop() { # server_stop NAME NP RANK SIGNAL ARGS...: starts the job, signals RANK, echoes its exit status
    local name=$1 np=$2 rank=$3 sig=$4 job victim
    shift 4
    "${MPI[@]}" -np "$np" ./trainer configs/resnet20-fashion.ini "${slice[@]}" train.epochs=200 dist.mode=ps \
        checkpoint.every_epochs=1 train.out_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 &
    job=$!
    for _ in $(seq 1 100); do grep -q '"kind":"step"' "$tmp/$name/metrics.jsonl" 2>/dev/null && break; sleep 0.3; done
    victim=$(job_pid "$rank" "$job")
    [ -n "$victim" ] && kill "-$sig" "$victim"
    wait $job
    echo $? >"$tmp/$name.rc"
}
server_stop ssync 3 2 TERM &
server_stop sasync 4 3 USR1 dist.ps_servers=2 dist.ps_sync=false &
wait
for c in "ssync SIGTERM sync 1 2" "sasync SIGUSR1 async 2 3"; do
    read -r name sig mode k rank <<<"$c"
    rc=$(cat "$tmp/$name.rc")
    check "$sig to $mode server $k: the job exits 75 (rc=$rc)" test "$rc" -eq 75
    check "$sig to $mode server $k: it says so, naming its rank" \
        grep -q "parameter server $k of $k (rank $rank): $sig: the workers stop after their next step" "$tmp/$name.log"
    check "$sig to $mode server $k: rank 0 stops on it and writes the checkpoint" \
        grep -q "stopped ($sig at step [0-9]*, .*checkpoint written" "$tmp/$name.log"
    [ "$rc" -eq 75 ] || tail -n 8 "$tmp/$name.log" | sed 's/^/    /'
done
# The memory check gives co-located servers their own small share, not a
# worker's (it had divided the node by every rank, servers included).
check "memory check: 2 workers beside 1 server on this node, each worker half the rest" \
    grep -q "memory: about .* for 2 workers beside 1 parameter server of [0-9.]* GiB" "$tmp/ssync.log"

# SIGTERM to the (synchronous) server while the workers evaluate (rank 0
# sleeps on entering epoch 1's evaluation): the server passes it on with
# its answer to step 17 and the workers agree on it a step later, so they
# stop after step 18 with one checkpoint there, exit 75; the resumed job
# gives the uninterrupted job's losses.
ev=("${slice[@]}" train.log_every=1 checkpoint.every_epochs=1)
"${MPI[@]}" -np 3 ./trainer configs/resnet20-fashion.ini "${ev[@]}" dist.mode=ps train.out_dir="$tmp/evref" \
    >/dev/null 2>&1
CNT_TEST_STALL_IN=0:evaluation:3 "${MPI[@]}" -x CNT_TEST_STALL_IN -np 3 ./trainer configs/resnet20-fashion.ini \
    "${ev[@]}" dist.mode=ps train.out_dir="$tmp/ev" >"$tmp/ev.log" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q "CNT_TEST_STALL_IN: sleeping" "$tmp/ev.log" 2>/dev/null && break; sleep 0.1; done
victim=$(job_pid 2 "$job")
[ -n "$victim" ] && kill -TERM "$victim"
wait $job
rc=$?
check "SIGTERM to the server during evaluation: exit 75 (rc=$rc)" test $rc -eq 75
check "SIGTERM to the server during evaluation: the workers stop after step 18, with its checkpoint" \
    grep -q "stopped (SIGTERM at step 18, 2 of 16 steps into epoch 2/2; checkpoint written" "$tmp/ev.log"
"${MPI[@]}" -np 3 ./trainer configs/resnet20-fashion.ini "${ev[@]}" dist.mode=ps checkpoint.resume=auto \
    train.out_dir="$tmp/ev" >>"$tmp/ev.log" 2>&1
check "SIGTERM to the server during evaluation: the resumed job's losses are the uninterrupted job's" \
    test -n "$(losses "$tmp/evref")" -a "$(losses "$tmp/ev")" = "$(losses "$tmp/evref")"

# Every role in the phases a signal can catch it in (training: above): a
# worker or the server, synchronous and asynchronous, signalled while a rank
# sleeps in start-up, in evaluation, or (rank 0, the writer) inside a
# checkpoint write (CNT_TEST_STALL_IN). Each job exits 75 with one stop
# line: a worker in start-up before step 1 with nothing to save; otherwise
# at a step, with its checkpoint. The resumed job finishes with each step
# once in metrics.jsonl; synchronous ones with the uninterrupted job's
# losses (asynchronous updates differ run to run).
ps_stop() { # ps_stop NAME SYNC STALL_RANK PHASE SIGNAL_RANK: echoes the job's and the resume's exit status
    local name=$1 job victim rc
    CNT_TEST_STALL_IN="$3:$4:4" "${MPI[@]}" -x CNT_TEST_STALL_IN -np 3 ./trainer configs/resnet20-fashion.ini \
        "${ev[@]}" dist.mode=ps dist.ps_sync="$2" train.out_dir="$tmp/$name" >"$tmp/$name.log" 2>&1 &
    job=$!
    for _ in $(seq 300); do grep -q "CNT_TEST_STALL_IN: sleeping" "$tmp/$name.log" 2>/dev/null && break; sleep 0.1; done
    victim=$(job_pid "$5" "$job")
    [ -n "$victim" ] && kill -TERM "$victim"
    wait $job
    rc=$?
    "${MPI[@]}" -np 3 ./trainer configs/resnet20-fashion.ini "${ev[@]}" dist.mode=ps dist.ps_sync="$2" \
        checkpoint.resume=auto train.out_dir="$tmp/$name" >"$tmp/$name.resumed.log" 2>&1
    echo "$rc $?" >"$tmp/$name.rc"
}
# (each job mostly sleeps at its fault point: four at once)
ps_stop aws false 1 start-up 1 &
ps_stop ass false 2 start-up 2 &
ps_stop sws true 1 start-up 1 &
ps_stop sss true 2 start-up 2 &
wait
ps_stop awe false 0 evaluation 1 &
ps_stop ase false 0 evaluation 2 &
ps_stop swe true 0 evaluation 1 &
wait
ps_stop awc false 0 "checkpoint write" 1 &
ps_stop asc false 0 "checkpoint write" 2 &
ps_stop swc true 0 "checkpoint write" 1 &
ps_stop ssc true 0 "checkpoint write" 2 &
wait
for c in "aws async worker start-up" "ass async server start-up" "awe async worker evaluation" \
         "ase async server evaluation" "awc async worker checkpoint_write" "asc async server checkpoint_write" \
         "sws sync worker start-up" "sss sync server start-up" "swe sync worker evaluation" \
         "swc sync worker checkpoint_write" "ssc sync server checkpoint_write"; do
    read -r name mode role phase <<<"$c"
    read -r rc rrc <"$tmp/$name.rc"
    what="$mode: SIGTERM to the $role in ${phase//_/ }"
    check "$what: exit 75 (rc=$rc)" test "$rc" -eq 75
    check "$what: signalled while the rank slept there" \
        grep -q "CNT_TEST_STALL_IN: sleeping 4 s on entering '${phase//_/ }" "$tmp/$name.log"
    if [ "$name" = aws ] || [ "$name" = sws ]; then
        check "$what: stopped before step 1, nothing to save" \
            grep -q "stopped (SIGTERM during start-up, before step 1; nothing trained" "$tmp/$name.log"
    else
        check "$what: stopped at a step with its checkpoint" \
            grep -qE "stopped \(SIGTERM at step [0-9]+, .*checkpoint written" "$tmp/$name.log"
    fi
    check "$what: one stop line" test "$(grep -c "^stopped (SIGTERM" "$tmp/$name.log")" -eq 1
    [ "$rc" -eq 75 ] || tail -n 8 "$tmp/$name.log" | sed 's/^/    /'
    check "$what: the resumed job finishes (rc=$rrc), each of the 32 steps once in metrics.jsonl" \
        test "$rrc" -eq 0 -a "$(grep '"kind":"step"' "$tmp/$name/metrics.jsonl" | grep -o '"step":[0-9]*' |
                                 cut -d: -f2 | paste -sd' ')" = "$(seq -s' ' 1 32)"
    if [ "$mode" = sync ]; then
        check "$what: the resumed job's losses are the uninterrupted job's" \
            test -n "$(losses "$tmp/evref")" -a "$(losses "$tmp/$name")" = "$(losses "$tmp/evref")"
    fi
done
# Where the synchronous workers stop: the server's signal goes with its
# answer to step 17, agreed a step later (as in evaluation above).
check "sync: SIGTERM to the server in a checkpoint write: the workers stop after step 18" \
    grep -q "stopped (SIGTERM at step 18, .*checkpoint written" "$tmp/ssc.log"

# A server that stalls: the workers name it after dist.stall_abort_s and end the job.
out=$(CNT_TEST_STALL_IN="2:parameter server:60" "${MPI[@]}" -x CNT_TEST_STALL_IN -np 3 ./trainer \
      configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps dist.stall_warn_s=1 dist.stall_abort_s=4 \
      train.out_dir="$tmp/st" 2>&1)
rc=$?
check "stalled server: non-zero exit, not a timeout (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "stalled server: a worker names rank 2" grep -qE "stall: rank [01] has waited .* from rank\(s\) 2" <<<"$out"

# A killed server: mpirun ends the job and names the rank.
"${MPI[@]}" -np 3 ./trainer configs/resnet20-fashion.ini "${small[@]}" dist.mode=ps train.max_steps=0 \
    train.epochs=50 checkpoint.every_steps=0 train.out_dir="$tmp/kill" >"$tmp/kill.log" 2>&1 &
job=$!
for _ in $(seq 1 100); do grep -q '"kind":"step"' "$tmp/kill/metrics.jsonl" 2>/dev/null && break; sleep 0.3; done
victim=$(job_pid 2 "$job")
check "killed server: found the server's process" test -n "$victim"
[ -n "$victim" ] && kill -9 "$victim"
t0=$(date +%s)
wait $job
rc=$?
secs=$(($(date +%s) - t0))
check "killed server: the job ends non-zero within 30 s (rc=$rc, ${secs}s)" test $rc -ne 0 -a $rc -ne 124 -a $secs -le 30
check "killed server: the output names rank 2" grep -qiE "rank 2|process rank 2" "$tmp/kill.log"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all parameter-server checks passed"
