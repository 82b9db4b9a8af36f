#!/usr/bin/env python3
"""tools/bench_torch.py - PyTorch eager training throughput of a torchvision
model on random data, the reference for `trainer --bench` (tools/bench_gpu.sh).

    python3 tools/bench_torch.py MODEL CxHxW BATCH STEPS [--device cuda|cpu]
                                 [--precision fp32|tf32|bf16|fp16] [--layout nchw|nhwc]
                                 [--classes N] [--warmup N] [--threads T] [--profile OUT.txt]

Does per step what the trainer does: forward in training mode, softmax
cross-entropy (plus 0.4 x the auxiliary head's loss for inception_v3), backward,
SGD with momentum 0.9 and weight decay 1e-4. --layout nchw is torch's default
memory format; nhwc converts the model and the input to torch.channels_last
(as train.layout = nhwc). cudnn.benchmark on (we choose algorithms with cudnnFind too); tf32 sets
both of torch's TF32 switches, fp32 clears them; bf16 and fp16 run the
forward under torch.autocast (fp32 master weights, as train.precision = bf16 /
fp16), fp16 with a GradScaler (dynamic loss scaling, as ours). Prints one line:

    torch MODEL CxHxW batch B on DEVICE (PRECISION, LAYOUT): X img/s

--profile OUT.txt then runs 5 more steps under torch.profiler and writes its
table of operators (by their time on the device, top 40) to OUT.txt, and
prints whether the device or the host set the pace:

    torch profile: step X ms, device busy Y ms (Z%): bound by the host|device

(busy: the sum of the kernels' own times per step, overlaps not removed, so
an upper bound; under 80% of the step the host is what the GPU waits for).
"""
import argparse
import os
import sys
import time

import torch
import torchvision


CIFAR_RESNETS = ("resnet20", "resnet32", "resnet56", "resnet110")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("shape")
    ap.add_argument("batch", type=int)
    ap.add_argument("steps", type=int)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--layout", choices=["nchw", "nhwc"], default="nchw")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--profile", default="", help="write torch.profiler's operator table here")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
        torch.set_num_interop_threads(1)
    c, h, w = (int(v) for v in a.shape.split("x"))
    dev = torch.device(a.device)
    # bf16/fp16: autocast leaves fp32 ops (batch norm, the loss) to TF32 rules;
    # keep them off, as our fp32 parts are full fp32
    tf32 = a.precision == "tf32"
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    kwargs = {"num_classes": a.classes}
    if a.model == "inception_v3":
        kwargs.update(aux_logits=True, init_weights=False)
    fmt = torch.channels_last if a.layout == "nhwc" else torch.contiguous_format
    if a.model in CIFAR_RESNETS:  # not in torchvision: tools/ddp_peer.py builds them as model/zoo.c does
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from ddp_peer import build_model
        model = build_model(a.model, c, a.classes).to(dev, memory_format=fmt).train()
    else:
        model = getattr(torchvision.models, a.model)(**kwargs).to(dev, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    lossf = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(a.batch, c, h, w, generator=g).to(dev).contiguous(memory_format=fmt)
    y = torch.randint(0, a.classes, (a.batch,), generator=g).to(dev)

    try:
        scaler = torch.amp.GradScaler(dev.type, enabled=a.precision == "fp16")
    except (AttributeError, TypeError):  # torch before 2.3: CUDA only
        scaler = torch.cuda.amp.GradScaler(enabled=a.precision == "fp16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=half or torch.float32, enabled=half is not None):
            out = model(x)
            if isinstance(out, tuple):  # InceptionOutputs(logits, aux_logits)
                loss = lossf(out[0], y) + 0.4 * lossf(out[1], y)
            else:
                loss = lossf(out, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    dt = time.perf_counter() - t0
    print(f"torch {a.model} {a.shape} batch {a.batch} on {a.device} ({a.precision}, {a.layout}): "
          f"{a.batch * a.steps / dt:.1f} img/s", flush=True)
    if a.profile:
        profile(step, sync, dev, a.profile)


def profile(step, sync, dev, path, steps=5):
    """steps more steps under torch.profiler: the operator table to path, and
    the device's busy time against the step's."""
    from torch.profiler import ProfilerActivity
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    sync()
    with torch.profiler.profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall = (time.perf_counter() - t0) / steps
    ka = prof.key_averages()
    # torch 2.4 renamed the CUDA columns to device ones; either may be there
    col = "self_device_time_total"
    if len(ka) and not hasattr(ka[0], col):
        col = "self_cuda_time_total"
    # the kernels' own events only (the operators that launch them carry
    # their time too)
    from torch.autograd import DeviceType
    busy_us = sum(getattr(e, col, 0.0) or 0.0 for e in ka
                  if getattr(e, "device_type", None) == DeviceType.CUDA) / steps
    with open(path, "w") as f:
        f.write(ka.table(sort_by=col if dev.type == "cuda" else "self_cpu_time_total", row_limit=40))
    if dev.type == "cuda":
        share = 100.0 * busy_us / 1e3 / (wall * 1e3) if wall > 0 else 0.0
        pace = "the host" if share < 80.0 else "the device"
        print(f"torch profile: step {wall * 1e3:.2f} ms, device busy {busy_us / 1e3:.2f} ms ({share:.0f}%): "
              f"bound by {pace}; operators in {path}", flush=True)
    else:
        print(f"torch profile: step {wall * 1e3:.2f} ms on the CPU; operators in {path}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
