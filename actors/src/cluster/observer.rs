//! The one observer of what a tick did: it logs each action and phase transition as slog
//! lines, counts them in the metrics, records the trace's steps (found by `steps.rs`) and
//! publishes transitions to the debug stream. The actor hands it each tick's record.

use slog::{Logger, debug, info, warn};
use tokio::time::Instant;

use crate::debug::{ActorKind, TransitionRecord, unix_ms};
use crate::metrics::{ActionLabels, PhaseLabels, Telemetry};
use crate::trace::Step;
use etcd_operator_core::lifecycle::{Phase, Why};
use etcd_operator_core::outcome::{ActionOutcome, ActionResult};

use super::steps::{Snapshot, StepHistory, StepTime, steps};
use super::tick::Stages;

/// Logs, metrics, trace and debug stream of one Cluster actor.
pub(super) struct TickObserver {
    /// `namespace/name`, the actor's key in logs, the debug view and the trace.
    pub(super) key: String,
    /// The actor's logger (it names the cluster).
    pub(super) logger: Logger,
    /// Metrics and the debug hub.
    pub(super) telemetry: Telemetry,
    /// The action and decision reason of the last "not yet" answer logged at info: the
    /// same action retried for the same reason is logged at debug, so a join waiting on
    /// etcd's gate is one line however many retries it takes.
    last_not_yet: Option<(&'static str, &'static str)>,
    /// What the ticks so far showed, to find the next tick's steps.
    history: StepHistory,
}

impl TickObserver {
    /// An observer for the cluster `key`, its spec seen now.
    pub(super) fn new(key: String, logger: Logger, telemetry: Telemetry) -> Self {
        let mut observer = TickObserver {
            key,
            logger,
            telemetry,
            last_not_yet: None,
            history: StepHistory::default(),
        };
        observer.spec_seen();
        observer
    }

    /// Starts the cluster's trace over: its spec is seen now.
    pub(super) fn spec_seen(&mut self) {
        self.history = StepHistory::default();
        self.telemetry
            .hub
            .step(&self.key, Step::SpecSeen, None, unix_ms());
    }

    /// Counts and logs each action's outcome. Every line names the decision's reason: a
    /// tick that acts within one phase logs no transition to say why. A "not yet" answer
    /// repeated by the next retry is logged at debug only.
    pub(super) fn actions(&mut self, reason: &'static str, outcomes: &[ActionOutcome]) {
        for o in outcomes {
            let action = o.action.kind();
            let outcome = match o.result {
                ActionResult::Done { .. } => "ok",
                ActionResult::NotYet { .. } => "not_yet",
                ActionResult::Failed { .. } => "error",
            };
            let labels = ActionLabels { action, outcome };
            self.telemetry.metrics.actions.get_or_create(&labels).inc();
            self.log_outcome(action, reason, &o.result);
        }
    }

    fn log_outcome(&mut self, action: &'static str, reason: &'static str, result: &ActionResult) {
        match result {
            ActionResult::Done { note, .. } => {
                self.last_not_yet = None;
                info!(self.logger, "{}", note; "action" => action, "reason" => reason)
            }
            ActionResult::NotYet { error } => {
                let answer = Some((action, reason));
                if self.last_not_yet == answer {
                    debug!(self.logger, "etcd is still not ready for this step; retrying";
                        "action" => action, "reason" => reason, "error" => error)
                } else {
                    info!(self.logger, "etcd is not ready for this step yet; retrying";
                        "action" => action, "reason" => reason, "error" => error);
                    self.last_not_yet = answer;
                }
            }
            ActionResult::Failed { error, cause } => {
                warn!(self.logger, "action failed"; "action" => action,
                    "reason" => reason, "cause" => cause.label(), "error" => error)
            }
        }
    }

    /// Records the steps a tick shows: what it saw at `observed`, and did.
    pub(super) fn steps(&mut self, sight: Snapshot, observed: Instant, outcomes: &[ActionOutcome]) {
        let (found, history) = steps(&self.history, sight, outcomes);
        self.history = history;
        let now = unix_ms();
        let observed_ms = now.saturating_sub(observed.elapsed().as_millis());
        for f in found {
            let at = match f.at {
                StepTime::Observed => observed_ms,
                StepTime::Acted => now,
            };
            self.telemetry.hub.step(&self.key, f.step, f.member, at);
        }
    }

    /// Logs the tick's phase change `from` → `to` (a tick that stays logs at debug, with
    /// its stages' times), counts it and publishes it to the debug stream.
    pub(super) fn transition(
        &self,
        from: &Phase,
        to: &Phase,
        why: &Why,
        members: usize,
        stages: &Stages,
    ) {
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
