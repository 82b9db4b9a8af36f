# tests/support/netns.sh - sourced by the tests that make a cluster of their
# own with tools/cluster.sh (test_multihost.sh, test_peer_ddp.sh,
# test_validate.sh), after they define skip().
# need_cluster WHAT: skips the script unless a cluster can be run here: root
# (WHAT names the tests in the message), ip, tc, unshare, mpirun and python3,
# and a trainer built with MPI.
need_cluster() {
    local c
    [ "$(id -u)" -eq 0 ] || skip "$1 need root (network namespaces, a bridge, tc); run make test as root"
    for c in ip tc unshare mpirun python3; do command -v $c > /dev/null || skip "$c not found"; done
    ./trainer --version 2> /dev/null | grep -q '^mpi: built in' || skip "no MPI in this build"
}
# cluster_names LETTERS OCTET: sets $prefix (LETTERS and this shell's pid, so
# no other cluster's names) and $net (the first 10.OCTET.X /24 no route uses
# yet, starting from one of our own), or skips the script: network
# namespaces cannot be made here, or no /24 is free.
cluster_names() {
    local err cand i
    prefix=$1$(($$ % 100000))
    if ! err=$(ip netns add "$prefix-probe" 2>&1); then skip "cannot make network namespaces here: $err"; fi
    ip netns delete "$prefix-probe"
    net=
    for ((i = 0; i < 250; i++)); do
        cand=10.$2.$((($$ + i) % 250))
        if ! ip -4 route show | grep -q "^$cand\.0/24 "; then
            net=$cand
            return 0
        fi
    done
    skip "no free 10.$2.X.0/24 subnet for the test cluster"
}
