#!/usr/bin/env bash
# tests/test_validate.sh - tools/validate_cluster.py end to end on a cluster of
# its own (tools/cluster.sh): ResNet-20 profiled on one rank, then trained
# with emulated compute (train.emulate_compute) on 1 and 2 namespace hosts
# over a shaped link; the network model fitted on the 2-host row; the table,
# the CSV and the plot written; the cluster removed. Checks the pipeline and
# its outputs, not how close the prediction is (that is docs/scaling.md's
# table, from the full grid). Run from the repository root after make, as
# root; prints "SKIPPED: ..." without root, MPI or network namespaces.
set -u
skip() { echo "SKIPPED: $*"; exit 0; }
source "$(dirname "$0")/support/netns.sh" # need_cluster WHAT, cluster_names LETTERS OCTET
need_cluster "the validation tests"
[ -x build/tools/simulate ] || skip "build/tools/simulate not built (make)"
cluster_names cv 81

tmp=$(mktemp -d)
trap 'tools/cluster.sh --prefix "$prefix" --net "$net" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

timeout -k 5 240 python3 tools/validate_cluster.py --quick --models resnet20 --prefix "$prefix" --net "$net" \
    --out "$tmp/v" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "validate_cluster.py --quick: exit 0" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 5 "$tmp/err" | sed 's/^/    /'
check "validation.md: the fit and one row for 1 and for 2 hosts, the 2-host row marked fitted" \
    bash -c "grep -qE '^Fitted on the 2-host rows: eta = [0-9.]+ .*alpha = [0-9]+ us' '$tmp/v/validation.md' &&
             grep -qE '^\| resnet20 \| 1 \| 0.05 Gbit/s \| 25 MiB \| on \| [0-9.]+ \| [0-9.]+ \|.*\| no \|$' '$tmp/v/validation.md' &&
             grep -qE '^\| resnet20 \| 2 \| 0.05 Gbit/s \| 25 MiB \| on \| [0-9.]+ \| [0-9.]+ \|.*\| yes \|$' '$tmp/v/validation.md'"
check "validation.csv: a header and 2 rows, each with its measured run" \
    bash -c "[ \$(wc -l <'$tmp/v/validation.csv') -eq 3 ] && head -1 '$tmp/v/validation.csv' | grep -q '^model,hosts,rate_mbit,.*measured_ms,runs_ms,predicted_ms'"
check "the emulated runs wrote step records with step_ms (rank 0's metrics.jsonl)" \
    bash -c "grep -q '\"step_ms\":' '$tmp/v/runs/resnet20-h2-50m-b25-o1-0/metrics.jsonl'"
if python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    check "validation-resnet20.png written" bash -c "head -c 4 '$tmp/v/validation-resnet20.png' | grep -q PNG"
fi
check "the cluster is gone: no namespace $prefix-h* left" bash -c "! ip netns list | grep -q '^$prefix-h'"
python3 tools/validate_cluster.py --models nosuch --out "$tmp/x" >/dev/null 2>&1
check "validate_cluster.py --models nosuch: exit 2" test $? -eq 2

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
