#!/usr/bin/env bash
# tests/test_cli.sh - the trainer's command line as a user meets it: exit codes
# and messages for configuration mistakes, --summary, --help, --version, the
# data kinds (synthetic training, CIFAR errors), inputs that are not regular
# files (a FIFO, directory or device), the ImageNet configs, devices
# and the GPU-only keys' mistakes (cuda without a GPU, nccl on the CPU),
# PowerSGD's refusals and tools/bench_powersgd's output, and the config
# reference in docs/usage.md being the one the parser uses.
# Run from the repository root after `make`. Exits non-zero on the first failure.
set -u
T=./trainer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
# run CMD...: sets $rc and $out (stdout+stderr)
run() { out=$("$@" 2>&1); rc=$?; }

run $T
check "no arguments: usage, exit 2" test "$rc" -eq 2 -a -n "$(grep -o usage <<<"$out")"

printf '[optim]\nlr = 0.1\nlrr = 0.2\n' > "$tmp/badkey.ini"
run $T "$tmp/badkey.ini"
check "unknown key: exit 2" test "$rc" -eq 2
check "unknown key: names file:line and key" grep -q "badkey.ini:3: .*lrr" <<<"$out"

printf '[optim]\nlr = 0.1\n[optim]\nlr = 0.2\n' > "$tmp/dup.ini"
run $T "$tmp/dup.ini"
check "duplicate key: exit 2 naming line 4" test "$rc" -eq 2 -a -n "$(grep -o 'dup.ini:4' <<<"$out")"

printf '[nosuch]\nx = 1\n' > "$tmp/badsec.ini"
run $T "$tmp/badsec.ini"
check "unknown section: exit 2" test "$rc" -eq 2 -a -n "$(grep -o 'badsec.ini:1' <<<"$out")"

run $T configs/resnet20-fashion.ini optim.lr=fast
check "bad override value: exit 2 naming the override" test "$rc" -eq 2 -a -n "$(grep -o 'optim.lr=fast' <<<"$out")"

run $T configs/resnet20-fashion.ini optim.momentum=2
check "out of range: exit 2" test "$rc" -eq 2 -a -n "$(grep -o 'momentum' <<<"$out")"

run $T "$tmp/missing.ini"
check "missing config file: exit 2 naming it" test "$rc" -eq 2 -a -n "$(grep -o 'missing.ini' <<<"$out")"

run $T configs/resnet20-fashion.ini data.root="$tmp/nodata" train.out_dir="$tmp/out"
check "missing data: exit 1 naming the path" test "$rc" -eq 1 -a -n "$(grep -o "$tmp/nodata" <<<"$out")"

run $T configs/resnet20-fashion.ini model.name=resnet21 train.out_dir="$tmp/out"
check "unknown model: exit 2 (a config error), naming the key and listing the zoo, before any start-up line" \
    test "$rc" -eq 2 -a -n "$(grep -o "model.name = 'resnet21'.*resnet18" <<<"$out")" -a -z "$(grep '^device:' <<<"$out")"

run $T --bogus
check "unknown option: exit 2" test "$rc" -eq 2

run $T --summary resnet18
check "--summary resnet18: torchvision's parameter count" grep -qx "params: 11689512" <<<"$out"
check "--summary resnet18: GFLOPs line" grep -qE "^forward GFLOPs/image: 3\.6[0-9]+$" <<<"$out"
check "--summary resnet18: layer lines" grep -qE "^[0-9]+ +layer4\.1\.conv2 +conv" <<<"$out"
check "--summary resnet18: the gradient's size" grep -qx "gradients: 11689512 values, 44.59 MiB as fp32" <<<"$out"
check "--summary resnet18: buckets of 1 MiB then 25 MiB covering the gradient, first from fc, last to conv1" \
    python3 - "$out" <<'PY'
import re, sys
b = [l.split() for l in sys.argv[1].splitlines() if l.startswith("  bucket ")]
assert len(b) == 3 and b[0][2] == "1.000" and b[1][2] == "25.000", b
assert sum(int(x[4]) for x in b) == 11689512, b
assert b[0][7] == "fc" and b[-1][-1] == "conv1", b
PY
run $T --summary configs/resnet20-fashion.ini dist.bucket_mb=0.25 dist.first_bucket_mb=0.05 dist.compress=fp16
check "--summary CONFIG: buckets follow dist.bucket_mb, the wire size dist.compress" bash -c \
    'grep -q "^buckets: 5 (dist.first_bucket_mb = 0.05, dist.bucket_mb = 0.25)" <<<"$1" &&
     grep -q "0.51 MiB on the wire (dist.compress = fp16)" <<<"$1"' _ "$out"

run $T --summary inception_v3
check "--summary inception_v3 (299x299, aux): 27161264" grep -qx "params: 27161264" <<<"$out"

run $T --summary configs/resnet20-fashion.ini
check "--summary CONFIG: shape from the data (1x28x28)" grep -qx "params: 269434" <<<"$out"

run $T --summary configs/resnet20-fashion.ini model.name=resnet56
check "--summary CONFIG with override" test "$rc" -eq 0 -a -n "$(grep -x 'params: 852730' <<<"$out")"

run $T --summary configs/resnet20-fashion.ini data.kind=synthetic data.synthetic_shape=3x32x32
check "--summary synthetic 3x32x32: ResNet-20 with 3 input channels" grep -qx "params: 269722" <<<"$out"

run $T --summary configs/resnet20-fashion.ini data.kind=synthetic data.synthetic_shape=3x32
check "bad synthetic_shape: exit 2 naming the key" test "$rc" -eq 2 -a -n "$(grep -o 'data.synthetic_shape' <<<"$out")"

run $T configs/resnet20-fashion.ini data.kind=synthetic data.synthetic_train=256 data.synthetic_test=64 \
    train.epochs=1 train.batch_size=32 train.out_dir="$tmp/syn"
check "training on synthetic data: exit 0" test "$rc" -eq 0
check "training on synthetic data: metrics.jsonl written" test -s "$tmp/syn/metrics.jsonl"

run $T configs/resnet20-cifar10.ini data.root=/nonexistent train.out_dir="$tmp/out"
check "cifar, missing root: exit 1 naming the path" test "$rc" -eq 1 -a -n "$(grep -o '/nonexistent' <<<"$out")"
run $T --summary configs/resnet20-cifar10.ini data.root="$tmp"
check "cifar, no files: every path tried is named" grep -q "$tmp/cifar-10-batches-bin/data_batch_1.bin" <<<"$out"

# One process bound to one CPU (taskset): train.threads = 0 runs 1 thread and says the others stay idle.
online=$(getconf _NPROCESSORS_ONLN)
if [ "$online" -ge 2 ] && command -v taskset >/dev/null; then
    run taskset -c 0 $T configs/resnet20-fashion.ini train.device=cpu data.train_limit=32 data.test_limit=16 \
        train.batch_size=16 train.max_steps=1 data.workers=1 train.out_dir="$tmp/thr"
    check "taskset -c 0, train.threads = 0: 1 thread on CPU 0" \
        grep -q "threads: this process: 1 (train.threads = 0: one per CPU the rank may run on), on CPU 0 of its $online" <<<"$out"
    check "taskset -c 0, train.threads = 0: the idle CPUs are named" \
        grep -q "warning: threads: the 1 rank on .* may run on 1 of its $online CPUs" <<<"$out"
fi

run $T --version
check "--version lists the backends" grep -q "^backends: cpu" <<<"$out"

run $T --help
check "--help fits on one screen (at most 40 lines of at most 110 columns)" \
    test "$(wc -l <<<"$out")" -le 40 -a "$(awk '{ if (length > m) m = length } END { print m + 0 }' <<<"$out")" -le 110
check "--help shows a one-process, an mpirun, a resume and an export example" \
    bash -c 'grep -q "^  ./trainer configs/" <<<"$1" && grep -q "^  mpirun -np" <<<"$1" &&
             grep -q "checkpoint.resume=auto" <<<"$1" && grep -q -- "--export" <<<"$1"' _ "$out"
check "--help points to --config-reference" grep -q "every key: --config-reference" <<<"$out"
run $T --config-reference
check "--config-reference lists every section's keys, as text" \
    bash -c 'grep -q "^  optim.warmup_epochs " <<<"$1" && grep -q "^\[dist\]" <<<"$1"' _ "$out"
run $T --config-reference md
check "--config-reference md is the Markdown table" grep -q '^| `optim.warmup_epochs` |' <<<"$out"
run $T --config-reference html
check "--config-reference with another format: exit 2 naming it" test "$rc" -eq 2 -a -n "$(grep "got 'html'" <<<"$out")"

run $T --bench resnet20 1x28x28 4 1
check "--bench runs" grep -q "img/s" <<<"$out"
run $T --bench resnet20 1x28 4 1
check "--bench bad shape: exit 2" test "$rc" -eq 2
run $T --bench resnet20 1x28x28 4 1 precision=fp8
check "--bench unknown option value: exit 2 naming the options" test "$rc" -eq 2 -a -n "$(grep -o 'precision=fp32|tf32|bf16|fp16' <<<"$out")"
run $T --bench resnet20 1x28x28 4 1 device=cpu precision=fp16 layout=nchw
check "--bench precision=fp16 on the CPU says emulated, fp16 activations" grep -q "on cpu (fp16, emulated, fp16 activations), .*img/s" <<<"$out"
run $T --bench resnet20 1x28x28 4 1 device=cpu precision=fp16 layout=nchw activations=fp32
check "--bench activations=fp32 keeps fp32 activations" grep -q "on cpu (fp16, emulated, fp32 activations), .*img/s" <<<"$out"
run $T --bench resnet20 1x28x28 4 1 device=cpu precision=fp16 activations=bf16
check "--bench bf16 activations with fp16 math: exit 2 naming both" test "$rc" -eq 2 -a -n "$(grep 'train.activations = bf16 goes with train.precision = bf16' <<<"$out")"
run $T --bench resnet20 1x28x28 4 1 device=cpu layout=nhwc
check "--bench layout=nhwc on the CPU says transposed" grep -q "on cpu nhwc (transposed), .*img/s" <<<"$out"
run $T --bench resnet20 1x28x28 4 1 layout=chwn
check "--bench unknown layout: exit 2 naming the layouts" test "$rc" -eq 2 -a -n "$(grep -o 'layout=auto|nchw|nhwc' <<<"$out")"
run $T --bench resnet20 1x28x28 4 1 device=cpu precision=tf32 classes=3 layout=nchw
check "--bench key=value options: device, precision, classes" grep -q "on cpu, .*img/s" <<<"$out"
run $T --bench resnet20 1x28x28 4 1 device=cpu layout=nchw optim=lars
check "--bench optim=lars: the line says LARS, with the update's time" \
    grep -q "on cpu, LARS, .*img/s.*update [0-9.]* ms per step" <<<"$out"
run $T --bench resnet20 1x28x28 4 1 optim=adam
check "--bench optim=adam: exit 2 naming the optimizers" test "$rc" -eq 2 -a -n "$(grep -o 'optim=sgd|lars' <<<"$out")"
# The CPU's blocked layout (oneDNN): the default where built in, refused elsewhere.
run $T --devices
if grep -q "oneDNN" <<<"$out"; then
    check "--devices names the CPU's blocked layout as its default" grep -q "layouts nchw, nhwc, blocked (the default)" <<<"$out"
    run $T --bench resnet20 1x28x28 4 1 device=cpu
    check "--bench on the CPU runs blocked by default" grep -q "on cpu blocked (nChw\(8\|16\)c), .*img/s" <<<"$out"
    run $T --bench resnet20 1x28x28 4 1 device=cpu layout=blocked precision=bf16
    check "--bench layout=blocked with emulated bf16" grep -q "on cpu (bf16, emulated, bf16 activations) blocked (nChw\(8\|16\)c), .*img/s" <<<"$out"
else
    run $T --bench resnet20 1x28x28 4 1 device=cpu layout=blocked
    check "--bench layout=blocked without oneDNN: exit 1 naming make deps" test "$rc" -eq 1 -a -n "$(grep -o 'make deps' <<<"$out")"
fi

# Devices: what the binary and machine offer, and the GPU-only keys' mistakes.
run $T --devices
check "--devices: exit 0 with the backends and what auto uses" \
    test "$rc" -eq 0 -a -n "$(grep -o '^backends built in: cpu' <<<"$out")" -a -n "$(grep -o '^device=auto uses: ' <<<"$out")"
gpu=$(grep -c '^cuda:[0-9]' <<<"$out")
run $T configs/resnet20-fashion.ini train.layout=chwn
check "train.layout outside its choices: exit 2 naming them" test "$rc" -eq 2 -a -n "$(grep -o 'auto, nchw, nhwc' <<<"$out")"
run $T configs/resnet20-fashion.ini train.precision=fp8
check "train.precision outside its choices: exit 2 naming them" test "$rc" -eq 2 -a -n "$(grep -o 'fp32, tf32, bf16, fp16' <<<"$out")"
# fp16 evaluation whose activations overflow (Inception V3 after 3 steps on
# random data: its running statistics are far from the batches', the fp32
# test loss is ~1e11): NaN logits count as wrong, with a warning, never as hits
run $T configs/inception3.ini data.kind=synthetic data.synthetic_shape=3x299x299 data.synthetic_train=8 \
    data.synthetic_test=2 data.synthetic_classes=10 train.batch_size=2 train.max_steps=3 train.precision=fp16 \
    train.device=cpu train.out_dir="$tmp/nanlogits"
check "fp16 eval with overflowing logits: top-1 0%, a warning naming the samples and bf16" \
    test "$rc" -eq 0 -a -n "$(grep -o 'test top-1 0.00%' <<<"$out")" \
    -a -n "$(grep -o '2 test samples had inf or NaN logits, counted as wrong (fp16.*bf16' <<<"$out")"
check "fp16 eval with overflowing logits: metrics.jsonl is JSON, eval_loss null" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if [r["eval_loss"] for r in rows if r["kind"] == "eval"] == [None] else 1)' "$tmp/nanlogits/metrics.jsonl"
# train.eval_batch_size far beyond the test set: buffers are sized by the
# batches that can occur (64 test images), not by the key (before: 4.3 GB of
# activations for 1024; now about 0.5 GB). Peak memory of the run, in KiB.
peak=$(python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r.returncode == 0 else -1)' \
    $T configs/resnet20-fashion.ini train.max_steps=2 train.batch_size=16 data.train_limit=512 data.test_limit=64 \
    train.eval_batch_size=1024 train.device=cpu train.out_dir="$tmp/bigeval")
check "train.eval_batch_size beyond the test set: the run succeeds in under 1.5 GB (peak ${peak} KiB)" \
    test "$peak" -gt 0 -a "$peak" -lt 1572864
# A run that cannot fit in memory (ResNet-50, batch 4096 of 224x224 images:
# about 1.2 TB) is refused before anything is allocated, naming the keys to
# lower (before: the 2.5 GB input gradient was allocated and touched, the next
# 13 GB failed or the OOM killer ended the run without a word). The address
# space limit and the timeout only keep a regression from taking the machine.
start=$SECONDS
run bash -c "ulimit -v 16000000; exec timeout 60 $T configs/resnet20-fashion.ini model.name=resnet50 \
    data.kind=synthetic data.synthetic_shape=3x224x224 data.synthetic_train=16 data.synthetic_test=16 \
    train.batch_size=4096 train.device=cpu train.out_dir=$tmp/toobig"
check "a batch too large for memory: exit 1 in seconds ($((SECONDS - start)) s)" \
    test "$rc" -eq 1 -a $((SECONDS - start)) -le 20
check "a batch too large for memory: the estimate, the parts and train.batch_size named" \
    grep -q "model resnet50 with batch 4096 .* needs about [0-9.]* GiB per rank (activations .*lower train.batch_size" \
    <<<"$out"
# fp16 whose forward overflows on every step (inputs scaled by 1e5 through
# data.std): each step is skipped and its NaN loss kept out of the progress
# line (no "diverged" stop); after 30 in a row the run stops naming the keys
# and bf16; metrics.jsonl stays JSON (null losses)
run $T configs/resnet20-fashion.ini train.precision=fp16 data.std=0.00001 train.batch_size=8 data.train_limit=512 \
    data.test_limit=16 train.log_every=5 train.max_steps=40 train.device=cpu train.out_dir="$tmp/fwdovf"
check "fp16 forward overflow: exit 1 after 30 skipped steps in a row, naming the keys and bf16" \
    test "$rc" -eq 1 -a -n "$(grep -o 'train.precision = fp16, train.loss_scaling = auto, step 30: 30 steps in a row.*bf16' <<<"$out")"
check "fp16 forward overflow: progress lines say loss - , never 'diverged'" \
    test -n "$(grep -o 'step 5/40  loss -  ' <<<"$out")" -a -z "$(grep -o 'diverged: loss' <<<"$out")"
check "fp16 forward overflow: metrics.jsonl is JSON, skipped losses null" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if rows and all(r["loss"] is None for r in rows if r["kind"] == "step") else 1)' "$tmp/fwdovf/metrics.jsonl"
run $T configs/resnet20-fashion.ini train.loss_scale=0
check "train.loss_scale=0: exit 2 naming the key" test "$rc" -eq 2 -a -n "$(grep -o 'train.loss_scale' <<<"$out")"
run $T configs/resnet20-fashion.ini dist.backend=nccl train.device=cpu
check "dist.backend=nccl on device cpu: exit 2 naming both keys" \
    test "$rc" -eq 2 -a -n "$(grep -o 'dist.backend = nccl needs GPUs (train.device' <<<"$out")"
run $T --summary configs/resnet20-fashion.ini dist.backend=nccl dist.compress=fp16
check "dist.backend=nccl with fp16 compression: a valid configuration (--summary exit 0, rc=$rc)" \
    test "$rc" -eq 0 -a -z "$(grep -o 'invalid configuration' <<<"$out")"
run $T --summary configs/resnet20-fashion.ini dist.backend=nccl dist.compress=powersgd
check "dist.backend=nccl with powersgd: a valid configuration (--summary exit 0, rc=$rc)" \
    test "$rc" -eq 0 -a -z "$(grep -o 'invalid configuration' <<<"$out")"
run $T configs/resnet20-fashion.ini dist.compress=powersgd dist.buckets_in_flight=2 dist.backend=ring
check "powersgd with 2 buckets in flight: exit 2 naming both keys" \
    test "$rc" -eq 2 -a -n "$(grep -o 'dist.buckets_in_flight = 2 with dist.compress = powersgd' <<<"$out")"
run $T configs/resnet20-fashion.ini dist.compress=powersgd train.precision=fp16
check "powersgd with fp16 loss scaling: exit 2 naming both" \
    test "$rc" -eq 2 -a -n "$(grep -o 'dist.compress = powersgd keeps .*train.precision = fp16' <<<"$out")"
run $T configs/resnet20-fashion.ini dist.compress=powersgd dist.powersgd_rank=0
check "dist.powersgd_rank=0: exit 2 naming the key" test "$rc" -eq 2 -a -n "$(grep -o 'dist.powersgd_rank' <<<"$out")"
run build/tools/bench_powersgd --model resnet20 --shape 1x28x28 --classes 10 --reps 1
check "bench_powersgd: what travels, and both sides timed (rc=$rc)" bash -c '[ $1 -eq 0 ] &&
     grep -q "^resnet20 1x28x28, 10 classes: 269434 gradient values (1.03 MiB); PowerSGD rank 2 compresses 20 of 59 tensors (99.5% of the values) and sends 0.05 MiB a step$" <<<"$2" &&
     grep -qE "PowerSGD.s arithmetic [0-9.]+ ms .* fp16.s conversions [0-9.]+ ms .*: [0-9.]+x$" <<<"$2"' _ $rc "$out"
run build/tools/bench_powersgd --rank 0
check "bench_powersgd --rank 0: exit 2 naming the option" test "$rc" -eq 2 -a -n "$(grep -o -- '--rank: 1 to 32' <<<"$out")"
run $T --summary configs/resnet20-fashion.ini dist.compress=powersgd dist.powersgd_rank=4
check "--summary with powersgd: what travels once compressed" \
    grep -q "0.10 MiB on the wire once compressed (dist.compress = powersgd, rank 4: 19 of 59 tensors)" <<<"$out"
if [ "$gpu" -eq 0 ]; then
    run $T configs/resnet20-fashion.ini train.device=cuda train.out_dir="$tmp/nogpu"
    check "train.device=cuda without a usable GPU: exit 1 with the reason" \
        test "$rc" -eq 1 -a -n "$(grep -o 'train.device = cuda: .*see ./trainer --devices' <<<"$out")"
    run $T configs/resnet20-fashion.ini dist.backend=nccl train.out_dir="$tmp/nogpu"
    check "dist.backend=nccl when auto picked the CPU: exit 1 naming NCCL's need" \
        test "$rc" -eq 1 -a -n "$(grep -o 'NCCL needs a GPU per rank' <<<"$out")"
    run $T configs/resnet20-fashion.ini train.max_steps=1 train.out_dir="$tmp/auto"
    check "train.device=auto without a GPU: the first line says cpu and why" \
        grep -q '^device: cpu .*train.device = auto; cuda: ' <<<"$out"
fi

# Weights interchange: a checkpoint exported as safetensors (checked with
# python3's standard library only), then a run started from it. Its own
# config file, so the section does not depend on the shipped ones.
printf '[model]\nname = resnet20\n[data]\nkind = synthetic\nsynthetic_train = 64\nsynthetic_test = 32\n[train]\nepochs = 1\nbatch_size = 32\n' >"$tmp/w.ini"
run $T "$tmp/w.ini" train.out_dir="$tmp/exp"
check "training with a checkpoint: exit 0" test "$rc" -eq 0 -a -s "$tmp/exp/checkpoints/ckpt-000001.cnt"
run $T --export "$tmp/exp/checkpoints/ckpt-000001.cnt" "$tmp/w.safetensors"
check "--export: exit 0" test "$rc" -eq 0 -a -s "$tmp/w.safetensors"
check "--export: a valid safetensors file with torchvision's names and shapes" python3 - "$tmp/w.safetensors" <<'PY'
import json, os, struct, sys
path = sys.argv[1]
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n).decode("utf-8"))
    assert (8 + n) % 8 == 0
    meta = header.pop("__metadata__")
    assert meta["model"] == "resnet20" and meta["format"] == "pt", meta
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    assert spans[0][0] == 0 and spans[-1][1] == os.path.getsize(path) - 8 - n
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "gaps or overlaps"
    size = {"F32": 4, "I64": 8}
    for k, v in header.items():
        count = 1
        for d in v["shape"]:
            count *= d
        assert v["data_offsets"][1] - v["data_offsets"][0] == count * size[v["dtype"]], k
    assert header["conv1.weight"]["shape"] == [16, 3, 3, 3]
    assert header["fc.weight"]["shape"] == [10, 64] and header["fc.bias"]["shape"] == [10]
    assert header["layer3.2.bn2.running_var"]["shape"] == [64]
    nbt = header["bn1.num_batches_tracked"]
    assert nbt["dtype"] == "I64" and nbt["shape"] == []
    f.seek(8 + n + nbt["data_offsets"][0])
    assert struct.unpack("<q", f.read(8))[0] == 2  # the checkpoint's step count
    assert sum(k.endswith("num_batches_tracked") for k in header) == 19
    assert len(header) == 116
PY
run $T "$tmp/w.ini" train.out_dir="$tmp/init" model.init_from="$tmp/w.safetensors"
check "model.init_from: exit 0" test "$rc" -eq 0
check "model.init_from: one line with loaded and ignored counts" \
    grep -q "model.init_from: loaded 97 tensors from $tmp/w.safetensors; ignored 19 extra tensors" <<<"$out"
run $T "$tmp/w.ini" train.out_dir="$tmp/init10" data.synthetic_classes=7 \
    model.init_from="$tmp/w.safetensors"
check "model.init_from, 7 classes: the classifier keeps its initialisation (warning)" \
    test "$rc" -eq 0 -a -n "$(grep -o 'fc.weight \[10, 64\] (here \[7, 64\])' <<<"$out")"
run $T "$tmp/w.ini" train.out_dir="$tmp/init2" model.init_from="$tmp/none.safetensors"
check "model.init_from, missing file: exit 1 naming it" test "$rc" -eq 1 -a -n "$(grep -o "$tmp/none.safetensors" <<<"$out")"
# --profile: one step layer by layer, as JSON, with the reducer's own buckets.
run $T --profile configs/resnet20-fashion.ini "$tmp/prof.json" train.device=cpu train.threads=1 data.workers=1 \
    train.batch_size=16 train.max_steps=4 dist.first_bucket_mb=0.1 dist.bucket_mb=0.25
check "--profile: exit 0, names the file" test "$rc" -eq 0 -a -n "$(grep -o "profile of 4 steps of resnet20 written to $tmp/prof.json" <<<"$out")"
check "--profile: the JSON is whole and consistent" python3 - "$tmp/prof.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["model"] == "resnet20" and p["batch"] == 16 and p["steps"] == 4 and p["params"] == 269434, p
assert p["grad_bytes"] == 4 * p["params"]
# buckets: contiguous, cover the gradient buffer, first 0.1 MiB then 0.25 MiB
b = p["buckets"]
assert b[0]["begin"] == 0 and b[-1]["end"] == p["params"]
assert all(x["end"] == y["begin"] for x, y in zip(b, b[1:]))
assert b[0]["end"] == int(0.1 * 2**20 / 4) and b[1]["end"] - b[1]["begin"] == int(0.25 * 2**20 / 4)
# layers in backward order: gradient ranges tile the buffer in order, every bucket completed once, in order
L = p["layers"]
assert L[0]["name"] == "fc" and L[-1]["name"] == "conv1", (L[0]["name"], L[-1]["name"])
ranges = [(l["grad_begin"], l["grad_end"]) for l in L if l["grad_end"] > l["grad_begin"]]
assert ranges[0][0] == 0 and ranges[-1][1] == p["params"] and all(a[1] == c[0] for a, c in zip(ranges, ranges[1:]))
assert sum(l["grad_bytes"] for l in L) == p["grad_bytes"]
done = [k for l in L for k in l["completes"]]
assert done == list(range(len(b))), done
for l in L:
    if l["completes"]:
        assert all(b[k]["end"] <= l["grad_end"] for k in l["completes"])
assert all(l["forward_ms"] >= 0 and l["backward_ms"] >= 0 for l in L) and p["step_ms"] > 0
# what ran each convolution, in the backend's words; every pass ran but the stem's data gradient
for l in L:
    assert ("runs" in l) == (l["kind"] == "conv"), l
    if l["kind"] == "conv":
        assert any(w in l["runs"] for w in ("OpenBLAS", "oneDNN", "ours")), l
        assert l["name"] == "conv1" or "not run" not in l["runs"], l
PY
run $T --profile configs/resnet20-fashion.ini "$tmp/no/dir/prof.json" train.device=cpu
check "--profile to a directory that does not exist: exit 1 naming it" \
    test "$rc" -eq 1 -a -n "$(grep -o "cannot write the profile '$tmp/no/dir/prof.json'" <<<"$out")"
run $T --export "$tmp/nockpt.cnt" "$tmp/x.safetensors"
check "--export, missing checkpoint: exit 1 naming it" test "$rc" -eq 1 -a -n "$(grep -o "$tmp/nockpt.cnt" <<<"$out")"
run $T --export "$tmp/exp/checkpoints/ckpt-000001.cnt" "$tmp/no/dir/x.safetensors"
check "--export, unwritable output: exit 1 naming it" test "$rc" -eq 1 -a -n "$(grep -o "$tmp/no/dir/x.safetensors" <<<"$out")"
run $T --export "$tmp/exp/checkpoints/ckpt-000001.cnt"
check "--export with one argument: usage, exit 2" test "$rc" -eq 2

# Outputs named on the command line: never an input of the same command
# (--profile's config, --export's checkpoint, simulate's profile: each used to
# be destroyed), never anything but a regular file (a FIFO blocked the
# writer), and a failed --profile leaves an earlier file whole (it was
# truncated first, then removed).
cp configs/resnet20-fashion.ini "$tmp/self.ini"
sum=$(md5sum <"$tmp/self.ini")
run timeout 20 $T --profile "$tmp/self.ini" "$tmp/self.ini" train.device=cpu
check "--profile onto its own config: refused, exit 1, the config whole" \
    bash -c "[ $rc -eq 1 ] && grep -q \"the profile '$tmp/self.ini' is the config this reads\" <<<\"\$1\" && \
             [ \"\$(md5sum <'$tmp/self.ini')\" = '$sum' ]" _ "$out"
ck="$tmp/exp/checkpoints/ckpt-000001.cnt"
sum=$(md5sum <"$ck")
run timeout 20 $T --export "$ck" "$ck"
check "--export onto its own checkpoint: refused, exit 1" \
    test $rc -eq 1 -a -n "$(grep -o "is the checkpoint this reads" <<<"$out")"
check "--export onto its own checkpoint: the checkpoint whole" test "$(md5sum <"$ck")" = "$sum"
mkfifo "$tmp/out.fifo"
run timeout 20 $T --profile configs/resnet20-fashion.ini "$tmp/out.fifo" train.device=cpu
check "--profile into a FIFO: refused at once naming it" \
    test "$rc" -eq 1 -a -n "$(grep -o "cannot write the profile '$tmp/out.fifo': it is a FIFO (named pipe)" <<<"$out")"
run timeout 20 $T --export "$ck" "$tmp"
check "--export into a directory: refused naming it" \
    test "$rc" -eq 1 -a -n "$(grep -o "cannot write the export '$tmp': it is a directory" <<<"$out")"
echo "an earlier profile" >"$tmp/old.json"
run timeout 20 $T --profile configs/resnet20-fashion.ini "$tmp/old.json" train.device=cpu data.root="$tmp/nodata"
check "a failed --profile: exit 1, the earlier file whole" \
    test "$rc" -eq 1 -a "$(cat "$tmp/old.json")" = "an earlier profile"
if [ -x build/tools/simulate ]; then
    run timeout 20 build/tools/simulate "$tmp/prof.json" --workers 2 --csv "$tmp/prof.json"
    check "simulate --csv onto its own profile: refused" \
        test $rc -ne 0 -a -n "$(grep -o 'is the profile this reads' <<<"$out")"
    check "simulate --csv onto its own profile: the profile whole" \
        python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/prof.json"
    # a stream is not a file to replace: the CSV goes to a pipe (tools/validate_cluster.py reads it so)
    run timeout 20 build/tools/simulate "$tmp/prof.json" --workers 2 --csv /dev/stdout
    check "simulate --csv /dev/stdout: the CSV on stdout" test $rc -eq 0 -a -n "$(grep -o '^workers,step_ms' <<<"$out")"
fi

# Inputs that are not regular files: a FIFO (whose open waits for a writer
# forever), a directory or a device given as the config file, a data file,
# model.init_from, checkpoint.resume or --export's checkpoint ends the run at
# once with a message naming the path and its kind. timeout 20: a hang fails
# the check (exit 124) instead of stalling the script.
mkfifo "$tmp/pipe.ini" "$tmp/pipe.safetensors" "$tmp/pipe.cnt"
run timeout 20 $T "$tmp/pipe.ini"
check "a FIFO as the config file: exit 2 naming it as a FIFO" \
    test "$rc" -eq 2 -a -n "$(grep -o "cannot open config '$tmp/pipe.ini': it is a FIFO (named pipe)" <<<"$out")"
mkdir -p "$tmp/dir.ini"
run timeout 20 $T "$tmp/dir.ini"
check "a directory as the config file: exit 2 naming it" \
    test "$rc" -eq 2 -a -n "$(grep -o "cannot open config '$tmp/dir.ini': it is a directory" <<<"$out")"
run timeout 20 $T --summary /dev/null
check "a device as the config file: exit 2 naming it" \
    test "$rc" -eq 2 -a -n "$(grep -o "cannot open config '/dev/null': it is a character device" <<<"$out")"
mkdir -p "$tmp/fifo-mnist"
mkfifo "$tmp/fifo-mnist/train-images-idx3-ubyte.gz"
cp /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz "$tmp/fifo-mnist/" 2>/dev/null
run timeout 20 $T configs/resnet20-fashion.ini data.root="$tmp/fifo-mnist" train.out_dir="$tmp/fifo-out"
check "a FIFO as an IDX file: exit 1 naming it as a FIFO" \
    test "$rc" -eq 1 -a -n "$(grep -o "$tmp/fifo-mnist/train-images-idx3-ubyte.gz': it is a FIFO" <<<"$out")"
mkdir -p "$tmp/fifo-cifar"
mkfifo "$tmp/fifo-cifar/data_batch_1.bin"
run timeout 20 $T configs/resnet20-cifar10.ini data.root="$tmp/fifo-cifar" train.out_dir="$tmp/fifo-out"
check "a FIFO as a CIFAR file: exit 1 naming it as a FIFO" \
    test "$rc" -eq 1 -a -n "$(grep -o "$tmp/fifo-cifar/data_batch_1.bin': it is a FIFO" <<<"$out")"
run timeout 20 $T "$tmp/w.ini" train.out_dir="$tmp/fifo-out" model.init_from="$tmp/pipe.safetensors"
check "a FIFO as model.init_from: exit 1 naming it as a FIFO" \
    test "$rc" -eq 1 -a -n "$(grep -o "$tmp/pipe.safetensors': it is a FIFO" <<<"$out")"
run timeout 20 $T "$tmp/w.ini" train.out_dir="$tmp/fifo-out" checkpoint.resume="$tmp/pipe.cnt"
check "a FIFO as checkpoint.resume: exit 1 naming it as a FIFO" \
    test "$rc" -eq 1 -a -n "$(grep -o "$tmp/pipe.cnt': it is a FIFO" <<<"$out")"
run timeout 20 $T --export "$tmp/pipe.cnt" "$tmp/fifo.safetensors"
check "a FIFO as --export's checkpoint: exit 1 naming it as a FIFO" \
    test "$rc" -eq 1 -a -n "$(grep -o "$tmp/pipe.cnt': it is a FIFO" <<<"$out")"

# The ImageNet configs: torchvision's parameter counts at their input shape on
# synthetic data (one override), a clear error while ImageNet is missing, and
# one real training step of resnet50 on synthetic data.
for cm in resnet50:25557032:224 resnet101:44549160:224 vgg16:138357544:224 inception3:27161264:299; do
    IFS=: read -r cfgname params side <<<"$cm"
    run $T --summary configs/$cfgname.ini data.kind=synthetic
    check "configs/$cfgname.ini on synthetic data: $params parameters, 3x${side}x${side}, 1000 classes" \
        bash -c "[ $rc -eq 0 ] && grep -q 'params: $params' <<<\"\$1\" && grep -q '3x${side}x${side}' <<<\"\$1\" && grep -q 'classes: 1000' <<<\"\$1\"" _ "$out"
    run $T configs/$cfgname.ini data.root="$tmp/no-imagenet" train.out_dir="$tmp/in-$cfgname"
    check "configs/$cfgname.ini without ImageNet: exit 1 naming the folder and what to set" \
        bash -c "[ $rc -eq 1 ] && grep -q '$tmp/no-imagenet/train: No such file or directory; set data.root' <<<\"\$1\"" _ "$out"
done
run $T configs/resnet50.ini data.kind=synthetic train.batch_size=2 train.eval_batch_size=2 data.synthetic_train=4 \
    data.synthetic_test=2 train.max_steps=1 train.log_every=1 train.out_dir="$tmp/r50"
check "configs/resnet50.ini trains a step on synthetic data" \
    bash -c "[ $rc -eq 0 ] && grep -q 'step 1/1' <<<\"\$1\"" _ "$out"

# train.cuda_graph on a backend that cannot record: a warning saying why, and the run goes on op by op
out=$($T configs/resnet20-fashion.ini train.device=cpu train.cuda_graph=true train.max_steps=1 train.batch_size=16 \
    data.train_limit=64 data.test_limit=16 data.workers=1 train.out_dir="$tmp/cg" 2>&1)
rc=$?
check "train.cuda_graph = true on the CPU: exit 0" test $rc -eq 0
check "train.cuda_graph = true on the CPU: a warning says why it is not used" grep -q \
    "^warning: train.cuda_graph = true: not used, every step runs op by op: this backend runs each op as it is called" \
    <<<"$out"

# docs/usage.md embeds the reference generated from the parser's table (tools/dev/update_config_reference.sh).
$T --config-reference md > "$tmp/ref.md"
check "docs/usage.md holds the current config reference" python3 - "$tmp/ref.md" docs/usage.md <<'PY'
import sys
ref = open(sys.argv[1]).read()
readme = open(sys.argv[2]).read()
sys.exit(0 if ref.strip() in readme else 1)
PY

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all CLI checks passed"
