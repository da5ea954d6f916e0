#!/usr/bin/env bash
# The project's test command (README, `make test`, and CI):
#   1. fmt and clippy;
#   2. unit, actor and real-etcd tests (`cargo test --workspace`);
#   3. the operator image (testkit/env/check-image.sh): built (cached), exactly the
#      expected files, no shell, the binary starts in it as 65532;
#   4. the end-to-end suite against a real control plane, the process node and the
#      operator (testkit/env/local-up.sh), torn down afterwards unless it was already up.
# E2E_ONLY=1 skips 1 to 3.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}

bash testkit/env/install-deps.sh
if [ -z "${E2E_ONLY:-}" ]; then
  echo "== fmt and clippy"
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets --all-features -- -D warnings
  echo "== unit, actor and real-etcd tests"
  cargo test --workspace
  echo "== the operator image"
  bash testkit/env/check-image.sh
fi

echo "== end-to-end tests"
# shellcheck source=testkit/env/lib.sh
source testkit/env/lib.sh
if running "$LOCAL_ENV_DIR/run/operator.pid"; then
  echo "(reusing the local environment that is already up)"
else
  # Leftovers of an environment whose processes are gone (a reboot, an ended session)
  # would bring back old objects and certificates: start clean.
  bash testkit/env/local-down.sh >/dev/null 2>&1 || true
  trap 'bash testkit/env/local-down.sh' EXIT
fi
EXAMPLE='' bash testkit/env/local-up.sh
export KUBECONFIG="$LOCAL_ENV_DIR/kubeconfig"
cargo test -p etcd-operator-node --features e2e --test process_node
cargo test --features e2e --test e2e -- --test-threads=1
