//! EtcdRestores from backups in the local environment's S3 server: a new cluster from a
//! one-member cluster's backup, with every key, a new cluster ID and three members (the
//! seed restored from the snapshot, the others joined through raft); a restore naming an
//! existing cluster, one naming no snapshot and one whose snapshot has flipped bytes are
//! refused, touching nothing.

use std::time::Duration;

use crate::support::*;

/// An EtcdRestore laid out as the CoreOS operator's example is, plus `extra` spec lines.
pub(crate) fn restore_yaml(ns: &str, name: &str, cluster: &str, path: &str, extra: &str) -> String {
    format!(
        "apiVersion: \"etcd.database.coreos.com/v1beta2\"\nkind: \"EtcdRestore\"\nmetadata:\n  \
         name: {name}\n  namespace: {ns}\nspec:\n  etcdCluster:\n    name: {cluster}\n  \
         backupStorageType: S3\n{extra}  s3:\n    path: {path}\n    awsSecret: aws\n    \
         endpoint: {}\n    forcePathStyle: true\n",
        s3_file("endpoint")
    )
}

/// Waits until the EtcdRestore's status has `phase`; returns the status.
pub(crate) async fn wait_phase(
    ns: &str,
    name: &str,
    phase: &str,
    timeout: Duration,
) -> serde_json::Value {
    let what = format!("EtcdRestore {ns}/{name} phase {phase}");
    wait_for(&what, timeout, || async {
        let status = object_json("etcdrestore", ns, name)["status"].clone();
        if status["phase"] == phase {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    })
    .await
}

/// A one-member cluster `source` with `count` keys, backed up once: its cluster ID and the
/// backup's status.
async fn backed_up_source(ns: &str, count: usize) -> (u64, serde_json::Value) {
    apply(&cluster_yaml(ns, "source", 1, "3.5.35", false));
    let ready = wait_running(ns, "source", 1, Duration::from_secs(120)).await;
    let mut etcd = etcd(ns, &ready).await;
    write_keys(&mut etcd, "restore", count).await;
    let id = cluster_id(&mut etcd).await;
    create_secret(ns);
    let path = format!("{BUCKET}/{}", empty_prefix(ns, "source"));
    apply(&backup_yaml(ns, "once", "clusterName: source", &path, ""));
    let status = wait_for(
        "the backup to succeed",
        Duration::from_secs(120),
        || async {
            let status = object_json("etcdbackup", ns, "once")["status"].clone();
            if status["succeeded"] == true {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        },
    )
    .await;
    (id, status)
}

#[tokio::test]
async fn a_restore_makes_a_new_three_member_cluster_with_every_key_and_a_new_cluster_id() {
    let ns = Namespace::create("restore-new");
    let (source_id, backup) = backed_up_source(&ns.0, 1000).await;

    // The prefix: the newest snapshot under it is used.
    let size = "  clusterSpec:\n    size: 3\n    version: \"3.5.35\"\n";
    let path = format!("{BUCKET}/{}/source", ns.0);
    apply(&restore_yaml(&ns.0, "again", "restored", &path, size));
    let status = wait_phase(&ns.0, "again", "Succeeded", Duration::from_secs(300)).await;
    let ready = wait_running(&ns.0, "restored", 3, Duration::from_secs(60)).await;

    let mut etcd = etcd(&ns.0, &ready).await;
    assert_keys(&mut etcd, "restore", 1000).await;
    let new_id = cluster_id(&mut etcd).await;
    assert_ne!(new_id, source_id, "a restore makes a new etcd cluster");
    assert_voters(&member_list(&mut etcd).await, 3);
    assert_eq!(status["succeeded"], true, "{status}");
    assert_eq!(status["clusterID"], format!("{new_id:x}"), "{status}");
    assert_eq!(
        status["restoredRevision"], backup["etcdRevision"],
        "{status}"
    );
    assert_eq!(status["snapshot"], backup["lastBackupPath"], "{status}");
    assert_eq!(status["sha256"], backup["lastBackupSha256"], "{status}");
    assert!(!event_names(&ns.0, "reason=ClusterCreated").is_empty());
    assert!(!event_names(&ns.0, "reason=RestoreSucceeded").is_empty());
    // The new cluster belongs to no one: it outlives its EtcdRestore.
    let cluster = object_json("etcd", &ns.0, "restored");
    assert!(
        cluster["metadata"]["ownerReferences"].is_null(),
        "{cluster}"
    );
    let (ok, out) = kubectl(&["delete", "etcdrestore", "again", "-n", &ns.0], None);
    assert!(ok, "{out}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        object_json("etcd", &ns.0, "restored")["metadata"]["uid"],
        cluster["metadata"]["uid"]
    );
    assert_keys(&mut etcd, "restore", 1000).await;
}

#[tokio::test]
async fn a_restore_over_an_existing_cluster_or_from_a_missing_path_is_refused_touching_nothing() {
    let ns = Namespace::create("restore-refused");
    let (source_id, _) = backed_up_source(&ns.0, 100).await;
    let pods_before = pod_uids(&ns.0);
    let path = format!("{BUCKET}/{}/source", ns.0);

    apply(&restore_yaml(&ns.0, "over", "source", &path, ""));
    let refused = wait_phase(&ns.0, "over", "Refused", Duration::from_secs(60)).await;
    assert_eq!(refused["reason"], "ClusterExists", "{refused}");
    assert_eq!(refused["succeeded"], false, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("nothing was touched"),
        "{refused}"
    );
    assert!(!event_names(&ns.0, "reason=ClusterExists").is_empty());

    let missing = format!("{BUCKET}/{}/no-such-prefix", ns.0);
    apply(&restore_yaml(&ns.0, "missing", "nothing", &missing, ""));
    let refused = wait_phase(&ns.0, "missing", "Refused", Duration::from_secs(60)).await;
    assert_eq!(refused["reason"], "BackupNotFound", "{refused}");
    assert!(!event_names(&ns.0, "reason=BackupNotFound").is_empty());
    let (found, _) = kubectl(&["get", "etcd", "nothing", "-n", &ns.0], None);
    assert!(!found, "a refused restore created a cluster");

    // The existing cluster is untouched: the same pods, cluster and keys.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(pod_uids(&ns.0), pods_before);
    let ready = wait_running(&ns.0, "source", 1, Duration::from_secs(30)).await;
    let mut etcd = etcd(&ns.0, &ready).await;
    assert_eq!(cluster_id(&mut etcd).await, source_id);
    assert_keys(&mut etcd, "restore", 100).await;
}

#[tokio::test]
async fn a_restore_from_a_snapshot_with_flipped_bytes_is_refused_and_creates_nothing() {
    let ns = Namespace::create("restore-corrupt");
    let (_, backup) = backed_up_source(&ns.0, 1000).await;
    // Flip bytes in the middle of the stored snapshot, in the server's own directory.
    let path = backup["lastBackupPath"].as_str().unwrap().to_string();
    let file = env_dir().join("s3/root").join(&path);
    let mut bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + 16] {
        *b ^= 0xff;
    }
    std::fs::write(&file, &bytes).unwrap();

    // Both ways of naming it: the exact snapshot, and the prefix it is the newest under.
    let prefix = format!("{BUCKET}/{}/source", ns.0);
    for (restore, cluster, named) in [
        ("exact", "from-exact", path.as_str()),
        ("newest", "from-newest", prefix.as_str()),
    ] {
        apply(&restore_yaml(&ns.0, restore, cluster, named, ""));
        let refused = wait_phase(&ns.0, restore, "Refused", Duration::from_secs(60)).await;
        assert_eq!(refused["reason"], "ChecksumMismatch", "{refused}");
        assert_eq!(refused["succeeded"], false, "{refused}");
        let message = refused["message"].as_str().unwrap();
        assert!(message.contains("nothing was created"), "{refused}");
        let (found, _) = kubectl(&["get", "etcd", cluster, "-n", &ns.0], None);
        assert!(!found, "a refused restore created EtcdCluster {cluster}");
    }
    assert!(!event_names(&ns.0, "reason=ChecksumMismatch").is_empty());
    // No pod but the source's own.
    let (_, pods) = kubectl(
        &[
            "get",
            "pods",
            "-n",
            &ns.0,
            "-o",
            "name",
            "-l",
            "etcd_cluster!=source",
        ],
        None,
    );
    assert!(pods.trim().is_empty(), "{pods}");
}
