# tools/median.sh - sourced by the benchmark scripts: `median V...` (or
# values on standard input, one a line) prints the median of the numbers
# given, leaving out anything that is not a number (a failed run's ""), and
# nothing when none is left; its status is 0 either way (safe under set -e
# and pipefail). The one definition of the median the tables in
# docs/benchmarks.md and docs/scaling.md take.
median() {
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; else cat; fi |
        awk '$1 ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ { print $1 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# ratio A B: A / B to two decimals, "n/a" unless both are positive numbers
# (a failed run's ""): the tables' ratio columns.
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
