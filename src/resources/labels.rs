//! Labels, annotations and owner references that tie a cluster's objects to its
//! EtcdCluster.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::api::EtcdCluster;

/// Label with the cluster name (the CoreOS operator's label, kept so old selectors work).
pub const CLUSTER_LABEL: &str = "etcd_cluster";
/// Label `app=etcd` (CoreOS).
pub const APP_LABEL: &str = "app";
/// Manager label.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of the manager label.
pub const MANAGER: &str = "etcd-operator";

/// Pod annotation: the etcd version the member ran before its last upgrade, kept until it
/// is healthy on the new one. A member that is not healthy in time goes back to it.
pub const UPGRADE_FROM_ANNOTATION: &str = "etcd.database.coreos.com/upgrade-from";

/// Pod label of voting members (`"true"`): the client Service selects it, so learners,
/// which refuse client requests, never receive clients.
pub const VOTER_LABEL: &str = "etcd.database.coreos.com/voter";

/// Labels that select the member pods of `cluster`.
pub fn selector(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.to_string(), "etcd".to_string()),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ])
}

/// Labels the client Service selects: the voting members of `cluster`.
pub fn client_selector(cluster: &str) -> BTreeMap<String, String> {
    let mut labels = selector(cluster);
    labels.insert(VOTER_LABEL.to_string(), "true".to_string());
    labels
}

/// `app=etcd,etcd_cluster=<cluster>` as a label selector string.
pub fn selector_string(cluster: &str) -> String {
    format!("{APP_LABEL}=etcd,{CLUSTER_LABEL}={cluster}")
}

/// Labels of every object the operator creates for `cluster`.
pub fn object_labels(cluster: &str) -> BTreeMap<String, String> {
    let mut labels = selector(cluster);
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGER.to_string());
    labels
}

/// An owner reference to the EtcdCluster, so the garbage collector removes its objects.
pub fn owner_reference(cluster: &EtcdCluster) -> OwnerReference {
    cluster
        .controller_owner_ref(&())
        .expect("an EtcdCluster read from the API has a name and a uid")
}
