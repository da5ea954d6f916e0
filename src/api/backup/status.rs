//! `EtcdBackup.status`: the CoreOS fields (`succeeded`, `Reason`, `etcdVersion`,
//! `etcdRevision`, `lastSuccessDate`) plus conditions, the last backup and the next run.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::ClusterCondition;

// Every field is always serialized (no `skip_serializing_if`): the operator writes status
// with a merge patch, in which an omitted field would keep its stale value.
/// What the operator last did for an EtcdBackup.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    /// The last backup attempt succeeded (snapshot stored and verified).
    #[serde(default)]
    pub succeeded: bool,
    /// Why the last attempt failed (CamelCase), empty after a success (CoreOS spells the
    /// field `Reason`).
    #[serde(rename = "Reason", default)]
    pub reason: String,
    /// What happened in the last attempt, for people.
    #[serde(default)]
    pub message: String,
    /// etcd version of the member the last good snapshot was taken from.
    #[serde(default)]
    pub etcd_version: String,
    /// Revision of the last good snapshot.
    #[serde(default)]
    pub etcd_revision: i64,
    /// When the last good snapshot was taken (RFC 3339).
    #[serde(default)]
    pub last_success_date: Option<String>,
    /// Where the last good snapshot is: `<bucket>/<key>`.
    #[serde(default)]
    pub last_backup_path: String,
    /// Bytes of the last good snapshot.
    #[serde(default)]
    pub last_backup_size: i64,
    /// sha256 (hex) of the last good snapshot as stored.
    #[serde(default)]
    pub last_backup_sha256: String,
    /// When the last attempt started (RFC 3339).
    #[serde(default)]
    pub last_attempt_time: Option<String>,
    /// When the next backup is due (RFC 3339); unset when none is (a one-shot backup that
    /// succeeded, or a spec that cannot run).
    #[serde(default)]
    pub next_backup_time: Option<String>,
    /// Attempts that failed since the last success (the retry delay grows with them).
    #[serde(default)]
    pub consecutive_failures: i32,
    /// Backups of this cluster kept under the path after the last good backup.
    #[serde(default)]
    pub backups: i32,
    /// `Succeeded` (the last attempt) and `Scheduled` (a next backup is due).
    #[serde(default)]
    pub conditions: Vec<ClusterCondition>,
    /// `metadata.generation` this status answers.
    #[serde(default)]
    pub observed_generation: Option<i64>,
}
