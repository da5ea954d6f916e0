//! Reduces an `EtcdCluster` to what the lifecycle decides on.

use etcd_operator_actors::lifecycle::DesiredCluster;
use kube::ResourceExt;

use super::EtcdCluster;
use super::names::name_problem;

/// The lifecycle's view of an EtcdCluster's spec.
pub(crate) fn desired_cluster(cluster: &EtcdCluster) -> DesiredCluster {
    let spec = &cluster.spec;
    DesiredCluster {
        size: u32::try_from(spec.size).unwrap_or(0),
        version: spec.version_or_default().to_string(),
        paused: spec.paused,
        tls_requested: spec.tls.as_ref().is_some_and(|t| t.r#static.is_some()),
        // The CRD refuses such names; this catches objects created before it did.
        name_problem: name_problem(
            &cluster.namespace().unwrap_or_default(),
            &cluster.name_any(),
        ),
        generation: cluster.metadata.generation.unwrap_or_default(),
        uid: cluster.metadata.uid.clone().unwrap_or_default(),
        pod_template: spec.pod_template_digest(),
    }
}
