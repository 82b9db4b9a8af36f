#!/usr/bin/env python3
"""tools/reproduce_horovod.py - reproduces Horovod's published scaling of
Inception V3, ResNet-101 and VGG-16 (2017-2018, Pascal GPUs) with
build/tools/simulate, and asks the what-ifs (issue 14, part 5).

    python3 tools/reproduce_horovod.py [--profiles DIR] [--out DIR]

DIR/{inception3,resnet101,vgg16}.json are cnntrain step profiles; a missing
one is made first with `./trainer --profile configs/M.ini ... train.batch_size=8
train.max_steps=3` on the CPU (a few minutes for the three). Only the
profile's *shape* is used: which layer writes which gradient bytes, and each
layer's share of forward and backward time. Its speed is replaced by the
published single-GPU images/s (simulate --images-per-s), its batch by 64
(--batch) and its backward/forward ratio by 2 (--backward-ratio).

Writes OUT/horovod.md (the tables, in docs/scaling.md's format), OUT/horovod.csv
and OUT/horovod.png (published against predicted). Default OUT: build/horovod.

The published numbers and where they are (github.com/horovod/horovod):
  README.md at 849ef0a6 (2017-10-02): 16 GPUs (4 servers x 4 Pascal, 25 GbE
    RoCE-capable), batch 64, single-GPU baseline and "TCP/RDMA Horovod
    (allreduce on GPU with NCCL)" rows; 64 GPUs (16 x 4, 40 GbE TCP).
  README.md at 6bb6a2db (2017-10-17): 128 GPUs (32 x 4, 25 GbE RoCE):
    90 % Inception V3 and ResNet-101, 79 % VGG-16.
  README.md at 8318a898 (2018-05-10): 512 GPUs (128 x 4, 25 GbE RoCE):
    90 %, 90 %, 68 %.
Horovod's own defaults of that time (horovod/common/operations.cc): a 5 ms
cycle and a 64 MiB fusion buffer; NCCL's flat ring over every GPU.

The model's assumptions (none fitted): a per-message latency of 5 us per ring
hop; RDMA delivers the line rate; backward = 2 x forward. Two global
parameters are fitted, on the 16-GPU table only:
  J      the straggler term (simulate --jitter): fitted on the 3 RDMA rows;
  eta    the share of the line rate NCCL's TCP sockets deliver: fitted on
         the 3 TCP rows with J fixed.
Everything else (64, 128 and 512 GPUs, and the what-ifs) is predicted.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIM = os.path.join(ROOT, "build", "tools", "simulate")
MODELS = [("inception3", "Inception V3"), ("resnet101", "ResNet-101"), ("vgg16", "VGG-16")]

# single-GPU images/s at batch 64, per table
BASE_16 = {"inception3": 134.4, "resnet101": 119.4, "vgg16": 130.9}
BASE_64 = {"inception3": 148.8, "resnet101": 136.0, "vgg16": 149.6}
# (setup, workers, link Gbit/s, transport, baseline, published images/s per
# model, published efficiency per model): the 16- and 64-GPU tables give
# images/s (efficiency = images/s / workers / baseline), the 128- and 512-GPU
# charts efficiency only
def _table(setup, n, gbit, transport, base, ips):
    return (setup, n, gbit, transport, base, ips, {m: v / n / base[m] for m, v in ips.items()})


def _chart(setup, n, gbit, transport, base, eff):
    return (setup, n, gbit, transport, base, {}, eff)


PUBLISHED = [
    _table("16 GPUs, 25 GbE RDMA", 16, 25, "rdma", BASE_16,
           {"inception3": 2022.6, "resnet101": 1746.2, "vgg16": 1787.4}),
    _table("16 GPUs, 25 GbE TCP", 16, 25, "tcp", BASE_16,
           {"inception3": 1990.7, "resnet101": 1685.1, "vgg16": 1308.7}),
    _table("64 GPUs, 40 GbE TCP", 64, 40, "tcp", BASE_64,
           {"inception3": 7932.1, "resnet101": 7741.6, "vgg16": 6084.2}),
    _chart("128 GPUs, 25 GbE RoCE", 128, 25, "rdma", BASE_16, {"inception3": 0.90, "resnet101": 0.90, "vgg16": 0.79}),
    _chart("512 GPUs, 25 GbE RoCE", 512, 25, "rdma", BASE_16, {"inception3": 0.90, "resnet101": 0.90, "vgg16": 0.68}),
]
COMMON = ["--batch", "64", "--backward-ratio", "2", "--latency", "5", "--algo", "ring"]
HOROVOD = ["--horovod", "5,64"]
# dist.compress = powersgd at rank 4 in cnntrain's buckets; its arithmetic at the development VM's rate on
# one core (simulate's default, 1.2 + 0.5 r ns a compressed value) or, assumed, 50 times faster on the GPU;
# with H100-class compute, in 100 MiB buckets over the hierarchical allreduce (two sums a bucket, each
# paying the flat ring's 2 x 511 hops, make 25 MiB buckets latency-bound there)
POWERSGD_HOST = ["--first-bucket-mb", "1", "--bucket-mb", "25", "--powersgd", "4"]
POWERSGD_GPU = ["--first-bucket-mb", "1", "--bucket-mb", "25", "--powersgd", "4,0.064"]
HIER_100 = ["--first-bucket-mb", "1", "--bucket-mb", "100", "--algo", "hier", "--gpus-per-node", "4",
            "--intra-bw", "80"]


def simulate(profile, workers, extra):
    """One simulate run; returns {workers: row} from its CSV."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as t:
        cmd = [SIM, profile, "--workers", ",".join(str(w) for w in workers), "--csv", t.name] + extra
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"reproduce_horovod.py: {' '.join(cmd)}: {r.stderr.strip()}")
        with open(t.name, newline="") as f:
            return {int(row["workers"]): row for row in csv.DictReader(f)}


def predict(profile, model, workers, gbit, base, jitter, extra=()):
    args = COMMON + ["--images-per-s", str(base[model]), "--bw", str(gbit), "--jitter", str(jitter)]
    return simulate(profile, [workers], args + list(extra or HOROVOD))[workers]


def fit_1d(lo, hi, step, cost):
    best, x = None, lo
    while x <= hi + 1e-12:
        c = cost(x)
        if best is None or c < best[0]:
            best = (c, x)
        x += step
    return best[1]


def ensure_profiles(pdir):
    os.makedirs(pdir, exist_ok=True)
    for m, _ in MODELS:
        path = os.path.join(pdir, m + ".json")
        if os.path.exists(path):
            with open(path) as f:
                if "tensors" in json.load(f):  # older profiles lack what --powersgd needs
                    continue
        cmd = [os.path.join(ROOT, "trainer"), "--profile", os.path.join(ROOT, "configs", m + ".ini"), path,
               "data.kind=synthetic", "train.device=cpu", "train.batch_size=8", "train.max_steps=3",
               "data.workers=1"]
        print("+ " + " ".join(cmd), file=sys.stderr)
        if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
            sys.exit(f"reproduce_horovod.py: profiling {m} failed")


def main(argv):
    pdir, out = os.path.join(ROOT, "build", "horovod"), os.path.join(ROOT, "build", "horovod")
    it = iter(argv)
    for a in it:
        if a in ("--profiles", "--out"):
            v = next(it, None)
            if v is None:
                print(f"reproduce_horovod.py: {a} needs a value", file=sys.stderr)
                return 2
            if a == "--profiles":
                pdir = v
            else:
                out = v
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            print(f"reproduce_horovod.py: unknown argument {a}", file=sys.stderr)
            return 2
    if not os.access(SIM, os.X_OK):
        sys.exit("reproduce_horovod.py: build/tools/simulate not found: run make first")
    ensure_profiles(pdir)
    os.makedirs(out, exist_ok=True)
    prof = {m: os.path.join(pdir, m + ".json") for m, _ in MODELS}

    # the two fitted parameters, on the 16-GPU table
    rdma16, tcp16 = PUBLISHED[0], PUBLISHED[1]

    def cost_j(j):
        return sum((float(predict(prof[m], m, 16, 25, BASE_16, j)["efficiency"]) - rdma16[6][m]) ** 2
                   for m, _ in MODELS)

    J = fit_1d(0, 8, 0.05, cost_j)

    def cost_eta(eta):
        return sum((float(predict(prof[m], m, 16, 25 * eta, BASE_16, J)["efficiency"]) - tcp16[6][m]) ** 2
                   for m, _ in MODELS)

    eta = fit_1d(0.10, 1.0, 0.005, cost_eta)

    rows, lines, worst = [], [], 0.0
    lines.append(f"Fitted on the 16-GPU table: J = {J:.2f} % (straggler term), "
                 f"eta = {eta:.3f} (TCP delivers {25 * eta:.1f} of 25 Gbit/s).\n")
    lines.append("| setup | model | published images/s | predicted images/s | published eff. | predicted eff. "
                 "| difference (points) | fitted on it |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")
    for setup, n, gbit, transport, base, ips, eff in PUBLISHED:
        g = gbit * (eta if transport == "tcp" else 1.0)
        for m, name in MODELS:
            r = predict(prof[m], m, n, g, base, J)
            pe, pi = float(r["efficiency"]), float(r["images_per_s"])
            diff = 100 * (pe - eff[m])
            fitted = setup.startswith("16 GPUs")
            if not fitted:
                worst = max(worst, abs(diff))
            pub_ips = ips.get(m)
            rows.append({"setup": setup, "model": name, "workers": n, "gbit": round(g, 3),
                         "published_eff": round(eff[m], 4), "predicted_eff": round(pe, 4),
                         "published_ips": pub_ips or "", "predicted_ips": round(pi, 1),
                         "diff_points": round(diff, 1), "fitted": "J" if transport == "rdma" and fitted
                         else ("eta" if fitted else ""), "verdict": r["verdict"]})
            lines.append(f"| {setup} | {name} | {f'{pub_ips:,.1f}' if pub_ips else '-'} | {pi:,.1f} | "
                         f"{100 * eff[m]:.1f} % | {100 * pe:.1f} % | {diff:+.1f} | "
                         f"{rows[-1]['fitted'] or 'no'} |")
    lines.append(f"\nLargest difference on the rows not fitted: {worst:.1f} points.\n")

    # what-ifs at 512 GPUs, 25 GbE RoCE (and 128 for contrast)
    whatifs = [
        ("as published (Horovod: 5 ms cycle, 64 MiB fusion)", {}, HOROVOD),
        ("cnntrain's buckets (1 MiB first, 25 MiB after) instead of Horovod's cycle", {},
         ["--first-bucket-mb", "1", "--bucket-mb", "25"]),
        ("cnntrain's buckets of 4 MiB", {}, ["--first-bucket-mb", "1", "--bucket-mb", "4"]),
        ("cnntrain's buckets of 100 MiB", {}, ["--first-bucket-mb", "1", "--bucket-mb", "100"]),
        ("overlap off (allreduce after backward)", {}, HOROVOD + ["--overlap", "off"]),
        ("fp16 compression", {}, HOROVOD + ["--fp16"]),
        ("hierarchical allreduce (4 GPUs per node, 80 Gbit/s PCIe inside)", {},
         HOROVOD + ["--algo", "hier", "--gpus-per-node", "4", "--intra-bw", "80"]),
        ("100 GbE RoCE", {"gbit": 100}, HOROVOD),
        ("H100-class compute (8 x a P100's images/s, assumed)", {"speed": 8}, HOROVOD),
        ("H100-class compute on 100 GbE, hierarchical, fp16", {"speed": 8, "gbit": 100},
         HOROVOD + ["--fp16", "--algo", "hier", "--gpus-per-node", "4", "--intra-bw", "80"]),
        ("PowerSGD rank 4 (cnntrain's buckets), its arithmetic on one host core", {}, POWERSGD_HOST),
        ("PowerSGD rank 4, its arithmetic 50 x faster (on the GPU, assumed)", {}, POWERSGD_GPU),
        ("H100-class compute, hierarchical, 100 MiB buckets, PowerSGD rank 4 on one host core", {"speed": 8},
         HIER_100 + ["--powersgd", "4"]),
        ("H100-class compute, hierarchical, 100 MiB buckets, PowerSGD rank 4 50 x faster (on the GPU, assumed)",
         {"speed": 8}, HIER_100 + ["--powersgd", "4,0.064"]),
        ("H100-class compute, hierarchical, PowerSGD rank 4 as NCCL's ranks run it (after backward, whole "
         "gradient, 50 x faster, assumed)", {"speed": 8}, HIER_100 + ["--powersgd", "4,0.064", "--powersgd-at", "end"]),
    ]
    lines.append("What-ifs, predicted (same model, J and eta as fitted), 512 GPUs = 128 servers x 4:\n")
    lines.append("| what if | Inception V3 | ResNet-101 | VGG-16 |")
    lines.append("|---|---:|---:|---:|")
    for label, o, extra in whatifs:
        cells = []
        for m, _ in MODELS:
            base = {k: v * o.get("speed", 1) for k, v in BASE_16.items()}
            r = predict(prof[m], m, 512, o.get("gbit", 25), base, J, extra)
            cells.append(f"{100 * float(r['efficiency']):.1f} %")
            rows.append({"setup": "what-if 512: " + label, "model": m, "workers": 512, "gbit": o.get("gbit", 25),
                         "published_eff": "", "predicted_eff": round(float(r["efficiency"]), 4),
                         "published_ips": "", "predicted_ips": round(float(r["images_per_s"]), 1),
                         "diff_points": "", "fitted": "", "verdict": r["verdict"]})
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    md = os.path.join(out, "horovod.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "horovod.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print("\n".join(lines))
    chart(rows, os.path.join(out, "horovod.png"))
    return 0


def chart(rows, path):
    try:
        import matplotlib
    except ImportError:
        print(f"reproduce_horovod.py: no matplotlib, {path} not drawn (make deps installs python3-matplotlib; "
              "or run this with /usr/bin/python3)", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    setups = [p[0] for p in PUBLISHED]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
    for ax, (m, name) in zip(axes, MODELS):
        got = {r["setup"]: r for r in rows if r["model"] == name}
        x = range(len(setups))
        ax.bar([i - 0.2 for i in x], [100 * got[s]["published_eff"] for s in setups], 0.4, label="published")
        ax.bar([i + 0.2 for i in x], [100 * got[s]["predicted_eff"] for s in setups], 0.4, label="predicted")
        ax.set_xticks(list(x))
        ax.set_xticklabels([s.replace(", ", "\n") for s in setups], fontsize=7)
        ax.set_title(name)
        ax.set_ylim(0, 105)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("scaling efficiency, %")
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle("Horovod's published scaling (Pascal GPUs) and cnntrain's simulator (16-GPU table fitted)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"reproduce_horovod.py: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
