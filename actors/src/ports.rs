//! The traits through which actors reach the outside world: etcd's membership API and the
//! Kubernetes objects of one cluster. Real implementations live in the operator crate;
//! tests and benchmarks use fakes.

use async_trait::async_trait;
use serde::Serialize;

use crate::lifecycle::{BootstrapRecord, MemberHealth, MemberView, PodView, Recorded, Version};
use crate::report::StatusReport;

/// What kind of failure an etcd call met; decisions and retries depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EtcdErrorKind {
    /// No endpoint could be reached.
    Unavailable,
    /// The call did not finish within its timeout.
    Timeout,
    /// `etcdserver: unhealthy cluster`: etcd refuses membership changes until every
    /// member has been connected for a while (about 5 s). Retry on a later tick.
    UnhealthyCluster,
    /// A learner cannot be promoted before it has caught up with the leader.
    LearnerNotReady,
    /// etcd allows one learner at a time.
    TooManyLearners,
    /// The member ID is not in the cluster.
    MemberNotFound,
    /// Anything else etcd refused.
    Rejected,
}

/// An etcd call that failed, as a value the Cluster actor reasons about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{message}")]
pub struct EtcdError {
    /// Classification.
    pub kind: EtcdErrorKind,
    /// The error as etcd or the transport said it.
    pub message: String,
}

impl EtcdError {
    /// Classifies an error message from etcd or the transport.
    pub fn classify(message: impl Into<String>) -> Self {
        let message = message.into();
        let lower = message.to_ascii_lowercase();
        let kind = if lower.contains("unhealthy cluster") {
            EtcdErrorKind::UnhealthyCluster
        } else if lower.contains("in sync with leader") {
            EtcdErrorKind::LearnerNotReady
        } else if lower.contains("too many learner") {
            EtcdErrorKind::TooManyLearners
        } else if lower.contains("member not found") {
            EtcdErrorKind::MemberNotFound
        } else if lower.contains("deadline") || lower.contains("timed out") {
            EtcdErrorKind::Timeout
        } else if lower.contains("transport")
            || lower.contains("connect")
            || lower.contains("unavailable")
            || lower.contains("dns")
        {
            EtcdErrorKind::Unavailable
        } else {
            EtcdErrorKind::Rejected
        };
        EtcdError { kind, message }
    }

    /// A call that ran out of time.
    pub fn timeout(what: &str, after: std::time::Duration) -> Self {
        EtcdError {
            kind: EtcdErrorKind::Timeout,
            message: format!("{what} timed out after {after:?}"),
        }
    }

    /// Whether a later tick may simply try again.
    pub fn is_transient(&self) -> bool {
        !matches!(
            self.kind,
            EtcdErrorKind::Rejected | EtcdErrorKind::MemberNotFound
        )
    }
}

/// etcd's member list, with the cluster that answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberList {
    /// The response header's cluster ID.
    pub cluster_id: u64,
    /// Every member, voting or learner, started or not.
    pub members: Vec<MemberView>,
}

/// A member that `member add` registered, and the member list etcd returned with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedMember {
    /// ID of the new member.
    pub id: u64,
    /// Every member after the add, the new one included.
    pub members: Vec<MemberView>,
}

/// etcd's membership API (the calls `etcdctl member ...` makes), per cluster.
///
/// `endpoints` are client URLs; an implementation may use any that answers.
#[async_trait]
pub trait EtcdApi: Send + Sync + 'static {
    /// `member list`.
    async fn list(&self, endpoints: &[String]) -> Result<MemberList, EtcdError>;
    /// `member add` (as a learner when `learner`).
    async fn add(
        &self,
        endpoints: &[String],
        peer_url: &str,
        learner: bool,
    ) -> Result<AddedMember, EtcdError>;
    /// `member remove`.
    async fn remove(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError>;
    /// `member promote`.
    async fn promote(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError>;
    /// `endpoint status` of one member.
    async fn status(&self, endpoint: &str) -> Result<MemberHealth, EtcdError>;
}

/// A Kubernetes API call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{message}")]
pub struct ApiError {
    /// What failed, for people.
    pub message: String,
}

impl ApiError {
    /// Wraps any error.
    pub fn new(message: impl ToString) -> Self {
        ApiError {
            message: message.to_string(),
        }
    }
}

/// What the Kubernetes side shows of one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KubeView {
    /// The cluster's pods.
    pub pods: Vec<PodView>,
    /// Both Services exist.
    pub services_present: bool,
    /// What the EtcdCluster's status remembers (its bootstrap record above all).
    pub recorded: Recorded,
    /// An object this cluster needs (a Service, a member pod, a PVC) exists under its name
    /// but belongs to another owner: who owns it, for people. Nothing is shared with it.
    pub name_conflict: Option<String>,
}

/// How a member's pod joins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum InitialState {
    /// A new cluster: the seed.
    New {
        /// Unique `--initial-cluster-token`.
        token: String,
    },
    /// Joining an existing cluster after `member add`.
    Existing,
}

/// Everything needed to create a member's pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberPod {
    /// Member and pod name.
    pub name: String,
    /// etcd version to run.
    pub version: Version,
    /// `--initial-cluster` value.
    pub initial_cluster: String,
    /// `--initial-cluster-state` and token.
    pub state: InitialState,
    /// A voting member (not a learner): its pod serves clients from the start.
    pub voter: bool,
}

/// A new etcd image for a member's pod, and the marks that go with it (`None` removes a
/// mark).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionChange {
    /// Version to run.
    pub to: Version,
    /// The upgrade mark: the version the member ran before, until it is healthy on `to`.
    pub upgrade_from: Option<Version>,
}

/// Severity of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Something happened as intended.
    Normal,
    /// Something failed or was refused.
    Warning,
}

/// A Kubernetes Event about the EtcdCluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRecord {
    /// Normal or Warning.
    pub kind: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// What the operator did: `AddMember`, `RemoveMember`, ...
    pub action: String,
    /// For people.
    pub note: String,
    /// The member (pod) the event is about, if one: Events about different members are
    /// kept apart rather than folded into one series.
    pub member: Option<String>,
}

/// The Kubernetes objects of one cluster.
#[async_trait]
pub trait ClusterApi: Send + Sync + 'static {
    /// The cluster's pods and Services, and what its status remembers.
    async fn observe(&self) -> Result<KubeView, ApiError>;
    /// Creates the headless and client Services if missing.
    async fn ensure_services(&self) -> Result<(), ApiError>;
    /// Creates a member's pod.
    async fn create_member_pod(&self, pod: &MemberPod) -> Result<(), ApiError>;
    /// Deletes a pod; a pod already gone is not an error.
    async fn delete_pod(&self, name: &str) -> Result<(), ApiError>;
    /// Changes the etcd image of a pod in place, with its upgrade marks.
    async fn set_pod_version(&self, name: &str, change: &VersionChange) -> Result<(), ApiError>;
    /// Labels a pod as a voting member's, putting it behind the client Service.
    async fn label_voter(&self, name: &str) -> Result<(), ApiError>;
    /// Writes the EtcdCluster's status.
    async fn publish_status(&self, report: &StatusReport) -> Result<(), ApiError>;
    /// Writes a new bootstrap record into the status, before the seed it names exists.
    /// Refused when the status (read fresh, not from a cache) already holds a record: a
    /// cluster is bootstrapped once. Later observations show the record even while a
    /// cache lags behind this write.
    async fn record_bootstrap(&self, record: &BootstrapRecord) -> Result<(), ApiError>;
    /// Records an Event on the EtcdCluster.
    async fn record_event(&self, event: &EventRecord) -> Result<(), ApiError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_errors_are_classified_from_their_messages() {
        let k = |m: &str| EtcdError::classify(m).kind;
        assert_eq!(
            k("etcdserver: unhealthy cluster"),
            EtcdErrorKind::UnhealthyCluster
        );
        assert_eq!(
            k("etcdserver: can only promote a learner member which is in sync with leader"),
            EtcdErrorKind::LearnerNotReady
        );
        assert_eq!(
            k("etcdserver: too many learner members in cluster"),
            EtcdErrorKind::TooManyLearners
        );
        assert_eq!(
            k("etcdserver: member not found"),
            EtcdErrorKind::MemberNotFound
        );
        assert_eq!(
            k("transport error: connection refused"),
            EtcdErrorKind::Unavailable
        );
        assert_eq!(
            k("etcdserver: Peer URLs already exists"),
            EtcdErrorKind::Rejected
        );
    }
}
