//! The PodDisruptionBudget of a cluster: voluntary disruptions (evictions, `kubectl drain`)
//! may take its voting members' pods only while a quorum of them stays ready.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::labels::{client_selector, object_meta};
use crate::api::EtcdCluster;

/// The budget named like the cluster over its voting members' pods (learners do not count
/// towards quorum, so they are not in it), with `min_available` of them to stay ready.
/// Pods that are not ready may always be evicted: a member that does not answer holds no
/// part of the quorum, and keeping it would only block a node's drain.
pub(crate) fn disruption_budget(cluster: &EtcdCluster, min_available: u32) -> PodDisruptionBudget {
    let name = cluster.name_any();
    PodDisruptionBudget {
        metadata: object_meta(cluster, name.clone()),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(
                i32::try_from(min_available).unwrap_or(i32::MAX),
            )),
            selector: Some(LabelSelector {
                match_labels: Some(client_selector(&name)),
                ..LabelSelector::default()
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

/// A budget's `minAvailable` when it is a number of pods.
pub(crate) fn min_available(budget: &PodDisruptionBudget) -> Option<u32> {
    match budget.spec.as_ref()?.min_available.as_ref()? {
        IntOrString::Int(n) => u32::try_from(*n).ok(),
        IntOrString::String(_) => None,
    }
}
