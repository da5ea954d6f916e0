//! `EtcdCluster.status`: the CoreOS fields plus `observedGeneration` and current conditions.

use etcd_operator_core::lifecycle::{BootstrapRecord, Recorded};

use super::recovery::RecoveryStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// Every field is always serialized (no `skip_serializing_if`): the operator writes status
// with a merge patch, in which an omitted field would keep its stale value.
/// What the operator last observed and did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// Bootstrapping, Running, Scaling, Upgrading, Recovering, Restarting, Paused or
    /// Blocked.
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
    /// The fullest member's backend, in percent of its quota (`kubectl get etcd -o
    /// wide`), once a member reported its size.
    #[serde(default)]
    pub quota_used_percent: Option<i64>,
    /// `metadata.generation` this status answers.
    #[serde(default)]
    pub observed_generation: Option<i64>,
    /// The cluster's one bootstrap: its seed and token, written before the seed pod is
    /// created, and its etcd cluster ID once a member answered. Never cleared (so it is
    /// left out of a patch rather than written empty): a cluster with a record is never
    /// bootstrapped again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<BootstrapStatus>,
    /// The last recovery from a permanent loss of quorum (`spec.recovery`): written by the
    /// recovery itself before it acts, and when the cluster is back; never written empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryStatus>,
    /// The newest revision a member reported: the last known revision a recovery from a
    /// backup measures its loss against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// An etcd version an upgraded member could not run: the upgrade to it is halted
    /// (`UpgradeFailed`) while `spec.version` asks for it.
    #[serde(default)]
    pub failed_version: Option<String>,
    /// TLS, when the spec asks for it: the mode, each certificate in use with its expiry
    /// and planned renewal, and the next renewal.
    #[serde(default)]
    pub tls: Option<TlsStatus>,
    /// How the cluster's history is compacted, and the operator's last compaction.
    #[serde(default)]
    pub compaction: Option<CompactionStatus>,
}

/// `status.compaction`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionStatus {
    /// `Operator` (by `spec.compaction` or its default) or `EtcdEnv` (etcd compacts by
    /// itself, as `spec.pod.etcdEnv` says).
    #[serde(default)]
    pub source: String,
    /// `Periodic` or `Revision` (empty with `EtcdEnv`).
    #[serde(default)]
    pub mode: String,
    /// The history kept: a duration (`1h`) or a number of revisions.
    #[serde(default)]
    pub retention: String,
    /// The revision the operator last compacted the history to.
    #[serde(default)]
    pub revision: Option<i64>,
    /// When it did (RFC 3339).
    #[serde(default)]
    pub time: Option<String>,
}

/// `status.tls`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsStatus {
    /// `Static` (the user's Secrets) or `Auto` (made and renewed by the operator).
    #[serde(default)]
    pub mode: String,
    /// The certificates in use (empty while they cannot be used: see the reason).
    #[serde(default)]
    pub certificates: Vec<CertificateStatus>,
    /// When the operator renews a certificate next (RFC 3339), in `Auto` mode.
    #[serde(default)]
    pub next_rotation: Option<String>,
    /// The step of the CA rotation in progress (`TrustNewCA`, `ReissueLeaves`,
    /// `DropOldCA`); absent when none is.
    #[serde(default)]
    pub ca_rotation: Option<String>,
}

/// One certificate in use.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateStatus {
    /// The Secret holding it.
    pub secret: String,
    /// Its key in the Secret.
    pub key: String,
    /// When it expires (RFC 3339).
    pub not_after: String,
    /// When the operator renews it (RFC 3339); absent for certificates it does not renew.
    #[serde(default)]
    pub renew_at: Option<String>,
}

/// `status.bootstrap`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapStatus {
    /// Name of the seed member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// The seed's `--initial-cluster-token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// etcd's cluster ID (hexadecimal, as etcdctl prints it), once a member answered.
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
}

impl BootstrapStatus {
    /// The status form of a bootstrap record.
    pub(crate) fn from_record(record: &BootstrapRecord) -> Self {
        BootstrapStatus {
            seed: record.seed.clone(),
            token: record.token.clone(),
            cluster_id: record.cluster_id.map(|id| format!("{id:x}")),
        }
    }

    /// The record this status holds. A cluster ID that does not parse is kept as an
    /// unknown but existing cluster (never as "no cluster").
    pub(crate) fn to_record(&self) -> BootstrapRecord {
        BootstrapRecord {
            seed: self.seed.clone(),
            token: self.token.clone(),
            cluster_id: self
                .cluster_id
                .as_deref()
                .map(|id| u64::from_str_radix(id, 16).unwrap_or(u64::MAX)),
        }
    }
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
    /// Every member etcd lists, by name (empty while the list cannot be read).
    #[serde(default)]
    pub details: Vec<MemberStatus>,
}

/// One member of `status.members.details`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Member and pod name.
    pub name: String,
    /// etcd member ID (hexadecimal, as etcdctl prints it).
    #[serde(rename = "id")]
    pub id: String,
    /// `Voter` or `Learner`.
    pub role: String,
    /// Started and healthy.
    pub ready: bool,
    /// Restarts of its etcd container in place.
    pub restarts: i32,
    /// Its PersistentVolumeClaim, when its data is on one.
    #[serde(default)]
    pub persistent_volume_claim: Option<String>,
    /// The size of its backend database, in bytes, as it last reported.
    #[serde(default)]
    pub db_size_bytes: Option<i64>,
    /// The part of the backend in use, in bytes (the rest is freed by a
    /// defragmentation).
    #[serde(default)]
    pub db_size_in_use_bytes: Option<i64>,
    /// Its backend quota, in bytes.
    #[serde(default)]
    pub quota_backend_bytes: Option<i64>,
    /// The alarms etcd raised for it: `NOSPACE`, `CORRUPT`.
    #[serde(default)]
    pub alarms: Vec<String>,
    /// The revision of its key-value store (the history before `status.compaction.revision`
    /// is compacted on every member).
    #[serde(default)]
    pub revision: Option<i64>,
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
    /// What the lifecycle reads back from this status on every tick.
    pub fn recorded(&self) -> Recorded {
        Recorded {
            bootstrap: self.bootstrap.as_ref().map(BootstrapStatus::to_record),
            members: self
                .members
                .ready
                .iter()
                .chain(&self.members.unready)
                .cloned()
                .collect(),
            reason: self.reason.clone(),
            failed_version: self.failed_version.clone(),
            recovery: self.recovery.as_ref().map(RecoveryStatus::to_record),
            revision: self.revision,
            storage: self
                .conditions
                .iter()
                .find(|c| c.r#type == "Storage")
                .map(|c| c.reason.clone()),
            compacted: self.compaction.as_ref().and_then(|c| c.revision),
        }
    }
}
