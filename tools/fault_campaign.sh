#!/usr/bin/env bash
# tools/fault_campaign.sh - a fault campaign on the cluster on this machine
# (tools/cluster.sh: 3 hosts, 1 Gbit/s links): rounds of a small training job
# (ResNet-20 on Fashion-MNIST, 3 ranks, one per host, checkpoint.every_steps
# = 4) hit at a random moment by one fault on one rank, each job then resumed
# with checkpoint.resume = auto until it has done all its steps, and checked:
#
#   kill9     kill -9 of the rank's process
#   stop      SIGSTOP of the rank (never continued: the others must end it)
#   linkcut   the rank's host loses its link (back once the job has ended)
#   term      SIGTERM to the rank (a preemption: one checkpoint, exit 75)
#
# Roles: rank 0 (writes checkpoints and metrics), rank 1 (a worker), rank 2
# (a worker, or the parameter server with dist.mode = ps); the rounds go
# through every fault x role x mode (allreduce, ps) in turn.
#
# Each round checks: the job ends within its bound (term: exit 75 within
# 15 s; the others: non-zero within dist.stall_abort_s + 25 s); nothing is
# left running on any host 30 s later; every checkpoint it left loads
# (--export); the resume starts at most checkpoint.every_steps steps before
# the last step the job logged (term: at it); and once resumed to the end,
# metrics.jsonl holds each step once with the losses of an uninterrupted run
# of the same mode, bit for bit. Prints one Markdown table row per round and
# a summary; exits 1 when any check failed.
#
#   tools/fault_campaign.sh [--rounds N] [--seed S] [--out FILE]
#
# Needs root, network namespaces and a build with MPI (`make`); about 25 s
# a round. The table in docs/faults.md comes from it.
set -u
rounds=24
seed=$RANDOM
out=
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fault_campaign.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $rounds =~ ^[0-9]+$ && $rounds -ge 1 ]] || { echo "fault_campaign.sh: --rounds N, N >= 1" >&2; exit 2; }
cd "$(dirname "$0")/.."
skip() { echo "fault_campaign.sh: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
./trainer --version | grep -q "^mpi: built in" || skip "needs a build with MPI"
prefix=cntfc
net=10.79.31
C=(tools/cluster.sh --prefix "$prefix" --net "$net")
tmp=$(mktemp -d)
mp=
cleanup() {
    [ -n "$mp" ] && kill -KILL "$mp" 2>/dev/null
    for k in 0 1 2; do ip link set "$prefix-v$k" up 2>/dev/null; done
    "${C[@]}" down >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
"${C[@]}" up 3 1gbit >/dev/null || skip "the cluster did not come up (tools/cluster.sh up 3)"
read -ra MA <<<"$("${C[@]}" mpirun-args)"
export OMP_NUM_THREADS=1
RANDOM=$seed
abort_s=8
every=4
job=(configs/resnet20-fashion.ini train.device=cpu data.train_limit=768 data.test_limit=96 train.batch_size=16
     train.epochs=3 train.log_every=1 train.threads=1 data.workers=1 optim.lr=0.05 checkpoint.every_steps=$every
     dist.stall_warn_s=2 dist.stall_abort_s=$abort_s)

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
procs_on_hosts() {
    local k pids
    for k in 0 1 2; do
        pids=$(ip netns pids "$prefix-h$k" 2>/dev/null)
        [ -z "$pids" ] || ps -o comm= -p $pids | sed "s/^/h$k:/"
    done | tr '\n' ' ' | sed 's/ *$//'
}
# rank_pid K: the trainer on host K (rank K: one slot a host)
rank_pid() { ip netns pids "$prefix-h$1" 2>/dev/null | xargs -r ps -o pid=,comm= -p | awk '$2 == "trainer" {print $1}'; }
steps() {
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["kind"] == "step": print(r["step"], r["loss"], r["lr"])' "$1" 2>/dev/null
}
last_step() { steps "$1" | tail -n 1 | cut -d' ' -f1; }
mode_args() { [ "$1" = ps ] && echo "dist.mode=ps" || echo "dist.backend=ring"; }
run_job() { # run_job DIR MODE [EXTRA...]: in the background, $mp its mpirun
    local d=$1 mode=$2
    shift 2
    timeout -k 5 120 mpirun --allow-run-as-root "${MA[@]}" -x OMP_NUM_THREADS -np 3 ./trainer "${job[@]}" \
        $(mode_args "$mode") train.out_dir="$d" "$@" </dev/null >>"$d.log" 2>&1 &
    mp=$!
}

# The references: each mode uninterrupted.
declare -A ref_steps
for mode in allreduce ps; do
    run_job "$tmp/ref-$mode" "$mode"
    wait "$mp"
    rc=$?
    mp=
    steps "$tmp/ref-$mode/metrics.jsonl" >"$tmp/ref-$mode.steps"
    n=$(wc -l <"$tmp/ref-$mode.steps")
    [ $rc -eq 0 ] && [ "$n" -gt 0 ] || { echo "fault_campaign.sh: the $mode reference run failed (exit $rc)" >&2; exit 1; }
    ref_steps[$mode]=$n
done

faults=(kill9 stop linkcut term)
failed=0
rows=()
header="| round | mode | fault | rank (role) | at step | exit | ended after | left running | checkpoints load | resumed from | steps lost | resumes | each step once, losses as uninterrupted |"
rule="|---|---|---|---|---|---|---|---|---|---|---|---|---|"
echo "$header"
echo "$rule"
for ((r = 1; r <= rounds; r++)); do
    fault=${faults[$(((r - 1) % 4))]}
    rank=$((((r - 1) / 4) % 3))
    mode=$([ $((((r - 1) / 12) % 2)) -eq 0 ] && echo allreduce || echo ps)
    role=$([ $rank -eq 0 ] && echo "writer" || { [ "$mode" = ps ] && [ $rank -eq 2 ] && echo server || echo worker; })
    d="$tmp/r$r"
    : >"$d.log"
    run_job "$d" "$mode"
    # a random moment: after the job's first step, 0 to 3 s
    for _ in $(seq 600); do [ -n "$(last_step "$d/metrics.jsonl")" ] && break; sleep 0.1; done
    sleep "$((RANDOM % 30 / 10)).$((RANDOM % 10))"
    at=$(last_step "$d/metrics.jsonl")
    pid=$(rank_pid $rank)
    t0=$(date +%s%N)
    case $fault in
    kill9) [ -n "$pid" ] && kill -KILL "$pid" ;;
    stop) [ -n "$pid" ] && kill -STOP "$pid" ;;
    term) [ -n "$pid" ] && kill -TERM "$pid" ;;
    linkcut) ip link set "$prefix-v$rank" down ;;
    esac
    wait "$mp"
    rc=$?
    mp=
    secs=$(($(ms_since "$t0") / 1000))
    ip link set "$prefix-v$rank" up 2>/dev/null
    logged=$(last_step "$d/metrics.jsonl")
    left=
    for _ in $(seq 120); do
        left=$(procs_on_hosts)
        [ -z "$left" ] && break
        sleep 0.25
    done
    ok=1
    if [ "$fault" = term ]; then
        [ "$rc" -eq 75 ] && [ $secs -le 15 ] || ok=0
    else
        [ "$rc" -ne 0 ] && [ $secs -le $((abort_s + 25)) ] || ok=0
    fi
    if [ -n "$left" ]; then # ended here, so the next round starts clean
        ok=0
        for k in 0 1 2; do ip netns pids "$prefix-h$k" 2>/dev/null | xargs -r kill -KILL 2>/dev/null; done
    fi
    loads=0 total=0
    for ck in "$d"/checkpoints/ckpt-*.cnt; do
        [ -e "$ck" ] || continue
        total=$((total + 1))
        timeout 60 ./trainer --export "$ck" "$tmp/x.safetensors" >/dev/null 2>&1 && loads=$((loads + 1))
    done
    [ $loads -eq $total ] || ok=0
    # resume until done (at most 3 tries)
    from= tries=0
    while [ $tries -lt 3 ]; do
        tries=$((tries + 1))
        run_job "$d" "$mode" checkpoint.resume=auto
        wait "$mp"
        rrc=$?
        mp=
        [ -z "$from" ] && from=$(grep -o 'and [0-9]* steps done' "$d.log" | tail -n 1 | tr -dc 0-9)
        [ $rrc -eq 0 ] && break
    done
    from=${from:-0}
    lost=$((${logged:-0} - from))
    limit=$([ "$fault" = term ] && echo 0 || echo $every)
    [ $rrc -eq 0 ] && [ $lost -le $limit ] || ok=0
    same=no
    got=$(steps "$d/metrics.jsonl" | awk '{print $1}' | tr '\n' ' ')
    want=$(seq 1 "${ref_steps[$mode]}" | tr '\n' ' ')
    [ "$got" = "$want" ] && diff -q "$tmp/ref-$mode.steps" <(steps "$d/metrics.jsonl") >/dev/null && same=yes
    [ $same = yes ] || ok=0
    [ $ok -eq 1 ] || failed=$((failed + 1))
    row="| $r | $mode | $fault | $rank ($role) | ${at:-0} | $rc | $secs s | ${left:-nothing} | $loads of $total | step $from | $lost | $tries | $same |"
    echo "$row$([ $ok -eq 1 ] || echo ' FAILED')"
    rows+=("$row")
done
summary="$rounds rounds (seed $seed), $failed failed"
echo "$summary"
if [ -n "$out" ]; then
    { echo "$header"; echo "$rule"; printf '%s\n' "${rows[@]}"; echo; echo "$summary"; } >"$out"
fi
[ $failed -eq 0 ]
