//! The PodDisruptionBudget of a cluster: voluntary disruptions (evictions, `kubectl drain`)
//! may take its voting members' pods only while a quorum of them stays ready.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::data_volume::data_on_claim;
use super::labels::{client_selector, object_meta};
use crate::api::EtcdCluster;

/// Unready pods are evicted like ready ones: only while the budget holds.
pub(crate) const IF_HEALTHY_BUDGET: &str = "IfHealthyBudget";
/// Unready pods may always be evicted.
pub(crate) const ALWAYS_ALLOW: &str = "AlwaysAllow";

/// The `unhealthyPodEvictionPolicy` of a cluster's budget. An unready member's pod may
/// always be evicted only when every member keeps its data on a claim: its pod comes back
/// on that claim with its data. A member on an emptyDir loses its data with its pod, and
/// when every member is unready at once (an alarm, no leader) `AlwaysAllow` would admit
/// the eviction of all of them; so with any member on an emptyDir, unready pods count
/// like the others (`IfHealthyBudget`).
pub(crate) fn eviction_policy(every_member_on_claim: bool) -> &'static str {
    if every_member_on_claim {
        ALWAYS_ALLOW
    } else {
        IF_HEALTHY_BUDGET
    }
}

/// Whether every member keeps its data on a claim: the spec asks for claims and each of
/// the cluster's `pods` (there is at least one) has its data volume on one. A pod made
/// before the spec asked for claims is still on an emptyDir.
pub(crate) fn every_member_on_claim<'a>(
    cluster: &EtcdCluster,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> bool {
    let claims_asked = cluster
        .spec
        .pod
        .as_ref()
        .is_some_and(|p| p.persistent_volume_claim_spec.is_some());
    let mut pods = pods.into_iter().peekable();
    claims_asked && pods.peek().is_some() && pods.all(data_on_claim)
}

/// The budget named like the cluster over its voting members' pods (learners do not count
/// towards quorum, so they are not in it), with `min_available` of them to stay ready,
/// and the [`eviction_policy`] of unready pods.
pub(crate) fn disruption_budget(
    cluster: &EtcdCluster,
    min_available: u32,
    every_member_on_claim: bool,
) -> PodDisruptionBudget {
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
            unhealthy_pod_eviction_policy: Some(eviction_policy(every_member_on_claim).into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

/// A budget's `unhealthyPodEvictionPolicy`, when set.
pub(crate) fn budget_eviction_policy(budget: &PodDisruptionBudget) -> Option<&str> {
    budget
        .spec
        .as_ref()?
        .unhealthy_pod_eviction_policy
        .as_deref()
}

/// A budget's `minAvailable` when it is a number of pods.
pub(crate) fn min_available(budget: &PodDisruptionBudget) -> Option<u32> {
    match budget.spec.as_ref()?.min_available.as_ref()? {
        IntOrString::Int(n) => u32::try_from(*n).ok(),
        IntOrString::String(_) => None,
    }
}
