#!/usr/bin/env bash
# The pod network of the local environment: what a CNI bridge plugin would set up on a
# node, built with iproute2 inside network namespaces this script makes, so that the
# host's own configuration only gains one veth link and two routes to private ranges.
#
#   root namespace (the host)           eo-net (the "cluster" namespace)        pod namespaces
#   eo-host 10.255.0.1/30  <-- veth --> eo-uplink 10.255.0.2/30
#   10.244.0.0/16 via 10.255.0.2        eo-br0 10.244.0.1/16 (bridge)            /run/netns/eo-<node>-<hash>
#   10.96.0.0/12  via 10.255.0.2          +- eo-p<hash> <------- veth ------->   eth0 10.244.<node>.<n>/16
#                                          +- ...                                 default via 10.244.0.1
#                                       net.ipv4.ip_forward=1 (here only)
#
# - eo-net routes between the bridge (pods) and the uplink (host): a pod reaches the host
#   at 10.255.0.1 (where the API server is to listen), the host reaches every pod. The
#   root namespace forwards nothing: its traffic to pods leaves through eo-host, and
#   nothing is forwarded on its behalf, so none of its sysctls is changed.
# - Every pod has its own namespace, named after its node and a hash of its key, with a
#   veth pair: eth0 inside (prefix /16, so every pod is on the same link as every other,
#   whatever its node) and eo-p<hash> attached to eo-br0. A node i (0-255) hands out the
#   addresses 10.244.i.2 to 10.244.i.254 of its /24, round-robin (the one after the last
#   given, wrapping), so a freed address is not given again at once; .0, .1 and .255
#   never go to a pod (10.244.0.1 is the gateway). A pod's MAC is 02:65:6f:00 followed by
#   the last two bytes of its address, so a reused address keeps its MAC (no stale ARP);
#   the bridge's MAC is fixed the same way (02:65:6f:00:00:01), or it would change as
#   ports come and go.
# - 10.96.0.0/12 (the ClusterIPs) is routed to eo-net as well, where kube-proxy is meant
#   to program them; nothing answers there yet.
# - Namespaces are files under /run/netns (made by ip netns), so a process joins one by
#   path: nsenter --net=/run/netns/NAME, or setns(2) on an open descriptor of that file.
#
# Usage: testkit/env/podnet.sh up|add-pod NODE_INDEX POD_KEY|del-pod POD_KEY|down|status
#
#   up                       make eo-net, the bridge, the uplink pair and the routes
#                            (whatever is missing; a no-op when all exist)
#   add-pod NODE_INDEX KEY   a namespace and address for the pod KEY (any string without a
#                            newline, unique in the cluster, e.g. its UID) on node
#                            NODE_INDEX; prints "NETNS_PATH IP". The same KEY again prints
#                            the same answer (and repairs what is missing).
#   del-pod KEY              removes the pod's veth and namespace (nothing to do is fine)
#   down                     removes every eo-* namespace under /run/netns, every eo-* link
#                            of the root namespace and of eo-net, the routes, and the
#                            allocation records; works from names alone after a crash
#   status                   what exists
#
# Allocation records live in PODNET_DIR (default $LOCAL_ENV_DIR/podnet, LOCAL_ENV_DIR
# default /tmp/etcd-operator-local), one file per pod, under a lock (flock) so that
# concurrent calls do not collide. The lock covers the records only: a pod's namespace and
# veth (names of its own) are made and removed outside it, so that one node's slow
# `ip netns del` does not hold up another pod's start (an address is free for another pod
# only once its record is gone, after its veth). When /run/netns did not exist, `up` says so in
# /run/eo-podnet.netns-dir (ip netns leaves /run/netns behind as a bind mount of itself),
# and `down` removes both once no namespace is left in it.
#
# Nothing here touches a link, route, namespace or rule whose name or address is not one
# of the above; `up` refuses to start when a route or address of the host lies inside
# 10.244.0.0/16, 10.96.0.0/12 or 10.255.0.0/30.
set -euo pipefail

LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
PODNET_DIR=${PODNET_DIR:-$LOCAL_ENV_DIR/podnet}
PODS_DIR="$PODNET_DIR/pods" # <hash>: node, namespace, address and key of one pod
LOCK="$PODNET_DIR/lock"

NETNS_DIR=/run/netns
NETNS_DIR_MARKER=/run/eo-podnet.netns-dir
NET_NS=eo-net
BRIDGE=eo-br0
BRIDGE_MAC=02:65:6f:00:00:01
HOST_LINK=eo-host
UPLINK=eo-uplink
HOST_ADDR=10.255.0.1
UPLINK_ADDR=10.255.0.2
LINK_NET=10.255.0.0/30
GATEWAY=10.244.0.1
POD_NET=10.244.0.0/16
SERVICE_NET=10.96.0.0/12
MTU=1500

log() { printf '[podnet] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------------------
# Small predicates
# ---------------------------------------------------------------------------

# True when /run/netns/$1 is a live namespace (a bind mount of nsfs, not a stale file).
netns_exists() { mountpoint -q "$NETNS_DIR/$1" 2>/dev/null; }

# link_exists NETNS|"" NAME: the link NAME exists in that namespace ("" = root).
link_exists() {
    if [[ -n $1 ]]; then
        ip -n "$1" link show dev "$2" >/dev/null 2>&1
    else
        ip link show dev "$2" >/dev/null 2>&1
    fi
}

# Every namespace name under /run/netns with our prefix, one per line.
our_netns() {
    local f
    [[ -d $NETNS_DIR ]] || return 0
    for f in "$NETNS_DIR"/eo-*; do
        [[ -e $f ]] && basename "$f"
    done
    return 0
}

# our_links NETNS|"": names of the links with our prefix in that namespace ("" = root).
our_links() {
    local out
    if [[ -n $1 ]]; then out=$(ip -n "$1" -o link show); else out=$(ip -o link show); fi
    # "7: eo-host@if6: <...": the name is the second field, up to an @ or the colon.
    awk -F': ' '{ sub(/@.*/, "", $2); if ($2 ~ /^eo-/) print $2 }' <<<"$out"
}

# Take the allocation lock (held until unlock or the script's exit).
lock() {
    mkdir -p "$PODS_DIR"
    exec 9>>"$LOCK"
    flock 9
}

# Release the allocation lock.
unlock() { exec 9>&-; }

# ---------------------------------------------------------------------------
# up
# ---------------------------------------------------------------------------

# Refuse when the host already uses part of one of our ranges (anything not on eo-host).
require_free_range() {
    local range=$1 clash
    clash=$(ip -o route show table all root "$range" | grep -v " dev $HOST_LINK\( \|$\)" || true)
    [[ -z $clash ]] || die "the host already routes inside $range, not touching it: $clash"
}

# make_netns NAME: the namespace NAME with lo up (kept when it exists).
make_netns() {
    local name=$1
    if ! netns_exists "$name"; then
        if [[ ! -d $NETNS_DIR && ! -e $NETNS_DIR_MARKER ]]; then
            : >"$NETNS_DIR_MARKER"
        fi
        # A file left without its mount (a crash between mount and unlink) blocks ip netns add.
        rm -f "${NETNS_DIR:?}/$name"
        ip netns add "$name"
    fi
    ip -n "$name" link set lo up
}

# eo-net with its bridge and forwarding.
up_cluster_ns() {
    make_netns "$NET_NS"
    ip netns exec "$NET_NS" sysctl -qw net.ipv4.ip_forward=1
    if ! link_exists "$NET_NS" "$BRIDGE"; then
        ip -n "$NET_NS" link add "$BRIDGE" address "$BRIDGE_MAC" mtu "$MTU" \
            type bridge stp_state 0 forward_delay 0
    fi
    # Bridged IPv4 (pod to pod) through eo-net's netfilter hooks, whatever eo-net's
    # net.bridge.bridge-nf-call-iptables says: without it, the reply of a pod to another on
    # the same bridge, reached through a ClusterIP, skips conntrack and the client never
    # sees the service address answer (see the README). Inert where br_netfilter is absent.
    ip -n "$NET_NS" link set "$BRIDGE" type bridge nf_call_iptables 1
    ip -n "$NET_NS" addr replace "$GATEWAY/16" dev "$BRIDGE"
    ip -n "$NET_NS" link set "$BRIDGE" up
}

# The veth pair between the root namespace and eo-net, and the host's routes through it.
up_uplink() {
    if link_exists "" "$HOST_LINK" && ! link_exists "$NET_NS" "$UPLINK"; then
        # Its peer is not in eo-net (eo-net was remade): a pair of ours to make again.
        ip link del "$HOST_LINK"
    fi
    if ! link_exists "" "$HOST_LINK"; then
        ip link add "$HOST_LINK" mtu "$MTU" type veth peer name "$UPLINK" mtu "$MTU" netns "$NET_NS"
    fi
    ip addr replace "$HOST_ADDR/30" dev "$HOST_LINK"
    ip link set "$HOST_LINK" up
    ip -n "$NET_NS" addr replace "$UPLINK_ADDR/30" dev "$UPLINK"
    ip -n "$NET_NS" link set "$UPLINK" up
    ip route replace "$POD_NET" via "$UPLINK_ADDR" dev "$HOST_LINK" src "$HOST_ADDR"
    ip route replace "$SERVICE_NET" via "$UPLINK_ADDR" dev "$HOST_LINK" src "$HOST_ADDR"
}

cmd_up() {
    lock
    require_free_range "$POD_NET"
    require_free_range "$SERVICE_NET"
    require_free_range "$LINK_NET"
    up_cluster_ns
    up_uplink
    log "up: $NET_NS ($BRIDGE $GATEWAY/16, $UPLINK $UPLINK_ADDR), $HOST_LINK $HOST_ADDR, routes to $POD_NET and $SERVICE_NET"
}

# ---------------------------------------------------------------------------
# Pods
# ---------------------------------------------------------------------------

# The 10 hex digits that name a pod's namespace and veth.
key_hash() { printf '%s' "$1" | sha256sum | cut -c1-10; }

# read_record HASH: sets rec_node, rec_ns, rec_ip, rec_key from the pod's record.
read_record() {
    { read -r rec_node; read -r rec_ns; read -r rec_ip; IFS= read -r rec_key; } <"$PODS_DIR/$1"
}

# write_record HASH NODE NETNS IP KEY (atomically).
write_record() {
    printf '%s\n%s\n%s\n%s\n' "$2" "$3" "$4" "$5" >"$PODS_DIR/.$1.new"
    mv -f "$PODS_DIR/.$1.new" "$PODS_DIR/$1"
}

# next_address NODE: the next free address of the node's /24 after the last one given.
next_address() {
    local node=$1 last=1 n i used
    [[ -f $PODNET_DIR/node-$node.last ]] && last=$(<"$PODNET_DIR/node-$node.last")
    used=$(awk 'FNR == 3' "$PODS_DIR"/* 2>/dev/null || true) # the address line of every record
    for ((i = 1; i <= 253; i++)); do
        n=$(((last - 2 + i) % 253 + 2)) # 2..254, starting after last
        if ! grep -qx "10\.244\.$node\.$n" <<<"$used"; then
            echo "$n" >"$PODNET_DIR/node-$node.last"
            echo "10.244.$node.$n"
            return 0
        fi
    done
    die "node $node has no free address left in 10.244.$node.0/24"
}

# The MAC of a pod address: 02:65:6f:00 and the address's last two bytes.
mac_of() {
    local c d
    IFS=. read -r _ _ c d <<<"$1"
    printf '02:65:6f:00:%02x:%02x' "$c" "$d"
}

# plumb NETNS VETH IP: the namespace, its eth0 on the bridge, address and default route.
plumb() {
    local ns=$1 veth=$2 ip=$3
    make_netns "$ns"
    if ! link_exists "$NET_NS" "$veth"; then
        # An eth0 without its peer cannot exist (a veth pair dies whole); a foreign one can.
        link_exists "$ns" eth0 && ip -n "$ns" link del eth0
        ip -n "$NET_NS" link add "$veth" mtu "$MTU" type veth \
            peer name eth0 address "$(mac_of "$ip")" mtu "$MTU" netns "$ns"
    fi
    ip -n "$NET_NS" link set "$veth" master "$BRIDGE" up
    ip -n "$ns" addr replace "$ip/16" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route replace default via "$GATEWAY" dev eth0
}

cmd_add_pod() {
    local node=$1 key=$2 hash ns ip
    if ! [[ $node =~ ^[0-9]{1,3}$ ]] || ((10#$node > 255)); then
        die "NODE_INDEX must be 0 to 255, not '$node'"
    fi
    node=$((10#$node))
    [[ -n $key && $key != *$'\n'* ]] || die "POD_KEY must be a non-empty line"
    if ! netns_exists "$NET_NS" || ! link_exists "$NET_NS" "$BRIDGE"; then
        die "no pod network: run '$0 up' first"
    fi
    lock
    hash=$(key_hash "$key")
    if [[ -f $PODS_DIR/$hash ]]; then
        read_record "$hash"
        [[ $rec_key == "$key" ]] || die "pod keys '$key' and '$rec_key' share the hash $hash"
        [[ $rec_node == "$node" ]] || die "pod '$key' is on node $rec_node, not $node"
        ns=$rec_ns ip=$rec_ip
    else
        ns="eo-$node-$hash"
        ip=$(next_address "$node")
        write_record "$hash" "$node" "$ns" "$ip" "$key"
    fi
    unlock
    plumb "$ns" "eo-p$hash" "$ip"
    echo "$NETNS_DIR/$ns $ip"
}

# unplumb NETNS VETH: the veth first (both ends go, even when a process still holds the
# namespace), then the namespace's name.
unplumb() {
    local ns=$1 veth=$2
    if netns_exists "$NET_NS" && link_exists "$NET_NS" "$veth"; then
        ip -n "$NET_NS" link del "$veth"
    fi
    if netns_exists "$ns"; then
        ip netns del "$ns"
    else
        rm -f "${NETNS_DIR:?}/$ns"
    fi
}

cmd_del_pod() {
    local key=$1 hash ns f
    [[ -n $key ]] || die "POD_KEY must not be empty"
    hash=$(key_hash "$key")
    if [[ -f $PODS_DIR/$hash ]]; then
        read_record "$hash"
        unplumb "$rec_ns" "eo-p$hash"
    fi
    # Without a record (lost state), the namespace is found by its name.
    for f in "$NETNS_DIR"/eo-*-"$hash"; do
        [[ -e $f ]] && unplumb "$(basename "$f")" "eo-p$hash"
    done
    if netns_exists "$NET_NS" && link_exists "$NET_NS" "eo-p$hash"; then
        ip -n "$NET_NS" link del "eo-p$hash"
    fi
    # The address is free once the record goes, under the lock of the allocations.
    if [[ -d $PODNET_DIR ]]; then lock; fi
    rm -f "$PODS_DIR/$hash"
}

# ---------------------------------------------------------------------------
# down
# ---------------------------------------------------------------------------

cmd_down() {
    local name
    if [[ -d $PODNET_DIR ]]; then lock; fi
    # Links first, so that nothing stays on the bridge or the host even when a process
    # still holds a namespace: every eo-* link in eo-net (pod veths, whose eth0 go with
    # them, the bridge, the uplink, whose peer eo-host goes with it)...
    if netns_exists "$NET_NS"; then
        for name in $(our_links "$NET_NS"); do ip -n "$NET_NS" link del "$name" 2>/dev/null || true; done
    fi
    # ... then the host side: our two routes (they would go with the link) and eo-* links.
    if link_exists "" "$HOST_LINK"; then
        ip route del "$POD_NET" dev "$HOST_LINK" 2>/dev/null || true
        ip route del "$SERVICE_NET" dev "$HOST_LINK" 2>/dev/null || true
    fi
    for name in $(our_links ""); do ip link del "$name" 2>/dev/null || true; done
    for name in $(our_netns); do
        if netns_exists "$name"; then ip netns del "$name"; else rm -f "${NETNS_DIR:?}/$name"; fi
    done
    # /run/netns itself, when up made it and nothing is left in it.
    if [[ -e $NETNS_DIR_MARKER ]]; then
        if [[ -d $NETNS_DIR && -z $(ls -A "$NETNS_DIR") ]]; then
            if mountpoint -q "$NETNS_DIR"; then umount "$NETNS_DIR"; fi
            rmdir "$NETNS_DIR"
        fi
        [[ -d $NETNS_DIR ]] || rm -f "$NETNS_DIR_MARKER"
    fi
    if [[ -d $PODNET_DIR ]]; then
        rm -f "$PODS_DIR"/* "$PODS_DIR"/.*.new "$PODNET_DIR"/node-*.last
    fi
    log "down: no eo-* namespace or link left"
}

# ---------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------

cmd_status() {
    local f hash state
    if netns_exists "$NET_NS"; then
        echo "$NET_NS: ip_forward=$(ip netns exec "$NET_NS" sysctl -n net.ipv4.ip_forward)"
        ip -n "$NET_NS" -br addr | sed 's/^/  /'
    else
        echo "$NET_NS: absent"
    fi
    if link_exists "" "$HOST_LINK"; then
        echo "root namespace:"
        ip -br addr show dev "$HOST_LINK" | sed 's/^/  /'
        ip route show dev "$HOST_LINK" | sed 's/^/  /'
    else
        echo "$HOST_LINK: absent"
    fi
    echo "pods (record: key node namespace address state):"
    for f in "$PODS_DIR"/*; do
        [[ -f $f ]] || continue
        hash=$(basename "$f")
        read_record "$hash"
        state=ok
        netns_exists "$rec_ns" || state="no namespace"
        netns_exists "$NET_NS" && link_exists "$NET_NS" "eo-p$hash" || state="$state, no veth"
        printf '  %s %s %s %s %s\n' "$rec_key" "$rec_node" "$rec_ns" "$rec_ip" "$state"
    done
    echo "namespaces: $(our_netns | tr '\n' ' ')"
}

usage() {
    sed -n '/^# Usage:/,/^#   status/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[[ $(id -u) == 0 ]] || die "needs root (ip netns, ip link)"
case "${1:-}" in
up) [[ $# == 1 ]] || usage; cmd_up ;;
add-pod) [[ $# == 3 ]] || usage; cmd_add_pod "$2" "$3" ;;
del-pod) [[ $# == 2 ]] || usage; cmd_del_pod "$2" ;;
down) [[ $# == 1 ]] || usage; cmd_down ;;
status) [[ $# == 1 ]] || usage; cmd_status ;;
*) usage ;;
esac
