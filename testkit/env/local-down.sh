#!/usr/bin/env bash
# Stops everything testkit/env/local-up.sh started (by the pids it recorded): the node
# (which stops its pods' processes, the operator's among them, and removes its /etc/hosts
# entries), then the control plane; and removes LOCAL_ENV_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
RUN="$LOCAL_ENV_DIR/run"
# shellcheck source=testkit/env/lib.sh
source "$ROOT/testkit/env/lib.sh"

stop() {
  local pidfile="$RUN/$1.pid" pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if running "$pidfile"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do running "$pidfile" || break; sleep 0.1; done
    if running "$pidfile"; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
}
stop node
bash "$ROOT/testkit/env/control-plane.sh" down
# The node's lock on /etc/hosts, once no node is left to share it.
if ! pgrep -f 'etcd-operator-node run' >/dev/null; then
  rm -f "${TMPDIR:-/tmp}/etcd-operator-node.lock-etc-hosts"
fi
