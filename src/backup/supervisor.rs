//! The Backup supervisor: turns the EtcdBackup watch stream into Backup actors, one per
//! object, with the watcher's relist semantics (an object missing from a relist is gone).

use std::collections::{BTreeMap, BTreeSet};

use actix::prelude::*;
use kube::ResourceExt;
use slog::{Logger, info};

use crate::api::backup::EtcdBackup;

use super::actor::{BackupActor, BackupChanged, BackupDeps, Retire};

/// One event of the EtcdBackup watch stream.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum BackupEvent {
    /// A full (re)list begins.
    RelistStarted,
    /// An object of the list.
    Relisted(Box<EtcdBackup>),
    /// The list is complete: objects not listed are gone.
    RelistDone,
    /// An object was created or changed.
    Applied(Box<EtcdBackup>),
    /// An object was deleted.
    Deleted(Box<EtcdBackup>),
}

impl From<kube::runtime::watcher::Event<EtcdBackup>> for BackupEvent {
    fn from(event: kube::runtime::watcher::Event<EtcdBackup>) -> Self {
        use kube::runtime::watcher::Event;
        match event {
            Event::Init => BackupEvent::RelistStarted,
            Event::InitApply(b) => BackupEvent::Relisted(Box::new(b)),
            Event::InitDone => BackupEvent::RelistDone,
            Event::Apply(b) => BackupEvent::Applied(Box::new(b)),
            Event::Delete(b) => BackupEvent::Deleted(Box::new(b)),
        }
    }
}

fn key(backup: &EtcdBackup) -> String {
    format!(
        "{}/{}",
        backup.namespace().unwrap_or_default(),
        backup.name_any()
    )
}

/// Owns one Backup actor per EtcdBackup.
pub struct BackupSupervisor {
    deps: BackupDeps,
    actors: BTreeMap<String, Addr<BackupActor>>,
    relist: Option<BTreeSet<String>>,
    log: Logger,
}

impl BackupSupervisor {
    /// A supervisor with no actors yet.
    pub fn new(deps: BackupDeps, log: &Logger) -> Self {
        BackupSupervisor {
            deps,
            actors: BTreeMap::new(),
            relist: None,
            log: log.new(slog::o!("actor" => "backup-supervisor")),
        }
    }

    fn apply(&mut self, backup: EtcdBackup) {
        let key = key(&backup);
        if let Some(relist) = &mut self.relist {
            relist.insert(key.clone());
        }
        match self.actors.get(&key).filter(|a| a.connected()) {
            Some(actor) => actor.do_send(BackupChanged(Box::new(backup))),
            None => {
                info!(self.log, "starting a Backup actor"; "backup" => &key);
                let actor = BackupActor::new(backup, self.deps.clone(), &self.log).start();
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
        match event {
            BackupEvent::RelistStarted => self.relist = Some(BTreeSet::new()),
            BackupEvent::Relisted(b) | BackupEvent::Applied(b) => self.apply(*b),
            BackupEvent::RelistDone => {
                let listed = self.relist.take().unwrap_or_default();
                let gone: Vec<String> = self
                    .actors
                    .keys()
                    .filter(|k| !listed.contains(*k))
                    .cloned()
                    .collect();
                for key in gone {
                    self.retire(&key);
                }
            }
            BackupEvent::Deleted(b) => self.retire(&key(&b)),
        }
    }
}
