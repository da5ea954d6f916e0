//! EtcdBackups of running clusters into the local environment's S3 server (versitygw at
//! the host's pod-network address, started by `make up`): CoreOS-style manifests, one-shot
//! and periodic with `maxBackups`, and of TLS clusters (operator-managed, with no extra
//! field; static, with `clientTLSSecret`); status, Events and the stored objects checked.

use std::time::Duration;

use etcd_operator::backup::integrity::sha256_hex;
use etcd_operator::backup::metadata::BackupMetadata;
use etcd_operator::backup::naming::{BackupName, metadata_key};

use etcd_operator::tls::Role;

use crate::support::*;
use crate::tls::{StaticTls, VERSION, auto_client, coreos_keys};

fn backup_json(ns: &str, name: &str) -> serde_json::Value {
    object_json("etcdbackup", ns, name)
}

/// Waits until the status says `succeeded` is `want` with `Reason` `reason`.
async fn wait_outcome(ns: &str, name: &str, want: bool, reason: &str) -> serde_json::Value {
    let what = format!("EtcdBackup {ns}/{name} succeeded={want} Reason={reason:?}");
    wait_for(&what, Duration::from_secs(120), || async {
        let status = backup_json(ns, name)["status"].clone();
        let done = status["succeeded"] == want && status["Reason"] == reason;
        if done {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    })
    .await
}

/// Keys of the snapshots under `prefix` in the bucket, as the server's directory shows.
fn snapshots_under(prefix: &str) -> Vec<String> {
    let dir = env_dir().join("s3/root").join(BUCKET).join(prefix);
    let mut keys: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| format!("{prefix}/{}", e.file_name().to_string_lossy()))
                .filter(|k| BackupName::parse(k).is_some())
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

/// The stored snapshot at `path` (`<bucket>/<key>`) matches the status and its metadata.
fn assert_stored(path: &str, status: &serde_json::Value) -> BackupMetadata {
    let file = env_dir().join("s3/root").join(path);
    let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(
        bytes.len() as i64,
        status["lastBackupSize"].as_i64().unwrap()
    );
    assert_eq!(
        sha256_hex(&bytes),
        status["lastBackupSha256"].as_str().unwrap()
    );
    let key = path.strip_prefix(&format!("{BUCKET}/")).unwrap();
    let beside = env_dir()
        .join("s3/root")
        .join(BUCKET)
        .join(metadata_key(key));
    let metadata: BackupMetadata =
        serde_json::from_slice(&std::fs::read(&beside).unwrap()).expect("metadata JSON");
    assert_eq!(metadata.sha256, sha256_hex(&bytes));
    assert_eq!(metadata.revision, status["etcdRevision"].as_i64().unwrap());
    metadata
}

#[tokio::test]
async fn a_coreos_one_shot_backup_is_stored_verified_and_reported_and_failures_say_why() {
    let ns = Namespace::create("backup-once");
    apply(&cluster_yaml(&ns.0, "source", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "source", 3, Duration::from_secs(180)).await;
    let mut etcd = etcd(&ns.0, &ready).await;
    write_keys(&mut etcd, "backup", 100).await;
    create_secret(&ns.0);

    // The CoreOS example's layout: the cluster by its client Service's URL.
    let endpoints = format!(
        "etcdEndpoints: [\"http://source-client.{}.svc:2379\"]",
        ns.0
    );
    let prefix = empty_prefix(&ns.0, "once");
    apply(&backup_yaml(
        &ns.0,
        "once",
        &endpoints,
        &format!("{BUCKET}/{prefix}"),
        "",
    ));
    let status = wait_outcome(&ns.0, "once", true, "").await;
    assert_eq!(status["etcdVersion"], "3.5.35", "{status}");
    assert!(status["etcdRevision"].as_i64().unwrap() > 100, "{status}");
    assert!(status["lastSuccessDate"].is_string(), "{status}");
    assert!(
        status["nextBackupTime"].is_null(),
        "a one-shot backup is done: {status}"
    );
    let path = status["lastBackupPath"].as_str().unwrap().to_string();
    assert!(
        path.starts_with(&format!("{BUCKET}/{prefix}/once_")),
        "{path}"
    );
    let metadata = assert_stored(&path, &status);
    assert_eq!(metadata.etcd_version, "3.5.35");
    assert_eq!(snapshots_under(&prefix).len(), 1);
    assert!(!event_names(&ns.0, "reason=BackupSucceeded").is_empty());
    // It stays one backup: no second one is taken while the spec is unchanged.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(snapshots_under(&prefix).len(), 1);

    // A bucket that does not exist: a failure with its reason, and a Warning Event.
    let by_name = "clusterName: source";
    apply(&backup_yaml(
        &ns.0,
        "nobucket",
        by_name,
        "no-such-bucket/x",
        "",
    ));
    let failed = wait_outcome(&ns.0, "nobucket", false, "BucketNotFound").await;
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("no-such-bucket"),
        "{failed}"
    );
    assert!(
        failed["nextBackupTime"].is_string(),
        "a failure is retried: {failed}"
    );
    assert!(!event_names(&ns.0, "reason=BucketNotFound").is_empty());

    // A client certificate for a cluster without TLS: refused, said so, never ignored.
    let tls = "  clientTLSSecret: etcd-client-tls\n";
    apply(&backup_yaml(
        &ns.0,
        "tls",
        by_name,
        &format!("{BUCKET}/{}/tls", ns.0),
        tls,
    ));
    let refused = wait_outcome(&ns.0, "tls", false, "TLSMismatch").await;
    assert!(
        refused["message"].as_str().unwrap().contains("plain http"),
        "{refused}"
    );
    assert!(snapshots_under(&format!("{}/tls", ns.0)).is_empty());

    // The backups left every key in place.
    assert_keys(&mut etcd, "backup", 100).await;
}

#[tokio::test]
async fn a_periodic_backup_keeps_max_backups_and_reports_each_one() {
    let ns = Namespace::create("backup-periodic");
    apply(&cluster_yaml(&ns.0, "source", 1, "3.5.35", false));
    let ready = wait_running(&ns.0, "source", 1, Duration::from_secs(120)).await;
    let mut etcd = etcd(&ns.0, &ready).await;
    write_keys(&mut etcd, "periodic", 1000).await;
    create_secret(&ns.0);

    let prefix = empty_prefix(&ns.0, "periodic");
    let policy = "  backupPolicy:\n    backupIntervalInSecond: 10\n    maxBackups: 3\n";
    apply(&backup_yaml(
        &ns.0,
        "periodic",
        "clusterName: source",
        &format!("{BUCKET}/{prefix}"),
        policy,
    ));
    let first = wait_outcome(&ns.0, "periodic", true, "").await["lastBackupPath"]
        .as_str()
        .unwrap()
        .to_string();
    // Four good backups: the fourth deleted the first.
    wait_for(
        "four BackupSucceeded Events",
        Duration::from_secs(150),
        || async {
            let (_, out) = kubectl(
                &[
                    "get",
                    "events",
                    "-n",
                    &ns.0,
                    "--field-selector",
                    "reason=BackupSucceeded",
                    "-o",
                    "json",
                ],
                None,
            );
            let events: serde_json::Value =
                serde_json::from_str(&out).map_err(|e| e.to_string())?;
            let count: i64 = events["items"]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        // The Recorder folds repeats of one reason on one object into
                        // a series: its count is in `series.count`, not the deprecated
                        // `count` of core/v1 Events.
                        .map(|e| {
                            e["series"]["count"]
                                .as_i64()
                                .or_else(|| e["count"].as_i64())
                                .unwrap_or(1)
                                .max(1)
                        })
                        .sum()
                })
                .unwrap_or(0);
            if count >= 4 {
                Ok(())
            } else {
                Err(format!("{count} so far"))
            }
        },
    )
    .await;
    // The Event is raised before the status is written: wait for the fourth's status.
    let status = wait_for(
        "the status of the backup that deleted the first",
        Duration::from_secs(15),
        || async {
            let status = backup_json(&ns.0, "periodic")["status"].clone();
            let deleted = status["message"]
                .as_str()
                .is_some_and(|m| m.contains("deleted"));
            if deleted {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        },
    )
    .await;
    assert_eq!(status["succeeded"], true, "{status}");
    assert_eq!(status["backups"], 3, "{status}");
    assert!(status["nextBackupTime"].is_string(), "{status}");
    let kept = snapshots_under(&prefix);
    assert!(
        kept.len() == 3 || kept.len() == 4,
        "at most one more than maxBackups while one is taken: {kept:?}"
    );
    let first = first.strip_prefix(&format!("{BUCKET}/")).unwrap();
    assert!(!kept.iter().any(|k| k == first), "{first} kept: {kept:?}");
    let (ok, columns) = kubectl(&["get", "etcdbackup", "periodic", "-n", &ns.0], None);
    assert!(
        ok && columns.contains("SUCCEEDED") && columns.contains("true"),
        "{columns}"
    );
    assert_keys(&mut etcd, "periodic", 1000).await;
}

#[tokio::test]
async fn the_crd_refuses_a_backup_naming_two_clusters_or_a_storage_type_without_its_store() {
    let ns = Namespace::create("backup-validation");
    let both = backup_yaml(
        &ns.0,
        "both",
        "clusterName: a\n  etcdEndpoints: [\"http://a:2379\"]",
        &format!("{BUCKET}/x"),
        "",
    );
    let (ok, out) = kubectl(&["apply", "-f", "-"], Some(&both));
    assert!(!ok && out.contains("exactly one of clusterName"), "{out}");
    let gcs = backup_yaml(&ns.0, "gcs", "clusterName: a", &format!("{BUCKET}/x"), "")
        .replace("storageType: S3", "storageType: GCS");
    let (ok, out) = kubectl(&["apply", "-f", "-"], Some(&gcs));
    assert!(!ok && out.contains("GCS needs gcs"), "{out}");
    let negative = backup_yaml(
        &ns.0,
        "negative",
        "clusterName: a",
        &format!("{BUCKET}/x"),
        "  backupPolicy:\n    maxBackups: -1\n",
    );
    let (ok, out) = kubectl(&["apply", "-f", "-"], Some(&negative));
    assert!(!ok && out.contains("maxBackups"), "{out}");
}

/// A one-shot EtcdBackup `name` of cluster `cluster` with `extra` spec lines succeeds: the
/// snapshot stored under `<ns>/<name>`, matching the status and its metadata, with a
/// revision past the `keys` written.
async fn assert_one_shot_stored(ns: &str, name: &str, cluster: &str, extra: &str, keys: i64) {
    let prefix = empty_prefix(ns, name);
    apply(&backup_yaml(
        ns,
        name,
        &format!("clusterName: {cluster}"),
        &format!("{BUCKET}/{prefix}"),
        extra,
    ));
    let status = wait_outcome(ns, name, true, "").await;
    assert!(status["etcdRevision"].as_i64().unwrap() > keys, "{status}");
    let path = status["lastBackupPath"].as_str().unwrap().to_string();
    assert!(
        path.starts_with(&format!("{BUCKET}/{prefix}/{cluster}_")),
        "{path}"
    );
    let metadata = assert_stored(&path, &status);
    assert_eq!(metadata.etcd_version, VERSION);
    assert_eq!(metadata.cluster, cluster);
    assert_eq!(snapshots_under(&prefix).len(), 1);
    assert!(!event_names(ns, "reason=BackupSucceeded").is_empty());
}

#[tokio::test]
async fn an_operator_managed_tls_cluster_is_backed_up_with_no_extra_field() {
    let ns = Namespace::create("backup-tls-auto");
    let yaml = format!(
        "{}  TLS:\n    auto:\n      validity: 2160h\n",
        cluster_yaml(&ns.0, "secure", 3, VERSION, false)
    );
    apply(&yaml);
    wait_running(&ns.0, "secure", 3, Duration::from_secs(240)).await;
    let mut etcd = auto_client(&ns.0, "secure")
        .await
        .expect("the operator's client certificate works");
    write_keys(&mut etcd, "backup", 1000).await;
    create_secret(&ns.0);

    // No clientTLSSecret: the operator's own client certificate of the cluster is used.
    assert_one_shot_stored(&ns.0, "auto", "secure", "", 1000).await;
    assert_keys(&mut etcd, "backup", 1000).await;
}

#[tokio::test]
async fn a_static_tls_cluster_is_backed_up_with_the_client_tls_secret_it_names() {
    let ns = Namespace::create("backup-tls-static");
    let cluster = StaticTls::start(&ns.0).await;
    // A client certificate of its own for backups, in CoreOS's layout.
    let keys = coreos_keys(Role::Client, &cluster.client, &cluster.ca);
    crate::tls::create_secret(&ns.0, "backup-client", keys).await;
    let mut etcd = cluster.connect(&ns.0, 0).await;
    write_keys(&mut etcd, "backup", 1000).await;
    create_secret(&ns.0);

    let extra = "  clientTLSSecret: backup-client\n";
    assert_one_shot_stored(&ns.0, "static", "secure", extra, 1000).await;

    // A clientTLSSecret that does not exist: reported by name, retried, nothing stored.
    let missing = "  clientTLSSecret: no-such-secret\n";
    let prefix = empty_prefix(&ns.0, "missing");
    apply(&backup_yaml(
        &ns.0,
        "missing",
        "clusterName: secure",
        &format!("{BUCKET}/{prefix}"),
        missing,
    ));
    let failed = wait_outcome(&ns.0, "missing", false, "TLSSecretInvalid").await;
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains("Secret no-such-secret") && message.contains("not found"),
        "{failed}"
    );
    assert!(failed["nextBackupTime"].is_string(), "retried: {failed}");
    assert!(!event_names(&ns.0, "reason=TLSSecretInvalid").is_empty());
    assert!(snapshots_under(&prefix).is_empty());
    assert_keys(&mut etcd, "backup", 1000).await;
}

/// The local environment's S3 server stopped until this is dropped (then started again,
/// waiting until it listens), so that a failing test leaves the store up for the next.
struct StoreDown;

impl StoreDown {
    fn now() -> StoreDown {
        s3_server("down");
        StoreDown
    }
}

impl Drop for StoreDown {
    fn drop(&mut self) {
        s3_server("up");
    }
}

/// `testkit/env/store/s3.sh <command>` against the environment the tests run on.
fn s3_server(command: &str) {
    let out = std::process::Command::new("bash")
        .arg(root().join("testkit/env/store/s3.sh"))
        .arg(command)
        .env("LOCAL_ENV_DIR", env_dir())
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "s3.sh {command}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_scheduled_backup_while_the_store_is_down_fails_is_retried_and_counts_no_partial_object()
{
    let ns = Namespace::create("backup-store-down");
    apply(&cluster_yaml(&ns.0, "source", 1, "3.5.35", false));
    let ready = wait_running(&ns.0, "source", 1, Duration::from_secs(120)).await;
    let mut etcd = etcd(&ns.0, &ready).await;
    write_keys(&mut etcd, "down", 1000).await;
    create_secret(&ns.0);

    let prefix = empty_prefix(&ns.0, "down");
    let policy = "  backupPolicy:\n    backupIntervalInSecond: 10\n    maxBackups: 3\n";
    let store = StoreDown::now();
    apply(&backup_yaml(
        &ns.0,
        "down",
        "clusterName: source",
        &format!("{BUCKET}/{prefix}"),
        policy,
    ));
    let failed = wait_outcome(&ns.0, "down", false, "StoreUnreachable").await;
    assert!(
        failed["nextBackupTime"].is_string(),
        "a failure is retried: {failed}"
    );
    assert!(failed["lastSuccessDate"].is_null(), "{failed}");
    assert!(!event_names(&ns.0, "reason=StoreUnreachable").is_empty());
    wait_for(
        "a second try while the store is down",
        Duration::from_secs(90),
        || async {
            let status = backup_json(&ns.0, "down")["status"].clone();
            match status["consecutiveFailures"].as_i64() {
                Some(n) if n >= 2 => Ok(()),
                _ => Err(status.to_string()),
            }
        },
    )
    .await;
    assert!(snapshots_under(&prefix).is_empty());

    // The store back: the next try succeeds, and only whole, verified snapshots count.
    drop(store);
    let status = wait_outcome(&ns.0, "down", true, "").await;
    let path = status["lastBackupPath"].as_str().unwrap().to_string();
    assert_stored(&path, &status);
    let stored = snapshots_under(&prefix);
    assert!(
        stored.contains(
            &path
                .strip_prefix(&format!("{BUCKET}/"))
                .unwrap()
                .to_string()
        )
    );
    for key in &stored {
        let beside = env_dir()
            .join("s3/root")
            .join(BUCKET)
            .join(metadata_key(key));
        let metadata: BackupMetadata = serde_json::from_slice(
            &std::fs::read(&beside).unwrap_or_else(|e| panic!("{}: {e}", beside.display())),
        )
        .expect("metadata JSON");
        let bytes = std::fs::read(env_dir().join("s3/root").join(BUCKET).join(key)).unwrap();
        assert_eq!(metadata.sha256, sha256_hex(&bytes), "{key}");
    }
    assert!(
        status["backups"].as_i64().unwrap() <= stored.len() as i64,
        "{status} {stored:?}"
    );
    assert_keys(&mut etcd, "down", 1000).await;
}
