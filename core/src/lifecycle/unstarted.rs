//! A member added to etcd but never started: its pod is made again, waited for, or the
//! member is removed after a deadline (blocked when that removal would need the quorum it
//! is missing).

use super::decision::{Decision, PendingDecision};
use super::replacement::removal;
use super::scaling::built_for_another_membership;
use super::view::ClusterView;
use super::{Action, Deadlines, Phase, PodView, Reason, State, Version, Why};

pub(super) fn unstarted_member(
    state: &State,
    view: &ClusterView<'_>,
    deadlines: &Deadlines,
    scaling: &Phase,
    version: &Version,
) -> Option<PendingDecision> {
    let m = view.members.iter().find(|m| !m.started())?;
    let name = m.pod_name().unwrap_or_default();
    let waited = state
        .unstarted_since
        .get(&m.id)
        .map(|since| view.obs.now.saturating_duration_since(*since))
        .unwrap_or_default();
    let pod = view.obs.pod(&name);
    let expired = waited >= deadlines.unstarted_member;
    let given_up = pod.is_some_and(|p| p.is_dead()) || expired;
    // Removing a voting member needs a quorum of the configuration that includes it: when
    // a voting joiner (etcd < 3.4 has no learners) cannot start, that quorum is gone.
    let removable = m.is_learner || view.healthy_voters >= view.quorum();
    let (actions, why) = if given_up && !removable {
        return Some(join_stuck(&name, waited, pod));
    } else if given_up {
        let actions = removal(m.id, &name, pod);
        let why = Why::new(
            Reason::RemovingUnstartedMember,
            format!(
                "member {name} was added {}s ago but never started; removing it",
                waited.as_secs()
            ),
        );
        (actions, why)
    } else if let Some(pod) = pod.filter(|p| built_for_another_membership(p, view)) {
        // Added while the member list differed from the one its pod was built with (its
        // `--initial-cluster` would not match): its etcd never ran, so the pod holds no
        // data and gets a new one from the current list.
        let why = Why::new(
            Reason::ResumingJoin,
            format!(
                "member {name} was added but its pod was prepared for another membership \
                 ({}): deleting it to start it again",
                pod.prepared_with.as_deref().unwrap_or_default().join(", ")
            ),
        );
        let action = Action::DeletePod { name: name.clone() };
        (vec![action], why)
    } else if pod.is_none() {
        let why = Why::new(
            Reason::ResumingJoin,
            format!("member {name} was added but has no pod: starting it"),
        );
        let action = Action::ResumeJoin {
            id: m.id,
            name,
            version: version.clone(),
        };
        (vec![action], why)
    } else {
        let detail = pod
            .and_then(|p| p.problem.clone())
            .map(|p| format!(" ({p})"))
            .unwrap_or_default();
        let why = Why::new(
            Reason::WaitingForJoin,
            format!("waiting for new member {name} to start{detail}"),
        );
        (vec![], why)
    };
    let phase = scaling.clone();
    Some(Box::new(move |state: State| {
        Decision::new(state, phase, actions, why)
    }))
}

/// A voting joiner that cannot start while the cluster lacks the quorum to remove it.
pub(super) fn join_stuck(
    name: &str,
    waited: std::time::Duration,
    pod: Option<&PodView>,
) -> PendingDecision {
    let detail = pod
        .and_then(|p| p.problem.clone())
        .unwrap_or_else(|| "its pod is dead".into());
    let why = Why::new(
        Reason::JoinStuck,
        format!(
            "voting member {name} was added {}s ago but cannot start ({detail}); until it \
             starts the cluster has no quorum and the member cannot be removed. Fix what \
             keeps it from starting (its image, its node), or delete its pod to have it \
             recreated",
            waited.as_secs()
        ),
    );
    Box::new(move |state: State| Decision::blocked(state, why))
}
