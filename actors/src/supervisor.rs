//! The Supervisor actor: turns the EtcdCluster watch stream into Cluster actors.
//!
//! It honours the watcher's relist semantics: objects listed between
//! [`WatchEvent::RelistStarted`] and [`WatchEvent::RelistDone`] are the whole truth, so
//! actors whose object is missing from a relist are retired; and no Cluster actor starts
//! before the first list is complete. Cluster actors run under actix's supervisor, which
//! restarts one that crashed.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::prelude::*;
use slog::{Logger, info, warn};

use crate::cluster::{ClusterActor, ClusterConfig, ClusterDeps, Nudge, Retire, SpecChanged};
use crate::debug::ActorKind;
use crate::metrics::Telemetry;
use crate::ports::{ClusterApi, EtcdApi};
use etcd_operator_core::lifecycle::DesiredCluster;
use etcd_operator_core::topology::Topology;

/// One event of the EtcdCluster watch stream, already reduced to what actors need.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub enum WatchEvent {
    /// A full (re)list begins.
    RelistStarted,
    /// An object that is part of the list.
    Relisted(Topology, DesiredCluster),
    /// The list is complete: objects not listed are gone.
    RelistDone,
    /// An object was created or changed.
    Applied(Topology, DesiredCluster),
    /// An object was deleted.
    Deleted(Topology),
}

/// Builds the ports of a Cluster actor.
pub trait ClusterWiring: Send + Sync + 'static {
    /// The Kubernetes side of `cluster`.
    fn cluster_api(&self, cluster: &Topology) -> Arc<dyn ClusterApi>;
    /// The etcd side of `cluster`.
    fn etcd_api(&self, cluster: &Topology) -> Arc<dyn EtcdApi>;
}

/// Owns one Cluster actor per EtcdCluster.
pub struct Supervisor {
    wiring: Arc<dyn ClusterWiring>,
    config: ClusterConfig,
    telemetry: Telemetry,
    /// The supervisor's own logger.
    logger: Logger,
    /// The root logger, parent of each Cluster actor's logger.
    root: Logger,
    clusters: BTreeMap<Topology, Addr<ClusterActor>>,
    /// Objects of the relist in progress, if one is.
    relist: Option<BTreeMap<Topology, DesiredCluster>>,
    /// The first list has completed.
    synced: bool,
}

impl Supervisor {
    /// A Supervisor that wires Cluster actors with `wiring`.
    pub fn new(
        wiring: Arc<dyn ClusterWiring>,
        config: ClusterConfig,
        telemetry: Telemetry,
        logger: &Logger,
    ) -> Self {
        Supervisor {
            wiring,
            config,
            telemetry,
            logger: logger.new(slog::o!("actor" => "supervisor")),
            root: logger.clone(),
            clusters: BTreeMap::new(),
            relist: None,
            synced: false,
        }
    }

    fn upsert(&mut self, cluster: Topology, spec: DesiredCluster) {
        if let Some(addr) = self.clusters.get(&cluster) {
            addr.do_send(SpecChanged(spec));
            return;
        }
        info!(self.logger, "starting cluster actor"; "cluster" => cluster.key());
        let deps = ClusterDeps {
            kube: self.wiring.cluster_api(&cluster),
            etcd: self.wiring.etcd_api(&cluster),
            telemetry: self.telemetry.clone(),
            logger: self.root.clone(),
        };
        let (config, key) = (self.config, cluster.clone());
        let addr = actix::Supervisor::start(move |_| ClusterActor::new(key, spec, config, deps));
        self.clusters.insert(cluster, addr);
    }

    fn retire(&mut self, cluster: &Topology) {
        if let Some(addr) = self.clusters.remove(cluster) {
            info!(self.logger, "retiring cluster actor"; "cluster" => cluster.key());
            // Dropping the last address right after makes the stop final (no restart).
            addr.do_send(Retire);
        }
    }

    fn publish_view(&self) {
        let clusters: Vec<String> = self.clusters.keys().map(Topology::key).collect();
        self.telemetry.hub.set_state(
            ActorKind::Supervisor,
            "supervisor",
            serde_json::json!({
                "synced": self.synced,
                "relisting": self.relist.is_some(),
                "clusters": clusters,
            }),
        );
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        info!(
            self.logger,
            "supervisor started; waiting for the first list of EtcdClusters"
        );
        self.publish_view();
    }
}

impl Handler<WatchEvent> for Supervisor {
    type Result = ();

    fn handle(&mut self, event: WatchEvent, _: &mut Context<Self>) {
        // The view lists every cluster: rebuild it only when it changes, not on every
        // event (with N clusters a relist would otherwise cost O(N²)).
        let relist_done = matches!(event, WatchEvent::RelistDone);
        let before = (self.clusters.len(), self.synced, self.relist.is_some());
        match event {
            WatchEvent::RelistStarted => self.relist = Some(BTreeMap::new()),
            WatchEvent::Relisted(cluster, spec) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(cluster, spec);
            }
            WatchEvent::RelistDone => {
                let listed = self.relist.take().unwrap_or_default();
                let gone: Vec<Topology> = self
                    .clusters
                    .keys()
                    .filter(|k| !listed.contains_key(*k))
                    .cloned()
                    .collect();
                for cluster in &gone {
                    self.retire(cluster);
                }
                for (cluster, spec) in listed {
                    self.upsert(cluster, spec);
                }
                if !self.synced {
                    info!(self.logger, "first list complete"; "clusters" => self.clusters.len());
                }
                self.synced = true;
                self.telemetry.hub.set_synced();
            }
            WatchEvent::Applied(cluster, spec) => match (&mut self.relist, self.synced) {
                (Some(pending), _) => {
                    pending.insert(cluster, spec);
                }
                (None, true) => self.upsert(cluster, spec),
                (None, false) => {
                    warn!(self.logger, "ignoring an event that came before the first list";
                        "cluster" => cluster.key());
                }
            },
            WatchEvent::Deleted(cluster) => {
                if let Some(pending) = &mut self.relist {
                    pending.remove(&cluster);
                }
                self.retire(&cluster);
            }
        }
        if relist_done || before != (self.clusters.len(), self.synced, self.relist.is_some()) {
            self.publish_view();
        }
    }
}

impl StreamHandler<WatchEvent> for Supervisor {
    fn handle(&mut self, event: WatchEvent, ctx: &mut Context<Self>) {
        <Self as Handler<WatchEvent>>::handle(self, event, ctx);
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        warn!(self.logger, "the EtcdCluster watch stream ended");
    }
}

/// One of a cluster's pods changed: its Cluster actor should look now.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct PodChanged(pub Topology);

impl Handler<PodChanged> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: PodChanged, _: &mut Context<Self>) {
        if let Some(addr) = self.clusters.get(&msg.0) {
            addr.do_send(Nudge);
        }
    }
}

impl StreamHandler<PodChanged> for Supervisor {
    fn handle(&mut self, msg: PodChanged, ctx: &mut Context<Self>) {
        <Self as Handler<PodChanged>>::handle(self, msg, ctx);
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        warn!(self.logger, "the pod watch stream ended");
    }
}

/// Asks the Supervisor which clusters it runs (for tests and the debug view).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<String>")]
pub struct ListClusters;

impl Handler<ListClusters> for Supervisor {
    type Result = MessageResult<ListClusters>;

    fn handle(&mut self, _: ListClusters, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.clusters.keys().map(Topology::key).collect())
    }
}
