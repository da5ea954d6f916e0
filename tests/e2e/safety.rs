//! The safety rules that protect a cluster's data: never a second bootstrap, never a
//! deletion of what may hold the only copy of the data, no spec change ignored.

use std::time::Duration;

use crate::operator::OperatorStopped;
use crate::support::*;

/// Pause a cluster, lose every member pod, restart the operator, unpause: the operator
/// must remember that the cluster exists (its ID is in status) and must not seed a new
/// cluster behind the same Service (that needs a restore from a backup).
#[tokio::test]
async fn a_paused_cluster_that_lost_its_pods_is_never_seeded_again_after_a_restart() {
    let ns = Namespace::create("paused-reseed");
    apply(&cluster_yaml(&ns.0, "keep", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "keep", 3, Duration::from_secs(120)).await;
    let recorded = wait_status(&ns.0, "keep", "the cluster ID in status", T60, |s| {
        s.bootstrap.as_ref().is_some_and(|b| b.cluster_id.is_some())
    })
    .await
    .bootstrap
    .unwrap();

    patch_spec(&ns.0, "keep", serde_json::json!({"paused": true})).await;
    wait_status(&ns.0, "keep", "the pause in status", T60, |s| {
        s.phase == "Paused"
    })
    .await;
    // Every pod, and with its emptyDir every member's data, is gone.
    delete_pods(&ns.0, &ready);
    wait_status(&ns.0, "keep", "every member unready", T60, |s| {
        s.members.ready.is_empty()
    })
    .await;
    let failed = pod_uids(&ns.0);
    assert_eq!(failed, Vec::<String>::new(), "{failed:?}");

    // The restarted operator reads nothing from the members (they are dead) and only the
    // object's status from before.
    drop(OperatorStopped::new().await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    patch_spec(&ns.0, "keep", serde_json::json!({"paused": false})).await;
    let status = wait_status(&ns.0, "keep", "the loss reported", T60, |s| {
        s.phase == "Blocked" && !s.control_paused
    })
    .await;
    assert_eq!(status.reason, "AllMembersLost", "{status:?}");
    // Several ticks: nothing is created or deleted.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(pod_uids(&ns.0), failed, "pods were created or deleted");
    let seeds = event_names(&ns.0, "reason=SeedCreated");
    assert_eq!(seeds.len(), 1, "a second seed: {seeds:?}");
    let status = clusters(&ns.0)
        .await
        .get("keep")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.bootstrap.as_ref(), Some(&recorded), "{status:?}");
}

/// The seed of a cluster asks for a version that cannot be pulled; the user fixes the
/// version: the seed, which never started and holds no data, is recreated from the
/// current spec and the cluster comes up.
#[tokio::test]
async fn a_seed_that_never_started_follows_a_version_change() {
    let ns = Namespace::create("seed-version");
    apply(&cluster_yaml(&ns.0, "late", 1, "3.2.13", false));
    wait_status(&ns.0, "late", "the seed waiting for its image", T60, |s| {
        s.reason == "WaitingForSeed" && s.message.contains("ErrImagePull")
    })
    .await;
    patch_spec(&ns.0, "late", serde_json::json!({"version": "3.5.35"})).await;
    let ready = wait_running(&ns.0, "late", 1, Duration::from_secs(90)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "late", 3).await;
    assert_keys(&mut client, "late", 3).await;
    let seeds = event_names(&ns.0, "reason=SeedCreated");
    assert_eq!(seeds.len(), 1, "the seed is recorded once: {seeds:?}");
}

/// `size: 3` → `size: 1` ends with one member, and the phase says Running only then.
#[tokio::test]
async fn scaling_three_to_one_reaches_one_member() {
    let ns = Namespace::create("scale-one");
    apply(&cluster_yaml(&ns.0, "shrink", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "shrink", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "shrink", 10).await;
    patch_spec(&ns.0, "shrink", serde_json::json!({"size": 1})).await;
    let left = wait_running(&ns.0, "shrink", 1, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &left).await;
    assert_eq!(member_list(&mut client).await.len(), 1);
    assert_keys(&mut client, "shrink", 10).await;
}

const T60: Duration = Duration::from_secs(60);
