//! When the next backup is due: once, every N seconds, or on a cron schedule; failures
//! retried sooner, with a growing delay.

use std::str::FromStr;
use std::time::Duration;

use jiff::{Timestamp, tz::TimeZone};

use crate::api::backup::EtcdBackupSpec;

/// First retry delay after a failure; it doubles with each failure in a row.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

/// A spec whose schedule cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// `schedule` is not cron syntax.
    #[error("schedule {schedule:?} is not a cron schedule: {reason}")]
    Cron {
        /// The schedule given.
        schedule: String,
        /// What the parser said.
        reason: String,
    },
    /// Both an interval and a schedule (the CRD refuses it; an object written before the
    /// rule existed may still have both).
    #[error("schedule and backupPolicy.backupIntervalInSecond are alternatives: set one")]
    Both,
}

/// When backups are taken.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// One backup (retried until it succeeds).
    Once,
    /// One backup every interval, counted from the last good one.
    Every(Duration),
    /// On a cron schedule, in UTC.
    Cron(Box<croner::Cron>),
}

impl Schedule {
    /// The schedule a spec asks for.
    pub fn from_spec(spec: &EtcdBackupSpec) -> Result<Self, ScheduleError> {
        let interval = spec
            .policy()
            .backup_interval_in_second
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(s.unsigned_abs()));
        match (spec.schedule.as_deref().map(str::trim), interval) {
            (Some(_), Some(_)) => Err(ScheduleError::Both),
            (Some(cron), None) => croner::Cron::from_str(cron)
                .map(|c| Schedule::Cron(Box::new(c)))
                .map_err(|e| ScheduleError::Cron {
                    schedule: cron.to_string(),
                    reason: e.to_string(),
                }),
            (None, Some(every)) => Ok(Schedule::Every(every)),
            (None, None) => Ok(Schedule::Once),
        }
    }

    /// Whether backups repeat.
    pub fn is_periodic(&self) -> bool {
        !matches!(self, Schedule::Once)
    }

    /// The first regular run strictly after `after`.
    fn regular_after(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Once => None,
            Schedule::Every(every) => after.checked_add(*every).ok(),
            Schedule::Cron(cron) => cron
                .find_next_occurrence(&after.to_zoned(TimeZone::UTC), false)
                .ok()
                .map(|z| z.timestamp()),
        }
    }
}

/// What earlier attempts left in the status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct History {
    /// When the last good backup was taken (for the current spec, for a one-shot backup).
    pub last_success: Option<Timestamp>,
    /// When the last attempt started.
    pub last_attempt: Option<Timestamp>,
    /// Failed attempts since the last success.
    pub failures: u32,
}

/// The retry delay after `failures` failures in a row.
pub fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// When the next backup is due, never before `now`; `None` when none is (a one-shot
/// backup that succeeded).
///
/// - After a failed attempt: [`retry_delay`] after it, or the next regular run after it
///   when that comes first (never at once: a store that is down is not hammered).
/// - Every N seconds: N after the last good backup, at once when there is none.
/// - Cron: the first occurrence after the last good backup (a run missed while the
///   operator was away is made up at once, once); with no good backup yet, the first
///   occurrence after the last attempt, or after `now`.
pub fn next_run(schedule: &Schedule, history: History, now: Timestamp) -> Option<Timestamp> {
    if let Some(attempt) = history.last_attempt.filter(|_| history.failures > 0) {
        let retry = attempt
            .checked_add(retry_delay(history.failures))
            .unwrap_or(attempt);
        let due = schedule
            .regular_after(attempt)
            .map_or(retry, |regular| regular.min(retry));
        return Some(due.max(now));
    }
    let due = match (schedule, history.last_success) {
        (Schedule::Once, Some(_)) => return None,
        (Schedule::Once, None) | (Schedule::Every(_), None) => now,
        (Schedule::Every(_), Some(last)) => schedule.regular_after(last)?,
        (Schedule::Cron(_), last) => {
            schedule.regular_after(last.or(history.last_attempt).unwrap_or(now))?
        }
    };
    Some(due.max(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::backup::BackupPolicy;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn spec(interval: Option<i64>, schedule: Option<&str>) -> EtcdBackupSpec {
        EtcdBackupSpec {
            backup_policy: Some(BackupPolicy {
                backup_interval_in_second: interval,
                ..BackupPolicy::default()
            }),
            schedule: schedule.map(str::to_string),
            ..EtcdBackupSpec::default()
        }
    }

    #[test]
    fn the_spec_picks_once_interval_or_cron() {
        assert!(matches!(
            Schedule::from_spec(&spec(None, None)),
            Ok(Schedule::Once)
        ));
        assert!(matches!(
            Schedule::from_spec(&spec(Some(0), None)),
            Ok(Schedule::Once)
        ));
        assert!(matches!(
            Schedule::from_spec(&spec(Some(10), None)),
            Ok(Schedule::Every(d)) if d == Duration::from_secs(10)
        ));
        assert!(matches!(
            Schedule::from_spec(&spec(None, Some("*/5 * * * *"))),
            Ok(Schedule::Cron(_))
        ));
        assert_eq!(
            Schedule::from_spec(&spec(Some(10), Some("@hourly"))).unwrap_err(),
            ScheduleError::Both
        );
        let bad = Schedule::from_spec(&spec(None, Some("61 * * * *"))).unwrap_err();
        assert!(matches!(bad, ScheduleError::Cron { .. }), "{bad}");
    }

    #[test]
    fn a_one_shot_runs_at_once_and_never_again_after_a_success() {
        let now = at("2026-01-01T00:00:00Z");
        assert_eq!(
            next_run(&Schedule::Once, History::default(), now),
            Some(now)
        );
        let done = History {
            last_success: Some(now),
            last_attempt: Some(now),
            failures: 0,
        };
        assert_eq!(next_run(&Schedule::Once, done, now), None);
    }

    #[test]
    fn an_interval_counts_from_the_last_good_backup() {
        let every = Schedule::Every(Duration::from_secs(60));
        let now = at("2026-01-01T00:00:30Z");
        let history = History {
            last_success: Some(at("2026-01-01T00:00:00Z")),
            last_attempt: Some(at("2026-01-01T00:00:00Z")),
            failures: 0,
        };
        assert_eq!(
            next_run(&every, history, now),
            Some(at("2026-01-01T00:01:00Z"))
        );
        // Overdue (the operator was away): at once.
        let late = at("2026-01-01T00:05:00Z");
        assert_eq!(next_run(&every, history, late), Some(late));
    }

    #[test]
    fn cron_runs_at_its_next_occurrence() {
        let cron = Schedule::from_spec(&spec(None, Some("*/15 * * * *"))).unwrap();
        let now = at("2026-01-01T10:07:00Z");
        assert_eq!(
            next_run(&cron, History::default(), now),
            Some(at("2026-01-01T10:15:00Z"))
        );
        let history = History {
            last_success: Some(at("2026-01-01T10:15:00Z")),
            last_attempt: Some(at("2026-01-01T10:15:00Z")),
            failures: 0,
        };
        let now = at("2026-01-01T10:16:00Z");
        assert_eq!(
            next_run(&cron, history, now),
            Some(at("2026-01-01T10:30:00Z"))
        );
        let with_seconds = Schedule::from_spec(&spec(None, Some("*/10 * * * * *"))).unwrap();
        assert_eq!(
            next_run(
                &with_seconds,
                History::default(),
                at("2026-01-01T10:00:01Z")
            ),
            Some(at("2026-01-01T10:00:10Z"))
        );
    }

    #[test]
    fn failures_are_retried_with_a_growing_delay_capped() {
        assert_eq!(retry_delay(1), Duration::from_secs(5));
        assert_eq!(retry_delay(2), Duration::from_secs(10));
        assert_eq!(retry_delay(4), Duration::from_secs(40));
        assert_eq!(retry_delay(30), MAX_RETRY);
        let attempt = at("2026-01-01T00:00:00Z");
        let history = History {
            last_success: None,
            last_attempt: Some(attempt),
            failures: 2,
        };
        assert_eq!(
            next_run(&Schedule::Once, history, attempt),
            Some(at("2026-01-01T00:00:10Z"))
        );
        // A periodic backup retries at the retry time or the regular one, whichever is first.
        let every = Schedule::Every(Duration::from_secs(7));
        let history = History {
            last_success: Some(attempt),
            last_attempt: Some(attempt),
            failures: 3,
        };
        assert_eq!(
            next_run(&every, history, attempt),
            Some(at("2026-01-01T00:00:07Z"))
        );
    }

    #[test]
    fn an_overdue_periodic_backup_that_failed_waits_before_trying_again() {
        let every = Schedule::Every(Duration::from_secs(10));
        let attempt = at("2026-01-01T00:00:10Z");
        let history = History {
            last_success: Some(at("2026-01-01T00:00:00Z")),
            last_attempt: Some(attempt),
            failures: 1,
        };
        assert_eq!(
            next_run(&every, history, attempt),
            Some(at("2026-01-01T00:00:15Z"))
        );
    }
}
