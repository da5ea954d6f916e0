//! The Supervisor: watch events to Cluster actors, with the fake wiring, in virtual time.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use etcd_operator_actors::cluster::ClusterConfig;
use etcd_operator_actors::debug::ActorKind;
use etcd_operator_actors::metrics::Telemetry;
use etcd_operator_actors::ports::InitialState;
use etcd_operator_actors::roster::WatchEvent;
use etcd_operator_actors::supervisor::{ClusterEvent, ListClusters, Supervisor};
use etcd_operator_core::lifecycle::DesiredCluster;
use etcd_operator_core::topology::Topology;
use etcd_operator_fakes::{FakeCluster, FakeWiring};
use serde_json::Value;
use slog::{Logger, o};

const V: &str = "3.5.21";

struct Harness {
    supervisor: Addr<Supervisor>,
    wiring: Arc<FakeWiring>,
    telemetry: Telemetry,
}

fn cluster(name: &str) -> Topology {
    Topology::new("default", name)
}

fn spec(size: u32) -> DesiredCluster {
    DesiredCluster::new(size, V)
}

fn harness() -> Harness {
    tokio::time::pause();
    let wiring = Arc::new(FakeWiring::new());
    let telemetry = Telemetry::default();
    let supervisor = Supervisor::new(
        wiring.clone(),
        ClusterConfig::default(),
        telemetry.clone(),
        &Logger::root(slog::Discard, o!()),
    )
    .start();
    Harness {
        supervisor,
        wiring,
        telemetry,
    }
}

impl Harness {
    async fn send(&self, event: ClusterEvent) {
        self.supervisor.send(event).await.expect("supervisor alive");
    }

    async fn clusters(&self) -> Vec<String> {
        self.supervisor
            .send(ListClusters)
            .await
            .expect("supervisor alive")
    }

    /// The debug view the Cluster actor of `c` published last, if it runs.
    fn view(&self, c: &Topology) -> Option<Value> {
        self.telemetry
            .hub
            .snapshot()
            .into_iter()
            .find(|s| s.kind == ActorKind::Cluster && s.key == c.key())
            .map(|s| s.state)
    }

    /// The cluster keys the Supervisor's published debug view lists.
    fn listed_in_view(&self) -> Value {
        self.telemetry
            .hub
            .snapshot()
            .into_iter()
            .find(|s| s.kind == ActorKind::Supervisor)
            .map(|s| s.state["clusters"].clone())
            .expect("the supervisor publishes a view")
    }

    fn alive(&self) -> i64 {
        self.telemetry.metrics.clusters.get()
    }

    /// Waits, in virtual time, until `done`; gives up after ten virtual minutes.
    async fn until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        for _ in 0..6_000 {
            if done(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "never reached: {what}\nactors: {:#?}",
            self.telemetry.hub.snapshot()
        );
    }

    /// `c`'s fake is converged to `size` members and its actor reported Running.
    fn running(&self, c: &Topology, size: usize) -> bool {
        self.wiring.cluster(c).is_converged(size, V)
            && self.view(c).is_some_and(|v| {
                v["status"]["phase"] == "Running"
                    && v["status"]["ready"].as_array().map(Vec::len) == Some(size)
            })
    }
}

#[actix_rt::test]
async fn no_cluster_actor_starts_before_the_first_list_is_complete() {
    let h = harness();
    let (a, b) = (cluster("a"), cluster("b"));

    h.send(WatchEvent::Applied(b.clone(), spec(1))).await;
    h.send(WatchEvent::RelistStarted).await;
    h.send(WatchEvent::Relisted(a.clone(), spec(1))).await;
    tokio::time::sleep(Duration::from_secs(30)).await;

    assert!(h.clusters().await.is_empty());
    assert_eq!(h.wiring.cluster(&a).calls().observe, 0);
    assert!(!h.telemetry.hub.is_synced());

    h.send(WatchEvent::RelistDone).await;

    assert_eq!(h.clusters().await, ["default/a"]);
    assert!(h.telemetry.hub.is_synced());
    h.until("a runs", |h| h.running(&a, 1)).await;
    assert_eq!(
        h.wiring.cluster(&b).calls().observe,
        0,
        "an event before the first list is ignored"
    );
}

#[actix_rt::test]
async fn a_relist_without_an_object_retires_its_actor() {
    let h = harness();
    let (a, b) = (cluster("a"), cluster("b"));
    h.send(WatchEvent::RelistStarted).await;
    h.send(WatchEvent::Relisted(a.clone(), spec(1))).await;
    h.send(WatchEvent::Relisted(b.clone(), spec(1))).await;
    h.send(WatchEvent::RelistDone).await;
    h.until("a and b run", |h| h.running(&a, 1) && h.running(&b, 1))
        .await;
    assert_eq!(h.alive(), 2);

    h.send(WatchEvent::RelistStarted).await;
    h.send(WatchEvent::Relisted(a.clone(), spec(1))).await;
    assert_eq!(h.clusters().await.len(), 2, "nothing retires mid-relist");
    h.send(WatchEvent::RelistDone).await;

    assert_eq!(h.clusters().await, ["default/a"]);
    assert_eq!(h.listed_in_view(), serde_json::json!(["default/a"]));
    h.until("b's actor stopped", |h| {
        h.alive() == 1 && h.view(&b).is_none()
    })
    .await;
    let observed = h.wiring.cluster(&b).calls().observe;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        h.wiring.cluster(&b).calls().observe,
        observed,
        "b is no longer ticked"
    );
    assert!(h.view(&a).is_some());
}

#[actix_rt::test]
async fn a_deleted_cluster_retires_its_actor_for_good() {
    let h = harness();
    let a = cluster("a");
    h.send(WatchEvent::RelistStarted).await;
    h.send(WatchEvent::Relisted(a.clone(), spec(1))).await;
    h.send(WatchEvent::RelistDone).await;
    h.until("a runs", |h| h.running(&a, 1)).await;

    h.send(WatchEvent::Deleted(a.clone())).await;

    assert!(h.clusters().await.is_empty());
    assert_eq!(h.listed_in_view(), serde_json::json!([]));
    h.until("a's actor stopped", |h| {
        h.alive() == 0 && h.view(&a).is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.alive(), 0, "a retired actor is not restarted");
    assert_eq!(h.telemetry.metrics.restarts.get(), 0);
}

#[actix_rt::test]
async fn applied_after_the_first_list_starts_an_actor_then_forwards_spec_changes_to_it() {
    let h = harness();
    let a = cluster("a");
    h.send(WatchEvent::RelistStarted).await;
    h.send(WatchEvent::RelistDone).await;
    assert!(h.clusters().await.is_empty());

    h.send(WatchEvent::Applied(a.clone(), spec(1))).await;
    assert_eq!(h.clusters().await, ["default/a"]);
    assert_eq!(h.listed_in_view(), serde_json::json!(["default/a"]));
    h.until("a runs with 1 member", |h| h.running(&a, 1)).await;

    h.send(WatchEvent::Applied(a.clone(), spec(3))).await;
    h.until("a runs with 3 members", |h| h.running(&a, 3)).await;

    assert_eq!(h.alive(), 1, "the same actor took the new spec");
    let seeds = h
        .wiring
        .cluster(&a)
        .created_pods()
        .into_iter()
        .filter(|p| matches!(p.state, InitialState::New { .. }))
        .count();
    assert_eq!(seeds, 1);
}

#[actix_rt::test]
async fn a_panicking_tick_restarts_the_actor_which_still_converges() {
    let h = harness();
    let a = cluster("a");
    let fake = FakeCluster::new(a.clone());
    fake.panic_on_next_observe();
    h.wiring.insert(fake.clone());

    h.send(WatchEvent::RelistStarted).await;
    h.send(WatchEvent::Relisted(a.clone(), spec(3))).await;
    h.send(WatchEvent::RelistDone).await;

    h.until("a restarted", |h| h.telemetry.metrics.restarts.get() == 1)
        .await;
    h.until("a runs with 3 members", |h| h.running(&a, 3)).await;
    assert_eq!(h.telemetry.metrics.restarts.get(), 1);
    assert_eq!(h.alive(), 1, "the restarted actor counts once");
    assert_eq!(h.clusters().await, ["default/a"]);
    assert_eq!(fake.calls().max_membership_in_flight, 1);
}

#[actix_rt::test]
async fn an_annotation_asking_for_something_wakes_an_idle_actor_at_once() {
    let h = harness();
    let a = cluster("a");
    h.send(WatchEvent::RelistStarted).await;
    h.send(WatchEvent::RelistDone).await;
    h.send(WatchEvent::Applied(a.clone(), spec(1))).await;
    h.until("a runs with 1 member", |h| h.running(&a, 1)).await;
    tokio::time::sleep(Duration::from_secs(600)).await;

    for (i, (rotate_ca, recover)) in [(Some("first"), None), (Some("first"), Some("FromBackup"))]
        .into_iter()
        .enumerate()
    {
        let observed = h.wiring.cluster(&a).calls().observe;
        let mut annotated = spec(1);
        annotated.requests.rotate_ca = rotate_ca.map(str::to_string);
        annotated.requests.recover = recover.map(str::to_string);
        h.send(WatchEvent::Applied(a.clone(), annotated)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            h.wiring.cluster(&a).calls().observe > observed,
            "change {i} of an annotation made no tick within 100 ms"
        );
    }

    // The same object applied again (a resync) does not wake it.
    let observed = h.wiring.cluster(&a).calls().observe;
    let mut same = spec(1);
    same.requests.rotate_ca = Some("first".into());
    same.requests.recover = Some("FromBackup".into());
    h.send(WatchEvent::Applied(a.clone(), same)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.wiring.cluster(&a).calls().observe, observed);
}
