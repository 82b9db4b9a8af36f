#!/usr/bin/env python3
"""tools/bench_data_torch.py - torchvision's ImageNet input pipeline on an
image folder, the reference for `trainer --bench-data` (tools/bench_data.sh).

    bench_data_torch.py ROOT --transform train|eval [--workers W] [--batch B] [--seconds S]

torchvision.datasets.ImageFolder(ROOT) (PIL decodes, with the libjpeg-turbo
Pillow ships) with the transform
    train  RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet)
    eval   Resize(256), CenterCrop(224), ToTensor(), Normalize(ImageNet)
through a DataLoader (shuffle on, batch B, W worker processes; W = 0 runs the
transform in this process). The first batch warms up (workers start, files
enter the page cache); then batches are timed for S seconds (the epoch
restarts if it ends). Prints one line:

    torchvision TRANSFORM workers W batch B: X img/s
"""
import argparse
import sys
import time

import torch
import torchvision
from torchvision import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root")
    ap.add_argument("--transform", choices=("train", "eval"), required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.transform == "train":
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    else:
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = torchvision.datasets.ImageFolder(a.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
                                     persistent_workers=a.workers > 0)
    it = iter(dl)
    next(it)
    images, t0 = 0, time.perf_counter()
    t = t0
    while t - t0 < a.seconds:
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(dl)
            continue
        images += x.shape[0]
        t = time.perf_counter()
    print(f"torchvision {a.transform} workers {a.workers} batch {a.batch}: {images / (t - t0):.1f} img/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
