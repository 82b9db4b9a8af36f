#!/usr/bin/env bash
# tools/peer_ddp.sh - cnntrain and PyTorch DDP side by side on the cluster of
# tools/cluster.sh: the same model (parameter for parameter), batch, image
# size, bucket sizes, threads per rank, hosts and links, one rank per host,
# run alternately (cnntrain, DDP, cnntrain, DDP, ...) in one call, at each
# host count and link rate. Prints a markdown table of images/s, their ratio,
# scaling efficiency (images/s at N hosts / (N x images/s at 1 host), same
# tool, same rate) and each tool's allreduce time not hidden by backward
# (cnntrain's comm_exposed_ms; DDP's from its last gradient to the return
# of backward, tools/ddp_peer.py), and writes it as CSV. See
# docs/scaling.md, "The peer: PyTorch DDP".
#
#   tools/peer_ddp.sh [options]
#
#   --model M            cnntrain zoo model, built the same in torch (default resnet50;
#                        torchvision's, or resnet20/32/56/110: tools/ddp_peer.py)
#   --shape CxHxW        synthetic images (default 3x32x32); --classes K (default 10)
#   --batch B            images per step on each rank (default 16)
#   --hosts "1 2 3 4"    host counts (one rank each)
#   --rates "1gbit 5gbit" link rates (tc's units, or none)
#   --rounds R           runs of each tool at each point; the table takes the median (default 3)
#   --warmup W --steps S steps not timed, then timed (default 2 and 6); a tool's
#                        images/s in one run: N x B / the median timed step
#   --threads T          compute threads per rank (default 1)
#   --bucket-mb X --first-bucket-mb Y   gradient buckets of both (default 25 and 1)
#   --backend ring|mpi   cnntrain's dist.backend (default ring)
#   --prefix P --net A.B.C   the cluster's names and /24 (default peer, 10.76.0): made
#                        here with tools/cluster.sh up, removed on every exit
#   --python PY          a python with torch and torchvision (default $TORCH_PYTHON,
#                        else /opt/torch-venv/bin/python, else python3)
#   --out DIR            logs, runs, table.md and peer_ddp.csv (default runs/peer-ddp)
#   --trace              after each point's rounds, one more run of each with its
#                        timeline: cnntrain's dist.timeline (every rank) and
#                        torch.profiler's trace of 3 steps (rank 0), in DIR/traces
#   --timeout SEC        limit of one run (default 300)
#   --mpirun-extra "..." more mpirun options for both tools' runs (e.g. "--mca
#                        btl_tcp_links 2"; they only change cnntrain's traffic: DDP's
#                        goes through gloo, MPI only starts its ranks)
#   --cnt "k=v ..."      more cnntrain settings (e.g. "dist.overlap=false")
#   --ddp "ARGS"         more tools/ddp_peer.py options (e.g. "--powersgd-rank 2
#                        --powersgd-start 2": DDP's PowerSGD hook, beside --cnt
#                        "dist.compress=powersgd dist.powersgd_start=2")
#   --load N             a second job on the machine's cores: N busy loops
#                        (sha256sum /dev/zero, at the tools' priority, outside
#                        the cluster's hosts) from the first run to the end of
#                        the call, which both tools share alike (default 0)
#
# Each cnntrain run: mpirun $(tools/cluster.sh mpirun-args) -np N ./trainer
# DIR/cnntrain.ini train.out_dir=... (train.layout = auto, as its users run
# it: oneDNN's blocked layout where built in; --cnt train.layout=nchw for
# the NCHW kernels this script used before 2026-11-27); its step times are its metrics.jsonl step
# records (train.log_every = 1: img_per_sec is world x batch / the step's wall
# time on rank 0). Each DDP run: the same mpirun of tools/ddp_peer.py (gloo
# over eth0, rendezvous at host 0). Both fail the call if the parameter counts
# differ. Needs root (the cluster), MPI in the trainer, and torch in --python:
#     python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch torchvision
# Exit status 0; 1 when a run fails (its log is named); 2 for usage errors or
# what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

model=resnet50 shape=3x32x32 classes=10 batch=16 hosts="1 2 3 4" rates="1gbit 5gbit" rounds=3
warmup=2 steps=6 threads=1 bucket_mb=25 first_bucket_mb=1 backend=ring prefix=peer net=10.76.0
out=runs/peer-ddp trace=0 tmo=300 extra='' cnt_extra='' ddp_extra='' load=0
py=${TORCH_PYTHON:-}
if [ -z "$py" ]; then if [ -x /opt/torch-venv/bin/python ]; then py=/opt/torch-venv/bin/python; else py=python3; fi; fi

usage() { echo "peer_ddp.sh: $*" >&2; echo "usage: tools/peer_ddp.sh [--model M] [--shape CxHxW] [--classes K] [--batch B] [--hosts \"1 2 3 4\"] [--rates \"1gbit 5gbit\"] [--rounds R] [--warmup W] [--steps S] [--threads T] [--bucket-mb X] [--first-bucket-mb Y] [--backend ring|mpi] [--prefix P] [--net A.B.C] [--python PY] [--out DIR] [--trace] [--timeout SEC] [--mpirun-extra \"ARGS\"] [--cnt \"k=v ...\"] [--ddp \"ARGS\"] [--load N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --trace) trace=1; shift; continue ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    esac
    case $1 in
    --model | --shape | --classes | --batch | --hosts | --rates | --rounds | --warmup | --steps | --threads | \
        --bucket-mb | --first-bucket-mb | --backend | --prefix | --net | --python | --out | --timeout | \
        --mpirun-extra | --cnt | --ddp | --load) [ $# -ge 2 ] || usage "$1 needs a value" ;;
    *) usage "unknown option $1" ;;
    esac
    case $1 in
    --model) model=$2 ;; --shape) shape=$2 ;; --classes) classes=$2 ;; --batch) batch=$2 ;;
    --hosts) hosts=$2 ;; --rates) rates=$2 ;; --rounds) rounds=$2 ;; --warmup) warmup=$2 ;;
    --steps) steps=$2 ;; --threads) threads=$2 ;; --bucket-mb) bucket_mb=$2 ;;
    --first-bucket-mb) first_bucket_mb=$2 ;; --backend) backend=$2 ;; --prefix) prefix=$2 ;;
    --net) net=$2 ;; --python) py=$2 ;; --out) out=$2 ;; --timeout) tmo=$2 ;;
    --mpirun-extra) extra=$2 ;; --cnt) cnt_extra=$2 ;; --ddp) ddp_extra=$2 ;; --load) load=$2 ;;
    *) usage "unknown option $1" ;;
    esac
    shift 2
done
for v in batch rounds warmup steps threads classes tmo; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || usage "--${v/tmo/timeout}: a whole number of at least 1, not '${!v}'"
done
[[ $shape =~ ^[0-9]+x[0-9]+x[0-9]+$ ]] || usage "--shape '$shape': CxHxW"
[[ $backend =~ ^(ring|mpi)$ ]] || usage "--backend: ring or mpi"
[[ $load =~ ^[0-9]{1,2}$ ]] || usage "--load: a number of busy loops, 0 to 99, not '$load'"
maxn=0
for n in $hosts; do
    [[ $n =~ ^[1-9][0-9]?$ ]] || usage "--hosts: host counts 1 to 99, not '$n'"
    [ "$n" -le "$maxn" ] || maxn=$n
done
[ "$maxn" -ge 1 ] || usage "--hosts: no host count"
[ -n "$rates" ] || usage "--rates: no rate"
read -ra CX <<< "$cnt_extra"
read -ra DX <<< "$ddp_extra"

[ "$(id -u)" -eq 0 ] || { echo "peer_ddp.sh: needs root (tools/cluster.sh makes network namespaces)" >&2; exit 2; }
[ -x ./trainer ] || { echo "peer_ddp.sh: run make first" >&2; exit 2; }
./trainer --version | grep -q '^mpi: built in' || { echo "peer_ddp.sh: the trainer was built without MPI" >&2; exit 2; }
command -v mpirun > /dev/null || { echo "peer_ddp.sh: mpirun not found (make deps)" >&2; exit 2; }
if ! tv=$("$py" -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)' 2>&1); then
    echo "peer_ddp.sh: $py has no torch/torchvision: python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch torchvision (then --python /opt/torch-venv/bin/python)" >&2
    exit 2
fi

mkdir -p "$out/logs" "$out/runs"
[ "$trace" -eq 0 ] || mkdir -p "$out/traces"
out=$(cd "$out" && pwd)
cfg=$out/cnntrain.ini
# Enough samples that the timed steps stay inside epoch 1 on every rank, and
# an evaluation (at the end, after the timed steps) of one batch per rank.
cat > "$cfg" << EOF
; written by tools/peer_ddp.sh: cnntrain's side of the comparison with DDP
[model]
name = $model

[data]
kind = synthetic
synthetic_shape = $shape
synthetic_classes = $classes
synthetic_train = $(((warmup + steps + 2) * batch * maxn))
synthetic_test = $((batch * maxn))
augment = false
workers = 1
prefetch = 2

[train]
device = cpu
precision = fp32
layout = auto
threads = $threads
batch_size = $batch
epochs = 1
max_steps = $((warmup + steps))
log_every = 1
seed = 42

[optim]
lr = 0.01
momentum = 0.9
weight_decay = 1e-4
schedule = constant
warmup_epochs = 0
lr_scaling = none

[dist]
backend = $backend
bucket_mb = $bucket_mb
first_bucket_mb = $first_bucket_mb

[checkpoint]
every_epochs = 0
EOF
params=$(./trainer --summary "$cfg" "${CX[@]}" 2> /dev/null | awk '/^params:/ {print $2}' || true)
[ -n "$params" ] || { echo "peer_ddp.sh: ./trainer --summary $cfg failed:" >&2; ./trainer --summary "$cfg" "${CX[@]}" >&2 || true; exit 2; }

C=(tools/cluster.sh --prefix "$prefix" --net "$net")
loaders=()
cleanup() {
    if [ ${#loaders[@]} -gt 0 ]; then
        kill "${loaders[@]}" 2> /dev/null || true
        wait "${loaders[@]}" 2> /dev/null || true # gone when the call returns
    fi
    "${C[@]}" down > /dev/null 2>&1 || echo "peer_ddp.sh: '${C[*]} down' failed; run it by hand" >&2
}
read -ra first_rate <<< "$rates"
"${C[@]}" up "$maxn" "${first_rate[0]}" > "$out/logs/cluster.log" 2>&1 || { echo "peer_ddp.sh: cluster up failed:" >&2; cat "$out/logs/cluster.log" >&2; exit 1; }
trap cleanup EXIT
read -ra MA <<< "$("${C[@]}" mpirun-args)"
export OMP_NUM_THREADS=$threads
read -ra XA <<< "$extra"
M=(mpirun --allow-run-as-root "${MA[@]}" "${XA[@]}" -x OMP_NUM_THREADS)

# the second job: started once the cluster is up, ended by cleanup on every exit
for ((i = 0; i < load; i++)); do
    sha256sum /dev/zero > /dev/null 2>&1 &
    loaders+=($!)
done
loaded=''
[ "$load" -eq 0 ] || loaded="; a second job on the cores: $load busy loop(s) (sha256sum /dev/zero)"

echo "peer_ddp: $model $shape, $classes classes, batch $batch per rank, $params parameters in both; buckets $bucket_mb MiB (first $first_bucket_mb); $threads thread(s) per rank; cnntrain dist.backend=$backend; torch $tv; $rounds round(s) of $warmup + $steps steps; hosts: $hosts; rates: $rates; cluster $prefix on $net.0/24${extra:+; mpirun $extra}${cnt_extra:+; cnntrain $cnt_extra}$loaded"

# cnt_run N TAG [k=v...]: one cnntrain run; prints "IMG_S COMM_MS EXPOSED_MS"
# (medians over the timed steps) or fails naming its log.
cnt_run() {
    local n=$1 tag=$2 dir=$out/runs/cnt-$2 log=$out/logs/cnt-$2.log
    shift 2
    rm -rf "$dir"
    if ! timeout -k 10 "$tmo" "${M[@]}" -np "$n" ./trainer "$cfg" "${CX[@]}" train.out_dir="$dir" "$@" > "$log" 2>&1; then
        echo "peer_ddp.sh: cnntrain failed at $n hosts ($tag): $log" >&2
        tail -n 5 "$log" >&2
        return 1
    fi
    python3 - "$dir/metrics.jsonl" "$warmup" "$n" "$batch" << 'PY'
import json, statistics, sys
path, warmup, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
recs = [r for r in map(json.loads, open(path)) if r["kind"] == "step" and r["step"] > warmup]
if not recs:
    sys.exit(f"peer_ddp.sh: no timed step records in {path}")
# img_per_sec = world x batch / (the step's wall time on rank 0): the median step, as images/s
ms = statistics.median(n * batch * 1e3 / r["img_per_sec"] for r in recs)
print(f"{n * batch * 1e3 / ms:.2f} {statistics.median(r['comm_ms'] for r in recs):.1f} "
      f"{statistics.median(r['comm_exposed_ms'] for r in recs):.1f}")
PY
}

port=29500
# ddp_run N TAG [options]: one DDP run; prints IMG_S EXPOSED_MS or fails naming its log.
ddp_run() {
    local n=$1 tag=$2 log=$out/logs/ddp-$2.log
    shift 2
    port=$((port + 1))
    if ! timeout -k 10 "$tmo" "${M[@]}" -np "$n" "$py" tools/ddp_peer.py "$model" "$shape" "$batch" \
        --classes "$classes" --threads "$threads" --warmup "$warmup" --steps "$steps" \
        --bucket-mb "$bucket_mb" --first-bucket-mb "$first_bucket_mb" --master-addr "$net.1" \
        --master-port "$port" --ifname eth0 --expect-params "$params" "${DX[@]}" "$@" > "$log" 2>&1; then
        echo "peer_ddp.sh: DDP failed at $n hosts ($tag): $log" >&2
        tail -n 5 "$log" >&2
        return 1
    fi
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{\"tool\": \"ddp\""):
        r = json.loads(l); print(r["images_per_sec"], r["median_exposed_ms"]); break
else:
    sys.exit("peer_ddp.sh: no result line in " + sys.argv[1])' "$log"
}

source tools/median.sh # median V... or values on stdin

rows=()
for rate in $rates; do
    "${C[@]}" shape "$rate" >> "$out/logs/cluster.log" 2>&1 || { echo "peer_ddp.sh: shape $rate failed (see $out/logs/cluster.log)" >&2; exit 1; }
    for n in $hosts; do
        cs=() ds=() cc=() ce=() de=()
        for ((r = 1; r <= rounds; r++)); do
            t0=$(date +%s)
            res=$(cnt_run "$n" "$n-$rate-$r") || exit 1
            read -r ci cm cx <<< "$res"
            t1=$(date +%s)
            res=$(ddp_run "$n" "$n-$rate-$r") || exit 1
            read -r di dx <<< "$res"
            t2=$(date +%s)
            cs+=("$ci") cc+=("$cm") ce+=("$cx") ds+=("$di") de+=("$dx")
            echo "  $n host(s), $rate, round $r: cnntrain $ci img/s (comm $cm ms, exposed $cx ms; $((t1 - t0)) s), DDP $di img/s (exposed $dx ms; $((t2 - t1)) s)"
        done
        if [ "$trace" -eq 1 ]; then
            cnt_run "$n" "$n-$rate-trace" dist.timeline=timeline.json > /dev/null || exit 1
            cp "$out/runs/cnt-$n-$rate-trace/timeline.json" "$out/traces/cnntrain-$n-$rate.json"
            ddp_run "$n" "$n-$rate-trace" --trace "$out/traces/ddp-$n-$rate.json" > /dev/null || exit 1
            echo "  $n host(s), $rate: traces $out/traces/cnntrain-$n-$rate.json, $out/traces/ddp-$n-$rate.json"
        fi
        rows+=("$n $rate $(median "${cs[@]}") $(median "${ds[@]}") $(median "${cc[@]}") $(median "${ce[@]}") $(median "${de[@]}") $(IFS=';'; echo "${cs[*]}") $(IFS=';'; echo "${ds[*]}")")
    done
done

printf '%s\n' "${rows[@]}" > "$out/rows.txt"
python3 - "$out/rows.txt" "$out/peer_ddp.csv" "$out/table.md" "$model" "$shape" "$batch" "$threads" \
    "$bucket_mb" "$first_bucket_mb" "$backend" "$rounds" "$load" << 'PY'
import csv, sys
rows_path, csv_path, md_path, model, shape, batch, threads, bmb, fbmb, backend, rounds, load = sys.argv[1:13]
rows = [l.split() for l in open(rows_path) if l.strip()]
one = {}  # (tool, rate) -> images/s at 1 host
for n, rate, c, d, *_ in rows:
    if n == "1":
        one[("c", rate)], one[("d", rate)] = float(c), float(d)
def eff(tool, n, rate, v):
    base = one.get((tool, rate))
    return f"{v / (int(n) * base):.3f}" if base else ""
cols = ["hosts", "rate", "cnntrain_img_s", "ddp_img_s", "cnntrain_eff", "ddp_eff", "cnntrain_comm_ms",
        "cnntrain_exposed_ms", "ddp_exposed_ms", "cnntrain_img_s_rounds", "ddp_img_s_rounds", "model", "shape",
        "batch", "threads", "bucket_mb", "first_bucket_mb", "backend", "rounds", "load"]
out = []
for n, rate, c, d, cm, cx, dx, cr, dr in rows:
    c, d = float(c), float(d)
    out.append([n, rate, f"{c:.1f}", f"{d:.1f}", eff("c", n, rate, c), eff("d", n, rate, d), cm, cx,
                f"{float(dx):.1f}", cr, dr, model, shape, batch, threads, bmb, fbmb, backend, rounds, load])
with open(csv_path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(cols)
    w.writerows(out)
lines = ["| hosts | rate | cnntrain images/s | DDP images/s | cnntrain / DDP | cnntrain efficiency | DDP efficiency "
         "| cnntrain comm / exposed ms | DDP exposed ms |",
         "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
for r in out:
    ratio = float(r[2]) / float(r[3]) if float(r[3]) > 0 else 0
    lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {ratio:.2f}x | {r[4] or '-'} | {r[5] or '-'} "
                 f"| {r[6]} / {r[7]} | {r[8]} |")
open(md_path, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print(f"\nCSV: {csv_path}")
PY
