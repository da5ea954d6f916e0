#!/usr/bin/env bash
# The real nodes' volumes (issue #29): Rancher's local-path-provisioner, run on the host as
# an out-of-cluster controller with the admin kubeconfig, serves the default StorageClass
# local-path. For each claim it runs a helper pod (localhost/busybox:eo) on the node the
# claim's first pod was scheduled to, which makes the directory
# $LOCAL_ENV_DIR/nodes/<node>/volumes/<pv>_<ns>_<claim>; the volume is a hostPath there,
# bound to that node by its affinity; deleting the claim runs a helper pod that removes it.
# Expansion is testkit/resizer's (the provisioner has none): started here beside it.
#
# Usage: testkit/env/volumes/local-path.sh up|down
#
#   up     apply the StorageClass, the provisioner's namespace, ServiceAccount and the
#          ConfigMap of its helper pods, then start the provisioner and the resizer unless
#          they run (pid files run/local-path.pid, run/resizer.pid; logs logs/local-path.log,
#          logs/resizer.log)
#   down   stop both (the objects go with the control plane)
#
# Environment: LOCAL_ENV_DIR, ETCD_OPERATOR_CACHE, LOCAL_PATH_VERSION, NODES (default 3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
LOCAL_PATH_VERSION=${LOCAL_PATH_VERSION:-v0.0.30}
PROVISIONER=$CACHE/local-path/$LOCAL_PATH_VERSION/bin/local-path-provisioner
RESIZER=$LOCAL_ENV_DIR/bin/etcd-operator-resizer
NODES=${NODES:-3}
RUN=$LOCAL_ENV_DIR/run
LOGS=$LOCAL_ENV_DIR/logs
NAMESPACE=local-path-storage
export KUBECONFIG=$LOCAL_ENV_DIR/kubeconfig
# shellcheck source=testkit/env/lib.sh
source "$ROOT/testkit/env/lib.sh"

log() { printf '[local-path] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The provisioner's configuration: each node's volumes under its own directory.
config_json() {
    local i entries=()
    for ((i = 0; i < NODES; i++)); do
        entries+=("$(jq -cn --arg node "local-node-$i" --arg path "$LOCAL_ENV_DIR/nodes/local-node-$i/volumes" \
            '{node: $node, paths: [$path]}')")
    done
    printf '%s\n' "${entries[@]}" | jq -cs '{nodePathMap: .}'
}

apply_objects() {
    local config
    config=$(config_json)
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $NAMESPACE
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: local-path-provisioner
  namespace: $NAMESPACE
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-path
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
reclaimPolicy: Delete
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-path-config
  namespace: $NAMESPACE
data:
  config.json: '$config'
  setup: |-
    #!/bin/sh
    set -eu
    mkdir -m 0777 -p "\$VOL_DIR"
  teardown: |-
    #!/bin/sh
    set -eu
    rm -rf "\$VOL_DIR"
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata:
      name: helper-pod
    spec:
      priorityClassName: system-node-critical
      tolerations:
      - {key: node.kubernetes.io/disk-pressure, operator: Exists, effect: NoSchedule}
      containers:
      - name: helper-pod
        image: localhost/busybox:eo
        imagePullPolicy: IfNotPresent
EOF
}

cmd_up() {
    [[ -x $PROVISIONER ]] || die "$PROVISIONER is missing (testkit/env/build/build-binaries.sh local-path)"
    [[ -x $RESIZER ]] || die "$RESIZER is missing (testkit/env/local-up.sh copies it there)"
    mkdir -p "$RUN" "$LOGS"
    apply_objects
    if ! running "$RUN/local-path.pid"; then
        setsid "$PROVISIONER" --debug start --kubeconfig "$KUBECONFIG" \
            --namespace "$NAMESPACE" --service-account-name local-path-provisioner \
            --provisioner-name rancher.io/local-path --helper-image localhost/busybox:eo \
            --configmap-name local-path-config \
            >>"$LOGS/local-path.log" 2>&1 </dev/null &
        echo $! >"$RUN/local-path.pid"
    fi
    if ! running "$RUN/resizer.pid"; then
        setsid "$RESIZER" --kubeconfig "$KUBECONFIG" --provisioner rancher.io/local-path \
            >>"$LOGS/resizer.log" 2>&1 </dev/null &
        echo $! >"$RUN/resizer.pid"
    fi
    sleep 1
    running "$RUN/local-path.pid" || { tail -20 "$LOGS/local-path.log" >&2; die "the provisioner exited"; }
    running "$RUN/resizer.pid" || { tail -20 "$LOGS/resizer.log" >&2; die "the resizer exited"; }
    log "local-path-provisioner $LOCAL_PATH_VERSION and the resizer up (class local-path, default)"
}

cmd_down() {
    stop_pidfile "$RUN/local-path.pid"
    stop_pidfile "$RUN/resizer.pid"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
