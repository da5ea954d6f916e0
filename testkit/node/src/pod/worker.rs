//! The pod worker: one task per pod bound to the node. First the pod gets its network
//! namespace and address from the pod network (as a runtime makes a pod sandbox); then the
//! pod's updates, its processes' events and the containers' timers move the pod's
//! [`lifecycle`](super::lifecycle) on; the worker performs the effects (starts, signals),
//! reports the status and, when the pod is deleted, tears it down: processes first, then
//! the network namespace, then the object.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lifecycle::{self, Containers, Effect, Exit, Restarts};
use super::probing::{self, Verdict};
use super::report::{Reported, Reporter, Snapshot};
use super::start::{self, PodSite};
use super::teardown::{self, StopAction, StopClock};
use crate::ctx::NodeCtx;
use crate::log::event;
use crate::phase::Phase;
use crate::restart::RestartPolicy;
use crate::signals;
use crate::statedir::PodDir;
use crate::tasks::Event;

/// How long the worker sleeps when no timer is due.
const IDLE: Duration = Duration::from_secs(3600);
/// How long before the pod network is asked again after it failed.
const NETWORK_RETRY: Duration = Duration::from_secs(5);

/// The state of one pod on the node.
pub struct PodWorker {
    ctx: Arc<NodeCtx>,
    pod: Pod,
    id: String,
    name: String,
    uid: String,
    dir: PodDir,
    ip: String,
    netns: Option<PathBuf>,
    /// Whether the pod has its place on the network (always, on the host's network or when
    /// it had finished before the node started).
    attached: bool,
    network_retry: Option<Instant>,
    policy: RestartPolicy,
    containers: Containers,
    start_time: Timestamp,
    terminal: Option<Phase>,
    reporter: Reporter,
    events_tx: mpsc::UnboundedSender<Event>,
    events_rx: mpsc::UnboundedReceiver<Event>,
    next_generation: u64,
    gone: bool,
}

impl PodWorker {
    /// Takes a pod bound to this node and recovers the container states it reported
    /// before. Its network comes when it runs ([`PodWorker::run`]).
    pub fn new(ctx: Arc<NodeCtx>, pod: Pod) -> PodWorker {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let dir = ctx.state.pod(&ns, &name, &uid);
        let host_network = spec.host_network == Some(true);
        let terminal = status
            .phase
            .as_deref()
            .and_then(Phase::parse)
            .filter(|p| p.is_terminal());
        let ip = if host_network {
            ctx.host_ip.clone()
        } else {
            status.pod_ip.clone().unwrap_or_default()
        };
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let mut worker = PodWorker {
            policy: RestartPolicy::parse(spec.restart_policy.as_deref()),
            containers: Containers::of(&spec, &status),
            start_time: status
                .start_time
                .map(|t| t.0)
                .unwrap_or_else(Timestamp::now),
            reporter: Reporter::new(status.conditions.unwrap_or_default(), terminal),
            id: format!("{ns}/{name}"),
            ctx,
            pod,
            name,
            uid,
            dir,
            ip,
            netns: None,
            attached: host_network || terminal.is_some(),
            network_retry: None,
            terminal,
            events_tx,
            events_rx,
            next_generation: 0,
            gone: false,
        };
        worker.recover();
        worker
    }

    /// After a node restart: leftover processes are killed, and containers reported running
    /// are treated as exited (then restarted or not, per restartPolicy).
    fn recover(&mut self) {
        for record in self.dir.kill_live_processes() {
            event!(
                "pod {} container {}: killed leftover process {} of a previous node run",
                self.id,
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
        let restarts = Restarts {
            policy: self.policy,
            pod_name: &self.name,
        };
        let now = (Timestamp::now(), Instant::now());
        for name in lifecycle::recover(&mut self.containers, restarts, now.0, now.1) {
            event!(
                "pod {} container {name}: was running before the node restarted; treated as exited",
                self.id
            );
        }
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
            if !self.attached {
                self.attach().await;
            }
            if self.attached {
                self.step().await;
                self.publish().await;
            }
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return self.leave(&shutdown).await,
                changed = updates.changed() => {
                    if changed.is_err() {
                        return self.leave(&shutdown).await;
                    }
                    let update = updates.borrow_and_update().clone();
                    self.update(update);
                }
                Some(ev) = self.events_rx.recv() => self.handle(ev).await,
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// The pod as the API shows it now; `None` when it is gone.
    fn update(&mut self, pod: Option<Pod>) {
        match pod {
            Some(pod) if pod.metadata.uid.as_deref() == Some(self.uid.as_str()) => self.pod = pod,
            Some(_) => {}
            None => self.gone = true,
        }
    }

    /// Gives the pod its network namespace and address (the same ones again after a node
    /// restart: the pod network keys them by the pod's UID); on failure, tries again later.
    async fn attach(&mut self) {
        let Some(network) = self.ctx.network.get() else {
            self.network_retry = Some(Instant::now() + NETWORK_RETRY);
            return;
        };
        match network.add(&self.uid).await {
            Ok(place) => {
                event!(
                    "pod {}: address {} in {}",
                    self.id,
                    place.ip,
                    place.netns.display()
                );
                self.ip = place.ip.to_string();
                self.netns = Some(place.netns);
                self.attached = true;
                self.network_retry = None;
            }
            Err(e) => {
                event!(
                    "pod {}: FailedCreatePodSandBox: {e}; trying again in {}s",
                    self.id,
                    NETWORK_RETRY.as_secs()
                );
                self.network_retry = Some(Instant::now() + NETWORK_RETRY);
            }
        }
    }

    /// Removes the pod's network namespace (its processes are gone by now).
    async fn detach(&mut self) {
        let host_network = self.pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
        let Some(network) = self.ctx.network.get().filter(|_| !host_network) else {
            return;
        };
        if let Err(e) = network.del(&self.uid).await {
            event!("pod {}: cannot remove its network namespace: {e}", self.id);
        }
        self.netns = None;
    }

    fn next_deadline(&self) -> Instant {
        self.containers
            .deadlines()
            .chain(self.reporter.retry_at())
            .chain(self.network_retry)
            .min()
            .unwrap_or_else(|| Instant::now() + IDLE)
    }

    /// Moves the pod on (see [`lifecycle::plan`]) and notes when it is finished.
    async fn step(&mut self) {
        if self.terminal.is_some() {
            return;
        }
        let grace = lifecycle::grace_period(&self.pod, false);
        let spec = self.pod.spec.as_ref();
        let effects = lifecycle::plan(
            &mut self.containers,
            self.policy,
            spec,
            grace,
            Instant::now(),
        );
        for effect in effects {
            self.perform(effect).await;
        }
        self.terminal = lifecycle::finished(&self.containers, self.policy);
    }

    async fn perform(&mut self, effect: Effect) {
        match effect {
            Effect::Kill { pid } => {
                let _ = signals::send_group(pid, Signal::SIGKILL);
            }
            Effect::StopForImage {
                name,
                pid,
                from,
                to,
                grace,
            } => {
                event!(
                    "pod {} container {name}: image changed from {from} to {to}; stopping pid {pid} (SIGTERM, SIGKILL after {}s)",
                    self.id,
                    grace.as_secs()
                );
                let _ = signals::send(pid, Signal::SIGTERM);
            }
            Effect::Start(kind, i) => {
                let site = PodSite {
                    ctx: &self.ctx,
                    pod: &self.pod,
                    dir: &self.dir,
                    ip: &self.ip,
                    netns: self.netns.as_deref(),
                    id: &self.id,
                    events: &self.events_tx,
                };
                let slot = self.containers.slot_mut(kind, i);
                start::start(&site, kind, slot, &mut self.next_generation).await;
            }
        }
    }

    async fn handle(&mut self, ev: Event) {
        match ev {
            Event::Exited {
                generation,
                code,
                signal,
            } => {
                let message = self.termination_message(generation, code).await;
                self.exited(Exit {
                    generation,
                    code,
                    signal,
                    message,
                })
            }
            Event::Probe {
                generation,
                liveness,
                ok,
            } => self.probed(generation, liveness, ok),
        }
    }

    /// The termination message of the process of `generation`, read from its log once
    /// the log's writer has drained the process's output (at most a second).
    async fn termination_message(&self, generation: u64, code: Option<i32>) -> Option<String> {
        let (kind, i) = self.containers.find_generation(generation)?;
        let record = &self.containers.slots(kind)[i].record;
        let container = kind.spec_container(self.pod.spec.as_ref(), &record.name)?;
        if !lifecycle::log_is_termination_message(&container, code) {
            return None;
        }
        let log = self
            .dir
            .attempt_logs(&record.name)
            .join(format!("{}.log", record.restart_count));
        if let Some(mut written) = self.ctx.logs.watch(&log) {
            let drained = async { while written.changed().await.is_ok() {} };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drained).await;
        }
        let bytes = tokio::fs::read(&log).await.unwrap_or_default();
        crate::crilog::termination_message(&bytes)
    }

    fn exited(&mut self, exit: Exit) {
        let restarts = Restarts {
            policy: self.policy,
            pod_name: &self.name,
        };
        let (at, now) = (Timestamp::now(), Instant::now());
        let Some(ended) = lifecycle::exited(&mut self.containers, exit, restarts, at, now) else {
            return;
        };
        self.dir.remove_pid(&ended.name);
        let (id, name, pid, code) = (&self.id, &ended.name, ended.pid, ended.term.exit_code);
        match ended.term.signal {
            Some(sig) => {
                event!(
                    "pod {id} container {name}: pid {pid} killed by signal {sig} (exit code {code})"
                )
            }
            None => event!("pod {id} container {name}: pid {pid} exited with code {code}"),
        }
    }

    fn probed(&mut self, generation: u64, liveness: bool, ok: bool) {
        let Some((kind, i)) = self.containers.find_generation(generation) else {
            return;
        };
        let grace = lifecycle::grace_period(&self.pod, false);
        let slot = self.containers.slot_mut(kind, i);
        let verdict = probing::probed(slot, liveness, ok, grace, Instant::now());
        let (id, name) = (&self.id, &slot.record.name);
        match verdict {
            Some(Verdict::Unhealthy { pid }) => {
                event!(
                    "pod {id} container {name}: liveness probe failed; stopping pid {pid} (SIGTERM, SIGKILL after {}s)",
                    grace.as_secs()
                );
                let _ = signals::send(pid, Signal::SIGTERM);
            }
            Some(Verdict::Ready(true)) => event!("pod {id} container {name}: ready"),
            Some(Verdict::Ready(false)) => {
                event!("pod {id} container {name}: not ready (readiness probe failing)")
            }
            None => {}
        }
    }

    /// Reports the status if it changed since the last report.
    async fn publish(&mut self) {
        if self.gone {
            return;
        }
        let snapshot = Snapshot {
            pod: &self.pod,
            id: &self.id,
            policy: self.policy,
            containers: &self.containers,
            terminal: self.terminal,
            ip: &self.ip,
            host_ip: &self.ctx.host_ip,
            start_time: self.start_time,
        };
        if self.reporter.publish(&self.ctx.client, &snapshot).await == Reported::Gone {
            self.gone = true;
        }
    }

    /// The node shuts down (or stops watching the pod): its processes are stopped within
    /// the node's shutdown grace, the pod stays in the API.
    async fn leave(&mut self, shutdown: &CancellationToken) {
        let grace = lifecycle::grace_period(&self.pod, false).min(self.ctx.shutdown_grace);
        self.stop_all(grace, shutdown).await;
    }

    /// SIGTERM to every running process, SIGKILL to their process groups after `grace`,
    /// and wait for all exits.
    async fn stop_all(&mut self, grace: Duration, shutdown: &CancellationToken) {
        let running = teardown::terminate_all(&mut self.containers);
        if running == 0 {
            return;
        }
        event!(
            "pod {}: stopping {running} process(es) (SIGTERM, SIGKILL after {}s)",
            self.id,
            grace.as_secs()
        );
        let mut clock = StopClock::new(grace, self.ctx.shutdown_grace);
        while self.containers.any_running() {
            tokio::select! {
                Some(ev) = self.events_rx.recv() => self.handle(ev).await,
                action = clock.next(shutdown) => match action {
                    StopAction::Kill => teardown::kill_all(&self.containers),
                    StopAction::GiveUp => {
                        event!("pod {}: processes did not exit after SIGKILL; giving up on them", self.id);
                        return;
                    }
                },
            }
        }
    }

    /// The pod is being deleted (or is gone): stop everything, remove its network
    /// namespace, report, delete the object with grace 0 and remove the pod's state.
    async fn finish(&mut self, shutdown: &CancellationToken) {
        let grace = lifecycle::grace_period(&self.pod, !self.gone);
        self.stop_all(grace, shutdown).await;
        if shutdown.is_cancelled() && !self.gone {
            return;
        }
        self.detach().await;
        if self.gone {
            event!("pod {} removed from the API; cleaned up", self.id);
        } else {
            self.reporter.retry_now();
            self.publish().await;
            teardown::delete_pod(&self.ctx.client, &self.pod, &self.id).await;
        }
        teardown::remove_state(&self.ctx, &self.dir, &self.uid, &self.id);
    }
}
