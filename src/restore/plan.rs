//! The pure decisions of a restore: whether the named EtcdCluster may be created (never
//! over one that exists), the new cluster made from a verified snapshot, and the status
//! of each outcome.

use std::collections::BTreeMap;

use etcd_operator_core::lifecycle::{Version, check_readable};
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::reason::RestoreReason;
use crate::api::restore::{ClusterRestore, EtcdRestore, EtcdRestoreStatus};
use crate::api::s3::S3Store;
use crate::api::{ClusterCondition, EtcdCluster, EtcdClusterSpec};
use crate::backup::metadata::BackupMetadata;

/// Annotation on an EtcdCluster made by a restore: the EtcdRestore's UID, so that a
/// restarted operator knows the cluster is its own work and not one that was there.
pub const RESTORED_BY_ANNOTATION: &str = "etcd.database.coreos.com/restored-by";
/// Members of a restored cluster when the EtcdRestore gives no `clusterSpec`.
pub const DEFAULT_SIZE: i32 = 3;

/// Why a restore does not proceed: its reason and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The reason status and Events name.
    pub reason: RestoreReason,
    /// For people.
    pub message: String,
}

impl Refusal {
    /// A refusal for `reason`, saying `message`.
    pub fn new(reason: RestoreReason, message: String) -> Self {
        Refusal { reason, message }
    }
}

/// How an EtcdCluster of the restore's name stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    /// There is none: it may be created.
    None,
    /// This restore created it.
    Ours,
    /// Someone else's.
    Other {
        /// It bootstrapped once (has, or had, data).
        bootstrapped: bool,
    },
}

/// How the EtcdCluster `cluster` (if any) stands for the restore with UID `uid`.
pub fn existing(cluster: Option<&EtcdCluster>, uid: &str) -> Existing {
    let Some(cluster) = cluster else {
        return Existing::None;
    };
    if !uid.is_empty()
        && cluster
            .annotations()
            .get(RESTORED_BY_ANNOTATION)
            .map(String::as_str)
            == Some(uid)
    {
        return Existing::Ours;
    }
    let status = cluster.status.as_ref();
    let bootstrapped = status.is_some_and(|s| {
        s.bootstrap.is_some() || !s.members.ready.is_empty() || !s.members.unready.is_empty()
    });
    Existing::Other { bootstrapped }
}

/// The refusal for an EtcdCluster that exists and is not this restore's.
pub fn cluster_exists(name: &str, bootstrapped: bool) -> Refusal {
    let state = if bootstrapped {
        "has bootstrapped (it has, or had, data)"
    } else {
        "exists (its own bootstrap could race a restore)"
    };
    Refusal::new(
        RestoreReason::ClusterExists,
        format!(
            "EtcdCluster {name} {state}: a restore never goes over an existing cluster and \
             nothing was touched; restore into a new name, or delete that cluster first \
             yourself"
        ),
    )
}

/// The etcd version the new cluster runs: its `clusterSpec.version`, else the snapshot's.
fn target_version(restore: &EtcdRestore, metadata: &BackupMetadata) -> String {
    restore
        .spec
        .cluster_spec
        .as_ref()
        .and_then(|s| s.version.clone())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| metadata.etcd_version.clone())
}

/// The new cluster's spec: the `clusterSpec` given, or `DEFAULT_SIZE` members; on the
/// snapshot's etcd version unless it says another; with `restore` naming the snapshot.
pub fn cluster_spec(
    restore: &EtcdRestore,
    metadata: &BackupMetadata,
    source: &S3Store,
) -> EtcdClusterSpec {
    let mut spec = restore
        .spec
        .cluster_spec
        .clone()
        .unwrap_or(EtcdClusterSpec {
            size: DEFAULT_SIZE,
            ..EtcdClusterSpec::default()
        });
    spec.version = Some(target_version(restore, metadata));
    spec.restore = Some(ClusterRestore {
        backup_storage_type: restore.spec.backup_storage_type,
        s3: S3Store {
            path: format!("{}/{}", bucket_of(&source.path), metadata.key),
            ..source.clone()
        },
        sha256: metadata.sha256.clone(),
        size: i64::try_from(metadata.size).unwrap_or(i64::MAX),
        etcd_version: metadata.etcd_version.clone(),
        revision: metadata.revision,
        restore_name: Some(restore.name_any()),
        cluster_id: Some(metadata.cluster_id.clone()),
    });
    spec
}

fn bucket_of(path: &str) -> &str {
    crate::api::s3::split_path(path).0
}

/// The EtcdCluster to create from `metadata`'s snapshot, or why the snapshot cannot be
/// restored with the version the cluster would run. Owned by nobody: it outlives the
/// EtcdRestore.
pub fn new_cluster(
    restore: &EtcdRestore,
    metadata: &BackupMetadata,
    source: &S3Store,
) -> Result<EtcdCluster, Refusal> {
    let version = target_version(restore, metadata);
    let target: Version = version.parse().map_err(|e| {
        Refusal::new(
            RestoreReason::InvalidSpec,
            format!("clusterSpec.version: {e}"),
        )
    })?;
    check_readable(&metadata.etcd_version, &target).map_err(|e| {
        Refusal::new(
            RestoreReason::SnapshotUnreadable,
            format!("snapshot {}: {e}; nothing was created", metadata.key),
        )
    })?;
    let annotations = BTreeMap::from([(
        RESTORED_BY_ANNOTATION.to_string(),
        restore.metadata.uid.clone().unwrap_or_default(),
    )]);
    Ok(EtcdCluster {
        metadata: ObjectMeta {
            name: Some(restore.spec.etcd_cluster.name.clone()),
            namespace: restore.namespace(),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: cluster_spec(restore, metadata, source),
        status: None,
    })
}

/// Why `cluster`'s `spec.restore` is not honoured, when it is not. A restore fetches with
/// the Secret and from the store it names, so only an EtcdRestore may write one: the
/// cluster carries that EtcdRestore's UID ([`RESTORED_BY_ANNOTATION`]) and name
/// (`spec.restore.restoreName`), and `restore` (that EtcdRestore as it is now, `None`
/// when it does not exist) must have that UID, restore into this cluster, and name the
/// same store, Secret and snapshot path.
pub fn restore_problem(cluster: &EtcdCluster, restore: Option<&EtcdRestore>) -> Option<String> {
    let wanted = cluster.spec.restore.as_ref()?;
    let refuse = |why: String| {
        Some(format!(
            "spec.restore is honoured only on an EtcdCluster that an EtcdRestore of its \
             namespace created: {why}; nothing is fetched and no member is started"
        ))
    };
    let name = wanted.restore_name.as_deref().unwrap_or_default();
    if name.is_empty() {
        return refuse("spec.restore.restoreName names no EtcdRestore".into());
    }
    let Some(uid) = cluster.annotations().get(RESTORED_BY_ANNOTATION) else {
        return refuse(format!(
            "the annotation {RESTORED_BY_ANNOTATION} is missing"
        ));
    };
    let Some(restore) = restore else {
        return refuse(format!("EtcdRestore {name} does not exist"));
    };
    if restore.metadata.uid.as_deref() != Some(uid.as_str()) {
        return refuse(format!(
            "EtcdRestore {name} is not the one the annotation {RESTORED_BY_ANNOTATION} names"
        ));
    }
    if restore.spec.etcd_cluster.name != cluster.name_any() {
        return refuse(format!(
            "EtcdRestore {name} restores into {}, not this cluster",
            restore.spec.etcd_cluster.name
        ));
    }
    let same_store = restore.spec.s3.as_ref().is_some_and(|s3| {
        s3.aws_secret == wanted.s3.aws_secret
            && s3.endpoint == wanted.s3.endpoint
            && s3.force_path_style == wanted.s3.force_path_style
            && wanted.s3.path.starts_with(s3.path.trim_end_matches('/'))
    });
    if !same_store {
        return refuse(format!(
            "spec.restore.s3 is not the store, Secret and path EtcdRestore {name} names"
        ));
    }
    None
}

fn condition(ok: bool, reason: &str, message: &str, now: &str) -> ClusterCondition {
    ClusterCondition {
        r#type: "Succeeded".into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Some(now.to_string()),
    }
}

/// The status after a refusal (final) or a failure that is retried.
pub fn refused(restore: &EtcdRestore, refusal: &Refusal, now: &str) -> EtcdRestoreStatus {
    let phase = if refusal.reason.is_final() {
        "Refused"
    } else {
        "Failed"
    };
    EtcdRestoreStatus {
        succeeded: false,
        reason: refusal.reason.as_str().to_string(),
        phase: phase.into(),
        message: refusal.message.clone(),
        conditions: vec![condition(
            false,
            refusal.reason.as_str(),
            &refusal.message,
            now,
        )],
        observed_generation: restore.metadata.generation,
        ..EtcdRestoreStatus::default()
    }
}

/// The status while the new cluster comes up from the snapshot.
pub fn restoring(
    restore: &EtcdRestore,
    source: &ClusterRestore,
    message: String,
    now: &str,
) -> EtcdRestoreStatus {
    EtcdRestoreStatus {
        succeeded: false,
        reason: "Restoring".into(),
        phase: "Restoring".into(),
        conditions: vec![condition(false, "Restoring", &message, now)],
        message,
        snapshot: source.s3.path.clone(),
        sha256: source.sha256.clone(),
        etcd_version: source.etcd_version.clone(),
        restored_revision: source.revision,
        observed_generation: restore.metadata.generation,
        ..EtcdRestoreStatus::default()
    }
}

/// Where a restored cluster stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// It runs with every member, and a member answered with this etcd cluster ID.
    Running {
        /// etcd's cluster ID (hex, as the cluster's bootstrap record has it).
        cluster_id: String,
    },
    /// It is still coming up: what it is doing, for the restore's status.
    ComingUp(String),
}

/// Where the restored cluster stands.
pub fn progress(cluster: &EtcdCluster) -> Progress {
    let status = cluster.status.clone().unwrap_or_default();
    let id = status.bootstrap.as_ref().and_then(|b| b.cluster_id.clone());
    match id {
        Some(cluster_id)
            if status.phase == "Running" && status.ready_members >= cluster.spec.size =>
        {
            Progress::Running { cluster_id }
        }
        _ => Progress::ComingUp(format!(
            "EtcdCluster {} is {} ({}): {} of {} members ready",
            cluster.name_any(),
            if status.phase.is_empty() {
                "being created"
            } else {
                &status.phase
            },
            if status.reason.is_empty() {
                "no status yet"
            } else {
                &status.reason
            },
            status.ready_members,
            cluster.spec.size
        )),
    }
}

/// The status once the cluster runs.
pub fn succeeded(
    restore: &EtcdRestore,
    source: &ClusterRestore,
    cluster: &str,
    cluster_id: &str,
    now: &str,
) -> EtcdRestoreStatus {
    let message = format!(
        "EtcdCluster {cluster} runs with the data of snapshot {} at revision {}, as etcd \
         cluster {cluster_id}",
        source.s3.path, source.revision
    );
    EtcdRestoreStatus {
        succeeded: true,
        cluster_id: cluster_id.to_string(),
        reason: String::new(),
        phase: "Succeeded".into(),
        conditions: vec![condition(true, "Restored", &message, now)],
        ..restoring(restore, source, message, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::restore::{EtcdClusterRef, EtcdRestoreSpec, RestoreStorageType};
    use crate::api::{BootstrapStatus, EtcdClusterStatus};
    use crate::backup::metadata::example;

    fn restore(cluster_spec: Option<EtcdClusterSpec>) -> EtcdRestore {
        let mut r = EtcdRestore::new(
            "again",
            EtcdRestoreSpec {
                etcd_cluster: EtcdClusterRef {
                    name: "prod-restored".into(),
                },
                backup_storage_type: RestoreStorageType::S3,
                s3: Some(source()),
                cluster_spec,
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.uid = Some("uid-1".into());
        r.metadata.generation = Some(2);
        r
    }

    fn source() -> S3Store {
        S3Store {
            path: "etcd-backups/ns/prod".into(),
            aws_secret: "aws".into(),
            endpoint: Some("http://10.255.0.1:7480".into()),
            force_path_style: true,
        }
    }

    fn metadata(version: &str) -> BackupMetadata {
        BackupMetadata {
            revision: 1234,
            etcd_version: version.into(),
            size: 8224,
            namespace: Some("ns".into()),
            ..example("prod", "ns/prod/prod_20261130T103300.123Z_r1234.db")
        }
    }

    #[test]
    fn without_a_cluster_spec_the_new_cluster_has_three_members_on_the_snapshots_version() {
        let cluster = new_cluster(&restore(None), &metadata("3.5.35"), &source()).unwrap();
        assert_eq!(cluster.metadata.name.as_deref(), Some("prod-restored"));
        assert_eq!(cluster.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(
            cluster.metadata.owner_references, None,
            "it outlives the restore"
        );
        assert_eq!(cluster.spec.size, DEFAULT_SIZE);
        assert_eq!(cluster.spec.version.as_deref(), Some("3.5.35"));
        let from = cluster.spec.restore.unwrap();
        assert_eq!(
            from.s3.path,
            "etcd-backups/ns/prod/prod_20261130T103300.123Z_r1234.db"
        );
        assert_eq!((from.revision, from.size), (1234, 8224));
        assert_eq!(from.sha256, "0f".repeat(32));
        assert_eq!(from.s3.aws_secret, "aws");
        assert_eq!(from.restore_name.as_deref(), Some("again"));
        assert_eq!(
            cluster.metadata.annotations.unwrap()[RESTORED_BY_ANNOTATION],
            "uid-1"
        );
    }

    #[test]
    fn a_restore_is_honoured_only_on_the_cluster_its_etcd_restore_made() {
        let made = new_cluster(&restore(None), &metadata("3.5.35"), &source()).unwrap();
        assert_eq!(restore_problem(&made, Some(&restore(None))), None);
        // The EtcdRestore is gone, or is another one under the same name.
        let gone = restore_problem(&made, None).expect("refused");
        assert!(gone.contains("EtcdRestore again does not exist"), "{gone}");
        let mut other = restore(None);
        other.metadata.uid = Some("uid-2".into());
        assert!(restore_problem(&made, Some(&other)).is_some());
    }

    #[test]
    fn a_hand_written_restore_is_refused_whatever_it_copies() {
        let made = new_cluster(&restore(None), &metadata("3.5.35"), &source()).unwrap();
        // No annotation: written by hand.
        let mut by_hand = made.clone();
        by_hand.metadata.annotations = None;
        let problem = restore_problem(&by_hand, Some(&restore(None))).expect("refused");
        assert!(problem.contains(RESTORED_BY_ANNOTATION), "{problem}");
        assert!(problem.contains("nothing is fetched"), "{problem}");
        // The annotation and name copied, another Secret or store named.
        let mut other_secret = made.clone();
        other_secret.spec.restore.as_mut().unwrap().s3.aws_secret = "someone-elses".into();
        let problem = restore_problem(&other_secret, Some(&restore(None))).expect("refused");
        assert!(problem.contains("spec.restore.s3"), "{problem}");
        let mut other_store = made.clone();
        other_store.spec.restore.as_mut().unwrap().s3.endpoint = Some("http://evil:80".into());
        assert!(restore_problem(&other_store, Some(&restore(None))).is_some());
        // Copied onto another cluster.
        let mut elsewhere = made.clone();
        elsewhere.metadata.name = Some("another".into());
        assert!(restore_problem(&elsewhere, Some(&restore(None))).is_some());
        // No spec.restore: nothing to honour, no problem.
        let mut plain = made;
        plain.spec.restore = None;
        assert_eq!(restore_problem(&plain, None), None);
    }

    #[test]
    fn a_cluster_spec_gives_size_and_version_and_pod_policy() {
        let spec = EtcdClusterSpec {
            size: 5,
            version: Some("3.6.16".into()),
            paused: false,
            ..EtcdClusterSpec::default()
        };
        let cluster = new_cluster(&restore(Some(spec)), &metadata("3.5.35"), &source()).unwrap();
        assert_eq!(cluster.spec.size, 5);
        assert_eq!(cluster.spec.version.as_deref(), Some("3.6.16"));
    }

    #[test]
    fn a_snapshot_newer_than_the_cluster_or_two_minors_older_is_refused() {
        for (snapshot, target) in [("3.6.16", "3.5.35"), ("3.4.23", "3.6.16")] {
            let spec = EtcdClusterSpec {
                size: 3,
                version: Some(target.into()),
                ..EtcdClusterSpec::default()
            };
            let refusal =
                new_cluster(&restore(Some(spec)), &metadata(snapshot), &source()).unwrap_err();
            assert_eq!(refusal.reason, RestoreReason::SnapshotUnreadable);
            assert!(refusal.message.contains(snapshot), "{}", refusal.message);
        }
    }

    fn cluster(status: Option<EtcdClusterStatus>, annotation: Option<&str>) -> EtcdCluster {
        let mut c = EtcdCluster::new("prod-restored", EtcdClusterSpec::default());
        c.status = status;
        if let Some(uid) = annotation {
            c.metadata.annotations = Some(BTreeMap::from([(
                RESTORED_BY_ANNOTATION.into(),
                uid.into(),
            )]));
        }
        c
    }

    #[test]
    fn an_existing_cluster_is_never_restored_over_unless_this_restore_made_it() {
        assert_eq!(existing(None, "uid-1"), Existing::None);
        assert_eq!(
            existing(Some(&cluster(None, Some("uid-1"))), "uid-1"),
            Existing::Ours
        );
        assert_eq!(
            existing(Some(&cluster(None, Some("uid-0"))), "uid-1"),
            Existing::Other {
                bootstrapped: false
            }
        );
        let born = EtcdClusterStatus {
            bootstrap: Some(BootstrapStatus {
                cluster_id: Some("1a2b".into()),
                ..BootstrapStatus::default()
            }),
            ..EtcdClusterStatus::default()
        };
        assert_eq!(
            existing(Some(&cluster(Some(born), None)), "uid-1"),
            Existing::Other { bootstrapped: true }
        );
        let refusal = cluster_exists("prod", true);
        assert_eq!(refusal.reason, RestoreReason::ClusterExists);
        assert!(
            refusal.message.contains("nothing was touched"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_restore_succeeds_once_its_cluster_runs_every_member_with_an_id() {
        let mut c = cluster(None, Some("uid-1"));
        c.spec.size = 3;
        let mut status = EtcdClusterStatus {
            phase: "Running".into(),
            ready_members: 2,
            bootstrap: Some(BootstrapStatus {
                cluster_id: Some("9f8e".into()),
                ..BootstrapStatus::default()
            }),
            ..EtcdClusterStatus::default()
        };
        c.status = Some(status.clone());
        assert!(matches!(progress(&c), Progress::ComingUp(m) if m.contains("2 of 3")));
        status.ready_members = 3;
        c.status = Some(status);
        assert_eq!(
            progress(&c),
            Progress::Running {
                cluster_id: "9f8e".into()
            }
        );
    }

    #[test]
    fn a_retried_failure_is_failed_and_a_final_one_refused() {
        let r = restore(None);
        let down = RestoreReason::Store("StoreUnreachable");
        let failed = refused(&r, &Refusal::new(down, "down".into()), "t");
        assert_eq!((failed.phase.as_str(), failed.succeeded), ("Failed", false));
        let none = Refusal::new(RestoreReason::BackupNotFound, "none".into());
        let final_ = refused(&r, &none, "t");
        assert_eq!(final_.phase, "Refused");
        assert_eq!(final_.observed_generation, Some(2));
        assert_eq!(final_.conditions[0].status, "False");
    }
}
