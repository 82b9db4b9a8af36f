# tests/support/check.sh - sourced by the integration scripts (tests/test_*.sh).
# check DESCRIPTION COMMAND...: runs COMMAND; prints "ok   DESCRIPTION" when it
# succeeds, else "FAIL DESCRIPTION" and counts the failure in $fails, which
# the script sets to 0 first and turns into its exit status at the end.
check() {
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
