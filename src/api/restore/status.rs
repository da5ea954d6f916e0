//! `EtcdRestore.status`: the CoreOS fields (`succeeded`, `reason`) plus the snapshot used,
//! the restored revision, the new cluster's ID and conditions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::ClusterCondition;

// Every field is always serialized (no `skip_serializing_if`): the operator writes status
// with a merge patch, in which an omitted field would keep its stale value.
/// What the operator did for an EtcdRestore.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreStatus {
    /// The cluster was created from the snapshot and runs with every member.
    #[serde(default)]
    pub succeeded: bool,
    /// Why the restore was refused or is not done yet (CamelCase); empty after a success.
    #[serde(default)]
    pub reason: String,
    /// `Restoring`, `Succeeded`, `Refused` (nothing was touched; a changed spec tries
    /// again) or `Failed` (retried).
    #[serde(default)]
    pub phase: String,
    /// What happened, for people.
    #[serde(default)]
    pub message: String,
    /// The snapshot used: `<bucket>/<key>`.
    #[serde(default)]
    pub snapshot: String,
    /// sha256 (hex) of the snapshot, as verified.
    #[serde(default)]
    pub sha256: String,
    /// etcd version the snapshot was taken with.
    #[serde(default)]
    pub etcd_version: String,
    /// The snapshot's revision: the new cluster's data is the old one's at this revision.
    #[serde(default)]
    pub restored_revision: i64,
    /// etcd's ID of the new cluster (hex), once a member answered.
    #[serde(rename = "clusterID", default)]
    pub cluster_id: String,
    /// `Succeeded`.
    #[serde(default)]
    pub conditions: Vec<ClusterCondition>,
    /// `metadata.generation` this status answers.
    #[serde(default)]
    pub observed_generation: Option<i64>,
}
