//! Recovery from a permanent loss of quorum (`spec.recovery`): two of three members gone
//! with their claims come back from the survivor (`FromSurvivor`), or only once the
//! annotation asks for it (`Manual`); every member gone with its data comes back from the
//! newest backup (`FromBackup`), the status reporting the revisions lost. Each recovery is
//! recorded in `status.recovery` and an Event before it acts.

use std::time::Duration;

use etcd_operator::api::EtcdClusterStatus;

use crate::operator::OperatorStopped;
use crate::support::*;
use crate::volumes::claimed_cluster_yaml;

/// The annotation that asks for a recovery.
const RECOVER: &str = "etcd.database.coreos.com/recover";

/// `spec.recovery` lines of a cluster manifest.
fn recovery_lines(policy: &str, extra: &str) -> String {
    format!("  recovery:\n    policy: {policy}\n    quorumLossSeconds: 10\n{extra}")
}

/// What [`two_of_three_lost`] leaves.
struct TwoLost {
    /// The member that keeps its data.
    survivor: String,
    /// The two members gone with their data.
    victims: Vec<String>,
    /// The etcd cluster ID before the loss.
    id: u64,
}

/// A claimed cluster of three with 1,000 keys, then two of its members gone with their
/// data (claims deleted first, so no new pod is put on them).
async fn two_of_three_lost(ns: &str, name: &str, policy: &str) -> TwoLost {
    apply(&format!(
        "{}{}",
        claimed_cluster_yaml(ns, name, 3),
        recovery_lines(policy, "")
    ));
    let ready = wait_running(ns, name, 3, Duration::from_secs(180)).await;
    let mut client = etcd(ns, &ready).await;
    write_keys(&mut client, name, 1000).await;
    let id = cluster_id(&mut client).await;
    // Both gone at once as the operator sees it: between two separate losses it would
    // rightly replace the first member while the other two still held a quorum, and with
    // the second pod slow to stop, the second too (heal.rs's quorum test, the same).
    let stopped = OperatorStopped::new().await;
    for victim in &ready[1..] {
        let claim = format!("{victim}-data");
        let (ok, out) = kubectl(&["delete", "pvc", &claim, "-n", ns, "--wait=false"], None);
        assert!(ok, "{out}");
    }
    delete_pods(ns, &ready[1..]);
    drop(stopped);
    TwoLost {
        survivor: ready[0].clone(),
        victims: ready[1..].to_vec(),
        id,
    }
}

/// Waits until `status.recovery` records a finished recovery; returns the status.
async fn recovered(ns: &str, name: &str) -> EtcdClusterStatus {
    let what = "the recovery to be recorded as finished";
    wait_status(ns, name, what, Duration::from_secs(300), |s| {
        s.recovery
            .as_ref()
            .is_some_and(|r| r.finished.is_some() && r.restored_revision.is_some())
    })
    .await
}

/// Three voting members again, each answering with every key and cluster `id`.
async fn back_to_three_with_every_key(ns: &str, name: &str, id: Option<u64>) {
    let ready = wait_running(ns, name, 3, Duration::from_secs(300)).await;
    let mut client = etcd(ns, &ready).await;
    assert_voters(&member_list(&mut client).await, 3);
    assert_keys(&mut client, name, 1000).await;
    if let Some(id) = id {
        assert_eq!(cluster_id(&mut client).await, id, "the same etcd cluster");
    }
}

#[tokio::test]
async fn two_of_three_members_gone_with_their_claims_come_back_from_the_survivor_with_every_key() {
    let ns = Namespace::create("recover-survivor");
    let lost = two_of_three_lost(&ns.0, "survivor", "FromSurvivor").await;
    let status = recovered(&ns.0, "survivor").await;
    let record = status.recovery.expect("recorded");
    assert_eq!(record.policy, "FromSurvivor");
    assert_eq!(record.survivor.as_deref(), Some(lost.survivor.as_str()));
    let mut victims = lost.victims.clone();
    victims.sort();
    assert_eq!(record.lost, victims, "the members gone with their data");
    assert!(record.restored_revision >= Some(1000), "{record:?}");
    assert!(!event_names(&ns.0, "reason=RecoveryStarted").is_empty());
    // Raised once the finish is written in status.
    wait_event(&ns.0, "reason=RecoveryFinished").await;
    back_to_three_with_every_key(&ns.0, "survivor", Some(lost.id)).await;
}

#[tokio::test]
async fn with_a_manual_policy_nothing_happens_until_the_annotation_asks_for_a_recovery() {
    let ns = Namespace::create("recover-manual");
    let TwoLost { survivor, id, .. } = two_of_three_lost(&ns.0, "manual", "Manual").await;
    let what = "QuorumLost naming the annotation";
    let hint = format!("{RECOVER}=FromSurvivor");
    wait_status(&ns.0, "manual", what, Duration::from_secs(120), |s| {
        s.reason == "QuorumLost" && s.message.contains(&hint) && s.message.contains(&survivor)
    })
    .await;
    let pods = pod_uids(&ns.0);
    // Well past quorumLossSeconds: still nothing.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let api = clusters(&ns.0).await;
    let status = api.get("manual").await.unwrap().status.unwrap_or_default();
    assert!(status.recovery.is_none(), "{:?}", status.recovery);
    assert_eq!(pod_uids(&ns.0), pods, "no pod was touched");
    let (ok, out) = kubectl(
        &[
            "annotate",
            "etcdcluster",
            "manual",
            "-n",
            &ns.0,
            &format!("{RECOVER}=FromSurvivor"),
        ],
        None,
    );
    assert!(ok, "{out}");
    let status = recovered(&ns.0, "manual").await;
    assert_eq!(
        status.recovery.unwrap().survivor.as_deref(),
        Some(survivor.as_str())
    );
    let annotations =
        object_json("etcdcluster", &ns.0, "manual")["metadata"]["annotations"].clone();
    assert!(annotations.get(RECOVER).is_none(), "used up: {annotations}");
    back_to_three_with_every_key(&ns.0, "manual", Some(id)).await;
}

#[tokio::test]
async fn every_member_gone_with_its_data_comes_back_from_the_newest_backup_reporting_the_revisions_lost()
 {
    let ns = Namespace::create("recover-backup");
    create_secret(&ns.0);
    let path = format!("{BUCKET}/{}/restored", ns.0);
    let backup = format!(
        "    backup:\n      backupStorageType: S3\n      s3:\n        path: {path}\n        \
         awsSecret: aws\n        endpoint: {}\n        forcePathStyle: true\n",
        s3_file("endpoint")
    );
    apply(&format!(
        "{}{}",
        cluster_yaml(&ns.0, "restored", 3, "3.5.35", false),
        recovery_lines("FromBackup", &backup)
    ));
    let ready = wait_running(&ns.0, "restored", 3, Duration::from_secs(180)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "restored", 1000).await;
    apply(&backup_yaml(
        &ns.0,
        "once",
        "clusterName: restored",
        &path,
        "",
    ));
    wait_for(
        "the backup to succeed",
        Duration::from_secs(120),
        || async {
            let status = object_json("etcdbackup", &ns.0, "once")["status"].clone();
            match status["succeeded"] == true {
                true => Ok(()),
                false => Err(status.to_string()),
            }
        },
    )
    .await;
    // Written after the backup: the revisions a restore cannot bring back.
    write_keys(&mut client, "after-backup", 50).await;
    wait_status(
        &ns.0,
        "restored",
        "the last revision",
        Duration::from_secs(30),
        |s| s.revision >= Some(1051),
    )
    .await;
    drop(client);
    // Every member's pod (and with it its emptyDir) gone.
    delete_pods(&ns.0, &ready);
    let status = recovered(&ns.0, "restored").await;
    let record = status.recovery.expect("recorded");
    assert_eq!(record.policy, "FromBackup");
    let backup = record.backup.as_ref().expect("the backup restored");
    assert!(backup.s3.path.starts_with(&path), "{}", backup.s3.path);
    let (last, restored) = (
        record.last_revision.unwrap(),
        record.restored_revision.unwrap(),
    );
    assert!(last >= 1051 && restored < last, "window {restored}..{last}");
    assert!(!event_names(&ns.0, "reason=RecoveryStarted").is_empty());
    // The same name and Services.
    for service in ["restored", "restored-client"] {
        let (ok, out) = kubectl(&["get", "service", service, "-n", &ns.0], None);
        assert!(ok, "{out}");
    }
    back_to_three_with_every_key(&ns.0, "restored", None).await;
}
