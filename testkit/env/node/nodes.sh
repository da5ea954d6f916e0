#!/usr/bin/env bash
# The local environment's nodes: NODES of them (default 3), local-node-0 ..
# local-node-(NODES-1), each a real kubelet with a containerd of its own, placed by the
# real kube-scheduler. The design and what was seen building it are in
# testkit/env/README.md, "Real nodes".
#
# Usage: testkit/env/node/nodes.sh up|down|stop NAME|start NAME|shutdown NAME|status|images
#                             |pid NS POD [CONTAINER]|kill NS POD [CONTAINER]
#                             |kill-sandbox NS POD
#
#   up          boot every node that is not running; wait until each is registered, has
#               its pod network and is Ready; import into the running ones the images
#               they lack
#   down        power cut of every node, then remove their cgroups and directories
#   stop NAME   a power cut: every process of the node (kubelet, containerd, shims,
#               containers) frozen and killed together
#   shutdown NAME  a graceful shutdown: logind's PrepareForShutdown on the node's bus; the
#               kubelet terminates its pods (shutdownGracePeriod) and releases its delay
#               lock, then the power is cut
#   start NAME  a reboot: containerd's state directory cleared, the node booted again; the
#               kubelet recreates its pods' sandboxes and restarts their containers
#   status      each node: running (its task count) or stopped
#   images      import into every running node the images it lacks (local-up.sh, after
#               a new operator image was built)
#   pid NS POD [CONTAINER]   the host pid of a container of pod NS/POD (default: its
#               first container), from its node's containerd
#   kill NS POD [CONTAINER]  SIGKILL that container's process, as a crash would; the
#               kubelet restarts it by the pod's restartPolicy
#   kill-sandbox NS POD  SIGKILL the pod's sandbox (its pause process, which holds its
#               namespaces): the kubelet makes a new sandbox, runs the init containers
#               again and restarts the containers in it
#
# Node i: directory $LOCAL_ENV_DIR/nodes/local-node-i, kubelet port 10280+i, healthz
# 127.0.0.1:10290+i, cgroup /eo-node-i in every v1 hierarchy, log files kubelet.log and
# containerd.log in the node's directory. Each node has a system bus of its own (a real
# dbus-daemon) with testkit/env/node/logind on it, the part of systemd-logind that the kubelet's
# graceful node shutdown uses (no systemd runs here). Each boots in a mount namespace of its own (so
# that /proc/sys entries can be shadowed: the host's kernel settings never change), with
# containerd inside the pod network's eo-net namespace.
#
# Environment: LOCAL_ENV_DIR, ETCD_OPERATOR_CACHE, K8S_VERSION, NODES (default 3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export LOCAL_ENV_DIR=${LOCAL_ENV_DIR:-/tmp/etcd-operator-local}
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
K8S_VERSION=${K8S_VERSION:-v1.35.4}
KUBELET=$CACHE/k8s/$K8S_VERSION/bin/kubelet
NODES=${NODES:-3}
# The kubelet's shutdownGracePeriod and shutdownGracePeriodCriticalPods, in seconds.
SHUTDOWN_GRACE_S=${SHUTDOWN_GRACE_S:-30}
SHUTDOWN_CRITICAL_S=${SHUTDOWN_CRITICAL_S:-10}
PKI=$LOCAL_ENV_DIR/pki
HOST_ADDR=10.255.0.1
UPLINK_ADDR=10.255.0.2
CONTROLLERS=(blkio cpu cpuacct cpuset devices freezer memory pids systemd unified)
export KUBECONFIG=$LOCAL_ENV_DIR/kubeconfig

log() { printf '[nodes] %s\n' "$*" >&2; }
# shellcheck source=testkit/env/lib.sh
source "$ROOT/testkit/env/lib.sh"
die() { log "ERROR: $*"; exit 1; }

[[ $NODES =~ ^[1-9]$ ]] || die "NODES must be 1 to 9, got '$NODES'"

names() { local i; for ((i = 0; i < NODES; i++)); do echo "local-node-$i"; done; }

index() {
    [[ $1 =~ ^local-node-([0-9])$ ]] && ((BASH_REMATCH[1] < NODES)) ||
        die "no node '$1' (the nodes are $(names | paste -sd' '))"
    echo "${BASH_REMATCH[1]}"
}

node_dir() { echo "$LOCAL_ENV_DIR/nodes/$1"; }
freezer() { echo "/sys/fs/cgroup/freezer/eo-node-$(index "$1")"; }

# tasks NAME: every pid in the node's cgroup tree.
tasks() {
    local dir
    dir=$(freezer "$1")
    [[ -d $dir ]] || return 0
    find "$dir" -name tasks -exec cat {} +
}

node_running() { [[ -n $(tasks "$1") ]]; }

# The node's cgroup in every v1 hierarchy (cpuset needs its cpus and mems first).
make_cgroups() {
    local i=$1 c
    for c in "${CONTROLLERS[@]}"; do
        [[ $c == unified ]] && continue
        mkdir -p "/sys/fs/cgroup/$c/eo-node-$i"
    done
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/eo-node-$i/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/eo-node-$i/cpuset.mems"
}

remove_cgroups() {
    local i=$1 c
    for c in "${CONTROLLERS[@]}"; do
        [[ -d /sys/fs/cgroup/$c/eo-node-$i ]] || continue
        find "/sys/fs/cgroup/$c/eo-node-$i" -depth -type d -exec rmdir {} \;
    done
}

# sign_node NAME: the kubelet's serving certificate (IP 10.255.0.1) and its client
# certificate (system:node:NAME in system:nodes), both from the environment's CA, and a
# kubeconfig for the client one.
sign_node() {
    local name=$1 dir
    dir=$(node_dir "$name")/pki
    [[ -f $dir/.complete ]] && return 0
    mkdir -p "$dir"
    sign_cert "$dir/serving" "/CN=$name" \
        "subjectAltName=IP:$HOST_ADDR,DNS:$name" "extendedKeyUsage=serverAuth"
    sign_cert "$dir/client" "/O=system:nodes/CN=system:node:$name" "extendedKeyUsage=clientAuth"
    cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://$HOST_ADDR:16443", certificate-authority: "$PKI/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$dir/client.crt", client-key: "$dir/client.key"}
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
EOF
    touch "$dir/.complete"
}

# sign_cert PREFIX SUBJECT EXTENSION...: PREFIX.key and PREFIX.crt signed by the CA.
sign_cert() {
    local prefix=$1 subject=$2
    shift 2
    openssl req -new -newkey rsa:2048 -nodes -keyout "$prefix.key" -subj "$subject" \
        -out "$prefix.csr" 2>/dev/null
    openssl x509 -req -in "$prefix.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -CAcreateserial -days 3650 -sha256 -out "$prefix.crt" \
        -extfile <(printf '%s\n' "keyUsage=critical,digitalSignature,keyEncipherment" "$@") 2>/dev/null
    rm -f "$prefix.csr"
}

write_configs() {
    local name=$1 i=$2 dir
    dir=$(node_dir "$name")
    mkdir -p "$dir"/{containerd,cni,kubelet,pod-logs,container-logs,sysctl}
    cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd/containerd.sock"
[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:eo"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "$UPLINK_ADDR"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
EOF
    : >"$dir/resolv.conf"
    cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $HOST_ADDR
port: $((10280 + i))
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $((10290 + i))
tlsCertFile: $dir/pki/serving.crt
tlsPrivateKeyFile: $dir/pki/serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /eo-node-$i
failCgroupV1: false
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
failSwapOn: false
enforceNodeAllocatable: []
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
protectKernelDefaults: true
podLogsDir: $dir/pod-logs
resolvConf: $dir/resolv.conf
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
shutdownGracePeriod: ${SHUTDOWN_GRACE_S}s
shutdownGracePeriodCriticalPods: ${SHUTDOWN_CRITICAL_S}s
EOF
    cat >"$dir/dbus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$dir/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
EOF
}

# boot NAME (run by start_node inside a new mount namespace, in the node's cgroups):
# shadows the kernel settings the kubelet checks, starts containerd in eo-net, imports the
# images, then becomes the kubelet.
cmd_boot() {
    local name=$1 dir kv key
    dir=$(node_dir "$name")
    for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
        kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
        key=${kv%%=*}
        mkdir -p "$dir/sysctl/${key%/*}"
        echo "${kv#*=}" >"$dir/sysctl/$key"
        mount --bind "$dir/sysctl/$key" "/proc/sys/$key"
        mount -o remount,bind,ro "/proc/sys/$key"
    done
    mkdir -p /var/log/containers
    mount --bind "$dir/container-logs" /var/log/containers
    rm -rf "$dir/containerd/state"
    nsenter --net=/run/netns/eo-net containerd --config "$dir/containerd.toml" \
        >>"$dir/containerd.log" 2>&1 </dev/null &
    for _ in $(seq 100); do [[ -S $dir/containerd/containerd.sock ]] && break; sleep 0.1; done
    import_images "$dir"
    start_bus "$dir"
    export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$dir/dbus/system_bus_socket
    exec "$KUBELET" --config "$dir/kubelet.yaml" --kubeconfig "$dir/pki/kubeconfig" \
        --root-dir "$dir/kubelet" --hostname-override "$name" --node-ip "$HOST_ADDR" \
        >>"$dir/kubelet.log" 2>&1
}

# start_bus DIR: the node's dbus-daemon, then logind on it, ready before the kubelet asks
# it for its delay lock.
start_bus() {
    local dir=$1
    rm -rf "$dir/dbus"
    mkdir -p "$dir/dbus"
    dbus-daemon --config-file="$dir/dbus.conf" --nofork --nopidfile --nosyslog \
        >>"$dir/dbus.log" 2>&1 </dev/null &
    for _ in $(seq 100); do [[ -S $dir/dbus/system_bus_socket ]] && break; sleep 0.05; done
    "$LOGIND" -address "unix:path=$dir/dbus/system_bus_socket" \
        -inhibit-delay "$((SHUTDOWN_GRACE_S + 10))s" -ready "$dir/dbus/logind.ready" \
        -done "$dir/dbus/shutdown.done" >>"$dir/logind.log" 2>&1 </dev/null &
    echo $! >"$dir/dbus/logind.pid"
    for _ in $(seq 100); do [[ -f $dir/dbus/logind.ready ]] && return 0; sleep 0.05; done
    echo "logind did not start; see $dir/logind.log" >&2
}

# import_images DIR: every node image and the operator's archives into the node's
# containerd, each archive once, then every reference that names it (index.tsv may give one
# archive several tags: the content tag local-up.sh deploys among them).
import_images() {
    local dir=$1 ref archive name done_file=$1/images.imported
    local ctr=(ctr --address "$dir/containerd/containerd.sock" -n k8s.io)
    touch "$done_file"
    while IFS=$'\t' read -r ref archive; do
        if ! grep -qxF "$archive" "$done_file"; then
            "${ctr[@]}" images import "$archive" >&2
            echo "$archive" >>"$done_file"
        fi
        name=$(tar -xOf "$archive" index.json |
            jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]')
        [[ $name == "$ref" ]] || "${ctr[@]}" images tag --force "$name" "$ref" >/dev/null
    done < <(bash "$ROOT/testkit/env/runtime/node-images.sh"; operator_images)
}

# The operator's archives (build-image.sh's index): one line per tag.
operator_images() {
    local index=$CACHE/images/index.tsv ref archive
    [[ -f $index ]] || return 0
    while IFS=$'\t' read -r ref archive; do
        [[ -f $CACHE/images/$archive ]] && printf '%s\t%s\n' "$ref" "$CACHE/images/$archive"
    done <"$index"
}

cmd_images() {
    local name
    for name in $(names); do
        node_running "$name" && import_images "$(node_dir "$name")"
    done
    return 0
}

# container NS POD [CONTAINER]: sets NODE_NAME and CONTAINER_ID from the pod's status.
container() {
    local ns=$1 pod=$2 want=${3:-} out
    out=$(kubectl -n "$ns" get pod "$pod" -o json) || die "no pod $ns/$pod"
    NODE_NAME=$(jq -r '.spec.nodeName // ""' <<<"$out")
    CONTAINER_ID=$(jq -r --arg want "$want" '[.status.containerStatuses // [] | .[]
        | select($want == "" or .name == $want)][0].containerID // ""' <<<"$out")
    [[ -n $NODE_NAME && $CONTAINER_ID == containerd://* ]] ||
        die "pod $ns/$pod has no running container${want:+ $want} on a node (containerID '$CONTAINER_ID')"
    CONTAINER_ID=${CONTAINER_ID#containerd://}
}

node_ctr() { ctr --address "$(node_dir "$1")/containerd/containerd.sock" -n k8s.io "${@:2}"; }

cmd_pid() {
    local pid
    container "$@"
    pid=$(node_ctr "$NODE_NAME" tasks ls | awk -v id="$CONTAINER_ID" '$1 == id && $3 == "RUNNING" { print $2 }')
    [[ -n $pid ]] || die "container $CONTAINER_ID of $1/$2 runs no task on $NODE_NAME"
    echo "$pid"
}

cmd_kill() {
    container "$@"
    node_ctr "$NODE_NAME" tasks kill --signal SIGKILL "$CONTAINER_ID" >&2
}

cmd_kill_sandbox() {
    local ns=$1 pod=$2 out uid node ids id killed=0
    out=$(kubectl -n "$ns" get pod "$pod" -o json) || die "no pod $ns/$pod"
    uid=$(jq -r .metadata.uid <<<"$out")
    node=$(jq -r '.spec.nodeName // ""' <<<"$out")
    [[ -n $node ]] || die "pod $ns/$pod is on no node"
    ids=$(node_ctr "$node" containers ls -q \
        "labels.\"io.kubernetes.pod.uid\"==$uid,labels.\"io.cri-containerd.kind\"==sandbox")
    for id in $ids; do
        if node_ctr "$node" tasks ls | awk -v id="$id" '$1 == id && $3 == "RUNNING" { found = 1 } END { exit !found }'; then
            node_ctr "$node" tasks kill --signal SIGKILL "$id" >&2
            killed=$((killed + 1))
        fi
    done
    ((killed)) || die "pod $ns/$pod has no running sandbox on $node"
}

start_node() {
    local name=$1 i
    i=$(index "$name")
    node_running "$name" && return 0
    [[ -x $KUBELET ]] || die "$KUBELET is missing (testkit/env/build/build-binaries.sh kubelet)"
    LOGIND=$(go_tool_binary "$ROOT/testkit/env/node/logind" "$CACHE")
    export LOGIND
    sign_node "$name"
    write_configs "$name" "$i"
    make_cgroups "$i"
    log "booting $name (kubelet port $((10280 + i)))"
    setsid bash -c '
        for c in "${@:3}"; do echo $$ >"/sys/fs/cgroup/$c/eo-node-$2/cgroup.procs"; done
        exec unshare --mount --propagation private bash "$0" boot "$1"' \
        "$0" "$name" "$i" "${CONTROLLERS[@]:0:9}" \
        >>"$(node_dir "$name")/boot.log" 2>&1 </dev/null &
}

# network NAME: once the controller-manager gave the Node its pod range 10.244.N.0/24, the
# bridge conflist handing out 10.244.N.2-254 on eo-br0 (podnet.sh's addressing).
network() {
    local name=$1 dir cidr third
    dir=$(node_dir "$name")
    for _ in $(seq 120); do
        cidr=$(kubectl get node "$name" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true)
        [[ -n $cidr ]] && break
        sleep 0.5
    done
    [[ $cidr =~ ^10\.244\.([0-9]+)\.0/24$ ]] || die "$name got no pod range (podCIDR '$cidr'); see $dir/kubelet.log"
    third=${BASH_REMATCH[1]}
    cat >"$dir/cni/.10-eo.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "eo", "plugins": [
  {"type": "bridge", "bridge": "eo-br0", "isGateway": false, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$dir/ipam",
            "ranges": [[{"subnet": "10.244.0.0/16", "rangeStart": "10.244.$third.2",
                         "rangeEnd": "10.244.$third.254", "gateway": "10.244.0.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
EOF
    mv "$dir/cni/.10-eo.conflist" "$dir/cni/10-eo.conflist"
}

# wait_ready NAME: this boot's kubelet answers its health check (a Node still marked Ready
# from before a power cut says nothing), then the Node is Ready.
wait_ready() {
    local name=$1 port
    port=$((10290 + $(index "$name")))
    for _ in $(seq 240); do
        [[ $(curl -fsS --max-time 1 "http://127.0.0.1:$port/healthz" 2>/dev/null) == ok ]] && break
        sleep 0.25
    done
    kubectl wait --for=condition=Ready "node/$name" --timeout=120s >/dev/null ||
        { tail -20 "$(node_dir "$name")/kubelet.log" >&2; die "$name is not Ready"; }
}

# power_cut NAME: freeze the node's cgroup tree, SIGKILL every task, thaw.
power_cut() {
    local name=$1 dir pid
    dir=$(freezer "$name")
    [[ -d $dir ]] || return 0
    echo FROZEN >"$dir/freezer.state"
    for _ in $(seq 50); do [[ $(<"$dir/freezer.state") == FROZEN ]] && break; sleep 0.1; done
    for pid in $(tasks "$name"); do kill -KILL "$pid" 2>/dev/null || true; done
    echo THAWED >"$dir/freezer.state"
    for _ in $(seq 100); do node_running "$name" || return 0; sleep 0.1; done
    die "$name still has tasks after SIGKILL: $(tasks "$name" | paste -sd' ')"
}

# shutdown NAME: a graceful shutdown, then the power cut it ends in.
cmd_shutdown() {
    local name=$1 dir pid start=$SECONDS
    dir=$(node_dir "$name")
    node_running "$name" || die "$name is not running"
    pid=$(cat "$dir/dbus/logind.pid" 2>/dev/null) || die "$name has no logind (booted by an older script?)"
    rm -f "$dir/dbus/shutdown.done"
    kill -USR1 "$pid"
    for _ in $(seq $((4 * (SHUTDOWN_GRACE_S + 20)))); do
        [[ -f $dir/dbus/shutdown.done ]] && break
        sleep 0.25
    done
    [[ -f $dir/dbus/shutdown.done ]] || die "$name: logind never saw the shutdown through; see $dir/logind.log"
    power_cut "$name"
    log "$name shut down gracefully in $((SECONDS - start))s, then its power was cut"
}

cmd_up() {
    local name
    for name in $(names); do start_node "$name"; done
    for name in $(names); do network "$name"; done
    for name in $(names); do wait_ready "$name"; done
    cmd_images
    log "$NODES nodes Ready: $(names | paste -sd' ')"
}

cmd_down() {
    local dir name i
    for dir in /sys/fs/cgroup/freezer/eo-node-*; do
        [[ -d $dir ]] || continue
        i=${dir##*-}
        name=local-node-$i
        NODES=9 power_cut "$name"
        remove_cgroups "$i"
    done
    rm -rf "$LOCAL_ENV_DIR/nodes"
}

# Whether node $1 runs (with how many tasks), and its directory.
node_state() {
    node_running "$1" || { echo "stopped $(node_dir "$1")"; return 1; }
    echo "running ($(tasks "$1" | wc -l) tasks) $(node_dir "$1")"
}

# shellcheck disable=SC2046 # one word per node name
cmd_status() { each_status 14 node_state $(names); }

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
stop) power_cut "${2:?usage: $0 stop NAME}" && log "$2 stopped (power cut)" ;;
start) start_node "${2:?usage: $0 start NAME}" && wait_ready "$2" && log "$2 started" ;;
status) cmd_status ;;
shutdown) cmd_shutdown "${2:?usage: $0 shutdown NAME}" ;;
images) cmd_images ;;
pid) cmd_pid "${2:?usage: $0 pid NS POD [CONTAINER]}" "${3:?usage: $0 pid NS POD [CONTAINER]}" "${4:-}" ;;
kill) cmd_kill "${2:?usage: $0 kill NS POD [CONTAINER]}" "${3:?usage: $0 kill NS POD [CONTAINER]}" "${4:-}" ;;
kill-sandbox) cmd_kill_sandbox "${2:?usage: $0 kill-sandbox NS POD}" "${3:?usage: $0 kill-sandbox NS POD}" ;;
boot) cmd_boot "${2:?}" ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
