#!/usr/bin/env bash
# tools/profile.sh - everything a step simulator reads about a run, in one
# JSON file: `trainer --profile` of the configured step (layers, times,
# gradient buckets; fields in train/profile.h) plus the allreduce
# time-vs-bytes curve of both gradient transports, MPI_Allreduce and our
# ring, measured at NP ranks with build/tools/bench_allreduce from 4 KiB to
# the first power of 4 at or above the gradient's size.
#
#   tools/profile.sh CONFIG.ini OUT.json [section.key=value ...]
#   NP=3 MPIRUN_ARGS="--hostfile /tmp/cnt-cluster/hostfile ..." tools/profile.sh ...   (on a cluster)
#
# NP: ranks for the curve (default 2); MPIRUN_ARGS: extra mpirun options
# (hostfile, transports); BENCH_ARGS: extra bench_allreduce options (default
# --iters-time 0.2). The curve is added as
#   "allreduce": {"world": NP, "mpirun_args": "...", "machine": "...",
#                 "curves": {"mpi": [{"bytes": B, "us": T}, ...], "ring": [...]}}
# with T the slowest rank's mean time of one allreduce of B bytes. Exit
# status: the trainer's or bench_allreduce's when one fails, 2 for usage or a
# build without MPI.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
    echo "usage: tools/profile.sh CONFIG.ini OUT.json [section.key=value ...]" >&2
    exit 2
fi
config=$1 out=$2
shift 2
np=${NP:-2}
bench=build/tools/bench_allreduce
if [ ! -x ./trainer ] || [ ! -x "$bench" ]; then echo "tools/profile.sh: run make first" >&2; exit 2; fi
if ! command -v mpirun >/dev/null || ! ./trainer --version | grep -q "^mpi: built in"; then
    echo "tools/profile.sh: the allreduce curve needs MPI (make deps, make)" >&2
    exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./trainer --profile "$config" "$tmp/step.json" "$@"
grad=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grad_bytes"])' "$tmp/step.json")
max=4096
while [ "$max" -lt "$grad" ]; do max=$((max * 4)); done
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS \
    ${MPIRUN_ARGS:-} "$bench" --min-bytes 4096 --max-bytes "$max" --factor 4 ${BENCH_ARGS:---iters-time 0.2} \
    >"$tmp/bench.txt"
python3 - "$tmp/step.json" "$tmp/bench.txt" "$out" "$np" "${MPIRUN_ARGS:-}" <<'PY'
import json, re, sys
step, bench, out, np, mpirun_args = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
p = json.load(open(step))
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
curves = {"mpi": [], "ring": []}
machine = ""
for line in open(bench):
    if line.startswith("bench_allreduce:"):
        machine = line.strip()
    # "     4 KiB  mpi        1234        12.34   ..."
    m = re.match(r"\s*(\d+) (B|KiB|MiB|GiB)\s+(mpi|ring)\s+(\d+)\s+([0-9.]+)\s", line)
    if m:
        curves[m.group(3)].append({"bytes": int(m.group(1)) * units[m.group(2)], "us": float(m.group(5))})
if not curves["mpi"] or not curves["ring"]:
    sys.exit("tools/profile.sh: no allreduce times in bench_allreduce's output:\n" + open(bench).read())
p["allreduce"] = {"world": np, "mpirun_args": mpirun_args, "machine": machine, "curves": curves}
with open(out, "w") as f:
    json.dump(p, f, separators=(",", ":"))
    f.write("\n")
print(f"profile with the allreduce curve at {np} ranks ({len(curves['mpi'])} sizes, up to "
      f"{curves['mpi'][-1]['bytes']} bytes) written to {out}")
PY
