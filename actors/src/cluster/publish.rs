//! When a tick's status is written. Pure: no I/O.
//!
//! A status that differs from the one written last in substance (phase, reason, members,
//! versions, a condition's truth or reason, …) is written at once. One that differs only
//! in its wording (the message, the conditions' messages) waits until the last write is
//! `rewording` old: a member that keeps failing in changing words ("no address yet",
//! "connection refused", "added 41s ago") must not rewrite the EtcdCluster, and wake
//! every watcher of it, at every tick. The newest wording is written by the first tick
//! after that time; the tick that holds it back asks for one by then.

use std::time::Duration;

use tokio::time::Instant;

use etcd_operator_core::report::StatusReport;

/// A status as it was last written.
#[derive(Debug, Clone)]
pub(crate) struct LastWrite {
    /// What was written.
    pub status: std::sync::Arc<StatusReport>,
    /// When.
    pub at: Instant,
}

/// Whether a tick's status is to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusWrite {
    /// Now: it differs in substance, or nothing was written yet.
    Now,
    /// Never: it is what was written last.
    Unchanged,
    /// Only its wording differs and the last write is recent: at this time, if still so.
    StepTime(Instant),
}

/// Whether `status` is to be written at `now`, given the status written last.
pub(crate) fn write_due(
    last: Option<&LastWrite>,
    status: &StatusReport,
    now: Instant,
    rewording: Duration,
) -> StatusWrite {
    let Some(last) = last else {
        return StatusWrite::Now;
    };
    if *last.status == *status {
        return StatusWrite::Unchanged;
    }
    let due = last.at + rewording;
    if due > now && same_but_wording(&last.status, status) {
        StatusWrite::StepTime(due)
    } else {
        StatusWrite::Now
    }
}

/// Whether two statuses say the same thing, perhaps in other words or with other
/// measures: the newest revision and the backends' sizes move with every write a busy
/// cluster takes, and are not worth a status write each.
fn same_but_wording(a: &StatusReport, b: &StatusReport) -> bool {
    fn unworded(s: &StatusReport) -> StatusReport {
        let mut s = s.clone();
        s.message.clear();
        s.conditions.iter_mut().for_each(|c| c.message.clear());
        s.revision = None;
        s.quota_used_percent = None;
        for m in &mut s.details {
            m.db_size = None;
            m.db_size_in_use = None;
            m.revision = None;
        }
        s
    }
    unworded(a) == unworded(b)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use etcd_operator_core::lifecycle::fixtures::{World, running_state};
    use etcd_operator_core::lifecycle::{Deadlines, DesiredCluster, decide};
    use etcd_operator_core::report::{Previous, report};

    const REWORDING: Duration = Duration::from_secs(5);

    /// The status of a cluster of three whose third member does not answer.
    fn one_down(now: Instant) -> StatusReport {
        let obs = World::healthy(now, 3, "3.5.21").unreachable(3).build();
        let spec = DesiredCluster::new(3, "3.5.21");
        let d = decide(running_state(), &obs, &spec, &Deadlines::default());
        report(&d, &obs, &spec, &[], &Previous::default()).status
    }

    fn reworded(status: &StatusReport, words: &str) -> StatusReport {
        let mut s = status.clone();
        s.message = format!("{} ({words})", s.message);
        if let Some(c) = s.conditions.first_mut() {
            c.message = words.to_string();
        }
        s
    }

    fn written(status: &StatusReport, at: Instant) -> LastWrite {
        LastWrite {
            status: Arc::new(status.clone()),
            at,
        }
    }

    #[test]
    fn new_measures_alone_wait_like_new_wording() {
        let now = Instant::now();
        let status = one_down(now);
        let last = written(&status, now);
        let mut busier = status.clone();
        busier.revision = Some(busier.revision.unwrap_or(0) + 100);
        busier.quota_used_percent = Some(12);
        if let Some(m) = busier.details.first_mut() {
            m.db_size = Some(64 << 20);
        }
        let soon = now + Duration::from_secs(1);
        assert_eq!(
            write_due(Some(&last), &busier, soon, REWORDING),
            StatusWrite::StepTime(now + REWORDING)
        );
    }

    #[test]
    fn the_first_status_is_written_at_once() {
        let now = Instant::now();
        assert_eq!(
            write_due(None, &one_down(now), now, REWORDING),
            StatusWrite::Now
        );
    }

    #[test]
    fn a_status_equal_to_the_last_written_is_not_written_again() {
        let now = Instant::now();
        let last = written(&one_down(now), now);
        let later = now + Duration::from_secs(60);
        assert_eq!(
            write_due(Some(&last), &one_down(now), later, REWORDING),
            StatusWrite::Unchanged
        );
    }

    #[test]
    fn new_wording_waits_until_the_last_write_is_old_enough_then_is_written() {
        let now = Instant::now();
        let status = one_down(now);
        let last = written(&status, now);
        let new = reworded(&status, "connection refused");
        let soon = now + Duration::from_secs(1);
        assert_eq!(
            write_due(Some(&last), &new, soon, REWORDING),
            StatusWrite::StepTime(now + REWORDING)
        );
        assert_eq!(
            write_due(Some(&last), &new, now + REWORDING, REWORDING),
            StatusWrite::Now
        );
    }

    #[test]
    fn a_change_of_substance_is_written_at_once_whatever_its_wording() {
        let now = Instant::now();
        let status = one_down(now);
        let last = written(&status, now);
        let soon = now + Duration::from_millis(10);
        let mut phase = reworded(&status, "all is well");
        phase.reason = etcd_operator_core::lifecycle::Reason::Converged;
        let mut member = status.clone();
        member.unready.clear();
        let mut condition = status.clone();
        condition.conditions[0].status = !condition.conditions[0].status;
        for changed in [phase, member, condition] {
            assert_eq!(
                write_due(Some(&last), &changed, soon, REWORDING),
                StatusWrite::Now,
                "{changed:?}"
            );
        }
    }
}
