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
#     75, the job requeues, resumes and finishes with the same losses.
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
cleanup() {
    [ -n "${SLURM_CONF:-}" ] && scancel --quiet --full --signal=KILL -u root >/dev/null 2>&1
    for f in slurmd slurmctld munged; do [ -s "$tmp/$f.pid" ] && kill "$(cat "$tmp/$f.pid")" 2>/dev/null; done
    sleep 0.5
    for f in slurmd slurmctld munged; do [ -s "$tmp/$f.pid" ] && kill -KILL "$(cat "$tmp/$f.pid")" 2>/dev/null; done
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
scaled=$(sed -e 's/--nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --cpus-per-task=8/--nodes=1 --ntasks-per-node=2 --cpus-per-task=1/' \
             -e "s|--output=%x-%j.out|--output=$tmp/%x-%j.out --job-name=r101|" \
             -e 's| NCCL_SOCKET_IFNAME=eth0||' \
             -e "s|configs/resnet101.ini data.root=/data/imagenet|${small[*]} checkpoint.resume=auto|" \
             -e "s|train.out_dir=/shared/runs/r101|train.out_dir=$tmp/job|" <<<"$script")
check "the scaled script keeps the README's srun, requeue and append lines" \
    test "$(grep -c -e '^srun --mpi=pmix' -e 'scontrol requeue "$SLURM_JOB_ID"' -e '--open-mode=append' \
            -e 'SRUN_CPUS_PER_TASK' <<<"$scaled")" -eq 4
echo "$scaled" >"$tmp/job.sh"
# submit SCRIPT NAME SCANCEL-OPTION: sbatch the script (from the repository
# root, as a user would), wait for step 6 in its log, send USR1 as Slurm does
# at --signal's time (SCANCEL-OPTION --batch: to the batch shell alone, what
# B: does), help the requeued job start at once, and check how it ended.
submit() {
    local file=$1 name=$2 opt=$3 job log state= restarts= nudged=
    job=$(sbatch --parsable "$file" 2>&1)
    check "$name: sbatch accepts it (job ${job})" test -n "$job" -a -z "${job//[0-9]/}"
    log=$(sed -n 's/^#SBATCH .*--output=\([^ ]*\).*/\1/p' "$file" | sed "s/%x/$(sed -n 's/.*--job-name=\([^ ]*\).*/\1/p' "$file")/; s/%j/$job/")
    for _ in $(seq 600); do grep -q "step 6/" "$log" 2>/dev/null && break; sleep 0.1; done
    scancel $opt --signal=USR1 "$job" 2>/dev/null
    for _ in $(seq 360); do
        state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        restarts=$(scontrol show job "$job" 2>/dev/null | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
        [ "$state" = COMPLETED ] || [ "$state" = FAILED ] || [ "$state" = CANCELLED ] && break
        [ ! -e "$log" ] && [ "$state" = PENDING ] && [ $SECONDS -gt 60 ] && break # never started: say so, do not wait
        if [ "$state" = PENDING ] && [ "${restarts:-0}" -eq 1 ] && [ -z "$nudged" ]; then
            scontrol update JobId="$job" StartTime=now >/dev/null 2>&1 && nudged=1
        fi
        sleep 0.5
    done
    check "$name: the job COMPLETED after one restart (state $state, restarts ${restarts:-?})" \
        test "$state" = COMPLETED -a "${restarts:-0}" -eq 1
    check "$name: the first run stopped by SIGUSR1 with a checkpoint" \
        grep -q "stopped (SIGUSR1 at step [0-9]*, .*checkpoint written" "$log"
    [ "$state" = COMPLETED ] || tail -n 20 "$log" 2>/dev/null | sed 's/^/    /'
    submitted_log=$log
}
submit "$tmp/job.sh" "srun script" ""
log=$submitted_log
check "the requeued run: resumed from that checkpoint, in the same log (--open-mode=append)" \
    grep -q "resumed from $tmp/job/checkpoints/ckpt-" "$log"
check "the requeued run: finished" grep -q "^finished: 48 steps" "$log"
check "the job's metrics: each of the 48 steps once, the uninterrupted run's losses" \
    bash -c '[ "$(wc -l <"$1")" -eq 48 ] && diff -q "$1" "$2" >/dev/null' _ "$tmp/ref.steps" \
    <(steps "$tmp/job/metrics.jsonl")

# 3. docs/multi-node.md's mpirun script, scaled the same way. The signal goes
# to the batch shell alone (scancel --batch, as --signal=B:USR1 does); the
# script passes it to mpirun, mpirun to the ranks, mpirun exits 75, requeue.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # the test runs as root; sbatch exports these
mscript=$(sed -n '/<!-- slurm-mpirun-script:begin -->/,/<!-- slurm-mpirun-script:end -->/p' docs/multi-node.md |
          sed '1,2d;$d' | sed '$d')
check "docs/multi-node.md holds the mpirun script" grep -q "^mpirun --map-by" <<<"$mscript"
mscaled=$(sed -e 's/--nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --cpus-per-task=8/--nodes=1 --ntasks-per-node=2 --cpus-per-task=1/' \
              -e "s|--output=%x-%j.out|--output=$tmp/%x-%j.out --job-name=r101m|" \
              -e 's| -x NCCL_SOCKET_IFNAME=eth0||' \
              -e "s|configs/resnet101.ini data.root=/data/imagenet|${small[*]} checkpoint.resume=auto|" \
              -e "s|train.out_dir=/shared/runs/r101|train.out_dir=$tmp/mjob|" <<<"$mscript")
check "the scaled mpirun script keeps the doc's B: signal, trap, second wait and requeue lines" \
    test "$(grep -c -e '--signal=B:USR1@300' -e "^trap 'kill -USR1 \$pid' USR1" -e '{ wait \$pid; rc=\$?; }' \
            -e 'scontrol requeue "$SLURM_JOB_ID"' <<<"$mscaled")" -eq 4
echo "$mscaled" >"$tmp/mjob.sh"
submit "$tmp/mjob.sh" "mpirun script" --batch
log=$submitted_log
check "mpirun script: mpirun started both ranks on the allocation's slots" grep -q "^dist: 2 ranks (2 on this node)" "$log"
check "mpirun script: the requeued run resumed in the same log and finished" \
    bash -c 'grep -q "resumed from $1/mjob/checkpoints/ckpt-" "$2" && grep -q "^finished: 48 steps" "$2"' _ "$tmp" "$log"
check "mpirun script: each of the 48 steps once, the uninterrupted run's losses" \
    bash -c '[ "$(wc -l <"$1")" -eq 48 ] && diff -q "$1" "$2" >/dev/null' _ "$tmp/ref.steps" \
    <(steps "$tmp/mjob/metrics.jsonl")

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all Slurm checks passed"
