//! The members' backend space and the alarms etcd raises, as data: what the `Storage`
//! condition says, and when the operator disarms a NOSPACE alarm.
//!
//! An alarm is not a lost member: a member that answers with an alarm counts toward
//! quorum (etcd still serves reads, membership changes and restarts; NOSPACE refuses only
//! writes that add data). etcd keeps the alarm, in every member, until it is disarmed.
//! The operator disarms NOSPACE only once the cause is gone: every member runs with the
//! spec's quota (no rollout is pending) and every member's backend is below
//! [`NEAR_QUOTA_PERCENT`] of it. It never disarms CORRUPT.

use serde::Serialize;

use super::transition;
use super::view::ClusterView;
use super::{
    Action, Alarm, AlarmKind, Decision, DesiredCluster, MemberView, Membership, NEAR_QUOTA_PERCENT,
    Observation, Phase, Reason, State, Why, is_stale,
};

/// What the `Storage` condition says of the cluster's backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StorageState {
    /// No alarm, and every member below [`NEAR_QUOTA_PERCENT`] of its quota.
    Healthy,
    /// Some member is at or above [`NEAR_QUOTA_PERCENT`] of its quota.
    NearQuota,
    /// etcd raised NOSPACE: writes that add data are refused.
    NoSpace,
    /// etcd raised CORRUPT: some member's data differs.
    Corrupt,
}

impl StorageState {
    /// The condition's reason.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageState::Healthy => "Healthy",
            StorageState::NearQuota => "NearQuota",
            StorageState::NoSpace => "NoSpace",
            StorageState::Corrupt => "Corrupt",
        }
    }
}

/// The alarms any member reports, each once (etcd replicates its alarm list, so every
/// member that answers reports all of them).
pub fn alarms(obs: &Observation) -> Vec<Alarm> {
    let mut all: Vec<Alarm> = obs
        .health
        .values()
        .flat_map(|h| h.alarms.iter().copied())
        .collect();
    all.sort();
    all.dedup();
    all
}

/// The largest share of its quota any member's backend takes, in percent, with that
/// member's name; `None` when no member reports its size.
pub fn fullest(obs: &Observation, quota: u64) -> Option<Fullest> {
    listed(obs)
        .iter()
        .filter_map(|m| {
            let size = obs.health.get(&m.id)?.db_size?;
            Some(Fullest {
                name: m.name.clone(),
                size,
            })
        })
        .max_by_key(|f| f.size)
        .filter(|_| quota > 0)
}

/// The member whose backend is the largest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fullest {
    /// Its name.
    pub name: String,
    /// Its backend's size, in bytes.
    pub size: u64,
}

/// `size` as a share of `quota`, in whole percent (rounded down).
pub fn percent_of(size: u64, quota: u64) -> u64 {
    size.saturating_mul(100) / quota.max(1)
}

/// Whether a backend of `size` bytes is at or above [`NEAR_QUOTA_PERCENT`] of `quota`.
pub fn is_near_quota(size: u64, quota: u64) -> bool {
    size.saturating_mul(100) >= quota.saturating_mul(NEAR_QUOTA_PERCENT)
}

/// The `Storage` condition: its state and what it says, for people.
pub fn storage(obs: &Observation, quota: u64) -> (StorageState, String) {
    let alarms = alarms(obs);
    let named = |kind: AlarmKind| -> Vec<String> {
        alarms
            .iter()
            .filter(|a| a.kind == kind)
            .map(|a| member_name(obs, a.member))
            .collect()
    };
    let corrupt = named(AlarmKind::Corrupt);
    if !corrupt.is_empty() {
        let message = format!(
            "etcd raised CORRUPT for {}: that member's data differs from the others'",
            corrupt.join(", ")
        );
        return (StorageState::Corrupt, message);
    }
    let full = named(AlarmKind::NoSpace);
    let fullest = fullest(obs, quota);
    let use_of_quota = fullest.as_ref().map_or_else(String::new, |f| {
        let pct = percent_of(f.size, quota);
        format!(
            "; the fullest member, {}, uses {pct}% of the {quota}-byte quota",
            f.name
        )
    });
    if !full.is_empty() {
        let message = format!(
            "etcd raised NOSPACE for {}: the cluster refuses writes that add data{use_of_quota}",
            full.join(", ")
        );
        return (StorageState::NoSpace, message);
    }
    match fullest {
        Some(f) if is_near_quota(f.size, quota) => (
            StorageState::NearQuota,
            format!(
                "member {} uses {}% of its {quota}-byte quota (near from \
                 {NEAR_QUOTA_PERCENT}%); etcd refuses writes once it is reached",
                f.name,
                percent_of(f.size, quota)
            ),
        ),
        _ => (StorageState::Healthy, format!("no alarm{use_of_quota}")),
    }
}

/// The members etcd lists (none when it could not be read).
fn listed(obs: &Observation) -> &[MemberView] {
    match &obs.membership {
        Membership::Listed { members, .. } => members,
        Membership::Unreachable { .. } => &[],
    }
}

fn member_name(obs: &Observation, id: u64) -> String {
    if id == 0 {
        return "no member in particular (etcd could not tell which members differ)".into();
    }
    listed(obs)
        .iter()
        .find(|m| m.id == id)
        .map_or_else(|| format!("member {id:x}"), |m| m.name.clone())
}

/// A cluster for which etcd raised CORRUPT, or whose members' hashes the operator found
/// to differ ([`consistency`](super::consistency)), changes in no way: it is reported
/// with the members that differ and what to do, and left for a person (the alarm never
/// disarmed, no member removed on it). Checked before every rule that changes members.
pub(super) fn corrupt(
    state: &State,
    view: &ClusterView<'_>,
    spec: &DesiredCluster,
) -> Option<Decision> {
    let raised = alarms(view.obs)
        .iter()
        .any(|a| a.kind == AlarmKind::Corrupt);
    if !raised && state.divergence.is_none() {
        return None;
    }
    let (_, alarm) = storage(view.obs, spec.quota_backend_bytes);
    let found = state.divergence.as_ref().map(|d| {
        let names: Vec<String> = d
            .members
            .iter()
            .map(|id| member_name(view.obs, *id))
            .collect();
        format!(
            "the members' hashes at revision {} differ: {} outside the majority",
            d.revision,
            names.join(", ")
        )
    });
    let said = match (raised, found) {
        (true, Some(found)) => format!("{alarm}; {found}"),
        (false, Some(found)) => found,
        (_, None) => alarm,
    };
    let message = format!(
        "{said}. The operator changes nothing while it holds: replace the member that \
         differs by hand (compare `etcdctl endpoint hashkv --cluster`), then disarm the \
         alarm (`etcdctl alarm disarm`)"
    );
    let why = Why::new(Reason::Corrupt, message);
    let phase = transition::continuing(&state.phase);
    Some(Decision::new(state.clone(), phase, vec![], why))
}

/// What a converged cluster does about its alarms: `converged` itself when there is none;
/// a NOSPACE alarm is disarmed once no rollout is pending (every member's pod is built
/// from the spec's template, so runs with its quota) and every member is below
/// [`NEAR_QUOTA_PERCENT`] of the quota, and reported with the ways out until then.
pub(super) fn when_converged(
    converged: Decision,
    view: &ClusterView<'_>,
    spec: &DesiredCluster,
) -> Decision {
    if view.obs.health.values().all(|h| h.alarms.is_empty()) {
        return converged;
    }
    let alarms = alarms(view.obs);
    let quota = spec.quota_backend_bytes;
    let rolled_out = view.members.iter().all(|m| {
        view.obs
            .pod(&m.name)
            .is_some_and(|p| !is_stale(p, spec, view.obs))
    });
    let (_, message) = storage(view.obs, quota);
    let decision = |actions, reason, message| {
        let why = Why::new(reason, message);
        Decision::new(converged.state.clone(), Phase::Running, actions, why)
    };
    let under = view.members.iter().all(|m| {
        view.obs
            .health
            .get(&m.id)
            .and_then(|h| h.db_size)
            .is_some_and(|size| !is_near_quota(size, quota))
    });
    if rolled_out && under {
        let actions = alarms
            .iter()
            .filter(|a| a.kind == AlarmKind::NoSpace)
            .map(|a| Action::DisarmAlarm { alarm: *a })
            .collect();
        let message = format!(
            "{message}; every member is below {NEAR_QUOTA_PERCENT}% of its quota now: \
             disarming NOSPACE"
        );
        return decision(actions, Reason::DisarmingNoSpace, message);
    }
    let message = format!(
        "{message}. The alarm is disarmed once every member is below {NEAR_QUOTA_PERCENT}% \
         of its quota: raise the quota (ETCD_QUOTA_BACKEND_BYTES in spec.pod.etcdEnv; the \
         members are restarted onto it one by one), or delete keys, compact and defragment"
    );
    decision(vec![], Reason::NoSpace, message)
}
