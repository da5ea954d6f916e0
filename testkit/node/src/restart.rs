//! restartPolicy decisions: what happens when a container exits, and how long to back off
//! before starting it again.

use std::time::Duration;

/// A pod's `spec.restartPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart on every exit (the default).
    Always,
    /// Restart on a non-zero exit only.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// Reads the policy; absent or unknown means `Always`, the API's default.
    pub fn parse(value: Option<&str>) -> RestartPolicy {
        match value {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        }
    }
}

/// Whether a regular container that exited with `exit_code` is started again.
pub fn restarts_container(policy: RestartPolicy, exit_code: i32) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => exit_code != 0,
        RestartPolicy::Never => false,
    }
}

/// What follows the exit of an init container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitOutcome {
    /// It succeeded: run the next one.
    Next,
    /// It failed: run it again after a back-off.
    Retry,
    /// It failed and may not be retried: the pod fails.
    FailPod,
}

/// Decides the fate of an init container that exited with `exit_code`.
pub fn init_exit(policy: RestartPolicy, exit_code: i32) -> InitOutcome {
    if exit_code == 0 {
        InitOutcome::Next
    } else if policy == RestartPolicy::Never {
        InitOutcome::FailPod
    } else {
        InitOutcome::Retry
    }
}

/// The wait before the next try of a container that could not be started, tried
/// `restarts` times so far: 1 s, doubling, at most 16 s (shorter than a kubelet's
/// 10 s..5 min, for quick tests).
pub fn backoff(restarts: i32) -> Duration {
    let exponent = restarts.clamp(0, 4) as u32;
    Duration::from_secs(1 << exponent)
}

/// The wait before restarting a container that exited, restarted `restarts` times so far:
/// none after its first exit (a kubelet restarts it at once and only then starts its
/// back-off), then [`backoff`] from 1 s.
pub fn restart_delay(restarts: i32) -> Duration {
    if restarts <= 0 {
        Duration::ZERO
    } else {
        backoff(restarts - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_policy_means_always() {
        assert_eq!(RestartPolicy::parse(None), RestartPolicy::Always);
        assert_eq!(RestartPolicy::parse(Some("Never")), RestartPolicy::Never);
        assert_eq!(
            RestartPolicy::parse(Some("OnFailure")),
            RestartPolicy::OnFailure
        );
    }

    #[test]
    fn always_restarts_every_exit() {
        assert!(restarts_container(RestartPolicy::Always, 0));
        assert!(restarts_container(RestartPolicy::Always, 137));
    }

    #[test]
    fn on_failure_restarts_only_failures() {
        assert!(!restarts_container(RestartPolicy::OnFailure, 0));
        assert!(restarts_container(RestartPolicy::OnFailure, 1));
    }

    #[test]
    fn never_restarts_nothing() {
        assert!(!restarts_container(RestartPolicy::Never, 0));
        assert!(!restarts_container(RestartPolicy::Never, 1));
    }

    #[test]
    fn failed_init_container_fails_pod_only_under_never() {
        assert_eq!(init_exit(RestartPolicy::Never, 0), InitOutcome::Next);
        assert_eq!(init_exit(RestartPolicy::Never, 2), InitOutcome::FailPod);
        assert_eq!(init_exit(RestartPolicy::OnFailure, 2), InitOutcome::Retry);
        assert_eq!(init_exit(RestartPolicy::Always, 2), InitOutcome::Retry);
    }

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(100), Duration::from_secs(16));
        assert_eq!(backoff(-1), Duration::from_secs(1));
    }

    #[test]
    fn a_first_exit_restarts_at_once_then_the_back_off_starts() {
        assert_eq!(restart_delay(0), Duration::ZERO);
        assert_eq!(restart_delay(1), Duration::from_secs(1));
        assert_eq!(restart_delay(2), Duration::from_secs(2));
        assert_eq!(restart_delay(100), Duration::from_secs(16));
    }
}
