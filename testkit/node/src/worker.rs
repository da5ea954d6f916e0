//! One pod's life on the node: address, init containers in order, containers, restarts,
//! image changes, readiness and liveness probes, status reports, and on deletion the graceful stop and
//! removal of the pod object.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod, PodCondition};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ctx::NodeCtx;
use crate::launch;
use crate::log::event;
use crate::phase::{InitProgress, Phase, init_progress, pod_phase};
use crate::prepare::{self, NotStartable, Prepared};
use crate::probe::{self, ProbeTiming, ProbeTracker};
use crate::record::{ContainerRecord, RunState, Terminated};
use crate::restart::{self, InitOutcome, RestartPolicy};
use crate::signals;
use crate::statedir::PodDir;
use crate::status::{self, ConditionInput, StatusInput};
use crate::tasks::{Event, TaskGuard, spawn_probe, spawn_waiter};

/// How long a container waits before retrying a start that failed for a passing reason.
const RETRY: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Init,
    Main,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopWhy {
    ImageChange,
    Pod,
}

struct Proc {
    pid: i32,
    generation: u64,
    image: String,
    started_at: Timestamp,
}

struct Slot {
    record: ContainerRecord,
    proc: Option<Proc>,
    probe: Option<TaskGuard>,
    tracker: Option<ProbeTracker>,
    liveness_probe: Option<TaskGuard>,
    liveness: Option<ProbeTracker>,
    retry_at: Option<Instant>,
    blocked_image: Option<String>,
    kill_at: Option<Instant>,
    stopping: Option<StopWhy>,
}

impl Slot {
    fn new(container: &Container, previous: Option<ContainerRecord>, reason: &str) -> Slot {
        let image = container.image.clone().unwrap_or_default();
        let record =
            previous.unwrap_or_else(|| ContainerRecord::new(&container.name, &image, reason));
        Slot {
            record,
            proc: None,
            probe: None,
            tracker: None,
            liveness_probe: None,
            liveness: None,
            retry_at: None,
            blocked_image: None,
            kill_at: None,
            stopping: None,
        }
    }

    fn stop_probes(&mut self) {
        self.probe = None;
        self.tracker = None;
        self.liveness_probe = None;
        self.liveness = None;
    }

    fn may_start(&self, spec_image: &str, now: Instant) -> bool {
        self.proc.is_none()
            && matches!(self.record.state, RunState::Waiting { .. })
            && self.retry_at.is_none_or(|t| now >= t)
            && self.blocked_image.as_deref() != Some(spec_image)
    }
}

/// The state of one pod on the node.
pub struct PodWorker {
    ctx: Arc<NodeCtx>,
    pod: Pod,
    ns: String,
    name: String,
    uid: String,
    dir: PodDir,
    ip: String,
    policy: RestartPolicy,
    init: Vec<Slot>,
    main: Vec<Slot>,
    start_time: Timestamp,
    terminal: Option<Phase>,
    conditions: Vec<PodCondition>,
    last_sent: Option<serde_json::Value>,
    last_phase: Option<Phase>,
    patch_retry_at: Option<Instant>,
    events_tx: mpsc::UnboundedSender<Event>,
    events_rx: mpsc::UnboundedReceiver<Event>,
    next_generation: u64,
    gone: bool,
}

fn previous_records(
    statuses: Option<&Vec<k8s_openapi::api::core::v1::ContainerStatus>>,
) -> BTreeMap<String, ContainerRecord> {
    statuses
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), ContainerRecord::from_api(s)))
        .collect()
}

impl PodWorker {
    /// Takes a pod bound to this node: gives it an address (keeping the one it had before a
    /// node restart) and recovers the container states it reported before.
    pub fn new(ctx: Arc<NodeCtx>, pod: Pod) -> Result<PodWorker, String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let dir = ctx.state.pod(&ns, &name, &uid);
        let ip = if spec.host_network == Some(true) {
            ctx.host_ip.clone()
        } else {
            let busy = crate::ipam::busy_addresses();
            let mut pool = ctx.ips.lock().unwrap_or_else(|e| e.into_inner());
            let kept = status
                .pod_ip
                .as_deref()
                .and_then(|ip| ip.parse().ok())
                .filter(|ip| pool.reserve(&uid, *ip));
            match kept.or_else(|| pool.allocate_avoiding(&uid, &busy)) {
                Some(ip) => ip.to_string(),
                None => return Err("no free pod address left".to_string()),
            }
        };
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
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let terminal = status
            .phase
            .as_deref()
            .and_then(Phase::parse)
            .filter(|p| p.is_terminal());
        let mut worker = PodWorker {
            policy: RestartPolicy::parse(spec.restart_policy.as_deref()),
            start_time: status
                .start_time
                .as_ref()
                .map(|t| t.0)
                .unwrap_or_else(Timestamp::now),
            conditions: status.conditions.clone().unwrap_or_default(),
            ctx,
            pod,
            ns,
            name,
            uid,
            dir,
            ip,
            init,
            main,
            terminal,
            last_sent: None,
            last_phase: terminal,
            patch_retry_at: None,
            events_tx,
            events_rx,
            next_generation: 0,
            gone: false,
        };
        worker.recover();
        Ok(worker)
    }

    fn id(&self) -> String {
        format!("{}/{}", self.ns, self.name)
    }

    /// After a node restart: leftover processes are killed, and containers reported running
    /// are treated as exited (then restarted or not, per restartPolicy).
    fn recover(&mut self) {
        for record in self.dir.live_processes() {
            let _ = signals::send_group(record.pid, Signal::SIGKILL);
            let _ = signals::send(record.pid, Signal::SIGKILL);
            event!(
                "pod {} container {}: killed leftover process {} of a previous node run",
                self.id(),
                record.container,
                record.pid
            );
        }
        for record in self.dir.pids() {
            self.dir.remove_pid(&record.container);
        }
        if self.terminal.is_some() {
            return;
        }
        let now = Timestamp::now();
        for kind in [Kind::Init, Kind::Main] {
            for i in 0..self.slots(kind).len() {
                let slot = &self.slots(kind)[i];
                if let RunState::Running {
                    started_at,
                    container_id,
                } = &slot.record.state
                {
                    let mut term = Terminated::from_exit(
                        Some(255),
                        None,
                        Some(*started_at),
                        now,
                        Some(container_id.clone()),
                    );
                    term.reason = "Unknown".to_string();
                    term.message =
                        Some("the process node restarted; the container process is gone".into());
                    event!(
                        "pod {} container {}: was running before the node restarted; treated as exited",
                        self.id(),
                        slot.record.name
                    );
                    self.after_exit(kind, i, term, None);
                }
            }
        }
    }

    fn slots(&self, kind: Kind) -> &Vec<Slot> {
        match kind {
            Kind::Init => &self.init,
            Kind::Main => &self.main,
        }
    }

    fn slots_mut(&mut self, kind: Kind) -> &mut Vec<Slot> {
        match kind {
            Kind::Init => &mut self.init,
            Kind::Main => &mut self.main,
        }
    }

    fn spec_container(&self, kind: Kind, name: &str) -> Option<Container> {
        let spec = self.pod.spec.as_ref()?;
        let list = match kind {
            Kind::Init => spec.init_containers.as_ref()?,
            Kind::Main => &spec.containers,
        };
        list.iter().find(|c| c.name == name).cloned()
    }

    fn grace(&self, deleting: bool) -> Duration {
        let from_delete = if deleting {
            self.pod.metadata.deletion_grace_period_seconds
        } else {
            None
        };
        let secs = from_delete
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        Duration::from_secs(secs.max(0) as u64)
    }

    /// Runs the pod until it is deleted (then removes it) or the node shuts down (then
    /// stops its processes and leaves it in the API).
    pub async fn run(
        mut self,
        mut updates: watch::Receiver<Option<Pod>>,
        shutdown: CancellationToken,
    ) {
        loop {
            if self.gone || self.pod.metadata.deletion_timestamp.is_some() {
                self.finish(&shutdown).await;
                return;
            }
            self.step().await;
            self.publish().await;
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    let grace = self.grace(false).min(self.ctx.shutdown_grace);
                    self.stop_all(grace, &shutdown).await;
                    return;
                }
                changed = updates.changed() => {
                    if changed.is_err() {
                        let grace = self.grace(false).min(self.ctx.shutdown_grace);
                        self.stop_all(grace, &shutdown).await;
                        return;
                    }
                    match updates.borrow_and_update().clone() {
                        Some(pod) if pod.metadata.uid.as_deref() == Some(self.uid.as_str()) => self.pod = pod,
                        Some(_) => {}
                        None => self.gone = true,
                    }
                }
                Some(ev) = self.events_rx.recv() => self.handle(ev),
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    fn next_deadline(&self) -> Instant {
        self.init
            .iter()
            .chain(self.main.iter())
            .flat_map(|s| [s.retry_at, s.kill_at])
            .chain([self.patch_retry_at])
            .flatten()
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
    }

    async fn step(&mut self) {
        if self.terminal.is_some() {
            return;
        }
        let now = Instant::now();
        for slot in self.init.iter_mut().chain(self.main.iter_mut()) {
            if let (Some(kill_at), Some(proc)) = (slot.kill_at, &slot.proc)
                && now >= kill_at
            {
                let _ = signals::send_group(proc.pid, Signal::SIGKILL);
                slot.kill_at = None;
            }
        }
        match init_progress(self.policy, &self.init_records()) {
            InitProgress::Failed => {
                self.terminal = Some(Phase::Failed);
                return;
            }
            InitProgress::Pending => {
                if let Some(i) = self.init.iter().position(
                    |s| !matches!(&s.record.state, RunState::Terminated(t) if t.exit_code == 0),
                ) {
                    let image = self.spec_image(Kind::Init, i);
                    if self.init[i].may_start(&image, now) {
                        self.start(Kind::Init, i).await;
                    }
                }
                return;
            }
            InitProgress::Done => {}
        }
        for i in 0..self.main.len() {
            let image = self.spec_image(Kind::Main, i);
            let grace = self.grace(false);
            let id = self.id();
            let slot = &mut self.main[i];
            if let Some(proc) = &slot.proc {
                if proc.image != image && slot.stopping.is_none() {
                    event!(
                        "pod {id} container {}: image changed from {} to {image}; stopping pid {} (SIGTERM, SIGKILL after {}s)",
                        slot.record.name,
                        proc.image,
                        proc.pid,
                        grace.as_secs()
                    );
                    let _ = signals::send(proc.pid, Signal::SIGTERM);
                    slot.stopping = Some(StopWhy::ImageChange);
                    slot.kill_at = Some(now + grace);
                    slot.stop_probes();
                    slot.record.ready = false;
                }
            } else if slot.may_start(&image, now) {
                self.start(Kind::Main, i).await;
            }
        }
        let phase = pod_phase(self.policy, InitProgress::Done, &self.main_records());
        if phase.is_terminal() {
            self.terminal = Some(phase);
        }
    }

    fn spec_image(&self, kind: Kind, i: usize) -> String {
        let name = &self.slots(kind)[i].record.name;
        self.spec_container(kind, name)
            .and_then(|c| c.image)
            .unwrap_or_default()
    }

    fn init_records(&self) -> Vec<ContainerRecord> {
        self.init.iter().map(|s| s.record.clone()).collect()
    }

    fn main_records(&self) -> Vec<ContainerRecord> {
        self.main.iter().map(|s| s.record.clone()).collect()
    }

    /// Tries to start a container; on failure it is left waiting with the reason a kubelet
    /// would give.
    async fn start(&mut self, kind: Kind, i: usize) {
        let name = self.slots(kind)[i].record.name.clone();
        let Some(container) = self.spec_container(kind, &name) else {
            return;
        };
        let id = self.id();
        let image = container.image.clone().unwrap_or_default();
        let now = Instant::now();
        self.slots_mut(kind)[i].record.image = image.clone();
        let prepared =
            prepare::prepare(&self.ctx, &self.pod, &self.dir, &self.ip, &container).await;
        let Prepared {
            program,
            spec: launch_spec,
        } = match prepared {
            Ok(p) => p,
            Err(NotStartable::Image(msg)) => {
                event!("pod {id} container {name}: ErrImagePull: {msg}");
                let slot = &mut self.slots_mut(kind)[i];
                slot.record.wait("ErrImagePull", Some(msg));
                slot.blocked_image = Some(image);
                return;
            }
            Err(NotStartable::Config { reason, message }) => {
                event!("pod {id} container {name}: {reason}: {message}");
                let slot = &mut self.slots_mut(kind)[i];
                slot.record.wait(reason, Some(message));
                slot.retry_at = Some(now + RETRY);
                return;
            }
        };
        let child = match launch::spawn(&self.ctx.unshare, &launch_spec) {
            Ok(child) => child,
            Err(e) => {
                let slot = &mut self.slots_mut(kind)[i];
                let delay = restart::backoff(slot.record.restart_count);
                event!("pod {id} container {name}: RunContainerError: {e}");
                slot.record.wait("RunContainerError", Some(e.to_string()));
                slot.retry_at = Some(now + delay);
                return;
            }
        };
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        let generation = self.next_generation;
        self.next_generation += 1;
        if let Err(e) = self.dir.write_pid(&name, pid) {
            event!("pod {id} container {name}: cannot write pid file: {e}");
        }
        spawn_waiter(child, pid, generation, self.events_tx.clone());
        let pod_ip = self.ip.clone();
        let events = self.events_tx.clone();
        let slot = &mut self.slots_mut(kind)[i];
        slot.retry_at = None;
        slot.record.image_id = program.image_id();
        slot.record.state = RunState::Running {
            started_at: Timestamp::now(),
            container_id: format!("process://{pid}"),
        };
        slot.record.ready = kind == Kind::Main;
        slot.proc = Some(Proc {
            pid,
            generation,
            image: image.clone(),
            started_at: Timestamp::now(),
        });
        if kind == Kind::Main {
            for (liveness, spec) in [
                (false, &container.readiness_probe),
                (true, &container.liveness_probe),
            ] {
                let Some(spec) = spec else {
                    continue;
                };
                let what = if liveness { "liveness" } else { "readiness" };
                match probe::check_of(spec, &container, &pod_ip) {
                    Ok(check) => {
                        let timing = ProbeTiming::of(spec);
                        let task = spawn_probe(
                            check,
                            timing,
                            pid,
                            launch_spec.env.clone(),
                            generation,
                            liveness,
                            events.clone(),
                        );
                        if liveness {
                            slot.liveness = Some(ProbeTracker::passing(&timing));
                            slot.liveness_probe = Some(task);
                        } else {
                            slot.tracker = Some(ProbeTracker::new(&timing));
                            slot.record.ready = false;
                            slot.probe = Some(task);
                        }
                    }
                    Err(msg) => {
                        event!("pod {id} container {name}: {what} probe ignored: {msg}");
                    }
                }
            }
        }
        event!(
            "pod {id} container {name} started: pid {pid}, image {image}, restarts {}, log {}",
            slot.record.restart_count,
            launch_spec.log_path.display()
        );
    }

    fn find_generation(&self, generation: u64) -> Option<(Kind, usize)> {
        for kind in [Kind::Init, Kind::Main] {
            if let Some(i) = self
                .slots(kind)
                .iter()
                .position(|s| s.proc.as_ref().is_some_and(|p| p.generation == generation))
            {
                return Some((kind, i));
            }
        }
        None
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Exited {
                generation,
                code,
                signal,
            } => {
                let Some((kind, i)) = self.find_generation(generation) else {
                    return;
                };
                let id = self.id();
                let slot = &mut self.slots_mut(kind)[i];
                let Some(proc) = slot.proc.take() else {
                    return;
                };
                let name = slot.record.name.clone();
                slot.stop_probes();
                slot.kill_at = None;
                let stopping = slot.stopping.take();
                self.dir.remove_pid(&name);
                let term = Terminated::from_exit(
                    code,
                    signal,
                    Some(proc.started_at),
                    Timestamp::now(),
                    Some(format!("process://{}", proc.pid)),
                );
                match signal {
                    Some(sig) => event!(
                        "pod {id} container {name}: pid {} killed by signal {sig} (exit code {})",
                        proc.pid,
                        term.exit_code
                    ),
                    None => event!(
                        "pod {id} container {name}: pid {} exited with code {}",
                        proc.pid,
                        term.exit_code
                    ),
                }
                self.after_exit(kind, i, term, stopping);
            }
            Event::Probe {
                generation,
                liveness,
                ok,
            } => {
                let Some((kind, i)) = self.find_generation(generation) else {
                    return;
                };
                let id = self.id();
                let grace = self.grace(false);
                let slot = &mut self.slots_mut(kind)[i];
                if liveness {
                    let Some(tracker) = &mut slot.liveness else {
                        return;
                    };
                    if !tracker.record(ok)
                        && let Some(proc) = &slot.proc
                    {
                        event!(
                            "pod {id} container {}: liveness probe failed; stopping pid {} (SIGTERM, SIGKILL after {}s)",
                            slot.record.name,
                            proc.pid,
                            grace.as_secs()
                        );
                        let _ = signals::send(proc.pid, Signal::SIGTERM);
                        slot.kill_at = Some(Instant::now() + grace);
                        slot.stop_probes();
                        slot.record.ready = false;
                    }
                } else if let Some(tracker) = &mut slot.tracker {
                    let ready = tracker.record(ok);
                    if ready != slot.record.ready {
                        event!(
                            "pod {id} container {}: {}",
                            slot.record.name,
                            if ready {
                                "ready"
                            } else {
                                "not ready (readiness probe failing)"
                            }
                        );
                        slot.record.ready = ready;
                    }
                }
            }
        }
    }

    /// Records an exit and decides what follows: restart after a back-off, stay terminated,
    /// or (after an image change) start the new image at once.
    fn after_exit(&mut self, kind: Kind, i: usize, term: Terminated, stopping: Option<StopWhy>) {
        let policy = self.policy;
        let pod_name = self.name.clone();
        let slot = &mut self.slots_mut(kind)[i];
        slot.record.ready = false;
        let back_off = |slot: &mut Slot, term: Terminated| {
            let delay = restart::backoff(slot.record.restart_count);
            slot.record.restart_count += 1;
            slot.record.last_termination = Some(term);
            slot.record.wait(
                "CrashLoopBackOff",
                Some(format!(
                    "back-off {}s restarting failed container={} pod={pod_name}",
                    delay.as_secs(),
                    slot.record.name
                )),
            );
            slot.retry_at = Some(Instant::now() + delay);
        };
        match (stopping, kind) {
            (Some(StopWhy::ImageChange), _) => {
                slot.record.restart_count += 1;
                slot.record.last_termination = Some(term);
                slot.record.wait("ContainerCreating", None);
                slot.retry_at = None;
            }
            (Some(StopWhy::Pod), _) => slot.record.state = RunState::Terminated(term),
            (None, Kind::Init) => match restart::init_exit(policy, term.exit_code) {
                InitOutcome::Next => {
                    slot.record.state = RunState::Terminated(term);
                    slot.record.ready = true;
                }
                InitOutcome::FailPod => slot.record.state = RunState::Terminated(term),
                InitOutcome::Retry => back_off(slot, term),
            },
            (None, Kind::Main) => {
                if restart::restarts_container(policy, term.exit_code) {
                    back_off(slot, term);
                } else {
                    slot.record.state = RunState::Terminated(term);
                }
            }
        }
    }

    fn unready_gates(&self) -> Vec<String> {
        let gates = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.clone())
            .unwrap_or_default();
        let current = self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        gates
            .into_iter()
            .map(|g| g.condition_type)
            .filter(|t| !current.iter().any(|c| &c.type_ == t && c.status == "True"))
            .collect()
    }

    /// Reports the status if it changed since the last report.
    async fn publish(&mut self) {
        if self.gone || self.patch_retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let init_records = self.init_records();
        let main_records = self.main_records();
        let init = init_progress(self.policy, &init_records);
        let phase = self
            .terminal
            .unwrap_or_else(|| pod_phase(self.policy, init, &main_records));
        let conditions = status::pod_conditions(&ConditionInput {
            phase,
            init,
            init_records: &init_records,
            records: &main_records,
            unready_gates: self.unready_gates(),
            previous: &self.conditions,
            now: Timestamp::now(),
        });
        let status = status::pod_status(StatusInput {
            phase,
            pod_ip: self.ip.clone(),
            host_ip: self.ctx.host_ip.clone(),
            start_time: self.start_time,
            init_records: &init_records,
            records: &main_records,
            conditions: conditions.clone(),
            observed_generation: self.pod.metadata.generation,
        });
        let value = match serde_json::to_value(&status) {
            Ok(v) => v,
            Err(e) => {
                event!("pod {}: cannot encode status: {e}", self.id());
                return;
            }
        };
        if self.last_sent.as_ref() == Some(&value) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let patch = Patch::Strategic(
            serde_json::json!({ "status": status::clear_absent_condition_fields(&value) }),
        );
        match api
            .patch_status(&self.name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {
                self.last_sent = Some(value);
                self.conditions = conditions;
                self.patch_retry_at = None;
                if self.last_phase != Some(phase) {
                    self.last_phase = Some(phase);
                    event!(
                        "pod {} phase {} (IP {})",
                        self.id(),
                        phase.as_str(),
                        self.ip
                    );
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => self.gone = true,
            Err(e) => {
                event!("pod {}: status update failed: {e}", self.id());
                self.patch_retry_at = Some(Instant::now() + Duration::from_secs(2));
            }
        }
    }

    /// SIGTERM to every running process, SIGKILL to their process groups after `grace`,
    /// and wait for all exits.
    async fn stop_all(&mut self, grace: Duration, shutdown: &CancellationToken) {
        let mut running = 0;
        for slot in self.init.iter_mut().chain(self.main.iter_mut()) {
            slot.stop_probes();
            if let Some(proc) = &slot.proc {
                slot.stopping = Some(StopWhy::Pod);
                let _ = signals::send(proc.pid, Signal::SIGTERM);
                running += 1;
            }
        }
        if running == 0 {
            return;
        }
        event!(
            "pod {}: stopping {running} process(es) (SIGTERM, SIGKILL after {}s)",
            self.id(),
            grace.as_secs()
        );
        let mut deadline = Instant::now() + grace;
        let mut killed = false;
        let mut give_up = None;
        while self
            .init
            .iter()
            .chain(self.main.iter())
            .any(|s| s.proc.is_some())
        {
            tokio::select! {
                Some(ev) = self.events_rx.recv() => self.handle(ev),
                _ = tokio::time::sleep_until(deadline), if !killed => {
                    for slot in self.init.iter().chain(self.main.iter()) {
                        if let Some(proc) = &slot.proc {
                            let _ = signals::send_group(proc.pid, Signal::SIGKILL);
                        }
                    }
                    killed = true;
                    give_up = Some(Instant::now() + Duration::from_secs(10));
                }
                _ = shutdown.cancelled(), if deadline > Instant::now() + self.ctx.shutdown_grace => {
                    deadline = Instant::now() + self.ctx.shutdown_grace;
                }
                _ = tokio::time::sleep_until(give_up.unwrap_or(deadline)), if give_up.is_some() => {
                    event!("pod {}: processes did not exit after SIGKILL; giving up on them", self.id());
                    return;
                }
            }
        }
    }

    /// The pod is being deleted (or is gone): stop everything, report, delete the object
    /// with grace 0, remove the pod's state and free its address.
    async fn finish(&mut self, shutdown: &CancellationToken) {
        let grace = self.grace(!self.gone);
        self.stop_all(grace, shutdown).await;
        if shutdown.is_cancelled() && !self.gone {
            return;
        }
        if !self.gone {
            self.patch_retry_at = None;
            self.publish().await;
            let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(self.uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&self.name, &dp).await {
                Ok(_) => event!("pod {} deleted", self.id()),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                    event!("pod {} already gone", self.id())
                }
                Err(e) => event!("pod {}: delete failed: {e}", self.id()),
            }
        } else {
            event!("pod {} removed from the API; cleaned up", self.id());
        }
        if let Err(e) = self.dir.remove() {
            event!(
                "pod {}: cannot remove {}: {e}",
                self.id(),
                self.dir.path().display()
            );
        }
        self.ctx.release_ip(&self.uid);
    }
}
