#!/usr/bin/env bash
# Prints the operator image's figures (`make image-figures`):
#   - the exported archive's size (gzip layers) and the unpacked root filesystem's size
#     (du -sb), and the binary's;
#   - with --rss: the operator's resident memory when it runs from the image, idle, with
#     one Ready example cluster. It brings the local environment up (EXAMPLE=, under the
#     end-to-end lock /tmp/etcd-e2e.lock), stops the host-process operator local-up.sh
#     started, runs the image's entrypoint chrooted into the unpacked image as its user
#     (65532:65532), with the Deployment's arguments and environment and an in-cluster
#     ServiceAccount token mounted read-only where kubelets mount it, applies EXAMPLE
#     (default examples/local-3.5.yaml), waits until it is Running with every member
#     ready, lets it idle IDLE_SECONDS (default 60) and reads VmRSS / VmHWM from
#     /proc/<pid>/status; then stops it and takes the environment down.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
EXAMPLE=${EXAMPLE:-examples/local-3.5.yaml}
IDLE_SECONDS=${IDLE_SECONDS:-60}
HTTP=127.0.0.1:18080
LOCK=/tmp/etcd-e2e.lock
RSS=
case ${1:-} in
  --rss) RSS=1 ;;
  "") ;;
  *) echo "usage: $0 [--rss]" >&2; exit 2 ;;
esac

# Everything that takes minutes happens before the environment's lock is taken.
if [ -z "${IMAGE_FIGURES_LOCKED:-}" ]; then
  archive=$(bash testkit/env/build-image.sh)
  if [ -n "$RSS" ]; then
    echo "== building what local-up.sh runs (before taking $LOCK)" >&2
    cargo build --workspace --bins --quiet
    exec env IMAGE_FIGURES_LOCKED=1 flock "$LOCK" "$0" "$@"
  fi
else
  archive=$(bash testkit/env/build-image.sh 2>/dev/null)
fi

WORK=$(mktemp -d)
OPERATOR_PID=
HOSTS_SYNC_PID=
cleanup() {
  if [ -n "$OPERATOR_PID" ] && [ -e "/proc/$OPERATOR_PID" ]; then
    kill -TERM "$OPERATOR_PID" 2>/dev/null || true
  fi
  if [ -n "$HOSTS_SYNC_PID" ]; then kill "$HOSTS_SYNC_PID" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  if [ -n "$RSS" ]; then bash testkit/env/local-down.sh >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
bash testkit/env/unpack-image.sh "$archive" "$WORK/image" 2>/dev/null
rootfs="$WORK/image/rootfs"
config="$WORK/image/config.json"

sizes() {
  echo "image:                        $(jq -r .image "$config") ($(jq -r .manifestDigest "$config"))"
  echo "archive (OCI, gzip layers):   $(stat -c %s "$archive") bytes"
  echo "root filesystem (du -sb):     $(du -sb "$rootfs" | cut -f1) bytes"
  echo "  of which the binary:        $(stat -c %s "$rootfs/usr/local/bin/etcd-operator") bytes"
}

# start_operator: runs the image's entrypoint and cmd as a kubelet would: chrooted, as
# the image's user, with the image's environment plus the Deployment's, the
# ServiceAccount volume and a hosts file. Sets OPERATOR_PID to the operator's own pid.
# The hosts file is a copy of the host's, kept in step (rewritten in place, so the bind
# mount sees it): the process node publishes the members' DNS names there, and renames
# a new /etc/hosts into place, which a bind mount of /etc/hosts itself would not follow.
start_operator() {
  local sa="$WORK/serviceaccount" mnt=var/run/secrets/kubernetes.io/serviceaccount
  local -a cmd env_vars
  mkdir -p "$sa" "$rootfs/$mnt"
  cp /etc/hosts "$WORK/hosts"
  touch "$rootfs/etc/hosts"
  (
    while sleep 0.5; do
      cmp -s /etc/hosts "$WORK/hosts" || cat /etc/hosts >"$WORK/hosts"
    done
  ) &
  HOSTS_SYNC_PID=$!
  kubectl create token etcd-operator -n etcd-operator --duration=1h >"$sa/token"
  kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
    base64 -d >"$sa/ca.crt"
  echo etcd-operator >"$sa/namespace"
  chmod 0644 "$sa"/*
  mapfile -t cmd < <(jq -r '.entrypoint[], .cmd[]' "$config")
  mapfile -t env_vars < <(jq -r '.env[]' "$config")
  env_vars+=(KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=16443
    POD_NAME=image-operator POD_NAMESPACE=etcd-operator LOG_FORMAT=json)
  # shellcheck disable=SC2016
  env -i "${env_vars[@]}" "$(command -v unshare)" --mount --fork "$(command -v bash)" -c \
    'mount --bind -o ro "$1" "$2" && mount --bind -o ro "$3" "$4" && shift 4 && exec chroot "$@"' \
    mount "$sa" "$rootfs/$mnt" "$WORK/hosts" "$rootfs/etc/hosts" --userspec="$(jq -r .user "$config")" "$rootfs" \
    "${cmd[@]}" --lease-namespace=etcd-operator --listen="$HTTP" \
    >"$WORK/operator.log" 2>&1 </dev/null &
  local unshare_pid=$!
  for _ in $(seq 50); do
    OPERATOR_PID=$(cat "/proc/$unshare_pid/task/$unshare_pid/children" 2>/dev/null | tr -d ' ')
    [ -n "$OPERATOR_PID" ] && [ "$(readlink "/proc/$OPERATOR_PID/exe")" = "$rootfs/usr/local/bin/etcd-operator" ] && return 0
    sleep 0.1
  done
  cat "$WORK/operator.log" >&2
  echo "the operator did not start from the image" >&2
  return 1
}

# wait_ready NAME: until the cluster is Running with spec.size ready members (180 s).
wait_ready() {
  local size phase ready
  size=$(kubectl get "$1" -o jsonpath='{.spec.size}')
  for _ in $(seq 180); do
    phase=$(kubectl get "$1" -o jsonpath='{.status.phase}')
    ready=$(kubectl get "$1" -o jsonpath='{.status.readyMembers}')
    [ "$phase" = Running ] && [ "$ready" = "$size" ] && return 0
    sleep 1
  done
  tail -20 "$WORK/operator.log" >&2
  echo "$1 is not Ready: phase '$phase', $ready of $size members ready" >&2
  return 1
}

rss() {
  # shellcheck source=testkit/env/lib.sh
  source testkit/env/lib.sh
  if running "$LOCAL_ENV_DIR/run/operator.pid"; then
    echo "the local environment is up; take it down first (make down)" >&2
    exit 1
  fi
  bash testkit/env/local-down.sh >/dev/null 2>&1 || true
  EXAMPLE='' bash testkit/env/local-up.sh >&2
  export KUBECONFIG="$LOCAL_ENV_DIR/kubeconfig"
  local host_operator
  host_operator=$(cat "$LOCAL_ENV_DIR/run/operator.pid")
  echo "== stopping the host-process operator ($host_operator); it gives back the Lease" >&2
  kill -TERM "$host_operator"
  for _ in $(seq 150); do running "$LOCAL_ENV_DIR/run/operator.pid" || break; sleep 0.1; done
  ! running "$LOCAL_ENV_DIR/run/operator.pid" || { echo "the host operator did not stop" >&2; exit 1; }
  start_operator
  for _ in $(seq 60); do curl -fsS "http://$HTTP/readyz" >/dev/null 2>&1 && break; sleep 1; done
  curl -fsS "http://$HTTP/readyz" >/dev/null || { tail -20 "$WORK/operator.log" >&2; exit 1; }
  local name
  name=$(kubectl apply -f "$EXAMPLE" -o name)
  echo "== operator $OPERATOR_PID (uid $(awk '/^Uid:/ { print $2 }' "/proc/$OPERATOR_PID/status")) from the image; applied $EXAMPLE ($name)" >&2
  wait_ready "$name"
  curl -fsS "http://$HTTP/debug/actors" | grep -q '"leading":true' ||
    echo "warning: /debug/actors does not show this operator leading" >&2
  echo "== $name is Ready; idling $IDLE_SECONDS s" >&2
  sleep "$IDLE_SECONDS"
  kill -0 "$OPERATOR_PID" || { tail -20 "$WORK/operator.log" >&2; exit 1; }
  echo "operator from the image, uid $(awk '/^Uid:/ { print $2 }' "/proc/$OPERATOR_PID/status"), idle ${IDLE_SECONDS} s with $name Ready ($(kubectl get "$name" -o jsonpath='{.spec.size}') members):"
  echo "  VmRSS: $(awk '/^VmRSS:/ { print $2, $3 }' "/proc/$OPERATOR_PID/status")"
  echo "  VmHWM: $(awk '/^VmHWM:/ { print $2, $3 }' "/proc/$OPERATOR_PID/status")"
  echo "  Threads: $(awk '/^Threads:/ { print $2 }' "/proc/$OPERATOR_PID/status")"
}

sizes
if [ -n "$RSS" ]; then rss; fi
