//! A pod's containers as data, and the pure steps that move them on: which container
//! starts next, which process is stopped or killed, what an exit leads to under the
//! restart policy, and when the pod is finished. No I/O happens here: the worker performs
//! the [`Effect`]s.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use tokio::time::Instant;

use super::slot::{Kind, Slot, StopWhy};
use crate::phase::{InitProgress, Phase, init_progress, pod_phase};
use crate::record::{ContainerRecord, RunState, Terminated};
use crate::restart::{self, InitOutcome, RestartPolicy};

/// The pod's containers, in spec order.
pub struct Containers {
    /// The init containers.
    pub init: Vec<Slot>,
    /// The regular containers.
    pub main: Vec<Slot>,
}

fn previous_records(statuses: Option<&Vec<ContainerStatus>>) -> BTreeMap<String, ContainerRecord> {
    statuses
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), ContainerRecord::from_api(s)))
        .collect()
}

impl Containers {
    /// The containers of `spec`, each resuming the record `status` reported for it (after a
    /// node restart), else waiting for its first start.
    pub fn of(spec: &PodSpec, status: &PodStatus) -> Containers {
        let mut previous_init = previous_records(status.init_container_statuses.as_ref());
        let mut previous_main = previous_records(status.container_statuses.as_ref());
        let init_containers = spec.init_containers.clone().unwrap_or_default();
        let main_reason = if init_containers.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let init = init_containers
            .iter()
            .map(|c| Slot::new(c, previous_init.remove(&c.name), "PodInitializing"))
            .collect();
        let main = spec
            .containers
            .iter()
            .map(|c| Slot::new(c, previous_main.remove(&c.name), main_reason))
            .collect();
        Containers { init, main }
    }

    /// The containers of one list.
    pub fn slots(&self, kind: Kind) -> &[Slot] {
        match kind {
            Kind::Init => &self.init,
            Kind::Main => &self.main,
        }
    }

    /// One container, to change.
    pub fn slot_mut(&mut self, kind: Kind, i: usize) -> &mut Slot {
        match kind {
            Kind::Init => &mut self.init[i],
            Kind::Main => &mut self.main[i],
        }
    }

    /// Every container, init containers first.
    pub fn all(&self) -> impl Iterator<Item = &Slot> {
        self.init.iter().chain(self.main.iter())
    }

    /// Every container, to change.
    pub fn all_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.init.iter_mut().chain(self.main.iter_mut())
    }

    /// The records of one list.
    pub fn records(&self, kind: Kind) -> Vec<ContainerRecord> {
        self.slots(kind).iter().map(|s| s.record.clone()).collect()
    }

    /// Whether any container process still runs.
    pub fn any_running(&self) -> bool {
        self.all().any(|s| s.proc.is_some())
    }

    /// The container whose current process has `generation`.
    pub fn find_generation(&self, generation: u64) -> Option<(Kind, usize)> {
        [Kind::Init, Kind::Main].into_iter().find_map(|kind| {
            self.slots(kind)
                .iter()
                .position(|s| s.proc.as_ref().is_some_and(|p| p.generation == generation))
                .map(|i| (kind, i))
        })
    }

    /// The containers' timers: retries and kills.
    pub fn deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.all().flat_map(|s| [s.retry_at, s.kill_at]).flatten()
    }
}

/// How long the pod's processes get between SIGTERM and SIGKILL: the deletion's grace
/// period when `deleting`, else `terminationGracePeriodSeconds`, else 30 s.
pub fn grace_period(pod: &Pod, deleting: bool) -> Duration {
    let from_delete = if deleting {
        pod.metadata.deletion_grace_period_seconds
    } else {
        None
    };
    let secs = from_delete
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    Duration::from_secs(secs.max(0) as u64)
}

/// Something the worker does for a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// SIGKILL to the process group of a container whose grace period ran out.
    Kill {
        /// The container process.
        pid: i32,
    },
    /// SIGTERM to a container process whose image changed in the spec.
    StopForImage {
        /// The container.
        name: String,
        /// Its process.
        pid: i32,
        /// The image it runs.
        from: String,
        /// The image the spec now names.
        to: String,
        /// Until SIGKILL.
        grace: Duration,
    },
    /// Start a process for the container.
    Start(Kind, usize),
}

/// The step of a pod that is not finished: kill processes whose grace period ran out, then
/// start the next init container, or (once they are all done) stop the containers whose
/// image changed and start those that may start. The containers are updated as if the
/// signals were sent; the effects say what to do, in order.
pub fn plan(
    containers: &mut Containers,
    policy: RestartPolicy,
    spec: Option<&PodSpec>,
    grace: Duration,
    now: Instant,
) -> Vec<Effect> {
    let mut effects = Vec::new();
    for slot in containers.all_mut() {
        if let (Some(kill_at), Some(proc)) = (slot.kill_at, &slot.proc)
            && now >= kill_at
        {
            effects.push(Effect::Kill { pid: proc.pid });
            slot.kill_at = None;
        }
    }
    match init_progress(policy, &containers.records(Kind::Init)) {
        InitProgress::Failed => {}
        InitProgress::Pending => effects.extend(next_init(containers, spec, now)),
        InitProgress::Done => {
            for (i, slot) in containers.main.iter_mut().enumerate() {
                effects.extend(main_step(slot, i, spec, grace, now));
            }
        }
    }
    effects
}

/// The first init container not completed, started if it may start.
fn next_init(containers: &Containers, spec: Option<&PodSpec>, now: Instant) -> Option<Effect> {
    let i = containers
        .init
        .iter()
        .position(|s| !matches!(&s.record.state, RunState::Terminated(t) if t.exit_code == 0))?;
    let slot = &containers.init[i];
    let image = Kind::Init.spec_image(spec, &slot.record.name);
    slot.may_start(&image, now)
        .then_some(Effect::Start(Kind::Init, i))
}

/// A regular container: stopped when its image changed, started when it may start.
fn main_step(
    slot: &mut Slot,
    i: usize,
    spec: Option<&PodSpec>,
    grace: Duration,
    now: Instant,
) -> Option<Effect> {
    let image = Kind::Main.spec_image(spec, &slot.record.name);
    let Some(proc) = &slot.proc else {
        return slot
            .may_start(&image, now)
            .then_some(Effect::Start(Kind::Main, i));
    };
    if proc.image == image || slot.stopping.is_some() {
        return None;
    }
    let effect = Effect::StopForImage {
        name: slot.record.name.clone(),
        pid: proc.pid,
        from: proc.image.clone(),
        to: image,
        grace,
    };
    slot.stopping = Some(StopWhy::ImageChange);
    slot.terminating(now + grace);
    Some(effect)
}

/// The phase the pod ended in, once it is finished: a failed init container under
/// `Never`, or every container terminated for good.
pub fn finished(containers: &Containers, policy: RestartPolicy) -> Option<Phase> {
    match init_progress(policy, &containers.records(Kind::Init)) {
        InitProgress::Failed => Some(Phase::Failed),
        InitProgress::Pending => None,
        InitProgress::Done => {
            let phase = pod_phase(policy, InitProgress::Done, &containers.records(Kind::Main));
            phase.is_terminal().then_some(phase)
        }
    }
}

/// The init progress and phase to report; `terminal` once the pod is finished.
pub fn current_phase(
    containers: &Containers,
    policy: RestartPolicy,
    terminal: Option<Phase>,
) -> (InitProgress, Phase) {
    let init = init_progress(policy, &containers.records(Kind::Init));
    let phase =
        terminal.unwrap_or_else(|| pod_phase(policy, init, &containers.records(Kind::Main)));
    (init, phase)
}

/// How a container process ended, as the exit of the process with a generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The process's generation.
    pub generation: u64,
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that killed it, if any.
    pub signal: Option<i32>,
    /// Its termination message, if it left one (see [`termination_message`]).
    pub message: Option<String>,
}

/// What ended, for the worker to clean up and log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The container.
    pub name: String,
    /// Its process.
    pub pid: i32,
    /// How it ended.
    pub term: Terminated,
}

/// What the restart policy needs to know about the pod.
#[derive(Clone, Copy, Debug)]
pub struct Restarts<'a> {
    /// The pod's restartPolicy.
    pub policy: RestartPolicy,
    /// The pod's name (in the back-off message).
    pub pod_name: &'a str,
}

/// Whether the end of the log is the termination message of `container`'s process that
/// ended with `code` (a signal counts as a failure): when the container asks for it
/// (`terminationMessagePolicy: FallbackToLogsOnError`) and failed. The node writes no
/// termination-message file, so the log is the only source.
pub fn log_is_termination_message(
    container: &k8s_openapi::api::core::v1::Container,
    code: Option<i32>,
) -> bool {
    container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
        && code != Some(0)
}

/// A container process ended at `at`: the container records it and moves on (see
/// [`after_exit`]). `None` when the process is not a current one.
pub fn exited(
    containers: &mut Containers,
    exit: Exit,
    restarts: Restarts<'_>,
    at: Timestamp,
    now: Instant,
) -> Option<Ended> {
    let (kind, i) = containers.find_generation(exit.generation)?;
    let slot = containers.slot_mut(kind, i);
    let proc = slot.proc.take()?;
    slot.stop_probes();
    slot.kill_at = None;
    let stopping = slot.stopping.take();
    let mut term = Terminated::from_exit(
        exit.code,
        exit.signal,
        Some(proc.started_at),
        at,
        Some(format!("process://{}", proc.pid)),
    );
    term.message = exit.message;
    let ended = Ended {
        name: slot.record.name.clone(),
        pid: proc.pid,
        term: term.clone(),
    };
    after_exit(slot, kind, term, stopping, restarts, now);
    Some(ended)
}

/// After a node restart: the containers reported running lost their process; each is
/// treated as exited (`Unknown`, 255) and restarted or not per policy. Their names.
pub fn recover(
    containers: &mut Containers,
    restarts: Restarts<'_>,
    at: Timestamp,
    now: Instant,
) -> Vec<String> {
    let mut recovered = Vec::new();
    for kind in [Kind::Init, Kind::Main] {
        for i in 0..containers.slots(kind).len() {
            let slot = containers.slot_mut(kind, i);
            let RunState::Running {
                started_at,
                container_id,
            } = &slot.record.state
            else {
                continue;
            };
            let mut term = Terminated::from_exit(
                Some(255),
                None,
                Some(*started_at),
                at,
                Some(container_id.clone()),
            );
            term.reason = "Unknown".to_string();
            term.message = Some("the process node restarted; the container process is gone".into());
            recovered.push(slot.record.name.clone());
            after_exit(slot, kind, term, None, restarts, now);
        }
    }
    recovered
}

/// Records an exit and decides what follows: restart after a back-off, stay terminated,
/// or (after an image change) start the new image at once.
pub fn after_exit(
    slot: &mut Slot,
    kind: Kind,
    term: Terminated,
    stopping: Option<StopWhy>,
    restarts: Restarts<'_>,
    now: Instant,
) {
    slot.record.ready = false;
    match (stopping, kind) {
        (Some(StopWhy::ImageChange), _) => {
            slot.record.restart_count += 1;
            slot.record.last_termination = Some(term);
            slot.record.wait("ContainerCreating", None);
            slot.retry_at = None;
        }
        (Some(StopWhy::Pod), _) => slot.record.state = RunState::Terminated(term),
        (None, Kind::Init) => match restart::init_exit(restarts.policy, term.exit_code) {
            InitOutcome::Next => {
                slot.record.state = RunState::Terminated(term);
                slot.record.ready = true;
            }
            InitOutcome::FailPod => slot.record.state = RunState::Terminated(term),
            InitOutcome::Retry => back_off(slot, term, restarts.pod_name, now),
        },
        (None, Kind::Main) => {
            if restart::restarts_container(restarts.policy, term.exit_code) {
                back_off(slot, term, restarts.pod_name, now);
            } else {
                slot.record.state = RunState::Terminated(term);
            }
        }
    }
}

/// The container starts again: at once after its first exit, otherwise after waiting in
/// `CrashLoopBackOff`.
fn back_off(slot: &mut Slot, term: Terminated, pod_name: &str, now: Instant) {
    let delay = restart::restart_delay(slot.record.restart_count);
    slot.record.restart_count += 1;
    slot.record.last_termination = Some(term);
    if delay.is_zero() {
        slot.record.wait("ContainerCreating", None);
        slot.retry_at = None;
        return;
    }
    slot.record.wait(
        "CrashLoopBackOff",
        Some(format!(
            "back-off {}s restarting failed container={} pod={pod_name}",
            delay.as_secs(),
            slot.record.name
        )),
    );
    slot.retry_at = Some(now + delay);
}
