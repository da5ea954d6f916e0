//! Every example in `examples/` applied as a user applies it (`kubectl apply -n NS -f
//! examples/FILE`, unchanged) and run to its end on the local environment, so that no
//! example can rot: the local clusters, members on claims, TLS (auto and static), recovery, a pod policy,
//! backups (once and periodic) and a restore from them. What each feature guarantees is
//! proved in its own module; here, that the example shows it working.

use std::time::Duration;

use etcd_operator::tls::ClusterNames;

use crate::restore::wait_phase;
use crate::support::*;
use crate::tls::{ca, coreos_secrets};

/// `kubectl apply -n ns -f examples/<file>`.
fn apply_example(ns: &str, file: &str) {
    let path = root().join("examples").join(file);
    let (ok, out) = kubectl(&["apply", "-n", ns, "-f", path.to_str().unwrap()], None);
    assert!(ok, "kubectl apply of examples/{file}: {out}");
}

/// `.status.<field>` of object `kind/name`, as JSON.
fn status(kind: &str, ns: &str, name: &str) -> serde_json::Value {
    object_json(kind, ns, name)["status"].clone()
}

/// Removes what earlier runs stored under the bucket prefix `prefix` (the bucket outlives
/// the namespaces, and the examples name fixed prefixes).
fn empty_bucket_prefix(prefix: &str) {
    let dir = env_dir().join("s3/root").join(BUCKET).join(prefix);
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        panic!("emptying {}: {e}", dir.display());
    }
}

#[tokio::test]
async fn the_local_3_4_example_runs_three_members() {
    let ns = Namespace::create("ex-local-34");
    apply_example(&ns.0, "local-3.4.yaml");
    wait_running(&ns.0, "demo-34", 3, Duration::from_secs(180)).await;
}

#[tokio::test]
async fn the_claims_example_runs_each_member_on_a_bound_claim_of_its_own() {
    let ns = Namespace::create("ex-claims");
    apply_example(&ns.0, "claims.yaml");
    let ready = wait_running(&ns.0, "durable", 3, Duration::from_secs(180)).await;
    for member in &ready {
        let claim = format!("{member}-data");
        let phase = jsonpath("pvc", &claim, &ns.0, "{.status.phase}");
        assert_eq!(phase, "Bound", "{claim}");
    }
}

#[tokio::test]
async fn the_pod_policy_example_spreads_its_members_over_every_node() {
    let ns = Namespace::create("ex-policy");
    apply_example(&ns.0, "pod-policy.yaml");
    let ready = wait_running(&ns.0, "tuned", 3, Duration::from_secs(180)).await;
    let mut nodes: Vec<String> = ready.iter().map(|m| node_of(&ns.0, m)).collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "members share a node: {nodes:?}");
    let team = jsonpath("pod", &ready[0], &ns.0, "{.metadata.labels.team}");
    assert_eq!(team, "platform");
}

#[tokio::test]
async fn the_tls_auto_example_runs_with_certificates_the_operator_made() {
    let ns = Namespace::create("ex-tls-auto");
    apply_example(&ns.0, "tls-auto.yaml");
    wait_running(&ns.0, "secure-auto", 3, Duration::from_secs(240)).await;
    let tls = status("etcd", &ns.0, "secure-auto")["tls"].clone();
    assert!(
        tls.is_object() && !tls.as_object().unwrap().is_empty(),
        "{tls}"
    );
}

#[tokio::test]
async fn the_tls_static_example_runs_with_the_secrets_its_comment_names() {
    let ns = Namespace::create("ex-tls-static");
    let names = ClusterNames::new(&ns.0, "secure", "");
    coreos_secrets(&ns.0, "secure", &names, &ca(&names)).await;
    apply_example(&ns.0, "tls-static.yaml");
    wait_running(&ns.0, "secure", 3, Duration::from_secs(240)).await;
}

#[tokio::test]
async fn the_recovery_example_runs_on_claims_with_its_policy() {
    let ns = Namespace::create("ex-recovery");
    apply_example(&ns.0, "recovery.yaml");
    wait_running(&ns.0, "self-healing", 3, Duration::from_secs(180)).await;
    let spec = object_json("etcd", &ns.0, "self-healing")["spec"]["recovery"].clone();
    assert_eq!(spec["policy"], "FromSurvivor", "{spec}");
}

#[tokio::test]
async fn the_backup_examples_store_snapshots_and_the_restore_example_brings_one_back() {
    let ns = Namespace::create("ex-backup");
    apply_example(&ns.0, "local-3.5.yaml");
    let ready = wait_running(&ns.0, "demo-35", 3, Duration::from_secs(180)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "example", 200).await;
    drop(client);
    // The Secret the backup example's comment says to make.
    create_secret(&ns.0);
    empty_bucket_prefix("examples/demo-35");
    empty_bucket_prefix("examples/demo-35-periodic");

    apply_example(&ns.0, "backup-once.yaml");
    apply_example(&ns.0, "backup-periodic.yaml");
    for name in ["demo-35-once", "demo-35-periodic"] {
        let what = format!("EtcdBackup {name} to store a snapshot");
        let done = wait_for(&what, Duration::from_secs(120), || async {
            let status = status("etcdbackup", &ns.0, name);
            if status["succeeded"] == true {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        })
        .await;
        let path = done["lastBackupPath"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(path.contains("examples/demo-35"), "{done}");
    }

    apply_example(&ns.0, "restore.yaml");
    wait_phase(
        &ns.0,
        "demo-35-restored",
        "Succeeded",
        Duration::from_secs(300),
    )
    .await;
    let ready = wait_running(&ns.0, "demo-35-restored", 3, Duration::from_secs(240)).await;
    let mut restored = etcd(&ns.0, &ready).await;
    assert_keys(&mut restored, "example", 200).await;
}
