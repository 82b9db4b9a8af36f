#!/usr/bin/env python3
"""tools/plot_scaling.py - plots scaling efficiency and images/s against the
number of workers, from the CSV tables of build/tools/simulate (--csv) and,
as markers, from measured tables with the same columns.

    python3 tools/plot_scaling.py OUT.png [--title TITLE] \\
        PREDICTED.csv[=LABEL] ... [--measured MEASURED.csv[=LABEL] ...]

Every CSV needs a header with at least the columns workers, images_per_s and
efficiency (simulate's CSV has them; so has tools/validate_cluster.sh's).
Predictions are drawn as lines, measurements as markers in the same colour
order. The left panel is efficiency (0 to 1.05), the right images/s, both
against workers on a log2 axis. Needs matplotlib (Debian's
python3-matplotlib, which `make deps` installs); when the interpreter that
runs this has none and /usr/bin/python3 has it, it runs itself with that one.

Exit status: 0, 1 when a file cannot be read or lacks a column, 2 for usage.
"""
import csv
import os
import sys

from plotlib import need_matplotlib


def read_table(arg):
    path, _, label = arg.partition("=")
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"plot_scaling.py: cannot read '{path}': {e.strerror}")
    for col in ("workers", "images_per_s", "efficiency"):
        if not rows or col not in rows[0]:
            sys.exit(f"plot_scaling.py: '{path}': no column '{col}' (or no rows)")
    try:
        pts = sorted((int(r["workers"]), float(r["images_per_s"]), float(r["efficiency"])) for r in rows)
    except ValueError as e:
        sys.exit(f"plot_scaling.py: '{path}': {e}")
    return label or os.path.basename(path), pts


def main(argv):
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr if len(argv) < 2 else sys.stdout)
        return 2 if len(argv) < 2 else 0
    out, title, predicted, measured, into = argv[0], None, [], [], None
    it = iter(argv[1:])
    for a in it:
        if a == "--title":
            title = next(it, None)
            if title is None:
                print("plot_scaling.py: --title needs a value", file=sys.stderr)
                return 2
        elif a == "--measured":
            into = measured
        elif a.startswith("-"):
            print(f"plot_scaling.py: unknown option {a}", file=sys.stderr)
            return 2
        else:
            (into if into is not None else predicted).append(read_table(a))
    if not predicted and not measured:
        print("plot_scaling.py: no table to plot", file=sys.stderr)
        return 2
    plt = need_matplotlib("plot_scaling.py")

    fig, (eff, ips) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (label, pts) in enumerate(predicted):
        w = [p[0] for p in pts]
        c = colours[k % len(colours)]
        eff.plot(w, [p[2] for p in pts], "-", color=c, label=label)
        ips.plot(w, [p[1] for p in pts], "-", color=c, label=label)
    for k, (label, pts) in enumerate(measured):
        w = [p[0] for p in pts]
        c = colours[k % len(colours)]
        eff.plot(w, [p[2] for p in pts], "o", color=c, label=label)
        ips.plot(w, [p[1] for p in pts], "o", color=c, label=label)
    ticks = sorted({p[0] for _, pts in predicted + measured for p in pts})
    for ax in (eff, ips):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("workers")
        ax.grid(True, alpha=0.3)
    eff.set_ylim(0, 1.05)
    eff.set_ylabel("scaling efficiency")
    ips.set_yscale("log")
    ips.set_ylabel("images/s")
    eff.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        sys.exit(f"plot_scaling.py: cannot write '{out}': {e.strerror}")
    print(f"plot_scaling.py: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
