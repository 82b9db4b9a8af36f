#!/usr/bin/env python3
"""tools/photo_jpegs.py - an image-folder tree of natural-photo JPEGs shaped
like ImageNet's, for the JPEG benchmarks and the torchvision comparison.

    photo_jpegs.py OUT [--train N] [--val N] [--classes K] [--seed S] [SOURCE ...]

Each file is a random crop (30-100 % of the area, aspect 3/4 to 4/3) of a real
photograph, resized so that its longer side is 500 (ImageNet's typical
500x375 / 375x500 / 500x333), flipped at random, and saved by PIL (which
encodes with libjpeg-turbo) at a quality drawn from 75-95 with 4:2:0 chroma,
as most of ImageNet is; one file in 50 is greyscale and one in 25
progressive, as ImageNet has both, and the first training file is CMYK (a
few ImageNet files are). Sources: the JPEG or PNG files given, else the
photographs scikit-image ships (astronaut, chelsea, coffee, rocket,
hubble_deep_field, immunohistochemistry, retina, camera, coins, moon, brick,
grass, gravel) and matplotlib's grace_hopper.jpg, whichever are present.
OUT/train/<class>/<n>.JPEG and OUT/val/<class>/<n>.JPEG; OUT/train must not
exist. Needs Pillow (and scikit-image for the default sources): run it with
the benchmark environment's Python (tools/bench_cpu_torch.sh makes
/opt/torch-venv). Exit 0 done, 1 failure, 2 usage.
"""
import argparse
import os
import random
import sys

try:
    from PIL import Image
except ImportError:
    sys.exit("photo_jpegs.py: needs Pillow (pip install pillow, or /opt/torch-venv/bin/python)")

MPL_PHOTO = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg"
SKIMAGE_PHOTOS = ["astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
                  "camera", "coins", "moon", "brick", "grass", "gravel"]


def default_sources():
    out = []
    try:
        import skimage.data as d
        for name in SKIMAGE_PHOTOS:
            try:
                a = getattr(d, name)()
            except Exception:  # a data file that must be downloaded: skip it
                continue
            out.append((name, Image.fromarray(a).convert("RGB")))
    except ImportError:
        pass
    if os.path.exists(MPL_PHOTO):
        out.append(("grace_hopper", Image.open(MPL_PHOTO).convert("RGB")))
    return out


def make_one(rng, src):
    w, h = src.size
    for _ in range(20):
        area = w * h * rng.uniform(0.3, 1.0)
        ratio = rng.uniform(3 / 4, 4 / 3)
        cw, ch = int(round((area * ratio) ** 0.5)), int(round((area / ratio) ** 0.5))
        if cw <= w and ch <= h:
            break
    else:
        cw, ch = w, h
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    img = src.crop((x, y, x + cw, y + ch))
    long_side = 500
    if cw >= ch:
        size = (long_side, max(1, round(long_side * ch / cw)))
    else:
        size = (max(1, round(long_side * cw / ch)), long_side)
    img = img.resize(size, Image.BICUBIC)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("sources", nargs="*")
    ap.add_argument("--train", type=int, default=1000)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.classes < 1 or a.train < a.classes or a.val < 0:
        ap.error("need --classes >= 1, --train >= --classes, --val >= 0")
    if os.path.exists(os.path.join(a.out, "train")):
        print(f"photo_jpegs.py: {a.out}/train already exists", file=sys.stderr)
        return 1
    if a.sources:
        srcs = [(p, Image.open(p).convert("RGB")) for p in a.sources]
    else:
        srcs = default_sources()
    if not srcs:
        print("photo_jpegs.py: no source photographs (install scikit-image or give files)", file=sys.stderr)
        return 1
    rng = random.Random(a.seed)
    for split, n in (("train", a.train), ("val", a.val)):
        for i in range(n):
            cls = i % a.classes
            d = os.path.join(a.out, split, f"{cls:0{len(str(a.classes - 1))}d}")
            os.makedirs(d, exist_ok=True)
            img = make_one(rng, rng.choice(srcs)[1])
            opts = {"quality": rng.randint(75, 95), "subsampling": "4:2:0"}
            if rng.random() < 1 / 25:
                opts["progressive"] = True
            if split == "train" and i == 0:
                img = img.convert("CMYK")
            elif rng.random() < 1 / 50:
                img = img.convert("L")
            img.save(os.path.join(d, f"{i:06d}.JPEG"), "JPEG", **opts)
    print(f"photo_jpegs.py: {a.train} training and {a.val} validation JPEGs in {a.out} from {len(srcs)} photographs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
