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
mod publish;
mod services_gate;
mod steps;
mod tick;
mod tracer;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt;
use serde::Serialize;
use slog::{Logger, crit, debug, info, warn};

pub(crate) use etcd_operator_core::outcome::{ActionOutcome, ActionResult};
pub(crate) use messages::Tick;
pub use messages::{Inspect, Nudge, Retire, SpecChanged};

use crate::debug::{ActorKind, StateView, TransitionRecord, unix_ms};
use crate::member_client::MemberClient;
use crate::metrics::{ActionLabels, CountedClusterApi, CountedEtcdApi, PhaseLabels, Telemetry};
use crate::ports::{ClusterApi, EtcdApi};
use backoff::{Acted, TickBackoff};
use etcd_operator_core::lifecycle::{DesiredCluster, Pace, Phase, Reason, State};
use etcd_operator_core::report::StatusReport;
use etcd_operator_core::topology::Topology;
use observe::HealthProbe;
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

/// The actor that runs one EtcdCluster.
pub struct ClusterActor {
    topology: Topology,
    /// `namespace/name`, the actor's key in logs, the debug view and the trace.
    key: String,
    /// Shared with each tick's job and the debug view, so neither copies it.
    spec: Arc<DesiredCluster>,
    state: State,
    config: ClusterConfig,
    kube: Arc<dyn ClusterApi>,
    etcd: Arc<dyn EtcdApi>,
    members: Addr<MemberClient>,
    telemetry: Telemetry,
    logger: Logger,
    schedule: NextTick,
    backoff: TickBackoff,
    last_pace: Option<Pace>,
    /// The status written last, and when. Shared with each tick's job and the debug
    /// view, so neither copies it.
    last_written: Option<LastWrite>,
    last_reason: Option<Reason>,
    last_message: String,
    /// The action and decision reason of the last "not yet" answer logged at info: the
    /// same action retried for the same reason is logged at debug, so a join waiting on
    /// etcd's gate is one line however many retries it takes.
    last_not_yet: Option<(&'static str, &'static str)>,
    ticks: u64,
    trail: steps::StepHistory,
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
        let mut actor = ClusterActor {
            topology,
            key,
            spec: Arc::new(spec),
            state: State::default(),
            config,
            kube,
            etcd,
            members,
            telemetry: deps.telemetry,
            logger,
            schedule: NextTick::Idle,
            backoff: TickBackoff::default(),
            last_pace: None,
            last_written: None,
            last_reason: None,
            last_message: String::new(),
            last_not_yet: None,
            ticks: 0,
            trail: steps::StepHistory::default(),
        };
        actor.trace_spec_seen();
        actor
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
            cluster: self.key.clone(),
            phase: self.state.phase.to_string(),
            state: self.state.clone(),
            spec: self.spec.clone(),
            reason: self.last_reason.map(|r| r.as_str()),
            message: self.last_message.clone(),
            status: self.last_written.as_ref().map(|w| w.status.clone()),
            ticks: self.ticks,
            pace: self.last_pace.map(Pace::as_str),
            busy: self.busy(),
        }
    }

    fn publish_view(&self) {
        let view = Arc::new(self.debug_view());
        self.telemetry
            .hub
            .set_view(ActorKind::Cluster, &self.key, view);
    }

    fn finish(&mut self, outcome: TickOutcome, ctx: &mut Context<Self>) {
        let again = matches!(self.schedule, NextTick::Running { again: true });
        self.schedule = NextTick::Idle;
        self.ticks += 1;
        let metrics = &self.telemetry.metrics;
        metrics.ticks.inc();
        let (pace, deadline) = match outcome {
            TickOutcome::Blind { error, elapsed } => {
                metrics.tick_seconds.observe(elapsed.as_secs_f64());
                warn!(self.logger, "tick ended without a decision"; "error" => error);
                (Pace::Watchful, None)
            }
            TickOutcome::Decided(done) => {
                let tick::Decided {
                    decision,
                    outcomes,
                    status,
                    status_error,
                    written_at,
                    members,
                    elapsed,
                    stages,
                    sight,
                    observed,
                    pace,
                    deadline,
                } = *done;
                metrics.tick_seconds.observe(elapsed.as_secs_f64());
                self.backoff.note_actions(Acted::of(&outcomes));
                self.log_outcomes(decision.why.reason.as_str(), &outcomes);
                self.trace_tick(sight, observed, &outcomes);
                if let Some(error) = status_error {
                    warn!(self.logger, "cannot write status"; "error" => error);
                } else if let Some(at) = written_at {
                    self.last_written = Some(LastWrite {
                        status: Arc::new(status),
                        at,
                    });
                }
                let from = std::mem::replace(&mut self.state, decision.state);
                self.transition(&from.phase, &decision.why, members, &stages);
                self.last_reason = Some(decision.why.reason);
                self.last_message = decision.why.message;
                (pace, deadline)
            }
        };
        self.last_pace = Some(pace);
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

    /// Counts and logs each action's outcome. Every line names the decision's reason: a
    /// tick that acts within one phase logs no transition to say why. A "not yet" answer
    /// repeated by the next retry is logged at debug only.
    fn log_outcomes(&mut self, reason: &'static str, outcomes: &[ActionOutcome]) {
        let metrics = &self.telemetry.metrics;
        for o in outcomes {
            let kind = o.action.kind();
            let outcome = match o.result {
                ActionResult::Done { .. } => "ok",
                ActionResult::NotYet { .. } => "not_yet",
                ActionResult::Failed { .. } => "error",
            };
            let labels = ActionLabels {
                action: kind,
                outcome,
            };
            metrics.actions.get_or_create(&labels).inc();
            match &o.result {
                ActionResult::Done { note, .. } => {
                    self.last_not_yet = None;
                    info!(self.logger, "{}", note; "action" => kind, "reason" => reason)
                }
                ActionResult::NotYet { error } => {
                    let answer = Some((kind, reason));
                    if self.last_not_yet == answer {
                        debug!(self.logger, "etcd is still not ready for this step; retrying";
                            "action" => kind, "reason" => reason, "error" => error)
                    } else {
                        info!(self.logger, "etcd is not ready for this step yet; retrying";
                            "action" => kind, "reason" => reason, "error" => error);
                        self.last_not_yet = answer;
                    }
                }
                ActionResult::Failed { error, cause } => {
                    warn!(self.logger, "action failed"; "action" => kind,
                        "reason" => reason, "cause" => cause.label(), "error" => error)
                }
            }
        }
    }

    fn transition(
        &self,
        from: &Phase,
        why: &etcd_operator_core::lifecycle::Why,
        members: usize,
        stages: &tick::Stages,
    ) {
        let to = &self.state.phase;
        if from == to {
            debug!(self.logger, "tick"; "phase" => %to, "reason" => why.reason.as_str(),
                "observe_ms" => stages.observe.as_millis(), "act_ms" => stages.act.as_millis(),
                "report_ms" => stages.report.as_millis());
            return;
        }
        info!(self.logger, "state transition";
            "from" => %from, "to" => %to, "reason" => why.reason.as_str(),
            "message" => &why.message, "members" => members);
        self.telemetry
            .metrics
            .transitions
            .get_or_create(&PhaseLabels { phase: to.name() })
            .inc();
        self.telemetry.hub.publish(TransitionRecord {
            time_unix_ms: unix_ms(),
            kind: ActorKind::Cluster,
            key: self.key.clone(),
            from: from.to_string(),
            to: to.to_string(),
            reason: why.reason.as_str().to_string(),
            message: why.message.clone(),
        });
    }
}

impl Actor for ClusterActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        info!(self.logger, "cluster actor started"; "size" => self.spec.size, "version" => &self.spec.version);
        self.telemetry.metrics.clusters.inc();
        self.publish_view();
        self.schedule(Duration::ZERO, ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.telemetry.metrics.clusters.dec();
        self.telemetry.hub.remove(ActorKind::Cluster, &self.key);
        info!(self.logger, "cluster actor stopped");
    }
}

impl Supervised for ClusterActor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        warn!(
            self.logger,
            "restarting cluster actor; state is rebuilt from observation"
        );
        self.telemetry.metrics.restarts.inc();
        // `stopped` already decremented the `clusters` gauge; `started` runs again next.
        self.state = State::default();
        self.schedule = NextTick::Idle;
        self.backoff.reset();
        self.last_pace = None;
        self.last_written = None;
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
            kube: self.kube.clone(),
            members: self.members.clone(),
            probe: HealthProbe {
                etcd: self.etcd.clone(),
            },
            topology: self.topology.clone(),
            spec: self.spec.clone(),
            state: self.state.clone(),
            deadlines: self.config.deadlines,
            last_written: self.last_written.clone(),
            rewording: self.config.status_rewording,
            last_reason: self.last_reason,
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
                            act.logger,
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
        info!(self.logger, "spec changed"; "size" => msg.0.size, "version" => &msg.0.version,
            "paused" => msg.0.paused, "generation" => msg.0.generation);
        if msg.0.uid != self.spec.uid {
            // Deleted and created again under the same name (a relist can merge the two):
            // another cluster, which inherits nothing of the first.
            warn!(self.logger, "the EtcdCluster was replaced by a new object; starting afresh";
                "old_uid" => &self.spec.uid, "new_uid" => &msg.0.uid);
            self.state = State::default();
            self.last_written = None;
            self.last_reason = None;
            self.trace_spec_seen();
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
            self.logger,
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
