//! The Restore actor: one for every EtcdRestore of the watch, run on the leader. A restore
//! moves by steps ([`step`]): one at a time, the next after [`FOLLOW_INTERVAL`] while its
//! cluster comes up, or after a growing delay when a step failed for a reason that may
//! pass (a store or Secret not reachable now). A restore that succeeded, or was refused for
//! its current spec, takes no more steps; what it did is in its status, so a restarted
//! operator picks up where it stood.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use slog::{Logger, info, warn};

use crate::api::restore::{EtcdRestore, EtcdRestoreStatus};
use crate::backup::store::StoreTimeouts;

use super::port::RestoreKube;
use super::run::{FOLLOW_INTERVAL, StepOutcome, finished, step};

/// First delay after a failed step; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Longest delay between retries.
const MAX_RETRY: Duration = Duration::from_secs(300);

/// Time to take a step.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Due;

/// The EtcdRestore changed (or was listed again).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RestoreChanged(pub Box<EtcdRestore>);

/// The EtcdRestore is gone: stop, once a step in flight has ended.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Retire;

/// Runs the steps of one EtcdRestore.
pub struct RestoreActor {
    kube: Arc<dyn RestoreKube>,
    timeouts: StoreTimeouts,
    restore: EtcdRestore,
    /// The status this actor wrote last (the watched object's may lag it).
    status: EtcdRestoreStatus,
    running: bool,
    retired: bool,
    failures: u32,
    timer: Option<SpawnHandle>,
    log: Logger,
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

impl RestoreActor {
    /// The actor of `restore` (`key` is its `namespace/name`).
    pub fn new(
        restore: EtcdRestore,
        key: &str,
        kube: Arc<dyn RestoreKube>,
        timeouts: StoreTimeouts,
        log: &Logger,
    ) -> Self {
        RestoreActor {
            kube,
            timeouts,
            status: restore.status.clone().unwrap_or_default(),
            restore,
            running: false,
            retired: false,
            failures: 0,
            timer: None,
            log: log.new(slog::o!("restore" => key.to_string())),
        }
    }

    /// Takes a step soon unless one runs or waits already, or the restore is done.
    fn step_unless_waiting(&mut self, ctx: &mut Context<Self>) {
        if !self.running && self.timer.is_none() && !finished(&self.restore, &self.status) {
            self.schedule(Duration::ZERO, ctx);
        }
    }

    fn schedule(&mut self, after: Duration, ctx: &mut Context<Self>) {
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        self.timer = Some(ctx.notify_later(Due, after));
    }

    fn finish(&mut self, outcome: StepOutcome, ctx: &mut Context<Self>) {
        self.running = false;
        if self.retired {
            ctx.stop();
            return;
        }
        let failed = outcome.status.phase == "Failed";
        self.failures = if failed { self.failures + 1 } else { 0 };
        let changed = outcome.status != self.status;
        let (kube, restore, log) = (self.kube.clone(), self.restore.clone(), self.log.clone());
        let (status, event) = (outcome.status.clone(), outcome.event.clone());
        info!(self.log, "restore step"; "phase" => &status.phase,
              "reason" => &status.reason, "message" => &status.message);
        self.status = outcome.status;
        let shift = self.failures.saturating_sub(1).min(6);
        ctx.wait(
            async move {
                if let Some(event) = event
                    && let Err(e) = kube.writes().event(&restore, &event).await
                {
                    warn!(log, "could not record an Event"; "reason" => event.reason, "error" => %e);
                }
                if changed && let Err(e) = kube.writes().write_status(&restore, &status).await {
                    warn!(log, "could not write the EtcdRestore status"; "error" => %e);
                }
            }
            .into_actor(self),
        );
        if outcome.again {
            let delay = if failed {
                (FIRST_RETRY * 2u32.pow(shift)).min(MAX_RETRY)
            } else {
                FOLLOW_INTERVAL
            };
            self.schedule(delay, ctx);
        }
    }
}

impl Actor for RestoreActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.step_unless_waiting(ctx);
    }
}

impl Handler<Due> for RestoreActor {
    type Result = ();

    fn handle(&mut self, _: Due, ctx: &mut Context<Self>) {
        self.timer = None;
        if self.running || finished(&self.restore, &self.status) {
            return;
        }
        self.running = true;
        let (kube, restore, previous, timeouts) = (
            self.kube.clone(),
            self.restore.clone(),
            self.status.clone(),
            self.timeouts,
        );
        ctx.spawn(
            async move { step(kube.as_ref(), &restore, &previous, timeouts, &now()).await }
                .into_actor(self)
                .map(|outcome, actor, ctx| actor.finish(outcome, ctx)),
        );
    }
}

impl Handler<RestoreChanged> for RestoreActor {
    type Result = ();

    fn handle(&mut self, RestoreChanged(restore): RestoreChanged, ctx: &mut Context<Self>) {
        self.restore = *restore;
        self.step_unless_waiting(ctx);
    }
}

impl Handler<Retire> for RestoreActor {
    type Result = ();

    fn handle(&mut self, _: Retire, ctx: &mut Context<Self>) {
        // A step in flight ends first (its writes are then left out), as a deleted
        // object's step always has.
        self.retired = true;
        if !self.running {
            ctx.stop();
        }
    }
}
