//! What a recovery from lost quorum is asked as and recorded as: the annotations, the
//! policy and `spec.recovery`, and the fenced record in the status. A leaf of the
//! lifecycle's vocabulary; the decisions are in `recovery.rs`.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::SnapshotSource;
use super::Version;

/// The annotation on an EtcdCluster that triggers a recovery whatever `spec.recovery`
/// says: `FromSurvivor` or `FromBackup`. The operator removes it when it records the
/// recovery.
pub const RECOVER_ANNOTATION: &str = "etcd.database.coreos.com/recover";

/// The annotation on an EtcdCluster that gives up its unfinished recovery: its value must
/// be the record's incident (`status.recovery.incident`), so that it can never give up a
/// later one. The operator marks the record finished and abandoned, and removes the
/// annotation.
pub const ABANDON_RECOVERY_ANNOTATION: &str = "etcd.database.coreos.com/abandon-recovery";

/// How long a permanent loss of quorum lasts before a recovery may start, by default.
pub const DEFAULT_QUORUM_LOSS: Duration = Duration::from_secs(300);

/// How long a recorded recovery may take before it is reported `RecoveryFailed`, by
/// default.
pub const DEFAULT_RECOVERY_DEADLINE: Duration = Duration::from_secs(900);

/// What the operator does about a permanent loss of quorum (`spec.recovery.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum RecoveryPolicy {
    /// Report only; a recovery starts when the user sets [`RECOVER_ANNOTATION`].
    #[default]
    Manual,
    /// Restart the surviving member with the highest raft index alone, then grow back.
    FromSurvivor,
    /// Restore the newest verified backup in place, when no member keeps any data.
    FromBackup,
    /// Start a new, empty seed in place, when no member keeps any data: the user accepts
    /// that the data is gone. Only ever asked for once, by [`RECOVER_ANNOTATION`]; never
    /// a standing policy.
    Reseed,
}

impl RecoveryPolicy {
    /// The policy as the spec and the annotation write it.
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryPolicy::Manual => "Manual",
            RecoveryPolicy::FromSurvivor => "FromSurvivor",
            RecoveryPolicy::FromBackup => "FromBackup",
            RecoveryPolicy::Reseed => "Reseed",
        }
    }

    /// The policy a spec or annotation value names, if any.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Manual,
            Self::FromSurvivor,
            Self::FromBackup,
            Self::Reseed,
        ]
        .into_iter()
        .find(|p| p.as_str() == text.trim())
    }
}

impl fmt::Display for RecoveryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.recovery` and the recovery annotation, as the lifecycle decides on them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecoverySpec {
    /// `spec.recovery.policy`.
    pub policy: RecoveryPolicy,
    /// The recovery [`RECOVER_ANNOTATION`] asks for (it wins over `policy`).
    pub requested: Option<RecoveryPolicy>,
    /// `spec.recovery.quorumLossSeconds`: how long a permanent loss lasts before a
    /// recovery may start.
    pub quorum_loss: Duration,
    /// `spec.recovery.deadlineSeconds`: how long a recorded recovery may take before it
    /// is reported `RecoveryFailed` and nothing more is done for it.
    pub deadline: Duration,
    /// The incident [`ABANDON_RECOVERY_ANNOTATION`] gives up, as written.
    pub abandon: Option<String>,
}

impl Default for RecoverySpec {
    fn default() -> Self {
        RecoverySpec {
            policy: RecoveryPolicy::Manual,
            requested: None,
            quorum_loss: DEFAULT_QUORUM_LOSS,
            deadline: DEFAULT_RECOVERY_DEADLINE,
            abandon: None,
        }
    }
}

impl RecoverySpec {
    /// The policy in force: the annotation's, else the spec's (never `Reseed`, which only
    /// the annotation asks for).
    pub fn effective(&self) -> RecoveryPolicy {
        match (self.requested, self.policy) {
            (Some(requested), _) => requested,
            (None, RecoveryPolicy::Reseed) => RecoveryPolicy::Manual,
            (None, policy) => policy,
        }
    }
}

/// The durable record of one recovery (`status.recovery`), written before it acts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRecord {
    /// The incident: the etcd cluster and the members it lost. One incident is recovered
    /// at most once.
    pub incident: String,
    /// `FromSurvivor` or `FromBackup`.
    pub policy: RecoveryPolicy,
    /// The voting members that were gone with their data.
    pub lost: Vec<String>,
    /// `FromSurvivor`: the member restarted alone.
    pub survivor: Option<String>,
    /// `FromSurvivor`: the survivor's raft index when it was chosen.
    pub raft_index: Option<u64>,
    /// `FromSurvivor`: the etcd version the survivor ran.
    pub version: Option<String>,
    /// `FromBackup`: the snapshot restored.
    pub backup: Option<SnapshotSource>,
    /// The newest revision a member was known to have before the loss.
    pub last_revision: Option<i64>,
    /// The revision the cluster came back at, once it did.
    pub restored_revision: Option<i64>,
    /// `FromBackup`: the new seed's name (and pod).
    pub seed: Option<String>,
    /// `FromBackup`: the new seed's `--initial-cluster-token`.
    pub token: Option<String>,
    /// The etcd cluster ID after the recovery (`FromSurvivor` keeps the old one; a
    /// restore makes a new one, known once the seed answers).
    pub cluster_id: Option<u64>,
    /// `metadata.uid` of the EtcdCluster the record was written for: a record found on
    /// another object (one deleted and created again, a status restored from a copy) is
    /// never carried out. `None` in records written before it was kept.
    pub uid: Option<String>,
    /// The cluster came back, or the user gave the recovery up: a later loss is a new
    /// incident.
    pub finished: bool,
    /// The user gave this recovery up ([`ABANDON_RECOVERY_ANNOTATION`]) before it
    /// finished: its incident may be recovered again.
    pub abandoned: bool,
}

impl RecoveryRecord {
    /// The cluster ID members must answer with: the recovered cluster's, when this record
    /// says (`None` with a restore under way: the new seed's, whatever it is).
    pub(crate) fn expected_cluster_id(&self) -> Option<Option<u64>> {
        match (self.cluster_id, &self.seed) {
            (Some(id), _) => Some(Some(id)),
            (None, Some(_)) => Some(None),
            (None, None) => None,
        }
    }
}

/// The oldest etcd of each minor version whose `--force-new-cluster` this project has
/// seen keep every committed key for the members that join afterwards
/// (`tests/recovery_real_etcd.rs`). Older ones are refused: etcd 3.4.23 was seen to give a
/// new member one key fewer than the survivor serves (etcd-io/etcd#14009, and the later
/// fixes of etcd-io/etcd#20009 in 3.5 and 3.6).
pub const FORCE_NEW_CLUSTER_VERIFIED: &[(u64, u64, u64)] = &[(3, 5, 35), (3, 6, 16)];

/// Whether etcd `version` may restart a survivor with `--force-new-cluster`: at least the
/// verified release of its minor version ([`FORCE_NEW_CLUSTER_VERIFIED`]), or a later
/// minor than any verified one.
pub fn force_new_cluster_is_safe(version: &Version) -> bool {
    let v = (version.major, version.minor, version.patch);
    let newest = FORCE_NEW_CLUSTER_VERIFIED.iter().max();
    FORCE_NEW_CLUSTER_VERIFIED
        .iter()
        .any(|&(major, minor, patch)| (v.0, v.1) == (major, minor) && v.2 >= patch)
        || newest.is_some_and(|&(major, minor, _)| (v.0, v.1) > (major, minor))
}

/// The fence of every recovery: whether `new` may be written over `stored` (the status's
/// record, read fresh). A recovery starts only when none is under way and its incident
/// was never recovered; it finishes only the unfinished recovery of its own incident.
pub fn check_fence(
    stored: Option<&RecoveryRecord>,
    new: &RecoveryRecord,
) -> Result<(), FenceRefusal> {
    match (stored, new.finished) {
        (None, false) => Ok(()),
        (Some(old), false) if old.finished && (old.abandoned || old.incident != new.incident) => {
            Ok(())
        }
        (Some(old), false) if !old.finished => Err(FenceRefusal::Unfinished {
            policy: old.policy,
            incident: old.incident.clone(),
        }),
        (Some(old), false) => Err(FenceRefusal::RecoveredOnce {
            incident: old.incident.clone(),
        }),
        (Some(old), true) if !old.finished && old.incident == new.incident => Ok(()),
        (_, true) => Err(FenceRefusal::NothingToFinish {
            incident: new.incident.clone(),
        }),
    }
}

/// Why [`check_fence`] refuses to record a recovery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceRefusal {
    /// Another recovery is under way.
    #[error("refusing to start a recovery: the {policy} recovery of {incident:?} has not finished")]
    Unfinished {
        /// Its policy.
        policy: RecoveryPolicy,
        /// Its incident.
        incident: String,
    },
    /// This incident was recovered already: a recovery runs at most once per incident.
    #[error("refusing to start a recovery: incident {incident:?} was recovered once already")]
    RecoveredOnce {
        /// The incident.
        incident: String,
    },
    /// A finish for a recovery the status does not hold as unfinished.
    #[error(
        "refusing to finish recovery {incident:?}: the status holds no unfinished recovery of it"
    )]
    NothingToFinish {
        /// The incident of the finish.
        incident: String,
    },
}
