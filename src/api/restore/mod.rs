//! The `EtcdRestore` custom resource (CoreOS `v1beta2` compatible, plus `clusterSpec`),
//! the restore source an EtcdCluster made by it carries (`spec.restore`), and its CRD.

mod crd;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub use crd::restore_crd;
pub use spec::{
    ClusterRestore, EtcdClusterRef, EtcdRestore, EtcdRestoreSpec, RestoreStorageType,
    S3RestoreSource,
};
pub use status::EtcdRestoreStatus;
