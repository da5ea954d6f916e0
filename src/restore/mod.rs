//! Restores of etcd clusters from snapshots in object stores (`EtcdRestore`).
//!
//! [`source`] finds the snapshot a restore names (one, or the newest under a prefix whose
//! metadata verifies) and verifies its bytes; [`plan`] holds the pure rules (never over an
//! existing cluster, the etcd version that may read the snapshot, the new cluster's spec,
//! the status); [`run`] is one step of a restore; [`actor`] runs the steps of one
//! EtcdRestore through the [`port`] to Kubernetes (over kube-rs in [`adapter`]), and [`supervisor`] keeps one actor per object. [`fetch`] is what a restoring seed's init
//! containers run (`etcd-operator snapshot-fetch` and `snapshot-place`).

pub mod actor;
pub mod adapter;
pub mod fetch;
pub mod plan;
pub mod port;
pub mod reason;
pub mod run;
pub mod source;
pub mod supervisor;
