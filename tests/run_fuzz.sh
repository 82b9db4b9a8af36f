#!/usr/bin/env bash
# tests/run_fuzz.sh BUILD TARGET... - runs `make fuzz`'s libFuzzer targets
# (tests/fuzz_readers.c), each for $FUZZ_SECONDS (default 60), from a corpus
# in BUILD/corpus/TARGET that grows from run to run and starts from seeds
# made here: JPEG and PNG files (to_imagefolder), a checkpoint of a one-step
# run, its safetensors export and step profile, a shard index (make_shards),
# the configs, small IDX files, an image-folder listing. A crash, sanitizer report, leak, timeout or
# out-of-memory is written to BUILD/fuzz-findings/ and named; the last line
# says how many targets found something, and the exit status is non-zero
# when any did.
set -u
B=$1
shift
secs=${FUZZ_SECONDS:-60}
corpus=$B/corpus
found=$B/fuzz-findings
mkdir -p "$found"
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# seed DIR FILE [PREFIX_HEX]: FILE into the target's seeds ($seeds/DIR, which
# must not hold FILE), after PREFIX's bytes
seed() {
    mkdir -p "$seeds/$1"
    local out
    out="$seeds/$1/$(basename "$2")${3:+-$3}"
    { [ -n "${3:-}" ] && printf "$(sed 's/../\\x&/g' <<<"$3")"; cat "$2"; } >"$out"
}
# seeds for the targets that have no corpus yet
need=
for t in "$@"; do [ -d "$corpus/$t" ] || need="$need $t"; done
if [ -n "$need" ]; then
    echo "fuzz: making seeds for$need"
    "$B/tools/to_imagefolder" synthetic "$seeds/jpg" --classes 2 --train 2 --val 2 --size 40x30 >/dev/null 2>&1
    "$B/tools/to_imagefolder" synthetic "$seeds/png" --classes 2 --train 2 --val 2 --size 33x17 --format png \
        >/dev/null 2>&1
    for f in "$seeds"/jpg/train/*/*.jpg "$seeds"/png/train/*/*.png; do
        seed image "$f" 0305030a0b101001
        seed image "$f" 0000000000000000
    done
    "$B/tools/make_shards" "$seeds/jpg/val" "$seeds/set" >/dev/null 2>&1 && seed shards "$seeds/set/index.cnts"
    for c in configs/*.ini; do seed config "$c"; done
    "$B/trainer" configs/resnet20-fashion.ini data.train_limit=64 data.test_limit=32 train.batch_size=32 \
        train.max_steps=1 checkpoint.every_steps=1 train.threads=1 data.workers=1 train.out_dir="$seeds/run" \
        >"$seeds/run.log" 2>&1
    ckpt=$(ls "$seeds"/run/checkpoints/*.cnt 2>/dev/null | head -1)
    if [ -n "$ckpt" ]; then
        seed checkpoint "$ckpt"
        "$B/trainer" --export "$ckpt" "$seeds/w.safetensors" >/dev/null 2>&1 && seed safetensors "$seeds/w.safetensors"
    else
        echo "fuzz: the seed run wrote no checkpoint:"; tail -n 3 "$seeds/run.log"
    fi
    "$B/trainer" --profile configs/resnet20-fashion.ini "$seeds/p.json" train.batch_size=8 train.threads=1 \
        >/dev/null 2>&1 && seed profile "$seeds/p.json"
    # an IDX pair (its first byte says where the images end) and a listing as
    # dataset_pack writes it (data/imagefolder.c): 3 images in 2 classes
    python3 - "$seeds" <<'PY'
import struct, sys, os
d = sys.argv[1]
os.makedirs(d + "/gen", exist_ok=True)
n, h, w = 3, 5, 4
img = struct.pack(">IIII", 0x803, n, h, w) + bytes(range(n * h * w))
lab = struct.pack(">II", 0x801, n) + bytes([0, 1, 2])
with open(d + "/gen/idx", "wb") as f:
    f.write(bytes([int(256 * (1 + len(img)) / (1 + len(img) + len(lab)))]) + img + lab)
root, names = b"/data/set", b"a/0.jpg\0a/1.jpg\0b/2.png\0"
body = root + names + struct.pack("<3i", 0, 0, 1) + struct.pack("<3Q", 0, 8, 16) + struct.pack("<2Q", 0, 16)
with open(d + "/gen/listing", "wb") as f:
    f.write(b"CNTLIST1" + struct.pack("<4Q", 3, 2, len(names), len(root)) + body)
PY
    seed idx "$seeds/gen/idx"
    seed listing "$seeds/gen/listing"
    for t in $need; do mkdir -p "$corpus/$t"; [ -d "$seeds/$t" ] && cp "$seeds/$t"/* "$corpus/$t/"; done
fi

bad=0
for t in "$@"; do
    mkdir -p "$corpus/$t"
    log=$found/$t.log
    "$B/fuzz/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$found/$t-" "$corpus/$t" >"$log" 2>&1
    rc=$?
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    if [ "$rc" -eq 0 ]; then
        echo "fuzz $t: ${runs:-?} inputs in ${secs} s, ${cov:-cov ?}, corpus $(ls "$corpus/$t" | wc -l) files: nothing found"
    else
        bad=$((bad + 1))
        echo "FOUND fuzz $t (exit $rc): $(ls -t "$found/$t-"* 2>/dev/null | head -1); its log: $log"
        grep -E 'ERROR|SUMMARY|runtime error|#[0-9] ' "$log" | head -n 12 | sed 's/^/    /'
    fi
done
echo "fuzz: $# targets, $bad found something"
[ "$bad" -eq 0 ]
