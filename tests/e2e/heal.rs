//! A crashed member restarts in place with its identity and data; a member whose pod and
//! data are gone is replaced; the member list never keeps a dead member for long.

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

/// Kills the etcd processes of `victims` at once (SIGKILL, as an OOM kill or a crash)
/// and waits until the cluster runs again with every member ready and each victim's
/// container restarted: the same members (IDs and names), the same cluster, the same
/// pods, every key, and no membership change.
async fn restarted_in_place(ns: &str, name: &str, victims: &[String]) {
    let ready = wait_running(ns, name, 3, Duration::from_secs(120)).await;
    let mut client = etcd(ns, &ready).await;
    write_keys(&mut client, "crash", 1000).await;
    let members = member_list(&mut client).await;
    let id = cluster_id(&mut client).await;
    let pods = pod_uids(ns);
    let added = event_names(ns, "reason=MemberAdded");
    for victim in victims {
        kill_member(ns, victim);
    }
    // Restarted and Ready again: the status alone may still be the one from before the
    // kill, and a client may be routed to a member whose etcd does not listen yet.
    wait_for(
        "the killed members to restart and be ready",
        Duration::from_secs(120),
        || async {
            let states: Vec<(u32, bool)> = victims.iter().map(|v| container_state(ns, v)).collect();
            match states
                .iter()
                .all(|(restarts, ready)| *restarts >= 1 && *ready)
            {
                true => Ok(()),
                false => Err(format!("restart counts and readiness {states:?}")),
            }
        },
    )
    .await;
    let after = wait_running(ns, name, 3, Duration::from_secs(120)).await;
    assert_eq!(sorted(after), sorted(ready.clone()), "other members");
    let mut client = etcd(ns, &ready).await;
    assert_eq!(
        member_list(&mut client).await,
        members,
        "membership changed"
    );
    assert_eq!(cluster_id(&mut client).await, id, "another cluster");
    assert_keys(&mut client, "crash", 1000).await;
    assert_eq!(pod_uids(ns), pods, "a pod was replaced");
    assert_eq!(
        event_names(ns, "reason=MemberAdded"),
        added,
        "a member was added"
    );
    assert_eq!(
        event_names(ns, "reason=MemberRemoved"),
        Vec::<String>::new()
    );
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[tokio::test]
async fn a_member_whose_process_is_killed_restarts_in_place_with_its_id_and_data() {
    let ns = Namespace::create("heal-kill");
    apply(&cluster_yaml(&ns.0, "healing", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "healing", 3, Duration::from_secs(120)).await;
    restarted_in_place(&ns.0, "healing", &ready[1..2]).await;
}

#[tokio::test]
async fn killing_every_members_process_at_once_brings_the_same_cluster_back() {
    let ns = Namespace::create("power-cut");
    apply(&cluster_yaml(&ns.0, "restarted", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "restarted", 3, Duration::from_secs(120)).await;
    restarted_in_place(&ns.0, "restarted", &ready).await;
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
async fn a_paused_cluster_leaves_a_deleted_member_unreplaced_until_unpaused() {
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
    delete_pods(&ns.0, std::slice::from_ref(&victim));
    // The operator keeps observing: the lost member shows as unready, and stays a member.
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
    // Two members lose their pods and data (a crash alone restarts in place), at once as
    // the operator sees it: between two separate losses it would rightly replace the first
    // member while the other two still held a quorum (seen with the pods on two nodes,
    // whose kubelets finished the deletions seconds apart).
    let stopped = OperatorStopped::new().await;
    delete_pods(&ns.0, &ready[0..2]);
    let pods_before = pod_uids(&ns.0);
    drop(stopped);

    let what = "quorum loss in status";
    let status = wait_status(&ns.0, "fragile", what, Duration::from_secs(120), |s| {
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
