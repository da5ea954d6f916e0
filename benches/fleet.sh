#!/usr/bin/env bash
# shellcheck disable=SC2030,SC2031 # each floor cluster's subshell sets its own FLOOR_NET, WORK, PID
# Many clusters at once (issue 13): how long the operator takes to bring up, repair and
# upgrade a fleet of EtcdClusters, each next to the FLOOR measured in the same run: the
# same etcd binary run on this machine by hand with etcdctl (benches/floor.sh, the floor of
# benches/timings.sh), as many clusters as the operator gets, all at once.
#
#   benches/fleet.sh                        # floor + operator, etcd 3.5.35, one run
#   SKIP_OPERATOR=1 benches/fleet.sh        # floor only (touches nothing shared)
#   RUNS=3 UPGRADE_TO=3.6.16 benches/fleet.sh
#
# Every floor cluster is run by its own background subshell, on its own /24 of loopback
# (cluster k = 0, 1, ... on 127.0.(FLEET_NET+k).N, members m1, m2, ... on .1, .2, ...), its
# etcd pids recorded in a file so that every process is killed on exit, errors included.
# Each subshell writes the time it finished its part; a scenario's time is from the
# moment the script started it (one clock) until the LAST cluster finished.
#   20 x 1 at once: the floor starts 20 single-member clusters at once (--initial-cluster-
#     state new), each ready when started and healthy (timings.sh's test); the operator:
#     20 EtcdClusters of size 1 made at once (one POST each, all in flight together, as
#     the environment's admin), timed from the POSTs until every one is Running with 1
#     ready member. Then a second floor, Kubernetes': the objects the operator made for
#     them (each seed's pod, both Services, the budget) saved, the EtcdClusters deleted,
#     and the saved objects made again the same way, timed until every pod is Ready: what
#     the control plane and the nodes need for them on this machine, no operator at work.
#     Then the operator's 20 again, made by one `kubectl apply` of a multi-document YAML
#     as a user would (kubectl sends them one after the other), against etcd's floor.
#   10 x 3 at once: the floor bootstraps 10 three-member clusters concurrently, each
#     seed-then-add as timings.sh does (learners added, started with --initial-cluster-
#     state existing, healthy, promoted); the operator: 10 EtcdClusters of size 3 made at
#     once (POSTs, as above), until every one is Running with 3 ready members.
#   node failure, 10 clusters: SETTLE_S after the 10 x 3 clusters are ready, one follower
#     of each (looked up before the clock starts) is lost with its data at the same moment;
#     the floor, in every cluster in parallel: SIGKILL it, `member remove` it, add and start
#     a fresh member (timings.sh's replacement), until all 10 are ready; the operator: the
#     10 followers' pods deleted at once (10 DELETEs in flight together, default grace, as
#     `kubectl delete pod --wait=false` but not one after the other; emptyDir: their data
#     goes with them), until every cluster is Running with 3 ready members, none a deleted
#     one.
#   rolling upgrade 3: a 3-member cluster from ETCD_VERSION to UPGRADE_TO, SETTLE_S after
#     it is ready; the floor (on FLOOR_NET.1-3): each member in turn, followers first and
#     the leader last, stopped (SIGTERM, waited for), started with the new binary on the
#     same data directory and waited for until healthy; timed from the first stop until
#     every member is healthy and voting and reports the new version (`endpoint status`);
#     the operator: `kubectl patch` of spec.version on a Running 3-member cluster, timed
#     until it is Running with 3 ready members and .status.currentVersion (the oldest
#     version a member runs) and .status.targetVersion are the new version.
# After each operator scenario, a breakdown from the leader's step trace (`/debug/trace`):
# for every step, the median over the clusters of its first time and the latest times,
# since the POSTs (or the apply), the delete or the patch; every run's tables are printed
# at the end.
# The operator runs against the local environment (`EXAMPLE= testkit/env/local-up.sh`,
# called here; a fast no-op when it is up), in a namespace fleet-<random> deleted at the
# end; each scenario's EtcdClusters are deleted, and their pods waited for, before the next.
#
# Environment:
#   ETCD_VERSION   etcd version for both (default 3.5.35: $CACHE/etcd/v3.5.35/bin)
#   UPGRADE_TO     the rolling upgrade's target (default: the newest $CACHE/etcd/vX.Y.Z newer
#                  than ETCD_VERSION, at most one minor version up; none: the row is skipped)
#   SKIP_OPERATOR  1: measure the floor only
#   RUNS           repeat everything N times and report medians (default 1)
#   FLOOR_NET      the upgrade floor's /24 on loopback (default 127.0.200; .1-.4 must be free)
#   FLEET_NET      the third octet of the fleet's first /24 (default 201: 127.0.201 to
#                  127.0.220, .1-.4 of each must be free)
#   SETTLE_S       seconds between ready and a failure or an upgrade (default 6)
#   TIMEOUT_S      give up on any single wait after this many seconds (default 180)
#   LOCAL_ENV_DIR, ETCD_OPERATOR_CACHE   as for testkit/env/local-up.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLEET_NET=${FLEET_NET:-201}

SINGLES=20    # clusters of 1 member in "20 x 1 at once"
TRIPLES=10    # clusters of 3 members in "10 x 3 at once" and the node failure

LOG_TAG=fleet
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
# shellcheck source=benches/floor.sh
source "$ROOT/benches/floor.sh"
# shellcheck source=benches/operator.sh
source "$ROOT/benches/operator.sh"

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$RUNS'"
[[ $FLEET_NET =~ ^[0-9]+$ ]] || die "FLEET_NET must be a number, got '$FLEET_NET'"
((FLEET_NET + SINGLES <= 255)) ||
    die "FLEET_NET must be a number up to $((255 - SINGLES)), got '$FLEET_NET'"
floor_etcd "$ETCD_VERSION"
OLD_ETCD=$ETCD

# The newest vX.Y.Z under $CACHE/etcd newer than $1, at most one minor version up (etcd
# upgrades one minor version at a time); empty when there is none.
upgrade_target() {
    local cur=$1 d
    for d in "$CACHE"/etcd/v*; do
        [[ ${d##*/v} =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] && echo "${d##*/v}"
    done | sort -V |
        while read -r v; do
            [[ $v != "$cur" && $(printf '%s\n%s\n' "$cur" "$v" | sort -V | tail -1) == "$v" ]] || continue
            awk -v a="$cur" -v b="$v" 'BEGIN { split(a, x, "."); split(b, y, ".");
                exit !(y[1] == x[1] && y[2] <= x[2] + 1) }' || continue
            echo "$v"
        done | tail -1
}
UPGRADE_TO=${UPGRADE_TO-$(upgrade_target "$ETCD_VERSION")}
if [[ -n $UPGRADE_TO ]]; then
    NEW_ETCD=$CACHE/etcd/v$UPGRADE_TO/bin/etcd
    [[ -x $NEW_ETCD ]] || die "no etcd $UPGRADE_TO at $NEW_ETCD"
else
    log "no etcd newer than $ETCD_VERSION (up to one minor version) under $CACHE/etcd: no rolling upgrade"
fi

# Nothing may listen on the floor's addresses (another test may use the same range).
busy=$(floor_busy "$FLOOR_NET" 4)
for ((k = 0; k < SINGLES; k++)); do busy+=" $(floor_busy "127.0.$((FLEET_NET + k))" 4)"; done
busy=$(xargs <<<"$busy")
[[ -z $busy ]] || die "already listening: $busy; pick another FLOOR_NET or FLEET_NET"

TOP=$(mktemp -d /tmp/etcd-operator-fleet.XXXXXX)
WORK=$TOP/up            # the upgrade's floor cluster (in this shell)
PIDFILE=$TOP/up.pids
mkdir -p "$WORK"
declare -A RUNNER=()    # fleet cluster k -> pid of the subshell running it
declare -A GOFD=()      # fleet cluster k -> this shell's descriptor of its FIFO "go"
NS=""                   # the operator part's namespace, once created
ADMIN_TLS=()            # curl's options as the environment's admin (admin_tls)
WATCH_DIR=$TOP          # the watches' files (benches/operator.sh)

# Kills every etcd this script started (named in a pid file and running on a data
# directory under $TOP: a pid reused by another process is left alone) and the subshells.
fleet_stop() {
    local k p f left fd
    for k in "${!GOFD[@]}"; do
        fd=${GOFD[$k]}
        exec {fd}>&-
        unset "GOFD[$k]"
    done
    for k in "${!RUNNER[@]}"; do
        kill -KILL "${RUNNER[$k]}" 2>/dev/null || true
        wait "${RUNNER[$k]}" 2>/dev/null || true
        unset "RUNNER[$k]"
    done
    for f in "$TOP"/*.pids "$TOP"/c*/pids; do
        [[ -f $f ]] || continue
        while read -r p; do
            if grep -qsF "$TOP/" "/proc/$p/cmdline"; then kill -KILL "$p" 2>/dev/null || true; fi
        done <"$f"
    done
    # Until they are gone (the next scenario reuses their addresses).
    for ((left = 50; left > 0; left--)); do
        pgrep -f -- "--data-dir $TOP/" >/dev/null || break
        sleep 0.1
    done
    rm -rf "$TOP"/c* "$TOP"/*.pids
}

cleanup() {
    watch_stop_all
    fleet_stop
    floor_stop
    delete_namespace
    rm -rf "$TOP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------
# The floor: many clusters by hand, one subshell each
# ---------------------------------------------------------------------------
# Starts the subshell of fleet cluster k=$1 of $2 members, on 127.0.(FLEET_NET+k), its
# files in $TOP/c$k: "ready" (the time it was ready) once bootstrapped; with $3 = replace,
# it then waits for a line on the FIFO "go", replaces a follower (floor_replace; victim and
# its ID looked up before) and writes "replaced" (the time it was ready again). Its log
# goes to its "log".
fleet_start() {
    local k=$1 n=$2 what=${3:-} dir=$TOP/c$1 fd
    mkdir -p "$dir"
    if [[ $what == replace ]]; then
        # Held open for reading and writing here: neither side's open blocks, and the
        # subshell's read waits for the line.
        mkfifo "$dir/go"
        exec {fd}<>"$dir/go"
        GOFD[$k]=$fd
    fi
    (
        FLOOR_NET=127.0.$((FLEET_NET + k)) WORK=$dir PIDFILE=$dir/pids LOG_TAG=fleet-c$k
        PID=()
        floor_create "$n"
        now >"$dir/ready.tmp" && mv "$dir/ready.tmp" "$dir/ready"
        if [[ $what == replace ]]; then
            victim=$(floor_follower)
            id=$(member_line "$victim" | cut -d, -f1)
            read -r _ <"$dir/go"
            floor_replace "$victim" "$id"
            now >"$dir/replaced.tmp" && mv "$dir/replaced.tmp" "$dir/replaced"
        fi
    ) </dev/null >>"$dir/log" 2>&1 &
    RUNNER[$k]=$!
}

# True when every fleet cluster wrote its file $1; dies naming a cluster whose subshell
# exited without it.
fleet_have() {
    local k
    for k in "${!RUNNER[@]}"; do
        [[ -s $TOP/c$k/$1 ]] && continue
        if ! kill -0 "${RUNNER[$k]}" 2>/dev/null; then
            [[ -s $TOP/c$k/$1 ]] && continue   # it wrote the file and exited meanwhile
            die "floor cluster $k exited before '$1'; its log: $(tail -5 "$TOP/c$k/log")"
        fi
        return 1
    done
}

# RESULT = the seconds from $1 (as `now` gives it) to the latest time in the fleet's files $2.
fleet_since() {
    RESULT=$(cat "$TOP"/c*/"$2" | awk -v a="$1" '$1 > m { m = $1 } END { printf "%.3f", m - a }')
}

# $1 single-member clusters started at once; RESULT = the seconds until all are ready.
floor_singles() {
    local k start
    start=$(now)
    for ((k = 0; k < $1; k++)); do fleet_start "$k" 1; done
    poll "$1 single-member floor clusters to be ready" fleet_have ready
    fleet_since "$start" ready
}

# $1 three-member clusters bootstrapped at once; RESULT = the seconds until all are ready.
# Then, SETTLE_S later, one follower of each lost with its data at the same moment;
# RESULT2 = the seconds until all are ready again.
RESULT2=""
floor_triples() {
    local k start
    start=$(now)
    for ((k = 0; k < $1; k++)); do fleet_start "$k" 3 replace; done
    poll "$1 three-member floor clusters to be ready" fleet_have ready
    fleet_since "$start" ready
    local created=$RESULT
    sleep "$SETTLE_S"
    log "floor: a follower of each of the $1 clusters killed"
    start=$(now)
    for ((k = 0; k < $1; k++)); do echo go >&"${GOFD[$k]}"; done
    poll "$1 floor clusters to replace a follower" fleet_have replaced
    fleet_since "$start" replaced
    RESULT2=$RESULT RESULT=$created
}

# The index of the leader of the floor cluster (in this shell).
floor_leader() {
    endpoint_of "$(endpoints)" leader | sed "s|^http://$FLOOR_NET\.||; s|:2379\$||"
}

# True when the floor cluster is ready and every member reports etcd $1.
floor_on() {
    floor_ready || return 1
    [[ $(ctl "$(endpoints)" endpoint status -w fields 2>/dev/null |
        awk -F' : ' -v v="\"$1\"" '$1 == "\"Version\"" { n++; if ($2 != v) bad++ } END { print n + 0, bad + 0 }') \
        == "${#PID[@]} 0" ]]
}

# A 3-member floor cluster on ETCD_VERSION upgraded member by member to UPGRADE_TO, SETTLE_S
# after it is ready; RESULT = the seconds from the first stop until it is ready on the new
# version.
floor_upgrade() {
    local leader i start order=()
    ETCD=$OLD_ETCD
    floor_create 3
    sleep "$SETTLE_S"
    leader=$(floor_leader)
    [[ -n $leader && -n ${PID[$leader]:-} ]] || die "no leader found among $(endpoints)"
    for i in "${!PID[@]}"; do [[ $i == "$leader" ]] || order+=("$i"); done
    order+=("$leader")
    log "floor: upgrading m${order[*]} (in this order) to $UPGRADE_TO"
    start=$(now)
    for i in "${order[@]}"; do
        kill -TERM "${PID[$i]}"
        wait "${PID[$i]}" 2>/dev/null || true
        ETCD=$NEW_ETCD
        floor_start "$i" existing "m$i=$(peer_url "$i")"
        ETCD=$OLD_ETCD
        poll "m$i to be healthy on $UPGRADE_TO" floor_healthy "$i"
    done
    poll "the floor cluster to be ready on $UPGRADE_TO" floor_on "$UPGRADE_TO"
    since "$start"
}

# ---------------------------------------------------------------------------
# The operator, in the local environment
# ---------------------------------------------------------------------------
# "name|phase|readyMembers|currentVersion|targetVersion|ready member names" of each
# EtcdCluster in the namespace, one a line, as its watch saw it last (a field not yet in
# the status is empty).
fleet_status() { watch_last clusters; }

declare -A VICTIM=()   # EtcdCluster -> the pod deleted in it
# True when $2 EtcdClusters named $1<k> are Running with $3 ready members each, none of
# them VICTIM[cluster].
fleet_ready() {
    local prefix=$1 want=$2 size=$3 name phase ready cur target names ok=0
    # shellcheck disable=SC2034 # cur and target: fields read past
    while IFS='|' read -r name phase ready cur target names; do
        [[ $name == "$prefix"* && $phase == Running && $ready == "$size" ]] || continue
        [[ -n ${VICTIM[$name]:-} && " $names " == *" ${VICTIM[$name]} "* ]] && continue
        ok=$((ok + 1))
    done <<<"$(fleet_status)"
    ((ok == want))
}

# The API server's address, from the admin's kubeconfig.
api_server() { kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}'; }

# curl's options to talk to the API server as the environment's admin.
admin_tls() {
    local pki=$LOCAL_ENV_DIR/pki
    ADMIN_TLS=(--cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key")
}

POSTS=()      # curl's arguments of the prepared POSTs (prepare_posts)
POST_COUNT=0  # how many objects they make

# Prepares the POST of every JSON file $2... to the collection the function $1 names for
# it (called with the file), as the environment's admin; send_posts sends them. Made
# before a clock starts: naming 80 collections takes jq longer than the POSTs themselves.
prepare_posts() {
    local collection=$1 server f
    shift
    server=$(api_server)
    admin_tls
    POSTS=()
    POST_COUNT=$#
    for f in "$@"; do
        ((${#POSTS[@]} == 0)) || POSTS+=(--next)
        POSTS+=(-sS --max-time 30 -X POST -w '%{http_code}\n' -o /dev/null "${ADMIN_TLS[@]}"
            -H 'Content-Type: application/json' --data-binary "@$f" "$server$("$collection" "$f")")
    done
}

# Sends the prepared POSTs, all in flight at once (curl --parallel); fails unless every
# object was created.
send_posts() {
    local codes
    codes=$(curl --parallel --parallel-max 128 "${POSTS[@]}") || die "creating $POST_COUNT objects: curl failed"
    [[ $(grep -cx 201 <<<"$codes") == "$POST_COUNT" ]] ||
        die "creating $POST_COUNT objects: HTTP codes $(xargs <<<"$codes")"
}

# The collection EtcdClusters are created in.
etcdclusters_path() { echo "/apis/etcd.database.coreos.com/v1beta2/namespaces/$NS/etcdclusters"; }

# Makes $2 EtcdClusters $1<k> (k = 0..) of size $3 at once; RESULT = the seconds until every
# one is Running with $3 ready members. $4 says how they are made: "posts" (default), one
# POST each, all in flight at the same moment, as the floors start their clusters; "apply",
# one `kubectl apply` of a multi-document YAML, as a user would type it (kubectl sends its
# requests one after the other: 20 EtcdClusters took it 4.1 to 4.7 s under this load).
operator_fleet() {
    local prefix=$1 count=$2 size=$3 how=${4:-posts} k start yaml="" files=()
    rm -rf "$TOP/clusters"
    mkdir -p "$TOP/clusters"
    for ((k = 0; k < count; k++)); do
        yaml+="---
$(cluster_yaml "$prefix$k" "$size" "$ETCD_VERSION")
"
        jq -n --arg name "$prefix$k" --argjson size "$size" --arg version "$ETCD_VERSION" \
            '{apiVersion: "etcd.database.coreos.com/v1beta2", kind: "EtcdCluster",
              metadata: {name: $name}, spec: {size: $size, version: $version}}' \
            >"$TOP/clusters/$k.json"
        files+=("$TOP/clusters/$k.json")
    done
    [[ $how == posts ]] && prepare_posts etcdclusters_path "${files[@]}"
    start=$(now)
    T0_MS=$(now_ms)
    case $how in
    posts) send_posts ;;
    apply) kubectl -n "$NS" apply -f - >/dev/null <<<"$yaml" ;;
    *) die "operator_fleet: no way '$how' to make EtcdClusters" ;;
    esac
    since "$start"; log "operator: $how of $count EtcdClusters returned after $RESULT s"
    poll "$count EtcdClusters $prefix* to be Running with $size ready members" \
        fleet_ready "$prefix" "$count" "$size"
    since "$start"
}

# Deletes the pods $@ of NS at once, as a node's failure loses them together: one DELETE
# each (the default grace, as `kubectl delete --wait=false`), all in flight at the same
# time (curl --parallel, as the environment's admin). `kubectl delete` sends them one after
# the other: 10 took 1.6 to 2.2 s under this scenario's load, spreading the "failure" over
# that time.
delete_pods_at_once() {
    local server p args=() codes
    server=$(api_server)
    admin_tls
    for p in "$@"; do args+=(-o /dev/null "$server/api/v1/namespaces/$NS/pods/$p"); done
    codes=$(curl -sS --parallel --parallel-max 64 --max-time 30 -X DELETE -w '%{http_code}\n' \
        "${ADMIN_TLS[@]}" "${args[@]}") ||
        die "deleting pods $*: curl failed"
    [[ $(grep -cx 200 <<<"$codes") == "$#" ]] || die "deleting pods $*: HTTP codes $(xargs <<<"$codes")"
}

# Deletes the pod of one follower in each of the $2 ready EtcdClusters $1<k> of 3 members
# at once; RESULT = the seconds until every one is Running with 3 ready members, none a
# deleted one.
operator_fleet_replace() {
    local prefix=$1 count=$2 k pods=() start
    VICTIM=()
    for ((k = 0; k < count; k++)); do
        VICTIM[$prefix$k]=$(operator_follower "$prefix$k")
        pods+=("${VICTIM[$prefix$k]}")
    done
    log "operator: deleting the pods of ${#pods[@]} followers"
    start=$(now)
    T0_MS=$(now_ms)
    delete_pods_at_once "${pods[@]}"
    since "$start"; log "operator: the delete of ${#pods[@]} pods returned after $RESULT s"
    poll "$count EtcdClusters $prefix* to replace a follower" fleet_ready "$prefix" "$count" 3
    since "$start"
    VICTIM=()
}

# Deletes every EtcdCluster of the namespace and waits until their pods are gone.
no_fleet_pods() { [[ -z $(kubectl -n "$NS" get pods -l app=etcd -o name 2>/dev/null) ]]; }
operator_fleet_delete() {
    kubectl -n "$NS" delete etcd --all >/dev/null
    poll "the fleet's pods to be deleted" no_fleet_pods
}

# True when EtcdCluster $1 is Running with 3 ready members, all on etcd $2.
operator_on() {
    local name phase ready cur target names
    while IFS='|' read -r name phase ready cur target names; do
        [[ $name == "$1" ]] || continue
        [[ $phase == Running && $ready == 3 && $cur == "$2" && $target == "$2" ]]
        return
    done <<<"$(fleet_status)"
    return 1
}

# A Running 3-member EtcdCluster $1 on ETCD_VERSION, SETTLE_S later patched to UPGRADE_TO;
# RESULT = the seconds from the patch until it is Running with 3 ready members on it.
operator_upgrade() {
    local name=$1 start
    operator_fleet "$name" 1 3   # EtcdCluster "${name}0"
    sleep "$SETTLE_S"
    log "operator: upgrading ${name}0 to $UPGRADE_TO"
    start=$(now)
    T0_MS=$(now_ms)
    kubectl -n "$NS" patch etcd "${name}0" --type merge -p "{\"spec\":{\"version\":\"$UPGRADE_TO\"}}" >/dev/null
    poll "EtcdCluster $NS/${name}0 to be Running on $UPGRADE_TO" operator_on "${name}0" "$UPGRADE_TO"
    since "$start"
}

# ---------------------------------------------------------------------------
# The Kubernetes floor of "N x 1 at once": the operator's objects, made by hand
# ---------------------------------------------------------------------------
# What the control plane alone needs for the clusters the operator made: their objects
# made again with one `kubectl create`, no operator involved. It names how much of the
# operator's time is the API server, the controllers, the scheduler and the node making
# pods, Services, endpoints and budgets on this machine, next to etcd's own floor.
KUBE_OBJECTS=""

# Saves the objects of the EtcdClusters $NS/$1* (each seed's pod, both Services, the
# budget) as a List, and each as a file under $TOP/kube/ to POST, as a user would write
# them: without what the API server, the scheduler or a controller fills in (status, uid,
# versions, node, cluster IP) and without their owner (the EtcdCluster, deleted before
# they are made again).
kube_floor_save() {
    local i=0 line
    KUBE_OBJECTS=$TOP/kube-objects.json
    kubectl -n "$NS" get pods,services,poddisruptionbudgets -o json | jq --arg p "$1" '
        .items |= map(select(.metadata.name | startswith($p))
            | .metadata |= {name, labels, annotations}
            | del(.status, .spec.nodeName)
            | if .kind == "Service" and .spec.clusterIP != "None"
              then del(.spec.clusterIP, .spec.clusterIPs) else . end)' >"$KUBE_OBJECTS"
    rm -rf "$TOP/kube"
    mkdir -p "$TOP/kube"
    while read -r line; do
        i=$((i + 1))
        printf '%s\n' "$line" >"$TOP/kube/$i.json"
    done < <(jq -c '.items[]' "$KUBE_OBJECTS")
}

# The API path of the collection the object in file $1 is created in.
collection_of() {
    case $(jq -r .kind "$1") in
    Pod) echo "/api/v1/namespaces/$NS/pods" ;;
    Service) echo "/api/v1/namespaces/$NS/services" ;;
    PodDisruptionBudget) echo "/apis/policy/v1/namespaces/$NS/poddisruptionbudgets" ;;
    *) die "no collection for $(jq -r .kind "$1") in $1" ;;
    esac
}

# True when none of the saved objects is left (their owner's deletion removes them).
no_saved_objects() {
    [[ -z $(kubectl -n "$NS" get -f "$KUBE_OBJECTS" --ignore-not-found -o name 2>/dev/null) ]]
}

# True when $1 pods of NS are Ready (watch "pods", started before they were made).
pods_ready() {
    local n
    n=$(watch_last pods | awk -F'|' '$3 == "True" { n++ } END { print n + 0 }')
    ((n == $1))
}

# Makes the saved objects of $1 clusters again, every POST in flight at once (curl
# --parallel, as the environment's admin: no kubectl, no operator); RESULT = the seconds
# until their $1 pods are Ready. Then deletes them and waits until they are gone.
kube_floor() {
    local start took
    prepare_posts collection_of "$TOP"/kube/*.json
    poll "the operator's objects to be gone" no_saved_objects
    # The operator's pods of the same names are gone: the watch starts with none of them.
    watch_start pods pods "$POD_LINE"
    sleep 0.5   # its kubectl started, not starting while the objects are made
    start=$(now)
    send_posts
    poll "$1 hand-made etcd pods to be Ready" pods_ready "$1"
    since "$start"
    took=$RESULT
    watch_stop pods
    kubectl -n "$NS" delete -f "$KUBE_OBJECTS" --wait=false >/dev/null
    poll "the hand-made objects to be gone" no_saved_objects
    RESULT=$took
}

T0_MS=""        # when the last operator scenario applied, deleted or patched (Unix ms)
BREAKDOWNS=""   # the tables of fleet_trace, printed at the end

# Where the time of the operator's last scenario went, titled $2, from the leader's step
# trace of the EtcdClusters $NS/$1*: for each step from T0_MS on, in how many clusters it
# happened, the median over those clusters of its first time, the latest first time, and
# its latest time in any cluster (ms since T0_MS). A missing trace is logged, not fatal.
fleet_trace() {
    local prefix=$1 title=$2 rows
    rows=$(operator_trace_json | jq -r --arg p "$NS/$prefix" --argjson t0 "$T0_MS" '
        [.[] | select((.cluster | startswith($p)) and .time_unix_ms >= $t0)
             | {cluster, step, ms: (.time_unix_ms - $t0)}]
        | group_by(.step)
        | map({step: .[0].step, last: (map(.ms) | max),
               firsts: (group_by(.cluster) | map(map(.ms) | min) | sort)})
        | map(. + {median: .firsts[(.firsts | length) / 2 | floor]})
        | sort_by(.median) | .[]
        | "\(.step) \(.firsts | length) \(.median) \(.firsts[-1]) \(.last)"') ||
        { log "no step trace from the operator's leader"; return 0; }
    BREAKDOWNS+=$'\n'"where the time goes: $title (ms since T0, run $run)"$'\n'
    BREAKDOWNS+=$(printf '%-22s | %8s | %12s | %12s | %8s\n' step clusters "median first" "latest first" latest
        printf '%-22s-|-%8s-|-%12s-|-%12s-|-%8s\n' "" "" "" "" "" | tr ' ' -
        while read -r step n med latest_first last; do
            [[ -n $step ]] && printf '%-22s | %8s | %12s | %12s | %8s\n' "$step" "$n" "$med" "$latest_first" "$last"
        done <<<"$rows")$'\n'
}

# ---------------------------------------------------------------------------
# Measure, then print medians
# ---------------------------------------------------------------------------
declare -A FLOOR=() OPER=()   # scenario -> space-separated seconds, one per run
# record FLOOR|OPER scenario: appends RESULT.
record() { local -n into=$1; into[$2]+="$RESULT "; log "$1 $2: $RESULT s"; }

for ((run = 1; run <= RUNS; run++)); do
    log "run $run/$RUNS: floor, etcd $ETCD_VERSION, $MODE"
    floor_singles "$SINGLES"; record FLOOR singles
    fleet_stop
    floor_triples "$TRIPLES"; record FLOOR triples
    RESULT=$RESULT2; record FLOOR failure
    fleet_stop
    if [[ -n $UPGRADE_TO ]]; then
        floor_upgrade; record FLOOR upgrade
        floor_stop
    fi
    if [[ $SKIP_OPERATOR != 1 ]]; then
        if [[ -z $NS ]]; then
            operator_setup
            watch_start clusters etcd "$CLUSTER_LINE"
        fi
        operator_fleet "s$run-" "$SINGLES" 1; record OPER singles
        fleet_trace "s$run-" "$SINGLES x 1 at once (T0: the POSTs)"
        kube_floor_save "s$run-"
        operator_fleet_delete
        kube_floor "$SINGLES"; record FLOOR kube
        operator_fleet "a$run-" "$SINGLES" 1 apply; record OPER apply
        fleet_trace "a$run-" "$SINGLES x 1 by one kubectl apply (T0: the apply)"
        operator_fleet_delete
        operator_fleet "t$run-" "$TRIPLES" 3; record OPER triples
        fleet_trace "t$run-" "$TRIPLES x 3 at once (T0: the POSTs)"
        sleep "$SETTLE_S"
        operator_fleet_replace "t$run-" "$TRIPLES"; record OPER failure
        fleet_trace "t$run-" "node failure, $TRIPLES clusters (T0: the pods' delete)"
        operator_fleet_delete
        if [[ -n $UPGRADE_TO ]]; then
            operator_upgrade "u$run-"; record OPER upgrade
            fleet_trace "u$run-" "rolling upgrade 3 (T0: the patch)"
            operator_fleet_delete
        fi
    fi
done

echo
echo "etcd-operator fleet, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) ($(nproc) cores)"
echo "etcd $ETCD_VERSION ($OLD_ETCD); members added as $MODE"
echo "runs: $RUNS (median shown); a failure or an upgrade starts ${SETTLE_S}s after ready"
echo "CPU time stolen by the hypervisor during the runs: $(cpu_stolen) (/proc/stat)"
echo
printf '%-28s | %8s | %10s | %6s\n' scenario "floor s" "operator s" ratio
printf '%-28s-|-%8s-|-%10s-|-%6s\n' "" "" "" "" | tr ' ' -
table_row "$SINGLES x 1 at once" "${FLOOR[singles]}" "${OPER[singles]:-}" 28
if [[ -n ${FLOOR[kube]:-} ]]; then
    table_row "  against Kubernetes' floor" "${FLOOR[kube]}" "${OPER[singles]}" 28
    table_row "  by one kubectl apply" "${FLOOR[singles]}" "${OPER[apply]}" 28
fi
table_row "$TRIPLES x 3 at once" "${FLOOR[triples]}" "${OPER[triples]:-}" 28
table_row "node failure, $TRIPLES clusters" "${FLOOR[failure]}" "${OPER[failure]:-}" 28
if [[ -n $UPGRADE_TO ]]; then
    table_row "rolling upgrade 3" "${FLOOR[upgrade]}" "${OPER[upgrade]:-}" 28
    echo "(rolling upgrade: $ETCD_VERSION -> $UPGRADE_TO)"
fi
if [[ $SKIP_OPERATOR == 1 ]]; then echo "(SKIP_OPERATOR=1: operator not measured)"; fi
printf '%s' "$BREAKDOWNS"
