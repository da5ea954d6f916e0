#!/usr/bin/env bash
# What a fleet of healthy, untouched clusters costs the operator and etcd: its CPU and
# memory, and the etcd and Kubernetes-port calls its Cluster actors make, per cluster and
# minute, once every cluster is Running and the actors have backed off to their idle
# interval (--idle-interval-ms; see "Pace and cadence" in docs/design/architecture.md).
#
#   benches/idle.sh                        # 200 single-member clusters
#   CLUSTERS=50 WINDOW_S=300 benches/idle.sh
#
# Against the local environment (`EXAMPLE= testkit/env/local-up.sh`, called here; a fast
# no-op when it is up): in a namespace idle-<random>, `kubectl apply` CLUSTERS EtcdClusters
# of size 1 at once, wait until every one is Running with its member ready, wait
# SETTLE_S seconds more, then measure over WINDOW_S seconds, from the leader's process
# (the Lease holder's pod; its host pid from `nodes.sh pid`) and its
# /metrics (pod IP, port 8443, with the local environment's reader token):
#   - CPU: utime + stime of /proc/PID/stat over the window, as % of one core;
#   - RSS: VmRSS of /proc/PID/status at the end;
#   - etcd calls per cluster per minute: the delta of etcd_operator_etcd_calls_total
#     (every method) / CLUSTERS / minutes;
#   - ticks per cluster per minute: the delta of etcd_operator_ticks_total, likewise;
#   - Kubernetes-port calls per minute: the delta of etcd_operator_api_calls_total
#     (every method), in all and per cluster.
# The namespace is deleted at the end (also on failure).
#
# Environment:
#   CLUSTERS       how many EtcdClusters (default 200)
#   ETCD_VERSION   their spec.version (default 3.5.35)
#   SETTLE_S       seconds between all Running and the window (default 60: past the back-off)
#   WINDOW_S       length of the measuring window in seconds (default 120)
#   TIMEOUT_S      give up on any single wait after this many seconds (default 1800)
#   LOCAL_ENV_DIR, ETCD_OPERATOR_CACHE   as for testkit/env/local-up.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTERS=${CLUSTERS:-200}
SETTLE_S=${SETTLE_S:-60}
WINDOW_S=${WINDOW_S:-120}
TIMEOUT_S=${TIMEOUT_S:-1800}

LOG_TAG=idle
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

for v in CLUSTERS SETTLE_S WINDOW_S TIMEOUT_S; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ $ETCD_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "ETCD_VERSION must look like 3.5.35"
command -v curl >/dev/null || die "curl is needed to read the operator's /metrics"

WORK=$(mktemp -d /tmp/etcd-operator-idle.XXXXXX)
NS=""
cleanup() {
    delete_namespace
    rm -rf "$WORK"
}
trap cleanup EXIT

local_env_up

# Applies CLUSTERS single-member EtcdClusters idle-0 .. idle-(CLUSTERS-1) at once.
apply_clusters() {
    local i
    for ((i = 0; i < CLUSTERS; i++)); do
        printf -- '---\napiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\n'
        printf 'metadata:\n  name: idle-%d\nspec:\n  size: 1\n  version: "%s"\n' "$i" "$ETCD_VERSION"
    done >"$WORK/clusters.yaml"
    kubectl -n "$NS" apply -f "$WORK/clusters.yaml" >/dev/null
}

# True when every EtcdCluster of the namespace is Running with its member ready.
all_running() {
    local running
    running=$(kubectl -n "$NS" get etcd \
        -o jsonpath='{range .items[*]}{.status.phase}/{.status.readyMembers}{"\n"}{end}' 2>/dev/null |
        grep -c '^Running/1$' || true)
    [[ $running == "$CLUSTERS" ]]
}

# $1 per minute over the window, divided by $2 (default 1), to two decimals.
per_minute() {
    awk -v n="$1" -v d="${2:-1}" -v w="$WINDOW_S" 'BEGIN { printf "%.2f", n / d / (w / 60) }'
}

find_leader
NS=idle-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
kubectl create namespace "$NS" >/dev/null
log "namespace $NS: applying $CLUSTERS EtcdClusters of 1 member (etcd $ETCD_VERSION)"
start=$(now)
apply_clusters
poll "all $CLUSTERS EtcdClusters to be Running" all_running
since "$start"
ready_s=$RESULT
log "all Running after ${ready_s}s; settling ${SETTLE_S}s"
sleep "$SETTLE_S"

find_leader
leader_before=$LEADER
log "measuring ${WINDOW_S}s on the leader $LEADER (pid $PID)"
cpu0=$(cpu_ticks) etcd0=$(counter etcd_operator_etcd_calls_total)
api0=$(counter etcd_operator_api_calls_total) ticks0=$(counter etcd_operator_ticks_total)
sleep "$WINDOW_S"
cpu1=$(cpu_ticks) etcd1=$(counter etcd_operator_etcd_calls_total)
api1=$(counter etcd_operator_api_calls_total) ticks1=$(counter etcd_operator_ticks_total)
rss=$(rss_mib)
find_leader
[[ $LEADER == "$leader_before" ]] || die "the leader changed during the window ($leader_before → $LEADER)"

hz=$(getconf CLK_TCK)
cpu=$(awk -v t="$((cpu1 - cpu0))" -v hz="$hz" -v w="$WINDOW_S" 'BEGIN { printf "%.2f", t / hz / w * 100 }')

echo
echo "etcd-operator idle cost, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) ($(nproc) cores)"
echo "$CLUSTERS EtcdClusters of 1 member (etcd $ETCD_VERSION), all Running after ${ready_s}s;"
echo "measured ${WINDOW_S}s on the leader $LEADER, ${SETTLE_S}s after that"
echo
printf '%-40s | %12s\n' measure value
printf '%-40s-|-%12s\n' "" "" | tr ' ' -
printf '%-40s | %12s\n' "operator CPU, % of one core" "$cpu"
printf '%-40s | %12s\n' "operator RSS, MiB" "$rss"
printf '%-40s | %12s\n' "etcd calls per cluster per minute" "$(per_minute "$((etcd1 - etcd0))" "$CLUSTERS")"
printf '%-40s | %12s\n' "ticks per cluster per minute" "$(per_minute "$((ticks1 - ticks0))" "$CLUSTERS")"
printf '%-40s | %12s\n' "Kubernetes-port calls per minute" "$(per_minute "$((api1 - api0))")"
printf '%-40s | %12s\n' "Kubernetes-port calls per cluster/minute" "$(per_minute "$((api1 - api0))" "$CLUSTERS")"
