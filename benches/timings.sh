#!/usr/bin/env bash
# How long the operator takes to make a cluster Ready and to replace a dead member, each
# next to the FLOOR measured in the same run: the same etcd binary bootstrapped on this
# machine by hand with etcdctl, exactly as the operator does it, without Kubernetes.
#
#   benches/timings.sh                      # floor + operator, etcd 3.5.35, one run
#   SKIP_OPERATOR=1 benches/timings.sh      # floor only (touches nothing shared)
#   ETCD_VERSION=3.4.23 RUNS=3 benches/timings.sh
#
# The floor, for 3 and for 5 members, on 127.0.200.N:2379/2380 (N=1..5; the control
# plane uses 127.0.0.1):
#   start a seed (--initial-cluster-state new, a unique token); then for each further
#   member: `etcdctl member add` (as a learner on etcd >= 3.4, as the operator does),
#   retrying `etcdserver: unhealthy cluster` every 100 ms; start it with
#   --initial-cluster-state existing and the --initial-cluster etcd returned; wait until
#   it is started (named in `member list`) and healthy (`endpoint status` answers without
#   errors, the operator's own test); promote it if it is a learner (retried until etcd
#   accepts). Ready = every member started, healthy and voting.
# The floor restarts, in the 3-member floor cluster: SIGKILL a follower and start it
#   again on its data directory; SIGKILL every member and start them all again; each
#   timed from the kill until Ready again.
# The floor replacement: in the 3-member floor cluster, SIGKILL a follower, `member
#   remove` it, add a new member as above; timed from the kill until Ready again.
# The operator, against the local environment (`EXAMPLE= testkit/env/local-up.sh`, called here;
#   a fast no-op when it is up): in a namespace timings-<random>, `kubectl apply` an
#   EtcdCluster of size 3, then one of size 5, and time each from the apply until
#   .status.phase is Running with .status.readyMembers == size (polled every 100 ms).
#   Then, on the 3-member cluster: kill a follower's process (SIGKILL to the pid
#   `nodes.sh pid` gives; restarted in place by the node) and time until its container restarted and the
#   cluster is Running with 3 ready members; the same with every member's process killed
#   at once; then delete a follower's pod (its emptyDir data goes with it) and time until
#   it is Running with 3 ready members again, the deleted member gone from
#   .status.members.ready. Then a 3-member cluster on claims (1Gi each, the environment's
#   default StorageClass): delete a follower's pod and time until a new pod of the same
#   member is ready on its claim and the cluster is Running with 3 ready members; its
#   floor is the floor's restart of one member on its data directory (restart1), which is
#   what the operator does there. Last, a 3-member cluster with operator-managed TLS
#   (`TLS: {auto: {}}`: a CA and three certificates issued first), timed as the plain
#   one and reported against the operator's plain 3-member create of the same run. The
#   namespace is deleted at the end.
# Each replacement starts SETTLE_S seconds after its cluster became Ready, in both cases.
# Where the time goes: after each operator create, the leader's step trace of the cluster
#   (`/debug/trace?cluster=NS/NAME&summary=1`, the operator's own timestamps: spec seen,
#   seed pod created, pods running, members serving, added, healthy, promoted, ready,
#   status published) gives each step's time since the spec was seen, for its first and
#   its last member; the floor's create records its own: each member's process started,
#   member added, healthy, promoted, and ready, since its start. A breakdown table per
#   create prints the medians side by side, with the ms from the apply to the spec seen
#   (the local environment's pods run on this machine: one clock). The same for the
#   replacement: the operator's steps since the pod's delete, the floor's since the kill;
#   and for the two restarts (since the kill) and the pod deleted on a claim (since the
#   delete), the operator's steps alone.
#
# Environment:
#   ETCD_VERSION   etcd version for both (default 3.5.35: $CACHE/etcd/v3.5.35/bin, built by
#                  testkit/env/build/build-binaries.sh; 3.4.23: Debian's /usr/bin/etcd and etcdctl)
#   SKIP_OPERATOR  1: measure the floor only
#   RUNS           repeat everything N times and report medians (default 1)
#   FLOOR_NET      the floor's /24 on loopback (default 127.0.200; its .1-.5 must be free)
#   SETTLE_S       seconds between Ready and the kill of a replacement (default 6)
#   TIMEOUT_S      give up on any single wait after this many seconds (default 180)
#   LOCAL_ENV_DIR, ETCD_OPERATOR_CACHE   as for testkit/env/local-up.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

LOG_TAG=timings
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
# shellcheck source=benches/floor.sh
source "$ROOT/benches/floor.sh"
# shellcheck source=benches/operator.sh
source "$ROOT/benches/operator.sh"

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$RUNS'"
floor_etcd "$ETCD_VERSION"

# Nothing may listen on the floor's addresses (another test may use the same range).
busy=$(floor_busy "$FLOOR_NET" 5)
[[ -z $busy ]] || die "already listening: $busy; pick another FLOOR_NET (e.g. 127.0.210)"

WORK=$(mktemp -d /tmp/etcd-operator-timings.XXXXXX)
NS=""               # the operator part's namespace, once created
WATCH_DIR=$WORK     # the watches' files (benches/operator.sh)

cleanup() {
    watch_stop_all
    floor_stop
    delete_namespace
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------
# The operator, in the local environment (the rest in benches/operator.sh)
# ---------------------------------------------------------------------------
# Applies an EtcdCluster $1 of size $2 (on 1Gi claims when $3 is "claims", with
# operator-managed TLS when it is "tls"); RESULT = the seconds until it is ready.
operator_create() {
    local name=$1 size=$2 start pod=""
    case ${3:-} in
        claims) pod=$'  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 1Gi}}' ;;
        tls) pod=$'  TLS:\n    auto: {}' ;;
    esac
    start=$(now)
    APPLIED_MS=$(now_ms)
    cluster_yaml "$name" "$size" "$ETCD_VERSION" "$pod" | kubectl -n "$NS" apply -f - >/dev/null
    poll "EtcdCluster $NS/$name to be Running with $size ready members" operator_ready "$name" "$size"
    since "$start"
}

# The sum of the etcd containers' restart counts of EtcdCluster $1's pods (not deleted).
restarts_of() {
    watch_last pods | awk -F'|' -v c="$1" '$5 == c && $6 == "" { s += $4 } END { print s + 0 }'
}

# True when EtcdCluster $1 restarted at least $3 containers in all and is ready with $2.
operator_restarted() { (($(restarts_of "$1") >= $3)) && operator_ready "$1" "$2"; }

# Kills the etcd processes of the pods $4... of the ready EtcdCluster $2 (size $3); RESULT
# = the seconds until each was restarted in place and the cluster is ready again. Its
# steps go to OSTEPS under scenario $1, since the kill.
operator_restart() {
    local scenario=$1 name=$2 size=$3 start killed target pod pids=()
    shift 3
    target=$(($(restarts_of "$name") + $#))
    # Each etcd's host pid, looked up before the clock starts (nodes.sh pid, either kind).
    for pod in "$@"; do
        pids+=("$(bash "$ROOT/testkit/env/node/nodes.sh" pid "$NS" "$pod" etcd)")
    done
    log "operator: killing the etcd of $*"
    start=$(now)
    killed=$(now_ms)
    kill -KILL "${pids[@]}"
    poll "EtcdCluster $NS/$name to restart $*" operator_restarted "$name" "$size" "$target"
    since "$start"
    operator_steps_since "$scenario" "$name" "$killed"
}

# Deletes the pod of a follower of the ready EtcdCluster $1 (size $2), and with it its
# data; RESULT = the seconds until it is Running with $2 ready members again, the deleted
# member not among them. Its steps go to OSTEPS under scenario replace3, since the delete.
operator_replace() {
    local name=$1 size=$2 victim start deleted
    victim=$(operator_follower "$name")
    log "operator: deleting the pod of follower $victim"
    start=$(now)
    deleted=$(now_ms)
    kubectl -n "$NS" delete pod "$victim" --wait=false >/dev/null
    poll "EtcdCluster $NS/$name to replace $victim" operator_ready "$name" "$size" "$victim"
    since "$start"
    operator_steps_since replace3 "$name" "$deleted"
}

# "uid ready" of pod $1, as watch "pods" saw it last.
pod_state() {
    watch_last pods | awk -F'|' -v p="$1" '$1 == p { print $2, $3 }'
}

# True when pod $3 is back under a new uid (not $4), ready, and EtcdCluster $1 is ready
# with $2 members.
operator_back() {
    local uid ready
    read -r uid ready <<<"$(pod_state "$3")" || true
    [[ -n $uid && $uid != "$4" && $ready == True ]] && operator_ready "$1" "$2"
}

# Deletes the pod of a follower of the ready EtcdCluster $1 (size $2) on claims; RESULT =
# the seconds until the same member has a new, ready pod on its claim and the cluster is
# ready again. Its steps go to OSTEPS under scenario repod1, since the delete.
operator_repod() {
    local name=$1 size=$2 victim uid start deleted
    victim=$(operator_follower "$name")
    read -r uid _ <<<"$(pod_state "$victim")"
    log "operator: deleting the pod of follower $victim (its claim keeps its data)"
    start=$(now)
    deleted=$(now_ms)
    kubectl -n "$NS" delete pod "$victim" --wait=false >/dev/null
    poll "EtcdCluster $NS/$name to bring $victim back on its claim" \
        operator_back "$name" "$size" "$victim" "$uid"
    since "$start"
    operator_steps_since repod1 "$name" "$deleted"
}

APPLIED_MS=""   # when the last operator_create applied its EtcdCluster

# The leader's step trace of EtcdCluster $1, as `/debug/trace` serves it after "?cluster=
# NS/$1" (e.g. "&summary=1"); fails when the leader cannot be found or does not answer.
trace_of() { operator_trace_json "?cluster=$NS/$1${2:-}"; }

# Adds the leader's step trace of EtcdCluster $2 to OSTEPS under scenario $1, each step's
# ms since the spec was seen, and a first row: the ms from the apply to the spec seen (a
# missing trace is logged, not fatal: the timings stand without it).
operator_trace() {
    local scenario=$1 name=$2 rows seen
    seen=$(trace_of "$name" | jq -r --argjson t0 "$APPLIED_MS" \
        '[.[] | select(.step == "spec_seen")] | last | select(. != null)
         | (.time_unix_ms - $t0) | "\(.) \(.)"') ||
        { log "no trace of $name from the operator's leader"; return 0; }
    rows=$(trace_of "$name" '&summary=1' |
        jq -r '.[0].steps[]? | "\(.step) \(.first_ms // "-") \(.last_ms // "-")"') ||
        { log "no trace summary of $name from the operator's leader"; return 0; }
    [[ -n $seen ]] && rows="apply_to_spec_seen $seen"$'\n'"$rows"
    trace_steps OSTEPS "$scenario" "$rows"
}

# Adds the steps of EtcdCluster $2 from the time $3 (Unix ms) on to OSTEPS under scenario
# $1: each step once, its first and last ms since $3, in the order they first happened.
operator_steps_since() {
    local scenario=$1 name=$2 t0=$3 rows
    rows=$(trace_of "$name" | jq -r --argjson t0 "$t0" '
        [.[] | select(.time_unix_ms >= $t0) | {step, ms: (.time_unix_ms - $t0)}]
        | reduce .[] as $r ({order: [], first: {}, last: {}};
            (if .first[$r.step] == null
             then .order += [$r.step] | .first[$r.step] = $r.ms else . end)
            | .last[$r.step] = $r.ms)
        | . as $t | $t.order[] | "\(.) \($t.first[.]) \($t.last[.])"') ||
        { log "no trace of $name from the operator's leader"; return 0; }
    trace_steps OSTEPS "$scenario" "$rows"
}

# ---------------------------------------------------------------------------
# Measure, then print medians
# ---------------------------------------------------------------------------
declare -A FLOOR=() OPER=()   # scenario -> space-separated seconds, one per run
# record FLOOR|OPER scenario: appends RESULT.
record() { local -n into=$1; into[$2]+="$RESULT "; log "$1 $2: $RESULT s"; }

# Steps of the creates: "scenario|step|first" and "scenario|step|last" -> space-separated
# ms since the start, one per run; "scenario" -> the step names in the order first seen.
declare -A FSTEPS=() OSTEPS=()
# trace_steps FSTEPS|OSTEPS scenario rows: appends the "step first_ms last_ms" rows.
trace_steps() {
    local -n table=$1
    local scenario=$2 step first last
    while read -r step first last; do
        [[ -n $step ]] || continue
        [[ " ${table[$scenario]:-} " == *" $step "* ]] || table["$scenario"]+="$step "
        [[ $first == - ]] || table["$scenario|$step|first"]+="$first "
        [[ $last == - ]] || table["$scenario|$step|last"]+="$last "
    done <<<"$3"
}

# The median of the ms in $1, whole, or "-".
median_ms() {
    local m
    m=$(median "${1:-}")
    if [[ $m == - ]]; then echo -; else printf '%.0f' "$m"; fi
}

# The floor's step comparable with the operator's step $1, if any.
floor_step() {
    case $1 in
        pod_running) echo process_started ;;
        member_lost) echo member_removed ;;
        member_added | member_healthy | learner_promoted | ready) echo "$1" ;;
    esac
}

# Where the time of the operator's scenario $1 went, beside the floor's scenario $2: each
# step's median ms since the origin $4 (default: the spec was seen; the floor: its start),
# for the first and the last member it concerns. Titled $3.
breakdown() {
    local o=$1 f=$2 step fs label seen=" "
    echo
    echo "where the time goes: $3 (median ms since ${4:-the spec was seen; floor: since its start})"
    printf '%-38s | %8s | %8s | %8s | %8s\n' step "op first" "op last" "fl first" "fl last"
    printf '%-38s-|-%8s-|-%8s-|-%8s-|-%8s\n' "" "" "" "" "" | tr ' ' -
    for step in ${OSTEPS[$o]:-}; do
        fs=$(floor_step "$step")
        label=$step
        [[ -n $fs && $fs != "$step" ]] && label="$step (floor: $fs)"
        [[ -n $fs ]] && seen+="$fs "
        printf '%-38s | %8s | %8s | %8s | %8s\n' "$label" \
            "$(median_ms "${OSTEPS[$o|$step|first]:-}")" "$(median_ms "${OSTEPS[$o|$step|last]:-}")" \
            "$(median_ms "${FSTEPS[$f|${fs:-none}|first]:-}")" "$(median_ms "${FSTEPS[$f|${fs:-none}|last]:-}")"
    done
    # The floor's steps the operator did not trace (all of them when it was not measured).
    for step in ${FSTEPS[$f]:-}; do
        [[ $seen == *" $step "* ]] && continue
        printf '%-38s | %8s | %8s | %8s | %8s\n' "(floor) $step" - - \
            "$(median_ms "${FSTEPS[$f|$step|first]:-}")" "$(median_ms "${FSTEPS[$f|$step|last]:-}")"
    done
}

for ((run = 1; run <= RUNS; run++)); do
    log "run $run/$RUNS: floor, etcd $ETCD_VERSION, $MODE"
    floor_create 3; record FLOOR create3
    sleep "$SETTLE_S"
    floor_restart "$(floor_follower)"; record FLOOR restart1
    sleep "$SETTLE_S"
    floor_restart "${!PID[@]}"; record FLOOR restart3
    sleep "$SETTLE_S"
    # shellcheck disable=SC2119 # the victim: a follower looked up by floor_replace
    floor_replace; record FLOOR replace3
    floor_stop
    floor_create 5; record FLOOR create5
    floor_stop
    if [[ $SKIP_OPERATOR != 1 ]]; then
        if [[ -z $NS ]]; then
            operator_setup
            watch_start clusters etcd "$CLUSTER_LINE"
            watch_start pods pods "$POD_LINE"
        fi
        operator_create "t3-$run" 3; record OPER create3
        operator_trace create3 "t3-$run"
        sleep "$SETTLE_S"
        operator_restart restart1 "t3-$run" 3 "$(operator_follower "t3-$run")"; record OPER restart1
        sleep "$SETTLE_S"
        # shellcheck disable=SC2046
        operator_restart restart3 "t3-$run" 3 $(kubectl -n "$NS" get pods -l "etcd_cluster=t3-$run" -o name | sed 's|^pod/||')
        record OPER restart3
        sleep "$SETTLE_S"
        operator_replace "t3-$run" 3; record OPER replace3
        operator_delete "t3-$run"
        operator_create "t5-$run" 5; record OPER create5
        operator_trace create5 "t5-$run"
        operator_delete "t5-$run"
        operator_create "v3-$run" 3 claims; record OPER create3v
        operator_trace create3v "v3-$run"
        sleep "$SETTLE_S"
        operator_repod "v3-$run" 3; record OPER repod1
        operator_delete "v3-$run"
        operator_create "s3-$run" 3 tls; record OPER create3tls
        operator_trace create3tls "s3-$run"
        operator_delete "s3-$run"
    fi
done

echo
echo "etcd-operator timings, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) ($(nproc) cores)"
echo "etcd $ETCD_VERSION ($ETCD); members added as $MODE"
echo "runs: $RUNS (median shown); a replacement starts ${SETTLE_S}s after Ready"
echo "CPU time stolen by the hypervisor during the runs: $(cpu_stolen) (/proc/stat)"
echo
printf '%-28s | %8s | %10s | %6s\n' scenario "floor s" "operator s" ratio
printf '%-28s-|-%8s-|-%10s-|-%6s\n' "" "" "" "" | tr ' ' -
# The floor of a member back on its volume is a restart on its data directory.
FLOOR[repod1]=${FLOOR[restart1]}
FLOOR[create3v]=${FLOOR[create3]}
for s in create3 create5 create3v restart1 restart3 repod1 replace3; do
    case $s in
        create3) label="create, 3 members" ;;
        create5) label="create, 5 members" ;;
        restart1) label="restart 1 of 3 (SIGKILL)" ;;
        restart3) label="restart 3 of 3 (SIGKILL)" ;;
        create3v) label="create, 3 on claims" ;;
        repod1) label="pod deleted, on a claim" ;;
        replace3) label="replace 1 of 3 (data lost)" ;;
    esac
    table_row "$label" "${FLOOR[$s]}" "${OPER[$s]:-}" 28
done
[[ $SKIP_OPERATOR == 1 ]] && echo "(SKIP_OPERATOR=1: operator not measured)"
# TLS against the same operator without it, in the same run (the floor is plain etcd).
plain=$(median "${OPER[create3]:-}")
tls=$(median "${OPER[create3tls]:-}")
echo
printf '%-28s | %8s | %10s | %6s\n' "operator, 3 members" "plain s" "TLS auto s" ratio
printf '%-28s | %8s | %10s | %6s\n' "create (CA + 3 certificates)" "$plain" "$tls" "$(ratio "$plain" "$tls")"
breakdown create3 create3 "create, 3 members"
breakdown create5 create5 "create, 5 members"
breakdown replace3 replace3 "replace 1 of 3" "the pod's delete; floor: since the kill"
breakdown restart1 restart1 "restart 1 of 3 (SIGKILL)" "the kill"
breakdown restart3 restart3 "restart 3 of 3 (SIGKILL)" "the kill"
if [[ $SKIP_OPERATOR != 1 ]]; then
    breakdown create3v create3 "create, 3 on claims (floor: plain create)"
    breakdown create3tls create3 "create, 3 with TLS auto (floor: plain create)"
    breakdown repod1 restart1 "pod deleted, on a claim (floor: restart 1)" "the pod's delete; floor: since the kill"
fi
cat <<'EOF'

For reference (from the issue): seed-then-add by hand on etcd 3.4.23 here took about
6.3 s for 3 members and 16 s for 5; the archived CoreOS operator takes one step per
8-second tick, roughly 17 s for 3 members and 33 s for 5.
EOF
