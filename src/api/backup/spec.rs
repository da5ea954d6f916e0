//! `EtcdBackup.spec`: the CoreOS v1beta2 fields, unchanged in name and meaning, plus
//! `schedule`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::status::EtcdBackupStatus;
use crate::api::s3::S3Store;

/// Snapshots of an etcd cluster, once or on a schedule, to an object store.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdBackup",
    plural = "etcdbackups",
    shortname = "etcdbackup",
    namespaced,
    status = "EtcdBackupStatus",
    printcolumn = r#"{"name":"Succeeded","type":"boolean","jsonPath":".status.succeeded"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.etcdRevision"}"#,
    printcolumn = r#"{"name":"Last Success","type":"date","jsonPath":".status.lastSuccessDate"}"#,
    printcolumn = r#"{"name":"Next","type":"string","jsonPath":".status.nextBackupTime"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.Reason","priority":1}"#,
    printcolumn = r#"{"name":"Path","type":"string","jsonPath":".status.lastBackupPath","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupSpec {
    /// Name of an EtcdCluster in the same namespace to back up. Exactly one of
    /// `clusterName` and `etcdEndpoints` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub cluster_name: Option<String>,
    /// Client URLs of the etcd cluster to back up (CoreOS): the members are found from
    /// them, and the snapshot is taken from a healthy follower when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 16),
        inner(regex(pattern = r"^https?://[^/\s]+/?$"))
    )]
    pub etcd_endpoints: Option<Vec<String>>,
    /// Where backups go: `S3` (and S3-compatible stores), `GCS` or `ABS`.
    pub storage_type: BackupStorageType,
    /// When backups are taken and how many are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_policy: Option<BackupPolicy>,
    /// Cron schedule (5 fields, or 6 with seconds first; `@hourly`, `@daily`...) in UTC: an
    /// alternative to `backupPolicy.backupIntervalInSecond`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(@(yearly|annually|monthly|weekly|daily|hourly)|\S+(\s+\S+){4,5})$"
    ))]
    pub schedule: Option<String>,
    /// The S3 store, when `storageType` is `S3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Store>,
    /// The Google Cloud Storage store, when `storageType` is `GCS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsBackupSource>,
    /// The Azure Blob Storage store, when `storageType` is `ABS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs: Option<AbsBackupSource>,
    /// Secret in this namespace with the etcd client certificate (`etcd-client.crt`,
    /// `etcd-client.key`, and `etcd-client-ca.crt`, the CA the members' server
    /// certificates are verified against): the members are dialed over https with it.
    /// Unset with `clusterName` of a TLS cluster: the operator's own client Secret of that
    /// cluster is used. Needed with `https` `etcdEndpoints`.
    #[serde(
        rename = "clientTLSSecret",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub client_tls_secret: Option<String>,
    /// Skip verifying the members' TLS certificates (CoreOS). Not supported: members are
    /// always verified, and a backup that sets it to true is refused
    /// (`InsecureSkipVerifyUnsupported`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
}

/// Kinds of object store.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BackupStorageType {
    /// Amazon S3 or an S3-compatible store (`s3.endpoint`).
    #[default]
    S3,
    /// Google Cloud Storage.
    #[serde(rename = "GCS")]
    Gcs,
    /// Azure Blob Storage.
    #[serde(rename = "ABS")]
    Abs,
}

/// When backups are taken and how many are kept (CoreOS names).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupPolicy {
    /// Deadline of one whole backup (snapshot, upload, verification, retention), in
    /// seconds. 0 or unset: 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub timeout_in_second: Option<i64>,
    /// Seconds between backups; 0 or unset: one backup only (unless `schedule` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backup_interval_in_second: Option<i64>,
    /// How many backups of this cluster under the path are kept (the newest); 0 or
    /// unset: all. Older ones are deleted only after a new one was verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_backups: Option<i32>,
}

/// A Google Cloud Storage store (CoreOS names).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsBackupSource {
    /// `<bucket>/<prefix>`.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9](/.*)?$"))]
    pub path: String,
    /// Secret with a service account key in `credentials.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp_secret: Option<String>,
}

/// An Azure Blob Storage store (CoreOS names).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbsBackupSource {
    /// `<container>/<prefix>`.
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]{1,61}[a-z0-9])(/.*)?$"))]
    pub path: String,
    /// Secret with `storage-account` and `storage-key`.
    pub abs_secret: String,
}

impl EtcdBackupSpec {
    /// The policy, or the default one (one backup, keep all, default timeout).
    pub fn policy(&self) -> BackupPolicy {
        self.backup_policy.clone().unwrap_or_default()
    }
}
