//! The pod phase, derived from container states the way a kubelet derives it.

use crate::record::{ContainerRecord, RunState};
use crate::restart::RestartPolicy;

/// A pod's `status.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not every container has started yet (init containers, image errors, ...).
    Pending,
    /// Every container has been created and at least one runs or will restart.
    Running,
    /// Every container terminated with exit code 0 and none will restart.
    Succeeded,
    /// Every container terminated, at least one with a failure, and none will restart.
    Failed,
}

impl Phase {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    /// Whether the pod is finished for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    /// Reads the API spelling.
    pub fn parse(text: &str) -> Option<Phase> {
        match text {
            "Pending" => Some(Phase::Pending),
            "Running" => Some(Phase::Running),
            "Succeeded" => Some(Phase::Succeeded),
            "Failed" => Some(Phase::Failed),
            _ => None,
        }
    }
}

/// How far the init containers got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitProgress {
    /// All of them completed successfully (or there are none).
    Done,
    /// One is still to run, running or being retried.
    Pending,
    /// One failed and the restart policy is `Never`.
    Failed,
}

/// The init progress given the init containers' records, in spec order.
pub fn init_progress(policy: RestartPolicy, init: &[ContainerRecord]) -> InitProgress {
    for record in init {
        match &record.state {
            RunState::Terminated(t) if t.exit_code == 0 => continue,
            RunState::Terminated(_) if policy == RestartPolicy::Never => {
                return InitProgress::Failed;
            }
            _ => return InitProgress::Pending,
        }
    }
    InitProgress::Done
}

/// The phase: `Pending` until the init containers are done and no container waits for its
/// first start; then `Running` while any runs or may restart; else `Succeeded`/`Failed`.
/// A container waiting to be restarted counts as stopped, as in the kubelet.
pub fn pod_phase(
    policy: RestartPolicy,
    init: InitProgress,
    containers: &[ContainerRecord],
) -> Phase {
    match init {
        InitProgress::Failed => return Phase::Failed,
        InitProgress::Pending => return Phase::Pending,
        InitProgress::Done => {}
    }
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for record in containers {
        match &record.state {
            RunState::Running { .. } => running += 1,
            RunState::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            RunState::Waiting { .. } if record.last_termination.is_some() => stopped += 1,
            RunState::Waiting { .. } => waiting += 1,
        }
    }
    if waiting > 0 {
        Phase::Pending
    } else if running > 0 {
        Phase::Running
    } else if stopped > 0 {
        match policy {
            RestartPolicy::Always => Phase::Running,
            _ if stopped == succeeded => Phase::Succeeded,
            RestartPolicy::OnFailure => Phase::Running,
            RestartPolicy::Never => Phase::Failed,
        }
    } else {
        Phase::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Terminated;
    use jiff::Timestamp;

    fn waiting() -> ContainerRecord {
        ContainerRecord::new("c", "img", "ContainerCreating")
    }

    fn running() -> ContainerRecord {
        let mut r = waiting();
        r.state = RunState::Running {
            started_at: Timestamp::UNIX_EPOCH,
            container_id: "process://1".into(),
        };
        r
    }

    fn exited(code: i32) -> ContainerRecord {
        let mut r = waiting();
        r.state = RunState::Terminated(term(code));
        r
    }

    fn term(code: i32) -> Terminated {
        Terminated::from_exit(Some(code), None, None, Timestamp::UNIX_EPOCH, None)
    }

    fn restarting() -> ContainerRecord {
        let mut r = waiting();
        r.state = RunState::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: None,
        };
        r.last_termination = Some(term(1));
        r
    }

    use RestartPolicy::*;

    #[test]
    fn init_containers_keep_pod_pending() {
        assert_eq!(pod_phase(Never, InitProgress::Pending, &[]), Phase::Pending);
        assert_eq!(
            init_progress(Never, &[exited(0), waiting()]),
            InitProgress::Pending
        );
        assert_eq!(init_progress(Never, &[exited(0)]), InitProgress::Done);
    }

    #[test]
    fn failed_init_container_fails_pod_under_never_only() {
        assert_eq!(init_progress(Never, &[exited(1)]), InitProgress::Failed);
        assert_eq!(pod_phase(Never, InitProgress::Failed, &[]), Phase::Failed);
        assert_eq!(
            init_progress(Always, &[restarting()]),
            InitProgress::Pending
        );
    }

    #[test]
    fn waiting_for_first_start_is_pending() {
        assert_eq!(
            pod_phase(Always, InitProgress::Done, &[running(), waiting()]),
            Phase::Pending
        );
    }

    #[test]
    fn any_running_container_makes_pod_running() {
        assert_eq!(
            pod_phase(Never, InitProgress::Done, &[running(), exited(1)]),
            Phase::Running
        );
    }

    #[test]
    fn never_policy_ends_in_succeeded_or_failed() {
        assert_eq!(
            pod_phase(Never, InitProgress::Done, &[exited(0), exited(0)]),
            Phase::Succeeded
        );
        assert_eq!(
            pod_phase(Never, InitProgress::Done, &[exited(0), exited(137)]),
            Phase::Failed
        );
    }

    #[test]
    fn restarting_container_keeps_always_and_on_failure_pods_running() {
        assert_eq!(
            pod_phase(Always, InitProgress::Done, &[restarting()]),
            Phase::Running
        );
        assert_eq!(
            pod_phase(OnFailure, InitProgress::Done, &[restarting()]),
            Phase::Running
        );
    }

    #[test]
    fn on_failure_succeeds_when_all_exit_zero() {
        assert_eq!(
            pod_phase(OnFailure, InitProgress::Done, &[exited(0)]),
            Phase::Succeeded
        );
        assert_eq!(
            pod_phase(Always, InitProgress::Done, &[exited(0)]),
            Phase::Running
        );
    }

    #[test]
    fn never_policy_container_waiting_after_a_run_counts_as_failed() {
        // An image change restarted it, then the new image could not be pulled.
        assert_eq!(
            pod_phase(Never, InitProgress::Done, &[restarting()]),
            Phase::Failed
        );
    }

    #[test]
    fn phase_spelling_round_trips() {
        for p in [
            Phase::Pending,
            Phase::Running,
            Phase::Succeeded,
            Phase::Failed,
        ] {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
        }
    }
}
