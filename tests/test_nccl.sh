#!/usr/bin/env bash
# tests/test_nccl.sh - the gradient reducer on the GPU under a real mpirun
# (build/tests/mpi_nccl): NCCL and MPI-staged allreduces against
# MPI_Allreduce, at 1 rank (and at 2 when the node has 2 GPUs or more; on a
# node with one GPU, 2 ranks that NCCL takes for two hosts, so that its
# allreduces do real work over sockets: at 1 rank an in-place allreduce is
# nothing, and a missing event wait in dist/nccl.c would go unseen); then
# more ranks than GPUs, where two ranks share one: dist_nccl_create must
# refuse that with a message naming the ranks and the remedy, and the job must
# end non-zero, not hang.
# Run from the repository root after `make test` has built the programs.
# Prints "SKIPPED: ..." when MPI, NCCL or a usable GPU is missing.
# Every mpirun runs under `timeout`, so a hang fails the test instead of CI.
set -u
P=build/tests/mpi_nccl
if ! command -v mpirun > /dev/null; then echo "SKIPPED: mpirun not found"; exit 0; fi
if [ ! -x "$P" ]; then echo "SKIPPED: $P not built"; exit 0; fi
if ! grep -q 'MPI=1' build/config.sig 2> /dev/null; then echo "SKIPPED: built without MPI (MPI=0)"; exit 0; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
# mpi NP SECONDS [PROGRAM ARGS...]: sets $rc, $secs; stdout in $tmp/out,
# stderr in $tmp/err. PROGRAM defaults to $P.
mpi() {
    local np=$1 limit=$2
    shift 2
    [ $# -gt 0 ] || set -- "$P"
    local t0
    t0=$(date +%s%N)
    OMP_NUM_THREADS=1 timeout "$limit" mpirun --allow-run-as-root --oversubscribe -np "$np" \
        -x OMP_NUM_THREADS "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    local ms=$((($(date +%s%N) - t0) / 1000000))
    secs=$((ms / 1000)).$(printf %03d $((ms % 1000)))
}

mpi 1 300
if grep -q '^SKIPPED' "$tmp/out"; then
    grep -m1 '^SKIPPED' "$tmp/out"
    exit 0
fi
grep '^FAIL' "$tmp/out" | sed 's/^/    /'
nok=$(grep -c '^ok ' "$tmp/out")
check "mpi_nccl -np 1: exit 0 ($nok checks ok, ${secs}s)" test "$rc" -eq 0
check "mpi_nccl -np 1: no FAIL line" test -z "$(grep '^FAIL' "$tmp/out")"
check "mpi_nccl -np 1: ran the checks" test "$nok" -gt 100
check "mpi_nccl -np 1: summary line" grep -q '^mpi_nccl: world 1, all checks passed' "$tmp/out"
if [ "$rc" -ne 0 ]; then tail -n 20 "$tmp/err" | sed 's/^/    stderr: /'; fi
gpus=$(sed -n 's/^mpi_nccl: world 1, \([0-9]*\) GPU(s) on this node$/\1/p' "$tmp/out")
gpus=${gpus:-1}

if [ "$gpus" -ge 2 ]; then
    mpi 2 300
    grep '^FAIL' "$tmp/out" | sed 's/^/    /'
    check "mpi_nccl -np 2 on $gpus GPUs: exit 0 (${secs}s)" test "$rc" -eq 0
    check "mpi_nccl -np 2: summary line" grep -q '^mpi_nccl: world 2, all checks passed' "$tmp/out"
    if [ "$rc" -ne 0 ]; then tail -n 20 "$tmp/err" | sed 's/^/    stderr: /'; fi
else
    # Each rank its own NCCL_HOSTID: NCCL (and dist_nccl_create, which judges
    # by the same id) takes them for two hosts and connects them through its
    # socket transport on the loopback interface, on the one GPU.
    mpi 2 300 -x NCCL_SOCKET_IFNAME=lo bash -c 'NCCL_HOSTID=cnt-test-host-$OMPI_COMM_WORLD_RANK exec "$0" --quick' "$P"
    grep '^FAIL' "$tmp/out" | sed 's/^/    /'
    nok=$(grep -c '^ok ' "$tmp/out")
    check "mpi_nccl -np 2 on one GPU as two NCCL hosts: exit 0 ($nok checks ok, ${secs}s)" test "$rc" -eq 0
    check "mpi_nccl -np 2 as two NCCL hosts: ran the checks" test "$nok" -gt 50
    check "mpi_nccl -np 2 as two NCCL hosts: summary line" grep -q '^mpi_nccl: world 2, all checks passed' "$tmp/out"
    if [ "$rc" -ne 0 ]; then tail -n 20 "$tmp/err" | sed 's/^/    stderr: /'; fi
fi

# One rank more than GPUs: ranks 0 and $gpus share cuda:0.
np=$((gpus + 1))
mpi "$np" 120
check "$np ranks on $gpus GPU(s): job ends non-zero, not by timeout (rc=$rc, ${secs}s)" \
    test "$rc" -ne 0 -a "$rc" -ne 124 -a "$rc" -ne 137
check "$np ranks on $gpus GPU(s): the error names the two ranks sharing a GPU" \
    grep -q "dist_nccl_create failed: dist.backend=nccl: ranks 0 and $gpus (2 ranks in all) share one GPU" "$tmp/err"
check "$np ranks on $gpus GPU(s): the error says what to do" \
    grep -q "start no more ranks per node than GPUs, or use dist.backend=mpi" "$tmp/err"
check "$np ranks on $gpus GPU(s): no check ran" test -z "$(grep '^ok ' "$tmp/out")"
if [ "$fails" -ne 0 ]; then tail -n 20 "$tmp/err" | sed 's/^/    stderr: /'; fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all NCCL checks passed"
