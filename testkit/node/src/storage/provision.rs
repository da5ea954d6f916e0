//! Which claims this node provisions, the PersistentVolume it makes for one, and which of
//! its volumes it reclaims: pure decisions, performed by [`super::controller`].
//!
//! A claim is this node's to provision when the PersistentVolume controller asked our
//! provisioner for it (`volume.kubernetes.io/storage-provisioner`, set once the claim has
//! a selected node), its class names our provisioner, and the selected node is this one.
//! Its volume is a directory of the node's state, `<state>/volumes/pvc-<claim uid>`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    LocalVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;
use serde_json::json;

use super::{
    ANN_BETA_STORAGE_PROVISIONER, ANN_PROVISIONED_BY, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
    HOSTNAME_LABEL, PROVISIONER, affinity, annotation, claim_class, requested,
};

/// Why no volume can be made for a claim.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProvisionError {
    /// The claim asks for no storage.
    #[error("the claim requests no storage (spec.resources.requests.storage)")]
    NoRequest,
    /// Raw block volumes need a device; this node has directories only.
    #[error("volumeMode Block is not supported: this node provisions directories")]
    Block,
}

/// The name of the volume provisioned for a claim, as the PersistentVolume controller and
/// external provisioners name it.
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or_default())
}

/// Whether `claim` is waiting for this node (`node`) to provision its volume; `class` is
/// the class it names.
pub fn wants_volume(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    node: &str,
) -> bool {
    let meta = &claim.metadata;
    let unbound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_none_or(str::is_empty);
    let asked = [ANN_STORAGE_PROVISIONER, ANN_BETA_STORAGE_PROVISIONER]
        .iter()
        .any(|key| annotation(meta, key) == Some(PROVISIONER));
    unbound
        && meta.deletion_timestamp.is_none()
        && asked
        && class.is_some_and(|c| c.provisioner == PROVISIONER)
        && annotation(meta, ANN_SELECTED_NODE) == Some(node)
}

/// The PersistentVolume for `claim` of `class` on `node`, at `path`: the claim's request,
/// access modes and volume mode, the class's reclaim policy (Delete unless it says
/// otherwise), pinned to the node and bound in advance to the claim (`claimRef`).
pub fn volume_for(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &str,
    path: &Path,
) -> Result<PersistentVolume, ProvisionError> {
    let spec = claim.spec.clone().unwrap_or_default();
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(ProvisionError::Block);
    }
    let size = requested(claim).ok_or(ProvisionError::NoRequest)?;
    let node_affinity: VolumeNodeAffinity = serde_json::from_value(json!({
        "required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
        ]}]}
    }))
    .expect("a node affinity");
    Ok(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(volume_name(claim)),
            annotations: Some([(ANN_PROVISIONED_BY.to_string(), PROVISIONER.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([(
                "storage".to_string(),
                Quantity(size.to_string()),
            )])),
            access_modes: spec.access_modes,
            volume_mode: Some(spec.volume_mode.unwrap_or_else(|| "Filesystem".into())),
            storage_class_name: claim_class(claim).map(String::from),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            local: Some(LocalVolumeSource {
                path: path.display().to_string(),
                fs_type: None,
            }),
            node_affinity: Some(node_affinity),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                name: claim.metadata.name.clone(),
                namespace: claim.metadata.namespace.clone(),
                uid: claim.metadata.uid.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    })
}

/// Whether `pv` is a volume this node (`node`, its volumes under `volumes_dir`) provisioned:
/// our provisioner's, pinned to this node, its directory where this node puts it.
pub fn is_ours(pv: &PersistentVolume, node: &str, volumes_dir: &Path) -> bool {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    annotation(&pv.metadata, ANN_PROVISIONED_BY) == Some(PROVISIONER)
        && affinity::pinned_node(pv) == Some(node)
        && local_path(pv) == Some(volumes_dir.join(name))
}

/// The directory of a local volume.
pub fn local_path(pv: &PersistentVolume) -> Option<PathBuf> {
    let spec = pv.spec.as_ref()?;
    spec.local
        .as_ref()
        .map(|l| PathBuf::from(&l.path))
        .or_else(|| spec.host_path.as_ref().map(|h| PathBuf::from(&h.path)))
}

/// The directory to remove (then the volume to delete) when `pv`, one of ours, was
/// released by its claim under reclaim policy Delete.
pub fn to_reclaim(pv: &PersistentVolume, node: &str, volumes_dir: &Path) -> Option<PathBuf> {
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let policy = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
    (released && policy == Some("Delete") && is_ours(pv, node, volumes_dir))
        .then(|| local_path(pv))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeStatus;

    fn class() -> StorageClass {
        serde_json::from_value(json!({
            "metadata": {"name": "local-path"},
            "provisioner": PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
        }))
        .unwrap()
    }

    fn claim(annotations: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u-1", "annotations": annotations},
            "spec": {
                "storageClassName": "local-path",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }))
        .unwrap()
    }

    fn asked(node: &str) -> serde_json::Value {
        json!({ANN_SELECTED_NODE: node, ANN_STORAGE_PROVISIONER: PROVISIONER,
               ANN_BETA_STORAGE_PROVISIONER: PROVISIONER})
    }

    #[test]
    fn a_claim_is_provisioned_by_the_selected_node_once_the_controller_asked_for_us() {
        let c = class();
        assert!(wants_volume(&claim(asked("n1")), Some(&c), "n1"));
        assert!(!wants_volume(&claim(asked("n1")), Some(&c), "n2"));
        let not_asked = claim(json!({ANN_SELECTED_NODE: "n1"}));
        assert!(!wants_volume(&not_asked, Some(&c), "n1"));
        let beta_only =
            claim(json!({ANN_SELECTED_NODE: "n1", ANN_BETA_STORAGE_PROVISIONER: PROVISIONER}));
        assert!(wants_volume(&beta_only, Some(&c), "n1"));
    }

    #[test]
    fn bound_deleting_or_foreign_claims_are_not_provisioned() {
        let c = class();
        let mut bound = claim(asked("n1"));
        bound.spec.as_mut().unwrap().volume_name = Some("pvc-u-1".into());
        assert!(!wants_volume(&bound, Some(&c), "n1"));
        let mut deleting = claim(asked("n1"));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert!(!wants_volume(&deleting, Some(&c), "n1"));
        let mut other = class();
        other.provisioner = "example.com/other".into();
        assert!(!wants_volume(&claim(asked("n1")), Some(&other), "n1"));
        assert!(!wants_volume(&claim(asked("n1")), None, "n1"));
    }

    #[test]
    fn the_volume_made_for_a_claim_is_its_directory_pinned_to_the_node_and_bound_to_it() {
        let dir = Path::new("/state/volumes/pvc-u-1");
        let pv = volume_for(&claim(asked("n1")), &class(), "n1", dir).unwrap();
        let want: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pvc-u-1", "annotations": {ANN_PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem",
                "storageClassName": "local-path",
                "persistentVolumeReclaimPolicy": "Delete",
                "local": {"path": "/state/volumes/pvc-u-1"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}},
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "name": "data", "namespace": "ns", "uid": "u-1"},
            },
        }))
        .unwrap();
        assert_eq!(pv, want);
        assert!(is_ours(&pv, "n1", Path::new("/state/volumes")));
        assert!(!is_ours(&pv, "n2", Path::new("/state/volumes")));
        assert!(!is_ours(&pv, "n1", Path::new("/elsewhere/volumes")));
    }

    #[test]
    fn the_class_reclaim_policy_is_kept_and_block_or_sizeless_claims_are_refused() {
        let mut retain = class();
        retain.reclaim_policy = Some("Retain".into());
        let pv = volume_for(&claim(asked("n1")), &retain, "n1", Path::new("/v")).unwrap();
        assert_eq!(
            pv.spec.unwrap().persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
        let mut block = claim(asked("n1"));
        block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
        assert_eq!(
            volume_for(&block, &class(), "n1", Path::new("/v")),
            Err(ProvisionError::Block)
        );
        let mut sizeless = claim(asked("n1"));
        sizeless.spec.as_mut().unwrap().resources = None;
        assert_eq!(
            volume_for(&sizeless, &class(), "n1", Path::new("/v")),
            Err(ProvisionError::NoRequest)
        );
    }

    #[test]
    fn only_our_released_volumes_under_delete_are_reclaimed() {
        let volumes = Path::new("/state/volumes");
        let mut pv = volume_for(
            &claim(asked("n1")),
            &class(),
            "n1",
            &volumes.join("pvc-u-1"),
        )
        .unwrap();
        assert_eq!(to_reclaim(&pv, "n1", volumes), None);
        pv.status = Some(PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..Default::default()
        });
        assert_eq!(
            to_reclaim(&pv, "n1", volumes),
            Some(volumes.join("pvc-u-1"))
        );
        assert_eq!(to_reclaim(&pv, "n2", volumes), None);
        let mut retained = pv.clone();
        retained
            .spec
            .as_mut()
            .unwrap()
            .persistent_volume_reclaim_policy = Some("Retain".into());
        assert_eq!(to_reclaim(&retained, "n1", volumes), None);
        let mut elsewhere = pv.clone();
        elsewhere
            .spec
            .as_mut()
            .unwrap()
            .local
            .as_mut()
            .unwrap()
            .path = "/etc".into();
        assert_eq!(to_reclaim(&elsewhere, "n1", volumes), None);
    }
}
