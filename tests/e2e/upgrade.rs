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
        let mut client = etcd(&ns.0, "rolling", &ready).await;
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

    let mut client = etcd(&ns.0, "rolling", &ready).await;
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
