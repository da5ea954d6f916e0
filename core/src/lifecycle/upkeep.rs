//! Actions every tick adds after its step: the voter label of members behind the client
//! Service, and the PodDisruptionBudget at the cluster's quorum.

use super::view::ClusterView;
use super::{Action, MemberView, Observation};

/// Voting members whose pod is not yet behind the client Service. Labelled after the
/// tick's step, so a failed label never holds back a membership step.
pub(super) fn unlabelled_voters(view: &ClusterView<'_>) -> Vec<Action> {
    view.members
        .iter()
        .filter(|m| m.started() && !m.is_learner)
        .filter(|m| {
            view.obs
                .pod(&m.name)
                .is_some_and(|p| !p.voter && !p.is_dead())
        })
        .map(|m| Action::LabelVoter {
            name: m.name.clone(),
        })
        .collect()
}

/// The PodDisruptionBudget's `minAvailable` when it differs from what it should be
/// ([`budget_min_available`]): missing, the number of voters changed, or a member is down
/// while Kubernetes still counts its pod ready.
pub(super) fn disruption_budget(view: &ClusterView<'_>) -> Option<Action> {
    let wanted = u32::try_from(budget_min_available(view.obs, view.members)).ok()?;
    (view.obs.disruption_budget != Some(wanted)).then_some(Action::SetDisruptionBudget {
        min_available: wanted,
    })
}

/// The PodDisruptionBudget's `minAvailable`: the quorum of the voting members etcd lists,
/// plus one for each voting member etcd cannot reach while Kubernetes still counts its pod
/// ready. A node that lost power has its pods marked not ready only after the node
/// controller's grace period (40 to 50 s by default); until then the disruption controller
/// counts the dead member as healthy and would let a drain evict a live one, breaking
/// quorum. Raising the budget by the members the operator already knows are down closes
/// that window.
pub(crate) fn budget_min_available(obs: &Observation, members: &[MemberView]) -> usize {
    let voters: Vec<&MemberView> = members.iter().filter(|m| !m.is_learner).collect();
    let quorum = voters.len() / 2 + 1;
    let down_but_ready = voters
        .iter()
        .filter(|m| !(m.started() && obs.health.get(&m.id).is_some_and(|h| h.is_healthy())))
        .filter(|m| obs.pod(&m.name).is_some_and(|p| p.ready && !p.terminating))
        .count();
    (quorum + down_but_ready).min(voters.len())
}
