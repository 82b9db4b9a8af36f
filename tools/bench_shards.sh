#!/usr/bin/env bash
# tools/bench_shards.sh - reading a data set from a cold page cache: an image
# folder against the same images packed as shard sets (issue 31, item 6).
#
#   tools/bench_shards.sh FOLDER SHARDS [--rounds R] [--size S] [--blocks "KEY=V ..."] [--out FILE]
#
# FOLDER holds train/ and val/ image folders; SHARDS the same packed by
#   build/tools/make_shards FOLDER/train SHARDS/train
#   build/tools/make_shards FOLDER/val SHARDS/val
# Each round, in turns, for the folder, the shards read in random order and
# the shards read in blocks: sync, drop the page cache (root:
# /proc/sys/vm/drop_caches), then the first row of
#   ./trainer --bench-data configs/resnet50.ini data.kind=... data.image_size=S
# (the train transform, one loader thread, 3 s after one warm-up batch: the
# images/s a rank gets while the files come from the disk); then the same
# again with the cache as that run left it (warm). data.image_size S (default
# 32) makes the decode cheap (1/8-size DCT decoding), so the reads show;
# --size 224 gives the full train transform. --blocks sets the block order's
# keys (default "data.block_mb=1 data.shuffle_blocks=4": a 4 MB window, the
# share of a small test set that the default 512 MB window is of ImageNet's
# 140 GB, since the first window of an epoch is read before the rest).
# Prints the CPU and disk, then a
# markdown table of medians: cold and warm images/s per source, and cold
# against the folder's. Exit 0; 1 when a run fails; 2 for usage or without
# the right to drop the page cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rounds=3
size=32
blocks="data.block_mb=1 data.shuffle_blocks=4"
out=""
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 2 ] || usage
folder=$1
shards=$2
shift 2
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --blocks) blocks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) usage ;;
    esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] ||
    { echo "bench_shards.sh: --rounds: a whole number >= 1, not '$rounds'" >&2; exit 2; }
[ -d "$folder/train" ] || { echo "bench_shards.sh: $folder/train is not a directory" >&2; exit 2; }
[ -f "$shards/train/index.cnts" ] ||
    { echo "bench_shards.sh: $shards/train is not a shard set (no index.cnts)" >&2; exit 2; }
[ -w /proc/sys/vm/drop_caches ] || { echo "bench_shards.sh: cannot drop the page cache (run as root)" >&2; exit 2; }
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

declare -A args=(
    [folder]="data.kind=imagefolder data.root=$folder"
    [random]="data.kind=shards data.root=$shards data.read_order=random"
    [blocks]="data.kind=shards data.root=$shards data.read_order=blocks $blocks"
)
run() { # SOURCE -> images/s of the first row
    # shellcheck disable=SC2086
    if ! ./trainer --bench-data configs/resnet50.ini ${args[$1]} data.image_size="$size" data.workers=1 \
        train.batch_size=64 > "$tmp/out" 2>&1; then
        cat "$tmp/out" >&2
        exit 1
    fi
    awk '$1 == "train" && $2 == 1 && NF >= 6 { print $3; exit }' "$tmp/out"
}
source "$here/median.sh" # median V... or values on stdin

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
disk=$(df --output=source,fstype "$folder" | tail -1)
n=$(find "$folder/train" -type f | wc -l)
mb=$(du -sm "$folder/train" | cut -f1)
echo "CPU: $cpu ($(nproc) cores); disk: $disk; $n training files, $mb MB; image_size $size; blocks: $blocks;" \
    "$rounds rounds"
for r in $(seq "$rounds"); do
    for s in folder random blocks; do
        sync
        echo 3 > /proc/sys/vm/drop_caches
        c=$(run "$s")
        w=$(run "$s")
        [ -n "$c" ] && [ -n "$w" ] || { echo "bench_shards.sh: no train row in --bench-data's output" >&2; exit 1; }
        echo "$c" >> "$tmp/$s.cold"
        echo "$w" >> "$tmp/$s.warm"
        echo "  round $r $s: cold $c, warm $w img/s" >&2
    done
done
{
    echo "| source | cold img/s | warm img/s | cold, against the folder |"
    echo "|---|---:|---:|---:|"
    f=$(median < "$tmp/folder.cold")
    for s in folder random blocks; do
        c=$(median < "$tmp/$s.cold")
        w=$(median < "$tmp/$s.warm")
        name=${s/random/shards, read_order=random}
        name=${name/blocks/shards, read_order=blocks}
        printf "| %s | %.1f | %.1f | %.2fx |\n" "$name" "$c" "$w" "$(awk -v a="$c" -v b="$f" 'BEGIN { print a / b }')"
    done
} | tee "$tmp/table"
[ -z "$out" ] || cp "$tmp/table" "$out"
