#!/usr/bin/env bash
# tests/test_imagefolder.sh - the image-folder path end to end: the
# to_imagefolder tool writes Fashion-MNIST (a slice) as PNG files; the trainer
# trains on them, names and counts a corrupt file without stopping, leaves a
# FIFO among the images out with a warning, and gives
# clear errors for a missing root and for train/val trees whose classes
# differ; uint8 batches train as float batches do; a JPEG tree with the ImageNet-style resized crop trains; two ranks
# under mpirun share the listing; --bench-data reports the loader's speed,
# its threads on all the process's CPUs even under OMP_PROC_BIND.
# Run from the repository root after `make`.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
tool=./build/tools/to_imagefolder
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
small=(data.kind=imagefolder train.batch_size=16 train.epochs=1 train.max_steps=6 train.log_every=3 train.threads=1
       data.workers=2 optim.lr=0.05)

out=$($tool idx /usr/share/datasets/fashion-mnist "$tmp/fpng" --limit 400 2>&1)
check "to_imagefolder idx: exits 0" test $? -eq 0
check "to_imagefolder idx: 10 class folders, 400 training PNGs" \
    test "$(ls "$tmp/fpng/train" | wc -l)" -eq 10 -a "$(find "$tmp/fpng/train" -name '*.png' | wc -l)" -eq 400
check "to_imagefolder idx: 400 validation PNGs" test "$(find "$tmp/fpng/val" -name '*.png' | wc -l)" -eq 400
out=$($tool idx /usr/share/datasets/fashion-mnist "$tmp/fpng" --limit 10 2>&1)
rc=$?
check "to_imagefolder refuses an existing output (exit 1, names it)" \
    bash -c "[ $rc -eq 1 ] && grep -q 'fpng/train already exists' <<<\"\$1\"" _ "$out"
$tool bogus a b >/dev/null 2>&1
check "to_imagefolder: unknown kind exits 2" test $? -eq 2
$tool idx /usr/share/datasets/fashion-mnist "$tmp/x" --format gif >/dev/null 2>&1
check "to_imagefolder: bad --format exits 2" test $? -eq 2
$tool synthetic "$tmp/y" --classes 10 --val 8 >/dev/null 2>&1
check "to_imagefolder synthetic: fewer images than classes exits 2" test $? -eq 2

# The first training image, as the tool wrote it, is the first IDX image.
python3 - "$tmp/fpng" <<'PY' >/dev/null
import gzip, os, struct, sys, zlib
root = sys.argv[1]
def png_pixels(path):
    data = open(path, 'rb').read()
    assert data[:8] == b'\x89PNG\r\n\x1a\n'
    pos, idat, w, h = 8, b'', 0, 0
    while pos < len(data):
        n, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b'IHDR':
            w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
            assert depth == 8 and ctype == 0, (depth, ctype)
        if kind == b'IDAT':
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    rows, prev = [], bytes(w)
    for y in range(h):
        f, line = raw[y * (w + 1)], bytearray(raw[y * (w + 1) + 1:(y + 1) * (w + 1)])
        for x in range(w):
            a = line[x - 1] if x else 0
            b, c = prev[x], (prev[x - 1] if x else 0)
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line)); prev = bytes(line)
    return b''.join(rows)
src = '/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz'
images = gzip.open(src).read()[16:16 + 784]
labels = gzip.open(src.replace('images-idx3', 'labels-idx1')).read()[8]
path = os.path.join(root, 'train', str(labels), '000.png')
assert png_pixels(path) == images, path
PY
check "to_imagefolder: PNG pixels and class folder equal the IDX image and label" test $? -eq 0

out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.root="$tmp/fpng" train.out_dir="$tmp/r1" 2>&1)
rc=$?
check "imagefolder training exits 0" test $rc -eq 0
check "imagefolder: listing logged with counts" grep -q "listed $tmp/fpng/train (400 images in 10 classes) and $tmp/fpng/val (400 images)" <<<"$out"
check "imagefolder: 1x28x28 input, 10 classes" grep -q "imagefolder $tmp/fpng, 400 train / 400 test images of 1x28x28, 10 classes" <<<"$out"
check "imagefolder: epoch record has skipped_images 0" grep -q '"skipped_images":0' "$tmp/r1/metrics.jsonl"
# uint8 batches (normalised by the backend) train exactly as float batches.
./trainer configs/resnet20-fashion.ini "${small[@]}" data.root="$tmp/fpng" data.batch_dtype=uint8 \
    train.out_dir="$tmp/r1u8" > /dev/null 2>&1
check "data.batch_dtype=uint8: the same losses, step by step, as float batches" \
    diff <(grep -o '"loss":[^,]*' "$tmp/r1/metrics.jsonl") <(grep -o '"loss":[^,]*' "$tmp/r1u8/metrics.jsonl")
check "data.batch_dtype=uint8: and the same test accuracy" \
    diff <(grep -o '"top1":[^,]*' "$tmp/r1/metrics.jsonl") <(grep -o '"top1":[^,]*' "$tmp/r1u8/metrics.jsonl")

# The remainder: 400 images in batches of 48 make 8 full steps (16 images
# dropped) or, wrapping around, 9.
for rem in drop:8 wrap:9; do
    out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" train.batch_size=48 train.max_steps=1 \
          data.remainder=${rem%%:*} data.root="$tmp/fpng" train.out_dir="$tmp/rem" 2>&1)
    check "data.remainder=${rem%%:*}: ${rem##*:} steps per epoch" grep -q "1 epochs x ${rem##*:} steps (batch 48)" <<<"$out"
done

# A corrupt training image and a corrupt validation image: one warning each,
# counted in every epoch (the second evaluation had counted 0), and the run
# still finishes.
first=$(ls "$tmp/fpng/train/3" | head -1)
head -c 30 "$tmp/fpng/train/3/$first" >"$tmp/cut" && mv "$tmp/cut" "$tmp/fpng/train/3/$first"
echo "not a png" >"$tmp/fpng/val/5/$(ls "$tmp/fpng/val/5" | head -1)"
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" train.epochs=2 train.max_steps=50 data.root="$tmp/fpng" \
      train.out_dir="$tmp/r2" 2>&1)
rc=$?
check "corrupt images: training exits 0" test $rc -eq 0
check "corrupt images: the training file is named once" \
    test "$(grep -c "skipping unreadable image: $tmp/fpng/train/3/$first" <<<"$out")" -eq 1
check "corrupt images: the validation file is named once" \
    test "$(grep -c "skipping unreadable image: $tmp/fpng/val/5/" <<<"$out")" -eq 1
for e in 1 2; do
    check "corrupt images: counted in epoch $e's summary" \
        grep -q "epoch $e/2: 1 unreadable training image replaced, 1 unreadable test image left out" <<<"$out"
done
check "corrupt images: counted in both epochs' metrics.jsonl records" \
    test "$(grep -c '"skipped_images":1,"skipped_eval_images":1' "$tmp/r2/metrics.jsonl")" -eq 2

# A validation set whose every image is unreadable evaluates nothing: an
# error naming the set, never "test loss 0.0000, top-1 0.00%" and exit 0.
for c in $(ls "$tmp/fpng/val"); do
    mkdir -p "$tmp/badval/$c"
    echo "not a png" >"$tmp/badval/$c/only.png"
done
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.train_root="$tmp/fpng/train" \
      data.val_root="$tmp/badval" train.out_dir="$tmp/r5" 2>&1)
rc=$?
check "unreadable validation set: exit 1" test $rc -eq 1
check "unreadable validation set: the error names the set and says nothing was evaluated" \
    grep -q "error: epoch 1/1, test set $tmp/badval: the evaluation read no test image" <<<"$out"
check "unreadable validation set: no test accuracy reported" bash -c '! grep -q "top-1" <<<"$1"' _ "$out"

# Errors: a missing root, train/val with different classes.
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.root="$tmp/nowhere" train.out_dir="$tmp/r3" 2>&1)
rc=$?
check "missing root: exit 1 naming the path" bash -c "[ $rc -eq 1 ] && grep -q '$tmp/nowhere/train' <<<\"\$1\"" _ "$out"
mkdir -p "$tmp/mis/val"
cp -r "$tmp/fpng/val/0" "$tmp/fpng/val/1" "$tmp/mis/val/"
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.train_root="$tmp/fpng/train" data.val_root="$tmp/mis/val" \
      train.out_dir="$tmp/r4" 2>&1)
rc=$?
check "train/val class mismatch: exit 1 naming both trees" \
    bash -c "[ $rc -eq 1 ] && grep -q 'do not have the same classes: 10 class folders and 2' <<<\"\$1\"" _ "$out"
mkdir -p "$tmp/emptycls/train/a" "$tmp/emptycls/train/b" && cp "$tmp/fpng/train/0/"0*.png "$tmp/emptycls/train/a/"
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.root="$tmp/emptycls" train.out_dir="$tmp/r5" 2>&1)
check "empty class folder: the error names it" grep -q "class folder 'b' holds no images" <<<"$out"
out=$(./trainer --summary configs/resnet20-fashion.ini data.kind=synthetic data.synthetic_shape=3x32x32 2>&1)
check "data.image_size/channels do not apply to other kinds (synthetic 3x32x32 from the 1x28x28 config)" \
    grep -q "3x32x32" <<<"$out"

# JPEG tree at another size, RGB, ImageNet-style resized crop.
$tool synthetic "$tmp/jpg" --classes 4 --train 64 --val 16 --size 60x45 >/dev/null
check "to_imagefolder synthetic: 64 JPEGs" test "$(find "$tmp/jpg/train" -name '*.jpg' | wc -l)" -eq 64
# its images are made in parallel, each from its own stream: the same files on 1 thread and on 3
OMP_NUM_THREADS=1 $tool synthetic "$tmp/syn1" --classes 3 --train 24 --val 6 --size 40x30 >/dev/null
OMP_NUM_THREADS=3 $tool synthetic "$tmp/syn3" --classes 3 --train 24 --val 6 --size 40x30 >/dev/null
check "to_imagefolder synthetic: the same 30 files on 1 thread and on 3" \
    bash -c 'diff -r "$1" "$2" >/dev/null && [ "$(find "$1" -name "*.jpg" | wc -l)" -eq 30 ]' _ "$tmp/syn1" "$tmp/syn3"
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.root="$tmp/jpg" data.image_size=32 data.channels=3 \
      data.crop=resized train.out_dir="$tmp/r7" 2>&1)
rc=$?
check "JPEG tree, resized crop, 3x32x32: exits 0" test $rc -eq 0
check "JPEG tree: 3x32x32 input, 4 classes" grep -q "64 train / 16 test images of 3x32x32, 4 classes" <<<"$out"

# data.decoder = nvjpeg needs a GPU: refused by name where there is none.
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.root="$tmp/jpg" data.decoder=nvjpeg train.device=cpu \
      train.out_dir="$tmp/r12" 2>&1)
rc=$?
check "data.decoder=nvjpeg with train.device=cpu: exit 2 naming both keys" \
    bash -c "[ $rc -eq 2 ] && grep -q 'data.decoder = nvjpeg decodes on the rank.s GPU: it needs train.device' <<<\"\$1\"" _ "$out"
if ! ./trainer --devices 2>&1 | grep -q '^cuda:[0-9]'; then
    out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" data.root="$tmp/jpg" data.decoder=nvjpeg \
          train.out_dir="$tmp/r13" 2>&1)
    rc=$?
    check "data.decoder=nvjpeg on a machine without a GPU: exit 1 naming the key" \
        bash -c "[ $rc -eq 1 ] && grep -q 'data.decoder = nvjpeg' <<<\"\$1\"" _ "$out"
    out=$(./trainer --bench-data configs/resnet20-fashion.ini data.kind=imagefolder data.root="$tmp/jpg" \
          data.decoder=nvjpeg 2>&1)
    rc=$?
    check "--bench-data data.decoder=nvjpeg without a GPU: exit 1 naming the key" \
        bash -c "[ $rc -eq 1 ] && grep -q 'data.decoder = nvjpeg' <<<\"\$1\"" _ "$out"
fi

# A loader that cannot keep up (one thread decoding 1200x900 JPEGs at full
# size for a 16x16 ResNet-20): one warning in the epoch, though both of its
# progress lines starve (data wait 80-110 ms of a 95-160 ms step here),
# naming data.workers; none with data.wait_warn=0.
$tool synthetic "$tmp/bigjpg" --classes 2 --train 96 --val 8 --size 1200x900 >/dev/null
slow=(data.root="$tmp/bigjpg" data.image_size=16 data.channels=3 data.crop=resized data.workers=1 data.prefetch=1
      data.jpeg_scaling=false)
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" "${slow[@]}" train.out_dir="$tmp/r10" 2>&1)
check "a slow loader: one warning in the epoch naming data.workers" \
    test "$(grep -c "the loader's 1 thread (data.workers) cannot keep up; raise data.workers" <<<"$out")" -eq 1
out=$(./trainer configs/resnet20-fashion.ini "${small[@]}" "${slow[@]}" data.wait_warn=0 train.out_dir="$tmp/r11" 2>&1)
check "a slow loader with data.wait_warn=0: no warning" bash -c '! grep -q "cannot keep up" <<<"$1"' _ "$out"

# A FIFO among the images (a plain open of it waits for a writer forever) is
# left out of the listing with a warning naming it; the run goes on. timeout:
# a hang fails the check instead of stalling the script.
cls=$(ls "$tmp/jpg/train" | head -1)
mkfifo "$tmp/jpg/train/$cls/zz-pipe.jpg"
out=$(timeout 120 ./trainer configs/resnet20-fashion.ini "${small[@]}" data.root="$tmp/jpg" data.image_size=32 \
      data.channels=3 data.crop=resized train.max_steps=1 train.out_dir="$tmp/r9" 2>&1)
rc=$?
check "a FIFO among the images: exits 0" test $rc -eq 0
check "a FIFO among the images: left out with a warning naming it" \
    grep -q "skipping $tmp/jpg/train/$cls/zz-pipe.jpg while listing: it is a FIFO (named pipe), not a regular file" <<<"$out"
check "a FIFO among the images: not counted (64 train images)" grep -q "64 train / 16 test images" <<<"$out"
rm -f "$tmp/jpg/train/$cls/zz-pipe.jpg"

# Two ranks: rank 0 lists and broadcasts; the job trains with identical ranks.
if command -v mpirun >/dev/null 2>&1 && ./trainer --version | grep -q "^mpi: built in"; then
    out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 ./trainer configs/resnet20-fashion.ini "${small[@]}" \
          data.root="$tmp/fpng" data.workers=1 train.out_dir="$tmp/r8" 2>&1)
    rc=$?
    check "2 ranks on an image folder: exit 0" test $rc -eq 0
    check "2 ranks: listed once" test "$(grep -c "listed $tmp/fpng/train" <<<"$out")" -eq 1
    check "2 ranks: parameters bit-identical" grep -q "parameters bit-identical on all 2 ranks" <<<"$out"
fi

out=$(./trainer --bench-data configs/resnet20-fashion.ini data.kind=imagefolder data.root="$tmp/fpng" 2>&1)
rc=$?
check "--bench-data: exit 0 with a row for 1 worker" bash -c "[ $rc -eq 0 ] && grep -qE '^ +train +1 +[0-9.]+ ' <<<\"\$1\"" _ "$out"
check "--bench-data: and the evaluation transform's" grep -qE '^ +eval +1 +[0-9.]+ ' <<<"$out"
# OMP_PROC_BIND=true makes libgomp pin the main thread to one CPU before
# main(); the loader threads must still get every CPU the process has.
# (nproc without OMP_NUM_THREADS, which this script sets and nproc obeys)
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
out=$(OMP_PROC_BIND=true ./trainer --bench-data configs/resnet20-fashion.ini 2>&1)
check "OMP_PROC_BIND=true: loader threads on all $cpus of the process's CPUs" \
    grep -q "loader threads bound to the process's CPUs .* ($cpus of " <<<"$out"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
