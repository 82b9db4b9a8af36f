#!/usr/bin/env python3
"""tools/check_torchvision.py - checks cnntrain's models and exported weights
against torchvision, numerically.

For each model: writes a small folder of PNG images (to_imagefolder synthetic,
lossless, so PIL reads the very pixels stb_image reads), trains a few steps
with ./trainer on it (so weights and batch-norm statistics are not their
initial values), exports the final checkpoint with --export, loads the file
into the torchvision model with load_state_dict(strict=True), evaluates the
same validation images with the same normalisation in eval mode, and compares
the loss and top-1 with the trainer's last evaluation in metrics.jsonl.

A match means: the same tensor names and shapes (strict load), the same
layer arithmetic (forward), the same batch-norm running statistics, and the
same data path (listing order, decoding, normalisation).

Then the other direction (model.init_from): torchvision's own initial
weights are saved with safetensors, the trainer starts from them (at a
learning rate of 1e-30, so a step changes no weight), and the exported
result must hold every learnable tensor unchanged (bit for bit, but for
zeros, which such a step may move by about 1e-30).

And `trainer --eval` of torchvision's file, unchanged: its loss and top-1 on
the validation images must be those torchvision's model gets on them (the
weights read as torchvision wrote them, nothing trained in between).

Needs PyTorch, torchvision and safetensors (not project dependencies):
    python3 -m venv venv && venv/bin/pip install torch torchvision safetensors
    venv/bin/python tools/check_torchvision.py [--models resnet18,vgg11_bn,...]
Run from the repository root after `make`. Exit status 0 when every model
matches, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision
from PIL import Image
from safetensors.torch import load_file, save_file

# model -> input side (inception_v3 needs 299 for its auxiliary head)
SIDES = {"inception_v3": 299}
MEAN = [0.5, 0.45, 0.4]
STD = [0.25, 0.3, 0.2]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}\n")
        sys.exit(1)
    return r.stdout + r.stderr


def torch_eval(model, root, classes):
    """Mean cross-entropy and top-1 over root/<class>/<image>, sorted as ImageFolder sorts."""
    xs, ys = [], []
    for k, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            img = np.asarray(Image.open(os.path.join(root, cls, name)).convert("RGB"), dtype=np.float32) / 255.0
            xs.append((img - np.array(MEAN, np.float32)) / np.array(STD, np.float32))
            ys.append(k)
    x = torch.from_numpy(np.stack(xs)).permute(0, 3, 1, 2).contiguous()
    y = torch.tensor(ys)
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + 8]) for i in range(0, len(x), 8)])
        loss = torch.nn.functional.cross_entropy(logits.double(), y, reduction="mean").item()
        top1 = (logits.argmax(1) == y).double().mean().item()
    return loss, top1


def check(model_name, work, trainer, tool, tol):
    side = SIDES.get(model_name, 64)
    data = os.path.join(work, f"data-{model_name}")
    run([tool, "synthetic", data, "--classes", "4", "--train", "32", "--val", "16", "--size", f"{side}x{side}",
         "--format", "png", "--seed", "3"])
    out_dir = os.path.join(work, f"run-{model_name}")
    run([trainer, "configs/resnet20-fashion.ini", f"model.name={model_name}", "model.dropout=0",
         "data.kind=imagefolder", f"data.root={data}", f"data.image_size={side}", "data.channels=3", "data.crop=pad",
         "data.mean=" + ",".join(map(str, MEAN)), "data.std=" + ",".join(map(str, STD)), "train.batch_size=8",
         "train.eval_batch_size=8", "train.epochs=1", "optim.lr=0.01", "optim.warmup_epochs=0",
         "checkpoint.every_epochs=1", f"train.out_dir={out_dir}"])
    evals = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl")) if '"kind":"eval"' in l]
    ours = evals[-1]
    ckpt = os.path.join(out_dir, "checkpoints", "ckpt-000001.cnt")
    weights = os.path.join(work, f"{model_name}.safetensors")
    run([trainer, "--export", ckpt, weights])
    kwargs = {"num_classes": 4}
    if model_name == "inception_v3":
        kwargs.update(aux_logits=True, init_weights=False, transform_input=False)
    model = getattr(torchvision.models, model_name)(**kwargs)
    model.load_state_dict(load_file(weights), strict=True)
    model.eval()
    classes = sorted(os.listdir(os.path.join(data, "val")))
    loss, top1 = torch_eval(model, os.path.join(data, "val"), classes)
    rel = abs(loss - ours["eval_loss"]) / max(abs(loss), 1e-12)
    ok = rel < tol and abs(top1 - ours["top1"]) < 1e-9
    print(f"{model_name:14s} {side:4d}px  cnntrain loss {ours['eval_loss']:.6g} top-1 {ours['top1']:.4f}   "
          f"torchvision loss {loss:.6g} top-1 {top1:.4f}   rel diff {rel:.1e}  {'ok' if ok else 'MISMATCH'}")
    return ok


def eval_args(model_name, data, side):
    """The trainer's data and model keys for these PNG folders, as check() trains with them."""
    return [f"model.name={model_name}", "model.dropout=0", "data.kind=imagefolder", f"data.root={data}",
            f"data.image_size={side}", "data.channels=3", "data.crop=pad", "data.mean=" + ",".join(map(str, MEAN)),
            "data.std=" + ",".join(map(str, STD)), "train.batch_size=8", "train.eval_batch_size=8"]


def check_eval(model_name, work, trainer, tool, tol):
    """trainer --eval of torchvision's own (initial) weights against torchvision's evaluation of them."""
    side = SIDES.get(model_name, 64)
    data = os.path.join(work, f"data-{model_name}")
    src = os.path.join(work, f"{model_name}-torchvision.safetensors")  # written by check_init_from
    kwargs = {"num_classes": 4}
    if model_name == "inception_v3":
        kwargs.update(aux_logits=True, init_weights=True, transform_input=False)
    model = getattr(torchvision.models, model_name)(**kwargs)
    model.load_state_dict(load_file(src), strict=True)
    model.eval()
    classes = sorted(os.listdir(os.path.join(data, "val")))
    loss, top1 = torch_eval(model, os.path.join(data, "val"), classes)
    out = run([trainer, "--eval", "configs/resnet20-fashion.ini", src] + eval_args(model_name, data, side))
    line = [l for l in out.splitlines() if l.startswith("eval: ") and " test images, top-1 " in l]
    if not line:
        print(f"{model_name:14s} --eval: no result line\n{out}")
        return False
    # "eval: FILE: N test images, top-1 X%, top-5 Y%, loss Z (T s)"
    fields = line[0].rsplit(": ", 1)[1]
    ours_top1 = float(fields.split("top-1 ")[1].split("%")[0]) / 100
    ours_loss = float(fields.split("loss ")[1].split(" ")[0])
    # the line prints the loss with 4 decimals
    ok = abs(ours_loss - loss) <= max(tol * abs(loss), 5e-5) and abs(ours_top1 - top1) < 5e-5
    print(f"{model_name:14s} --eval of torchvision's weights: loss {ours_loss:.4f} top-1 {ours_top1:.4f}   "
          f"torchvision loss {loss:.4f} top-1 {top1:.4f}  {'ok' if ok else 'MISMATCH'}")
    return ok


def check_init_from(model_name, work, trainer, tool):
    side = SIDES.get(model_name, 64)
    data = os.path.join(work, f"data-{model_name}")
    if not os.path.isdir(data):
        run([tool, "synthetic", data, "--classes", "4", "--train", "32", "--val", "16", "--size", f"{side}x{side}",
             "--format", "png", "--seed", "3"])
    kwargs = {"num_classes": 4}
    if model_name == "inception_v3":
        kwargs.update(aux_logits=True, init_weights=True, transform_input=False)
    torch.manual_seed(7)
    model = getattr(torchvision.models, model_name)(**kwargs)
    src = os.path.join(work, f"{model_name}-torchvision.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, src)
    out_dir = os.path.join(work, f"init-{model_name}")
    log = run([trainer, "configs/resnet20-fashion.ini", f"model.name={model_name}", "model.dropout=0",
               f"model.init_from={src}", "data.kind=imagefolder", f"data.root={data}", f"data.image_size={side}",
               "data.channels=3", "data.crop=pad", "data.mean=0.5", "data.std=0.25", "train.batch_size=8",
               "train.epochs=1", "optim.lr=1e-30", "optim.momentum=0", "optim.nesterov=false",
               "optim.weight_decay=0", "optim.warmup_epochs=0", "checkpoint.every_epochs=1",
               f"train.out_dir={out_dir}"])
    ckpt = os.path.join(out_dir, "checkpoints", "ckpt-000001.cnt")
    back = os.path.join(work, f"{model_name}-back.safetensors")
    run([trainer, "--export", ckpt, back])
    got = load_file(back)
    learnable = [k for k, _ in model.named_parameters()]
    # A step at lr 1e-30 leaves every non-zero weight unchanged in fp32; a zero
    # (a bias, a batch-norm shift) may move by ~1e-30 x its gradient.
    bad = [k for k in learnable if (got[k] - model.state_dict()[k]).abs().max().item() > 1e-20]
    ok = not bad and "init_from" in log
    print(f"{model_name:14s} init_from: {len(learnable)} learnable tensors from torchvision, "
          f"{len(learnable) - len(bad)} back unchanged  {'ok' if ok else 'MISMATCH ' + ', '.join(bad[:5])}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,vgg11_bn,vgg16,inception_v3")
    ap.add_argument("--trainer", default="./trainer")
    ap.add_argument("--tool", default="./build/tools/to_imagefolder")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative loss difference accepted")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
    with tempfile.TemporaryDirectory() as work:
        results = [check(m, work, args.trainer, args.tool, args.tol) for m in args.models.split(",")]
        results += [check_init_from(m, work, args.trainer, args.tool) for m in args.models.split(",")]
        results += [check_eval(m, work, args.trainer, args.tool, args.tol) for m in args.models.split(",")]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
