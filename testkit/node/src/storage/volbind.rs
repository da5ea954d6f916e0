//! The scheduler's volume binding, for the one node that binds pods to itself: whether a
//! pod's claims let it be bound here now, must first be given this node
//! (`volume.kubernetes.io/selected-node`, so that a WaitForFirstConsumer class provisions
//! them here), or keep it pending, and why, in the scheduler's words.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

use super::{ANN_SELECTED_NODE, StorageView, affinity, annotation, claim_class};

/// The provisioner of classes whose volumes are all made by hand.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// What the pod's claims allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeBinding {
    /// No claim, or every claim bound to a volume this node may use: bind the pod.
    Ready,
    /// These claims wait for a node to provision on: give them this node, then wait.
    SelectNode(Vec<String>),
    /// The pod stays pending, for this reason.
    Wait(String),
}

/// What one claim allows.
enum ClaimState {
    /// Bound to a volume this node may use.
    Usable,
    /// Unbound, of a WaitForFirstConsumer class, no node selected yet.
    NeedsNode,
    /// On its way (provisioning or binding here): wait, nothing to do.
    Pending(String),
    /// Not usable here, for this reason.
    Blocked(String),
}

/// The claims a pod's volumes name (`persistentVolumeClaim.claimName`), in order.
pub fn claim_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect()
}

/// What the claims of `pod` allow on the node `node` with `labels`. A claim that blocks
/// wins over claims that need this node: no claim is given a node the pod cannot use.
pub fn decide(
    pod: &Pod,
    node: &str,
    labels: &BTreeMap<String, String>,
    view: &impl StorageView,
) -> VolumeBinding {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut select = Vec::new();
    let mut pending = None;
    for name in claim_names(pod) {
        match claim_state(namespace, &name, node, labels, view) {
            ClaimState::Usable => {}
            ClaimState::NeedsNode => select.push(name),
            ClaimState::Pending(why) => pending = pending.or(Some(why)),
            ClaimState::Blocked(why) => return VolumeBinding::Wait(why),
        }
    }
    match (select.is_empty(), pending) {
        (false, _) => VolumeBinding::SelectNode(select),
        (true, Some(why)) => VolumeBinding::Wait(why),
        (true, None) => VolumeBinding::Ready,
    }
}

fn claim_state(
    namespace: &str,
    name: &str,
    node: &str,
    labels: &BTreeMap<String, String>,
    view: &impl StorageView,
) -> ClaimState {
    let Some(claim) = view.claim(namespace, name) else {
        return ClaimState::Blocked(format!("persistentvolumeclaim {name:?} not found"));
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return ClaimState::Blocked(format!("persistentvolumeclaim {name:?} is being deleted"));
    }
    let volume_name = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    match volume_name.filter(|v| !v.is_empty()) {
        Some(volume) => bound_state(&claim, volume, node, labels, view),
        None => unbound_state(&claim, node, view),
    }
}

/// A claim that names its volume: usable once bound, if the volume may be used here.
fn bound_state(
    claim: &PersistentVolumeClaim,
    volume: &str,
    node: &str,
    labels: &BTreeMap<String, String>,
    view: &impl StorageView,
) -> ClaimState {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let Some(pv) = view.volume(volume) else {
        return ClaimState::Blocked(format!("persistentvolume {volume:?} not found"));
    };
    if !affinity::volume_allows(&pv, node, labels) {
        return ClaimState::Blocked(format!(
            "node(s) had volume node affinity conflict (persistentvolumeclaim {name:?}, volume {volume:?})"
        ));
    }
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase == Some("Bound") {
        ClaimState::Usable
    } else {
        ClaimState::Pending(format!(
            "waiting for persistentvolumeclaim {name:?} to be bound to volume {volume:?}"
        ))
    }
}

/// A claim without a volume: only a WaitForFirstConsumer class with a provisioner can
/// give it one here.
fn unbound_state(claim: &PersistentVolumeClaim, node: &str, view: &impl StorageView) -> ClaimState {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let immediate =
        || ClaimState::Blocked("pod has unbound immediate PersistentVolumeClaims".into());
    let Some(class_name) = claim_class(claim) else {
        return immediate();
    };
    let Some(class) = view.class(class_name) else {
        return ClaimState::Blocked(format!(
            "storageclass.storage.k8s.io {class_name:?} not found"
        ));
    };
    if class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
        return immediate();
    }
    if class.provisioner == NO_PROVISIONER {
        return ClaimState::Blocked(
            "node(s) didn't find available persistent volumes to bind".into(),
        );
    }
    match annotation(&claim.metadata, ANN_SELECTED_NODE) {
        None => ClaimState::NeedsNode,
        Some(selected) if selected == node => ClaimState::Pending(format!(
            "waiting for persistentvolumeclaim {name:?} to be provisioned by {} and bound",
            class.provisioner
        )),
        Some(other) => ClaimState::Blocked(format!(
            "persistentvolumeclaim {name:?} is provisioned for node {other:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{
        PersistentVolume, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
        PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, PodSpec, Volume,
    };
    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::json;

    #[derive(Default)]
    struct View {
        claims: BTreeMap<String, PersistentVolumeClaim>,
        volumes: BTreeMap<String, PersistentVolume>,
        classes: BTreeMap<String, StorageClass>,
    }

    impl StorageView for View {
        fn claim(&self, ns: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
            self.claims
                .get(&format!("{ns}/{name}"))
                .cloned()
                .map(Arc::new)
        }
        fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
            self.volumes.get(name).cloned().map(Arc::new)
        }
        fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
            self.classes.get(name).cloned().map(Arc::new)
        }
    }

    fn labels(node: &str) -> BTreeMap<String, String> {
        [("kubernetes.io/hostname".to_string(), node.to_string())].into()
    }

    fn pod(claims: &[&str]) -> Pod {
        let volumes = claims
            .iter()
            .map(|c| Volume {
                name: format!("v-{c}"),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: c.to_string(),
                    read_only: None,
                }),
                ..Default::default()
            })
            .collect();
        let mut pod = Pod {
            spec: Some(PodSpec {
                volumes: Some(volumes),
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.metadata.namespace = Some("ns".into());
        pod
    }

    fn class(mode: &str, provisioner: &str) -> StorageClass {
        serde_json::from_value(json!({
            "metadata": {"name": "local-path"},
            "provisioner": provisioner,
            "volumeBindingMode": mode,
        }))
        .unwrap()
    }

    fn claim(name: &str, class: Option<&str>, selected: Option<&str>) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: class.map(String::from),
                ..Default::default()
            }),
            ..Default::default()
        };
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        if let Some(node) = selected {
            c.metadata.annotations =
                Some([(ANN_SELECTED_NODE.to_string(), node.to_string())].into());
        }
        c
    }

    fn bound(mut c: PersistentVolumeClaim, volume: &str) -> PersistentVolumeClaim {
        c.spec.as_mut().unwrap().volume_name = Some(volume.into());
        c.status = Some(PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        c
    }

    fn pinned(node: &str) -> PersistentVolume {
        PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                node_affinity: serde_json::from_value(json!({"required": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
                ]}}))
                .unwrap(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn view() -> View {
        let mut v = View::default();
        v.classes
            .insert("local-path".into(), class("WaitForFirstConsumer", "p"));
        v.classes.insert("fast".into(), class("Immediate", "p"));
        v.classes.insert(
            "manual".into(),
            class("WaitForFirstConsumer", NO_PROVISIONER),
        );
        v
    }

    fn add(v: &mut View, c: PersistentVolumeClaim) {
        let key = format!("ns/{}", c.metadata.name.clone().unwrap());
        v.claims.insert(key, c);
    }

    #[test]
    fn a_pod_without_claims_is_ready() {
        assert_eq!(
            decide(&pod(&[]), "n1", &labels("n1"), &view()),
            VolumeBinding::Ready
        );
    }

    #[test]
    fn a_missing_claim_keeps_the_pod_pending_as_the_scheduler_says() {
        let got = decide(&pod(&["data"]), "n1", &labels("n1"), &view());
        assert_eq!(
            got,
            VolumeBinding::Wait("persistentvolumeclaim \"data\" not found".into())
        );
    }

    #[test]
    fn an_unbound_wait_for_first_consumer_claim_is_given_this_node() {
        let mut v = view();
        add(&mut v, claim("data", Some("local-path"), None));
        let got = decide(&pod(&["data"]), "n1", &labels("n1"), &v);
        assert_eq!(got, VolumeBinding::SelectNode(vec!["data".into()]));
    }

    #[test]
    fn a_claim_provisioning_here_keeps_the_pod_pending_until_it_is_bound() {
        let mut v = view();
        add(&mut v, claim("data", Some("local-path"), Some("n1")));
        let got = decide(&pod(&["data"]), "n1", &labels("n1"), &v);
        assert!(
            matches!(got, VolumeBinding::Wait(ref w) if w.contains("to be provisioned by p")),
            "{got:?}"
        );
        add(
            &mut v,
            bound(claim("data", Some("local-path"), Some("n1")), "pv1"),
        );
        v.volumes.insert("pv1".into(), pinned("n1"));
        assert_eq!(
            decide(&pod(&["data"]), "n1", &labels("n1"), &v),
            VolumeBinding::Ready
        );
    }

    #[test]
    fn a_volume_pinned_to_another_node_is_not_this_nodes_to_bind() {
        let mut v = view();
        add(
            &mut v,
            bound(claim("data", Some("local-path"), Some("n2")), "pv1"),
        );
        v.volumes.insert("pv1".into(), pinned("n2"));
        let got = decide(&pod(&["data"]), "n1", &labels("n1"), &v);
        assert!(
            matches!(got, VolumeBinding::Wait(ref w) if w.contains("volume node affinity conflict")),
            "{got:?}"
        );
        assert_eq!(
            decide(&pod(&["data"]), "n2", &labels("n2"), &v),
            VolumeBinding::Ready
        );
    }

    #[test]
    fn a_claim_selected_for_another_node_is_left_to_it() {
        let mut v = view();
        add(&mut v, claim("data", Some("local-path"), Some("n2")));
        let got = decide(&pod(&["data"]), "n1", &labels("n1"), &v);
        assert!(
            matches!(got, VolumeBinding::Wait(ref w) if w.contains("for node \"n2\"")),
            "{got:?}"
        );
    }

    #[test]
    fn immediate_classless_and_manual_claims_wait_for_a_volume() {
        let mut v = view();
        add(&mut v, claim("a", Some("fast"), None));
        add(&mut v, claim("b", None, None));
        add(&mut v, claim("c", Some("manual"), None));
        add(&mut v, claim("d", Some("gone"), None));
        let wait = |c: &str| decide(&pod(&[c]), "n1", &labels("n1"), &v);
        let immediate =
            VolumeBinding::Wait("pod has unbound immediate PersistentVolumeClaims".into());
        assert_eq!(wait("a"), immediate);
        assert_eq!(wait("b"), immediate);
        assert!(
            matches!(wait("c"), VolumeBinding::Wait(w) if w.contains("didn't find available persistent volumes"))
        );
        assert_eq!(
            wait("d"),
            VolumeBinding::Wait("storageclass.storage.k8s.io \"gone\" not found".into())
        );
    }

    #[test]
    fn no_claim_is_given_a_node_while_another_claim_blocks_the_pod() {
        let mut v = view();
        add(&mut v, claim("data", Some("local-path"), None));
        let got = decide(&pod(&["data", "missing"]), "n1", &labels("n1"), &v);
        assert_eq!(
            got,
            VolumeBinding::Wait("persistentvolumeclaim \"missing\" not found".into())
        );
    }

    #[test]
    fn a_claim_being_deleted_or_whose_volume_is_missing_blocks_the_pod() {
        let mut v = view();
        let mut deleting = claim("a", Some("local-path"), None);
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        add(&mut v, deleting);
        add(
            &mut v,
            bound(claim("b", Some("local-path"), Some("n1")), "gone"),
        );
        let wait = |c: &str| decide(&pod(&[c]), "n1", &labels("n1"), &v);
        assert_eq!(
            wait("a"),
            VolumeBinding::Wait("persistentvolumeclaim \"a\" is being deleted".into())
        );
        assert_eq!(
            wait("b"),
            VolumeBinding::Wait("persistentvolume \"gone\" not found".into())
        );
    }
}
