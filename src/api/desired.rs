//! Reduces an `EtcdCluster` to what the lifecycle decides on.

use etcd_operator_actors::lifecycle::{
    DesiredCluster, RECOVER_ANNOTATION, Requests, SnapshotSource, Storage,
};
use kube::ResourceExt;

use super::EtcdCluster;
use super::names::name_problem;
use super::pod_security;
use super::quantity;
use super::recovery::ClusterRecovery;
use super::reserved;
use super::restore::{ClusterRestore, RestoreStorageType, S3RestoreSource};

/// The lifecycle's view of an EtcdCluster's spec.
pub(crate) fn desired_cluster(cluster: &EtcdCluster) -> DesiredCluster {
    let spec = &cluster.spec;
    DesiredCluster {
        size: u32::try_from(spec.size).unwrap_or(0),
        version: spec.version_or_default().to_string(),
        paused: spec.paused,
        deleting: cluster.metadata.deletion_timestamp.is_some(),
        tls: spec.tls_mode(),
        // The CRD refuses such names; this catches objects created before it did.
        name_problem: name_problem(
            &cluster.namespace().unwrap_or_default(),
            &cluster.name_any(),
        ),
        // The operator's configuration decides; the watch checks it (`controller::watch`).
        image_problem: None,
        pod_policy_problem: spec
            .pod
            .as_ref()
            .and_then(|p| reserved::pod_policy_problem(p).or_else(|| pod_security::problem(p))),
        generation: cluster.metadata.generation.unwrap_or_default(),
        uid: cluster.metadata.uid.clone().unwrap_or_default(),
        pod_template: spec.pod_template_digest(),
        storage: storage(cluster),
        restore: spec.restore.as_ref().map(snapshot_source),
        recovery: ClusterRecovery::to_spec(spec.recovery.as_ref(), cluster.annotations()),
        requests: requests(cluster),
    }
}

/// The annotations that ask the operator for something, as written.
fn requests(cluster: &EtcdCluster) -> Requests {
    let annotation = |key: &str| cluster.annotations().get(key).cloned();
    Requests {
        rotate_ca: annotation(super::annotations::ROTATE_ANNOTATION),
        recover: annotation(RECOVER_ANNOTATION),
    }
}

/// A snapshot as `spec.restore` (and `status.recovery.backup`) write it: the reverse of
/// [`snapshot_source`].
pub(crate) fn cluster_restore(source: &SnapshotSource) -> ClusterRestore {
    ClusterRestore {
        backup_storage_type: RestoreStorageType::S3,
        s3: S3RestoreSource {
            path: source.path(),
            aws_secret: source.secret.clone(),
            endpoint: source.endpoint.clone(),
            force_path_style: source.force_path_style,
        },
        sha256: source.sha256.clone(),
        size: i64::try_from(source.size).unwrap_or(i64::MAX),
        etcd_version: source.etcd_version.clone(),
        revision: source.revision,
        restore_name: None,
        cluster_id: source.cluster_id.map(|id| format!("{id:x}")),
    }
}

/// `spec.restore` as the lifecycle takes it.
pub(crate) fn snapshot_source(restore: &ClusterRestore) -> SnapshotSource {
    let (bucket, key) = crate::backup::naming::split_path(&restore.s3.path);
    SnapshotSource {
        bucket: bucket.to_string(),
        key: key.to_string(),
        endpoint: restore.s3.endpoint.clone().filter(|e| !e.is_empty()),
        force_path_style: restore.s3.force_path_style,
        secret: restore.s3.aws_secret.clone(),
        sha256: restore.sha256.clone(),
        size: u64::try_from(restore.size).unwrap_or(0),
        etcd_version: restore.etcd_version.clone(),
        revision: restore.revision,
        cluster_id: restore
            .cluster_id
            .as_deref()
            .and_then(|id| u64::from_str_radix(id, 16).ok()),
    }
}

/// The storage each member's claim asks for, when members are on claims and it is a
/// quantity.
fn storage(cluster: &EtcdCluster) -> Option<Storage> {
    let claim = cluster
        .spec
        .pod
        .as_ref()?
        .persistent_volume_claim_spec
        .as_ref()?;
    let quantity = claim
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?
        .0
        .clone();
    let bytes = quantity::bytes(&quantity)?;
    Some(Storage { quantity, bytes })
}
