#!/usr/bin/env bash
# tests/run_tests.sh - run every test binary and integration script given on
# the command line, show their output, and end with one line "N passed, N failed".
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
set -u
passed=0
failed=0
skipped=0
failures=()
times=$(mktemp)
for t in "$@"; do
    echo "=== $t"
    start=$SECONDS
    out=$(mktemp)
    if [[ "$t" == *.sh ]]; then
        bash "$t" 2>&1 | tee "$out"
        rc=${PIPESTATUS[0]}
        # skipped: exited 0 saying "SKIPPED: why"; a part skipped ("SKIPPED (part): ...") skips nothing else,
        # and a script that fails has failed, whatever it printed
        if [ "$rc" -eq 0 ] && grep -q '^SKIPPED:' "$out"; then
            skipped=$((skipped + 1))
        elif [ "$rc" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$t"); fi
    else
        "$t" 2>&1 | tee "$out"
        rc=${PIPESTATUS[0]}
        p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$out" | awk '{s+=$4} END {print s+0}')
        f=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$out" | awk '{s+=$4} END {print s+0}')
        s=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$out" | awk '{s+=$4} END {print s+0}')
        passed=$((passed + p))
        failed=$((failed + f))
        skipped=$((skipped + s))
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            failed=$((failed + 1))
            echo "!!! $t exited with status $rc without a cmocka failure summary"
        fi
        if [ "$rc" -ne 0 ]; then failures+=("$t"); fi
    fi
    rm -f "$out"
    echo "--- $t: $((SECONDS - start)) s"
    echo "$((SECONDS - start)) $t" >> "$times"
done
echo "slowest: $(sort -rn "$times" | head -5 | awk '{ printf "%s%s %d s", (NR > 1 ? ", " : ""), $2, $1 }')"
rm -f "$times"
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
