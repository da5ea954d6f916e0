//! Dead members are replaced; the member list never keeps a dead member for long.

use std::time::Duration;

use crate::operator::OperatorStopped;
use crate::support::*;

async fn replaced_after(ns: &str, name: &str, victim: &str, kill: impl FnOnce()) {
    let before = wait_running(ns, name, 3, Duration::from_secs(120)).await;
    let mut client = etcd(ns, &before).await;
    write_keys(&mut client, "heal", 30).await;
    kill();
    let after = wait_status(
        ns,
        name,
        "the dead member to be replaced",
        Duration::from_secs(120),
        |s| {
            let gone = !s.members.ready.iter().any(|m| m == victim)
                && !s.members.unready.iter().any(|m| m == victim);
            gone && s.phase == "Running" && s.members.ready.len() == 3
        },
    )
    .await
    .members
    .ready;
    let mut client = etcd(ns, &after).await;
    let members = member_list(&mut client).await;
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(members.iter().all(|(_, n, _)| n != victim), "{members:?}");
    assert_keys(&mut client, "heal", 30).await;
}

#[tokio::test]
async fn a_member_whose_process_is_killed_is_replaced_under_a_new_name() {
    let ns = Namespace::create("heal-kill");
    apply(&cluster_yaml(&ns.0, "healing", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "healing", 3, Duration::from_secs(120)).await;
    let victim = ready[1].clone();
    let ns_name = ns.0.clone();
    replaced_after(&ns.0, "healing", &victim, || kill_member(&ns_name, &victim)).await;
}

#[tokio::test]
async fn a_member_whose_pod_is_deleted_is_replaced() {
    let ns = Namespace::create("heal-delete");
    apply(&cluster_yaml(&ns.0, "healing", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "healing", 3, Duration::from_secs(120)).await;
    let victim = ready[0].clone();
    let ns_name = ns.0.clone();
    replaced_after(&ns.0, "healing", &victim, || {
        let (ok, out) = kubectl(
            &["delete", "pod", "-n", &ns_name, &victim, "--wait=false"],
            None,
        );
        assert!(ok, "{out}");
    })
    .await;
}

#[tokio::test]
async fn a_paused_cluster_leaves_a_killed_member_dead_until_unpaused() {
    let ns = Namespace::create("pause");
    apply(&cluster_yaml(&ns.0, "paused", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "paused", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "pause", 10).await;

    patch_spec(&ns.0, "paused", serde_json::json!({"paused": true})).await;
    let timeout = Duration::from_secs(30);
    wait_status(&ns.0, "paused", "the pause in status", timeout, |s| {
        s.phase == "Paused" && s.control_paused
    })
    .await;
    let victim = ready[2].clone();
    kill_member(&ns.0, &victim);
    // The operator keeps observing: the dead member shows as unready, and stays a member.
    let what = "the dead member reported unready";
    wait_status(&ns.0, "paused", what, Duration::from_secs(60), |s| {
        s.members.unready.contains(&victim)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let members = member_list(&mut client).await;
    assert!(
        members.iter().any(|(_, n, _)| *n == victim),
        "paused operator removed {victim}"
    );
    let s = clusters(&ns.0)
        .await
        .get("paused")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(s.members.unready.contains(&victim), "{:?}", s.members);

    patch_spec(&ns.0, "paused", serde_json::json!({"paused": false})).await;
    let after = wait_running(&ns.0, "paused", 3, Duration::from_secs(120)).await;
    assert!(!after.contains(&victim));
    let mut client = etcd(&ns.0, &after).await;
    assert_keys(&mut client, "pause", 10).await;
}

#[tokio::test]
async fn losing_quorum_is_reported_and_no_member_is_removed() {
    let ns = Namespace::create("quorum");
    apply(&cluster_yaml(&ns.0, "fragile", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "fragile", 3, Duration::from_secs(120)).await;
    let pods_before = pod_uids(&ns.0);
    kill_member(&ns.0, &ready[0]);
    kill_member(&ns.0, &ready[1]);

    let what = "quorum loss in status";
    let status = wait_status(&ns.0, "fragile", what, Duration::from_secs(60), |s| {
        s.phase == "Blocked"
            && s.conditions
                .iter()
                .any(|c| c.r#type == "Available" && c.status == "False")
            && s.conditions
                .iter()
                .any(|c| c.r#type == "Degraded" && c.status == "True")
    })
    .await;
    assert!(
        ["QuorumLost", "EtcdUnreachable"].contains(&status.reason.as_str()),
        "{status:?}"
    );
    // Give the operator several ticks: it must not delete or replace anything.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        pod_uids(&ns.0),
        pods_before,
        "a pod was deleted or replaced"
    );
    let events = event_names(&ns.0, "reason=MemberRemoved");
    assert!(events.is_empty(), "{events:?}");

    // A restarted operator must not take the broken cluster for a new one.
    drop(OperatorStopped::new().await);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        pod_uids(&ns.0),
        pods_before,
        "the restarted operator changed pods"
    );
    let status = clusters(&ns.0)
        .await
        .get("fragile")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, "Blocked", "{status:?}");
    assert!(
        status
            .bootstrap
            .as_ref()
            .is_some_and(|b| b.cluster_id.is_some()),
        "{status:?}"
    );
    let seeds = event_names(&ns.0, "reason=SeedCreated");
    assert_eq!(seeds.len(), 1, "a second seed: {seeds:?}");
}
