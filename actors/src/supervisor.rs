//! The Supervisor actor: turns the EtcdCluster watch stream into Cluster actors.
//!
//! The watcher's relist protocol is the [`Children`]'s: actors whose object is missing from
//! a relist are retired, and no Cluster actor starts before the first list is complete.
//! Cluster actors run under actix's supervisor, which restarts one that crashed.

use std::sync::Arc;

use actix::prelude::*;
use slog::{Logger, info, warn};

use crate::children::{ChildActor, Children};
use crate::cluster::{ClusterActor, ClusterConfig, ClusterDeps, Nudge, Retire, SpecChanged};
use crate::debug::ActorKind;
use crate::metrics::Telemetry;
use crate::ports::{ClusterApi, EtcdApi};
use crate::roster::WatchEvent;
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

/// What a Cluster actor is started with.
struct ActorMaker {
    wiring: Arc<dyn ClusterWiring>,
    config: ClusterConfig,
    telemetry: Telemetry,
    /// The root logger, parent of each Cluster actor's logger.
    root: Logger,
}

impl ActorMaker {
    /// Starts the Cluster actor of `cluster`, under actix's supervisor.
    fn start(&self, cluster: &Topology, spec: DesiredCluster) -> Addr<ClusterActor> {
        let deps = ClusterDeps {
            kube: self.wiring.cluster_api(cluster),
            etcd: self.wiring.etcd_api(cluster),
            telemetry: self.telemetry.clone(),
            logger: self.root.clone(),
        };
        let (config, key) = (self.config, cluster.clone());
        actix::Supervisor::start(move |_| ClusterActor::new(key, spec, config, deps))
    }
}

/// Owns one Cluster actor per EtcdCluster.
pub struct Supervisor {
    maker: ActorMaker,
    /// The supervisor's own logger.
    logger: Logger,
    /// One Cluster actor per EtcdCluster of the watch.
    clusters: Children<Topology, ClusterActor>,
}

impl ChildActor for ClusterActor {
    type Spec = DesiredCluster;

    fn changed(addr: &Addr<Self>, spec: DesiredCluster) {
        addr.do_send(SpecChanged(spec));
    }

    fn retire(addr: &Addr<Self>) {
        addr.do_send(Retire);
    }
}

impl Supervisor {
    /// A Supervisor that wires Cluster actors with `wiring`.
    pub fn new(
        wiring: Arc<dyn ClusterWiring>,
        config: ClusterConfig,
        telemetry: Telemetry,
        logger: &Logger,
    ) -> Self {
        let own = logger.new(slog::o!("actor" => "supervisor"));
        Supervisor {
            maker: ActorMaker {
                wiring,
                config,
                telemetry,
                root: logger.clone(),
            },
            clusters: Children::new("cluster", &own),
            logger: own,
        }
    }

    fn publish_view(&self) {
        let clusters: Vec<String> = self.clusters.keys().map(Topology::key).collect();
        self.maker.telemetry.hub.set_state(
            ActorKind::Supervisor,
            "supervisor",
            serde_json::json!({
                "synced": self.clusters.synced(),
                "relisting": self.clusters.relisting(),
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
        let (synced, relisting) = (self.clusters.synced(), self.clusters.relisting());
        let maker = &self.maker;
        let changed = self
            .clusters
            .on(event, |cluster, spec| maker.start(cluster, spec));
        if relist_done {
            if !synced {
                info!(self.logger, "first list complete"; "clusters" => self.clusters.len());
            }
            self.maker.telemetry.hub.set_synced();
        }
        let moved = (synced, relisting) != (self.clusters.synced(), self.clusters.relisting());
        if relist_done || changed || moved {
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
