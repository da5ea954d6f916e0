//! The lifecycle state of one cluster: its phase plus the timers deadlines are measured from.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::{CompactionProgress, Divergence, Reason, Version};

/// Where a cluster is in its life. Derived anew on every tick from the observation, so an
/// operator restart loses nothing but timers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "phase")]
pub enum Phase {
    /// A new actor before its first decision: it does not know yet whether it creates a
    /// cluster or adopts one that exists.
    Starting,
    /// No member list yet: the seed is being created or started.
    Bootstrapping,
    /// Size and version match the spec and every member is healthy.
    Running,
    /// Adding or removing members to reach `to`.
    Scaling {
        /// Started voting members now.
        from: usize,
        /// Members wanted.
        to: usize,
    },
    /// Moving members, one at a time, to a new version.
    Upgrading {
        /// Oldest version still running.
        from: Version,
        /// Target version.
        to: Version,
    },
    /// Replacing a dead, unhealthy or never-started member.
    Recovering,
    /// Giving members, one at a time, pods built from a changed pod template
    /// (`spec.pod`, `spec.repository`).
    Restarting,
    /// `spec.paused`: observing and reporting only.
    Paused,
    /// Cannot proceed safely; waits for the cluster or the user. Nothing is deleted.
    Blocked {
        /// Why.
        reason: Reason,
    },
}

impl Phase {
    /// The phase name shown in `status.phase` and `kubectl get etcd`.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Starting => "Starting",
            Phase::Bootstrapping => "Bootstrapping",
            Phase::Running => "Running",
            Phase::Scaling { .. } => "Scaling",
            Phase::Upgrading { .. } => "Upgrading",
            Phase::Recovering => "Recovering",
            Phase::Restarting => "Restarting",
            Phase::Paused => "Paused",
            Phase::Blocked { .. } => "Blocked",
        }
    }

    /// Whether the operator is in the middle of changing the cluster.
    pub(crate) fn is_progressing(&self) -> bool {
        matches!(
            self,
            Phase::Bootstrapping
                | Phase::Scaling { .. }
                | Phase::Upgrading { .. }
                | Phase::Recovering
                | Phase::Restarting
        )
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Scaling { from, to } => write!(f, "Scaling({from}->{to})"),
            Phase::Upgrading { from, to } => write!(f, "Upgrading({from}->{to})"),
            Phase::Blocked { reason } => write!(f, "Blocked({})", reason.as_str()),
            other => f.write_str(other.name()),
        }
    }
}

/// Deadlines after which the lifecycle gives up on a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// A member added with `member add` must have started within this time, else it is
    /// removed (a member that never starts makes every later change risky).
    pub unstarted_member: Duration,
    /// A started member whose pod lives but that does not answer for this long is replaced.
    pub unhealthy_member: Duration,
    /// A member whose image was upgraded must be healthy on the new version within this
    /// time, else the upgrade halts and the member is rolled back.
    pub upgraded_member: Duration,
    /// In a rolling restart, how long every member's pod must have been Ready with its
    /// address published before the next member goes. A restarted member's new pod has a
    /// new address, and the cluster DNS may answer its name with the old one (or none)
    /// for its TTL: a member still dialing the old address cannot reach it, and when the
    /// next member goes, the members left may not form a quorum. At least the cluster
    /// DNS's TTL (CoreDNS's kubernetes plugin: 5 s by default; kubeadm sets 30 s).
    pub restart_settle: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            unstarted_member: Duration::from_secs(90),
            unhealthy_member: Duration::from_secs(120),
            upgraded_member: Duration::from_secs(60),
            restart_settle: Duration::from_secs(30),
        }
    }
}

/// The lifecycle state carried from one tick to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct State {
    /// Current phase.
    pub phase: Phase,
    /// The etcd cluster ID this actor has seen answer (the durable copy is the status's
    /// bootstrap record; this one covers a status write that has not landed yet).
    pub cluster_id: Option<u64>,
    /// When each started member was first seen unhealthy (cleared when healthy again).
    #[serde(skip)]
    pub unhealthy_since: BTreeMap<u64, Instant>,
    /// When each added-but-not-started member was first seen.
    #[serde(skip)]
    pub unstarted_since: BTreeMap<u64, Instant>,
    /// When each pod without an etcd member was first seen.
    #[serde(skip)]
    pub orphan_since: BTreeMap<String, Instant>,
    /// A version an upgraded member could not run: the upgrade to it is halted (the
    /// durable copy is `status.failedVersion`, kept while the spec asks for it).
    pub failed_version: Option<Version>,
    /// When each upgraded pod (one with an upgrade mark) was first seen not yet healthy
    /// on its new version.
    #[serde(skip)]
    pub upgrade_since: BTreeMap<String, Instant>,
    /// When a permanent loss of quorum (voting members gone with their data) was first
    /// seen; cleared as soon as it is not seen. A recovery waits
    /// `spec.recovery.quorumLossSeconds` from here.
    #[serde(skip)]
    pub quorum_lost_since: Option<Instant>,
    /// The incident of the unfinished recorded recovery this actor carries out, and when
    /// it first saw it (an operator restart starts the clock again: the deadline is a
    /// lower bound). `spec.recovery.deadlineSeconds` counts from here.
    #[serde(skip)]
    pub recovery_since: Option<(String, Instant)>,
    /// Since when every member's pod has been seen Ready with its address published
    /// (cleared when one is not, when no member list is read, and by each restart of a
    /// rolling restart); a rolling restart's next member waits
    /// [`Deadlines::restart_settle`] from here.
    #[serde(skip)]
    pub settled_since: Option<Instant>,
    /// Where the operator's compaction of the history stands (see
    /// [`compaction`](super::compaction)).
    pub compaction: CompactionProgress,
    /// When the operator last defragmented each member (see
    /// [`defragmentation`](super::defragmentation)).
    #[serde(skip)]
    pub defragmented: BTreeMap<u64, Instant>,
    /// When the members' hashes were last compared (see
    /// [`consistency`](super::consistency)).
    #[serde(skip)]
    pub hashes_checked: Option<Instant>,
    /// Members whose data the last comparison found to differ: the cluster changes in no
    /// way until a comparison finds them equal again.
    pub divergence: Option<Divergence>,
}

impl Default for State {
    fn default() -> Self {
        State {
            phase: Phase::Starting,
            cluster_id: None,
            failed_version: None,
            unhealthy_since: BTreeMap::new(),
            unstarted_since: BTreeMap::new(),
            orphan_since: BTreeMap::new(),
            upgrade_since: BTreeMap::new(),
            quorum_lost_since: None,
            recovery_since: None,
            settled_since: None,
            compaction: CompactionProgress::default(),
            defragmented: BTreeMap::new(),
            hashes_checked: None,
            divergence: None,
        }
    }
}
