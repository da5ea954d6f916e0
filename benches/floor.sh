# shellcheck shell=bash disable=SC2034
# The FLOOR of benches/timings.sh and benches/fleet.sh: etcd bootstrapped, restarted and
# replaced by hand with etcdctl, exactly as the operator does it, without Kubernetes.
# Source it after benches/lib.sh. One floor cluster per shell: its members m1, m2, ... on
# $FLOOR_NET.1, .2, ... (ports 2379/2380), their data directories and logs under $WORK,
# their pids in PID (member index -> pid) and, when PIDFILE is set, appended to that file
# (so that a parent can kill the members a subshell started). Several floor clusters run at
# once in separate subshells, each with its own FLOOR_NET and WORK.
# Also uses: ETCD, ETCDCTL and LEARNERS (set by floor_etcd), TIMEOUT_S, LOG_TAG.

declare -A PID=()   # floor member index -> etcd pid

# Sets ETCD and ETCDCTL to etcd $1's binaries (3.4.23: Debian's /usr/bin/etcd and etcdctl;
# otherwise $CACHE/etcd/v$1/bin), LEARNERS and MODE to how members are added.
floor_etcd() {
    local ETCD_VERSION=$1
    [[ $ETCD_VERSION =~ ^([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || die "ETCD_VERSION must look like 3.5.35"
    if [[ $ETCD_VERSION == 3.4.23 ]]; then
        ETCD=/usr/bin/etcd ETCDCTL=/usr/bin/etcdctl
    else
        ETCD=$CACHE/etcd/v$ETCD_VERSION/bin/etcd ETCDCTL=$CACHE/etcd/v$ETCD_VERSION/bin/etcdctl
    fi
    [[ -x $ETCD && -x $ETCDCTL ]] ||
        die "no etcd $ETCD_VERSION at $ETCD (testkit/env/build/build-binaries.sh etcd, or ETCD_VERSIONS=v$ETCD_VERSION)"
    # The operator adds members as learners from etcd 3.4 on (Version::supports_learners).
    if (( BASH_REMATCH[1] > 3 || (BASH_REMATCH[1] == 3 && BASH_REMATCH[2] >= 4) )); then
        LEARNERS=1 MODE="learners (member add --learner, then member promote)"
    else
        LEARNERS=0 MODE="voting members (no learners before etcd 3.4)"
    fi
}

# The addresses listening on $1.1 to $1.$2, space-separated (none: the range is free).
floor_busy() {
    ss -ltnH 2>/dev/null | awk -v net="$1." -v last="$2" '
        index($4, net) == 1 { split(substr($4, length(net) + 1), a, ":"); if (a[1] >= 1 && a[1] <= last) print $4 }' |
        paste -sd' '
}

# etcdctl against a comma-separated list of endpoints.
ctl() {
    local endpoints=$1
    shift
    "$ETCDCTL" --endpoints="$endpoints" --dial-timeout=1s --command-timeout=3s "$@"
}

# The endpoint, among the comma-separated $1, of a member that is the leader ($2 = leader)
# or is not (follower).
endpoint_of() {
    local out
    out=$(ctl "$1" endpoint status -w fields 2>/dev/null) || true
    awk -F' : ' -v want="$2" '
        $1 == "\"MemberID\"" { id = $2 }
        $1 == "\"Leader\""   { leader = $2 }
        $1 == "\"Endpoint\"" { if ((id == leader) == (want == "leader")) { gsub(/"/, "", $2); print $2; exit } }' <<<"$out"
}

# The endpoint, among the comma-separated $1, of a member that is not the leader.
follower_of() { endpoint_of "$1" follower; }

# ---------------------------------------------------------------------------
# The floor: etcd by hand
# ---------------------------------------------------------------------------
ip() { echo "$FLOOR_NET.$1"; }
client_url() { echo "http://$(ip "$1"):2379"; }
peer_url() { echo "http://$(ip "$1"):2380"; }
# Client URLs of the running floor members.
endpoints() {
    local i urls=()
    for i in "${!PID[@]}"; do urls+=("$(client_url "$i")"); done
    local IFS=,
    echo "${urls[*]}"
}

# Starts member m$1: $2 = new|existing, $3 = --initial-cluster, $4 = token (for new).
floor_start() {
    local i=$1 state=$2 initial=$3 token=${4:-}
    local args=(--name "m$i" --data-dir "$WORK/m$i"
        --listen-peer-urls "$(peer_url "$i")" --listen-client-urls "$(client_url "$i")"
        --initial-advertise-peer-urls "$(peer_url "$i")" --advertise-client-urls "$(client_url "$i")"
        --initial-cluster "$initial" --initial-cluster-state "$state")
    [[ -n $token ]] && args+=(--initial-cluster-token "$token")
    # etcd reads ETCD_* variables as flags: ETCD_VERSION=3.4.23 would be refused.
    env "${ENV_UNSET[@]}" "$ETCD" "${args[@]}" >"$WORK/m$i.log" 2>&1 &
    PID[$i]=$!
    [[ -z ${PIDFILE:-} ]] || echo "$!" >>"$PIDFILE"
}

floor_stop() {
    local i
    for i in "${!PID[@]}"; do
        kill -KILL "${PID[$i]}" 2>/dev/null || true
        wait "${PID[$i]}" 2>/dev/null || true
        unset "PID[$i]"
    done
    rm -rf "$WORK"/m*
}

# The `member list` line of m$1 ("id, started, name, peer, client, learner").
member_line() { ctl "$(endpoints)" member list -w simple 2>/dev/null | grep -E "^[0-9a-f]+, [a-z]+, m$1, "; }

# True when m$1 is started (named in the member list) and answers `endpoint status`
# without errors; dies if its process has exited.
floor_healthy() {
    kill -0 "${PID[$1]}" 2>/dev/null || die "m$1 exited; its log: $(tail -5 "$WORK/m$1.log")"
    local status
    member_line "$1" >/dev/null || return 1
    status=$(ctl "$(client_url "$1")" endpoint status -w fields 2>/dev/null) || return 1
    [[ $status == *'"Errors" : []'* ]]
}

# `member add` m$1, retrying etcd's post-join refusals; sets INITIAL to the
# --initial-cluster etcd returned.
floor_add() {
    local i=$1 out flags=() deadline=$((SECONDS + TIMEOUT_S))
    ((LEARNERS)) && flags+=(--learner)
    until out=$(ctl "$(endpoints)" member add "m$i" --peer-urls="$(peer_url "$i")" "${flags[@]}" 2>&1); do
        [[ $out == *"unhealthy cluster"* || $out == *"not enough started members"* ]] ||
            die "member add m$i: $out"
        ((SECONDS < deadline)) || die "member add m$i still refused after ${TIMEOUT_S}s: $out"
        sleep 0.1
    done
    INITIAL=$(sed -n 's/^ETCD_INITIAL_CLUSTER="\(.*\)"$/\1/p' <<<"$out")
    [[ -n $INITIAL ]] || die "member add m$i printed no ETCD_INITIAL_CLUSTER: $out"
}

# `member promote` m$1, retrying until etcd accepts (it refuses a learner not yet in sync).
floor_promote() {
    local i=$1 id out deadline=$((SECONDS + TIMEOUT_S))
    id=$(member_line "$i" | cut -d, -f1)
    until out=$(ctl "$(endpoints)" member promote "$id" 2>&1); do
        ((SECONDS < deadline)) || die "member promote m$i still refused after ${TIMEOUT_S}s: $out"
        sleep 0.1
    done
}

# The steps of the floor measurement under way ("step ms" lines, ms since MARK_T0); none
# while MARK_T0 is empty.
MARK_T0="" MARKS=""
floor_mark() {
    [[ -n $MARK_T0 ]] || return 0
    MARKS+="$1 $(awk -v a="$MARK_T0" -v b="$(now)" 'BEGIN { printf "%.0f", (b - a) * 1000 }')"$'\n'
}
# Starts marking steps from the time $1 (as `now` gives it).
marks_begin() { MARK_T0=$1 MARKS=""; }
# Stops marking, and adds each step marked to FSTEPS under scenario $1, once: its first
# and its last time (over the members).
marks_end() {
    MARK_T0=""
    declare -F trace_steps >/dev/null || return 0   # a script without step tables
    trace_steps FSTEPS "$1" "$(awk '
        !($1 in first) { first[$1] = $2; order[++n] = $1 }
        { last[$1] = $2 }
        END { for (i = 1; i <= n; i++) print order[i], first[order[i]], last[order[i]] }' <<<"$MARKS")"
}

# Adds m$1 to the running floor cluster, starts it, waits until healthy, promotes it.
floor_join() {
    local i=$1
    floor_add "$i"
    floor_mark member_added
    floor_start "$i" existing "$INITIAL"
    floor_mark process_started
    poll "m$i to start" floor_healthy "$i"
    floor_mark member_healthy
    if ((LEARNERS)); then
        floor_promote "$i"
        floor_mark learner_promoted
    fi
}

# True when every floor member is started, healthy and voting.
floor_ready() {
    local i list
    for i in "${!PID[@]}"; do floor_healthy "$i" || return 1; done
    list=$(ctl "$(endpoints)" member list -w simple 2>/dev/null) || return 1
    [[ $(grep -c ', started, .*, false$' <<<"$list") == "$(wc -l <<<"$list")" ]]
}

# Bootstraps an N-member floor cluster seed-then-add; RESULT = the seconds it took.
# Its steps go to FSTEPS (see trace_steps) under scenario create$1.
floor_create() {
    local n=$1 start i
    start=$(now)
    marks_begin "$start"
    floor_start 1 new "m1=$(peer_url 1)" "${LOG_TAG:-floor}-$BASHPID-$RANDOM-$(date +%s%N)"
    floor_mark process_started
    poll "the seed to start" floor_healthy 1
    floor_mark member_healthy
    for ((i = 2; i <= n; i++)); do floor_join "$i"; done
    poll "the $n-member floor cluster to be ready" floor_ready
    floor_mark ready
    since "$start"
    marks_end "create$n"
}

# SIGKILLs the floor members $@ and starts them again on their data directories;
# RESULT = the seconds from the kill until ready again.
floor_restart() {
    local i start
    start=$(now)
    for i in "$@"; do
        kill -KILL "${PID[$i]}"
        wait "${PID[$i]}" 2>/dev/null || true
    done
    # With a data directory, etcd reads the membership from it, not from the flags.
    for i in "$@"; do floor_start "$i" existing "m$i=$(peer_url "$i")"; done
    poll "the restarted floor cluster to be ready" floor_ready
    since "$start"
}

# The index of a follower of the floor cluster.
floor_follower() {
    local victim
    victim=$(follower_of "$(endpoints)")
    [[ -n $victim ]] || die "no follower found among $(endpoints)"
    victim=${victim#"http://$FLOOR_NET."}
    echo "${victim%:2379}"
}

# In the running floor cluster: SIGKILL a follower (m$1 of member ID $2 when given, both
# looked up before the clock starts), remove it, add a new member (m4 in a 3-member
# cluster); RESULT = the seconds from the kill until ready again. Its steps go to FSTEPS
# under scenario replace3, since the kill.
floor_replace() {
    local victim id start out next=0 i deadline=$((SECONDS + TIMEOUT_S))
    victim=${1:-$(floor_follower)}
    id=${2:-$(member_line "$victim" | cut -d, -f1)}
    for i in "${!PID[@]}"; do ((i < next)) || next=$((i + 1)); done
    log "floor: killing follower m$victim"
    start=$(now)
    marks_begin "$start"
    kill -KILL "${PID[$victim]}"
    wait "${PID[$victim]}" 2>/dev/null || true
    unset "PID[$victim]"
    until out=$(ctl "$(endpoints)" member remove "$id" 2>&1); do
        [[ $out == *"unhealthy cluster"* || $out == *"not enough started members"* ]] ||
            die "member remove m$victim: $out"
        ((SECONDS < deadline)) || die "member remove m$victim still refused: $out"
        sleep 0.1
    done
    floor_mark member_removed
    floor_join "$next"
    poll "the replaced floor cluster to be ready" floor_ready
    floor_mark ready
    since "$start"
    marks_end replace3
}
