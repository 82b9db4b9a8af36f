#!/usr/bin/env python3
"""tools/plot_metrics.py - training curves from runs' metrics.jsonl, as PNG.

    python3 tools/plot_metrics.py RUN[=LABEL] [RUN[=LABEL] ...] [-o OUT.png]
        [--x step,time] [--panels loss,top1,lr,ips] [--title TITLE]
        [--staleness OUT.png]

RUN is a run directory (train.out_dir, holding metrics.jsonl) or a
metrics.jsonl file; LABEL names it in the legend (default: the directory's
name). Every run is drawn in every panel, in its own colour, so "1 rank
against 4", "overlap on against off" or "allreduce against parameter
servers" is one command.

The figure has one row per panel and one column per x axis:
  panels  loss  training loss (the step records' window means)
          top1  test top-1 accuracy, % (one point per evaluated epoch)
          top5  test top-5 accuracy, %
          eval  test loss
          lr    learning rate
          ips   images/s (all workers)
  x       step    optimizer steps
          time    minutes of training (the records' "time": set-up
                  excluded, carried across resumes)
          epoch   epochs of data seen (images / images per epoch)
          images  training images seen
--staleness OUT.png: for runs with asynchronous parameter servers, the
histogram of the applied gradients' staleness over the whole run (the
"staleness" records summed) and its mean per epoch.

Default: -o curves.png, --x step,time, --panels loss,top1,lr,ips.
Needs matplotlib (Debian's python3-matplotlib, `make deps`).
Exit status: 0; 1 when a run cannot be read or has nothing to draw for an
axis asked for (the message names it); 2 for usage.
"""
import json
import os
import sys

from plotlib import need_matplotlib

TOOL = "plot_metrics.py"
PANELS = {
    "loss": ("training loss", "step", "loss"),
    "top1": ("test top-1 (%)", "eval", "top1"),
    "top5": ("test top-5 (%)", "eval", "top5"),
    "eval": ("test loss", "eval", "eval_loss"),
    "lr": ("learning rate", "step", "lr"),
    "ips": ("images/s", "step", "img_per_sec"),
}
XAXES = {"step": "step", "time": "time (min)", "epoch": "epoch", "images": "images seen"}


def fail(msg):
    print(f"{TOOL}: {msg}", file=sys.stderr)
    sys.exit(1)


def read_run(arg):
    """(label, run record or {}, records by kind) of RUN[=LABEL]."""
    path, _, label = arg.partition("=")
    f = os.path.join(path, "metrics.jsonl") if os.path.isdir(path) else path
    recs = {}
    run = {}
    try:
        with open(f) as fh:
            for n, line in enumerate(fh, 1):
                if not line.endswith("\n"):
                    break  # a record cut short by a kill
                try:
                    r = json.loads(line)
                except ValueError:
                    fail(f"'{f}' line {n}: not a JSON record")
                if r.get("kind") == "run" and not run:
                    run = r
                recs.setdefault(r.get("kind"), []).append(r)
    except OSError as e:
        fail(f"cannot read '{f}': {e.strerror}")
    if not recs.get("step") and not recs.get("eval"):
        fail(f"'{f}' holds no step or eval records")
    if not label:
        d = path if os.path.isdir(path) else os.path.dirname(path)
        label = os.path.basename(os.path.normpath(d)) or d
    return label, run, recs


def epoch_images(run):
    """Images per epoch, from the run record (None without one)."""
    if run.get("steps_per_epoch") and run.get("global_batch"):
        return run["steps_per_epoch"] * run["global_batch"]
    return None


def x_of(r, x, run):
    """A record's value on axis x, or None when it has none."""
    if x == "step":
        return r.get("step")
    if x == "time":
        t = r.get("time")
        return None if t is None else t / 60
    if x == "images" or (x == "epoch" and r.get("kind") == "step"):
        im = r.get("images")
        if im is None:
            return None
        if x == "images":
            return im
        per = epoch_images(run)
        return None if not per else im / per
    if x == "epoch":  # eval records: the epoch just finished
        return r.get("epoch")
    return None


def series(run, recs, panel, x):
    _, kind, key = PANELS[panel]
    pts = []
    for r in recs.get(kind, []):
        v = r.get(key)
        xv = x_of(r, x, run)
        if v is None or xv is None:
            continue
        if panel in ("top1", "top5"):
            v *= 100
        pts.append((xv, v))
    return pts


def plot_curves(plt, runs, out, xs, panels, title):
    fig, axes = plt.subplots(len(panels), len(xs), figsize=(5.2 * len(xs), 2.9 * len(panels)), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, panel in enumerate(panels):
        for col, x in enumerate(xs):
            ax = axes[row][col]
            drawn = 0
            for i, (label, run, recs) in enumerate(runs):
                pts = series(run, recs, panel, x)
                if not pts:
                    continue
                drawn += 1
                xv, yv = zip(*pts)
                style = "o-" if PANELS[panel][1] == "eval" else "-"
                ax.plot(xv, yv, style, color=colours[i % len(colours)], label=label, markersize=3, linewidth=1.2)
            if not drawn:
                fail(f"nothing to draw for {panel} against {x}: no run has such records"
                     + (" (runs written before 'time' and 'images' were recorded have none)"
                        if x in ("time", "epoch", "images") else ""))
            if panel == "lr" and x != "time":
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
            if panel in ("top1", "top5"):
                lo = min(v for _, _, recs in runs for v in [100 * r.get(PANELS[panel][2], 1) for r in recs.get("eval", [])])
                ax.set_ylim(max(0, min(lo, 100) - 2), 100)
            ax.set_xlabel(XAXES[x])
            ax.set_ylabel(PANELS[panel][0])
            ax.grid(True, alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_staleness(plt, runs, out, title):
    stale = [(label, recs["staleness"]) for label, _, recs in runs if recs.get("staleness")]
    if not stale:
        fail("--staleness: no run has staleness records (asynchronous parameter servers write them)")
    fig, (h_ax, m_ax) = plt.subplots(1, 2, figsize=(10.4, 3.4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(stale)
    top, xmax = 1, 1
    for i, (label, rs) in enumerate(stale):
        n = max(len(r["hist"]) for r in rs)
        hist = [sum(r["hist"][k] for r in rs if k < len(r["hist"])) for k in range(n)]
        total = sum(hist) or 1
        last = max((k for k in range(n) if hist[k]), default=0)
        ks = list(range(last + 1))
        xmax = max(xmax, last)
        top = max(top, max(r["max"] for r in rs))
        ax_x = [k + (i - (len(stale) - 1) / 2) * width for k in ks]
        h_ax.bar(ax_x, [100 * hist[k] / total for k in ks], width=width, color=colours[i % len(colours)],
                 label=f"{label} ({int(total)} gradients)")
        m_ax.plot([r["epoch"] for r in rs], [r["mean"] for r in rs], "o-", color=colours[i % len(colours)],
                  label=f"{label}: mean", markersize=3)
        m_ax.plot([r["epoch"] for r in rs], [r["max"] for r in rs], "s--", color=colours[i % len(colours)],
                  label=f"{label}: max", markersize=3, alpha=0.6)
    h_ax.set_xticks(range(0, xmax + 1, max(1, (xmax + 1) // 16)))
    h_ax.set_xlim(-0.6, xmax + 0.6)
    m_ax.set_ylim(0, top * 1.15 + 0.1)
    h_ax.set_xlabel(f"staleness (updates; the last bin counts {n - 1} or more)")
    h_ax.set_ylabel("% of applied gradients")
    h_ax.legend(fontsize=8)
    h_ax.grid(True, axis="y", alpha=0.3)
    m_ax.set_xlabel("epoch")
    m_ax.set_ylabel("staleness (updates)")
    m_ax.legend(fontsize=8)
    m_ax.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def usage(to=sys.stderr):
    print(__doc__.strip().split("\n\n")[1], file=to)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        usage(sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    out, xs, panels, title, stale_out, runs = "curves.png", ["step", "time"], ["loss", "top1", "lr", "ips"], None, \
        None, []
    it = iter(argv)
    for a in it:
        try:
            if a == "-o":
                out = next(it)
            elif a == "--x":
                xs = next(it).split(",")
            elif a == "--panels":
                panels = next(it).split(",")
            elif a == "--title":
                title = next(it)
            elif a == "--staleness":
                stale_out = next(it)
            elif a.startswith("-"):
                print(f"{TOOL}: unknown option {a}", file=sys.stderr)
                usage()
                return 2
            else:
                runs.append(a)
        except StopIteration:
            print(f"{TOOL}: {a} needs a value", file=sys.stderr)
            return 2
    bad = [x for x in xs if x not in XAXES] + [p for p in panels if p not in PANELS]
    if bad or not runs:
        print(f"{TOOL}: " + (f"unknown axis or panel '{bad[0]}' (axes: {', '.join(XAXES)}; panels: "
                             f"{', '.join(PANELS)})" if bad else "no run given"), file=sys.stderr)
        return 2
    data = [read_run(a) for a in runs]
    plt = need_matplotlib(TOOL)
    plot_curves(plt, data, out, xs, panels, title)
    print(f"{TOOL}: wrote {out} ({len(panels)} panels x {len(xs)} axes, {len(data)} run(s))")
    if stale_out:
        plot_staleness(plt, data, stale_out, title)
        print(f"{TOOL}: wrote {stale_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
