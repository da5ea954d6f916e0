//! When a Cluster actor ticks next, from the pace of its last tick: soon while it is busy,
//! at the normal interval while it watches, and less and less often while the cluster is
//! settled (2, 4, 8, 16 s, then every `idle_interval` with the defaults), never past the
//! lifecycle's next deadline. Any event (a nudge, a spec change) starts it over from fast.
//! A tick whose every action failed is followed less and less soon (twice the follow-up,
//! doubling up to `idle_interval`) until one that acts without failing: a refusal that
//! lasts is not retried ten times a second, and an event still brings a tick at once.
//! When every failure is of a kind that retrying does not mend (`Cause::is_lasting`: a
//! missing permission, a namespace being deleted, a request the API server rejects), the
//! wait is `idle_interval` at once.

use std::time::Duration;

use tokio::time::Instant;

use etcd_operator_core::lifecycle::Pace;
use etcd_operator_core::outcome::{ActionOutcome, ActionResult};

use super::config::ClusterConfig;

/// How a tick's actions went, as the back-off counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acted {
    /// It took no action.
    Nothing,
    /// At least one action did not fail (done, or etcd's "not yet").
    NotAllFailed,
    /// Every action failed; `lasting` when every failure is one that retrying soon does
    /// not mend.
    AllFailed {
        /// Every cause [`Cause::is_lasting`](etcd_operator_core::outcome::Cause::is_lasting).
        lasting: bool,
    },
}

impl Acted {
    /// How the actions of `outcomes` went.
    pub(crate) fn of(outcomes: &[ActionOutcome]) -> Acted {
        let causes: Option<Vec<_>> = outcomes
            .iter()
            .map(|o| match o.result {
                ActionResult::Failed { cause, .. } => Some(cause),
                _ => None,
            })
            .collect();
        match causes {
            _ if outcomes.is_empty() => Acted::Nothing,
            None => Acted::NotAllFailed,
            Some(causes) => Acted::AllFailed {
                lasting: causes.iter().all(|c| c.is_lasting()),
            },
        }
    }
}

/// A count of failing ticks at which the back-off has reached its ceiling with any
/// configuration (the doubling stops at 2^16).
const LONGEST: u32 = 16;

/// The actor's back-off: how many settled ticks, and how many ticks whose every action
/// failed, it has seen in a row.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TickBackoff {
    /// Settled ticks in a row since the last event or the last tick that was not settled.
    settled: u32,
    /// Ticks in a row whose actions all failed (at least one).
    failing: u32,
}

impl TickBackoff {
    /// Starts over from fast: something happened. A run of failed actions still counts
    /// (only a tick that acts without failing ends it).
    pub(crate) fn reset(&mut self) {
        self.settled = 0;
    }

    /// Notes how a tick's actions went.
    pub(crate) fn note_actions(&mut self, acted: Acted) {
        match acted {
            Acted::Nothing => {}
            Acted::NotAllFailed => self.failing = 0,
            Acted::AllFailed { lasting: false } => self.failing = self.failing.saturating_add(1),
            Acted::AllFailed { lasting: true } => self.failing = LONGEST,
        }
    }

    /// The time from `now` to the next tick after a tick of `pace` whose lifecycle's
    /// next deadline is `deadline`.
    pub(crate) fn next(
        &mut self,
        pace: Pace,
        deadline: Option<Instant>,
        now: Instant,
        config: &ClusterConfig,
    ) -> Duration {
        let wait = match pace {
            Pace::Busy => {
                self.reset();
                failing_wait(self.failing, config)
            }
            Pace::Watchful => {
                self.reset();
                config.tick_interval
            }
            Pace::Settled => {
                let wait = settled_wait(self.settled, config);
                self.settled = self.settled.saturating_add(1);
                wait
            }
        };
        match deadline {
            // A deadline that has passed is acted on by the tick it makes: do not spin on
            // it faster than a busy cluster would.
            Some(at) => wait.min(at.saturating_duration_since(now).max(config.follow_up)),
            None => wait,
        }
    }
}

/// The follow-up after `n` ticks in a row whose actions all failed: the follow-up doubled
/// `n` times, up to the idle interval.
fn failing_wait(n: u32, config: &ClusterConfig) -> Duration {
    doubled(config.follow_up, n, config.idle_interval)
}

/// The wait after the `n`-th settled tick in a row (from 0): the tick interval doubled `n`
/// times, up to the idle interval (never below the tick interval).
fn settled_wait(n: u32, config: &ClusterConfig) -> Duration {
    doubled(config.tick_interval, n, config.idle_interval)
}

/// `base` doubled `n` times, up to `ceiling` (never below `base`).
fn doubled(base: Duration, n: u32, ceiling: Duration) -> Duration {
    let factor = 1u32.checked_shl(n.min(16)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(ceiling.max(base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_core::lifecycle::Action;
    use etcd_operator_core::outcome::Cause;
    use etcd_operator_core::ports::{ApiErrorKind, EtcdErrorKind};

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn waits(backoff: &mut TickBackoff, pace: Pace, n: usize) -> Vec<Duration> {
        let config = ClusterConfig::default();
        let now = Instant::now();
        (0..n)
            .map(|_| backoff.next(pace, None, now, &config))
            .collect()
    }

    #[test]
    fn a_settled_cluster_backs_off_to_the_idle_interval() {
        let mut backoff = TickBackoff::default();
        assert_eq!(
            waits(&mut backoff, Pace::Settled, 7),
            [2, 4, 8, 16, 20, 20, 20].map(secs)
        );
    }

    #[test]
    fn a_busy_cluster_follows_up_quickly_and_starts_the_back_off_over() {
        let mut backoff = TickBackoff::default();
        waits(&mut backoff, Pace::Settled, 5);
        assert_eq!(
            waits(&mut backoff, Pace::Busy, 1),
            [Duration::from_millis(100)]
        );
        assert_eq!(waits(&mut backoff, Pace::Settled, 2), [2, 4].map(secs));
    }

    #[test]
    fn a_watchful_cluster_ticks_at_the_tick_interval_and_starts_the_back_off_over() {
        let mut backoff = TickBackoff::default();
        waits(&mut backoff, Pace::Settled, 5);
        assert_eq!(waits(&mut backoff, Pace::Watchful, 2), [2, 2].map(secs));
        assert_eq!(waits(&mut backoff, Pace::Settled, 1), [secs(2)]);
    }

    #[test]
    fn an_event_starts_the_back_off_over() {
        let mut backoff = TickBackoff::default();
        waits(&mut backoff, Pace::Settled, 6);
        backoff.reset();
        assert_eq!(waits(&mut backoff, Pace::Settled, 1), [secs(2)]);
    }

    #[test]
    fn ticks_whose_every_action_failed_back_off_until_one_acts_without_failing() {
        let mut backoff = TickBackoff::default();
        let failed = |backoff: &mut TickBackoff| {
            backoff.note_actions(Acted::AllFailed { lasting: false });
            waits(backoff, Pace::Busy, 1)[0]
        };
        let backing_off: Vec<_> = (0..9).map(|_| failed(&mut backoff)).collect();
        let ms = Duration::from_millis;
        assert_eq!(
            backing_off,
            [200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000].map(ms)
        );
        // An event does not end the run; a tick without actions neither.
        backoff.reset();
        backoff.note_actions(Acted::Nothing);
        assert_eq!(waits(&mut backoff, Pace::Busy, 1), [secs(20)]);
        backoff.note_actions(Acted::NotAllFailed);
        assert_eq!(waits(&mut backoff, Pace::Busy, 1), [ms(100)]);
    }

    fn failed(cause: Cause) -> ActionOutcome {
        ActionOutcome {
            action: Action::EnsureServices,
            result: ActionResult::Failed {
                error: "refused".into(),
                cause,
            },
        }
    }

    const FORBIDDEN: Cause = Cause::Kubernetes(ApiErrorKind::Forbidden);
    const TIMEOUT: Cause = Cause::Etcd(EtcdErrorKind::Timeout);

    #[test]
    fn a_tick_whose_every_failure_is_lasting_waits_the_idle_interval_at_once() {
        let mut backoff = TickBackoff::default();
        backoff.note_actions(Acted::of(&[failed(FORBIDDEN)]));
        assert_eq!(waits(&mut backoff, Pace::Busy, 1), [secs(20)]);
        // A failure that a retry may mend among them: the back-off grows from the start.
        let mut backoff = TickBackoff::default();
        backoff.note_actions(Acted::of(&[failed(FORBIDDEN), failed(TIMEOUT)]));
        assert_eq!(
            waits(&mut backoff, Pace::Busy, 1),
            [Duration::from_millis(200)]
        );
    }

    #[test]
    fn a_tick_counts_as_failing_only_when_it_acted_and_every_action_failed() {
        let done = ActionOutcome {
            action: Action::EnsureServices,
            result: ActionResult::Done {
                note: "ensured".into(),
                member: None,
            },
        };
        assert_eq!(Acted::of(&[]), Acted::Nothing);
        assert_eq!(Acted::of(&[failed(FORBIDDEN), done]), Acted::NotAllFailed);
        assert_eq!(
            Acted::of(&[failed(TIMEOUT)]),
            Acted::AllFailed { lasting: false }
        );
        assert_eq!(
            Acted::of(&[
                failed(FORBIDDEN),
                failed(Cause::Kubernetes(ApiErrorKind::Invalid))
            ]),
            Acted::AllFailed { lasting: true }
        );
    }

    #[test]
    fn a_settled_cluster_never_sleeps_past_its_next_deadline() {
        let mut backoff = TickBackoff::default();
        waits(&mut backoff, Pace::Settled, 6);
        let now = Instant::now();
        let config = ClusterConfig::default();
        let wait = backoff.next(Pace::Settled, Some(now + secs(7)), now, &config);
        assert_eq!(wait, secs(7));
    }

    #[test]
    fn a_deadline_already_passed_does_not_make_the_actor_spin() {
        let mut backoff = TickBackoff::default();
        let config = ClusterConfig::default();
        let later = Instant::now() + secs(60);
        let wait = backoff.next(Pace::Settled, Some(later - secs(30)), later, &config);
        assert_eq!(wait, config.follow_up);
    }

    #[test]
    fn an_idle_interval_shorter_than_the_tick_interval_does_not_speed_ticks_up() {
        let config = ClusterConfig {
            tick_interval: secs(3600),
            ..ClusterConfig::default()
        };
        assert_eq!(settled_wait(0, &config), secs(3600));
        assert_eq!(settled_wait(5, &config), secs(3600));
    }
}
