#!/usr/bin/env bash
# Stops everything testkit/env/local-up.sh started (by the pids it recorded): the nodes
# (which stop their pods' processes, the operator's among them), the S3 server, kube-proxy
# and CoreDNS,
# then the control plane (which takes the pod network down and removes LOCAL_ENV_DIR);
# and, last, the pod network again by name (network/podnet.sh down), so that no eo-*
# namespace, link or route is left even when a step before failed or LOCAL_ENV_DIR was gone.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
# shellcheck source=testkit/env/lib.sh
source "$ROOT/testkit/env/lib.sh"

rc=0
# The nodes are found by their cgroups, even when LOCAL_ENV_DIR is gone.
bash "$ROOT/testkit/env/node/nodes.sh" down || rc=$?
bash "$ROOT/testkit/env/volumes/local-path.sh" down || rc=$?
bash "$ROOT/testkit/env/store/s3.sh" down || rc=$?
bash "$ROOT/testkit/env/network/cluster-net.sh" down || rc=$?
bash "$ROOT/testkit/env/control-plane/control-plane.sh" down || rc=$?
bash "$ROOT/testkit/env/network/podnet.sh" down || rc=$?
exit $rc
