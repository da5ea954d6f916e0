//! The report step of a tick, in one place: from what was decided, observed and done, the
//! status to publish and the Events to raise. Pure: no I/O.
//!
//! A tick reads observe → decide → execute → **report** → publish.

use serde::{Serialize, Serializer};

use crate::event::{EventRecord, EventType};
use crate::lifecycle::{
    Action, AlarmKind, BootstrapRecord, BootstrapStage, CaRotationStep, CertificateInfo,
    Compaction, Decision, DesiredCluster, Membership, Observation, Phase, Reason, StorageState,
    TlsMode,
};
use crate::outcome::{ActionOutcome, ActionResult};

/// Condition type: a quorum of voting members is healthy and serving.
pub(crate) const AVAILABLE: &str = "Available";
/// Condition type: the operator is changing the cluster toward its spec.
pub(crate) const PROGRESSING: &str = "Progressing";
/// Condition type: some member is unhealthy, or the operator cannot proceed.
pub(crate) const DEGRADED: &str = "Degraded";
/// Condition type: every member pod is built from the current repository and pod policy.
pub(crate) const POD_POLICY_APPLIED: &str = "PodPolicyApplied";
/// Condition: every member's claim asks for, and has, the spec's storage (only for
/// members on claims).
pub(crate) const VOLUMES_SIZED: &str = "VolumesSized";
/// Condition: no alarm, and every member's backend well under its quota (once a member
/// reported its size).
pub(crate) const STORAGE: &str = "Storage";

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
    /// Phase.
    #[serde(serialize_with = "phase_name")]
    pub phase: Phase,
    /// Reason of the last decision.
    pub reason: Reason,
    /// Message of the last decision.
    pub message: String,
    /// Members in etcd's member list (0 when it could not be read).
    pub size: usize,
    /// Names of started, healthy members.
    pub ready: Vec<String>,
    /// Names of members that are not ready (not started, unhealthy, or without a pod).
    pub unready: Vec<String>,
    /// Every member etcd lists, one by one (empty when the list could not be read).
    pub details: Vec<MemberReport>,
    /// Oldest etcd version any member runs.
    pub current_version: Option<String>,
    /// Version the spec asks for.
    pub target_version: String,
    /// The fullest member's backend, in percent of its quota, once a member reported
    /// its size.
    pub quota_used_percent: Option<u64>,
    /// Available, Progressing, Degraded.
    pub conditions: Vec<ConditionReport>,
    /// `spec.paused`.
    pub paused: bool,
    /// Generation of the spec this status answers.
    pub observed_generation: i64,
    /// The bootstrap record, with the cluster ID once a member answered. `None` only
    /// before the first seed is recorded; the status never loses a record it holds.
    pub bootstrap: Option<BootstrapRecord>,
    /// A version an upgraded member could not run, while the spec asks for it.
    pub failed_version: Option<String>,
    /// TLS, when the spec asks for it.
    pub tls: Option<TlsReport>,
    /// The newest revision a member reports, else the one last published: the last known
    /// revision a recovery from a backup measures its loss against. (`status.recovery`
    /// is written by the recovery itself, never by the status report.)
    pub revision: Option<i64>,
    /// How the cluster's history is compacted, and the revision the operator last
    /// compacted it to.
    pub compaction: CompactionReport,
}

/// `status.compaction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CompactionReport {
    /// What compacts and how (`ByEtcd`: the user's `etcdEnv` has etcd do it).
    pub mode: Compaction,
    /// The revision the operator last compacted the history to.
    pub revision: Option<i64>,
}

/// `status.TLS`: how the cluster's traffic is secured, and its certificates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TlsReport {
    /// Static or Auto.
    pub mode: TlsMode,
    /// The certificates in use, with their expiries and renewals.
    pub certificates: Vec<CertificateInfo>,
    /// The earliest planned renewal.
    pub next_rotation: Option<String>,
    /// The step of the CA rotation in progress, if one is.
    pub ca_rotation: Option<String>,
}

/// One member as the status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberReport {
    /// Member (and pod) name; for a member added but not started, the name it was given.
    pub name: String,
    /// etcd member ID.
    pub id: u64,
    /// A voting member (not a learner).
    pub voter: bool,
    /// Started and healthy.
    pub ready: bool,
    /// Restarts of its etcd container in place.
    pub restarts: u32,
    /// Its data is on a PersistentVolumeClaim.
    pub on_claim: bool,
    /// Its backend database's size, in bytes, as it last reported.
    pub db_size: Option<u64>,
    /// The part of it in use, in bytes.
    pub db_size_in_use: Option<u64>,
    /// Its backend quota, in bytes.
    pub quota: u64,
    /// The alarms etcd raised for it (`NOSPACE`, `CORRUPT`).
    pub alarms: Vec<AlarmKind>,
    /// The revision of its key-value store, as it last reported.
    pub revision: Option<i64>,
}

/// Every listed member, sorted by name.
fn member_details(obs: &Observation, quota: u64) -> Vec<MemberReport> {
    let Membership::Listed { members, .. } = &obs.membership else {
        return Vec::new();
    };
    let alarms = crate::lifecycle::alarms(obs);
    let mut details: Vec<MemberReport> = members
        .iter()
        .map(|m| {
            let name = m.pod_name().unwrap_or_else(|| format!("{:x}", m.id));
            let health = obs.health.get(&m.id);
            MemberReport {
                ready: m.started() && health.is_some_and(|h| h.is_healthy()),
                db_size: health.and_then(|h| h.db_size),
                db_size_in_use: health.and_then(|h| h.db_size_in_use),
                revision: health.and_then(|h| h.revision),
                quota,
                alarms: alarms
                    .iter()
                    .filter(|a| a.member == m.id)
                    .map(|a| a.kind)
                    .collect(),
                restarts: obs.pod(&name).map_or(0, |p| p.restarts),
                on_claim: obs.claims.contains_key(&name),
                id: m.id,
                voter: !m.is_learner,
                name,
            }
        })
        .collect();
    details.sort_by(|a, b| a.name.cmp(&b.name));
    details
}

fn phase_name<S: Serializer>(phase: &Phase, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(phase.name())
}

/// What one tick reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The status to publish (when it differs from the last one).
    pub status: StatusReport,
    /// The Events to raise.
    pub events: Vec<EventRecord>,
}

/// What an actor reported on its earlier ticks, which a report compares with so that a
/// refusal's Event, and a change of the `Storage` condition's, is raised once. A fresh
/// actor has neither, and compares with the object's status instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Previous {
    /// The reason of its last decision.
    pub reason: Option<Reason>,
    /// The last reason of the `Storage` condition it reported (kept while a tick reports
    /// no such condition).
    pub storage: Option<String>,
}

impl Previous {
    /// What to compare the next tick with, once `status` is reported for `decision`.
    pub fn after(&self, decision: &Decision, status: &StatusReport) -> Previous {
        let storage = status
            .conditions
            .iter()
            .find(|c| c.kind == STORAGE)
            .map(|c| c.reason.clone());
        Previous {
            reason: Some(decision.why.reason),
            storage: storage.or_else(|| self.storage.clone()),
        }
    }
}

/// Reports a tick: its status, and an Event for every change made, every failure, every
/// refusal the cluster was not already reported in, and every change of the `Storage`
/// condition (`previous`: what this actor reported before).
pub fn report(
    decision: &Decision,
    obs: &Observation,
    spec: &DesiredCluster,
    outcomes: &[ActionOutcome],
    previous: &Previous,
) -> Report {
    let mut status = summarize(decision, obs, spec);
    if let Some(error) = outcomes.iter().find_map(|o| match &o.result {
        ActionResult::Failed { error, .. } => Some(error),
        _ => None,
    }) {
        status.message = format!("{} (last step failed: {error})", status.message);
    }
    let compaction_failed = outcomes.iter().any(|o| {
        matches!(o.action, Action::Compact { .. })
            && matches!(o.result, ActionResult::Failed { .. })
    });
    if compaction_failed {
        // Not compacted after all; the next one is due a period later.
        status.compaction.revision = obs.recorded.compacted;
    }
    let mut events: Vec<EventRecord> = outcomes.iter().filter_map(outcome_event).collect();
    let why = &decision.why;
    let already = match previous.reason {
        Some(reason) => reason == why.reason,
        None => obs.recorded.reason == why.reason.as_str(),
    };
    if why.reason.is_refusal() && !already {
        events.push(EventRecord {
            kind: EventType::Warning,
            reason: why.reason.as_str().to_string(),
            action: "Decide".into(),
            note: why.message.clone(),
            member: None,
        });
    }
    events.extend(storage_event(&status, obs, previous));
    Report { status, events }
}

/// The Event of a change of the `Storage` condition since `previous` (a fresh actor: since
/// the object's status); none for a cluster first seen healthy.
fn storage_event(
    status: &StatusReport,
    obs: &Observation,
    previous: &Previous,
) -> Option<EventRecord> {
    let now = status.conditions.iter().find(|c| c.kind == STORAGE)?;
    let before = previous
        .storage
        .as_deref()
        .or(obs.recorded.storage.as_deref());
    if before == Some(now.reason.as_str()) || (before.is_none() && now.status) {
        return None;
    }
    Some(EventRecord {
        kind: if now.status {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: format!("Storage{}", now.reason),
        action: "Observe".into(),
        note: now.message.clone(),
        member: None,
    })
}

fn outcome_event(outcome: &ActionOutcome) -> Option<EventRecord> {
    let action = &outcome.action;
    let (kind, reason, note, member) = match &outcome.result {
        ActionResult::Done { .. }
            if matches!(
                action,
                Action::EnsureServices
                    | Action::LabelVoter { .. }
                    | Action::SetDisruptionBudget { .. }
                    // Their Events are raised as they run, before the recovery acts.
                    | Action::BeginRecovery { .. }
                    | Action::FinishRecovery { .. }
            ) =>
        {
            return None;
        }
        ActionResult::NotYet { .. } => return None,
        ActionResult::Done { note, member } => (
            EventType::Normal,
            event_reason(action),
            note.clone(),
            member.clone(),
        ),
        ActionResult::Failed { error, cause } => (
            EventType::Warning,
            "ActionFailed",
            format!("{} failed ({}): {error}", action.kind(), cause.label()),
            None,
        ),
    };
    Some(EventRecord {
        kind,
        reason: reason.to_string(),
        action: action.kind().to_string(),
        note,
        member,
    })
}

fn event_reason(action: &Action) -> &'static str {
    match action {
        Action::IssueCertificates => "CertificatesIssued",
        Action::AdvanceCaRotation { to, .. } => match to {
            Some(CaRotationStep::TrustNewCa) => "CARotationStarted",
            Some(CaRotationStep::ReissueLeaves) => "CARotationReissuing",
            Some(CaRotationStep::DropOldCa) => "CARotationDroppingOldCA",
            None => "CARotationCompleted",
        },
        Action::EnsureServices => "ServicesEnsured",
        Action::CreateSeed { .. } => "SeedCreated",
        Action::StartSeed { .. } => "SeedStarted",
        Action::PrepareJoiner { .. } => "JoinerPrepared",
        Action::AddMember { .. } => "MemberAdded",
        Action::ResumeJoin { .. } => "JoinResumed",
        Action::RestartMember { .. } => "MemberRestarted",
        Action::ExpandClaim { .. } => "ClaimExpanded",
        Action::PromoteLearner { .. } => "LearnerPromoted",
        Action::MoveLeader { .. } => "LeaderMoved",
        Action::DisarmAlarm { .. } => "AlarmDisarmed",
        Action::Compact { .. } => "HistoryCompacted",
        Action::Defragment { .. } => "MemberDefragmented",
        Action::RemoveMember { .. } => "MemberRemoved",
        Action::DeletePod { .. } => "PodDeleted",
        Action::RecreatePod { .. } => "PodRecreated",
        Action::UpgradeMember { .. } => "MemberUpgraded",
        Action::RollBackMember { .. } => "MemberRolledBack",
        Action::ConfirmUpgrade { .. } => "UpgradeConfirmed",
        Action::LabelVoter { .. } => "VoterLabelled",
        Action::SetDisruptionBudget { .. } => "DisruptionBudgetSet",
        Action::BeginRecovery { .. } => "RecoveryStarted",
        Action::ForceNewCluster { .. } => "SurvivorRestartedAlone",
        Action::StartRecoverySeed { .. } => "RecoverySeedStarted",
        Action::FinishRecovery { .. } => "RecoveryFinished",
    }
}

/// Member names by readiness: from etcd's member list when it answered; otherwise, for a
/// cluster that exists, every member the status remembered or a pod stands for, unready.
fn members(decision: &Decision, obs: &Observation) -> (Vec<String>, Vec<String>, usize, usize) {
    let (mut ready, mut unready) = (Vec::new(), Vec::new());
    let (mut voters, mut healthy_voters) = (0, 0);
    match &obs.membership {
        Membership::Listed { members, .. } => {
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
        Membership::Unreachable { .. }
            if BootstrapStage::of(&decision.state, obs).is_bootstrapped() =>
        {
            unready.extend(obs.recorded.members.iter().cloned());
            unready.extend(
                obs.pods
                    .iter()
                    .filter(|p| !p.awaits_membership())
                    .map(|p| p.name.clone()),
            );
        }
        Membership::Unreachable { .. } => {}
    }
    ready.sort();
    unready.sort();
    unready.dedup();
    (ready, unready, voters, healthy_voters)
}

/// The record to keep: the one the status holds, with the cluster ID this tick learned.
fn bootstrap(decision: &Decision, obs: &Observation) -> Option<BootstrapRecord> {
    let known = decision.state.cluster_id;
    match (&obs.recorded.bootstrap, known) {
        (Some(record), Some(id)) => Some(record.with_cluster_id(id)),
        (Some(record), None) => Some(record.clone()),
        (None, Some(id)) => Some(BootstrapRecord {
            seed: None,
            token: None,
            cluster_id: Some(id),
        }),
        (None, None) => None,
    }
}

/// `Storage`: what the members' alarms and backend sizes say (see the lifecycle's
/// `space`). `None` until a member has reported its size or an alarm.
fn storage_condition(
    decision: &Decision,
    obs: &Observation,
    spec: &DesiredCluster,
) -> Option<ConditionReport> {
    let reported = obs
        .health
        .values()
        .any(|h| h.db_size.is_some() || !h.alarms.is_empty());
    if !reported {
        return None;
    }
    let (mut state, mut message) = crate::lifecycle::storage(obs, spec.quota_backend_bytes);
    if let Some(found) = &decision.state.divergence
        && state != StorageState::Corrupt
    {
        state = StorageState::Corrupt;
        message = format!(
            "the members' hashes at revision {} differ (member IDs {}); {message}",
            found.revision,
            found
                .members
                .iter()
                .map(|id| format!("{id:x}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Some(ConditionReport {
        kind: STORAGE,
        status: state == StorageState::Healthy,
        reason: state.as_str().into(),
        message,
    })
}

/// Whether the members' claims have the storage the spec asks for: growing (requested,
/// not there yet), refused (the StorageClass does not allow expansion, or the spec asks
/// for less: a claim never shrinks), or current. `None` when members are not on claims.
fn volumes_condition(obs: &Observation, spec: &DesiredCluster) -> Option<ConditionReport> {
    let storage = spec.storage.as_ref()?;
    if obs.claims.is_empty() {
        return None;
    }
    let names = |keep: &dyn Fn(&crate::lifecycle::Claim) -> bool| -> Vec<&str> {
        let held = obs.claims.iter().filter(|(_, c)| c.phase.holds_data());
        held.filter(|(_, c)| keep(c))
            .map(|(n, _)| n.as_str())
            .collect()
    };
    let want = storage.bytes;
    let larger = names(&|c| c.requested_bytes.is_some_and(|r| r > want));
    let smaller = names(&|c| c.requested_bytes.is_some_and(|r| r < want));
    let growing = names(&|c| c.capacity_bytes.is_some_and(|c| c < want));
    let q = &storage.quantity;
    let (status, reason, message) = if !larger.is_empty() {
        let m = format!(
            "claims never shrink: {} keep more than the {q} asked for",
            larger.join(", ")
        );
        (false, "ShrinkNotAllowed", m)
    } else if !smaller.is_empty() && !obs.claim_class.as_ref().is_some_and(|c| c.allows_expansion) {
        let class = obs
            .claim_class
            .as_ref()
            .map_or("(unknown)", |c| c.name.as_str());
        let m = format!(
            "StorageClass {class} does not allow volume expansion: {} stay below {q}",
            smaller.join(", ")
        );
        (false, "ExpansionNotAllowed", m)
    } else if !smaller.is_empty() || !growing.is_empty() {
        let mut all = [smaller, growing].concat();
        all.sort_unstable();
        all.dedup();
        (
            false,
            "Expanding",
            format!("growing {} to {q}", all.join(", ")),
        )
    } else {
        (true, "Current", format!("every member's claim has {q}"))
    };
    Some(ConditionReport {
        kind: VOLUMES_SIZED,
        status,
        reason: reason.into(),
        message,
    })
}

/// Whether the member pods run the current repository and pod policy. A change reaches
/// running members by a rolling restart (see the lifecycle's `rollout`); until it has,
/// this names the members it has not reached, and why when it cannot.
fn pod_policy_condition(
    decision: &Decision,
    obs: &Observation,
    spec: &DesiredCluster,
) -> ConditionReport {
    let mut older: Vec<&str> = obs
        .pods
        .iter()
        .filter(|p| !p.is_dead())
        .filter(|p| crate::lifecycle::is_stale(p, spec, obs))
        .map(|p| p.name.as_str())
        .collect();
    older.sort_unstable();
    if older.is_empty() {
        return ConditionReport {
            kind: POD_POLICY_APPLIED,
            status: true,
            reason: "Current".into(),
            message: "every member pod is built from the current spec.pod and repository".into(),
        };
    }
    let (reason, message) = match decision.why.reason {
        Reason::RestartRefused => ("RestartRefused", decision.why.message.clone()),
        _ => (
            "Restarting",
            format!(
                "spec.pod, spec.repository, spec.TLS or the trusted CA bundle changed; members {} \
                 still run pods built from the older one and are restarted onto it one at a time (followers \
                 first, the leader last), each while every member is healthy",
                older.join(", ")
            ),
        ),
    };
    ConditionReport {
        kind: POD_POLICY_APPLIED,
        status: false,
        reason: reason.into(),
        message,
    }
}

/// Computes the status for a decision taken on an observation.
pub(crate) fn summarize(
    decision: &Decision,
    obs: &Observation,
    spec: &DesiredCluster,
) -> StatusReport {
    let (ready, unready, voters, healthy_voters) = members(decision, obs);
    let why = &decision.why;
    let phase = &decision.state.phase;
    let conditions = [
        available_condition(obs, phase, voters, healthy_voters),
        ConditionReport {
            kind: PROGRESSING,
            status: phase.is_progressing(),
            reason: why.reason.as_str().into(),
            message: why.message.clone(),
        },
        degraded_condition(decision, &ready, &unready),
        pod_policy_condition(decision, obs, spec),
    ];
    StatusReport {
        phase: phase.clone(),
        reason: why.reason,
        message: why.message.clone(),
        size: ready.len() + unready.len(),
        ready,
        unready,
        details: member_details(obs, spec.quota_backend_bytes),
        current_version: obs
            .health
            .values()
            .filter_map(|h| h.version.clone())
            .min()
            .map(|v| v.to_string()),
        target_version: spec.version.clone(),
        quota_used_percent: crate::lifecycle::fullest(obs, spec.quota_backend_bytes)
            .map(|f| crate::lifecycle::percent_of(f.size, spec.quota_backend_bytes)),
        conditions: conditions
            .into_iter()
            .chain(volumes_condition(obs, spec))
            .chain(storage_condition(decision, obs, spec))
            .collect(),
        paused: spec.paused,
        observed_generation: spec.generation,
        bootstrap: bootstrap(decision, obs),
        failed_version: decision
            .state
            .failed_version
            .as_ref()
            .map(ToString::to_string)
            .filter(|v| *v == spec.version),
        tls: tls_report(obs, spec),
        revision: obs
            .health
            .values()
            .filter_map(|h| h.revision)
            .max()
            .or(obs.recorded.revision),
        compaction: CompactionReport {
            mode: spec.compaction,
            revision: decision
                .state
                .compaction
                .compacted
                .or(obs.recorded.compacted),
        },
    }
}

/// `Available`: a member list was read and more than half of the voters are healthy.
fn available_condition(
    obs: &Observation,
    phase: &Phase,
    voters: usize,
    healthy_voters: usize,
) -> ConditionReport {
    let listed = matches!(obs.membership, Membership::Listed { .. });
    let quorum = listed && voters > 0 && healthy_voters > voters / 2;
    ConditionReport {
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
    }
}

/// `Degraded`: the cluster is blocked, or a member is not ready.
fn degraded_condition(
    decision: &Decision,
    ready: &[String],
    unready: &[String],
) -> ConditionReport {
    let why = &decision.why;
    let phase = &decision.state.phase;
    let blocked = matches!(phase, Phase::Blocked { .. });
    let degraded = blocked || !unready.is_empty();
    ConditionReport {
        kind: DEGRADED,
        status: degraded,
        reason: if blocked {
            why.reason.as_str().into()
        } else if matches!(phase, Phase::Bootstrapping) {
            "Bootstrapping".into()
        } else if degraded {
            "MembersUnhealthy".into()
        } else {
            "AllMembersHealthy".into()
        },
        message: if blocked {
            why.message.clone()
        } else if degraded {
            format!("not ready: {}", unready.join(", "))
        } else {
            format!("{} members healthy", ready.len())
        },
    }
}

/// The TLS part of the status: the mode, and the certificates in use with their expiries
/// and planned renewals (none while they cannot be used).
fn tls_report(obs: &Observation, spec: &DesiredCluster) -> Option<TlsReport> {
    spec.tls.enabled().then(|| TlsReport {
        mode: spec.tls,
        certificates: obs.tls.certificates.clone(),
        next_rotation: obs.tls.next_rotation().map(str::to_string),
        ca_rotation: obs.tls.rotation.step.map(|s| s.as_str().to_string()),
    })
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
    fn a_failed_action_is_reported_with_the_kind_of_what_it_ran_into() {
        use crate::outcome::Cause;
        use crate::ports::ApiErrorKind;
        let now = Instant::now();
        let obs = World::healthy(now, 3, "3.5.21").build();
        let spec = DesiredCluster::new(3, "3.5.21");
        let d = decide(running_state(), &obs, &spec, &Deadlines::default());
        let failed = ActionOutcome {
            action: Action::LabelVoter {
                name: "demo-1".into(),
            },
            result: ActionResult::Failed {
                error: "labelling pod demo-1 a voter: pods is forbidden".into(),
                cause: Cause::Kubernetes(ApiErrorKind::Forbidden),
            },
        };
        let out = super::report(&d, &obs, &spec, &[failed], &Previous::default());
        let event = out.events.iter().find(|e| e.reason == "ActionFailed");
        assert_eq!(
            event.map(|e| e.note.as_str()),
            Some(
                "label_voter failed (kubernetes_forbidden): labelling pod demo-1 a voter: pods \
                 is forbidden"
            )
        );
        assert!(
            out.status
                .message
                .ends_with("(last step failed: labelling pod demo-1 a voter: pods is forbidden)"),
            "{}",
            out.status.message
        );
    }

    #[test]
    fn the_volumes_condition_says_whether_claims_have_grown_can_grow_or_never_shrink() {
        use crate::lifecycle::Storage;
        const GI: u128 = 1 << 30;
        let now = Instant::now();
        let mut spec = DesiredCluster::new(3, "3.5.21");
        spec.storage = Some(Storage {
            quantity: "2Gi".into(),
            bytes: 2 * GI,
        });
        let cond = |bytes: u128, expandable: bool, capacity: Option<u128>| {
            let mut world = World::healthy(now, 3, "3.5.21")
                .on_volumes()
                .claims_sized(bytes, expandable);
            if let Some(c) = capacity {
                world
                    .obs
                    .claims
                    .values_mut()
                    .for_each(|claim| claim.capacity_bytes = Some(c));
            }
            let r = report(&world.build(), &spec);
            let c = r
                .conditions
                .iter()
                .find(|c| c.kind == VOLUMES_SIZED)
                .cloned()
                .unwrap();
            (c.status, c.reason, c.message)
        };
        assert_eq!(cond(2 * GI, false, None).1, "Current");
        let (status, reason, message) = cond(GI, false, None);
        assert!(
            !status && reason == "ExpansionNotAllowed",
            "{reason}: {message}"
        );
        assert!(
            message.contains("local-path") && message.contains("m1, m2, m3"),
            "{message}"
        );
        assert_eq!(cond(GI, true, None).1, "Expanding");
        assert_eq!(
            cond(2 * GI, true, Some(GI)).1,
            "Expanding",
            "asked, not there yet"
        );
        assert_eq!(cond(3 * GI, true, None).1, "ShrinkNotAllowed");
        let emptydir = report(&World::healthy(now, 3, "3.5.21").build(), &spec);
        assert!(emptydir.conditions.iter().all(|c| c.kind != VOLUMES_SIZED));
    }

    #[test]
    fn every_listed_member_is_detailed_with_role_readiness_restarts_and_claim() {
        let now = Instant::now();
        let obs = World::healthy(now, 3, "3.5.21")
            .learner(3)
            .unreachable(3)
            .pod("m2", |p| p.restarts = 4)
            .claim("m1", crate::lifecycle::ClaimPhase::Bound)
            .build();
        let r = report(&obs, &DesiredCluster::new(3, "3.5.21"));
        let line = |name: &str| r.details.iter().find(|d| d.name == name).cloned().unwrap();
        assert_eq!(r.details.len(), 3);
        assert!(line("m1").voter && line("m1").ready && line("m1").on_claim);
        assert_eq!((line("m2").restarts, line("m2").on_claim), (4, false));
        assert!(!line("m3").voter && !line("m3").ready);
        let unlisted = World::healthy(now, 3, "3.5.21").etcd_down().build();
        assert!(
            report(&unlisted, &DesiredCluster::new(3, "3.5.21"))
                .details
                .is_empty()
        );
    }

    #[test]
    fn converged_cluster_is_available_not_progressing_not_degraded() {
        let obs = World::healthy(Instant::now(), 3, "3.5.21").build();
        let r = report(&obs, &DesiredCluster::new(3, "3.5.21"));
        assert_eq!(r.phase, Phase::Running);
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
        assert!(matches!(r.phase, Phase::Blocked { .. }));
    }

    #[test]
    fn unreachable_cluster_that_had_members_lists_its_pods_as_unready() {
        let obs = World::healthy(Instant::now(), 3, "3.5.21")
            .etcd_down()
            .build();
        let r = report(&obs, &DesiredCluster::new(3, "3.5.21"));
        assert!(matches!(r.phase, Phase::Blocked { .. }));
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

    #[test]
    fn a_pod_policy_change_is_reported_with_the_members_still_to_restart() {
        let obs = World::healthy(Instant::now(), 3, "3.5.21")
            .pod("m1", |p| p.pod_template = Some("new".into()))
            .pod("m2", |p| p.pod_template = Some("old".into()))
            .pod("m3", |p| p.pod_template = None)
            .build();
        let mut spec = DesiredCluster::new(3, "3.5.21");
        spec.pod_template = "new".into();
        let r = report(&obs, &spec);
        let c = condition(&r, POD_POLICY_APPLIED);
        assert!(!c.status);
        assert_eq!(c.reason, "Restarting");
        assert!(
            c.message.contains("m2") && !c.message.contains("m1"),
            "{}",
            c.message
        );
        assert!(
            !c.message.contains("m3"),
            "pods of older operators are not judged"
        );
    }
}
