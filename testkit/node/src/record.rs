//! What the node knows about one container, in the shape it reports: its state (waiting,
//! running, terminated), how its last process ended, restarts and readiness, and the
//! conversions to and from the API's `ContainerStatus`.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
/// How a container process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terminated {
    /// Exit code; 128+N when killed by signal N.
    pub exit_code: i32,
    /// The signal that killed it, if any.
    pub signal: Option<i32>,
    /// `Completed` for exit code 0, else `Error` (or a node-specific reason).
    pub reason: String,
    /// Extra detail.
    pub message: Option<String>,
    /// When it started, if known.
    pub started_at: Option<Timestamp>,
    /// When it ended.
    pub finished_at: Timestamp,
    /// `process://<pid>`, if known.
    pub container_id: Option<String>,
}

impl Terminated {
    /// The record of an exit with `code` or by `signal`.
    pub fn from_exit(
        code: Option<i32>,
        signal: Option<i32>,
        started_at: Option<Timestamp>,
        finished_at: Timestamp,
        container_id: Option<String>,
    ) -> Terminated {
        let exit_code = code.unwrap_or_else(|| 128 + signal.unwrap_or(0));
        Terminated {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_string(),
            message: None,
            started_at,
            finished_at,
            container_id,
        }
    }

    fn to_api(&self) -> ContainerStateTerminated {
        ContainerStateTerminated {
            container_id: self.container_id.clone(),
            exit_code: self.exit_code,
            signal: self.signal,
            reason: Some(self.reason.clone()),
            message: self.message.clone(),
            started_at: self.started_at.map(Time),
            finished_at: Some(Time(self.finished_at)),
        }
    }

    fn from_api(t: &ContainerStateTerminated) -> Terminated {
        Terminated {
            exit_code: t.exit_code,
            signal: t.signal,
            reason: t.reason.clone().unwrap_or_else(|| "Error".to_string()),
            message: t.message.clone(),
            started_at: t.started_at.as_ref().map(|x| x.0),
            finished_at: t
                .finished_at
                .as_ref()
                .map(|x| x.0)
                .unwrap_or_else(Timestamp::now),
            container_id: t.container_id.clone(),
        }
    }
}

/// A container's current state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Not running: not started yet, backing off, or unable to start.
    Waiting {
        /// Why (`ContainerCreating`, `PodInitializing`, `ErrImagePull`, `CrashLoopBackOff`...).
        reason: String,
        /// Detail.
        message: Option<String>,
    },
    /// Its process runs.
    Running {
        /// When the process started.
        started_at: Timestamp,
        /// `process://<pid>`.
        container_id: String,
    },
    /// Its process ended and will not be restarted (for now).
    Terminated(Terminated),
}

/// Everything the node reports about one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRecord {
    /// Container name.
    pub name: String,
    /// The image of the spec.
    pub image: String,
    /// What the image resolved to, empty until it did.
    pub image_id: String,
    /// Current state.
    pub state: RunState,
    /// How the previous process of this container ended.
    pub last_termination: Option<Terminated>,
    /// How many times it was restarted.
    pub restart_count: i32,
    /// Whether it is ready (readiness probe passed, or running without one).
    pub ready: bool,
}

impl ContainerRecord {
    /// A container not started yet, waiting for `reason`.
    pub fn new(name: &str, image: &str, reason: &str) -> ContainerRecord {
        ContainerRecord {
            name: name.to_string(),
            image: image.to_string(),
            image_id: String::new(),
            state: RunState::Waiting {
                reason: reason.to_string(),
                message: None,
            },
            last_termination: None,
            restart_count: 0,
            ready: false,
        }
    }

    /// Whether its process runs.
    pub fn is_running(&self) -> bool {
        matches!(self.state, RunState::Running { .. })
    }

    /// Sets a waiting state.
    pub fn wait(&mut self, reason: &str, message: Option<String>) {
        self.state = RunState::Waiting {
            reason: reason.to_string(),
            message,
        };
        self.ready = false;
    }

    /// The record as it was reported before (used when the node restarts).
    pub fn from_api(status: &ContainerStatus) -> ContainerRecord {
        let state = status.state.as_ref();
        let run_state = if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            RunState::Terminated(Terminated::from_api(t))
        } else if let Some(r) = state.and_then(|s| s.running.as_ref()) {
            RunState::Running {
                started_at: r
                    .started_at
                    .as_ref()
                    .map(|x| x.0)
                    .unwrap_or_else(Timestamp::now),
                container_id: status.container_id.clone().unwrap_or_default(),
            }
        } else {
            let w = state.and_then(|s| s.waiting.as_ref());
            RunState::Waiting {
                reason: w
                    .and_then(|w| w.reason.clone())
                    .unwrap_or_else(|| "ContainerCreating".to_string()),
                message: w.and_then(|w| w.message.clone()),
            }
        };
        ContainerRecord {
            name: status.name.clone(),
            image: status.image.clone(),
            image_id: status.image_id.clone(),
            state: run_state,
            last_termination: status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(Terminated::from_api),
            restart_count: status.restart_count,
            ready: status.ready,
        }
    }

    /// The API's container status.
    pub fn to_api(&self) -> ContainerStatus {
        let (state, container_id) = match &self.state {
            RunState::Waiting { reason, message } => (
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.clone()),
                        message: message.clone(),
                    }),
                    ..Default::default()
                },
                None,
            ),
            RunState::Running {
                started_at,
                container_id,
            } => (
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(*started_at)),
                    }),
                    ..Default::default()
                },
                Some(container_id.clone()),
            ),
            RunState::Terminated(t) => (
                ContainerState {
                    terminated: Some(t.to_api()),
                    ..Default::default()
                },
                t.container_id.clone(),
            ),
        };
        ContainerStatus {
            name: self.name.clone(),
            image: self.image.clone(),
            image_id: self.image_id.clone(),
            container_id,
            ready: self.ready,
            restart_count: self.restart_count,
            started: Some(self.is_running()),
            state: Some(state),
            last_state: Some(ContainerState {
                terminated: self.last_termination.as_ref().map(Terminated::to_api),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

#[cfg(test)]
impl ContainerRecord {
    /// A ready, running record: a fixture for tests of this crate.
    pub(crate) fn ready_running(name: &str) -> Self {
        let mut r = ContainerRecord::new(name, "img", "ContainerCreating");
        r.state = RunState::Running {
            started_at: Timestamp::UNIX_EPOCH,
            container_id: "process://42".into(),
        };
        r.ready = true;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn killed_by_signal_reports_128_plus_signal_and_error() {
        let t = Terminated::from_exit(None, Some(9), None, Timestamp::UNIX_EPOCH, None);
        assert_eq!(t.exit_code, 137);
        assert_eq!(t.reason, "Error");
        let t = Terminated::from_exit(Some(0), None, None, Timestamp::UNIX_EPOCH, None);
        assert_eq!(t.reason, "Completed");
    }

    #[test]
    fn container_status_round_trips_through_the_api_shape() {
        let mut r = ContainerRecord::ready_running("etcd");
        r.restart_count = 2;
        r.last_termination = Some(Terminated::from_exit(
            Some(1),
            None,
            Some(Timestamp::UNIX_EPOCH),
            Timestamp::from_second(5).unwrap(),
            Some("process://7".into()),
        ));
        let api = r.to_api();
        assert_eq!(api.container_id.as_deref(), Some("process://42"));
        assert_eq!(api.started, Some(true));
        assert_eq!(ContainerRecord::from_api(&api), r);
    }
}
