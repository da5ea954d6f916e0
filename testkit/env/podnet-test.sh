#!/usr/bin/env bash
# The test of testkit/env/podnet.sh, with real traffic and no Kubernetes: runs as root on
# its own (nothing else of the local environment needs to be up).
#
#   sudo testkit/env/podnet-test.sh
#
# It takes the pod network down first (so do not run it while an environment uses it),
# brings it up, makes pods a and b on node 1 and pod c on node 2, and proves:
#   - pod to pod on one node and across nodes, pod to the host's 10.255.0.1, host to pod
#     (TCP, each server answering with the address it saw the client come from, so no
#     address translation hides in the path; and HTTP with curl), also with strict
#     reverse-path filtering (rp_filter=1) in eo-net and in the pods;
#   - a process that joins a pod's namespace by its path (nsenter --net=PATH, as the node
#     will with setns(2)) sees lo and eth0 only, with the pod's address and route;
#   - a service address DNATed in eo-net to a pod on the same bridge (what kube-proxy will
#     program) answers with the service address and the client's own source address;
#   - up refuses a host that routes part of the pod range elsewhere (played in throwaway
#     namespaces); add-pod gives the same answer for the same key, refuses the key on
#     another node, does not hand a freed address out again at once, and gives distinct
#     addresses to concurrent calls; del-pod removes the veth even while a process is still inside,
#     frees the namespace for processes in other mount namespaces, and can be repeated;
#   - after down (also after the allocation records were lost), the host's links,
#     addresses, routes, rules, namespaces, mounts of /run/netns, iptables and nftables
#     rulesets and network sysctls are exactly as before up.
# Traffic goes only to the 10.244.0.0/16, 10.96.0.10 and 10.255.0.1 addresses made here.
# On any failure it says which check failed and exits non-zero; on exit it stops the
# processes it started (by pid) and takes the pod network down.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PODNET="$ROOT/testkit/env/podnet.sh"
HOST_ADDR=10.255.0.1
GATEWAY=10.244.0.1
SERVICE_ADDR=10.96.0.10
ECHO_PORT=7000 # inside pod namespaces, so no clash with anything on the host
HTTP_PORT=8080

[[ $(id -u) == 0 ]] || { echo "podnet-test: needs root" >&2; exit 1; }
WORK=$(mktemp -d /tmp/podnet-test.XXXXXX)
export PODNET_DIR="$WORK/podnet"
PIDS=()   # every background process this test started
CHECKS=0

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { CHECKS=$((CHECKS + 1)); echo "ok   $*"; }

cleanup() {
    local rc=$? pid
    trap - EXIT
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    bash "$PODNET" down 2>/dev/null || echo "podnet-test: cleanup: podnet.sh down failed" >&2
    rm -rf "$WORK"
    if ((rc != 0)); then echo "podnet-test: FAILED" >&2; fi
    exit "$rc"
}
trap cleanup EXIT

podnet() { bash "$PODNET" "$@"; }

# run_in NETNS_PATH|"" CMD...: CMD in that network namespace ("" = the root namespace).
run_in() {
    local ns=$1
    shift
    if [[ -n $ns ]]; then nsenter --net="$ns" "$@"; else "$@"; fi
}

# What the host looks like, for the before/after comparison.
snapshot() {
    echo "## ip link"; ip -o link show
    echo "## ip addr"; ip -o addr show
    echo "## ip route (all tables, v4 and v6)"; ip route show table all; ip -6 route show table all
    echo "## ip rule"; ip rule show
    echo "## ip netns"; ip netns list
    echo "## ls /run/netns"; if [[ -d /run/netns ]]; then ls -A /run/netns; else echo "(absent)"; fi
    echo "## eo-* in /run"; ls -d /run/eo-* 2>/dev/null || true
    echo "## mounts of namespaces"; awk '$5 ~ /^\/run\/netns/ || $9 == "nsfs" { $1 = $2 = ""; print }' /proc/self/mountinfo
    echo "## iptables-save"; iptables-save | grep -v '^#' || true
    echo "## ip6tables-save"; ip6tables-save | grep -v '^#' || true
    echo "## nft list ruleset"; nft list ruleset
    echo "## sysctls"; sysctl net.ipv4.ip_forward net.ipv4.conf.all.rp_filter net.ipv4.conf.default.rp_filter
    cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo "no br_netfilter"
}

# same_as_before WHAT: the host is as in $WORK/before, else fail showing the difference.
same_as_before() {
    snapshot >"$WORK/after"
    diff -u "$WORK/before" "$WORK/after" >&2 || fail "$1: the host differs from before up (diff above)"
    pass "$1"
}

# ---------------------------------------------------------------------------
# Servers and clients
# ---------------------------------------------------------------------------

# The echo server: answers every connection with "ADDR saw PEER"; writes its port to
# READY_FILE once it listens.
cat >"$WORK/echo_server.py" <<'EOF'
import socket, sys
addr, port, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port))
s.listen(64)
with open(ready, "w") as f:
    f.write(str(s.getsockname()[1]))
while True:
    c, peer = s.accept()
    with c:
        c.sendall(("%s saw %s\n" % (addr, peer[0])).encode())
EOF
# The client: prints the server's line.
cat >"$WORK/echo_client.py" <<'EOF'
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(c.makefile().readline().strip())
EOF

# start_echo NETNS_PATH|"" ADDR PORT: an echo server there; sets ECHO_PID and LISTEN_PORT.
start_echo() {
    local ready="$WORK/ready.$RANDOM$RANDOM" i
    # Not through run_in: $! must be the server itself (nsenter execs it), so that its pid
    # is the one to stop and /proc/PID/ns/net is the pod's namespace.
    if [[ -n $1 ]]; then
        nsenter --net="$1" python3 "$WORK/echo_server.py" "$2" "$3" "$ready" >>"$WORK/servers.log" 2>&1 &
    else
        python3 "$WORK/echo_server.py" "$2" "$3" "$ready" >>"$WORK/servers.log" 2>&1 &
    fi
    ECHO_PID=$!
    PIDS+=("$ECHO_PID")
    for ((i = 0; i < 100; i++)); do
        [[ -s $ready ]] && break
        kill -0 "$ECHO_PID" 2>/dev/null || fail "echo server on $2 exited: $(tail -3 "$WORK/servers.log")"
        sleep 0.1
    done
    [[ -s $ready ]] || fail "echo server on $2 does not listen"
    LISTEN_PORT=$(<"$ready")
}

# expect_echo CHECK FROM_NETNS|"" ADDR PORT EXPECTED
expect_echo() {
    local got
    got=$(run_in "$2" timeout 10 python3 "$WORK/echo_client.py" "$3" "$4" 2>&1) || fail "$1: no answer from $3:$4: $got"
    [[ $got == "$5" ]] || fail "$1: expected '$5', got '$got'"
    pass "$1 ($got)"
}

# expect_no_echo CHECK FROM_NETNS ADDR PORT: the connection fails.
expect_no_echo() {
    local got
    if got=$(run_in "$2" timeout 10 python3 "$WORK/echo_client.py" "$3" "$4" 2>&1); then
        fail "$1: $3:$4 still answers: $got"
    fi
    pass "$1"
}

# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------

# The state of eo-net and of the host's side, to compare two `up`s.
net_state() {
    ip -n eo-net -br addr show
    ip -n eo-net route show
    ip -n eo-net -d link show eo-br0 | grep -o 'nf_call_iptables [01]'
    ip -br addr show dev eo-host
    ip route show dev eo-host
    ls /run/netns
}

check_up() {
    podnet down
    snapshot >"$WORK/before"
    ROOT_FORWARD=$(sysctl -n net.ipv4.ip_forward)
    podnet up
    net_state >"$WORK/up1"
    podnet up
    net_state >"$WORK/up2"
    diff -u "$WORK/up1" "$WORK/up2" >&2 || fail "up twice: the second changed something"
    pass "up is idempotent"
    [[ $(ip netns exec eo-net sysctl -n net.ipv4.ip_forward) == 1 ]] || fail "ip_forward is not 1 in eo-net"
    [[ $(sysctl -n net.ipv4.ip_forward) == "$ROOT_FORWARD" ]] || fail "the root namespace's ip_forward changed"
    pass "forwarding on in eo-net only (root namespace: $ROOT_FORWARD)"
}

# up on a host that routes part of the pod range elsewhere: refused, nothing made. Played
# in a throwaway network and mount namespace (its own /run), not on this host.
check_refuses_clash() {
    local out
    # shellcheck disable=SC2016 # expanded by the inner bash, from its arguments
    out=$(unshare --net --mount bash -c '
        mount -t tmpfs podnet-test /run
        ip link add clash0 type veth peer name clash1
        ip addr add 10.244.5.1/24 dev clash0
        if PODNET_DIR="$1" bash "$2" up 2>&1; then echo "UP SUCCEEDED"; fi
        ls -A /run' _ "$WORK/clash" "$PODNET") || true
    [[ $out == *"already routes inside 10.244.0.0/16"* && $out != *"UP SUCCEEDED"* ]] ||
        fail "up on a host routing 10.244.5.0/24 elsewhere was not refused: $out"
    [[ $out != *netns* && $out != *eo-podnet* ]] || fail "the refused up made something: $out"
    pass "up refuses a host that already routes inside the pod range"
}

# add POD NODE KEY: the pod on that node; sets NS_<POD> and IP_<POD>.
add() {
    local out ns ip
    out=$(podnet add-pod "$2" "$3") || fail "add-pod $2 $3 failed"
    read -r ns ip <<<"$out"
    [[ $ns =~ ^/run/netns/eo-$2-[0-9a-f]{10}$ && -e $ns ]] || fail "add-pod $2 $3: bad namespace '$ns'"
    if ! [[ $ip =~ ^10\.244\.$2\.([0-9]+)$ ]] || ((BASH_REMATCH[1] < 2 || BASH_REMATCH[1] > 254)); then
        fail "add-pod $2 $3: '$ip' is not a pod address of node $2"
    fi
    printf -v "NS_$1" '%s' "$ns"
    printf -v "IP_$1" '%s' "$ip"
}

check_add() {
    add A 1 test/pod-a
    add B 1 test/pod-b
    add C 2 test/pod-c
    [[ $IP_A != "$IP_B" && $NS_A != "$NS_B" ]] || fail "pods a and b share an address or a namespace"
    pass "add-pod: a $IP_A and b $IP_B on node 1, c $IP_C on node 2"
    [[ $(podnet add-pod 1 test/pod-a) == "$NS_A $IP_A" ]] || fail "add-pod again: another answer for pod a"
    pass "add-pod with the same key gives the same namespace and address"
    if podnet add-pod 2 test/pod-a 2>/dev/null; then fail "add-pod accepted pod a on a second node"; fi
    pass "add-pod refuses a key that is on another node"
}

check_joined_view() {
    local names addrs route ifs mtus mac
    names=$(nsenter --net="$NS_A" ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | xargs)
    [[ $names == "lo eth0" ]] || fail "nsenter into pod a: links are '$names', not 'lo eth0'"
    addrs=$(nsenter --net="$NS_A" ip -o -4 addr show | awk '{ print $2, $4 }' | xargs)
    [[ $addrs == "lo 127.0.0.1/8 eth0 $IP_A/16" ]] || fail "nsenter into pod a: addresses '$addrs'"
    route=$(nsenter --net="$NS_A" ip route show default)
    [[ $route == "default via $GATEWAY dev eth0 "* ]] || fail "nsenter into pod a: default route '$route'"
    # Not only ip: any program sees the same (Python asks the kernel for its interfaces).
    ifs=$(nsenter --net="$NS_A" python3 -c 'import socket; print(*sorted(n for _, n in socket.if_nameindex()))')
    [[ $ifs == "eth0 lo" ]] || fail "nsenter into pod a: python sees '$ifs'"
    pass "a process joined by nsenter --net=$NS_A sees lo and eth0 ($IP_A/16, default via $GATEWAY)"
    mac=$(nsenter --net="$NS_A" ip -o link show eth0 | grep -o 'link/ether [0-9a-f:]*')
    [[ $mac == "link/ether $(printf '02:65:6f:00:%02x:%02x' "$(cut -d. -f3 <<<"$IP_A")" "$(cut -d. -f4 <<<"$IP_A")")" ]] ||
        fail "pod a's MAC ($mac) is not derived from its address"
    pass "pod a's MAC is derived from its address"
    mtus=$({ ip -o link show eo-host; ip -n eo-net -o link show; ip -n "${NS_A##*/}" -o link show eth0; } |
        grep -v ': lo:' | grep -o 'mtu [0-9]*' | sort -u | xargs)
    [[ $mtus == "mtu 1500" ]] || fail "links of the pod network differ in MTU: $mtus"
    pass "every link of the pod network has MTU 1500"
}

start_servers() {
    mkdir -p "$WORK/www"
    echo "pod c over http" >"$WORK/www/pod-c.txt"
    start_echo "$NS_A" "$IP_A" "$ECHO_PORT"
    start_echo "$NS_B" "$IP_B" "$ECHO_PORT"
    PID_B=$ECHO_PID
    start_echo "$NS_C" "$IP_C" "$ECHO_PORT"
    start_echo "" "$HOST_ADDR" 0
    HOST_PORT=$LISTEN_PORT
    nsenter --net="$NS_C" python3 -m http.server --bind "$IP_C" --directory "$WORK/www" "$HTTP_PORT" \
        >>"$WORK/servers.log" 2>&1 &
    PIDS+=("$!")
    local i
    for ((i = 0; i < 100; i++)); do
        nsenter --net="$NS_C" curl --noproxy '*' -fsS -o /dev/null "http://$IP_C:$HTTP_PORT/" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "the HTTP server in pod c does not answer inside its own namespace"
}

# check_traffic LABEL: every path once.
check_traffic() {
    local l=$1 got
    expect_echo "$l pod a -> pod b (same node)" "$NS_A" "$IP_B" "$ECHO_PORT" "$IP_B saw $IP_A"
    expect_echo "$l pod b -> pod a (same node)" "$NS_B" "$IP_A" "$ECHO_PORT" "$IP_A saw $IP_B"
    expect_echo "$l pod a -> pod c (across nodes)" "$NS_A" "$IP_C" "$ECHO_PORT" "$IP_C saw $IP_A"
    expect_echo "$l pod c -> pod b (across nodes)" "$NS_C" "$IP_B" "$ECHO_PORT" "$IP_B saw $IP_C"
    expect_echo "$l pod a -> host" "$NS_A" "$HOST_ADDR" "$HOST_PORT" "$HOST_ADDR saw $IP_A"
    expect_echo "$l pod c -> host" "$NS_C" "$HOST_ADDR" "$HOST_PORT" "$HOST_ADDR saw $IP_C"
    expect_echo "$l host -> pod a" "" "$IP_A" "$ECHO_PORT" "$IP_A saw $HOST_ADDR"
    expect_echo "$l host -> pod c" "" "$IP_C" "$ECHO_PORT" "$IP_C saw $HOST_ADDR"
    got=$(curl --noproxy '*' -fsS --max-time 10 "http://$IP_C:$HTTP_PORT/pod-c.txt") || fail "$l host -> pod c: curl failed"
    [[ $got == "pod c over http" ]] || fail "$l host -> pod c: curl got '$got'"
    pass "$l host -> pod c over HTTP (curl)"
    got=$(nsenter --net="$NS_A" curl --noproxy '*' -fsS --max-time 10 "http://$IP_C:$HTTP_PORT/pod-c.txt") ||
        fail "$l pod a -> pod c: curl failed"
    [[ $got == "pod c over http" ]] || fail "$l pod a -> pod c: curl got '$got'"
    pass "$l pod a -> pod c over HTTP (curl)"
}

# Strict reverse-path filtering (the effective value is the larger of conf.all and the
# interface's) in eo-net and in the pods; the root namespace's is not ours to change.
check_strict_rp_filter() {
    local ns
    for ns in /run/netns/eo-net "$NS_A" "$NS_B" "$NS_C"; do
        nsenter --net="$ns" sysctl -qw net.ipv4.conf.all.rp_filter=1
    done
    [[ $(nsenter --net="$NS_A" sysctl -n net.ipv4.conf.all.rp_filter) == 1 ]] || fail "rp_filter=1 did not take in pod a"
    check_traffic "[rp_filter=1]"
}

# A ClusterIP as kube-proxy will make it: a DNAT in eo-net from $SERVICE_ADDR:80 to pod b.
check_service_dnat() {
    ip netns exec eo-net nft -f - <<EOF
table ip eo-test-svc {
    chain prerouting {
        type nat hook prerouting priority dstnat; policy accept;
        ip daddr $SERVICE_ADDR tcp dport 80 dnat to $IP_B:$ECHO_PORT
    }
}
EOF
    # Pod a and pod b share the bridge: b's answer is bridged straight back to a, and only
    # the bridge's netfilter call undoes the DNAT on it (a would otherwise drop it).
    expect_echo "service address -> pod on the same bridge, source kept" "$NS_A" "$SERVICE_ADDR" 80 "$IP_B saw $IP_A"
    expect_echo "service address -> pod on the same bridge, from pod c" "$NS_C" "$SERVICE_ADDR" 80 "$IP_B saw $IP_C"
    expect_echo "service address from the host" "" "$SERVICE_ADDR" 80 "$IP_B saw $HOST_ADDR"
    ip netns exec eo-net nft delete table ip eo-test-svc
}

# del-pod while pod b's server still runs inside it, with a process of pod c in its own
# mount namespace (made while b existed, so it holds a copy of b's /run/netns mount).
check_del_pod() {
    local inode hash sleeper names
    inode=$(stat -L -c %i "$NS_B")
    hash=${NS_B##*-}
    nsenter --net="$NS_C" unshare --mount --propagation private sleep 600 &
    sleeper=$!
    PIDS+=("$sleeper")
    for _ in $(seq 50); do grep -q "net:\[$inode\]" "/proc/$sleeper/mountinfo" 2>/dev/null && break; sleep 0.1; done
    grep -q "net:\[$inode\]" "/proc/$sleeper/mountinfo" || fail "the mount namespace of the sleeper does not show pod b's namespace"
    podnet del-pod test/pod-b
    [[ ! -e $NS_B ]] || fail "del-pod: $NS_B is still there"
    if ip -n eo-net link show "eo-p$hash" >/dev/null 2>&1; then fail "del-pod: eo-p$hash is still on the bridge"; fi
    names=$(nsenter --net="/proc/$PID_B/ns/net" ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | xargs)
    [[ $names == "lo" ]] || fail "del-pod: the process left in pod b's namespace still has '$names'"
    pass "del-pod removes the veth even while a process is still inside (it keeps lo only)"
    if grep -q "net:\[$inode\]" "/proc/$sleeper/mountinfo"; then
        fail "del-pod: a process in another mount namespace still holds pod b's namespace mount"
    fi
    pass "del-pod frees pod b's namespace mount in other mount namespaces too"
    expect_no_echo "pod b's address no longer answers" "$NS_A" "$IP_B" "$ECHO_PORT"
    podnet del-pod test/pod-b || fail "del-pod a second time failed"
    podnet del-pod test/never-added || fail "del-pod of an unknown key failed"
    pass "del-pod is idempotent"
    local old=$IP_B
    add B 1 test/pod-b
    [[ $IP_B != "$old" ]] || fail "add-pod gave pod b's freed address $old out again at once"
    pass "a freed address is not handed out again at once ($old, now $IP_B)"
    podnet del-pod test/pod-b
}

check_concurrent_add() {
    local i pids=() outs
    for i in $(seq 12); do
        podnet add-pod 3 "test/par-$i" >"$WORK/par.$i" &
        pids+=("$!")
    done
    for i in "${pids[@]}"; do wait "$i" || fail "a concurrent add-pod failed"; done
    outs=$(cat "$WORK"/par.*)
    [[ $(awk '{ print $2 }' <<<"$outs" | sort -u | wc -l) == 12 ]] || fail "concurrent add-pod: addresses collide: $outs"
    [[ $(awk '{ print $1 }' <<<"$outs" | sort -u | wc -l) == 12 ]] || fail "concurrent add-pod: namespaces collide"
    pass "12 concurrent add-pod calls get 12 distinct addresses and namespaces"
    pids=()
    for i in $(seq 12); do podnet del-pod "test/par-$i" & pids+=("$!"); done
    for i in "${pids[@]}"; do wait "$i" || fail "a concurrent del-pod failed"; done
    if compgen -G '/run/netns/eo-3-*' >/dev/null; then fail "concurrent del-pod left namespaces of node 3"; fi
    pass "12 concurrent del-pod calls remove them all"
}

stop_servers() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
}

check_down() {
    podnet down
    podnet down
    same_as_before "down (twice) leaves the host as before up"
    # A crash: the allocation records are lost; down still finds everything by name.
    podnet up
    add A 1 test/pod-a
    add C 2 test/pod-c
    rm -rf "$PODNET_DIR"
    podnet down
    same_as_before "down after the records were lost leaves the host as before up"
}

check_up
check_refuses_clash
check_add
check_joined_view
start_servers
check_traffic "[defaults]"
check_strict_rp_filter
check_service_dnat
check_del_pod
check_concurrent_add
stop_servers
check_down
echo "podnet-test: all $CHECKS checks passed"
