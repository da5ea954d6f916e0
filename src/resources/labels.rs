//! Labels, annotations and owner references that tie a cluster's objects to its
//! EtcdCluster.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::api::EtcdCluster;

/// Label with the cluster name (the CoreOS operator's label, kept so old selectors work).
pub(crate) const CLUSTER_LABEL: &str = "etcd_cluster";
/// Label `app=etcd` (CoreOS).
pub(crate) const APP_LABEL: &str = "app";
/// Manager label.
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of the manager label.
pub(crate) const MANAGER: &str = "etcd-operator";

/// Pod annotation: the etcd version the member ran before its last upgrade, kept until it
/// is healthy on the new one. A member that is not healthy in time goes back to it.
pub(crate) const UPGRADE_FROM_ANNOTATION: &str = "etcd.database.coreos.com/upgrade-from";

/// Pod annotation: the digest of the repository and pod policy the pod was built from.
pub(crate) const POD_TEMPLATE_ANNOTATION: &str = "etcd.database.coreos.com/pod-template";

/// Pod annotation: the TLS mode the pod was built with (`Off`, `Static`, `Auto`); pods
/// without it were made before TLS existed and run plain HTTP.
pub(crate) const TLS_ANNOTATION: &str = "etcd.database.coreos.com/tls";

/// Pod annotation of a prepared joiner (a pod made before its `member add`): the members
/// it was built to join, by name, comma-separated. Its etcd waits in an init container
/// until the member list holds its peer URL.
pub(crate) const PREPARED_ANNOTATION: &str = "etcd.database.coreos.com/prepared-with";
/// Pod annotation (`"true"`): the pod restarts its member alone with `--force-new-cluster`
/// (a recovery from a survivor). Such a pod is made again without the flag once the
/// member runs alone, so that no restart of its container drops members added later.
pub(crate) const FORCE_NEW_CLUSTER_ANNOTATION: &str = "etcd.database.coreos.com/force-new-cluster";

/// Pod label of voting members (`"true"`): the client Service selects it, so learners,
/// which refuse client requests, never receive clients.
pub(crate) const VOTER_LABEL: &str = "etcd.database.coreos.com/voter";

/// Labels that select the member pods of `cluster`.
pub fn selector(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.to_string(), "etcd".to_string()),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ])
}

/// Labels the client Service selects: the voting members of `cluster`.
pub(crate) fn client_selector(cluster: &str) -> BTreeMap<String, String> {
    let mut labels = selector(cluster);
    labels.insert(VOTER_LABEL.to_string(), "true".to_string());
    labels
}

/// Labels of every object the operator creates for `cluster`.
pub(crate) fn object_labels(cluster: &str) -> BTreeMap<String, String> {
    let mut labels = selector(cluster);
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGER.to_string());
    labels
}

/// The metadata of an object the operator makes for `cluster`: named `name` in the
/// cluster's namespace, with the cluster's labels, owned by the cluster.
pub(crate) fn object_meta(cluster: &EtcdCluster, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cluster.namespace(),
        labels: Some(object_labels(&cluster.name_any())),
        owner_references: Some(vec![owner_reference(cluster)]),
        ..ObjectMeta::default()
    }
}

/// An owner reference to the EtcdCluster, so the garbage collector removes its objects.
pub(crate) fn owner_reference(cluster: &EtcdCluster) -> OwnerReference {
    cluster
        .controller_owner_ref(&())
        .expect("an EtcdCluster read from the API has a name and a uid")
}
