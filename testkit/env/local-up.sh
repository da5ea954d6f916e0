#!/usr/bin/env bash
# Brings up the whole local environment: the pod network (network/podnet.sh: a bridge in
# a network namespace of its own), a real kube-apiserver and controller-manager and
# kube-scheduler on it (control-plane/control-plane.sh), three real nodes (node/nodes.sh:
# a kubelet and a containerd each; pods are containers on the bridge), volumes from
# Rancher's local-path-provisioner (volumes/local-path.sh), kube-proxy and CoreDNS
# (network/cluster-net.sh), an S3-compatible object store for backups (store/s3.sh:
# versitygw at http://10.255.0.1:7480), and the operator installed as a user installs it: its
# image built from this tree, then `kubectl apply -f manifests/` with that image set, two
# replicas electing a leader through their Lease. Then applies an example EtcdCluster
# (unless EXAMPLE is empty) and waits until it is Running with every member ready. Run
# again, it starts what is not running and rolls the Deployment out when the image changed.
#
#   testkit/env/local-up.sh                 # examples/local-3.5.yaml
#   EXAMPLE=examples/local-3.4.yaml testkit/env/local-up.sh
#   EXAMPLE= testkit/env/local-up.sh        # no example (what the end-to-end tests use)
#
# Everything lives under LOCAL_ENV_DIR (default /tmp/etcd-operator-local):
#   kubeconfig            admin kubeconfig (export KUBECONFIG=... to use kubectl)
#   logs/                 local-node-N.log, the control plane's, kube-proxy's and CoreDNS's logs (the
#                         operator's: kubectl logs)
#   nodes/local-node-N/   each node: kubelet.log, containerd.log, its containerd's and
#                         kubelet's state, its pods' logs and volumes
#   s3/                   the object store's buckets, endpoint and keys (store/s3.sh)
#   bin/                  the volume resizer the environment runs
# testkit/env/local-down.sh stops every process this started, takes the pod network down
# and removes LOCAL_ENV_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
EXAMPLE=${EXAMPLE-examples/local-3.5.yaml}
RUN="$LOCAL_ENV_DIR/run"
LOGS="$LOCAL_ENV_DIR/logs"
export KUBECONFIG="$LOCAL_ENV_DIR/kubeconfig"

cd "$ROOT"
up_start=$SECONDS
# shellcheck source=testkit/env/lib.sh
source testkit/env/lib.sh
bash testkit/env/build/install-deps.sh
# The pod network first (control-plane.sh up brings it up before anything else: the API
# server listens on the host's address on it), then the control plane.
bash testkit/env/control-plane/control-plane.sh up
# Every etcd version the examples and the tests run, pinned (a no-op when cached; the
# store etcd above may be Debian's, so this is not implied by the control plane).
ETCD_VERSIONS=${ETCD_VERSIONS:-v3.5.35 v3.6.16} bash testkit/env/build/build-binaries.sh etcd
# The object store of backups, on the host's pod-network address (s3.sh).
bash testkit/env/store/s3.sh up

mkdir -p "$RUN" "$LOGS" "$LOCAL_ENV_DIR/bin"
bash testkit/env/build/build-binaries.sh kubelet local-path
echo "== building the volume resizer"
quietly "$LOGS/build-resizer.log" cargo build -p etcd-operator-resizer --bin etcd-operator-resizer
# The environment runs its own copy: a later build (of this tree or another worktree
# sharing CARGO_TARGET_DIR) never changes what a running resizer is.
cp "${CARGO_TARGET_DIR:-$ROOT/target}/debug/etcd-operator-resizer" "$LOCAL_ENV_DIR/bin/.resizer.new"
mv -f "$LOCAL_ENV_DIR/bin/.resizer.new" "$LOCAL_ENV_DIR/bin/etcd-operator-resizer"

echo "== building the operator image"
archive=$(bash testkit/env/image/build-image.sh)
image=$(cat "$archive.ref")


echo "== installing the CRD and the operator's namespace and RBAC from manifests/"
kubectl apply -f manifests/00-namespace.yaml -f manifests/10-crd.yaml -f manifests/20-rbac.yaml \
  -f manifests/40-networkpolicy.yaml -f testkit/env/operator-reader.yaml >/dev/null
kubectl wait --for=condition=Established crd/etcdclusters.etcd.database.coreos.com \
  crd/etcdbackups.etcd.database.coreos.com --timeout=60s >/dev/null

echo "== starting the nodes"
# (Nodes that run already import the images they lack, a new operator image too.)
bash testkit/env/node/nodes.sh up
bash testkit/env/volumes/local-path.sh up

echo "== kube-proxy and CoreDNS"
bash testkit/env/network/cluster-net.sh up

# A rolling restart waits, after each member's restart, for the cluster DNS's cached
# answers to expire (--restart-settle-s, 30 by default for kubeadm's TTL): here the TTL
# is cluster-net.sh's COREDNS_TTL, so one second more than that.
settle=$(( ${COREDNS_TTL:-5} + 1 ))
echo "== installing the operator: kubectl apply -f manifests/ with image $image, --restart-settle-s=$settle"
kubectl set image --local -f manifests/30-deployment.yaml "operator=$image" -o yaml |
  kubectl set env --local -f - "ETCD_OPERATOR_IMAGE=$image" -o yaml |
  sed "s/--restart-settle-s=[0-9]*/--restart-settle-s=$settle/" |
  kubectl apply -f - >/dev/null
if ! kubectl -n etcd-operator rollout status deploy/etcd-operator --timeout=180s; then
  kubectl -n etcd-operator get pods -o wide >&2
  echo "the operator's Deployment did not become available; kubectl -n etcd-operator logs deploy/etcd-operator" >&2
  exit 1
fi
# The leader: the holder of the Lease, one of the Deployment's current pods.
leader=
for _ in $(seq 60); do
  holder=$(kubectl -n etcd-operator get lease etcd-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  if [ -n "$holder" ] && kubectl -n etcd-operator get pod "$holder" -o jsonpath='{.metadata.labels.app\.kubernetes\.io/name}' 2>/dev/null | grep -qx etcd-operator; then
    leader=$holder
    break
  fi
  sleep 1
done
[ -n "$leader" ] || { echo "no pod of the operator holds its Lease" >&2; exit 1; }
leader_ip=$(kubectl -n etcd-operator get pod "$leader" -o jsonpath='{.status.podIP}')

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
    echo "the example did not become ready; see kubectl -n etcd-operator logs $leader" >&2
    exit 1
  fi
fi

cat <<MSG

The local environment is up ($((SECONDS - up_start)) s). The operator's leader is pod $leader ($leader_ip).
  export KUBECONFIG=$KUBECONFIG
  kubectl get etcd -A                                   # clusters, phase, ready members
  kubectl describe etcd ${EXAMPLE:+$(basename "${name:-x}")}                 # conditions and Events
  kubectl -n etcd-operator logs -f deploy/etcd-operator  # the operator's log (one replica's)
  kubectl -n etcd-operator logs -f $leader       # the leader's log
  TOKEN=\$(kubectl -n etcd-operator create token operator-reader)   # may read /metrics, /debug/
  curl -sk -H "Authorization: Bearer \$TOKEN" https://$leader_ip:8443/debug/actors | python3 -m json.tool  # every actor's state
  curl -skN -H "Authorization: Bearer \$TOKEN" https://$leader_ip:8443/debug/stream   # live state transitions
  curl -sk -H "Authorization: Bearer \$TOKEN" https://$leader_ip:8443/metrics         # Prometheus metrics
  ETCDCTL_API=3 etcdctl --endpoints=\$(kubectl get pod \$(kubectl get ${name:-etcd/NAME} -o jsonpath='{.status.members.ready[0]}') -o jsonpath='http://{.status.podIP}:2379') member list
Pods resolve cluster names through CoreDNS (10.96.0.10); the host does not: use pod IPs here.
Backups: S3 at $(cat "$LOCAL_ENV_DIR/s3/endpoint"), bucket etcd-backups, keys in $LOCAL_ENV_DIR/s3/.
Nodes: testkit/env/node/nodes.sh status (logs: $LOCAL_ENV_DIR/nodes/local-node-*/kubelet.log).  Tear down: testkit/env/local-down.sh
MSG
