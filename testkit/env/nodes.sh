#!/usr/bin/env bash
# The local environment's nodes. Two kinds, chosen when the environment is first brought
# up (NODE_KIND, recorded in $LOCAL_ENV_DIR/node-kind; default process):
#
#   process   the process nodes described here (testkit/node)
#   kubelet   real kubelets with containerd: every command below is handed to
#             testkit/env/kubelet-nodes.sh, which keeps the same meanings and adds
#             `shutdown NAME` (a graceful node shutdown) and `kill-sandbox NS POD`
#
# The process nodes: NODES of them (default 3), local-node-0 ..
# local-node-(NODES-1), each a process of its own with its own state directory, kubelet
# port and pod range (the controller-manager's node IPAM gives them 10.244.0.0/24,
# 10.244.1.0/24, ... in the order they register; podnet.sh's node index is that third
# byte). kube-scheduler places pods on them; a node binds nothing itself.
#
# Usage: testkit/env/nodes.sh up|down|stop NAME|start NAME|status
#                            |pid NS POD [CONTAINER]|kill NS POD [CONTAINER]
#
#   up          start every node that is not running, wait until each is registered
#               with its pod range
#   down        stop every node as in a shutdown (SIGTERM: it stops its pods' processes)
#   stop NAME   a power cut of node NAME: the node process is killed (SIGKILL), then every
#               process of its pods; its pods stay in the API, its Node stops
#               heart-beating (the controller-manager marks it NotReady after its grace
#               period and taints it)
#   start NAME  start node NAME again: its pods' containers are reported exited and
#               restarted by their restartPolicy, as a kubelet does after a reboot
#   status      each node: running or stopped, pid, state directory
#   pid NS POD [CONTAINER]   the host pid of a container of pod NS/POD (default: its
#               first container)
#   kill NS POD [CONTAINER]  SIGKILL that container's process, as a crash would; its node
#               restarts it by the pod's restartPolicy
#
# Node i: state $LOCAL_ENV_DIR/nodes/local-node-i, kubelet API port 10280+i (the process-node tests run nodes of their own on 10251-10273), pid file
# $LOCAL_ENV_DIR/run/local-node-i.pid, log $LOCAL_ENV_DIR/logs/local-node-i.log. The node
# binary is $LOCAL_ENV_DIR/bin/etcd-operator-node and the pod network's script
# $LOCAL_ENV_DIR/bin/podnet.sh (local-up.sh copies both there).
#
# Environment: LOCAL_ENV_DIR, ETCD_OPERATOR_CACHE, NODES (default 3), NODE_KIND.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
# The kind the environment was brought up with wins over NODE_KIND: one environment never
# mixes the two.
NODE_KIND=$(cat "$LOCAL_ENV_DIR/node-kind" 2>/dev/null || echo "${NODE_KIND:-process}")
case $NODE_KIND in
kubelet) exec bash "$ROOT/testkit/env/kubelet-nodes.sh" "$@" ;;
process) ;;
*) echo "[nodes] ERROR: NODE_KIND must be process or kubelet, got '$NODE_KIND'" >&2; exit 2 ;;
esac
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
NODES=${NODES:-3}
RUN=$LOCAL_ENV_DIR/run
LOGS=$LOCAL_ENV_DIR/logs
BIN=$LOCAL_ENV_DIR/bin/etcd-operator-node
export KUBECONFIG=$LOCAL_ENV_DIR/kubeconfig
# shellcheck source=testkit/env/lib.sh
source "$ROOT/testkit/env/lib.sh"

log() { printf '[nodes] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $NODES =~ ^[1-9]$ ]] || die "NODES must be 1 to 9, got '$NODES'"

names() { local i; for ((i = 0; i < NODES; i++)); do echo "local-node-$i"; done; }

# index NAME: the node's number (local-node-2 -> 2); dies on another name.
index() {
    [[ $1 =~ ^local-node-([0-9])$ ]] && ((BASH_REMATCH[1] < NODES)) ||
        die "no node '$1' (the nodes are $(names | paste -sd' '))"
    echo "${BASH_REMATCH[1]}"
}

pidfile() { echo "$RUN/$1.pid"; }
state_dir() { echo "$LOCAL_ENV_DIR/nodes/$1"; }

# The etcd versions a node can run: Debian's 3.4.23 and whatever build-binaries.sh built.
etcd_flags() {
    ETCD_FLAGS=(--etcd-binary "3.4.23=/usr/bin/etcd")
    local dir
    for dir in "$CACHE"/etcd/v*.*.*; do
        [[ -x $dir/bin/etcd ]] && ETCD_FLAGS+=(--etcd-binary "${dir##*/v}=$dir/bin/etcd")
    done
}

start_node() {
    local name=$1 i
    i=$(index "$name")
    running "$(pidfile "$name")" && return 0
    [[ -x $BIN ]] || die "$BIN is missing (testkit/env/local-up.sh copies it there)"
    etcd_flags
    mkdir -p "$RUN" "$LOGS" "$(state_dir "$name")"
    log "starting $name (kubelet port $((10280 + i)))"
    setsid "$BIN" run --kubeconfig "$KUBECONFIG" --node-name "$name" \
        --state-dir "$(state_dir "$name")" --kubelet-port $((10280 + i)) \
        --binding scheduler "${ETCD_FLAGS[@]}" \
        --image-dir "$CACHE/images" --podnet "$LOCAL_ENV_DIR/bin/podnet.sh" \
        --cluster-dns 10.96.0.10 --cluster-domain cluster.local \
        >>"$LOGS/$name.log" 2>&1 </dev/null &
    echo $! >"$(pidfile "$name")"
}

pod_cidr() { kubectl get node "$1" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true; }

# Registered and given its pod range by the controller-manager.
wait_registered() {
    local name=$1
    for _ in $(seq 120); do
        [[ -n $(pod_cidr "$name") ]] && return 0
        running "$(pidfile "$name")" || break
        sleep 0.5
    done
    tail -20 "$LOGS/$name.log" >&2
    die "$name did not register or got no podCIDR"
}

cmd_up() {
    local name
    for name in $(names); do start_node "$name"; done
    for name in $(names); do wait_registered "$name"; done
    log "$NODES nodes up: $(names | paste -sd' ')"
}

# Every node that has a pid file, whatever NODES says now.
cmd_down() {
    local file
    for file in "$RUN"/local-node-*.pid; do
        [[ -e $file ]] && stop_pidfile "$file"
    done
    return 0
}

# A power cut: nothing of the node may run on, and nothing may stop gracefully.
cmd_stop() {
    local name=$1 pid
    index "$name" >/dev/null
    if running "$(pidfile "$name")"; then
        pid=$(<"$(pidfile "$name")")
        kill -KILL "$pid"
        for _ in $(seq 50); do running "$(pidfile "$name")" || break; sleep 0.1; done
    fi
    rm -f "$(pidfile "$name")"
    "$BIN" kill --state-dir "$(state_dir "$name")" --all --signal KILL >&2
    log "$name stopped (power cut)"
}

cmd_start() {
    start_node "$1"
    wait_registered "$1"
    log "$1 started"
}

cmd_status() {
    local name rc=0
    for name in $(names); do
        if running "$(pidfile "$name")"; then
            printf '%-14s running (pid %s) %s\n' "$name" "$(<"$(pidfile "$name")")" "$(state_dir "$name")"
        else
            printf '%-14s stopped %s\n' "$name" "$(state_dir "$name")"
            rc=1
        fi
    done
    return $rc
}

# container_pid NS POD [CONTAINER]: the pid in the container's process://<pid> ID.
container_pid() {
    local id
    id=$(kubectl -n "$1" get pod "$2" -o json | jq -r --arg want "${3:-}" '[.status.containerStatuses
        // [] | .[] | select($want == "" or .name == $want)][0].containerID // ""')
    [[ $id =~ ^process://([0-9]+)$ ]] || die "pod $1/$2 runs no container process (containerID '$id')"
    echo "${BASH_REMATCH[1]}"
}

cmd_kill() {
    local pid
    pid=$(container_pid "$@")
    kill -KILL "$pid"
}

usage_pod() { echo "usage: $0 $1 NS POD [CONTAINER]"; }

case ${1:-} in
pid) container_pid "${2:?$(usage_pod pid)}" "${3:?$(usage_pod pid)}" "${4:-}" ;;
kill) cmd_kill "${2:?$(usage_pod kill)}" "${3:?$(usage_pod kill)}" "${4:-}" ;;
up) cmd_up ;;
down) cmd_down ;;
stop) cmd_stop "${2:?usage: $0 stop NAME}" ;;
start) cmd_start "${2:?usage: $0 start NAME}" ;;
status) cmd_status ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
