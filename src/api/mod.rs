//! The `EtcdCluster`, `EtcdBackup` and `EtcdRestore` custom resources and their CRDs.

pub mod annotations;
pub mod backup;
mod crd;
#[cfg(test)]
mod crd_probe;
mod crd_yaml;
mod desired;
pub mod images;
pub mod maintenance;
pub mod names;
mod pod_security;
mod recovery;
mod reserved;
pub mod restore;
pub mod s3;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub use crd::crd;
pub use crd_yaml::CrdSelection;
pub(crate) use crd_yaml::crd_yaml;
pub(crate) use desired::desired_cluster;
pub use recovery::{ClusterRecovery, RecoveryBackup, RecoveryPolicyName, RecoveryStatus};
pub use spec::{
    AutoTls, EtcdCluster, EtcdClusterSpec, KeyType, MemberSecret, PodPolicy, StaticTls, TlsPolicy,
};
pub use status::{
    BootstrapStatus, CertificateStatus, ClusterCondition, CompactionStatus, EtcdClusterStatus,
    MemberStatus, MembersStatus, TlsStatus,
};
