#!/usr/bin/env bash
# tools/dev/ab_trainers.sh OLD NEW [ROUNDS] - the same CPU measurements on two
# trainer binaries, alternating (old, new, old, new, ...), so that a change's
# speed is a ratio measured in one sitting, on one machine, under the same
# load. Prints each round and then, per measurement, the medians and
# new/old.
#
# Measurements (each an img/s figure the trainer prints itself):
#   bench-*   `trainer --bench` (the training step, one process, synthetic
#             data) for ResNet-20 at 1x28x28 and 3x32x32, batch 128, on one
#             thread and on all, in the default layout;
#   train-1   the quick start's training loop (configs/resnet20-fashion.ini,
#             150 steps): the img/s of its last progress window;
#   train-2   the same as two ranks under mpirun (one thread each), when
#             mpirun is here.
# OLD and NEW: paths of two trainer binaries built from the commits compared
# (e.g. a `git worktree` of the older commit, built with `make trainer`).
# Runs from the repository root (configs/, the data); writes only under a
# temporary directory. Needs an otherwise idle machine: what else runs
# shows in the ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then
    echo "usage: tools/dev/ab_trainers.sh OLD_TRAINER NEW_TRAINER [ROUNDS]" >&2
    exit 2
fi
old=$1 new=$2 rounds=${3:-3}
for t in "$old" "$new"; do
    if [ ! -x "$t" ]; then
        echo "ab_trainers: '$t' is not an executable trainer" >&2
        exit 2
    fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# One measurement with binary $1: prints its img/s (empty when it failed).
measure() {
    local t=$1 what=$2
    case $what in
    bench-28-1) "$t" --bench resnet20 1x28x28 128 20 1 device=cpu ;;
    bench-28-all) "$t" --bench resnet20 1x28x28 128 20 0 device=cpu ;;
    bench-32-1) "$t" --bench resnet20 3x32x32 128 20 1 device=cpu ;;
    bench-32-all) "$t" --bench resnet20 3x32x32 128 20 0 device=cpu ;;
    train-1)
        rm -rf "$tmp/run"
        "$t" configs/resnet20-fashion.ini train.max_steps=150 train.log_every=50 data.test_limit=200 \
            train.out_dir="$tmp/run" 2>&1 | grep ' step 150/' ;;
    train-2)
        rm -rf "$tmp/run"
        mpirun -np 2 --oversubscribe --bind-to none "$t" configs/resnet20-fashion.ini train.max_steps=150 \
            train.log_every=50 data.test_limit=200 train.threads=1 train.out_dir="$tmp/run" 2>&1 | grep ' step 150/' ;;
    esac 2>/dev/null | grep -oE '[0-9.]+ img/s' | head -1 | cut -d' ' -f1
}

whats="bench-28-1 bench-28-all bench-32-1 bench-32-all train-1"
if command -v mpirun >/dev/null; then whats="$whats train-2"; fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "old: $old"
echo "new: $new"
for r in $(seq "$rounds"); do
    for what in $whats; do
        for side in old new; do
            t=$old
            [ "$side" = new ] && t=$new
            v=$(measure "$t" "$what")
            echo "$what $side ${v:-failed}" >>"$tmp/all"
            echo "round $r $what $side: ${v:-failed} img/s"
        done
    done
done
echo
printf '%-14s %12s %12s %9s\n' measurement "old img/s" "new img/s" new/old
for what in $whats; do
    o=$(awk -v w="$what" '$1 == w && $2 == "old" && $3 != "failed" {print $3}' "$tmp/all" | sort -g |
        awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}')
    n=$(awk -v w="$what" '$1 == w && $2 == "new" && $3 != "failed" {print $3}' "$tmp/all" | sort -g |
        awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}')
    ratio=$(awk -v o="${o:-0}" -v n="${n:-0}" 'BEGIN {if (o > 0 && n > 0) printf "%.3f", n / o; else print "-"}')
    printf '%-14s %12s %12s %9s\n' "$what" "${o:-failed}" "${n:-failed}" "$ratio"
done
