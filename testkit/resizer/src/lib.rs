//! Volume expansion for the local environment's directory volumes (test rig, not
//! product). A directory has no size to grow, and Rancher's local-path-provisioner (the
//! environment's provisioner) has no resizer sidecar, so this is the part of the storage
//! stack written here: the rules of an expansion ([`resize`]) on sizes compared as bytes
//! (by the operator's own parser, `etcd_operator_core::quantity`), used by the
//! `etcd-operator-resizer` binary for the claims of one provisioner.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

pub mod resize;

/// The storage request of a claim (`spec.resources.requests.storage`).
pub fn requested(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.as_str())
}

/// Whether `claim` was provisioned by `provisioner` (the annotation the PersistentVolume
/// controller sets when it hands a claim to an external provisioner).
pub fn provisioned_by(claim: &PersistentVolumeClaim, provisioner: &str) -> bool {
    let annotations = claim.metadata.annotations.as_ref();
    [
        "volume.kubernetes.io/storage-provisioner",
        "volume.beta.kubernetes.io/storage-provisioner",
    ]
    .iter()
    .any(|key| annotations.and_then(|a| a.get(*key)).map(String::as_str) == Some(provisioner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(annotations: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "c", "annotations": annotations}}))
            .unwrap()
    }

    #[test]
    fn a_claim_is_the_provisioners_by_either_annotation_and_no_other() {
        let ga =
            claim(json!({"volume.kubernetes.io/storage-provisioner": "rancher.io/local-path"}));
        let beta = claim(
            json!({"volume.beta.kubernetes.io/storage-provisioner": "rancher.io/local-path"}),
        );
        let other = claim(json!({"volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"}));
        assert!(provisioned_by(&ga, "rancher.io/local-path"));
        assert!(provisioned_by(&beta, "rancher.io/local-path"));
        assert!(!provisioned_by(&other, "rancher.io/local-path"));
        assert!(!provisioned_by(&claim(json!({})), "rancher.io/local-path"));
    }
}
