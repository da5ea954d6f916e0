//! Backups of etcd clusters to object stores (`EtcdBackup`).
//!
//! The parts a restore reuses stand alone: [`store`] (one API over S3, GCS and Azure),
//! [`credentials`] (Secrets in the CoreOS layouts), [`naming`] (keys carrying cluster,
//! time and revision), [`integrity`] (etcd's snapshot checksum, checked while streaming)
//! and [`metadata`] (the JSON beside each snapshot). [`snapshot`] takes a snapshot from a
//! healthy member, each endpoint dialed by [`dial`] (plain, or over TLS with the client
//! certificate [`client_tls`] finds for the backup); [`run`] makes one whole backup,
//! [`retention`] and [`schedule`] are the pure decisions of what to delete and when to run
//! next, [`report`] the status after each step. The actors that run backups on their
//! schedule are in [`actor`], fed by [`supervisor`]; [`target`] turns a spec into a store,
//! endpoints and a dialer through the [`port`] to Kubernetes (over kube-rs in
//! [`adapter`]).

pub mod actor;
pub mod adapter;
pub mod client_tls;
pub mod credentials;
pub mod dial;
pub mod integrity;
pub mod metadata;
pub mod metrics;
pub mod naming;
pub mod port;
pub mod report;
pub mod retention;
pub mod run;
pub mod schedule;
pub mod scope;
pub mod snapshot;
pub mod store;
pub mod supervisor;
pub mod target;
pub mod target_error;
