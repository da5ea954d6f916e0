#!/usr/bin/env bash
# The S3-compatible object store of the local environment: versitygw (Apache-2.0, built by
# build-binaries.sh s3) serving a directory, on the host's address on the pod network, so
# that the operator's pods and the tests on the host reach the same server.
#
#   testkit/env/store/s3.sh up     # start it (a no-op when running); waits until it listens
#   testkit/env/store/s3.sh down   # stop it (its files go with LOCAL_ENV_DIR)
#
# What the tests and examples read:
#   $LOCAL_ENV_DIR/s3/endpoint      http://10.255.0.1:7480
#   $LOCAL_ENV_DIR/s3/access-key    the root user's keys (SigV4)
#   $LOCAL_ENV_DIR/s3/secret-key
#   $LOCAL_ENV_DIR/s3/root/<bucket> the buckets' directories (etcd-backups is made at start)
# Its log: $LOCAL_ENV_DIR/logs/s3.log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
BIN="$CACHE/versitygw/$VERSITYGW_VERSION/bin/versitygw"
# The host's address on the pod network (podnet.sh), and a port of ours.
S3_ADDRESS=${S3_ADDRESS:-10.255.0.1:7480}
S3_DIR="$LOCAL_ENV_DIR/s3"
PIDFILE="$LOCAL_ENV_DIR/run/s3.pid"
ACCESS_KEY=etcd-operator-local
SECRET_KEY=etcd-operator-local-secret
BUCKETS=(etcd-backups)

# shellcheck source=testkit/env/lib.sh
source "$ROOT/testkit/env/lib.sh"

up() {
    [[ -x $BIN ]] || VERSITYGW_VERSION=$VERSITYGW_VERSION bash "$ROOT/testkit/env/build/build-binaries.sh" s3
    mkdir -p "$S3_DIR/root" "$LOCAL_ENV_DIR/run" "$LOCAL_ENV_DIR/logs"
    local bucket
    for bucket in "${BUCKETS[@]}"; do mkdir -p "$S3_DIR/root/$bucket"; done
    printf 'http://%s\n' "$S3_ADDRESS" >"$S3_DIR/endpoint"
    printf '%s\n' "$ACCESS_KEY" >"$S3_DIR/access-key"
    printf '%s\n' "$SECRET_KEY" >"$S3_DIR/secret-key"
    if ! running "$PIDFILE"; then
        echo "== starting the S3 server (versitygw $VERSITYGW_VERSION) at http://$S3_ADDRESS"
        setsid "$BIN" --access "$ACCESS_KEY" --secret "$SECRET_KEY" --port "$S3_ADDRESS" \
            --quiet posix "$S3_DIR/root" >"$LOCAL_ENV_DIR/logs/s3.log" 2>&1 </dev/null &
        echo $! >"$PIDFILE"
    fi
    local host=${S3_ADDRESS%:*} port=${S3_ADDRESS##*:}
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
        running "$PIDFILE" || break
        sleep 0.1
    done
    tail -20 "$LOCAL_ENV_DIR/logs/s3.log" >&2 || true
    echo "the S3 server did not listen on $S3_ADDRESS" >&2
    exit 1
}

case ${1:-} in
up) up ;;
down) stop_pidfile "$PIDFILE" ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
