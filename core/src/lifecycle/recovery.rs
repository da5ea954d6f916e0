//! Recovery from a permanent loss of quorum (`spec.recovery`), as data and pure decisions.
//!
//! A quorum is lost *permanently* when more voting members are gone than the cluster can
//! lose: their pods are gone and their data with them (a claim lost or deleted, or an
//! emptyDir whose pod is gone). Members that merely do not answer are not gone: their
//! quorum may come back by itself, and nothing is done.
//!
//! Once a permanent loss has lasted `quorumLossSeconds`, the policy decides:
//!
//! - `Manual` reports what the operator knows (members gone and surviving, each
//!   survivor's raft index and revision, the newest backup) and the annotation
//!   ([`RECOVER_ANNOTATION`]) that triggers one of the two recoveries;
//! - `FromSurvivor` restarts the survivor with the highest raft index alone, with
//!   `--force-new-cluster`, on its own volume; the scale-up path then grows the cluster
//!   back with learners;
//! - `FromBackup`, when no member keeps any data, restores the newest verified backup
//!   into a new seed of the same EtcdCluster (same name, same Services).
//!
//! Every recovery is fenced like the bootstrap: a [`RecoveryRecord`] is written into the
//! status (refused if an unfinished one is there) and an Event raised *before* anything
//! is touched; the record names the incident, and an incident that was recovered once is
//! never recovered again. [`recorded_recovery`](super::recorded_recovery) carries a
//! recorded recovery out.

use super::recovery_refusal::RecoveryRefusal;
use super::{
    Action, Decision, MemberView, Membership, Observation, Phase, Reason, State, Version, Why,
    check_readable, evidence,
};
use super::{RECOVER_ANNOTATION, RecoveryPolicy, RecoveryRecord, force_new_cluster_is_safe};

/// A voting member that keeps its data while the quorum is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Survivor {
    name: String,
    raft_index: Option<u64>,
    revision: Option<i64>,
    version: Option<String>,
}

/// A permanent loss of quorum: more voting members gone with their data than the
/// cluster can lose.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Loss {
    incident: String,
    voters: usize,
    lost: Vec<String>,
    survivors: Vec<Survivor>,
}

/// Whether member `name`'s data is gone, by the one rule every destructive action asks
/// ([`evidence::member_data`]): a member whose pod object exists is never gone.
fn data_gone(obs: &Observation, name: &str) -> bool {
    evidence::member_data(obs, name).is_gone()
}

/// The permanent loss `obs` shows, if any. `cluster` is the etcd cluster ID the incident
/// is named after.
fn assess(obs: &Observation, cluster: Option<u64>) -> Option<Loss> {
    let cluster = cluster.map_or_else(|| "unknown".to_string(), |id| format!("{id:x}"));
    match &obs.membership {
        Membership::Listed { members, .. } => listed_loss(obs, members, &cluster),
        Membership::Unreachable { .. } => total_loss(obs, &cluster),
    }
}

fn listed_loss(obs: &Observation, members: &[MemberView], cluster: &str) -> Option<Loss> {
    let voters: Vec<&MemberView> = members.iter().filter(|m| !m.is_learner).collect();
    let quorum = voters.len() / 2 + 1;
    let healthy = voters
        .iter()
        .filter(|m| m.started() && obs.health.get(&m.id).is_some_and(|h| h.is_healthy()))
        .count();
    let mut lost: Vec<String> = voters
        .iter()
        .filter_map(|m| m.pod_name())
        .filter(|name| data_gone(obs, name))
        .collect();
    lost.sort();
    // Not lost, or a quorum that may still come back by itself.
    if healthy >= quorum || voters.len() - lost.len() >= quorum {
        return None;
    }
    let survivors = voters
        .iter()
        .filter(|m| m.started() && !lost.contains(&m.name))
        .map(|m| {
            let health = obs.health.get(&m.id).filter(|h| h.reachable);
            Survivor {
                name: m.name.clone(),
                raft_index: health.and_then(|h| h.raft_index),
                revision: health.and_then(|h| h.revision),
                version: health.and_then(|h| h.version.as_ref().map(ToString::to_string)),
            }
        })
        .collect();
    Some(Loss {
        incident: format!("{cluster}: lost {}", lost.join(", ")),
        voters: voters.len(),
        lost,
        survivors,
    })
}

/// No member answers: a loss only when every member's data is gone (no pod object, no
/// claim that holds data); the members are those the status remembered, every pod that
/// may have run one, and every claim.
fn total_loss(obs: &Observation, cluster: &str) -> Option<Loss> {
    let known = evidence::known_members(obs);
    if !known.iter().all(|name| data_gone(obs, name)) {
        return None;
    }
    Some(Loss {
        incident: format!("{cluster}: lost every member"),
        voters: known.len(),
        lost: known,
        survivors: Vec::new(),
    })
}

/// Starts or stops the quorum-loss timer: it runs while `obs` shows a permanent loss.
pub(super) fn track_loss(state: &mut State, obs: &Observation) {
    match assess(obs, expected_cluster_id(state, obs)) {
        Some(_) => {
            state.quorum_lost_since.get_or_insert(obs.now);
        }
        None => state.quorum_lost_since = None,
    }
}

/// The cluster ID this cluster's members answer with, as recorded: the last recovery's,
/// else the bootstrap's, else what this actor saw. `None` inside: a restore under way,
/// whose new cluster ID is not known yet.
pub(super) fn recorded_cluster_id(state: &State, obs: &Observation) -> Option<u64> {
    let recovered = obs
        .recorded
        .recovery
        .as_ref()
        .and_then(RecoveryRecord::expected_cluster_id);
    match recovered {
        Some(id) => id,
        None => obs
            .recorded
            .bootstrap
            .as_ref()
            .and_then(|r| r.cluster_id)
            .or(state.cluster_id),
    }
}

fn expected_cluster_id(state: &State, obs: &Observation) -> Option<u64> {
    recorded_cluster_id(state, obs).or(state.cluster_id)
}

/// The decision when the quorum is lost (with or without a member list); `fallback` is
/// what is reported when the loss is not permanent (members that may come back).
pub(super) fn quorum_lost(
    state: State,
    obs: &Observation,
    spec: &super::DesiredCluster,
    target: &Version,
    fallback: Why,
) -> Decision {
    let Some(loss) = assess(obs, expected_cluster_id(&state, obs)) else {
        return Decision::blocked(state, fallback);
    };
    let facts = describe(&loss, obs);
    let policy = spec.recovery.effective();
    if let Some(done) = obs
        .recorded
        .recovery
        .as_ref()
        .filter(|r| r.incident == loss.incident && !r.abandoned)
    {
        let why = Why::new(
            Reason::RecoveryRefused,
            format!(
                "{facts}. This incident ({}) was already recovered once ({} recovery); a \
                 recovery is never repeated for the same incident: the operator changes \
                 nothing more",
                done.incident, done.policy
            ),
        );
        return Decision::blocked(state, why);
    }
    let reason =
        if loss.survivors.is_empty() && !matches!(obs.membership, Membership::Listed { .. }) {
            Reason::AllMembersLost
        } else {
            Reason::QuorumLost
        };
    if policy == RecoveryPolicy::Manual {
        let why = Why::new(reason, format!("{facts}. {}", how_to_trigger(&loss, obs)));
        return Decision::blocked(state, why);
    }
    let since = state.quorum_lost_since.unwrap_or(obs.now);
    let waited = obs.now.saturating_duration_since(since);
    // Never on the tick that first sees the loss, whatever quorumLossSeconds says: what it
    // read of the backup store may predate the loss; the next tick's was read after.
    if since == obs.now || waited < spec.recovery.quorum_loss {
        // No countdown in the message: it would rewrite the status on every tick.
        let why = Why::new(
            reason,
            format!(
                "{facts}. A {policy} recovery starts once the loss has lasted {}s \
                 (spec.recovery.quorumLossSeconds), unless a quorum comes back",
                spec.recovery.quorum_loss.as_secs()
            ),
        );
        return Decision::blocked(state, why);
    }
    let last_revision = newest_revision(&loss, obs);
    let begun = match policy {
        RecoveryPolicy::FromSurvivor => from_survivor(&loss, obs, last_revision),
        RecoveryPolicy::FromBackup => {
            let recorded = recorded_cluster_id(&state, obs);
            from_backup(&loss, obs, target, last_revision, recorded)
        }
        RecoveryPolicy::Reseed => reseed(&loss, last_revision),
        RecoveryPolicy::Manual => unreachable!("Manual returned above"),
    }
    .map(|(actions, message)| (bound_to(actions, &spec.uid), message));
    match begun {
        Ok((actions, message)) => {
            let why = Why::new(policy_reason(policy), format!("{facts}. {message}"));
            Decision::new(state, Phase::Recovering, actions, why)
        }
        Err(problem) => Decision::blocked(
            state,
            Why::new(Reason::RecoveryRefused, format!("{facts}. {problem}")),
        ),
    }
}

/// `actions` with the record they begin bound to the object of `uid`.
fn bound_to(mut actions: Vec<Action>, uid: &str) -> Vec<Action> {
    for action in &mut actions {
        if let Action::BeginRecovery { record } = action {
            record.uid = (!uid.is_empty()).then(|| uid.to_string());
        }
    }
    actions
}

fn policy_reason(policy: RecoveryPolicy) -> Reason {
    match policy {
        RecoveryPolicy::FromBackup => Reason::RecoveringFromBackup,
        RecoveryPolicy::Reseed => Reason::Reseeding,
        _ => Reason::RecoveringFromSurvivor,
    }
}

/// The newest revision known before the loss: the survivors' and the status's.
fn newest_revision(loss: &Loss, obs: &Observation) -> Option<i64> {
    loss.survivors
        .iter()
        .filter_map(|s| s.revision)
        .chain(obs.recorded.revision)
        .max()
}

/// What the operator knows of a loss, for people.
fn describe(loss: &Loss, obs: &Observation) -> String {
    let survivors = if loss.survivors.is_empty() {
        "no member survives with data".to_string()
    } else {
        let each: Vec<String> = loss
            .survivors
            .iter()
            .map(|s| match (s.raft_index, s.revision) {
                (Some(index), Some(rev)) => {
                    format!("{} (raft index {index}, revision {rev})", s.name)
                }
                _ => format!("{} (does not answer)", s.name),
            })
            .collect();
        format!("surviving with data: {}", each.join(", "))
    };
    let backup = match &obs.newest_backup {
        Some(Ok(b)) => format!(
            "; newest backup: {} (revision {}, etcd {})",
            b.path(),
            b.revision,
            b.etcd_version
        ),
        Some(Err(e)) => format!("; no usable backup: {e}"),
        None => String::new(),
    };
    format!(
        "quorum is lost for good: {} of {} voting members are gone with their data ({}); \
         {survivors}{backup}; {}",
        loss.lost.len(),
        loss.voters,
        loss.lost.join(", "),
        last_seen(obs)
    )
}

/// The annotation that triggers the recovery this loss allows.
fn how_to_trigger(loss: &Loss, obs: &Observation) -> String {
    let how = |policy: RecoveryPolicy| format!("{RECOVER_ANNOTATION}={policy}");
    let choice = if !loss.survivors.is_empty() {
        how(RecoveryPolicy::FromSurvivor)
    } else {
        let reseed = format!(
            "{} to accept an empty cluster (a new seed with no data: everything above is \
             given up)",
            how(RecoveryPolicy::Reseed)
        );
        match &obs.newest_backup {
            Some(Ok(_)) => format!(
                "{} to restore the newest backup, or {reseed}",
                how(RecoveryPolicy::FromBackup)
            ),
            Some(Err(_)) => format!(
                "{} once a backup is usable, or {reseed}",
                how(RecoveryPolicy::FromBackup)
            ),
            None => format!(
                "{reseed}; no backup store is named (spec.recovery.backup), so there is no \
                 backup to restore"
            ),
        }
    };
    format!(
        "spec.recovery.policy is Manual: nothing is done. To recover, set the annotation \
         {choice} on this EtcdCluster (it acts after spec.recovery.quorumLossSeconds of \
         loss, once)"
    )
}

/// What the operator last saw of the cluster's data, for people judging a reseed: the
/// newest revision published, and whether a member ever answered.
fn last_seen(obs: &Observation) -> String {
    let revision = match obs.recorded.revision {
        Some(r) if r <= 1 => format!("revision {r} (no write was ever made)"),
        Some(r) => format!("revision {r}"),
        None => "no revision".to_string(),
    };
    let answered = match obs.recorded.bootstrap.as_ref().and_then(|b| b.cluster_id) {
        Some(id) => format!("a member answered as etcd cluster {id:x}"),
        None if !obs.recorded.members.is_empty() => "members were listed".to_string(),
        None => "no member ever answered".to_string(),
    };
    format!("last seen: {revision}; {answered}")
}

/// `Reseed`: a new, empty seed in place, when no member keeps any data.
fn reseed(loss: &Loss, last_revision: Option<i64>) -> Begun {
    no_survivor_keeps_data(loss, RecoveryPolicy::Reseed)?;
    let record = started_record(loss, RecoveryPolicy::Reseed, last_revision);
    let message = format!(
        "reseeding as {RECOVER_ANNOTATION}=Reseed asks: recorded, then a new, empty seed of \
         this cluster starts{}",
        last_revision.map_or_else(String::new, |r| format!(
            " (revisions up to {r} are given up)"
        ))
    );
    Ok((vec![Action::BeginRecovery { record }], message))
}

/// A recovery begun: its actions and what is said of it; or why it cannot begin.
type Begun = Result<(Vec<Action>, String), RecoveryRefusal>;

/// Refuses `policy` (one that starts from no data) while any member of `loss` keeps data.
fn no_survivor_keeps_data(loss: &Loss, policy: RecoveryPolicy) -> Result<(), RecoveryRefusal> {
    if loss.survivors.is_empty() {
        return Ok(());
    }
    Err(RecoveryRefusal::SurvivorsKeepData {
        policy,
        survivors: loss.survivors.iter().map(|s| s.name.clone()).collect(),
    })
}

/// The record of a recovery of `loss` by `policy` about to start, with nothing chosen yet
/// (no survivor, backup, seed or version).
fn started_record(
    loss: &Loss,
    policy: RecoveryPolicy,
    last_revision: Option<i64>,
) -> RecoveryRecord {
    RecoveryRecord {
        incident: loss.incident.clone(),
        policy,
        lost: loss.lost.clone(),
        survivor: None,
        raft_index: None,
        version: None,
        backup: None,
        last_revision,
        restored_revision: None,
        seed: None,
        token: None,
        cluster_id: None,
        uid: None,
        finished: false,
        abandoned: false,
    }
}

/// `FromSurvivor`: the survivor with the highest raft index, restarted alone.
fn from_survivor(loss: &Loss, obs: &Observation, last_revision: Option<i64>) -> Begun {
    let chosen = most_advanced_survivor(loss, obs)?;
    may_restart_alone(chosen, obs)?;
    let record = RecoveryRecord {
        survivor: Some(chosen.name.clone()),
        raft_index: chosen.raft_index,
        version: chosen.version.clone(),
        cluster_id: match &obs.membership {
            Membership::Listed { cluster_id, .. } => Some(*cluster_id),
            Membership::Unreachable { .. } => None,
        },
        ..started_record(loss, RecoveryPolicy::FromSurvivor, last_revision)
    };
    let message = format!(
        "recovering from survivor {} (raft index {}): recorded, then restarted alone with \
         --force-new-cluster on its own volume",
        chosen.name,
        chosen.raft_index.unwrap_or_default()
    );
    let actions = vec![
        Action::BeginRecovery { record },
        Action::RecreatePod {
            name: chosen.name.clone(),
        },
    ];
    Ok((actions, message))
}

/// The survivor with the highest raft index (ties: the first name), once every survivor
/// has a live pod that reports its index; else why it cannot be chosen yet.
fn most_advanced_survivor<'a>(
    loss: &'a Loss,
    obs: &Observation,
) -> Result<&'a Survivor, RecoveryRefusal> {
    if loss.survivors.is_empty() {
        return Err(RecoveryRefusal::NoSurvivor);
    }
    let candidates: Vec<&Survivor> = loss
        .survivors
        .iter()
        .filter(|s| s.raft_index.is_some())
        .filter(|s| obs.pod(&s.name).is_some_and(|p| !p.is_dead()))
        .collect();
    if candidates.len() < loss.survivors.len() {
        let silent = loss
            .survivors
            .iter()
            .filter(|s| !candidates.iter().any(|c| c.name == s.name))
            .map(|s| s.name.clone())
            .collect();
        return Err(RecoveryRefusal::SilentSurvivors(silent));
    }
    Ok(candidates
        .into_iter()
        .max_by(|a, b| (a.raft_index, &b.name).cmp(&(b.raft_index, &a.name)))
        .expect("at least one survivor"))
}

/// Whether `chosen` may be restarted alone with `--force-new-cluster`: its data is on a
/// claim (a new pod keeps it), and its etcd version keeps every committed key doing so.
fn may_restart_alone(chosen: &Survivor, obs: &Observation) -> Result<(), RecoveryRefusal> {
    if !evidence::held_on_claim(obs, &chosen.name) {
        return Err(RecoveryRefusal::SurvivorOnEmptyDir(chosen.name.clone()));
    }
    let version = chosen
        .version
        .as_deref()
        .and_then(|v| v.parse::<Version>().ok());
    if version.as_ref().is_some_and(force_new_cluster_is_safe) {
        return Ok(());
    }
    Err(RecoveryRefusal::UnsafeForceNewCluster {
        survivor: chosen.name.clone(),
        version: chosen.version.clone(),
    })
}

/// `FromBackup`: the newest verified backup, into a new seed.
fn from_backup(
    loss: &Loss,
    obs: &Observation,
    target: &Version,
    last_revision: Option<i64>,
    recorded_cluster: Option<u64>,
) -> Begun {
    no_survivor_keeps_data(loss, RecoveryPolicy::FromBackup)?;
    let backup = match &obs.newest_backup {
        Some(Ok(backup)) => backup,
        Some(Err(problem)) => return Err(RecoveryRefusal::NoVerifiedBackup(problem.clone())),
        None => return Err(RecoveryRefusal::NoStoreNamed),
    };
    check_readable(&backup.etcd_version, target).map_err(|problem| {
        RecoveryRefusal::UnreadableBackup {
            path: backup.path(),
            problem: Box::new(problem),
        }
    })?;
    if let (Some(taken), Some(recorded)) = (backup.cluster_id, recorded_cluster)
        && taken != recorded
    {
        return Err(RecoveryRefusal::OtherCluster {
            path: backup.path(),
            taken,
            recorded,
        });
    }
    let record = RecoveryRecord {
        version: Some(target.to_string()),
        backup: Some(backup.clone()),
        ..started_record(loss, RecoveryPolicy::FromBackup, last_revision)
    };
    let message = format!(
        "recovering from backup {} (revision {}{}): recorded, then restored into a new seed \
         of this cluster",
        backup.path(),
        backup.revision,
        last_revision.map_or_else(String::new, |r| format!(
            "; the last revision known was {r}"
        ))
    );
    Ok((vec![Action::BeginRecovery { record }], message))
}
