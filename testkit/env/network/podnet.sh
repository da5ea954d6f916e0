#!/usr/bin/env bash
# The pod network of the local environment, built with iproute2 inside a network namespace
# this script makes, so that the host's own configuration only gains one veth link and two
# routes to private ranges. The nodes' containerds run inside eo-net, where the CNI bridge
# plugin (nodes.sh writes its conflist) attaches each pod's veth to eo-br0.
#
#   root namespace (the host)           eo-net (the "cluster" namespace)        pod namespaces
#   eo-host 10.255.0.1/30  <-- veth --> eo-uplink 10.255.0.2/30
#   10.244.0.0/16 via 10.255.0.2        eo-br0 10.244.0.1/16 (bridge)            (containerd's)
#   10.96.0.0/12  via 10.255.0.2          +- veth... <-------- veth ------->     eth0 10.244.<node>.<n>
#                                       net.ipv4.ip_forward=1 (here only)
#
# - eo-net routes between the bridge (pods) and the uplink (host): a pod reaches the host
#   at 10.255.0.1 (where the API server listens), the host reaches every pod. The root
#   namespace forwards nothing: its traffic to pods leaves through eo-host, and nothing is
#   forwarded on its behalf, so none of its sysctls is changed.
# - The bridge's MAC is fixed (02:65:6f:00:00:01), or it would change as ports come and go.
# - 10.96.0.0/12 (the ClusterIPs) is routed to eo-net as well, where kube-proxy programs
#   them (cluster-net.sh).
#
# Usage: testkit/env/network/podnet.sh up|down|status
#
#   up       make eo-net, the bridge, the uplink pair and the routes (whatever is missing;
#            a no-op when all exist)
#   down     removes every eo-* namespace under /run/netns, every eo-* link of the root
#            namespace and of eo-net, and the routes; works from names alone after a crash
#   status   what exists
#
# When /run/netns did not exist, `up` says so in /run/eo-podnet.netns-dir (ip netns leaves
# /run/netns behind as a bind mount of itself), and `down` removes both once no namespace
# is left in it. Concurrent calls are serialized by a lock (flock) in $LOCAL_ENV_DIR/podnet.
#
# Nothing here touches a link, route, namespace or rule whose name or address is not one
# of the above; `up` refuses to start when a route or address of the host lies inside
# 10.244.0.0/16, 10.96.0.0/12 or 10.255.0.0/30.
set -euo pipefail

LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
PODNET_DIR=${PODNET_DIR:-$LOCAL_ENV_DIR/podnet}
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

# Take the lock (held until the script's exit).
lock() {
    mkdir -p "$PODNET_DIR"
    exec 9>>"$LOCK"
    flock 9
}

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
    # sees the service address answer (see testkit/env/README.md, br_netfilter). Inert where br_netfilter is absent.
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
# down
# ---------------------------------------------------------------------------

cmd_down() {
    local name
    if [[ -d $PODNET_DIR ]]; then lock; fi
    # Links first, so that nothing stays on the host even when a process still holds a
    # namespace: every eo-* link in eo-net (the bridge, the uplink, whose peer eo-host
    # goes with it)...
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
    log "down: no eo-* namespace or link left"
}

# ---------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------

cmd_status() {
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
    echo "namespaces: $(our_netns | tr '\n' ' ')"
}

usage() {
    sed -n '/^# Usage:/,/^#   status/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[[ $(id -u) == 0 ]] || die "needs root (ip netns, ip link)"
case "${1:-}" in
up) [[ $# == 1 ]] || usage; cmd_up ;;
down) [[ $# == 1 ]] || usage; cmd_down ;;
status) [[ $# == 1 ]] || usage; cmd_status ;;
*) usage ;;
esac
