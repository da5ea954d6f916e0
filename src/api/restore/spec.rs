//! `EtcdRestore.spec`: the CoreOS v1beta2 fields (`etcdCluster.name`, `backupStorageType`,
//! `s3`), plus `clusterSpec`; and `EtcdCluster.spec.restore`, what a restored cluster's
//! seed is made from.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::source::RestoreStorageType;
use super::status::EtcdRestoreStatus;
use crate::api::EtcdClusterSpec;
use crate::api::s3::S3Store;

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
    pub s3: Option<S3Store>,
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
