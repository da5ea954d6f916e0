//! The `EtcdCluster` custom resource and its CRD.

mod crd;
mod desired;
pub mod names;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub use crd::{crd, crd_yaml};
pub use desired::desired_cluster;
pub use spec::{
    DEFAULT_REPOSITORY, DEFAULT_VERSION, EtcdCluster, EtcdClusterSpec, MemberSecret, PodPolicy,
    StaticTls, TlsPolicy,
};
pub use status::{BootstrapStatus, ClusterCondition, EtcdClusterStatus, MembersStatus};
