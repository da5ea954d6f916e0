//! The values that cross the ports: what the actors ask of etcd and Kubernetes and what
//! they get back, with the errors they act on. The traits themselves (`EtcdApi`,
//! `ClusterApi`) are in `etcd_operator_actors::ports`; the real implementations in the
//! operator crate.

use serde::Serialize;

pub use crate::api_error::{ApiError, ApiErrorKind};
use crate::lifecycle::{MemberView, PodView, Recorded, SnapshotSource, Version};

/// Declares [`EtcdErrorKind`], its metric labels and the list of every kind in one place.
macro_rules! etcd_error_kinds {
    ($( $(#[$doc:meta])* $variant:ident = $label:literal ),* $(,)?) => {
        /// What kind of failure an etcd call met; decisions and retries depend on it. The
        /// adapter classifies once, from the gRPC status code and etcd's own error
        /// descriptions.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
        pub enum EtcdErrorKind {
            $( $(#[$doc])* $variant, )*
        }

        impl EtcdErrorKind {
            /// Every kind (for tests that must cover them all).
            #[cfg(test)]
            pub(crate) const ALL: &[EtcdErrorKind] = &[$( EtcdErrorKind::$variant ),*];

            /// A stable snake_case name, for metric labels.
            pub fn metric_label(self) -> &'static str {
                match self {
                    $( EtcdErrorKind::$variant => $label, )*
                }
            }
        }
    };
}

etcd_error_kinds! {
    /// No endpoint could be reached, or etcd cannot serve the call right now (no leader,
    /// leader changed, the connection broke).
    Unavailable = "unavailable",
    /// The call did not finish within its deadline.
    Timeout = "timeout",
    /// `etcdserver: unhealthy cluster`: etcd refuses membership changes until every
    /// member has been connected for a while (about 5 s). Retry on a later tick.
    UnhealthyCluster = "unhealthy_cluster",
    /// A learner cannot be promoted before it has caught up with the leader.
    LearnerNotReady = "learner_not_ready",
    /// etcd allows one learner at a time.
    TooManyLearners = "too_many_learners",
    /// The member ID is not in the cluster.
    MemberNotFound = "member_not_found",
    /// Anything else etcd refused.
    Rejected = "rejected",
}

/// An etcd call that failed, as a value the Cluster actor reasons about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{message}")]
pub struct EtcdError {
    /// Classification.
    pub kind: EtcdErrorKind,
    /// The error as etcd or the transport said it, for people.
    pub message: String,
}

impl EtcdError {
    /// An error of `kind`.
    pub fn new(kind: EtcdErrorKind, message: impl Into<String>) -> Self {
        EtcdError {
            kind,
            message: message.into(),
        }
    }

    /// A call that ran out of time.
    pub fn timeout(what: &str, after: std::time::Duration) -> Self {
        EtcdError::new(
            EtcdErrorKind::Timeout,
            format!("{what} timed out after {after:?}"),
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

/// A member to register with `member add`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMember {
    /// Its peer URL (by DNS name).
    pub peer_url: String,
    /// Added as a learner (etcd 3.4 and later), else as a voting member.
    pub learner: bool,
}

/// A member that `member add` registered, and the member list etcd returned with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedMember {
    /// ID of the new member.
    pub id: u64,
    /// Every member after the add, the new one included.
    pub members: Vec<MemberView>,
}

/// What a member's defragmentation did: its backend's size before and after, when the
/// member reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Defragmented {
    /// Bytes before.
    pub before: Option<u64>,
    /// Bytes after.
    pub after: Option<u64>,
}

impl Defragmented {
    /// The bytes it freed, when both sizes are known.
    pub fn freed(&self) -> Option<u64> {
        Some(self.before?.saturating_sub(self.after?))
    }
}

/// One of a cluster's two Services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceKind {
    /// The headless Service under the cluster's name: its members' DNS names live under it.
    Headless,
    /// `<name>-client`: the address clients use, over the voting members.
    Client,
}

impl ServiceKind {
    /// A short, bounded label (metrics, messages).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceKind::Headless => "headless",
            ServiceKind::Client => "client",
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
    /// `minAvailable` of the cluster's PodDisruptionBudget, when it exists and is ours.
    pub disruption_budget: Option<u32>,
    /// The members' PersistentVolumeClaims that are ours, by member name.
    pub claims: std::collections::BTreeMap<String, crate::lifecycle::Claim>,
    /// Their StorageClass, when there are claims and it could be read.
    pub claim_class: Option<crate::lifecycle::ClaimClass>,
    /// What the EtcdCluster's status remembers (its bootstrap record above all).
    pub recorded: Recorded,
    /// An object this cluster needs (a Service, a member pod, a PVC) exists under its name
    /// but belongs to another owner: who owns it, for people. Nothing is shared with it.
    pub name_conflict: Option<String>,
    /// Why `spec.restore` is not honoured, when it is not: the cluster was not made by an
    /// EtcdRestore of its namespace that still exists and names the same store (looked
    /// up only while the cluster has never bootstrapped).
    pub restore_problem: Option<String>,
    /// The cluster's certificates (checked, with their expiries), when it asks for TLS.
    pub tls: crate::lifecycle::TlsObservation,
    /// Joiners' pods can be made before their `member add`: the operator's own image is
    /// known, which their gate (an init container holding etcd back until the member is
    /// added) runs.
    pub prepares_joiners: bool,
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
    /// A surviving member restarted alone on its own data with `--force-new-cluster`
    /// (a recovery from a loss of quorum): etcd drops every other member.
    ForceNewCluster,
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
    /// The snapshot the pod restores into its data directory before etcd starts (a seed
    /// of a cluster made by an EtcdRestore); `None` for every other pod.
    pub restore: Option<SnapshotSource>,
    /// A prepared joiner, made before its `member add`: the members it joins, by name (its
    /// `--initial-cluster` is them plus itself). An init container holds its etcd back
    /// until one of them lists its peer URL. `None` for every other pod.
    pub prepared_with: Option<Vec<String>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_etcd_error_kind_has_its_own_snake_case_label() {
        use EtcdErrorKind::*;
        let kinds = EtcdErrorKind::ALL;
        assert_eq!(kinds.len(), 7);
        let labels: std::collections::BTreeSet<_> =
            kinds.iter().map(|k| k.metric_label()).collect();
        assert_eq!(labels.len(), kinds.len());
        assert!(labels.iter().all(|l| is_snake_case(l)), "{labels:?}");
        assert_eq!(UnhealthyCluster.metric_label(), "unhealthy_cluster");
    }

    #[test]
    fn every_api_error_has_its_own_snake_case_label_and_keeps_its_message() {
        let m = || "what failed".to_string();
        let errors = [
            ApiError::NotFound(m()),
            ApiError::Conflict(m()),
            ApiError::Forbidden(m()),
            ApiError::Invalid(m()),
            ApiError::Unavailable(m()),
            ApiError::Other(m()),
        ];
        let labels: std::collections::BTreeSet<_> =
            errors.iter().map(ApiError::metric_label).collect();
        assert_eq!(labels.len(), errors.len());
        assert!(labels.iter().all(|l| is_snake_case(l)), "{labels:?}");
        for e in &errors {
            assert_eq!(e.message(), "what failed");
            assert_eq!(e.to_string(), "what failed");
        }
        assert_eq!(ApiError::NotFound(m()).metric_label(), "not_found");
    }

    fn is_snake_case(label: &str) -> bool {
        !label.is_empty() && label.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    }
}
