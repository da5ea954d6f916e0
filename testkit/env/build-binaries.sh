#!/usr/bin/env bash
# Build (once) and cache the binaries of the local control plane:
#
#   $CACHE/k8s/<K8S_VERSION>/bin/{kube-apiserver,kube-controller-manager}
#   $CACHE/etcd/v3.X.Y/bin/{etcd,etcdctl}     and the link $CACHE/etcd/v3.X -> v3.X.Y
#   $CACHE/helm/<HELM_VERSION>/bin/helm       (the chart's lint, render and drift checks)
#
# where CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}.
#
# Everything is built from source with the Go toolchain and the Go module proxy
# (there are no prebuilt Kubernetes binaries and no containers on these machines).
# A second run finds the binaries and returns in seconds.
#
# Usage: testkit/env/build-binaries.sh [all|k8s|etcd|helm]...  (default: all = etcd, k8s, helm)
#
# Environment:
#   ETCD_OPERATOR_CACHE  cache root (default $HOME/.cache/etcd-operator)
#   K8S_VERSION          k8s.io/kubernetes version (default v1.35.4)
#   ETCD_VERSIONS        etcd versions to build, space separated, each either a
#                        minor ("3.5": the newest v3.5.N the proxy serves) or an
#                        exact version ("v3.5.21")             (default "3.5 3.6")
#   HELM_VERSION         helm.sh/helm/v3 version (default v3.22.0)
#   ETCD_REFRESH=1       re-ask the proxy for the newest patch of each minor even if
#                        one is cached already (by default a cached minor is reused,
#                        so that warm runs need no network and stay reproducible)
#   GOMODCACHE, GOCACHE  Go's own caches; Go's defaults unless set
#
# Partial outputs are written under temporary names and renamed into place only
# when complete, so an interrupted build is never mistaken for a cached one.
set -euo pipefail

CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
K8S_VERSION=${K8S_VERSION:-v1.35.4}
ETCD_VERSIONS=${ETCD_VERSIONS:-3.5 3.6}
HELM_VERSION=${HELM_VERSION:-v3.22.0}

log() { printf '[build-binaries] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null || die "the Go toolchain (go) is needed"

# Pure-Go, reproducible-ish, and gentle with the 2 cores we share.
export CGO_ENABLED=0
GO_BUILD=(nice -n 10 go build -trimpath)

mkdir -p "$CACHE"

# One build at a time per cache (control-plane.sh may call us while a background
# build is running): wait for the lock instead of racing on the same files.
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then
    log "another build holds $CACHE/.build.lock; waiting for it"
    flock 9
fi


# True when every named file exists and is executable.
all_executable() {
    local f
    for f in "$@"; do [[ -x $f ]] || return 1; done
}

# prepare LABEL DIR SETUP BIN...: false, saying so, when every BIN is built already;
# otherwise starts the build's clock (BUILD_START) and makes the wrapper module DIR/wrapper
# with the function SETUP.
prepare() {
    local label=$1 dir=$2 setup=$3
    shift 3
    if all_executable "$@"; then
        log "$label: cached in $dir/bin"
        return 1
    fi
    BUILD_START=$SECONDS
    log "$label: building"
    mkdir -p "$dir"
    wrapper_module "$dir" "$setup"
}

# wrapper_module DIR SETUP: makes the wrapper module DIR/wrapper once, by running the
# function SETUP in a fresh directory that is renamed into place only when SETUP succeeded
# (the module is kept: its go.sum makes rebuilds offline).
wrapper_module() {
    local dir=$1 setup=$2
    local wrapper="$dir/wrapper" tmp="$dir/wrapper.partial"
    [[ -f $wrapper/.ready ]] && return 0
    rm -rf "$tmp"
    mkdir -p "$tmp"
    (cd "$tmp" && "$setup")
    touch "$tmp/.ready"
    rm -rf "$wrapper"
    mv "$tmp" "$wrapper"
}

# build_into DIR COMMAND...: runs COMMAND in DIR/wrapper to write DIR/bin.partial, then
# moves that to DIR/bin in one rename.
build_into() {
    local dir=${1:?}
    shift
    rm -rf "$dir/bin.partial"
    mkdir -p "$dir/bin.partial"
    (cd "$dir/wrapper" && "$@")
    rm -rf "${dir:?}/bin"
    mv "$dir/bin.partial" "$dir/bin"
}

# ---------------------------------------------------------------------------
# Kubernetes: kube-apiserver and kube-controller-manager
# ---------------------------------------------------------------------------
# `go install k8s.io/kubernetes/cmd/kube-apiserver@v1.X.Y` does not work: that
# module's go.mod replaces its ~30 staging modules (k8s.io/api, k8s.io/client-go,
# ...) with relative ./staging paths. A wrapper module replaces each of them with
# the published v0.X.Y release of the same module instead.
# The Kubernetes wrapper module, in the current directory: k8s.io/kubernetes' staging
# replaces pointed at the published modules, its godebug settings, both commands resolved.
# (Called by wrapper_module from build_k8s: $version and $staging_version are its.)
k8s_wrapper() {
    # Where the proxy put k8s.io/kubernetes' own go.mod.
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$version" |
        sed -n 's/^[[:space:]]*"GoMod":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p')
    [[ -f $gomod ]] || die "could not download the go.mod of k8s.io/kubernetes@$version"
    go mod init local.invalid/k8s-binaries >/dev/null 2>&1

    # Every `k8s.io/foo => ./staging/src/k8s.io/foo` (in a replace block or
    # on a single `replace` line) becomes `k8s.io/foo => k8s.io/foo v0.X.Y`.
    local mods
    mods=$(sed -n 's/^[[:space:]]*\(replace[[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]\{1,\}\)[[:space:]]\{1,\}=>[[:space:]]*\.\/staging\/.*/\2/p' "$gomod")
    [[ -n $mods ]] || die "no ./staging replace lines found in $gomod"
    local m edits=()
    for m in $mods; do
        edits+=("-replace=$m=$m@$staging_version")
    done
    go mod edit "${edits[@]}"
    log "kubernetes $version: replaced $(wc -w <<<"$mods") staging modules with $staging_version"

    # Copy the godebug settings (single line or block) so the binaries
    # behave as upstream builds them.
    local kv
    awk '
        /^godebug[[:space:]]*\(/ { inblock = 1; next }
        inblock && /^\)/          { inblock = 0; next }
        inblock                   { print $1; next }
        /^godebug[[:space:]]/     { print $2 }' "$gomod" |
        while read -r kv; do
            if [[ -n $kv ]]; then go mod edit "-godebug=$kv"; fi
        done

    # Resolve the two commands (this also records the go.sum entries
    # of every package they need).
    go get "k8s.io/kubernetes/cmd/kube-apiserver@$version" \
        "k8s.io/kubernetes/cmd/kube-controller-manager@$version"
}

build_k8s() {
    local version=$K8S_VERSION
    [[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "K8S_VERSION must look like v1.35.4, got '$version'"
    local minor=${BASH_REMATCH[1]} patch=${BASH_REMATCH[2]}
    local staging_version="v0.${minor}.${patch}"
    local dir="$CACHE/k8s/$version"
    local bins=("$dir/bin/kube-apiserver" "$dir/bin/kube-controller-manager")

    # Cold: about 5 minutes on 2 cores, more on a slow network.
    prepare "kubernetes $version" "$dir" k8s_wrapper "${bins[@]}" || return 0

    # The version stamped by the Kubernetes build (hack/lib/version.sh) into both
    # places that read it; without it the binaries report v0.0.0-master.
    local ldflags="" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean"
    done

    build_into "$dir" "${GO_BUILD[@]}" -ldflags "${ldflags# }" -o "$dir/bin.partial/" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager
    log "kubernetes $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
}

# ---------------------------------------------------------------------------
# etcd: etcd and etcdctl
# ---------------------------------------------------------------------------
# Newest stable (no pre-release) v3.<minor>.N of the etcd server the proxy serves.
newest_etcd() {
    local minor=$1
    (cd "$CACHE" && go list -m -versions go.etcd.io/etcd/server/v3) |
        tr ' ' '\n' | grep -E "^v${minor//./\\.}\.[0-9]+$" | sort -V | tail -n 1
}

# The etcd wrapper module and build, in the current directory ($version and $dir are
# build_etcd_version's).
etcd_wrapper() {
    go mod init local.invalid/etcd-binaries >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@$version" "go.etcd.io/etcd/etcdctl/v3@$version"
}
etcd_build() {
    # The main packages are the module roots; -o names them explicitly.
    "${GO_BUILD[@]}" -o "$dir/bin.partial/etcd" go.etcd.io/etcd/server/v3
    "${GO_BUILD[@]}" -o "$dir/bin.partial/etcdctl" go.etcd.io/etcd/etcdctl/v3
}

build_etcd_version() {
    local version=$1
    local dir="$CACHE/etcd/$version"
    local bins=("$dir/bin/etcd" "$dir/bin/etcdctl")

    # etcd's own relative replaces are ignored in a dependency; its modules of the same
    # release are published, so `go get` is all the wrapper module takes.
    prepare "etcd $version" "$dir" etcd_wrapper "${bins[@]}" || return 0
    build_into "$dir" etcd_build
    log "etcd $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
}

# Build one entry of ETCD_VERSIONS ("3.5" or "v3.5.21") and point the minor's
# link ($CACHE/etcd/v3.5) at it, so callers can find "the 3.5" without knowing N.
build_etcd() {
    local want=$1 version minor
    if [[ $want =~ ^v?(3\.[0-9]+)\.[0-9]+$ ]]; then
        version="v${want#v}"
        minor=${BASH_REMATCH[1]}
    elif [[ $want =~ ^v?(3\.[0-9]+)$ ]]; then
        minor=${BASH_REMATCH[1]}
        local link="$CACHE/etcd/v$minor"
        if [[ ${ETCD_REFRESH:-0} != 1 && -L $link ]] &&
            all_executable "$link/bin/etcd" "$link/bin/etcdctl"; then
            version=$(basename "$(readlink "$link")")
        else
            version=$(newest_etcd "$minor") || true
            [[ -n $version ]] || die "the Go module proxy lists no v$minor.N of go.etcd.io/etcd/server/v3"
        fi
    else
        die "bad entry '$want' in ETCD_VERSIONS (want 3.5 or v3.5.21)"
    fi

    build_etcd_version "$version"

    # Atomic link update: make it under a temporary name, then rename over.
    mkdir -p "$CACHE/etcd"
    ln -sfn "$version" "$CACHE/etcd/.v$minor.tmp"
    mv -T "$CACHE/etcd/.v$minor.tmp" "$CACHE/etcd/v$minor"
}

# ---------------------------------------------------------------------------
# Helm: helm (cmd/helm only)
# ---------------------------------------------------------------------------
# helm.sh/helm/v3 has no replace directives, so a wrapper module that `go get`s
# the command is enough. The ldflags are the ones Helm's Makefile sets: its
# version, and the Kubernetes version it assumes without a cluster (lint and
# `helm template`), taken from the k8s.io/client-go it is built with.
# The helm wrapper module, in the current directory ($version is build_helm's).
helm_wrapper() {
    go mod init local.invalid/helm-binaries >/dev/null 2>&1
    go get "helm.sh/helm/v3/cmd/helm@$version"
}

build_helm() {
    local version=$HELM_VERSION
    [[ $version =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "HELM_VERSION must look like v3.22.0, got '$version'"
    local dir="$CACHE/helm/$version"

    prepare "helm $version" "$dir" helm_wrapper "$dir/bin/helm" || return 0
    local wrapper="$dir/wrapper"

    local client_go k8s_minor ldflags="-s -w"
    client_go=$(cd "$wrapper" && go list -m -f '{{.Version}}' k8s.io/client-go)
    [[ $client_go =~ ^v0\.([0-9]+)\. ]] || die "unexpected k8s.io/client-go version '$client_go' in helm's build"
    k8s_minor=${BASH_REMATCH[1]}
    ldflags+=" -X helm.sh/helm/v3/internal/version.version=$version"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    local pkg
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
    done

    build_into "$dir" "${GO_BUILD[@]}" -ldflags "$ldflags" -o "$dir/bin.partial/helm" helm.sh/helm/v3/cmd/helm
    log "helm $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
}

main() {
    local targets=("$@")
    [[ ${#targets[@]} -gt 0 ]] || targets=(all)
    local t e
    local total_start=$SECONDS
    for t in "${targets[@]}"; do
        case $t in
        all)
            # etcd first: it is quick, and control-plane.sh can already use it
            # while Kubernetes builds.
            for e in $ETCD_VERSIONS; do build_etcd "$e"; done
            build_k8s
            build_helm
            ;;
        k8s) build_k8s ;;
        helm) build_helm ;;
        etcd) for e in $ETCD_VERSIONS; do build_etcd "$e"; done ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            return 0
            ;;
        *) die "unknown target '$t' (want all, k8s, etcd or helm)" ;;
        esac
    done
    log "done in $((SECONDS - total_start))s (cache: $CACHE)"
}

main "$@"
