//! The decision function: `(state, observation, spec) -> (state, actions)`, pure and total.
//!
//! One call per tick. It looks at what the tick observed, compares it with the spec, and
//! picks at most one membership step, in this order of precedence:
//!
//! 1. spec problems (TLS, bad version) and `paused` block every action;
//! 2. without a member list: bootstrap a cluster that never had members, otherwise wait;
//! 3. missing Services are recreated; pods without a member are deleted after a grace time;
//! 4. a member added but not started gets its pod, or is removed after a deadline;
//! 5. without a healthy quorum nothing else happens;
//! 6. dead members, then members unhealthy past a deadline, are removed (and replaced by
//!    the scale-up step on a later tick);
//! 7. a started learner is promoted;
//! 8. with every member healthy: scale by one member, else upgrade one member.

use std::collections::BTreeSet;

use super::{
    Action, Deadlines, DesiredCluster, MemberView, Membership, Observation, Phase, Reason, State,
    UpgradePath, Version, Why,
};

/// Grace time before a pod that has no etcd member is deleted, so that a member list read
/// from a member that has not yet applied a recent `member add` cannot cost a new pod.
pub const ORPHAN_POD_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The outcome of one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The state to carry to the next tick.
    pub state: State,
    /// What the actor must do now, in order.
    pub actions: Vec<Action>,
    /// Why: the reason shown in conditions, logs and Events.
    pub why: Why,
}

/// Decides the next step for one cluster. Pure: no I/O, no clock, no randomness.
pub fn decide(
    mut state: State,
    obs: &Observation,
    spec: &DesiredCluster,
    deadlines: &Deadlines,
) -> Decision {
    let target = match check_spec(spec) {
        Ok(target) => target,
        Err(why) => {
            let phase = Phase::Blocked { reason: why.reason };
            return settle(state, phase, vec![], why);
        }
    };
    if let Some(owner) = &obs.name_conflict {
        let why = Why::new(
            Reason::NameConflict,
            format!("{owner}; this cluster shares nothing with it and waits until the name is free"),
        );
        return settle(state, Phase::Blocked { reason: why.reason }, vec![], why);
    }
    if spec.paused {
        let why = Why::new(
            Reason::Paused,
            "spec.paused is true: observing and reporting only",
        );
        return settle(state, Phase::Paused, vec![], why);
    }
    match &obs.membership {
        Membership::Unreachable { error } => without_member_list(state, obs, error, &target),
        Membership::Listed { members } => {
            state.bootstrapped = true;
            track_timers(&mut state, obs, members);
            let view = ClusterView::new(obs, members);
            with_member_list(state, &view, spec, &target, deadlines)
        }
    }
}

fn settle(mut state: State, phase: Phase, actions: Vec<Action>, why: Why) -> Decision {
    state.phase = phase;
    Decision {
        state,
        actions,
        why,
    }
}

fn check_spec(spec: &DesiredCluster) -> Result<Version, Why> {
    if let Some(problem) = &spec.name_problem {
        return Err(Why::new(Reason::InvalidName, problem.clone()));
    }
    if spec.tls_requested {
        return Err(Why::new(
            Reason::TlsNotSupported,
            "spec.TLS is set but this operator does not implement TLS yet; \
             refusing to run the cluster without the encryption it asks for",
        ));
    }
    if spec.size == 0 {
        return Err(Why::new(
            Reason::InvalidSpec,
            "spec.size must be at least 1",
        ));
    }
    spec.version
        .parse::<Version>()
        .map_err(|e| Why::new(Reason::InvalidSpec, format!("spec.version: {e}")))
}

fn without_member_list(state: State, obs: &Observation, error: &str, target: &Version) -> Decision {
    let bootstrapped = state.bootstrapped || obs.previously_bootstrapped;
    let live: Vec<_> = obs.pods.iter().filter(|p| !p.is_dead()).collect();
    if !bootstrapped && obs.pods.is_empty() {
        let mut actions = Vec::new();
        if !obs.services_present {
            actions.push(Action::EnsureServices);
        }
        actions.push(Action::CreateSeed {
            version: target.clone(),
        });
        let why = Why::new(
            Reason::CreatingSeed,
            "no members yet: creating the seed member",
        );
        return settle(state, Phase::Bootstrapping, actions, why);
    }
    if !bootstrapped && live.is_empty() {
        let actions: Vec<_> = obs
            .pods
            .iter()
            .filter(|p| !p.terminating)
            .map(|p| Action::DeletePod {
                name: p.name.clone(),
            })
            .collect();
        let why = Why::new(
            Reason::RestartingFailedSeed,
            "the seed member died before the cluster formed (it holds no data): starting over",
        );
        return settle(state, Phase::Bootstrapping, actions, why);
    }
    if !bootstrapped {
        let problem = live.iter().find_map(|p| p.problem.clone());
        let detail = problem.unwrap_or_else(|| format!("etcd not answering yet: {error}"));
        let why = Why::new(
            Reason::WaitingForSeed,
            format!(
                "waiting for seed member {} to start ({detail})",
                live[0].name
            ),
        );
        return settle(state, Phase::Bootstrapping, vec![], why);
    }
    if live.is_empty() {
        let why = Why::new(
            Reason::AllMembersLost,
            "every member's pod is gone and no member answers; the operator will not create \
             an empty cluster in its place (restore from a backup, or delete and recreate the \
             EtcdCluster)",
        );
        return settle(state, Phase::Blocked { reason: why.reason }, vec![], why);
    }
    let why = Why::new(
        Reason::EtcdUnreachable,
        format!(
            "{} member pod(s) exist but no member answers ({error}); changing nothing",
            live.len()
        ),
    );
    settle(state, Phase::Blocked { reason: why.reason }, vec![], why)
}

fn track_timers(state: &mut State, obs: &Observation, members: &[MemberView]) {
    let now = obs.now;
    let ids: BTreeSet<u64> = members.iter().map(|m| m.id).collect();
    state.unhealthy_since.retain(|id, _| ids.contains(id));
    state.unstarted_since.retain(|id, _| ids.contains(id));
    for m in members {
        if !m.started() {
            state.unstarted_since.entry(m.id).or_insert(now);
            state.unhealthy_since.remove(&m.id);
            continue;
        }
        state.unstarted_since.remove(&m.id);
        match obs.health.get(&m.id) {
            Some(h) if h.is_healthy() => {
                state.unhealthy_since.remove(&m.id);
            }
            _ => {
                state.unhealthy_since.entry(m.id).or_insert(now);
            }
        }
    }
    let member_names: BTreeSet<String> = members.iter().filter_map(|m| m.pod_name()).collect();
    state
        .orphan_since
        .retain(|name, _| !member_names.contains(name) && obs.pod(name).is_some());
    for pod in &obs.pods {
        if !member_names.contains(&pod.name) && !pod.terminating {
            state.orphan_since.entry(pod.name.clone()).or_insert(now);
        }
    }
}

/// The member list joined with pods and health, with the counts decisions need.
struct ClusterView<'a> {
    obs: &'a Observation,
    members: &'a [MemberView],
    voters: usize,
    healthy_voters: usize,
    leader: Option<u64>,
}

impl<'a> ClusterView<'a> {
    fn new(obs: &'a Observation, members: &'a [MemberView]) -> Self {
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

    fn quorum(&self) -> usize {
        self.voters / 2 + 1
    }

    fn is_healthy(&self, m: &MemberView) -> bool {
        m.started() && self.obs.health.get(&m.id).is_some_and(|h| h.is_healthy())
    }

    fn pod_is_dead_or_missing(&self, m: &MemberView) -> bool {
        let name = m.pod_name().unwrap_or_default();
        self.obs.pod(&name).is_none_or(|p| p.is_dead())
    }

    /// Versions the started members report, oldest and newest.
    fn running_versions(&self) -> Option<(Version, Version)> {
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

fn with_member_list(
    state: State,
    view: &ClusterView<'_>,
    spec: &DesiredCluster,
    target: &Version,
    deadlines: &Deadlines,
) -> Decision {
    let size = spec.size as usize;
    let scaling = Phase::Scaling {
        from: view
            .members
            .iter()
            .filter(|m| m.started() && !m.is_learner)
            .count(),
        to: size,
    };
    if !view.obs.services_present {
        let why = Why::new(
            Reason::CreatingServices,
            "recreating the cluster's Services",
        );
        let phase = state.phase.clone();
        return settle(state, phase, vec![Action::EnsureServices], why);
    }
    if let Some(d) = orphan_pods(&state, view) {
        return d(state);
    }
    let join_version = version_for_new_members(view, target);
    if let Some(d) = unstarted_member(&state, view, deadlines, &scaling, &join_version) {
        return d(state);
    }
    if view.healthy_voters < view.quorum() {
        let why = Why::new(
            Reason::QuorumLost,
            format!(
                "only {} of {} voting members are healthy, {} are needed for quorum; \
                 no membership change until quorum is back",
                view.healthy_voters,
                view.voters,
                view.quorum()
            ),
        );
        return settle(state, Phase::Blocked { reason: why.reason }, vec![], why);
    }
    if let Some(d) = dead_or_unhealthy_member(&state, view, deadlines) {
        return d(state);
    }
    if let Some(m) = view
        .members
        .iter()
        .find(|m| m.is_learner && view.is_healthy(m))
    {
        let why = Why::new(
            Reason::PromotingLearner,
            format!("promoting learner {} to a voting member", m.name),
        );
        let action = Action::PromoteLearner {
            id: m.id,
            name: m.name.clone(),
        };
        return settle(state, scaling, vec![action], why);
    }
    if let Some(m) = view.members.iter().find(|m| !view.is_healthy(m)) {
        let why = Why::new(
            Reason::WaitingForHealthyMembers,
            format!(
                "waiting for member {} to become healthy before the next step",
                m.pod_name().unwrap_or_default()
            ),
        );
        let phase = if state.phase.is_progressing() {
            state.phase.clone()
        } else {
            Phase::Recovering
        };
        return settle(state, phase, vec![], why);
    }
    if view.members.len() != size {
        return scale(state, view, size, &join_version, scaling);
    }
    upgrade(state, view, target)
}

/// The version a new member runs: the target when the running members may move to it,
/// otherwise the newest version already running (a refused target is never started).
fn version_for_new_members(view: &ClusterView<'_>, target: &Version) -> Version {
    match view.running_versions() {
        Some((oldest, newest))
            if target < &newest || oldest.path_to(target) == UpgradePath::TooFar =>
        {
            newest
        }
        _ => target.clone(),
    }
}

type Step = Box<dyn FnOnce(State) -> Decision>;

fn orphan_pods(state: &State, view: &ClusterView<'_>) -> Option<Step> {
    let now = view.obs.now;
    let due: Vec<Action> = state
        .orphan_since
        .iter()
        .filter(|(_, since)| now.saturating_duration_since(**since) >= ORPHAN_POD_GRACE)
        .map(|(name, _)| Action::DeletePod { name: name.clone() })
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
        let phase = state.phase.clone();
        settle(state, phase, due, why)
    }))
}

fn unstarted_member(
    state: &State,
    view: &ClusterView<'_>,
    deadlines: &Deadlines,
    scaling: &Phase,
    version: &Version,
) -> Option<Step> {
    let m = view.members.iter().find(|m| !m.started())?;
    let name = m.pod_name().unwrap_or_default();
    let waited = state
        .unstarted_since
        .get(&m.id)
        .map(|since| view.obs.now.saturating_duration_since(*since))
        .unwrap_or_default();
    let pod = view.obs.pod(&name);
    let expired = waited >= deadlines.unstarted_member;
    let (actions, why) = if pod.is_some_and(|p| p.is_dead()) || expired {
        let mut actions = vec![Action::RemoveMember {
            id: m.id,
            name: name.clone(),
        }];
        if pod.is_some_and(|p| !p.terminating) {
            actions.push(Action::DeletePod { name: name.clone() });
        }
        let why = Why::new(
            Reason::RemovingUnstartedMember,
            format!(
                "member {name} was added {}s ago but never started; removing it",
                waited.as_secs()
            ),
        );
        (actions, why)
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
        settle(state, phase, actions, why)
    }))
}

fn dead_or_unhealthy_member(
    state: &State,
    view: &ClusterView<'_>,
    deadlines: &Deadlines,
) -> Option<Step> {
    let now = view.obs.now;
    let (m, reason, message) = view.members.iter().filter(|m| m.started()).find_map(|m| {
        if view.pod_is_dead_or_missing(m) {
            return Some((
                m,
                Reason::ReplacingDeadMember,
                format!(
                    "member {}'s pod is gone or dead: removing it from etcd",
                    m.name
                ),
            ));
        }
        let since = state.unhealthy_since.get(&m.id)?;
        let waited = now.saturating_duration_since(*since);
        (waited >= deadlines.unhealthy_member).then(|| {
            (
                m,
                Reason::ReplacingUnhealthyMember,
                format!(
                    "member {} has been unhealthy for {}s: removing it from etcd",
                    m.name,
                    waited.as_secs()
                ),
            )
        })
    })?;
    let mut actions = vec![Action::RemoveMember {
        id: m.id,
        name: m.name.clone(),
    }];
    if view.obs.pod(&m.name).is_some_and(|p| !p.terminating) {
        actions.push(Action::DeletePod {
            name: m.name.clone(),
        });
    }
    let why = Why::new(reason, message);
    Some(Box::new(move |state: State| {
        settle(state, Phase::Recovering, actions, why)
    }))
}

fn scale(
    state: State,
    view: &ClusterView<'_>,
    size: usize,
    version: &Version,
    scaling: Phase,
) -> Decision {
    if view.members.len() < size {
        let learner = view
            .running_versions()
            .map(|(oldest, _)| oldest)
            .unwrap_or_else(|| version.clone())
            .supports_learners();
        let kind = if learner { "learner" } else { "voting member" };
        let why = Why::new(
            Reason::AddingMember,
            format!(
                "adding a {kind}: {} of {size} members",
                view.members.len() + 1
            ),
        );
        let action = Action::AddMember {
            learner,
            version: version.clone(),
        };
        return settle(state, scaling, vec![action], why);
    }
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
    settle(state, scaling, actions, why)
}

fn upgrade(state: State, view: &ClusterView<'_>, target: &Version) -> Decision {
    let Some((oldest, newest)) = view.running_versions() else {
        let why = Why::new(Reason::Converged, "members report no version yet");
        return settle(state, Phase::Running, vec![], why);
    };
    if target < &newest {
        let why = Why::new(
            Reason::DowngradeRefused,
            format!("refusing to downgrade from {newest} to {target}; nothing was changed"),
        );
        return settle(state, Phase::Running, vec![], why);
    }
    match oldest.path_to(target) {
        UpgradePath::Same => {
            let why = Why::new(
                Reason::Converged,
                format!("{} members running {target}", view.members.len()),
            );
            return settle(state, Phase::Running, vec![], why);
        }
        UpgradePath::TooFar => {
            let why = Why::new(
                Reason::VersionSkipRefused,
                format!(
                    "refusing to upgrade from {oldest} to {target}: upgrade one minor version \
                     at a time; nothing was changed"
                ),
            );
            return settle(state, Phase::Running, vec![], why);
        }
        UpgradePath::Downgrade | UpgradePath::Allowed => {}
    }
    let phase = Phase::Upgrading {
        from: oldest,
        to: target.clone(),
    };
    let runs = |m: &MemberView| {
        view.obs.health.get(&m.id).and_then(|h| h.version.as_ref()) == Some(target)
    };
    let pod_wants = |m: &MemberView| {
        view.obs
            .pod(&m.name)
            .and_then(|p| p.version.as_deref())
            .and_then(|v| v.parse::<Version>().ok())
            .as_ref()
            == Some(target)
    };
    if let Some(m) = view.members.iter().find(|m| pod_wants(m) && !runs(m)) {
        let why = Why::new(
            Reason::WaitingForUpgradedMember,
            format!("waiting for member {} to come back on {target}", m.name),
        );
        return settle(state, phase, vec![], why);
    }
    let next = view
        .members
        .iter()
        .filter(|m| !runs(m))
        .min_by_key(|m| (Some(m.id) == view.leader, m.name.clone()))
        .expect("an upgrade has a member that does not run the target version");
    let why = Why::new(
        Reason::UpgradingMember,
        format!("upgrading member {} to {target}", next.name),
    );
    let action = Action::UpgradeMember {
        name: next.name.clone(),
        to: target.clone(),
    };
    settle(state, phase, vec![action], why)
}
