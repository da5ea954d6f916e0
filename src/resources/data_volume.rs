//! Where a member keeps its data: the volume's name in the pod, its mount and etcd's data
//! directory, shared by the member pod and the restore containers.

use k8s_openapi::api::core::v1::Pod;

/// Name of the member's data volume in its pod.
pub(crate) const DATA_VOLUME: &str = "etcd-data";
/// Where the member's data volume is mounted.
pub(crate) const DATA_MOUNT: &str = "/var/etcd";
/// etcd's data directory inside the volume.
pub(crate) const DATA_DIR: &str = "/var/etcd/data";

/// Whether the pod's data volume is a PersistentVolumeClaim (else an emptyDir).
pub(crate) fn data_on_claim(pod: &Pod) -> bool {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .any(|v| v.name == DATA_VOLUME && v.persistent_volume_claim.is_some())
}
