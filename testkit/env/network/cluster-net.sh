#!/usr/bin/env bash
# The cluster's network services, one of each for the whole local environment, run as
# processes inside eo-net, the pod network's namespace (testkit/env/network/podnet.sh), where pods'
# traffic to ClusterIPs arrives by their default route and the host's by its route to
# 10.96.0.0/12:
#
#   kube-proxy  nftables mode: every Service's ClusterIP DNATed to its ready endpoints
#               (EndpointSlices), traffic from outside the pod range masqueraded (the
#               host's); its rules and sysctls stay in eo-net. User system:kube-proxy
#               (client certificate, built-in role system:node-proxier). Health at
#               http://10.255.0.2:10256/healthz, metrics :10249.
#   CoreDNS     cluster.local (and reverse zones) from the API server (kubernetes plugin,
#               user system:coredns), at 10.255.0.2:53, which is the endpoint of the
#               kube-dns Service (kube-system, ClusterIP 10.96.0.10, no selector, an
#               EndpointSlice written here). Every other name answers NXDOMAIN: eo-net has
#               no upstream resolver. Ready at http://10.255.0.2:8181/ready. Records live
#               COREDNS_TTL seconds (default 5, the kubernetes plugin's own default, as k3s
#               and EKS run it; kubeadm sets 30), and so does a negative answer in its
#               cache: a name asked for before its pod's address is published stays
#               unknown that long.
#
# Both reach the API server at 10.255.0.1:16443 (kubeconfigs written by
# control-plane.sh). kube-proxy is started once the nodes have registered: it plays the
# first one (NODE_NAME), and it waits 30 s at startup for a Node that does not exist yet.
#
# Usage: testkit/env/network/cluster-net.sh up|down|status
#
#   up      start what is not running, wait until kube-proxy has synced, CoreDNS is
#           ready, and a name resolves through 10.96.0.10 and the API server answers at
#           10.96.0.1:443 from the host
#   down    stop both (by the pids recorded); the objects go with the control plane
#   status  say what is running
#
# Environment: LOCAL_ENV_DIR (default /tmp/etcd-operator-local), ETCD_OPERATOR_CACHE,
# K8S_VERSION (default v1.35.4), COREDNS_VERSION (default v1.15.0), COREDNS_TTL (default
# 5), NODE_NAME (default local-node-0), UP_TIMEOUT (seconds per wait, default 120).
set -euo pipefail

# testkit/env/, this script's parent directory: lib.sh and the other scripts are found from it.
TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
K8S_VERSION=${K8S_VERSION:-v1.35.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
COREDNS_TTL=${COREDNS_TTL:-5}
NODE_NAME=${NODE_NAME:-local-node-0}
UP_TIMEOUT=${UP_TIMEOUT:-120}

KUBE_PROXY="$CACHE/k8s/$K8S_VERSION/bin/kube-proxy"
COREDNS="$CACHE/coredns/$COREDNS_VERSION/bin/coredns"
NET_NS=/run/netns/eo-net
ADDR=10.255.0.2 # eo-net's side of the uplink: where both listen
DNS_IP=10.96.0.10
API_IP=10.96.0.1
CLUSTER_CIDR=10.244.0.0/16
DOMAIN=cluster.local
RUN="$LOCAL_ENV_DIR/run"
LOGS="$LOCAL_ENV_DIR/logs"
DIR="$LOCAL_ENV_DIR/cluster-net"
export KUBECONFIG="$LOCAL_ENV_DIR/kubeconfig"

# shellcheck source=testkit/env/lib.sh
source "$TOOLS_DIR/lib.sh"

log() { printf '[cluster-net] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# start_in_net NAME BINARY ARGS...: runs BINARY inside eo-net in a session of its own,
# logging to $LOGS/NAME.log; records its pid (nsenter execs it, so $! is its own).
start_in_net() {
    local name=$1 bin=$2
    shift 2
    log "starting $name in eo-net ($bin)"
    setsid nsenter --net="$NET_NS" "$bin" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
    echo $! >"$RUN/$name.pid"
}

# wait_for NAME WHAT CMD...: polls CMD until it succeeds; fails with the log's tail when
# the process dies or UP_TIMEOUT passes.
wait_for() {
    local name=$1 what=$2 deadline=$((SECONDS + UP_TIMEOUT))
    shift 2
    until "$@" >/dev/null 2>&1; do
        if ! running "$RUN/$name.pid" || ((SECONDS >= deadline)); then
            tail -n 30 "$LOGS/$name.log" >&2 || true
            die "$name: no $what (log: $LOGS/$name.log; clean up with: testkit/env/local-down.sh)"
        fi
        sleep 0.3
    done
}

ensure_binaries() {
    if [[ ! -x $KUBE_PROXY || ! -x $COREDNS ]]; then
        log "kube-proxy or CoreDNS missing in $CACHE; building them"
        K8S_VERSION=$K8S_VERSION COREDNS_VERSION=$COREDNS_VERSION ETCD_OPERATOR_CACHE=$CACHE \
            bash "$TOOLS_DIR/build/build-binaries.sh" network >&2
    fi
}

write_kube_proxy_config() {
    cat >"$DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $LOCAL_ENV_DIR/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
bindAddress: $ADDR
healthzBindAddress: $ADDR:10256
metricsBindAddress: $ADDR:10249
mode: nftables
clusterCIDR: $CLUSTER_CIDR
conntrack:
  # nf_conntrack_max is the host's (read-only outside the root namespace): leave it.
  maxPerCore: 0
EOF
}

# The kubeadm Corefile without what needs an upstream (forward, loop), with the kubernetes
# plugin's TTL COREDNS_TTL: the cluster's zones from the API server; NXDOMAIN for
# everything else.
write_corefile() {
    cat >"$DIR/Corefile" <<EOF
$DOMAIN:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $ADDR
    errors
    health $ADDR:8080
    ready $ADDR:8181
    kubernetes {
        kubeconfig $LOCAL_ENV_DIR/coredns.kubeconfig local
        pods insecure
        ttl $COREDNS_TTL
    }
    prometheus $ADDR:9153
    cache 30
    loadbalance
}
.:53 {
    bind $ADDR
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
}

# The kube-dns Service at the conventional address, and its endpoint: CoreDNS in eo-net.
# No selector (CoreDNS is no pod), so the EndpointSlice is ours, labelled with a manager
# of its own so that no controller takes it over.
apply_kube_dns() {
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: $DNS_IP
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
  - {name: metrics, port: 9153, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-eo-net
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: cluster-net.etcd-operator.local
addressType: IPv4
endpoints:
- addresses: [$ADDR]
  conditions: {ready: true}
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
- {name: metrics, port: 9153, protocol: TCP}
EOF
}

kube_proxy_healthy() { curl -fsS --max-time 2 "http://$ADDR:10256/healthz"; }
coredns_ready() { curl -fsS --max-time 2 "http://$ADDR:8181/ready"; }

# The whole path from the host: a name resolved by glibc with a resolv.conf naming only
# 10.96.0.10 (in a private mount namespace), and the API server through its ClusterIP.
dns_through_service() {
    local conf="$DIR/resolv.conf"
    local answer
    printf 'nameserver %s\noptions ndots:5 timeout:1 attempts:1\n' "$DNS_IP" >"$conf"
    # shellcheck disable=SC2016 # expanded by the inner sh
    answer=$(unshare --mount --propagation private sh -c \
        'mount --bind "$1" /etc/resolv.conf && exec getent ahostsv4 "$2"' \
        sh "$conf" "kubernetes.default.svc.$DOMAIN") || return 1
    [[ $answer == "$API_IP "* ]]
}
api_through_service() {
    [[ $(curl -fsS --max-time 2 --cacert "$LOCAL_ENV_DIR/pki/ca.crt" "https://$API_IP:443/readyz") == ok ]]
}

cmd_up() {
    [[ -f $KUBECONFIG ]] || die "no control plane ($KUBECONFIG missing): testkit/env/control-plane/control-plane.sh up"
    mountpoint -q "$NET_NS" || die "no pod network ($NET_NS missing): testkit/env/network/podnet.sh up"
    ensure_binaries
    mkdir -p "$RUN" "$LOGS" "$DIR"
    apply_kube_dns
    if ! running "$RUN/kube-proxy.pid"; then
        write_kube_proxy_config
        start_in_net kube-proxy "$KUBE_PROXY" --config="$DIR/kube-proxy.yaml"
    fi
    if ! running "$RUN/coredns.pid"; then
        write_corefile
        start_in_net coredns "$COREDNS" -conf "$DIR/Corefile"
    fi
    wait_for kube-proxy "healthz (first sync)" kube_proxy_healthy
    wait_for coredns "readiness (kubernetes plugin synced)" coredns_ready
    wait_for coredns "answer through the kube-dns Service ($DNS_IP)" dns_through_service
    wait_for kube-proxy "API server through the kubernetes Service ($API_IP:443)" api_through_service
    log "kube-proxy (nftables) and CoreDNS ($DNS_IP -> $ADDR:53) up in eo-net"
}

cmd_down() {
    stop_pidfile "$RUN/coredns.pid"
    stop_pidfile "$RUN/kube-proxy.pid"
}

# Whether daemon $1 runs, and its pid.
daemon_state() {
    running "$RUN/$1.pid" || { echo stopped; return 1; }
    echo "running (pid $(<"$RUN/$1.pid"))"
}

cmd_status() { each_status 12 daemon_state kube-proxy coredns; }

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
