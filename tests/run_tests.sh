#!/usr/bin/env bash
# tests/run_tests.sh - run every test binary and integration script given on
# the command line, show their output, and end with one line "N passed, N failed".
#
#   tests/run_tests.sh [--side-by-side "A1 A2 ..." "B1 B2 ..."]... TEST...
#
# cmocka binaries: each test case counts (read from cmocka's summary lines
# "[  PASSED  ] N test(s)." and "[  FAILED  ] N test(s), listed below:").
# Scripts (tests/*.sh): each counts as one test, passed when it exits 0.
# A binary that crashes or exits non-zero without a cmocka summary counts as
# one failure, so nothing can fail silently. cmocka's "[  SKIPPED ]" cases
# and scripts that exit 0 after a line starting with "SKIPPED:" count as
# skipped ("SKIPPED (part): ..." says a part was left out; the rest counts).
# Each test's wall time follows it ("--- T: S s"), and the slowest five are
# listed before the summary (the CI budget is 15 minutes).
#
# --side-by-side: the A list and the B list run at the same time, each in
# its order, before the TESTs, which run one at a time (several groups: one
# after another). It is for tests that leave a core idle (a single-threaded
# run, waits on a scheduler or a shaped link) beside each other; a test
# whose checks time something tightly, or that keeps every core busy with
# spinning threads (OpenMP), runs alone.
# Side by side, each test's output is shown whole when it ends (with
# "[side by side]" on its time line); alone, as it goes.
set -u
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

# run_one T LIVE N: runs T, its output shown as it goes (LIVE 1) or whole at
# its end (0, under a lock, so two lanes never interleave), and its counts
# "passed failed skipped seconds T" in $results/N.res.
run_one() {
    local t=$1 live=$2 n=$3 out rc p=0 f=0 s=0 start=$SECONDS
    out="$results/$n.out"
    if [ "$live" -eq 1 ]; then
        echo "=== $t"
        if [[ "$t" == *.sh ]]; then bash "$t" 2>&1 | tee "$out"; else "$t" 2>&1 | tee "$out"; fi
        rc=${PIPESTATUS[0]}
    else
        if [[ "$t" == *.sh ]]; then bash "$t" >"$out" 2>&1; else "$t" >"$out" 2>&1; fi
        rc=$?
    fi
    if [[ "$t" == *.sh ]]; then
        # skipped: exited 0 saying "SKIPPED: why"; a part skipped ("SKIPPED (part): ...") skips nothing else,
        # and a script that fails has failed, whatever it printed
        if [ "$rc" -eq 0 ] && grep -q '^SKIPPED:' "$out"; then s=1; elif [ "$rc" -eq 0 ]; then p=1; else f=1; fi
    else
        p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$out" | awk '{s+=$4} END {print s+0}')
        f=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$out" | awk '{s+=$4} END {print s+0}')
        s=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$out" | awk '{s+=$4} END {print s+0}')
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1
            echo "!!! $t exited with status $rc without a cmocka failure summary" >>"$out"
            [ "$live" -eq 1 ] && tail -n 1 "$out"
        fi
    fi
    local secs=$((SECONDS - start))
    if [ "$live" -eq 1 ]; then
        echo "--- $t: $secs s"
    else
        {
            flock 9
            echo "=== $t"
            cat "$out"
            echo "--- $t: $secs s [side by side]"
        } 9>"$results/lock"
    fi
    echo "$p $f $s $secs $t" >"$results/$n.res"
    rm -f "$out"
}

# expect LANE TEST...: each test's result file is expected (a test whose
# lane ended before it counts as failed); one line "<n> <test>" each.
expect() {
    local lane=$1 k=0
    shift
    for t in "$@"; do echo "$lane.$((k++)) $t" >>"$results/expected"; done
}

# run_lane LANE LIVE TEST...: the tests one after another (run_one's LIVE),
# results numbered as expect numbers them.
run_lane() {
    local lane=$1 live=$2 k=0
    shift 2
    for t in "$@"; do run_one "$t" "$live" "$lane.$((k++))"; done
}

group=0
while [ "${1:-}" = "--side-by-side" ]; do
    if [ $# -lt 3 ]; then
        echo "run_tests.sh: --side-by-side needs two lists (\"A1 A2 ...\" \"B1 B2 ...\")" >&2
        exit 2
    fi
    read -r -a lane_a <<<"$2"
    read -r -a lane_b <<<"$3"
    shift 3
    group=$((group + 1))
    expect "a$group" "${lane_a[@]}"
    expect "b$group" "${lane_b[@]}"
    echo "=== side by side: (${lane_a[*]}) beside (${lane_b[*]})"
    start=$SECONDS
    run_lane "a$group" 0 "${lane_a[@]}" &
    pa=$!
    run_lane "b$group" 0 "${lane_b[@]}" &
    pb=$!
    wait $pa $pb
    echo "--- side by side: $((SECONDS - start)) s"
done
expect c "$@"
run_lane c 1 "$@"

passed=0
failed=0
skipped=0
failures=()
while read -r n t; do
    if [ ! -e "$results/$n.res" ]; then
        echo "!!! $t: no result (its lane ended before it finished)"
        failed=$((failed + 1))
        failures+=("$t")
        continue
    fi
    read -r p f s secs t <"$results/$n.res"
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
    if [ "$f" -gt 0 ]; then failures+=("$t"); fi
done < <(cat "$results/expected" 2>/dev/null)
echo "slowest: $(cat "$results"/*.res 2>/dev/null | sort -k4 -rn | head -5 |
    awk '{ printf "%s%s %d s", (NR > 1 ? ", " : ""), $5, $4 }')"
if [ ${#failures[@]} -gt 0 ]; then
    echo "failing: ${failures[*]}"
fi
# Skipped tests (the GPU tests without a GPU) are counted on their own line;
# the last line is always "N passed, N failed".
if [ "$skipped" -gt 0 ]; then
    echo "$skipped skipped (not counted below)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
