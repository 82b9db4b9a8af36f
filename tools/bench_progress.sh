#!/usr/bin/env bash
# tools/bench_progress.sh - cnntrain settings side by side on the cluster of
# tools/cluster.sh, by default dist.progress = spin against sleep: cnntrain
# alone (no peer), alternating the settings in one call, each run with its
# timeline, and a Markdown table of medians: images/s, the allreduce time
# backward did not hide (comm_exposed_ms), and how long a full-size bucket's
# allreduce took when it started while backward still ran ("in backward")
# against one that started after ("after"). What docs/scaling.md's
# "Progress without spinning" and docs/data-parallel.md's hierarchical
# allreduce rest on.
#
#   tools/bench_progress.sh [--hosts N] [--per-host R] [--rates "1gbit 5gbit"] [--rounds R]
#       [--compare "SETTING SETTING ..."] [--model M] [--shape CxHxW] [--batch B] [--steps S]
#       [--bucket-mb X] [--prefix P] [--net A.B.C] [--out DIR] [--cnt "k=v ..."]
#
# Defaults: 2 hosts, 1 rank per host, 1gbit and 5gbit, 3 rounds, --compare
# "dist.progress=spin dist.progress=sleep" (a SETTING is k=v, or several
# joined by commas), ResNet-50 on 3x32x32, batch 16 per rank, 1 thread per
# rank, 8 steps of which the first 2 are not counted, buckets 1 MiB then 25
# MiB, dist.backend = ring unless a setting says otherwise; cluster bpg on
# 10.81.0 (made here, removed on every exit); logs and runs in
# runs/bench-progress. --per-host R > 1 places R ranks on each host, talking
# through shared memory there (tools/cluster.sh mpirun-args --shm), as on a
# node. Needs root (the cluster) and MPI in the trainer. Exit status 0; 1
# when a run fails (its log is named); 2 for usage errors.
set -euo pipefail
cd "$(dirname "$0")/.."

hosts=2 per_host=1 compare="dist.progress=spin dist.progress=sleep" rates="1gbit 5gbit" rounds=3
model=resnet50 shape=3x32x32 batch=16 steps=8 bucket_mb=25
prefix=bpg net=10.81.0 out=runs/bench-progress cnt_extra=''
usage() { echo "bench_progress.sh: $*" >&2; sed -n '12,14p' "$0" | sed 's/^# */usage: /' >&2; exit 2; }
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage "$1 needs a value"
    case $1 in
        --hosts) hosts=$2 ;; --per-host) per_host=$2 ;; --compare) compare=$2 ;; --rates) rates=$2 ;;
        --rounds) rounds=$2 ;; --model) model=$2 ;;
        --shape) shape=$2 ;; --batch) batch=$2 ;; --steps) steps=$2 ;; --bucket-mb) bucket_mb=$2 ;;
        --prefix) prefix=$2 ;; --net) net=$2 ;; --out) out=$2 ;; --cnt) cnt_extra=$2 ;;
        *) usage "unknown option '$1'" ;;
    esac
    shift 2
done
[[ $hosts =~ ^[1-9][0-9]*$ && $per_host =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^[0-9]+$ &&
   $steps -ge 3 ]] || usage "--hosts, --per-host and --rounds take positive integers, --steps at least 3"
read -ra settings <<< "$compare"
[ ${#settings[@]} -ge 1 ] || usage "--compare needs at least one setting"
np=$((hosts * per_host))
./trainer --version | grep -q "^mpi: built in" ||
    { echo "bench_progress.sh: the trainer is built without MPI" >&2; exit 2; }
read -ra CX <<< "$cnt_extra"
mkdir -p "$out"

C=(tools/cluster.sh --prefix "$prefix" --net "$net")
cleanup() { "${C[@]}" down > /dev/null 2>&1 || echo "bench_progress.sh: '${C[*]} down' failed; run it by hand" >&2; }
read -ra first_rate <<< "$rates"
"${C[@]}" up "$hosts" "${first_rate[0]}" > "$out/cluster.log" 2>&1 ||
    { echo "bench_progress.sh: cluster up failed:" >&2; cat "$out/cluster.log" >&2; exit 1; }
trap cleanup EXIT
shm=()
[ "$per_host" -gt 1 ] && shm=(--shm)
read -ra MA <<< "$("${C[@]}" mpirun-args "${shm[@]}")"
[ "$per_host" -gt 1 ] && MA+=(--oversubscribe --map-by "ppr:$per_host:node")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# One run's numbers: img/s, exposed ms, in-backward and after-backward
# full-size bucket ms (medians over the counted steps and every rank; "-"
# where no bucket fell on that side).
summary() {
    python3 - "$1" "$bucket_mb" <<'PY'
import json, statistics as st, sys
d, full = sys.argv[1], float(sys.argv[2]) * 2**20 / 4
steps = [r for r in map(json.loads, open(d + "/metrics.jsonl")) if r["kind"] == "step"][2:]
tr = json.load(open(d + "/trace.json"))
ev = [e for e in (tr["traceEvents"] if isinstance(tr, dict) else tr) if e.get("ph") == "X"]
first = min(r["step"] for r in steps) if steps else 0
ins, outs = [], []
for pid in {e["pid"] for e in ev}:
    mine = [e for e in ev if e["pid"] == pid]
    back = sorted((e["ts"], e["ts"] + e["dur"]) for e in mine if e["name"] == "backward")[first - 1:]
    sizes = {}
    for e in mine:
        if e["name"].startswith("allreduce bucket"):
            sizes.setdefault(e["name"], []).append(e)
    last = max((int(n.split()[-1]) for n in sizes), default=0)
    for name, es in sizes.items():
        if int(name.split()[-1]) in (0, last):
            continue  # the small first bucket and the partial last one
        for e in es:
            b = [x for x in back if x[0] <= e["ts"]]
            if b:
                (ins if e["ts"] < b[-1][1] else outs).append(e["dur"] / 1e3)
med = lambda v: "%.0f" % st.median(v) if v else "-"
print("%.1f %.0f %s %s" % (st.median(r["img_per_sec"] for r in steps), st.median(r["comm_exposed_ms"] for r in steps),
                          med(ins), med(outs)))
PY
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "$model $shape, batch $batch per rank, 1 thread per rank, $hosts hosts x $per_host rank(s), buckets 1 then" \
     "$bucket_mb MiB; $rounds rounds of: ${settings[*]}; medians"
echo
echo "| rate | setting | images/s | exposed ms | full bucket in backward ms | after backward ms |"
echo "|---|---|---:|---:|---:|---:|"
for rate in $rates; do
    "${C[@]}" shape "$rate" > /dev/null
    for i in "${!settings[@]}"; do : > "$out/$rate-$i.txt"; done
    for r in $(seq "$rounds"); do
        for i in "${!settings[@]}"; do
            d="$out/$rate-$i-$r"
            rm -rf "$d"
            IFS=, read -ra kv <<< "${settings[$i]}"
            timeout 600 mpirun "${MA[@]}" -np "$np" ./trainer configs/resnet20-fashion.ini model.name="$model" \
                data.kind=synthetic data.synthetic_shape="$shape" data.synthetic_train=$(((steps + 2) * batch * np)) \
                data.synthetic_test=$((batch * np)) data.augment=false data.workers=1 train.device=cpu \
                train.threads=1 train.batch_size="$batch" train.epochs=1 train.max_steps="$steps" train.log_every=1 \
                optim.lr=0.01 optim.schedule=constant optim.warmup_epochs=0 optim.lr_scaling=none \
                dist.backend=ring dist.bucket_mb="$bucket_mb" dist.first_bucket_mb=1 dist.timeline=trace.json \
                checkpoint.every_epochs=0 train.out_dir="$d" "${CX[@]}" "${kv[@]}" > "$d.log" 2>&1 ||
                { echo "bench_progress.sh: run failed, see $d.log" >&2; exit 1; }
            summary "$d" >> "$out/$rate-$i.txt"
        done
    done
    for i in "${!settings[@]}"; do
        python3 - "$out/$rate-$i.txt" "$rate" "${settings[$i]}" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def med(i, fmt):
    v = [float(r[i]) for r in rows if r[i] != "-"]
    return fmt % st.median(v) if v else "-"
print("| %s | %s | %s | %s | %s | %s |" % (sys.argv[2], sys.argv[3], med(0, "%.1f"), med(1, "%.0f"), med(2, "%.0f"),
                                          med(3, "%.0f")))
PY
    done
done
