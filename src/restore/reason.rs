//! Why a restore does not proceed, as its status and Events name it, and which of those
//! reasons are final (nothing is retried until the spec changes).

use crate::backup::store::StoreError;

/// The CamelCase reason of a restore that does not proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreReason {
    /// An EtcdCluster of the restore's name exists and is not this restore's.
    ClusterExists,
    /// The EtcdCluster this restore created was deleted before it ran.
    ClusterDeleted,
    /// The EtcdRestore's spec cannot be carried out as written.
    InvalidSpec,
    /// Nothing to restore at the path the spec names.
    BackupNotFound,
    /// The bucket the spec names does not exist.
    BucketNotFound,
    /// The metadata object beside the snapshot is missing or does not describe it.
    InvalidMetadata,
    /// The stored bytes are not what the metadata says.
    ChecksumMismatch,
    /// The etcd version the new cluster runs cannot read the snapshot.
    SnapshotUnreadable,
    /// The API server did not answer: retried.
    KubernetesUnavailable,
    /// The store's Secret does not exist (yet): retried.
    SecretNotFound,
    /// The store's Secret is not in a layout the operator reads: retried.
    InvalidSecret,
    /// Any other failure of the store (unreachable, access denied, its configuration),
    /// in the store's own words: retried.
    Store(&'static str),
}

impl RestoreReason {
    /// The reason as status and Events write it.
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreReason::ClusterExists => "ClusterExists",
            RestoreReason::ClusterDeleted => "ClusterDeleted",
            RestoreReason::InvalidSpec => "InvalidSpec",
            RestoreReason::BackupNotFound => "BackupNotFound",
            RestoreReason::BucketNotFound => "BucketNotFound",
            RestoreReason::InvalidMetadata => "InvalidMetadata",
            RestoreReason::ChecksumMismatch => "ChecksumMismatch",
            RestoreReason::SnapshotUnreadable => "SnapshotUnreadable",
            RestoreReason::KubernetesUnavailable => "KubernetesUnavailable",
            RestoreReason::SecretNotFound => "SecretNotFound",
            RestoreReason::InvalidSecret => "InvalidSecret",
            RestoreReason::Store(reason) => reason,
        }
    }

    /// Whether the restore is refused until its spec changes (phase `Refused`); the other
    /// reasons (something not reachable or not there yet) are retried (phase `Failed`).
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            RestoreReason::KubernetesUnavailable
                | RestoreReason::SecretNotFound
                | RestoreReason::InvalidSecret
                | RestoreReason::Store(_)
        )
    }
}

impl From<&StoreError> for RestoreReason {
    fn from(error: &StoreError) -> Self {
        match error {
            StoreError::ObjectNotFound(_) => RestoreReason::BackupNotFound,
            StoreError::BucketNotFound { .. } => RestoreReason::BucketNotFound,
            other => RestoreReason::Store(other.reason()),
        }
    }
}

impl std::fmt::Display for RestoreReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_out_of_reach_or_a_missing_secret_is_retried_and_a_missing_snapshot_is_final() {
        let down = StoreError::Unreachable("connection refused".into());
        assert_eq!(RestoreReason::from(&down).as_str(), "StoreUnreachable");
        assert!(!RestoreReason::from(&down).is_final());
        assert!(!RestoreReason::SecretNotFound.is_final());
        assert!(!RestoreReason::KubernetesUnavailable.is_final());
        let gone = StoreError::ObjectNotFound("bucket/x.db".into());
        assert_eq!(RestoreReason::from(&gone), RestoreReason::BackupNotFound);
        assert!(RestoreReason::BackupNotFound.is_final());
        assert!(RestoreReason::ChecksumMismatch.is_final());
        assert!(RestoreReason::ClusterExists.is_final());
    }
}
