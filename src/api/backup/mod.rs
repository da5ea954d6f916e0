//! The `EtcdBackup` custom resource (CoreOS `v1beta2` compatible) and its CRD.

mod crd;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub use crd::backup_crd;
pub use spec::{
    AbsBackupSource, BackupPolicy, BackupStorageType, EtcdBackup, EtcdBackupSpec, GcsBackupSource,
};
pub use status::EtcdBackupStatus;
