#!/usr/bin/env bash
# Build (once) and cache the binaries of the local control plane:
#
#   $CACHE/k8s/<K8S_VERSION>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,
#                                 kube-proxy,kubelet}   (target k8s: one go build)
#   $CACHE/etcd/v3.X.Y/bin/{etcd,etcdctl}     and the link $CACHE/etcd/v3.X -> v3.X.Y
#   $CACHE/etcd/v3.X.Y/bin/etcdutl            (3.5 and later: restores from snapshots)
#   $CACHE/helm/<HELM_VERSION>/bin/helm       (the chart's lint, render and drift checks)
#   $CACHE/coredns/<COREDNS_VERSION>/bin/coredns  (the pod network: cluster DNS)
#   $CACHE/local-path/<LOCAL_PATH_VERSION>/bin/local-path-provisioner  (target local-path,
#                                             in all: the real nodes' volumes, issue #29)
#   $CACHE/versitygw/<VERSITYGW_VERSION>/bin/versitygw  (target s3: the S3-compatible
#                                             object store of the backup tests)
#   $CACHE/corrupt/bin/corrupt                 (target corrupt: makes a stopped member's
#                                             data differ, for the corruption tests)
#   $CACHE/promtool/<PROMTOOL_VERSION>/bin/promtool  (target promtool: the alert rules'
#                                             checks and unit tests)
#
# where CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}.
#
# Everything is built from source with the Go toolchain and the Go module proxy
# (there are no prebuilt Kubernetes binaries and no containers on these machines).
# A second run finds the binaries and returns in seconds.
#
# Usage: testkit/env/build/build-binaries.sh [all|k8s|etcd|helm|kube-proxy|kube-scheduler|kubelet|coredns|network|s3|local-path|corrupt|promtool]...
#        (default: all = etcd, k8s, helm, coredns, s3, local-path; network = kube-proxy,
#        kube-scheduler, coredns)
#
# Target k8s builds the five Kubernetes commands in one `go build` (the cold build's
# costliest step, about 5 minutes here). kube-proxy, kube-scheduler and kubelet alone each
# check only their own binary, and build it alone in the same wrapper module when it is
# missing (a cache made before k8s built all five).
#
# Each step's compiler output goes to a log beside its output (DIR/wrapper.log,
# DIR/build.log) with a line every 30 s while it runs; a failure prints the log's end.
#
# Environment:
#   ETCD_OPERATOR_CACHE  cache root (default $HOME/.cache/etcd-operator)
#   K8S_VERSION          k8s.io/kubernetes version (default v1.35.4)
#   ETCD_VERSIONS        etcd versions to build, space separated, each either a
#                        minor ("3.5": the newest v3.5.N the proxy serves) or an
#                        exact version ("v3.5.21")             (default "3.5 3.6")
#   HELM_VERSION         helm.sh/helm/v3 version (default v3.22.0)
#   COREDNS_VERSION      github.com/coredns/coredns version (default v1.15.0)
#   VERSITYGW_VERSION    github.com/versity/versitygw version (default v1.8.0)
#   PROMTOOL_VERSION     github.com/prometheus/prometheus version of promtool (default v0.316.0)
#   LOCAL_PATH_VERSION   github.com/rancher/local-path-provisioner version (default v0.0.30)
#   ETCD_REFRESH=1       re-ask the proxy for the newest patch of each minor even if
#                        one is cached already (by default a cached minor is reused,
#                        so that warm runs need no network and stay reproducible)
#   GOMODCACHE, GOCACHE  Go's own caches; Go's defaults unless set
#
# Partial outputs are written under temporary names and renamed into place only
# when complete and when each binary has answered its version flag, so neither an
# interrupted nor a broken build is ever mistaken for a cached one.
set -euo pipefail

CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
K8S_VERSION=${K8S_VERSION:-v1.35.4}
ETCD_VERSIONS=${ETCD_VERSIONS:-3.5 3.6}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
PROMTOOL_VERSION=${PROMTOOL_VERSION:-v0.316.0}
LOCAL_PATH_VERSION=${LOCAL_PATH_VERSION:-v0.0.30}

log() { printf '[build-binaries] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=testkit/env/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# in_dir DIR CMD...: CMD run in DIR (called in quietly's subshell: the cd stays there).
in_dir() {
    cd "$1" || return
    shift
    "$@"
}

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

# prepare LABEL DIR BIN...: false, saying so, when every BIN is built already;
# otherwise starts the build's clock (BUILD_START).
prepare() {
    local label=$1 dir=$2
    shift 2
    if all_executable "$@"; then
        log "$label: cached in $dir/bin"
        return 1
    fi
    BUILD_START=$SECONDS
    log "$label: building"
    mkdir -p "$dir"
}

# wrapper_module DIR SETUP: makes the wrapper module DIR/wrapper once, by running the
# function SETUP in a fresh directory that is renamed into place only when SETUP succeeded
# (the module is kept: its go.sum makes rebuilds offline).
# Call it on its own line, never in a condition (`prepare ... || return 0` is one): bash
# ignores set -e for everything run from a condition, so a failing SETUP would then be
# marked ready and every later build would fail in an empty module.
wrapper_module() {
    local dir=$1 setup=$2
    local wrapper="$dir/wrapper" tmp="$dir/wrapper.partial"
    [[ -f $wrapper/.ready ]] && return 0
    rm -rf "$tmp"
    mkdir -p "$tmp"
    quietly "$dir/wrapper.log" in_dir "$tmp" "$setup"
    touch "$tmp/.ready"
    rm -rf "$wrapper"
    mv "$tmp" "$wrapper"
}

# build_into DIR COMMAND...: runs COMMAND in DIR/wrapper to write DIR/bin.partial, then
# moves that to DIR/bin in one rename, or, when DIR/bin exists, renames each new file into
# it (one rename per binary, replacing it): the binaries COMMAND did not build stay, as
# kube-apiserver and kube-controller-manager do while kube-proxy is built beside them.
build_into() {
    local dir=${1:?}
    shift
    rm -rf "$dir/bin.partial"
    mkdir -p "$dir/bin.partial"
    quietly "$dir/build.log" in_dir "$dir/wrapper" "$@"
    if [[ -d $dir/bin ]]; then
        find "$dir/bin.partial" -mindepth 1 -maxdepth 1 -exec mv -f -t "$dir/bin" {} +
        rmdir "$dir/bin.partial"
    else
        mv "$dir/bin.partial" "$dir/bin"
    fi
}

# smoke WANT BIN ARG...: runs a freshly built BIN with its version flag ARG... before it is
# renamed into place; dies unless it succeeds and prints WANT (its version), so a binary
# that does not start is never cached.
smoke() {
    local want=$1 bin=$2 out
    shift
    out=$("$@" 2>&1 </dev/null) || die "$bin ${*:2} failed after the build: $out"
    [[ $out == *"$want"* ]] || die "$bin ${*:2} does not say $want: $out"
    log "$(basename "$bin"): ${out%%$'\n'*}"
}

# ---------------------------------------------------------------------------
# Kubernetes: kube-apiserver and kube-controller-manager (target k8s), kube-proxy
# (target kube-proxy), in one wrapper module and one bin directory
# ---------------------------------------------------------------------------
# `go install k8s.io/kubernetes/cmd/kube-apiserver@v1.X.Y` does not work: that
# module's go.mod replaces its ~30 staging modules (k8s.io/api, k8s.io/client-go,
# ...) with relative ./staging paths. A wrapper module replaces each of them with
# the published v0.X.Y release of the same module instead.
# The Kubernetes wrapper module, in the current directory: k8s.io/kubernetes' staging
# replaces pointed at the published modules, its godebug settings, both commands resolved.
# (Called by wrapper_module from build_k8s or build_kube_proxy: $version and
# $staging_version are theirs, set by k8s_settings.)
k8s_wrapper() {
    # Where the proxy put k8s.io/kubernetes' own go.mod.
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$version" |
        sed -n 's/^[[:space:]]*"GoMod":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p') || gomod=""
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

# k8s_settings: sets version, staging_version, dir and ldflags for K8S_VERSION in the
# caller's locals (build_k8s and build_kube_proxy declare them).
k8s_settings() {
    version=$K8S_VERSION
    [[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "K8S_VERSION must look like v1.35.4, got '$version'"
    local minor=${BASH_REMATCH[1]} patch=${BASH_REMATCH[2]}
    staging_version="v0.${minor}.${patch}"
    dir="$CACHE/k8s/$version"

    # The version stamped by the Kubernetes build (hack/lib/version.sh) into both
    # places that read it; without it the binaries report v0.0.0-master.
    ldflags=""
    local pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean"
    done
    ldflags=${ldflags# }
}

# k8s_build CMD...: in the wrapper module, builds k8s.io/kubernetes/cmd/CMD for each CMD
# into $dir/bin.partial and smoke-checks each (the callers' $version, $dir, $ldflags).
k8s_build() {
    local cmd pkgs=()
    for cmd in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
    "${GO_BUILD[@]}" -ldflags "$ldflags" -o "$dir/bin.partial/" "${pkgs[@]}"
    for cmd in "$@"; do smoke "Kubernetes $version" "$dir/bin.partial/$cmd" --version; done
}

# Every Kubernetes command the environment runs, built together by build_k8s.
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet)

# k8s_build_all: resolves the commands the wrapper lacks (an older wrapper resolved only
# the first two), then one `go build` of all of them: one action graph, the links run in
# parallel.
k8s_build_all() {
    local cmd pkgs=()
    for cmd in "${K8S_COMMANDS[@]:2}"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd@$version"); done
    go get "${pkgs[@]}"
    k8s_build "${K8S_COMMANDS[@]}"
}

build_k8s() {
    local version staging_version dir ldflags cmd bins=()
    k8s_settings
    for cmd in "${K8S_COMMANDS[@]}"; do bins+=("$dir/bin/$cmd"); done

    # Cold: about 5 minutes on 2 cores, more on a slow network.
    prepare "kubernetes $version (${K8S_COMMANDS[*]})" "$dir" "${bins[@]}" || return 0
    wrapper_module "$dir" k8s_wrapper
    build_into "$dir" k8s_build_all
    log "kubernetes $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
}

# kube-proxy, from the same module and version, in the same wrapper module (made here if
# no k8s build made it yet) and bin directory, which it shares with the control plane.
# k8s_wrapper resolves only the two control-plane commands, so kube-proxy is resolved
# here, in the wrapper, before each of its builds (that only adds its own packages'
# requirements and go.sum lines; the versions of the modules already there stay).
# The same holds for kube-scheduler (the local environment's several nodes are scheduled
# by it, as in any cluster). $K8S_EXTRA names the command being built.
k8s_extra_build() {
    go get "k8s.io/kubernetes/cmd/$K8S_EXTRA@$version"
    k8s_build "$K8S_EXTRA"
}

# build_k8s_extra CMD: k8s.io/kubernetes/cmd/CMD beside the control plane's binaries.
build_k8s_extra() {
    local version staging_version dir ldflags
    k8s_settings

    prepare "$1 $version" "$dir" "$dir/bin/$1" || return 0
    wrapper_module "$dir" k8s_wrapper
    K8S_EXTRA=$1 build_into "$dir" k8s_extra_build
    log "$1 $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
}

# ---------------------------------------------------------------------------
# etcd: etcd and etcdctl (and etcdutl)
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
    smoke "${version#v}" "$dir/bin.partial/etcd" --version
    smoke "${version#v}" "$dir/bin.partial/etcdctl" version
}

build_etcd_version() {
    local version=$1
    local dir="$CACHE/etcd/$version"
    local bins=("$dir/bin/etcd" "$dir/bin/etcdctl")

    # etcd's own relative replaces are ignored in a dependency; its modules of the same
    # release are published, so `go get` is all the wrapper module takes.
    prepare "etcd $version" "$dir" "${bins[@]}" || return 0
    wrapper_module "$dir" etcd_wrapper
    build_into "$dir" etcd_build
    log "etcd $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
}

# etcdutl (3.5 and later; 3.4's restore is etcdctl's) beside etcd and etcdctl, in the same
# wrapper module, checked on its own: a cache made before it existed gains it alone.
etcdutl_build() {
    go get "go.etcd.io/etcd/etcdutl/v3@$version"
    "${GO_BUILD[@]}" -o "$dir/bin.partial/etcdutl" go.etcd.io/etcd/etcdutl/v3
    smoke "${version#v}" "$dir/bin.partial/etcdutl" version
}

build_etcdutl() {
    local version=$1
    local dir="$CACHE/etcd/$version"
    [[ $version =~ ^v3\.([0-9]+)\. ]] && ((BASH_REMATCH[1] >= 5)) || return 0
    prepare "etcdutl $version" "$dir" "$dir/bin/etcdutl" || return 0
    build_into "$dir" etcdutl_build
    log "etcdutl $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
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
    build_etcdutl "$version"

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

    prepare "helm $version" "$dir" "$dir/bin/helm" || return 0
    wrapper_module "$dir" helm_wrapper
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

    build_into "$dir" helm_build
    log "helm $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
}

# In the wrapper module ($version, $dir and $ldflags are build_helm's).
helm_build() {
    "${GO_BUILD[@]}" -ldflags "$ldflags" -o "$dir/bin.partial/helm" helm.sh/helm/v3/cmd/helm
    smoke "$version" "$dir/bin.partial/helm" version
}

# ---------------------------------------------------------------------------
# CoreDNS: coredns (the module's main package, its default plugin set)
# ---------------------------------------------------------------------------
# github.com/coredns/coredns is itself the main package (coredns.go at the module root),
# and its go.mod has no replace directives, so, as for helm, a wrapper module that
# `go get`s it is enough. The default plugins (plugin.cfg, compiled in through
# core/plugin) include kubernetes, the cluster DNS. Flags as in CoreDNS's Makefile: the
# grpcnotrace tag and -s -w; the version itself is a constant of the source
# (coremain.CoreVersion), and the commit it prints is the module version, the only
# revision a module from the proxy has.
# Built by go_command below, with the tag and the version check CoreDNS needs.
build_coredns() {
    local tags=grpcnotrace smoke_flag=-version smoke_want="CoreDNS-${COREDNS_VERSION#v}"
    go_command coredns COREDNS_VERSION v1.15.0 coredns github.com/coredns/coredns \
        github.com/coredns/coredns/coremain.GitCommit
}

# ---------------------------------------------------------------------------
# versitygw: the S3-compatible object store of the backup tests (target s3)
# ---------------------------------------------------------------------------
# Versity's S3 gateway (Apache-2.0) serves the S3 API (SigV4, multipart uploads) over a
# plain directory with its posix backend: a production S3 server under a permissive
# licence, built like the others from its Go module. Its go.mod has no replace
# directives, so a wrapper module that `go get`s the command is enough.
# Both are built by go_command below.
build_s3() {
    go_command versitygw VERSITYGW_VERSION v1.8.0 versitygw \
        github.com/versity/versitygw/cmd/versitygw main.Version
}

# ---------------------------------------------------------------------------
# local-path-provisioner: the real nodes' claims (target local-path)
# ---------------------------------------------------------------------------
# Rancher's dynamic provisioner of node-local directories (Apache-2.0): it makes each
# claim's directory through a helper pod on the claim's node and the volume a hostPath
# with that node's affinity. Its go.mod has no replace directives either.
build_local_path() {
    go_command local-path-provisioner LOCAL_PATH_VERSION v0.0.30 local-path \
        github.com/rancher/local-path-provisioner main.VERSION
}

# Builds the Go command at package $5, whose module has no replace directives, at the
# version in the variable named $2 (which looks like $3), into $CACHE/$4/<version>/bin/$1;
# the package variable $6 is set to the version, as the project's own release does.
# A caller may set, as locals, `tags` (build tags), `smoke_flag` (what makes the binary
# print its version; default --version) and `smoke_want` (what it prints; default the
# version).
go_command() {
    local name=$1 setting=$2 example=$3 subdir=$4 package=$5 version_variable=$6
    local version=${!setting}
    [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$setting must look like $example, got '$version'"
    local dir="$CACHE/$subdir/$version"

    prepare "$name $version" "$dir" "$dir/bin/$name" || return 0
    wrapper_module "$dir" go_command_wrapper
    build_into "$dir" go_command_build
    log "$name $version: built in $((SECONDS - BUILD_START))s -> $dir/bin"
}
# The wrapper module, in the current directory ($subdir, $package and $version are
# go_command's).
go_command_wrapper() {
    go mod init "local.invalid/$subdir-binaries" >/dev/null 2>&1
    go get "$package@$version"
}
# In the wrapper module ($name, $package, $version_variable, $version and $dir are
# go_command's).
go_command_build() {
    "${GO_BUILD[@]}" -tags "${tags:-}" -ldflags "-s -w -X $version_variable=$version" \
        -o "$dir/bin.partial/$name" "$package"
    smoke "${smoke_want:-$version}" "$dir/bin.partial/$name" "${smoke_flag:---version}"
}

# ---------------------------------------------------------------------------
# promtool: checks and unit-tests the chart's alert rules (target promtool)
# ---------------------------------------------------------------------------
# Prometheus' own rule checker (Apache-2.0), from its Go module (v0.3xx.y is Prometheus
# 3.xx.y); its go.mod has no replace directives. tests/monitoring.rs runs it.
build_promtool() {
    go_command promtool PROMTOOL_VERSION v0.316.0 promtool \
        github.com/prometheus/prometheus/cmd/promtool \
        github.com/prometheus/common/version.Version
}

# ---------------------------------------------------------------------------
# corrupt: the test rig's own tool that makes a stopped member's data differ (target
# corrupt), for the corruption tests (tests/corruption_real_etcd.rs)
# ---------------------------------------------------------------------------
# Built from testkit/corrupt (go.etcd.io/bbolt) once per source; the tests find it at
# $CACHE/corrupt/bin/corrupt.
build_corrupt() {
    local root bin
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
    bin=$(go_tool_binary "$root/testkit/corrupt" "$CACHE")
    mkdir -p "$CACHE/corrupt/bin"
    ln -sfn "$bin" "$CACHE/corrupt/bin/corrupt"
    log "corrupt: $bin"
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
            build_coredns
            build_s3
            build_local_path
            ;;
        k8s) build_k8s ;;
        s3) build_s3 ;;
        local-path) build_local_path ;;
        corrupt) build_corrupt ;;
        promtool) build_promtool ;;
        helm) build_helm ;;
        etcd) for e in $ETCD_VERSIONS; do build_etcd "$e"; done ;;
        kube-proxy | kube-scheduler | kubelet) build_k8s_extra "$t" ;;
        coredns) build_coredns ;;
        network)
            build_k8s_extra kube-proxy
            build_k8s_extra kube-scheduler
            build_coredns
            ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            return 0
            ;;
        *) die "unknown target '$t' (want all, k8s, etcd, helm, kube-proxy, kube-scheduler, kubelet, coredns, network, s3, local-path, corrupt or promtool)" ;;
        esac
    done
    log "done in $((SECONDS - total_start))s (cache: $CACHE)"
}

main "$@"
