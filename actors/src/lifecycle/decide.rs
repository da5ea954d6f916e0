//! The decision function: `(state, observation, spec) -> (state, actions)`, pure and total.
//!
//! One call per tick. It looks at what the tick observed, compares it with the spec, and
//! picks at most one membership step, in this order of precedence:
//!
//! 1. an object being deleted, spec problems (name, bad version), TLS that cannot be used (a Secret invalid, a mode
//!    other than the pods run), a name owned by someone else, and an etcd answering for
//!    another cluster block every action; `paused` too;
//! 2. without a member list: the bootstrap rule ([`Birth`]) decides whether a seed may be
//!    created or restarted; a cluster that exists is only reported on;
//! 3. missing Services are recreated; pods without a member are deleted after a grace time;
//! 4. a member added but not started gets its pod, or is removed after a deadline;
//! 5. without a healthy quorum nothing else happens;
//! 6. dead members, then members unhealthy past a deadline (and not ready by the kubelet's
//!    own probe), are removed (and replaced by the scale-up step on a later tick);
//! 7. a started learner is promoted;
//! 8. a crash-looping member built from an older pod template gets a pod from the current
//!    one (on a volume this needs no quorum and is checked first, before step 2);
//! 9. with every member healthy: scale by one member, else upgrade one member, else
//!    restart one member onto a changed pod template.
//!
//! Operator-managed certificates that are missing or due are issued first, before
//! whatever step was picked (the step's pods mount them).

use std::collections::BTreeSet;

use super::{
    Action, Birth, Deadlines, DesiredCluster, MemberView, Membership, Observation, Phase, PodView,
    Reason, SnapshotSource, State, UpgradePath, Version, Why, check_readable,
};
use super::{crash, evidence, recorded_recovery, recovery, rollout, tls, volumes};
use super::{transition, upgrade};

/// Grace time before a pod that has no etcd member is deleted, so that a member list read
/// from a member that has not yet applied a recent `member add` cannot cost a new pod.
pub(crate) const ORPHAN_POD_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

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
///
/// Every decision passes the state machine's guards ([`transition::check`]); one that
/// breaks them is replaced by `Blocked` with no actions.
pub fn decide(
    state: State,
    obs: &Observation,
    spec: &DesiredCluster,
    deadlines: &Deadlines,
) -> Decision {
    let from = state.phase.clone();
    let decision = tls::with_certificates(step(state, obs, spec, deadlines), obs, spec);
    let born = Birth::of(&decision.state, obs).is_born();
    transition::guard(&from, decision, born)
}

/// The decision before the guards.
fn step(
    mut state: State,
    obs: &Observation,
    spec: &DesiredCluster,
    deadlines: &Deadlines,
) -> Decision {
    if spec.deleting {
        let why = Why::new(
            Reason::Deleting,
            "the EtcdCluster is being deleted (metadata.deletionTimestamp is set): no pod, \
             claim or recovery is made for it; the garbage collector removes what it owns",
        );
        return blocked(state, why);
    }
    if let Err(why) = check_cluster_id(&mut state, obs) {
        return blocked(state, why);
    }
    let target = match check_spec(spec) {
        Ok(target) => target,
        Err(why) => return blocked(state, why),
    };
    if let Err(why) = tls::check(obs, spec) {
        return blocked(state, why);
    }
    if let Some(owner) = &obs.name_conflict {
        let why = Why::new(
            Reason::NameConflict,
            format!(
                "{owner}; this cluster shares nothing with it and waits until the name is free"
            ),
        );
        return blocked(state, why);
    }
    if let Some(problem) = obs
        .restore_problem
        .as_ref()
        .filter(|_| spec.restore.is_some())
    {
        return blocked(state, Why::new(Reason::RestoreNotAllowed, problem.clone()));
    }
    if spec.paused {
        let why = Why::new(
            Reason::Paused,
            "spec.paused is true: observing and reporting only",
        );
        return settle(state, Phase::Paused, vec![], why);
    }
    recovery::track_loss(&mut state, obs);
    if let Some(d) = recorded_recovery::in_progress(&mut state, obs, spec, &target) {
        return d;
    }
    if let Some(d) = recorded_recovery::stale_force(&state, obs) {
        return d;
    }
    upgrade::track_upgrades(&mut state, obs, |pod| healthy_on_own_version(obs, pod));
    upgrade::note_failures(&mut state, obs, &target);
    if let Some(d) = upgrade::failed_upgrade(&mut state, obs, deadlines) {
        return d;
    }
    if Birth::of(&state, obs).is_born()
        && let Some(d) = rollout::crash_loop_on_a_volume(&state, obs, spec)
    {
        return d;
    }
    match &obs.membership {
        Membership::Unreachable { error } => {
            state.settled_since = None;
            let birth = Birth::of(&state, obs);
            let seed = Seed {
                version: &target,
                restore: spec.restore.as_ref(),
            };
            without_member_list(state, obs, birth, error, (seed, spec))
        }
        Membership::Listed { members, .. } => {
            track_timers(&mut state, obs, members);
            let view = ClusterView::new(obs, members);
            let mut d = with_member_list(state, &view, spec, &target, deadlines);
            if !matches!(d.state.phase, Phase::Blocked { .. }) {
                d.actions.extend(unlabelled_voters(&view));
                d.actions.extend(disruption_budget(&view));
                d.actions.extend(volumes::growth(obs, spec));
            }
            d
        }
    }
}

pub(super) fn settle(mut state: State, phase: Phase, actions: Vec<Action>, why: Why) -> Decision {
    state.phase = phase;
    Decision {
        state,
        actions,
        why,
    }
}

fn blocked(state: State, why: Why) -> Decision {
    settle(state, Phase::Blocked { reason: why.reason }, vec![], why)
}

/// Remembers the cluster ID etcd answers with, and refuses an answer from another cluster
/// than the one recorded (a reused address, a stale DNS record): such an endpoint is never
/// taken for a member of this cluster.
fn check_cluster_id(state: &mut State, obs: &Observation) -> Result<(), Why> {
    let Membership::Listed { cluster_id, .. } = &obs.membership else {
        return Ok(());
    };
    match recovery::recorded_cluster_id(state, obs) {
        Some(expected) if expected != *cluster_id => Err(Why::new(
            Reason::ClusterIdMismatch,
            format!(
                "the members answered for etcd cluster {cluster_id:x}, but this EtcdCluster's \
                 cluster is {expected:x}; nothing is changed (check the pods and DNS records \
                 of this cluster)"
            ),
        )),
        _ => {
            state.cluster_id = Some(*cluster_id);
            Ok(())
        }
    }
}

/// Voting members whose pod is not yet behind the client Service. Labelled after the
/// tick's step, so a failed label never holds back a membership step.
fn unlabelled_voters(view: &ClusterView<'_>) -> Vec<Action> {
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
fn disruption_budget(view: &ClusterView<'_>) -> Option<Action> {
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

/// Whether the member of `pod` answers, healthy, with the version the pod runs.
fn healthy_on_own_version(obs: &Observation, pod: &PodView) -> bool {
    let Membership::Listed { members, .. } = &obs.membership else {
        return false;
    };
    members
        .iter()
        .filter(|m| m.started() && m.name == pod.name)
        .filter_map(|m| obs.health.get(&m.id))
        .any(|h| {
            h.is_healthy()
                && h.version.as_ref().map(ToString::to_string).as_deref() == pod.version.as_deref()
        })
}

fn check_spec(spec: &DesiredCluster) -> Result<Version, Why> {
    if let Some(problem) = &spec.name_problem {
        return Err(Why::new(Reason::InvalidName, problem.clone()));
    }
    if let Some(problem) = &spec.pod_policy_problem {
        return Err(Why::new(Reason::InvalidSpec, problem.clone()));
    }
    if let Some(problem) = &spec.image_problem {
        return Err(Why::new(Reason::ImageNotAllowed, problem.clone()));
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

/// What a seed is made from: the version to run and the snapshot to restore, if any.
#[derive(Debug, Clone, Copy)]
struct Seed<'a> {
    version: &'a Version,
    restore: Option<&'a SnapshotSource>,
}

/// A cluster to be born from a snapshot its version cannot read gets no seed.
fn unreadable_snapshot(birth: Birth<'_>, seed: Seed<'_>) -> Option<Why> {
    let source = seed.restore.filter(|_| !birth.is_born())?;
    let problem = check_readable(&source.etcd_version, seed.version).err()?;
    Some(Why::new(
        Reason::RestoreRefused,
        format!(
            "spec.restore names snapshot {}: {problem}; no member is created (set \
             spec.version to a version that can read it)",
            source.path()
        ),
    ))
}

fn without_member_list(
    state: State,
    obs: &Observation,
    birth: Birth<'_>,
    error: &str,
    (seed, spec): (Seed<'_>, &DesiredCluster),
) -> Decision {
    let target = seed.version;
    // Missing Services are recreated whatever else happens: without the headless Service
    // the members cannot even find each other, and creating it never touches data.
    let mut actions = Vec::new();
    if !obs.services_present {
        actions.push(Action::EnsureServices);
    }
    // A prepared joiner still waiting for its member add is no member: nothing answers
    // there and it holds no data.
    let live: Vec<_> = obs.pods.iter().filter(|p| p.may_run_a_member()).collect();
    let block = |state, why: Why, actions| {
        settle(state, Phase::Blocked { reason: why.reason }, actions, why)
    };
    if let Some(why) = unreadable_snapshot(birth, seed) {
        return block(state, why, actions);
    }
    if let (Birth::Born { .. }, Some(on)) = (birth, volumes::without_member_list(obs, target)) {
        let mut d = on_volumes(state, on);
        actions.append(&mut d.actions);
        d.actions = actions;
        return d;
    }
    match birth {
        Birth::Born { .. } if live.is_empty() => {
            let why = Why::new(
                Reason::AllMembersLost,
                format!(
                    "no member answers and no pod runs one ({}); their data is not known to \
                     be gone, so the operator recovers nothing, creates no empty cluster in \
                     their place and deletes nothing (a pod being deleted goes once its node \
                     confirms it; an exited pod keeps its volume until it is deleted)",
                    evidence::describe(obs, &evidence::known_members(obs))
                ),
            );
            let mut d = recovery::quorum_lost(state, obs, spec, target, why);
            actions.append(&mut d.actions);
            d.actions = actions;
            d
        }
        Birth::Born { .. } => block(
            state,
            Why::new(
                Reason::EtcdUnreachable,
                format!(
                    "{} member pod(s) exist but no member answers ({error}); changing nothing",
                    live.len()
                ),
            ),
            actions,
        ),
        Birth::Unborn if obs.pods.is_empty() => {
            actions.push(Action::CreateSeed {
                version: target.clone(),
                restore: seed.restore.cloned(),
            });
            let why = Why::new(Reason::CreatingSeed, creating_seed_message(seed));
            settle(state, Phase::Bootstrapping, actions, why)
        }
        Birth::Unborn => unrecorded_seed(state, obs, &live, error),
        Birth::Seeding { seed: name, token } => {
            recorded_seed(state, obs, actions, (name, token), error, seed)
        }
    }
}

fn creating_seed_message(seed: Seed<'_>) -> String {
    match seed.restore {
        Some(source) => format!(
            "no members yet: creating the seed member from snapshot {} (revision {})",
            source.path(),
            source.revision
        ),
        None => "no members yet: creating the seed member".to_string(),
    }
}

/// Pods exist but no seed was ever recorded: an older operator's seed. It is waited for,
/// or when it died before any member answered (it holds no data), deleted to start over.
fn unrecorded_seed(state: State, obs: &Observation, live: &[&PodView], error: &str) -> Decision {
    if let Some(pod) = live.first() {
        return waiting_for_seed(state, pod, error);
    }
    let actions = obs
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
    settle(state, Phase::Bootstrapping, actions, why)
}

/// The recorded seed: started under its recorded name and token when its pod is missing,
/// recreated from the current spec when it never ran and the spec moved on, restarted when
/// it died before any member answered, waited for otherwise.
fn recorded_seed(
    state: State,
    obs: &Observation,
    mut actions: Vec<Action>,
    (seed, token): (&str, &str),
    error: &str,
    made_from: Seed<'_>,
) -> Decision {
    let target = made_from.version;
    let Some(pod) = obs.pod(seed) else {
        actions.push(Action::StartSeed {
            name: seed.to_string(),
            token: token.to_string(),
            version: target.clone(),
            restore: made_from.restore.cloned(),
        });
        let why = Why::new(
            Reason::CreatingSeed,
            format!("starting the recorded seed member {seed}"),
        );
        return settle(state, Phase::Bootstrapping, actions, why);
    };
    let stale = !pod.started && pod.version.as_deref() != Some(target.to_string().as_str());
    let (reason, message) = if pod.terminating {
        return waiting_for_seed(state, pod, error);
    } else if pod.is_dead() {
        (
            Reason::RestartingFailedSeed,
            format!(
                "seed member {seed} died before the cluster formed (no member ever answered): starting it again"
            ),
        )
    } else if stale {
        (
            Reason::RecreatingSeed,
            format!(
                "seed member {seed} never started and the spec now asks for etcd {target}: recreating it (it holds no data)"
            ),
        )
    } else {
        return waiting_for_seed(state, pod, error);
    };
    actions.push(Action::DeletePod {
        name: seed.to_string(),
    });
    settle(
        state,
        Phase::Bootstrapping,
        actions,
        Why::new(reason, message),
    )
}

fn waiting_for_seed(state: State, pod: &PodView, error: &str) -> Decision {
    let detail = pod
        .problem
        .clone()
        .unwrap_or_else(|| format!("etcd not answering yet: {error}"));
    let why = Why::new(
        Reason::WaitingForSeed,
        format!("waiting for seed member {} to start ({detail})", pod.name),
    );
    settle(state, Phase::Bootstrapping, vec![], why)
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
    let settled = members
        .iter()
        .all(|m| obs.pod(&m.name).is_some_and(PodView::ready_and_published));
    if settled {
        state.settled_since.get_or_insert(now);
    } else {
        state.settled_since = None;
    }
}

/// The member list joined with pods and health, with the counts decisions need.
pub(super) struct ClusterView<'a> {
    pub(super) obs: &'a Observation,
    pub(super) members: &'a [MemberView],
    voters: usize,
    pub(super) healthy_voters: usize,
    pub(super) leader: Option<u64>,
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

    pub(super) fn quorum(&self) -> usize {
        self.voters / 2 + 1
    }

    pub(super) fn is_healthy(&self, m: &MemberView) -> bool {
        m.started() && self.obs.health.get(&m.id).is_some_and(|h| h.is_healthy())
    }

    fn pod_is_dead_or_missing(&self, m: &MemberView) -> bool {
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
        let phase = transition::continuing(&state.phase);
        return settle(state, phase, vec![Action::EnsureServices], why);
    }
    let join_version = version_for_new_members(&state, view, target);
    if let Some(on) = volumes::with_member_list(view.obs, view.members, &join_version) {
        return on_volumes(state, on);
    }
    if let Some(d) = orphan_pods(&state, view) {
        return d(state);
    }
    let joiner = wanted_joiner(view, spec, &join_version);
    if let Some(d) = leftover_joiners(&state, view, joiner) {
        return d(state);
    }
    if let Some(d) = unstarted_member(&state, view, deadlines, &scaling, &join_version) {
        return d(state);
    }
    if view.healthy_voters < view.quorum() {
        return quorum_lost(state, view, spec, target);
    }
    if let Some(d) = dead_or_unhealthy_member(&state, view, deadlines, (size, &join_version)) {
        return d(state);
    }
    if let Some(d) = promotable_learner(view, &scaling) {
        return d(state);
    }
    if let Some(d) = rollout::crash_loop_with_quorum(&state, view, spec) {
        return d;
    }
    if let Some(d) = unhealthy_member(state.phase.clone(), view) {
        return d(state);
    }
    if view.members.len() != size {
        return scale(state, view, size, (&join_version, joiner), scaling);
    }
    upgrade::upgrade(state, view, target, (spec, deadlines))
}

/// Members restarted on their volumes (or waited for): part of a rolling restart, or a
/// recovery.
fn on_volumes(state: State, on: volumes::OnVolumes) -> Decision {
    let phase = match state.phase {
        Phase::Restarting => Phase::Restarting,
        _ => Phase::Recovering,
    };
    match on {
        volumes::OnVolumes::Wait(why) => settle(state, phase, vec![], why),
        volumes::OnVolumes::Restart(actions, why) => settle(state, phase, actions, why),
    }
}

fn quorum_lost(
    mut state: State,
    view: &ClusterView<'_>,
    spec: &DesiredCluster,
    target: &Version,
) -> Decision {
    // The unhealthy timers start afresh when quorum is back: time spent without quorum
    // says nothing about one member.
    state.unhealthy_since.clear();
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
    recovery::quorum_lost(state, view.obs, spec, target, why)
}

/// A learner that caught up is promoted.
fn promotable_learner(view: &ClusterView<'_>, scaling: &Phase) -> Option<Step> {
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
        settle(state, phase, actions, why)
    }))
}

/// A member that is not healthy (yet) holds back every further step.
fn unhealthy_member(current: Phase, view: &ClusterView<'_>) -> Option<Step> {
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
        settle(state, phase, vec![], why)
    }))
}

/// The restarts and last failure of the pod `name` when its etcd is crash looping.
fn crash_loop<'v>(view: &'v ClusterView<'_>, name: &str) -> Option<(u32, &'v str)> {
    crash::looping(view.obs.pod(name)?)
}

/// The version a new member runs: the target when the running members may move to it,
/// otherwise the newest version already running (a refused target is never started), or
/// the oldest when the target is one a member failed to run.
fn version_for_new_members(state: &State, view: &ClusterView<'_>, target: &Version) -> Version {
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

type Step = Box<dyn FnOnce(State) -> Decision>;

fn orphan_pods(state: &State, view: &ClusterView<'_>) -> Option<Step> {
    let now = view.obs.now;
    let due: Vec<Action> = state
        .orphan_since
        .iter()
        .filter(|(_, since)| now.saturating_duration_since(**since) >= ORPHAN_POD_GRACE)
        // Prepared joiners have no member until they are added: `leftover_joiners`.
        .filter(|(name, _)| !view.obs.pod(name).is_some_and(PodView::awaits_membership))
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
        let phase = transition::continuing(&state.phase);
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
        settle(state, phase, actions, why)
    }))
}

/// A voting joiner that cannot start while the cluster lacks the quorum to remove it.
fn join_stuck(name: &str, waited: std::time::Duration, pod: Option<&PodView>) -> Step {
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
    Box::new(move |state: State| blocked(state, why))
}

/// Removes a member from etcd, then deletes its pod unless it is already going.
fn removal(id: u64, name: &str, pod: Option<&PodView>) -> Vec<Action> {
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

fn dead_or_unhealthy_member(
    state: &State,
    view: &ClusterView<'_>,
    deadlines: &Deadlines,
    (size, join_version): (usize, &Version),
) -> Option<Step> {
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
        settle(state, Phase::Recovering, actions, why)
    }))
}

/// The replacement of member `removed`, prepared in the tick that removes it: its pod is
/// scheduled, given an address and published while the removal goes through, instead of
/// after it (seconds under load, the longest wait of a replacement). Only when joiners'
/// pods can be prepared, a member is still wanted after the removal, no prepared joiner
/// is there already, and every other member is a started voter whose address the cluster
/// DNS publishes (what `grow` asks before any joiner). It runs after the removal, so a
/// removal that fails prepares nothing; the next tick adds it as any prepared joiner.
fn replacement(
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

/// Why a member may not join yet: some member's pod is not in the cluster DNS. The
/// joiner would ask for that name at once and the DNS would cache the miss.
fn unpublished_members(view: &ClusterView<'_>) -> Option<Why> {
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

fn scale(
    state: State,
    view: &ClusterView<'_>,
    size: usize,
    (version, joiner): (&Version, Option<&PodView>),
    scaling: Phase,
) -> Decision {
    if view.members.len() < size {
        return grow(state, view, size, (version, joiner), scaling);
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

/// One member more, in two steps when joiners can be prepared: first the joiner's pod
/// (`PrepareJoiner`), then, once the cluster DNS publishes its address, its `member add`.
/// The leader asks for the new member's name right after the add; with the pod published
/// first the name resolves at once, instead of being cached as unknown by the DNS for its
/// negative TTL (5 s with CoreDNS's default, 30 s as kubeadm sets it up), during which
/// the leader cannot reach its new member.
fn grow(
    state: State,
    view: &ClusterView<'_>,
    size: usize,
    (version, joiner): (&Version, Option<&PodView>),
    scaling: Phase,
) -> Decision {
    if let Some(why) = unpublished_members(view) {
        return settle(state, scaling, vec![], why);
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
            return settle(state, scaling, vec![], why);
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
        return settle(state, scaling, vec![action], why);
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
        return settle(state, scaling, vec![], why);
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
        return settle(state, scaling, vec![action], why);
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
    settle(state, scaling, vec![action], why)
}

/// Why prepared joiner `pod` may not be added yet: the cluster DNS does not publish its
/// address (the leader would ask for its name at once), or it cannot run (its gate or
/// etcd's image: an add would leave a member that never starts, removed after its
/// deadline, and prepared again).
fn joiner_not_ready(pod: &PodView) -> Option<Why> {
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
fn prepared_joiners<'v>(view: &'v ClusterView<'_>) -> impl Iterator<Item = &'v PodView> {
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
fn wanted_joiner<'v>(
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
/// had no member for [`ORPHAN_POD_GRACE`] (a member list read from a member that has not
/// applied a recent add yet cannot cost a joiner its pod). Their etcd never ran: they hold
/// no data. Never the joiner the scale-up is about to add.
fn leftover_joiners(
    state: &State,
    view: &ClusterView<'_>,
    wanted: Option<&PodView>,
) -> Option<Step> {
    let now = view.obs.now;
    let wanted = wanted.map(|p| p.name.as_str());
    let due: Vec<Action> = prepared_joiners(view)
        .filter(|p| Some(p.name.as_str()) != wanted && !p.terminating)
        .filter(|p| {
            state
                .orphan_since
                .get(&p.name)
                .is_some_and(|since| now.saturating_duration_since(*since) >= ORPHAN_POD_GRACE)
        })
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
        settle(state, phase, due, why)
    }))
}

/// Whether `pod` is a prepared joiner whose etcd never ran, built to join other members
/// than etcd lists now (itself included).
fn built_for_another_membership(pod: &PodView, view: &ClusterView<'_>) -> bool {
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
