//! Which lifecycle steps a tick shows, for the [trace](crate::trace): found by comparing
//! what this tick saw and did with what the ticks before saw, so that each step is found
//! once, on the tick it happened, and not again on later ticks that see the same.

use std::collections::{BTreeMap, BTreeSet};

use crate::trace::Step;
use etcd_operator_core::lifecycle::{Action, Membership, Observation, Phase, PodPhase};

use etcd_operator_core::outcome::{ActionOutcome, ActionResult};

/// What one tick saw of a member, as far as the trace goes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberSnapshot {
    /// Its pod exists and is neither dead nor being deleted.
    pub alive: bool,
    /// Its pod is in phase Running.
    pub pod_running: bool,
    /// It answered its status call.
    pub serving: bool,
    /// It answered healthy.
    pub healthy: bool,
    /// In-place restarts of its etcd container.
    pub restarts: u32,
}

/// What one tick saw and decided, as far as the trace goes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The phase decided is Running.
    pub running: bool,
    /// Whether the status the object holds now says Running; `None` when this tick's
    /// status write failed (the object holds what it held before).
    pub published_running: Option<bool>,
    /// Members by name (pods, and members etcd lists).
    pub members: BTreeMap<String, MemberSnapshot>,
}

impl Snapshot {
    /// What `obs` shows of the members, with the phase decided and whether the status
    /// written says Running (`None`: its write failed).
    pub(crate) fn of(obs: &Observation, phase: &Phase, published_running: Option<bool>) -> Self {
        let mut members: BTreeMap<String, MemberSnapshot> = BTreeMap::new();
        for pod in &obs.pods {
            let seen = members.entry(pod.name.clone()).or_default();
            seen.alive = !pod.is_dead();
            seen.pod_running = pod.phase == PodPhase::Running && !pod.terminating;
            seen.restarts = pod.restarts;
        }
        if let Membership::Listed { members: list, .. } = &obs.membership {
            for member in list {
                let (Some(name), Some(health)) = (member.pod_name(), obs.health.get(&member.id))
                else {
                    continue;
                };
                let seen = members.entry(name).or_default();
                seen.serving = health.reachable;
                seen.healthy = health.is_healthy();
            }
        }
        Snapshot {
            running: *phase == Phase::Running,
            published_running,
            members,
        }
    }

    fn member(&self, name: &str) -> MemberSnapshot {
        self.members.get(name).copied().unwrap_or_default()
    }
}

/// When a step happened: when the tick observed the world, or when it had acted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepTime {
    /// At the tick's observation.
    Observed,
    /// By the end of the tick's actions and status write.
    Acted,
}

/// One step a tick showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundStep {
    /// The step.
    pub step: Step,
    /// The member it concerns, if one.
    pub member: Option<String>,
    /// When it happened.
    pub at: StepTime,
}

/// What the ticks so far saw, to compare the next one with.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StepHistory {
    /// The last tick's sight (its status resolved).
    sight: Snapshot,
    /// Pods the operator deleted whose pods were still seen: their end is no loss.
    deleted: BTreeSet<String>,
    /// Members lost that no replacement pod has been created for yet.
    lost: usize,
    /// Replacement members not yet seen healthy.
    replacing: BTreeSet<String>,
}

/// The steps a tick shows: `current` (what it saw) against `previous` (what the ticks
/// before saw), and the `outcomes` of its actions. Returns them in the order they
/// happened, with the trail to compare the next tick with.
pub(crate) fn steps(
    previous: &StepHistory,
    mut current: Snapshot,
    outcomes: &[ActionOutcome],
) -> (Vec<FoundStep>, StepHistory) {
    let before = &previous.sight;
    let mut next = StepHistory {
        deleted: previous.deleted.clone(),
        lost: previous.lost,
        replacing: previous.replacing.clone(),
        sight: Snapshot::default(),
    };
    let mut found = Vec::new();
    next.deleted
        .retain(|name| current.members.get(name).is_some_and(|m| m.alive));
    member_changes(before, &current, &mut next, &mut found);
    for (name, then) in &before.members {
        let gone = then.alive && !current.member(name).alive;
        if gone && !previous.deleted.contains(name) {
            note(&mut found, Step::MemberLost, Some(name), StepTime::Observed);
            next.lost += 1;
        }
    }
    if current.running && !before.running {
        note(&mut found, Step::Ready, None, StepTime::Observed);
    }
    for outcome in outcomes {
        if let ActionResult::Done { member, .. } = &outcome.result {
            action_done(&outcome.action, member.as_deref(), &mut next, &mut found);
        }
    }
    let published = current
        .published_running
        .unwrap_or(before.published_running.unwrap_or(false));
    if published && before.published_running != Some(true) {
        note(&mut found, Step::StatusPublished, None, StepTime::Acted);
    }
    current.published_running = Some(published);
    next.sight = current;
    (found, next)
}

/// Adds a step to `found`.
fn note(found: &mut Vec<FoundStep>, step: Step, member: Option<&str>, at: StepTime) {
    found.push(FoundStep {
        step,
        member: member.map(str::to_string),
        at,
    })
}

/// The steps each member of `current` shows for the first time since `before`: its pod
/// running or restarted, serving, healthy (a replacement's end, when it was one).
fn member_changes(
    before: &Snapshot,
    current: &Snapshot,
    next: &mut StepHistory,
    found: &mut Vec<FoundStep>,
) {
    for (name, now) in &current.members {
        let then = before.members.get(name).copied();
        let was = then.unwrap_or_default();
        let member = Some(name.as_str());
        if now.pod_running && !was.pod_running {
            note(found, Step::PodRunning, member, StepTime::Observed);
        }
        if then.is_some_and(|then| now.restarts > then.restarts) {
            note(found, Step::PodRestarted, member, StepTime::Observed);
        }
        if now.serving && !was.serving {
            note(found, Step::MemberServing, member, StepTime::Observed);
        }
        if now.healthy && !was.healthy {
            note(found, Step::MemberHealthy, member, StepTime::Observed);
            if next.replacing.remove(name) {
                note(found, Step::ReplacementHealthy, member, StepTime::Observed);
            }
        }
    }
}

/// The steps an action carried out on `member` is: a seed's pod, a member added, a
/// learner promoted, a joiner's pod (a replacement's while members are lost); a pod
/// deleted on purpose is remembered, so that its going is not a loss.
fn action_done(
    action: &Action,
    member: Option<&str>,
    next: &mut StepHistory,
    found: &mut Vec<FoundStep>,
) {
    let made_pod = match action {
        Action::CreateSeed { .. } | Action::StartSeed { .. } => {
            note(found, Step::SeedPodCreated, member, StepTime::Acted);
            false
        }
        Action::PrepareJoiner { .. } | Action::ResumeJoin { .. } => true,
        Action::AddMember { prepared, .. } => {
            note(found, Step::MemberAdded, member, StepTime::Acted);
            prepared.is_none()
        }
        Action::RestartMember { .. } => next.lost > 0,
        Action::PromoteLearner { .. } => {
            note(found, Step::LearnerPromoted, member, StepTime::Acted);
            false
        }
        Action::DeletePod { name } | Action::RecreatePod { name } => {
            next.deleted.insert(name.clone());
            false
        }
        _ => false,
    };
    if made_pod && next.lost > 0 {
        next.lost -= 1;
        note(found, Step::ReplacementPodCreated, member, StepTime::Acted);
        next.replacing.extend(member.map(str::to_string));
    } else if made_pod {
        note(found, Step::JoinerPodCreated, member, StepTime::Acted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_core::lifecycle::Version;
    use etcd_operator_core::outcome::Cause;
    use etcd_operator_core::ports::EtcdErrorKind;

    fn member(alive: bool, running: bool, healthy: bool) -> MemberSnapshot {
        MemberSnapshot {
            alive,
            pod_running: running,
            serving: healthy,
            healthy,
            restarts: 0,
        }
    }

    fn sight(members: &[(&str, MemberSnapshot)], running: bool) -> Snapshot {
        Snapshot {
            running,
            published_running: Some(running),
            members: members
                .iter()
                .map(|(name, m)| (name.to_string(), *m))
                .collect(),
        }
    }

    fn done(action: Action, member: &str) -> ActionOutcome {
        ActionOutcome {
            action,
            result: ActionResult::Done {
                note: String::new(),
                member: Some(member.to_string()),
            },
        }
    }

    fn v35() -> Version {
        "3.5.0".parse().unwrap()
    }

    fn joiner() -> Action {
        Action::PrepareJoiner {
            version: v35(),
            peers: Vec::new(),
        }
    }

    fn names(found: &[FoundStep]) -> Vec<(&'static str, Option<&str>)> {
        found
            .iter()
            .map(|f| (f.step.as_str(), f.member.as_deref()))
            .collect()
    }

    /// Runs ticks in turn from an empty trail, returning every step found.
    fn run(ticks: Vec<(Snapshot, Vec<ActionOutcome>)>) -> (Vec<FoundStep>, StepHistory) {
        let mut trail = StepHistory::default();
        let mut all = Vec::new();
        for (sight, outcomes) in ticks {
            let (found, next) = steps(&trail, sight, &outcomes);
            all.extend(found);
            trail = next;
        }
        (all, trail)
    }

    #[test]
    fn a_member_coming_up_shows_its_pod_running_then_serving_and_healthy_once() {
        let (found, _) = run(vec![
            (sight(&[("a", member(true, false, false))], false), vec![]),
            (sight(&[("a", member(true, true, false))], false), vec![]),
            (sight(&[("a", member(true, true, true))], true), vec![]),
            (sight(&[("a", member(true, true, true))], true), vec![]),
        ]);
        assert_eq!(
            names(&found),
            vec![
                ("pod_running", Some("a")),
                ("member_serving", Some("a")),
                ("member_healthy", Some("a")),
                ("ready", None),
                ("status_published", None),
            ]
        );
    }

    #[test]
    fn done_actions_show_as_steps_of_their_member_and_failed_ones_do_not() {
        let seed = Action::CreateSeed {
            version: v35(),
            restore: None,
        };
        let failed = ActionOutcome {
            action: joiner(),
            result: ActionResult::Failed {
                error: "no".into(),
                cause: Cause::Etcd(EtcdErrorKind::Timeout),
            },
        };
        let add = Action::AddMember {
            learner: true,
            version: v35(),
            prepared: Some("b".into()),
        };
        let promote = Action::PromoteLearner {
            id: 2,
            name: "b".into(),
        };
        let (found, _) = run(vec![
            (Snapshot::default(), vec![done(seed, "a"), failed]),
            (
                Snapshot::default(),
                vec![done(joiner(), "b"), done(add, "b")],
            ),
            (Snapshot::default(), vec![done(promote, "b")]),
        ]);
        assert_eq!(
            names(&found),
            vec![
                ("seed_pod_created", Some("a")),
                ("joiner_pod_created", Some("b")),
                ("member_added", Some("b")),
                ("learner_promoted", Some("b")),
            ]
        );
        assert!(found.iter().all(|f| f.at == StepTime::Acted));
    }

    #[test]
    fn a_lost_member_is_replaced_by_the_next_pod_made_until_its_replacement_is_healthy() {
        let up = member(true, true, true);
        let (found, trail) = run(vec![
            (sight(&[("a", up), ("b", up)], true), vec![]),
            (
                sight(&[("a", up), ("b", member(false, false, false))], false),
                vec![],
            ),
            (sight(&[("a", up)], false), vec![done(joiner(), "c")]),
            (sight(&[("a", up), ("c", up)], true), vec![]),
        ]);
        let found = names(&found);
        let after_start = &found[found
            .iter()
            .position(|f| f.0 == "status_published")
            .unwrap()
            + 1..];
        assert_eq!(
            after_start,
            vec![
                ("member_lost", Some("b")),
                ("replacement_pod_created", Some("c")),
                ("pod_running", Some("c")),
                ("member_serving", Some("c")),
                ("member_healthy", Some("c")),
                ("replacement_healthy", Some("c")),
                ("ready", None),
                ("status_published", None),
            ]
        );
        assert_eq!((trail.lost, trail.replacing.len()), (0, 0));
    }

    #[test]
    fn a_pod_the_operator_deleted_is_no_lost_member() {
        let up = member(true, true, true);
        let delete = Action::DeletePod { name: "b".into() };
        let (found, _) = run(vec![
            (
                sight(&[("a", up), ("b", up)], true),
                vec![done(delete, "b")],
            ),
            (
                sight(&[("a", up), ("b", member(false, true, false))], true),
                vec![],
            ),
            (sight(&[("a", up)], true), vec![]),
        ]);
        assert!(
            found.iter().all(|f| f.step != Step::MemberLost),
            "{found:?}"
        );
    }

    #[test]
    fn a_container_restart_shows_as_a_pod_restart_then_the_member_healthy_again() {
        let up = member(true, true, true);
        let restarted = MemberSnapshot {
            restarts: 1,
            ..member(true, true, false)
        };
        let back = MemberSnapshot { restarts: 1, ..up };
        let (found, _) = run(vec![
            (sight(&[("a", up)], true), vec![]),
            (sight(&[("a", restarted)], true), vec![]),
            (sight(&[("a", back)], true), vec![]),
        ]);
        let found = names(&found);
        assert_eq!(
            &found[found.len() - 3..],
            &[
                ("pod_restarted", Some("a")),
                ("member_serving", Some("a")),
                ("member_healthy", Some("a")),
            ]
        );
    }

    #[test]
    fn the_status_counts_as_published_only_once_written() {
        let unwritten = Snapshot {
            published_running: None,
            ..sight(&[], true)
        };
        let (found, _) = run(vec![
            (unwritten, vec![]),
            (sight(&[], true), vec![]),
            (sight(&[], true), vec![]),
        ]);
        assert_eq!(
            names(&found),
            vec![("ready", None), ("status_published", None)]
        );
    }
}
