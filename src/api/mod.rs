//! The `EtcdCluster`, `EtcdBackup` and `EtcdRestore` custom resources and their CRDs.

pub mod backup;
mod crd;
mod desired;
pub mod images;
pub mod names;
mod pod_security;
pub(crate) mod quantity;
mod recovery;
mod reserved;
pub mod restore;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub(crate) use crd::crd_yaml;
pub use crd::{CrdSelection, crd};
pub(crate) use desired::desired_cluster;
pub use recovery::{ClusterRecovery, RecoveryBackup, RecoveryPolicyName, RecoveryStatus};
pub use spec::{
    AutoTls, EtcdCluster, EtcdClusterSpec, KeyType, MemberSecret, PodPolicy, StaticTls, TlsPolicy,
};
pub use status::{
    BootstrapStatus, CertificateStatus, ClusterCondition, EtcdClusterStatus, MemberStatus,
    MembersStatus, TlsStatus,
};
