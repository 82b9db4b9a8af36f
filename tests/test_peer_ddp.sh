#!/usr/bin/env bash
# tests/test_peer_ddp.sh - the PyTorch DDP peer (tools/ddp_peer.py) and the
# side-by-side driver (tools/peer_ddp.sh) work: the torch model has cnntrain's
# parameter count or the peer refuses to run; one short call at 1 and 2 hosts
# (ResNet-20, batch 8, 1 warm-up + 2 timed steps, links 1gbit) runs both
# tools on the cluster, every DDP rank in its own host with cnntrain's bucket
# sizes, and writes the table (the ratio, and both tools' allreduce time not
# hidden by backward) and the CSV; the call removes its cluster. A second
# call at 2 hosts passes --cnt and --ddp on: both tools compress with
# PowerSGD, beside a busy loop (--load 1) that the call ends. The peer's
# transport alone (tools/gloo_allreduce.py) times a gloo allreduce at 2
# hosts. Checks that it works, not how fast: no timing is compared.
# Run from the repository root after `make`, as root, with PyTorch in
# $TORCH_PYTHON or /opt/torch-venv/bin/python (not a project dependency:
#   python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch torchvision).
# Prints "SKIPPED: ..." (and exits 0) without root, torch, MPI or network
# namespaces. Takes about 40 s on the development VM.
set -u
skip() { echo "SKIPPED: $*"; exit 0; }
py=${TORCH_PYTHON:-/opt/torch-venv/bin/python}
source "$(dirname "$0")/support/netns.sh" # need_cluster WHAT, cluster_names LETTERS OCTET
need_cluster "the DDP peer tests"
"$py" -c 'import torch, torchvision' 2> /dev/null ||
    skip "no PyTorch in $py (python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch torchvision, or set TORCH_PYTHON)"
cluster_names pd 79

tmp=$(mktemp -d)
trap 'tools/cluster.sh --prefix "$prefix" down > /dev/null 2>&1; rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
t_start=$(date +%s)

# 1. The parameter check: another count than cnntrain's stops the peer before
# any communication.
out=$("$py" tools/ddp_peer.py resnet20 3x32x32 2 --expect-params 269721 2>&1)
rc=$?
check "ddp_peer.py: resnet20 with 269721 expected parameters exits 1 (rc $rc)" test $rc -eq 1
check "ddp_peer.py: and says both counts" grep -q "has 269722 parameters in torch, 269721 in cnntrain: not the same model" <<< "$out"
out=$(tools/peer_ddp.sh --batch 0 2>&1)
check "peer_ddp.sh --batch 0: exits 2 naming the option" test $? -eq 2 -a -n "$(grep -- '--batch: a whole number' <<< "$out")"

# 2. One short call at 1 and 2 hosts.
t0=$(date +%s)
out=$(tools/peer_ddp.sh --model resnet20 --batch 8 --hosts "1 2" --rates 1gbit --rounds 1 --warmup 1 --steps 2 \
    --prefix "$prefix" --net "$net" --python "$py" --out "$tmp/out" 2>&1)
rc=$?
check "peer_ddp.sh at 1 and 2 hosts: exits 0 ($(($(date +%s) - t0)) s)" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 15 <<< "$out" | sed 's/^/    /'
check "both models have 269722 parameters" grep -q "batch 8 per rank, 269722 parameters in both" <<< "$out"
check "table: a row for 1 host with the ratio and efficiencies 1.000" \
    grep -qE '^\| 1 \| 1gbit \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| 1\.000 \| 1\.000 \|' <<< "$out"
check "table: a row for 2 hosts with both efficiencies and both tools' exposed allreduce" \
    grep -qE '^\| 2 \| 1gbit \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| [0-9]\.[0-9]{3} \| [0-9]\.[0-9]{3} \| [0-9.]+ / [0-9.]+ \| [0-9.]+ \|$' <<< "$out"
# DDP's exposed allreduce: from backward's last gradient to backward's return, one per timed step; at 1
# host (nothing to wait for) a small part of the step, at 2 hosts more than 0 and less than the step.
check "DDP: its exposed allreduce is measured per step, under 1/4 of the step at 1 host, in (0, step) at 2" \
    python3 -c '
import json, sys
def rec(path):
    r = [json.loads(l) for l in open(path) if l.startswith("{")][0]
    print("    %s: exposed %s ms, step %s ms" % (path.rsplit("/", 1)[1], r["median_exposed_ms"], r["median_step_ms"]))
    assert len(r["exposed_ms"]) == r["steps"]
    return r["median_exposed_ms"], r["median_step_ms"]
e1, s1 = rec(sys.argv[1])
e2, s2 = rec(sys.argv[2])
sys.exit(0 if 0 <= e1 < 0.25 * s1 and 0 < e2 < s2 else 1)' "$tmp/out/logs/ddp-1-1gbit-1.log" "$tmp/out/logs/ddp-2-1gbit-1.log"
check "CSV: a header and 2 rows" test "$(wc -l < "$tmp/out/peer_ddp.csv" 2> /dev/null)" = 3
check "cnntrain at 2 hosts: one rank on each, 2 buckets (25 MiB, first 1 MiB)" \
    grep -q "^dist: 2 ranks (1 on this node), global batch 16; gradients allreduced with ring in 2 buckets (25 MiB, first 1 MiB)" \
    "$tmp/out/logs/cnt-2-1gbit-1.log"
check "DDP at 2 hosts: world 2, buckets of 1 MiB then the rest (cnntrain's cut)" \
    grep -qE '"world": 2, .*"buckets_mib": \[1\.0, 0\.029\]' "$tmp/out/logs/ddp-2-1gbit-1.log"
# Both tools compressed: --cnt to cnntrain, --ddp to tools/ddp_peer.py (DDP's PowerSGD hook, one bucket: with
# several, torch's hook over gloo stops on a collective mismatch, docs/scaling.md); with --load 1, a busy loop
# beside them that the call ends
t0=$(date +%s)
busy() { pgrep -xc sha256sum || true; }
loops=$(busy)
out=$(tools/peer_ddp.sh --model resnet20 --batch 8 --hosts 2 --rates 1gbit --rounds 1 --warmup 2 --steps 2 \
    --prefix "$prefix" --net "$net" --python "$py" --out "$tmp/psgd" --cnt "dist.compress=powersgd dist.powersgd_start=1" \
    --ddp "--powersgd-rank 1 --powersgd-start 2 --bucket-mb 1000 --first-bucket-mb 1000" --load 1 2>&1)
rc=$?
check "peer_ddp.sh, both with PowerSGD: exits 0 ($(($(date +%s) - t0)) s)" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 15 <<< "$out" | sed 's/^/    /'
check "peer_ddp.sh --cnt: cnntrain compresses" \
    grep -q "^dist: 2 ranks.*PowerSGD rank 2 after 1 uncompressed step " "$tmp/psgd/logs/cnt-2-1gbit-1.log"
check "peer_ddp.sh --ddp: DDP registers its PowerSGD hook, in one bucket" bash -c \
    'grep -q "PowerSGD hook, rank 1, from iteration 2" "$1" && grep -q "\"buckets_mib\": \[1.029\]" "$1"' \
    _ "$tmp/psgd/logs/ddp-2-1gbit-1.log"
check "peer_ddp.sh --load 1: said in its first line and the CSV, the busy loop ended with the call" \
    test -n "$(grep "; a second job on the cores: 1 busy loop(s)" <<< "$out")" \
    -a "$(tail -n 1 "$tmp/psgd/peer_ddp.csv" 2> /dev/null | awk -F, '{sub(/\r$/, ""); print $NF}')" = 1 -a "$(busy)" = "$loops"
out=$(tools/peer_ddp.sh --load x 2>&1)
check "peer_ddp.sh --load x: exits 2 naming the option" test $? -eq 2 -a -n "$(grep -- '--load: a number' <<< "$out")"
check "the call removed its cluster" test -z "$(ip netns list | grep "^$prefix-")" -a ! -e "/run/cnt-cluster/$prefix"

# 3. The peer's transport alone (tools/gloo_allreduce.py): refused outside mpirun; at 2 hosts it times a
# gloo allreduce and prints the bus bandwidth
out=$("$py" tools/gloo_allreduce.py --master-addr "$net.1" 2>&1)
check "gloo_allreduce.py outside mpirun: exits 2 saying so" test $? -eq 2 -a -n "$(grep 'run it under mpirun' <<< "$out")"
tools/cluster.sh --prefix "$prefix" --net "$net" up 2 1gbit > /dev/null 2>&1
read -ra MA <<< "$(tools/cluster.sh --prefix "$prefix" --net "$net" mpirun-args)"
out=$(timeout 120 mpirun --allow-run-as-root "${MA[@]}" -np 2 "$py" tools/gloo_allreduce.py --mib 1 --iters 2 \
    --master-addr "$net.1" 2>&1)
check "gloo_allreduce.py at 2 hosts: a median time and a bus bandwidth" \
    grep -qE '^gloo allreduce, 2 ranks, 1 MiB: median [0-9.]+ ms of 2, bus bandwidth [0-9.]+ GB/s$' <<< "$out"
tools/cluster.sh --prefix "$prefix" --net "$net" down > /dev/null 2>&1

echo "    ($(($(date +%s) - t_start)) s in all)"
if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all DDP peer checks passed"
