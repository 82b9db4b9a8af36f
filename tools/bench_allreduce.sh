#!/usr/bin/env bash
# tools/bench_allreduce.sh - allreduce bus bandwidth, MPI_Allreduce against our
# ring (dist/ring.c), as the Markdown table of docs/benchmarks.md ("Allreduce
# bus bandwidth: ring vs MPI"). Run from anywhere after `make`:
#
#   tools/bench_allreduce.sh                      # 2 ranks, 1 KiB to 256 MiB, x4
#   NP=4 tools/bench_allreduce.sh --factor 2      # extra options go to the program
#
# NP (default 2) ranks on this machine under mpirun (--allow-run-as-root for
# containers, --oversubscribe when NP exceeds the cores), one OpenMP thread each.
# Prints the machine, the load average before and after (the numbers are only
# meaningful on an otherwise idle machine), then the table. Exit status: the
# program's (0 ok, 1 a wrong sum, 2 a bad option), or 2 when MPI is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${NP:-2}
bin=build/tools/bench_allreduce
if ! command -v mpirun > /dev/null; then echo "bench_allreduce.sh: mpirun not found (make deps)" >&2; exit 2; fi
if [ ! -x "$bin" ]; then echo "bench_allreduce.sh: $bin not built (run make)" >&2; exit 2; fi
if ! grep -q 'MPI=1' build/config.sig 2> /dev/null; then
    echo "bench_allreduce.sh: built without MPI (MPI=0): the allreduce is a no-op; rebuild with MPI" >&2
    exit 2
fi
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(mpirun --version | head -n1)"
echo "command: OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np $np $bin --markdown $*"
echo "load average before: $(load)"
rc=0
OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$np" -x OMP_NUM_THREADS \
    "$bin" --markdown "$@" || rc=$?
echo "load average after: $(load)"
exit "$rc"
