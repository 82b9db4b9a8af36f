#!/usr/bin/env bash
# tools/bench_ps.sh - allreduce against parameter servers on shaped links
# (issue 16): the namespace cluster of tools/cluster.sh, one rank per host,
# every byte of every rank on its own rate-limited link.
#
#   tools/bench_ps.sh [--rates "100mbit 1gbit"] [--workers "2 3 4"] [--emulate]
#                     [--steps S] [--rounds R] [--out FILE]
#   tools/bench_ps.sh --curves DIR [--rates RATE] [--epochs E] [--workers W]
#
# For each link rate and number of workers W (default 2), in turns for R
# rounds (default 2), ResNet-20 on Fashion-MNIST (batch 32 per worker, 1
# thread per rank, S steps, default 40) in four modes:
#   allreduce          W hosts, our ring (dist.backend = ring)
#   sync PS, 1 server  W + 1 hosts
#   sync PS, 2 servers W + 2 hosts
#   async PS, 1 server W + 1 hosts
# and prints a markdown table: the workers' images/s (the median over rounds
# of the median of the progress windows after the first) and the bytes each
# kind of host sent and received per step, read from its link's counters
# (the root side of its veth: what the host sent is what that end received),
# so they include the start-up broadcast and the final evaluation (a few
# percent at 40 steps). Beside each synchronous row, build/tools/simulate's
# prediction from a profile taken here at the same batch, retargeted to the
# measured single-host speed (--images-per-s of one unshaped worker), over
# the network model that tools/validate_cluster.py fitted on this cluster's
# links (docs/scaling.md): --bw the rate times eta (--eta, default 0.89: the
# share of tc's rate the links deliver) and --latency alpha (--alpha-us,
# default 0 us per message).
#
# --emulate: every worker's compute is that profile's times, slept
# (train.emulate_compute, on synthetic images of Fashion-MNIST's shape)
# instead of computed, so W workers on a machine with fewer cores still
# each compute as fast as one alone, and only the links differ between
# modes; the gradients, pushes, pulls and the servers' updates are real. The
# simulator then predicts from the same profile, not retargeted.
#
# --curves DIR: accuracy against time instead. The quick start's recipe
# (configs/resnet20-fashion.ini: batch 128 per worker, all of Fashion-MNIST,
# E epochs, default 15) with W workers (default 2) at the first rate of
# --rates, one mode after the other: allreduce, synchronous PS and
# asynchronous PS with 1 server. The runs are kept in DIR/allreduce,
# DIR/sync-ps, DIR/async-ps (metrics.jsonl, logs in DIR/*.log), and
# tools/plot_metrics.py draws DIR/curves.png (test top-1 and training loss
# against time and against epochs) and DIR/staleness.png (the async run's
# staleness histogram).
#
# Needs root (the cluster), MPI, and `make` done. Makes cluster "bps" on
# 10.78.0.0/24 (or CNT_CLUSTER_PREFIX on CNT_CLUSTER_NET) and removes it at
# the end, also on failure.
set -u
cd "$(dirname "$0")/.."
rates="100mbit 1gbit"
steps=40
emulate=0
rounds=2
out=""
curves=""
epochs=15
workers=""
eta=0.89
alpha_us=0
while [ $# -gt 0 ]; do
    case $1 in
    --curves) curves=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --eta) eta=$2; shift 2 ;;
    --alpha-us) alpha_us=$2; shift 2 ;;
    --emulate) emulate=1; shift ;;
    --rates) rates=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: tools/bench_ps.sh [--rates \"R1 R2\"] [--workers \"W1 W2\"] [--emulate] [--steps S] [--rounds R] [--eta E] [--alpha-us A] [--out FILE]" >&2
       echo "       tools/bench_ps.sh --curves DIR [--rates RATE] [--epochs E] [--workers W]" >&2; exit 2 ;;
    esac
done
workers=${workers:-2}
python3 -c 'import sys; e, a = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (0 < e <= 1 and a >= 0))' \
    "$eta" "$alpha_us" 2>/dev/null || { echo "tools/bench_ps.sh: --eta takes a share in (0, 1], --alpha-us microseconds >= 0; got '$eta', '$alpha_us'" >&2; exit 2; }
[ -n "$curves" ] && [[ $workers == *" "* ]] && { echo "tools/bench_ps.sh: --curves takes one number of workers" >&2; exit 2; }
maxw=0
for w in $workers; do
    case $w in ''|*[!0-9]*|0|1) echo "tools/bench_ps.sh: --workers takes numbers of at least 2, got '$w'" >&2; exit 2 ;; esac
    [ "$w" -gt "$maxw" ] && maxw=$w
done
# the cluster's names and subnet (CNT_CLUSTER_PREFIX, CNT_CLUSTER_NET: tests pick free ones)
prefix=${CNT_CLUSTER_PREFIX:-bps}
C=(tools/cluster.sh --prefix "$prefix" --net "${CNT_CLUSTER_NET:-10.78.0}")
tmp=$(mktemp -d)
trap '"${C[@]}" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
"${C[@]}" up $((maxw + 2)) >/dev/null || exit 1
read -r -a margs <<<"$("${C[@]}" mpirun-args)"
[ "$(id -u)" = 0 ] && margs=(--allow-run-as-root "${margs[@]}")

if [ -n "$curves" ]; then
    rate=${rates%% *}
    mkdir -p "$curves" || exit 1
    "${C[@]}" shape "$rate" >/dev/null || exit 1
    for m in "allreduce|$workers|dist.backend=ring" "sync-ps|$((workers + 1))|dist.mode=ps dist.ps_servers=1" \
             "async-ps|$((workers + 1))|dist.mode=ps dist.ps_servers=1 dist.ps_sync=false"; do
        IFS='|' read -r name np keys <<<"$m"
        rm -rf "${curves:?}/$name"
        echo "tools/bench_ps.sh: $name, $workers workers, $rate links, $epochs epochs: $curves/$name.log" >&2
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=1 timeout 7200 mpirun "${margs[@]}" -np "$np" -x OMP_NUM_THREADS ./trainer \
            configs/resnet20-fashion.ini train.device=cpu train.threads=1 data.workers=1 train.epochs="$epochs" \
            $keys train.out_dir="$(realpath "$curves")/$name" >"$curves/$name.log" 2>&1 || {
            echo "tools/bench_ps.sh: $name failed:" >&2
            tail -n 15 "$curves/$name.log" >&2
            exit 1
        }
        grep '^.*finished:' "$curves/$name.log" >&2
    done
    python3 tools/plot_metrics.py -o "$curves/curves.png" --x epoch,time --panels top1,loss \
        --title "ResNet-20 on Fashion-MNIST, $workers workers, $rate links" \
        "$curves/allreduce=allreduce (ring)" "$curves/sync-ps=sync PS, 1 server" "$curves/async-ps=async PS, 1 server" \
        --staleness "$curves/staleness.png" || exit 1
    exit 0
fi
common=(configs/resnet20-fashion.ini train.device=cpu train.threads=1 data.workers=1 train.batch_size=32
        train.epochs=1 train.max_steps=$steps train.log_every=10 data.test_limit=200 checkpoint.every_epochs=0)
data=()
[ $emulate = 1 ] && data=(data.kind=synthetic data.synthetic_shape=1x28x28 data.synthetic_classes=10 data.synthetic_test=64)

# one unshaped worker's speed, and a profile at this batch, for the simulator (and the emulation)
timeout 300 ./trainer --profile configs/resnet20-fashion.ini "$tmp/p.json" train.device=cpu train.threads=1 \
    train.batch_size=32 train.max_steps=3 data.train_limit=256 data.test_limit=64 >/dev/null 2>&1 || exit 1
[ $emulate = 1 ] && data+=(train.emulate_compute="$tmp/p.json")
# enough training images for W workers' steps
limit() {
    if [ $emulate = 1 ]; then echo "data.synthetic_train=$(($1 * 32 * steps + 64))"
    else echo "data.train_limit=$(($1 * 32 * steps + 64))"; fi
}
timeout 300 ./trainer "${common[@]}" "${data[@]}" "$(limit 1)" train.out_dir="$tmp/one" >/dev/null 2>&1 || exit 1
one=$(python3 - "$tmp/one/metrics.jsonl" <<'PY'
import json, statistics, sys
r = [json.loads(l)["img_per_sec"] for l in open(sys.argv[1]) if '"kind":"step"' in l]
print(statistics.median(r[1:] or r))
PY
)

# bytes each host has sent and received so far (its veth's root end counts the other way round)
counters() {
    for k in $(seq 0 $((maxw + 1))); do
        echo "$(cat "/sys/class/net/$prefix-v$k/statistics/rx_bytes") $(cat "/sys/class/net/$prefix-v$k/statistics/tx_bytes")"
    done
}

: >"$tmp/rows"
for rate in $rates; do
    "${C[@]}" shape "$rate" >/dev/null || exit 1
    for round in $(seq 1 "$rounds"); do
        for w in $workers; do
            for m in "allreduce|$w|dist.backend=ring" "sync PS, 1 server|$((w + 1))|dist.mode=ps dist.ps_servers=1" \
                     "sync PS, 2 servers|$((w + 2))|dist.mode=ps dist.ps_servers=2" \
                     "async PS, 1 server|$((w + 1))|dist.mode=ps dist.ps_sync=false"; do
                IFS='|' read -r name np keys <<<"$m"
                d="$tmp/run"
                rm -rf "$d"
                counters >"$tmp/c0"
                # shellcheck disable=SC2086
                OMP_NUM_THREADS=1 timeout 600 mpirun "${margs[@]}" -np "$np" -x OMP_NUM_THREADS ./trainer "${common[@]}" \
                    "${data[@]}" "$(limit "$w")" $keys train.out_dir="$d" >"$tmp/log" 2>&1
                rc=$?
                counters >"$tmp/c1"
                if [ $rc -ne 0 ]; then
                    echo "tools/bench_ps.sh: $name, $w workers, at $rate failed (exit $rc):" >&2
                    tail -n 15 "$tmp/log" >&2
                    exit 1
                fi
                python3 - "$d/metrics.jsonl" "$tmp/c0" "$tmp/c1" "$rate" "$name" "$np" "$steps" "$w" >>"$tmp/rows" <<'PY'
import json, statistics, sys
f, c0, c1, rate, name, np_, steps, w = sys.argv[1:]
r = [json.loads(l)["img_per_sec"] for l in open(f) if '"kind":"step"' in l]
a = [list(map(int, l.split())) for l in open(c0)]
b = [list(map(int, l.split())) for l in open(c1)]
d = [(b[k][0] - a[k][0], b[k][1] - a[k][1]) for k in range(len(a))]
print(json.dumps({"rate": rate, "mode": name, "np": int(np_), "workers": int(w),
                  "ips": statistics.median(r[1:] or r), "bytes": d, "steps": int(steps)}))
PY
            done
        done
    done
done

python3 - "$tmp/rows" "$tmp/p.json" "$one" "$steps" "$rounds" "$emulate" "$eta" "$alpha_us" <<'PY' | tee ${out:+"$out"}
import collections, json, statistics, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
profile, one, steps, rounds = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
emulate = sys.argv[6] == "1"
eta, alpha_us = float(sys.argv[7]), float(sys.argv[8])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
compute = ("emulated compute (the profile's times, slept; synthetic 1x28x28 images)" if emulate
           else "real compute, 1 thread per rank")
print(f"CPU: {cpu}; ResNet-20 on Fashion-MNIST, batch 32 per worker, {compute}, {steps} steps, "
      f"{rounds} round(s); one unshaped worker: {one:.1f} img/s; predicted: build/tools/simulate --bw "
      f"RATE x {eta:g} --latency {alpha_us:g} (the link model of docs/scaling.md)")
print()
print("| link | workers | mode | hosts | img/s (workers) | predicted img/s | worker MiB/step out / in "
      "| server MiB/step out / in |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
groups = collections.OrderedDict()
for r in rows:
    groups.setdefault((r["rate"], r["workers"], r["mode"]), []).append(r)
rates = list(dict.fromkeys(r["rate"] for r in rows))


def gbit(rate):
    n = float(rate.rstrip("mbitg"))
    return n / 1000 if rate.endswith("mbit") else n


for (rate, w, mode), rs in sorted(groups.items(), key=lambda kv: (rates.index(kv[0][0]), kv[0][1])):
    np_ = rs[0]["np"]
    ips = statistics.median(r["ips"] for r in rs)
    mib = lambda v: v / steps / 1048576
    w_out = statistics.median(mib(r["bytes"][0][0]) for r in rs)
    w_in = statistics.median(mib(r["bytes"][0][1]) for r in rs)
    server = "-"
    if "PS" in mode:
        s_out = statistics.median(mib(r["bytes"][np_ - 1][0]) for r in rs)
        s_in = statistics.median(mib(r["bytes"][np_ - 1][1]) for r in rs)
        server = f"{s_out:.2f} / {s_in:.2f}"
    pred = "-"
    if not mode.startswith("async"):
        args = ["build/tools/simulate", profile, "--workers", str(w), "--bw", str(gbit(rate) * eta),
                "--latency", str(alpha_us)]
        if not emulate:
            args += ["--images-per-s", str(one)]
        if "PS" in mode:
            args += ["--ps-servers", "2" if "2 servers" in mode else "1"]
        for l in subprocess.run(args, capture_output=True, text=True).stdout.splitlines():
            f = l.split()
            if f and f[0] == str(w):
                pred = f"{float(f[2]):.1f}"
    print(f"| {rate} | {w} | {mode} | {np_} | {ips:.1f} | {pred} | {w_out:.2f} / {w_in:.2f} | {server} |")
PY
