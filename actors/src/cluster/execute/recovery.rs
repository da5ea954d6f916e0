//! The records of a recovery from a loss of quorum: its start (written, and its Event
//! raised, before anything of it is done) and its end. Its pods are made in `members.rs`.

use crate::ports::{EventRecord, EventType};
use etcd_operator_core::lifecycle::{RecoveryPolicy, RecoveryRecord};

use super::env::{ActionEnv, Done, Failure};

/// Records a recovery (naming a restore's new seed first), then raises its Event: both
/// before anything of the recovery is done.
pub(super) async fn begin(env: &ActionEnv<'_>, record: &RecoveryRecord) -> Result<Done, Failure> {
    let mut record = record.clone();
    let new_seed = matches!(
        record.policy,
        RecoveryPolicy::FromBackup | RecoveryPolicy::Reseed
    );
    if new_seed && record.seed.is_none() {
        let t = env.topology;
        record.seed = Some(t.new_member_name(&mut rand::rng()));
        record.token = Some(format!("{}-{:016x}", t.name, rand::random::<u64>()));
    }
    env.kube
        .record_recovery(&record)
        .await
        .map_err(|e| Failure::kube("recording the recovery in status".into(), &e))?;
    let note = note(&record);
    announce(env, "RecoveryStarted", &note).await;
    Ok(Done::cluster(note))
}

/// Records the end of a recovery (finished or abandoned), then raises its Event.
pub(super) async fn finish(env: &ActionEnv<'_>, record: &RecoveryRecord) -> Result<Done, Failure> {
    let note = note(record);
    env.kube
        .record_recovery(record)
        .await
        .map_err(|e| Failure::kube("recording the end of the recovery in status".into(), &e))?;
    let reason = if record.abandoned {
        "RecoveryAbandoned"
    } else {
        "RecoveryFinished"
    };
    announce(env, reason, &note).await;
    Ok(Done::cluster(note))
}

/// Raises a recovery's Warning Event now (not after the tick): it must precede the steps.
async fn announce(env: &ActionEnv<'_>, reason: &str, note: &str) {
    let event = EventRecord {
        kind: EventType::Warning,
        reason: reason.to_string(),
        action: "Recover".into(),
        note: note.to_string(),
        member: None,
    };
    // An Event that cannot be written must not stop the recovery: the status has it.
    let _ = env.kube.record_event(&event).await;
}

/// What a recovery record says, for people.
fn note(r: &RecoveryRecord) -> String {
    let rev = |r: Option<i64>| r.map_or_else(|| "unknown".to_string(), |r| r.to_string());
    let what = match (&r.survivor, &r.backup) {
        (Some(s), _) => format!(
            "from survivor {s} (raft index {})",
            r.raft_index
                .map_or_else(|| "unknown".into(), |i| i.to_string())
        ),
        (None, Some(b)) => format!(
            "from backup {} (revision {}) into seed {}",
            b.path(),
            b.revision,
            r.seed.as_deref().unwrap_or("?")
        ),
        (None, None) if r.policy == RecoveryPolicy::Reseed => format!(
            "into a new, empty seed {}",
            r.seed.as_deref().unwrap_or("?")
        ),
        (None, None) => "with nothing to recover from".to_string(),
    };
    let state = match (r.finished, r.abandoned) {
        (_, true) => "abandoned",
        (true, false) => "finished",
        (false, false) => "started",
    };
    format!(
        "{} recovery {state} for incident {:?} (lost {}), {what}; last known revision {}, \
         restored revision {}",
        r.policy,
        r.incident,
        r.lost.join(", "),
        rev(r.last_revision),
        rev(r.restored_revision)
    )
}
