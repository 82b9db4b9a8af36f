#!/usr/bin/env bash
# tests/test_tensorboard.sh - train.tensorboard = true read back by
# TensorBoard's own readers (the event accumulator, and the multiplexer the
# TensorBoard server loads a log folder with):
#   - every step, eval and epoch record of metrics.jsonl is there as scalars
#     at the same steps with the same values (float32), and nothing else;
#     config.ini is there verbatim as text (the Text tab);
#   - watched live: while rank 0 stalls mid-run (CNT_TEST_STALL), the steps
#     it logged so far are already readable;
#   - killed (SIGKILL) past its last checkpoint and resumed, the curve holds
#     each step once, the resumed run's values (the START event purges what
#     the killed run logged past the checkpoint, as metrics.jsonl is cut);
#   - a fresh run in the same out_dir moves the earlier run's files into
#     earlier-STAMP/, which TensorBoard shows as a run of its own;
#   - asynchronous parameter servers: staleness scalars and the histogram.
# The format itself (framing, CRCs, fields): tests/test_tensorboard.c.
# Run from the repository root after `make`, with TensorBoard in $TB_PYTHON or
# /opt/tb-venv/bin/python (not a project dependency: python3 -m venv
# /opt/tb-venv && /opt/tb-venv/bin/pip install tensorboard). Prints
# "SKIPPED: ..." (and exits 0) without it. Takes about 15 s.
set -u
skip() { echo "SKIPPED: $*"; exit 0; }
py=${TB_PYTHON:-/opt/tb-venv/bin/python}
"$py" -c 'import tensorboard.backend.event_processing.event_accumulator' 2>/dev/null ||
    skip "no TensorBoard in $py (python3 -m venv /opt/tb-venv && /opt/tb-venv/bin/pip install tensorboard," \
        "or set TB_PYTHON)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
T=(timeout 120 ./trainer configs/resnet20-fashion.ini train.device=cpu data.train_limit=256 data.test_limit=100
   train.batch_size=16 train.epochs=2 train.threads=1 data.workers=1 optim.lr=0.05 train.tensorboard=true)

# tb WHAT DIR [ARG]: what TensorBoard reads in DIR.
#   compare DIR: every scalar against metrics.jsonl's records ("ok N" or what differs)
#   steps DIR TAG: the steps of TAG, space-separated
#   runs DIR: the runs the server's multiplexer finds under DIR, and their train/loss step counts
#   histo DIR TAG: per event "step:num:counts"
#   text DIR TAG: per event its step on a line, then the text
tb() {
    "$py" - "$@" 2>>"$tmp/tb.err" <<'PY' # its logging (the purge at a resume, say) apart
import json, math, os, sys
from tensorboard.backend.event_processing import event_accumulator as ea_mod
from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
what, d = sys.argv[1], sys.argv[2]
def acc(path):
    a = ea_mod.EventAccumulator(path, size_guidance={"scalars": 0, "histograms": 0})
    a.Reload()
    return a
if what == "steps":
    print(" ".join(str(e.step) for e in acc(d).Scalars(sys.argv[3])))
elif what == "histo":
    for e in acc(d).Histograms(sys.argv[3]):
        h = e.histogram_value
        print("%d:%g:%s" % (e.step, h.num, ",".join("%g" % c for c in h.bucket)))
elif what == "text":
    for e in acc(d).Tensors(sys.argv[3]):
        print(e.step)
        print(e.tensor_proto.string_val[0].decode(), end="")
elif what == "runs":
    m = pem.EventMultiplexer()
    m.AddRunsFromDirectory(d)
    m.Reload()
    for run in sorted(m.Runs()):
        print(run, len(m.Tensors(run, "train/loss")))
elif what == "compare":
    a = acc(d)
    got = {t: {e.step: e.value for e in a.Scalars(t)} for t in a.Tags()["scalars"]}
    counts = {t: len(a.Scalars(t)) for t in got}
    want = {}
    names = {"step": {"loss": "train/loss", "lr": "train/lr", "img_per_sec": "train/img_per_sec",
                      "step_ms": "train/step_ms", "data_wait_ms": "train/data_wait_ms", "comm_ms": "train/comm_ms",
                      "comm_exposed_ms": "train/comm_exposed_ms", "loss_scale": "train/loss_scale",
                      "skipped_steps": "train/skipped_steps", "ps_push_mb": "ps/push_mb", "ps_pull_mb": "ps/pull_mb",
                      "ps_wait_ms": "ps/wait_ms", "ps_stale_mean": "ps/stale_mean", "ps_stale_max": "ps/stale_max"},
             "eval": {"eval_loss": "eval/loss", "top1": "eval/top1", "top5": "eval/top5"},
             "epoch": {k: "epoch/" + k for k in ("seconds", "img_per_sec", "data_wait_ms", "data_wait_frac", "comm_ms",
                                                 "comm_exposed_ms", "skipped_images", "skipped_eval_images")},
             "staleness": {"mean": "ps/staleness_mean", "max": "ps/staleness_max"}}
    for line in open(os.path.join(d, "metrics.jsonl")):
        r = json.loads(line, parse_float=str)  # the printed digits say how close float32 must be
        for k, tag in names.get(r["kind"], {}).items():
            if k in r:
                want.setdefault(tag, {})[r["step"]] = r[k]
    bad = []
    if set(got) != set(want):
        bad.append("tags differ: only in events %s, only in metrics %s" %
                   (sorted(set(got) - set(want)), sorted(set(want) - set(got))))
    n = 0
    for t in sorted(set(got) & set(want)):
        if counts[t] != len(got[t]) or sorted(got[t]) != sorted(want[t]):
            bad.append("%s: steps %s (%d events) against %s" % (t, sorted(got[t]), counts[t], sorted(want[t])))
            continue
        for s, v in want[t].items():
            n += 1
            g = got[t][s]
            if v is None:
                ok = not math.isfinite(g)
            else:  # within half the last printed digit (or 6 significant digits), and float32's rounding
                x = float(v)
                dec = len(v.split(".")[1]) if isinstance(v, str) and "." in v and "e" not in v else None
                tol = 0.5 * 10.0 ** -dec if dec is not None else 5e-6 * abs(x)
                ok = abs(g - x) <= tol + 1e-7 * abs(x)
            if not ok:
                bad.append("%s at step %d: %r in events, %r in metrics.jsonl" % (t, s, g, v))
    print("\n".join(bad[:10]) if bad else "ok %d" % n)
PY
}
# steps_of DIR: the steps of metrics.jsonl's step records, space-separated
steps_of() { grep '"kind":"step"' "$1/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2 | paste -sd' '; }

# 1. A whole run: every record's numbers are there, at its step.
d="$tmp/a"
out=$("${T[@]}" train.out_dir="$d" train.log_every=2 2>&1)
rc=$?
check "a run with train.tensorboard=true exits 0 (rc=$rc)" test $rc -eq 0
check "the start-up says where the events go and how to watch them" \
    grep -q "TensorBoard: events in $d/events.out.tfevents.*(watch with: tensorboard --logdir $d)" <<<"$out"
res=$(tb compare "$d")
echo "$res"
check "TensorBoard reads every step, eval and epoch number of metrics.jsonl, at its step" \
    grep -q "^ok [0-9][0-9][0-9]" <<<"$res"
check "train/loss every 2 steps: 2 .. 32" test "$(tb steps "$d" train/loss)" = "$(seq -s' ' 2 2 32)"
check "eval/top1 after each epoch (steps 16 and 32)" test "$(tb steps "$d" eval/top1)" = "16 32"
tb text "$d" config >"$tmp/config.txt"
check "the Text tab: config.ini verbatim at step 1 (a code block: every line indented 4 spaces)" \
    bash -c '[ "$(head -n 3 "$1")" = "$(printf "1\nconfig.ini of this run:\n")" ] &&
             ! tail -n +4 "$1" | grep -qv "^    " && diff <(tail -n +4 "$1" | sed "s/^    //") "$2" >/dev/null' \
    _ "$tmp/config.txt" "$d/config.ini"

# 2. Live, then killed past its checkpoint and resumed.
d="$tmp/b"
CNT_TEST_STALL=0:6:60 "${T[@]}" train.out_dir="$d" train.log_every=1 checkpoint.every_steps=4 >"$tmp/b1.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
    grep -q "CNT_TEST_STALL: sleeping" "$tmp/b1.log" && break
    sleep 0.1
done
live=$(tb steps "$d" train/loss)
check "watched live: steps 1-5 readable while the run sleeps in step 6 ($live)" test "$live" = "1 2 3 4 5"
check "watched live: the run was still running" kill -0 "$(pgrep -P $pid trainer || echo $pid)"
pkill -KILL -P $pid trainer
wait $pid 2>/dev/null
out=$("${T[@]}" train.out_dir="$d" train.log_every=1 checkpoint.every_steps=4 checkpoint.resume=auto 2>&1)
rc=$?
check "resumed from step 4 (rc=$rc)" grep -q "resumed from .* 4 steps done" <<<"$out"
check "resumed: two event files" test "$(ls "$d" | grep -c '^events.out.tfevents')" -eq 2
check "resumed: metrics.jsonl holds steps 1-32 once" test "$(steps_of "$d")" = "$(seq -s' ' 1 32)"
check "resumed: TensorBoard's train/loss holds steps 1-32 once (the killed run's step 5 dropped)" \
    test "$(tb steps "$d" train/loss)" = "$(seq -s' ' 1 32)"
res=$(tb compare "$d")
echo "$res"
check "resumed: every number is the resumed run's (as in metrics.jsonl)" grep -q "^ok " <<<"$res"

# 3. A fresh run in the same out_dir: the earlier run's files move aside, a run of their own.
out=$("${T[@]}" train.out_dir="$d" train.log_every=4 train.max_steps=8 2>&1)
check "fresh run over an earlier one: says where its event files went" \
    grep -q "TensorBoard: the earlier run's 2 event files moved to $d/earlier-" <<<"$out"
runs=$(tb runs "$d")
echo "$runs"
check "the server's multiplexer finds this run (2 points) and the earlier one (32 points)" \
    test "$(echo "$runs" | awk '{print ($1 == "." ? "this" : ($1 ~ /^earlier-/ ? "earlier" : $1)), $2}' | sort |
            paste -sd' ')" = "earlier 32 this 2"

# 4. Asynchronous parameter servers: staleness as scalars and a histogram.
if command -v mpirun >/dev/null 2>&1 && ./trainer --version | grep -q "^mpi: built in"; then
    d="$tmp/ps"
    timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "${T[@]:2}" train.out_dir="$d" \
        train.log_every=2 train.epochs=1 dist.mode=ps dist.ps_sync=false >"$tmp/ps.log" 2>&1
    rc=$?
    check "async ps with train.tensorboard=true exits 0 (rc=$rc)" test $rc -eq 0
    res=$(tb compare "$d")
    echo "$res"
    check "async ps: every number of metrics.jsonl read back, the ps fields and staleness too" \
        grep -q "^ok [0-9][0-9]" <<<"$res"
    check "async ps: ps/stale_mean every 2 steps" test "$(tb steps "$d" ps/stale_mean)" = "2 4 6 8"
    applied=$(grep '"kind":"staleness"' "$d/metrics.jsonl" | grep -o '"applied":[0-9]*' | cut -d: -f2)
    hist=$(grep '"kind":"staleness"' "$d/metrics.jsonl" | grep -o '"hist":\[[^]]*' | cut -d[ -f2)
    check "async ps: the staleness histogram at step 8 holds every applied shard ($applied) and the counts" \
        test "$(tb histo "$d" ps/staleness)" = "8:$applied:$hist"
    check "async ps: ps/staleness_mean read back" test "$(tb steps "$d" ps/staleness_mean)" = "8"
else
    echo "SKIPPED (part): no MPI in this build: the parameter-server case"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all TensorBoard checks passed"
