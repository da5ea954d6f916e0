//! Carrying out a recorded recovery (`status.recovery` unfinished): the survivor
//! restarted alone, or the new seed restoring a backup, until the cluster answers again
//! and the record is finished. [`recovery`](super::recovery) decides whether one begins.

use super::{ABANDON_RECOVERY_ANNOTATION, RecoveryPolicy, RecoveryRecord};
use super::{
    Action, Decision, DesiredCluster, Membership, Observation, Phase, Reason, State, Version, Why,
    evidence, volumes,
};

/// The steps of a recorded recovery that has not finished: they take precedence over
/// everything else (the survivor must not be restarted the usual way, the dead members
/// not be replaced). A record is carried out only while it is this object's and the loss
/// it names still holds ([`record_problem`]); past `spec.recovery.deadlineSeconds` it is
/// reported `RecoveryFailed` and only its finish is still acted on; the user gives it up
/// with [`ABANDON_RECOVERY_ANNOTATION`].
pub(super) fn in_progress(
    state: &mut State,
    obs: &Observation,
    spec: &DesiredCluster,
    target: &Version,
) -> Option<Decision> {
    let Some(record) = obs.recorded.recovery.as_ref().filter(|r| !r.finished) else {
        state.recovery_since = None;
        return None;
    };
    if spec.recovery.abandon.as_deref() == Some(record.incident.as_str()) {
        return Some(abandon(state.clone(), record));
    }
    if let Some(problem) = record_problem(record, obs, spec) {
        let why = Why::new(
            Reason::RecoveryRefused,
            format!(
                "status.recovery names an unfinished {} recovery of {:?}, but {problem}: it is \
                 not carried out and nothing is changed. {}",
                record.policy,
                record.incident,
                how_to_abandon(record)
            ),
        );
        return Some(Decision::blocked(state.clone(), why));
    }
    let since = match &state.recovery_since {
        Some((incident, at)) if *incident == record.incident => *at,
        _ => {
            state.recovery_since = Some((record.incident.clone(), obs.now));
            obs.now
        }
    };
    let step = match record.policy {
        RecoveryPolicy::FromBackup | RecoveryPolicy::Reseed => {
            seed_steps(state.clone(), obs, record, target)
        }
        RecoveryPolicy::FromSurvivor | RecoveryPolicy::Manual => {
            survivor_steps(state.clone(), obs, record, target)
        }
    };
    let waited = obs.now.saturating_duration_since(since);
    if step.why.reason == Reason::Recovered || waited < spec.recovery.deadline {
        return Some(step);
    }
    let why = Why::new(
        Reason::RecoveryFailed,
        format!(
            "the {} recovery of {:?} has not completed in {}s (spec.recovery.deadlineSeconds); \
             last step: {}. Nothing more is done for it but its finish, should the cluster \
             answer; nothing is deleted. Look at the recovering member's pod (kubectl \
             describe pod, kubectl logs --all-containers), fix what it waits for, or {}",
            record.policy,
            record.incident,
            spec.recovery.deadline.as_secs(),
            step.why.message,
            lowercase_first(&how_to_abandon(record))
        ),
    );
    Some(Decision::blocked(step.state, why))
}

/// Why `record` must not be carried out on this object, if it must not: it was written
/// for another object, or a member it says was lost is not gone by the evidence rule
/// ([`evidence::member_data`]).
fn record_problem(
    record: &RecoveryRecord,
    obs: &Observation,
    spec: &DesiredCluster,
) -> Option<String> {
    if let Some(uid) = record
        .uid
        .as_deref()
        .filter(|u| !spec.uid.is_empty() && **u != spec.uid)
    {
        return Some(format!(
            "it was written for another EtcdCluster object (uid {uid}; this one is {})",
            spec.uid
        ));
    }
    let back: Vec<String> = record
        .lost
        .iter()
        .filter(|name| !evidence::member_data(obs, name).is_gone())
        .cloned()
        .collect();
    (!back.is_empty()).then(|| {
        format!(
            "the incident it names does not hold: {}",
            evidence::describe(obs, &back)
        )
    })
}

/// How the user gives `record` up, for people.
fn how_to_abandon(record: &RecoveryRecord) -> String {
    format!(
        "To give this recovery up, annotate this EtcdCluster with \
         {ABANDON_RECOVERY_ANNOTATION}={:?} (the record's incident): it is marked finished \
         and abandoned, nothing is deleted, and the loss is assessed again",
        record.incident
    )
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

/// Gives `record` up, as the user asked: it is written finished and abandoned, so that no
/// step of it is taken again and its incident may be recovered anew. Nothing it made is
/// deleted.
fn abandon(state: State, record: &RecoveryRecord) -> Decision {
    let abandoned = RecoveryRecord {
        finished: true,
        abandoned: true,
        ..record.clone()
    };
    let message = format!(
        "the {} recovery of {:?} is given up as {ABANDON_RECOVERY_ANNOTATION} asks: nothing \
         it made is deleted, and the loss is assessed again (a new recovery of the same \
         incident may start)",
        record.policy, record.incident
    );
    progress(
        state,
        Reason::RecoveryAbandoned,
        vec![Action::FinishRecovery { record: abandoned }],
        message,
    )
}

/// A pod still started with `--force-new-cluster` outside an unfinished recovery (the
/// recreate after `FinishRecovery` failed, or the status lost its record): its next
/// container restart would force a new cluster again and split the one grown since. It is
/// recreated on its claim before anything else; a pod on an emptyDir is left alone (its
/// data would go with it, and the operator never makes one).
pub(super) fn stale_force(state: &State, obs: &Observation) -> Option<Decision> {
    let pod = obs
        .pods
        .iter()
        .find(|p| p.force_new_cluster && !p.terminating && evidence::held_on_claim(obs, &p.name))?;
    let message = format!(
        "pod {} still runs etcd with --force-new-cluster although no recovery is under way: \
         it is made again on its claim without the flag before anything else",
        pod.name
    );
    let actions = vec![Action::RecreatePod {
        name: pod.name.clone(),
    }];
    Some(progress(
        state.clone(),
        Reason::StaleForceNewCluster,
        actions,
        message,
    ))
}

fn progress(state: State, reason: Reason, actions: Vec<Action>, message: String) -> Decision {
    Decision::new(state, Phase::Recovering, actions, Why::new(reason, message))
}

fn survivor_steps(
    state: State,
    obs: &Observation,
    record: &RecoveryRecord,
    target: &Version,
) -> Decision {
    let name = record.survivor.clone().unwrap_or_default();
    let reason = Reason::RecoveringFromSurvivor;
    if !volumes::on_a_volume(obs, &name) {
        let why = Why::new(
            Reason::RecoveryRefused,
            format!(
                "the FromSurvivor recovery of {} cannot go on: survivor {name}'s claim no \
                 longer holds its data; nothing more is done",
                record.incident
            ),
        );
        return Decision::blocked(state, why);
    }
    let Some(pod) = obs.pod(&name) else {
        let version = record
            .version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| target.clone());
        let message = format!(
            "restarting survivor {name} alone with --force-new-cluster on its volume (etcd \
             {version})"
        );
        return progress(
            state,
            reason,
            vec![Action::ForceNewCluster { name, version }],
            message,
        );
    };
    if pod.terminating {
        let message = format!("waiting for survivor {name}'s old pod to go");
        return progress(state, reason, vec![], message);
    }
    if !pod.force_new_cluster {
        let message = format!("stopping survivor {name} to restart it alone");
        return progress(state, reason, vec![Action::RecreatePod { name }], message);
    }
    match alone(obs, &name) {
        Some((cluster_id, revision)) => {
            let finished = RecoveryRecord {
                restored_revision: revision,
                cluster_id: Some(cluster_id),
                finished: true,
                ..record.clone()
            };
            let message = format!(
                "survivor {name} runs alone at revision {}: recovered; its pod is made again \
                 without --force-new-cluster, then the cluster grows back with learners",
                revision.map_or_else(|| "unknown".into(), |r| r.to_string())
            );
            let actions = vec![
                Action::FinishRecovery { record: finished },
                Action::RecreatePod { name },
            ];
            progress(state, Reason::Recovered, actions, message)
        }
        None => {
            let message = format!("waiting for survivor {name} to come back as the only member");
            progress(state, reason, vec![], message)
        }
    }
}

/// The member `name` answers, healthy, as the cluster's only member: the cluster ID and
/// the revision it answers with.
fn alone(obs: &Observation, name: &str) -> Option<(u64, Option<i64>)> {
    let Membership::Listed {
        cluster_id,
        members,
    } = &obs.membership
    else {
        return None;
    };
    let [only] = members.as_slice() else {
        return None;
    };
    let health = obs.health.get(&only.id).filter(|h| h.is_healthy())?;
    (only.name == name).then_some((*cluster_id, health.revision))
}

/// The steps of a recorded recovery into a new seed: `FromBackup` (the seed restores the
/// record's backup first) or `Reseed` (an empty seed).
fn seed_steps(
    state: State,
    obs: &Observation,
    record: &RecoveryRecord,
    target: &Version,
) -> Decision {
    let restoring = record.policy == RecoveryPolicy::FromBackup;
    let reason = if restoring {
        Reason::RecoveringFromBackup
    } else {
        Reason::Reseeding
    };
    let (Some(seed), Some(token)) = (&record.seed, &record.token) else {
        return refused(state, record, "names no seed");
    };
    if restoring != record.backup.is_some() {
        return refused(state, record, "names no backup, or one it must not restore");
    }
    // What the seed starts from, for people.
    let from = match &record.backup {
        Some(backup) => format!("backup {} (revision {})", backup.path(), backup.revision),
        None => "no data (an empty cluster)".to_string(),
    };
    let version = record
        .version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| target.clone());
    match obs.pod(seed) {
        None => {
            let message = format!("starting seed {seed} from {from}");
            let action = Action::StartRecoverySeed {
                name: seed.clone(),
                token: token.clone(),
                version,
                restore: record.backup.clone(),
            };
            progress(state, reason, vec![action], message)
        }
        Some(pod) if pod.is_dead() && !pod.terminating => {
            // It died before answering: it holds nothing but a copy of the backup, or
            // nothing at all.
            let message = format!("seed {seed} died before it answered; starting it anew");
            let action = Action::DeletePod { name: seed.clone() };
            progress(state, reason, vec![action], message)
        }
        Some(_) => match alone(obs, seed) {
            Some((cluster_id, revision)) => {
                // The data restored is the backup's: the seed's own revision may be bumped
                // far past it (etcdutl --bump-revision), so it says nothing of what is lost.
                let restored = record.backup.as_ref().map(|b| b.revision).or(revision);
                let finished = RecoveryRecord {
                    restored_revision: restored,
                    cluster_id: Some(cluster_id),
                    finished: true,
                    ..record.clone()
                };
                let window = match (record.last_revision, restored) {
                    (Some(last), Some(now)) if last > now => {
                        format!("revisions {} to {last} are lost", now + 1)
                    }
                    (Some(_), Some(_)) => "no known revision is lost".to_string(),
                    _ => "the last revision before the loss is unknown".to_string(),
                };
                let message = format!(
                    "seed {seed} runs {} at revision {}: recovered ({window}); the cluster \
                     grows back with learners",
                    if restoring { from.as_str() } else { "empty" },
                    revision.or(restored).unwrap_or_default()
                );
                let action = Action::FinishRecovery { record: finished };
                progress(state, Reason::Recovered, vec![action], message)
            }
            None => {
                let message = format!("waiting for seed {seed} to start from {from} and answer");
                progress(state, reason, vec![], message)
            }
        },
    }
}

/// A record that cannot be carried out as written.
fn refused(state: State, record: &RecoveryRecord, what: &str) -> Decision {
    let why = Why::new(
        Reason::RecoveryRefused,
        format!(
            "the {} recovery of {} {what}; nothing more is done. {}",
            record.policy,
            record.incident,
            how_to_abandon(record)
        ),
    );
    Decision::blocked(state, why)
}
