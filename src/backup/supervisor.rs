//! The Backup supervisor: turns the EtcdBackup watch stream into Backup actors, one per
//! object, with the watcher's relist protocol of the [`Roster`].

use std::collections::BTreeMap;

use actix::prelude::*;
use etcd_operator_actors::roster::{Change, Roster, WatchEvent};
use slog::{Logger, info, warn};

use crate::api::backup::EtcdBackup;

use super::actor::{BackupActor, BackupChanged, BackupDeps, Retire};

/// One event of the EtcdBackup watch stream, by `namespace/name`.
pub type BackupEvent = WatchEvent<String, Box<EtcdBackup>>;

/// Owns one Backup actor per EtcdBackup.
pub struct BackupSupervisor {
    deps: BackupDeps,
    actors: BTreeMap<String, Addr<BackupActor>>,
    roster: Roster<String, Box<EtcdBackup>>,
    log: Logger,
}

impl BackupSupervisor {
    /// A supervisor with no actors yet.
    pub fn new(deps: BackupDeps, log: &Logger) -> Self {
        BackupSupervisor {
            deps,
            actors: BTreeMap::new(),
            roster: Roster::default(),
            log: log.new(slog::o!("actor" => "backup-supervisor")),
        }
    }

    fn apply(&mut self, key: String, backup: Box<EtcdBackup>) {
        match self.actors.get(&key).filter(|a| a.connected()) {
            Some(actor) => actor.do_send(BackupChanged(backup)),
            None => {
                info!(self.log, "starting a Backup actor"; "backup" => &key);
                let actor = BackupActor::new(*backup, self.deps.clone(), &self.log).start();
                self.actors.insert(key, actor);
            }
        }
    }

    fn retire(&mut self, key: &str) {
        if let Some(actor) = self.actors.remove(key) {
            info!(self.log, "retiring a Backup actor"; "backup" => key);
            actor.do_send(Retire);
        }
    }
}

impl Actor for BackupSupervisor {
    type Context = Context<Self>;
}

impl StreamHandler<BackupEvent> for BackupSupervisor {
    fn handle(&mut self, event: BackupEvent, _: &mut Context<Self>) {
        for change in self.roster.on(event) {
            match change {
                Change::Apply(key, backup) => self.apply(key, backup),
                Change::Retire(key) => self.retire(&key),
                Change::BeforeFirstList(key) => {
                    warn!(self.log, "ignoring an event that came before the first list";
                        "backup" => key);
                }
            }
        }
    }
}
