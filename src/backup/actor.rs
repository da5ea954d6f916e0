//! The Backup actor: one per EtcdBackup, it takes that object's backups on its schedule.
//!
//! The actor keeps one timer, set to the next due backup ([`next_run`] from the status it
//! last wrote); a run is one future spawned on the actor, so runs of one EtcdBackup never
//! overlap. Everything that survives an operator restart is in the status: the last good
//! backup, the last attempt and the failures since, so a restarted operator neither
//! repeats a one-shot backup nor takes a periodic one early. Status and Events are written
//! in order (the actor waits for each write), and every write, backup and deletion passes
//! the leader's fence.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use jiff::Timestamp;
use kube::ResourceExt;
use slog::{Logger, info, warn};

use crate::api::backup::{EtcdBackup, EtcdBackupStatus};
use crate::kube_api::own_objects::ObjectEvent;

use super::metrics::BackupMetrics;
use super::port::BackupKube;
use super::report::{self, AttemptOutcome};
use super::run::{BackupRequest, Writer, retain, take_backup};
use super::schedule::{Schedule, next_run};
use super::scope::EndpointPolicy;
use super::store::StoreTimeouts;
use super::target::{self, DEFAULT_TIMEOUT, TargetError, spec_problem};

/// What every Backup actor runs with.
#[derive(Debug, Clone, Copy)]
pub struct BackupConfig {
    /// Deadline of each etcd call before the snapshot stream.
    pub etcd_timeout: Duration,
    /// Deadlines of store calls.
    pub store: StoreTimeouts,
    /// Where backups may dial.
    pub endpoints: EndpointPolicy,
}

/// Everything a Backup actor is built from.
#[derive(Clone)]
pub struct BackupDeps {
    /// Kubernetes.
    pub kube: Arc<dyn BackupKube>,
    /// Configuration.
    pub config: BackupConfig,
    /// Metrics.
    pub metrics: BackupMetrics,
}

/// The EtcdBackup changed (or was listed again).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct BackupChanged(pub Box<EtcdBackup>);

/// The EtcdBackup is gone: stop.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Retire;

/// Takes the backups of one EtcdBackup.
pub struct BackupActor {
    backup: EtcdBackup,
    status: EtcdBackupStatus,
    deps: BackupDeps,
    running: bool,
    /// Whether `status` was written (false after an attempt until its write).
    written: bool,
    timer: Option<SpawnHandle>,
    log: Logger,
}

impl BackupActor {
    /// An actor for `backup`, starting from the status it has.
    pub fn new(backup: EtcdBackup, deps: BackupDeps, log: &Logger) -> Self {
        let key = format!(
            "{}/{}",
            backup.namespace().unwrap_or_default(),
            backup.name_any()
        );
        BackupActor {
            status: backup.status.clone().unwrap_or_default(),
            backup,
            deps,
            running: false,
            written: true,
            timer: None,
            log: log.new(slog::o!("backup" => key)),
        }
    }

    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.backup.namespace().unwrap_or_default(),
            self.backup.name_any()
        )
    }

    /// Writes `status` (when it changed) and the Event, if any, then keeps `status`.
    fn publish(
        &mut self,
        status: EtcdBackupStatus,
        event: Option<ObjectEvent>,
        ctx: &mut Context<Self>,
    ) {
        let changed = status != self.status || !self.written;
        self.written = true;
        self.status = status.clone();
        let (kube, backup, log) = (
            self.deps.kube.clone(),
            self.backup.clone(),
            self.log.clone(),
        );
        ctx.wait(
            async move {
                if let Some(event) = event
                    && let Err(e) = kube.writes().event(&backup, &event).await
                {
                    warn!(log, "could not record an Event"; "reason" => event.reason, "error" => %e);
                }
                if changed && let Err(e) = kube.writes().write_status(&backup, &status).await {
                    warn!(log, "could not write the status"; "error" => %e);
                }
            }
            .into_actor(self),
        );
    }

    /// Sets the timer to the next due backup, or reports why there is none.
    fn reschedule(&mut self, ctx: &mut Context<Self>) {
        self.reschedule_with(None, ctx);
    }

    /// [`Self::reschedule`], recording `event` with the status it writes.
    fn reschedule_with(&mut self, event: Option<ObjectEvent>, ctx: &mut Context<Self>) {
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        if self.running {
            return;
        }
        let now = Timestamp::now();
        let generation = self.backup.metadata.generation;
        let schedule = match spec_problem(&self.backup.spec)
            .map(|p| (p.reason(), p.to_string()))
            .map_or_else(
                || {
                    Schedule::from_spec(&self.backup.spec)
                        .map_err(|e| ("InvalidSchedule", e.to_string()))
                },
                Err,
            ) {
            Ok(schedule) => schedule,
            Err((reason, message)) => {
                let status = report::refused(&self.status, reason, &message, generation, now);
                let refusal =
                    (self.status.reason != reason).then(|| ObjectEvent::warning(reason, message));
                return self.publish(status, event.or(refusal), ctx);
            }
        };
        let history = report::history(&self.status, generation, schedule.is_periodic());
        let next = next_run(&schedule, history, now);
        let status = report::with_next(&self.status, next, now);
        self.publish(status, event, ctx);
        if let Some(at) = next {
            let delay = at.duration_since(now).unsigned_abs();
            self.timer = Some(ctx.run_later(delay, |actor, ctx| actor.run(ctx)));
        }
    }

    /// Starts one backup.
    fn run(&mut self, ctx: &mut Context<Self>) {
        self.timer = None;
        if self.running {
            return;
        }
        self.running = true;
        let started = Timestamp::now();
        let clock = Instant::now();
        let generation = self.backup.metadata.generation;
        let (deps, backup, log) = (self.deps.clone(), self.backup.clone(), self.log.clone());
        info!(log, "taking a backup");
        ctx.spawn(
            attempt(deps, backup)
                .into_actor(self)
                .map(move |verdict, actor, ctx| {
                    actor.finished(verdict, started, clock.elapsed(), generation, ctx);
                }),
        );
    }

    fn finished(
        &mut self,
        verdict: AttemptOutcome,
        started: Timestamp,
        took: Duration,
        generation: Option<i64>,
        ctx: &mut Context<Self>,
    ) {
        self.running = false;
        let key = self.key();
        let event = match &verdict {
            AttemptOutcome::Succeeded { outcome, retention } => {
                let time = outcome.metadata.time.parse().unwrap_or(started);
                self.deps
                    .metrics
                    .succeeded(&key, took.as_secs_f64(), outcome.metadata.size, time);
                info!(self.log, "backup stored"; "path" => &outcome.path, "bytes" => outcome.metadata.size);
                ObjectEvent::normal(
                    "BackupSucceeded",
                    report::success_message(outcome, retention),
                )
            }
            AttemptOutcome::Failed { reason, message } => {
                self.deps.metrics.failed(reason, took.as_secs_f64());
                warn!(self.log, "backup failed"; "reason" => *reason, "error" => message);
                ObjectEvent::warning(reason, message.clone())
            }
        };
        if let AttemptOutcome::Succeeded { retention, .. } = &verdict
            && let Some(error) = &retention.error
        {
            let warning = Some(ObjectEvent::warning("RetentionFailed", error.clone()));
            self.publish(self.status.clone(), warning, ctx);
        }
        // The attempt's status and the next run go out in one write: a reader never sees
        // the outcome with the previous run's schedule.
        let now = Timestamp::now();
        self.status = report::after_attempt(&self.status, &verdict, started, generation, now);
        self.written = false;
        self.reschedule_with(Some(event), ctx);
    }
}

/// One attempt, start to end: resolve the spec, take the backup, then retention.
async fn attempt(deps: BackupDeps, backup: EtcdBackup) -> AttemptOutcome {
    match attempt_inner(&deps, &backup).await {
        Ok(verdict) => verdict,
        Err((reason, message)) => AttemptOutcome::Failed { reason, message },
    }
}

async fn attempt_inner(
    deps: &BackupDeps,
    backup: &EtcdBackup,
) -> Result<AttemptOutcome, (&'static str, String)> {
    let fail = |e: TargetError| (e.reason(), e.to_string());
    let namespace = backup.namespace().unwrap_or_default();
    let spec = &backup.spec;
    deps.kube
        .may_act("take a backup")
        .map_err(|e| ("NotLeader", e.to_string()))?;
    let store = target::store(deps.kube.as_ref(), &namespace, spec, deps.config.store)
        .await
        .map_err(fail)?;
    let etcd = target::etcd(
        deps.kube.as_ref(),
        &namespace,
        &backup.name_any(),
        spec,
        deps.config.endpoints,
    )
    .await
    .map_err(fail)?;
    let policy = spec.policy();
    let timeout = policy
        .timeout_in_second
        .filter(|s| *s > 0)
        .map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(s.unsigned_abs()));
    let writer = backup.metadata.uid.clone().map(|uid| Writer {
        namespace: namespace.clone(),
        uid,
    });
    let request = BackupRequest {
        writer,
        cluster: etcd.cluster,
        endpoints: etcd.endpoints,
        dialer: etcd.dialer,
        cluster_id: etcd.cluster_id,
        etcd_timeout: deps.config.etcd_timeout,
        timeout,
    };
    let outcome = take_backup(&store, &request)
        .await
        .map_err(|e| (e.reason(), e.to_string()))?;
    let max = usize::try_from(policy.max_backups.unwrap_or(0)).unwrap_or(0);
    let retention = match deps.kube.may_act("delete old backups") {
        Ok(()) => retain(&store, &outcome.metadata, max).await,
        Err(e) => super::run::Retention {
            error: Some(e.to_string()),
            ..Default::default()
        },
    };
    Ok(AttemptOutcome::Succeeded {
        outcome: Box::new(outcome),
        retention,
    })
}

impl Actor for BackupActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(time) = self
            .status
            .last_success_date
            .as_deref()
            .and_then(|t| t.parse().ok())
        {
            self.deps.metrics.known_good(&self.key(), time);
        }
        self.reschedule(ctx);
    }
}

impl Handler<BackupChanged> for BackupActor {
    type Result = ();

    fn handle(&mut self, msg: BackupChanged, ctx: &mut Context<Self>) {
        let spec_changed = msg.0.metadata.generation != self.backup.metadata.generation
            || msg.0.spec != self.backup.spec;
        // The status this actor wrote is the newest; the watched object's may lag it.
        self.backup = *msg.0;
        if spec_changed {
            self.reschedule(ctx);
        }
    }
}

impl Handler<Retire> for BackupActor {
    type Result = ();

    fn handle(&mut self, _: Retire, ctx: &mut Context<Self>) {
        self.deps.metrics.forget(&self.key());
        ctx.stop();
    }
}
