#!/usr/bin/env bash
# The Helm chart (charts/etcd-operator) is the one source of the operator's install
# objects; manifests/ is what it renders with its default values, committed so that
# `kubectl apply -f manifests/` works without helm.
#
#   testkit/env/chart.sh manifests   # `make manifests`: regenerate manifests/ and the chart's
#                                     #   crds/ (the CRD from the Rust types, the rest from the chart)
#   testkit/env/chart.sh crd         # `make crd`: only the CRD, from the Rust types (no helm)
#   testkit/env/chart.sh check       # offline: helm lint --strict (default and scoped values),
#                                     #   the values schema refusing bad values, and manifests/
#                                     #   byte for byte equal to a fresh render (fails on drift)
#   testkit/env/chart.sh dry-run     # kubectl apply --dry-run=server of the default render and
#                                     #   of a scoped render with metrics and a ServiceMonitor,
#                                     #   against $KUBECONFIG (test.sh: the local environment)
#   testkit/env/chart.sh helm ARGS   # helm itself (the end-to-end test installs, upgrades and
#                                     #   uninstalls the chart with it)
#
# What is rendered into manifests/ (release etcd-operator in namespace etcd-operator):
#   00-namespace.yaml   the namespace object (a chart installs into its release namespace)
#   10-crd.yaml         `etcd-operator crd`: every CRD (also charts/etcd-operator/crds/,
#                       one file per CRD; unit tests fail when either drifts from the code)
#   20-rbac.yaml        templates/serviceaccount.yaml and templates/rbac.yaml
#   30-deployment.yaml  templates/deployment.yaml
#   40-networkpolicy.yaml templates/networkpolicy.yaml
# A template that renders with the default values and is not in this list fails the
# render, so nothing the chart installs can be missing from manifests/.
#
# helm comes from testkit/env/build/build-binaries.sh helm (built when missing).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
HELM="$CACHE/helm/$HELM_VERSION/bin/helm"
CHART="$ROOT/charts/etcd-operator"
# The chart's crds/ holds one file per CRD, named after it.
CRD_KINDS=(etcdclusters etcdbackups etcdrestores)
RELEASE=etcd-operator
NAMESPACE=etcd-operator
# The scoped render of the checks: its own release and namespaces.
SCOPED_RELEASE=chart-check
SCOPED_NAMESPACE=chart-check-operator
SCOPED_WATCH=chart-check-apps

log() { printf '[chart] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# What to undo on exit: temporary directories, namespaces and a CRD this run created.
TMP_DIRS=()
MADE_NAMESPACES=()
MADE_CRDS=()
cleanup() {
    local x
    # Waits until they are gone, so that a next run never meets them terminating.
    for x in "${MADE_NAMESPACES[@]}"; do kubectl delete namespace "$x" --timeout=120s >/dev/null 2>&1 || true; done
    for x in "${MADE_CRDS[@]}"; do kubectl delete crd "$x" --timeout=120s >/dev/null 2>&1 || true; done
    for x in "${TMP_DIRS[@]}"; do rm -rf "$x"; done
}
trap cleanup EXIT

ensure_helm() {
    [[ -x $HELM ]] || HELM_VERSION=$HELM_VERSION bash "$ROOT/testkit/env/build/build-binaries.sh" helm
}

# manifests/ file of a template (path under templates/) rendered with the default values.
manifest_of() {
    case $1 in
    serviceaccount.yaml | rbac.yaml) echo 20-rbac.yaml ;;
    deployment.yaml) echo 30-deployment.yaml ;;
    networkpolicy.yaml) echo 40-networkpolicy.yaml ;;
    *) return 1 ;;
    esac
}

header() {
    printf '%s\n' '# Rendered from charts/etcd-operator with its default values by `make manifests`; do not edit.' \
        '# `make test` fails when this file differs from what the chart renders.'
}

namespace_yaml() {
    printf '%s\n' '# Written by `make manifests` (testkit/env/chart.sh); do not edit.'
    cat <<YAML
# The namespace the chart is rendered into for manifests/ (a chart installs into its
# release namespace instead). Etcd clusters may live in any namespace.
apiVersion: v1
kind: Namespace
metadata:
  name: $NAMESPACE
  labels:
    app.kubernetes.io/name: etcd-operator
YAML
}

# Writes 00-namespace.yaml, 20-rbac.yaml, 30-deployment.yaml and 40-networkpolicy.yaml
# into directory $1.
render_into() {
    local out=$1 rendered doc_file="" line pending="" src target
    namespace_yaml >"$out/00-namespace.yaml"
    header >"$out/20-rbac.yaml"
    header >"$out/30-deployment.yaml"
    header >"$out/40-networkpolicy.yaml"
    rendered=$("$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE")
    # helm prints each object as "---", "# Source: <chart>/templates/<file>", the object.
    while IFS= read -r line; do
        if [[ $line == "---" ]]; then
            pending=$line
            continue
        fi
        if [[ $line == "# Source: "* ]]; then
            src=${line#"# Source: etcd-operator/templates/"}
            target=$(manifest_of "$src") ||
                die "templates/$src renders with the default values but has no file in manifests/: add it to manifest_of in ${BASH_SOURCE[0]}"
            doc_file="$out/$target"
        fi
        [[ -n $doc_file ]] || die "helm template printed an object without a # Source line"
        if [[ -n $pending ]]; then
            printf '%s\n' "$pending" >>"$doc_file"
            pending=""
        fi
        printf '%s\n' "$line" >>"$doc_file"
    done <<<"$rendered"
}

cmd_crd() {
    local tmp kind
    tmp=$(mktemp)
    (cd "$ROOT" && cargo run --quiet -- crd) >"$tmp"
    mv "$tmp" "$ROOT/manifests/10-crd.yaml"
    for kind in "${CRD_KINDS[@]}"; do
        tmp=$(mktemp)
        (cd "$ROOT" && cargo run --quiet -- crd --only "$kind") >"$tmp"
        mv "$tmp" "$CHART/crds/$kind.etcd.database.coreos.com.yaml"
    done
    log "wrote manifests/10-crd.yaml and charts/etcd-operator/crds/ (${CRD_KINDS[*]})"
}

cmd_manifests() {
    ensure_helm
    cmd_crd
    render_into "$ROOT/manifests"
    log "wrote manifests/00-namespace.yaml, 20-rbac.yaml, 30-deployment.yaml, 40-networkpolicy.yaml from charts/etcd-operator"
}

# `helm lint --strict` with extra arguments must fail, printing $1.
lint_refuses() {
    local want=$1 out
    shift
    if out=$("$HELM" lint --strict "$CHART" "$@" 2>&1); then
        die "helm lint accepted $* (the values schema should refuse it)"
    fi
    if ! grep -qF -- "$want" <<<"$out"; then
        printf '%s\n' "$out" >&2
        die "helm lint refused $* without naming '$want'"
    fi
}

# The monitoring objects the chart can add, all on.
monitoring_args() {
    echo --set metrics.podMonitor.enabled=true --set metrics.prometheusRule.enabled=true \
        --set metrics.grafanaDashboard.enabled=true
}

scoped_args() {
    echo --namespace "$SCOPED_NAMESPACE" --set "watchNamespace=$SCOPED_WATCH" \
        --set metrics.service.enabled=true --set metrics.serviceMonitor.enabled=true \
        --set metrics.serviceMonitor.labels.release=prometheus
}

# `helm lint --strict` with extra arguments must pass; its output is shown when it fails.
lint_passes() {
    local out
    if ! out=$("$HELM" lint --strict "$CHART" "$@" 2>&1); then
        printf '%s\n' "$out" >&2
        die "helm lint --strict failed ${*:-with the default values}"
    fi
}

cmd_check() {
    ensure_helm
    log "helm lint --strict, default values"
    lint_passes
    log "helm lint --strict, watchNamespace + metrics Service + ServiceMonitor"
    # shellcheck disable=SC2046
    lint_passes $(scoped_args)
    log "helm lint --strict, the same with a serving certificate Secret"
    # shellcheck disable=SC2046
    lint_passes $(scoped_args) --set servingCertificate.secretName=operator-serving

    log "helm lint --strict, with the PodMonitor, PrometheusRule and dashboard"
    # shellcheck disable=SC2046
    lint_passes $(monitoring_args)

    log "the values schema refuses bad values"
    lint_refuses "at '/watchNamespace'" --set 'watchNamespace={a,b}'
    lint_refuses "at '/operator/tickIntervalMs'" --set operator.tickIntervalMs=0
    lint_refuses "additional properties 'tickIntervalMs' not allowed" --set tickIntervalMs=5
    lint_refuses "at '/operator/logLevel'" --set operator.logLevel=verbose

    log "manifests/ is the chart rendered with its default values"
    local tmp f drifted=0
    tmp=$(mktemp -d)
    TMP_DIRS+=("$tmp")
    render_into "$tmp"
    for f in 00-namespace.yaml 20-rbac.yaml 30-deployment.yaml 40-networkpolicy.yaml; do
        if ! diff -u "$ROOT/manifests/$f" "$tmp/$f" >&2; then
            log "manifests/$f drifted from charts/etcd-operator (diff above: committed, rendered)"
            drifted=1
        fi
    done
    if [[ $drifted == 1 ]]; then
        die 'manifests/ differs from the chart: run `make manifests` and commit the result'
    fi
    log "chart checks passed"
}

# kubectl apply --dry-run=server of stdin, printing what the server says.
dry_run() {
    local what=$1 out
    log "kubectl apply --dry-run=server: $what"
    if ! out=$(kubectl apply --dry-run=server --validate=strict -f - 2>&1); then
        printf '%s\n' "$out" >&2
        die "the API server refused the $what render"
    fi
    printf '%s\n' "$out" | sed 's/^/    /' >&2
}

# A minimal ServiceMonitor CRD for the dry run, written here: only the fields the chart
# sets, with their types, so a misspelt or misplaced field is refused (strict field
# validation) and the object's shape is checked; not the Prometheus Operator's schema.
# A CRD of the Prometheus Operator's kind $1 (plural $2), written for the checks, whose
# spec is the schema $3 (the `spec:` property, indented as in the CRD); by default any
# spec. Enough for a server-side dry run of the chart's monitoring objects.
monitoring_crd() {
    local kind=$1 plural=$2
    local spec=${3:-"            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}"}
    cat <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $plural.monitoring.coreos.com
  labels:
    etcd-operator.test/chart-check: minimal-monitoring-crd
spec:
  group: monitoring.coreos.com
  names: {kind: $kind, listKind: ${kind}List, plural: $plural, singular: ${plural%s}}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          required: [spec]
          properties:
$spec
YAML
}

# The ServiceMonitor CRD, checking the fields the chart's ServiceMonitor sets.
servicemonitor_crd() {
    monitoring_crd ServiceMonitor servicemonitors "$(cat <<'YAML'
            spec:
              type: object
              required: [selector, endpoints]
              properties:
                selector:
                  type: object
                  properties:
                    matchLabels: {type: object, additionalProperties: {type: string}}
                namespaceSelector:
                  type: object
                  properties:
                    any: {type: boolean}
                    matchNames: {type: array, items: {type: string}}
                endpoints:
                  type: array
                  minItems: 1
                  items:
                    type: object
                    required: [port]
                    properties:
                      port: {type: string}
                      path: {type: string}
                      interval: {type: string, pattern: '^([0-9]+(ms|s|m|h))+$'}
                      scrapeTimeout: {type: string, pattern: '^([0-9]+(ms|s|m|h))+$'}
                      scheme: {type: string, enum: [http, https]}
                      bearerTokenFile: {type: string}
                      tlsConfig:
                        type: object
                        properties:
                          insecureSkipVerify: {type: boolean}
                          serverName: {type: string}
                          ca:
                            type: object
                            properties:
                              secret:
                                type: object
                                required: [key]
                                properties:
                                  name: {type: string}
                                  key: {type: string}
YAML
)"
}

cmd_dry_run() {
    ensure_helm
    : "${KUBECONFIG:?KUBECONFIG must point at an admin kubeconfig}"
    local ns
    # Objects in a namespace that does not exist are refused even in a dry run: make the
    # namespaces that are missing (removed again on exit, like the ServiceMonitor CRD).
    for ns in "$NAMESPACE" "$SCOPED_NAMESPACE" "$SCOPED_WATCH"; do
        if [[ $(kubectl get namespace "$ns" -o jsonpath='{.status.phase}' 2>/dev/null) == Terminating ]]; then
            log "namespace $ns is being deleted; waiting until it is gone"
            kubectl wait --for=delete "namespace/$ns" --timeout=120s >/dev/null
        fi
        if ! kubectl get namespace "$ns" >/dev/null 2>&1; then
            kubectl create namespace "$ns" >/dev/null
            MADE_NAMESPACES+=("$ns")
        fi
    done
    if ! kubectl get crd servicemonitors.monitoring.coreos.com >/dev/null 2>&1; then
        servicemonitor_crd | kubectl apply -f - >/dev/null
        MADE_CRDS+=(servicemonitors.monitoring.coreos.com)
        kubectl wait --for=condition=Established crd/servicemonitors.monitoring.coreos.com --timeout=60s >/dev/null
    fi

    local kind plural
    for kind in PodMonitor PrometheusRule; do
        plural="$(tr '[:upper:]' '[:lower:]' <<<"$kind")s"
        if ! kubectl get crd "$plural.monitoring.coreos.com" >/dev/null 2>&1; then
            monitoring_crd "$kind" "$plural" | kubectl apply -f - >/dev/null
            MADE_CRDS+=("$plural.monitoring.coreos.com")
            kubectl wait --for=condition=Established "crd/$plural.monitoring.coreos.com" --timeout=60s >/dev/null
        fi
    done

    "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --include-crds |
        dry_run "default (release $RELEASE in namespace $NAMESPACE, with the CRD)"
    # shellcheck disable=SC2046
    "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" $(monitoring_args) |
        dry_run "with the PodMonitor, PrometheusRule and dashboard"
    # shellcheck disable=SC2046
    "$HELM" template "$SCOPED_RELEASE" "$CHART" $(scoped_args) |
        dry_run "scoped (watchNamespace=$SCOPED_WATCH, metrics Service, ServiceMonitor)"
    # shellcheck disable=SC2046
    "$HELM" template "$SCOPED_RELEASE" "$CHART" $(scoped_args) --set servingCertificate.secretName=operator-serving |
        dry_run "scoped, with a serving certificate Secret"
    log "dry runs passed"
}

case ${1:-} in
manifests) cmd_manifests ;;
crd) cmd_crd ;;
check) cmd_check ;;
dry-run) cmd_dry_run ;;
helm)
    shift
    ensure_helm
    trap - EXIT
    exec "$HELM" "$@"
    ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
