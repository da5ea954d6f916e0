//! The Supervisor actor: turns the EtcdCluster watch stream into Cluster actors.
//!
//! The watcher's relist protocol is the [`Roster`]'s: actors whose object is missing from
//! a relist are retired, and no Cluster actor starts before the first list is complete.
//! Cluster actors run under actix's supervisor, which restarts one that crashed.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::prelude::*;
use slog::{Logger, info, warn};

use crate::cluster::{ClusterActor, ClusterConfig, ClusterDeps, Nudge, Retire, SpecChanged};
use crate::debug::ActorKind;
use crate::metrics::Telemetry;
use crate::ports::{ClusterApi, EtcdApi};
use crate::roster::{Change, Roster, WatchEvent};
use etcd_operator_core::lifecycle::DesiredCluster;
use etcd_operator_core::topology::Topology;

/// One event of the EtcdCluster watch stream, already reduced to what actors need.
pub type ClusterEvent = WatchEvent<Topology, DesiredCluster>;

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
    /// Which EtcdClusters exist, from the watch.
    roster: Roster<Topology, DesiredCluster>,
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
            roster: Roster::default(),
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
                "synced": self.roster.synced(),
                "relisting": self.roster.relisting(),
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

impl Handler<ClusterEvent> for Supervisor {
    type Result = ();

    fn handle(&mut self, event: ClusterEvent, _: &mut Context<Self>) {
        // The view lists every cluster: rebuild it only when it changes, not on every
        // event (with N clusters a relist would otherwise cost O(N²)).
        let relist_done = matches!(event, WatchEvent::RelistDone);
        let synced = self.roster.synced();
        let before = (self.clusters.len(), synced, self.roster.relisting());
        for change in self.roster.on(event) {
            match change {
                Change::Apply(cluster, spec) => self.upsert(cluster, spec),
                Change::Retire(cluster) => self.retire(&cluster),
                Change::BeforeFirstList(cluster) => {
                    warn!(self.logger, "ignoring an event that came before the first list";
                        "cluster" => cluster.key());
                }
            }
        }
        if relist_done {
            if !synced {
                info!(self.logger, "first list complete"; "clusters" => self.clusters.len());
            }
            self.telemetry.hub.set_synced();
        }
        let after = (
            self.clusters.len(),
            self.roster.synced(),
            self.roster.relisting(),
        );
        if relist_done || before != after {
            self.publish_view();
        }
    }
}

impl StreamHandler<ClusterEvent> for Supervisor {
    fn handle(&mut self, event: ClusterEvent, ctx: &mut Context<Self>) {
        <Self as Handler<ClusterEvent>>::handle(self, event, ctx);
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
