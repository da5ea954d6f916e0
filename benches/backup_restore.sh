#!/usr/bin/env bash
# Backup throughput and restore time of the operator, each next to the same work done by
# hand on the same data in the same run:
#   backup:  floor = `etcdctl snapshot save` from the member into a local file, then that
#            file uploaded to the environment's S3 server with curl (SigV4): what a person
#            does by hand. Operator = a one-shot EtcdBackup by clusterName, from
#            `kubectl apply` until status.succeeded (the snapshot streamed to the store,
#            its sha256 and etcd's checksum verified, its metadata object written).
#   restore: floor = `etcdutl snapshot restore` of that file into a data directory and etcd
#            started on it (on loopback), until it answers `endpoint status` without
#            errors. Operator = an EtcdRestore of the operator's backup into a new 1-member
#            cluster, from `kubectl apply` until that cluster is Running with 1 ready member
#            (the snapshot fetched and verified in the seed's init container, restored,
#            etcd started).
# The data: a 1-member EtcdCluster filled with DATA_MIB MiB of values (256 KiB of random
# bytes each) through etcdctl from the host.
#
#   benches/backup_restore.sh                 # 100 MiB, one run
#   DATA_MIB=20 RUNS=3 benches/backup_restore.sh
#
# Environment: DATA_MIB (default 100), RUNS (default 1), FLOOR_NET (the floor etcd's /24 on
# loopback, default 127.0.201; its .1 must be free), TIMEOUT_S (default 300),
# LOCAL_ENV_DIR and ETCD_OPERATOR_CACHE as for testkit/env/local-up.sh (brought up here,
# a no-op when it is up). etcd 3.5.35 (etcdutl).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_TAG=backup-restore
DATA_MIB=${DATA_MIB:-100}
FLOOR_NET=${FLOOR_NET:-127.0.201}
TIMEOUT_S=${TIMEOUT_S:-300}
VERSION=3.5.35
BUCKET=etcd-backups
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
BIN=$CACHE/etcd/v$VERSION/bin

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$RUNS'"
[[ $DATA_MIB =~ ^[1-9][0-9]*$ ]] || die "DATA_MIB must be a positive integer, got '$DATA_MIB'"
for tool in etcd etcdctl etcdutl; do
    [[ -x $BIN/$tool ]] || die "no $BIN/$tool (testkit/env/build/build-binaries.sh etcd)"
done
FLOOR_IP=$FLOOR_NET.1
! ss -ltnH | awk '{ print $4 }' | grep -q "^$FLOOR_IP:" ||
    die "already listening on $FLOOR_IP; pick another FLOOR_NET"

WORK=$(mktemp -d /tmp/etcd-operator-backup-restore.XXXXXX)
NS=""
FLOOR_PID=""
cleanup() {
    [[ -z $FLOOR_PID ]] || { kill -KILL "$FLOOR_PID" 2>/dev/null; wait "$FLOOR_PID" 2>/dev/null; } || true
    delete_namespace
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ctl() { "$BIN/etcdctl" --endpoints="$1" --dial-timeout=2s --command-timeout=30s "${@:2}"; }
healthy() { [[ $(ctl "$1" endpoint status -w fields 2>/dev/null) == *'"Errors" : []'* ]]; }
s3() { tr -d '\n' <"$LOCAL_ENV_DIR/s3/$1"; }
mib_per_s() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", b / 1048576 / s }'; }

setup() {
    local_env_up
    NS=backup-restore-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
    kubectl create namespace "$NS" >/dev/null
    kubectl -n "$NS" create secret generic aws --from-literal=accessKey="$(s3 access-key)" \
        --from-literal=secretKey="$(s3 secret-key)" >/dev/null
    head -c $((256 * 1024)) /dev/urandom >"$WORK/value"
    log "namespace $NS"
}

# True when EtcdCluster $1 is Running with 1 ready member.
running() {
    [[ $(kubectl -n "$NS" get etcd "$1" -o jsonpath='{.status.phase} {.status.readyMembers}' 2>/dev/null) == "Running 1" ]]
}

# A 1-member EtcdCluster $1 filled with DATA_MIB MiB; prints its client URL.
filled_cluster() {
    local name=$1 ip i
    cluster_yaml "$name" 1 "$VERSION" | kubectl -n "$NS" apply -f - >/dev/null
    poll "EtcdCluster $name to be Running" running "$name"
    ip=$(kubectl -n "$NS" get pods -l "etcd_cluster=$name" -o jsonpath='{.items[0].status.podIP}')
    for ((i = 1; i <= DATA_MIB * 4; i++)); do
        ctl "http://$ip:2379" put "key-$i" <"$WORK/value" >/dev/null
    done
    echo "http://$ip:2379"
}

# Floor backup of the member at $1 into $WORK/floor.db and the bucket; RESULT = seconds.
floor_backup() {
    local start
    rm -f "$WORK/floor.db"
    start=$(now)
    ctl "$1" snapshot save "$WORK/floor.db" >/dev/null
    # SigV4 needs the payload's hash header; UNSIGNED-PAYLOAD spares hashing the file first.
    curl -sS --fail-with-body --aws-sigv4 "aws:amz:us-east-1:s3" \
        --user "$(s3 access-key):$(s3 secret-key)" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
        -T "$WORK/floor.db" "$(s3 endpoint)/$BUCKET/$NS/floor-$2.db" >/dev/null
    since "$start"
}

# The `s3` block of an EtcdBackup or EtcdRestore spec: path $1 on the local S3 server.
s3_store() {
    printf '  s3:\n    path: %s\n    awsSecret: aws\n    endpoint: %s\n    forcePathStyle: true' \
        "$1" "$(s3 endpoint)"
}

# Applies the $1 (a kind of this operator's API) named $2 whose spec is the lines $3.
apply_spec() {
    printf 'apiVersion: etcd.database.coreos.com/v1beta2\nkind: %s\nmetadata:\n  name: %s\nspec:\n%s\n' \
        "$1" "$2" "$3" | kubectl -n "$NS" apply -f - >/dev/null
}

succeeded() { [[ $(kubectl -n "$NS" get etcdbackup "$1" -o jsonpath='{.status.succeeded}' 2>/dev/null) == true ]]; }

# A one-shot EtcdBackup $1 of cluster $2; RESULT = seconds until it succeeded.
operator_backup() {
    local start
    start=$(now)
    apply_spec EtcdBackup "$1" "  clusterName: $2
  storageType: S3
$(s3_store "$BUCKET/$NS/$1")"
    poll "EtcdBackup $1 to succeed" succeeded "$1"
    since "$start"
}

# Restores $WORK/floor.db into a data directory and starts etcd on it; RESULT = seconds
# until it answers without errors.
floor_restore() {
    local start peer="http://$FLOOR_IP:2380" client="http://$FLOOR_IP:2379"
    rm -rf "$WORK/restored"
    start=$(now)
    env "${ENV_UNSET[@]}" "$BIN/etcdutl" snapshot restore "$WORK/floor.db" --data-dir "$WORK/restored" \
        --name r1 --initial-cluster "r1=$peer" --initial-advertise-peer-urls "$peer" >/dev/null 2>&1
    env "${ENV_UNSET[@]}" "$BIN/etcd" --name r1 --data-dir "$WORK/restored" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --initial-cluster "r1=$peer" >"$WORK/restored.log" 2>&1 &
    FLOOR_PID=$!
    poll "the restored floor etcd to answer" healthy "$client"
    since "$start"
    kill -KILL "$FLOOR_PID"
    wait "$FLOOR_PID" 2>/dev/null || true
    FLOOR_PID=""
}

# An EtcdRestore $1 of the snapshot at path $2 into a new 1-member cluster $1; RESULT =
# seconds until that cluster is Running.
operator_restore() {
    local start
    start=$(now)
    apply_spec EtcdRestore "$1" "  etcdCluster:
    name: $1
  backupStorageType: S3
  clusterSpec:
    size: 1
    version: \"$VERSION\"
$(s3_store "$2")"
    poll "EtcdCluster $1 restored and Running" running "$1"
    since "$start"
}

declare -A FLOOR=() OPER=() SIZE=()
setup
for ((run = 1; run <= RUNS; run++)); do
    log "run $run/$RUNS: filling a 1-member cluster with $DATA_MIB MiB"
    url=$(filled_cluster "d-$run")
    floor_backup "$url" "$run"; FLOOR[backup]+="$RESULT "
    SIZE[floor]=$(stat -c %s "$WORK/floor.db")
    log "floor backup: $RESULT s, $(mib_per_s "${SIZE[floor]}" "$RESULT") MiB/s"
    operator_backup "b-$run" "d-$run"; OPER[backup]+="$RESULT "
    SIZE[operator]=$(kubectl -n "$NS" get etcdbackup "b-$run" -o jsonpath='{.status.lastBackupSize}')
    path=$(kubectl -n "$NS" get etcdbackup "b-$run" -o jsonpath='{.status.lastBackupPath}')
    log "operator backup: $RESULT s, $(mib_per_s "${SIZE[operator]}" "$RESULT") MiB/s ($path)"
    floor_restore; FLOOR[restore]+="$RESULT "
    log "floor restore: $RESULT s"
    operator_restore "r-$run" "$path"; OPER[restore]+="$RESULT "
    log "operator restore: $RESULT s"
    kubectl -n "$NS" delete etcd "d-$run" "r-$run" >/dev/null
    kubectl -n "$NS" delete etcdbackup "b-$run" >/dev/null
    kubectl -n "$NS" delete etcdrestore "r-$run" >/dev/null
done

echo
echo "etcd-operator backup and restore, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) ($(nproc) cores)"
echo "etcd $VERSION; $DATA_MIB MiB of values; snapshot $((SIZE[floor] / 1048576)) MiB; runs: $RUNS (median shown)"
echo
printf '%-34s | %8s | %10s | %6s\n' scenario "floor s" "operator s" ratio
printf '%-34s-|-%8s-|-%10s-|-%6s\n' "" "" "" "" | tr ' ' -
for s in backup restore; do
    case $s in
        backup) label="backup to S3 (snapshot save + put)" ;;
        restore) label="restore, 1 member, until serving" ;;
    esac
    table_row "$label" "${FLOOR[$s]}" "${OPER[$s]}" 34
done
f=$(median "${FLOOR[backup]}")
o=$(median "${OPER[backup]}")
echo
echo "backup throughput: floor $(mib_per_s "${SIZE[floor]}" "$f") MiB/s, operator $(mib_per_s "${SIZE[operator]}" "$o") MiB/s"
