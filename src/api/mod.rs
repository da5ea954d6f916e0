//! The `EtcdCluster` custom resource and its CRD.

mod crd;
mod desired;
pub mod names;
pub(crate) mod quantity;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub use crd::crd;
pub(crate) use crd::crd_yaml;
pub(crate) use desired::desired_cluster;
pub use spec::{EtcdCluster, EtcdClusterSpec, MemberSecret, PodPolicy, StaticTls, TlsPolicy};
pub use status::{
    BootstrapStatus, ClusterCondition, EtcdClusterStatus, MemberStatus, MembersStatus,
};
