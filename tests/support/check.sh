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
# injected_pid LOG: the pid that LOG's CNT_TEST_STALL_IN line names (a rank
# asleep at its fault point, dist/fault.h), waiting up to 30 s for the line;
# nothing when it never comes.
injected_pid() {
    local i pid
    for ((i = 0; i < 300; i++)); do
        pid=$(grep -oE "CNT_TEST_STALL_IN: sleeping .*pid [0-9]+" "$1" 2> /dev/null | grep -oE "[0-9]+$")
        [ -n "$pid" ] && { echo "$pid"; return; }
        sleep 0.1
    done
}
# trainer_pid TEXT [EXCEPT]: a trainer process whose command line holds TEXT
# (its train.out_dir, say), other than pid EXCEPT; nothing when none.
trainer_pid() {
    local p found=""
    for p in $(pgrep -x trainer); do
        [ "$p" != "${2:-}" ] && grep -qaF "$1" "/proc/$p/cmdline" 2> /dev/null && found=$p
    done
    echo "$found"
}
# thread_nice PID NAME: the nice value of PID's first thread named NAME
# (/proc/PID/task/*/comm; the 19th field of its stat); nothing when none.
thread_nice() {
    local t
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm" 2> /dev/null)" = "$2" ]; then
            sed 's/^.*) //' "$t/stat" | awk '{print $17}'
            return
        fi
    done
}
# cpu_percent PID SECONDS: how much of one core (whole percent) PID used in
# the next SECONDS; 999 when it cannot be read.
cpu_percent() {
    local a b
    a=$(awk '{print $14 + $15}' "/proc/$1/stat" 2> /dev/null) || { echo 999; return; }
    sleep "$2"
    b=$(awk '{print $14 + $15}' "/proc/$1/stat" 2> /dev/null) || { echo 999; return; }
    awk -v d=$((b - a)) -v s="$2" -v t="$(getconf CLK_TCK)" 'BEGIN { printf "%d\n", 100 * d / (s * t) }'
}
