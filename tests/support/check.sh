# tests/support/check.sh - sourced by the integration scripts (tests/test_*.sh).
# check DESCRIPTION COMMAND...: runs COMMAND; prints "ok   DESCRIPTION" when it
# succeeds, else "FAIL DESCRIPTION" and counts the failure in $fails, which
# the script sets to 0 first and turns into its exit status at the end.
check() {
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
# close_to A B REL: succeeds when A and B are both decimal numbers and
# |A - B| <= REL * |B|. An empty or non-numeric A or B fails (mawk compares
# NaN as true, so "nan" must never reach the arithmetic).
close_to() {
    local num='^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'
    [[ "$1" =~ $num && "$2" =~ $num ]] || return 1
    awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; exit !(d <= r * b) }'
}
