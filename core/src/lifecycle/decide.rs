//! The decision function: `(state, observation, spec) -> (state, actions)`, pure and total.
//!
//! One call per tick. It looks at what the tick observed, compares it with the spec, and
//! picks at most one membership step. This file holds the order of the rules and the timers
//! they read; each rule lives in the file named beside it. The first rule that answers wins:
//!
//! 1. an object being deleted, a changed cluster ID, a bad spec, TLS that cannot be used,
//!    a name owned by someone else and a restore that is not allowed block every action;
//!    `paused` only reports (`preconditions.rs`);
//! 2. a recovery from lost quorum that is recorded and under way goes on, and a stale
//!    force-recovery request is refused (`recovery.rs`, `recorded_recovery.rs`);
//! 3. an upgrade that failed is rolled back (`upgrade.rs`);
//! 4. a bootstrapped cluster's member crash looping on its volume from an older pod template gets
//!    a pod from the current one, with or without quorum (`rollout.rs`);
//! 5. without a member list: the bootstrap rule ([`BootstrapStage`]) decides whether a seed is
//!    created, restarted or waited for; a cluster that exists is only reported on
//!    (`seeding.rs`);
//! 6. with a member list, in this order: missing Services are recreated; a cluster for
//!    which etcd raised CORRUPT changes in no way (`space.rs`); members are
//!    restarted on their volumes (`volumes.rs`); pods without a member are deleted after
//!    a grace time (`orphans.rs`); prepared joiners that will not be added are deleted
//!    (`scaling.rs`); a member added but never started gets its pod, or is removed after a
//!    deadline (`unstarted.rs`); without a healthy quorum, recovery decides
//!    (`recovery.rs`); dead members, then members unhealthy past a deadline, are removed
//!    and their replacement prepared (`replacement.rs`); a caught-up learner is promoted
//!    (`scaling.rs`); a crash-looping member gets a pod from the current template
//!    (`rollout.rs`); an unhealthy member holds back the rest (`replacement.rs`); the
//!    size is changed by one member (`scaling.rs`); else one member is upgraded or
//!    restarted onto a changed pod template (`upgrade.rs`, `rollout.rs`); a converged
//!    cluster with NOSPACE reports it, and disarms it once its cause is gone
//!    (`space.rs`); a converged cluster has its history compacted when
//!    that is due (`compaction.rs`, at once under NOSPACE) and one member defragmented
//!    when its sizes say so (`defragmentation.rs`).
//!
//! Every tick that is not blocked also labels voters, keeps the PodDisruptionBudget at the
//! quorum (`upkeep.rs`) and grows claims (`volumes.rs`). Operator-managed certificates
//! that are missing or due are issued before whatever step was picked (`tls.rs`; the
//! step's pods mount them).

use std::collections::BTreeSet;

use super::decision::Decision;
use super::orphans::orphan_pods;
use super::preconditions;
use super::replacement::{dead_or_unhealthy_member, unhealthy_member};
use super::scaling::{
    Resize, leftover_joiners, promotable_learner, scale, version_for_new_members, wanted_joiner,
};
use super::seeding::{Seed, without_member_list};
use super::unstarted::unstarted_member;
use super::upkeep::{disruption_budget, unlabelled_voters};
use super::view::ClusterView;
use super::{
    Action, BootstrapStage, Deadlines, DesiredCluster, MemberView, Membership, Observation, Phase,
    PodView, Reason, State, Version, Why,
};
use super::{
    compaction, consistency, defragmentation, recorded_recovery, recovery, rollout, space, tls,
    volumes,
};
use super::{transition, upgrade};

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
    let bootstrapped = BootstrapStage::of(&decision.state, obs).is_bootstrapped();
    transition::guard(&from, decision, bootstrapped)
}

/// The decision before the guards.
pub(super) fn step(
    state: State,
    obs: &Observation,
    spec: &DesiredCluster,
    deadlines: &Deadlines,
) -> Decision {
    let (mut state, target) = match preconditions::gate(state, obs, spec) {
        Ok(passed) => passed,
        Err(d) => return *d,
    };
    recovery::track_loss(&mut state, obs);
    consistency::track(&mut state, obs);
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
    if BootstrapStage::of(&state, obs).is_bootstrapped()
        && let Some(d) = rollout::crash_loop_on_a_volume(&state, obs, spec)
    {
        return d;
    }
    match &obs.membership {
        Membership::Unreachable { error } => {
            state.settled_since = None;
            let birth = BootstrapStage::of(&state, obs);
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

/// Whether the member of `pod` answers, healthy, with the version the pod runs.
pub(super) fn healthy_on_own_version(obs: &Observation, pod: &PodView) -> bool {
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

/// Starts and clears the timers the rules read: since when each member is unhealthy or
/// unstarted, each pod has had no member, and every member has been ready.
pub(super) fn track_timers(state: &mut State, obs: &Observation, members: &[MemberView]) {
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

/// The rules that need a member list, in their order (point 6 above).
pub(super) fn with_member_list(
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
        return Decision::new(state, phase, vec![Action::EnsureServices], why);
    }
    if let Some(d) = space::corrupt(&state, view, spec) {
        return d;
    }
    let join_version = version_for_new_members(&state, view, target);
    if let Some(on) = volumes::with_member_list(view.obs, view.members, &join_version) {
        return on.decision(state);
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
        let resize = Resize {
            size,
            version: &join_version,
            joiner,
            phase: scaling,
        };
        return scale(state, view, resize);
    }
    let d = upgrade::upgrade(state, view, target, (spec, deadlines));
    if d.why.reason != Reason::Converged {
        return d;
    }
    let d = space::when_converged(d, view, spec);
    maintain(d, view, spec)
}

/// A converged cluster's upkeep of its backends: the compaction that is due (at once
/// under NOSPACE), then one member's defragmentation when its sizes say so.
fn maintain(mut d: Decision, view: &ClusterView<'_>, spec: &DesiredCluster) -> Decision {
    let urgent = d.why.reason == Reason::NoSpace;
    let compact = compaction::due(&mut d.state.compaction, view.obs, spec.compaction, urgent);
    let rule = (spec.defragmentation, spec.quota_backend_bytes);
    if matches!(d.why.reason, Reason::Converged | Reason::NoSpace)
        && let Some((action, why)) = defragmentation::next(&d, view, rule, &d.state.defragmented)
    {
        if let Action::Defragment { id, .. } = &action {
            d.state.defragmented.insert(*id, view.obs.now);
        }
        d.actions = vec![action];
        d.why = why;
    }
    // A compaction goes first: the defragmentation after it returns what it freed.
    d.actions.splice(0..0, compact);
    d
}

/// Too few healthy voters: recovery decides, and no membership change is made.
pub(super) fn quorum_lost(
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
