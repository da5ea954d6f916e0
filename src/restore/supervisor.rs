//! The Restore supervisor: turns the EtcdRestore watch stream into Restore actors, one per
//! object, with the relist protocol of [`Children`].

use std::sync::Arc;

use actix::prelude::*;
use etcd_operator_actors::children::{ChildActor, Children};
use etcd_operator_actors::roster::WatchEvent;
use slog::Logger;

use crate::api::restore::EtcdRestore;
use crate::backup::store::StoreTimeouts;

use super::actor::{RestoreActor, RestoreChanged, Retire};
use super::port::RestoreKube;

/// One event of the EtcdRestore watch stream, by `namespace/name`.
pub type RestoreEvent = WatchEvent<String, Box<EtcdRestore>>;

impl ChildActor for RestoreActor {
    type Spec = Box<EtcdRestore>;

    fn changed(addr: &Addr<Self>, restore: Box<EtcdRestore>) {
        addr.do_send(RestoreChanged(restore));
    }

    fn retire(addr: &Addr<Self>) {
        addr.do_send(Retire);
    }
}

/// Owns one Restore actor per EtcdRestore.
pub struct RestoreSupervisor {
    kube: Arc<dyn RestoreKube>,
    timeouts: StoreTimeouts,
    restores: Children<String, RestoreActor>,
    log: Logger,
}

impl RestoreSupervisor {
    /// A supervisor with no actors yet.
    pub fn new(kube: Arc<dyn RestoreKube>, timeouts: StoreTimeouts, log: &Logger) -> Self {
        let log = log.new(slog::o!("actor" => "restores"));
        RestoreSupervisor {
            kube,
            timeouts,
            restores: Children::new("restore", &log),
            log,
        }
    }
}

impl Actor for RestoreSupervisor {
    type Context = Context<Self>;
}

impl StreamHandler<RestoreEvent> for RestoreSupervisor {
    fn handle(&mut self, event: RestoreEvent, _: &mut Context<Self>) {
        let (kube, timeouts, log) = (&self.kube, self.timeouts, &self.log);
        self.restores.on(event, |key, restore| {
            RestoreActor::new(*restore, key, kube.clone(), timeouts, log).start()
        });
    }
}
