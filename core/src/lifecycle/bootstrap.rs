//! The bootstrap rule, in one place: a cluster is seeded once, and never again once any
//! of its members has answered.
//!
//! The fact lives in the EtcdCluster's status as a [`BootstrapRecord`]: the seed's name and
//! `--initial-cluster-token` are written there *before* the seed pod is created, and the
//! etcd cluster ID as soon as a member answers. The operator never clears it. Every tick
//! reads it back ([`Recorded`]) and [`BootstrapStage::of`] turns it into the only answer the
//! lifecycle asks: may a seed be created?

use super::BootstrapRecord;
use super::{Membership, Observation, State};

/// Where a cluster stands with respect to its one bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BootstrapStage<'a> {
    /// Nothing was ever seeded: a seed may be created (when no pod of the cluster exists).
    NeverSeeded,
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
    Bootstrapped {
        /// The recorded cluster ID, when known.
        cluster_id: Option<u64>,
    },
}

impl<'a> BootstrapStage<'a> {
    /// The one rule, from the recorded status, what this actor has seen, and this tick's
    /// member list.
    pub fn of(state: &State, obs: &'a Observation) -> BootstrapStage<'a> {
        let record = obs.recorded.bootstrap.as_ref();
        let listed = match &obs.membership {
            Membership::Listed { cluster_id, .. } => Some(*cluster_id),
            Membership::Unreachable { .. } => None,
        };
        let known = record.and_then(|r| r.cluster_id).or(state.cluster_id);
        if known.is_some() || listed.is_some() || !obs.recorded.members.is_empty() {
            return BootstrapStage::Bootstrapped {
                cluster_id: known.or(listed),
            };
        }
        match record {
            Some(BootstrapRecord {
                seed: Some(seed),
                token: Some(token),
                ..
            }) => BootstrapStage::Seeding { seed, token },
            _ => BootstrapStage::NeverSeeded,
        }
    }

    /// Whether the cluster exists (a member answered once).
    pub(crate) fn is_bootstrapped(&self) -> bool {
        matches!(self, BootstrapStage::Bootstrapped { .. })
    }
}
