//! History compaction as data: when the operator compacts a cluster's history, and to
//! which revision.
//!
//! etcd keeps every revision of every key until its history is compacted, so a cluster
//! that is written to grows without bound. Unless the user's `spec.pod.etcdEnv` sets
//! etcd's own auto-compaction (then etcd compacts by itself and the operator leaves it
//! alone), the operator compacts a converged cluster as [`Compaction`] says:
//!
//! - `Periodic` (the default, retention [`DEFAULT_COMPACTION_RETENTION`]): the operator
//!   samples the newest revision; once the sample is `retention` old it compacts to it
//!   and samples again. History kept is between one and two retentions.
//! - `Revision`: it compacts to the newest revision minus `retention` once that is past
//!   its last compaction, at most once every [`REVISION_COMPACTION_INTERVAL`].
//!
//! The sample is the actor's (a restarted operator samples anew, so its first periodic
//! compaction comes one retention after it starts); the revision last compacted to is
//! also kept in the status (`status.compaction.revision`). A cluster whose revision went
//! back below it (a recovery from a backup) is compacted anew from its own history.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::{Action, Observation};

/// How the cluster's history is compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Compaction {
    /// etcd compacts by itself: `spec.pod.etcdEnv` sets `ETCD_AUTO_COMPACTION_*`.
    ByEtcd,
    /// Keep at least `retention` of history (and at most twice that).
    Periodic {
        /// How much history to keep.
        retention: Duration,
    },
    /// Keep the newest `retention` revisions.
    Revision {
        /// How many revisions to keep.
        retention: u64,
    },
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction::Periodic {
            retention: DEFAULT_COMPACTION_RETENTION,
        }
    }
}

/// History a cluster keeps when its spec says nothing: one hour (a watch that breaks can
/// resume from where it was within it; a backup's deltas have it to catch up).
pub const DEFAULT_COMPACTION_RETENTION: Duration = Duration::from_secs(3600);

/// The least time between two `Revision` compactions (etcd's own revision compactor
/// looks this often).
pub const REVISION_COMPACTION_INTERVAL: Duration = Duration::from_secs(300);

/// The newest revision the operator sampled, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RevisionSample {
    /// The revision.
    pub revision: i64,
    /// When it was sampled.
    #[serde(skip)]
    pub at: Instant,
}

/// Where the operator's compaction stands: carried from one tick to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct CompactionProgress {
    /// The newest revision last sampled.
    pub sample: Option<RevisionSample>,
    /// The revision the operator last compacted the history to (the durable copy is
    /// `status.compaction.revision`).
    pub compacted: Option<i64>,
}

/// The newest revision a healthy member reports.
pub fn newest_revision(obs: &Observation) -> Option<i64> {
    obs.health
        .values()
        .filter(|h| h.is_healthy())
        .filter_map(|h| h.revision)
        .max()
}

/// The compaction due this tick, if one is: updates the sample and the revision last
/// compacted to in `state`. Read only on a tick that changes no member. `urgent` (under
/// NOSPACE) lifts the least time between two `Revision` compactions; a `Periodic` one
/// never keeps less than its retention.
pub(super) fn due(
    state: &mut CompactionProgress,
    obs: &Observation,
    compaction: Compaction,
    urgent: bool,
) -> Option<Action> {
    let newest = newest_revision(obs)?;
    let now = obs.now;
    let sample = RevisionSample {
        revision: newest,
        at: now,
    };
    state.compacted = state.compacted.max(obs.recorded.compacted);
    if state.compacted.is_some_and(|done| done > newest) {
        // The cluster's history went back (a recovery from a backup): start again.
        state.compacted = None;
    }
    let target = match compaction {
        Compaction::ByEtcd => {
            state.sample = None;
            return None;
        }
        Compaction::Periodic { retention } => {
            let previous = state.sample.filter(|s| s.revision <= newest);
            let Some(previous) = previous else {
                state.sample = Some(sample);
                return None;
            };
            if now.duration_since(previous.at) < retention {
                state.sample = Some(previous);
                return None;
            }
            previous.revision
        }
        Compaction::Revision { retention } => {
            let recent = !urgent
                && state
                    .sample
                    .is_some_and(|s| now.duration_since(s.at) < REVISION_COMPACTION_INTERVAL);
            let target = newest.saturating_sub(i64::try_from(retention).unwrap_or(i64::MAX));
            if recent || target < 1 || state.compacted.is_some_and(|done| done >= target) {
                return None;
            }
            target
        }
    };
    state.sample = Some(sample);
    if target < 1 || state.compacted.is_some_and(|done| done >= target) {
        return None;
    }
    state.compacted = Some(target);
    Some(Action::Compact { revision: target })
}
