//! Which phase may follow which: the state machine's guards, in one place.
//!
//! `decide` derives a phase from each observation; this module is the one check every
//! decision passes before anything is executed. "Bootstrapped" means a member of the cluster has
//! answered (see [`BootstrapStage`](super::BootstrapStage)).
//!
//! | to | allowed when |
//! | --- | --- |
//! | `Starting` | never: it is only a new actor's first phase |
//! | `Bootstrapping` | the cluster is not bootstrapped, or it is and was `Bootstrapping` (the seed answered and is still settling) |
//! | `Running`, `Scaling`, `Upgrading`, `Recovering`, `Restarting` | the cluster is bootstrapped |
//! | `Paused`, `Blocked` | always |
//!
//! And whatever the phase: a bootstrapped cluster gets no seed action (`CreateSeed`, `StartSeed`),
//! and only a bootstrapped cluster gets a recovery action (`BeginRecovery`, `ForceNewCluster`,
//! `StartRecoverySeed`, `FinishRecovery`), in phase `Recovering`.
//!
//! A decision that breaks a rule is a bug in the decision function; it is replaced by
//! `Blocked` with no actions, so a bug stops the operator instead of acting on a cluster.

use super::{Action, Decision, Phase, Reason, Why};

/// A phase change the lifecycle forbids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the phase change {from} -> {to} is not allowed: {rule}")]
pub(crate) struct IllegalTransition {
    /// The phase the cluster was in.
    pub from: String,
    /// The phase the decision chose.
    pub to: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

/// Checks that `to`, with `actions`, may follow `from`; `bootstrapped` says whether the cluster
/// exists (see [`BootstrapStage`](super::BootstrapStage)).
pub fn check(
    from: &Phase,
    to: &Phase,
    actions: &[Action],
    bootstrapped: bool,
) -> Result<(), IllegalTransition> {
    let seeds = actions
        .iter()
        .any(|a| matches!(a, Action::CreateSeed { .. } | Action::StartSeed { .. }));
    let recovers = actions.iter().any(|a| {
        matches!(
            a,
            Action::BeginRecovery { .. }
                | Action::ForceNewCluster { .. }
                | Action::StartRecoverySeed { .. }
                | Action::FinishRecovery { .. }
        )
    });
    let broken = match to {
        _ if bootstrapped && seeds => Some("a cluster that exists is never seeded again"),
        _ if recovers && !(bootstrapped && *to == Phase::Recovering) => {
            Some("only a cluster that exists is recovered, in phase Recovering")
        }
        Phase::Starting => Some("Starting is only the phase of an actor that has not decided yet"),
        Phase::Bootstrapping if bootstrapped && *from != Phase::Bootstrapping => {
            Some("a cluster that exists is never bootstrapped again")
        }
        Phase::Running
        | Phase::Scaling { .. }
        | Phase::Upgrading { .. }
        | Phase::Recovering
        | Phase::Restarting
            if !bootstrapped =>
        {
            Some("only a cluster that exists can run, scale, upgrade, recover or restart")
        }
        _ => None,
    };
    match broken {
        None => Ok(()),
        Some(rule) => Err(IllegalTransition {
            from: from.to_string(),
            to: to.to_string(),
            rule,
        }),
    }
}

/// Lets `decision` through when it keeps the rules; otherwise replaces it by `Blocked`
/// with no actions, saying which rule it broke.
pub(super) fn guard(from: &Phase, decision: Decision, bootstrapped: bool) -> Decision {
    let Err(illegal) = check(from, &decision.state.phase, &decision.actions, bootstrapped) else {
        return decision;
    };
    let why = Why::new(
        Reason::IllegalTransition,
        format!(
            "{illegal} (the decision was: {}); nothing is done. This is a bug in the \
             operator: please report it with this message",
            decision.why.message
        ),
    );
    let mut state = decision.state;
    state.phase = Phase::Blocked { reason: why.reason };
    Decision {
        state,
        actions: Vec::new(),
        why,
    }
}

/// The phase a decision keeps when it does not change what the cluster is doing: the
/// current one, or `Recovering` on an actor's first decision (repairs before anything else).
pub(crate) fn continuing(current: &Phase) -> Phase {
    match current {
        Phase::Starting => Phase::Recovering,
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::{State, Version};

    fn every_phase() -> Vec<Phase> {
        let v = |s: &str| s.parse::<Version>().unwrap();
        vec![
            Phase::Starting,
            Phase::Bootstrapping,
            Phase::Running,
            Phase::Scaling { from: 1, to: 3 },
            Phase::Upgrading {
                from: v("3.5.0"),
                to: v("3.6.0"),
            },
            Phase::Recovering,
            Phase::Restarting,
            Phase::Paused,
            Phase::Blocked {
                reason: Reason::QuorumLost,
            },
        ]
    }

    fn seed_actions() -> [Action; 2] {
        let version: Version = "3.5.0".parse().unwrap();
        [
            Action::CreateSeed {
                version: version.clone(),
                restore: None,
            },
            Action::StartSeed {
                name: "demo-abcde".into(),
                token: "t".into(),
                version,
                restore: None,
            },
        ]
    }

    #[test]
    fn no_phase_ever_leads_back_to_starting() {
        for from in every_phase() {
            for bootstrapped in [false, true] {
                assert!(
                    check(&from, &Phase::Starting, &[], bootstrapped).is_err(),
                    "{from}"
                );
            }
        }
    }

    #[test]
    fn a_cluster_that_exists_never_goes_back_to_bootstrapping() {
        for from in every_phase() {
            check(&from, &Phase::Bootstrapping, &[], false).unwrap();
            if from == Phase::Bootstrapping {
                // The seed answered: the cluster is bootstrapped and its bootstrap is finishing.
                check(&from, &Phase::Bootstrapping, &[], true).unwrap();
                continue;
            }
            let err = check(&from, &Phase::Bootstrapping, &[], true).unwrap_err();
            assert_eq!(
                err.rule,
                "a cluster that exists is never bootstrapped again"
            );
        }
    }

    #[test]
    fn a_cluster_that_exists_is_never_seeded_again_whatever_the_phase() {
        for from in every_phase() {
            for to in every_phase() {
                for seed in seed_actions() {
                    let err = check(&from, &to, std::slice::from_ref(&seed), true).unwrap_err();
                    assert_eq!(err.rule, "a cluster that exists is never seeded again");
                }
            }
        }
        check(
            &Phase::Starting,
            &Phase::Bootstrapping,
            &seed_actions(),
            false,
        )
        .unwrap();
    }

    #[test]
    fn only_a_cluster_that_exists_runs_scales_upgrades_recovers_or_restarts() {
        let working: Vec<Phase> = every_phase()
            .into_iter()
            .filter(|p| {
                matches!(
                    p,
                    Phase::Running
                        | Phase::Scaling { .. }
                        | Phase::Upgrading { .. }
                        | Phase::Recovering
                        | Phase::Restarting
                )
            })
            .collect();
        assert_eq!(working.len(), 5);
        for from in every_phase() {
            for to in &working {
                assert!(check(&from, to, &[], false).is_err(), "{from} -> {to}");
                check(&from, to, &[], true).unwrap();
            }
        }
    }

    #[test]
    fn pausing_and_blocking_are_allowed_from_every_phase() {
        for from in every_phase() {
            for to in [
                Phase::Paused,
                Phase::Blocked {
                    reason: Reason::EtcdUnreachable,
                },
            ] {
                for bootstrapped in [false, true] {
                    check(&from, &to, &[], bootstrapped).unwrap();
                }
            }
        }
    }

    #[test]
    fn a_decision_that_breaks_a_rule_is_replaced_by_blocked_with_no_actions() {
        let reseed = Decision {
            state: State {
                phase: Phase::Bootstrapping,
                ..State::default()
            },
            actions: seed_actions().to_vec(),
            why: Why::new(Reason::CreatingSeed, "creating the seed member"),
        };
        let d = guard(&Phase::Running, reseed.clone(), true);
        assert_eq!(
            d.state.phase,
            Phase::Blocked {
                reason: Reason::IllegalTransition
            }
        );
        assert!(d.actions.is_empty());
        assert!(
            d.why.message.contains("never seeded again")
                && d.why.message.contains("creating the seed member"),
            "{}",
            d.why.message
        );
        assert_eq!(guard(&Phase::Starting, reseed.clone(), false), reseed);
    }

    #[test]
    fn a_first_decision_that_changes_nothing_counts_as_recovering() {
        assert_eq!(continuing(&Phase::Starting), Phase::Recovering);
        assert_eq!(continuing(&Phase::Running), Phase::Running);
    }
}
