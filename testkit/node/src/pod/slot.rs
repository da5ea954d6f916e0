//! One container of a pod on the node: the record it reports, its process while one runs,
//! its probes, and the timers that move it on (retry after a back-off, kill after the grace
//! period).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use tokio::time::Instant;

use crate::probe::ProbeTracker;
use crate::record::{ContainerRecord, RunState};
use crate::tasks::TaskGuard;

/// Which list of the pod spec a container belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `initContainers`: run one after the other, each to completion.
    Init,
    /// `containers`: run together once the init containers are done.
    Main,
}

impl Kind {
    /// The container named `name` in this list of `spec`.
    pub fn spec_container(self, spec: Option<&PodSpec>, name: &str) -> Option<Container> {
        let spec = spec?;
        let list = match self {
            Kind::Init => spec.init_containers.as_ref()?,
            Kind::Main => &spec.containers,
        };
        list.iter().find(|c| c.name == name).cloned()
    }

    /// The image the spec asks for the container named `name` (empty if none).
    pub fn spec_image(self, spec: Option<&PodSpec>, name: &str) -> String {
        self.spec_container(spec, name)
            .and_then(|c| c.image)
            .unwrap_or_default()
    }
}

/// Why the node itself stopped a container's process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopWhy {
    /// Its image changed: the new image starts at once when the old process exited.
    ImageChange,
    /// The pod is deleted or the node shuts down: it stays terminated.
    Pod,
}

/// A container process that runs.
#[derive(Debug)]
pub struct Proc {
    /// Its pid (also its process group).
    pub pid: i32,
    /// Tells its events from those of the container's earlier processes.
    pub generation: u64,
    /// The image it was started from.
    pub image: String,
    /// When it started.
    pub started_at: Timestamp,
}

/// A probe running against the current process: its task and how its results add up.
pub struct Probing {
    /// The task that runs the checks, held only to abort it when the probe is dropped.
    pub _task: TaskGuard,
    /// Consecutive results turned into a verdict.
    pub tracker: ProbeTracker,
}

/// One container on the node.
pub struct Slot {
    /// What is reported about it.
    pub record: ContainerRecord,
    /// Its process, while one runs.
    pub proc: Option<Proc>,
    /// The readiness probe of the current process.
    pub readiness: Option<Probing>,
    /// The liveness probe of the current process.
    pub liveness: Option<Probing>,
    /// When a start may be tried again (back-off, or a passing configuration error).
    pub retry_at: Option<Instant>,
    /// An image that could not be pulled: no start until the spec names another.
    pub blocked_image: Option<String>,
    /// When its process group is killed (SIGTERM was sent, the grace period runs).
    pub kill_at: Option<Instant>,
    /// Why the node is stopping its process, if it is.
    pub stopping: Option<StopWhy>,
}

impl Slot {
    /// A container of the spec; `previous` is the record reported before a node restart,
    /// else it starts waiting for `reason`.
    pub fn new(container: &Container, previous: Option<ContainerRecord>, reason: &str) -> Slot {
        let image = container.image.clone().unwrap_or_default();
        let record =
            previous.unwrap_or_else(|| ContainerRecord::new(&container.name, &image, reason));
        Slot {
            record,
            proc: None,
            readiness: None,
            liveness: None,
            retry_at: None,
            blocked_image: None,
            kill_at: None,
            stopping: None,
        }
    }

    /// Stops both probes (their results no longer count).
    pub fn stop_probes(&mut self) {
        self.readiness = None;
        self.liveness = None;
    }

    /// Whether a process may be started now for `spec_image`.
    pub fn may_start(&self, spec_image: &str, now: Instant) -> bool {
        self.proc.is_none()
            && matches!(self.record.state, RunState::Waiting { .. })
            && self.retry_at.is_none_or(|t| now >= t)
            && self.blocked_image.as_deref() != Some(spec_image)
    }

    /// SIGTERM went to its process: unready, probes stopped, killed at `kill_at`.
    pub fn terminating(&mut self, kill_at: Instant) {
        self.kill_at = Some(kill_at);
        self.stop_probes();
        self.record.ready = false;
    }
}
