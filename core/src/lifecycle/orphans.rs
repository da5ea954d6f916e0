//! When a pod that has no etcd member is deleted: after a grace time, so that a member
//! list read from a member that has not yet applied a recent `member add` costs no pod.

use super::decision::{Decision, PendingDecision};
use super::transition;
use super::view::ClusterView;
use super::{Action, PodView, Reason, State, Why};

/// Grace time before a pod that has no etcd member is deleted, so that a member list read
/// from a member that has not yet applied a recent `member add` cannot cost a new pod.
pub(crate) const ORPHAN_POD_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether pod `name` has had no member for the whole grace time by `now`: the one test
/// before a memberless pod (an orphan, or a prepared joiner left over) is deleted.
pub(super) fn orphaned_past_grace(state: &State, name: &str, now: tokio::time::Instant) -> bool {
    state
        .orphan_since
        .get(name)
        .is_some_and(|since| now.saturating_duration_since(*since) >= ORPHAN_POD_GRACE)
}

/// Deletes the pods that have had no member for the grace time (not prepared joiners).
pub(super) fn orphan_pods(state: &State, view: &ClusterView<'_>) -> Option<PendingDecision> {
    let now = view.obs.now;
    let due: Vec<Action> = state
        .orphan_since
        .keys()
        .filter(|name| orphaned_past_grace(state, name, now))
        // Prepared joiners have no member until they are added: `leftover_joiners`.
        .filter(|name| !view.obs.pod(name).is_some_and(PodView::awaits_membership))
        .map(|name| Action::DeletePod { name: name.clone() })
        .collect();
    if due.is_empty() {
        return None;
    }
    let why = Why::new(
        Reason::DeletingOrphanPod,
        format!(
            "deleting {} pod(s) that have no etcd member (a removed member or a failed join)",
            due.len()
        ),
    );
    Some(Box::new(move |state: State| {
        let phase = transition::continuing(&state.phase);
        Decision::new(state, phase, due, why)
    }))
}
