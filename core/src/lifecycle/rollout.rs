//! Pod template changes (`spec.pod`, `spec.repository`, `spec.TLS`) reach the running members: a pod's
//! policy is fixed when it is created, so a member takes a new one only with a new pod.
//!
//! - **Rolling restart.** With every member healthy and nothing else to do, one member at
//!   a time (followers first, the leader last) gets its pod deleted. A member on a volume
//!   comes back on it as the same member ([`volumes`](super::volumes)); a member on an
//!   emptyDir loses its data with its pod and is replaced (removed, then added anew), so
//!   that is done only while the others keep a quorum without it.
//! - **A crash loop fixed by the spec.** A member whose etcd keeps exiting and whose pod
//!   was built from an older template gets a pod from the current one at once, without
//!   waiting for the others: it serves nothing as it is. On a volume this changes no
//!   membership and needs no quorum; on an emptyDir it is replaced, only while the others
//!   hold a quorum.

use super::tls::{RotationStep, is_stale, rotation, trusts_another_bundle};
use super::view::ClusterView;
use super::volumes::on_a_volume;
use super::{
    Action, Deadlines, Decision, DesiredCluster, MemberView, Observation, Phase, PodView, Reason,
    State, Why,
};
use super::{crash, leadership, transition};

/// A crash-looping pod built from an older template, when recreating it is safe without
/// a member list: its member is on a volume. Checked before anything needs etcd, since a
/// one-member cluster that crash loops answers nothing.
pub(super) fn crash_loop_on_a_volume(
    state: &State,
    obs: &Observation,
    spec: &DesiredCluster,
) -> Option<Decision> {
    let pod = obs.pods.iter().find(|p| {
        !p.terminating
            && is_stale(p, spec, obs)
            && crash::looping(p).is_some()
            && on_a_volume(obs, &p.name)
    })?;
    Some(recreate_crash_looping(state.clone(), pod))
}

/// A crash-looping pod built from an older template whose member is on an emptyDir:
/// replaced when the healthy voting members other than it keep a quorum.
pub(super) fn crash_loop_with_quorum(
    state: &State,
    view: &ClusterView<'_>,
    spec: &DesiredCluster,
) -> Option<Decision> {
    let pod = view.members.iter().find_map(|m| {
        let pod = view.obs.pod(&m.name)?;
        let others = view.healthy_voters - usize::from(view.is_healthy(m) && !m.is_learner);
        let loops = crash::looping(pod).is_some();
        (loops && !pod.terminating && is_stale(pod, spec, view.obs) && others >= view.quorum())
            .then_some(pod)
    })?;
    Some(recreate_crash_looping(state.clone(), pod))
}

fn recreate_crash_looping(state: State, pod: &PodView) -> Decision {
    let why = Why::new(
        Reason::RecreatingCrashLoopingMember,
        format!(
            "member {}'s etcd keeps exiting ({} restarts) on a pod built from an older \
             spec.pod: giving it a pod from the current spec",
            pod.name, pod.restarts
        ),
    );
    let phase = transition::continuing(&state.phase);
    let action = Action::RecreatePod {
        name: pod.name.clone(),
    };
    Decision::new(state, phase, vec![action], why)
}

/// The next member to restart onto the current template, in a cluster whose members are
/// all healthy and match the spec's size and version; `Running` when none is left or
/// none may go.
pub(super) fn restart_next(
    mut state: State,
    view: &ClusterView<'_>,
    (spec, deadlines): (&DesiredCluster, &Deadlines),
    actions: Vec<Action>,
) -> Decision {
    let mut stale: Vec<_> = view
        .members
        .iter()
        .filter(|m| {
            view.obs
                .pod(&m.name)
                .is_some_and(|p| is_stale(p, spec, view.obs))
        })
        .collect();
    stale.sort_by_key(|m| (Some(m.id) == view.leader, m.name.clone()));
    let Some(next) = stale.first() else {
        return settled(state, view, spec, actions);
    };
    if let Some(why) = unsettled(&state, view, deadlines) {
        return Decision::new(state, Phase::Restarting, actions, why);
    }
    let what = match view.obs.pod(&next.name) {
        Some(p) if trusts_another_bundle(p, spec, view.obs) => {
            "the CA bundle the members trust changed (etcd reads it only when it starts)"
        }
        _ => "spec.pod, spec.repository or spec.TLS changed",
    };
    let on_volume = on_a_volume(view.obs, &next.name);
    if !on_volume && view.healthy_voters.saturating_sub(1) < view.quorum() {
        let why = Why::new(
            Reason::RestartRefused,
            format!(
                "{what}, but member {} keeps its data on an \
                 emptyDir: a new pod means replacing it, and the other {} voting members \
                 would not keep a quorum meanwhile. Its pod is left as it is (scale the \
                 cluster to 3 or more members, or use persistentVolumeClaimSpec)",
                next.name,
                view.healthy_voters.saturating_sub(1)
            ),
        );
        return Decision::new(state, Phase::Running, actions, why);
    }
    if let Some((hand_over, why)) = leadership::hand_over(view, next, &format!("restart ({what})"))
    {
        let mut actions = actions;
        actions.push(hand_over);
        return Decision::new(state, Phase::Restarting, actions, why);
    }
    let how = if on_volume {
        "it comes back on its volume as the same member"
    } else {
        "it is on an emptyDir, so it is replaced by a new member"
    };
    let why = Why::new(
        Reason::RestartingMember,
        format!(
            "{what}: restarting member {} onto it ({how}); \
             {} of {} members left to restart",
            next.name,
            stale.len(),
            view.members.len()
        ),
    );
    let mut actions = actions;
    actions.push(Action::RecreatePod {
        name: next.name.clone(),
    });
    state.settled_since = None;
    Decision::new(state, Phase::Restarting, actions, why)
}

/// Why the next member may not go yet, if it may not. etcd's status answers as soon as a
/// restarted member runs; its pod is Ready for clients (and counted ready in the status)
/// only at its next readiness probe, and its new address is in the cluster DNS only once
/// published, and in every member's answers only once the DNS's cached answers expire.
/// So every member's pod must be Ready and published, and have been so, as far as this
/// operator has seen ([`State::settled_since`]), for [`Deadlines::restart_settle`]. The
/// operator's own sight is what counts: one started in the middle of a rollout (a restart,
/// a new leader) cannot tell how recently the last member went, so it waits the whole
/// settle once.
fn unsettled(state: &State, view: &ClusterView<'_>, deadlines: &Deadlines) -> Option<Why> {
    let pod = |m: &MemberView| view.obs.pod(&m.name);
    if let Some(m) = view
        .members
        .iter()
        .find(|m| !pod(m).is_some_and(PodView::ready_and_published))
    {
        return Some(Why::new(
            Reason::WaitingForHealthyMembers,
            format!(
                "waiting for member {}'s pod to be Ready, with its address in the cluster DNS, \
                 before restarting the next member",
                m.name
            ),
        ));
    }
    let now = view.obs.now;
    let since = state.settled_since.unwrap_or(now);
    let settle = deadlines.restart_settle;
    (now.saturating_duration_since(since) < settle).then(|| {
        Why::new(
            Reason::WaitingForHealthyMembers,
            format!(
                "every member's pod is Ready; the next member is restarted once they have \
                 been for {}s (the cluster DNS may still answer a restarted member's name \
                 with its old address)",
                settle.as_secs()
            ),
        )
    })
}

/// Every member runs the current template and trust: the next step of a CA rotation when
/// one is due or in progress, else `Running`.
fn settled(
    state: State,
    view: &ClusterView<'_>,
    spec: &DesiredCluster,
    mut actions: Vec<Action>,
) -> Decision {
    match rotation(view.obs, spec) {
        None => {
            let why = Why::new(
                Reason::Converged,
                format!("{} members running {}", view.members.len(), spec.version),
            );
            Decision::new(state, Phase::Running, actions, why)
        }
        Some(RotationStep::Wait(why)) => Decision::new(state, Phase::Restarting, actions, why),
        Some(RotationStep::Advance { from, to, why }) => {
            actions.push(Action::AdvanceCaRotation { from, to });
            let phase = if to.is_none() {
                Phase::Running
            } else {
                Phase::Restarting
            };
            Decision::new(state, phase, actions, why)
        }
    }
}
