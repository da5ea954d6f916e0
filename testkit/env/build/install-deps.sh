#!/usr/bin/env bash
# Installs the Debian packages the project needs, only when something is missing.
#   etcd-server, etcd-client  etcd 3.4.23 for the real-etcd tests and the local node
#   protobuf-compiler         protoc, needed by the etcd-client crate's build
#   openssl                   certificates of the local control plane
#   util-linux                unshare and nsenter: each node boots in a mount namespace of
#                             its own, its containerd in the pod network's namespace
#   iproute2, nftables        the pod network (podnet.sh) and kube-proxy's nftables mode
#   socat                     the apiserver's loopback address for the host's clients
#   buildah                   builds the operator image without a daemon (build-image.sh)
#   jq                        reads the exported image's OCI layout (unpack-image.sh)
#   ca-certificates           the CA bundle the image carries (build/rootfs.sh)
#   containerd, runc          the container runtime of the real nodes (nodes.sh)
#   containernetworking-plugins  their pod network: the bridge, host-local and loopback
#                             CNI plugins in /usr/lib/cni
#   busybox-static            the shell image of the volume provisioner (node-images.sh)
#   dbus-daemon               each real node's system bus, where the kubelet's graceful
#                             node shutdown meets testkit/env/node/logind
set -euo pipefail

need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v openssl >/dev/null || need+=(openssl)
command -v unshare >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v socat >/dev/null || need+=(socat)
command -v curl >/dev/null || need+=(curl)
command -v buildah >/dev/null || need+=(buildah)
command -v jq >/dev/null || need+=(jq)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v dbus-daemon >/dev/null || need+=(dbus-daemon)
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v kubectl >/dev/null || { echo "kubectl is missing (it comes with the machine image)" >&2; exit 1; }
command -v go >/dev/null || { echo "go is missing: the local control plane is built with Go" >&2; exit 1; }
