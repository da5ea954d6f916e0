//! How closely a cluster needs watching after a tick: the lifecycle's side of the actor's
//! back-off (`TickBackoff`). Pure: the pace is read from a tick's decision and observation, and the next
//! deadline from the timers the state carries and the certificate events the adapter
//! announced. The actor turns both into the time of its next tick.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::orphans::ORPHAN_POD_GRACE;
use super::{Deadlines, Decision, DesiredCluster, Membership, Observation, Phase, PodPhase};

/// How closely a cluster needs watching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pace {
    /// The operator acted, or waits for a change it started (a seed, a joiner, an
    /// upgraded or restarted member, members restarting onto a new CA bundle): look again
    /// soon.
    Busy,
    /// Nothing to do, but not everything is well (a member unhealthy or not ready, a pod
    /// or claim out of place, a timer running, a CA rotation waiting for its re-issued
    /// certificates to reach the members): look again at the normal interval, and when
    /// the next deadline comes.
    Watchful,
    /// Every member healthy, the spec met, nothing pending: look again rarely.
    Settled,
}

impl Pace {
    /// The pace's name, for the debug view and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Pace::Busy => "Busy",
            Pace::Watchful => "Watchful",
            Pace::Settled => "Settled",
        }
    }
}

/// The pace after a tick that decided `decision` from `obs`.
pub fn pace(decision: &Decision, obs: &Observation, spec: &DesiredCluster) -> Pace {
    let state = &decision.state;
    // A rotation step that is due, and certificates to issue, are acted on by this very
    // decision; a step's restarts make the phase `Restarting`. What is left of a rotation
    // without either is a wait on a clock (the propagation of re-issued certificates),
    // whose end is the next deadline: no reason to look every follow-up.
    if !decision.actions.is_empty()
        || state.phase.is_progressing()
        || state.phase == Phase::Starting
    {
        return Pace::Busy;
    }
    if matches!(state.phase, Phase::Blocked { .. }) || !all_well(decision, obs, spec) {
        return Pace::Watchful;
    }
    Pace::Settled
}

/// Whether everything the tick saw is as it should be: as many members as the spec asks
/// for, each started, healthy, on a running ready pod; no timer running; no certificate
/// problem.
fn all_well(decision: &Decision, obs: &Observation, spec: &DesiredCluster) -> bool {
    let state = &decision.state;
    let timers_idle = state.unhealthy_since.is_empty()
        && state.unstarted_since.is_empty()
        && state.orphan_since.is_empty()
        && state.upgrade_since.is_empty()
        && state.quorum_lost_since.is_none()
        && state.recovery_since.is_none();
    let Membership::Listed { members, .. } = &obs.membership else {
        return false;
    };
    let members_well = members.len() == spec.size as usize
        && members.iter().all(|m| {
            m.started()
                && !m.is_learner
                && obs.health.get(&m.id).is_some_and(|h| h.is_healthy())
                && obs
                    .pod(&m.name)
                    .is_some_and(|p| p.phase == PodPhase::Running && p.ready && !p.terminating)
        });
    let pods_well = obs.pods.len() == members.len();
    let claims_well = obs.claims.values().all(|c| c.phase.holds_data());
    timers_idle
        && members_well
        && pods_well
        && claims_well
        && obs.services_present
        && obs.name_conflict.is_none()
        && obs.tls.problems.is_empty()
        && obs.tls.to_issue.is_empty()
        && obs.tls.rotation.step.is_none()
        && obs.tls.rotation.due.is_none()
}

/// The earliest time-based event the lifecycle knows after a tick that decided `decision`
/// from `obs`: a member's or a quorum loss's deadline running out, a certificate's
/// renewal, a recorded recovery's deadline, a CA's renewal point, the end of a rotation's propagation wait. A settled
/// cluster must be looked at again by then. `None`: nothing is due at a known time.
pub fn next_deadline(
    decision: &Decision,
    obs: &Observation,
    spec: &DesiredCluster,
    deadlines: &Deadlines,
) -> Option<Instant> {
    let state = &decision.state;
    let after = |since: &Instant, wait: Duration| *since + wait;
    let timers = state
        .unhealthy_since
        .values()
        .map(|s| after(s, deadlines.unhealthy_member))
        .chain(
            state
                .unstarted_since
                .values()
                .map(|s| after(s, deadlines.unstarted_member)),
        )
        .chain(
            state
                .upgrade_since
                .values()
                .map(|s| after(s, deadlines.upgraded_member)),
        )
        .chain(
            state
                .orphan_since
                .values()
                .map(|s| after(s, ORPHAN_POD_GRACE)),
        )
        .chain(
            state
                .quorum_lost_since
                .iter()
                .map(|s| after(s, spec.recovery.quorum_loss)),
        )
        .chain(
            state
                .recovery_since
                .iter()
                .map(|(_, s)| after(s, spec.recovery.deadline))
                .filter(|at| *at > obs.now),
        )
        .chain(
            // Only a rolling restart waits for the settle; in any other phase its end
            // would be a tick for nothing.
            state
                .settled_since
                .iter()
                .filter(|_| state.phase == Phase::Restarting)
                .map(|s| after(s, deadlines.restart_settle))
                .filter(|at| *at > obs.now),
        );
    let certificates = obs.tls.next_event_in.map(|wait| obs.now + wait);
    timers.chain(certificates).min()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::super::fixtures::{World, running_state};
    use super::super::*;
    use super::{Pace, next_deadline, pace};

    const V: &str = "3.5.21";

    fn settled(now: Instant) -> (Decision, Observation, DesiredCluster) {
        let obs = World::healthy(now, 3, V).build();
        let spec = DesiredCluster::new(3, V);
        let decision = decide(running_state(), &obs, &spec, &Deadlines::default());
        (decision, obs, spec)
    }

    #[test]
    fn a_healthy_cluster_that_meets_its_spec_is_settled_with_nothing_due() {
        let (decision, obs, spec) = settled(Instant::now());
        assert!(decision.actions.is_empty(), "{decision:?}");
        assert_eq!(pace(&decision, &obs, &spec), Pace::Settled);
        assert_eq!(
            next_deadline(&decision, &obs, &spec, &Deadlines::default()),
            None
        );
    }

    #[test]
    fn a_tick_that_acts_is_busy() {
        let now = Instant::now();
        let obs = World::healthy(now, 3, V).build();
        let spec = DesiredCluster::new(4, V);
        let decision = decide(running_state(), &obs, &spec, &Deadlines::default());
        assert!(
            !decision.actions.is_empty(),
            "scaling up acts: {decision:?}"
        );
        assert_eq!(pace(&decision, &obs, &spec), Pace::Busy);
    }

    #[test]
    fn a_phase_that_waits_for_its_own_change_is_busy_even_without_actions() {
        let (mut decision, obs, spec) = settled(Instant::now());
        decision.state.phase = Phase::Restarting;
        assert_eq!(pace(&decision, &obs, &spec), Pace::Busy);
        decision.state.phase = Phase::Starting;
        assert_eq!(pace(&decision, &obs, &spec), Pace::Busy);
    }

    #[test]
    fn a_ca_rotation_waiting_for_its_certificates_to_propagate_is_watchful_until_then() {
        let now = Instant::now();
        let (decision, mut obs, spec) = settled(now);
        obs.tls.rotation.step = Some(CaRotationStep::ReissueLeaves);
        obs.tls.next_event_in = Some(Duration::from_secs(80));
        assert_eq!(pace(&decision, &obs, &spec), Pace::Watchful);
        assert_eq!(
            next_deadline(&decision, &obs, &spec, &Deadlines::default()),
            Some(now + Duration::from_secs(80))
        );
    }

    #[test]
    fn certificates_still_to_issue_are_never_settled() {
        let (decision, mut obs, spec) = settled(Instant::now());
        obs.tls.to_issue = vec!["peer certificate due for renewal".into()];
        assert_ne!(pace(&decision, &obs, &spec), Pace::Settled);
    }

    #[test]
    fn a_member_that_does_not_answer_while_nothing_is_done_is_watchful() {
        let (decision, _, spec) = settled(Instant::now());
        let obs = World::healthy(Instant::now(), 3, V).unreachable(2).build();
        assert_eq!(pace(&decision, &obs, &spec), Pace::Watchful);
    }

    #[test]
    fn an_unready_pod_is_watchful() {
        let (decision, _, spec) = settled(Instant::now());
        let obs = World::healthy(Instant::now(), 3, V)
            .pod("m2", |p| p.ready = false)
            .build();
        assert_eq!(pace(&decision, &obs, &spec), Pace::Watchful);
    }

    #[test]
    fn a_blocked_cluster_is_watchful() {
        let (mut decision, obs, spec) = settled(Instant::now());
        decision.state.phase = Phase::Blocked {
            reason: Reason::QuorumLost,
        };
        assert_eq!(pace(&decision, &obs, &spec), Pace::Watchful);
    }

    #[test]
    fn a_running_timer_is_watchful_and_its_deadline_is_next() {
        let now = Instant::now();
        let (mut decision, obs, spec) = settled(now);
        decision.state.unhealthy_since.insert(2, now);
        let deadlines = Deadlines::default();
        assert_eq!(pace(&decision, &obs, &spec), Pace::Watchful);
        assert_eq!(
            next_deadline(&decision, &obs, &spec, &deadlines),
            Some(now + deadlines.unhealthy_member)
        );
    }

    #[test]
    fn a_quorum_loss_is_due_after_the_specs_quorum_loss_seconds() {
        let now = Instant::now();
        let (mut decision, obs, mut spec) = settled(now);
        spec.recovery.quorum_loss = Duration::from_secs(15);
        decision.state.quorum_lost_since = Some(now);
        assert_eq!(
            next_deadline(&decision, &obs, &spec, &Deadlines::default()),
            Some(now + Duration::from_secs(15))
        );
    }

    #[test]
    fn a_recorded_recovery_is_due_at_the_specs_recovery_deadline() {
        let now = Instant::now();
        let (mut decision, obs, mut spec) = settled(now);
        spec.recovery.deadline = Duration::from_secs(90);
        decision.state.recovery_since = Some(("dead: lost m2".into(), now));
        assert_eq!(pace(&decision, &obs, &spec), Pace::Watchful);
        assert_eq!(
            next_deadline(&decision, &obs, &spec, &Deadlines::default()),
            Some(now + Duration::from_secs(90))
        );
    }

    #[test]
    fn a_certificate_event_keeps_a_settled_cluster_settled_but_sets_its_deadline() {
        let now = Instant::now();
        let (decision, mut obs, spec) = settled(now);
        obs.tls.next_event_in = Some(Duration::from_secs(7));
        assert_eq!(pace(&decision, &obs, &spec), Pace::Settled);
        assert_eq!(
            next_deadline(&decision, &obs, &spec, &Deadlines::default()),
            Some(now + Duration::from_secs(7))
        );
    }

    #[test]
    fn the_earliest_of_several_deadlines_wins() {
        let now = Instant::now();
        let (mut decision, mut obs, spec) = settled(now);
        obs.tls.next_event_in = Some(Duration::from_secs(300));
        decision.state.upgrade_since.insert("m1".into(), now);
        let deadlines = Deadlines::default();
        assert_eq!(
            next_deadline(&decision, &obs, &spec, &deadlines),
            Some(now + deadlines.upgraded_member)
        );
    }
}
