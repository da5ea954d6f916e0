//! End-to-end tests: real etcd clusters run by the operator on the local environment
//! (real kube-apiserver, controller-manager and scheduler, three real kubelets, the operator's
//! Deployment from `manifests/` running its image with its ServiceAccount's RBAC). Start it with `EXAMPLE= testkit/env/local-up.sh` (`make e2e` does).
//! Every scenario that runs a cluster writes keys before and reads them back after.

mod operator;
#[path = "../support/peer_probe.rs"]
mod peer_probe;
mod support;

mod backup;
mod create;
mod disruption;
mod endpoints;
mod environment;
mod examples;
mod heal;
mod helm;
mod kubelet;
mod leader;
mod lifecycle;
mod maintenance;
mod names;
mod recovery;
mod restore;
mod safety;
mod scale;
mod tenancy;
mod tls;
mod upgrade;
mod validation;
mod volumes;
