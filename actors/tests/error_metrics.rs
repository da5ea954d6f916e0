//! Failed port calls counted by kind, under the names Prometheus scrapes.

use std::sync::Arc;

use etcd_operator_actors::metrics::{CountedClusterApi, CountedEtcdApi, Metrics};
use etcd_operator_actors::ports::{ClusterApi, EtcdApi};
use etcd_operator_core::lifecycle::TlsMode;
use etcd_operator_core::topology::Topology;
use etcd_operator_fakes::FakeCluster;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

fn scrape(metrics: &Metrics) -> String {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    encode(&mut text, &registry).expect("metrics encode");
    text
}

#[tokio::test]
async fn failed_calls_of_either_port_are_counted_by_kind_and_successes_are_not() {
    let topology = Topology::new("default", "demo");
    let fake = FakeCluster::running(topology.clone(), 1, "3.5.21");
    let metrics = Metrics::default();
    let kube = CountedClusterApi::new(Arc::new(fake.clone()), metrics.clone());
    let etcd = CountedEtcdApi::new(Arc::new(fake.clone()), metrics.clone());
    let endpoints = vec![topology.client_url("demo-m0", TlsMode::Off)];

    kube.label_voter("demo-m0").await.expect("the pod exists");
    kube.label_voter("demo-gone")
        .await
        .expect_err("no such pod");
    kube.label_voter("demo-gone")
        .await
        .expect_err("no such pod");
    etcd.list(&endpoints).await.expect("the member answers");
    etcd.remove(&endpoints, 999)
        .await
        .expect_err("no such member");
    let nobody = vec![topology.client_url("demo-nobody", TlsMode::Off)];
    etcd.list(&nobody).await.expect_err("nobody answers");

    let text = scrape(&metrics);
    for line in [
        "etcd_operator_api_errors_total{kind=\"not_found\"} 2",
        "etcd_operator_etcd_errors_total{kind=\"member_not_found\"} 1",
        "etcd_operator_etcd_errors_total{kind=\"unavailable\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    let counted = text
        .lines()
        .filter(|l| l.starts_with("etcd_operator_api_errors_total{"))
        .count()
        + text
            .lines()
            .filter(|l| l.starts_with("etcd_operator_etcd_errors_total{"))
            .count();
    assert_eq!(counted, 3, "a success was counted:\n{text}");
}
