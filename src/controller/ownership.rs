//! Which watched objects are the operator's: by their controller ownerReference, never by
//! labels alone. The caches' label selectors only narrow what the API server sends; any
//! user who may create a pod, Service, claim or budget in a namespace can set those
//! labels, so without this filter a tenant could fill the operator's memory (and every
//! tick's scans) with objects it would keep for nothing.
//!
//! Ours: an object whose controller is an EtcdCluster (every pod, Service, claim and
//! budget the operator makes), or an EndpointSlice whose controller is the Service it
//! names (`kubernetes.io/service-name`), as the EndpointSlice controller makes them for
//! the operator's Services. Which cluster, by UID, is still checked where each object is
//! read (`kube_api::cluster_api`); this filter decides only what is kept at all.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::runtime::watcher;

/// The API group of EtcdCluster.
const CLUSTER_GROUP: &str = "etcd.database.coreos.com";

/// The label the EndpointSlice controller puts on a Service's slices.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What owns an object, as far as the caches care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    /// An EtcdCluster (pods, Services, claims, budgets).
    EtcdCluster,
    /// The Service the slice is named for (EndpointSlices).
    NamedService,
}

fn controller_of(object: &impl ResourceExt) -> Option<&OwnerReference> {
    object
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Whether `object` is controlled as `expected` says.
pub fn is_ours(object: &impl ResourceExt, expected: Controller) -> bool {
    let Some(owner) = controller_of(object) else {
        return false;
    };
    match expected {
        Controller::EtcdCluster => {
            owner.kind == "EtcdCluster"
                && owner.api_version.split('/').next() == Some(CLUSTER_GROUP)
        }
        Controller::NamedService => {
            owner.kind == "Service"
                && owner.api_version == "v1"
                && object.labels().get(SERVICE_NAME_LABEL) == Some(&owner.name)
        }
    }
}

/// A watch event with the objects that are not ours taken out: a listed one is dropped,
/// a changed one becomes a deletion (it may have been ours before: the cache forgets it),
/// a deletion passes (forgetting what is not there is a no-op).
pub fn keep_ours<K: ResourceExt>(
    event: watcher::Event<K>,
    expected: Controller,
) -> Option<watcher::Event<K>> {
    match event {
        watcher::Event::InitApply(object) if !is_ours(&object, expected) => None,
        watcher::Event::Apply(object) if !is_ours(&object, expected) => {
            Some(watcher::Event::Delete(object))
        }
        other => Some(other),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::ObjectMeta;

    use super::*;

    fn reference(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(controller),
            ..OwnerReference::default()
        }
    }

    fn pod(owners: Vec<OwnerReference>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                labels: Some([("app".to_string(), "etcd".to_string())].into()),
                owner_references: Some(owners),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn labels_alone_do_not_make_a_pod_ours_an_etcdcluster_controller_does() {
        let cluster = reference("etcd.database.coreos.com/v1beta2", "EtcdCluster", "a", true);
        assert!(is_ours(
            &pod(vec![cluster.clone()]),
            Controller::EtcdCluster
        ));
        assert!(!is_ours(&pod(vec![]), Controller::EtcdCluster));
        let not_controller = reference(
            "etcd.database.coreos.com/v1beta2",
            "EtcdCluster",
            "a",
            false,
        );
        assert!(!is_ours(
            &pod(vec![not_controller]),
            Controller::EtcdCluster
        ));
        let other_group = reference("example.com/v1", "EtcdCluster", "a", true);
        assert!(!is_ours(&pod(vec![other_group]), Controller::EtcdCluster));
        let replica_set = reference("apps/v1", "ReplicaSet", "a", true);
        assert!(!is_ours(&pod(vec![replica_set]), Controller::EtcdCluster));
    }

    #[test]
    fn a_slice_is_ours_when_its_controller_is_the_service_it_is_named_for() {
        let slice = |label: &str, owner: OwnerReference| EndpointSlice {
            metadata: ObjectMeta {
                labels: Some([(SERVICE_NAME_LABEL.to_string(), label.to_string())].into()),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            ..EndpointSlice::default()
        };
        let service = reference("v1", "Service", "demo", true);
        assert!(is_ours(
            &slice("demo", service.clone()),
            Controller::NamedService
        ));
        assert!(!is_ours(&slice("other", service), Controller::NamedService));
        let cluster = reference(
            "etcd.database.coreos.com/v1beta2",
            "EtcdCluster",
            "demo",
            true,
        );
        assert!(!is_ours(&slice("demo", cluster), Controller::NamedService));
    }

    #[test]
    fn foreign_objects_are_dropped_when_listed_and_forgotten_when_changed() {
        let ours = pod(vec![reference(
            "etcd.database.coreos.com/v1beta2",
            "EtcdCluster",
            "a",
            true,
        )]);
        let foreign = pod(vec![]);
        let kept = |e| keep_ours(e, Controller::EtcdCluster);
        assert!(kept(watcher::Event::InitApply(foreign.clone())).is_none());
        assert!(matches!(
            kept(watcher::Event::InitApply(ours.clone())),
            Some(watcher::Event::InitApply(_))
        ));
        assert!(matches!(
            kept(watcher::Event::Apply(foreign.clone())),
            Some(watcher::Event::Delete(_))
        ));
        assert!(matches!(
            kept(watcher::Event::Apply(ours)),
            Some(watcher::Event::Apply(_))
        ));
        assert!(matches!(
            kept(watcher::Event::Delete(foreign)),
            Some(watcher::Event::Delete(_))
        ));
        assert!(matches!(
            kept(watcher::Event::<Pod>::Init),
            Some(watcher::Event::Init)
        ));
        assert!(matches!(
            kept(watcher::Event::<Pod>::InitDone),
            Some(watcher::Event::InitDone)
        ));
    }
}
