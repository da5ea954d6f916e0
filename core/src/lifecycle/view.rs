//! The cluster as one decision sees it once etcd has listed its members: who votes,
//! who is healthy, who leads, and which versions run.

use super::{MemberView, Observation, Version};

/// The member list joined with pods and health, with the counts decisions need.
pub(super) struct ClusterView<'a> {
    pub(super) obs: &'a Observation,
    pub(super) members: &'a [MemberView],
    pub(super) voters: usize,
    pub(super) healthy_voters: usize,
    pub(super) leader: Option<u64>,
}

impl<'a> ClusterView<'a> {
    pub(super) fn new(obs: &'a Observation, members: &'a [MemberView]) -> Self {
        let voters = members.iter().filter(|m| !m.is_learner).count();
        let healthy_voters = members
            .iter()
            .filter(|m| !m.is_learner && m.started())
            .filter(|m| obs.health.get(&m.id).is_some_and(|h| h.is_healthy()))
            .count();
        let leader = obs
            .health
            .values()
            .find_map(|h| h.leader.filter(|l| *l != 0));
        ClusterView {
            obs,
            members,
            voters,
            healthy_voters,
            leader,
        }
    }

    pub(super) fn quorum(&self) -> usize {
        self.voters / 2 + 1
    }

    pub(super) fn is_healthy(&self, m: &MemberView) -> bool {
        m.started() && self.obs.health.get(&m.id).is_some_and(|h| h.is_healthy())
    }

    pub(super) fn pod_is_dead_or_missing(&self, m: &MemberView) -> bool {
        let name = m.pod_name().unwrap_or_default();
        self.obs.pod(&name).is_none_or(|p| p.is_dead())
    }

    /// Versions the started members report, oldest and newest.
    pub(super) fn running_versions(&self) -> Option<(Version, Version)> {
        let versions: Vec<&Version> = self
            .members
            .iter()
            .filter_map(|m| self.obs.health.get(&m.id)?.version.as_ref())
            .collect();
        let oldest = versions.iter().min()?;
        let newest = versions.iter().max()?;
        Some(((*oldest).clone(), (*newest).clone()))
    }
}
