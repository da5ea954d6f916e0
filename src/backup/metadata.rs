//! The small JSON object stored beside each snapshot.

use serde::{Deserialize, Serialize};

/// What is known of a stored snapshot, as `<snapshot key>.json`. Restores read it to pick
/// and check a snapshot without downloading it first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupMetadata {
    /// The cluster backed up (as in the snapshot's name).
    pub cluster: String,
    /// etcd's cluster ID (hex, as etcdctl prints it).
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// The member the snapshot was taken from (hex ID).
    #[serde(rename = "memberID")]
    pub member_id: String,
    /// The snapshot's revision.
    pub revision: i64,
    /// etcd version of that member.
    pub etcd_version: String,
    /// Bytes stored (database and etcd's trailing checksum).
    pub size: u64,
    /// sha256 (hex) of the stored bytes.
    pub sha256: String,
    /// When the snapshot was taken (RFC 3339).
    pub time: String,
    /// The snapshot's key in the bucket.
    pub key: String,
}

impl BackupMetadata {
    /// The JSON stored.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("metadata serializes")
    }
}
