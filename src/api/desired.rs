//! Reduces an `EtcdCluster` to what the lifecycle decides on.

use etcd_operator_core::lifecycle::{DesiredCluster, RECOVER_ANNOTATION, Requests, Storage};
use kube::ResourceExt;

use super::EtcdCluster;
use super::maintenance;
use super::names::name_problem;
use super::pod_security;
use super::recovery::ClusterRecovery;
use super::reserved;
use super::restore::snapshot_source;

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
            .and_then(|p| reserved::pod_policy_problem(p).or_else(|| pod_security::problem(p)))
            .or_else(|| {
                let compaction = spec.compaction.as_ref();
                maintenance::conflict(compaction, spec.quota_backend_bytes, spec.etcd_env())
            }),
        generation: cluster.metadata.generation.unwrap_or_default(),
        uid: cluster.metadata.uid.clone().unwrap_or_default(),
        pod_template: spec.pod_template_digest(),
        storage: storage(cluster),
        quota_backend_bytes: maintenance::quota_backend_bytes(
            spec.quota_backend_bytes,
            spec.etcd_env(),
        ),
        compaction: maintenance::compaction(spec.compaction.as_ref(), spec.etcd_env()),
        defragmentation: maintenance::defragmentation(spec.defragmentation.as_ref()),
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
    let bytes = etcd_operator_core::quantity::bytes(&quantity).ok()?;
    Some(Storage { quantity, bytes })
}
