#!/usr/bin/env python3
"""tools/ddp_peer.py - one rank of PyTorch DistributedDataParallel (gloo, on
the CPU) training a model on synthetic data: the peer cnntrain is compared
with on the same hosts (tools/peer_ddp.sh, docs/scaling.md, "The peer:
PyTorch DDP").

    mpirun -np N [mpirun options] python tools/ddp_peer.py MODEL CxHxW BATCH \\
        [--classes 10] [--threads T] [--warmup W] [--steps S] \\
        [--bucket-mb 25] [--first-bucket-mb 1] [--master-addr A] [--master-port P] \\
        [--ifname eth0] [--expect-params N] [--trace FILE] [--broadcast-buffers] \\
        [--no-bucket-view]

Rank and world size come from Open MPI's OMPI_COMM_WORLD_RANK and
OMPI_COMM_WORLD_SIZE (else RANK and WORLD_SIZE, else a world of one); the
rendezvous is rank 0's TCP store at --master-addr:--master-port (else
MASTER_ADDR / MASTER_PORT, else 127.0.0.1:29500). --ifname sets
GLOO_SOCKET_IFNAME, the interface gloo's connections use (eth0 on the hosts
of tools/cluster.sh).

MODEL: a torchvision classification model (resnet18..152, vgg11..19[_bn],
...; num_classes = --classes, the first convolution made for C input
channels when C is not 3), or resnet20/32/56/110, the CIFAR ResNets of He et
al. 2016 as cnntrain's zoo builds them (model/zoo.c: 3x3 stem of 16 filters,
three stages of 16/32/64, shortcut option A). --expect-params N (cnntrain's
count, from `trainer --summary`) makes every rank fail, before any
communication, unless the model has exactly N parameters.

Each step does what cnntrain's does: forward in training mode on one
fixed batch of random images and labels, mean softmax cross-entropy,
backward (DDP allreduces the gradients in buckets during it and divides by
the world size), SGD with momentum 0.9 and weight decay 1e-4, fp32.
torch.set_num_threads(T) (and one inter-op thread). Buckets: the first
--first-bucket-mb MiB, then --bucket-mb MiB each, as cnntrain's
dist.first_bucket_mb / dist.bucket_mb; DDP cuts them at parameter
boundaries (a bucket closes once it holds at least its limit) in the order
the gradients became ready in the first step, which it rebuilds them to
after that step. By default the gradients are views into the buckets
(gradient_as_bucket_view, no copy, like cnntrain's flat gradient buffer) and
the batch-norm buffers are not broadcast before each forward (cnntrain
broadcasts them before evaluations only); --no-bucket-view and
--broadcast-buffers restore DDP's defaults.

W warm-up steps, then S timed steps (each timed on rank 0 from zero_grad to
the end of the optimizer step). Rank 0 prints one JSON line:

    {"tool":"ddp","model":...,"params":...,"world":N,"batch":B,"shape":"CxHxW",
     "bucket_mb":...,"first_bucket_mb":...,"buckets_mib":[...],"threads":T,
     "warmup":W,"steps":S,"step_ms":[...],"median_step_ms":M,"images_per_sec":I,
     "exposed_ms":[...],"median_exposed_ms":E,"torch":"2.x"}

with I = N x B / M (all ranks' images per second), buckets_mib DDP's
buckets after its rebuild, in the order they are reduced, and E the
allreduce time backward did not hide on rank 0: from the last parameter's
gradient accumulated (a post-accumulate-grad hook on every parameter) to
the return of loss.backward(), which DDP holds until every bucket's sum is
in (cnntrain's comm_exposed_ms: from the end of backward to the last
bucket's sum). --trace FILE then
runs 3 more steps under torch.profiler and writes rank 0's Chrome trace.

Needs PyTorch and torchvision, which are not project dependencies:
    python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch torchvision
Exit status: 0; 1 when the parameter counts differ or training fails; 2 for
usage errors or without torch.
"""
import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    sys.stderr.write(f"ddp_peer.py: needs PyTorch and torchvision ({e}); install them outside the repository:\n"
                     "    python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch torchvision\n")
    sys.exit(2)

MIB = 1 << 20


class CifarBlock(nn.Module):
    """BasicBlock with shortcut option A (subsample, zero-pad channels symmetrically)."""

    def __init__(self, in_c, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_c, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride, self.pad = stride, planes - in_c

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x
        if self.stride != 1 or self.pad:
            s = x[:, :, :: self.stride, :: self.stride]
            lo = self.pad // 2
            s = F.pad(s, (0, 0, 0, 0, lo, self.pad - lo))
        return F.relu(y + s)


class CifarResNet(nn.Module):
    def __init__(self, depth, in_c, classes):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_c, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        c, layers = 16, []
        for stage in range(3):
            planes = 16 << stage
            blocks = []
            for blk in range(n):
                blocks.append(CifarBlock(c, planes, 2 if stage > 0 and blk == 0 else 1))
                c = planes
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = layers
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


CIFAR = {"resnet20": 20, "resnet32": 32, "resnet56": 56, "resnet110": 110}


def build_model(name, in_c, classes):
    if name in CIFAR:
        return CifarResNet(CIFAR[name], in_c, classes)
    fn = getattr(torchvision.models, name, None)
    if fn is None or not callable(fn):
        sys.stderr.write(f"ddp_peer.py: unknown model '{name}' (torchvision's, or {', '.join(CIFAR)})\n")
        sys.exit(2)
    kwargs = {"num_classes": classes}
    if name == "inception_v3":
        kwargs.update(aux_logits=False, init_weights=False)
    model = fn(**kwargs)
    if in_c != 3:  # cnntrain builds the first convolution for the data's channels
        for mod_name, mod in model.named_modules():
            if isinstance(mod, nn.Conv2d):
                new = nn.Conv2d(in_c, mod.out_channels, mod.kernel_size, mod.stride, mod.padding,
                                bias=mod.bias is not None)
                parent = model
                *path, last = mod_name.split(".")
                for p in path:
                    parent = getattr(parent, p)
                setattr(parent, last, new)
                break
    return model


def env_int(*names, default):
    for n in names:
        if os.environ.get(n):
            return int(os.environ[n])
    return default


def ddp_buckets_mib(model):
    """DDP's buckets after its rebuild, in MiB, in the order they are reduced (None if torch hides them)."""
    try:  # private APIs: their absence only loses a report field
        return [round(b.buffer().numel() * b.buffer().element_size() / MIB, 3)
                for b in model.reducer._get_zeros_like_grad_buckets()]
    except Exception:
        pass
    try:  # filled in only at the forward after the rebuild
        sizes = model._get_ddp_logging_data().get("rebuilt_bucket_sizes") or ""
        vals = [int(v) / MIB for v in str(sizes).split(",") if v.strip()]
        if vals:
            return [round(v, 3) for v in vals]
    except Exception:
        pass
    return None


def main():
    ap = argparse.ArgumentParser(description="one rank of PyTorch DDP (gloo, CPU) on synthetic data")
    ap.add_argument("model")
    ap.add_argument("shape", help="CxHxW")
    ap.add_argument("batch", type=int, help="images per step on each rank")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--first-bucket-mb", type=float, default=1.0)
    ap.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR", "127.0.0.1"))
    ap.add_argument("--master-port", type=int, default=int(os.environ.get("MASTER_PORT", "29500")))
    ap.add_argument("--ifname", help="GLOO_SOCKET_IFNAME (the interface gloo uses)")
    ap.add_argument("--expect-params", type=int, help="fail unless the model has exactly this many parameters")
    ap.add_argument("--trace", help="rank 0 writes a Chrome trace of 3 extra steps here")
    ap.add_argument("--broadcast-buffers", action="store_true", help="DDP's default: broadcast BN buffers each step")
    ap.add_argument("--no-bucket-view", action="store_true", help="DDP's default: copy gradients into the buckets")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--powersgd-rank", type=int, default=0,
                    help="register DDP's PowerSGD comm hook with this matrix_approximation_rank (0: none)")
    ap.add_argument("--powersgd-start", type=int, default=2,
                    help="its start_powerSGD_iter (at least 2 with error feedback)")
    a = ap.parse_args()
    try:
        c, h, w = (int(v) for v in a.shape.lower().split("x"))
    except ValueError:
        ap.error(f"shape '{a.shape}': CxHxW, like 3x32x32")
    if a.batch < 1 or a.threads < 1 or a.warmup < 1 or a.steps < 1:
        ap.error("batch, threads, warmup and steps must be at least 1 (one warm-up step lets DDP rebuild its buckets)")

    rank = env_int("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK", default=0)
    world = env_int("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", default=1)
    if a.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(42)

    model = build_model(a.model, c, a.classes)
    params = sum(p.numel() for p in model.parameters())
    if a.expect_params is not None and params != a.expect_params:
        sys.stderr.write(f"ddp_peer.py: rank {rank}: {a.model} at {a.shape}, {a.classes} classes has {params} "
                         f"parameters in torch, {a.expect_params} in cnntrain: not the same model\n")
        return 1
    if rank == 0 and a.expect_params is not None:
        sys.stderr.write(f"ddp_peer.py: {a.model}: {params} parameters in torch, {a.expect_params} in cnntrain\n")

    # DDP takes a first bucket smaller than the others only when bucket_cap_mb
    # is left at its default (None): set both defaults to ours instead.
    import torch.nn.parallel.distributed as ddp_mod
    if hasattr(ddp_mod, "_DEFAULT_BUCKET_CAP_MB"):
        ddp_mod._DEFAULT_BUCKET_CAP_MB = a.bucket_mb
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(a.first_bucket_mb * MIB)
        cap = None
    else:  # an older torch: no first bucket of our size
        cap = a.bucket_mb
        if rank == 0:
            sys.stderr.write("ddp_peer.py: this torch has no settable first bucket; all buckets --bucket-mb\n")

    from datetime import timedelta
    dist.init_process_group("gloo", init_method=f"tcp://{a.master_addr}:{a.master_port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    model.train()
    # Buffers: synced from rank 0 once at construction either way; before
    # every forward only with --broadcast-buffers (newer torch names that
    # switch forward_sync_buffers and deprecates broadcast_buffers=False).
    import inspect
    sync = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters
            else "broadcast_buffers")
    ddp = DDP(model, bucket_cap_mb=cap, gradient_as_bucket_view=not a.no_bucket_view,
              **{sync: a.broadcast_buffers})
    if a.powersgd_rank > 0:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                   start_powerSGD_iter=a.powersgd_start)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        if rank == 0:
            sys.stderr.write(f"ddp_peer.py: PowerSGD hook, rank {a.powersgd_rank}, from iteration "
                             f"{a.powersgd_start}\n")
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(a.batch, c, h, w, generator=g)
    y = torch.randint(0, a.classes, (a.batch,), generator=g)
    lossf = nn.CrossEntropyLoss()

    # When backward's computation ends: each parameter's gradient, once
    # accumulated, stamps the time; the last stamp of a step is its end.
    # DDP's loss.backward() returns only after its final callback has waited
    # for every bucket's allreduce, so what lies between is communication
    # that backward did not hide: cnntrain's comm_exposed_ms, measured from
    # the end of backward to the last bucket's sum.
    last_grad = [0.0]

    def stamp(_p):
        last_grad[0] = time.perf_counter()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(stamp)
    exposed = []

    def step():
        # bucket views stay and are zeroed in place; else torch's default
        opt.zero_grad(set_to_none=a.no_bucket_view)
        loss = lossf(ddp(x), y)
        loss.backward()
        exposed.append((time.perf_counter() - last_grad[0]) * 1e3)
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    dist.barrier()
    times = []
    exposed.clear()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - t0) * 1e3)
    if not torch.isfinite(loss):
        sys.stderr.write(f"ddp_peer.py: rank {rank}: loss is {loss.item()}\n")
        return 1
    exposed_ms = exposed[:a.steps]
    if a.trace:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                step()
        if rank == 0:
            prof.export_chrome_trace(a.trace)
    buckets = ddp_buckets_mib(ddp)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        med = statistics.median(times)
        print(json.dumps({
            "tool": "ddp", "model": a.model, "params": params, "world": world, "batch": a.batch,
            "shape": a.shape, "bucket_mb": a.bucket_mb, "first_bucket_mb": a.first_bucket_mb,
            "buckets_mib": buckets, "threads": a.threads, "warmup": a.warmup, "steps": a.steps,
            "step_ms": [round(t, 3) for t in times], "median_step_ms": round(med, 3),
            "images_per_sec": round(world * a.batch * 1e3 / med, 2),
            "exposed_ms": [round(t, 3) for t in exposed_ms],
            "median_exposed_ms": round(statistics.median(exposed_ms), 3), "torch": torch.__version__,
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
