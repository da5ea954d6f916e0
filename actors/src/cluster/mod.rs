//! The Cluster actor: owns one EtcdCluster's lifecycle and drives it with ticks.
//!
//! Each [`Tick`] runs one observe–decide–act round as a spawned job (`tick.rs`); the
//! actor keeps the lifecycle [`State`] between rounds, schedules the next tick, logs and
//! publishes every phase transition, and is restarted by actix's supervisor (with a fresh
//! state rebuilt from observation) if a round panics.

mod backoff;
mod config;
mod execute;
mod messages;
mod observe;
mod observer;
mod publish;
mod services_gate;
mod steps;
mod tick;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt;
use serde::Serialize;
use slog::{Logger, crit, info, warn};

pub(crate) use messages::Tick;
pub use messages::{Inspect, Nudge, Retire, SpecChanged};

use crate::debug::{ActorKind, StateView};
use crate::member_client::MemberClient;
use crate::metrics::{CountedClusterApi, CountedEtcdApi, Telemetry};
use crate::ports::{ClusterApi, EtcdApi};
use backoff::{Acted, TickBackoff};
use etcd_operator_core::lifecycle::{DesiredCluster, Pace, State};
use etcd_operator_core::report::{Previous, StatusReport};
use etcd_operator_core::topology::Topology;
use observe::HealthProbe;
use observer::TickObserver;
use publish::LastWrite;
use tick::{TickJob, TickOutcome};

pub use config::ClusterConfig;

/// What a Cluster actor needs from the world: its two ports, telemetry and a logger.
#[derive(Clone)]
pub struct ClusterDeps {
    /// The Kubernetes side of the cluster.
    pub kube: Arc<dyn ClusterApi>,
    /// etcd's API (membership calls go through the actor's own MemberClient).
    pub etcd: Arc<dyn EtcdApi>,
    /// Metrics and the debug hub.
    pub telemetry: Telemetry,
    /// The parent logger.
    pub logger: Logger,
}

/// When the next tick runs.
#[derive(Debug, Default)]
enum NextTick {
    /// No tick is running; none is planned (only before the first one).
    #[default]
    Idle,
    /// No tick is running; the next one is planned.
    Planned(SpawnHandle),
    /// A tick is running; `again` asks for another one right after it.
    Running {
        /// Tick again at once when this one ends.
        again: bool,
    },
}

/// A Cluster actor's state as `/debug/actors` and [`Inspect`] show it.
#[derive(Debug, Serialize)]
struct DebugView {
    cluster: String,
    phase: String,
    state: State,
    spec: Arc<DesiredCluster>,
    reason: Option<&'static str>,
    message: String,
    status: Option<Arc<StatusReport>>,
    ticks: u64,
    pace: Option<&'static str>,
    busy: bool,
}

impl StateView for DebugView {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
    }
}

/// The ports a Cluster actor reaches the world through.
struct Ports {
    kube: Arc<dyn ClusterApi>,
    etcd: Arc<dyn EtcdApi>,
    /// Serializes the cluster's membership calls.
    members: Addr<MemberClient>,
}

/// What the last tick left for the next one and for the debug view.
#[derive(Default)]
struct LastTick {
    pace: Option<Pace>,
    /// The status written last, and when. Shared with each tick's job and the debug
    /// view, so neither copies it.
    written: Option<LastWrite>,
    /// What the last tick reported, for the next report to compare with.
    reported: Previous,
    message: String,
}

/// The actor that runs one EtcdCluster.
pub struct ClusterActor {
    topology: Topology,
    /// Shared with each tick's job and the debug view, so neither copies it.
    spec: Arc<DesiredCluster>,
    state: State,
    config: ClusterConfig,
    ports: Ports,
    observer: TickObserver,
    schedule: NextTick,
    backoff: TickBackoff,
    last: LastTick,
    ticks: u64,
}

impl ClusterActor {
    /// A Cluster actor for `topology`, with its own MemberClient over `deps.etcd`. Every
    /// call of either port that fails is counted in the telemetry's error metrics.
    pub fn new(
        topology: Topology,
        spec: DesiredCluster,
        config: ClusterConfig,
        deps: ClusterDeps,
    ) -> Self {
        let key = topology.key();
        let logger = deps.logger.new(slog::o!("cluster" => key.clone()));
        let metrics = deps.telemetry.metrics.clone();
        let kube: Arc<dyn ClusterApi> =
            Arc::new(CountedClusterApi::new(deps.kube, metrics.clone()));
        let etcd: Arc<dyn EtcdApi> = Arc::new(CountedEtcdApi::new(deps.etcd, metrics));
        let members = MemberClient::new(etcd.clone()).start();
        ClusterActor {
            topology,
            spec: Arc::new(spec),
            state: State::default(),
            config,
            ports: Ports {
                kube,
                etcd,
                members,
            },
            observer: TickObserver::new(key, logger, deps.telemetry),
            schedule: NextTick::Idle,
            backoff: TickBackoff::default(),
            last: LastTick::default(),
            ticks: 0,
        }
    }

    /// Plans the next tick `after` from now, replacing a planned one. While a tick runs,
    /// `after == 0` asks for another right after it, and anything later waits for its end.
    fn schedule(&mut self, after: Duration, ctx: &mut Context<Self>) {
        match &mut self.schedule {
            NextTick::Running { again } => *again |= after.is_zero(),
            NextTick::Planned(handle) => {
                ctx.cancel_future(*handle);
                self.schedule = NextTick::Planned(ctx.notify_later(Tick, after));
            }
            NextTick::Idle => self.schedule = NextTick::Planned(ctx.notify_later(Tick, after)),
        }
    }

    /// Ticks now, or right after the tick in progress.
    fn tick_soon(&mut self, ctx: &mut Context<Self>) {
        self.schedule(Duration::ZERO, ctx);
    }

    fn busy(&self) -> bool {
        matches!(self.schedule, NextTick::Running { .. })
    }

    fn debug_view(&self) -> DebugView {
        DebugView {
            cluster: self.observer.key.clone(),
            phase: self.state.phase.to_string(),
            state: self.state.clone(),
            spec: self.spec.clone(),
            reason: self.last.reported.reason.map(|r| r.as_str()),
            message: self.last.message.clone(),
            status: self.last.written.as_ref().map(|w| w.status.clone()),
            ticks: self.ticks,
            pace: self.last.pace.map(Pace::as_str),
            busy: self.busy(),
        }
    }

    fn publish_view(&self) {
        let view = Arc::new(self.debug_view());
        let observer = &self.observer;
        observer
            .telemetry
            .hub
            .set_view(ActorKind::Cluster, &observer.key, view);
    }

    fn finish(&mut self, outcome: TickOutcome, ctx: &mut Context<Self>) {
        let again = matches!(self.schedule, NextTick::Running { again: true });
        self.schedule = NextTick::Idle;
        self.ticks += 1;
        let metrics = self.observer.telemetry.metrics.clone();
        metrics.ticks.inc();
        let (pace, deadline) = match outcome {
            TickOutcome::Blind { error, elapsed } => {
                metrics.tick_seconds.observe(elapsed.as_secs_f64());
                warn!(self.observer.logger, "tick ended without a decision"; "error" => error);
                (Pace::Watchful, None)
            }
            TickOutcome::Decided(done) => {
                metrics.tick_seconds.observe(done.elapsed.as_secs_f64());
                self.take_decided(*done)
            }
        };
        self.last.pace = Some(pace);
        self.publish_view();
        let next = if again {
            self.backoff.reset();
            Duration::ZERO
        } else {
            let now = tokio::time::Instant::now();
            self.backoff.next(pace, deadline, now, &self.config)
        };
        self.schedule(next, ctx);
    }

    /// Takes in what a decided tick did: the back-off, the observer's records, the last
    /// status written and the new state. Returns how to pace the next tick.
    fn take_decided(&mut self, done: tick::Decided) -> (Pace, Option<tokio::time::Instant>) {
        self.backoff.note_actions(Acted::of(&done.outcomes));
        let observer = &mut self.observer;
        let decision = done.decision;
        observer.actions(decision.why.reason.as_str(), &done.outcomes);
        observer.steps(done.sight, done.observed, &done.outcomes);
        let reported = self.last.reported.after(&decision, &done.status);
        let metrics = &observer.telemetry.metrics;
        metrics.move_storage(
            self.last.reported.storage.as_deref(),
            reported.storage.as_deref(),
        );
        metrics.move_phase(
            Some(self.state.phase.name()),
            Some(decision.state.phase.name()),
        );
        self.last.reported = reported;
        if let Some(error) = done.status_error {
            warn!(observer.logger, "cannot write status"; "error" => error);
        } else if let Some(at) = done.written_at {
            self.last.written = Some(LastWrite {
                status: Arc::new(done.status),
                at,
            });
        }
        let from = std::mem::replace(&mut self.state, decision.state);
        let to = &self.state.phase;
        observer.transition(&from.phase, to, &decision.why, done.members, &done.stages);
        self.last.message = decision.why.message;
        (done.pace, done.deadline)
    }
}

impl Actor for ClusterActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        info!(self.observer.logger, "cluster actor started"; "size" => self.spec.size, "version" => &self.spec.version);
        self.observer.telemetry.metrics.clusters.inc();
        let phase = self.state.phase.name();
        self.observer
            .telemetry
            .metrics
            .move_phase(None, Some(phase));
        self.publish_view();
        self.schedule(Duration::ZERO, ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        let metrics = &self.observer.telemetry.metrics;
        metrics.clusters.dec();
        metrics.move_phase(Some(self.state.phase.name()), None);
        metrics.move_storage(self.last.reported.storage.as_deref(), None);
        self.observer
            .telemetry
            .hub
            .remove(ActorKind::Cluster, &self.observer.key);
        info!(self.observer.logger, "cluster actor stopped");
    }
}

impl Supervised for ClusterActor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        warn!(
            self.observer.logger,
            "restarting cluster actor; state is rebuilt from observation"
        );
        self.observer.telemetry.metrics.restarts.inc();
        // `stopped` already decremented the `clusters` gauge; `started` runs again next.
        self.state = State::default();
        self.schedule = NextTick::Idle;
        self.backoff.reset();
        self.last = LastTick::default();
    }
}

impl Handler<Tick> for ClusterActor {
    type Result = ();

    fn handle(&mut self, _: Tick, ctx: &mut Context<Self>) {
        if let NextTick::Running { again } = &mut self.schedule {
            *again = true;
            return;
        }
        self.schedule = NextTick::Running { again: false };
        let job = TickJob {
            kube: self.ports.kube.clone(),
            members: self.ports.members.clone(),
            probe: HealthProbe {
                etcd: self.ports.etcd.clone(),
            },
            topology: self.topology.clone(),
            spec: self.spec.clone(),
            state: self.state.clone(),
            deadlines: self.config.deadlines,
            last_written: self.last.written.clone(),
            rewording: self.config.status_rewording,
            previous: self.last.reported.clone(),
        };
        let timeout = self.config.tick_timeout;
        let bounded = async move {
            let started = tokio::time::Instant::now();
            tokio::time::timeout(timeout, job.run())
                .await
                .unwrap_or_else(|_| TickOutcome::Blind {
                    error: format!("the tick did not finish within {timeout:?}; abandoned"),
                    elapsed: started.elapsed(),
                })
        };
        let guarded = AssertUnwindSafe(bounded).catch_unwind();
        ctx.spawn(
            guarded
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(outcome) => act.finish(outcome, ctx),
                    Err(_) => {
                        crit!(
                            act.observer.logger,
                            "tick panicked; stopping the actor so it restarts"
                        );
                        ctx.stop();
                    }
                }),
        );
    }
}

impl Handler<SpecChanged> for ClusterActor {
    type Result = ();

    fn handle(&mut self, msg: SpecChanged, ctx: &mut Context<Self>) {
        if msg.0 == *self.spec {
            return;
        }
        info!(self.observer.logger, "spec changed"; "size" => msg.0.size, "version" => &msg.0.version,
            "paused" => msg.0.paused, "generation" => msg.0.generation);
        if msg.0.uid != self.spec.uid {
            // Deleted and created again under the same name (a relist can merge the two):
            // another cluster, which inherits nothing of the first.
            warn!(self.observer.logger, "the EtcdCluster was replaced by a new object; starting afresh";
                "old_uid" => &self.spec.uid, "new_uid" => &msg.0.uid);
            self.state = State::default();
            self.last.written = None;
            self.last.reported = Previous::default();
            self.observer.spec_seen();
        }
        self.spec = Arc::new(msg.0);
        self.backoff.reset();
        self.tick_soon(ctx);
    }
}

impl Handler<Nudge> for ClusterActor {
    type Result = ();

    fn handle(&mut self, _: Nudge, ctx: &mut Context<Self>) {
        self.backoff.reset();
        self.tick_soon(ctx);
    }
}

impl Handler<Retire> for ClusterActor {
    type Result = ();

    fn handle(&mut self, _: Retire, ctx: &mut Context<Self>) {
        info!(
            self.observer.logger,
            "EtcdCluster deleted; its pods and Services go with it (ownerReferences)"
        );
        ctx.stop();
    }
}

impl Handler<Inspect> for ClusterActor {
    type Result = MessageResult<Inspect>;

    fn handle(&mut self, _: Inspect, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.debug_view().to_json())
    }
}
