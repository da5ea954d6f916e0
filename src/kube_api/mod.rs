//! The Kubernetes side of a cluster: the actors' `ClusterApi` port over kube-rs.

mod addresses;
mod backups;
mod claims;
mod cluster_api;
mod cluster_dns;
mod error;
mod events;
mod expectations;
mod pod_view;
mod status_patch;
mod tls;

pub use addresses::{member_address, member_hosts};
pub use cluster_api::{Caches, KubeClusterApi};
pub use cluster_dns::ClusterDns;
pub use tls::Identities;

pub(crate) use events::event;
