#!/usr/bin/env python3
"""tools/check_image_torch.py - the loader's decode and resize against
torchvision's on the same files.

    check_image_torch.py RENDER_IMAGE DIR [--max N] [--seed S] [--json]

For up to N image files under DIR (sorted, spread evenly), with a crop drawn
as RandomResizedCrop draws it, renders through RENDER_IMAGE
(build/tools/render_image) and through torchvision on PIL images:
  train  F.resized_crop(img, y, x, ch, cw, [224, 224], BILINEAR)
  eval   F.center_crop(F.resize(img, 256, BILINEAR), 224)
each with data.jpeg_scaling off (full-size decode) and on (--dct). Prints,
per transform and mode, the largest absolute difference in levels (0..255),
the mean, and the share of values off by more than 1, over all files; with
--json one JSON object. Exit status 0 when the full-size renders are within
1 level of torchvision everywhere (tests/test_image_torch.sh also bounds the
reduced-size renders), 1 otherwise, 2 usage.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode


def crop_params(rng, w, h):
    """torchvision's RandomResizedCrop.get_params, scale (0.08, 1)."""
    area = w * h
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = int(round(math.sqrt(target * ratio))), int(round(math.sqrt(target / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    return 0, 0, w, h


def render(tool, path, args, tmp):
    out = os.path.join(tmp, "r.ppm")
    subprocess.run([tool, path, out] + args, check=True)
    return np.asarray(Image.open(out).convert("RGB")).astype(np.int32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tool")
    ap.add_argument("dir")
    ap.add_argument("--max", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(a.dir) for f in fs
                   if f.lower().endswith((".jpg", ".jpeg", ".png")))
    if not files:
        print(f"check_image_torch.py: no images under {a.dir}", file=sys.stderr)
        return 2
    if len(files) > a.max:
        files = [files[i * len(files) // a.max] for i in range(a.max)]
    rng = random.Random(a.seed)
    stats = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            img = Image.open(path).convert("RGB")
            w, h = img.size
            x, y, cw, ch = crop_params(rng, w, h)
            want = {
                "train": np.asarray(F.resized_crop(img, y, x, ch, cw, [224, 224], InterpolationMode.BILINEAR)),
                "eval": np.asarray(F.center_crop(F.resize(img, 256, InterpolationMode.BILINEAR), 224)),
            }
            args = {"train": ["--crop", str(x), str(y), str(cw), str(ch), "224", "224"],
                    "eval": ["--centre", "256", "224", "224"]}
            for kind in ("train", "eval"):
                for mode, extra in (("full", []), ("dct", ["--dct"])):
                    d = np.abs(render(a.tool, path, args[kind] + extra, tmp) - want[kind].astype(np.int32))
                    s = stats.setdefault(f"{kind} {mode}", {"max": 0, "sum": 0.0, "over1": 0, "n": 0,
                                                             "worst": ""})
                    if d.max() > s["max"]:
                        s["max"], s["worst"] = int(d.max()), path
                    s["sum"] += float(d.sum())
                    s["over1"] += int((d > 1).sum())
                    s["n"] += d.size
    result = {k: {"max": v["max"], "mean": v["sum"] / v["n"], "over1": v["over1"] / v["n"], "worst": v["worst"]}
              for k, v in stats.items()}
    result["files"] = len(files)
    if a.json:
        print(json.dumps(result))
    else:
        print(f"{len(files)} files; absolute difference from torchvision, levels 0..255")
        for k, v in result.items():
            if k != "files":
                print(f"  {k:10s} max {v['max']:3d}  mean {v['mean']:.4f}  >1: {100 * v['over1']:.3f} %"
                      f"  (worst {os.path.relpath(v['worst'], a.dir) if v['worst'] else '-'})")
    return 0 if result["train full"]["max"] <= 1 and result["eval full"]["max"] <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
