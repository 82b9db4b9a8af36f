#!/usr/bin/env python3
"""tools/prepare_imagenet.py - ImageNet's ILSVRC2012 archives as the
class-folder tree the trainer reads (data.kind = imagefolder):

    prepare_imagenet.py OUT --train ILSVRC2012_img_train.tar
                            --val ILSVRC2012_img_val.tar --devkit ILSVRC2012_devkit_t12.tar.gz
                            [--expect-train N] [--expect-val N]

OUT/train/<wnid>/<file>.JPEG from the training archive (a tar of one tar per
class, n01440764.tar ...), and OUT/val/<wnid>/ILSVRC2012_val_NNNNNNNN.JPEG
from the validation archive (50,000 files in one folder) sorted into classes
by the devkit's ground truth (data/ILSVRC2012_validation_ground_truth.txt:
one ILSVRC2012_ID per image, in file order; data/meta.mat: the synsets'
ILSVRC2012_ID and WNID, read here without scipy). Either split may be given
alone.

Idempotent and resumable: a class folder is written under a temporary name
and renamed when complete, so a class that is there is whole and is skipped
(its files counted); a validation image is written to a temporary name and
renamed, and one already there with the archive's size is skipped. Kill it
at any moment and run it again. At the end the counts are checked: 1,281,167
training images in 1,000 classes and 50,000 validation images in 1,000
classes (--expect-train / --expect-val N change the totals, for other
releases or tests; 0 skips the check); a mismatch exits 1 naming the split.

Exit 0 when the tree is complete; 1 on a missing or corrupt archive, a
ground-truth file that does not match the archive, a count that is not the
expected one, or a full disk (the message names the file); 2 for usage.
"""
import argparse
import os
import shutil
import struct
import sys
import tarfile
import zlib

TRAIN_IMAGES, VAL_IMAGES, CLASSES = 1281167, 50000, 1000


class Fail(Exception):
    pass


# ---- MATLAB 5 MAT-files, enough of them for the devkit's meta.mat ----

MI_INT8, MI_UINT8, MI_INT16, MI_UINT16, MI_INT32, MI_UINT32 = 1, 2, 3, 4, 5, 6
MI_SINGLE, MI_DOUBLE, MI_INT64, MI_UINT64, MI_MATRIX, MI_COMPRESSED = 7, 9, 12, 13, 14, 15
MI_UTF8, MI_UTF16 = 16, 17
NUMERIC = {MI_INT8: "b", MI_UINT8: "B", MI_INT16: "h", MI_UINT16: "H", MI_INT32: "i", MI_UINT32: "I",
           MI_SINGLE: "f", MI_DOUBLE: "d", MI_INT64: "q", MI_UINT64: "Q"}
MX_CELL, MX_STRUCT, MX_CHAR = 1, 2, 4


def mat_elements(buf, pos, end, e):
    """(type, data) of each data element in buf[pos:end]; e: '<' or '>'."""
    while pos + 8 <= end:
        word, = struct.unpack_from(e + "I", buf, pos)
        if word >> 16:  # small element: type and size in one word, data in the next four bytes
            typ, n = word & 0xFFFF, word >> 16
            yield typ, buf[pos + 4:pos + 4 + n]
            pos += 8
            continue
        typ, n = struct.unpack_from(e + "II", buf, pos)
        data = buf[pos + 8:pos + 8 + n]
        if len(data) != n:
            raise Fail("truncated element")
        yield typ, data
        pos += 8 + n
        if typ != MI_COMPRESSED:
            pos += (-n) % 8


def mat_values(typ, data, e):
    if typ in NUMERIC:
        code = NUMERIC[typ]
        return list(struct.unpack(e + code * (len(data) // struct.calcsize(code)), data))
    if typ == MI_UTF8:
        return data.decode("utf-8")
    if typ == MI_UTF16:
        return data.decode("utf-16-le" if e == "<" else "utf-16-be")
    raise Fail(f"unsupported data type {typ}")


def mat_matrix(data, e):
    """An miMATRIX's value: a list of dicts (struct), a list (cell), a str
    (char) or a list of numbers (numeric), column-major."""
    parts = mat_elements(data, 0, len(data), e)
    flags = mat_values(*next(parts), e)
    dims = mat_values(*next(parts), e)
    next(parts)  # the array's name
    cls, count = flags[0] & 0xFF, 1
    for d in dims:
        count *= d
    if cls == MX_STRUCT:
        width = mat_values(*next(parts), e)[0]
        raw = next(parts)[1]
        names = [raw[i:i + width].split(b"\0")[0].decode() for i in range(0, len(raw), width)]
        out = []
        for _ in range(count):
            out.append({name: mat_matrix(next(parts)[1], e) for name in names})
        return out
    if cls == MX_CELL:
        return [mat_matrix(next(parts)[1], e) for _ in range(count)]
    if count == 0:
        return "" if cls == MX_CHAR else []
    values = mat_values(*next(parts), e)
    if cls == MX_CHAR:
        return values if isinstance(values, str) else "".join(chr(c) for c in values)
    return values


def read_mat(raw):
    """The variables of a MAT-file v5 (bytes) as {name: value}."""
    if len(raw) < 128 or not raw[:6] == b"MATLAB":
        raise Fail("not a MATLAB 5 MAT-file")
    e = "<" if raw[126:128] == b"IM" else ">"
    out = {}
    for typ, data in mat_elements(raw, 128, len(raw), e):
        if typ == MI_COMPRESSED:
            data = zlib.decompress(data)
            typ, data = next(mat_elements(data, 0, len(data), e))
        if typ != MI_MATRIX:
            continue
        parts = mat_elements(data, 0, len(data), e)
        next(parts)
        next(parts)
        name = next(parts)[1].decode()
        out[name] = mat_matrix(data, e)
    return out


# ---- the archives ----

def write_atomic(path, src, size):
    """src (a file object) copied to path through path + '.partial'."""
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        shutil.copyfileobj(src, f, 1 << 20)
    if os.path.getsize(tmp) != size:
        raise Fail(f"{tmp}: {os.path.getsize(tmp)} bytes written, the archive says {size}")
    os.replace(tmp, path)


def open_tar(path, what):
    if not os.path.isfile(path):
        raise Fail(f"{what} {path}: no such file")
    try:
        return tarfile.open(path, "r:")
    except (tarfile.TarError, OSError) as ex:
        raise Fail(f"{what} {path}: not a tar archive ({ex})")


def prepare_train(tar_path, out):
    root = os.path.join(out, "train")
    os.makedirs(root, exist_ok=True)
    images = classes = done = 0
    with open_tar(tar_path, "training archive") as outer:
        for m in outer:
            if not m.isfile() or not m.name.endswith(".tar"):
                continue
            wnid = os.path.basename(m.name)[:-4]
            final = os.path.join(root, wnid)
            classes += 1
            if os.path.isdir(final):
                images += len(os.listdir(final))
                done += 1
                continue
            tmp = os.path.join(root, "." + wnid + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            try:
                with tarfile.open(fileobj=outer.extractfile(m), mode="r|") as inner:
                    for f in inner:
                        if not f.isfile():
                            continue
                        name = os.path.basename(f.name)
                        write_atomic(os.path.join(tmp, name), inner.extractfile(f), f.size)
                        images += 1
            except tarfile.TarError as ex:
                raise Fail(f"training archive {tar_path}: class tar {m.name} is corrupt ({ex})")
            os.replace(tmp, final)
    print(f"prepare_imagenet: train: {classes} classes, {images} images ({done} classes were already there)")
    return classes, images


def val_labels(devkit_path, n):
    """The WNID of each validation image, in file order, from the devkit."""
    if not os.path.isfile(devkit_path):
        raise Fail(f"devkit {devkit_path}: no such file")
    try:
        with tarfile.open(devkit_path, "r:*") as dk:
            files = {os.path.basename(m.name): m for m in dk if m.isfile()}
            for need in ("meta.mat", "ILSVRC2012_validation_ground_truth.txt"):
                if need not in files:
                    raise Fail(f"devkit {devkit_path}: no data/{need} in it")
            meta = read_mat(dk.extractfile(files["meta.mat"]).read())
            truth = dk.extractfile(files["ILSVRC2012_validation_ground_truth.txt"]).read().decode().split()
    except (tarfile.TarError, OSError, zlib.error) as ex:
        raise Fail(f"devkit {devkit_path}: not readable ({ex})")
    except (Fail, StopIteration, struct.error, UnicodeDecodeError) as ex:
        raise Fail(f"devkit {devkit_path}: data/meta.mat is not the synsets table ({ex or 'truncated'})")
    synsets = meta.get("synsets")
    if not isinstance(synsets, list) or not synsets or "WNID" not in synsets[0]:
        raise Fail(f"devkit {devkit_path}: data/meta.mat has no synsets table with WNIDs")
    wnid = {int(s["ILSVRC2012_ID"][0]): s["WNID"] for s in synsets}
    if len(truth) != n:
        raise Fail(f"devkit {devkit_path}: {len(truth)} labels in the ground truth, {n} images in the archive")
    try:
        return [wnid[int(t)] for t in truth]
    except (KeyError, ValueError) as ex:
        raise Fail(f"devkit {devkit_path}: ground-truth label {ex} is no synset of meta.mat")


def prepare_val(tar_path, devkit_path, out):
    root = os.path.join(out, "val")
    with open_tar(tar_path, "validation archive") as tar:
        members = sorted((m for m in tar.getmembers() if m.isfile()), key=lambda m: m.name)
        labels = val_labels(devkit_path, len(members))
        skipped = 0
        for m, wnid in zip(members, labels):
            d = os.path.join(root, wnid)
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, os.path.basename(m.name))
            if os.path.isfile(path) and os.path.getsize(path) == m.size:
                skipped += 1
                continue
            write_atomic(path, tar.extractfile(m), m.size)
    classes = len(set(labels))
    print(f"prepare_imagenet: val: {classes} classes, {len(members)} images ({skipped} were already there)")
    return classes, len(members)


def check(split, got, want_images, want_classes):
    classes, images = got
    if want_images and (images != want_images or classes != want_classes):
        raise Fail(f"{split}: {images} images in {classes} classes, expected {want_images} in {want_classes} "
                   f"(an incomplete archive? --expect-{split} sets another total)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--train")
    ap.add_argument("--val")
    ap.add_argument("--devkit")
    ap.add_argument("--expect-train", type=int, default=TRAIN_IMAGES)
    ap.add_argument("--expect-val", type=int, default=VAL_IMAGES)
    ap.add_argument("--classes", type=int, default=CLASSES)
    a = ap.parse_args()
    if not a.train and not a.val:
        ap.error("give --train, --val (with --devkit), or both")
    if a.val and not a.devkit:
        ap.error("--val needs --devkit (the validation labels are in it)")
    try:
        os.makedirs(a.out, exist_ok=True)
        if a.train:
            check("train", prepare_train(a.train, a.out), a.expect_train, a.classes)
        if a.val:
            check("val", prepare_val(a.val, a.devkit, a.out), a.expect_val, a.classes)
    except Fail as ex:
        print(f"prepare_imagenet: {ex}", file=sys.stderr)
        return 1
    except OSError as ex:
        print(f"prepare_imagenet: {ex.filename or a.out}: {ex.strerror}", file=sys.stderr)
        return 1
    print(f"prepare_imagenet: {a.out} is ready: ./trainer configs/resnet50.ini data.root={a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
