#!/usr/bin/env python3
"""tools/plot_timeline.py - a dist.timeline trace (Chrome trace JSON) as a PNG.

    python3 tools/plot_timeline.py TRACE.json [-o OUT.png] [--steps A:B] [--title TITLE]
    python3 tools/plot_timeline.py TRACE.json.rank0.part TRACE.json.rank1.part ... [-o OUT.png] ...

Every rank's tracks, one row each, top to bottom in the trace's order
(rank 0's "train", "comm" and any others, then rank 1's, ...; parameter
servers are processes of their own): each event a bar from its start to its
end, coloured by category (forward, backward, the allreduce buckets, the
optimizer, parameter-server traffic, data waits), labelled where it is wide
enough; an event inside another on its track (each layer's backward
inside "backward") goes in the row's lower half; an arrow goes from each
bucket's readiness on the training track to its allreduce. This is the picture of overlap: backward layer by layer on the
training track while the bucket allreduces run on the communication track.

A run writes each rank's events to TRACE.json.rankR.part as it goes and
merges them into TRACE.json at the end; a run that was killed or failed
leaves the parts, which this draws together (given all of them).

--steps A:B draws the events of steps A to B (inclusive; the events'
args.step, as the trainer stamps them); default: the last three steps the
trace holds (the first steps are warm-up). Times are ms from the first
event drawn.

Default -o: TRACE with .png for .json. Needs matplotlib (Debian's
python3-matplotlib, `make deps`).
Exit status: 0; 1 when the trace cannot be read or has no events in the
steps asked for; 2 for usage.
"""
import json
import os
import sys

from plotlib import need_matplotlib

TOOL = "plot_timeline.py"
# category -> colour; names that start with "bwd " are backward layers
COLOURS = {
    "data": "#bbbbbb",
    "forward": "#4c72b0",
    "backward": "#55a868",
    "comm": "#dd8452",
    "ps": "#c44e52",
    "optimizer": "#8172b3",
}


def fail(msg, code=1):
    print(f"{TOOL}: {msg}", file=sys.stderr)
    sys.exit(code)


def read(path):
    """A trace's events: a whole trace, or a rank's part (<trace>.rankR.part: one element a line, what a run
    that was killed or failed leaves; a last line cut short is dropped)."""
    try:
        with open(path) as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror}")
    if path.endswith(".part"):
        events = []
        lines = data.split("\n")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                events.append(json.loads(line))
            except ValueError as e:
                if n < len(lines) - 1:  # only the last line may be cut short
                    fail(f"'{path}' line {n} is not a trace element: {e}")
        return events
    try:
        trace = json.loads(data)
    except ValueError as e:
        fail(f"'{path}' is not a Chrome trace (JSON): {e}")
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        fail(f"'{path}' has no traceEvents list")
    return events


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    paths, out, steps, title = [], None, None, None
    it = iter(argv)
    for a in it:
        try:
            if a == "-o":
                out = next(it)
            elif a == "--steps":
                v = next(it)
                lo, sep, hi = v.partition(":")
                steps = (int(lo), int(hi) if sep else int(lo))
            elif a == "--title":
                title = next(it)
            elif a.startswith("-"):
                fail(f"unknown option {a}", 2)
            else:
                paths.append(a)
        except StopIteration:
            fail(f"{a} needs a value", 2)
        except ValueError:
            fail(f"--steps takes A:B (step numbers), got '{v}'", 2)
    if not paths:
        fail("no trace given", 2)
    if len(paths) > 1 and not all(p.endswith(".part") for p in paths):
        fail("several files are a run's parts (.part), one trace otherwise", 2)
    path = paths[0]
    if out is None:
        base = path[: path.rindex(".rank")] if path.endswith(".part") and ".rank" in path else path
        out = (base[:-5] if base.endswith(".json") else base) + ".png"
    events = [e for p in paths for e in read(p)]
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    x = [e for e in events if e.get("ph") == "X"]
    if not x:
        fail(f"'{path}' holds no events")
    stamped = sorted({e.get("args", {}).get("step", 0) for e in x})
    if steps is None:
        last = [s for s in stamped if s > 0][-3:] or stamped[-3:]
        steps = (last[0], last[-1])
    x = [e for e in x if steps[0] <= e.get("args", {}).get("step", 0) <= steps[1]]
    if not x:
        fail(f"no events in steps {steps[0]}:{steps[1]} (the trace has steps {stamped[0]} to {stamped[-1]})")
    t0 = min(e["ts"] for e in x)
    rows = sorted({(e["pid"], e["tid"]) for e in x})
    index = {r: i for i, r in enumerate(rows)}
    plt = need_matplotlib(TOOL)
    span = (max(e["ts"] + e["dur"] for e in x) - t0) / 1e3
    fig, ax = plt.subplots(figsize=(14, 0.55 * len(rows) + 1.6))
    # an event inside another on its track (a layer within "backward") is drawn in the lower half of the row
    depth = {}
    for row in rows:
        stack = []
        for e in sorted((e for e in x if (e["pid"], e["tid"]) == row), key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            depth[id(e)] = min(len(stack), 1)
            stack.append(e)
    for e in x:
        cat = e.get("cat", "")
        colour = COLOURS.get(cat, "#937860")
        d = depth[id(e)]
        y = len(rows) - 1 - index[(e["pid"], e["tid"])] + (0.19 if d == 0 else -0.19)
        start, width = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
        ax.barh(y, max(width, span / 2000), left=start, height=0.36, color=colour, edgecolor="white", linewidth=0.3)
        name = e["name"][4:] if e["name"].startswith("bwd ") else e["name"]
        if width > span / 30:
            ax.text(start + width / 2, y, name, ha="center", va="center", fontsize=5.5, clip_on=True)
    # flow arrows (a bucket's readiness to its allreduce), where both ends are drawn
    ends = {}
    for e in events:
        if e.get("ph") in ("s", "f") and steps[0] <= e.get("args", {}).get("step", 0) <= steps[1]:
            ends.setdefault((e["pid"], e["id"]), {})[e["ph"]] = e
    arrows = 0
    for pair in ends.values():
        a, b = pair.get("s"), pair.get("f")
        if not a or not b or (a["pid"], a["tid"]) not in index or (b["pid"], b["tid"]) not in index:
            continue
        ya = len(rows) - 1 - index[(a["pid"], a["tid"])] - 0.19
        yb = len(rows) - 1 - index[(b["pid"], b["tid"])] + 0.19
        ax.annotate("", xy=((b["ts"] - t0) / 1e3, yb), xytext=((a["ts"] - t0) / 1e3, ya),
                    arrowprops=dict(arrowstyle="->", color="black", lw=0.6, alpha=0.7))
        arrows += 1
    labels = []
    for pid, tid in rows:
        labels.append(f"{procs.get(pid, f'pid {pid}')}: {threads.get((pid, tid), f'tid {tid}')}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=8)
    ax.set_xlabel(f"ms (steps {steps[0]} to {steps[1]})")
    ax.set_xlim(0, span)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / len(rows)),
              ncol=len(COLOURS), frameon=False)
    ax.set_title(title or os.path.basename(path), fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"{TOOL}: wrote {out} ({len(rows)} tracks, {len(x)} events, {arrows} arrows, steps {steps[0]} to {steps[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
