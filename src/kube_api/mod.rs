//! The Kubernetes side of a cluster: the actors' `ClusterApi` port over kube-rs; and the
//! writes to the operator's own objects (EtcdBackup, EtcdRestore) for their actors.

mod addresses;
mod backups;
mod claims;
mod cluster_api;
mod cluster_dns;
pub(crate) mod error;
mod events;
mod expectations;
pub(crate) mod own_objects;
mod pod_view;
mod status_patch;
mod tls;

pub use addresses::{member_address, member_hosts};
pub use cluster_api::{Caches, KubeClusterApi};
pub use cluster_dns::ClusterDns;
pub use tls::Identities;

pub(crate) use events::event;
