#!/usr/bin/env bash
# tests/test_bench_ps.sh - tools/bench_ps.sh, the measurement behind
# docs/data-parallel.md's parameter-server table, run small: 2 and 3
# workers with emulated compute at one link rate, 8 steps, 1 round. The
# table must have its eight rows (4 modes x 2 worker counts) with numbers,
# a synchronous server's link must carry about W times a worker's pulls
# (its traffic grows with the workers: the point of the table), two
# servers about half of one's, and the simulator must predict each
# synchronous row. Timings are not checked (no timed goals in tests).
# Skipped as test_multihost.sh is (root, namespaces, MPI). Run from the
# repository root after `make`.
set -u
skip() { echo "SKIPPED: $*"; exit 0; }
source "$(dirname "$0")/support/netns.sh" # need_cluster WHAT, cluster_names LETTERS OCTET
need_cluster "the parameter-server benchmark's test"
cluster_names bp 82
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...

CNT_CLUSTER_PREFIX=$prefix CNT_CLUSTER_NET=$net timeout 600 tools/bench_ps.sh --emulate --workers "2 3" \
    --rates 1gbit --steps 8 --rounds 1 --out "$tmp/table.md" >"$tmp/out" 2>&1
rc=$?
check "bench_ps.sh --emulate --workers \"2 3\": exits 0" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 20 "$tmp/out" | sed 's/^/    /'
check "bench_ps.sh: no namespace of its cluster is left" bash -c "! ip netns list | grep -q '^$prefix-'"
check "bench_ps.sh: the table's rows, numbers and ratios" python3 - "$tmp/table.md" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0].startswith("CPU: ") and "emulated compute" in lines[0], lines[0]
assert "predicted: build/tools/simulate --bw RATE x 0.89 --latency 0" in lines[0], lines[0]
rows = [[c.strip() for c in l.strip("|").split("|")] for l in lines if l.startswith("| 1gbit")]
assert len(rows) == 8, rows
by = {(int(r[1]), r[2]): r for r in rows}
for w in (2, 3):
    for mode, hosts in (("allreduce", w), ("sync PS, 1 server", w + 1), ("sync PS, 2 servers", w + 2),
                        ("async PS, 1 server", w + 1)):
        r = by[(w, mode)]
        assert int(r[3]) == hosts and float(r[4]) > 0, r
        assert (r[5] == "-") == mode.startswith("async") and (r[5] == "-" or float(r[5]) > 0), r
    out = lambda m, col: [float(v) for v in by[(w, m)][col].split("/")]
    # a worker pulls one model a step (its "in"; its "out" also holds rank 0's one-off start-up and
    # evaluation traffic, large at 8 steps); one server sends W models a step and receives as many (plus the
    # initial parameters), two servers about half each
    model = out("sync PS, 1 server", 6)[1]
    one = out("sync PS, 1 server", 7)
    two = out("sync PS, 2 servers", 7)
    assert 0.9 * w * model <= one[0] <= 1.25 * w * model and 0.9 * w * model <= one[1] <= 1.35 * w * model, (w, model, one)
    assert 0.35 * one[0] <= two[0] <= 0.65 * one[0], (w, one, two)
PY
[ $fails -eq 0 ] || cat "$tmp/table.md" | sed 's/^/    /'

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
