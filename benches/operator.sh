# shellcheck shell=bash
# The operator's side shared by benches/timings.sh and benches/fleet.sh: the local
# environment, a namespace $LOG_TAG-<random> (NS) and EtcdClusters' status. Source it after
# benches/lib.sh and benches/floor.sh (operator_follower uses follower_of); uses ROOT,
# WORK and LOCAL_ENV_DIR.

NODE_BIN=$LOCAL_ENV_DIR/bin/etcd-operator-node

operator_setup() {
    log "bringing up the local environment (EXAMPLE= testkit/env/local-up.sh; a no-op when up)"
    # Without ETCD_VERSION: the store etcd it may start would take it for a flag.
    (cd "$ROOT" && env -u ETCD_VERSION EXAMPLE='' bash testkit/env/local-up.sh) >"$WORK/local-up.log" 2>&1 ||
        die "testkit/env/local-up.sh failed: $(tail -20 "$WORK/local-up.log")"
    export KUBECONFIG=$LOCAL_ENV_DIR/kubeconfig
    [[ -x $NODE_BIN ]] || (cd "$ROOT" && cargo build --workspace --bins --quiet)
    NS=$LOG_TAG-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
    kubectl create namespace "$NS" >/dev/null
    log "operator: namespace $NS"
}

# "phase readyMembers ready-member-names..." of EtcdCluster $1.
status_of() {
    kubectl -n "$NS" get etcd "$1" \
        -o jsonpath='{.status.phase} {.status.readyMembers} {.status.members.ready[*]}' 2>/dev/null
}

# True when EtcdCluster $1 is Running with $2 ready members, none of them named $3.
operator_ready() {
    local phase ready names
    read -r phase ready names <<<"$(status_of "$1")" || true
    [[ $phase == Running && $ready == "$2" ]] || return 1
    [[ -z ${3:-} || " $names " != *" $3 "* ]]
}

# The pod name of a follower of the ready EtcdCluster $1.
operator_follower() {
    local pods endpoints victim
    # name=podIP for each member pod; members listen on their pod's address.
    pods=$(kubectl -n "$NS" get pods -l "app=etcd,etcd_cluster=$1" \
        -o jsonpath='{range .items[*]}{.metadata.name}={.status.podIP}{"\n"}{end}')
    endpoints=$(sed 's/^.*=\(.*\)$/http:\/\/\1:2379/' <<<"$pods" | paste -sd,)
    victim=$(follower_of "$endpoints")
    victim=${victim#http://}
    victim=$(awk -F= -v ip="${victim%:2379}" '$2 == ip { print $1; exit }' <<<"$pods")
    [[ -n $victim ]] || die "no follower found among $endpoints"
    echo "$victim"
}

# Deletes EtcdCluster $1 and waits until its pods are gone, so the next measurement
# runs on an idle machine.
no_pods() { [[ -z $(kubectl -n "$NS" get pods -l "etcd_cluster=$1" -o name 2>/dev/null) ]]; }
operator_delete() {
    kubectl -n "$NS" delete etcd "$1" >/dev/null
    poll "the pods of $1 to be deleted" no_pods "$1"
}

# The base URL of the HTTP server of the operator's leader (the holder of its Lease).
operator_url() {
    local holder ip
    holder=$(kubectl -n etcd-operator get lease etcd-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null) || return 1
    ip=$(kubectl -n etcd-operator get pod "$holder" -o jsonpath='{.status.podIP}' 2>/dev/null) || return 1
    [[ -n $ip ]] && echo "http://$ip:8080"
}

# Milliseconds since the Unix epoch, by this machine's clock (the local environment's
# pods, the operator's among them, are processes on this machine: the same clock).
now_ms() { date +%s%3N; }

# The leader's step trace (`/debug/trace`, JSON) with the query $1 (e.g. "?cluster=NS/NAME");
# fails when the leader cannot be found or does not answer.
operator_trace_json() {
    local url
    url=$(operator_url) || return 1
    curl -sf --max-time 5 "$url/debug/trace${1:-}"
}
