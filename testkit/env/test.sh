#!/usr/bin/env bash
# The project's test command (README, `make test`, and CI):
#   1. fmt and clippy;
#   2. unit, actor and real-etcd tests (`cargo test --workspace`);
#   3. the operator image (testkit/env/image/check-image.sh): built (cached), exactly the
#      expected files, no shell, the binary starts in it as 65532;
#   4. the Helm chart: helm lint --strict, its values schema, and manifests/ equal to what
#      the chart renders (testkit/env/chart.sh check);
#   5. the end-to-end suite against a real control plane, three real kubelets and the
#      operator (testkit/env/local-up.sh), torn down afterwards unless it was already up,
#      after server-side dry runs of the chart's renders (testkit/env/chart.sh dry-run).
# E2E_ONLY=1 skips 1 to 4.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}

bash testkit/env/build/install-deps.sh
# helm for the chart checks; built here and not by `make up`, which does not need it (about
# 4 to 7 minutes with Go's caches empty, 10 s with them warm, nothing once cached); and the
# S3 server the backup tests store into (about 2 minutes cold); the tool the corruption
# tests change a member's data with (seconds); and promtool, which checks the chart's
# alert rules (about 6 minutes cold).
bash testkit/env/build/build-binaries.sh helm s3 corrupt promtool
if [ -z "${E2E_ONLY:-}" ]; then
  echo "== fmt and clippy"
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets --all-features -- -D warnings
  echo "== unit, actor and real-etcd tests"
  cargo test --workspace
  echo "== the operator image"
  bash testkit/env/image/check-image.sh
  echo "== the Helm chart: lint, values schema, manifests/ rendered from it"
  bash testkit/env/chart.sh check
fi

echo "== end-to-end tests"
if bash testkit/env/node/nodes.sh status >/dev/null 2>&1; then
  echo "(reusing the local environment that is already up)"
else
  # Leftovers of an environment whose processes are gone (a reboot, an ended session)
  # would bring back old objects and certificates: start clean.
  bash testkit/env/local-down.sh >/dev/null 2>&1 || true
  trap 'bash testkit/env/local-down.sh' EXIT
fi
EXAMPLE='' bash testkit/env/local-up.sh
export KUBECONFIG="$LOCAL_ENV_DIR/kubeconfig"
echo "== the Helm chart: server-side dry runs of its renders"
bash testkit/env/chart.sh dry-run
cargo test --features e2e --test e2e -- --test-threads=1
