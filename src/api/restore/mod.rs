//! The `EtcdRestore` custom resource (CoreOS `v1beta2` compatible, plus `clusterSpec`),
//! the restore source an EtcdCluster made by it carries (`spec.restore`), and its CRD.

mod crd;
mod source;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub use crd::restore_crd;
pub use source::{ClusterRestore, RestoreStorageType};
pub(crate) use source::{cluster_restore, snapshot_source};
pub use spec::{EtcdClusterRef, EtcdRestore, EtcdRestoreSpec};
pub use status::EtcdRestoreStatus;
