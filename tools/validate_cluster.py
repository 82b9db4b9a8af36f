#!/usr/bin/env python3
"""tools/validate_cluster.py - checks build/tools/simulate against real
multi-host runs on the namespace cluster of tools/cluster.sh (issue 14,
part 4). Needs root (network namespaces), MPI, `make`.

    python3 tools/validate_cluster.py [--out DIR] [--repeats R] [--quick]
        [--models resnet50,vgg16] [--prefix P --net A.B.C]

For each model (ResNet-50 and VGG-16 on 32x32 synthetic images, batch 32):
  1. one rank profiles the real step (`trainer --profile`, the CPU);
  2. every row of the grid runs `mpirun -np N ./trainer` on N hosts of the
     cluster, links shaped to a rate with tc, with train.emulate_compute =
     that profile: each layer sleeps its profiled time while the gradients
     really cross the links through the ring allreduce (dist.backend=ring),
     bucket by bucket; two cores cannot compute for four ranks, this way
     they need not. The measured step is the median of rank 0's step_ms
     (metrics.jsonl) after warm-up, and the row's measurement the median
     over R runs (default 3), run round-robin: every row once, then again;
  3. the network model is fitted on the 2-host rows only (every bucket size
     and overlap setting measured there): the share eta of
     the shaped rate the links deliver and the per-message latency alpha
     (simulate --bw RATE*eta --latency alpha --algo ring);
  4. every row is predicted with those two numbers and compared: step time
     (percent) and scaling efficiency (points; efficiency = the 1-host
     step over the N-host step, measured and predicted alike).

The grid, per model: 1 host; 2, 3 and 4 hosts at three link rates with the
default buckets (1 MiB first, 25 MiB after) and overlap on; 2, 3 and 4 hosts
at the middle rate with buckets of 4 MiB and 100 MiB, and with overlap off.
A run whose metrics.jsonl is already in OUT/runs/ (an earlier call, stopped
or with a smaller grid) is read, not run again: delete OUT/runs to measure
afresh.
--quick: 1 and 2 hosts at one rate, one repeat (a smoke test, no fit worth
reading). --models: which of resnet50, vgg16 and resnet20 (CIFAR-10 style,
for tests) to run. --prefix and --net: the cluster's names and /24
(tools/cluster.sh; default val and 10.79.0).

Writes OUT/validation.md (the table), OUT/validation.csv (every row with its
runs) and OUT/validation-MODEL.png (tools/plot_scaling.py; measured markers,
predicted lines). Default OUT: build/validation. Exit 0; 1 when a run fails
(its log is kept in OUT/runs/), 2 for usage.
"""
import csv
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIM = os.path.join(ROOT, "build", "tools", "simulate")
TRAINER = os.path.join(ROOT, "trainer")
CLUSTER = [os.path.join(HERE, "cluster.sh"), "--prefix", "val", "--net", "10.79.0"]  # --prefix/--net change it
BATCH = 32
WARMUP, TIMED = 2, 4
MODELS = {
    # model: (config, link rates in Mbit/s: low, middle, high)
    "resnet50": ("configs/resnet50.ini", (500, 1000, 5000)),
    "vgg16": ("configs/vgg16.ini", (1000, 2500, 5000)),
    "resnet20": ("configs/resnet20-cifar10.ini", (20, 50, 100)),
}
DEFAULT_MODELS = ["resnet50", "vgg16"]
COMMON = ["data.kind=synthetic", "data.synthetic_shape=3x32x32", "data.synthetic_classes=10", "data.image_size=32",
          "train.device=cpu", "train.precision=fp32", f"train.batch_size={BATCH}", "data.workers=1",
          "train.threads=1"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, logfile, timeout):
    with open(logfile, "w") as f:
        f.write("+ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=ROOT)
            return r.returncode
        except subprocess.TimeoutExpired:
            return 124


def cluster(*args):
    r = subprocess.run(CLUSTER + list(args), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"validate_cluster.py: cluster.sh {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


def profile(model, out):
    path = os.path.join(out, model + ".json")
    if not os.path.exists(path):
        cfg = MODELS[model][0]
        # the profile computes for real, on both cores; the emulated ranks only sleep
        cmd = [TRAINER, "--profile", cfg, path] + [a for a in COMMON if a != "train.threads=1"] + [
            "train.threads=2", "train.max_steps=5"]
        log("+ " + " ".join(cmd))
        if run(cmd, os.path.join(out, "runs", f"profile-{model}.log"), 900) != 0:
            sys.exit(f"validate_cluster.py: profiling {model} failed (log in {out}/runs)")
    return path


def measure(row, prof, mpirun_args, out, k):
    """One run of a row: (the median step_ms after warm-up, whether an earlier run's was read)."""
    model, hosts, rate, bucket, overlap = row
    name = f"{model}-h{hosts}-{rate}m-b{bucket:g}-o{int(overlap)}-{k}"
    odir = os.path.join(out, "runs", name)
    cmd = ["mpirun", "--allow-run-as-root"] + mpirun_args + ["-np", str(hosts), TRAINER, MODELS[model][0]] + COMMON + [
        f"train.emulate_compute={prof}", f"train.max_steps={WARMUP + TIMED}", "train.log_every=1",
        "train.epochs=1", f"train.out_dir={odir}", "dist.backend=ring", f"dist.bucket_mb={bucket:g}",
        "dist.first_bucket_mb=1", f"dist.overlap={'true' if overlap else 'false'}", "checkpoint.every_epochs=0",
        "dist.stall_abort_s=300"]
    timed = timed_steps(odir)
    if len(timed) >= TIMED:
        return statistics.median(timed), True
    os.makedirs(odir, exist_ok=True)
    rc = run(cmd, odir + ".log", 600)
    if rc != 0:
        sys.exit(f"validate_cluster.py: {name}: exit {rc} (log: {odir}.log)")
    timed = timed_steps(odir)
    if len(timed) < TIMED:
        sys.exit(f"validate_cluster.py: {name}: {len(timed)} timed steps in {odir}/metrics.jsonl, expected {TIMED}")
    return statistics.median(timed), False


def timed_steps(odir):
    """step_ms of the steps after warm-up in odir/metrics.jsonl ([] when none)."""
    path = os.path.join(odir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    steps = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") == "step":
                steps.append((rec["step"], rec["step_ms"]))
    return [ms for s, ms in sorted(steps) if s > WARMUP]


def simulate(prof, hosts, mbit, bucket, overlap, eta, alpha_us):
    cmd = [SIM, prof, "--workers", f"1,{hosts}" if hosts > 1 else "1", "--bw", str(mbit / 1000 * eta),
           "--latency", str(alpha_us), "--algo", "ring", "--first-bucket-mb", "1", "--bucket-mb", f"{bucket:g}",
           "--overlap", "on" if overlap else "off", "--csv", "/dev/stdout"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"validate_cluster.py: {' '.join(cmd)}: {r.stderr.strip()}")
    lines = [ln for ln in r.stdout.splitlines() if ln and ln[0].isdigit() and "," in ln]
    last = lines[-1].split(",")
    return float(last[1]), float(last[3])  # step_ms, efficiency


def fit(rows, meas, profs):
    """eta and alpha minimising the squared relative step error on the 2-host rows."""
    two = [r for r in rows if r[1] == 2]

    def cost(eta, alpha):
        return sum(((simulate(profs[r[0]], 2, r[2], r[3], r[4], eta, alpha)[0] - meas[r]) / meas[r]) ** 2
                   for r in two)

    best = None
    etas = [0.5 + 0.05 * i for i in range(12)]
    alphas = [0, 10, 25, 50, 100, 200, 400, 800, 1600, 3200, 6400]
    for e in etas:
        for a in alphas:
            c = cost(e, a)
            if best is None or c < best[0]:
                best = (c, e, a)
    # refine around the best point
    _, e0, a0 = best
    for e in [e0 + 0.01 * i for i in range(-5, 6)]:
        for a in [max(0.0, a0 * f) for f in (0.5, 0.7, 0.85, 1, 1.2, 1.4, 1.7, 2)] + [a0 + d for d in (-50, 50)]:
            if e <= 0 or a < 0:
                continue
            c = cost(e, a)
            if c < best[0]:
                best = (c, e, a)
    return best[1], best[2]


def grid(quick, models):
    rows = []
    for m in models:
        rates = MODELS[m][1]
        if quick:
            rows += [(m, 1, rates[1], 25, True), (m, 2, rates[1], 25, True)]
            continue
        rows.append((m, 1, rates[1], 25, True))
        for rate in rates:
            for h in (2, 3, 4):
                rows.append((m, h, rate, 25, True))
        for h in (2, 3, 4):
            rows += [(m, h, rates[1], 4, True), (m, h, rates[1], 100, True), (m, h, rates[1], 25, False)]
    return rows


def main(argv):
    out, repeats, quick, models = os.path.join(ROOT, "build", "validation"), 3, False, DEFAULT_MODELS
    it = iter(argv)
    for a in it:
        if a == "--out":
            out = next(it, None)
        elif a == "--repeats":
            v = next(it, "")
            if not v.isdigit() or int(v) < 1:
                print("validate_cluster.py: --repeats needs a whole number >= 1", file=sys.stderr)
                return 2
            repeats = int(v)
        elif a == "--quick":
            quick = True
        elif a == "--models":
            models = (next(it, None) or "").split(",")
            bad = [m for m in models if m not in MODELS]
            if bad:
                print(f"validate_cluster.py: --models: unknown {','.join(bad)} (choose from {','.join(MODELS)})",
                      file=sys.stderr)
                return 2
        elif a in ("--prefix", "--net"):
            v = next(it, None)
            if v is None:
                print(f"validate_cluster.py: {a} needs a value", file=sys.stderr)
                return 2
            CLUSTER[CLUSTER.index(a) + 1] = v
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            print(f"validate_cluster.py: unknown argument {a}", file=sys.stderr)
            return 2
    if out is None:
        print("validate_cluster.py: --out needs a value", file=sys.stderr)
        return 2
    if quick:
        repeats = 1
    if os.geteuid() != 0:
        sys.exit("validate_cluster.py: needs root (tools/cluster.sh makes network namespaces)")
    for p in (SIM, TRAINER):
        if not os.access(p, os.X_OK):
            sys.exit(f"validate_cluster.py: {p} not found: run make first")
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    profs = {m: profile(m, out) for m in models}
    rows = grid(quick, models)

    cluster("up", "4")
    t0 = time.time()
    try:
        mpirun_args = cluster("mpirun-args").split() + ["--mca", "btl_tcp_links", "2", "-x", "OMP_NUM_THREADS"]
        runs = {r: [] for r in rows}
        for k in range(repeats):
            for rate in sorted({r[2] for r in rows}):
                cluster("shape", f"{rate}mbit")
                for r in [r for r in rows if r[2] == rate]:
                    ms, reused = measure(r, profs[r[0]], mpirun_args, out, k)
                    runs[r].append(ms)
                    log(f"[{time.time() - t0:6.0f} s] run {k + 1}/{repeats} {r[0]} hosts {r[1]} {r[2]} Mbit/s "
                        f"bucket {r[3]:g} MiB overlap {'on' if r[4] else 'off'}: {ms:.1f} ms"
                        + (" (read from an earlier call)" if reused else ""))
    finally:
        subprocess.run(CLUSTER + ["down"], capture_output=True)
    meas = {r: statistics.median(v) for r, v in runs.items()}
    eta, alpha = fit(rows, meas, profs) if any(r[1] == 2 for r in rows) else (1.0, 0.0)

    one = {m: meas[r] for r in rows for m in [r[0]] if r[1] == 1}
    table, worst_ms, worst_eff = [], 0.0, 0.0
    for r in rows:
        m, h, rate, bucket, overlap = r
        p_ms, p_eff = simulate(profs[m], h, rate, bucket, overlap, eta, alpha)
        m_eff = one[m] / meas[r]
        d_ms = 100 * (p_ms - meas[r]) / meas[r]
        d_eff = 100 * (p_eff - m_eff)
        fitted = h == 2
        if not fitted and h > 1:
            worst_ms, worst_eff = max(worst_ms, abs(d_ms)), max(worst_eff, abs(d_eff))
        table.append({"model": m, "hosts": h, "rate_mbit": rate, "bucket_mb": bucket,
                      "overlap": "on" if overlap else "off", "measured_ms": round(meas[r], 1),
                      "runs_ms": " ".join(f"{x:.1f}" for x in runs[r]), "predicted_ms": round(p_ms, 1),
                      "diff_pct": round(d_ms, 1), "measured_eff": round(m_eff, 3), "predicted_eff": round(p_eff, 3),
                      "diff_points": round(d_eff, 1), "fitted": "yes" if fitted else "no",
                      "workers": h, "images_per_s": round(h * BATCH / meas[r] * 1e3, 1),
                      "efficiency": round(m_eff, 4)})

    lines = [f"Fitted on the 2-host rows: eta = {eta:.3f} (the links deliver {100 * eta:.1f} % of the shaped rate), "
             f"alpha = {alpha:.0f} us per message per ring hop. {repeats} run(s) per row, median.\n",
             "| model | hosts | link | bucket | overlap | measured ms | predicted ms | diff | measured eff. "
             "| predicted eff. | diff (points) | fitted on it |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for t in table:
        lines.append(f"| {t['model']} | {t['hosts']} | {t['rate_mbit'] / 1000:g} Gbit/s | {t['bucket_mb']:g} MiB | "
                     f"{t['overlap']} | {t['measured_ms']:.1f} | {t['predicted_ms']:.1f} | {t['diff_pct']:+.1f} % | "
                     f"{t['measured_eff']:.3f} | {t['predicted_eff']:.3f} | {t['diff_points']:+.1f} | {t['fitted']} |")
    lines.append(f"\nRows not fitted: step within {worst_ms:.1f} %, efficiency within {worst_eff:.1f} points.")
    with open(os.path.join(out, "validation.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "validation.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0].keys()))
        w.writeheader()
        w.writerows(table)
    print("\n".join(lines))
    plots(table, profs, eta, alpha, out)
    return 0


def plots(table, profs, eta, alpha, out):
    """Per model: efficiency against hosts at each rate (default buckets, overlap on)."""
    for m in profs:
        args = [sys.executable, os.path.join(HERE, "plot_scaling.py"), os.path.join(out, f"validation-{m}.png"),
                "--title", f"{m}, batch {BATCH}, emulated compute: measured (markers) and predicted (lines)"]
        measured = []
        for rate in MODELS[m][1]:
            pts = [t for t in table if t["model"] == m and (t["hosts"] == 1 or t["rate_mbit"] == rate)
                   and t["bucket_mb"] == 25 and t["overlap"] == "on"]
            if len(pts) < 2:
                continue
            hosts = sorted(t["hosts"] for t in pts)
            pred = os.path.join(out, f"predicted-{m}-{rate}.csv")
            subprocess.run([SIM, profs[m], "--workers", ",".join(map(str, hosts)), "--bw", str(rate / 1000 * eta),
                            "--latency", str(alpha), "--algo", "ring", "--first-bucket-mb", "1", "--bucket-mb", "25",
                            "--csv", pred], capture_output=True, check=True)
            meas = os.path.join(out, f"measured-{m}-{rate}.csv")
            with open(meas, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=["workers", "images_per_s", "efficiency"])
                w.writeheader()
                for t in sorted(pts, key=lambda t: t["hosts"]):
                    w.writerow({k: t[k] for k in ("workers", "images_per_s", "efficiency")})
            args.append(f"{pred}={rate / 1000:g} Gbit/s predicted")
            measured.append(f"{meas}={rate / 1000:g} Gbit/s measured")
        if measured:
            r = subprocess.run(args + ["--measured"] + measured, capture_output=True, text=True)
            log(r.stdout.strip() or r.stderr.strip())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
