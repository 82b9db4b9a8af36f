#!/usr/bin/env bash
# tests/test_cli.sh - the trainer's command line as a user meets it: exit codes
# and messages for configuration mistakes, --summary, --help, --version, the
# data kinds (synthetic training, CIFAR errors), and the README's config
# reference being the one the parser uses.
# Run from the repository root after `make`. Exits non-zero on the first failure.
set -u
T=./trainer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # description, then a command that must succeed
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
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
check "unknown model: exit 1 listing the zoo" test "$rc" -eq 1 -a -n "$(grep -o 'resnet21.*resnet18' <<<"$out")"

run $T --bogus
check "unknown option: exit 2" test "$rc" -eq 2

run $T --summary resnet18
check "--summary resnet18: torchvision's parameter count" grep -qx "params: 11689512" <<<"$out"
check "--summary resnet18: GFLOPs line" grep -qE "^forward GFLOPs/image: 3\.6[0-9]+$" <<<"$out"
check "--summary resnet18: layer lines" grep -qE "^[0-9]+ +layer4\.1\.conv2 +conv" <<<"$out"

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

run $T --version
check "--version lists the backends" grep -q "^backends: cpu" <<<"$out"

run $T --help
check "--help lists every section's keys" grep -q "optim.warmup_epochs" <<<"$out"

run $T --bench resnet20 1x28x28 4 1
check "--bench runs" grep -q "img/s" <<<"$out"
run $T --bench resnet20 1x28 4 1
check "--bench bad shape: exit 2" test "$rc" -eq 2

# The README embeds the reference generated from the parser's table.
$T --config-reference > "$tmp/ref.md"
check "README holds the current config reference" python3 - "$tmp/ref.md" README.md <<'PY'
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
