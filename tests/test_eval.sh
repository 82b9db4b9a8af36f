#!/usr/bin/env bash
# tests/test_eval.sh - trainer --eval CONFIG WEIGHTS: a checkpoint, or its
# safetensors export, scored on the config's test set gives the scores the
# training run's last evaluation logged (the same weights, batch-norm
# statistics and test images), in one process and in two ranks under
# mpirun; it writes nothing in train.out_dir (so it runs beside the run that
# holds its lock); the refusals (no file, a checkpoint of another model, a
# safetensors file of another class count, a file of neither kind, bad
# arguments, a result that cannot be written) exit non-zero naming the file
# or the key. A checkpoint records the normalisation its run used: with
# data.mean and data.std auto, --eval scores with it (another
# data.train_limit, which would estimate others, scores the same; neither an
# image folder's training split nor an IDX set's training files are needed),
# and given values that differ are warned about.
# Run from the repository root after `make`.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
run() { out=$("$@" 2>&1); rc=$?; }
# strip_metadata IN OUT: a safetensors file's tensors written again without its __metadata__
strip_metadata() {
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__")
text = json.dumps(head, separators=(",", ":")).encode()
text += b" " * (-(8 + len(text)) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
}
C=(configs/resnet20-fashion.ini data.train_limit=256 data.test_limit=200 train.batch_size=32 train.epochs=1
   train.threads=1 data.workers=1 train.eval_batch_size=50)

timeout 300 ./trainer "${C[@]}" train.out_dir="$tmp/run" >"$tmp/run.log" 2>&1
check "the training run: exit 0, a checkpoint" test $? -eq 0 -a -f "$tmp/run/checkpoints/ckpt-000001.cnt"
ckpt=$tmp/run/checkpoints/ckpt-000001.cnt
# the run's last evaluation: "top-1 X%, top-5 Y%" as --eval prints it, and the loss
read -r want want_loss < <(python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l][-1]
print("top-1_{:.2f}%,_top-5_{:.2f}% {}".format(100 * r["top1"], 100 * r["top5"], r["eval_loss"]))' "$tmp/run/metrics.jsonl")
want=${want//_/ }
# the loss an --eval line printed
loss_of() { grep -oE '^eval: .*loss [0-9.]+' <<<"$1" | grep -oE '[0-9.]+$'; }

# The run's own out_dir stays untouched: --eval writes nothing there.
before=$(cd "$tmp/run" && find . -type f -printf '%p %s %T@\n' | sort | md5sum)
run timeout 120 ./trainer --eval "${C[@]}" "$ckpt" train.out_dir="$tmp/run"
check "--eval of the checkpoint: exit 0 (rc=$rc)" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 5 <<<"$out" | sed 's/^/    /'
check "--eval of the checkpoint: the training run's last top-1 and top-5 ($want)" \
    grep -qF "eval: $ckpt: 200 test images, $want, loss " <<<"$out"
check "--eval of the checkpoint: its loss $(loss_of "$out"), the run's $want_loss" close_to "$(loss_of "$out")" "$want_loss" 1e-3
check "--eval wrote nothing in train.out_dir" \
    test "$(cd "$tmp/run" && find . -type f -printf '%p %s %T@\n' | sort | md5sum)" = "$before"
run timeout 120 ./trainer --eval "${C[@]}" "$ckpt" train.out_dir="$tmp/none"
check "--eval does not create train.out_dir" test $rc -eq 0 -a ! -e "$tmp/none"
# the whole training set (no data.train_limit), whose mean and std differ from the 256 images' the run
# estimated: the checkpoint's normalisation is used, so the scores are the run's
run timeout 120 ./trainer --eval "${C[@]}" data.train_limit=0 "$ckpt"
check "--eval with another data.train_limit: normalised as the run was, said in the log" \
    grep -qE "^eval: normalised as the training run did, as .*ckpt-000001.cnt records it \(data.mean, data.std = auto\): data.mean=0\.[0-9]+ " \
    <<<"$out"
check "--eval with another data.train_limit: the run's last top-1 and top-5 ($want)" \
    grep -qF "eval: $ckpt: 200 test images, $want, loss " <<<"$out"
run timeout 120 ./trainer --eval "${C[@]}" data.mean=0.5 data.std=0.5 "$ckpt"
check "--eval with other data.mean and data.std than the run's: a warning naming both (rc=$rc)" \
    bash -c '[ $1 -eq 0 ] && grep -q "^warning: eval: data.mean = 0.5, data.std = 0.5: not what .*ckpt-000001.cnt was trained with" <<<"$2"' \
    _ $rc "$out"

./trainer --export "$ckpt" "$tmp/w.safetensors" >/dev/null 2>&1
run timeout 120 ./trainer --eval "${C[@]}" "$tmp/w.safetensors"
check "--eval of the safetensors export: the same top-1 and top-5 (rc=$rc)" \
    grep -qF "eval: $tmp/w.safetensors: 200 test images, $want, loss " <<<"$out"
check "--eval of the safetensors export: its loss $(loss_of "$out"), the run's $want_loss" \
    close_to "$(loss_of "$out")" "$want_loss" 1e-3

# Two ranks, each scoring its half: the same counts; the loss a mean of sums
# taken in another order; losses printed with 4 decimals, so within 1e-3.
run timeout 180 mpirun --oversubscribe --bind-to none -np 2 ./trainer --eval "${C[@]}" "$ckpt"
check "--eval in two ranks: exit 0 (rc=$rc), one result line" \
    test $rc -eq 0 -a "$(grep -c '^eval: .* test images, top-1' <<<"$out")" -eq 1
check "--eval in two ranks: top-1 and top-5 the one-process run's" grep -qF "200 test images, $want, loss " <<<"$out"
check "--eval in two ranks: loss $(loss_of "$out"), the run's $want_loss" close_to "$(loss_of "$out")" "$want_loss" 1e-3

# An in-memory set (IDX) is read whole, both splits, for training; --eval
# needs only the test files when the normalisation is known (given, or
# recorded in the checkpoint): a directory holding only t10k-* scores the same.
mkdir -p "$tmp/t10k" && cp /usr/share/datasets/fashion-mnist/t10k-* "$tmp/t10k/"
run timeout 120 ./trainer --eval "${C[@]}" data.root="$tmp/t10k" "$ckpt"
check "--eval of an IDX directory without its training files, data.mean = auto: the run's $want (rc=$rc)" \
    grep -qF "eval: $ckpt: 200 test images, $want, loss " <<<"$out"
[ $rc -eq 0 ] || tail -n 3 <<<"$out" | sed 's/^/    /'
run timeout 120 ./trainer --eval "${C[@]}" data.root="$tmp/t10k" "$tmp/w.safetensors"
check "--eval of the export, IDX without training files: the run's $want (rc=$rc)" \
    grep -qF "test images, $want, loss " <<<"$out"
strip_metadata "$tmp/w.safetensors" "$tmp/wbare.safetensors"
run timeout 120 ./trainer --eval "${C[@]}" data.root="$tmp/t10k" "$tmp/wbare.safetensors"
check "--eval, IDX without training files, no recorded mean, data.mean = auto: exit 1 naming the training file" \
    bash -c '[ $1 -eq 1 ] && grep -q "train-images" <<<"$2" && grep -q "data.mean" <<<"$2"' _ $rc "$out"

# An image folder, as ImageNet's val/ is scored: with data.mean and data.std
# given (the training run logs what it estimated), --eval lists only the test
# folder, so it runs where the training folder is absent; left to auto, a
# checkpoint's recorded normalisation serves the same, while a safetensors
# file (which records none) needs the training folder to estimate them, and
# says so.
./build/tools/to_imagefolder idx /usr/share/datasets/fashion-mnist "$tmp/f" --limit 64 >/dev/null 2>&1
F=(configs/resnet20-fashion.ini data.kind=imagefolder data.root="$tmp/f" train.batch_size=32 train.epochs=1
   train.threads=1 data.workers=1 train.eval_batch_size=50)
timeout 300 ./trainer "${F[@]}" train.out_dir="$tmp/frun" >"$tmp/frun.log" 2>&1
check "the image-folder run: exit 0, a checkpoint" test $? -eq 0 -a -f "$tmp/frun/checkpoints/ckpt-000001.cnt"
norm=$(grep -oE 'data\.mean=[^ ]+ data\.std=[^ ]+' "$tmp/frun.log")
check "the run logs the mean and std it estimated, as keys to give ($norm)" test -n "$norm"
fwant=$(grep -oE 'top-1 [0-9.]+%' "$tmp/frun.log" | tail -1)
mv "$tmp/f/train" "$tmp/f/train.away"
run timeout 120 ./trainer --eval "${F[@]}" $norm "$tmp/frun/checkpoints/ckpt-000001.cnt"
check "--eval, no training folder, data.mean and data.std given: exit 0 (rc=$rc)" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 5 <<<"$out" | sed 's/^/    /'
check "--eval, no training folder: the run's last $fwant" grep -qF "test images, $fwant, top-5" <<<"$out"
check "--eval, no training folder: only the test folder listed" grep -qF "listed only $tmp/f/val" <<<"$out"
run timeout 120 mpirun --oversubscribe --bind-to none -np 2 ./trainer --eval "${F[@]}" $norm \
    "$tmp/frun/checkpoints/ckpt-000001.cnt"
check "--eval, no training folder, two ranks: the run's last $fwant (rc=$rc)" \
    grep -qF "test images, $fwant, top-5" <<<"$out"
run timeout 120 ./trainer --eval "${F[@]}" "$tmp/frun/checkpoints/ckpt-000001.cnt"
check "--eval of a checkpoint, no training folder, data.mean = auto: the run's last $fwant (rc=$rc)" \
    bash -c 'grep -qF "test images, $1, top-5" <<<"$2" && grep -qF "listed only $3/val" <<<"$2"' _ "$fwant" "$out" "$tmp/f"
# its export carries the same in its metadata ("mean", "std"); a safetensors file without them (torchvision's
# own, say: the export's tensors written again without metadata) needs the training folder, and says so
./trainer --export "$tmp/frun/checkpoints/ckpt-000001.cnt" "$tmp/fw.safetensors" >/dev/null 2>&1
run timeout 120 ./trainer --eval "${F[@]}" "$tmp/fw.safetensors"
check "--eval of its export, no training folder, data.mean = auto: the run's last $fwant (rc=$rc)" \
    bash -c 'grep -qF "test images, $1, top-5" <<<"$2" && grep -q "^eval: normalised as the training run did" <<<"$2"' \
    _ "$fwant" "$out"
strip_metadata "$tmp/fw.safetensors" "$tmp/fbare.safetensors"
run timeout 120 ./trainer --eval "${F[@]}" "$tmp/fbare.safetensors"
check "--eval of a safetensors file without metadata, no training folder, data.mean = auto: exit 1 naming data.mean and the folder" \
    bash -c '[ $1 -eq 1 ] && grep -q "data.mean" <<<"$2" && grep -q "$3" <<<"$2"' _ $rc "$out" "$tmp/f/train"
# the same from a shard set of the test folder alone (data.kind = shards)
./build/tools/make_shards "$tmp/f/val" "$tmp/s/val" >/dev/null 2>&1
run timeout 120 ./trainer --eval "${F[@]}" data.kind=shards data.root="$tmp/s" $norm \
    "$tmp/frun/checkpoints/ckpt-000001.cnt"
check "--eval of a shard set, no training set: the run's last $fwant (rc=$rc)" \
    bash -c 'grep -qF "test images, $1, top-5" <<<"$2" && grep -qF "opened only the shard set" <<<"$2"' \
    _ "$fwant" "$out"
mv "$tmp/f/train.away" "$tmp/f/train"
run timeout 120 ./trainer --eval "${F[@]}" "$tmp/frun/checkpoints/ckpt-000001.cnt"
check "--eval, data.mean = auto, the training folder there: the run's last $fwant (rc=$rc)" \
    grep -qF "test images, $fwant, top-5" <<<"$out"

# Refusals.
run ./trainer --eval "${C[@]}" "$tmp/missing.cnt"
check "a missing file: exit 1 naming it" bash -c '[ $1 -eq 1 ] && grep -q "$2" <<<"$3"' _ $rc "$tmp/missing.cnt" "$out"
run timeout 120 ./trainer --eval "${C[@]}" model.name=resnet32 "$ckpt"
check "a checkpoint of another model: exit 1, the mismatch named ($(grep -o 'resnet20' <<<"$out" | head -1))" \
    bash -c '[ $1 -eq 1 ] && grep -q "ckpt-000001.cnt" <<<"$2" && grep -q resnet20 <<<"$2"' _ $rc "$out"
run timeout 120 ./trainer --eval "${C[@]}" data.kind=synthetic data.synthetic_shape=1x28x28 data.synthetic_classes=7 \
    data.synthetic_test=64 "$tmp/w.safetensors"
check "a safetensors file of another class count: exit 1, the classifier named" \
    bash -c '[ $1 -eq 1 ] && grep -q "w.safetensors" <<<"$2" && grep -q "fc" <<<"$2"' _ $rc "$out"
head -c 4096 /dev/urandom >"$tmp/noise.bin"
run ./trainer --eval "${C[@]}" "$tmp/noise.bin"
check "a file of neither kind: exit 1 naming it" \
    bash -c '[ $1 -eq 1 ] && grep -q "noise.bin" <<<"$2"' _ $rc "$out"
err=$(timeout 120 ./trainer --eval "${C[@]}" "$ckpt" 2>&1 >/dev/full)
rc=$?
check "the result line on a full device: exit 1 (rc=$rc), said on stderr" \
    bash -c '[ $1 -eq 1 ] && grep -q "No space left on device" <<<"$2"' _ $rc "$err"
run ./trainer --eval configs/resnet20-fashion.ini
check "--eval without WEIGHTS: usage, exit 2" test $rc -eq 2
run ./trainer --eval configs/resnet20-fashion.ini "$ckpt" optim.nokey=1
check "--eval with an unknown key: exit 2 naming it" \
    bash -c '[ $1 -eq 2 ] && grep -q "optim.nokey" <<<"$2"' _ $rc "$out"

[ "$fails" -eq 0 ] && echo "all eval checks passed"
exit "$fails"
