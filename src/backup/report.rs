//! The status of an EtcdBackup after each step (pure): what an attempt did, what the spec
//! allows, when the next backup is due.

use jiff::Timestamp;

use crate::api::ClusterCondition;
use crate::api::backup::EtcdBackupStatus;

use super::run::{BackupOutcome, Retention};
use super::schedule::History;

/// Condition: the last attempt succeeded.
pub const SUCCEEDED: &str = "Succeeded";
/// Condition: a next backup is due.
pub const SCHEDULED: &str = "Scheduled";

/// How an attempt ended.
#[derive(Debug, Clone)]
pub enum AttemptOutcome {
    /// Stored and verified; retention done (or stopped early, said in `retention.error`).
    Succeeded {
        /// The backup.
        outcome: Box<BackupOutcome>,
        /// What retention did.
        retention: Retention,
    },
    /// Nothing new counted as a backup.
    Failed {
        /// CamelCase reason.
        reason: &'static str,
        /// For people.
        message: String,
    },
}

/// Sets condition `kind`, keeping its transition time when its status did not change.
pub fn set_condition(
    conditions: &mut Vec<ClusterCondition>,
    kind: &str,
    true_: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let status = if true_ { "True" } else { "False" };
    let previous = conditions.iter().position(|c| c.r#type == kind);
    let transition = match previous.map(|i| &conditions[i]) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(now.to_string()),
    };
    let condition = ClusterCondition {
        r#type: kind.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: transition,
    };
    match previous {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}

/// The status after an attempt that started at `started` for `generation`.
pub fn after_attempt(
    previous: &EtcdBackupStatus,
    verdict: &AttemptOutcome,
    started: Timestamp,
    generation: Option<i64>,
    now: Timestamp,
) -> EtcdBackupStatus {
    let mut status = previous.clone();
    status.last_attempt_time = Some(started.to_string());
    status.observed_generation = generation;
    match verdict {
        AttemptOutcome::Succeeded { outcome, retention } => {
            let m = &outcome.metadata;
            status.succeeded = true;
            status.reason = String::new();
            status.message = success_message(outcome, retention);
            status.etcd_version = m.etcd_version.clone();
            status.etcd_revision = m.revision;
            status.last_success_date = Some(m.time.clone());
            status.last_backup_path = outcome.path.clone();
            status.last_backup_size = i64::try_from(m.size).unwrap_or(i64::MAX);
            status.last_backup_sha256 = m.sha256.clone();
            status.consecutive_failures = 0;
            status.backups = i32::try_from(retention.kept).unwrap_or(i32::MAX);
            let message = status.message.clone();
            set_condition(
                &mut status.conditions,
                SUCCEEDED,
                true,
                "BackupSucceeded",
                &message,
                now,
            );
        }
        AttemptOutcome::Failed { reason, message } => {
            not_succeeded(&mut status, reason, message, now);
            status.consecutive_failures = previous.consecutive_failures.saturating_add(1);
        }
    }
    status
}

/// Marks `status` as not succeeded, for `reason`: its fields and its `Succeeded` condition.
fn not_succeeded(status: &mut EtcdBackupStatus, reason: &str, message: &str, now: Timestamp) {
    status.succeeded = false;
    status.reason = reason.to_string();
    status.message = message.to_string();
    set_condition(
        &mut status.conditions,
        SUCCEEDED,
        false,
        reason,
        message,
        now,
    );
}

/// What a good backup's Event and status say.
pub fn success_message(outcome: &BackupOutcome, retention: &Retention) -> String {
    let m = &outcome.metadata;
    let mut text = format!(
        "stored {} ({} bytes, revision {}, sha256 {}) from member {} (etcd {}); {} kept",
        outcome.path, m.size, m.revision, m.sha256, m.member_id, m.etcd_version, retention.kept
    );
    if !retention.deleted.is_empty() {
        text.push_str(&format!(", deleted {}", retention.deleted.join(", ")));
    }
    if let Some(error) = &retention.error {
        text.push_str(&format!("; retention stopped: {error}"));
    }
    text
}

/// The status of a spec that cannot run: no attempt, no next backup.
pub fn refused(
    previous: &EtcdBackupStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> EtcdBackupStatus {
    let mut status = previous.clone();
    not_succeeded(&mut status, reason, message, now);
    status.observed_generation = generation;
    status.next_backup_time = None;
    set_condition(
        &mut status.conditions,
        SCHEDULED,
        false,
        reason,
        message,
        now,
    );
    status
}

/// The status with its next backup time and the `Scheduled` condition.
pub fn with_next(
    status: &EtcdBackupStatus,
    next: Option<Timestamp>,
    now: Timestamp,
) -> EtcdBackupStatus {
    let mut status = status.clone();
    status.next_backup_time = next.map(|t| t.to_string());
    match next {
        Some(t) => set_condition(
            &mut status.conditions,
            SCHEDULED,
            true,
            if status.consecutive_failures > 0 {
                "Retrying"
            } else {
                "Due"
            },
            &format!("next backup at {t}"),
            now,
        ),
        None => set_condition(
            &mut status.conditions,
            SCHEDULED,
            false,
            "Done",
            "a one-shot backup succeeded; no other backup is due",
            now,
        ),
    }
    status
}

/// What earlier attempts left, read from the status. A one-shot backup counts its good
/// backup only for the spec it was made for (`observedGeneration`): a changed spec backs up
/// again.
pub fn history(status: &EtcdBackupStatus, generation: Option<i64>, periodic: bool) -> History {
    let parse = |t: &Option<String>| t.as_deref().and_then(|t| t.parse::<Timestamp>().ok());
    let current = status.observed_generation == generation;
    History {
        last_success: parse(&status.last_success_date)
            .filter(|_| status.succeeded || periodic)
            .filter(|_| periodic || current),
        last_attempt: parse(&status.last_attempt_time),
        failures: u32::try_from(status.consecutive_failures).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::metadata::BackupMetadata;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn outcome() -> BackupOutcome {
        BackupOutcome {
            key: "p/c_20260101T000000.000Z_r42.db".into(),
            path: "b/p/c_20260101T000000.000Z_r42.db".into(),
            metadata: BackupMetadata {
                cluster: "c".into(),
                cluster_id: "abc".into(),
                member_id: "def".into(),
                revision: 42,
                etcd_version: "3.5.35".into(),
                size: 1056,
                sha256: "00ff".into(),
                time: "2026-01-01T00:00:00Z".into(),
                key: "p/c_20260101T000000.000Z_r42.db".into(),
                namespace: None,
                etcd_backup_uid: None,
            },
        }
    }

    #[test]
    fn a_success_fills_the_coreos_fields_and_clears_the_failure() {
        let previous = EtcdBackupStatus {
            reason: "StoreUnreachable".into(),
            consecutive_failures: 3,
            ..EtcdBackupStatus::default()
        };
        let retention = Retention {
            deleted: vec!["p/old.db".into()],
            kept: 3,
            error: None,
        };
        let verdict = AttemptOutcome::Succeeded {
            outcome: Box::new(outcome()),
            retention,
        };
        let now = at("2026-01-01T00:00:01Z");
        let s = after_attempt(
            &previous,
            &verdict,
            at("2026-01-01T00:00:00Z"),
            Some(4),
            now,
        );
        assert!(s.succeeded);
        assert_eq!(s.reason, "");
        assert_eq!((s.etcd_version.as_str(), s.etcd_revision), ("3.5.35", 42));
        assert_eq!(s.last_success_date.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(s.last_backup_path, "b/p/c_20260101T000000.000Z_r42.db");
        assert_eq!(
            (s.last_backup_size, s.backups, s.consecutive_failures),
            (1056, 3, 0)
        );
        assert_eq!(s.observed_generation, Some(4));
        assert!(s.message.contains("deleted p/old.db"), "{}", s.message);
        assert_eq!(s.conditions[0].status, "True");
    }

    #[test]
    fn a_failure_keeps_the_last_good_backup_and_counts_failures() {
        let good = after_attempt(
            &EtcdBackupStatus::default(),
            &AttemptOutcome::Succeeded {
                outcome: Box::new(outcome()),
                retention: Retention::default(),
            },
            at("2026-01-01T00:00:00Z"),
            Some(1),
            at("2026-01-01T00:00:01Z"),
        );
        let failed = AttemptOutcome::Failed {
            reason: "BucketNotFound",
            message: "bucket b does not exist".into(),
        };
        let s = after_attempt(
            &good,
            &failed,
            at("2026-01-01T00:01:00Z"),
            Some(1),
            at("2026-01-01T00:01:01Z"),
        );
        assert!(!s.succeeded);
        assert_eq!(s.reason, "BucketNotFound");
        assert_eq!(s.consecutive_failures, 1);
        assert_eq!(s.etcd_revision, 42);
        assert_eq!(s.last_backup_path, good.last_backup_path);
        let condition = &s.conditions[0];
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "BucketNotFound")
        );
        assert_eq!(
            condition.last_transition_time.as_deref(),
            Some("2026-01-01T00:01:01Z")
        );
    }

    #[test]
    fn a_one_shot_counts_its_success_only_for_the_spec_it_was_made_for() {
        let s = EtcdBackupStatus {
            succeeded: true,
            last_success_date: Some("2026-01-01T00:00:00Z".into()),
            observed_generation: Some(1),
            ..EtcdBackupStatus::default()
        };
        assert!(history(&s, Some(1), false).last_success.is_some());
        assert_eq!(history(&s, Some(2), false).last_success, None);
        assert!(history(&s, Some(2), true).last_success.is_some());
    }

    #[test]
    fn the_next_run_is_shown_with_the_scheduled_condition() {
        let now = at("2026-01-01T00:00:00Z");
        let s = with_next(
            &EtcdBackupStatus::default(),
            Some(at("2026-01-01T00:00:10Z")),
            now,
        );
        assert_eq!(s.next_backup_time.as_deref(), Some("2026-01-01T00:00:10Z"));
        assert_eq!(s.conditions[0].r#type, SCHEDULED);
        assert_eq!(s.conditions[0].status, "True");
        let done = with_next(&s, None, now);
        assert_eq!(done.next_backup_time, None);
        assert_eq!(done.conditions[0].reason, "Done");
    }
}
