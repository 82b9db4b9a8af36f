#!/usr/bin/env bash
# tests/test_prepare_imagenet.sh - tools/prepare_imagenet.py on a fake
# ImageNet of the real archives' shape: a training tar of one tar per class
# (3 classes, 4-6 JPEGs each), a validation tar of 9 flat files, and a devkit
# (.tar.gz) with data/meta.mat (the synsets table, leaves and parents, as
# the real one; written by scipy when the benchmark environment has it, else
# by the MAT-file writer below, compressed and not) and the ground truth.
# Checks: the tree (every file in its class, bytes intact), the trainer
# listing it, a second run skipping everything, a resumed run after a class
# folder and an image were removed and a partial class left behind, and the
# refusals: a corrupt training archive, a ground truth of the wrong length,
# a count that is not the expected one, a missing archive, usage errors.
# Run from the repository root after `make`. Takes a few seconds.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
py=python3
if ${TORCH_PYTHON:-/opt/torch-venv/bin/python} -c 'import scipy.io' 2>/dev/null; then
    py=${TORCH_PYTHON:-/opt/torch-venv/bin/python}
fi
tool=tools/prepare_imagenet.py

# The fake archives. Class folders are WNIDs; meta.mat numbers them 1..3 in
# an order that is not the sorted one (as ILSVRC2012_ID 1 is n02119789).
"$py" - "$tmp" <<'PY'
import io, os, struct, sys, tarfile, zlib
tmp = sys.argv[1]
wnids = ["n02119789", "n01440764", "n03000134"]          # ILSVRC2012_ID 1, 2, 3
counts = [5, 4, 6]
def blob(seed, n=300):
    return bytes([0xFF, 0xD8, 0xFF]) + bytes((seed * 31 + i * 7) % 256 for i in range(n))
def add(tar, name, data):
    ti = tarfile.TarInfo(name); ti.size = len(data); tar.addfile(ti, io.BytesIO(data))
with tarfile.open(os.path.join(tmp, "train.tar"), "w") as outer:
    for k, w in enumerate(wnids):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as inner:
            for i in range(counts[k]):
                add(inner, f"{w}_{i}.JPEG", blob(100 * k + i))
        add(outer, f"{w}.tar", buf.getvalue())
truth = [2, 1, 3, 3, 1, 2, 2, 3, 1]
with tarfile.open(os.path.join(tmp, "val.tar"), "w") as t:
    for i in range(len(truth)):
        add(t, f"ILSVRC2012_val_{i + 1:08d}.JPEG", blob(1000 + i))
# the synsets: three leaves, then two parents (ILSVRC2012_ID > classes, with children)
syn = [(k + 1, w, f"class {k}", 0, []) for k, w in enumerate(wnids)] + \
      [(4, "n00000001", "animal", 2, [1, 2]), (5, "n00000002", "entity", 2, [3, 4])]
def write_mat(path, compress):
    def el(t, data):
        return struct.pack("<II", t, len(data)) + data + b"\0" * ((-len(data)) % 8)
    def matrix(cls, dims, name, body):
        return el(14, el(6, struct.pack("<II", cls, 0)) + el(5, struct.pack("<%di" % len(dims), *dims)) +
                  el(1, name.encode()) + body)
    def num(v):
        return matrix(6, [1, len(v)], "", el(9, struct.pack("<%dd" % len(v), *v)) if v else el(9, b""))
    def char(s):
        return matrix(4, [1, len(s)], "", el(4, struct.pack("<%dH" % len(s), *map(ord, s))))
    fields = ["ILSVRC2012_ID", "WNID", "words", "num_children", "children"]
    names = b"".join(f.encode().ljust(32, b"\0") for f in fields)
    body = el(5, struct.pack("<i", 32)) + el(1, names)
    for i, w, words, nc, ch in syn:
        body += num([i]) + char(w) + char(words) + num([nc]) + num([float(c) for c in ch])
    var = matrix(2, [len(syn), 1], "synsets", body)
    if compress:
        var = struct.pack("<II", 15, len(zlib.compress(var))) + zlib.compress(var)
    head = b"MATLAB 5.0 MAT-file, fake devkit".ljust(116, b" ") + b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM"
    open(path, "wb").write(head + var)
try:
    import numpy as np, scipy.io
    fields = ["ILSVRC2012_ID", "WNID", "words", "num_children", "children"]
    rec = np.empty((len(syn), 1), dtype=[(f, object) for f in fields])
    for k, (i, w, words, nc, ch) in enumerate(syn):
        rec[k, 0] = (np.array([[i]], dtype=np.uint8), w, words, np.array([[nc]], dtype=np.uint8),
                     np.array([ch], dtype=np.uint16) if ch else np.zeros((1, 0)))
    scipy.io.savemat(os.path.join(tmp, "meta.mat"), {"synsets": rec}, do_compression=True)
    print("meta.mat written by scipy", scipy.__version__)
except ImportError:
    write_mat(os.path.join(tmp, "meta.mat"), True)
    print("meta.mat written by the test's writer (compressed)")
write_mat(os.path.join(tmp, "meta_plain.mat"), False)
for name, mat, gt in (("devkit.tar.gz", "meta.mat", truth), ("devkit_plain.tar.gz", "meta_plain.mat", truth),
                      ("devkit_short.tar.gz", "meta.mat", truth[:-1])):
    with tarfile.open(os.path.join(tmp, name), "w:gz") as t:
        t.add(os.path.join(tmp, mat), "ILSVRC2012_devkit_t12/data/meta.mat")
        add(t, "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt",
            "".join(f"{g}\n" for g in gt).encode())
PY
check "fake archives written" test -s "$tmp/train.tar" -a -s "$tmp/val.tar" -a -s "$tmp/devkit.tar.gz"

args=(--train "$tmp/train.tar" --val "$tmp/val.tar" --devkit "$tmp/devkit.tar.gz" --expect-train 15 --expect-val 9
      --classes 3)
out=$(python3 $tool "$tmp/in" "${args[@]}" 2>&1)
rc=$?
echo "$out"
check "prepare_imagenet: exits 0" test $rc -eq 0
check "train: 3 classes, 15 images" grep -q "train: 3 classes, 15 images (0 classes were already there)" <<<"$out"
check "val: 3 classes, 9 images" grep -q "val: 3 classes, 9 images (0 were already there)" <<<"$out"
check "train/n01440764 holds its 4 files" test "$(ls "$tmp/in/train/n01440764" | wc -l)" -eq 4
# ground truth 2,1,3,3,1,2,2,3,1 -> ID 2 is n01440764: images 1, 6, 7
check "val/n01440764 holds images 1, 6 and 7 (ILSVRC2012_ID 2)" \
    test "$(ls "$tmp/in/val/n01440764" | tr '\n' ' ')" = \
    "ILSVRC2012_val_00000001.JPEG ILSVRC2012_val_00000006.JPEG ILSVRC2012_val_00000007.JPEG "
check "val/n02119789 holds images 2, 5 and 9 (ILSVRC2012_ID 1)" \
    test "$(ls "$tmp/in/val/n02119789" | tr '\n' ' ')" = \
    "ILSVRC2012_val_00000002.JPEG ILSVRC2012_val_00000005.JPEG ILSVRC2012_val_00000009.JPEG "
"$py" - "$tmp" <<'PY'
import io, os, sys, tarfile
tmp = sys.argv[1]
with tarfile.open(os.path.join(tmp, "train.tar")) as outer:
    for m in outer:
        inner = tarfile.open(fileobj=outer.extractfile(m))
        for f in inner:
            got = open(os.path.join(tmp, "in/train", m.name[:-4], f.name), "rb").read()
            assert got == inner.extractfile(f).read(), f.name
PY
check "every training file's bytes equal the archive's" test $? -eq 0
out=$(./trainer --summary configs/resnet50.ini data.root="$tmp/in" 2>&1)
check "the trainer lists the tree: 15 training and 9 validation images in 3 classes" \
    grep -q "listed $tmp/in/train (15 images in 3 classes) and $tmp/in/val (9 images)" <<<"$out"

out=$(python3 $tool "$tmp/in" "${args[@]}" 2>&1)
check "second run: exits 0, every class and image already there" \
    bash -c '[ '$?' -eq 0 ] && grep -q "(3 classes were already there)" <<<"$1" && grep -q "(9 were already there)" <<<"$1"' _ "$out"

# Interrupted: a class folder gone, a partial one left, a validation image gone.
rm -rf "$tmp/in/train/n03000134" "$tmp/in/val/n01440764/ILSVRC2012_val_00000006.JPEG"
mkdir -p "$tmp/in/train/.n03000134.partial" && echo junk > "$tmp/in/train/.n03000134.partial/x.JPEG"
out=$(python3 $tool "$tmp/in" "${args[@]}" 2>&1)
rc=$?
check "resumed run: exits 0 and redoes one class and one image" \
    bash -c '[ '$rc' -eq 0 ] && grep -q "(2 classes were already there)" <<<"$1" && grep -q "(8 were already there)" <<<"$1"' _ "$out"
check "resumed run: the class is whole (6 files) and the partial folder gone" \
    test "$(ls "$tmp/in/train/n03000134" | wc -l)" -eq 6 -a ! -e "$tmp/in/train/.n03000134.partial"

# The devkit with an uncompressed meta.mat (the writer above) reads the same.
out=$(python3 $tool "$tmp/plain" --val "$tmp/val.tar" --devkit "$tmp/devkit_plain.tar.gz" --expect-val 9 --classes 3 2>&1)
check "uncompressed meta.mat: the same validation tree" diff <(cd "$tmp/in/val" && find . -type f | sort) \
    <(cd "$tmp/plain/val" && find . -type f | sort)

# Refusals.
head -c 3000 "$tmp/train.tar" > "$tmp/cut.tar"
out=$(python3 $tool "$tmp/x1" --train "$tmp/cut.tar" --expect-train 15 --classes 3 2>&1)
rc=$?
check "a truncated training archive: exit 1 naming it (rc $rc)" \
    bash -c '[ '$rc' -eq 1 ] && grep -q "cut.tar" <<<"$1"' _ "$out"
out=$(python3 $tool "$tmp/x2" --val "$tmp/val.tar" --devkit "$tmp/devkit_short.tar.gz" --expect-val 9 --classes 3 2>&1)
rc=$?
check "a ground truth of 8 labels for 9 images: exit 1 saying so" \
    bash -c '[ '$rc' -eq 1 ] && grep -q "8 labels in the ground truth, 9 images in the archive" <<<"$1"' _ "$out"
out=$(python3 $tool "$tmp/in" --train "$tmp/train.tar" --classes 3 2>&1)
rc=$?
check "the real count expected of a fake archive: exit 1 naming the split and both counts" \
    bash -c '[ '$rc' -eq 1 ] && grep -q "train: 15 images in 3 classes, expected 1281167 in 3" <<<"$1"' _ "$out"
out=$(python3 $tool "$tmp/x3" --train "$tmp/nope.tar" 2>&1)
check "a missing archive: exit 1 naming it" bash -c '[ '$?' -eq 1 ] && grep -q "nope.tar: no such file" <<<"$1"' _ "$out"
python3 $tool "$tmp/x4" --val "$tmp/val.tar" > /dev/null 2>&1
check "--val without --devkit: exit 2" test $? -eq 2
python3 $tool "$tmp/x5" > /dev/null 2>&1
check "no archive at all: exit 2" test $? -eq 2
[ "$fails" -eq 0 ]
