#!/usr/bin/env bash
# A real, local Kubernetes control plane without containers, on the pod network of
# testkit/env/network/podnet.sh (brought up first, taken down last):
#
#   store etcd               http://127.0.0.1:12379 (peer 12380)
#   kube-apiserver           https://10.255.0.1:16443: the host's address on the pod
#                            network (eo-host), where pods reach it (the "kubernetes"
#                            Service's endpoint, 10.96.0.1:443 through kube-proxy)
#   apiserver-loopback       https://127.0.0.1:16443 for the host's clients (kubeconfig):
#                            socat forwarding to 10.255.0.1:16443, so that the API server
#                            listens on no address of the host's external interfaces
#   kube-controller-manager  https://127.0.0.1:16257 (health only); allocates each Node a
#                            /24 of the pod range 10.244.0.0/16 (spec.podCIDR)
#   kube-scheduler           https://127.0.0.1:16259 (health only); places pods on the
#                            nodes
#
# Services get ClusterIPs from 10.96.0.0/12, the range podnet.sh routes into eo-net, where
# kube-proxy programs them (testkit/env/network/cluster-net.sh, started once a node exists).
#
# The apiserver reaches kubelets (for kubectl logs and exec) at
# their InternalIP with a client certificate of its own, user kube-apiserver-kubelet-client
# (bound to system:kubelet-api-admin), and checks their serving certificates against the
# cluster CA (the controller-manager signs kubelet-serving requests with it).
#
# Usage: testkit/env/control-plane/control-plane.sh up|down|env|status
#
#   up      bring the pod network up (podnet.sh up), start whatever is not running yet (a
#           no-op when all is up), wait until the apiserver is ready and the
#           controller-manager works, write the admin kubeconfig and print where it is
#   down    stop the processes this script started (by the pids it recorded), take the
#           pod network down and remove $LOCAL_ENV_DIR
#   env     print `export KUBECONFIG=...` (use: eval "$(testkit/env/control-plane/control-plane.sh env)")
#   status  say what is running
#
# All state (certificates, etcd data, logs, pid files, kubeconfigs, the pod network's
# records) lives under LOCAL_ENV_DIR (default /tmp/etcd-operator-local); the kubeconfig is
# always $LOCAL_ENV_DIR/kubeconfig. Besides it, kubeconfigs for components that run inside
# the pod network and reach the apiserver at 10.255.0.1: controller-manager.kubeconfig
# (admin), kube-scheduler.kubeconfig (user system:kube-scheduler), kube-proxy.kubeconfig (user system:kube-proxy, the built-in
# system:node-proxier role) and coredns.kubeconfig (user system:coredns, a ClusterRole
# system:coredns made here as kubeadm makes it).
#
# Environment:
#   LOCAL_ENV_DIR        state directory (default /tmp/etcd-operator-local)
#   ETCD_OPERATOR_CACHE  binary cache of build-binaries.sh (default $HOME/.cache/etcd-operator)
#   K8S_VERSION          Kubernetes version to run (default v1.35.4)
#   STORE_ETCD_BIN       etcd binary for the apiserver's store (default: the cached
#                        etcd 3.5 if built, else Debian's /usr/bin/etcd 3.4)
#   STORE_ETCD_PORT      store etcd client port (default 12379; the peer port is +1).
#                        Not 2379/2380: the etcd pods under test use those.
#   APISERVER_PORT       kube-apiserver secure port (default 16443), on both addresses
#   KCM_PORT             kube-controller-manager secure port (default 16257)
#   SCHEDULER_PORT       kube-scheduler secure port (default 16259)
#   UP_TIMEOUT           seconds to wait for each component (default 120)
#
# Missing Kubernetes binaries are built by testkit/env/build/build-binaries.sh (about 5 minutes
# the first time).
set -euo pipefail

# testkit/env/, this script's parent directory: lib.sh and the other scripts are found from it.
TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=testkit/env/lib.sh
source "$TOOLS_DIR/lib.sh"
LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
K8S_VERSION=${K8S_VERSION:-v1.35.4}
STORE_ETCD_PORT=${STORE_ETCD_PORT:-12379}
STORE_ETCD_PEER_PORT=$((STORE_ETCD_PORT + 1))
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-16257}
SCHEDULER_PORT=${SCHEDULER_PORT:-16259}
UP_TIMEOUT=${UP_TIMEOUT:-120}

HOST=127.0.0.1
# The host's address on the pod network (podnet.sh's eo-host): the apiserver listens and
# advertises here; pods and the components inside eo-net reach it here.
POD_NET_HOST=10.255.0.1
SERVICE_RANGE=10.96.0.0/12 # what podnet.sh routes to eo-net; 10.96.0.1 is "kubernetes"
CLUSTER_CIDR=10.244.0.0/16 # podnet.sh's pod range; one /24 per Node
KUBE_BIN_DIR="$CACHE/k8s/$K8S_VERSION/bin"
PKI="$LOCAL_ENV_DIR/pki"
RUN="$LOCAL_ENV_DIR/run"   # <name>.pid and <name>.exe of each started process
LOGS="$LOCAL_ENV_DIR/logs"
KUBECONFIG_PATH="$LOCAL_ENV_DIR/kubeconfig"
APISERVER_URL="https://$HOST:$APISERVER_PORT"
APISERVER_POD_NET_URL="https://$POD_NET_HOST:$APISERVER_PORT"
# Marks a directory as ours, so `down` never removes a directory it did not make.
MARKER="$LOCAL_ENV_DIR/.etcd-operator-local"

# Stop order is the reverse of this.
COMPONENTS=(etcd kube-apiserver apiserver-loopback kube-controller-manager kube-scheduler)

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

# port_in_use PORT [ADDRESS]: something listens on ADDRESS (default $HOST):PORT.
port_in_use() { (exec 3<>"/dev/tcp/${2:-$HOST}/$1") 2>/dev/null; }

# require_free_port NAME PORT [ADDRESS]: refuse to start a component whose port someone
# else holds.
require_free_port() {
    local name=$1 port=$2 address=${3:-$HOST}
    if port_in_use "$port" "$address"; then
        die "port $address:$port is in use by another process; cannot start $name (set the *_PORT variables to move it)"
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
        K8S_VERSION=$K8S_VERSION ETCD_OPERATOR_CACHE=$CACHE "$TOOLS_DIR/build/build-binaries.sh" k8s >&2
    fi
    if [[ ! -x $KUBE_BIN_DIR/kube-scheduler ]]; then
        log "kube-scheduler $K8S_VERSION missing in $KUBE_BIN_DIR; building it"
        K8S_VERSION=$K8S_VERSION ETCD_OPERATOR_CACHE=$CACHE "$TOOLS_DIR/build/build-binaries.sh" kube-scheduler >&2
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
                ETCD_VERSIONS=3.5 ETCD_OPERATOR_CACHE=$CACHE "$TOOLS_DIR/build/build-binaries.sh" etcd >&2
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

# The kube-apiserver's serving certificate: both of its addresses (loopback for the host,
# 10.255.0.1 on the pod network), the "kubernetes" Service's ClusterIP and in-cluster
# names. Made again when an older one lacks the pod network's address.
ensure_apiserver_cert() {
    local names
    names=$(openssl x509 -in "$PKI/apiserver.crt" -noout -ext subjectAltName 2>/dev/null || true)
    [[ $names == *"IP Address:$POD_NET_HOST,"* ]] && return 0
    log "generating the apiserver's serving certificate"
    sign "$PKI" apiserver "/CN=kube-apiserver" "$(
        printf '%s\n' \
            "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=serverAuth" \
            "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:$POD_NET_HOST,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    )"
}

# ensure_client_cert NAME SUBJECT: a client certificate of the cluster CA, made once:
# the apiserver's kubelet client (kubectl logs, exec, port-forward; its user is bound to
# system:kubelet-api-admin by bind_kubelet_client, which each kubelet's webhook
# authorization checks), kube-proxy's and CoreDNS's.
ensure_client_cert() {
    local name=$1 subject=$2
    [[ -f $PKI/$name.crt && -f $PKI/$name.key ]] && return 0
    log "generating the client certificate $name ($subject)"
    sign "$PKI" "$name" "$subject" "$(
        printf '%s\n' \
            "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=clientAuth"
    )"
}

# write_kubeconfig PATH SERVER CERT: a kubeconfig for the user of certificate $PKI/CERT at
# SERVER, certificates embedded so it can be copied anywhere.
write_kubeconfig() {
    local path=$1 server=$2 cert=$3 tmp="$1.tmp"
    cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: local
  context:
    cluster: local
    user: $cert
current-context: local
EOF
    chmod 600 "$tmp"
    mv "$tmp" "$path"
}

# The admin kubeconfig for the host's clients (through 127.0.0.1), the controller-manager's
# and those of the components that run inside the pod network (at 10.255.0.1).
write_kubeconfigs() {
    write_kubeconfig "$KUBECONFIG_PATH" "$APISERVER_URL" admin
    write_kubeconfig "$LOCAL_ENV_DIR/controller-manager.kubeconfig" "$APISERVER_POD_NET_URL" admin
    write_kubeconfig "$LOCAL_ENV_DIR/kube-scheduler.kubeconfig" "$APISERVER_POD_NET_URL" kube-scheduler
    write_kubeconfig "$LOCAL_ENV_DIR/kube-proxy.kubeconfig" "$APISERVER_POD_NET_URL" kube-proxy
    write_kubeconfig "$LOCAL_ENV_DIR/coredns.kubeconfig" "$APISERVER_POD_NET_URL" coredns
}

# ---------------------------------------------------------------------------
# Health checks
# ---------------------------------------------------------------------------

etcd_healthy() {
    curl -fsS --max-time 2 "http://$HOST:$STORE_ETCD_PORT/health" | grep -q '"health":"true"'
}

# api_get PATH [URL]: GET a path of the apiserver as admin, at URL (default: its own
# address, 10.255.0.1).
api_get() {
    curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "${2:-$APISERVER_POD_NET_URL}$1"
}

apiserver_ready() { [[ $(api_get /readyz) == ok ]]; }

# The apiserver answers through the loopback forwarder too (the host's kubeconfig).
loopback_ready() { [[ $(api_get /readyz "$APISERVER_URL") == ok ]]; }

# The pod network is up: the host has 10.255.0.1 on eo-host. (Not `ip | grep -q`: with
# pipefail, ip killed by SIGPIPE when grep stops reading early fails the pipeline.)
pod_network_up() {
    local addresses
    addresses=$(ip -o addr show dev eo-host 2>/dev/null) || return 1
    [[ $addresses == *" $POD_NET_HOST/"* ]]
}

scheduler_healthy() { [[ $(curl -fsSk --max-time 2 "https://$HOST:$SCHEDULER_PORT/healthz") == ok ]]; }
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
    pod_network_up || die "the pod network is not up (no $POD_NET_HOST on eo-host): testkit/env/network/podnet.sh up"
    require_free_port kube-apiserver "$APISERVER_PORT" "$POD_NET_HOST"
    mkdir -p "$LOCAL_ENV_DIR/apiserver"
    # It listens on the pod network's host address only (not 0.0.0.0, which would also
    # be every external interface of the host) and publishes that address as the
    # "kubernetes" Service's endpoint (the default lease reconciler). The host's clients
    # reach it on 127.0.0.1 through apiserver-loopback.
    start kube-apiserver "$KUBE_BIN_DIR/kube-apiserver" \
        --etcd-servers="http://$HOST:$STORE_ETCD_PORT" \
        --bind-address=$POD_NET_HOST \
        --advertise-address=$POD_NET_HOST \
        --secure-port="$APISERVER_PORT" \
        --cert-dir="$LOCAL_ENV_DIR/apiserver" \
        --tls-cert-file="$PKI/apiserver.crt" \
        --tls-private-key-file="$PKI/apiserver.key" \
        --client-ca-file="$PKI/ca.crt" \
        --authorization-mode=Node,RBAC \
        --enable-admission-plugins=NodeRestriction \
        --service-cluster-ip-range=$SERVICE_RANGE \
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
        --profiling=false
    wait_until kube-apiserver "/readyz ok" apiserver_ready
    log "kube-apiserver ready at $APISERVER_POD_NET_URL"
}

# 127.0.0.1:APISERVER_PORT for the host's clients: a socat forwarding each connection to
# the apiserver at 10.255.0.1 (one child process per connection, ending with it). A TCP
# forwarder rather than a DNAT rule, so that the host's rulesets and its connection
# tracking stay untouched.
up_apiserver_loopback() {
    if ! is_running apiserver-loopback; then
        require_free_port apiserver-loopback "$APISERVER_PORT"
        # nodelay on both sides: without TCP_NODELAY, socat's second write of a request
        # (an HTTP/2 body after its headers) waited for the peer's delayed ACK, 40 ms
        # added to every POST, PATCH and DELETE of kubectl and the nodes.
        start apiserver-loopback "$(command -v socat)" \
            "TCP4-LISTEN:$APISERVER_PORT,bind=$HOST,reuseaddr,fork,nodelay" \
            "TCP4:$POD_NET_HOST:$APISERVER_PORT,nodelay"
    fi
    wait_until apiserver-loopback "/readyz ok through $APISERVER_URL" loopback_ready
    log "kube-apiserver reachable at $APISERVER_URL"
}

# POST a JSON object to a path of the apiserver as admin; an object that already exists
# is fine.
api_create() {
    local code
    code=$(curl -sS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -X POST \
        --data "$2" "$APISERVER_POD_NET_URL$1")
    [[ $code == 201 || $code == 409 ]] || die "POST $1 answered $code"
}

# The apiserver's kubelet client may use the kubelet API (logs, exec, ...) of every node,
# as kubeadm binds it. kube-proxy's user system:kube-proxy has the built-in binding to
# system:node-proxier; CoreDNS's user gets what kubeadm gives CoreDNS's ServiceAccount.
bind_component_users() {
    api_create /apis/rbac.authorization.k8s.io/v1/clusterrolebindings '{
      "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
      "metadata": {"name": "kube-apiserver-kubelet-client"},
      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
      "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}]}'
    api_create /apis/rbac.authorization.k8s.io/v1/clusterroles '{
      "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
      "metadata": {"name": "system:coredns"},
      "rules": [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]}'
    api_create /apis/rbac.authorization.k8s.io/v1/clusterrolebindings '{
      "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
      "metadata": {"name": "system:coredns"},
      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
      "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:coredns"}]}'
}

up_controller_manager() {
    if ! is_running kube-controller-manager; then
        require_free_port kube-controller-manager "$KCM_PORT"
        mkdir -p "$LOCAL_ENV_DIR/controller-manager"
        # It connects as admin and runs each controller under its own service
        # account (--use-service-account-credentials), as kubeadm clusters do. The node
        # IPAM controller gives every Node a /24 of the pod range (podnet.sh's node index
        # is its third byte). A node that stops heart-beating (nodes.sh stop) is NotReady,
        # and its pods not ready, after 30 s rather than the default 50 s: the nodes renew
        # their Lease every 10 s, so three renewals may still be missed under load.
        local kubeconfig="$LOCAL_ENV_DIR/controller-manager.kubeconfig"
        start kube-controller-manager "$KUBE_BIN_DIR/kube-controller-manager" \
            --kubeconfig="$kubeconfig" \
            --authentication-kubeconfig="$kubeconfig" \
            --authorization-kubeconfig="$kubeconfig" \
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
            --service-cluster-ip-range=$SERVICE_RANGE \
            --allocate-node-cidrs=true \
            --cluster-cidr=$CLUSTER_CIDR \
            --node-cidr-mask-size=24 \
            --node-monitor-grace-period=30s \
            --profiling=false
    fi
    wait_until kube-controller-manager "/healthz ok" kcm_healthy
    wait_until kube-controller-manager "default service account (serviceaccount controller)" default_sa_exists
    log "kube-controller-manager running"
}

# The real scheduler places pods on the environment's nodes: node selectors, affinity and anti-affinity, taints (a cordoned
# or NotReady node), and the volume binding of WaitForFirstConsumer claims (it selects the
# node; the node that is selected provisions the volume). As user system:kube-scheduler,
# whose ClusterRoleBindings (system:kube-scheduler, system:volume-scheduler) are built in.
up_scheduler() {
    if ! is_running kube-scheduler; then
        require_free_port kube-scheduler "$SCHEDULER_PORT"
        local kubeconfig="$LOCAL_ENV_DIR/kube-scheduler.kubeconfig"
        start kube-scheduler "$KUBE_BIN_DIR/kube-scheduler" \
            --kubeconfig="$kubeconfig" \
            --authentication-kubeconfig="$kubeconfig" \
            --authorization-kubeconfig="$kubeconfig" \
            --bind-address=$HOST \
            --secure-port="$SCHEDULER_PORT" \
            --leader-elect=false \
            --profiling=false
    fi
    wait_until kube-scheduler "/healthz ok" scheduler_healthy
    log "kube-scheduler running"
}

# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------

cmd_up() {
    command -v openssl >/dev/null || die "openssl is needed (apt-get install openssl)"
    command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
    command -v socat >/dev/null || die "socat is needed (apt-get install socat)"

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
    # After the marker: podnet.sh keeps its records in $LOCAL_ENV_DIR/podnet.
    LOCAL_ENV_DIR=$LOCAL_ENV_DIR bash "$TOOLS_DIR/network/podnet.sh" up
    ensure_pki
    ensure_apiserver_cert
    ensure_client_cert kubelet-client "/CN=kube-apiserver-kubelet-client"
    ensure_client_cert kube-scheduler "/CN=system:kube-scheduler"
    ensure_client_cert kube-proxy "/CN=system:kube-proxy"
    ensure_client_cert coredns "/CN=system:coredns"
    write_kubeconfigs

    local start_time=$SECONDS
    up_etcd
    up_apiserver
    up_apiserver_loopback
    bind_component_users
    up_controller_manager
    up_scheduler
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
    LOCAL_ENV_DIR=$LOCAL_ENV_DIR bash "$TOOLS_DIR/network/podnet.sh" down
    rm -rf "$LOCAL_ENV_DIR"
    log "stopped; pod network down; removed $LOCAL_ENV_DIR"
}

cmd_env() {
    [[ -f $KUBECONFIG_PATH ]] || log "warning: $KUBECONFIG_PATH does not exist yet (run: $0 up)"
    printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_PATH"
}

# Whether component $1 runs, and its pid.
component_state() {
    is_running "$1" || { echo stopped; return 1; }
    echo "running (pid $(<"$RUN/$1.pid"))"
}

cmd_status() {
    local rc=0
    each_status 24 component_state "${COMPONENTS[@]}" || rc=1
    if [[ -f $LOCAL_ENV_DIR/store-etcd ]]; then
        printf '%-24s %s\n' "store etcd binary" "$(<"$LOCAL_ENV_DIR/store-etcd")"
    fi
    if pod_network_up; then
        printf '%-24s up (testkit/env/network/podnet.sh status)\n' "pod network"
    else
        printf '%-24s down\n' "pod network"
        rc=1
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
