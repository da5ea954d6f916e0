//! What a tick reports: the EtcdCluster status, computed from the decision and observation.

use serde::Serialize;

use crate::lifecycle::{Decision, DesiredCluster, Membership, Observation, Phase, Reason};

/// Condition type: a quorum of voting members is healthy and serving.
pub const AVAILABLE: &str = "Available";
/// Condition type: the operator is changing the cluster toward its spec.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: some member is unhealthy, or the operator cannot proceed.
pub const DEGRADED: &str = "Degraded";

/// One status condition, before it becomes a Kubernetes `Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConditionReport {
    /// `Available`, `Progressing` or `Degraded`.
    pub kind: &'static str,
    /// True or False.
    pub status: bool,
    /// CamelCase reason.
    pub reason: String,
    /// For people.
    pub message: String,
}

/// The status one tick publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusReport {
    /// Phase name.
    pub phase: String,
    /// Reason of the last decision.
    pub reason: String,
    /// Message of the last decision.
    pub message: String,
    /// Members in etcd's member list (0 when it could not be read).
    pub size: usize,
    /// Names of started, healthy members.
    pub ready: Vec<String>,
    /// Names of members that are not ready (not started, unhealthy, or without a pod).
    pub unready: Vec<String>,
    /// Oldest etcd version any member runs.
    pub current_version: Option<String>,
    /// Version the spec asks for.
    pub target_version: String,
    /// Available, Progressing, Degraded.
    pub conditions: Vec<ConditionReport>,
    /// `spec.paused`.
    pub paused: bool,
    /// Generation of the spec this status answers.
    pub observed_generation: i64,
}

/// Computes the status for a decision taken on an observation.
pub fn summarize(decision: &Decision, obs: &Observation, spec: &DesiredCluster) -> StatusReport {
    let mut ready = Vec::new();
    let mut unready = Vec::new();
    let mut voters = 0;
    let mut healthy_voters = 0;
    if let Membership::Listed { members } = &obs.membership {
        for m in members {
            let healthy = m.started() && obs.health.get(&m.id).is_some_and(|h| h.is_healthy());
            let name = m.pod_name().unwrap_or_else(|| format!("{:x}", m.id));
            if !m.is_learner {
                voters += 1;
                healthy_voters += usize::from(healthy);
            }
            if healthy {
                ready.push(name);
            } else {
                unready.push(name);
            }
        }
    }
    if !matches!(obs.membership, Membership::Listed { .. }) && decision.state.bootstrapped {
        // No member answers, but the cluster has members: its pods are the members we know
        // of, all unready. The status must not forget them (it is what keeps a restarted
        // operator from ever bootstrapping this cluster again).
        unready.extend(obs.pods.iter().map(|p| p.name.clone()));
    }
    ready.sort();
    unready.sort();
    let listed = matches!(obs.membership, Membership::Listed { .. });
    let size = ready.len() + unready.len();
    let current_version = obs
        .health
        .values()
        .filter_map(|h| h.version.clone())
        .min()
        .map(|v| v.to_string());
    let why = &decision.why;
    let phase = &decision.state.phase;
    let quorum = listed && voters > 0 && healthy_voters > voters / 2;

    let available = ConditionReport {
        kind: AVAILABLE,
        status: quorum,
        reason: if quorum {
            "QuorumHealthy".into()
        } else if matches!(phase, Phase::Bootstrapping) {
            "Bootstrapping".into()
        } else {
            Reason::QuorumLost.as_str().into()
        },
        message: format!("{healthy_voters} of {voters} voting members healthy"),
    };
    let progressing = ConditionReport {
        kind: PROGRESSING,
        status: phase.is_progressing(),
        reason: why.reason.as_str().into(),
        message: why.message.clone(),
    };
    let blocked = matches!(phase, Phase::Blocked { .. });
    let degraded_status = blocked || !unready.is_empty();
    let degraded = ConditionReport {
        kind: DEGRADED,
        status: degraded_status,
        reason: if blocked {
            why.reason.as_str().into()
        } else if matches!(phase, Phase::Bootstrapping) {
            "Bootstrapping".into()
        } else if degraded_status {
            "MembersUnhealthy".into()
        } else {
            "AllMembersHealthy".into()
        },
        message: if blocked {
            why.message.clone()
        } else if degraded_status {
            format!("not ready: {}", unready.join(", "))
        } else {
            format!("{} members healthy", ready.len())
        },
    };
    StatusReport {
        phase: phase.name().to_string(),
        reason: why.reason.as_str().to_string(),
        message: why.message.clone(),
        size,
        ready,
        unready,
        current_version,
        target_version: spec.version.clone(),
        conditions: vec![available, progressing, degraded],
        paused: spec.paused,
        observed_generation: spec.generation,
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::lifecycle::fixtures::{World, running_state};
    use crate::lifecycle::{Deadlines, decide};

    fn report(obs: &Observation, spec: &DesiredCluster) -> StatusReport {
        let d = decide(running_state(), obs, spec, &Deadlines::default());
        summarize(&d, obs, spec)
    }

    fn condition<'a>(r: &'a StatusReport, kind: &str) -> &'a ConditionReport {
        r.conditions.iter().find(|c| c.kind == kind).unwrap()
    }

    #[test]
    fn converged_cluster_is_available_not_progressing_not_degraded() {
        let obs = World::healthy(Instant::now(), 3, "3.5.21").build();
        let r = report(&obs, &DesiredCluster::new(3, "3.5.21"));
        assert_eq!(r.phase, "Running");
        assert_eq!(r.ready, vec!["m1", "m2", "m3"]);
        assert_eq!(r.current_version.as_deref(), Some("3.5.21"));
        assert!(condition(&r, AVAILABLE).status);
        assert!(!condition(&r, PROGRESSING).status);
        assert!(!condition(&r, DEGRADED).status);
    }

    #[test]
    fn unhealthy_member_is_listed_unready_and_degrades_the_cluster() {
        let obs = World::healthy(Instant::now(), 3, "3.5.21")
            .unreachable(3)
            .build();
        let r = report(&obs, &DesiredCluster::new(3, "3.5.21"));
        assert_eq!(r.unready, vec!["m3"]);
        assert!(condition(&r, AVAILABLE).status);
        let degraded = condition(&r, DEGRADED);
        assert!(degraded.status);
        assert_eq!(degraded.reason, "MembersUnhealthy");
    }

    #[test]
    fn lost_quorum_is_unavailable_and_degraded_with_the_reason() {
        let obs = World::healthy(Instant::now(), 3, "3.5.21")
            .unreachable(2)
            .unreachable(3)
            .build();
        let r = report(&obs, &DesiredCluster::new(3, "3.5.21"));
        assert!(!condition(&r, AVAILABLE).status);
        assert_eq!(condition(&r, DEGRADED).reason, "QuorumLost");
        assert_eq!(r.phase, "Blocked");
    }

    #[test]
    fn unreachable_cluster_that_had_members_lists_its_pods_as_unready() {
        let obs = World::healthy(Instant::now(), 3, "3.5.21")
            .etcd_down()
            .build();
        let r = report(&obs, &DesiredCluster::new(3, "3.5.21"));
        assert_eq!(r.phase, "Blocked");
        assert_eq!(r.unready, vec!["m1", "m2", "m3"]);
        assert!(r.ready.is_empty());
    }

    #[test]
    fn refused_downgrade_shows_in_progressing_with_its_reason() {
        let obs = World::healthy(Instant::now(), 3, "3.5.21").build();
        let r = report(&obs, &DesiredCluster::new(3, "3.4.23"));
        let p = condition(&r, PROGRESSING);
        assert!(!p.status);
        assert_eq!(p.reason, "DowngradeRefused");
        assert_eq!(r.target_version, "3.4.23");
    }
}
