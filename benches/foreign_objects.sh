#!/usr/bin/env bash
# What objects that only look like the operator's cost it. Anyone who may create Services
# in a namespace can label them exactly as the operator labels its own (app=etcd,
# app.kubernetes.io/managed-by=etcd-operator, etcd_cluster=NAME); the operator keeps only
# objects an EtcdCluster controls (src/controller/ownership.rs), so such objects should
# cost it next to nothing.
#
#   benches/foreign_objects.sh                 # 1,000 foreign Services of 4 KiB each
#   FOREIGN=5000 ANNOTATION_BYTES=1024 benches/foreign_objects.sh
#
# Against the local environment (`EXAMPLE= testkit/env/local-up.sh`, called here; a fast
# no-op when it is up), on the leader's process (the Lease holder; its host pid from
# `nodes.sh pid`): VmRSS (the median of SAMPLES readings a second apart) and
# etcd_operator_cached_objects{kind="Service"} from its /metrics, first with nothing
# foreign present, then SETTLE_S seconds after FOREIGN headless Services labelled as the
# operator's but owned by nobody (each with an ANNOTATION_BYTES annotation) were created
# in a namespace foreign-<random>. Prints both and the RSS ratio (with / without, the
# same run). The namespace is deleted at the end (also on failure).
#
# Environment:
#   FOREIGN           how many foreign Services (default 1000)
#   ANNOTATION_BYTES  size of each one's annotation (default 4096)
#   SETTLE_S          seconds after creating them before measuring (default 20)
#   SAMPLES           RSS readings per measurement (default 5)
#   TIMEOUT_S         give up on any single wait after this many seconds (default 600)
#   LOCAL_ENV_DIR, ETCD_OPERATOR_CACHE   as for testkit/env/local-up.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FOREIGN=${FOREIGN:-1000}
ANNOTATION_BYTES=${ANNOTATION_BYTES:-4096}
SETTLE_S=${SETTLE_S:-20}
SAMPLES=${SAMPLES:-5}
TIMEOUT_S=${TIMEOUT_S:-600}

LOG_TAG=foreign
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

for v in FOREIGN ANNOTATION_BYTES SETTLE_S SAMPLES TIMEOUT_S; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done

WORK=$(mktemp -d /tmp/etcd-operator-foreign.XXXXXX)
NS=""
cleanup() {
    [[ -z $NS ]] || kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

local_env_up

# The median VmRSS of the leader over SAMPLES readings, in MiB.
median_rss() {
    local i samples=()
    for ((i = 0; i < SAMPLES; i++)); do
        samples+=("$(rss_mib)")
        sleep 1
    done
    median "${samples[*]}"
}

# The operator's etcd_operator_cached_objects{kind="Service"}, or "n/a" when it has none.
cached_services() {
    operator_curl -fsS --max-time 10 "$METRICS" |
        awk '$1 == "etcd_operator_cached_objects{kind=\"Service\"}" { v = $2 } END { print (v == "" ? "n/a" : v) }'
}

# FOREIGN headless Services labelled as the operator's, owned by nobody, as one List.
write_foreign() {
    local i filler
    filler=$(head -c "$ANNOTATION_BYTES" /dev/zero | tr '\0' x)
    {
        printf 'apiVersion: v1\nkind: List\nitems:\n'
        for ((i = 0; i < FOREIGN; i++)); do
            printf -- '- apiVersion: v1\n  kind: Service\n  metadata:\n    name: look-alike-%d\n' "$i"
            printf '    labels: {app: etcd, app.kubernetes.io/managed-by: etcd-operator, etcd_cluster: look-alike-%d}\n' "$i"
            printf '    annotations: {filler: %s}\n' "$filler"
            printf '  spec:\n    clusterIP: None\n    ports: [{name: client, port: 2379}]\n'
        done
    } >"$WORK/foreign.yaml"
}

find_leader
log "leader $LEADER (pid $PID): measuring without foreign objects"
rss0=$(median_rss)
cached0=$(cached_services)

NS=foreign-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
kubectl create namespace "$NS" >/dev/null
write_foreign
log "creating $FOREIGN foreign Services of ${ANNOTATION_BYTES} B in $NS"
start=$(now)
kubectl -n "$NS" create -f "$WORK/foreign.yaml" >/dev/null
since "$start"
log "created in ${RESULT}s; settling ${SETTLE_S}s"
sleep "$SETTLE_S"
find_leader
rss1=$(median_rss)
cached1=$(cached_services)

echo
echo "etcd-operator and foreign labelled objects, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) ($(nproc) cores)"
echo "$FOREIGN headless Services labelled as the operator's, owned by nobody, ${ANNOTATION_BYTES} B annotation each;"
echo "leader $LEADER, median of $SAMPLES VmRSS readings, ${SETTLE_S}s after they were created"
echo
printf '%-36s | %10s | %10s | %6s\n' measure without with ratio
printf '%-36s-|-%10s-|-%10s-|-%6s\n' "" "" "" "" | tr ' ' -
printf '%-36s | %10s | %10s | %6s\n' "operator RSS, MiB" "$rss0" "$rss1" "$(awk -v a="$rss0" -v b="$rss1" 'BEGIN { printf "%.2fx", b / a }')"
printf '%-36s | %10s | %10s | %6s\n' "Services in the operator's cache" "$cached0" "$cached1" "-"
