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
    /// The namespace of the EtcdBackup that wrote it (a cluster it names by `clusterName`
    /// is in the same one). Absent in metadata written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The UID of the EtcdBackup that wrote it: retention deletes only what the same
    /// EtcdBackup wrote. Absent in metadata written before it was recorded.
    #[serde(
        rename = "etcdBackupUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub etcd_backup_uid: Option<String>,
}

impl BackupMetadata {
    /// The JSON stored.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("metadata serializes")
    }

    /// The cluster ID as a number; `None` when it is not hexadecimal.
    pub fn cluster_id_number(&self) -> Option<u64> {
        u64::from_str_radix(&self.cluster_id, 16).ok()
    }
}

/// Metadata as tests write it: the snapshot at `key` of `cluster` (etcd cluster ID 1a2b,
/// member 3c, etcd 3.5.35, revision 7, 4128 bytes), written by an EtcdBackup in `prod`
/// whose UID is unknown. A test sets what it is about with `..example(…)`.
#[cfg(test)]
pub(crate) fn example(cluster: &str, key: &str) -> BackupMetadata {
    BackupMetadata {
        cluster: cluster.into(),
        cluster_id: "1a2b".into(),
        member_id: "3c".into(),
        revision: 7,
        etcd_version: "3.5.35".into(),
        size: 4128,
        sha256: "0f".repeat(32),
        time: "2026-11-30T10:33:00Z".into(),
        key: key.into(),
        namespace: Some("prod".into()),
        etcd_backup_uid: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_written_before_the_writer_was_recorded_still_reads_without_one() {
        let old = br#"{"cluster":"demo","clusterID":"1a2b","memberID":"3c","revision":7,
            "etcdVersion":"3.5.35","size":4128,"sha256":"00","time":"2026-11-30T10:33:00Z",
            "key":"p/demo.db"}"#;
        let metadata: BackupMetadata = serde_json::from_slice(old).unwrap();
        assert_eq!(metadata.namespace, None);
        assert_eq!(metadata.etcd_backup_uid, None);
        assert_eq!(metadata.cluster_id_number(), Some(0x1a2b));
        let written = BackupMetadata {
            namespace: Some("prod".into()),
            etcd_backup_uid: Some("u-1".into()),
            ..metadata
        };
        let json: serde_json::Value = serde_json::from_slice(&written.to_json()).unwrap();
        assert_eq!(json["namespace"], "prod");
        assert_eq!(json["etcdBackupUID"], "u-1");
    }
}
