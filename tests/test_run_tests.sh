#!/usr/bin/env bash
# tests/test_run_tests.sh - the test runner itself (tests/run_tests.sh) on
# fake tests: scripts that pass, fail, skip or skip a part, and "binaries"
# that print cmocka's summary lines, crash after passing, or exit non-zero
# without a summary; run one at a time and in side-by-side groups. Every
# count reaches the last line "N passed, N failed" and the exit status, and
# each test's output is shown once, whole, whichever lane ran it; a lane
# that ends early fails the tests it did not finish.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
runner=$(dirname "$0")/run_tests.sh

# fake NAME BODY: an executable $tmp/NAME running BODY (bash)
fake() {
    printf '#!/usr/bin/env bash\n%s\n' "$2" >"$tmp/$1"
    chmod +x "$tmp/$1"
}
fake pass.sh 'echo "ok   one"; sleep 0.3; exit 0'
fake fail.sh 'echo "FAIL two"; exit 1'
fake skip.sh 'echo "SKIPPED: no such thing here"; exit 0'
fake part.sh 'echo "SKIPPED (part): half of it"; exit 0'
fake slow.sh 'sleep 2; echo "ok   slow"; exit 0'
fake slow2.sh 'sleep 2; echo "ok   slow too"; exit 0'
fake unit_ok 'echo "[==========] 3 test(s) run."; echo "[  PASSED  ] 3 test(s)."; echo "[  SKIPPED ] 1 test(s)."'
fake unit_bad 'echo "[  PASSED  ] 2 test(s)."; echo "[  FAILED  ] 1 test(s), listed below:"; exit 1'
fake unit_crash 'echo "[  PASSED  ] 4 test(s)."; exit 139'
fake unit_none 'echo "no summary"; exit 3'
fake killer.sh 'kill -9 $PPID; sleep 1' # ends the lane that runs it

# run ARGS...: the runner's output in $tmp/out, its exit status in $rc
run() {
    "$runner" "$@" >"$tmp/out" 2>&1
    rc=$?
}

# One at a time: passed 1 + 1 (part) + 3 + 2 + 4 = 11; failed 1 + 1 + 1 (crash) + 1 (no summary) = 4;
# skipped 1 (script) + 1 (cmocka case).
all=("$tmp/pass.sh" "$tmp/fail.sh" "$tmp/skip.sh" "$tmp/part.sh" "$tmp/unit_ok" "$tmp/unit_bad" "$tmp/unit_crash"
    "$tmp/unit_none")
run "${all[@]}"
check "one at a time: the last line counts every case (rc=$rc): $(tail -n 1 "$tmp/out")" \
    test "$(tail -n 1 "$tmp/out")" = "11 passed, 4 failed" -a $rc -ne 0
check "one at a time: 2 skipped" grep -qx "2 skipped (not counted below)" "$tmp/out"
check "one at a time: the failing tests named" \
    grep -qx "failing: $tmp/fail.sh $tmp/unit_bad $tmp/unit_crash $tmp/unit_none" "$tmp/out"
cp "$tmp/out" "$tmp/serial.out"

# The same tests in two side-by-side groups and one after: the same counts.
t0=$(date +%s%N)
run --side-by-side "$tmp/pass.sh $tmp/unit_bad $tmp/skip.sh $tmp/slow2.sh" "$tmp/slow.sh $tmp/unit_crash" \
    --side-by-side "$tmp/fail.sh" "$tmp/part.sh $tmp/unit_none" "$tmp/unit_ok"
ms=$((($(date +%s%N) - t0) / 1000000))
check "side by side: the last line counts every case (rc=$rc): $(tail -n 1 "$tmp/out")" \
    test "$(tail -n 1 "$tmp/out")" = "13 passed, 4 failed" -a $rc -ne 0
check "side by side: 2 skipped" grep -qx "2 skipped (not counted below)" "$tmp/out"
check "side by side: each failing test named once" \
    test "$(grep '^failing: ' "$tmp/out" | tr ' ' '\n' | grep -c "^$tmp/")" -eq 4
check "side by side: two groups, each timed" test "$(grep -c '^--- side by side: [0-9]* s$' "$tmp/out")" -eq 2
# each test's block ("=== T", its output, "--- T: S s") whole: the line after "=== T" is T's own
check "side by side: each test's output follows its name, whole" python3 - "$tmp/out" "$tmp" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
first = {"pass.sh": "ok   one", "slow.sh": "ok   slow", "slow2.sh": "ok   slow too", "unit_bad": "[  PASSED  ] 2 test(s).",
         "unit_crash": "[  PASSED  ] 4 test(s).", "fail.sh": "FAIL two", "part.sh": "SKIPPED (part): half of it",
         "unit_none": "no summary", "unit_ok": "[==========] 3 test(s) run.", "skip.sh": "SKIPPED: no such thing here"}
seen = {}
for i, l in enumerate(lines):
    if l.startswith("=== " + sys.argv[2] + "/"):
        name = l.rsplit("/", 1)[1]
        assert lines[i + 1] == first[name], (name, lines[i + 1])
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("--- "))
        assert lines[end].startswith(f"--- {sys.argv[2]}/{name}: "), (name, lines[end])
        assert not any(x.startswith("=== ") for x in lines[i + 1:end]), (name, lines[i:end + 1])
        seen[name] = seen.get(name, 0) + 1
assert seen == {k: 1 for k in first}, seen
PY
check "side by side: the lanes ran at once (two 2 s sleeps and a 0.3 s one in ${ms} ms, < 4000)" test $ms -lt 4000
check "side by side: lane tests marked, the one after not" \
    bash -c 'grep -q "^--- .*/slow.sh: [0-9]* s \[side by side\]$" "$1" && grep -q "^--- .*/unit_ok: [0-9]* s$" "$1"' _ \
    "$tmp/out"

# A lane that ends early: its test and the ones after it have no result, and count as failed.
run --side-by-side "$tmp/killer.sh $tmp/pass.sh" "$tmp/slow2.sh"
check "a lane ended early: its tests count as failed (rc=$rc): $(tail -n 1 "$tmp/out")" \
    test "$(tail -n 1 "$tmp/out")" = "1 passed, 2 failed" -a $rc -ne 0
check "a lane ended early: each test without a result named" \
    test "$(grep -c '^!!! .*: no result (its lane ended before it finished)$' "$tmp/out")" -eq 2

# A passing run exits 0; a group needs two lists.
run --side-by-side "$tmp/pass.sh" "$tmp/unit_ok" "$tmp/part.sh"
check "all passing side by side: exit 0, 5 passed (rc=$rc)" test $rc -eq 0 -a "$(tail -n 1 "$tmp/out")" = "5 passed, 0 failed"
run --side-by-side "$tmp/pass.sh"
check "--side-by-side with one list: refused, exit 2 (rc=$rc)" \
    test $rc -eq 2 -a -n "$(grep 'needs two lists' "$tmp/out")"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
