//! `EtcdCluster.status`: the CoreOS fields plus `observedGeneration` and current conditions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// Every field is always serialized (no `skip_serializing_if`): the operator writes status
// with a merge patch, in which an omitted field would keep its stale value.
/// What the operator last observed and did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// Bootstrapping, Running, Scaling, Upgrading, Recovering, Paused or Blocked.
    #[serde(default)]
    pub phase: String,
    /// Reason of the operator's last decision.
    #[serde(default)]
    pub reason: String,
    /// Message of the operator's last decision.
    #[serde(default)]
    pub message: String,
    /// The operator is not changing the cluster (`spec.paused`).
    #[serde(default)]
    pub control_paused: bool,
    /// Available, Progressing and Degraded.
    #[serde(default)]
    pub conditions: Vec<ClusterCondition>,
    /// Members in etcd's member list.
    #[serde(default)]
    pub size: i32,
    /// Members that are started and healthy (for `kubectl get`).
    #[serde(default)]
    pub ready_members: i32,
    /// Name of the client Service.
    #[serde(default)]
    pub service_name: String,
    /// Port of the client Service.
    #[serde(default)]
    pub client_port: i32,
    /// Members by readiness.
    #[serde(default)]
    pub members: MembersStatus,
    /// Oldest etcd version a member runs.
    #[serde(default)]
    pub current_version: String,
    /// Version the spec asks for.
    #[serde(default)]
    pub target_version: String,
    /// `metadata.generation` this status answers.
    #[serde(default)]
    pub observed_generation: Option<i64>,
}

/// Member names by readiness.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembersStatus {
    /// Started, healthy members.
    #[serde(default)]
    pub ready: Vec<String>,
    /// Members not started, not answering, or without a pod.
    #[serde(default)]
    pub unready: Vec<String>,
}

/// A status condition.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    /// Available, Progressing or Degraded.
    pub r#type: String,
    /// "True" or "False".
    pub status: String,
    /// CamelCase reason.
    #[serde(default)]
    pub reason: String,
    /// For people.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    #[serde(default)]
    pub last_transition_time: Option<String>,
}

impl EtcdClusterStatus {
    /// Whether this status shows the cluster had members (so it must never be bootstrapped
    /// again, even by a restarted operator).
    pub fn had_members(&self) -> bool {
        !self.members.ready.is_empty() || !self.members.unready.is_empty()
    }
}
