#!/usr/bin/env bash
# The images the real nodes run besides the operator's (nodes.sh imports them into
# each node's containerd): no registry can be reached here, so each is built on this
# machine as an OCI archive of one layer, from binaries the project already has.
#
#   localhost/pause:eo            the sandbox process (testkit/env/runtime/pause, built with Go)
#   quay.io/coreos/etcd:vX.Y.Z    one per etcd that build-binaries.sh built ($CACHE/etcd/
#                                 vX.Y.Z/bin: etcd, etcdctl, etcdutl) and Debian's 3.4.23
#                                 (/usr/bin/etcd and etcdctl, with the C library they load)
#   localhost/busybox:eo          Debian's static busybox with its applet links: the shell
#                                 of the volume provisioner's helper pods
#
# Usage: testkit/env/runtime/node-images.sh    prints "REFERENCE<TAB>ARCHIVE" per image
#
# Each archive is named by a digest of what went into it (files, modes, entrypoint), so an
# unchanged input is never built again (about 0.2 s for all of them); layer times are 0 and
# owners 0:0, so equal inputs give equal image digests. Archives live in
# $ETCD_OPERATOR_CACHE/images/node/; an archive no longer named by an input is removed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
# shellcheck source=testkit/env/lib.sh
source "$ROOT/testkit/env/lib.sh"
OUT=$CACHE/images/node
ETCD_REPOSITORY=quay.io/coreos/etcd

log() { printf '[node-images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# digest_of DIR ENTRYPOINT: one digest over every path, type, mode, link target and file
# content under DIR, and the entrypoint.
digest_of() {
    (
        cd "$1"
        find . -printf '%p %y %m %l\n' | LC_ALL=C sort
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum
        printf 'entrypoint %s\n' "$2"
    ) | sha256sum | cut -c1-12
}

# oci_archive ROOTFS REF ENTRYPOINT_JSON OUT: an OCI image layout of one gzip layer holding
# ROOTFS, named REF, tarred into OUT.
oci_archive() {
    local rootfs=$1 ref=$2 entrypoint=$3 out=$4 work
    work=$(mktemp -d)
    mkdir -p "$work/blobs/sha256"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" \
        -cf "$work/layer.tar" .
    local diff_id layer layer_size config config_size manifest manifest_size
    diff_id=$(sha256sum <"$work/layer.tar" | cut -d' ' -f1)
    gzip -n -c "$work/layer.tar" >"$work/layer.tar.gz"
    layer=$(sha256sum <"$work/layer.tar.gz" | cut -d' ' -f1)
    layer_size=$(stat -c %s "$work/layer.tar.gz")
    mv "$work/layer.tar.gz" "$work/blobs/sha256/$layer"
    rm "$work/layer.tar"

    jq -cn --argjson entrypoint "$entrypoint" --arg diff "sha256:$diff_id" '{
        architecture: "amd64", os: "linux", created: "1970-01-01T00:00:00Z",
        config: {Entrypoint: $entrypoint,
                 Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                 WorkingDir: "/"},
        rootfs: {type: "layers", diff_ids: [$diff]}}' >"$work/config.json"
    config=$(sha256sum <"$work/config.json" | cut -d' ' -f1)
    config_size=$(stat -c %s "$work/config.json")
    mv "$work/config.json" "$work/blobs/sha256/$config"

    jq -cn --arg config "sha256:$config" --argjson config_size "$config_size" \
        --arg layer "sha256:$layer" --argjson layer_size "$layer_size" '{
        schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
        config: {mediaType: "application/vnd.oci.image.config.v1+json",
                 digest: $config, size: $config_size},
        layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip",
                  digest: $layer, size: $layer_size}]}' >"$work/manifest.json"
    manifest=$(sha256sum <"$work/manifest.json" | cut -d' ' -f1)
    manifest_size=$(stat -c %s "$work/manifest.json")
    mv "$work/manifest.json" "$work/blobs/sha256/$manifest"

    jq -cn --arg manifest "sha256:$manifest" --argjson size "$manifest_size" --arg ref "$ref" '{
        schemaVersion: 2,
        manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json",
                     digest: $manifest, size: $size,
                     annotations: {"org.opencontainers.image.ref.name": $ref}}]}' \
        >"$work/index.json"
    printf '{"imageLayoutVersion":"1.0.0"}' >"$work/oci-layout"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" \
        -cf "$out.partial" oci-layout index.json blobs
    mv "$out.partial" "$out"
    rm -rf "$work"
}

# image REF ENTRYPOINT_JSON ROOTFS: the archive of ROOTFS as REF, built unless cached;
# prints the index line and records the archive as wanted.
image() {
    local ref=$1 entrypoint=$2 rootfs=$3 key slug archive
    key=$(digest_of "$rootfs" "$entrypoint")
    slug=$(tr '/:' '__' <<<"$ref")
    archive=$OUT/$slug-$key.oci.tar
    if [[ ! -f $archive ]]; then
        oci_archive "$rootfs" "$ref" "$entrypoint" "$archive"
        log "built $ref ($(du -h "$archive" | cut -f1))"
    fi
    WANTED+=("$archive")
    printf '%s\t%s\n' "$ref" "$archive"
}

# add_libraries ROOTFS BINARY...: the shared libraries BINARY loads (ldd), at their paths.
add_libraries() {
    local rootfs=$1 lib
    shift
    for lib in $(ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && NF == 2 { print $1 }' | sort -u); do
        install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
    done
}

# An etcd release's root filesystem: the binaries in /usr/local/bin (where the operator's
# member pods call them), /tmp for etcdctl's and etcdutl's temporary files.
etcd_rootfs() {
    local rootfs=$1 bin
    shift
    mkdir -p "$rootfs/usr/local/bin"
    install -d -m 1777 "$rootfs/tmp"
    for bin in "$@"; do install -m 0755 "$bin" "$rootfs/usr/local/bin/"; done
}

main() {
    mkdir -p "$OUT"
    exec 9>"$OUT/.lock"
    flock 9
    WANTED=()
    local dir version
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT

    mkdir -p "$work/pause"
    install -m 0755 "$(go_tool_binary "$ROOT/testkit/env/runtime/pause" "$CACHE")" "$work/pause/pause"
    image localhost/pause:eo '["/pause"]' "$work/pause"

    for dir in "$CACHE"/etcd/v*.*.*; do
        [[ -x $dir/bin/etcd ]] || continue
        version=${dir##*/}
        local bins=("$dir/bin/etcd" "$dir/bin/etcdctl")
        [[ -x $dir/bin/etcdutl ]] && bins+=("$dir/bin/etcdutl")
        etcd_rootfs "$work/$version" "${bins[@]}"
        image "$ETCD_REPOSITORY:$version" '["/usr/local/bin/etcd"]' "$work/$version"
    done
    if [[ -x /usr/bin/etcd ]]; then
        version=v$(/usr/bin/etcd --version | sed -n 's/^etcd Version: //p')
        etcd_rootfs "$work/debian" /usr/bin/etcd /usr/bin/etcdctl
        add_libraries "$work/debian" /usr/bin/etcd /usr/bin/etcdctl
        image "$ETCD_REPOSITORY:$version" '["/usr/local/bin/etcd"]' "$work/debian"
    fi

    [[ -x /bin/busybox ]] || die "/bin/busybox is missing (install-deps.sh installs busybox-static)"
    mkdir -p "$work/busybox/bin"
    install -d -m 1777 "$work/busybox/tmp"
    install -m 0755 /bin/busybox "$work/busybox/bin/busybox"
    local applet
    for applet in $(/bin/busybox --list); do
        [[ $applet == busybox ]] || ln -s busybox "$work/busybox/bin/$applet"
    done
    image localhost/busybox:eo '["/bin/sh"]' "$work/busybox"

    local archive
    for archive in "$OUT"/*.oci.tar; do
        [[ -e $archive ]] || continue
        [[ " ${WANTED[*]} " == *" $archive "* ]] || rm -f "$archive"
    done
}

main "$@"
