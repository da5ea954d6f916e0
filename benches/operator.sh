# shellcheck shell=bash
# The operator's side shared by benches/timings.sh and benches/fleet.sh: the local
# environment, a namespace $LOG_TAG-<random> (NS) and EtcdClusters' status. Source it after
# benches/lib.sh and benches/floor.sh (operator_follower uses follower_of); uses ROOT,
# WORK and LOCAL_ENV_DIR.

operator_setup() {
    local_env_up
    NS=$LOG_TAG-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
    kubectl create namespace "$NS" >/dev/null
    log "operator: namespace $NS"
}

# ---------------------------------------------------------------------------
# Watching: the operator's side is seen through one `kubectl get -w` stream per kind,
# each change a line in a file under WATCH_DIR (set by the script), not a `kubectl get`
# per poll. A kubectl every 100 ms costs 0.06 to 0.1 s of CPU each, several a second, on
# the operator's side only (the floor's etcds are asked directly or write files), and
# queues on the API server the scenario loads.
# ---------------------------------------------------------------------------
declare -A WATCH=()   # watch name -> the pid of its kubectl

# shellcheck disable=SC2034 # both lines: used by the scripts that source this file
# An EtcdCluster's line: name|phase|readyMembers|currentVersion|targetVersion|ready names.
CLUSTER_LINE='{.metadata.name}|{.status.phase}|{.status.readyMembers}|{.status.currentVersion}|{.status.targetVersion}|{.status.members.ready[*]}'
# shellcheck disable=SC2034
# A pod's line: name|uid|Ready|restarts of its first container|cluster|deletionTimestamp.
POD_LINE='{.metadata.name}|{.metadata.uid}|{.status.conditions[?(@.type=="Ready")].status}|{.status.containerStatuses[0].restartCount}|{.metadata.labels.etcd_cluster}|{.metadata.deletionTimestamp}'

# Starts watch $1 of NS: `kubectl get $2 -w`, each change a line "$3" (a jsonpath for one
# object, its name first, fields separated by "|"), into $WATCH_DIR/watch-$1.
watch_start() {
    local name=$1 kind=$2 template=$3
    watch_stop "$name"
    kubectl -n "$NS" get "$kind" -w -o jsonpath="$template{\"\\n\"}" \
        >"$WATCH_DIR/watch-$name" 2>"$WATCH_DIR/watch-$name.err" &
    WATCH[$name]=$!
}

# Stops watch $1 (a kubectl this script started) if it runs.
watch_stop() {
    local pid=${WATCH[$1]:-}
    [[ -n $pid ]] || return 0
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    unset "WATCH[$1]"
}

watch_stop_all() {
    local w
    for w in "${!WATCH[@]}"; do watch_stop "$w"; done
}

# The last line of each object of watch $1; dies when its kubectl has stopped (a watch
# that ended can no longer tell a change).
watch_last() {
    local pid=${WATCH[$1]:-}
    if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
        die "the watch of $1 has stopped: $(tail -3 "$WATCH_DIR/watch-$1.err" 2>/dev/null)"
    fi
    # Complete lines only: the kubectl may be writing the next one.
    head -n "$(wc -l <"$WATCH_DIR/watch-$1")" "$WATCH_DIR/watch-$1" |
        awk -F'|' '{ last[$1] = $0 } END { for (n in last) print last[n] }'
}

# "phase readyMembers ready-member-names..." of EtcdCluster $1, as watch "clusters" saw it
# last.
status_of() {
    watch_last clusters | awk -F'|' -v name="$1" '$1 == name { print $2, $3, $6 }'
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

# The base URL of the HTTPS server of the operator's leader (the holder of its Lease).
operator_url() {
    local holder ip
    holder=$(kubectl -n etcd-operator get lease etcd-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null) || return 1
    ip=$(kubectl -n etcd-operator get pod "$holder" -o jsonpath='{.status.podIP}' 2>/dev/null) || return 1
    [[ -n $ip ]] && echo "https://$ip:8443"
}

# Milliseconds since the Unix epoch, by this machine's clock (the local environment's
# pods, the operator's among them, are processes on this machine: the same clock).
now_ms() { date +%s%3N; }

# The leader's step trace (`/debug/trace`, JSON) with the query $1 (e.g. "?cluster=NS/NAME");
# fails when the leader cannot be found or does not answer.
operator_trace_json() {
    local url
    url=$(operator_url) || return 1
    operator_curl -sf --max-time 5 "$url/debug/trace${1:-}"
}
