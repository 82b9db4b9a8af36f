#!/usr/bin/env bash
# tests/test_slurm.sh - the README's Slurm batch script, run by a real Slurm
# on this machine: a controller and a node daemon of Debian's slurm-wlm (one
# node, its CPUs), authenticated by a munged of its own, all in a temporary
# directory on ports of their own.
#   - srun --mpi=pmix starts 2 ranks that train (PMIx reaches MPI);
#   - the README's script (between <!-- slurm-script:begin/end -->), scaled
#     to one node of 2 CPU tasks and a small ResNet-20 run, is submitted with
#     sbatch; a USR1 to the job's steps (what --signal=USR1@300 sends) stops
#     the ranks with exit 75, the script requeues the job, and the requeued
#     job resumes from the checkpoint and finishes: one log with both runs
#     (--open-mode=append), the job COMPLETED after one restart, metrics.jsonl
#     with each step once and the losses of an uninterrupted srun run;
#   - docs/multi-node.md's mpirun script, scaled the same way: the USR1 sent
#     to the batch shell alone (what --signal=B:USR1 does) is passed to
#     mpirun by the script's trap and to the ranks by mpirun; mpirun exits
#     75, the job requeues, resumes and finishes with the same losses;
#   - both scripts again on two nodes: node daemons on two hosts of
#     tools/cluster.sh (network namespaces), one rank on each, the same
#     preemption, requeue and exact resume (skipped without namespaces).
# Prints "SKIPPED: ..." (exit 0) without root, Slurm, munge or MPI, or when
# the daemons do not come up. Run from the repository root after `make`.
set -u
skip() { echo "SKIPPED: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "not root (the Slurm daemons run as root here)"
for p in slurmctld slurmd munged sbatch srun scontrol scancel sinfo; do
    command -v $p >/dev/null 2>&1 || skip "no $p (make deps installs slurm-wlm and munge)"
done
./trainer --version | grep -q "^mpi: built in" || skip "no MPI in this build"
[ -r /etc/munge/munge.key ] || skip "no /etc/munge/munge.key (the munge package makes it)"
tmp=$(mktemp -d)
chmod 755 "$tmp"
port=$((20000 + RANDOM % 20000))
host=$(hostname -s)
# The two-node part's cluster of namespaces (tools/cluster.sh), on a /24 of its own.
cprefix=cslm$((RANDOM % 1000))
cnet=10.$((100 + RANDOM % 100)).$((RANDOM % 250))
cluster=(tools/cluster.sh --prefix "$cprefix" --net "$cnet")
cluster_up=
cgroup_bound=
cleanup() {
    [ -n "${SLURM_CONF:-}" ] && scancel --quiet --full --signal=KILL -u root >/dev/null 2>&1
    local pids=("$tmp"/slurmd*.pid "$tmp"/slurmctld.pid "$tmp"/munged.pid) f
    for f in "${pids[@]}"; do [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    sleep 0.5
    for f in "${pids[@]}"; do [ -s "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
    [ -n "$cluster_up" ] && "${cluster[@]}" down >/dev/null 2>&1
    [ -n "$cgroup_bound" ] && umount -R "$tmp/cgroup" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...

# munged of our own (its socket in $tmp), the key the package made
mkdir -p "$tmp/munge"
chown munge:munge "$tmp/munge" 2>/dev/null
/usr/sbin/munged --force --socket="$tmp/munge/socket" --pid-file="$tmp/munged.pid" \
    --log-file="$tmp/munge/log" --seed-file="$tmp/munge/seed" --key-file=/etc/munge/munge.key >/dev/null 2>&1 ||
    skip "munged did not start"
mkdir -p "$tmp/state" "$tmp/spool"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=cnttest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldPort=$port
SlurmdPort=$((port + 1))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
NodeName=$host CPUs=$(getconf _NPROCESSORS_ONLN) RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$tmp/slurm.conf"
slurmctld -f "$SLURM_CONF" >/dev/null 2>&1 || skip "slurmctld did not start"
slurmd -f "$SLURM_CONF" >/dev/null 2>&1 || skip "slurmd did not start"
up=0
for _ in $(seq 60); do
    sinfo -h -o %t 2>/dev/null | grep -qx idle && { up=1; break; }
    sleep 0.5
done
[ $up -eq 1 ] || skip "the Slurm node did not become idle in 30 s ($(tail -n 2 "$tmp/slurmctld.log" 2>/dev/null | tr '\n' ' '))"

small=(configs/resnet20-fashion.ini train.device=cpu data.train_limit=512 data.test_limit=64 train.batch_size=16
       train.epochs=3 train.log_every=1 data.workers=1 optim.lr=0.05 checkpoint.every_steps=4)
steps() {
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["kind"] == "step": print(r["step"], r["loss"], r["lr"])' "$1" 2>/dev/null
}

# 1. srun --mpi=pmix: two ranks that know each other; the reference run.
out=$(timeout 120 srun --mpi=pmix -n 2 --cpus-per-task=1 ./trainer "${small[@]}" train.threads=1 \
      train.out_dir="$tmp/ref" 2>&1)
rc=$?
check "srun --mpi=pmix -n 2: trains (rc=$rc)" test $rc -eq 0
check "srun --mpi=pmix -n 2: the ranks form one job" grep -q "^dist: 2 ranks (2 on this node)" <<<"$out"
steps "$tmp/ref/metrics.jsonl" >"$tmp/ref.steps"

# 2. The README's script, scaled: one node of 2 tasks of 1 CPU, no GPUs, no
# NCCL interface; the small run instead of ResNet-101 on ImageNet (with the
# checkpoint.resume = auto the ImageNet configs hold); the job named, its
# output in $tmp. Everything else as printed. Slurm holds a requeued job
# for about two minutes; the test lets it start at once.
script=$(sed -n '/<!-- slurm-script:begin -->/,/<!-- slurm-script:end -->/p' README.md | sed '1,2d;$d' | sed '$d')
check "the README holds the Slurm script" grep -q "^srun --mpi=pmix ./trainer" <<<"$script"
# scale SCRIPT NODES TASKS NAME: SCRIPT on NODES nodes of TASKS tasks of one
# CPU, named NAME, its log in $tmp and its run in $tmp/NAME.
scale() {
    local as_printed="--nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --cpus-per-task=8"
    sed -e "s/$as_printed/--nodes=$2 --ntasks-per-node=$3 --cpus-per-task=1/" \
        -e "s|--output=%x-%j.out|--output=$tmp/%x-%j.out --job-name=$4|" \
        -e 's| -x NCCL_SOCKET_IFNAME=eth0||; s| NCCL_SOCKET_IFNAME=eth0||' \
        -e "s|configs/resnet101.ini data.root=/data/imagenet|${small[*]} checkpoint.resume=auto|" \
        -e "s|train.out_dir=/shared/runs/r101|train.out_dir=$tmp/$4|" <<<"$1"
}
scaled=$(scale "$script" 1 2 job)
check "the scaled script keeps the README's srun, requeue and append lines" \
    test "$(grep -c -e '^srun --mpi=pmix' -e 'scontrol requeue "$SLURM_JOB_ID"' -e '--open-mode=append' \
            -e 'SRUN_CPUS_PER_TASK' <<<"$scaled")" -eq 4
echo "$scaled" >"$tmp/job.sh"
# submit SCRIPT NAME SCANCEL-OPTION: sbatch the script (from the repository
# root, as a user would), wait for step 6 in its log, send USR1 as Slurm does
# at --signal's time (SCANCEL-OPTION --batch: to the batch shell alone, what
# B: does), help the requeued job start at once, and check how it ended.
submit() {
    local file=$1 name=$2 opt=$3 job log state= restarts= nudged= pending_since=
    job=$(sbatch --parsable "$file" 2>&1)
    check "$name: sbatch accepts it (job ${job})" test -n "$job" -a -z "${job//[0-9]/}"
    local jname
    jname=$(sed -n 's/.*--job-name=\([^ ]*\).*/\1/p' "$file")
    log=$(sed -n 's/^#SBATCH .*--output=\([^ ]*\).*/\1/p' "$file" | sed "s/%x/$jname/; s/%j/$job/")
    for _ in $(seq 600); do grep -q "step 6/" "$log" 2>/dev/null && break; sleep 0.1; done
    scancel $opt --signal=USR1 "$job" 2>/dev/null
    for _ in $(seq 360); do
        state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        restarts=$(scontrol show job "$job" 2>/dev/null | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
        [ "$state" = COMPLETED ] || [ "$state" = FAILED ] || [ "$state" = CANCELLED ] && break
        [ ! -e "$log" ] && [ "$state" = PENDING ] && [ $SECONDS -gt 60 ] && break # never started: say so, do not wait
        # started again in the second its first run's credential was revoked, a node refuses it ("Job
        # credential revoked"): nudge it only after 2 s of waiting
        if [ "$state" = PENDING ] && [ "${restarts:-0}" -eq 1 ] && [ -z "$nudged" ]; then
            [ -n "$pending_since" ] || pending_since=$SECONDS
            [ $((SECONDS - pending_since)) -ge 2 ] && scontrol update JobId="$job" StartTime=now >/dev/null 2>&1 &&
                nudged=1
        fi
        sleep 0.5
    done
    check "$name: the job COMPLETED after one restart (state $state, restarts ${restarts:-?})" \
        test "$state" = COMPLETED -a "${restarts:-0}" -eq 1
    check "$name: the first run stopped by SIGUSR1 with a checkpoint" \
        grep -q "stopped (SIGUSR1 at step [0-9]*, .*checkpoint written" "$log"
    if [ "$state" != COMPLETED ]; then
        tail -n 20 "$log" 2>/dev/null | sed 's/^/    /'
        grep -h "error" "$tmp"/slurmd*.log "$tmp"/slurmctld.log 2>/dev/null | grep -v "configuration differs" |
            tail -n 8 | sed 's/^/    /'
    fi
    submitted_log=$log
}
# resumed NAME RUN: the requeued run of submit's job went on from the
# checkpoint in $tmp/RUN, in the same log, and the job's metrics hold each
# step once with the losses of the uninterrupted reference run.
resumed() {
    check "$1: the requeued run resumed from that checkpoint, in the same log (--open-mode=append)" \
        grep -q "resumed from $tmp/$2/checkpoints/ckpt-" "$submitted_log"
    check "$1: the requeued run finished" grep -q "^finished: 48 steps" "$submitted_log"
    steps "$tmp/$2/metrics.jsonl" >"$tmp/$2.steps"
    check "$1: each of the 48 steps once, the uninterrupted run's losses" \
        bash -c '[ "$(wc -l <"$1")" -eq 48 ] && diff -q "$1" "$2" >/dev/null' _ "$tmp/ref.steps" "$tmp/$2.steps" ||
        diff "$tmp/ref.steps" "$tmp/$2.steps" | head -n 6 | sed 's/^/    /'
}
submit "$tmp/job.sh" "srun script" ""
resumed "srun script" job

# 3. docs/multi-node.md's mpirun script, scaled the same way. The signal goes
# to the batch shell alone (scancel --batch, as --signal=B:USR1 does); the
# script passes it to mpirun, mpirun to the ranks, mpirun exits 75, requeue.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # the test runs as root; sbatch exports these
mscript=$(sed -n '/<!-- slurm-mpirun-script:begin -->/,/<!-- slurm-mpirun-script:end -->/p' docs/multi-node.md |
          sed '1,2d;$d' | sed '$d')
check "docs/multi-node.md holds the mpirun script" grep -q "^mpirun --map-by" <<<"$mscript"
mscaled=$(scale "$mscript" 1 2 mjob)
check "the scaled mpirun script keeps the doc's B: signal, trap, second wait and requeue lines" \
    test "$(grep -c -e '--signal=B:USR1@300' -e "^trap 'kill -USR1 \$pid' USR1" -e '{ wait \$pid; rc=\$?; }' \
            -e 'scontrol requeue "$SLURM_JOB_ID"' <<<"$mscaled")" -eq 4
echo "$mscaled" >"$tmp/mjob.sh"
submit "$tmp/mjob.sh" "mpirun script" --batch
check "mpirun script: mpirun started both ranks on the allocation's slots" \
    grep -q "^dist: 2 ranks (2 on this node)" "$submitted_log"
resumed "mpirun script" mjob

# 4. Two nodes: a second Slurm whose node daemons run on two hosts of
# tools/cluster.sh (network namespaces with addresses and hostnames of
# their own; each node's /sys/fs/cgroup the machine's, its TmpFS, where
# PMIx keeps its files, its own), the controller on the bridge's address.
# Both scripts again, scaled to 2 nodes of one task: the ranks on two hosts,
# the gradients over the bridge, PMIx and mpirun's daemons across nodes.
two_nodes() {
    scancel --quiet --full --signal=KILL -u root >/dev/null 2>&1
    for f in slurmd slurmctld; do [ -s "$tmp/$f.pid" ] && kill "$(cat "$tmp/$f.pid")" 2>/dev/null; done
    "${cluster[@]}" up 2 >"$tmp/cluster.log" 2>&1 || { echo "SKIPPED (part): two nodes: tools/cluster.sh up failed:" \
        "$(tail -n 1 "$tmp/cluster.log")"; return; }
    cluster_up=1
    mkdir -p "$tmp/state2" "$tmp/cgroup" "$tmp/tmp-$cprefix-h0" "$tmp/tmp-$cprefix-h1"
    mount --rbind /sys/fs/cgroup "$tmp/cgroup" && cgroup_bound=1
    sed -e "s/^ClusterName=.*/ClusterName=cnttest2/" -e "s|^SlurmctldHost=.*|SlurmctldHost=ctl($cnet.254)|" \
        -e "s|^StateSaveLocation=.*|StateSaveLocation=$tmp/state2|" \
        -e "s|^SlurmdSpoolDir=.*|SlurmdSpoolDir=$tmp/spool/%n|" \
        -e "s|^SlurmdPidFile=.*|SlurmdPidFile=$tmp/slurmd-%n.pid|" \
        -e "s|^SlurmdLogFile=.*|SlurmdLogFile=$tmp/slurmd-%n.log|" \
        -e "s|^SlurmctldPort=.*|SlurmctldPort=$((port + 2))|" -e "s|^SlurmdPort=.*|SlurmdPort=$((port + 3))|" \
        -e "/^NodeName=/d" -e "/^PartitionName=/d" "$tmp/slurm.conf" >"$tmp/slurm2.conf"
    cat >>"$tmp/slurm2.conf" <<EOF2
TmpFS=$tmp/tmp-%n
NodeName=$cprefix-h0 NodeAddr=$cnet.1 CPUs=1 CoresPerSocket=1 RealMemory=1000 State=UNKNOWN
NodeName=$cprefix-h1 NodeAddr=$cnet.2 CPUs=1 CoresPerSocket=1 RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF2
    export SLURM_CONF="$tmp/slurm2.conf"
    # slurmctld takes the node name of SlurmctldHost as its own hostname
    unshare --uts sh -c 'hostname ctl && exec slurmctld -f "$0"' "$SLURM_CONF" >/dev/null 2>&1 ||
        { echo "SKIPPED (part): two nodes: slurmctld did not start"; return; }
    for k in 0 1; do
        mkdir -p "$tmp/spool/$cprefix-h$k"
        "${cluster[@]}" exec $k sh -c 'mount --rbind "$1" /sys/fs/cgroup && exec slurmd -f "$0"' "$SLURM_CONF" \
            "$tmp/cgroup" >/dev/null 2>&1 ||
            { echo "SKIPPED (part): two nodes: slurmd on host $k did not start"; return; }
    done
    local up=0
    for _ in $(seq 60); do
        [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && [ "$(sinfo -h -o %D 2>/dev/null)" = 2 ] && { up=1; break; }
        sleep 0.5
    done
    [ $up -eq 1 ] || { echo "SKIPPED (part): two nodes: not idle in 30 s ($(sinfo -h 2>&1 | head -n 1))"; return; }
    out=$(timeout 60 srun -N 2 -n 2 hostname 2>&1 | sort | paste -sd' ')
    check "two nodes: srun -N 2 runs one task on each host ($out)" test "$out" = "$cprefix-h0 $cprefix-h1"
    scale "$script" 2 1 job2 >"$tmp/job2.sh"
    submit "$tmp/job2.sh" "two nodes, srun script" ""
    check "two nodes, srun script: one rank on each node, the ring between them" \
        grep -q "^dist: 2 ranks (1 on this node), .*(dist.backend = auto: 2 nodes, one rank each)" "$submitted_log"
    resumed "two nodes, srun script" job2
    scale "$mscript" 2 1 mjob2 >"$tmp/mjob2.sh"
    submit "$tmp/mjob2.sh" "two nodes, mpirun script" --batch
    check "two nodes, mpirun script: one rank on each node (mpirun's daemon started on the other by srun)" \
        grep -q "^dist: 2 ranks (1 on this node), .*2 nodes, one rank each" "$submitted_log"
    resumed "two nodes, mpirun script" mjob2
}
if ip netns list >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1; then
    two_nodes
else
    echo "SKIPPED (part): no network namespaces here: two nodes"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all Slurm checks passed"
