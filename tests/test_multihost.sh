#!/usr/bin/env bash
# tests/test_multihost.sh - multi-node jobs on a cluster on this machine
# (tools/cluster.sh: 3 hosts as network namespaces on a bridge, links shaped
# with tc, mpirun launching through tools/cluster-rsh over TCP): the
# collectives of dist/ across hosts (build/tests/mpi_ring: our ring against
# MPI_Allreduce, bitwise); 3 hosts train with one rank per node and end with
# bit-identical parameters, every rank's gradients crossing its shaped link,
# through the ring that dist.backend=auto chooses across hosts;
# dist.backend=ring and =mpi give the same losses on 2 hosts (bit for bit)
# and both train on 3; on 2 hosts x 2 ranks auto chooses the hierarchical
# allreduce, which sums bitwise, trains with bit-identical ranks and puts
# 2/3 of the flat ring's bytes on the links (with dist.compress = powersgd
# at most 0.3x its own uncompressed bytes); a checkpoint written by rank 0 on host 0 resumes a
# 3-host run exactly; the links hold their rate; a rank stopped inside a
# blocking MPI_Allreduce on another host is named by the others, which do
# not spin meanwhile, and the run goes on after it; a rank killed mid-run, and a
# host whose link goes down mid-run, end the whole job within a bound with a
# message naming the rank or the host, leaving no process on any host (and,
# without Open MPI's out-of-band keepalive, the stall watchdog still ends the
# ranks that can be reached: what mpirun then does is reported); `down`
# leaves nothing behind.
# Run from the repository root after `make test-build`, as root. Prints
# "SKIPPED: ..." (and exits 0) when not root, without iproute2, MPI or the
# programs, or where network namespaces cannot be made (a container without
# CAP_NET_ADMIN). Its cluster has a name and a subnet of its own, so it cannot
# touch a cluster someone made with tools/cluster.sh, and is removed on every
# exit. Every mpirun runs under `timeout`.
set -u
skip() { echo "SKIPPED: $*"; exit 0; }
source "$(dirname "$0")/support/netns.sh" # need_cluster WHAT, cluster_names LETTERS OCTET
need_cluster "the multi-host tests"
for p in build/tests/mpi_ring build/tools/bench_allreduce; do [ -x $p ] || skip "$p not built (make test-build)"; done

cluster_names ct 78

C=(tools/cluster.sh --prefix "$prefix" --net "$net")
tmp=$(mktemp -d)
hosts_before=$(md5sum < /etc/hosts)
mp=
cleanup() {
    if [ -n "$mp" ]; then pkill -KILL -P "$mp" 2> /dev/null; kill -KILL "$mp" 2> /dev/null; fi
    "${C[@]}" down > /dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
t_start=$(date +%s)

# ms_since T0: milliseconds since T0 (date +%s%N).
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
# The processes on the cluster's hosts, as "host:name" words, or nothing.
procs_on_hosts() {
    local k pids
    for ((k = 0; k < 3; k++)); do
        pids=$(ip netns pids "$prefix-h$k" 2> /dev/null)
        [ -z "$pids" ] || ps -o comm= -p $pids | sed "s/^/h$k:/"
    done | tr '\n' ' '
}
# wait_gone REGEX SECONDS: whether no process on the hosts matches REGEX
# ("hK:name") within SECONDS.
wait_gone() {
    local i
    for ((i = 0; i < $2 * 4; i++)); do
        procs_on_hosts | grep -qE "$1" || return 0
        sleep 0.25
    done
    return 1
}
# wait_no_procs SECONDS: whether the hosts run nothing within SECONDS.
wait_no_procs() { wait_gone . "$1"; }
# wait_for_line FILE REGEX SECONDS: whether FILE gets a line matching REGEX.
wait_for_line() {
    local i
    for ((i = 0; i < $3 * 4; i++)); do
        grep -qE "$2" "$1" 2> /dev/null && return 0
        sleep 0.25
    done
    return 1
}
# The step records "step loss lr" of a metrics.jsonl, one per line.
steps() {
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["kind"] == "step": print(r["step"], r["loss"], r["lr"])' "$1"
}
# Bytes host K sent into its link (rx of the bridge's end) and received (tx).
link_bytes() { cat "/sys/class/net/$prefix-v$1/statistics/rx_bytes" "/sys/class/net/$prefix-v$1/statistics/tx_bytes" | tr '\n' ' '; }

out=$("${C[@]}" up 3 1gbit 2>&1)
rc=$?
check "cluster up: 3 hosts on $net.0/24, links 1gbit (${prefix}-h0..h2)" test $rc -eq 0
if [ $rc -ne 0 ]; then
    echo "$out" | sed 's/^/    /'
    echo "1 check(s) failed"
    exit 1
fi
read -ra MA <<< "$("${C[@]}" mpirun-args)"
M=(timeout -k 5 90 mpirun --allow-run-as-root "${MA[@]}" -x OMP_NUM_THREADS)
small=(configs/resnet20-fashion.ini train.device=cpu data.train_limit=384 data.test_limit=96 train.batch_size=16
       train.max_steps=8 train.log_every=1 train.epochs=1 train.threads=1 data.workers=1 checkpoint.every_steps=4)

# 1. dist/'s collectives between hosts: our ring against MPI_Allreduce,
# bitwise, on values whose sums are exact in any order, over real TCP.
out=$("${M[@]}" -np 3 build/tests/mpi_ring --expect-world 3 2>&1)
rc=$?
check "mpi_ring on 3 hosts: exit 0, ring == MPI_Allreduce bitwise ($(grep -c '^ok ' <<< "$out") checks ok)" \
    grep -q "^mpi_ring: world 3, all checks passed" <<< "$out"
[ $rc -eq 0 ] || grep -E '^FAIL|error' <<< "$out" | head -n 5 | sed 's/^/    /'

# 2. 3 hosts train: one rank per node, bit-identical parameters, and every
# host's link carried at least its share of every step's gradients (an
# allreduce of S bytes over N ranks sends and receives >= (N-1)/N x S per rank).
declare -a before after
for k in 0 1 2; do before[k]=$(link_bytes $k); done
t0=$(date +%s%N)
out=$("${M[@]}" -np 3 ./trainer "${small[@]}" train.out_dir="$tmp/ref" 2>&1)
rc=$?
secs=$(ms_since "$t0")
check "3 hosts, dist.backend=auto: training exits 0 ($((secs / 1000)).$((secs % 1000 / 100)) s)" test $rc -eq 0
check "3 hosts: 'dist: 3 ranks (1 on this node)'" grep -q "^dist: 3 ranks (1 on this node)" <<< "$out"
check "3 hosts: dist.backend=auto chose the ring, saying why" \
    grep -q "allreduced with ring (dist.backend = auto: 3 nodes, one rank each)" <<< "$out"
check "3 hosts: parameters bit-identical on all 3 ranks" grep -q "parameters bit-identical on all 3 ranks" <<< "$out"
for k in 0 1 2; do after[k]=$(link_bytes $k); done
nparam=$(grep -oE '\(([0-9]+) parameters' <<< "$out" | grep -oE '[0-9]+')
need=$((8 * 2 * ${nparam:-0} * 4 / 3))
for k in 0 1 2; do
    read -r rx0 tx0 <<< "${before[k]}"
    read -r rx1 tx1 <<< "${after[k]}"
    check "3 hosts: host $k's link carried its gradients: sent $(((rx1 - rx0) / 1000)) kB, received $(((tx1 - tx0) / 1000)) kB (>= $((need / 1000)) kB each)" \
        test "${nparam:-0}" -gt 0 -a $((rx1 - rx0)) -ge $need -a $((tx1 - tx0)) -ge $need
done
[ $rc -eq 0 ] || tail -n 15 <<< "$out" | sed 's/^/    /'

# 3. Ring and MPI allreduce on the wire between hosts. On 2 hosts the sums
# are a+b either way, so the losses must be equal bit for bit; on 3 hosts
# (a+b)+c and a+(b+c) round differently (the losses drift apart in the 5th
# digit), so there both must train with bit-identical ranks.
for be in mpi ring; do
    "${M[@]}" -np 2 ./trainer "${small[@]}" dist.backend=$be train.out_dir="$tmp/two-$be" > "$tmp/two-$be.log" 2>&1
    check "2 hosts, dist.backend=$be: exits 0 with bit-identical parameters" \
        grep -q "parameters bit-identical on all 2 ranks" "$tmp/two-$be.log"
done
check "2 hosts: ring and MPI allreduce give the same 8 step losses, bit for bit" \
    diff <(steps "$tmp/two-mpi/metrics.jsonl") <(steps "$tmp/two-ring/metrics.jsonl")
check "2 hosts: 8 step records" test "$(steps "$tmp/two-ring/metrics.jsonl" 2> /dev/null | wc -l)" -eq 8
out=$("${M[@]}" -np 3 ./trainer "${small[@]}" dist.backend=mpi train.out_dir="$tmp/mpi3" 2>&1)
check "3 hosts, dist.backend=mpi: exits 0 with bit-identical parameters" \
    grep -q "parameters bit-identical on all 3 ranks" <<< "$out"

# 3b. The hierarchical allreduce (dist.backend = hier), 2 hosts x 2 ranks:
# dist/'s collectives bitwise (2 nodes found), training with bit-identical
# parameters, and only the leaders' traffic on the links: per host about
# the gradients' size each way, where the flat ring over 4 ranks crosses
# each host's link with 1.5 times that (2 x 3/4 of it).
read -ra MS <<< "$("${C[@]}" mpirun-args --shm)" # shared memory within a host, as within a node
M2=(timeout -k 5 90 mpirun --allow-run-as-root "${MS[@]}" -x OMP_NUM_THREADS)
P2=(--oversubscribe --map-by ppr:2:node -np 4)
check "mpirun-args --shm: shared memory between the ranks of a host" grep -q -- "--mca btl tcp,vader,self" <<< "${MS[*]}"
out=$("${M2[@]}" "${P2[@]}" build/tests/mpi_ring --expect-world 4 --expect-nodes 2 2>&1)
check "mpi_ring on 2 hosts x 2 ranks: exit 0, hier finds 2 nodes, sums bitwise ($(grep -c '^ok ' <<< "$out") checks ok)" \
    grep -q "^mpi_ring: world 4, all checks passed" <<< "$out"
# hier_run TAG SETTINGS...: a 2 hosts x 2 ranks run; sets sent_TAG to the bytes the hosts sent into the links
hier_run() {
    local tag=$1 k rx0 tx0 rx1 tx1 sent=0
    shift
    for k in 0 1; do before[k]=$(link_bytes $k); done
    "${M2[@]}" "${P2[@]}" ./trainer "${small[@]}" "$@" train.out_dir="$tmp/hier-$tag" > "$tmp/hier-$tag.log" 2>&1
    for k in 0 1; do
        after[k]=$(link_bytes $k)
        read -r rx0 tx0 <<< "${before[k]}"
        read -r rx1 tx1 <<< "${after[k]}"
        sent=$((sent + rx1 - rx0))
    done
    eval "sent_$tag=$sent"
}
for be in auto ring; do # auto: hier, as the start-up line must say
    hier_run $be dist.backend=$be
    check "2 hosts x 2 ranks, dist.backend=$be: exits 0 with bit-identical parameters" \
        grep -q "parameters bit-identical on all 4 ranks" "$tmp/hier-$be.log"
done
# PowerSGD from the first step (ResNet-20's 1.03 MiB of gradients as 0.05 MiB): the leaders' traffic shrinks
# (the start-up broadcast of the weights and the evaluation stay). No checkpoints in this run: each one
# sums the ranks' errors, an uncompressed allreduce of the compressed tensors' size (1 MiB here)
hier_run psgd dist.backend=hier dist.compress=powersgd dist.powersgd_start=0 checkpoint.every_steps=0 \
    checkpoint.every_epochs=0
check "2 hosts x 2 ranks, hier with PowerSGD: exits 0 with bit-identical parameters" \
    grep -q "parameters bit-identical on all 4 ranks" "$tmp/hier-psgd.log"
check "2 hosts x 2 ranks, hier with PowerSGD: at most 0.3x the bytes of hier uncompressed ($((sent_psgd / 1000)) kB against $((sent_auto / 1000)) kB)" \
    test "$sent_psgd" -gt 0 -a $((sent_psgd * 10)) -le $((sent_auto * 3))
check "2 hosts x 2 ranks: dist.backend=auto chose the hierarchy, saying why" grep -q \
    "^dist: 4 ranks (2 on this node), .*the hierarchical allreduce (2 nodes.*(dist.backend = auto: 2 nodes, several ranks each)" \
    "$tmp/hier-auto.log"
check "2 hosts x 2 ranks: hier sends at most 0.8x the flat ring's bytes into the links ($((sent_auto / 1000)) kB against $((sent_ring / 1000)) kB)" \
    test "$sent_auto" -gt 0 -a $((sent_auto * 10)) -le $((sent_ring * 8))

# 4. A checkpoint written by rank 0 on host 0 (after step 4) resumes a
# 3-host run exactly: the losses and learning rates of the uninterrupted run.
out=$("${M[@]}" -np 3 ./trainer "${small[@]}" train.max_steps=4 train.out_dir="$tmp/ck" 2>&1)
check "resume: the first 3-host run stops after 4 of 8 steps, checkpoint written" \
    grep -q "stopped (train.max_steps = 4 reached 4 of 8 steps into an epoch" <<< "$out"
out=$("${M[@]}" -np 3 ./trainer "${small[@]}" checkpoint.resume=auto train.out_dir="$tmp/ck" 2>&1)
check "resume: the second 3-host run resumes at step 4 (192 samples into epoch 1)" \
    grep -q "resumed from .*ckpt-000000-0000000192.cnt" <<< "$out"
check "resume: parameters bit-identical on all 3 ranks" grep -q "parameters bit-identical on all 3 ranks" <<< "$out"
check "resume: the 8 steps' losses and lrs equal the uninterrupted 3-host run's" \
    diff <(steps "$tmp/ref/metrics.jsonl") <(steps "$tmp/ck/metrics.jsonl")

# 5. The links hold their rate: a 4 MiB ring allreduce over 3 hosts moves at
# most the link's 100 Mbit/s (12.5 MB/s) of bus bandwidth shaped, and many
# times that unshaped. (bench_allreduce's last-but-one column: busbw, GB/s.)
busbw() {
    "${M[@]}" -np 3 build/tools/bench_allreduce --min-bytes 4M --max-bytes 4M --algo ring --warmup 1 \
        --iters-time 0.3 2> /dev/null | awk '$2 == "MiB" && $3 == "ring" {print $(NF-1)}'
}
"${C[@]}" shape 100mbit > /dev/null
shaped=$(busbw)
"${C[@]}" shape none > /dev/null
free=$(busbw)
"${C[@]}" shape 1gbit > /dev/null
check "shaping: ring busbw ${shaped:-?} GB/s at 100mbit (<= 0.0125), ${free:-?} GB/s unshaped (>= 4x)" \
    python3 -c 'import sys; s, f = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (0 < s <= 0.0125 and f >= 4 * s))' \
    "${shaped:-0}" "${free:-0}"

# The MTU of every link and the bridge (tools/cluster.sh mtu), and back;
# out of range refused as a usage error.
"${C[@]}" mtu 9000 > /dev/null
mtus=$(for k in 0 1 2; do ip -n "$prefix-h$k" -o link show dev eth0 | grep -o 'mtu [0-9]*'; ip -o link show dev "$prefix-v$k" | grep -o 'mtu [0-9]*'; done; ip -o link show dev "${prefix}br" | grep -o 'mtu [0-9]*')
"${C[@]}" mtu 1500 > /dev/null
"${C[@]}" mtu 100 > /dev/null 2>&1
rc=$?
check "mtu: 9000 on both ends of every link and on the bridge, then 1500 again; 100 refused (rc=$rc)" \
    test "$(sort -u <<< "$mtus")" = "mtu 9000" -a "$(ip -n "$prefix-h0" -o link show dev eth0 | grep -o 'mtu [0-9]*')" = "mtu 1500" -a $rc -eq 2

# long_run NAME [MPIRUN-ARGS...]: starts a long 3-host run in the background
# (pid in $mp, log in $tmp/NAME.log) and waits for its third step.
long=(configs/resnet20-fashion.ini train.device=cpu data.train_limit=9600 data.test_limit=96 train.batch_size=16
      train.epochs=1 train.log_every=1 train.threads=1 data.workers=1 dist.stall_warn_s=4 dist.stall_abort_s=10)
long_run() {
    local name=$1
    shift
    timeout -k 5 90 mpirun --allow-run-as-root "$@" -x OMP_NUM_THREADS -np 3 ./trainer "${long[@]}" \
        ${long_extra[@]+"${long_extra[@]}"} train.out_dir="$tmp/$name" < /dev/null > "$tmp/$name.log" 2>&1 &
    mp=$!
    wait_for_line "$tmp/$name.log" "step 3/" 60
}

# 6. A rank killed mid-run (kill -9 on host 2) ends the whole job, naming the
# rank and the host, and leaves nothing running on any host.
long_run kill "${MA[@]}"
check "kill: the 3-host run reached step 3" test $? -eq 0
pid=$(ip netns pids "$prefix-h2" | xargs -r ps -o pid=,comm= -p | awk '$2 == "trainer" {print $1}')
t0=$(date +%s%N)
[ -n "$pid" ] && kill -KILL "$pid"
wait "$mp"
rc=$?
mp=
secs=$(($(ms_since "$t0") / 1000))
check "kill: trainer on $prefix-h2 (pid ${pid:-none}) killed; job ends non-zero in ${secs} s (<= 60)" \
    test -n "$pid" -a $rc -ne 0 -a $secs -le 60
check "kill: mpirun names rank 2 and host $prefix-h2" \
    grep -q "rank 2 with PID ${pid:-x} on node $prefix-h2 exited on signal 9" "$tmp/kill.log"
check "kill: no process left on any host within 10 s" wait_no_procs 10
[ -z "$(procs_on_hosts)" ] || echo "    left: $(procs_on_hosts)"

# 6b. A rank stopped (SIGSTOP) inside the blocking MPI_Allreduce on host 2:
# the ranks of hosts 0 and 1 cannot see it in their node's memory, but its
# datagrams stop (dist/beats.c), so their warnings name it, on its host, as
# giving no sign of life; meanwhile the thread inside MPI is throttled (rank
# 0 uses a small share of a core, where Open MPI alone spins a whole one),
# and after SIGCONT the run finishes.
log="$tmp/sigstop.log"
CNT_TEST_STALL_IN="2:inside the call:8" "${M[@]}" -np 3 -x CNT_TEST_STALL_IN ./trainer "${small[@]}" \
    dist.backend=mpi dist.stall_warn_s=1 dist.stall_abort_s=40 train.out_dir="$tmp/sigstop" < /dev/null > "$log" 2>&1 &
mp=$!
pid=$(injected_pid "$log")
r0=$(ip netns pids "$prefix-h0" | xargs -r ps -o pid=,comm= -p | awk '$2 == "trainer" {print $1}')
[ -n "$pid" ] && kill -STOP "$pid"
sleep 3.5
share=$(cpu_percent "${r0:-0}" 2)
[ -n "$pid" ] && kill -CONT "$pid"
wait "$mp"
rc=$?
mp=
check "stopped inside MPI_Allreduce on $prefix-h2: the run finishes after SIGCONT (rc=$rc, pid ${pid:-not found})" \
    test $rc -eq 0 -a -n "$pid"
for r in 0 1; do
    check "stopped inside MPI_Allreduce on $prefix-h2: rank $r names rank 2 on its host as giving no sign of life" \
        grep -qE "^\[rank $r\] warning: stall: rank $r has been inside MPI_Allreduce .*; on [^ ]+ rank 2 has given no sign of life for [0-9]+ s: its process is stopped or gone, or its node cannot be reached" "$log"
done
grep -m1 -oE "^\[rank 0\] warning: stall: .*; on [^ ]+ rank 2 has given no sign of life for [0-9]+ s" "$log" | sed 's/^/    /' ||
    grep -E "stall|STALL" "$log" | head -n 6 | cut -c1-300 | sed 's/^/    /'
check "stopped inside MPI_Allreduce: rank 0 (pid ${r0:-not found}) used ${share}% of a core for 2 s (< 30%)" \
    test -n "$r0" -a "$share" -lt 30

# 7. Host 2's link goes down mid-run. Every rank ends itself or is ended
# within dist.stall_abort_s (10 s) and a few seconds: ranks 0 and 1 by the
# stall watchdog (waiting for rank 2's announcement) or its deadman (inside an
# MPI_Allreduce rank 2 left), rank 2 by its own watchdog. With the cluster's
# mpirun options (Open MPI's out-of-band keepalive) mpirun also notices the
# silent host within seconds and ends the job naming it. Host 2's Open MPI
# daemon cannot hear that: it ends when TCP gives up on its unacknowledged
# messages to mpirun (minutes) or, as checked here, once the link is back.
long_run linkdown "${MA[@]}"
check "link down: the 3-host run reached step 3" test $? -eq 0
t0=$(date +%s%N)
ip link set "$prefix-v2" down
wait "$mp"
rc=$?
mp=
secs=$(($(ms_since "$t0") / 1000))
check "link down: job ends non-zero in ${secs} s (<= dist.stall_abort_s + 20 = 30)" test $rc -ne 0 -a $secs -le 30
check "link down: mpirun names the lost host $prefix-h2" grep -qE "Remote daemon: .* on node $prefix-h2" "$tmp/linkdown.log"
check "link down: no trainer left on any host within dist.stall_abort_s + 10 s of the cut"     wait_gone ':trainer' $((20 - $(ms_since "$t0") / 1000))
left=$(procs_on_hosts)
echo "    after $(($(ms_since "$t0") / 1000)) s with the link down, the hosts run: ${left:-nothing}"
ip link set "$prefix-v2" up
t1=$(date +%s%N)
check "link down: once the link is back, nothing is left on any host within 30 s" wait_no_procs 30
left=$(procs_on_hosts)
echo "    $(($(ms_since "$t1") / 1000)) s after the link came back, the hosts run: ${left:-nothing}"

# 8. The same without the keepalive (Open MPI's defaults: 300 s of silence
# before probing). The watchdog must still end the ranks, and rank 0 say so
# (naming rank 2, or the MPI_Allreduce it was left in) within
# dist.stall_abort_s. mpirun then waits for host 2's daemon to confirm the
# abort, which it cannot while the link is down; once the link is back, it
# must end, non-zero, leaving nothing behind. Through MPI_Allreduce, as named:
# across hosts dist.backend = auto takes the ring, where which of ranks 0 and
# 1 the watchdog finds late depends on where rank 0 waits when the link goes
# (section 7 runs the ring; tests/test_dist_train.sh its bounded waits).
read -ra MA_OFF <<< "$("${C[@]}" mpirun-args --keepalive off)"
long_extra=(dist.backend=mpi)
long_run stall "${MA_OFF[@]}"
long_extra=()
check "stall: the 3-host run reached step 3" test $? -eq 0
t0=$(date +%s%N)
ip link set "$prefix-v2" down
# A rank names rank 2, or the MPI_Allreduce it was left in, or, when it had
# finished that allreduce before the cut (rank 2's part reached it), the
# next collective it waits in (the progress line's): each a stall error.
stall_re="error: stall: (.* for rank 2 |rank [01] has been inside MPI_Allreduce |rank [01] has waited [0-9]+ s in ).*"
check "stall: rank 0 ends the job within dist.stall_abort_s + 10 s, naming rank 2 or the allreduce it left"     wait_for_line "$tmp/stall.log" "^\[rank 0\] $stall_re" 20
check "stall: rank 1 too (or the collective it waits in next)" wait_for_line "$tmp/stall.log" "^\[rank 1\] $stall_re" 5
check "stall: no trainer left on any host within dist.stall_abort_s + 10 s of the cut"     wait_gone ':trainer' $((20 - $(ms_since "$t0") / 1000))
grep -E "^\[rank [01]\] error: stall" "$tmp/stall.log" | sed 's/^/    /'
sleep 2
if kill -0 "$mp" 2> /dev/null; then
    echo "    mpirun still runs $(($(ms_since "$t0") / 1000)) s after the cut, waiting for $prefix-h2's daemon (hosts: $(procs_on_hosts))"
fi
ip link set "$prefix-v2" up
t1=$(date +%s%N)
wait_done=0
for ((i = 0; i < 120; i++)); do
    kill -0 "$mp" 2> /dev/null || { wait_done=1; break; }
    sleep 0.25
done
[ $wait_done -eq 1 ] || pkill -KILL -P "$mp"
wait "$mp" 2> /dev/null
rc=$?
mp=
check "stall: once the link is back, mpirun ends non-zero within 30 s ($(($(ms_since "$t1") / 1000)) s, rc $rc)"     test $wait_done -eq 1 -a $rc -ne 0
check "stall: and nothing is left on any host within 10 s" wait_no_procs 10
[ -z "$(procs_on_hosts)" ] || echo "    left: $(procs_on_hosts)"

# 9. down removes everything: namespaces, links, the bridge, /etc/netns, the
# state; /etc/hosts untouched.
out=$("${C[@]}" down 2>&1)
check "down: exits 0" test $? -eq 0
check "down: no namespace $prefix-h* left" test -z "$(ip netns list | grep "^$prefix-")"
check "down: no link ${prefix}br or $prefix-v* left" test -z "$(ip -o link show | grep -E ": ($prefix-v[0-9]+|${prefix}br)[@:]")"
check "down: no /etc/netns/$prefix-h* and no /run/cnt-cluster/$prefix" \
    test -z "$(ls -d /etc/netns/"$prefix"-h* /run/cnt-cluster/"$prefix" 2> /dev/null)"
check "down: /etc/hosts unchanged" test "$(md5sum < /etc/hosts)" = "$hosts_before"

echo "    ($(($(date +%s) - t_start)) s in all)"
if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all multi-host checks passed"
