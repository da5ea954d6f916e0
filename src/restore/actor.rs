//! The Restore actor: one for every EtcdRestore of the watch, run on the leader. Each
//! restore moves by steps ([`step`]): one at a time per object, the next after
//! [`FOLLOW_INTERVAL`] while its cluster comes up, or after a growing delay when a step
//! failed for a reason that may pass (a store or Secret not reachable now). A restore
//! that succeeded, or was refused for its current spec, takes no more steps; what it did
//! is in its status, so a restarted operator picks up where it stood.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use etcd_operator_actors::roster::{Change, Roster, WatchEvent};
use slog::{Logger, info, warn};

use crate::api::restore::{EtcdRestore, EtcdRestoreStatus};
use crate::backup::store::StoreTimeouts;

use super::kube::RestoreKube;
use super::run::{FOLLOW_INTERVAL, StepOutcome, finished, step};

/// First delay after a failed step; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Longest delay between retries.
const MAX_RETRY: Duration = Duration::from_secs(300);

/// One event of the EtcdRestore watch stream, by `namespace/name`.
pub type RestoreEvent = WatchEvent<String, Box<EtcdRestore>>;

/// Time to take a step for one restore.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Due(String);

struct Entry {
    restore: EtcdRestore,
    status: EtcdRestoreStatus,
    running: bool,
    failures: u32,
    timer: Option<SpawnHandle>,
}

/// Runs every EtcdRestore.
pub struct RestoreActor {
    kube: Arc<dyn RestoreKube>,
    timeouts: StoreTimeouts,
    entries: BTreeMap<String, Entry>,
    roster: Roster<String, Box<EtcdRestore>>,
    log: Logger,
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

impl RestoreActor {
    /// An actor with no restores yet.
    pub fn new(kube: Arc<dyn RestoreKube>, timeouts: StoreTimeouts, log: &Logger) -> Self {
        RestoreActor {
            kube,
            timeouts,
            entries: BTreeMap::new(),
            roster: Roster::default(),
            log: log.new(slog::o!("actor" => "restores")),
        }
    }

    fn apply(&mut self, key: String, restore: EtcdRestore, ctx: &mut Context<Self>) {
        let entry = self.entries.entry(key.clone()).or_insert_with(|| Entry {
            status: restore.status.clone().unwrap_or_default(),
            restore: restore.clone(),
            running: false,
            failures: 0,
            timer: None,
        });
        entry.restore = restore;
        if !entry.running && entry.timer.is_none() && !finished(&entry.restore, &entry.status) {
            self.schedule(&key, Duration::ZERO, ctx);
        }
    }

    fn schedule(&mut self, key: &str, after: Duration, ctx: &mut Context<Self>) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        if let Some(timer) = entry.timer.take() {
            ctx.cancel_future(timer);
        }
        let due = Due(key.to_string());
        entry.timer = Some(ctx.notify_later(due, after));
    }

    fn finish(&mut self, key: &str, outcome: StepOutcome, ctx: &mut Context<Self>) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        entry.running = false;
        let failed = outcome.status.phase == "Failed";
        entry.failures = if failed { entry.failures + 1 } else { 0 };
        let changed = outcome.status != entry.status;
        let (kube, restore, log) = (self.kube.clone(), entry.restore.clone(), self.log.clone());
        let (status, event) = (outcome.status.clone(), outcome.event.clone());
        info!(self.log, "restore step"; "restore" => key, "phase" => &status.phase,
              "reason" => &status.reason, "message" => &status.message);
        entry.status = outcome.status;
        let shift = entry.failures.saturating_sub(1).min(6);
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
            self.schedule(key, delay, ctx);
        }
    }
}

impl Actor for RestoreActor {
    type Context = Context<Self>;
}

impl Handler<Due> for RestoreActor {
    type Result = ();

    fn handle(&mut self, Due(key): Due, ctx: &mut Context<Self>) {
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        entry.timer = None;
        if entry.running || finished(&entry.restore, &entry.status) {
            return;
        }
        entry.running = true;
        let (kube, restore, previous, timeouts) = (
            self.kube.clone(),
            entry.restore.clone(),
            entry.status.clone(),
            self.timeouts,
        );
        ctx.spawn(
            async move { step(kube.as_ref(), &restore, &previous, timeouts, &now()).await }
                .into_actor(self)
                .map(move |outcome, actor, ctx| actor.finish(&key, outcome, ctx)),
        );
    }
}

impl StreamHandler<RestoreEvent> for RestoreActor {
    fn handle(&mut self, event: RestoreEvent, ctx: &mut Context<Self>) {
        for change in self.roster.on(event) {
            match change {
                Change::Apply(key, restore) => self.apply(key, *restore, ctx),
                Change::Retire(key) => {
                    self.entries.remove(&key);
                }
                Change::BeforeFirstList(key) => {
                    warn!(self.log, "ignoring an event that came before the first list";
                        "restore" => key);
                }
            }
        }
    }
}
