//! A pod's `persistentVolumeClaim` volume resolved to the directory the node mounts, as
//! the kubelet's volume manager resolves it: the claim, bound; its volume, bound to that
//! claim, usable on this node, a local (or hostPath) directory that exists.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::{Api, Client};

use super::{affinity, provision};

/// Why a claim cannot be mounted (yet).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    /// No such claim.
    #[error("persistentvolumeclaim {0:?} not found")]
    ClaimNotFound(String),
    /// The claim is going away.
    #[error("persistentvolumeclaim {0:?} is being deleted")]
    ClaimDeleting(String),
    /// The claim has no volume yet.
    #[error("persistentvolumeclaim {0:?} is not bound")]
    NotBound(String),
    /// The claim names a volume that does not exist.
    #[error("persistentvolume {0:?} not found")]
    VolumeNotFound(String),
    /// The volume is bound to another claim (or another claim of that name).
    #[error("persistentvolume {volume:?} is not bound to persistentvolumeclaim {claim:?}")]
    OtherClaim {
        /// The volume.
        volume: String,
        /// The claim.
        claim: String,
    },
    /// The volume's node affinity excludes this node.
    #[error("persistentvolume {volume:?} cannot be used on node {node:?} (node affinity)")]
    OtherNode {
        /// The volume.
        volume: String,
        /// This node.
        node: String,
    },
    /// The volume is not a directory on the node.
    #[error(
        "persistentvolume {0:?} is neither a local nor a hostPath volume: this node mounts directories only"
    )]
    NotLocal(String),
    /// The volume's directory is missing.
    #[error("persistentvolume {volume:?}: directory {path} does not exist")]
    Missing {
        /// The volume.
        volume: String,
        /// Its directory.
        path: String,
    },
    /// Reading the claim or the volume failed.
    #[error("reading {what}: {error}")]
    Api {
        /// What was read.
        what: String,
        /// The error.
        error: String,
    },
}

/// The directory of the volume bound to the claim `name`, given the claim and the volume
/// it names as read (`None`: not found), for the node `node` with `labels`.
pub fn volume_dir(
    name: &str,
    claim: Option<&PersistentVolumeClaim>,
    pv: Option<&PersistentVolume>,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> Result<PathBuf, MountError> {
    let claim = claim.ok_or_else(|| MountError::ClaimNotFound(name.into()))?;
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(MountError::ClaimDeleting(name.into()));
    }
    let volume = bound_volume(claim).ok_or_else(|| MountError::NotBound(name.into()))?;
    let pv = pv.ok_or_else(|| MountError::VolumeNotFound(volume.into()))?;
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if claim_ref.and_then(|r| r.uid.as_deref()) != claim.metadata.uid.as_deref() {
        return Err(MountError::OtherClaim {
            volume: volume.into(),
            claim: name.into(),
        });
    }
    if !affinity::volume_allows(pv, node, labels) {
        return Err(MountError::OtherNode {
            volume: volume.into(),
            node: node.into(),
        });
    }
    provision::local_path(pv).ok_or_else(|| MountError::NotLocal(volume.into()))
}

/// The volume a claim is bound to: named, and the claim's phase `Bound`.
fn bound_volume(claim: &PersistentVolumeClaim) -> Option<&str> {
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    let volume = claim.spec.as_ref()?.volume_name.as_deref()?;
    (phase == Some("Bound") && !volume.is_empty()).then_some(volume)
}

/// The directory to mount for the claim `name` in `namespace`, read from the API now.
pub async fn claim_dir(
    client: &Client,
    namespace: &str,
    name: &str,
    node: &str,
) -> Result<PathBuf, MountError> {
    let api_error = |what: String| {
        move |e: kube::Error| MountError::Api {
            what,
            error: e.to_string(),
        }
    };
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(api_error(format!("persistentvolumeclaim {name:?}")))?;
    let pv = match claim.as_ref().and_then(bound_volume) {
        Some(volume) => Api::<PersistentVolume>::all(client.clone())
            .get_opt(volume)
            .await
            .map_err(api_error(format!("persistentvolume {volume:?}")))?,
        None => None,
    };
    let labels = crate::nodereg::node_labels(node);
    let dir = volume_dir(name, claim.as_ref(), pv.as_ref(), node, &labels)?;
    if !dir.is_dir() {
        return Err(MountError::Missing {
            volume: pv.and_then(|p| p.metadata.name).unwrap_or_default(),
            path: dir.display().to_string(),
        });
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels() -> BTreeMap<String, String> {
        [("kubernetes.io/hostname".to_string(), "n1".to_string())].into()
    }

    fn claim(phase: &str, volume: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u-1"},
            "spec": {"volumeName": volume},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn pv(uid: &str, node: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pvc-u-1"},
            "spec": {
                "local": {"path": "/state/volumes/pvc-u-1"},
                "claimRef": {"name": "data", "namespace": "ns", "uid": uid},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_bound_claim_resolves_to_its_volumes_directory() {
        let got = volume_dir(
            "data",
            Some(&claim("Bound", "pvc-u-1")),
            Some(&pv("u-1", "n1")),
            "n1",
            &labels(),
        );
        assert_eq!(got, Ok(PathBuf::from("/state/volumes/pvc-u-1")));
    }

    #[test]
    fn a_missing_or_unbound_claim_is_not_mounted() {
        let none = volume_dir("data", None, None, "n1", &labels());
        assert_eq!(none, Err(MountError::ClaimNotFound("data".into())));
        let pending = volume_dir(
            "data",
            Some(&claim("Pending", "pvc-u-1")),
            None,
            "n1",
            &labels(),
        );
        assert_eq!(pending, Err(MountError::NotBound("data".into())));
        let nameless = volume_dir("data", Some(&claim("Bound", "")), None, "n1", &labels());
        assert_eq!(nameless, Err(MountError::NotBound("data".into())));
    }

    #[test]
    fn a_volume_of_another_claim_or_node_is_not_mounted() {
        let c = claim("Bound", "pvc-u-1");
        let other_claim = volume_dir("data", Some(&c), Some(&pv("u-2", "n1")), "n1", &labels());
        assert!(
            matches!(other_claim, Err(MountError::OtherClaim { .. })),
            "{other_claim:?}"
        );
        let other_node = volume_dir("data", Some(&c), Some(&pv("u-1", "n2")), "n1", &labels());
        assert!(
            matches!(other_node, Err(MountError::OtherNode { .. })),
            "{other_node:?}"
        );
        let gone = volume_dir("data", Some(&c), None, "n1", &labels());
        assert_eq!(gone, Err(MountError::VolumeNotFound("pvc-u-1".into())));
    }
}
