//! Members on PersistentVolumeClaims (`spec.pod.persistentVolumeClaimSpec`, the local
//! environment's `local-path` class): a member's identity is its volume. Its pod can go
//! (deleted, all at once) and it comes back under its own name and member ID with its
//! data; only a member whose claim is gone is replaced.

use std::time::Duration;

use etcd_client::{Client as Etcd, ConnectOptions};

use crate::support::*;

/// A cluster of `size` members, each on a 1Gi claim of the default StorageClass.
pub(crate) fn claimed_cluster_yaml(ns: &str, name: &str, size: u32) -> String {
    format!(
        "{}  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      \
         resources:\n        requests:\n          storage: 1Gi\n",
        cluster_yaml(ns, name, size, "3.5.35", false)
    )
}

/// What must not change while members come back on their volumes.
pub(crate) struct Identity {
    members: Vec<(u64, String, bool)>,
    cluster_id: u64,
    added: Vec<String>,
}

/// Applies a claimed cluster, waits until it runs, writes 1,000 keys; its identity and
/// ready members.
pub(crate) async fn claimed_running(ns: &str, name: &str, size: u32) -> (Identity, Vec<String>) {
    apply(&claimed_cluster_yaml(ns, name, size));
    let ready = wait_running(ns, name, size as usize, Duration::from_secs(180)).await;
    let mut client = etcd(ns, &ready).await;
    write_keys(&mut client, name, 1000).await;
    let identity = Identity {
        members: member_list(&mut client).await,
        cluster_id: cluster_id(&mut client).await,
        added: event_names(ns, "reason=MemberAdded"),
    };
    (identity, ready)
}

/// The member list and cluster ID that every one of `size` ready members answers with,
/// each asked on its own (the same from all), and a client of the last one asked.
///
/// Right after every member went down, the status may still say Running from before,
/// and a restarted pod may not listen yet: one attempt fails until each member answers.
async fn every_member_answers(ns: &str, name: &str, size: usize) -> (Identity, Etcd) {
    wait_for(
        "every member to answer",
        Duration::from_secs(240),
        || async move {
            let ready = wait_running(ns, name, size, Duration::from_secs(180)).await;
            let mut answers = Vec::new();
            let mut last = None;
            for member in &ready {
                let options = ConnectOptions::new()
                    .with_connect_timeout(Duration::from_secs(3))
                    .with_timeout(Duration::from_secs(5));
                let urls = pod_urls(ns, std::slice::from_ref(member)).await;
                if urls.is_empty() {
                    return Err(format!("{member} has no pod address yet"));
                }
                let mut client = Etcd::connect(urls, Some(options))
                    .await
                    .map_err(|e| format!("{member}: {e}"))?;
                let list = client
                    .member_list()
                    .await
                    .map_err(|e| format!("{member}: {e}"))?;
                let cluster_id = list.header().map(|h| h.cluster_id()).unwrap_or_default();
                let members: Vec<_> = list
                    .members()
                    .iter()
                    .map(|m| (m.id(), m.name().to_string(), m.is_learner()))
                    .collect();
                answers.push((members, cluster_id));
                last = Some(client);
            }
            answers.dedup();
            match (answers.as_slice(), last) {
                ([(members, cluster_id)], Some(client)) => Ok((
                    Identity {
                        members: members.clone(),
                        cluster_id: *cluster_id,
                        added: Vec::new(),
                    },
                    client,
                )),
                _ => Err(format!("the members disagree: {answers:?}")),
            }
        },
    )
    .await
}

/// The same members (names and IDs), the same cluster, every key, no member added or
/// removed since `before`.
pub(crate) async fn assert_same_cluster(ns: &str, name: &str, before: &Identity, size: usize) {
    let (now, mut client) = every_member_answers(ns, name, size).await;
    assert_eq!(now.members, before.members, "membership changed");
    assert_eq!(now.cluster_id, before.cluster_id, "another cluster");
    assert_keys(&mut client, name, 1000).await;
    assert_eq!(
        event_names(ns, "reason=MemberAdded"),
        before.added,
        "a member was added"
    );
    assert_eq!(
        event_names(ns, "reason=MemberRemoved"),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn every_pod_of_a_claimed_cluster_deleted_at_once_brings_the_same_cluster_back() {
    let ns = Namespace::create("claims-all");
    let (before, ready) = claimed_running(&ns.0, "durable", 3).await;
    delete_pods(&ns.0, &ready);
    assert_same_cluster(&ns.0, "durable", &before, 3).await;
}

#[tokio::test]
async fn a_single_claimed_member_survives_a_kill_and_its_pods_deletion() {
    let ns = Namespace::create("claims-one");
    let (before, ready) = claimed_running(&ns.0, "single", 1).await;
    kill_member(&ns.0, &ready[0]);
    wait_for(
        "the killed member to restart",
        Duration::from_secs(60),
        || async {
            match restart_count(&ns.0, &ready[0]) {
                0 => Err("not restarted yet".to_string()),
                _ => Ok(()),
            }
        },
    )
    .await;
    assert_same_cluster(&ns.0, "single", &before, 1).await;
    delete_pods(&ns.0, &ready);
    assert_same_cluster(&ns.0, "single", &before, 1).await;
}

#[tokio::test]
async fn a_member_whose_claim_and_pod_are_deleted_alone_is_replaced() {
    let ns = Namespace::create("claims-lost");
    let (before, ready) = claimed_running(&ns.0, "partial", 3).await;
    let victim = ready[1].clone();
    let claim = format!("{victim}-data");
    let (ok, out) = kubectl(
        &["delete", "pvc", &claim, "-n", &ns.0, "--wait=false"],
        None,
    );
    assert!(ok, "{out}");
    delete_pods(&ns.0, std::slice::from_ref(&victim));
    let what = "the member without its claim to be replaced";
    let after = wait_status(&ns.0, "partial", what, Duration::from_secs(180), |s| {
        s.phase == "Running"
            && s.members.ready.len() == 3
            && !s.members.ready.contains(&victim)
            && !s.members.unready.contains(&victim)
    })
    .await
    .members
    .ready;
    let mut client = etcd(&ns.0, &after).await;
    let members = member_list(&mut client).await;
    assert_voters(&members, 3);
    for kept in before.members.iter().filter(|(_, n, _)| *n != victim) {
        assert!(members.contains(kept), "{kept:?} changed: {members:?}");
    }
    assert_eq!(cluster_id(&mut client).await, before.cluster_id);
    assert_keys(&mut client, "partial", 1000).await;
}

#[tokio::test]
async fn raising_the_storage_request_grows_every_claim_in_place_and_keeps_the_data() {
    let ns = Namespace::create("claims-grow");
    let (before, _) = claimed_running(&ns.0, "growing", 3).await;
    let grow = serde_json::json!({"pod": {"persistentVolumeClaimSpec": {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "2Gi"}}}}});
    patch_spec(&ns.0, "growing", grow).await;
    wait_for("every claim at 2Gi", Duration::from_secs(120), || async {
        let path = "jsonpath={range .items[*]}{.status.capacity.storage}{\"\\n\"}{end}";
        let (_, out) = kubectl(&["get", "pvc", "-n", &ns.0, "-o", path], None);
        let sizes: Vec<&str> = out.lines().collect();
        match sizes.len() == 3 && sizes.iter().all(|s| *s == "2Gi") {
            true => Ok(()),
            false => Err(format!("capacities {sizes:?}")),
        }
    })
    .await;
    // True before the change too: the status must answer the changed spec.
    let generation = object_json("etcdcluster", &ns.0, "growing")["metadata"]["generation"]
        .as_i64()
        .expect("a generation");
    let what = "the VolumesSized condition to be Current for the changed spec";
    wait_status(&ns.0, "growing", what, Duration::from_secs(60), |s| {
        s.observed_generation == Some(generation)
            && s.conditions
                .iter()
                .any(|c| c.r#type == "VolumesSized" && c.status == "True")
    })
    .await;
    assert_same_cluster(&ns.0, "growing", &before, 3).await;
    let restarts = pod_restarts(&ns.0);
    assert!(restarts.iter().all(|r| *r <= 1), "restarts {restarts:?}");
}

/// The restart counts of the etcd containers in `ns`.
fn pod_restarts(ns: &str) -> Vec<u32> {
    let path =
        "jsonpath={range .items[*]}{.status.containerStatuses[0].restartCount}{\"\\n\"}{end}";
    let (_, out) = kubectl(&["get", "pods", "-n", ns, "-o", path], None);
    out.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The pod-template digest annotation of every pod in `ns`, by pod name.
fn pod_templates(ns: &str) -> Vec<(String, String)> {
    let path = "jsonpath={range .items[*]}{.metadata.name} \
                {.metadata.annotations.etcd\\.database\\.coreos\\.com/pod-template}{\"\\n\"}{end}";
    let (ok, out) = kubectl(&["get", "pods", "-n", ns, "-o", path], None);
    assert!(ok, "{out}");
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.trim().to_string()))
        .collect()
}

/// Waits until the cluster is Running with `PodPolicyApplied` True.
async fn wait_policy_applied(ns: &str, name: &str) {
    let what = "every member on the current pod policy";
    wait_status(ns, name, what, Duration::from_secs(240), |s| {
        s.phase == "Running"
            && s.conditions
                .iter()
                .any(|c| c.r#type == "PodPolicyApplied" && c.status == "True")
    })
    .await;
}

#[tokio::test]
async fn a_pod_policy_change_restarts_every_claimed_member_in_turn_as_the_same_member() {
    let ns = Namespace::create("claims-roll");
    let (before, _) = claimed_running(&ns.0, "rolling", 3).await;
    let uids_before = pod_uids(&ns.0);
    let old_templates = pod_templates(&ns.0);
    let change = serde_json::json!({"pod": {"annotations": {"rollout": "1"}}});
    patch_spec(&ns.0, "rolling", change).await;
    // While the members go one at a time, a quorum stays ready (sampled on every poll).
    let fewest_ready = std::cell::Cell::new(3usize);
    let what = "every pod rebuilt from the new policy";
    wait_status(&ns.0, "rolling", what, Duration::from_secs(240), |s| {
        fewest_ready.set(fewest_ready.get().min(s.members.ready.len()));
        let templates = pod_templates(&ns.0);
        s.phase == "Running"
            && templates.len() == 3
            && templates.iter().all(|t| !old_templates.contains(t))
    })
    .await;
    wait_policy_applied(&ns.0, "rolling").await;
    assert!(
        fewest_ready.get() >= 2,
        "fewest ready {}",
        fewest_ready.get()
    );
    let uids_after = pod_uids(&ns.0);
    for uid in &uids_before {
        assert!(!uids_after.contains(uid), "pod {uid} was not restarted");
    }
    assert_same_cluster(&ns.0, "rolling", &before, 3).await;
}

#[tokio::test]
async fn a_member_crash_looping_on_a_bad_etcd_env_is_fixed_by_correcting_the_spec() {
    let ns = Namespace::create("claims-fix");
    let (before, _) = claimed_running(&ns.0, "fixable", 3).await;
    let bad = serde_json::json!({"pod": {"etcdEnv": [
        {"name": "ETCD_SNAPSHOT_COUNT", "value": "not-a-number"}]}});
    patch_spec(&ns.0, "fixable", bad).await;
    let what = "the member restarted onto the bad env to be reported crash looping";
    let looping = wait_status(&ns.0, "fixable", what, Duration::from_secs(180), |s| {
        s.reason == "CrashLooping"
    })
    .await;
    assert_eq!(looping.members.ready.len(), 2, "{looping:?}");
    assert!(
        looping.message.contains("snapshot-count") || looping.message.contains("not-a-number"),
        "{}",
        looping.message
    );
    let fixed = serde_json::json!({"pod": {"etcdEnv": null}});
    patch_spec(&ns.0, "fixable", fixed).await;
    wait_policy_applied(&ns.0, "fixable").await;
    assert_same_cluster(&ns.0, "fixable", &before, 3).await;
}

#[tokio::test]
async fn a_power_cut_of_every_node_brings_the_same_claimed_cluster_back() {
    let ns = Namespace::create("claims-power");
    let (before, ready) = claimed_running(&ns.0, "powered", 3).await;
    let nodes: std::collections::BTreeSet<String> =
        ready.iter().map(|p| node_of(&ns.0, p)).collect();
    assert_eq!(nodes.len(), 3, "the members share nodes: {nodes:?}");
    // Every node at once, the operator's with them; then every node starts again.
    let cuts: Vec<PowerCut> = NODES.iter().map(|n| PowerCut::of(n)).collect();
    drop(cuts);
    assert_same_cluster(&ns.0, "powered", &before, 3).await;
}
