#!/usr/bin/env bash
# A real, local Kubernetes control plane on loopback, without containers:
#
#   store etcd               http://127.0.0.1:12379 (peer 12380)
#   kube-apiserver           https://127.0.0.1:16443
#   kube-controller-manager  https://127.0.0.1:16257 (health only)
#
# The apiserver reaches kubelets (the process node's kubelet API, for kubectl logs) at
# their InternalIP with a client certificate of its own, user kube-apiserver-kubelet-client
# (bound to system:kubelet-api-admin), and checks their serving certificates against the
# cluster CA (the controller-manager signs kubelet-serving requests with it).
#
# Usage: testkit/env/control-plane.sh up|down|env|status
#
#   up      start whatever is not running yet (a no-op when all is up), wait until
#           the apiserver is ready and the controller-manager works, write the
#           admin kubeconfig and print where it is
#   down    stop the processes this script started (by the pids it recorded) and
#           remove $LOCAL_ENV_DIR
#   env     print `export KUBECONFIG=...` (use: eval "$(testkit/env/control-plane.sh env)")
#   status  say what is running
#
# All state (certificates, etcd data, logs, pid files, kubeconfig) lives under
# LOCAL_ENV_DIR (default /tmp/etcd-operator-local); the kubeconfig is always
# $LOCAL_ENV_DIR/kubeconfig.
#
# Environment:
#   LOCAL_ENV_DIR        state directory (default /tmp/etcd-operator-local)
#   ETCD_OPERATOR_CACHE  binary cache of build-binaries.sh (default $HOME/.cache/etcd-operator)
#   K8S_VERSION          Kubernetes version to run (default v1.35.4)
#   STORE_ETCD_BIN       etcd binary for the apiserver's store (default: the cached
#                        etcd 3.5 if built, else Debian's /usr/bin/etcd 3.4)
#   STORE_ETCD_PORT      store etcd client port (default 12379; the peer port is +1).
#                        Not 2379/2380: the etcd pods under test use those on 127.x.
#   APISERVER_PORT       kube-apiserver secure port (default 16443)
#   KCM_PORT             kube-controller-manager secure port (default 16257)
#   UP_TIMEOUT           seconds to wait for each component (default 120)
#
# Missing Kubernetes binaries are built by testkit/env/build-binaries.sh (about 5 minutes
# the first time).
set -euo pipefail

TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
K8S_VERSION=${K8S_VERSION:-v1.35.4}
STORE_ETCD_PORT=${STORE_ETCD_PORT:-12379}
STORE_ETCD_PEER_PORT=$((STORE_ETCD_PORT + 1))
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-16257}
UP_TIMEOUT=${UP_TIMEOUT:-120}

HOST=127.0.0.1
KUBE_BIN_DIR="$CACHE/k8s/$K8S_VERSION/bin"
PKI="$LOCAL_ENV_DIR/pki"
RUN="$LOCAL_ENV_DIR/run"   # <name>.pid and <name>.exe of each started process
LOGS="$LOCAL_ENV_DIR/logs"
KUBECONFIG_PATH="$LOCAL_ENV_DIR/kubeconfig"
APISERVER_URL="https://$HOST:$APISERVER_PORT"
# Marks a directory as ours, so `down` never removes a directory it did not make.
MARKER="$LOCAL_ENV_DIR/.etcd-operator-local"

# Stop order is the reverse of this.
COMPONENTS=(etcd kube-apiserver kube-controller-manager)

log() { printf '[control-plane] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------------------
# Processes: started detached, recorded by pid and binary, checked by both
# ---------------------------------------------------------------------------

# True when the recorded process of component $1 is alive and still runs the
# binary we started (guards against a recycled pid).
is_running() {
    local name=$1 pid exe actual
    [[ -f $RUN/$name.pid && -f $RUN/$name.exe ]] || return 1
    pid=$(<"$RUN/$name.pid")
    exe=$(<"$RUN/$name.exe")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    actual=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    [[ ${actual% (deleted)} == "$exe" ]]
}

# start NAME BINARY ARGS...: run it in its own session, detached from this shell,
# logging to $LOGS/NAME.log, and record its pid and binary.
start() {
    local name=$1 bin
    bin=$(readlink -f "$2")
    shift 2
    log "starting $name ($bin)"
    # setsid without -f execs in place (a background job of a non-interactive
    # shell is not a process group leader), so $! is the component's own pid.
    setsid "$bin" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
    local pid=$!
    echo "$bin" >"$RUN/$name.exe"
    echo "$pid" >"$RUN/$name.pid"
}

# Print the end of a component's log, for failure messages.
log_tail() {
    local name=$1
    log "last lines of $LOGS/$name.log:"
    tail -n 40 "$LOGS/$name.log" >&2 2>/dev/null || true
}

# wait_until NAME WHAT CMD...: poll CMD until it succeeds; fail with the log tail
# when the process dies or UP_TIMEOUT passes.
wait_until() {
    local name=$1 what=$2
    shift 2
    local deadline=$((SECONDS + UP_TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        if ! is_running "$name"; then
            log_tail "$name"
            die "$name exited before $what (log: $LOGS/$name.log; clean up with: $0 down)"
        fi
        if ((SECONDS >= deadline)); then
            log_tail "$name"
            die "$name: no $what after ${UP_TIMEOUT}s (log: $LOGS/$name.log; clean up with: $0 down)"
        fi
        sleep 0.5
    done
}

# True when something listens on $HOST:$1.
port_in_use() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Refuse to start a component whose port someone else holds.
require_free_port() {
    local name=$1 port=$2
    if port_in_use "$port"; then
        die "port $HOST:$port is in use by another process; cannot start $name (set the *_PORT variables to move it)"
    fi
}

# Stop component $1 if it is the process we recorded: SIGTERM, then SIGKILL.
stop() {
    local name=$1 pid i
    if is_running "$name"; then
        pid=$(<"$RUN/$name.pid")
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            is_running "$name" || break
            sleep 0.1
        done
        if is_running "$name"; then
            log "$name did not stop in 10s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
        fi
    fi
    rm -f "$RUN/$name.pid" "$RUN/$name.exe"
}

# ---------------------------------------------------------------------------
# Binaries
# ---------------------------------------------------------------------------

ensure_kube_binaries() {
    if [[ ! -x $KUBE_BIN_DIR/kube-apiserver || ! -x $KUBE_BIN_DIR/kube-controller-manager ]]; then
        log "Kubernetes $K8S_VERSION binaries missing in $KUBE_BIN_DIR; building them"
        K8S_VERSION=$K8S_VERSION ETCD_OPERATOR_CACHE=$CACHE "$TOOLS_DIR/build-binaries.sh" k8s >&2
    fi
}

# The store etcd of this environment. Chosen once and recorded, so that a
# restart never opens the data directory with another etcd version.
store_etcd_bin() {
    local chosen="$LOCAL_ENV_DIR/store-etcd"
    if [[ ! -f $chosen ]]; then
        local bin=${STORE_ETCD_BIN:-}
        if [[ -z $bin ]]; then
            if [[ -x $CACHE/etcd/v3.5/bin/etcd ]]; then
                bin="$CACHE/etcd/v3.5/bin/etcd"
            elif [[ -x /usr/bin/etcd ]]; then
                bin=/usr/bin/etcd
            else
                log "no etcd found (neither $CACHE/etcd/v3.5 nor /usr/bin/etcd); building etcd 3.5"
                ETCD_VERSIONS=3.5 ETCD_OPERATOR_CACHE=$CACHE "$TOOLS_DIR/build-binaries.sh" etcd >&2
                bin="$CACHE/etcd/v3.5/bin/etcd"
            fi
        fi
        [[ -x $bin ]] || die "store etcd binary '$bin' is not executable"
        readlink -f "$bin" >"$chosen"
    fi
    cat "$chosen"
}

# ---------------------------------------------------------------------------
# Certificates (openssl) and kubeconfig
# ---------------------------------------------------------------------------

# sign DIR NAME SUBJECT EXTENSIONS [CA]: key + certificate signed by DIR/CA.crt
# (default: the cluster CA, "ca").
sign() {
    local dir=$1 name=$2 subject=$3 ext=$4 ca=${5:-ca}
    openssl genrsa -out "$dir/$name.key" 2048 2>/dev/null
    openssl req -new -key "$dir/$name.key" -subj "$subject" -out "$dir/$name.csr"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/$ca.crt" -CAkey "$dir/$ca.key" \
        -CAcreateserial -days 3650 -sha256 -out "$dir/$name.crt" \
        -extfile <(printf '%s\n' "$ext") 2>/dev/null
    rm -f "$dir/$name.csr"
}

# All certificates and keys, made once per environment (in a temporary
# directory renamed into place, so a half-made set is never used).
ensure_pki() {
    [[ -f $PKI/.complete ]] && return 0
    log "generating certificates in $PKI"
    local tmp="$PKI.partial"
    rm -rf "$tmp" "$PKI"
    mkdir -p "$tmp"
    chmod 700 "$tmp"

    # The cluster CA: signs the serving and client certificates; the apiserver
    # trusts client certificates it signed, and it is the root CA of the cluster.
    openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 3650 \
        -keyout "$tmp/ca.key" -out "$tmp/ca.crt" -subj "/CN=etcd-operator-local-ca" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,digitalSignature,keyCertSign,cRLSign" 2>/dev/null

    # kube-apiserver serving certificate: loopback plus the in-cluster names.
    sign "$tmp" apiserver "/CN=kube-apiserver" "$(
        printf '%s\n' \
            "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=serverAuth" \
            "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    )"

    # Admin client certificate: group system:masters is cluster-admin under RBAC.
    sign "$tmp" admin "/O=system:masters/CN=kubernetes-admin" "$(
        printf '%s\n' \
            "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=clientAuth"
    )"

    # Front-proxy (request header) CA and client: the apiserver publishes this CA
    # in kube-system/extension-apiserver-authentication, which the delegated
    # authentication of the controller-manager (and any aggregated API) reads.
    openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 3650 \
        -keyout "$tmp/front-proxy-ca.key" -out "$tmp/front-proxy-ca.crt" -subj "/CN=etcd-operator-local-front-proxy-ca" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,digitalSignature,keyCertSign,cRLSign" 2>/dev/null
    sign "$tmp" front-proxy-client "/CN=front-proxy-client" "$(
        printf '%s\n' \
            "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=clientAuth"
    )" front-proxy-ca

    # Service-account token signing key pair (apiserver signs and verifies,
    # the controller-manager signs the legacy token secrets).
    openssl genrsa -out "$tmp/sa.key" 2048 2>/dev/null
    openssl rsa -in "$tmp/sa.key" -pubout -out "$tmp/sa.pub" 2>/dev/null

    touch "$tmp/.complete"
    mv "$tmp" "$PKI"
}

# The apiserver's client certificate for kubelets (kubectl logs, exec, port-forward): its
# user is bound to the system:kubelet-api-admin role (see bind_kubelet_client), which the
# process node's SubjectAccessReview checks. Made separately so that an environment whose
# certificates predate it gets it too.
ensure_kubelet_client_cert() {
    [[ -f $PKI/kubelet-client.crt && -f $PKI/kubelet-client.key ]] && return 0
    log "generating the apiserver's kubelet client certificate"
    sign "$PKI" kubelet-client "/CN=kube-apiserver-kubelet-client" "$(
        printf '%s\n' \
            "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=clientAuth"
    )"
}

# The admin kubeconfig, certificates embedded so it can be copied anywhere.
write_kubeconfig() {
    local tmp="$KUBECONFIG_PATH.tmp"
    cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 "$PKI/admin.crt")
    client-key-data: $(base64 -w0 "$PKI/admin.key")
contexts:
- name: local
  context:
    cluster: local
    user: admin
current-context: local
EOF
    chmod 600 "$tmp"
    mv "$tmp" "$KUBECONFIG_PATH"
}

# ---------------------------------------------------------------------------
# Health checks
# ---------------------------------------------------------------------------

etcd_healthy() {
    curl -fsS --max-time 2 "http://$HOST:$STORE_ETCD_PORT/health" | grep -q '"health":"true"'
}

# GET a path of the apiserver as admin.
api_get() {
    curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "$APISERVER_URL$1"
}

apiserver_ready() { [[ $(api_get /readyz) == ok ]]; }

kcm_healthy() { [[ $(curl -fsSk --max-time 2 "https://$HOST:$KCM_PORT/healthz") == ok ]]; }

# The serviceaccount controller has made the default namespace's "default"
# account: pods can be created from then on.
default_sa_exists() { api_get /api/v1/namespaces/default/serviceaccounts/default; }

# ---------------------------------------------------------------------------
# Components
# ---------------------------------------------------------------------------

up_etcd() {
    if is_running etcd; then
        return 0
    fi
    local bin
    bin=$(store_etcd_bin)
    require_free_port etcd "$STORE_ETCD_PORT"
    require_free_port etcd "$STORE_ETCD_PEER_PORT"
    local state=new
    [[ -d $LOCAL_ENV_DIR/etcd-data/member ]] && state=existing
    start etcd "$bin" \
        --name=store \
        --data-dir="$LOCAL_ENV_DIR/etcd-data" \
        --listen-client-urls="http://$HOST:$STORE_ETCD_PORT" \
        --advertise-client-urls="http://$HOST:$STORE_ETCD_PORT" \
        --listen-peer-urls="http://$HOST:$STORE_ETCD_PEER_PORT" \
        --initial-advertise-peer-urls="http://$HOST:$STORE_ETCD_PEER_PORT" \
        --initial-cluster="store=http://$HOST:$STORE_ETCD_PEER_PORT" \
        --initial-cluster-state="$state" \
        --logger=zap --log-outputs=stderr
    wait_until etcd "health on :$STORE_ETCD_PORT" etcd_healthy
    log "etcd ready at http://$HOST:$STORE_ETCD_PORT"
}

up_apiserver() {
    if is_running kube-apiserver; then
        wait_until kube-apiserver "/readyz ok" apiserver_ready
        return 0
    fi
    require_free_port kube-apiserver "$APISERVER_PORT"
    mkdir -p "$LOCAL_ENV_DIR/apiserver"
    # --endpoint-reconciler-type=none: the apiserver would otherwise publish its
    # advertise address in the "kubernetes" Endpoints every 10s, and a loopback
    # address is invalid there (an error in the log each time). Nothing here
    # reaches the apiserver through that Service; clients use the kubeconfig.
    start kube-apiserver "$KUBE_BIN_DIR/kube-apiserver" \
        --etcd-servers="http://$HOST:$STORE_ETCD_PORT" \
        --bind-address=$HOST \
        --advertise-address=$HOST \
        --secure-port="$APISERVER_PORT" \
        --cert-dir="$LOCAL_ENV_DIR/apiserver" \
        --tls-cert-file="$PKI/apiserver.crt" \
        --tls-private-key-file="$PKI/apiserver.key" \
        --client-ca-file="$PKI/ca.crt" \
        --authorization-mode=RBAC \
        --service-cluster-ip-range=10.96.0.0/16 \
        --allow-privileged=true \
        --service-account-issuer=https://kubernetes.default.svc \
        --service-account-key-file="$PKI/sa.pub" \
        --service-account-signing-key-file="$PKI/sa.key" \
        --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
        --requestheader-allowed-names=front-proxy-client \
        --requestheader-username-headers=X-Remote-User \
        --requestheader-group-headers=X-Remote-Group \
        --requestheader-extra-headers-prefix=X-Remote-Extra- \
        --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
        --proxy-client-key-file="$PKI/front-proxy-client.key" \
        --kubelet-client-certificate="$PKI/kubelet-client.crt" \
        --kubelet-client-key="$PKI/kubelet-client.key" \
        --kubelet-certificate-authority="$PKI/ca.crt" \
        --kubelet-preferred-address-types=InternalIP,Hostname \
        --endpoint-reconciler-type=none \
        --profiling=false
    wait_until kube-apiserver "/readyz ok" apiserver_ready
    log "kube-apiserver ready at $APISERVER_URL"
}

# POST a JSON object to a path of the apiserver as admin; an object that already exists
# is fine.
api_create() {
    local code
    code=$(curl -sS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -X POST \
        --data "$2" "$APISERVER_URL$1")
    [[ $code == 201 || $code == 409 ]] || die "POST $1 answered $code"
}

# The apiserver's kubelet client may use the kubelet API (logs, exec, ...) of every node,
# as kubeadm binds it.
bind_kubelet_client() {
    api_create /apis/rbac.authorization.k8s.io/v1/clusterrolebindings '{
      "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
      "metadata": {"name": "kube-apiserver-kubelet-client"},
      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
      "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}]}'
}

up_controller_manager() {
    if ! is_running kube-controller-manager; then
        require_free_port kube-controller-manager "$KCM_PORT"
        mkdir -p "$LOCAL_ENV_DIR/controller-manager"
        # It connects as admin and runs each controller under its own service
        # account (--use-service-account-credentials), as kubeadm clusters do.
        start kube-controller-manager "$KUBE_BIN_DIR/kube-controller-manager" \
            --kubeconfig="$KUBECONFIG_PATH" \
            --authentication-kubeconfig="$KUBECONFIG_PATH" \
            --authorization-kubeconfig="$KUBECONFIG_PATH" \
            --bind-address=$HOST \
            --secure-port="$KCM_PORT" \
            --cert-dir="$LOCAL_ENV_DIR/controller-manager" \
            --controllers='*' \
            --leader-elect=false \
            --use-service-account-credentials=true \
            --service-account-private-key-file="$PKI/sa.key" \
            --root-ca-file="$PKI/ca.crt" \
            --cluster-signing-cert-file="$PKI/ca.crt" \
            --cluster-signing-key-file="$PKI/ca.key" \
            --service-cluster-ip-range=10.96.0.0/16 \
            --profiling=false
    fi
    wait_until kube-controller-manager "/healthz ok" kcm_healthy
    wait_until kube-controller-manager "default service account (serviceaccount controller)" default_sa_exists
    log "kube-controller-manager running"
}

# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------

cmd_up() {
    command -v openssl >/dev/null || die "openssl is needed (apt-get install openssl)"
    command -v curl >/dev/null || die "curl is needed (apt-get install curl)"

    if [[ -e $LOCAL_ENV_DIR && ! -f $MARKER ]]; then
        die "$LOCAL_ENV_DIR exists but was not made by this script; set LOCAL_ENV_DIR elsewhere"
    fi

    local all_up=1 c
    for c in "${COMPONENTS[@]}"; do is_running "$c" || all_up=0; done
    if ((all_up)) && [[ -f $KUBECONFIG_PATH ]] && apiserver_ready; then
        log "already running; KUBECONFIG=$KUBECONFIG_PATH"
        return 0
    fi

    ensure_kube_binaries
    mkdir -p "$LOCAL_ENV_DIR" "$RUN" "$LOGS"
    touch "$MARKER"
    chmod 700 "$LOCAL_ENV_DIR"
    ensure_pki
    ensure_kubelet_client_cert
    write_kubeconfig

    local start_time=$SECONDS
    up_etcd
    up_apiserver
    bind_kubelet_client
    up_controller_manager
    log "control plane up in $((SECONDS - start_time))s"
    log "KUBECONFIG=$KUBECONFIG_PATH   (eval \"\$($0 env)\")"
}

cmd_down() {
    if [[ ! -e $LOCAL_ENV_DIR ]]; then
        log "nothing to stop ($LOCAL_ENV_DIR does not exist)"
        return 0
    fi
    [[ -f $MARKER ]] || die "$LOCAL_ENV_DIR was not made by this script; not touching it"
    local i
    for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
        stop "${COMPONENTS[i]}"
    done
    rm -rf "$LOCAL_ENV_DIR"
    log "stopped; removed $LOCAL_ENV_DIR"
}

cmd_env() {
    [[ -f $KUBECONFIG_PATH ]] || log "warning: $KUBECONFIG_PATH does not exist yet (run: $0 up)"
    printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_PATH"
}

cmd_status() {
    local c rc=0
    for c in "${COMPONENTS[@]}"; do
        if is_running "$c"; then
            printf '%-24s running (pid %s)\n' "$c" "$(<"$RUN/$c.pid")"
        else
            printf '%-24s stopped\n' "$c"
            rc=1
        fi
    done
    if [[ -f $LOCAL_ENV_DIR/store-etcd ]]; then
        printf '%-24s %s\n' "store etcd binary" "$(<"$LOCAL_ENV_DIR/store-etcd")"
    fi
    printf '%-24s %s\n' kubeconfig "$KUBECONFIG_PATH"
    return $rc
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
status) cmd_status ;;
-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
*)
    echo "usage: $0 up|down|env|status" >&2
    exit 2
    ;;
esac
