//! Voluntary disruptions: each cluster's PodDisruptionBudget allows evictions (what
//! `kubectl drain` does) only while a quorum of voters stays, and follows its size; a
//! drain of one node waits while a member on another node is down, and no member on an
//! emptyDir is evicted while every member is unready.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::support::*;

/// Waits until the cluster's budget has `min_available` and the disruption controller
/// counts `healthy` of its pods; returns the budget.
async fn wait_budget(
    ns: &str,
    name: &str,
    min_available: i32,
    healthy: i32,
) -> PodDisruptionBudget {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client().await, ns);
    let what =
        format!("PodDisruptionBudget {name}: minAvailable {min_available}, {healthy} healthy");
    wait_for(&what, Duration::from_secs(120), || {
        let api = api.clone();
        async move {
            let budget = api.get(name).await.map_err(|e| e.to_string())?;
            let spec = budget.spec.clone().unwrap_or_default();
            let status = budget.status.clone().unwrap_or_default();
            let min = match spec.min_available {
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => n,
                other => return Err(format!("minAvailable {other:?}")),
            };
            if min == min_available && status.current_healthy == healthy {
                Ok(budget)
            } else {
                Err(format!("minAvailable {min}, status {status:?}"))
            }
        }
    })
    .await
}

/// Waits until the budget `name`, processed at its current generation, has a status
/// that `holds`.
async fn wait_budget_status(
    ns: &str,
    name: &str,
    what: &str,
    holds: impl Fn(&PodDisruptionBudgetStatus) -> bool,
) {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client().await, ns);
    let what = format!("PodDisruptionBudget {name}: {what}");
    let holds = &holds;
    wait_for(&what, Duration::from_secs(60), || {
        let api = api.clone();
        async move {
            let budget = api.get(name).await.map_err(|e| e.to_string())?;
            let status = budget.status.clone().unwrap_or_default();
            let current = status.observed_generation == budget.metadata.generation;
            match current && holds(&status) {
                true => Ok(()),
                false => Err(format!("spec {:?}, status {status:?}", budget.spec)),
            }
        }
    })
    .await;
}

/// Waits until the budget `name` allows no disruption: right after a member went down,
/// the operator's raised `minAvailable` (all three pods still counted ready), or the
/// quorum once the dead pod is marked not ready.
async fn wait_no_disruption_allowed(ns: &str, name: &str) {
    wait_budget_status(ns, name, "no disruption allowed", |s| {
        s.disruptions_allowed == 0
    })
    .await;
}

/// Evicts pod `name` as `kubectl drain` does: a `policy/v1` Eviction posted to its
/// `eviction` subresource.
async fn evict(pods: &Api<Pod>, ns: &str, name: &str) -> Result<serde_json::Value, kube::Error> {
    let eviction = Eviction {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            ..Default::default()
        },
        delete_options: None,
    };
    pods.create_subresource("eviction", name, &PostParams::default(), &eviction)
        .await
}

/// Waits until member `gone` has left the ready members of cluster `name` (right after an
/// eviction or a drain the status may still list it), then until the cluster runs with 3
/// ready members again; their names.
async fn replaced(ns: &str, name: &str, gone: &str) -> Vec<String> {
    let what = format!("{gone} gone from the ready members");
    wait_status(ns, name, &what, Duration::from_secs(180), |s| {
        !s.members.ready.iter().any(|m| m == gone)
    })
    .await;
    wait_running(ns, name, 3, Duration::from_secs(180)).await
}

#[tokio::test]
async fn the_budget_lets_one_of_three_voters_be_evicted_and_follows_the_size() {
    let ns = Namespace::create("disruption");
    apply(&cluster_yaml(&ns.0, "budgeted", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "budgeted", 3, Duration::from_secs(120)).await;
    let mut client_etcd = etcd(&ns.0, &ready).await;
    write_keys(&mut client_etcd, "budget", 100).await;
    // The real disruption controller's arithmetic: 3 healthy voters, 2 needed, so one
    // may go and no more.
    let budget = wait_budget(&ns.0, "budgeted", 2, 3).await;
    let status = budget.status.clone().unwrap_or_default();
    assert_eq!(status.disruptions_allowed, 1, "{status:?}");
    let owner = &budget.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owner
            .iter()
            .any(|o| o.kind == "EtcdCluster" && o.name == "budgeted"),
        "{owner:?}"
    );

    // One member may be evicted (as `kubectl drain` does it).
    let pods: Api<Pod> = Api::namespaced(client().await, &ns.0);
    evict(&pods, &ns.0, &ready[0])
        .await
        .expect("the first eviction is allowed");

    // The evicted member is replaced; the data is all there.
    let healed = replaced(&ns.0, "budgeted", &ready[0]).await;
    let mut client_etcd = etcd(&ns.0, &healed).await;
    assert_keys(&mut client_etcd, "budget", 100).await;

    // Five voters need three: two may go.
    patch_spec(&ns.0, "budgeted", json!({"size": 5})).await;
    wait_running(&ns.0, "budgeted", 5, Duration::from_secs(180)).await;
    wait_budget(&ns.0, "budgeted", 3, 5).await;
}

/// Drains `node` of the pods of cluster `cluster` (as `kubectl drain` does: cordon, then
/// evictions retried until `timeout`); (success, output).
fn drain(node: &str, cluster: &str, timeout: &str) -> (bool, String) {
    let selector = format!("etcd_cluster={cluster}");
    let timeout = format!("--timeout={timeout}");
    kubectl(
        &[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--pod-selector",
            &selector,
            &timeout,
        ],
        None,
    )
}

#[tokio::test]
async fn a_drain_waits_while_a_member_on_another_node_is_down_and_completes_once_it_is_back() {
    let ns = Namespace::create("drain");
    apply(&cluster_yaml(&ns.0, "drained", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "drained", 3, Duration::from_secs(120)).await;
    let nodes: std::collections::BTreeSet<String> =
        ready.iter().map(|p| node_of(&ns.0, p)).collect();
    assert_eq!(nodes.len(), 3, "the members share nodes: {nodes:?}");
    let mut client_etcd = etcd(&ns.0, &ready[..2]).await;
    write_keys(&mut client_etcd, "drain", 100).await;
    // The disruption controller counts all three pods healthy first: right after the
    // cluster is Running a pod may not count yet, and "no disruption allowed" would then
    // hold before the power cut below had any effect.
    wait_budget(&ns.0, "drained", 2, 3).await;

    // A power cut takes one member down: two voters of three are left, no eviction may go,
    // even while the node controller still counts the dead member's pod ready (the
    // operator raises the budget to 3 for that time).
    let cut = PowerCut::of(&node_of(&ns.0, &ready[2]));
    wait_no_disruption_allowed(&ns.0, "drained").await;
    let target = node_of(&ns.0, &ready[1]);
    let _uncordon = Cordoned(target.clone());
    let (ok, out) = drain(&target, "drained", "20s");
    if ok {
        let (_, pdb) = kubectl(&["get", "pdb", "-n", &ns.0, "-o", "yaml"], None);
        let (_, pods) = kubectl(&["get", "pods", "-n", &ns.0, "-o", "yaml"], None);
        panic!("the drain evicted a member while another was down: {out}\n{pdb}\n{pods}");
    }
    assert!(out.contains("disruption budget"), "{out}");
    let pods: Api<Pod> = Api::namespaced(client().await, &ns.0);
    let kept = pods
        .get(&ready[1])
        .await
        .expect("the member's pod is still there");
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "its pod is being deleted"
    );
    assert_keys(&mut client_etcd, "drain", 100).await;

    // Power back: the member restarts in place, and now the drain goes through.
    cut.restore();
    wait_budget(&ns.0, "drained", 2, 3).await;
    let (ok, out) = drain(&target, "drained", "120s");
    assert!(ok, "the drain failed with every member back: {out}");
    let drained = &ready[1];
    let healed = replaced(&ns.0, "drained", drained).await;
    assert!(
        !healed.contains(drained),
        "the drained member is back in the list: {healed:?}"
    );
    let mut client_etcd = etcd(&ns.0, &healed).await;
    assert_keys(&mut client_etcd, "drain", 100).await;
}

#[tokio::test]
async fn with_every_member_unready_no_member_on_an_empty_dir_may_be_evicted() {
    let ns = Namespace::create("unready");
    apply(&cluster_yaml(&ns.0, "stalled", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "stalled", 3, Duration::from_secs(120)).await;
    let mut client_etcd = etcd(&ns.0, &ready).await;
    write_keys(&mut client_etcd, "stalled", 50).await;
    drop(client_etcd);
    let budget = wait_budget(&ns.0, "stalled", 2, 3).await;
    let policy = budget.spec.and_then(|s| s.unhealthy_pod_eviction_policy);
    assert_eq!(policy.as_deref(), Some("IfHealthyBudget"));

    // Every etcd stopped at once (as under an alarm or with no leader): every pod goes
    // unready, while its emptyDir still holds the only copies of the data.
    let pods: Api<Pod> = Api::namespaced(client().await, &ns.0);
    let mut frozen = Vec::new();
    for name in &ready {
        frozen.push(Stopped::new(container_pid(&ns.0, name, "etcd")));
    }
    wait_budget_status(&ns.0, "stalled", "no member counted healthy", |s| {
        s.current_healthy == 0
    })
    .await;
    for name in &ready {
        // Through kubectl: the API client retries a 429 for as long as it is answered.
        let eviction = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns.0},
        });
        let path = format!("/api/v1/namespaces/{}/pods/{name}/eviction", ns.0);
        let (ok, out) = kubectl(
            &["create", "--raw", &path, "-f", "-"],
            Some(&eviction.to_string()),
        );
        assert!(
            !ok && out.contains("disruption budget"),
            "evicting unready member {name} of an emptyDir cluster: {out}"
        );
    }
    for name in &ready {
        let pod = pods
            .get(name)
            .await
            .expect("the member's pod is still there");
        assert!(
            pod.metadata.deletion_timestamp.is_none(),
            "{name} is being deleted"
        );
    }

    // Continued: the same members come back with every key.
    for stopped in &mut frozen {
        stopped.resume();
    }
    let back = wait_running(&ns.0, "stalled", 3, Duration::from_secs(120)).await;
    assert_eq!(back, ready, "the members changed");
    let mut client_etcd = etcd(&ns.0, &back).await;
    assert_keys(&mut client_etcd, "stalled", 50).await;
}
