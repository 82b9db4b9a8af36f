#!/usr/bin/env bash
# tests/test_dist.sh - dist/ under a real mpirun: build/tests/mpi_ring with 2, 3
# and 4 ranks on this machine (ring allreduce bitwise against MPI_Allreduce and
# the analytic sum, broadcast, allgather, f64 allreduce, local rank, Open
# MPI's TCP connections per pair (dist_init's choice, or the user's); fp16 ring
# and MPI allreduces against each other and the fp32 sum; the stall watchdog's
# arrival barrier), and a
# fatal error on one rank ending the whole job (the MPI_Abort hook) instead of
# leaving the others in a barrier.
# Run from the repository root after `make test` has built the programs.
# Prints "SKIPPED: ..." when MPI is not built in or mpirun is missing.
# Every mpirun runs under `timeout`, so a hang fails the test instead of CI.
set -u
P=build/tests/mpi_ring
if ! command -v mpirun > /dev/null; then echo "SKIPPED: mpirun not found"; exit 0; fi
if [ ! -x "$P" ]; then echo "SKIPPED: $P not built"; exit 0; fi
if ! grep -q 'MPI=1' build/config.sig 2> /dev/null; then echo "SKIPPED: built without MPI (MPI=0)"; exit 0; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
# How many "ok" lines tests/mpi_ring.c prints with --expect-world and
# --single-node; update with it, so a check that silently stops running fails.
NCHECKS=98
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
# mpi NP SECONDS ARGS...: sets $rc, $secs; stdout in $tmp/out, stderr in $tmp/err.
# --oversubscribe: more ranks than the machine's cores; root in containers.
mpi() {
    local np=$1 limit=$2
    shift 2
    local t0
    t0=$(date +%s%N)
    OMP_NUM_THREADS=1 timeout "$limit" mpirun --allow-run-as-root --oversubscribe -np "$np" \
        -x OMP_NUM_THREADS "$P" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    local ms=$((($(date +%s%N) - t0) / 1000000))
    secs=$((ms / 1000)).$(printf %03d $((ms % 1000)))
}

for np in 2 3 4; do
    mpi "$np" 60 --expect-world "$np" --single-node --expect-tcp-links 2 1
    grep -E '^(ok|FAIL) ' "$tmp/out" | grep -v '^ok ' | sed 's/^/    /'
    nok=$(grep -c '^ok ' "$tmp/out")
    check "mpi_ring -np $np: exit 0 ($nok checks ok, ${secs}s)" test "$rc" -eq 0
    check "mpi_ring -np $np: no FAIL line" test -z "$(grep '^FAIL' "$tmp/out")"
    check "mpi_ring -np $np: ran every check ($NCHECKS)" test "$nok" -eq "$NCHECKS"
    check "mpi_ring -np $np: summary line" grep -q "^mpi_ring: world $np, all checks passed" "$tmp/out"
    if [ "$rc" -ne 0 ]; then tail -n 20 "$tmp/err" | sed 's/^/    stderr: /'; fi
done

# dist_init asks Open MPI for two TCP connections per pair (above) unless the
# user chose: then the user's value stands.
OMPI_MCA_btl_tcp_links=3 mpi 2 60 --expect-world 2 --expect-tcp-links 3 0
check "mpi_ring -np 2, OMPI_MCA_btl_tcp_links=3: the user's value stands" \
    grep -q "^ok  *Open MPI's btl_tcp_links: 3, set by the environment" "$tmp/out"
check "mpi_ring -np 2, OMPI_MCA_btl_tcp_links=3: exit 0" test "$rc" -eq 0

# A fatal error on rank 1 while rank 0 (and 2) wait in a barrier: the abort hook
# must end the job, non-zero, long before the timeout.
mpi 3 30 --die-on-rank 1
check "fatal on rank 1: job ends non-zero, not by timeout (rc=$rc, ${secs}s)" \
    test "$rc" -ne 0 -a "$rc" -ne 124 -a "$rc" -ne 137
check "fatal on rank 1: stderr names [rank 1] and the message" \
    grep -q '^\[rank 1\] .*deliberate fatal error on rank 1' "$tmp/err"
check "fatal on rank 1: no rank left the barrier" test -z "$(grep 'left the barrier' "$tmp/err")"
if [ "$fails" -ne 0 ]; then tail -n 20 "$tmp/err" | sed 's/^/    stderr: /'; fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all dist checks passed"
