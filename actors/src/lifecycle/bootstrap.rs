//! The bootstrap rule, in one place: a cluster is seeded once, and never again once any
//! of its members has answered.
//!
//! The fact lives in the EtcdCluster's status as a [`BootstrapRecord`]: the seed's name and
//! `--initial-cluster-token` are written there *before* the seed pod is created, and the
//! etcd cluster ID as soon as a member answers. The operator never clears it. Every tick
//! reads it back ([`Recorded`]) and [`Birth::of`] turns it into the only answer the
//! lifecycle asks: may a seed be created?

use serde::Serialize;

use super::{Membership, Observation, RecoveryRecord, State};

/// The durable record of a cluster's birth (`status.bootstrap`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootstrapRecord {
    /// Name of the seed member (and its pod), when this operator created the seed.
    pub seed: Option<String>,
    /// The seed's `--initial-cluster-token`.
    pub token: Option<String>,
    /// etcd's cluster ID, once a member has answered. Set once, never cleared: from then
    /// on the cluster exists and holds data, whatever happens to its pods.
    pub cluster_id: Option<u64>,
}

impl BootstrapRecord {
    /// The record written right before the seed pod `seed` is created.
    pub fn seed(seed: &str, token: &str) -> Self {
        BootstrapRecord {
            seed: Some(seed.to_string()),
            token: Some(token.to_string()),
            cluster_id: None,
        }
    }

    /// The record with the cluster ID a member answered with, when it had none. A record
    /// that already names a cluster keeps it.
    pub(crate) fn with_cluster_id(&self, cluster_id: u64) -> Self {
        BootstrapRecord {
            cluster_id: self.cluster_id.or(Some(cluster_id)),
            ..self.clone()
        }
    }
}

/// What the EtcdCluster's status remembers from earlier ticks (and earlier operators).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Recorded {
    /// `status.bootstrap`.
    pub bootstrap: Option<BootstrapRecord>,
    /// Member names the status listed (ready and unready). Clusters created by operator
    /// versions without a bootstrap record are known to exist by these.
    pub members: Vec<String>,
    /// `status.reason`: the reason last published, so a refusal's Event is raised once
    /// even across operator restarts.
    pub reason: String,
    /// `status.failedVersion`: a version an upgraded member could not run.
    pub failed_version: Option<String>,
    /// `status.recovery`: the last recovery from a loss of quorum, finished or not.
    pub recovery: Option<RecoveryRecord>,
    /// `status.revision`: the newest revision a member reported, as last published.
    pub revision: Option<i64>,
}

/// Where a cluster stands with respect to its one bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Birth<'a> {
    /// Nothing was ever seeded: a seed may be created (when no pod of the cluster exists).
    Unborn,
    /// A seed was recorded and no member has answered yet: only that seed may be
    /// (re)started, under the recorded name and token.
    Seeding {
        /// Seed member (and pod) name.
        seed: &'a str,
        /// Its `--initial-cluster-token`.
        token: &'a str,
    },
    /// A member answered at least once (or an older operator's status listed members):
    /// the cluster exists. It is never bootstrapped again, and its failed pods are never
    /// deleted to make room.
    Born {
        /// The recorded cluster ID, when known.
        cluster_id: Option<u64>,
    },
}

impl<'a> Birth<'a> {
    /// The one rule, from the recorded status, what this actor has seen, and this tick's
    /// member list.
    pub fn of(state: &State, obs: &'a Observation) -> Birth<'a> {
        let record = obs.recorded.bootstrap.as_ref();
        let listed = match &obs.membership {
            Membership::Listed { cluster_id, .. } => Some(*cluster_id),
            Membership::Unreachable { .. } => None,
        };
        let known = record.and_then(|r| r.cluster_id).or(state.cluster_id);
        if known.is_some() || listed.is_some() || !obs.recorded.members.is_empty() {
            return Birth::Born {
                cluster_id: known.or(listed),
            };
        }
        match record {
            Some(BootstrapRecord {
                seed: Some(seed),
                token: Some(token),
                ..
            }) => Birth::Seeding { seed, token },
            _ => Birth::Unborn,
        }
    }

    /// Whether the cluster exists (a member answered once).
    pub(crate) fn is_born(&self) -> bool {
        matches!(self, Birth::Born { .. })
    }
}
