# shellcheck shell=bash disable=SC2034
# Shared by the measuring scripts in benches/: logging, the clock, polling, medians, and
# reading the operator's HTTPS endpoints with a token.
# Source it after setting ROOT, LOG_TAG and whichever of the settings below the script
# gives another default; the rest get the defaults here.

ETCD_VERSION=${ETCD_VERSION:-3.5.35}
SKIP_OPERATOR=${SKIP_OPERATOR:-0}
RUNS=${RUNS:-1}
SETTLE_S=${SETTLE_S:-6}
FLOOR_NET=${FLOOR_NET:-127.0.200}
TIMEOUT_S=${TIMEOUT_S:-180}
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
export ETCDCTL_API=3

# The YAML of an EtcdCluster $1 of $2 members at etcd $3, with the spec lines $4 (if any)
# after those.
cluster_yaml() {
    printf 'apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  name: %s\n' "$1"
    printf 'spec:\n  size: %s\n  version: "%s"\n' "$2" "$3"
    if [[ -n ${4:-} ]]; then printf '%s\n' "$4"; fi
}

log() { printf '[%s] %s\n' "${LOG_TAG:-bench}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

now() { date +%s.%N; }
# Sets RESULT to the seconds since $1, to the millisecond. (Measuring functions set RESULT
# rather than print: run in $(...), they would lose the pids they start.)
RESULT=""
since() { RESULT=$(awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'); }

# The machine's CPU counters (the "cpu" line of /proc/stat) when the script started, and
# the share of all CPU time since then that the hypervisor gave to others ("steal"): a run
# with much of it measured a busier machine than its floor may have had.
CPU_AT_START=$(head -1 /proc/stat)
cpu_stolen() {
    awk -v a="$CPU_AT_START" -v b="$(head -1 /proc/stat)" 'BEGIN {
        split(a, x, " "); split(b, y, " "); total = 0
        for (i = 2; i <= 9; i++) total += y[i] - x[i]
        printf "%.1f%%", total ? 100 * (y[9] - x[9]) / total : 0 }'
}

# Runs "$@" every 100 ms until it succeeds; dies after TIMEOUT_S seconds naming $1.
poll() {
    local what=$1 deadline=$((SECONDS + ${TIMEOUT_S:-180}))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || die "timed out after ${TIMEOUT_S:-180}s waiting for $what"
        sleep 0.1
    done
}

# The median of the space-separated numbers $1 (two decimals), or "-" when there are none.
median() {
    [[ -n ${1:-} ]] || { echo -; return; }
    tr ' ' '\n' <<<"$1" | grep . | sort -g |
        awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'
}

# $2 / $1 as "1.3x", or "-" when $2 is "-".
ratio() {
    if [[ $2 == - ]]; then echo -; else awk -v f="$1" -v o="$2" 'BEGIN { printf "%.1fx", o / f }'; fi
}

# Every ETCD_* variable (ETCD_VERSION, ETCD_OPERATOR_CACHE, ...) as `env -u` arguments:
# etcd and etcdutl read ETCD_* variables as flags.
ENV_UNSET=()
for v in $(compgen -e); do [[ $v == ETCD_* ]] && ENV_UNSET+=(-u "$v"); done

# Deletes namespace $NS when one was made (the operator part of a measurement).
delete_namespace() {
    [[ -n ${NS:-} ]] || return 0
    log "deleting namespace $NS"
    kubectl delete namespace "$NS" --ignore-not-found --timeout=120s >/dev/null ||
        log "namespace $NS is still being deleted"
}

# One row of a result table: label $1 (padded to $4 characters), the medians of the floor's
# times $2 and the operator's $3, and their ratio.
table_row() {
    local f o
    f=$(median "$2")
    o=$(median "$3")
    printf "%-${4}s | %8s | %10s | %6s\n" "$1" "$f" "$o" "$(ratio "$f" "$o")"
}

# A token that may read the operator's /metrics and /debug/ (the local environment's
# operator-reader, testkit/env/operator-reader.yaml). Kept in a file of the environment
# for an hour, since callers run in subshells.
operator_token() {
    local file=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}/operator-reader.token
    if [[ ! -s $file || -n $(find "$file" -mmin +60 2>/dev/null) ]]; then
        kubectl apply -f "$ROOT/testkit/env/operator-reader.yaml" >/dev/null || return 1
        kubectl -n etcd-operator create token operator-reader --duration=2h >"$file.new" || return 1
        mv "$file.new" "$file"
    fi
    cat "$file"
}

# curl on the operator's HTTPS server with the reader's token (its certificate is
# self-signed in the local environment: not verified).
operator_curl() {
    local token
    token=$(operator_token) || return 1
    curl -k -H "Authorization: Bearer $token" "$@"
}

# The leader's pod name, process ID and metrics URL: LEADER, PID, METRICS.
find_leader() {
    local container ip
    LEADER=$(kubectl -n etcd-operator get lease etcd-operator -o jsonpath='{.spec.holderIdentity}')
    [[ -n $LEADER ]] || die "no operator holds the Lease etcd-operator/etcd-operator"
    PID=$(bash "$ROOT/testkit/env/node/nodes.sh" pid etcd-operator "$LEADER" operator) || true
    [[ $PID =~ ^[0-9]+$ && -r /proc/$PID/stat ]] ||
        die "the leader $LEADER has no local process (nodes.sh pid: '$PID')"
    ip=$(kubectl -n etcd-operator get pod "$LEADER" -o jsonpath='{.status.podIP}')
    METRICS=https://$ip:8443/metrics
}

# utime + stime of process $PID, in clock ticks (fields 14 and 15 of /proc/PID/stat,
# counted after the command name, which may hold spaces).
cpu_ticks() {
    local stat
    stat=$(<"/proc/$PID/stat") || die "the leader's process $PID is gone"
    awk '{ print $12 + $13 }' <<<"${stat##*) }"
}

# VmRSS of process $PID, in MiB.
rss_mib() {
    awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$PID/status"
}

# The sum of every sample of the counter family $1 (all label sets) at $METRICS.
counter() {
    operator_curl -fsS --max-time 10 "$METRICS" |
        awk -v name="$1" '$1 == name || index($1, name "{") == 1 { s += $2 } END { printf "%d", s }'
}

# Brings up the local environment (testkit/env/local-up.sh without an example; a fast no-op
# when it is up), its output in $WORK/local-up.log, and points KUBECONFIG at it. Without
# ETCD_VERSION: the store etcd it may start would take it for a flag.
local_env_up() {
    log "bringing up the local environment (EXAMPLE= testkit/env/local-up.sh; a no-op when up)"
    (cd "$ROOT" && env -u ETCD_VERSION EXAMPLE='' bash testkit/env/local-up.sh) >"$WORK/local-up.log" 2>&1 ||
        die "testkit/env/local-up.sh failed: $(tail -20 "$WORK/local-up.log")"
    export KUBECONFIG=$LOCAL_ENV_DIR/kubeconfig
}
