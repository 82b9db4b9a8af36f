#!/usr/bin/env bash
# tests/test_plots.sh - tools/plot_scaling.py draws simulate's CSV tables (and
# measured ones) into a PNG; refuses a table without the needed columns (exit
# 1) and a call without tables (exit 2). Skipped without matplotlib (make deps
# installs Debian's python3-matplotlib). Run from the repository root after make.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
skip() { echo "SKIPPED: $*"; exit 0; }
python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
    skip "matplotlib not found (make deps installs python3-matplotlib)"

cat >"$tmp/p.json" <<'JSON'
{"model":"tiny","device":"cpu","batch":10,"params":1000,"grad_bytes":4000,"step_ms":9.5,"forward_ms":3,
 "backward_ms":5,"update_ms":1,"data_wait_ms":0.5,"first_bucket_values":600,"bucket_values":1000,
 "buckets":[{"begin":0,"end":600,"bytes":2400},{"begin":600,"end":1000,"bytes":1600}],
 "layers":[{"name":"fc","kind":"linear","forward_ms":1,"backward_ms":2,"grad_begin":0,"grad_end":600,"grad_bytes":2400,"completes":[0]},
           {"name":"conv","kind":"conv","forward_ms":2,"backward_ms":3,"grad_begin":600,"grad_end":1000,"grad_bytes":1600,"completes":[1]}]}
JSON
./build/tools/simulate "$tmp/p.json" --bw 0.01 --csv "$tmp/a.csv" >/dev/null 2>&1
./build/tools/simulate "$tmp/p.json" --bw 1 --csv "$tmp/b.csv" >/dev/null 2>&1
printf 'workers,images_per_s,efficiency\n1,1052,1\n2,1900,0.9\n' >"$tmp/m.csv"
out=$(python3 tools/plot_scaling.py "$tmp/s.png" --title "tiny" "$tmp/a.csv=slow" "$tmp/b.csv=fast" --measured "$tmp/m.csv=measured" 2>&1)
check "plot_scaling.py: exit 0 and says what it wrote" bash -c "grep -q 'wrote $tmp/s.png' <<<\"\$1\"" _ "$out"
check "plot_scaling.py: the file is a PNG" bash -c "head -c 8 '$tmp/s.png' | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a'"
printf 'workers,step_ms\n1,2\n' >"$tmp/bad.csv"
out=$(python3 tools/plot_scaling.py "$tmp/t.png" "$tmp/bad.csv" 2>&1)
rc=$?
check "plot_scaling.py: a table without images_per_s exits 1 naming the file and column" \
    bash -c "[ $rc -eq 1 ] && grep -q \"bad.csv': no column 'images_per_s'\" <<<\"\$1\"" _ "$out"
python3 tools/plot_scaling.py "$tmp/t.png" >/dev/null 2>&1
check "plot_scaling.py: no table exits 2" test $? -eq 2

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
