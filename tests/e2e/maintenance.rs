//! Day-two maintenance: a full backend is reported as what it is, never as a lost quorum,
//! and raising the quota makes the cluster writable again without a person.

use std::time::Duration;

use etcd_operator::api::EtcdClusterStatus;
use serde_json::json;

use crate::support::*;

const MIB: usize = 1024 * 1024;

/// The `Storage` condition's reason, if the status has one.
fn storage(s: &EtcdClusterStatus) -> Option<&str> {
    s.conditions
        .iter()
        .find(|c| c.r#type == "Storage")
        .map(|c| c.reason.as_str())
}

/// Puts 512 KiB values until etcd refuses one for want of space, each under the key
/// `key(i)` for the i-th put; returns how many fit. Panics if 100 fit.
async fn fill_until_nospace(
    etcd: &mut etcd_client::Client,
    key: impl Fn(usize) -> String,
) -> usize {
    let value = vec![b'x'; MIB / 2];
    for i in 0..100 {
        if let Err(e) = etcd.put(key(i), value.clone(), None).await {
            assert!(e.to_string().contains("database space exceeded"), "{e}");
            return i;
        }
    }
    panic!("100 values of 512 KiB fit in an 8 MiB quota");
}

fn quota_env(bytes: usize) -> serde_json::Value {
    json!({"etcdEnv": [{"name": "ETCD_QUOTA_BACKEND_BYTES", "value": bytes.to_string()}]})
}

#[tokio::test]
async fn a_full_backend_is_reported_as_nospace_and_a_raised_quota_makes_the_cluster_writable() {
    let ns = Namespace::create("nospace");
    let yaml = format!(
        "{}  pod:\n    etcdEnv:\n    - name: ETCD_QUOTA_BACKEND_BYTES\n      value: \"{}\"\n",
        cluster_yaml(&ns.0, "full", 3, "3.5.35", false),
        8 * MIB
    );
    apply(&yaml);
    let members = wait_running(&ns.0, "full", 3, Duration::from_secs(180)).await;
    let mut client = etcd(&ns.0, &members).await;
    write_keys(&mut client, "before", 20).await;
    fill_until_nospace(&mut client, |i| format!("fill/{i:03}")).await;

    let full = wait_status(
        &ns.0,
        "full",
        "NOSPACE reported as such",
        Duration::from_secs(60),
        |s| storage(s) == Some("NoSpace") && s.reason == "NoSpace",
    )
    .await;
    assert_eq!(full.phase, "Running", "{full:?}");
    assert_eq!(
        full.members.ready.len(),
        3,
        "members with an alarm are ready"
    );
    let alarmed: Vec<_> = full
        .members
        .details
        .iter()
        .filter(|m| m.alarms == ["NOSPACE"])
        .collect();
    assert!(!alarmed.is_empty(), "{:?}", full.members.details);
    for m in &full.members.details {
        assert_eq!(m.quota_backend_bytes, Some(8 * MIB as i64), "{m:?}");
        assert!(m.db_size_bytes.is_some_and(|b| b > 0), "{m:?}");
    }
    wait_event(&ns.0, "reason=StorageNoSpace").await;
    assert!(
        full.quota_used_percent.is_some_and(|p| p >= 90),
        "{:?}",
        full.quota_used_percent
    );
    let (ok, wide) = kubectl(&["get", "etcd", "full", "-n", &ns.0, "-o", "wide"], None);
    assert!(ok && wide.contains("QUOTA%"), "{wide}");

    patch_spec(&ns.0, "full", json!({"pod": quota_env(64 * MIB)})).await;
    let writable = wait_status(
        &ns.0,
        "full",
        "the raised quota rolled out and NOSPACE disarmed",
        Duration::from_secs(300),
        |s| storage(s) == Some("Healthy") && s.reason == "Converged",
    )
    .await;
    assert!(
        writable
            .members
            .details
            .iter()
            .all(|m| m.alarms.is_empty() && m.quota_backend_bytes == Some(64 * MIB as i64)),
        "{:?}",
        writable.members.details
    );
    let mut client = etcd(&ns.0, &writable.members.ready).await;
    write_keys(&mut client, "after", 20).await;
    assert_keys(&mut client, "before", 20).await;
    assert_keys(&mut client, "after", 20).await;
    wait_event(&ns.0, "reason=AlarmDisarmed").await;
    wait_event(&ns.0, "reason=StorageHealthy").await;
}

/// The value of `ETCD_QUOTA_BACKEND_BYTES` in pod `name`'s etcd container.
fn pod_quota(ns: &str, name: &str) -> String {
    jsonpath(
        "pod",
        name,
        ns,
        "{.spec.containers[?(@.name==\"etcd\")].env[?(@.name==\"ETCD_QUOTA_BACKEND_BYTES\")].value}",
    )
}

#[tokio::test]
async fn history_is_compacted_as_the_spec_says_and_a_changed_quota_field_rolls_out() {
    let ns = Namespace::create("compaction");
    let yaml = format!(
        "{}  compaction:\n    mode: Revision\n    retention: \"10\"\n  quotaBackendBytes: {}\n",
        cluster_yaml(&ns.0, "kept", 3, "3.5.35", false),
        16 * MIB
    );
    apply(&yaml);
    let members = wait_running(&ns.0, "kept", 3, Duration::from_secs(180)).await;
    for m in &members {
        assert_eq!(pod_quota(&ns.0, m), (16 * MIB).to_string(), "{m}");
    }
    let mut client = etcd(&ns.0, &members).await;
    for i in 0..40 {
        client
            .put("counter", i.to_string(), None)
            .await
            .expect("put");
    }
    let newest = client
        .get("counter", None)
        .await
        .expect("get")
        .header()
        .expect("a header")
        .revision();
    let compacted = wait_status(
        &ns.0,
        "kept",
        "a compaction keeping 10 revisions",
        Duration::from_secs(60),
        |s| {
            s.compaction
                .as_ref()
                .and_then(|c| c.revision)
                .is_some_and(|r| r >= newest - 10)
        },
    )
    .await;
    let record = compacted.compaction.expect("status.compaction");
    assert_eq!(
        (
            record.source.as_str(),
            record.mode.as_str(),
            record.retention.as_str()
        ),
        ("Operator", "Revision", "10")
    );
    assert!(record.time.is_some(), "{record:?}");
    let old = etcd_client::GetOptions::new().with_revision(newest - 20);
    let gone = client
        .get("counter", Some(old))
        .await
        .expect_err("compacted");
    assert!(gone.to_string().contains("compacted"), "{gone}");
    assert_eq!(
        client.get("counter", None).await.expect("get").kvs()[0]
            .value_str()
            .unwrap(),
        "39",
        "compaction keeps every key's newest value"
    );
    wait_event(&ns.0, "reason=HistoryCompacted").await;

    patch_spec(&ns.0, "kept", json!({"quotaBackendBytes": 32 * MIB})).await;
    let rolled = wait_status(
        &ns.0,
        "kept",
        "the raised quota on every member",
        Duration::from_secs(300),
        |s| {
            s.reason == "Converged"
                && s.members.ready.len() == 3
                && s.members
                    .ready
                    .iter()
                    .all(|m| pod_quota(&ns.0, m) == (32 * MIB).to_string())
        },
    )
    .await;
    let mut client = etcd(&ns.0, &rolled.members.ready).await;
    assert_eq!(
        client.get("counter", None).await.expect("get").kvs()[0]
            .value_str()
            .unwrap(),
        "39"
    );
}

#[tokio::test]
async fn a_backend_full_of_history_is_compacted_defragmented_and_made_writable_without_a_person() {
    let ns = Namespace::create("nospace-history");
    let yaml = format!(
        "{}  quotaBackendBytes: {}\n  compaction:\n    mode: Revision\n    retention: \"4\"\n",
        cluster_yaml(&ns.0, "history", 3, "3.5.35", false),
        8 * MIB
    );
    apply(&yaml);
    let members = wait_running(&ns.0, "history", 3, Duration::from_secs(180)).await;
    let mut client = etcd(&ns.0, &members).await;
    write_keys(&mut client, "kept", 10).await;
    // One key overwritten: the backend fills with history only.
    let written = fill_until_nospace(&mut client, |_| "history".to_string()).await;
    assert!(written > 4, "{written} values before NOSPACE");

    let recovered = wait_status(
        &ns.0,
        "history",
        "NOSPACE recovered by compaction and defragmentation",
        Duration::from_secs(180),
        |s| storage(s) == Some("Healthy") && s.reason == "Converged",
    )
    .await;
    for m in &recovered.members.details {
        assert!(m.alarms.is_empty(), "{m:?}");
        let size = m.db_size_bytes.expect("a size");
        assert!(size < (8 * MIB as i64) * 8 / 10, "{m:?}");
    }
    // Each member's backend is below 80% of the quota: each was defragmented (a
    // compaction alone never shrinks the file).
    wait_event(&ns.0, "reason=MemberDefragmented").await;
    wait_event(&ns.0, "reason=StorageNoSpace").await;
    wait_event(&ns.0, "reason=HistoryCompacted").await;
    wait_event(&ns.0, "reason=AlarmDisarmed").await;
    let mut client = etcd(&ns.0, &recovered.members.ready).await;
    client
        .put("history", "after", None)
        .await
        .expect("writable again");
    assert_keys(&mut client, "kept", 10).await;
}
