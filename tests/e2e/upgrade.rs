//! Version upgrades happen in place, one member at a time, without losing a write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn upgrading_3_4_to_3_5_while_a_client_writes_loses_no_acknowledged_write() {
    let ns = Namespace::create("upgrade");
    apply(&cluster_yaml(&ns.0, "rolling", 3, "3.4.23", false));
    let ready = wait_running(&ns.0, "rolling", 3, Duration::from_secs(120)).await;
    let pods_before = pod_uids(&ns.0);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let mut client = etcd(&ns.0, &ready).await;
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let key = format!("upgrade/{i}");
                if client.put(key.clone(), format!("v{i}"), None).await.is_ok() {
                    acknowledged.push(i);
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            acknowledged
        })
    };

    tokio::time::sleep(Duration::from_secs(1)).await;
    patch_spec(&ns.0, "rolling", serde_json::json!({"version": "3.5.35"})).await;
    let what = "every member on 3.5.35";
    wait_status(&ns.0, "rolling", what, Duration::from_secs(240), |s| {
        s.current_version == "3.5.35" && s.phase == "Running" && s.members.ready.len() == 3
    })
    .await;
    // Keep writing a little after the last step, then check every acknowledged write.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let acknowledged = writer.await.unwrap();
    assert!(
        acknowledged.len() >= 40,
        "the writer got too few writes through: {}",
        acknowledged.len()
    );

    let mut client = etcd(&ns.0, &ready).await;
    for i in &acknowledged {
        let resp = client.get(format!("upgrade/{i}"), None).await.expect("get");
        assert_eq!(
            resp.kvs()
                .first()
                .map(|kv| kv.value_str().unwrap().to_string()),
            Some(format!("v{i}")),
            "acknowledged write {i} lost"
        );
    }
    // In place: same pods (same names and uids), same members.
    assert_eq!(
        pod_uids(&ns.0),
        pods_before,
        "pods were replaced instead of upgraded"
    );
    let events = event_names(&ns.0, "reason=MemberUpgraded");
    assert_eq!(events.len(), 3, "one upgrade step per member: {events:?}");
}

#[tokio::test]
async fn a_downgrade_is_refused_with_a_condition_and_nothing_changes() {
    let ns = Namespace::create("downgrade");
    apply(&cluster_yaml(&ns.0, "steady", 3, "3.5.35", false));
    wait_running(&ns.0, "steady", 3, Duration::from_secs(120)).await;
    let pods_before = pod_uids(&ns.0);
    patch_spec(&ns.0, "steady", serde_json::json!({"version": "3.4.23"})).await;
    let what = "a DowngradeRefused condition";
    wait_status(&ns.0, "steady", what, Duration::from_secs(30), |s| {
        s.conditions
            .iter()
            .any(|c| c.r#type == "Progressing" && c.reason == "DowngradeRefused")
    })
    .await;
    assert_eq!(pod_uids(&ns.0), pods_before);
    let refusals = event_names(&ns.0, "reason=DowngradeRefused");
    assert_eq!(
        refusals.len(),
        1,
        "one Warning for the refusal: {refusals:?}"
    );
}

/// An upgrade to an image that never runs: the upgraded member's pod cannot pull its
/// image (ErrImagePull; its restart policy is `Always`, but the image never arrives), the
/// member goes back to the version the others run, and the upgrade halts (`UpgradeFailed`, `status.failedVersion`) instead of replacing member
/// after member on the bad image. Every key stays.
#[tokio::test]
async fn an_upgrade_to_an_image_that_never_runs_halts_after_one_member() {
    let ns = Namespace::create("upgrade-bad");
    apply(&cluster_yaml(&ns.0, "halt", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "halt", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "halt", 10).await;

    // The node has no binary for 3.6.99: the upgraded pod fails with ErrImagePull.
    patch_spec(&ns.0, "halt", serde_json::json!({"version": "3.6.99"})).await;
    let what = "the upgrade halted with 3 members on 3.5.35";
    let status = wait_status(&ns.0, "halt", what, Duration::from_secs(180), |s| {
        s.reason == "UpgradeFailed" && s.members.ready.len() == 3 && s.current_version == "3.5.35"
    })
    .await;
    assert_eq!(status.phase, "Blocked", "{status:?}");
    assert_eq!(
        status.failed_version.as_deref(),
        Some("3.6.99"),
        "{status:?}"
    );
    // Some more ticks: no second attempt.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(event_names(&ns.0, "reason=MemberUpgraded").len(), 1);
    let images = pod_images(&ns.0);
    assert!(
        images.iter().filter(|i| i.ends_with(":v3.5.35")).count() == 3,
        "{images:?}"
    );
    let members = wait_status(&ns.0, "halt", "3 ready", Duration::from_secs(30), |s| {
        s.members.ready.len() == 3
    })
    .await
    .members
    .ready;
    let mut client = etcd(&ns.0, &members).await;
    assert_keys(&mut client, "halt", 10).await;

    patch_spec(&ns.0, "halt", serde_json::json!({"version": "3.5.35"})).await;
    wait_running(&ns.0, "halt", 3, Duration::from_secs(60)).await;
}

/// Setting the version back in the middle of an upgrade moves the members already
/// upgraded back (etcd's cluster version has not moved yet), with every key kept.
#[tokio::test]
async fn reverting_the_version_mid_upgrade_moves_the_upgraded_members_back() {
    let ns = Namespace::create("upgrade-revert");
    apply(&cluster_yaml(&ns.0, "revert", 3, "3.4.23", false));
    let ready = wait_running(&ns.0, "revert", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "revert", 10).await;

    patch_spec(&ns.0, "revert", serde_json::json!({"version": "3.5.35"})).await;
    // The first pod given the new image is the earliest sign of the upgrade (its Event
    // comes later); each member then needs a restart and a health check before the next
    // one is touched, so the revert lands while some are still on 3.4.23.
    let images = wait_for("a member upgraded", Duration::from_secs(60), || async {
        let images = pod_images(&ns.0);
        if images.iter().any(|image| image.ends_with(":v3.5.35")) {
            Ok(images)
        } else {
            Err(format!("images {images:?}"))
        }
    })
    .await;
    assert!(
        images.iter().any(|image| image.ends_with(":v3.4.23")),
        "every member was upgraded before the test could revert: {images:?}"
    );
    patch_spec(&ns.0, "revert", serde_json::json!({"version": "3.4.23"})).await;
    let what = "every member on 3.4.23";
    wait_status(&ns.0, "revert", what, Duration::from_secs(180), |s| {
        s.current_version == "3.4.23"
            && s.phase == "Running"
            && s.members.ready.len() == 3
            && s.target_version == "3.4.23"
    })
    .await;
    let versions = pod_images(&ns.0);
    assert!(
        versions.iter().all(|image| image.ends_with(":v3.4.23")),
        "{versions:?}"
    );
    let mut client = etcd(&ns.0, &ready).await;
    assert_keys(&mut client, "revert", 10).await;
}
