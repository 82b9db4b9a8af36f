#!/usr/bin/env bash
# tests/test_shards.sh - shard sets end to end: make_shards packs an image
# folder (Fashion-MNIST written as PNGs by to_imagefolder); the trainer reads
# the set in the folder's order and trains exactly as from the folder; two
# ranks read a shuffled set in blocks with identical parameters; a damaged
# image is named and skipped; the ranks refuse together when one of them
# cannot open the set, or sees another copy of it; the tool's and the
# config's refusals. Run from the repository root after `make`.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
small=(train.batch_size=16 train.epochs=1 train.max_steps=6 train.log_every=3 train.threads=1 data.workers=2
       optim.lr=0.05)
ms=./build/tools/make_shards

./build/tools/to_imagefolder idx /usr/share/datasets/fashion-mnist "$tmp/fpng" --limit 400 > /dev/null 2>&1
check "to_imagefolder: a 400-image folder to pack" test "$(find "$tmp/fpng/train" -name '*.png' | wc -l)" -eq 400

out=$($ms "$tmp/fpng/train" "$tmp/set/train" --order listing --shard-mb 1 2>&1)
check "make_shards: exits 0, says what it wrote" grep -q "wrote 400 images (.* MB) in 1 shard to $tmp/set/train" <<<"$out"
$ms "$tmp/fpng/val" "$tmp/set/val" --order listing > /dev/null 2>&1
check "make_shards: the index and one shard" test -f "$tmp/set/train/index.cnts" -a -f "$tmp/set/train/shard-00000.cnts"
out=$($ms "$tmp/fpng/val" "$tmp/set/val" 2>&1)
rc=$?
check "make_shards: refuses a directory holding a set (exit 1, names it)" \
    bash -c "[ $rc -eq 1 ] && grep -q 'set/val already holds a shard set' <<<\"\$1\"" _ "$out"
$ms "$tmp/fpng/val" "$tmp/x" --order sideways > /dev/null 2>&1
check "make_shards: a bad --order exits 2" test $? -eq 2
$ms "$tmp/fpng/val" > /dev/null 2>&1
check "make_shards: a missing argument exits 2" test $? -eq 2
out=$($ms "$tmp/nowhere" "$tmp/y" 2>&1)
rc=$?
check "make_shards: a missing folder exits 1 naming it" bash -c "[ $rc -eq 1 ] && grep -q '$tmp/nowhere' <<<\"\$1\"" _ "$out"

# The folder's order, read in random order: the folder's run, loss for loss.
./trainer configs/resnet20-fashion.ini "${small[@]}" data.kind=imagefolder data.root="$tmp/fpng" \
    train.out_dir="$tmp/rf" > /dev/null 2>&1
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.kind=shards data.root="$tmp/set" \
      train.out_dir="$tmp/rs" 2>&1)
rc=$?
check "data.kind=shards: training exits 0" test $rc -eq 0
check "data.kind=shards: the sets opened, counted" \
    grep -q "opened the shard sets $tmp/set/train (400 images in 10 classes, 1 shards) and $tmp/set/val (400 images)" <<<"$out"
check "data.kind=shards: the folder's losses, step by step" \
    diff <(grep -o '"loss":[^,]*' "$tmp/rf/metrics.jsonl") <(grep -o '"loss":[^,]*' "$tmp/rs/metrics.jsonl")
check "data.kind=shards: and the folder's test accuracy" \
    diff <(grep -o '"top1":[^,]*' "$tmp/rf/metrics.jsonl") <(grep -o '"top1":[^,]*' "$tmp/rs/metrics.jsonl")

# Refusals of the configuration.
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.kind=shards data.root="$tmp/fpng" \
      train.out_dir="$tmp/r1" 2>&1)
rc=$?
check "data.kind=shards on an image folder: exit 1 naming index.cnts and make_shards" \
    bash -c "[ $rc -eq 1 ] && grep -q 'fpng/train/index.cnts' <<<\"\$1\" && grep -q make_shards <<<\"\$1\"" _ "$out"
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.kind=imagefolder data.root="$tmp/fpng" \
      data.read_order=blocks train.out_dir="$tmp/r2" 2>&1)
rc=$?
check "data.read_order=blocks on a folder: exit 2 naming the keys" \
    bash -c "[ $rc -eq 2 ] && grep -q 'data.read_order = blocks reads shard sets' <<<\"\$1\"" _ "$out"

# A damaged image: named (shard and file), skipped, counted; the run finishes.
cp -r "$tmp/set" "$tmp/bad"
python3 - "$tmp/bad/train/shard-00000.cnts" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[24 + 40] ^= 0x55  # inside the first image (after the 24-byte header)
open(p, 'wb').write(b)
PY
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.kind=shards data.root="$tmp/bad" \
      train.max_steps=25 train.out_dir="$tmp/r3" 2>&1)
rc=$?
check "a damaged image in a shard: training exits 0" test $rc -eq 0
check "a damaged image: named by shard and file, once" \
    test "$(grep -c "skipping unreadable image: $tmp/bad/train/shard-00000.cnts:0/[0-9]*.png: checksum mismatch" <<<"$out")" -eq 1
check "a damaged image: counted in metrics.jsonl" grep -q '"skipped_images":1,' "$tmp/r3/metrics.jsonl"

if command -v mpirun >/dev/null 2>&1 && ./trainer --version | grep -q "^mpi: built in"; then
    mpi=(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2)
    $ms "$tmp/fpng/train" "$tmp/shuf/train" --shard-mb 1 > /dev/null 2>&1
    $ms "$tmp/fpng/val" "$tmp/shuf/val" > /dev/null 2>&1
    out=$("${mpi[@]}" ./trainer configs/resnet20-fashion.ini "${small[@]}" data.kind=shards data.root="$tmp/shuf" \
          data.read_order=blocks data.block_mb=1 data.shuffle_blocks=2 data.workers=1 train.out_dir="$tmp/r4" 2>&1)
    rc=$?
    check "2 ranks, a shuffled set read in blocks: exit 0" test $rc -eq 0
    check "2 ranks, blocks: parameters bit-identical" grep -q "parameters bit-identical on all 2 ranks" <<<"$out"
    # Rank 1 in its own mount namespace, where the set's path holds another
    # copy of the set (another set id), or nothing: both ranks refuse.
    if unshare -m true 2> /dev/null; then
        $ms "$tmp/fpng/train" "$tmp/copy/train" --shard-mb 1 > /dev/null 2>&1
        $ms "$tmp/fpng/val" "$tmp/copy/val" > /dev/null 2>&1
        mkdir -p "$tmp/empty"
        for case in copy:"reads other shard sets at $tmp/shuf/train" empty:"rank 1 could not open the shard sets"; do
            args=(configs/resnet20-fashion.ini "${small[@]}" data.kind=shards data.root="$tmp/shuf" data.workers=1
                  train.out_dir="$tmp/r5")
            out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 ./trainer "${args[@]}" : -np 1 \
                  unshare -m sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' "$tmp/${case%%:*}" "$tmp/shuf" ./trainer \
                  "${args[@]}" 2>&1)
            rc=$?
            check "2 ranks, rank 1 sees ${case%%:*} at the set's path: exit non-zero, not a hang" \
                test $rc -ne 0 -a $rc -ne 124
            check "2 ranks, rank 1 sees ${case%%:*}: rank 0 says ${case#*:}" grep -q "${case#*:}" <<<"$out"
        done
    else
        echo "SKIPPED: two ranks seeing different sets (no mount namespaces here: unshare -m)"
    fi
fi
exit $fails
