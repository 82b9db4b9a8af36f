#!/usr/bin/env python3
"""tools/bench_jpeg_train.py - training from JPEG files against training on
synthetic data, the same model and step, in one call (issue 31's goal: from
JPEGs at 90 % or more of the synthetic images/s, with the machine's cores).

    bench_jpeg_train.py ROOT [--config CFG] [--inputs "cpu nvjpeg synthetic"]
                        [--rounds R] [--steps N] [--skip K] [--log-every L]
                        [--workers W|auto] [--trainer PATH] [--out FILE]
                        [section.key=value ...]

ROOT is an image folder (ROOT/train/<class>/..., ROOT/val/<class>/...), e.g.
from `build/tools/to_imagefolder synthetic ROOT` or tools/photo_jpegs.py.
Each round runs, one after the other (the order reversed every other round):

    cpu        ./trainer CFG data.root=ROOT data.decoder=cpu ...
    nvjpeg     ./trainer CFG data.root=ROOT data.decoder=nvjpeg ...
    synthetic  ./trainer CFG data.kind=synthetic data.synthetic_shape=<ROOT's
               model input> data.synthetic_classes=<ROOT's classes> ...

each for N optimizer steps (train.max_steps; default 60) with a progress line
every L steps (default 10), no checkpoint, data.workers = W (auto: one per
CPU of this process but 2, at least 1), data.test_limit = one batch (the
evaluation at the end is outside the timed window), and the keys given after
ROOT. A run's images/s are those of its progress windows after its first K
steps (default 20: cuDNN's search, the loader filling its queue), from
metrics.jsonl: images over the windows' summed time. The folder runs' input
shape and classes are read from their start-up line, and the synthetic run
is given the same, so the two differ only in where the batches come from;
the shapes are checked.

Prints one line per run as it ends, then a markdown table: each input's
median images/s (its rounds in brackets), the median over rounds of its
ratio to the synthetic run of the same round, and the median share of its
windows spent waiting for batches. --out FILE writes the table too.
ROOT/train must hold at least N x batch images (no epoch ends inside the
runs: an epoch's end evaluates). Exit 0; 1 when a run fails (its last lines
are shown); 2 for usage.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
IMAGE_EXT = (".jpg", ".jpeg", ".png", ".bmp", ".tga", ".gif")
SHAPE_LINE = re.compile(r"^data: (\S+) .*, (\d+) train / \d+ test images of (\d+x\d+x\d+), (\d+) classes", re.M)


def usage_error(msg):
    print(f"bench_jpeg_train.py: {msg}", file=sys.stderr)
    sys.exit(2)


def count_images(train_dir):
    classes = n = 0
    for entry in sorted(os.scandir(train_dir), key=lambda e: e.name):
        if entry.is_dir():
            classes += 1
            n += sum(1 for f in os.scandir(entry.path) if f.name.lower().endswith(IMAGE_EXT))
    return classes, n


def config_value(config_path, overrides, key, default):
    """key ("section.name") from the overrides, else the INI file, else default."""
    for o in reversed(overrides):
        k, _, v = o.partition("=")
        if k.strip() == key:
            return v.strip()
    section, name = key.split(".", 1)
    current = None
    with open(config_path) as f:
        for line in f:
            line = line.split(";", 1)[0].split("#", 1)[0].strip()
            if line.startswith("[") and line.endswith("]"):
                current = line[1:-1].strip()
            elif current == section and "=" in line:
                k, _, v = line.partition("=")
                if k.strip() == name:
                    return v.strip()
    return default


def window_rate(metrics_path, skip):
    """(images/s, share of time waiting for data) over the step records after step `skip`."""
    steps = []
    with open(metrics_path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "step":
                steps.append(r)
    before = [r for r in steps if r["step"] <= skip]
    after = [r for r in steps if r["step"] > skip]
    if not before or not after:
        raise ValueError(f"{metrics_path}: no progress windows after step {skip} "
                         f"(steps logged: {[r['step'] for r in steps]})")
    images = seconds = waited = 0.0
    prev = before[-1]
    for r in after:
        di = r["images"] - prev["images"]
        dt = di / r["img_per_sec"] if r["img_per_sec"] > 0 else 0.0
        images += di
        seconds += dt
        waited += r["data_wait_ms"] * (r["step"] - prev["step"]) / 1e3
        prev = r
    if seconds <= 0:
        raise ValueError(f"{metrics_path}: the windows after step {skip} took no time")
    return images / seconds, waited / seconds


def main():
    ap = argparse.ArgumentParser(add_help=True, usage=__doc__.split("\n\n")[1])
    ap.add_argument("root")
    ap.add_argument("--config", default="configs/resnet50.ini")
    ap.add_argument("--inputs", default="cpu nvjpeg synthetic")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=20)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--workers", default="auto")
    ap.add_argument("--trainer", default="./trainer")
    ap.add_argument("--out", default="")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_intermixed_args()
    os.chdir(REPO)
    inputs = a.inputs.split()
    if not inputs or any(i not in ("cpu", "nvjpeg", "synthetic") for i in inputs) or len(set(inputs)) != len(inputs):
        usage_error(f"--inputs: some of cpu, nvjpeg, synthetic, each once, not '{a.inputs}'")
    folder = [i for i in inputs if i != "synthetic"]
    if not folder:
        usage_error("--inputs: at least one of cpu and nvjpeg (the synthetic run takes a folder run's shape)")
    if a.rounds < 1 or a.steps < 1 or a.log_every < 1 or a.skip < 0:
        usage_error("--rounds, --steps and --log-every must be at least 1, --skip at least 0")
    if a.skip % a.log_every or a.skip + a.log_every > a.steps:
        usage_error(f"--skip ({a.skip}) must be a multiple of --log-every ({a.log_every}), with at least one window "
                    f"of --steps ({a.steps}) after it")
    for o in a.overrides:
        if "=" not in o or "." not in o.partition("=")[0]:
            usage_error(f"'{o}' is not section.key=value")
    if not os.path.isfile(a.config):
        usage_error(f"--config: no file '{a.config}'")
    train_dir = os.path.join(a.root, "train")
    if not os.path.isdir(train_dir):
        usage_error(f"{train_dir} is not a directory (ROOT holds train/<class>/ and val/<class>/)")
    classes, n_images = count_images(train_dir)
    batch = int(config_value(a.config, a.overrides, "train.batch_size", "128"))
    accumulate = int(config_value(a.config, a.overrides, "train.accumulate", "1"))
    need = a.steps * batch * accumulate
    if n_images < need:
        usage_error(f"{train_dir} holds {n_images} images in {classes} classes; {a.steps} steps of "
                    f"{batch * accumulate} images need {need} without an epoch's end (and its evaluation) "
                    f"inside the run: fewer --steps, or more images (hard links to the same files will do)")
    workers = a.workers
    if workers == "auto":
        workers = str(max(1, len(os.sched_getaffinity(0)) - 2))
    elif not workers.isdigit() or int(workers) < 1:
        usage_error(f"--workers: a whole number >= 1 or auto, not '{workers}'")

    tmp = tempfile.mkdtemp(prefix="bench_jpeg_train.")
    common = [f"train.max_steps={a.steps}", f"train.log_every={a.log_every}", "checkpoint.every_epochs=0",
              "checkpoint.every_steps=0", "checkpoint.resume=none", f"data.workers={workers}",
              f"data.test_limit={batch}"]
    shape = None  # (CxHxW, classes) of the folder runs' model input
    rates = {i: [] for i in inputs}
    ratios = {i: [] for i in inputs}
    waits = {i: [] for i in inputs}
    plans = None  # a GPU run's conv_plans.txt, given to the later runs: one search per call
    try:
        for rnd in range(a.rounds):
            order = list(inputs)
            if rnd % 2:
                order.reverse()
            # the synthetic run needs a folder run's shape: in round 1 the folder runs come first
            if shape is None:
                order = [i for i in order if i != "synthetic"] + [i for i in order if i == "synthetic"]
            this = {}
            for inp in order:
                out_dir = os.path.join(tmp, f"{inp}-{rnd + 1}")
                os.makedirs(out_dir)
                if plans:
                    shutil.copy(plans, os.path.join(out_dir, "conv_plans.txt"))
                if inp == "synthetic":
                    keys = ["data.kind=synthetic", f"data.synthetic_shape={shape[0]}",
                            f"data.synthetic_classes={shape[1]}", f"data.synthetic_train={need}",
                            f"data.synthetic_test={batch}"]
                else:
                    keys = [f"data.root={a.root}", f"data.decoder={inp}"]
                cmd = [a.trainer, a.config] + common + a.overrides + keys + [f"train.out_dir={out_dir}"]
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if p.returncode != 0:
                    print(f"bench_jpeg_train.py: the {inp} run failed (exit {p.returncode}): {' '.join(cmd)}",
                          file=sys.stderr)
                    print("\n".join(p.stdout.splitlines()[-15:]), file=sys.stderr)
                    return 1
                m = SHAPE_LINE.search(p.stdout)
                if not m:
                    print(f"bench_jpeg_train.py: the {inp} run printed no 'data: ... images of CxHxW' line",
                          file=sys.stderr)
                    return 1
                got = (m.group(3), int(m.group(4)))
                if shape is None:
                    shape = got
                elif got != shape:
                    print(f"bench_jpeg_train.py: the {inp} run's input is {got[0]} in {got[1]} classes, the "
                          f"others' {shape[0]} in {shape[1]}: not the same step", file=sys.stderr)
                    return 1
                rate, wait = window_rate(os.path.join(out_dir, "metrics.jsonl"), a.skip)
                this[inp] = rate
                waits[inp].append(wait)
                rates[inp].append(rate)
                print(f"round {rnd + 1} {inp}: {rate:.1f} img/s, waiting for data {100 * wait:.1f}% "
                      f"of steps {a.skip + 1}-{a.steps}", flush=True)
                kept = os.path.join(out_dir, "conv_plans.txt")
                if plans is None and os.path.isfile(kept):
                    plans = os.path.join(tmp, "conv_plans.txt")
                    shutil.copy(kept, plans)
            if "synthetic" in this:
                for inp in inputs:
                    ratios[inp].append(this[inp] / this["synthetic"])
    except (OSError, ValueError) as e:
        print(f"bench_jpeg_train.py: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def rounds_of(v, fmt):
        return ", ".join(fmt.format(x) for x in v)

    lines = [f"{a.config} {' '.join(a.overrides)}: {shape[0]}, {shape[1]} classes, batch {batch}, "
             f"data.workers = {workers}, steps {a.skip + 1}-{a.steps} of {a.steps}, {a.rounds} round(s), medians",
             "",
             "| input | images/s | / synthetic | waiting for data |",
             "|---|---:|---:|---:|"]
    for inp in inputs:
        ratio = f"{statistics.median(ratios[inp]):.3f}" if ratios[inp] else "-"
        lines.append(f"| {inp} | {statistics.median(rates[inp]):.1f} ({rounds_of(rates[inp], '{:.1f}')}) | {ratio} | "
                     f"{100 * statistics.median(waits[inp]):.1f}% |")
    text = "\n".join(lines) + "\n"
    print()
    print(text, end="")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
