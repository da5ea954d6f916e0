//! `EtcdCluster.spec.restore`: the verified snapshot a restored cluster's seed is made
//! from, as the API writes it, and the same snapshot as the lifecycle takes it. Shared by
//! the EtcdCluster spec, the EtcdRestore that writes it and the recovery record.

use etcd_operator_core::lifecycle::SnapshotSource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::s3::S3Store;

/// Kinds of store a restore reads from.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RestoreStorageType {
    /// Amazon S3 or an S3-compatible store (`s3.endpoint`).
    #[default]
    S3,
}

/// `EtcdCluster.spec.restore`: the verified snapshot the cluster's seed restores before it
/// starts. Written by an EtcdRestore when it creates the cluster; read only while the
/// cluster has never bootstrapped, and never changed.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRestore {
    /// Where the snapshot is: `S3`.
    pub backup_storage_type: RestoreStorageType,
    /// The store; `path` is `<bucket>/<key>` of the snapshot itself.
    pub s3: S3Store,
    /// sha256 (hex) of the stored snapshot: the seed's pod checks it while fetching.
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: String,
    /// Bytes of the stored snapshot.
    #[schemars(range(min = 1))]
    pub size: i64,
    /// etcd version the snapshot was taken with.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"))]
    pub etcd_version: String,
    /// The snapshot's revision.
    #[schemars(range(min = 0))]
    pub revision: i64,
    /// The EtcdRestore that created the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_name: Option<String>,
    /// etcd's cluster ID of the cluster the snapshot was taken from (hexadecimal, as
    /// etcdctl prints it), from the snapshot's metadata.
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
}

/// A snapshot as `spec.restore` (and `status.recovery.backup`) write it: the reverse of
/// [`snapshot_source`].
pub(crate) fn cluster_restore(source: &SnapshotSource) -> ClusterRestore {
    ClusterRestore {
        backup_storage_type: RestoreStorageType::S3,
        s3: S3Store {
            path: source.path(),
            aws_secret: source.secret.clone(),
            endpoint: source.endpoint.clone(),
            force_path_style: source.force_path_style,
        },
        sha256: source.sha256.clone(),
        size: i64::try_from(source.size).unwrap_or(i64::MAX),
        etcd_version: source.etcd_version.clone(),
        revision: source.revision,
        restore_name: None,
        cluster_id: source.cluster_id.map(|id| format!("{id:x}")),
    }
}

/// `spec.restore` as the lifecycle takes it.
pub(crate) fn snapshot_source(restore: &ClusterRestore) -> SnapshotSource {
    let (bucket, key) = crate::api::s3::split_path(&restore.s3.path);
    SnapshotSource {
        bucket: bucket.to_string(),
        key: key.to_string(),
        endpoint: restore.s3.endpoint.clone().filter(|e| !e.is_empty()),
        force_path_style: restore.s3.force_path_style,
        secret: restore.s3.aws_secret.clone(),
        sha256: restore.sha256.clone(),
        size: u64::try_from(restore.size).unwrap_or(0),
        etcd_version: restore.etcd_version.clone(),
        revision: restore.revision,
        cluster_id: restore
            .cluster_id
            .as_deref()
            .and_then(|id| u64::from_str_radix(id, 16).ok()),
    }
}
