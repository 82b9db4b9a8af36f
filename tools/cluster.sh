#!/usr/bin/env bash
# tools/cluster.sh - a cluster on one machine: N hosts as Linux network
# namespaces on one bridge, each with its own address and a link shaped to a
# rate in both directions (tc tbf), and a hostfile for mpirun, which launches
# onto the hosts through tools/cluster-rsh. See docs/multi-node.md.
#
#   tools/cluster.sh up N [RATE]    make hosts PREFIX-h0 .. PREFIX-h(N-1), RATE like
#                                   100mbit or 1gbit (tc's units; default unshaped)
#   tools/cluster.sh shape RATE     reshape every link of the running cluster (RATE
#                                   or `none`)
#   tools/cluster.sh mtu BYTES      set the MTU of every link and the bridge (1280 to
#                                   9000; 1500 after `up`, 9000 is a jumbo-frame network)
#   tools/cluster.sh down           end whatever still runs on the hosts and remove
#                                   everything `up` made
#   tools/cluster.sh status         the hosts, their addresses and links
#   tools/cluster.sh hostfile       print the hostfile's path
#   tools/cluster.sh mpirun-args [--keepalive off] [--shm]
#                                   print the mpirun options that launch onto the hosts
#                                   (off: without the fast host-failure detection; --shm:
#                                   shared memory between ranks of one host, as on a node)
#   tools/cluster.sh exec K CMD...  run CMD on host K (in its namespace)
#
# Options, before the command (or CNT_CLUSTER_PREFIX, CNT_CLUSTER_NET):
#   --prefix P   names: namespaces P-hK, bridge Pbr, host links P-vK (default cnt;
#                up to 10 letters, digits or -)
#   --net A.B.C  the /24 the hosts live on: hosts A.B.C.1 .. A.B.C.N, the bridge
#                (where mpirun listens) A.B.C.254 (default 10.77.0)
#
# What `up` makes, and `down` removes: the namespaces (each with lo up and
# eth0, one end of a veth pair whose other end P-vK is a port of the bridge
# Pbr), the bridge with its address, a tbf qdisc on each end of each veth,
# /etc/netns/P-hK/ (the hosts file every host sees: the cluster's names and
# addresses; nothing is added to /etc/hosts) and /run/cnt-cluster/P/ (state
# and the hostfile). Needs root (CAP_NET_ADMIN) and iproute2's `ip netns`;
# it refuses, saying so, without them. Exit status 0, 1 on failure, 2 on a
# usage error.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${CNT_CLUSTER_PREFIX:-cnt}
net=${CNT_CLUSTER_NET:-10.77.0}

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { echo "cluster.sh: $*" >&2; echo "usage: tools/cluster.sh [--prefix P] [--net A.B.C] up N [RATE] | shape RATE | mtu BYTES | down | status | hostfile | mpirun-args [--keepalive off] [--shm] | exec K CMD..." >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
    --prefix) [ $# -ge 2 ] || usage "--prefix needs a value"; prefix=$2; shift 2 ;;
    --net) [ $# -ge 2 ] || usage "--net needs a value"; net=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) usage "unknown option $1" ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || usage "no command"
cmd=$1
shift
# Interface names are at most 15 bytes: "P-v" + 2 digits and "Pbr" fit.
[[ $prefix =~ ^[a-z][a-z0-9-]{0,9}$ ]] || usage "--prefix '$prefix': 1 to 10 of a-z 0-9 -, starting with a letter"
[[ $net =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] && [ "${BASH_REMATCH[1]}" -le 255 ] &&
    [ "${BASH_REMATCH[2]}" -le 255 ] && [ "${BASH_REMATCH[3]}" -le 255 ] ||
    usage "--net '$net': the first three numbers of an IPv4 /24, like 10.77.0"

state=/run/cnt-cluster/$prefix
bridge=${prefix}br
hostfile=$state/hostfile
ns_of() { echo "$prefix-h$1"; }
veth_of() { echo "$prefix-v$1"; }

# Refuse clearly when the rights or tools are missing, before touching anything.
need_rights() {
    [ "$(id -u)" -eq 0 ] || die "needs root (it makes network namespaces, a bridge and tc qdiscs): run it with sudo, or as root"
    command -v ip > /dev/null || die "needs iproute2's ip (apt-get install iproute2)"
    command -v tc > /dev/null || die "needs iproute2's tc (apt-get install iproute2)"
    command -v unshare > /dev/null || die "needs util-linux's unshare (tools/cluster-rsh gives each host its hostname with it)"
    ip netns list > /dev/null 2>&1 || die "'ip netns' does not work here (iproute2 too old, or no network namespace support): $(ip netns list 2>&1 | head -n1)"
}

# The hosts of the running cluster, from its state (N), or none.
count() { if [ -f "$state/n" ]; then cat "$state/n"; else echo 0; fi; }

# A tc rate (100mbit, 1gbit, 500kbit, 10mbps) in bits per second, or fail.
rate_bps() {
    local r=${1,,} num unit
    [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$ ]] || return 1
    num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
    case $unit in
    bit) echo "$num" ;; kbit) echo $((num * 1000)) ;; mbit) echo $((num * 1000000)) ;;
    gbit) echo $((num * 1000000000)) ;; bps) echo $((num * 8)) ;; kbps) echo $((num * 8000)) ;;
    mbps) echo $((num * 8000000)) ;; gbps) echo $((num * 8000000000)) ;;
    esac
}

check_rate() {
    [ "$1" = none ] && return 0
    local bps
    bps=$(rate_bps "$1") || usage "rate '$1': a number and one of bit kbit mbit gbit (bits/s) or bps kbps mbps gbps (bytes/s), like 100mbit, or none"
    [ "$bps" -ge 100000 ] || usage "rate '$1': below 100kbit the job's own control messages crawl; use 100kbit or more"
}

# shape_dev NS DEV RATE: a token bucket on DEV's egress (in namespace NS, or
# the root namespace when NS is empty) at RATE, or no qdisc for `none`. The
# bucket holds 4 ms at RATE (at least 64 KiB, so a TSO/GSO segment fits);
# packets wait up to 100 ms for tokens before tbf drops them, which TCP then
# paces to the rate.
shape_dev() {
    local nsx=() bps burst
    [ -n "$1" ] && nsx=(ip netns exec "$1")
    "${nsx[@]}" tc qdisc del dev "$2" root 2> /dev/null || true
    [ "$3" = none ] && return 0
    bps=$(rate_bps "$3")
    burst=$((bps / 8 / 250))
    [ "$burst" -ge 65536 ] || burst=65536
    "${nsx[@]}" tc qdisc add dev "$2" root tbf rate "$3" burst "$burst" latency 100ms
}

# reachable NS ADDR: whether a TCP connect from namespace NS to ADDR's port 9
# (discard, closed) is refused within 10 s, that is, whether ADDR answers.
reachable() {
    local try
    for ((try = 0; try < 20; try++)); do
        [[ $(ip netns exec "$1" timeout 1 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) == *refused* ]] && return 0
        sleep 0.5
    done
    return 1
}

write_hostfile() {
    local n=$1 i
    {
        echo "# tools/cluster.sh --prefix $prefix --net $net: $n hosts, one slot each"
        for ((i = 0; i < n; i++)); do echo "$(ns_of $i) slots=1"; done
    } > "$hostfile.tmp"
    mv "$hostfile.tmp" "$hostfile"
}

# mpirun_args [off [SHM]]: the options, with the out-of-band keepalive unless
# "off", and shared memory between the ranks of one host when SHM is 1.
mpirun_args() {
    local keepalive="" btl=tcp,self
    # --shm: Open MPI's shared-memory BTL (vader) between ranks of one host,
    # as between the ranks of one real node; ranks of different hosts still
    # talk over TCP on the shaped links (Open MPI tells hosts apart by their
    # daemons: each host's namespace runs its own).
    [ "${2:-0}" = 1 ] && btl=tcp,vader,self
    # oob_tcp_keepalive_*: mpirun and each host's daemon probe their idle
    # connection after 3 s of silence and give the other side up after 3
    # unanswered probes 1 s apart, so a host whose link dies is noticed and
    # the job ended, naming the host, within about 6 s. Without it, mpirun's
    # defaults (300 s + 9 x 20 s) apply, and once the job is being aborted
    # mpirun waits for the unreachable daemon as long as TCP retransmits
    # (docs/multi-node.md, "When a host fails").
    [ "${1:-}" = off ] || keepalive=" --mca oob_tcp_keepalive_time 3 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3"
    # plm_rsh_agent: launch orted onto the hosts through our agent, not ssh.
    # oob/btl_tcp_if_include: the daemons and the ranks talk over the cluster's
    # subnet only (not lo, where every namespace has the same 127.0.0.1).
    # pml ob1 + btl tcp,self: MPI messages go through the TCP BTL (UCX or the
    # shared-memory BTL would bypass the shaped links, the hosts sharing one kernel).
    # routed direct + no tree spawn: every daemon talks to mpirun directly.
    # bind-to none: each host's rank may use any core, as on its own machine.
    echo "--hostfile $hostfile --mca plm_rsh_agent $here/cluster-rsh --mca plm_rsh_no_tree_spawn 1" \
        "--mca routed direct --mca oob_tcp_if_include $net.0/24 --mca pml ob1 --mca btl $btl" \
        "--mca btl_tcp_if_include $net.0/24 --bind-to none$keepalive"
}

cmd_up() {
    [ $# -ge 1 ] && [ $# -le 2 ] || usage "up N [RATE]"
    local n=$1 rate=${2:-none} i ns veth
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 99 ] || usage "up N: N hosts, 1 to 99"
    check_rate "$rate"
    need_rights
    [ ! -e "$state" ] || die "a cluster '$prefix' is already up ($state exists): tools/cluster.sh --prefix $prefix down first, or pick another --prefix"
    ip link show "$bridge" > /dev/null 2>&1 && die "a link named $bridge exists already (left from a cluster whose state is gone?): tools/cluster.sh --prefix $prefix down removes it"
    if ip -4 route show | grep -q "^$net\.0/24 "; then
        die "$net.0/24 is routed here already ($(ip -4 route show | grep "^$net\.0/24 " | head -n1)): pick another --net"
    fi
    # On any failure from here (set -e, die), undo what was made.
    trap 'echo "cluster.sh: up failed; removing what it made" >&2; cmd_down > /dev/null 2>&1 || true' EXIT
    mkdir -p "$state"
    echo "$net" > "$state/net"
    echo "$rate" > "$state/rate"
    ip link add "$bridge" type bridge
    ip addr add "$net.254/24" dev "$bridge"
    ip link set "$bridge" up
    for ((i = 0; i < n; i++)); do
        ns=$(ns_of $i) veth=$(veth_of $i)
        ip netns add "$ns"
        echo $((i + 1)) > "$state/n" # what down must remove, as soon as it exists
        ip link add "$veth" type veth peer name "$veth-p"
        ip link set "$veth-p" netns "$ns"
        ip -n "$ns" link set "$veth-p" name eth0
        ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
        ip link set "$veth" master "$bridge"
        ip link set "$veth" up
        shape_dev "" "$veth" "$rate"
        shape_dev "$ns" eth0 "$rate"
    done
    # Every host resolves every host's name (ip netns exec puts this file over
    # /etc/hosts in the host's namespace), and mpirun's host by "$prefix-mpirun".
    {
        printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
        printf '%s\t%s\n' "$net.254" "$prefix-mpirun"
        for ((i = 0; i < n; i++)); do printf '%s\t%s\n' "$net.$((i + 1))" "$(ns_of $i)"; done
    } > "$state/hosts"
    for ((i = 0; i < n; i++)); do
        mkdir -p "/etc/netns/$(ns_of $i)"
        cp "$state/hosts" "/etc/netns/$(ns_of $i)/hosts"
    done
    write_hostfile "$n"
    # The hosts must reach mpirun's address before mpirun tries: a TCP connect
    # to a closed port of the bridge's address is refused at once when the
    # path works (no ping needed), and hangs when it does not. A new bridge
    # port forwards after a moment, so try for up to 10 s.
    for ((i = 0; i < n; i++)); do
        reachable "$(ns_of $i)" "$net.254" ||
            die "host $(ns_of $i) cannot reach the bridge at $net.254 (a firewall on bridged traffic? see ip link show $bridge, tools/cluster.sh status)"
    done
    trap - EXIT
    echo "cluster '$prefix': $n hosts $(ns_of 0)..$(ns_of $((n - 1))) at $net.1..$net.$n, links $rate, mpirun's side $net.254"
    echo "hostfile: $hostfile"
    echo "run:      mpirun --allow-run-as-root $(mpirun_args) -np $n ./trainer ..."
}

cmd_shape() {
    [ $# -eq 1 ] || usage "shape RATE"
    check_rate "$1"
    need_rights
    local n i
    n=$(count)
    [ "$n" -ge 1 ] || die "no cluster '$prefix' is up (tools/cluster.sh --prefix $prefix up N first)"
    for ((i = 0; i < n; i++)); do
        shape_dev "" "$(veth_of $i)" "$1"
        shape_dev "$(ns_of $i)" eth0 "$1"
    done
    echo "$1" > "$state/rate"
    echo "cluster '$prefix': $n links shaped to $1"
}

# The MTU of every link (both veth ends) and of the bridge. Why: TCP's
# headers and the Ethernet header cost 66 of every 1514 bytes on the wire at
# 1500 (what tbf counts), so no transfer can move more than 95.6% of the
# shaped rate as data; data networks often use jumbo frames (9000: 99.3%).
cmd_mtu() {
    [ $# -eq 1 ] || usage "mtu BYTES"
    [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1280 ] && [ "$1" -le 9000 ] || usage "mtu '$1': 1280 to 9000 bytes"
    need_rights
    local n i
    n=$(count)
    [ "$n" -ge 1 ] || die "no cluster '$prefix' is up (tools/cluster.sh --prefix $prefix up N first)"
    # the bridge takes the smallest of its ports' MTUs: raise the ports first, then set it
    for ((i = 0; i < n; i++)); do
        ip link set "$(veth_of $i)" mtu "$1"
        ip -n "$(ns_of $i)" link set eth0 mtu "$1"
    done
    ip link set "$bridge" mtu "$1"
    echo "cluster '$prefix': $n links and the bridge at MTU $1"
}

# Removes whatever exists of the cluster, by name, so it also clears what a
# failed `up` or a lost state directory left.
cmd_down() {
    [ $# -eq 0 ] || usage "down takes no arguments"
    need_rights
    local ns pids left=0 l
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^$prefix-h[0-9]+$" || true); do
        # Whatever still runs on the host (a rank, an orted) ends first: a
        # namespace's interfaces stay while a process holds it.
        pids=$(ip netns pids "$ns" 2> /dev/null || true)
        if [ -n "$pids" ]; then
            echo "cluster.sh: killing what still runs on $ns: $(ps -o pid=,comm= -p $pids | awk '{printf "%s %s, ", $1, $2}' | sed 's/, $//')" >&2
            kill -KILL $pids 2> /dev/null || true
        fi
        ip netns delete "$ns"
    done
    for l in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$prefix-v[0-9]+$" || true); do
        ip link delete "$l" 2> /dev/null || true # gone with its namespace peer, usually
    done
    if ip link show "$bridge" > /dev/null 2>&1; then ip link delete "$bridge"; fi
    rm -rf /etc/netns/"$prefix"-h[0-9]* "$state"
    # The parent folders too, once empty (no other cluster, no other netns
    # with its own /etc files): ip netns needs neither.
    rmdir /run/cnt-cluster /etc/netns 2> /dev/null || true
    # Say so if anything survived.
    ip netns list | grep -qE "^$prefix-h[0-9]+( |$)" && { echo "cluster.sh: namespaces left: $(ip netns list | grep -E "^$prefix-h")" >&2; left=1; }
    ip link show "$bridge" > /dev/null 2>&1 && { echo "cluster.sh: bridge $bridge left" >&2; left=1; }
    [ "$left" -eq 0 ] || die "down did not remove everything (see above)"
    echo "cluster '$prefix': down"
}

cmd_status() {
    local n i ns
    n=$(count)
    if [ "$n" -eq 0 ]; then echo "cluster '$prefix': not up"; return 0; fi
    echo "cluster '$prefix': $n hosts on $(cat "$state/net").0/24, links $(cat "$state/rate"), hostfile $hostfile"
    for ((i = 0; i < n; i++)); do
        ns=$(ns_of $i)
        printf '%s  %s  %s  %s  procs %s\n' "$ns" \
            "$(ip -n "$ns" -4 -o addr show dev eth0 2> /dev/null | awk '{print $4}')" \
            "$(ip -n "$ns" -o link show dev eth0 2> /dev/null | grep -o 'mtu [0-9]*')" \
            "$(ip -n "$ns" -o link show dev eth0 2> /dev/null | grep -o 'state [A-Z]*')" \
            "$(ip netns pids "$ns" 2> /dev/null | wc -l)"
        tc qdisc show dev "$(veth_of $i)" | sed 's/^/    to host:   /'
        ip netns exec "$ns" tc qdisc show dev eth0 | sed 's/^/    from host: /'
    done
}

case $cmd in
up) cmd_up "$@" ;;
shape) cmd_shape "$@" ;;
mtu) cmd_mtu "$@" ;;
down) cmd_down "$@" ;;
status) need_rights; cmd_status ;;
hostfile) [ -f "$hostfile" ] || die "no cluster '$prefix' is up"; echo "$hostfile" ;;
mpirun-args)
    ka=on shm=0
    while [ $# -gt 0 ]; do
        case $1 in
        --keepalive) [ "${2:-}" = off ] || [ "${2:-}" = on ] || usage "mpirun-args --keepalive on|off"; ka=$2; shift 2 ;;
        --shm) shm=1; shift ;;
        *) usage "mpirun-args [--keepalive on|off] [--shm]" ;;
        esac
    done
    [ -f "$state/net" ] || die "no cluster '$prefix' is up (tools/cluster.sh --prefix $prefix up N first)"
    net=$(cat "$state/net")
    mpirun_args "$ka" "$shm"
    ;;
exec)
    [ $# -ge 2 ] || usage "exec K CMD..."
    need_rights
    [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -lt "$(count)" ] || die "exec: no host $1 in cluster '$prefix' (hosts 0..$(($(count) - 1)))"
    k=$1
    shift
    exec ip netns exec "$(ns_of "$k")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$(ns_of "$k")" "$@"
    ;;
*) usage "unknown command '$cmd'" ;;
esac
