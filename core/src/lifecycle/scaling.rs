//! Growing and shrinking by one member a step: learners added and promoted, prepared
//! joiners, the version new members run, and what a joiner waits for.

use std::collections::BTreeSet;

use super::decision::{Decision, PendingDecision};
use super::orphans::orphaned_past_grace;
use super::transition;
use super::view::ClusterView;
use super::{
    Action, DesiredCluster, MemberView, Phase, PodView, Reason, State, UpgradePath, Version, Why,
};

/// A learner that caught up is promoted.
pub(super) fn promotable_learner(
    view: &ClusterView<'_>,
    scaling: &Phase,
) -> Option<PendingDecision> {
    let m = view
        .members
        .iter()
        .find(|m| m.is_learner && view.is_healthy(m))?;
    let why = Why::new(
        Reason::PromotingLearner,
        format!("promoting learner {} to a voting member", m.name),
    );
    let mut actions = vec![Action::PromoteLearner {
        id: m.id,
        name: m.name.clone(),
    }];
    // Its pod goes behind the client Service right after the promotion, in this tick (a
    // failed promotion stops the tick first): the next tick, which finds the cluster
    // converged, has no write left to make before the status.
    if view
        .obs
        .pod(&m.name)
        .is_some_and(|p| !p.voter && !p.is_dead())
    {
        actions.push(Action::LabelVoter {
            name: m.name.clone(),
        });
    }
    let phase = scaling.clone();
    Some(Box::new(move |state: State| {
        Decision::new(state, phase, actions, why)
    }))
}

/// The version a new member runs: the target when the running members may move to it,
/// otherwise the newest version already running (a refused target is never started), or
/// the oldest when the target is one a member failed to run.
pub(super) fn version_for_new_members(
    state: &State,
    view: &ClusterView<'_>,
    target: &Version,
) -> Version {
    match view.running_versions() {
        Some((oldest, _)) if state.failed_version.as_ref() == Some(target) => oldest,
        Some((oldest, newest))
            if target < &newest
                || matches!(
                    oldest.path_to(target),
                    UpgradePath::TooFar | UpgradePath::UnsafePatch { .. }
                ) =>
        {
            newest
        }
        _ => target.clone(),
    }
}

/// Why a member may not join yet: some member's pod is not in the cluster DNS. The
/// joiner would ask for that name at once and the DNS would cache the miss.
pub(super) fn unpublished_members(view: &ClusterView<'_>) -> Option<Why> {
    let waiting: Vec<&str> = view
        .members
        .iter()
        .filter(|m| view.obs.pod(&m.name).is_some_and(|p| !p.published))
        .map(|m| m.name.as_str())
        .collect();
    (!waiting.is_empty()).then(|| {
        Why::new(
            Reason::WaitingForMemberAddresses,
            format!(
                "waiting until the cluster DNS publishes the address of {} before a new \
                 member joins",
                waiting.join(", ")
            ),
        )
    })
}

/// What a change of membership size aims at: the size, the version a new member runs,
/// the prepared joiner to add next (if any) and the phase the cluster is in meanwhile.
pub(super) struct Resize<'a> {
    pub(super) size: usize,
    pub(super) version: &'a Version,
    pub(super) joiner: Option<&'a PodView>,
    pub(super) phase: Phase,
}

/// One member more or one fewer, toward `resize.size`.
pub(super) fn scale(state: State, view: &ClusterView<'_>, resize: Resize<'_>) -> Decision {
    if view.members.len() < resize.size {
        return grow(state, view, resize);
    }
    let Resize {
        size,
        phase: scaling,
        ..
    } = resize;
    // Every member is healthy here (checked before scaling), so removing a follower is
    // safe at any size, 2 -> 1 included: the change needs both members, then one is a
    // quorum of one.
    let victim = view
        .members
        .iter()
        .filter(|m| Some(m.id) != view.leader)
        .max_by_key(|m| (m.is_learner, m.name.clone()))
        .expect("a cluster of 2 or more members has a member that is not the leader");
    let why = Why::new(
        Reason::RemovingMember,
        format!(
            "removing member {}: {} of {size} members",
            victim.name,
            view.members.len() - 1
        ),
    );
    let actions = vec![
        Action::RemoveMember {
            id: victim.id,
            name: victim.name.clone(),
        },
        Action::DeletePod {
            name: victim.name.clone(),
        },
    ];
    Decision::new(state, scaling, actions, why)
}

/// One member more, in two steps when joiners can be prepared: first the joiner's pod
/// (`PrepareJoiner`), then, once the cluster DNS publishes its address, its `member add`.
/// The leader asks for the new member's name right after the add; with the pod published
/// first the name resolves at once, instead of being cached as unknown by the DNS for its
/// negative TTL (5 s with CoreDNS's default, 30 s as kubeadm sets it up), during which
/// the leader cannot reach its new member.
fn grow(state: State, view: &ClusterView<'_>, resize: Resize<'_>) -> Decision {
    let Resize {
        size,
        version,
        joiner,
        phase: scaling,
    } = resize;
    if let Some(why) = unpublished_members(view) {
        return Decision::new(state, scaling, vec![], why);
    }
    let learner = view
        .running_versions()
        .map(|(oldest, _)| oldest)
        .unwrap_or_else(|| version.clone())
        .supports_learners();
    let kind = if learner { "learner" } else { "voting member" };
    let count = view.members.len() + 1;
    if let Some(pod) = joiner {
        if let Some(why) = joiner_not_ready(pod) {
            return Decision::new(state, scaling, vec![], why);
        }
        let why = Why::new(
            Reason::AddingMember,
            format!(
                "adding prepared joiner {} as a {kind}: {count} of {size} members",
                pod.name
            ),
        );
        let action = Action::AddMember {
            learner,
            version: version.clone(),
            prepared: Some(pod.name.clone()),
        };
        return Decision::new(state, scaling, vec![action], why);
    }
    if let Some(pod) = prepared_joiners(view).next() {
        // Built for another membership, version or template: deleted after its grace.
        let why = Why::new(
            Reason::WaitingForJoin,
            format!(
                "waiting for prepared joiner {} to go before preparing another",
                pod.name
            ),
        );
        return Decision::new(state, scaling, vec![], why);
    }
    if view.obs.prepares_joiners {
        let peers = view
            .members
            .iter()
            .filter_map(MemberView::pod_name)
            .collect();
        let why = Why::new(
            Reason::PreparingJoiner,
            format!(
                "preparing the pod of a new {kind} before its member add: {count} of {size} \
                 members"
            ),
        );
        let action = Action::PrepareJoiner {
            version: version.clone(),
            peers,
        };
        return Decision::new(state, scaling, vec![action], why);
    }
    let why = Why::new(
        Reason::AddingMember,
        format!("adding a {kind}: {count} of {size} members"),
    );
    let action = Action::AddMember {
        learner,
        version: version.clone(),
        prepared: None,
    };
    Decision::new(state, scaling, vec![action], why)
}

/// Why prepared joiner `pod` may not be added yet: the cluster DNS does not publish its
/// address (the leader would ask for its name at once), or it cannot run (its gate or
/// etcd's image: an add would leave a member that never starts, removed after its
/// deadline, and prepared again).
pub(super) fn joiner_not_ready(pod: &PodView) -> Option<Why> {
    if !pod.published {
        return Some(Why::new(
            Reason::WaitingForMemberAddresses,
            format!(
                "waiting until the cluster DNS publishes the address of prepared joiner {} \
                 before its member add",
                pod.name
            ),
        ));
    }
    let problem = pod.problem.as_ref()?;
    Some(Why::new(
        Reason::WaitingForJoin,
        format!(
            "prepared joiner {} cannot run yet ({problem}); it is added once it can",
            pod.name
        ),
    ))
}

/// The pods of prepared joiners that have no member yet (their etcd never ran), by name.
pub(super) fn prepared_joiners<'v>(view: &'v ClusterView<'_>) -> impl Iterator<Item = &'v PodView> {
    let members: BTreeSet<String> = view
        .members
        .iter()
        .filter_map(MemberView::pod_name)
        .collect();
    let mut pods: Vec<&PodView> = view
        .obs
        .pods
        .iter()
        .filter(|p| p.awaits_membership() && !members.contains(&p.name))
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    pods.into_iter()
}

/// The prepared joiner the next scale-up adds: the first one (by name) that is alive,
/// built for exactly the members there are now, at the version a new member runs and
/// from the current pod template, while the cluster has fewer members than the spec asks.
pub(super) fn wanted_joiner<'v>(
    view: &'v ClusterView<'_>,
    spec: &DesiredCluster,
    version: &Version,
) -> Option<&'v PodView> {
    if view.members.len() >= spec.size as usize {
        return None;
    }
    let members: BTreeSet<String> = view
        .members
        .iter()
        .filter_map(MemberView::pod_name)
        .collect();
    let version = version.to_string();
    prepared_joiners(view).find(|p| {
        let peers: Option<BTreeSet<String>> =
            p.prepared_with.clone().map(|v| v.into_iter().collect());
        !p.is_dead()
            && peers.as_ref() == Some(&members)
            && p.version.as_deref() == Some(version.as_str())
            && !super::is_stale(p, spec, view.obs)
    })
}

/// Prepared joiners that will not be added (built for another membership, version or
/// template, a second one, dead, or no member wanted any more) are deleted once they have
/// had no member for [`ORPHAN_POD_GRACE`](super::orphans::ORPHAN_POD_GRACE) (a member list read from a member that has not
/// applied a recent add yet cannot cost a joiner its pod). Their etcd never ran: they hold
/// no data. Never the joiner the scale-up is about to add.
pub(super) fn leftover_joiners(
    state: &State,
    view: &ClusterView<'_>,
    wanted: Option<&PodView>,
) -> Option<PendingDecision> {
    let now = view.obs.now;
    let wanted = wanted.map(|p| p.name.as_str());
    let due: Vec<Action> = prepared_joiners(view)
        .filter(|p| Some(p.name.as_str()) != wanted && !p.terminating)
        .filter(|p| orphaned_past_grace(state, &p.name, now))
        .map(|p| Action::DeletePod {
            name: p.name.clone(),
        })
        .collect();
    if due.is_empty() {
        return None;
    }
    let why = Why::new(
        Reason::DeletingPreparedJoiner,
        format!(
            "deleting {} prepared joiner pod(s) that will not be added (built for another \
             membership, version or pod template, or no member is wanted any more); their \
             etcd never ran",
            due.len()
        ),
    );
    Some(Box::new(move |state: State| {
        let phase = transition::continuing(&state.phase);
        Decision::new(state, phase, due, why)
    }))
}

/// Whether `pod` is a prepared joiner whose etcd never ran, built to join other members
/// than etcd lists now (itself included).
pub(super) fn built_for_another_membership(pod: &PodView, view: &ClusterView<'_>) -> bool {
    let Some(peers) = pod
        .prepared_with
        .as_ref()
        .filter(|_| pod.awaits_membership())
    else {
        return false;
    };
    let mut built: BTreeSet<&str> = peers.iter().map(String::as_str).collect();
    built.insert(pod.name.as_str());
    let names: Vec<String> = view
        .members
        .iter()
        .filter_map(MemberView::pod_name)
        .collect();
    let listed: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    built != listed
}
