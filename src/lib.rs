//! etcd-operator: a Kubernetes operator that creates and runs etcd clusters.
//!
//! The actors and the lifecycle they run live in the `etcd-operator-actors` crate
//! (`actors/`); this crate holds everything that touches the outside world:
//!
//! - [`api`]: the `EtcdCluster`, `EtcdBackup` and `EtcdRestore` custom resources (CoreOS `v1beta2`
//!   compatible) and their CRDs;
//! - [`backup`]: snapshots of etcd clusters to object stores, and the actors that take them;
//! - [`secret_data`]: a Secret's data, the one type every Secret is read into;
//! - [`restore`]: new clusters from those snapshots (`EtcdRestore`), and the seed's steps;
//! - [`resources`]: the pods and Services a cluster is made of;
//! - [`kube_api`]: the Kubernetes side of a cluster (the actors' `ClusterApi` port);
//! - [`etcd_api`]: etcd's membership API over `etcd-client` (the actors' `EtcdApi` port);
//! - [`tls`]: certificates: CoreOS's Secret layout, the checks before members use them, and
//!   the certificates the operator makes;
//! - [`controller`]: the watch stream, leader election and wiring of the actors;
//! - [`http`]: `/healthz`, `/readyz`, `/metrics` and the debug endpoints;
//! - [`join_gate`]: the init container that holds a prepared joiner's etcd back until it
//!   is a member (`etcd-operator await-membership`);
//! - [`logging`]: slog setup;
//! - [`Error`]: what running the operator can fail with.

pub mod api;
pub mod backup;
pub mod cli;
pub(crate) mod controller;
mod error;
pub mod etcd_api;
pub(crate) mod http;
pub mod join_gate;
pub(crate) mod kube_api;
pub(crate) mod logging;
pub(crate) mod resources;
pub mod restore;
pub mod secret_data;
pub mod tls;

pub use error::Error;
/// The etcd command line of a member pod (tests run real etcd with it).
pub use resources::etcd_flags;
