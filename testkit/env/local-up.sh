#!/usr/bin/env bash
# Brings up the whole local environment: a real kube-apiserver and controller-manager,
# the process node (which runs pods as local processes), and the operator built from
# this tree, running with its ServiceAccount's RBAC. Then applies an example
# EtcdCluster (unless EXAMPLE is empty) and waits until it is Running with every member
# ready.
#
#   testkit/env/local-up.sh                 # examples/local-3.5.yaml
#   EXAMPLE=examples/local-3.4.yaml testkit/env/local-up.sh
#   EXAMPLE= testkit/env/local-up.sh        # no example (what the end-to-end tests use)
#
# Everything lives under LOCAL_ENV_DIR (default /tmp/etcd-operator-local):
#   kubeconfig            admin kubeconfig (export KUBECONFIG=... to use kubectl)
#   operator.kubeconfig   the operator's ServiceAccount token
#   logs/                 operator.log, node.log, and the control plane's logs
#   node/                 the node's pods: data dirs and container logs
#   bin/                  the operator and node binaries the environment runs
# testkit/env/local-down.sh stops every process this started and removes LOCAL_ENV_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
EXAMPLE=${EXAMPLE-examples/local-3.5.yaml}
OPERATOR_HTTP=${OPERATOR_HTTP:-127.0.0.1:18080}
RUN="$LOCAL_ENV_DIR/run"
LOGS="$LOCAL_ENV_DIR/logs"
export KUBECONFIG="$LOCAL_ENV_DIR/kubeconfig"

cd "$ROOT"
bash testkit/env/install-deps.sh
bash testkit/env/control-plane.sh up
# Every etcd version the examples and the tests run, pinned (a no-op when cached; the
# store etcd above may be Debian's, so this is not implied by the control plane).
ETCD_VERSIONS=${ETCD_VERSIONS:-v3.5.35 v3.6.16} bash testkit/env/build-binaries.sh etcd

echo "== building the operator and the node"
cargo build --workspace --bins --quiet
mkdir -p "$RUN" "$LOGS" "$LOCAL_ENV_DIR/bin"
# The environment runs its own copies: a later build (of this tree or another worktree
# sharing CARGO_TARGET_DIR) never changes what a running or restarted process is.
for bin in etcd-operator etcd-operator-node; do
  cp "${CARGO_TARGET_DIR:-$ROOT/target}/debug/$bin" "$LOCAL_ENV_DIR/bin/.$bin.new"
  mv -f "$LOCAL_ENV_DIR/bin/.$bin.new" "$LOCAL_ENV_DIR/bin/$bin"
done

# shellcheck source=testkit/env/lib.sh
source "$ROOT/testkit/env/lib.sh"
alive() { running "$RUN/$1.pid"; }

echo "== installing the CRD and the operator's namespace and RBAC from manifests/"
kubectl apply -f manifests/00-namespace.yaml -f manifests/10-crd.yaml -f manifests/20-rbac.yaml >/dev/null
kubectl wait --for=condition=Established crd/etcdclusters.etcd.database.coreos.com --timeout=60s >/dev/null

# The etcd versions the node can run: Debian's 3.4.23 and whatever build-binaries.sh built.
etcd_flags=(--etcd-binary "3.4.23=/usr/bin/etcd")
for dir in "$CACHE"/etcd/v*.*.*; do
  [ -x "$dir/bin/etcd" ] && etcd_flags+=(--etcd-binary "${dir##*/v}=$dir/bin/etcd")
done

if ! alive node; then
  echo "== starting the process node (${etcd_flags[*]})"
  setsid "$LOCAL_ENV_DIR/bin/etcd-operator-node" run --kubeconfig "$KUBECONFIG" \
    --node-name local-node --state-dir "$LOCAL_ENV_DIR/node" "${etcd_flags[@]}" \
    >"$LOGS/node.log" 2>&1 < /dev/null &
  echo $! >"$RUN/node.pid"
fi
for _ in $(seq 60); do
  kubectl get node local-node >/dev/null 2>&1 && break
  sleep 1
done
kubectl get node local-node >/dev/null || { tail -20 "$LOGS/node.log"; echo "node did not register" >&2; exit 1; }

if ! alive operator; then
  echo "== starting the operator as ServiceAccount etcd-operator/etcd-operator"
  bash testkit/env/operator-kubeconfig.sh >"$LOCAL_ENV_DIR/operator.kubeconfig"
  KUBECONFIG="$LOCAL_ENV_DIR/operator.kubeconfig" setsid "$LOCAL_ENV_DIR/bin/etcd-operator" run \
    --listen "$OPERATOR_HTTP" --lease-namespace etcd-operator --log-format json \
    --identity "local-$(hostname)" >"$LOGS/operator.log" 2>&1 < /dev/null &
  echo $! >"$RUN/operator.pid"
fi
for _ in $(seq 60); do
  curl -fsS "http://$OPERATOR_HTTP/readyz" >/dev/null 2>&1 && break
  sleep 1
done
curl -fsS "http://$OPERATOR_HTTP/readyz" >/dev/null || { tail -20 "$LOGS/operator.log"; echo "operator not ready" >&2; exit 1; }

if [ -n "$EXAMPLE" ]; then
  name=$(kubectl apply -f "$EXAMPLE" -o name)
  echo "== applied $EXAMPLE ($name); waiting until it is Running with every member ready"
  size=$(kubectl get "$name" -o jsonpath='{.spec.size}')
  for _ in $(seq 180); do
    phase=$(kubectl get "$name" -o jsonpath='{.status.phase}')
    ready=$(kubectl get "$name" -o jsonpath='{.status.readyMembers}')
    [ "$phase" = Running ] && [ "$ready" = "$size" ] && break
    sleep 1
  done
  kubectl get "$name"
  if [ "$phase" != Running ] || [ "$ready" != "$size" ]; then
    echo "the example did not become ready; see $LOGS/operator.log" >&2
    exit 1
  fi
fi

cat <<MSG

The local environment is up.
  export KUBECONFIG=$KUBECONFIG
  kubectl get etcd -A                                   # clusters, phase, ready members
  kubectl describe etcd ${EXAMPLE:+$(basename "${name:-x}")}                 # conditions and Events
  curl -s http://$OPERATOR_HTTP/debug/actors | python3 -m json.tool     # every actor's state
  curl -sN http://$OPERATOR_HTTP/debug/stream           # live state transitions
  ETCDCTL_API=3 etcdctl --endpoints=\$(kubectl get ${name:-etcd/NAME} -o jsonpath='http://{.status.members.ready[0]}.{.metadata.name}.{.metadata.namespace}.svc:2379') member list
Logs: $LOGS/operator.log, $LOGS/node.log.  Tear down: testkit/env/local-down.sh
MSG
