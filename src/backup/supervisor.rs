//! The Backup supervisor: turns the EtcdBackup watch stream into Backup actors, one per
//! object, with the relist protocol of [`Children`].

use actix::prelude::*;
use etcd_operator_actors::children::{ChildActor, Children};
use etcd_operator_actors::roster::WatchEvent;
use slog::Logger;

use crate::api::backup::EtcdBackup;

use super::actor::{BackupActor, BackupChanged, BackupDeps, Retire};

/// One event of the EtcdBackup watch stream, by `namespace/name`.
pub type BackupEvent = WatchEvent<String, Box<EtcdBackup>>;

impl ChildActor for BackupActor {
    type Spec = Box<EtcdBackup>;

    fn changed(addr: &Addr<Self>, backup: Box<EtcdBackup>) {
        addr.do_send(BackupChanged(backup));
    }

    fn retire(addr: &Addr<Self>) {
        addr.do_send(Retire);
    }
}

/// Owns one Backup actor per EtcdBackup.
pub struct BackupSupervisor {
    deps: BackupDeps,
    backups: Children<String, BackupActor>,
    log: Logger,
}

impl BackupSupervisor {
    /// A supervisor with no actors yet.
    pub fn new(deps: BackupDeps, log: &Logger) -> Self {
        let log = log.new(slog::o!("actor" => "backup-supervisor"));
        BackupSupervisor {
            deps,
            backups: Children::new("backup", &log),
            log,
        }
    }
}

impl Actor for BackupSupervisor {
    type Context = Context<Self>;
}

impl StreamHandler<BackupEvent> for BackupSupervisor {
    fn handle(&mut self, event: BackupEvent, _: &mut Context<Self>) {
        let (deps, log) = (&self.deps, &self.log);
        self.backups.on(event, |_, backup| {
            BackupActor::new(*backup, deps.clone(), log).start()
        });
    }
}
