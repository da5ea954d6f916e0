#!/usr/bin/env bash
# Prints a kubeconfig that authenticates as the operator's ServiceAccount
# (etcd-operator/etcd-operator) with a token from the TokenRequest API, so the operator
# runs here with exactly the RBAC of manifests/20-rbac.yaml.
set -euo pipefail
: "${KUBECONFIG:?KUBECONFIG must point at an admin kubeconfig}"
server=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
token=$(kubectl create token etcd-operator -n etcd-operator --duration=24h)
cat <<YAML
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority-data: $ca
users:
- name: etcd-operator
  user:
    token: $token
contexts:
- name: etcd-operator
  context: {cluster: local, user: etcd-operator, namespace: etcd-operator}
current-context: etcd-operator
YAML
