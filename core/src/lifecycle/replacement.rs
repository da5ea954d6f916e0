//! When a started member is removed to be replaced: its pod is gone or dead and no claim
//! holds its data, or it has been unhealthy past the deadline (the kubelet agreeing), or its
//! etcd's last words say its data is unusable. The replacement's pod is prepared by the
//! same tick.

use super::decision::{Decision, PendingDecision};
use super::scaling::prepared_joiners;
use super::view::ClusterView;
use super::{Action, Deadlines, MemberView, Phase, PodView, Reason, State, Version, Why};
use super::{crash, evidence};

pub(super) fn dead_or_unhealthy_member(
    state: &State,
    view: &ClusterView<'_>,
    deadlines: &Deadlines,
    (size, join_version): (usize, &Version),
) -> Option<PendingDecision> {
    let now = view.obs.now;
    let (m, reason, message) = view.members.iter().filter(|m| m.started()).find_map(|m| {
        // A member whose claim holds its data comes back on it (`volumes`), or is waited
        // for: it is replaced only when its own etcd says that data is unusable.
        let on_claim = evidence::held_on_claim(view.obs, &m.name);
        if view.pod_is_dead_or_missing(m) && !on_claim {
            return Some((
                m,
                Reason::ReplacingDeadMember,
                format!(
                    "member {}'s pod is gone or dead: removing it from etcd",
                    m.name
                ),
            ));
        }
        // A member whose pod runs is removed only when the cluster agrees it is gone: the
        // operator's probe failed past the deadline *and* the kubelet's own readiness probe
        // fails; and never while a replacement is joining. (etcd refuses every `member
        // add` while a voting member is unreachable, so several frozen members are removed
        // one per tick, each removal checked by etcd to keep a quorum, then replaced.)
        let since = state.unhealthy_since.get(&m.id)?;
        let waited = now.saturating_duration_since(*since);
        let pod = view.obs.pod(&m.name);
        let pod_ready = pod.is_some_and(|p| p.ready);
        let others_settled = view.members.iter().all(|o| o.started() && !o.is_learner);
        if waited < deadlines.unhealthy_member || pod_ready || !others_settled {
            return None;
        }
        // A member whose etcd has crashed is restarted in place on its data: it is
        // replaced only when its last words say that data is unusable.
        match pod.and_then(|p| p.crash.as_deref()) {
            None if on_claim => None,
            Some(crash) => crash::unusable_data(crash).map(|evidence| {
                let message = format!(
                    "member {}'s etcd keeps failing on its own data ({evidence:?}) for {}s: \
                     removing it from etcd to replace it",
                    m.name,
                    waited.as_secs()
                );
                (m, Reason::ReplacingBrokenMember, message)
            }),
            None => Some((
                m,
                Reason::ReplacingUnhealthyMember,
                format!(
                    "member {} has been unhealthy for {}s: removing it from etcd",
                    m.name,
                    waited.as_secs()
                ),
            )),
        }
    })?;
    let mut actions = removal(m.id, &m.name, view.obs.pod(&m.name));
    actions.extend(replacement(view, m, size, join_version));
    let why = Why::new(reason, message);
    Some(Box::new(move |state: State| {
        Decision::new(state, Phase::Recovering, actions, why)
    }))
}

/// The replacement of member `removed`, prepared in the tick that removes it: its pod is
/// scheduled, given an address and published while the removal goes through, instead of
/// after it (seconds under load, the longest wait of a replacement). Only when joiners'
/// pods can be prepared, a member is still wanted after the removal, no prepared joiner
/// is there already, and every other member is a started voter whose address the cluster
/// DNS publishes (what `grow` asks before any joiner). It runs after the removal, so a
/// removal that fails prepares nothing; the next tick adds it as any prepared joiner.
pub(super) fn replacement(
    view: &ClusterView<'_>,
    removed: &MemberView,
    size: usize,
    version: &Version,
) -> Option<Action> {
    let others: Vec<&MemberView> = view.members.iter().filter(|m| m.id != removed.id).collect();
    let settled = others.iter().all(|m| {
        m.started() && !m.is_learner && view.obs.pod(&m.name).is_some_and(|p| p.published)
    });
    let wanted = view.obs.prepares_joiners && others.len() < size;
    (wanted && settled && prepared_joiners(view).next().is_none()).then(|| Action::PrepareJoiner {
        version: version.clone(),
        peers: others.iter().filter_map(|m| m.pod_name()).collect(),
    })
}

/// Removes a member from etcd, then deletes its pod unless it is already going.
pub(super) fn removal(id: u64, name: &str, pod: Option<&PodView>) -> Vec<Action> {
    let mut actions = vec![Action::RemoveMember {
        id,
        name: name.to_string(),
    }];
    if pod.is_some_and(|p| !p.terminating) {
        actions.push(Action::DeletePod {
            name: name.to_string(),
        });
    }
    actions
}

/// A member that is not healthy (yet) holds back every further step.
pub(super) fn unhealthy_member(current: Phase, view: &ClusterView<'_>) -> Option<PendingDecision> {
    let m = view.members.iter().find(|m| !view.is_healthy(m))?;
    let name = m.pod_name().unwrap_or_default();
    let why = match crash_loop(view, &name) {
        Some((restarts, crash)) => Why::new(
            Reason::CrashLooping,
            format!(
                "member {name}'s etcd keeps exiting ({restarts} restarts; it is restarted in \
                 place with its data): {}",
                crash::last_words(crash)
            ),
        ),
        None if evidence::held_on_claim(view.obs, &name) => Why::new(
            Reason::WaitingForHealthyMembers,
            format!(
                "waiting for member {name} to become healthy before the next step; its claim \
                 holds its data, so it is never replaced while it may come back (if its node \
                 is gone for good, delete the Node or taint it node.kubernetes.io/out-of-service \
                 and the member restarts on its claim; delete the claim to have it replaced)"
            ),
        ),
        None => Why::new(
            Reason::WaitingForHealthyMembers,
            format!("waiting for member {name} to become healthy before the next step"),
        ),
    };
    let phase = if current.is_progressing() {
        current
    } else {
        Phase::Recovering
    };
    Some(Box::new(move |state: State| {
        Decision::new(state, phase, vec![], why)
    }))
}

/// The restarts and last failure of the pod `name` when its etcd is crash looping.
pub(super) fn crash_loop<'v>(view: &'v ClusterView<'_>, name: &str) -> Option<(u32, &'v str)> {
    crash::looping(view.obs.pod(name)?)
}
