//! End-to-end tests: real etcd clusters run by the operator on the local environment
//! (real kube-apiserver and controller-manager, the process node, the operator with its
//! ServiceAccount's RBAC). Start it with `EXAMPLE= tools/local-up.sh` (`make e2e` does).
//! Every scenario that runs a cluster writes keys before and reads them back after.

mod support;

mod create;
mod heal;
mod leader;
mod lifecycle;
mod names;
mod safety;
mod scale;
mod upgrade;
mod validation;
