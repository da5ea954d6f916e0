#!/usr/bin/env bash
# Prints the operator image's figures (`make image-figures`):
#   - the exported archive's size (gzip layers) and the unpacked root filesystem's size
#     (du -sb), and the binary's;
#   - with --rss: the operator's resident memory as its Deployment runs it, idle, with one
#     Ready example cluster. It brings the local environment up (testkit/env/local-up.sh,
#     which installs the operator from manifests/ with this image and applies EXAMPLE,
#     default examples/local-3.5.yaml, waiting until it is Ready), under the end-to-end
#     lock /tmp/etcd-e2e.lock; lets it idle IDLE_SECONDS (default 60) and reads VmRSS /
#     VmHWM of the leader pod's process from /proc/<pid>/status; then takes the
#     environment down.
# It sits at the top level and not in image/: with --rss it runs the whole environment,
# which no script of one part (a subdirectory) does.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
export EXAMPLE=${EXAMPLE:-examples/local-3.5.yaml}
IDLE_SECONDS=${IDLE_SECONDS:-60}
LOCK=/tmp/etcd-e2e.lock
RSS=
case ${1:-} in
  --rss) RSS=1 ;;
  "") ;;
  *) echo "usage: $0 [--rss]" >&2; exit 2 ;;
esac

# Everything that takes minutes happens before the environment's lock is taken.
if [ -z "${IMAGE_FIGURES_LOCKED:-}" ]; then
  archive=$(bash testkit/env/image/build-image.sh)
  if [ -n "$RSS" ]; then
    echo "== building what local-up.sh runs (before taking $LOCK)" >&2
    cargo build -p etcd-operator-resizer --bin etcd-operator-resizer --quiet
    exec env IMAGE_FIGURES_LOCKED=1 flock "$LOCK" "$0" "$@"
  fi
else
  archive=$(bash testkit/env/image/build-image.sh 2>/dev/null)
fi

WORK=$(mktemp -d)
cleanup() {
  if [ -n "$RSS" ]; then bash testkit/env/local-down.sh >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
bash testkit/env/runtime/unpack-image.sh "$archive" "$WORK/image" 2>/dev/null
rootfs="$WORK/image/rootfs"
config="$WORK/image/config.json"

sizes() {
  echo "image:                        $(jq -r .image "$config") ($(jq -r .manifestDigest "$config"))"
  echo "archive (OCI, gzip layers):   $(stat -c %s "$archive") bytes"
  echo "root filesystem (du -sb):     $(du -sb "$rootfs" | cut -f1) bytes"
  echo "  of which the binary:        $(stat -c %s "$rootfs/usr/local/bin/etcd-operator") bytes"
}

rss() {
  if bash testkit/env/node/nodes.sh status >/dev/null 2>&1; then
    echo "the local environment is up; take it down first (make down)" >&2
    exit 1
  fi
  bash testkit/env/local-down.sh >/dev/null 2>&1 || true
  bash testkit/env/local-up.sh >&2
  export KUBECONFIG="$LOCAL_ENV_DIR/kubeconfig"
  local leader name pid status
  leader=$(kubectl -n etcd-operator get lease etcd-operator -o jsonpath='{.spec.holderIdentity}')
  name=$(kubectl apply -f "$EXAMPLE" -o name)
  echo "== $name is Ready; the leader is pod $leader; idling $IDLE_SECONDS s" >&2
  sleep "$IDLE_SECONDS"
  pid=$(bash testkit/env/node/nodes.sh pid etcd-operator "$leader" operator)
  status=/proc/$pid/status
  [ -r "$status" ] || { echo "the leader's process ($pid) is gone" >&2; exit 1; }
  echo "operator pod $leader (image $(kubectl -n etcd-operator get pod "$leader" -o jsonpath='{.spec.containers[0].image}')), uid $(awk '/^Uid:/ { print $2 }' "$status"), idle ${IDLE_SECONDS} s leading, with $name Ready ($(kubectl get "$name" -o jsonpath='{.spec.size}') members):"
  echo "  VmRSS: $(awk '/^VmRSS:/ { print $2, $3 }' "$status")"
  echo "  VmHWM: $(awk '/^VmHWM:/ { print $2, $3 }' "$status")"
  echo "  Threads: $(awk '/^Threads:/ { print $2 }' "$status")"
}

sizes
if [ -n "$RSS" ]; then rss; fi
