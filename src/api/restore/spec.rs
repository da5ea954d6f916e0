//! `EtcdRestore.spec`: the CoreOS v1beta2 fields (`etcdCluster.name`, `backupStorageType`,
//! `s3`), plus `clusterSpec`; and `EtcdCluster.spec.restore`, what a restored cluster's
//! seed is made from.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::status::EtcdRestoreStatus;
use crate::api::EtcdClusterSpec;

/// A new EtcdCluster made from a snapshot in an object store.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdRestore",
    plural = "etcdrestores",
    shortname = "etcdrestore",
    namespaced,
    status = "EtcdRestoreStatus",
    printcolumn = r#"{"name":"Succeeded","type":"boolean","jsonPath":".status.succeeded"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.etcdCluster.name"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.restoredRevision"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason"}"#,
    printcolumn = r#"{"name":"Snapshot","type":"string","jsonPath":".status.snapshot","priority":1}"#,
    printcolumn = r#"{"name":"Cluster ID","type":"string","jsonPath":".status.clusterID","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreSpec {
    /// The EtcdCluster to create (in this namespace). It must not exist: a restore never
    /// goes over an existing cluster.
    pub etcd_cluster: EtcdClusterRef,
    /// Where the snapshot is: `S3` (and S3-compatible stores).
    pub backup_storage_type: RestoreStorageType,
    /// The S3 store and the snapshot (or the prefix of snapshots) in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3RestoreSource>,
    /// The new cluster's spec (size, version, pod policy, TLS). Unset: 3 members on the
    /// etcd version the snapshot was taken with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_spec: Option<EtcdClusterSpec>,
}

/// The EtcdCluster a restore makes (CoreOS).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterRef {
    /// Its name.
    #[schemars(
        length(min = 1, max = 56),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
}

/// Kinds of store a restore reads from.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RestoreStorageType {
    /// Amazon S3 or an S3-compatible store (`s3.endpoint`).
    #[default]
    S3,
}

/// A snapshot in an S3 (or S3-compatible) store (CoreOS names).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3RestoreSource {
    /// `<bucket>/<key>` of one snapshot, or `<bucket>/<prefix>`: then the newest snapshot
    /// under the prefix whose metadata object verifies.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$"))]
    pub path: String,
    /// Secret with the credentials: `accessKey` and `secretKey` (optionally
    /// `sessionToken` and `region`), or the AWS `credentials` file (profile `default`)
    /// with an optional `config` file for the region.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub aws_secret: String,
    /// URL of an S3-compatible store; unset: AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://[^/\s]+/?$"))]
    pub endpoint: Option<String>,
    /// Address buckets in the path (`<endpoint>/<bucket>/...`) instead of as a subdomain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force_path_style: bool,
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
    pub s3: S3RestoreSource,
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
