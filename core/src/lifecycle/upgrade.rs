//! Version changes: upgrades one member at a time, their confirmation, the rollback of a
//! member that does not come up on its new version, and going back to an older version
//! while etcd still allows it.
//!
//! etcd's cluster version (the minor every member agrees to speak) moves up only once
//! every member runs the newer minor. Until then every member may return to the older
//! version; after that a member on the older minor would no longer start. So a rollback is
//! allowed only while no member other than those being rolled back runs a newer minor
//! than the version rolled back to.

use super::view::ClusterView;
use super::{
    Action, Deadlines, Decision, DesiredCluster, MemberView, Observation, Phase, PodView, Reason,
    State, UpgradePath, Version, Why,
};
use super::{leadership, rollout};

/// Starts or clears the timers of upgraded pods: a pod with an upgrade mark is timed
/// until its member is healthy on the pod's version (`healthy_on_own_version`).
pub(super) fn track_upgrades(
    state: &mut State,
    obs: &Observation,
    healthy_on_own_version: impl Fn(&PodView) -> bool,
) {
    let now = obs.now;
    state.upgrade_since.retain(|name, _| {
        obs.pod(name)
            .is_some_and(|p| p.upgrade_from.is_some() && !p.is_dead())
    });
    for pod in obs.pods.iter().filter(|p| p.upgrade_from.is_some()) {
        if healthy_on_own_version(pod) || pod.is_dead() {
            state.upgrade_since.remove(&pod.name);
        } else {
            state.upgrade_since.entry(pod.name.clone()).or_insert(now);
        }
    }
}

fn parse(version: Option<&str>) -> Option<Version> {
    version.and_then(|v| v.parse().ok())
}

fn minor(v: &Version) -> (u64, u64) {
    (v.major, v.minor)
}

/// Remembers a failed upgrade: a version recorded in the status as failed (while the spec
/// still asks for it), or the version of an upgraded pod that died before its member was
/// healthy on it (a pod that cannot restart is replaced, and its replacement must not
/// join on the version that killed it).
pub(super) fn note_failures(state: &mut State, obs: &Observation, target: &Version) {
    let recorded = parse(obs.recorded.failed_version.as_deref());
    let died = obs
        .pods
        .iter()
        .filter(|p| p.upgrade_from.is_some() && p.is_dead())
        .find_map(|p| parse(p.version.as_deref()));
    state.failed_version = died
        .or(recorded)
        .or_else(|| state.failed_version.take())
        .filter(|v| v == target);
}

/// An upgraded member that is not healthy on its new version by the deadline: the
/// upgrade halts and, while etcd still allows it, the member goes back to the version it
/// ran. Checked before quorum (a rollback changes no membership) and whether or not any
/// member answers (a one-member cluster on a bad image answers nothing).
pub(super) fn failed_upgrade(
    state: &mut State,
    obs: &Observation,
    deadlines: &Deadlines,
) -> Option<Decision> {
    let (pod, waited) = obs.pods.iter().find_map(|p| {
        let since = state.upgrade_since.get(&p.name)?;
        let waited = obs.now.saturating_duration_since(*since);
        (waited >= deadlines.upgraded_member).then_some((p, waited))
    })?;
    let from = parse(pod.upgrade_from.as_deref())?;
    let failed = parse(pod.version.as_deref())?;
    state.failed_version = Some(failed.clone());
    let newer_elsewhere = obs
        .pods
        .iter()
        .filter(|p| p.name != pod.name && !p.is_dead())
        .filter_map(|p| parse(p.version.as_deref()))
        .find(|v| minor(v) > minor(&from));
    let header = format!(
        "member {} is not healthy on etcd {failed} {}s after its upgrade from {from}",
        pod.name,
        waited.as_secs()
    );
    let (actions, message) = match newer_elsewhere {
        Some(v) => (
            vec![],
            format!(
                "{header}; it cannot go back: another member runs {v}, so etcd's cluster \
                 version may have moved past {from}. The upgrade is halted; fix what keeps \
                 the member from running {failed}"
            ),
        ),
        None => (
            vec![Action::RollBackMember {
                name: pod.name.clone(),
                to: from.clone(),
            }],
            format!("{header}: the upgrade is halted and the member goes back to {from}"),
        ),
    };
    let why = Why::new(Reason::UpgradeFailed, message);
    let phase = Phase::Blocked { reason: why.reason };
    Some(Decision::new(state.clone(), phase, actions, why))
}

/// The next version step of a cluster whose members are all healthy and whose size
/// matches the spec.
/// With nothing left to upgrade, members built from an older pod template are restarted
/// onto the current one ([`rollout`](super::rollout)).
pub(super) fn upgrade(
    state: State,
    view: &ClusterView<'_>,
    target: &Version,
    (spec, deadlines): (&DesiredCluster, &Deadlines),
) -> Decision {
    let Some((oldest, newest)) = versions_in_play(view) else {
        let why = Why::new(Reason::Converged, "members report no version yet");
        return Decision::new(state, Phase::Running, vec![], why);
    };
    let confirms = confirmations(view);
    if state.failed_version.as_ref() == Some(target) {
        let why = Why::new(
            Reason::UpgradeFailed,
            format!(
                "a member did not come up on etcd {target}; the upgrade is halted and the \
                 members stay on {oldest} (status.failedVersion). Set another version; to \
                 try {target} again, set another version first, then {target}"
            ),
        );
        return Decision::new(state, Phase::Blocked { reason: why.reason }, confirms, why);
    }
    match oldest.path_to(target) {
        // Below every member, or below some after a partial upgrade: back, if etcd allows.
        UpgradePath::Downgrade => roll_back(state, view, target, (oldest, newest), confirms),
        _ if target < &newest => roll_back(state, view, target, (oldest, newest), confirms),
        UpgradePath::Same => rollout::restart_next(state, view, (spec, deadlines), confirms),
        UpgradePath::TooFar => {
            let why = Why::new(
                Reason::VersionSkipRefused,
                format!(
                    "refusing to upgrade from {oldest} to {target}: upgrade one minor version \
                     at a time; nothing was changed"
                ),
            );
            Decision::new(state, Phase::Running, confirms, why)
        }
        UpgradePath::UnsafePatch { through, problems } => {
            let why = Why::new(
                Reason::UpgradePathRefused,
                format!(
                    "refusing to upgrade from {oldest} to {target}: {}. Upgrade to {through} \
                     or a later {}.{} release first, then to {target}; nothing was changed",
                    problems.join("; "),
                    through.major,
                    through.minor
                ),
            );
            Decision::new(state, Phase::Running, confirms, why)
        }
        UpgradePath::Allowed => step_toward(state, view, (oldest, target), confirms),
    }
}

/// The oldest and newest version of the cluster: what members run, widened by the version
/// a member's pod was set to but the member does not run yet (its container has not
/// restarted). A pod set to 3.5 whose member still answers on 3.4 is a step in flight;
/// counting only what members run would call the cluster converged while that member is
/// about to come back on 3.5.
fn versions_in_play(view: &ClusterView<'_>) -> Option<(Version, Version)> {
    let (mut oldest, mut newest) = view.running_versions()?;
    for m in view.members.iter() {
        let Some(runs) = view.obs.health.get(&m.id).and_then(|h| h.version.as_ref()) else {
            continue;
        };
        let asked = parse(view.obs.pod(&m.name).and_then(|p| p.version.as_deref()));
        if let Some(asked) = asked.filter(|v| v != runs) {
            oldest = oldest.min(asked.clone());
            newest = newest.max(asked);
        }
    }
    Some((oldest, newest))
}

/// Going back to an older version: member by member while etcd's cluster version has not
/// moved past the target's minor, refused otherwise.
fn roll_back(
    state: State,
    view: &ClusterView<'_>,
    target: &Version,
    (oldest, newest): (Version, Version),
    confirms: Vec<Action>,
) -> Decision {
    if minor(&oldest) > minor(target) {
        let why = Why::new(
            Reason::DowngradeRefused,
            format!(
                "refusing to go back from {newest} to {target}: every member runs \
                 {}.{} or newer, so etcd's cluster version has moved past {target}; nothing \
                 was changed",
                oldest.major, oldest.minor
            ),
        );
        return Decision::new(state, Phase::Running, confirms, why);
    }
    step_toward(state, view, (newest, target), confirms)
}

/// Moves one more member to `target` (followers first, the leader last), or waits for the
/// member moved last to come back on its version.
fn step_toward(
    state: State,
    view: &ClusterView<'_>,
    (from, target): (Version, &Version),
    mut actions: Vec<Action>,
) -> Decision {
    let phase = Phase::Upgrading {
        from,
        to: target.clone(),
    };
    let runs = |m: &MemberView| view.obs.health.get(&m.id).and_then(|h| h.version.as_ref());
    let pod_version =
        |m: &MemberView| parse(view.obs.pod(&m.name).and_then(|p| p.version.as_deref()));
    if let Some(m) = view
        .members
        .iter()
        .find(|m| pod_version(m).is_some_and(|v| Some(&v) != runs(m)))
    {
        let why = Why::new(
            Reason::WaitingForUpgradedMember,
            format!(
                "waiting for member {} to come back on {}",
                m.name,
                pod_version(m).map(|v| v.to_string()).unwrap_or_default()
            ),
        );
        return Decision::new(state, phase, actions, why);
    }
    let next = view
        .members
        .iter()
        .filter(|m| runs(m) != Some(target))
        .min_by_key(|m| (Some(m.id) == view.leader, m.name.clone()))
        .expect("a version step has a member that does not run the target version");
    if let Some((hand_over, why)) = leadership::hand_over(view, next, &format!("move to {target}"))
    {
        actions.push(hand_over);
        return Decision::new(state, phase, actions, why);
    }
    let from = runs(next).cloned().unwrap_or_else(|| target.clone());
    let (action, why) = if &from > target {
        (
            Action::RollBackMember {
                name: next.name.clone(),
                to: target.clone(),
            },
            Why::new(
                Reason::RollingBackMember,
                format!("moving member {} back from {from} to {target}", next.name),
            ),
        )
    } else {
        (
            Action::UpgradeMember {
                name: next.name.clone(),
                from,
                to: target.clone(),
            },
            Why::new(
                Reason::UpgradingMember,
                format!("upgrading member {} to {target}", next.name),
            ),
        )
    };
    actions.push(action);
    Decision::new(state, phase, actions, why)
}

/// Upgrade marks to drop: members healthy on the version their pod asks for.
fn confirmations(view: &ClusterView<'_>) -> Vec<Action> {
    view.members
        .iter()
        .filter(|m| view.is_healthy(m))
        .filter_map(|m| {
            let pod = view.obs.pod(&m.name)?;
            pod.upgrade_from.as_ref()?;
            let version = parse(pod.version.as_deref())?;
            let runs = view.obs.health.get(&m.id)?.version.as_ref()?;
            (runs == &version).then(|| Action::ConfirmUpgrade {
                name: m.name.clone(),
                version,
            })
        })
        .collect()
}
